//! Time and chance without the world: `clock.now` is the run's logical time and `random.int`
//! draws from the run's recorded seed. Neither reads a clock or the operating system's
//! randomness, so both are pure and replay recomputes them.

use oracle_core::rng;
use serde_json::{Value, json};

use super::{arg_i64, count, decl, integer, object};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// `clock.now {}` → `{tick}`: the `time` of the call's events. Never the wall clock, which
/// would make every run different.
pub struct Now;

impl Tool for Now {
    fn decl(&self) -> ToolDecl {
        decl(
            "clock.now",
            "The run's logical time (never the wall clock): {tick}.",
            Effect::Pure,
            object(&[], &[]),
            object(&[("tick", count())], &["tick"]),
            None,
        )
    }

    fn call(&self, _input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::of(json!({"tick": cx.tick})))
    }
}

/// `random.int {min, max}` → `{value}`, uniform in `[min, max]` (both included, any `i64`s).
/// Drawn from [`rng::for_call`] of the run's seed, the step and the attempt: the same call
/// gives the same number on replay, and a retry gives a fresh one.
pub struct RandomInt;

impl Tool for RandomInt {
    fn decl(&self) -> ToolDecl {
        decl(
            "random.int",
            "A random integer in [min, max] from the run's recorded seed: {value}.",
            Effect::Pure,
            object(&[("min", integer()), ("max", integer())], &["min", "max"]),
            object(&[("value", integer())], &["value"]),
            None,
        )
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let min = arg_i64(input, "min")?;
        let max = arg_i64(input, "max")?;
        match rng::for_call(cx.seed, cx.step, cx.attempt).int_in(min, max) {
            Some(value) => Ok(ToolOutput::of(json!({"value": value}))),
            None => Err(ToolError::Failed(format!(
                "`min` ({min}) is greater than `max` ({max})"
            ))),
        }
    }
}
