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

/// Where a tail of a log starts: the record of event `seq`, at byte `offset`, with hash
/// `hash` (a resume point's event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Anchor {
    pub seq: u64,
    pub offset: u64,
    pub hash: oracle_core::Hash,
}

/// The events of a verified log.
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    /// Seq of the first event held: 0 for a whole log, the seq after a resume point's event
    /// for a tail ([`Recorded::read_tail`]). Earlier events are not held: asking for one gives
    /// `None`.
    base: u64,
    /// The link of the anchor event (the one before `base`), for a tail.
    anchor: Option<Link>,
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
        let bytes = std::fs::read(path).map_err(StoreError::io(path))?;
        Recorded::from_bytes(path, bytes, 0, None)
    }

    /// Reads the log at `path` up to its first damaged record (`oracle recover`, a fork before
    /// the damage): the valid prefix, verified as [`Recorded::read`] verifies a whole log, and
    /// where the damage starts (its seq and byte offset), or `None` for a log that verifies
    /// whole. A torn tail is damage like any other here: the prefix ends before it.
    pub fn read_valid(path: &Path) -> Result<(Recorded, Option<(u64, u64)>)> {
        let bytes = std::fs::read(path).map_err(StoreError::io(path))?;
        let damage = match Recorded::from_bytes(path, bytes.clone(), 0, None) {
            Ok(r) => return Ok((r, None)),
            Err(StoreError::Log { error, .. }) => match error {
                LogBytesError::Integrity { offset, .. }
                | LogBytesError::TornTail { offset, .. } => (error.seq(), offset),
                LogBytesError::HeadNotFound { .. } => {
                    return Err(StoreError::Log {
                        path: path.to_path_buf(),
                        error,
                    });
                }
            },
            Err(e) => return Err(e),
        };
        let cut = usize::try_from(damage.1).map_or(bytes.len(), |c| c.min(bytes.len()));
        let prefix = Recorded::from_bytes(path, bytes[..cut].to_vec(), 0, None)?;
        Ok((prefix, Some(damage)))
    }

    /// Reads the log at `path` from the anchor on: the record at byte `anchor.offset` must be
    /// event `anchor.seq` with hash `anchor.hash` (what a resume point says it saw), and every
    /// later record is verified as a chain continuing it, exactly as [`Recorded::read`] verifies
    /// a whole log. The anchor itself is not held: the result starts at `anchor.seq + 1`. The
    /// records before the anchor are neither read nor verified here (`oracle verify` does).
    pub fn read_tail(path: &Path, anchor: &Anchor) -> Result<Recorded> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = std::fs::File::open(path).map_err(StoreError::io(path))?;
        let mut bytes = Vec::new();
        file.seek(SeekFrom::Start(anchor.offset))
            .and_then(|_| file.read_to_end(&mut bytes))
            .map_err(StoreError::io(path))?;
        Recorded::from_bytes(path, bytes, anchor.offset, Some(anchor))
    }

    /// Verifies `bytes` (the log from byte `at`) and indexes its records.
    fn from_bytes(
        path: &Path,
        mut bytes: Vec<u8>,
        at: u64,
        anchor: Option<&Anchor>,
    ) -> Result<Recorded> {
        use rayon::prelude::*;
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
        let mut checks = checks.into_iter();
        let mut anchor_link = None;
        let (mut chain, base) = match anchor {
            None => (ChainCheck::new(), 0),
            Some(a) => {
                let refused = |why: String| StoreError::Anchor {
                    path: path.to_path_buf(),
                    seq: a.seq,
                    offset: a.offset,
                    why,
                };
                let link = match checks.next() {
                    None => return Err(refused("the log ends before it".into())),
                    Some(Err(e)) => return Err(refused(e.to_string())),
                    Some(Ok((_, Err(reason)))) => return Err(refused(reason.to_string())),
                    Some(Ok((link, Ok(())))) => link,
                };
                if link.seq != a.seq || link.hash != a.hash {
                    return Err(refused(format!(
                        "the record there is event {} with hash {}, not event {} with hash {}",
                        link.seq,
                        link.hash.short(),
                        a.seq,
                        a.hash.short()
                    )));
                }
                starts.remove(0);
                anchor_link = Some(link);
                let head = oracle_core::verify::Head {
                    next_seq: link.seq + 1,
                    hash: link.hash,
                    time: link.time,
                    state: link.state_after,
                };
                (ChainCheck::resume(head), link.seq + 1)
            }
        };
        let mut links = Vec::with_capacity(checks.len());
        for (i, check) in checks.enumerate() {
            let link = check.as_ref().ok().map(|(l, _)| *l);
            chain.push_line(check).map_err(|error| {
                log_err(LogBytesError::Integrity {
                    error,
                    offset: at + starts[i],
                })
            })?;
            if let Some(link) = link {
                links.push(link);
            }
        }
        if offset < bytes.len() && !crate::reader::appending_now(path, at + offset as u64) {
            return Err(log_err(LogBytesError::TornTail {
                seq: chain.head().next_seq,
                offset: at + offset as u64,
                len: (bytes.len() - offset) as u64,
            }));
        }
        drop(lines);
        // The last event ends where the bytes end; the anchor's bytes are not kept.
        bytes.truncate(offset);
        if let Some(&first) = starts.first().filter(|_| base > 0) {
            bytes.drain(..first as usize);
            for s in &mut starts {
                *s -= first;
            }
        } else if base > 0 {
            bytes.clear();
        }
        Ok(Recorded {
            base,
            anchor: anchor_link,
            bytes,
            starts,
            links,
        })
    }

    /// Events in the log (held or not): the seq the next one will have.
    pub fn len(&self) -> u64 {
        self.base + self.links.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The verified link of the event a tail continues ([`Recorded::read_tail`]).
    pub fn anchor(&self) -> Option<&Link> {
        self.anchor.as_ref()
    }

    /// Seq of the first event held (0 unless read from a resume point's anchor).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The verified link (seq, kind, hashes) of event `seq`.
    pub fn link(&self, seq: u64) -> Option<&Link> {
        self.links
            .get(usize::try_from(seq.checked_sub(self.base)?).ok()?)
    }

    pub fn kind(&self, seq: u64) -> Option<EventKind> {
        self.link(seq).map(|l| l.kind)
    }

    /// Event `seq`, parsed from its verified record.
    pub fn event(&self, seq: u64) -> Option<Event> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
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
        (self.base..self.len())
            .filter_map(|s| self.event(s))
            .collect()
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
