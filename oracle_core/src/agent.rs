//! The agent contract: a pure state machine from (state, observations) to a decision.
//!
//! An agent never touches the world. The runtime shows it the run's state and what the tool
//! calls of its last decision produced; the agent answers with state changes and what to do next
//! (call tools, suspend for a person, or finish). Because a decision is a function of those
//! arguments alone, the runtime can rebuild a run from its log and ask the agent again, and get
//! the same decisions: that is what makes resume and replay by re-execution work.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hash::Hash;
use crate::payload::{RunStatus, StateChanged};
use crate::state::State;

/// Why an agent refuses an answer given from outside ([`Agent::check_answer`]): the step's
/// `expect` condition does not hold of the value. The text is what the refusal says to the
/// person answering (the CLI's error, the API's `message`), so it is worded as before.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnswerRefused {
    /// The condition evaluates to false.
    #[error("the step's `expect {expect}` is false for this value")]
    ExpectFalse { expect: String },
    /// The condition evaluates to something other than a bool (`ty` names its type).
    #[error("the step's `expect {expect}` gives {ty} for this value, not a bool")]
    ExpectNotBool { expect: String, ty: String },
    /// The condition cannot be evaluated on the value.
    #[error("the step's `expect {expect}` fails on this value: {reason}")]
    ExpectFails { expect: String, reason: String },
}

/// One tool call an agent asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    /// The step the call belongs to: names it in every event and in the agent's observations.
    pub step: String,
    pub tool: String,
    /// 1 for the first attempt of a step, counting on across retries and fallbacks.
    pub attempt: u64,
    pub input: Value,
    /// Longest the call may take, when the agent sets one (the tool's own limit otherwise).
    pub timeout_ms: Option<u64>,
    /// The steps whose results this call reads or waits for (names as in `step`). The runtime
    /// links the call's `step_scheduled` event to their latest outcomes (log format 2); an
    /// agent that leaves it empty links the call to the run's start.
    pub reads: Vec<String>,
}

/// What became of a call, as the agent sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The tool returned this output (already checked against the tool's output schema).
    Returned(Value),
    /// The tool failed, or its output broke its schema or a runtime bound.
    Failed(String),
    /// The call needed a capability no grant covers; the tool was not run.
    Denied { capability: String, reason: String },
    /// The tool needs a person: the run should suspend with this question.
    Ask(String),
    /// A person (or an external system) supplied this value through `oracle resume`.
    Answered(Value),
}

/// A call's outcome, tagged with the call it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    pub step: String,
    pub tool: String,
    pub attempt: u64,
    pub outcome: Outcome,
}

/// What to do after a decision's state changes are recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run these calls. They are independent of each other: the runtime may execute them
    /// concurrently but records their events in this order.
    Call(Vec<Call>),
    /// Wait for a value for `step` from outside (exit code 3 at the command line).
    Suspend {
        step: String,
        reason: String,
        attempts: u64,
    },
    /// The run is over.
    Finish { status: RunStatus, reason: String },
}

/// An agent's answer: state changes to record first (one `state_changed` event each, in
/// order), then an action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub changes: Vec<StateChanged>,
    pub action: Action,
}

/// Why an agent could not decide: a bug in the agent or a state it does not recognise. The run
/// fails with this message; nothing is guessed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("agent error: {0}")]
pub struct AgentError(pub String);

/// A program the runtime can run.
///
/// `decide` must be deterministic: the same sequence of states and observations gives the same
/// decisions. An agent may keep caches derived from what it has been shown (the plan agent keeps
/// counts of unfinished dependencies), because the runtime always drives a fresh agent from the
/// start of the run: a resumed or replayed run asks it every earlier decision again, checks each
/// against the log, and only then goes on.
pub trait Agent {
    /// Human name of the program (recorded in `run_started`).
    fn program(&self) -> &str;
    /// Hash of the program's canonical form (recorded in `run_started`).
    fn program_hash(&self) -> Hash;
    /// The next decision. `observations` holds the outcomes of the previous decision's calls,
    /// in call order; it is empty on the first call of a run.
    fn decide(
        &mut self,
        state: &State,
        observations: &[Observation],
    ) -> Result<Decision, AgentError>;

    /// Checks an answer given from outside (`oracle resume --step --value`) for the step the
    /// run waits on, before anything is recorded: `Err(refusal)` refuses it; `Ok(tools)` says
    /// the answer stands in for the output of one of these tools (the runtime checks it matches
    /// at least one's output schema; none listed: nothing more to check). The default accepts
    /// anything.
    fn check_answer(
        &self,
        _step: &str,
        _value: &serde_json::Value,
    ) -> Result<Vec<String>, AnswerRefused> {
        Ok(Vec::new())
    }

    /// What the agent has derived so far, between two decisions, as a value a fresh agent of
    /// the same program can [`Agent::restore`]: a resume point stores it so a long run is
    /// resumed from there instead of being asked every earlier decision again. `None` (the
    /// default) means the agent cannot save itself, and its runs are always re-derived from the
    /// start. A saved value is a cache, never recorded and never hashed into the log.
    fn save(&self) -> Option<Value> {
        None
    }

    /// [`Agent::save`] as JSON text, which a resume point embeds as it is: an agent that holds
    /// its progress compactly writes it here without building the value as a tree (issue 42).
    /// The default writes what `save` returns.
    fn save_text(&self) -> Option<Box<serde_json::value::RawValue>> {
        self.save()
            .and_then(|v| serde_json::value::to_raw_value(&v).ok())
    }

    /// Makes a fresh agent (as built for the run's program and inputs, no decision asked yet)
    /// continue from a value [`Agent::save`] returned: the next `decide` must be what it would
    /// have been. A value this agent could not have saved is refused, never half applied.
    fn restore(&mut self, saved: &Value) -> Result<(), AgentError> {
        let _ = saved;
        Err(AgentError(format!(
            "program `{}` cannot continue from a saved state",
            self.program()
        )))
    }
}
