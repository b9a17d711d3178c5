//! The command line's end-to-end tests, as one test binary (`cli`): each file beside this one
//! is a module, run by name (`cargo nextest run -p oracle_cli serve_store::`). One binary links
//! once where 56 linked 56 times, which was most of a cold test build; `oracle_cli/Cargo.toml`
//! turns off cargo's discovery of one binary per file, and `tidy.rs`'s
//! `every_test_file_is_a_module_of_the_one_test_binary` fails on a file left out here.

mod child;
mod common;
mod web;

mod adjudication_deadline;
mod agent;
mod auction;
mod belief_deadline;
mod bindings;
mod bounds;
mod browser;
mod cancel;
mod checkpoint;
mod cli;
mod code_agent;
mod code_agent_fork;
mod code_agent_store;
mod concurrency;
mod config;
mod config_trust;
mod conventions;
mod crash;
mod demand;
mod diff;
mod events;
mod evolve;
mod evolve_api;
mod exactly_once;
mod fork;
mod format_v1;
mod format_v2;
mod fuzz_corpus;
mod hostile;
mod integrity;
mod json_contract;
mod llm;
mod logical_time;
mod loops;
mod lsp;
mod mcp;
mod memory;
mod memory_external;
mod net;
mod observe;
mod pipes;
mod plans;
mod programs;
mod queues;
mod rates;
mod readme;
mod recover;
mod report;
mod resume_points;
mod retry_policy;
mod run;
mod schedules;
mod serve;
mod serve_store;
mod shared_memory;
mod shared_store_pg;
mod spawn;
mod store;
mod store_checkpoint;
mod stream;
mod subplans;
mod tidy;
mod timers;
mod tools;
mod transfer;
