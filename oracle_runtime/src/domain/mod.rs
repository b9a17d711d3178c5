//! Domains: pure projections over recorded events, plus the tools that feed them.
//!
//! The engine loop knows no domain by name. A domain (the belief memory, the auction economy)
//! owns the tools registered with its effect ([`Effect::Domain`]): the engine records their
//! scheduling, capability checks and calls like any other, then hands each call to the domain,
//! which computes the outcome from its projection *when the outcome is recorded* (so it sees
//! every record before it) and the engine records it. Every event the engine produces or takes
//! from the record is offered to every domain ([`Domain::apply`]), so the projection is always
//! the fold of the log so far, on a run, a resume and a replay alike.
//!
//! A new domain is a module here implementing [`Domain`] and one line in [`for_run`], the one
//! registration point. What a domain must not do: touch the world except through
//! [`Site::commit`] (write-ahead) and an answer source the run was configured with, whose
//! answers are recorded in the outcome and read back from it on replay ([`Site::recorded`]).

pub mod economy;
pub mod memory;
pub mod models;

use std::any::Any;

use oracle_core::Payload;
use oracle_core::agent::Call;
use serde_json::Value;

use crate::engine::{EngineError, RunConfig};
use crate::tool::Effect;

/// What a domain's tool call came to.
// The outcome is always a `tool_returned` or `tool_failed`; the size is that of `Payload`'s
// largest variant (`run_started`), and a `Handled` lives only from the call to its record, so
// boxing it would cost an allocation per domain call for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Handled {
    /// The outcome to record (`tool_returned` or `tool_failed`).
    Outcome(Payload),
    /// The step waits (a belief not resolved yet): the run suspends with this reason, and the
    /// domain is asked again ([`Domain::resolve_wait`]) each time the run could go on.
    Wait(String),
}

/// What a wait comes to when the run could go on.
pub enum Resolved {
    /// The value the step gets (recorded as its `resumed` value).
    Answer(Value),
    /// Still waiting, for this reason.
    Waiting(String),
}

/// How a domain names a step that waits on it, for the two ways such a wait can go wrong: an
/// answer given from outside (only the domain resolves its waits), and a record that goes on
/// while the domain still waits. Static, so the engine words both without naming the domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitWords {
    /// The stable code of a refused answer (`oracle ... --json`, the API): `belief_wait`.
    pub code: &'static str,
    /// What the step waits on, a noun: `belief`.
    pub noun: &'static str,
    /// What resolves the wait, said to the person who tried to answer: `adjudicate it
    /// (`oracle adjudicate`)`.
    pub resolve: &'static str,
}

/// Where a domain call's outcome will be recorded, and what it may use there.
pub struct Site<'a> {
    /// The seq the outcome will have.
    pub seq: u64,
    /// The run's logical time.
    pub tick: u64,
    /// Whether `seq` is past the record (a new outcome) rather than recorded already (resume,
    /// replay).
    pub past_record: bool,
    /// The outcome recorded at `seq`, when it is and reads back: answers from outside the
    /// program (a scorer's score) are taken from it and never asked again.
    pub recorded: Option<Payload>,
    /// Makes everything produced so far durable before something outside the run is asked
    /// (write-ahead). `Err(EndOfRecord)` when there is no writer (a replay past its record).
    pub commit: &'a mut dyn FnMut() -> Result<(), EngineError>,
}

/// Why a domain refuses: its settings, an event it cannot fold, a call it does not admit, a
/// resume point it cannot stand for, a wait it cannot resolve. The domains are this crate's
/// own (no plugin implements [`Domain`]), so each failure is a variant. A refused admission is
/// recorded as the call's failure, so every text is worded as before this type existed.
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    /// The memory's recorded settings do not read.
    #[error(transparent)]
    Settings(#[from] oracle_memory::settings::SettingsError),
    /// A recorded event the memory's projection refuses.
    #[error(transparent)]
    Projection(#[from] oracle_memory::ProjectionError),
    /// A memory query that cannot be answered.
    #[error(transparent)]
    Memory(#[from] oracle_memory::MemoryError),
    /// A shared store's query that cannot be answered.
    #[error(transparent)]
    Shared(#[from] crate::shared::SharedError),
    /// A model call past the run's call budget.
    #[error(
        "budget reached: model_calls_max = {max} model calls per run (--max-model-calls); the model was not called"
    )]
    ModelCalls { max: u64 },
    /// A model call past the run's token budget.
    #[error(
        "budget reached: tokens_max = {max} tokens per run, {used} used (--max-tokens-total); the model was not called"
    )]
    Tokens { max: u64, used: u64 },
    /// An auction economy holds state no folded event records.
    #[error("an auction economy is open")]
    EconomyOpen,
    #[error("auction tools never wait")]
    AuctionNeverWaits,
    #[error("model calls never wait on the models domain")]
    ModelsNeverWait,
    /// A call routed to the memory domain that names none of its tools.
    #[error("`{tool}` is not a memory tool")]
    NotMemoryTool { tool: String },
}

/// A pure projection over recorded events plus the tools that feed it.
pub trait Domain: Any {
    /// The effect its tools are registered with (`Effect::Domain(name)`).
    fn effect(&self) -> Effect;

    /// Whether `payload` is one of the records the projection folds (checked for every event,
    /// so it must be cheap: a match on the kind and tool).
    fn folds(&self, payload: &Payload) -> bool;

    /// Folds event `seq` at logical time `time` (only called when [`Domain::folds`] said so).
    fn apply(&mut self, seq: u64, time: u64, payload: &Payload) -> Result<(), DomainError>;

    /// Runs one of its tool calls against the projection as it stands.
    fn call(&mut self, call: &Call, site: Site<'_>) -> Result<Handled, EngineError>;

    /// Whether a call of `tool` (any tool, not only the domain's) may be made now, before its
    /// `tool_called` is recorded: `Err` is the recorded reason it is not (a budget spent). The
    /// projection has folded every event before the call.
    fn admit(&self, tool: &str) -> Result<(), DomainError> {
        let _ = tool;
        Ok(())
    }

    /// Whether a resume point can stand for the projection as it is: `Ok(())` when folding
    /// again the events it folded ([`Domain::apply`]) rebuilds it, which is the default;
    /// `Err(why)` when it holds what no folded event records (state its calls built), and then
    /// the engine writes no resume point until it can.
    fn resumable(&self) -> Result<(), DomainError> {
        Ok(())
    }

    /// A step that waits on this domain (`input` is the call's input): resolved now?
    fn resolve_wait(&self, input: &Value, tick: u64) -> Result<Resolved, DomainError>;

    /// [`Domain::resolve_wait`] where the record may already hold the step's `resumed` value:
    /// a domain whose waits end on an answer from outside the run (a shared store) takes it
    /// from there and never asks again. The default asks [`Domain::resolve_wait`].
    fn resolve_wait_recorded(
        &self,
        input: &Value,
        tick: u64,
        recorded: Option<Value>,
    ) -> Result<Resolved, DomainError> {
        let _ = recorded;
        self.resolve_wait(input, tick)
    }

    /// How its waits are named ([`WaitWords`]). Only a domain whose calls can return
    /// [`Handled::Wait`] is ever asked; the default is for the others.
    fn wait_words(&self) -> WaitWords {
        WaitWords {
            code: "domain_wait",
            noun: "value from its domain",
            resolve: "only the domain can resolve it",
        }
    }

    /// The wall instants (unix ms, sorted) at which something the domain holds pending comes
    /// due (a real-time adjudication expiry): what a home's timer index is kept from, so a
    /// waker expires it without anyone asking. The default: none.
    fn deadlines(&self) -> Vec<u64> {
        Vec::new()
    }

    fn as_any(&self) -> &dyn Any;
}

/// How the domain a call of `tool` waits on names its waits, if a call of `tool` can wait on
/// a domain: what a resume checks an answer against before it re-derives anything.
pub fn wait_of(tool: &str) -> Option<WaitWords> {
    memory::WAITS
        .iter()
        .find(|(t, _)| *t == tool)
        .map(|(_, words)| *words)
}

/// The domains of a run, in a fixed order: the one registration point. Each reads its own
/// settings from `config.domains` (under its name) and refuses ones it cannot use.
pub fn for_run(config: &RunConfig) -> Result<Vec<Box<dyn Domain>>, DomainError> {
    Ok(vec![
        Box::new(memory::MemoryDomain::new(config)?),
        Box::new(economy::EconomyDomain::new(config)),
        Box::new(models::ModelsDomain::new(config)),
    ])
}

/// The outcome payload of a domain call: its output, or its error, whose text is recorded.
pub fn outcome<E: std::fmt::Display>(call: &Call, result: Result<Value, E>) -> Payload {
    use oracle_core::payload::{ToolFailed, ToolReturned};
    match result {
        Ok(output) => Payload::ToolReturned(ToolReturned {
            step: call.step.clone(),
            tool: call.tool.clone(),
            attempt: call.attempt,
            output,
        }),
        Err(error) => Payload::ToolFailed(ToolFailed {
            step: call.step.clone(),
            tool: call.tool.clone(),
            attempt: call.attempt,
            error: error.to_string(),
            usage: None,
        }),
    }
}
