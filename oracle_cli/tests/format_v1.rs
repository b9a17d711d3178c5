//! Logs of format 1 (recorded before causal links, `fixtures/runs-v1/`) still verify, replay
//! bit-identically, and resume: what a resume appends keeps the run's format, so the whole log
//! replays.

use crate::common;

use std::fs;

use common::{Sandbox, copy_dir, root};
use oracle_core::{EventKind, Payload};

fn sandbox_with_v1_runs() -> Sandbox {
    let sb = Sandbox::new();
    copy_dir(
        &root().join("fixtures/runs-v1/runs"),
        &sb.path().join("v1/runs"),
    );
    sb
}

#[test]
fn format_1_runs_verify_replay_and_resume_with_their_own_links() {
    let sb = sandbox_with_v1_runs();
    for run in ["quickstart-1", "diamond-1", "escalation-1"] {
        let log = sb.log("v1", run);
        let (code, _, err) = sb.oracle(&["verify", log.to_str().unwrap()]);
        assert_eq!(code, 0, "{run}: {err}");
        let (code, _, err) = sb.oracle(&["replay", run, "--home", "v1"]);
        assert_eq!(code, 0, "{run}: {err}");
        match sb.events("v1", run)[0].typed().unwrap() {
            Payload::RunStarted(r) => assert_eq!(r.format, None, "{run} is format 1"),
            other => panic!("{other:?}"),
        }
    }
    let before = sb.events("v1", "escalation-1").len();
    let (code, out, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--home",
        "v1",
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":1250}}"#,
    ]);
    assert_eq!(code, 3, "waits on the next question: {out}\n{err}");
    let events = sb.events("v1", "escalation-1");
    assert!(events.len() > before);
    for e in &events[before..] {
        if matches!(
            e.kind,
            EventKind::StepScheduled | EventKind::StateChanged | EventKind::Suspended
        ) {
            assert!(e.parents.is_empty(), "format 1 links appended: {e:?}");
        }
    }
    let log = sb.log("v1", "escalation-1");
    let (code, _, err) = sb.oracle(&["verify", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = sb.oracle(&["replay", "escalation-1", "--home", "v1"]);
    assert_eq!(code, 0, "{err}");
    assert!(fs::metadata(&log).is_ok());
}
