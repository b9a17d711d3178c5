//! Retry policies (`retry { ... }`) and sagas (`undo STEP`) in the plan language: what parses
//! and compiles, the codes of what does not, the plan hash (pinned, and unchanged for plans
//! without them), formatting, and what the plan agent decides.

use crate::common;

use oracle_core::State;
use oracle_core::agent::{Action, Agent, Call, Observation, Outcome};
use oracle_core::payload::RunStatus;
use oracle_plan::agent::{PlanAgent, bind_inputs};
use oracle_plan::catalogue::Catalogue;
use oracle_plan::compile::check;
use oracle_plan::policy::{BACKOFF_TOOL, Backoff};
use serde_json::json;

fn catalogue() -> Catalogue {
    Catalogue::new(common::agent_tools())
}

fn plan(steps: &str) -> String {
    format!("plan p version 1\n\n{steps}")
}

fn codes(src: &str) -> Vec<&'static str> {
    let (compiled, diags) = check(src, &catalogue());
    assert!(compiled.is_none(), "compiled: {src}");
    diags.iter().map(|d| d.code).collect()
}

const POLICY: &str = "a = t.a {}\n  retry { attempts: 5, backoff: \"exponential\", initial: \"1s\", max: \"1m\", jitter: true, non_retryable: [\"declined\", \"bad_card\"] }\n";

#[test]
fn a_retry_policy_compiles_with_its_defaults_and_its_hash_is_pinned() {
    let (compiled, diags) = check(&plan(POLICY), &catalogue());
    let compiled = compiled.unwrap_or_else(|| panic!("{diags:?}"));
    let s = &compiled.steps[0];
    assert_eq!(s.retry, 5);
    let p = s.policy.as_ref().unwrap();
    assert_eq!(p.backoff, Backoff::Exponential);
    assert_eq!((p.initial_ms, p.max_ms, p.jitter), (1_000, 60_000, true));
    assert_eq!(p.non_retryable, ["bad_card", "declined"]);
    assert_eq!(
        oracle_plan::compile::canonical_form(&compiled)["steps"][0]["retry_policy"],
        json!({"attempts": 5, "backoff": "exponential", "initial_ms": 1000, "max_ms": 60000,
               "jitter": true, "non_retryable": ["bad_card", "declined"]})
    );
    assert_eq!(
        compiled.hash.to_string(),
        "e5afd734d6007151b294adb07b6ae17c1965ca73386032d80870eba0059cbb8d",
        "the pinned hash of a plan with a retry policy"
    );
    // Defaults: 3 attempts, exponential from 1 s to 5 min, no jitter, no codes.
    let (compiled, _) = check(
        &plan("a = t.a {}\n  retry { backoff: \"fixed\" }\n"),
        &catalogue(),
    );
    let s = &compiled.unwrap().steps[0];
    let p = s.policy.as_ref().unwrap();
    assert_eq!(
        (s.retry, p.backoff, p.initial_ms, p.max_ms),
        (3, Backoff::Fixed, 1_000, 300_000)
    );
}

#[test]
fn plans_without_policies_hash_as_before_and_retry_n_is_attempts_n() {
    // `retry N` and `attempts N` are one clause; a plan without a policy or an `undo` keeps
    // the streamed encoding (its hash pinned here) and no new key in its canonical form.
    let a = check(&plan("a = t.a {}\n  retry 4\n"), &catalogue())
        .0
        .unwrap();
    let b = check(&plan("a = t.a {}\n  attempts 4\n"), &catalogue())
        .0
        .unwrap();
    assert_eq!(a.hash, b.hash);
    assert_eq!(
        a.hash.to_string(),
        "69f7a5b13b88ac91d9f47becbef9e2d9781c599d0509297109e5b05e56e1e439"
    );
    assert!(a.steps[0].policy.is_none() && a.steps[0].undo.is_none());
    let form = oracle_plan::compile::canonical_form(&a);
    assert!(form["steps"][0].get("retry_policy").is_none());
    assert!(form["steps"][0].get("undo").is_none());
    assert_eq!(a.hash, oracle_plan::compile::plan_hash_via_value(&a));
}

#[test]
fn a_policy_that_cannot_be_is_e0227_and_misplaced_clauses_have_their_codes() {
    for bad in [
        "retry { attempts: 0 }",
        "retry { attempts: 101 }",
        "retry { backoff: \"linear\" }",
        "retry { initial: \"0ms\" }",
        "retry { initial: \"2d\" }",
        "retry { initial: \"10s\", max: \"1s\" }",
        "retry { initial: 5 }",
        "retry { jitter: \"yes\" }",
        "retry { non_retryable: \"x\" }",
        "retry { non_retryable: [\"\"] }",
        "retry { tries: 3 }",
        "retry { attempts: x.y }",
    ] {
        assert_eq!(
            codes(&plan(&format!("a = t.a {{}}\n  {bad}\n"))),
            ["E0227"],
            "{bad}"
        );
    }
    // One clause under two spellings: given twice.
    assert_eq!(
        codes(&plan("a = t.a {}\n  retry { attempts: 2 }\n  attempts 3\n")),
        ["E0114"]
    );
    // Not inside a loop body.
    let looped = "l = for x in [1] max 1 {\n  a = t.a {}\n    retry { attempts: 2 }\n}\n";
    assert_eq!(codes(&plan(looped)), ["E0220"]);
    let looped = "l = for x in [1] max 1 {\n  a = t.a {}\n  b = t.b {}\n    undo a\n}\n";
    assert_eq!(codes(&plan(looped)), ["E0220"]);
    // Nor in a sub-plan: its steps may not suspend the run either.
    let sub = plan("a = t.a {}\n  retry { attempts: 2 }\n");
    let sources = [("sub.plan".to_owned(), sub)].into();
    let top = "plan top version 1\n\nuse \"sub.plan\" as sub\n\ns = sub {}\n";
    let (compiled, diags) = oracle_plan::compile::check_with(top, &catalogue(), &sources);
    assert!(compiled.is_none());
    assert_eq!(diags.iter().map(|d| d.code).collect::<Vec<_>>(), ["E0221"]);
}

#[test]
fn undo_names_an_earlier_step_that_nothing_reads() {
    let ok = plan("book = t.a {}\ncancel = t.b { x: book }\n  undo book\n");
    let (compiled, diags) = check(&ok, &catalogue());
    let compiled = compiled.unwrap_or_else(|| panic!("{diags:?}"));
    assert_eq!(compiled.steps[1].undo, Some(0));
    assert_eq!(
        oracle_plan::compile::canonical_form(&compiled)["steps"][1]["undo"],
        "book"
    );
    // `undo` stays an ordinary name: a step or an argument may be called so.
    let named = plan("undo = t.a {}\nb = t.b { x: undo }\n");
    assert!(check(&named, &catalogue()).0.is_some());
    assert_eq!(codes(&plan("a = t.a {}\n  undo nope\n")), ["E0228"]);
    assert_eq!(codes(&plan("a = t.a {}\n  undo a\n")), ["E0228"]);
    assert_eq!(
        codes(&plan(
            "a = t.a {}\nb = t.b {}\n  undo a\nc = t.b {}\n  undo b\n"
        )),
        ["E0228"]
    );
    assert_eq!(
        codes(&plan(
            "a = t.a {}\nb = t.b {}\n  undo a\nc = t.a { x: b }\n"
        )),
        ["E0228"]
    );
    assert_eq!(
        codes(&plan("a = t.a {}\nb = t.b {}\n  undo a\n  undo a\n")),
        ["E0114"]
    );
}

#[test]
fn formatting_keeps_policies_and_compensations_and_their_hash() {
    let src = plan(&format!("{POLICY}b = t.b {{}}\n  undo a # compensates a\n"));
    let formatted = oracle_plan::fmt::format(&src).unwrap();
    assert!(
        formatted.contains("  retry { attempts: 5, backoff: \"exponential\""),
        "{formatted}"
    );
    assert!(
        formatted.contains("  undo a # compensates a\n"),
        "{formatted}"
    );
    assert_eq!(oracle_plan::fmt::format(&formatted).unwrap(), formatted);
    let hash = |s: &str| check(s, &catalogue()).0.unwrap().hash;
    assert_eq!(hash(&src), hash(&formatted));
    let printed = oracle_plan::print::print(&oracle_plan::parser::parse(&src).0.unwrap());
    assert_eq!(hash(&printed), hash(&src));
}

fn agent(src: &str) -> PlanAgent {
    let (plan, diags) = check(src, &catalogue());
    let plan = plan.unwrap_or_else(|| panic!("{diags:?}"));
    let inputs = bind_inputs(&plan, &[]).unwrap();
    PlanAgent::new(plan, inputs)
}

fn calls(a: &mut PlanAgent, obs: &[Observation]) -> Vec<Call> {
    match a.decide(&State::new(), obs).unwrap().action {
        Action::Call(c) => c,
        other => panic!("expected calls, got {other:?}"),
    }
}

fn outcome(c: &Call, outcome: Outcome) -> Observation {
    Observation {
        step: c.step.clone(),
        tool: c.tool.clone(),
        attempt: c.attempt,
        outcome,
    }
}

#[test]
fn the_agent_waits_between_attempts_and_stops_at_a_non_retryable_code() {
    let mut a = agent(&plan(
        "a = t.a {}\n  retry { attempts: 3, initial: \"50ms\", non_retryable: [\"fatal\"] }\n",
    ));
    let first = calls(&mut a, &[]).remove(0);
    let wait = calls(&mut a, &[outcome(&first, Outcome::Failed("busy".into()))]).remove(0);
    assert_eq!((wait.tool.as_str(), wait.attempt), (BACKOFF_TOOL, 1));
    assert_eq!(
        wait.input,
        json!({"attempt": 1, "wait_ms": 50, "jitter": false})
    );
    // The wait asks: the run suspends on it, naming the attempt.
    let d = a
        .decide(
            &State::new(),
            &[outcome(&wait, Outcome::Ask("wait".into()))],
        )
        .unwrap();
    match d.action {
        Action::Suspend {
            step,
            reason,
            attempts,
        } => {
            assert_eq!(
                (step.as_str(), reason.as_str(), attempts),
                ("a", "retry after attempt 1", 1)
            );
        }
        other => panic!("{other:?}"),
    }
    let fired = outcome(&wait, Outcome::Answered(json!({})));
    let second = calls(&mut a, &[fired]).remove(0);
    assert_eq!((second.tool.as_str(), second.attempt), ("t.a", 2));
    let wait = calls(&mut a, &[outcome(&second, Outcome::Failed("busy".into()))]).remove(0);
    assert_eq!(wait.input["wait_ms"], 100);
    let d = a.decide(&State::new(), &[outcome(&wait, Outcome::Ask("w".into()))]);
    assert!(matches!(d.unwrap().action, Action::Suspend { .. }));
    let third = calls(&mut a, &[outcome(&wait, Outcome::Answered(json!({})))]).remove(0);
    let d = a
        .decide(
            &State::new(),
            &[outcome(&third, Outcome::Failed("fatal: no".into()))],
        )
        .unwrap();
    match d.action {
        Action::Finish { status, reason } => {
            assert_eq!(status, RunStatus::Failed);
            assert_eq!(reason, "step `a` failed: fatal: no (non-retryable: fatal)");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_failed_run_compensates_completed_steps_latest_first_one_at_a_time() {
    let mut a = agent(&plan(
        "a = t.a {}\nb = t.a {}\n  after a\nc = t.a {}\n  after b\n  attempts 1\nua = t.b {}\n  undo a\nub = t.b {}\n  undo b\nuc = t.b {}\n  undo c\n",
    ));
    let mut next = calls(&mut a, &[]);
    for step in ["a", "b"] {
        assert_eq!(next[0].step, step);
        next = calls(&mut a, &[outcome(&next[0], Outcome::Returned(json!({})))]);
    }
    assert_eq!(next[0].step, "c");
    let undo_b = calls(&mut a, &[outcome(&next[0], Outcome::Failed("no".into()))]);
    assert_eq!(
        undo_b.iter().map(|c| c.step.as_str()).collect::<Vec<_>>(),
        ["ub"]
    );
    let undo_a = calls(&mut a, &[outcome(&undo_b[0], Outcome::Returned(json!({})))]);
    assert_eq!(
        undo_a.iter().map(|c| c.step.as_str()).collect::<Vec<_>>(),
        ["ua"]
    );
    let d = a
        .decide(
            &State::new(),
            &[outcome(&undo_a[0], Outcome::Returned(json!({})))],
        )
        .unwrap();
    match d.action {
        Action::Finish { status, reason } => {
            assert_eq!(status, RunStatus::Failed);
            assert_eq!(reason, "step `c` failed: no");
        }
        other => panic!("{other:?}"),
    }
}
