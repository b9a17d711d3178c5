//! Moving a run between homes: a run's log exported to one file, and a log imported as a run
//! of this home (verified first; without its plan, so it is read, never driven on). A
//! conversation (an OpenAI-style message list) is imported as a run too: `oracle_demand`'s
//! mapping makes its events, the runtime's import makes them a run.

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

    /// Makes the conversation in `file` (`oracle_demand::conversation`) a completed run of this
    /// home named `conversation-N`, verified like any import; a file that is not one is
    /// refused (`conversation_invalid`) and nothing is created.
    pub fn import_messages(&self, file: &Path) -> Result<Transferred, HostError> {
        let bytes = read_bounded(file)?;
        let events = oracle_demand::conversation::events(&bytes)?;
        Ok(transfer::import_events(self.dir(), &events)?)
    }
}

/// `file`'s bytes, refusing one larger than a conversation may be before reading it whole.
fn read_bounded(file: &Path) -> Result<Vec<u8>, HostError> {
    use std::io::Read as _;
    let given = |why: String| HostError::Given {
        flag: "--messages",
        given: file.display().to_string(),
        why,
    };
    let limit = oracle_demand::limits::MESSAGES_FILE_BYTES_MAX;
    let f = std::fs::File::open(file).map_err(|e| given(format!("cannot read: {e}")))?;
    let mut bytes = Vec::new();
    f.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| given(format!("cannot read: {e}")))?;
    Ok(bytes)
}
