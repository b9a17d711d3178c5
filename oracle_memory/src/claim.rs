//! Claims: what an agent asserts about a subject, with where it came from and when it holds.

use std::fmt;
use std::str::FromStr;

use oracle_core::Hash;
use oracle_core::hash::domain;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A claim's id: BLAKE3 (`oracle v1 claim`) of the canonical claim followed by the seq of the
/// event that recorded it, so equal claims recorded at different places are distinct claims.
pub type ClaimId = Hash;

/// Where a claim's content came from. The first two are external sources; only they can form
/// or overturn a belief held from an external source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    UserAsserted,
    ExternalFirstHand,
    ModelDerived,
    /// A claim read back from memory and asserted again: it corroborates its source.
    RecallReentry,
}

impl Provenance {
    pub const ALL: [Provenance; 4] = [
        Provenance::UserAsserted,
        Provenance::ExternalFirstHand,
        Provenance::ModelDerived,
        Provenance::RecallReentry,
    ];

    pub fn is_external(self) -> bool {
        matches!(
            self,
            Provenance::UserAsserted | Provenance::ExternalFirstHand
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Provenance::UserAsserted => "user_asserted",
            Provenance::ExternalFirstHand => "external_first_hand",
            Provenance::ModelDerived => "model_derived",
            Provenance::RecallReentry => "recall_reentry",
        }
    }
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provenance name that is none of [`Provenance::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown provenance `{text}` (expected user_asserted, external_first_hand, model_derived or recall_reentry)"
)]
pub struct UnknownProvenance {
    pub text: String,
}

impl FromStr for Provenance {
    type Err = UnknownProvenance;
    fn from_str(s: &str) -> Result<Self, UnknownProvenance> {
        Provenance::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownProvenance { text: s.to_owned() })
    }
}

/// How many values a line holds at once.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Cardinality {
    /// One value at a time: a different value is a conflict.
    #[default]
    Functional,
    /// Any number of values: a new value adds to the set.
    SetValued,
}

/// How much a wrong belief on a line costs. Ordered: `low` < `medium` < `high` < `critical`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Criticality {
    Low,
    #[default]
    Medium,
    High,
    Critical,
}

impl Criticality {
    pub fn as_str(self) -> &'static str {
        match self {
            Criticality::Low => "low",
            Criticality::Medium => "medium",
            Criticality::High => "high",
            Criticality::Critical => "critical",
        }
    }
}

/// When a claim holds, in logical ticks: `[start, end)`, `end` absent for "until further
/// notice", with the confidence (percent) of whoever gave the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidTime {
    pub start: u64,
    #[serde(default)]
    pub end: Option<u64>,
    pub confidence_pct: u64,
}

impl ValidTime {
    /// An empty or reversed window, or one that starts after `now` (the logical time the claim
    /// was recorded at): nobody can have observed it yet.
    pub fn incoherent(&self, now: u64) -> bool {
        self.end.is_some_and(|e| e <= self.start) || self.start > now
    }

    /// Whether the window can be relied on: coherent and confident enough.
    pub fn trusted(&self, now: u64, confidence_min_pct: u64) -> bool {
        !self.incoherent(now) && self.confidence_pct >= confidence_min_pct
    }

    pub fn contains(&self, t: u64) -> bool {
        self.start <= t && self.end.is_none_or(|e| t < e)
    }

    /// Whether two windows share a tick.
    pub fn overlaps(&self, other: &ValidTime) -> bool {
        self.start < other.end.unwrap_or(u64::MAX) && other.start < self.end.unwrap_or(u64::MAX)
    }
}

/// One claim. Immutable once recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub subject: String,
    pub predicate: String,
    /// Any canonical JSON value (no floats).
    pub value: Value,
    pub provenance: Provenance,
    #[serde(default)]
    pub cardinality: Cardinality,
    #[serde(default)]
    pub valid: Option<ValidTime>,
    #[serde(default)]
    pub criticality: Criticality,
    /// The claims this one was derived from (exactly one, its source, for a recall re-entry).
    #[serde(default)]
    pub derived_from: Vec<ClaimId>,
}

/// Longest subject or predicate, in bytes.
pub const NAME_BYTES_MAX: u64 = 256;
/// Most claims one claim may be derived from.
pub const DERIVED_FROM_MAX: u64 = 64;

impl Claim {
    /// The line the claim is about.
    pub fn line(&self) -> (String, String) {
        (self.subject.clone(), self.predicate.clone())
    }

    /// The claim as recorded (every field written out).
    pub fn to_value(&self) -> Value {
        // Invariant: the struct has string keys and `value` is already a JSON value.
        serde_json::to_value(self).expect("a claim always converts to JSON")
    }

    /// The id the claim gets when recorded at `seq`.
    pub fn id_at(&self, seq: u64) -> Result<ClaimId, oracle_core::canon::CanonError> {
        let mut bytes = oracle_core::canon::encode(&self.to_value())?;
        oracle_core::canon::put_u64(&mut bytes, seq);
        Ok(oracle_core::hash::hash_in(domain::CLAIM, &bytes))
    }

    /// The start of the claim's window (0 without one).
    pub fn start(&self) -> u64 {
        self.valid.map_or(0, |v| v.start)
    }
}

/// Where a claim was recorded: the event, its logical time, and the step and tool behind it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    pub seq: u64,
    pub time: u64,
    pub step: String,
    pub tool: String,
}
