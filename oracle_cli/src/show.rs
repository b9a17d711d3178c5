//! `oracle log` and `oracle inspect`: reading a run as a person or a program would.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Args;
use oracle_core::EventKind;
use oracle_host::inspect;
use serde_json::json;

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct LogArgs {
    /// A run directory, a run id, or a log file.
    target: PathBuf,
    /// First seq to show.
    #[arg(long, value_name = "SEQ")]
    from: Option<u64>,
    /// Last seq to show (inclusive).
    #[arg(long, value_name = "SEQ")]
    to: Option<u64>,
    /// Only events of this kind (e.g. tool_returned, capability_denied). Repeatable.
    #[arg(long, value_name = "KIND")]
    kind: Vec<EventKindArg>,
    /// Only the last N events (of those --from, --to, --kind and --step select). Without
    /// --kind or --step they are read from the end through the index (each record checked,
    /// and its link to the one before), not by verifying the whole log: `oracle verify` does
    /// that.
    #[arg(long, short = 'n', value_name = "N", alias = "last")]
    tail: Option<u64>,
    /// Only events of this step (their payload's `step`), e.g. `--step analyst`.
    #[arg(long, value_name = "STEP")]
    step: Option<String>,
    /// Summaries with every value whole instead of cut at about 60 characters.
    #[arg(long)]
    full: bool,
    /// One event in full: every field, its payload as indented JSON (with `--json`, the exact
    /// record).
    #[arg(long, value_name = "SEQ", conflicts_with_all = ["from", "to", "kind", "tail", "step"])]
    seq: Option<u64>,
    /// One JSON event per line (the exact recorded events) instead of a table.
    #[arg(long)]
    json: bool,
}

/// An event kind named on the command line.
#[derive(Clone, Debug)]
struct EventKindArg(EventKind);

/// An event kind no log holds; the message lists the known ones.
#[derive(Debug, thiserror::Error)]
#[error("{source}; known kinds: {}", EventKind::ALL.map(EventKind::as_str).join(", "))]
struct UnknownKindArg {
    source: oracle_core::payload::UnknownKind,
}

impl std::str::FromStr for EventKindArg {
    type Err = UnknownKindArg;
    fn from_str(s: &str) -> Result<Self, UnknownKindArg> {
        s.parse::<EventKind>()
            .map(EventKindArg)
            .map_err(|source| UnknownKindArg { source })
    }
}

pub fn log(home: &Path, a: LogArgs) -> Result<u8, CliError> {
    let paths = crate::resolve(home, &a.target)?;
    let from = a.from.unwrap_or(0);
    let to = a.to.unwrap_or(u64::MAX);
    if from > to {
        return Err(CliError::input(format!("--from {from} is after --to {to}")));
    }
    if let Some(seq) = a.seq {
        return one_event(&paths, seq, a.json);
    }
    let kinds: Vec<EventKind> = a.kind.iter().map(|k| k.0).collect();
    if !a.json {
        outln!(
            "{:>6}  {:>6}  {:<18}  {:<12}  summary",
            "seq",
            "time",
            "kind",
            "hash"
        )?;
    }
    // A failed write (the reader of stdout went away) ends the scan at once: nothing more is
    // read from the log, and the error is reported after the scan returns.
    let mut write_failed = None;
    let step = a.step.as_deref();
    let selected = |e: &oracle_core::Event| {
        e.seq >= from
            && (kinds.is_empty() || kinds.contains(&e.kind))
            && step.is_none_or(|s| e.payload.get("step").and_then(|v| v.as_str()) == Some(s))
    };
    let agents = inspect::agent_steps(&paths.log);
    let show = Show {
        json: a.json,
        full: a.full,
        agents: &agents,
    };
    if let Some(n) = a.tail
        && kinds.is_empty()
        && step.is_none()
    {
        return tail_through_index(&paths.log, n, from, to, show);
    }
    if let Some(n) = a.tail {
        // The last N selected events: a window of at most N, kept while the log streams by.
        let mut last: std::collections::VecDeque<oracle_core::Event> =
            std::collections::VecDeque::new();
        // Nothing is printed until the whole log has been read: say how far it is.
        let meter = crate::progress::Meter::spinner("reading", a.json);
        inspect::scan(&paths.log, false, |e| {
            if e.seq > to {
                return Ok(false);
            }
            if e.seq.is_multiple_of(SCAN_SHOWN_EVERY) {
                meter.set_message(|| format!("at event {}", e.seq));
            }
            if selected(&e) && n > 0 {
                if last.len() as u64 == n {
                    last.pop_front();
                }
                last.push_back(e);
            }
            Ok(true)
        })?;
        drop(meter);
        for e in last {
            print_event(&e, show)?;
        }
        return Ok(exit::OK);
    }
    inspect::scan(&paths.log, false, |e| {
        if e.seq > to {
            return Ok(false);
        }
        if !selected(&e) {
            return Ok(true);
        }
        let written = print_event(&e, show);
        match written {
            Ok(()) => Ok(true),
            Err(err) => {
                write_failed = Some(err);
                Ok(false)
            }
        }
    })?;
    match write_failed {
        Some(err) => Err(err),
        None => Ok(exit::OK),
    }
}

/// Events between two updates of a scan's progress message (a message costs a format).
const SCAN_SHOWN_EVERY: u64 = 4096;

/// `log -n N` with no filter: the last N events (up to `--to`, from `--from`) read through the
/// index from the end, so a long log is not read whole. Each record is checked on its own
/// (`inspect::Indexed::read`), and each is checked to link to the one before it (the event before
/// the first shown included); the events before that are not verified here: `oracle verify`
/// does that.
fn tail_through_index(log: &Path, n: u64, from: u64, to: u64, show: Show) -> Result<u8, CliError> {
    // Not written back: a command that only reads a log leaves no file beside it (a run's
    // writer keeps its index in step anyway).
    let mut indexed = inspect::Indexed::open(log)?;
    let Some(last) = indexed.len().checked_sub(1).map(|l| l.min(to)) else {
        return Ok(exit::OK);
    };
    if n == 0 || from > last {
        return Ok(exit::OK);
    }
    let first = last.saturating_sub(n - 1).max(from);
    let mut prev = match first.checked_sub(1) {
        Some(seq) => Some(indexed.read(seq)?.hash),
        None => None,
    };
    for seq in first..=last {
        let e = indexed.read(seq)?;
        if let Some(p) = prev
            && e.prev != p
        {
            return Err(CliError {
                code: exit::INTEGRITY,
                message: format!(
                    "{}: event {seq}: its prev {} is not the hash {} of event {}",
                    log.display(),
                    e.prev.short(),
                    p.short(),
                    seq - 1
                ),
                json: Some(json!({"kind": "integrity", "seq": seq})),
                quiet: false,
            });
        }
        prev = Some(e.hash);
        print_event(&e, show)?;
    }
    Ok(exit::OK)
}

/// How `oracle log` shows each event.
#[derive(Clone, Copy)]
struct Show<'a> {
    /// The exact record.
    json: bool,
    /// Summaries with values whole.
    full: bool,
    /// The run's agent steps, whose model calls are shown as turns.
    agents: &'a BTreeSet<String>,
}

/// `oracle log --seq N`: one event, every field (or its exact record, `--json`).
fn one_event(paths: &oracle_host::LogPaths, seq: u64, json: bool) -> Result<u8, CliError> {
    let mut found = None;
    let meter = crate::progress::Meter::spinner("reading", json);
    inspect::scan(&paths.log, false, |e| {
        if e.seq == seq {
            found = Some(e);
            return Ok(false);
        }
        if e.seq.is_multiple_of(SCAN_SHOWN_EVERY) {
            meter.set_message(|| format!("at event {}, looking for {seq}", e.seq));
        }
        Ok(true)
    })?;
    drop(meter);
    let Some(e) = found else {
        return Err(CliError::input(format!(
            "{}: no event {seq} (`oracle log` lists them)",
            paths.log.display()
        )));
    };
    if json {
        crate::out::write_bytes(&oracle_core::record::encode(&e))?;
        return Ok(exit::OK);
    }
    let parents: Vec<String> = e.parents.iter().map(u64::to_string).collect();
    outln!("seq           {}", e.seq)?;
    outln!("time          {}", e.time)?;
    outln!("kind          {}", e.kind.as_str())?;
    outln!("parents       [{}]", parents.join(", "))?;
    outln!("hash          {}", e.hash.to_hex())?;
    outln!("prev          {}", e.prev.to_hex())?;
    outln!("payload hash  {}", e.payload_hash.to_hex())?;
    outln!("state before  {}", e.state_before.to_hex())?;
    outln!("state after   {}", e.state_after.to_hex())?;
    let pretty = serde_json::to_string_pretty(&e.payload)
        .map_err(|err| CliError::input(format!("event {seq}: {err}")))?;
    outln!("payload")?;
    for line in pretty.lines() {
        outln!("  {line}")?;
    }
    Ok(exit::OK)
}

/// One event as `oracle log` shows it: the exact record (`--json`) or a table row.
fn print_event(e: &oracle_core::Event, show: Show<'_>) -> Result<(), CliError> {
    if show.json {
        // The exact record, as stored.
        return crate::out::write_bytes(&oracle_core::record::encode(e));
    }
    let summary = e
        .typed()
        .map(|p| match p {
            // An agent step's model calls are its turns: the recorded field is `attempt`, but
            // a person reads "turn" (the format is unchanged).
            oracle_core::payload::Payload::StepScheduled(s)
                if oracle_plan::is_agent_call(show.agents, &s.step) =>
            {
                s.summary_as_turn()
            }
            p if show.full => p.summary_full(),
            p => p.summary(),
        })
        .unwrap_or_else(|err| err.to_string());
    outln!(
        "{:>6}  {:>6}  {:<18}  {:<12}  {}",
        e.seq,
        e.time,
        e.kind.as_str(),
        e.hash.short(),
        summary
    )
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A run directory, a run id, or a log file.
    target: PathBuf,
    /// Show the state after this event (default: the last).
    #[arg(long, value_name = "SEQ")]
    at: Option<u64>,
    /// Replay from genesis, ignoring snapshots.
    #[arg(long)]
    no_snapshots: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Show the conversation of a model step (`llm.chat` or an agent step) instead of the
    /// state: the messages of its latest model call up to the event, and that call's reply.
    #[arg(long, value_name = "STEP")]
    conversation: Option<String>,
    /// A model binding's price, to show the run's cost: micro-units (of any currency) per 1M
    /// input and output tokens, e.g. `fast=150000/600000`. Repeatable. Display only: derived
    /// from the recorded usage, never recorded (docs/OBSERVABILITY.md, "Cost").
    #[arg(long = "model-price", value_name = "NAME=IN/OUT")]
    pub(crate) model_price: Vec<String>,
    /// Show where the run's time and tokens went instead of the state: each step in the order
    /// it started, with its attempts, its wall time (first event to last), its model tokens
    /// and, with prices, its cost. Wall times come from the times file beside the log
    /// (advisory, never recorded; `-` where unknown, e.g. a fork's copied events).
    #[arg(long, conflicts_with = "conversation")]
    steps: bool,
}

/// Characters of one message shown in the conversation view (`--json` shows them whole).
const MESSAGE_CHARS_SHOWN: usize = 160;

/// One message on one line: role, then its text or its tool calls.
fn message_line(m: &serde_json::Value) -> String {
    let role = m["role"].as_str().unwrap_or("?");
    let mut text = match (m.get("tool_calls").and_then(|c| c.as_array()), role) {
        (Some(calls), _) => calls
            .iter()
            .map(|c| {
                format!(
                    "calls {} {} [{}]",
                    c["name"].as_str().unwrap_or("?"),
                    c["arguments"],
                    c["id"].as_str().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        (None, "tool") => format!(
            "[{}] {}",
            m["tool_call_id"].as_str().unwrap_or(""),
            m["content"].as_str().unwrap_or("")
        ),
        _ => m["content"].as_str().unwrap_or("").to_owned(),
    };
    text = text.replace('\n', "\\n");
    if text.chars().count() > MESSAGE_CHARS_SHOWN {
        text = format!(
            "{}…",
            text.chars()
                .take(MESSAGE_CHARS_SHOWN - 1)
                .collect::<String>()
        );
    }
    format!("  {role:<9}  {text}")
}

fn conversation(
    paths: &oracle_host::LogPaths,
    a: &InspectArgs,
    step: &str,
) -> Result<u8, CliError> {
    let c = inspect::conversation(&paths.log, step, a.at)?;
    let upto =
        a.at.map_or("the end of the log".to_owned(), |s| format!("event {s}"));
    let Some(c) = c else {
        return Err(CliError::input(format!(
            "step `{step}` made no model call up to {upto}"
        )));
    };
    if a.json {
        crate::out::json(&json!({
            "step": step,
            "at": a.at,
            "model_calls": c.calls,
            "messages": c.messages,
            "reply": c.reply,
        }))?;
        return Ok(exit::OK);
    }
    outln!(
        "conversation of step `{step}` up to {upto} ({} model call{})",
        c.calls,
        if c.calls == 1 { "" } else { "s" }
    )?;
    for m in &c.messages {
        outln!("{}", message_line(m))?;
    }
    match &c.reply {
        Some(r) if r.get("error").is_some() => {
            outln!("  (failed)   {}", r["error"].as_str().unwrap_or(""))?
        }
        Some(r) => {
            let mut reply = r.clone();
            reply["role"] = json!("assistant");
            outln!("{}", message_line(&reply))?;
        }
        None => outln!("  (waiting for the reply)")?,
    }
    Ok(exit::OK)
}

/// The price table of `--model-price` flags (refused with exit 2 when one is malformed).
pub(crate) fn price_table(prices: &[String]) -> Result<oracle_host::metrics::Prices, CliError> {
    let mut table = oracle_host::metrics::Prices::new();
    for p in prices {
        let (name, price) =
            oracle_host::metrics::parse_price(p).map_err(|e| CliError::input(e.to_string()))?;
        table.insert(name, price);
    }
    Ok(table)
}

/// The cost of the run's model tokens up to event `upto` at `prices` (`--model-price`), in
/// micro-units, with the bindings that have no price; `None` without prices.
fn run_cost(
    log: &Path,
    upto: u64,
    prices: &[String],
) -> Result<Option<(u64, Vec<String>)>, CliError> {
    if prices.is_empty() {
        return Ok(None);
    }
    let table = price_table(prices)?;
    let tally = oracle_host::metrics::Tally::of_log_upto(log, Some(upto))
        .map_err(|e| CliError::input(format!("the log cannot be read: {e}")))?;
    Ok(Some(oracle_host::metrics::cost(&tally, &table)))
}

/// `oracle inspect RUN --steps`: the run's timeline, a row per step.
fn steps(log: &Path, a: &InspectArgs) -> Result<u8, CliError> {
    use oracle_host::timeline::{Timeline, duration_text, tokens};
    let prices = price_table(&a.model_price)?;
    let t = Timeline::of_log(log, a.at).map_err(|e| crate::run::host_error(e, a.json))?;
    if a.json {
        crate::out::json(&t.to_json(&prices))?;
        return Ok(exit::OK);
    }
    let cost = |tally: &oracle_host::metrics::Tally| {
        oracle_host::timeline::priced(tally, &prices).unwrap_or_default()
    };
    let sw = t
        .steps
        .iter()
        .map(|s| s.step.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let head = if prices.is_empty() { "" } else { "  COST" };
    outln!(
        "{:sw$}  {:>8}  {:>10}  {:>10}  {:>9}{head}",
        "STEP",
        "ATTEMPTS",
        "STARTED",
        "WALL",
        "TOKENS"
    )?;
    for s in &t.steps {
        let started = s
            .offset_ms
            .map(|ms| format!("+{}", duration_text(Some(ms))));
        outln!(
            "{:sw$}  {:>8}  {:>10}  {:>10}  {:>9}  {}",
            s.step,
            s.attempts,
            started.as_deref().unwrap_or("-"),
            duration_text(s.wall_ms),
            tokens(&s.tally),
            cost(&s.tally)
        )?;
    }
    if t.events_left_off > 0 {
        outln!("({} more events of steps not listed)", t.events_left_off)?;
    }
    outln!(
        "run: {} through event {}, {} tokens{}",
        duration_text(t.wall_ms),
        t.last_seq,
        t.tokens(),
        match cost(&t.tally).as_str() {
            "" => String::new(),
            c => format!(", cost {c}"),
        }
    )?;
    if !prices.is_empty() {
        let (_, unpriced) = oracle_host::metrics::cost(&t.tally, &prices);
        if !unpriced.is_empty() {
            outln!("(+: no price for {})", unpriced.join(", "))?;
        }
    }
    Ok(exit::OK)
}

pub fn inspect(home: &Path, a: InspectArgs) -> Result<u8, CliError> {
    let paths = crate::resolve(home, &a.target)?;
    if let Some(step) = a.conversation.clone() {
        return conversation(&paths, &a, &step);
    }
    if a.steps {
        return steps(&paths.log, &a);
    }
    let r = inspect::state_at(&paths, a.at, !a.no_snapshots)?;
    for (seq, why) in &r.rejected {
        eprintln!("warning: snapshot at seq {seq} not used: {why}");
    }
    let models = inspect::model_usage(&paths.log, Some(r.seq));
    let cost = run_cost(&paths.log, r.seq, &a.model_price)?;
    // A run suspended at this event: the step and why (`waits until ...` for a timer).
    let waits = match r.event.typed() {
        Ok(oracle_core::Payload::Suspended(s)) => Some((s.step, s.reason)),
        _ => None,
    };
    if a.json {
        let entries: serde_json::Map<String, serde_json::Value> = r
            .state
            .iter()
            .map(|(k, v)| (k.clone(), v.value()))
            .collect();
        let rejected: Vec<_> = r
            .rejected
            .iter()
            .map(|(s, why)| json!({"seq": s, "reason": why}))
            .collect();
        crate::out::json(&json!({
            "seq": r.seq,
            "time": r.event.time,
            "state_hash": r.state.hash(),
            "keys": r.state.len(),
            "entries": entries,
            "from_snapshot": r.from_snapshot,
            "rejected_snapshots": rejected,
            "models": models.as_ref().map(|u| json!({"calls": u.calls, "tokens": u.tokens})),
            "cost": cost.as_ref().map(|(micro, unpriced)| json!({"micro": micro, "unpriced": unpriced})),
            "waiting": waits.as_ref().map(|(step, reason)| json!({"step": step, "reason": reason})),
        }))?;
    } else {
        outln!(
            "state after event {} (time {}, {})",
            r.seq,
            r.event.time,
            r.event.kind
        )?;
        outln!("  hash   {}", r.state.hash())?;
        let origin = r
            .from_snapshot
            .map_or("genesis".to_owned(), |s| format!("snapshot at seq {s}"));
        outln!("  from   {origin}")?;
        if let Some((step, reason)) = &waits {
            outln!("  waits  step {step}: {reason}")?;
        }
        if let Some(u) = &models {
            let plural =
                |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
            outln!(
                "  models {}, {}",
                plural(u.calls, "call", "calls"),
                plural(u.tokens, "token", "tokens")
            )?;
        }
        if let Some((micro, unpriced)) = &cost {
            let whole = format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000);
            let note = if unpriced.is_empty() {
                String::new()
            } else {
                format!("; no price for {}", unpriced.join(", "))
            };
            outln!("  cost   {whole} ({micro} micro-units{note})")?;
        }
        outln!("  keys   {}", r.state.len())?;
        for (k, v) in r.state.iter() {
            outln!("  {k} = {v}")?;
        }
    }
    Ok(exit::OK)
}
