//! The built-in tools and the run-time capability check, end to end on a real file system:
//! every output is checked against its tool's declared output schema.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oracle_core::State;
use oracle_core::capability::Capability;
use oracle_runtime::access::{self, Verdict};
use oracle_runtime::tool::{
    Effect, OUTPUT_BYTES_MAX_DEFAULT, Registry, TIMEOUT_MS_DEFAULT, ToolContext, ToolError,
    ToolOutput, needed_capability,
};
use oracle_runtime::{catalogue, tools};
use serde_json::{Value, json};

/// A working directory (canonical, as the runtime passes it) and the context of a call in it.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    state: State,
    registry: Registry,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        Fixture {
            _dir: dir,
            root,
            state: State::new(),
            registry: tools::builtin(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn put(&self, rel: &str, bytes: &[u8]) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    }

    fn cx<'a>(&'a self, resolved: Option<&'a Path>) -> ToolContext<'a> {
        ToolContext {
            run: None,
            step: "step",
            attempt: 1,
            tick: 7,
            seed: 42,
            state: &self.state,
            root: &self.root,
            resolved,
            timeout_ms: TIMEOUT_MS_DEFAULT,
            output_bytes_max: OUTPUT_BYTES_MAX_DEFAULT,
            access: None,
            earlier_failures: &[],
        }
    }

    /// Calls `tool` the way the runtime does: input schema, then (for a path capability) the
    /// capability check under the grant `*:*:**` for the resolved path, then the call, then the
    /// output schema.
    fn call_with(
        &self,
        tool: &str,
        input: Value,
        cx: ToolContext<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let t = self.registry.get(tool).unwrap();
        t.input.check(&input).unwrap();
        let resolved = match needed_capability(&t.decl, &input).unwrap() {
            Some(needed) => {
                match access::check(&["*:*:**".parse().unwrap()], &needed, &self.root) {
                    Verdict::Allowed { resolved, .. } => resolved,
                    Verdict::Denied { reason } => panic!("denied: {reason}"),
                }
            }
            None => None,
        };
        let cx = ToolContext {
            run: None,
            resolved: resolved.as_deref(),
            ..cx
        };
        let out = t.tool.call(&input, &cx)?;
        if let Err(e) = t.output.check(&out.output) {
            panic!("`{tool}` output {} breaks its schema: {e}", out.output);
        }
        Ok(out)
    }

    fn call(&self, tool: &str, input: Value) -> Result<Value, ToolError> {
        self.call_with(tool, input, self.cx(None)).map(|o| o.output)
    }

    fn fails(&self, tool: &str, input: Value) -> String {
        match self.call(tool, input) {
            Err(ToolError::Failed(m)) => {
                assert!(
                    !m.contains(self.root.to_str().unwrap()),
                    "no absolute paths in messages: {m}"
                );
                m
            }
            other => panic!("expected a failure, got {other:?}"),
        }
    }
}

/// A capability as a call builds it, field by field: a needed scope may hold `..`, which
/// parsing (the way grants enter) refuses.
fn cap(s: &str) -> Capability {
    let mut parts = s.splitn(3, ':');
    let mut next = || parts.next().unwrap().to_owned();
    Capability {
        domain: next(),
        action: next(),
        scope: next(),
    }
}

fn caps(list: &[&str]) -> Vec<Capability> {
    list.iter().map(|s| cap(s)).collect()
}

// ---------------------------------------------------------------------------------------------
// The registry and the catalogue

#[test]
fn registry_holds_every_builtin_tool_with_compiled_schemas() {
    let r = tools::builtin();
    let names: Vec<&str> = r.iter().map(|t| t.decl.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "agent",
            "auction.advance",
            "auction.bid",
            "auction.check",
            "auction.open",
            "auction.status",
            "auction.submit",
            "clock.now",
            "clock.wall",
            "evolve.propose",
            "fs.list",
            "fs.read",
            "fs.write",
            "http.request",
            "human.ask",
            "json.get",
            "json.parse",
            "kv.get",
            "kv.set",
            "llm.chat",
            "memory.assert",
            "memory.history",
            "memory.query",
            "proc.exec",
            "random.int",
            "retry.backoff",
            "sleep",
            "spawn",
            "text.contains",
            "text.count",
            "text.lines",
            "text.split",
            "wait.event",
        ]
    );
    for t in r.iter() {
        // Compiled once at registration; the sources are what the declaration says.
        assert_eq!(t.input.source(), &t.decl.input_schema);
        assert_eq!(t.output.source(), &t.decl.output_schema);
        let expected = match t.decl.name.as_str() {
            "fs.read" | "fs.write" | "fs.list" | "proc.exec" | "llm.chat" | "http.request"
            | "clock.wall" => Effect::Impure,
            "human.ask" | "sleep" | "retry.backoff" | "wait.event" | "spawn" => Effect::Ask,
            "memory.assert" | "memory.query" | "memory.history" => Effect::Domain("memory"),
            name if name.starts_with("auction.") => Effect::Domain("economy"),
            _ => Effect::Pure,
        };
        assert_eq!(t.decl.effect, expected, "{}", t.decl.name);
        // Unknown arguments are refused.
        let mut extra = json!({"no_such_argument": 1});
        for arg in t.decl.spec().args.iter().filter(|a| a.required) {
            extra[&arg.name] = json!("x");
        }
        assert!(t.input.check(&extra).is_err(), "{}", t.decl.name);
    }
}

/// A tool, its arguments (name, type, required) and the capability it needs.
type CatalogueRow<'a> = (&'a str, Vec<(&'a str, &'a str, bool)>, Option<&'a str>);

#[test]
fn catalogue_lists_the_arguments_plans_were_written_against() {
    // (tool, [(argument, type, required)], capability): the hand-written list the plan
    // compiler used before the tools existed.
    let expected: Vec<CatalogueRow> = vec![
        (
            "agent",
            vec![
                ("model", "string", true),
                ("instructions", "string", true),
                ("task", "any", true),
                ("tools", "list", true),
                ("max_turns", "int", false),
                ("output", "map", false),
            ],
            Some("llm:chat:<model>"),
        ),
        ("auction.advance", vec![("to", "int", true)], None),
        (
            "auction.bid",
            vec![
                ("agent", "string", true),
                ("artifact", "string", true),
                ("amount", "int", true),
            ],
            None,
        ),
        ("auction.check", vec![("artifact", "string", true)], None),
        (
            "auction.open",
            vec![
                ("accounts", "map", true),
                ("bidding_window", "int", false),
                ("first_auction_tick", "int", false),
                ("minimum_bid", "int", false),
                ("mint_ratio", "int", false),
                ("period", "int", false),
                ("pricing", "string", false),
                ("refund_on_scoring_failure", "bool", false),
                ("slots_per_auction", "int", false),
                ("tie_break", "string", false),
            ],
            None,
        ),
        ("auction.status", vec![], None),
        (
            "auction.submit",
            vec![
                ("agent", "string", true),
                ("artifact", "string", true),
                ("content", "string", true),
            ],
            None,
        ),
        ("clock.now", vec![], None),
        ("clock.wall", vec![], None),
        (
            "evolve.propose",
            vec![("source", "string", true), ("reason", "string", true)],
            Some("evolve:propose:self"),
        ),
        (
            "fs.list",
            vec![("path", "string", true)],
            Some("fs:list:<path>"),
        ),
        (
            "fs.read",
            vec![("path", "string", true)],
            Some("fs:read:<path>"),
        ),
        (
            "fs.write",
            vec![("path", "string", true), ("content", "string", true)],
            Some("fs:write:<path>"),
        ),
        (
            "http.request",
            vec![
                ("method", "any", true),
                ("url", "string", true),
                ("body", "string", false),
                ("headers", "map", false),
                ("json", "any", false),
            ],
            Some("net:http:<url>"),
        ),
        (
            "human.ask",
            vec![
                ("question", "string", true),
                // A duration or an RFC 3339 instant, checked by `plan check` (E0225).
                ("deadline", "time", false),
                ("on_timeout", "any", false),
                ("schema", "map", false),
            ],
            None,
        ),
        (
            "json.get",
            vec![("value", "any", true), ("path", "string", true)],
            None,
        ),
        ("json.parse", vec![("text", "string", true)], None),
        (
            "kv.get",
            vec![("key", "string", true)],
            Some("kv:get:<key>"),
        ),
        (
            "kv.set",
            vec![("key", "string", true), ("value", "any", true)],
            Some("kv:set:<key>"),
        ),
        (
            "llm.chat",
            vec![
                ("model", "string", true),
                ("messages", "list", true),
                ("max_tokens", "int", false),
                ("schema", "map", false),
                ("seed", "int", false),
                ("stop", "list", false),
                ("temperature_pct", "int", false),
                ("tools", "list", false),
            ],
            Some("llm:chat:<model>"),
        ),
        (
            "memory.assert",
            vec![
                ("subject", "string", true),
                ("predicate", "string", true),
                ("value", "any", true),
                ("provenance", "string", true),
                ("cardinality", "string", false),
                ("criticality", "string", false),
                ("derived_from", "list", false),
                ("valid", "map", false),
            ],
            None,
        ),
        (
            "memory.history",
            vec![
                ("subject", "string", true),
                ("as_of", "int", false),
                ("predicate", "string", false),
            ],
            None,
        ),
        (
            "memory.query",
            vec![
                ("subject", "string", true),
                ("predicate", "string", true),
                ("as_of", "int", false),
                ("deadline", "time", false),
                ("on_timeout", "any", false),
                ("require", "string", false),
                ("valid_at", "int", false),
            ],
            None,
        ),
        (
            "proc.exec",
            vec![
                ("program", "string", true),
                ("args", "list", false),
                ("env", "map", false),
                ("stdin", "string", false),
            ],
            Some("proc:exec:<program>"),
        ),
        (
            "random.int",
            vec![("min", "int", true), ("max", "int", true)],
            None,
        ),
        (
            "sleep",
            vec![("for", "string", false), ("until", "string", false)],
            None,
        ),
        (
            "spawn",
            vec![
                ("plan", "string", true),
                ("detach", "bool", false),
                ("inputs", "map", false),
                ("key", "string", false),
            ],
            None,
        ),
        (
            "text.contains",
            vec![("text", "string", true), ("pattern", "string", true)],
            None,
        ),
        ("text.count", vec![("text", "string", true)], None),
        ("text.lines", vec![("text", "string", true)], None),
        (
            "text.split",
            vec![("text", "string", true), ("separator", "string", true)],
            None,
        ),
        (
            "wait.event",
            vec![
                ("name", "string", true),
                ("deadline", "time", false),
                ("on_timeout", "any", false),
                ("schema", "map", false),
            ],
            None,
        ),
    ];
    let catalogue = catalogue::builtin();
    let capabilities: Vec<Option<String>> = catalogue
        .tools()
        .map(|t| {
            t.capability.as_ref().map(|c| match &c.scope {
                oracle_plan::ScopeFrom::Arg(arg) => format!("{}:{}:<{arg}>", c.domain, c.action),
                // `evolve.propose` proposes a change to the running plan itself.
                oracle_plan::ScopeFrom::Fixed(scope) => {
                    format!("{}:{}:{scope}", c.domain, c.action)
                }
            })
        })
        .collect();
    let actual: Vec<CatalogueRow> = catalogue
        .tools()
        .zip(&capabilities)
        .map(|(t, c)| {
            (
                t.name.as_str(),
                t.args
                    .iter()
                    .map(|a| (a.name.as_str(), a.ty.as_str(), a.required))
                    .collect(),
                c.as_deref(),
            )
        })
        .collect();
    assert_eq!(actual, expected);
}

// ---------------------------------------------------------------------------------------------
// Capability checks

fn allowed(v: Verdict) -> (String, Option<PathBuf>) {
    match v {
        Verdict::Allowed { grant, resolved } => (grant, resolved),
        Verdict::Denied { reason } => panic!("denied: {reason}"),
    }
}

fn denied(v: Verdict) -> String {
    match v {
        Verdict::Denied { reason } => reason,
        Verdict::Allowed { grant, .. } => panic!("allowed by {grant}"),
    }
}

#[test]
fn access_allows_a_granted_read() {
    let f = Fixture::new();
    f.put("data/notes.txt", b"hi");
    let grants = caps(&["fs:read:data/**"]);
    let (grant, resolved) = allowed(access::check(
        &grants,
        &cap("fs:read:data/notes.txt"),
        &f.root,
    ));
    assert_eq!(grant, "fs:read:data/**");
    assert_eq!(resolved, Some(f.path("data/notes.txt")));
    // `.` and `..` that stay inside are resolved first.
    let (_, resolved) = allowed(access::check(
        &grants,
        &cap("fs:read:./data/x/../notes.txt"),
        &f.root,
    ));
    assert_eq!(resolved, Some(f.path("data/notes.txt")));
}

#[test]
fn access_denies_dot_dot_escapes() {
    let f = Fixture::new();
    let grants = caps(&["fs:read:**"]);
    assert_eq!(
        denied(access::check(&grants, &cap("fs:read:../x"), &f.root)),
        "`../x` climbs out of the working directory"
    );
    assert_eq!(
        denied(access::check(
            &grants,
            &cap("fs:read:data/../../x"),
            &f.root
        )),
        "`data/../../x` climbs out of the working directory"
    );
}

#[test]
fn access_handles_absolute_paths_by_where_they_point() {
    let f = Fixture::new();
    f.put("data/a.txt", b"a");
    let grants = caps(&["fs:read:data/**"]);
    let inside = format!("fs:read:{}", f.path("data/a.txt").display());
    let (grant, resolved) = allowed(access::check(&grants, &cap(&inside), &f.root));
    assert_eq!(grant, "fs:read:data/**");
    assert_eq!(resolved, Some(f.path("data/a.txt")));

    let reason = denied(access::check(&grants, &cap("fs:read:/etc/passwd"), &f.root));
    assert_eq!(
        reason,
        "no grant covers `fs:read:/etc/passwd` (granted: fs:read:data/**)"
    );
    // A relative grant never covers an absolute path outside, even `**`; an absolute one does.
    assert!(matches!(
        access::check(&caps(&["fs:read:**"]), &cap("fs:read:/etc/passwd"), &f.root),
        Verdict::Denied { .. }
    ));
    let (grant, resolved) = allowed(access::check(
        &caps(&["fs:read:**", "fs:read:/**"]),
        &cap("fs:read:/etc/passwd"),
        &f.root,
    ));
    assert_eq!(grant, "fs:read:/**");
    assert!(resolved.unwrap().is_absolute());
}

#[test]
fn access_denies_a_symlink_pointing_outside() {
    let f = Fixture::new();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), b"s").unwrap();
    fs::create_dir_all(f.path("fixtures/data")).unwrap();
    symlink(outside.path().join("secret"), f.path("fixtures/data/link")).unwrap();
    let reason = denied(access::check(
        &caps(&["fs:read:fixtures/**"]),
        &cap("fs:read:fixtures/data/link"),
        &f.root,
    ));
    assert_eq!(
        reason,
        "`fixtures/data/link` resolves through a symlink to a place outside the working directory"
    );
    assert!(!reason.contains(outside.path().to_str().unwrap()));
    // Even the widest grant does not follow it out.
    assert!(matches!(
        access::check(
            &caps(&["*:*:**"]),
            &cap("fs:read:fixtures/data/link"),
            &f.root
        ),
        Verdict::Denied { .. }
    ));
}

#[test]
fn access_follows_a_symlink_to_another_place_only_if_granted() {
    let f = Fixture::new();
    f.put("b/secret", b"s");
    f.put("public/x", b"x");
    fs::create_dir_all(f.path("a")).unwrap();
    symlink("../b/secret", f.path("a/link")).unwrap();
    symlink("../public/x", f.path("a/ok")).unwrap();
    let grants = caps(&["fs:read:a/*", "fs:read:public/**"]);
    assert_eq!(
        denied(access::check(&grants, &cap("fs:read:a/link"), &f.root)),
        "`a/link` resolves through a symlink to `b/secret`, which no grant covers"
    );
    let (grant, resolved) = allowed(access::check(&grants, &cap("fs:read:a/ok"), &f.root));
    assert_eq!(
        grant, "fs:read:a/*",
        "the grant covering the path as written"
    );
    assert_eq!(resolved, Some(f.path("public/x")));
}

#[test]
fn access_resolves_symlinks_in_parent_directories() {
    let f = Fixture::new();
    f.put("private/keys/k", b"k");
    fs::create_dir_all(f.path("data")).unwrap();
    symlink("../private", f.path("data/sub")).unwrap();
    let grants = caps(&["fs:read:data/**"]);
    assert_eq!(
        denied(access::check(
            &grants,
            &cap("fs:read:data/sub/keys/k"),
            &f.root
        )),
        "`data/sub/keys/k` resolves through a symlink to `private/keys/k`, which no grant covers"
    );
    // A directory symlink to outside, with the file below not existing yet (a write).
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), f.path("data/out")).unwrap();
    assert_eq!(
        denied(access::check(
            &caps(&["fs:write:data/**"]),
            &cap("fs:write:data/out/new/file.txt"),
            &f.root
        )),
        "`data/out/new/file.txt` resolves through a symlink to a place outside the working directory"
    );
}

#[test]
fn access_denies_a_symlink_to_nothing() {
    // Whatever appeared at the target later would be reached through it.
    let f = Fixture::new();
    fs::create_dir_all(f.path("data")).unwrap();
    symlink("../../elsewhere/new", f.path("data/later")).unwrap();
    let grants = caps(&["fs:*:data/**"]);
    for needed in ["fs:write:data/later", "fs:write:data/later/file.txt"] {
        let scope = needed.trim_start_matches("fs:write:");
        assert_eq!(
            denied(access::check(&grants, &cap(needed), &f.root)),
            format!("`{scope}` goes through a symlink whose target does not exist")
        );
    }
}

#[test]
fn access_allows_writing_a_file_that_does_not_exist_yet() {
    let f = Fixture::new();
    fs::create_dir_all(f.path("out")).unwrap();
    let grants = caps(&["fs:write:out/**"]);
    let (_, resolved) = allowed(access::check(
        &grants,
        &cap("fs:write:out/a/b/new.txt"),
        &f.root,
    ));
    assert_eq!(resolved, Some(f.path("out/a/b/new.txt")));
    // Not even the granted directory needs to exist.
    let (_, resolved) = allowed(access::check(
        &caps(&["fs:write:fresh/**"]),
        &cap("fs:write:fresh/x.txt"),
        &f.root,
    ));
    assert_eq!(resolved, Some(f.path("fresh/x.txt")));
}

#[test]
fn access_star_stays_in_one_component_and_double_star_crosses() {
    let f = Fixture::new();
    f.put("data/a.txt", b"");
    f.put("data/sub/b.txt", b"");
    let one = caps(&["fs:read:data/*"]);
    let any = caps(&["fs:read:data/**"]);
    assert!(matches!(
        access::check(&one, &cap("fs:read:data/a.txt"), &f.root),
        Verdict::Allowed { .. }
    ));
    assert!(matches!(
        access::check(&one, &cap("fs:read:data/sub/b.txt"), &f.root),
        Verdict::Denied { .. }
    ));
    assert!(matches!(
        access::check(&any, &cap("fs:read:data/sub/b.txt"), &f.root),
        Verdict::Allowed { .. }
    ));
}

#[test]
fn access_checks_proc_and_kv_lexically() {
    let f = Fixture::new();
    let grants = caps(&["proc:exec:echo", "proc:exec:./scripts/*", "kv:get:user/*"]);
    assert_eq!(
        allowed(access::check(&grants, &cap("proc:exec:echo"), &f.root)),
        ("proc:exec:echo".to_owned(), None)
    );
    assert!(matches!(
        access::check(&grants, &cap("proc:exec:./echo"), &f.root),
        Verdict::Denied { .. }
    ));
    assert!(matches!(
        access::check(&grants, &cap("proc:exec:cat"), &f.root),
        Verdict::Denied { .. }
    ));
    // Programs outside the working directory are not confined like files: `**` is any program.
    assert_eq!(
        allowed(access::check(
            &caps(&["proc:exec:**"]),
            &cap("proc:exec:/usr/bin/wc"),
            &f.root
        )),
        ("proc:exec:**".to_owned(), None)
    );
    assert_eq!(
        allowed(access::check(&grants, &cap("kv:get:user/name"), &f.root)),
        ("kv:get:user/*".to_owned(), None)
    );
}

#[test]
fn access_reasons_do_not_depend_on_the_working_directory() {
    let reasons = |f: &Fixture| {
        fs::create_dir_all(f.path("a")).unwrap();
        f.put("b/s", b"");
        let _ = symlink("../b/s", f.path("a/l"));
        let grants = caps(&["fs:read:a/**"]);
        ["fs:read:a/l", "fs:read:../x", "fs:read:/nope", "fs:read:c"].map(|c| {
            match access::check(&grants, &cap(c), &f.root) {
                Verdict::Denied { reason } => reason,
                Verdict::Allowed { grant, .. } => grant,
            }
        })
    };
    let (a, b) = (Fixture::new(), Fixture::new());
    assert_ne!(a.root, b.root);
    assert_eq!(reasons(&a), reasons(&b));
}

// ---------------------------------------------------------------------------------------------
// fs.read, fs.write, fs.list

#[test]
fn fs_read_returns_text_and_size() {
    let f = Fixture::new();
    f.put("data/notes.txt", "héllo\nworld\n".as_bytes());
    assert_eq!(
        f.call("fs.read", json!({"path": "data/notes.txt"}))
            .unwrap(),
        json!({"text": "héllo\nworld\n", "bytes": 13})
    );
}

#[test]
fn fs_read_refuses_missing_non_utf8_non_regular_and_large_files() {
    let f = Fixture::new();
    assert_eq!(
        f.fails("fs.read", json!({"path": "missing.txt"})),
        "cannot read `missing.txt`: it does not exist"
    );
    f.put("bin.dat", b"ok\xff\xfe");
    assert_eq!(
        f.fails("fs.read", json!({"path": "bin.dat"})),
        "`bin.dat` is not UTF-8 text (invalid byte at offset 2)"
    );
    fs::create_dir_all(f.path("dir")).unwrap();
    assert_eq!(
        f.fails("fs.read", json!({"path": "dir"})),
        "cannot read `dir`: it is a directory, not a regular file"
    );
    let fifo = f.path("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        // Would block forever if it were opened.
        assert_eq!(
            f.fails("fs.read", json!({"path": "pipe"})),
            "cannot read `pipe`: it is a named pipe, not a regular file"
        );
    }
    f.put("big.txt", &[b'x'; 100]);
    let small = ToolContext {
        run: None,
        output_bytes_max: 99,
        ..f.cx(None)
    };
    assert_eq!(
        f.call_with("fs.read", json!({"path": "big.txt"}), small),
        Err(ToolError::OutputTooLarge { limit: 99 })
    );
    let exact = ToolContext {
        run: None,
        output_bytes_max: 100,
        ..f.cx(None)
    };
    assert!(
        f.call_with("fs.read", json!({"path": "big.txt"}), exact)
            .is_ok()
    );
}

#[test]
fn fs_read_uses_the_resolved_path() {
    let f = Fixture::new();
    f.put("real.txt", b"real");
    f.put("decoy.txt", b"decoy");
    let resolved = f.path("real.txt");
    let t = f.registry.get("fs.read").unwrap();
    let out = t
        .tool
        .call(&json!({"path": "decoy.txt"}), &f.cx(Some(&resolved)))
        .unwrap();
    assert_eq!(out.output["text"], "real");
}

/// Names in `dir` that look like temporary files of `fs.write`.
fn temp_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".oracle-tmp."))
        .collect()
}

#[test]
fn fs_write_creates_and_replaces_atomically() {
    let f = Fixture::new();
    assert_eq!(
        f.call(
            "fs.write",
            json!({"path": "out/deep/er/a.txt", "content": "héllo"})
        )
        .unwrap(),
        json!({"bytes": 6})
    );
    assert_eq!(
        fs::read_to_string(f.path("out/deep/er/a.txt")).unwrap(),
        "héllo"
    );
    f.call(
        "fs.write",
        json!({"path": "out/deep/er/a.txt", "content": "new"}),
    )
    .unwrap();
    assert_eq!(
        fs::read_to_string(f.path("out/deep/er/a.txt")).unwrap(),
        "new"
    );
    assert_eq!(temp_files(&f.path("out/deep/er")), Vec::<String>::new());
    f.call("fs.write", json!({"path": "empty", "content": ""}))
        .unwrap();
    assert_eq!(fs::read(f.path("empty")).unwrap(), b"");
    assert_eq!(temp_files(&f.root), Vec::<String>::new());
}

#[test]
fn fs_write_keeps_the_permissions_of_the_file_it_replaces() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    f.put("run.sh", b"old");
    fs::set_permissions(f.path("run.sh"), fs::Permissions::from_mode(0o750)).unwrap();
    f.call("fs.write", json!({"path": "run.sh", "content": "new"}))
        .unwrap();
    let mode = fs::metadata(f.path("run.sh")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o750);
}

#[test]
fn fs_write_refuses_to_replace_a_directory() {
    let f = Fixture::new();
    fs::create_dir_all(f.path("d")).unwrap();
    assert_eq!(
        f.fails("fs.write", json!({"path": "d", "content": "x"})),
        "cannot write `d`: it is a directory, not a regular file"
    );
    assert!(f.path("d").is_dir());
    assert_eq!(temp_files(&f.root), Vec::<String>::new());
}

#[test]
fn fs_list_sorts_and_marks_directories() {
    let f = Fixture::new();
    f.put("d/b.txt", b"");
    f.put("d/A.txt", b"");
    f.put("d/sub/x", b"");
    f.put("d/é", b"");
    assert_eq!(
        f.call("fs.list", json!({"path": "d"})).unwrap(),
        json!({"entries": ["A.txt", "b.txt", "sub/", "é"]})
    );
    assert_eq!(
        f.fails("fs.list", json!({"path": "d/b.txt"})),
        "cannot list `d/b.txt`: it is not a directory"
    );
    assert_eq!(
        f.fails("fs.list", json!({"path": "nope"})),
        "cannot list `nope`: it does not exist"
    );
    let small = ToolContext {
        run: None,
        output_bytes_max: 5,
        ..f.cx(None)
    };
    assert_eq!(
        f.call_with("fs.list", json!({"path": "d"}), small),
        Err(ToolError::OutputTooLarge { limit: 5 })
    );
}

// ---------------------------------------------------------------------------------------------
// proc.exec

#[test]
fn proc_exec_runs_argv_and_feeds_stdin() {
    let f = Fixture::new();
    assert_eq!(
        f.call(
            "proc.exec",
            json!({"program": "echo", "args": ["a b", "$HOME", "*"]})
        )
        .unwrap(),
        json!({"status": 0, "stdout": "a b $HOME *\n", "stderr": ""}),
        "arguments reach the program as they are: no shell"
    );
    assert_eq!(
        f.call(
            "proc.exec",
            json!({"program": "cat", "stdin": "piped\ntext"})
        )
        .unwrap(),
        json!({"status": 0, "stdout": "piped\ntext", "stderr": ""})
    );
    // Without `stdin` the input is empty rather than inherited.
    assert_eq!(
        f.call("proc.exec", json!({"program": "cat"})).unwrap()["stdout"],
        ""
    );
}

#[test]
fn proc_exec_reports_status_stderr_and_signals() {
    let f = Fixture::new();
    assert_eq!(
        f.call("proc.exec", json!({"program": "false"})).unwrap()["status"],
        1
    );
    let out = f
        .call(
            "proc.exec",
            json!({"program": "sh", "args": ["-c", "echo oops >&2; exit 3"]}),
        )
        .unwrap();
    assert_eq!(out, json!({"status": 3, "stdout": "", "stderr": "oops\n"}));
    let out = f
        .call(
            "proc.exec",
            json!({"program": "sh", "args": ["-c", "kill -9 $$"]}),
        )
        .unwrap();
    assert_eq!(out["status"], Value::Null, "killed by a signal");
}

#[test]
fn proc_exec_runs_in_the_working_directory_with_only_path() {
    let f = Fixture::new();
    f.put("here.txt", b"");
    assert_eq!(
        f.call("proc.exec", json!({"program": "ls"})).unwrap()["stdout"],
        "here.txt\n"
    );
    let env = f.call("proc.exec", json!({"program": "env"})).unwrap();
    let names: Vec<&str> = env["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .filter_map(|l| l.split('=').next())
        .collect();
    // Exactly PATH: an empty environment (PATH dropped too) must fail this, as must any other
    // variable of the test's own environment leaking through.
    assert_eq!(names, ["PATH"], "{env}");
    let path = env["stdout"].as_str().unwrap().lines().next().unwrap_or("");
    assert!(path.len() > "PATH=".len(), "PATH has a value: {path}");
    // A relative program path is relative to the working directory.
    f.put("scripts/hi.sh", b"#!/bin/sh\necho hi from script\n");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(f.path("scripts/hi.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        f.call("proc.exec", json!({"program": "./scripts/hi.sh"}))
            .unwrap()["stdout"],
        "hi from script\n"
    );
}

#[test]
fn proc_exec_names_a_missing_program_and_bad_arguments() {
    let f = Fixture::new();
    assert_eq!(
        f.fails("proc.exec", json!({"program": "no-such-program-xyz"})),
        "program `no-such-program-xyz` not found"
    );
    assert_eq!(
        f.fails("proc.exec", json!({"program": "./missing.sh"})),
        "program `./missing.sh` not found"
    );
    // Past the schema (which already refuses it), the tool still names the bad item.
    let t = f.registry.get("proc.exec").unwrap();
    assert!(
        t.input
            .check(&json!({"program": "echo", "args": ["a", 1]}))
            .is_err()
    );
    assert_eq!(
        t.tool
            .call(&json!({"program": "echo", "args": ["a", 1]}), &f.cx(None)),
        Err(ToolError::Failed(
            "`args[1]` must be a string, found int".to_owned()
        ))
    );
}

#[test]
fn proc_exec_kills_a_program_past_its_timeout() {
    let f = Fixture::new();
    let cx = ToolContext {
        run: None,
        timeout_ms: 200,
        ..f.cx(None)
    };
    let started = Instant::now();
    let r = f.call_with("proc.exec", json!({"program": "sleep", "args": ["5"]}), cx);
    assert_eq!(r, Err(ToolError::Timeout { timeout_ms: 200 }));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn proc_exec_kills_a_program_past_its_output_limit() {
    let f = Fixture::new();
    let cx = ToolContext {
        run: None,
        output_bytes_max: 1000,
        timeout_ms: 10_000,
        ..f.cx(None)
    };
    // `yes` never stops by itself.
    assert_eq!(
        f.call_with("proc.exec", json!({"program": "yes"}), cx),
        Err(ToolError::OutputTooLarge { limit: 1000 })
    );
    // The limit counts both outputs together.
    let cx = ToolContext {
        run: None,
        output_bytes_max: 10,
        ..f.cx(None)
    };
    assert_eq!(
        f.call_with(
            "proc.exec",
            json!({"program": "sh", "args": ["-c", "echo 123456; echo 123456 >&2"]}),
            cx
        ),
        Err(ToolError::OutputTooLarge { limit: 10 })
    );
}

#[test]
fn proc_exec_output_is_lossy_utf8() {
    let f = Fixture::new();
    let out = f
        .call(
            "proc.exec",
            json!({"program": "printf", "args": ["a\\377b"]}),
        )
        .unwrap();
    assert_eq!(out["stdout"], "a\u{fffd}b");
}

// ---------------------------------------------------------------------------------------------
// Pure tools

#[test]
fn text_tools() {
    let f = Fixture::new();
    assert_eq!(
        f.call("text.count", json!({"text": "one two  three\nfour\n"}))
            .unwrap(),
        json!({"words": 4, "lines": 2, "chars": 20})
    );
    assert_eq!(
        f.call("text.count", json!({"text": ""})).unwrap(),
        json!({"words": 0, "lines": 0, "chars": 0})
    );
    assert_eq!(
        f.call("text.count", json!({"text": "é"})).unwrap()["chars"],
        1
    );
    assert_eq!(
        f.call("text.lines", json!({"text": "a\r\nb\n\nc"}))
            .unwrap(),
        json!({"lines": ["a", "b", "", "c"]})
    );
    assert_eq!(
        f.call(
            "text.contains",
            json!({"text": "haystack", "pattern": "st"})
        )
        .unwrap(),
        json!({"found": true})
    );
    assert_eq!(
        f.call("text.contains", json!({"text": "haystack", "pattern": "x"}))
            .unwrap(),
        json!({"found": false})
    );
    assert_eq!(
        f.call("text.split", json!({"text": "a,b,,c", "separator": ","}))
            .unwrap(),
        json!({"parts": ["a", "b", "", "c"]})
    );
    assert_eq!(
        f.fails("text.split", json!({"text": "abc", "separator": ""})),
        "`separator` is empty; give at least one character to split on"
    );
}

#[test]
fn json_parse_refuses_floats_by_path() {
    let f = Fixture::new();
    assert_eq!(
        f.call(
            "json.parse",
            json!({"text": r#"{"a": [1, -2, "x"], "b": null}"#})
        )
        .unwrap(),
        json!({"value": {"a": [1, -2, "x"], "b": null}})
    );
    let m = f.fails("json.parse", json!({"text": r#"{"a": [1, 2, 3.5]}"#}));
    assert!(m.contains("$.a[2]"), "{m}");
    assert!(m.contains("float"), "{m}");
    let m = f.fails("json.parse", json!({"text": "{nope"}));
    assert!(m.starts_with("`text` is not JSON: "), "{m}");
}

#[test]
fn json_get_follows_paths() {
    let f = Fixture::new();
    let value = json!({"a": {"b": [{"c": 1}, {"c": 2}]}});
    assert_eq!(
        f.call("json.get", json!({"value": value, "path": "a.b[1].c"}))
            .unwrap(),
        json!({"value": 2})
    );
    assert_eq!(
        f.call("json.get", json!({"value": value, "path": ""}))
            .unwrap(),
        json!({"value": value})
    );
    assert_eq!(
        f.call("json.get", json!({"value": [5, 6], "path": "[1]"}))
            .unwrap(),
        json!({"value": 6})
    );
    assert_eq!(
        f.fails("json.get", json!({"value": value, "path": "a.b[2].c"})),
        "`a.b[2]` does not exist: `a.b` has 2 items"
    );
    assert_eq!(
        f.fails("json.get", json!({"value": value, "path": "a.x"})),
        "`a.x` does not exist: `a` has no key `x`"
    );
}

#[test]
fn kv_get_reads_the_state_and_kv_set_asks_for_a_write() {
    let mut f = Fixture::new();
    assert_eq!(
        f.call("kv.get", json!({"key": "name"})).unwrap(),
        json!({"found": false, "value": null})
    );
    f.state = State::from_entries([("kv/name".to_owned(), json!("ada"))]).unwrap();
    assert_eq!(
        f.call("kv.get", json!({"key": "name"})).unwrap(),
        json!({"found": true, "value": "ada"})
    );
    let out = f
        .call_with("kv.set", json!({"key": "n", "value": [1, 2]}), f.cx(None))
        .unwrap();
    assert_eq!(out.output, json!({}));
    assert_eq!(
        out.writes.into_iter().collect::<Vec<_>>(),
        vec![("n".to_owned(), json!([1, 2]))]
    );
}

#[test]
fn clock_now_is_the_logical_tick() {
    let f = Fixture::new();
    assert_eq!(f.call("clock.now", json!({})).unwrap(), json!({"tick": 7}));
    let later = ToolContext {
        run: None,
        tick: 1234,
        ..f.cx(None)
    };
    assert_eq!(
        f.call_with("clock.now", json!({}), later).unwrap().output,
        json!({"tick": 1234})
    );
}

#[test]
fn random_int_is_determined_by_seed_step_and_attempt() {
    let f = Fixture::new();
    let draw = |seed: u64, step: &str, attempt: u64, min: i64, max: i64| {
        let cx = ToolContext {
            run: None,
            seed,
            step,
            attempt,
            ..f.cx(None)
        };
        f.call_with("random.int", json!({"min": min, "max": max}), cx)
            .unwrap()
            .output["value"]
            .as_i64()
            .unwrap()
    };
    let first = draw(42, "roll", 1, 0, 1_000_000);
    assert_eq!(
        draw(42, "roll", 1, 0, 1_000_000),
        first,
        "same call, same value"
    );
    let others: Vec<i64> = (2..12).map(|a| draw(42, "roll", a, 0, 1_000_000)).collect();
    assert!(others.iter().any(|&v| v != first), "a retry draws afresh");
    assert_ne!(draw(42, "other", 1, 0, 1_000_000), first);
    assert_ne!(draw(43, "roll", 1, 0, 1_000_000), first);
    for attempt in 1..200 {
        let v = draw(1, "d6", attempt, 1, 6);
        assert!((1..=6).contains(&v), "{v}");
    }
    assert_eq!(draw(9, "one", 1, 5, 5), 5);
    // Over the whole i64 range every u64 is an offset: the value is `min` plus the first output
    // of the stream docs/FORMAT.md specifies, computed here from the text ("random" row:
    // BLAKE3 derive_key `oracle v1 random` of seed ‖ len(step) ‖ step ‖ attempt, big-endian;
    // the first 8 bytes seed SplitMix64).
    let documented = |seed: u64, step: &str, attempt: u64| -> i64 {
        let mut bytes = seed.to_be_bytes().to_vec();
        bytes.extend_from_slice(&(step.len() as u64).to_be_bytes());
        bytes.extend_from_slice(step.as_bytes());
        bytes.extend_from_slice(&attempt.to_be_bytes());
        let digest = oracle_core::hash::hash_in("oracle v1 random", &bytes);
        let state = u64::from_be_bytes(digest.0[..8].try_into().unwrap())
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (i128::from(i64::MIN) + i128::from(z)) as i64
    };
    let wide: Vec<i64> = (1..=16)
        .map(|attempt| draw(9, "wide", attempt, i64::MIN, i64::MAX))
        .collect();
    for (i, v) in wide.iter().enumerate() {
        assert_eq!(*v, documented(9, "wide", i as u64 + 1), "attempt {}", i + 1);
    }
    assert!(
        wide.iter().any(|v| *v < 0) && wide.iter().any(|v| *v > 0),
        "{wide:?}"
    );
    assert_eq!(
        f.fails("random.int", json!({"min": 3, "max": 2})),
        "`min` (3) is greater than `max` (2)"
    );
}

#[test]
fn human_ask_suspends_with_its_question() {
    let f = Fixture::new();
    assert_eq!(
        f.call("human.ask", json!({"question": "Proceed?"})),
        Err(ToolError::Ask("Proceed?".to_owned()))
    );
    assert_eq!(
        f.call(
            "human.ask",
            json!({"question": "Age?", "schema": {"type": "integer"}})
        ),
        Err(ToolError::Ask("Age?".to_owned()))
    );
    let m = f.fails(
        "human.ask",
        json!({"question": "Age?", "schema": {"type": "no-such-type"}}),
    );
    assert!(m.starts_with("`schema`: invalid JSON Schema"), "{m}");
    // What an answer is recorded as.
    let t = f.registry.get("human.ask").unwrap();
    assert!(t.output.check(&json!({"answer": {"any": "thing"}})).is_ok());
    assert!(t.output.check(&json!({})).is_err());
}
