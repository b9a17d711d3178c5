//! `oracle export` and `oracle import` end to end: an exported log is byte-identical to the
//! run's and verifies; importing it into another home makes a run with the same head that
//! `verify`, `log` and `diff` read; a damaged, foreign or hostile file is refused and leaves
//! nothing behind. A conversation (`import --messages`) becomes a run that verifies and that
//! `oracle demand` reads; a file that is not one is refused alike.

use crate::common;

use std::fs;

use common::Sandbox;

#[test]
fn an_exported_log_is_the_runs_bytes_and_imports_into_another_home() {
    let sb = Sandbox::new();
    let (code, v) = sb.json(&["run", "fixtures/plans/quickstart.plan", "--json"]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = sb.json(&["export", "quickstart-1", "--out", "q.jsonl", "--json"]);
    assert_eq!(code, 0, "{v}");
    let head = v["head"].as_str().unwrap().to_owned();
    assert_eq!(
        fs::read(sb.path().join("q.jsonl")).unwrap(),
        fs::read(sb.log(".oracle", "quickstart-1")).unwrap(),
        "byte-identical to the home's log"
    );
    let (code, out, err) = sb.oracle(&["verify", "q.jsonl"]);
    assert_eq!(code, 0, "{out}{err}");
    // An existing file is kept unless --force.
    let (code, _, err) = sb.oracle(&["export", "quickstart-1", "--out", "q.jsonl"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already exists"), "{err}");
    let (code, _, _) = sb.oracle(&["export", "quickstart-1", "--out", "q.jsonl", "--force"]);
    assert_eq!(code, 0);

    let (code, v) = sb.json(&["--home", "other", "import", "q.jsonl", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["run"], "quickstart-1");
    assert_eq!(v["head"], head.as_str());
    assert_eq!(
        fs::read(sb.log("other", "quickstart-1")).unwrap(),
        fs::read(sb.path().join("q.jsonl")).unwrap()
    );
    let (code, out, err) = sb.oracle(&["--home", "other", "verify", "quickstart-1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = sb.oracle(&["--home", "other", "log", "quickstart-1"]);
    assert_eq!(code, 0);
    assert!(out.contains("run_finished"), "{out}");
    // Imported again: a second run, the same bytes.
    let (_, v) = sb.json(&["--home", "other", "import", "q.jsonl", "--json"]);
    assert_eq!(v["run"], "quickstart-2");
    let (code, v) = sb.json(&[
        "diff",
        "other/runs/quickstart-1/events.jsonl",
        "other/runs/quickstart-2/events.jsonl",
        "--json",
    ]);
    assert_eq!(code, 0, "identical runs: {v}");
}

#[test]
fn a_damaged_or_foreign_file_is_refused_and_nothing_is_created() {
    let sb = Sandbox::new();
    let (code, _) = sb.json(&["run", "fixtures/plans/quickstart.plan", "--json"]);
    assert_eq!(code, 0);
    let log = fs::read_to_string(sb.log(".oracle", "quickstart-1")).unwrap();
    // One changed byte inside a payload.
    let damaged = log.replacen("quickstart", "quickstarT", 1);
    assert_ne!(damaged, log);
    sb.write("damaged.jsonl", &damaged);
    let (code, _, err) = sb.oracle(&["--home", "other", "import", "damaged.jsonl"]);
    assert_eq!(code, 4, "an integrity failure: {err}");
    sb.write("prose.txt", "not a log\n");
    let (code, _, err) = sb.oracle(&["--home", "other", "import", "prose.txt"]);
    assert_ne!(code, 0, "{err}");
    let (code, _, err) = sb.oracle(&["--home", "other", "import", "."]);
    assert_eq!(code, 2, "a directory: {err}");
    let runs = sb.path().join("other/runs");
    let left: Vec<_> = fs::read_dir(&runs)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "nothing created: {left:?}");
}

#[test]
fn a_conversation_imports_as_a_run_that_verifies_and_demand_reads() {
    let sb = Sandbox::new();
    let file = common::root().join("fixtures/demand/conversation.json");
    let file = file.to_str().unwrap();
    let (code, v) = sb.json(&["import", "--messages", file, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["run"], "conversation-1");
    // run_started, 12 messages (3 assistant turns with tool calls: 2 events + 1 per call),
    // run_finished.
    assert_eq!(v["events"], 22);
    let (code, out, err) = sb.oracle(&["verify", "conversation-1"]);
    assert_eq!(code, 0, "{out}{err}");
    // The same file, the same bytes.
    let (code, _) = sb.json(&["import", "--messages", file, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(
        fs::read(sb.log(".oracle", "conversation-1")).unwrap(),
        fs::read(sb.log(".oracle", "conversation-2")).unwrap()
    );
    let module = common::root().join("fixtures/demand/policies/pin_first.wat");
    let policy = format!("lru,wasm:{}", module.display());
    let (code, v) = sb.json(&[
        "demand",
        "conversation-1",
        "--horizon",
        "3",
        "--budgets",
        "2,4",
        "--policy",
        &policy,
        "--json",
        "--trace",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["events"], 22);
    let trace = v["trace"].as_array().unwrap();
    let row = |seq: usize| (trace[seq]["kind"].clone(), trace[seq]["deps"].clone());
    // Message 0 (the system prompt) is event 1; the model call of message 5, after the two
    // tools' answers (events 7 and 8), reads the prompt and both answers.
    assert_eq!(row(1).0, "state_changed");
    assert_eq!(
        row(9),
        (
            serde_json::json!("tool_called"),
            serde_json::json!([1, 7, 8])
        )
    );
    // A tool's answer names its call (events 5 and 6 are the two calls of message 2).
    assert_eq!(row(7).1, serde_json::json!([5, 6]));
    for r in v["results"].as_array().unwrap() {
        assert!(r["gap"].as_i64().unwrap() >= 0, "{r}");
        assert!(r["tokens"].as_u64().unwrap() > 0, "{r}");
    }
}

#[test]
fn a_file_that_is_not_a_conversation_is_refused_and_nothing_is_created() {
    let sb = Sandbox::new();
    let cases = [
        ("prose.json", "not json"),
        ("object.json", r#"{"role": "user", "content": "hi"}"#),
        ("empty.json", "[]"),
        ("role.json", r#"[{"role": "narrator", "content": "once"}]"#),
        ("norole.json", r#"[{"content": "hi"}]"#),
        ("content.json", r#"[{"role": "user", "content": 7}]"#),
        (
            "float.json",
            r#"[{"role": "user", "content": [{"type": "text", "weight": 0.5}]}]"#,
        ),
        (
            "orphan.json",
            r#"[{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "1"}]"#,
        ),
        (
            "twice.json",
            r#"[{"role": "assistant", "content": null, "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "a", "content": "1"},
                {"role": "tool", "tool_call_id": "a", "content": "2"}]"#,
        ),
        (
            "noid.json",
            r#"[{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f"}}]}]"#,
        ),
    ];
    for (name, text) in cases {
        sb.write(name, text);
        let (code, v) = sb.json(&["import", "--messages", name, "--json"]);
        assert_eq!(code, 2, "{name}: {v}");
        assert_eq!(v["error"]["code"], "conversation_invalid", "{name}: {v}");
        let (code, _, err) = sb.oracle(&["import", "--messages", name]);
        assert_eq!(code, 2, "{name}");
        assert!(err.contains("conversation is refused"), "{name}: {err}");
    }
    // A missing file, and a log given with --messages.
    let (code, _, err) = sb.oracle(&["import", "--messages", "missing.json"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = sb.oracle(&["import", "x.jsonl", "--messages", "empty.json"]);
    assert_eq!(code, 2, "{err}");
    let runs = sb.path().join(".oracle/runs");
    let left: Vec<_> = fs::read_dir(&runs)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "nothing created: {left:?}");
}
