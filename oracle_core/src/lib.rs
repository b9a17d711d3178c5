//! Pure core of oracle: the log format. Canonical encoding, hashing, events, chain
//! verification, state, reducers, snapshots and replay. No IO, no clock, no threads: everything
//! here is a function of its arguments, which is what makes a run replayable. No domain either:
//! the auction economy (`oracle_auction`), demand analysis (`oracle_demand`) and the belief
//! memory (`oracle_memory`) are crates of their own over this one.
//!
//! # Where things are
//!
//! - Bytes: [`canon`] (the canonical encoding, floats refused), [`hash`] (BLAKE3 contexts, the
//!   chain link), [`record`] (one canonical JSONL line), [`limits`] (what the reader rejects,
//!   stated once so [`Recorder::record`] refuses to seal more).
//! - Events: [`payload`] (one typed payload per [`EventKind`]), [`event`], [`log`] (the
//!   in-memory [`Log`] and the [`Recorder`] that seals payloads into events).
//! - Checking: [`verify`] ([`verify::check_record`] per event, parallelisable; [`ChainCheck`]
//!   for the links, in order), [`fast`] (the byte-level path that can only say "valid" or
//!   "not sure").
//! - Meaning: [`state`] and [`lthash`] (the map and its incremental hash), [`reduce`] (the only
//!   definition of how events change state), [`replay`], [`snapshot`] (refused unless the log
//!   vouches for it).
//! - Around them: [`agent`] (the [`agent::Agent`] contract: shown the state and its last calls'
//!   outcomes, it answers with state changes and an action, and never touches the world),
//!   [`capability`] (the `domain:action:scope` grammar shared by the plan compiler and the
//!   runtime's check of every call), [`diff`] (the first divergence of two logs, by binary
//!   search over chain hashes), [`synth`] and [`rng`] (seeded synthetic logs; the stream of one
//!   `random.int` call).
//!
//! # What a domain leaves here
//!
//! A domain's rules live in its own crate, so a change to them cannot touch the crate every
//! recorded byte depends on. What a domain *records* stays in the format: the event kinds and
//! payloads it uses ([`payload`]: the auction records only tool calls and outcomes, the memory
//! its verdict and sweep kinds too) and its hash contexts ([`hash::domain`], such as `ARTIFACT`
//! and `AUCTION_TIE`). That is why moving the domains out of this crate changed no recorded byte.

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
pub mod packed;
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
