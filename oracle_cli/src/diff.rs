//! `oracle diff A B`: the first divergence between two logs, found by binary search over chain
//! hashes through each log's index, classified and explained. Exit codes follow diff(1): 0 the
//! same, 1 different, 2 trouble (including an invalid log, which is not a difference).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Args;
use oracle_core::Event;
use oracle_core::diff::{
    Class, DiffError, Divergence, Outcome, Reader, Side, first_divergence_across_plans,
};
use oracle_core::payload::Payload;
use oracle_host::StoreError;
use oracle_host::inspect::{self, Indexed};
use serde_json::{Value, json};

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The first run (directory, run id or log file).
    a: PathBuf,
    /// The second run.
    b: PathBuf,
    /// One JSON object (schema in docs/FORMAT.md) instead of text.
    #[arg(long)]
    json: bool,
    /// Also show this many common events before the divergence.
    #[arg(long, value_name = "N", default_value_t = 0)]
    context: u64,
    /// Skip verifying both logs first, and read only the O(log n) events the search needs.
    /// Only for logs already verified: damage in events the search does not read goes unseen.
    #[arg(long)]
    no_verify: bool,
    /// Keep the index each log needs (`LOG.idx`, the offset of every record) beside it, so the
    /// next diff of the same log starts at once. Without it an index is built in memory, and
    /// written only beside logs under the home (run directories).
    #[arg(long)]
    index: bool,
    /// Also show the text diff of the plans the two runs follow now, when they differ (two plan
    /// versions, or a fork or upgrade to a new plan): unified, each plan as its run keeps it,
    /// checked against the program hash its log records. Runs only, not bare log files.
    #[arg(long)]
    plans: bool,
}

/// Lines of unchanged plan text shown around each change of `--plans`.
const PLAN_DIFF_CONTEXT: usize = 3;

/// Most context events shown before a divergence.
const CONTEXT_MAX: u64 = 1000;

pub fn run(home: &Path, a: DiffArgs) -> Result<u8, CliError> {
    let pa = crate::resolve(home, &a.a)?;
    let pb = crate::resolve(home, &a.b)?;
    if !a.no_verify {
        // An invalid log must be reported as such, never as a difference (or as identical).
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        for p in [&pa.log, &pb.log] {
            inspect::verify(
                p,
                oracle_host::VerifyOptions {
                    threads,
                    expected_head: None,
                },
                None,
            )
            .map_err(invalid)?;
        }
    }
    // Beside a log the user named, nothing is written unless asked; under the home (a run's
    // directory) the index is kept as the writer keeps it.
    let home_abs = std::fs::canonicalize(home).ok();
    let persist = |p: &Path| {
        a.index
            || std::fs::canonicalize(p)
                .ok()
                .zip(home_abs.as_ref())
                .is_some_and(|(p, h)| p.starts_with(h))
    };
    let open = |p: &Path| Indexed::open_keeping(p, persist(p)).map_err(invalid);
    let (mut la, mut lb) = (open(&pa.log)?, open(&pb.log)?);
    let (na, nb) = (la.len(), lb.len());
    let mut r = Reader::new(&mut la, &mut lb);
    // Runs of two plan versions are aligned by content; the plans' difference is said apart.
    let (outcome, plans) = first_divergence_across_plans(&mut r).map_err(side_error)?;
    let mut report = Report {
        a: &pa.log,
        b: &pb.log,
        na,
        nb,
        parents: [Vec::new(), Vec::new()],
        context: Vec::new(),
        states: None,
        fork: None,
    };
    if let Outcome::Diverged(d) = &outcome {
        report.fork = fork_note(&mut r, d).map_err(side_error)?;
        for (i, (side, e)) in [(Side::A, &d.a), (Side::B, &d.b)].into_iter().enumerate() {
            for &p in &e.parents {
                report.parents[i].push(r.get(side, p).map_err(side_error)?);
            }
        }
        if !a.no_verify {
            let replay = |p: &Path| replay_through(p, d.seq).map_err(invalid);
            report.states = Some([replay(&pa.log)?, replay(&pb.log)?]);
        }
        let from = d.seq.saturating_sub(a.context.min(CONTEXT_MAX));
        for s in from..d.seq {
            report.context.push(r.get(Side::A, s).map_err(side_error)?);
        }
    }
    let reads = r.reads();
    let text_diff = match a.plans {
        true => plan_text_diff(home, &a.a, &a.b, a.json)?,
        false => None,
    };
    if a.json {
        let mut v = report.json(&outcome, reads);
        if let (Value::Object(m), Some((pa, pb))) = (&mut v, plans) {
            m.insert("plans_differ".into(), json!({"a": pa, "b": pb}));
        }
        if a.plans {
            v["plan_diff"] = json!(text_diff);
        }
        crate::out::json(&v)?;
    } else {
        if let Some((pa, pb)) = plans {
            outln!(
                "plans differ: program {} vs {}; events aligned by content (kind, step, tool, input, output, state) from event 1",
                pa.short(),
                pb.short()
            )?;
        }
        if let Some(t) = &text_diff {
            out!("{t}")?;
        }
        out!(
            "{}",
            report.text(
                &outcome,
                reads,
                crate::out::colored(std::io::stdout().is_terminal())
            )
        )?;
    }
    Ok(match outcome {
        Outcome::Identical { .. } if plans.is_none() => exit::OK,
        _ => exit::FAILED,
    })
}

/// The unified diff of the plans runs `a` and `b` follow now (`--plans`; after a fork with a
/// plan or an upgrade, the newest version), or `None` when they follow the same program. Each
/// is the plan its run directory keeps, compiled and checked against the program hash its log
/// records, so an edited plan file is an error here, never shown as what the run followed.
fn plan_text_diff(
    home: &Path,
    a: &Path,
    b: &Path,
    json_out: bool,
) -> Result<Option<String>, CliError> {
    let text = |run: &Path| {
        inspect::recorded_plan(home, &run.to_string_lossy())
            .map_err(|e| crate::run::session_error(e, json_out, None))
    };
    let ((ida, ha, ta), (idb, hb, tb)) = (text(a)?, text(b)?);
    if ha == hb {
        return Ok(None);
    }
    Ok(Some(
        similar::TextDiff::from_lines(&ta, &tb)
            .unified_diff()
            .context_radius(PLAN_DIFF_CONTEXT)
            .header(&format!("{ida}: plan"), &format!("{idb}: plan"))
            .to_string(),
    ))
}

/// Any problem reading a log is trouble (exit 2), never a difference.
/// The divergence report of `oracle diff`, for `oracle replay`: A is the recorded log, B the
/// replay; `parents` are the causal parents of the two diverging events (common to both, since
/// they come before the divergence). One report, two callers.
pub(crate) fn divergence_report(
    log: &Path,
    replay: &Path,
    recorded: u64,
    d: &Divergence,
    parents: Vec<Event>,
    color: bool,
) -> (String, Value) {
    let report = Report {
        a: log,
        b: replay,
        na: recorded,
        nb: d.seq + 1,
        parents: [parents.clone(), parents],
        context: Vec::new(),
        states: None,
        fork: None,
    };
    let paint = |code: &str, s: &str| {
        if color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    };
    let text = format!(
        "A  {}  ({} events recorded)\nB  {}\n{}",
        log.display(),
        recorded,
        replay.display(),
        report.divergence_text(d, &paint)
    );
    (text, report.divergence_json(d))
}

fn invalid(e: StoreError) -> CliError {
    CliError::input(format!("cannot compare: {e}"))
}

fn side_error(e: DiffError<StoreError>) -> CliError {
    invalid(e.error)
}

struct Report<'a> {
    a: &'a Path,
    b: &'a Path,
    na: u64,
    nb: u64,
    /// Causal parents of the diverging events, per side.
    parents: [Vec<Event>; 2],
    /// Common events before the divergence (`--context`).
    context: Vec<Event>,
    /// The state after the diverging event on each side, rebuilt by the reducer (not taken from
    /// the recorded hashes); `None` with `--no-verify`, which reads only O(log n) events.
    states: Option<[Replayed; 2]>,
    /// When one side is a fork of the other made right there, with a value: what it gave.
    fork: Option<ForkNote>,
}

/// Events of the parent read after a fork point to find the output the fork replaced: a
/// value given at a step is recorded within a round or two of the fork point, so a short scan
/// finds it, and a diff of two huge logs stays bounded.
const FORK_SCAN_MAX: u64 = 10_000;

/// A divergence that is a fork's marker: the fork's side, who forked, the step given a value,
/// the value, and the parent's own recorded output for that step (seq, value), if found.
struct ForkNote {
    side: Side,
    by: Option<String>,
    step: String,
    given: Value,
    recorded: Option<(u64, Value)>,
}

/// The fork note of divergence `d` ([`ForkNote`]), reading at most [`FORK_SCAN_MAX`] events of
/// the parent's side.
fn fork_note<A, B>(
    r: &mut Reader<'_, A, B>,
    d: &Divergence,
) -> Result<Option<ForkNote>, DiffError<StoreError>>
where
    A: oracle_core::diff::EventSource<Error = StoreError>,
    B: oracle_core::diff::EventSource<Error = StoreError>,
{
    let (side, forked, other) = match (d.a.typed(), d.b.typed()) {
        (_, Ok(Payload::Forked(f))) => (Side::B, f, Side::A),
        (Ok(Payload::Forked(f)), _) => (Side::A, f, Side::B),
        _ => return Ok(None),
    };
    let (Some(step), Some(given)) = (forked.step, forked.value) else {
        return Ok(None);
    };
    // The output the step settled on in the parent: a person's answer to it, else its last
    // tool output, before the parent moves on to another step.
    let end = r.len(other).min(d.seq.saturating_add(FORK_SCAN_MAX));
    let mut recorded = None;
    for seq in d.seq..end {
        let e = r.get(other, seq)?;
        let named = e.payload.get("step").and_then(Value::as_str);
        if recorded.is_some() && named.is_some_and(|n| n != step) {
            break;
        }
        match e.typed() {
            Ok(Payload::ToolReturned(t)) if t.step == step => recorded = Some((seq, t.output)),
            Ok(Payload::Resumed(x)) if x.step == step => {
                recorded = Some((seq, x.value));
                break;
            }
            _ => {}
        }
    }
    Ok(Some(ForkNote {
        side,
        by: forked.by,
        step,
        given,
        recorded,
    }))
}

impl ForkNote {
    fn text(&self) -> String {
        let (fork, parent) = match self.side {
            Side::A => ("A", "B"),
            Side::B => ("B", "A"),
        };
        let by = self
            .by
            .as_deref()
            .map(|b| format!(" (by {b})"))
            .unwrap_or_default();
        let mut out = format!(
            "\n{fork} is a fork of {parent} made here{by}: step `{}` was given {}\n",
            self.step,
            show(&Some(self.given.clone()))
        );
        match &self.recorded {
            Some((seq, v)) => out.push_str(&format!(
                "{parent} recorded {} for step `{}` at event {seq}\n",
                show(&Some(v.clone())),
                self.step
            )),
            None => out.push_str(&format!(
                "{parent} records no output for step `{}` within {FORK_SCAN_MAX} events of the fork\n",
                self.step
            )),
        }
        out
    }

    fn json(&self) -> Value {
        json!({
            "side": side_name(self.side),
            "by": self.by,
            "step": self.step,
            "given": self.given,
            "recorded": self.recorded.as_ref().map(|(seq, v)| json!({"seq": seq, "value": v})),
        })
    }
}

/// A side's state after an event, rebuilt by replay.
struct Replayed {
    state: oracle_core::State,
    /// Whether the log's recorded `state_after` at that event equals the rebuilt state's hash.
    recorded_matches: bool,
}

/// Replays a log from genesis through event `seq` with the reducer alone, whatever the recorded
/// state hashes say (they are what is being compared).
fn replay_through(path: &Path, seq: u64) -> Result<Replayed, StoreError> {
    let mut state = oracle_core::State::new();
    let mut recorded_matches = false;
    let mut failure = None;
    inspect::scan(path, true, |e| {
        if let Err(err) = oracle_core::reduce::apply_in_place(&mut state, &e) {
            failure = Some(format!("event {}: {err}", e.seq));
            return Ok(false);
        }
        recorded_matches = e.state_after == state.hash();
        Ok(e.seq < seq)
    })?;
    match failure {
        Some(why) => Err(StoreError::SnapshotFile {
            path: path.to_path_buf(),
            reason: format!("cannot replay: {why}"),
        }),
        None => Ok(Replayed {
            state,
            recorded_matches,
        }),
    }
}

/// Keys whose values differ between two states, in key order, with both values.
fn state_diff(
    a: &oracle_core::State,
    b: &oracle_core::State,
) -> Vec<(String, Option<Value>, Option<Value>)> {
    let mut keys: Vec<&String> = a
        .iter()
        .map(|(k, _)| k)
        .chain(b.iter().map(|(k, _)| k))
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let (x, y) = (a.get_packed(k), b.get_packed(k));
            let value = oracle_core::packed::Packed::value;
            (x != y).then(|| (k.clone(), x.map(value), y.map(value)))
        })
        .collect()
}

pub(crate) fn summary(e: &Event) -> String {
    e.typed()
        .map(|p| p.summary())
        .unwrap_or_else(|err| err.to_string())
}

use oracle_core::diff::event_summary_json as event_json;

pub(crate) fn class_text(c: &Class) -> String {
    match c {
        Class::Inputs { fields } => format!("the runs' inputs differ: {}", fields.join(", ")),
        Class::Payload {
            kind,
            step,
            tool,
            attempt,
        } => {
            let mut s = format!("same kind `{kind}`, different payload");
            let attempt = attempt.map_or(String::new(), |n| format!(", attempt {n}"));
            match (step, tool) {
                (Some(st), Some(t)) => s.push_str(&format!(" (step `{st}`, tool `{t}`{attempt})")),
                (Some(st), None) => s.push_str(&format!(" (step `{st}`{attempt})")),
                _ => {}
            }
            s
        }
        Class::State { kind } => {
            format!(
                "same `{kind}` event, different resulting state: the reducer is not deterministic"
            )
        }
        Class::Structure { a, b } if a != b => {
            format!("different events (`{a}` vs `{b}`): the runs took different paths")
        }
        Class::Structure { a, .. } => {
            format!("`{a}` events with different parents or time: the runs took different paths")
        }
    }
}

fn side_name(s: Side) -> &'static str {
    match s {
        Side::A => "A",
        Side::B => "B",
    }
}

pub(crate) fn show(v: &Option<Value>) -> String {
    match v {
        // A hash: its first 16 hex digits are enough to tell two apart.
        Some(Value::String(h)) if h.len() == 64 && h.bytes().all(|c| c.is_ascii_hexdigit()) => {
            format!("{}…", &h[..16])
        }
        Some(v) => {
            let s = v.to_string();
            if s.chars().count() > 48 {
                format!("{}…", s.chars().take(47).collect::<String>())
            } else {
                s
            }
        }
        None => "(absent)".to_owned(),
    }
}

/// Two differing values as the field table shows them: two long strings (a changed prompt,
/// say) are shown from a little before their first differing character, so the change itself
/// is on screen; anything else as [`show`] gives it.
pub(crate) fn show_pair(a: &Option<Value>, b: &Option<Value>) -> (String, String) {
    /// Characters of context kept before the first difference.
    const LEAD_CHARS: usize = 12;
    /// Characters shown in all (the table's column is 48 wide).
    const SHOWN_CHARS: usize = 45;
    if let (Some(Value::String(x)), Some(Value::String(y))) = (a, b) {
        let (xs, ys): (Vec<char>, Vec<char>) = (x.chars().collect(), y.chars().collect());
        let first = xs.iter().zip(&ys).take_while(|(p, q)| p == q).count();
        if xs.len().max(ys.len()) > 46 && first > LEAD_CHARS {
            let window = |cs: &[char]| {
                let start = first - LEAD_CHARS;
                let end = (start + SHOWN_CHARS).min(cs.len());
                let tail = if end < cs.len() { "…" } else { "\"" };
                format!("\"…{}{tail}", cs[start..end].iter().collect::<String>())
            };
            return (window(&xs), window(&ys));
        }
    }
    (show(a), show(b))
}

impl Report<'_> {
    fn text(&self, outcome: &Outcome, reads: (u64, u64), color: bool) -> String {
        let paint = |code: &str, s: &str| {
            if color {
                format!("\x1b[{code}m{s}\x1b[0m")
            } else {
                s.to_owned()
            }
        };
        let mut out = format!(
            "A  {}  ({} events)\nB  {}  ({} events)\n",
            self.a.display(),
            self.na,
            self.b.display(),
            self.nb
        );
        match outcome {
            Outcome::Identical { events, head: None } if *events > 0 => {
                // Aligned by content: the chain hashes differ because the plans do.
                out.push_str(&format!(
                    "the same content: {events} events (only the plans differ)\n"
                ));
            }
            Outcome::Identical { events, head } => {
                let head = head.map_or("(empty)".to_owned(), |h| h.to_string());
                out.push_str(&format!("identical: {events} events, head {head}\n"));
            }
            Outcome::Prefix {
                shorter,
                common,
                extra,
            } => {
                let longer = if *shorter == Side::A {
                    Side::B
                } else {
                    Side::A
                };
                out.push_str(&format!(
                    "{} is a strict prefix of {}: they agree on {common} events, and {} has {extra} more\n",
                    side_name(*shorter),
                    side_name(longer),
                    side_name(longer)
                ));
            }
            Outcome::Diverged(d) => {
                out.push_str(&self.divergence_text(d, &paint));
                out.push('\n');
            }
        }
        let events = |n: u64| {
            if n == 1 {
                "1 event".to_owned()
            } else {
                format!("{n} events")
            }
        };
        out.push_str(&format!(
            "read {} of A and {} of B\n",
            events(reads.0),
            reads.1
        ));
        out
    }

    fn divergence_text(&self, d: &Divergence, paint: &dyn Fn(&str, &str) -> String) -> String {
        let mut out = format!(
            "{}\n",
            paint(
                "1",
                &format!("diverged at event {}: {}", d.seq, class_text(&d.class))
            )
        );
        let line = |e: &Event| {
            format!(
                "{:>6}  {:<18}  {}  {}",
                e.seq,
                e.kind.as_str(),
                e.hash.short(),
                summary(e)
            )
        };
        match &d.last_common {
            Some(e) if self.context.is_empty() => {
                out.push_str(&format!("\nlast common event\n{}\n", line(e)))
            }
            Some(_) => {
                out.push_str("\ncommon events before it\n");
                for e in &self.context {
                    out.push_str(&format!("{}\n", line(e)));
                }
            }
            None => out.push_str("\nno common event: the logs differ from their first event\n"),
        }
        out.push_str(&format!("\nA {}\nB {}\n", line(&d.a), line(&d.b)));
        if !d.fields.is_empty() {
            let width = d
                .fields
                .iter()
                .map(|f| f.path.len())
                .max()
                .unwrap_or(0)
                .max(5);
            out.push_str(&format!("\n  {:<width$}  {:<48}  {}\n", "field", "A", "B"));
            for f in &d.fields {
                let (a, b) = show_pair(&f.a, &f.b);
                out.push_str(&format!(
                    "  {:<width$}  {}  {}\n",
                    f.path,
                    paint("31", &format!("{a:<48}")),
                    paint("32", &b)
                ));
            }
            if d.fields_omitted > 0 {
                out.push_str(&format!(
                    "  … and {} more differing fields\n",
                    d.fields_omitted
                ));
            }
        }
        if let Some([sa, sb]) = &self.states {
            let keys = state_diff(&sa.state, &sb.state);
            let verdict = |r: &Replayed| {
                if r.recorded_matches {
                    "matches"
                } else {
                    "DOES NOT match"
                }
            };
            out.push_str(&format!(
                "\nstate after event {} (replayed): {}\n",
                d.seq,
                if keys.is_empty() {
                    "the same on both sides".to_owned()
                } else {
                    format!("{} keys differ", keys.len())
                }
            ));
            let width = keys
                .iter()
                .map(|(k, _, _)| k.len())
                .max()
                .unwrap_or(0)
                .max(3);
            for (k, x, y) in keys.iter().take(oracle_core::diff::FIELDS_MAX) {
                out.push_str(&format!(
                    "  {k:<width$}  {}  {}\n",
                    paint("31", &format!("{:<48}", show(x))),
                    paint("32", &show(y))
                ));
            }
            out.push_str(&format!(
                "  recorded state_after {} the replayed state in A, {} in B\n",
                verdict(sa),
                verdict(sb)
            ));
        }
        if self.parents.iter().any(|p| !p.is_empty()) {
            out.push_str("\ncausal parents\n");
            for (name, ps) in [("A", &self.parents[0]), ("B", &self.parents[1])] {
                for p in ps {
                    out.push_str(&format!("{name} {}\n", line(p)));
                }
            }
        }
        if let Some(f) = &self.fork {
            out.push_str(&f.text());
        }
        out
    }

    /// The divergence part of the JSON report (also `oracle replay --json`'s).
    fn divergence_json(&self, d: &Divergence) -> Value {
        let mut v = Outcome::Diverged(Box::new(d.clone())).to_json();
        let more = json!({
            "parents": {
                "a": self.parents[0].iter().map(event_json).collect::<Vec<_>>(),
                "b": self.parents[1].iter().map(event_json).collect::<Vec<_>>(),
            },
            "context": self.context.iter().map(event_json).collect::<Vec<_>>(),
            "state": self.states.as_ref().map(|[sa, sb]| json!({
                "keys": state_diff(&sa.state, &sb.state)
                    .into_iter()
                    .take(oracle_core::diff::FIELDS_MAX)
                    .map(|(k, x, y)| json!({"key": k, "a": x, "b": y}))
                    .collect::<Vec<_>>(),
                "recorded_matches_replay": {"a": sa.recorded_matches, "b": sb.recorded_matches},
            })),
        });
        if let (Value::Object(m), Value::Object(f)) = (&mut v, more) {
            m.extend(f);
        }
        // Only where one side forked the other right there: other reports keep their shape.
        if let (Value::Object(m), Some(f)) = (&mut v, &self.fork) {
            m.insert("fork".into(), f.json());
        }
        v
    }

    fn json(&self, outcome: &Outcome, reads: (u64, u64)) -> Value {
        let mut v = json!({
            "a": {"path": self.a, "events": self.na},
            "b": {"path": self.b, "events": self.nb},
            "reads": {"a": reads.0, "b": reads.1},
        });
        let fields = match outcome {
            Outcome::Diverged(d) => self.divergence_json(d),
            other => other.to_json(),
        };
        if let (Value::Object(m), Value::Object(f)) = (&mut v, fields) {
            m.extend(f);
        }
        v
    }
}
