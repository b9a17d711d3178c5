//! Durability by effect (issue 22): steps per second and syncs per step for a chain of pure
//! steps and a chain of impure steps, under each durability mode, as `oracle run` drives them
//! (`session::start`, one call at a time). The pure step is `text.count`; the impure one is
//! `fs.read` of a small file, which the engine commits before (its write-ahead).
//!
//! Before the groups run, the syncs each configuration makes are printed (BENCHMARKS.md,
//! "Durability by effect"); they are a property of the engine's commit points, not a timing.

use std::path::Path;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use oracle_runtime::Durability;
use oracle_runtime::session::{self, StartOptions};
use oracle_runtime::tools;

/// Steps per chain.
const STEPS: u64 = 200;

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
}

criterion_group!(durability_benches, benches);
criterion_main!(durability_benches);
