//! `repair`: move a torn tail aside so the valid prefix can be appended to again.
//!
//! Only a torn tail (bytes after the last newline: a record whose write was cut short) is ever
//! repaired, and its bytes are saved to a file before the log is truncated. Damage anywhere
//! before the tail is an integrity error and is left exactly as it is.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use oracle_core::Head;

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
    let dir = paths.torn_dir();
    fs::create_dir_all(&dir).map_err(StoreError::io(&dir))?;
    let stem = log
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("events.jsonl")
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
    // Save first and make it durable; only then cut the log.
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&saved_to)
        .map_err(StoreError::io(&saved_to))?;
    out.write_all(&torn)
        .and_then(|_| out.sync_all())
        .map_err(StoreError::io(&saved_to))?;
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::io(&dir))?;
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
