//! A JSON function run in a sandbox for a caller outside any run (a demand policy, docs/FORMAT.md
//! "Pluggable policies"): the mechanisms of declared tools, reused. A WebAssembly module runs
//! under wasmi with no imports, a fuel limit and a memory limit (`crate::declared::wasm`); a
//! program runs through the bounded runner of `proc.exec` (input on stdin, output read from
//! stdout, a time limit, an output limit, its process group ended after).
//!
//! Nothing here is recorded: a call's answer goes to its caller only.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::declared::manifest::Wasm;
use crate::declared::wasm::WasmTool;
use crate::tool::{Effect, ToolDecl, ToolError};
use crate::tools::proc::Run;

/// The bounds of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A module's fuel per call.
    pub fuel_max: u64,
    /// A module's linear memory.
    pub memory_bytes_max: u64,
    /// A program's wall time per call, in milliseconds.
    pub timeout_ms: u64,
    /// Bytes of output per call (a program's stdout and stderr together).
    pub output_bytes_max: u64,
}

/// Why a sandboxed function cannot be loaded or did not answer.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The module or the program cannot be used: missing, unreadable, not a module.
    #[error("{}: {why}", path.display())]
    Load { path: PathBuf, why: String },
    /// A call failed: a trap, a limit, an exit status, output that is not JSON.
    #[error("{0}")]
    Failed(String),
}

/// A loaded function.
pub enum Sandboxed {
    Wasm(Box<WasmTool>),
    Exec {
        program: String,
        args: Vec<String>,
        /// The working directory the program runs in.
        root: PathBuf,
    },
}

impl Sandboxed {
    /// A module from `path`: WebAssembly text when it ends in `.wat`, else binary.
    pub fn wasm(path: &Path, limits: &Limits) -> Result<Sandboxed, SandboxError> {
        let load = |why: String| SandboxError::Load {
            path: path.to_path_buf(),
            why,
        };
        let bytes = std::fs::read(path).map_err(|e| load(format!("cannot read: {e}")))?;
        let text = path.extension().is_some_and(|e| e == "wat");
        let decl = ToolDecl {
            name: "demand.policy".to_owned(),
            version: "1".to_owned(),
            description: "a demand policy".to_owned(),
            effect: Effect::Pure,
            input_schema: json!({}),
            output_schema: json!({}),
            capability: None,
            timeout_ms: 0,
            output_bytes_max: limits.output_bytes_max,
        };
        let wasm = Wasm {
            module: path.to_path_buf(),
            fuel_max: limits.fuel_max,
            memory_bytes_max: limits.memory_bytes_max,
        };
        let tool = WasmTool::new(decl, &bytes, text, wasm).map_err(|e| load(e.to_string()))?;
        Ok(Sandboxed::Wasm(Box::new(tool)))
    }

    /// A program and its arguments, split at white space (`python3 policy.py`), run in `root`
    /// with oracle's own `PATH` and no other variable. Refused when empty.
    pub fn exec(command: &str, root: &Path) -> Result<Sandboxed, SandboxError> {
        let mut words = command.split_whitespace().map(str::to_owned);
        let program = words.next().ok_or_else(|| SandboxError::Load {
            path: PathBuf::from(command),
            why: "names no program".to_owned(),
        })?;
        Ok(Sandboxed::Exec {
            program,
            args: words.collect(),
            root: root.to_path_buf(),
        })
    }

    /// One call: `input` (JSON bytes) in, the answer parsed as JSON.
    pub fn call(&self, input: &[u8], limits: &Limits) -> Result<Value, SandboxError> {
        let failed = |e: ToolError| SandboxError::Failed(e.to_string());
        match self {
            Sandboxed::Wasm(tool) => tool
                .execute(input, limits.output_bytes_max)
                .map(|(v, _)| v)
                .map_err(failed),
            Sandboxed::Exec {
                program,
                args,
                root,
            } => {
                let stdin = std::str::from_utf8(input)
                    .map_err(|_| SandboxError::Failed("the input is not UTF-8".to_owned()))?;
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let done = Run {
                    root,
                    program,
                    args: &args,
                    env: &[],
                    path: true,
                    stdin: Some(stdin),
                    timeout_ms: limits.timeout_ms,
                    limit: limits.output_bytes_max,
                }
                .run()
                .map_err(failed)?;
                let stderr = String::from_utf8_lossy(&done.stderr);
                let stderr = stderr.trim();
                let tail = if stderr.is_empty() {
                    String::new()
                } else {
                    let start = stderr.len().saturating_sub(STDERR_SHOWN_BYTES_MAX);
                    let start = (start..stderr.len())
                        .find(|&i| stderr.is_char_boundary(i))
                        .unwrap_or(stderr.len());
                    format!("; stderr: {}", &stderr[start..])
                };
                match done.status {
                    Some(0) => {}
                    Some(code) => {
                        return Err(SandboxError::Failed(format!(
                            "`{program}` exited with status {code}{tail}"
                        )));
                    }
                    None => {
                        return Err(SandboxError::Failed(format!(
                            "`{program}` was ended by a signal{tail}"
                        )));
                    }
                }
                serde_json::from_slice(&done.stdout).map_err(|e| {
                    SandboxError::Failed(format!(
                        "`{program}` printed {} bytes that are not JSON (line {}, column {}){tail}",
                        done.stdout.len(),
                        e.line(),
                        e.column()
                    ))
                })
            }
        }
    }
}

/// Bytes of a failed program's standard error shown (its last ones).
pub const STDERR_SHOWN_BYTES_MAX: usize = 2048;
