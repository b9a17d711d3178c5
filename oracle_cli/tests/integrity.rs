//! A hostile plan against its own record, end to end with the real binary: the run store is off
//! limits to every tool whatever the grants say (checked on the resolved path, through links,
//! and again at the moment a tool touches the path), run.json is never an authority, and a link
//! made earlier in the same round cannot lead a file tool outside its grant.

mod common;

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
