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
//! - **Verdict** and **claim**: `oracle_runtime::adjudication::{adjudicate, claim}`, as
//!   `oracle adjudicate` and `oracle claim`.
//! - **Resume** (`"resume": true`, or `POST .../resume`): the `oracle` binary itself is started
//!   as `oracle --home H resume RUN` in the run's working directory (what `run.json` names), so
//!   a background resume binds models, secrets and declared tools exactly as the command line
//!   does. Its output goes to `<home>/serve-resume.log`; its outcome is in the log, which the
//!   API and the beacon read like any other.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use oracle_memory::{Cardinality, Claim, Criticality, Provenance, ValidTime, Verdict};
use oracle_runtime::adjudication::{self, OutsideClaim, Submission};
use oracle_runtime::declared::{self, McpMode};
use oracle_runtime::secrets::Secrets;
use oracle_runtime::session;
use oracle_runtime::tool::Registry;
use oracle_runtime::writer::Durability;
use serde_json::{Value, json};

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

/// The tools a recorded run needs to be re-derived up to its suspension: the built-ins with
/// the models `run.json` binds and the secrets it names (read from this server's environment,
/// so an answer holding one is refused), and the declared tools of the directories the run
/// keeps, checked against the pins of its first event. MCP servers are not started: their
/// answers come from the log.
pub fn registry_for(run: &ValidRun) -> Result<Registry, ApiError> {
    let models = session::stored_models(&run.dir);
    let vars = session::stored_secret_vars(&run.dir);
    let values: Vec<(String, String)> = vars
        .iter()
        .filter_map(|(name, var)| Some((name.clone(), std::env::var(var).ok()?)))
        .collect();
    let secrets = Arc::new(Secrets::new(values).unwrap_or_default());
    let mut registry = oracle_runtime::tools::builtin_with(Arc::new(models), secrets.clone());
    let dirs = session::stored_tools(&run.dir);
    if dirs.is_empty() {
        return Ok(registry);
    }
    let problems = |p: Vec<declared::Problem>| {
        ApiError::Unavailable(format!(
            "{}: the run's declared tools cannot be loaded: {}",
            run.id,
            p.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ))
    };
    let loaded = declared::load(&dirs, &secrets, McpMode::Recorded(&run.dir)).map_err(problems)?;
    declared::declare(&mut registry, loaded).map_err(problems)?;
    let recorded = session::recorded_pins(&run.run_dir())?;
    let current = registry.pins().unwrap_or_default();
    declared::compare(&recorded, &current).map_err(|changed| {
        ApiError::Unavailable(format!(
            "{}: {changed}; answer with `oracle resume --tools DIR` instead",
            run.id
        ))
    })?;
    Ok(registry)
}

/// Records the answer for the step `run` waits on, by `by`; then, if asked, resumes the run in
/// the background. `{"ok": true, "run", "step", "seq", "events", "head", "by", "resume"}`.
pub fn answer(
    state: &AppState,
    run: &ValidRun,
    by: &str,
    body: AnswerBody,
) -> Result<Value, ApiError> {
    let registry = registry_for(run)?;
    let answered = session::answer(
        &run.home,
        &run.arg(),
        (body.step, body.value),
        Some(by.to_owned()),
        Durability::DEFAULT,
        &registry,
    )?;
    let resume = body
        .resume
        .then(|| resume_in_background(state, run, by))
        .transpose()?;
    Ok(json!({
        "ok": true,
        "run": answered.id,
        "step": answered.step,
        "seq": answered.seq,
        "events": answered.events,
        "head": answered.head,
        "by": by,
        "resume": resume,
    }))
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
    let verdict: Verdict = body
        .verdict
        .parse()
        .map_err(|e: String| ApiError::BadRequest(format!("verdict: {e}")))?;
    let evidence: Provenance = body
        .evidence
        .parse()
        .map_err(|e: String| ApiError::BadRequest(format!("evidence: {e}")))?;
    check_now(body.now)?;
    let sub = Submission {
        handle: handle.to_owned(),
        verdict,
        evidence,
        note: body.note,
        now: body.now,
        by: Some(by.to_owned()),
    };
    let applied = adjudication::adjudicate(&run.home, &run.arg(), &sub, Durability::DEFAULT)?;
    signed(state, run, by, body.resume, applied.to_json())
}

/// A signal's answer: `v` with who sent it (`by`) and, when asked, the background resume
/// started after it.
fn signed(
    state: &AppState,
    run: &ValidRun,
    by: &str,
    resume: bool,
    mut v: Value,
) -> Result<Value, ApiError> {
    let resume = resume
        .then(|| resume_in_background(state, run, by))
        .transpose()?;
    v["by"] = json!(by);
    v["resume"] = json!(resume);
    Ok(v)
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
    let provenance: Provenance = body
        .provenance
        .parse()
        .map_err(|e: String| ApiError::BadRequest(format!("provenance: {e}")))?;
    check_now(body.now)?;
    // A float (or another value with no canonical encoding) is named as such first.
    oracle_core::canon::check(&body.value)
        .map_err(|e| ApiError::BadRequest(format!("value: {e}")))?;
    session::check_outside_value(&body.value, "value").map_err(ApiError::BadRequest)?;
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
    // A claim joins its line with the line's cardinality (fixed by the line's first claim).
    let rm = adjudication::load(&run.home, &run.arg())?;
    let cardinality = rm
        .memory
        .line_cardinality(&body.subject, &body.predicate)
        .unwrap_or(Cardinality::Functional);
    let outside = OutsideClaim {
        claim: Claim {
            subject: body.subject,
            predicate: body.predicate,
            value: body.value,
            provenance,
            cardinality,
            valid,
            criticality: body.criticality.unwrap_or_default(),
            derived_from: Vec::new(),
        },
        note: body.note,
        now: body.now,
        by: Some(by.to_owned()),
    };
    let applied = adjudication::claim(&run.home, &run.arg(), &outside, Durability::DEFAULT)?;
    signed(state, run, by, body.resume, applied.to_json())
}

/// Starts `oracle --home H resume RUN` for `run` in the background, in the working directory
/// its `run.json` names (where `oracle resume` must run), and returns `{"started": true}` once
/// the program started. Its output is appended to `<home>/serve-resume.log`; the server reaps
/// it when it exits. Whether the resume got anywhere is in the run's log.
pub fn resume_in_background(state: &AppState, run: &ValidRun, by: &str) -> Result<Value, ApiError> {
    let program = state.config.resume_program.as_ref().ok_or_else(|| {
        ApiError::Unavailable(
            "this server resumes no runs (it was started without the oracle program); run `oracle resume RUN`".into(),
        )
    })?;
    let root = session::stored_root(&run.dir)
        .filter(|p| p.is_dir())
        .ok_or_else(|| {
            ApiError::Unavailable(format!(
                "{}: run.json names no working directory that exists here, and `oracle resume` must run where the run started; resume it by hand",
                run.id
            ))
        })?;
    let log_path = state.home.join(RESUME_LOG_FILE);
    let log = open_log(&log_path)
        .map_err(|e| ApiError::Internal(format!("{}: {e}", log_path.display())))?;
    {
        use std::io::Write as _;
        let mut l = &log;
        let _ = writeln!(l, "--- resume {} (asked by {by})", run.id);
    }
    let err_log = log
        .try_clone()
        .map_err(|e| ApiError::Internal(format!("{}: {e}", log_path.display())))?;
    let mut child = Command::new(program)
        .arg("--home")
        .arg(state.home.as_path())
        .arg("resume")
        .arg(&run.dir)
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err_log))
        .spawn()
        .map_err(|e| ApiError::Internal(format!("{}: cannot start: {e}", program.display())))?;
    // Reaped when it exits, so no zombie outlives it.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(json!({"started": true}))
}

fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}
