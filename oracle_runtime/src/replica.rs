//! The store seam: a second home for a log's records, written at every commit point.
//!
//! A file home keeps a run in one file. A shared store (PostgreSQL, crate `oracle_pg`) keeps it
//! in a database, and a worker runs it in a scratch file home whose writer hands every commit's
//! records to a [`Replica`]. The replica's `commit` is where durability is decided: the writer
//! calls it after its own file took the bytes, and an error poisons the writer, so nothing the
//! engine does after a failed commit (an impure tool, say) can start. That is what fences a
//! worker that lost its lease: its next commit is refused and its run stops.
//!
//! The engine and the session code open writers in a few places (start, resume, verdicts); a
//! replica is attached to a log's path before that code runs and taken by the first writer that
//! opens the path. The registry is keyed by path so that nothing between a worker and its
//! writer needs a new argument, and so that a writer of any other log never sees it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where a log's records go besides its file, at each commit point.
pub trait Replica: Send {
    /// Takes the whole records (canonical record bytes, `\n`-terminated, in seq order)
    /// appended since the last call, once the local file has them. All of them are kept, or
    /// none and an error: the writer stops on an error.
    fn commit(&mut self, records: &[u8]) -> io::Result<()>;
}

/// A replica as writers hold it: every writer of the log while it is attached commits to the
/// same one (a verdict and the resume after it are two writers of one log).
pub type Shared = Arc<Mutex<dyn Replica>>;

/// Replicas attached to logs, by log path.
static ATTACHED: Mutex<BTreeMap<PathBuf, Shared>> = Mutex::new(BTreeMap::new());

/// Attaches `replica` to the log at `log`: every writer that creates or opens that log from
/// now until [`detach`] commits to it. Replaces a replica attached earlier.
pub fn attach(log: &Path, replica: Shared) {
    let mut attached = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
    attached.insert(log.to_path_buf(), replica);
}

/// Detaches the replica of `log`; writers already open keep committing to it.
pub fn detach(log: &Path) -> Option<Shared> {
    let mut attached = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
    attached.remove(log)
}

/// The replica a writer opening `log` commits to, if one is attached.
pub(crate) fn of(log: &Path) -> Option<Shared> {
    let attached = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
    attached.get(log).cloned()
}
