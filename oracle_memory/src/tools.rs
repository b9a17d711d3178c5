//! The memory tools as the runtime calls them: JSON in, JSON out, against a [`Memory`].
//!
//! `memory.assert` runs the gate and returns the assertion (claim, id, disposition, and the
//! pending request when one is opened): that output is the record the projection reads back.
//! `memory.query` folds a belief, and with `require: "resolved"` asks the run to wait while the
//! line is not resolved. `memory.history` lists a line's claims with their dispositions.

use crate::settings::MemorySettings;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::belief::{self, Belief, Query};
use crate::claim::{Claim, Origin};
use crate::error::MemoryError;
use crate::gate;
use crate::memory::Memory;

pub const ASSERT: &str = "memory.assert";
pub const QUERY: &str = "memory.query";
pub const HISTORY: &str = "memory.history";
/// How the reason of a suspension on a belief starts.
pub const BELIEF_WAIT_PREFIX: &str = "waits on belief ";
/// Most claims one `memory.history` call lists.
pub const HISTORY_CLAIMS_MAX: u64 = 1_000;

/// Whether a name is one of the memory tools.
pub fn is_memory_tool(name: &str) -> bool {
    matches!(name, ASSERT | QUERY | HISTORY)
}

fn input<T: for<'de> Deserialize<'de>>(v: &Value) -> Result<T, MemoryError> {
    T::deserialize(v).map_err(|e| MemoryError::Input(e.to_string()))
}

/// `memory.assert`: the gate's decision for the claim in `input`, to be recorded at `origin`.
pub fn assert(
    memory: &Memory,
    input_value: &Value,
    origin: &Origin,
    settings: &MemorySettings,
) -> Result<Value, MemoryError> {
    assert_until(memory, input_value, origin, settings, None)
}

/// [`assert`] where a request it opens expires at wall instant `due_ms` (unix ms): the
/// caller's recorded answer (the clock read once plus `settings.expiry_ms`, or the instant the
/// record holds), so the gate itself never reads a clock.
pub fn assert_until(
    memory: &Memory,
    input_value: &Value,
    origin: &Origin,
    settings: &MemorySettings,
    due_ms: Option<u64>,
) -> Result<Value, MemoryError> {
    let claim: Claim = input(input_value)?;
    let mut a = gate::gate(memory, claim, origin, settings)?;
    if let Some(r) = a.adjudication.as_mut() {
        r.expires_ms = due_ms;
    }
    // Invariant: an assertion is plain data with string keys.
    Ok(serde_json::to_value(&a).expect("assertions always convert to JSON"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryInput {
    subject: String,
    predicate: String,
    #[serde(default)]
    as_of: Option<u64>,
    #[serde(default)]
    valid_at: Option<u64>,
    #[serde(default)]
    require: Option<String>,
    /// How long a `require: "resolved"` wait may last (the runtime sets its timer and checks
    /// the text); the memory only refuses one without a wait.
    #[serde(default)]
    deadline: Option<Value>,
    /// The answer when the deadline passes first: the runtime's, never read here.
    #[serde(default)]
    #[allow(dead_code)]
    on_timeout: Option<Value>,
}

/// What `memory.query` produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryOutcome {
    Answer(Value),
    /// `require: "resolved"` on a line that is not: the run waits, for this reason.
    Wait(String),
}

/// `memory.query` at logical time `now` (the valid time asked about when the input names
/// neither `as_of` nor `valid_at`).
pub fn query(
    memory: &Memory,
    input_value: &Value,
    settings: &MemorySettings,
    now: u64,
) -> Result<QueryOutcome, MemoryError> {
    let q: QueryInput = input(input_value)?;
    let require_resolved = match q.require.as_deref() {
        None | Some("any") => false,
        Some("resolved") => true,
        Some(other) => {
            return Err(MemoryError::Input(format!(
                "require must be \"resolved\" or \"any\", not {other:?}"
            )));
        }
    };
    if q.deadline.is_some() && !require_resolved {
        return Err(MemoryError::Input(
            "deadline needs require: \"resolved\" (only a wait has a deadline)".to_owned(),
        ));
    }
    let query = Query {
        subject: q.subject,
        predicate: q.predicate,
        as_of: q.as_of,
        valid_at: q.valid_at.or(q.as_of).or(Some(now)),
    };
    let b = belief::query(memory, &query, settings.confidence_min_pct);
    if require_resolved && !matches!(b, Belief::Resolved { .. }) {
        let why = match &b {
            Belief::Contested { pending, .. } if !pending.is_empty() => {
                format!("queued for adjudication: {}", pending.join(", "))
            }
            other => other.status().replace('_', " "),
        };
        return Ok(QueryOutcome::Wait(format!(
            "{BELIEF_WAIT_PREFIX}{}/{} ({why})",
            query.subject, query.predicate
        )));
    }
    let mut out = b.to_value();
    if let Value::Object(m) = &mut out {
        m.insert("subject".into(), json!(query.subject));
        m.insert("predicate".into(), json!(query.predicate));
    }
    Ok(QueryOutcome::Answer(out))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryInput {
    subject: String,
    #[serde(default)]
    predicate: Option<String>,
    #[serde(default)]
    as_of: Option<u64>,
}

/// One claim as listings show it.
pub fn claim_view(memory: &Memory, e: &crate::memory::Entry, as_of: u64) -> Value {
    json!({
        "id": e.id,
        "subject": e.claim.subject,
        "predicate": e.claim.predicate,
        "value": e.claim.value,
        "provenance": e.claim.provenance,
        "cardinality": e.claim.cardinality,
        "criticality": e.claim.criticality,
        "valid": e.claim.valid,
        "derived_from": e.claim.derived_from,
        "disposition": memory.disposition(&e.id, as_of),
        "reason": e.reason,
        "corroborates": e.corroborates,
        "corroborations": memory.corroborations(&e.id, as_of),
        "seq": e.origin.seq,
        "time": e.origin.time,
        "step": e.origin.step,
        "tool": e.origin.tool,
    })
}

/// The claims of a subject (one predicate, or all), recorded by `as_of`, in retrieval order.
pub fn history_entries<'a>(
    memory: &'a Memory,
    subject: &str,
    predicate: Option<&str>,
    as_of: u64,
) -> Vec<&'a crate::memory::Entry> {
    let mut out: Vec<&crate::memory::Entry> = match predicate {
        Some(p) => memory.line_claims(subject, p).collect(),
        None => memory
            .subject_lines(subject)
            .into_iter()
            .flat_map(|(s, p)| memory.line_claims(s, p).collect::<Vec<_>>())
            .collect(),
    };
    out.retain(|e| e.origin.time <= as_of);
    out.sort_by_cached_key(|e| memory.retrieval_key(&e.id));
    out
}

/// `memory.history`.
pub fn history(memory: &Memory, input_value: &Value) -> Result<Value, MemoryError> {
    let h: HistoryInput = input(input_value)?;
    let as_of = h.as_of.unwrap_or(u64::MAX);
    let all = history_entries(memory, &h.subject, h.predicate.as_deref(), as_of);
    let total = all.len() as u64;
    let claims: Vec<Value> = all
        .into_iter()
        .take(HISTORY_CLAIMS_MAX as usize)
        .map(|e| claim_view(memory, e, as_of))
        .collect();
    Ok(json!({"subject": h.subject, "claims": claims, "total": total}))
}
