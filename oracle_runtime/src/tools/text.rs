//! Text tools: counting, splitting and searching strings. Pure, and bounded by the size of
//! their input, so none of them needs a timeout.

use serde_json::{Value, json};

use super::{arg_str, boolean, count, decl, object, string, strings};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// `text.count {text}` → `{words, lines, chars}`: whitespace-separated words, lines as
/// `str::lines` counts them (a final line without a newline counts; a trailing newline does not
/// start another), and Unicode scalar values.
pub struct Count;

impl Tool for Count {
    fn decl(&self) -> ToolDecl {
        decl(
            "text.count",
            "Count words, lines and characters: {words, lines, chars}.",
            Effect::Pure,
            object(&[("text", string())], &["text"]),
            object(
                &[("words", count()), ("lines", count()), ("chars", count())],
                &["words", "lines", "chars"],
            ),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let text = arg_str(input, "text")?;
        Ok(ToolOutput::of(json!({
            "words": text.split_whitespace().count() as u64,
            "lines": text.lines().count() as u64,
            "chars": text.chars().count() as u64,
        })))
    }
}

/// `text.lines {text}` → `{lines}`: split as `str::lines` does (`\n` or `\r\n`, no empty last
/// line for a trailing newline).
pub struct Lines;

impl Tool for Lines {
    fn decl(&self) -> ToolDecl {
        decl(
            "text.lines",
            "Split text into lines: {lines}.",
            Effect::Pure,
            object(&[("text", string())], &["text"]),
            object(&[("lines", strings())], &["lines"]),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let text = arg_str(input, "text")?;
        Ok(ToolOutput::of(
            json!({"lines": text.lines().collect::<Vec<_>>()}),
        ))
    }
}

/// `text.contains {text, pattern}` → `{found}`: a plain substring test (no patterns).
pub struct Contains;

impl Tool for Contains {
    fn decl(&self) -> ToolDecl {
        decl(
            "text.contains",
            "Whether text contains a substring: {found}.",
            Effect::Pure,
            object(
                &[("text", string()), ("pattern", string())],
                &["text", "pattern"],
            ),
            object(&[("found", boolean())], &["found"]),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let text = arg_str(input, "text")?;
        let pattern = arg_str(input, "pattern")?;
        Ok(ToolOutput::of(json!({"found": text.contains(pattern)})))
    }
}

/// `text.split {text, separator}` → `{parts}`: every occurrence splits, so `n` separators give
/// `n + 1` parts (empty ones included). An empty separator is refused: it has no one obvious
/// meaning.
pub struct Split;

impl Tool for Split {
    fn decl(&self) -> ToolDecl {
        decl(
            "text.split",
            "Split text on a separator: {parts}.",
            Effect::Pure,
            object(
                &[("text", string()), ("separator", string())],
                &["text", "separator"],
            ),
            object(&[("parts", strings())], &["parts"]),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let text = arg_str(input, "text")?;
        let separator = arg_str(input, "separator")?;
        if separator.is_empty() {
            return Err(ToolError::Failed(
                "`separator` is empty; give at least one character to split on".to_owned(),
            ));
        }
        Ok(ToolOutput::of(
            json!({"parts": text.split(separator).collect::<Vec<_>>()}),
        ))
    }
}
