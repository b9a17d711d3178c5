//! Pure core of oracle: the log format. Canonical encoding, hashing, events, chain
//! verification, state, reducers, snapshots and replay. No IO, no clock, no threads: everything
//! here is a function of its arguments, which is what makes a run replayable. No domain either:
//! the auction economy (`oracle_auction`), demand analysis (`oracle_demand`) and the belief
//! memory (`oracle_memory`) are crates of their own over this one.

pub mod agent;
pub mod canon;
pub mod capability;
pub mod diff;
pub mod event;
pub mod fast;
pub mod hash;
pub mod limits;
pub mod log;
pub mod lthash;
pub mod payload;
pub mod record;
pub mod reduce;
pub mod replay;
pub mod rng;
pub mod snapshot;
pub mod state;
pub mod synth;
pub mod verify;

pub use event::{Event, EventBody};
pub use hash::Hash;
pub use log::{Log, Recorder, RecordingError};
pub use payload::{EventKind, Payload};
pub use replay::{ReplayError, Replayer};
pub use snapshot::{Snapshot, SnapshotError};
pub use state::State;
pub use verify::{ChainCheck, Head, Link, Reason, VerifyError};

/// Re-exported so callers name one JSON value type.
pub use serde_json::Value;
