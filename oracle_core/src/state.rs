//! The run's state: a persistent sorted map from string keys to canonical values, with a hash
//! maintained incrementally.
//!
//! The map is an `imbl::OrdMap`, so a clone (a snapshot, a replay checkpoint) shares structure
//! and costs O(1). The hash is the LtHash of the set of `(key, value)` entries, updated by
//! subtracting an overwritten entry and adding the new one: its cost per change is constant
//! whatever the size of the state.
//!
//! Values are held [`Packed`] (their compact JSON text), not as trees: a run keeps an entry for
//! every step it ran, and a small object as a tree costs about 630 bytes (issue 42). [`State::get`]
//! decodes the one value asked for.

use std::sync::Arc;

use imbl::OrdMap;
use serde_json::Value;

use crate::canon::{self, CanonError, put_bytes};
use crate::hash::Hash;
use crate::lthash::{self, LtHash};
use crate::packed::Packed;
use crate::payload::StateChanged;

/// Keys and values of a run, with their hash.
#[derive(Clone, Debug)]
pub struct State {
    map: OrdMap<String, Packed>,
    acc: Arc<LtHash>,
    digest: Hash,
}

impl Default for State {
    fn default() -> Self {
        let acc = LtHash::default();
        let digest = acc.digest();
        State {
            map: OrdMap::new(),
            acc: Arc::new(acc),
            digest,
        }
    }
}

impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest && self.map == other.map
    }
}

/// Appends the LtHash element bytes of one entry, `len(key) ‖ key ‖ canon(value)`, to `out`
/// and returns where it ends.
fn encode_entry(key: &str, value: &Value, out: &mut Vec<u8>) -> Result<usize, CanonError> {
    put_bytes(out, key.as_bytes());
    canon::encode_into(value, out)?;
    Ok(out.len())
}

/// A change to apply: keys to write and keys to remove, borrowed from wherever they live.
pub trait Change {
    fn set(&self) -> impl Iterator<Item = (&str, &Value)>;
    fn delete(&self) -> impl Iterator<Item = &str>;
}

impl Change for StateChanged {
    fn set(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.set.iter().map(|(k, v)| (k.as_str(), v))
    }
    fn delete(&self) -> impl Iterator<Item = &str> {
        self.delete.iter().map(String::as_str)
    }
}

impl State {
    /// The empty state.
    pub fn new() -> State {
        State::default()
    }

    /// A state holding `entries` (later duplicates of a key win).
    pub fn from_entries<I: IntoIterator<Item = (String, Value)>>(
        entries: I,
    ) -> Result<State, CanonError> {
        let mut s = State::new();
        let mut change = StateChanged::default();
        for (k, v) in entries {
            change.set.insert(k, v);
        }
        s.apply_change(&change)?;
        Ok(s)
    }

    /// The state hash.
    pub fn hash(&self) -> Hash {
        self.digest
    }

    /// The value under `key`, decoded.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.map.get(key).map(Packed::value)
    }

    /// The value under `key` as the state holds it.
    pub fn get_packed(&self, key: &str) -> Option<&Packed> {
        self.map.get(key)
    }

    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries in key order, as the state holds them (serialising a [`Packed`] into JSON writes
    /// the value's bytes; [`Packed::value`] decodes it).
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Packed)> {
        self.map.iter()
    }

    /// Applies a change in place, updating the hash incrementally. On error (a float in a value)
    /// the state is left unchanged.
    pub fn apply_change(&mut self, change: &impl Change) -> Result<(), CanonError> {
        // Encoding the new values is the only step that can fail: do it before touching
        // anything. Values already in the map were encoded when they entered it, so encoding
        // them again cannot fail.
        let mut buf = Vec::with_capacity(256);
        let mut ends = Vec::with_capacity(4);
        for (k, v) in change.set() {
            ends.push(encode_entry(k, v, &mut buf)?);
        }
        let mut expanded = [0u8; lthash::BYTES];
        let mut old_buf = Vec::new();
        let mut changed = false;
        let acc = Arc::make_mut(&mut self.acc);
        let mut start = 0;
        for ((k, v), end) in change.set().zip(ends) {
            // One walk of the map: insert returns what was there (a second looks at the new
            // value only when there was an old one to compare it with).
            let old = self.map.insert(k.to_owned(), Packed::new(v));
            if old.is_none() || old.as_ref() != self.map.get(k) {
                if let Some(old) = old {
                    old_buf.clear();
                    encode_entry(k, &old.value(), &mut old_buf)?;
                    lthash::expand(&old_buf, &mut expanded);
                    acc.remove(&expanded);
                }
                lthash::expand(&buf[start..end], &mut expanded);
                acc.add(&expanded);
                changed = true;
            }
            start = end;
        }
        for k in change.delete() {
            if let Some(old) = self.map.remove(k) {
                old_buf.clear();
                encode_entry(k, &old.value(), &mut old_buf)?;
                lthash::expand(&old_buf, &mut expanded);
                acc.remove(&expanded);
                changed = true;
            }
        }
        if changed {
            self.digest = acc.digest();
        }
        Ok(())
    }

    /// The hash computed from scratch over every entry: what the incremental hash must equal.
    pub fn hash_from_scratch(&self) -> Result<Hash, CanonError> {
        let mut acc = LtHash::default();
        let mut buf = Vec::new();
        let mut expanded = [0u8; lthash::BYTES];
        for (k, v) in &self.map {
            buf.clear();
            encode_entry(k, &v.value(), &mut buf)?;
            lthash::expand(&buf, &mut expanded);
            acc.add(&expanded);
        }
        Ok(acc.digest())
    }
}
