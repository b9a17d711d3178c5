//! Logs of format 2 (recorded before domains kept their settings under `run_started.domains`,
//! `fixtures/runs-v2/`) still verify, replay bit-identically, resume and cancel: a resume
//! produces their first event again with the memory's settings under `memory`, so what it
//! appends keeps the run's format and the whole log replays.

use crate::common;

use common::{Sandbox, copy_dir, root};
use oracle_core::Payload;

fn sandbox_with_v2_runs() -> Sandbox {
    let sb = Sandbox::new();
    copy_dir(
        &root().join("fixtures/runs-v2/runs"),
        &sb.path().join("v2/runs"),
    );
    sb
}

#[test]
fn format_2_runs_verify_replay_resume_and_cancel_in_their_own_format() {
    let sb = sandbox_with_v2_runs();
    for run in ["quickstart-1", "escalation-1", "adjudication-1"] {
        let log = sb.log("v2", run);
        let (code, _, err) = sb.oracle(&["verify", log.to_str().unwrap()]);
        assert_eq!(code, 0, "{run}: {err}");
        let (code, _, err) = sb.oracle(&["replay", run, "--home", "v2"]);
        assert_eq!(code, 0, "{run}: {err}");
        match sb.events("v2", run)[0].typed().unwrap() {
            Payload::RunStarted(r) => {
                assert_eq!(r.format, Some(2), "{run} is format 2");
                assert_eq!(r.domains, None, "{run}: no `domains` before format 3");
            }
            other => panic!("{other:?}"),
        }
    }
    // The memory's settings were recorded under `memory`; they still decide: the request
    // expires 3 ticks after it was made.
    match sb.events("v2", "adjudication-1")[0].typed().unwrap() {
        Payload::RunStarted(r) => assert_eq!(r.memory.unwrap()["expiry_ticks"], 3),
        other => panic!("{other:?}"),
    }
    let (code, v) = sb.json(&["adjudications", "adjudication-1", "--home", "v2", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert!(v.to_string().contains("\"expires_at\":7"), "{v}");

    // A resume appends events of the run's own format, and the whole log replays.
    let (code, out, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--home",
        "v2",
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":1250}}"#,
    ]);
    assert_eq!(code, 3, "waits on the next question: {out}\n{err}");
    let (code, _, err) = sb.oracle(&["replay", "escalation-1", "--home", "v2"]);
    assert_eq!(code, 0, "{err}");

    // A run of format 2 with memory settings is cancelled, and replays with them.
    let (code, out, err) = sb.oracle(&["cancel", "adjudication-1", "--home", "v2", "--by", "t"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = sb.oracle(&["replay", "adjudication-1", "--home", "v2"]);
    assert_eq!(code, 0, "{err}");
}
