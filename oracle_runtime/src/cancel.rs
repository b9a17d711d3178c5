//! Cancelling a run from outside its program: the request a running drive looks for between
//! rounds, and [`cancel`], which records it for a run nothing is driving.
//!
//! A cancel is recorded as the run's `run_finished` with status `cancelled`, who asked and why
//! (docs/FORMAT.md). It lands only at a decision boundary or where a suspended run waits, never
//! inside a round, so a replay reaches it at the same point and a cancelled run verifies and
//! replays like any finished one. The request file is a doorbell, not a record: what the log
//! says is what happened, and a request a drive never saw changes nothing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::Cancel;

/// The file in a run's directory that asks the process driving it to cancel it.
pub const REQUEST_FILE: &str = "cancel.json";

/// How often a live drive looks for a request, at most: a `stat` per round would cost a
/// 100k-step run a second; this bounds the cost to one per interval and the delay to one
/// interval plus the round in flight.
pub const POLL_MS: u64 = 200;

/// The largest request file read: a reason is a sentence, not a document.
pub const REQUEST_BYTES_MAX: u64 = 16 * 1024;

/// What `oracle cancel` writes for a drive in another process to pick up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub by: Option<String>,
    pub reason: String,
}

impl From<&Cancel> for Request {
    fn from(c: &Cancel) -> Request {
        Request {
            by: c.by.clone(),
            reason: c.reason.clone(),
        }
    }
}

/// Asks the process driving the run in `dir` to cancel it (written whole, then renamed, so a
/// drive never reads half a request).
pub fn request(dir: &Path, cancel: &Cancel) -> std::io::Result<()> {
    let body = serde_json::to_vec(&Request::from(cancel)).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!("{REQUEST_FILE}.tmp"));
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, dir.join(REQUEST_FILE))
}

/// Removes a request once the run has finished (it asks nothing of a finished run).
pub fn clear(dir: &Path) {
    // Absent is the usual case; a request that cannot be removed is ignored by every later
    // drive of a finished run anyway.
    let _ = std::fs::remove_file(dir.join(REQUEST_FILE));
}

/// Reads the request in `dir`, if there is a well-formed one.
pub fn pending(dir: &Path) -> Option<Cancel> {
    let path = dir.join(REQUEST_FILE);
    let meta = std::fs::metadata(&path).ok()?;
    if meta.len() > REQUEST_BYTES_MAX {
        return None;
    }
    let r: Request = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    Some(Cancel {
        by: r.by,
        reason: r.reason,
    })
}

/// Looks for a request in a run's directory at most every [`POLL_MS`]: the probe a live drive
/// gives [`crate::engine::Engine::with_cancel`].
pub struct Watch {
    dir: PathBuf,
    next: Instant,
}

impl Watch {
    pub fn new(dir: &Path) -> Watch {
        Watch {
            dir: dir.to_path_buf(),
            next: Instant::now(),
        }
    }

    /// The request, if one is there and the interval has passed since the last look.
    pub fn probe(&mut self) -> Option<Cancel> {
        let now = Instant::now();
        if now < self.next {
            return None;
        }
        self.next = now + Duration::from_millis(POLL_MS);
        pending(&self.dir)
    }
}
