//! Snapshots: a state and the seq it follows, checked against the log before being trusted.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::canon::CanonError;
use crate::hash::Hash;
use crate::state::State;

/// Version of the snapshot file layout.
pub const SNAPSHOT_FORMAT: u64 = 1;

/// The state after event `seq`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    pub format: u64,
    /// The state is the one after this event.
    pub seq: u64,
    /// Hash of `entries`, as the log recorded it in `state_after` at `seq`.
    pub state_hash: Hash,
    pub entries: Map<String, Value>,
}

/// Why a snapshot cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot format {found} is not supported (expected {SNAPSHOT_FORMAT})")]
    Format { found: u64 },
    #[error("snapshot at seq {seq} has an entry with no canonical encoding: {source}")]
    Canon { seq: u64, source: CanonError },
    #[error(
        "snapshot at seq {seq} is corrupt: its entries hash to {computed}, it claims {claimed}"
    )]
    Content {
        seq: u64,
        claimed: Hash,
        computed: Hash,
    },
    #[error(
        "snapshot at seq {seq} does not match the log: the log records state {recorded}, the snapshot holds {snapshot}"
    )]
    NotInLog {
        seq: u64,
        recorded: Hash,
        snapshot: Hash,
    },
}

impl Snapshot {
    /// Captures `state` as the state after event `seq`.
    pub fn capture(seq: u64, state: &State) -> Snapshot {
        Snapshot {
            format: SNAPSHOT_FORMAT,
            seq,
            state_hash: state.hash(),
            entries: state.iter().map(|(k, v)| (k.clone(), v.value())).collect(),
        }
    }

    /// Rebuilds the state, refusing it unless its content hashes to what it claims *and* to what
    /// the log recorded as `state_after` at `seq` (`recorded`).
    pub fn restore(&self, recorded: Hash) -> Result<State, SnapshotError> {
        let seq = self.seq;
        if self.format != SNAPSHOT_FORMAT {
            return Err(SnapshotError::Format { found: self.format });
        }
        let state = State::from_entries(self.entries.iter().map(|(k, v)| (k.clone(), v.clone())))
            .map_err(|source| SnapshotError::Canon { seq, source })?;
        if state.hash() != self.state_hash {
            return Err(SnapshotError::Content {
                seq,
                claimed: self.state_hash,
                computed: state.hash(),
            });
        }
        if state.hash() != recorded {
            return Err(SnapshotError::NotInLog {
                seq,
                recorded,
                snapshot: state.hash(),
            });
        }
        Ok(state)
    }
}
