//! The one API every front end drives stored runs through (the command line, `oracle serve`, a
//! store's worker): find a run, bind what it needs (models, secrets, declared tools, working
//! directory) from what the home's key vouches for and what the caller gives again, resume it,
//! record an answer, and name every failure one way ([`HostError`]). Reading a run goes through
//! it too: [`inspect`] (logs, states, verification), [`keys`] (signed checkpoints),
//! [`maintain`] (repair, snapshots), [`tools`] (catalogues, calls, replay), [`plans`], and a
//! store's connection, [`Database`].
//!
//! What is absent, by design: no process-wide state (every call takes a [`Home`], or a
//! [`Database`] for a store); no binding
//! taken from a file beside the log unless the home's key sealed it (`oracle_runtime::bindings`);
//! no second way to resume a run (the CLI, the server and the worker all call [`Home::resume`]).

// Errors carry the runtime's session errors whole (seq, offset, both hashes), which are large
// on purpose (see oracle_runtime/src/lib.rs).
#![allow(clippy::result_large_err)]

pub mod admit;
pub mod backend;
pub mod background;
pub mod bind;
pub mod children;
pub mod code;
pub mod data;
pub mod database;
pub mod demand;
pub mod error;
pub mod evolve;
mod fork;
mod home;
pub mod inspect;
pub mod keys;
pub mod ledger;
pub mod limits;
pub mod maintain;
pub mod metrics;
mod notify;
pub mod otlp;
pub mod otlp_live;
mod outside;
pub mod pace;
pub mod plans;
pub mod queue;
pub mod rate;
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
pub mod tools;
mod transfer;
pub mod trust;
pub mod view;
pub mod worker;

pub use admit::{Admitted, Door, admit};
pub use backend::Backend;
pub use background::Background;
pub use bind::ToolChange;
pub use bind::{Bound, Given};
pub use database::Database;
pub use error::{Class, HostError};
pub use fork::{DAMAGED_DIR, Fork, Forked, NewPlan, RECOVERED, Recovered};
pub use home::{
    CANCEL_WAIT_MS, EventSent, Existing, Home, Note, Notes, Resume, Resumed, Start, Upgrade,
};
pub use home::{command_scorer, home_dir};
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
/// What a replay reproduced, printed by the front ends.
pub use oracle_runtime::session::Replayed;
/// A run as the run lists show it.
pub use oracle_runtime::session::RunInfo;
/// What a drive ended as, printed by the front ends.
pub use oracle_runtime::session::Session;
/// A run's session failure, carried whole in the front ends' errors.
pub use oracle_runtime::session::SessionError;
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
// A store's failure, worded by the store (`oracle ... --store URL` prints it as it is).
pub use oracle_pg::PgError;
// A store's run's row, the columns of `oracle runs --store`.
pub use oracle_pg::RunRow;
// What a keyed `oracle submit` did, printed as the run's id and state.
pub use oracle_pg::Submitted;
// The environment variable naming the store (`$ORACLE_STORE`), read as `--store` is.
pub use oracle_pg::STORE_ENV;
// A reinstatement (`oracle reinstate`), parsed from flags and passed through.
pub use oracle_runtime::adjudication::Reinstate;
// A log and the run directory it lives in, as `inspect::resolve` found them.
pub use oracle_runtime::LogPaths;
// A failure of a key file or a signed checkpoint, with its code (exit 4 or 2).
pub use oracle_runtime::checkpoint::CheckpointError;
// A public key, read from its file and passed back to the host (the approvers of a change).
pub use oracle_runtime::checkpoint::PublicKey;
// The options of a verification (threads, the head kept).
pub use oracle_runtime::VerifyOptions;
// What `oracle repair` did to a log, printed.
pub use oracle_runtime::repair::Repair;
// What `oracle repair` did to a checkpoint file, printed.
pub use oracle_runtime::repair::CheckpointsRepair;
// The exit statuses every front end shares (README.md, "Exit codes"), one definition.
pub use oracle_runtime::exit::OK;
// Exit 1: the run failed or was cancelled, or two runs differ.
pub use oracle_runtime::exit::FAILED;
// Exit 2: bad input; nothing was changed.
pub use oracle_runtime::exit::INPUT;
// Exit 3: the run is suspended, waiting.
pub use oracle_runtime::exit::SUSPENDED;
// Exit 4: recorded data is damaged, rewritten, cut short or unproven.
pub use oracle_runtime::exit::INTEGRITY;
// Exit 5: no such adjudication handle.
pub use oracle_runtime::exit::UNKNOWN_HANDLE;
// Exit 6: the adjudication was resolved already.
pub use oracle_runtime::exit::ALREADY_RESOLVED;
// Exit 7: the adjudication expired.
pub use oracle_runtime::exit::EXPIRED;
// A refused file (not a regular file, or over its named limit), worded for the user.
pub use oracle_runtime::fsread::ReadFileError;
// A declared tool's manifest problem (path, line, column, message), printed.
pub use oracle_runtime::declared::Problem;
// Where a home is when no flag names it (`$ORACLE_HOME`), named in `oracle config`.
pub use oracle_runtime::paths::HOME_ENV;
// The home's default directory (`.oracle`), named in `oracle config`.
pub use oracle_runtime::paths::HOME_DEFAULT;
// The line describing this machine that benchmarks start with (`oracle dev machine`).
pub use oracle_runtime::machine::line as machine_line;
// A run's belief memory as `oracle memory` prints it.
pub use oracle_runtime::adjudication::RunMemory;
// What `oracle export` and `oracle import` moved, printed.
pub use oracle_runtime::transfer::Transferred;
// An RFC 3339 instant given on the command line (`--at`), parsed.
pub use oracle_runtime::wall::instant_ms;
// A duration given on the command line (`30s`, `2h`), parsed.
pub use oracle_runtime::wall::duration_ms;
// Why an instant or a duration did not parse, printed.
pub use oracle_runtime::wall::WallError;
// How a drive ended (finished, suspended, interrupted), printed.
pub use oracle_runtime::engine::Ending;
// A drive's failure, matched on to print a divergence as `oracle diff` does.
pub use oracle_runtime::engine::EngineError;
// How far a drive is, shown on a progress line.
pub use oracle_runtime::engine::Progress;
// What a drive did (events matched, executed, reused; its state), printed.
pub use oracle_runtime::engine::Report;
// The prefix of a suspension's reason that says it waits on a timer, printed differently.
pub use oracle_runtime::engine::SLEEP_WAIT_PREFIX;
// The prefix of a suspension's reason that says it waits on its child run, printed differently.
pub use oracle_runtime::tools::spawn::SPAWN_REASON_PREFIX;
// A new run's options, built from flags and passed through.
pub use oracle_runtime::session::StartOptions;
// A run's parent and forks, printed by `oracle runs --tree`.
pub use oracle_runtime::fork::Lineage;
// When a drive writes resume points (`--snapshot-every`), parsed from flags.
pub use oracle_runtime::resume_point::Policy;
// The default of `--snapshot-every`, shown in `--help`.
pub use oracle_runtime::resume_point::EVERY_EVENTS_DEFAULT;
// How many times an adjudication request is sent to `--oracle-cmd`, printed.
pub use oracle_runtime::oracle::NOTIFY_ATTEMPTS_MAX;
