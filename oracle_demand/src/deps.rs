//! Direct dependencies D(t): the earlier events each event of a log depends on, read from the
//! recorded fields in one forward pass with ordered indexes: O(n·(d + log k)) for k distinct
//! steps, keys, claims and paths.
//!
//! Each source, exactly (an event never depends on itself or a later event; a payload lacking
//! a field a rule reads gives no dependency through that rule, so any log can be analysed):
//!
//! - `parents`: the event's causal `parents`.
//! - `tools`: a `tool_returned` or `tool_failed` → the latest earlier `tool_called` with the
//!   same (step, attempt); a `tool_called` → the latest earlier `step_scheduled` with the same
//!   (step, attempt); a `capability_allowed` or `capability_denied` (which carry no attempt) →
//!   the latest earlier `step_scheduled` of the step; a `resumed` → the latest earlier
//!   `suspended` of its step.
//! - `state`: a `tool_called` of `kv.get` reads the state key `kv/<input.key>` → the last earlier
//!   `state_changed` whose `set` or `delete` has that key.
//! - `memory`: a `tool_returned` of `memory.query` or `memory.history` → every claim it reports:
//!   the `seq` of each entry of `output.support`, of `output.alternatives[].support`, and of
//!   `output.claims`; a `resumed` of a step whose latest `tool_called` was `memory.query` (a
//!   query that waited for a verdict: its answer arrives as the resumed value) → the same fields
//!   of its `value`; a `tool_returned` of `memory.assert` → for each id in
//!   `output.claim.derived_from`, the earlier `memory.assert` `tool_returned` whose `output.id`
//!   is that id. (`adjudicated` events name the event that opened their request as a parent.)
//! - `paths`: a `tool_called` of an `fs.*` tool with a string `input.path` → the first earlier
//!   `tool_called` of an `fs.*` tool with the same `path` (the same text: paths are compared as
//!   recorded, not resolved).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{DemandError, Source, Sources, ix};
use oracle_core::event::Event;
use oracle_core::payload::EventKind;

/// D(t) for every event t of a log, in compressed rows: sorted, without duplicates, all < t.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependencies {
    /// Row t is `targets[starts[t]..starts[t + 1]]`; `starts` has one entry per event plus one.
    starts: Vec<usize>,
    targets: Vec<u64>,
    sources: Sources,
    /// Pairs given by each source, in [`Source::ALL`] order.
    by_source: [u64; 5],
    /// Each event's size in tokens ([`tokens`]).
    tokens: Vec<u64>,
    /// Each event's kind, as the log names it (`event` for graphs not read from a log).
    kinds: Vec<&'static str>,
}

/// Counts the bytes written to it.
struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An event's size in tokens: its payload as compact JSON (keys sorted), one token per
/// [`crate::limits::TOKEN_BYTES`] bytes, rounded up. A fixed rule rather than a model's
/// tokenizer, so a count is the same everywhere and never changes with a tokenizer's version.
pub fn tokens(event: &Event) -> u64 {
    let mut c = Counter(0);
    // Writing a `Value` to a counter cannot fail: no IO, and a map's keys are strings.
    let _ = serde_json::to_writer(&mut c, &event.payload);
    c.0.div_ceil(crate::limits::TOKEN_BYTES)
}

/// What the pass remembers about one step.
#[derive(Default)]
struct Step<'a> {
    /// Latest `step_scheduled`, any attempt.
    scheduled: Option<u64>,
    /// attempt → latest `step_scheduled`.
    scheduled_at: BTreeMap<u64, u64>,
    /// attempt → latest `tool_called`.
    called_at: BTreeMap<u64, u64>,
    /// Latest `suspended`.
    suspended: Option<u64>,
    /// The tool of the latest `tool_called`.
    last_tool: Option<&'a str>,
}

/// The indexes one pass over the log keeps, borrowing keys from the events. Step names are
/// looked up once per event and everything about a step is kept together.
#[derive(Default)]
struct Index<'a> {
    step_ids: BTreeMap<&'a str, usize>,
    steps: Vec<Step<'a>>,
    /// `kv/` state key → latest `state_changed` that set or deleted it (only `kv.get` reads
    /// state, so other keys are not indexed).
    writes: BTreeMap<&'a str, u64>,
    /// claim id → the `memory.assert` `tool_returned` that recorded it.
    claims: BTreeMap<&'a str, u64>,
    /// path → first `fs.*` `tool_called` with it.
    touched: BTreeMap<&'a str, u64>,
    /// Scratch for `kv/<key>`.
    key: String,
}

fn str_field<'a>(v: &'a Value, name: &str) -> Option<&'a str> {
    v.get(name).and_then(Value::as_str)
}

fn u64_field(v: &Value, name: &str) -> Option<u64> {
    v.get(name).and_then(Value::as_u64)
}

fn array<'a>(v: &'a Value, name: &str) -> &'a [Value] {
    v.get(name)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The seqs of the claims a memory answer reports (a belief or a history).
fn reported_claims(answer: &Value, mut push: impl FnMut(u64)) {
    let support = |alt: &Value, push: &mut dyn FnMut(u64)| {
        for s in array(alt, "support") {
            if let Some(seq) = u64_field(s, "seq") {
                push(seq);
            }
        }
    };
    support(answer, &mut push);
    for alt in array(answer, "alternatives") {
        support(alt, &mut push);
    }
    for c in array(answer, "claims") {
        if let Some(seq) = u64_field(c, "seq") {
            push(seq);
        }
    }
}

impl<'a> Index<'a> {
    /// The record of a step seen before.
    fn step(&self, name: Option<&str>) -> Option<&Step<'a>> {
        name.and_then(|n| self.step_ids.get(n))
            .map(|&i| &self.steps[i])
    }

    /// The record of a step, created on first sight.
    fn step_mut(&mut self, name: &'a str) -> &mut Step<'a> {
        let next = self.steps.len();
        let i = *self.step_ids.entry(name).or_insert(next);
        if i == next {
            self.steps.push(Step::default());
        }
        &mut self.steps[i]
    }

    /// Pushes the dependencies of `e` (at seq `t`) from the enabled sources, then records what
    /// `e` itself contributes to the indexes.
    fn visit(&mut self, t: u64, e: &'a Event, sources: Sources, out: &mut Vec<(u64, u8)>) {
        let p = &e.payload;
        let mut push = |s: Source, u: u64| {
            if u < t {
                out.push((u, s.bit()));
            }
        };
        if sources.has(Source::Parents) {
            for &u in &e.parents {
                push(Source::Parents, u);
            }
        }
        let step = str_field(p, "step");
        let attempt = u64_field(p, "attempt");
        let tool = str_field(p, "tool");
        let tools = sources.has(Source::Tools);
        let memory = sources.has(Source::Memory);
        match e.kind {
            EventKind::StepScheduled => {
                if let (Some(step), Some(attempt)) = (step, attempt) {
                    let s = self.step_mut(step);
                    s.scheduled_at.insert(attempt, t);
                    s.scheduled = Some(t);
                }
            }
            EventKind::CapabilityAllowed | EventKind::CapabilityDenied => {
                if tools && let Some(u) = self.step(step).and_then(|s| s.scheduled) {
                    push(Source::Tools, u);
                }
            }
            EventKind::ToolCalled => {
                if let Some(step) = step {
                    let s = self.step_mut(step);
                    if let Some(attempt) = attempt {
                        if tools && let Some(&u) = s.scheduled_at.get(&attempt) {
                            push(Source::Tools, u);
                        }
                        s.called_at.insert(attempt, t);
                    }
                    s.last_tool = tool;
                }
                let input = p.get("input").unwrap_or(&Value::Null);
                if sources.has(Source::State)
                    && tool == Some("kv.get")
                    && let Some(key) = str_field(input, "key")
                {
                    self.key.clear();
                    self.key.push_str("kv/");
                    self.key.push_str(key);
                    if let Some(&u) = self.writes.get(self.key.as_str()) {
                        push(Source::State, u);
                    }
                }
                if sources.has(Source::Paths)
                    && tool.is_some_and(|t| t.starts_with("fs."))
                    && let Some(path) = str_field(input, "path")
                {
                    match self.touched.get(path) {
                        Some(&u) => push(Source::Paths, u),
                        None => {
                            self.touched.insert(path, t);
                        }
                    }
                }
            }
            EventKind::ToolReturned | EventKind::ToolFailed => {
                if tools
                    && let Some(attempt) = attempt
                    && let Some(&u) = self.step(step).and_then(|s| s.called_at.get(&attempt))
                {
                    push(Source::Tools, u);
                }
                let output = p.get("output").unwrap_or(&Value::Null);
                if memory && e.kind == EventKind::ToolReturned {
                    match tool {
                        Some("memory.query" | "memory.history") => {
                            reported_claims(output, |u| push(Source::Memory, u));
                        }
                        Some("memory.assert") => {
                            let claim = output.get("claim").unwrap_or(&Value::Null);
                            for id in array(claim, "derived_from") {
                                if let Some(&u) = id.as_str().and_then(|id| self.claims.get(id)) {
                                    push(Source::Memory, u);
                                }
                            }
                            if let Some(id) = str_field(output, "id") {
                                self.claims.insert(id, t);
                            }
                        }
                        _ => {}
                    }
                }
            }
            EventKind::StateChanged => {
                if sources.has(Source::State) {
                    let set = p.get("set").and_then(Value::as_object);
                    let set = set.into_iter().flat_map(|m| m.keys().map(String::as_str));
                    let delete = array(p, "delete").iter().filter_map(Value::as_str);
                    for k in set.chain(delete).filter(|k| k.starts_with("kv/")) {
                        self.writes.insert(k, t);
                    }
                }
            }
            EventKind::Suspended => {
                if let Some(step) = step {
                    self.step_mut(step).suspended = Some(t);
                }
            }
            EventKind::Resumed => {
                if let Some(s) = self.step(step) {
                    if tools && let Some(u) = s.suspended {
                        push(Source::Tools, u);
                    }
                    if memory && s.last_tool == Some("memory.query") {
                        let value = p.get("value").unwrap_or(&Value::Null);
                        reported_claims(value, |u| push(Source::Memory, u));
                    }
                }
            }
            EventKind::RunStarted
            | EventKind::RunFinished
            | EventKind::Adjudicated
            | EventKind::AdjudicationsExpired
            | EventKind::ClaimRecorded
            | EventKind::Reinstated
            | EventKind::Forked
            | EventKind::PlanUpgraded
            | EventKind::TimerSet
            | EventKind::TimerFired
            | EventKind::PatchProposed => {}
        }
    }
}

impl Dependencies {
    /// D(t) for every event of `events`, which must be numbered from 0 in order.
    pub fn extract(events: &[Event], sources: Sources) -> Result<Dependencies, DemandError> {
        let mut index = Index::default();
        let mut b = Builder::new(sources, events.len());
        let mut buf: Vec<(u64, u8)> = Vec::new();
        for (position, e) in events.iter().enumerate() {
            let t = position as u64;
            if e.seq != t {
                return Err(DemandError::SeqOutOfOrder {
                    position: t,
                    seq: e.seq,
                });
            }
            buf.clear();
            index.visit(t, e, sources, &mut buf);
            b.push_row(&mut buf);
            b.deps.tokens.push(tokens(e));
            b.deps.kinds.push(e.kind.as_str());
        }
        Ok(b.finish())
    }

    /// Dependencies given directly, one list per event (any order, duplicates allowed), all
    /// counted as `parents`: for tests, benchmarks and graphs that do not come from a log.
    /// Every event is one token of kind `event`.
    pub fn from_lists(lists: &[Vec<u64>]) -> Result<Dependencies, DemandError> {
        let mut b = Builder::new(Sources::only(Source::Parents), lists.len());
        let mut buf = Vec::new();
        for (t, list) in lists.iter().enumerate() {
            let t = t as u64;
            buf.clear();
            for &u in list {
                if u >= t {
                    return Err(DemandError::NotEarlier {
                        seq: t,
                        dependency: u,
                    });
                }
                buf.push((u, Source::Parents.bit()));
            }
            b.push_row(&mut buf);
            b.deps.tokens.push(1);
            b.deps.kinds.push("event");
        }
        Ok(b.finish())
    }

    /// Number of events.
    pub fn events(&self) -> u64 {
        (self.starts.len() - 1) as u64
    }

    /// D(seq): sorted, without duplicates, all below `seq`. Empty for a seq past the end.
    pub fn of(&self, seq: u64) -> &[u64] {
        if seq >= self.events() {
            return &[];
        }
        let t = ix(seq);
        &self.targets[self.starts[t]..self.starts[t + 1]]
    }

    /// Distinct (t, u) pairs.
    pub fn edges(&self) -> u64 {
        self.targets.len() as u64
    }

    pub fn sources(&self) -> Sources {
        self.sources
    }

    /// An event's size in tokens ([`tokens`]); 0 past the end.
    pub fn tokens(&self, seq: u64) -> u64 {
        self.tokens.get(ix(seq)).copied().unwrap_or(0)
    }

    /// An event's kind as the log names it; empty past the end.
    pub fn kind(&self, seq: u64) -> &'static str {
        self.kinds.get(ix(seq)).copied().unwrap_or("")
    }

    /// Pairs per source switched on (a pair two sources give counts for both).
    pub fn by_source(&self) -> Vec<(Source, u64)> {
        self.sources
            .iter()
            .map(|s| (s, self.by_source[s as usize]))
            .collect()
    }
}

struct Builder {
    deps: Dependencies,
}

impl Builder {
    fn new(sources: Sources, events: usize) -> Builder {
        let mut starts = Vec::with_capacity(events + 1);
        starts.push(0);
        Builder {
            deps: Dependencies {
                starts,
                targets: Vec::with_capacity(events * 2),
                sources,
                by_source: [0; 5],
                tokens: Vec::with_capacity(events),
                kinds: Vec::with_capacity(events),
            },
        }
    }

    /// Appends one row from (dependency, source bits) pairs: sorted, merged, counted.
    fn push_row(&mut self, buf: &mut [(u64, u8)]) {
        buf.sort_unstable();
        let d = &mut self.deps;
        let mut i = 0;
        while i < buf.len() {
            let u = buf[i].0;
            let mut bits = 0u8;
            while i < buf.len() && buf[i].0 == u {
                bits |= buf[i].1;
                i += 1;
            }
            d.targets.push(u);
            for s in Source::ALL {
                if bits & s.bit() != 0 {
                    d.by_source[s as usize] += 1;
                }
            }
        }
        d.starts.push(d.targets.len());
    }

    fn finish(self) -> Dependencies {
        self.deps
    }
}
