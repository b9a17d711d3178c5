//! Time that stays put: an event appended from outside (a verdict, a sweep, an outside claim, a
//! reinstatement)
//! takes a logical time strictly after every event before it, so for every tick `T` already
//! recorded, the belief as of `T` is the same before and after the append. A property test over
//! random sequences of outside events on a stored run, through the same functions the
//! `oracle adjudicate | sweep | claim | reinstate` commands call.

use std::fs;
use std::path::PathBuf;

use oracle_memory::{Belief, Claim, Criticality, Provenance, Query, Verdict};
use oracle_runtime::adjudication::{self, OutsideClaim, RunMemory, Submission};
use oracle_runtime::session::{self, SessionError, StartOptions};
use oracle_runtime::{Durability, tools};
use proptest::prelude::*;
use serde_json::json;

const PLAN: &str = r#"plan conflict version 1
a = memory.assert { subject: "door", predicate: "state", value: "open", provenance: "external_first_hand" }
b = memory.assert { subject: "door", predicate: "state", value: "shut", provenance: "user_asserted", criticality: "high" }
  after a
"#;

const SUBJECTS: [&str; 2] = ["door", "window"];
const VALUES: [&str; 3] = ["open", "shut", "ajar"];

#[derive(Clone, Debug)]
enum Op {
    Claim {
        subject: usize,
        value: usize,
        user: bool,
        later: u64,
    },
    Verdict {
        pick: usize,
        verdict: usize,
        later: u64,
    },
    Sweep {
        later: u64,
    },
    Reinstate {
        pick: usize,
        later: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..SUBJECTS.len(), 0..VALUES.len(), any::<bool>(), 0u64..4).prop_map(
            |(subject, value, user, later)| Op::Claim {
                subject,
                value,
                user,
                later
            }
        ),
        (0usize..4, 0usize..3, 0u64..4).prop_map(|(pick, verdict, later)| Op::Verdict {
            pick,
            verdict,
            later
        }),
        (0u64..12).prop_map(|later| Op::Sweep { later }),
        (0usize..4, 0u64..4).prop_map(|(pick, later)| Op::Reinstate { pick, later }),
    ]
}

fn start(expiry: Option<u64>) -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("conflict.plan");
    fs::write(&plan, PLAN).unwrap();
    let home = dir.path().join("home");
    let opts = StartOptions {
        durability: Durability::None,
        domains: [(
            oracle_memory::settings::DOMAIN.to_owned(),
            oracle_memory::MemorySettings {
                oracle: true,
                expiry_ticks: expiry,
                ..Default::default()
            }
            .to_value(),
        )]
        .into(),
        ..StartOptions::new(&home, &plan)
    };
    let s = session::start(&opts, &tools::builtin()).unwrap();
    (dir, home, s.id)
}

/// The belief of each of `lines` (and of every line the memory has, whose belief must be
/// `NoBelief` at recorded ticks when not listed) as of every tick `0..=last`, valid then too.
fn beliefs_as_of(
    rm: &RunMemory,
    lines: &[(String, String)],
    last: u64,
) -> Vec<(u64, String, String, Belief)> {
    let mut out = Vec::new();
    for t in 0..=last {
        for (s, p) in lines {
            let q = Query {
                subject: s.clone(),
                predicate: p.clone(),
                as_of: Some(t),
                valid_at: Some(t),
            };
            let b = oracle_memory::belief::query(&rm.memory, &q, rm.settings.confidence_min_pct);
            out.push((t, s.clone(), p.clone(), b));
        }
    }
    out
}

/// Applies one op; `Ok(true)` when it appended an event. Refusals (no pending handle, expired,
/// nothing to sweep) append nothing and are fine.
fn apply(home: &std::path::Path, run: &str, rm: &RunMemory, op: &Op) -> bool {
    let earliest = rm.earliest_outside_tick();
    match op {
        Op::Claim {
            subject,
            value,
            user,
            later,
        } => {
            let c = OutsideClaim {
                claim: Claim {
                    subject: SUBJECTS[*subject].into(),
                    predicate: "state".into(),
                    value: json!(VALUES[*value]),
                    provenance: if *user {
                        Provenance::UserAsserted
                    } else {
                        Provenance::ExternalFirstHand
                    },
                    cardinality: Default::default(),
                    valid: None,
                    criticality: Criticality::Medium,
                    derived_from: vec![],
                },
                note: String::new(),
                now: Some(earliest + later),
                by: None,
            };
            adjudication::claim(home, run, &c, Durability::None).is_ok()
        }
        Op::Verdict {
            pick,
            verdict,
            later,
        } => {
            let pending: Vec<String> = rm
                .memory
                .requests()
                .filter(|r| r.status == oracle_memory::RequestStatus::Pending)
                .map(|r| r.request.handle.clone())
                .collect();
            let Some(handle) = pending.get(pick % pending.len().max(1)) else {
                return false;
            };
            let sub = Submission {
                handle: handle.clone(),
                verdict: [Verdict::Affirm, Verdict::Deny, Verdict::Unknown][*verdict],
                evidence: Provenance::ExternalFirstHand,
                note: String::new(),
                now: Some(earliest + later),
                by: None,
            };
            match adjudication::adjudicate(home, run, &sub, Durability::None) {
                Ok(_) => true,
                Err(SessionError::Adjudicate { .. }) => false,
                Err(e) => panic!("verdict on {handle}: {e}"),
            }
        }
        Op::Reinstate { pick, later } => {
            use oracle_memory::Disposition::{Contested, Superseded};
            let mut ids: Vec<(u64, oracle_memory::ClaimId)> = rm
                .memory
                .entries()
                .filter(|e| {
                    matches!(
                        rm.memory.disposition(&e.id, u64::MAX),
                        Some(Superseded | Contested)
                    )
                })
                .map(|e| (e.origin.seq, e.id))
                .collect();
            ids.sort();
            let Some((_, id)) = ids.get(pick % ids.len().max(1)) else {
                return false;
            };
            let r = adjudication::Reinstate {
                claim: id.to_hex(),
                evidence: Provenance::ExternalFirstHand,
                note: String::new(),
                now: Some(earliest + later),
            };
            match adjudication::reinstate(home, run, &r, Durability::None) {
                Ok(_) => true,
                Err(SessionError::Adjudicate { .. }) => false,
                Err(e) => panic!("reinstating {}: {e}", id.short()),
            }
        }
        Op::Sweep { later } => {
            adjudication::sweep(home, run, Some(earliest + later), Durability::None)
                .unwrap()
                .seq
                .is_some()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// For every tick already recorded and every later outside append, the belief as of that
    /// tick is unchanged; and the appended event's time is after every earlier event's.
    #[test]
    fn the_belief_as_of_a_recorded_tick_never_changes(
        expiry in prop_oneof![Just(None), (1u64..8).prop_map(Some)],
        ops in proptest::collection::vec(op(), 1..10),
    ) {
        let (_dir, home, run) = start(expiry);
        for op in &ops {
            let before = adjudication::load(&home, &run).unwrap();
            let last = before.time;
            // The lines a later append may add too: at recorded ticks they had no belief.
            let mut lines: Vec<(String, String)> = before.memory.lines().cloned().collect();
            for s in SUBJECTS {
                let l = (s.to_owned(), "state".to_owned());
                if !lines.contains(&l) {
                    lines.push(l);
                }
            }
            let seen = beliefs_as_of(&before, &lines, last);
            let appended = apply(&home, &run, &before, op);
            let after = adjudication::load(&home, &run).unwrap();
            if appended {
                prop_assert_eq!(after.events, before.events + 1);
                prop_assert!(after.time > last, "{:?}: time {} not after {}", op, after.time, last);
            } else {
                prop_assert_eq!(after.events, before.events);
            }
            prop_assert_eq!(beliefs_as_of(&after, &lines, last), seen, "{:?}", op);
        }
    }
}

/// A `now` before the earliest outside tick is refused naming it, and nothing is written; a
/// sweep at such a tick, where nothing has expired, would write nothing, and reports 0.
#[test]
fn a_now_before_the_log_is_refused_naming_the_earliest_tick() {
    let (_dir, home, run) = start(None);
    let rm = adjudication::load(&home, &run).unwrap();
    let log = fs::read(&rm.run.paths.log).unwrap();
    for now in [0, rm.time] {
        let swept = adjudication::sweep(&home, &run, Some(now), Durability::None).unwrap();
        assert_eq!((swept.expired.len(), swept.seq), (0, None));
        let reinstate = adjudication::Reinstate {
            claim: "0123456789abcdef".into(),
            evidence: Provenance::ExternalFirstHand,
            note: String::new(),
            now: Some(now),
        };
        let err = adjudication::reinstate(&home, &run, &reinstate, Durability::None).unwrap_err();
        match &err {
            SessionError::TooEarly { earliest, .. } => assert_eq!(*earliest, rm.time + 1),
            other => panic!("{other}"),
        }
        assert!(
            err.to_string().contains(&format!("is {}", rm.time + 1)),
            "{err}"
        );
    }
    assert_eq!(fs::read(&rm.run.paths.log).unwrap(), log);
    let late = adjudication::sweep(
        &home,
        &run,
        Some(oracle_core::event::TIME_MAX + 1),
        Durability::None,
    );
    assert!(
        matches!(late, Err(SessionError::OutsideTime { .. })),
        "{late:?}"
    );
    assert_eq!(fs::read(&rm.run.paths.log).unwrap(), log);
}
