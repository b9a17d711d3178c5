//! The plan language through the real `oracle` binary: every file in `fixtures/plans/bad/` gets
//! the diagnostics recorded beside it (`NAME.expected`, refreshed with `UPDATE_EXPECT=1`), every
//! working plan compiles, and every example in `docs/PLAN.md` behaves as the document says.

use crate::common;

use common::{Sandbox, oracle, root};

use std::path::{Path, PathBuf};

/// `path` relative to the workspace root, as the binary (run from the root) is given it.
fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

fn plans_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "plan"))
        .collect();
    v.sort();
    v
}

/// Compares `actual` with the golden file `expected` (or, with `update`, writes it there):
/// a description of the difference for `rel`, if any.
fn golden(expected: &Path, rel: &str, actual: &str, update: bool) -> Option<String> {
    if update {
        std::fs::write(expected, actual).unwrap();
        return None;
    }
    let recorded = std::fs::read_to_string(expected).unwrap_or_default();
    (recorded != actual).then(|| format!("{rel}:\n--- expected\n{recorded}--- actual\n{actual}"))
}

#[test]
fn bad_plans_print_the_recorded_diagnostics() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut failures = Vec::new();
    let bad = plans_in(&root().join("fixtures/plans/bad"));
    assert!(bad.len() >= 15, "one bad plan per kind of mistake");
    for plan in bad {
        let rel = relative(&plan);
        let (code, stdout, stderr) = oracle(&["plan", "check", &rel]);
        assert_eq!(code, 2, "{rel}: a plan with errors exits 2\n{stderr}");
        assert!(stdout.is_empty(), "{rel}: diagnostics go to stderr");
        assert!(
            stderr.contains("Error"),
            "{rel}: says it is an error:\n{stderr}"
        );
        failures.extend(golden(
            &plan.with_extension("expected"),
            &rel,
            &stderr,
            update,
        ));
    }
    assert!(
        failures.is_empty(),
        "diagnostics changed (UPDATE_EXPECT=1 to accept):\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_error_names_its_line_and_column() {
    for plan in plans_in(&root().join("fixtures/plans/bad")) {
        let rel = relative(&plan);
        let (_, stdout, _) = oracle(&["plan", "check", "--json", &rel]);
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["ok"], false, "{rel}");
        let diags = v["diagnostics"].as_array().unwrap();
        assert!(!diags.is_empty(), "{rel}");
        for d in diags {
            assert!(
                d["line"].as_u64().unwrap() >= 1 && d["column"].as_u64().unwrap() >= 1,
                "{rel}: {d}"
            );
            assert!(d["code"].as_str().unwrap().starts_with('E'), "{rel}: {d}");
        }
    }
}

#[test]
fn several_mistakes_are_all_reported() {
    let (_, stdout, _) = oracle(&[
        "plan",
        "check",
        "--json",
        "fixtures/plans/bad/several-mistakes.plan",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(v["diagnostics"].as_array().unwrap().len() >= 3, "{stdout}");
}

/// "Stably": the same plan hashes the same in another process and after a change of layout
/// only (blank lines, a comment), and different plans hash differently.
#[test]
fn working_plans_compile_and_hash_stably() {
    let scratch = tempfile::tempdir().unwrap();
    let mut seen: std::collections::BTreeMap<String, String> = Default::default();
    for plan in plans_in(&root().join("fixtures/plans")) {
        let rel = relative(&plan);
        let (code, stdout, stderr) = oracle(&["plan", "check", &rel]);
        assert_eq!(code, 0, "{rel}:\n{stderr}");
        assert!(stdout.starts_with("ok"), "{rel}: {stdout}");
        let (code, h1, _) = oracle(&["plan", "hash", &rel]);
        assert_eq!(code, 0);
        let h1 = h1.trim().to_owned();
        assert!(
            h1.len() == 64
                && h1
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{rel}: {h1}"
        );
        let (_, again, _) = oracle(&["plan", "hash", &rel]);
        assert_eq!(again.trim(), h1, "{rel}: another process, the same hash");
        let relaid = scratch.path().join(plan.file_name().unwrap());
        let text = std::fs::read_to_string(&plan).unwrap();
        std::fs::write(
            &relaid,
            format!("{}\n\n# layout only\n\n", text.replace('\n', "\n\n")),
        )
        .unwrap();
        let (code, h2, err) = oracle(&["plan", "hash", relaid.to_str().unwrap()]);
        assert_eq!(code, 0, "{rel}: {err}");
        assert_eq!(
            h2.trim(),
            h1,
            "{rel}: blank lines and comments do not change the hash"
        );
        if let Some(other) = seen.insert(h1.clone(), rel.clone()) {
            panic!("{rel} and {other} hash alike: {h1}");
        }
        for format in ["text", "dot", "json"] {
            let (code, out, err) = oracle(&["plan", "graph", &rel, "--format", format]);
            assert_eq!(code, 0, "{rel} --format {format}: {err}");
            assert!(!out.is_empty());
        }
    }
}

#[test]
fn the_diamond_has_two_independent_steps_in_one_level() {
    let (_, stdout, _) = oracle(&[
        "plan",
        "graph",
        "fixtures/plans/diamond.plan",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        v["levels"],
        serde_json::json!([["read"], ["lines", "words"], ["report"]])
    );
    assert_eq!(
        v["order"],
        serde_json::json!(["read", "lines", "words", "report"])
    );
    let (_, dot, _) = oracle(&[
        "plan",
        "graph",
        "fixtures/plans/diamond.plan",
        "--format",
        "dot",
    ]);
    assert!(
        dot.starts_with("digraph") && dot.contains("\"read\" -> \"lines\""),
        "{dot}"
    );
}

#[test]
fn the_plan_hash_ignores_formatting_but_not_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(root().join("fixtures/plans/quickstart.plan")).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let hash = |p: &str| {
        let (code, out, err) = oracle(&["plan", "hash", p]);
        assert_eq!(code, 0, "{err}");
        out.trim().to_owned()
    };
    let original = hash(&write("a.plan", &src));
    // Comments, blank lines, indentation and argument order do not change the hash.
    let reformatted = src
        .replace("# Quickstart", "# A different comment\n\n# Quickstart")
        .replace("  path: \"out/summary.txt\",\n  content:", "      content:")
        .replace(
            "+ \", lines: \" + stats.lines,",
            "+ \", lines: \" + stats.lines, path: \"out/summary.txt\",",
        );
    assert_ne!(reformatted, src);
    assert_eq!(hash(&write("b.plan", &reformatted)), original);
    // A changed literal, threshold or policy does.
    for (from, to) in [
        ("min_words: int = 5", "min_words: int = 6"),
        ("stats.words > 0", "stats.words > 1"),
    ] {
        let changed = src.replace(from, to);
        assert_ne!(changed, src);
        assert_ne!(hash(&write("c.plan", &changed)), original, "{from} -> {to}");
    }
}

/// Code blocks in docs/PLAN.md fenced as ```plan must compile; ```plan-error blocks must not,
/// and must produce the code named on their first line (`# error: E0205`).
#[test]
fn plan_md_examples_behave_as_documented() {
    let doc = std::fs::read_to_string(root().join("docs/PLAN.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let kind = match line.trim() {
            "```plan" => "ok",
            "```plan-error" => "error",
            _ => continue,
        };
        let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let text = block.join("\n") + "\n";
        let path = dir.path().join(format!("example{checked}.plan"));
        std::fs::write(&path, &text).unwrap();
        let (code, stdout, stderr) = oracle(&["plan", "check", "--json", path.to_str().unwrap()]);
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        if kind == "ok" {
            assert_eq!(
                code, 0,
                "docs/PLAN.md example should compile:\n{text}\n{stderr}\n{stdout}"
            );
        } else {
            assert_eq!(code, 2, "docs/PLAN.md example should fail:\n{text}");
            let want = block[0]
                .trim()
                .strip_prefix("# error: ")
                .expect("plan-error blocks start with `# error: CODE`");
            let codes: Vec<&str> = v["diagnostics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["code"].as_str().unwrap())
                .collect();
            assert!(
                codes.contains(&want),
                "expected {want}, got {codes:?} for:\n{text}"
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 8,
        "docs/PLAN.md has its examples ({checked} found)"
    );
}

/// A grant whose path pattern has a `..` component is refused, naming it: in a plan's `grant`
/// line (E0210, through the capability parser the compiler uses) and in `--grant`, before
/// anything runs (red team, issue 32, item 10).
#[test]
fn a_grant_with_a_dot_dot_component_is_refused_by_plan_and_flag() {
    let sb = Sandbox::new();
    for grant in [
        "fs:read:../**",
        "fs:read:./../x",
        "fs:write:a/../../b",
        "*:*:a/../b",
    ] {
        sb.write(
            "p.plan",
            &format!("plan p version 1\ngrant {grant}\n\ncount = text.count {{ text: \"x\" }}\n"),
        );
        let (code, v) = sb.json(&["plan", "check", "p.plan", "--json"]);
        assert_eq!(code, 2, "{grant}: {v}");
        let d = &v["diagnostics"][0];
        assert_eq!(d["code"], "E0210", "{grant}: {v}");
        let message = d["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{grant}`")), "{message}");
        assert!(message.contains("`..` component"), "{message}");
        let (code, _, err) = sb.oracle(&["run", "p.plan"]);
        assert_eq!(code, 2, "{grant}: {err}");
        assert!(err.contains("`..` component"), "{err}");
    }
    // On the command line, beside a plan that is fine.
    let (code, _, err) = sb.oracle(&[
        "run",
        "fixtures/plans/quickstart.plan",
        "--grant",
        "fs:read:../**",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`fs:read:../**`"), "{err}");
    assert!(err.contains("`..` component"), "{err}");
    assert!(
        !sb.path().join(".oracle/runs").exists()
            || std::fs::read_dir(sb.path().join(".oracle/runs"))
                .unwrap()
                .next()
                .is_none(),
        "nothing was run"
    );
    // A name with dots in it is not a `..` component.
    sb.write(
        "ok.plan",
        "plan ok version 1\ngrant fs:read:..data/**\n\ncount = text.count { text: \"x\" }\n",
    );
    let (code, _, err) = sb.oracle(&["plan", "check", "ok.plan"]);
    assert_eq!(code, 0, "{err}");
}

/// Every plan in `fixtures/plans/unbound/` names a model or secret a run would not bind: `oracle
/// run` refuses it before its first event, exit 2, nothing created, with the message recorded
/// beside it (`NAME.expected`, refreshed with `UPDATE_EXPECT=1`), which names the flag and the
/// config key that would bind it.
#[test]
fn unbound_plans_are_refused_before_any_event_with_the_recorded_message() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let sb = Sandbox::new();
    let plans = plans_in(&sb.path().join("fixtures/plans/unbound"));
    assert!(plans.len() >= 2, "an unbound model and an unbound secret");
    let mut failures = Vec::new();
    for plan in plans {
        let rel = plan
            .strip_prefix(sb.path())
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let (code, stdout, stderr) = sb.oracle(&["run", &rel]);
        assert_eq!(code, 2, "{rel}: {stdout}{stderr}");
        assert!(
            !sb.path().join(".oracle/runs").exists(),
            "{rel}: nothing created"
        );
        let expected = root().join(&rel).with_extension("expected");
        failures.extend(golden(&expected, &rel, &stderr, update));
    }
    assert!(
        failures.is_empty(),
        "messages changed (UPDATE_EXPECT=1 to accept):\n{}",
        failures.join("\n")
    );
}
