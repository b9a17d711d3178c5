//! Model test of a store read by line: random stores (claims from runs and from outside on a
//! few lines, contradictions, verdicts, sweeps, reinstatements), a checkpoint taken at a random
//! record and cut into a random number of sections; a reader that takes only one line's
//! section and the part about no line, then folds every record after the checkpoint, must
//! answer every query and history of that line (now, as of earlier ticks, waiting on a
//! resolution) exactly as the whole fold does, with the same writers and head.

use oracle_core::Payload;
use oracle_core::payload::{self, ClaimRecorded};
use oracle_memory::adjudicate as rules;
use oracle_memory::shared::{Store, StoreRecord, section_of};
use oracle_memory::{Cardinality, Claim, Criticality, Provenance, Verdict};
use proptest::prelude::*;
use serde_json::{Value, json};

const SUBJECTS: [&str; 3] = ["alice", "bob", "carol"];
const PREDICATES: [&str; 2] = ["allergy", "city"];

#[derive(Clone, Debug)]
enum Op {
    /// A claim on line (subject, predicate) with a value; `run`: published by a run (else from
    /// outside); `provenance` by index.
    Claim {
        subject: usize,
        predicate: usize,
        value: u8,
        run: Option<u8>,
        provenance: usize,
        multi: bool,
    },
    /// A verdict on the request at this index of the pending ones.
    Verdict {
        pick: usize,
        verdict: usize,
    },
    Sweep,
    /// A reinstatement of the claim at this index.
    Reinstate {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..2usize, 0..3u8, proptest::option::of(0..3u8), 0..4usize, any::<bool>())
            .prop_map(|(subject, predicate, value, run, provenance, multi)| Op::Claim {
                subject, predicate, value, run, provenance, multi
            }),
        3 => (0..4usize, 0..3usize).prop_map(|(pick, verdict)| Op::Verdict { pick, verdict }),
        2 => Just(Op::Sweep),
        1 => (0..8usize).prop_map(|pick| Op::Reinstate { pick }),
    ]
}

fn claim(subject: usize, predicate: usize, value: u8, provenance: usize, multi: bool) -> Claim {
    Claim {
        subject: SUBJECTS[subject].into(),
        predicate: PREDICATES[predicate].into(),
        value: json!(value),
        provenance: Provenance::ALL[provenance],
        cardinality: match multi {
            true => Cardinality::SetValued,
            false => Cardinality::Functional,
        },
        valid: None,
        criticality: Criticality::Medium,
        derived_from: Vec::new(),
    }
}

fn seal(s: &Store, payload: &Payload) -> Option<StoreRecord> {
    s.seal("", "", payload).ok()
}

/// The record `op` makes against `s`, if the store takes it (refusals are skipped).
fn record(s: &Store, op: &Op) -> Option<StoreRecord> {
    let now = s.head.time() + 1;
    match op {
        Op::Claim {
            subject,
            predicate,
            value,
            run,
            provenance,
            multi,
        } => {
            let c = claim(*subject, *predicate, *value, *provenance, *multi);
            match run {
                Some(r) => {
                    let input = serde_json::to_value(&c).ok()?;
                    let key = format!("{}", s.head.records);
                    s.publish(&format!("run-{r}"), &key, "step", &input)
                        .ok()
                        .flatten()
                }
                None => {
                    let a = s.decide_outside(c).ok()?;
                    let payload = Payload::ClaimRecorded(ClaimRecorded {
                        assertion: serde_json::to_value(&a).ok()?,
                        note: String::new(),
                        by: None,
                    });
                    seal(s, &payload)
                }
            }
        }
        Op::Verdict { pick, verdict } => {
            let pending: Vec<_> = s
                .memory
                .requests()
                .filter(|r| r.status.name() == "pending")
                .collect();
            let handle = pending
                .get(*pick % pending.len().max(1))?
                .request
                .handle
                .clone();
            let verdict = Verdict::ALL[*verdict];
            let evidence = Provenance::ExternalFirstHand;
            let effects = rules::adjudicate(&s.memory, &handle, verdict, evidence, now).ok()?;
            seal(
                s,
                &Payload::Adjudicated(payload::Adjudicated {
                    handle,
                    verdict: verdict.as_str().into(),
                    evidence: evidence.as_str().into(),
                    note: String::new(),
                    effects: effects.to_value(),
                    by: None,
                }),
            )
        }
        Op::Sweep => {
            let expired = rules::sweep(&s.memory, now);
            if expired.is_empty() {
                return None;
            }
            seal(
                s,
                &Payload::AdjudicationsExpired(payload::AdjudicationsExpired {
                    now,
                    expired: serde_json::to_value(&expired).ok()?,
                    fired_ms: None,
                }),
            )
        }
        Op::Reinstate { pick } => {
            let ids: Vec<_> = s.memory.entries().map(|e| e.id).collect();
            let id = *ids.get(*pick % ids.len().max(1))?;
            let evidence = Provenance::ExternalFirstHand;
            let fx = rules::reinstate(&s.memory, &id, evidence).ok()?;
            seal(
                s,
                &Payload::Reinstated(payload::Reinstated {
                    claim: id.to_hex(),
                    evidence: evidence.as_str().into(),
                    note: String::new(),
                    effects: fx.to_value(),
                }),
            )
        }
    }
}

/// Every query and history a reader may ask about one line, with each answer (or refusal).
fn answers(s: &Store, subject: &str, predicate: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inputs: Vec<Value> = vec![
        json!({"subject": subject, "predicate": predicate}),
        json!({"subject": subject, "predicate": predicate, "require": "resolved"}),
    ];
    for t in 0..=s.head.time() + 1 {
        inputs.push(json!({"subject": subject, "predicate": predicate, "as_of": t}));
        inputs.push(json!({"subject": subject, "predicate": predicate, "valid_at": t}));
    }
    for input in &inputs {
        out.push(format!("{:?}", s.query("st", input)));
    }
    for input in [
        json!({"subject": subject, "predicate": predicate}),
        json!({"subject": subject, "predicate": predicate, "as_of": s.head.time() / 2}),
    ] {
        out.push(format!("{:?}", s.history("st", &input)));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_line_read_from_its_section_answers_as_the_whole_fold(
        ops in proptest::collection::vec(op(), 1..40),
        at in 0..100usize,
        n in 1..6u64,
        expiry in proptest::option::of(1..6u64),
    ) {
        let mut full = Store::new();
        full.settings.expiry_ticks = expiry;
        for op in &ops {
            if let Some(rec) = record(&full, op) {
                full.apply(rec).unwrap();
            }
        }
        let records = full.records.clone();
        let at = at % (records.len() + 1);
        let mut then = Store::new();
        then.settings.expiry_ticks = expiry;
        for rec in &records[..at] {
            then.apply(rec.clone()).unwrap();
        }
        let state = then.state();
        let (sections, rest) = state.sections(n);
        prop_assert_eq!(sections.len() as u64, n);
        for subject in SUBJECTS {
            for predicate in PREDICATES {
                let i = section_of(subject, predicate, n) as usize;
                let mut part = Store::from_sections(
                    state.settings.clone(),
                    then.head.records,
                    then.head.hash,
                    sections[i].clone(),
                    rest.clone(),
                );
                for rec in &records[at..] {
                    part.apply(rec.clone()).unwrap();
                }
                prop_assert_eq!(part.head, full.head);
                prop_assert_eq!(
                    answers(&part, subject, predicate),
                    answers(&full, subject, predicate),
                    "line {}/{} from section {} of {}, checkpoint at {}", subject, predicate, i, n, at
                );
            }
        }
    }
}
