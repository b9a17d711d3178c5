//! The single writer of a log: records events, appends their records, syncs by policy.
//!
//! A writer holds an exclusive advisory lock on `<log>.lock` for its whole life, so a second
//! writer is refused with a clear error instead of interleaving records. Opening an existing
//! log verifies and replays it first, and refuses a torn tail (that needs `oracle repair`).
//!
//! The writer also keeps the log's index (`<log>.idx`, see [`crate::index`]) in step: each
//! record's offset is buffered with the record and written to the index right after the log
//! bytes, so the index never points past what the log holds.
//!
//! Every write and sync goes through the storage seam ([`crate::storage`]), so tests can run the
//! writer on simulated storage and cut the power between any two operations.

use std::fs::{File, OpenOptions, TryLockError};

use oracle_core::{Event, Head, Payload, Recorder, State, record};

use crate::error::{Result, StoreError};
use crate::index::IndexAppender;
use crate::paths::LogPaths;
use crate::reader;
use crate::replica;
use crate::storage::{FsFile, FsStorage, LogFile, Storage};

/// The writer lock of a log, taken before a writer is opened from a tail
/// ([`LogWriter::open_tail`]), so the tail is read under it.
pub struct WriterLock(File);

/// How the writers a call opens write: when they sync, and where else their commits go (a
/// store's replica, `crate::replica`). Passed to every call that opens a writer, so what a
/// writer does is decided by its caller, never by state another part of the process set.
#[derive(Clone, Default)]
pub struct Writing {
    pub durability: Durability,
    pub replica: Option<replica::Shared>,
    /// Where the named stores a run attached to one publishes to are kept, when not in the
    /// home's own directory (a store's worker: in the database, `crate::shared::StoreBackend`).
    pub stores: Option<std::sync::Arc<dyn crate::shared::StoreBackend>>,
}

impl From<Durability> for Writing {
    fn from(durability: Durability) -> Writing {
        Writing {
            durability,
            replica: None,
            stores: None,
        }
    }
}

impl std::fmt::Debug for Writing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writing")
            .field("durability", &self.durability)
            .field("replica", &self.replica.is_some())
            .finish()
    }
}

/// When appended records are forced to stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Every step durable before the next: a sync at every step boundary (between the engine's
    /// rounds, [`LogWriter::step_done`]) as well as at every commit point of `Effect`, so a
    /// machine crash loses no step that finished, and no intent before its effect. One sync per
    /// pure step (the step's records together), two per impure one (its intent, then its
    /// outcome); the slowest mode. A writer used outside the engine syncs at `commit`.
    Event,
    /// Sync at every [`LogWriter::commit`] and at least every `events_max` events.
    Group { events_max: u64 },
    /// Sync only at [`LogWriter::commit`], which the runtime calls exactly where durability
    /// matters: before an impure tool, a model or an outside program starts (so the intent is
    /// on disk before the world changes), right after an outside answer is recorded, when a
    /// domain's outcome goes to the outside, and when a drive ends (the run finished, failed,
    /// suspended or was interrupted). Pure work in between is only handed to the OS, in
    /// buffers of at most `BUFFER_BYTES_MAX`. The default. A machine crash loses at most the
    /// pure work since the last effect, which a resume recomputes.
    Effect,
    /// Hand records to the OS at commit points, never sync: a machine crash may lose recent
    /// committed steps (a process crash does not). For scratch runs and benchmarks.
    None,
}

impl Durability {
    /// The default: sync where an effect needs it ([`Durability::Effect`]).
    pub const DEFAULT: Durability = Durability::Effect;
    /// `Group` with its default bound, every 1000 events.
    pub const GROUP: Durability = Durability::Group {
        events_max: GROUP_EVENTS_MAX_DEFAULT,
    };
}

impl Default for Durability {
    fn default() -> Self {
        Durability::DEFAULT
    }
}

/// Default bound on events written between two syncs under [`Durability::Group`].
pub const GROUP_EVENTS_MAX_DEFAULT: u64 = 1000;
/// Buffered bytes that force a write to the OS whatever the policy (4 MiB).
pub const BUFFER_BYTES_MAX: usize = 4 << 20;

/// Appends to one log, exclusively.
pub struct LogWriter {
    paths: LogPaths,
    /// The log, opened for appending. One virtual call per flush.
    file: Box<dyn LogFile>,
    /// The writer lock; `None` on storage given to [`LogWriter::with_storage`].
    _lock: Option<File>,
    buf: Vec<u8>,
    recorder: Recorder,
    durability: Durability,
    /// Events handed to the file (or buffered) since the last sync.
    unsynced: u64,
    /// Syncs made so far (`fdatasync` calls), for measurements.
    syncs: u64,
    /// Bytes of the log handed to the file: the offset of the first buffered record.
    written: u64,
    /// Byte offset of the last record queued (where a resume point's anchor is).
    last_offset: u64,
    /// The index file, or `None` once maintaining it failed. Nothing is written to it after a
    /// failure, so it stays a correct prefix (readers extend it; the next `open` completes it)
    /// rather than gaining a gap.
    index: Option<IndexAppender>,
    /// Offsets of the buffered records (little-endian u64s), written after their log bytes.
    index_buf: Vec<u8>,
    /// The times file (`crate::times`), or `None` on simulated storage or once writing it
    /// failed: advisory wall-clock times, never part of what the log proves.
    times: Option<crate::times::TimesAppender>,
    /// The entries of the buffered records, written after their log bytes like the index's.
    times_buf: Vec<u8>,
    /// Set when a write or sync failed: the file may end in a partial record, so this writer
    /// refuses all further work (reopen after `oracle repair`).
    poisoned: bool,
    /// The store this log is replicated to (a worker's run, [`crate::replica`]), with the
    /// records written since its last commit.
    replica: Option<(replica::Shared, Vec<u8>)>,
}

fn take_lock(paths: &LogPaths) -> Result<File> {
    let lock_path = paths.lock();
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(StoreError::io(&lock_path))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(TryLockError::WouldBlock) => Err(StoreError::Locked {
            path: paths.log.clone(),
            lock: lock_path,
        }),
        Err(TryLockError::Error(e)) => Err(StoreError::Io {
            path: lock_path,
            source: e,
        }),
    }
}

/// Whether some process holds the writer lock of `paths` now (a live writer), found without
/// taking the lock (which could make a starting writer fail): the lock file's inode is looked
/// up in `/proc/locks`. `None` when that cannot be told (no `/proc`, or no lock file yet).
pub fn lock_held(paths: &LogPaths) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(paths.lock()).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let ino = meta.ino().to_string();
    // Lines read `1: FLOCK  ADVISORY  WRITE 2959 fe:00:5308902 0 EOF`: the sixth field is
    // major:minor:inode of the locked file.
    Some(locks.lines().any(|l| {
        l.split_whitespace()
            .nth(5)
            .and_then(|dev_ino| dev_ino.rsplit(':').next())
            .is_some_and(|i| i == ino)
    }))
}

/// Whether a process holds the writer lock of `paths` now: [`lock_held`] where `/proc` tells,
/// else by trying the lock (and letting it go at once). No lock file: no writer ever started.
pub fn writer_alive(paths: &LogPaths) -> std::io::Result<bool> {
    if let Some(held) = lock_held(paths) {
        return Ok(held);
    }
    let lock = match OpenOptions::new().write(true).open(paths.lock()) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match lock.try_lock() {
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// Takes the writer lock for a maintenance operation (repair) that must not race a writer.
pub fn lock_for_maintenance(paths: &LogPaths) -> Result<File> {
    take_lock(paths)
}

/// The process's soft file-size limit in bytes (`ulimit -f`), if it has one.
fn file_size_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Fsize).current
}

impl LogWriter {
    /// Creates a new, empty log (and its run directory if `paths` has one).
    pub fn create(paths: &LogPaths, durability: Durability) -> Result<LogWriter> {
        if let Some(dir) = &paths.run_dir {
            std::fs::create_dir_all(dir).map_err(StoreError::io(dir))?;
        }
        let lock = take_lock(paths)?;
        let mut writer =
            Self::create_in(paths, Some(lock), &mut FsStorage::new(paths), durability)?;
        writer.times = crate::times::TimesAppender::create(&paths.log);
        Ok(writer)
    }

    /// Creates a new, empty log on `storage` (simulated storage in tests: see
    /// [`crate::storage::sim`]). `paths` only names the files in errors and [`LogWriter::paths`];
    /// nothing is done at them. No lock is taken: the storage must be this writer's alone.
    pub fn with_storage(
        paths: &LogPaths,
        storage: &mut dyn Storage,
        durability: Durability,
    ) -> Result<LogWriter> {
        Self::create_in(paths, None, storage, durability)
    }

    fn create_in(
        paths: &LogPaths,
        lock: Option<File>,
        storage: &mut dyn Storage,
        durability: Durability,
    ) -> Result<LogWriter> {
        let file = storage.create_log().map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                StoreError::AlreadyExists {
                    path: paths.log.clone(),
                }
            } else {
                StoreError::Io {
                    path: paths.log.clone(),
                    source: e,
                }
            }
        })?;
        // Makes the new log's directory entry durable: without it a power loss may take the
        // whole file, synced records and all.
        let dir = paths.log.parent().filter(|p| !p.as_os_str().is_empty());
        storage
            .sync_dir()
            .map_err(StoreError::io(dir.unwrap_or(&paths.log)))?;
        // The index is derived data: a log without one is still a log, and readers rebuild it.
        let index_path = crate::index::index_path(&paths.log);
        let index = storage
            .create_index()
            .map_err(StoreError::io(&index_path))
            .and_then(|f| IndexAppender::create(index_path, f))
            .ok();
        Ok(LogWriter {
            paths: paths.clone(),
            file,
            _lock: lock,
            buf: Vec::with_capacity(64 << 10),
            recorder: Recorder::new(),
            durability,
            unsynced: 0,
            syncs: 0,
            written: 0,
            last_offset: 0,
            index,
            index_buf: Vec::with_capacity(8 << 10),
            times: None,
            times_buf: Vec::new(),
            poisoned: false,
            replica: None,
        })
    }

    /// Opens an existing log to append to it: takes the lock, then verifies and replays the
    /// whole log to recover the head and state. A torn tail or any damage is refused.
    pub fn open(paths: &LogPaths, durability: Durability) -> Result<LogWriter> {
        let lock = take_lock(paths)?;
        let (head, state) = reader::verify_and_replay(paths)?;
        LogWriter::opened(paths, durability, lock, head, state, None)
    }

    /// Opens an existing log from a verified tail (a resume point's): `recorded` was read by
    /// [`crate::recorded::Recorded::read_tail`] *under this writer's lock* (`lock`, from
    /// [`LogWriter::lock`]), and `state` is the state after its last event, replayed from the
    /// resume point's checked state. The records before the anchor are not read again.
    pub fn open_tail(
        paths: &LogPaths,
        durability: Durability,
        lock: WriterLock,
        anchor: &crate::recorded::Anchor,
        head: Head,
        state: State,
    ) -> Result<LogWriter> {
        let from = Some((anchor.seq, anchor.offset));
        LogWriter::opened(paths, durability, lock.0, head, state, from)
    }

    /// Takes the writer lock of `paths` (refused at once if another writer holds it).
    pub fn lock(paths: &LogPaths) -> Result<WriterLock> {
        take_lock(paths).map(WriterLock)
    }

    /// `index_from`: the anchor a tail was read from (the index is brought up to date from
    /// there).
    fn opened(
        paths: &LogPaths,
        durability: Durability,
        lock: File,
        head: Head,
        state: State,
        index_from: Option<(u64, u64)>,
    ) -> Result<LogWriter> {
        let file = OpenOptions::new()
            .append(true)
            .open(&paths.log)
            .map_err(StoreError::io(&paths.log))?;
        let recorder = Recorder::resume(head, state).map_err(|source| StoreError::Record {
            path: paths.log.clone(),
            source,
        })?;
        // Verified above with the lock held: the log ends on a complete record, here.
        let file: Box<dyn LogFile> = Box::new(FsFile::new(file));
        let written = file.size().map_err(StoreError::io(&paths.log))?;
        let index = IndexAppender::open_from(&paths.log, written, index_from).ok();
        Ok(LogWriter {
            paths: paths.clone(),
            file,
            _lock: Some(lock),
            buf: Vec::with_capacity(64 << 10),
            recorder,
            durability,
            unsynced: 0,
            syncs: 0,
            written,
            last_offset: 0,
            index,
            index_buf: Vec::with_capacity(8 << 10),
            times: crate::times::TimesAppender::open(&paths.log),
            times_buf: Vec::with_capacity(16 << 10),
            poisoned: false,
            replica: None,
        })
    }

    /// Hands every commit's records to `replica` too (a store's worker: `crate::replica`). Set
    /// before the first append, by whoever opened the writer; `None` leaves the writer as is.
    pub fn with_replica(mut self, replica: Option<replica::Shared>) -> LogWriter {
        if let Some(r) = replica {
            self.replica = Some((r, Vec::new()));
        }
        self
    }

    pub fn paths(&self) -> &LogPaths {
        &self.paths
    }

    pub fn head(&self) -> Head {
        self.recorder.head()
    }

    /// Byte offset of the last record appended by this writer (0 before any).
    pub fn last_offset(&self) -> u64 {
        self.last_offset
    }

    pub fn state(&self) -> &State {
        self.recorder.state()
    }

    /// False once writing the index failed: the log is unaffected, and readers extend or
    /// rebuild the index the writer stopped maintaining.
    pub fn index_maintained(&self) -> bool {
        self.index.is_some()
    }

    /// Records the next event and queues its record. Durable once the policy syncs it.
    pub fn append(&mut self, time: u64, parents: Vec<u64>, payload: Payload) -> Result<Event> {
        self.check_usable()?;
        let event = self
            .recorder
            .record(time, parents, payload)
            .map_err(|source| StoreError::Record {
                path: self.paths.log.clone(),
                source,
            })?;
        self.queue(&event)?;
        Ok(event)
    }

    /// Appends one event whole or not at all, and makes it durable: the event is written and
    /// synced at once (whatever the durability policy), and if the write or the sync fails the
    /// log is truncated back to the length it had before, under the lock this writer holds, and
    /// synced again. For events appended from outside a running program (verdicts, sweeps,
    /// outside claims), whose command must be able to say truthfully whether anything changed.
    ///
    /// On failure the writer is left unusable (as after any failed write): drop it.
    /// [`StoreError::AppendUndone`] means the log is byte for byte as it was;
    /// [`StoreError::AppendNotUndone`] that it may end in a partial record.
    pub fn append_whole(
        &mut self,
        time: u64,
        parents: Vec<u64>,
        payload: Payload,
    ) -> Result<Event> {
        self.commit()?;
        self.check_usable()?;
        let before = self.written;
        let event = self
            .recorder
            .record(time, parents, payload)
            .map_err(|source| StoreError::Record {
                path: self.paths.log.clone(),
                source,
            })?;
        // A record that would cross the process's file-size limit (`ulimit -f`) is refused
        // before any byte is written: the kernel would otherwise cut the write short and send
        // SIGXFSZ, whose default action kills the process before it can undo the part written.
        let mut encoded = Vec::new();
        record::encode_into(&event, &mut encoded);
        let end = before.saturating_add(encoded.len() as u64);
        if let Some(limit) = file_size_limit()
            && end > limit
        {
            // The recorder has moved past an event that is not written: stop this writer.
            self.poisoned = true;
            return Err(StoreError::FileSizeLimit {
                path: self.paths.log.clone(),
                len: before,
                end,
                limit,
            });
        }
        let appended = self
            .queue(&event)
            .and_then(|()| self.flush(true))
            .map(|()| event);
        // The replica is told after the local file is settled either way: a refusal there
        // leaves the local log one record ahead of the store, and the writer stopped.
        let appended = match appended {
            Ok(event) => self.commit_replica().map(|()| event),
            Err(e) => Err(e),
        };
        // Every failure past this point has poisoned the writer (a failed write, sync or replica
        // commit); one that had not would find the log at `before` already, and undoing it
        // is then a no-op that reports the truth.
        match appended {
            Ok(event) => Ok(event),
            Err(e) => {
                let source = match e {
                    StoreError::Io { source, .. } => source,
                    other => std::io::Error::other(other.to_string()),
                };
                self.buf.clear();
                self.index_buf.clear();
                self.times_buf.clear();
                // The index may now name the undone record: stop maintaining it (readers see
                // an entry past the log's end and rebuild it from the log).
                self.index = None;
                match self
                    .file
                    .set_len(before)
                    .and_then(|()| self.file.sync_data())
                {
                    Ok(()) => Err(StoreError::AppendUndone {
                        path: self.paths.log.clone(),
                        len: before,
                        source,
                    }),
                    Err(undo) => Err(StoreError::AppendNotUndone {
                        path: self.paths.log.clone(),
                        source,
                        undo,
                    }),
                }
            }
        }
    }

    /// Appends an event sealed elsewhere, after checking it extends this log.
    pub fn append_sealed(&mut self, event: &Event) -> Result<()> {
        self.check_usable()?;
        self.recorder
            .accept(event)
            .map_err(|source| StoreError::Record {
                path: self.paths.log.clone(),
                source,
            })?;
        self.queue(event)
    }

    fn queue(&mut self, event: &Event) -> Result<()> {
        let offset = self.written + self.buf.len() as u64;
        self.last_offset = offset;
        if self.index.is_some() {
            self.index_buf.extend_from_slice(&offset.to_le_bytes());
        }
        if self.times.is_some() {
            crate::times::queue(&mut self.times_buf, event.seq);
        }
        record::encode_into(event, &mut self.buf);
        self.unsynced += 1;
        match self.durability {
            Durability::Group { events_max } if self.unsynced >= events_max => self.flush(true),
            _ if self.buf.len() >= BUFFER_BYTES_MAX => self.flush(false),
            _ => Ok(()),
        }
    }

    /// A commit point: everything appended so far becomes durable under `Event`, `Group` and
    /// `Effect`, and is handed to the OS under `None`.
    pub fn commit(&mut self) -> Result<()> {
        let sync = !matches!(self.durability, Durability::None);
        self.flush(sync)?;
        self.commit_replica()
    }

    /// A step boundary (the engine calls it between rounds): under [`Durability::Event`], a
    /// commit point; under every other mode, nothing.
    pub fn step_done(&mut self) -> Result<()> {
        match self.durability {
            Durability::Event => self.commit(),
            _ => Ok(()),
        }
    }

    /// Hands the records written since the last commit to the replica, if there is one. A
    /// refusal (a lost lease, a broken connection) stops this writer: what the store holds is
    /// the truth, and the engine must not go on from records it does not hold.
    fn commit_replica(&mut self) -> Result<()> {
        let Some((replica, pending)) = &mut self.replica else {
            return Ok(());
        };
        if pending.is_empty() {
            return Ok(());
        }
        let committed = replica
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .commit(pending);
        if let Err(e) = committed {
            self.poisoned = true;
            return Err(StoreError::Replica {
                path: self.paths.log.clone(),
                source: e,
            });
        }
        pending.clear();
        Ok(())
    }

    fn check_usable(&self) -> Result<()> {
        if self.poisoned {
            return Err(StoreError::Poisoned {
                path: self.paths.log.clone(),
            });
        }
        Ok(())
    }

    fn flush(&mut self, sync: bool) -> Result<()> {
        self.check_usable()?;
        if !self.buf.is_empty() {
            if let Err(e) = self.file.append(&self.buf) {
                // Part of the buffer may be on disk; writing it again would put a partial
                // record in the middle of the log.
                self.poisoned = true;
                return Err(StoreError::Io {
                    path: self.paths.log.clone(),
                    source: e,
                });
            }
            self.written += self.buf.len() as u64;
            crate::live::appended(&self.paths, &self.buf);
            if let Some((_, pending)) = &mut self.replica {
                pending.extend_from_slice(&self.buf);
            }
            self.buf.clear();
            self.flush_index();
            self.flush_times();
        }
        if sync
            && self.unsynced > 0
            && let Err(e) = self.file.sync_data()
        {
            // After a failed fsync the kernel may have dropped the dirty pages: what is on
            // disk is unknown, so stop here.
            self.poisoned = true;
            return Err(StoreError::Io {
                path: self.paths.log.clone(),
                source: e,
            });
        }
        if sync && self.unsynced > 0 {
            self.syncs += 1;
        }
        if sync {
            self.unsynced = 0;
        }
        Ok(())
    }

    /// Writes the buffered index entries, whose records are now in the log. Not synced: the
    /// index is rebuilt from the log if a crash loses it. A failure stops index maintenance
    /// but not the writer.
    fn flush_index(&mut self) {
        if let Some(index) = &mut self.index
            && index.append(&self.index_buf).is_err()
        {
            self.index = None;
        }
        self.index_buf.clear();
    }

    /// Writes the buffered times entries, whose records are now in the log. Not synced and
    /// never checked: a failure stops keeping times but not the writer.
    fn flush_times(&mut self) {
        if let Some(times) = &mut self.times
            && !times.append(&self.times_buf)
        {
            self.times = None;
        }
        self.times_buf.clear();
    }

    /// Commits and closes. Prefer this to dropping, which commits but cannot report errors.
    /// How many times this writer synced the log so far.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    pub fn close(mut self) -> Result<Head> {
        self.commit()?;
        Ok(self.head())
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        // Best effort: an error here cannot be reported; `close` is the checked path. A
        // poisoned writer writes nothing more.
        if !self.poisoned {
            let _ = self.commit();
        }
    }
}
