//! Benchmarks of belief memory: ingesting claims through the gate as the runtime does, and a
//! belief query whose cost must depend on the line asked about, not on the size of the memory.
//! Results are in BENCHMARKS.md ("Belief memory").

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Duration;

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use oracle_core::Payload;
use oracle_core::payload::ToolReturned;
use oracle_memory::belief::{self, Query};
use oracle_memory::{
    Cardinality, Claim, Criticality, Memory, MemorySettings, Origin, Provenance, ValidTime, gate,
    tools,
};
use serde_json::{Value, json};

const LINES: u64 = 10_000;
const ROUNDS: u64 = 10;
const CRITICALITIES: [&str; 3] = ["low", "medium", "high"];

/// The `k`-th claim of filler line `line`: a clean succession of trusted ten-tick windows, with
/// every fifth claim given without a window (it contradicts the line and opens a request).
fn filler_json(line: u64, k: u64) -> Value {
    let mut c = json!({
        "subject": format!("subject-{line}"),
        "predicate": "status",
        "value": format!("state-{k}"),
        "provenance": if k.is_multiple_of(2) { "user_asserted" } else { "external_first_hand" },
        "criticality": CRITICALITIES[(line % 3) as usize],
    });
    if k % 5 != 4 {
        c["valid"] = json!({"start": k * 10, "end": k * 10 + 10, "confidence_pct": 90});
    }
    c
}

fn filler(line: u64, k: u64) -> Claim {
    serde_json::from_value(filler_json(line, k)).expect("a well-formed claim")
}

/// Ingests `ROUNDS` claims on each of `LINES` lines through `memory.assert`, recording and
/// applying each output as the engine does.
fn ingest() -> Memory {
    let settings = MemorySettings::default();
    let mut m = Memory::new();
    let mut seq = 0;
    for k in 0..ROUNDS {
        let time = (k + 1) * 10;
        for line in 0..LINES {
            seq += 1;
            let origin = Origin {
                seq,
                time,
                step: format!("step-{seq}"),
                tool: tools::ASSERT.into(),
            };
            let output = tools::assert(&m, &filler_json(line, k), &origin, &settings)
                .expect("the claim is accepted");
            let payload = Payload::ToolReturned(ToolReturned {
                step: origin.step,
                tool: origin.tool,
                attempt: 1,
                output,
            });
            m.apply(seq, time, &payload).expect("the record applies");
        }
    }
    m
}

/// A memory with `hot` claims on the line `hot/city` (one value, every claim in the belief's
/// support) and filler lines of ten claims up to `total` claims, built through the gate.
fn memory_with(hot: u64, total: u64) -> Memory {
    let settings = MemorySettings::default();
    let mut m = Memory::new();
    let mut seq = 0;
    let mut add = |m: &mut Memory, claim: Claim, time: u64| {
        seq += 1;
        let origin = Origin {
            seq,
            time,
            step: format!("step-{seq}"),
            tool: tools::ASSERT.into(),
        };
        let a = gate::gate(m, claim, &origin, &settings).expect("the claim is accepted");
        m.insert(&a, &origin);
    };
    let fillers = (total - hot) / ROUNDS;
    for k in 0..ROUNDS {
        for line in 0..fillers {
            add(&mut m, filler(line, k), (k + 1) * 10);
        }
    }
    for i in 0..hot {
        let claim = Claim {
            subject: "hot".into(),
            predicate: "city".into(),
            value: json!("paris"),
            provenance: if i.is_multiple_of(2) {
                Provenance::UserAsserted
            } else {
                Provenance::ExternalFirstHand
            },
            cardinality: Cardinality::Functional,
            valid: Some(ValidTime {
                start: 0,
                end: None,
                confidence_pct: 90,
            }),
            criticality: Criticality::Medium,
            derived_from: vec![],
        };
        add(&mut m, claim, 100 + i / 10);
    }
    m
}

fn ingest_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("ingest");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(LINES * ROUNDS));
    g.bench_function("100k_claims_10k_lines", |b| {
        b.iter(|| black_box(ingest()).len());
    });
    g.finish();
}

/// The memories the queries run in, built on first use (so a filtered run builds only what it
/// measures).
const TOTALS: [u64; 4] = [1_000, 10_000, 100_000, 1_000_000];
static MEMORIES: [OnceLock<Memory>; 4] = [const { OnceLock::new() }; 4];

fn memory(i: usize) -> &'static Memory {
    MEMORIES[i].get_or_init(|| {
        let m = memory_with(1_000, TOTALS[i]);
        assert_eq!(m.len(), TOTALS[i]);
        assert_eq!(
            belief::query(&m, &Query::now("hot", "city"), 50).status(),
            "resolved"
        );
        m
    })
}

fn query_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("belief_query");
    g.sample_size(30);
    let q = Query::now("hot", "city");
    let small = Query::now("subject-7", "status");
    for (i, total) in TOTALS.into_iter().enumerate() {
        let id = format!("total_{total}");
        g.bench_function(BenchmarkId::new("line_1k_claims", &id), |b| {
            let m = memory(i);
            b.iter(|| belief::query(m, black_box(&q), 50))
        });
        if total > 1_000 {
            g.bench_function(BenchmarkId::new("line_10_claims", &id), |b| {
                let m = memory(i);
                b.iter(|| belief::query(m, black_box(&small), 50))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, ingest_bench, query_bench);
criterion_main!(benches);
