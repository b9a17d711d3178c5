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
    #[arg(required_unless_present = "messages")]
    log: Option<PathBuf>,
    /// Instead of a log, a conversation: an OpenAI-style list of messages
    /// (`[{"role": ..., "content": ...}, ...]`, or an object with a `messages` list), made a
    /// completed run `conversation-N` that `oracle demand` reads (docs/FORMAT.md, "A
    /// conversation as a log"). A file that is not one is refused (`conversation_invalid`,
    /// exit 2) and nothing is created.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["log", "trust_commands"])]
    messages: Option<PathBuf>,
    /// A code run's record exported beside the log (`LOG.agent.json`) names the command every
    /// resume, answer, fork and replay starts, chosen by whoever wrote the file: seal it with
    /// this home's key so the run can be driven (without it, the command is kept unsealed and
    /// nothing is ever started from it: `binding_unsealed`).
    #[arg(long)]
    trust_commands: bool,
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
            "command": t.command.as_ref().map(|(c, _)| c),
            "trusted": t.command.as_ref().map(|(_, t)| t),
        }))
    } else {
        outln!(
            "{verb:<8} {} ({} events, {} bytes, verified)",
            t.run,
            t.events,
            t.bytes
        )?;
        outln!("file     {}", t.path.display())?;
        if let Some((command, trusted)) = &t.command {
            let how = match (verb, trusted) {
                ("import", true) => " (sealed by this home: --trust-commands)",
                ("import", false) => {
                    " (not trusted: nothing is started from it; import again with --trust-commands to run it)"
                }
                _ => " (beside the log, as FILE.agent.json)",
            };
            outln!("command  {}{how}", command.join(" "))?;
        }
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
    let host = crate::run::host(home, a.json)?;
    let t = a.import_into(&host)?;
    print(&t, "import", a.json)?;
    Ok(exit::OK)
}

impl ImportArgs {
    /// The file given: the log, or the conversation.
    pub(crate) fn log_path(&self) -> &std::path::Path {
        match (&self.messages, &self.log) {
            (Some(m), _) => m,
            (None, Some(l)) => l,
            // clap requires one of the two.
            (None, None) => Path::new(""),
        }
    }

    /// Imports the log, or the conversation, into `host`'s home.
    pub(crate) fn import_into(&self, host: &oracle_host::Home) -> Result<Transferred, CliError> {
        let made = match &self.messages {
            Some(m) => host.import_messages(m),
            None => host.import(self.log_path(), self.trust_commands),
        };
        made.map_err(|e| crate::run::host_error_in(e, self.json, Some(self.log_path())))
    }

    pub(crate) fn trust_commands(&self) -> bool {
        self.trust_commands
    }

    pub(crate) fn json_flag(&self) -> bool {
        self.json
    }
}
