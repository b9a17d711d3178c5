//! Reading a run for a front end that shows it (`oracle log`, `inspect`, `verify`, `diff`,
//! `demand`, `auction`, `report`, `checkpoint`): finding the log a user named, streaming or
//! reading its events, the last ones through its index, the state at an event, a step's
//! conversation and model use, a fork's proof of its prefix.
//!
//! Nothing here writes: a command that only reads a run leaves no file anywhere (no index
//! written back beside the log, no home created), so a run in another home, or on a read-only
//! disk, reads the same.

use std::collections::BTreeSet;
use std::path::Path;

use oracle_core::Event;
use oracle_core::hash::Hash;
use oracle_runtime::index::IndexedLog;
use oracle_runtime::reader::{self, ScanEnd, VerifySummary};
use oracle_runtime::session::{self, Conversation, RunDir, SessionError};
use oracle_runtime::snapshots::{self, Rebuilt};
use oracle_runtime::{LogPaths, StoreError, VerifyOptions};

/// The log `target` names (a log file, a run directory, or a run id in `home`), as a run's when
/// it lives in a run directory; a run that cannot be found is [`SessionError::NotFound`], worded
/// with the runs the home has ("did you mean").
pub fn resolve(home: &Path, target: &Path) -> Result<LogPaths, SessionError> {
    LogPaths::resolve(target, home)
        .map(session::as_run)
        .ok_or_else(|| session::not_found(home, &target.to_string_lossy()))
}

/// The run directory `run` names in `home` (a run id or a run directory).
pub fn find(home: &Path, run: &str) -> Result<RunDir, SessionError> {
    session::find(home, run)
}

/// Streams the events of `log` in order to `visit` until it returns `false`, each record
/// checked on its own and linked to the one before; `allow_torn_tail` stops quietly at a cut
/// last line.
pub fn scan(
    log: &Path,
    allow_torn_tail: bool,
    visit: impl FnMut(Event) -> Result<bool, StoreError>,
) -> Result<ScanEnd, StoreError> {
    reader::scan(log, allow_torn_tail, visit)
}

/// Every event of `log`, checked as [`scan`] checks them.
pub fn events(log: &Path) -> Result<Vec<Event>, StoreError> {
    reader::read_all(log)
}

/// A log read by seq through its index, which is not written back unless asked (a command
/// that only reads leaves no file beside the log).
pub struct Indexed {
    log: IndexedLog,
}

impl Indexed {
    /// Opens `log` for reads by seq.
    pub fn open(log: &Path) -> Result<Indexed, StoreError> {
        Indexed::open_keeping(log, false)
    }

    /// Opens `log` for reads by seq, writing its index beside it when `keep` (`oracle diff
    /// --index`, or a run of the home, whose writer keeps its index anyway).
    pub fn open_keeping(log: &Path, keep: bool) -> Result<Indexed, StoreError> {
        IndexedLog::open_with(log, keep).map(|log| Indexed { log })
    }

    /// How many events the log holds.
    pub fn len(&self) -> u64 {
        self.log.len()
    }

    /// Whether the log holds no event.
    pub fn is_empty(&self) -> bool {
        self.log.len() == 0
    }

    /// The event `seq`, its record checked on its own.
    pub fn read(&mut self, seq: u64) -> Result<Event, StoreError> {
        self.log.read(seq)
    }
}

impl oracle_core::diff::EventSource for Indexed {
    type Error = StoreError;
    fn len(&self) -> u64 {
        self.log.len()
    }
    fn event(&mut self, seq: u64) -> Result<Event, StoreError> {
        self.log.read(seq)
    }
}

/// The recorded plan of the run `run` names in `home` (the copy its directory keeps, checked
/// against the program hash its log records): its id, its program hash and its source.
pub fn recorded_plan(home: &Path, run: &str) -> Result<(String, Hash, String), SessionError> {
    let found = session::find(home, run)?;
    session::recorded_plan_source(&found).map(|(plan, source)| (found.id, plan.hash, source))
}

/// The agent steps of the plan kept beside `log` (a run's), with those of its loop bodies and
/// of the sub-plans the run kept (`uses/`): a bare log file has no plan, so none.
pub fn agent_steps(log: &Path) -> BTreeSet<String> {
    let Some(dir) = log.parent() else {
        return BTreeSet::new();
    };
    std::fs::read_to_string(dir.join(session::PLAN_FILE))
        .map(|src| {
            let uses = dir.join(session::USES_DIR);
            let sources = session::plan_sources(&uses, &src);
            oracle_plan::agent_steps_with(&src, &sources)
        })
        .unwrap_or_default()
}

/// The state after event `at` (the last when `None`), from the newest usable snapshot when
/// `use_snapshots`, else folded from the first event.
pub fn state_at(
    paths: &LogPaths,
    at: Option<u64>,
    use_snapshots: bool,
) -> Result<Rebuilt, StoreError> {
    snapshots::state_at(paths, at, use_snapshots)
}

/// What step `step` of the run at `log` said to its model and heard back, up to event `upto`.
pub fn conversation(
    log: &Path,
    step: &str,
    upto: Option<u64>,
) -> Result<Option<Conversation>, StoreError> {
    session::conversation(log, step, upto)
}

/// The model calls and tokens of the run at `log` up to event `upto`, when its plan calls a
/// model.
pub fn model_usage(log: &Path, upto: Option<u64>) -> Option<oracle_runtime::domain::models::Usage> {
    session::model_usage(log, upto)
}

/// Verifies the whole log at `path` (records, links, the head kept when `opts` names one),
/// counting the bytes checked into `checked` for a progress display.
pub fn verify(
    path: &Path,
    opts: VerifyOptions,
    checked: Option<&std::sync::atomic::AtomicU64>,
) -> Result<VerifySummary, StoreError> {
    reader::verify_file_counted(path, opts, &[], checked).map(|(s, _)| s)
}

/// The hashes of the events of `log` whose hex starts with `prefix`, at most `max` of them (a
/// head named by a prefix).
pub fn hashes_starting(log: &Path, prefix: &str, max: usize) -> Result<Vec<Hash>, StoreError> {
    let mut found: Vec<Hash> = Vec::new();
    reader::scan(log, false, |e| {
        if e.hash.to_hex().starts_with(prefix) {
            found.push(e.hash);
        }
        Ok(found.len() < max)
    })?;
    Ok(found)
}

/// That the fork at `fork_log` shares the prefix of the run at `parent_log` it names (its id
/// compared when `parent_id` is given): the fork's `forked` event.
pub fn prove_prefix(
    fork_log: &Path,
    parent_log: &Path,
    parent_id: Option<&str>,
) -> Result<oracle_core::payload::Forked, oracle_runtime::fork::PrefixError> {
    oracle_runtime::fork::prove_prefix(fork_log, parent_log, parent_id)
}

/// The pieces of model replies this process streams from now on (`oracle run --follow`), or
/// `None` when the hub has no room for another watcher.
pub fn follow() -> Option<oracle_runtime::live::Subscription> {
    oracle_runtime::live::subscribe(None)
}

/// The runs of `home`, in id order, as `oracle runs` lists them.
pub fn runs(home: &Path) -> Result<Vec<session::RunInfo>, SessionError> {
    let mut runs = session::list(home)?;
    crate::queue::mark(&crate::queue::places(home), &mut runs);
    Ok(runs)
}

/// The log of run `id` in the file home `home`.
pub fn run_log(home: &Path, id: &str) -> std::path::PathBuf {
    home.join("runs")
        .join(id)
        .join(oracle_runtime::paths::LOG_FILE)
}

/// The run the log at `log` was forked from and the forks it has (`oracle runs --tree`).
pub fn lineage(log: &Path) -> oracle_runtime::fork::Lineage {
    oracle_runtime::fork::lineage(log)
}

/// The wall-clock milliseconds the run at `log` took, from its times file (only shown, never
/// recorded); `None` without one.
pub fn wall_span(log: &Path) -> Option<u64> {
    oracle_runtime::times::span(log)
}
