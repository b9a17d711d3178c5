//! The bodies of oracle's fuzz targets, and their seed corpora (docs/TESTING.md).
//!
//! Each target is a function from arbitrary bytes that panics exactly when a property of the
//! code under test fails. The libFuzzer binaries in `fuzz_targets/` are one line each, calling
//! these; the main workspace includes this file too (`oracle_cli/tests/fuzz_corpus.rs`) and runs
//! every target over its seed corpus and crash regressions, so CI checks the same properties
//! without cargo-fuzz. Modules refer to each other through `super::` so that both can.

pub mod canon;
pub mod capability;
pub mod log;
pub mod plan;
pub mod seeds;

/// A target's body: panics exactly when a property fails on the input.
pub type Body = fn(&[u8]);

/// Every target: its name (the binary, the corpus and regressions directories) and its body.
pub const TARGETS: [(&str, Body); 4] = [
    ("log", log::check),
    ("plan", plan::check),
    ("capability", capability::check),
    ("canon", canon::check),
];
