//! The plan language: a small text DSL for agent programs, parsed with diagnostics a person can
//! act on, compiled against a tool catalogue into a DAG with a deterministic order and a plan
//! hash, and evaluated purely. Depends only on `oracle_core` (and jiff for the time grammar,
//! [`time`]); no IO, no clock.
//!
//! # Where things are
//!
//! - Text to tree: [`lexer`], [`parser`] (never panicking, every error reported, recovery at
//!   statement boundaries), [`ast`] (with byte spans), [`print`](mod@print) (the tree back to
//!   canonical text), [`diagnostic`] (problems as data; the CLI renders them).
//! - Tree to DAG: [`catalogue`] (tool specs, plain data passed in by the caller, so the
//!   compiler never depends on the runtime), [`compile`](mod@compile) (names to edges,
//!   validation against the catalogue and grants, topological order with ties by declaration
//!   order, levels, the plan hash over a canonical compiled form), [`graph`] (the step graph as
//!   data, for `oracle plan graph` and the HTML pages).
//! - Running it: [`eval`] (strictly typed expressions over JSON values) and [`agent`]:
//!   [`agent::PlanAgent`] runs a compiled plan (ready steps in plan order, at most 64 calls per
//!   decision, retries, fallback, `when`, `expect`, failure policies), writing each decision to
//!   the state under `step/<name>`. An agent step is a loop inside it: each turn an `llm.chat`
//!   call, then the tool calls the reply asks for, named `STEP@TURN.K`, their results appended
//!   to the conversation. A loop step runs its body as child agents, one per iteration, whose
//!   calls and state keys are renamed `STEP[i]`; the body is compiled as a plan of its own whose
//!   inputs are the loop variable and the outer names it reads. A sub-plan step (`use "PATH" as
//!   NAME`) is the same machinery with one child, named `STEP/…`; the compiler stays pure
//!   because the caller reads the sub-plans' sources and passes them in ([`check_with`]), and
//!   a run keeps copies under `uses/`. All of it is a pure function of the observations, so
//!   replay and resume re-derive every turn.
//!
//! The compiler's capability check and the runtime's share `oracle_core::capability`; the
//! runtime's adds what needs the file system and is stricter: the compiler may accept a literal
//! call the runtime denies, never the reverse.

pub mod agent;
pub mod ast;
pub mod bindings;
pub mod catalogue;
pub mod compile;
pub mod diagnostic;
pub mod eval;
pub mod fmt;
pub mod graph;
pub mod lexer;
mod overlap;
mod parsed;
pub mod parser;
pub mod policy;
pub mod print;
mod saved;
pub mod time;
pub mod types;

pub use catalogue::{ArgSpec, ArgType, Catalogue, ScopeFrom, ToolSchemas, ToolSpec};

/// Largest plan text read, in bytes (a file by the runtime, an open document by `oracle lsp`).
/// A plan this large already holds about a million steps; bigger ones are refused before any
/// is read into memory or parsed.
pub const PLAN_BYTES_MAX: u64 = 32 << 20;
pub use compile::{
    CompiledPlan, CompiledStep, Sources, agent_steps_of, agent_steps_with, check, check_with,
    compile, is_agent_call, memory_of, queue_of, spawns_of, tools_of, uses_of,
};
pub use diagnostic::{Diagnostic, Severity};
pub use parser::parse;
