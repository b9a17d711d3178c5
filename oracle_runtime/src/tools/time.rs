//! Wall time for plans: `clock.wall` reads the clock once and its reply is recorded like any
//! impure tool's; `sleep` suspends the step on a timer the engine records (`timer_set`) and
//! a waker fires (`timer_fired`). Neither is ever called again on replay for its time.

use serde_json::{Value, json};

use super::{arg_str, count, decl, object, string};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};
use crate::wall;

/// The tool name of a `sleep` step: the engine recognises a timer by it.
pub const SLEEP_TOOL: &str = "sleep";

pub use oracle_plan::policy::BACKOFF_TOOL;

/// The argument naming a wait's deadline (`human.ask`, `memory.query` with `require:
/// "resolved"`): a duration from when it is asked, or an instant.
pub const DEADLINE_ARG: &str = "deadline";

/// The argument giving the answer recorded when a wait's deadline passes first (the plan's
/// `on timeout VALUE`); absent, the step fails then (`on timeout fail`).
pub const ON_TIMEOUT_ARG: &str = "on_timeout";

/// What a timer stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerKind {
    /// A `sleep` step: woken, never answered.
    Sleep,
    /// A `human.ask` with a deadline, or a belief wait with one (`memory.query {require:
    /// "resolved", deadline}`): an answer (a verdict) or the deadline, whichever is recorded
    /// first.
    Deadline,
    /// A wait between two attempts of a step with a retry policy
    /// ([`oracle_plan::policy::BACKOFF_TOOL`]): woken like a `sleep`, or fired by the drive
    /// itself when due within [`crate::wall::BACKOFF_IN_PROCESS_MS_MAX`].
    Backoff,
}

/// Whether a call of `tool` can set a timer: its input decides whether and when (so whoever
/// keeps inputs for later decisions must keep these).
pub fn may_set_timer(tool: &str) -> bool {
    matches!(
        tool,
        SLEEP_TOOL
            | BACKOFF_TOOL
            | oracle_plan::agent::ASK_TOOL
            | oracle_memory::tools::QUERY
            | super::event::WAIT_EVENT_TOOL
    )
}

/// The timer a call of `tool` with `input` suspends on, if any.
pub fn timer_kind(tool: &str, input: &Value) -> Option<TimerKind> {
    match tool {
        SLEEP_TOOL => Some(TimerKind::Sleep),
        BACKOFF_TOOL => Some(TimerKind::Backoff),
        oracle_plan::agent::ASK_TOOL
        | oracle_memory::tools::QUERY
        | super::event::WAIT_EVENT_TOOL
            if input.get(DEADLINE_ARG).is_some() =>
        {
            Some(TimerKind::Deadline)
        }
        _ => None,
    }
}

/// Why a timer's arguments give no due time. Recorded as the call's failure (or, for a timer
/// the engine sets, its error), so worded as before.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimerArgError {
    #[error("argument `deadline` must be a string: a duration (2d) or an RFC 3339 instant")]
    Deadline,
    #[error("argument `for` must be a string")]
    For,
    #[error("argument `until` must be a string")]
    Until,
    #[error("give exactly one of `for` (a duration) and `until` (an instant)")]
    OneOf,
    #[error("argument `wait_ms` must be a whole number of milliseconds")]
    Backoff,
    #[error(transparent)]
    Wall(#[from] wall::WallError),
}

/// When a timer of `kind` set at `now_ms` by a call of `step` with `input` is due, in a run
/// seeded `seed` (a backoff's jitter is drawn from it).
pub fn timer_due_ms(
    kind: TimerKind,
    input: &Value,
    now_ms: u64,
    (seed, step): (u64, &str),
) -> Result<u64, TimerArgError> {
    match kind {
        TimerKind::Sleep => due_ms(input, now_ms),
        TimerKind::Deadline => deadline_ms(input, now_ms),
        TimerKind::Backoff => Ok(now_ms.saturating_add(backoff_ms(input, seed, step)?)),
    }
}

/// A backoff call's wait: its `wait_ms`, or with `jitter` a wait drawn in `[wait_ms / 2,
/// wait_ms]` by [`oracle_core::rng::for_call`] of the run's seed, the step and the attempt
/// that failed (so the same run waits alike anywhere; the due instant is recorded anyway).
pub fn backoff_ms(input: &Value, seed: u64, step: &str) -> Result<u64, TimerArgError> {
    let wait = input
        .get("wait_ms")
        .and_then(Value::as_u64)
        .ok_or(TimerArgError::Backoff)?;
    if input.get("jitter").and_then(Value::as_bool) != Some(true) {
        return Ok(wait);
    }
    let attempt = input.get("attempt").and_then(Value::as_u64).unwrap_or(0);
    let half = wait / 2;
    let drawn = oracle_core::rng::for_call(seed, step, attempt).below(half.saturating_add(1));
    Ok(wait - half + drawn)
}

/// A deadline (`human.ask`'s, a belief wait's): a duration after `now_ms` (`2d`), or an RFC
/// 3339 instant ([`oracle_plan::time::deadline_ms`], the grammar `oracle plan check` uses).
pub fn deadline_ms(input: &Value, now_ms: u64) -> Result<u64, TimerArgError> {
    let text = input
        .get(DEADLINE_ARG)
        .and_then(Value::as_str)
        .ok_or(TimerArgError::Deadline)?;
    Ok(oracle_plan::time::deadline_ms(text, now_ms)?)
}

/// `clock.wall {}` → `{instant, unix_ms, unix_s}`: the wall clock, in UTC. Impure, so the
/// reply is an outside answer: recorded when read, taken from the log on replay.
pub struct Wall;

impl Tool for Wall {
    fn decl(&self) -> ToolDecl {
        decl(
            "clock.wall",
            "The wall clock now, recorded once: {instant (RFC 3339, UTC), unix_ms, unix_s}.",
            Effect::Impure,
            object(&[], &[]),
            object(
                &[
                    ("instant", string()),
                    ("unix_ms", count()),
                    ("unix_s", count()),
                ],
                &["instant", "unix_ms", "unix_s"],
            ),
            None,
        )
    }

    fn call(&self, _input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let ms = wall::now_ms();
        Ok(ToolOutput::of(json!({
            "instant": wall::rfc3339(ms),
            "unix_ms": ms,
            "unix_s": ms / 1000,
        })))
    }
}

/// When a `sleep` call's timer is due, from its input and the wall time it is set at: `for`
/// (a duration) after `now_ms`, or `until` (an RFC 3339 instant), exactly one of them.
pub fn due_ms(input: &Value, now_ms: u64) -> Result<u64, TimerArgError> {
    match (input.get("for"), input.get("until")) {
        (Some(d), None) => {
            let text = d.as_str().ok_or(TimerArgError::For)?;
            Ok(now_ms.saturating_add(wall::duration_ms(text)?))
        }
        (None, Some(i)) => {
            let text = i.as_str().ok_or(TimerArgError::Until)?;
            Ok(wall::instant_ms(text)?)
        }
        _ => Err(TimerArgError::OneOf),
    }
}

/// `sleep {for}` or `sleep {until}` → `{due, due_ms, fired, fired_ms}` once woken. The call
/// itself only checks its arguments (a bad duration fails the step now, not when it wakes)
/// and suspends; the engine reads the clock, records the timer and waits for a waker.
pub struct Sleep;

impl Tool for Sleep {
    fn decl(&self) -> ToolDecl {
        decl(
            SLEEP_TOOL,
            "Suspend the run until a timer fires: {due, due_ms, fired, fired_ms}.",
            Effect::Ask,
            object(&[("for", string()), ("until", string())], &[]),
            object(
                &[
                    ("due", string()),
                    ("due_ms", count()),
                    ("fired", string()),
                    ("fired_ms", count()),
                ],
                &["due", "due_ms", "fired", "fired_ms"],
            ),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        due_ms(input, 0).map_err(ToolError::failed)?;
        let what = match input.get("for") {
            Some(_) => format!("for {}", arg_str(input, "for")?),
            None => format!("until {}", arg_str(input, "until")?),
        };
        Err(ToolError::Ask(format!("sleep {what}")))
    }
}

/// `retry.backoff {wait_ms, jitter, attempt}` → `{due, due_ms, fired, fired_ms}` once woken:
/// the plan agent's call between two attempts of a step with a retry policy (never a plan's:
/// it is left out of the catalogue). Like `sleep`, the call only asks; the engine records the
/// timer.
pub struct Backoff;

impl Tool for Backoff {
    fn decl(&self) -> ToolDecl {
        let flag = || serde_json::json!({"type": "boolean"});
        decl(
            BACKOFF_TOOL,
            "Wait between two attempts of a step with a retry policy: {due, due_ms, fired, fired_ms}.",
            Effect::Ask,
            object(
                &[
                    ("wait_ms", count()),
                    ("jitter", flag()),
                    ("attempt", count()),
                ],
                &["wait_ms"],
            ),
            object(
                &[
                    ("due", string()),
                    ("due_ms", count()),
                    ("fired", string()),
                    ("fired_ms", count()),
                ],
                &["due", "due_ms", "fired", "fired_ms"],
            ),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let ms = backoff_ms(input, 0, "").map_err(ToolError::failed)?;
        Err(ToolError::Ask(format!("retry backoff {ms} ms")))
    }
}
