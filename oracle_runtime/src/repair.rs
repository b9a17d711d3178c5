//! `repair`: move a torn tail aside so the valid prefix can be appended to again; the same for
//! the last line of `checkpoints.jsonl` ([`repair_checkpoints`]).
//!
//! Only a torn tail (bytes after the last newline: a record whose write was cut short) is ever
//! repaired, and its bytes are saved to a file before the log is truncated. Damage anywhere
//! before the tail is an integrity error and is left exactly as it is.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use oracle_core::Head;

use crate::checkpoint::{self, CheckpointError};
use crate::error::{Result, StoreError};
use crate::paths::LogPaths;
use crate::reader;

/// What `repair` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repair {
    /// The log ends on a complete record: nothing to do.
    Clean { head: Head },
    /// The torn tail was saved to `saved_to` and cut from the log.
    MovedTornTail {
        head: Head,
        offset: u64,
        len: u64,
        saved_to: PathBuf,
    },
}

/// Repairs the log at `paths` under its writer lock.
pub fn repair(paths: &LogPaths) -> Result<Repair> {
    let _lock = crate::writer::lock_for_maintenance(paths)?;
    let log = &paths.log;
    // Verifies every complete record: a damaged prefix is an error, never repaired.
    let end = reader::scan(log, true, |_| Ok(true))?;
    let Some((offset, len)) = end.torn_tail else {
        return Ok(Repair::Clean { head: end.head });
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(log)
        .map_err(StoreError::io(log))?;
    let mut torn = Vec::new();
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_to_end(&mut torn))
        .map_err(StoreError::io(log))?;
    let saved_to = save_torn(&paths.torn_dir(), log, "events.jsonl", offset, &torn)
        .map_err(|(path, e)| StoreError::io(path)(e))?;
    file.set_len(offset)
        .and_then(|_| file.sync_all())
        .map_err(StoreError::io(log))?;
    Ok(Repair::MovedTornTail {
        head: end.head,
        offset,
        len,
        saved_to,
    })
}

/// What [`repair_checkpoints`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointsRepair {
    /// The log has no checkpoint file.
    Missing,
    /// Every line is whole and the chain holds: nothing to do.
    Clean { lines: u64 },
    /// The last line (without its newline, or not a checkpoint) was saved to `saved_to` and
    /// cut from the file; `lines` whole lines remain.
    MovedTornLine {
        lines: u64,
        offset: u64,
        len: u64,
        saved_to: PathBuf,
    },
}

/// Mends a torn `checkpoints.jsonl` (see [`LogPaths::checkpoints`]) under the lock that
/// [`checkpoint::append`] takes: a last line that has no newline, or does not parse as a
/// checkpoint, is what a write cut short leaves, so it is saved to the torn directory (as the
/// log's torn tail is) and cut. Anything wrong before the last line (a damaged line, a broken
/// chain) is an integrity error, and the file is left exactly as it is: a checkpoint from the
/// middle is never dropped.
pub fn repair_checkpoints(
    paths: &LogPaths,
) -> std::result::Result<CheckpointsRepair, CheckpointError> {
    let path = paths.checkpoints();
    let io = |p: &std::path::Path| {
        let p = p.to_path_buf();
        move |source| CheckpointError::Io { path: p, source }
    };
    let mut file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(CheckpointsRepair::Missing);
        }
        Err(e) => return Err(CheckpointError::Io { path, source: e }),
    };
    file.lock().map_err(io(&path))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io(&path))?;
    // Where the last line starts, and whether it is torn.
    let torn_at = match bytes.last() {
        None => None,
        Some(&b) if b != b'\n' => Some(memchr::memrchr(b'\n', &bytes).map_or(0, |i| i + 1)),
        Some(_) => {
            let body = bytes.len() - 1;
            let start = memchr::memrchr(b'\n', &bytes[..body]).map_or(0, |i| i + 1);
            let whole = std::str::from_utf8(&bytes[start..body])
                .is_ok_and(|line| checkpoint::Checkpoint::parse_line(line).is_ok());
            (!whole).then_some(start)
        }
    };
    let keep = torn_at.unwrap_or(bytes.len());
    // Everything kept must be whole checkpoints forming their chain.
    let kept = checkpoint::parse_file(&path, &bytes[..keep])?;
    let Some(offset) = torn_at else {
        return Ok(CheckpointsRepair::Clean {
            lines: kept.len() as u64,
        });
    };
    let saved_to = save_torn(
        &paths.torn_dir(),
        &path,
        "checkpoints.jsonl",
        offset as u64,
        &bytes[offset..],
    )
    .map_err(|(at, e)| io(&at)(e))?;
    file.set_len(offset as u64)
        .and_then(|_| file.sync_all())
        .map_err(io(&path))?;
    Ok(CheckpointsRepair::MovedTornLine {
        lines: kept.len() as u64,
        offset: offset as u64,
        len: (bytes.len() - offset) as u64,
        saved_to,
    })
}

/// Saves torn bytes cut from `file` at `offset` into a new file in `dir` (never overwriting
/// one saved earlier), durably: the bytes and the directory entry are synced before the caller
/// cuts anything. On failure, the path the error is about.
fn save_torn(
    dir: &Path,
    file: &Path,
    default_stem: &str,
    offset: u64,
    torn: &[u8],
) -> std::result::Result<PathBuf, (PathBuf, std::io::Error)> {
    fs::create_dir_all(dir).map_err(|e| (dir.to_path_buf(), e))?;
    let stem = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(default_stem)
        .to_owned();
    let saved_to = (0u32..)
        .map(|n| {
            let suffix = if n == 0 {
                String::new()
            } else {
                format!(".{n}")
            };
            dir.join(format!("{stem}.torn-at-{offset}{suffix}"))
        })
        .find(|p| !p.exists())
        .unwrap_or_else(|| dir.join(format!("{stem}.torn-at-{offset}.last")));
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&saved_to)
        .map_err(|e| (saved_to.clone(), e))?;
    out.write_all(torn)
        .and_then(|_| out.sync_all())
        .map_err(|e| (saved_to.clone(), e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| (dir.to_path_buf(), e))?;
    Ok(saved_to)
}
