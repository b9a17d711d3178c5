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
pub mod backend;
pub mod bind;
pub mod data;
pub mod error;
pub mod evolve;
mod fork;
mod home;
pub mod ledger;
pub mod metrics;
mod notify;
pub mod otlp;
pub mod otlp_live;
mod outside;
pub mod recover;
pub mod request;
pub mod runid;
pub mod schedule;
pub mod schedule_store;
pub mod shared;
pub mod signal;
pub mod store_front;
pub mod timeline;
pub mod timers;
mod transfer;
pub mod trust;
pub mod view;
pub mod worker;

pub use admit::{Admitted, Door, admit};
pub use backend::Backend;
pub use bind::ToolChange;
pub use bind::{Bound, Given};
pub use error::{Class, HostError};
pub use fork::{DAMAGED_DIR, Fork, Forked, NewPlan, RECOVERED, Recovered};
pub use home::{CANCEL_WAIT_MS, Existing, Home, Note, Notes, Resume, Resumed, Start, Upgrade};
pub use notify::Notifier;

// Format types the front ends print, re-exported so they depend on the host alone.
/// A log's read or integrity failure, carried whole in the front ends' errors.
pub use oracle_runtime::StoreError;
/// The longest note a verdict takes: the inbox's form says it and holds the field to it.
pub use oracle_runtime::adjudication::NOTE_BYTES_MAX;
/// An outside claim on a run's memory as a front end submits it to [`Home::claim`].
pub use oracle_runtime::adjudication::OutsideClaim;
/// A verdict on an adjudication as a front end submits it to [`Home::adjudicate`].
pub use oracle_runtime::adjudication::Submission;
/// Why a run is cancelled and by whom, as a front end passes it to [`Home::cancel`].
pub use oracle_runtime::engine::Cancel;
/// The exit status of a refused input, for the front ends' own refusals.
pub use oracle_runtime::exit::INPUT as EXIT_INPUT;
/// The one error object (`code`, `exit`, `message`), built alike by every front end.
pub use oracle_runtime::exit::error_json;
/// A run's parent and forks, as a run's page and `GET /runs/{id}` show them ([`view::RunView`]).
pub use oracle_runtime::family::Family;
/// Where a fork branches (an event's seq or a step), as a front end asks [`Home::fork`].
pub use oracle_runtime::fork::ForkAt;
/// One streamed model-call delta, sent to a run's live viewers.
pub use oracle_runtime::live::Delta;
/// A model call's streamed text so far, shown on a run's page while the call lasts.
pub use oracle_runtime::live::Partial;
/// A live viewer's subscription to a run's deltas ([`data::deltas`]).
pub use oracle_runtime::live::Subscription;
/// The name of a run's log file in its directory.
pub use oracle_runtime::paths::LOG_FILE;
/// What a cancel did (recorded now, or requested of the process that holds the run).
pub use oracle_runtime::session::Cancelled;
/// How a drive may go on (its defaults are what a front end passes).
pub use oracle_runtime::session::Drive;
/// A run as the run lists show it.
pub use oracle_runtime::session::RunInfo;
/// What a drive ended as, printed by the front ends.
pub use oracle_runtime::session::Session;
/// A run's session failure, carried whole in the front ends' errors.
pub use oracle_runtime::session::SessionError;
/// Checks an outside claim's value before it is submitted (the same words as the CLI's).
pub use oracle_runtime::session::check_outside_value;
/// The word for how a drive ended (`completed`, `suspended`, ...), as every front end prints it.
pub use oracle_runtime::session::ending_word;
/// The order runs are listed in (`x-2` before `x-10`), alike in every front end.
pub use oracle_runtime::session::natural_order;
/// Wall time now in milliseconds, the one clock timers and schedules are due against.
pub use oracle_runtime::wall::now_ms;
/// A wall time in milliseconds as RFC 3339 text, as every front end prints one.
pub use oracle_runtime::wall::rfc3339;
/// How hard a write is synced: the front ends pass it to every host call that writes.
pub use oracle_runtime::writer::Durability;
