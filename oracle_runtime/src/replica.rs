//! The store seam: a second home for a log's records, written at every commit point.
//!
//! A file home keeps a run in one file. A shared store (PostgreSQL, crate `oracle_pg`) keeps it
//! in a database, and a worker runs it in a scratch file home whose writer hands every commit's
//! records to a [`Replica`]. The replica's `commit` is where durability is decided: the writer
//! calls it after its own file took the bytes, and an error poisons the writer, so nothing the
//! engine does after a failed commit (an impure tool, say) can start. That is what fences a
//! worker that lost its lease: its next commit is refused and its run stops.
//!
//! A replica is given to the calls that open writers (start, resume, verdicts, claims,
//! sweeps) as part of their `crate::writer::Writing`, and each writer they open commits to it
//! (`LogWriter::with_replica`). Nothing process-wide holds one: a writer of any other log, or
//! of the same log in another call, never sees it.

use std::io;
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
