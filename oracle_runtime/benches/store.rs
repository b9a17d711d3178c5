//! Benchmarks of the store: durable appends under each policy, streaming file verification
//! on one and two cores, and random access through the log index. Targets and results are in
//! BENCHMARKS.md.

use criterion::{Criterion, Throughput, criterion_group};
use oracle_core::rng::SplitMix64;
use oracle_core::synth::{SynthConfig, synth_events};
use oracle_runtime::index::{IndexedLog, index_path};
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
        // One sync per event: a writer used outside the engine has no step boundaries, so
        // this is `Group` bounded at one event (`Event` syncs per step since issue 42).
        (
            "sync_every_event_2k",
            Durability::Group { events_max: 1 },
            2_000,
        ),
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

/// A synthetic log of `n` events in a temporary directory (kept alive by the returned guard).
fn synthetic_log(n: u64) -> (tempfile::TempDir, LogPaths) {
    let dir = tempfile::tempdir().unwrap();
    let paths = LogPaths::of_file(&dir.path().join("events.jsonl"));
    let mut w = LogWriter::create(&paths, Durability::None).unwrap();
    for e in synth_events(SynthConfig::steps(n, 9)).unwrap() {
        w.append_sealed(&e).unwrap();
    }
    w.close().unwrap();
    (dir, paths)
}

fn verify(c: &mut Criterion) {
    const N: u64 = 200_000;
    let (_dir, paths) = synthetic_log(N);
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

fn index(c: &mut Criterion) {
    const N: u64 = 200_000;
    let (_dir, paths) = synthetic_log(N);
    let log = &paths.log;
    let idx = index_path(log);
    let log_bytes = std::fs::metadata(log).unwrap().len();
    let mut g = c.benchmark_group("index");
    g.sample_size(10);
    // The writer's index: load, sampled check, scan past the last entry.
    g.bench_function("open_valid_200k", |b| {
        b.iter(|| {
            let ix = IndexedLog::open(log).unwrap();
            assert!(!ix.was_rebuilt());
            ix
        });
    });
    // Bytes of log scanned per open, so the report reads as a scan rate.
    g.throughput(Throughput::Bytes(log_bytes));
    // No index: a newline scan of the whole log (114 MB, from the page cache), then the index
    // written back (1.6 MB, temp file and rename).
    g.bench_function("open_rebuild_200k", |b| {
        b.iter_batched(
            || std::fs::remove_file(&idx).unwrap(),
            |()| {
                let ix = IndexedLog::open(log).unwrap();
                assert!(ix.was_rebuilt());
                ix
            },
            criterion::BatchSize::PerIteration,
        );
    });
    // Each read: seek, read one record, check it on its own (hashes), parse it.
    let mut rng = SplitMix64::new(20);
    let seqs: Vec<u64> = (0..20).map(|_| rng.below(N)).collect();
    let mut ix = IndexedLog::open(log).unwrap();
    g.throughput(Throughput::Elements(seqs.len() as u64));
    g.bench_function("read_20_random_200k", |b| {
        b.iter(|| {
            for &seq in &seqs {
                ix.read(seq).unwrap();
            }
        });
    });
    g.finish();
}

criterion_group!(benches, append, verify, index);
oracle_runtime::bench_main!(benches);
