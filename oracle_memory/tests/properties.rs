//! Property tests of the memory's set semantics: beliefs do not depend on the order records are
//! applied in, and `Memory::merge` is a commutative, associative, idempotent union whose beliefs
//! equal those of the union of the records, never silently picking a winner.

use crate::common;

use common::*;
use oracle_core::rng::SplitMix64;
use oracle_memory::Memory;
use oracle_memory::belief::{self, Belief, Query};
use oracle_test_support::shuffle;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The logical ticks to ask `as_of` / `valid_at` questions at.
fn ticks(log: &Log) -> Vec<u64> {
    let now = log.time;
    vec![0, now / 3, now / 2, now.saturating_sub(1), now + 1]
}

/// A history: settings, then random operations run through the gate and the verdict rules.
fn history(max_ops: usize) -> impl Strategy<Value = Log> {
    (settings(), prop::collection::vec(op_all(), 1..max_ops)).prop_map(|(settings, ops)| {
        let mut log = Log::new(settings);
        drive(&mut log, &ops);
        log
    })
}

/// A history, then three branches continuing it independently. Each branch numbers its events
/// in its own range of seqs (so records of different branches never share a seq or a handle).
fn branches() -> impl Strategy<Value = (Log, [Log; 3])> {
    (
        history(16),
        prop::collection::vec(op_all(), 0..12),
        prop::collection::vec(op_all(), 0..12),
        prop::collection::vec(op_all(), 0..12),
    )
        .prop_map(|(trunk, x, y, z)| {
            let branch = |i: u64, ops: &[Op]| {
                let mut b = trunk.clone();
                b.seq = i * 100_000;
                drive(&mut b, ops);
                b
            };
            let bs = [branch(1, &x), branch(2, &y), branch(3, &z)];
            (trunk, bs)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The same records applied in any order give the same memory and the same beliefs.
    #[test]
    fn beliefs_do_not_depend_on_record_order(
        log in history(40),
        perms in prop::collection::vec(any::<u64>(), 3),
    ) {
        let in_order = replay(&log.records);
        prop_assert_eq!(&in_order, &log.mem);
        let ls = lines(&log.mem);
        let ts = ticks(&log);
        let min = log.settings.confidence_min_pct;
        let expected = beliefs(&log.mem, &ls, &ts, min);
        for seed in perms {
            let mut shuffled = log.records.clone();
            shuffle(&mut SplitMix64::new(seed), &mut shuffled);
            let m = replay(&shuffled);
            prop_assert_eq!(beliefs(&m, &ls, &ts, min), expected.clone());
            prop_assert_eq!(&m, &log.mem);
        }
    }
}

/// Three independent histories with their own settings. With `disjoint`, each numbers its
/// events in its own range of seqs (different runs of different agents); without, they collide
/// (the same seq, even the same claim id, recorded differently).
fn independent(disjoint: bool) -> impl Strategy<Value = [Log; 3]> {
    let one = || (settings(), prop::collection::vec(op_all(), 1..20));
    [one(), one(), one()].prop_map(move |hs| {
        let mut i = 0;
        hs.map(|(settings, ops)| {
            i += 1;
            let base = if disjoint { i * 100_000 } else { 0 };
            let mut log = Log::starting_at(settings, base, 0);
            drive(&mut log, &ops);
            log
        })
    })
}

/// Subsets of one history's records (not closed under "the request came first"): partial
/// memories, as a merge of partial copies sees them.
fn subsets() -> impl Strategy<Value = (Log, [Vec<Record>; 3])> {
    (history(30), prop::collection::vec(any::<u64>(), 3)).prop_map(|(log, masks)| {
        let pick = |mask: u64| -> Vec<Record> {
            log.records
                .iter()
                .enumerate()
                .filter(|(i, _)| mask.rotate_left(*i as u32) & 1 == 1 || mask.is_multiple_of(7))
                .map(|(_, r)| r.clone())
                .collect()
        };
        let sets = [pick(masks[0]), pick(masks[1]), pick(masks[2])];
        (log, sets)
    })
}

/// The records of several logs, each seq once (branches share their trunk's records).
fn union(logs: &[&[Record]]) -> Vec<Record> {
    let mut by_seq = std::collections::BTreeMap::new();
    for rs in logs {
        for r in *rs {
            let prev = by_seq.insert(r.seq, r.clone());
            assert!(prev.is_none_or(|p| &p == r), "two records at seq {}", r.seq);
        }
    }
    by_seq.into_values().collect()
}

fn check_laws(a: &Memory, b: &Memory, c: &Memory) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.merge(b), b.merge(a), "commutative");
    prop_assert_eq!(a.merge(&b.merge(c)), a.merge(b).merge(c), "associative");
    prop_assert_eq!(&a.merge(a), a, "idempotent");
    prop_assert_eq!(&a.merge(&Memory::new()), a, "the empty memory is neutral");
    let ab = a.merge(b);
    prop_assert_eq!(ab.merge(a), ab.clone(), "absorbs what it holds");
    Ok(())
}

/// Beliefs of every line of `m` with valid time and logical time from `ticks`, trusting
/// windows at `min` percent.
fn all_beliefs(m: &Memory, ts: &[u64], min: u64) -> Vec<Belief> {
    beliefs(m, &lines(m), ts, min)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// Branches of one history merge as a union: the laws hold, and the merge is the memory
    /// of all their records.
    #[test]
    fn branches_merge_as_a_union((trunk, [a, b, c]) in branches()) {
        check_laws(&a.mem, &b.mem, &c.mem)?;
        check_laws(&trunk.mem, &a.mem, &b.mem)?;
        let merged = a.mem.merge(&b.mem).merge(&c.mem);
        let all = replay(&union(&[&a.records, &b.records, &c.records]));
        let ts = ticks(&a);
        let min = a.settings.confidence_min_pct;
        prop_assert_eq!(all_beliefs(&merged, &ts, min), all_beliefs(&all, &ts, min));
        prop_assert_eq!(&merged, &all);
        // A branch merged with its own trunk is the branch.
        prop_assert_eq!(&trunk.mem.merge(&a.mem), &a.mem);
    }

    /// Independent histories merge as a union too, and a line two of them believe differently
    /// from external sources is contested in the merge, with both values: no winner is picked.
    #[test]
    fn independent_histories_merge_without_picking_a_winner([a, b, c] in independent(true)) {
        check_laws(&a.mem, &b.mem, &c.mem)?;
        let merged = a.mem.merge(&b.mem);
        let all = replay(&union(&[&a.records, &b.records]));
        prop_assert_eq!(&merged, &all);
        // The threshold drawn for `a` (settings are random): any one threshold must hold for
        // the three memories alike.
        let min = a.settings.confidence_min_pct;
        for (s, p) in lines(&merged) {
            let functional = |m: &Memory| {
                m.line_cardinality(&s, &p) == Some(oracle_memory::Cardinality::Functional)
            };
            if !functional(&a.mem) || !functional(&b.mem) {
                continue;
            }
            for t in [0, 1, 2, a.time.min(b.time)] {
                let q = Query { subject: s.clone(), predicate: p.clone(), as_of: None, valid_at: Some(t) };
                let external = |b: &Belief| match b {
                    Belief::Resolved { value, support } if support.iter().all(|s| s.provenance.is_external()) => Some(value.clone()),
                    _ => None,
                };
                let (Some(va), Some(vb)) = (
                    external(&belief::query(&a.mem, &q, min)),
                    external(&belief::query(&b.mem, &q, min)),
                ) else {
                    continue;
                };
                let m = belief::query(&merged, &q, min);
                if va == vb {
                    prop_assert_eq!(external(&m), Some(va));
                    continue;
                }
                let Belief::Contested { alternatives, .. } = &m else {
                    return Err(TestCaseError::fail(format!("{s}/{p} at {t}: {va} vs {vb} merged to {m:?}")));
                };
                let mut values: Vec<_> = alternatives.iter().map(|a| a.value.clone()).collect();
                values.sort_by_key(|v| v.to_string());
                let mut expected = vec![va, vb];
                expected.sort_by_key(|v| v.to_string());
                prop_assert_eq!(values, expected);
            }
        }
    }

    /// The laws hold even for memories whose records collide (the same seq, the same claim id
    /// recorded differently), as memories of different runs do.
    #[test]
    fn merge_laws_hold_for_colliding_memories([a, b, c] in independent(false)) {
        check_laws(&a.mem, &b.mem, &c.mem)?;
    }

    /// Partial copies of one history merge to the memory of their records together, whichever
    /// part holds a request and whichever holds its verdict.
    #[test]
    fn partial_copies_merge_to_their_union((log, [x, y, z]) in subsets()) {
        let (a, b, c) = (replay(&x), replay(&y), replay(&z));
        check_laws(&a, &b, &c)?;
        let all = replay(&union(&[&x, &y, &z]));
        let merged = a.merge(&b).merge(&c);
        prop_assert_eq!(&merged, &all);
        let ts = ticks(&log);
        let min = log.settings.confidence_min_pct;
        prop_assert_eq!(all_beliefs(&merged, &ts, min), all_beliefs(&all, &ts, min));
        let full = replay(&log.records);
        prop_assert_eq!(&full.merge(&a), &full);
    }
}
