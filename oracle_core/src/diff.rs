//! Finding and explaining the first divergence between two logs, reading O(log n) events.
//!
//! The chain hash of event k commits to every event up to k, so "the two logs agree at k" is
//! true up to the first divergence and false from there on: binary search over the hashes finds
//! it. The engine reads events through [`EventSource`] (random access: an indexed file, or a
//! slice in memory) and classifies what differs. Pure: the caller supplies the events.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::event::Event;
use crate::hash::Hash;
use crate::payload::EventKind;

/// Most field differences listed for one pair of events; the rest are counted.
pub const FIELDS_MAX: usize = 64;

/// Random access to the events of one log.
pub trait EventSource {
    type Error;
    /// Number of events.
    fn len(&self) -> u64;
    /// The event at `seq` (< `len`), checked on its own by the source.
    fn event(&mut self, seq: u64) -> Result<Event, Self::Error>;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Events in memory.
pub struct Slice<'a>(pub &'a [Event]);

/// Asked for an event a slice does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no event {0}")]
pub struct NoEvent(pub u64);

impl EventSource for Slice<'_> {
    type Error = NoEvent;
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn event(&mut self, seq: u64) -> Result<Event, NoEvent> {
        usize::try_from(seq)
            .ok()
            .and_then(|i| self.0.get(i))
            .cloned()
            .ok_or(NoEvent(seq))
    }
}

/// Which log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    A,
    B,
}

/// A reading failure, with the side it happened on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("log {side:?}: {error}")]
pub struct DiffError<E> {
    pub side: Side,
    pub error: E,
}

/// What kind of difference the first diverging events show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    /// At seq 0: the runs started from different programs, seeds, grants or inputs. `fields`
    /// names them (`seed`, `inputs.path`...).
    Inputs { fields: Vec<String> },
    /// Same kind, different payload: for a tool event, "the tool returned something else".
    Payload {
        kind: EventKind,
        step: Option<String>,
        tool: Option<String>,
        /// The call's attempt, when both sides name the same one: for an agent step's
        /// `llm.chat`, its turn (counting retries).
        attempt: Option<u64>,
    },
    /// Same payload, different resulting state: the reducer is not deterministic.
    State { kind: EventKind },
    /// Different kinds, causal parents or time: the programs took different paths.
    Structure { a: EventKind, b: EventKind },
}

impl Class {
    pub fn name(&self) -> &'static str {
        match self {
            Class::Inputs { .. } => "inputs",
            Class::Payload { .. } => "payload",
            Class::State { .. } => "state",
            Class::Structure { .. } => "structure",
        }
    }
}

/// One field that differs, by JSON path into the event (`payload.output.words`). `None` means
/// the field is absent on that side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDiff {
    pub path: String,
    pub a: Option<Value>,
    pub b: Option<Value>,
}

/// The first pair of events that differ, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    pub seq: u64,
    pub class: Class,
    pub a: Event,
    pub b: Event,
    /// Event `seq - 1`, identical in both logs.
    pub last_common: Option<Event>,
    /// Differing fields (chain hashes left out: they always differ here).
    pub fields: Vec<FieldDiff>,
    /// Differences beyond [`FIELDS_MAX`].
    pub fields_omitted: u64,
}

/// The result of comparing two logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Identical {
        events: u64,
        head: Option<Hash>,
    },
    /// One log is the other plus more events.
    Prefix {
        shorter: Side,
        common: u64,
        extra: u64,
    },
    Diverged(Box<Divergence>),
}

/// Events read from each side, cached so no event is read twice.
pub struct Reader<'s, A, B> {
    a: &'s mut A,
    b: &'s mut B,
    cache: [BTreeMap<u64, Event>; 2],
}

impl<'s, E, A: EventSource<Error = E>, B: EventSource<Error = E>> Reader<'s, A, B> {
    pub fn new(a: &'s mut A, b: &'s mut B) -> Self {
        Reader {
            a,
            b,
            cache: [BTreeMap::new(), BTreeMap::new()],
        }
    }

    pub fn get(&mut self, side: Side, seq: u64) -> Result<Event, DiffError<E>> {
        let slot = &mut self.cache[side as usize];
        if let Some(e) = slot.get(&seq) {
            return Ok(e.clone());
        }
        let e = match side {
            Side::A => self.a.event(seq),
            Side::B => self.b.event(seq),
        }
        .map_err(|error| DiffError { side, error })?;
        slot.insert(seq, e.clone());
        Ok(e)
    }

    /// Events in one side's log.
    pub fn len(&self, side: Side) -> u64 {
        match side {
            Side::A => self.a.len(),
            Side::B => self.b.len(),
        }
    }

    /// Distinct events read from each side so far.
    pub fn reads(&self) -> (u64, u64) {
        (self.cache[0].len() as u64, self.cache[1].len() as u64)
    }

    fn agree(&mut self, seq: u64) -> Result<bool, DiffError<E>> {
        Ok(self.get(Side::A, seq)?.hash == self.get(Side::B, seq)?.hash)
    }
}

/// Finds the first divergence between `a` and `b` by binary search over chain hashes.
pub fn first_divergence<E, A: EventSource<Error = E>, B: EventSource<Error = E>>(
    r: &mut Reader<'_, A, B>,
) -> Result<Outcome, DiffError<E>> {
    let (na, nb) = (r.a.len(), r.b.len());
    let common = na.min(nb);
    // Invariant of the search: the logs agree before `lo` and disagree at `hi` (when hi < common).
    let all_agree = common == 0 || r.agree(common - 1)?;
    if all_agree {
        return Ok(if na == nb {
            let head = if common == 0 {
                None
            } else {
                Some(r.get(Side::A, common - 1)?.hash)
            };
            Outcome::Identical { events: na, head }
        } else {
            let shorter = if na < nb { Side::A } else { Side::B };
            Outcome::Prefix {
                shorter,
                common,
                extra: na.max(nb) - common,
            }
        });
    }
    let (mut lo, mut hi) = (0u64, common - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if r.agree(mid)? {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let seq = lo;
    let a = r.get(Side::A, seq)?;
    let b = r.get(Side::B, seq)?;
    let last_common = if seq == 0 {
        None
    } else {
        Some(r.get(Side::A, seq - 1)?)
    };
    Ok(Outcome::Diverged(Box::new(explain(seq, a, b, last_common))))
}

/// The program hashes of two runs' plans (A's, B's), when they differ.
pub type Programs = (Hash, Hash);

/// The first divergence of two runs, whatever their plans: [`first_divergence`] (O(log n)
/// reads) for runs of one plan; for runs of two plan versions, whose chain hashes differ from
/// event 0 on, [`first_content_divergence`] instead, with the two program hashes. One entry
/// point, so `oracle diff`, the API and the web page align runs the same way.
pub fn first_divergence_across_plans<E, A: EventSource<Error = E>, B: EventSource<Error = E>>(
    r: &mut Reader<'_, A, B>,
) -> Result<(Outcome, Option<Programs>), DiffError<E>> {
    let outcome = first_divergence(r)?;
    // Only a divergence at event 0 can be two plans: runs of one plan keep the search.
    if !matches!(&outcome, Outcome::Diverged(d) if d.seq == 0) {
        return Ok((outcome, None));
    }
    match plans_of(r)? {
        Some(plans) => Ok((first_content_divergence(r)?, Some(plans))),
        None => Ok((outcome, None)),
    }
}

/// The two runs' program hashes when their plans differ (both logs start with `run_started`).
fn plans_of<E, A: EventSource<Error = E>, B: EventSource<Error = E>>(
    r: &mut Reader<'_, A, B>,
) -> Result<Option<Programs>, DiffError<E>> {
    if r.len(Side::A) == 0 || r.len(Side::B) == 0 {
        return Ok(None);
    }
    let (a, b) = (r.get(Side::A, 0)?, r.get(Side::B, 0)?);
    Ok(match (a.typed(), b.typed()) {
        (
            Ok(crate::payload::Payload::RunStarted(x)),
            Ok(crate::payload::Payload::RunStarted(y)),
        ) if x.program_hash != y.program_hash => Some((x.program_hash, y.program_hash)),
        _ => None,
    })
}

/// Finds the first divergence between `a` and `b` by content, for two runs of different plans
/// (whose chain hashes differ from event 0 on): events are compared in order from event 1 on
/// their kind, time, causal parents, payload (step, tool, input, output, state change) and
/// resulting state, never their chain hashes. Reads every event up to the divergence. Logs
/// that agree in content throughout are `Identical` with no head (their hashes differ).
pub fn first_content_divergence<E, A: EventSource<Error = E>, B: EventSource<Error = E>>(
    r: &mut Reader<'_, A, B>,
) -> Result<Outcome, DiffError<E>> {
    let (na, nb) = (r.a.len(), r.b.len());
    let common = na.min(nb);
    for seq in 1..common {
        let a = r.get(Side::A, seq)?;
        let b = r.get(Side::B, seq)?;
        let same = a.kind == b.kind
            && a.time == b.time
            && a.parents == b.parents
            && a.payload == b.payload
            && a.state_after == b.state_after;
        if !same {
            let last_common = Some(r.get(Side::A, seq - 1)?);
            return Ok(Outcome::Diverged(Box::new(explain(seq, a, b, last_common))));
        }
    }
    Ok(if na == nb {
        Outcome::Identical {
            events: na,
            head: None,
        }
    } else {
        Outcome::Prefix {
            shorter: if na < nb { Side::A } else { Side::B },
            common,
            extra: na.max(nb) - common,
        }
    })
}

/// Classifies and lists the differences between two events at the same seq.
pub fn explain(seq: u64, a: Event, b: Event, last_common: Option<Event>) -> Divergence {
    let class = classify(&a, &b);
    let mut fields = Vec::new();
    let mut omitted = 0;
    let ja = event_json(&a);
    let jb = event_json(&b);
    diff_values("", Some(&ja), Some(&jb), &mut fields, &mut omitted);
    Divergence {
        seq,
        class,
        a,
        b,
        last_common,
        fields,
        fields_omitted: omitted,
    }
}

fn classify(a: &Event, b: &Event) -> Class {
    if a.seq == 0
        && a.kind == EventKind::RunStarted
        && b.kind == EventKind::RunStarted
        && a.payload != b.payload
    {
        let mut fields = Vec::new();
        let keys = |v: &Value| {
            v.as_object()
                .map(|m| m.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let mut all = keys(&a.payload);
        all.extend(keys(&b.payload));
        all.sort();
        all.dedup();
        for k in all {
            let (x, y) = (a.payload.get(&k), b.payload.get(&k));
            if x == y {
                continue;
            }
            if k == "inputs" {
                let mut names = keys(x.unwrap_or(&Value::Null));
                names.extend(keys(y.unwrap_or(&Value::Null)));
                names.sort();
                names.dedup();
                for n in names {
                    if x.and_then(|v| v.get(&n)) != y.and_then(|v| v.get(&n)) {
                        fields.push(format!("inputs.{n}"));
                    }
                }
            } else {
                fields.push(k);
            }
        }
        return Class::Inputs { fields };
    }
    if a.kind != b.kind || a.parents != b.parents || a.time != b.time {
        return Class::Structure {
            a: a.kind,
            b: b.kind,
        };
    }
    if a.payload != b.payload {
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let step =
            text(&a.payload, "step").filter(|s| Some(s) == text(&b.payload, "step").as_ref());
        let tool =
            text(&a.payload, "tool").filter(|t| Some(t) == text(&b.payload, "tool").as_ref());
        let number = |v: &Value| v.get("attempt").and_then(Value::as_u64);
        let attempt = number(&a.payload).filter(|n| Some(*n) == number(&b.payload));
        return Class::Payload {
            kind: a.kind,
            step,
            tool,
            attempt,
        };
    }
    Class::State { kind: a.kind }
}

/// The event as a JSON object without its chain fields (they always differ at a divergence
/// and say nothing about why).
fn event_json(e: &Event) -> Value {
    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("hash");
        m.remove("payload_hash");
    }
    v
}

fn diff_values(
    path: &str,
    a: Option<&Value>,
    b: Option<&Value>,
    out: &mut Vec<FieldDiff>,
    omitted: &mut u64,
) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                diff_values(&p, x.get(k), y.get(k), out, omitted);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            for i in 0..x.len().max(y.len()) {
                diff_values(&format!("{path}[{i}]"), x.get(i), y.get(i), out, omitted);
            }
        }
        (x, y) if x != y => {
            if out.len() < FIELDS_MAX {
                out.push(FieldDiff {
                    path: path.to_owned(),
                    a: x.cloned(),
                    b: y.cloned(),
                });
            } else {
                *omitted += 1;
            }
        }
        _ => {}
    }
}

/// An event as a comparison report shows it (`oracle diff --json`, the API's `diff`): seq,
/// kind, time, hash, parents and the one-line summary.
pub fn event_summary_json(e: &Event) -> Value {
    serde_json::json!({
        "seq": e.seq,
        "kind": e.kind.as_str(),
        "time": e.time,
        "hash": e.hash,
        "parents": e.parents,
        "summary": e.typed().map(|p| p.summary()).unwrap_or_else(|err| err.to_string()),
    })
}

impl Class {
    /// The class's details as JSON (the `detail` of a divergence report).
    pub fn to_json(&self) -> Value {
        use serde_json::json;
        match self {
            Class::Inputs { fields } => json!({"fields": fields}),
            Class::Payload {
                kind,
                step,
                tool,
                attempt,
            } => json!({"kind": kind.as_str(), "step": step, "tool": tool, "attempt": attempt}),
            Class::State { kind } => json!({"kind": kind.as_str()}),
            Class::Structure { a, b } => json!({"a_kind": a.as_str(), "b_kind": b.as_str()}),
        }
    }
}

impl Outcome {
    /// The outcome's fields in a comparison report (`result`, `common` and what goes with
    /// them): the one JSON form `oracle diff --json` and the API's `diff` share, which each
    /// extend (the CLI adds the divergence's parents, context and state).
    pub fn to_json(&self) -> Value {
        use serde_json::json;
        match self {
            Outcome::Identical { events, head } => {
                json!({"result": "identical", "common": events, "head": head})
            }
            Outcome::Prefix {
                shorter,
                common,
                extra,
            } => json!({
                "result": "prefix",
                "common": common,
                "shorter": if *shorter == Side::A { "a" } else { "b" },
                "extra": extra,
            }),
            Outcome::Diverged(d) => json!({
                "result": "diverged",
                "common": d.seq,
                "seq": d.seq,
                "class": d.class.name(),
                "detail": d.class.to_json(),
                "last_common": d.last_common.as_ref().map(event_summary_json),
                "events": {"a": event_summary_json(&d.a), "b": event_summary_json(&d.b)},
                "fields": d.fields.iter().map(|f| json!({"path": f.path, "a": f.a, "b": f.b})).collect::<Vec<_>>(),
                "fields_omitted": d.fields_omitted,
            }),
        }
    }
}
