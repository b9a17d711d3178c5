//! `oracle export` and `oracle import`: a run's log as one verified JSONL file, and back.

use std::path::{Path, PathBuf};

use clap::Args;
use oracle_runtime::transfer::Transferred;
use serde_json::json;

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Run id (under `<home>/runs`) or run directory.
    run: String,
    /// Where to write the log: byte-identical to the run's `events.jsonl`, verified after
    /// copying and before it appears.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    force: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// A log file (`oracle export`'s, or any run's `events.jsonl`). It is copied into a new
    /// run `<program>-N`, verified, and only then made a run; a log that does not verify is
    /// refused (exit 4) and nothing is created.
    log: PathBuf,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

fn print(t: &Transferred, verb: &str, json_out: bool) -> Result<(), CliError> {
    if json_out {
        crate::out::json(&json!({
            "ok": true,
            "run": t.run,
            "path": t.path,
            "events": t.events,
            "head": t.head,
            "bytes": t.bytes,
        }))
    } else {
        outln!(
            "{verb:<8} {} ({} events, {} bytes, verified)",
            t.run,
            t.events,
            t.bytes
        )?;
        outln!("file     {}", t.path.display())?;
        outln!("head     {}", t.head)
    }
}

pub fn export(home: &Path, a: ExportArgs) -> Result<u8, CliError> {
    let t = crate::run::host(home, a.json)?
        .export(&a.run, &a.out, a.force)
        .map_err(|e| crate::run::host_error(e, a.json))?;
    print(&t, "export", a.json)?;
    Ok(exit::OK)
}

pub fn import(home: &Path, a: ImportArgs) -> Result<u8, CliError> {
    let t = crate::run::host(home, a.json)?
        .import(&a.log)
        .map_err(|e| crate::run::host_error_in(e, a.json, Some(&a.log)))?;
    print(&t, "import", a.json)?;
    Ok(exit::OK)
}

impl ImportArgs {
    pub(crate) fn log_path(&self) -> &std::path::Path {
        &self.log
    }

    pub(crate) fn json_flag(&self) -> bool {
        self.json
    }
}
