//! The event: one hashed, causally linked record of something a run did.
//!
//! `hash = H_chain(prev ‖ body_hash)` where `body_hash` covers every other field, so the hash of
//! event n commits to every field of events 0..=n. Body hashes depend only on their own event and
//! can be computed in parallel; only the cheap link check is sequential.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canon::{self, CanonError, put_bytes, put_u64};
use crate::hash::{Hash, chain_link, domain, hasher};
use crate::payload::{EventKind, Payload};

/// The largest logical time oracle accepts from outside (`--now` of `adjudicate` and `sweep`,
/// `--adjudication-expiry`): 2^53 ticks.
///
/// Why 2^53: it is the largest integer every JSON reader holds exactly (an IEEE double, as in
/// JavaScript), and `time` is printed in JSON; and it leaves 2^64 - 2^53 ticks of headroom, so
/// the engine's `+1` per round after a verdict at `TIME_MAX`, and `time + expiry` with both at
/// most `TIME_MAX`, can never wrap. A time past it from outside would let one verdict end a
/// run: its next round's time would wrap below the verdict's and be refused forever. Logs are
/// not refused for holding a later time (verify reads any u64), so logs written before this
/// limit still verify and replay.
pub const TIME_MAX: u64 = 1 << 53;

/// A logical time given from outside is past [`TIME_MAX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} {time} is past the largest logical time, TIME_MAX = {max} (2^53)", max = TIME_MAX)]
pub struct TimeTooLate {
    /// What was given (`--now`, `--adjudication-expiry`).
    pub what: &'static str,
    pub time: u64,
}

/// Refuses a logical time given from outside that is past [`TIME_MAX`]; `what` names it.
pub fn check_time(what: &'static str, time: u64) -> Result<u64, TimeTooLate> {
    if time > TIME_MAX {
        return Err(TimeTooLate { what, time });
    }
    Ok(time)
}

/// One record of the log. Field order here is the order of fields in a JSONL record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Position in the log: contiguous from 0.
    pub seq: u64,
    /// Logical time: never decreases along the log.
    pub time: u64,
    pub kind: EventKind,
    /// Causal parents: earlier seqs, strictly increasing.
    pub parents: Vec<u64>,
    pub payload: Value,
    /// `H_payload(canon(payload))`.
    pub payload_hash: Hash,
    /// State hash before this event applied; equals the previous event's `state_after`.
    pub state_before: Hash,
    pub state_after: Hash,
    /// Chain hash of event `seq - 1`; [`Hash::ZERO`] for event 0.
    pub prev: Hash,
    pub hash: Hash,
}

/// Everything but the hashes: what a recorder supplies to make an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventBody {
    pub seq: u64,
    pub time: u64,
    pub kind: EventKind,
    pub parents: Vec<u64>,
    pub payload: Value,
    pub state_before: Hash,
    pub state_after: Hash,
}

impl Event {
    /// Seals a body into an event chained after `prev`.
    pub fn seal(body: EventBody, prev: Hash) -> Result<Event, CanonError> {
        let payload_hash = canon::payload_hash(&body.payload)?;
        Ok(Event::seal_hashed(body, payload_hash, prev))
    }

    /// [`Event::seal`] when the caller has already computed `payload_hash` from `body.payload`.
    pub fn seal_hashed(body: EventBody, payload_hash: Hash, prev: Hash) -> Event {
        let mut e = Event {
            seq: body.seq,
            time: body.time,
            kind: body.kind,
            parents: body.parents,
            payload: body.payload,
            payload_hash,
            state_before: body.state_before,
            state_after: body.state_after,
            prev,
            hash: Hash::ZERO,
        };
        e.hash = chain_link(&prev, &e.body_hash());
        e
    }

    /// `H_body` over every field but `prev` and `hash`, using the *recorded* `payload_hash`.
    pub fn body_hash(&self) -> Hash {
        let mut buf = Vec::with_capacity(160 + 8 * self.parents.len());
        self.write_body(&mut buf);
        let mut h = hasher(domain::EVENT_BODY);
        h.update(&buf);
        Hash(*h.finalize().as_bytes())
    }

    /// The fixed-layout bytes hashed into `body_hash` (see `docs/FORMAT.md`).
    pub fn write_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.seq);
        put_u64(out, self.time);
        put_bytes(out, self.kind.as_str().as_bytes());
        put_u64(out, self.parents.len() as u64);
        for p in &self.parents {
            put_u64(out, *p);
        }
        out.extend_from_slice(&self.payload_hash.0);
        out.extend_from_slice(&self.state_before.0);
        out.extend_from_slice(&self.state_after.0);
    }

    /// The chain hash this event should carry given its fields.
    pub fn computed_hash(&self) -> Hash {
        chain_link(&self.prev, &self.body_hash())
    }

    /// The typed payload (checked against the kind).
    pub fn typed(&self) -> Result<Payload, crate::payload::PayloadError> {
        Payload::decode(self.kind, &self.payload)
    }

    /// Recomputes `payload_hash` and `hash` after an edit, keeping `prev`. Used by tools and tests
    /// that build deliberately forged logs; the chain after this event must be relinked too.
    pub fn reseal(&mut self) -> Result<(), CanonError> {
        self.payload_hash = canon::payload_hash(&self.payload)?;
        self.hash = self.computed_hash();
        Ok(())
    }
}

/// Re-links `events` into a self-consistent chain after edits: recomputes every payload hash,
/// `prev` and `hash` in order. A forger can always do this; that is why a known head hash (or a
/// signed checkpoint) is what proves a log was not rewritten.
pub fn relink(events: &mut [Event]) -> Result<(), CanonError> {
    let mut prev = Hash::ZERO;
    for e in events.iter_mut() {
        e.prev = prev;
        e.reseal()?;
        prev = e.hash;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_up_to_time_max_are_accepted_and_the_headroom_cannot_wrap() {
        assert_eq!(check_time("--now", 0), Ok(0));
        assert_eq!(check_time("--now", TIME_MAX), Ok(TIME_MAX));
        let err = check_time("--now", TIME_MAX + 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--now 9007199254740993 is past the largest logical time, TIME_MAX = 9007199254740992 (2^53)"
        );
        assert!(check_time("--adjudication-expiry", u64::MAX).is_err());
        // A time and an expiry both at the limit, plus a round, stay far from u64::MAX.
        assert!(
            TIME_MAX
                .checked_add(TIME_MAX)
                .and_then(|t| t.checked_add(1))
                .is_some()
        );
    }
}
