//! Beliefs: folded from a line's claims and verdict records on every query, never stored.
//!
//! For a line at logical time `as_of` and valid time `valid_at`:
//! - claims recorded after `as_of`, quarantined claims and recall re-entries do not count;
//! - a claim counts over its window (all time without one), cut by verdict bounds given by
//!   `as_of`; trusted windows that contain `valid_at` make the candidates, untrusted windows
//!   (low confidence, or incoherent) are "uncertain";
//! - external claims (user-asserted, external first-hand) speak for the line when any of them
//!   is a candidate or uncertain; model-derived claims only when none is;
//! - one value among the candidates is `resolved`, several are `contested` (every alternative,
//!   no primary); an uncertain claim of another value, or uncertain claims alone, make it
//!   `timing_uncertain`; nothing is `no_belief`.
//!
//! Only sets enter the fold, so the same records in any order give the same belief.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::claim::{Cardinality, ClaimId, Criticality, Provenance};
use crate::gate::Disposition;
use crate::memory::{Entry, Memory};

/// What to ask about one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    pub subject: String,
    pub predicate: String,
    /// What was believed at this logical time (`None`: now).
    pub as_of: Option<u64>,
    /// The valid time asked about (`None`: the `as_of` time, or now).
    pub valid_at: Option<u64>,
}

impl Query {
    pub fn now(subject: &str, predicate: &str) -> Query {
        Query {
            subject: subject.to_owned(),
            predicate: predicate.to_owned(),
            as_of: None,
            valid_at: None,
        }
    }
}

/// One claim behind a belief, with where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Support {
    pub claim: ClaimId,
    pub provenance: Provenance,
    pub criticality: Criticality,
    pub disposition: Option<Disposition>,
    /// The event that recorded it, its logical time, and the step and tool that asserted it.
    pub seq: u64,
    pub time: u64,
    pub step: String,
    pub tool: String,
    /// Recall re-entries that repeated it.
    pub corroborations: u64,
}

/// One value a line might hold, with the claims for it in retrieval order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Alternative {
    pub value: Value,
    pub support: Vec<Support>,
}

/// The answer to a query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Belief {
    /// One value (for a set-valued line: the sorted list of its values).
    Resolved {
        value: Value,
        support: Vec<Support>,
    },
    /// Several values and no primary one; `pending` lists the requests waiting on the line.
    Contested {
        alternatives: Vec<Alternative>,
        pending: Vec<String>,
    },
    NoBelief,
    /// The answer depends on valid-time windows that cannot be trusted.
    TimingUncertain {
        alternatives: Vec<Alternative>,
    },
}

impl Belief {
    pub fn status(&self) -> &'static str {
        match self {
            Belief::Resolved { .. } => "resolved",
            Belief::Contested { .. } => "contested",
            Belief::NoBelief => "no_belief",
            Belief::TimingUncertain { .. } => "timing_uncertain",
        }
    }

    pub fn to_value(&self) -> Value {
        // Invariant: plain structs with string keys always convert.
        serde_json::to_value(self).expect("beliefs always convert to JSON")
    }
}

fn support(m: &Memory, e: &Entry, as_of: u64) -> Support {
    Support {
        claim: e.id,
        provenance: e.claim.provenance,
        criticality: e.claim.criticality,
        disposition: m.disposition(&e.id, as_of),
        seq: e.origin.seq,
        time: e.origin.time,
        step: e.origin.step.clone(),
        tool: e.origin.tool.clone(),
        corroborations: m.corroborations(&e.id, as_of),
    }
}

/// Groups claims by value (canonical order of values), each group and the groups in
/// retrieval order of their best claim.
fn alternatives(m: &Memory, claims: &[&Entry], as_of: u64) -> Vec<Alternative> {
    let mut by_value: BTreeMap<Vec<u8>, (Value, Vec<&Entry>)> = BTreeMap::new();
    for e in claims {
        let key = oracle_core::canon::encode(&e.claim.value).unwrap_or_default();
        by_value
            .entry(key)
            .or_insert_with(|| (e.claim.value.clone(), Vec::new()))
            .1
            .push(e);
    }
    let mut out: Vec<(crate::memory::RetrievalKey, Alternative)> = by_value
        .into_values()
        .map(|(value, mut es)| {
            es.sort_by_cached_key(|e| m.retrieval_key(&e.id));
            let best = m.retrieval_key(&es[0].id);
            let support = es.iter().map(|e| support(m, e, as_of)).collect();
            (best, Alternative { value, support })
        })
        .collect();
    out.sort_by_key(|a| a.0);
    out.into_iter().map(|(_, a)| a).collect()
}

/// The belief a query asks for. Reads only the line's claims.
pub fn query(m: &Memory, q: &Query, confidence_min_pct: u64) -> Belief {
    let as_of = q.as_of.unwrap_or(u64::MAX);
    let t = q.valid_at.or(q.as_of).unwrap_or(m.now());
    let mut covering: Vec<&Entry> = Vec::new();
    let mut uncertain: Vec<&Entry> = Vec::new();
    for e in m.line_claims(&q.subject, &q.predicate) {
        if e.origin.time > as_of || !Memory::counts(e) {
            continue;
        }
        let Some(w) = m.window(e, as_of) else {
            continue;
        };
        if Memory::trusted(e, confidence_min_pct) {
            if w.contains(t) {
                covering.push(e);
            }
        } else {
            uncertain.push(e);
        }
    }
    let external = covering
        .iter()
        .chain(&uncertain)
        .any(|e| e.claim.provenance.is_external());
    let keep = |e: &&Entry| e.claim.provenance.is_external() == external;
    covering.retain(keep);
    uncertain.retain(keep);
    let cardinality = m
        .line_cardinality(&q.subject, &q.predicate)
        .unwrap_or(Cardinality::Functional);
    let alts = alternatives(m, &covering, as_of);
    let other_uncertain = uncertain
        .iter()
        .any(|u| !covering.iter().any(|c| c.claim.value == u.claim.value));
    if other_uncertain {
        let all: Vec<&Entry> = covering.iter().chain(&uncertain).copied().collect();
        return Belief::TimingUncertain {
            alternatives: alternatives(m, &all, as_of),
        };
    }
    match (cardinality, alts.len()) {
        (_, 0) => Belief::NoBelief,
        (Cardinality::Functional, 1) | (Cardinality::SetValued, _) => {
            let mut values: Vec<(Vec<u8>, Value)> = alts
                .iter()
                .map(|a| {
                    (
                        oracle_core::canon::encode(&a.value).unwrap_or_default(),
                        a.value.clone(),
                    )
                })
                .collect();
            values.sort_by(|a, b| a.0.cmp(&b.0));
            let value = match cardinality {
                Cardinality::Functional => alts[0].value.clone(),
                Cardinality::SetValued => Value::Array(values.into_iter().map(|v| v.1).collect()),
            };
            let mut support: Vec<Support> = alts.into_iter().flat_map(|a| a.support).collect();
            support.sort_by_cached_key(|s| m.retrieval_key(&s.claim));
            Belief::Resolved { value, support }
        }
        (Cardinality::Functional, _) => {
            let mut pending: Vec<(u64, String)> = m
                .pending_on(&q.subject, &q.predicate, as_of)
                .into_iter()
                .map(|r| (r.origin.seq, r.request.handle.clone()))
                .collect();
            pending.sort();
            Belief::Contested {
                alternatives: alts,
                pending: pending.into_iter().map(|p| p.1).collect(),
            }
        }
    }
}
