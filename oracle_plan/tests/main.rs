//! The plan language's integration tests, as one test binary (`plan`): each file beside this one is a
//! module, run by name (`cargo nextest run -p oracle_plan agent::`). One binary links once where
//! 7 linked 7 times; `oracle_plan/Cargo.toml` turns off cargo's discovery of one binary
//! per file, and oracle_cli's tidy test fails on a file left out here.

mod common;

mod agent;
mod bounds;
mod compile;
mod fmt;
mod parse;
mod policy;
mod saved;
mod types;
