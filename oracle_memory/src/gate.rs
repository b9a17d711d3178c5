//! The gate: the disposition of a new claim, decided from the memory as it stands.
//!
//! The rules run in this order and the first that applies decides (`docs/MEMORY.md`):
//! 1. the claim is checked (line names, canonical value, known `derived_from`, cardinality);
//! 2. a recall re-entry corroborates its source and never becomes a second claim of the line;
//! 3. an incoherent window given with confidence at or above the threshold is quarantined;
//! 4. a model-derived claim is inferred (it never overturns an external belief);
//! 5. a set-valued line, or a functional line with no live external claim of a different value
//!    over an overlapping window, commits cheaply;
//! 6. anything else contradicts a live external belief: queued for adjudication when the run
//!    has an oracle, contested when it has none. The incumbent's record is not touched.

use std::fmt;

use crate::settings::MemorySettings;
use serde::{Deserialize, Serialize};

use crate::claim::{
    Cardinality, Claim, ClaimId, Criticality, DERIVED_FROM_MAX, NAME_BYTES_MAX, Origin, Provenance,
};
use crate::error::MemoryError;
use crate::memory::Memory;

/// Where a claim stands. Every state has a producer: the gate makes the first six, verdicts
/// and sweeps move claims between `committed`, `superseded` and `contested`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Part of the belief without review (no conflict), or the winner of a verdict.
    Committed,
    /// Model-derived: believed only where no external claim speaks.
    Inferred,
    /// A recall re-entry: counted as corroboration of its source.
    Corroborating,
    /// Waits for the oracle's verdict.
    QueuedForAdjudication,
    /// In an unresolved conflict (no oracle, an `unknown` verdict, or an expired request).
    Contested,
    /// Lost a verdict; kept, bounded in valid time.
    Superseded,
    /// An incoherent valid time given with confidence: never part of a belief.
    Quarantined,
}

impl Disposition {
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Committed => "committed",
            Disposition::Inferred => "inferred",
            Disposition::Corroborating => "corroborating",
            Disposition::QueuedForAdjudication => "queued_for_adjudication",
            Disposition::Contested => "contested",
            Disposition::Superseded => "superseded",
            Disposition::Quarantined => "quarantined",
        }
    }
}

impl fmt::Display for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pending adjudication, recorded in the same event as its challenger.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Minted from the recording event's seq (`adj-<seq>`): replay mints the same handle, and
    /// two requests of one run can never share one.
    pub handle: String,
    pub subject: String,
    pub predicate: String,
    pub incumbent: ClaimId,
    pub challenger: ClaimId,
    pub criticality: Criticality,
    pub reason: String,
    /// Logical tick at which the request expires, if the run has an expiry.
    pub expires_at: Option<u64>,
    /// The wall instant (unix ms) at which the request expires, if the run has a real-time
    /// expiry: the clock read once when the request was opened plus the expiry, recorded here
    /// so replay never reads the clock. Absent otherwise, so earlier logs keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
}

/// What the gate decided for one claim: the output of `memory.assert` and the record the
/// projection reads back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assertion {
    pub id: ClaimId,
    pub claim: Claim,
    pub disposition: Disposition,
    pub reason: String,
    /// For a recall re-entry: the claim it corroborates.
    pub corroborates: Option<ClaimId>,
    /// The live claims it contradicts (contested or queued claims only), in retrieval order.
    pub conflicts_with: Vec<ClaimId>,
    pub adjudication: Option<Request>,
}

/// The handle of the request recorded at `seq`.
pub fn handle_at(seq: u64) -> String {
    format!("adj-{seq}")
}

fn check(claim: &Claim, memory: &Memory) -> Result<(), MemoryError> {
    let bad = |m: String| Err(MemoryError::Input(m));
    for (what, name) in [("subject", &claim.subject), ("predicate", &claim.predicate)] {
        if name.is_empty() {
            return bad(format!("{what} is empty"));
        }
        if name.len() as u64 > NAME_BYTES_MAX {
            return bad(format!("{what} is longer than {NAME_BYTES_MAX} bytes"));
        }
    }
    if let Err(e) = oracle_core::canon::check(&claim.value) {
        return bad(format!("value: {e}"));
    }
    if let Some(v) = claim.valid
        && v.confidence_pct > 100
    {
        return bad(format!(
            "valid.confidence_pct is {}, more than 100",
            v.confidence_pct
        ));
    }
    if claim.derived_from.len() as u64 > DERIVED_FROM_MAX {
        return bad(format!(
            "derived_from names more than {DERIVED_FROM_MAX} claims"
        ));
    }
    if let Some(missing) = claim
        .derived_from
        .iter()
        .find(|id| memory.entry(id).is_none())
    {
        return Err(MemoryError::UnknownClaim(*missing));
    }
    if let Some(line_card) = memory.line_cardinality(&claim.subject, &claim.predicate)
        && line_card != claim.cardinality
    {
        let name = |c: Cardinality| match c {
            Cardinality::Functional => "functional",
            Cardinality::SetValued => "set_valued",
        };
        return Err(MemoryError::Cardinality {
            subject: claim.subject.clone(),
            predicate: claim.predicate.clone(),
            line: name(line_card),
            given: name(claim.cardinality),
        });
    }
    Ok(())
}

/// Runs the gate for `claim`, to be recorded at `origin`. Pure: the memory is not changed
/// (the caller records the assertion, then applies it).
pub fn gate(
    memory: &Memory,
    claim: Claim,
    origin: &Origin,
    settings: &MemorySettings,
) -> Result<Assertion, MemoryError> {
    check(&claim, memory)?;
    let id = claim
        .id_at(origin.seq)
        .map_err(|e| MemoryError::Input(e.to_string()))?;
    let decided = |disposition, reason: String| Assertion {
        id,
        claim: claim.clone(),
        disposition,
        reason,
        corroborates: None,
        conflicts_with: vec![],
        adjudication: None,
    };
    // 2. Recall re-entries.
    if claim.provenance == Provenance::RecallReentry {
        let [source] = claim.derived_from.as_slice() else {
            return Err(MemoryError::Recall(format!(
                "derived_from names {} claims",
                claim.derived_from.len()
            )));
        };
        // Invariant: `check` found every derived_from id in memory.
        let Some(src) = memory.entry(source) else {
            return Err(MemoryError::UnknownClaim(*source));
        };
        if src.claim.subject != claim.subject
            || src.claim.predicate != claim.predicate
            || src.claim.value != claim.value
        {
            return Err(MemoryError::Recall(format!(
                "claim {} says {}/{} = {}",
                source.short(),
                src.claim.subject,
                src.claim.predicate,
                src.claim.value
            )));
        }
        let mut a = decided(
            Disposition::Corroborating,
            format!("recall of claim {}", source.short()),
        );
        a.corroborates = Some(*source);
        return Ok(a);
    }
    // 3. Incoherent valid time.
    if let Some(v) = claim.valid
        && v.incoherent(origin.time)
        && v.confidence_pct >= settings.confidence_min_pct
    {
        let why = if v.end.is_some_and(|e| e <= v.start) {
            "the window ends before it starts".to_owned()
        } else {
            format!(
                "the window starts at tick {}, after the current tick {}",
                v.start, origin.time
            )
        };
        return Ok(decided(
            Disposition::Quarantined,
            format!(
                "incoherent valid time given with confidence {}%: {why}",
                v.confidence_pct
            ),
        ));
    }
    // 4. Model-derived.
    if claim.provenance == Provenance::ModelDerived {
        return Ok(decided(
            Disposition::Inferred,
            "model-derived: believed only where no external claim speaks".into(),
        ));
    }
    // 5. No conflict.
    if claim.cardinality == Cardinality::SetValued {
        return Ok(decided(
            Disposition::Committed,
            "set-valued line: the value joins the set".into(),
        ));
    }
    let conflicts = memory.conflicts(&claim, origin.time, settings.confidence_min_pct);
    if conflicts.is_empty() {
        let reason = if memory.line_is_empty(&claim.subject, &claim.predicate) {
            "new line"
        } else {
            "no live external claim contradicts it"
        };
        return Ok(decided(Disposition::Committed, reason.into()));
    }
    // 6. A contradiction of a live external belief.
    // The incumbent: a committed claim (the live belief) before contested or queued ones, then
    // retrieval order. Invariant: `conflicts` is non-empty here.
    let incumbent = conflicts
        .iter()
        .copied()
        .min_by_key(|c| {
            (
                memory.disposition(c, u64::MAX) != Some(Disposition::Committed),
                memory.retrieval_key(c),
            )
        })
        .unwrap_or(conflicts[0]);
    let inc = memory
        .entry(&incumbent)
        .ok_or(MemoryError::UnknownClaim(incumbent))?;
    let reason = format!(
        "{} contradicts {} (claim {}, {})",
        claim.value,
        inc.claim.value,
        incumbent.short(),
        inc.claim.provenance
    );
    if !settings.oracle {
        let mut a = decided(
            Disposition::Contested,
            format!("{reason}; no oracle is configured"),
        );
        a.conflicts_with = conflicts;
        return Ok(a);
    }
    let mut a = decided(Disposition::QueuedForAdjudication, reason.clone());
    a.conflicts_with = conflicts;
    a.adjudication = Some(Request {
        handle: handle_at(origin.seq),
        subject: claim.subject.clone(),
        predicate: claim.predicate.clone(),
        incumbent,
        challenger: id,
        criticality: claim.criticality.max(inc.claim.criticality),
        reason,
        expires_at: settings.expiry_ticks.map(|e| origin.time.saturating_add(e)),
        expires_ms: None,
    });
    Ok(a)
}
