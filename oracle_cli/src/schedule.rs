//! `oracle schedule add|list|pause|resume|remove|trigger`: parse, call the host's schedules
//! (`oracle_host::schedule`), print. `oracle serve` fires them.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use oracle_host::schedule::{CatchUp, NewSchedule, Overlap, Schedule};
use oracle_host::{Home, Start};
use serde_json::{Value, json};

use crate::exit::{self, CliError};
use crate::run::host_error;

#[derive(Args, Debug)]
pub struct ScheduleArgs {
    #[command(subcommand)]
    command: ScheduleCommand,
}

#[derive(Subcommand, Debug)]
enum ScheduleCommand {
    /// Add a schedule: PLAN started at every tick of `--cron` in `--timezone`, by `oracle
    /// serve`, exactly once per tick (the tick's instant is the run's idempotency key).
    Add(AddArgs),
    /// List the schedules with their next fire times.
    List(ListArgs),
    /// Pause a schedule: no tick fires until `resume`.
    Pause(NameArgs),
    /// Resume a paused schedule; ticks that came while it was paused do not fire.
    Resume(NameArgs),
    /// Remove a schedule (the runs it started stay).
    Remove(NameArgs),
    /// Start a run of the schedule now, outside its ticks, and drive it as `oracle run` does
    /// (same exit codes).
    Trigger(NameArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OverlapArg {
    Skip,
    Queue,
    Allow,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum CatchUpArg {
    None,
    Last,
    All,
}

#[derive(Args, Debug)]
struct AddArgs {
    /// The schedule's name: letters, digits, `-` and `_`.
    name: String,
    /// The plan each tick starts.
    plan: PathBuf,
    /// When it fires: a cron pattern, 5 fields (`0 6 * * *`) or 6 with seconds first.
    #[arg(long)]
    cron: String,
    /// The time zone the pattern is read in (IANA name, e.g. Europe/Berlin; default UTC).
    #[arg(long)]
    timezone: Option<String>,
    /// A run input, `name=value` (repeatable), as `oracle run --input` takes it.
    #[arg(long = "input", value_name = "NAME=VALUE")]
    inputs: Vec<String>,
    /// A tick while the previous run has not finished: `skip` it, `queue` it until that run
    /// ends, or `allow` a second run.
    #[arg(long, value_enum, default_value = "skip")]
    overlap: OverlapArg,
    /// Ticks missed while nothing fired (the server was down): fire `none`, the `last`, or
    /// `all` of them.
    #[arg(long = "catch-up", value_enum, default_value = "none")]
    catch_up: CatchUpArg,
    /// The queue each tick's run waits its turn in (`oracle queue set`); default: the plan's
    /// `queue` line, if any.
    #[arg(long, value_name = "NAME")]
    queue: Option<String>,
    /// The runs' priority in the queue, 0 (default) to 9: higher goes first.
    #[arg(long, value_name = "0-9")]
    priority: Option<u64>,
    /// The runs' partition in the queue.
    #[arg(long, value_name = "KEY")]
    partition: Option<String>,
    /// Print the schedule as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ListArgs {
    /// Next fire times as of this RFC 3339 instant instead of now.
    #[arg(long, value_name = "INSTANT")]
    at: Option<String>,
    /// One JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct NameArgs {
    name: String,
    #[arg(long)]
    json: bool,
}

/// Where the schedules are: a file home's directory or a store's table.
enum Kept<'a> {
    Home(Home),
    Store(&'a oracle_host::Database),
}

impl Kept<'_> {
    fn add(&self, new: NewSchedule, now: u64) -> Result<Schedule, oracle_host::HostError> {
        match self {
            Kept::Home(h) => h.schedule_add(new, now),
            Kept::Store(s) => s.schedule_add(new, now),
        }
    }

    fn all(&self) -> Result<Vec<Schedule>, oracle_host::HostError> {
        match self {
            Kept::Home(h) => h.schedules(),
            Kept::Store(s) => s.schedules(),
        }
    }

    fn pause(
        &self,
        name: &str,
        paused: bool,
        now: u64,
    ) -> Result<Schedule, oracle_host::HostError> {
        match self {
            Kept::Home(h) => h.schedule_pause(name, paused, now),
            Kept::Store(s) => s.schedule_pause(name, paused, now),
        }
    }

    fn remove(&self, name: &str) -> Result<Schedule, oracle_host::HostError> {
        match self {
            Kept::Home(h) => h.schedule_remove(name),
            Kept::Store(s) => s.schedule_remove(name),
        }
    }
}

pub fn run(home: &Path, a: ScheduleArgs) -> Result<u8, CliError> {
    let host = Home::open(home).map_err(|e| host_error(e, false))?;
    let now = oracle_host::schedule::now_ms();
    match a.command {
        ScheduleCommand::Trigger(a) => trigger(&host, a, now),
        command => common(&Kept::Home(host), command, now),
    }
}

/// `oracle schedule ... --store URL`: the store's schedules, fired by its workers and servers.
pub fn run_store(url: &str, a: ScheduleArgs) -> Result<u8, CliError> {
    let store = oracle_host::Database::connect(url).map_err(|e| host_error(e.into(), false))?;
    let now = oracle_host::schedule::now_ms();
    match a.command {
        ScheduleCommand::Trigger(a) => {
            let scratch = tempfile::tempdir()
                .map_err(|e| CliError::input(format!("a scratch directory: {e}")))?;
            let (run, existing) = store
                .schedule_trigger(scratch.path(), &a.name, now)
                .map_err(|e| host_error(e, a.json))?;
            if a.json {
                crate::out::json(
                    &json!({"ok": true, "run": run, "status": "submitted", "existing": existing}),
                )?;
            } else {
                outln!("run      {run}")?;
                outln!("status   submitted (a worker drives it)")?;
            }
            Ok(exit::OK)
        }
        command => common(&Kept::Store(&store), command, now),
    }
}

fn common(kept: &Kept<'_>, command: ScheduleCommand, now: u64) -> Result<u8, CliError> {
    match command {
        ScheduleCommand::Add(a) => add(kept, a, now),
        ScheduleCommand::List(a) => list(kept, a, now),
        ScheduleCommand::Pause(a) => pause(kept, a, true, now),
        ScheduleCommand::Resume(a) => pause(kept, a, false, now),
        ScheduleCommand::Remove(a) => {
            let s = kept.remove(&a.name).map_err(|e| host_error(e, a.json))?;
            print_one(&s, None, a.json, "removed")
        }
        ScheduleCommand::Trigger(_) => Err(CliError::input("internal: trigger is not common")),
    }
}

fn parse_inputs(raw: &[String]) -> Result<Vec<(String, String)>, CliError> {
    raw.iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(CliError::input(format!(
                "--input `{s}`: expected NAME=VALUE"
            ))),
        })
        .collect()
}

fn add(kept: &Kept<'_>, a: AddArgs, now: u64) -> Result<u8, CliError> {
    let new = NewSchedule {
        name: a.name,
        plan: a.plan,
        cron: a.cron,
        timezone: a.timezone,
        inputs: parse_inputs(&a.inputs)?,
        overlap: match a.overlap {
            OverlapArg::Skip => Overlap::Skip,
            OverlapArg::Queue => Overlap::Queue,
            OverlapArg::Allow => Overlap::Allow,
        },
        catch_up: match a.catch_up {
            CatchUpArg::None => CatchUp::None,
            CatchUpArg::Last => CatchUp::Last,
            CatchUpArg::All => CatchUp::All,
        },
        root: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        plan_text: None,
        queue: a.queue,
        priority: a.priority,
        partition: a.partition,
    };
    let s = kept.add(new, now).map_err(|e| host_error(e, a.json))?;
    let next = s.next_at(now).map_err(|e| host_error(e, a.json))?;
    print_one(&s, next, a.json, "added")
}

fn pause(kept: &Kept<'_>, a: NameArgs, paused: bool, now: u64) -> Result<u8, CliError> {
    let s = kept
        .pause(&a.name, paused, now)
        .map_err(|e| host_error(e, a.json))?;
    let next = s.next_at(now).map_err(|e| host_error(e, a.json))?;
    print_one(&s, next, a.json, if paused { "paused" } else { "resumed" })
}

/// A schedule as `list --json` and the API show it.
pub fn schedule_json(s: &Schedule, next: Option<u64>) -> Value {
    json!({
        "name": s.name,
        "plan": s.plan,
        "cron": s.cron,
        "timezone": s.timezone,
        "inputs": s.inputs,
        "overlap": s.overlap,
        "catch_up": s.catch_up,
        "paused": s.paused,
        "next": next.map(oracle_host::rfc3339),
    })
}

fn next_text(next: Option<u64>, paused: bool) -> String {
    match (next, paused) {
        (_, true) => "paused".to_owned(),
        (Some(t), false) => oracle_host::rfc3339(t),
        (None, false) => "never".to_owned(),
    }
}

fn print_one(s: &Schedule, next: Option<u64>, json_out: bool, verb: &str) -> Result<u8, CliError> {
    if json_out {
        let mut v = schedule_json(s, next);
        if let Value::Object(m) = &mut v {
            m.insert("ok".into(), Value::Bool(true));
            m.insert("done".into(), Value::from(verb));
        }
        crate::out::json(&v)?;
    } else {
        outln!(
            "schedule {} {verb}: `{}` ({}), next {}",
            s.name,
            s.cron,
            s.timezone,
            next_text(next, s.paused)
        )?;
    }
    Ok(exit::OK)
}

fn list(kept: &Kept<'_>, a: ListArgs, now: u64) -> Result<u8, CliError> {
    let at = match &a.at {
        Some(t) => oracle_host::instant_ms(t).map_err(|e| CliError::input(format!("--at {e}")))?,
        None => now,
    };
    let all = kept.all().map_err(|e| host_error(e, a.json))?;
    let mut rows = Vec::new();
    for s in &all {
        // `--at` asks what would fire after that instant, whenever the schedule was added.
        let shown = Schedule {
            since_ms: if a.at.is_some() { 0 } else { s.since_ms },
            ..s.clone()
        };
        let next = shown.next_at(at).map_err(|e| host_error(e, a.json))?;
        rows.push((s, next));
    }
    if a.json {
        let list: Vec<Value> = rows.iter().map(|(s, n)| schedule_json(s, *n)).collect();
        crate::out::json(&json!({"ok": true, "at": oracle_host::rfc3339(at), "schedules": list}))?;
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        outln!("no schedules (add one with `oracle schedule add NAME PLAN --cron PATTERN`)")?;
    }
    for (s, next) in rows {
        outln!(
            "{:<20} {:<16} {:<16} next {:<24} {}",
            s.name,
            s.cron,
            s.timezone,
            next_text(next, s.paused),
            s.plan.display()
        )?;
    }
    Ok(exit::OK)
}

fn trigger(host: &Home, a: NameArgs, now: u64) -> Result<u8, CliError> {
    let s = match host
        .schedule_trigger(&a.name, now)
        .map_err(|e| host_error(e, a.json))?
    {
        Start::New(s) => s,
        Start::Existing(e) => {
            return Err(CliError::input(format!(
                "schedule {} was triggered at this instant already (run {})",
                a.name, e.id
            )));
        }
    };
    crate::run::print_session(&s, a.json, "recorded", None)?;
    Ok(crate::run::status_code(&s.report.ending))
}
