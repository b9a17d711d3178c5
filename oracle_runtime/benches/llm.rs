//! Benchmarks of model calls (issue 17): the runtime's overhead per `llm.chat` call beyond the
//! HTTP round trip, against the in-repository stub answering at once on 127.0.0.1 (target:
//! at most 200 µs), and the replay of a run of 10k model calls, which never reaches a network.
//!
//! `llm_agent/100_turns` is an agent step of 100 turns (each a model call asking for one
//! `text.count` call), against the same stub: its time per turn minus one round trip is the
//! engine's overhead per agent turn, the model excluded.
//!
//! Groups: `llm_http/round_trip` (one `oracle_runtime::http::post_json` to the stub: the
//! baseline), `llm_run/wide_1000` (`session::start` of a plan of 1000 independent `llm.chat`
//! steps, as `oracle run`, default durability, one call at a time), and `llm_replay/10000`
//! (`session::replay` of a recorded 10k-call run, with the stub stopped).

use std::path::{Path, PathBuf};

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use oracle_llm_stub::Stub;
use oracle_runtime::session::{self, StartOptions};
use oracle_runtime::tools;
use oracle_runtime::tools::llm::{ModelBinding, Models};
use serde_json::json;

/// A plan of `n` independent model calls.
fn plan_text(n: u64) -> String {
    let mut s = String::from("plan models version 1\ngrant llm:chat:m\n\n");
    for i in 1..=n {
        s.push_str(&format!(
            "s{i} = llm.chat {{ model: \"m\", messages: [{{ role: \"user\", content: \"q{i}\" }}] }}\n"
        ));
    }
    s
}

fn models(url: &str) -> Models {
    let mut m = Models::default();
    m.models.insert(
        "m".into(),
        ModelBinding {
            url: url.to_owned(),
            model: "m".into(),
            key_env: None,
            stream: false,
        },
    );
    m
}

fn options(home: &Path, plan: PathBuf, models: Models) -> StartOptions {
    StartOptions {
        root: std::env::current_dir().unwrap(),
        models,
        ..StartOptions::new(home, &plan)
    }
}

fn stub() -> Stub {
    Stub::start(vec![json!({"content": "ok", "forever": true})]).unwrap()
}

fn round_trip(c: &mut Criterion) {
    let stub = stub();
    let url = format!("{}/chat/completions", stub.url());
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "q1"}]}).to_string();
    let mut g = c.benchmark_group("llm_http");
    g.throughput(Throughput::Elements(1));
    g.bench_function("round_trip", |b| {
        b.iter(|| {
            let r = oracle_runtime::http::post_json(&url, &[], body.as_bytes(), 10_000, 1 << 20)
                .unwrap();
            assert_eq!(r.status, 200);
            r
        })
    });
    g.finish();
}

fn run(c: &mut Criterion) {
    let stub = stub();
    let m = models(&stub.url());
    let registry = tools::builtin_with(std::sync::Arc::new(m.clone()), Default::default());
    let n = 1000u64;
    let text = plan_text(n);
    let mut g = c.benchmark_group("llm_run");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    g.bench_function(format!("wide_{n}"), |b| {
        b.iter_batched(
            || {
                let home = tempfile::tempdir().unwrap();
                let plan = home.path().join("bench.plan");
                std::fs::write(&plan, &text).unwrap();
                (home, plan)
            },
            |(home, plan)| {
                let s = session::start(&options(home.path(), plan, m.clone()), &registry).unwrap();
                assert_eq!(s.report.executed, n);
                home
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

fn replay(c: &mut Criterion) {
    let n = 10_000u64;
    let home = tempfile::tempdir().unwrap();
    let plan = home.path().join("bench.plan");
    std::fs::write(&plan, plan_text(n)).unwrap();
    let started = {
        let stub = stub();
        let m = models(&stub.url());
        let registry = tools::builtin_with(std::sync::Arc::new(m.clone()), Default::default());
        session::start(&options(home.path(), plan, m), &registry).unwrap()
        // The stub stops here: the replay below has no server to call.
    };
    let head = started.report.head;
    let registry = tools::builtin();
    let mut g = c.benchmark_group("llm_replay");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    g.bench_function(format!("{n}"), |b| {
        b.iter(|| {
            let r = session::replay(home.path(), &started.id, None, 1, &registry).unwrap();
            assert_eq!(r.report.head, head);
            assert_eq!(r.report.reused, n);
            r
        })
    });
    g.finish();
}

fn agent(c: &mut Criterion) {
    let turns = 100u64;
    let stub = Stub::start(vec![json!({
        "tool_calls": [{"id": "c", "type": "function", "function": {
            "name": "text__count", "arguments": "{\"text\": \"one two three\"}",
        }}],
        "forever": true,
    })])
    .unwrap();
    let m = models(&stub.url());
    let registry = tools::builtin_with(std::sync::Arc::new(m.clone()), Default::default());
    let text = format!(
        "plan turns version 1\ngrant llm:chat:m\n\na = agent {{ model: \"m\", instructions: \"count\", task: \"go\", tools: [\"text.count\"], max_turns: {turns} }}\n  on failure continue\n"
    );
    let mut g = c.benchmark_group("llm_agent");
    g.sample_size(10);
    g.throughput(Throughput::Elements(turns));
    g.bench_function(format!("{turns}_turns"), |b| {
        b.iter_batched(
            || {
                let home = tempfile::tempdir().unwrap();
                let plan = home.path().join("bench.plan");
                std::fs::write(&plan, &text).unwrap();
                (home, plan)
            },
            |(home, plan)| {
                let s = session::start(&options(home.path(), plan, m.clone()), &registry).unwrap();
                // Every turn: a model call and a text.count call.
                assert_eq!(s.report.executed, 2 * turns);
                home
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

criterion_group!(benches, round_trip, run, replay, agent);
oracle_runtime::bench_main!(benches);
