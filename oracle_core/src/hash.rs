//! 32-byte BLAKE3 digests and the domain-separated hashers every hashed structure uses.
//!
//! Each kind of hashed object has its own BLAKE3 `derive_key` context string, so a payload, an
//! event body, a chain link, a state entry and a state digest can never collide with each other
//! even when their input bytes are equal. The `v1` in every context is the encoding version: a
//! change to any encoded byte layout must bump it (and the golden vectors in `fixtures/golden`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// BLAKE3 `derive_key` contexts, one per domain. Listed in `docs/FORMAT.md`.
pub mod domain {
    /// Canonical encoding of an event payload.
    pub const PAYLOAD: &str = "oracle v1 payload";
    /// The fixed-layout body of an event (everything but `prev` and `hash`).
    pub const EVENT_BODY: &str = "oracle v1 event body";
    /// A chain link: `prev ‖ body_hash`.
    pub const CHAIN: &str = "oracle v1 chain";
    /// One `(key, value)` entry of the state, expanded to an LtHash element.
    pub const STATE_ENTRY: &str = "oracle v1 state entry";
    /// The LtHash accumulator of a whole state, compressed to 32 bytes.
    pub const STATE: &str = "oracle v1 state";
    /// Any other canonical value (configuration, tests) hashed for identity.
    pub const VALUE: &str = "oracle v1 value";
    /// The canonical compiled form of a plan: the plan hash.
    pub const PLAN: &str = "oracle v1 plan";
    /// The seed of one `random.int` call: run seed ‖ step ‖ attempt (see `rng::for_call`).
    pub const RANDOM: &str = "oracle v1 random";
    /// A belief-memory claim's id: canonical claim ‖ the seq of the event that recorded it.
    pub const CLAIM: &str = "oracle v1 claim";
    /// An auctioned artifact's content (duplicate detection): its bytes.
    pub const ARTIFACT: &str = "oracle v1 artifact";
    /// The seeded tie-break of an auction: run seed ‖ auction ‖ agent ‖ artifact.
    pub const AUCTION_TIE: &str = "oracle v1 auction tie";
    /// What defines a declared tool, for its pin in `run_started`: the manifest's bytes, then
    /// the module's, the program's or the MCP server's tool list, each length-prefixed.
    pub const TOOL_PIN: &str = "oracle v1 tool pin";
    /// One file an exec tool's `args` name inside its manifest's directory, for the per-file
    /// hash beside its pin (`ToolPin::files`): the file's bytes.
    pub const TOOL_FILE: &str = "oracle v1 tool file";
    /// One file a code agent's program is made of (docs/AGENTS.md, "The program hash"): the
    /// file's bytes.
    pub const AGENT_FILE: &str = "oracle v1 agent file";
    /// A code agent's program hash: the canonical JSON of its protocol, SDK, name, version and
    /// file hashes (docs/AGENTS.md).
    pub const AGENT_PROGRAM: &str = "oracle v1 agent program";

    /// Every context above, once.
    pub const ALL: [&str; 15] = [
        PAYLOAD,
        EVENT_BODY,
        CHAIN,
        STATE_ENTRY,
        STATE,
        VALUE,
        PLAN,
        RANDOM,
        CLAIM,
        ARTIFACT,
        AUCTION_TIE,
        TOOL_PIN,
        TOOL_FILE,
        AGENT_FILE,
        AGENT_PROGRAM,
    ];
}

/// A 32-byte digest. Written as 64 lowercase hex characters; parsing accepts nothing else, so a
/// digest has exactly one textual form.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    /// The all-zero digest: the `prev` of event 0.
    pub const ZERO: Hash = Hash([0; 32]);

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String {
        let mut out = String::with_capacity(64);
        for b in self.0 {
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        }
        out
    }

    /// The first 12 hex characters, for tables meant for people.
    pub fn short(&self) -> String {
        let mut s = self.to_hex();
        s.truncate(12);
        s
    }

    /// Parses exactly 64 lowercase hex characters.
    pub fn from_hex(s: &str) -> Result<Hash, HashParseError> {
        let bytes = s.as_bytes();
        let Ok(hex) = <&[u8; 64]>::try_from(bytes) else {
            return Err(HashParseError::Length {
                len: bytes.len() as u64,
            });
        };
        Hash::from_hex_bytes(hex).ok_or_else(|| {
            let at = bytes
                .iter()
                .position(|&c| HEX_VALUE[c as usize] == INVALID)
                .unwrap_or(0);
            HashParseError::Char { at: at as u64 }
        })
    }

    /// Decodes 64 lowercase hex bytes, or `None` if any is not one. Branch-free over the input:
    /// verification decodes five of these per event.
    pub fn from_hex_bytes(hex: &[u8; 64]) -> Option<Hash> {
        let mut out = [0u8; 32];
        let mut bad = 0u8;
        for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            let hi = HEX_VALUE[pair[0] as usize];
            let lo = HEX_VALUE[pair[1] as usize];
            bad |= hi | lo;
            *o = (hi << 4) | (lo & 0x0f);
        }
        (bad & INVALID == 0).then_some(Hash(out))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Marks a byte that is not a lowercase hex digit in [`HEX_VALUE`].
const INVALID: u8 = 0x10;

/// Value of each byte as a lowercase hex digit, or [`INVALID`].
const HEX_VALUE: [u8; 256] = {
    let mut t = [INVALID; 256];
    let mut i = 0;
    while i < 16 {
        t[HEX[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Why a string is not a digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashParseError {
    #[error("a hash is 64 hex characters, found {len}")]
    Length { len: u64 },
    #[error("a hash is lowercase hex; character {at} is not")]
    Char { at: u64 },
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.short())
    }
}

impl FromStr for Hash {
    type Err = HashParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Hash::from_hex(s)
    }
}

impl Serialize for Hash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 64];
        for (i, b) in self.0.iter().enumerate() {
            buf[2 * i] = HEX[(b >> 4) as usize];
            buf[2 * i + 1] = HEX[(b & 0xf) as usize];
        }
        // The buffer holds only ASCII hex digits.
        let text = std::str::from_utf8(&buf).map_err(serde::ser::Error::custom)?;
        s.serialize_str(text)
    }
}

impl<'de> Deserialize<'de> for Hash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Hash;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("64 lowercase hex characters")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Hash, E> {
                Hash::from_hex(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// A BLAKE3 hasher keyed by one of the [`domain`] contexts.
///
/// `new_derive_key` hashes the context string every time it is called; the hashers of the
/// known domains are derived once and cloned, which gives the same output for less work.
pub fn hasher(context: &str) -> blake3::Hasher {
    use std::sync::LazyLock;
    static KNOWN: LazyLock<[(&str, blake3::Hasher); domain::ALL.len()]> =
        LazyLock::new(|| domain::ALL.map(|c| (c, blake3::Hasher::new_derive_key(c))));
    match KNOWN.iter().find(|(c, _)| *c == context) {
        Some((_, h)) => h.clone(),
        None => blake3::Hasher::new_derive_key(context),
    }
}

/// Hashes `bytes` in `context`.
pub fn hash_in(context: &str, bytes: &[u8]) -> Hash {
    let mut h = hasher(context);
    h.update(bytes);
    Hash(*h.finalize().as_bytes())
}

/// The chain link of an event: `H_chain(prev ‖ body_hash)`.
pub fn chain_link(prev: &Hash, body_hash: &Hash) -> Hash {
    let mut h = hasher(domain::CHAIN);
    h.update(&prev.0);
    h.update(&body_hash.0);
    Hash(*h.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_is_strict() {
        let h = hash_in(domain::VALUE, b"x");
        assert_eq!(Hash::from_hex(&h.to_hex()), Ok(h));
        let upper = h.to_hex().to_uppercase();
        if upper != h.to_hex() {
            assert!(Hash::from_hex(&upper).is_err(), "uppercase must be refused");
        }
        assert_eq!(Hash::from_hex("ab"), Err(HashParseError::Length { len: 2 }));
    }

    #[test]
    fn domains_separate_equal_bytes() {
        let a = hash_in(domain::PAYLOAD, b"same");
        let b = hash_in(domain::EVENT_BODY, b"same");
        let c = hash_in(domain::STATE, b"same");
        assert_ne!(a, b);
        assert_ne!(b, c);
        assert_ne!(a, c);
    }
}
