//! Where a run's time and tokens went, step by step: the latency and cost view behind
//! `oracle inspect --steps`, `oracle runs`, `GET /api/v1/runs/{id}` and the run page.
//!
//! Which steps ran, their attempts and their model tokens are counted from the log, as the
//! metrics are. Wall time comes from the times file beside the log (`oracle_runtime::times`),
//! which is advisory: a duration is shown only when both of its ends were timed, and nothing
//! here feeds back into a run. Costs are derived at display time from the recorded usage and
//! the host's prices; no price, time or cost is ever recorded or hashed.

use std::collections::BTreeMap;
use std::path::Path;

use oracle_core::Payload;
use oracle_runtime::times::Times;
use serde_json::{Value, json};

use crate::error::HostError;
use crate::metrics::{Prices, Tally, cost};

/// Steps listed in one timeline: a plan's loops can run a step name many times, but a view
/// of more rows than this is not read by anyone; the rest are counted, not listed.
pub const TIMELINE_STEPS_MAX: usize = 10_000;

/// One step's share of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepTime {
    pub step: String,
    /// The first and the last event naming the step.
    pub first_seq: u64,
    pub last_seq: u64,
    /// The highest attempt recorded for it (a model-driven step's turns count as attempts).
    pub attempts: u64,
    /// Milliseconds from its first event to its last, when both were timed.
    pub wall_ms: Option<u64>,
    /// Milliseconds from the run's first event to the step's first, when both were timed.
    pub offset_ms: Option<u64>,
    /// Its model calls and tokens.
    pub tally: Tally,
}

/// A run's steps in the order they started, with the run's totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    pub steps: Vec<StepTime>,
    /// Events of steps past the first [`TIMELINE_STEPS_MAX`], which are not listed (counted
    /// as events: counting their distinct names would need the unbounded set the limit
    /// avoids).
    pub events_left_off: u64,
    /// The last event read.
    pub last_seq: u64,
    /// Milliseconds from the run's first event to its last, when both were timed. A run that
    /// waited for a person includes the wait: it is wall time, not work time.
    pub wall_ms: Option<u64>,
    /// The whole run's model calls and tokens.
    pub tally: Tally,
}

/// The step an event is about, with the attempt it names (0 where it names none).
fn step_of(p: &Payload) -> Option<(&str, u64)> {
    Some(match p {
        Payload::StepScheduled(s) => (&s.step, s.attempt),
        Payload::CapabilityAllowed(c) => (&c.step, 0),
        Payload::CapabilityDenied(c) => (&c.step, 0),
        Payload::ToolCalled(c) => (&c.step, c.attempt),
        Payload::ToolReturned(r) => (&r.step, r.attempt),
        Payload::ToolFailed(f) => (&f.step, f.attempt),
        Payload::Suspended(s) => (&s.step, 0),
        Payload::TimerSet(t) => (&t.step, 0),
        Payload::TimerFired(t) => (&t.step, 0),
        _ => return None,
    })
}

impl Timeline {
    /// The timeline of the log at `log` up to event `upto` (all when `None`).
    pub fn of_log(log: &Path, upto: Option<u64>) -> Result<Timeline, HostError> {
        let times = Times::read(log);
        let mut t = Timeline::default();
        let mut rows: BTreeMap<String, usize> = BTreeMap::new();
        let mut models = BTreeMap::new();
        oracle_runtime::reader::scan(log, true, |e| {
            if upto.is_some_and(|u| e.seq > u) {
                return Ok(false);
            }
            t.last_seq = e.seq;
            if let Ok(p) = e.typed() {
                t.tally.add(&p, &mut models);
                t.add(e.seq, &p, &mut rows, &mut models);
            }
            Ok(true)
        })?;
        t.wall_ms = times.between(0, t.last_seq);
        for s in &mut t.steps {
            s.wall_ms = times.between(s.first_seq, s.last_seq);
            s.offset_ms = times.between(0, s.first_seq);
        }
        Ok(t)
    }

    fn add(
        &mut self,
        seq: u64,
        p: &Payload,
        rows: &mut BTreeMap<String, usize>,
        models: &mut BTreeMap<(String, u64), String>,
    ) {
        let Some((step, attempt)) = step_of(p) else {
            return;
        };
        let row = match rows.get(step) {
            Some(&i) => i,
            None if self.steps.len() >= TIMELINE_STEPS_MAX => {
                self.events_left_off += 1;
                return;
            }
            None => {
                rows.insert(step.to_owned(), self.steps.len());
                self.steps.push(StepTime {
                    step: step.to_owned(),
                    first_seq: seq,
                    last_seq: seq,
                    attempts: 0,
                    wall_ms: None,
                    offset_ms: None,
                    tally: Tally::default(),
                });
                self.steps.len() - 1
            }
        };
        let s = &mut self.steps[row];
        s.last_seq = seq;
        s.attempts = s.attempts.max(attempt);
        // The step's own model calls (the run's map already holds this event's binding, so
        // adding it again changes nothing there).
        s.tally.add(p, models);
    }

    /// The whole run's tokens (input plus output, every binding).
    pub fn tokens(&self) -> u64 {
        tokens(&self.tally)
    }

    /// The timeline as JSON: `{wall_ms, tokens, cost, steps: [{step, attempts, first_seq,
    /// last_seq, offset_ms, wall_ms, tokens, cost}], events_left_off}`; `cost` is `null`
    /// without prices, else `{micro, unpriced}`.
    pub fn to_json(&self, prices: &Prices) -> Value {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|s| {
                json!({
                    "step": s.step,
                    "attempts": s.attempts,
                    "first_seq": s.first_seq,
                    "last_seq": s.last_seq,
                    "offset_ms": s.offset_ms,
                    "wall_ms": s.wall_ms,
                    "tokens": tokens(&s.tally),
                    "cost": cost_json(&s.tally, prices),
                })
            })
            .collect();
        json!({
            "wall_ms": self.wall_ms,
            "tokens": self.tokens(),
            "cost": cost_json(&self.tally, prices),
            "steps": steps,
            "events_left_off": self.events_left_off,
        })
    }
}

/// Input plus output tokens of every binding in `t`.
pub fn tokens(t: &Tally) -> u64 {
    t.tokens.values().fold(0u64, |a, n| a.saturating_add(*n))
}

/// `{micro, unpriced}` at `prices`, or `null` without any price.
pub fn cost_json(t: &Tally, prices: &Prices) -> Value {
    if prices.is_empty() {
        return Value::Null;
    }
    let (micro, unpriced) = cost(t, prices);
    json!({"micro": micro, "unpriced": unpriced})
}

/// A duration for a person: `850 ms`, `12.3 s`, `4 min 5 s`, `3 h 2 min`; `-` when unknown.
/// Integer arithmetic only.
pub fn duration_text(ms: Option<u64>) -> String {
    let Some(ms) = ms else {
        return "-".into();
    };
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{}.{} s", ms / 1_000, ms % 1_000 / 100),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1_000),
        _ => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// `t`'s cost at `prices` for a person (`0.000261`), marked `+` when a binding that used
/// tokens has no price (the cost is at least this); `None` without any price.
pub fn priced(t: &Tally, prices: &Prices) -> Option<String> {
    if prices.is_empty() {
        return None;
    }
    let (micro, unpriced) = cost(t, prices);
    let mark = if unpriced.is_empty() { "" } else { "+" };
    Some(format!("{}{mark}", cost_text(micro)))
}

/// A cost in micro-units for a person, with six decimals (`0.000450`).
pub fn cost_text(micro: u64) -> String {
    format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_every_scale() {
        assert_eq!(duration_text(None), "-");
        assert_eq!(duration_text(Some(850)), "850 ms");
        assert_eq!(duration_text(Some(12_345)), "12.3 s");
        assert_eq!(duration_text(Some(245_000)), "4 min 5 s");
        assert_eq!(duration_text(Some(3 * 3_600_000 + 120_000)), "3 h 2 min");
        assert_eq!(cost_text(450), "0.000450");
        assert_eq!(cost_text(12_000_001), "12.000001");
    }
}
