//! Helpers the workspace's tests share, so each is written once: the smallest `run_started` a
//! log can begin with, strategies for JSON values without floats and for small payloads, and
//! a few file and shuffling chores. A dev-dependency only: no library crate depends on it
//! (tidy keeps it so). Helpers that run the `oracle` binary live in `oracle_cli/tests/common`,
//! the one place where `CARGO_BIN_EXE_oracle` is known.

mod events;
mod files;
mod json;

pub use events::{minimal_run_started, run_started, small_payload};
pub use files::{copy_dir, file_names};
pub use json::{JsonShape, json, small_json};

use oracle_core::rng::SplitMix64;

/// Shuffles `items` in place (Fisher–Yates) with draws from `rng`: the same generator state
/// gives the same order on every machine, so a test that varies an order reproduces from its
/// seed.
pub fn shuffle<T>(rng: &mut SplitMix64, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffle_is_a_permutation_fixed_by_the_seed() {
        let order = |seed| {
            let mut v: Vec<u32> = (0..50).collect();
            shuffle(&mut SplitMix64::new(seed), &mut v);
            v
        };
        let mut sorted = order(7);
        assert_eq!(order(7), sorted);
        assert_ne!(order(7), order(8));
        sorted.sort();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    }
}
