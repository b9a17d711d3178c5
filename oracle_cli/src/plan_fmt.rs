//! `oracle plan fmt`: plans in canonical layout (oracle_plan::fmt), printed, checked or
//! rewritten in place. A plan that does not parse is never rewritten: its diagnostics are
//! printed as `oracle plan check` prints them.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::exit::{self, CliError};

/// What `oracle plan fmt` does with the canonical text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Print it to stdout (one plan).
    Print,
    /// Report the plans that are not canonical; exit 1 if any.
    Check,
    /// Rewrite the plans that are not canonical, atomically.
    Write,
}

/// One plan's outcome.
enum Outcome {
    /// Already canonical: the text as it is.
    Canonical(String),
    /// Not canonical: the canonical text (written back under `--write`).
    Changed(String),
    /// Did not parse: nothing written; the diagnostics were printed (or are in `json`).
    Refused(Vec<serde_json::Value>),
}

pub fn run(plans: &[PathBuf], mode: Mode, json_out: bool) -> Result<u8, CliError> {
    if mode == Mode::Print && plans.len() != 1 {
        return Err(CliError::input(
            "plan fmt prints one plan; give --write or --check for several",
        ));
    }
    let mut report = Vec::new();
    let mut code = exit::OK;
    for path in plans {
        let outcome = one(path, json_out)?;
        let entry = match &outcome {
            Outcome::Canonical(_) => json!({"path": path, "canonical": true, "written": false}),
            Outcome::Changed(text) => {
                let written = match mode {
                    Mode::Write => {
                        write_atomically(path, text)?;
                        if !json_out {
                            outln!("formatted {}", path.display())?;
                        }
                        true
                    }
                    Mode::Check => {
                        code = code.max(exit::FAILED);
                        if !json_out {
                            outln!("not canonical: {}", path.display())?;
                        }
                        false
                    }
                    Mode::Print => false,
                };
                json!({"path": path, "canonical": false, "written": written})
            }
            Outcome::Refused(diags) => {
                code = exit::INPUT;
                json!({"path": path, "canonical": false, "written": false, "diagnostics": diags})
            }
        };
        if mode == Mode::Print && !json_out {
            match &outcome {
                Outcome::Changed(text) | Outcome::Canonical(text) => out!("{text}")?,
                Outcome::Refused(_) => {}
            }
        }
        report.push(entry);
    }
    if json_out {
        crate::out::json(&json!({"ok": code == exit::OK, "files": report}))?;
    }
    Ok(code)
}

fn read(path: &Path) -> Result<String, CliError> {
    crate::files::check_plan(path, false)?;
    oracle_host::plans::read(path).map_err(|e| CliError::input(e.to_string()))
}

/// Formats one plan; on a syntax error, reports what `plan check` reports for it.
fn one(path: &Path, json_out: bool) -> Result<Outcome, CliError> {
    let src = read(path)?;
    match oracle_plan::fmt::format(&src) {
        Ok(text) if text == src => Ok(Outcome::Canonical(text)),
        Ok(text) => Ok(Outcome::Changed(text)),
        Err(_) => {
            let (src, _, diags) = crate::plan::load(path)?;
            if json_out {
                let list = crate::plan::diagnostics_json(&src, &diags);
                Ok(Outcome::Refused(list))
            } else {
                crate::plan::print_diagnostics(path, &src, &diags);
                Ok(Outcome::Refused(Vec::new()))
            }
        }
    }
}

/// Replaces `path` by `text`: a temporary file beside it (same directory, so the rename is
/// atomic), given the original's permissions, synced, then renamed over it. A crash leaves the
/// old plan or the new one, never half of one.
fn write_atomically(path: &Path, text: &str) -> Result<(), CliError> {
    let fail = |e: std::io::Error| CliError::input(format!("{}: {e}", path.display()));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let permissions = std::fs::metadata(path).map_err(fail)?.permissions();
    let mut tmp = tempfile::Builder::new()
        .prefix(".oracle-fmt-")
        .tempfile_in(dir)
        .map_err(fail)?;
    tmp.write_all(text.as_bytes()).map_err(fail)?;
    tmp.as_file().sync_all().map_err(fail)?;
    std::fs::set_permissions(tmp.path(), permissions).map_err(fail)?;
    tmp.persist(path).map_err(|e| fail(e.error))?;
    Ok(())
}
