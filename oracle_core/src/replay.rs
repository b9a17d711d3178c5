//! Replay: rebuild the state event by event and check it against every recorded state hash.

use crate::event::Event;
use crate::hash::Hash;
use crate::reduce::{self, ReduceError};
use crate::snapshot::{Snapshot, SnapshotError};
use crate::state::State;

/// Where and why a replay stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("event {seq}: expected seq {expected}")]
    Seq { seq: u64, expected: u64 },
    #[error("event {seq}: recorded state_before {recorded}, replayed state is {actual}")]
    StateBefore {
        seq: u64,
        recorded: Hash,
        actual: Hash,
    },
    #[error("event {seq}: recorded state_after {recorded}, replay computes {actual}{}", keys_note(.keys))]
    StateAfter {
        seq: u64,
        recorded: Hash,
        actual: Hash,
        /// Keys this event changed: where the difference must lie.
        keys: Vec<String>,
    },
    #[error("event {seq}: {source}")]
    Reduce { seq: u64, source: ReduceError },
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

fn keys_note(keys: &[String]) -> String {
    if keys.is_empty() {
        String::new()
    } else {
        format!(" (keys written by this event: {})", keys.join(", "))
    }
}

impl ReplayError {
    /// The seq the replay stopped at.
    pub fn seq(&self) -> Option<u64> {
        match self {
            ReplayError::Seq { seq, .. }
            | ReplayError::StateBefore { seq, .. }
            | ReplayError::StateAfter { seq, .. }
            | ReplayError::Reduce { seq, .. } => Some(*seq),
            ReplayError::Snapshot(_) => None,
        }
    }
}

/// Rebuilds state one event at a time.
#[derive(Clone, Debug)]
pub struct Replayer {
    state: State,
    next_seq: u64,
}

impl Default for Replayer {
    fn default() -> Self {
        Replayer {
            state: State::new(),
            next_seq: 0,
        }
    }
}

impl Replayer {
    /// Starts from the empty state, before event 0.
    pub fn genesis() -> Replayer {
        Replayer::default()
    }

    /// Starts after `snapshot.seq`, once the snapshot is proven to match `recorded`, the
    /// `state_after` the log holds for that seq.
    pub fn from_snapshot(snapshot: &Snapshot, recorded: Hash) -> Result<Replayer, ReplayError> {
        let state = snapshot.restore(recorded)?;
        Ok(Replayer {
            state,
            next_seq: snapshot.seq + 1,
        })
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn into_state(self) -> State {
        self.state
    }

    /// Seq of the next event to apply.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Applies `event`, checking the recorded state hashes on both sides of it.
    pub fn step(&mut self, event: &Event) -> Result<(), ReplayError> {
        let seq = event.seq;
        if seq != self.next_seq {
            return Err(ReplayError::Seq {
                seq,
                expected: self.next_seq,
            });
        }
        if event.state_before != self.state.hash() {
            return Err(ReplayError::StateBefore {
                seq,
                recorded: event.state_before,
                actual: self.state.hash(),
            });
        }
        reduce::apply_in_place(&mut self.state, event)
            .map_err(|source| ReplayError::Reduce { seq, source })?;
        if event.state_after != self.state.hash() {
            return Err(ReplayError::StateAfter {
                seq,
                recorded: event.state_after,
                actual: self.state.hash(),
                keys: reduce::touched_keys(event),
            });
        }
        self.next_seq += 1;
        Ok(())
    }
}

/// Replays `events` from genesis and returns the final state.
pub fn replay<'a, I: IntoIterator<Item = &'a Event>>(events: I) -> Result<State, ReplayError> {
    let mut r = Replayer::genesis();
    for e in events {
        r.step(e)?;
    }
    Ok(r.into_state())
}
