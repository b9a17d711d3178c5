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

/// Where adjudication requests go. Implement it to route requests to people or systems; the
/// answer comes back later through `oracle adjudicate` (or [`crate::adjudication::adjudicate`]).
pub trait OraclePort {
    /// Hands one request (the JSON of [`request_json`]) over. Must not wait for the verdict.
    fn notify(&mut self, request: &Value) -> Result<(), String>;
}

/// Waits for `child` up to `timeout_ms`; past it, kills and reaps it and answers `None`. For
/// the programs oracle hands work to (`--oracle-cmd`, `--scorer-cmd`).
pub(crate) fn wait_or_kill(
    child: &mut std::process::Child,
    timeout_ms: u64,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if started.elapsed() >= Duration::from_millis(timeout_ms) {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// `--oracle-cmd PROGRAM`: runs the program once per request with the request as JSON on
/// stdin; exit status 0 means delivered.
pub struct CommandPort {
    pub program: PathBuf,
    pub timeout_ms: u64,
}

impl OraclePort for CommandPort {
    fn notify(&mut self, request: &Value) -> Result<(), String> {
        let shown = self.program.display().to_string();
        let mut child = Command::new(&self.program)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{shown}: cannot start: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A program that exits without reading its input is judged by its exit status.
            let _ = stdin.write_all(format!("{request}\n").as_bytes());
        }
        let status = match wait_or_kill(&mut child, self.timeout_ms) {
            Ok(Some(status)) => status,
            Ok(None) => return Err(format!("{shown}: timed out after {} ms", self.timeout_ms)),
            Err(e) => return Err(format!("{shown}: {e}")),
        };
        if status.success() {
            return Ok(());
        }
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e
                .by_ref()
                .take(NOTIFY_ERROR_BYTES_MAX)
                .read_to_string(&mut stderr);
        }
        Err(format!("{shown}: {status}: {}", stderr.trim()))
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
            "error": result.as_ref().err(),
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
            Ok(()) => out.delivered.push(handle.clone()),
            Err(e) => out.failed.push((handle.clone(), e)),
        }
    }
    Ok(out)
}
