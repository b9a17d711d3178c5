//! Random access to a log: `<log>.idx` holds the byte offset of every record, so one event can be
//! read without scanning the records before it.
//!
//! The index is derived data: never hashed, never synced, always rebuildable from the log by a
//! newline scan. Nothing is taken on its word: a loaded index must pass a cheap check against the
//! log, and every record read through it is checked on its own and must carry the seq asked for.
//! [`LogWriter`](crate::LogWriter) keeps the file in step with the log; [`IndexedLog`] reads
//! through it and rebuilds it when it is missing or wrong. Nothing here ever modifies the log.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use oracle_core::Event;
use oracle_core::record::{RECORD_BYTES_MAX, RecordError};
use oracle_core::verify::{self, LogBytesError, Reason, VerifyError};

use crate::error::{Result, StoreError};
use crate::reader::BLOCK_BYTES;
use crate::storage::{FsFile, LogFile};

/// First 8 bytes of every index file; the digits are the index format's version.
pub const MAGIC: &[u8; 8] = b"ORIDX001";

/// Entries checked against the log between the first and the last when an index is loaded. A
/// handful catches an index of another log or a shifted one at the cost of a few tiny reads.
const SAMPLES: u64 = 8;

/// The index file of the log at `log`: the same path with `.idx` appended.
pub fn index_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".idx");
    PathBuf::from(name)
}

/// The bytes of an index file listing `starts`.
fn encode(starts: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 8 * starts.len());
    out.extend_from_slice(MAGIC);
    for s in starts {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

/// Entries of an index file read in one piece when it is checked (64 KiB: the check streams the
/// file rather than holding it).
const ENTRIES_PER_READ: usize = 8 << 10;

/// How many entries the index file `file` holds, or `None` if it has no magic or a partial
/// entry.
fn entry_count(file: &File) -> Option<u64> {
    let len = file.metadata().ok()?.len();
    let body = len.checked_sub(MAGIC.len() as u64)?;
    let mut magic = [0u8; MAGIC.len()];
    file.read_exact_at(&mut magic, 0).ok()?;
    (magic == *MAGIC && body % 8 == 0).then_some(body / 8)
}

/// Entries `first..first + out.len()` of the index file `file`.
fn read_entries(file: &File, first: u64, out: &mut [u64]) -> std::io::Result<()> {
    let mut bytes = vec![0u8; out.len() * 8];
    file.read_exact_at(&mut bytes, MAGIC.len() as u64 + first * 8)?;
    let (entries, _) = bytes.as_chunks::<8>();
    for (o, e) in out.iter_mut().zip(entries) {
        *o = u64::from_le_bytes(*e);
    }
    Ok(())
}

/// Entry `i` of the index file `file`.
fn read_entry(file: &File, i: u64) -> std::io::Result<u64> {
    let mut one = [0u64];
    read_entries(file, i, &mut one)?;
    Ok(one[0])
}

/// Whether the `count` entries of the index file `file` increase strictly from 0, read a block
/// at a time.
fn increasing(file: &File, count: u64) -> bool {
    let mut block = vec![0u64; ENTRIES_PER_READ];
    let mut previous: Option<u64> = None;
    let mut at = 0;
    while at < count {
        let n = (count - at).min(ENTRIES_PER_READ as u64) as usize;
        if read_entries(file, at, &mut block[..n]).is_err() {
            return false;
        }
        for &e in &block[..n] {
            let ok = match previous {
                None => e == 0,
                Some(p) => p < e,
            };
            if !ok {
                return false;
            }
            previous = Some(e);
        }
        at += n as u64;
    }
    true
}

/// No record is shorter than this: each holds its event hash as 64 hex digits. A shorter line
/// (a blank one, junk) is refused as soon as it is found, so the offsets kept for a file of
/// junk stay a small fraction of its size (8 bytes per 64) instead of 8 bytes per byte.
pub const RECORD_BYTES_MIN: u64 = 64;

/// Pushes onto `out` the start of every complete record in bytes `from..to` of the log, where
/// `from` is the start of a record; returns the end of the last complete record (`from` when
/// there is none). Bytes after the last newline are a torn tail, not a record. Only looks for
/// newlines (memchr over large blocks), so it runs at the speed of reading the file.
fn scan_starts(log: &File, path: &Path, from: u64, to: u64, out: &mut Vec<u64>) -> Result<u64> {
    let mut file = log;
    file.seek(SeekFrom::Start(from))
        .map_err(StoreError::io(path))?;
    let block = (BLOCK_BYTES as u64).min(to.saturating_sub(from));
    let mut buf = Vec::with_capacity(usize::try_from(block).unwrap_or(BLOCK_BYTES));
    let mut start = from;
    let mut base = from;
    while base < to {
        buf.clear();
        // `read_to_end` fills the reserved capacity without zeroing it first.
        let n = Read::take(&mut file, (BLOCK_BYTES as u64).min(to - base))
            .read_to_end(&mut buf)
            .map_err(StoreError::io(path))?;
        if n == 0 {
            // The file is shorter than it was when measured; index what is there.
            break;
        }
        for i in memchr::memchr_iter(b'\n', &buf) {
            let end = base + i as u64;
            if end - start < RECORD_BYTES_MIN {
                let why = format!(
                    "a line of {} bytes is shorter than any record ({RECORD_BYTES_MIN} bytes)",
                    end - start
                );
                let seq = out.len() as u64;
                return Err(integrity(
                    path,
                    seq,
                    start,
                    Reason::Malformed(RecordError::Json(why)),
                ));
            }
            out.push(start);
            start = end + 1;
        }
        base += n as u64;
    }
    Ok(start)
}

fn read_exact_at(log: &File, path: &Path, offset: u64, buf: &mut [u8]) -> Result<()> {
    let mut file = log;
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(buf))
        .map_err(StoreError::io(path))
}

/// Whether record `seq` plausibly starts at `offset`: a newline before it (unless it is the
/// first) and `{"seq":<seq>,` at it, as the canonical record begins. Reads a few dozen bytes and
/// parses no JSON; the seq is what catches an index shifted by a lost or extra entry.
fn starts_record(log: &File, path: &Path, seq: u64, offset: u64, log_len: u64) -> Result<bool> {
    let mut expected = Vec::with_capacity(32);
    if offset > 0 {
        expected.push(b'\n');
    }
    expected.extend_from_slice(b"{\"seq\":");
    expected.extend_from_slice(seq.to_string().as_bytes());
    expected.push(b',');
    let at = offset.saturating_sub(1);
    if at + expected.len() as u64 > log_len {
        return Ok(false);
    }
    let mut found = vec![0u8; expected.len()];
    read_exact_at(log, path, at, &mut found)?;
    Ok(found == expected)
}

/// The cheap check of an index file (`index`, `count` entries) against the log: offsets
/// strictly increasing from 0, the last before the end of the log, and the first, the last and
/// [`SAMPLES`] entries spread between them at the start of the record with their seq. Does not
/// check that the last record is complete: that is found by the scan that follows it.
fn plausible(log: &File, path: &Path, index: &File, count: u64, log_len: u64) -> Result<bool> {
    if !increasing(index, count) {
        return Ok(false);
    }
    let Some(last_seq) = count.checked_sub(1) else {
        return Ok(true);
    };
    match read_entry(index, last_seq) {
        Ok(last) if last < log_len => {}
        _ => return Ok(false),
    }
    let mut checked = None;
    for j in 0..=SAMPLES {
        // In u128 so that no length of index can overflow the product.
        let seq = (u128::from(last_seq) * u128::from(j) / u128::from(SAMPLES)) as u64;
        if checked == Some(seq) {
            continue;
        }
        checked = Some(seq);
        let Ok(offset) = read_entry(index, seq) else {
            return Ok(false);
        };
        if !starts_record(log, path, seq, offset, log_len)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Where the record starts of an open log are.
///
/// An index file that passed the check is read where needed, one entry at a time, instead of
/// being held: a 10M-event log's index is 80 MB, and `oracle diff` opens two (issue 42: 246 MB
/// at 10M events). The file is the one opened, whatever later replaces it by a rename, and
/// every record read through it is checked to carry its seq anyway.
enum Starts {
    /// The index file's first `covered` entries, then `tail`, found by scanning the log past
    /// them.
    File {
        file: File,
        covered: u64,
        tail: Vec<u64>,
    },
    /// From a scan of the whole log.
    Memory(Vec<u64>),
}

impl Starts {
    fn len(&self) -> u64 {
        match self {
            Starts::File { covered, tail, .. } => covered + tail.len() as u64,
            Starts::Memory(v) => v.len() as u64,
        }
    }

    /// The start of record `seq`, if the log has it (an index file that cannot be read where
    /// it was read before has none: the caller rescans the log).
    fn get(&self, seq: u64) -> Option<u64> {
        match self {
            Starts::File { file, covered, .. } if seq < *covered => read_entry(file, seq).ok(),
            Starts::File { covered, tail, .. } => {
                tail.get(usize::try_from(seq - covered).ok()?).copied()
            }
            Starts::Memory(v) => v.get(usize::try_from(seq).ok()?).copied(),
        }
    }
}

/// Record starts of a log, from its index file where that is usable.
struct Loaded {
    starts: Starts,
    /// End of the last complete record.
    end: u64,
    /// Entries found by scanning past the index file's last entry.
    extended_by: u64,
    /// The index file was missing or failed the check, so `starts` comes from a full scan.
    rebuilt: bool,
}

/// Loads the index of the log at `path` (open as `log`, `log_len` bytes long) if it passes the
/// check, extended by the complete records it does not cover; otherwise scans the whole log.
fn load(log: &File, path: &Path, log_len: u64) -> Result<Loaded> {
    // Any failure to read the index (missing, unreadable, a directory) just means rebuilding.
    let index = File::open(index_path(path)).ok();
    let count = index.as_ref().and_then(entry_count);
    if let (Some(index), Some(count)) = (index, count)
        && plausible(log, path, &index, count, log_len)?
    {
        // Scan on from the last entry's record: that finds where it ends (it must be complete)
        // and every complete record the writer added since.
        let covered = count.saturating_sub(1);
        let from = match count {
            0 => Ok(0),
            _ => read_entry(&index, covered),
        };
        let mut tail = Vec::new();
        let end = match from {
            Ok(from) => Some(scan_starts(log, path, from, log_len, &mut tail)?),
            Err(_) => None,
        };
        if let Some(end) = end
            && covered + tail.len() as u64 >= count
        {
            return Ok(Loaded {
                extended_by: covered + tail.len() as u64 - count,
                starts: Starts::File {
                    file: index,
                    covered,
                    tail,
                },
                end,
                rebuilt: false,
            });
        }
    }
    let mut starts = Vec::new();
    let end = scan_starts(log, path, 0, log_len, &mut starts)?;
    Ok(Loaded {
        starts: Starts::Memory(starts),
        end,
        extended_by: 0,
        rebuilt: true,
    })
}

/// Replaces the file at `path` with `bytes` through a temporary file and a rename, so a reader
/// never sees it half written. Not synced: an index lost in a crash is rebuilt.
fn write_replacing(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // Unique per process and call: two readers rebuilding at once must not share a temp file.
    static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = PathBuf::from(name);
    let result = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn integrity(path: &Path, seq: u64, offset: u64, reason: Reason) -> StoreError {
    StoreError::Log {
        path: path.to_path_buf(),
        error: LogBytesError::Integrity {
            error: VerifyError { seq, reason },
            offset,
        },
    }
}

/// A log opened for reading events by seq, through its index.
///
/// Covers the complete records the log had when opened; records appended later are not seen.
/// Reads check each record on its own (canonical form, payload hash, event hash, parents) and
/// its seq, not its links to its neighbours: `verify` is what vouches for the chain.
pub struct IndexedLog {
    path: PathBuf,
    file: File,
    /// Length of the log when opened.
    log_len: u64,
    starts: Starts,
    /// End of the last complete record.
    end: u64,
    extended_by: u64,
    rebuilt: bool,
    /// `starts` comes from a full scan of the log, so a record that fails to read is damage in
    /// the log, not a wrong offset.
    scanned: bool,
    reads: u64,
    buf: Vec<u8>,
    scratch: verify::Scratch,
}

impl IndexedLog {
    /// Opens the log at `path` with its index: the index file if it passes a cheap check
    /// (extended by any complete records after its last entry), otherwise rebuilt from the log,
    /// then written back next to it if the directory allows (silently kept in memory if not).
    pub fn open(path: &Path) -> Result<IndexedLog> {
        IndexedLog::open_with(path, true)
    }

    /// As [`IndexedLog::open`], but a rebuilt index is written back only if `persist`: a
    /// command that only reads a log the user named does not leave files beside it.
    pub fn open_with(path: &Path, persist: bool) -> Result<IndexedLog> {
        let file = File::open(path).map_err(StoreError::io(path))?;
        let log_len = file.metadata().map_err(StoreError::io(path))?.len();
        let loaded = load(&file, path, log_len)?;
        if let (true, Starts::Memory(starts)) = (persist, &loaded.starts) {
            // Best effort: a read-only directory still gets a working index, in memory.
            let _ = write_replacing(&index_path(path), &encode(starts));
        }
        Ok(IndexedLog {
            path: path.to_path_buf(),
            file,
            log_len,
            starts: loaded.starts,
            end: loaded.end,
            extended_by: loaded.extended_by,
            rebuilt: loaded.rebuilt,
            scanned: loaded.rebuilt,
            reads: 0,
            buf: Vec::new(),
            scratch: verify::Scratch::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of complete records (events) the log had when opened.
    pub fn len(&self) -> u64 {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.len() == 0
    }

    /// Byte offset of the record of event `seq`, if the log has it.
    pub fn offset(&self, seq: u64) -> Option<u64> {
        self.starts.get(seq)
    }

    /// Records read from the log by [`IndexedLog::read`], including any that then failed.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// True when the index file was missing or wrong, so the offsets come from a scan of the
    /// whole log (at open, or after a read found the file's offset wrong).
    pub fn was_rebuilt(&self) -> bool {
        self.rebuilt
    }

    /// Complete records found after the index file's last entry (a writer appended them after
    /// its last index update, or the index was cut short).
    pub fn extended_by(&self) -> u64 {
        self.extended_by
    }

    /// Reads event `seq`: exactly its record, checked on its own and required to carry `seq`.
    ///
    /// A record that fails is reported with its seq and byte offset. The index passed only a
    /// sampled check, so before reporting, a failure with offsets from the index file rescans
    /// the log once: if the offset was wrong, the read is retried at the right one.
    pub fn read(&mut self, seq: u64) -> Result<Event> {
        match self.read_record(seq) {
            Err(e @ StoreError::Log { .. }) if !self.scanned => {
                if self.rescan()? {
                    self.read_record(seq)
                } else {
                    Err(e)
                }
            }
            other => other,
        }
    }

    /// Replaces the offsets with a full scan of the log; true if they changed.
    fn rescan(&mut self) -> Result<bool> {
        let mut starts = Vec::new();
        let end = scan_starts(&self.file, &self.path, 0, self.log_len, &mut starts)?;
        self.scanned = true;
        // Offsets read from the index file count as changed: comparing them would read the
        // whole file again, and a retry at the same offset only fails the same way.
        let same = matches!(&self.starts, Starts::Memory(v) if *v == starts);
        if same && end == self.end {
            return Ok(false);
        }
        let _ = write_replacing(&index_path(&self.path), &encode(&starts));
        self.starts = Starts::Memory(starts);
        self.end = end;
        self.extended_by = 0;
        self.rebuilt = true;
        Ok(true)
    }

    fn read_record(&mut self, seq: u64) -> Result<Event> {
        let Some(offset) = self.starts.get(seq) else {
            return Err(StoreError::SeqOutOfRange {
                path: self.path.clone(),
                seq,
                events: self.len(),
            });
        };
        let end = match seq.checked_add(1) {
            Some(next) if next < self.starts.len() => self.starts.get(next),
            _ => None,
        }
        .unwrap_or(self.end);
        let fail = |reason| integrity(&self.path, seq, offset, reason);
        // With its newline; the offsets are strictly increasing, so at least 1.
        let len = end.saturating_sub(offset);
        if len.saturating_sub(1) > RECORD_BYTES_MAX {
            // Refused before reading, so a wrong offset can never allocate gigabytes.
            return Err(fail(Reason::Malformed(RecordError::TooLarge {
                len: len.saturating_sub(1),
            })));
        }
        let len = usize::try_from(len).map_err(|_| {
            fail(Reason::Malformed(RecordError::TooLarge {
                len: len.saturating_sub(1),
            }))
        })?;
        self.buf.resize(len, 0);
        read_exact_at(&self.file, &self.path, offset, &mut self.buf)?;
        self.reads += 1;
        let Some((b'\n', line)) = self.buf.split_last() else {
            return Err(fail(Reason::Malformed(RecordError::Json(
                "the record does not end with a newline".into(),
            ))));
        };
        // The seq first, as `ChainCheck` does: a record found where another belongs is best
        // described by its seq, whatever else is wrong with it.
        match verify::check_line(line, &mut self.scratch) {
            Err(e) => return Err(fail(Reason::Malformed(e))),
            Ok((link, _)) if link.seq != seq => {
                return Err(fail(Reason::Seq {
                    expected: seq,
                    found: link.seq,
                }));
            }
            Ok((_, Err(reason))) => return Err(fail(reason)),
            Ok((_, Ok(()))) => {}
        }
        serde_json::from_slice(line)
            .map_err(|e| fail(Reason::Malformed(RecordError::Json(e.to_string()))))
    }
}

/// The index file of a log being appended to, kept in step by [`LogWriter`](crate::LogWriter).
pub(crate) struct IndexAppender {
    path: PathBuf,
    file: Box<dyn LogFile>,
}

impl IndexAppender {
    /// Starts the index of a new, empty log in `file`, just created empty by the writer's
    /// storage (replacing any index left by an earlier log of the same name: the log itself was
    /// just created, so such an index describes nothing).
    pub(crate) fn create(path: PathBuf, mut file: Box<dyn LogFile>) -> Result<IndexAppender> {
        file.append(MAGIC).map_err(StoreError::io(&path))?;
        Ok(IndexAppender { path, file })
    }

    /// Brings the index of an existing log (whose complete records end at `log_len`) up to date
    /// before appending: keeps the longest prefix of the file that matches the log's records and
    /// writes the rest. A writer that read the whole log to replay it passes `from = None`: a
    /// full newline scan costs little next to that and checks every entry, not a sample. A
    /// writer opened from a resume point's tail passes the anchor (its seq and its record's
    /// offset): when the index names that offset for that seq, the entries before it are kept
    /// as they are and only the log from there is scanned (the rest was not read either).
    pub(crate) fn open_from(
        log: &Path,
        log_len: u64,
        from: Option<(u64, u64)>,
    ) -> Result<IndexAppender> {
        let path = index_path(log);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(StoreError::io(&path))?;
        let mut existing = Vec::new();
        file.read_to_end(&mut existing)
            .map_err(StoreError::io(&path))?;
        let entries: &[[u8; 8]] = existing
            .strip_prefix(MAGIC.as_slice())
            .map_or(&[], |body| body.as_chunks::<8>().0);
        let entry = |seq: u64| {
            usize::try_from(seq)
                .ok()
                .and_then(|i| entries.get(i))
                .map(|e| u64::from_le_bytes(*e))
        };
        // Where the scan starts: the anchor, when the index agrees about it.
        let (first_seq, first_offset) = match from {
            Some((seq, offset)) if entry(seq) == Some(offset) => (seq, offset),
            _ => (0, 0),
        };
        let log_file = File::open(log).map_err(StoreError::io(log))?;
        let mut starts = Vec::new();
        scan_starts(&log_file, log, first_offset, log_len, &mut starts)?;
        let kept = existing.strip_prefix(MAGIC.as_slice()).map(|_| {
            let same = starts
                .iter()
                .zip(first_seq..)
                .take_while(|(s, seq)| entry(*seq) == Some(**s))
                .count();
            first_seq as usize + same
        });
        let (keep_bytes, missing) = match kept {
            Some(k) => (
                MAGIC.len() + 8 * k,
                starts.get(k - first_seq as usize..).unwrap_or_default(),
            ),
            None => (0, starts.as_slice()),
        };
        let mut out = Vec::with_capacity(MAGIC.len() + 8 * missing.len());
        if kept.is_none() {
            out.extend_from_slice(MAGIC);
        }
        for s in missing {
            out.extend_from_slice(&s.to_le_bytes());
        }
        file.set_len(keep_bytes as u64)
            .and_then(|()| file.seek(SeekFrom::Start(keep_bytes as u64)))
            .and_then(|_| file.write_all(&out))
            .map_err(StoreError::io(&path))?;
        // Positioned at the end: appends through the seam write after it.
        Ok(IndexAppender {
            path,
            file: Box::new(FsFile::new(file)),
        })
    }

    /// Appends entries (little-endian offsets, 8 bytes each).
    pub(crate) fn append(&mut self, entries: &[u8]) -> Result<()> {
        self.file
            .append(entries)
            .map_err(StoreError::io(&self.path))
    }
}

/// An indexed log is random access to its events: what `oracle diff`'s search reads through.
impl oracle_core::diff::EventSource for IndexedLog {
    type Error = StoreError;
    fn len(&self) -> u64 {
        IndexedLog::len(self)
    }
    fn event(&mut self, seq: u64) -> Result<Event> {
        self.read(seq)
    }
}
