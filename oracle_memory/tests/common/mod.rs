//! Shared test support: a log driver that records memory events the way the runtime does, a
//! claim builder, and random operation sequences for the property and model tests.
#![allow(dead_code)]

use oracle_core::Payload;
use oracle_core::payload::{
    Adjudicated, AdjudicationsExpired, Reinstated, ToolFailed, ToolReturned,
};
use oracle_memory::adjudicate::{self, Expired, Reinstatement};
use oracle_memory::belief::{self, Belief, Query};
use oracle_memory::{
    AdjudicateError, Assertion, ClaimId, Effects, Memory, MemoryError, MemorySettings, Origin,
    Provenance, Verdict, tools,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// One recorded event.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub seq: u64,
    pub time: u64,
    pub payload: Payload,
}

/// A run's log as far as memory is concerned: it mints seqs, keeps the logical clock, asks the
/// library for each decision and applies the recorded result, as the engine does.
#[derive(Clone, Debug)]
pub struct Log {
    pub mem: Memory,
    pub settings: MemorySettings,
    /// The seq of the last event recorded.
    pub seq: u64,
    /// The current logical time.
    pub time: u64,
    pub records: Vec<Record>,
}

impl Log {
    pub fn new(settings: MemorySettings) -> Log {
        Log::starting_at(settings, 0, 0)
    }

    /// A log whose next event gets seq `seq + 1`, at logical time `time`.
    pub fn starting_at(settings: MemorySettings, seq: u64, time: u64) -> Log {
        Log {
            mem: Memory::new(),
            settings,
            seq,
            time,
            records: Vec::new(),
        }
    }

    /// The default settings: an oracle, no expiry, trust at 50%.
    pub fn oracle() -> Log {
        Log::new(MemorySettings::default())
    }

    pub fn no_oracle() -> Log {
        Log::new(MemorySettings {
            oracle: false,
            ..MemorySettings::default()
        })
    }

    pub fn with_expiry(ticks: u64) -> Log {
        Log::new(MemorySettings {
            expiry_ticks: Some(ticks),
            ..MemorySettings::default()
        })
    }

    /// Moves the logical clock on.
    pub fn tick(&mut self, n: u64) {
        self.time += n;
    }

    pub fn record(&mut self, payload: Payload) {
        self.seq += 1;
        self.mem
            .apply(self.seq, self.time, &payload)
            .expect("a recorded event applies");
        self.records.push(Record {
            seq: self.seq,
            time: self.time,
            payload,
        });
    }

    /// The origin the next `memory.assert` gets.
    pub fn next_origin(&self) -> Origin {
        Origin {
            seq: self.seq + 1,
            time: self.time,
            step: format!("step{}", self.seq + 1),
            tool: tools::ASSERT.into(),
        }
    }

    /// `memory.assert` with `claim` as its input: the gate's output is recorded and applied; a
    /// refusal is recorded as a failed call (which only moves the clock).
    pub fn assert(&mut self, claim: &Value) -> Result<Assertion, MemoryError> {
        let origin = self.next_origin();
        match tools::assert(&self.mem, claim, &origin, &self.settings) {
            Ok(output) => {
                let a: Assertion = serde_json::from_value(output.clone()).unwrap();
                self.record(Payload::ToolReturned(ToolReturned {
                    step: origin.step,
                    tool: origin.tool,
                    attempt: 1,
                    output,
                }));
                Ok(a)
            }
            Err(e) => {
                self.record(Payload::ToolFailed(ToolFailed {
                    step: origin.step,
                    tool: origin.tool,
                    attempt: 1,
                    error: e.to_string(),
                    usage: None,
                }));
                Err(e)
            }
        }
    }

    /// Asserts a claim that must be accepted; returns its assertion.
    pub fn ok(&mut self, claim: &Value) -> Assertion {
        self.assert(claim).expect("the claim is accepted")
    }

    /// A verdict given now with `evidence`; recorded and applied when accepted (a refusal writes
    /// nothing).
    pub fn verdict_with(
        &mut self,
        handle: &str,
        verdict: Verdict,
        evidence: Provenance,
        note: &str,
    ) -> Result<Effects, AdjudicateError> {
        let fx = adjudicate::adjudicate(&self.mem, handle, verdict, evidence, self.time)?;
        self.record(Payload::Adjudicated(Adjudicated {
            handle: handle.into(),
            verdict: verdict.as_str().into(),
            evidence: evidence.as_str().into(),
            note: note.into(),
            effects: fx.to_value(),
            by: None,
        }));
        Ok(fx)
    }

    pub fn verdict(&mut self, handle: &str, verdict: Verdict) -> Result<Effects, AdjudicateError> {
        self.verdict_with(handle, verdict, Provenance::ExternalFirstHand, "checked")
    }

    /// A verdict reinstating the superseded claim `claim`, given now; recorded and applied when
    /// accepted (a refusal writes nothing).
    pub fn reinstate_with(
        &mut self,
        claim: &ClaimId,
        evidence: Provenance,
    ) -> Result<Reinstatement, AdjudicateError> {
        let fx = adjudicate::reinstate(&self.mem, claim, evidence)?;
        self.record(Payload::Reinstated(Reinstated {
            claim: claim.to_hex(),
            evidence: evidence.as_str().into(),
            note: "new evidence".into(),
            effects: fx.to_value(),
        }));
        Ok(fx)
    }

    pub fn reinstate(&mut self, claim: &ClaimId) -> Result<Reinstatement, AdjudicateError> {
        self.reinstate_with(claim, Provenance::ExternalFirstHand)
    }

    /// Every claim superseded, contested or committed now (what a reinstatement may name; a
    /// committed one only on a contested line), in the order recorded.
    pub fn reinstatable(&self) -> Vec<ClaimId> {
        use oracle_memory::Disposition::{Committed, Contested, Superseded};
        self.claim_ids()
            .into_iter()
            .filter(|id| {
                matches!(
                    self.mem.disposition(id, u64::MAX),
                    Some(Superseded | Contested | Committed)
                )
            })
            .collect()
    }

    /// A sweep now: records one event when something expired, nothing otherwise.
    pub fn sweep(&mut self) -> Vec<Expired> {
        let list = adjudicate::sweep(&self.mem, self.time);
        if !list.is_empty() {
            self.record(Payload::AdjudicationsExpired(AdjudicationsExpired {
                now: self.time,
                expired: serde_json::to_value(&list).unwrap(),
                fired_ms: None,
            }));
        }
        list
    }

    pub fn belief(&self, subject: &str, predicate: &str) -> Belief {
        self.query(Query::now(subject, predicate))
    }

    pub fn query(&self, q: Query) -> Belief {
        belief::query(&self.mem, &q, self.settings.confidence_min_pct)
    }

    /// Every handle the memory knows, in the order the requests were opened.
    pub fn handles(&self) -> Vec<String> {
        let mut hs: Vec<(u64, String)> = self
            .mem
            .requests()
            .map(|r| (r.origin.seq, r.request.handle.clone()))
            .collect();
        hs.sort();
        hs.into_iter().map(|h| h.1).collect()
    }

    /// Every claim id, in the order recorded.
    pub fn claim_ids(&self) -> Vec<ClaimId> {
        let mut ids: Vec<(u64, ClaimId)> =
            self.mem.entries().map(|e| (e.origin.seq, e.id)).collect();
        ids.sort();
        ids.into_iter().map(|i| i.1).collect()
    }

    /// Carries out one concrete action.
    pub fn perform(&mut self, action: &Action) -> Outcome {
        match action {
            Action::Assert(claim) => Outcome::Assert(self.assert(claim)),
            Action::Verdict {
                handle,
                verdict,
                evidence,
            } => Outcome::Verdict(self.verdict_with(handle, *verdict, *evidence, "n")),
            Action::Reinstate { claim, evidence } => {
                Outcome::Reinstate(self.reinstate_with(claim, *evidence))
            }
            Action::Sweep => Outcome::Sweep(self.sweep()),
            Action::Tick(n) => {
                self.tick(*n);
                Outcome::Tick
            }
        }
    }
}

/// A memory built by applying `records` in the order given.
pub fn replay<'a>(records: impl IntoIterator<Item = &'a Record>) -> Memory {
    let mut m = Memory::new();
    for r in records {
        m.apply(r.seq, r.time, &r.payload).unwrap();
    }
    m
}

/// A claim under construction; `json()` is the `memory.assert` input.
#[derive(Clone, Debug)]
pub struct C {
    pub v: Value,
}

pub fn claim(subject: &str, predicate: &str, value: Value, provenance: Provenance) -> C {
    C {
        v: json!({
            "subject": subject,
            "predicate": predicate,
            "value": value,
            "provenance": provenance.as_str(),
        }),
    }
}

/// A user-asserted claim.
pub fn user(subject: &str, predicate: &str, value: Value) -> C {
    claim(subject, predicate, value, Provenance::UserAsserted)
}

/// An external first-hand claim.
pub fn ext(subject: &str, predicate: &str, value: Value) -> C {
    claim(subject, predicate, value, Provenance::ExternalFirstHand)
}

/// A model-derived claim.
pub fn model(subject: &str, predicate: &str, value: Value) -> C {
    claim(subject, predicate, value, Provenance::ModelDerived)
}

/// A recall re-entry of `source`.
pub fn recall(subject: &str, predicate: &str, value: Value, source: ClaimId) -> C {
    claim(subject, predicate, value, Provenance::RecallReentry).derived_from(&[source])
}

impl C {
    fn set(mut self, k: &str, v: Value) -> C {
        self.v[k] = v;
        self
    }

    pub fn valid(self, start: u64, end: Option<u64>, confidence_pct: u64) -> C {
        self.set(
            "valid",
            json!({"start": start, "end": end, "confidence_pct": confidence_pct}),
        )
    }

    pub fn criticality(self, c: &str) -> C {
        self.set("criticality", json!(c))
    }

    pub fn set_valued(self) -> C {
        self.set("cardinality", json!("set_valued"))
    }

    pub fn derived_from(self, ids: &[ClaimId]) -> C {
        self.set("derived_from", serde_json::to_value(ids).unwrap())
    }

    pub fn json(&self) -> Value {
        self.v.clone()
    }
}

/// A concrete operation on a log.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Assert(Value),
    Verdict {
        handle: String,
        verdict: Verdict,
        evidence: Provenance,
    },
    Reinstate {
        claim: ClaimId,
        evidence: Provenance,
    },
    Sweep,
    Tick(u64),
}

/// What an action returned.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // a handful per test case
pub enum Outcome {
    Assert(Result<Assertion, MemoryError>),
    Verdict(Result<Effects, AdjudicateError>),
    Reinstate(Result<Reinstatement, AdjudicateError>),
    Sweep(Vec<Expired>),
    Tick,
}

/// A random operation, made concrete against the memory it is applied to (which claims and
/// handles exist), so any sequence is meaningful.
#[derive(Clone, Debug)]
pub enum Op {
    Assert {
        subject: u8,
        predicate: u8,
        value: u8,
        provenance: u8,
        /// `(start relative to now, length, confidence)`.
        window: Option<(i8, Option<i8>, u8)>,
        criticality: u8,
        /// Ask for the other cardinality than the line's (refused once the line exists).
        flip_cardinality: bool,
        /// For a recall re-entry: which existing claim, and whether to repeat it faithfully.
        source: usize,
        faithful: bool,
        /// Speak about the line of the last claim instead (so challengers pile up).
        same_line: bool,
    },
    Verdict {
        pick: usize,
        verdict: u8,
        first_hand: bool,
        /// Pick among every handle (resolved and expired ones too), or a handle that never
        /// existed.
        any: u8,
    },
    /// Reinstate a superseded or contested claim (`any == 0`: any claim at all, mostly refused).
    Reinstate {
        pick: usize,
        first_hand: bool,
        any: u8,
    },
    Sweep,
    Tick(u8),
}

pub const SUBJECTS: [&str; 2] = ["alice", "bob"];
/// `tags` is set-valued, the others functional (and drawn more often).
pub const PREDICATES: [&str; 5] = ["city", "city", "city", "employer", "tags"];
pub const CONFIDENCES: [u64; 4] = [20, 50, 80, 100];
pub const CRITICALITIES: [&str; 4] = ["low", "medium", "high", "critical"];

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (
            0..SUBJECTS.len() as u8,
            0..PREDICATES.len() as u8,
            0u8..4,
            0u8..10,
            prop::option::weighted(0.4, (-6i8..=1, prop::option::of(-1i8..=5), 0u8..4)),
            0u8..4,
            prop::bool::weighted(0.02),
            any::<usize>(),
            prop::bool::weighted(0.9),
            prop::bool::weighted(0.4),
        )
            .prop_map(
                |(subject, predicate, value, provenance, window, criticality, flip_cardinality, source, faithful, same_line)| {
                    Op::Assert {
                        subject,
                        predicate,
                        value,
                        provenance,
                        window,
                        criticality,
                        flip_cardinality,
                        source,
                        faithful,
                        same_line,
                    }
                }
            ),
        4 => (any::<usize>(), 0u8..3, prop::bool::weighted(0.9), 0u8..10)
            .prop_map(|(pick, verdict, first_hand, any)| Op::Verdict { pick, verdict, first_hand, any }),
        2 => Just(Op::Sweep),
        3 => (0u8..3).prop_map(Op::Tick),
    ]
}

/// [`op`] and reinstatements. The reference model (`tests/model.rs`) does not model
/// reinstatement, so its comparison draws from [`op`]; everything else draws from this.
pub fn op_all() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => op(),
        1 => (any::<usize>(), prop::bool::weighted(0.9), 0u8..10)
            .prop_map(|(pick, first_hand, any)| Op::Reinstate { pick, first_hand, any }),
    ]
}

/// Random memory settings: with or without an oracle, an expiry or none, and a trust threshold
/// drawn around the confidences claims are given ([`CONFIDENCES`]: on each, one above, one
/// below) or anywhere in 0..=101, so `>=` against `>` and a threshold ignored are both visible.
pub fn settings() -> impl Strategy<Value = MemorySettings> {
    let near: Vec<u64> = CONFIDENCES
        .iter()
        .flat_map(|&c| [c - 1, c, c + 1])
        .chain([0])
        .collect();
    (
        prop::bool::weighted(0.8),
        prop::option::weighted(0.6, 1u64..5),
        prop_oneof![3 => prop::sample::select(near), 1 => 0u64..=101],
    )
        .prop_map(
            |(oracle, expiry_ticks, confidence_min_pct)| MemorySettings {
                oracle,
                expiry_ticks,
                expiry_ms: None,
                confidence_min_pct,
                store: None,
            },
        )
}

impl Op {
    /// The concrete action this operation means for `log` as it stands.
    pub fn concretize(&self, log: &Log) -> Action {
        match *self {
            Op::Assert {
                subject,
                predicate,
                value,
                provenance,
                window,
                criticality,
                flip_cardinality,
                source,
                faithful,
                same_line,
            } => {
                // Provenances weighted: mostly external, some model-derived and recalls.
                let prov = match provenance {
                    0..=3 => Provenance::UserAsserted,
                    4..=6 => Provenance::ExternalFirstHand,
                    7 | 8 => Provenance::ModelDerived,
                    _ => Provenance::RecallReentry,
                };
                let ids = log.claim_ids();
                if prov == Provenance::RecallReentry && !ids.is_empty() {
                    let id = ids[source % ids.len()];
                    let e = log.mem.entry(&id).unwrap();
                    let mut value = e.claim.value.clone();
                    if !faithful {
                        value = json!(["not", value]);
                    }
                    let mut c = recall(&e.claim.subject, &e.claim.predicate, value, id);
                    if e.claim.cardinality == oracle_memory::Cardinality::SetValued {
                        c = c.set_valued();
                    }
                    return Action::Assert(c.json());
                }
                let (mut s, mut p) = (SUBJECTS[subject as usize], PREDICATES[predicate as usize]);
                if same_line && let Some(last) = ids.last() {
                    let e = log.mem.entry(last).unwrap();
                    s = SUBJECTS.iter().find(|x| **x == e.claim.subject).unwrap();
                    p = PREDICATES
                        .iter()
                        .find(|x| **x == e.claim.predicate)
                        .unwrap();
                }
                let prov = if prov == Provenance::RecallReentry {
                    Provenance::UserAsserted
                } else {
                    prov
                };
                let mut c = claim(s, p, json!(format!("v{value}")), prov)
                    .criticality(CRITICALITIES[criticality as usize]);
                if (p == "tags") != flip_cardinality {
                    c = c.set_valued();
                }
                if let Some((rel, len, conf)) = window {
                    let start = (log.time as i64 + rel as i64).max(0) as u64;
                    let end = len.map(|l| (start as i64 + l as i64).max(0) as u64);
                    c = c.valid(start, end, CONFIDENCES[conf as usize]);
                }
                Action::Assert(c.json())
            }
            Op::Verdict {
                pick,
                verdict,
                first_hand,
                any,
            } => {
                let verdict = [Verdict::Affirm, Verdict::Deny, Verdict::Unknown][verdict as usize];
                let evidence = if first_hand {
                    Provenance::ExternalFirstHand
                } else {
                    Provenance::UserAsserted
                };
                let all = log.handles();
                let pending: Vec<String> = log
                    .mem
                    .requests()
                    .filter(|r| r.status == oracle_memory::RequestStatus::Pending)
                    .map(|r| r.request.handle.clone())
                    .collect();
                let handle = match any {
                    0 => "adj-999999".to_owned(),
                    1 | 2 if !all.is_empty() => all[pick % all.len()].clone(),
                    _ if !pending.is_empty() => pending[pick % pending.len()].clone(),
                    // Nothing to decide: let time pass instead.
                    _ => return Action::Tick(1),
                };
                Action::Verdict {
                    handle,
                    verdict,
                    evidence,
                }
            }
            Op::Reinstate {
                pick,
                first_hand,
                any,
            } => {
                let evidence = if first_hand {
                    Provenance::ExternalFirstHand
                } else {
                    Provenance::UserAsserted
                };
                let ids = if any == 0 {
                    log.claim_ids()
                } else {
                    log.reinstatable()
                };
                if ids.is_empty() {
                    return Action::Tick(1);
                }
                Action::Reinstate {
                    claim: ids[pick % ids.len()],
                    evidence,
                }
            }
            Op::Sweep => Action::Sweep,
            Op::Tick(n) => Action::Tick(n as u64),
        }
    }
}

/// Runs `ops` on `log`, returning the actions taken.
pub fn drive(log: &mut Log, ops: &[Op]) -> Vec<Action> {
    ops.iter()
        .map(|op| {
            let a = op.concretize(log);
            log.perform(&a);
            a
        })
        .collect()
}

/// Every line the memory holds.
pub fn lines(m: &Memory) -> Vec<(String, String)> {
    m.lines().cloned().collect()
}

/// The beliefs of every line in `lines`, now and at a few logical and valid times.
pub fn beliefs(
    m: &Memory,
    lines: &[(String, String)],
    ticks: &[u64],
    confidence_min_pct: u64,
) -> Vec<Belief> {
    let mut out = Vec::new();
    for (s, p) in lines {
        out.push(belief::query(m, &Query::now(s, p), confidence_min_pct));
        for &t in ticks {
            for (as_of, valid_at) in [(Some(t), None), (None, Some(t)), (Some(t), Some(t / 2))] {
                let q = Query {
                    subject: s.clone(),
                    predicate: p.clone(),
                    as_of,
                    valid_at,
                };
                out.push(belief::query(m, &q, confidence_min_pct));
            }
        }
    }
    out
}
