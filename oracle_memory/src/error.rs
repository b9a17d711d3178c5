//! Why a memory operation was refused. Each refusal writes nothing.

use oracle_core::Hash;
use serde_json::Value;

use crate::claim::Provenance;

/// A claim or query the memory refuses (the tool call fails with this message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    #[error("bad input: {0}")]
    Input(String),
    #[error("claim {0} is not in memory")]
    UnknownClaim(Hash),
    #[error(
        "line {subject}/{predicate} is {line}; a {given} claim cannot join it (cardinality is fixed by the line's first claim)"
    )]
    Cardinality {
        subject: String,
        predicate: String,
        line: &'static str,
        given: &'static str,
    },
    #[error(
        "a recall re-entry must name exactly one source claim in derived_from and repeat its line and value: {0}"
    )]
    Recall(String),
}

/// A verdict that is not applied. Each variant is a distinct outcome with its own exit code at
/// the command line; none writes anything.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdjudicateError {
    #[error("no adjudication has handle `{handle}` in this run")]
    UnknownHandle { handle: String },
    #[error("adjudication `{handle}` was already resolved at event {seq}: {verdict}")]
    AlreadyResolved {
        handle: String,
        seq: u64,
        verdict: String,
        /// The original verdict's record (verdict, evidence, note, effects).
        original: Value,
    },
    #[error("adjudication `{handle}` expired at tick {expires_at}{}", match .swept_at { Some(s) => format!(" (swept at event {s})"), None => String::new() })]
    Expired {
        handle: String,
        expires_at: u64,
        swept_at: Option<u64>,
    },
    #[error("a verdict needs external first-hand evidence, not `{given}`")]
    Evidence { given: Provenance },
    #[error(
        "no claim {claim} in this run (`oracle memory RUN --subject S --predicate P` lists a line's claims with their ids)"
    )]
    UnknownClaim { claim: String },
    #[error(
        "claim prefix `{prefix}` is ambiguous: {matches} claims start with it (give more characters)"
    )]
    AmbiguousClaim { prefix: String, matches: u64 },
    #[error("a claim is named by at least {min} hex characters of its id, not `{given}`")]
    ClaimPrefix { given: String, min: u64 },
    #[error(
        "claim {claim} is {disposition} and nothing live contradicts it: only a superseded or contested claim, or a committed one on a contested line, can be reinstated"
    )]
    NotReinstatable { claim: String, disposition: String },
    #[error("claim {claim} ({provenance}) cannot carry a belief, so it cannot be reinstated")]
    CannotCarry {
        claim: String,
        provenance: Provenance,
    },
}

/// A recorded memory event that does not read back (the log is damaged or was written by a
/// different version).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("event {seq}: {reason}")]
pub struct ProjectionError {
    pub seq: u64,
    pub reason: String,
}
