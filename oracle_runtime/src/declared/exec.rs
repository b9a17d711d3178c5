//! Declared exec tools: a program run once per call with the input as JSON on stdin and the
//! output read as JSON from stdout, through the same bounded runner as `proc.exec`.

use std::sync::Arc;

use serde_json::Value;

use super::manifest::Exec;
use crate::secrets::Secrets;
use crate::tool::{Tool, ToolContext, ToolDecl, ToolError, ToolOutput};
use crate::tools::proc::Run;

/// Bytes of a failed program's standard error kept in the recorded error (its last ones).
pub const STDERR_RECORDED_BYTES_MAX: usize = 2048;

/// A tool whose calls run a program.
pub struct ExecTool {
    pub decl: ToolDecl,
    pub exec: Exec,
    /// The run's secrets, for the variables the manifest names in `secrets`.
    pub secrets: Arc<Secrets>,
}

impl ExecTool {
    /// The program as error messages name it: its file name (never an absolute path, which
    /// differs between machines and would enter the record).
    fn shown(&self) -> String {
        self.exec.program.file_name().map_or_else(
            || "program".to_owned(),
            |n| n.to_string_lossy().into_owned(),
        )
    }
}

impl Tool for ExecTool {
    fn decl(&self) -> ToolDecl {
        self.decl.clone()
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let stdin = super::input_json(input)
            .map_err(|e| ToolError::Failed(format!("the input cannot be encoded: {e}")))?;
        let stdin = String::from_utf8(stdin).unwrap_or_default();
        let mut env: Vec<(String, String)> = self
            .exec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for name in &self.exec.secrets {
            let value = self
                .secrets
                .resolve(
                    &serde_json::json!({"$secret": name}),
                    &format!("secret `{name}`"),
                )
                .map_err(ToolError::Failed)?;
            env.push((name.clone(), value));
        }
        let program = self.exec.program.to_string_lossy();
        let args: Vec<&str> = self.exec.args.iter().map(String::as_str).collect();
        let done = Run {
            root: cx.root,
            program: &program,
            args: &args,
            env: &env,
            path: false,
            stdin: Some(&stdin),
            timeout_ms: cx.timeout_ms,
            limit: cx.output_bytes_max,
        }
        .run()
        .map_err(|e| match e {
            // The runner names the program as given (an absolute path here): name it by file.
            ToolError::Failed(m) => ToolError::Failed(m.replace(&*program, &self.shown())),
            other => other,
        })?;
        let stderr = tail(&done.stderr);
        match done.status {
            Some(0) => {}
            Some(code) => {
                return Err(ToolError::Failed(format!(
                    "`{}` exited with status {code}{stderr}",
                    self.shown()
                )));
            }
            None => {
                return Err(ToolError::Failed(format!(
                    "`{}` was ended by a signal{stderr}",
                    self.shown()
                )));
            }
        }
        match serde_json::from_slice::<Value>(&done.stdout) {
            Ok(output) => Ok(ToolOutput::of(output)),
            Err(e) => Err(ToolError::Failed(format!(
                "`{}` printed something that is not JSON on stdout ({} bytes; line {}, column {}: {}){stderr}",
                self.shown(),
                done.stdout.len(),
                e.line(),
                e.column(),
                classify(&e)
            ))),
        }
    }
}

/// serde_json's category of a parse error, in words that do not vary.
fn classify(e: &serde_json::Error) -> &'static str {
    use serde_json::error::Category;
    match e.classify() {
        Category::Io => "unreadable",
        Category::Syntax => "syntax error",
        Category::Data => "unexpected data",
        Category::Eof => "ends too early",
    }
}

/// `; stderr: ...` with the last [`STDERR_RECORDED_BYTES_MAX`] bytes of standard error, or
/// nothing when it is empty.
fn tail(stderr: &[u8]) -> String {
    let start = stderr.len().saturating_sub(STDERR_RECORDED_BYTES_MAX);
    let text = String::from_utf8_lossy(&stderr[start..]);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!("; stderr: {text}")
    }
}
