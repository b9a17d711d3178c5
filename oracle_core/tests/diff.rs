//! The diff engine finds exactly the seq where two logs part, classifies why, and reads only
//! O(log n) events: a random valid log changed at a random seq k (and made self-consistent again
//! so that `verify` passes on it) is reported at k with the right class.

use crate::common;

use common::*;
use oracle_core::diff::{Class, Outcome, Reader, Side, Slice, first_divergence};
use oracle_core::payload::*;
use oracle_core::{Event, Hash, event::relink, verify::verify_events};
use proptest::prelude::*;
use serde_json::json;

fn diff(a: &[Event], b: &[Event]) -> (Outcome, (u64, u64)) {
    let (mut sa, mut sb) = (Slice(a), Slice(b));
    let mut r = Reader::new(&mut sa, &mut sb);
    let out = first_divergence(&mut r).unwrap();
    (out, r.reads())
}

/// How a log is changed at seq k.
#[derive(Clone, Copy, Debug)]
enum Change {
    Payload,
    Kind,
    State,
    Time,
    Seed,
    Truncate,
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        Just(Change::Payload),
        Just(Change::Kind),
        Just(Change::State),
        Just(Change::Time),
        Just(Change::Seed),
        Just(Change::Truncate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn diff_reports_exactly_where_and_why(events in log(24), pick in any::<prop::sample::Index>(), how in change()) {
        let n = events.len();
        let k = match how {
            Change::Seed => 0,
            _ => 1 + pick.index(n.max(2) - 1),
        };
        prop_assume!(k < n || matches!(how, Change::Truncate));
        let mut b = events.clone();
        match how {
            Change::Payload => {
                // A different payload that still fits the kind.
                let mut p = b[k].payload.clone();
                if let Some(step) = p.get("step").and_then(|s| s.as_str()) {
                    p["step"] = json!(format!("{step}_changed"));
                } else if p.get("set").is_some() {
                    p["set"]["zz_changed"] = json!(1);
                }
                prop_assume!(p != b[k].payload);
                b[k].payload = p;
            }
            Change::Kind => {
                let other = if b[k].kind == EventKind::ToolFailed { EventKind::Suspended } else { EventKind::ToolFailed };
                b[k].kind = other;
                b[k].payload = match other {
                    EventKind::ToolFailed => json!({"step": "x", "tool": "t", "attempt": 1, "error": "boom"}),
                    _ => json!({"step": "x", "reason": "r", "attempts": 3}),
                };
                // The state does not change for either kind: keep the chain's state links.
                b[k].state_after = b[k].state_before;
                let (old, new) = (events[k].state_after, b[k].state_after);
                for e in &mut b[k + 1..] {
                    if e.state_before == old { e.state_before = new; } else { break; }
                    if e.state_after == old { e.state_after = new; } else { break; }
                }
            }
            Change::State => {
                let (old, new) = (b[k].state_after, Hash([0xab; 32]));
                b[k].state_after = new;
                for e in &mut b[k + 1..] {
                    if e.state_before == old { e.state_before = new; } else { break; }
                    if e.state_after == old { e.state_after = new; } else { break; }
                }
            }
            Change::Time => {
                let dt = 1_000_000;
                for e in &mut b[k..] {
                    e.time += dt;
                }
            }
            Change::Seed => {
                b[0].payload["seed"] = json!(b[0].payload["seed"].as_u64().unwrap_or(0).wrapping_add(1));
            }
            Change::Truncate => b.truncate(k.min(n)),
        }
        relink(&mut b).unwrap();
        prop_assert!(verify_events(&b).is_ok(), "the changed log is self-consistent");

        let (out, (ra, rb)) = diff(&events, &b);
        // O(log n) reads: a few per probe of the binary search, plus the explanation.
        let bound = 2 * (64 - (n as u64).leading_zeros() as u64) + 4;
        prop_assert!(ra <= bound && rb <= bound, "read {} and {} events of {}", ra, rb, n);
        match (how, out) {
            (Change::Truncate, Outcome::Prefix { shorter, common, extra }) => {
                prop_assert_eq!(shorter, Side::B);
                prop_assert_eq!(common, k as u64);
                prop_assert_eq!(extra, (n - k) as u64);
            }
            (Change::Truncate, Outcome::Identical { .. }) => prop_assert_eq!(k, n),
            (how, Outcome::Diverged(d)) => {
                prop_assert_eq!(d.seq, k as u64);
                let ok = match (how, &d.class) {
                    (Change::Payload, Class::Payload { kind, .. }) => *kind == events[k].kind,
                    (Change::Kind, Class::Structure { a, b }) => a != b,
                    (Change::State, Class::State { .. }) => true,
                    (Change::Time, Class::Structure { .. }) => true,
                    (Change::Seed, Class::Inputs { fields }) => fields == &vec!["seed".to_string()],
                    _ => false,
                };
                prop_assert!(ok, "{:?} classified as {:?}", how, d.class);
                prop_assert!(!d.fields.is_empty());
            }
            (how, out) => prop_assert!(false, "{:?} gave {:?}", how, out),
        }
    }

    #[test]
    fn identical_logs_and_prefixes(events in log(24), cut in any::<prop::sample::Index>()) {
        let (out, _) = diff(&events, &events);
        let identical = matches!(out, Outcome::Identical { events: n, .. } if n == events.len() as u64);
        prop_assert!(identical, "{:?}", out);
        let k = cut.index(events.len());
        let (out, _) = diff(&events[..k], &events);
        match out {
            Outcome::Prefix { shorter, common, extra } => {
                prop_assert_eq!((shorter, common, extra), (Side::A, k as u64, (events.len() - k) as u64));
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }
}

#[test]
fn inputs_name_the_input_that_differs() {
    let start = |path: &str| {
        let mut inputs = serde_json::Map::new();
        inputs.insert("path".into(), json!(path));
        inputs.insert("min_words".into(), json!(5));
        Payload::RunStarted(RunStarted {
            inputs,
            ..oracle_test_support::minimal_run_started("q", 1, &[])
        })
    };
    let one = |p| {
        vec![
            oracle_core::Recorder::new()
                .record(0, vec![], start(p))
                .unwrap(),
        ]
    };
    let (out, _) = diff(&one("a.txt"), &one("b.txt"));
    let Outcome::Diverged(d) = out else {
        panic!("diverged")
    };
    assert_eq!(
        d.class,
        Class::Inputs {
            fields: vec!["inputs.path".into()]
        }
    );
    assert_eq!(d.fields[0].path, "payload.inputs.path");
}

#[test]
fn a_million_events_take_about_forty_reads() {
    // Logs that agree on their first 700k events and differ after: the search reads ~2 log2 n.
    let n = 1u64 << 20;
    struct Synthetic {
        n: u64,
        diverge_at: u64,
        salt: u8,
    }
    impl oracle_core::diff::EventSource for Synthetic {
        type Error = ();
        fn len(&self) -> u64 {
            self.n
        }
        fn event(&mut self, seq: u64) -> Result<Event, ()> {
            let mut e =
                oracle_core::synth::synth_events(oracle_core::synth::SynthConfig::steps(1, 0))
                    .unwrap()
                    .remove(0);
            e.seq = seq;
            let tag = if seq >= self.diverge_at { self.salt } else { 0 };
            e.hash = Hash([(seq % 251) as u8 ^ tag; 32]);
            Ok(e)
        }
    }
    let (mut a, mut b) = (
        Synthetic {
            n,
            diverge_at: 700_000,
            salt: 1,
        },
        Synthetic {
            n,
            diverge_at: 700_000,
            salt: 2,
        },
    );
    let mut r = Reader::new(&mut a, &mut b);
    let out = first_divergence(&mut r).unwrap();
    assert!(
        matches!(out, Outcome::Diverged(ref d) if d.seq == 700_000),
        "{out:?}"
    );
    let (ra, rb) = r.reads();
    assert!(ra <= 24 && rb <= 24, "{ra} {rb}");
}
