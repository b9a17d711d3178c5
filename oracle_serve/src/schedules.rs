//! `/api/v1/schedules`: list, add, pause, resume, trigger and delete schedules, through the
//! host's one [`oracle_host::Backend`] (a file home's schedules, or a store's).
//! A schedule added through the API keeps its plan's text and works in the server's `--root`,
//! with the rules of a run started through the API (`oracle_host::admit`).

use std::collections::BTreeMap;

use oracle_host::schedule::{CatchUp, Cursor, NewSchedule, Overlap, Schedule};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::state::AppState;

/// `POST /api/v1/schedules`.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddBody {
    pub name: String,
    /// The plan's text.
    pub plan: String,
    pub cron: String,
    #[serde(default)]
    pub timezone: Option<String>,
    /// Inputs as `oracle run --input NAME=VALUE` takes them.
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    #[serde(default = "skip")]
    pub overlap: Overlap,
    #[serde(default = "none")]
    pub catch_up: CatchUp,
    /// The queue each tick's run waits in, its priority and partition (as `POST /runs`).
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub priority: Option<u64>,
    #[serde(default)]
    pub partition: Option<String>,
}

fn skip() -> Overlap {
    Overlap::Skip
}

fn none() -> CatchUp {
    CatchUp::None
}

fn now() -> u64 {
    oracle_host::now_ms()
}

fn view(s: &Schedule, cursor: &Cursor) -> Result<Value, ApiError> {
    Ok(s.view(s.next_at(now())?, cursor))
}

/// Every schedule with its next fire time: `{"schedules": [...]}`.
pub fn list(state: &AppState) -> Result<Value, ApiError> {
    let all: Vec<(Schedule, Cursor)> = state.backend.schedules()?;
    let views: Result<Vec<Value>, ApiError> = all.iter().map(|(s, c)| view(s, c)).collect();
    Ok(json!({"schedules": views?}))
}

/// Adds the schedule `body` asks for, in the server's `--root`.
pub fn add(state: &AppState, body: AddBody) -> Result<Value, ApiError> {
    let admitted = oracle_host::admit(
        oracle_host::Door::Network {
            root: state.config.root.as_deref(),
        },
        oracle_host::admit::Plan {
            text: &body.plan,
            inherited: &[],
            works_in: None,
        },
    )?;
    let root = admitted.root.ok_or(oracle_host::HostError::StartsOff)?;
    let new = NewSchedule {
        plan: root.join(format!("{}.plan", body.name)),
        name: body.name,
        cron: body.cron,
        timezone: body.timezone,
        inputs: body.inputs.into_iter().collect(),
        overlap: body.overlap,
        catch_up: body.catch_up,
        root: root.clone(),
        plan_text: Some(body.plan),
        queue: body.queue,
        priority: body.priority,
        partition: body.partition,
    };
    let s = state.backend.schedule_add(new, now())?;
    view(&s, &Cursor::default())
}

/// Pauses (`true`) or resumes schedule `name`.
pub fn pause(state: &AppState, name: &str, paused: bool) -> Result<Value, ApiError> {
    let s = state.backend.schedule_pause(name, paused, now())?;
    view(&s, &Cursor::default())
}

/// Removes schedule `name` (its runs stay).
pub fn remove(state: &AppState, name: &str) -> Result<Value, ApiError> {
    let s = state.backend.schedule_remove(name)?;
    Ok(json!({"ok": true, "removed": s.name}))
}

/// Starts a run of `name` now, outside its ticks: in the background on a file home, queued for
/// the workers over a store.
pub fn trigger(state: &AppState, name: &str) -> Result<Value, ApiError> {
    let t = state.backend.schedule_trigger(name, now())?;
    Ok(json!({"ok": true, "run": t.run, "status": t.status, "existing": t.existing}))
}
