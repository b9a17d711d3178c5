//! The `--json` contract (issue 16, docs/FORMAT.md "Errors"): every command that takes `--json`
//! prints exactly one JSON document when it fails (streams print JSON lines when they succeed),
//! with one error shape: `{"ok": false, "error": {"code", "exit", "message", ...}}`, where
//! `exit` is the process's exit code. Usage errors included.

use crate::common;

use serde_json::Value;

/// Runs `oracle ARGS` in a sandbox holding the fixtures and one suspended run.
fn setup() -> common::Sandbox {
    let sb = common::Sandbox::new();
    common::copy_dir(
        &common::root().join("fixtures/logs"),
        &sb.path().join("fixtures/logs"),
    );
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/escalation.plan"]);
    assert_eq!(code, 3, "{err}");
    sb
}

/// Checks one failing invocation: exit code `exit`, stdout exactly one JSON document in the
/// error shape.
fn fails_with_one_error_document(sb: &common::Sandbox, args: &[&str], exit: i32) {
    let (code, out, err) = sb.oracle(args);
    assert_eq!(code, exit, "{args:?}: {out}{err}");
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}): {out}"));
    // A stream (`log --json`: JSON lines) that fails midway ends with the error document; any
    // other command prints exactly one.
    if args[0] != "log" {
        assert_eq!(docs.len(), 1, "{args:?}: exactly one JSON document: {out}");
    }
    let v = docs.last().unwrap_or_else(|| panic!("{args:?}: no JSON"));
    assert_eq!(v["ok"], false, "{args:?}: {v}");
    let e = &v["error"];
    assert!(e["code"].is_string(), "{args:?}: error.code: {v}");
    assert_eq!(e["exit"], exit, "{args:?}: error.exit: {v}");
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{args:?}: error.message: {v}"
    );
    for key in ["seq", "line", "col"] {
        assert!(
            e.get(key).is_none_or(|x| x.is_null() || x.is_u64()),
            "{args:?}: error.{key}: {v}"
        );
    }
    assert!(
        e.get("path").is_none_or(|x| x.is_null() || x.is_string()),
        "{args:?}: error.path: {v}"
    );
}

#[test]
fn every_command_fails_with_one_json_error_document() {
    let sb = setup();
    sb.write(
        "bad.plan",
        "plan bad version 1\nx = text.cout { text: \"a\" }\n",
    );
    let cases: &[(&[&str], i32)] = &[
        (&["run", "nope.plan", "--json"], 2),
        (&["run", "bad.plan", "--json"], 2),
        (&["run", "--bogus", "--json"], 2),
        (&["resume", "no-such-run", "--json"], 2),
        (
            &[
                "resume",
                "escalation-1",
                "--step",
                "total",
                "--value",
                "1250",
                "--json",
            ],
            2,
        ),
        (&["replay", "no-such-run", "--json"], 2),
        (&["runs", "--status", "nope", "--json"], 2),
        (
            &[
                "verify",
                "fixtures/logs/broken/tampered-middle.jsonl",
                "--json",
            ],
            4,
        ),
        (&["verify", "no-such-run", "--json"], 2),
        (&["log", "no-such-run", "--json"], 2),
        (&["log", "fixtures/logs/broken/not-json.jsonl", "--json"], 4),
        (
            &[
                "inspect",
                "fixtures/logs/quickstart.jsonl",
                "--at",
                "99",
                "--json",
            ],
            2,
        ),
        (&["repair", "no-such-run", "--json"], 2),
        (&["snapshot", "no-such-run", "--json"], 2),
        (&["keygen", "--out", "no/such/dir/k", "--json"], 2),
        (
            &["checkpoint", "escalation-1", "--key", "nope.key", "--json"],
            2,
        ),
        (&["diff", "nope-a", "nope-b", "--json"], 2),
        (&["memory", "no-such-run", "--json"], 2),
        (&["adjudications", "no-such-run", "--json"], 2),
        (
            &[
                "adjudicate",
                "escalation-1",
                "adj-1",
                "--verdict",
                "affirm",
                "--evidence",
                "external_first_hand",
                "--json",
            ],
            5,
        ),
        (&["sweep", "no-such-run", "--json"], 2),
        (
            &[
                "claim",
                "no-such-run",
                "--subject",
                "s",
                "--predicate",
                "p",
                "--value",
                "1",
                "--provenance",
                "user_asserted",
                "--json",
            ],
            2,
        ),
        (
            &[
                "reinstate",
                "escalation-1",
                "0123",
                "--evidence",
                "external_first_hand",
                "--json",
            ],
            2,
        ),
        (&["demand", "no-such-run", "--horizon", "2", "--json"], 2),
        (&["auction", "escalation-1", "--json"], 2),
        (
            &[
                "synth",
                "--events",
                "10",
                "--out",
                "no/such/dir/x.jsonl",
                "--json",
            ],
            2,
        ),
        (&["plan", "check", "bad.plan", "--json"], 2),
        (&["plan", "hash", "nope.plan", "--json"], 2),
    ];
    for (args, exit) in cases {
        fails_with_one_error_document(&sb, args, *exit);
    }
}

/// Successes print one document, or JSON lines for the listing commands (one value per line).
#[test]
fn every_command_succeeds_with_json_documents() {
    let sb = setup();
    let cases: &[&[&str]] = &[
        &["run", "fixtures/plans/quickstart.plan", "--json"],
        &["replay", "quickstart-1", "--json"],
        &["runs", "--json"],
        &["verify", "quickstart-1", "--json"],
        &["log", "quickstart-1", "--json"],
        &["inspect", "quickstart-1", "--json"],
        &["repair", "quickstart-1", "--json"],
        &["snapshot", "quickstart-1", "--at", "5", "--json"],
        &["diff", "quickstart-1", "quickstart-1", "--json"],
        &["memory", "escalation-1", "--json"],
        &["adjudications", "escalation-1", "--json"],
        &["demand", "quickstart-1", "--horizon", "2", "--json"],
        &["plan", "check", "fixtures/plans/quickstart.plan", "--json"],
        &["plan", "hash", "fixtures/plans/quickstart.plan", "--json"],
        &["plan", "tools", "--json"],
    ];
    for args in cases {
        let (code, out, err) = sb.oracle(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        for line in out.lines().filter(|l| !l.trim().is_empty()) {
            let v: Result<Value, _> = serde_json::from_str(line);
            if v.is_err() {
                // Not JSON lines: then the whole output is one document.
                let whole: Value = serde_json::from_str(&out)
                    .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"));
                assert!(whole.is_object(), "{args:?}");
                break;
            }
        }
    }
}
