//! `spawn`: starts a child run of another plan (docs/PLAN.md, "Child runs"). The call itself
//! only asks: the run suspends on it as on a `wait.event`, and the host (never the engine, which
//! names no run but its own) starts the child, drives it, and records the child's outcome as the
//! step's answer. A replay reads that answer from the log and starts nothing.

use serde_json::{Value, json};

use super::{any, arg_str, boolean, decl, object, string};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};
use oracle_core::agent::Outcome;

/// The tool name of a child run's step: the engine and the host recognise one by it.
pub const SPAWN_TOOL: &str = "spawn";

/// The start of the reason a run waiting on its child is suspended with.
pub const SPAWN_REASON_PREFIX: &str = "spawns a child run of ";

/// The status a child's answer gives when the child completed (its `outputs` are given).
pub const COMPLETED: &str = "completed";

/// The status a detached child's answer gives: the step goes on without the outcome.
pub const DETACHED: &str = "detached";

/// The reason a run spawning a child of plan `plan` is suspended with.
pub fn spawn_reason(plan: &str) -> String {
    format!("{SPAWN_REASON_PREFIX}`{plan}`")
}

/// `spawn {plan, inputs?, key?, detach?}` → `{run, status, outputs?}`: `run` is the child's id,
/// `status` `completed` (with the child's step `outputs`) or `detached`. A child that failed or
/// was cancelled fails the step ([`outcome`]).
pub struct Spawn;

impl Tool for Spawn {
    fn decl(&self) -> ToolDecl {
        decl(
            SPAWN_TOOL,
            "Start a child run of another plan and wait for its outcome: {run, status, outputs}.",
            Effect::Ask,
            object(
                &[
                    ("plan", string()),
                    ("inputs", json!({"type": "object"})),
                    ("key", string()),
                    ("detach", boolean()),
                ],
                &["plan"],
            ),
            object(
                &[
                    ("run", string()),
                    ("status", string()),
                    ("outputs", any()),
                    ("reason", string()),
                ],
                &["run", "status"],
            ),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let plan = arg_str(input, "plan")?;
        if plan.is_empty() || plan.starts_with('/') || plan.split('/').any(|c| c == "..") {
            return Err(ToolError::Failed(format!(
                "`{plan}`: a child plan's path is relative and stays below the plan's directory"
            )));
        }
        if let Some(key) = input.get("key") {
            let key = key
                .as_str()
                .ok_or_else(|| ToolError::Failed("argument `key` must be a string".to_owned()))?;
            crate::keys::check_key(key).map_err(|e| ToolError::Failed(format!("`key`: {e}")))?;
        }
        Err(ToolError::Ask(spawn_reason(plan)))
    }
}

/// What the answer a `spawn` step was given means for the step: a completed or detached child
/// is the step's output, any other status (`failed`, `cancelled`) the step's failure, naming
/// the child.
pub fn outcome(value: Value) -> Outcome {
    let status = value.get("status").and_then(Value::as_str).unwrap_or("");
    if status == COMPLETED || status == DETACHED {
        return Outcome::Answered(value);
    }
    let reason = value.get("reason").and_then(Value::as_str).unwrap_or("");
    match value.get("run").and_then(Value::as_str) {
        // No child was started (a bound reached, a plan that would not start): why.
        Some("") | None => Outcome::Failed(reason.to_owned()),
        Some(run) => Outcome::Failed(format!("child run `{run}` {status}: {reason}")),
    }
}
