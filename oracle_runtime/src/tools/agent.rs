//! `agent`: the declaration of an agent step, which the plan agent runs as a loop of `llm.chat`
//! turns and the tool calls the model asks for (`oracle_plan::agent`). Registered so plans are
//! checked against it like any step (arguments, the `llm:chat:<model>` grant, output fields);
//! never called itself.

use serde_json::{Value, json};

use super::{any, decl, needs_arg, object, string};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// The name plans use: `s = agent { model: "m", instructions: "...", tools: [...] }`.
pub const NAME: &str = oracle_plan::agent::AGENT_TOOL;

pub struct Agent;

impl Tool for Agent {
    fn decl(&self) -> ToolDecl {
        decl(
            NAME,
            "A model that acts: each turn is an llm.chat call offered `tools`; the tool calls it asks for are checked against the grants, run and fed back, until it answers without calling (validated against `output`) or max_turns is reached. Needs llm:chat:<model>.",
            // Pure: no call of this tool ever reaches the runtime (the plan agent issues the
            // turns and tool calls instead).
            Effect::Pure,
            object(
                &[
                    ("model", string()),
                    ("instructions", string()),
                    ("task", any()),
                    (
                        "tools",
                        json!({"type": "array", "items": {"type": "string"}}),
                    ),
                    (
                        "max_turns",
                        json!({"type": "integer", "minimum": 1, "maximum": oracle_plan::agent::TURNS_MAX}),
                    ),
                    ("output", json!({"type": "object"})),
                ],
                &["model", "instructions", "task", "tools"],
            ),
            object(
                &[
                    ("content", string()),
                    ("parsed", any()),
                    ("finish_reason", string()),
                    ("usage", any()),
                    ("model", string()),
                ],
                &["content", "finish_reason", "usage", "model"],
            ),
            needs_arg("llm", "chat", "model"),
        )
    }

    fn call(&self, _: &Value, _: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed(
            "an agent step is run by the plan agent as llm.chat turns; `agent` itself is never called".into(),
        ))
    }
}
