//! `oracle diff` through the real binary: pairs of logs in `fixtures/diff/` (derived from the
//! quickstart log, one per outcome class, each self-consistent so `verify` passes) and their
//! human and JSON reports pinned as golden files. `UPDATE_EXPECT=1` regenerates both the pairs
//! and the reports.

use crate::common;

use common::{oracle, root};

use std::path::Path;

use oracle_core::event::relink;
use oracle_core::{Event, EventKind, Hash, record};
use serde_json::json;

fn quickstart() -> Vec<Event> {
    oracle_runtime::reader::read_all(&root().join("fixtures/logs/quickstart.jsonl")).unwrap()
}

/// Replaces the state hash `old` from event `k` on, for as long as the chain carries it, so the
/// changed log still links.
fn swap_state(events: &mut [Event], k: usize, new: Hash) {
    let old = events[k].state_after;
    events[k].state_after = new;
    for e in &mut events[k + 1..] {
        if e.state_before != old {
            break;
        }
        e.state_before = new;
        if e.state_after != old {
            break;
        }
        e.state_after = new;
    }
}

/// The pairs: name, A, B, and the exit code `diff` must give.
fn pairs() -> Vec<(&'static str, Vec<Event>, Vec<Event>, i32)> {
    let q = quickstart();
    let find = |kind: EventKind, step: &str| {
        q.iter()
            .position(|e| e.kind == kind && e.payload["step"] == step)
            .unwrap()
    };
    let mut inputs = q.clone();
    inputs[0].payload["inputs"]["path"] = json!("fixtures/data/other.txt");
    let mut payload = q.clone();
    let k = find(EventKind::ToolReturned, "stats");
    let words = payload[k].payload["output"]["words"].as_u64().unwrap();
    payload[k].payload["output"]["words"] = json!(words + 3);
    let mut state = q.clone();
    let k = q
        .iter()
        .position(|e| e.kind == EventKind::StateChanged)
        .unwrap();
    swap_state(&mut state, k, Hash([0x5a; 32]));
    let mut structure = q.clone();
    let k = find(EventKind::ToolCalled, "stats");
    structure[k].kind = EventKind::ToolFailed;
    structure[k].payload = json!({"step": "stats", "tool": "text.count", "attempt": 1, "error": "timed out after 5000 ms"});
    let mut out = vec![
        ("identical", q.clone(), q.clone(), 0),
        ("prefix", q.clone(), q[..12].to_vec(), 1),
        ("inputs", q.clone(), inputs, 1),
        ("payload", q.clone(), payload, 1),
        ("state", q.clone(), state, 1),
        ("structure", q.clone(), structure, 1),
    ];
    for (_, _, b, _) in &mut out {
        relink(b).unwrap();
    }
    out
}

fn bytes(events: &[Event]) -> Vec<u8> {
    events.iter().flat_map(record::encode).collect()
}

fn check_golden(path: &Path, actual: &str, update: bool, failures: &mut Vec<String>) {
    if update {
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    if expected != actual {
        failures.push(format!(
            "{}:\n--- expected\n{expected}--- actual\n{actual}",
            path.display()
        ));
    }
}

#[test]
fn diff_reports_match_the_goldens() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut failures = Vec::new();
    for (name, a, b, code) in pairs() {
        let dir = root().join("fixtures/diff").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for (file, events) in [("a.jsonl", &a), ("b.jsonl", &b)] {
            let want = bytes(events);
            assert!(
                oracle_core::verify::verify_bytes(&want, None).is_ok(),
                "{name}/{file} verifies"
            );
            if update {
                std::fs::write(dir.join(file), &want).unwrap();
            } else {
                assert_eq!(
                    std::fs::read(dir.join(file)).unwrap(),
                    want,
                    "fixtures/diff/{name}/{file} is stale (UPDATE_EXPECT=1)"
                );
            }
        }
        let a_path = format!("fixtures/diff/{name}/a.jsonl");
        let b_path = format!("fixtures/diff/{name}/b.jsonl");
        let (got, text, err) = oracle(&["diff", &a_path, &b_path, "--context", "2"]);
        assert_eq!(got, code, "{name}: exit code\n{text}{err}");
        check_golden(&dir.join("expected.txt"), &text, update, &mut failures);
        let (got, json, _) = oracle(&["diff", &a_path, &b_path, "--json"]);
        assert_eq!(got, code, "{name}: exit code with --json");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let pretty = serde_json::to_string_pretty(&v).unwrap() + "\n";
        check_golden(&dir.join("expected.json"), &pretty, update, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "diff reports changed (UPDATE_EXPECT=1 to accept):\n{}",
        failures.join("\n")
    );
}

#[test]
fn each_pair_is_classified_and_located() {
    let q = quickstart();
    let stats_return = q
        .iter()
        .position(|e| e.kind == EventKind::ToolReturned && e.payload["step"] == "stats")
        .unwrap();
    for (name, want_result, want_class, want_seq) in [
        ("identical", "identical", None, None),
        ("prefix", "prefix", None, None),
        ("inputs", "diverged", Some("inputs"), Some(0)),
        (
            "payload",
            "diverged",
            Some("payload"),
            Some(stats_return as u64),
        ),
        ("state", "diverged", Some("state"), None),
        ("structure", "diverged", Some("structure"), None),
    ] {
        let (_, json, err) = oracle(&[
            "diff",
            &format!("fixtures/diff/{name}/a.jsonl"),
            &format!("fixtures/diff/{name}/b.jsonl"),
            "--json",
        ]);
        let v: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|_| panic!("{name}: {json}{err}"));
        assert_eq!(v["result"], want_result, "{name}");
        if let Some(c) = want_class {
            assert_eq!(v["class"], c, "{name}");
        }
        if let Some(s) = want_seq {
            assert_eq!(v["seq"], s, "{name}");
        }
    }
    let (_, json, _) = oracle(&[
        "diff",
        "fixtures/diff/inputs/a.jsonl",
        "fixtures/diff/inputs/b.jsonl",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["detail"]["fields"],
        json!(["inputs.path"]),
        "the report names the input"
    );
}

#[test]
fn an_invalid_log_is_trouble_not_a_difference() {
    let (code, _, err) = oracle(&[
        "diff",
        "fixtures/logs/quickstart.jsonl",
        "fixtures/logs/broken/not-json.jsonl",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot compare"), "{err}");
    let (code, _, _) = oracle(&[
        "diff",
        "fixtures/logs/quickstart.jsonl",
        "no/such/log.jsonl",
    ]);
    assert_eq!(code, 2);
}

/// Issue 16: reading logs the user named leaves nothing beside them. `diff` builds the index it
/// needs in memory and writes `LOG.idx` only with `--index`; the other read-only commands never
/// write beside a log.
#[test]
fn read_only_commands_leave_no_files_beside_the_logs_they_read() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["quickstart.jsonl", "denied.jsonl"] {
        std::fs::copy(root().join("fixtures/logs").join(f), dir.path().join(f)).unwrap();
    }
    let listing = || oracle_test_support::file_names(dir.path());
    let before = listing();
    for args in [
        &["verify", "quickstart.jsonl"][..],
        &["log", "quickstart.jsonl"],
        &["inspect", "quickstart.jsonl", "--at", "5"],
        &["diff", "quickstart.jsonl", "denied.jsonl"],
        &[
            "diff",
            "quickstart.jsonl",
            "denied.jsonl",
            "--no-verify",
            "--json",
        ],
        &["demand", "quickstart.jsonl", "--horizon", "2"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oracle"))
            .args(args)
            .current_dir(dir.path())
            .env("ORACLE_HOME", dir.path().join("home"))
            .output()
            .unwrap();
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "{args:?}: {out:?}"
        );
        assert_eq!(listing(), before, "{args:?} left files beside the logs");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(["diff", "quickstart.jsonl", "denied.jsonl", "--index"])
        .current_dir(dir.path())
        .env("ORACLE_HOME", dir.path().join("home"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        dir.path().join("quickstart.jsonl.idx").is_file(),
        "--index keeps it"
    );
}
