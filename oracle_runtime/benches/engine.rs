//! Benchmarks of the engine: runtime overhead per step of a trivial pure tool (`text.contains`
//! on two bytes), for a plan run from scratch and for its replay by re-execution. Target: at
//! least 50k steps/s (20 µs of overhead per step), and a replay at least as fast as the run.
//!
//! Two plan shapes of N steps: `wide` (N independent steps; the plan agent starts up to 64 per
//! decision) and `chain` (each step waits on the previous one's output: one call per decision).
//! A step is four events: `step_scheduled`, `tool_called`, `tool_returned`, and the plan agent's
//! `state_changed` recording the step's output.
//!
//! `loops/for_10000` is a `for` loop of 10,000 iterations of the same trivial step, as
//! `oracle run`: compare its rate with `start/wide/*` for the cost of a loop iteration.
//!
//! Groups: `compile` (parse, check and hash the plan), `run` (the engine driving a compiled plan
//! into a new log), `start` (`session::start` end to end, as `oracle run`: compile, run
//! directory, run), and `replay` (`session::replay` end to end, as `oracle replay`: read and
//! verify the log, compile the stored plan, re-execute; `engine_only` is the re-execution
//! alone). Compare `replay/*` with `start/*`, and `replay/*/engine_only` with `run/*`.

use std::path::{Path, PathBuf};

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use oracle_core::Event;
use oracle_plan::CompiledPlan;
use oracle_plan::agent::PlanAgent;
use oracle_runtime::engine::{CALLS_MAX_DEFAULT, Ending, Engine, RunConfig};
use oracle_runtime::session::{self, StartOptions};
use oracle_runtime::tool::Registry;
use oracle_runtime::{Durability, LogPaths, LogWriter, reader, tools};
use serde_json::Map;

#[derive(Clone, Copy)]
enum Shape {
    Wide,
    Chain,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Wide => "wide",
            Shape::Chain => "chain",
        }
    }
}

/// A plan of `n` steps of `text.contains`.
fn plan_text(shape: Shape, n: u64) -> String {
    let mut s = String::with_capacity(n as usize * 64);
    s.push_str("plan bench version 1\n\n");
    for i in 1..=n {
        s.push_str(&format!(
            "s{i} = text.contains {{ text: \"ab\", pattern: \"a\" }}"
        ));
        match shape {
            Shape::Chain if i > 1 => s.push_str(&format!(" when s{}.found\n", i - 1)),
            _ => s.push('\n'),
        }
    }
    s
}

fn compile(registry: &Registry, text: &str) -> CompiledPlan {
    session::compile(Path::new("bench.plan"), text, registry).unwrap()
}

/// The workspace root: relative paths resolve here (no step of these plans uses one).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// The configuration `session::start` builds for a plan without inputs or grants.
fn config(jobs: u32) -> RunConfig {
    RunConfig {
        store: vec![],
        seed: 0,
        grants: vec![],
        inputs: Map::new(),
        root: root(),
        jobs,
        calls_max: CALLS_MAX_DEFAULT,
        domains: Default::default(),
        budget: None,
        key: None,
        parent: None,
        shared: None,
        live: None,
        scorer: None,
        resume_points: Default::default(),
    }
}

/// One run of `plan` into a new log in `dir`, as `session::start` drives it (without compiling
/// the plan or writing the run directory's other files). Returns the number of events.
fn run_once(
    registry: &Registry,
    plan: CompiledPlan,
    dir: &Path,
    durability: Durability,
    jobs: u32,
) -> u64 {
    let writer = LogWriter::create(&LogPaths::of_run(dir), durability).unwrap();
    let agent = PlanAgent::new(plan, Map::new());
    let mut engine = Engine::new(agent, registry, config(jobs), Vec::new(), Some(writer));
    let report = engine.drive().unwrap();
    assert!(matches!(report.ending, Ending::Finished { .. }));
    engine.into_writer().unwrap().close().unwrap();
    report.events
}

fn compile_bench(c: &mut Criterion) {
    let registry = tools::builtin();
    let mut g = c.benchmark_group("compile");
    g.sample_size(10);
    for (shape, n) in [(Shape::Wide, 100_000u64), (Shape::Chain, 100_000)] {
        let text = plan_text(shape, n);
        g.throughput(Throughput::Elements(n));
        g.bench_function(format!("{}/{n}", shape.name()), |b| {
            b.iter(|| compile(&registry, &text))
        });
    }
    g.finish();
}

fn run(c: &mut Criterion) {
    let registry = tools::builtin();
    let mut g = c.benchmark_group("run");
    g.sample_size(10);
    let cases = [
        (Shape::Wide, 10_000u64, Durability::DEFAULT, 1u32, ""),
        (Shape::Chain, 10_000, Durability::DEFAULT, 1, ""),
        (Shape::Wide, 100_000, Durability::DEFAULT, 1, ""),
        (Shape::Chain, 100_000, Durability::DEFAULT, 1, ""),
        // What the writer's syncs cost, and what a second thread does for trivial tools.
        (Shape::Wide, 100_000, Durability::None, 1, "/no_sync"),
        (Shape::Wide, 100_000, Durability::DEFAULT, 2, "/jobs_2"),
    ];
    for (shape, n, durability, jobs, suffix) in cases {
        let plan = compile(&registry, &plan_text(shape, n));
        g.throughput(Throughput::Elements(n));
        g.bench_function(format!("{}/{n}{suffix}", shape.name()), |b| {
            b.iter_batched(
                // A fresh log each time; copying the compiled plan is setup.
                || (tempfile::tempdir().unwrap(), plan.clone()),
                |(dir, plan)| {
                    let events = run_once(&registry, plan, dir.path(), durability, jobs);
                    assert_eq!(events, 4 * n + 2);
                    dir
                },
                BatchSize::PerIteration,
            );
        });
    }
    g.finish();
}

fn start_options(home: &Path, plan: PathBuf) -> StartOptions {
    StartOptions {
        root: root(),
        ..StartOptions::new(home, &plan)
    }
}

fn start(c: &mut Criterion) {
    let registry = tools::builtin();
    let mut g = c.benchmark_group("start");
    g.sample_size(10);
    for (shape, n) in [(Shape::Wide, 100_000u64), (Shape::Chain, 100_000)] {
        let text = plan_text(shape, n);
        g.throughput(Throughput::Elements(n));
        g.bench_function(format!("{}/{n}", shape.name()), |b| {
            b.iter_batched(
                || {
                    let home = tempfile::tempdir().unwrap();
                    let plan = home.path().join("bench.plan");
                    std::fs::write(&plan, &text).unwrap();
                    (home, plan)
                },
                |(home, plan)| {
                    let s = session::start(&start_options(home.path(), plan), &registry).unwrap();
                    assert_eq!(s.report.events, 4 * n + 2);
                    home
                },
                BatchSize::PerIteration,
            );
        });
    }
    g.finish();
}

fn replay(c: &mut Criterion) {
    let registry = tools::builtin();
    let mut g = c.benchmark_group("replay");
    g.sample_size(10);
    for (shape, n) in [(Shape::Wide, 100_000u64), (Shape::Chain, 100_000)] {
        let text = plan_text(shape, n);
        // The run to replay, made once through `session::start` like `oracle run`.
        let home = tempfile::tempdir().unwrap();
        let plan_path = home.path().join("bench.plan");
        std::fs::write(&plan_path, &text).unwrap();
        let started = session::start(&start_options(home.path(), plan_path), &registry).unwrap();
        let head = started.report.head;
        g.throughput(Throughput::Elements(n));
        // What `oracle replay RUN` does: read the log, compile the stored plan, re-execute.
        g.bench_function(format!("{}/{n}", shape.name()), |b| {
            b.iter(|| {
                let r = session::replay(home.path(), &started.id, None, 1, &registry).unwrap();
                assert_eq!(r.report.head, head);
                r
            })
        });
        // Re-execution alone: the events already read and the plan compiled.
        let events: Vec<Event> = reader::read_all(&LogPaths::of_run(&started.dir).log).unwrap();
        let plan = compile(&registry, &text);
        g.bench_function(format!("{}/{n}/engine_only", shape.name()), |b| {
            b.iter_batched(
                || (events.clone(), plan.clone()),
                |(events, plan)| {
                    let agent = PlanAgent::new(plan, Map::new());
                    let mut engine = Engine::new(agent, &registry, config(1), events, None);
                    let report = engine.drive().unwrap();
                    assert_eq!(report.head, head);
                    report
                },
                BatchSize::PerIteration,
            );
        });
    }
    g.finish();
}

/// A `for` loop of 10,000 iterations of one trivial pure step, end to end as `oracle run`
/// (issue 18): the plan agent's overhead per iteration (a child agent each) on top of a step.
fn loops(c: &mut Criterion) {
    let registry = tools::builtin();
    let n = 10_000u64;
    let text = format!(
        "plan loop version 1\ninput items: list\neach = for x in items max {n} {{\n  c = text.contains {{ text: \"ab\", pattern: \"a\" }}\n}}\n"
    );
    let items = format!(
        "[{}]",
        (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
    );
    let mut g = c.benchmark_group("loops");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    g.bench_function(format!("for_{n}"), |b| {
        b.iter_batched(
            || {
                let home = tempfile::tempdir().unwrap();
                let plan = home.path().join("bench.plan");
                std::fs::write(&plan, &text).unwrap();
                (home, plan)
            },
            |(home, plan)| {
                let mut opts = start_options(home.path(), plan);
                opts.inputs = vec![("items".into(), items.clone())];
                let s = session::start(&opts, &registry).unwrap();
                assert_eq!(s.report.executed, n);
                home
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

criterion_group!(benches, compile_bench, run, start, replay, loops);
oracle_runtime::bench_main!(benches);
