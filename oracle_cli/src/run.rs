//! `oracle run | resume | replay | runs`: execute plans, continue them, re-execute them against
//! their record, and list them.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use oracle_core::diff::Divergence;
use oracle_host::inspect;
use oracle_host::signal::{Answer, DriveSettings, Signal};
use oracle_host::tools::Replaying;
use oracle_host::{Ending, EngineError, Progress, Report, Session, SessionError, StartOptions};
use oracle_host::{Given, Home, HostError, Resume, Start, ToolChange};
use serde_json::{Value, json};

use crate::diff::class_text;
use crate::exit::{self, CliError};
use crate::maintain::DurabilityArg;
use oracle_memory::MemorySettings;
use oracle_memory::tools::BELIEF_WAIT_PREFIX;

/// Default for `--jobs`: tools of one round run one at a time unless asked.
const JOBS_DEFAULT: u32 = 1;

/// Options of the commands that drive a run and append to its log (`run`, `resume`).
#[derive(Args, Debug, serde::Serialize, serde::Deserialize)]
pub struct DriveArgs {
    /// Tools of one round that may execute at once. The log is the same whatever N is.
    #[arg(long, default_value_t = JOBS_DEFAULT, value_parser = clap::value_parser!(u32).range(1..=256))]
    jobs: u32,
    /// When appends are synced to disk.
    #[arg(long, value_enum, default_value_t = DurabilityArg::Effect)]
    durability: DurabilityArg,
    /// Write a resume point (the engine's state, beside the log in `snapshots/`) after every
    /// EVENTS appended events, or as many as the state has keys if more: `resume` then
    /// re-derives only the events after the newest one. 0: none. Never changes the log.
    #[arg(long, value_name = "EVENTS", default_value_t = oracle_host::EVERY_EVENTS_DEFAULT)]
    snapshot_every: u64,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
    /// After the drive, send each new adjudication request to PROGRAM as JSON on stdin (exit
    /// 0 = delivered). Failed deliveries are recorded in the run's `notifications.jsonl` and
    /// tried again later; the pending request itself is in the log and is never lost.
    #[arg(long, value_name = "PROGRAM")]
    pub(crate) oracle_cmd: Option<PathBuf>,
    /// Score auction winners with PROGRAM instead of the built-in rubric: it gets the
    /// artifact's text on stdin and prints `{"score": 0..=100, "reason": "..."}`. Its answers
    /// are recorded; replay never runs it. A failure (exit status, bad output, 30 s timeout) is
    /// a recorded scoring failure.
    #[arg(long, value_name = "PROGRAM")]
    scorer_cmd: Option<PathBuf>,
    /// Bind a model name the plan uses (`llm.chat { model: "fast", ... }`) to an
    /// OpenAI-compatible base URL, e.g. `fast=http://127.0.0.1:8080/v1` (repeatable). Kept in
    /// the run's run.json, never in the log; `resume` reuses it unless given again.
    #[arg(long = "model", value_name = "NAME=URL")]
    models: Vec<String>,
    /// The model id sent for NAME (default: NAME itself), e.g. `fast=qwen2.5-7b-instruct`.
    #[arg(long = "model-id", value_name = "NAME=ID")]
    model_ids: Vec<String>,
    /// Where NAME's API key comes from (sent as `Authorization: Bearer`): a run secret's name
    /// (`--secret`) or an environment variable, e.g. `fast=OPENAI_API_KEY`. Only names are kept;
    /// the value never is.
    #[arg(long = "model-key", value_name = "NAME=ENV_VAR")]
    model_keys: Vec<String>,
    /// Ask model NAME's endpoint to stream its replies (`stream: true`): the pieces go live
    /// to `--follow` and `oracle serve`'s watchers; the log records the whole reply, the same
    /// bytes as without (repeatable). Kept in run.json with the binding.
    #[arg(long = "model-stream", value_name = "NAME")]
    model_streams: Vec<String>,
    /// At most N calls of model NAME in any second, minute or hour, `NAME=N/s|m|h` (e.g.
    /// `fast=60/m`; repeatable): a call waits for its turn, across every run of the home,
    /// instead of meeting the provider's 429. Never recorded (docs/CONFIG.md, "Rate limits").
    #[arg(long = "model-rate", value_name = "NAME=N/P")]
    #[serde(default)]
    model_rates: Vec<String>,
    /// At most N tokens of model NAME per period, `NAME=N/s|m|h` (e.g. `fast=100000/m`),
    /// charged after each call with what its reply reported (repeatable).
    #[arg(long = "model-tokens", value_name = "NAME=N/P")]
    #[serde(default)]
    model_tokens: Vec<String>,
    /// At most N calls of declared tool TOOL per period, `TOOL=N/s|m|h` (repeatable).
    #[arg(long = "tool-rate", value_name = "TOOL=N/P")]
    #[serde(default)]
    tool_rates: Vec<String>,
    /// Print each piece of a streamed model reply on stderr as it arrives (`--model-stream`);
    /// never recorded.
    #[arg(long)]
    #[serde(skip)]
    follow: bool,
    /// Send the run's spans to an OpenTelemetry collector while it runs (OTLP/HTTP protobuf):
    /// URL is its base (`/v1/traces` is added); without URL, `OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// else http://localhost:4318. The same spans and trace as `oracle export --otlp`; a
    /// collector that does not take them is a warning, never a failure or a wait.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    #[serde(skip)]
    otlp: Option<String>,
    /// A secret the plan may use as `secret("NAME")` (in `http.request` headers and
    /// `proc.exec`'s `env`), read from ENV_VAR (repeatable). Its value is never recorded or
    /// written: a call whose input, output or error would contain it fails instead. run.json
    /// keeps NAME=ENV_VAR so `resume` reads the same variable again.
    #[arg(long = "secret", value_name = "NAME=ENV_VAR")]
    secrets: Vec<String>,
    #[command(flatten)]
    tools: crate::tools::ToolDirs,
    /// `[evolution] require_approval` of the config file (never a flag): a proposed plan
    /// nobody approved is refused (docs/EVOLUTION.md).
    #[arg(skip)]
    #[serde(skip)]
    pub(crate) require_approval: bool,
}

impl ResumeArgs {
    /// `[evolution] require_approval` and the rates of the config file (`crate::config`).
    pub(crate) fn configure(&mut self, settings: &crate::config::Settings) {
        self.drive.require_approval = settings.require_approval();
        self.drive.fill_rates(settings);
    }
}

impl ForkArgs {
    /// `[evolution] require_approval` and the rates of the config file (`crate::config`).
    pub(crate) fn configure(&mut self, settings: &crate::config::Settings) {
        self.drive.require_approval = settings.require_approval();
        self.drive.fill_rates(settings);
    }
}

impl RunArgs {
    /// `--json`.
    pub(crate) fn json(&self) -> bool {
        self.drive.json
    }

    /// `--key`.
    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// Puts the config file's bindings under this new run's flags (`crate::config`).
    pub(crate) fn configure(&mut self, settings: &crate::config::Settings) {
        let d = &mut self.drive;
        settings.fill_bindings(
            &mut d.models,
            &mut d.model_ids,
            &mut d.model_keys,
            &mut d.secrets,
            &mut d.tools.dirs,
        );
        d.require_approval = settings.require_approval();
        d.fill_rates(settings);
    }
}

/// `n` with the singular or plural noun: "1 tool call", "3 tool calls".
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Refuses a program that cannot be started (`--oracle-cmd`, `--scorer-cmd`) before anything
/// runs, naming it: a path (with a `/`) must be an executable file, a bare name must be one on
/// `PATH`. Otherwise every delivery or score would fail later, in the log only.
pub(crate) fn check_program(flag: &str, program: Option<&Path>) -> Result<(), CliError> {
    use std::os::unix::fs::PermissionsExt;
    let Some(program) = program else {
        return Ok(());
    };
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let text = program.display().to_string();
    let found = if text.contains('/') {
        executable(program)
    } else {
        std::env::var_os("PATH").is_some_and(|paths| {
            std::env::split_paths(&paths).any(|d| executable(&d.join(program)))
        })
    };
    if found {
        return Ok(());
    }
    let why = if text.contains('/') {
        match std::fs::metadata(program) {
            Err(_) => "no such file".to_owned(),
            Ok(m) if !m.is_file() => "not a file".to_owned(),
            Ok(_) => "not executable (chmod +x it)".to_owned(),
        }
    } else {
        "no such program on PATH (give a path, e.g. ./NAME)".to_owned()
    };
    Err(CliError::input(format!(
        "{flag} {text}: cannot be started: {why}; nothing was run"
    )))
}

impl DriveArgs {
    /// The bindings this command gives (`--model`, `--model-id`, `--model-key`, `--secret`,
    /// `--tools`), for the host to put over what a run keeps.
    fn given(&self) -> Given {
        Given {
            models: self.models.clone(),
            model_ids: self.model_ids.clone(),
            model_keys: self.model_keys.clone(),
            model_streams: self.model_streams.clone(),
            secrets: self.secrets.clone(),
            tools: self.tools.dirs.clone(),
            model_rates: self.model_rates.clone(),
            model_tokens: self.model_tokens.clone(),
            tool_rates: self.tool_rates.clone(),
        }
    }

    /// Puts the config file's rates under this drive's flags (`crate::config`).
    fn fill_rates(&mut self, settings: &crate::config::Settings) {
        settings.fill_rates(
            &mut self.model_rates,
            &mut self.model_tokens,
            &mut self.tool_rates,
        );
    }

    /// Checks the programs this drive would call (see [`check_program`]).
    fn check_programs(&self) -> Result<(), CliError> {
        check_program("--oracle-cmd", self.oracle_cmd.as_deref())?;
        check_program("--scorer-cmd", self.scorer_cmd.as_deref())
    }

    fn points(&self) -> oracle_host::Policy {
        oracle_host::Policy {
            every_events: self.snapshot_every,
            ..Default::default()
        }
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The plan to run.
    plan: PathBuf,
    /// Seed of every random choice in the run (recorded in its first event): 0 to 2^64 - 1.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = parse_seed)]
    seed: u64,
    /// A run input, `name=value` (repeatable). Strings as written; ints, bools and JSON parsed.
    #[arg(long = "input", value_name = "NAME=VALUE")]
    inputs: Vec<String>,
    /// A capability granted beyond the plan's own `grant` lines (repeatable), e.g.
    /// `fs:read:data/**`. Recorded in the run's first event.
    #[arg(long = "grant", value_name = "CAP")]
    grants: Vec<String>,
    /// Run without an adjudication oracle: a claim that contradicts a live belief becomes
    /// `contested` at once instead of being queued for a verdict (recorded in the first event).
    #[arg(long)]
    no_oracle: bool,
    /// When a queued adjudication expires (its claims become contested): a whole number is
    /// logical ticks (`oracle sweep` then expires it; at most TIME_MAX, 2^53); a duration
    /// (`48h`, `2d`, `30s`) is wall time, and `oracle serve` expires it when due. Default:
    /// requests wait indefinitely.
    #[arg(long, value_name = "TICKS|DURATION", conflicts_with = "no_oracle", value_parser = parse_expiry)]
    adjudication_expiry: Option<Expiry>,
    /// Attach the run's belief memory to the named store shared by runs (made if new): its
    /// memory tools read and publish there, and every answer is recorded. `input.NAME` takes
    /// the store's name from that run input (one store per user).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["no_oracle", "adjudication_expiry"])]
    memory: Option<String>,
    /// Most `llm.chat` calls the run may make, failed attempts included (recorded in its first
    /// event). A call past it fails without reaching the model, recorded; a step with
    /// `on failure yield` then waits for a person, any other fails the run.
    #[arg(long, value_name = "N")]
    max_model_calls: Option<u64>,
    /// Most tokens (prompt and completion, from the replies' recorded usage) the run may spend
    /// on models, checked before each call: a call once N are used fails as above.
    #[arg(long, value_name = "N")]
    max_tokens_total: Option<u64>,
    /// An idempotency key (at most 256 bytes), recorded in the run's first event: a second
    /// start with the same key, plan, inputs and seed runs nothing and names the run the key
    /// started (exit status as that run's: 0 completed, 3 suspended, 1 failed); with another
    /// plan, inputs or seed it is refused (exit 2, `key_conflict`, naming what differs).
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// Wait for a turn in this queue (`oracle queue set`) before the run starts: while the
    /// queue is at its limits the run is `queued`, its position printed on stderr and shown
    /// by `oracle runs`. Nothing of the wait is recorded.
    #[arg(long, value_name = "NAME")]
    queue: Option<String>,
    /// The run's priority in its queue, 0 (the default) to 9: higher goes first.
    #[arg(long, value_name = "0-9")]
    priority: Option<u64>,
    /// The run's partition in its queue: partitions take turns, and the queue's
    /// `--partition-concurrency` holds for each.
    #[arg(long, value_name = "KEY")]
    partition: Option<String>,
    #[command(flatten)]
    drive: DriveArgs,
}

impl RunArgs {
    /// The queue the run's flags ask for, checked by the host's one rule (a code agent's run,
    /// whose program has no `queue` line).
    pub(crate) fn queue_flags(&self) -> Result<Option<oracle_host::queue::Ask>, CliError> {
        oracle_host::queue::ask(
            self.queue.as_deref(),
            self.priority,
            self.partition.as_deref(),
        )
        .map_err(|e| host_error(e, self.drive.json))
    }

    /// The queue the run asks for (`--queue`, else the plan's `queue` line), checked by the
    /// host's one rule. Reads the plan: call it once `files::check_plan` accepted the file
    /// (`start_options` does), never on a FIFO.
    pub(crate) fn queue_ask(&self) -> Result<Option<oracle_host::queue::Ask>, CliError> {
        let source = std::fs::read_to_string(&self.plan).unwrap_or_default();
        oracle_host::queue::ask_for(
            &source,
            self.queue.as_deref(),
            self.priority,
            self.partition.as_deref(),
        )
        .map_err(|e| host_error(e, self.drive.json))
    }
}

#[derive(Args, Debug, serde::Serialize, serde::Deserialize)]
pub struct ResumeArgs {
    /// Run id (under `<home>/runs`) or run directory.
    run: String,
    /// The step a suspended run waits on.
    #[arg(long, requires = "answer")]
    step: Option<String>,
    /// The step's output as JSON (for `human.ask`: the answer).
    #[arg(long, group = "answer", value_name = "JSON")]
    value: Option<String>,
    /// Read the step's output from a JSON file.
    #[arg(long, group = "answer", value_name = "FILE")]
    value_file: Option<PathBuf>,
    /// Fire the timer a `sleep` step waits on and go on: refused (exit 3, `timer_not_due`)
    /// while it is not due yet.
    #[arg(long, conflicts_with_all = ["step", "answer"])]
    #[serde(default)]
    wake: bool,
    /// With --wake: fire the timer now, even before it is due (recorded: the `timer_fired`
    /// instant is earlier than its due instant).
    #[arg(long, requires = "wake")]
    #[serde(default)]
    force: bool,
    /// Go on although a declared tool changed since the run started (its manifest, module,
    /// program or MCP tool list): the run continues with the tool as it is now.
    #[arg(long)]
    allow_tool_change: bool,
    /// Re-derive the run from its first event, ignoring resume points (by default the resume
    /// starts from the newest one the log accepts and re-derives only the events after it).
    #[arg(long)]
    no_snapshots: bool,
    /// Go on under a new plan (an upgrade in flight): the new plan first re-derives every
    /// recorded event, and on the first difference the upgrade is refused (exit 4, naming the
    /// event, step and field; nothing written); otherwise `plan_upgraded` is recorded and the
    /// run continues under it. A resume that would be refused anyway (a run waiting on a
    /// question given no answer: exit 2, `needs_answer`; a wrong step or a bad answer) is
    /// refused first and records no upgrade: exit 2 always means nothing was written.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Who upgrades the plan, recorded in `plan_upgraded` (default: the `USER` environment
    /// variable, else nobody is named).
    #[arg(long, requires = "plan")]
    by: Option<String>,
    #[command(flatten)]
    drive: DriveArgs,
}

/// `oracle fork`.
#[derive(Args, Debug)]
pub struct ForkArgs {
    /// The run to fork: id (under `<home>/runs`) or run directory.
    run: String,
    /// Share the parent's events 0..SEQ (SEQ must start a round, or follow a `suspended`).
    #[arg(
        long,
        value_name = "SEQ",
        required_unless_present = "step",
        conflicts_with = "step"
    )]
    at: Option<u64>,
    /// Fork just before STEP's first call (at the start of the round that made it).
    #[arg(long, value_name = "STEP")]
    step: Option<String>,
    /// The step's output as JSON, given from outside instead of running it again (checked
    /// against its schema and `expect` as `resume --value` is).
    #[arg(long, group = "answer", value_name = "JSON")]
    value: Option<String>,
    /// Read the step's output from a JSON file.
    #[arg(long, group = "answer", value_name = "FILE")]
    value_file: Option<PathBuf>,
    /// Continue under this plan: it must re-derive the shared events first (exit 4 if not,
    /// nothing created).
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Who forks it, recorded in `forked` (default: the `USER` environment variable).
    #[arg(long)]
    by: Option<String>,
    /// An idempotency key, recorded in `forked`: forking again with the same key, parent,
    /// point, value and plan finds that fork (exit as its status) instead of making another;
    /// the same key with anything else is refused (exit 2, `key_conflict`).
    #[arg(long, value_name = "K")]
    key: Option<String>,
    #[command(flatten)]
    drive: DriveArgs,
}

/// Who did it: `--by`, else the `USER` environment variable, else nobody named.
fn who(by: Option<&String>) -> Option<String> {
    by.cloned()
        .or_else(|| std::env::var("USER").ok())
        .filter(|b| !b.is_empty())
}

/// Parses a `--value` or reads a `--value-file`.
fn given_value(value: Option<&str>, file: Option<&Path>) -> Result<Option<Value>, CliError> {
    match (value, file) {
        (Some(text), _) => Ok(Some(parse_value(text, "--value")?)),
        (None, Some(path)) => {
            let bytes = crate::files::read_value_file(path)?;
            let text = String::from_utf8(bytes).map_err(|e| {
                CliError::input(format!(
                    "{}: not UTF-8 text (invalid byte at offset {})",
                    path.display(),
                    e.utf8_error().valid_up_to()
                ))
            })?;
            Ok(Some(parse_value(&text, &path.display().to_string())?))
        }
        (None, None) => Ok(None),
    }
}

/// `oracle fork`: a new run sharing the parent's events up to the fork point, driven on.
pub(crate) fn fork(home: &Path, a: ForkArgs) -> Result<u8, CliError> {
    a.drive.check_programs()?;
    let host = host(home, a.drive.json)?.with_require_approval(a.drive.require_approval);
    if let Some(p) = &a.plan {
        crate::files::check_plan(p, a.drive.json)?;
    }
    let at = match (&a.at, &a.step) {
        (Some(seq), _) => oracle_host::ForkAt::Seq(*seq),
        (None, Some(step)) => oracle_host::ForkAt::Step(step.clone()),
        (None, None) => return Err(CliError::input("give --at SEQ or --step STEP")),
    };
    drive_fork(home, host, a, at)
}

#[derive(Args, Debug)]
pub struct RecoverArgs {
    /// The damaged run: id (under `<home>/runs`) or run directory.
    run: String,
    /// Who recovers it, recorded in `forked` (default: the `USER` environment variable).
    #[arg(long)]
    by: Option<String>,
    #[command(flatten)]
    drive: DriveArgs,
}

/// `oracle recover`: a new run from a damaged run's valid prefix, forked at its last decision
/// boundary before the damage (recorded with reason `recovered` and the damaged log's hash),
/// driven on. The damaged log is left as it is, and a copy kept under `<home>/damaged/`.
pub(crate) fn recover(home: &Path, a: RecoverArgs) -> Result<u8, CliError> {
    a.drive.check_programs()?;
    let host = host(home, a.drive.json)?.with_require_approval(a.drive.require_approval);
    let args = ForkArgs {
        run: a.run,
        at: None,
        step: None,
        value: None,
        value_file: None,
        plan: None,
        by: a.by,
        key: None,
        drive: a.drive,
    };
    drive_fork(home, host, args, oracle_host::ForkAt::LastValid)
}

/// Makes the fork `a` asks for at `at` through the host and prints its first drive.
fn drive_fork(
    home: &Path,
    host: oracle_host::Home,
    a: ForkArgs,
    at: oracle_host::ForkAt,
) -> Result<u8, CliError> {
    let value = given_value(a.value.as_deref(), a.value_file.as_deref())?;
    let mut display = Display::new("forking", a.drive.json);
    let mut progress = |p: &Progress| display.update(p);
    let spans = crate::spans::start(a.drive.otlp.as_deref())?;
    let follow = crate::follow::Follow::start(a.drive.follow);
    let settings = DriveSettings {
        jobs: a.drive.jobs,
        durability: a.drive.durability.into(),
        snapshot_every: a.drive.snapshot_every,
        from_snapshots: true,
        scorer_cmd: a.drive.scorer_cmd.clone(),
        wake: None,
    };
    let forked = host.fork(
        &a.run,
        oracle_host::Fork {
            at,
            value,
            plan: a.plan.clone().map(oracle_host::NewPlan::File),
            by: who(a.by.as_ref()),
            key: a.key.clone(),
            door: oracle_host::Door::Terminal,
            given: a.drive.given(),
            drive: settings.drive(),
            progress: Some(&mut progress),
        },
    );
    drop(follow);
    crate::spans::finish(spans);
    display.finish();
    let log = inspect::find(home, &a.run).ok().map(|r| r.paths.log);
    let forked = match forked.map_err(|e| host_error_in(e, a.drive.json, log.as_deref()))? {
        Start::New(f) => f,
        Start::Existing(e) => return print_existing(&e, a.drive.json, "forked this run already"),
    };
    if !a.drive.json {
        print_fork_head(&forked)?;
    }
    match &forked.session {
        Some(s) => {
            for w in &s.warnings {
                eprintln!("warning: {w}");
            }
            print_forked(s, &forked, a.drive.json)?;
            Ok(status_code(&s.report.ending))
        }
        None => {
            if a.drive.json {
                let mut v = json!({
                    "ok": true, "run": forked.fork.id, "dir": forked.fork.dir,
                    "parent": forked.parent, "shared": forked.shared, "status": "suspended",
                });
                add_recovered(&mut v, &forked);
                crate::out::json(&v)?;
            } else {
                outln!(
                    "status   suspended (it waits on the question it forked at: resume it with --step and --value)"
                )?;
            }
            Ok(exit::SUSPENDED)
        }
    }
}

/// The lines a fork prints before its first drive: where it left its parent, and for a
/// recovery the parent's last valid event and where the copy of its damaged log is kept.
fn print_fork_head(f: &oracle_host::Forked) -> Result<(), CliError> {
    outln!(
        "forked   {} from {} at event {}",
        f.fork.id,
        f.parent,
        f.shared
    )?;
    if let Some(r) = &f.recovered {
        outln!(
            "recovered {} is valid to event {} and damaged from event {}; its log is left as it is, and a copy kept at {}",
            f.parent,
            r.damaged_at.saturating_sub(1),
            r.damaged_at,
            r.kept.display()
        )?;
    }
    Ok(())
}

/// A recovery's facts in a fork's JSON object (`recovered`): the parent's last valid event,
/// its first damaged one, the damaged log's BLAKE3 hash and where its copy is kept.
fn add_recovered(v: &mut Value, f: &oracle_host::Forked) {
    if let Some(r) = &f.recovered {
        v["recovered"] = json!({
            "last_valid": r.damaged_at.saturating_sub(1), "damaged_at": r.damaged_at,
            "hash": r.hash, "kept": r.kept,
        });
    }
}

/// A fork's first drive, as `run` prints a drive, with where it left its parent (`parent`,
/// `shared`) in its JSON object.
fn print_forked(s: &Session, f: &oracle_host::Forked, json_out: bool) -> Result<(), CliError> {
    if !json_out {
        return print_session(s, false, "appended", None);
    }
    let r = &s.report;
    let mut v = json!({
        "ok": true, "run": s.id, "dir": s.dir, "status": oracle_host::ending_word(&r.ending),
        "events": r.events, "appended": r.appended, "head": r.head,
        "state": r.state.hash(), "executed": r.executed, "reused": r.reused,
        "rederived": r.matched, "from_snapshot": r.from_point, "warnings": s.warnings,
        "parent": f.parent, "shared": f.shared,
    });
    add_recovered(&mut v, f);
    if let (Value::Object(m), Value::Object(e)) = (&mut v, ending_json(&r.ending)) {
        m.extend(e);
    }
    crate::out::json(&v)
}

#[derive(Args, Debug)]
pub struct CancelArgs {
    /// Run id (under `<home>/runs`) or run directory.
    run: String,
    /// Why it is cancelled: recorded in the run's last event.
    #[arg(long, default_value = "no reason given")]
    reason: String,
    /// Who cancels it, recorded beside the reason (default: the `USER` environment variable,
    /// else nobody is named).
    #[arg(long)]
    by: Option<String>,
    /// How the cancel is written (`effect`, the default, syncs it before the command returns).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Effect)]
    durability: DurabilityArg,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Run id (under `<home>/runs`) or run directory.
    run: String,
    /// Replay against this plan instead of the one the run was started from: is the recorded
    /// run still valid under the new plan, and if not, where does it diverge?
    #[arg(long)]
    plan: Option<PathBuf>,
    /// Tools of one round that may execute at once. The log is the same whatever N is.
    #[arg(long, default_value_t = JOBS_DEFAULT, value_parser = clap::value_parser!(u32).range(1..=256))]
    jobs: u32,
    /// Print the result (or the divergence report) as one JSON object.
    #[arg(long)]
    json: bool,
    /// Replay although a declared tool changed since the run started (its manifest, module,
    /// program or MCP tool list): a deliberate re-check that diverges at the first output the
    /// change alters.
    #[arg(long)]
    allow_tool_change: bool,
    /// Check only the events after the newest resume point the log accepts (a quick check of a
    /// long run's tail). Without it, the run is re-derived from its first event: the audit,
    /// which never uses resume points.
    #[arg(long, conflicts_with = "plan")]
    from_snapshot: bool,
    /// With --store, for a code run: the program of the agent NAME the run was stored under,
    /// NAME=PATH (repeatable), as `oracle worker --agent` (a store keeps no command). The
    /// program's files must be the ones the run recorded, or the replay says where it differs.
    #[arg(long = "agent", value_name = "NAME=PATH")]
    agents: Vec<String>,
    #[command(flatten)]
    tools: crate::tools::ToolDirs,
}

impl ReplayArgs {
    /// The run this replay names.
    pub(crate) fn run(&self) -> &str {
        &self.run
    }

    /// The `--agent NAME=PATH` given.
    pub(crate) fn agents(&self) -> &[String] {
        &self.agents
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// Not finished and not suspended: still running, interrupted (`oracle resume` continues
    /// it), or started through the API and not begun yet (`submitted`).
    Running,
    Suspended,
    Completed,
    Failed,
    /// Ended from outside (`oracle cancel`, the API).
    Cancelled,
    /// Waiting for its turn in a queue (`oracle run --queue`).
    Queued,
}

impl StatusArg {
    fn as_str(self) -> &'static str {
        match self {
            StatusArg::Running => "running",
            StatusArg::Suspended => "suspended",
            StatusArg::Completed => "completed",
            StatusArg::Failed => "failed",
            StatusArg::Cancelled => "cancelled",
            StatusArg::Queued => "queued",
        }
    }
}

#[derive(Args, Debug)]
pub struct RunsArgs {
    /// Only runs with this status.
    #[arg(long, value_enum)]
    status: Option<StatusArg>,
    /// One JSON object per run, one per line.
    #[arg(long)]
    json: bool,
    /// Show lineage: each fork under the run it was forked from (with the events they share),
    /// each child run under the run whose `spawn` step started it, and how many times a run's
    /// plan was upgraded. Reads every log.
    #[arg(long)]
    tree: bool,
    /// A model binding's price (micro-units per 1M input and output tokens, e.g.
    /// `fast=150000/600000`; repeatable, or `[prices]` in the config file): each run's cost
    /// is added to its note and to `--json` as `cost: {micro, unpriced}`. Display only.
    #[arg(long = "model-price", value_name = "NAME=IN/OUT")]
    pub(crate) model_price: Vec<String>,
}

/// A progress display on stderr while a drive runs (`crate::progress`: only on a terminal,
/// never with `--json`, and only after a second), never recorded anywhere.
struct Display {
    meter: crate::progress::Meter,
    rounds: u64,
}

impl Display {
    /// Rounds between two updates: a 100k-step run must not spend its time drawing.
    const EVERY: u64 = 64;

    fn new(verb: &'static str, json: bool) -> Display {
        Display {
            meter: crate::progress::Meter::spinner(verb, json),
            rounds: 0,
        }
    }

    fn update(&mut self, p: &Progress) {
        self.rounds += 1;
        if self.rounds % Self::EVERY != 1 {
            return;
        }
        self.meter.set_message(|| {
            if p.events < p.recorded {
                format!(
                    "{} of {} recorded events checked, {} calls",
                    p.events, p.recorded, p.calls
                )
            } else {
                format!("{} events, {} calls", p.events, p.calls)
            }
        });
    }

    fn finish(self) {
        drop(self.meter);
    }
}

/// An `--adjudication-expiry`: logical ticks (a whole number, as before durations existed)
/// or a wall-clock duration.
#[derive(Clone, Copy, Debug)]
enum Expiry {
    Ticks(u64),
    Ms(u64),
}

/// An `--adjudication-expiry` that is neither a whole number of ticks nor a duration.
#[derive(Debug, thiserror::Error)]
#[error("{source}; or give a whole number of logical ticks")]
struct BadExpiry {
    source: oracle_host::WallError,
}

fn parse_expiry(text: &str) -> Result<Expiry, BadExpiry> {
    if let Ok(ticks) = text.parse::<u64>() {
        return Ok(Expiry::Ticks(ticks));
    }
    oracle_host::duration_ms(text)
        .map(Expiry::Ms)
        .map_err(|source| BadExpiry { source })
}

/// `--seed`: an unsigned 64-bit integer, with a message that says so for `-1` or `1.5` (clap's
/// own advice for a negative number, `-- -1`, is wrong here).
fn parse_seed(text: &str) -> Result<u64, BadSeed> {
    text.parse::<u64>().map_err(|_| BadSeed {
        text: text.to_owned(),
    })
}

/// A `--seed` that is not an unsigned 64-bit integer.
#[derive(Debug, thiserror::Error)]
#[error("`{text}` is not a seed: give a whole number from 0 to {}", u64::MAX)]
struct BadSeed {
    text: String,
}

fn parse_inputs(raw: &[String]) -> Result<Vec<(String, String)>, CliError> {
    raw.iter()
        .map(|s| match s.split_once('=') {
            Some((n, v)) if !n.is_empty() => Ok((n.to_owned(), v.to_owned())),
            _ => Err(CliError::input(format!(
                "--input `{s}`: expected NAME=VALUE"
            ))),
        })
        .collect()
}

/// Maps a session error to its exit code, printing plan diagnostics where there are some.
pub(crate) fn session_error(e: SessionError, json_out: bool, log: Option<&Path>) -> CliError {
    if let SessionError::Plan {
        path,
        text: source,
        diagnostics,
    } = &e
    {
        if json_out {
            let list = crate::plan::diagnostics_json(source, diagnostics);
            if let Err(closed) = crate::out::json(&json!({
                "ok": false,
                "path": path,
                "error": exit::error_json(
                    Some(json!({
                        "kind": "plan",
                        "path": path,
                        "line": list.first().map(|d| d["line"].clone()),
                        "col": list.first().map(|d| d["column"].clone()),
                    })),
                    exit::INPUT,
                    &e.to_string(),
                ),
                "diagnostics": list,
            })) {
                return closed;
            }
        } else {
            crate::plan::print_diagnostics(path, source, diagnostics);
        }
        // One document: the diagnostics report above is the error.
        return CliError::input(e.to_string());
    }
    if let SessionError::Engine(EngineError::Diverged(d)) = &e {
        return divergence_error(d, json_out, log);
    }
    // The host names the failure (the API names it the same way).
    let class = oracle_host::error::session_class(&e);
    let code = class.exit;
    let message = e.to_string();
    let mut details = match class.details {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    details.insert("kind".into(), json!(class.code));
    details.entry("seq").or_insert(json!(engine_seq(&e)));
    if json_out
        && let Err(closed) = crate::out::json(
            &json!({"ok": false, "error": exit::error_json(Some(Value::Object(details)), code, &message)}),
        )
    {
        return closed;
    }
    CliError {
        code,
        message,
        json: None,
        quiet: false,
    }
}

fn engine_seq(e: &SessionError) -> Option<u64> {
    match e {
        SessionError::Engine(e) => e.seq(),
        _ => None,
    }
}

pub(crate) fn status_code(ending: &Ending) -> u8 {
    match ending {
        Ending::Finished {
            status: oracle_core::payload::RunStatus::Completed,
            ..
        } => exit::OK,
        Ending::Finished { .. } => exit::FAILED,
        Ending::Suspended { .. } => exit::SUSPENDED,
        Ending::EndOfRecord => exit::OK,
        // Not from a command: `session::answer` (oracle serve) is the only caller that stops
        // after an answer, and a suspended run waits on the next step.
        Ending::Answered { .. } => exit::SUSPENDED,
    }
}

fn ending_json(e: &Ending) -> Value {
    match e {
        Ending::Finished { reason, .. } if !reason.is_empty() => json!({"reason": reason}),
        Ending::Suspended {
            step,
            reason,
            attempts,
        } => json!({"waiting": {"step": step, "reason": reason, "attempts": attempts}}),
        _ => json!({}),
    }
}

/// Sends the run's undelivered adjudication requests to `--oracle-cmd`, if given. Never fails
/// the command: a failed delivery is recorded in the outbox and reported.
pub(crate) fn notify(dir: &Path, home: &Path, cmd: Option<&Path>) -> Option<Value> {
    let cmd = cmd?;
    // By directory: the run may live outside `<home>/runs` (named by its path).
    let result = Home::open(home).and_then(|h| h.notify(&dir.to_string_lossy(), cmd));
    Some(match result {
        Ok(n) => json!({
            "delivered": n.delivered,
            "failed": n.failed.iter().map(|(h, e)| json!({"handle": h, "error": e})).collect::<Vec<_>>(),
            "exhausted": n.exhausted,
            "decided": n.verdicts.iter().map(|(h, v)| json!({"handle": h, "verdict": v["verdict"]})).collect::<Vec<_>>(),
        }),
        Err(e) => json!({"error": e.to_string()}),
    })
}

pub(crate) fn print_notified(n: &Value) -> Result<(), CliError> {
    if let Some(e) = n.get("error").and_then(Value::as_str) {
        eprintln!("warning: adjudication requests were not sent: {e}");
        return Ok(());
    }
    let list = |k: &str| {
        n.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let delivered = list("delivered");
    if !delivered.is_empty() {
        let names: Vec<&str> = delivered.iter().filter_map(Value::as_str).collect();
        outln!("oracle   notified of {}", names.join(", "))?;
    }
    for d in list("decided") {
        outln!(
            "oracle   {} decided by the oracle program: {} (recorded)",
            d["handle"].as_str().unwrap_or("?"),
            d["verdict"].as_str().unwrap_or("?")
        )?;
    }
    for f in list("failed") {
        eprintln!(
            "warning: notifying the oracle of {} failed (recorded; tried again next time): {}",
            f["handle"].as_str().unwrap_or("?"),
            f["error"].as_str().unwrap_or("?")
        );
    }
    let exhausted = list("exhausted");
    if !exhausted.is_empty() {
        eprintln!(
            "warning: {} request(s) could not be delivered after {} attempts; they stay pending (oracle adjudications)",
            exhausted.len(),
            oracle_host::NOTIFY_ATTEMPTS_MAX
        );
    }
    Ok(())
}

pub(crate) fn print_session(
    s: &Session,
    json_out: bool,
    verb: &str,
    notified: Option<Value>,
) -> Result<(), CliError> {
    let r = &s.report;
    let status = oracle_host::ending_word(&r.ending);
    if json_out {
        let mut v = json!({
            "ok": true,
            "run": s.id,
            "dir": s.dir,
            "status": status,
            "events": r.events,
            "appended": r.appended,
            "head": r.head,
            "state": r.state.hash(),
            "executed": r.executed,
            "reused": r.reused,
            "rederived": r.matched,
            "from_snapshot": r.from_point,
            "warnings": s.warnings,
        });
        if let (Value::Object(m), Value::Object(extra)) = (&mut v, ending_json(&r.ending)) {
            m.extend(extra);
        }
        if let (Value::Object(m), Some(n)) = (&mut v, notified) {
            m.insert("notified".into(), n);
        }
        return crate::out::json(&v);
    }
    if let Some(oracle_host::Repair::MovedTornTail { len, saved_to, .. }) = &s.repaired {
        eprintln!(
            "note: a torn final record ({len} bytes, from the crash) was moved to {}",
            saved_to.display()
        );
    }
    outln!("run      {}", s.id)?;
    outln!("status   {status}")?;
    outln!(
        "events   {} ({} {verb}, {} executed, {} taken from the log)",
        r.events,
        r.appended,
        count(r.executed, "tool call", "tool calls"),
        r.reused
    )?;
    outln!("head     {}", r.head)?;
    outln!("state    {}", r.state.hash())?;
    if let Some(seq) = r.from_point {
        outln!(
            "from     the resume point after event {seq} ({} re-derived)",
            count(r.matched, "recorded event", "recorded events")
        )?;
    }
    if let Some(why) = &r.point_error {
        eprintln!("warning: no resume point written: {why}");
    }
    match &r.ending {
        Ending::Finished { reason, .. } if !reason.is_empty() => outln!("reason   {reason}")?,
        Ending::Suspended {
            step,
            reason,
            attempts,
        } => {
            let plural = if *attempts == 1 { "" } else { "s" };
            outln!("waiting  step `{step}` after {attempts} attempt{plural}: {reason}")?;
            if let Some(store) = shared_wait_store(reason) {
                outln!(
                    "next     oracle adjudications --memory {store}, then oracle adjudicate --memory {store} HANDLE --verdict affirm|deny|unknown --evidence external_first_hand (the verdict resumes {id})",
                    id = s.id
                )?;
            } else if reason.starts_with(BELIEF_WAIT_PREFIX)
                && !reason.contains("queued for adjudication")
            {
                // The reason reads `waits on belief S/P (why)`: name the line when it splits
                // one way only.
                let line = reason
                    .trim_start_matches(BELIEF_WAIT_PREFIX)
                    .rsplit_once(" (")
                    .map_or("", |(l, _)| l);
                let (subject, predicate) = match line.split('/').collect::<Vec<_>>().as_slice() {
                    [s, p] if !s.is_empty() && !p.is_empty() => (*s, *p),
                    _ => ("SUBJECT", "PREDICATE"),
                };
                // Two ways out: naming the claim to keep (works with or without an oracle),
                // or new evidence, which opens an adjudication when the run has an oracle (in
                // a run without one it would only join the contest).
                outln!(
                    "next     nothing is pending on that line. Keep one of its claims (ids: oracle memory {id} --subject {subject} --predicate {predicate}):",
                    id = s.id
                )?;
                outln!(
                    "           oracle reinstate {id} CLAIM --evidence external_first_hand --resume",
                    id = s.id
                )?;
                outln!(
                    "         or, in a run with an oracle, give new evidence: oracle claim {id} --subject {subject} --predicate {predicate} --value JSON --provenance external_first_hand --resume",
                    id = s.id
                )?;
            } else if reason.starts_with(BELIEF_WAIT_PREFIX) {
                outln!(
                    "next     oracle adjudications {id}, then oracle adjudicate {id} HANDLE --verdict affirm|deny|unknown --evidence external_first_hand --resume",
                    id = s.id
                )?;
            } else if reason.starts_with(oracle_host::SLEEP_WAIT_PREFIX) {
                // A sleep is woken, never answered (`--step` is refused, `timer_wait`).
                outln!(
                    "next     oracle resume {} --wake once it is due (--wake --force wakes it now)",
                    s.id
                )?;
            } else {
                outln!("next     {}", answer_hint(&s.id, step, reason))?;
            }
        }
        _ => {}
    }
    if let Some(n) = &notified {
        print_notified(n)?;
    }
    Ok(())
}

/// The start of a run as `oracle run` and `oracle submit` ask it, every flag checked, and the
/// declared tool directories (the plan's `tools` lines and `--tools`); the host binds it.
fn start_options(home: &Path, a: &RunArgs) -> Result<(StartOptions, Vec<PathBuf>), CliError> {
    let (expiry_ticks, expiry_ms) = match a.adjudication_expiry {
        Some(Expiry::Ticks(t)) => (Some(t), None),
        Some(Expiry::Ms(ms)) => (None, Some(ms)),
        None => (None, None),
    };
    if let Some(ticks) = expiry_ticks {
        oracle_core::event::check_time("--adjudication-expiry", ticks)
            .map_err(|e| CliError::input(e.to_string()))?;
    }
    crate::files::check_plan(&a.plan, a.drive.json)?;
    a.drive.check_programs()?;
    let tool_dirs = crate::tools::plan_dirs(&a.plan, &a.drive.tools.dirs);
    // The memory's settings, recorded under `run_started.domains.memory` when any differs
    // from the defaults.
    let mut domains = std::collections::BTreeMap::new();
    let inputs = parse_inputs(&a.inputs)?;
    let store = attached_store(&a.plan, a.memory.as_deref(), &inputs)?;
    if a.no_oracle || a.adjudication_expiry.is_some() || store.is_some() {
        let memory = MemorySettings {
            oracle: !a.no_oracle,
            expiry_ticks,
            expiry_ms,
            store,
            ..MemorySettings::default()
        };
        domains.insert(
            oracle_memory::settings::DOMAIN.to_owned(),
            memory.to_value(),
        );
    }
    let opts = StartOptions {
        inputs,
        seed: a.seed,
        grants: a.grants.clone(),
        jobs: a.drive.jobs,
        durability: a.drive.durability.into(),
        resume_points: a.drive.points(),
        domains,
        scorer: oracle_host::command_scorer(a.drive.scorer_cmd.as_deref()),
        budget: (a.max_model_calls.is_some() || a.max_tokens_total.is_some()).then_some(
            oracle_core::payload::Budget {
                model_calls_max: a.max_model_calls,
                tokens_max: a.max_tokens_total,
            },
        ),
        key: a.key.clone(),
        ..StartOptions::new(home, &a.plan)
    };
    Ok((opts, tool_dirs))
}

/// The store a suspension waits on, when it waits on a line of a shared store (the reason
/// reads `waits on belief S/P (in store NAME: ...)`).
fn shared_wait_store(reason: &str) -> Option<&str> {
    let rest = reason.strip_prefix(BELIEF_WAIT_PREFIX)?;
    let (_, after) = rest.rsplit_once(" (in store ")?;
    after.split_once(':').map(|(name, _)| name)
}

/// The store the run attaches to: the plan's `memory` line, or `--memory`. Given both, they
/// must name the same store once resolved: a plan that declares its store (one per user, say)
/// is never quietly pointed at another one's memory by a flag.
fn attached_store(
    plan: &Path,
    flag: Option<&str>,
    inputs: &[(String, String)],
) -> Result<Option<String>, CliError> {
    let source = std::fs::read_to_string(plan).unwrap_or_default();
    let declared = oracle_plan::memory_of(&source);
    let from_plan = match &declared {
        Some(d) => Some(store_name(d, inputs).map_err(|e| {
            CliError::input(format!("the plan's `memory {d}` line: {}", e.message))
        })?),
        None => None,
    };
    let from_flag = flag.map(|f| store_name(f, inputs)).transpose()?;
    match (from_plan, from_flag) {
        (Some(p), Some(f)) if p != f => Err(CliError::input(format!(
            "--memory names store {f}, but the plan's `memory {}` line names store {p}: drop the flag or change the plan",
            declared.unwrap_or_default()
        ))),
        (p, f) => Ok(f.or(p)),
    }
}

/// The store `--memory` names: the name itself, or for `input.NAME` the string given to that
/// input (recorded as the resolved name, so replay never looks it up again).
fn store_name(given: &str, inputs: &[(String, String)]) -> Result<String, CliError> {
    let name = match given.strip_prefix("input.") {
        Some(input) => inputs
            .iter()
            .find(|(n, _)| n == input)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| {
                CliError::input(format!(
                    "--memory {given}: give the input as a string (--input {input}=NAME)"
                ))
            })?
            .to_owned(),
        None => given.to_owned(),
    };
    oracle_memory::shared::check_name(&name).map_err(|e| CliError::input(e.to_string()))?;
    Ok(name)
}

/// The bindings `oracle run` and `oracle submit` give a new run (the tool directories come
/// from the plan and `--tools`, in `start_options`).
fn new_run_given(a: &RunArgs) -> Given {
    Given {
        tools: Vec::new(),
        ..a.drive.given()
    }
}

pub fn run(home: &Path, a: RunArgs) -> Result<u8, CliError> {
    if oracle_host::code::is_code_entry(&a.plan) {
        return run_code(home, a);
    }
    let (opts, tool_dirs) = start_options(home, &a)?;
    let ask = a.queue_ask()?;
    let host = host(home, a.drive.json)?.with_require_approval(a.drive.require_approval);
    crate::interrupt::on_ctrl_c(None);
    let mut display = Display::new("running", a.drive.json);
    let mut progress = |p: &Progress| display.update(p);
    let spans = crate::spans::start(a.drive.otlp.as_deref())?;
    let follow = crate::follow::Follow::start(a.drive.follow);
    let given = new_run_given(&a);
    let s = match &ask {
        Some(ask) => {
            let mut waiting = |place: u64| eprintln!("queued in {}: position {place}", ask.queue);
            host.start_queued(opts, &given, tool_dirs, ask, &mut waiting, &mut progress)
        }
        None => host.start(opts, &given, tool_dirs, Some(&mut progress)),
    };
    drop(follow);
    crate::spans::finish(spans);
    display.finish();
    let s = match s.map_err(|e| host_error(e, a.drive.json))? {
        Start::New(s) => s,
        Start::Existing(e) => {
            return print_existing(
                &e,
                a.drive.json,
                "started this run already, with the same plan, inputs and seed",
            );
        }
    };
    for w in &s.warnings {
        eprintln!("warning: {w}");
    }
    let notified = notify(&s.dir, home, a.drive.oracle_cmd.as_deref());
    print_session(&s, a.drive.json, "recorded", notified)?;
    Ok(status_code(&s.report.ending))
}

/// `oracle run triage.py`: a code agent (docs/AGENTS.md), started through the host. Its
/// decision time limit is `ORACLE_AGENT_DECIDE_MS` when set.
fn run_code(home: &Path, a: RunArgs) -> Result<u8, CliError> {
    if a.queue_flags()?.is_some() {
        return Err(host_error(
            oracle_host::queue::not_yet("a code agent's run"),
            a.drive.json,
        ));
    }
    let opts = code_options(home, &a)?;
    let host = host(home, a.drive.json)?;
    crate::interrupt::on_ctrl_c(None);
    let mut display = Display::new("running", a.drive.json);
    let mut progress = |p: &Progress| display.update(p);
    let s = host.start_code(opts, &new_run_given(&a), Some(&mut progress));
    display.finish();
    let s = match s.map_err(|e| host_error(e, a.drive.json))? {
        Start::New(s) => s,
        Start::Existing(e) => {
            return print_existing(
                &e,
                a.drive.json,
                "started this run already, with the same program, inputs and seed",
            );
        }
    };
    print_session(&s, a.drive.json, "recorded", None)?;
    Ok(status_code(&s.report.ending))
}

/// A code agent's start options from `oracle run FILE.py`'s (or `submit`'s) arguments.
fn code_options(home: &Path, a: &RunArgs) -> Result<oracle_host::code::CodeStart, CliError> {
    use oracle_host::code;
    let decide_ms = match std::env::var(code::DECIDE_MS_VAR) {
        Ok(v) => v.parse::<u64>().map_err(|_| {
            CliError::input(format!(
                "{}={v}: not a number of milliseconds",
                code::DECIDE_MS_VAR
            ))
        })?,
        Err(_) => code::DECIDE_MS_DEFAULT,
    };
    Ok(code::CodeStart {
        home: home.to_path_buf(),
        entry: a.plan.clone(),
        root: PathBuf::from("."),
        inputs: parse_inputs(&a.inputs)?,
        grants: a.grants.clone(),
        seed: a.seed,
        jobs: a.drive.jobs,
        durability: a.drive.durability.into(),
        limits: code::Limits {
            hello_ms: code::HELLO_MS_DEFAULT,
            decide_ms,
        },
        bindings: Default::default(),
        key: a.key.clone(),
    })
}

/// A start (or fork) whose idempotency key made a run already: that run, and nothing run. The
/// exit status is that run's, as `oracle run` would have ended. `did` says what the key did.
fn print_existing(e: &oracle_host::Existing, json_out: bool, did: &str) -> Result<u8, CliError> {
    if json_out {
        crate::out::json(&json!({
            "ok": true,
            "run": e.id,
            "dir": e.dir,
            "status": e.status,
            "existing": true,
            "key": e.key,
        }))?;
    } else {
        outln!("run      {}", e.id)?;
        outln!("status   {}", e.status)?;
        outln!("key      {} {did}; nothing was run", e.key)?;
    }
    Ok(match e.status.as_str() {
        "completed" => exit::OK,
        "suspended" => exit::SUSPENDED,
        "failed" | "cancelled" => exit::FAILED,
        _ => exit::OK,
    })
}

/// `oracle submit`: everything `oracle run` checks and writes before the first event, made in
/// `scratch` (a temporary home) and handed to `store`; nothing runs here. Returns the run id.
pub(crate) fn submit(
    scratch: &Path,
    a: &RunArgs,
    store: &oracle_host::Database,
) -> Result<oracle_host::Submitted, CliError> {
    if oracle_host::code::is_code_entry(&a.plan) {
        if a.queue_flags()?.is_some() {
            return Err(host_error(
                oracle_host::queue::not_yet("a code agent's run"),
                a.drive.json,
            ));
        }
        return submit_code(scratch, a, store);
    }
    let (opts, tool_dirs) = start_options(scratch, a)?;
    let ask = a.queue_ask()?;
    if let Some(ask) = &ask {
        store
            .queue_check(ask)
            .map_err(|e| host_error(e, a.drive.json))?;
    }
    let host = host(scratch, a.drive.json)?;
    let prepared = match host
        .prepare_submission(opts, &new_run_given(a), tool_dirs)
        .map_err(|e| host_error(e, a.drive.json))?
    {
        Start::New(p) => p,
        // A scratch home holds no keys: a store's keys are in the store (below).
        Start::Existing(e) => {
            return Err(CliError::input(format!(
                "internal: a scratch home found key `{}`",
                e.key
            )));
        }
    };
    for w in &prepared.warnings {
        eprintln!("warning: {w}");
    }
    let programs = (
        kept_program("--oracle-cmd", a.drive.oracle_cmd.as_deref())?,
        kept_program("--scorer-cmd", a.drive.scorer_cmd.as_deref())?,
    );
    let submitted = store
        .submit_queued(&prepared, programs, a.key.as_deref(), ask.as_ref())
        .map_err(|e| CliError::input(e.to_string()))?;
    key_used_elsewhere(submitted, a)
}

/// A submission whose idempotency key started a run with another program, inputs or seed is
/// refused (`key_conflict`), as a file home's start refuses it.
fn key_used_elsewhere(
    submitted: oracle_host::Submitted,
    a: &RunArgs,
) -> Result<oracle_host::Submitted, CliError> {
    match submitted {
        oracle_host::Submitted::Existing { run, differs, .. } if !differs.is_empty() => {
            let e = SessionError::KeyUsed {
                key: a.key.clone().unwrap_or_default(),
                run,
                differs,
            };
            Err(host_error(HostError::Session(e), a.drive.json))
        }
        s => Ok(s),
    }
}

/// `oracle submit triage.py --store URL`: the code agent is started once here to bind its
/// inputs and grants, and the run is stored under the agent's name and program hash, for a
/// worker told about that agent (`oracle worker --agent NAME=PATH`) to start.
fn submit_code(
    scratch: &Path,
    a: &RunArgs,
    store: &oracle_host::Database,
) -> Result<oracle_host::Submitted, CliError> {
    let opts = code_options(scratch, a)?;
    let prepared = host(scratch, a.drive.json)?
        .prepare_code_submission(opts, &new_run_given(a))
        .map_err(|e| host_error(e, a.drive.json))?;
    let submitted = store
        .submit_code(
            &prepared,
            kept_program("--oracle-cmd", a.drive.oracle_cmd.as_deref())?,
            kept_program("--scorer-cmd", a.drive.scorer_cmd.as_deref())?,
            a.key.as_deref(),
        )
        .map_err(|e| CliError::input(e.to_string()))?;
    key_used_elsewhere(submitted, a)
}

/// A program given to `submit` as the store keeps it for the workers that drive the run: a
/// path is made absolute (a worker does not run in the submitter's directory); a bare name is
/// kept as it is, found on each worker's `PATH`. Never hashed or recorded in the log.
fn kept_program(flag: &str, program: Option<&Path>) -> Result<Option<String>, CliError> {
    let Some(program) = program else {
        return Ok(None);
    };
    if program.to_str().is_none() {
        return Err(CliError::input(format!(
            "{flag} {}: a program path that is not UTF-8 cannot be kept in the store",
            program.display()
        )));
    }
    Ok(Some(
        absolute_program(program).to_string_lossy().into_owned(),
    ))
}

/// A program as a process working elsewhere (a worker) must name it: a path made absolute, a
/// bare name (found on `PATH`) as it is.
pub(crate) fn absolute_program(program: &Path) -> PathBuf {
    if !program.to_string_lossy().contains('/') {
        return program.to_path_buf();
    }
    oracle_host::bind::absolute(&[program.to_path_buf()])
        .pop()
        .unwrap_or_else(|| program.to_path_buf())
}

/// The host's handle on the file home `home`, as the command line drives runs: in the
/// caller's directory, with the tool directories each run keeps; what the host does on its own
/// (a torn tail moved aside) is told on stderr.
pub(crate) fn host(home: &Path, json_out: bool) -> Result<Home, CliError> {
    let h = Home::open(home).map_err(|e| host_error(e, json_out))?;
    Ok(h.with_notes(std::sync::Arc::new(|n: &oracle_host::Note| {
        eprintln!("note: {n}")
    })))
}

/// A host error on its way to the user: plan diagnostics and divergence reports as
/// [`session_error`] prints them, every other failure with the host's code and exit status.
pub(crate) fn host_error(e: HostError, json_out: bool) -> CliError {
    host_error_in(e, json_out, None)
}

pub(crate) fn host_error_in(e: HostError, json_out: bool, log: Option<&Path>) -> CliError {
    match e {
        HostError::Session(s) => session_error(s, json_out, log),
        e => {
            let json = e.error_value();
            if json_out && let Err(closed) = crate::out::json(&json!({"ok": false, "error": json}))
            {
                return closed;
            }
            CliError {
                code: e.exit(),
                message: e.to_string(),
                json: None,
                quiet: false,
            }
        }
    }
}

/// Resumes a run without an answer (after a verdict), printing as `oracle resume` does.
pub(crate) fn resume_after_verdict(
    home: &Path,
    run: &str,
    json_out: bool,
    oracle_cmd: Option<&Path>,
) -> Result<u8, CliError> {
    crate::files::check_stored_plan(home, run, json_out)?;
    let host = host(home, json_out)?;
    let s = host.resume(run, Resume::default()).map(|r| r.session);
    let log = inspect::find(home, run).ok().map(|r| r.paths.log);
    let s = match s {
        // The outside event was applied; a finished run has nothing to go on with, which is
        // not an error of this command.
        Err(HostError::Session(SessionError::Finished { run, status })) => {
            if json_out {
                crate::out::json(&json!({
                    "ok": true,
                    "run": run,
                    "status": status,
                    "resumed": false,
                    "reason": "the run has finished; there was nothing to resume",
                }))?;
            } else {
                outln!("resume   nothing to resume: run {run} has finished ({status})")?;
            }
            return Ok(exit::OK);
        }
        other => other.map_err(|e| host_error_in(e, json_out, log.as_deref()))?,
    };
    let notified = notify(&s.dir, home, oracle_cmd);
    print_session(&s, json_out, "appended", notified)?;
    Ok(status_code(&s.report.ending))
}

pub(crate) fn resume(home: &Path, a: ResumeArgs) -> Result<u8, CliError> {
    a.drive.check_programs()?;
    let host = host(home, a.drive.json)?.with_require_approval(a.drive.require_approval);
    crate::interrupt::on_ctrl_c(Some(&a.run));
    let answer = a.answer()?;
    crate::files::check_stored_plan(home, &a.run, a.drive.json)?;
    let mut display = Display::new("resuming", a.drive.json);
    let mut progress = |p: &Progress| display.update(p);
    let spans = crate::spans::start(a.drive.otlp.as_deref())?;
    let follow = crate::follow::Follow::start(a.drive.follow);
    let resumed = host.resume(
        &a.run,
        Resume {
            answer,
            given: a.drive.given(),
            drive: oracle_host::Drive {
                wake: a.wake.then_some(a.force),
                ..a.drive_settings().drive()
            },
            tool_change: if a.allow_tool_change {
                ToolChange::Allow
            } else {
                ToolChange::Refuse
            },
            progress: Some(&mut progress),
            upgrade: a.plan.clone().map(|plan| oracle_host::Upgrade {
                plan,
                by: who(a.by.as_ref()),
            }),
        },
    );
    drop(follow);
    crate::spans::finish(spans);
    display.finish();
    let log = inspect::find(home, &a.run).ok().map(|r| r.paths.log);
    let resumed = resumed.map_err(|e| host_error_in(e, a.drive.json, log.as_deref()))?;
    if let Some(changed) = &resumed.tool_changed {
        eprintln!(
            "warning: {changed}; going on (--allow-tool-change): the run diverges at the first output that changed, if any"
        );
    }
    let s = resumed.session;
    for w in &s.warnings {
        eprintln!("warning: {w}");
    }
    let notified = notify(&s.dir, home, a.drive.oracle_cmd.as_deref());
    print_session(&s, a.drive.json, "appended", notified)?;
    Ok(status_code(&s.report.ending))
}

impl CancelArgs {
    /// Who cancels: `--by`, else the `USER` environment variable, else nobody named.
    fn by(&self) -> Option<String> {
        self.by
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .filter(|b| !b.is_empty())
    }

    pub(crate) fn json_flag(&self) -> bool {
        self.json
    }

    /// The signal a store queues for the worker that next holds the run.
    pub(crate) fn signal(&self) -> oracle_host::signal::Signal {
        oracle_host::signal::Signal::Cancel {
            run: self.run.clone(),
            by: self.by(),
            reason: self.reason.clone(),
            durability: self.durability.into(),
        }
    }
}

/// `oracle cancel`: ends a run that has not finished with a recorded `cancelled` outcome.
pub(crate) fn cancel(home: &Path, a: CancelArgs) -> Result<u8, CliError> {
    let host = host(home, a.json)?;
    let cancel = oracle_host::Cancel {
        by: a.by(),
        reason: a.reason.clone(),
    };
    let log = inspect::find(home, &a.run).ok().map(|r| r.paths.log);
    let done = host
        .cancel(&a.run, cancel.clone(), a.durability.into())
        .map_err(|e| host_error_in(e, a.json, log.as_deref()))?;
    match done {
        oracle_host::Cancelled::Recorded {
            id,
            seq,
            head,
            repaired,
            ..
        } => {
            if a.json {
                crate::out::json(&json!({
                    "ok": true, "run": id, "status": "cancelled", "seq": seq, "head": head,
                    "by": cancel.by, "reason": cancel.reason,
                }))?;
                return Ok(exit::OK);
            }
            if let Some(oracle_host::Repair::MovedTornTail { len, saved_to, .. }) = &repaired {
                eprintln!(
                    "note: a torn final record ({len} bytes, from the crash) was moved to {}",
                    saved_to.display()
                );
            }
            outln!("run      {id}")?;
            outln!("status   cancelled (event {seq})")?;
            match &cancel.by {
                Some(by) => outln!("by       {by}")?,
                None => outln!("by       (not named)")?,
            }
            outln!("reason   {}", cancel.reason)?;
            outln!("head     {head}")?;
        }
        oracle_host::Cancelled::Requested { id, .. } => {
            if a.json {
                crate::out::json(&json!({
                    "ok": true, "run": id, "status": "cancel_requested",
                    "by": cancel.by, "reason": cancel.reason,
                }))?;
                return Ok(exit::OK);
            }
            outln!("run      {id}")?;
            outln!(
                "status   cancel requested: another process drives the run and records the cancel when its current round ends (`oracle runs` shows it)"
            )?;
        }
    }
    Ok(exit::OK)
}

fn parse_value(text: &str, what: &str) -> Result<Value, CliError> {
    serde_json::from_str(text).map_err(|e| {
        // Text that is not JSON was most likely meant as a string: show the quoted form.
        let quoted = serde_json::to_string(text).unwrap_or_default();
        CliError::input(format!(
            "{what}: not JSON: {e}; a string is written in double quotes inside single ones: '{quoted}'"
        ))
    })
}

pub fn replay(home: &Path, a: ReplayArgs) -> Result<u8, CliError> {
    replay_in(home, a, false)
}

/// [`replay`] in `home`; `from_store`: a home a read-only store command wrote, where `--agent`
/// names the program of a store's code run.
pub(crate) fn replay_in(home: &Path, a: ReplayArgs, from_store: bool) -> Result<u8, CliError> {
    if !a.agents.is_empty() && !from_store {
        return Err(CliError::input(
            "--agent is for a replay with --store: a file home's code run names its own program",
        ));
    }
    // The stored copy is read even with --plan (for the grants it had).
    if let Some(plan) = &a.plan {
        crate::files::check_plan(plan, a.json)?;
    }
    crate::files::check_stored_plan(home, &a.run, a.json)?;
    // Replay starts no MCP server and runs no impure program: their outputs are recorded.
    let tools = crate::tools::for_run(home, &a.run, &a.tools.dirs, false, a.allow_tool_change)?;
    let mut display = Display::new("replaying", a.json);
    let r = oracle_host::tools::replay(
        home,
        &a.run,
        a.plan.as_deref(),
        a.jobs,
        a.from_snapshot,
        &tools,
        &mut |p| display.update(p),
    );
    display.finish();
    let log = inspect::find(home, &a.run).ok().map(|r| r.paths.log);
    let r = r.map_err(|e| match e {
        SessionError::Engine(EngineError::Diverged(d)) => {
            divergence_error_in(&d, a.json, log.as_deref(), Some(&tools))
        }
        e => session_error(e, a.json, log.as_deref()),
    })?;
    print_replayed(&r, a.json)
}

/// What a replay reproduced, for a person or as one JSON object.
fn print_replayed(r: &oracle_host::Replayed, json_out: bool) -> Result<u8, CliError> {
    let rep: &Report = &r.report;
    let ending = oracle_host::ending_word(&rep.ending);
    if json_out {
        let mut v = json!({
            "ok": true,
            "run": r.id,
            "result": "reproduced",
            "matched": rep.matched,
            "recorded": r.recorded_events,
            "ending": ending,
            "state": rep.state.hash(),
            "executed": rep.executed,
            "reused": rep.reused,
            "plan_changes": r.program_changes,
            "from_snapshot": rep.from_point,
            "warnings": r.warnings,
        });
        if let (Value::Object(m), Value::Object(extra)) = (&mut v, ending_json(&rep.ending)) {
            m.extend(extra);
        }
        crate::out::json(&v)?;
    } else {
        for c in &r.program_changes {
            outln!("plan     {c}")?;
        }
        for w in &r.warnings {
            eprintln!("warning: {w}");
        }
        match rep.from_point {
            None => outln!(
                "replay   {}: all {} recorded events reproduced ({} re-executed and compared, {} taken from the log)",
                r.id,
                rep.matched,
                count(rep.executed, "pure tool call", "pure tool calls"),
                count(rep.reused, "output", "outputs")
            )?,
            Some(seq) => outln!(
                "replay   {}: the {} recorded after the resume point at event {seq} reproduced ({} re-executed and compared, {} taken from the log; events 0..={seq} not checked: `oracle replay` without --from-snapshot checks all)",
                r.id,
                count(rep.matched, "event", "events"),
                count(rep.executed, "pure tool call", "pure tool calls"),
                count(rep.reused, "output", "outputs")
            )?,
        }
        outln!("ending   {ending}")?;
        outln!("state    {}", rep.state.hash())?;
    }
    Ok(exit::OK)
}

/// A replay or resume that did not reproduce the record: `oracle diff`'s divergence report
/// (A = the recorded log, B = the replay), exit 4.
fn divergence_error(d: &Divergence, json_out: bool, log: Option<&Path>) -> CliError {
    divergence_error_in(d, json_out, log, None)
}

/// The tool a divergence shows returning other output although its manifest declares it pure
/// (a declared tool only: the built-ins are tested to be pure).
fn impure_pure_tool(d: &Divergence, tools: &Replaying) -> Option<String> {
    use oracle_core::diff::Class;
    match &d.class {
        Class::Payload {
            kind: oracle_core::EventKind::ToolReturned | oracle_core::EventKind::ToolFailed,
            tool: Some(tool),
            ..
        } => tools.declared_pure(tool).then(|| tool.clone()),
        _ => None,
    }
}

/// [`divergence_error`], naming a declared pure tool whose output changed.
fn divergence_error_in(
    d: &Divergence,
    json_out: bool,
    log: Option<&Path>,
    tools: Option<&Replaying>,
) -> CliError {
    let pure = tools.and_then(|r| impure_pure_tool(d, r));
    let step =
        d.a.payload
            .get("step")
            .or_else(|| d.b.payload.get("step"))
            .and_then(Value::as_str)
            .map(str::to_owned);
    let message = match &pure {
        Some(tool) => format!(
            "event {}: tool `{tool}` declared pure returned different output: {}; `oracle tools audit` lists the tools whose outputs vary",
            d.seq,
            class_text(&d.class)
        ),
        None => format!(
            "event {}: the run does not reproduce its record: {}",
            d.seq,
            class_text(&d.class)
        ),
    };
    // The parents come before the divergence, so they are the same on both sides: read them
    // from the log. A log that cannot be read again only costs the parents in the report.
    let mut recorded = d.seq + 1;
    let mut parents = Vec::new();
    if let Some(mut indexed) = log.and_then(|l| inspect::Indexed::open(l).ok()) {
        recorded = indexed.len();
        parents =
            d.a.parents
                .iter()
                .filter_map(|&p| indexed.read(p).ok())
                .collect();
    }
    let log = log.unwrap_or(Path::new("(record)"));
    let color = crate::out::colored(std::io::stdout().is_terminal());
    let (text, json) =
        crate::diff::divergence_report(log, Path::new("(replay)"), recorded, d, parents, color);
    let printed = if json_out {
        let mut v = json!({"ok": false, "step": step, "error": exit::error_json(Some(json!({"kind": "diverged", "seq": d.seq, "pure_tool_varied": pure})), exit::INTEGRITY, &format!("event {}: the run does not reproduce its record ({})", d.seq, d.class.name()))});
        if let (Value::Object(m), Value::Object(extra)) = (&mut v, json) {
            m.extend(extra);
        }
        crate::out::json(&v)
    } else {
        out!("{text}")
    };
    if let Err(closed) = printed {
        return closed;
    }
    CliError {
        code: exit::INTEGRITY,
        message,
        json: None,
        quiet: false,
    }
}

/// The log of run `id` in the file home `home`.
fn run_log(home: &Path, id: &str) -> PathBuf {
    inspect::run_log(home, id)
}

pub fn runs(home: &Path, a: RunsArgs) -> Result<u8, CliError> {
    let prices = crate::show::price_table(&a.model_price)?;
    let all = inspect::runs(home).map_err(|e| session_error(e, a.json, None))?;
    let places = oracle_host::queue::places(home);
    let shown: Vec<_> = all
        .into_iter()
        // `running` takes in a run prepared for a background start that has not begun
        // (`submitted`), as a store's `--status running` takes in its queued runs.
        .filter(|r| {
            a.status.is_none_or(|s| {
                r.status == s.as_str() || (s == StatusArg::Running && r.status == "submitted")
            })
        })
        .collect();
    let lineage: std::collections::BTreeMap<String, oracle_host::Lineage> = if a.tree {
        shown
            .iter()
            .map(|r| (r.id.clone(), inspect::lineage(&run_log(home, &r.id))))
            .collect()
    } else {
        Default::default()
    };
    if a.json {
        for r in &shown {
            // The API's row (`GET /api/v1/runs`), built once by the host, plus the run's wall span.
            let mut v = oracle_host::data::queued_json(r, &places);
            if let Value::Object(m) = &mut v {
                let wall = inspect::wall_span(&run_log(home, &r.id));
                m.insert("wall_ms".into(), json!(wall));
            }
            if !prices.is_empty()
                && let Value::Object(m) = &mut v
            {
                let tally =
                    oracle_host::metrics::Tally::of_log(&run_log(home, &r.id)).unwrap_or_default();
                m.insert(
                    "cost".into(),
                    oracle_host::timeline::cost_json(&tally, &prices),
                );
            }
            if let (Value::Object(m), Some(l)) = (&mut v, lineage.get(&r.id)) {
                insert_lineage(m, l);
            }
            crate::out::json(&v)?;
        }
        return Ok(exit::OK);
    }
    if shown.is_empty() {
        outln!("no runs in {}", home.join("runs").display())?;
        return Ok(exit::OK);
    }
    let lines: Vec<RunLine> = shown
        .iter()
        .map(|r| {
            // A running run is either live (a process holds its lock) or interrupted.
            let status = match (r.status.as_str(), r.live) {
                ("running", Some(true)) => "live",
                ("running", Some(false)) => "interrupted",
                (s, _) => s,
            };
            let fallback = match status {
                "interrupted" => format!("oracle resume {}", r.id),
                "running" => format!("if interrupted: oracle resume {}", r.id),
                _ => String::new(),
            };
            RunLine {
                id: r.id.clone(),
                plan: r.program.clone(),
                status: status.to_owned(),
                events: r.events,
                tick: r.last_time,
                wall: inspect::wall_span(&run_log(home, &r.id)),
                note: with_cost(
                    runs_note(
                        r.waiting.as_ref(),
                        r.attempts,
                        r.reason.as_deref(),
                        r.models.as_ref().map(|u| (u.calls, u.tokens)),
                        fallback,
                    ),
                    &run_log(home, &r.id),
                    &prices,
                ),
            }
        })
        .collect();
    if a.tree {
        print_runs(&as_tree(lines, &lineage))?;
    } else {
        print_runs(&lines)?;
    }
    Ok(exit::OK)
}

/// How a run suspended at `step` for `reason` goes on: a step waiting on its child run is
/// answered by the child's outcome alone (an answer from outside is refused), any other by
/// `--value`.
fn answer_hint(run: &str, step: &str, reason: &str) -> String {
    if reason.starts_with(oracle_host::SPAWN_REASON_PREFIX) {
        format!(
            "its child run's outcome answers step `{step}` when the child ends (oracle runs --tree)"
        )
    } else {
        format!("oracle resume {run} --step {step} --value JSON")
    }
}

/// A run's lineage in its `oracle runs --tree --json` row: the run it was forked from (and the
/// events they share), its plan upgrades, and the run and step that spawned it.
fn insert_lineage(m: &mut serde_json::Map<String, Value>, l: &oracle_host::Lineage) {
    let parent = l
        .parent
        .as_ref()
        .map(|(p, seq)| json!({"run": p, "shared": seq}));
    m.insert("parent".into(), json!(parent));
    m.insert("upgrades".into(), json!(l.upgrades));
    let spawned_by = l
        .spawned_by
        .as_ref()
        .map(|p| json!({"run": p.run, "step": p.step}));
    m.insert("spawned_by".into(), json!(spawned_by));
}

/// `note` with the run's cost at `prices` put first (`cost 0.000450; ...`); as it was
/// without prices. A binding with no price marks the cost `+` (at least this much).
fn with_cost(note: String, log: &Path, prices: &oracle_host::metrics::Prices) -> String {
    if prices.is_empty() {
        return note;
    }
    let tally = oracle_host::metrics::Tally::of_log(log).unwrap_or_default();
    let cost = format!(
        "cost {}",
        oracle_host::timeline::priced(&tally, prices).unwrap_or_default()
    );
    if note.is_empty() {
        cost
    } else {
        format!("{cost}; {note}")
    }
}

/// The rows of `oracle runs --tree`: each fork right under the run it was forked from,
/// indented one level per generation, its note saying where it left its parent.
fn as_tree(
    lines: Vec<RunLine>,
    lineage: &std::collections::BTreeMap<String, oracle_host::Lineage>,
) -> Vec<RunLine> {
    // A fork's parent, or the run that spawned a child run.
    let parent_of = |id: &str| {
        let l = lineage.get(id)?;
        match (&l.parent, &l.spawned_by) {
            (Some((p, _)), _) => Some(p.clone()),
            (None, Some(s)) => Some(s.run.clone()),
            (None, None) => None,
        }
    };
    let known: std::collections::BTreeSet<String> = lines.iter().map(|l| l.id.clone()).collect();
    let mut out = Vec::with_capacity(lines.len());
    // Roots: runs whose parent is not listed; then each run's forks, depth first.
    let mut stack: Vec<(String, usize)> = lines
        .iter()
        .rev()
        .filter(|l| parent_of(&l.id).is_none_or(|p| !known.contains(&p)))
        .map(|l| (l.id.clone(), 0))
        .collect();
    while let Some((id, depth)) = stack.pop() {
        let Some(line) = lines.iter().find(|l| l.id == id) else {
            continue;
        };
        let mut line = line.clone();
        let l = lineage.get(&id).cloned().unwrap_or_default();
        let mut notes = Vec::new();
        if let Some((p, seq)) = &l.parent {
            notes.push(format!("forked from {p} at event {seq}"));
        }
        if let Some(s) = &l.spawned_by {
            notes.push(format!("child of {} (step {})", s.run, s.step));
        }
        if !l.upgrades.is_empty() {
            notes.push(count(
                l.upgrades.len() as u64,
                "plan upgrade",
                "plan upgrades",
            ));
        }
        if !line.note.is_empty() {
            notes.push(line.note.clone());
        }
        line.note = notes.join("; ");
        if depth > 0 {
            line.id = format!("{}└─ {}", "   ".repeat(depth - 1), line.id);
        }
        out.push(line);
        for child in lines.iter().rev() {
            if parent_of(&child.id).as_deref() == Some(id.as_str()) {
                stack.push((child.id.clone(), depth + 1));
            }
        }
    }
    out
}

/// One row of `oracle runs`, in a file home or a store (the same columns in both).
#[derive(Clone)]
pub(crate) struct RunLine {
    pub id: String,
    pub plan: String,
    /// As shown: `live` or `interrupted` in place of `running` where that is known.
    pub status: String,
    pub events: u64,
    pub tick: u64,
    /// Wall time from the first event to the last, when the times file says.
    pub wall: Option<u64>,
    pub note: String,
}

/// The NOTE of a row of `oracle runs`: what a suspended run waits on, why a run ended (else
/// `fallback`), and its model use.
pub(crate) fn runs_note(
    waiting: Option<&(String, String)>,
    attempts: u64,
    reason: Option<&str>,
    models: Option<(u64, u64)>,
    fallback: String,
) -> String {
    let note = match (waiting, reason) {
        (Some((step, why)), _) if attempts > 1 => {
            format!("waits on step `{step}` after {attempts} attempts: {why}")
        }
        (Some((step, why)), _) => format!("waits on step `{step}`: {why}"),
        (_, Some(why)) => why.to_owned(),
        _ => fallback,
    };
    match models {
        Some((calls, tokens)) => {
            let usage = format!(
                "{}, {}",
                count(calls, "model call", "model calls"),
                count(tokens, "token", "tokens")
            );
            if note.is_empty() {
                usage
            } else {
                format!("{usage}; {note}")
            }
        }
        None => note,
    }
}

/// The table of `oracle runs`: RUN, PLAN, STATUS, EVENTS, TICK, WALL, NOTE.
pub(crate) fn print_runs(lines: &[RunLine]) -> Result<(), CliError> {
    let idw = lines.iter().map(|r| r.id.len()).max().unwrap_or(2).max(3);
    let pw = lines.iter().map(|r| r.plan.len()).max().unwrap_or(4).max(4);
    outln!(
        "{:idw$}  {:pw$}  {:11}  {:>7}  {:>6}  {:>10}  NOTE",
        "RUN",
        "PLAN",
        "STATUS",
        "EVENTS",
        "TICK",
        "WALL"
    )?;
    for r in lines {
        outln!(
            "{:idw$}  {:pw$}  {:11}  {:>7}  {:>6}  {:>10}  {}",
            r.id,
            r.plan,
            r.status,
            r.events,
            r.tick,
            oracle_host::timeline::duration_text(r.wall),
            r.note
        )?;
    }
    Ok(())
}

impl ResumeArgs {
    /// The answer this command gives the step its run waits on (`--step` with `--value` or
    /// `--value-file`), if any.
    fn answer(&self) -> Result<Option<(String, Value)>, CliError> {
        let value = match (&self.value, &self.value_file) {
            (Some(text), _) => Some(parse_value(text, "--value")?),
            (None, Some(path)) => {
                let bytes = crate::files::read_value_file(path)?;
                let text = String::from_utf8(bytes).map_err(|e| {
                    CliError::input(format!(
                        "{}: not UTF-8 text (invalid byte at offset {})",
                        path.display(),
                        e.utf8_error().valid_up_to()
                    ))
                })?;
                Some(parse_value(&text, &path.display().to_string())?)
            }
            (None, None) => None,
        };
        match (self.step.clone(), value) {
            (Some(step), Some(v)) => Ok(Some((step, v))),
            (None, Some(_)) => Err(CliError::input(
                "--value needs --step: name the step the value is for",
            )),
            (Some(_), None) => Err(CliError::input("--step needs --value or --value-file")),
            (None, None) => Ok(None),
        }
    }

    /// How this command drives the run.
    fn drive_settings(&self) -> DriveSettings {
        DriveSettings {
            jobs: self.drive.jobs,
            durability: self.drive.durability.into(),
            snapshot_every: self.drive.snapshot_every,
            from_snapshots: !self.no_snapshots,
            // A worker elsewhere runs it: a path names the same file from any directory.
            scorer_cmd: self.drive.scorer_cmd.as_deref().map(absolute_program),
            // `--wake` over a store: the worker that applies the resume fires the timer first.
            wake: self.wake.then_some(self.force),
        }
    }

    /// This command as a store's signal: its answer read here (a `--value-file` too), since
    /// the worker that applies it runs elsewhere.
    pub(crate) fn signal(&self) -> Result<Signal, CliError> {
        self.drive.check_programs()?;
        if self.plan.is_some() {
            return Err(CliError::input(
                "resume --plan works in a file home for now: a store's signal carries no plan",
            ));
        }
        Ok(Signal::Resume {
            run: self.run.clone(),
            answer: self.answer()?.map(|(step, value)| Answer {
                step,
                value,
                by: None,
            }),
            given: self.drive.given(),
            drive: self.drive_settings(),
            allow_tool_change: self.allow_tool_change,
        })
    }

    pub(crate) fn json_flag(&self) -> bool {
        self.drive.json
    }
}

impl RunsArgs {
    pub(crate) fn json_flag(&self) -> bool {
        self.json
    }

    /// `--status`, as the word a store's run state is compared with.
    pub(crate) fn status_word(&self) -> Option<&'static str> {
        self.status.map(StatusArg::as_str)
    }
}
