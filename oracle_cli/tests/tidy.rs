//! Tidy: keeps the architecture rules of DEVELOPERS.md and docs/ARCHITECTURE.md true as code
//! changes. Crate edges, purity of the pure crates, determinism hazards, module docs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

use crate::common;

const CRATES: [&str; 15] = [
    "oracle_core",
    "oracle_plan",
    "oracle_runtime",
    "oracle_memory",
    "oracle_auction",
    "oracle_demand",
    "oracle_cli",
    "oracle_html",
    "oracle_llm_stub",
    "oracle_mcp_example",
    "oracle_serve",
    "oracle_pg",
    "oracle_host",
    "oracle_test_support",
    "oracle_lsp",
];
const PURE: [&str; 5] = [
    "oracle_core",
    "oracle_plan",
    "oracle_memory",
    "oracle_auction",
    "oracle_demand",
];

/// Names of the dependencies in `[dependencies]` (not dev- or build-dependencies).
fn normal_deps(krate: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(krate).join("Cargo.toml")).unwrap();
    let mut deps = BTreeSet::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.']).next().unwrap().trim();
            deps.insert(name.to_owned());
        }
    }
    deps
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn sources(krate: &str) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&root().join(krate).join("src"), &mut files);
    files
        .into_iter()
        .map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

/// `path` relative to the workspace (`oracle_core/src/hash.rs`), as allow-lists name files.
fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .to_string_lossy()
        .trim_start_matches("../")
        .to_owned()
}

/// Lines of code with `//` comments removed, so prose may mention what code may not use.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
        .filter(|(_, l)| !l.trim().is_empty())
}

#[test]
fn crate_edges_follow_the_architecture() {
    let internal = |k: &str| {
        normal_deps(k)
            .into_iter()
            .filter(|d| d.starts_with("oracle_"))
            .collect::<BTreeSet<_>>()
    };
    assert!(
        internal("oracle_core").is_empty(),
        "oracle_core depends on no internal crate"
    );
    for k in [
        "oracle_plan",
        "oracle_memory",
        "oracle_auction",
        "oracle_demand",
    ] {
        let deps = internal(k);
        assert!(
            deps.iter().all(|d| d == "oracle_core"),
            "{k} may depend only on oracle_core, has {deps:?}"
        );
    }
    for k in CRATES {
        if k != "oracle_cli" {
            assert!(
                !normal_deps(k).contains("clap"),
                "only oracle_cli uses clap; {k} does too"
            );
        }
    }
    // Signing (checkpoints) reads keys from files: it belongs to the runtime, never to the pure
    // format crate or the other pure crates.
    for k in PURE {
        let deps = normal_deps(k);
        assert!(
            !deps.iter().any(|d| d.starts_with("ed25519")),
            "{k} must not depend on ed25519-dalek: {deps:?}"
        );
    }
    // The network is the runtime's alone (`oracle_runtime::http`), and the model stub and the
    // example MCP server serve tests and the README only: no library depends on them outside
    // its dev-dependencies; the CLI carries them as `oracle dev`, so the README's walkthroughs
    // need nothing but the one binary.
    for k in CRATES {
        let deps = normal_deps(k);
        if k != "oracle_runtime" {
            assert!(
                !deps.contains("ureq"),
                "only oracle_runtime talks HTTP; {k} does too"
            );
        }
        if k != "oracle_cli" {
            for helper in ["oracle_llm_stub", "oracle_mcp_example"] {
                assert!(
                    !deps.contains(helper),
                    "{k} depends on the test helper {helper} outside dev-dependencies (only `oracle dev` may)"
                );
            }
        }
    }
    assert!(
        normal_deps("oracle_runtime").contains("ed25519-dalek"),
        "the check above reads dependency names as Cargo.toml spells them"
    );
    // The async runtime and the web framework stay at the edge: the HTTP API (oracle_serve)
    // and the MCP example server. The engine, the CLI and the pure crates are synchronous.
    for k in CRATES {
        if k != "oracle_serve" && k != "oracle_mcp_example" {
            let deps = normal_deps(k);
            assert!(
                !deps.contains("tokio") && !deps.contains("axum"),
                "only oracle_serve and oracle_mcp_example use tokio or axum; {k} does: {deps:?}"
            );
        }
    }
    assert!(
        normal_deps("oracle_serve").contains("axum")
            && normal_deps("oracle_serve").contains("tokio"),
        "the check above reads dependency names as Cargo.toml spells them"
    );
    // PostgreSQL is one backend of the store, in its own crate: the runtime knows only the
    // replica seam; the host (whose worker drives a store's runs, and whose `Database` is the
    // connection a `--store` command holds) uses the backend.
    for k in CRATES {
        let deps = normal_deps(k);
        if k != "oracle_pg" {
            assert!(
                !deps.contains("postgres"),
                "only oracle_pg talks to PostgreSQL; {k} does too"
            );
        }
        if k != "oracle_host" {
            assert!(
                !deps.contains("oracle_pg"),
                "only oracle_host uses the PostgreSQL store; {k} does too"
            );
        }
    }
    // The command line drives and reads runs through oracle_host alone (issue 54): the
    // runtime is reached only through it (the tests may build fixtures with it).
    let cli = normal_deps("oracle_cli");
    assert!(
        !cli.contains("oracle_runtime") && !cli.contains("oracle_pg"),
        "oracle_cli reaches the runtime and the store through oracle_host only: {cli:?}"
    );
    assert_eq!(
        internal("oracle_pg"),
        ["oracle_core", "oracle_runtime"]
            .into_iter()
            .map(String::from)
            .collect::<BTreeSet<_>>(),
        "oracle_pg stores what the runtime records, and nothing else"
    );
    assert!(normal_deps("oracle_pg").contains("postgres"));
    // The language server is a front end over the plan language: it reads no run, store or
    // tool itself (the CLI hands it the catalogue), so it depends on oracle_plan alone.
    assert_eq!(
        internal("oracle_lsp"),
        BTreeSet::from(["oracle_plan".to_owned()]),
        "oracle_lsp depends on oracle_plan only, never on oracle_runtime or oracle_host"
    );
}

/// `oracle_core` is the log format alone (issue 33): the domains over it are crates of their own
/// (`oracle_auction`, `oracle_demand`, `oracle_memory`), so none of their modules may come back
/// into it, as a file, a directory or an inline `mod`.
#[test]
fn oracle_core_holds_no_domain() {
    let src = root().join("oracle_core").join("src");
    for domain in ["auction", "demand", "memory"] {
        for path in [src.join(domain), src.join(format!("{domain}.rs"))] {
            assert!(
                !path.exists(),
                "{} belongs in oracle_{domain}, not in oracle_core",
                path.display()
            );
        }
        for (path, text) in sources("oracle_core") {
            for (n, line) in code_lines(&text) {
                let words: Vec<&str> = line
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                    .collect();
                assert!(
                    !words.windows(2).any(|w| w == ["mod", domain]),
                    "{}:{n}: oracle_core declares a `{domain}` module",
                    path.display()
                );
            }
        }
    }
}

/// Every `std::` path a grouped `use std::{...}` names, flattened (`use std::{env, sync::{Arc,
/// mpsc}}` gives `std::env`, `std::sync::Arc`, `std::sync::mpsc`), so a forbidden module cannot
/// hide in a group. `code` has its comments removed.
fn grouped_std_paths(code: &str) -> Vec<String> {
    /// Items of the group that starts just after a `{` in `s`, each prefixed with `prefix`, and
    /// the bytes read up to and including its `}`.
    fn group(prefix: &str, s: &str) -> (Vec<String>, usize) {
        let mut out = Vec::new();
        let mut item = String::new();
        let push = |item: &mut String, out: &mut Vec<String>| {
            let name = item.split_whitespace().next().unwrap_or("");
            match name {
                "" => {}
                "self" => out.push(prefix.trim_end_matches("::").to_owned()),
                _ => out.push(format!("{prefix}{name}")),
            }
            item.clear();
        };
        let mut i = 0;
        while let Some(c) = s[i..].chars().next() {
            match c {
                '{' => {
                    let inner_prefix = format!("{prefix}{}", item.trim());
                    let (inner, used) = group(&inner_prefix, &s[i + 1..]);
                    out.extend(inner);
                    item.clear();
                    i += 1 + used;
                    continue;
                }
                ',' => push(&mut item, &mut out),
                '}' => {
                    push(&mut item, &mut out);
                    return (out, i + 1);
                }
                c => item.push(c),
            }
            i += c.len_utf8();
        }
        (out, i)
    }
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("std::{") {
        let after = &rest[at + "std::{".len()..];
        let (paths, used) = group("std::", after);
        out.extend(paths);
        rest = &after[used..];
    }
    out
}

#[test]
fn grouped_uses_are_flattened_for_the_purity_check() {
    let code = "use std::{\n    env,\n    fs::File, sync::{Arc, mpsc::{self, Sender}},\n    io as stdio,\n};";
    assert_eq!(
        grouped_std_paths(code),
        [
            "std::env",
            "std::fs::File",
            "std::sync::Arc",
            "std::sync::mpsc",
            "std::sync::mpsc::Sender",
            "std::io",
        ]
    );
    // The check below would flag each of these in a pure crate.
    for (line, forbidden) in [
        ("use std::{env, fmt};", "std::env"),
        ("use std::{fmt, process::Command};", "std::process"),
        ("use std::{thread};", "std::thread"),
    ] {
        assert!(
            grouped_std_paths(line)
                .iter()
                .any(|p| p == forbidden || p.starts_with(&format!("{forbidden}::"))),
            "{line}"
        );
    }
}

#[test]
fn pure_crates_touch_no_world() {
    let forbidden = [
        "std::fs",
        "std::net",
        "std::process",
        "std::thread",
        "std::env",
        "SystemTime",
        "Instant",
        "thread::spawn",
        "rayon",
        "HashMap",
        "HashSet",
    ];
    let mut found = Vec::new();
    for k in PURE {
        for (path, text) in sources(k) {
            for (n, line) in code_lines(&text) {
                for f in forbidden {
                    if line.contains(f) {
                        found.push(format!("{}:{n}: `{f}`", path.display()));
                    }
                }
            }
            // `use std::{env, ...}` spells no `std::env`: flatten groups, over line breaks.
            let code: String = code_lines(&text).map(|(_, l)| format!("{l}\n")).collect();
            for p in grouped_std_paths(&code) {
                for f in forbidden.iter().filter(|f| f.starts_with("std::")) {
                    if p == *f || p.starts_with(&format!("{f}::")) {
                        found.push(format!("{}: `{p}` in a grouped use", path.display()));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "pure crates must not do IO, read clocks, spawn threads or use hashed containers:\n{}",
        found.join("\n")
    );
}

/// The HTML render layer (`oracle_html::page`, `escape`, `form`) is pure like the pure crates,
/// so a page is a function of its view; only the host's `oracle_host::view` reads the home. And
/// no web framework or script bundle enters the crate: its dependencies are oracle's own and
/// serde_json and thiserror.
#[test]
fn the_html_render_layer_touches_no_world() {
    let forbidden = [
        "std::fs",
        "std::net",
        "std::process",
        "std::thread",
        "std::env",
        "SystemTime",
        "Instant",
        "oracle_runtime::session",
        "oracle_runtime::reader",
        "oracle_runtime::index",
    ];
    let mut found = Vec::new();
    // The loading of views moved to the host (`oracle_host/src/view.rs`): no file here is exempt.
    for (path, text) in sources("oracle_html") {
        for (n, line) in code_lines(&text) {
            for f in forbidden {
                if line.contains(f) {
                    found.push(format!("{}:{n}: `{f}`", path.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the render layer does no IO:\n{}",
        found.join("\n")
    );
    let deps = normal_deps("oracle_html");
    let allowed = [
        "oracle_core",
        "oracle_plan",
        "oracle_host",
        "oracle_memory",
        "serde_json",
        "thiserror",
    ];
    let extra: Vec<_> = deps
        .iter()
        .filter(|d| !allowed.contains(&d.as_str()))
        .collect();
    assert!(extra.is_empty(), "oracle_html depends on {extra:?}");
}

#[test]
fn no_hashed_containers_reach_output_anywhere() {
    // Iteration order of HashMap/HashSet varies between runs; nothing in this workspace needs one.
    let mut found = Vec::new();
    for k in CRATES {
        for (path, text) in sources(k) {
            for (n, line) in code_lines(&text) {
                if line.contains("HashMap") || line.contains("HashSet") {
                    found.push(format!("{}:{n}", path.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "use BTreeMap/BTreeSet:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_module_says_what_it_is_for() {
    let mut missing = Vec::new();
    for k in CRATES {
        for (path, text) in sources(k) {
            if !text.trim_start().starts_with("//!") {
                missing.push(path.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "start each module with a `//!` line:\n{}",
        missing.join("\n")
    );
}

#[test]
fn serde_json_keeps_sorted_maps_and_exact_integers() {
    // Feature unification could turn on `preserve_order` or `arbitrary_precision` from any
    // dependency. Check the behaviour of the serde_json this workspace is built with.
    let v: serde_json::Value = serde_json::from_str(r#"{"b":1,"a":2}"#).unwrap();
    assert_eq!(
        v.to_string(),
        r#"{"a":2,"b":1}"#,
        "serde_json maps must iterate in key order (no preserve_order)"
    );
    let f: serde_json::Value = serde_json::from_str("1.0e0").unwrap();
    assert_eq!(
        f.to_string(),
        "1.0",
        "numbers must not keep their source text (no arbitrary_precision)"
    );
    let big: serde_json::Value = serde_json::from_str("18446744073709551615").unwrap();
    assert_eq!(big.as_u64(), Some(u64::MAX), "u64 is exact");
}

/// The backticked names in one table cell that look like test functions (`snake_case`, with an
/// underscore: file names and limit values have a `.`, a `/`, a space or capitals).
fn test_names(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            t.contains('_')
                && t.starts_with(|c: char| c.is_ascii_lowercase())
                && t.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_owned)
        .collect()
}

/// The rows of every table in `doc` whose header has a `test` column, as (first cell, names in
/// that column). Panics on a row whose cell count differs from its header's, so a `|` inside a
/// cell cannot silently move names between columns.
fn tables_with_tests(doc: &str) -> Vec<(String, Vec<String>)> {
    let cells = |line: &str| -> Vec<String> {
        let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
        inner.split('|').map(|c| c.trim().to_owned()).collect()
    };
    let mut rows = Vec::new();
    let mut lines = doc.lines().peekable();
    while let Some(line) = lines.next() {
        if !line.starts_with('|') {
            continue;
        }
        let header = cells(line);
        let column = header.iter().position(|h| h == "test");
        lines.next(); // the `| --- |` line
        while let Some(row) = lines.next_if(|l| l.starts_with('|')) {
            let Some(col) = column else { continue };
            let r = cells(row);
            assert_eq!(
                r.len(),
                header.len(),
                "a row with the wrong cell count: {row}"
            );
            rows.push((r[0].clone(), test_names(&r[col])));
        }
    }
    rows
}

/// Every `fn` name defined in the workspace's sources and tests (and the fuzz crate's), and
/// every top-level `def` of the Python SDK's tests.
fn defined_fns() -> BTreeSet<String> {
    let mut files = Vec::new();
    for k in CRATES.iter().chain(&["fuzz"]) {
        for sub in ["src", "tests", "benches", "examples"] {
            rust_files(&root().join(k).join(sub), &mut files);
        }
    }
    let mut names = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (_, line) in code_lines(&text) {
            let mut rest = line;
            while let Some(at) = rest.find("fn ") {
                let after = &rest[at + 3..];
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.insert(name);
                }
                rest = after;
            }
        }
    }
    // The Python SDK's tests (pytest, run by .ci/run) are tests the docs may name too.
    let py = root().join("sdk/python/tests");
    for entry in std::fs::read_dir(&py).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("def ") {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
    }
    names
}

/// docs/SECURITY.md's limits table (and every other table of it with a `test` column) names,
/// for each row, tests that exist: a renamed or deleted test, or a row with no test, fails here.
/// docs/MEMORY.md's transition table lists every transition with its producer and its test
/// (issue 15): every row names at least one test, and every test it names exists.
#[test]
fn the_memory_transition_table_names_tests_that_exist() {
    let doc = std::fs::read_to_string(root().join("docs/MEMORY.md")).unwrap();
    let rows = tables_with_tests(&doc);
    assert!(
        rows.len() >= 20,
        "the transition table has a `test` column: {rows:?}"
    );
    let untested: Vec<&String> = rows
        .iter()
        .filter(|(_, names)| names.is_empty())
        .map(|(row, _)| row)
        .collect();
    assert!(
        untested.is_empty(),
        "transitions naming no test: {untested:?}"
    );
    let defined = defined_fns();
    let missing: Vec<String> = rows
        .iter()
        .flat_map(|(row, names)| names.iter().map(move |n| (row, n)))
        .filter(|(_, n)| !defined.contains(*n))
        .map(|(row, n)| format!("{row}: `{n}`"))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/MEMORY.md names tests that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_limits_table_names_tests_that_exist() {
    let doc = std::fs::read_to_string(root().join("docs/SECURITY.md")).unwrap();
    let limits = doc
        .split("\n## Limits")
        .nth(1)
        .expect("docs/SECURITY.md has a `## Limits` section");
    let limits = limits.split("\n## ").next().unwrap_or(limits);
    let limit_rows = tables_with_tests(limits);
    assert!(
        limit_rows.len() >= 20,
        "the limits table has a `test` column: {limit_rows:?}"
    );
    let untested: Vec<&String> = limit_rows
        .iter()
        .filter(|(_, names)| names.is_empty())
        .map(|(row, _)| row)
        .collect();
    assert!(untested.is_empty(), "limits naming no test: {untested:?}");
    let defined = defined_fns();
    let mut missing = Vec::new();
    for (row, names) in tables_with_tests(&doc) {
        for n in names {
            if !defined.contains(&n) {
                missing.push(format!("{row}: `{n}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/SECURITY.md names tests that do not exist:\n{}",
        missing.join("\n")
    );
}

/// docs/SECURITY.md tells the truth about `run.json` (issue 53, item 10): its bindings are
/// sealed with the home's key (`oracle_runtime::bindings`), and a background resume takes its
/// directory only when the seal holds, so no paragraph of it may call the file unhashed, and the
/// background resumes' paragraph names the seal.
#[test]
fn security_md_says_run_json_is_sealed() {
    let doc = std::fs::read_to_string(root().join("docs/SECURITY.md")).unwrap();
    let paragraphs: Vec<&str> = doc.split("\n\n").collect();
    let unhashed: Vec<&&str> = paragraphs
        .iter()
        .filter(|p| p.contains("`run.json` is unhashed") || p.contains("`run.json` is not hashed"))
        .collect();
    assert!(unhashed.is_empty(), "{unhashed:?}");
    let background = doc
        .split("- **Background resumes**")
        .nth(1)
        .and_then(|rest| rest.split("\n- **").next())
        .expect("docs/SECURITY.md has the background resumes paragraph");
    assert!(
        background.contains("seal") && background.contains("binding_unsealed"),
        "{background}"
    );
}

/// Front ends reach stored runs through the host (`oracle_host`): the server neither resumes or
/// answers a run through the runtime's session functions itself nor starts a program to do it,
/// and the command line resumes only through the host.
#[test]
fn front_ends_drive_runs_through_the_host() {
    // Outside events on a run's memory and the worker loop are host calls too.
    let host_only = [
        "adjudication::adjudicate",
        "adjudication::claim",
        "adjudication::reinstate",
        "adjudication::sweep",
        "adjudication::load",
        ".claim(&s.name",
        "store.pending(",
        "store.settle(",
        "store.renew(",
    ];
    for (path, text) in sources("oracle_serve") {
        for (n, line) in code_lines(&text) {
            for banned in [
                "session::resume",
                "session::answer",
                "session::start",
                "process::Command",
                "Command::new",
            ]
            .into_iter()
            .chain(host_only)
            {
                assert!(
                    !line.contains(banned),
                    "{}:{}: `{banned}` in oracle_serve; drive runs through oracle_host::Home",
                    path.display(),
                    n
                );
            }
        }
    }
    for (path, text) in sources("oracle_cli") {
        for (n, line) in code_lines(&text) {
            for banned in [
                "session::resume(",
                "session::resume_observed(",
                "session::answer(",
                "session::start_prepared(",
            ]
            .into_iter()
            .chain(host_only)
            {
                assert!(
                    !line.contains(banned),
                    "{}:{}: `{banned}` in oracle_cli; drive runs through oracle_host::Home",
                    path.display(),
                    n
                );
            }
        }
    }
    // Test helpers stay out of every shipped crate.
    for k in CRATES {
        assert!(
            !normal_deps(k).contains("oracle_test_support"),
            "{k} depends on oracle_test_support outside its dev-dependencies"
        );
    }
    let host = normal_deps("oracle_host");
    assert!(
        !host.contains("clap") && !host.contains("axum") && !host.contains("tokio"),
        "the host serves every front end and depends on none: {host:?}"
    );
}

/// The front ends reach runs through `oracle_host` alone (issue 54): none has the runtime or the
/// PostgreSQL store among its `[dependencies]` (dev-dependencies may, for a test's fixtures).
/// Read with the TOML parser, so a dependency is found however the table spells it.
#[test]
fn front_ends_depend_on_the_host_alone() {
    // `oracle_cli` joins this list (one more name) once its own move to the host lands.
    const FRONT_ENDS: &[&str] = &["oracle_cli", "oracle_serve", "oracle_html"];
    let mut found = Vec::new();
    for k in FRONT_ENDS {
        let path = root().join(k).join("Cargo.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let manifest: toml::Table = toml::from_str(&text).unwrap();
        let deps = manifest
            .get("dependencies")
            .and_then(toml::Value::as_table)
            .cloned()
            .unwrap_or_default();
        for banned in ["oracle_runtime", "oracle_pg"] {
            if deps.contains_key(banned) {
                found.push(format!("{}: `{banned}`", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "front ends depend on oracle_host, not on what it drives:\n{}",
        found.join("\n")
    );
}

/// No `static` in a library crate holds run state: what a drive does is decided by the values
/// passed to it (`oracle_host::Home`), never by something another part of the process set.
/// Each static left is listed here with why it holds no run state; one entry is debt.
#[test]
fn no_static_holds_run_state() {
    let allowed = [
        // Precomputed hashers of constant contexts.
        ("oracle_core/src/hash.rs", "static KNOWN"),
        // Unique names for temporary files.
        ("oracle_runtime/src/index.rs", "static TEMP_SEQ"),
        ("oracle_runtime/src/tools/fs.rs", "static TEMP_COUNTER"),
        // The built-in registry the server shows tool names from (constant).
        ("oracle_host/src/data.rs", "static REGISTRY"),
        // Test clusters of the store's own tests.
        ("oracle_pg/src/cluster.rs", "static COUNTER"),
        ("oracle_pg/src/cluster.rs", "static SHARED"),
        // Watchers of a process (streamed deltas, the span exporter's record tap): written to
        // without waiting and never read by a drive, so nothing a run does depends on them.
        ("oracle_runtime/src/live.rs", "static HUB"),
        ("oracle_runtime/src/live.rs", "static APPENDS"),
        // The last plan text parsed on a thread (issue 42): a cache of a pure function under the
        // text's hash, so a kept parse is the parse of its text and no drive can tell it apart.
        ("oracle_plan/src/parsed.rs", "static LAST"),
        // The "did you mean" budget of the check running on a thread (issue 53): set when a
        // check starts and cleared when it ends, spent in its own order, so a check's output
        // is a function of its text alone.
        (
            "oracle_plan/src/diagnostic.rs",
            "static SUGGESTION_CELLS_LEFT",
        ),
    ];
    for k in CRATES.iter().filter(|k| **k != "oracle_cli") {
        for (path, text) in sources(k) {
            let rel = relative(&path);
            for (n, line) in code_lines(&text) {
                let t = line.trim_start();
                let t = t
                    .strip_prefix("pub(crate) ")
                    .or(t.strip_prefix("pub "))
                    .unwrap_or(t);
                if !t.starts_with("static ") {
                    continue;
                }
                assert!(
                    allowed
                        .iter()
                        .any(|(f, s)| rel.ends_with(f) && t.starts_with(s)),
                    "{rel}:{n}: a static in a library crate: {t}"
                );
            }
        }
    }
}

/// The command line's statics are output and signal state only, never a store or a run: the
/// store a command reaches is an explicit `oracle_host::Database` (issue 54).
#[test]
fn the_cli_keeps_no_store_in_a_static() {
    for (path, text) in sources("oracle_cli") {
        for (n, line) in code_lines(&text) {
            let t = line.trim_start();
            let t = t
                .strip_prefix("pub(crate) ")
                .or(t.strip_prefix("pub "))
                .unwrap_or(t);
            if t.starts_with("static ") {
                assert!(
                    [
                        "static WORKER",
                        "static COLOR",
                        "static PRINTED_JSON",
                        "static STDOUT"
                    ]
                    .iter()
                    .any(|s| t.starts_with(s)),
                    "{}:{n}: a new static in oracle_cli: {t}",
                    path.display()
                );
            }
        }
    }
}

/// What oracle_host re-exports from the runtime or the store is one item per `pub use` line,
/// under the heading comment of lib.rs, with a comment saying why: never a module (that would
/// be a second door to the runtime beside the host).
#[test]
fn the_host_reexports_items_never_modules() {
    const HEADING: &str =
        "// Format types the front ends print, re-exported so they depend on the host alone.";
    let lib = std::fs::read_to_string(root().join("oracle_host/src/lib.rs")).unwrap();
    let lines: Vec<&str> = lib.lines().collect();
    let heading = lines.iter().position(|l| *l == HEADING);
    for (i, line) in lines.iter().enumerate() {
        let Some(path) = ["oracle_runtime", "oracle_pg"]
            .iter()
            .find_map(|k| line.strip_prefix("pub use ").filter(|p| p.starts_with(k)))
        else {
            continue;
        };
        assert!(
            heading.is_some_and(|h| h < i),
            "oracle_host/src/lib.rs:{}: a re-export above the heading `{HEADING}`",
            i + 1
        );
        assert!(
            !path.contains('{') && !path.contains('*'),
            "oracle_host/src/lib.rs:{}: one item per line: {line}",
            i + 1
        );
        assert!(
            i > 0 && lines[i - 1].trim_start().starts_with("//"),
            "oracle_host/src/lib.rs:{}: say why it is re-exported: {line}",
            i + 1
        );
        let item = path.trim_end_matches(';');
        let item = item.split(" as ").next().unwrap_or(item);
        let mut segments: Vec<&str> = item.split("::").collect();
        let krate = segments.remove(0);
        let file = segments.join("/");
        let dir = root().join(krate).join("src");
        assert!(
            !segments.is_empty()
                && !dir.join(format!("{file}.rs")).exists()
                && !dir.join(&file).join("mod.rs").exists(),
            "oracle_host/src/lib.rs:{}: `{item}` is a module; re-export the items a front end needs",
            i + 1
        );
    }
}

/// `text` without `//` comments and with the body of every `#[cfg(test)] mod` blanked (its
/// newlines kept, so line numbers hold): the code a library ships.
fn shipped_code(text: &str) -> String {
    const TEST_ATTR: &str = "#[cfg(test)]";
    let code: Vec<&str> = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect();
    let code = code.join("\n");
    let mut out = String::with_capacity(code.len());
    let mut rest = code.as_str();
    while let Some(at) = rest.find(TEST_ATTR) {
        let after = &rest[at + TEST_ATTR.len()..];
        let item = after.trim_start();
        let opens = item.find('{').filter(|_| item.starts_with("mod "));
        let Some(open) = opens else {
            out.push_str(&rest[..at + TEST_ATTR.len()]);
            rest = after;
            continue;
        };
        out.push_str(&rest[..at]);
        let body = &item[open + 1..];
        let mut depth = 1u32;
        let mut end = body.len();
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = i + 1;
                break;
            }
        }
        let skipped = &rest[at..rest.len() - body.len() + end];
        out.extend(skipped.chars().filter(|&c| c == '\n'));
        rest = &body[end..];
    }
    out.push_str(rest);
    out
}

/// The error type of each `Result<T, E>` in `code` (`E` as written), with its line: the
/// generic arguments are split at the top-level comma, so `Result<Vec<(A, B)>, E>` gives `E`.
fn result_error_types(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("Result<") {
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let args = &code[at + "Result<".len()..];
        let (mut depth, mut comma, mut prev) = (1u32, None, ' ');
        for (i, c) in args.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' if prev == '-' => {}
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 1 => comma = Some(i),
                _ => {}
            }
            prev = c;
            if depth == 0 {
                if let Some(k) = comma {
                    let line = code[..at].matches('\n').count() + 1;
                    found.push((line, args[k + 1..i].trim().to_owned()));
                }
                break;
            }
        }
    }
    found
}

#[test]
fn the_result_scan_finds_the_error_type() {
    let code = "fn a() -> Result<Vec<(u8, u8)>, String> {}\nfn b() -> Result<u8> {}\n\
                fn c(f: impl Fn() -> u8) -> std::result::Result<u8, E> {}\n\
                #[cfg(test)]\nmod tests {\n fn d() -> Result<(), String> { {} }\n}\n\
                fn e() -> Result<u8, String> {}";
    let found = result_error_types(&shipped_code(code));
    assert_eq!(
        found,
        vec![
            (1, "String".to_owned()),
            (3, "E".to_owned()),
            (8, "String".to_owned())
        ]
    );
}

/// One error taxonomy (issue 33): library code says why it failed with a type that names the
/// failure (a thiserror enum), never `Result<_, String>`. Recorded texts keep their bytes through
/// the types' `Display`. An entry here needs a reason: only a plugin boundary whose `String` is
/// recorded text may stay (there is none today: `Tool::call` returns `ToolError`).
#[test]
fn library_code_returns_no_string_errors() {
    let allowed: [(&str, &str); 0] = [];
    let mut hits = Vec::new();
    for k in CRATES {
        for (path, text) in sources(k) {
            let rel = relative(&path);
            for (line, error) in result_error_types(&shipped_code(&text)) {
                let string = error == "String" || error == "std::string::String";
                if string && !allowed.iter().any(|(f, _)| rel.ends_with(f)) {
                    hits.push(format!("{rel}:{line}"));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "Result<_, String> in library code (use a thiserror type that names the failure; \
         see oracle_host/src/error.rs):\n{}",
        hits.join("\n")
    );
}

/// docs/SECURITY.md's table of files lists every file oracle leaves in a home: the commands
/// that write files (a run, a suspension and its resume with resume points, a snapshot, a
/// signed checkpoint, a server token) are run in a scratch home, and every file they leave
/// must match a row of the table.
#[test]
fn the_files_table_lists_every_file_oracle_writes() {
    let doc = std::fs::read_to_string(root().join("docs/SECURITY.md")).unwrap();
    let section = doc
        .split("## Files in a home and a run directory")
        .nth(1)
        .expect("docs/SECURITY.md has the files section")
        .split("\n## ")
        .next()
        .unwrap();
    let mut patterns = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cell = line.split('|').nth(1).unwrap();
        for p in cell.split(',') {
            patterns.push(p.trim().trim_matches('`').to_owned());
        }
    }
    assert!(patterns.len() > 10, "{patterns:?}");
    let sb = common::Sandbox::new();
    let ok = |args: &[&str], want: i32| {
        let (code, out, err) = sb.oracle(args);
        assert_eq!(code, want, "{args:?}: {out}{err}");
    };
    ok(&["run", "fixtures/plans/quickstart.plan"], 0);
    ok(&["run", "fixtures/plans/denied.plan", "--key", "k-1"], 1);
    ok(
        &[
            "run",
            "fixtures/plans/escalation.plan",
            "--snapshot-every",
            "1",
        ],
        3,
    );
    ok(
        &[
            "resume",
            "escalation-1",
            "--step",
            "total",
            "--value",
            r#"{"value":{"total":1250}}"#,
            "--snapshot-every",
            "1",
        ],
        3,
    );
    ok(&["snapshot", "quickstart-1"], 0);
    ok(&["keygen", "--out", "k"], 0);
    ok(&["checkpoint", "quickstart-1", "--key", "k"], 0);
    ok(&["serve", "token", "add", "alice"], 0);
    // A paced model call: the binding's rate window.
    let stub = oracle_llm_stub::Stub::start(vec![serde_json::json!({"content": "ok"})]).unwrap();
    sb.write("one.plan", &crate::rates::paced_plan(1));
    let model = format!("fast={}", stub.url());
    ok(
        &[
            "run",
            "one.plan",
            "--model",
            &model,
            "--model-rate",
            "fast=5/s",
        ],
        0,
    );
    ok(&["replay", "escalation-1", "--from-snapshot"], 0);
    // A damaged run recovered: the damaged log's copy.
    let log = sb.log(".oracle", "quickstart-1");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, text.replacen("\"seq\":6,", "\"seq\":7,", 1)).unwrap();
    ok(&["recover", "quickstart-1"], 0);
    let home = sb.path().join(".oracle");
    let mut files = Vec::new();
    list_files(&home, &home, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with(".resume.json")),
        "{files:?}"
    );
    let unlisted: Vec<&String> = files
        .iter()
        .filter(|f| !patterns.iter().any(|p| path_matches(p, f)))
        .collect();
    assert!(
        unlisted.is_empty(),
        "files oracle wrote that docs/SECURITY.md does not list: {unlisted:?} (rows: {patterns:?})"
    );
}

fn list_files(base: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            list_files(base, &path, out);
        } else {
            out.push(
                path.strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

/// Whether `path` matches a table row: `<run>`, `<seq>` and `*` stand for one path component
/// (`<seq>` and `*` for part of one), `**` for any number of them.
fn path_matches(pattern: &str, path: &str) -> bool {
    fn component(p: &str, c: &str) -> bool {
        let Some(at) = p.find(['<', '*']) else {
            return p == c;
        };
        let (head, rest) = p.split_at(at);
        let tail = match rest.strip_prefix('*') {
            Some(t) => t,
            None => rest.find('>').map_or("", |i| &rest[i + 1..]),
        };
        c.len() >= head.len() + tail.len() && c.starts_with(head) && c.ends_with(tail)
    }
    fn walk(p: &[&str], c: &[&str]) -> bool {
        match (p.first(), c.first()) {
            (None, None) => true,
            (Some(&"**"), _) => (0..=c.len()).any(|i| walk(&p[1..], &c[i..])),
            (Some(pp), Some(cc)) => component(pp, cc) && walk(&p[1..], &c[1..]),
            _ => false,
        }
    }
    let p: Vec<&str> = pattern.split('/').collect();
    let c: Vec<&str> = path.split('/').collect();
    walk(&p, &c)
}

#[test]
fn table_paths_match_as_documented() {
    assert!(path_matches(
        "runs/<run>/events.jsonl",
        "runs/a-1/events.jsonl"
    ));
    assert!(!path_matches(
        "runs/<run>/events.jsonl",
        "runs/a-1/x/events.jsonl"
    ));
    assert!(path_matches(
        "runs/<run>/snapshots/<seq>.resume.json",
        "runs/a-1/snapshots/00000000000000000012.resume.json"
    ));
    assert!(path_matches(
        "runs/<run>/snapshots/<seq>.json",
        "runs/a-1/snapshots/0012.json"
    ));
    assert!(path_matches(
        "runs/<run>/uses/**",
        "runs/a-1/uses/lib/x.plan"
    ));
    assert!(path_matches("runs/<run>/torn/*", "runs/a-1/torn/t"));
    assert!(!path_matches("seal.key", "runs/seal.key"));
}

/// The most words docs/ARCHITECTURE.md may hold: about ten minutes of reading for a newcomer
/// (issue 33). Detail belongs in the crates' `lib.rs` docs and the topical docs it links to.
const ARCHITECTURE_WORDS_MAX: usize = 2_500;

fn architecture() -> String {
    std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap()
}

/// The cells of one markdown table row, trimmed.
fn row_cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_owned()).collect()
}

/// The backticked spans of `text`.
fn backticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

#[test]
fn the_architecture_stays_a_ten_minute_read() {
    let words = architecture().split_whitespace().count();
    assert!(
        words <= ARCHITECTURE_WORDS_MAX,
        "docs/ARCHITECTURE.md has {words} words, over {ARCHITECTURE_WORDS_MAX}: move the detail \
         to the crate's lib.rs docs or a topical doc and link to it"
    );
}

/// docs/ARCHITECTURE.md's table of crates (header `crate | owns | may depend on`) has one row
/// per workspace crate, naming what it owns, and its last cell names every internal crate the
/// crate's `[dependencies]` hold, so the table cannot drift from Cargo.toml.
#[test]
fn the_architecture_names_what_each_crate_owns_and_may_depend_on() {
    let doc = architecture();
    let mut lines = doc.lines();
    lines
        .find(|l| row_cells(l) == ["crate", "owns", "may depend on"])
        .expect("docs/ARCHITECTURE.md has the table `| crate | owns | may depend on |`");
    lines.next(); // the `| --- |` line
    let mut rows = std::collections::BTreeMap::new();
    for line in lines.take_while(|l| l.starts_with('|')) {
        let cells = row_cells(line);
        assert_eq!(cells.len(), 3, "a row with the wrong cell count: {line}");
        let krate = cells[0].trim_matches('`').to_owned();
        assert!(
            CRATES.contains(&krate.as_str()),
            "a row for no crate: {line}"
        );
        assert!(!cells[1].is_empty(), "{krate}'s row names nothing it owns");
        let allowed: BTreeSet<String> = backticked(&cells[2]).map(str::to_owned).collect();
        assert!(
            rows.insert(krate.clone(), allowed).is_none(),
            "two rows for {krate}"
        );
    }
    for k in CRATES {
        let allowed = rows
            .get(k)
            .unwrap_or_else(|| panic!("docs/ARCHITECTURE.md's table of crates has no row for {k}"));
        let undocumented: Vec<String> = normal_deps(k)
            .into_iter()
            .filter(|d| d.starts_with("oracle_") && !allowed.contains(d))
            .collect();
        assert!(
            undocumented.is_empty(),
            "{k} depends on {undocumented:?}, which its row in docs/ARCHITECTURE.md does not allow"
        );
    }
}

/// Every repository path docs/ARCHITECTURE.md names in backticks (`oracle_runtime/src/engine.rs`,
/// `oracle_runtime/src/tools/`) exists, so the code map stays current as files move.
#[test]
fn the_architecture_code_map_names_files_that_exist() {
    let doc = architecture();
    let missing: BTreeSet<&str> = backticked(&doc)
        .filter(|t| t.starts_with("oracle_") && t.contains('/'))
        .filter(|t| !root().join(t).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

/// Each crate's integration tests with a `tests/main.rs` are one binary (cargo's discovery of a
/// binary per file turned off in its Cargo.toml): a file that `main.rs` does not name would
/// never be built or run, silently. Every `tests/*.rs` is named, and every name is a file.
#[test]
fn every_test_file_is_a_module_of_the_one_test_binary() {
    for krate in CRATES {
        let dir = root().join(krate).join("tests");
        let Ok(main) = std::fs::read_to_string(dir.join("main.rs")) else {
            continue;
        };
        let named: BTreeSet<String> = main
            .lines()
            .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
            .map(str::to_owned)
            .collect();
        let mut files = BTreeSet::new();
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let rs = path.extension().is_some_and(|e| e == "rs");
            if (rs || path.join("mod.rs").is_file()) && stem != "main" {
                files.insert(stem);
            }
        }
        assert_eq!(
            named, files,
            "{krate}/tests/main.rs must name every test file"
        );
        let manifest = std::fs::read_to_string(root().join(krate).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains("autotests = false"),
            "{krate}: one binary per file again beside tests/main.rs"
        );
    }
}

/// The one file of oracle_serve that builds its `oracle_host::Backend` (a file home, or a
/// store's front): the only one that may name the store's front or the backend's variants.
const SERVE_BUILDS_THE_BACKEND: &str = "oracle_serve/src/state.rs";

/// oracle_serve's handlers and startup call the `oracle_host::Backend` without asking which
/// kind it is (issue 54, item 4): outside the file that builds it, nothing names the store's
/// front (`StoreFront`, `store_front::`), reaches for it (`.front()`) or matches on the
/// backend's variants.
#[test]
fn serve_handlers_never_branch_on_the_backend() {
    let banned = [
        "StoreFront",
        "store_front::",
        ".front()",
        "Backend::Home",
        "Backend::Store",
    ];
    let mut found = Vec::new();
    for (path, text) in sources("oracle_serve") {
        if relative(&path) == SERVE_BUILDS_THE_BACKEND {
            continue;
        }
        for (n, line) in code_lines(&text) {
            for b in banned.iter().filter(|b| line.contains(*b)) {
                found.push(format!("{}:{n}: {b}", relative(&path)));
            }
        }
    }
    assert!(
        found.is_empty(),
        "oracle_serve branches on its backend outside {SERVE_BUILDS_THE_BACKEND}: add a \
         neutral call to oracle_host::Backend instead:\n{}",
        found.join("\n")
    );
    assert!(
        root().join(SERVE_BUILDS_THE_BACKEND).is_file(),
        "{SERVE_BUILDS_THE_BACKEND} moved: name the file that builds the Backend"
    );
}

/// docs/ARCHITECTURE.md's layer picture is what the manifests say: every internal dependency
/// of a crate in the picture is a crate of a layer below it (or, for the host's store, the
/// layer named beside it), and every crate of the workspace's layers is in the picture once.
#[test]
fn the_layer_picture_is_what_the_manifests_say() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let start = doc
        .find("The layers, each depending only on layers below it:")
        .expect("docs/ARCHITECTURE.md has the layer picture");
    let block = &doc[start..];
    let block = &block[block.find("```text").unwrap() + 7..];
    let block = &block[..block.find("```").unwrap()];
    // Top layer first; a crate's layer is the index of its line.
    let mut layer_of = std::collections::BTreeMap::new();
    for (i, line) in block.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        for word in line.split_whitespace() {
            if CRATES.contains(&word) {
                assert!(
                    layer_of.insert(word.to_owned(), i).is_none(),
                    "{word} is in the layer picture twice"
                );
            }
        }
    }
    for k in CRATES {
        let Some(&layer) = layer_of.get(k) else {
            continue;
        };
        for dep in normal_deps(k)
            .into_iter()
            .filter(|d| d.starts_with("oracle_"))
        {
            let Some(&below) = layer_of.get(&dep) else {
                panic!("{k} depends on {dep}, which the layer picture does not show");
            };
            assert!(
                below > layer,
                "{k} depends on {dep}, but the layer picture does not put {dep} below {k}"
            );
        }
    }
    for k in [
        "oracle_cli",
        "oracle_host",
        "oracle_pg",
        "oracle_runtime",
        "oracle_core",
    ] {
        assert!(
            layer_of.contains_key(k),
            "{k} is missing from the layer picture"
        );
    }
}

/// The longest a function may be before it must be split by what it decides (TIGER_STYLE).
const FUNCTION_LINES_MAX: usize = 70;

/// Each function of the crates' `src/` longer than [`FUNCTION_LINES_MAX`], as
/// `("PATH NAME", lines)`, the longest of a name in a file. A function runs from its `fn` line to
/// the first line that is its indentation and `}`; declarations without a body are skipped.
fn long_functions() -> BTreeMap<String, usize> {
    let mut found = BTreeMap::new();
    for krate in CRATES {
        for (path, text) in sources(krate) {
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let trimmed = line.trim_start();
                let indent = &line[..line.len() - trimmed.len()];
                let Some(name) = fn_name(trimmed) else {
                    continue;
                };
                // A one-line function (`fn f() -> u8 { 1 }`) is short.
                if line.trim_end().ends_with('}') {
                    continue;
                }
                let close = format!("{indent}}}");
                let end = lines[i..].iter().position(|l| *l == close);
                if let Some(end) = end {
                    let n = end + 1;
                    if n > FUNCTION_LINES_MAX {
                        let key = format!("{} {name}", relative(&path));
                        let longest = found.entry(key).or_insert(0);
                        *longest = (*longest).max(n);
                    }
                }
            }
        }
    }
    found
}

/// The name of the function a line declares (`fn`, after any `pub`, `const`, `async`, ...).
fn fn_name(trimmed: &str) -> Option<&str> {
    let mut rest = trimmed;
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    // A signature with no body on this or a later line (a trait's declaration) ends in `;`.
    (!trimmed.trim_end().ends_with(';')).then_some(&rest[..end])
}

/// TIGER_STYLE's short functions, as a ratchet: `long_functions.txt` lists the functions over
/// 70 lines there are; none may be added, none may grow, and one that shrank to 70 or fewer
/// leaves the list.
#[test]
fn functions_over_70_lines_may_only_shrink() {
    let listed_text =
        std::fs::read_to_string(root().join("oracle_cli/tests/long_functions.txt")).unwrap();
    let mut listed = BTreeMap::new();
    for line in listed_text.lines().filter(|l| !l.starts_with('#')) {
        let (n, key) = line.split_once(' ').expect("LINES PATH NAME");
        listed.insert(
            key.to_owned(),
            n.parse::<usize>().expect("LINES is a number"),
        );
    }
    let found = long_functions();
    let mut wrong = Vec::new();
    for (key, &n) in &found {
        match listed.get(key) {
            None => wrong.push(format!(
                "{key}: {n} lines, over {FUNCTION_LINES_MAX}: split it"
            )),
            Some(&max) if n > max => wrong.push(format!("{key}: grew from {max} to {n} lines")),
            Some(_) => {}
        }
    }
    for key in listed.keys().filter(|k| !found.contains_key(*k)) {
        wrong.push(format!(
            "{key}: 70 lines or fewer now (or gone): remove it from the list"
        ));
    }
    assert!(
        wrong.is_empty(),
        "oracle_cli/tests/long_functions.txt:\n{}",
        wrong.join("\n")
    );
}
