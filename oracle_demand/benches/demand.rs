//! Benchmark of the demand analysis on a 1M-event synthetic run with horizon 16: dependencies,
//! the demand trace, the next-request table, each policy at one budget, and all of it end to
//! end. Results are in BENCHMARKS.md ("Demand").
//!
//! The run is recorded (hashed, chained, state kept) by `Recorder`, and mixes every source of
//! dependency: steps of `fs.read` over 1000 paths, `kv.set` and `kv.get` over 64 keys,
//! `memory.assert` deriving from an earlier claim and `memory.query` reporting two claims; each
//! step is scheduled, checked (except memory tools), called, answered and written to the state,
//! and a call names an earlier step's answer as a parent (its data flow) half the time.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use oracle_core::payload::*;
use oracle_core::rng::SplitMix64;
use oracle_core::{Event, Recorder};
use oracle_demand::{Config, DemandTrace, Dependencies, Evaluator, Policy, Sources};
use serde_json::{Map, json};
use std::hint::black_box;

const EVENTS: u64 = 1_000_000;
const HORIZON: u64 = 16;
const BUDGET: u64 = 256;

fn synthetic_run(events: u64) -> Vec<Event> {
    let mut r = Recorder::new();
    let mut rng = SplitMix64::new(16);
    let start = oracle_test_support::run_started("demand-bench", 16, &["fs:read:**", "kv:*:*"]);
    let mut out = vec![r.record(0, vec![], start).unwrap()];
    let mut answers: Vec<u64> = Vec::new();
    let mut claims: Vec<(u64, String)> = Vec::new();
    let mut time = 0;
    let mut n = 0u64;
    while (out.len() as u64) < events {
        time += 1;
        n += 1;
        let step = format!("s{n}");
        let (tool, input) = match rng.below(10) {
            0..=3 => (
                "fs.read",
                json!({"path": format!("data/p{}", rng.below(1000))}),
            ),
            4 | 5 => (
                "kv.set",
                json!({"key": format!("k{}", rng.below(64)), "value": n}),
            ),
            6 | 7 => ("kv.get", json!({"key": format!("k{}", rng.below(64))})),
            8 => ("memory.assert", json!({"subject": "s", "predicate": "p"})),
            _ => ("memory.query", json!({"subject": "s", "predicate": "p"})),
        };
        let mut push = |out: &mut Vec<Event>, parents: Vec<u64>, p: Payload| {
            let e = r.record(time, parents, p).unwrap();
            let seq = e.seq;
            out.push(e);
            seq
        };
        let scheduled = push(
            &mut out,
            vec![],
            Payload::StepScheduled(StepScheduled {
                step: step.clone(),
                tool: tool.into(),
                attempt: 1,
            }),
        );
        let mut last = scheduled;
        if !tool.starts_with("memory.") {
            last = push(
                &mut out,
                vec![scheduled],
                Payload::CapabilityAllowed(CapabilityAllowed {
                    step: step.clone(),
                    capability: format!("{}:x", tool.replace('.', ":")),
                    grant: "*".into(),
                }),
            );
        }
        let mut parents = vec![last];
        if !answers.is_empty() && rng.below(2) == 0 {
            let a = answers[answers.len() - 1 - rng.below(answers.len().min(8) as u64) as usize];
            parents.insert(0, a);
        }
        let called = push(
            &mut out,
            parents,
            Payload::ToolCalled(ToolCalled {
                step: step.clone(),
                tool: tool.into(),
                tool_version: "1".into(),
                attempt: 1,
                input: input.clone(),
            }),
        );
        let next_seq = called + 1;
        let output = match tool {
            "memory.assert" => {
                let id = format!("c{next_seq}");
                let from: Vec<&String> = claims
                    .last()
                    .filter(|_| rng.below(2) == 0)
                    .map(|c| &c.1)
                    .into_iter()
                    .collect();
                let v = json!({"id": id, "claim": {"derived_from": from}});
                claims.push((next_seq, id));
                v
            }
            "memory.query" => {
                let support: Vec<_> = (0..2)
                    .take_while(|_| !claims.is_empty())
                    .map(|_| {
                        let c = &claims[rng.below(claims.len() as u64) as usize];
                        json!({"seq": c.0})
                    })
                    .collect();
                json!({"status": "resolved", "support": support})
            }
            "kv.get" => json!({"found": true, "value": n}),
            _ => json!({"bytes": 16}),
        };
        let returned = push(
            &mut out,
            vec![called],
            Payload::ToolReturned(ToolReturned {
                step: step.clone(),
                tool: tool.into(),
                attempt: 1,
                output,
            }),
        );
        answers.push(returned);
        let mut set = Map::new();
        if tool == "kv.set" {
            set.insert(format!("kv/{}", input["key"].as_str().unwrap()), json!(n));
        } else {
            set.insert(format!("step/{step}"), json!({"status": "completed"}));
        }
        push(
            &mut out,
            vec![],
            Payload::StateChanged(StateChanged {
                set,
                delete: vec![],
            }),
        );
    }
    out.truncate(events as usize);
    out
}

fn bench(c: &mut Criterion) {
    let events = synthetic_run(EVENTS);
    let deps = Dependencies::extract(&events, Sources::ALL).unwrap();
    let trace = DemandTrace::new(&deps, HORIZON).unwrap();
    let ev = Evaluator::new(&deps, &trace).unwrap();
    eprintln!(
        "demand bench: {} events, {} dependencies {:?}, demand total {} (max {}), {} requests",
        deps.events(),
        deps.edges(),
        deps.by_source(),
        trace.total(),
        trace.max(),
        ev.requests()
    );
    let mut g = c.benchmark_group("demand");
    g.sample_size(10);
    g.throughput(Throughput::Elements(EVENTS));
    g.bench_function("dependencies_1m", |b| {
        b.iter(|| Dependencies::extract(black_box(&events), Sources::ALL).unwrap())
    });
    g.bench_function("trace_1m_h16", |b| {
        b.iter(|| DemandTrace::new(black_box(&deps), HORIZON).unwrap())
    });
    g.bench_function("next_use_1m_h16", |b| {
        b.iter(|| Evaluator::new(black_box(&deps), &trace).unwrap().requests())
    });
    for p in Policy::ALL {
        g.bench_function(format!("policy_{p}_1m_h16_b{BUDGET}"), |b| {
            b.iter(|| ev.run(p, BUDGET).unwrap())
        });
    }
    g.bench_function(format!("analyse_1m_h16_all_policies_b{BUDGET}"), |b| {
        let config = Config {
            horizon: HORIZON,
            sources: Sources::ALL,
            policies: Policy::ALL.to_vec(),
            budgets: vec![BUDGET],
        };
        b.iter(|| oracle_demand::analyse(black_box(&events), &config).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
