//! The engine: drives an agent, checks capabilities, executes tools and records every step.
//!
//! One loop serves `run`, `resume` and `replay`. The engine always drives the agent from the
//! start of the run. While events are already recorded (a resumed or replayed run), every event
//! it produces is compared with the recorded one at the same seq (chain hash, which covers the
//! payload and the state hash after it) and nothing is written; impure tool outputs, capability
//! verdicts about links and human answers are taken from the record; pure tools are executed
//! again and must give the recorded output. Past the end of the record, a run or resume appends
//! to the log and a replay stops.
//!
//! Each decision is one round of logical time. Its events come in a fixed order: the agent's
//! state changes; then, for each call in the agent's order, `step_scheduled`, the capability
//! verdict and `tool_called`; then one outcome per called tool, in the same order; then one
//! `state_changed` with the round's key-value writes. Tools of a round may execute concurrently
//! (`jobs`), but the order of events does not depend on how many run at once.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use oracle_core::agent::{Action, Agent, AgentError, Call, Observation, Outcome};
use oracle_core::capability::Capability;
use oracle_core::diff::{self, Divergence};
use oracle_core::payload::{self, RunStatus, StateChanged};
use oracle_core::{Event, EventKind, Hash, Payload, Recorder, RecordingError, State, limits};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::access::{self, Verdict};
use crate::answer::AnswerError;
use crate::causes::{self, Causes};
use crate::domain::{self, Domain, Handled, Resolved, Site};
use crate::error::StoreError;
use crate::recorded::Recorded;
use crate::resume_point::{self, ResumePoint};
use crate::scorer::Scorer;
use crate::tool::{
    Access, Effect, Registered, Registry, ToolContext, ToolError, ToolOutput, needed_capability,
};
use crate::tools::evolve::PROPOSE;
use crate::tools::time::TimerKind;
use crate::writer::LogWriter;

/// Most tool calls one run may make (a bound against agents that never finish).
pub const CALLS_MAX_DEFAULT: u64 = 10_000_000;
/// Most tools executing at once.
pub const JOBS_MAX: u32 = 256;
/// How the `suspended` reason of a `sleep` step begins (`waits until <due>`): what tells a
/// front end the run is woken (`oracle resume --wake`), never answered.
pub const SLEEP_WAIT_PREFIX: &str = "waits until ";
/// Largest tool input (canonical bytes, 8 MiB). An input is built from earlier outputs, so it
/// can grow past what one event may hold; over this bound the call fails, recorded, instead of
/// the log refusing the event.
pub const INPUT_BYTES_MAX: u64 = 8 << 20;

// The plan agent builds a call's input under `oracle_plan::eval::BUILD_BYTES_MAX`, twice this
// bound, so an input past it still reaches the engine and fails by name (its doc says why).
const _: () = assert!(oracle_plan::eval::BUILD_BYTES_MAX == 2 * INPUT_BYTES_MAX);

/// Everything that determines a run besides its program.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub seed: u64,
    /// Sorted and unique.
    pub grants: Vec<Capability>,
    pub inputs: Map<String, Value>,
    /// The canonical directory relative paths are resolved against. Never recorded.
    pub root: PathBuf,
    /// The run store (the oracle home, the run's directory): no tool may touch anything inside,
    /// whatever the grants say. Never recorded; a denial for this reason is.
    pub store: Vec<PathBuf>,
    pub jobs: u32,
    pub calls_max: u64,
    /// Each domain's settings by the domain's name, recorded in `run_started` (`domains`, or
    /// the memory's under `memory` in a run of format 1 or 2). Absent: the domain's defaults.
    pub domains: BTreeMap<String, Value>,
    /// Limits on model calls (recorded in `run_started`); `None`: no limits.
    pub budget: Option<oracle_core::payload::Budget>,
    /// Scores auction winners (`auction.advance`) past the record; `None` is the built-in
    /// rubric. Never recorded itself: its answers are.
    pub scorer: Option<std::sync::Arc<dyn Scorer>>,
    /// When the drive writes resume points (`crate::resume_point`). Never recorded: the log is
    /// the same with or without them.
    pub resume_points: resume_point::Policy,
    /// The idempotency key the run was started with, recorded in `run_started` (`key`).
    pub key: Option<String>,
    /// The run and step that spawned this one, recorded in `run_started` (`parent`).
    pub parent: Option<oracle_core::payload::ParentRun>,
    /// Where the run's shared belief store is (`domains.memory.store`) and the run's id, which
    /// its publications carry. Never recorded: the store's answers are. `None`: the memory
    /// tools of a run attached to a store answer only from the record (a replay).
    pub shared: Option<crate::shared::Attach>,
    /// The run's id, under which a streamed model reply's deltas go to watchers in this
    /// process ([`crate::live`]). Never recorded; `None`: nothing is published.
    pub live: Option<String>,
}

/// How a drive ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    Finished {
        status: RunStatus,
        reason: String,
    },
    Suspended {
        step: String,
        reason: String,
        attempts: u64,
    },
    /// Replay only: the record ends here and the run had not finished (it was interrupted).
    EndOfRecord,
    /// Answer only ([`Engine::stop_after_answer`]): the answer for `step` was recorded as the
    /// `resumed` event `seq` and the drive stopped there, before the program went on; a later
    /// resume continues from it.
    Answered {
        step: String,
        seq: u64,
    },
}

/// A request from outside the program (`oracle cancel`, the API) to end a run `cancelled`:
/// recorded as its `run_finished`, with who asked and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancel {
    pub by: Option<String>,
    pub reason: String,
}

/// Asked at every decision boundary of a live drive whether to end the run cancelled there.
pub type CancelProbe<'r> = &'r mut dyn FnMut() -> Option<Cancel>;

/// What a drive did.
#[derive(Clone, Debug)]
pub struct Report {
    pub ending: Ending,
    /// Events in the log now.
    pub events: u64,
    pub head: Hash,
    pub state: State,
    /// Events that were already recorded and matched.
    pub matched: u64,
    /// Events appended by this drive.
    pub appended: u64,
    /// Tool calls executed by this drive (pure re-executions included).
    pub executed: u64,
    /// Tool outcomes taken from the record instead of executing.
    pub reused: u64,
    /// Syncs of the log this drive made (0 without a writer).
    pub syncs: u64,
    /// The resume point the drive started from (the seq of its last event), if any: events up
    /// to it were not produced again (`matched` counts the ones after it).
    pub from_point: Option<u64>,
    /// Resume points this drive wrote.
    pub points_written: u64,
    /// Why the last resume point could not be written, if one could not (the run went on:
    /// a resume point is a cache).
    pub point_error: Option<String>,
    /// The timer the run waits on when the drive ended suspended on a `sleep` step (as its
    /// `timer_set` recorded it): what a home's timer index is kept from.
    pub timer: Option<payload::TimerSet>,
    /// The wall instants (unix ms, sorted) at which something pending in the run's domains
    /// comes due however the drive ended ([`crate::domain::Domain::deadlines`]: real-time
    /// adjudication expiries): indexed by the home beside the timer.
    pub deadlines: Vec<u64>,
}

/// Why a resume point is refused ([`Engine::from_point`]); the drive then starts further back.
/// The text is reported as the point's warning, worded as before this type existed.
#[derive(Debug, thiserror::Error)]
pub enum PointRefused {
    #[error("the record given is not the log's tail after the point's event")]
    NotTail,
    #[error(transparent)]
    State(#[from] oracle_core::SnapshotError),
    #[error("its engine state does not read: {0}")]
    EngineState(serde_json::Error),
    #[error("its engine state has format {format} (expected {SAVED_FORMAT} or {SAVED_FORMAT_V1})")]
    Format { format: u64 },
    #[error(transparent)]
    Tool(#[from] crate::causes::NoTool),
    /// Hashes shortened as [`Hash::short`] writes them.
    #[error("its state hashes to {found}, the log recorded {recorded} after event {seq}")]
    StateHash {
        found: String,
        recorded: String,
        seq: u64,
    },
    #[error(transparent)]
    Recorder(#[from] oracle_core::RecordingError),
    #[error(transparent)]
    Agent(#[from] oracle_core::agent::AgentError),
    #[error("its folded events are not in order before its event (event {seq})")]
    FoldedOrder { seq: u64 },
    #[error("its folded event {seq} is damaged: {reason}")]
    FoldedDamaged {
        seq: u64,
        reason: oracle_core::verify::Reason,
    },
    #[error("event {seq}: {source}")]
    FoldedPayload {
        seq: u64,
        source: oracle_core::payload::PayloadError,
    },
    #[error("folding event {seq}: {source}")]
    Fold { seq: u64, source: Box<EngineError> },
    #[error("step `{step}` waits on domain {index}, which does not exist")]
    NoDomain { step: String, index: u64 },
}

/// Why a drive stopped without an ending.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("event {seq}: {source}")]
    Record {
        seq: u64,
        #[source]
        source: RecordingError,
    },
    #[error("event {}: the run does not reproduce its record ({})", .0.seq, .0.class.name())]
    Diverged(Box<Divergence>),
    /// The record has an event where the program produces none, or the reverse.
    #[error("event {seq}: {message}")]
    Unexpected { seq: u64, message: String },
    #[error("event {seq}: {source}")]
    Agent {
        seq: u64,
        #[source]
        source: AgentError,
    },
    /// A replay wants to record past the end of its record (it has no writer): the run was
    /// interrupted there. [`Engine::drive`] turns this into [`Ending::EndOfRecord`].
    #[error("event {seq}: the record ends here")]
    EndOfRecord { seq: u64 },
    /// An answer refused where the run waits: nothing was recorded.
    #[error(transparent)]
    Answer(#[from] crate::answer::AnswerError),
    /// A wake (`oracle resume --wake`) before the timer of `step` is due: nothing was
    /// recorded, and the run still waits (`--force` wakes it early).
    #[error("step `{step}` sleeps until {due}; it is not due yet (nothing was recorded)")]
    TimerNotDue { step: String, due: String },
    /// An answer given to a `sleep` step: a timer is woken, never answered.
    #[error(
        "step `{step}` waits on a timer (until {due}), not on an answer: wake it with --wake once it is due"
    )]
    TimerAnswered { step: String, due: String },
}

impl EngineError {
    /// The seq the error is about, if any.
    pub fn seq(&self) -> Option<u64> {
        match self {
            EngineError::Record { seq, .. }
            | EngineError::Unexpected { seq, .. }
            | EngineError::EndOfRecord { seq }
            | EngineError::Agent { seq, .. } => Some(*seq),
            EngineError::Diverged(d) => Some(d.seq),
            _ => None,
        }
    }
}

type Result<T> = std::result::Result<T, EngineError>;

/// A call that passed its checks and waits for its outcome.
struct Pending {
    call: Call,
    called: u64,
    effect: Effect,
    /// The capability the call needs, checked again by file tools when they touch the path.
    needed: Option<Capability>,
    resolved: Option<PathBuf>,
    /// Set when the capability held when recorded but does not hold now: executing the call
    /// again (after a crash) must not happen.
    denied_now: Option<String>,
    /// The errors of this tier's earlier failed executions ([`ToolContext::earlier_failures`]).
    earlier: Vec<String>,
}

enum Prep {
    /// Settled before any tool ran (denied, bad input): the outcome is recorded already.
    Done(Outcome),
    Asked(String),
    Pending(Box<Pending>),
    /// A domain's tool: run by that domain (`domains[index]`) when its outcome is recorded.
    Domain {
        index: usize,
        call: Call,
        called: u64,
    },
}

/// Which pending calls of a round have a recorded outcome (see `recorded_causes`).
enum Answered {
    All,
    /// The `tool_called` seqs that recorded outcomes answer.
    Some(std::collections::BTreeSet<u64>),
}

/// Whether anything after a call of `tool` reads its input again: a person's answer to the
/// step is shaped by it ([`crate::tool::Tool::answer_reads_input`]), or a timer's due time
/// and an answer's schema come from it (`sleep`, `human.ask`, a belief wait with a deadline:
/// [`crate::tools::time::may_set_timer`]). Only those inputs are kept (`Causes::called`): the
/// others were a copy of every step's input, held for the whole run (issue 42), and the
/// tool's name is all a later decision reads of them.
fn input_read_later(tool: &str, reg: &crate::tool::Registered) -> bool {
    reg.tool.answer_reads_input()
        || tool == oracle_plan::agent::ASK_TOOL
        || crate::tools::time::may_set_timer(tool)
}

/// The result of executing a call: the outcome payload and key-value writes.
struct Executed {
    payload: Payload,
    writes: BTreeMap<String, Value>,
}

/// Drives an agent against a record and, past its end, a log writer.
pub struct Engine<'r, A: Agent> {
    agent: A,
    registry: &'r Registry,
    config: RunConfig,
    /// What calls are checked against (grants, working directory, store), built once.
    guard: access::Guard,
    recorded: Recorded,
    /// Our own chain over the recorded part (compared event by event).
    produced: Recorder,
    writer: Option<LogWriter>,
    /// For `resume --step S --value V`.
    answer: Option<(String, Value)>,
    /// Who gave [`Engine::answer`] (recorded as `resumed.by`).
    answer_by: Option<String>,
    /// Stop right after the answer is recorded ([`Ending::Answered`]).
    stop_after_answer: bool,
    /// Outside events kept for the run, delivered where a `wait.event` step waits past the
    /// end of the record ([`Engine::with_events`]).
    events: Option<crate::events::Inbox>,
    /// `replay --plan`: the first event may differ in its program fields.
    program_may_differ: bool,
    /// Model replies (`llm.chat`'s `tool_returned`) produced by this drive past its record: a
    /// proposal names the one it came from (`patch_proposed.model_call`). Earlier ones are
    /// read from the record, so the answer never depends on where a drive started.
    model_replies: std::collections::BTreeSet<u64>,
    tick: u64,
    calls: u64,
    matched: u64,
    appended: u64,
    executed: u64,
    reused: u64,
    pool: Option<rayon::ThreadPool>,
    progress: Option<&'r mut dyn FnMut(&Progress)>,
    /// Asked whether to end the run cancelled ([`Engine::with_cancel`]).
    cancel: Option<CancelProbe<'r>>,
    /// Why a domain refused the run's settings ([`domain::for_run`]): the drive stops before
    /// its first event.
    refused_settings: Option<String>,
    /// The run's domains (`domain::for_run`): projections of every event produced or taken so
    /// far, and the tools that feed them.
    domains: Vec<Box<dyn Domain>>,
    /// Steps suspended by a domain's wait (a belief not resolved), with the domain's index and
    /// the call's input.
    waits: BTreeMap<String, (usize, Value)>,
    /// Each step's failed executions since it was last answered: the tool, its input and the
    /// recorded error. A later call of the same tool with the same input (the same tier) sees
    /// the errors ([`ToolContext::earlier_failures`]), so a model can be told what was wrong
    /// with its last reply. Rebuilt from the record on replay and resume like everything else.
    failures: BTreeMap<String, Vec<(String, Value, String)>>,
    /// What later events depend on (format 2 causal links), and each step's latest call (tool
    /// and, where read again, input): a person's answer to a suspended step is shaped by that
    /// tool ([`crate::tool::Tool::answer`]) before it is checked and recorded.
    causes: Causes,
    /// Every event a domain folded so far, in order: what a resume point rebuilds the domains
    /// from.
    folded: Vec<Event>,
    /// When to write resume points (never, unless the caller asks).
    points: resume_point::Policy,
    /// `appended` when the last resume point was written.
    point_appended: u64,
    /// Where the log ended when the last point was written, and that point's size in bytes.
    point_log_bytes: u64,
    point_bytes: u64,
    points_written: u64,
    point_error: Option<String>,
    /// Set by [`Engine::from_point`]: the resume point's seq and the observations of the
    /// decision it stopped before.
    start: Option<(u64, Vec<Observation>)>,
    /// The resume point this drive started from.
    start_seq: Option<u64>,
    /// The output a fork gave a step (`forked.step`, `forked.value`), until the step's next
    /// call takes it ([`Engine::given_output`]).
    given: Option<(String, Value)>,
    /// Fire the timer the run waits on, if it is due (`Some(false)`) or in any case
    /// (`Some(true)`, a forced wake): [`Engine::with_wake`].
    wake: Option<bool>,
    /// The timer the drive ended suspended on, if it did: [`Report::timer`].
    timer: Option<payload::TimerSet>,
}

/// Version of [`Saved`]'s layout: 2 holds the per-step bookkeeping as one row a step
/// (`crate::causes`), where 1 held four maps and `last_called` (still restored).
const SAVED_FORMAT: u64 = 2;

/// The older layout [`Saved`] still reads.
const SAVED_FORMAT_V1: u64 = 1;

/// [`Saved`] as written: the engine's own fields borrowed, with the same names.
#[derive(Serialize)]
struct SavedRef<'a> {
    format: u64,
    tick: u64,
    calls: u64,
    causes: &'a Causes,
    observations: &'a [Observation],
    waits: BTreeMap<&'a str, (u64, &'a Value)>,
    failures: &'a BTreeMap<String, Vec<(String, Value, String)>>,
    agent: &'a serde_json::value::RawValue,
    folded: &'a [Event],
}

/// The engine's derived state between two rounds: a resume point's `engine`. Together with the
/// point's key-value state and chain position it is everything the next round depends on.
/// `C` is the per-step bookkeeping as read ([`causes::Saved`], or [`causes::SavedV1`] with
/// `last_called`), then as restored ([`Causes`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Saved<C> {
    format: u64,
    tick: u64,
    calls: u64,
    causes: C,
    /// What the next decision observes.
    observations: Vec<Observation>,
    /// Steps waiting on a domain: the domain's index and the call's input.
    waits: BTreeMap<String, (u64, Value)>,
    failures: BTreeMap<String, Vec<(String, Value, String)>>,
    /// Format 1 only: each step's latest call (format 2 keeps it in `causes`).
    #[serde(default)]
    last_called: Option<LastCalled>,
    /// [`Agent::save`].
    agent: Value,
    /// Every event the domains folded, in order.
    folded: Vec<Event>,
}

/// Each step's latest call as engine format 1 held it: the tool and the input.
type LastCalled = BTreeMap<String, (String, Value)>;

impl<C> Saved<C> {
    /// The same state with its bookkeeping converted by `f`.
    fn map<D, E>(
        self,
        f: impl FnOnce(C, LastCalled) -> std::result::Result<D, E>,
    ) -> std::result::Result<Saved<D>, E> {
        Ok(Saved {
            format: self.format,
            tick: self.tick,
            calls: self.calls,
            causes: f(self.causes, self.last_called.unwrap_or_default())?,
            observations: self.observations,
            waits: self.waits,
            failures: self.failures,
            last_called: None,
            agent: self.agent,
            folded: self.folded,
        })
    }
}

/// Reads a resume point's engine state, of the current layout or the older one.
fn read_saved(text: &str) -> std::result::Result<Saved<Causes>, PointRefused> {
    let format = |format| Err(PointRefused::Format { format });
    match serde_json::from_str::<Saved<causes::Saved>>(text) {
        Ok(s) if s.format == SAVED_FORMAT && s.last_called.is_none() => {
            s.map(|c, _| Causes::try_from(c).map_err(PointRefused::Tool))
        }
        Ok(s) => format(s.format),
        // A format 1 body fails the format 2 read at its first field of the old layout.
        Err(e) => match serde_json::from_str::<Saved<causes::SavedV1>>(text) {
            Ok(s) if s.format == SAVED_FORMAT_V1 => s.map(|c, calls| Ok(Causes::from_v1(c, calls))),
            Ok(s) => format(s.format),
            Err(_) => Err(PointRefused::EngineState(e)),
        },
    }
}

/// The tool and input of `step`'s latest call as `point`'s engine state holds it (for a step
/// last called before the point's event).
pub fn point_last_call(point: &ResumePoint, step: &str) -> Option<(String, Value)> {
    let saved = read_saved(point.engine.get()).ok()?;
    let (tool, input) = saved.causes.last_call(step)?;
    Some((tool.to_owned(), input.clone()))
}

/// Where a drive is, reported after every round (for progress displays; never recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Events produced so far (matched or appended).
    pub events: u64,
    /// Events in the record being caught up with (0 for a new run).
    pub recorded: u64,
    /// Tool calls so far.
    pub calls: u64,
}

impl<'r, A: Agent> Engine<'r, A> {
    /// An engine over `recorded` (empty for a new run). `writer` is where events past the
    /// record go; `None` makes a replay, which stops at the end of the record.
    pub fn new(
        agent: A,
        registry: &'r Registry,
        config: RunConfig,
        recorded: impl Into<Recorded>,
        writer: Option<LogWriter>,
    ) -> Engine<'r, A> {
        let pool = pool_of(config.jobs.clamp(1, JOBS_MAX));
        let (domains, refused_settings) = match domain::for_run(&config) {
            Ok(d) => (d, None),
            Err(why) => (Vec::new(), Some(why.to_string())),
        };
        let points = config.resume_points;
        // Canonical paths, so a symlinked working directory or home does not look like an
        // escape (or hide the store).
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let guard = access::Guard {
            grants: config.grants.clone(),
            root: canonical(&config.root),
            store: config.store.iter().map(|p| canonical(p)).collect(),
        };
        Engine {
            agent,
            registry,
            config,
            guard,
            recorded: recorded.into(),
            produced: Recorder::new(),
            writer,
            answer: None,
            answer_by: None,
            stop_after_answer: false,
            events: None,
            program_may_differ: false,
            model_replies: std::collections::BTreeSet::new(),
            tick: 0,
            calls: 0,
            matched: 0,
            appended: 0,
            executed: 0,
            reused: 0,
            pool,
            progress: None,
            cancel: None,
            refused_settings,
            domains,
            waits: BTreeMap::new(),
            failures: BTreeMap::new(),
            causes: Causes::default(),
            folded: Vec::new(),
            points,
            point_appended: 0,
            point_log_bytes: 0,
            point_bytes: 0,
            points_written: 0,
            point_error: None,
            start: None,
            start_seq: None,
            given: None,
            wake: None,
            timer: None,
        }
    }

    /// Writes resume points as the drive appends, under `policy` (see [`crate::resume_point`]).
    /// Needs an agent that can [`Agent::save`]; otherwise nothing is written.
    pub fn with_resume_points(mut self, policy: resume_point::Policy) -> Self {
        self.points = policy;
        self
    }

    /// Starts the drive from `point` instead of the start of the run: the record given to
    /// [`Engine::new`] must be the log's tail after the point's event
    /// ([`Recorded::read_tail`] of [`ResumePoint::anchor`]). The point's key-value state is
    /// checked against the state the log recorded there, its folded events against their own
    /// hashes; what the log cannot check is checked by the drive, which produces every event
    /// of the tail again and compares it with the record. `Err` says why the point is refused
    /// (the engine is consumed; build a new one to start from elsewhere).
    pub fn from_point(self, point: &ResumePoint) -> std::result::Result<Self, PointRefused> {
        let recorded = self
            .recorded
            .anchor()
            .map(|a| a.state_after)
            .ok_or(PointRefused::NotTail)?;
        let state = point.state.restore(recorded)?;
        self.from_point_at(point, state)
    }

    /// [`Engine::from_point`] with the point's state already restored and checked
    /// ([`crate::session::open_at_point`] does, to replay the tail): `state` must hash to the
    /// `state_after` the log recorded at the point's event.
    pub fn from_point_at(
        mut self,
        point: &ResumePoint,
        state: State,
    ) -> std::result::Result<Self, PointRefused> {
        let anchor = self
            .recorded
            .anchor()
            .filter(|a| a.seq == point.seq && a.hash == point.hash)
            .copied()
            .ok_or(PointRefused::NotTail)?;
        let saved = read_saved(point.engine.get())?;
        if state.hash() != anchor.state_after {
            return Err(PointRefused::StateHash {
                found: state.hash().short(),
                recorded: anchor.state_after.short(),
                seq: anchor.seq,
            });
        }
        let head = oracle_core::Head {
            next_seq: anchor.seq + 1,
            hash: anchor.hash,
            time: anchor.time,
            state: anchor.state_after,
        };
        self.produced = Recorder::resume(head, state)?;
        self.agent.restore(&saved.agent)?;
        let mut last = None;
        for e in &saved.folded {
            let seq = e.seq;
            if seq > anchor.seq || last.is_some_and(|l| seq <= l) {
                return Err(PointRefused::FoldedOrder { seq });
            }
            last = Some(seq);
            oracle_core::verify::check_record(e)
                .map_err(|reason| PointRefused::FoldedDamaged { seq, reason })?;
            let payload = e
                .typed()
                .map_err(|source| PointRefused::FoldedPayload { seq, source })?;
            self.fold(seq, e.time, &payload)
                .map_err(|source| PointRefused::Fold {
                    seq,
                    source: Box::new(source),
                })?;
        }
        let domains = self.domains.len() as u64;
        let mut waits = BTreeMap::new();
        for (step, (index, input)) in saved.waits {
            if index >= domains {
                return Err(PointRefused::NoDomain { step, index });
            }
            waits.insert(step, (index as usize, input));
        }
        self.waits = waits;
        self.folded = saved.folded;
        self.tick = saved.tick;
        self.calls = saved.calls;
        self.causes = saved.causes;
        self.failures = saved.failures;
        self.start = Some((anchor.seq, saved.observations));
        Ok(self)
    }

    /// Whether a resume point is due: past the record, with a writer, after enough appended
    /// events (at least as many as the state has keys, so points stay a bounded share of the
    /// work).
    fn point_due(&self) -> bool {
        let every = self.points.every_events;
        every > 0
            && self.given.is_none()
            && self.points.key.is_some()
            && self.catching_up_done()
            && self.writer.as_ref().is_some_and(|w| {
                self.appended - self.point_appended >= every.max(w.state().len())
                    && w.last_offset().saturating_sub(self.point_log_bytes)
                        >= self
                            .point_bytes
                            .saturating_mul(resume_point::LOG_BYTES_PER_POINT_BYTE)
            })
    }

    /// Writes a resume point after the last event, before the round that decides on
    /// `observations`. The log is committed first, so the point names only events the log
    /// holds. A point that cannot be written is reported, never fatal.
    fn write_point(&mut self, observations: &[Observation]) -> Result<()> {
        self.point_appended = self.appended;
        // A projection a point cannot rebuild: try again after the next spacing.
        if self.domains.iter().any(|d| d.resumable().is_err()) {
            return Ok(());
        }
        let Some(agent) = self.agent.save_text() else {
            // This agent cannot be resumed from a point: stop trying.
            self.points.every_events = 0;
            return Ok(());
        };
        let Some(w) = self.writer.as_mut() else {
            return Ok(());
        };
        w.commit()?;
        let head = w.head();
        let Some(seq) = head.next_seq.checked_sub(1) else {
            return Ok(());
        };
        let waits: BTreeMap<&str, (u64, &Value)> = self
            .waits
            .iter()
            .map(|(k, (i, v))| (k.as_str(), (*i as u64, v)))
            .collect();
        let saved = SavedRef {
            format: SAVED_FORMAT,
            tick: self.tick,
            calls: self.calls,
            causes: &self.causes,
            observations,
            waits,
            failures: &self.failures,
            agent: &agent,
            folded: &self.folded,
        };
        let point = resume_point::PointRef {
            format: resume_point::RESUME_POINT_FORMAT,
            seq,
            offset: w.last_offset(),
            hash: head.hash,
            state: resume_point::StateRef {
                seq,
                state: w.state(),
            },
            engine: &saved,
        };
        self.point_log_bytes = w.last_offset();
        // `point_due` says no without a key; this keeps that true for any other caller.
        let Some(key) = self.points.key else {
            return Ok(());
        };
        match resume_point::save(w.paths(), seq, &point, &key) {
            Ok((_, bytes)) => {
                self.points_written += 1;
                self.point_bytes = bytes;
            }
            Err(e) => self.point_error = Some(e.to_string()),
        }
        Ok(())
    }

    /// The run's domain of type `T` as far as the drive got (the belief memory:
    /// `domain::<domain::memory::MemoryDomain>()`).
    pub fn domain<T: Domain>(&self) -> Option<&T> {
        self.domains
            .iter()
            .find_map(|d| d.as_any().downcast_ref::<T>())
    }

    /// Calls `f` after every round with where the drive is.
    pub fn with_progress(mut self, f: &'r mut dyn FnMut(&Progress)) -> Self {
        self.progress = Some(f);
        self
    }

    /// Asks `probe`, at every decision boundary past the end of the record (and where a
    /// suspended run waits), whether to end the run cancelled there. Never asked while the
    /// drive catches up with the record: a recorded cancel is taken from the record.
    pub fn with_cancel(mut self, probe: CancelProbe<'r>) -> Self {
        self.cancel = Some(probe);
        self
    }

    /// Supplies the answer for a suspended step (`oracle resume --step --value`).
    pub fn with_answer(mut self, step: String, value: Value) -> Self {
        self.answer = Some((step, value));
        self
    }

    /// Delivers the outside events kept beside the run in `dir`, sealed with `key`, that its
    /// log does not hold as consumed (`crate::events`) where a `wait.event` step waits on one
    /// of their names: each is recorded as the step's answer (`resumed`, `by` naming the
    /// event) the moment the run gets there. Only past the end of the record: while catching
    /// up, consumed events come from the record.
    pub fn with_events(mut self, dir: &Path, key: &crate::seal::SealKey) -> Self {
        self.events = Some(crate::events::Inbox::load(dir, Some(key)));
        self
    }

    /// The kept event for `step`, if it waits on one (a live drive only).
    fn kept_event(&mut self, step: &str) -> Option<(String, Value)> {
        self.writer.as_ref()?;
        let name = crate::events::waiting_name(
            self.causes
                .last_call(step)
                .map(|(t, i)| (t.to_owned(), i.clone())),
        )?;
        self.events.as_mut()?.take(&name)
    }

    /// Fires the timer the suspended run waits on (`oracle resume --wake`): recorded as a
    /// `timer_fired` with the wall time now, if the timer is due or `force` is set; otherwise
    /// the drive fails with [`EngineError::TimerNotDue`] and records nothing.
    pub fn with_wake(mut self, force: bool) -> Self {
        self.wake = Some(force);
        self
    }

    /// Names who gave the answer of [`Engine::with_answer`]: recorded in the `resumed` event.
    pub fn answered_by(mut self, by: Option<String>) -> Self {
        self.answer_by = by;
        self
    }

    /// Records the answer of [`Engine::with_answer`] and stops there ([`Ending::Answered`])
    /// instead of driving the program on: the answer is checked exactly as for a resume, and
    /// whoever resumes the run later continues from it (`oracle serve` answers this way and
    /// resumes in the background).
    pub fn stop_after_answer(mut self) -> Self {
        self.stop_after_answer = true;
        self
    }

    /// Lets the first event differ in `program`, `program_hash`, `grants` and `inputs` (replay
    /// against an edited plan): later events are compared on everything but chain hashes.
    pub fn allow_program_change(mut self) -> Self {
        self.program_may_differ = true;
        self
    }

    /// [`Engine::allow_program_change`] when `upgraded`: a run whose plan was upgraded in
    /// flight is re-derived by its current plan, whose first event differs in its program
    /// only (the upgrade checked the rest, `crate::fork::check_upgrade`).
    pub fn allow_program_change_if(self, upgraded: bool) -> Self {
        if upgraded {
            self.allow_program_change()
        } else {
            self
        }
    }

    pub fn into_writer(self) -> Option<LogWriter> {
        self.writer
    }

    fn next_seq(&self) -> u64 {
        match &self.writer {
            Some(w) if self.catching_up_done() => w.head().next_seq,
            _ => self.produced.head().next_seq,
        }
    }

    fn catching_up_done(&self) -> bool {
        self.produced.head().next_seq >= self.recorded.len()
    }

    /// Recorded event `seq`, parsed (only where its payload is needed).
    fn recorded_at(&self, seq: u64) -> Option<Event> {
        self.recorded.event(seq)
    }

    fn is_recorded(&self, seq: u64) -> bool {
        seq < self.recorded.len()
    }

    /// The state the agent sees.
    fn state(&self) -> &State {
        match &self.writer {
            Some(w) if self.catching_up_done() => w.state(),
            _ => self.produced.state(),
        }
    }

    /// Records a state change, split into consecutive `state_changed` events when one record
    /// could not hold it all (see [`split_state_change`]). Returns the seq of the last.
    fn emit_state_change(&mut self, parents: Vec<u64>, change: StateChanged) -> Result<u64> {
        let mut last = None;
        for part in split_state_change(change) {
            last = Some(self.emit(parents.clone(), Payload::StateChanged(part))?);
        }
        last.ok_or_else(|| EngineError::Unexpected {
            seq: self.next_seq(),
            message: "an empty state change".into(),
        })
    }

    /// The parents of the run's `run_finished` ([`Causes::finished`]). While catching up with a
    /// record made before an agent step's last turn was linked to the run's end (issue 53),
    /// whose `run_finished` holds the parents that rule gave, those: such a run still replays
    /// and resumes to its own bytes. Anything else is compared as always.
    fn finished_parents(&self) -> Vec<u64> {
        let parents = self.causes.finished();
        let seq = self.next_seq();
        if !self.is_recorded(seq) {
            return parents;
        }
        let before = self.causes.finished_before_agent_links();
        let recorded_before = self
            .recorded_at(seq)
            .is_some_and(|e| e.kind == EventKind::RunFinished && e.parents == before);
        if before != parents && recorded_before {
            return before;
        }
        parents
    }

    /// Records one event: compared with the record while there is one, appended after.
    fn emit(&mut self, parents: Vec<u64>, payload: Payload) -> Result<u64> {
        let seq = self.next_seq();
        // Only records a domain folds are kept for it (a clone of a claim, not of every event).
        let folded = self
            .domains
            .iter()
            .any(|d| d.folds(&payload))
            .then(|| payload.clone());
        let ev = if self.is_recorded(seq) {
            let ev = self
                .produced
                .record(self.tick, parents, payload)
                .map_err(|source| EngineError::Record { seq, source })?;
            let kept = folded.is_some().then(|| ev.clone());
            self.compare(seq, ev)?;
            self.matched += 1;
            kept
        } else {
            let Some(writer) = self.writer.as_mut() else {
                return Err(EngineError::EndOfRecord { seq });
            };
            let ev = writer.append(self.tick, parents, payload)?;
            self.appended += 1;
            folded.is_some().then_some(ev)
        };
        if let (Some(p), Some(ev)) = (folded, ev) {
            self.fold(seq, self.tick, &p)?;
            self.folded.push(ev);
        }
        Ok(seq)
    }

    /// Offers event `seq` to every domain that folds it.
    fn fold(&mut self, seq: u64, time: u64, payload: &Payload) -> Result<()> {
        for d in self.domains.iter_mut().filter(|d| d.folds(payload)) {
            d.apply(seq, time, payload)
                .map_err(|e| EngineError::Unexpected {
                    seq,
                    message: e.to_string(),
                })?;
        }
        Ok(())
    }

    /// Takes the recorded external events (verdicts, sweeps) that stand at the next seq: they
    /// were appended from outside while the run was at rest, so the program does not produce
    /// them; they enter the chain and the domains where they stand, and the clock moves to
    /// their time.
    /// Ends the run cancelled here if the record says it was (catching up), or, live, if the
    /// cancel probe asks for it. Checked only between rounds and where a suspended run waits,
    /// so a cancel never lands inside a round's records.
    fn cancelled_here(&mut self) -> Result<Option<Ending>> {
        let seq = self.next_seq();
        let cancel = if self.is_recorded(seq) {
            match self.recorded_at(seq).map(|e| e.typed()) {
                Some(Ok(Payload::RunFinished(f))) if f.status == RunStatus::Cancelled => Cancel {
                    by: f.by,
                    reason: f.reason,
                },
                _ => return Ok(None),
            }
        } else if self.writer.is_some() {
            match self.cancel.as_mut().and_then(|probe| probe()) {
                Some(c) => c,
                None => return Ok(None),
            }
        } else {
            return Ok(None);
        };
        self.emit(
            self.finished_parents(),
            Payload::RunFinished(payload::RunFinished {
                status: RunStatus::Cancelled,
                reason: cancel.reason.clone(),
                by: cancel.by,
            }),
        )?;
        Ok(Some(Ending::Finished {
            status: RunStatus::Cancelled,
            reason: cancel.reason,
        }))
    }

    fn absorb_external(&mut self) -> Result<()> {
        loop {
            let seq = self.next_seq();
            if !self.recorded.kind(seq).is_some_and(EventKind::is_external) {
                return Ok(());
            }
            let unexpected = |message: String| EngineError::Unexpected { seq, message };
            let ev = self
                .recorded_at(seq)
                .ok_or_else(|| unexpected("the recorded event cannot be read back".into()))?;
            let payload = ev.typed().map_err(|e| unexpected(e.to_string()))?;
            self.tick = self.tick.max(ev.time);
            let produced = self
                .produced
                .record(ev.time, ev.parents.clone(), payload.clone())
                .map_err(|source| EngineError::Record { seq, source })?;
            self.compare(seq, produced)?;
            self.matched += 1;
            if let Payload::Forked(payload::Forked {
                step: Some(step),
                value: Some(value),
                ..
            }) = &payload
            {
                self.given = Some((step.clone(), value.clone()));
            }
            if self.domains.iter().any(|d| d.folds(&payload)) {
                self.fold(seq, ev.time, &payload)?;
                self.folded.push(ev);
            }
        }
    }

    fn compare(&self, seq: u64, produced: Event) -> Result<()> {
        let unexpected = || EngineError::Unexpected {
            seq,
            message: "the recorded event cannot be read back".into(),
        };
        let same = if self.program_may_differ {
            let recorded = self.recorded_at(seq).ok_or_else(unexpected)?;
            seq == 0
                || (recorded.kind == produced.kind
                    && recorded.time == produced.time
                    && recorded.parents == produced.parents
                    && recorded.payload == produced.payload
                    && recorded.state_after == produced.state_after)
        } else {
            self.recorded.link(seq).map(|l| l.hash) == Some(produced.hash)
        };
        if same {
            return Ok(());
        }
        let recorded = self.recorded_at(seq).ok_or_else(unexpected)?;
        let last_common = seq.checked_sub(1).and_then(|s| self.recorded_at(s));
        Err(EngineError::Diverged(Box::new(diff::explain(
            seq,
            recorded,
            produced,
            last_common,
        ))))
    }

    /// Runs until the run finishes or suspends (or, for a replay, the record ends).
    pub fn drive(&mut self) -> Result<Report> {
        if let Some(why) = self.refused_settings.take() {
            return Err(EngineError::Unexpected {
                seq: 0,
                message: format!("the run's domain settings are refused: {why}"),
            });
        }
        let ending = match self.drive_inner() {
            Ok(e) => e,
            Err(EngineError::EndOfRecord { .. }) => Ending::EndOfRecord,
            Err(e) => return Err(e),
        };
        // Verdicts recorded after the run finished (or after it stopped for good).
        self.absorb_external()?;
        if let Some(w) = self.writer.as_mut() {
            w.commit()?;
        }
        let (events, head, state) = match &self.writer {
            Some(w) if self.catching_up_done() => {
                (w.head().next_seq, w.head().hash, w.state().clone())
            }
            _ => (
                self.produced.head().next_seq,
                self.produced.head().hash,
                self.produced.state().clone(),
            ),
        };
        if self.writer.is_none() && ending != Ending::EndOfRecord && events < self.recorded.len() {
            return Err(EngineError::Unexpected {
                seq: events,
                message: format!(
                    "the program ended here, but the record goes on with `{}`",
                    self.recorded.kind(events).map_or("?", |k| k.as_str())
                ),
            });
        }
        // Only a drive that ends waiting has a timer to index.
        let timer = match ending {
            Ending::Suspended { .. } => self.timer.clone(),
            _ => None,
        };
        Ok(Report {
            ending,
            events,
            head,
            state,
            matched: self.matched,
            appended: self.appended,
            executed: self.executed,
            reused: self.reused,
            syncs: self.writer.as_ref().map_or(0, LogWriter::syncs),
            from_point: self.start_seq,
            points_written: self.points_written,
            point_error: self.point_error.clone(),
            timer,
            deadlines: self.deadlines(),
        })
    }

    /// Produces the run's first event (compared with the record's, or appended).
    fn start_run(&mut self) -> Result<()> {
        let mut grants: Vec<String> = self.config.grants.iter().map(|g| g.to_string()).collect();
        grants.sort();
        grants.dedup();
        // A recorded run keeps the format it was recorded in (its links are compared too).
        let format = match self.recorded_at(0).map(|e| e.typed()) {
            None => Some(payload::LOG_FORMAT),
            Some(Ok(Payload::RunStarted(r))) => r.format,
            Some(_) => {
                return Err(EngineError::Unexpected {
                    seq: 0,
                    message: "the record does not start with `run_started`".into(),
                });
            }
        };
        self.causes.on = format.is_some_and(|f| f >= 2);
        // Format 3 records every domain's settings under `domains`; a run recorded before it
        // keeps the memory's under `memory`, so its first event is produced again byte for byte.
        let settings = &self.config.domains;
        let (memory, domains) = if format.is_some_and(|f| f >= 3) {
            (None, (!settings.is_empty()).then(|| settings.clone()))
        } else {
            (settings.get(oracle_memory::settings::DOMAIN).cloned(), None)
        };
        self.emit(
            vec![],
            Payload::RunStarted(payload::RunStarted {
                format,
                program: self.agent.program().to_owned(),
                program_hash: self.agent.program_hash(),
                seed: self.config.seed,
                grants,
                inputs: self.config.inputs.clone(),
                budget: self.config.budget.clone(),
                tools: self.registry.pins(),
                memory,
                domains,
                key: self.config.key.clone(),
                parent: self.config.parent.clone(),
            }),
        )?;
        Ok(())
    }

    fn drive_inner(&mut self) -> Result<Ending> {
        let mut observations = match self.start.take() {
            Some((seq, observations)) => {
                self.start_seq = Some(seq);
                observations
            }
            None => {
                self.start_run()?;
                Vec::new()
            }
        };
        loop {
            // A step boundary: under `Durability::Event` the last round's steps become durable
            // before the next round begins (one sync for the round's records together).
            if let Some(w) = self.writer.as_mut() {
                w.step_done()?;
            }
            let p = Progress {
                events: self.next_seq(),
                recorded: self.recorded.len(),
                calls: self.calls,
            };
            if let Some(f) = self.progress.as_mut() {
                f(&p);
            }
            self.absorb_external()?;
            if let Some(ending) = self.cancelled_here()? {
                return Ok(ending);
            }
            if self.point_due() {
                self.write_point(&observations)?;
            }
            // Times from outside are at most TIME_MAX (2^53), so a round can always follow;
            // a record that reached u64::MAX anyway stops here rather than wrapping.
            self.tick = self.tick.checked_add(1).ok_or(EngineError::Unexpected {
                seq: self.next_seq(),
                message: "logical time cannot advance past u64::MAX".into(),
            })?;
            let seq = self.next_seq();
            // Decide on the state borrowed, not cloned: a clone alive while the decision's
            // changes are recorded makes each insert copy the map nodes on its path.
            let state = match &self.writer {
                Some(w) if self.produced.head().next_seq >= self.recorded.len() => w.state(),
                _ => self.produced.state(),
            };
            let decision = self
                .agent
                .decide(state, &observations)
                .map_err(|source| EngineError::Agent { seq, source })?;
            let observed = self.causes.decision();
            for change in decision.changes {
                if !change.set.is_empty() || !change.delete.is_empty() {
                    self.emit_state_change(observed.clone(), change)?;
                }
            }
            match decision.action {
                Action::Finish { status, reason } => {
                    if status == RunStatus::Cancelled {
                        return Err(EngineError::Unexpected {
                            seq,
                            message: "the program ended the run `cancelled`, which only a cancel from outside it records".into(),
                        });
                    }
                    self.emit(
                        self.finished_parents(),
                        Payload::RunFinished(payload::RunFinished {
                            status,
                            reason: reason.clone(),
                            by: None,
                        }),
                    )?;
                    return Ok(Ending::Finished { status, reason });
                }
                Action::Suspend {
                    step,
                    reason,
                    attempts,
                } => {
                    // A `sleep` step: its timer is recorded before the suspension, and the
                    // suspension names when it is due.
                    self.timer = None;
                    let timer = match self.sleeping(&step) {
                        Some((kind, input)) => match self.set_timer(&step, kind, &input)? {
                            Some(set) => Some((kind, set, input)),
                            None => {
                                return Ok(Ending::Suspended {
                                    step,
                                    reason,
                                    attempts,
                                });
                            }
                        },
                        None => None,
                    };
                    let reason = timer_reason(reason, timer.as_ref().map(|(k, s, _)| (*k, s)));
                    let suspended = self.emit(
                        self.causes.suspended(&step),
                        Payload::Suspended(payload::Suspended {
                            step: step.clone(),
                            reason: reason.clone(),
                            attempts,
                        }),
                    )?;
                    self.absorb_external()?;
                    if let Some(ending) = self.cancelled_here()? {
                        return Ok(ending);
                    }
                    if let Some((kind, set, input)) = timer {
                        match self.fire_timer(&step, kind, &set, suspended)? {
                            Some(fired) => {
                                observations = vec![Observation {
                                    outcome: timer_outcome(kind, &set, &fired, &input),
                                    step,
                                    tool: String::new(),
                                    attempt: attempts,
                                }];
                                continue;
                            }
                            None if kind != TimerKind::Deadline => {
                                self.timer = Some(set);
                                return Ok(Ending::Suspended {
                                    step,
                                    reason,
                                    attempts,
                                });
                            }
                            // A deadline not fired: an answer may still come (below), or
                            // the run waits for either.
                            None => self.timer = Some(set),
                        }
                    }
                    let next = self.next_seq();
                    // Who answered (from the record, or the answer given now); whether the
                    // value is an answer given now.
                    let mut by = None;
                    let mut fresh = false;
                    let value = if let Some((index, input)) = self.waits.get(&step).cloned() {
                        // A domain's wait (a belief): the domain, not a person, supplies the
                        // value.
                        let words = self.domains[index].wait_words();
                        if self.answer.is_some() {
                            return Err(AnswerError::DomainWait {
                                step,
                                reason: None,
                                words,
                            }
                            .into());
                        }
                        let recorded = match self.recorded_at(next).map(|r| r.typed()) {
                            Some(Ok(Payload::Resumed(r))) if r.step == step => Some(r.value),
                            _ => None,
                        };
                        match self.domains[index].resolve_wait_recorded(&input, self.tick, recorded)
                        {
                            Ok(Resolved::Answer(v))
                                if self.is_recorded(next) || self.writer.is_some() =>
                            {
                                v
                            }
                            Ok(Resolved::Answer(_)) => {
                                // A replay whose record stops here: the run, as recorded,
                                // still waits (a resume would continue it).
                                return Ok(Ending::Suspended {
                                    step,
                                    reason,
                                    attempts,
                                });
                            }
                            Ok(Resolved::Waiting(why)) if !self.is_recorded(next) => {
                                // A wait with a deadline keeps naming it.
                                let reason = match &self.timer {
                                    Some(set) => format!("{why} (deadline {})", set.due),
                                    None => why,
                                };
                                return Ok(Ending::Suspended {
                                    step,
                                    reason,
                                    attempts,
                                });
                            }
                            Ok(Resolved::Waiting(_)) | Err(_) => {
                                return Err(EngineError::Unexpected {
                                    seq: next,
                                    message: format!(
                                        "the record goes on after step `{step}` suspended on a {noun}, but the {noun} is not resolved here",
                                        noun = words.noun
                                    ),
                                });
                            }
                        }
                    } else if let Some(rec) = self.recorded_at(next) {
                        match rec.typed() {
                            Ok(Payload::Resumed(r)) if r.step == step => {
                                by = r.by;
                                r.value
                            }
                            _ => {
                                return Err(EngineError::Unexpected {
                                    seq: next,
                                    message: format!(
                                        "the run suspends at step `{step}` here, but the record goes on with `{}`",
                                        rec.kind
                                    ),
                                });
                            }
                        }
                    } else if let Some((given, value)) = self.answer.take() {
                        if given != step {
                            return Err(AnswerError::WrongStep {
                                given,
                                waiting: step,
                            }
                            .into());
                        }
                        // Checked before anything is recorded: the answer must be what the
                        // step could have produced (its `expect`, its tool's output schema).
                        let value = self.checked_answer(&step, value)?;
                        by = self.answer_by.take();
                        fresh = true;
                        value
                    } else if let Some((event, value)) = self.kept_event(&step) {
                        by = Some(event);
                        value
                    } else if self.given.as_ref().is_some_and(|(s, _)| *s == step)
                        && self.writer.is_some()
                    {
                        // A fork's given value answers the question its step asked.
                        let (_, value) = self.given.take().ok_or(EngineError::Unexpected {
                            seq: next,
                            message: "the fork's value was taken already".into(),
                        })?;
                        self.checked_answer(&step, value)?
                    } else {
                        // Nothing to inject: the run waits (a replay of a suspended run ends
                        // here too).
                        return Ok(Ending::Suspended {
                            step,
                            reason,
                            attempts,
                        });
                    };
                    let resumed = self.emit(
                        vec![suspended],
                        Payload::Resumed(payload::Resumed {
                            step: step.clone(),
                            value: value.clone(),
                            by,
                        }),
                    )?;
                    if fresh && self.stop_after_answer {
                        return Ok(Ending::Answered { step, seq: resumed });
                    }
                    self.causes.answered(&step, resumed);
                    // An answer given from outside is acknowledged to whoever gave it: durable
                    // before the run goes on (under `Effect`, the sync of the answer).
                    if let Some(w) = self.writer.as_mut()
                        && self.produced.head().next_seq >= self.recorded.len()
                    {
                        w.commit()?;
                    }
                    self.failures.remove(&step);
                    self.waits.remove(&step);
                    observations = vec![Observation {
                        outcome: self.answered(&step, value),
                        step,
                        tool: String::new(),
                        attempt: attempts,
                    }];
                }
                Action::Call(calls) => {
                    self.calls = self.calls.saturating_add(calls.len() as u64);
                    if self.calls > self.config.calls_max {
                        let reason = format!(
                            "bound reached: calls_max = {} tool calls per run",
                            self.config.calls_max
                        );
                        self.emit(
                            self.finished_parents(),
                            Payload::RunFinished(payload::RunFinished {
                                status: RunStatus::Failed,
                                reason: reason.clone(),
                                by: None,
                            }),
                        )?;
                        return Ok(Ending::Finished {
                            status: RunStatus::Failed,
                            reason,
                        });
                    }
                    // The state the calls see: after the decision's changes, as the log
                    // shows it. A cheap clone, dropped before the state changes again.
                    let state = self.state().clone();
                    observations = self.run_calls(calls, state)?;
                }
            }
        }
    }

    /// What the answer recorded for `step` tells the program: the value, except for a child
    /// run's outcome (a `spawn` step), where a child that did not complete fails the step.
    fn answered(&self, step: &str, value: Value) -> Outcome {
        match self.causes.last_call(step) {
            Some((tool, _)) if tool == crate::tools::spawn::SPAWN_TOOL => {
                crate::tools::spawn::outcome(value)
            }
            _ => Outcome::Answered(value),
        }
    }

    /// Every domain's pending deadlines, merged and sorted ([`Report::deadlines`]).
    fn deadlines(&self) -> Vec<u64> {
        let mut due: Vec<u64> = self.domains.iter().flat_map(|d| d.deadlines()).collect();
        due.sort_unstable();
        due.dedup();
        due
    }

    /// The kind of timer `step` suspends on, if any, and its call's input: a `sleep` call,
    /// or a `human.ask` with a `deadline`.
    fn sleeping(&self, step: &str) -> Option<(TimerKind, Value)> {
        let (tool, input) = self.causes.last_call(step)?;
        crate::tools::time::timer_kind(tool, input).map(|k| (k, input.clone()))
    }

    /// Records `step`'s timer (`timer_set`): taken from the record while catching up, else
    /// set from the wall clock now (the one read of it, recorded as an answer). `None`: a
    /// replay whose record ends before the timer was set.
    fn set_timer(
        &mut self,
        step: &str,
        kind: TimerKind,
        input: &Value,
    ) -> Result<Option<payload::TimerSet>> {
        let next = self.next_seq();
        let set = if let Some(rec) = self.recorded_at(next) {
            match rec.typed() {
                Ok(Payload::TimerSet(t)) if t.step == step => t,
                _ => {
                    return Err(EngineError::Unexpected {
                        seq: next,
                        message: format!(
                            "step `{step}` sets a timer here, but the record goes on with `{}`",
                            rec.kind
                        ),
                    });
                }
            }
        } else if self.writer.is_some() {
            let now = crate::wall::now_ms();
            let seeded = (self.config.seed, step);
            let due_ms =
                crate::tools::time::timer_due_ms(kind, input, now, seeded).map_err(|e| {
                    EngineError::Unexpected {
                        seq: next,
                        message: e.to_string(),
                    }
                })?;
            payload::TimerSet {
                step: step.to_owned(),
                due_ms,
                due: crate::wall::rfc3339(due_ms),
                set_ms: now,
            }
        } else {
            return Ok(None);
        };
        self.emit(self.causes.suspended(step), Payload::TimerSet(set.clone()))?;
        Ok(Some(set))
    }

    /// Fires `step`'s timer after its `suspended` event: the recorded `timer_fired` while
    /// catching up, or (when asked to wake it) one recorded now, under the writer's lock, so
    /// a timer fires exactly once whoever wakes it. `None` while the run still waits, or
    /// (a deadline) when an answer came first: recorded, or given now.
    fn fire_timer(
        &mut self,
        step: &str,
        kind: TimerKind,
        set: &payload::TimerSet,
        suspended: u64,
    ) -> Result<Option<payload::TimerFired>> {
        let next = self.next_seq();
        let answered = self.answer.as_ref().is_some_and(|(s, _)| s == step);
        let fired = if let Some(rec) = self.recorded_at(next) {
            match rec.typed() {
                Ok(Payload::TimerFired(f)) if f.step == step => f,
                _ if kind == TimerKind::Deadline => return Ok(None),
                _ => {
                    return Err(EngineError::Unexpected {
                        seq: next,
                        message: format!(
                            "step `{step}` waits on its timer here, but the record goes on with `{}`",
                            rec.kind
                        ),
                    });
                }
            }
        } else if answered && kind == TimerKind::Deadline {
            return Ok(None);
        } else if let Some(fired) = self.backoff_waited(step, kind, set)? {
            fired
        } else if answered {
            return Err(EngineError::TimerAnswered {
                step: step.to_owned(),
                due: set.due.clone(),
            });
        } else if let Some(force) = self.wake.filter(|_| self.writer.is_some()) {
            if kind == TimerKind::Deadline && self.wait_resolved(step) {
                // A verdict recorded before the deadline fired: it wins, and the wake resumes
                // the run with the belief (recorded as `resumed` below) instead.
                self.wake = None;
                return Ok(None);
            }
            let now = crate::wall::now_ms();
            if now < set.due_ms && !force {
                return Err(EngineError::TimerNotDue {
                    step: step.to_owned(),
                    due: set.due.clone(),
                });
            }
            self.wake = None;
            payload::TimerFired {
                step: step.to_owned(),
                due_ms: set.due_ms,
                fired_ms: now,
                fired: crate::wall::rfc3339(now),
            }
        } else {
            return Ok(None);
        };
        let seq = self.emit(vec![suspended], Payload::TimerFired(fired.clone()))?;
        self.causes.answered(step, seq);
        // The wall time it fired at is an outside answer: durable before the run goes on.
        if let Some(w) = self.writer.as_mut()
            && self.produced.head().next_seq >= self.recorded.len()
        {
            w.commit()?;
        }
        self.failures.remove(step);
        self.waits.remove(step);
        Ok(Some(fired))
    }

    /// A backoff timer due within [`crate::wall::BACKOFF_IN_PROCESS_MS_MAX`], waited out in
    /// this process past the record (unless a wake forces it now): its `timer_set` and
    /// `suspended` are made durable first, so a process killed while waiting leaves a timer a
    /// wake fires. `None`: not such a wait.
    fn backoff_waited(
        &mut self,
        step: &str,
        kind: TimerKind,
        set: &payload::TimerSet,
    ) -> Result<Option<payload::TimerFired>> {
        let now = crate::wall::now_ms();
        let short = set.due_ms.saturating_sub(now) <= crate::wall::BACKOFF_IN_PROCESS_MS_MAX;
        if kind != TimerKind::Backoff || !short || self.wake == Some(true) || self.answer.is_some()
        {
            return Ok(None);
        }
        let Some(w) = self.writer.as_mut() else {
            return Ok(None);
        };
        w.commit()?;
        let fired_ms = crate::wall::wait_until(set.due_ms);
        self.wake = None;
        Ok(Some(payload::TimerFired {
            step: step.to_owned(),
            due_ms: set.due_ms,
            fired_ms,
            fired: crate::wall::rfc3339(fired_ms),
        }))
    }

    /// Whether `step` waits on a domain (a belief) that would answer it now: a verdict (or a
    /// claim) recorded since it suspended resolved the line.
    fn wait_resolved(&self, step: &str) -> bool {
        let Some((index, input)) = self.waits.get(step) else {
            return false;
        };
        self.domains.get(*index).is_some_and(|d| {
            matches!(
                d.resolve_wait_recorded(input, self.tick, None),
                Ok(Resolved::Answer(_))
            )
        })
    }

    /// Capability verdict for one call. While catching up, what the record says about links
    /// is taken as recorded (the file system may have changed since); the lexical part, which
    /// depends only on the grants, is always recomputed.
    fn verdict(
        &self,
        step: &str,
        needed: &Capability,
    ) -> (Verdict, Option<PathBuf>, Option<String>) {
        let root = &self.guard.root;
        let now = self.guard.check(needed);
        let (resolved, denied_now) = match &now {
            Verdict::Allowed { resolved, .. } => (resolved.clone(), None),
            Verdict::Denied { reason } => (None, Some(reason.clone())),
        };
        let seq = self.next_seq();
        let is_verdict = matches!(
            self.recorded.kind(seq),
            Some(EventKind::CapabilityAllowed | EventKind::CapabilityDenied)
        );
        let recorded = is_verdict
            .then(|| self.recorded_at(seq))
            .flatten()
            .and_then(|e| match e.typed() {
                Ok(Payload::CapabilityAllowed(p))
                    if p.step == step && p.capability == needed.to_string() =>
                {
                    Some(Verdict::Allowed {
                        grant: p.grant,
                        resolved: None,
                    })
                }
                Ok(Payload::CapabilityDenied(p))
                    if p.step == step && p.capability == needed.to_string() =>
                {
                    Some(Verdict::Denied { reason: p.reason })
                }
                _ => None,
            });
        let verdict = match recorded {
            Some(rec) if access::lexical(&self.config.grants, needed, root).is_ok() => rec,
            _ => now,
        };
        (verdict, resolved, denied_now)
    }

    fn run_calls(&mut self, calls: Vec<Call>, state: State) -> Result<Vec<Observation>> {
        let registry = self.registry;
        let mut preps = Vec::with_capacity(calls.len());
        let mut keys = Vec::with_capacity(calls.len());
        // For each proposal, the model reply it read (see `record_proposal`).
        let mut model_calls: Vec<Option<Option<u64>>> = Vec::with_capacity(calls.len());
        for call in calls {
            keys.push((call.step.clone(), call.tool.clone(), call.attempt));
            let reads = self.causes.scheduled(&call);
            model_calls.push(if call.tool == PROPOSE {
                self.model_reply_among(&reads)
            } else {
                Some(None)
            });
            let scheduled = self.emit(
                reads,
                Payload::StepScheduled(payload::StepScheduled {
                    step: call.step.clone(),
                    tool: call.tool.clone(),
                    attempt: call.attempt,
                }),
            )?;
            let fail = |this: &mut Self, parent: u64, error: String| -> Result<Prep> {
                let seq = this.emit(
                    vec![parent],
                    Payload::ToolFailed(payload::ToolFailed {
                        step: call.step.clone(),
                        tool: call.tool.clone(),
                        attempt: call.attempt,
                        error: error.clone(),
                        usage: None,
                    }),
                )?;
                this.causes.outcome(&call.step, seq);
                Ok(Prep::Done(Outcome::Failed(error)))
            };
            let Some(reg) = registry.get(&call.tool) else {
                let e = format!("unknown tool `{}`", call.tool);
                preps.push(fail(self, scheduled, e)?);
                continue;
            };
            let mut parent = scheduled;
            let mut resolved = None;
            let mut denied_now = None;
            let needed = match needed_capability(&reg.decl, &call.input) {
                Err(e) => {
                    preps.push(fail(self, scheduled, e.to_string())?);
                    continue;
                }
                Ok(needed) => needed,
            };
            match &needed {
                None => {}
                Some(needed) => {
                    let (verdict, r, d) = self.verdict(&call.step, needed);
                    resolved = r;
                    denied_now = d;
                    match verdict {
                        Verdict::Allowed { grant, .. } => {
                            parent = self.emit(
                                vec![scheduled],
                                Payload::CapabilityAllowed(payload::CapabilityAllowed {
                                    step: call.step.clone(),
                                    capability: needed.to_string(),
                                    grant,
                                }),
                            )?;
                        }
                        Verdict::Denied { reason } => {
                            let denied = self.emit(
                                vec![scheduled],
                                Payload::CapabilityDenied(payload::CapabilityDenied {
                                    step: call.step.clone(),
                                    capability: needed.to_string(),
                                    reason: reason.clone(),
                                }),
                            )?;
                            self.causes.outcome(&call.step, denied);
                            preps.push(Prep::Done(Outcome::Denied {
                                capability: needed.to_string(),
                                reason,
                            }));
                            continue;
                        }
                    }
                }
            }
            if let Err(e) = limits::check_value(&call.input) {
                preps.push(fail(
                    self,
                    parent,
                    format!("bound reached: the input is {e}"),
                )?);
                continue;
            }
            let input_bytes =
                oracle_core::canon::encode(&call.input).map_or(u64::MAX, |b| b.len() as u64);
            if input_bytes > INPUT_BYTES_MAX {
                let e = format!(
                    "bound reached: the input is {input_bytes} bytes, more than input_bytes_max = {INPUT_BYTES_MAX}"
                );
                preps.push(fail(self, parent, e)?);
                continue;
            }

            if let Some(why) = self.domains.iter().find_map(|d| d.admit(&call.tool).err()) {
                preps.push(fail(self, parent, why.to_string())?);
                continue;
            }
            if let Some(name) = self.registry.secrets().found_in_value(&call.input) {
                let why = format!(
                    "the input contains the value of secret `{name}`; it is not recorded (refer to it as secret(\"{name}\"))"
                );
                preps.push(fail(self, parent, why)?);
                continue;
            }
            let kept = input_read_later(&call.tool, reg).then(|| call.input.clone());
            self.causes.called(&call.step, &call.tool, kept);
            let called = self.emit(
                vec![parent],
                Payload::ToolCalled(payload::ToolCalled {
                    step: call.step.clone(),
                    tool: call.tool.clone(),
                    tool_version: reg.decl.version.clone(),
                    attempt: call.attempt,
                    input: call.input.clone(),
                }),
            )?;
            if let Err(e) = reg.input.check(&call.input) {
                let e = format!("input does not match the tool's input schema: {e}");
                preps.push(fail(self, called, e)?);
                continue;
            }
            if let Effect::Domain(name) = reg.decl.effect {
                match self
                    .domains
                    .iter()
                    .position(|d| d.effect() == reg.decl.effect)
                {
                    Some(index) => preps.push(Prep::Domain {
                        index,
                        call,
                        called,
                    }),
                    None => {
                        let e = format!("no domain `{name}` runs tool `{}`", call.tool);
                        preps.push(fail(self, called, e)?);
                    }
                }
                continue;
            }
            if reg.decl.effect == Effect::Ask {
                let cx = context(&self.config, self.tick, &call, &state, None, reg, None, &[]);
                match reg.tool.call(&call.input, &cx) {
                    Err(ToolError::Ask(question)) => {
                        self.causes.waiting(&call.step, called);
                        preps.push(Prep::Asked(question));
                    }
                    Err(e) => preps.push(fail(self, called, e.to_string())?),
                    Ok(_) => {
                        let e = "a tool that asks a person returned an output instead".to_owned();
                        preps.push(fail(self, called, e)?);
                    }
                }
                continue;
            }
            let earlier = self
                .failures
                .get(&call.step)
                .map(|f| {
                    f.iter()
                        .filter(|(tool, input, _)| *tool == call.tool && *input == call.input)
                        .map(|(_, _, error)| error.clone())
                        .collect()
                })
                .unwrap_or_default();
            preps.push(Prep::Pending(Box::new(Pending {
                call,
                called,
                effect: reg.decl.effect,
                needed,
                resolved,
                denied_now,
                earlier,
            })));
        }

        // Outcomes: at most one event per call still waiting (pending, domain), in
        // call order, starting at `base`. Which pending calls have a recorded outcome is found
        // by cause (the outcome's parent is the call's `tool_called`), never by position: a
        // domain call may record no outcome (a wait), and the outcomes of domain
        // calls stand between the others.
        let base = self.next_seq();
        let answered = self.recorded_causes(base, &preps);
        // A fork's given output stands for its step's call: that call is not executed.
        let mut given: Vec<Option<Payload>> = vec![None; preps.len()];
        for (i, p) in preps.iter().enumerate() {
            if let Prep::Pending(p) = p
                && let Some(out) = self.given_output(&p.call)
            {
                given[i] = Some(out?);
            }
        }
        let mut executed: Vec<Option<Executed>> = Vec::new();
        let mut work: Vec<(usize, &Pending)> = Vec::new();
        for (i, p) in preps.iter().enumerate() {
            if let Prep::Pending(p) = p
                && given[i].is_none()
            {
                let recorded = match &answered {
                    Answered::All => true,
                    Answered::Some(causes) => causes.contains(&p.called),
                };
                if !recorded || p.effect == Effect::Pure {
                    work.push((i, p));
                }
            }
        }
        executed.resize_with(preps.len(), || None);
        // Write-ahead for effects: the `tool_called` of an impure call is handed to the store
        // (and synced, under the default durability) before the call touches the world.
        if work.iter().any(|(_, p)| p.effect != Effect::Pure)
            && let Some(w) = self.writer.as_mut()
            && self.produced.head().next_seq >= self.recorded.len()
        {
            w.commit()?;
        }
        let results: Vec<(usize, Executed)> = {
            let (registry, config, guard, tick) =
                (self.registry, &self.config, &self.guard, self.tick);
            let run = |&(i, p): &(usize, &Pending)| {
                (i, execute(registry, config, guard, tick, p, &state))
            };
            match &self.pool {
                Some(pool) if work.len() > 1 => {
                    use rayon::prelude::*;
                    pool.install(|| work.par_iter().map(run).collect())
                }
                _ => work.iter().map(run).collect(),
            }
        };
        self.executed += results.len() as u64;
        for (i, e) in results {
            executed[i] = Some(e);
        }

        let mut writes: BTreeMap<String, Value> = BTreeMap::new();
        // The outcomes whose calls wrote keys: the parents of the round's state change.
        let mut writers: Vec<u64> = Vec::new();
        let mut observations = Vec::with_capacity(preps.len());
        for (i, prep) in preps.into_iter().enumerate() {
            let (step, tool, attempt) = keys[i].clone();
            let outcome = match prep {
                Prep::Done(o) => o,
                Prep::Asked(q) => Outcome::Ask(q),
                Prep::Domain {
                    index,
                    call,
                    called,
                } => {
                    self.executed += 1;
                    match self.domain_call(index, &call)? {
                        Handled::Wait(why) => {
                            self.waits
                                .insert(call.step.clone(), (index, call.input.clone()));
                            self.causes.waiting(&call.step, called);
                            Outcome::Ask(why)
                        }
                        Handled::Outcome(payload) => {
                            let outcome = outcome_of(&payload);
                            let seq = self.emit(vec![called], payload)?;
                            self.causes.outcome(&call.step, seq);
                            outcome
                        }
                    }
                }
                Prep::Pending(p) => {
                    let mut wrote = false;
                    let payload = match (given[i].take(), executed[i].take()) {
                        (Some(payload), _) => payload,
                        (None, Some(ex)) => {
                            wrote = !ex.writes.is_empty();
                            for (k, v) in ex.writes {
                                writes.insert(format!("kv/{k}"), v);
                            }
                            ex.payload
                        }
                        (None, None) => {
                            self.reused += 1;
                            self.recorded_outcome(&p.call, p.called)?
                        }
                    };
                    if let Payload::ToolFailed(f) = &payload {
                        self.failures.entry(f.step.clone()).or_default().push((
                            f.tool.clone(),
                            p.call.input.clone(),
                            f.error.clone(),
                        ));
                    }
                    let outcome = outcome_of(&payload);
                    let returned = matches!(outcome, Outcome::Returned(_));
                    let seq = self.emit(vec![p.called], payload)?;
                    self.causes.outcome(&p.call.step, seq);
                    if wrote {
                        writers.push(seq);
                    }
                    if returned && p.call.tool == oracle_plan::agent::CHAT_TOOL {
                        self.model_replies.insert(seq);
                    }
                    if let (true, Outcome::Returned(output)) = (p.call.tool == PROPOSE, &outcome) {
                        self.record_proposal(&p.call, output, seq, model_calls[i])?;
                    }
                    outcome
                }
            };
            observations.push(Observation {
                step,
                tool,
                attempt,
                outcome,
            });
        }
        // Release the shared state before changing it (see `drive_inner`).
        drop(state);
        if !writes.is_empty() {
            let set: Map<String, Value> = writes.into_iter().collect();
            let parents = self.causes.parents(writers);
            self.emit_state_change(
                parents,
                StateChanged {
                    set,
                    delete: vec![],
                },
            )?;
        }
        Ok(observations)
    }

    /// Whether event `seq` is a model's reply (`llm.chat`'s `tool_returned`): from the record
    /// when it is recorded, else from what this drive produced. `None`: recorded but not held
    /// (a drive from a resume point holds only the events after it).
    fn is_model_reply(&self, seq: u64) -> Option<bool> {
        if !self.is_recorded(seq) {
            return Some(self.model_replies.contains(&seq));
        }
        let e = self.recorded_at(seq)?;
        Some(matches!(
            e.typed(),
            Ok(Payload::ToolReturned(r)) if r.tool == oracle_plan::agent::CHAT_TOOL
        ))
    }

    /// The last model reply among a call's causes, if any; `None` when a cause is not held,
    /// and then the record's answer stands (see `record_proposal`).
    fn model_reply_among(&self, reads: &[u64]) -> Option<Option<u64>> {
        let mut found = None;
        for &s in reads {
            if self.is_model_reply(s)? {
                found = Some(s);
            }
        }
        Some(found)
    }

    /// Records `patch_proposed` after the outcome (`returned`) of an `evolve.propose` call.
    /// The base is the plan the run follows; where the record holds the event already and the
    /// program may differ (`evolve check`, `replay --plan`, a run upgraded since), the base
    /// is the recorded one: which plan proposed is history, not a decision to re-derive.
    fn record_proposal(
        &mut self,
        call: &Call,
        output: &Value,
        returned: u64,
        model_call: Option<Option<u64>>,
    ) -> Result<()> {
        let next = self.next_seq();
        let recorded = match self.recorded_at(next).map(|e| e.typed()) {
            Some(Ok(Payload::PatchProposed(p))) => Some(p),
            _ => None,
        };
        let base = match &recorded {
            Some(p) if self.program_may_differ => p.base,
            _ => self.agent.program_hash(),
        };
        let model_call = match model_call {
            Some(m) => m,
            None => recorded.and_then(|p| p.model_call),
        };
        let proposed =
            crate::tools::evolve::proposed(call, output, base, model_call).map_err(|e| {
                EngineError::Unexpected {
                    seq: next,
                    message: e.to_string(),
                }
            })?;
        self.emit(vec![returned], Payload::PatchProposed(proposed))?;
        Ok(())
    }

    /// Runs a domain's tool call against its projection as it stands, for an outcome recorded
    /// at the next seq (see `crate::domain`).
    fn domain_call(&mut self, index: usize, call: &Call) -> Result<Handled> {
        let seq = self.next_seq();
        let past_record = !self.is_recorded(seq);
        let recorded = if past_record {
            None
        } else {
            self.recorded_at(seq).and_then(|e| e.typed().ok())
        };
        let writer = &mut self.writer;
        let mut commit = || match writer.as_mut() {
            Some(w) => w.commit().map_err(EngineError::from),
            None => Err(EngineError::EndOfRecord { seq }),
        };
        let site = Site {
            seq,
            tick: self.tick,
            past_record,
            recorded,
            commit: &mut commit,
        };
        self.domains[index].call(call, site)
    }

    /// `value` as step `step`'s output given from outside (an answer, a fork's `--value`),
    /// shaped as the step's last tool would have returned it (a model's reply from a person's
    /// JSON, checked against the call's schema) and checked against what the step could have
    /// produced: its `expect` and its tools' output schemas. Nothing is recorded on refusal.
    fn checked_answer(&self, step: &str, value: Value) -> Result<Value> {
        let bad = |reason: String| {
            EngineError::from(AnswerError::Refused {
                step: step.to_owned(),
                reason,
            })
        };
        let value = match self.causes.last_call(step) {
            Some((tool, input)) => match self.registry.get(tool) {
                Some(reg) => reg
                    .tool
                    .answer(input, value)
                    .map_err(|e| bad(e.to_string()))?,
                None => value,
            },
            None => value,
        };
        if let Some(name) = self.registry.secrets().found_in_value(&value) {
            return Err(bad(format!(
                "it contains the value of secret `{name}`, which is never recorded"
            )));
        }
        let tools = self
            .agent
            .check_answer(step, &value)
            .map_err(|e| bad(e.to_string()))?;
        let regs: Vec<_> = tools.iter().filter_map(|t| self.registry.get(t)).collect();
        if !regs.is_empty() && !regs.iter().any(|r| r.output.check(&value).is_ok()) {
            let why: Vec<String> = regs
                .iter()
                .filter_map(|r| {
                    r.output
                        .check(&value)
                        .err()
                        .map(|e| format!("`{}`: {e}", r.decl.name))
                })
                .collect();
            return Err(bad(format!(
                "not an output of the step's tools ({})",
                why.join("; ")
            )));
        }
        Ok(value)
    }

    /// The output a fork gave step `call.step` (`forked.value`), taken for the step's first
    /// call after the fork instead of running it: checked like an answer, then recorded as the
    /// call's `tool_returned`, on the first drive and on every replay alike.
    fn given_output(&mut self, call: &Call) -> Option<Result<Payload>> {
        if self
            .given
            .as_ref()
            .is_none_or(|(step, _)| *step != call.step)
        {
            return None;
        }
        let (step, value) = self.given.take()?;
        Some(self.checked_answer(&step, value).map(|output| {
            Payload::ToolReturned(payload::ToolReturned {
                step,
                tool: call.tool.clone(),
                attempt: call.attempt,
                output,
            })
        }))
    }

    /// Which of the round's calls have a recorded outcome. When the record reaches past
    /// every outcome the round can have, all of them do (no event is parsed: the common case
    /// of a replay); otherwise the record ends inside the round and the recorded outcomes there
    /// are read for their causes.
    fn recorded_causes(&self, base: u64, preps: &[Prep]) -> Answered {
        // A proposal may record two events (its outcome, then `patch_proposed`): counted twice,
        // so a record that ends inside the round is read by cause, never assumed complete.
        let waiting = preps
            .iter()
            .map(|p| match p {
                Prep::Pending(p) if p.call.tool == PROPOSE => 2,
                Prep::Pending(_) | Prep::Domain { .. } => 1,
                _ => 0,
            })
            .sum::<u64>();
        if waiting == 0 || self.is_recorded(base.saturating_add(waiting - 1)) {
            return Answered::All;
        }
        let end = self.recorded.len();
        let causes = (base..end)
            .filter(|&s| {
                matches!(
                    self.recorded.kind(s),
                    Some(EventKind::ToolReturned | EventKind::ToolFailed)
                )
            })
            .filter_map(|s| self.recorded_at(s))
            .filter_map(|e| match e.parents.as_slice() {
                [cause] => Some(*cause),
                _ => None,
            })
            .collect();
        Answered::Some(causes)
    }

    /// The recorded outcome of a call that is not executed again: the event at the next seq,
    /// which must answer this call (its parent is the call's `tool_called`).
    fn recorded_outcome(&self, call: &Call, called: u64) -> Result<Payload> {
        let seq = self.next_seq();
        let unexpected = |message: String| EngineError::Unexpected { seq, message };
        let rec = self
            .recorded_at(seq)
            .ok_or_else(|| unexpected("no recorded outcome".into()))?;
        if rec.parents != [called] {
            return Err(unexpected(format!(
                "expected the outcome of step `{}` attempt {} (caused by event {called}), the record has `{}` caused by {:?}",
                call.step, call.attempt, rec.kind, rec.parents
            )));
        }
        let payload = rec.typed().map_err(|e| unexpected(e.to_string()))?;
        let (step, tool, attempt) = match &payload {
            Payload::ToolReturned(p) => (&p.step, &p.tool, p.attempt),
            Payload::ToolFailed(p) => (&p.step, &p.tool, p.attempt),
            _ => {
                return Err(unexpected(format!(
                    "expected the outcome of step `{}` attempt {}, the record has `{}`",
                    call.step, call.attempt, rec.kind
                )));
            }
        };
        if step != &call.step || tool != &call.tool || attempt != call.attempt {
            return Err(unexpected(format!(
                "expected the outcome of step `{}` ({} attempt {}), the record has step `{step}` ({tool} attempt {attempt})",
                call.step, call.tool, call.attempt
            )));
        }
        Ok(payload)
    }
}

/// The thread pool of a drive with `jobs` jobs: none for one. A pool that cannot be built (no
/// threads available) only costs concurrency.
fn pool_of(jobs: u32) -> Option<rayon::ThreadPool> {
    (jobs > 1)
        .then(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(jobs as usize)
                .build()
                .ok()
        })
        .flatten()
}

/// The reason a run suspended on a timer gives: when a `sleep` or a retry's backoff is due
/// (`waits until <due>`, the backoff's reason after it), or a deadline after the question.
fn timer_reason(reason: String, timer: Option<(TimerKind, &payload::TimerSet)>) -> String {
    match timer {
        Some((TimerKind::Sleep, set)) => format!("{SLEEP_WAIT_PREFIX}{}", set.due),
        Some((TimerKind::Backoff, set)) => format!("{SLEEP_WAIT_PREFIX}{} ({reason})", set.due),
        Some((TimerKind::Deadline, set)) => format!("{reason} (deadline {})", set.due),
        None => reason,
    }
}

/// What a fired timer tells the program: a `sleep` step's output `{due, due_ms, fired,
/// fired_ms}`; for a `human.ask` past its deadline, its `on_timeout` value as the answer, or
/// (none given) the step's failure, which its `on failure` policy then decides.
fn timer_outcome(
    kind: TimerKind,
    set: &payload::TimerSet,
    fired: &payload::TimerFired,
    input: &Value,
) -> Outcome {
    match (kind, input.get(crate::tools::time::ON_TIMEOUT_ARG)) {
        (TimerKind::Sleep | TimerKind::Backoff, _) => Outcome::Answered(serde_json::json!({
            "due": set.due,
            "due_ms": set.due_ms,
            "fired": fired.fired,
            "fired_ms": fired.fired_ms,
        })),
        (TimerKind::Deadline, Some(value)) => Outcome::Answered(value.clone()),
        (TimerKind::Deadline, None) => Outcome::Failed(format!(
            "no answer by the deadline {} (timed out at {})",
            set.due, fired.fired
        )),
    }
}

pub fn split_state_change(change: StateChanged) -> Vec<StateChanged> {
    // The payload's JSON is `{"set":{...},"delete":[...]}`: measured entry by entry, with room
    // for the punctuation around them.
    const FRAME_BYTES: u64 = 64;
    let budget = limits::PAYLOAD_JSON_BYTES_MAX - FRAME_BYTES;
    let entry_len = |k: &String, v: &Value| {
        limits::json_len(&Value::String(k.clone())) + 2 + limits::json_len(v)
    };
    let delete_len: u64 = change
        .delete
        .iter()
        .map(|k| limits::json_len(&Value::String(k.clone())) + 1)
        .sum();
    let total: u64 = change.set.iter().map(|(k, v)| entry_len(k, v)).sum::<u64>() + delete_len;
    if total <= budget {
        return vec![change];
    }
    let mut parts = Vec::new();
    let mut set = Map::new();
    let mut used = 0u64;
    for (k, v) in change.set {
        let len = entry_len(&k, &v);
        if !set.is_empty() && used + len > budget {
            parts.push(StateChanged {
                set: std::mem::take(&mut set),
                delete: vec![],
            });
            used = 0;
        }
        used += len;
        set.insert(k, v);
    }
    if !set.is_empty() && used + delete_len > budget {
        parts.push(StateChanged {
            set: std::mem::take(&mut set),
            delete: vec![],
        });
    }
    parts.push(StateChanged {
        set,
        delete: change.delete,
    });
    parts
}

/// What the agent observes of a call's outcome event.
fn outcome_of(payload: &Payload) -> Outcome {
    match payload {
        Payload::ToolReturned(r) => Outcome::Returned(r.output.clone()),
        Payload::ToolFailed(f) => Outcome::Failed(f.error.clone()),
        // Invariant: the engine makes only these two kinds of outcome for a call (`execute`,
        // `recorded_outcome`, `domain_call`).
        _ => Outcome::Failed("internal: unexpected outcome".into()),
    }
}

// Every argument is a different part of what a call may know; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
fn context<'a>(
    config: &'a RunConfig,
    tick: u64,
    call: &'a Call,
    state: &'a State,
    resolved: Option<&'a Path>,
    reg: &Registered,
    access: Option<Access<'a>>,
    earlier_failures: &'a [String],
) -> ToolContext<'a> {
    ToolContext {
        run: config.live.as_deref(),
        earlier_failures,
        step: &call.step,
        attempt: call.attempt,
        tick,
        seed: config.seed,
        state,
        root: &config.root,
        resolved,
        timeout_ms: call.timeout_ms.unwrap_or(reg.decl.timeout_ms),
        output_bytes_max: reg.decl.output_bytes_max,
        access,
    }
}

/// Calls `reg`'s tool, catching a panic. A rate-limited call waits for its turn first,
/// outside its time limit, and the wait is never recorded ([`crate::pace`]): only impure calls
/// are paced, as only they reach the world, and none runs on replay. A turn that cannot be had
/// fails the call.
fn paced_call(
    registry: &Registry,
    reg: &Registered,
    call: &Call,
    cx: &ToolContext<'_>,
) -> std::thread::Result<std::result::Result<ToolOutput, ToolError>> {
    let pacer = registry
        .pacer()
        .filter(|_| reg.decl.effect == Effect::Impure);
    let turn = match pacer.map(|p| p.turn(&call.tool, &call.input)) {
        Some(Err(e)) => return Ok(Err(ToolError::Failed(e.to_string()))),
        Some(Ok(turn)) => turn,
        None => None,
    };
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| reg.tool.call(&call.input, cx)));
    if let (Some(p), Some(turn)) = (pacer, &turn) {
        p.done(turn, tokens_used(&result));
    }
    result
}

/// The tokens a call's reply reported (its output's `usage`, or a refused reply's), for the
/// pacer's token rates; 0 when it reported none.
fn tokens_used(result: &std::thread::Result<std::result::Result<ToolOutput, ToolError>>) -> u64 {
    let count = |u: &Value, k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    match result {
        Ok(Ok(out)) => out.output.get("usage").map_or(0, |u| {
            count(u, "prompt_tokens").saturating_add(count(u, "completion_tokens"))
        }),
        Ok(Err(ToolError::Rejected { usage, .. })) => {
            usage.prompt_tokens.saturating_add(usage.completion_tokens)
        }
        _ => 0,
    }
}

/// Executes one call and checks what it returned. Never panics: a panicking tool fails its
/// call.
fn execute(
    registry: &Registry,
    config: &RunConfig,
    guard: &access::Guard,
    tick: u64,
    p: &Pending,
    state: &State,
) -> Executed {
    let call = &p.call;
    let failed_with = |error: String, usage| Executed {
        payload: Payload::ToolFailed(payload::ToolFailed {
            step: call.step.clone(),
            tool: call.tool.clone(),
            attempt: call.attempt,
            error,
            usage,
        }),
        writes: BTreeMap::new(),
    };
    let failed = |error: String| failed_with(error, None);
    if let Some(reason) = &p.denied_now {
        return failed(format!("the capability no longer holds: {reason}"));
    }
    let Some(reg) = registry.get(&call.tool) else {
        return failed(format!("unknown tool `{}`", call.tool));
    };
    let access = p.needed.as_ref().map(|needed| Access { guard, needed });
    let cx = context(
        config,
        tick,
        call,
        state,
        p.resolved.as_deref(),
        reg,
        access,
        &p.earlier,
    );
    let result = paced_call(registry, reg, call, &cx);
    let secrets = registry.secrets();
    let out = match result {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            let usage = match &e {
                ToolError::Rejected { usage, .. } => Some(*usage),
                _ => None,
            };
            let e = e.to_string();
            return match secrets.found_in(&e) {
                Some(name) => failed_with(
                    format!(
                        "the error message contains the value of secret `{name}`; it is not recorded"
                    ),
                    usage,
                ),
                None => failed_with(e, usage),
            };
        }
        Err(_) => return failed(format!("tool `{}` panicked", call.tool)),
    };
    if reg.decl.effect == Effect::Impure && !out.writes.is_empty() {
        return failed(
            "an impure tool may not write the run's keys (they could not be replayed)".into(),
        );
    }
    if let Some(name) = secrets
        .found_in_value(&out.output)
        .or_else(|| out.writes.values().find_map(|v| secrets.found_in_value(v)))
    {
        return failed(format!(
            "the output contains the value of secret `{name}`; it is not recorded"
        ));
    }
    if let Err(e) = limits::check_value(&out.output) {
        return failed(format!("bound reached: the output is {e}"));
    }
    for (key, value) in &out.writes {
        if let Err(e) = limits::check_value(value) {
            return failed(format!("bound reached: the value for key `{key}` is {e}"));
        }
    }
    match oracle_core::canon::encode(&out.output) {
        Ok(bytes) if bytes.len() as u64 > reg.decl.output_bytes_max => {
            return failed(
                ToolError::OutputTooLarge {
                    limit: reg.decl.output_bytes_max,
                }
                .to_string(),
            );
        }
        Ok(_) => {}
        Err(e) => return failed(format!("output cannot be recorded: {e}")),
    }
    if let Err(e) = reg.output.check(&out.output) {
        return failed(format!(
            "output does not match the tool's output schema: {e}"
        ));
    }
    Executed {
        payload: Payload::ToolReturned(payload::ToolReturned {
            step: call.step.clone(),
            tool: call.tool.clone(),
            attempt: call.attempt,
            output: out.output,
        }),
        writes: out.writes,
    }
}

/// The kinds that make up a finished, suspended or interrupted run, for status listings.
pub fn status_of(last: Option<&Event>) -> &'static str {
    match last.map(|e| (e.kind, e.typed())) {
        Some((EventKind::RunFinished, Ok(Payload::RunFinished(f)))) => f.status.as_str(),
        Some((EventKind::Suspended, _)) => "suspended",
        _ => "running",
    }
}
