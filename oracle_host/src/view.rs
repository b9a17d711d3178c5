//! The load layer: plain view structs built from a home directory, by the runtime's own
//! functions (run list, waiting step, memory projection, recorded plan, state rebuild, diff).
//!
//! Nothing here renders or decides what a page looks like, and nothing here writes: a view
//! only reads logs (the timeline page through the log's index, never the whole log; an index
//! found stale is rebuilt in memory and not written back). Every struct is plain data with
//! sorted contents, so the same run gives the same view, and the same page, every time.

use std::path::Path;

use oracle_core::diff::{Class, Outcome, Reader, Side, first_divergence_across_plans};
use oracle_core::{Event, EventKind, Payload};
use oracle_memory::memory::RequestState;
use oracle_memory::{Belief, Memory, Query};
use oracle_plan::graph::{self, Graph};
use oracle_runtime::StoreError;
use oracle_runtime::adjudication::{self, RunMemory};
use oracle_runtime::index::IndexedLog;
use oracle_runtime::recorded::Recorded;
use oracle_runtime::session::{self, RunDir, SessionError};
use serde_json::Value;

/// Events on one timeline page unless asked otherwise.
pub const PAGE_LIMIT_DEFAULT: u64 = 100;
/// Most events on one timeline page.
pub const PAGE_LIMIT_MAX: u64 = 1000;

/// `s` cut to at most `max` characters, with `…` and how many were left out when cut (the
/// event summaries here, and the pages' long values, shortened alike).
pub fn shorten(s: &str, max: usize) -> String {
    let total = s.chars().count();
    if total <= max {
        return s.to_owned();
    }
    let kept: String = s.chars().take(max).collect();
    format!("{kept}… ({} more characters)", total - max)
}

/// Why a view could not be built. Recorded data is never changed by trying.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{run}: there is no event {at}: the log has {events} events (0 to {last})", last = events.saturating_sub(1))]
    NoSuchEvent { run: String, at: u64, events: u64 },
    #[error("{run}: the log is empty: the run recorded nothing")]
    Empty { run: String },
    #[error("diff: log {side}: {source}")]
    Diff {
        side: &'static str,
        #[source]
        source: StoreError,
    },
}

impl ViewError {
    /// Recorded data is damaged or inconsistent (the CLI's exit 4; a server's 500).
    pub fn is_integrity(&self) -> bool {
        match self {
            ViewError::Session(e) => e.is_integrity(),
            ViewError::Store(e) | ViewError::Diff { source: e, .. } => e.is_integrity(),
            ViewError::NoSuchEvent { .. } | ViewError::Empty { .. } => false,
        }
    }

    /// No such run (a server's 404).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ViewError::Session(SessionError::NotFound { .. }) | ViewError::NoSuchEvent { .. }
        )
    }
}

pub type Result<T> = std::result::Result<T, ViewError>;

/// One row of the run list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRow {
    pub id: String,
    pub plan: String,
    /// `running`, `suspended`, `completed`, `failed` or `damaged`.
    pub status: String,
    /// For a `running` run: whether a process holds its writer lock (`live`) or not
    /// (`interrupted`); `None` when it cannot be told.
    pub live: Option<bool>,
    pub events: u64,
    /// The logical time of the last event.
    pub tick: u64,
    /// For a suspended run: the step it waits on and why.
    pub waiting: Option<WaitingOn>,
    /// For a failed run (or one that recorded nothing): why.
    pub reason: Option<String>,
}

/// The step a suspended run waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingOn {
    pub step: String,
    pub reason: String,
    pub attempts: u64,
}

/// Every run under the home, in natural order of ids (`x-2` before `x-10`). Reads only the
/// first and last events of each log.
pub fn runs(home: &Path) -> Result<Vec<RunRow>> {
    Ok(session::list(home)?.into_iter().map(RunRow::from).collect())
}

impl From<session::RunInfo> for RunRow {
    /// A run as the run list shows it.
    fn from(r: session::RunInfo) -> RunRow {
        RunRow {
            waiting: r.waiting.map(|(step, reason)| WaitingOn {
                step,
                reason,
                attempts: r.attempts,
            }),
            id: r.id,
            plan: r.program,
            status: r.status,
            live: r.live,
            events: r.events,
            tick: r.last_time,
            reason: r.reason,
        }
    }
}

/// Which events a timeline shows: `limit` events from seq `from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    pub from: u64,
    pub limit: u64,
}

impl Default for Page {
    fn default() -> Page {
        Page {
            from: 0,
            limit: PAGE_LIMIT_DEFAULT,
        }
    }
}

impl Page {
    /// The page with its limit held to 1..=[`PAGE_LIMIT_MAX`].
    pub fn clamped(self) -> Page {
        Page {
            from: self.from,
            limit: self.limit.clamp(1, PAGE_LIMIT_MAX),
        }
    }
}

/// Everything the run page shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunView {
    pub summary: Summary,
    pub timeline: Timeline,
    /// The plan's step graph, each step coloured by its status at the event shown; `None` when
    /// the plan the run keeps cannot be compiled again (`dag_problem` says why).
    pub dag: Option<Dag>,
    pub dag_problem: Option<String>,
    pub state: StateView,
    pub memory: MemoryView,
    /// The first divergence from another run, when the caller asked ([`divergence`]).
    pub divergence: Option<DivergenceView>,
    /// The run it was forked from and the runs forked from it, as their logs say.
    pub family: oracle_runtime::family::Family,
    /// The run's timers (its `sleep` steps), in the order they were set.
    pub timers: Vec<TimerRow>,
    /// Where the run's time and tokens went, step by step, when the caller measured it
    /// (`oracle_host::timeline`, which this crate does not depend on; `None` shows nothing).
    pub latency: Option<LatencyView>,
    /// The partial reply of a streamed model call in flight in this process
    /// (`oracle_runtime::live`); never recorded, gone once the call ends.
    pub streaming: Option<oracle_runtime::live::Partial>,
}

/// The run's latency view: its steps in the order they started, with wall times from the
/// times file beside its log (advisory) and tokens and costs from its recorded usage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyView {
    /// From the run's first event to its last, when both were timed.
    pub wall_ms: Option<u64>,
    pub tokens: u64,
    /// The run's cost as text (`0.000450`, `+` when a binding has no price); `None` without
    /// prices.
    pub cost: Option<String>,
    pub steps: Vec<LatencyRow>,
}

/// One step of a [`LatencyView`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyRow {
    pub step: String,
    pub attempts: u64,
    /// From the run's first event to the step's first.
    pub offset_ms: Option<u64>,
    /// From the step's first event to its last.
    pub wall_ms: Option<u64>,
    pub tokens: u64,
    pub cost: Option<String>,
}

/// One timer of a run: set by a `sleep` step (`timer_set`), fired or still pending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerRow {
    pub step: String,
    /// The event that set it.
    pub set_seq: u64,
    /// When it is due, RFC 3339 (as recorded).
    pub due: String,
    /// When it fired (the recorded `timer_fired` instant) and in which event; `None` while
    /// pending.
    pub fired: Option<(u64, String)>,
}

/// What a run is and where it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub id: String,
    pub plan: String,
    pub program_hash: String,
    /// As [`RunRow::status`].
    pub status: String,
    pub live: Option<bool>,
    pub events: u64,
    /// The logical time of the last event.
    pub tick: u64,
    /// The chain hash of the last event: what `oracle verify --head` checks.
    pub head: String,
    pub seed: u64,
    pub grants: Vec<String>,
    pub inputs: Value,
    pub waiting: Option<WaitingOn>,
    /// For a failed run: why.
    pub reason: Option<String>,
    /// The event the state, the step colours and the beliefs are shown after (the last one
    /// unless asked).
    pub at: u64,
    /// Whether `at` was asked for (rather than being the last event).
    pub at_asked: bool,
}

/// One page of the run's events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeline {
    pub page: Page,
    /// Events in the log.
    pub total: u64,
    pub events: Vec<EventRow>,
}

/// One event as the timeline shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRow {
    pub seq: u64,
    pub time: u64,
    pub kind: String,
    /// The step it belongs to, for events that name one.
    pub step: Option<String>,
    /// One line, as `oracle log` prints it.
    pub summary: String,
    pub parents: Vec<u64>,
    pub hash: String,
}

/// A step's status as the graph colours it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StepStatus {
    Done,
    Failed,
    /// Scheduled (or retrying) and not yet done.
    Running,
    /// Waiting for `oracle resume` (a question, a failure handed to a person, a belief).
    Suspended,
    /// Its `when` was false.
    Skipped,
    NotStarted,
}

impl StepStatus {
    pub const ALL: [StepStatus; 6] = [
        StepStatus::Done,
        StepStatus::Failed,
        StepStatus::Running,
        StepStatus::Suspended,
        StepStatus::Skipped,
        StepStatus::NotStarted,
    ];

    /// The word shown and used as a CSS class.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Done => "done",
            StepStatus::Failed => "failed",
            StepStatus::Running => "running",
            StepStatus::Suspended => "suspended",
            StepStatus::Skipped => "skipped",
            StepStatus::NotStarted => "not-started",
        }
    }

    /// The word as a person reads it (`not started`).
    pub fn label(self) -> &'static str {
        match self {
            StepStatus::NotStarted => "not started",
            other => other.as_str(),
        }
    }

    /// The status a plan agent's state entry (`step/<name>`) records.
    fn of_entry(entry: &Value) -> Option<StepStatus> {
        Some(match entry.get("status")?.as_str()? {
            "completed" => StepStatus::Done,
            "failed" => StepStatus::Failed,
            "waiting" => StepStatus::Suspended,
            "skipped" => StepStatus::Skipped,
            "retrying" | "running" => StepStatus::Running,
            _ => return None,
        })
    }
}

/// The plan's step graph with a status per step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dag {
    pub graph: Graph,
    /// Per step of `graph.steps` (same order): its status, and a detail (attempts, the error,
    /// why it waits) from its state entry.
    pub status: Vec<(StepStatus, Option<String>)>,
}

/// The state after event `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateView {
    pub seq: u64,
    pub time: u64,
    pub kind: String,
    pub hash: String,
    /// Keys in order, with their values.
    pub entries: Vec<(String, Value)>,
    /// The snapshot the state was rebuilt from, if one was used.
    pub from_snapshot: Option<u64>,
}

/// The belief memory as of the event shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryView {
    /// The logical tick it is shown as of (`None`: now).
    pub as_of: Option<u64>,
    pub lines: Vec<LineView>,
    /// The run's adjudication requests, in the order they were opened.
    pub requests: Vec<RequestView>,
}

/// One line (subject and predicate): its belief and every claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineView {
    pub subject: String,
    pub predicate: String,
    /// `resolved`, `contested`, `no_belief` or `timing_uncertain`.
    pub belief: String,
    /// The value believed, or the alternatives of a contested or uncertain line.
    pub values: Vec<Value>,
    /// Requests pending on the line.
    pub pending: Vec<String>,
    /// Its claims in retrieval order.
    pub claims: Vec<ClaimRow>,
}

/// One claim with its provenance and where it was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRow {
    /// The claim id (64 hex characters).
    pub id: String,
    pub value: Value,
    pub provenance: String,
    pub criticality: String,
    /// As of the tick shown.
    pub disposition: Option<String>,
    /// What the gate said when it arrived.
    pub reason: String,
    /// The event that recorded it, its tick, and the step and tool behind it (`oracle claim`
    /// for a claim from outside the plan).
    pub seq: u64,
    pub time: u64,
    pub step: String,
    pub tool: String,
    /// Its valid-time window, as `START..[END] @PCT%`.
    pub valid: Option<String>,
}

/// One adjudication request, with both claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestView {
    pub run: String,
    pub handle: String,
    /// `pending`, `resolved`, `expired`, or `expired_not_swept` (past its expiry: a verdict
    /// would be refused; `oracle sweep` makes it contested).
    pub status: String,
    pub subject: String,
    pub predicate: String,
    pub criticality: String,
    pub reason: String,
    pub expires_at: Option<u64>,
    /// The event that opened it, and the step behind that event.
    pub seq: u64,
    pub step: String,
    pub incumbent: Option<ClaimRow>,
    pub challenger: Option<ClaimRow>,
    /// How it was closed, for one that is not pending.
    pub outcome: Option<String>,
}

/// The first divergence between two runs or logs (`oracle diff`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DivergenceView {
    pub a: String,
    pub b: String,
    /// The two program hashes, when the runs follow different plans: the events are then
    /// aligned by content from event 1, as `oracle diff` aligns them.
    pub plans: Option<(String, String)>,
    pub outcome: DiffOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiffOutcome {
    Identical {
        events: u64,
    },
    /// One log is the other plus `extra` events.
    Prefix {
        shorter: String,
        common: u64,
        extra: u64,
    },
    Diverged {
        seq: u64,
        /// `inputs`, `payload`, `state` or `structure`.
        class: String,
        kind_a: String,
        kind_b: String,
        step: Option<String>,
        /// Differing fields by JSON path: (path, value in A, value in B).
        fields: Vec<(String, Option<Value>, Option<Value>)>,
        fields_omitted: u64,
    },
}

/// The run page's view of run `id` (an id, a run directory or its log), with the state, step
/// colours and beliefs after event `at` (default: the last) and one `page` of its events.
///
/// Reads and verifies the whole log once (the memory and the step colours need every claim
/// and every call), rebuilds the state from the nearest usable snapshot, and reads the
/// timeline's events by seq through the index.
pub fn run(home: &Path, id: &str, at: Option<u64>, page: Page) -> Result<RunView> {
    let found = session::find(home, id)?;
    let events = Recorded::read(&found.paths.log)?;
    let total = events.len();
    let Some(last) = total.checked_sub(1) else {
        return Err(ViewError::Empty { run: found.id });
    };
    if let Some(a) = at
        && a > last
    {
        return Err(ViewError::NoSuchEvent {
            run: found.id,
            at: a,
            events: total,
        });
    }
    let shown = at.unwrap_or(last);
    let summary = summary(&found, &events, shown, at.is_some())?;
    let rebuilt = oracle_runtime::snapshots::state_at(&found.paths, Some(shown), true)?;
    let state = StateView {
        seq: rebuilt.seq,
        time: rebuilt.event.time,
        kind: rebuilt.event.kind.as_str().to_owned(),
        hash: rebuilt.state.hash().to_hex(),
        entries: rebuilt
            .state
            .iter()
            .map(|(k, v)| (k.clone(), v.value()))
            .collect(),
        from_snapshot: rebuilt.from_snapshot,
    };
    let (dag, dag_problem) = match session::recorded_plan(&found) {
        Ok(plan) => (
            Some(dag_of(graph::of(&plan), &state.entries, &events, shown)),
            None,
        ),
        Err(e) => (None, Some(e.to_string())),
    };
    let rm = adjudication::load_from(found.clone(), &events)?;
    let as_of = at.map(|_| state.time);
    let memory = memory_view(&rm, as_of);
    let timeline = timeline(&found, page)?;
    Ok(RunView {
        summary,
        timeline,
        dag,
        dag_problem,
        state,
        memory,
        divergence: None,
        family: oracle_runtime::family::family(home, &found),
        timers: timers(&events),
        latency: None,
        streaming: oracle_runtime::live::partial(&found.id),
    })
}

/// The run's timers from its `timer_set` and `timer_fired` events (only those two kinds are
/// decoded; the rest of the log is skipped by kind). A `timer_fired` belongs to the latest
/// unfired timer of its step: a step in a loop sets one timer per pass.
pub fn timers(events: &Recorded) -> Vec<TimerRow> {
    let mut rows: Vec<TimerRow> = Vec::new();
    for seq in 0..events.len() {
        let kind = events.kind(seq);
        if !matches!(kind, Some(EventKind::TimerSet | EventKind::TimerFired)) {
            continue;
        }
        match events.event(seq).as_ref().map(Event::typed) {
            Some(Ok(Payload::TimerSet(t))) => rows.push(TimerRow {
                step: t.step,
                set_seq: seq,
                due: t.due,
                fired: None,
            }),
            Some(Ok(Payload::TimerFired(f))) => {
                if let Some(row) = rows
                    .iter_mut()
                    .rev()
                    .find(|r| r.step == f.step && r.fired.is_none())
                {
                    row.fired = Some((seq, f.fired));
                }
            }
            _ => {}
        }
    }
    rows
}

fn summary(found: &RunDir, events: &Recorded, at: u64, at_asked: bool) -> Result<Summary> {
    let no_start = || SessionError::NoStart {
        path: found.paths.log.clone(),
    };
    let started = match events.event(0).as_ref().map(Event::typed) {
        Some(Ok(Payload::RunStarted(p))) => p,
        _ => return Err(no_start().into()),
    };
    // The program's last event decides the status; verdicts and sweeps after it do not.
    let last_program = session::last_program_event(events);
    let status = oracle_runtime::engine::status_of(last_program.as_ref()).to_owned();
    let live = (status == "running")
        .then(|| oracle_runtime::writer::lock_held(&found.paths))
        .flatten();
    let reason = match last_program.as_ref().map(Event::typed) {
        Some(Ok(Payload::RunFinished(f))) if !f.reason.is_empty() => Some(f.reason),
        _ => None,
    };
    let registry = oracle_runtime::tools::builtin();
    let waiting = session::waiting(events, &registry).map(|w| WaitingOn {
        step: w.step,
        reason: w.reason,
        attempts: w.attempts,
    });
    let last = events.link(events.len().saturating_sub(1));
    Ok(Summary {
        id: found.id.clone(),
        plan: started.program,
        program_hash: started.program_hash.to_hex(),
        status,
        live,
        events: events.len(),
        tick: last.map_or(0, |l| l.time),
        head: last.map_or_else(String::new, |l| l.hash.to_hex()),
        seed: started.seed,
        grants: started.grants,
        inputs: Value::Object(started.inputs),
        waiting,
        reason,
        at,
        at_asked,
    })
}

/// One page of run `run`'s events, read by seq through the log's index (the whole log is not
/// read; an index found stale is rebuilt in memory, not written).
pub fn timeline(run: &RunDir, page: Page) -> Result<Timeline> {
    let page = page.clamped();
    let mut log = IndexedLog::open_with(&run.paths.log, false)?;
    let total = log.len();
    let end = page.from.saturating_add(page.limit).min(total);
    // The plan's agent steps (with its loop bodies' and sub-plans'), whose model calls the
    // timeline calls turns.
    let agents = std::fs::read_to_string(run.dir.join(oracle_runtime::session::PLAN_FILE))
        .map(|src| {
            let uses = run.dir.join(oracle_runtime::session::USES_DIR);
            let sources = oracle_runtime::session::plan_sources(&uses, &src);
            oracle_plan::agent_steps_with(&src, &sources)
        })
        .unwrap_or_default();
    let mut rows = Vec::new();
    for seq in page.from..end {
        let e = log.read(seq)?;
        rows.push(event_row(&e, &agents));
    }
    Ok(Timeline {
        page,
        total,
        events: rows,
    })
}

/// Characters of an event's summary kept on the timeline.
pub const SUMMARY_CHARS_MAX: usize = 300;

fn event_row(e: &Event, agents: &std::collections::BTreeSet<String>) -> EventRow {
    let summary = e
        .typed()
        .map(|p| match p {
            oracle_core::Payload::StepScheduled(s)
                if oracle_plan::is_agent_call(agents, &s.step) =>
            {
                s.summary_as_turn()
            }
            p => p.summary(),
        })
        .unwrap_or_else(|err| err.to_string());
    EventRow {
        seq: e.seq,
        time: e.time,
        kind: e.kind.as_str().to_owned(),
        step: e
            .payload
            .get("step")
            .and_then(Value::as_str)
            .map(str::to_owned),
        summary: shorten(&summary, SUMMARY_CHARS_MAX),
        parents: e.parents.clone(),
        hash: e.hash.to_hex(),
    }
}

/// The top-level step a recorded call name belongs to: `read[2]` to the loop whose body has
/// `read`, `notes/read` to `notes`, an agent turn's `research@1.2` to `research`.
fn owner<'g>(name: &str, graph: &'g Graph) -> Option<&'g str> {
    let name = name.split('@').next().unwrap_or(name);
    let top = |n: &str| {
        graph
            .steps
            .iter()
            .find(|s| s.name == n)
            .map(|s| s.name.as_str())
    };
    if let Some((outer, _)) = name.split_once('/') {
        return top(outer);
    }
    if let Some((inner, _)) = name.split_once('[') {
        return graph
            .steps
            .iter()
            .find(|s| {
                s.body
                    .as_ref()
                    .is_some_and(|b| b.graph.steps.iter().any(|t| t.name == inner))
            })
            .map(|s| s.name.as_str());
    }
    top(name)
}

/// Colours each step of `graph` by the plan agent's state entry (`step/<name>`) after event
/// `at`; a step without one is running if a call of it was scheduled by then, else not started.
fn dag_of(graph: Graph, state: &[(String, Value)], events: &Recorded, at: u64) -> Dag {
    let mut scheduled = std::collections::BTreeSet::new();
    for seq in 0..=at {
        if events.kind(seq) != Some(EventKind::StepScheduled) {
            continue;
        }
        if let Some(e) = events.event(seq)
            && let Some(step) = e.payload.get("step").and_then(Value::as_str)
            && let Some(o) = owner(step, &graph)
        {
            scheduled.insert(o.to_owned());
        }
    }
    let status = graph
        .steps
        .iter()
        .map(|s| {
            let key = oracle_plan::agent::step_key(&s.name);
            let entry = state
                .binary_search_by(|(k, _)| k.as_str().cmp(&key))
                .ok()
                .and_then(|i| state.get(i))
                .map(|(_, v)| v);
            // An agent step's model calls are its turns (the entry's field stays `attempts`).
            let unit = if s.tool == oracle_plan::agent::AGENT_TOOL {
                "turns"
            } else {
                "attempts"
            };
            match entry.and_then(|e| StepStatus::of_entry(e).map(|st| (st, e))) {
                Some((st, e)) => (st, entry_detail(e, unit)),
                None if scheduled.contains(&s.name) => (StepStatus::Running, None),
                None => (StepStatus::NotStarted, None),
            }
        })
        .collect();
    Dag { graph, status }
}

/// Attempts (or, `unit`, an agent step's turns), and the error or reason, of a step's state
/// entry.
fn entry_detail(e: &Value, unit: &str) -> Option<String> {
    let attempts = e.get("attempts").and_then(Value::as_u64);
    let why = ["error", "reason"]
        .iter()
        .find_map(|k| e.get(*k).and_then(Value::as_str));
    match (attempts, why) {
        (Some(n), Some(w)) if n > 1 => Some(format!("{n} {unit}: {w}")),
        (_, Some(w)) => Some(w.to_owned()),
        (Some(n), None) if n > 1 => Some(format!("{n} {unit}")),
        _ => None,
    }
}

fn claim_row(m: &Memory, e: &oracle_memory::memory::Entry, as_of: u64) -> ClaimRow {
    ClaimRow {
        id: e.id.to_hex(),
        value: e.claim.value.clone(),
        provenance: e.claim.provenance.as_str().to_owned(),
        criticality: e.claim.criticality.as_str().to_owned(),
        disposition: m.disposition(&e.id, as_of).map(|d| d.as_str().to_owned()),
        reason: e.reason.clone(),
        seq: e.origin.seq,
        time: e.origin.time,
        step: e.origin.step.clone(),
        tool: e.origin.tool.clone(),
        valid: m.window(e, as_of).map(|w| {
            format!(
                "{}..{} @{}%",
                w.start,
                w.end.map_or(String::new(), |e| e.to_string()),
                w.confidence_pct
            )
        }),
    }
}

/// The memory of a run as of tick `as_of` (`None`: now): every line's belief and claims, and
/// every request with both its claims.
pub fn memory_view(rm: &RunMemory, as_of: Option<u64>) -> MemoryView {
    let m = &rm.memory;
    let tick = as_of.unwrap_or(u64::MAX);
    let lines = m
        .lines()
        .filter_map(|(subject, predicate)| {
            let claims: Vec<ClaimRow> =
                oracle_memory::tools::history_entries(m, subject, Some(predicate), tick)
                    .into_iter()
                    .map(|e| claim_row(m, e, tick))
                    .collect();
            if claims.is_empty() {
                return None;
            }
            let q = Query {
                subject: subject.clone(),
                predicate: predicate.clone(),
                as_of,
                valid_at: as_of.or(Some(rm.time)),
            };
            let belief = oracle_memory::belief::query(m, &q, rm.settings.confidence_min_pct);
            let (values, pending) = match &belief {
                Belief::Resolved { value, .. } => (vec![value.clone()], Vec::new()),
                Belief::Contested {
                    alternatives,
                    pending,
                } => (
                    alternatives.iter().map(|a| a.value.clone()).collect(),
                    pending.clone(),
                ),
                Belief::TimingUncertain { alternatives } => (
                    alternatives.iter().map(|a| a.value.clone()).collect(),
                    Vec::new(),
                ),
                Belief::NoBelief => (Vec::new(), Vec::new()),
            };
            Some(LineView {
                subject: subject.clone(),
                predicate: predicate.clone(),
                belief: belief.status().to_owned(),
                values,
                pending,
                claims,
            })
        })
        .collect();
    let requests = rm
        .requests_in_order()
        .into_iter()
        .filter(|r| r.origin.time <= tick)
        .map(|r| request_view(rm, r, as_of))
        .collect();
    MemoryView {
        as_of,
        lines,
        requests,
    }
}

fn request_view(rm: &RunMemory, r: &RequestState, as_of: Option<u64>) -> RequestView {
    let m = &rm.memory;
    let tick = as_of.unwrap_or(u64::MAX);
    let status_then = r.status_at(tick);
    let status = match as_of {
        None => rm.request_status(r).to_owned(),
        Some(_) => status_then.name().to_owned(),
    };
    let outcome = match status_then {
        oracle_memory::RequestStatus::Pending => None,
        oracle_memory::RequestStatus::Resolved {
            verdict,
            seq,
            by,
            note,
            ..
        } => Some(match (by, note.is_empty()) {
            (Some(h), _) => format!("{verdict} by the verdict on {h} (event {seq})"),
            (None, true) => format!("{verdict} (event {seq})"),
            (None, false) => format!("{verdict} (event {seq}): {note}"),
        }),
        oracle_memory::RequestStatus::Expired { seq, now, .. } => Some(format!(
            "expired: contested (swept at tick {now}, event {seq})"
        )),
    };
    let claim = |id| m.entry(&id).map(|e| claim_row(m, e, tick));
    RequestView {
        run: rm.run.id.clone(),
        handle: r.request.handle.clone(),
        status,
        subject: r.request.subject.clone(),
        predicate: r.request.predicate.clone(),
        criticality: r.request.criticality.as_str().to_owned(),
        reason: r.request.reason.clone(),
        expires_at: r.request.expires_at,
        seq: r.origin.seq,
        step: r.origin.step.clone(),
        incumbent: claim(r.incumbent()),
        challenger: claim(r.request.challenger),
        outcome,
    }
}

/// The first divergence between runs (or logs) `a` and `b`, as `oracle diff` finds it: both
/// logs verified first (an invalid log is an error, never a difference), then a binary search
/// over chain hashes reading O(log n) events through each log's index.
pub fn divergence(home: &Path, a: &str, b: &str) -> Result<DivergenceView> {
    let resolve = |t: &str| {
        oracle_runtime::LogPaths::resolve(Path::new(t), home)
            .map(session::as_run)
            .ok_or_else(|| ViewError::Session(session::not_found(home, t)))
    };
    let (pa, pb) = (resolve(a)?, resolve(b)?);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (side, p) in [("A", &pa), ("B", &pb)] {
        oracle_runtime::verify_file(
            &p.log,
            oracle_runtime::VerifyOptions {
                threads,
                expected_head: None,
            },
        )
        .map_err(|source| ViewError::Diff { side, source })?;
    }
    let open = |side, p: &oracle_runtime::LogPaths| {
        IndexedLog::open_with(&p.log, false).map_err(|source| ViewError::Diff { side, source })
    };
    let (mut la, mut lb) = (open("A", &pa)?, open("B", &pb)?);
    let mut r = Reader::new(&mut la, &mut lb);
    let (outcome, plans) = first_divergence_across_plans(&mut r).map_err(|e| ViewError::Diff {
        side: match e.side {
            Side::A => "A",
            Side::B => "B",
        },
        source: e.error,
    })?;
    let outcome = match outcome {
        Outcome::Identical { events, .. } => DiffOutcome::Identical { events },
        Outcome::Prefix {
            shorter,
            common,
            extra,
        } => DiffOutcome::Prefix {
            shorter: match shorter {
                Side::A => "A",
                Side::B => "B",
            }
            .to_owned(),
            common,
            extra,
        },
        Outcome::Diverged(d) => DiffOutcome::Diverged {
            seq: d.seq,
            class: d.class.name().to_owned(),
            kind_a: d.a.kind.as_str().to_owned(),
            kind_b: d.b.kind.as_str().to_owned(),
            step: match &d.class {
                Class::Payload { step, .. } => step.clone(),
                _ => None,
            },
            fields: d
                .fields
                .iter()
                .map(|f| (f.path.clone(), f.a.clone(), f.b.clone()))
                .collect(),
            fields_omitted: d.fields_omitted,
        },
    };
    Ok(DivergenceView {
        a: a.to_owned(),
        b: b.to_owned(),
        plans: plans.map(|(a, b)| (a.to_hex(), b.to_hex())),
        outcome,
    })
}

/// Everything waiting on a person, across every run of the home.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inbox {
    /// Suspended steps that take an answer (not those waiting on a belief: those take a
    /// verdict, listed in `adjudications`).
    pub asks: Vec<Ask>,
    /// Pending adjudication requests, run by run, each in the order opened.
    pub adjudications: Vec<RequestView>,
    /// Runs that could not be read, with why (listed, not hidden).
    pub problems: Vec<(String, String)>,
    /// Pending requests of the home's named stores shared by runs, store by store.
    pub stores: Vec<StoreRequest>,
    /// Plan changes runs proposed that nobody decided yet (filled by the server, which reads
    /// them through `oracle_host`; empty from [`inbox`]).
    pub proposals: Vec<ProposalView>,
}

/// An undecided proposal as the inbox shows it (docs/EVOLUTION.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProposalView {
    /// Its id (a prefix of its hash).
    pub id: String,
    pub program: String,
    pub reason: String,
    /// Where it was recorded: `run@seq`, each.
    pub recorded: Vec<String>,
    /// The unified diff of the base plan and the proposed plan, when the base is kept.
    pub diff: Option<String>,
    /// The last check report kept for it, if any.
    pub report: Option<ReportView>,
}

/// A check report's summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportView {
    /// Its file under `<home>/evolution/reports`.
    pub file: String,
    /// BLAKE3 of the file, hex: what an approval signs.
    pub hash: String,
    pub unchanged: u64,
    pub diverges: u64,
    pub cannot_check: u64,
}

/// A pending request of a named store: the line, and both claims with the runs that
/// published them (empty for a claim from outside any run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreRequest {
    pub store: String,
    pub handle: String,
    pub subject: String,
    pub predicate: String,
    pub criticality: String,
    pub reason: String,
    /// `(claim id, run)` of the challenger and the incumbent.
    pub challenger: (String, String),
    pub incumbent: (String, String),
}

/// The pending requests of every named store in `home`; a store that cannot be read is a
/// problem, named `memory NAME`.
fn store_requests(home: &Path, inbox: &mut Inbox) {
    use oracle_runtime::shared::{self as files, StoreBackend};
    let stores = files::FileStores::new(home);
    for name in stores.list().unwrap_or_default() {
        let store = match files::load(&stores, &name) {
            Ok(s) => s,
            Err(e) => {
                inbox
                    .problems
                    .push((format!("memory {name}"), e.to_string()));
                continue;
            }
        };
        for r in store.memory.requests() {
            if !matches!(r.status, oracle_memory::RequestStatus::Pending) {
                continue;
            }
            let (challenger_run, incumbent_run) = oracle_memory::shared::runs_of(&store, r);
            inbox.stores.push(StoreRequest {
                store: name.clone(),
                handle: r.request.handle.clone(),
                subject: r.request.subject.clone(),
                predicate: r.request.predicate.clone(),
                criticality: r.request.criticality.as_str().to_owned(),
                reason: r.request.reason.clone(),
                challenger: (r.request.challenger.to_hex(), challenger_run),
                incumbent: (r.incumbent().to_hex(), incumbent_run),
            });
        }
    }
    inbox
        .stores
        .sort_by_key(|s| (s.store.clone(), s.handle.len(), s.handle.clone()));
}

/// A suspended step that takes an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub run: String,
    pub plan: String,
    pub step: String,
    /// The `human.ask` question, if the step asked one.
    pub question: Option<String>,
    /// Why it waits, as recorded (for a `human.ask`, the question again).
    pub reason: String,
    pub attempts: u64,
    /// The tool the step called last.
    pub tool: Option<String>,
    /// The JSON Schema its answer should meet, when known (see
    /// `oracle_runtime::session::Waiting::schema`); the form's control follows it.
    pub schema: Option<Value>,
}

/// The inbox: every suspended step that takes an answer, and every pending adjudication, of
/// every run under the home (damaged runs are listed as problems). Reads each run's whole log.
pub fn inbox(home: &Path) -> Result<Inbox> {
    let registry = oracle_runtime::tools::builtin();
    let mut inbox = Inbox {
        asks: Vec::new(),
        adjudications: Vec::new(),
        problems: Vec::new(),
        stores: Vec::new(),
        proposals: Vec::new(),
    };
    store_requests(home, &mut inbox);
    for info in session::list(home)? {
        if info.status == "damaged" {
            inbox
                .problems
                .push((info.id, "the log is damaged: `oracle verify` it".to_owned()));
            continue;
        }
        if info.events == 0 {
            continue;
        }
        let loaded = session::find(home, &info.id)
            .map_err(ViewError::from)
            .and_then(|found| {
                let events = Recorded::read(&found.paths.log)?;
                Ok((found, events))
            });
        let (found, events) = match loaded {
            Ok(x) => x,
            Err(e) => {
                inbox.problems.push((info.id, e.to_string()));
                continue;
            }
        };
        if info.status == "suspended"
            && let Some(w) = session::waiting(&events, &registry)
            && !w.belief
        {
            inbox.asks.push(Ask {
                run: info.id.clone(),
                plan: info.program.clone(),
                step: w.step,
                question: w.question,
                reason: w.reason,
                attempts: w.attempts,
                tool: w.tool,
                schema: w.schema,
            });
        }
        match adjudication::load_from(found, &events) {
            Ok(rm) => inbox.adjudications.extend(
                rm.requests_in_order()
                    .into_iter()
                    .filter(|r| rm.request_status(r) == "pending")
                    .map(|r| request_view(&rm, r, None)),
            ),
            Err(e) => inbox.problems.push((info.id, e.to_string())),
        }
    }
    Ok(inbox)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oracle_plan::graph::{Body, Node};

    fn node(name: &str, body: Option<Body>) -> Node {
        Node {
            name: name.into(),
            tool: "t".into(),
            what: "t".into(),
            deps: vec![],
            level: 0,
            body,
        }
    }

    fn graph(steps: Vec<Node>) -> Graph {
        Graph {
            plan: "p".into(),
            version: 1,
            hash: oracle_core::Hash::ZERO,
            order: (0..steps.len()).collect(),
            levels: vec![(0..steps.len()).collect()],
            steps,
        }
    }

    #[test]
    fn recorded_call_names_belong_to_their_top_level_step() {
        let body = Body {
            kind: oracle_plan::ast::LoopKind::For,
            graph: Box::new(graph(vec![node("read", None)])),
        };
        let g = graph(vec![
            node("docs", Some(body)),
            node("notes", None),
            node("research", None),
        ]);
        assert_eq!(owner("read[2]", &g), Some("docs"));
        assert_eq!(owner("notes/read", &g), Some("notes"));
        assert_eq!(owner("research@1.2", &g), Some("research"));
        assert_eq!(owner("notes", &g), Some("notes"));
        assert_eq!(owner("nowhere", &g), None);
    }

    #[test]
    fn state_entries_colour_steps() {
        use serde_json::json;
        let g = graph(vec![
            node("a", None),
            node("b", None),
            node("c", None),
            node("d", None),
            node("e", None),
        ]);
        let state = vec![
            (
                "step/a".to_owned(),
                json!({"status": "completed", "attempts": 1}),
            ),
            (
                "step/b".to_owned(),
                json!({"status": "failed", "attempts": 3, "error": "boom"}),
            ),
            (
                "step/c".to_owned(),
                json!({"status": "waiting", "reason": "Approve?"}),
            ),
            ("step/d".to_owned(), json!({"status": "skipped"})),
        ];
        let dag = dag_of(g, &state, &Recorded::empty(), 0);
        let got: Vec<_> = dag.status.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            got,
            [
                StepStatus::Done,
                StepStatus::Failed,
                StepStatus::Suspended,
                StepStatus::Skipped,
                StepStatus::NotStarted
            ]
        );
        assert_eq!(dag.status[1].1.as_deref(), Some("3 attempts: boom"));
        assert_eq!(dag.status[2].1.as_deref(), Some("Approve?"));
    }

    /// Issue 34: an agent step's model calls are its turns where a person reads them; the
    /// recorded field stays `attempts`.
    #[test]
    fn an_agent_steps_model_calls_are_shown_as_turns() {
        use serde_json::json;
        let mut agent = node("research", None);
        agent.tool = oracle_plan::agent::AGENT_TOOL.into();
        let g = graph(vec![agent, node("plain", None)]);
        let entry = json!({"status": "failed", "attempts": 3, "error": "max_turns = 3 reached"});
        let state = vec![
            ("step/plain".to_owned(), entry.clone()),
            ("step/research".to_owned(), entry),
        ];
        let dag = dag_of(g, &state, &Recorded::empty(), 0);
        assert_eq!(
            dag.status[0].1.as_deref(),
            Some("3 turns: max_turns = 3 reached")
        );
        assert_eq!(
            dag.status[1].1.as_deref(),
            Some("3 attempts: max_turns = 3 reached")
        );
        let scheduled = oracle_core::payload::StepScheduled {
            step: "research".into(),
            tool: "llm.chat".into(),
            attempt: 2,
        };
        assert_eq!(
            scheduled.summary_as_turn(),
            "step research -> llm.chat (turn 2)"
        );
    }
}
