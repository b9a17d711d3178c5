//! Building chains: the in-memory log, and the recorder that turns payloads into sealed events.

use crate::canon::CanonError;
use crate::event::{Event, EventBody};
use crate::limits::LimitError;
use crate::payload::{EventKind, Payload};
use crate::reduce::{self, ReduceError};
use crate::state::State;
use crate::verify::{ChainCheck, Head, Link, Reason, VerifyError};

/// An append-only, fully verified log held in memory, ordered by seq.
#[derive(Clone, Debug, Default)]
pub struct Log {
    events: Vec<Event>,
    chain: ChainCheck,
}

impl Log {
    pub fn new() -> Log {
        Log::default()
    }

    /// Appends `event` if it extends the chain; otherwise returns why and leaves the log as it was.
    pub fn append(&mut self, event: Event) -> Result<(), VerifyError> {
        self.chain.push_event(&event)?;
        self.events.push(event);
        Ok(())
    }

    pub fn events(&self) -> &[Event] {
        &self.events
    }

    pub fn len(&self) -> u64 {
        self.events.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn head(&self) -> Head {
        self.chain.head()
    }

    pub fn get(&self, seq: u64) -> Option<&Event> {
        usize::try_from(seq).ok().and_then(|i| self.events.get(i))
    }
}

/// Why the recorder refused to make an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordingError {
    #[error(transparent)]
    Canon(#[from] CanonError),
    #[error(transparent)]
    Reduce(#[from] ReduceError),
    #[error("the event would not be readable: {0}")]
    Limit(#[from] LimitError),
    #[error(transparent)]
    Chain(#[from] VerifyError),
    #[error("recorder state hash {state} does not match the chain head's {head}")]
    StateMismatch {
        state: crate::hash::Hash,
        head: crate::hash::Hash,
    },
}

/// Turns payloads into sealed events: computes the next state with the reducer, hashes, links.
#[derive(Clone, Debug)]
pub struct Recorder {
    chain: ChainCheck,
    state: State,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            chain: ChainCheck::new(),
            state: State::new(),
        }
    }
}

impl Recorder {
    /// A recorder for a new, empty log.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// Continues a log whose verified head is `head` and whose replayed state is `state`.
    pub fn resume(head: Head, state: State) -> Result<Recorder, RecordingError> {
        if state.hash() != head.state {
            return Err(RecordingError::StateMismatch {
                state: state.hash(),
                head: head.state,
            });
        }
        Ok(Recorder {
            chain: ChainCheck::resume(head),
            state,
        })
    }

    pub fn head(&self) -> Head {
        self.chain.head()
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// Accepts an event sealed elsewhere (a copied log, a synthetic one) after checking it fully:
    /// every record and link invariant, and that replaying it gives its recorded `state_after`.
    pub fn accept(&mut self, event: &Event) -> Result<(), RecordingError> {
        let mut chain = self.chain.clone();
        chain.push_event(event)?;
        let mut next = self.state.clone();
        reduce::apply_in_place(&mut next, event)?;
        if next.hash() != event.state_after {
            return Err(RecordingError::StateMismatch {
                state: next.hash(),
                head: event.state_after,
            });
        }
        self.chain = chain;
        self.state = next;
        Ok(())
    }

    /// Seals the next event. `time` must not be before the last event's; `parents` must be
    /// earlier seqs in increasing order. On error nothing changes.
    pub fn record(
        &mut self,
        time: u64,
        parents: Vec<u64>,
        payload: Payload,
    ) -> Result<Event, RecordingError> {
        let head = self.chain.head();
        let seq = head.next_seq;
        if !parents.windows(2).all(|w| w[0] < w[1]) {
            return Err(VerifyError {
                seq,
                reason: Reason::ParentsUnordered,
            }
            .into());
        }
        if let Some(&parent) = parents.iter().find(|&&p| p >= seq) {
            return Err(VerifyError {
                seq,
                reason: Reason::ParentNotEarlier { parent },
            }
            .into());
        }
        // Everything that can fail is checked before the state changes, so the state is updated
        // in place: cloning it first would make every insert copy a shared map node.
        payload.check().map_err(ReduceError::from)?;
        let kind = payload.kind();
        if time < head.time {
            let reason = Reason::TimeBackwards {
                previous: head.time,
                found: time,
            };
            return Err(VerifyError { seq, reason }.into());
        }
        if seq == 0 && kind != EventKind::RunStarted {
            return Err(VerifyError {
                seq,
                reason: Reason::FirstNotRunStarted { found: kind },
            }
            .into());
        }
        if seq > 0 && kind == EventKind::RunStarted {
            return Err(VerifyError {
                seq,
                reason: Reason::RunStartedLater,
            }
            .into());
        }
        let value = payload.into_value();
        let (payload_hash, canonical_len) = crate::canon::payload_hash_and_len(&value)?;
        // The writer never writes what the reader rejects.
        crate::limits::check_payload(&value, canonical_len)?;
        if parents.len() as u64 > crate::limits::PARENTS_MAX {
            return Err(LimitError::TooManyParents {
                count: parents.len() as u64,
            }
            .into());
        }
        let state_before = self.state.hash();
        // Atomic: on error (a float in a value) the state is unchanged.
        reduce::apply_value(&mut self.state, kind, &value)?;
        let body = EventBody {
            seq,
            time,
            kind,
            parents,
            payload: value,
            state_before,
            state_after: self.state.hash(),
        };
        let event = Event::seal_hashed(body, payload_hash, head.hash);
        // Correct by construction; a failure here is a bug in the checks above.
        self.chain.push(&Link::of(&event), Ok(()))?;
        Ok(event)
    }
}
