//! `oracle export` and `oracle import` end to end: an exported log is byte-identical to the
//! run's and verifies; importing it into another home makes a run with the same head that
//! `verify`, `log` and `diff` read; a damaged, foreign or hostile file is refused and leaves
//! nothing behind.

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
