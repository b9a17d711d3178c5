//! Reading logs from disk: a streaming, verifying event reader, and the parallel verifier.
//!
//! Both read in blocks and never hold more than one block plus the events of interest, so
//! memory stays flat whatever the length of the log. Both check every invariant as they go:
//! nothing read from disk is used before it is verified.
//!
//! Readers take no lock, so they can run while a writer appends, and can catch a record half
//! copied into the file. A partial final line is reported as a torn tail only when no writer
//! is live; while one holds the lock, it is a record not yet written (see [`appending_now`]).

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use oracle_core::record::RECORD_BYTES_MAX;
use oracle_core::verify::{self, ChainCheck, Head, LineCheck, LogBytesError};
use oracle_core::{Event, Hash, Replayer, State, record};
use rayon::prelude::*;

use crate::error::{Result, StoreError};
use crate::paths::LogPaths;

/// Bytes read per block (8 MiB): large enough to amortise syscalls and feed both cores, small
/// enough that verification memory is flat.
pub const BLOCK_BYTES: usize = 8 << 20;

/// What one read produced.
enum Next {
    /// Complete records (each ending in `\n`) starting at byte `base` of the file.
    Block { base: u64, buf: Vec<u8> },
    /// No newline within [`RECORD_BYTES_MAX`] bytes from `base`.
    LineTooLong { base: u64 },
    /// End of file; `tail` holds the bytes after the last newline (a torn record), at `base`.
    End { base: u64, tail: Vec<u8> },
}

/// Reads a log file in blocks of complete records. Bytes of a record cut by a block boundary
/// are carried into the next block.
struct BlockReader {
    file: File,
    path: std::path::PathBuf,
    leftover: Vec<u8>,
    /// File offset of `leftover[0]`.
    base: u64,
    eof: bool,
}

impl BlockReader {
    fn open(path: &Path) -> Result<BlockReader> {
        let file = File::open(path).map_err(StoreError::io(path))?;
        Ok(BlockReader {
            file,
            path: path.to_path_buf(),
            leftover: Vec::new(),
            base: 0,
            eof: false,
        })
    }

    /// Fills `buf` (its old content is dropped, its capacity reused) with the next block.
    ///
    /// A line longer than a block is read on into the same buffer (never copied aside), and
    /// reported as too long as soon as it passes [`RECORD_BYTES_MAX`]: at most that many bytes
    /// of it are ever held, however long it goes on.
    fn next(&mut self, mut buf: Vec<u8>) -> Result<Next> {
        if self.eof {
            return Ok(Next::End {
                base: self.base,
                tail: std::mem::take(&mut self.leftover),
            });
        }
        buf.clear();
        buf.extend_from_slice(&self.leftover);
        self.leftover.clear();
        // Bytes at the start of `buf` known to hold no newline (the carried partial line).
        let mut searched = buf.len();
        let complete = loop {
            // A partial line is read on only up to one byte past the record limit.
            let want = if searched == 0 {
                BLOCK_BYTES as u64
            } else {
                (BLOCK_BYTES as u64).min((RECORD_BYTES_MAX + 1).saturating_sub(buf.len() as u64))
            };
            // `read_to_end` appends without zeroing the buffer first and retries interrupted
            // reads.
            let n = (&mut self.file)
                .take(want)
                .read_to_end(&mut buf)
                .map_err(StoreError::io(&self.path))?;
            if (n as u64) < want {
                self.eof = true;
            }
            if let Some(i) = memchr::memrchr(b'\n', &buf[searched..]) {
                break searched + i + 1;
            }
            if self.eof {
                break 0;
            }
            if buf.len() as u64 > RECORD_BYTES_MAX {
                // A line longer than any record may be: report it without reading further.
                return Ok(Next::LineTooLong { base: self.base });
            }
            searched = buf.len();
        };
        self.leftover.extend_from_slice(&buf[complete..]);
        buf.truncate(complete);
        let base = self.base;
        self.base += complete as u64;
        Ok(Next::Block { base, buf })
    }
}

/// Lines checked in parallel at a time. A block of blank or tiny lines holds millions of
/// them; checking a bounded batch (and stopping at the first failure) keeps the per-line
/// bookkeeping small, whatever the block holds, while each batch still spreads over the cores.
pub const LINES_PER_BATCH: usize = 16 * 1024;

/// The records of a block, with their file offsets, one at a time (never collected whole:
/// a block of blank lines would make millions of entries).
fn lines(base: u64, buf: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', buf).map(move |i| {
        let line = (base + start as u64, &buf[start..i]);
        start = i + 1;
        line
    })
}

/// What [`verify_file`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifySummary {
    pub events: u64,
    pub head: Head,
    pub bytes: u64,
}

/// Options of [`verify_file`].
#[derive(Clone, Copy, Debug, Default)]
pub struct VerifyOptions {
    /// Worker threads for the per-record checks; 0 means one per core.
    pub threads: usize,
    /// A head hash known from elsewhere (an earlier `verify`, a checkpoint): the log must
    /// contain it, which is what detects a log truncated on a record boundary.
    pub expected_head: Option<Hash>,
}

/// Verifies a log file, streaming, with record checks spread over `threads` cores. Reports the
/// same first failure as the sequential `oracle_core::verify::verify_bytes`.
///
/// With more than one thread, a reader thread fills the next block (two buffers, recycled)
/// while the pool checks the current one, so IO overlaps the checks. With one thread,
/// everything runs on the calling thread.
pub fn verify_file(path: &Path, opts: VerifyOptions) -> Result<VerifySummary> {
    verify_file_at(path, opts, &[]).map(|(summary, _)| summary)
}

/// [`verify_file`], also returning the chain hash of the event at each of `seqs` that the log
/// has, as `(seq, hash)` in ascending seq order (each seq once; seqs past the end are left
/// out). The hashes come from the same pass that verified them, so a signed checkpoint is
/// checked against exactly the bytes that were verified, without reading the log twice.
pub fn verify_file_at(
    path: &Path,
    opts: VerifyOptions,
    seqs: &[u64],
) -> Result<(VerifySummary, Vec<(u64, Hash)>)> {
    verify_file_counted(path, opts, seqs, None)
}

/// [`verify_file_at`], storing in `checked` how many bytes of the log have been checked so
/// far (after each block), for a progress display on another thread. The count is only
/// ever shown, never part of the result.
pub fn verify_file_counted(
    path: &Path,
    opts: VerifyOptions,
    seqs: &[u64],
    checked: Option<&std::sync::atomic::AtomicU64>,
) -> Result<(VerifySummary, Vec<(u64, Hash)>)> {
    let done = |base: u64, len: usize| {
        if let Some(c) = checked {
            c.store(base + len as u64, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let mut wanted = seqs.to_vec();
    // Descending, so the next seq wanted is at the end.
    wanted.sort_unstable_by(|a, b| b.cmp(a));
    wanted.dedup();
    let mut reader = BlockReader::open(path)?;
    let mut state = VerifyState {
        path,
        chain: ChainCheck::new(),
        expected: opts.expected_head,
        seen_expected: opts.expected_head.is_none(),
        wanted,
        found: Vec::new(),
    };
    if opts.threads == 1 {
        let mut scratch = verify::Scratch::default();
        let mut buf = Vec::new();
        loop {
            match reader.next(buf)? {
                Next::Block { base, buf: block } => {
                    let checks = lines(base, &block)
                        .map(|(offset, line)| (offset, verify::check_line(line, &mut scratch)));
                    state.push_all(checks)?;
                    done(base, block.len());
                    buf = block;
                }
                Next::LineTooLong { base } => return Err(too_long(path, state.chain.head(), base)),
                Next::End { base, tail } => return state.finish(base, &tail),
            }
        }
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| StoreError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
    std::thread::scope(|scope| {
        // Bounded: one block in flight to the checker, two buffers in all.
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Result<Next>>(1);
        let (free_tx, free_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
        for _ in 0..2 {
            // Cannot fail: the channel has room for both and its receiver is alive.
            let _ = free_tx.send(Vec::with_capacity(BLOCK_BYTES + (64 << 10)));
        }
        scope.spawn(move || {
            while let Ok(buf) = free_rx.recv() {
                let next = reader.next(buf);
                let last = !matches!(next, Ok(Next::Block { .. }));
                // The checker stops listening when it finds a failure: then stop reading.
                if full_tx.send(next).is_err() || last {
                    return;
                }
            }
        });
        loop {
            let next = full_rx.recv().map_err(|_| StoreError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::other("the log reader thread stopped unexpectedly"),
            })??;
            match next {
                Next::Block { base, buf } => {
                    let mut all = lines(base, &buf).peekable();
                    let mut batch = Vec::with_capacity(LINES_PER_BATCH);
                    while all.peek().is_some() {
                        batch.clear();
                        batch.extend(all.by_ref().take(LINES_PER_BATCH));
                        let checks: Vec<LineCheck> = pool.install(|| {
                            batch
                                .par_iter()
                                .map_init(verify::Scratch::default, |scratch, (_, line)| {
                                    verify::check_line(line, scratch)
                                })
                                .collect()
                        });
                        state.push_all(batch.iter().map(|(offset, _)| *offset).zip(checks))?;
                    }
                    drop(batch);
                    drop(all);
                    done(base, buf.len());
                    // The reader may already have finished; then the buffer is simply dropped.
                    let _ = free_tx.send(buf);
                }
                Next::LineTooLong { base } => return Err(too_long(path, state.chain.head(), base)),
                Next::End { base, tail } => return state.finish(base, &tail),
            }
        }
    })
}

/// The sequential half of [`verify_file`].
struct VerifyState<'a> {
    path: &'a Path,
    chain: ChainCheck,
    expected: Option<Hash>,
    seen_expected: bool,
    /// Seqs whose hashes [`verify_file_at`] returns and that are still to come, descending.
    wanted: Vec<u64>,
    /// `(seq, hash)` of the wanted events verified so far, ascending.
    found: Vec<(u64, Hash)>,
}

impl VerifyState<'_> {
    fn push_all(&mut self, checks: impl Iterator<Item = (u64, LineCheck)>) -> Result<()> {
        for (offset, check) in checks {
            self.chain
                .push_line(check)
                .map_err(|error| StoreError::Log {
                    path: self.path.to_path_buf(),
                    error: LogBytesError::Integrity { error, offset },
                })?;
            if !self.seen_expected && Some(self.chain.head().hash) == self.expected {
                self.seen_expected = true;
            }
            if let Some(&want) = self.wanted.last() {
                let head = self.chain.head();
                if head.next_seq.checked_sub(1) == Some(want) {
                    self.wanted.pop();
                    self.found.push((want, head.hash));
                }
            }
        }
        Ok(())
    }

    fn finish(self, tail_offset: u64, tail: &[u8]) -> Result<(VerifySummary, Vec<(u64, Hash)>)> {
        // A record a live writer is appending is not yet written: the log ends before it.
        let tail = if !tail.is_empty() && appending_now(self.path, tail_offset) {
            &[]
        } else {
            tail
        };
        let head = verify::finish(
            self.chain.head(),
            tail_offset,
            tail.len() as u64,
            self.expected,
            self.seen_expected,
        )
        .map_err(|error| StoreError::Log {
            path: self.path.to_path_buf(),
            error,
        })?;
        let summary = VerifySummary {
            events: head.next_seq,
            head,
            bytes: tail_offset,
        };
        Ok((summary, self.found))
    }
}

fn too_long(path: &Path, head: Head, offset: u64) -> StoreError {
    StoreError::Log {
        path: path.to_path_buf(),
        error: LogBytesError::Integrity {
            error: verify::VerifyError {
                seq: head.next_seq,
                reason: verify::Reason::Malformed(record::RecordError::TooLarge {
                    len: RECORD_BYTES_MAX + 1,
                }),
            },
            offset,
        },
    }
}

/// Reads every event of a log in order, verifying as it goes, and hands each to `visit`
/// (which may stop the scan early by returning `false`). A torn tail is an error unless
/// `allow_torn_tail`, in which case the valid prefix is visited and the tail reported in the
/// result. For a reader (no lock held): a partial final line that a live writer is appending
/// is not a torn tail; the scan ends before it.
pub fn scan(
    path: &Path,
    allow_torn_tail: bool,
    visit: impl FnMut(Event) -> Result<bool>,
) -> Result<ScanEnd> {
    let tail = if allow_torn_tail {
        Tail::Allow
    } else {
        Tail::RefuseUnlessAppending
    };
    scan_with(path, tail, visit)
}

/// What a scan does with bytes after the last newline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tail {
    /// Report them in [`ScanEnd::torn_tail`].
    Allow,
    /// An error, unless a live writer is appending them (a reader's view).
    RefuseUnlessAppending,
    /// Always an error: for a writer holding the lock, which must never append after them.
    Refuse,
}

fn scan_with(
    path: &Path,
    tail_policy: Tail,
    mut visit: impl FnMut(Event) -> Result<bool>,
) -> Result<ScanEnd> {
    let mut reader = BlockReader::open(path)?;
    let mut chain = ChainCheck::new();
    let mut scratch = verify::Scratch::default();
    let log_err = |error| StoreError::Log {
        path: path.to_path_buf(),
        error,
    };
    let mut buf = Vec::new();
    loop {
        let (base, block) = match reader.next(buf)? {
            Next::Block { base, buf } => (base, buf),
            Next::LineTooLong { base } => return Err(too_long(path, chain.head(), base)),
            Next::End { base, mut tail } => {
                if !tail.is_empty()
                    && tail_policy == Tail::RefuseUnlessAppending
                    && appending_now(path, base)
                {
                    tail.clear();
                }
                if !tail.is_empty() && tail_policy != Tail::Allow {
                    let seq = chain.head().next_seq;
                    return Err(log_err(LogBytesError::TornTail {
                        seq,
                        offset: base,
                        len: tail.len() as u64,
                    }));
                }
                let torn_tail = (!tail.is_empty()).then_some((base, tail.len() as u64));
                return Ok(ScanEnd {
                    head: chain.head(),
                    torn_tail,
                    stopped_early: false,
                });
            }
        };
        for (offset, line) in lines(base, &block) {
            let integrity = |error| log_err(LogBytesError::Integrity { error, offset });
            let seq = chain.head().next_seq;
            // Verify first (fast path when valid), then parse the verified record once.
            chain
                .push_line(verify::check_line(line, &mut scratch))
                .map_err(integrity)?;
            let event: Event = serde_json::from_slice(line).map_err(|e| {
                let reason = verify::Reason::Malformed(record::RecordError::Json(e.to_string()));
                integrity(verify::VerifyError { seq, reason })
            })?;
            if !visit(event)? {
                return Ok(ScanEnd {
                    head: chain.head(),
                    torn_tail: None,
                    stopped_early: true,
                });
            }
        }
        buf = block;
    }
}

/// How a [`scan`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanEnd {
    /// Head after the last event visited.
    pub head: Head,
    /// `(offset, len)` of a torn tail, when allowed and present.
    pub torn_tail: Option<(u64, u64)>,
    pub stopped_early: bool,
}

/// Verifies and replays a whole log: its head and final state. For the writer, under its
/// lock: a torn tail is always an error here, since appending after it would bury it.
pub fn verify_and_replay(paths: &LogPaths) -> Result<(Head, State)> {
    let mut replayer = Replayer::genesis();
    let path = &paths.log;
    let end = scan_with(path, Tail::Refuse, |e| {
        replayer.step(&e).map_err(|source| StoreError::Replay {
            path: path.clone(),
            source,
        })?;
        Ok(true)
    })?;
    Ok((end.head, replayer.into_state()))
}

/// Reads all events of a (verified) log into memory. For small logs and tests.
pub fn read_all(path: &Path) -> Result<Vec<Event>> {
    let mut out = Vec::new();
    scan(path, false, |e| {
        out.push(e);
        Ok(true)
    })?;
    Ok(out)
}

/// Whether the bytes after the last complete record, found at `offset` by a reader of the log
/// at `path`, are a record that a live writer is appending (not yet written) rather than a torn
/// tail (a write cut short by a crash).
///
/// A writer appends whole records, but the OS copies a write into the file piece by piece, so a
/// reader can see the first part of one. The writer holds `<log>.lock` exclusively for its
/// whole life and the lock dies with its process, so if a shared lock cannot be had, a writer
/// is live and the line is in progress. If it can be had, no writer is live now: the bytes after
/// `offset` are read again under it (no writer can start meanwhile). Still no newline there
/// means a torn tail; a newline means the record was completed after the first read by a writer
/// that has finished since, and that read stands as an earlier, consistent prefix of the log.
/// No lock file means no writer ever opened the log. The shared lock is held only for this
/// check, and only when a reader found a partial line.
pub(crate) fn appending_now(path: &Path, offset: u64) -> bool {
    let Ok(lock) = File::open(LogPaths::of_file(path).lock()) else {
        return false;
    };
    match lock.try_lock_shared() {
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => false,
        // Unlocked when `lock` is dropped, after the second look.
        Ok(()) => completed_since(path, offset),
    }
}

/// Whether the log at `path` now has a complete record starting at `offset`.
fn completed_since(path: &Path, offset: u64) -> bool {
    let Ok(mut file) = File::open(path) else {
        return false;
    };
    let mut rest = Vec::new();
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.take(RECORD_BYTES_MAX + 1).read_to_end(&mut rest))
        .is_ok_and(|_| memchr::memchr(b'\n', &rest).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log of one good record followed by a line of `len` NUL bytes (sparse, so no disk is
    /// used) and its newline.
    fn log_with_long_line(dir: &Path, len: u64) -> (std::path::PathBuf, u64) {
        use std::io::Write;
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/logs/quickstart.jsonl");
        let text = std::fs::read(fixture).unwrap();
        let first = &text[..=memchr::memchr(b'\n', &text).unwrap()];
        std::fs::create_dir_all(dir).unwrap();
        let log = dir.join("events.jsonl");
        let mut f = File::create(&log).unwrap();
        f.write_all(first).unwrap();
        f.set_len(first.len() as u64 + len).unwrap();
        drop(f);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(b"\n")
            .unwrap();
        (log, first.len() as u64)
    }

    fn integrity(e: StoreError) -> (u64, verify::Reason, u64) {
        match e {
            StoreError::Log {
                error: LogBytesError::Integrity { error, offset },
                ..
            } => (error.seq, error.reason, offset),
            other => panic!("{other}"),
        }
    }

    /// A line one MiB over the record limit (less than a block over it) is refused at its offset
    /// as "over the limit" after reading one byte past the limit, never read to its end: the
    /// reported length is the limit plus one, whatever the line's real length.
    #[test]
    fn a_line_over_the_record_limit_is_refused_without_being_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (log, offset) = log_with_long_line(dir.path(), RECORD_BYTES_MAX + (1 << 20));
        let too_large = verify::Reason::Malformed(record::RecordError::TooLarge {
            len: RECORD_BYTES_MAX + 1,
        });
        for threads in [1, 2] {
            let opts = VerifyOptions {
                threads,
                expected_head: None,
            };
            let got = integrity(verify_file(&log, opts).unwrap_err());
            assert_eq!(got, (1, too_large.clone(), offset), "{threads} threads");
        }
        let got = integrity(read_all(&log).unwrap_err());
        assert_eq!(got, (1, too_large, offset));
    }

    /// A record completed since a reader saw it half written is found however long it is, up
    /// to the record limit: the second look reads one byte past the limit, no more.
    #[test]
    fn a_completed_record_is_found_up_to_the_record_limit() {
        let dir = tempfile::tempdir().unwrap();
        let (log, offset) = log_with_long_line(dir.path(), RECORD_BYTES_MAX);
        assert!(completed_since(&log, offset), "newline at the limit");
        let (log, offset) = log_with_long_line(&dir.path().join("x"), RECORD_BYTES_MAX + 1);
        assert!(!completed_since(&log, offset), "newline past the limit");
        assert!(!completed_since(&dir.path().join("none.jsonl"), 0));
    }

    /// An expected head is found wherever it sits in the log, with one thread or several, and
    /// a head the log does not hold (a truncated log) is refused; the hashes asked for come
    /// back in seq order, each once.
    #[test]
    fn an_expected_head_must_be_in_the_log() {
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/logs/quickstart.jsonl");
        let events = read_all(&fixture).unwrap();
        for threads in [1, 2] {
            for e in [&events[0], &events[3], events.last().unwrap()] {
                let opts = VerifyOptions {
                    threads,
                    expected_head: Some(e.hash),
                };
                assert_eq!(
                    verify_file(&fixture, opts).unwrap().events,
                    events.len() as u64
                );
            }
            let opts = VerifyOptions {
                threads,
                expected_head: Some(Hash([7; 32])),
            };
            match verify_file(&fixture, opts).unwrap_err() {
                StoreError::Log {
                    error: LogBytesError::HeadNotFound { found, .. },
                    ..
                } => assert_eq!(found.next_seq, events.len() as u64),
                other => panic!("{other}"),
            }
            let opts = VerifyOptions {
                threads,
                expected_head: None,
            };
            let (_, found) = verify_file_at(&fixture, opts, &[3, 1, 3, 999]).unwrap();
            assert_eq!(found, [(1, events[1].hash), (3, events[3].hash)]);
        }
    }

    /// A line of exactly the record limit is read whole and judged for what it holds.
    #[test]
    fn a_line_at_the_record_limit_is_read_and_judged_for_its_content() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let (log, offset) = log_with_long_line(dir.path(), RECORD_BYTES_MAX);
        let opts = VerifyOptions {
            threads: 1,
            expected_head: None,
        };
        let (seq, reason, at) = integrity(verify_file(&log, opts).unwrap_err());
        assert_eq!((seq, at), (1, offset));
        assert!(
            matches!(
                reason,
                verify::Reason::Malformed(record::RecordError::Json(_))
            ),
            "{reason:?}"
        );
        // The same line first in the file: blocks then end exactly at the limit, with the
        // newline the next byte to read.
        let first = dir.path().join("first.jsonl");
        let file = File::create(&first).unwrap();
        file.set_len(RECORD_BYTES_MAX).unwrap();
        drop(file);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&first)
            .unwrap()
            .write_all(b"\n")
            .unwrap();
        let (seq, reason, at) = integrity(verify_file(&first, opts).unwrap_err());
        assert_eq!((seq, at), (0, 0));
        assert!(
            matches!(
                reason,
                verify::Reason::Malformed(record::RecordError::Json(_))
            ),
            "{reason:?}"
        );
    }

    #[test]
    fn a_partial_line_completed_after_it_was_read_is_not_torn_but_one_still_partial_is() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.jsonl");
        std::fs::write(&log, b"{\"seq\":0,\"half").unwrap();
        assert!(
            !appending_now(&log, 0),
            "no lock file: no writer ever opened it"
        );
        std::fs::write(LogPaths::of_file(&log).lock(), b"").unwrap();
        assert!(
            !appending_now(&log, 0),
            "no writer now and still partial: torn"
        );
        // The writer finished the record (and released the lock) between the read and the check.
        std::fs::write(&log, b"{\"seq\":0,\"half a record\"}\n").unwrap();
        assert!(appending_now(&log, 0));
        // A writer holding the lock: in progress, whatever the bytes say now.
        std::fs::write(&log, b"{\"seq\":0,\"half").unwrap();
        let writer = crate::writer::lock_for_maintenance(&LogPaths::of_file(&log)).unwrap();
        assert!(appending_now(&log, 0));
        drop(writer);
        assert!(!appending_now(&log, 0));
    }
}
