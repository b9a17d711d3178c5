//! A tiny seeded generator (SplitMix64): the same seed gives the same numbers on every machine.
//! Used for synthetic logs and a run's `random.int`; never seeded from the environment.

use crate::hash::{domain, hasher};

/// The generator of one `random.int` call: seeded from the BLAKE3 hash, in the
/// `oracle v1 random` domain, of `seed` (u64 big-endian) ‖ the length of `step` (u64
/// big-endian) ‖ the bytes of `step` ‖ `attempt` (u64 big-endian), read as a big-endian u64
/// from the first 8 bytes of the digest.
///
/// A function of what the log records (the run's seed, the step, the attempt), so replay draws
/// the same numbers without recording them; a retry (the next attempt) draws fresh ones. The
/// length prefix keeps `step` from running into `attempt`.
pub fn for_call(seed: u64, step: &str, attempt: u64) -> SplitMix64 {
    let mut h = hasher(domain::RANDOM);
    h.update(&seed.to_be_bytes());
    h.update(&(step.len() as u64).to_be_bytes());
    h.update(step.as_bytes());
    h.update(&attempt.to_be_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_bytes()[..8]);
    SplitMix64::new(u64::from_be_bytes(first))
}

/// SplitMix64 (Steele, Lea, Flood 2014). Not cryptographic; fast, small, and fully specified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (`bound` > 0), by rejection so no value is favoured.
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound <= 1 {
            return 0;
        }
        let zone = u64::MAX - (u64::MAX % bound);
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % bound;
            }
        }
    }

    /// Uniform in `min..=max`, over the whole `i64` range; `None` if `min > max`.
    pub fn int_in(&mut self, min: i64, max: i64) -> Option<i64> {
        if min > max {
            return None;
        }
        // The width fits in u64 even for i64::MIN..=i64::MAX; computed in i128 so it cannot
        // overflow, and the sum lands back in min..=max, so the final cast is exact.
        let width = (i128::from(max) - i128::from(min)) as u64;
        let offset = match width.checked_add(1) {
            Some(bound) => self.below(bound),
            // Every u64 is a valid offset: the whole range.
            None => self.next_u64(),
        };
        Some((i128::from(min) + i128::from(offset)) as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_is_pinned() {
        // Reference values of SplitMix64 for seed 0; a change here changes every synthetic log.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn for_call_is_pinned_and_separates_its_inputs() {
        // A change here changes every recorded `random.int` output: replay would diverge.
        let first = for_call(42, "roll", 1).next_u64();
        assert_eq!(first, 0x03f4_6de0_5c13_3fc2);
        assert_eq!(for_call(42, "roll", 1).next_u64(), first);
        assert_ne!(for_call(43, "roll", 1).next_u64(), first);
        assert_ne!(for_call(42, "roll", 2).next_u64(), first);
        assert_ne!(for_call(42, "rol", 1).next_u64(), first);
        assert_ne!(for_call(42, "roll1", 0).next_u64(), first);
        // And the draw from it (`random.int {min: 1, max: 6}`).
        assert_eq!(for_call(42, "roll", 1).int_in(1, 6), Some(1));
    }

    #[test]
    fn int_in_stays_in_range_over_the_whole_i64_range() {
        let mut r = SplitMix64::new(7);
        for (min, max) in [
            (0, 0),
            (-3, 3),
            (i64::MIN, i64::MAX),
            (i64::MIN, i64::MIN + 1),
            (i64::MAX - 1, i64::MAX),
            (i64::MIN, 0),
            (-1, i64::MAX),
        ] {
            for _ in 0..200 {
                let x = r.int_in(min, max).unwrap();
                assert!((min..=max).contains(&x), "{x} outside {min}..={max}");
            }
        }
        assert_eq!(r.int_in(1, 0), None);
        let mut seen = [false; 7];
        for _ in 0..500 {
            seen[(r.int_in(-3, 3).unwrap() + 3) as usize] = true;
        }
        assert!(
            seen.iter().all(|&s| s),
            "every value of a small range comes up"
        );
    }
}
