//! `human.ask`: the one tool that needs a person. Calling it never produces an output; it
//! returns the question, the run suspends, and `oracle resume` supplies the answer later.

use serde_json::{Value, json};

use super::{any, arg_str, decl, object, string};
use crate::schema::Schema;
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// `human.ask {question, schema?, deadline?, on_timeout?}` → `{answer}` once answered. With a
/// `deadline` (a duration or an instant) the engine records a timer beside the question: an
/// answer or the deadline, whichever is recorded first, decides the step. `schema`, when given, is the JSON
/// Schema the answer must meet; it is compiled here so a broken schema fails the call now
/// rather than after someone has answered.
pub struct Ask;

impl Tool for Ask {
    fn decl(&self) -> ToolDecl {
        decl(
            "human.ask",
            "Suspend the run until a person answers: {answer}.",
            Effect::Ask,
            object(
                &[
                    ("question", string()),
                    ("schema", json!({"type": "object"})),
                    (super::time::DEADLINE_ARG, super::time_text()),
                    (super::time::ON_TIMEOUT_ARG, any()),
                ],
                &["question"],
            ),
            object(&[("answer", any())], &["answer"]),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let question = arg_str(input, "question")?;
        if let Some(schema) = input.get("schema") {
            if !schema.is_object() {
                return Err(ToolError::Failed(
                    "argument `schema` must be a JSON Schema object".to_owned(),
                ));
            }
            Schema::compile(schema).map_err(|e| ToolError::Failed(format!("`schema`: {e}")))?;
        }
        // A deadline that does not parse fails the call now, not when it would be due.
        if input.get(super::time::DEADLINE_ARG).is_some() {
            super::time::deadline_ms(input, 0).map_err(|e| ToolError::Failed(e.to_string()))?;
        }
        Err(ToolError::Ask(question.to_owned()))
    }
}
