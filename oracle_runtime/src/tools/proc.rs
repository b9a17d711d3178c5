//! `proc.exec`: run a program with arguments (argv, never a shell), bounded in time and in
//! output, and return its exit status and output.

use std::io::{self, Read, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use oracle_plan::eval::type_name;
use serde_json::{Value, json};

use super::{arg_str, decl, io_reason, needs_arg, object, string, strings};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// `proc.exec {program, args?, stdin?}` → `{status, stdout, stderr}`. Needs
/// `proc:exec:<program>`.
///
/// - `program` is a name looked up in `PATH` (`wc`) or, when it contains a `/`, a path relative
///   to the working directory (`./script.sh`) or absolute. It runs with `args` as its argv,
///   never through a shell, so nothing in an argument is interpreted.
/// - It runs in the working directory with an empty environment except `PATH`: the output is
///   recorded and must depend only on what the call says, not silently on the caller's
///   variables (locale, home, tokens); `PATH` is kept so that programs can be named as people
///   name them.
/// - `stdin` is written to its standard input (which is empty otherwise).
/// - The only built-in tool that enforces the call's timeout (the others are bounded by their
///   size limits): past it the program is killed and reaped, and the call fails with
///   [`ToolError::Timeout`]. Standard output and error together may hold at most the call's
///   output limit; past it the program is killed and the call fails with
///   [`ToolError::OutputTooLarge`]. Neither the clock nor how long the program ran reaches the
///   output.
/// - `status` is the exit code, or `null` if a signal ended the program. Output that is not
///   UTF-8 has U+FFFD in place of the bad bytes.
///
/// If the program exits but leaves a process running that holds its output open, the call waits
/// for that output until the timeout; the threads reading it are then left to finish when that
/// process closes it.
pub struct Exec;

impl Tool for Exec {
    fn decl(&self) -> ToolDecl {
        decl(
            "proc.exec",
            "Run a program (argv only, no shell): {status, stdout, stderr}.",
            Effect::Impure,
            object(
                &[
                    ("program", string()),
                    ("args", strings()),
                    ("stdin", string()),
                ],
                &["program"],
            ),
            object(
                &[
                    ("status", json!({"type": ["integer", "null"]})),
                    ("stdout", string()),
                    ("stderr", string()),
                ],
                &["status", "stdout", "stderr"],
            ),
            needs_arg("proc", "exec", "program"),
        )
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let program = arg_str(input, "program")?;
        if program.is_empty() {
            return Err(ToolError::Failed("`program` is empty".to_owned()));
        }
        let args = match input.get("args") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    a.as_str().ok_or_else(|| {
                        ToolError::Failed(format!(
                            "`args[{i}]` must be a string, found {}",
                            type_name(a)
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => {
                return Err(ToolError::Failed(format!(
                    "argument `args` must be a list of strings, found {}",
                    type_name(other)
                )));
            }
        };
        let stdin = match input.get("stdin") {
            None => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                return Err(ToolError::Failed(format!(
                    "argument `stdin` must be a string, found {}",
                    type_name(other)
                )));
            }
        };
        let run = Run {
            root: cx.root,
            program,
            args: &args,
            stdin,
            timeout_ms: cx.timeout_ms,
            limit: cx.output_bytes_max,
        };
        let done = run.run()?;
        Ok(ToolOutput::of(json!({
            "status": done.status,
            "stdout": String::from_utf8_lossy(&done.stdout),
            "stderr": String::from_utf8_lossy(&done.stderr),
        })))
    }
}

/// What a program left when it exited.
struct Finished {
    /// The exit code; `None` if a signal ended the program.
    status: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// One execution.
struct Run<'a> {
    root: &'a Path,
    program: &'a str,
    args: &'a [&'a str],
    stdin: Option<&'a str>,
    timeout_ms: u64,
    limit: u64,
}

/// Longest pause between checks of whether the program has exited. The output readers wake the
/// wait early, so this bounds only how late an exit without output is noticed.
const POLL_MAX: Duration = Duration::from_millis(20);

/// The longest timeout honoured as given (a year); longer ones are treated as this.
const TIMEOUT_MS_CAP: u64 = 365 * 24 * 60 * 60 * 1000;

type Reader = JoinHandle<io::Result<Vec<u8>>>;

impl Run<'_> {
    fn run(&self) -> Result<Finished, ToolError> {
        // A relative path with a `/` is relative to the working directory: resolved here,
        // because how `Command` treats one together with `current_dir` differs by platform.
        let mut cmd = if self.program.contains('/') {
            Command::new(self.root.join(self.program))
        } else {
            Command::new(self.program)
        };
        cmd.args(self.args)
            .current_dir(self.root)
            .env_clear()
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        // A timeout beyond any real run (a year) is capped so the deadline cannot overflow.
        let timeout = Duration::from_millis(self.timeout_ms.min(TIMEOUT_MS_CAP));
        let deadline = Instant::now() + timeout;
        let mut child = cmd.spawn().map_err(|e| self.spawn_failed(&e))?;
        match self.collect(&mut child, deadline) {
            Ok(out) => Ok(out),
            Err(e) => {
                // Whatever went wrong, leave no process behind: kill it (an error only means it
                // has already exited) and reap it.
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    fn spawn_failed(&self, e: &io::Error) -> ToolError {
        let program = self.program;
        ToolError::Failed(match e.kind() {
            io::ErrorKind::NotFound => format!("program `{program}` not found"),
            io::ErrorKind::PermissionDenied => {
                format!("program `{program}` cannot be run: permission denied")
            }
            _ => format!("cannot run `{program}`: {}", io_reason(e)),
        })
    }

    /// Feeds standard input, reads both outputs and waits for the exit, within the deadline and
    /// the output limit. On `Err` the caller kills the program.
    fn collect(&self, child: &mut Child, deadline: Instant) -> Result<Finished, ToolError> {
        let failed = |what: &str, e: &io::Error| {
            ToolError::Failed(format!(
                "cannot {what} `{}`: {}",
                self.program,
                io_reason(e)
            ))
        };
        // Standard input is written on its own thread: a program may read it only after writing
        // more output than a pipe holds, and neither side may wait on the other. Dropping the
        // pipe at the end closes it, which is how `cat` learns the input is over.
        if let (Some(text), Some(mut pipe)) = (self.stdin, child.stdin.take()) {
            let bytes = text.as_bytes().to_vec();
            thread::Builder::new()
                .name("proc.exec stdin".to_owned())
                .spawn(move || {
                    // A program may exit without reading all of its input; that is its choice,
                    // not an error of the call.
                    let _ = pipe.write_all(&bytes);
                })
                .map_err(|e| failed("feed the input of", &e))?;
        }
        let used = Arc::new(AtomicU64::new(0));
        let over = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let mut readers: Vec<Reader> = Vec::with_capacity(2);
        let pipes: [Option<Box<dyn Read + Send>>; 2] = [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ];
        for pipe in pipes.into_iter().flatten() {
            let reader = read_bounded(pipe, &used, &over, self.limit, tx.clone())
                .map_err(|e| failed("read the output of", &e))?;
            readers.push(reader);
        }
        // Only the readers hold senders now, so the channel disconnects when both are done.
        drop(tx);

        let mut done = 0;
        let mut status = None;
        let mut poll = Duration::from_millis(1);
        loop {
            if over.load(Ordering::SeqCst) {
                return Err(ToolError::OutputTooLarge { limit: self.limit });
            }
            if status.is_none() {
                status = child.try_wait().map_err(|e| failed("wait for", &e))?;
            }
            if status.is_some() && done == readers.len() {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ToolError::Timeout {
                    timeout_ms: self.timeout_ms,
                });
            }
            // Before the exit, wake regularly to check for it; after, only a reader finishing
            // (or the deadline) changes anything.
            let wait = if status.is_some() {
                deadline - now
            } else {
                (deadline - now).min(poll)
            };
            match rx.recv_timeout(wait) {
                Ok(()) => {
                    done += 1;
                    // A closed output usually means the exit is imminent: look again soon.
                    poll = Duration::from_millis(1);
                }
                Err(RecvTimeoutError::Timeout) => poll = (poll * 2).min(POLL_MAX),
                // Both readers are done; the program closed its outputs but runs on.
                Err(RecvTimeoutError::Disconnected) => {
                    thread::sleep(wait);
                    poll = (poll * 2).min(POLL_MAX);
                }
            }
        }
        let mut outputs = Vec::with_capacity(2);
        for reader in readers {
            let bytes = reader
                .join()
                .map_err(|_| {
                    ToolError::Failed(format!(
                        "reading the output of `{}` failed unexpectedly",
                        self.program
                    ))
                })?
                .map_err(|e| failed("read the output of", &e))?;
            outputs.push(bytes);
        }
        let mut outputs = outputs.into_iter();
        let stdout = outputs.next().unwrap_or_default();
        let stderr = outputs.next().unwrap_or_default();
        // `status` is set: the loop above leaves only once it is.
        Ok(Finished {
            status: status.and_then(|s| s.code()),
            stdout,
            stderr,
        })
    }
}

/// Reads `pipe` to its end on a new thread, counting every byte against `used`; past `limit`
/// it sets `over` and stops. Sends on `done` when it stops, whatever the reason.
fn read_bounded(
    mut pipe: Box<dyn Read + Send>,
    used: &Arc<AtomicU64>,
    over: &Arc<AtomicBool>,
    limit: u64,
    done: Sender<()>,
) -> io::Result<Reader> {
    let used = Arc::clone(used);
    let over = Arc::clone(over);
    thread::Builder::new()
        .name("proc.exec output".to_owned())
        .spawn(move || {
            let mut kept = Vec::new();
            let mut chunk = [0u8; 16 * 1024];
            let result = loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => break Ok(()),
                    Ok(n) => {
                        let total = used.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
                        if total > limit {
                            over.store(true, Ordering::SeqCst);
                            break Ok(());
                        }
                        kept.extend_from_slice(&chunk[..n]);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            // The receiver is gone only if the call already returned; nothing to tell then.
            let _ = done.send(());
            result.map(|()| kept)
        })
}
