//! The storage seam of [`LogWriter`](crate::LogWriter): every file operation the writer makes
//! on its log and its index goes through [`LogFile`] and [`Storage`], so a test can put
//! [`sim::SimStorage`] (feature `sim`) underneath and cut the power between any two of them.
//!
//! The real implementation, `FsStorage`, is a thin layer over [`std::fs::File`]: the same
//! system calls, in the same order, as the writer made before the seam existed. The writer holds
//! its files as `Box<dyn LogFile>`: one virtual call per write or sync, that is per flush of a
//! whole buffer, never per event or per byte.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::paths::LogPaths;

/// One append-only file of a log: the log itself or its index.
///
/// Every write appends; nothing is read back or cut through this trait: the writer reads a log
/// through [`crate::reader`] before it opens it for appending, and only `oracle repair` (not the
/// writer) ever shortens a log.
pub trait LogFile: Send + Sync {
    /// Appends all of `bytes`. An error may leave any prefix of them written.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes every byte appended to this file before the call durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Length of the file in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Cuts the file back to `len` bytes (undoing an append that failed part way); durable
    /// once synced.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// Where a new log and its index are created.
pub trait Storage {
    /// Creates the log, empty. Fails with [`io::ErrorKind::AlreadyExists`] if there is one.
    fn create_log(&mut self) -> io::Result<Box<dyn LogFile>>;
    /// Makes the log's directory entry durable (fsync of its directory), so that a log created
    /// by [`Storage::create_log`] survives power loss once its bytes are synced.
    fn sync_dir(&mut self) -> io::Result<()>;
    /// Creates the index, empty, replacing any earlier one.
    fn create_index(&mut self) -> io::Result<Box<dyn LogFile>>;
}

/// A [`LogFile`] over a real file opened for appending, or positioned at its end and written
/// only by this handle (an index).
pub(crate) struct FsFile(File);

impl FsFile {
    pub(crate) fn new(file: File) -> FsFile {
        FsFile(file)
    }
}

impl LogFile for FsFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn size(&self) -> io::Result<u64> {
        self.0.metadata().map(|m| m.len())
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

/// The real storage of the log at `paths`: its file, its index next to it, its directory.
/// Crate-private: [`LogWriter::create`](crate::LogWriter::create) takes the log's lock before
/// using it, which [`LogWriter::with_storage`](crate::LogWriter::with_storage) does not.
pub(crate) struct FsStorage {
    log: PathBuf,
    index: PathBuf,
}

impl FsStorage {
    pub(crate) fn new(paths: &LogPaths) -> FsStorage {
        FsStorage {
            log: paths.log.clone(),
            index: crate::index::index_path(&paths.log),
        }
    }

    /// The directory holding the log, if its path names one.
    fn dir(&self) -> Option<&Path> {
        self.log.parent().filter(|p| !p.as_os_str().is_empty())
    }
}

impl Storage for FsStorage {
    fn create_log(&mut self) -> io::Result<Box<dyn LogFile>> {
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&self.log)?;
        Ok(Box::new(FsFile(file)))
    }

    fn sync_dir(&mut self) -> io::Result<()> {
        // Makes a newly created entry durable. Directories open read-only on Unix.
        match self.dir() {
            Some(dir) => File::open(dir).and_then(|d| d.sync_all()),
            None => Ok(()),
        }
    }

    fn create_index(&mut self) -> io::Result<Box<dyn LogFile>> {
        // Written from its start on, so every write lands at the end (O_APPEND cannot be
        // combined with truncation).
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.index)?;
        Ok(Box::new(FsFile(file)))
    }
}

/// Simulated storage that can lose power between any two operations. For tests only (feature
/// `sim`, which this crate's own dev-dependencies enable); nothing in the runtime uses it.
///
/// # The model
///
/// Each file keeps the bytes written to it and its *durable length*: how much of it is known to
/// survive a power loss. What it assumes of a real file system:
///
/// - **`sync_data` makes every earlier append of that file durable**, and nothing else: not
///   the other file's bytes, not the file's directory entry.
/// - **A file's existence is durable only after a directory sync** that follows its creation
///   ([`Storage::sync_dir`]). A file created and not yet covered by one may be gone after the
///   power loss, whatever was synced inside it (POSIX promises no more; some file systems do
///   more, which the model does not count on).
/// - **Unsynced appends survive as a prefix**: after a power loss a file holds its durable
///   bytes followed by some prefix (any length, cut anywhere, also inside a record) of what was
///   appended after them, and possibly zeros after that prefix (a file size that reached the
///   disk before the data did), never by bytes out of order or bytes from elsewhere. Which
///   outcome, and where the cut falls, is drawn from the seed, so a case replays exactly.
/// - **Power loss happens between two operations**:
///   [`SimStorage::lose_power_at`](sim::SimStorage::lose_power_at) picks the operation
///   (counting every create, append, sync and directory sync of either file from 0) that does
///   not happen; it and every later one fail with an I/O error. An append is never half done by
///   the power loss itself: its partial effect is the tear above.
///
/// Not modelled: durable bytes that rot or are lost (a disk that lies about `fsync`), unsynced
/// bytes surviving with a hole before later ones, and a second power loss during recovery
/// (`oracle repair` syncs on the real file system, outside this seam).
#[cfg(any(test, feature = "sim"))]
pub mod sim {
    use std::io;
    use std::sync::{Arc, Mutex, MutexGuard};

    use super::{LogFile, Storage};

    /// One simulated file.
    #[derive(Clone, Debug, Default)]
    struct SimFile {
        bytes: Vec<u8>,
        /// Bytes that survive a power loss for certain.
        durable: u64,
        /// The directory entry survives a power loss (a directory sync followed the creation).
        entry_durable: bool,
    }

    #[derive(Debug, Default)]
    struct State {
        log: Option<SimFile>,
        index: Option<SimFile>,
        /// Operations done so far.
        ops: u64,
        /// The operation at which the power goes out.
        lose_power_at: Option<u64>,
    }

    /// What a file holds after the power loss: `None` if it does not exist.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Survivors {
        pub log: Option<Vec<u8>>,
        pub index: Option<Vec<u8>>,
    }

    /// In-memory storage of one log and its index; clones share the same files, so a test
    /// keeps one handle while the writer owns another.
    #[derive(Clone, Debug, Default)]
    pub struct SimStorage {
        state: Arc<Mutex<State>>,
    }

    /// Which file a [`SimLogFile`] writes.
    #[derive(Clone, Copy, Debug)]
    enum Which {
        Log,
        Index,
    }

    /// A handle on one simulated file.
    pub struct SimLogFile {
        storage: SimStorage,
        which: Which,
    }

    fn power_lost() -> io::Error {
        io::Error::other("simulated power loss")
    }

    /// SplitMix64: a few lines of seeded, portable randomness for the tears.
    fn next(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..=max`.
    fn upto(seed: &mut u64, max: u64) -> u64 {
        next(seed) % (max + 1)
    }

    impl State {
        /// Counts one operation; refuses it if the power is out.
        fn op(&mut self) -> io::Result<()> {
            if self.lose_power_at.is_some_and(|at| self.ops >= at) {
                return Err(power_lost());
            }
            self.ops += 1;
            Ok(())
        }

        fn file(&mut self, which: Which) -> io::Result<&mut SimFile> {
            match which {
                Which::Log => self.log.as_mut(),
                Which::Index => self.index.as_mut(),
            }
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
    }

    impl SimStorage {
        /// Empty storage, with the power on for good.
        pub fn new() -> SimStorage {
            SimStorage::default()
        }

        fn lock(&self) -> MutexGuard<'_, State> {
            // A panic while holding the lock is a test failure already; its state is still
            // what the panicking test wrote.
            self.state.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// The power goes out just before operation `op` (counted from 0): it and every later
        /// operation fail.
        pub fn lose_power_at(&self, op: u64) {
            self.lock().lose_power_at = Some(op);
        }

        /// Operations done so far (all of them, if the power never went out).
        pub fn ops(&self) -> u64 {
            self.lock().ops
        }

        /// Everything appended to the log so far, durable or not (what a process crash leaves).
        pub fn log_bytes(&self) -> Option<Vec<u8>> {
            self.lock().log.as_ref().map(|f| f.bytes.clone())
        }

        /// Everything appended to the index so far, durable or not.
        pub fn index_bytes(&self) -> Option<Vec<u8>> {
            self.lock().index.as_ref().map(|f| f.bytes.clone())
        }

        /// The durable length of the log: what survives any power loss now.
        pub fn log_durable(&self) -> Option<u64> {
            self.lock().log.as_ref().map(|f| f.durable)
        }

        /// What the files hold after the power goes out now, drawn from `seed` within the
        /// model (see [the module](self)). Does not change the storage.
        pub fn survivors(&self, seed: u64) -> Survivors {
            let state = self.lock();
            let mut seed = seed;
            let mut survive = |file: &Option<SimFile>| -> Option<Vec<u8>> {
                let file = file.as_ref()?;
                // A file whose creation was not made durable may be gone: say it is, half of
                // the time (the other half it is there, as on most file systems).
                if !file.entry_durable && next(&mut seed).is_multiple_of(2) {
                    return None;
                }
                let durable = usize::try_from(file.durable).unwrap_or(usize::MAX);
                let durable = durable.min(file.bytes.len());
                let (kept, unsynced) = file.bytes.split_at(durable);
                let mut out = kept.to_vec();
                let tail = unsynced.len() as u64;
                match next(&mut seed) % 4 {
                    // Everything unsynced lost.
                    0 => {}
                    // All of it written (the disk was faster than the power loss).
                    1 => out.extend_from_slice(unsynced),
                    // A prefix, cut anywhere.
                    2 => {
                        let n = upto(&mut seed, tail) as usize;
                        out.extend_from_slice(&unsynced[..n]);
                    }
                    // A prefix, then zeros up to a size that reached the disk.
                    _ => {
                        let n = upto(&mut seed, tail);
                        let zeros = upto(&mut seed, tail - n);
                        out.extend_from_slice(&unsynced[..n as usize]);
                        out.resize(out.len() + zeros as usize, 0);
                    }
                }
                Some(out)
            };
            let log = survive(&state.log);
            let index = survive(&state.index);
            Survivors { log, index }
        }

        fn handle(&self, which: Which) -> Box<dyn LogFile> {
            Box::new(SimLogFile {
                storage: self.clone(),
                which,
            })
        }
    }

    impl Storage for SimStorage {
        fn create_log(&mut self) -> io::Result<Box<dyn LogFile>> {
            let mut state = self.lock();
            state.op()?;
            if state.log.is_some() {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            state.log = Some(SimFile::default());
            drop(state);
            Ok(self.handle(Which::Log))
        }

        fn sync_dir(&mut self) -> io::Result<()> {
            let mut state = self.lock();
            state.op()?;
            let state = &mut *state;
            for file in [&mut state.log, &mut state.index].into_iter().flatten() {
                file.entry_durable = true;
            }
            Ok(())
        }

        fn create_index(&mut self) -> io::Result<Box<dyn LogFile>> {
            let mut state = self.lock();
            state.op()?;
            // Truncating an existing index keeps its entry; a new one is not yet durable.
            let entry_durable = state.index.as_ref().is_some_and(|f| f.entry_durable);
            state.index = Some(SimFile {
                entry_durable,
                ..SimFile::default()
            });
            drop(state);
            Ok(self.handle(Which::Index))
        }
    }

    impl LogFile for SimLogFile {
        fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
            let mut state = self.storage.lock();
            state.op()?;
            state.file(self.which)?.bytes.extend_from_slice(bytes);
            Ok(())
        }

        fn sync_data(&mut self) -> io::Result<()> {
            let mut state = self.storage.lock();
            state.op()?;
            let file = state.file(self.which)?;
            file.durable = file.bytes.len() as u64;
            Ok(())
        }

        fn size(&self) -> io::Result<u64> {
            let mut state = self.storage.lock();
            Ok(state.file(self.which)?.bytes.len() as u64)
        }

        fn set_len(&mut self, len: u64) -> io::Result<()> {
            let mut state = self.storage.lock();
            state.op()?;
            let file = state.file(self.which)?;
            let keep = usize::try_from(len).unwrap_or(usize::MAX);
            if keep < file.bytes.len() {
                file.bytes.truncate(keep);
            }
            // Whether the cut itself survives a power loss before the next sync is not
            // modelled: only the durable prefix can shrink with it.
            file.durable = file.durable.min(len);
            Ok(())
        }
    }
}
