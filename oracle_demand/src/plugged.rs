//! Plugged policies: a policy written by a user, graded with the same faults and the same gap
//! to the oracle as the built-ins. This module is its ABI, pure: the input document, and the
//! checks on the answer. Running one (a sandboxed WebAssembly module, or a program) is the
//! host's (`oracle_host::demand`), behind [`Advisor`].
//!
//! The ABI (version 1; docs/FORMAT.md, "Pluggable policies"), one call per budget:
//!
//! - input, JSON: `{"abi": 1, "budget": B, "events": [{"id": t, "kind": K, "tokens": N,
//!   "deps": [u, ...]}, ...]}`: every event of the log in order, with its size in tokens and
//!   its own dependencies D(t) (what the log says it read, all earlier events).
//! - output, JSON: `{"keep": [[u, ...], ...]}`: one list per event, K(t), the events to keep
//!   while t's requests are served (`crate::policy` says how that evicts). Each id is an event
//!   before t, at most B distinct ones; lists missing at the end are empty; a repeated id
//!   counts once.
//!
//! An answer outside this is refused with a typed error naming the policy, the budget and the
//! event ([`PluggedError`]); nothing is graded from it.

use serde_json::{Value, json};

use super::Dependencies;

/// The ABI's version, sent as `abi` in every input.
pub const ABI: u64 = 1;

/// Why a policy's call did not answer (the host's words: a trap, a limit, an exit status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFailed {
    pub why: String,
}

/// A plugged policy as the analysis sees it: a name and a call.
pub trait Advisor {
    /// As given (`wasm:FILE`, `exec:PROGRAM`).
    fn name(&self) -> &str;
    /// One call: the ABI's input as JSON bytes; the policy's answer, parsed.
    fn call(&mut self, input: &[u8]) -> Result<Value, CallFailed>;
}

/// Why a plugged policy was not graded. Every variant names the policy and the budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluggedError {
    #[error("policy `{policy}` at budget {budget}: {why}")]
    Failed {
        policy: String,
        budget: u64,
        why: String,
    },
    #[error("policy `{policy}` at budget {budget} answered what the ABI does not take: {why}")]
    Output {
        policy: String,
        budget: u64,
        why: String,
    },
    #[error(
        "policy `{policy}` at budget {budget} keeps event {id} while serving event {event}: only an earlier event can be kept"
    )]
    UnknownId {
        policy: String,
        budget: u64,
        event: u64,
        id: u64,
    },
    #[error(
        "policy `{policy}` at budget {budget} keeps {kept} events while serving event {event}: over the budget"
    )]
    OverBudget {
        policy: String,
        budget: u64,
        event: u64,
        kept: u64,
    },
    #[error("{count} plugged policies: at most {limit} are graded at once")]
    TooMany { count: u64, limit: u64 },
    #[error("{events} events: a plugged policy is given at most {limit}")]
    TooManyEvents { events: u64, limit: u64 },
}

impl PluggedError {
    /// The stable name of this failure (the host's error code).
    pub fn code(&self) -> &'static str {
        match self {
            PluggedError::Failed { .. } => "policy_failed",
            PluggedError::Output { .. } => "policy_output",
            PluggedError::UnknownId { .. } => "policy_unknown_id",
            PluggedError::OverBudget { .. } => "policy_over_budget",
            PluggedError::TooMany { .. } | PluggedError::TooManyEvents { .. } => "usage",
        }
    }
}

/// The ABI's input for a budget: every event's id, kind, tokens and D(t).
pub fn input(deps: &Dependencies, budget: u64) -> Value {
    let events: Vec<Value> = (0..deps.events())
        .map(|t| {
            json!({
                "id": t,
                "kind": deps.kind(t),
                "tokens": deps.tokens(t),
                "deps": deps.of(t),
            })
        })
        .collect();
    json!({"abi": ABI, "budget": budget, "events": events})
}

/// Calls `advisor` at `budget` and checks its answer: K(t) per event.
pub fn advise(
    advisor: &mut dyn Advisor,
    deps: &Dependencies,
    budget: u64,
) -> Result<Vec<Vec<u64>>, PluggedError> {
    let limit = crate::limits::PLUGGED_EVENTS_MAX;
    if deps.events() > limit {
        return Err(PluggedError::TooManyEvents {
            events: deps.events(),
            limit,
        });
    }
    // Encoding a `Value` built here cannot fail: no floats, string keys.
    let bytes = serde_json::to_vec(&input(deps, budget)).unwrap_or_default();
    let answer = advisor.call(&bytes).map_err(|e| PluggedError::Failed {
        policy: advisor.name().to_owned(),
        budget,
        why: e.why,
    })?;
    keep_lists(advisor.name(), &answer, deps.events(), budget)
}

/// Checks a policy's answer (`{"keep": [[u, ...], ...]}`) for a log of `events` events at
/// `budget`: sorted, deduplicated lists, one per event.
pub fn keep_lists(
    policy: &str,
    answer: &Value,
    events: u64,
    budget: u64,
) -> Result<Vec<Vec<u64>>, PluggedError> {
    let output = |why: String| PluggedError::Output {
        policy: policy.to_owned(),
        budget,
        why,
    };
    let lists = answer
        .get("keep")
        .and_then(Value::as_array)
        .ok_or_else(|| output("not an object with a `keep` list".to_owned()))?;
    if lists.len() as u64 > events {
        return Err(output(format!(
            "{} lists in `keep` for {events} events",
            lists.len()
        )));
    }
    let mut out = Vec::with_capacity(lists.len());
    for (t, list) in lists.iter().enumerate() {
        let t = t as u64;
        let items = list
            .as_array()
            .ok_or_else(|| output(format!("`keep[{t}]` is not a list")))?;
        let mut kept = Vec::with_capacity(items.len());
        for item in items {
            let id = item
                .as_u64()
                .ok_or_else(|| output(format!("`keep[{t}]` holds something not an event id")))?;
            if id >= t {
                return Err(PluggedError::UnknownId {
                    policy: policy.to_owned(),
                    budget,
                    event: t,
                    id,
                });
            }
            kept.push(id);
        }
        kept.sort_unstable();
        kept.dedup();
        if kept.len() as u64 > budget {
            return Err(PluggedError::OverBudget {
                policy: policy.to_owned(),
                budget,
                event: t,
                kept: kept.len() as u64,
            });
        }
        out.push(kept);
    }
    Ok(out)
}
