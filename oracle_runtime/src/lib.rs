//! The part of oracle that touches the world: the run store (log files, locks, durability,
//! snapshots, repair). It gathers effects and records them through `oracle_core`'s pure
//! recorder and reducers; nothing here decides what a state or an event means.
//!
//! # Where things are
//!
//! - A run's files: [`paths`] (the home and a run's files), [`writer`] (the single writer: its
//!   lock, durability, commit points) over [`storage`], [`reader`] (block-wise reads and the
//!   parallel verifier), [`index`], [`repair`] (a torn tail moved aside, never dropped),
//!   [`snapshots`], [`resume_point`], [`checkpoint`] (signed, chained, witnessed), [`transfer`]
//!   (export and import), and [`replica`], the store seam: where a writer's commits go besides
//!   its file (a PostgreSQL store, crate `oracle_pg`).
//! - Driving a run: [`engine`] (the one loop), [`domain`] (the one seam for domains: the belief
//!   memory and the auction economy), [`recorded`] (a verified log in memory), [`session`] (start,
//!   resume, answer, replay and list; [`session::waiting`] and [`session::recorded_plan`] for the
//!   pages), [`bindings`] and [`seal`] (what a run is bound to, sealed with the home's key).
//! - Tools and their guards: [`tool`] (what a tool declares, and the [`tool::Registry`], from
//!   which [`catalogue`] derives the plan compiler's catalogue; a domain's tools are
//!   declarations only, [`tool::Registry::declare`]), [`tools`] (the built-ins, one module per
//!   family; [`tools::builtin_with`] binds `llm.chat`'s model names for a run, [`tools::builtin`]
//!   none), [`declared`] (tools from manifests: exec, wasm, MCP), [`sandbox`] (their wasm and exec runners for a JSON function outside a run: a demand policy), [`mcp`], [`http`], [`live`] (a streamed reply's deltas, never recorded), [`secrets`],
//!   [`schema`], [`access`] and [`confine`] (a call's capability checked on the real path, then
//!   exactly that path opened), [`fsread`].
//! - Answers from outside: [`adjudication`] (verdicts and sweeps on a stored run), [`oracle`]
//!   (the port adjudication requests go to, and its unhashed outbox), [`scorer`].
//! - Failures: [`error`], [`exit`] (exit codes and the one error object).
//! - Measuring: [`machine`] (the CPU line every benchmark prints first, issue 42).
//!
//! # One loop for run, resume and replay
//!
//! [`engine`] describes the loop: while a record exists every event produced is compared with
//! the recorded one, and past its end `run` and `resume` append while `replay` stops. So resume
//! is replay followed by more run: a resumed run is checked against its own history before
//! anything is added, and every run exercises the same code path. Alternatives considered:
//! rebuilding only the state and continuing from it (what durable engines do with checkpoints)
//! would need the agent's private progress (attempt counts, pending calls) in the state, and
//! would skip the check that the program still produces its record.
//!
//! Replay against another plan (`oracle replay --plan`) compares the first event leniently
//! (program hash, grants and inputs may differ) and every later one on content (kind, time,
//! parents, payload, state after), since chain hashes differ once the first event does; the
//! first difference is reported with `oracle diff`'s classification and field paths.
//!
//! # Concurrency and durability
//!
//! A round's calls are independent by construction (the agent issued them together), so they
//! may run on `--jobs` threads; each returns its result to its slot, the outcomes are recorded
//! in call order, and every call of a round sees the state as of the round's decision.
//! Property tests (`tests/engine.rs`): random DAG plans give byte-identical logs with
//! `--jobs 1` and `--jobs 4`, and a log cut after any event and resumed is byte-identical to an
//! uninterrupted run.
//!
//! The engine commits exactly where durability matters ([`Durability::Effect`], the default):
//! before an impure tool, a model call or an outside program runs, right after an outside
//! answer is recorded, when a domain's outcome reaches the outside, and when a drive ends; an
//! outside event (a verdict, a sweep, a claim) is one append synced at once. Rounds of pure
//! tools are not synced: they can be recomputed. Which policy a writer follows is its caller's
//! choice ([`writer::Writing`]); BENCHMARKS.md ("Durability by effect") counts the syncs.

// Store errors carry the failing event's seq, offset and both hashes so the message can say
// exactly what is wrong; they are returned once per failed operation, never in a loop, so the
// size clippy warns about costs nothing measurable and boxing would only hide the fields.
#![allow(clippy::result_large_err)]

pub mod access;
pub mod adjudication;
pub mod answer;
pub mod bindings;
pub mod cancel;
pub mod catalogue;
pub mod causes;
pub mod checkpoint;
pub mod code_run;
pub mod confine;
pub mod declared;
pub mod domain;
pub mod engine;
pub mod error;
pub mod events;
pub mod exit;
pub mod family;
pub mod fork;
pub mod fsread;
pub mod http;
pub mod index;
pub mod keys;
pub mod live;
pub mod machine;
pub mod mcp;
pub mod oracle;
pub mod pace;
pub mod paths;
pub mod process_agent;
pub mod reader;
pub mod recorded;
pub mod repair;
pub mod replica;
pub mod resume_point;
pub mod sandbox;
pub mod schema;
pub mod scorer;
pub mod seal;
pub mod secrets;
pub mod session;
pub mod shared;
pub mod snapshots;
pub mod storage;
pub mod store_checkpoint;
pub mod store_seal;
pub mod times;
pub mod tool;
pub mod tools;
pub mod transfer;
pub mod turns;
pub mod wall;
pub mod writer;

pub use error::{Result, StoreError};
pub use paths::LogPaths;
pub use reader::{VerifyOptions, VerifySummary, verify_file};
pub use writer::{Durability, LogWriter};
