//! Exit codes shared by every command (documented in README.md), and the error type that
//! carries one.

use oracle_host::StoreError;

// The codes and the error shape are shared with `oracle serve`'s API (oracle_serve), which
// answers with the same error objects: one definition, reached through the host.
pub use oracle_host::{
    ALREADY_RESOLVED, EXPIRED, FAILED, INPUT, INTEGRITY, OK, SUSPENDED, UNKNOWN_HANDLE, error_json,
};

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

    /// The error as `--json` shows it: the one error shape ([`error_json`]).
    pub fn error_value(&self) -> serde_json::Value {
        match &self.json {
            Some(v) if v.get("code").is_some_and(serde_json::Value::is_string) => v.clone(),
            other => error_json(other.clone(), self.code, &self.message),
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
        let message = e.to_string();
        CliError {
            code,
            json: Some(error_json(Some(store_error_json(&e)), code, &message)),
            message,
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
