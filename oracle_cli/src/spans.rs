//! `--otlp [URL]` on the commands that drive runs (`run`, `resume`, `fork`, `serve`,
//! `worker`): the host's live span export (`oracle_host::otlp_live`) started before the drive
//! and finished after it, its drops said on stderr. A collector never changes an exit status.

use oracle_host::otlp_live::LiveExport;

use crate::exit::CliError;

/// Starts exporting when `--otlp` was given (`Some("")`: no URL, so
/// `OTEL_EXPORTER_OTLP_ENDPOINT`, else http://localhost:4318).
pub fn start(otlp: Option<&str>) -> Result<Option<LiveExport>, CliError> {
    let Some(url) = otlp else {
        return Ok(None);
    };
    let endpoint = Some(url).filter(|u| !u.is_empty());
    LiveExport::start(endpoint).map_err(|e| CliError::input(e.to_string()))
}

/// Sends what is left and says on stderr how many spans were dropped, and why.
pub fn finish(live: Option<LiveExport>) {
    let Some(live) = live else {
        return;
    };
    let r = live.finish();
    let Some(w) = &r.warning else {
        return;
    };
    let n = r.skipped_batches;
    if r.spans == 0 {
        // The collector refused the first (empty) export: no span was made to be dropped.
        eprintln!(
            "warning: spans dropped: {n} batches of records were not made into spans while the collector was down: {w}"
        );
        return;
    }
    let skipped = match n {
        0 => String::new(),
        n => format!(
            "; {n} batches of records were not made into spans while the collector was down"
        ),
    };
    eprintln!(
        "warning: {} of {} spans dropped: {w}{skipped}",
        r.dropped, r.spans
    );
}
