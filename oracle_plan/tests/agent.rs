//! The plan agent's decisions, driven by hand: retries, fallback, failure policies, skips,
//! answers, and input binding. No runtime: outcomes are made up by the test.

use crate::common;

use oracle_core::State;
use oracle_core::agent::{Action, Agent, Call, Decision, Observation, Outcome};
use oracle_core::payload::RunStatus;
use oracle_plan::agent::{InputError, PlanAgent, bind_inputs};
use oracle_plan::catalogue::Catalogue;
use serde_json::{Value, json};

fn catalogue() -> Catalogue {
    Catalogue::new(common::agent_tools())
}

fn agent(src: &str) -> PlanAgent {
    let (plan, diags) = oracle_plan::check(src, &catalogue());
    let plan = plan.unwrap_or_else(|| panic!("{diags:?}"));
    let inputs = bind_inputs(&plan, &[]).unwrap();
    PlanAgent::new(plan, inputs)
}

fn decide(a: &mut PlanAgent, obs: Vec<Observation>) -> Decision {
    a.decide(&State::new(), &obs).unwrap()
}

fn calls(d: &Decision) -> Vec<(String, String, u64)> {
    match &d.action {
        Action::Call(c) => c
            .iter()
            .map(|c| (c.step.clone(), c.tool.clone(), c.attempt))
            .collect(),
        other => panic!("expected calls, got {other:?}"),
    }
}

fn obs(c: &Call, outcome: Outcome) -> Observation {
    Observation {
        step: c.step.clone(),
        tool: c.tool.clone(),
        attempt: c.attempt,
        outcome,
    }
}

fn only_call(d: &Decision) -> Call {
    match &d.action {
        Action::Call(c) if c.len() == 1 => c[0].clone(),
        other => panic!("expected one call, got {other:?}"),
    }
}

fn status_of(d: &Decision, step: &str) -> Option<Value> {
    d.changes
        .iter()
        .rev()
        .find_map(|c| c.set.get(&format!("step/{step}")).cloned())
}

#[test]
fn retries_then_falls_back_then_yields() {
    let mut a = agent(
        "plan p version 1\n\
         s = t.a { x: 1 }\n  expect s.ok\n  retry 2\n  fallback t.b { x: 2 }\n  on failure yield\n",
    );
    let mut d = decide(&mut a, vec![]);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let c = only_call(&d);
        seen.push((c.tool.clone(), c.attempt));
        d = decide(
            &mut a,
            vec![obs(&c, Outcome::Returned(json!({"ok": false})))],
        );
    }
    assert_eq!(
        seen,
        [
            ("t.a".to_owned(), 1),
            ("t.a".to_owned(), 2),
            ("t.b".to_owned(), 3),
            ("t.b".to_owned(), 4)
        ]
    );
    match &d.action {
        Action::Suspend {
            step,
            attempts,
            reason,
        } => {
            assert_eq!(step, "s");
            assert_eq!(*attempts, 4);
            assert!(reason.contains("expect `s.ok` is false"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(status_of(&d, "s").unwrap()["status"], "waiting");
    // The answer completes the step and the run.
    let d = decide(
        &mut a,
        vec![Observation {
            step: "s".into(),
            tool: String::new(),
            attempt: 4,
            outcome: Outcome::Answered(json!({"ok": true})),
        }],
    );
    assert_eq!(
        status_of(&d, "s").unwrap(),
        json!({"status": "completed", "attempts": 4, "output": {"ok": true}})
    );
    assert!(matches!(
        d.action,
        Action::Finish {
            status: RunStatus::Completed,
            ..
        }
    ));
}

#[test]
fn stop_fails_the_run_and_continue_skips_dependents() {
    let src = |policy: &str| {
        format!(
            "plan p version 1\n\
             a = t.a {{}}\n  retry 1\n  on failure {policy}\n\
             b = t.b {{ x: a.v }}\n\
             c = t.b {{ x: 3 }}\n"
        )
    };
    // stop: no new calls after the failure; the run fails naming the step.
    let mut a = agent(&src("stop"));
    let d = decide(&mut a, vec![]);
    assert_eq!(
        calls(&d),
        [("a".into(), "t.a".into(), 1), ("c".into(), "t.b".into(), 1)]
    );
    let Action::Call(cs) = d.action else {
        unreachable!()
    };
    let d = decide(
        &mut a,
        vec![
            obs(&cs[0], Outcome::Failed("boom".into())),
            obs(&cs[1], Outcome::Returned(json!({}))),
        ],
    );
    match d.action {
        Action::Finish {
            status: RunStatus::Failed,
            reason,
        } => assert_eq!(reason, "step `a` failed: boom"),
        other => panic!("{other:?}"),
    }
    // continue: the dependent is skipped, the run completes.
    let mut a = agent(&src("continue"));
    let Action::Call(cs) = decide(&mut a, vec![]).action else {
        panic!()
    };
    let d = decide(
        &mut a,
        vec![
            obs(&cs[0], Outcome::Failed("boom".into())),
            obs(&cs[1], Outcome::Returned(json!({}))),
        ],
    );
    assert_eq!(status_of(&d, "a").unwrap()["status"], "failed");
    assert_eq!(
        status_of(&d, "b").unwrap(),
        json!({"status": "skipped", "reason": "`a` did not complete"})
    );
    assert!(matches!(
        d.action,
        Action::Finish {
            status: RunStatus::Completed,
            ..
        }
    ));
}

#[test]
fn a_denial_gives_up_at_once() {
    let mut a = agent("plan p version 1\ns = t.a {}\n  retry 5\n  on failure stop\n");
    let c = only_call(&decide(&mut a, vec![]));
    let d = decide(
        &mut a,
        vec![obs(
            &c,
            Outcome::Denied {
                capability: "fs:read:x".into(),
                reason: "no grant covers it".into(),
            },
        )],
    );
    match d.action {
        Action::Finish {
            status: RunStatus::Failed,
            reason,
        } => assert!(reason.contains("capability `fs:read:x` denied"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn when_false_skips_and_later_steps_see_outputs_of_the_same_decision() {
    let mut a = agent(
        "plan p version 1\n\
         a = t.a {}\n\
         b = t.b { x: a.n }\n  when a.n > 1\n\
         c = t.b { x: a.n + 1 }\n",
    );
    let c = only_call(&decide(&mut a, vec![]));
    let d = decide(&mut a, vec![obs(&c, Outcome::Returned(json!({"n": 1})))]);
    assert_eq!(
        status_of(&d, "b").unwrap(),
        json!({"status": "skipped", "reason": "when `a.n > 1` is false"})
    );
    let c = only_call(&d);
    assert_eq!(c.step, "c");
    assert_eq!(c.input, json!({"x": 2}));
}

#[test]
fn human_answers_are_wrapped_as_the_ask_output() {
    let mut a = agent("plan p version 1\nq = human.ask { question: \"ok?\" }\n");
    let c = only_call(&decide(&mut a, vec![]));
    let d = decide(&mut a, vec![obs(&c, Outcome::Ask("ok?".into()))]);
    assert!(
        matches!(&d.action, Action::Suspend { step, reason, .. } if step == "q" && reason == "ok?")
    );
    let d = decide(
        &mut a,
        vec![Observation {
            step: "q".into(),
            tool: String::new(),
            attempt: 1,
            outcome: Outcome::Answered(json!("yes")),
        }],
    );
    assert_eq!(
        status_of(&d, "q").unwrap()["output"],
        json!({"answer": "yes"})
    );
}

#[test]
fn an_outcome_for_a_step_without_a_call_is_an_agent_error() {
    let mut a = agent("plan p version 1\ns = t.a {}\n");
    let _ = decide(&mut a, vec![]);
    let bogus = Observation {
        step: "nope".into(),
        tool: "t.a".into(),
        attempt: 1,
        outcome: Outcome::Returned(json!({})),
    };
    assert!(a.decide(&State::new(), &[bogus]).is_err());
}

#[test]
fn inputs_bind_from_text_with_types_and_defaults() {
    let src = "plan p version 1\n\
               input name: string\n\
               input n: int = 3\n\
               input flags: list = []\n\
               s = t.a { x: name }\n";
    let (plan, _) = oracle_plan::check(src, &catalogue());
    let plan = plan.unwrap();
    let given = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    };
    let bound = bind_inputs(&plan, &given(&[("name", "x"), ("flags", "[1,2]")])).unwrap();
    assert_eq!(
        Value::Object(bound),
        json!({"name": "x", "n": 3, "flags": [1, 2]})
    );
    assert!(matches!(
        bind_inputs(&plan, &[]),
        Err(InputError::Missing { name }) if name == "name"
    ));
    let e = bind_inputs(&plan, &given(&[("name", "x"), ("nn", "1")])).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("plan `p` has no input `nn` (did you mean `n`?); its inputs: "),
        "{e}"
    );
    let e = bind_inputs(&plan, &given(&[("name", "x"), ("n", "1.5")])).unwrap_err();
    assert!(
        e.to_string().starts_with("input `n` must be an integer"),
        "{e}"
    );
    let e = bind_inputs(&plan, &given(&[("name", "x"), ("flags", "[1.5]")])).unwrap_err();
    assert!(e.to_string().contains("float"), "{e}");
}

/// One decision issues at most `CALLS_PER_DECISION_MAX` calls; the ready steps past it are
/// issued in the next decision, in plan order, none lost or repeated.
#[test]
fn a_round_issues_at_most_calls_per_decision_max_and_the_rest_next() {
    use oracle_plan::agent::CALLS_PER_DECISION_MAX;
    let n = CALLS_PER_DECISION_MAX + 1;
    let mut src = String::from("plan wide version 1\n");
    for i in 0..n {
        src.push_str(&format!("s{i} = t.a {{ x: {i} }}\n"));
    }
    let mut a = agent(&src);
    let first = decide(&mut a, vec![]);
    let issued = calls(&first);
    assert_eq!(issued.len(), CALLS_PER_DECISION_MAX);
    let Action::Call(cs) = &first.action else {
        unreachable!()
    };
    let done: Vec<Observation> = cs
        .iter()
        .map(|c| obs(c, Outcome::Returned(json!({}))))
        .collect();
    let second = decide(&mut a, done);
    let rest = calls(&second);
    assert_eq!(rest.len(), 1);
    let mut all: Vec<String> = issued.into_iter().chain(rest).map(|c| c.0).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "every step issued exactly once");
}

/// `attempts N` is the per-tier attempt count; `retry N` is the same clause under its older
/// name (same compiled plan, same hash), and `attempts` stays usable as a name.
#[test]
fn attempts_and_retry_are_one_clause_and_attempts_is_still_a_name() {
    let compile = |src: &str| {
        let (plan, diags) = oracle_plan::check(src, &catalogue());
        plan.unwrap_or_else(|| panic!("{diags:?}"))
    };
    let a = compile("plan p version 1\ns = t.a { x: 1 }\n  attempts 2\n");
    let r = compile("plan p version 1\ns = t.a { x: 1 }\n  retry 2\n");
    assert_eq!(a.hash, r.hash);
    assert_eq!(a.steps[0].retry, 2);
    compile("plan p version 1\ninput attempts: int = 3\ns = t.a { x: attempts }\n  attempts 1\n");
}
