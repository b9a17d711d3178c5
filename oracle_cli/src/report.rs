//! `oracle report RUN --html FILE [--at SEQ]`: a run as one self-contained HTML page (summary,
//! step graph coloured by status, state, beliefs with provenance, events), built by
//! `oracle_html`. The page carries its style sheet and SVG inline and makes no request, so it
//! can be mailed or archived beside the log it describes.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use oracle_html::view::{self, Page, ViewError};
use serde_json::json;

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Run id (under `<home>/runs`), run directory, or the run's log file.
    run: String,
    /// Write the page to FILE. An existing file is refused (exit 2) unless --force.
    #[arg(long, value_name = "FILE")]
    html: PathBuf,
    /// Show the state, step colours and beliefs as they were after this event (default: the
    /// last).
    #[arg(long, value_name = "SEQ")]
    at: Option<u64>,
    /// First event the page lists; it lists at most 1000 (`oracle log` lists any).
    #[arg(long, value_name = "SEQ", default_value_t = 0)]
    from: u64,
    /// Replace FILE if it exists.
    #[arg(long)]
    force: bool,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    json: bool,
}

fn view_error(e: ViewError, json_out: bool) -> CliError {
    match e {
        ViewError::Session(e) => crate::run::session_error(e, json_out, None),
        ViewError::Store(e) => e.into(),
        other => {
            let code = if other.is_integrity() {
                exit::INTEGRITY
            } else {
                exit::INPUT
            };
            CliError {
                code,
                message: other.to_string(),
                json: None,
                quiet: false,
            }
        }
    }
}

pub fn run(home: &Path, a: ReportArgs) -> Result<u8, CliError> {
    // Refused before anything is read: the page would be thrown away.
    if !a.force && std::fs::symlink_metadata(&a.html).is_ok() {
        return Err(CliError::input(format!(
            "{} exists: give --force to replace it",
            a.html.display()
        )));
    }
    let page = Page {
        from: a.from,
        limit: view::PAGE_LIMIT_MAX,
    };
    let mut v = view::run(home, &a.run, a.at, page).map_err(|e| view_error(e, a.json))?;
    // The latency view, as the server's run page has it (unpriced: a report names no prices).
    if let Ok(found) = oracle_host::inspect::find(home, &a.run) {
        let prices = oracle_host::metrics::Prices::new();
        v.latency = oracle_serve::data::latency_view(&found.paths.log, a.at, &prices);
    }
    let html = oracle_html::report_page(&v);
    write(&a.html, html.as_bytes(), a.force)?;
    let shown = &v.timeline.events;
    if a.json {
        crate::out::json(&json!({
            "ok": true,
            "run": v.summary.id,
            "file": a.html,
            "bytes": html.len(),
            "at": v.summary.at,
            "events": v.summary.events,
            "events_listed": {
                "from": shown.first().map(|e| e.seq),
                "to": shown.last().map(|e| e.seq),
            },
        }))?;
    } else {
        let listed = match (shown.first(), shown.last()) {
            (Some(f), Some(l)) => format!("events {} to {} listed", f.seq, l.seq),
            _ => "no events listed".to_owned(),
        };
        outln!(
            "report   {} written to {} ({} bytes; state after event {}; {listed} of {})",
            v.summary.id,
            a.html.display(),
            html.len(),
            v.summary.at,
            v.summary.events
        )?;
    }
    Ok(exit::OK)
}

/// Writes `bytes` to `path`: a new file only (one created meanwhile is not replaced), or with
/// `force` a temporary file beside it renamed over it, so a reader never sees half a page.
fn write(path: &Path, bytes: &[u8], force: bool) -> Result<(), CliError> {
    let failed =
        |e: std::io::Error| CliError::input(format!("{}: cannot write: {e}", path.display()));
    if !force {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => CliError::input(format!(
                    "{} exists: give --force to replace it",
                    path.display()
                )),
                _ => failed(e),
            })?;
        return f.write_all(bytes).and_then(|()| f.sync_all()).map_err(|e| {
            // Half a page is worse than none.
            let _ = std::fs::remove_file(path);
            failed(e)
        });
    }
    let name = path
        .file_name()
        .map_or_else(|| "report".to_owned(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.tmp.{}", std::process::id()));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        failed(e)
    })
}
