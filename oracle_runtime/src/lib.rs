//! The part of oracle that touches the world: the run store (log files, locks, durability,
//! snapshots, repair). It gathers effects and records them through `oracle_core`'s pure
//! recorder and reducers; nothing here decides what a state or an event means.

// Store errors carry the failing event's seq, offset and both hashes so the message can say
// exactly what is wrong; they are returned once per failed operation, never in a loop, so the
// size clippy warns about costs nothing measurable and boxing would only hide the fields.
#![allow(clippy::result_large_err)]

pub mod access;
pub mod adjudication;
pub mod bindings;
pub mod catalogue;
pub mod checkpoint;
pub mod confine;
pub mod declared;
pub mod domain;
pub mod engine;
pub mod error;
pub mod exit;
pub mod fsread;
pub mod http;
pub mod index;
pub mod mcp;
pub mod oracle;
pub mod paths;
pub mod reader;
pub mod recorded;
pub mod repair;
pub mod replica;
pub mod resume_point;
pub mod schema;
pub mod scorer;
pub mod seal;
pub mod secrets;
pub mod session;
pub mod snapshots;
pub mod storage;
pub mod tool;
pub mod tools;
pub mod transfer;
pub mod writer;

pub use error::{Result, StoreError};
pub use paths::LogPaths;
pub use reader::{VerifyOptions, VerifySummary, verify_file};
pub use writer::{Durability, LogWriter};
