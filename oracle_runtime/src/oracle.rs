//! Telling the oracle: the port adjudication requests are sent through, and the outbox that
//! records every delivery attempt.
//!
//! The pending request itself lives in the log (it was recorded with its challenger), so a
//! failed notification loses nothing: it is written to the run's outbox
//! (`notifications.jsonl`, beside the log, not hashed) and tried again the next time requests
//! are sent, up to [`NOTIFY_ATTEMPTS_MAX`] times. Deliveries stay out of the hash chain on
//! purpose: whether a program answered depends on the world, and a run must not record
//! different events because of it. Notification happens after a drive, never during it, so it
//! never holds up a run.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use oracle_memory::memory::RequestState;
use oracle_memory::{Memory, RequestStatus};
use serde_json::{Value, json};

/// File name of the outbox in a run directory.
pub const OUTBOX_FILE: &str = "notifications.jsonl";
/// Delivery attempts per request before it is left to `oracle adjudications`.
pub const NOTIFY_ATTEMPTS_MAX: u64 = 5;
/// Longest an `--oracle-cmd` program may take to accept one request.
pub const NOTIFY_TIMEOUT_MS: u64 = 10_000;
/// Most bytes of an oracle program's stderr kept in the outbox.
pub const NOTIFY_ERROR_BYTES_MAX: u64 = 1024;
/// How long, after an oracle program ended, its printed verdict is waited for: only a process
/// it started outside its process group can hold its stdout open past its end.
pub const PRINTED_WAIT_MS: u64 = 1_000;
/// Most bytes of a verdict an oracle program may print: its note is at most
/// `adjudication::NOTE_BYTES_MAX` (4 KiB) and the rest is a few short fields.
pub const VERDICT_BYTES_MAX: u64 = 16 * 1024;

/// Why a request was not handed over. The text is kept in the outbox (`error`), so the
/// command port's variants are worded as before; `Port` carries another port's own reason (an
/// embedder's implementation of [`OraclePort`]).
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("{program}: cannot start: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("{program}: timed out after {timeout_ms} ms")]
    TimedOut { program: String, timeout_ms: u64 },
    #[error("{program}: {source}")]
    Wait {
        program: String,
        source: std::io::Error,
    },
    /// `stderr`: the first [`NOTIFY_ERROR_BYTES_MAX`] bytes it wrote, trimmed.
    #[error("{program}: {status}: {stderr}")]
    Exited {
        program: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("{0}")]
    Port(String),
}

/// Where adjudication requests go. Implement it to route requests to people or systems; the
/// answer comes back later through `oracle adjudicate` (or [`crate::adjudication::adjudicate`]),
/// or at once: an oracle written in code may decide as it is told.
pub trait OraclePort {
    /// Hands one request (the JSON of [`request_json`]) over. Must not wait for a person.
    /// `Some(verdict)`: the port decided at once (`{"verdict", "evidence"?, "note"?}`), and the
    /// caller records it as `oracle adjudicate` would, through the same checks.
    fn notify(&mut self, request: &Value) -> Result<Option<Value>, NotifyError>;
}

/// Process groups: every program oracle runs (`proc.exec`, `--oracle-cmd`, `--scorer-cmd`)
/// leads a process group of its own, so that killing the group also kills what the program
/// started (unless that left the group on purpose, with `setsid` or `setpgid`).
pub(crate) mod group {
    use std::io;
    use std::process::{Child, Command, ExitStatus};

    /// Makes the program lead a new process group, whose id is the program's pid.
    pub(crate) fn own(cmd: &mut Command) -> &mut Command {
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt as _;
            cmd.process_group(0);
        }
        cmd
    }

    /// Whether `child` has exited, without reaping it. Until it is reaped its pid, which is the
    /// group's id, cannot be given to another process, so [`kill_and_reap`] afterwards cannot
    /// reach a group that is not the program's.
    pub(crate) fn exited(child: &mut Child) -> io::Result<bool> {
        #[cfg(unix)]
        {
            use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
            let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
            match waitid(WaitId::Pid(Pid::from_child(child)), options) {
                Ok(found) => Ok(found.is_some()),
                // Interrupted by a signal: not known yet; the caller asks again.
                Err(rustix::io::Errno::INTR) => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
        #[cfg(not(unix))]
        {
            Ok(child.try_wait()?.is_some())
        }
    }

    /// Kills (SIGKILL) every process left in `child`'s group, `child` included if it still
    /// runs, then reaps `child`. Call it once per child, and only before anything else reaps it.
    pub(crate) fn kill_and_reap(child: &mut Child) -> io::Result<ExitStatus> {
        #[cfg(unix)]
        {
            use rustix::process::{Pid, Signal, kill_process_group};
            // An error means nobody is left in the group to kill, which is the aim.
            let _ = kill_process_group(Pid::from_child(child), Signal::KILL);
        }
        #[cfg(not(unix))]
        {
            let _ = child.kill();
        }
        child.wait()
    }
}

/// How a program that oracle waited for ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// It exited by itself (or a signal from elsewhere ended it).
    Exited(std::process::ExitStatus),
    /// It ran past its timeout and was killed.
    TimedOut,
    /// The caller's `stop` flag was set (an output over its cap) and it was killed.
    Stopped,
}

/// Waits for `child`, spawned with [`group::own`], up to `timeout_ms` or until `stop` is set;
/// then kills whatever is left of its process group and reaps it. For the programs oracle hands
/// work to (`--oracle-cmd`, `--scorer-cmd`): no process they start in their group outlives
/// their answer, so none is left holding their output open or running on unseen.
pub(crate) fn wait_or_kill(
    child: &mut std::process::Child,
    timeout_ms: u64,
    stop: Option<&AtomicBool>,
) -> std::io::Result<Ended> {
    let started = Instant::now();
    let ended = loop {
        match group::exited(child) {
            Ok(true) => break Ok(None),
            Ok(false) => {}
            Err(e) => break Err(e),
        }
        if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
            break Ok(Some(Ended::Stopped));
        }
        if started.elapsed() >= Duration::from_millis(timeout_ms) {
            break Ok(Some(Ended::TimedOut));
        }
        thread::sleep(Duration::from_millis(2));
    };
    // Whatever happened, the group goes, and the program is reaped exactly once.
    let status = group::kill_and_reap(child);
    match ended? {
        Some(killed) => Ok(killed),
        None => status.map(Ended::Exited),
    }
}

/// `--oracle-cmd PROGRAM`: runs the program once per request with the request as JSON on
/// stdin; exit status 0 means delivered. What it prints on stdout, if anything, is its verdict,
/// one JSON object of at most [`VERDICT_BYTES_MAX`] bytes (an adjudicator written in code,
/// docs/MEMORY.md); nothing printed leaves the request to a person. The program leads its own process group: past
/// `timeout_ms` the whole group is killed, and once it exits whatever it left running in the
/// group is killed too, so a delivery must be done by the time the program exits.
pub struct CommandPort {
    pub program: PathBuf,
    pub timeout_ms: u64,
    /// Whether what the program prints is read as its verdict (`--oracle-cmd`); otherwise
    /// its stdout is discarded (a server's `--notify-cmd`, which announces and decides nothing).
    pub verdicts: bool,
}

impl OraclePort for CommandPort {
    fn notify(&mut self, request: &Value) -> Result<Option<Value>, NotifyError> {
        let shown = self.program.display().to_string();
        let mut child = group::own(&mut Command::new(&self.program))
            .stdin(Stdio::piped())
            .stdout(if self.verdicts {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| NotifyError::Start {
                program: shown.clone(),
                source,
            })?;
        // The request is written on its own thread: one larger than a pipe holds, sent to a
        // program that does not read it, would otherwise block here, before the timeout runs.
        let feeder = child.stdin.take().map(|mut stdin| {
            let line = format!("{request}\n");
            thread::spawn(move || {
                // A program that exits without reading its input is judged by its exit status.
                let _ = stdin.write_all(line.as_bytes());
            })
        });
        let printed_rx = read_printed(&mut child);
        let waited = wait_or_kill(&mut child, self.timeout_ms, None);
        // The program's group is gone, so its stdin's pipe is closed and the write has ended.
        if let Some(feeder) = feeder {
            let _ = feeder.join();
        }
        // A process the program started outside its group may still hold its stdout open: what
        // was printed is waited for a bounded time, then given up on (no verdict).
        let printed = printed_rx
            .recv_timeout(Duration::from_millis(PRINTED_WAIT_MS))
            .unwrap_or_default();
        let status = match waited {
            Ok(Ended::Exited(status)) => status,
            Ok(Ended::TimedOut | Ended::Stopped) => {
                return Err(NotifyError::TimedOut {
                    program: shown,
                    timeout_ms: self.timeout_ms,
                });
            }
            Err(source) => {
                return Err(NotifyError::Wait {
                    program: shown,
                    source,
                });
            }
        };
        if status.success() {
            return verdict_printed(&shown, &printed);
        }
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e
                .by_ref()
                .take(NOTIFY_ERROR_BYTES_MAX)
                .read_to_string(&mut stderr);
        }
        Err(NotifyError::Exited {
            program: shown,
            status,
            stderr: stderr.trim().to_owned(),
        })
    }
}

/// What `child` prints, read on a thread of its own so a program that prints much is not
/// stalled on a full pipe; at most one byte past [`VERDICT_BYTES_MAX`] is kept, to tell an
/// over-long verdict. Nothing comes when its stdout is not piped.
fn read_printed(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (printed_tx, printed_rx) = std::sync::mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        thread::spawn(move || {
            let mut out = Vec::new();
            let _ = stdout.take(VERDICT_BYTES_MAX + 1).read_to_end(&mut out);
            let _ = printed_tx.send(out);
        });
    }
    printed_rx
}

/// What an oracle program printed: nothing (the request is left to a person) or one JSON
/// object, its verdict; anything else is a failed delivery, named.
fn verdict_printed(program: &str, printed: &[u8]) -> Result<Option<Value>, NotifyError> {
    if printed.len() as u64 > VERDICT_BYTES_MAX {
        return Err(NotifyError::Port(format!(
            "{program}: printed more than {VERDICT_BYTES_MAX} bytes, which is no verdict"
        )));
    }
    if printed.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match serde_json::from_slice::<Value>(printed) {
        Ok(v @ Value::Object(_)) => Ok(Some(v)),
        Ok(_) => Err(NotifyError::Port(format!(
            "{program}: printed JSON that is not an object, which is no verdict"
        ))),
        Err(e) => Err(NotifyError::Port(format!(
            "{program}: printed text that is not JSON ({e}), which is no verdict"
        ))),
    }
}

/// The request as the oracle sees it: the line, both claims with their provenance, why, and
/// until when it may be answered.
pub fn request_json(run: &str, memory: &Memory, r: &RequestState) -> Value {
    let claim = |id| {
        memory.entry(&id).map(|e| {
            json!({
                "id": e.id,
                "value": e.claim.value,
                "provenance": e.claim.provenance,
                "valid": e.claim.valid,
                "seq": e.origin.seq,
                "step": e.origin.step,
            })
        })
    };
    json!({
        "run": run,
        "handle": r.request.handle,
        "subject": r.request.subject,
        "predicate": r.request.predicate,
        "criticality": r.request.criticality,
        "reason": r.request.reason,
        "expires_at": r.request.expires_at,
        "incumbent": claim(r.incumbent()),
        "challenger": claim(r.request.challenger),
        "seq": r.origin.seq,
    })
}

/// Delivery attempts by handle: how many, and whether one succeeded.
fn read_outbox(path: &Path) -> BTreeMap<String, (u64, bool)> {
    let mut out = BTreeMap::new();
    let Ok(text) = fs::read_to_string(path) else {
        return out;
    };
    // A torn last line (a crash mid-write) does not parse and is skipped.
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(h), Some(ok)) = (
            v.get("handle").and_then(Value::as_str),
            v.get("delivered").and_then(Value::as_bool),
        ) else {
            continue;
        };
        let e = out.entry(h.to_owned()).or_insert((0, false));
        e.0 += 1;
        e.1 |= ok;
    }
    out
}

/// What one round of notification did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Notified {
    pub delivered: Vec<String>,
    /// Handle and verdict, for deliveries the port decided at once (not yet recorded: the
    /// caller records each through the checks of `oracle adjudicate`).
    pub verdicts: Vec<(String, Value)>,
    /// Handle and why, for attempts that failed this time.
    pub failed: Vec<(String, String)>,
    /// Handles whose attempts are used up (listed by `oracle adjudications`, never lost).
    pub exhausted: Vec<String>,
}

/// Sends every pending request of the run not yet delivered through `port`, recording each
/// attempt in the outbox.
pub fn notify_pending(
    run_dir: &Path,
    run: &str,
    memory: &Memory,
    port: &mut dyn OraclePort,
) -> std::io::Result<Notified> {
    let path = run_dir.join(OUTBOX_FILE);
    let seen = read_outbox(&path);
    let mut pending: Vec<&RequestState> = memory
        .requests()
        .filter(|r| r.status == RequestStatus::Pending)
        .collect();
    pending.sort_by_key(|r| r.origin.seq);
    let mut out = Notified::default();
    let mut file = None;
    for r in pending {
        let handle = &r.request.handle;
        let (attempts, delivered) = seen.get(handle).copied().unwrap_or((0, false));
        if delivered {
            continue;
        }
        if attempts >= NOTIFY_ATTEMPTS_MAX {
            out.exhausted.push(handle.clone());
            continue;
        }
        let result = port.notify(&request_json(run, memory, r));
        let line = json!({
            "handle": handle,
            "attempt": attempts + 1,
            "delivered": result.is_ok(),
            "error": result.as_ref().err().map(ToString::to_string),
        });
        let f = match &mut file {
            Some(f) => f,
            None => {
                let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
                // A torn last line (a crash mid-write) is ended first, so this record starts
                // on a line of its own.
                let torn = fs::read(&path).is_ok_and(|b| b.last().is_some_and(|&c| c != b'\n'));
                if torn {
                    f.write_all(b"\n")?;
                }
                file.insert(f)
            }
        };
        f.write_all(format!("{line}\n").as_bytes())?;
        f.sync_data()?;
        match result {
            Ok(verdict) => {
                out.delivered.push(handle.clone());
                if let Some(v) = verdict {
                    out.verdicts.push((handle.clone(), v));
                }
            }
            Err(e) => out.failed.push((handle.clone(), e.to_string())),
        }
    }
    Ok(out)
}
