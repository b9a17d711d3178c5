//! A hostile plan against its own record, end to end with the real binary: the run store is off
//! limits to every tool whatever the grants say (checked on the resolved path, through links,
//! and again at the moment a tool touches the path), run.json is never an authority, and a link
//! made earlier in the same round cannot lead a file tool outside its grant.

use crate::common;

use std::fs;
use std::os::unix::fs::symlink;

use common::Sandbox;
use oracle_core::{Event, Payload};

/// Capability denials of a run as (step, reason).
fn denials(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e.typed().unwrap() {
            Payload::CapabilityDenied(d) => Some((d.step, d.reason)),
            _ => None,
        })
        .collect()
}

/// Tool failures of a run as (step, error).
fn failures(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e.typed().unwrap() {
            Payload::ToolFailed(f) => Some((f.step, f.error)),
            _ => None,
        })
        .collect()
}

fn denial_of<'a>(list: &'a [(String, String)], step: &str) -> &'a str {
    list.iter()
        .find(|(s, _)| s == step)
        .map(|(_, r)| r.as_str())
        .unwrap_or_else(|| panic!("no refusal recorded for step `{step}`: {list:?}"))
}

#[test]
fn a_plan_granted_everything_cannot_touch_its_own_record() {
    let sb = Sandbox::new();
    sb.write(
        "rewrite.plan",
        r#"plan rewrite version 1
grant fs:write:**
grant fs:read:**
grant fs:list:**
grant proc:exec:**
harm = fs.write { path: "harm.txt", content: "done" }
log = fs.write { path: ".oracle/runs/rewrite-1/events.jsonl", content: "{}" }
  after harm
  on failure continue
meta = fs.write { path: ".oracle/runs/rewrite-1/run.json", content: "{\"root\": \"/\"}" }
  after harm
  on failure continue
copy = fs.read { path: ".oracle/runs/rewrite-1/plan.plan" }
  after harm
  on failure continue
home = fs.list { path: ".oracle" }
  after harm
  on failure continue
dotted = fs.write { path: "out/../.oracle/runs/rewrite-1/events.jsonl", content: "{}" }
  after harm
  on failure continue
link = proc.exec { program: "ln", args: ["-s", ".oracle/runs", "alias"] }
  after harm
via = fs.write { path: "alias/rewrite-1/events.jsonl", content: "{}" }
  after link
  on failure continue
run = proc.exec { program: "./.oracle/runs/rewrite-1/plan.plan" }
  after harm
  on failure continue
"#,
    );
    let log = sb.log(".oracle", "rewrite-1");
    let (code, out, err) = sb.oracle(&["run", "rewrite.plan"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("warning"),
        "a run whose grants reach its home is warned about: {err}"
    );
    let events = sb.events(".oracle", "rewrite-1");
    let denied = denials(&events);
    for step in ["log", "meta", "copy", "home", "dotted", "via", "run"] {
        let reason = denial_of(&denied, step);
        assert!(reason.contains("run store"), "{step}: {reason}");
        assert!(
            !reason.contains(sb.path().to_str().unwrap()),
            "no absolute path in a recorded reason: {reason}"
        );
    }
    assert_eq!(
        fs::read_to_string(sb.path().join("harm.txt")).unwrap(),
        "done"
    );
    // The record is the run's own, whole, and still verifies and replays.
    let (code, _, err) = sb.oracle(&["verify", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = sb.oracle(&["replay", "rewrite-1"]);
    assert_eq!(code, 0, "{err}");
    let meta = fs::read_to_string(sb.path().join(".oracle/runs/rewrite-1/run.json")).unwrap();
    assert!(!meta.contains("\"/\""), "run.json untouched: {meta}");
}

#[test]
fn a_home_elsewhere_is_protected_through_absolute_grants_and_links_too() {
    let sb = Sandbox::new();
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().canonicalize().unwrap();
    symlink(&home_path, sb.path().join("outside")).unwrap();
    sb.write(
        "reach.plan",
        &format!(
            r#"plan reach version 1
grant fs:read:/**
grant fs:read:**
abs = fs.read {{ path: "{}/runs/reach-1/plan.plan" }}
  on failure continue
link = fs.read {{ path: "outside/runs/reach-1/plan.plan" }}
  on failure continue
"#,
            home_path.display()
        ),
    );
    let (code, out, err) = sb.oracle(&["run", "reach.plan", "--home", home_path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    let log = home_path.join("runs/reach-1/events.jsonl");
    let events: Vec<Event> = fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let denied = denials(&events);
    assert!(
        denial_of(&denied, "abs").contains("run store"),
        "{denied:?}"
    );
    assert!(
        denial_of(&denied, "link").contains("run store"),
        "{denied:?}"
    );
}

#[test]
fn a_link_made_earlier_in_the_same_round_cannot_lead_a_read_outside() {
    let sb = Sandbox::new();
    // A file outside the working directory, which the plan would like to read.
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().canonicalize().unwrap().join("secret.txt");
    fs::write(&secret, "secret").unwrap();
    fs::write(sb.path().join("plain.txt"), "plain").unwrap();
    sb.write(
        "race.plan",
        &format!(
            r#"plan race version 1
grant fs:read:**
grant fs:write:**
grant proc:exec:ln
soft = proc.exec {{ program: "ln", args: ["-s", "{secret}", "soft.txt"] }}
read = fs.read {{ path: "soft.txt" }}
  on failure continue
hard = proc.exec {{ program: "ln", args: ["{secret}", "hard.txt"] }}
readhard = fs.read {{ path: "hard.txt" }}
  on failure continue
dir = proc.exec {{ program: "ln", args: ["-s", "{dir}", "linkdir"] }}
write = fs.write {{ path: "linkdir/planted.txt", content: "x" }}
  on failure continue
"#,
            secret = secret.display(),
            dir = outside.path().canonicalize().unwrap().display(),
        ),
    );
    // One job: the calls of the round run in plan order, so each link exists before the read
    // or write that follows it, although all were checked before the round ran.
    let (code, out, err) = sb.oracle(&["run", "race.plan", "--jobs", "1"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let events = sb.events(".oracle", "race-1");
    let failed = failures(&events);
    let read = denial_of(&failed, "read");
    assert!(read.contains("denied at the moment of use"), "{read}");
    let hard = denial_of(&failed, "readhard");
    assert!(hard.contains("hard links"), "{hard}");
    let write = denial_of(&failed, "write");
    assert!(write.contains("denied at the moment of use"), "{write}");
    assert!(!outside.path().join("planted.txt").exists());
    for e in &events {
        if let Payload::ToolReturned(r) = e.typed().unwrap() {
            assert!(
                !r.output.to_string().contains("secret\""),
                "the secret was read: {:?}",
                r.output
            );
        }
    }
    let (code, _, err) = sb.oracle(&["replay", "race-1"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_tampered_run_json_never_moves_a_resume() {
    let sb = Sandbox::new();
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/escalation.plan"]);
    assert_eq!(code, 3, "{err}");
    let meta = sb.path().join(".oracle/runs/escalation-1/run.json");
    fs::write(&meta, "{\"format\": 1, \"root\": \"/\"}\n").unwrap();
    let log = sb.log(".oracle", "escalation-1");
    let before = fs::read(&log).unwrap();
    let (code, _, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":1250}}"#,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("run.json"), "{err}");
    assert!(err.contains("not hashed"), "{err}");
    assert_eq!(fs::read(&log).unwrap(), before, "nothing recorded");
}

/// The deep-nesting attack: `json.parse` of documents nested around the reader's limit. Each
/// run ends (completed, or the step failed with the limit named), nothing is left "running",
/// and every log verifies.
#[test]
fn deeply_nested_outputs_end_in_a_recorded_refusal_and_the_log_verifies() {
    let sb = Sandbox::new();
    for depth in [99usize, 100, 101, 123, 125, 126, 127, 128, 200] {
        let doc = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        fs::write(sb.path().join(format!("deep{depth}.json")), &doc).unwrap();
        sb.write(
            &format!("deep{depth}.plan"),
            &format!(
                "plan deep{depth} version 1\ngrant fs:read:deep{depth}.json\n\
                 text = fs.read {{ path: \"deep{depth}.json\" }}\n\
                 doc = json.parse {{ text: text.text }}\n  retry 1\n"
            ),
        );
        let (code, out, err) = sb.oracle(&["run", &format!("deep{depth}.plan")]);
        assert!(
            code == 0 || code == 1,
            "depth {depth}: exit {code}\n{out}\n{err}"
        );
        let log = sb.log(".oracle", &format!("deep{depth}-1"));
        let (vcode, _, verr) = sb.oracle(&["verify", log.to_str().unwrap()]);
        assert_eq!(vcode, 0, "depth {depth}: {verr}");
        let events = sb.events(".oracle", &format!("deep{depth}-1"));
        assert!(
            matches!(
                events.last().unwrap().typed().unwrap(),
                Payload::RunFinished(_)
            ),
            "depth {depth}: the run ended"
        );
        if depth > 100 {
            assert_eq!(code, 1, "depth {depth}");
            let failed = failures(&events);
            let why = denial_of(&failed, "doc");
            assert!(
                why.contains("value_depth_max") || why.contains("recursion limit"),
                "depth {depth}: {why}"
            );
        }
        let (rcode, _, rerr) = sb.oracle(&["replay", &format!("deep{depth}-1")]);
        assert_eq!(rcode, 0, "depth {depth}: {rerr}");
    }
}

/// Twenty 4 MB key-value writes in one round: more than one record holds. The run completes
/// and its log verifies and replays (the state change is recorded in parts).
#[test]
fn a_round_of_writes_over_the_record_limit_is_recorded_in_parts_and_verifies() {
    let sb = Sandbox::new();
    fs::write(sb.path().join("four.txt"), "y".repeat(4 << 20)).unwrap();
    let mut plan = String::from("plan wide version 1\ngrant fs:read:four.txt\ngrant kv:set:*\n");
    plan.push_str("text = fs.read { path: \"four.txt\" }\n");
    for i in 0..20 {
        plan.push_str(&format!(
            "k{i} = kv.set {{ key: \"k{i}\", value: text.text }}\n"
        ));
    }
    sb.write("wide.plan", &plan);
    let (code, out, err) = sb.oracle(&["run", "wide.plan"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let log = sb.log(".oracle", "wide-1");
    let (code, _, err) = sb.oracle(&["verify", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = sb.oracle(&["replay", "wide-1"]);
    assert_eq!(code, 0, "{err}");
}

/// An answer bigger than a recorded value may be, or nested too deep, is refused before
/// anything is written (exit 2), and the run still waits for a proper one.
#[test]
fn an_oversized_or_too_deep_answer_is_refused_and_nothing_is_written() {
    let sb = Sandbox::new();
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/escalation.plan"]);
    assert_eq!(code, 3, "{err}");
    let log = sb.log(".oracle", "escalation-1");
    let before = fs::read(&log).unwrap();
    let big = format!(
        "{{\"value\":{{\"total\":1250,\"pad\":\"{}\"}}}}",
        "z".repeat(9 << 20)
    );
    fs::write(sb.path().join("big.json"), &big).unwrap();
    let (code, _, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--step",
        "total",
        "--value-file",
        "big.json",
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(fs::read(&log).unwrap(), before, "nothing recorded");
    let deep = format!(
        "{{\"value\":{{\"total\":1250,\"pad\":{}{}}}}}",
        "[".repeat(110),
        "]".repeat(110)
    );
    let (code, _, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--step",
        "total",
        "--value",
        &deep,
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(fs::read(&log).unwrap(), before, "nothing recorded");
    let (code, _, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":1250}}"#,
    ]);
    assert_eq!(code, 3, "the run goes on to its next question: {err}");
}

/// A 73 MB record is over the record limit wherever it sits in the file and whatever the
/// number of threads: `verify` refuses it at its seq, with the limit named (it used to pass or
/// not depending on where it fell against the reader's blocks).
#[test]
fn an_oversized_record_is_refused_wherever_it_sits() {
    let sb = Sandbox::new();
    let good = fs::read(common::root().join("fixtures/logs/quickstart.jsonl")).unwrap();
    let lines: Vec<&[u8]> = good.split_inclusive(|&b| b == b'\n').collect();
    let mut big = vec![b'{'; 73 << 20];
    big.push(b'\n');
    for at in [0, 1, lines.len() / 2, lines.len()] {
        let mut bytes = Vec::new();
        for l in &lines[..at] {
            bytes.extend_from_slice(l);
        }
        bytes.extend_from_slice(&big);
        for l in &lines[at..] {
            bytes.extend_from_slice(l);
        }
        let path = sb.path().join(format!("big-{at}.jsonl"));
        fs::write(&path, &bytes).unwrap();
        for threads in ["1", "8"] {
            let (code, out, err) =
                sb.oracle(&["verify", path.to_str().unwrap(), "--threads", threads]);
            assert_eq!(code, 4, "at {at}, {threads} threads: {out}{err}");
            assert!(
                err.contains(&format!("event {at}"))
                    || out.contains(&format!("event {at}"))
                    || err.contains(&format!("seq {at}")),
                "at {at}, {threads} threads, the seq is named: {out}{err}"
            );
            assert!(
                (err.clone() + &out).contains("67108864"),
                "at {at}, {threads} threads, the limit is named: {out}{err}"
            );
        }
        fs::remove_file(&path).unwrap();
    }
}
