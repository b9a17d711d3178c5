//! Exit codes shared by every command (documented in README.md), and the error type that
//! carries one.

use oracle_runtime::StoreError;

/// Success.
pub const OK: u8 = 0;
/// A run failed, or (for `diff`) the inputs differ.
pub const FAILED: u8 = 1;
/// Usage or input error: unreadable, missing or malformed input; nothing was changed.
pub const INPUT: u8 = 2;
/// A run is suspended awaiting input.
pub const SUSPENDED: u8 = 3;
/// Integrity or divergence failure: recorded data is damaged or inconsistent.
pub const INTEGRITY: u8 = 4;
/// `adjudicate`: no adjudication has that handle in the run (`reinstate`: no such claim).
pub const UNKNOWN_HANDLE: u8 = 5;
/// `adjudicate`: the handle was resolved already (the original verdict is reported).
pub const ALREADY_RESOLVED: u8 = 6;
/// `adjudicate`: the adjudication expired; the verdict is not applied.
pub const EXPIRED: u8 = 7;

/// An error on its way to the user, with its exit code.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
    /// Machine-readable details for `--json` (already printed when `printed` is set).
    pub json: Option<serde_json::Value>,
    /// Stdout was closed by its reader: exit [`OK`] and print nothing (see `out.rs`).
    pub quiet: bool,
}

impl CliError {
    pub fn input(message: impl Into<String>) -> CliError {
        CliError {
            code: INPUT,
            message: message.into(),
            json: None,
            quiet: false,
        }
    }

    /// Stdout's reader went away: the command stops and the process exits 0 silently.
    pub fn stdout_closed() -> CliError {
        CliError {
            code: OK,
            message: "stdout was closed".into(),
            json: None,
            quiet: true,
        }
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> CliError {
        let code = if e.is_integrity() { INTEGRITY } else { INPUT };
        CliError {
            code,
            message: e.to_string(),
            json: Some(store_error_json(&e)),
            quiet: false,
        }
    }
}

/// A stable JSON description of a store error.
pub fn store_error_json(e: &StoreError) -> serde_json::Value {
    use oracle_core::verify::LogBytesError;
    use serde_json::json;
    match e {
        StoreError::Log { path, error } => {
            let kind = match error {
                LogBytesError::Integrity { .. } => "integrity",
                LogBytesError::TornTail { .. } => "torn_tail",
                LogBytesError::HeadNotFound { .. } => "head_not_found",
            };
            let offset = match error {
                LogBytesError::Integrity { offset, .. }
                | LogBytesError::TornTail { offset, .. } => Some(*offset),
                LogBytesError::HeadNotFound { .. } => None,
            };
            let reason = match error {
                LogBytesError::Integrity { error, .. } => error.reason.to_string(),
                other => other.to_string(),
            };
            json!({"kind": kind, "path": path, "seq": error.seq(), "offset": offset, "reason": reason})
        }
        StoreError::Replay { path, source } => {
            json!({"kind": "replay", "path": path, "seq": source.seq(), "reason": source.to_string()})
        }
        StoreError::Locked { path, lock } => {
            json!({"kind": "locked", "path": path, "lock": lock, "reason": e.to_string()})
        }
        other => {
            json!({"kind": if other.is_integrity() { "integrity" } else { "input" }, "reason": other.to_string()})
        }
    }
}
