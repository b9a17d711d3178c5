//! The plan agent: runs a compiled plan as an [`Agent`], and binds run inputs.
//!
//! Everything the agent decides is written to the run's state under `step/<name>`, so the log
//! says why each call was made, retried, skipped or given up:
//!
//! | status      | fields                           | meaning                                     |
//! |-------------|----------------------------------|---------------------------------------------|
//! | `completed` | `attempts`, `output`             | the step's output (what later steps read)   |
//! | `retrying`  | `attempts`, `error`              | the last attempt failed; another follows    |
//! | `skipped`   | `reason`                         | `when` was false or a dependency did not complete |
//! | `failed`    | `attempts`, `error`              | failed for good under `stop` or `continue`  |
//! | `waiting`   | `attempts`, `reason`             | waits for `oracle resume` (`yield`, `human.ask`) |
//!
//! Attempts are numbered from 1 across both tiers: with `retry 3`, attempts 1–3 call the step's
//! tool and 4–6 its fallback. A denied capability fails the step at once (the grants of a run
//! never change, so retrying cannot help). Messages quote expressions in canonical form, never
//! source positions, so editing a plan's layout does not change what its runs record.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use oracle_core::agent::{
    Action, Agent, AgentError, AnswerRefused, Call, Decision, Observation, Outcome,
};
use oracle_core::packed::Packed;
use oracle_core::payload::{RunStatus, StateChanged};
use oracle_core::{Hash, State};
use serde_json::{Map, Value, json};

use crate::ast::{Expr, FailurePolicy, InputType};
use crate::compile::{CompiledCall, CompiledPlan};
use crate::eval::{self, Env};
use crate::print::print_expr;

mod saga;

/// Most calls the plan agent starts in one decision. Bounds the work between two commits and
/// the size of one round of events; steps beyond it start in the next decision. Part of the
/// agent's behaviour: changing it changes the logs of wide plans.
pub const CALLS_PER_DECISION_MAX: usize = 64;

/// Tool whose answer comes from a person: its output is `{answer}` around the injected value.
pub const ASK_TOOL: &str = "human.ask";
/// The tool that waits for a named outside event: its value is the step's output `{value}`,
/// as a question's answer is `{answer}`.
pub const EVENT_TOOL: &str = "wait.event";
/// The tool of a child run's step (`c = spawn { plan: "refund.plan", ... }`): the host starts
/// the child and answers the step with its outcome (docs/PLAN.md, "Child runs").
pub const SPAWN_TOOL: &str = "spawn";

/// A step's output from the value given for it from outside: a question's answer is
/// `{"answer": value}`, an event's `{"value": value}`; any other tool's output is the value.
fn answered_output(tool: &str, value: &Value) -> Value {
    match tool {
        ASK_TOOL => json!({ "answer": value }),
        EVENT_TOOL => json!({ "value": value }),
        _ => value.clone(),
    }
}

/// The tool name of an agent step (`s = agent { model, instructions, task, tools, ... }`): the
/// plan agent runs it as a loop of [`CHAT_TOOL`] turns and the tool calls the model asks for,
/// named `s@TURN.K` (the K-th call of turn TURN). No call of this tool is ever made.
pub const AGENT_TOOL: &str = "agent";
/// The tool each turn of an agent step calls.
pub const CHAT_TOOL: &str = "llm.chat";
/// `max_turns` when an agent step does not say.
pub const TURNS_DEFAULT: u64 = 8;
/// Largest `max_turns`.
pub const TURNS_MAX: u64 = 100;
/// Most tool calls of one turn that are run; the model is told the rest were not.
pub const TOOL_CALLS_PER_TURN_MAX: usize = 16;

/// An agent step in progress: its settings, the conversation so far, and the turn's calls.
#[derive(Clone, Debug)]
pub(crate) struct Loop {
    pub(crate) model: Value,
    pub(crate) tools: Vec<String>,
    pub(crate) schema: Option<Value>,
    pub(crate) max_turns: u64,
    pub(crate) messages: Vec<Value>,
    /// The turn in progress, from 1.
    pub(crate) turn: u64,
    /// `llm.chat` calls made so far (each one's attempt number; failed turns included).
    pub(crate) chats: u64,
    /// Failed `llm.chat` attempts of this turn.
    pub(crate) failures: u64,
    /// This turn's tool calls: their ids and, once known, what each came to.
    pub(crate) results: Vec<(String, Option<String>)>,
    /// How many tool calls the previous turn asked for (what the next turn reads).
    pub(crate) previous: usize,
    /// 1 for the step's own agent, 2 for its `fallback agent { ... }`.
    pub(crate) tier: u64,
    /// This turn's `human.ask` calls waiting for a person: the index of each in `results`, and
    /// its question, in the order they asked. The run suspends on the first.
    pub(crate) asks: Vec<(usize, String)>,
}

/// An agent's inputs: a map shared by every iteration of a loop (a run's own inputs for the
/// run's agent), and this iteration's value of the loop variable, which wins over a shared
/// input of the same name. A `for` of 100,000 iterations would otherwise hold the map 100,000
/// times (a one-entry map costs about 630 bytes).
#[derive(Clone, Debug, Default)]
pub(crate) struct Inputs {
    shared: Arc<Map<String, Value>>,
    var: Option<(String, Value)>,
}

impl Inputs {
    fn get(&self, name: &str) -> Option<&Value> {
        match &self.var {
            Some((var, v)) if var == name => Some(v),
            _ => self.shared.get(name),
        }
    }

    /// All of them as one map (what a saved iteration holds).
    pub(crate) fn to_map(&self) -> Map<String, Value> {
        let mut map = Map::clone(&self.shared);
        if let Some((var, v)) = &self.var {
            map.insert(var.clone(), v.clone());
        }
        map
    }
}

impl From<Map<String, Value>> for Inputs {
    fn from(map: Map<String, Value>) -> Inputs {
        Inputs {
            shared: Arc::new(map),
            var: None,
        }
    }
}

/// A call decided on and not yet issued, its input packed: a `for` queues a call for each of
/// its iterations when it starts (100,000 of them at most), and a decision issues at most
/// [`CALLS_PER_DECISION_MAX`].
#[derive(Clone, Debug)]
pub(crate) struct Queued {
    pub(crate) step: String,
    pub(crate) tool: String,
    pub(crate) attempt: u64,
    pub(crate) input: Packed,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) reads: Vec<String>,
}

impl Queued {
    fn into_call(self) -> Call {
        Call {
            step: self.step,
            tool: self.tool,
            attempt: self.attempt,
            input: self.input.value(),
            timeout_ms: self.timeout_ms,
            reads: self.reads,
        }
    }
}

impl From<Call> for Queued {
    fn from(c: Call) -> Queued {
        Queued {
            step: c.step,
            tool: c.tool,
            attempt: c.attempt,
            input: Packed::new(&c.input),
            timeout_ms: c.timeout_ms,
            reads: c.reads,
        }
    }
}

/// State key of a step.
pub fn step_key(name: &str) -> String {
    format!("step/{name}")
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Pending,
    Running,
    Retrying {
        attempts: u64,
    },
    Completed,
    Skipped,
    Failed,
    Waiting {
        attempts: u64,
        reason: String,
    },
    /// Attempt `attempts` failed under a retry policy: the step waits on its backoff timer
    /// (a [`crate::policy::BACKOFF_TOOL`] call) before the next attempt.
    Backoff {
        attempts: u64,
    },
}

/// A loop step in progress: one child agent per iteration (a `for` starts them all; a
/// `repeat` one after another), each running the loop's body plan.
#[derive(Clone, Debug)]
pub(crate) struct Iterations {
    pub(crate) children: Vec<Child>,
    /// The outer values the body reads, bound as the body's inputs (the loop variable added):
    /// shared by every iteration.
    pub(crate) inputs: Arc<Map<String, Value>>,
    /// Iterations still running.
    pub(crate) running: u64,
}

/// Why an iteration (a loop's or a sub-plan's run) failed. Its text becomes the loop step's
/// recorded failure (`iteration {i}: {text}`), so each variant words it as before.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IterationFailed {
    /// The child's own reason: its agent's error, or the reason its run finished failed with
    /// (also what a saved iteration holds).
    #[error("{reason}")]
    Failed { reason: String },
    #[error(
        "step `{step}` waits for a person, which steps inside a loop or sub-plan may not (yet)"
    )]
    Suspended { step: String },
}

/// Why an agent step's arguments give no conversation. The text is recorded as the step's
/// failure, so it is worded as before.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LoopSettingsError {
    #[error("`tools` must be a list of tool names")]
    Tools,
    #[error("`{tool}` cannot be one of an agent's tools")]
    ReservedTool { tool: String },
    #[error("`max_turns` must be from 1 to {TURNS_MAX}")]
    MaxTurns,
    #[error("`instructions` must be a string")]
    Instructions,
}

impl Child {
    /// Ends the iteration with `result`, dropping its agent: nothing decides for it again.
    fn end(&mut self, result: Result<Packed, IterationFailed>) {
        self.ended = Some(result);
        self.agent = None;
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Child {
    /// The iteration's agent while it runs; dropped once it ended (`ended` holds all a later
    /// decision reads of it), so a 100,000-iteration `for` does not keep every finished one.
    pub(crate) agent: Option<Box<PlanAgent>>,
    /// How it ended: its steps' outputs (packed: a `for` holds every ended iteration's until
    /// its last ends), or why it failed.
    pub(crate) ended: Option<Result<Packed, IterationFailed>>,
    /// Calls of its last decision still without an outcome.
    pub(crate) waiting: u64,
    /// The outcomes of that decision received so far, in the order they came: the child sees
    /// them together once the last one is in, as a run's agent sees a round's outcomes (its
    /// calls may come back in different rounds of the run, and it decides once per round of
    /// its own).
    pub(crate) received: Vec<Observation>,
}

/// Runs a compiled plan.
///
/// What is derived from the plan alone (the plan, its step names, order and dependents, and
/// a fresh agent of each loop body) is shared (`Arc`) between the agents of one plan: every
/// iteration of a loop is an agent of the body's plan, and a `for` runs up to 100,000 of them
/// at once, each of which would otherwise hold its own copy (issue 42).
#[derive(Clone, Debug)]
pub struct PlanAgent {
    plan: Arc<CompiledPlan>,
    inputs: Inputs,
    by_name: Arc<BTreeMap<String, u32>>,
    /// Position of each step in the plan's order.
    position: Arc<Vec<u32>>,
    dependents: Arc<Vec<Vec<u32>>>,
    /// A fresh agent of each loop step's body (by step index), which each iteration copies.
    pub(crate) bodies: Arc<BTreeMap<u32, PlanAgent>>,
    /// Dependencies of each step not yet completed, skipped or failed.
    pub(crate) unsettled: Vec<u32>,
    /// Positions of steps to look at in the next decision.
    pub(crate) ready: BTreeSet<u32>,
    pub(crate) status: Vec<Status>,
    /// Outputs of completed steps (also in the state, but a decision's own changes are only
    /// recorded after it, and later steps of the same decision must see them). Packed: a run
    /// holds every step's, and a step decodes only its dependencies' ([`PlanAgent::env`]).
    pub(crate) outputs: Vec<Option<Packed>>,
    pub(crate) in_flight: u64,
    /// Agent steps in progress, by step index.
    pub(crate) loops: BTreeMap<u32, Loop>,
    /// Loop steps in progress, by step index.
    pub(crate) iterations: BTreeMap<u32, Iterations>,
    /// Which loop step each body step belongs to (body step names are unique plan-wide).
    owners: Arc<BTreeMap<String, u32>>,
    /// Calls an agent step decided on while observing (its next turn, its tool calls), issued
    /// at the next decision before any other step starts.
    pub(crate) queued: VecDeque<Queued>,
    /// Set when a step failed under `stop`: no new calls start.
    pub(crate) stopping: Option<String>,
    pub(crate) started: bool,
}

impl PlanAgent {
    /// An agent for `plan` with bound inputs (see [`bind_inputs`]).
    pub fn new(plan: CompiledPlan, inputs: Map<String, Value>) -> PlanAgent {
        let n = plan.steps.len();
        let mut position = vec![0u32; n];
        for (pos, &idx) in plan.order.iter().enumerate() {
            position[idx as usize] = pos as u32;
        }
        let mut dependents = vec![Vec::new(); n];
        for (idx, s) in plan.steps.iter().enumerate() {
            for &d in &s.deps {
                dependents[d as usize].push(idx as u32);
            }
        }
        let by_name = plan
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i as u32))
            .collect();
        let owners = plan
            .steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i as u32, s.body.as_ref()?)))
            .flat_map(|(i, b)| b.plan.steps.iter().map(move |x| (x.name.clone(), i)))
            .collect();
        let bodies = plan
            .steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i as u32, s.body.as_ref()?)))
            .map(|(i, b)| (i, PlanAgent::new(b.plan.clone(), Map::new())))
            .collect();
        let shape = PlanAgent {
            plan: Arc::new(plan),
            inputs: Inputs::default(),
            by_name: Arc::new(by_name),
            position: Arc::new(position),
            dependents: Arc::new(dependents),
            bodies: Arc::new(bodies),
            unsettled: Vec::new(),
            ready: BTreeSet::new(),
            status: Vec::new(),
            outputs: Vec::new(),
            in_flight: 0,
            loops: BTreeMap::new(),
            iterations: BTreeMap::new(),
            owners: Arc::new(owners),
            queued: VecDeque::new(),
            stopping: None,
            started: false,
        };
        shape.fresh(Inputs::from(inputs))
    }

    /// A new agent of this agent's plan with `inputs`, that has not decided yet: it shares
    /// what was derived from the plan, and starts every step afresh.
    pub(crate) fn fresh(&self, inputs: Inputs) -> PlanAgent {
        let n = self.plan.steps.len();
        PlanAgent {
            plan: Arc::clone(&self.plan),
            inputs,
            by_name: Arc::clone(&self.by_name),
            position: Arc::clone(&self.position),
            dependents: Arc::clone(&self.dependents),
            bodies: Arc::clone(&self.bodies),
            unsettled: self
                .plan
                .steps
                .iter()
                .map(|s| s.deps.len() as u32)
                .collect(),
            ready: BTreeSet::new(),
            status: vec![Status::Pending; n],
            outputs: vec![None; n],
            in_flight: 0,
            loops: BTreeMap::new(),
            iterations: BTreeMap::new(),
            owners: Arc::clone(&self.owners),
            queued: VecDeque::new(),
            stopping: None,
            started: false,
        }
    }

    pub fn plan(&self) -> &CompiledPlan {
        &self.plan
    }

    /// The inputs it was built with.
    pub fn inputs(&self) -> Map<String, Value> {
        self.inputs.to_map()
    }

    /// The same, as held (a loop's iterations share theirs).
    pub(crate) fn inputs_held(&self) -> &Inputs {
        &self.inputs
    }

    /// What step `idx`'s expressions see, with `own` its own output (for `expect`): the
    /// outputs of its completed dependencies are decoded here, once per evaluation.
    fn env<'a>(&'a self, idx: u32, own: Option<(&'a str, &'a Value)>) -> StepEnv<'a> {
        let deps = self.plan.steps[idx as usize]
            .deps
            .iter()
            .filter_map(|&d| {
                let output = self.outputs[d as usize].as_ref()?;
                Some((self.plan.steps[d as usize].name.as_str(), output.value()))
            })
            .collect();
        StepEnv {
            agent: self,
            own,
            deps,
        }
    }

    fn settle(&mut self, idx: u32) {
        for i in 0..self.dependents[idx as usize].len() {
            let d = self.dependents[idx as usize][i];
            let left = &mut self.unsettled[d as usize];
            *left = left.saturating_sub(1);
            // A compensation (`undo STEP`) never runs in order: only when the run fails.
            if *left == 0 && self.plan.steps[d as usize].undo.is_none() {
                self.ready.insert(self.position[d as usize]);
            }
        }
    }

    fn complete(&mut self, idx: u32, attempts: u64, output: Value, out: &mut Vec<StateChanged>) {
        self.status[idx as usize] = Status::Completed;
        self.outputs[idx as usize] = Some(Packed::new(&output));
        // Built by hand: `json!` would copy the output (a loop's is every iteration's).
        let mut entry = Map::new();
        entry.insert("attempts".into(), Value::from(attempts));
        entry.insert("output".into(), output);
        entry.insert("status".into(), Value::from("completed"));
        let entry = Value::Object(entry);
        out.push(change(&self.plan.steps[idx as usize].name, entry));
        self.settle(idx);
    }

    fn skip(&mut self, idx: u32, reason: String, out: &mut Vec<StateChanged>) {
        self.status[idx as usize] = Status::Skipped;
        out.push(change(
            &self.plan.steps[idx as usize].name,
            json!({"status": "skipped", "reason": reason}),
        ));
        self.settle(idx);
    }

    /// The step has failed for good: its failure policy decides what follows.
    fn give_up(&mut self, idx: u32, attempts: u64, error: String, out: &mut Vec<StateChanged>) {
        let step = &self.plan.steps[idx as usize];
        let name = step.name.clone();
        match step.on_failure {
            FailurePolicy::Yield => {
                self.status[idx as usize] = Status::Waiting {
                    attempts,
                    reason: error.clone(),
                };
                out.push(change(
                    &name,
                    json!({"status": "waiting", "attempts": attempts, "reason": error}),
                ));
            }
            policy => {
                self.status[idx as usize] = Status::Failed;
                out.push(change(
                    &name,
                    json!({"status": "failed", "attempts": attempts, "error": error}),
                ));
                if policy == FailurePolicy::Stop {
                    if self.stopping.is_none() {
                        self.stopping = Some(format!("step `{name}` failed: {error}"));
                    }
                } else {
                    self.settle(idx);
                }
            }
        }
    }

    /// One attempt failed: retry in this tier, move to the fallback, or give up.
    fn attempt_failed(
        &mut self,
        idx: u32,
        attempts: u64,
        error: String,
        out: &mut Vec<StateChanged>,
    ) {
        let step = &self.plan.steps[idx as usize];
        let tiers = if step.fallback.is_some() { 2 } else { 1 };
        let stop = step
            .policy
            .as_ref()
            .and_then(|p| p.non_retryable_in(&error));
        if let Some(code) = stop {
            let e = format!("{error} (non-retryable: {code})");
            self.give_up(idx, attempts, e, out);
        } else if attempts < step.retry.saturating_mul(tiers)
            && step.policy.is_some()
            // A failing run waits only for its compensations.
            && (self.stopping.is_none() || step.undo.is_some())
        {
            self.back_off(idx, attempts, error, out);
        } else if attempts < step.retry.saturating_mul(tiers) {
            self.status[idx as usize] = Status::Retrying { attempts };
            out.push(change(
                &step.name,
                json!({"status": "retrying", "attempts": attempts, "error": error}),
            ));
            self.ready.insert(self.position[idx as usize]);
        } else {
            self.give_up(idx, attempts, error, out);
        }
    }

    fn observe(
        &mut self,
        obs: &Observation,
        out: &mut Vec<StateChanged>,
    ) -> Result<(), AgentError> {
        // A sub-plan's call (`sub/read`, and deeper names inside it) goes to its child first.
        if let Some((owner, inner)) = obs.step.split_once('/')
            && let Some(&idx) = self.by_name.get(owner)
            && self.sub_prefix(idx).is_some()
        {
            let inner = inner.to_owned();
            return self.observe_child(idx, 0, &inner, obs, out);
        }
        if let Some((inner, i)) = iteration_of(&obs.step) {
            return self.observe_iteration(inner, i, obs, out);
        }
        if let Some((step, call)) = obs.step.split_once('@') {
            return self.observe_tool_call(step, call, obs, out);
        }
        let idx = *self
            .by_name
            .get(&obs.step)
            .ok_or_else(|| AgentError(format!("observation for unknown step `{}`", obs.step)))?;
        if self.loops.contains_key(&idx) && !matches!(obs.outcome, Outcome::Answered(_)) {
            if self.status[idx as usize] != Status::Running {
                return Err(AgentError(format!(
                    "an outcome for step `{}`, which has no call running",
                    obs.step
                )));
            }
            self.in_flight = self.in_flight.saturating_sub(1);
            self.observe_turn(idx, obs, out);
            return Ok(());
        }
        if let Status::Backoff { attempts } = self.status[idx as usize] {
            return self.backoff_observed(idx, attempts, &obs.outcome, out);
        }
        let step = &self.plan.steps[idx as usize];
        match &obs.outcome {
            Outcome::Answered(value) => {
                if !matches!(self.status[idx as usize], Status::Waiting { .. }) {
                    return Err(AgentError(format!(
                        "an answer for step `{}`, which is not waiting",
                        obs.step
                    )));
                }
                let output = answered_output(self.tool_of(idx, obs.attempt), value);
                self.complete(idx, obs.attempt, output, out);
                return Ok(());
            }
            // A waiting step's deadline passed before an answer (`on timeout fail`): the step
            // fails as a whole (asking again would not be an attempt), and `on failure` decides.
            Outcome::Failed(error)
                if matches!(self.status[idx as usize], Status::Waiting { .. }) =>
            {
                self.give_up(idx, obs.attempt, error.clone(), out);
                return Ok(());
            }
            _ if self.status[idx as usize] != Status::Running => {
                return Err(AgentError(format!(
                    "an outcome for step `{}`, which has no call running",
                    obs.step
                )));
            }
            _ => {}
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        match &obs.outcome {
            Outcome::Returned(output) => match &step.expect {
                None => self.complete(idx, obs.attempt, output.clone(), out),
                Some(expect) => {
                    let env = self.env(idx, Some((&step.name, output)));
                    match condition(expect, &env) {
                        Ok(Ok(true)) => self.complete(idx, obs.attempt, output.clone(), out),
                        Ok(Ok(false)) => {
                            let e = format!("output rejected: expect `{}` is false", quote(expect));
                            self.attempt_failed(idx, obs.attempt, e, out)
                        }
                        Ok(Err(ty)) => {
                            let e = format!(
                                "output rejected: expect `{}` gave {}, not a bool",
                                quote(expect),
                                ty
                            );
                            self.attempt_failed(idx, obs.attempt, e, out)
                        }
                        Err(err) => {
                            let e = format!("output rejected: expect `{}`: {err}", quote(expect));
                            self.attempt_failed(idx, obs.attempt, e, out)
                        }
                    }
                }
            },
            Outcome::Failed(error) => self.attempt_failed(idx, obs.attempt, error.clone(), out),
            Outcome::Denied { capability, reason } => {
                let e = format!("capability `{capability}` denied: {reason}");
                self.give_up(idx, obs.attempt, e, out)
            }
            Outcome::Ask(question) => self.wait(idx, obs.attempt, question, out),
            Outcome::Answered(_) => {} // handled above
        }
        Ok(())
    }

    /// Step `idx` waits for an answer after attempt `attempts` asked `question`.
    fn wait(&mut self, idx: u32, attempts: u64, question: &str, out: &mut Vec<StateChanged>) {
        self.status[idx as usize] = Status::Waiting {
            attempts,
            reason: question.to_owned(),
        };
        out.push(change(
            &self.plan.steps[idx as usize].name,
            json!({"status": "waiting", "attempts": attempts, "reason": question}),
        ));
    }

    /// The tool attempt `attempt` of step `idx` calls.
    fn tool_of(&self, idx: u32, attempt: u64) -> &str {
        &self.call_of(idx, attempt).tool
    }

    fn call_of(&self, idx: u32, attempt: u64) -> &CompiledCall {
        let step = &self.plan.steps[idx as usize];
        match &step.fallback {
            Some(f) if attempt > step.retry => f,
            _ => &step.call,
        }
    }

    /// Looks at one ready step: skips it, gives up on it, or returns its next call.
    fn start(&mut self, idx: u32, out: &mut Vec<StateChanged>) -> Option<Call> {
        let step = &self.plan.steps[idx as usize];
        let attempts = match self.status[idx as usize] {
            Status::Pending => 0,
            Status::Retrying { attempts } => attempts,
            // Already started, settled or waiting: nothing to do (a duplicate wake-up).
            _ => return None,
        };
        if attempts == 0 {
            for &d in &step.deps {
                if self.status[d as usize] != Status::Completed {
                    let reason = format!("`{}` did not complete", self.plan.steps[d as usize].name);
                    self.skip(idx, reason, out);
                    return None;
                }
            }
        }
        let env = self.env(idx, None);
        if attempts == 0
            && let Some(when) = &step.when
        {
            match condition(when, &env) {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => {
                    let reason = format!("when `{}` is false", quote(when));
                    self.skip(idx, reason, out);
                    return None;
                }
                Ok(Err(ty)) => {
                    let e = format!("when `{}` gave {}, not a bool", quote(when), ty);
                    self.give_up(idx, 0, e, out);
                    return None;
                }
                Err(err) => {
                    let e = format!("when `{}`: {err}", quote(when));
                    self.give_up(idx, 0, e, out);
                    return None;
                }
            }
        }
        let attempt = attempts + 1;
        let call = self.call_of(idx, attempt);
        let mut input = Map::new();
        // The arguments together are the call's input: one budget bounds all of them.
        let mut budget = eval::Budget::default();
        for (name, expr) in &call.args {
            match eval::eval_with(expr, &env, &mut budget) {
                Ok(v) => {
                    input.insert(name.clone(), v);
                }
                Err(err) => {
                    // Arguments are pure: another attempt would fail the same way.
                    let e = format!("argument `{name}` (`{}`): {err}", quote(expr));
                    self.give_up(idx, attempts, e, out);
                    return None;
                }
            }
        }
        if let Some(body) = step.body.clone() {
            return self.start_loop(idx, &body, input, out);
        }
        if call.tool == AGENT_TOOL {
            return match agent_loop(&input) {
                Ok(l) => {
                    self.loops.insert(idx, l);
                    self.status[idx as usize] = Status::Running;
                    Some(self.next_turn(idx))
                }
                Err(e) => {
                    self.give_up(idx, 0, e.to_string(), out);
                    None
                }
            };
        }
        let call = Call {
            step: step.name.clone(),
            tool: call.tool.clone(),
            attempt,
            input: Value::Object(input),
            timeout_ms: step.timeout_ms,
            reads: step
                .deps
                .iter()
                .map(|&d| self.plan.steps[d as usize].name.clone())
                .collect(),
        };
        self.status[idx as usize] = Status::Running;
        self.in_flight += 1;
        Some(call)
    }
}

fn quote(e: &Expr) -> String {
    print_expr(e)
}

fn change(step: &str, entry: Value) -> StateChanged {
    let mut set = Map::new();
    set.insert(step_key(step), entry);
    StateChanged {
        set,
        delete: Vec::new(),
    }
}

/// Names as a step's expressions see them: its own output (in `expect`), run inputs, and the
/// outputs of the steps it depends on (every step its expressions name is one), decoded.
struct StepEnv<'a> {
    agent: &'a PlanAgent,
    own: Option<(&'a str, &'a Value)>,
    deps: BTreeMap<&'a str, Value>,
}

/// What a condition (`when`, `expect`, `until`) gave: a bool, or the name of the type it gave
/// instead. It is looked at where it is, never copied.
fn condition(expr: &Expr, env: &impl Env) -> Result<Result<bool, &'static str>, eval::EvalError> {
    eval::eval_ref(expr, env).map(|v| match *v {
        Value::Bool(b) => Ok(b),
        ref other => Err(eval::type_name(other)),
    })
}

impl Env for StepEnv<'_> {
    fn lookup(&self, name: &str) -> Option<&Value> {
        if let Some((own, v)) = self.own
            && own == name
        {
            return Some(v);
        }
        if let Some(v) = self.agent.inputs.get(name) {
            return Some(v);
        }
        self.deps.get(name)
    }
}

impl Agent for PlanAgent {
    fn program(&self) -> &str {
        &self.plan.name
    }

    /// An answer for a step whose last attempt called a tool (not `human.ask`) stands in for
    /// that tool's output, so it must pass the step's `expect` as an output would; otherwise
    /// it would be accepted and the run would fail for good at the next step that reads it.
    /// An answer to a question becomes the step's output `{"answer": value}`, and a step's
    /// `expect` holds of that output too (`expect q.answer != ""`), so it is refused here,
    /// before it is recorded, rather than recorded as an output the plan rejects.
    fn check_answer(&self, step: &str, value: &Value) -> Result<Vec<String>, AnswerRefused> {
        let Some(&idx) = self.by_name.get(step) else {
            return Ok(Vec::new());
        };
        let attempts = match &self.status[idx as usize] {
            Status::Waiting { attempts, .. } => *attempts,
            // A call in flight, whose output is given from outside (a fork's value).
            Status::Running => 1,
            Status::Retrying { attempts } => attempts.saturating_add(1),
            _ => return Ok(Vec::new()),
        };
        let tool = self.tool_of(idx, attempts.max(1));
        let asked = tool == ASK_TOOL || tool == EVENT_TOOL;
        let def = &self.plan.steps[idx as usize];
        // Any tier's output will do: the answer replaces whichever tier would have succeeded.
        // A question's answer is checked against the question's schema (by the caller).
        let tools: Vec<String> = if asked {
            Vec::new()
        } else {
            std::iter::once(&def.call)
                .chain(def.fallback.as_ref())
                .map(|c| c.tool.clone())
                .collect()
        };
        let output = answered_output(tool, value);
        if let Some(expect) = &def.expect {
            let env = self.env(idx, Some((&def.name, &output)));
            match condition(expect, &env) {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => {
                    return Err(AnswerRefused::ExpectFalse {
                        expect: quote(expect),
                    });
                }
                Ok(Err(ty)) => {
                    return Err(AnswerRefused::ExpectNotBool {
                        expect: quote(expect),
                        ty: ty.to_string(),
                    });
                }
                Err(err) => {
                    return Err(AnswerRefused::ExpectFails {
                        expect: quote(expect),
                        reason: err.to_string(),
                    });
                }
            }
        }
        Ok(tools)
    }

    fn program_hash(&self) -> Hash {
        self.plan.hash
    }

    /// The agent's progress, without the plan (the fresh agent that restores it has the
    /// plan already): see `saved.rs` for the shape.
    fn save(&self) -> Option<Value> {
        crate::saved::save(self)
    }

    fn save_text(&self) -> Option<Box<serde_json::value::RawValue>> {
        crate::saved::save_text(self)
    }

    /// Checks the whole value against this agent's plan before taking any of it, so a value
    /// this agent could not have saved is refused and leaves the agent as it was.
    fn restore(&mut self, saved: &Value) -> Result<(), AgentError> {
        crate::saved::restore(self, saved)
    }

    fn decide(
        &mut self,
        _state: &State,
        observations: &[Observation],
    ) -> Result<Decision, AgentError> {
        let mut changes = Vec::new();
        if !self.started {
            self.started = true;
            for (idx, s) in self.plan.steps.iter().enumerate() {
                if s.deps.is_empty() {
                    self.ready.insert(self.position[idx]);
                }
            }
        }
        for obs in observations {
            self.observe(obs, &mut changes)?;
        }
        let mut calls = Vec::new();
        // An agent step's next calls come first, and go out even while stopping: they are
        // part of calls already running, whose outcomes the run waits for.
        let take = self.queued.len().min(CALLS_PER_DECISION_MAX);
        calls.extend(self.queued.drain(..take).map(Queued::into_call));
        if self.stopping.is_none() {
            while calls.len() < CALLS_PER_DECISION_MAX {
                let Some(pos) = self.ready.pop_first() else {
                    break;
                };
                let idx = self.plan.order[pos as usize];
                if let Some(call) = self.start(idx, &mut changes) {
                    calls.push(call);
                }
                if self.stopping.is_some() {
                    break;
                }
                // A loop step that started queues its iterations' calls: they go out in this
                // decision, in order, as far as it has room.
                let room = CALLS_PER_DECISION_MAX.saturating_sub(calls.len());
                let take = self.queued.len().min(room);
                calls.extend(self.queued.drain(..take).map(Queued::into_call));
            }
        }
        // A failed run undoes what it did (`undo STEP`), one compensation at a time.
        if self.stopping.is_some() && calls.is_empty() && self.in_flight == 0 {
            calls.extend(self.next_compensation(&mut changes));
        }
        let action = self.action(calls)?;
        let decision = Decision { changes, action };
        Ok(decision)
    }
}

/// `(name, i)` for the name of a loop iteration's call, `name[i]`.
fn iteration_of(step: &str) -> Option<(&str, usize)> {
    let open = step.rfind('[')?;
    let i = step.strip_suffix(']')?.get(open + 1..)?.parse().ok()?;
    Some((&step[..open], i))
}

/// A state key of a body step, moved to its iteration: `step/read` → `step/read[3]`.
fn iteration_key(key: &str, i: usize) -> String {
    format!("{key}[{i}]")
}

/// An agent step's settings from its evaluated arguments, and its first messages.
fn agent_loop(input: &Map<String, Value>) -> Result<Loop, LoopSettingsError> {
    let tools: Vec<String> = match input.get("tools") {
        Some(Value::Array(t)) => t
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or(LoopSettingsError::Tools)
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(LoopSettingsError::Tools),
    };
    // `human.ask` may be offered: the run suspends inside the loop (`observe_tool_call`).
    if let Some(t) = tools
        .iter()
        .find(|t| [AGENT_TOOL, CHAT_TOOL, EVENT_TOOL].contains(&t.as_str()))
    {
        return Err(LoopSettingsError::ReservedTool { tool: t.clone() });
    }
    let max_turns = match input.get("max_turns") {
        None => TURNS_DEFAULT,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=TURNS_MAX).contains(&n) => n,
            _ => return Err(LoopSettingsError::MaxTurns),
        },
    };
    let instructions = input
        .get("instructions")
        .and_then(Value::as_str)
        .ok_or(LoopSettingsError::Instructions)?;
    let task = match input.get("task") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    };
    Ok(Loop {
        model: input.get("model").cloned().unwrap_or(Value::Null),
        tools,
        schema: input.get("output").cloned(),
        max_turns,
        messages: vec![
            json!({"role": "system", "content": instructions}),
            json!({"role": "user", "content": task}),
        ],
        turn: 1,
        chats: 0,
        failures: 0,
        results: Vec::new(),
        previous: 0,
        tier: 1,
        asks: Vec::new(),
    })
}

/// What a tool call came to, as the model is told it.
fn tool_result(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Returned(v) => v.to_string(),
        Outcome::Failed(e) => format!("error: {e}"),
        Outcome::Denied { capability, reason } => {
            format!("error: capability `{capability}` denied: {reason}")
        }
        // Only a declared tool reaches here with `Ask` (a `human.ask` waits instead).
        Outcome::Ask(q) => {
            format!("error: the tool asked a person ({q}), which an agent's tools may not")
        }
        // A person's answer to the model's `human.ask`: the tool's output, `{answer}`.
        Outcome::Answered(v) => json!({ "answer": v }).to_string(),
    }
}

impl PlanAgent {
    /// Starts loop step `idx`: evaluates its list (`for`) and starts every iteration, or the
    /// first (`repeat`). Calls go out through `queued`; returns none itself.
    fn start_loop(
        &mut self,
        idx: u32,
        body: &crate::compile::CompiledBody,
        args: Map<String, Value>,
        out: &mut Vec<StateChanged>,
    ) -> Option<Call> {
        let env = self.env(idx, None);
        let mut inputs = Map::new();
        for name in &body.outer {
            if let Some(v) = env.lookup(name) {
                inputs.insert(name.clone(), v.clone());
            }
        }
        if body.kind == crate::ast::LoopKind::Use {
            // A sub-plan: its inputs are the step's arguments, then its own defaults.
            inputs = args;
            for i in &body.plan.inputs {
                if let (false, Some(d)) = (inputs.contains_key(&i.name), &i.default) {
                    inputs.insert(i.name.clone(), d.clone());
                }
            }
        }
        let items = match &body.items {
            None => None,
            Some(e) => match eval::eval_ref(e, &env).map(|v| match v {
                Cow::Owned(Value::Array(items)) => Ok(items),
                Cow::Borrowed(Value::Array(items)) => Ok(items.clone()),
                other => Err(eval::type_name(&other)),
            }) {
                Ok(Ok(items)) => Some(items),
                Ok(Err(ty)) => {
                    let e = format!("for: `{}` gave {ty}, not a list", quote(e));
                    self.give_up(idx, 0, e, out);
                    return None;
                }
                Err(err) => {
                    let e = format!("for: `{}`: {err}", quote(e));
                    self.give_up(idx, 0, e, out);
                    return None;
                }
            },
        };
        if let Some(items) = &items
            && items.len() as u64 > body.max
        {
            let e = format!("for: {} items, more than its max {}", items.len(), body.max);
            self.give_up(idx, 0, e, out);
            return None;
        }
        self.status[idx as usize] = Status::Running;
        self.iterations.insert(
            idx,
            Iterations {
                children: Vec::new(),
                inputs: Arc::new(inputs),
                running: 0,
            },
        );
        match items {
            Some(items) if items.is_empty() => {
                self.iterations.remove(&idx);
                self.complete(idx, 1, Value::Array(Vec::new()), out);
            }
            Some(items) => {
                // Every iteration exists before any runs, so one that ends at once cannot
                // look like the last.
                let n = items.len();
                for item in items {
                    self.spawn(idx, body, Some(item));
                }
                for i in 0..n {
                    self.drive_child(idx, i, &[], out);
                }
            }
            None => {
                self.spawn(idx, body, None);
                self.drive_child(idx, 0, &[], out);
            }
        }
        None
    }

    /// Adds one more iteration to loop step `idx` (not yet run: see `drive_child`).
    fn spawn(&mut self, idx: u32, body: &crate::compile::CompiledBody, item: Option<Value>) {
        let Some(it) = self.iterations.get_mut(&idx) else {
            return;
        };
        let inputs = Inputs {
            shared: Arc::clone(&it.inputs),
            var: body.var.clone().zip(item),
        };
        let agent = match self.bodies.get(&idx) {
            Some(template) => template.fresh(inputs),
            None => PlanAgent::new(body.plan.clone(), inputs.to_map()),
        };
        it.children.push(Child {
            agent: Some(Box::new(agent)),
            ended: None,
            waiting: 0,
            received: Vec::new(),
        });
        it.running += 1;
    }

    /// Gives iteration `i` of loop step `idx` its observations and takes its decision: its
    /// state changes and calls, renamed into the iteration (`read` → `read[i]`).
    fn drive_child(
        &mut self,
        idx: u32,
        i: usize,
        observations: &[Observation],
        out: &mut Vec<StateChanged>,
    ) {
        let Some(child) = self.child_mut(idx, i) else {
            return;
        };
        let Some(agent) = child.agent.as_mut() else {
            return;
        };
        let decision = agent.decide(&State::new(), observations);
        let decision = match decision {
            Ok(d) => d,
            Err(e) => {
                child.end(Err(IterationFailed::Failed { reason: e.0 }));
                self.iteration_ended(idx, out);
                return;
            }
        };
        // Names inside the child, as the run records them: `read[i]` for a loop's iteration,
        // `sub/read` for a sub-plan called by step `sub`.
        let prefix = self.sub_prefix(idx);
        let rename = |name: &str| match &prefix {
            Some(p) => format!("{p}/{name}"),
            None => format!("{name}[{i}]"),
        };
        let rename_key = |key: &str| match (&prefix, key.strip_prefix("step/")) {
            (Some(p), Some(rest)) => format!("step/{p}/{rest}"),
            (Some(_), None) => key.to_owned(),
            (None, _) => iteration_key(key, i),
        };
        let Some(child) = self.child_mut(idx, i) else {
            return;
        };
        for c in decision.changes {
            out.push(StateChanged {
                set: c
                    .set
                    .into_iter()
                    .map(|(k, v)| (rename_key(&k), v))
                    .collect(),
                delete: c.delete.iter().map(|k| rename_key(k)).collect(),
            });
        }
        match decision.action {
            Action::Call(calls) => {
                let inner: BTreeSet<&str> = child
                    .agent
                    .iter()
                    .flat_map(|a| a.plan.steps.iter())
                    .map(|s| s.name.as_str())
                    .collect();
                let renamed: Vec<Call> = calls
                    .into_iter()
                    .map(|mut c| {
                        c.step = rename(&c.step);
                        c.reads = c
                            .reads
                            .into_iter()
                            .map(|r| {
                                let base = r.split(['@', '[', '/']).next().unwrap_or(&r);
                                if inner.contains(base) { rename(&r) } else { r }
                            })
                            .collect();
                        c
                    })
                    .collect();
                child.waiting = renamed.len() as u64;
                self.in_flight += renamed.len() as u64;
                self.queued.extend(renamed.into_iter().map(Queued::from));
            }
            Action::Finish { status, reason } => {
                let outputs = child.agent.as_ref().map(|a| a.outputs_by_name());
                child.end(match status {
                    RunStatus::Completed => Ok(Packed::new(&outputs.unwrap_or(Value::Null))),
                    // A child plan never ends cancelled (only a cancel from outside the whole
                    // run records that); were one to, its iteration fails.
                    RunStatus::Failed | RunStatus::Cancelled => {
                        Err(IterationFailed::Failed { reason })
                    }
                });
                self.iteration_ended(idx, out);
            }
            Action::Suspend { step, .. } => {
                child.end(Err(IterationFailed::Suspended {
                    step: rename(&step),
                }));
                self.iteration_ended(idx, out);
            }
        }
    }

    /// An iteration of loop step `idx` ended: a `repeat` goes on or stops; once none is
    /// running, the loop step completes with every iteration's outputs, or fails.
    fn iteration_ended(&mut self, idx: u32, out: &mut Vec<StateChanged>) {
        // The plan is shared: holding it here costs a count, not a copy of the body (whose
        // `for` list may be a literal of 100,000 items).
        let plan = Arc::clone(&self.plan);
        let Some(body) = plan.steps[idx as usize].body.as_ref() else {
            return;
        };
        let Some(it) = self.iterations.get_mut(&idx) else {
            return;
        };
        it.running = it.running.saturating_sub(1);
        if body.kind == crate::ast::LoopKind::Repeat
            && let Some(Child {
                ended: Some(Ok(outputs)),
                ..
            }) = it.children.last()
        {
            let outputs = outputs.value();
            let n = it.children.len() as u64;
            let mut env = Map::clone(&it.inputs);
            if let Value::Object(m) = &outputs {
                env.extend(m.clone());
            }
            let until = body.until.as_ref();
            let verdict = until.map(|u| condition(u, &env));
            match verdict {
                Some(Ok(Ok(true))) | None => {}
                Some(Ok(Ok(false))) if n < body.max => {
                    self.spawn(idx, body, None);
                    self.drive_child(idx, n as usize, &[], out);
                    return;
                }
                Some(Ok(Ok(false))) => {
                    let e = format!(
                        "repeat: `until {}` still false after its max {} iterations",
                        until.map(quote).unwrap_or_default(),
                        body.max
                    );
                    self.iterations.remove(&idx);
                    self.give_up(idx, n, e, out);
                    return;
                }
                Some(Ok(Err(ty))) => {
                    let e = format!(
                        "repeat: `until {}` gave {}, not a bool",
                        until.map(quote).unwrap_or_default(),
                        ty
                    );
                    self.iterations.remove(&idx);
                    self.give_up(idx, n, e, out);
                    return;
                }
                Some(Err(err)) => {
                    let e = format!(
                        "repeat: `until {}`: {err}",
                        until.map(quote).unwrap_or_default()
                    );
                    self.iterations.remove(&idx);
                    self.give_up(idx, n, e, out);
                    return;
                }
            }
        }
        if it.running > 0 {
            return;
        }
        let Some(it) = self.iterations.remove(&idx) else {
            return;
        };
        let n = it.children.len() as u64;
        let mut results = Vec::with_capacity(it.children.len());
        for (i, c) in it.children.into_iter().enumerate() {
            match c.ended {
                Some(Ok(v)) => results.push(v.value()),
                Some(Err(e)) => {
                    self.give_up(idx, n, format!("iteration {i}: {e}"), out);
                    return;
                }
                None => {
                    self.give_up(idx, n, format!("iteration {i} did not end"), out);
                    return;
                }
            }
        }
        // A sub-plan's output is its one run's outputs; a loop's, the list of its iterations'.
        let output = if body.kind == crate::ast::LoopKind::Use {
            results.pop().unwrap_or(Value::Null)
        } else {
            Value::Array(results)
        };
        self.complete(idx, n, output, out);
    }

    /// Child `i` of loop or sub-plan step `idx`, while the step runs.
    fn child_mut(&mut self, idx: u32, i: usize) -> Option<&mut Child> {
        self.iterations
            .get_mut(&idx)
            .and_then(|it| it.children.get_mut(i))
    }

    /// For a sub-plan step, the prefix its calls and keys carry (the step's name).
    fn sub_prefix(&self, idx: u32) -> Option<String> {
        let s = &self.plan.steps[idx as usize];
        s.body
            .as_ref()
            .filter(|b| b.kind == crate::ast::LoopKind::Use)
            .map(|_| s.name.clone())
    }

    /// The outcome of a call of loop iteration `i` (its step `inner`, without `[i]`).
    fn observe_iteration(
        &mut self,
        inner: &str,
        i: usize,
        obs: &Observation,
        out: &mut Vec<StateChanged>,
    ) -> Result<(), AgentError> {
        let base = inner.split(['@', '/']).next().unwrap_or(inner);
        let idx = *self
            .owners
            .get(base)
            .ok_or_else(|| AgentError(format!("observation for unknown step `{}`", obs.step)))?;
        self.observe_child(idx, i, inner, obs, out)
    }

    /// Hands an outcome to child `i` of loop or sub-plan step `idx`, as its step `inner`.
    fn observe_child(
        &mut self,
        idx: u32,
        i: usize,
        inner: &str,
        obs: &Observation,
        out: &mut Vec<StateChanged>,
    ) -> Result<(), AgentError> {
        let known = self
            .iterations
            .get(&idx)
            .is_some_and(|it| it.children.get(i).is_some_and(|c| c.ended.is_none()));
        if !known {
            return Err(AgentError(format!(
                "an outcome for `{}`, which has no call running",
                obs.step
            )));
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        let renamed = Observation {
            step: inner.to_owned(),
            ..obs.clone()
        };
        let Some(child) = self.child_mut(idx, i) else {
            return Ok(());
        };
        child.received.push(renamed);
        child.waiting = child.waiting.saturating_sub(1);
        if child.waiting == 0 {
            let seen = std::mem::take(&mut child.received);
            self.drive_child(idx, i, &seen, out);
        }
        Ok(())
    }

    /// Each step's output by name (`null` for a step that did not complete): an iteration's
    /// result.
    fn outputs_by_name(&self) -> Value {
        Value::Object(
            self.plan
                .steps
                .iter()
                .zip(&self.outputs)
                .map(|(s, o)| {
                    (
                        s.name.clone(),
                        o.as_ref().map_or(Value::Null, Packed::value),
                    )
                })
                .collect(),
        )
    }

    /// The `llm.chat` call of agent step `idx`'s current turn (counted as in flight).
    fn next_turn(&mut self, idx: u32) -> Call {
        let step = &self.plan.steps[idx as usize];
        let Some(l) = self.loops.get_mut(&idx) else {
            // Invariant: only called for steps with a loop.
            return Call {
                step: step.name.clone(),
                tool: CHAT_TOOL.into(),
                attempt: 1,
                input: Value::Null,
                timeout_ms: step.timeout_ms,
                reads: Vec::new(),
            };
        };
        l.chats += 1;
        let mut input = json!({
            "model": l.model,
            "messages": l.messages,
            "tools": l.tools,
        });
        if let Some(schema) = &l.schema {
            input["schema"] = schema.clone();
        }
        // The previous turn's tool calls, and the step's own dependencies.
        let mut reads: Vec<String> = step
            .deps
            .iter()
            .map(|&d| self.plan.steps[d as usize].name.clone())
            .collect();
        if l.turn > 1 {
            reads.extend((1..=l.previous).map(|k| format!("{}@{}.{k}", step.name, l.turn - 1)));
        }
        self.in_flight += 1;
        Call {
            step: step.name.clone(),
            tool: CHAT_TOOL.into(),
            attempt: l.chats,
            input,
            timeout_ms: step.timeout_ms,
            reads,
        }
    }

    /// The outcome of an agent step's turn: its tool calls go out, or it answered, or the turn
    /// is tried again or given up.
    fn observe_turn(&mut self, idx: u32, obs: &Observation, out: &mut Vec<StateChanged>) {
        let retry = self.plan.steps[idx as usize].retry;
        let name = self.plan.steps[idx as usize].name.clone();
        let timeout_ms = self.plan.steps[idx as usize].timeout_ms;
        let Some(l) = self.loops.get_mut(&idx) else {
            return;
        };
        let chats = l.chats;
        match &obs.outcome {
            Outcome::Returned(output) => {
                let calls = output
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if calls.is_empty() {
                    self.loops.remove(&idx);
                    // The answer: the step's `expect` decides, as for any output (a loop
                    // is not run again, so a rejected answer fails the step).
                    let expect = self.plan.steps[idx as usize].expect.clone();
                    let verdict = match &expect {
                        None => Ok(()),
                        Some(e) => {
                            let env = self.env(idx, Some((&name, output)));
                            match condition(e, &env) {
                                Ok(Ok(true)) => Ok(()),
                                Ok(Ok(false)) => {
                                    Err(format!("output rejected: expect `{}` is false", quote(e)))
                                }
                                Ok(Err(ty)) => Err(format!(
                                    "output rejected: expect `{}` gave {}, not a bool",
                                    quote(e),
                                    ty
                                )),
                                Err(err) => {
                                    Err(format!("output rejected: expect `{}`: {err}", quote(e)))
                                }
                            }
                        }
                    };
                    match verdict {
                        Ok(()) => self.complete(idx, chats, output.clone(), out),
                        Err(e) => self.give_up(idx, chats, e, out),
                    }
                    return;
                }
                l.failures = 0;
                l.messages.push(json!({
                    "role": "assistant",
                    "content": output.get("content").cloned().unwrap_or(json!("")),
                    "tool_calls": calls,
                }));
                l.results = Vec::with_capacity(calls.len());
                let turn = l.turn;
                let mut issued = Vec::new();
                for (k, c) in calls.iter().enumerate() {
                    let id = c["id"].as_str().unwrap_or("").to_owned();
                    let tool = c["name"].as_str().unwrap_or("").to_owned();
                    let refused = if k >= TOOL_CALLS_PER_TURN_MAX {
                        Some(format!(
                            "error: not run: at most {TOOL_CALLS_PER_TURN_MAX} tool calls per turn"
                        ))
                    } else if !l.tools.contains(&tool) {
                        Some(format!(
                            "error: `{tool}` is not one of this agent's tools ({})",
                            l.tools.join(", ")
                        ))
                    } else {
                        None
                    };
                    if refused.is_none() {
                        issued.push(Call {
                            step: format!("{name}@{turn}.{}", k + 1),
                            tool,
                            attempt: 1,
                            input: c["arguments"].clone(),
                            timeout_ms,
                            reads: vec![name.clone()],
                        });
                    }
                    l.results.push((id, refused));
                }
                self.in_flight += issued.len() as u64;
                self.queued.extend(issued.into_iter().map(Queued::from));
                self.turn_done(idx, out);
            }
            Outcome::Failed(error) => {
                l.failures += 1;
                if l.failures < retry {
                    let call = self.next_turn(idx);
                    self.queued.push_back(Queued::from(call));
                } else {
                    self.agent_failed(idx, chats, error.clone(), out);
                }
            }
            Outcome::Denied { capability, reason } => {
                let e = format!("capability `{capability}` denied: {reason}");
                self.agent_failed(idx, chats, e, out);
            }
            Outcome::Ask(_) | Outcome::Answered(_) => {}
        }
    }

    /// The outcome of one of an agent step's tool calls (`step@TURN.K`).
    fn observe_tool_call(
        &mut self,
        step: &str,
        call: &str,
        obs: &Observation,
        out: &mut Vec<StateChanged>,
    ) -> Result<(), AgentError> {
        let unknown = || AgentError(format!("observation for unknown call `{}`", obs.step));
        let idx = *self.by_name.get(step).ok_or_else(unknown)?;
        let (turn, k) = call.split_once('.').ok_or_else(unknown)?;
        let (turn, k): (u64, usize) = (
            turn.parse().map_err(|_| unknown())?,
            k.parse().map_err(|_| unknown())?,
        );
        let l = self.loops.get_mut(&idx).ok_or_else(unknown)?;
        let k = k.checked_sub(1).ok_or_else(unknown)?;
        let asked = l.asks.iter().position(|(slot, _)| *slot == k);
        match (l.results.get_mut(k), &obs.outcome) {
            (Some((_, None)), Outcome::Ask(question)) if turn == l.turn && asked.is_none() => {
                // The model asked a person: the call waits, and the run suspends on it.
                l.asks.push((k, question.clone()));
                self.in_flight = self.in_flight.saturating_sub(1);
                self.loop_waits(idx, out);
                return Ok(());
            }
            (Some((_, result @ None)), _) if turn == l.turn && asked.is_some() => {
                // Its answer, or its deadline's failure: no longer in flight since it asked.
                if !matches!(obs.outcome, Outcome::Answered(_) | Outcome::Failed(_)) {
                    return Err(unknown());
                }
                *result = Some(tool_result(&obs.outcome));
                l.asks.retain(|(slot, _)| *slot != k);
                self.loop_waits(idx, out);
            }
            (Some((_, result @ None)), _) if turn == l.turn => {
                *result = Some(tool_result(&obs.outcome));
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            _ => return Err(unknown()),
        }
        self.turn_done(idx, out);
        Ok(())
    }

    /// Agent step `idx` waits for a person while its model's `human.ask` calls do: the step's
    /// status says so (the inbox shows the first question), and goes back to running, its
    /// waiting entry removed, once every one is answered.
    fn loop_waits(&mut self, idx: u32, out: &mut Vec<StateChanged>) {
        let Some(l) = self.loops.get(&idx) else {
            return;
        };
        let name = self.plan.steps[idx as usize].name.clone();
        match l.asks.first() {
            Some((_, question)) => {
                let (attempts, reason) = (l.chats, question.clone());
                let entry = json!({"status": "waiting", "attempts": attempts, "reason": reason});
                self.status[idx as usize] = Status::Waiting { attempts, reason };
                out.push(change(&name, entry));
            }
            None if self.status[idx as usize] != Status::Running => {
                self.status[idx as usize] = Status::Running;
                out.push(StateChanged {
                    set: Map::new(),
                    delete: vec![step_key(&name)],
                });
            }
            None => {}
        }
    }

    /// Agent step `idx`'s loop ended without an answer: its `fallback agent { ... }` starts
    /// (a fresh conversation, its own settings), or, after that, the step gives up.
    fn agent_failed(&mut self, idx: u32, chats: u64, error: String, out: &mut Vec<StateChanged>) {
        let tier = self.loops.remove(&idx).map_or(2, |l| l.tier);
        let fallback = self.plan.steps[idx as usize].fallback.clone();
        let Some(f) = fallback.filter(|f| tier == 1 && f.tool == AGENT_TOOL) else {
            self.give_up(idx, chats, error, out);
            return;
        };
        let env = self.env(idx, None);
        let mut input = Map::new();
        let mut budget = eval::Budget::default();
        for (name, expr) in &f.args {
            match eval::eval_with(expr, &env, &mut budget) {
                Ok(v) => {
                    input.insert(name.clone(), v);
                }
                Err(err) => {
                    let e = format!("fallback argument `{name}` (`{}`): {err}", quote(expr));
                    self.give_up(idx, chats, e, out);
                    return;
                }
            }
        }
        match agent_loop(&input) {
            Ok(mut l) => {
                l.tier = 2;
                // Model calls keep counting across tiers: attempts stay unique in the step.
                l.chats = chats;
                let name = self.plan.steps[idx as usize].name.clone();
                out.push(change(
                    &name,
                    json!({"status": "retrying", "attempts": chats, "error": error}),
                ));
                self.loops.insert(idx, l);
                let call = self.next_turn(idx);
                self.queued.push_back(Queued::from(call));
            }
            Err(e) => self.give_up(idx, chats, e.to_string(), out),
        }
    }

    /// When every tool call of the turn has come back: their results join the conversation and
    /// the next turn starts, unless that would pass `max_turns`.
    fn turn_done(&mut self, idx: u32, out: &mut Vec<StateChanged>) {
        let Some(l) = self.loops.get_mut(&idx) else {
            return;
        };
        if l.results.iter().any(|(_, r)| r.is_none()) {
            return;
        }
        l.previous = l.results.len();
        for (id, result) in std::mem::take(&mut l.results) {
            l.messages.push(json!({
                "role": "tool",
                "tool_call_id": id,
                "content": result.unwrap_or_default(),
            }));
        }
        if l.turn >= l.max_turns {
            let (chats, max) = (l.chats, l.max_turns);
            let e = format!("max_turns = {max} reached without an answer");
            self.agent_failed(idx, chats, e, out);
            return;
        }
        l.turn += 1;
        l.failures = 0;
        let call = self.next_turn(idx);
        self.queued.push_back(Queued::from(call));
    }

    fn first_waiting(&self) -> Option<(String, u64, String)> {
        self.waiting_among(|_| true)
    }

    /// The first step in the plan's order that `among` picks and that waits (for a person, or
    /// on its backoff timer), as the run suspends on it: `(name, attempts, reason)`. An agent
    /// step waits on its model's first `human.ask` call, `step@TURN.K`, made once (attempt
    /// 1): what `oracle resume --step` answers.
    fn waiting_among(
        &self,
        among: impl Fn(&crate::compile::CompiledStep) -> bool,
    ) -> Option<(String, u64, String)> {
        self.plan.order.iter().find_map(|&idx| {
            let step = &self.plan.steps[idx as usize];
            if !among(step) {
                return None;
            }
            match &self.status[idx as usize] {
                Status::Waiting { attempts, reason } => Some(
                    self.asked_in_loop(idx)
                        .unwrap_or_else(|| (step.name.clone(), *attempts, reason.clone())),
                ),
                Status::Backoff { attempts } => Some((
                    step.name.clone(),
                    *attempts,
                    saga::backoff_reason(*attempts),
                )),
                _ => None,
            }
        })
    }

    /// The call agent step `idx` waits on when its model asked a person, with the question.
    fn asked_in_loop(&self, idx: u32) -> Option<(String, u64, String)> {
        let l = self.loops.get(&idx)?;
        let (k, question) = l.asks.first()?;
        let name = &self.plan.steps[idx as usize].name;
        Some((format!("{name}@{}.{}", l.turn, k + 1), 1, question.clone()))
    }
}

/// Why run inputs could not be bound.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("plan `{plan}` has no input `{name}`{}; its inputs: {}", hint.as_ref().map(|h| format!(" (did you mean `{h}`?)")).unwrap_or_default(), if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    Unknown {
        plan: String,
        name: String,
        hint: Option<String>,
        /// Every input the plan has, `name: type`, by name.
        known: Vec<String>,
    },
    #[error("input `{name}` is required (the plan gives it no default)")]
    Missing { name: String },
    #[error("input `{name}` must be {expected}: {reason}")]
    Type {
        name: String,
        expected: &'static str,
        reason: String,
    },
    #[error("input `{name}` is given twice")]
    Duplicate { name: String },
}

/// Binds inputs given as text (`--input name=value`): a `string` input takes the text as it
/// is; `int` and `bool` parse it; `list`, `map` and `json` parse it as JSON (no floats). Inputs
/// not given take their defaults.
pub fn bind_inputs(
    plan: &CompiledPlan,
    given: &[(String, String)],
) -> Result<Map<String, Value>, InputError> {
    let mut seen = BTreeSet::new();
    for (name, _) in given {
        if !seen.insert(name.as_str()) {
            return Err(InputError::Duplicate { name: name.clone() });
        }
    }
    bind_with(plan, given.iter().map(|(n, _)| n.as_str()), |input| {
        given
            .iter()
            .find(|(n, _)| n == &input.name)
            .map(|(_, t)| parse_input(&input.name, input.ty, t))
    })
}

/// Binds inputs given as JSON values (a request to `oracle serve`): each must already be of
/// the type the plan declares (a `string` input takes a JSON string, an `int` an integer; no
/// text is parsed). Inputs not given take their defaults.
pub fn bind_input_values(
    plan: &CompiledPlan,
    given: &Map<String, Value>,
) -> Result<Map<String, Value>, InputError> {
    bind_with(plan, given.keys().map(String::as_str), |input| {
        given
            .get(&input.name)
            .map(|v| check_input_value(&input.name, input.ty, v))
    })
}

/// Refuses a name the plan has no input for, then binds every input: `value_of` gives a given
/// input's value (`None`: not given, so its default).
fn bind_with<'a>(
    plan: &CompiledPlan,
    names: impl Iterator<Item = &'a str>,
    value_of: impl Fn(&crate::compile::CompiledInput) -> Option<Result<Value, InputError>>,
) -> Result<Map<String, Value>, InputError> {
    for name in names {
        if !plan.inputs.iter().any(|i| i.name == name) {
            let known = plan.inputs.iter().map(|i| i.name.as_str());
            return Err(InputError::Unknown {
                plan: plan.name.clone(),
                name: name.to_owned(),
                hint: crate::diagnostic::closest(name, known).map(str::to_owned),
                known: plan
                    .inputs
                    .iter()
                    .map(|i| format!("{}: {}", i.name, i.ty.as_str()))
                    .collect(),
            });
        }
    }
    let mut out = Map::new();
    for input in &plan.inputs {
        let value = match (value_of(input), &input.default) {
            (Some(v), _) => v?,
            (None, Some(d)) => d.clone(),
            (None, None) => {
                return Err(InputError::Missing {
                    name: input.name.clone(),
                });
            }
        };
        out.insert(input.name.clone(), value);
    }
    Ok(out)
}

fn expected_of(ty: InputType) -> &'static str {
    match ty {
        InputType::String => "a string",
        InputType::Int => "an integer",
        InputType::Bool => "`true` or `false`",
        InputType::List => "a JSON list",
        InputType::Map => "a JSON object",
        InputType::Json => "JSON",
    }
}

fn check_input_value(name: &str, ty: InputType, v: &Value) -> Result<Value, InputError> {
    let ok = match ty {
        InputType::String => v.is_string(),
        InputType::Int => v.is_i64(),
        InputType::Bool => v.is_boolean(),
        InputType::List => v.is_array(),
        InputType::Map => v.is_object(),
        InputType::Json => true,
    };
    let fail = |reason: String| InputError::Type {
        name: name.to_owned(),
        expected: expected_of(ty),
        reason,
    };
    if !ok {
        return Err(fail(format!("got {}", eval::type_name(v))));
    }
    oracle_core::canon::check(v).map_err(|e| fail(e.to_string()))?;
    Ok(v.clone())
}

fn parse_input(name: &str, ty: InputType, text: &str) -> Result<Value, InputError> {
    let fail = |reason: String| InputError::Type {
        name: name.to_owned(),
        expected: expected_of(ty),
        reason,
    };
    match ty {
        InputType::String => Ok(Value::String(text.to_owned())),
        InputType::Int => text
            .trim()
            .parse::<i64>()
            .map(Value::from)
            .map_err(|e| fail(format!("`{text}`: {e}"))),
        InputType::Bool => match text.trim() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            other => Err(fail(format!("got `{other}`"))),
        },
        InputType::List | InputType::Map | InputType::Json => {
            let v: Value = serde_json::from_str(text).map_err(|e| fail(e.to_string()))?;
            oracle_core::canon::check(&v).map_err(|e| fail(e.to_string()))?;
            let ok = match ty {
                InputType::List => v.is_array(),
                InputType::Map => v.is_object(),
                _ => true,
            };
            if ok {
                Ok(v)
            } else {
                Err(fail(format!("got {}", eval::type_name(&v))))
            }
        }
    }
}
