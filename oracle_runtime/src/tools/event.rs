//! `wait.event`: suspends the run until an outside event of a name is sent to it (`oracle
//! signal`, the API, the Python client). The event's value is recorded as the step's answer
//! when the run consumes it (`crate::events`), so a replay never needs the event again.

use serde_json::{Value, json};

use super::{any, arg_str, decl, object, string};
use crate::schema::Schema;
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// The tool name of an event wait: the engine and the host recognise one by it.
pub const WAIT_EVENT_TOOL: &str = "wait.event";

/// The reason a run waiting on event `name` is suspended with.
pub fn wait_reason(name: &str) -> String {
    format!("waits on event `{name}`")
}

/// `wait.event {name, schema?, deadline?, on_timeout?}` → `{value}`, the event's value, once
/// one is sent. `schema`, when given, is the JSON Schema a sent value must meet (checked when it is
/// sent, before it is kept); `deadline` races the event as a `human.ask`'s deadline races its
/// answer, and `on_timeout` is the output when the deadline wins.
pub struct WaitEvent;

impl Tool for WaitEvent {
    fn decl(&self) -> ToolDecl {
        decl(
            WAIT_EVENT_TOOL,
            "Suspend the run until an outside event of this name is sent to it: {value}.",
            Effect::Ask,
            object(
                &[
                    ("name", string()),
                    ("schema", json!({"type": "object"})),
                    (super::time::DEADLINE_ARG, super::time_text()),
                    (super::time::ON_TIMEOUT_ARG, any()),
                ],
                &["name"],
            ),
            object(&[("value", any())], &["value"]),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let name = arg_str(input, "name")?;
        crate::events::check_name(name).map_err(|e| ToolError::Failed(e.to_string()))?;
        if let Some(schema) = input.get("schema") {
            if !schema.is_object() {
                return Err(ToolError::Failed(
                    "argument `schema` must be a JSON Schema object".to_owned(),
                ));
            }
            Schema::compile(schema).map_err(|e| ToolError::Failed(format!("`schema`: {e}")))?;
        }
        if input.get(super::time::DEADLINE_ARG).is_some() {
            super::time::deadline_ms(input, 0).map_err(|e| ToolError::Failed(e.to_string()))?;
        }
        Err(ToolError::Ask(wait_reason(name)))
    }
}
