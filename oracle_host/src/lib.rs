//! The one API every front end drives stored runs through (the command line, `oracle serve`, a
//! store's worker): find a run, bind what it needs (models, secrets, declared tools, working
//! directory) from what the home's key vouches for and what the caller gives again, resume it,
//! record an answer, and name every failure one way ([`HostError`]).
//!
//! What is absent, by design: no process-wide state (every call takes a [`Home`]); no binding
//! taken from a file beside the log unless the home's key sealed it (`oracle_runtime::bindings`);
//! no second way to resume a run (the CLI, the server and the worker all call [`Home::resume`]).

// Errors carry the runtime's session errors whole (seq, offset, both hashes), which are large
// on purpose (see oracle_runtime/src/lib.rs).
#![allow(clippy::result_large_err)]

pub mod admit;
pub mod bind;
pub mod code;
pub mod error;
pub mod evolve;
mod fork;
mod home;
pub mod ledger;
pub mod metrics;
pub mod otlp;
pub mod otlp_live;
mod outside;
pub mod recover;
pub mod request;
pub mod schedule;
pub mod schedule_store;
pub mod shared;
pub mod signal;
pub mod store_front;
pub mod timeline;
pub mod timers;
mod transfer;
pub mod trust;
pub mod worker;

pub use admit::{Admitted, Door, admit};
pub use bind::ToolChange;
pub use bind::{Bound, Given};
pub use error::{Class, HostError};
pub use fork::{DAMAGED_DIR, Fork, Forked, NewPlan, RECOVERED, Recovered};
pub use home::{CANCEL_WAIT_MS, Existing, Home, Note, Notes, Resume, Resumed, Start, Upgrade};
