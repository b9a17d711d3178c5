//! The plan language: a small text DSL for agent programs, parsed with diagnostics a person can
//! act on, compiled against a tool catalogue into a DAG with a deterministic order and a plan
//! hash, and evaluated purely. Depends only on `oracle_core`; no IO.

pub mod agent;
pub mod ast;
pub mod catalogue;
pub mod compile;
pub mod diagnostic;
pub mod eval;
pub mod fmt;
pub mod graph;
pub mod lexer;
pub mod parser;
pub mod print;
mod saved;

pub use catalogue::{ArgSpec, ArgType, Catalogue, ScopeFrom, ToolSchemas, ToolSpec};

/// Largest plan text read, in bytes (a file by the runtime, an open document by `oracle lsp`).
/// A plan this large already holds about a million steps; bigger ones are refused before any
/// is read into memory or parsed.
pub const PLAN_BYTES_MAX: u64 = 32 << 20;
pub use compile::{
    CompiledPlan, CompiledStep, Sources, check, check_with, compile, tools_of, uses_of,
};
pub use diagnostic::{Diagnostic, Severity};
pub use parser::parse;
