//! Belief memory with provenance and the adjudication oracle. Pure; depends only on `oracle_core`.
//!
//! Claims about the world are recorded in a run's log (the output of `memory.assert`), verdicts
//! and expiries too (`adjudicated`, `adjudications_expired`). [`Memory`] is the projection of
//! those records; a belief is never stored but folded from them on every query ([`belief`]).
//! The gate ([`gate`]) decides each new claim's disposition; [`adjudicate`] turns a verdict
//! into the effects the log records. See `docs/MEMORY.md` for the rules and the full table of
//! dispositions.

pub mod adjudicate;
pub mod belief;
pub mod claim;
pub mod error;
pub mod external;
pub mod gate;
pub mod memory;
pub mod settings;
pub mod shared;
pub mod tools;

pub use adjudicate::{Effects, Verdict};
pub use belief::{Alternative, Belief, Query, Support};
pub use claim::{Cardinality, Claim, ClaimId, Criticality, Origin, Provenance, ValidTime};
pub use error::{AdjudicateError, MemoryError, ProjectionError};
pub use gate::{Assertion, Disposition, Request};
pub use memory::{Memory, RequestStatus};
pub use settings::MemorySettings;
