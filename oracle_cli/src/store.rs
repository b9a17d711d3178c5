//! `--store postgres://...`: runs kept in PostgreSQL (docs/STORE.md): `oracle store init`,
//! `oracle submit`, `oracle worker`, `oracle runs`, outside events sent as signals, and every
//! read-only command on a store's run.
//!
//! A worker drives a run in a scratch file home whose writer commits every commit point's
//! records to the store (oracle_runtime::replica, oracle_pg): the engine, the reducers and the
//! record bytes are the file home's own, so a run in the store has the same head as the same
//! run in a file home. Read-only commands work the same way: the runs they name are written
//! into a temporary home (what `oracle export` would write) and the command runs there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use clap::{Args, Subcommand};
use oracle_pg::{Claim, Store};
use oracle_runtime::session;
use serde_json::{Value, json};

use crate::Command;
use crate::exit::{self, CliError};

/// Default lease of a worker on a run it drives (renewed at a third of it).
pub const LEASE_MS_DEFAULT: u64 = 10_000;
/// Default wait for a notification before a worker polls the store anyway.
pub const POLL_MS_DEFAULT: u64 = 1_000;
/// First wait before reconnecting to a store that went away; doubled up to the max.
pub const RECONNECT_MS_MIN: u64 = 100;
/// Longest wait between two attempts to reach the store.
pub const RECONNECT_MS_MAX: u64 = 5_000;
/// Most runs one worker process drives at once.
pub const CONCURRENCY_MAX: u32 = 64;

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
    /// A directory of tool manifests (docs/TOOLS.md) for the runs this worker drives,
    /// replacing the directories each run recorded (repeatable), as `oracle resume --tools`.
    #[arg(long = "tools", value_name = "DIR")]
    tools: Vec<PathBuf>,
    /// Where runs are driven (a scratch home per run, removed after each drive). Default: the
    /// system's temporary directory.
    #[arg(long, value_name = "DIR")]
    scratch: Option<PathBuf>,
}

/// The store named by `--store` or `$ORACLE_STORE`.
pub fn url(flag: Option<String>) -> Result<Option<String>, CliError> {
    let url = flag.or_else(|| {
        std::env::var(oracle_pg::STORE_ENV)
            .ok()
            .filter(|v| !v.is_empty())
    });
    match url {
        Some(u) if !oracle_pg::is_store_url(&u) => Err(CliError::input(format!(
            "--store {}: expected a PostgreSQL URL, postgres://USER@HOST:PORT/DB (a socket directory as ?host=/DIR)",
            oracle_pg::redact(&u)
        ))),
        other => Ok(other),
    }
}

fn pg(e: oracle_pg::PgError) -> CliError {
    CliError::input(e.to_string())
}

fn connect(url: &str) -> Result<Store, CliError> {
    Store::connect(url).map_err(pg)
}

/// Runs `command` against the store at `url`, or hands it back when it has nothing to do with
/// a store (plans, keys, completions).
pub fn dispatch(url: &str, command: Command) -> Result<Result<u8, CliError>, Command> {
    Ok(match command {
        Command::Store(a) => store_command(url, a),
        Command::Submit(a) => submit(url, a),
        Command::Worker(a) => worker(url, a),
        Command::Runs(a) => runs(url, a.json_flag(), a.status_word()),
        Command::Resume(_)
        | Command::Adjudicate(_)
        | Command::Claim(_)
        | Command::Sweep(_)
        | Command::Reinstate(_) => send(url, command),
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
        Command::Run(_) => Err(CliError::input(
            "oracle run records in a file home; with --store, `oracle submit PLAN` queues the run and a worker (`oracle worker`) drives it",
        )),
        Command::Checkpoint(_) => checkpoint(url, command),
        Command::Import(a) => import(url, a),
        Command::Repair(_) | Command::Snapshot(_) | Command::Serve(_) | Command::Synth(_) => {
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
            let store = Store::connect_unchecked(url).map_err(pg)?;
            let (before, after) = store.init().map_err(pg)?;
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
            let store = connect(url)?;
            let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
            let rows = store.runs().map_err(pg)?;
            for r in &rows {
                *by_state.entry(r.state.clone()).or_default() += 1;
            }
            if json {
                crate::out::json(&json!({
                    "ok": true,
                    "schema": oracle_pg::schema::VERSION,
                    "runs": rows.len(),
                    "states": by_state,
                }))?;
            } else {
                outln!(
                    "store    schema version {}, {} runs",
                    oracle_pg::schema::VERSION,
                    rows.len()
                )?;
                for (state, n) in &by_state {
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
    let (id, json_out) = crate::run::submit(scratch.path(), &a, &store)?;
    if json_out {
        crate::out::json(&json!({"ok": true, "run": id, "state": "submitted"}))?;
    } else {
        outln!("{id}")?;
    }
    Ok(exit::OK)
}

fn runs(url: &str, json_out: bool, status: Option<&str>) -> Result<u8, CliError> {
    let store = connect(url)?;
    let mut rows = store.runs().map_err(pg)?;
    // `--status running`: not finished and not suspended (queued, held, or released); a broken
    // run matches no status but is listed without one.
    if let Some(want) = status {
        rows.retain(|r| match want {
            "running" => matches!(r.state.as_str(), "submitted" | "runnable" | "running"),
            other => r.state == other,
        });
    }
    if json_out {
        for r in &rows {
            crate::out::json(&json!({
                "run": r.id,
                "plan": r.program,
                "state": r.state,
                "events": r.events,
                "head": r.head.as_ref().map(|h| hex(h)),
                "fence": r.fence,
                "worker": r.worker,
                "lease_ms": r.lease_ms,
                "claims": r.claims,
                "signals_pending": r.pending_signals,
                "detail": r.detail,
            }))?;
        }
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        outln!("no runs in the store (`oracle submit PLAN --store URL` adds one)")?;
        return Ok(exit::OK);
    }
    let width = rows.iter().map(|r| r.id.len()).max().unwrap_or(3).max(3);
    outln!(
        "{:<width$}  {:<10} {:>7}  {:<24} {:>9}  signals",
        "run",
        "state",
        "events",
        "worker",
        "lease"
    )?;
    for r in &rows {
        let lease = match r.lease_ms {
            Some(ms) if ms >= 0 => format!("{}.{}s", ms / 1000, (ms % 1000) / 100),
            Some(_) => "expired".to_owned(),
            None => "-".to_owned(),
        };
        outln!(
            "{:<width$}  {:<10} {:>7}  {:<24} {:>9}  {}{}",
            r.id,
            r.state,
            r.events,
            r.worker.as_deref().unwrap_or("-"),
            lease,
            r.pending_signals,
            r.detail
                .as_deref()
                .map(|d| format!("  ({d})"))
                .unwrap_or_default()
        )?;
    }
    Ok(exit::OK)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Version of a queued signal's row ([`Queued`]).
pub const SIGNAL_FORMAT: u64 = 1;

/// A signal as the store queues it: which command, with its arguments as typed values (the
/// same structs the command line parses, so the two cannot drift), under a version. Never an
/// argument list: the worker reads the row, it does not parse a command line again.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "args", rename_all = "snake_case")]
pub(crate) enum Signal {
    Resume(crate::run::ResumeArgs),
    Adjudicate(crate::memory::AdjudicateArgs),
    Claim(crate::memory::ClaimArgs),
    Sweep(crate::memory::SweepArgs),
    Reinstate(crate::memory::ReinstateArgs),
}

/// A queued signal's row: `{"format": 1, "signal": {"kind": ..., "args": {...}}}`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Queued {
    format: u64,
    signal: Signal,
}

impl Signal {
    /// The signal a command sends, if it is one that can be sent.
    fn of(command: Command) -> Option<Signal> {
        Some(match command {
            Command::Resume(a) => Signal::Resume(a),
            Command::Adjudicate(a) => Signal::Adjudicate(a),
            Command::Claim(a) => Signal::Claim(a),
            Command::Sweep(a) => Signal::Sweep(a),
            Command::Reinstate(a) => Signal::Reinstate(a),
            _ => return None,
        })
    }

    fn kind(&self) -> &'static str {
        match self {
            Signal::Resume(_) => "resume",
            Signal::Adjudicate(_) => "adjudicate",
            Signal::Claim(_) => "claim",
            Signal::Sweep(_) => "sweep",
            Signal::Reinstate(_) => "reinstate",
        }
    }

    fn run(&self) -> &str {
        match self {
            Signal::Resume(a) => a.run_name(),
            Signal::Adjudicate(a) => a.run_name(),
            Signal::Claim(a) => a.run_name(),
            Signal::Sweep(a) => a.run_name(),
            Signal::Reinstate(a) => a.run_name(),
        }
    }

    fn json_flag(&self) -> bool {
        serde_json::to_value(self).is_ok_and(|v| v["args"]["json"] == json!(true))
    }

    /// Carries the signal out in `home`, as its command would in a file home.
    fn apply(self, home: &Path, drives: &crate::run::Drives) -> Result<u8, CliError> {
        match self {
            Signal::Resume(a) => crate::run::resume(home, drives, a),
            Signal::Adjudicate(a) => crate::memory::adjudicate(home, drives, a),
            Signal::Claim(a) => crate::memory::claim(home, drives, a),
            Signal::Sweep(a) => crate::memory::sweep(home, drives, a),
            Signal::Reinstate(a) => crate::memory::reinstate(home, drives, a),
        }
    }
}

/// `oracle resume|adjudicate|claim|sweep|reinstate ... --store URL`: the command is queued as
/// a signal in one transaction; the worker that next holds the run carries it out, exactly as
/// the command would have in a file home, and appends its events in order, once.
fn send(url: &str, command: Command) -> Result<u8, CliError> {
    let store = connect(url)?;
    let mut signal = Signal::of(command)
        .ok_or_else(|| CliError::input("this command cannot be sent to a store's run"))?;
    // A value read from a file here: the worker that applies it runs elsewhere.
    if let Signal::Resume(a) = &mut signal {
        a.inline_value_file()?;
    }
    let run = signal.run().to_owned();
    let kind = signal.kind();
    let json_out = signal.json_flag();
    let row = serde_json::to_value(Queued {
        format: SIGNAL_FORMAT,
        signal,
    })
    .map_err(|e| CliError::input(format!("the signal cannot be written: {e}")))?;
    let id = store.send(&run, kind, &row).map_err(pg)?;
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

/// Read-only commands: every store run named among the arguments is written into a temporary
/// home (its files and its log, byte for byte), and the command runs there.
fn read_only(url: &str, command: Command) -> Result<u8, CliError> {
    let store = connect(url)?;
    let tmp =
        tempfile::tempdir().map_err(|e| CliError::input(format!("a temporary directory: {e}")))?;
    let named: Vec<String> = std::env::args().skip(1).collect();
    // The store's rows are the authority on a run's bindings (its declared tools, for a
    // replay): this temporary home vouches for them as they are, as a worker's does.
    let host = crate::run::Drives::default().home(tmp.path(), false)?;
    for name in store.existing(&named).map_err(pg)? {
        let dir = store.hydrate(&name, tmp.path()).map_err(pg)?;
        host.adopt_bindings(&oracle_runtime::session::RunDir {
            id: name.clone(),
            paths: oracle_runtime::LogPaths::of_run(&dir),
            dir,
        })
        .map_err(|e| crate::run::host_error(e, false))?;
    }
    crate::run_command(tmp.path(), command)
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
    let before = store.checkpoints(&run).map_err(pg)?.len();
    let code = crate::run_command(tmp.path(), command)?;
    let path = dir.join(oracle_runtime::paths::CHECKPOINTS_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| CliError::input(format!("{}: {e}", path.display())))?;
    let new: Vec<String> = text.lines().skip(before).map(str::to_owned).collect();
    store.add_checkpoints(&run, &new).map_err(pg)?;
    Ok(code)
}

/// `oracle import LOG --store URL`: the log is verified and made a run in a temporary home, as
/// a file home's import does, then stored whole. Like a file home's imported run, it has no
/// plan copy: read-only commands read it; a run that had not finished is `broken` (nothing
/// could drive it on).
fn import(url: &str, a: crate::transfer::ImportArgs) -> Result<u8, CliError> {
    let store = connect(url)?;
    let tmp =
        tempfile::tempdir().map_err(|e| CliError::input(format!("a temporary directory: {e}")))?;
    let t = oracle_runtime::transfer::import(tmp.path(), a.log_path())
        .map_err(|e| crate::run::session_error(e, a.json_flag(), Some(a.log_path())))?;
    let dir = t.path.parent().unwrap_or(tmp.path()).to_path_buf();
    let records = std::fs::read(&t.path)
        .map_err(|e| CliError::input(format!("{}: {e}", t.path.display())))?;
    let (state, detail) = match state_of(&dir).as_deref() {
        Some(s @ ("completed" | "failed")) => (s.to_owned(), None),
        _ => (
            "broken".to_owned(),
            Some("imported before it finished, without its plan: nothing can drive it on"),
        ),
    };
    // The id's prefix is the local one's (`<program>-N`): a log is outside data, and its
    // program name was already reduced to a plain name there.
    let prefix = t.run.rsplit_once('-').map_or(t.run.as_str(), |(p, _)| p);
    let id = store
        .import(prefix, &dir, &records, &state, detail)
        .map_err(pg)?;
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

/// `oracle worker`: claims runs and drives them until stopped (SIGTERM or SIGINT: no new
/// claims; the runs being driven are finished or suspended, then their leases released; a
/// second signal exits at once, and their leases expire).
fn worker(url: &str, a: WorkerArgs) -> Result<u8, CliError> {
    // Fail early on a bad store; each thread opens its own connection.
    connect(url)?;
    crate::interrupt::set_worker();
    // A worker drives runs submitted from other directories (and machines): each works in
    // the directory it recorded, with this worker's tools when given.
    let drives = crate::run::Drives {
        replica: None,
        recorded_roots: true,
        tools: a
            .tools
            .iter()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()))
            .collect(),
    };
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
    std::fs::create_dir_all(&scratch)
        .map_err(|e| CliError::input(format!("{}: {e}", scratch.display())))?;
    let stop = Arc::new(AtomicBool::new(false));
    let held: Arc<Mutex<BTreeMap<String, i64>>> = Arc::default();
    {
        let stop = stop.clone();
        if let Ok(mut signals) = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
        ]) {
            std::thread::spawn(move || {
                let mut it = signals.forever();
                if it.next().is_some() {
                    eprintln!("worker   stopping: no new claims; finishing the runs in hand");
                    stop.store(true, Ordering::SeqCst);
                }
                if it.next().is_some() {
                    eprintln!(
                        "worker   stopped at once; the runs in hand go to another worker when their leases expire"
                    );
                    std::process::exit(130);
                }
            });
        }
    }
    // Lease renewal for every run in hand, on its own connection.
    {
        let held = held.clone();
        let url = url.to_owned();
        let lease_ms = a.lease_ms as i64;
        std::thread::spawn(move || {
            // A connection that fails is opened again at the next round: a lease that is not
            // renewed in time is taken over, and this worker's next commit is then refused.
            let mut store: Option<Store> = None;
            loop {
                std::thread::sleep(std::time::Duration::from_millis(a.lease_ms / 3));
                let now: Vec<(String, i64)> = held
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect();
                if now.is_empty() {
                    continue;
                }
                if store.is_none() {
                    store = Store::connect(&url).ok();
                }
                let Some(s) = &store else { continue };
                for (run, fence) in now {
                    if s.renew(&run, fence, lease_ms).is_err() {
                        store = None;
                        break;
                    }
                }
            }
        });
    }
    eprintln!(
        "worker   {name}: {} at a time, lease {} ms",
        a.concurrency, a.lease_ms
    );
    let busy = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let threads: Vec<_> = (0..a.concurrency)
        .map(|i| {
            let url = url.to_owned();
            let name = name.clone();
            let scratch = scratch.join(format!("t{i}"));
            let stop = stop.clone();
            let held = held.clone();
            let busy = busy.clone();
            let drives = drives.clone();
            let lease_ms = a.lease_ms as i64;
            let (poll_ms, until_idle) = (a.poll_ms, a.until_idle);
            std::thread::spawn(move || -> Result<(), String> {
                let mut backoff_ms = RECONNECT_MS_MIN;
                while !stop.load(Ordering::SeqCst) {
                    let store = match Store::connect(&url) {
                        Ok(s) => s,
                        // No retry fixes a schema this oracle cannot use.
                        Err(
                            e @ (oracle_pg::PgError::NotInitialised
                            | oracle_pg::PgError::Newer { .. }
                            | oracle_pg::PgError::Older { .. }),
                        ) => return Err(e.to_string()),
                        Err(e) => {
                            eprintln!(
                                "worker   the store is unreachable ({e}); trying again in {backoff_ms} ms"
                            );
                            std::thread::sleep(std::time::Duration::from_millis(backoff_ms));
                            backoff_ms = (backoff_ms * 2).min(RECONNECT_MS_MAX);
                            continue;
                        }
                    };
                    let lost = serve_claims(
                        &store, &name, lease_ms, poll_ms, until_idle, &scratch, &drives, &stop,
                        &held, &busy,
                    );
                    match lost {
                        Ok(()) => return Ok(()),
                        Err(e) => {
                            eprintln!("worker   lost the store ({e}); reconnecting");
                            backoff_ms = RECONNECT_MS_MIN;
                            std::thread::sleep(std::time::Duration::from_millis(backoff_ms));
                        }
                    }
                }
                Ok(())
            })
        })
        .collect();
    let mut failed = None;
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some("a worker thread panicked".into()),
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    match failed {
        Some(e) => Err(CliError::input(format!("worker {name}: {e}"))),
        None => Ok(exit::OK),
    }
}

/// One worker thread's loop over one connection: claim, drive, release, wait for work.
/// Returns when stopping (or idle, with `until_idle`); an error means the connection is gone.
#[allow(clippy::too_many_arguments)]
fn serve_claims(
    store: &Store,
    name: &str,
    lease_ms: i64,
    poll_ms: u64,
    until_idle: bool,
    scratch: &Path,
    drives: &crate::run::Drives,
    stop: &AtomicBool,
    held: &Mutex<BTreeMap<String, i64>>,
    busy: &std::sync::atomic::AtomicU32,
) -> Result<(), String> {
    while !stop.load(Ordering::SeqCst) {
        busy.fetch_add(1, Ordering::SeqCst);
        let claim = match store.claim(name, lease_ms) {
            Ok(c) => c,
            Err(e) => {
                busy.fetch_sub(1, Ordering::SeqCst);
                return Err(e.to_string());
            }
        };
        let Some(claim) = claim else {
            let idle = busy.fetch_sub(1, Ordering::SeqCst) == 1;
            if until_idle && idle {
                return Ok(());
            }
            store.wait(poll_ms).map_err(|e| e.to_string())?;
            continue;
        };
        held.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(claim.id.clone(), claim.fence);
        let outcome = drive_claim(store, &claim, scratch, drives);
        held.lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&claim.id);
        busy.fetch_sub(1, Ordering::SeqCst);
        match outcome {
            Ok(state) => eprintln!(
                "worker   {} (fence {}, from {}): {state}",
                claim.id, claim.fence, claim.from
            ),
            Err(e) => eprintln!("worker   {}: {e}", claim.id),
        }
    }
    Ok(())
}

/// Drives one claimed run: writes it into a scratch home, carries out its pending signals in
/// order (each one's events committed with the signal marked applied, in one transaction),
/// drives it on if it can go on, then releases it in the state its log ends in. Returns that
/// state.
fn drive_claim(
    store: &Store,
    claim: &Claim,
    scratch: &Path,
    drives: &crate::run::Drives,
) -> Result<String, String> {
    let home = scratch.join(format!("{}-{}", claim.id, claim.fence));
    let _ = std::fs::remove_dir_all(&home);
    let result = drive_in(store, claim, &home, drives);
    let _ = std::fs::remove_dir_all(&home);
    let (state, detail) = match &result {
        Ok((state, notes)) => (state.clone(), notes.clone()),
        // The store refused a commit: the run is another worker's now. Leave it alone.
        Err(Stop::Fenced(e)) => return Err(format!("lease lost, run left to its new holder: {e}")),
        Err(Stop::Broken(e)) => ("broken".to_owned(), Some(e.clone())),
    };
    match store.release(&claim.id, claim.fence, &state, detail.as_deref()) {
        Ok(true) => Ok(detail.map_or(state.clone(), |d| format!("{state}: {d}"))),
        Ok(false) => Err("lease lost before release; the run is another worker's".into()),
        Err(e) => Err(e.to_string()),
    }
}

enum Stop {
    /// The store refused a commit or the release: the lease is gone.
    Fenced(String),
    /// The run cannot be driven here (a plan that no longer compiles, a damaged log).
    Broken(String),
}

fn drive_in(
    store: &Store,
    claim: &Claim,
    home: &Path,
    drives: &crate::run::Drives,
) -> Result<(String, Option<String>), Stop> {
    let broken = |e: String| Stop::Broken(e);
    let dir = store
        .hydrate(&claim.id, home)
        .map_err(|e| broken(e.to_string()))?;
    let paths = oracle_runtime::LogPaths::of_run(&dir);
    let replica = Arc::new(Mutex::new(store.replica(&claim.id, claim.fence, None)));
    // Every writer this drive opens (signals, the start, the resume) commits to the store.
    let shared: oracle_runtime::replica::Shared = replica.clone();
    let drives = &crate::run::Drives {
        replica: Some(shared),
        ..drives.clone()
    };
    // The run's bindings come from the store's rows, written by an operator of the store
    // (`oracle submit`): this scratch home vouches for them as they are (docs/SECURITY.md).
    let host = drives.home(home, false).map_err(|e| broken(e.message))?;
    let found = oracle_runtime::session::RunDir {
        id: claim.id.clone(),
        paths: paths.clone(),
        dir: dir.clone(),
    };
    host.adopt_bindings(&found)
        .map_err(|e| broken(e.to_string()))?;
    let mut notes: Vec<String> = Vec::new();
    let outcome = (|| {
        // Whether the store refused a commit for a superseded fence: the replica says so, typed.
        let fenced = |_: &CliError| {
            replica
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .fenced()
                .is_some()
        };
        for signal in store
            .pending(&claim.id)
            .map_err(|e| broken(e.to_string()))?
        {
            replica
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .consume_next(Some(signal.id));
            let result = apply_signal(home, drives, &claim.id, &signal.body);
            let consumed = replica.lock().unwrap_or_else(|p| p.into_inner()).consumed();
            replica
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .consume_next(None);
            if let Err(e) = &result
                && fenced(e)
            {
                return Err(Stop::Fenced(e.message.clone()));
            }
            if consumed.is_none() {
                let outcome = match &result {
                    Ok(_) => "applied: nothing to record".to_owned(),
                    Err(e) => format!("refused (exit {}): {}", e.code, e.message),
                };
                if result.is_err() {
                    notes.push(format!("signal {} {outcome}", signal.id));
                }
                store
                    .settle(&claim.id, claim.fence, signal.id, &outcome)
                    .map_err(|e| Stop::Fenced(e.to_string()))?;
            }
        }
        // Go on where the log leaves off: from the start, or after a crash or a release.
        let log_exists = paths.log.is_file();
        let state = state_of(&dir);
        let drive = match (log_exists, state.as_deref()) {
            (false, _) => Some(crate::run::start_submitted(&host, &claim.id)),
            // A verdict recorded after the run suspended on a belief, whose resume did not
            // happen (its worker died in between, or it was sent without --resume): go on, as
            // `oracle resume RUN` would.
            (true, Some("suspended")) if verdict_after_belief_wait(&dir) => Some(
                crate::run::resume_after_verdict(home, drives, &claim.id, false, None),
            ),
            (true, Some(_)) => None,
            (true, None) => Some(crate::run::resume_after_verdict(
                home, drives, &claim.id, false, None,
            )),
        };
        if let Some(Err(e)) = drive {
            if fenced(&e) {
                return Err(Stop::Fenced(e.message));
            }
            // A run that stops with an error of its own (a step failing is not one) is left
            // for a person: its log is what the store holds.
            return Err(broken(e.message));
        }
        let _ = store.upload_files(&claim.id, claim.fence, &dir);
        Ok(state_of(&dir).unwrap_or_else(|| "runnable".to_owned()))
    })();
    outcome.map(|state| (state, (!notes.is_empty()).then(|| notes.join("; "))))
}

/// Whether the log ends in an outside event (a verdict, a claim) recorded after the program
/// suspended waiting on a belief: a resume may now find the belief resolved.
fn verdict_after_belief_wait(dir: &Path) -> bool {
    let paths = oracle_runtime::LogPaths::of_run(dir);
    let Ok(events) = oracle_runtime::recorded::Recorded::read(&paths.log) else {
        return false;
    };
    let last_external = events
        .len()
        .checked_sub(1)
        .and_then(|seq| events.kind(seq))
        .is_some_and(|k| k.is_external());
    let belief_wait = match session::last_program_event(&events)
        .as_ref()
        .map(|e| e.typed())
    {
        Some(Ok(oracle_core::Payload::Suspended(s))) => session::is_belief_wait(&events, &s.step),
        _ => false,
    };
    last_external && belief_wait
}

/// The state a run's log ends in: `completed`, `failed`, `suspended`, or `None` (it can go on).
fn state_of(dir: &Path) -> Option<String> {
    let paths = oracle_runtime::LogPaths::of_run(dir);
    let events = oracle_runtime::recorded::Recorded::read(&paths.log).ok()?;
    match session::last_program_event(&events)
        .as_ref()
        .map(|e| e.typed())
    {
        Some(Ok(oracle_core::Payload::RunFinished(f))) => Some(
            match f.status {
                oracle_core::payload::RunStatus::Completed => "completed",
                oracle_core::payload::RunStatus::Failed => "failed",
            }
            .to_owned(),
        ),
        Some(Ok(oracle_core::Payload::Suspended(_))) => Some("suspended".to_owned()),
        _ => None,
    }
}

/// Carries out a signal: its row read as the typed command it was sent as (never a command line
/// parsed again), run against the scratch home, so that it records exactly what it would have
/// recorded in a file home.
fn apply_signal(
    home: &Path,
    drives: &crate::run::Drives,
    run: &str,
    body: &Value,
) -> Result<u8, CliError> {
    if body.get("argv").is_some() {
        return Err(CliError::input(
            "a signal queued by an older oracle as an argument list: send it again",
        ));
    }
    let queued: Queued = serde_json::from_value(body.clone())
        .map_err(|e| CliError::input(format!("a signal that is not one: {e}")))?;
    if queued.format != SIGNAL_FORMAT {
        return Err(CliError::input(format!(
            "a signal of format {} (this oracle reads format {SIGNAL_FORMAT}): upgrade the worker",
            queued.format
        )));
    }
    if queued.signal.run() != run {
        return Err(CliError::input(format!(
            "a signal for another run than {run}"
        )));
    }
    queued.signal.apply(home, drives)
}
