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

/// The short name of an exit code, the default `code` of an error object.
pub fn code_name(exit: u8) -> &'static str {
    match exit {
        FAILED => "failed",
        INPUT => "input",
        SUSPENDED => "suspended",
        INTEGRITY => "integrity",
        UNKNOWN_HANDLE => "unknown_handle",
        ALREADY_RESOLVED => "already_resolved",
        EXPIRED => "expired",
        _ => "error",
    }
}

/// The one shape of an error under `--json` (docs/FORMAT.md, "Errors"): `code` (a stable name:
/// the detail's `kind` when it has one, else the exit code's name), `exit` (the process's exit
/// code), `message` (what stderr says), and `seq`, `path`, `line`, `col` when known; any other
/// key of `details` stays beside them as a detail of that error.
pub fn error_json(
    details: Option<serde_json::Value>,
    exit: u8,
    message: &str,
) -> serde_json::Value {
    use serde_json::Value;
    let mut m = match details {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let code = m
        .get("kind")
        .and_then(Value::as_str)
        .map_or_else(|| code_name(exit).to_owned(), str::to_owned);
    m.insert("code".into(), Value::from(code));
    m.insert("exit".into(), Value::from(exit));
    m.insert("message".into(), Value::from(message));
    Value::Object(m)
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
