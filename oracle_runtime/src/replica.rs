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
use std::sync::Mutex;

/// Where a log's records go besides its file, at each commit point.
pub trait Replica: Send {
    /// Takes the whole records (canonical record bytes, `\n`-terminated, in seq order)
    /// appended since the last call, once the local file has them. All of them are kept, or
    /// none and an error: the writer stops on an error.
    fn commit(&mut self, records: &[u8]) -> io::Result<()>;
}

/// Replicas attached to logs no writer has opened yet.
static ATTACHED: Mutex<BTreeMap<PathBuf, Box<dyn Replica>>> = Mutex::new(BTreeMap::new());

/// Attaches `replica` to the log at `log`: the next writer to create or open that log commits
/// to it. Replaces a replica attached earlier and not yet taken.
pub fn attach(log: &Path, replica: Box<dyn Replica>) {
    let mut attached = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
    attached.insert(log.to_path_buf(), replica);
}

/// Removes a replica attached to `log` that no writer took (a run that stopped before writing).
pub fn detach(log: &Path) -> Option<Box<dyn Replica>> {
    let mut attached = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
    attached.remove(log)
}

/// Taken by a writer as it opens `log`.
pub(crate) fn take(log: &Path) -> Option<Box<dyn Replica>> {
    detach(log)
}
