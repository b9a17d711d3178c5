//! The run's state: a persistent sorted map from string keys to canonical values, with a hash
//! maintained incrementally.
//!
//! The map is an `imbl::OrdMap`, so a clone (a snapshot, a replay checkpoint) shares structure
//! and costs O(1). The hash is the LtHash of the set of `(key, value)` entries, updated by
//! subtracting an overwritten entry and adding the new one: its cost per change is constant
//! whatever the size of the state.

use std::sync::Arc;

use imbl::OrdMap;
use serde_json::Value;

use crate::canon::{self, CanonError, put_bytes};
use crate::hash::Hash;
use crate::lthash::{Element, LtHash};
use crate::payload::StateChanged;

/// Keys and values of a run, with their hash.
#[derive(Clone, Debug)]
pub struct State {
    map: OrdMap<String, Value>,
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

/// The LtHash element of one entry: `canon-bytes(key) ‖ canon(value)`.
fn element(key: &str, value: &Value) -> Result<Element, CanonError> {
    let mut buf = Vec::with_capacity(64);
    put_bytes(&mut buf, key.as_bytes());
    canon::encode_into(value, &mut buf)?;
    Ok(Element::expand(&buf))
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

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.map.iter()
    }

    /// Applies a change in place, updating the hash incrementally. On error (a float in a value)
    /// the state is left unchanged.
    pub fn apply_change(&mut self, change: &StateChanged) -> Result<(), CanonError> {
        if change.set.is_empty() && change.delete.is_empty() {
            return Ok(());
        }
        // Expand every element before touching anything, so an error leaves `self` as it was.
        let mut adds = Vec::with_capacity(change.set.len());
        let mut removes = Vec::with_capacity(change.set.len() + change.delete.len());
        for (k, v) in &change.set {
            match self.map.get(k) {
                Some(old) if old == v => continue,
                Some(old) => removes.push(element(k, old)?),
                None => {}
            }
            adds.push(element(k, v)?);
        }
        for k in &change.delete {
            if let Some(old) = self.map.get(k) {
                removes.push(element(k, old)?);
            }
        }
        if adds.is_empty() && removes.is_empty() {
            return Ok(());
        }
        let acc = Arc::make_mut(&mut self.acc);
        for e in &removes {
            acc.remove(e);
        }
        for e in &adds {
            acc.add(e);
        }
        for (k, v) in &change.set {
            self.map.insert(k.clone(), v.clone());
        }
        for k in &change.delete {
            self.map.remove(k);
        }
        self.digest = acc.digest();
        Ok(())
    }

    /// The hash computed from scratch over every entry: what the incremental hash must equal.
    pub fn hash_from_scratch(&self) -> Result<Hash, CanonError> {
        let mut acc = LtHash::default();
        for (k, v) in &self.map {
            acc.add(&element(k, v)?);
        }
        Ok(acc.digest())
    }
}
