//! Scenario tests of belief memory at the library level: claims go through the gate and
//! verdicts and sweeps through the adjudication rules, each result is recorded and applied as
//! the runtime does, and every test checks what a user of the memory sees (beliefs, support,
//! dispositions, requests, refusals).

use crate::common;

use common::*;
use oracle_core::Payload;
use oracle_core::payload::ToolReturned;
use oracle_memory::adjudicate::{BoundEffect, Expired, Repoint};
use oracle_memory::belief::{Belief, Query, Support};
use oracle_memory::gate::{self, handle_at};
use oracle_memory::tools::{self, QueryOutcome};
use oracle_memory::{
    AdjudicateError, Assertion, Claim, ClaimId, Disposition, Memory, MemoryError, Origin,
    Provenance, RequestStatus, Verdict,
};
use serde_json::{Value, json};

/// The values of a belief's alternatives (or its one value), in the order given.
fn values(b: &Belief) -> Vec<Value> {
    match b {
        Belief::Resolved { value, .. } => vec![value.clone()],
        Belief::Contested { alternatives, .. } | Belief::TimingUncertain { alternatives } => {
            alternatives.iter().map(|a| a.value.clone()).collect()
        }
        Belief::NoBelief => vec![],
    }
}

/// The value and support of a resolved belief.
fn resolved(b: &Belief) -> (&Value, &[Support]) {
    match b {
        Belief::Resolved { value, support } => (value, support),
        other => panic!("expected a resolved belief, got {other:?}"),
    }
}

/// The alternatives' values and the pending handles of a contested belief.
fn contested(b: &Belief) -> (Vec<Value>, Vec<String>) {
    match b {
        Belief::Contested { pending, .. } => (values(b), pending.clone()),
        other => panic!("expected a contested belief, got {other:?}"),
    }
}

fn sorted(mut v: Vec<Value>) -> Vec<Value> {
    v.sort_by_key(|x| x.to_string());
    v
}

fn at(subject: &str, predicate: &str, as_of: Option<u64>, valid_at: Option<u64>) -> Query {
    Query {
        subject: subject.into(),
        predicate: predicate.into(),
        as_of,
        valid_at,
    }
}

fn handle(a: &Assertion) -> String {
    a.adjudication
        .as_ref()
        .expect("the claim opened a request")
        .handle
        .clone()
}

fn disposition(log: &Log, id: &ClaimId) -> Disposition {
    log.mem
        .disposition(id, u64::MAX)
        .expect("the claim is recorded")
}

// ---------------------------------------------------------------------------------------------
// Verdicts.

#[test]
fn affirm_makes_the_challenger_the_belief_and_supersedes_the_incumbent() {
    let mut log = Log::oracle();
    log.tick(1);
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    assert_eq!(a.disposition, Disposition::Committed);
    assert_eq!(a.reason, "new line");
    log.tick(1);
    let b = log.ok(&ext("alice", "city", json!("london")).json());
    assert_eq!(b.disposition, Disposition::QueuedForAdjudication);
    assert_eq!(b.conflicts_with, vec![a.id]);
    let req = b.adjudication.clone().unwrap();
    assert_eq!((req.incumbent, req.challenger), (a.id, b.id));
    assert_eq!(req.handle, "adj-2");
    assert_eq!(req.expires_at, None);

    // While the request is pending both claims count: the line is contested.
    let (vals, pending) = contested(&log.belief("alice", "city"));
    assert_eq!(sorted(vals), vec![json!("london"), json!("paris")]);
    assert_eq!(pending, vec!["adj-2"]);
    // The incumbent's record is untouched by the challenge.
    assert_eq!(disposition(&log, &a.id), Disposition::Committed);

    log.tick(1);
    let fx = log.verdict("adj-2", Verdict::Affirm).unwrap();
    assert_eq!(
        fx.bounds,
        vec![BoundEffect {
            claim: a.id,
            until: 0
        }]
    );
    let b_now = log.belief("alice", "city");
    let (value, support) = resolved(&b_now);
    assert_eq!(value, &json!("london"));
    assert_eq!(support.len(), 1);
    let s = &support[0];
    assert_eq!(s.claim, b.id);
    assert_eq!(s.provenance, Provenance::ExternalFirstHand);
    assert_eq!(s.disposition, Some(Disposition::Committed));
    assert_eq!((s.seq, s.time), (2, 2));
    assert_eq!(
        (s.step.as_str(), s.tool.as_str()),
        ("step2", "memory.assert")
    );

    assert_eq!(disposition(&log, &a.id), Disposition::Superseded);
    assert_eq!(disposition(&log, &b.id), Disposition::Committed);
    let history: Vec<_> = log
        .mem
        .transitions(&b.id)
        .into_iter()
        .map(|t| (t.seq, t.disposition))
        .collect();
    assert_eq!(
        history,
        vec![
            (2, Disposition::QueuedForAdjudication),
            (3, Disposition::Committed)
        ]
    );
    // The superseded claim is kept, and the request records the verdict.
    assert!(log.mem.entry(&a.id).is_some());
    match &log.mem.request_by_handle("adj-2").unwrap().status {
        RequestStatus::Resolved {
            seq, verdict, by, ..
        } => assert_eq!((*seq, *verdict, by.clone()), (3, Verdict::Affirm, None)),
        other => panic!("{other:?}"),
    }
    // Without a window the challenger holds for all time, and the incumbent nowhere.
    let early = log.query(at("alice", "city", None, Some(0)));
    assert_eq!(resolved(&early).0, &json!("london"));
}

#[test]
fn affirm_bounds_the_incumbent_where_a_later_challenger_starts() {
    let mut log = Log::oracle();
    log.tick(10);
    let a = log.ok(&user("bob", "employer", json!("acme"))
        .valid(0, None, 90)
        .json());
    let b = log.ok(&ext("bob", "employer", json!("globex"))
        .valid(6, None, 90)
        .json());
    assert_eq!(b.disposition, Disposition::QueuedForAdjudication);

    // Before the verdict: where only the incumbent's window reaches, it is the belief.
    let before = log.query(at("bob", "employer", None, Some(3)));
    assert_eq!(resolved(&before).0, &json!("acme"));
    assert_eq!(
        contested(&log.query(at("bob", "employer", None, Some(8)))).1,
        vec![handle(&b)]
    );

    log.tick(1);
    let fx = log.verdict(&handle(&b), Verdict::Affirm).unwrap();
    assert_eq!(
        fx.bounds,
        vec![BoundEffect {
            claim: a.id,
            until: 6
        }]
    );

    assert_eq!(resolved(&log.belief("bob", "employer")).0, &json!("globex"));
    assert_eq!(
        resolved(&log.query(at("bob", "employer", None, Some(6)))).0,
        &json!("globex")
    );
    // Valid times before the challenger's start still see the (superseded) incumbent.
    let then = log.query(at("bob", "employer", None, Some(5)));
    let (value, support) = resolved(&then);
    assert_eq!(value, &json!("acme"));
    assert_eq!(support[0].claim, a.id);
    assert_eq!(support[0].disposition, Some(Disposition::Superseded));
    // As of the time before the verdict, valid time 8 was still contested.
    let (_, pending) = contested(&log.query(at("bob", "employer", Some(10), Some(8))));
    assert_eq!(pending, vec![handle(&b)]);
}

#[test]
fn deny_keeps_the_incumbent_and_supersedes_the_challenger() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    log.tick(1);
    let b = log.ok(&user("alice", "city", json!("london")).json());
    log.tick(1);
    let fx = log.verdict(&handle(&b), Verdict::Deny).unwrap();
    assert_eq!(
        fx.bounds,
        vec![BoundEffect {
            claim: b.id,
            until: 0
        }]
    );

    let now = log.belief("alice", "city");
    let (value, support) = resolved(&now);
    assert_eq!(value, &json!("paris"));
    assert_eq!(
        support.iter().map(|s| s.claim).collect::<Vec<_>>(),
        vec![a.id]
    );
    assert_eq!(support[0].disposition, Some(Disposition::Committed));
    assert_eq!(disposition(&log, &b.id), Disposition::Superseded);
    // The incumbent gets no new transition.
    assert_eq!(log.mem.transitions(&a.id).len(), 1);
    // Denied at every valid time.
    assert_eq!(
        resolved(&log.query(at("alice", "city", None, Some(0)))).0,
        &json!("paris")
    );
    // As of before the verdict the line was contested.
    assert_eq!(
        contested(&log.query(at("alice", "city", Some(1), None))).1,
        vec![handle(&b)]
    );
}

#[test]
fn unknown_leaves_both_contested_and_uses_up_the_handle() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&user("alice", "city", json!("london")).json());
    let h = handle(&b);
    let fx = log.verdict(&h, Verdict::Unknown).unwrap();
    assert!(fx.bounds.is_empty());
    assert_eq!(disposition(&log, &a.id), Disposition::Contested);
    assert_eq!(disposition(&log, &b.id), Disposition::Contested);
    let (vals, pending) = contested(&log.belief("alice", "city"));
    assert_eq!(sorted(vals), vec![json!("london"), json!("paris")]);
    assert!(pending.is_empty(), "the request is closed: {pending:?}");
    match log.verdict(&h, Verdict::Affirm) {
        Err(AdjudicateError::AlreadyResolved { verdict, seq, .. }) => {
            assert_eq!((verdict.as_str(), seq), ("unknown", 3));
        }
        other => panic!("{other:?}"),
    }
    // New evidence opens a new request, against one of the contested claims (neither is
    // committed: the first in retrieval order, the latest). Affirming it settles the line:
    // every live claim of another value is superseded, the other contested one included, so
    // no claim is left contested with nothing pending (issue 15: it used to stay contested).
    let c = log.ok(&ext("alice", "city", json!("berlin")).json());
    assert_eq!(c.disposition, Disposition::QueuedForAdjudication);
    assert_eq!(c.conflicts_with, vec![b.id, a.id]);
    assert_eq!(c.adjudication.as_ref().unwrap().incumbent, b.id);
    let fx = log.verdict(&handle(&c), Verdict::Affirm).unwrap();
    assert_eq!(disposition(&log, &b.id), Disposition::Superseded);
    assert_eq!(disposition(&log, &a.id), Disposition::Superseded);
    assert_eq!(fx.bounds.len(), 2, "{fx:?}");
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("berlin"));
}

/// Issue 15, several challengers: affirming B (v2) also commits its sibling C (v2) as
/// agreeing; affirming D (v3) later must supersede C too, or the line ends contested "v3" |
/// "v2" with nothing pending and a step waiting on it waits forever.
#[test]
fn a_later_affirm_supersedes_committed_siblings_of_another_value() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&ext("alice", "city", json!("london")).json());
    let c = log.ok(&ext("alice", "city", json!("london")).json());
    let fx = log.verdict(&handle(&b), Verdict::Affirm).unwrap();
    assert_eq!(fx.agreed, vec![handle(&c)]);
    assert_eq!(disposition(&log, &c.id), Disposition::Committed);
    assert_eq!(disposition(&log, &a.id), Disposition::Superseded);
    let d = log.ok(&ext("alice", "city", json!("rome")).json());
    assert_eq!(d.disposition, Disposition::QueuedForAdjudication);
    log.verdict(&handle(&d), Verdict::Affirm).unwrap();
    assert_eq!(disposition(&log, &b.id), Disposition::Superseded);
    assert_eq!(disposition(&log, &c.id), Disposition::Superseded);
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("rome"));
    assert!(log.mem.pending_on("alice", "city", u64::MAX).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Refusals.

#[test]
fn refused_verdicts_are_distinct_and_write_nothing() {
    let mut log = Log::oracle();
    log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&user("alice", "city", json!("london")).json());
    let h = handle(&b);
    let before = (log.mem.clone(), log.records.len());

    assert_eq!(
        log.verdict("adj-99", Verdict::Affirm),
        Err(AdjudicateError::UnknownHandle {
            handle: "adj-99".into()
        })
    );
    for given in [
        Provenance::UserAsserted,
        Provenance::ModelDerived,
        Provenance::RecallReentry,
    ] {
        assert_eq!(
            log.verdict_with(&h, Verdict::Affirm, given, "hearsay"),
            Err(AdjudicateError::Evidence { given })
        );
    }
    assert_eq!((log.mem.clone(), log.records.len()), before);

    let fx = log
        .verdict_with(
            &h,
            Verdict::Deny,
            Provenance::ExternalFirstHand,
            "called them",
        )
        .unwrap();
    let after = (log.mem.clone(), log.records.len());
    for v in [Verdict::Affirm, Verdict::Deny, Verdict::Unknown] {
        match log.verdict(&h, v) {
            Err(AdjudicateError::AlreadyResolved {
                handle,
                seq,
                verdict,
                original,
            }) => {
                assert_eq!(
                    (handle.as_str(), seq, verdict.as_str()),
                    ("adj-2", 3, "deny")
                );
                assert_eq!(original["verdict"], json!("deny"));
                assert_eq!(original["evidence"], json!("external_first_hand"));
                assert_eq!(original["note"], json!("called them"));
                assert_eq!(original["effects"], fx.to_value());
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((log.mem.clone(), log.records.len()), after);
}

#[test]
fn a_verdict_at_or_after_expiry_is_refused() {
    let mut log = Log::with_expiry(3);
    log.tick(4);
    log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&user("alice", "city", json!("london")).json());
    assert_eq!(b.adjudication.as_ref().unwrap().expires_at, Some(7));
    let h = handle(&b);

    // One tick before expiry the verdict is taken.
    let mut early = log.clone();
    early.tick(2);
    assert!(early.verdict(&h, Verdict::Affirm).is_ok());

    // At the expiry tick (and after) it is refused, not swept yet.
    for later in [3, 5] {
        let mut late = log.clone();
        late.tick(later);
        let records = late.records.len();
        assert_eq!(
            late.verdict(&h, Verdict::Affirm),
            Err(AdjudicateError::Expired {
                handle: h.clone(),
                expires_at: 7,
                swept_at: None
            })
        );
        assert_eq!(late.records.len(), records);
        // The request stays pending until a sweep records its expiry.
        assert_eq!(
            late.mem.request_by_handle(&h).unwrap().status,
            RequestStatus::Pending
        );
    }
}

#[test]
fn a_sweep_contests_expired_requests_once() {
    let mut log = Log::with_expiry(2);
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&user("alice", "city", json!("london")).json());
    let c = log.ok(&user("bob", "city", json!("rome")).json());
    log.tick(1);
    let d = log.ok(&user("bob", "city", json!("milan")).json());
    assert!(log.sweep().is_empty(), "nothing has expired at tick 1");
    let records = log.records.len();

    log.tick(1);
    let expired = log.sweep();
    assert_eq!(
        expired,
        vec![Expired {
            handle: handle(&b),
            challenger: b.id,
            incumbent: a.id,
            expires_at: 2,
            expires_ms: None,
        }]
    );
    assert_eq!(log.records.len(), records + 1);
    let sweep_seq = log.seq;
    assert_eq!(disposition(&log, &a.id), Disposition::Contested);
    assert_eq!(disposition(&log, &b.id), Disposition::Contested);
    let (vals, pending) = contested(&log.belief("alice", "city"));
    assert_eq!(sorted(vals), vec![json!("london"), json!("paris")]);
    assert!(pending.is_empty());
    assert_eq!(
        log.mem.request_by_handle(&handle(&b)).unwrap().status,
        RequestStatus::Expired {
            seq: sweep_seq,
            time: 2,
            now: 2
        }
    );
    // bob's request expires a tick later and is still open.
    assert_eq!(contested(&log.belief("bob", "city")).1, vec![handle(&d)]);
    assert_eq!(disposition(&log, &c.id), Disposition::Committed);

    // A second sweep finds nothing and records nothing.
    assert!(log.sweep().is_empty());
    assert_eq!(log.records.len(), records + 1);
    // A verdict on the swept handle names the sweep.
    assert_eq!(
        log.verdict(&handle(&b), Verdict::Affirm),
        Err(AdjudicateError::Expired {
            handle: handle(&b),
            expires_at: 2,
            swept_at: Some(sweep_seq)
        })
    );

    log.tick(5);
    let later = log.sweep();
    assert_eq!(
        later.iter().map(|x| x.handle.clone()).collect::<Vec<_>>(),
        vec![handle(&d)]
    );
    assert!(log.sweep().is_empty());
    // As of before the first sweep, alice's line still had its request pending.
    assert_eq!(
        contested(&log.query(at("alice", "city", Some(1), None))).1,
        vec![handle(&b)]
    );
}

#[test]
fn without_expiry_requests_wait_indefinitely() {
    let mut log = Log::oracle();
    log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&user("alice", "city", json!("london")).json());
    log.tick(1_000_000);
    assert!(log.sweep().is_empty());
    assert_eq!(contested(&log.belief("alice", "city")).1, vec![handle(&b)]);
    assert!(log.verdict(&handle(&b), Verdict::Deny).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Without an oracle.

#[test]
fn without_an_oracle_conflicts_are_contested_and_the_incumbent_stays_committed() {
    let mut log = Log::no_oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&ext("alice", "city", json!("london")).json());
    assert_eq!(b.disposition, Disposition::Contested);
    assert!(
        b.reason.ends_with("no oracle is configured"),
        "{}",
        b.reason
    );
    assert_eq!(b.adjudication, None);
    assert_eq!(b.conflicts_with, vec![a.id]);
    assert_eq!(disposition(&log, &a.id), Disposition::Committed);
    assert_eq!(log.mem.requests().count(), 0);

    let (vals, pending) = contested(&log.belief("alice", "city"));
    assert_eq!(sorted(vals), vec![json!("london"), json!("paris")]);
    assert!(pending.is_empty());
    // Both alternatives keep their support.
    let Belief::Contested { alternatives, .. } = log.belief("alice", "city") else {
        unreachable!()
    };
    let claims: Vec<ClaimId> = alternatives
        .iter()
        .flat_map(|a| a.support.iter().map(|s| s.claim))
        .collect();
    assert_eq!(sorted_ids(claims), sorted_ids(vec![a.id, b.id]));

    // Agreeing with the incumbent contradicts the contested claim: contested too.
    let c = log.ok(&user("alice", "city", json!("paris")).json());
    assert_eq!(c.disposition, Disposition::Contested);
    assert_eq!(c.conflicts_with, vec![b.id]);
    assert!(log.sweep().is_empty());
}

fn sorted_ids(mut v: Vec<ClaimId>) -> Vec<ClaimId> {
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// As-of queries.

#[test]
fn as_of_queries_see_the_belief_of_their_time() {
    let mut log = Log::oracle();
    log.tick(1);
    log.ok(&user("alice", "city", json!("paris")).json()); // t1
    log.tick(2);
    let b = log.ok(&user("alice", "city", json!("london")).json()); // t3
    log.tick(2);
    log.verdict(&handle(&b), Verdict::Affirm).unwrap(); // t5
    log.tick(2);
    let c = log.ok(&user("alice", "city", json!("berlin")).json()); // t7
    assert_eq!(c.adjudication.as_ref().unwrap().incumbent, b.id);
    log.tick(2);
    log.verdict(&handle(&c), Verdict::Deny).unwrap(); // t9

    let status = |t: u64| {
        let b = log.query(at("alice", "city", Some(t), None));
        (b.status(), values(&b))
    };
    assert_eq!(status(0), ("no_belief", vec![]));
    for t in [1, 2] {
        assert_eq!(status(t), ("resolved", vec![json!("paris")]));
    }
    for t in [3, 4] {
        let (s, v) = status(t);
        assert_eq!(
            (s, sorted(v)),
            ("contested", vec![json!("london"), json!("paris")])
        );
    }
    for t in [5, 6, 9, 100] {
        assert_eq!(status(t), ("resolved", vec![json!("london")]));
    }
    for t in [7, 8] {
        let (s, v) = status(t);
        assert_eq!(
            (s, sorted(v)),
            ("contested", vec![json!("berlin"), json!("london")])
        );
        assert_eq!(
            contested(&log.query(at("alice", "city", Some(t), None))).1,
            vec![handle(&c)]
        );
    }
    // Dispositions have a history too.
    assert_eq!(log.mem.disposition(&c.id, 6), None);
    assert_eq!(
        log.mem.disposition(&c.id, 8),
        Some(Disposition::QueuedForAdjudication)
    );
    assert_eq!(log.mem.disposition(&c.id, 9), Some(Disposition::Superseded));
}

// ---------------------------------------------------------------------------------------------
// Recall re-entries.

#[test]
fn recall_reentries_corroborate_and_never_duplicate() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    log.tick(1);
    let r1 = log.ok(&recall("alice", "city", json!("paris"), a.id).json());
    assert_eq!(r1.disposition, Disposition::Corroborating);
    assert_eq!(r1.corroborates, Some(a.id));
    log.tick(1);
    let r2 = log.ok(&recall("alice", "city", json!("paris"), a.id).json());
    assert_ne!(r1.id, r2.id, "the same claim recorded twice is two records");

    let now = log.belief("alice", "city");
    let (value, support) = resolved(&now);
    assert_eq!(value, &json!("paris"));
    assert_eq!(
        support.len(),
        1,
        "re-entries are not second claims: {support:?}"
    );
    assert_eq!((support[0].claim, support[0].corroborations), (a.id, 2));
    let then = log.query(at("alice", "city", Some(1), None));
    assert_eq!(resolved(&then).1[0].corroborations, 1);
    assert_eq!(log.mem.corroborations(&a.id, u64::MAX), 2);

    // A recall joins a contested line without taking a side or opening a request.
    let b = log.ok(&user("alice", "city", json!("london")).json());
    let r3 = log.ok(&recall("alice", "city", json!("london"), b.id).json());
    assert_eq!(r3.disposition, Disposition::Corroborating);
    assert_eq!(r3.adjudication, None);
    let Belief::Contested { alternatives, .. } = log.belief("alice", "city") else {
        panic!("contested")
    };
    assert_eq!(alternatives.len(), 2);
    assert!(alternatives.iter().all(|a| a.support.len() == 1));

    // A recall that does not repeat its source is refused, and records no claim.
    let claims = log.mem.len();
    let refused = [
        recall("alice", "city", json!("rome"), a.id),
        recall("bob", "city", json!("paris"), a.id),
        recall("alice", "employer", json!("paris"), a.id),
        claim("alice", "city", json!("paris"), Provenance::RecallReentry),
        claim("alice", "city", json!("paris"), Provenance::RecallReentry)
            .derived_from(&[a.id, b.id]),
    ];
    for c in refused {
        assert!(
            matches!(log.assert(&c.json()), Err(MemoryError::Recall(_))),
            "{c:?}"
        );
    }
    let unknown = ClaimId::from_hex(&"ab".repeat(32)).unwrap();
    assert_eq!(
        log.assert(&recall("alice", "city", json!("paris"), unknown).json()),
        Err(MemoryError::UnknownClaim(unknown))
    );
    assert_eq!(log.mem.len(), claims);
    assert_eq!(log.mem.corroborations(&a.id, u64::MAX), 2);
}

// ---------------------------------------------------------------------------------------------
// Valid time.

#[test]
fn confidently_incoherent_windows_are_quarantined() {
    let mut log = Log::oracle();
    log.tick(5);
    let reversed = log.ok(&user("carol", "city", json!("rome"))
        .valid(4, Some(2), 80)
        .json());
    let empty = log.ok(&user("carol", "city", json!("rome"))
        .valid(3, Some(3), 100)
        .json());
    // Confidence exactly at the threshold counts as confident.
    let future = log.ok(&user("carol", "city", json!("oslo"))
        .valid(9, None, 50)
        .json());
    for q in [&reversed, &empty, &future] {
        assert_eq!(q.disposition, Disposition::Quarantined, "{q:?}");
        assert_eq!(q.adjudication, None);
    }
    assert!(
        reversed.reason.contains("ends before it starts"),
        "{}",
        reversed.reason
    );
    assert!(
        future
            .reason
            .contains("starts at tick 9, after the current tick 5"),
        "{}",
        future.reason
    );
    assert_eq!(log.belief("carol", "city"), Belief::NoBelief);
    // Still nothing once the clock passes the window's start: quarantine is final.
    log.tick(10);
    assert_eq!(
        log.query(at("carol", "city", None, Some(10))),
        Belief::NoBelief
    );
    assert_eq!(disposition(&log, &future.id), Disposition::Quarantined);

    // Quarantined claims never conflict with a real one.
    let real = log.ok(&user("carol", "city", json!("paris")).json());
    assert_eq!(real.disposition, Disposition::Committed);
    let now = log.belief("carol", "city");
    let (value, support) = resolved(&now);
    assert_eq!(value, &json!("paris"));
    assert_eq!(support.len(), 1);
}

#[test]
fn untrusted_windows_make_the_belief_timing_uncertain() {
    let mut log = Log::oracle();
    log.tick(5);
    // Incoherent but given with low confidence: merely untrusted.
    let low = log.ok(&user("dave", "city", json!("oslo"))
        .valid(9, None, 30)
        .json());
    assert_eq!(low.disposition, Disposition::Committed);
    let b = log.belief("dave", "city");
    assert_eq!(b.status(), "timing_uncertain");
    assert_eq!(values(&b), vec![json!("oslo")]);

    // A trusted claim of another value: still uncertain, both alternatives shown.
    let sure = log.ok(&user("dave", "city", json!("bergen"))
        .valid(0, None, 90)
        .json());
    assert_eq!(
        sure.disposition,
        Disposition::QueuedForAdjudication,
        "an untrusted window overlaps everything"
    );
    let b = log.belief("dave", "city");
    assert_eq!(b.status(), "timing_uncertain");
    assert_eq!(sorted(values(&b)), vec![json!("bergen"), json!("oslo")]);

    // An uncertain claim of the same value as the candidates does not disturb the belief.
    let mut log = Log::oracle();
    log.tick(5);
    log.ok(&user("erin", "city", json!("lima"))
        .valid(0, None, 90)
        .json());
    log.ok(&user("erin", "city", json!("lima"))
        .valid(2, Some(1), 10)
        .json());
    assert_eq!(resolved(&log.belief("erin", "city")).0, &json!("lima"));
}

#[test]
fn a_clean_succession_of_trusted_windows_commits_cheaply() {
    let mut log = Log::oracle();
    log.tick(10);
    let a = log.ok(&user("alice", "city", json!("paris"))
        .valid(0, Some(5), 90)
        .json());
    let b = log.ok(&user("alice", "city", json!("london"))
        .valid(5, None, 90)
        .json());
    assert_eq!(b.disposition, Disposition::Committed);
    assert_eq!(b.reason, "no live external claim contradicts it");
    assert_eq!(
        (b.adjudication.clone(), b.conflicts_with.clone()),
        (None, vec![])
    );
    assert_eq!(log.mem.requests().count(), 0);
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("london"));
    assert_eq!(
        resolved(&log.query(at("alice", "city", None, Some(4)))).0,
        &json!("paris")
    );
    assert_eq!(
        resolved(&log.query(at("alice", "city", None, Some(5)))).0,
        &json!("london")
    );

    // An overlapping window contradicts only the claim it overlaps.
    let c = log.ok(&user("alice", "city", json!("berlin"))
        .valid(8, None, 90)
        .json());
    assert_eq!(c.disposition, Disposition::QueuedForAdjudication);
    assert_eq!(c.conflicts_with, vec![b.id]);
    // An untrusted window overlaps everything.
    let d = log.ok(&user("alice", "city", json!("rome"))
        .valid(1, Some(2), 30)
        .json());
    assert_eq!(d.disposition, Disposition::QueuedForAdjudication);
    assert_eq!(
        sorted_ids(d.conflicts_with.clone()),
        sorted_ids(vec![a.id, b.id, c.id])
    );
    // So does a claim without a window.
    let e = log.ok(&user("alice", "city", json!("nice")).json());
    assert_eq!(e.conflicts_with.len(), 4);
}

// ---------------------------------------------------------------------------------------------
// Provenance.

#[test]
fn model_derived_claims_never_overturn_external_ones() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "employer", json!("acme")).json());
    for crit in ["low", "critical"] {
        let m = log.ok(&model("alice", "employer", json!("globex"))
            .criticality(crit)
            .json());
        assert_eq!(m.disposition, Disposition::Inferred);
        assert_eq!(
            (m.adjudication.clone(), m.conflicts_with.clone()),
            (None, vec![])
        );
    }
    let now = log.belief("alice", "employer");
    let (value, support) = resolved(&now);
    assert_eq!(value, &json!("acme"));
    assert_eq!(
        support.iter().map(|s| s.claim).collect::<Vec<_>>(),
        vec![a.id]
    );
    assert_eq!(log.mem.requests().count(), 0);
}

#[test]
fn model_derived_claims_form_a_belief_where_no_external_claim_speaks() {
    let mut log = Log::oracle();
    let m1 = log.ok(&model("bob", "employer", json!("initech")).json());
    let b = log.belief("bob", "employer");
    let (value, support) = resolved(&b);
    assert_eq!(value, &json!("initech"));
    assert_eq!(support[0].claim, m1.id);
    assert_eq!(support[0].provenance, Provenance::ModelDerived);
    assert_eq!(support[0].disposition, Some(Disposition::Inferred));

    // Two models disagreeing: contested, nothing to adjudicate.
    log.ok(&model("bob", "employer", json!("hooli")).json());
    let (vals, pending) = contested(&log.belief("bob", "employer"));
    assert_eq!(sorted(vals), vec![json!("hooli"), json!("initech")]);
    assert!(pending.is_empty());

    // The first external claim takes the line without a conflict.
    let e = log.ok(&user("bob", "employer", json!("initrode")).json());
    assert_eq!(e.disposition, Disposition::Committed);
    assert_eq!(
        resolved(&log.belief("bob", "employer")).0,
        &json!("initrode")
    );

    // An external claim with an untrusted window still silences the models.
    let mut log = Log::oracle();
    log.ok(&model("carol", "employer", json!("x")).json());
    log.ok(&user("carol", "employer", json!("y"))
        .valid(0, None, 20)
        .json());
    let b = log.belief("carol", "employer");
    assert_eq!(
        (b.status(), values(&b)),
        ("timing_uncertain", vec![json!("y")])
    );
}

// ---------------------------------------------------------------------------------------------
// Several challengers.

#[test]
fn affirming_one_challenger_repoints_or_closes_the_others() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&user("alice", "city", json!("london")).json());
    let c = log.ok(&user("alice", "city", json!("berlin")).json());
    let d = log.ok(&ext("alice", "city", json!("london")).json());
    for x in [&b, &c, &d] {
        assert_eq!(x.adjudication.as_ref().unwrap().incumbent, a.id, "{x:?}");
    }
    let (vals, pending) = contested(&log.belief("alice", "city"));
    assert_eq!(vals.len(), 3);
    assert_eq!(pending, vec!["adj-2", "adj-3", "adj-4"]);

    let fx = log.verdict("adj-2", Verdict::Affirm).unwrap();
    assert_eq!(
        fx.repointed,
        vec![Repoint {
            handle: "adj-3".into(),
            incumbent: b.id
        }]
    );
    assert_eq!(fx.agreed, vec!["adj-4"]);
    assert_eq!(disposition(&log, &d.id), Disposition::Committed);
    assert_eq!(disposition(&log, &a.id), Disposition::Superseded);
    assert_eq!(
        log.mem.request_by_handle("adj-3").unwrap().incumbent(),
        b.id
    );
    match &log.mem.request_by_handle("adj-4").unwrap().status {
        RequestStatus::Resolved { by, .. } => assert_eq!(by.as_deref(), Some("adj-2")),
        other => panic!("{other:?}"),
    }
    match log.verdict("adj-4", Verdict::Deny) {
        Err(AdjudicateError::AlreadyResolved { verdict, .. }) => {
            assert_eq!(verdict, "closed by the verdict on adj-2 (affirm)")
        }
        other => panic!("{other:?}"),
    }
    let (vals, pending) = contested(&log.belief("alice", "city"));
    assert_eq!(sorted(vals), vec![json!("berlin"), json!("london")]);
    assert_eq!(pending, vec!["adj-3"]);

    // adj-3 is now judged against the affirmed claim.
    let fx = log.verdict("adj-3", Verdict::Deny).unwrap();
    assert_eq!((fx.challenger, fx.incumbent), (c.id, b.id));
    let now = log.belief("alice", "city");
    let (value, support) = resolved(&now);
    assert_eq!(value, &json!("london"));
    // Support in retrieval order: same criticality and tick, latest event first.
    assert_eq!(
        support.iter().map(|s| s.claim).collect::<Vec<_>>(),
        vec![d.id, b.id]
    );
    assert!(
        log.mem
            .requests()
            .all(|r| r.status != RequestStatus::Pending)
    );
}

#[test]
fn denying_one_challenger_leaves_the_others_alone() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    log.ok(&user("alice", "city", json!("london")).json());
    let c = log.ok(&user("alice", "city", json!("berlin")).json());
    let fx = log.verdict("adj-2", Verdict::Deny).unwrap();
    assert!(fx.repointed.is_empty() && fx.agreed.is_empty());
    assert_eq!(
        log.mem.request_by_handle("adj-3").unwrap().incumbent(),
        a.id
    );
    assert_eq!(disposition(&log, &c.id), Disposition::QueuedForAdjudication);
    let (vals, pending) = contested(&log.belief("alice", "city"));
    assert_eq!(sorted(vals), vec![json!("berlin"), json!("paris")]);
    assert_eq!(pending, vec!["adj-3"]);
    log.verdict("adj-3", Verdict::Affirm).unwrap();
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("berlin"));
}

#[test]
fn denying_a_claim_closes_a_request_that_would_pair_equal_values_as_agreeing() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&user("alice", "city", json!("london")).json());
    // Agrees with the incumbent, so it contradicts only the queued challenger.
    let c = log.ok(&ext("alice", "city", json!("paris")).json());
    assert_eq!(c.conflicts_with, vec![b.id]);
    assert_eq!(c.adjudication.as_ref().unwrap().incumbent, b.id);
    let fx = log.verdict(&handle(&b), Verdict::Deny).unwrap();
    // Re-pointed at `a` it would read "paris" vs "paris": a request never pairs equal values,
    // so it is closed as agreeing and `c` is committed (issue 15).
    assert!(fx.repointed.is_empty(), "{fx:?}");
    assert_eq!(fx.agreed, vec![handle(&c)]);
    assert_eq!(disposition(&log, &c.id), Disposition::Committed);
    assert_eq!(disposition(&log, &a.id), Disposition::Committed);
    assert!(log.mem.pending_on("alice", "city", u64::MAX).is_empty());
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("paris"));
}

#[test]
fn affirming_against_a_queued_challenger_withdraws_that_challengers_own_request() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let c = log.ok(&user("alice", "city", json!("london")).json());
    // Agrees with the incumbent, so its request is against the queued challenger `c`.
    let d = log.ok(&ext("alice", "city", json!("paris")).json());
    assert_eq!(d.adjudication.as_ref().unwrap().incumbent, c.id);
    let fx = log.verdict(&handle(&d), Verdict::Affirm).unwrap();
    // `c` lost here, so its own request against `a` cannot be won any more: it is closed.
    assert_eq!(fx.withdrawn, vec![handle(&c)]);
    assert_eq!(disposition(&log, &c.id), Disposition::Superseded);
    assert_eq!(disposition(&log, &a.id), Disposition::Committed);
    match log.verdict(&handle(&c), Verdict::Affirm) {
        Err(AdjudicateError::AlreadyResolved { verdict, .. }) => {
            assert_eq!(
                verdict,
                format!("closed by the verdict on {} (deny)", handle(&d))
            )
        }
        other => panic!("{other:?}"),
    }
    let now = log.belief("alice", "city");
    assert_eq!(resolved(&now).0, &json!("paris"));
    assert!(log.mem.pending_on("alice", "city", u64::MAX).is_empty());
}

#[test]
fn the_incumbent_is_the_committed_claim_before_contested_ones() {
    let mut log = Log::no_oracle();
    let a = log.ok(&user("alice", "city", json!("paris"))
        .criticality("low")
        .json());
    // Contested, more critical and more recent: first in retrieval order.
    let b = log.ok(&user("alice", "city", json!("london"))
        .criticality("critical")
        .json());
    log.settings.oracle = true;
    let c = log.ok(&user("alice", "city", json!("berlin")).json());
    assert_eq!(c.conflicts_with, vec![b.id, a.id], "retrieval order");
    let req = c.adjudication.unwrap();
    assert_eq!(req.incumbent, a.id);
    // The request is as critical as the more critical of its two claims.
    assert_eq!(req.criticality, oracle_memory::Criticality::Medium);
}

// ---------------------------------------------------------------------------------------------
// Cardinality, input checks, handles.

#[test]
fn set_valued_lines_hold_every_value() {
    let mut log = Log::oracle();
    let t = |v: &str| user("alice", "tags", json!(v)).set_valued().json();
    for v in ["tan", "ash", "red"] {
        let a = log.ok(&t(v));
        assert_eq!(a.disposition, Disposition::Committed);
        assert_eq!(a.reason, "set-valued line: the value joins the set");
    }
    let again = log.ok(&t("ash"));
    let b = log.belief("alice", "tags");
    let (value, support) = resolved(&b);
    assert_eq!(value, &json!(["ash", "red", "tan"]));
    assert_eq!(support.len(), 4);
    assert_eq!(support[0].claim, again.id);
    // A model's value does not join a set external sources speak for.
    log.ok(&model("alice", "tags", json!("zed")).set_valued().json());
    assert_eq!(
        resolved(&log.belief("alice", "tags")).0,
        &json!(["ash", "red", "tan"])
    );
    // A value with an ended window leaves the set when its window ends.
    log.tick(10);
    log.ok(&user("alice", "tags", json!("old"))
        .set_valued()
        .valid(0, Some(5), 90)
        .json());
    assert_eq!(
        resolved(&log.belief("alice", "tags")).0,
        &json!(["ash", "red", "tan"])
    );
    assert_eq!(
        resolved(&log.query(at("alice", "tags", None, Some(3)))).0,
        &json!(["ash", "old", "red", "tan"])
    );
    assert_eq!(log.mem.requests().count(), 0);
}

#[test]
fn the_first_claim_fixes_the_cardinality_of_its_line() {
    let mut log = Log::oracle();
    log.ok(&user("alice", "tags", json!("a")).set_valued().json());
    log.ok(&user("alice", "city", json!("paris")).json());
    let claims = log.mem.len();
    assert_eq!(
        log.assert(&user("alice", "tags", json!("b")).json()),
        Err(MemoryError::Cardinality {
            subject: "alice".into(),
            predicate: "tags".into(),
            line: "set_valued",
            given: "functional"
        })
    );
    assert_eq!(
        log.assert(&user("alice", "city", json!("rome")).set_valued().json()),
        Err(MemoryError::Cardinality {
            subject: "alice".into(),
            predicate: "city".into(),
            line: "functional",
            given: "set_valued"
        })
    );
    // Model-derived and recalled claims are held to it too.
    assert!(
        log.assert(&model("alice", "tags", json!("c")).json())
            .is_err()
    );
    assert_eq!(log.mem.len(), claims);
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("paris"));
}

#[test]
fn floats_and_malformed_claims_are_refused() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let input = |c: Value| match Log::oracle().assert(&c) {
        Err(MemoryError::Input(m)) => m,
        other => panic!("{c}: {other:?}"),
    };
    assert!(input(user("alice", "height", json!(1.5)).json()).contains("float"));
    assert!(input(user("alice", "h", json!([1, {"x": 0.5}])).json()).contains("float"));
    assert!(input(user("", "city", json!(1)).json()).contains("subject is empty"));
    assert!(input(user("alice", &"p".repeat(257), json!(1)).json()).contains("longer than 256"));
    assert!(
        input(user("alice", "city", json!(1)).valid(0, None, 101).json()).contains("more than 100")
    );
    let mut unknown_field = user("alice", "city", json!(1)).json();
    unknown_field["colour"] = json!("red");
    assert!(input(unknown_field).contains("colour"));
    let mut unknown_provenance = user("alice", "city", json!(1)).json();
    unknown_provenance["provenance"] = json!("rumour");
    assert!(input(unknown_provenance).contains("rumour"));
    // 256 bytes is fine.
    Log::oracle().ok(&user(&"s".repeat(256), "city", json!(1)).json());
    // derived_from: at most 64 ids, each in memory.
    let many = vec![a.id; 65];
    assert!(matches!(
        log.assert(&model("alice", "mood", json!("calm")).derived_from(&many).json()),
        Err(MemoryError::Input(m)) if m.contains("more than 64")
    ));
    let ghost = ClaimId::from_hex(&"cd".repeat(32)).unwrap();
    assert_eq!(
        log.assert(
            &model("alice", "mood", json!("calm"))
                .derived_from(&[ghost])
                .json()
        ),
        Err(MemoryError::UnknownClaim(ghost))
    );
    let ok = log.ok(&model("alice", "mood", json!("calm"))
        .derived_from(&[a.id; 64])
        .json());
    assert_eq!(ok.claim.derived_from.len(), 64);
    // Integers of every size are fine.
    log.ok(&user("alice", "n", json!(u64::MAX)).json());
    log.ok(&user("alice", "m", json!(i64::MIN)).json());
}

#[test]
fn handles_and_ids_are_minted_from_the_recording_seq() {
    let run = || {
        let mut log = Log::oracle();
        log.ok(&user("alice", "city", json!("paris")).json());
        // A refused call still takes an event.
        assert!(
            log.assert(&user("alice", "city", json!(0.5)).json())
                .is_err()
        );
        let b = log.ok(&user("alice", "city", json!("london")).json());
        (log, b)
    };
    let (log1, b1) = run();
    let (log2, b2) = run();
    assert_eq!(handle(&b1), "adj-3");
    assert_eq!(handle(&b1), handle_at(3));
    assert_eq!(b1, b2, "the same run mints the same ids and handles");
    assert_eq!(log1.mem, log2.mem);
    let claim: Claim =
        serde_json::from_value(user("alice", "city", json!("london")).json()).unwrap();
    assert_eq!(b1.id, claim.id_at(3).unwrap());
    assert_ne!(claim.id_at(3).unwrap(), claim.id_at(4).unwrap());

    // The projection refuses a record whose id does not match its content and position.
    let output = serde_json::to_value(&b1).unwrap();
    let payload = Payload::ToolReturned(ToolReturned {
        step: "step4".into(),
        tool: tools::ASSERT.into(),
        attempt: 1,
        output,
    });
    let mut m = log1.mem.clone();
    let err = m.apply(4, 0, &payload).unwrap_err();
    assert_eq!(err.seq, 4);
    assert!(err.reason.contains("does not match"), "{}", err.reason);
}

#[test]
fn the_gate_is_pure() {
    let mut log = Log::oracle();
    log.ok(&user("alice", "city", json!("paris")).json());
    let before = log.mem.clone();
    let claim: Claim = serde_json::from_value(ext("alice", "city", json!("rome")).json()).unwrap();
    let origin = Origin {
        seq: 7,
        time: 3,
        step: "s".into(),
        tool: tools::ASSERT.into(),
    };
    let a = gate::gate(&log.mem, claim.clone(), &origin, &log.settings).unwrap();
    let again = gate::gate(&log.mem, claim, &origin, &log.settings).unwrap();
    assert_eq!(a, again);
    assert_eq!(a.disposition, Disposition::QueuedForAdjudication);
    assert_eq!(handle(&a), "adj-7");
    assert_eq!(log.mem, before);
}

// ---------------------------------------------------------------------------------------------
// Order, merge and waiting on a belief.

#[test]
fn records_applied_out_of_order_give_the_same_memory() {
    let mut log = Log::with_expiry(5);
    log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&user("alice", "city", json!("london")).json());
    let c = log.ok(&user("alice", "city", json!("berlin")).json());
    let d = log.ok(&user("alice", "city", json!("london")).json());
    log.verdict(&handle(&b), Verdict::Affirm).unwrap(); // re-points c, closes d
    log.verdict(&handle(&c), Verdict::Unknown).unwrap();
    let e = log.ok(&user("bob", "city", json!("rome")).json());
    let f = log.ok(&user("bob", "city", json!("milan")).json());
    log.tick(5);
    assert_eq!(log.sweep().len(), 1);
    let reversed = replay(log.records.iter().rev());
    assert_eq!(reversed, log.mem);
    for (s, p) in [("alice", "city"), ("bob", "city")] {
        assert_eq!(
            oracle_memory::belief::query(&reversed, &Query::now(s, p), 50),
            log.belief(s, p)
        );
    }
    // Closed requests stay closed, whichever record came first.
    let (_, pending) = contested(&oracle_memory::belief::query(
        &reversed,
        &Query::now("alice", "city"),
        50,
    ));
    assert!(pending.is_empty());
    assert_eq!(
        reversed.disposition(&d.id, u64::MAX),
        Some(Disposition::Committed)
    );
    assert!(matches!(
        reversed.request_by_handle(&handle(&f)).unwrap().status,
        RequestStatus::Expired { .. }
    ));
    assert_eq!(
        reversed.disposition(&e.id, u64::MAX),
        Some(Disposition::Contested)
    );
}

#[test]
fn a_merge_reveals_conflicts_and_picks_no_winner() {
    let mut one = Log::oracle();
    one.ok(&user("alice", "city", json!("paris")).json());
    one.ok(&user("alice", "employer", json!("acme")).json());
    let mut two = Log::starting_at(Default::default(), 1000, 0);
    two.ok(&user("alice", "city", json!("london")).json());
    two.ok(&user("alice", "employer", json!("acme")).json());
    let merged = one.mem.merge(&two.mem);
    assert_eq!(merged, two.mem.merge(&one.mem));
    let b = oracle_memory::belief::query(&merged, &Query::now("alice", "city"), 50);
    let (vals, pending) = contested(&b);
    assert_eq!(sorted(vals), vec![json!("london"), json!("paris")]);
    assert!(pending.is_empty());
    let agreed = oracle_memory::belief::query(&merged, &Query::now("alice", "employer"), 50);
    assert_eq!(resolved(&agreed).1.len(), 2);
    assert_eq!(
        Memory::revealed_by_merge(&one.mem, &two.mem, &merged, 50),
        vec![("alice".to_owned(), "city".to_owned())]
    );
}

#[test]
fn a_query_requiring_a_resolved_belief_waits_on_a_pending_request() {
    let mut log = Log::oracle();
    log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&user("alice", "city", json!("london")).json());
    let q = json!({"subject": "alice", "predicate": "city", "require": "resolved"});
    assert_eq!(
        tools::query(&log.mem, &q, &log.settings, log.time).unwrap(),
        QueryOutcome::Wait("waits on belief alice/city (queued for adjudication: adj-2)".into())
    );
    log.verdict(&handle(&b), Verdict::Affirm).unwrap();
    match tools::query(&log.mem, &q, &log.settings, log.time).unwrap() {
        QueryOutcome::Answer(v) => {
            assert_eq!(v["status"], json!("resolved"));
            assert_eq!(v["value"], json!("london"));
            assert_eq!(v["support"][0]["seq"], json!(2));
        }
        other => panic!("{other:?}"),
    }
}

/// `memory.history` lists at most `HISTORY_CLAIMS_MAX` claims, in retrieval order, and says how
/// many there are: a line of exactly the limit is listed whole; one more leaves out the last
/// in retrieval order (the oldest), with `total` counting it.
#[test]
fn history_lists_at_most_history_claims_max_and_counts_the_rest() {
    use oracle_memory::tools::HISTORY_CLAIMS_MAX;
    let mut log = Log::oracle();
    let history = |log: &Log| tools::history(&log.mem, &json!({"subject": "alice"})).unwrap();
    for i in 0..=HISTORY_CLAIMS_MAX {
        if i == HISTORY_CLAIMS_MAX {
            let h = history(&log);
            assert_eq!(
                h["claims"].as_array().unwrap().len() as u64,
                HISTORY_CLAIMS_MAX
            );
            assert_eq!(h["total"], HISTORY_CLAIMS_MAX);
        }
        log.tick(1);
        log.assert(
            &user("alice", "tags", json!(format!("t{i}")))
                .set_valued()
                .json(),
        )
        .unwrap();
    }
    let h = history(&log);
    let claims = h["claims"].as_array().unwrap();
    assert_eq!(claims.len() as u64, HISTORY_CLAIMS_MAX);
    assert_eq!(h["total"], HISTORY_CLAIMS_MAX + 1);
    // Latest first: the newest is listed first and the oldest (`t0`) is the one left out.
    let value = |c: &Value| c["value"].clone();
    assert_eq!(value(&claims[0]), json!(format!("t{HISTORY_CLAIMS_MAX}")));
    assert!(
        claims.iter().all(|c| value(c) != json!("t0")),
        "{}",
        claims.len()
    );
}

// ---------------------------------------------------------------------------------------------
// Reinstatement: a superseded claim live again, only by a verdict that names it.

#[test]
fn reinstating_a_denied_challenger_commits_it_and_supersedes_what_it_contradicts() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&ext("alice", "city", json!("london")).json());
    log.verdict(&handle(&b), Verdict::Deny).unwrap();
    assert_eq!(disposition(&log, &b.id), Disposition::Superseded);
    let denied_at = log.time;
    log.tick(1);
    let fx = log.reinstate(&b.id).unwrap();
    assert_eq!(fx.claim, b.id);
    assert_eq!(disposition(&log, &b.id), Disposition::Committed);
    assert_eq!(disposition(&log, &a.id), Disposition::Superseded);
    assert_eq!(
        fx.bounds,
        vec![BoundEffect {
            claim: a.id,
            until: 0
        }]
    );
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("london"));
    // What was believed before the reinstatement does not change: as of the deny, paris.
    let before = log.query(Query {
        subject: "alice".into(),
        predicate: "city".into(),
        as_of: Some(denied_at),
        valid_at: Some(denied_at),
    });
    assert_eq!(resolved(&before).0, &json!("paris"));
    // The transition is recorded and queryable.
    let last = log.mem.transitions(&b.id).pop().unwrap();
    assert_eq!(
        (last.disposition, last.reason.as_str()),
        (Disposition::Committed, "reinstated: new evidence")
    );
    assert_eq!(log.mem.reinstatements(&b.id), vec![(log.time, log.seq)]);
}

#[test]
fn reinstating_a_bounded_incumbent_lifts_its_bound() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris"))
        .valid(0, None, 100)
        .json());
    log.tick(3);
    let b = log.ok(&ext("alice", "city", json!("london"))
        .valid(2, None, 100)
        .json());
    log.verdict(&handle(&b), Verdict::Affirm).unwrap();
    // Paris holds before tick 2 only.
    assert_eq!(log.mem.bound(&a.id, u64::MAX), Some(2));
    log.tick(1);
    log.reinstate(&a.id).unwrap();
    assert_eq!(log.mem.bound(&a.id, u64::MAX), None);
    assert_eq!(disposition(&log, &b.id), Disposition::Superseded);
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("paris"));
}

#[test]
fn reinstatement_settles_the_line_and_closes_requests_like_an_affirm() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&ext("alice", "city", json!("london")).json());
    log.verdict(&handle(&b), Verdict::Affirm).unwrap();
    // Two challengers of london: one says paris again, one rome.
    let c = log.ok(&ext("alice", "city", json!("paris")).json());
    let d = log.ok(&ext("alice", "city", json!("rome")).json());
    log.tick(1);
    let fx = log.reinstate(&a.id).unwrap();
    // London is superseded; the paris request agrees; the rome request now compares against
    // the reinstated claim.
    assert_eq!(disposition(&log, &b.id), Disposition::Superseded);
    assert_eq!(fx.agreed, vec![handle(&c)]);
    assert_eq!(disposition(&log, &c.id), Disposition::Committed);
    assert_eq!(
        fx.repointed,
        vec![Repoint {
            handle: handle(&d),
            incumbent: a.id
        }]
    );
    let pending = log.mem.pending_on("alice", "city", u64::MAX);
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].incumbent(), a.id);
    // The rome request is answered as usual.
    log.verdict(&handle(&d), Verdict::Deny).unwrap();
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("paris"));
}

#[test]
fn reinstatement_is_refused_for_live_uncontested_or_unknown_claims_and_weak_evidence() {
    let mut log = Log::oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let m = log.ok(&model("alice", "town", json!("x")).json());
    // A contested claim can be reinstated too (below), and a committed one a contested claim
    // contradicts; an inferred one cannot.
    let before = (log.mem.clone(), log.records.len());
    // Committed with nothing against it: nothing to reinstate.
    match log.reinstate(&a.id) {
        Err(AdjudicateError::NotReinstatable { disposition, .. }) => {
            assert_eq!(disposition, "committed")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        log.reinstate(&m.id),
        Err(AdjudicateError::NotReinstatable { .. })
    ));
    assert!(matches!(
        log.reinstate(&oracle_core::Hash([7; 32])),
        Err(AdjudicateError::UnknownClaim { .. })
    ));
    let b = log.ok(&ext("alice", "city", json!("london")).json());
    log.verdict(&handle(&b), Verdict::Deny).unwrap();
    let after = (log.mem.clone(), log.records.len());
    assert_eq!(
        log.reinstate_with(&b.id, Provenance::UserAsserted),
        Err(AdjudicateError::Evidence {
            given: Provenance::UserAsserted
        })
    );
    assert_eq!((log.mem.clone(), log.records.len()), after);
    assert_ne!(before.1, after.1);
}

#[test]
fn reinstating_a_contested_claim_is_the_way_out_without_an_oracle() {
    let mut log = Log::no_oracle();
    let a = log.ok(&user("alice", "city", json!("paris")).json());
    let b = log.ok(&ext("alice", "city", json!("london")).json());
    assert_eq!(b.disposition, Disposition::Contested);
    // New evidence from outside only adds to the contest: there is no one to ask.
    let c = log.ok(&ext("alice", "city", json!("paris")).json());
    assert_eq!(c.disposition, Disposition::Contested);
    assert!(matches!(
        log.belief("alice", "city"),
        Belief::Contested { .. }
    ));
    log.tick(1);
    let fx = log.reinstate(&b.id).unwrap();
    assert_eq!(disposition(&log, &b.id), Disposition::Committed);
    for loser in [a.id, c.id] {
        assert_eq!(disposition(&log, &loser), Disposition::Superseded);
        assert!(fx.bounds.iter().any(|x| x.claim == loser));
    }
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("london"));
}

#[test]
fn a_committed_claim_on_a_contested_line_is_upheld_by_naming_it() {
    let mut log = Log::no_oracle();
    let a = log.ok(&ext("alice", "city", json!("paris")).json());
    let b = log.ok(&ext("alice", "city", json!("london")).json());
    assert_eq!(
        (disposition(&log, &a.id), b.disposition),
        (Disposition::Committed, Disposition::Contested)
    );
    log.tick(1);
    let fx = log.reinstate(&a.id).unwrap();
    assert!(fx.dispositions.iter().all(|d| d.claim != a.id));
    assert_eq!(disposition(&log, &b.id), Disposition::Superseded);
    assert_eq!(resolved(&log.belief("alice", "city")).0, &json!("paris"));
    // Once settled, naming it again has nothing to do.
    assert!(matches!(
        log.reinstate(&a.id),
        Err(AdjudicateError::NotReinstatable { .. })
    ));
}

/// Found by a fresh seed of the reference comparison: a deny re-pointed a request onto an equal
/// value and closed it as agreeing, committing its challenger beside a committed claim of
/// another value, with nothing pending. It now compares against that committed claim instead.
#[test]
fn a_deny_never_commits_a_challenger_beside_a_committed_claim_of_another_value() {
    let mut log = Log::oracle();
    let c = log.ok(&user("bob", "city", json!("v0")).json());
    let b = log.ok(&user("bob", "city", json!("v2")).json());
    log.verdict(&handle(&b), Verdict::Unknown).unwrap();
    let d = log.ok(&ext("bob", "city", json!("v0")).criticality("high").json());
    assert_eq!(d.adjudication.as_ref().unwrap().incumbent, b.id);
    let e = log.ok(&user("bob", "city", json!("v2")).json());
    let f = log.ok(&user("bob", "city", json!("v2")).json());
    for x in [&e, &f] {
        assert_eq!(x.adjudication.as_ref().unwrap().incumbent, d.id);
    }
    let g = log.ok(&user("bob", "city", json!("v0"))
        .criticality("medium")
        .json());
    let g_against = g.adjudication.as_ref().unwrap().incumbent;
    assert!([e.id, f.id].contains(&g_against));
    let other = if g_against == e.id { &f } else { &e };
    // Deny the claim g is compared against: g says what d says, so it agrees and commits.
    let loser = if g_against == e.id { &e } else { &f };
    let fx = log.verdict(&handle(loser), Verdict::Deny).unwrap();
    assert_eq!(fx.agreed, vec![handle(&g)]);
    assert_eq!(disposition(&log, &g.id), Disposition::Committed);
    // Deny d: the other v2 request would pair v2 with b (v2): but g (v0) is committed and
    // meets it, so it compares against g, still pending.
    let fx = log.verdict(&handle(&d), Verdict::Deny).unwrap();
    assert_eq!(
        fx.repointed,
        vec![Repoint {
            handle: handle(other),
            incumbent: g.id
        }]
    );
    assert!(fx.agreed.is_empty());
    assert_eq!(
        disposition(&log, &other.id),
        Disposition::QueuedForAdjudication
    );
    let _ = c;
}
