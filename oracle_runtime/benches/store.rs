//! Benchmarks of the store: durable appends under each policy, and streaming file verification
//! on one and two cores. Targets and results are in BENCHMARKS.md.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use oracle_core::synth::{SynthConfig, synth_events};
use oracle_runtime::{Durability, LogPaths, LogWriter, VerifyOptions, verify_file};

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append");
    g.sample_size(10);
    for (name, durability, n) in [
        (
            "group_commit_1000_100k",
            Durability::Group { events_max: 1000 },
            100_000u64,
        ),
        ("sync_every_event_2k", Durability::Event, 2_000),
    ] {
        // The runtime's path: typed payloads recorded (sealed, reduced) and appended.
        let items: Vec<_> = synth_events(SynthConfig::steps(n, 5))
            .unwrap()
            .into_iter()
            .map(|e| (e.time, e.parents.clone(), e.typed().unwrap()))
            .collect();
        g.throughput(Throughput::Elements(n));
        g.bench_function(name, |b| {
            b.iter_batched(
                // Payloads are handed over by value, as the runtime does; copying them is setup.
                || (tempfile::tempdir().unwrap(), ()),
                |(dir, ())| {
                    let paths = LogPaths::of_file(&dir.path().join("events.jsonl"));
                    let mut w = LogWriter::create(&paths, durability).unwrap();
                    for (time, parents, payload) in &items {
                        w.append(*time, parents.clone(), payload.clone()).unwrap();
                    }
                    w.close().unwrap();
                    dir
                },
                criterion::BatchSize::PerIteration,
            );
        });
    }
    g.finish();
}

fn verify(c: &mut Criterion) {
    const N: u64 = 200_000;
    let dir = tempfile::tempdir().unwrap();
    let paths = LogPaths::of_file(&dir.path().join("events.jsonl"));
    let mut w = LogWriter::create(&paths, Durability::None).unwrap();
    for e in synth_events(SynthConfig::steps(N, 9)).unwrap() {
        w.append_sealed(&e).unwrap();
    }
    w.close().unwrap();
    let mut g = c.benchmark_group("verify_file");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N));
    for threads in [1usize, 2] {
        g.bench_function(format!("{threads}_threads_200k"), |b| {
            b.iter(|| {
                verify_file(
                    &paths.log,
                    VerifyOptions {
                        threads,
                        expected_head: None,
                    },
                )
                .unwrap()
            });
        });
    }
    g.finish();
}

criterion_group!(benches, append, verify);
criterion_main!(benches);
