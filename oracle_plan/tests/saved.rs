//! Saving a plan agent between two decisions and restoring it into a fresh one: the restored
//! agent decides exactly what the saved one goes on to decide, whatever the outcomes, and a
//! value it could not have saved is refused without changing it. No runtime: outcomes are
//! made up by the test from a list of choices.

use crate::common;

use common::tool;
use oracle_core::State;
use oracle_core::agent::{Action, Agent, AgentError, Call, Decision, Observation, Outcome};
use oracle_plan::agent::{ASK_TOOL, CHAT_TOOL, PlanAgent, bind_inputs};
use oracle_plan::catalogue::{ArgType, Catalogue};
use oracle_plan::{CompiledPlan, Sources};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Dependencies, `expect`, retries into a fallback tier, `when`, `after`, and the failure
/// policies: `continue` (its dependents are skipped), `yield` (answered), `stop`.
const DEPS: &str = "plan deps version 1
a = t.a { x: 1 }
  expect a.ok
  retry 2
  fallback t.b { x: 2 }
  on failure continue
b = t.b { x: a.n }
  retry 3
  on failure yield
c = t.a { x: b.n }
  when b.ok
  on failure stop
d = t.b { x: 5 }
e = t.a { x: [a.n, d.n] }
  after c
";

/// Questions for a person: the run suspends and is answered; `expect` holds of the answer.
const ASK: &str = "plan ask version 1
q = human.ask { question: \"go on?\" }
  expect q.answer != \"\"
r = t.a { x: q.answer }
  retry 2
  on failure yield
s = human.ask { question: \"and then?\" }
  after r
  on failure continue
t = t.b { x: s.answer }
";

/// A `for` over a list a step returns: up to 70 iterations at once, more calls than one
/// decision issues, so calls stay queued between decisions.
const FOR: &str = "plan each version 1
list = t.a { x: 1 }
docs = for item in list.items max 100 {
  read = t.a { x: item }
    retry 2
  stats = t.b { x: read.n }
    when read.ok
    on failure continue
}
  on failure continue
total = t.b { x: docs }
";

/// A `repeat` until its body's output says done, bounded.
const REPEAT: &str = "plan rounds version 1
rounds = repeat {
  r = t.a { x: 1 }
    retry 2
  s = t.b { x: r.n }
    when r.ok
    on failure continue
} until r.done max 4
  on failure continue
then = t.a { x: rounds }
";

/// An agent step (its turns are `llm.chat` calls, then the tool calls the model asks for),
/// with a fallback agent, next to an ordinary step.
const AGENT: &str = "plan research version 1
research = agent { model: \"m\", instructions: \"go\", task: \"find\", tools: [\"t.a\", \"t.b\"], max_turns: 3 }
  attempts 2
  fallback agent { model: \"m2\", instructions: \"again\", task: \"find\", tools: [\"t.a\"], max_turns: 2, output: { type: \"object\" } }
  on failure continue
next = t.b { x: research.content }
side = t.a { x: 1 }
";

/// An agent step whose model may ask a person (`human.ask` among its tools): the run suspends
/// inside the loop, on the model's call, and the answer goes back as the call's result.
const ASKING: &str = "plan asking version 1
pick = agent { model: \"m\", instructions: \"go\", task: \"find\", tools: [\"t.a\", \"human.ask\"], max_turns: 3 }
  on failure continue
next = t.b { x: pick.content }
";

/// Agent steps inside the iterations of a `for`, and one beside it: conversations saved both
/// in the run's agent and in its children.
const NESTED: &str = "plan nested version 1
list = t.a { x: 1 }
each = for item in list.items max 100 {
  asked = agent { model: \"m\", instructions: \"go\", task: item, tools: [\"t.a\"], max_turns: 2 }
    on failure continue
  said = t.b { x: asked.content }
}
  on failure continue
solo = agent { model: \"m\", instructions: \"alone\", task: \"t\", tools: [\"t.b\"], max_turns: 2 }
  on failure continue
";

/// A `for` over 100 items, more calls than one decision issues: calls stay queued, and the
/// step beside it stays ready, across several decisions.
fn wide() -> String {
    let items: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    format!(
        "plan wide version 1
each = for item in [{}] max 200 {{
  read = t.a {{ x: item }}
  stats = t.b {{ x: read.n }}
    when read.ok
    on failure continue
}}
  on failure continue
beside = t.a {{ x: 1 }}
",
        items.join(", ")
    )
}

/// Sub-plans (`use`): each call of one runs it as a child agent of its own.
const USE: &str = "plan report version 1
use \"count.plan\" as count
notes = count { path: \"n\" }
other = count { path: \"o\" }
total = t.a { x: [notes.stats, other.stats] }
";

const COUNT: &str = "plan count version 1
input path: string
read = t.a { x: path }
  retry 2
stats = t.b { x: read.n }
";

/// Decisions one run may take at most (every plan above ends well within it).
const DECISIONS_MAX: usize = 400;

fn catalogue() -> Catalogue {
    let mut tools = common::agent_tools();
    tools.push(tool(
        "agent",
        &[
            ("model", ArgType::String, true),
            ("instructions", ArgType::String, true),
            ("task", ArgType::Any, false),
            ("tools", ArgType::List, true),
            ("max_turns", ArgType::Int, false),
            ("output", ArgType::Map, false),
        ],
    ));
    Catalogue::new(tools)
}

fn compile(src: &str) -> CompiledPlan {
    let sources: Sources = [("count.plan".to_owned(), COUNT.to_owned())].into();
    let (plan, diags) = oracle_plan::check_with(src, &catalogue(), &sources);
    plan.unwrap_or_else(|| panic!("{diags:?}"))
}

fn fresh(plan: &CompiledPlan) -> PlanAgent {
    let inputs = bind_inputs(plan, &[]).unwrap();
    PlanAgent::new(plan.clone(), inputs)
}

/// Outcomes made up from a list of choices, one per call (the list repeats; an empty one
/// always picks 4: an output, or a turn with one tool call).
struct Feed<'a> {
    choices: &'a [u8],
    next: usize,
}

impl Feed<'_> {
    fn pick(&mut self) -> u8 {
        let c = match self.choices {
            [] => 4,
            cs => cs[self.next % cs.len()],
        };
        self.next += 1;
        c
    }

    /// An ordinary tool's output: what the plans above read (`ok`, `n`, `done`, `items`).
    fn output(c: u8) -> Value {
        let len = match c % 5 {
            3 => 70,
            k => u64::from(k.min(3)),
        };
        json!({
            "ok": c % 4 != 1,
            "n": c,
            "done": c.is_multiple_of(3),
            "items": (0..len).collect::<Vec<u64>>(),
        })
    }

    fn outcome(&mut self, call: &Call) -> Outcome {
        let c = self.pick();
        let denied = || Outcome::Denied {
            capability: "t:x:y".into(),
            reason: "no grant covers it".into(),
        };
        match call.tool.as_str() {
            CHAT_TOOL => match c % 8 {
                0 => Outcome::Failed("the model is down".into()),
                1 => denied(),
                2 | 3 => Outcome::Returned(json!({
                    "content": format!("answer {c}"),
                    "finish_reason": "stop",
                    "tool_calls": [],
                })),
                k => {
                    // 1 to 4 tool calls, of `t.a`, `t.b`, `t.c` and `human.ask` in turn (`t.c`
                    // is no agent's tool, nor `human.ask` unless it is offered: the call is
                    // refused, and the model told so).
                    let names = ["t.a", "t.b", "t.c", ASK_TOOL];
                    let calls: Vec<Value> = (0..usize::from(k - 3))
                        .map(|j| {
                            json!({
                                "id": format!("call{j}"),
                                "name": names[(usize::from(c) + j) % names.len()],
                                "arguments": {"x": j},
                            })
                        })
                        .collect();
                    Outcome::Returned(json!({"content": "", "tool_calls": calls}))
                }
            },
            ASK_TOOL => match c % 4 {
                0 => Outcome::Failed("nobody there".into()),
                _ => Outcome::Ask(format!("question {c}")),
            },
            _ => match c % 8 {
                0..=2 => Outcome::Failed(format!("failure {c}")),
                3 => denied(),
                _ => Outcome::Returned(Feed::output(c)),
            },
        }
    }

    fn answer(&mut self) -> Value {
        match self.pick() % 3 {
            0 => json!(""),
            1 => json!("yes"),
            _ => Feed::output(self.pick()),
        }
    }
}

/// What one decision came to, and what the next one is shown.
struct Step {
    decision: Result<Decision, AgentError>,
    /// The observations given to the next decision (empty after the last).
    next: Vec<Observation>,
}

/// Drives `agent` from where it is with outcomes from `feed`, starting with `observations`,
/// to the end of the run (a finish, an agent error, or `DECISIONS_MAX`).
fn drive(agent: &mut PlanAgent, feed: &mut Feed, mut observations: Vec<Observation>) -> Vec<Step> {
    let mut steps = Vec::new();
    while steps.len() < DECISIONS_MAX {
        let decision = agent.decide(&State::new(), &observations);
        let next = match &decision {
            Ok(Decision {
                action: Action::Call(calls),
                ..
            }) => outcomes(calls, feed),
            Ok(Decision {
                action: Action::Suspend { step, attempts, .. },
                ..
            }) => vec![Observation {
                step: step.clone(),
                tool: String::new(),
                attempt: *attempts,
                outcome: Outcome::Answered(feed.answer()),
            }],
            Ok(Decision {
                action: Action::Finish { .. },
                ..
            })
            | Err(_) => Vec::new(),
        };
        let done = next.is_empty();
        observations = next.clone();
        steps.push(Step { decision, next });
        if done {
            break;
        }
    }
    steps
}

/// The outcomes `feed` gives `calls`, as the next decision observes them.
fn outcomes(calls: &[Call], feed: &mut Feed) -> Vec<Observation> {
    calls
        .iter()
        .map(|c| Observation {
            step: c.step.clone(),
            tool: c.tool.clone(),
            attempt: c.attempt,
            outcome: feed.outcome(c),
        })
        .collect()
}

/// `save`, written out as text and read back, as a resume point keeps it: a resume point
/// writes `save_text` (the agent's packed outputs as they are, no tree built), which must be
/// the value `save` gives.
fn saved_through_text(agent: &PlanAgent) -> Value {
    let saved = agent.save().expect("the plan agent saves itself");
    let text = agent
        .save_text()
        .expect("the plan agent saves itself as text");
    let back: Value = serde_json::from_str(text.get()).unwrap();
    assert_eq!(back, saved, "save_text writes the value save gives");
    back
}

/// Runs `plan` once without a break, then again up to decision `cut` (reduced to the run's
/// length), saves there, restores into a fresh agent, and gives both the same remaining
/// observations: every later decision, every later `save`, and `check_answer` at each
/// suspension must be those of the run without a break.
fn differential(plan: &CompiledPlan, choices: &[u8], cut: usize) -> Result<(), TestCaseError> {
    let mut whole = fresh(plan);
    let reference = drive(&mut whole, &mut Feed { choices, next: 0 }, Vec::new());
    let cut = cut % (reference.len() + 1);

    let mut original = fresh(plan);
    let mut observations = Vec::new();
    for step in &reference[..cut] {
        let decision = original.decide(&State::new(), &observations);
        prop_assert_eq!(&decision, &step.decision);
        observations = step.next.clone();
    }
    let saved = saved_through_text(&original);
    let mut restored = fresh(plan);
    if let Err(e) = restored.restore(&saved) {
        return Err(TestCaseError::fail(format!(
            "restore at decision {cut} refused: {e}"
        )));
    }
    prop_assert!(
        restored.save() == original.save(),
        "the restored agent saves another value than the one it restored (at decision {})",
        cut
    );
    // A runtime that gives no outcomes for the calls running is refused by both alike.
    prop_assert_eq!(
        restored.clone().decide(&State::new(), &[]),
        original.clone().decide(&State::new(), &[])
    );
    let probe = Feed::output(2);
    for s in &plan.steps {
        prop_assert_eq!(
            restored.check_answer(&s.name, &probe),
            original.check_answer(&s.name, &probe)
        );
    }

    for (i, step) in reference.iter().enumerate().skip(cut) {
        let a = original.decide(&State::new(), &observations);
        let b = restored.decide(&State::new(), &observations);
        prop_assert_eq!(&a, &step.decision, "decision {} of the saved agent", i);
        prop_assert_eq!(
            &b,
            &step.decision,
            "decision {} after a restore at {}",
            i,
            cut
        );
        prop_assert!(
            restored.save() == original.save(),
            "after decision {}, the restored agent saves another value than the saved one",
            i
        );
        if let Ok(Decision {
            action: Action::Suspend { step: waits, .. },
            ..
        }) = &step.decision
            && let Some(Observation {
                outcome: Outcome::Answered(value),
                ..
            }) = step.next.first()
        {
            prop_assert_eq!(
                restored.check_answer(waits, value),
                original.check_answer(waits, value)
            );
        }
        observations = step.next.clone();
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_restored_agent_decides_as_the_saved_one_deps(
        choices in prop::collection::vec(any::<u8>(), 0..48),
        cut in any::<usize>(),
    ) {
        differential(&compile(DEPS), &choices, cut)?;
    }

    #[test]
    fn a_restored_agent_decides_as_the_saved_one_ask(
        choices in prop::collection::vec(any::<u8>(), 0..48),
        cut in any::<usize>(),
    ) {
        differential(&compile(ASK), &choices, cut)?;
    }

    #[test]
    fn a_restored_agent_decides_as_the_saved_one_for(
        choices in prop::collection::vec(any::<u8>(), 0..48),
        cut in any::<usize>(),
    ) {
        differential(&compile(FOR), &choices, cut)?;
    }

    #[test]
    fn a_restored_agent_decides_as_the_saved_one_repeat(
        choices in prop::collection::vec(any::<u8>(), 0..48),
        cut in any::<usize>(),
    ) {
        differential(&compile(REPEAT), &choices, cut)?;
    }

    #[test]
    fn a_restored_agent_decides_as_the_saved_one_agent(
        choices in prop::collection::vec(any::<u8>(), 0..48),
        cut in any::<usize>(),
    ) {
        differential(&compile(AGENT), &choices, cut)?;
    }

    #[test]
    fn a_restored_agent_decides_as_the_saved_one_asking(
        choices in prop::collection::vec(any::<u8>(), 0..48),
        cut in any::<usize>(),
    ) {
        differential(&compile(ASKING), &choices, cut)?;
    }

    #[test]
    fn a_restored_agent_decides_as_the_saved_one_nested(
        choices in prop::collection::vec(any::<u8>(), 0..48),
        cut in any::<usize>(),
    ) {
        differential(&compile(NESTED), &choices, cut)?;
    }

    #[test]
    fn a_restored_agent_decides_as_the_saved_one_use(
        choices in prop::collection::vec(any::<u8>(), 0..48),
        cut in any::<usize>(),
    ) {
        differential(&compile(USE), &choices, cut)?;
    }
}

proptest! {
    // Each case of this plan drives 100 iterations: fewer cases, as many decisions.
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn a_restored_agent_decides_as_the_saved_one_wide(
        choices in prop::collection::vec(any::<u8>(), 0..48),
        cut in any::<usize>(),
    ) {
        differential(&compile(&wide()), &choices, cut)?;
    }
}

/// The NESTED plan driven to a point where the run has a conversation in progress, iterations
/// in progress (mid-conversation) and, if `wide`, calls queued: its agent, that save, and the
/// outcomes of the calls it waits for.
struct MidRun {
    plan: CompiledPlan,
    agent: PlanAgent,
    saved: Value,
    pending: Vec<Observation>,
}

fn mid_run_of(wide: bool) -> MidRun {
    let plan = compile(NESTED);
    let mut agent = fresh(&plan);
    // `list` returns 70 items (28) or 2 (12); then each turn asks for one tool call (4).
    let mut feed = Feed {
        choices: if wide { &[28, 4] } else { &[12, 4] },
        next: 0,
    };
    let mut observations = Vec::new();
    for _ in 0..DECISIONS_MAX {
        let saved = saved_through_text(&agent);
        let a = &saved["agent"];
        let busy = |k: &str| a[k].as_array().is_some_and(|v| !v.is_empty());
        if busy("loops") && busy("iterations") && (busy("queued") || !wide) {
            return MidRun {
                plan,
                agent,
                saved,
                pending: observations,
            };
        }
        let d = agent.decide(&State::new(), &observations).unwrap();
        let Action::Call(calls) = &d.action else {
            panic!("the run ended before it was busy: {d:?}");
        };
        observations = outcomes(calls, &mut feed);
    }
    panic!("the run was never busy");
}

fn mid_run() -> MidRun {
    mid_run_of(true)
}

#[test]
fn the_saved_shape_holds_conversations_iterations_and_queued_calls() {
    let MidRun { agent, saved, .. } = mid_run();
    assert_eq!(saved["format"], 2);
    assert_eq!(saved["plan"], json!(agent.program_hash().to_hex()));
    let child = &saved["agent"]["iterations"][0]["children"][0];
    assert!(child["inputs"].get("item").is_some(), "{child}");
    assert!(child["agent"]["status"].is_array(), "{child}");
    // The same agent gives the same value.
    assert_eq!(agent.save(), agent.clone().save());
}

/// What the corrupted value must be refused with (a part of the message).
type Corruption = (&'static str, fn(&mut Value, &CompiledPlan));

fn corruptions() -> Vec<Corruption> {
    fn arr<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Vec<Value> {
        let mut at = v;
        for p in path {
            at = match p.parse::<usize>() {
                Ok(i) => &mut at[i],
                Err(_) => &mut at[*p],
            };
        }
        at.as_array_mut().unwrap()
    }
    fn step_index(plan: &CompiledPlan, name: &str) -> u64 {
        plan.steps.iter().position(|s| s.name == name).unwrap() as u64
    }
    vec![
        ("format 3; this agent reads format 2", |v, _| {
            v["format"] = json!(3)
        }),
        ("format \"1\"", |v, _| v["format"] = json!("1")),
        ("it has no `format`", |v, _| *v = json!("saved")),
        ("saved for plan", |v, _| {
            v["plan"] = json!("00".repeat(32));
        }),
        ("unknown field `extra`", |v, _| v["extra"] = json!(1)),
        ("unknown field `bogus`", |v, _| {
            v["agent"]["iterations"][0]["children"][0]["agent"]["bogus"] = json!(true)
        }),
        ("invalid type", |v, _| v["agent"]["in_flight"] = json!("3")),
        ("invalid type", |v, _| v["agent"]["status"] = json!({})),
        ("invalid value", |v, _| {
            v["agent"]["unsettled"][0] = json!(-1)
        }),
        ("invalid value", |v, _| {
            arr(v, &["agent", "ready"]).push(json!(1u64 << 40))
        }),
        (
            "`status` has 2 entries, and the plan has 3 steps",
            |v, _| {
                arr(v, &["agent", "status"]).pop();
            },
        ),
        (
            "iteration 0 of step `each`: `unsettled` has 1 entries, and the plan has 2 steps",
            |v, _| {
                arr(
                    v,
                    &[
                        "agent",
                        "iterations",
                        "0",
                        "children",
                        "0",
                        "agent",
                        "unsettled",
                    ],
                )
                .pop();
            },
        ),
        (
            "`ready` names position 9, and the plan has 3 steps",
            |v, _| arr(v, &["agent", "ready"]).push(json!(9)),
        ),
        (
            "`iterations` names step 7, and the plan has 3 steps",
            |v, _| v["agent"]["iterations"][0]["step"] = json!(7),
        ),
        ("step `list`, which is not a loop step", |v, p| {
            v["agent"]["iterations"][0]["step"] = json!(step_index(p, "list"))
        }),
        ("step `each`, which is not an agent step", |v, p| {
            v["agent"]["loops"][0]["step"] = json!(step_index(p, "each"))
        }),
        ("`loops` lists step", |v, _| {
            let l = arr(v, &["agent", "loops"]);
            l.push(l[0].clone());
        }),
        ("counts 0 iterations running", |v, _| {
            v["agent"]["iterations"][0]["running"] = json!(0)
        }),
        ("has made 0 model calls, not from 1 to the 600", |v, _| {
            v["agent"]["loops"][0]["chats"] = json!(0)
        }),
        (
            "1099511627776 calls in flight, more than any run holds",
            |v, _| v["agent"]["in_flight"] = json!(1u64 << 40),
        ),
        ("is at turn 5, not from 1 to its max_turns 2", |v, _| {
            v["agent"]["loops"][0]["turn"] = json!(5)
        }),
        (
            "step `solo` has a conversation in progress, and is not running",
            |v, _| {
                let s = v["agent"]["loops"][0]["step"].as_u64().unwrap() as usize;
                v["agent"]["status"][s] = json!("pending");
            },
        ),
        (
            "is to retry after attempt 3, and it has 3 attempts",
            |v, p| {
                v["agent"]["status"][step_index(p, "list") as usize] =
                    json!({"retrying": {"attempts": 3}});
            },
        ),
    ]
}

/// Each corrupted value is refused, with a message saying what is wrong; the agent is left as
/// it was, and runs from the start as one that was never asked to restore.
#[test]
fn values_it_could_not_have_saved_are_refused_and_change_nothing() {
    let MidRun { plan, saved, .. } = mid_run();
    let choices = [28, 4, 2, 0, 5, 3, 6];
    let untouched = drive(
        &mut fresh(&plan),
        &mut Feed {
            choices: &choices,
            next: 0,
        },
        Vec::new(),
    );
    for (expected, corrupt) in corruptions() {
        let mut bad = saved.clone();
        corrupt(&mut bad, &plan);
        let mut agent = fresh(&plan);
        let before = agent.save();
        let err = agent
            .restore(&bad)
            .expect_err(&format!("accepted a value that should give `{expected}`"));
        assert!(err.0.contains(expected), "`{expected}` not in: {err}");
        assert_eq!(
            agent.save(),
            before,
            "a refusal changed the agent ({expected})"
        );
        let run = drive(
            &mut agent,
            &mut Feed {
                choices: &choices,
                next: 0,
            },
            Vec::new(),
        );
        let decisions = |r: &[Step]| r.iter().map(|s| s.decision.clone()).collect::<Vec<_>>();
        assert_eq!(decisions(&run), decisions(&untouched), "after `{expected}`");
    }
}

/// Every place of a saved value (`path`, one JSON index or key after another) in visiting
/// order.
fn places(v: &Value, path: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    out.push(path.clone());
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(json!(i));
                places(item, path, out);
                path.pop();
            }
        }
        Value::Object(m) => {
            for (k, item) in m {
                path.push(json!(k));
                places(item, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(mut v: &'a mut Value, path: &[Value]) -> &'a mut Value {
    for p in path {
        v = match p {
            Value::Number(i) => &mut v[i.as_u64().unwrap() as usize],
            Value::String(k) => &mut v[k.as_str()],
            _ => unreachable!(),
        };
    }
    v
}

fn any_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        Just(json!(u64::MAX)),
        (0u64..80).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec!["pending", "running", "completed", "x", ""])
            .prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
        Just(json!({"completed": {"output": 1}})),
        Just(json!({"retrying": {"attempts": 1}})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// One place of a busy saved value (two iterations, so every place has a fair chance)
    /// replaced by anything: the restore never panics, and an agent that accepted the value
    /// runs on without panicking (it may refuse outcomes); one that refused it is unchanged.
    #[test]
    fn any_damage_is_refused_or_runs_without_panicking(
        place in any::<prop::sample::Index>(),
        replacement in any_json(),
        choices in prop::collection::vec(any::<u8>(), 0..16),
    ) {
        let MidRun { plan, saved, pending, .. } = mid_run_of(false);
        let mut all = Vec::new();
        places(&saved, &mut Vec::new(), &mut all);
        let mut bad = saved.clone();
        let path: &Vec<Value> = place.get(&all);
        *at(&mut bad, path) = replacement;
        let mut agent = fresh(&plan);
        if agent.restore(&bad).is_ok() {
            drive(&mut agent, &mut Feed { choices: &choices, next: 0 }, pending);
        } else {
            prop_assert_eq!(agent.save(), fresh(&plan).save());
        }
    }
}

#[test]
fn an_agent_that_has_decided_does_not_restore() {
    let MidRun { plan, saved, .. } = mid_run();
    let mut agent = fresh(&plan);
    agent.decide(&State::new(), &[]).unwrap();
    let before = agent.save();
    let err = agent.restore(&saved).unwrap_err();
    assert!(err.0.contains("already decided"), "{err}");
    assert_eq!(agent.save(), before);
}

/// A value saved by a fresh agent restores into a fresh agent, which then runs as one.
#[test]
fn a_fresh_agent_saves_and_restores() {
    let plan = compile(DEPS);
    let saved = saved_through_text(&fresh(&plan));
    let mut restored = fresh(&plan);
    restored.restore(&saved).unwrap();
    assert_eq!(restored.save(), Some(saved));
    let feed = |choices| Feed { choices, next: 0 };
    let a = drive(&mut restored, &mut feed(&[2, 3, 0]), Vec::new());
    let b = drive(&mut fresh(&plan), &mut feed(&[2, 3, 0]), Vec::new());
    let decisions = |r: &[Step]| r.iter().map(|s| s.decision.clone()).collect::<Vec<_>>();
    assert_eq!(decisions(&a), decisions(&b));
}

/// A saved value is restored only into the plan it was saved under.
#[test]
fn a_value_from_another_plan_is_refused() {
    let saved = saved_through_text(&fresh(&compile(FOR)));
    let mut other = fresh(&compile(REPEAT));
    let err = other.restore(&saved).unwrap_err();
    assert!(err.0.contains("saved for plan"), "{err}");
}

/// The wide `for` driven (every call returning) until some iterations have ended and others
/// still run, and its saved value there.
fn part_ended() -> (CompiledPlan, PlanAgent, Value) {
    let plan = compile(&wide());
    let mut agent = fresh(&plan);
    let mut feed = Feed {
        choices: &[],
        next: 0,
    };
    let mut observations = Vec::new();
    for _ in 0..DECISIONS_MAX {
        let saved = saved_through_text(&agent);
        let children = saved["agent"]["iterations"][0]["children"]
            .as_array()
            .cloned();
        let ended = |c: &&Value| !c["ended"].is_null();
        if let Some(children) = children
            && children.iter().any(|c| ended(&c))
            && !children.iter().all(|c| ended(&c))
        {
            return (plan, agent, saved);
        }
        let d = agent.decide(&State::new(), &observations).unwrap();
        let Action::Call(calls) = &d.action else {
            panic!("the run ended before some iterations had: {d:?}");
        };
        observations = outcomes(calls, &mut feed);
    }
    panic!("no decision had some iterations ended and some running");
}

/// An iteration that ended keeps no agent (issue 42: a 100,000-iteration `for` held every
/// finished one): its saved form has its outcome only, a running one's its agent and inputs.
#[test]
fn an_ended_iteration_keeps_no_agent() {
    let (_, _, saved) = part_ended();
    let children = saved["agent"]["iterations"][0]["children"]
        .as_array()
        .unwrap();
    let (ended, running): (Vec<&Value>, Vec<&Value>) =
        children.iter().partition(|c| !c["ended"].is_null());
    assert!(!ended.is_empty() && !running.is_empty());
    for c in ended {
        assert!(c.get("agent").is_none() && c.get("inputs").is_none(), "{c}");
    }
    for c in running {
        assert!(
            c["agent"]["status"].is_array() && c["inputs"]["item"].is_number(),
            "{c}"
        );
    }
}

/// A value of format 1, whose ended iterations carry their agents, still restores: the agents
/// are checked and dropped, and the agent continues as from the same value in format 2.
#[test]
fn a_format_1_value_with_ended_agents_restores() {
    let (plan, _, saved) = part_ended();
    let mut old = saved.clone();
    old["format"] = json!(1);
    let children = old["agent"]["iterations"][0]["children"]
        .as_array_mut()
        .unwrap();
    let running = children
        .iter()
        .find(|c| c["ended"].is_null())
        .unwrap()
        .clone();
    for c in children.iter_mut().filter(|c| !c["ended"].is_null()) {
        c["agent"] = running["agent"].clone();
        c["inputs"] = running["inputs"].clone();
    }
    let mut restored = fresh(&plan);
    restored.restore(&old).unwrap();
    assert_eq!(restored.save(), Some(saved));
    // A running iteration without its agent cannot be.
    let mut bad = old.clone();
    let children = bad["agent"]["iterations"][0]["children"]
        .as_array_mut()
        .unwrap();
    let running = children.iter_mut().find(|c| c["ended"].is_null()).unwrap();
    running.as_object_mut().unwrap().remove("agent");
    let err = fresh(&plan).restore(&bad).unwrap_err();
    assert!(err.0.contains("has no saved agent"), "{err}");
}
