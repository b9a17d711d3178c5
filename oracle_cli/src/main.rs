//! `oracle`: the command line of the deterministic agent runtime. The only user of clap; maps
//! every error to one of the documented exit codes.

// Store errors are large on purpose (seq, offset, both hashes); see oracle_runtime/src/lib.rs.
#![allow(clippy::result_large_err)]

// First, so its `out!` and `outln!` macros are visible in every module below.
#[macro_use]
mod out;

mod auction;
mod checkpoint;
mod config;
mod demand;
mod dev;
mod diff;
mod event;
mod evolve;
mod exit;
mod files;
mod follow;
mod interrupt;
mod lsp;
mod maintain;
mod memory;
mod plan;
mod plan_fmt;
mod progress;
mod queue;
mod report;
mod run;
mod schedule;
mod serve;
mod show;
mod spans;
mod store;
mod stores;
mod tools;
mod transfer;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::exit::CliError;

/// Deterministic, auditable, replayable agents: every decision, capability check, tool call and
/// state change is a hashed, causally linked event in an append-only log.
///
/// Exit codes: 0 success; 1 a run failed (or `diff` found a difference); 2 usage or input
/// error; 3 a run is suspended awaiting input; 4 integrity or divergence failure; for
/// `adjudicate`: 5 unknown handle, 6 already resolved, 7 expired.
#[derive(Parser, Debug)]
#[command(
    name = "oracle",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    /// Where runs live (default: $ORACLE_HOME, else ./.oracle). Runs are `<home>/runs/<id>/`.
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Keep runs in PostgreSQL instead (default: $ORACLE_STORE): `postgres://USER@HOST/DB`.
    /// `oracle submit` queues runs, `oracle worker` drives them; resume, adjudicate, claim,
    /// sweep and reinstate are sent to the run as signals; read-only commands read the store.
    /// See docs/STORE.md.
    #[arg(long, global = true, value_name = "URL")]
    store: Option<String>,
    /// Colour output: `auto` (a terminal, unless NO_COLOR is set), `always` or `never`.
    #[arg(long, global = true, value_enum, default_value_t = out::ColorChoice::Auto)]
    color: out::ColorChoice,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run a plan: every capability check, tool call and state change is recorded in a new
    /// run under `<home>/runs/<id>/`. Exit 0 completed, 1 a step failed under `stop`, 3
    /// suspended (waiting for `oracle resume`), 2 bad plan or arguments (nothing is started).
    Run(run::RunArgs),
    /// Continue a run: a suspended one with the value its step waits for (`--step S --value
    /// JSON`), or an interrupted one (crash, kill) without. Earlier decisions are re-derived and
    /// checked against the log; impure tools are not executed again (pure ones are, and must
    /// match), except an impure call in flight at a crash (at-least-once). Same exit codes as `run`.
    Resume(run::ResumeArgs),
    /// Fork a run: a new run that holds the parent's events up to the fork point byte for
    /// byte, then a recorded `forked` event (parent, its head there, who), then goes on: with
    /// `--value` the step's output is that value, without it the step runs again, with `--plan`
    /// under a new plan that must re-derive the shared events first. `oracle verify FORK
    /// --parent PARENT` proves the shared prefix. A damaged log forks at any point before its
    /// first damaged event (only that prefix is read). Same exit codes as `run`; 4 when `--plan`
    /// does not re-derive the prefix, or the point is at or past a damaged log's damage
    /// (`integrity`; nothing created).
    Fork(run::ForkArgs),
    /// Recover a damaged run: a new run from the valid prefix of its log, forked at the last
    /// decision boundary before the first damaged event and recorded as `forked` with reason
    /// `recovered` and the BLAKE3 hash of the damaged log; then driven on like any fork. The
    /// damaged log is never changed or deleted (a copy is kept under `<home>/damaged/`). Prints
    /// the new run, the parent's last valid event and where the copy is (`--json`: `recovered`).
    /// Exit as the new run's status (0 completed, 1 failed, 3 suspended); 2 when the log
    /// verifies whole (`nothing_to_recover`, nothing written) or no decision boundary precedes
    /// the damage (`fork_point`, nothing created).
    Recover(run::RecoverArgs),
    /// End a run that has not finished with a recorded `cancelled` outcome (who and why), as
    /// its last event: a suspended or interrupted run at once; a run another process drives
    /// at its next decision boundary (never inside a round). A cancelled run verifies and
    /// replays like any other. Exit 0 cancelled or requested, 2 finished already or unknown.
    Cancel(run::CancelArgs),
    /// Send an outside event to a run: kept beside it (checked first against the `schema` of
    /// every `wait.event` step of its plan with that name; refused, nothing kept, when none
    /// waits on it or the value does not fit) until the run waits on it, then recorded as that
    /// step's answer. A run waiting on it now is resumed. Exit 0 kept, 2 refused.
    Signal(event::SignalArgs),
    /// Re-execute a run against its log: pure tools run again and must give the recorded
    /// output; impure outputs and human answers come from the log; every event and state hash
    /// must match. Exit 0 reproduced, 4 with a report of the first divergence.
    Replay(run::ReplayArgs),
    /// List runs with their status; `--status suspended` shows pending human work.
    Runs(run::RunsArgs),
    /// Check the integrity of a log: every hash, link, seq, time and state link, streaming on all
    /// cores. Exit 0 valid, 4 integrity failure (first bad seq and why), 2 unreadable input or
    /// a log with no events.
    Verify(verify::VerifyArgs),
    /// Make an Ed25519 key pair for signing checkpoints: the secret key to `--out FILE` (mode
    /// 0600) and the public key to FILE.pub. Never overwrites a file (exit 2).
    Keygen(checkpoint::KeygenArgs),
    /// Sign the log's head as it is now (after verifying the log): the last event's seq and
    /// chain hash, signed with `--key`, appended to `checkpoints.jsonl` beside the log (not part
    /// of the chain) and to the run's witness beside the key (KEY.witnesses/). `oracle verify
    /// --pubkey` then catches a log rewritten or cut short after it, and checkpoints cut off.
    /// Exit 0 signed, 4 the log is damaged, 2 bad key file or input.
    Checkpoint(checkpoint::CheckpointArgs),
    /// List events as a table (seq, time, kind, short hash, summary) or as JSON lines.
    Log(show::LogArgs),
    /// Show the state (keys and values) and its hash after an event, rebuilt from the nearest
    /// snapshot that matches the log.
    Inspect(show::InspectArgs),
    /// Move a torn final record (a write cut short by a crash) aside into a file and cut it from
    /// the log. Never touches damage before the tail: that is an integrity error (exit 4).
    Repair(maintain::RepairArgs),
    /// Save a snapshot of the state after an event, so later `inspect` and replays start there.
    Snapshot(maintain::SnapshotArgs),
    /// Find the first event where two runs differ and explain it: both logs are verified, then
    /// a binary search over chain hashes reads O(log n) events. Exit 0 identical, 1 different,
    /// 2 trouble (e.g. an invalid log).
    Diff(diff::DiffArgs),
    /// Show a run's belief memory: per line (subject / predicate) the belief (resolved,
    /// contested, no belief, timing uncertain) and every claim with its disposition and where
    /// it was recorded; `--as-of TICK` shows what was believed then.
    Memory(memory::MemoryArgs),
    /// List a run's adjudications (conflicts sent to the oracle): pending, resolved, expired.
    Adjudications(memory::AdjudicationsArgs),
    /// Give the oracle's verdict on a pending adjudication: one event appended under the run's
    /// lock. Exit 0 applied, 5 unknown handle, 6 already resolved (the original verdict is
    /// shown), 7 expired, 2 refused evidence; nothing is written unless it applies.
    Adjudicate(memory::AdjudicateArgs),
    /// Turn adjudications whose expiry has passed into contested claims (one event). A second
    /// sweep finds nothing and writes nothing.
    Sweep(memory::SweepArgs),
    /// Record a claim from outside the plan (new evidence) in a run at rest: one event appended
    /// under the run's lock, through the same gate as `memory.assert` (it commits, opens a new
    /// adjudication, or is refused with the gate's reason). The way out of `contested`. Exit 0
    /// recorded, 2 refused or bad input (nothing written).
    Claim(memory::ClaimArgs),
    /// Make a superseded claim live again: a verdict that names it, with first-hand evidence
    /// (one `reinstated` event under the run's lock). It is committed over its whole window and
    /// settles its line as an `affirm` would. Exit 0 recorded, 2 refused or bad input, 5 no
    /// such claim (nothing written on any refusal).
    Reinstate(memory::ReinstateArgs),
    /// Which earlier events a run's next H events actually need (causal parents, tool calls,
    /// state keys, memory claims, file paths), and how many faults working-set policies of
    /// given budgets make serving them, against the optimal oracle (Belady). Exit 0, 2 bad
    /// input, 4 a damaged log.
    Demand(demand::DemandArgs),
    /// Show a run's auction economy: per auction the bids, winners, prices, scores, credits
    /// minted and basic income paid, then the balances and supply. Rebuilt from the log, every
    /// recorded outcome checked against the rules. Exit 0, 2 no economy or bad input, 4 a
    /// damaged log or an outcome that does not follow.
    Auction(auction::AuctionArgs),
    /// Write a run as one self-contained HTML page (`--html FILE`): summary, the plan's step
    /// graph coloured by status, the state and beliefs after an event (`--at SEQ`), and its
    /// events. No script, no request. Exit 0 written, 2 FILE exists (without --force) or bad
    /// input, 4 a damaged log.
    Report(report::ReportArgs),
    /// Check, draw and hash plans (the text programs agents run).
    Plan(plan::PlanArgs),
    /// Serve the language server for plans on stdin and stdout (docs/PLAN.md, "Editor
    /// support"): diagnostics as you type (the codes of `plan check`), hover, go to definition
    /// and completion. Started by an editor. Exit 0 after the client's shutdown and exit, 1 if
    /// it exits without shutdown or the connection breaks.
    Lsp,
    /// Declared tools (exec programs, WebAssembly modules, MCP servers; docs/TOOLS.md): list
    /// them, check a directory of manifests, call one outside a run, audit a run's pure calls.
    Tools(tools::ToolsArgs),
    /// Write a run's log as one JSONL file, byte-identical to the run's and verified.
    Export(transfer::ExportArgs),
    /// Make a new run of a log file, after verifying it (no plan copy: verify, log, inspect,
    /// diff and memory read it; replay and resume need its plan).
    Import(transfer::ImportArgs),
    /// Serve the HTTP JSON API over the home (docs/API.md): runs, events (paged, or live as
    /// Server-Sent Events), state, beliefs, the inbox of suspended steps and pending
    /// adjudications, and answers, verdicts and claims sent back (each recorded with the name of
    /// the token that sent it). `oracle serve token add NAME` makes a token. Stops on SIGTERM or
    /// SIGINT.
    Serve(serve::ServeArgs),
    /// Schedules: start a plan on a cron pattern in a time zone (`add`, `list`, `pause`,
    /// `resume`, `remove`, `trigger`), kept in the home; `oracle serve` fires each tick
    /// exactly once (docs/PLAN.md, "Schedules").
    Schedule(schedule::ScheduleArgs),
    /// Named queues: `set` makes one or changes its limits (concurrency, rate, partition
    /// concurrency), `list` shows them; `oracle run --queue NAME` waits its turn in one
    /// (docs/PLAN.md, "Queues").
    Queue(queue::QueueArgs),
    /// Create or migrate a PostgreSQL store's schema (`init`), or summarise it (`status`).
    /// Needs --store URL or $ORACLE_STORE.
    Store(store::StoreArgs),
    /// Queue a run of a plan in the store (same flags as `run`): every check `run` makes
    /// happens here, the run's id is printed at once, and a worker drives it. Exit 0 queued, 2
    /// bad plan or input (nothing queued).
    Submit(run::RunArgs),
    /// Drive the store's runs: claim submitted runs, suspended runs whose signal arrived, and
    /// runs whose worker died (lease expired), with `FOR UPDATE SKIP LOCKED`; wake on
    /// LISTEN/NOTIFY, else poll. SIGTERM: no new claims, finish the runs in hand, release.
    Worker(store::WorkerArgs),
    /// Write a synthetic log of any size (deterministic in --seed) for benchmarks and tests.
    Synth(maintain::SynthArgs),
    /// Print a shell completion script: `oracle completions bash > ~/.local/share/bash-completion/completions/oracle`
    /// (zsh, fish and powershell likewise). Generated from the same definitions as the parser.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of `oracle`: `oracle man > oracle.1; man ./oracle.1`.
    Man,
    /// The config files (`oracle.toml` here, `~/.config/oracle/config.toml`; docs/CONFIG.md):
    /// `show` prints every setting in effect and where it came from, `path` the files read,
    /// `trust` and `untrust` whether a project's file may choose secrets, endpoints, programs.
    Config(config::ConfigArgs),
    /// Governed evolution (docs/EVOLUTION.md): plan changes the runs proposed (`list`, `show`
    /// with a diff), checked against recorded runs (`check`: a report and its BLAKE3 hash),
    /// approved with an Ed25519 signature or rejected (`approve`, `reject`) in the home's
    /// hash-chained ledger (`verify`), the lineage of approved plans (`lineage`), and the
    /// policy that refuses an unapproved proposal's plan (`policy`).
    Evolve(evolve::EvolveArgs),
    /// Test helpers, not for real work: `dev llm-stub`, a scripted model server, `dev
    /// mcp-example`, an example MCP server, and `dev machine`, the CPU line benchmarks print.
    /// Built in so that the README's walkthroughs need nothing but this binary.
    Dev(dev::DevArgs),
}

/// An unknown subcommand's error, with the closest subcommand by edit distance named first
/// when clap's own tip misses it (clap compares by Jaro similarity, which never offers `run`
/// for `rn`): `None` when there is nothing to add.
fn with_closest_subcommand(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::InvalidSubcommand {
        return None;
    }
    let Some(ContextValue::String(given)) = e.get(ContextKind::InvalidSubcommand) else {
        return None;
    };
    let cmd = <Cli as clap::CommandFactory>::command();
    let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
    let closest = oracle_plan::diagnostic::closest(given, names.iter().copied())?;
    let text = e.to_string();
    if text.contains(&format!("'{closest}'")) {
        return None;
    }
    let tip = format!("  tip: a similar subcommand exists: '{closest}'");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    match lines
        .iter()
        .position(|l| l.trim_start().starts_with("tip:"))
    {
        Some(i) => lines.insert(i, tip),
        None => lines.splice(1..1, [String::new(), tip]).for_each(drop),
    }
    Some(lines.join("\n") + "\n")
}

fn main() -> ExitCode {
    // `--json` anywhere among the arguments (every command that has it takes it as a flag).
    let json_mode = std::env::args_os().any(|a| a == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `--now -5`: clap reads `-5` as a flag and advises `-- -5`, which is wrong here.
            // Every number oracle takes is a whole number from 0 up: say so instead.
            let negative = std::env::args().skip(1).find(|a| {
                a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| c.is_ascii_digit())
            });
            if let Some(n) = negative
                && e.kind() == clap::error::ErrorKind::UnknownArgument
            {
                let message = format!(
                    "`{n}` is negative: every number oracle takes (ticks, seqs, counts, seeds, limits) is a whole number from 0 up"
                );
                if json_mode {
                    let doc = serde_json::json!({
                        "ok": false,
                        "error": exit::error_json(
                            Some(serde_json::json!({"kind": "usage"})),
                            exit::INPUT,
                            &message,
                        ),
                    });
                    let _ = out::json(&doc).and_then(|()| out::flush());
                }
                eprintln!("error: {message}");
                return ExitCode::from(exit::INPUT);
            }
            if !json_mode && let Some(text) = with_closest_subcommand(&e) {
                eprint!("{text}");
                return ExitCode::from(exit::INPUT);
            }
            // A usage error under --json is one JSON document too (help and --version are not
            // errors and print as usual).
            if json_mode && e.use_stderr() {
                let message = e.to_string();
                let first = message.lines().next().unwrap_or_default();
                let first = first.strip_prefix("error: ").unwrap_or(first);
                let doc = serde_json::json!({
                    "ok": false,
                    "error": exit::error_json(
                        Some(serde_json::json!({"kind": "usage"})),
                        exit::INPUT,
                        first,
                    ),
                });
                let _ = out::json(&doc).and_then(|()| out::flush());
            }
            e.exit()
        }
    };
    out::set_color(cli.color);
    let mut cli = match cli.command {
        // A helper serves until its client is done, with no home, store, config file or output
        // of ours.
        Command::Dev(a) => return dev::main(a),
        command => Cli { command, ..cli },
    };
    // The config files go under the flags here; a file that cannot be used is the error.
    let configured = config::apply(&mut cli);
    let command = cli.command;
    let home = oracle_host::home_dir(cli.home.as_deref());
    let result = match configured.and_then(|()| store::url(cli.store)) {
        Err(e) => Err(e),
        Ok(Some(url)) => match store::dispatch(&url, command) {
            Ok(result) => result,
            Err(command) => run_command(&home, command),
        },
        Ok(None) => run_command(&home, command),
    };
    // Output still buffered goes out before the exit code is decided: failing to write it is
    // an error like any other write.
    let result = result.and_then(|code| out::flush().map(|()| code));
    match result {
        Ok(code) => ExitCode::from(code),
        // The reader of stdout went away (`oracle runs | head -1`): stop quietly, like `git log`.
        Err(e) if e.quiet => ExitCode::from(exit::OK),
        Err(err) => {
            // Under --json every failure prints one JSON document: the command's own report if
            // it printed one (it carries the same `error` object), else this one.
            if json_mode && !out::printed_json() {
                let doc = serde_json::json!({"ok": false, "error": err.error_value()});
                if let Err(e) = out::json(&doc)
                    && e.quiet
                {
                    return ExitCode::from(exit::OK);
                }
            }
            let CliError { code, message, .. } = err;
            match out::flush() {
                // What the command printed before failing (its `--json` report) goes out first.
                // If stdout turns out to be closed, the same quiet exit as above.
                Err(e) if e.quiet => ExitCode::from(exit::OK),
                _ => {
                    eprintln!("error: {message}");
                    ExitCode::from(code)
                }
            }
        }
    }
}

/// Runs one command against the file home `home`.
pub(crate) fn run_command(home: &std::path::Path, command: Command) -> Result<u8, CliError> {
    run_command_in(home, None, command)
}

/// Runs one command against the file home `home`, with the named belief stores the
/// database's when one is given (`--store URL`).
pub(crate) fn run_command_in(
    home: &std::path::Path,
    database: Option<&oracle_host::Database>,
    command: Command,
) -> Result<u8, CliError> {
    let home = home.to_path_buf();
    match command {
        Command::Run(a) => run::run(&home, a),
        Command::Store(_) | Command::Submit(_) | Command::Worker(_) => Err(CliError::input(
            "this command needs a PostgreSQL store: give --store postgres://USER@HOST/DB or set ORACLE_STORE (docs/STORE.md)",
        )),
        Command::Resume(a) => run::resume(&home, a),
        Command::Fork(a) => run::fork(&home, a),
        Command::Recover(a) => run::recover(&home, a),
        Command::Cancel(a) => run::cancel(&home, a),
        Command::Signal(a) => event::run(&home, a),
        Command::Replay(a) => run::replay(&home, a),
        Command::Runs(a) => run::runs(&home, a),
        Command::Verify(a) => verify::run(&home, database, a),
        Command::Keygen(a) => checkpoint::keygen(a),
        Command::Checkpoint(a) => checkpoint::checkpoint(&home, a),
        Command::Log(a) => show::log(&home, a),
        Command::Inspect(a) => show::inspect(&home, a),
        Command::Repair(a) => maintain::repair(&home, a),
        Command::Snapshot(a) => maintain::snapshot(&home, a),
        Command::Synth(a) => maintain::synth(&home, a),
        Command::Serve(a) => serve::run(&home, a),
        Command::Schedule(a) => schedule::run(&home, a),
        Command::Queue(a) => queue::run(&home, a),
        Command::Plan(a) => plan::run(a),
        Command::Lsp => lsp::run(),
        Command::Dev(_) => Err(CliError::input("`oracle dev` runs on its own, not here")),
        Command::Tools(a) => tools::run(&home, a),
        Command::Export(a) => transfer::export(&home, a),
        Command::Import(a) => transfer::import(&home, a),
        Command::Memory(a) => memory::memory(&home, database, a),
        Command::Adjudications(a) => memory::adjudications(&home, database, a),
        Command::Adjudicate(a) => memory::adjudicate(&home, database, a),
        Command::Sweep(a) => memory::sweep(&home, database, a),
        Command::Claim(a) => memory::claim(&home, database, a),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, "oracle", &mut buf);
            out::write_bytes(&buf).map(|()| exit::OK)
        }
        Command::Man => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                .render(&mut buf)
                .map_err(|e| exit::CliError::input(format!("man page: {e}")))
                .and_then(|()| out::write_bytes(&buf).map(|()| exit::OK))
        }
        Command::Reinstate(a) => memory::reinstate(&home, database, a),
        Command::Diff(a) => diff::run(&home, a),
        Command::Demand(a) => demand::run(&home, a),
        Command::Auction(a) => auction::run(&home, a),
        Command::Report(a) => report::run(&home, a),
        Command::Config(a) => config::run(a),
        Command::Evolve(a) => evolve::run(&home, a),
    }
}

/// Resolves a user-named run or log, or explains what was expected.
pub(crate) fn resolve(
    home: &std::path::Path,
    target: &std::path::Path,
) -> Result<oracle_host::LogPaths, CliError> {
    // One wording (and "did you mean") for a run that cannot be found, whatever the command.
    oracle_host::inspect::resolve(home, target).map_err(|e| CliError::input(e.to_string()))
}
