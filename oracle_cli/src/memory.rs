//! `oracle memory | adjudications | adjudicate | sweep | claim`: a run's belief memory, the
//! adjudication oracle loop, and evidence from outside the plan, from the command line.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use oracle_host::HostError;
use oracle_host::signal::Signal;
use oracle_host::{OutsideClaim, Reinstate, RunMemory, SessionError, Submission};
use oracle_memory::claim::UnknownProvenance;
use oracle_memory::memory::RequestState;
use oracle_memory::{
    AdjudicateError, Belief, Cardinality, Claim, Criticality, Provenance, Query, RequestStatus,
    ValidTime, Verdict,
};
use serde_json::{Value, json};

use crate::exit::{self, CliError};
use crate::maintain::DurabilityArg;

#[derive(Args, Debug)]
pub struct MemoryArgs {
    /// Run id (under `<home>/runs`), run directory, or the run's log file; or `list` (the
    /// home's stores), `export NAME` (a store's log on stdout), `import NAME` (a store from
    /// --file), `forget NAME` (delete a store whole, recorded in the home's ledger), `ledger`
    /// (that ledger, checked), `compact NAME --keep N` (fold all but the newest N records into
    /// the store's checked base), `seal NAME` (adopt a store written before stores were sealed:
    /// every record checked, then its head sealed with the home's key).
    #[arg(required_unless_present = "memory")]
    pub(crate) run: Option<String>,
    /// With `export` or `import`: the store's name.
    pub(crate) name: Option<String>,
    /// The named store shared by runs to show, instead of a run's memory.
    #[arg(long, value_name = "NAME")]
    pub(crate) memory: Option<String>,
    /// With `forget`: why, recorded in the ledger (never the store's claims).
    #[arg(long, default_value = "")]
    pub(crate) note: String,
    /// With `compact`: the newest records kept in the store's log; every record before them is
    /// folded into its base, which names the segment taken out by range, head and digest.
    #[arg(long, value_name = "N")]
    pub(crate) keep: Option<u64>,
    /// With `import`: the exported log to read (default: stdin).
    #[arg(long, value_name = "PATH")]
    pub(crate) file: Option<PathBuf>,
    /// Only this subject's lines. With `--memory NAME` and `--predicate`: only that line of
    /// the store is read (its checkpoint's section), not the whole store.
    #[arg(long)]
    pub(crate) subject: Option<String>,
    /// Only lines with this predicate.
    #[arg(long)]
    pub(crate) predicate: Option<String>,
    /// What was believed at this logical tick (claims and verdicts recorded later are left
    /// out). Default: now.
    #[arg(long, value_name = "TICK")]
    pub(crate) as_of: Option<u64>,
    /// The valid time asked about. Default: the --as-of tick, else the run's current tick.
    #[arg(long, value_name = "TICK")]
    valid_at: Option<u64>,
    /// One JSON object per line (subject and predicate), one per output line.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RequestStatusArg {
    Pending,
    Resolved,
    Expired,
}

#[derive(Args, Debug)]
pub struct AdjudicationsArgs {
    /// Run id (under `<home>/runs`), run directory, or the run's log file.
    #[arg(required_unless_present = "memory")]
    run: Option<String>,
    /// The named store whose requests to list, instead of a run's.
    #[arg(long, value_name = "NAME")]
    pub(crate) memory: Option<String>,
    /// Only adjudications with this status.
    #[arg(long, value_enum)]
    status: Option<RequestStatusArg>,
    /// Also send the pending requests not yet delivered to PROGRAM (JSON on stdin).
    #[arg(long, value_name = "PROGRAM")]
    oracle_cmd: Option<PathBuf>,
    /// One JSON object per adjudication, one per line.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VerdictArg {
    /// The challenger is right: it becomes the belief; the incumbent is superseded (bounded in
    /// valid time, never deleted).
    Affirm,
    /// The incumbent stands; the challenger is superseded.
    Deny,
    /// Cannot tell: both claims become contested and the handle is used up.
    Unknown,
}

#[derive(Args, Debug)]
pub struct AdjudicateArgs {
    /// Run id (under `<home>/runs`), run directory, or the run's log file.
    run: String,
    /// The adjudication's handle (`adj-<seq>`, from `oracle adjudications`). With --memory the
    /// one argument is the handle.
    #[arg(required_unless_present = "memory")]
    handle: Option<String>,
    /// The verdict is on a request of this named store (give only the handle).
    #[arg(long, value_name = "NAME", conflicts_with = "resume")]
    pub(crate) memory: Option<String>,
    #[arg(long, value_enum)]
    verdict: VerdictArg,
    /// Provenance of the evidence behind the verdict. Only `external_first_hand` is accepted;
    /// anything else is refused and nothing is written.
    #[arg(long, value_name = "PROVENANCE")]
    evidence: String,
    /// Why, for the audit trail (recorded in the verdict's event).
    #[arg(long, default_value = "")]
    note: String,
    /// The logical tick the verdict is given at (default: the run's current tick). A verdict at
    /// or after the adjudication's expiry is refused, and so is a tick past TIME_MAX (2^53).
    #[arg(long, value_name = "TICK")]
    now: Option<u64>,
    /// Then resume the run (as `oracle resume RUN` would) and report how it went on.
    #[arg(long)]
    resume: bool,
    /// With --resume: send new adjudication requests to PROGRAM.
    #[arg(long, value_name = "PROGRAM", requires = "resume")]
    oracle_cmd: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = DurabilityArg::Effect)]
    durability: DurabilityArg,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Run id (under `<home>/runs`), run directory, or the run's log file.
    #[arg(required_unless_present = "memory")]
    run: Option<String>,
    /// Sweep this named store's requests instead, at the tick after its head.
    #[arg(long, value_name = "NAME", conflicts_with = "now")]
    pub(crate) memory: Option<String>,
    /// The logical tick to judge tick expiries at (default: the run's current tick); at most
    /// TIME_MAX (2^53). Real-time requests (`--adjudication-expiry 48h`) whose instant has
    /// passed on the wall clock expire too.
    #[arg(long, value_name = "TICK")]
    now: Option<u64>,
    #[arg(long, value_enum, default_value_t = DurabilityArg::Effect)]
    durability: DurabilityArg,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CriticalityArg {
    Low,
    Medium,
    High,
    Critical,
}

#[derive(Args, Debug)]
pub struct ClaimArgs {
    /// Run id (under `<home>/runs`), run directory, or the run's log file.
    #[arg(required_unless_present = "memory")]
    run: Option<String>,
    /// The claim goes to this named store shared by runs, through its gate under its lock
    /// (no run is named).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["resume", "now"])]
    pub(crate) memory: Option<String>,
    #[arg(long)]
    subject: String,
    #[arg(long)]
    predicate: String,
    /// The value, as JSON (no floats).
    #[arg(long, value_name = "JSON")]
    value: String,
    /// Where the evidence comes from: `external_first_hand` or `user_asserted` (a claim from
    /// outside the plan is never model-derived).
    #[arg(long, value_name = "PROVENANCE")]
    provenance: String,
    /// How much a wrong belief on the line costs (a new request takes the higher of this and
    /// the incumbent's).
    #[arg(long, value_enum, default_value_t = CriticalityArg::Medium)]
    criticality: CriticalityArg,
    /// When the claim holds, in logical ticks: `START..` or `START..END`, optionally followed
    /// by `@PCT` (the confidence in the window, default 100). Default: always.
    #[arg(long, value_name = "START..[END][@PCT]")]
    valid: Option<String>,
    /// Why, for the audit trail (recorded in the claim's event).
    #[arg(long, default_value = "")]
    note: String,
    /// The logical tick the claim is recorded at (default, and earliest: one after the run's
    /// last event; an earlier tick is refused, and so is one past TIME_MAX, 2^53).
    #[arg(long, value_name = "TICK")]
    now: Option<u64>,
    /// Then resume the run (as `oracle resume RUN` would) and report how it went on.
    #[arg(long)]
    resume: bool,
    /// With --resume: send new adjudication requests to PROGRAM.
    #[arg(long, value_name = "PROGRAM", requires = "resume")]
    oracle_cmd: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = DurabilityArg::Effect)]
    durability: DurabilityArg,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct ReinstateArgs {
    /// Run id (under `<home>/runs`), run directory, or the run's log file. With --memory the
    /// one argument is the claim.
    run: String,
    /// The superseded claim: its id, or at least 8 hex characters of it (`oracle memory RUN
    /// --history` lists ids).
    #[arg(required_unless_present = "memory")]
    claim: Option<String>,
    /// The claim is one of this named store's (give only the claim).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["resume", "now"])]
    pub(crate) memory: Option<String>,
    /// Provenance of the evidence behind it. Only `external_first_hand` is accepted; anything
    /// else is refused and nothing is written.
    #[arg(long, value_name = "PROVENANCE")]
    evidence: String,
    /// Why, for the audit trail (recorded in the event).
    #[arg(long, default_value = "")]
    note: String,
    /// The logical tick it is given at (default, and earliest: one after the log's last tick);
    /// at most TIME_MAX (2^53).
    #[arg(long, value_name = "TICK")]
    now: Option<u64>,
    /// Then resume the run (as `oracle resume RUN` would) and report how it went on.
    #[arg(long)]
    resume: bool,
    /// With --resume: send new adjudication requests to PROGRAM.
    #[arg(long, value_name = "PROGRAM", requires = "resume")]
    oracle_cmd: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = DurabilityArg::Effect)]
    durability: DurabilityArg,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    json: bool,
}

fn load(home: &Path, run: &str, json_out: bool) -> Result<RunMemory, CliError> {
    oracle_host::Home::open(home)
        .and_then(|h| h.memory(run))
        .map_err(|e| crate::run::host_error(e, json_out))
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        let mut t: String = s.chars().take(40).collect();
        t.push('…');
        t
    } else {
        s
    }
}

fn belief_line(b: &Belief) -> String {
    match b {
        Belief::Resolved { value, .. } => format!("resolved: {}", short(value)),
        Belief::Contested {
            alternatives,
            pending,
        } => {
            let values: Vec<String> = alternatives.iter().map(|a| short(&a.value)).collect();
            let mut s = format!("contested: {}", values.join(" | "));
            if !pending.is_empty() {
                s.push_str(&format!(" (pending {})", pending.join(", ")));
            }
            s
        }
        Belief::NoBelief => "no belief".to_owned(),
        Belief::TimingUncertain { alternatives } => {
            let values: Vec<String> = alternatives.iter().map(|a| short(&a.value)).collect();
            format!("timing uncertain: {}", values.join(" | "))
        }
    }
}

pub fn memory(
    home: &Path,
    database: Option<&oracle_host::Database>,
    a: MemoryArgs,
) -> Result<u8, CliError> {
    if let Some(code) = crate::stores::memory(home, database, &a)? {
        return Ok(code);
    }
    let run = a.run.clone().unwrap_or_default();
    let rm = load(home, &run, a.json)?;
    let m = &rm.memory;
    let as_of = a.as_of.unwrap_or(u64::MAX);
    let lines: Vec<(String, String)> = match &a.subject {
        Some(s) => m
            .subject_lines(s)
            .into_iter()
            .map(|(s, p)| (s.to_owned(), p.to_owned()))
            .collect(),
        None => m.lines().cloned().collect(),
    };
    let lines: Vec<_> = lines
        .into_iter()
        .filter(|(_, p)| a.predicate.as_ref().is_none_or(|want| want == p))
        .collect();
    if lines.is_empty() && !a.json {
        outln!("no claims in run {}", rm.run.id)?;
        return Ok(exit::OK);
    }
    for (subject, predicate) in &lines {
        let q = Query {
            subject: subject.clone(),
            predicate: predicate.clone(),
            as_of: a.as_of,
            valid_at: a.valid_at.or(a.as_of).or(Some(rm.time)),
        };
        let belief = oracle_memory::belief::query(m, &q, rm.settings.confidence_min_pct);
        let claims = oracle_memory::tools::history_entries(m, subject, Some(predicate), as_of);
        if a.json {
            let claims: Vec<Value> = claims
                .iter()
                .map(|e| oracle_memory::tools::claim_view(m, e, as_of))
                .collect();
            crate::out::json(&json!({
                "subject": subject,
                "predicate": predicate,
                "belief": belief.to_value(),
                "claims": claims,
            }))?;
            continue;
        }
        outln!("{subject} / {predicate}: {}", belief_line(&belief))?;
        for e in claims {
            let disp = m.disposition(&e.id, as_of).map_or("?", |d| d.as_str());
            let from = if e.origin.tool == oracle_memory::external::ORIGIN_TOOL {
                "from outside (oracle claim)".to_owned()
            } else {
                format!("step {}", e.origin.step)
            };
            outln!(
                "  {:12}  {:24}  {:23}  {:19}  {:8}  event {} {from}",
                e.id.short(),
                short(&e.claim.value),
                disp,
                e.claim.provenance.as_str(),
                e.claim.criticality.as_str(),
                e.origin.seq,
            )?;
        }
    }
    Ok(exit::OK)
}

fn request_json(m: &oracle_memory::Memory, r: &RequestState) -> Value {
    let value = |id| m.entry(&id).map(|e| e.claim.value.clone());
    json!({
        "handle": r.request.handle,
        "status": r.status.name(),
        "subject": r.request.subject,
        "predicate": r.request.predicate,
        "criticality": r.request.criticality,
        "incumbent": {"claim": r.incumbent(), "value": value(r.incumbent())},
        "challenger": {"claim": r.request.challenger, "value": value(r.request.challenger)},
        "reason": r.request.reason,
        "expires_at": r.request.expires_at,
        "expires_ms": r.request.expires_ms,
        "seq": r.origin.seq,
        "step": r.origin.step,
        "outcome": r.status,
    })
}

/// When a request expires, as `oracle adjudications` shows it: the tick of a logical expiry,
/// the RFC 3339 instant of a real-time one (`--adjudication-expiry 48h`), else `never`.
fn expires_text(r: &oracle_memory::Request) -> String {
    match (r.expires_at, r.expires_ms) {
        (Some(tick), _) => tick.to_string(),
        (None, Some(ms)) => oracle_host::rfc3339(ms),
        (None, None) => "never".to_owned(),
    }
}

pub fn adjudications(
    home: &Path,
    database: Option<&oracle_host::Database>,
    a: AdjudicationsArgs,
) -> Result<u8, CliError> {
    crate::run::check_program("--oracle-cmd", a.oracle_cmd.as_deref())?;
    if let Some(name) = &a.memory {
        return crate::stores::requests(home, database, name, a.json);
    }
    let run = a.run.clone().unwrap_or_default();
    let rm = load(home, &run, a.json)?;
    let m = &rm.memory;
    // A pending request past its expiry is listed as expired (not swept): a verdict now would
    // be refused, and a sweep now would expire it.
    let status_of = |r: &RequestState| rm.request_status(r);
    let all: Vec<&RequestState> = rm
        .requests_in_order()
        .into_iter()
        .filter(|r| {
            a.status.is_none_or(|s| match s {
                RequestStatusArg::Pending => status_of(r) == "pending",
                RequestStatusArg::Resolved => status_of(r) == "resolved",
                RequestStatusArg::Expired => {
                    matches!(status_of(r), "expired" | "expired_not_swept")
                }
            })
        })
        .collect();
    let notified = crate::run::notify(&rm.run.dir, home, a.oracle_cmd.as_deref());
    if a.json {
        for r in &all {
            let mut v = request_json(m, r);
            if let Value::Object(o) = &mut v {
                o.insert("status".into(), json!(status_of(r)));
            }
            crate::out::json(&v)?;
        }
        if let Some(n) = notified {
            crate::out::json(&json!({"notified": n}))?;
        }
        return Ok(exit::OK);
    }
    if all.is_empty() {
        outln!("no adjudications in run {}", rm.run.id)?;
    } else {
        outln!(
            "{:10}  {:19}  {:8}  {:28}  {:>7}  CONFLICT / OUTCOME",
            "HANDLE",
            "STATUS",
            "CRIT",
            "LINE",
            "EXPIRES"
        )?;
    }
    for r in &all {
        let value = |id| {
            m.entry(&id)
                .map_or("?".to_owned(), |e| short(&e.claim.value))
        };
        let outcome = match &r.status {
            RequestStatus::Pending if rm.expired_unswept(r) => format!(
                "{} (incumbent) vs {} (challenger); past its expiry: `oracle sweep {}` makes it contested",
                value(r.incumbent()),
                value(r.request.challenger),
                rm.run.id
            ),
            RequestStatus::Pending => format!(
                "{} (incumbent) vs {} (challenger)",
                value(r.incumbent()),
                value(r.request.challenger)
            ),
            RequestStatus::Resolved {
                verdict, seq, by, ..
            } => match by {
                Some(h) => format!("{verdict} by the verdict on {h} (event {seq})"),
                None => format!("{verdict} (event {seq})"),
            },
            RequestStatus::Expired { seq, now, .. } => {
                format!("expired: contested (swept at tick {now}, event {seq})")
            }
        };
        let status = match status_of(r) {
            "expired_not_swept" => "expired (not swept)",
            other => other,
        };
        outln!(
            "{:10}  {status:19}  {:8}  {:28}  {:>7}  {outcome}",
            r.request.handle,
            r.request.criticality.as_str(),
            format!("{}/{}", r.request.subject, r.request.predicate),
            expires_text(&r.request),
        )?;
    }
    if let Some(n) = notified {
        crate::run::print_notified(&n)?;
    }
    Ok(exit::OK)
}

/// The error of a verdict or reinstatement: a refusal gets its own exit code and, with
/// `--json`, its outcome object; anything else is reported as every session error is.
fn verdict_error(e: HostError, json_out: bool) -> CliError {
    let HostError::Session(SessionError::Adjudicate { run, source }) = e else {
        return crate::run::host_error(e, json_out);
    };
    let (code, mut v) = refusal(&run, &source);
    let message = format!("{run}: {source}");
    if json_out {
        if let Value::Object(m) = &mut v {
            m.insert("ok".into(), json!(false));
            m.insert("message".into(), json!(message));
            let kind = m.get("outcome").cloned();
            m.insert(
                "error".into(),
                exit::error_json(Some(json!({"kind": kind})), code, &message),
            );
        }
        if let Err(closed) = crate::out::json(&v) {
            return closed;
        }
    }
    CliError {
        code,
        message,
        json: None,
        quiet: false,
    }
}

/// Exit code and JSON for a refused verdict.
fn refusal(run: &str, e: &AdjudicateError) -> (u8, Value) {
    match e {
        AdjudicateError::UnknownHandle { handle } => (
            exit::UNKNOWN_HANDLE,
            json!({"outcome": "unknown_handle", "handle": handle}),
        ),
        AdjudicateError::AlreadyResolved {
            handle,
            seq,
            original,
            ..
        } => (
            exit::ALREADY_RESOLVED,
            json!({"outcome": "already_resolved", "handle": handle, "seq": seq, "original": original}),
        ),
        AdjudicateError::Expired {
            handle,
            expires_at,
            swept_at,
        } => (
            exit::EXPIRED,
            json!({"outcome": "expired", "handle": handle, "expires_at": expires_at, "swept_at": swept_at}),
        ),
        AdjudicateError::Evidence { given } => (
            exit::INPUT,
            json!({"outcome": "evidence_refused", "evidence": given, "run": run}),
        ),
        AdjudicateError::UnknownClaim { claim } => (
            exit::UNKNOWN_HANDLE,
            json!({"outcome": "unknown_claim", "claim": claim}),
        ),
        AdjudicateError::AmbiguousClaim { prefix, matches } => (
            exit::INPUT,
            json!({"outcome": "ambiguous_claim", "claim": prefix, "matches": matches}),
        ),
        AdjudicateError::ClaimPrefix { given, min } => (
            exit::INPUT,
            json!({"outcome": "bad_claim", "claim": given, "min_hex": min}),
        ),
        AdjudicateError::NotReinstatable { claim, disposition } => (
            exit::INPUT,
            json!({"outcome": "not_reinstatable", "claim": claim, "disposition": disposition}),
        ),
        AdjudicateError::CannotCarry { claim, provenance } => (
            exit::INPUT,
            json!({"outcome": "cannot_carry", "claim": claim, "provenance": provenance}),
        ),
    }
}

/// `oracle reinstate`: a verdict that names a superseded claim and makes it live again.
pub(crate) fn reinstate(
    home: &Path,
    database: Option<&oracle_host::Database>,
    a: ReinstateArgs,
) -> Result<u8, CliError> {
    crate::run::check_program("--oracle-cmd", a.oracle_cmd.as_deref())?;
    let r = a.reinstatement()?;
    if let Some(name) = &a.memory {
        return crate::stores::reinstate(home, database, name, &r, a.json);
    }
    let applied = crate::run::host(home, a.json)?
        .reinstate(&a.run, &r, a.durability.into())
        .map_err(|e| verdict_error(e, a.json))?;
    if a.json && !a.resume {
        crate::out::json(&json!({
            "ok": true,
            "outcome": "reinstated",
            "run": applied.run,
            "claim": applied.claim,
            "seq": applied.seq,
            "time": applied.time,
            "effects": applied.effects.to_value(),
            "subject": applied.subject,
            "predicate": applied.predicate,
            "belief": applied.belief.to_value(),
        }))?;
    } else if !a.json {
        outln!(
            "reinstated claim {} recorded as event {} at tick {}",
            applied.claim.short(),
            applied.seq,
            applied.time
        )?;
        let overturned = applied
            .effects
            .dispositions
            .iter()
            .filter(|d| d.disposition == oracle_memory::Disposition::Superseded)
            .count();
        if overturned > 0 {
            outln!("         {overturned} claim(s) of another value superseded where it holds")?;
        }
        outln!(
            "belief   {} / {}: {}",
            applied.subject,
            applied.predicate,
            belief_line(&applied.belief)
        )?;
    }
    if a.resume {
        return crate::run::resume_after_verdict(home, &a.run, a.json, a.oracle_cmd.as_deref());
    }
    Ok(exit::OK)
}

/// Refuses a `--now` past `TIME_MAX` (exit 2, nothing read or written).
fn check_now(now: Option<u64>, json: bool) -> Result<(), CliError> {
    let Some(now) = now else {
        return Ok(());
    };
    oracle_core::event::check_time("--now", now)
        .map(|_| ())
        .map_err(|e| {
            let message = e.to_string();
            if json
                && let Err(closed) = crate::out::json(&json!({
                    "ok": false,
                    "error": exit::error_json(Some(json!({"kind": "input", "reason": message, "time_max": oracle_core::event::TIME_MAX})), exit::INPUT, &message),
                }))
            {
                return closed;
            }
            CliError::input(message)
        })
}

pub(crate) fn adjudicate(
    home: &Path,
    database: Option<&oracle_host::Database>,
    a: AdjudicateArgs,
) -> Result<u8, CliError> {
    crate::run::check_program("--oracle-cmd", a.oracle_cmd.as_deref())?;
    let sub = a.submission()?;
    if let Some(name) = &a.memory {
        let handle = a.handle.clone().unwrap_or_else(|| a.run.clone());
        return crate::stores::adjudicate(
            home,
            database,
            name,
            Submission { handle, ..sub },
            a.json,
        );
    }
    let applied = crate::run::host(home, a.json)?
        .adjudicate(&a.run, &sub, a.durability.into())
        .map_err(|e| verdict_error(e, a.json))?;
    if a.json && !a.resume {
        crate::out::json(&applied.to_json())?;
    } else if !a.json {
        outln!(
            "verdict  {} on {} recorded as event {}",
            applied.verdict,
            applied.handle,
            applied.seq
        )?;
        outln!(
            "belief   {} / {}: {}",
            applied.subject,
            applied.predicate,
            belief_line(&applied.belief)
        )?;
        for r in &applied.effects.repointed {
            outln!(
                "         {} now compares against claim {}",
                r.handle,
                r.incumbent.short()
            )?;
        }
        for h in &applied.effects.agreed {
            outln!("         {h} closed: its challenger agrees with the affirmed value")?;
        }
    }
    if a.resume {
        return crate::run::resume_after_verdict(home, &a.run, a.json, a.oracle_cmd.as_deref());
    }
    Ok(exit::OK)
}

pub(crate) fn sweep(
    home: &Path,
    database: Option<&oracle_host::Database>,
    a: SweepArgs,
) -> Result<u8, CliError> {
    check_now(a.now, a.json)?;
    if let Some(name) = &a.memory {
        return crate::stores::sweep(home, database, name, a.json);
    }
    let run = a.run.clone().unwrap_or_default();
    let swept = crate::run::host(home, a.json)?
        .sweep(&run, a.now, a.durability.into())
        .map_err(|e| crate::run::host_error(e, a.json))?;
    if a.json {
        crate::out::json(&json!({
            "ok": true,
            "run": swept.run,
            "now": swept.now,
            "expired": swept.expired.len(),
            "handles": swept.expired.iter().map(|x| x.handle.clone()).collect::<Vec<_>>(),
            "seq": swept.seq,
        }))?;
        return Ok(exit::OK);
    }
    match swept.seq {
        None => outln!(
            "sweep    0 adjudications expired at tick {} (nothing written)",
            swept.now
        )?,
        Some(seq) => {
            outln!(
                "sweep    {} adjudication(s) expired at tick {}: now contested (event {seq})",
                swept.expired.len(),
                swept.now
            )?;
            for x in &swept.expired {
                outln!("         {} (expired at tick {})", x.handle, x.expires_at)?;
            }
        }
    }
    Ok(exit::OK)
}

/// Parses `--valid START..[END][@PCT]`.
fn parse_valid(text: &str) -> Result<ValidTime, CliError> {
    let bad = || {
        CliError::input(format!(
            "--valid {text:?}: expected START..[END][@PCT] in logical ticks, e.g. 5.. or 5..9@80"
        ))
    };
    let (window, pct) = match text.split_once('@') {
        Some((w, p)) => (w, p.parse::<u64>().map_err(|_| bad())?),
        None => (text, 100),
    };
    let (start, end) = window.split_once("..").ok_or_else(bad)?;
    let start = start.parse::<u64>().map_err(|_| bad())?;
    let end = match end {
        "" => None,
        e => Some(e.parse::<u64>().map_err(|_| bad())?),
    };
    for t in [Some(start), end].into_iter().flatten() {
        oracle_core::event::check_time("--valid", t).map_err(|e| CliError::input(e.to_string()))?;
    }
    Ok(ValidTime {
        start,
        end,
        confidence_pct: pct,
    })
}

pub(crate) fn claim(
    home: &Path,
    database: Option<&oracle_host::Database>,
    a: ClaimArgs,
) -> Result<u8, CliError> {
    crate::run::check_program("--oracle-cmd", a.oracle_cmd.as_deref())?;
    let outside = a.outside_claim()?;
    if let Some(name) = &a.memory {
        return crate::stores::claim(home, database, name, outside, a.json);
    }
    let run = a.run.clone().unwrap_or_default();
    let applied = match crate::run::host(home, a.json)?.claim(&run, &outside, a.durability.into()) {
        Ok(v) => v,
        Err(HostError::Session(SessionError::ClaimRefused { run, source })) => {
            let message = format!("{run}: the claim is refused: {source}");
            if a.json {
                crate::out::json(&json!({
                    "ok": false,
                    "outcome": "refused",
                    "run": run,
                    "reason": source.to_string(),
                    "message": message,
                    "error": exit::error_json(Some(json!({"kind": "refused"})), exit::INPUT, &message),
                }))?;
            }
            return Err(CliError {
                code: exit::INPUT,
                message,
                json: None,
                quiet: false,
            });
        }
        Err(e) => return Err(crate::run::host_error(e, a.json)),
    };
    let x = &applied.assertion;
    if a.json && !a.resume {
        crate::out::json(&applied.to_json())?;
    } else if !a.json {
        outln!(
            "claim    {} / {} = {} recorded as event {} at tick {}: {}",
            x.claim.subject,
            x.claim.predicate,
            short(&x.claim.value),
            applied.seq,
            applied.time,
            x.disposition
        )?;
        outln!("reason   {}", x.reason)?;
        outln!(
            "belief   {} / {}: {}",
            x.claim.subject,
            x.claim.predicate,
            belief_line(&applied.belief)
        )?;
        if let Some(r) = &x.adjudication {
            outln!(
                "next     oracle adjudicate {} {} --verdict affirm|deny|unknown --evidence external_first_hand --resume",
                applied.run,
                r.handle
            )?;
        }
    }
    if a.resume {
        return crate::run::resume_after_verdict(home, &run, a.json, a.oracle_cmd.as_deref());
    }
    Ok(exit::OK)
}

/// A command about a named store cannot be sent to a database store's run: stores live in a
/// file home's `memory/` directory.
fn no_store_signal(memory: &Option<String>) -> Result<(), CliError> {
    match memory {
        Some(name) => Err(CliError::input(format!(
            "--memory {name}: named stores live on a file home; this home is a database store"
        ))),
        None => Ok(()),
    }
}

impl AdjudicateArgs {
    /// The verdict these arguments give (checked: the tick, the evidence).
    fn submission(&self) -> Result<Submission, CliError> {
        check_now(self.now, self.json)?;
        Ok(Submission {
            handle: self.handle.clone().unwrap_or_default(),
            verdict: match self.verdict {
                VerdictArg::Affirm => Verdict::Affirm,
                VerdictArg::Deny => Verdict::Deny,
                VerdictArg::Unknown => Verdict::Unknown,
            },
            evidence: self
                .evidence
                .parse()
                .map_err(|e: UnknownProvenance| CliError::input(e.to_string()))?,
            note: self.note.clone(),
            now: self.now,
            by: None,
        })
    }

    /// This command as a store's signal.
    pub(crate) fn signal(&self) -> Result<Signal, CliError> {
        no_store_signal(&self.memory)?;
        Ok(Signal::Adjudicate {
            run: self.run.clone(),
            verdict: self.submission()?,
            durability: self.durability.into(),
            resume: self.resume,
        })
    }
}

impl ReinstateArgs {
    fn reinstatement(&self) -> Result<Reinstate, CliError> {
        check_now(self.now, self.json)?;
        Ok(Reinstate {
            claim: self
                .claim
                .as_deref()
                .unwrap_or(&self.run)
                .to_ascii_lowercase(),
            evidence: self
                .evidence
                .parse()
                .map_err(|e: UnknownProvenance| CliError::input(e.to_string()))?,
            note: self.note.clone(),
            now: self.now,
        })
    }

    pub(crate) fn signal(&self) -> Result<Signal, CliError> {
        no_store_signal(&self.memory)?;
        Ok(Signal::Reinstate {
            run: self.run.clone(),
            reinstate: self.reinstatement()?,
            durability: self.durability.into(),
            resume: self.resume,
        })
    }
}

impl ClaimArgs {
    /// The claim these arguments make (checked: the value, the window, the tick). Its
    /// cardinality is the line's, decided where it is recorded.
    fn outside_claim(&self) -> Result<OutsideClaim, CliError> {
        check_now(self.now, self.json)?;
        let provenance: Provenance = self
            .provenance
            .parse()
            .map_err(|e: oracle_memory::claim::UnknownProvenance| CliError::input(e.to_string()))?;
        let value: Value = serde_json::from_str(&self.value)
            .map_err(|e| CliError::input(format!("--value is not JSON: {e}")))?;
        // A float (or another value with no canonical encoding) is named as such first.
        oracle_core::canon::check(&value).map_err(|e| CliError::input(format!("--value: {e}")))?;
        oracle_host::admit::check_outside_value(&value, "--value")
            .map_err(|e| CliError::input(e.to_string()))?;
        let valid = self.valid.as_deref().map(parse_valid).transpose()?;
        let claim = Claim {
            subject: self.subject.clone(),
            predicate: self.predicate.clone(),
            value,
            provenance,
            cardinality: Cardinality::Functional,
            valid,
            criticality: match self.criticality {
                CriticalityArg::Low => Criticality::Low,
                CriticalityArg::Medium => Criticality::Medium,
                CriticalityArg::High => Criticality::High,
                CriticalityArg::Critical => Criticality::Critical,
            },
            derived_from: Vec::new(),
        };
        Ok(OutsideClaim {
            claim,
            note: self.note.clone(),
            now: self.now,
            by: None,
        })
    }

    pub(crate) fn signal(&self) -> Result<Signal, CliError> {
        no_store_signal(&self.memory)?;
        Ok(Signal::Claim {
            run: self.run.clone().unwrap_or_default(),
            claim: self.outside_claim()?,
            durability: self.durability.into(),
            resume: self.resume,
        })
    }
}

impl SweepArgs {
    pub(crate) fn signal(&self) -> Result<Signal, CliError> {
        no_store_signal(&self.memory)?;
        check_now(self.now, self.json)?;
        Ok(Signal::Sweep {
            run: self.run.clone().unwrap_or_default(),
            now: self.now,
            durability: self.durability.into(),
        })
    }
}

macro_rules! json_flag {
    ($($t:ty),*) => {$(
        impl $t {
            /// Whether the outcome is printed as JSON.
            pub(crate) fn json_flag(&self) -> bool {
                self.json
            }
        }
    )*};
}
json_flag!(AdjudicateArgs, SweepArgs, ClaimArgs, ReinstateArgs);
