//! Run ids from requests, checked before any file is touched: nothing a client sends can name
//! a path outside `<home>/runs`.
//!
//! A run id is one path component: not empty, at most [`RUN_ID_BYTES_MAX`] bytes, without `/`,
//! `\`, `..`, NUL or other control characters, and it must name a directory directly under
//! `<home>/runs` (not a symlink) that holds a regular `events.jsonl`. The runtime is then given
//! that directory's absolute path, never the id: `session::find` would otherwise try the id as
//! a path relative to the server's working directory first.

use std::path::{Path, PathBuf};

use oracle_runtime::paths::{LOG_FILE, LogPaths};
use oracle_runtime::session::RunDir;

use crate::data::DataError;

/// Longest run id, in bytes (a file name's limit on common file systems).
pub const RUN_ID_BYTES_MAX: usize = 255;

/// A run named by a request, checked: its id and absolute directory.
#[derive(Clone, Debug)]
pub struct ValidRun {
    pub id: String,
    pub dir: PathBuf,
    /// The home it lives in (absolute).
    pub home: PathBuf,
}

impl ValidRun {
    /// What the runtime's functions take as the run: its absolute directory.
    pub fn arg(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }

    pub fn paths(&self) -> LogPaths {
        LogPaths::of_run(&self.dir)
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    pub fn run_dir(&self) -> RunDir {
        RunDir {
            id: self.id.clone(),
            paths: self.paths(),
            dir: self.dir.clone(),
        }
    }
}

/// Why `id` is not a run id at all (before any file is looked at).
pub fn malformed(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("it is empty")
    } else if id.len() > RUN_ID_BYTES_MAX {
        Some("it is longer than run_id_bytes_max = 255 bytes")
    } else if id.contains('/') || id.contains('\\') {
        Some("it contains a path separator")
    } else if id.contains("..") {
        Some("it contains `..`")
    } else if id.chars().any(char::is_control) {
        Some("it contains a control character")
    } else if id == "." {
        Some("it is `.`")
    } else {
        None
    }
}

/// Checks `id` and finds its run under `<home>/runs` (`home` absolute).
pub fn validate(home: &Path, id: &str) -> Result<ValidRun, DataError> {
    validate_as(home, id, false)
}

/// [`validate`], also accepting a run prepared and not yet begun (its directory holds the
/// submission and no log: a background start, a store's run no worker took yet), for the
/// reads that describe a run without reading its log (`GET /runs/{id}`).
pub fn validate_submitted(home: &Path, id: &str) -> Result<ValidRun, DataError> {
    validate_as(home, id, true)
}

fn validate_as(home: &Path, id: &str, submitted: bool) -> Result<ValidRun, DataError> {
    if let Some(why) = malformed(id) {
        return Err(DataError::BadRequest(format!(
            "{:?} is not a run id: {why} (a run id is one name under <home>/runs, as `oracle runs` lists)",
            id.chars().take(80).collect::<String>()
        )));
    }
    let dir = home.join("runs").join(id);
    let not_found = || DataError::NotFound {
        what: format!("{id}: no such run (see GET /api/v1/runs)"),
    };
    let meta = std::fs::symlink_metadata(&dir).map_err(|_| not_found())?;
    if !meta.is_dir() {
        return Err(not_found());
    }
    let log = std::fs::symlink_metadata(dir.join(LOG_FILE));
    let prepared = || {
        std::fs::symlink_metadata(dir.join(oracle_runtime::session::SUBMISSION_FILE))
            .is_ok_and(|m| m.is_file())
    };
    match log {
        Ok(m) if m.is_file() => {}
        Err(_) if submitted && prepared() => {}
        _ => return Err(not_found()),
    }
    Ok(ValidRun {
        id: id.to_owned(),
        dir,
        home: home.to_path_buf(),
    })
}
