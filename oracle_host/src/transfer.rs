//! Moving a run between homes: a run's log exported to one file, and a log imported as a run
//! of this home (verified first; without its plan, so it is read, never driven on).

use std::path::Path;

use oracle_runtime::transfer::{self, Transferred};

use crate::error::HostError;
use crate::home::Home;

impl Home {
    /// Writes `run`'s log to `out` (refusing an existing file unless `force`), verified first.
    pub fn export(&self, run: &str, out: &Path, force: bool) -> Result<Transferred, HostError> {
        Ok(transfer::export(self.dir(), run, out, force)?)
    }

    /// Makes the log at `log` a run of this home, once it verifies; a code run's record beside
    /// it (`LOG.agent.json`) is kept, its command sealed by this home only when
    /// `trust_commands` (otherwise nothing is ever started from it: `binding_unsealed`).
    pub fn import(&self, log: &Path, trust_commands: bool) -> Result<Transferred, HostError> {
        Ok(transfer::import(self.dir(), log, trust_commands)?)
    }
}
