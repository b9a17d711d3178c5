//! `--store postgres://...`: runs kept in PostgreSQL (docs/STORE.md): `oracle store init`,
//! `oracle submit`, `oracle worker`, `oracle runs`, outside events sent as signals, and every
//! read-only command on a store's run.
//!
//! The worker itself is `oracle_host::worker`: it drives a run in a scratch file home whose
//! writer commits every commit point's records to the store (`oracle_host::Database` is the
//! one connection a command holds): the engine, the reducers and the record bytes are the file home's own, so a run
//! in the store has the same head as the same run in a file home. Read-only commands work the same way: the runs they name are written
//! into a temporary home (what `oracle export` would write) and the command runs there.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, Subcommand};
use oracle_host::signal::Signal;
use oracle_host::worker::{self, CONCURRENCY_MAX, LEASE_MS_DEFAULT, POLL_MS_DEFAULT};
use oracle_host::{Database, SessionError};
use serde_json::{Value, json};

use crate::Command;
use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct StoreArgs {
    #[command(subcommand)]
    command: StoreCommand,
}

#[derive(Subcommand, Debug)]
enum StoreCommand {
    /// Create the schema in the store's database, or migrate it to this oracle's version
    /// (idempotent; each migration is one transaction). Exit 0, 2 unreachable store or a
    /// schema newer than this oracle.
    Init {
        #[arg(long)]
        json: bool,
    },
    /// Show the store's schema version and run counts by state.
    Status {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Runs this worker drives at once (threads, each with its own connection): 1 to 64.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=CONCURRENCY_MAX as i64))]
    concurrency: u32,
    /// The lease a worker holds on a run while it drives it; a worker that dies loses its runs
    /// to another worker this long after its last renewal (renewed every third of it).
    #[arg(long, default_value_t = LEASE_MS_DEFAULT, value_parser = clap::value_parser!(u64).range(300..=3_600_000))]
    lease_ms: u64,
    /// How long to wait for a notification (LISTEN/NOTIFY) before looking for work anyway.
    #[arg(long, default_value_t = POLL_MS_DEFAULT, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    poll_ms: u64,
    /// Exit once no run is left to claim and none is being driven (for scripts and tests).
    #[arg(long)]
    until_idle: bool,
    /// Name recorded as the holder of the runs this worker drives (default: host-pid).
    #[arg(long)]
    name: Option<String>,
    /// A code agent this worker may start, NAME=PATH (repeatable): the store's code runs
    /// naming agent NAME are driven with the program at PATH (resolved here), which must have
    /// the program hash each was submitted with. Code runs of other agents are left alone.
    #[arg(long = "agent", value_name = "NAME=PATH")]
    agents: Vec<String>,
    /// A directory of tool manifests (docs/TOOLS.md) for the runs this worker drives,
    /// replacing the directories each run recorded (repeatable), as `oracle resume --tools`.
    #[arg(long = "tools", value_name = "DIR")]
    tools: Vec<PathBuf>,
    /// At most N calls of model NAME per period across every worker of the store,
    /// `NAME=N/s|m|h` (repeatable): a call waits for its turn (docs/STORE.md, "Rate limits").
    #[arg(long = "model-rate", value_name = "NAME=N/P")]
    model_rates: Vec<String>,
    /// At most N tokens of model NAME per period, `NAME=N/s|m|h` (repeatable).
    #[arg(long = "model-tokens", value_name = "NAME=N/P")]
    model_tokens: Vec<String>,
    /// At most N calls of declared tool TOOL per period, `TOOL=N/s|m|h` (repeatable).
    #[arg(long = "tool-rate", value_name = "TOOL=N/P")]
    tool_rates: Vec<String>,
    /// Where runs are driven (a scratch home per run, removed after each drive). Default: the
    /// system's temporary directory.
    #[arg(long, value_name = "DIR")]
    scratch: Option<PathBuf>,
    /// After each drive, send the run's new adjudication requests to PROGRAM (as `oracle run
    /// --oracle-cmd` does), in place of the program the run was submitted with.
    #[arg(long, value_name = "PROGRAM")]
    oracle_cmd: Option<PathBuf>,
    /// Score auction winners with PROGRAM (as `oracle run --scorer-cmd`), in place of the
    /// program the run was submitted with or a resume was sent with.
    #[arg(long, value_name = "PROGRAM")]
    scorer_cmd: Option<PathBuf>,
    /// Write a resume point after every EVENTS appended events (or as many as the state has
    /// keys, if more), kept in the store at each commit: a worker that takes a run over starts
    /// from the newest instead of the first event. Default: each drive's own setting.
    #[arg(long, value_name = "EVENTS")]
    snapshot_every: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics (a loopback address, no token; port 0
    /// picks one, named in the worker's log): the store's runs by state, its queue depth, this
    /// worker's claims and lease takeovers, and signal latency (docs/OBSERVABILITY.md).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Send the spans of the runs this worker drives to an OpenTelemetry collector as they
    /// go (as `oracle run --otlp [URL]`; docs/OBSERVABILITY.md).
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    otlp: Option<String>,
}

/// The store named by `--store` or `$ORACLE_STORE`.
pub fn url(flag: Option<String>) -> Result<Option<String>, CliError> {
    let url = flag.or_else(|| {
        std::env::var(oracle_host::STORE_ENV)
            .ok()
            .filter(|v| !v.is_empty())
    });
    match url {
        Some(u) if !oracle_host::database::is_store_url(&u) => Err(CliError::input(format!(
            "--store {}: expected a PostgreSQL URL, postgres://USER@HOST:PORT/DB (a socket directory as ?host=/DIR)",
            oracle_host::database::redact(&u)
        ))),
        other => Ok(other),
    }
}

fn pg(e: oracle_host::PgError) -> CliError {
    CliError::input(e.to_string())
}

fn connect(url: &str) -> Result<Database, CliError> {
    Database::connect(url).map_err(pg)
}

/// Runs `command` against the store at `url`, or hands it back when it has nothing to do with
/// a store (plans, keys, completions).
pub fn dispatch(url: &str, command: Command) -> Result<Result<u8, CliError>, Command> {
    if crate::stores::about_stores(&command) {
        return Ok(shared_stores(url, command));
    }
    Ok(match command {
        Command::Store(a) => store_command(url, a),
        Command::Submit(a) => submit(url, a),
        Command::Worker(a) => worker(url, a),
        Command::Runs(a) => runs(url, a.json_flag(), a.status_word()),
        Command::Resume(_)
        | Command::Adjudicate(_)
        | Command::Claim(_)
        | Command::Sweep(_)
        | Command::Reinstate(_)
        | Command::Signal(_)
        | Command::Cancel(_) => send(url, command),
        Command::Log(_)
        | Command::Inspect(_)
        | Command::Verify(_)
        | Command::Replay(_)
        | Command::Diff(_)
        | Command::Memory(_)
        | Command::Adjudications(_)
        | Command::Demand(_)
        | Command::Auction(_)
        | Command::Report(_)
        | Command::Export(_) => read_only(url, command),
        Command::Fork(_) => Err(CliError::input(
            "oracle fork works in a file home for now: export the run (`oracle export`) and fork it there",
        )),
        Command::Run(_) => Err(CliError::input(
            "oracle run records in a file home; with --store, `oracle submit PLAN` queues the run and a worker (`oracle worker`) drives it",
        )),
        Command::Checkpoint(_) => checkpoint(url, command),
        Command::Import(a) => import(url, a),
        Command::Schedule(a) => crate::schedule::run_store(url, a),
        Command::Queue(a) => crate::queue::run_store(url, a),
        // The server runs with its home as any command does, serving the store's runs.
        Command::Serve(mut a) => {
            a.serve_store(url);
            return Err(Command::Serve(a));
        }
        Command::Repair(_) | Command::Snapshot(_) | Command::Synth(_) | Command::Evolve(_) => {
            Err(CliError::input(
                "this command works on a file home only, not with --store (docs/STORE.md lists what a store supports)",
            ))
        }
        other => return Err(other),
    })
}

fn store_command(url: &str, a: StoreArgs) -> Result<u8, CliError> {
    match a.command {
        StoreCommand::Init { json } => {
            let (before, after) = Database::init(url).map_err(pg)?;
            if json {
                crate::out::json(&json!({"ok": true, "schema_before": before, "schema": after}))?;
            } else if before == after {
                outln!("store    schema version {after}: up to date, nothing changed")?;
            } else {
                outln!("store    schema version {before} -> {after}")?;
            }
            Ok(exit::OK)
        }
        StoreCommand::Status { json } => {
            let status = connect(url)?.status().map_err(pg)?;
            if json {
                crate::out::json(&json!({
                    "ok": true,
                    "schema": status.schema,
                    "runs": status.runs,
                    "states": status.states,
                }))?;
            } else {
                outln!(
                    "store    schema version {}, {} runs",
                    status.schema,
                    status.runs
                )?;
                for (state, n) in &status.states {
                    outln!("         {n:>6} {state}")?;
                }
            }
            Ok(exit::OK)
        }
    }
}

fn submit(url: &str, a: crate::run::RunArgs) -> Result<u8, CliError> {
    let store = connect(url)?;
    let scratch =
        tempfile::tempdir().map_err(|e| CliError::input(format!("a temporary directory: {e}")))?;
    let json_out = a.json();
    match crate::run::submit(scratch.path(), &a, &store)? {
        oracle_host::Submitted::New(id) => {
            if json_out {
                crate::out::json(&json!({"ok": true, "run": id, "state": "submitted"}))?;
            } else {
                outln!("{id}")?;
            }
        }
        // The key's run, the same plan, inputs and seed: nothing was stored.
        oracle_host::Submitted::Existing { run, state, .. } => {
            if json_out {
                crate::out::json(&json!({
                    "ok": true, "run": run, "state": state, "existing": true, "key": a.key(),
                }))?;
            } else {
                outln!("{run}")?;
                eprintln!(
                    "note: key `{}` submitted run {run} already (now {state}), with the same plan, inputs and seed; nothing was stored",
                    a.key().unwrap_or_default()
                );
            }
        }
    }
    Ok(exit::OK)
}

/// A store's run's status in a file home's words (`oracle runs`): `running` while it is queued,
/// held or released (not finished, not suspended), `broken` for a run no worker will drive
/// again (the store's own word, as `damaged` is a file home's).
fn status_of(state: &str) -> &str {
    match state {
        "submitted" | "runnable" | "running" => "running",
        other => other,
    }
}

/// One row of `oracle runs --store --json`: a file home's fields (`status` as shown, with the
/// run's `queue` place), then the store's own.
fn row_json(
    r: &oracle_host::RunRow,
    status: &str,
    live: Option<bool>,
    place: Option<&oracle_host::queue::Place>,
) -> Value {
    let s = &r.summary;
    json!({
        "run": r.id,
        "plan": r.program,
        "status": status,
        "queue": place,
        "events": r.events,
        "last_time": s.last_time,
        "live": live,
        "waiting": s.waiting.as_ref().map(|(step, why)| json!({"step": step, "reason": why, "attempts": s.attempts})),
        "reason": s.reason,
        "models": s.models.map(|(calls, tokens)| json!({"calls": calls, "tokens": tokens})),
        // A worker's times stay in its scratch directory: the store keeps the log only.
        "wall_ms": null,
        "state": r.state,
        "head": r.head.as_ref().map(|h| hex(h)),
        "fence": r.fence,
        "worker": r.worker,
        "lease_ms": r.lease_ms,
        "claims": r.claims,
        "signals_pending": r.pending_signals,
        "detail": r.detail,
    })
}

/// `oracle runs --store`: the columns and JSON fields of a file home's `oracle runs`, with what
/// only a store has beside them (`state`, `head`, `fence`, `worker`, `lease_ms`, `claims`,
/// `signals_pending`, `detail`). What a run's log says (what it waits on, why it ended, its
/// last tick, its model use) is what the worker kept in its row when it last released it.
fn runs(url: &str, json_out: bool, status: Option<&str>) -> Result<u8, CliError> {
    let store = connect(url)?;
    let mut rows = store.runs().map_err(pg)?;
    let places = store
        .queued()
        .map_err(|e| crate::run::host_error(e, json_out))?;
    // A run waiting in a queue: `queued`, with its place.
    let status_of = |r: &oracle_host::RunRow| -> String {
        match places.get(&r.id) {
            Some(_) if r.state == "submitted" => oracle_host::queue::QUEUED.to_owned(),
            _ => status_of(&r.state).to_owned(),
        }
    };
    // `--status running`: not finished and not suspended (held, or released); a broken
    // run matches no status but is listed.
    if let Some(want) = status {
        rows.retain(|r| status_of(r) == want);
    }
    // A worker holds it now under a lease that has not expired: a file home's `live`.
    let live = |r: &oracle_host::RunRow| {
        (status_of(r) == "running")
            .then(|| r.state == "running" && r.lease_ms.is_some_and(|ms| ms >= 0))
    };
    if json_out {
        for r in &rows {
            crate::out::json(&row_json(r, &status_of(r), live(r), places.get(&r.id)))?;
        }
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        outln!("no runs in the store (`oracle submit PLAN --store URL` adds one)")?;
        return Ok(exit::OK);
    }
    let lines: Vec<crate::run::RunLine> = rows
        .iter()
        .map(|r| {
            let s = &r.summary;
            // As a file home shows it: `live` while a worker drives it, `interrupted` when its
            // worker's lease expired (another takes it over); queued runs by the store's word.
            let shown = match (r.state.as_str(), live(r)) {
                ("running", Some(true)) => "live",
                ("running", _) => "interrupted",
                (_, _) if status_of(r) == oracle_host::queue::QUEUED => oracle_host::queue::QUEUED,
                (state, _) => state,
            };
            let mut store_notes = Vec::new();
            if let Some(p) = places.get(&r.id) {
                store_notes.push(p.reason());
            }
            if let Some(w) = &r.worker {
                let lease = match r.lease_ms {
                    Some(ms) if ms >= 0 => format!("lease {}.{}s", ms / 1000, (ms % 1000) / 100),
                    _ => "lease expired".to_owned(),
                };
                store_notes.push(format!("worker {w}, {lease}"));
            }
            if r.pending_signals > 0 {
                store_notes.push(format!("{} signals pending", r.pending_signals));
            }
            if let Some(d) = &r.detail {
                store_notes.push(format!("({d})"));
            }
            let note = crate::run::runs_note(
                s.waiting.as_ref(),
                s.attempts.max(0) as u64,
                s.reason.as_deref(),
                s.models.map(|(c, t)| (c.max(0) as u64, t.max(0) as u64)),
                String::new(),
            );
            let note = [note]
                .into_iter()
                .chain(store_notes)
                .filter(|n| !n.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            crate::run::RunLine {
                id: r.id.clone(),
                plan: r.program.clone(),
                status: shown.to_owned(),
                events: r.events.max(0) as u64,
                tick: s.last_time.max(0) as u64,
                // A worker's times stay in its scratch directory: the store keeps the log only.
                wall: None,
                note,
            }
        })
        .collect();
    crate::run::print_runs(&lines)?;
    Ok(exit::OK)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The store's signal for a command that can be sent to a store's run, and whether it asks
/// for JSON.
fn signal_of(command: &Command) -> Result<(Signal, bool), CliError> {
    Ok(match command {
        Command::Resume(a) => (a.signal()?, a.json_flag()),
        Command::Adjudicate(a) => (a.signal()?, a.json_flag()),
        Command::Claim(a) => (a.signal()?, a.json_flag()),
        Command::Sweep(a) => (a.signal()?, a.json_flag()),
        Command::Reinstate(a) => (a.signal()?, a.json_flag()),
        Command::Cancel(a) => (a.signal(), a.json_flag()),
        Command::Signal(a) => (a.signal()?, a.json_flag()),
        _ => {
            return Err(CliError::input(
                "this command cannot be sent to a store's run",
            ));
        }
    })
}

/// `oracle resume|adjudicate|claim|sweep|reinstate|cancel ... --store URL`: the command is checked
/// here (an answer as the server checks one, refused before anything is queued) and queued as a typed signal (`oracle_host::signal`) in one transaction; the worker
/// that next holds the run carries it out, exactly as the command would have in a file home,
/// and appends its events in order, once.
fn send(url: &str, command: Command) -> Result<u8, CliError> {
    let (signal, json_out) = signal_of(&command)?;
    let store = connect(url)?;
    // An answer is refused here, with the API's code, rather than queued for a worker that
    // would refuse it in its own log while this command said it was sent.
    let tmp =
        tempfile::tempdir().map_err(|e| CliError::input(format!("a temporary directory: {e}")))?;
    let (run, kind) = (signal.run().to_owned(), signal.kind());
    store
        .check(tmp.path(), &signal)
        .map_err(|e| crate::run::host_error(e, json_out))?;
    let id = store.send(&signal).map_err(pg)?;
    if json_out {
        crate::out::json(&json!({"ok": true, "run": run, "signal": id, "state": "sent"}))?;
    } else {
        outln!(
            "signal   {id} ({kind}) sent to run {run}: the worker that next holds the run applies it"
        )?;
        outln!("         `oracle runs --store URL` shows it pending until then")?;
    }
    Ok(exit::OK)
}

/// A command on named stores (`--memory NAME`, `oracle memory list|export|...`): it runs as in
/// a file home, with the stores the database's rows (schema version 8) and a temporary home
/// for the rest.
fn shared_stores(url: &str, command: Command) -> Result<u8, CliError> {
    let database = connect(url)?;
    let tmp =
        tempfile::tempdir().map_err(|e| CliError::input(format!("a temporary directory: {e}")))?;
    crate::run_command_in(tmp.path(), Some(&database), command)
}

/// Read-only commands: every store run named among the arguments is written into a temporary
/// home (its files and its log, byte for byte), and the command runs there.
fn read_only(url: &str, command: Command) -> Result<u8, CliError> {
    let store = connect(url)?;
    let tmp =
        tempfile::tempdir().map_err(|e| CliError::input(format!("a temporary directory: {e}")))?;
    let named: Vec<String> = std::env::args().skip(1).collect();
    // The store's rows are the authority on a run's bindings (its declared tools, for a
    // replay): this temporary home vouches for them as they are, as a worker's does.
    let host = crate::run::host(tmp.path(), false)?;
    store.read_into(&named, &host).map_err(|e| match e {
        oracle_host::HostError::Pg(e) => pg(e),
        e => crate::run::host_error(e, false),
    })?;
    match command {
        // Names the run, not the temporary file it was written to.
        Command::Verify(a) => crate::verify::run_in_store(tmp.path(), a),
        Command::Replay(a) => {
            let agents = agents_of(a.agents())?;
            host.adopt_agent(a.run(), &agents).map_err(|e| match e {
                oracle_host::HostError::Session(SessionError::AgentUnknown { run, agent }) => {
                    CliError::input(format!(
                        "{run} is a code run of agent `{agent}`, and a store keeps no command: name its program with --agent {agent}=PATH"
                    ))
                }
                e => crate::run::host_error(e, false),
            })?;
            crate::run::replay_in(tmp.path(), a, true)
        }
        other => crate::run_command(tmp.path(), other),
    }
}

/// `oracle checkpoint RUN --key K --store URL`: the run is written into a temporary home with
/// its checkpoints, the command signs its head there (after verifying the log), and the new
/// line is added to the store. `verify --pubkey` on the store's run then checks it.
fn checkpoint(url: &str, command: Command) -> Result<u8, CliError> {
    let store = connect(url)?;
    let tmp =
        tempfile::tempdir().map_err(|e| CliError::input(format!("a temporary directory: {e}")))?;
    let Command::Checkpoint(a) = &command else {
        return Err(CliError::input("not a checkpoint command"));
    };
    let run = a.run_name();
    let dir = store.hydrate(&run, tmp.path()).map_err(pg)?;
    let before = store.checkpoint_count(&run).map_err(pg)?;
    let code = crate::run_command(tmp.path(), command)?;
    store.add_checkpoints(&run, &dir, before).map_err(pg)?;
    Ok(code)
}

/// `oracle import LOG --store URL`: the log is verified and made a run in a temporary home, as
/// a file home's import does, then stored whole. Like a file home's imported run, it has no
/// plan copy: read-only commands read it; a run that had not finished is `broken` (nothing
/// could drive it on).
fn import(url: &str, a: crate::transfer::ImportArgs) -> Result<u8, CliError> {
    if a.trust_commands() {
        return Err(CliError::input(
            "--trust-commands with --store: a store's workers do not drive code runs",
        ));
    }
    let store = connect(url)?;
    let tmp =
        tempfile::tempdir().map_err(|e| CliError::input(format!("a temporary directory: {e}")))?;
    let t = a.import_into(&crate::run::host(tmp.path(), a.json_flag())?)?;
    let dir = t.path.parent().unwrap_or(tmp.path()).to_path_buf();
    // The id's prefix is the local one's (`<program>-N`): a log is outside data, and its
    // program name was already reduced to a plain name there.
    let prefix = t.run.rsplit_once('-').map_or(t.run.as_str(), |(p, _)| p);
    let oracle_host::database::Imported { run: id, state } =
        store.import(prefix, &dir, &t.path).map_err(pg)?;
    if a.json_flag() {
        crate::out::json(&json!({
            "ok": true,
            "run": id,
            "state": state,
            "events": t.events,
            "head": t.head.to_hex(),
        }))?;
    } else {
        outln!("import   {id} ({} events, verified), {state}", t.events)?;
        outln!("head     {}", t.head.to_hex())?;
    }
    Ok(exit::OK)
}

/// `oracle worker`: claims runs and drives them (`oracle_host::worker`) until stopped
/// (SIGTERM or SIGINT: no new claims; the runs being driven are finished or suspended, then
/// their leases released; a second signal exits at once, and their leases expire).
fn worker(url: &str, a: WorkerArgs) -> Result<u8, CliError> {
    crate::run::check_program("--oracle-cmd", a.oracle_cmd.as_deref())?;
    crate::run::check_program("--scorer-cmd", a.scorer_cmd.as_deref())?;
    crate::interrupt::set_worker();
    let name = a.name.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "host".into());
        format!("{host}-{}", std::process::id())
    });
    let scratch = a
        .scratch
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("oracle-worker-{}", std::process::id()));
    let stop = Arc::new(AtomicBool::new(false));
    stop_on_signals(stop.clone());
    let settings = worker::Settings {
        url: url.to_owned(),
        name: name.clone(),
        concurrency: a.concurrency,
        lease_ms: a.lease_ms,
        poll_ms: a.poll_ms,
        until_idle: a.until_idle,
        scratch,
        tools: oracle_host::bind::absolute(&a.tools),
        oracle_cmd: a.oracle_cmd.as_deref().map(crate::run::absolute_program),
        scorer_cmd: a.scorer_cmd.as_deref().map(crate::run::absolute_program),
        snapshot_every: a.snapshot_every,
        metrics: a.metrics,
        agents: agents_of(&a.agents)?,
        rates: oracle_host::rate::Rates::admit(&a.model_rates, &a.model_tokens, &a.tool_rates)
            .map_err(|e| crate::run::host_error(e, false))?,
    };
    let spans = crate::spans::start(a.otlp.as_deref())?;
    let ran = worker::run(
        settings,
        stop,
        Arc::new(|line: &str| eprintln!("{} {line}", utc_now())),
    );
    crate::spans::finish(spans);
    ran.map_err(|e| CliError::input(format!("worker {name}: {e}")))?;
    Ok(exit::OK)
}

/// `--agent NAME=PATH`, each path resolved in this directory and made absolute: the programs
/// this worker starts for the code runs naming those agents. A name given twice is refused.
fn agents_of(given: &[String]) -> Result<BTreeMap<String, PathBuf>, CliError> {
    let mut agents = BTreeMap::new();
    for g in given {
        let Some((name, path)) = g
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
        else {
            return Err(CliError::input(format!(
                "--agent {g}: expected NAME=PATH (the agent's program name and its entry file)"
            )));
        };
        let file =
            std::path::absolute(path).map_err(|e| CliError::input(format!("--agent {g}: {e}")))?;
        if !file.is_file() {
            return Err(CliError::input(format!(
                "--agent {g}: {} is not a file",
                file.display()
            )));
        }
        if agents.insert(name.to_owned(), file).is_some() {
            return Err(CliError::input(format!("--agent {name}: given twice")));
        }
    }
    Ok(agents)
}

/// The first SIGTERM or SIGINT sets `stop` (no new claims; the runs in hand are finished);
/// a second exits at once.
fn stop_on_signals(stop: Arc<AtomicBool>) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ]) else {
        return;
    };
    std::thread::spawn(move || {
        let mut it = signals.forever();
        if it.next().is_some() {
            eprintln!(
                "{} worker   stopping: no new claims; finishing the runs in hand",
                utc_now()
            );
            stop.store(true, Ordering::SeqCst);
        }
        if it.next().is_some() {
            eprintln!(
                "{} worker   stopped at once; the runs in hand go to another worker when their leases expire",
                utc_now()
            );
            std::process::exit(130);
        }
    });
}

/// The wall-clock time now, as `YYYY-MM-DDTHH:MM:SSZ`, for log lines (never recorded).
fn utc_now() -> String {
    utc_text(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

/// `secs` since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_text(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_log_lines_carry_utc_timestamps() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_text(1_767_225_599), "2025-12-31T23:59:59Z");
        assert_eq!(utc_text(4_102_444_800), "2100-01-01T00:00:00Z");
        let now = utc_now();
        assert_eq!(now.len(), "2026-01-01T00:00:00Z".len(), "{now}");
    }
}
