//! Looking after a run's files for a front end (`oracle repair`, `oracle snapshot`, `oracle
//! synth`): a torn last record moved aside, a snapshot of the state written beside the log, a
//! synthetic log written for benchmarks and tests.

use std::path::PathBuf;

use oracle_core::synth::{Synth, SynthConfig};
use oracle_core::{Event, Head, Snapshot};
use oracle_runtime::checkpoint::CheckpointError;
use oracle_runtime::repair::{self, CheckpointsRepair, Repair};
use oracle_runtime::snapshots;
use oracle_runtime::{Durability, LogPaths, LogWriter, StoreError};

/// `oracle repair`: the log's torn last record, if any, moved to a file beside it.
pub fn repair_log(paths: &LogPaths) -> Result<Repair, StoreError> {
    repair::repair(paths)
}

/// `oracle repair`, then: the checkpoint file's torn last line, if any, moved aside (a damaged
/// line before it is an integrity error, and the file is left as it is).
pub fn repair_checkpoints(paths: &LogPaths) -> Result<CheckpointsRepair, CheckpointError> {
    repair::repair_checkpoints(paths)
}

/// `oracle snapshot`: the state after event `at` (the last when `None`) written beside the
/// log; the snapshot and its file.
pub fn snapshot(paths: &LogPaths, at: Option<u64>) -> Result<(Snapshot, PathBuf), StoreError> {
    snapshots::take(paths, at)
}

/// Why `oracle synth` wrote no complete log.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// The generator could not make an event.
    #[error("synthetic log: {0}")]
    Event(String),
    /// The log could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `oracle synth`: a synthetic log of `config` written to `paths` with `durability`; `each` is
/// told every event's index as it is appended (for a progress display). The head written.
pub fn synth(
    paths: &LogPaths,
    config: SynthConfig,
    durability: Durability,
    mut each: impl FnMut(u64, &Event),
) -> Result<Head, SynthError> {
    let mut w = LogWriter::create(paths, durability)?;
    for (n, event) in Synth::new(config).enumerate() {
        let event = event.map_err(|e| SynthError::Event(e.to_string()))?;
        w.append_sealed(&event)?;
        each(n as u64, &event);
    }
    Ok(w.close()?)
}
