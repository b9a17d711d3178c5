//! `human.ask`: the one tool that needs a person. Calling it never produces an output; it
//! returns the question, the run suspends, and `oracle resume` supplies the answer later.

use serde_json::{Value, json};

use super::{any, arg_str, decl, object, string};
use crate::schema::Schema;
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// `human.ask {question, schema?}` → `{answer}` once answered. `schema`, when given, is the JSON
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
        Err(ToolError::Ask(question.to_owned()))
    }
}
