//! The state-entry expansion computed as 32 BLAKE3 output blocks side by side: the same bytes as
//! the `blake3` crate's XOF, without waiting for that crate to batch them.
//!
//! BLAKE3's extendable output is the root compression repeated with the output-block counter
//! 0, 1, 2, …: the chaining value, the last block and the flags are the same for every output
//! block, so the 32 blocks of one expansion are 32 independent compressions that differ in one
//! word. The `blake3` crate batches them (`xof_many`, hand-written assembly) only with AVX-512;
//! elsewhere it runs one 64-byte compression after another, and expansion was a third of
//! replay's time on an AVX2-only CPU. Here the 32 compressions are one loop whose iterations
//! are independent, which the compiler vectorises: each state word becomes a vector holding that
//! word of 4 blocks in the portable code (SSE2 on x86_64, NEON on aarch64, both baseline) and of
//! 8 blocks in a copy compiled for AVX2, chosen at run time. No intrinsics: the same source is
//! every path. With AVX-512 the crate's own batched XOF is faster than this code, so it is used.
//!
//! Only an element of at most one chunk (1024 bytes) takes this path: its chaining value before
//! the last block is a few scalar compressions. A longer element has a tree of chunks above its
//! root, which the `blake3` crate already handles, so it goes there (same bytes, slower).
//! [`Expander::Blake3`] is that crate's XOF for every element, the reference the tests compare
//! each path with.

use super::BYTES;
use crate::hash::{domain, hasher};

/// Bytes of one BLAKE3 block: the message of one compression and one block of output.
const BLOCK_LEN: usize = 64;
/// Bytes of one BLAKE3 chunk. An element up to this long is hashed as a single chunk, which is
/// the root of its tree.
const CHUNK_LEN: usize = 1024;
/// Output blocks of one expansion.
const OUT_BLOCKS: usize = BYTES / BLOCK_LEN;
/// 32-bit words of a block, and of the compression state.
const WORDS: usize = 16;
/// Words of a chaining value (and of a key).
const CV_WORDS: usize = 8;
/// BLAKE3's rounds per compression.
const ROUNDS: usize = 7;

// BLAKE3's domain flags (the specification, section 2.1).
const CHUNK_START: u32 = 1 << 0;
const CHUNK_END: u32 = 1 << 1;
const ROOT: u32 = 1 << 3;
const DERIVE_KEY_MATERIAL: u32 = 1 << 6;

/// BLAKE3's initialisation vector (SHA-256's).
const IV: [u32; CV_WORDS] = [
    0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19,
];

/// The order of the message words in the next round.
const MSG_PERMUTATION: [usize; WORDS] = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];

/// The key of `derive_key` mode for [`domain::STATE_ENTRY`] as little-endian words: what
/// `blake3::hazmat::hash_derive_key_context` returns for that context. Written out because it
/// is a constant of the format (a `static` computed at first use would be the alternative); a
/// test recomputes it, so a new context cannot leave it stale.
const STATE_ENTRY_KEY: [u32; CV_WORDS] = [
    0x1d7ab05e, 0x552ac568, 0x9e65859e, 0x91b2e767, 0x39394065, 0x2b163e3f, 0x6dfe0adf, 0x9e172190,
];

/// Which implementation computes an expansion. Every one gives the same bytes; they differ in
/// speed and in which CPUs can run them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expander {
    /// The `blake3` crate's XOF, for every element: the reference.
    Blake3,
    /// Lane-parallel compressions in portable code, 4 lanes (SSE2 on x86_64, NEON on aarch64).
    Portable,
    /// The same code compiled for AVX2, 8 lanes.
    Avx2,
}

impl Expander {
    /// Every implementation.
    pub const ALL: [Expander; 3] = [Expander::Blake3, Expander::Portable, Expander::Avx2];

    /// Whether this CPU can run it. The standard library caches the CPU's features, so this is
    /// a load and a test.
    pub fn is_available(self) -> bool {
        match self {
            Expander::Blake3 | Expander::Portable => true,
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Expander::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
            Expander::Avx2 => false,
        }
    }

    /// The fastest implementation this CPU runs: what [`super::expand`] uses. With AVX-512
    /// (F and VL, as the `blake3` crate requires) that crate's batched XOF, measured faster
    /// than this module's code; else the AVX2 copy; else the portable code, which beats the
    /// crate's one-block-at-a-time XOF on SSE4.1 and on ARM (BENCHMARKS.md, "Replay").
    pub fn detected() -> Expander {
        if x86_avx512() {
            Expander::Blake3
        } else if Expander::Avx2.is_available() {
            Expander::Avx2
        } else {
            Expander::Portable
        }
    }

    /// Expands `element` into `out` in the state-entry domain. An implementation this CPU
    /// cannot run gives way to the portable one (same bytes), so any value is safe to pass.
    pub fn expand(self, element: &[u8], out: &mut [u8; BYTES]) {
        let root = match self {
            Expander::Blake3 => None,
            _ => Root::of(element),
        };
        let Some(root) = root else {
            let mut h = hasher(domain::STATE_ENTRY);
            h.update(element);
            h.finalize_xof().fill(out);
            return;
        };
        match self {
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Expander::Avx2 if self.is_available() => {
                // SAFETY: `root_blocks_avx2` is compiled for AVX2, and `is_available` has just
                // checked that this CPU has it.
                unsafe { root_blocks_avx2(&root, out) }
            }
            _ => root_blocks(&root, out),
        }
    }
}

/// What the output compressions of a single-chunk element share: the chaining value before its
/// last block, that block's message schedule, its length and the flags.
struct Root {
    cv: [u32; CV_WORDS],
    schedule: Schedule,
    block_len: u32,
    flags: u32,
}

impl Root {
    /// The root of `element` hashed in derive-key mode under the state-entry key, or `None` if
    /// the element is longer than one chunk.
    fn of(element: &[u8]) -> Option<Root> {
        if element.len() > CHUNK_LEN {
            return None;
        }
        let mut cv = STATE_ENTRY_KEY;
        let mut start = CHUNK_START;
        // The last block may be partial (or empty, for an empty element): it is the one the
        // output compressions repeat, so it is kept out of the chaining.
        let mut blocks = element.chunks(BLOCK_LEN);
        let last = blocks.next_back().unwrap_or(&[]);
        for block in blocks {
            let v = compress(
                &cv,
                &schedule(&words(block)),
                0,
                BLOCK_LEN as u32,
                DERIVE_KEY_MATERIAL | start,
            );
            cv = std::array::from_fn(|w| v[w]);
            start = 0;
        }
        Some(Root {
            cv,
            schedule: schedule(&words(last)),
            block_len: last.len() as u32,
            flags: DERIVE_KEY_MATERIAL | start | CHUNK_END | ROOT,
        })
    }
}

/// A block of at most [`BLOCK_LEN`] bytes as little-endian words, zero-padded.
fn words(block: &[u8]) -> [u32; WORDS] {
    let mut bytes = [0u8; BLOCK_LEN];
    bytes[..block.len()].copy_from_slice(block);
    let (words, _) = bytes.as_chunks::<4>();
    std::array::from_fn(|w| u32::from_le_bytes(words[w]))
}

/// BLAKE3's quarter-round on words `a`, `b`, `c`, `d` of the state, mixing in message words
/// `x` and `y`.
#[inline(always)]
fn g(v: &mut [u32; WORDS], [a, b, c, d]: [usize; 4], x: u32, y: u32) {
    v[a] = v[a].wrapping_add(v[b]).wrapping_add(x);
    v[d] = (v[d] ^ v[a]).rotate_right(16);
    v[c] = v[c].wrapping_add(v[d]);
    v[b] = (v[b] ^ v[c]).rotate_right(12);
    v[a] = v[a].wrapping_add(v[b]).wrapping_add(y);
    v[d] = (v[d] ^ v[a]).rotate_right(8);
    v[c] = v[c].wrapping_add(v[d]);
    v[b] = (v[b] ^ v[c]).rotate_right(7);
}

/// The message words of each round: the block's words, permuted once more for each round after
/// the first. Computed once per block, so the rounds index constants instead of shuffling.
type Schedule = [[u32; WORDS]; ROUNDS];

fn schedule(block: &[u32; WORDS]) -> Schedule {
    let mut s = [*block; ROUNDS];
    for r in 1..ROUNDS {
        s[r] = std::array::from_fn(|w| s[r - 1][MSG_PERMUTATION[w]]);
    }
    s
}

/// One round: the quarter-round on the columns, then on the diagonals.
#[inline(always)]
fn round(v: &mut [u32; WORDS], m: &[u32; WORDS]) {
    g(v, [0, 4, 8, 12], m[0], m[1]);
    g(v, [1, 5, 9, 13], m[2], m[3]);
    g(v, [2, 6, 10, 14], m[4], m[5]);
    g(v, [3, 7, 11, 15], m[6], m[7]);
    g(v, [0, 5, 10, 15], m[8], m[9]);
    g(v, [1, 6, 11, 12], m[10], m[11]);
    g(v, [2, 7, 8, 13], m[12], m[13]);
    g(v, [3, 4, 9, 14], m[14], m[15]);
}

/// BLAKE3's compression of a block (given by its [`Schedule`]) under `cv`, with a counter below
/// 2^32 (the high word is 0). Returns the 16 output words, the first 8 being the next chaining
/// value. Inlined into each caller so that the AVX2 copy compiles it with its own instructions.
#[inline(always)]
fn compress(
    cv: &[u32; CV_WORDS],
    m: &Schedule,
    counter: u32,
    block_len: u32,
    flags: u32,
) -> [u32; WORDS] {
    let mut v = [
        cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7], IV[0], IV[1], IV[2], IV[3],
        counter, 0, block_len, flags,
    ];
    // Unrolled by hand: a loop over the rounds is not always unrolled, and then the message
    // words are indexed at run time.
    round(&mut v, &m[0]);
    round(&mut v, &m[1]);
    round(&mut v, &m[2]);
    round(&mut v, &m[3]);
    round(&mut v, &m[4]);
    round(&mut v, &m[5]);
    round(&mut v, &m[6]);
    for w in 0..CV_WORDS {
        v[w] ^= v[CV_WORDS + w];
        v[CV_WORDS + w] ^= cv[w];
    }
    v
}

/// The 32 output blocks of `root` into `out`. The compressions differ only in their counter and
/// do not depend on each other, so the loop over them is what the compiler vectorises: each
/// state word becomes a vector holding that word of 4 (SSE2, NEON) or 8 (AVX2) blocks.
/// The results are kept word-major (`words[w][block]`, contiguous vector stores) and
/// transposed to the output's block-major order afterwards.
#[inline(always)]
fn root_blocks(root: &Root, out: &mut [u8; BYTES]) {
    let mut words = [[0u32; OUT_BLOCKS]; WORDS];
    for block in 0..OUT_BLOCKS {
        let v = compress(
            &root.cv,
            &root.schedule,
            block as u32,
            root.block_len,
            root.flags,
        );
        for (word, v) in words.iter_mut().zip(v) {
            word[block] = v;
        }
    }
    let (out_blocks, _) = out.as_chunks_mut::<BLOCK_LEN>();
    for (block, out_block) in out_blocks.iter_mut().enumerate() {
        let (out_words, _) = out_block.as_chunks_mut::<4>();
        for (w, out_word) in out_words.iter_mut().enumerate() {
            *out_word = words[w][block].to_le_bytes();
        }
    }
}

/// Whether the `blake3` crate batches its XOF on this CPU (it checks the same two features).
fn x86_avx512() -> bool {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        false
    }
}

/// [`root_blocks`] compiled for AVX2: 8 blocks per 256-bit register.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx2")]
fn root_blocks_avx2(root: &Root, out: &mut [u8; BYTES]) {
    root_blocks(root, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_entry_key_is_the_derive_key_context_of_its_domain() {
        let key = blake3::hazmat::hash_derive_key_context(domain::STATE_ENTRY);
        let (words, _) = key.as_chunks::<4>();
        let words: Vec<u32> = words.iter().map(|w| u32::from_le_bytes(*w)).collect();
        assert_eq!(words, STATE_ENTRY_KEY);
    }

    #[test]
    fn every_path_matches_the_blake3_xof_at_the_block_and_chunk_boundaries() {
        let lens = [
            0, 1, 63, 64, 65, 127, 128, 129, 1023, 1024, 1025, 2048, 3000,
        ];
        for len in lens {
            let element: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let mut want = [0u8; BYTES];
            Expander::Blake3.expand(&element, &mut want);
            for x in Expander::ALL {
                let mut got = [0u8; BYTES];
                x.expand(&element, &mut got);
                assert!(got == want, "{x:?} differs at length {len}");
            }
        }
    }
}
