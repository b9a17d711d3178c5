//! Hostile input, end to end with the real binary: NUL bytes and invalid UTF-8, outputs over
//! the limit, JSON nested 100k deep, a 1 GB line in a log, a plan with a million steps, floats
//! in inputs and answers, events whose kind and payload disagree, snapshots whose bytes do not
//! match their hash. Each gets a clear error naming where, a distinct exit code, no panic, and
//! no recorded byte changed. (Paths climbing out of a grant through `..`, absolute paths and
//! symlinks are in `run.rs`: `reads_outside_the_grant_are_denied_before_anything_is_read`.)

use crate::common;

use std::fs;
use std::io::Write;
use std::path::Path;

use common::Sandbox;
use oracle_core::limits::VALUE_DEPTH_MAX;
use oracle_core::{Event, Payload};
use serde_json::Value;

/// The tool failures and capability denials of a run, as (step, message).
fn refusals(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e.typed().unwrap() {
            Payload::ToolFailed(f) => Some((f.step, f.error)),
            Payload::CapabilityDenied(d) => Some((d.step, d.reason)),
            _ => None,
        })
        .collect()
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// No panic reached the user: Rust's panic message and a signal death look like this.
fn no_panic(code: i32, err: &str) {
    assert!(!err.contains("panicked"), "{err}");
    assert!((0..=7).contains(&code), "exit {code}: {err}");
}

#[test]
fn nul_bytes_invalid_utf8_and_oversized_outputs_are_refused_by_name() {
    let sb = Sandbox::new();
    let mut binary = vec![0xffu8, 0xfe, 0x00];
    binary.extend_from_slice(b"not text");
    fs::write(sb.path().join("fixtures/data/binary.bin"), binary).unwrap();
    fs::write(
        sb.path().join("fixtures/data/huge.txt"),
        "x".repeat((8 << 20) + 1),
    )
    .unwrap();
    sb.write(
        "hostile.plan",
        &r#"plan hostile version 1
grant fs:read:fixtures/data/**
input suffix: string = "\u{0}/../../../etc/passwd"
nul = fs.read { path: "fixtures/data/notes.txt" + suffix }
  retry 1
  on failure continue
binary = fs.read { path: "fixtures/data/binary.bin" }
  retry 1
  on failure continue
huge = fs.read { path: "fixtures/data/huge.txt" }
  retry 1
  on failure continue
float = json.parse { text: "{\"price\": 1.5}" }
  retry 1
  on failure continue
deep = json.parse { text: "DEEP" }
  retry 1
  on failure continue
too_deep = json.parse { text: "TOO_DEEP" }
  retry 1
  on failure continue
deepest = json.parse { text: "DEEPEST" }
  retry 1
  on failure continue
"#
        // Well-formed JSON text nested 128 deep, where serde_json's recursion limit refuses
        // JSON (docs/SECURITY.md: "refused at depth ... 128"), so the parser stops at the limit
        // and not at a syntax error; and values at `VALUE_DEPTH_MAX` levels of output
        // (`{value: ...}` adds one) and one past it.
        .replace("TOO_DEEP", &nested(VALUE_DEPTH_MAX as usize))
        .replace("DEEPEST", &nested(VALUE_DEPTH_MAX as usize - 1))
        .replace("DEEP", &nested(128)),
    );
    let (code, r) = sb.json(&["run", "hostile.plan", "--json"]);
    assert_eq!(code, 0, "{r}");
    let events = sb.events(".oracle", "hostile-1");
    let got = refusals(&events);
    let message = |step: &str| {
        got.iter()
            .find(|(s, _)| s == step)
            .map(|(_, m)| m.clone())
            .unwrap_or_else(|| panic!("no refusal for {step}: {got:?}"))
    };
    assert!(message("nul").contains("contains a NUL byte"), "{got:?}");
    assert!(
        message("binary").contains("is not UTF-8 text (invalid byte at offset 0)"),
        "{got:?}"
    );
    assert!(
        message("huge").contains("larger than the limit of 8388608 bytes"),
        "{got:?}"
    );
    assert!(message("float").contains("float 1.5 at $.price"), "{got:?}");
    // Stopped by the depth limit at the 128th `[`, not by anything before it.
    assert!(
        message("deep").contains("recursion limit exceeded at line 1 column 128"),
        "{got:?}"
    );
    assert!(
        message("too_deep").contains(&format!(
            "nested {} levels deep, more than value_depth_max = {VALUE_DEPTH_MAX}",
            VALUE_DEPTH_MAX + 1
        )),
        "{got:?}"
    );
    assert!(
        !got.iter().any(|(s, _)| s == "deepest"),
        "a value at the limit is taken: {got:?}"
    );
    // The NUL path never reached a tool: denied before `tool_called`.
    assert!(!events.iter().any(|e| matches!(
        e.typed().unwrap(),
        Payload::ToolCalled(c) if c.step == "nul"
    )));
    let (code, _, err) = sb.oracle(&["replay", "hostile-1"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn plan_files_that_are_not_text_or_too_large_are_refused_before_anything_runs() {
    let sb = Sandbox::new();
    let bad = sb.path().join("latin1.plan");
    fs::write(&bad, b"plan p version 1\n# caf\xe9\nx = clock.now {}\n").unwrap();
    for command in [
        &["plan", "check", "latin1.plan"][..],
        &["run", "latin1.plan"],
    ] {
        let (code, _, err) = sb.oracle(command);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("latin1.plan: not UTF-8 text: invalid bytes on line 2"),
            "{err}"
        );
    }
    sb.write("nul.plan", "plan p version 1\nx = clock.now {}\0\n");
    let (code, out, err) = sb.oracle(&["plan", "check", "nul.plan", "--json"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("unexpected character `\\\\0`"), "{out}");
    // A sparse 40 MB file: refused at plan_bytes_max without being read whole.
    let big = fs::File::create(sb.path().join("big.plan")).unwrap();
    big.set_len(40 << 20).unwrap();
    let (code, _, err) = sb.oracle(&["run", "big.plan"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("more than plan_bytes_max = 33554432"), "{err}");
    assert!(
        !sb.path().join(".oracle").exists(),
        "nothing is created for a refused plan"
    );
}

#[test]
fn a_plan_with_a_million_steps_is_refused_with_the_named_limit() {
    let sb = Sandbox::new();
    let mut text = String::from("plan big version 1\n");
    for i in 0..1_000_000 {
        text.push_str(&format!("s{i} = clock.now {{}}\n"));
    }
    sb.write("million.plan", &text);
    let (code, _, err) = sb.oracle(&["run", "million.plan"]);
    no_panic(code, &err);
    assert_eq!(code, 2);
    assert!(
        err.contains("million.plan: the plan has 1 error(s)"),
        "{err}"
    );
    let (code, out, _) = sb.oracle(&["plan", "check", "million.plan", "--json"]);
    assert_eq!(code, 2);
    let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let d = &v["diagnostics"][0];
    assert_eq!(d["code"], "E0216");
    assert_eq!(
        d["line"], 200_002,
        "points at the first step past the limit"
    );
    assert!(!sb.path().join(".oracle").exists());
}

#[test]
fn json_nested_100k_deep_is_refused_everywhere_without_a_crash() {
    let sb = Sandbox::new();
    let deep = nested(100_000);
    // A plan expression.
    sb.write(
        "deep.plan",
        &format!("plan deep version 1\nx = json.get {{ value: {deep}, path: \"\" }}\n"),
    );
    let (code, out, err) = sb.oracle(&["plan", "check", "deep.plan"]);
    no_panic(code, &err);
    assert_eq!(code, 2);
    // The 200 KB line is named, not printed.
    let shown = format!("{out}{err}");
    assert!(
        shown.contains("E0117") && shown.contains("deep.plan:2:"),
        "{shown}"
    );
    assert!(
        shown.contains("characters, not shown") && shown.len() < 2000,
        "{shown}"
    );
    // An answer from a file, for a run waiting on a person: refused, the log unchanged.
    sb.write(
        "ask.plan",
        "plan ask version 1\ninput data: json = null\nq = human.ask { question: \"ok?\" }\n",
    );
    let (code, _) = sb.json(&["run", "ask.plan", "--json"]);
    assert_eq!(code, 3);
    let log = sb.log(".oracle", "ask-1");
    let before = fs::read(&log).unwrap();
    sb.write("deep.json", &deep);
    let (code, _, err) = sb.oracle(&[
        "resume",
        "ask-1",
        "--step",
        "q",
        "--value-file",
        "deep.json",
    ]);
    no_panic(code, &err);
    assert_eq!(code, 2);
    assert!(
        err.contains("deep.json: not JSON: recursion limit exceeded"),
        "{err}"
    );
    assert_eq!(fs::read(&log).unwrap(), before);
    // A run input (60k deep: one argument may hold at most 128 KiB).
    let (code, _, err) = sb.oracle(&[
        "run",
        "ask.plan",
        "--input",
        &format!("data={}", nested(60_000)),
    ]);
    no_panic(code, &err);
    assert_eq!(code, 2);
    assert!(err.contains("input `data` must be JSON"), "{err}");
    // A log record whose payload is nested 100k deep.
    let text = fs::read_to_string(common::root().join("fixtures/logs/quickstart.jsonl")).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let at = lines[5].find("\"payload\":").unwrap() + "\"payload\":".len();
    let end = lines[5].find(",\"payload_hash\"").unwrap();
    lines[5] = format!("{}{{\"x\":{deep}}}{}", &lines[5][..at], &lines[5][end..]);
    sb.write("deep.jsonl", &(lines.join("\n") + "\n"));
    for command in [
        &["verify", "deep.jsonl"][..],
        &["log", "deep.jsonl"],
        &["inspect", "deep.jsonl"],
    ] {
        let (code, _, err) = sb.oracle(command);
        no_panic(code, &err);
        assert_eq!(code, 4, "{command:?}: {err}");
        assert!(err.contains("event 5"), "{err}");
    }
}

#[test]
fn a_gigabyte_line_in_a_log_is_reported_at_its_event_and_never_repaired_away() {
    let sb = Sandbox::new();
    let text = fs::read_to_string(common::root().join("fixtures/logs/quickstart.jsonl")).unwrap();
    let head: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
    let path = sb.path().join("huge.jsonl");
    let mut f = fs::File::create(&path).unwrap();
    f.write_all(head.as_bytes()).unwrap();
    f.write_all(b"{\"seq\":3,").unwrap();
    // A sparse gigabyte: the line is NUL bytes up to its newline, without using the disk.
    let len = head.len() as u64 + (1 << 30);
    f.set_len(len).unwrap();
    drop(f);
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"\n")
        .unwrap();
    let (code, out) = sb.json(&["verify", "huge.jsonl", "--json"]);
    assert_eq!(code, 4, "{out}");
    assert_eq!(out["error"]["seq"], 3);
    let reason = out["error"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("67108864"),
        "names the record limit: {reason}"
    );
    // Not a torn tail: repair refuses it and the file keeps every byte.
    let (code, _, err) = sb.oracle(&["repair", "huge.jsonl"]);
    assert_eq!(code, 4, "{err}");
    assert_eq!(fs::metadata(&path).unwrap().len(), len + 1);
}

#[test]
fn floats_in_inputs_and_answers_are_refused_and_nothing_is_written() {
    let sb = Sandbox::new();
    sb.write(
        "ask.plan",
        "plan ask version 1\ninput data: json = null\ninput n: int = 1\nq = human.ask { question: \"ok?\" }\n",
    );
    let (code, _, err) = sb.oracle(&["run", "ask.plan", "--input", "data={\"x\":1.5}"]);
    assert_eq!(code, 2);
    assert!(err.contains("float 1.5 at $.x"), "{err}");
    let (code, _, err) = sb.oracle(&["run", "ask.plan", "--input", "n=2.0"]);
    assert_eq!(code, 2);
    assert!(err.contains("input `n` must be an integer"), "{err}");
    assert!(!sb.path().join(".oracle").exists(), "no run was created");
    let (code, _) = sb.json(&["run", "ask.plan", "--json"]);
    assert_eq!(code, 3);
    let log = sb.log(".oracle", "ask-1");
    let before = fs::read(&log).unwrap();
    let (code, _, err) = sb.oracle(&["resume", "ask-1", "--step", "q", "--value", "{\"a\": 2.5}"]);
    assert_eq!(code, 2);
    assert!(err.contains("float 2.5 at $.a"), "{err}");
    assert_eq!(fs::read(&log).unwrap(), before);
    let (code, out, _) = sb.oracle(&["plan", "check", "fixtures/plans/bad/float.plan"]);
    assert_eq!(code, 2, "{out}");
}

#[test]
fn an_event_whose_kind_and_payload_disagree_is_refused_even_when_relinked() {
    let sb = Sandbox::new();
    let (code, _) = sb.json(&["run", "fixtures/plans/quickstart.plan", "--json"]);
    assert_eq!(code, 0);
    let log = sb.log(".oracle", "quickstart-1");
    let text = fs::read_to_string(&log).unwrap();
    let mut events: Vec<Event> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Event 1 is a `step_scheduled`; call it a `run_finished` and seal the chain again.
    assert_eq!(events[1].kind.as_str(), "step_scheduled");
    events[1].kind = oracle_core::EventKind::RunFinished;
    oracle_core::event::relink(&mut events).unwrap();
    let mut out = Vec::new();
    for e in &events {
        out.extend(oracle_core::record::encode(e));
    }
    fs::write(&log, out).unwrap();
    let (code, v) = sb.json(&["verify", "quickstart-1", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["seq"], 1);
    let reason = v["error"]["reason"].as_str().unwrap();
    assert!(reason.contains("run_finished"), "{reason}");
}

#[test]
fn a_snapshot_whose_bytes_do_not_match_its_hash_is_never_used() {
    let sb = Sandbox::new();
    let (code, _) = sb.json(&["run", "fixtures/plans/quickstart.plan", "--json"]);
    assert_eq!(code, 0);
    let (code, honest, _) = sb.oracle(&["inspect", "quickstart-1", "--at", "12", "--json"]);
    assert_eq!(code, 0);
    let (code, _, err) = sb.oracle(&["snapshot", "quickstart-1", "--at", "10"]);
    assert_eq!(code, 0, "{err}");
    let dir = sb.path().join(".oracle/runs/quickstart-1/snapshots");
    let file = fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    // Well-formed JSON, a different state: the recorded hash no longer matches it.
    let mut snap: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
    snap["entries"]["step/read"]["attempts"] = Value::from(2);
    fs::write(&file, serde_json::to_vec(&snap).unwrap()).unwrap();
    let (code, out, err) = sb.oracle(&["inspect", "quickstart-1", "--at", "12", "--json"]);
    assert_eq!(code, 0, "{err}");
    let (honest, out): (Value, Value) = (
        serde_json::from_str(&honest).unwrap(),
        serde_json::from_str(&out).unwrap(),
    );
    assert_eq!(
        out["entries"], honest["entries"],
        "the state comes from the log"
    );
    assert_eq!(out["state_hash"], honest["state_hash"]);
    assert_eq!(out["from_snapshot"], Value::Null);
    let reason = out["rejected_snapshots"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("snapshot at seq 10 is corrupt"), "{reason}");
    assert!(
        Path::new(&file).exists(),
        "the rejected snapshot is left for inspection"
    );
}
