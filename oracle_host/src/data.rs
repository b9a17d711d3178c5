//! What `oracle serve`'s API (and the HTML pages mounted beside it) read: runs, events, state,
//! beliefs, adjudications, the inbox, verification and diffs, each as one JSON value whose
//! shape docs/API.md defines. The host's, so the server reads a run through the host alone.
//!
//! These are plain blocking functions over the home, so a page renders exactly what the API
//! returns. Events are read through the run's index (`IndexedLog`): a page of events, one event,
//! a waiting step's question cost a few reads, never the whole log. What needs the whole log
//! says so: `state_at` (replays up to the seq, from a snapshot when one matches), `verify`,
//! `beliefs`/`adjudications` (the memory projection), `diff` unless told not to verify.

use std::path::Path;
use std::sync::OnceLock;

use oracle_core::diff::{Reader, first_divergence_across_plans};
use oracle_core::payload::{Payload, ToolCalled};
use oracle_core::{Event, EventKind};
use oracle_memory::memory::RequestState;
use oracle_memory::{Query, RequestStatus};
use oracle_runtime::StoreError;
use oracle_runtime::adjudication::RunMemory;
use oracle_runtime::index::IndexedLog;
use oracle_runtime::live::Subscription;
use oracle_runtime::paths::LOG_FILE;
use oracle_runtime::session::{self, RunInfo, SessionError};
use oracle_runtime::tool::Registry;
use serde_json::{Value, json};

use crate::runid::ValidRun;

/// Events in one page of `/events` (and read per poll by one SSE stream).
pub const EVENTS_PAGE_LIMIT_MAX: u64 = 1000;
pub const EVENTS_PAGE_LIMIT_DEFAULT: u64 = 100;
/// Bytes of records in one page of `/events`: a page ends early, before the event that would
/// take it past this, and its `next` says where to go on (a page always holds at least one
/// event, so one record of up to `record_bytes_max` can still make a page alone). A page's
/// memory follows its bytes, not its count: four pages of 1000 events of about 440 KB each
/// held the server at 5.2 GB before this limit.
pub const EVENTS_PAGE_BYTES_MAX: u64 = 4 << 20;
/// Runs in one page of `/runs`.
pub const RUNS_PAGE_LIMIT_MAX: u64 = 1000;
pub const RUNS_PAGE_LIMIT_DEFAULT: u64 = 100;
/// State entries in one answer of `/state` (the rest are counted, not sent).
pub const STATE_ENTRIES_MAX: u64 = 10_000;
/// Events a waiting step's question is looked for before its suspension (format 1 logs,
/// which record no causal parents).
pub const WAIT_SCAN_EVENTS_MAX: u64 = 1024;

/// Why a read was refused or failed; `oracle serve` answers each as its `DataError` of the same
/// name (`usage`, `not_found`, or the host's class of the session's or store's failure).
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{what}")]
    NotFound { what: String },
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Host(#[from] crate::HostError),
}

/// The tool of a question to a person (`oracle_plan::agent::ASK_TOOL`).
const ASK_TOOL: &str = "human.ask";
use oracle_runtime::tools::event::WAIT_EVENT_TOOL;
use oracle_runtime::tools::spawn::SPAWN_TOOL;

/// The built-in tools' declarations (output schemas of yielded steps), built once.
fn builtin() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(oracle_runtime::tools::builtin)
}

/// Filters and paging of the runs list.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// `running`, `suspended`, `completed`, `failed` or `damaged`.
    pub status: Option<String>,
    /// The plan's name (`run_started.program`).
    pub plan: Option<String>,
    /// Runs after this id (in `oracle runs` order: natural order of ids).
    pub after: Option<String>,
    pub limit: Option<u64>,
}

/// A run as `oracle runs --json` shows it (same keys).
pub fn run_json(r: &RunInfo) -> Value {
    json!({
        "run": r.id,
        "plan": r.program,
        "status": r.status,
        "events": r.events,
        "last_time": r.last_time,
        "live": r.live,
        "waiting": r.waiting.as_ref().map(|(s, why)| json!({"step": s, "reason": why, "attempts": r.attempts})),
        "reason": r.reason,
        "models": r.models.as_ref().map(|u| json!({"calls": u.calls, "tokens": u.tokens})),
    })
}

/// [`run_json`], with a queued run's place (`queue`: its queue, position, priority and
/// partition; `null` for a run in no queue).
pub fn queued_json(
    r: &RunInfo,
    places: &std::collections::BTreeMap<String, crate::queue::Place>,
) -> Value {
    let mut v = run_json(r);
    let place = (r.status == crate::queue::QUEUED)
        .then(|| places.get(&r.id))
        .flatten();
    v["queue"] = json!(place);
    v
}

const STATUSES: [&str; 7] = [
    "running",
    "suspended",
    "completed",
    "failed",
    "damaged",
    "submitted",
    crate::queue::QUEUED,
];

/// The runs under `<home>/runs` as `oracle runs` lists them (natural order of ids), but only
/// those a request could name ([`crate::runid::validate`]): an entry must be a real directory,
/// not a symlink, holding a regular `events.jsonl`, under a name that is a run id. Anything
/// else is skipped before any of its files is opened, so a symlink out of the home is neither
/// read nor listed.
pub fn run_infos(home: &Path) -> Result<Vec<RunInfo>, session::SessionError> {
    let runs = home.join("runs");
    let entries = match std::fs::read_dir(&runs) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(session::SessionError::Io { path: runs, source }),
    };
    let queued = crate::queue::places(home);
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| session::SessionError::Io {
            path: runs.clone(),
            source,
        })?;
        let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        // `DirEntry::file_type` does not follow a symlink: a link to a directory is a link.
        let real_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let log = std::fs::symlink_metadata(entry.path().join(LOG_FILE));
        // A run waiting in a queue has no log yet: it is listed, `queued`, with its place.
        let waits = || {
            queued.contains_key(&id)
                && std::fs::symlink_metadata(entry.path().join(session::SUBMISSION_FILE))
                    .is_ok_and(|m| m.is_file())
        };
        let listed = log.is_ok_and(|m| m.is_file()) || waits();
        if crate::runid::malformed(&id).is_none() && real_dir && listed {
            ids.push(id);
        }
    }
    ids.sort_by(|a, b| session::natural_order(a, b));
    let mut infos: Vec<RunInfo> = ids
        .into_iter()
        .map(|id| session::run_info(&runs.join(id)))
        .collect();
    crate::queue::mark(&queued, &mut infos);
    Ok(infos)
}

/// Whether `<home>/runs/ID` is a run [`run_infos`] lists (for pages built from a listing that
/// follows symlinks).
pub fn is_listed(home: &Path, id: &str) -> bool {
    crate::runid::validate(home, id).is_ok()
}

/// `GET /api/v1/runs`: `{"runs": [run], "next": id | null}`.
pub fn runs(home: &Path, q: &RunsQuery) -> Result<Value, DataError> {
    if let Some(s) = &q.status
        && !STATUSES.contains(&s.as_str())
    {
        return Err(DataError::BadRequest(format!(
            "status `{s}`: one of {}",
            STATUSES.join(", ")
        )));
    }
    let limit = page_limit(q.limit, RUNS_PAGE_LIMIT_DEFAULT, RUNS_PAGE_LIMIT_MAX)?;
    let mut all = run_infos(home)?;
    let places = crate::queue::places(home);
    crate::queue::mark(&places, &mut all);
    let mut out = Vec::new();
    let mut next = None;
    let after = q.after.as_deref();
    for r in all
        .iter()
        .filter(|r| after.is_none_or(|a| session::natural_order(&r.id, a).is_gt()))
        .filter(|r| q.status.as_ref().is_none_or(|s| *s == r.status))
        .filter(|r| q.plan.as_ref().is_none_or(|p| *p == r.program))
    {
        if out.len() as u64 == limit {
            next = out
                .last()
                .and_then(|v: &Value| v["run"].as_str().map(str::to_owned));
            break;
        }
        out.push(queued_json(r, &places));
    }
    Ok(json!({"runs": out, "next": next}))
}

fn page_limit(given: Option<u64>, default: u64, max: u64) -> Result<u64, DataError> {
    match given {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(DataError::BadRequest(format!(
            "limit {n}: from 1 to {max} (the page limit)"
        ))),
    }
}

/// `GET /api/v1/runs/{id}`: the run as listed, plus its head hash, what it waits on
/// ([`waiting`]), when an answer was recorded but the run has not gone on yet, `answered`, and
/// its family (`forked_from`, `forks`: the runs it shares a prefix with through a `forked`;
/// `spawned_by`, `children`: the run whose `spawn` step started it, and the runs its own did),
/// and `wall_ms`, its wall time when the times file says.
pub fn run_summary(run: &ValidRun) -> Result<Value, DataError> {
    let mut info = [session::run_info(&run.dir)];
    let home = run
        .dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    let places = crate::queue::places(home);
    crate::queue::mark(&places, &mut info);
    let [info] = info;
    let mut v = queued_json(&info, &places);
    if info.status == "submitted" || info.status == crate::queue::QUEUED {
        // Prepared, no event yet (a background start, or a store's run no worker took yet).
        v["head"] = Value::Null;
        v["waiting_on"] = Value::Null;
        v["answered"] = Value::Null;
        return Ok(v);
    }
    let mut ix = IndexedLog::open(&run.log())?;
    let n = ix.len();
    v["head"] = match n.checked_sub(1) {
        Some(last) => json!(ix.read(last)?.hash),
        None => Value::Null,
    };
    v["waiting_on"] = waiting_in(&mut ix)?.unwrap_or(Value::Null);
    // From the first event to the last by the times file beside the log (advisory).
    v["wall_ms"] = json!(oracle_runtime::times::span(&run.log()));
    v["answered"] = Value::Null;
    if let Some(e) = last_program_event(&mut ix)?
        && let Ok(Payload::Resumed(r)) = e.typed()
    {
        v["answered"] = json!({"step": r.step, "seq": e.seq, "by": r.by});
    }
    let family = oracle_runtime::family::family(
        &run.home,
        &session::RunDir {
            id: run.id.clone(),
            paths: run.paths(),
            dir: run.dir.clone(),
        },
    );
    v["forked_from"] = family.parent.map_or(
        Value::Null,
        |(run, shared)| json!({"run": run, "shared": shared}),
    );
    v["forks"] = family
        .forks
        .iter()
        .map(|(run, shared)| json!({"run": run, "shared": shared}))
        .collect();
    v["spawned_by"] = json!(
        family
            .spawned_by
            .map(|p| json!({"run": p.run, "step": p.step}))
    );
    v["children"] = family
        .children
        .iter()
        .map(|(run, step)| json!({"run": run, "step": step}))
        .collect();
    Ok(v)
}

/// The run page's latency view of the log at `log` up to event `at` (all when `None`), with
/// costs at `prices`; `None` when the log cannot be read (the page shows the rest).
pub fn latency_view(
    log: &std::path::Path,
    at: Option<u64>,
    prices: &crate::metrics::Prices,
) -> Option<crate::view::LatencyView> {
    use crate::timeline::{Timeline, priced, tokens};
    let t = Timeline::of_log(log, at).ok()?;
    let cost = |tally: &crate::metrics::Tally| priced(tally, prices);
    Some(crate::view::LatencyView {
        wall_ms: t.wall_ms,
        tokens: t.tokens(),
        cost: cost(&t.tally),
        steps: t
            .steps
            .iter()
            .map(|s| crate::view::LatencyRow {
                step: s.step.clone(),
                attempts: s.attempts,
                offset_ms: s.offset_ms,
                wall_ms: s.wall_ms,
                tokens: tokens(&s.tally),
                cost: cost(&s.tally),
            })
            .collect(),
    })
}

/// The last event the program produced (external events after it skipped).
fn last_program_event(ix: &mut IndexedLog) -> Result<Option<Event>, DataError> {
    let mut seq = match ix.len().checked_sub(1) {
        Some(s) => s,
        None => return Ok(None),
    };
    loop {
        let e = ix.read(seq)?;
        if !e.kind.is_external() {
            return Ok(Some(e));
        }
        match seq.checked_sub(1) {
            Some(s) => seq = s,
            None => return Ok(None),
        }
    }
}

/// What a suspended run waits on: `{"step", "reason", "attempts", "seq", "kind", ...}` where
/// `kind` is `question` (a `human.ask`: `question`, `schema`), `event` (a `wait.event`: `event`,
/// its name, and `schema`), `belief` (a `memory.query` that
/// needs a resolved belief: `subject`, `predicate`; it takes a verdict, not an answer) or
/// `yield` (a step that gave up and asks a person for its output: `tool`, `schema`, the
/// output schema an answer must meet), and `timer` (`{"due_ms", "due"}`) when the step waits
/// on a timer (a `sleep`, a `human.ask` deadline). `null` when the run is not suspended.
pub fn waiting(run: &ValidRun) -> Result<Option<Value>, DataError> {
    waiting_in(&mut IndexedLog::open(&run.log())?)
}

/// What a question (`kind` `question`: its `question`), an event wait (`kind` `event`: the
/// name it waits on, `event`) or a child run's step (`kind` `child`: its `plan`; only the
/// child's outcome answers it) adds to `waiting_on`, with the `schema` it gave.
fn asked(v: &mut Value, c: &ToolCalled) {
    let (kind, arg) = match c.tool.as_str() {
        ASK_TOOL => ("question", "question"),
        SPAWN_TOOL => ("child", "plan"),
        _ => ("event", "name"),
    };
    v["kind"] = json!(kind);
    v[kind] = c.input.get(arg).cloned().unwrap_or(Value::Null);
    v["schema"] = c.input.get("schema").cloned().unwrap_or(Value::Null);
}

fn waiting_in(ix: &mut IndexedLog) -> Result<Option<Value>, DataError> {
    let Some(ev) = last_program_event(ix)? else {
        return Ok(None);
    };
    let Ok(Payload::Suspended(s)) = ev.typed() else {
        return Ok(None);
    };
    // The step's latest call, just before its suspension, and the tools its earlier attempts
    // called (a step with a fallback has two): a bounded look back.
    let mut call: Option<ToolCalled> = None;
    let mut timer: Option<Value> = None;
    let mut tools: Vec<String> = Vec::new();
    let lowest = ev.seq.saturating_sub(WAIT_SCAN_EVENTS_MAX);
    let mut seq = ev.seq;
    while seq > lowest {
        seq -= 1;
        let e = ix.read(seq)?;
        if e.kind == EventKind::Resumed || e.kind == EventKind::RunStarted {
            break;
        }
        // The timer the step waits on (a `sleep`, a `human.ask` deadline): set after its
        // latest call, so found before it.
        if e.kind == EventKind::TimerSet && call.is_none() && timer.is_none() {
            if let Ok(Payload::TimerSet(t)) = e.typed()
                && t.step == s.step
            {
                timer = Some(json!({"due_ms": t.due_ms, "due": t.due}));
            }
            continue;
        }
        if e.kind != EventKind::ToolCalled {
            continue;
        }
        if let Ok(Payload::ToolCalled(c)) = e.typed()
            && c.step == s.step
        {
            if !tools.contains(&c.tool) {
                tools.push(c.tool.clone());
            }
            if call.is_none() {
                call = Some(c);
            }
        }
    }
    let mut v = json!({
        "step": s.step,
        "reason": s.reason,
        "attempts": s.attempts,
        "seq": ev.seq,
    });
    if let Some(t) = timer {
        v["timer"] = t;
    }
    match call {
        Some(c) if [ASK_TOOL, WAIT_EVENT_TOOL, SPAWN_TOOL].contains(&c.tool.as_str()) => {
            asked(&mut v, &c)
        }
        Some(c) if c.tool == oracle_memory::tools::QUERY => {
            v["kind"] = json!("belief");
            v["subject"] = c.input.get("subject").cloned().unwrap_or(Value::Null);
            v["predicate"] = c.input.get("predicate").cloned().unwrap_or(Value::Null);
        }
        Some(c) => {
            v["kind"] = json!("yield");
            // The answer stands in for the output of any of the step's tools: a model step's
            // is checked against its call's schema, any other tool's against its output
            // schema (declared tools' schemas are not known here: `null`, any value).
            let schema_of = |tool: &str| {
                if tool == "llm.chat" {
                    c.input.get("schema").cloned().unwrap_or(Value::Null)
                } else {
                    builtin()
                        .get(tool)
                        .map_or(Value::Null, |r| r.decl.output_schema.clone())
                }
            };
            let schemas: Vec<Value> = tools.iter().map(|t| schema_of(t)).collect();
            v["schema"] = match schemas.as_slice() {
                [one] => one.clone(),
                many if many.iter().any(Value::is_null) => Value::Null,
                many => json!({"anyOf": many}),
            };
            v["tool"] = json!(c.tool);
            v["tools"] = json!(tools);
        }
        None => v["kind"] = json!("yield"),
    }
    Ok(Some(v))
}

/// `GET /api/v1/runs/{id}/events`: `{"run", "from", "events": [record], "next": seq | null,
/// "total"}`, at most `limit` events from seq `from`, read through the index, and at most
/// `events_page_bytes_max` bytes of records (at least one event): `next` is the first event
/// not sent.
pub fn events_page(run: &ValidRun, from: u64, limit: Option<u64>) -> Result<Value, DataError> {
    events_page_within(run, from, limit, EVENTS_PAGE_BYTES_MAX)
}

/// [`events_page`] with the bytes limit given (tests use a small one).
pub fn events_page_within(
    run: &ValidRun,
    from: u64,
    limit: Option<u64>,
    bytes_max: u64,
) -> Result<Value, DataError> {
    let limit = page_limit(limit, EVENTS_PAGE_LIMIT_DEFAULT, EVENTS_PAGE_LIMIT_MAX)?;
    let mut ix = IndexedLog::open(&run.log())?;
    let total = ix.len();
    let batch = read_batch(&mut ix, from, limit, bytes_max)?;
    let end = from + batch.events.len() as u64;
    let events: Vec<Value> = batch.events.iter().map(event_json).collect();
    Ok(json!({
        "run": run.id,
        "from": from,
        "events": events,
        "next": (end < total).then_some(end),
        "total": total,
    }))
}

/// Events read in one go, and the bytes of their records.
#[derive(Debug, Default)]
pub struct Batch {
    pub events: Vec<Event>,
    /// The bytes of each event's record (with its newline), in order.
    pub sizes: Vec<u64>,
    /// Their sum.
    pub bytes: u64,
    /// Whether the log had more events after these when it was read.
    pub more: bool,
}

/// The bytes of event `seq`'s record (with its newline), from the index's offsets when it
/// knows the next record's, else by encoding the event read.
fn record_bytes(ix: &IndexedLog, seq: u64, e: Option<&Event>) -> Option<u64> {
    match (ix.offset(seq), ix.offset(seq.saturating_add(1))) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => e.map(|e| oracle_core::record::encode(e).len() as u64),
    }
}

/// Events `from..` of an open log, at most `limit` of them and at most `bytes_max` bytes of
/// records, but at least one when there is one: an event whose record would take the batch
/// past `bytes_max` is left for the next batch (its size is known from the index before it is
/// read, except for the last event of the log).
pub fn read_batch(
    ix: &mut IndexedLog,
    from: u64,
    limit: u64,
    bytes_max: u64,
) -> Result<Batch, DataError> {
    let end = from.saturating_add(limit).min(ix.len());
    let mut batch = Batch::default();
    for seq in from..end {
        let known = record_bytes(ix, seq, None);
        if !batch.events.is_empty() && known.is_some_and(|n| batch.bytes + n > bytes_max) {
            break;
        }
        let e = ix.read(seq)?;
        let n = known
            .or_else(|| record_bytes(ix, seq, Some(&e)))
            .unwrap_or(0);
        if !batch.events.is_empty() && batch.bytes + n > bytes_max {
            break;
        }
        batch.bytes += n;
        batch.sizes.push(n);
        batch.events.push(e);
        if batch.bytes >= bytes_max {
            break;
        }
    }
    batch.more = from + (batch.events.len() as u64) < ix.len();
    Ok(batch)
}

/// Events `from..` of a log as they are now, at most `limit` and at most `bytes_max` bytes of
/// records (at least one): what an SSE tail reads ahead of its client.
pub fn events_from(log: &Path, from: u64, limit: u64, bytes_max: u64) -> Result<Batch, DataError> {
    read_batch(&mut IndexedLog::open(log)?, from, limit, bytes_max)
}

/// An event as stored (the record's fields).
pub fn event_json(e: &Event) -> Value {
    serde_json::to_value(e).unwrap_or(Value::Null)
}

/// `GET /api/v1/runs/{id}/events/{seq}`: the record.
pub fn event(run: &ValidRun, seq: u64) -> Result<Value, DataError> {
    Ok(event_json(&IndexedLog::open(&run.log())?.read(seq)?))
}

/// `GET /api/v1/runs/{id}/state`: the state after event `seq` (default: the last), rebuilt
/// from the newest snapshot that matches the log: `{"run", "seq", "time", "state", "keys",
/// "entries": {key: value}, "omitted", "from_snapshot"}`; entries whose key starts with
/// `prefix`, at most `state_entries_max`, the rest counted in `omitted`.
pub fn state_at(
    run: &ValidRun,
    seq: Option<u64>,
    prefix: Option<&str>,
) -> Result<Value, DataError> {
    let rebuilt = oracle_runtime::snapshots::state_at(&run.paths(), seq, true)?;
    let mut entries = serde_json::Map::new();
    let mut omitted = 0u64;
    for (k, v) in rebuilt.state.iter() {
        if prefix.is_some_and(|p| !k.starts_with(p)) {
            continue;
        }
        if entries.len() as u64 >= STATE_ENTRIES_MAX {
            omitted += 1;
            continue;
        }
        entries.insert(k.clone(), v.value());
    }
    Ok(json!({
        "run": run.id,
        "seq": rebuilt.seq,
        "time": rebuilt.event.time,
        "state": rebuilt.state.hash(),
        "keys": rebuilt.state.iter().count(),
        "entries": entries,
        "omitted": omitted,
        "from_snapshot": rebuilt.from_snapshot,
    }))
}

/// `GET /api/v1/runs/{id}/verify`: the whole chain checked, as `oracle verify --json` does:
/// `{"run", "valid": true, "events", "bytes", "head", "state", "last_time"}`, or
/// `{"run", "valid": false, "error": {...}}` for a damaged log (a finding, not a failed request).
pub fn verify(run: &ValidRun) -> Result<Value, DataError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let opts = oracle_runtime::VerifyOptions {
        threads,
        expected_head: None,
    };
    match oracle_runtime::verify_file(&run.log(), opts) {
        Ok(s) => Ok(json!({
            "run": run.id,
            "valid": true,
            "events": s.events,
            "bytes": s.bytes,
            "head": s.head.hash,
            "state": s.head.state,
            "last_time": s.head.time,
        })),
        Err(e @ oracle_runtime::StoreError::Log { .. }) => Ok(json!({
            "run": run.id,
            "valid": false,
            "error": crate::HostError::Store(e).error_value(),
        })),
        Err(e) => Err(e.into()),
    }
}

/// `GET /api/v1/diff?a=RUN&b=RUN`: the first divergence of two runs, as `oracle diff --json`
/// reports it (without `parents`, `context` and `state`): runs of two plan versions are
/// aligned by content, with `plans_differ` naming the two programs. With `verify` both logs are verified
/// first (an invalid log is an error, never a difference); without, only the O(log n) events
/// the search needs are read.
pub fn diff(a: &ValidRun, b: &ValidRun, verify_first: bool) -> Result<Value, DataError> {
    if verify_first {
        for r in [a, b] {
            let v = verify(r)?;
            if v["valid"] == json!(false) {
                return Err(DataError::BadRequest(format!(
                    "cannot compare: {} does not verify: {}",
                    r.id, v["error"]["message"]
                )));
            }
        }
    }
    let (mut la, mut lb) = (IndexedLog::open(&a.log())?, IndexedLog::open(&b.log())?);
    let (na, nb) = (la.len(), lb.len());
    let mut reader = Reader::new(&mut la, &mut lb);
    let (outcome, plans) =
        first_divergence_across_plans(&mut reader).map_err(|e| DataError::from(e.error))?;
    let reads = reader.reads();
    let mut v = json!({
        "a": {"run": a.id, "events": na},
        "b": {"run": b.id, "events": nb},
        "reads": {"a": reads.0, "b": reads.1},
        "verified": verify_first,
    });
    let fields = outcome.to_json();
    if let (Value::Object(m), Value::Object(f)) = (&mut v, fields) {
        m.extend(f);
    }
    if let Some((pa, pb)) = plans {
        v["plans_differ"] = json!({"a": pa, "b": pb});
    }
    Ok(v)
}

/// Filters of `beliefs`.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeliefsQuery {
    pub subject: Option<String>,
    pub predicate: Option<String>,
    /// What was believed at this tick (claims and verdicts recorded later left out).
    pub as_of: Option<u64>,
}

/// `GET /api/v1/runs/{id}/beliefs`: `{"run", "time", "lines": [{"subject", "predicate",
/// "belief", "claims"}]}`, as `oracle memory --json` prints each line.
pub fn beliefs(run: &ValidRun, q: &BeliefsQuery) -> Result<Value, DataError> {
    let rm = crate::Home::open(&run.home)?.memory(&run.arg())?;
    let m = &rm.memory;
    let as_of = q.as_of.unwrap_or(u64::MAX);
    let mut lines = Vec::new();
    for (subject, predicate) in m.lines() {
        if q.subject.as_ref().is_some_and(|s| s != subject)
            || q.predicate.as_ref().is_some_and(|p| p != predicate)
        {
            continue;
        }
        let query = Query {
            subject: subject.clone(),
            predicate: predicate.clone(),
            as_of: q.as_of,
            valid_at: q.as_of.or(Some(rm.time)),
        };
        let belief = oracle_memory::belief::query(m, &query, rm.settings.confidence_min_pct);
        let claims: Vec<Value> =
            oracle_memory::tools::history_entries(m, subject, Some(predicate), as_of)
                .iter()
                .map(|e| oracle_memory::tools::claim_view(m, e, as_of))
                .collect();
        lines.push(json!({
            "subject": subject,
            "predicate": predicate,
            "belief": belief.to_value(),
            "claims": claims,
        }));
    }
    Ok(json!({"run": run.id, "time": rm.time, "lines": lines}))
}

/// Whether a request is listed as pending, resolved, expired, or past its expiry but not
/// swept (`expired_not_swept`: a verdict now would be refused).
fn request_status(rm: &RunMemory, r: &RequestState) -> &'static str {
    if rm.expired_unswept(r) {
        "expired_not_swept"
    } else {
        r.status.name()
    }
}

/// An adjudication request with both claims and their provenance (the shape the oracle
/// program gets, `oracle_runtime::oracle::request_json`), its status and, once settled, its
/// outcome.
pub fn request_json(rm: &RunMemory, r: &RequestState) -> Value {
    let mut v = oracle_runtime::oracle::request_json(&rm.run.id, &rm.memory, r);
    v["status"] = json!(request_status(rm, r));
    v["outcome"] = match &r.status {
        RequestStatus::Pending => Value::Null,
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    };
    v
}

/// `GET /api/v1/runs/{id}/adjudications`: `{"run", "adjudications": [request]}` in the order
/// they were opened; `status` keeps `pending`, `resolved` or `expired` (with
/// `expired_not_swept`) only.
pub fn adjudications(run: &ValidRun, status: Option<&str>) -> Result<Value, DataError> {
    if let Some(s) = status
        && !["pending", "resolved", "expired"].contains(&s)
    {
        return Err(DataError::BadRequest(format!(
            "status `{s}`: one of pending, resolved, expired"
        )));
    }
    let rm = crate::Home::open(&run.home)?.memory(&run.arg())?;
    let mut all: Vec<&RequestState> = rm.memory.requests().collect();
    all.sort_by_key(|r| r.origin.seq);
    let list: Vec<Value> = all
        .into_iter()
        .filter(|r| {
            let st = request_status(&rm, r);
            status.is_none_or(|want| st == want || (want == "expired" && st == "expired_not_swept"))
        })
        .map(|r| request_json(&rm, r))
        .collect();
    Ok(json!({"run": run.id, "adjudications": list}))
}

/// The pending adjudications of a run (for the inbox): the requests that can take a verdict
/// now.
pub fn pending_adjudications(rm: &RunMemory) -> Vec<Value> {
    let mut all: Vec<&RequestState> = rm
        .memory
        .requests()
        .filter(|r| r.status == RequestStatus::Pending && !rm.expired_unswept(r))
        .collect();
    all.sort_by_key(|r| r.origin.seq);
    all.into_iter().map(|r| request_json(rm, r)).collect()
}

/// What the server's watcher knows of one run's log, brought up to date by [`read_seen`].
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Events read so far.
    pub next_seq: u64,
    /// The suspended step, as [`waiting`] describes it.
    pub waiting: Option<Value>,
    /// Pending adjudications ([`request_json`]).
    pub pending: Vec<Value>,
    /// `{"seq", "reason"}` of a failed run.
    pub failed: Option<Value>,
}

/// Whether a new event can change a run's pending adjudications.
fn touches_memory(e: &Event) -> bool {
    if e.kind.is_external() {
        return true;
    }
    e.kind == EventKind::ToolReturned
        && matches!(e.typed(), Ok(Payload::ToolReturned(r)) if r.tool.starts_with("memory."))
}

/// Reads what changed in `run` since `w` was last brought up to date; past `reads_max` new
/// events the memory is projected again rather than read event by event.
pub fn read_seen(run: &ValidRun, w: &mut Seen, reads_max: u64) -> Result<(), DataError> {
    let mut ix = IndexedLog::open(&run.log())?;
    let n = ix.len();
    // The memory is projected again only when a new event may have changed it (and on the
    // first look, and when too many events are new to read one by one).
    let mut memory = w.next_seq == 0 || n < w.next_seq || n - w.next_seq > reads_max;
    if !memory {
        for seq in w.next_seq..n {
            let e = ix.read(seq)?;
            if touches_memory(&e) {
                memory = true;
                break;
            }
        }
    }
    w.next_seq = n;
    w.waiting = waiting(run)?;
    w.failed = None;
    let mut seq = n;
    while let Some(s) = seq.checked_sub(1) {
        let e = ix.read(s)?;
        if e.kind.is_external() {
            seq = s;
            continue;
        }
        if let Ok(Payload::RunFinished(f)) = e.typed()
            && f.status == oracle_core::payload::RunStatus::Failed
        {
            w.failed = Some(json!({"seq": e.seq, "reason": f.reason}));
        }
        break;
    }
    if memory {
        let rm = crate::Home::open(&run.home).and_then(|h| h.memory(&run.arg()))?;
        w.pending = pending_adjudications(&rm);
    }
    Ok(())
}

/// The runs under `<home>/runs` a request could name (as [`run_infos`] lists them), each with
/// its log's size in bytes: what the watcher polls for change.
pub fn log_sizes(home: &Path) -> std::collections::BTreeMap<String, u64> {
    let mut seen = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(home.join("runs")) else {
        return seen;
    };
    for entry in entries.flatten() {
        let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if crate::runid::malformed(&id).is_some() {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(entry.path().join(LOG_FILE)) else {
            continue;
        };
        if meta.is_file() && entry.file_type().is_ok_and(|t| t.is_dir()) {
            seen.insert(id, meta.len());
        }
    }
    seen
}

/// The live model-call deltas of run `id`, as they stream (`oracle_runtime::live`); `None`
/// past the hub's watcher bound.
pub fn deltas(id: &str) -> Option<Subscription> {
    oracle_runtime::live::subscribe(Some(id))
}

/// Runs for the tests of this crate, and of the server's (feature `testing`): a log whose
/// events carry large payloads.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use std::path::Path;

    use oracle_core::payload::{Payload, StateChanged};
    use oracle_core::synth::{Synth, SynthConfig};
    use oracle_runtime::paths::LogPaths;
    use oracle_runtime::{Durability, LogWriter};
    use serde_json::json;

    use crate::runid::ValidRun;

    /// `<home>/runs/big`: `run_started`, then `events - 1` state writes of a string of
    /// `bytes_each` bytes each (so each record is a little larger than that).
    pub fn big_run(home: &Path, events: u64, bytes_each: usize) -> ValidRun {
        let dir = home.join("runs").join("big");
        std::fs::create_dir_all(&dir).unwrap();
        let mut w = LogWriter::create(&LogPaths::of_run(&dir), Durability::None).unwrap();
        let first = Synth::new(SynthConfig::steps(2, 7))
            .next()
            .unwrap()
            .unwrap();
        w.append_sealed(&first).unwrap();
        for seq in 1..events {
            let mut set = serde_json::Map::new();
            set.insert(
                "blob".into(),
                json!(format!("{seq}:{}", "x".repeat(bytes_each))),
            );
            let payload = Payload::StateChanged(StateChanged {
                set,
                delete: vec![],
            });
            w.append(seq, vec![seq - 1], payload).unwrap();
        }
        w.close().unwrap();
        crate::runid::validate(home, "big").unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1 << 10;

    /// Pages of large events stop at the bytes limit, before the event that would pass it, and
    /// their `next` goes on from there: following `next` reads every event exactly once.
    #[test]
    fn a_page_of_large_events_is_cut_at_the_byte_limit_and_next_goes_on() {
        let home = tempfile::tempdir().unwrap();
        let run = testing::big_run(home.path(), 60, 100 * KIB as usize);
        let bytes_max = 1 << 20;
        let mut from = 0;
        let mut seen = Vec::new();
        let mut pages = 0;
        while pages < 100 {
            pages += 1;
            let page = events_page_within(&run, from, Some(1000), bytes_max).unwrap();
            let events = page["events"].as_array().unwrap();
            assert!(!events.is_empty(), "{from}");
            // Each page fits the limit, and stops only where the next event would not.
            let size = |e: &Value| e.to_string().len() as u64 + 1;
            let bytes: u64 = events.iter().map(size).sum();
            assert!(bytes <= bytes_max, "page from {from}: {bytes} bytes");
            if let Some(n) = page["next"].as_u64() {
                let next = event(&run, n).unwrap();
                assert!(
                    bytes + size(&next) > bytes_max,
                    "page from {from} stopped early"
                );
            }
            seen.extend(events.iter().map(|e| e["seq"].as_u64().unwrap()));
            assert_eq!(page["total"], 60);
            match page["next"].as_u64() {
                Some(n) => {
                    assert_eq!(n, from + events.len() as u64);
                    from = n;
                }
                None => break,
            }
        }
        assert_eq!(seen, (0..60).collect::<Vec<u64>>());
        assert!(pages >= 6, "{pages} pages");

        // The server's own limit: 60 records of ~100 KiB (6 MiB) do not fit one page.
        let page = events_page(&run, 0, Some(1000)).unwrap();
        let n = page["events"].as_array().unwrap().len() as u64;
        assert!(
            n < 60 && page["next"] == n,
            "{n} events, next {}",
            page["next"]
        );
        let bytes: usize = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.to_string().len())
            .sum();
        assert!(bytes as u64 <= EVENTS_PAGE_BYTES_MAX);
        // The count limit still holds where the bytes do not reach theirs.
        let page = events_page(&run, 0, Some(3)).unwrap();
        assert_eq!(page["events"].as_array().unwrap().len(), 3);
        assert_eq!(page["next"], 3);
    }

    /// An event larger than the bytes limit makes a page alone (a page is never empty while
    /// events remain), and the one after it starts the next page.
    #[test]
    fn an_event_larger_than_the_page_limit_is_a_page_alone() {
        let home = tempfile::tempdir().unwrap();
        let run = testing::big_run(home.path(), 4, 300 * KIB as usize);
        for from in 1..4 {
            let page = events_page_within(&run, from, Some(1000), 100 * KIB).unwrap();
            assert_eq!(page["events"].as_array().unwrap().len(), 1, "{from}");
            assert_eq!(
                page["next"],
                if from < 3 {
                    json!(from + 1)
                } else {
                    json!(null)
                }
            );
        }
    }
}
