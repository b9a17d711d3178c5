//! LtHash16: a homomorphic hash of a set, updated in constant time per element.
//!
//! Each element expands through BLAKE3's extendable output into 1024 little-endian `u16` lanes;
//! the set's accumulator is the lane-wise sum modulo 2^16. Adding an element adds its lanes,
//! removing subtracts them, so the hash of a state is updated per changed key at a cost that
//! does not depend on how many keys the state holds. Parameters follow the LtHash construction
//! of Bellare–Micciancio as deployed by Facebook (n = 1024, d = 16).
//!
//! The expansion is BLAKE3's XOF of the element in the state-entry domain, 2048 bytes, exactly
//! as `docs/FORMAT.md` defines it. The `xof` submodule computes those same bytes with the 32 output blocks
//! side by side (SIMD lanes) rather than one after another; it is an implementation of the same
//! function, not a different one, and its tests compare it with the `blake3` crate's XOF.

mod xof;

pub use xof::Expander;

use crate::hash::{Hash, domain, hasher};

/// Number of 16-bit lanes.
pub const LANES: usize = 1024;
/// Bytes of one expanded element and of the accumulator.
pub const BYTES: usize = LANES * 2;

/// The accumulator, stored as its little-endian bytes so the digest hashes it in place. The
/// all-zero value is the hash of the empty set.
#[derive(Clone, PartialEq, Eq)]
pub struct LtHash {
    bytes: Box<[u8; BYTES]>,
}

impl Default for LtHash {
    fn default() -> Self {
        LtHash {
            bytes: Box::new([0; BYTES]),
        }
    }
}

impl std::fmt::Debug for LtHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LtHash({})", self.digest().short())
    }
}

/// Expands an element (its canonical bytes) into `out` in the state-entry domain: the first
/// [`BYTES`] bytes of BLAKE3's XOF, computed by the fastest [`Expander`] this CPU runs.
pub fn expand(element: &[u8], out: &mut [u8; BYTES]) {
    Expander::detected().expand(element, out);
}

impl LtHash {
    /// Adds an element expanded by [`expand`].
    pub fn add(&mut self, e: &[u8; BYTES]) {
        for (a, b) in self.bytes.chunks_exact_mut(2).zip(e.chunks_exact(2)) {
            let sum =
                u16::from_le_bytes([a[0], a[1]]).wrapping_add(u16::from_le_bytes([b[0], b[1]]));
            a.copy_from_slice(&sum.to_le_bytes());
        }
    }

    /// Removes an element expanded by [`expand`].
    pub fn remove(&mut self, e: &[u8; BYTES]) {
        for (a, b) in self.bytes.chunks_exact_mut(2).zip(e.chunks_exact(2)) {
            let diff =
                u16::from_le_bytes([a[0], a[1]]).wrapping_sub(u16::from_le_bytes([b[0], b[1]]));
            a.copy_from_slice(&diff.to_le_bytes());
        }
    }

    /// The accumulator's 2048 bytes, lanes little-endian.
    pub fn as_bytes(&self) -> &[u8; BYTES] {
        &self.bytes
    }

    /// `H_state(accumulator bytes)`: the 32-byte state hash.
    pub fn digest(&self) -> Hash {
        let mut h = hasher(domain::STATE);
        h.update(&self.bytes[..]);
        Hash(*h.finalize().as_bytes())
    }
}
