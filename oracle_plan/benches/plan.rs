//! Parse and compile a generated 10,000-step plan (target: under 100 ms; BENCHMARKS.md).

use criterion::{Criterion, criterion_group, criterion_main};
use oracle_plan::catalogue::{ArgSpec, ArgType, Catalogue, ToolSpec};
use std::hint::black_box;

/// A plan of `n` steps: each uses one or two earlier steps, so the DAG is wide and deep.
fn big_plan(n: u64) -> String {
    let mut s = String::from("plan big version 1\ninput seed: int = 7\n");
    for i in 0..n {
        let value = match i {
            0 => "seed".to_string(),
            1 => "[s0.out, seed + 1]".to_string(),
            _ => format!("[s{}.out, s{}.out]", i - 1, i / 2),
        };
        s.push_str(&format!(
            "s{i} = json.get {{ value: {value}, path: \"out\" }}\n  retry 2\n"
        ));
    }
    s
}

fn bench(c: &mut Criterion) {
    let catalogue = Catalogue::new([ToolSpec {
        name: "json.get".into(),
        version: "1".into(),
        description: "bench".into(),
        args: vec![
            ArgSpec {
                name: "value".into(),
                ty: ArgType::Any,
                required: true,
            },
            ArgSpec {
                name: "path".into(),
                ty: ArgType::String,
                required: true,
            },
        ],
        capability: None,
    }]);
    let src = big_plan(10_000);
    let mut g = c.benchmark_group("plan");
    g.sample_size(20);
    g.bench_function("parse_and_compile_10k_steps", |b| {
        b.iter(|| {
            let (compiled, diags) = oracle_plan::compile::check(black_box(&src), &catalogue);
            assert!(diags.is_empty());
            compiled
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
