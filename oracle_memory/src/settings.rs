//! The belief memory's settings: what a run records under `run_started.domains.memory`
//! (format 3; `run_started.memory` in formats 1 and 2), because they decide dispositions.

use oracle_core::payload::RunStarted;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The memory's name among a run's domains: the key of its settings in `run_started.domains`.
pub const DOMAIN: &str = "memory";

/// The belief-memory settings of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySettings {
    /// Whether an adjudication oracle answers conflicts (they are queued for it); without one
    /// they become contested at once.
    pub oracle: bool,
    /// Logical ticks after which a queued adjudication expires; `None`: it waits indefinitely.
    pub expiry_ticks: Option<u64>,
    /// Milliseconds of wall time after which a queued adjudication expires
    /// (`--adjudication-expiry 48h`): each request records its due instant (`expires_ms`) and
    /// a waker expires it then. Absent: no real-time expiry, and earlier logs keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_ms: Option<u64>,
    /// Confidence (percent) at or above which a valid-time window is trusted.
    pub confidence_min_pct: u64,
    /// The named store the run's memory is attached to (`oracle run --memory NAME`): its
    /// memory tools read and publish there, and their answers are recorded. Absent: the run's
    /// own memory, and earlier logs keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            oracle: true,
            expiry_ticks: None,
            expiry_ms: None,
            confidence_min_pct: 50,
            store: None,
        }
    }
}

/// Recorded memory settings that do not read as settings.
#[derive(Debug, thiserror::Error)]
#[error("the memory's recorded settings are not settings: {0}")]
pub struct SettingsError(#[from] serde_json::Error);

impl MemorySettings {
    /// The settings recorded as `value` (absent: the defaults), or why they are not settings.
    pub fn from_recorded(value: Option<&Value>) -> Result<MemorySettings, SettingsError> {
        match value {
            None => Ok(MemorySettings::default()),
            Some(v) => Ok(serde_json::from_value(v.clone())?),
        }
    }

    /// The settings a run recorded: under `domains.memory` (format 3), else under `memory`
    /// (formats 1 and 2), else the defaults.
    pub fn of_run(started: &RunStarted) -> Result<MemorySettings, SettingsError> {
        let recorded = started
            .domains
            .as_ref()
            .and_then(|d| d.get(DOMAIN))
            .or(started.memory.as_ref());
        MemorySettings::from_recorded(recorded)
    }

    /// When a request opened at wall instant `now_ms` expires under a real-time expiry.
    pub fn due_ms(&self, now_ms: u64) -> Option<u64> {
        self.expiry_ms.map(|e| now_ms.saturating_add(e))
    }

    /// The settings as recorded.
    pub fn to_value(&self) -> Value {
        // Invariant: a struct of a bool and integers always converts.
        serde_json::to_value(self).expect("memory settings always convert to JSON")
    }
}
