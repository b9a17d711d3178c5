//! `oracle cancel` end to end: a suspended run gets a recorded `cancelled` outcome at once, a
//! running one at its next decision boundary, and either verifies, replays and is listed by
//! `runs --status cancelled`; a finished run is refused with nothing written.

use crate::common;

use std::time::{Duration, Instant};

use common::Sandbox;
use oracle_core::Payload;
use oracle_core::payload::RunStatus;

/// The last event of `run`'s log, typed.
fn last(sb: &Sandbox, run: &str) -> Payload {
    let events = sb.events(".oracle", run);
    events.last().expect("a run has events").typed().unwrap()
}

#[test]
fn a_suspended_run_is_cancelled_with_who_and_why_and_verifies_and_replays() {
    let sb = Sandbox::new();
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/escalation.plan"]);
    assert_eq!(code, 3, "{err}");
    let before = sb.events(".oracle", "escalation-1").len();

    let (code, v) = sb.json(&[
        "cancel",
        "escalation-1",
        "--reason",
        "no longer needed",
        "--by",
        "alice",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "cancelled");
    assert_eq!(v["seq"], before as u64);
    match last(&sb, "escalation-1") {
        Payload::RunFinished(f) => {
            assert_eq!(f.status, RunStatus::Cancelled);
            assert_eq!(f.by.as_deref(), Some("alice"));
            assert_eq!(f.reason, "no longer needed");
        }
        other => panic!("last event: {other:?}"),
    }

    let (code, _, err) = sb.oracle(&["verify", "escalation-1"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = sb.oracle(&["replay", "escalation-1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ending   cancelled"), "{out}");
    let (code, out, _) = sb.oracle(&["runs", "--status", "cancelled"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("escalation-1") && out.contains("cancelled by alice: no longer needed"),
        "{out}"
    );

    // Finished now: a second cancel and a resume are refused, and write nothing.
    let after = std::fs::read(sb.log(".oracle", "escalation-1")).unwrap();
    let (code, v) = sb.json(&["cancel", "escalation-1", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "finished");
    assert_eq!(v["error"]["status"], "cancelled");
    let (code, _, err) = sb.oracle(&["resume", "escalation-1", "--step", "total", "--value", "{}"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        std::fs::read(sb.log(".oracle", "escalation-1")).unwrap(),
        after
    );
}

#[test]
fn an_unknown_run_is_refused() {
    let sb = Sandbox::new();
    let (code, v) = sb.json(&["cancel", "nothing-1", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "not_found");
}

/// A plan whose every round waits on a slow impure program, so a run of it is still going when
/// the cancel arrives, whatever the machine's speed.
const SLOW_PLAN: &str = r#"plan slow version 1

grant tool:exec:test.nap

tools "tools"

naps = repeat {
  nap = test.nap { }
} until false max 200
"#;

const NAP_TOOL: &str = r#"name = "test.nap"
version = "1.0.0"
description = "Sleeps a little, then answers {}"
effect = "impure"
timeout_ms = 5000
output_bytes_max = 64
input_schema = { type = "object" }
output_schema = { type = "object" }

[exec]
program = "nap.sh"
env = { PATH = "/usr/bin:/bin" }
"#;

#[test]
fn a_running_run_stops_at_its_next_decision_boundary_and_replays() {
    let sb = Sandbox::new();
    sb.write("tools/test.nap.toml", NAP_TOOL);
    let script = sb.write("tools/nap.sh", "#!/bin/sh\nsleep 0.1\necho '{}'\n");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    sb.write("slow.plan", SLOW_PLAN);
    let mut child = sb.command(&["run", "slow.plan"]).spawn().unwrap();

    // Wait until the run has recorded a few rounds (bounded: the test fails rather than hangs).
    let log = sb.log(".oracle", "slow-1");
    let started = Instant::now();
    while std::fs::read(&log).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count()) < 12 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run never got going"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let (code, v) = sb.json(&["cancel", "slow-1", "--reason", "enough", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "cancelled", "{v}");
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "a cancelled run exits as a run that did not complete"
    );
    match last(&sb, "slow-1") {
        Payload::RunFinished(f) => assert_eq!(f.status, RunStatus::Cancelled),
        other => panic!("last event: {other:?}"),
    }
    assert!(
        !sb.path().join(".oracle/runs/slow-1/cancel.json").exists(),
        "the request is removed once recorded"
    );
    let (code, _, err) = sb.oracle(&["verify", "slow-1"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = sb.oracle(&["replay", "slow-1"]);
    assert_eq!(code, 0, "{out}{err}");
}
