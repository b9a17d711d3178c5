//! Verification of a log: every invariant of every event, first failure reported with its seq.
//!
//! Split in two so that callers can parallelise: [`check_record`] looks at one event alone
//! (payload hash, payload shape, chain hash, parents) and is the expensive part; [`ChainCheck`]
//! walks the events in order and checks what links them (seq, prev, time, state). Both are pure;
//! the streaming, multi-core driver over a file lives in `oracle_runtime`.

use crate::canon::{self, CanonError};
use crate::event::Event;
use crate::hash::Hash;
use crate::payload::{EventKind, PayloadError};
use crate::record::RecordError;

/// What is wrong with the event at a seq.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("malformed record: {0}")]
    Malformed(#[from] RecordError),
    #[error(
        "seq out of order: expected {expected}, found {found} (gap, duplicate, swap or removal)"
    )]
    Seq { expected: u64, found: u64 },
    #[error("prev mismatch: the previous event's hash is {expected}, this event says {found}")]
    Prev { expected: Hash, found: Hash },
    #[error("payload hash mismatch: recorded {recorded}, payload hashes to {computed}")]
    PayloadHash { recorded: Hash, computed: Hash },
    #[error("payload has no canonical encoding: {0}")]
    Canon(#[from] CanonError),
    #[error("{0}")]
    Payload(#[from] PayloadError),
    #[error("hash mismatch: recorded {recorded}, fields hash to {computed}")]
    Hash { recorded: Hash, computed: Hash },
    #[error("parent {parent} is not earlier than the event")]
    ParentNotEarlier { parent: u64 },
    #[error("parents are not strictly increasing")]
    ParentsUnordered,
    #[error("time goes backwards: previous event at {previous}, this one at {found}")]
    TimeBackwards { previous: u64, found: u64 },
    #[error("state_before {found} is not the previous event's state_after {expected}")]
    StateBefore { expected: Hash, found: Hash },
    #[error("the first event must be `run_started`, found `{found}`")]
    FirstNotRunStarted { found: EventKind },
    #[error("`run_started` may only be the first event")]
    RunStartedLater,
    #[error("the first event's state_before must be the empty state {expected}, found {found}")]
    GenesisState { expected: Hash, found: Hash },
}

/// The first invariant a log breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event {seq}: {reason}")]
pub struct VerifyError {
    /// Position of the offending event (its expected seq: records are numbered from 0).
    pub seq: u64,
    pub reason: Reason,
}

/// Checks everything about one event that does not depend on its neighbours.
pub fn check_record(event: &Event) -> Result<(), Reason> {
    let computed = canon::payload_hash(&event.payload)?;
    if computed != event.payload_hash {
        return Err(Reason::PayloadHash {
            recorded: event.payload_hash,
            computed,
        });
    }
    event.typed()?;
    let computed = event.computed_hash();
    if computed != event.hash {
        return Err(Reason::Hash {
            recorded: event.hash,
            computed,
        });
    }
    if !event.parents.windows(2).all(|w| w[0] < w[1]) {
        return Err(Reason::ParentsUnordered);
    }
    if let Some(&parent) = event.parents.iter().find(|&&p| p >= event.seq) {
        return Err(Reason::ParentNotEarlier { parent });
    }
    Ok(())
}

/// The few fields [`ChainCheck`] needs from each event, so a parallel stage can drop the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub seq: u64,
    pub time: u64,
    pub kind: EventKind,
    pub prev: Hash,
    pub hash: Hash,
    pub state_before: Hash,
    pub state_after: Hash,
}

impl Link {
    pub fn of(e: &Event) -> Link {
        Link {
            seq: e.seq,
            time: e.time,
            kind: e.kind,
            prev: e.prev,
            hash: e.hash,
            state_before: e.state_before,
            state_after: e.state_after,
        }
    }
}

/// The end of a verified chain: what the next event must link to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Seq the next event must have (= number of events so far).
    pub next_seq: u64,
    /// Hash of the last event ([`Hash::ZERO`] when empty).
    pub hash: Hash,
    /// Time of the last event (0 when empty).
    pub time: u64,
    /// `state_after` of the last event (the empty state's hash when empty).
    pub state: Hash,
}

impl Head {
    /// The head of an empty log.
    pub fn genesis() -> Head {
        Head {
            next_seq: 0,
            hash: Hash::ZERO,
            time: 0,
            state: crate::state::State::new().hash(),
        }
    }
}

/// Sequential half of verification: feed events in log order.
#[derive(Debug, Clone)]
pub struct ChainCheck {
    head: Head,
}

impl Default for ChainCheck {
    fn default() -> Self {
        ChainCheck {
            head: Head::genesis(),
        }
    }
}

impl ChainCheck {
    pub fn new() -> ChainCheck {
        ChainCheck::default()
    }

    /// Continues a chain whose verified head is `head` (e.g. when appending to an opened log).
    pub fn resume(head: Head) -> ChainCheck {
        ChainCheck { head }
    }

    pub fn head(&self) -> Head {
        self.head
    }

    /// Checks the link from the current head to `link`, given the result of [`check_record`] on
    /// the same event, and advances. Link-order problems (seq, prev) are reported before
    /// problems inside the event, because a removed or swapped record is best described as such.
    pub fn push(&mut self, link: &Link, record: Result<(), Reason>) -> Result<(), VerifyError> {
        let seq = self.head.next_seq;
        let fail = |reason| Err(VerifyError { seq, reason });
        if link.seq != seq {
            return fail(Reason::Seq {
                expected: seq,
                found: link.seq,
            });
        }
        if link.prev != self.head.hash {
            return fail(Reason::Prev {
                expected: self.head.hash,
                found: link.prev,
            });
        }
        if let Err(reason) = record {
            return fail(reason);
        }
        if seq == 0 && link.kind != EventKind::RunStarted {
            return fail(Reason::FirstNotRunStarted { found: link.kind });
        }
        if seq > 0 && link.kind == EventKind::RunStarted {
            return fail(Reason::RunStartedLater);
        }
        if link.time < self.head.time {
            return fail(Reason::TimeBackwards {
                previous: self.head.time,
                found: link.time,
            });
        }
        if link.state_before != self.head.state {
            let reason = if seq == 0 {
                Reason::GenesisState {
                    expected: self.head.state,
                    found: link.state_before,
                }
            } else {
                Reason::StateBefore {
                    expected: self.head.state,
                    found: link.state_before,
                }
            };
            return fail(reason);
        }
        self.head = Head {
            next_seq: seq + 1,
            hash: link.hash,
            time: link.time,
            state: link.state_after,
        };
        Ok(())
    }

    /// Checks one whole event (record and link).
    pub fn push_event(&mut self, event: &Event) -> Result<(), VerifyError> {
        self.push(&Link::of(event), check_record(event))
    }
}

/// Verifies a whole in-memory log.
pub fn verify_events<'a, I: IntoIterator<Item = &'a Event>>(
    events: I,
) -> Result<Head, VerifyError> {
    let mut chain = ChainCheck::new();
    for e in events {
        chain.push_event(e)?;
    }
    Ok(chain.head())
}

/// The result of checking one line on its own: the link fields and the record check, or why the
/// line is not a record at all.
pub type LineCheck = Result<(Link, Result<(), Reason>), RecordError>;

/// Decodes one line (without `\n`) and runs [`check_record`] on it: through the byte-level
/// fast path when the record is valid, through serde (the reference, with precise errors)
/// otherwise.
pub fn check_line(line: &[u8], scratch: &mut Scratch) -> LineCheck {
    if let Some(link) = crate::fast::check_line_fast(line, &mut scratch.fast) {
        return Ok((link, Ok(())));
    }
    check_line_reference(line, &mut scratch.record)
}

/// [`check_line`] without the fast path: parse with serde, require canonical form, check.
pub fn check_line_reference(line: &[u8], scratch: &mut Vec<u8>) -> LineCheck {
    let event = crate::record::decode(line, scratch)?;
    Ok((Link::of(&event), check_record(&event)))
}

/// Buffers reused across [`check_line`] calls (one per worker thread).
#[derive(Default)]
pub struct Scratch {
    fast: crate::fast::FastScratch,
    record: Vec<u8>,
}

impl ChainCheck {
    /// [`ChainCheck::push`] for the result of [`check_line`].
    pub fn push_line(&mut self, line: LineCheck) -> Result<(), VerifyError> {
        match line {
            Ok((link, record)) => self.push(&link, record),
            Err(e) => Err(VerifyError {
                seq: self.head.next_seq,
                reason: Reason::Malformed(e),
            }),
        }
    }
}

/// Why a log file's bytes do not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogBytesError {
    #[error("{error} (record at byte {offset})")]
    Integrity { error: VerifyError, offset: u64 },
    #[error(
        "torn tail: the last {len} bytes (from byte {offset}, after {seq} complete records) are not a complete record: the write of event {seq} was cut short; `oracle repair` moves them aside"
    )]
    TornTail {
        /// The seq the torn record would have had.
        seq: u64,
        offset: u64,
        len: u64,
    },
    #[error("the log ends at seq {} with head {}, but the expected head {expected} is not in it (events from seq {} on are missing or the log was rewritten)", found.next_seq.saturating_sub(1), found.hash, found.next_seq)]
    HeadNotFound { expected: Hash, found: Head },
}

impl LogBytesError {
    /// The seq the failure is about.
    pub fn seq(&self) -> u64 {
        match self {
            LogBytesError::Integrity { error, .. } => error.seq,
            LogBytesError::TornTail { seq, .. } => *seq,
            LogBytesError::HeadNotFound { found, .. } => found.next_seq,
        }
    }
}

/// Splits a log's bytes into complete records and the torn tail (bytes after the last `\n`).
/// Yields `(offset, line)` for each complete record.
pub fn split_records(bytes: &[u8]) -> (impl Iterator<Item = (u64, &[u8])>, &[u8]) {
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(i) => i + 1,
        None => 0,
    };
    let (body, tail) = bytes.split_at(complete);
    let mut offset = 0u64;
    let lines = body.split_inclusive(|&b| b == b'\n').map(move |l| {
        let at = offset;
        offset += l.len() as u64;
        (at, &l[..l.len() - 1])
    });
    (lines, tail)
}

/// Verifies a whole log held in memory, one core, in order. The reference the parallel file
/// verifier in `oracle_runtime` is tested against.
pub fn verify_bytes(bytes: &[u8], expected_head: Option<Hash>) -> Result<Head, LogBytesError> {
    let mut chain = ChainCheck::new();
    let mut scratch = Scratch::default();
    let mut seen_expected = expected_head.is_none();
    let (lines, tail) = split_records(bytes);
    for (offset, line) in lines {
        chain
            .push_line(check_line(line, &mut scratch))
            .map_err(|error| LogBytesError::Integrity { error, offset })?;
        seen_expected |= Some(chain.head().hash) == expected_head;
    }
    finish(
        chain.head(),
        bytes.len() as u64 - tail.len() as u64,
        tail.len() as u64,
        expected_head,
        seen_expected,
    )
}

/// The checks at the end of a log: torn tail, then the expected head.
pub fn finish(
    head: Head,
    tail_offset: u64,
    tail_len: u64,
    expected_head: Option<Hash>,
    seen_expected: bool,
) -> Result<Head, LogBytesError> {
    if tail_len > 0 {
        return Err(LogBytesError::TornTail {
            seq: head.next_seq,
            offset: tail_offset,
            len: tail_len,
        });
    }
    match expected_head {
        Some(expected) if !seen_expected => Err(LogBytesError::HeadNotFound {
            expected,
            found: head,
        }),
        _ => Ok(head),
    }
}
