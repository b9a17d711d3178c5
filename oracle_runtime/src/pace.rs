//! The seam through which a host paces the calls a run makes to a rate-limited model or tool
//! (issue 56: `--model-rate fast=60/m`), so a call waits for its turn instead of meeting the
//! provider's 429.
//!
//! The engine asks the registry's [`Pacer`], if the host gave it one, for a turn right before
//! it executes an impure call (the only calls that reach the world, and never on replay), and
//! tells it when the call ended and how many tokens it reported. The host owns the rates and
//! their state shared across processes (a file under a home, a row of a store); the runtime
//! names neither. Waiting changes when a call happens, never what is recorded: nothing of a
//! turn (its time, its wait, the rate) reaches an event.

use serde_json::Value;

/// A call's turn, as [`Pacer::turn`] gave it: what [`Pacer::done`] is told back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    /// The rate-limited thing the call is of (the host's name for it: `model fast`).
    pub key: String,
    /// When the turn was given, in the host's clock (milliseconds).
    pub at_ms: u64,
}

/// Why a turn could not be had: the call fails with this as its recorded error, as a call
/// whose endpoint cannot be reached does.
#[derive(Debug, thiserror::Error)]
#[error("the rate limit of {key} could not be kept: {why}")]
pub struct PaceError {
    pub key: String,
    pub why: String,
}

/// What paces a drive's calls; shared by every thread of the drive (`--jobs`).
pub trait Pacer: Send + Sync {
    /// Waits (sleeping, never spinning) until a call of `tool` with `input` may go, and
    /// returns its turn; `None` at once when no rate covers the call.
    fn turn(&self, tool: &str, input: &Value) -> Result<Option<Turn>, PaceError>;

    /// The call of `turn` ended now, having used `tokens` (what the reply reported, 0 if
    /// nothing). Never fails the call: the call is over, and a failure to note it only makes
    /// later calls less well paced.
    fn done(&self, turn: &Turn, tokens: u64);
}
