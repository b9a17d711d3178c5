//! Signals into a run from outside: an answer to a suspended step, a verdict on a pending
//! adjudication, a claim from outside the plan, and a resume in the background.
//!
//! Each write goes through the runtime function the command line uses, so it is checked the
//! same way and appended the same way: one event, under the run's single-writer lock (waited
//! for a bounded time), whole or not at all, and nothing at all when it is refused. The name
//! of the token that sent it is recorded in the event as `by`.
//!
//! - **Answer**: `oracle_runtime::session::answer` re-derives the run up to its suspension and
//!   checks the answer exactly as `oracle resume --step S --value V` does (the step, the
//!   question's schema, the step's `expect`, its tools' output schemas, the limits), then
//!   appends the `resumed` event alone. A later `oracle resume RUN` goes on from it.
//! - **Verdict** and **claim**: `oracle_host::Home::{adjudicate, claim}`, as `oracle
//!   adjudicate` and `oracle claim` (and a store's worker) record them.
//! - **Resume** (`"resume": true`, or `POST .../resume`): in this process, on a thread of its
//!   own, through the one resume path every front end uses (`oracle_host::Home::resume`): the
//!   run's models, secrets and declared tools are bound from what the home's key sealed in its
//!   `run.json`, and it works in the directory sealed there; a binding that changed refuses the
//!   resume, naming it. One line per resume goes to `<home>/serve-resume.log`; its outcome is in
//!   the log, which the API and the beacon read like any other.
//! - **Timers**: [`timer_wheel`] wakes runs whose `sleep` timer is due, and fires the
//!   home's due schedule ticks.

use std::path::Path;

use axum::http::StatusCode;
use oracle_host::{OutsideClaim, Submission};
use oracle_memory::{Cardinality, Claim, Criticality, Provenance, ValidTime, Verdict};
use serde_json::{Value, json};

use oracle_host::backend::{ResumeOutcome, Signalled};

use crate::config::RESUME_LOG_FILE;
use crate::error::ApiError;
use crate::runid::ValidRun;
use crate::state::AppState;

/// `POST /api/v1/runs/{id}/answer`.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    /// The step the run waits on.
    pub step: String,
    /// Its output (for a `human.ask`, the answer).
    pub value: Value,
    /// Then resume the run in the background.
    #[serde(default)]
    pub resume: bool,
}

/// `POST /api/v1/runs`: a plan's text, or the name of a code agent the server was started
/// with (`--agent NAME=FILE`), one of them.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// The plan's text.
    #[serde(default)]
    pub plan: Option<String>,
    /// The name of a code agent among the server's `--agent` flags.
    #[serde(default)]
    pub agent: Option<String>,
    /// Its inputs, as JSON values of the types the plan declares.
    #[serde(default)]
    pub inputs: serde_json::Map<String, Value>,
    /// An idempotency key: the same key with the same plan, inputs and seed is the same run.
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub seed: u64,
    /// The queue the run waits in for its turn (`oracle queue set`).
    #[serde(default)]
    pub queue: Option<String>,
    /// Its priority in the queue, 0 to 9 (higher first; default 0).
    #[serde(default)]
    pub priority: Option<u64>,
    /// Its partition in the queue.
    #[serde(default)]
    pub partition: Option<String>,
}

impl StartBody {
    /// The queue the run waits in (its `queue`, else its plan's `queue` line), checked by the
    /// host's one rule; a code agent's run waits in none yet.
    fn queue_ask(&self) -> Result<Option<oracle_host::queue::Ask>, ApiError> {
        let queue = oracle_host::queue::ask_for(
            self.plan.as_deref().unwrap_or_default(),
            self.queue.as_deref(),
            self.priority,
            self.partition.as_deref(),
        )?;
        if queue.is_some() && self.agent.is_some() {
            return Err(oracle_host::queue::not_yet("a code agent's run").into());
        }
        Ok(queue)
    }
}

/// `POST /api/v1/runs/{id}/cancel`.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Why the run is cancelled: recorded in its last event.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /api/v1/runs/{id}/fork`: where the fork starts (`at` or `step`, one of them) and
/// the value given for its step, if any.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    #[serde(default)]
    pub at: Option<u64>,
    #[serde(default)]
    pub step: Option<String>,
    #[serde(default)]
    pub value: Option<Value>,
    /// The text of a plan for the fork to follow (checked against the shared prefix first,
    /// `409 upgrade_refused` if it does not re-derive it); its `use`s are not read.
    #[serde(default)]
    pub plan: Option<String>,
    /// An idempotency key: the same key with the same parent, point, value and plan finds the
    /// fork made first (`200`, `existing: true`); with anything else, `409 key_conflict`.
    #[serde(default)]
    pub key: Option<String>,
}

/// Forks `run` as `oracle fork` does, by `by`, and drives the fork until it finishes or
/// suspends: `201 {"ok": true, "run", "parent", "shared", "status", "events", "head",
/// "existing": false}`, or `200 {"ok": true, "run", "status", "existing": true, "key"}` when
/// the key made that fork already.
pub fn fork(
    state: &AppState,
    run: &ValidRun,
    by: &str,
    body: ForkBody,
) -> Result<(StatusCode, Value), ApiError> {
    state
        .backend
        .file_home_only(oracle_host::backend::FileHomeOnly::Fork)?;
    let at = match (body.at, body.step) {
        (Some(seq), None) => oracle_host::ForkAt::Seq(seq),
        (None, Some(step)) => oracle_host::ForkAt::Step(step),
        _ => {
            return Err(ApiError::BadRequest(
                "give one of `at` (a seq) or `step` (a step name)".into(),
            ));
        }
    };
    let forked = host(state)?.fork(
        &run.arg(),
        oracle_host::Fork {
            at,
            value: body.value,
            plan: body.plan.map(oracle_host::NewPlan::Text),
            key: body.key,
            by: Some(by.to_owned()),
            door: oracle_host::Door::Network {
                root: state.config.root.as_deref(),
            },
            given: oracle_host::Given::default(),
            drive: oracle_host::Drive::default(),
            progress: None,
        },
    )?;
    let forked = match forked {
        oracle_host::Start::New(f) => f,
        oracle_host::Start::Existing(e) => {
            return Ok((
                StatusCode::OK,
                json!({
                    "ok": true, "run": e.id, "status": e.status, "existing": true,
                    "key": e.key, "by": by,
                }),
            ));
        }
    };
    let (status, events, head) = match &forked.session {
        Some(s) => (
            oracle_host::ending_word(&s.report.ending),
            Some(s.report.events),
            Some(s.report.head),
        ),
        None => ("suspended", None, None),
    };
    Ok((
        StatusCode::CREATED,
        json!({
            "ok": true, "run": forked.fork.id, "parent": forked.parent, "shared": forked.shared,
            "status": status, "events": events, "head": head, "by": by, "existing": false,
        }),
    ))
}

/// `POST /api/v1/runs/{id}/adjudications/{handle}`.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictBody {
    /// `affirm`, `deny` or `unknown`.
    pub verdict: String,
    /// Only `external_first_hand` is accepted.
    pub evidence: String,
    #[serde(default)]
    pub note: String,
    /// The logical tick (default and earliest: one after the log's last event).
    pub now: Option<u64>,
    #[serde(default)]
    pub resume: bool,
}

/// When a claim holds, in logical ticks.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidBody {
    pub start: u64,
    pub end: Option<u64>,
    /// Confidence in the window (default 100).
    pub confidence_pct: Option<u64>,
}

/// `POST /api/v1/runs/{id}/claims`.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    pub subject: String,
    pub predicate: String,
    pub value: Value,
    /// `external_first_hand` or `user_asserted`.
    pub provenance: String,
    /// `low`, `medium` (default), `high` or `critical`.
    pub criticality: Option<Criticality>,
    pub valid: Option<ValidBody>,
    #[serde(default)]
    pub note: String,
    pub now: Option<u64>,
    #[serde(default)]
    pub resume: bool,
}

/// The host's handle on this server's home: resumed runs work in the directory each one
/// recorded (sealed in its run.json), as the server drives runs started elsewhere, at the
/// server's rates.
fn host(state: &AppState) -> Result<oracle_host::Home, ApiError> {
    // Every drive of the server keeps its rates (`--model-rate`, admitted when it started).
    let rates = state.config.given.rates()?;
    Ok(oracle_host::Home::open(&state.home)?
        .in_recorded_roots()
        .with_rates(rates, None))
}

/// Records the answer for the step `run` waits on, by `by`; then, if asked, resumes the run in
/// the background. `{"ok": true, "run", "step", "seq", "events", "head", "by", "resume"}`.
pub fn answer(
    state: &AppState,
    run: &ValidRun,
    by: &str,
    body: AnswerBody,
) -> Result<Value, ApiError> {
    let step = body.step.clone();
    let done =
        state
            .backend
            .answer(&state.drives, run, (body.step, body.value), by, body.resume)?;
    Ok(match done {
        Signalled::Queued { queued: q, .. } => json!({
            "ok": true, "run": q.run, "step": step, "by": by, "queued": queued(&q),
        }),
        Signalled::Recorded { done, resumed } => json!({
            "ok": true,
            "run": done.id,
            "step": done.step,
            "seq": done.seq,
            "events": done.events,
            "head": done.head,
            "by": by,
            "resume": started(resumed),
        }),
    })
}

/// `POST /api/v1/runs/{id}/events/{name}`: the event's value.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventBody {
    pub value: Value,
}

/// Sends outside event `name` with `body.value` to `run`, asked by `by`
/// ([`oracle_host::Backend::send_event`]): kept beside the run and, when the run waits on it,
/// delivered by a resume in the background. `{"ok": true, "run", "event", "n", "by",
/// "resume"}`, or over a store `{"ok": true, "run", "event", "by", "queued"}`.
pub fn send_event(
    state: &AppState,
    run: &ValidRun,
    name: &str,
    by: &str,
    body: EventBody,
) -> Result<Value, ApiError> {
    let done = state
        .backend
        .send_event(&state.drives, run, (name, &body.value), by)?;
    Ok(match done {
        Signalled::Queued { queued: q, .. } => json!({
            "ok": true, "run": q.run, "event": name, "by": by, "queued": queued(&q),
        }),
        Signalled::Recorded { done, resumed } => json!({
            "ok": true, "run": run.id, "event": name, "n": done, "by": by,
            "resume": started(resumed),
        }),
    })
}

/// Starts the run `body` asks for in the background, in the server's `--root`, asked by `by`.
/// `201 {"ok": true, "run", "status": "running", "existing": false, "key", "by", "warnings"}`;
/// for a key that started a run already with the same plan, inputs and seed, `200` with that
/// run, its current `status` and `"existing": true`. Its outcome is in its log; one line goes to
/// `<home>/serve-resume.log` when the drive ends.
pub fn start(state: &AppState, by: &str, body: StartBody) -> Result<(StatusCode, Value), ApiError> {
    let root = state.config.root.as_deref();
    let given = &state.config.given;
    let queue = body.queue_ask()?;
    let plan = match (body.plan, body.agent) {
        (Some(plan), None) => plan,
        (None, Some(agent)) if body.key.is_none() => {
            let request = oracle_host::code::AgentRequest {
                agent,
                inputs: body.inputs,
                seed: body.seed,
            };
            let agents = &state.config.agents;
            let s =
                state
                    .backend
                    .start_agent(&state.drives, &request, agents, (root, given), by)?;
            return Ok((
                StatusCode::CREATED,
                json!({
                    "ok": true, "run": s.run, "status": s.status, "existing": false,
                    "key": s.key, "by": by, "warnings": s.warnings,
                }),
            ));
        }
        (None, Some(_)) => {
            return Err(ApiError::BadRequest(
                "`key` with `agent`: a code agent's start takes no idempotency key yet".into(),
            ));
        }
        _ => {
            return Err(ApiError::BadRequest(
                "give one of `plan` (a plan's text) and `agent` (an agent's name)".into(),
            ));
        }
    };
    let request = oracle_host::request::RunRequest {
        plan,
        inputs: body.inputs,
        key: body.key,
        seed: body.seed,
        queue,
    };
    let s = state
        .backend
        .start(&state.drives, request, (root, given), by)?;
    Ok(if s.existing {
        (
            StatusCode::OK,
            json!({
                "ok": true, "run": s.run, "status": s.status, "existing": true,
                "key": s.key, "by": by,
            }),
        )
    } else {
        (
            StatusCode::CREATED,
            json!({
                "ok": true, "run": s.run, "status": s.status, "existing": false,
                "key": s.key, "by": by, "warnings": s.warnings,
            }),
        )
    })
}

/// Cancels `run`, by `by` (the token's name), recording why. `{"ok": true, "run", "status":
/// "cancelled", "seq", "head", "by", "reason"}`, or `"status": "cancel_requested"` (no `seq`)
/// when the process driving it had not reached a decision boundary within the host's wait.
pub fn cancel(
    state: &AppState,
    run: &ValidRun,
    by: &str,
    body: CancelBody,
) -> Result<Value, ApiError> {
    let reason = body.reason.unwrap_or_else(|| "no reason given".into());
    let cancel = oracle_host::Cancel {
        by: Some(by.to_owned()),
        reason: reason.clone(),
    };
    use oracle_host::backend::CancelOutcome;
    Ok(match state.backend.cancel(run, cancel)? {
        CancelOutcome::Queued(q) => json!({
            "ok": true, "run": q.run, "status": "cancel_queued", "by": by, "reason": reason,
            "queued": queued(&q),
        }),
        CancelOutcome::Now(oracle_host::Cancelled::Recorded { id, seq, head, .. }) => json!({
            "ok": true, "run": id, "status": "cancelled", "seq": seq, "head": head,
            "by": by, "reason": reason,
        }),
        CancelOutcome::Now(oracle_host::Cancelled::Requested { id, .. }) => json!({
            "ok": true, "run": id, "status": "cancel_requested", "by": by, "reason": reason,
        }),
    })
}

/// Gives a verdict on adjudication `handle` of `run`, by `by`.
/// `{"ok": true, "outcome": "applied", "run", "handle", "verdict", "seq", "effects", "subject",
/// "predicate", "belief", "by", "resume"}`, as `oracle adjudicate --json` (plus `by`, `resume`).
pub fn adjudicate(
    state: &AppState,
    run: &ValidRun,
    handle: &str,
    by: &str,
    body: VerdictBody,
) -> Result<Value, ApiError> {
    let verdict: Verdict =
        body.verdict
            .parse()
            .map_err(|e: oracle_memory::adjudicate::ReadError| {
                ApiError::BadRequest(format!("verdict: {e}"))
            })?;
    let evidence: Provenance =
        body.evidence
            .parse()
            .map_err(|e: oracle_memory::claim::UnknownProvenance| {
                ApiError::BadRequest(format!("evidence: {e}"))
            })?;
    check_now(body.now)?;
    let sub = Submission {
        handle: handle.to_owned(),
        verdict,
        evidence,
        note: body.note,
        now: body.now,
        by: Some(by.to_owned()),
    };
    let done = state
        .backend
        .adjudicate(&state.drives, run, &sub, by, body.resume)?;
    Ok(signed(done, by))
}

/// A named store is a file home's (`<home>/memory`): over a database store it is refused.
fn file_home_only(state: &AppState) -> Result<(), ApiError> {
    Ok(state
        .backend
        .file_home_only(oracle_host::backend::FileHomeOnly::NamedStores)?)
}

/// `GET /api/v1/memory/{name}/adjudications`: `{"store": {name, records, head},
/// "adjudications": [request]}`, each request naming the runs behind both claims.
pub fn store_requests(state: &AppState, name: &str) -> Result<Value, ApiError> {
    file_home_only(state)?;
    let store = host(state)?.store(name)?;
    Ok(json!({
        "store": store.head.to_value(name),
        "adjudications": oracle_host::shared::requests_json(&store),
    }))
}

/// Gives a verdict on request `handle` of store `name`, by `by`, under the store's lock (two
/// racing verdicts: one applies, the other is refused 409 `already_resolved`); then resumes in
/// the background every run this server sees suspended on a line of that store. `{"ok": true,
/// "outcome": "applied", "store", "handle", "verdict", "effects", "by", "resumed": [run]}`.
pub fn store_adjudicate(
    state: &AppState,
    name: &str,
    handle: &str,
    by: &str,
    body: VerdictBody,
) -> Result<Value, ApiError> {
    file_home_only(state)?;
    check_now(body.now)?;
    let v = oracle_host::shared::StoreVerdict {
        handle: handle.to_owned(),
        verdict: body
            .verdict
            .parse()
            .map_err(|e: oracle_memory::adjudicate::ReadError| {
                ApiError::BadRequest(format!("verdict: {e}"))
            })?,
        evidence: body
            .evidence
            .parse()
            .map_err(|e: oracle_memory::claim::UnknownProvenance| {
                ApiError::BadRequest(format!("evidence: {e}"))
            })?,
        note: body.note,
        by: Some(by.to_owned()),
    };
    let (store, effects) = host(state)?.store_adjudicate(name, &v)?;
    let resumed = wake_store_waiters(state, name, by);
    Ok(json!({
        "ok": true, "outcome": "applied", "store": store.head.to_value(name),
        "handle": v.handle, "verdict": v.verdict, "effects": effects.to_value(), "by": by,
        "resumed": resumed,
    }))
}

/// Resumes in the background the runs the watcher sees suspended on a line of store `name`
/// (their reason says `(in store NAME: ...)`); the ids started. A run that cannot be resumed
/// now (busy, a binding refused) is left suspended: `oracle resume` still takes it.
fn wake_store_waiters(state: &AppState, name: &str, by: &str) -> Vec<String> {
    let marker = format!(" (in store {name}: ");
    let inbox = state.watch.inbox();
    let mut started = Vec::new();
    for item in inbox["suspended"].as_array().into_iter().flatten() {
        let waits_here = item["reason"].as_str().is_some_and(|r| r.contains(&marker));
        let Some(id) = item["run"].as_str().filter(|_| waits_here) else {
            continue;
        };
        let Ok(run) = state.run(id) else { continue };
        let resumed = host(state).and_then(|h| {
            let place = state.drives.take()?;
            Ok(state.drives.resume(&h, &run, by, place)?)
        });
        if resumed.is_ok() {
            started.push(id.to_owned());
        }
    }
    started
}

/// A verdict's or claim's answer: recorded, the applied JSON with who sent it (`by`) and,
/// when asked, the background resume started after it; queued for a store's workers, what the
/// check made of it in a copy of the run (what the worker records, unless the run moved on
/// meanwhile), who sent it, and the signal.
fn signed(done: Signalled<Value>, by: &str) -> Value {
    match done {
        Signalled::Recorded {
            done: mut v,
            resumed,
        } => {
            v["by"] = json!(by);
            v["resume"] = started(resumed);
            v
        }
        Signalled::Queued { queued: q, checked } => json!({
            "ok": true, "run": q.run, "by": by, "outcome": "queued", "checked": checked,
            "queued": queued(&q),
        }),
    }
}

/// The `resume` member of a signal's answer: `{"started": true}` when a resume was started
/// after it, else `null`.
fn started(resumed: bool) -> Value {
    if resumed {
        json!({"started": true})
    } else {
        Value::Null
    }
}

/// The `queued` member of a write queued for a store's workers.
fn queued(q: &oracle_host::backend::Queued) -> Value {
    json!({"signal": q.signal, "kind": q.kind})
}

fn check_now(now: Option<u64>) -> Result<(), ApiError> {
    match now {
        Some(t) => oracle_core::event::check_time("now", t)
            .map(|_| ())
            .map_err(|e| ApiError::BadRequest(e.to_string())),
        None => Ok(()),
    }
}

/// Records a claim from outside the plan in `run`, by `by`, through the same gate as
/// `memory.assert` (`oracle claim`). `{"ok": true, "outcome": "recorded", "run", "seq",
/// "time", "claim", "disposition", "reason", "conflicts_with", "adjudication", "subject",
/// "predicate", "belief", "by", "resume"}`.
pub fn claim(
    state: &AppState,
    run: &ValidRun,
    by: &str,
    body: ClaimBody,
) -> Result<Value, ApiError> {
    let provenance: Provenance =
        body.provenance
            .parse()
            .map_err(|e: oracle_memory::claim::UnknownProvenance| {
                ApiError::BadRequest(format!("provenance: {e}"))
            })?;
    check_now(body.now)?;
    // A float (or another value with no canonical encoding) is named as such first.
    oracle_core::canon::check(&body.value)
        .map_err(|e| ApiError::BadRequest(format!("value: {e}")))?;
    oracle_host::admit::check_outside_value(&body.value, "value")
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let valid = match body.valid {
        None => None,
        Some(v) => {
            for t in [Some(v.start), v.end].into_iter().flatten() {
                oracle_core::event::check_time("valid", t)
                    .map_err(|e| ApiError::BadRequest(e.to_string()))?;
            }
            Some(ValidTime {
                start: v.start,
                end: v.end,
                confidence_pct: v.confidence_pct.unwrap_or(100),
            })
        }
    };
    let outside = OutsideClaim {
        claim: Claim {
            subject: body.subject,
            predicate: body.predicate,
            value: body.value,
            provenance,
            // The line's, decided where the claim is recorded (`Home::claim`).
            cardinality: Cardinality::Functional,
            valid,
            criticality: body.criticality.unwrap_or_default(),
            derived_from: Vec::new(),
        },
        note: body.note,
        now: body.now,
        by: Some(by.to_owned()),
    };
    let done = state
        .backend
        .claim(&state.drives, run, &outside, by, body.resume)?;
    Ok(signed(done, by))
}

/// Resumes `run` in the background, in this process, and returns `{"started": true}` once its
/// bindings are checked (a binding the home's key does not vouch for is refused here, before
/// anything runs). The drive's outcome is in the run's log; one line per resume, with who asked
/// and how it ended, is appended to `<home>/serve-resume.log`.
pub fn resume_in_background(state: &AppState, run: &ValidRun, by: &str) -> Result<Value, ApiError> {
    Ok(match state.backend.resume(&state.drives, run, by)? {
        ResumeOutcome::Started => json!({"started": true}),
        ResumeOutcome::Queued(q) => json!({"started": false, "queued": queued(&q)}),
    })
}

/// Drives on, one at a time on a thread of its own, every run a dead process left behind
/// (`--recover`): one line per run, `recover RUN (interrupted): completed (16 events)`, goes to
/// `<home>/serve-resume.log`. Returns how many runs it takes up.
pub fn recover_in_background(state: &AppState) -> Result<usize, ApiError> {
    let host = host(state)?;
    let runs = host.left_behind()?;
    let count = runs.len();
    let log_path = state.home.join(RESUME_LOG_FILE);
    std::thread::Builder::new()
        .name("recover".into())
        .spawn(move || {
            for (run, why) in runs {
                let what = format!("recover {run} ({})", why.as_str());
                log_outcome(&log_path, &what, host.recover(&run, why));
            }
        })
        .map_err(|e| ApiError::Internal(format!("cannot start a thread to recover runs: {e}")))?;
    Ok(count)
}

/// The timer wheel of a file home (a thread for the server's life): every
/// [`TIMER_POLL_MS`](crate::config::TIMER_POLL_MS) it lists the home's timer index for due
/// timers (timers that came due while nothing ran included) and wakes them through the host
/// (`oracle_host::Home::wake_indexed`), [`TIMER_WAKERS_MAX`](crate::config::TIMER_WAKERS_MAX)
/// at a time: each fired once under its run's writer lock, then driven on. One line per wake
/// goes to `<home>/serve-resume.log`.
pub fn timer_wheel(state: &AppState, stop: &std::sync::atomic::AtomicBool) {
    use std::sync::atomic::Ordering;
    let Ok(host) = host(state) else {
        return;
    };
    let log_path = state.home.join(RESUME_LOG_FILE);
    while !stop.load(Ordering::Relaxed) {
        let due = host.due_timers(oracle_host::now_ms());
        wake_due(&host, &due, &log_path, stop);
        if !stop.load(Ordering::Relaxed) {
            fire_schedules(&host, &log_path);
        }
        if !stop.load(Ordering::Relaxed) {
            start_queued(&host, &state.drives, &log_path);
        }
        std::thread::sleep(std::time::Duration::from_millis(
            crate::config::TIMER_POLL_MS,
        ));
    }
}

/// Starts the runs submitted through the API whose turn in their queue has come, each in the
/// server's pool of background drives; a failure to look is one line of the resume log.
fn start_queued(host: &oracle_host::Home, drives: &oracle_host::Background, log_path: &Path) {
    if let Err(e) = host.queue_dispatch(drives) {
        oracle_host::background::append_log(
            log_path,
            &format!("queues: refused: {e} ({})", e.code()),
        );
    }
}

/// Wakes `due` with at most [`TIMER_WAKERS_MAX`](crate::config::TIMER_WAKERS_MAX) threads,
/// each taking the next timer from a shared cursor (so a slow wake holds up only its thread);
/// returns when every one was tried or `stop` was set.
fn wake_due(
    host: &oracle_host::Home,
    due: &[oracle_host::timers::Timer],
    log_path: &Path,
    stop: &std::sync::atomic::AtomicBool,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let wakers = crate::config::TIMER_WAKERS_MAX.min(due.len());
    std::thread::scope(|s| {
        for _ in 0..wakers {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let Some(timer) = due.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    fire_one(host, timer, log_path);
                }
            });
        }
    });
}

/// Fires one due entry of the timer index: a timer wakes its run; a real-time adjudication
/// expiry expires the run's due requests (then resumes it if it waits on a belief). One line
/// per outcome goes to the resume log.
fn fire_one(host: &oracle_host::Home, timer: &oracle_host::timers::Timer, log_path: &Path) {
    let due = oracle_host::rfc3339(timer.due_ms);
    match timer.what {
        oracle_host::timers::Due::Wake => {
            let what = format!("wake {} (timer due {due})", timer.run);
            log_outcome(log_path, &what, host.wake_indexed(timer).map(|r| r.session));
        }
        oracle_host::timers::Due::Expiry => {
            let what = format!("expire {} (adjudication due {due})", timer.run);
            match host.expire_indexed(timer) {
                Ok(x) => {
                    let handles: Vec<&str> =
                        x.swept.expired.iter().map(|e| e.handle.as_str()).collect();
                    append_log(
                        log_path,
                        &format!("{what}: expired [{}]", handles.join(", ")),
                    );
                    if let Some(resumed) = x.resumed {
                        let what = format!("resume {} after the expiry", timer.run);
                        log_outcome(log_path, &what, resumed.map(|r| r.session));
                    }
                }
                Err(e) => log_outcome(log_path, &what, Err(e)),
            }
        }
    }
}

/// Fires the home's due schedule ticks (`oracle_host::Home::fire_schedules`): each tick's run
/// starts in the background under the tick's idempotency key, so another server sweeping the
/// same home starts nothing twice. One line per tick goes to `<home>/serve-resume.log`.
fn fire_schedules(host: &oracle_host::Home, log_path: &Path) {
    let ticks = host.fire_schedules(oracle_host::now_ms(), &oracle_host::schedule::Background);
    for t in ticks {
        append_log(log_path, &oracle_host::schedule_store::tick_line(&t));
    }
}

pub use oracle_host::background::append_log;
use oracle_host::background::log_outcome;
