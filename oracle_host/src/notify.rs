//! Announcing to a program (`oracle serve --notify-cmd`): each announcement is handed to the
//! program on its standard input through the runtime's command port, which bounds the wait
//! (`oracle_runtime::oracle::NOTIFY_TIMEOUT_MS`) and owns the process group it starts.

use std::path::PathBuf;

use oracle_runtime::oracle::{CommandPort, NOTIFY_TIMEOUT_MS, NotifyError, OraclePort};
use serde_json::Value;

/// A program announcements are delivered to, one run of it per announcement.
pub struct Notifier {
    port: CommandPort,
}

impl Notifier {
    /// Delivers to `program`, each delivery bounded by the runtime's notify timeout.
    pub fn new(program: PathBuf) -> Notifier {
        Notifier {
            port: CommandPort {
                program,
                timeout_ms: NOTIFY_TIMEOUT_MS,
                verdicts: false,
            },
        }
    }

    /// Hands `announcement` to the program; an error says why it was not taken (the caller
    /// tries again later).
    pub fn notify(&mut self, announcement: &Value) -> Result<(), NotifyError> {
        // Its stdout is not read: an announcement decides nothing.
        self.port.notify(announcement).map(|_| ())
    }
}
