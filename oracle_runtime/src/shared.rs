//! Named belief stores: where they are kept ([`StoreBackend`]: a file home's
//! `<home>/memory/<name>/store.jsonl`, [`FileStores`], or rows in PostgreSQL, `oracle_pg`), and
//! the calls made on them (publish, query, verdicts, claims, export), which name no backend.
//!
//! A file home's store holds one hash-chained record per line (`oracle_memory::shared`),
//! written under `store.lock`, its head sealed under the home's key (`crate::store_seal`):
//! every read checks the log against the seal, so a log rewritten with its chain recomputed is
//! refused (`SharedError::Tampered`).
//!
//! Every write takes the store's writer lock (an exclusive `flock`, waited for a bounded time),
//! reads and checks the whole store under it, decides against that projection, and appends
//! whole or not at all: the new lines are written at once and synced, and a failed write or
//! sync truncates the file back to its length before. So two runs publishing at once are
//! ordered by the lock: the second is decided against the first's claim, and a verdict given
//! twice at once applies once (the second finds the handle resolved). Readers take the lock
//! shared, so they never see half a write.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead as _, Read as _, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use oracle_core::Payload;
use oracle_core::payload::{self, ClaimRecorded};
use oracle_memory::adjudicate::{self as rules, Effects};
use oracle_memory::shared::{self as pure};
/// The pure store types, for backends that name no memory crate (`oracle_pg`).
pub use oracle_memory::shared::{Ledger, LedgerRecord, Store, StoreRecord, check_name};
use oracle_memory::tools::QueryOutcome;
use oracle_memory::{AdjudicateError, Claim, MemoryError, Provenance, Verdict};
use serde_json::Value;

use crate::seal::SealKey;
use crate::store_checkpoint::{self as checkpoint, Basis, LogPos};
pub use crate::store_checkpoint::{Base, Segment};
use crate::store_seal::{self as sealing, Expect, Mark};

/// Tries to take a store's lock before giving up, [`LOCK_WAIT_STEP_MS`] apart: ten seconds,
/// as for a run's lock (`crate::adjudication`).
pub const LOCK_WAIT_ATTEMPTS_MAX: u64 = 400;
pub const LOCK_WAIT_STEP_MS: u64 = 25;
/// The directory of a home that holds its stores.
pub const STORES_DIR: &str = "memory";
/// A store's log file and lock file.
pub const STORE_LOG: &str = "store.jsonl";
pub const STORE_LOCK: &str = "store.lock";

/// Why a store could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error("{0}")]
    Name(String),
    /// A name no store may have.
    #[error(transparent)]
    BadName(pure::StoreError),
    /// A record (of a store, or of the home's ledger) that does not follow the one before.
    #[error("store `{name}` is damaged: {source}")]
    Record {
        name: String,
        source: pure::StoreError,
    },
    #[error("no store `{name}` in this home (`oracle memory list` lists them)")]
    Unknown { name: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("store `{name}` is damaged: {why}")]
    Damaged { name: String, why: String },
    /// A log that is not what this home's writers sealed (`crate::store_seal`): rewritten,
    /// cut or extended by something else, or a seal that is not this home's.
    #[error("store `{name}` was changed outside oracle and is refused: {why}")]
    Tampered { name: String, why: String },
    /// A store with records and no seal (written before seals existed, or its seal deleted).
    #[error(
        "store `{name}` has no seal, so this home cannot tell it from a rewritten copy and refuses it: if you trust its content, adopt it with `oracle memory seal {name}` (every record is checked first)"
    )]
    Unsealed { name: String },
    #[error("store `{name}` is busy: another process held its lock for 10 s")]
    Locked { name: String },
    #[error("store `{name}`: {source}")]
    Memory { name: String, source: MemoryError },
    #[error("store `{name}`: {source}")]
    Adjudicate {
        name: String,
        source: AdjudicateError,
    },
    #[error(
        "store `{name}`: the append failed and was undone (nothing changed; a retry applies): {source}"
    )]
    Undone {
        name: String,
        source: std::io::Error,
    },
    /// The database that keeps the stores refused or could not be reached (nothing changed).
    #[error("store `{name}`: {why}")]
    Backend { name: String, why: String },
    /// What this backend does not do (forgetting a store kept in a database).
    #[error("{0}")]
    Unsupported(String),
}

/// Where named stores are kept. The engine, the memory domain and the host reach stores only
/// through this seam, so neither names a file nor a database: [`FileStores`] keeps them in a
/// file home, `oracle_pg` in PostgreSQL, both holding a store's records as the same bytes (a
/// log line each, newline included).
pub trait StoreBackend: Send + Sync {
    /// The names of the stores, sorted.
    fn list(&self) -> Result<Vec<String>>;
    /// The bytes of store `name`'s log as they stand, read whole under its lock
    /// ([`SharedError::Unknown`] when there is none).
    fn bytes(&self, name: &str) -> Result<Vec<u8>>;
    /// Under store `name`'s writer lock: reads it (every record checked), asks `decide` for the
    /// records to append, appends them whole or not at all, and returns the store after them.
    /// `create`: make the store if it does not exist, else [`SharedError::Unknown`].
    fn write_records(
        &self,
        name: &str,
        create: bool,
        decide: &mut dyn FnMut(&Store) -> Result<Vec<StoreRecord>>,
    ) -> Result<Store>;
    /// Deletes store `name` whole, recorded first in the ledger (`oracle memory forget`).
    fn forget(&self, name: &str, note: &str) -> Result<pure::LedgerRecord>;
    /// The ledger of forgotten stores, every record checked.
    fn ledger(&self) -> Result<pure::Ledger>;
    /// Store `name` as it stands, read the fastest way the backend has (a file home: from its
    /// checkpoint, folding only the records after it). The default folds every record.
    fn load(&self, name: &str) -> Result<Store> {
        parse(name, &text_of(name, self.bytes(name)?)?)
    }
    /// Store `name` as it stands for line (`subject`, `predicate`) only: queries and histories
    /// of that line answer as from [`StoreBackend::load`] (a file home reads the line's section
    /// of its checkpoint and the records after it). The default loads the whole store.
    fn load_line(&self, name: &str, subject: &str, predicate: &str) -> Result<Store> {
        let _ = (subject, predicate);
        self.load(name)
    }
    /// Record `seq` of store `name` as its log holds it, if it does (a publication retried
    /// after a checkpoint folded it). The default scans the log.
    fn record(&self, name: &str, seq: u64) -> Result<Option<StoreRecord>> {
        let text = text_of(name, self.bytes(name)?)?;
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str::<StoreRecord>(l).ok())
            .find(|r| r.seq == seq))
    }
    /// Store `name` with every record checked from its start or compacted base, never from a
    /// checkpoint (`oracle verify --memory`), and the segments compaction took out of it.
    fn verify(&self, name: &str) -> Result<(Store, Vec<Segment>)> {
        Ok((self.load(name)?, Vec::new()))
    }
    /// `oracle memory compact NAME --keep N`: folds every record but the newest `keep` into the
    /// store's base. The default: not done by this backend.
    fn compact(&self, name: &str, keep: u64) -> Result<Compacted> {
        let _ = keep;
        Err(SharedError::Unsupported(format!(
            "store `{name}`: compaction (--keep) is not done by this backend"
        )))
    }
    /// Store `name`'s base (if it was compacted) and the bytes of its log, read at once
    /// (`oracle memory export`). The default: no base.
    fn snapshot(&self, name: &str) -> Result<(Option<Base>, Vec<u8>)> {
        Ok((None, self.bytes(name)?))
    }
    /// Makes store `name`, which must not exist, with `base` as its base and no records yet
    /// (`oracle memory import` of a compacted store's export).
    fn create_with_base(&self, name: &str, base: &Base) -> Result<()> {
        let _ = base;
        Err(SharedError::Unsupported(format!(
            "store `{name}`: importing a compacted store is not done by this backend"
        )))
    }
    /// `oracle memory seal NAME`: seals store `name` at its head after checking every record,
    /// when it has no seal (written before seals existed); a sealed store is checked and left
    /// as it is. The head, and whether a seal was written. The default: not done by this
    /// backend (a database's stores are not sealed: docs/SECURITY.md).
    fn adopt(&self, name: &str) -> Result<(pure::StoreHead, bool)> {
        Err(SharedError::Unsupported(format!(
            "store `{name}`: this backend keeps no seals (docs/SECURITY.md, \"Shared belief stores\")"
        )))
    }
}

/// What a compaction did: the segment it took out of the log (`None`: the log had no more
/// than `keep` records), and the store after it.
#[derive(Clone, Debug)]
pub struct Compacted {
    pub segment: Option<Segment>,
    pub kept: u64,
    pub head: pure::StoreHead,
}

/// A store log's bytes as text.
fn text_of(name: &str, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| SharedError::Damaged {
        name: name.into(),
        why: e.to_string(),
    })
}

/// The stores of a file home, under `<home>/memory`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStores {
    pub home: PathBuf,
}

impl FileStores {
    pub fn new(home: &Path) -> FileStores {
        FileStores {
            home: home.to_path_buf(),
        }
    }
}

impl StoreBackend for FileStores {
    fn list(&self) -> Result<Vec<String>> {
        list(&self.home)
    }

    fn bytes(&self, name: &str) -> Result<Vec<u8>> {
        let _lock = lock(&self.home, name, false, false)?;
        let r = read(&self.home, name, true)?;
        sealed_bytes(&self.home, name, &r)
    }

    fn write_records(
        &self,
        name: &str,
        create: bool,
        decide: &mut dyn FnMut(&Store) -> Result<Vec<StoreRecord>>,
    ) -> Result<Store> {
        let _lock = lock(&self.home, name, true, create)?;
        let dir = dir_of(&self.home, name)?;
        let mut r = read(&self.home, name, true)?;
        r.drop_cut_tail(&dir)?;
        let records = decide(&r.store)?;
        if records.is_empty() {
            r.checkpoint(&self.home, name)?;
            return Ok(r.store);
        }
        let n = records.len() as u64;
        let at = r.mark();
        let (bytes, last) = encode(&records, r.pos);
        // Folded before anything is written: what is appended is what a reader takes.
        apply_all(name, &mut r.store, records)?;
        let next = Mark {
            records: r.store.head.records,
            head: r.store.head.hash,
            bytes: r.pos.len + bytes.len() as u64,
        };
        sealing::write(&dir, name, &r.key, at, Some(next))?;
        append(&dir, name, &bytes)?;
        // The seal already names `next` as in flight, which readers take: if settling it
        // fails, the records (synced) still stand, and the next writer seals again.
        let _ = sealing::write(&dir, name, &r.key, next, None);
        r.pos = LogPos {
            len: next.bytes,
            last_start: last,
        };
        r.tail += n;
        r.checkpoint(&self.home, name)?;
        Ok(r.store)
    }

    fn load(&self, name: &str) -> Result<Store> {
        let _lock = lock(&self.home, name, false, false)?;
        let r = read(&self.home, name, true)?;
        r.checkpoint(&self.home, name)?;
        Ok(r.store)
    }

    fn load_line(&self, name: &str, subject: &str, predicate: &str) -> Result<Store> {
        let _lock = lock(&self.home, name, false, false)?;
        if let Some(store) = read_line(&self.home, name, (subject, predicate))? {
            return Ok(store);
        }
        // No checkpoint, a refused one (its header, or this line's section), or a long tail:
        // a fresh one is written (unless the store is too short to be worth one), so the next
        // read of this line is by section again.
        let mut r = read(&self.home, name, true)?;
        if r.store.head.records >= checkpoint::TAIL_RECORDS_MIN {
            r.tail = u64::MAX;
        }
        r.checkpoint(&self.home, name)?;
        Ok(r.store)
    }

    fn record(&self, name: &str, seq: u64) -> Result<Option<StoreRecord>> {
        let _lock = lock(&self.home, name, false, false)?;
        let path = dir_of(&self.home, name)?.join(STORE_LOG);
        let mut log = checkpoint::open_log(&path)?;
        find_record(&mut log, seq).map_err(io(&path))
    }

    fn verify(&self, name: &str) -> Result<(Store, Vec<Segment>)> {
        let _lock = lock(&self.home, name, false, false)?;
        let r = read(&self.home, name, false)?;
        Ok((r.store, r.basis.segments))
    }

    fn compact(&self, name: &str, keep: u64) -> Result<Compacted> {
        let _lock = lock(&self.home, name, true, false)?;
        compact(&self.home, name, keep)
    }

    fn snapshot(&self, name: &str) -> Result<(Option<Base>, Vec<u8>)> {
        let _lock = lock(&self.home, name, false, false)?;
        let r = read(&self.home, name, true)?;
        let dir = dir_of(&self.home, name)?;
        let base = checkpoint::read_base(&dir, name, &r.key)?;
        Ok((base, sealed_bytes(&self.home, name, &r)?))
    }

    fn create_with_base(&self, name: &str, base: &Base) -> Result<()> {
        let _lock = lock(&self.home, name, true, true)?;
        let dir = dir_of(&self.home, name)?;
        let log = dir.join(STORE_LOG);
        let empty = fs::metadata(&log).map_err(io(&log))?.len() == 0;
        let exists = [checkpoint::BASE_FILE, sealing::SEAL_FILE];
        if !empty || exists.iter().any(|f| dir.join(f).exists()) {
            return Err(taken(name));
        }
        let key = checkpoint::key(&self.home, name)?;
        // Two seals around the base, as around an append: a crash between them leaves an
        // empty store or the base, each sealed.
        let nothing = Mark {
            records: 0,
            head: Store::new().head.hash,
            bytes: 0,
        };
        let head = Mark {
            records: base.store.head.records,
            head: base.store.head.hash,
            bytes: 0,
        };
        sealing::write(&dir, name, &key, nothing, Some(head))?;
        let state = base.store.state();
        checkpoint::write_base(&dir, name, &key, state, base.segments.clone())?;
        sealing::write(&dir, name, &key, head, None)
    }

    fn adopt(&self, name: &str) -> Result<(pure::StoreHead, bool)> {
        let _lock = lock(&self.home, name, true, false)?;
        let dir = dir_of(&self.home, name)?;
        let key = checkpoint::key(&self.home, name)?;
        if sealing::read(&dir, name, &key)?.is_some() {
            return Ok((read(&self.home, name, false)?.store.head, false));
        }
        let r = read_with(&self.home, name, false, false)?;
        sealing::write(&dir, name, &key, r.mark(), None)?;
        Ok((r.store.head, true))
    }

    fn forget(&self, name: &str, note: &str) -> Result<pure::LedgerRecord> {
        forget(&self.home, name, note)
    }

    fn ledger(&self) -> Result<pure::Ledger> {
        ledger(&self.home)
    }
}

/// Folds `records` (just appended) into `store`.
pub fn apply_all(name: &str, store: &mut Store, records: Vec<StoreRecord>) -> Result<()> {
    for r in records {
        store.apply(r).map_err(|source| SharedError::Record {
            name: name.into(),
            source,
        })?;
    }
    Ok(())
}

pub type Result<T> = std::result::Result<T, SharedError>;

/// Where the stores of `home` live.
pub fn stores_dir(home: &Path) -> PathBuf {
    home.join(STORES_DIR)
}

fn dir_of(home: &Path, name: &str) -> Result<PathBuf> {
    pure::check_name(name).map_err(SharedError::BadName)?;
    Ok(stores_dir(home).join(name))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SharedError + '_ {
    move |source| SharedError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The names of the stores of `home`, sorted.
pub fn list(home: &Path) -> Result<Vec<String>> {
    let dir = stores_dir(home);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&dir)(e)),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(STORE_LOG).is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| pure::check_name(n).is_ok())
        .collect();
    names.sort();
    Ok(names)
}

/// Takes the store's lock (exclusive for a writer, shared for a reader), waiting a bounded
/// time. `create`: make the store (an empty log) if it does not exist.
fn lock(home: &Path, name: &str, exclusive: bool, create: bool) -> Result<File> {
    let dir = dir_of(home, name)?;
    if !dir.join(STORE_LOG).is_file() {
        if !create {
            return Err(SharedError::Unknown { name: name.into() });
        }
        fs::create_dir_all(&dir).map_err(io(&dir))?;
    }
    let path = dir.join(STORE_LOCK);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(&path))?;
    for _ in 0..LOCK_WAIT_ATTEMPTS_MAX {
        let got = match exclusive {
            true => file.try_lock(),
            false => file.try_lock_shared(),
        };
        match got {
            Ok(()) => {
                let log = dir.join(STORE_LOG);
                if !log.is_file() {
                    File::create(&log).map_err(io(&log))?;
                }
                return Ok(file);
            }
            Err(fs::TryLockError::WouldBlock) => {
                thread::sleep(Duration::from_millis(LOCK_WAIT_STEP_MS));
            }
            Err(fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
    }
    Err(SharedError::Locked { name: name.into() })
}

/// A file store as read under its lock: the fold, where its log stands, the base it was
/// folded over, and how many records were folded from the log (not taken from a checkpoint).
struct Read {
    store: Store,
    pos: LogPos,
    basis: Basis,
    tail: u64,
    key: SealKey,
    /// The log's length on disk: past `pos.len` only when an append cut short by a crash left
    /// a tail the seal does not name (`crate::store_seal`), which is never read.
    log_len: u64,
}

impl Read {
    /// Where the fold stands, as a seal names it.
    fn mark(&self) -> Mark {
        Mark {
            records: self.store.head.records,
            head: self.store.head.hash,
            bytes: self.pos.len,
        }
    }

    /// Truncates the cut tail of an append a crash interrupted (the caller holds the writer
    /// lock), so the next append follows the sealed prefix.
    fn drop_cut_tail(&mut self, dir: &Path) -> Result<()> {
        if self.log_len <= self.pos.len {
            return Ok(());
        }
        let path = dir.join(STORE_LOG);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(self.pos.len).and_then(|()| f.sync_data()))
            .map_err(io(&path))?;
        self.log_len = self.pos.len;
        Ok(())
    }

    /// Writes a checkpoint of the fold if the tail it folded is long enough (see
    /// `store_checkpoint::maybe_write`).
    fn checkpoint(&self, home: &Path, name: &str) -> Result<()> {
        let dir = dir_of(home, name)?;
        checkpoint::maybe_write(
            &dir,
            name,
            &self.key,
            &self.basis,
            &self.store,
            self.pos,
            self.tail,
        )
    }
}

/// Reads a store's log under its lock (the caller holds it): from its base if it was
/// compacted, then from its checkpoint if `trust` and one passes its checks, then every record
/// after that, each checked, up to the length its seal allows; the head reached must be the
/// one the seal names (`crate::store_seal`).
fn read(home: &Path, name: &str, trust: bool) -> Result<Read> {
    read_with(home, name, trust, true)
}

/// What a reader of store `name` in `dir`, whose log is `len` bytes, may take of it.
fn expected(dir: &Path, name: &str, key: &SealKey, len: u64) -> Result<Expect> {
    let seal = sealing::read(dir, name, key)?;
    let based = dir.join(checkpoint::BASE_FILE).exists();
    sealing::expect(name, seal.as_ref(), len, based)
}

/// [`read`]; `sealed: false` reads the whole log without its seal (`oracle memory seal`
/// adopting a store that has none).
fn read_with(home: &Path, name: &str, trust: bool, sealed: bool) -> Result<Read> {
    let dir = dir_of(home, name)?;
    let key = checkpoint::key(home, name)?;
    let (start, basis) = match checkpoint::read_base(&dir, name, &key)? {
        Some(b) => {
            let records = b.store.head.records;
            (
                b.store,
                Basis {
                    records,
                    segments: b.segments,
                },
            )
        }
        None => (Store::new(), Basis::default()),
    };
    let path = dir.join(STORE_LOG);
    let mut log = checkpoint::open_log(&path)?;
    let log_len = log.metadata().map_err(io(&path))?.len();
    let expect = match sealed {
        true => Some(expected(&dir, name, &key, log_len)?),
        false => None,
    };
    let limit = expect.as_ref().map_or(log_len, |e| e.limit);
    let found = match trust {
        true => checkpoint::read_checkpoint(&dir, name, &key, basis.records, &mut log)?,
        false => None,
    };
    let found = found.filter(|(_, at)| at.len <= limit);
    let (mut store, from) = found.unwrap_or((start, LogPos::default()));
    let text = tail_of(name, &path, &mut log, from, limit)?;
    let (tail, last) = fold(name, &mut store, &text, basis.records)?;
    if let Some(e) = &expect {
        e.check(name, store.head.records, &store.head.hash)?;
    }
    let pos = LogPos {
        len: from.len + text.len() as u64,
        last_start: last.map_or(from.last_start, |l| from.len + l),
    };
    Ok(Read {
        store,
        pos,
        basis,
        tail,
        key,
        log_len,
    })
}

/// The bytes of the log `r` read, to its sealed length.
fn sealed_bytes(home: &Path, name: &str, r: &Read) -> Result<Vec<u8>> {
    let path = dir_of(home, name)?.join(STORE_LOG);
    let mut bytes = Vec::new();
    checkpoint::open_log(&path)?
        .take(r.pos.len)
        .read_to_end(&mut bytes)
        .map_err(io(&path))?;
    Ok(bytes)
}

/// Below this many bytes, [`find_record`] reads the log's lines in order instead of halving.
pub const RECORD_SCAN_BYTES: u64 = 1 << 16;

/// Record `seq` of a store's log, found by halving the byte range its line can start in (the
/// log's lines are in seq order): O(log of the log's length) short reads, never the whole log.
fn find_record(log: &mut File, seq: u64) -> std::io::Result<Option<StoreRecord>> {
    let (mut lo, mut hi) = (0u64, log.metadata()?.len());
    // Invariant: `lo` is a line's start, and the record's line, if any, starts in [lo, hi).
    while hi - lo > RECORD_SCAN_BYTES {
        let mid = lo + (hi - lo) / 2;
        let mut r = std::io::BufReader::new(&mut *log);
        r.seek(SeekFrom::Start(mid))?;
        let mut skipped = Vec::new();
        r.by_ref()
            .take(checkpoint::ANCHOR_BYTES_MAX)
            .read_until(b'\n', &mut skipped)?;
        let start = mid + skipped.len() as u64;
        let Some((line, rec)) = line_at(&mut r, start, hi)? else {
            hi = mid + 1;
            continue;
        };
        match rec.seq.cmp(&seq) {
            std::cmp::Ordering::Equal => return Ok(Some(rec)),
            std::cmp::Ordering::Less => lo = start + line,
            std::cmp::Ordering::Greater => hi = start,
        }
    }
    let mut r = std::io::BufReader::new(&mut *log);
    r.seek(SeekFrom::Start(lo))?;
    let mut at = lo;
    while let Some((line, rec)) = line_at(&mut r, at, hi)? {
        if rec.seq == seq {
            return Ok(Some(rec));
        }
        at += line;
    }
    Ok(None)
}

/// The length (newline included) and record of the line `r` stands at (offset `at`), if it
/// starts before `hi`, is whole, and reads as a record.
fn line_at(
    r: &mut std::io::BufReader<&mut File>,
    at: u64,
    hi: u64,
) -> std::io::Result<Option<(u64, StoreRecord)>> {
    if at >= hi {
        return Ok(None);
    }
    let mut line = Vec::new();
    r.by_ref()
        .take(checkpoint::ANCHOR_BYTES_MAX)
        .read_until(b'\n', &mut line)?;
    if line.pop() != Some(b'\n') {
        return Ok(None);
    }
    Ok(serde_json::from_slice(&line)
        .ok()
        .map(|rec| (line.len() as u64 + 1, rec)))
}

/// The text of a store's log from `from` on (the records after a checkpoint), up to byte
/// `limit` (its sealed length).
fn tail_of(name: &str, path: &Path, log: &mut File, from: LogPos, limit: u64) -> Result<String> {
    let mut bytes = Vec::new();
    log.seek(SeekFrom::Start(from.len))
        .and_then(|_| {
            log.take(limit.saturating_sub(from.len))
                .read_to_end(&mut bytes)
        })
        .map_err(io(path))?;
    text_of(name, bytes)
}

/// A store read for one line (the caller holds its lock): the line's section of its
/// checkpoint (`store_checkpoint::read_line`), then every record after it, each checked.
/// `None` when no checkpoint is believed, or the records after it are enough to write a fresh
/// one: the caller then folds the whole store (which writes it).
fn read_line(home: &Path, name: &str, line: (&str, &str)) -> Result<Option<Store>> {
    let dir = dir_of(home, name)?;
    let key = checkpoint::key(home, name)?;
    let path = dir.join(STORE_LOG);
    let mut log = checkpoint::open_log(&path)?;
    let expect = expected(&dir, name, &key, log.metadata().map_err(io(&path))?.len())?;
    let Some((mut store, from, basis)) = checkpoint::read_line(&dir, name, &key, &mut log, line)?
    else {
        return Ok(None);
    };
    if from.len > expect.limit {
        return Ok(None);
    }
    let text = tail_of(name, &path, &mut log, from, expect.limit)?;
    let (tail, _) = fold(name, &mut store, &text, basis.records)?;
    expect.check(name, store.head.records, &store.head.hash)?;
    match checkpoint::worth_writing(store.head.records, tail) {
        true => Ok(None),
        false => Ok(Some(store)),
    }
}

/// The store `text` holds (a store log's bytes from its first record), every record checked.
pub fn parse(name: &str, text: &str) -> Result<Store> {
    parse_over(name, Store::new(), text)
}

/// The store `text` holds over `start` (a compacted store's base, or an empty store), every
/// record checked: the first must follow `start`'s head.
pub fn parse_over(name: &str, start: Store, text: &str) -> Result<Store> {
    let mut store = start;
    let base = store.head.records;
    fold(name, &mut store, text, base)?;
    Ok(store)
}

/// Folds the records of `text` (whole lines of a log) into `store`, each checked; lines of
/// records before `base` (a compaction that stopped before rewriting the log) are skipped,
/// since the base folds them. How many were folded, and the offset of the last one's line.
fn fold(name: &str, store: &mut Store, text: &str, base: u64) -> Result<(u64, Option<u64>)> {
    let damaged = |why: String| SharedError::Damaged {
        name: name.into(),
        why,
    };
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(damaged("the log ends in a partial line".into()));
    }
    let (mut n, mut at, mut last) = (0, 0u64, None);
    for (i, line) in text.lines().enumerate() {
        let start = at;
        at += line.len() as u64 + 1;
        let rec: StoreRecord =
            serde_json::from_str(line).map_err(|e| damaged(format!("line {}: {e}", i + 1)))?;
        if line != line_of(&rec) {
            return Err(damaged(format!("line {} is not canonical", i + 1)));
        }
        if rec.seq < base && store.head.records == base {
            continue;
        }
        store.apply(rec).map_err(|source| SharedError::Record {
            name: name.into(),
            source,
        })?;
        n += 1;
        last = Some(start);
    }
    Ok((n, last))
}

/// A record's line in a store's log (without its newline): the bytes every backend keeps.
pub fn line_of(rec: &StoreRecord) -> String {
    // Invariant: a record is plain data with string keys (serde_json's maps are sorted).
    let v = serde_json::to_value(rec).expect("store records always convert to JSON");
    serde_json::to_string(&v).expect("JSON values always print")
}

/// The store `name` as it stands (on a file home, from its checkpoint and the records after).
pub fn load(stores: &dyn StoreBackend, name: &str) -> Result<Store> {
    stores.load(name)
}

/// The lines of `records` appended to a log standing at `pos`, and where the last one starts.
fn encode(records: &[StoreRecord], pos: LogPos) -> (Vec<u8>, u64) {
    let mut bytes = Vec::new();
    let mut last = pos.last_start;
    for r in records {
        last = pos.len + bytes.len() as u64;
        bytes.extend_from_slice(line_of(r).as_bytes());
        bytes.push(b'\n');
    }
    (bytes, last)
}

/// Appends `bytes` (whole record lines) to the log of the store in `dir` whole or not at all:
/// written at once and synced; on failure the log is truncated back to its length before and
/// synced.
fn append(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let path = dir.join(STORE_LOG);
    let mut file = OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(io(&path))?;
    let before = file.metadata().map_err(io(&path))?.len();
    let written = file.write_all(bytes).and_then(|()| file.sync_data());
    if let Err(source) = written {
        let undo = file.set_len(before).and_then(|()| file.sync_data());
        return match undo {
            Ok(()) => Err(SharedError::Undone {
                name: name.into(),
                source,
            }),
            Err(e) => Err(io(&path)(e)),
        };
    }
    Ok(())
}

/// Runs `decide` on the store under its writer lock, appends the records it returns, and
/// gives back the store after them with `decide`'s answer.
pub fn write<T>(
    stores: &dyn StoreBackend,
    name: &str,
    create: bool,
    decide: impl FnOnce(&Store) -> Result<(Vec<StoreRecord>, T)>,
) -> Result<(Store, T)> {
    let mut decide = Some(decide);
    let mut answer = None;
    let store = stores.write_records(name, create, &mut |s| {
        let f = decide.take().ok_or_else(|| SharedError::Damaged {
            name: name.into(),
            why: "a store's writer decided twice under one lock".into(),
        })?;
        let (records, a) = f(s)?;
        answer = Some(a);
        Ok(records)
    })?;
    let answer = answer.ok_or_else(|| SharedError::Damaged {
        name: name.into(),
        why: "a store's writer returned without deciding".into(),
    })?;
    Ok((store, answer))
}

/// `memory.assert` by step `step` of `run` (its answer to be recorded at the run's event
/// `key`): the store's answer, the same one again if `run` published under `key` already.
pub fn publish(
    stores: &dyn StoreBackend,
    name: &str,
    run: &str,
    key: &str,
    step: &str,
    input: &Value,
) -> Result<Value> {
    let (store, _) = write(stores, name, true, |s| {
        let rec = s
            .publish(run, key, step, input)
            .map_err(|source| SharedError::Memory {
                name: name.into(),
                source,
            })?;
        Ok((rec.into_iter().collect(), ()))
    })?;
    if let Some(rec) = store.published(run, key) {
        return Ok(store.answer_of(name, rec));
    }
    // A retry of a record the checkpoint folded: read it again from the log.
    let missing = || SharedError::Damaged {
        name: name.into(),
        why: format!("the record of {run} at {key} is missing after it was written"),
    };
    let seq = store.published_seq(run, key).ok_or_else(missing)?;
    let rec = stores.record(name, seq)?.ok_or_else(missing)?;
    Ok(store.answer_of(name, &rec))
}

/// `memory.query` against the store now (an empty store if there is none yet).
pub fn query(stores: &dyn StoreBackend, name: &str, input: &Value) -> Result<QueryOutcome> {
    let store = load_or_empty(stores, name, line_asked(input))?;
    store
        .query(name, input)
        .map_err(|source| SharedError::Memory {
            name: name.into(),
            source,
        })
}

/// `memory.history` against the store now.
pub fn history(stores: &dyn StoreBackend, name: &str, input: &Value) -> Result<Value> {
    let store = load_or_empty(stores, name, line_asked(input))?;
    store
        .history(name, input)
        .map_err(|source| SharedError::Memory {
            name: name.into(),
            source,
        })
}

/// The one line a query or history names (`subject` and `predicate`), if it names one: only
/// that line is read. A history of a whole subject reads the whole store.
fn line_asked(input: &Value) -> Option<(&str, &str)> {
    Some((
        input.get("subject")?.as_str()?,
        input.get("predicate")?.as_str()?,
    ))
}

fn load_or_empty(
    stores: &dyn StoreBackend,
    name: &str,
    line: Option<(&str, &str)>,
) -> Result<Store> {
    let loaded = match line {
        Some((s, p)) => stores.load_line(name, s, p),
        None => load(stores, name),
    };
    match loaded {
        Err(SharedError::Unknown { .. }) => Ok(Store::new()),
        other => other,
    }
}

/// A verdict on one of the store's requests: one `adjudicated` record, under the lock.
pub fn adjudicate(
    stores: &dyn StoreBackend,
    name: &str,
    handle: &str,
    verdict: Verdict,
    evidence: Provenance,
    note: &str,
    by: Option<String>,
) -> Result<(Store, Effects)> {
    write(stores, name, false, |s| {
        let now = s.head.time() + 1;
        let effects =
            rules::adjudicate(&s.memory, handle, verdict, evidence, now).map_err(|source| {
                SharedError::Adjudicate {
                    name: name.into(),
                    source,
                }
            })?;
        let payload = Payload::Adjudicated(payload::Adjudicated {
            handle: handle.to_owned(),
            verdict: verdict.as_str().to_owned(),
            evidence: evidence.as_str().to_owned(),
            note: note.to_owned(),
            effects: effects.to_value(),
            by,
        });
        let rec = seal(s, name, &payload)?;
        Ok((vec![rec], effects))
    })
}

fn seal(s: &Store, name: &str, payload: &Payload) -> Result<StoreRecord> {
    s.seal(pure::OUTSIDE, "", payload)
        .map_err(|source| SharedError::Record {
            name: name.into(),
            source,
        })
}

/// A claim from outside any run (`oracle claim --memory`): the gate decides it, one
/// `claim_recorded` record. Creates the store if it does not exist.
pub fn claim(
    stores: &dyn StoreBackend,
    name: &str,
    claim: Claim,
    note: &str,
) -> Result<(Store, Value)> {
    write(stores, name, true, |s| {
        let a = s
            .decide_outside(claim)
            .map_err(|source| SharedError::Memory {
                name: name.into(),
                source,
            })?;
        // Invariant: an assertion is plain data with string keys.
        let assertion = serde_json::to_value(&a).expect("assertions always convert to JSON");
        let payload = Payload::ClaimRecorded(ClaimRecorded {
            assertion: assertion.clone(),
            note: note.to_owned(),
            by: None,
        });
        Ok((vec![seal(s, name, &payload)?], assertion))
    })
}

/// Every request past its expiry becomes contested: one `adjudications_expired` record, or
/// nothing when none is expired.
pub fn sweep(stores: &dyn StoreBackend, name: &str) -> Result<(Store, u64)> {
    write(stores, name, false, |s| {
        let now = s.head.time() + 1;
        let expired = rules::sweep(&s.memory, now);
        if expired.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let n = expired.len() as u64;
        // Invariant: expiry entries are plain data.
        let list = serde_json::to_value(&expired).expect("expired entries always convert");
        let payload = Payload::AdjudicationsExpired(payload::AdjudicationsExpired {
            now,
            expired: list,
            fired_ms: None,
        });
        Ok((vec![seal(s, name, &payload)?], n))
    })
}

/// Makes a superseded or contested claim of the store live again: one `reinstated` record.
pub fn reinstate(
    stores: &dyn StoreBackend,
    name: &str,
    claim: &str,
    evidence: Provenance,
    note: &str,
) -> Result<(Store, rules::Reinstatement)> {
    write(stores, name, false, |s| {
        let refused = |source| SharedError::Adjudicate {
            name: name.into(),
            source,
        };
        let id = s.memory.claim_by_prefix(claim).map_err(refused)?;
        let fx = rules::reinstate(&s.memory, &id, evidence).map_err(refused)?;
        let payload = Payload::Reinstated(payload::Reinstated {
            claim: id.to_hex(),
            evidence: evidence.as_str().to_owned(),
            note: note.to_owned(),
            effects: fx.to_value(),
        });
        Ok((vec![seal(s, name, &payload)?], fx))
    })
}

/// The bytes of a store's log (`oracle memory export`), checked first. A compacted store's
/// export starts with one line carrying its base ([`base_line`]); an uncompacted store's is
/// its log's bytes as they stand.
pub fn export(stores: &dyn StoreBackend, name: &str) -> Result<(Store, Vec<u8>)> {
    let (base, bytes) = stores.snapshot(name)?;
    let text = text_of(name, bytes)?;
    let Some(base) = base else {
        return Ok((parse(name, &text)?, text.into_bytes()));
    };
    let store = parse_over(name, base.store.clone(), &text)?;
    let mut out = base_line(name, &base)?;
    out.push_str(&text);
    Ok((store, out.into_bytes()))
}

/// The key of an export's first line when it carries a compacted store's base: no store
/// record has it, so an uncompacted export never looks like one.
pub const EXPORT_BASE_KEY: &str = "base";

/// The first line of a compacted store's export, newline included: `{"base": {"store", "records",
/// "head", "segments", "digest", "cbor"}}`, `cbor` the base's body (as a database keeps it,
/// `store_checkpoint::encode_base`) in base64 and `digest` its hash.
pub fn base_line(name: &str, base: &Base) -> Result<String> {
    use base64::Engine as _;
    let state = base.store.state();
    let (records, head) = (state.records, state.head.clone());
    let (cbor, digest) = checkpoint::encode_base(name, state, base.segments.clone())?;
    let segments: Vec<Value> = base.segments.iter().map(Segment::to_value).collect();
    let v = serde_json::json!({EXPORT_BASE_KEY: {
        "store": name, "records": records, "head": head, "segments": segments,
        "digest": digest, "cbor": base64::engine::general_purpose::STANDARD.encode(cbor),
    }});
    Ok(format!("{v}\n"))
}

/// The base an export's first line carries, if it carries one, and the rest of the export.
fn split_export<'t>(name: &str, text: &'t str) -> Result<(Option<Base>, &'t str)> {
    use base64::Engine as _;
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let Ok(v) = serde_json::from_str::<Value>(first) else {
        return Ok((None, text));
    };
    let Some(b) = v.get(EXPORT_BASE_KEY) else {
        return Ok((None, text));
    };
    let damaged = |why: &str| SharedError::Damaged {
        name: name.into(),
        why: format!("the export's base line is refused: {why}"),
    };
    let cbor = b["cbor"]
        .as_str()
        .ok_or_else(|| damaged("it has no cbor"))?;
    let cbor = base64::engine::general_purpose::STANDARD
        .decode(cbor)
        .map_err(|e| damaged(&e.to_string()))?;
    let digest = b["digest"]
        .as_str()
        .ok_or_else(|| damaged("it has no digest"))?;
    let base = checkpoint::decode_base(name, &cbor, digest, false)?;
    Ok((Some(base), rest))
}

/// Why an import into `name` is refused: the store exists.
pub fn taken(name: &str) -> SharedError {
    SharedError::Name(format!(
        "store `{name}` exists already; import into a new name"
    ))
}

/// Makes store `name` from an export: checked whole first (from its base, when it carries
/// one); refused if the store exists.
pub fn import(stores: &dyn StoreBackend, name: &str, text: &str) -> Result<Store> {
    let (base, text) = split_export(name, text)?;
    let start = base.as_ref().map_or_else(Store::new, |b| b.store.clone());
    let first = start.head.records;
    let store = parse_over(name, start, text)?;
    if stores.list()?.iter().any(|n| n == name) {
        return Err(taken(name));
    }
    if let Some(base) = &base {
        stores.create_with_base(name, base)?;
    }
    write(stores, name, true, |s| match s.head.records == first {
        true => Ok((store.records.clone(), ())),
        false => Err(taken(name)),
    })
    .map(|(s, ())| s)
}

/// What a run attached to a store needs to reach it: where the stores are kept and the run's
/// id, which its publications carry (`RunConfig::shared`).
#[derive(Clone)]
pub struct Attach {
    pub stores: std::sync::Arc<dyn StoreBackend>,
    pub run: String,
}

impl std::fmt::Debug for Attach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attach")
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

/// The home's store ledger (`oracle memory forget` records) and its lock, beside the stores.
pub const LEDGER_LOG: &str = "ledger.jsonl";
pub const LEDGER_LOCK: &str = "ledger.lock";

/// Takes the exclusive lock at `path`, waiting as for a store's.
fn lock_path(path: &Path, name: &str) -> Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(io(path))?;
    for _ in 0..LOCK_WAIT_ATTEMPTS_MAX {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(fs::TryLockError::WouldBlock) => {
                thread::sleep(Duration::from_millis(LOCK_WAIT_STEP_MS));
            }
            Err(fs::TryLockError::Error(e)) => return Err(io(path)(e)),
        }
    }
    Err(SharedError::Locked { name: name.into() })
}

/// The home's ledger, every record checked (empty when there is none).
fn ledger(home: &Path) -> Result<pure::Ledger> {
    let path = stores_dir(home).join(LEDGER_LOG);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io(&path)(e)),
    };
    parse_ledger(&text)
}

/// The ledger `text` holds (its lines, every record checked): the same bytes whichever
/// backend keeps it.
pub fn parse_ledger(text: &str) -> Result<pure::Ledger> {
    let damaged = |why: String| SharedError::Damaged {
        name: LEDGER_LOG.into(),
        why,
    };
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(damaged("the ledger ends in a partial line".into()));
    }
    let mut ledger = pure::Ledger::default();
    for (i, line) in text.lines().enumerate() {
        let rec: pure::LedgerRecord =
            serde_json::from_str(line).map_err(|e| damaged(format!("line {}: {e}", i + 1)))?;
        ledger.apply(rec).map_err(|source| SharedError::Record {
            name: LEDGER_LOG.into(),
            source,
        })?;
    }
    Ok(ledger)
}

/// Deletes store `name` whole (`oracle memory forget`): under the store's writer lock and the
/// ledger's, a `forgotten` record (the store's name, length and head, no claims) is appended
/// to the ledger and synced first, then the store's log and directory are removed. A damaged
/// store can be forgotten too (its head is then that of the bytes' hash, with 0 records).
fn forget(home: &Path, name: &str, note: &str) -> Result<pure::LedgerRecord> {
    let store_lock = lock(home, name, true, false)?;
    let head = match read(home, name, true) {
        Ok(r) => r.store.head,
        Err(_) => {
            let path = dir_of(home, name)?.join(STORE_LOG);
            damaged_head(&fs::read(&path).map_err(io(&path))?)
        }
    };
    let _ledger_lock = lock_path(&stores_dir(home).join(LEDGER_LOCK), LEDGER_LOG)?;
    let rec = ledger(home)?
        .forgotten(name, &head, note)
        .map_err(|source| SharedError::Record {
            name: LEDGER_LOG.into(),
            source,
        })?;
    let path = stores_dir(home).join(LEDGER_LOG);
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io(&path))?;
    let line = ledger_line(&rec)?;
    let before = file.metadata().map_err(io(&path))?.len();
    if let Err(e) = file
        .write_all(line.as_bytes())
        .and_then(|()| file.sync_data())
    {
        // Whole or not at all, as a store's append: nothing is deleted either.
        let _ = file.set_len(before).and_then(|()| file.sync_data());
        return Err(io(&path)(e));
    }
    // The seal, then the log: from here `list` and `exists` no longer see the store, and a
    // store made again under its name finds no seal of the old one.
    let dir = dir_of(home, name)?;
    sealing::remove(&dir)?;
    fs::remove_file(dir.join(STORE_LOG)).map_err(io(&dir))?;
    drop(store_lock);
    fs::remove_dir_all(&dir).map_err(io(&dir))?;
    Ok(rec)
}

/// The head a ledger names for a damaged store it forgets: 0 records, the hash of its bytes.
pub fn damaged_head(bytes: &[u8]) -> pure::StoreHead {
    pure::StoreHead {
        records: 0,
        hash: oracle_core::hash::hash_in(pure::STORE_RECORD, bytes),
    }
}

/// A ledger record's line, newline included: the bytes every backend keeps.
pub fn ledger_line(rec: &pure::LedgerRecord) -> Result<String> {
    let mut line = serde_json::to_string(rec).map_err(|e| SharedError::Damaged {
        name: LEDGER_LOG.into(),
        why: e.to_string(),
    })?;
    line.push('\n');
    Ok(line)
}

/// Compacts store `name` of `home` (the caller holds its writer lock): every record but the
/// newest `keep` is folded into its base (see [`cut`]), and the log is rewritten to the kept
/// records. Every record is checked first, from the old base, never from a checkpoint.
/// Crash-safe in this order: the shorter log is sealed as in flight, the new base is synced
/// and renamed in, the checkpoint removed, the log replaced, then its seal settled; a reader
/// between the two finds records the base already folds and skips them.
fn compact(home: &Path, name: &str, keep: u64) -> Result<Compacted> {
    let dir = dir_of(home, name)?;
    // The seal is checked (and a cut append's tail dropped) before anything is folded.
    let mut r = read(home, name, false)?;
    r.drop_cut_tail(&dir)?;
    let key = r.key;
    let (start, segments) = match checkpoint::read_base(&dir, name, &key)? {
        Some(b) => (b.store, b.segments),
        None => (Store::new(), Vec::new()),
    };
    let path = dir.join(STORE_LOG);
    let text = text_of(name, fs::read(&path).map_err(io(&path))?)?;
    let c = cut(name, start, segments, &text, keep)?;
    if let Some((state, segments, kept)) = c.base {
        // The same head over a shorter log, sealed as in flight first: a crash before the log
        // is replaced leaves the old log, which `at` names.
        let at = r.mark();
        let next = Mark {
            bytes: kept.len() as u64,
            ..at
        };
        sealing::write(&dir, name, &key, at, Some(next))?;
        checkpoint::write_base(&dir, name, &key, state, segments)?;
        checkpoint::drop_checkpoint(&dir)?;
        checkpoint::replace(&path, kept.as_bytes(), true)?;
        sealing::write(&dir, name, &key, next, None)?;
    }
    Ok(c.compacted)
}

/// What compacting a store leaves: what it did, and when it took records out, the new base
/// (its fold, every segment taken out so far) and the kept records' lines.
pub struct Cut {
    pub compacted: Compacted,
    pub base: Option<(pure::StoreState, Vec<Segment>, String)>,
}

/// Compacts the store whose log `text` follows `start` (its base, with `segments`, or an
/// empty store), keeping the newest `keep` records: the records before them are folded into
/// the new base, which names the segment taken out (its range, the head at its end and a
/// digest of its lines). Every record is checked. The same for every backend, so a file home
/// and a database compact the same history to the same base and kept bytes.
pub fn cut(
    name: &str,
    start: Store,
    mut segments: Vec<Segment>,
    text: &str,
    keep: u64,
) -> Result<Cut> {
    let first = start.head.records;
    let mut probe = start.clone();
    let (in_log, _) = fold(name, &mut probe, text, first)?;
    let to = probe.head.records.saturating_sub(keep);
    if to <= first {
        let compacted = Compacted {
            segment: None,
            kept: in_log,
            head: probe.head,
        };
        return Ok(Cut {
            compacted,
            base: None,
        });
    }
    let (mut store, mut dropped, mut kept, mut state) = (start, String::new(), String::new(), None);
    for line in text.split_inclusive('\n') {
        fold(name, &mut store, line, first)?;
        let seq = store.head.records;
        match seq <= to {
            true if seq > first => dropped.push_str(line),
            true => {}
            false => kept.push_str(line),
        }
        if seq == to && state.is_none() {
            state = Some(store.state());
        }
    }
    let state = state.ok_or_else(|| SharedError::Damaged {
        name: name.into(),
        why: format!("record {to} vanished while compacting"),
    })?;
    let segment = Segment {
        from: first,
        to,
        head: state.head.clone(),
        digest: checkpoint::digest(dropped.as_bytes()),
    };
    segments.push(segment.clone());
    let compacted = Compacted {
        segment: Some(segment),
        kept: store.head.records - to,
        head: store.head,
    };
    Ok(Cut {
        compacted,
        base: Some((state, segments, kept)),
    })
}
