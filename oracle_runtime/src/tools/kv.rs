//! The run's key-value store: `kv.get` reads a key of the run's state under `kv/`, `kv.set`
//! asks the engine to write one. Both are pure: the state is part of the call's context and the
//! write is recorded as a state change, so replay recomputes both.

use serde_json::{Value, json};

use super::{any, arg_str, boolean, decl, needs_arg, object, string};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// Where key `key` lives in the run's state.
pub fn state_key(key: &str) -> String {
    format!("kv/{key}")
}

/// `kv.get {key}` → `{found, value}`; `value` is `null` when the key is absent (and `found`
/// tells that apart from a stored `null`). Needs `kv:get:<key>`.
pub struct Get;

impl Tool for Get {
    fn decl(&self) -> ToolDecl {
        decl(
            "kv.get",
            "Read a key of the run's state: {value}.",
            Effect::Pure,
            object(&[("key", string())], &["key"]),
            object(
                &[("found", boolean()), ("value", any())],
                &["found", "value"],
            ),
            needs_arg("kv", "get", "key"),
        )
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let key = arg_str(input, "key")?;
        Ok(ToolOutput::of(match cx.state.get(&state_key(key)) {
            Some(value) => json!({"found": true, "value": value}),
            None => json!({"found": false, "value": null}),
        }))
    }
}

/// `kv.set {key, value}` → `{}`, with the write in [`ToolOutput::writes`]; the engine records it
/// under `kv/<key>`. Needs `kv:set:<key>`.
pub struct Set;

impl Tool for Set {
    fn decl(&self) -> ToolDecl {
        decl(
            "kv.set",
            "Write a key of the run's state.",
            Effect::Pure,
            object(&[("key", string()), ("value", any())], &["key", "value"]),
            object(&[], &[]),
            needs_arg("kv", "set", "key"),
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let key = arg_str(input, "key")?;
        let value = input
            .get("value")
            .ok_or_else(|| ToolError::Failed("argument `value` is missing".to_owned()))?;
        let mut out = ToolOutput::of(json!({}));
        out.writes.insert(key.to_owned(), value.clone());
        Ok(out)
    }
}
