//! Errors of the store: every variant names the file and, where there is one, the seq and offset.

use std::path::PathBuf;

use oracle_core::verify::LogBytesError;
use oracle_core::{RecordingError, ReplayError, SnapshotError};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {error}")]
    Log { path: PathBuf, error: LogBytesError },
    #[error(
        "{path}: another process holds the writer lock ({lock}); one writer at a time keeps the log intact"
    )]
    Locked { path: PathBuf, lock: PathBuf },
    #[error("{path}: not a run directory or log file (no events.jsonl in it)")]
    NotARun { path: PathBuf },
    #[error("{path}: a run already exists here")]
    AlreadyExists { path: PathBuf },
    #[error("{path}: cannot record event: {source}")]
    Record {
        path: PathBuf,
        source: RecordingError,
    },
    #[error("{path}: replay failed: {source}")]
    Replay { path: PathBuf, source: ReplayError },
    #[error("{path}: {source}")]
    Snapshot {
        path: PathBuf,
        source: SnapshotError,
    },
    #[error("{path}: snapshot file is not valid: {reason}")]
    SnapshotFile { path: PathBuf, reason: String },
    #[error(
        "{path}: the log does not hold event {seq} at byte {offset} as a resume point says: {why}"
    )]
    Anchor {
        path: PathBuf,
        seq: u64,
        offset: u64,
        why: String,
    },
    #[error("{path}: seq {seq} is past the end of the log ({events} events)")]
    SeqOutOfRange {
        path: PathBuf,
        seq: u64,
        events: u64,
    },
    #[error(
        "{path}: an earlier write failed, so this writer stopped; check the log with `oracle verify` and `oracle repair` before appending again"
    )]
    Poisoned { path: PathBuf },
    #[error(
        "{path}: the store refused the records of this commit, so this writer stopped: {source}"
    )]
    Replica {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: the log is empty")]
    Empty { path: PathBuf },
    #[error(
        "{path}: refused before writing: the record would take the log from {len} to {end} bytes, past this process's file-size limit (ulimit -f) of {limit} bytes; nothing was changed"
    )]
    FileSizeLimit {
        path: PathBuf,
        len: u64,
        end: u64,
        limit: u64,
    },
    #[error(
        "{path}: the append failed ({source}) and was undone: the log is back to its {len} bytes, exactly as it was, so nothing was changed"
    )]
    AppendUndone {
        path: PathBuf,
        len: u64,
        source: std::io::Error,
    },
    #[error(
        "{path}: the append failed ({source}) and undoing it failed too ({undo}): the log may end in a partial record; check it with `oracle verify` and `oracle repair`"
    )]
    AppendNotUndone {
        path: PathBuf,
        source: std::io::Error,
        undo: std::io::Error,
    },
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> StoreError {
        let path = path.into();
        move |source| StoreError::Io { path, source }
    }

    /// True for errors that mean the recorded data is damaged or inconsistent (exit code 4), as
    /// opposed to unreadable or missing input (exit code 2).
    pub fn is_integrity(&self) -> bool {
        matches!(
            self,
            StoreError::Log { .. }
                | StoreError::Replay { .. }
                | StoreError::Snapshot { .. }
                | StoreError::AppendNotUndone { .. }
        )
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;
