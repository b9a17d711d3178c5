//! Event kinds and the typed payload each kind carries.
//!
//! The log stores a payload as a canonical JSON value; this module is the one place that says
//! which shape each kind's payload must have. Verification decodes every payload against its
//! kind, so an event whose kind and payload disagree is an integrity failure, not a surprise
//! later. A new kind is added here: one `EventKind` variant, one payload struct, one arm in
//! [`Payload::decode`].

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::hash::Hash;

/// What an event records. Written in the log as its snake_case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    RunStarted,
    StepScheduled,
    CapabilityAllowed,
    CapabilityDenied,
    ToolCalled,
    ToolReturned,
    ToolFailed,
    StateChanged,
    Suspended,
    Resumed,
    RunFinished,
    Adjudicated,
    AdjudicationsExpired,
    ClaimRecorded,
    Reinstated,
    Forked,
    PlanUpgraded,
    TimerSet,
    TimerFired,
    PatchProposed,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 20] = [
        EventKind::RunStarted,
        EventKind::StepScheduled,
        EventKind::CapabilityAllowed,
        EventKind::CapabilityDenied,
        EventKind::ToolCalled,
        EventKind::ToolReturned,
        EventKind::ToolFailed,
        EventKind::StateChanged,
        EventKind::Suspended,
        EventKind::Resumed,
        EventKind::RunFinished,
        EventKind::Adjudicated,
        EventKind::AdjudicationsExpired,
        EventKind::ClaimRecorded,
        EventKind::Reinstated,
        EventKind::Forked,
        EventKind::PlanUpgraded,
        EventKind::TimerSet,
        EventKind::TimerFired,
        EventKind::PatchProposed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::RunStarted => "run_started",
            EventKind::StepScheduled => "step_scheduled",
            EventKind::CapabilityAllowed => "capability_allowed",
            EventKind::CapabilityDenied => "capability_denied",
            EventKind::ToolCalled => "tool_called",
            EventKind::ToolReturned => "tool_returned",
            EventKind::ToolFailed => "tool_failed",
            EventKind::StateChanged => "state_changed",
            EventKind::Suspended => "suspended",
            EventKind::Resumed => "resumed",
            EventKind::RunFinished => "run_finished",
            EventKind::Adjudicated => "adjudicated",
            EventKind::AdjudicationsExpired => "adjudications_expired",
            EventKind::ClaimRecorded => "claim_recorded",
            EventKind::Reinstated => "reinstated",
            EventKind::Forked => "forked",
            EventKind::PlanUpgraded => "plan_upgraded",
            EventKind::TimerSet => "timer_set",
            EventKind::TimerFired => "timer_fired",
            EventKind::PatchProposed => "patch_proposed",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event kind name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event kind `{0}`")]
pub struct UnknownKind(pub String);

impl FromStr for EventKind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

/// The first event of every run: everything that determines the rest of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunStarted {
    /// Human name of the program (plan name or agent type).
    pub program: String,
    /// Hash of the program's canonical compiled form.
    pub program_hash: Hash,
    /// Seed of every random choice in the run.
    pub seed: u64,
    /// Capabilities granted for the whole run, as written (`domain:action:scope`), sorted.
    pub grants: Vec<String>,
    /// Run inputs by name.
    pub inputs: Map<String, Value>,
    /// Formats 1 and 2 only: the belief memory's settings, recorded here before every domain
    /// recorded its own under [`RunStarted::domains`]. Opaque to the log format: the memory
    /// domain reads it (`oracle_memory::settings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Value>,
    /// The log format the run was recorded in ([`LOG_FORMAT`]); absent in format 1, whose
    /// logs link parents only inside one call (docs/FORMAT.md, "Causal links").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<u64>,
    /// Limits on the run's model calls; absent means none (and keeps the encoding of runs
    /// that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// The declared tools (`--tools DIR`, docs/TOOLS.md) the run was given, by name, each with
    /// the hash of what defines it; absent when there are none (and keeps the encoding of runs
    /// that predate them). `replay` and `resume` refuse when one changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolPin>>,
    /// Format 3: each domain's settings under the domain's name (`memory`: the belief
    /// memory's), in the shape the domain declares; absent when no domain was given any.
    /// Opaque to the log format: each domain reads and checks its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<BTreeMap<String, Value>>,
    /// Format 3: the idempotency key the run was started with (`oracle run --key`, the API's
    /// `key`): a second start with the same key, plan and inputs is this run. Absent when none
    /// was given (and keeps the encoding of runs that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The run and step that spawned this run (a plan's `spawn` step, docs/PLAN.md "Child
    /// runs"); absent for a run started from outside (and keeps the encoding of runs that
    /// predate child runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRun>,
}

/// The run a child run was spawned by, and its step: recorded in the child's first event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParentRun {
    pub run: String,
    pub step: String,
}

/// What a declared tool was when a run started: `replay` and `resume` compare the tools they
/// are given against these and refuse, naming the tool, when one differs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolPin {
    /// The tool's name (`json.field`); for an MCP server, `mcp.<server>` (it pins every tool
    /// the server listed).
    pub name: String,
    /// `exec`, `wasm` or `mcp`.
    pub kind: String,
    /// The manifest's version; for an MCP server, the version the server reported.
    pub version: String,
    /// `pure` or `impure`: what decides whether replay executes the tool again.
    pub effect: String,
    /// BLAKE3 over the manifest's bytes and what it names: the module's bytes (wasm), the
    /// program's bytes when it is a file beside the manifest, then the bytes of each file its
    /// `args` name inside the manifest's directory, then (an interpreted tool) of every other
    /// file beside its script (exec), the server's reported name, version and tool list (mcp).
    /// docs/TOOLS.md, "What a run pins".
    pub hash: Hash,
    /// The files an exec tool's `args` name inside its manifest's directory, in the order
    /// written, then the other files beside an interpreted tool's script, sorted, each with
    /// its own hash, so a refusal can name the file that changed (their bytes are in `hash`
    /// too). Absent when there are none, which keeps the encoding of every pin that predates
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<PinnedFile>>,
}

/// One file of a declared tool (named in its `args`, or beside its interpreted script), as
/// pinned in `run_started`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedFile {
    /// The argument as the manifest writes it, or a file's path relative to the manifest's
    /// directory (`/` separated).
    pub path: String,
    /// BLAKE3 (context `oracle v1 tool file`) over the file's bytes.
    pub hash: Hash,
}

/// Limits on a run's model calls (`oracle run --max-model-calls`, `--max-tokens-total`):
/// recorded because they decide which calls are made. A call past a limit fails, recorded,
/// without reaching the model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Most `llm.chat` calls (attempts included) the run may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls_max: Option<u64>,
    /// Most tokens (prompt and completion, from the recorded usage of the replies) the run may
    /// spend; checked before each call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_max: Option<u64>,
}

/// The log format the runtime records new runs in. Format 2 adds causal links between calls,
/// decisions and the run's end (docs/FORMAT.md, "Causal links"); format 3 records each
/// domain's settings under `run_started.domains` instead of the memory's under `memory`.
/// Logs of formats 1 and 2 still verify, replay and resume as they were recorded.
pub const LOG_FORMAT: u64 = 3;

impl RunStarted {
    /// The format this run's log was recorded in.
    pub fn log_format(&self) -> u64 {
        self.format.unwrap_or(1)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepScheduled {
    pub step: String,
    pub tool: String,
    pub attempt: u64,
}

impl StepScheduled {
    /// The summary of a model call of an agent step, which is one of its turns: the field is
    /// `attempt` as recorded, but a person reads "turn". Whether a step is an agent step is the
    /// plan's to say, not the event's, so callers that know the plan choose this over
    /// [`Payload::summary`].
    pub fn summary_as_turn(&self) -> String {
        format!(
            "step {} -> {} (turn {})",
            self.step, self.tool, self.attempt
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilityAllowed {
    pub step: String,
    /// The capability the call needed.
    pub capability: String,
    /// The grant that covered it.
    pub grant: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilityDenied {
    pub step: String,
    pub capability: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCalled {
    pub step: String,
    pub tool: String,
    pub tool_version: String,
    pub attempt: u64,
    pub input: Value,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolReturned {
    pub step: String,
    pub tool: String,
    pub attempt: u64,
    pub output: Value,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFailed {
    pub step: String,
    pub tool: String,
    pub attempt: u64,
    pub error: String,
    /// The tokens a model reported for a reply that was then rejected (not JSON, not matching
    /// the schema, …): the server charged them although nothing was returned. Absent for every
    /// other failure, so records written before it existed read and hash unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
}

/// Tokens a model server reported for one reply (`usage` of an OpenAI-compatible completion).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Keys written and removed. `delete` is sorted, has no duplicates and shares no key with `set`,
/// so one change has one encoding.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateChanged {
    pub set: Map<String, Value>,
    pub delete: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suspended {
    pub step: String,
    pub reason: String,
    pub attempts: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resumed {
    pub step: String,
    /// The injected answer, used as the step's output.
    pub value: Value,
    /// Who gave the answer: the name of the token it came with (`oracle serve`). Absent when
    /// not known (the command line, a belief's answer), so logs written before it keep their
    /// bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Completed,
    Failed,
    /// Stopped from outside (`oracle cancel`, the API) at a decision boundary or while it
    /// waited; never chosen by the program.
    Cancelled,
}

impl RunStatus {
    /// The status's name in the log and in every listing (`completed`, `failed`, `cancelled`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFinished {
    pub status: RunStatus,
    /// Why it failed or was cancelled; empty when it completed.
    pub reason: String,
    /// Who cancelled it (the API token's name, or `--by`); absent otherwise and when not known,
    /// so logs written before it keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// A verdict on a queued adjudication, appended by `oracle adjudicate` (never by the program).
/// `effects` is what the verdict did to the memory, in the form `oracle_memory` defines; it is
/// recorded so the projection never has to re-derive it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adjudicated {
    pub handle: String,
    /// `affirm`, `deny` or `unknown`.
    pub verdict: String,
    /// The provenance of the evidence behind the verdict (`external_first_hand`).
    pub evidence: String,
    pub note: String,
    pub effects: Value,
    /// Who gave the verdict: the name of the token it came with (`oracle serve`); absent when
    /// not known, so earlier logs keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// Queued adjudications that expired at logical time `now`, appended by `oracle sweep`, or
/// by a waker when real-time requests came due.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdjudicationsExpired {
    pub now: u64,
    /// One entry per expired handle, in the form `oracle_memory` defines.
    pub expired: Value,
    /// The wall instant (unix ms) a waker expired real-time requests at (an outside answer,
    /// never re-read on replay); absent for a sweep by ticks, so earlier logs keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired_ms: Option<u64>,
}

/// A claim from outside the plan, appended by `oracle claim` (never by the program).
/// `assertion` is the gate's decision in the form `oracle_memory` defines (the same record a
/// `memory.assert` call returns), so the projection never has to re-run the gate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRecorded {
    pub assertion: Value,
    pub note: String,
    /// Who recorded the claim: the name of the token it came with (`oracle serve`); absent
    /// when not known, so earlier logs keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// A superseded claim made live again by a verdict that names it, appended by
/// `oracle reinstate` (never by the program). `effects` is what it changed, in the form
/// `oracle_memory` defines, so the projection applies the record instead of re-deciding it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reinstated {
    /// The claim's id (64 hex characters).
    pub claim: String,
    /// The provenance of the evidence behind it (`external_first_hand`).
    pub evidence: String,
    pub note: String,
    pub effects: Value,
}

/// The first event a fork adds after the events it shares with its parent, appended by
/// `oracle fork` (never by the program): which run and head the shared prefix is, so a verifier
/// holding the parent can prove the prefix (docs/FORMAT.md, "Forks and plan versions").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Forked {
    /// The parent run's id.
    pub parent: String,
    /// The parent's event count at the fork: the fork shares its events `0..seq`.
    pub seq: u64,
    /// The hash of the parent's event `seq - 1`, the head the fork continues.
    pub head: Hash,
    /// Who forked it (`oracle fork --by`, the OS user, or the API token's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The step whose output is given from outside instead of being run again
    /// (`oracle fork --value`): its next call returns `value`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The idempotency key the fork was asked with (`oracle fork --key`): a second fork with
    /// the same key, parent, point, value and plan finds this run instead of making another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Why the fork was made when no person chose its point: `recovered` (`oracle recover`:
    /// the parent's log is damaged from event `seq` or later on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For a recovery: the BLAKE3 hash of the damaged parent log's bytes, as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged: Option<Hash>,
}

/// A plan changed under a run in flight (`oracle resume --plan`, `oracle fork --plan`), after
/// the new plan re-derived every recorded event: later events are made by plan `to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanUpgraded {
    /// The program hash the run was following.
    pub from: Hash,
    /// The program hash it follows from here on (kept as `plans/<hash>.plan`).
    pub to: Hash,
    /// The new plan's name (`plan NAME version N`).
    pub program: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// A `sleep` step's timer: when it is due, and the wall time it was set at. Both instants
/// are outside answers (the clock read once, when the step ran), recorded as integer unix
/// milliseconds; `due` is the same instant as RFC 3339 UTC text, for people and listings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerSet {
    pub step: String,
    pub due_ms: u64,
    pub due: String,
    pub set_ms: u64,
}

/// A `sleep` step's timer fired: the wall time it was woken at (an outside answer, never
/// re-read on replay). `fired_ms` before `due_ms` means it was woken early by hand
/// (`oracle resume --wake --force`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerFired {
    pub step: String,
    pub due_ms: u64,
    pub fired_ms: u64,
    pub fired: String,
}

/// A change to the run's own plan, proposed by the run (`evolve.propose`, called by a step or
/// by an agent's model): the whole proposed plan, which compiled, and what it would replace.
/// It changes nothing: the run goes on under its plan, and the proposal waits for a person's
/// check and signed approval (docs/EVOLUTION.md). Its parent is the call's `tool_returned`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchProposed {
    /// The step whose call proposed it (`STEP@TURN.K` for an agent's tool call).
    pub step: String,
    /// The proposed plan's text, as given.
    pub plan: String,
    /// The proposed plan's program hash (`oracle plan hash`).
    pub plan_hash: Hash,
    /// Its name (`plan NAME version N`).
    pub program: String,
    /// The program hash of the plan the run followed when it proposed (the base).
    pub base: Hash,
    /// Why, as the proposer wrote it.
    pub reason: String,
    /// The seq of the model's reply (`llm.chat`'s `tool_returned`) the proposal came from, when
    /// the proposing call read one: the agent turn that asked for it, or the step it read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_call: Option<u64>,
}

impl EventKind {
    /// Kinds appended from outside the program (verdicts, sweeps, outside claims): the engine
    /// takes them from the record where they stand instead of expecting the program to produce
    /// them.
    pub fn is_external(self) -> bool {
        matches!(
            self,
            EventKind::Adjudicated
                | EventKind::AdjudicationsExpired
                | EventKind::ClaimRecorded
                | EventKind::Reinstated
                | EventKind::Forked
                | EventKind::PlanUpgraded
        )
    }
}

/// A payload with its type: one variant per [`EventKind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    RunStarted(RunStarted),
    StepScheduled(StepScheduled),
    CapabilityAllowed(CapabilityAllowed),
    CapabilityDenied(CapabilityDenied),
    ToolCalled(ToolCalled),
    ToolReturned(ToolReturned),
    ToolFailed(ToolFailed),
    StateChanged(StateChanged),
    Suspended(Suspended),
    Resumed(Resumed),
    RunFinished(RunFinished),
    Adjudicated(Adjudicated),
    AdjudicationsExpired(AdjudicationsExpired),
    ClaimRecorded(ClaimRecorded),
    Reinstated(Reinstated),
    Forked(Forked),
    PlanUpgraded(PlanUpgraded),
    TimerSet(TimerSet),
    TimerFired(TimerFired),
    PatchProposed(PatchProposed),
}

/// A payload value that does not have the shape its kind requires.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("payload does not fit kind `{kind}`: {reason}")]
pub struct PayloadError {
    pub kind: EventKind,
    pub reason: String,
}

fn decode_as<T: DeserializeOwned>(kind: EventKind, value: &Value) -> Result<T, PayloadError> {
    T::deserialize(value).map_err(|e| PayloadError {
        kind,
        reason: e.to_string(),
    })
}

impl Payload {
    pub fn kind(&self) -> EventKind {
        match self {
            Payload::RunStarted(_) => EventKind::RunStarted,
            Payload::StepScheduled(_) => EventKind::StepScheduled,
            Payload::CapabilityAllowed(_) => EventKind::CapabilityAllowed,
            Payload::CapabilityDenied(_) => EventKind::CapabilityDenied,
            Payload::ToolCalled(_) => EventKind::ToolCalled,
            Payload::ToolReturned(_) => EventKind::ToolReturned,
            Payload::ToolFailed(_) => EventKind::ToolFailed,
            Payload::StateChanged(_) => EventKind::StateChanged,
            Payload::Suspended(_) => EventKind::Suspended,
            Payload::Resumed(_) => EventKind::Resumed,
            Payload::RunFinished(_) => EventKind::RunFinished,
            Payload::Adjudicated(_) => EventKind::Adjudicated,
            Payload::AdjudicationsExpired(_) => EventKind::AdjudicationsExpired,
            Payload::ClaimRecorded(_) => EventKind::ClaimRecorded,
            Payload::Reinstated(_) => EventKind::Reinstated,
            Payload::Forked(_) => EventKind::Forked,
            Payload::PlanUpgraded(_) => EventKind::PlanUpgraded,
            Payload::TimerSet(_) => EventKind::TimerSet,
            Payload::TimerFired(_) => EventKind::TimerFired,
            Payload::PatchProposed(_) => EventKind::PatchProposed,
        }
    }

    /// The payload as the JSON value stored in the log.
    pub fn to_value(&self) -> Value {
        let v = match self {
            Payload::RunStarted(p) => serde_json::to_value(p),
            Payload::StepScheduled(p) => serde_json::to_value(p),
            Payload::CapabilityAllowed(p) => serde_json::to_value(p),
            Payload::CapabilityDenied(p) => serde_json::to_value(p),
            Payload::ToolCalled(p) => serde_json::to_value(p),
            Payload::ToolReturned(p) => serde_json::to_value(p),
            Payload::ToolFailed(p) => serde_json::to_value(p),
            Payload::StateChanged(p) => serde_json::to_value(p),
            Payload::Suspended(p) => serde_json::to_value(p),
            Payload::Resumed(p) => serde_json::to_value(p),
            Payload::RunFinished(p) => serde_json::to_value(p),
            Payload::Adjudicated(p) => serde_json::to_value(p),
            Payload::AdjudicationsExpired(p) => serde_json::to_value(p),
            Payload::ClaimRecorded(p) => serde_json::to_value(p),
            Payload::Reinstated(p) => serde_json::to_value(p),
            Payload::Forked(p) => serde_json::to_value(p),
            Payload::PlanUpgraded(p) => serde_json::to_value(p),
            Payload::TimerSet(p) => serde_json::to_value(p),
            Payload::TimerFired(p) => serde_json::to_value(p),
            Payload::PatchProposed(p) => serde_json::to_value(p),
        };
        // Invariant: every payload struct has string map keys and no custom serializer that can
        // fail, so conversion to a `Value` cannot fail.
        v.expect("payload structs always convert to JSON values")
    }

    /// Rules beyond the shape that keep one meaning to one encoding.
    pub fn check(&self) -> Result<(), PayloadError> {
        let kind = self.kind();
        let fail = |reason: String| Err(PayloadError { kind, reason });
        match self {
            Payload::RunStarted(p) if !p.grants.windows(2).all(|w| w[0] < w[1]) => {
                fail("grants must be sorted and unique".into())
            }
            Payload::StateChanged(p) if !p.delete.windows(2).all(|w| w[0] < w[1]) => {
                fail("`delete` must be sorted and unique".into())
            }
            Payload::StateChanged(p) => {
                match p.delete.iter().find(|k| p.set.contains_key(k.as_str())) {
                    Some(k) => fail(format!("key `{k}` is both set and deleted")),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// The payload as the JSON value stored in the log, moving its large values (tool inputs
    /// and outputs, state changes, run inputs) instead of copying them. Equal to
    /// [`Payload::to_value`] (tested).
    pub fn into_value(self) -> Value {
        fn with(rest: Value, field: &str, moved: Value) -> Value {
            match rest {
                Value::Object(mut m) => {
                    m.insert(field.to_owned(), moved);
                    Value::Object(m)
                }
                // Invariant: payload structs serialise to JSON objects.
                other => other,
            }
        }
        use std::mem::take;
        match self {
            Payload::ToolCalled(mut p) => {
                let v = take(&mut p.input);
                with(Payload::ToolCalled(p).to_value(), "input", v)
            }
            Payload::ToolReturned(mut p) => {
                let v = take(&mut p.output);
                with(Payload::ToolReturned(p).to_value(), "output", v)
            }
            Payload::Resumed(mut p) => {
                let v = take(&mut p.value);
                with(Payload::Resumed(p).to_value(), "value", v)
            }
            Payload::StateChanged(mut p) => {
                let v = Value::Object(take(&mut p.set));
                with(Payload::StateChanged(p).to_value(), "set", v)
            }
            Payload::RunStarted(mut p) => {
                let v = Value::Object(take(&mut p.inputs));
                with(Payload::RunStarted(p).to_value(), "inputs", v)
            }
            other => other.to_value(),
        }
    }

    /// Decodes and checks the payload stored for `kind`.
    pub fn decode(kind: EventKind, value: &Value) -> Result<Payload, PayloadError> {
        let payload = Payload::decode_shape(kind, value)?;
        payload.check()?;
        Ok(payload)
    }

    fn decode_shape(kind: EventKind, value: &Value) -> Result<Payload, PayloadError> {
        Ok(match kind {
            EventKind::RunStarted => Payload::RunStarted(decode_as(kind, value)?),
            EventKind::StepScheduled => Payload::StepScheduled(decode_as(kind, value)?),
            EventKind::CapabilityAllowed => Payload::CapabilityAllowed(decode_as(kind, value)?),
            EventKind::CapabilityDenied => Payload::CapabilityDenied(decode_as(kind, value)?),
            EventKind::ToolCalled => Payload::ToolCalled(decode_as(kind, value)?),
            EventKind::ToolReturned => Payload::ToolReturned(decode_as(kind, value)?),
            EventKind::ToolFailed => Payload::ToolFailed(decode_as(kind, value)?),
            EventKind::StateChanged => Payload::StateChanged(decode_as(kind, value)?),
            EventKind::Suspended => Payload::Suspended(decode_as(kind, value)?),
            EventKind::Resumed => Payload::Resumed(decode_as(kind, value)?),
            EventKind::RunFinished => Payload::RunFinished(decode_as(kind, value)?),
            EventKind::Adjudicated => Payload::Adjudicated(decode_as(kind, value)?),
            EventKind::AdjudicationsExpired => {
                Payload::AdjudicationsExpired(decode_as(kind, value)?)
            }
            EventKind::ClaimRecorded => Payload::ClaimRecorded(decode_as(kind, value)?),
            EventKind::Reinstated => Payload::Reinstated(decode_as(kind, value)?),
            EventKind::Forked => Payload::Forked(decode_as(kind, value)?),
            EventKind::PlanUpgraded => Payload::PlanUpgraded(decode_as(kind, value)?),
            EventKind::TimerSet => Payload::TimerSet(decode_as(kind, value)?),
            EventKind::TimerFired => Payload::TimerFired(decode_as(kind, value)?),
            EventKind::PatchProposed => Payload::PatchProposed(decode_as(kind, value)?),
        })
    }

    /// One line for people: what happened, without the bulk of inputs and outputs.
    pub fn summary(&self) -> String {
        self.summary_clipped(true)
    }

    /// [`Payload::summary`] with every value whole (`oracle log --full`).
    pub fn summary_full(&self) -> String {
        self.summary_clipped(false)
    }

    fn summary_clipped(&self, clipped: bool) -> String {
        let c = |s: &str, max_chars: usize| {
            if clipped {
                clip(s, max_chars)
            } else {
                s.to_owned()
            }
        };
        match self {
            Payload::RunStarted(p) => {
                let tools = p.tools.as_ref().map_or(String::new(), |t| {
                    let names: Vec<&str> = t.iter().map(|t| t.name.as_str()).collect();
                    format!(" tools [{}]", names.join(", "))
                });
                format!(
                    "program {} ({}) seed {} grants [{}] inputs {}{tools}",
                    p.program,
                    p.program_hash.short(),
                    p.seed,
                    p.grants.join(", "),
                    p.inputs.len()
                )
            }
            Payload::StepScheduled(p) => {
                format!("step {} -> {} (attempt {})", p.step, p.tool, p.attempt)
            }
            Payload::CapabilityAllowed(p) => {
                format!("step {}: {} allowed by {}", p.step, p.capability, p.grant)
            }
            Payload::CapabilityDenied(p) => {
                format!("step {}: {} DENIED: {}", p.step, p.capability, p.reason)
            }
            Payload::ToolCalled(p) => {
                format!(
                    "step {}: {}@{} input {}",
                    p.step,
                    p.tool,
                    p.tool_version,
                    c(&p.input.to_string(), 60)
                )
            }
            Payload::ToolReturned(p) => {
                format!(
                    "step {}: {} output {}",
                    p.step,
                    p.tool,
                    c(&p.output.to_string(), 60)
                )
            }
            Payload::ToolFailed(p) => {
                format!("step {}: {} failed: {}", p.step, p.tool, c(&p.error, 60))
            }
            Payload::StateChanged(p) => {
                let mut keys: Vec<String> = p.set.keys().map(|k| format!("+{k}")).collect();
                keys.extend(p.delete.iter().map(|k| format!("-{k}")));
                format!("state {}", c(&keys.join(" "), 70))
            }
            Payload::Suspended(p) => format!(
                "suspended at step {} after {} attempts: {}",
                p.step, p.attempts, p.reason
            ),
            Payload::Resumed(p) => format!(
                "resumed step {} with {}",
                p.step,
                c(&p.value.to_string(), 60)
            ),
            Payload::RunFinished(p) => match p.status {
                RunStatus::Completed => "run completed".to_owned(),
                RunStatus::Failed => format!("run failed: {}", p.reason),
                RunStatus::Cancelled => match &p.by {
                    Some(by) => format!("run cancelled by {by}: {}", p.reason),
                    None => format!("run cancelled: {}", p.reason),
                },
            },
            Payload::Adjudicated(p) => format!(
                "adjudicated {}: {} on {} evidence{}",
                p.handle,
                p.verdict,
                p.evidence,
                if p.note.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", c(&p.note, 40))
                }
            ),
            Payload::AdjudicationsExpired(p) => format!(
                "{} adjudication(s) expired at tick {}",
                p.expired.as_array().map_or(0, Vec::len),
                p.now
            ),
            Payload::ClaimRecorded(p) => {
                let a = &p.assertion;
                let claim = &a["claim"];
                format!(
                    "claim from outside: {}/{} = {} ({}){}",
                    claim["subject"].as_str().unwrap_or("?"),
                    claim["predicate"].as_str().unwrap_or("?"),
                    c(&claim["value"].to_string(), 40),
                    a["disposition"].as_str().unwrap_or("?"),
                    if p.note.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", c(&p.note, 40))
                    }
                )
            }
            Payload::Reinstated(p) => format!(
                "reinstated claim {} on {} evidence{}",
                c(&p.claim, 12),
                p.evidence,
                if p.note.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", c(&p.note, 40))
                }
            ),
            Payload::Forked(p) => format!(
                "forked from {} at event {} (head {}){}{}{}",
                p.parent,
                p.seq,
                p.head.short(),
                p.by.as_ref().map_or(String::new(), |b| format!(" by {b}")),
                match (&p.step, &p.value) {
                    (Some(s), Some(v)) => format!(", step {s} given {}", c(&v.to_string(), 40)),
                    _ => String::new(),
                },
                match (&p.reason, &p.damaged) {
                    (Some(r), Some(d)) => format!(", {r} from damaged log {}", d.short()),
                    (Some(r), None) => format!(", {r}"),
                    _ => String::new(),
                }
            ),
            Payload::PlanUpgraded(p) => format!(
                "plan upgraded to {} ({} -> {}){}",
                p.program,
                p.from.short(),
                p.to.short(),
                p.by.as_ref().map_or(String::new(), |b| format!(" by {b}"))
            ),
            Payload::TimerSet(p) => format!("step {}: timer set, due {}", p.step, p.due),
            Payload::TimerFired(p) => format!("step {}: timer fired at {}", p.step, p.fired),
            Payload::PatchProposed(p) => format!(
                "step {}: proposed plan {} ({} -> {}): {}",
                p.step,
                p.program,
                p.base.short(),
                p.plan_hash.short(),
                c(&p.reason, 60)
            ),
        }
    }
}

fn clip(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max_chars).collect();
    out.push('…');
    out
}

/// A `state_changed` payload read in place, without copying its values: what the reducer uses
/// on the replay path. Accepts exactly what [`Payload::decode`] accepts for the kind (shape and
/// [`Payload::check`] rules); `tests/properties.rs` keeps the two in step.
pub struct StateChangedRef<'a> {
    pub set: &'a Map<String, Value>,
    pub delete: Vec<&'a str>,
}

impl<'a> StateChangedRef<'a> {
    /// `None` when `value` is not a valid `state_changed` payload.
    pub fn read(value: &'a Value) -> Option<StateChangedRef<'a>> {
        let obj = value.as_object()?;
        if obj.len() != 2 {
            return None;
        }
        let set = obj.get("set")?.as_object()?;
        let list = obj.get("delete")?.as_array()?;
        let mut delete = Vec::with_capacity(list.len());
        for item in list {
            let k = item.as_str()?;
            if delete.last().is_some_and(|&last: &&str| last >= k) || set.contains_key(k) {
                return None;
            }
            delete.push(k);
        }
        Some(StateChangedRef { set, delete })
    }
}

impl crate::state::Change for StateChangedRef<'_> {
    fn set(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.set.iter().map(|(k, v)| (k.as_str(), v))
    }
    fn delete(&self) -> impl Iterator<Item = &str> {
        self.delete.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pin written before `files` existed decodes with `files` absent and encodes to the
    /// same canonical bytes, so the payload hash of every earlier `run_started` is unchanged;
    /// a pin with files keeps them.
    #[test]
    fn a_tool_pin_without_files_encodes_as_before() {
        let hash = "11".repeat(32);
        let old = json!({
            "program": "p", "program_hash": "22".repeat(32), "seed": 1, "grants": [],
            "inputs": {}, "format": 2,
            "tools": [{"name": "t", "kind": "exec", "version": "1", "effect": "pure", "hash": hash}],
        });
        let decoded = Payload::decode(EventKind::RunStarted, &old).unwrap();
        let Payload::RunStarted(r) = &decoded else {
            panic!("{decoded:?}")
        };
        assert_eq!(r.tools.as_ref().unwrap()[0].files, None);
        let canon = |v: &Value| crate::canon::encode(v).unwrap();
        assert_eq!(canon(&decoded.to_value()), canon(&old));
        let mut new = old.clone();
        new["tools"][0]["files"] = json!([{"path": "script.py", "hash": "33".repeat(32)}]);
        let decoded = Payload::decode(EventKind::RunStarted, &new).unwrap();
        assert_eq!(canon(&decoded.to_value()), canon(&new));
        new["tools"][0]["files"][0]["mode"] = json!(1);
        assert!(Payload::decode(EventKind::RunStarted, &new).is_err());
    }

    #[test]
    fn kind_names_round_trip() {
        for k in EventKind::ALL {
            assert_eq!(k.as_str().parse::<EventKind>(), Ok(k));
            assert_eq!(serde_json::to_value(k).unwrap(), json!(k.as_str()));
        }
        assert!("tool_exploded".parse::<EventKind>().is_err());
    }

    #[test]
    fn mismatched_payloads_are_refused() {
        let err = Payload::decode(EventKind::ToolReturned, &json!({"step": "a"})).unwrap_err();
        assert!(err.reason.contains("missing field"), "{err}");
        let extra = json!({"step": "a", "tool": "t", "attempt": 1, "output": 1, "x": 2});
        assert!(Payload::decode(EventKind::ToolReturned, &extra).is_err());
        let both = json!({"set": {"k": 1}, "delete": ["k"]});
        assert!(Payload::decode(EventKind::StateChanged, &both).is_err());
        let unsorted = json!({"set": {}, "delete": ["b", "a"]});
        assert!(Payload::decode(EventKind::StateChanged, &unsorted).is_err());
    }
}
