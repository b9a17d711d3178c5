//! A verified log held in memory as its bytes plus each record's link; events are parsed only
//! when asked for.
//!
//! Resume and replay compare every produced event with the recorded one by chain hash, which
//! the verifier's link already carries; only a few events (capability verdicts, impure
//! outcomes, answers, a divergence) need their payload. Parsing every record into an `Event`
//! up front cost more than the re-execution itself (BENCHMARKS.md).

use std::path::Path;

use oracle_core::verify::{self, ChainCheck, Link, LogBytesError};
use oracle_core::{Event, EventKind, record};

use crate::error::{Result, StoreError};

/// The events of a verified log.
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    bytes: Vec<u8>,
    /// Start offset of each record in `bytes` (its end is the next start, or the end).
    starts: Vec<u64>,
    links: Vec<Link>,
}

impl Recorded {
    /// No events: a new run.
    pub fn empty() -> Recorded {
        Recorded::default()
    }

    /// Reads and verifies the whole log at `path`. A torn tail or any damage is an error; a
    /// partial final line that a live writer is appending is not yet written, and left out.
    pub fn read(path: &Path) -> Result<Recorded> {
        use rayon::prelude::*;
        let mut bytes = std::fs::read(path).map_err(StoreError::io(path))?;
        let log_err = |error| StoreError::Log {
            path: path.to_path_buf(),
            error,
        };
        // Record boundaries first (newlines), then every record checked on all cores, then
        // the links in order: the same checks as `verify`, in the same order of reporting.
        let mut starts = Vec::new();
        let mut offset = 0usize;
        for nl in memchr::memchr_iter(b'\n', &bytes) {
            starts.push(offset as u64);
            offset = nl + 1;
        }
        let lines: Vec<&[u8]> = starts
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let end = starts.get(i + 1).map_or(offset, |&e| e as usize);
                &bytes[s as usize..end - 1]
            })
            .collect();
        let checks: Vec<_> = lines
            .par_iter()
            .map_init(verify::Scratch::default, |scratch, line| {
                verify::check_line(line, scratch)
            })
            .collect();
        let mut chain = ChainCheck::new();
        let mut links = Vec::with_capacity(checks.len());
        for (i, check) in checks.into_iter().enumerate() {
            let link = check.as_ref().ok().map(|(l, _)| *l);
            chain.push_line(check).map_err(|error| {
                log_err(LogBytesError::Integrity {
                    error,
                    offset: starts[i],
                })
            })?;
            if let Some(link) = link {
                links.push(link);
            }
        }
        if offset < bytes.len() && !crate::reader::appending_now(path, offset as u64) {
            return Err(log_err(LogBytesError::TornTail {
                seq: chain.head().next_seq,
                offset: offset as u64,
                len: (bytes.len() - offset) as u64,
            }));
        }
        drop(lines);
        // The last event ends where the bytes end.
        bytes.truncate(offset);
        Ok(Recorded {
            bytes,
            starts,
            links,
        })
    }

    pub fn len(&self) -> u64 {
        self.links.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The verified link (seq, kind, hashes) of event `seq`.
    pub fn link(&self, seq: u64) -> Option<&Link> {
        self.links.get(usize::try_from(seq).ok()?)
    }

    pub fn kind(&self, seq: u64) -> Option<EventKind> {
        self.link(seq).map(|l| l.kind)
    }

    /// Event `seq`, parsed from its verified record.
    pub fn event(&self, seq: u64) -> Option<Event> {
        let i = usize::try_from(seq).ok()?;
        let start = usize::try_from(*self.starts.get(i)?).ok()?;
        let end = match self.starts.get(i + 1) {
            Some(&s) => usize::try_from(s).ok()?,
            None => self.bytes.len(),
        };
        // The record was verified when read, so it parses; `None` only on a broken invariant.
        serde_json::from_slice(self.bytes[start..end].trim_ascii_end()).ok()
    }

    /// The last event, if any.
    pub fn last(&self) -> Option<Event> {
        self.len().checked_sub(1).and_then(|s| self.event(s))
    }

    /// Every event, parsed (for small logs and tests).
    pub fn events(&self) -> Vec<Event> {
        (0..self.len()).filter_map(|s| self.event(s)).collect()
    }
}

impl From<Vec<Event>> for Recorded {
    /// Events made in memory (tests, examples); they are not verified here.
    fn from(events: Vec<Event>) -> Recorded {
        let mut r = Recorded::default();
        for e in &events {
            r.starts.push(r.bytes.len() as u64);
            record::encode_into(e, &mut r.bytes);
            r.links.push(Link::of(e));
        }
        r
    }
}
