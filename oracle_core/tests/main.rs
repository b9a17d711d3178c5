//! The log format's integration tests, as one test binary (`format`): each file beside this one is a
//! module, run by name (`cargo nextest run -p oracle_core diff::`). One binary links once where
//! 7 linked 7 times; `oracle_core/Cargo.toml` turns off cargo's discovery of one binary
//! per file, and oracle_cli's tidy test fails on a file left out here.

mod common;

mod diff;
mod fast_path;
mod golden;
mod properties;
mod survivors;
mod survivors_core;
mod survivors_verify;
