//! End-to-end tests of `TIME_MAX`, the largest logical time oracle accepts from outside: a
//! `--now` of `adjudicate` or `sweep`, or an `--adjudication-expiry`, past it is refused with
//! exit 2 and nothing written; exactly at it is accepted, and the run still resumes, replays
//! and verifies (its next rounds are past `TIME_MAX`, with 2^64 - 2^53 ticks to spare).

use crate::common;

use common::Home;
use oracle_core::event::TIME_MAX;

const PLAN: &str = common::ADJUDICATION_PLAN;
const RUN: &str = "adjudication-1";
const HANDLE: &str = "adj-15";

fn start(home: &Home, extra: &[&str]) {
    let mut args = vec!["run", PLAN];
    args.extend_from_slice(extra);
    let (code, out, err) = home.oracle(&args);
    assert_eq!(code, 3, "the run suspends on its belief: {out}{err}");
}

fn verdict(now: &str) -> Vec<&str> {
    vec![
        "adjudicate",
        RUN,
        HANDLE,
        "--verdict",
        "affirm",
        "--evidence",
        "external_first_hand",
        "--now",
        now,
    ]
}

#[test]
fn a_now_past_time_max_is_refused_and_writes_nothing() {
    let home = Home::new();
    start(&home, &["--adjudication-expiry", "3"]);
    let before = home.snapshot(RUN);
    let past = (TIME_MAX + 1).to_string();
    let max = u64::MAX.to_string();
    for now in [max.as_str(), past.as_str()] {
        for args in [verdict(now), vec!["sweep", RUN, "--now", now]] {
            let (code, out, err) = home.oracle(&args);
            assert_eq!(code, 2, "{args:?}: {out}{err}");
            assert!(
                err.contains(&format!(
                    "--now {now} is past the largest logical time, TIME_MAX = {TIME_MAX}"
                )),
                "{err}"
            );
            assert!(
                home.snapshot(RUN) == before,
                "{args:?} changed the run's files"
            );
        }
    }
    let mut args = verdict(&max);
    args.push("--json");
    let (code, v) = home.json(&args);
    assert_eq!(code, 2);
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["time_max"], TIME_MAX);
    assert!(home.snapshot(RUN) == before);

    // An expiry past it is refused before anything is started.
    let other = Home::new();
    let (code, _, err) = other.oracle(&["run", PLAN, "--adjudication-expiry", &past]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--adjudication-expiry"), "{err}");
    assert!(!other.path().join("runs").join(RUN).exists());
}

#[test]
fn a_verdict_at_exactly_time_max_is_taken_and_the_run_resumes() {
    let home = Home::new();
    start(&home, &[]);
    let max = TIME_MAX.to_string();
    let (code, out, err) = home.oracle(&verdict(&max));
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = home.oracle(&["resume", RUN]);
    assert_eq!(code, 0, "the run goes on past TIME_MAX: {out}{err}");

    let (code, v) = home.json(&["verify", RUN, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert!(v["last_time"].as_u64().unwrap() > TIME_MAX, "{v}");
    let (code, r) = home.json(&["replay", RUN, "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["result"], "reproduced");
    assert_eq!(r["ending"], "completed");
}

#[test]
fn a_sweep_at_exactly_time_max_is_taken_and_the_run_still_resumes() {
    let home = Home::new();
    start(&home, &["--adjudication-expiry", &TIME_MAX.to_string()]);
    let max = TIME_MAX.to_string();
    // Recorded at tick 4, the request expires at 4 + TIME_MAX: a sweep at TIME_MAX finds
    // nothing, and the sum did not wrap.
    let (code, v) = home.json(&["sweep", RUN, "--now", &max, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["expired"], 0);
    assert_eq!(v["now"], TIME_MAX);
    let (code, out, err) = home.oracle(&verdict(&max));
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = home.oracle(&["resume", RUN]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = home.oracle(&["verify", RUN]);
    assert_eq!(code, 0, "{out}{err}");
}
