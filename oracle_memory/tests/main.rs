//! The belief store's integration tests, as one test binary (`memory`): each file beside this one is a
//! module, run by name (`cargo nextest run -p oracle_memory model::`). One binary links once where
//! 4 linked 4 times; `oracle_memory/Cargo.toml` turns off cargo's discovery of one binary
//! per file, and oracle_cli's tidy test fails on a file left out here.

mod common;

mod model;
mod properties;
mod scenarios;
mod sections;
