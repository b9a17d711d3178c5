//! Checking plans full of mistakes (issue 53, item 5; target: 200,000 unknown names checked in
//! under 2 s, BENCHMARKS.md "Diagnostics"). Each figure is the whole check (parse, compile,
//! type check, every "did you mean") plus every diagnostic rendered as the API's JSON, with its
//! line and column, uncapped: the work a plan of that size costs before any front end's cap.
//!
//! Shapes, each the worst its size allows for one part of the work:
//! - `unknown_names/N`: N steps, each reading a name one letter from a step's (`t5` beside `s5`),
//!   so every unknown name has a likely typo among N candidates ("did you mean");
//! - `unknown_names_one_line/N`: one step whose list holds N unknown names on a single line
//!   (line and column of N places in one line);
//! - `unknown_steps_after/N`: N steps, each `after` a step that does not exist.
//!
//! The machine line first, as every bench prints it, from /proc/cpuinfo (this crate sits below
//! the runtime, whose `oracle dev machine` prints the full line).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use oracle_plan::catalogue::{ArgSpec, ArgType, Catalogue, ToolSpec};
use oracle_plan::diagnostic::LineIndex;
use std::hint::black_box;

fn catalogue() -> Catalogue {
    Catalogue::new([ToolSpec {
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
    }])
}

/// `n` steps, step `s{i}` reading the unknown name `t{i}`.
fn unknown_names(n: u64) -> String {
    let mut s = String::from("plan typos version 1\n");
    for i in 0..n {
        s.push_str(&format!(
            "s{i} = json.get {{ value: t{i}, path: \"out\" }}\n"
        ));
    }
    s
}

/// One step whose value is a list of `n` unknown names on one line.
fn unknown_names_one_line(n: u64) -> String {
    let names: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    format!(
        "plan wide version 1\ns = json.get {{ value: [{}], path: \"out\" }}\n",
        names.join(", ")
    )
}

/// `n` steps, each to run after a step that does not exist.
fn unknown_steps_after(n: u64) -> String {
    let mut s = String::from("plan after version 1\n");
    for i in 0..n {
        s.push_str(&format!(
            "s{i} = json.get {{ value: 1, path: \"out\" }}\n  after t{i}\n"
        ));
    }
    s
}

/// The check and every diagnostic as JSON: the count of diagnostics.
fn check_and_render(src: &str, catalogue: &Catalogue) -> usize {
    let (_, diags) = oracle_plan::check(src, catalogue);
    let lines = LineIndex::new(src);
    let json: Vec<_> = diags.iter().map(|d| d.to_json_at(&lines)).collect();
    black_box(json).len()
}

/// The CPU's model name, as `oracle dev machine` names it.
fn machine_line() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split(':').nth(1))
        .map_or("unknown", str::trim)
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "cpu {model}; cores {cores}; arch {}",
        std::env::consts::ARCH
    )
}

/// Nanoseconds this thread has run on a CPU (`/proc/thread-self/schedstat`), so a figure
/// taken on a machine busy with other work can be read beside its wall time.
fn cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn bench(c: &mut Criterion) {
    // The machine line first: BENCHMARKS.md names the CPU of every figure.
    eprintln!("{}", machine_line());
    let catalogue = catalogue();
    let mut g = c.benchmark_group("diagnostics");
    g.sample_size(10);
    type Shape = (&'static str, fn(u64) -> String);
    let shapes: [Shape; 3] = [
        ("unknown_names", unknown_names),
        ("unknown_names_one_line", unknown_names_one_line),
        ("unknown_steps_after", unknown_steps_after),
    ];
    for n in [4_000u64, 200_000] {
        for (name, make) in shapes {
            let src = make(n);
            let (wall, cpu) = (std::time::Instant::now(), cpu_ns());
            let found = check_and_render(&src, &catalogue);
            let cpu_s = cpu_ns().zip(cpu).map(|(b, a)| (b - a) as f64 / 1e9);
            eprintln!(
                "{name}/{n}: {found} diagnostics, one check {:.3} s wall, {} CPU",
                wall.elapsed().as_secs_f64(),
                cpu_s.map_or("unknown".to_owned(), |s| format!("{s:.3} s")),
            );
            // Every unknown name is reported (and nothing is lost to a cap: there is none here).
            assert!(found as u64 >= n, "{name}/{n}: {found} diagnostics");
            g.bench_with_input(BenchmarkId::new(name, n), &src, |b, src| {
                b.iter(|| check_and_render(black_box(src), &catalogue))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
