//! Moving a run's record between homes (and, later, stores): `oracle export` writes a run's log
//! as one JSONL file byte-identical to the home's, `oracle import` makes a run of such a file.
//! Both verify the bytes they write, after copying them and before they become visible: what
//! is checked is exactly what lands, never a file that could change between the check and the
//! copy.

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use oracle_core::{Hash, Payload};

use crate::index::IndexedLog;
use crate::paths::{LOG_FILE, LogPaths};
use crate::reader::{VerifyOptions, verify_file};
use crate::session::{Result, SessionError, find};

/// What was exported or imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transferred {
    /// The run (exported from, or created by the import).
    pub run: String,
    /// The file written: the export, or the new run's log.
    pub path: PathBuf,
    pub events: u64,
    pub head: Hash,
    pub bytes: u64,
    /// A code run's command: exported beside the log (`FILE.agent.json`), or imported from
    /// there; with whether the import sealed it (`--trust-commands`).
    pub command: Option<(Vec<String>, bool)>,
}

/// Why an export or import did nothing.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("{}: already exists; pass --force to replace it", .0.display())]
    Exists(PathBuf),
    #[error("{}: {reason}", path.display())]
    NotALog { path: PathBuf, reason: String },
}

/// Copies `from` to `tmp` (a regular file only: a FIFO or device is refused), then verifies the
/// copy: the summary of what was copied.
fn copy_verified(from: &Path, tmp: &Path) -> Result<crate::reader::VerifySummary> {
    let meta = fs::metadata(from).map_err(|e| SessionError::Io {
        path: from.to_path_buf(),
        source: e,
    })?;
    if !meta.is_file() {
        return Err(SessionError::Transfer(TransferError::NotALog {
            path: from.to_path_buf(),
            reason: "not a regular file".to_owned(),
        }));
    }
    let mut src = fs::File::open(from).map_err(|e| SessionError::Io {
        path: from.to_path_buf(),
        source: e,
    })?;
    let mut dst = fs::File::create(tmp).map_err(|e| SessionError::Io {
        path: tmp.to_path_buf(),
        source: e,
    })?;
    // Copied up to the length seen when opened: a writer appending meanwhile adds nothing.
    std::io::copy(&mut (&mut src).take(meta.len()), &mut dst).map_err(|e| SessionError::Io {
        path: tmp.to_path_buf(),
        source: e,
    })?;
    dst.sync_all().map_err(|e| SessionError::Io {
        path: tmp.to_path_buf(),
        source: e,
    })?;
    match verify_file(tmp, VerifyOptions::default()) {
        Ok(s) => Ok(s),
        Err(e) => {
            let _ = fs::remove_file(tmp);
            Err(e.into())
        }
    }
}

/// `oracle export RUN --out FILE`: the run's log, verified, as `out` (byte-identical to the
/// home's `events.jsonl`, up to its length when the export started).
pub fn export(home: &Path, run: &str, out: &Path, force: bool) -> Result<Transferred> {
    let found = find(home, run)?;
    if out.exists() && !force {
        return Err(SessionError::Transfer(TransferError::Exists(
            out.to_path_buf(),
        )));
    }
    let name = out
        .file_name()
        .map_or_else(|| "export".into(), |n| n.to_string_lossy().into_owned());
    let tmp = out.with_file_name(format!(".{name}.tmp"));
    let record = crate::code_run::exported_record_path(out);
    let code = crate::code_run::is_code_run(&found.dir);
    if code && record.exists() && !force {
        return Err(SessionError::Transfer(TransferError::Exists(record)));
    }
    let summary = copy_verified(&found.paths.log, &tmp)?;
    let command = if code {
        // Only a command the home sealed leaves it, and without the seal.
        let exported = crate::code_run::export_record(&found, &record);
        match exported {
            Ok(r) => Some((r.command, false)),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        }
    } else {
        None
    };
    fs::rename(&tmp, out).map_err(|e| SessionError::Io {
        path: out.to_path_buf(),
        source: e,
    })?;
    Ok(Transferred {
        run: found.id,
        path: out.to_path_buf(),
        events: summary.events,
        head: summary.head.hash,
        bytes: summary.bytes,
        command,
    })
}

/// The run-id prefix for an imported log: its program's name when that is a plain name
/// (letters, digits, `_`, `-`), else `imported`. A log is outside data: its name never becomes
/// a path.
fn id_prefix(program: &str) -> String {
    let plain = !program.is_empty()
        && program.len() <= 64
        && program
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        program.to_owned()
    } else {
        "imported".to_owned()
    }
}

/// `oracle import LOG`: a new run (`<program>-N` under `<home>/runs`) whose log is `log`,
/// verified. The run has no plan copy: `verify`, `log`, `inspect`, `diff`, `memory` and the
/// pages read it; `replay` and `resume` need the plan it ran and say so. A code run's record
/// exported beside the log (`LOG.agent.json`) becomes its `agent.json`, sealed under the home's
/// key only when `trust_commands` ([`crate::code_run::import_record`]).
pub fn import(home: &Path, log: &Path, trust_commands: bool) -> Result<Transferred> {
    let runs = home.join("runs");
    fs::create_dir_all(&runs).map_err(SessionError::io(&runs))?;
    let tmp = runs.join(format!(".import-{}.tmp", std::process::id()));
    let summary = copy_verified(log, &tmp)?;
    let started = IndexedLog::open_with(&tmp, false)
        .and_then(|mut l| l.read(0))
        .ok()
        .and_then(|e| match e.typed() {
            Ok(Payload::RunStarted(r)) => Some((r.program, r.program_hash)),
            _ => None,
        });
    let program = started.as_ref().map(|(p, _)| p.clone()).unwrap_or_default();
    let (id, dir) = match crate::session::new_run_dir(home, &id_prefix(&program)) {
        Ok(x) => x,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    let dest = LogPaths::of_run(&dir).log;
    debug_assert_eq!(dest.file_name().and_then(|n| n.to_str()), Some(LOG_FILE));
    let made = fs::rename(&tmp, &dest)
        .map_err(|e| SessionError::Io {
            path: dest.clone(),
            source: e,
        })
        .and_then(|()| {
            let run = crate::session::RunDir {
                id: id.clone(),
                paths: LogPaths::of_run(&dir),
                dir: dir.clone(),
            };
            let hash = started.map_or(Hash::ZERO, |(_, h)| h);
            import_command(home, log, &run, &hash, trust_commands)
        });
    let command = match made {
        Ok(c) => c,
        Err(e) => {
            // An import refused leaves nothing behind.
            let _ = fs::remove_dir_all(&dir);
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    Ok(Transferred {
        run: id,
        path: dest,
        events: summary.events,
        head: summary.head.hash,
        bytes: summary.bytes,
        command,
    })
}

/// `oracle import --messages`: a new run whose log is `events` (sealed already, by a recorder),
/// written to a file in `<home>/runs` and imported from there as any log is: verified, named
/// after its program, the file removed whatever the outcome.
pub fn import_events(home: &Path, events: &[oracle_core::Event]) -> Result<Transferred> {
    let runs = home.join("runs");
    fs::create_dir_all(&runs).map_err(SessionError::io(&runs))?;
    let file = runs.join(format!(".import-events-{}.jsonl", std::process::id()));
    let mut bytes = Vec::with_capacity(events.len() * 512);
    for e in events {
        oracle_core::record::encode_into(e, &mut bytes);
    }
    let written = fs::write(&file, &bytes).map_err(SessionError::io(&file));
    let imported = written.and_then(|()| import(home, &file, false));
    let _ = fs::remove_file(&file);
    imported
}

/// The command of the code run `log` was exported from, if its record lies beside it, made
/// `run`'s (sealed when `trust`).
fn import_command(
    home: &Path,
    log: &Path,
    run: &crate::session::RunDir,
    program_hash: &Hash,
    trust: bool,
) -> Result<Option<(Vec<String>, bool)>> {
    let file = crate::code_run::exported_record_path(log);
    if !file.is_file() {
        return Ok(None);
    }
    let key = match trust {
        true => Some(crate::seal::SealKey::open_or_create(home)?),
        false => None,
    };
    let command = crate::code_run::import_record(&file, run, program_hash, key.as_ref())?;
    Ok(Some((command, trust)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_never_names_a_path() {
        assert_eq!(id_prefix("quickstart"), "quickstart");
        assert_eq!(id_prefix("../../etc"), "imported");
        assert_eq!(id_prefix(""), "imported");
        assert_eq!(id_prefix("a/b"), "imported");
    }
}
