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

    /// `text` (a failure message, or with `program` false the program's stderr, both recorded)
    /// with the absolute paths the program was given written as the manifest writes them: a
    /// file of the tool named in `args` as written there, and with `program` the program by its
    /// file name. So a recorded failure does not depend on where the tools directory lives.
    /// (The program's own path in its stderr is left as it always was, so the failures of runs
    /// recorded before the files of `args` were pinned replay alike.)
    fn scrub(&self, text: &str, program: bool) -> String {
        let path = self.exec.program.to_string_lossy();
        let mut pairs: Vec<(&str, String)> = Vec::new();
        if program {
            pairs.push((&path, self.shown()));
        }
        for f in &self.exec.files {
            if let Some(abs) = f.path.to_str() {
                pairs.push((abs, f.written.clone()));
            }
        }
        // Longest first, so a path that begins with another is replaced whole.
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(b.0)));
        let mut out = text.to_owned();
        for (from, to) in pairs {
            if !from.is_empty() {
                out = out.replace(from, &to);
            }
        }
        out
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
                .map_err(ToolError::failed)?;
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
            ToolError::Failed(m) => ToolError::Failed(self.scrub(&m, true)),
            other => other,
        })?;
        let stderr = self.scrub(&tail(&done.stderr), false);
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
