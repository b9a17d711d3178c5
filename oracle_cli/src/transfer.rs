//! `oracle export` and `oracle import`: a run's log as one verified JSONL file, and back.

use std::path::{Path, PathBuf};

use clap::Args;
use oracle_host::Transferred;
use serde_json::json;

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Run id (under `<home>/runs`) or run directory.
    run: String,
    /// Where to write the log: byte-identical to the run's `events.jsonl`, verified after
    /// copying and before it appears.
    #[arg(long, value_name = "FILE", required_unless_present = "otlp")]
    out: Option<PathBuf>,
    /// Send the run's trace to an OpenTelemetry collector over OTLP/HTTP (protobuf): URL is
    /// its base (`/v1/traces` is added); without URL, `OTEL_EXPORTER_OTLP_ENDPOINT`, else
    /// http://localhost:4318. Headers from `OTEL_EXPORTER_OTLP_HEADERS`. A collector that
    /// does not take the spans is a warning, not a failure (docs/OBSERVABILITY.md).
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    otlp: Option<String>,
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
    let host = crate::run::host(home, a.json)?;
    if let Some(out) = &a.out {
        let t = host
            .export(&a.run, out, a.force)
            .map_err(|e| crate::run::host_error(e, a.json))?;
        print(&t, "export", a.json)?;
    }
    if let Some(url) = &a.otlp {
        let endpoint = Some(url.as_str()).filter(|u| !u.is_empty());
        let t = host
            .export_otlp(&a.run, endpoint)
            .map_err(|e| crate::run::host_error(e, a.json))?;
        print_trace(&t, a.json)?;
    }
    Ok(exit::OK)
}

fn print_trace(t: &oracle_host::otlp::Exported, json_out: bool) -> Result<(), CliError> {
    if let Some(w) = &t.warning {
        eprintln!("warning: {} of {} spans dropped: {w}", t.dropped, t.spans);
    }
    if json_out {
        crate::out::json(&json!({
            "ok": true,
            "run": t.run,
            "trace_id": t.trace_id,
            "spans": t.spans,
            "dropped": t.dropped,
        }))
    } else {
        outln!(
            "trace    {} ({} spans sent, {} dropped)",
            t.trace_id,
            t.spans - t.dropped,
            t.dropped
        )
    }
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
