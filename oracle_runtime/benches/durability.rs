//! Durability by effect (issue 22): steps per second and syncs per step for a chain of pure
//! steps and a chain of impure steps, under each durability mode, as `oracle run` drives them
//! (`session::start`, one call at a time). The pure step is `text.count`; the impure one is
//! `fs.read` of a small file, which the engine commits before (its write-ahead).
//!
//! Before the groups run, the syncs each configuration makes are printed (BENCHMARKS.md,
//! "Durability by effect"); they are a property of the engine's commit points, not a timing.
//!
//! `event_vs_floor` (issue 42, item 2) sets a chain of [`FLOOR_STEPS`] pure steps under
//! `event` (every step durable before the next) beside this disk's floor, measured in the same
//! run: as many records of the chain's average size appended to a file, each followed by one
//! `fdatasync`, with no oracle code.

use std::path::Path;

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use oracle_runtime::Durability;
use oracle_runtime::session::{self, StartOptions};
use oracle_runtime::tools;

/// Steps per chain.
const STEPS: u64 = 200;
/// Steps of the chain set against the disk's floor, and records the floor appends.
const FLOOR_STEPS: u64 = 1_000;
/// Bytes of one floor record: a pure step's four records, as the chain writes them (about
/// 400 bytes each).
const FLOOR_RECORD_BYTES: usize = 1_600;

/// A plan of `n` steps, each after the previous one.
fn plan_text(impure: bool, n: u64) -> String {
    let mut s = String::from("plan chain version 1\ngrant fs:read:data.txt\n\n");
    for i in 1..=n {
        let call = if impure {
            "fs.read { path: \"data.txt\" }".to_owned()
        } else {
            format!("text.count {{ text: \"step {i}\" }}")
        };
        s.push_str(&format!("s{i} = {call}\n"));
        if i > 1 {
            s.push_str(&format!("  after s{}\n", i - 1));
        }
    }
    s
}

const MODES: [(&str, Durability); 4] = [
    ("effect", Durability::Effect),
    ("group", Durability::GROUP),
    ("event", Durability::Event),
    ("none", Durability::None),
];

/// One run in a fresh home under `dir`: the syncs it made.
fn run(dir: &Path, text: &str, durability: Durability) -> u64 {
    let home = tempfile::tempdir_in(dir).unwrap();
    let plan = home.path().join("chain.plan");
    std::fs::write(&plan, text).unwrap();
    let opts = StartOptions {
        root: dir.to_path_buf(),
        durability,
        ..StartOptions::new(home.path(), &plan)
    };
    let s = session::start(&opts, &tools::builtin()).unwrap();
    s.report.syncs
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("data.txt"), "hello\n").unwrap();
    for impure in [false, true] {
        let text = plan_text(impure, STEPS);
        for (name, d) in MODES {
            let syncs = run(&root, &text, d);
            println!(
                "{} chain of {STEPS}, {name}: {syncs} syncs ({:.2} per step)",
                if impure { "impure" } else { "pure" },
                syncs as f64 / STEPS as f64
            );
        }
    }
    let mut g = c.benchmark_group("durability");
    g.sample_size(10);
    g.throughput(Throughput::Elements(STEPS));
    for impure in [false, true] {
        let text = plan_text(impure, STEPS);
        for (name, d) in MODES {
            let shape = if impure { "impure_chain" } else { "pure_chain" };
            g.bench_function(format!("{shape}/{name}"), |b| {
                b.iter_batched(|| (), |()| run(&root, &text, d), BatchSize::PerIteration)
            });
        }
    }
    g.finish();
    event_vs_floor(c, &root);
}

/// `FLOOR_STEPS` appends of `FLOOR_RECORD_BYTES`, one `fdatasync` after each.
fn floor(dir: &Path) {
    use std::io::Write as _;
    let path = dir.join("floor.log");
    let mut f = std::fs::File::create(&path).unwrap();
    let record = vec![b'x'; FLOOR_RECORD_BYTES];
    for _ in 0..FLOOR_STEPS {
        f.write_all(&record).unwrap();
        f.sync_data().unwrap();
    }
    drop(f);
    std::fs::remove_file(&path).unwrap();
}

fn event_vs_floor(c: &mut Criterion, root: &Path) {
    let text = plan_text(false, FLOOR_STEPS);
    let syncs = run(root, &text, Durability::Event);
    println!("pure chain of {FLOOR_STEPS}, event: {syncs} syncs");
    let mut g = c.benchmark_group("event_vs_floor");
    g.sample_size(10);
    g.throughput(Throughput::Elements(FLOOR_STEPS));
    g.bench_function("pure_chain_1000/event", |b| {
        b.iter_batched(
            || (),
            |()| run(root, &text, Durability::Event),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("floor/append_and_fdatasync_1000", |b| {
        b.iter_batched(|| (), |()| floor(root), BatchSize::PerIteration)
    });
    g.finish();
}

criterion_group!(durability_benches, benches);
oracle_runtime::bench_main!(durability_benches);
