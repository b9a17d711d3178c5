//! `proc.exec`: run a program with arguments (argv, never a shell), bounded in time and in
//! output, and return its exit status and output.

use std::io::{self, Read, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use oracle_plan::eval::type_name;
use serde_json::{Value, json};

use super::{arg_str, decl, io_reason, needs_arg, object, string, strings};
use crate::oracle::group;
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// `proc.exec {program, args?, stdin?, env?}` → `{status, stdout, stderr}`. Needs
/// `proc:exec:<program>`.
///
/// - `program` is a name looked up in `PATH` (`wc`) or, when it contains a `/`, a path relative
///   to the working directory (`./script.sh`) or absolute. It runs with `args` as its argv,
///   never through a shell, so nothing in an argument is interpreted.
/// - It runs in the working directory with an empty environment except `PATH`: the output is
///   recorded and must depend only on what the call says, not silently on the caller's
///   variables (locale, home, tokens); `PATH` is kept so that programs can be named as people
///   name them. `env` adds variables the call names explicitly: each value a string or a run
///   secret (`env: {TOKEN: secret("TOKEN")}`), whose value is put in only here, never recorded.
/// - `stdin` is written to its standard input (which is empty otherwise).
/// - The program leads a process group of its own, and the call owns that group: **a
///   `proc.exec` call leaves no process behind.** Whatever the program started is killed
///   (SIGKILL to the group) when the call ends, however it ends; only a process that left the
///   group on purpose (`setsid`, `setpgid`) escapes.
/// - The only built-in tool that enforces the call's timeout (the others are bounded by their
///   size limits): past it the group is killed, the program reaped, and the call fails with
///   [`ToolError::Timeout`]. Standard output and error together may hold at most the call's
///   output limit; past it the group is killed and the call fails with
///   [`ToolError::OutputTooLarge`]. Neither the clock nor how long the program ran reaches the
///   output.
/// - `status` is the exit code, or `null` if a signal ended the program. Output that is not
///   UTF-8 has U+FFFD in place of the bad bytes.
///
/// Once the program itself has exited, its timeout no longer applies and the call does not wait
/// for processes it left running: it reads their output for at most [`PIPE_DRAIN_MS_MAX`], then
/// kills the group. So `stdout` and `stderr` hold everything the program wrote, and whatever the
/// processes it left behind wrote before they were killed: their output may be cut anywhere.
/// That is the one way a recorded output can depend on timing, and only for a program that
/// leaves processes running past its exit. (A process that escaped the group and keeps the
/// output open is waited for up to the call's deadline, then the call returns what it has.)
///
/// The group is not oracle's, so a Ctrl-C at the terminal or a signal to oracle does not reach
/// the program: a program running when oracle dies runs on until it exits.
pub struct Exec {
    /// The run's secrets, for `env` values that name one.
    pub secrets: std::sync::Arc<crate::secrets::Secrets>,
}

/// Most variables `env` may set.
pub const ENV_VARS_MAX: u64 = 64;

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
                    (
                        "env",
                        json!({
                            "type": "object",
                            "maxProperties": ENV_VARS_MAX,
                            "additionalProperties": {"anyOf": [
                                {"type": "string"},
                                {
                                    "type": "object",
                                    "properties": {"$secret": {"type": "string"}},
                                    "required": ["$secret"],
                                    "additionalProperties": false,
                                },
                            ]},
                        }),
                    ),
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
        let mut env = Vec::new();
        if let Some(vars) = input.get("env").and_then(Value::as_object) {
            for (name, value) in vars {
                if name.is_empty() || name.contains(['=', '\0']) {
                    return Err(ToolError::Failed(format!(
                        "`env`: `{}` is not a variable name",
                        name.escape_debug()
                    )));
                }
                let value = self
                    .secrets
                    .resolve(value, &format!("`env.{name}`"))
                    .map_err(ToolError::failed)?;
                env.push((name.clone(), value));
            }
        }
        let run = Run {
            root: cx.root,
            program,
            args: &args,
            env: &env,
            path: true,
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
pub(crate) struct Finished {
    /// The exit code; `None` if a signal ended the program.
    pub(crate) status: Option<i32>,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

/// One execution: also how declared exec tools run their program (`crate::declared::exec`).
pub(crate) struct Run<'a> {
    pub(crate) root: &'a Path,
    pub(crate) program: &'a str,
    pub(crate) args: &'a [&'a str],
    /// Variables set besides `PATH` (the call's `env`, secrets resolved).
    pub(crate) env: &'a [(String, String)],
    /// Whether oracle's own `PATH` is passed on (`proc.exec`); a declared tool gets only the
    /// variables its manifest names.
    pub(crate) path: bool,
    pub(crate) stdin: Option<&'a str>,
    pub(crate) timeout_ms: u64,
    pub(crate) limit: u64,
}

/// Longest pause between checks of whether the program has exited. The output readers wake the
/// wait early, so this bounds only how late an exit without output is noticed.
const POLL_MAX: Duration = Duration::from_millis(20);

/// The longest timeout honoured as given (a year); longer ones are treated as this.
const TIMEOUT_MS_CAP: u64 = 365 * 24 * 60 * 60 * 1000;

/// After the program exits, the longest wait (wall time, in ms) for processes it left running
/// to close its output before its process group is killed. Wall time only bounds the wait: it
/// never reaches the recorded bytes, though what leftover processes manage to write within it
/// does (see [`Exec`]).
pub const PIPE_DRAIN_MS_MAX: u64 = 100;

/// The bytes one output reader has gathered so far: shared, because a reader still blocked on a
/// pipe that an escaped process holds open is left behind, and its bytes are taken as they are.
type Gathered = Arc<Mutex<Vec<u8>>>;

/// The readers of a program's outputs, as the wait for its exit leaves them.
struct Outputs {
    /// Standard output, then standard error.
    gathered: [Gathered; 2],
    /// Each reader sends once, when it stops: `Err` if reading failed.
    stopped: Receiver<io::Result<()>>,
    /// How many readers have stopped.
    done: usize,
    /// Set by a reader once both outputs together passed the limit.
    over: Arc<AtomicBool>,
}

impl Run<'_> {
    pub(crate) fn run(&self) -> Result<Finished, ToolError> {
        // A relative path with a `/` is relative to the working directory: resolved here,
        // because how `Command` treats one together with `current_dir` differs by platform.
        let mut cmd = if self.program.contains('/') {
            Command::new(self.root.join(self.program))
        } else {
            Command::new(self.program)
        };
        group::own(&mut cmd)
            .args(self.args)
            .current_dir(self.root)
            .env_clear()
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(path) = std::env::var_os("PATH").filter(|_| self.path) {
            cmd.env("PATH", path);
        }
        for (name, value) in self.env {
            cmd.env(name, value);
        }
        // A timeout beyond any real run (a year) is capped so the deadline cannot overflow.
        let timeout = Duration::from_millis(self.timeout_ms.min(TIMEOUT_MS_CAP));
        let deadline = Instant::now() + timeout;
        let mut child = cmd.spawn().map_err(|e| self.spawn_failed(&e))?;
        let watched = self.watch(&mut child, deadline);
        // However the wait ended (exit, timeout, output over the limit, an error), the group
        // goes now and the program is reaped, exactly once.
        let reaped = group::kill_and_reap(&mut child);
        let mut outputs = watched?;
        let status = reaped.map_err(|e| self.failed("wait for", &e))?;
        // With the group gone, the outputs close and the readers reach their end; only a
        // process that left the group can hold them open, and it is waited for no longer than
        // the deadline.
        let until = deadline.max(Instant::now() + Duration::from_millis(PIPE_DRAIN_MS_MAX));
        self.wait_for_readers(&mut outputs, until)?;
        if outputs.over.load(Ordering::SeqCst) {
            return Err(ToolError::OutputTooLarge { limit: self.limit });
        }
        let take = |g: &Gathered| std::mem::take(&mut *g.lock().unwrap_or_else(|p| p.into_inner()));
        Ok(Finished {
            status: status.code(),
            stdout: take(&outputs.gathered[0]),
            stderr: take(&outputs.gathered[1]),
        })
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

    fn failed(&self, what: &str, e: &io::Error) -> ToolError {
        ToolError::Failed(format!(
            "cannot {what} `{}`: {}",
            self.program,
            io_reason(e)
        ))
    }

    /// Feeds standard input, reads both outputs and waits until the program has exited (without
    /// reaping it) and its outputs are closed, or [`PIPE_DRAIN_MS_MAX`] after the exit; fails
    /// past the deadline or the output limit. The caller then kills the group and reaps.
    fn watch(&self, child: &mut Child, deadline: Instant) -> Result<Outputs, ToolError> {
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
                .map_err(|e| self.failed("feed the input of", &e))?;
        }
        let used = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel();
        let mut outputs = Outputs {
            gathered: [Gathered::default(), Gathered::default()],
            stopped: rx,
            done: 0,
            over: Arc::new(AtomicBool::new(false)),
        };
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
        for (pipe, gathered) in pipes.into_iter().zip(&outputs.gathered) {
            match pipe {
                Some(pipe) => read_bounded(pipe, gathered, &used, &outputs.over, self.limit, &tx)
                    .map_err(|e| self.failed("read the output of", &e))?,
                // Both are piped, so this does not happen; an absent output is simply empty.
                None => outputs.done += 1,
            }
        }
        // Only the readers hold senders now, so the channel disconnects when both are done.
        drop(tx);

        let mut exited: Option<Instant> = None;
        let mut poll = Duration::from_millis(1);
        loop {
            if outputs.over.load(Ordering::SeqCst) {
                return Err(ToolError::OutputTooLarge { limit: self.limit });
            }
            if exited.is_none() && group::exited(child).map_err(|e| self.failed("wait for", &e))? {
                exited = Some(Instant::now());
            }
            let now = Instant::now();
            let wait = match exited {
                // Exited with its outputs closed: done.
                Some(_) if outputs.done == 2 => return Ok(outputs),
                // Exited, but something it left running holds an output open: read on for a
                // short while, then the caller kills it.
                Some(at) => {
                    let until = at + Duration::from_millis(PIPE_DRAIN_MS_MAX);
                    if now >= until {
                        return Ok(outputs);
                    }
                    until - now
                }
                // Still running: wake regularly to check for the exit.
                None => {
                    if now >= deadline {
                        return Err(ToolError::Timeout {
                            timeout_ms: self.timeout_ms,
                        });
                    }
                    (deadline - now).min(poll)
                }
            };
            match outputs.stopped.recv_timeout(wait) {
                Ok(Ok(())) => {
                    outputs.done += 1;
                    // A closed output usually means the exit is imminent: look again soon.
                    poll = Duration::from_millis(1);
                }
                Ok(Err(e)) => return Err(self.failed("read the output of", &e)),
                Err(RecvTimeoutError::Timeout) => poll = (poll * 2).min(POLL_MAX),
                // Both readers are done; the program closed its outputs but runs on.
                Err(RecvTimeoutError::Disconnected) => {
                    thread::sleep(wait);
                    poll = (poll * 2).min(POLL_MAX);
                }
            }
        }
    }

    /// Waits until both readers have stopped, or `until`; a reader still blocked then is left
    /// behind (it stops when the escaped process holding its pipe closes it).
    fn wait_for_readers(&self, outputs: &mut Outputs, until: Instant) -> Result<(), ToolError> {
        while outputs.done < 2 {
            let now = Instant::now();
            if now >= until {
                break;
            }
            match outputs.stopped.recv_timeout(until - now) {
                Ok(Ok(())) => outputs.done += 1,
                Ok(Err(e)) => return Err(self.failed("read the output of", &e)),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok(())
    }
}

/// Reads `pipe` to its end on a new thread into `gathered`, counting every byte against `used`;
/// past `limit` it sets `over` and stops. Sends on `stopped` when it stops, whatever the reason.
fn read_bounded(
    mut pipe: Box<dyn Read + Send>,
    gathered: &Gathered,
    used: &Arc<AtomicU64>,
    over: &Arc<AtomicBool>,
    limit: u64,
    stopped: &Sender<io::Result<()>>,
) -> io::Result<()> {
    let gathered = Arc::clone(gathered);
    let used = Arc::clone(used);
    let over = Arc::clone(over);
    let stopped = stopped.clone();
    thread::Builder::new()
        .name("proc.exec output".to_owned())
        .spawn(move || {
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
                        gathered
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .extend_from_slice(&chunk[..n]);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            // The receiver is gone only if the call already returned; nothing to tell then.
            let _ = stopped.send(result);
        })?;
    Ok(())
}
