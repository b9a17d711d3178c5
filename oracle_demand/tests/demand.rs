//! Demand analysis: hand-checked dependencies of the fixture runs (fixtures/demand/, one test
//! per source), a hand-computed policy example, and properties over random logs and graphs:
//! the dependencies and the windowed demand equal naive quadratic references, the oracle never
//! faults more than any policy and equals a brute-force optimum on small traces, its faults never
//! grow with the budget, and a budget of every event leaves only the compulsory faults.

use std::collections::{BTreeMap, BTreeSet};

use oracle_core::payload::*;
use oracle_core::{Event, EventKind, Recorder, Value};
use oracle_demand::{Config, DemandTrace, Dependencies, Evaluator, Policy, Source, Sources};
use proptest::prelude::*;
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// Fixture runs

fn fixture(name: &str) -> Vec<Event> {
    let path = format!(
        "{}/../fixtures/demand/{name}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap();
    oracle_core::verify::verify_bytes(&bytes, None).unwrap();
    let mut scratch = Vec::new();
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| oracle_core::record::decode(l, &mut scratch).unwrap())
        .collect()
}

/// Every non-empty D(t) of `events` under `sources`, as (t, D(t)).
fn rows(events: &[Event], sources: Sources) -> Vec<(u64, Vec<u64>)> {
    let d = Dependencies::extract(events, sources).unwrap();
    (0..d.events())
        .filter(|&t| !d.of(t).is_empty())
        .map(|t| (t, d.of(t).to_vec()))
        .collect()
}

fn expect(list: &[(u64, &[u64])]) -> Vec<(u64, Vec<u64>)> {
    list.iter().map(|(t, d)| (*t, d.to_vec())).collect()
}

// fixtures/demand/tools.jsonl (fixtures/plans/demand/tools.plan, then `resume --step confirm`):
//  1 scheduled note (fs.write)   2 allowed   3 called out/note.txt          9 returned
//  4 scheduled remember (kv.set) 5 allowed   6 called kv words=3           10 returned
//  7 scheduled secret (fs.read)  8 denied
// 11 state kv/words
// 15 scheduled again (fs.read)  16 allowed  17 called out/note.txt         21 returned
// 18 scheduled recall (kv.get)  19 allowed  20 called kv words             22 returned
// 25 scheduled bump (kv.set)    26 allowed  27 called kv words=4           30 returned
// 28 scheduled parse #1                     29 called json.parse           31 failed
// 32 state kv/words
// 35 scheduled reread (fs.read) 36 allowed  37 called out/note.txt         43 returned
// 38 scheduled recount (kv.get) 39 allowed  40 called kv words             44 returned
// 41 scheduled parse #2                     42 called json.parse           45 failed
// 49 scheduled confirm                      50 called human.ask
// 52 suspended confirm          53 resumed confirm
// Every other event is a step's state_changed or run_started / run_finished.

#[test]
fn tools_fixture_parents() {
    let e = fixture("tools");
    assert_eq!(e.len(), 56);
    // Format 2 links (docs/FORMAT.md, "Causal links"), checked by hand against the table above:
    // a root step's scheduling on the run's start (0); a call on the outcomes of what it reads
    // (15 `again` reads note's 9) and of its own earlier attempt (41 parse #2: 21 and 31); a
    // verdict on its scheduling, a call on its verdict, an outcome on its call; a round's kv
    // state change on the outcome that wrote (11 on 10); a decision's state changes on what it
    // observed (12-14 on 8, 9, 10; 51 on confirm's question, 50); the suspension on the
    // question (52 on 50); the end on the last outcome of each branch no step reads (secret 8,
    // parse 45, confirm 53).
    let want: &[(u64, &[u64])] = &[
        (1, &[0]),
        (2, &[1]),
        (3, &[2]),
        (4, &[0]),
        (5, &[4]),
        (6, &[5]),
        (7, &[0]),
        (8, &[7]),
        (9, &[3]),
        (10, &[6]),
        (11, &[10]),
        (12, &[8, 9, 10]),
        (13, &[8, 9, 10]),
        (14, &[8, 9, 10]),
        (15, &[9]),
        (16, &[15]),
        (17, &[16]),
        (18, &[10]),
        (19, &[18]),
        (20, &[19]),
        (21, &[17]),
        (22, &[20]),
        (23, &[21, 22]),
        (24, &[21, 22]),
        (25, &[22]),
        (26, &[25]),
        (27, &[26]),
        (28, &[21]),
        (29, &[28]),
        (30, &[27]),
        (31, &[29]),
        (32, &[30]),
        (33, &[30, 31]),
        (34, &[30, 31]),
        (35, &[30]),
        (36, &[35]),
        (37, &[36]),
        (38, &[30]),
        (39, &[38]),
        (40, &[39]),
        (41, &[21, 31]),
        (42, &[41]),
        (43, &[37]),
        (44, &[40]),
        (45, &[42]),
        (46, &[43, 44, 45]),
        (47, &[43, 44, 45]),
        (48, &[43, 44, 45]),
        (49, &[43, 44]),
        (50, &[49]),
        (51, &[50]),
        (52, &[50]),
        (53, &[52]),
        (54, &[53]),
        (55, &[8, 45, 53]),
    ];
    assert_eq!(rows(&e, Sources::only(Source::Parents)), expect(want));
}

#[test]
fn tools_fixture_tools() {
    let e = fixture("tools");
    let want: &[(u64, &[u64])] = &[
        // Capability verdicts (allowed and denied) → their step_scheduled.
        (2, &[1]),
        // Calls → the step_scheduled of the same step and attempt.
        (3, &[1]),
        (5, &[4]),
        (6, &[4]),
        (8, &[7]),
        // Outcomes → their call.
        (9, &[3]),
        (10, &[6]),
        (16, &[15]),
        (17, &[15]),
        (19, &[18]),
        (20, &[18]),
        (21, &[17]),
        (22, &[20]),
        (26, &[25]),
        (27, &[25]),
        (29, &[28]),
        (30, &[27]),
        // parse attempt 1 failed: its call, not attempt 2's.
        (31, &[29]),
        (36, &[35]),
        (37, &[35]),
        (39, &[38]),
        (40, &[38]),
        (42, &[41]),
        (43, &[37]),
        (44, &[40]),
        (45, &[42]),
        (50, &[49]),
        // resumed → suspended.
        (53, &[52]),
    ];
    assert_eq!(rows(&e, Sources::only(Source::Tools)), expect(want));
}

#[test]
fn tools_fixture_state_and_paths() {
    let e = fixture("tools");
    // kv.get of `words` at 20 reads the write at 11; at 40, the later write at 32.
    let want: &[(u64, &[u64])] = &[(20, &[11]), (40, &[32])];
    assert_eq!(rows(&e, Sources::only(Source::State)), expect(want));
    // Both reads of out/note.txt depend on its first touch, the write's call at 3.
    let want: &[(u64, &[u64])] = &[(17, &[3]), (37, &[3])];
    assert_eq!(rows(&e, Sources::only(Source::Paths)), expect(want));
    assert_eq!(rows(&e, Sources::only(Source::Memory)), vec![]);
}

#[test]
fn tools_fixture_all_sources_are_the_union() {
    let e = fixture("tools");
    let d = Dependencies::extract(&e, Sources::ALL).unwrap();
    assert_eq!(d.of(17), [3, 15, 16]);
    assert_eq!(d.of(20), [11, 18, 19]);
    assert_eq!(d.of(37), [3, 35, 36]);
    assert_eq!(d.of(40), [32, 38, 39]);
    assert_eq!(d.edges(), 86);
    assert_eq!(
        d.by_source(),
        [
            (Source::Parents, 75),
            (Source::Tools, 28),
            (Source::State, 2),
            (Source::Memory, 0),
            (Source::Paths, 2)
        ]
    );
    // Demand for horizon 4 at t = 17: D(17..=20) below 17 = {3, 15, 16} ∪ {10} ∪ {18} ∪
    // {11, 18, 19}.
    let trace = DemandTrace::new(&d, 4).unwrap();
    assert_eq!(trace.of(17), [3, 10, 11, 15, 16]);
    // At t = 18: D(18..=21) = {10} ∪ {18} ∪ {11, 18, 19} ∪ {17}, below 18.
    assert_eq!(trace.of(18), [10, 11, 17]);
    // The last event: only its own dependencies count (the ends of the branches).
    assert_eq!(trace.of(55), [8, 45, 53]);
    // D(53..=55) = {52} ∪ {53} ∪ {8, 45, 53}, below 53.
    assert_eq!(trace.of(53), [8, 45, 52]);
}

// fixtures/demand/memory.jsonl (fixtures/plans/demand/memory.plan, then `adjudicate adj-15
// --verdict deny --resume`):
//  1 scheduled on_file   2 called memory.assert   3 returned claim 31c8… (penicillin)
//  5 scheduled recalled  6 called                 7 returned claim a27b…, derived_from 31c8…
//  9 scheduled known    10 called memory.query   11 returned resolved, support seq 3
// 13 scheduled referral 14 called memory.assert  15 returned claim 2559… (none), queued adj-15
// 17 scheduled contested 18 called memory.query  19 returned contested: alternatives with
//                                                   support seq 15 and seq 3
// 21 scheduled settled  22 called memory.query (require resolved)   24 suspended settled
// 25 adjudicated adj-15 (parent 15)  26 resumed settled with the belief: support seq 3
// 28 scheduled history  29 called memory.history 30 returned claims seq 15, 7, 3

#[test]
fn memory_fixture_memory() {
    let e = fixture("memory");
    assert_eq!(e.len(), 33);
    let want: &[(u64, &[u64])] = &[
        (7, &[3]),
        (11, &[3]),
        (19, &[3, 15]),
        (26, &[3]),
        (30, &[3, 7, 15]),
    ];
    assert_eq!(rows(&e, Sources::only(Source::Memory)), expect(want));
}

#[test]
fn memory_fixture_parents_and_tools() {
    let e = fixture("memory");
    // Format 2 links, checked by hand: each step reads the one before it (`after`), each
    // decision observes the previous round's outcome, the belief wait (22, a query with no
    // outcome) is what round 7's decision and the suspension depend on, the verdict names the
    // event that opened its request (25 on 15), and the end names the one branch end (30).
    let want: &[(u64, &[u64])] = &[
        (1, &[0]),
        (2, &[1]),
        (3, &[2]),
        (4, &[3]),
        (5, &[3]),
        (6, &[5]),
        (7, &[6]),
        (8, &[7]),
        (9, &[7]),
        (10, &[9]),
        (11, &[10]),
        (12, &[11]),
        (13, &[11]),
        (14, &[13]),
        (15, &[14]),
        (16, &[15]),
        (17, &[15]),
        (18, &[17]),
        (19, &[18]),
        (20, &[19]),
        (21, &[19]),
        (22, &[21]),
        (23, &[22]),
        (24, &[22]),
        (25, &[15]),
        (26, &[24]),
        (27, &[26]),
        (28, &[26]),
        (29, &[28]),
        (30, &[29]),
        (31, &[30]),
        (32, &[30]),
    ];
    assert_eq!(rows(&e, Sources::only(Source::Parents)), expect(want));
    let want: &[(u64, &[u64])] = &[
        (2, &[1]),
        (3, &[2]),
        (6, &[5]),
        (7, &[6]),
        (10, &[9]),
        (11, &[10]),
        (14, &[13]),
        (15, &[14]),
        (18, &[17]),
        (19, &[18]),
        (22, &[21]),
        (26, &[24]),
        (29, &[28]),
        (30, &[29]),
    ];
    assert_eq!(rows(&e, Sources::only(Source::Tools)), expect(want));
    assert_eq!(rows(&e, Sources::only(Source::State)), vec![]);
    assert_eq!(rows(&e, Sources::only(Source::Paths)), vec![]);
    // Horizon 3 at t = 30: D(30..=32) below 30.
    let d = Dependencies::extract(&e, Sources::ALL).unwrap();
    let trace = DemandTrace::new(&d, 3).unwrap();
    assert_eq!(trace.of(30), [3, 7, 15, 29]);
    assert_eq!(trace.of(26), [3, 24]);
    // D(27..=29) = {26} ∪ {26} ∪ {28}, below 27.
    assert_eq!(trace.of(27), [26]);
}

#[test]
fn sources_parse_and_print() {
    assert_eq!(
        Sources::parse("parents,tools,state,memory,paths"),
        Ok(Sources::ALL)
    );
    assert_eq!(Sources::ALL.to_string(), "parents,tools,state,memory,paths");
    let s = Sources::parse("paths, memory,paths").unwrap();
    assert_eq!(s.to_string(), "memory,paths");
    assert!(matches!(
        Sources::parse("parents,text"),
        Err(oracle_demand::DemandError::UnknownSource(x)) if x == "text"
    ));
    assert!(Sources::parse("").is_err());
    assert_eq!("causal".parse::<Policy>(), Ok(Policy::Causal));
    assert!("fifo".parse::<Policy>().is_err());
}

// ---------------------------------------------------------------------------------------------
// A policy example worked by hand

/// D: 1→0, 2→0, 3→1, 4→{0,2}, 5→3; horizon 1, so Demand(t) = D(t) and the requests are
/// 0 | 1 0 | 2 0 | 3 1 | 4 0 2 | 5 3 (12 requests, 6 compulsory faults).
#[test]
fn policies_on_a_small_graph_worked_by_hand() {
    let d = Dependencies::from_lists(&[vec![], vec![0], vec![0], vec![1], vec![2, 0], vec![3]])
        .unwrap();
    let trace = DemandTrace::new(&d, 1).unwrap();
    let ev = Evaluator::new(&d, &trace).unwrap();
    assert_eq!(ev.requests(), 12);
    let faults = |p, b| {
        let o = ev.run(p, b).unwrap();
        assert_eq!(o.compulsory, 6);
        o.faults
    };
    // recent, B=2: evicts the lowest seq; hits only the 0 after 1. 11 faults.
    assert_eq!(faults(Policy::Recent, 2), 11);
    // lru, B=2: hits both 0s of groups 1 and 2. 10 faults.
    assert_eq!(faults(Policy::Lru, 2), 10);
    // causal, B=2: at 3, A(3) = {1, 0} keeps 0 when 1 comes back; at 4, A(4) = {0, 2} keeps 0,
    // so the 0 of group 4 hits. 9 faults.
    assert_eq!(faults(Policy::Causal, 2), 9);
    // oracle, B=2: hits 0 at positions 2, 4 and 8. 9 faults.
    assert_eq!(faults(Policy::Oracle, 2), 9);
    for p in Policy::ALL {
        // No request repeats the previous one: a single slot always faults.
        assert_eq!(faults(p, 1), 12);
        assert_eq!(faults(p, 6), 6);
        assert_eq!(faults(p, 100), 6);
    }
    let r = oracle_demand::report(
        &d,
        &trace,
        &Config {
            horizon: 1,
            sources: Sources::ALL,
            policies: vec![Policy::Lru, Policy::Lru, Policy::Recent],
            budgets: vec![2, 1, 2],
        },
    )
    .unwrap();
    assert_eq!(r.policies, [Policy::Lru, Policy::Recent, Policy::Oracle]);
    assert_eq!(r.budgets, [1, 2]);
    assert_eq!(r.row(Policy::Recent, 2).unwrap().gap, 2);
    assert_eq!(r.row(Policy::Lru, 2).unwrap().gap, 1);
    assert_eq!(r.row(Policy::Lru, 2).unwrap().outcome.fault_rate_bp(), 8333);
}

#[test]
fn bad_configurations_are_refused() {
    let d = Dependencies::from_lists(&[vec![], vec![0]]).unwrap();
    assert_eq!(
        DemandTrace::new(&d, 0),
        Err(oracle_demand::DemandError::ZeroHorizon)
    );
    let trace = DemandTrace::new(&d, 1).unwrap();
    let ev = Evaluator::new(&d, &trace).unwrap();
    assert!(ev.run(Policy::Lru, 0).is_err());
    assert!(Dependencies::from_lists(&[vec![], vec![1]]).is_err());
    let mut e = fixture("memory");
    e.remove(3);
    assert!(matches!(
        Dependencies::extract(&e, Sources::ALL),
        Err(oracle_demand::DemandError::SeqOutOfOrder {
            position: 3,
            seq: 4
        })
    ));
    // An empty log has nothing to request.
    let r = oracle_demand::analyse(
        &[],
        &Config {
            horizon: 4,
            sources: Sources::ALL,
            policies: Policy::ALL.to_vec(),
            budgets: vec![1, 8],
        },
    )
    .unwrap();
    assert!(r.rows.iter().all(|row| row.outcome.faults == 0));
}

// ---------------------------------------------------------------------------------------------
// Random logs

const TOOLS: [&str; 7] = [
    "kv.get",
    "fs.read",
    "fs.write",
    "memory.query",
    "memory.history",
    "memory.assert",
    "text.count",
];

/// One generated event; indexes are reduced modulo small pools so that names repeat.
#[derive(Clone, Debug)]
enum Op {
    Schedule(u8, u8),
    Capability(u8, bool),
    Call(u8, u8, u8, u8),
    Return(u8, u8, u8, Vec<u16>, u8, Vec<u8>),
    Fail(u8, u8),
    State(Vec<u8>, Vec<u8>),
    Suspend(u8),
    Resume(u8, Vec<u16>),
}

fn op() -> impl Strategy<Value = Op> {
    let small = || prop::collection::vec(any::<u16>(), 0..4);
    let keys = || prop::collection::vec(0u8..6, 0..3);
    prop_oneof![
        3 => (0u8..4, 1u8..3).prop_map(|(s, a)| Op::Schedule(s, a)),
        1 => (0u8..4, any::<bool>()).prop_map(|(s, d)| Op::Capability(s, d)),
        4 => (0u8..4, 1u8..3, 0u8..7, any::<u8>()).prop_map(|(s, a, t, x)| Op::Call(s, a, t, x)),
        4 => (0u8..4, 1u8..3, 0u8..7, small(), 0u8..6, prop::collection::vec(0u8..6, 0..3))
            .prop_map(|(s, a, t, seqs, id, from)| Op::Return(s, a, t, seqs, id, from)),
        1 => (0u8..4, 1u8..3).prop_map(|(s, a)| Op::Fail(s, a)),
        2 => (keys(), keys()).prop_map(|(set, del)| Op::State(set, del)),
        1 => (0u8..4).prop_map(Op::Suspend),
        1 => (0u8..4, small()).prop_map(|(s, seqs)| Op::Resume(s, seqs)),
    ]
}

/// A belief-and-history answer reporting `seqs` (some possibly not earlier than `t`).
fn answer(seqs: &[u16], t: u64) -> Value {
    let seq = |x: &u16| json!({"seq": u64::from(*x) % (t + 3)});
    let part = |k: usize| -> Vec<Value> {
        seqs.iter()
            .enumerate()
            .filter(|(i, _)| i % 3 == k)
            .map(|(_, x)| seq(x))
            .collect()
    };
    json!({"support": part(0), "alternatives": [{"support": part(1)}], "claims": part(2)})
}

fn build(ops: Vec<(Op, Vec<u16>)>) -> Vec<Event> {
    let mut r = Recorder::new();
    let start = oracle_test_support::run_started("demand", 0, &[]);
    let mut out = vec![r.record(0, vec![], start).unwrap()];
    for (op, parents) in ops {
        let t = out.len() as u64;
        let step = |s: u8| format!("s{s}");
        let tool = |k: u8| TOOLS[usize::from(k) % TOOLS.len()].to_owned();
        let payload = match op {
            Op::Schedule(s, a) => Payload::StepScheduled(StepScheduled {
                step: step(s),
                tool: "text.count".into(),
                attempt: a.into(),
            }),
            Op::Capability(s, false) => Payload::CapabilityAllowed(CapabilityAllowed {
                step: step(s),
                capability: "kv:get:k".into(),
                grant: "kv:*:*".into(),
            }),
            Op::Capability(s, true) => Payload::CapabilityDenied(CapabilityDenied {
                step: step(s),
                capability: "fs:read:/etc".into(),
                reason: "no".into(),
            }),
            Op::Call(s, a, k, x) => {
                let input = match TOOLS[usize::from(k)] {
                    "kv.get" => json!({"key": format!("k{}", x % 4)}),
                    "fs.read" => json!({"path": format!("p{}", x % 3)}),
                    "fs.write" => json!({"path": format!("p{}", x % 3), "content": ""}),
                    // A `path` outside the fs tools is not a file.
                    _ => json!({"path": format!("p{}", x % 3), "key": format!("k{}", x % 4)}),
                };
                Payload::ToolCalled(ToolCalled {
                    step: step(s),
                    tool: tool(k),
                    tool_version: "1".into(),
                    attempt: a.into(),
                    input,
                })
            }
            Op::Return(s, a, k, seqs, id, from) => {
                let output = match TOOLS[usize::from(k)] {
                    "memory.query" | "memory.history" => answer(&seqs, t),
                    "memory.assert" => json!({
                        "id": format!("c{id}"),
                        "claim": {"derived_from": from.iter().map(|f| format!("c{f}")).collect::<Vec<_>>()},
                    }),
                    // Claims in the output of another tool are not memory reads.
                    _ => answer(&seqs, t),
                };
                Payload::ToolReturned(ToolReturned {
                    step: step(s),
                    tool: tool(k),
                    attempt: a.into(),
                    output,
                })
            }
            Op::Fail(s, a) => Payload::ToolFailed(ToolFailed {
                step: step(s),
                tool: "text.count".into(),
                attempt: a.into(),
                error: "no".into(),
                usage: None,
            }),
            Op::State(set, delete) => {
                let set: BTreeSet<String> = set.iter().map(|k| format!("kv/k{}", k % 4)).collect();
                let delete: BTreeSet<String> = delete
                    .iter()
                    .map(|k| format!("kv/k{}", k % 4))
                    .filter(|k| !set.contains(k))
                    .collect();
                Payload::StateChanged(StateChanged {
                    set: set.into_iter().map(|k| (k, json!(1))).collect(),
                    delete: delete.into_iter().collect(),
                })
            }
            Op::Suspend(s) => Payload::Suspended(Suspended {
                step: step(s),
                reason: "wait".into(),
                attempts: 1,
            }),
            Op::Resume(s, seqs) => Payload::Resumed(Resumed {
                step: step(s),
                value: answer(&seqs, t),
                by: None,
            }),
        };
        let parents: BTreeSet<u64> = parents.iter().map(|p| t - 1 - u64::from(*p) % t).collect();
        out.push(r.record(t, parents.into_iter().collect(), payload).unwrap());
    }
    out
}

fn logs(max: usize) -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec((op(), prop::collection::vec(0u16..8, 0..3)), 0..max).prop_map(build)
}

fn sources() -> impl Strategy<Value = Sources> {
    (1u8..32).prop_map(|bits| {
        Source::ALL
            .into_iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .fold(Sources::NONE, |s, (_, k)| s.with(k))
    })
}

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn n(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64)
}

fn claim_seqs(v: &Value) -> Vec<u64> {
    let mut out = Vec::new();
    let seqs = |list: Option<&Value>, out: &mut Vec<u64>| {
        for x in list.and_then(Value::as_array).into_iter().flatten() {
            out.extend(n(x, "seq"));
        }
    };
    seqs(v.get("support"), &mut out);
    for a in v
        .get("alternatives")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        seqs(a.get("support"), &mut out);
    }
    seqs(v.get("claims"), &mut out);
    out
}

/// D(t) the slow way: every rule of the module docs as a backwards scan.
fn naive_deps(events: &[Event], sources: Sources) -> Vec<Vec<u64>> {
    let mut all = Vec::new();
    for (t, e) in events.iter().enumerate() {
        let p = &e.payload;
        let before = &events[..t];
        let latest = |f: &dyn Fn(&Event) -> bool| before.iter().rev().find(|u| f(u)).map(|u| u.seq);
        let same = |u: &Event, kind: EventKind, attempt: bool| {
            u.kind == kind
                && s(&u.payload, "step") == s(p, "step")
                && (!attempt || n(&u.payload, "attempt") == n(p, "attempt"))
        };
        let mut d: Vec<u64> = Vec::new();
        if sources.has(Source::Parents) {
            d.extend(&e.parents);
        }
        let tool = s(p, "tool");
        if sources.has(Source::Tools) {
            d.extend(match e.kind {
                EventKind::ToolReturned | EventKind::ToolFailed => {
                    latest(&|u| same(u, EventKind::ToolCalled, true))
                }
                EventKind::ToolCalled => latest(&|u| same(u, EventKind::StepScheduled, true)),
                EventKind::CapabilityAllowed | EventKind::CapabilityDenied => {
                    latest(&|u| same(u, EventKind::StepScheduled, false))
                }
                EventKind::Resumed => latest(&|u| same(u, EventKind::Suspended, false)),
                _ => None,
            });
        }
        let input = p.get("input").cloned().unwrap_or(Value::Null);
        if sources.has(Source::State) && e.kind == EventKind::ToolCalled && tool == Some("kv.get") {
            let key = format!("kv/{}", s(&input, "key").unwrap());
            d.extend(latest(&|u| {
                u.kind == EventKind::StateChanged
                    && (u.payload["set"].get(&key).is_some()
                        || u.payload["delete"]
                            .as_array()
                            .unwrap()
                            .contains(&json!(key)))
            }));
        }
        if sources.has(Source::Memory) {
            let output = p.get("output").cloned().unwrap_or(Value::Null);
            match (e.kind, tool) {
                (EventKind::ToolReturned, Some("memory.query" | "memory.history")) => {
                    d.extend(claim_seqs(&output));
                }
                (EventKind::ToolReturned, Some("memory.assert")) => {
                    for id in output["claim"]["derived_from"].as_array().unwrap() {
                        d.extend(latest(&|u| {
                            u.kind == EventKind::ToolReturned
                                && s(&u.payload, "tool") == Some("memory.assert")
                                && u.payload["output"]["id"] == *id
                        }));
                    }
                }
                (EventKind::Resumed, _) => {
                    let call = before
                        .iter()
                        .rev()
                        .find(|u| same(u, EventKind::ToolCalled, false));
                    if call.is_some_and(|c| s(&c.payload, "tool") == Some("memory.query")) {
                        d.extend(claim_seqs(&p["value"]));
                    }
                }
                _ => {}
            }
        }
        if sources.has(Source::Paths)
            && e.kind == EventKind::ToolCalled
            && tool.is_some_and(|t| t.starts_with("fs."))
        {
            let path = &input["path"];
            d.extend(
                before
                    .iter()
                    .find(|u| {
                        u.kind == EventKind::ToolCalled
                            && s(&u.payload, "tool").is_some_and(|t| t.starts_with("fs."))
                            && u.payload["input"]["path"] == *path
                    })
                    .map(|u| u.seq),
            );
        }
        let d: BTreeSet<u64> = d.into_iter().filter(|&u| u < t as u64).collect();
        all.push(d.into_iter().collect());
    }
    all
}

/// Demand(t) the slow way: a fresh union over the window for every t.
fn naive_demand(d: &Dependencies, h: u64) -> Vec<Vec<u64>> {
    let n = d.events();
    (0..n)
        .map(|t| {
            let mut set = BTreeSet::new();
            for t2 in t..(t + h).min(n) {
                set.extend(d.of(t2).iter().copied().filter(|&u| u < t));
            }
            set.into_iter().collect()
        })
        .collect()
}

/// The fewest faults any eviction choices give (dynamic programming over (position, set)).
fn brute_force_optimum(trace: &DemandTrace, budget: usize) -> u64 {
    let mut reqs = Vec::new();
    for t in 0..trace.events() {
        reqs.push(t);
        reqs.extend(trace.of(t));
    }
    fn go(
        reqs: &[u64],
        p: usize,
        set: Vec<u64>,
        b: usize,
        memo: &mut BTreeMap<(usize, Vec<u64>), u64>,
    ) -> u64 {
        if p == reqs.len() {
            return 0;
        }
        if let Some(&v) = memo.get(&(p, set.clone())) {
            return v;
        }
        let x = reqs[p];
        let v = if set.contains(&x) {
            go(reqs, p + 1, set.clone(), b, memo)
        } else if set.len() < b {
            let mut s = set.clone();
            s.push(x);
            s.sort_unstable();
            1 + go(reqs, p + 1, s, b, memo)
        } else {
            (0..set.len())
                .map(|i| {
                    let mut s = set.clone();
                    s[i] = x;
                    s.sort_unstable();
                    1 + go(reqs, p + 1, s, b, memo)
                })
                .min()
                .unwrap()
        };
        memo.insert((p, set), v);
        v
    }
    go(&reqs, 0, Vec::new(), budget, &mut BTreeMap::new())
}

/// The invariants every trace must satisfy, at budgets 1 ..= 12, n / 2, n - 1, n and n + 1.
fn check_policies(d: &Dependencies, trace: &DemandTrace) -> Result<(), TestCaseError> {
    let ev = Evaluator::new(d, trace).unwrap();
    let n = d.events();
    let mut budgets: BTreeSet<u64> = (1..=12).collect();
    budgets.extend([n / 2, n.saturating_sub(1), n, n + 1]);
    budgets.remove(&0);
    let mut previous = u64::MAX;
    for b in budgets {
        let oracle = ev.run(Policy::Oracle, b).unwrap();
        prop_assert!(
            oracle.faults <= previous,
            "oracle faults grew at budget {b}"
        );
        previous = oracle.faults;
        for p in Policy::ALL {
            let o = ev.run(p, b).unwrap();
            prop_assert_eq!(o.compulsory, n);
            prop_assert_eq!(o.requests, n + trace.total());
            prop_assert!(o.faults >= o.compulsory && o.faults <= o.requests);
            prop_assert!(oracle.faults <= o.faults, "{} beats the oracle at {}", p, b);
            if b >= n {
                prop_assert_eq!(o.faults, o.compulsory, "{} at budget {}", p, b);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn dependencies_equal_the_naive_rules(events in logs(60), sources in sources()) {
        let d = Dependencies::extract(&events, sources).unwrap();
        let naive = naive_deps(&events, sources);
        for (t, want) in naive.iter().enumerate() {
            prop_assert_eq!(d.of(t as u64), want.as_slice(), "event {}", t);
        }
        prop_assert_eq!(d.edges(), naive.iter().map(|r| r.len() as u64).sum::<u64>());
    }

    #[test]
    fn windowed_demand_equals_the_naive_union(events in logs(60), h in 1u64..8) {
        let d = Dependencies::extract(&events, Sources::ALL).unwrap();
        let trace = DemandTrace::new(&d, h).unwrap();
        let naive = naive_demand(&d, h);
        for (t, want) in naive.iter().enumerate() {
            prop_assert_eq!(trace.of(t as u64), want.as_slice(), "event {}", t);
        }
        prop_assert_eq!(trace.max(), naive.iter().map(|r| r.len() as u64).max().unwrap_or(0));
    }

    #[test]
    fn oracle_bounds_every_policy_on_logs(events in logs(40), h in 1u64..6) {
        let d = Dependencies::extract(&events, Sources::ALL).unwrap();
        let trace = DemandTrace::new(&d, h).unwrap();
        check_policies(&d, &trace)?;
    }

    #[test]
    fn oracle_bounds_every_policy_on_graphs(
        lists in prop::collection::vec(prop::collection::vec(0u16..12, 0..4), 1..120),
        h in 1u64..10,
    ) {
        // Mostly recent dependencies, some far back.
        let lists: Vec<Vec<u64>> = lists
            .iter()
            .enumerate()
            .map(|(t, l)| {
                let t = t as u64;
                l.iter().filter(|_| t > 0).map(|&o| t - 1 - u64::from(o) % t).collect()
            })
            .collect();
        let d = Dependencies::from_lists(&lists).unwrap();
        let trace = DemandTrace::new(&d, h).unwrap();
        check_policies(&d, &trace)?;
    }

    #[test]
    fn oracle_is_optimal_on_small_traces(
        lists in prop::collection::vec(prop::collection::vec(0u16..4, 0..3), 1..8),
        h in 1u64..4,
        b in 1u64..4,
    ) {
        let lists: Vec<Vec<u64>> = lists
            .iter()
            .enumerate()
            .map(|(t, l)| {
                let t = t as u64;
                l.iter().filter(|_| t > 0).map(|&o| t - 1 - u64::from(o) % t).collect()
            })
            .collect();
        let d = Dependencies::from_lists(&lists).unwrap();
        let trace = DemandTrace::new(&d, h).unwrap();
        let ev = Evaluator::new(&d, &trace).unwrap();
        prop_assert_eq!(
            ev.run(Policy::Oracle, b).unwrap().faults,
            brute_force_optimum(&trace, b as usize)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Plugged policies

/// A policy in Rust behind the same ABI: K(t) from each event's `deps` in the input.
struct Scripted {
    name: &'static str,
    choose: fn(budget: u64, deps: &[Vec<u64>], t: usize) -> Vec<u64>,
    calls: u64,
}

impl oracle_demand::Advisor for Scripted {
    fn name(&self) -> &str {
        self.name
    }

    fn call(&mut self, input: &[u8]) -> Result<Value, oracle_demand::CallFailed> {
        self.calls += 1;
        let v: Value = serde_json::from_slice(input).unwrap();
        assert_eq!(v["abi"], 1);
        let budget = v["budget"].as_u64().unwrap();
        let deps: Vec<Vec<u64>> = v["events"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(t, e)| {
                assert_eq!(e["id"], t as u64);
                assert!(e["tokens"].as_u64().unwrap() >= 1);
                serde_json::from_value(e["deps"].clone()).unwrap()
            })
            .collect();
        let keep: Vec<Vec<u64>> = (0..deps.len())
            .map(|t| (self.choose)(budget, &deps, t))
            .collect();
        Ok(json!({ "keep": keep }))
    }
}

/// A(t): D(t) and the D of those.
fn ancestors(deps: &[Vec<u64>], t: usize) -> Vec<u64> {
    let mut a: BTreeSet<u64> = deps[t].iter().copied().collect();
    for &v in &deps[t] {
        a.extend(deps[v as usize].iter().copied());
    }
    a.into_iter().collect()
}

fn graph(lists: &[Vec<u16>]) -> Dependencies {
    let lists: Vec<Vec<u64>> = lists
        .iter()
        .enumerate()
        .map(|(t, l)| {
            let t = t as u64;
            l.iter()
                .filter(|_| t > 0)
                .map(|&o| t - 1 - u64::from(o) % t)
                .collect()
        })
        .collect();
    Dependencies::from_lists(&lists).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Keeping nothing is `lru`; keeping A(t) where it fits is `causal`; every plugged policy
    /// is bounded by the same oracle, and is called once per budget.
    #[test]
    fn plugged_policies_are_graded_as_the_built_ins(
        lists in prop::collection::vec(prop::collection::vec(0u16..12, 0..4), 1..80),
        h in 1u64..6,
        budgets in prop::collection::vec(1u64..40, 1..5),
    ) {
        let d = graph(&lists);
        let trace = DemandTrace::new(&d, h).unwrap();
        let mut nothing = Scripted { name: "nothing", choose: |_, _, _| vec![], calls: 0 };
        let mut causal = Scripted {
            name: "causal",
            choose: |b, deps, t| {
                let a = ancestors(deps, t);
                if a.len() as u64 <= b { a } else { vec![] }
            },
            calls: 0,
        };
        let config = Config {
            horizon: h,
            sources: Sources::ALL,
            policies: vec![Policy::Lru, Policy::Causal],
            budgets: budgets.clone(),
        };
        let r = oracle_demand::report_plugged(&d, &trace, &config, &mut [&mut nothing, &mut causal])
            .unwrap();
        prop_assert_eq!(&r.policies, &[Policy::Lru, Policy::Causal, Policy::Plugged(0),
            Policy::Plugged(1), Policy::Oracle]);
        prop_assert_eq!(r.name(Policy::Plugged(1)), "causal");
        let max_a = (0..d.events() as usize)
            .map(|t| ancestors(&(0..d.events()).map(|s| d.of(s).to_vec()).collect::<Vec<_>>(), t).len() as u64)
            .max()
            .unwrap_or(0);
        for &b in &r.budgets {
            let lru = &r.row(Policy::Lru, b).unwrap().outcome;
            let plain = &r.row(Policy::Plugged(0), b).unwrap().outcome;
            prop_assert_eq!((lru.faults, lru.tokens), (plain.faults, plain.tokens));
            if b >= max_a {
                let c = &r.row(Policy::Causal, b).unwrap().outcome;
                let p = &r.row(Policy::Plugged(1), b).unwrap().outcome;
                prop_assert_eq!(c.faults, p.faults, "budget {}", b);
            }
            for row in r.rows.iter().filter(|row| row.outcome.budget == b) {
                prop_assert!(row.gap >= 0);
            }
        }
        prop_assert_eq!(nothing.calls, r.budgets.len() as u64);
    }
}

#[test]
fn a_plugged_answer_outside_the_abi_is_refused() {
    use oracle_demand::PluggedError as P;
    use oracle_demand::plugged::keep_lists;
    let ok = keep_lists("p", &json!({"keep": [[], [0, 0], [1, 0]]}), 3, 2).unwrap();
    assert_eq!(ok, [vec![], vec![0], vec![0, 1]]);
    // Lists missing at the end are empty.
    assert_eq!(
        keep_lists("p", &json!({"keep": []}), 3, 1).unwrap().len(),
        0
    );
    let code = |answer: Value, budget| keep_lists("p", &answer, 3, budget).unwrap_err();
    assert!(matches!(
        code(json!({"keep": [[0]]}), 1),
        P::UnknownId {
            event: 0,
            id: 0,
            ..
        }
    ));
    assert!(matches!(
        code(json!({"keep": [[], [7]]}), 1),
        P::UnknownId {
            event: 1,
            id: 7,
            ..
        }
    ));
    assert!(matches!(
        code(json!({"keep": [[], [], [0, 1]]}), 1),
        P::OverBudget {
            event: 2,
            kept: 2,
            ..
        }
    ));
    assert!(matches!(
        code(json!({"keep": [[], [-1]]}), 1),
        P::Output { .. }
    ));
    assert!(matches!(
        code(json!({"keep": [[], [], [], []]}), 1),
        P::Output { .. }
    ));
    assert!(matches!(code(json!([[]]), 1), P::Output { .. }));
    assert!(matches!(code(json!({"keep": [7]}), 1), P::Output { .. }));
    assert_eq!(code(json!({"keep": [[0]]}), 1).code(), "policy_unknown_id");
}

#[test]
fn tokens_are_compact_json_bytes_over_four_rounded_up() {
    let events = fixture("tools");
    for e in &events {
        let bytes = serde_json::to_vec(&e.payload).unwrap().len() as u64;
        assert_eq!(oracle_demand::tokens(e), bytes.div_ceil(4));
    }
    let d = Dependencies::extract(&events, Sources::ALL).unwrap();
    assert_eq!(d.tokens(0), oracle_demand::tokens(&events[0]));
    assert_eq!(d.kind(0), "run_started");
}

// ---------------------------------------------------------------------------------------------
// Conversations (`oracle import --messages`)

/// A message of a generated conversation: role index, content, tool calls made or answered.
fn message() -> impl Strategy<Value = (u8, String, u8)> {
    (0u8..6, "[a-z ]{0,12}", 0u8..3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any JSON is an error or a log, never a panic; a conversation's log replays to the
    /// recorded state of every event, and its tool answers depend on their calls.
    #[test]
    fn conversations_become_logs_that_verify(
        messages in prop::collection::vec(message(), 1..30),
        junk in oracle_test_support::small_json(),
    ) {
        let _ = oracle_demand::conversation::events(junk.to_string().as_bytes());
        let mut list = Vec::new();
        let mut open: Vec<String> = Vec::new();
        for (i, (role, text, calls)) in messages.iter().enumerate() {
            let m = match role {
                0 => json!({"role": "system", "content": text}),
                1 | 2 => json!({"role": "user", "content": text}),
                3 => {
                    let ids: Vec<String> = (0..*calls).map(|c| format!("c{i}-{c}")).collect();
                    open.extend(ids.iter().cloned());
                    let tc: Vec<Value> = ids
                        .iter()
                        .map(|id| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}))
                        .collect();
                    json!({"role": "assistant", "content": text, "tool_calls": tc})
                }
                _ => match open.pop() {
                    Some(id) => json!({"role": "tool", "tool_call_id": id, "content": text}),
                    None => json!({"role": "assistant", "content": text}),
                },
            };
            list.push(m);
        }
        let bytes = serde_json::to_vec(&list).unwrap();
        let events = oracle_demand::conversation::events(&bytes).unwrap();
        let mut check = Recorder::new();
        for e in &events {
            prop_assert!(check.accept(e).is_ok(), "event {}", e.seq);
        }
        prop_assert_eq!(events[0].kind, EventKind::RunStarted);
        prop_assert_eq!(events.last().unwrap().kind, EventKind::RunFinished);
        let d = Dependencies::extract(&events, Sources::ALL).unwrap();
        for e in events.iter().filter(|e| e.kind == EventKind::ToolReturned) {
            prop_assert!(!d.of(e.seq).is_empty());
        }
        // The same bytes, the same log.
        prop_assert_eq!(oracle_demand::conversation::events(&bytes).unwrap(), events);
    }
}
