//! A deadline on a belief wait end to end (issue 38, "Deadlines on waits"), with the real
//! `oracle` binary: `memory.query {require: "resolved", deadline: ...} on timeout VALUE|fail`
//! records a `timer_set` beside the suspension, whose reason names the due instant; then a
//! verdict and the deadline race, and whichever is recorded first wins, exactly once, in both
//! orders (a verdict first: the wake resumes the run with the belief and no `timer_fired`; the
//! deadline first: `timer_fired`, and the step takes its `on timeout` value or fails).
//! `oracle plan check` accepts the field and refuses a literal deadline that does not parse
//! (E0225). No test asserts timing: the server test polls with a generous bound.

use crate::common;
use crate::web;

use std::time::{Duration, Instant};

use common::{ADJUDICATION_PLAN, Home};
use serde_json::Value;

const RUN: &str = "adjudication-1";
/// The fixture's conflict is recorded by event 15 (`referral`).
const HANDLE: &str = "adj-15";
/// Longest wait for the server to wake the run.
const WAIT_MS_MAX: u64 = 60_000;
/// The fixture's belief wait, which the tests give a deadline.
const QUERY: &str =
    "allergy = memory.query { subject: patient, predicate: \"allergy\", require: \"resolved\" }\n";
/// What the step answers when its deadline passes first, in the tests that give a value.
const TIMED_OUT: &str = "{ status: \"timed_out\", value: \"unknown\" }";

/// The adjudication fixture with a deadline on its belief wait, written into the home.
fn plan(h: &Home, deadline: &str, on_timeout: &str) -> String {
    let fixture = std::fs::read_to_string(common::root().join(ADJUDICATION_PLAN)).unwrap();
    let with = format!(
        "{}, deadline: \"{deadline}\" }}\n  on timeout {on_timeout}\n",
        QUERY.trim_end().trim_end_matches('}').trim_end()
    );
    let text = fixture.replace(QUERY, &with);
    assert_ne!(text, fixture, "the fixture's query line moved");
    let path = h.path().join("deadline.plan");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Starts the plan: it must suspend on the belief, with the deadline in its reason.
fn start(h: &Home, plan: &str) -> Value {
    let (code, out) = h.json(&["run", plan, "--json"]);
    assert_eq!(code, 3, "the run suspends: {out}");
    assert_eq!(out["waiting"]["step"], "allergy", "{out}");
    out
}

fn of_kind(h: &Home, kind: &str) -> Vec<Value> {
    h.events(RUN)
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// The steps the run called a tool for, in order.
fn called(h: &Home) -> Vec<String> {
    of_kind(h, "tool_called")
        .iter()
        .map(|e| e["payload"]["step"].as_str().unwrap().to_owned())
        .collect()
}

fn affirm(h: &Home, extra: &[&str]) -> (i32, String, String) {
    h.affirm(RUN, HANDLE, extra)
}

/// A wake of the finished run is refused (`finished`) and writes nothing; the run replays.
fn a_later_wake_is_refused(h: &Home, run: &str) {
    let before = std::fs::read(h.log(run)).unwrap();
    let (code, v) = h.json(&["resume", run, "--wake", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "finished");
    assert_eq!(std::fs::read(h.log(run)).unwrap(), before);
    h.replays_and_verifies(run, "completed");
}

#[test]
fn a_deadline_that_passes_first_answers_with_its_on_timeout_value_once() {
    let h = Home::new();
    let plan = plan(&h, "2020-01-01T00:00:00Z", TIMED_OUT);
    start(&h, &plan);
    let set = of_kind(&h, "timer_set");
    assert_eq!(set.len(), 1, "{set:?}");
    assert_eq!(set[0]["payload"]["step"], "allergy");
    let suspended = of_kind(&h, "suspended");
    let reason = suspended[0]["payload"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("waits on belief patient-17/allergy (queued for adjudication: adj-15)"),
        "{reason}"
    );
    assert!(
        reason.ends_with("(deadline 2020-01-01T00:00:00Z)"),
        "{reason}"
    );
    let (code, out, _) = h.oracle(&["runs"]);
    assert_eq!(code, 0);
    assert!(out.contains("(deadline 2020-01-01T00:00:00Z)"), "{out}");
    // The deadline is woken by hand: it fires once, and the step takes its value.
    let (code, out, err) = h.oracle(&["resume", RUN, "--wake"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(of_kind(&h, "timer_fired").len(), 1);
    assert!(of_kind(&h, "resumed").is_empty());
    let steps = called(&h);
    assert!(steps.contains(&"history".to_owned()), "{steps:?}");
    assert!(
        !steps
            .iter()
            .any(|s| s == "amoxicillin" || s == "azithromycin"),
        "the timed-out value matches neither branch: {steps:?}"
    );
    // A verdict after the deadline still resolves the line (the memory's), but the step
    // keeps what the deadline gave it, and a second wake records nothing.
    let (code, out, err) = affirm(&h, &[]);
    assert_eq!(code, 0, "{out}{err}");
    a_later_wake_is_refused(&h, RUN);
}

#[test]
fn a_verdict_recorded_first_wins_and_the_deadline_is_ignored() {
    let h = Home::new();
    let plan = plan(&h, "2020-01-01T00:00:00Z", TIMED_OUT);
    start(&h, &plan);
    // The verdict lands first (no resume), then the deadline's wake: the line is resolved,
    // so the wake resumes the run with the belief and the deadline never fires.
    let (code, out, err) = affirm(&h, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = h.oracle(&["resume", RUN, "--wake"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(of_kind(&h, "timer_fired").is_empty());
    let resumed = of_kind(&h, "resumed");
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(resumed[0]["payload"]["value"]["status"], "resolved");
    assert!(called(&h).contains(&"amoxicillin".to_owned()));
    a_later_wake_is_refused(&h, RUN);
}

#[test]
fn a_verdict_that_resumes_first_leaves_nothing_for_the_deadline() {
    let h = Home::new();
    let plan = plan(&h, "2d", "fail");
    start(&h, &plan);
    let (code, out, err) = affirm(&h, &["--resume"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(of_kind(&h, "timer_fired").is_empty());
    assert_eq!(of_kind(&h, "resumed").len(), 1);
    a_later_wake_is_refused(&h, RUN);
}

#[test]
fn the_server_fires_a_due_belief_deadline_once_and_the_step_fails() {
    let h = Home::new();
    let plan = plan(&h, "1s", "fail");
    start(&h, &plan);
    let mut server = web::listening(h.command(&["serve", "--listen", "127.0.0.1:0"])).0;
    let begin = Instant::now();
    while of_kind(&h, "run_finished").is_empty() {
        assert!(
            begin.elapsed() < Duration::from_millis(WAIT_MS_MAX),
            "the server never woke the run"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
    assert_eq!(of_kind(&h, "timer_fired").len(), 1);
    let finished = &of_kind(&h, "run_finished")[0]["payload"];
    assert_eq!(finished["status"], "failed", "{finished}");
    assert!(
        finished["reason"].as_str().unwrap().contains("deadline"),
        "{finished}"
    );
    h.replays_and_verifies(RUN, "failed");
}

#[test]
fn plan_check_accepts_the_deadline_and_refuses_one_that_does_not_parse() {
    let h = Home::new();
    let plan = plan(&h, "2d", TIMED_OUT);
    let (code, v) = h.json(&["plan", "check", &plan, "--json"]);
    assert_eq!(code, 0, "{v}");
    let bad = plan.replace("deadline.plan", "bad.plan");
    let text = std::fs::read_to_string(&plan)
        .unwrap()
        .replace("deadline: \"2d\"", "deadline: \"3 fortnights\"");
    std::fs::write(&bad, text).unwrap();
    let (code, v) = h.json(&["plan", "check", &bad, "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["diagnostics"][0]["code"], "E0225", "{v}");
    // `oracle run` refuses it the same way, before anything starts.
    let (code, _, err) = h.oracle(&["run", &bad]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("E0225"), "{err}");
    // A deadline without a wait is refused when the step is called.
    let nowait = plan.replace("deadline.plan", "nowait.plan");
    let text = std::fs::read_to_string(&plan)
        .unwrap()
        .replace("require: \"resolved\", ", "");
    std::fs::write(&nowait, text).unwrap();
    let (code, out) = h.json(&["run", &nowait, "--json"]);
    assert_eq!(code, 1, "{out}");
    let failed = h
        .events(out["run"].as_str().unwrap())
        .into_iter()
        .find(|e| e["kind"] == "tool_failed")
        .expect("the query failed");
    let error = failed["payload"]["error"].as_str().unwrap();
    assert!(error.contains("deadline needs require"), "{error}");
}

#[test]
fn a_deadline_on_a_named_stores_belief_wait_fires_once() {
    let h = Home::new();
    let write = |file: &str, text: &str| {
        let p = h.path().join(file);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let a = write("a.plan", common::ALLERGY_ASSERT);
    let c = write(
        "c.plan",
        &common::allergy_contradiction("allergy_contradict", "none"),
    );
    let wait = common::ALLERGY_WAIT.replace(
        "require: \"resolved\" }",
        "require: \"resolved\", deadline: \"2020-01-01T00:00:00Z\" }\n  on timeout \"unknown\"",
    );
    let w = write("w.plan", &wait);
    for p in [&a, &c] {
        let (code, out, err) = h.oracle(&["run", p, "--memory", "alice"]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let (code, out, err) = h.oracle(&["run", &w, "--memory", "alice"]);
    assert_eq!(code, 3, "{out}{err}");
    let run = "allergy_wait-1";
    let kinds = |kind: &str| {
        h.events(run)
            .into_iter()
            .filter(|e| e["kind"] == kind)
            .collect::<Vec<_>>()
    };
    let reason = kinds("suspended")[0]["payload"]["reason"].clone();
    assert!(
        reason
            .as_str()
            .unwrap()
            .ends_with("(deadline 2020-01-01T00:00:00Z)"),
        "{reason}"
    );
    let (code, out, err) = h.oracle(&["resume", run, "--wake"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(kinds("timer_fired").len(), 1);
    assert!(kinds("resumed").is_empty());
    assert_eq!(kinds("run_finished")[0]["payload"]["status"], "completed");
    a_later_wake_is_refused(&h, run);
}
