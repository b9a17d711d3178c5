//! Where things live: the oracle home, run directories, and the files inside a run.
//!
//! ```text
//! <home>/runs/<run-id>/events.jsonl        the log (canonical JSONL, append-only)
//! <home>/runs/<run-id>/events.jsonl.lock   the single-writer advisory lock
//! <home>/runs/<run-id>/run.json            run bindings (outside the hash chain; sealed with the home's key)
//! <home>/runs/<run-id>/checkpoints.jsonl   signed checkpoints (beside the chain, not in it)
//! <home>/runs/<run-id>/snapshots/<seq>.json
//! <home>/runs/<run-id>/torn/               torn tails moved aside by `oracle repair`
//! ```

use std::path::{Path, PathBuf};

/// Name of the log file inside a run directory.
pub const LOG_FILE: &str = "events.jsonl";
/// Name of the signed-checkpoint file beside a run's log (see `crate::checkpoint`).
pub const CHECKPOINTS_FILE: &str = "checkpoints.jsonl";
/// Environment variable that overrides the default home.
pub const HOME_ENV: &str = "ORACLE_HOME";
/// Default home, relative to the current directory.
pub const HOME_DEFAULT: &str = ".oracle";

/// The directory holding all runs: `--home`, else `$ORACLE_HOME`, else `./.oracle`.
pub fn resolve_home(flag: Option<&Path>, env: Option<&std::ffi::OsStr>) -> PathBuf {
    match (flag, env) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(e)) if !e.is_empty() => PathBuf::from(e),
        _ => PathBuf::from(HOME_DEFAULT),
    }
}

/// A log file and the files that belong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogPaths {
    /// The run directory, when the log lives in one.
    pub run_dir: Option<PathBuf>,
    pub log: PathBuf,
}

impl LogPaths {
    /// Paths of a run directory.
    pub fn of_run(dir: &Path) -> LogPaths {
        LogPaths {
            run_dir: Some(dir.to_path_buf()),
            log: dir.join(LOG_FILE),
        }
    }

    /// A bare log file (no run directory around it).
    pub fn of_file(log: &Path) -> LogPaths {
        LogPaths {
            run_dir: None,
            log: log.to_path_buf(),
        }
    }

    /// Resolves what a user named: a log file, a run directory, or a run id under `home`.
    pub fn resolve(target: &Path, home: &Path) -> Option<LogPaths> {
        if target.is_file() {
            return Some(LogPaths::of_file(target));
        }
        if target.join(LOG_FILE).is_file() {
            return Some(LogPaths::of_run(target));
        }
        let by_id = home.join("runs").join(target);
        if by_id.join(LOG_FILE).is_file() {
            return Some(LogPaths::of_run(&by_id));
        }
        None
    }

    pub fn lock(&self) -> PathBuf {
        let mut name = self.log.as_os_str().to_owned();
        name.push(".lock");
        PathBuf::from(name)
    }

    /// Where snapshots go: `<run>/snapshots`, or `<log>.snapshots/` for a bare file.
    pub fn snapshots(&self) -> PathBuf {
        match &self.run_dir {
            Some(d) => d.join("snapshots"),
            None => {
                let mut name = self.log.as_os_str().to_owned();
                name.push(".snapshots");
                PathBuf::from(name)
            }
        }
    }

    /// Where `repair` moves torn tails.
    pub fn torn_dir(&self) -> PathBuf {
        match &self.run_dir {
            Some(d) => d.join("torn"),
            // A bare file name has an empty parent: the current directory.
            None => match self.log.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            },
        }
    }

    /// Where signed checkpoints of the log go: `checkpoints.jsonl` beside a log named
    /// `events.jsonl` (so a run named by id, by directory or by its log file gets the same
    /// file), else `<log>.checkpoints.jsonl`.
    pub fn checkpoints(&self) -> PathBuf {
        let dir = match self.log.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if self.log.file_name().is_some_and(|n| n == LOG_FILE) {
            return dir.join(CHECKPOINTS_FILE);
        }
        let mut name = self.log.as_os_str().to_owned();
        name.push(".checkpoints.jsonl");
        PathBuf::from(name)
    }

    pub fn meta(&self) -> Option<PathBuf> {
        self.run_dir.as_ref().map(|d| d.join("run.json"))
    }
}
