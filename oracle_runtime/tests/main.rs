//! The runtime's integration tests, as one test binary (`runtime`): each file beside this one is a
//! module, run by name (`cargo nextest run -p oracle_runtime causal::`). One binary links once where
//! 18 linked 18 times; `oracle_runtime/Cargo.toml` turns off cargo's discovery of one binary
//! per file, and oracle_cli's tidy test fails on a file left out here.

mod causal;
mod durability;
mod engine;
mod fixtures;
mod index;
mod loops;
mod mcp;
mod oracle;
mod outside_time;
mod power_loss;
mod process_agent;
mod programs;
mod resume_point;
mod store;
mod store_record;
mod store_seal;
mod tools;
mod writer_limits;
mod writer_props;
