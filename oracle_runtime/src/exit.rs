//! Exit codes shared by every command of the `oracle` binary (documented in README.md) and the
//! one shape of an error object (docs/FORMAT.md, "Errors under --json"): the command line
//! prints it under `--json`, and `oracle serve`'s HTTP API answers with it, so both name a
//! failure the same way.

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
