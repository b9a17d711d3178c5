//! LtHash16: a homomorphic hash of a set, updated in constant time per element.
//!
//! Each element expands through BLAKE3's extendable output into 1024 little-endian `u16` lanes;
//! the set's accumulator is the lane-wise sum modulo 2^16. Adding an element adds its lanes,
//! removing subtracts them, so the hash of a state is updated per changed key at a cost that
//! does not depend on how many keys the state holds. Parameters follow the LtHash construction
//! of Bellare–Micciancio as deployed by Facebook (n = 1024, d = 16).

use crate::hash::{Hash, domain, hasher};

/// Number of 16-bit lanes.
pub const LANES: usize = 1024;
/// Bytes of one expanded element and of the accumulator.
pub const BYTES: usize = LANES * 2;

/// The accumulator. The all-zero value is the hash of the empty set.
#[derive(Clone, PartialEq, Eq)]
pub struct LtHash {
    lanes: Box<[u16; LANES]>,
}

impl Default for LtHash {
    fn default() -> Self {
        LtHash {
            lanes: Box::new([0; LANES]),
        }
    }
}

impl std::fmt::Debug for LtHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LtHash({})", self.digest().short())
    }
}

/// One element expanded to lanes.
pub struct Element(Box<[u16; LANES]>);

impl Element {
    /// Expands `bytes` (an already canonical encoding of the element) in the state-entry domain.
    pub fn expand(bytes: &[u8]) -> Element {
        let mut h = hasher(domain::STATE_ENTRY);
        h.update(bytes);
        let mut raw = [0u8; BYTES];
        h.finalize_xof().fill(&mut raw);
        let mut lanes = Box::new([0u16; LANES]);
        for (lane, pair) in lanes.iter_mut().zip(raw.chunks_exact(2)) {
            *lane = u16::from_le_bytes([pair[0], pair[1]]);
        }
        Element(lanes)
    }
}

impl LtHash {
    pub fn add(&mut self, e: &Element) {
        for (a, b) in self.lanes.iter_mut().zip(e.0.iter()) {
            *a = a.wrapping_add(*b);
        }
    }

    pub fn remove(&mut self, e: &Element) {
        for (a, b) in self.lanes.iter_mut().zip(e.0.iter()) {
            *a = a.wrapping_sub(*b);
        }
    }

    /// The accumulator's 2048 bytes, lanes little-endian.
    pub fn to_bytes(&self) -> [u8; BYTES] {
        let mut out = [0u8; BYTES];
        for (pair, lane) in out.chunks_exact_mut(2).zip(self.lanes.iter()) {
            pair.copy_from_slice(&lane.to_le_bytes());
        }
        out
    }

    /// `H_state(accumulator bytes)`: the 32-byte state hash.
    pub fn digest(&self) -> Hash {
        let mut h = hasher(domain::STATE);
        h.update(&self.to_bytes());
        Hash(*h.finalize().as_bytes())
    }
}
