//! The plan language: a small text DSL for agent programs, parsed with diagnostics a person can
//! act on, compiled against a tool catalogue into a DAG with a deterministic order and a plan
//! hash, and evaluated purely. Depends only on `oracle_core`; no IO.

pub mod agent;
pub mod ast;
pub mod bindings;
pub mod catalogue;
pub mod compile;
pub mod diagnostic;
pub mod eval;
pub mod graph;
pub mod lexer;
pub mod parser;
pub mod print;
mod saved;
pub mod types;

pub use catalogue::{ArgSpec, ArgType, Catalogue, ScopeFrom, ToolSpec};
pub use compile::{
    CompiledPlan, CompiledStep, Sources, check, check_with, compile, tools_of, uses_of,
};
pub use diagnostic::{Diagnostic, Severity};
pub use parser::parse;
