//! Reading logs from disk: a streaming, verifying event reader, and the parallel verifier.
//!
//! Both read in blocks and never hold more than one block plus the events of interest, so
//! memory stays flat whatever the length of the log. Both check every invariant as they go:
//! nothing read from disk is used before it is verified.

use std::fs::File;
use std::io::Read;
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
enum Block {
    /// `buf[..n]` holds complete records.
    Records(usize),
    /// No newline within [`RECORD_BYTES_MAX`] bytes.
    LineTooLong,
    End,
}

/// Feeds a file block by block, handing out complete records with their byte offsets.
struct Blocks {
    file: File,
    path: std::path::PathBuf,
    buf: Vec<u8>,
    /// Start of `buf[0]` in the file.
    base: u64,
    eof: bool,
}

impl Blocks {
    fn open(path: &Path) -> Result<Blocks> {
        let file = File::open(path).map_err(StoreError::io(path))?;
        Ok(Blocks {
            file,
            path: path.to_path_buf(),
            buf: Vec::new(),
            base: 0,
            eof: false,
        })
    }

    /// Drops the `consumed` bytes already handled and reads more. Leftover bytes of an
    /// incomplete record stay buffered for the next call.
    fn next_block(&mut self, consumed: usize) -> Result<Block> {
        self.buf.drain(..consumed);
        self.base += consumed as u64;
        if self.eof {
            return Ok(Block::End);
        }
        let want = self.buf.len() + BLOCK_BYTES;
        let start = self.buf.len();
        self.buf.resize(want, 0);
        let mut filled = start;
        while filled < want {
            match self.file.read(&mut self.buf[filled..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(StoreError::Io {
                        path: self.path.clone(),
                        source: e,
                    });
                }
            }
        }
        self.buf.truncate(filled);
        // Complete records end at the last newline of the buffer.
        let complete = self
            .buf
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        if complete == 0 && !self.eof && self.buf.len() as u64 > RECORD_BYTES_MAX {
            // A line longer than any record may be: report it without reading further.
            return Ok(Block::LineTooLong);
        }
        Ok(Block::Records(complete))
    }

    fn lines(&self, complete: usize) -> Vec<(u64, &[u8])> {
        let mut out = Vec::with_capacity(complete / 256);
        let mut start = 0;
        for i in memchr::memchr_iter(b'\n', &self.buf[..complete]) {
            out.push((self.base + start as u64, &self.buf[start..i]));
            start = i + 1;
        }
        out
    }
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
pub fn verify_file(path: &Path, opts: VerifyOptions) -> Result<VerifySummary> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| StoreError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
    let mut blocks = Blocks::open(path)?;
    let mut chain = ChainCheck::new();
    let mut seen_expected = opts.expected_head.is_none();
    let log_err = |error| StoreError::Log {
        path: path.to_path_buf(),
        error,
    };
    let mut consumed = 0;
    loop {
        let complete = match blocks.next_block(consumed)? {
            Block::Records(n) => n,
            Block::LineTooLong => return Err(too_long(path, chain.head(), blocks.base)),
            Block::End => break,
        };
        let lines = blocks.lines(complete);
        let checks: Vec<LineCheck> = pool.install(|| {
            lines
                .par_iter()
                .map_init(verify::Scratch::default, |scratch, (_, line)| {
                    verify::check_line(line, scratch)
                })
                .collect()
        });
        for ((offset, _), check) in lines.iter().zip(checks) {
            chain.push_line(check).map_err(|error| {
                log_err(LogBytesError::Integrity {
                    error,
                    offset: *offset,
                })
            })?;
            if !seen_expected && Some(chain.head().hash) == opts.expected_head {
                seen_expected = true;
            }
        }
        consumed = complete;
    }
    let tail_len = blocks.buf.len() as u64;
    let head = verify::finish(
        chain.head(),
        blocks.base,
        tail_len,
        opts.expected_head,
        seen_expected,
    )
    .map_err(log_err)?;
    Ok(VerifySummary {
        events: head.next_seq,
        head,
        bytes: blocks.base,
    })
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
/// result.
pub fn scan(
    path: &Path,
    allow_torn_tail: bool,
    mut visit: impl FnMut(Event) -> Result<bool>,
) -> Result<ScanEnd> {
    let mut blocks = Blocks::open(path)?;
    let mut chain = ChainCheck::new();
    let mut scratch = verify::Scratch::default();
    let log_err = |error| StoreError::Log {
        path: path.to_path_buf(),
        error,
    };
    let mut consumed = 0;
    loop {
        let complete = match blocks.next_block(consumed)? {
            Block::Records(n) => n,
            Block::LineTooLong => return Err(too_long(path, chain.head(), blocks.base)),
            Block::End => break,
        };
        for (offset, line) in blocks.lines(complete) {
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
        consumed = complete;
    }
    let tail = blocks.buf.len() as u64;
    if tail > 0 && !allow_torn_tail {
        return Err(log_err(LogBytesError::TornTail {
            seq: chain.head().next_seq,
            offset: blocks.base,
            len: tail,
        }));
    }
    let torn_tail = (tail > 0).then_some((blocks.base, tail));
    Ok(ScanEnd {
        head: chain.head(),
        torn_tail,
        stopped_early: false,
    })
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

/// Verifies and replays a whole log: its head and final state.
pub fn verify_and_replay(paths: &LogPaths) -> Result<(Head, State)> {
    let mut replayer = Replayer::genesis();
    let path = &paths.log;
    let end = scan(path, false, |e| {
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
