//! Claims from outside the plan (`oracle claim`): the same gate as `memory.assert`, recorded as
//! one `claim_recorded` event that the projection reads back without running the gate again.
//!
//! Nothing here changes a rule of the memory: an outside claim is decided by [`gate::gate`]
//! exactly as a `memory.assert` call would be, and inserted exactly as its output is. The only
//! differences are where it is recorded (an external event appended while the run is at rest)
//! and that only external provenances are accepted (outside evidence is first-hand or the
//! user's own word; a model-derived claim from outside would be a claim nobody can audit).

use oracle_core::payload::ClaimRecorded;

use crate::settings::MemorySettings;

use crate::claim::{Claim, Origin};
use crate::error::{MemoryError, ProjectionError};
use crate::gate::{self, Assertion};
use crate::memory::Memory;

/// The `tool` an outside claim's origin names (it was not produced by any tool of the plan).
pub const ORIGIN_TOOL: &str = "oracle claim";
/// The `step` an outside claim's origin names: none.
pub const ORIGIN_STEP: &str = "";

/// Where an outside claim recorded at event `seq`, logical time `time`, comes from.
pub fn origin(seq: u64, time: u64) -> Origin {
    Origin {
        seq,
        time,
        step: ORIGIN_STEP.to_owned(),
        tool: ORIGIN_TOOL.to_owned(),
    }
}

/// The gate's decision on `claim` from outside, to be recorded at event `seq` and logical time
/// `time`. Pure. Refuses a provenance that is not external (`user_asserted`,
/// `external_first_hand`), and everything the gate refuses, with the gate's reason.
pub fn decide(
    memory: &Memory,
    claim: Claim,
    seq: u64,
    time: u64,
    settings: &MemorySettings,
) -> Result<Assertion, MemoryError> {
    if !claim.provenance.is_external() {
        return Err(MemoryError::Input(format!(
            "a claim from outside needs provenance external_first_hand or user_asserted, not {}",
            claim.provenance
        )));
    }
    gate::gate(memory, claim, &origin(seq, time), settings)
}

/// Applies a recorded `claim_recorded` (event `seq` at `time`) to `memory`, checking that the
/// recorded decision is for a claim that could have been given from outside at that place.
pub fn apply(
    memory: &mut Memory,
    seq: u64,
    time: u64,
    recorded: &ClaimRecorded,
) -> Result<(), ProjectionError> {
    let bad = |reason: String| ProjectionError { seq, reason };
    let a: Assertion = serde_json::from_value(recorded.assertion.clone())
        .map_err(|e| bad(format!("claim_recorded assertion does not read back: {e}")))?;
    if !a.claim.provenance.is_external() {
        return Err(bad(format!(
            "an outside claim with provenance {}",
            a.claim.provenance
        )));
    }
    let id = a.claim.id_at(seq).map_err(|e| bad(e.to_string()))?;
    if id != a.id {
        return Err(bad(format!(
            "claim id {} does not match its content and position ({})",
            a.id.short(),
            id.short()
        )));
    }
    memory.insert(&a, &origin(seq, time));
    Ok(())
}
