//! Resuming a long run (issue 22, item 3): a recorded run of a million events, suspended at
//! its end, resumed from its newest resume point (`resume/from_point_1m`: the tail after the
//! point read and verified, the point checked and restored, the tail re-derived) and from its
//! first event (`resume/from_start_1m`: the whole log verified and replayed, then re-derived).
//! Each resume catches up and waits again at the suspension, so nothing is appended and every
//! iteration resumes the same log. The agent is a Rust counter (one pure `json.get` a step),
//! so the figure is the engine's and the store's, not a plan compiler's.

use criterion::{Criterion, criterion_group};
use oracle_core::agent::{Action, Agent, AgentError, Call, Decision, Observation, Outcome};
use oracle_core::hash::{domain, hash_in};
use oracle_core::{Hash, State};
use oracle_runtime::engine::{CALLS_MAX_DEFAULT, Ending, Engine, RunConfig};
use oracle_runtime::recorded::Recorded;
use oracle_runtime::resume_point::Policy;
use oracle_runtime::seal::SealKey;

/// The key the bench's points are sealed with.
const KEY: SealKey = SealKey::from_bytes([3; 32]);
use oracle_runtime::{Durability, LogPaths, LogWriter, session, tools};
use serde_json::{Map, Value, json};

/// Three events a step: a million events in all.
const STEPS: u64 = 333_334;

struct Counter {
    done: u64,
}

impl Agent for Counter {
    fn program(&self) -> &str {
        "counter"
    }

    fn program_hash(&self) -> Hash {
        hash_in(domain::VALUE, b"bench counter agent, version 1")
    }

    fn decide(&mut self, _state: &State, seen: &[Observation]) -> Result<Decision, AgentError> {
        if let Some(Observation {
            outcome: Outcome::Returned(_),
            ..
        }) = seen.first()
        {
            self.done += 1;
        }
        let action = if self.done == STEPS {
            Action::Suspend {
                step: "end".into(),
                reason: "go on?".into(),
                attempts: 1,
            }
        } else {
            Action::Call(vec![Call {
                step: format!("s{}", self.done),
                tool: "json.get".into(),
                attempt: 1,
                input: json!({"value": {"n": self.done}, "path": "n"}),
                timeout_ms: None,
                reads: vec![],
            }])
        };
        Ok(Decision {
            changes: vec![],
            action,
        })
    }

    fn save(&self) -> Option<Value> {
        Some(json!(self.done))
    }

    fn restore(&mut self, saved: &Value) -> Result<(), AgentError> {
        self.done = saved
            .as_u64()
            .ok_or_else(|| AgentError("not a count".into()))?;
        Ok(())
    }
}

fn config() -> RunConfig {
    RunConfig {
        store: vec![],
        seed: 1,
        grants: vec![],
        inputs: Map::new(),
        root: std::env::temp_dir(),
        jobs: 1,
        calls_max: CALLS_MAX_DEFAULT,
        domains: Default::default(),
        budget: None,
        key: None,
        shared: None,
        live: None,
        scorer: None,
        resume_points: Policy {
            key: Some(KEY),
            ..Policy::default()
        },
    }
}

fn bench(c: &mut Criterion) {
    let registry = tools::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let paths = LogPaths::of_run(tmp.path());
    let writer = LogWriter::create(&paths, Durability::None).unwrap();
    let mut engine = Engine::new(
        Counter { done: 0 },
        &registry,
        config(),
        Vec::new(),
        Some(writer),
    );
    let recorded = engine.drive().unwrap();
    engine.into_writer().unwrap().close().unwrap();
    println!(
        "recorded {} events, {} resume points written",
        recorded.events, recorded.points_written
    );
    {
        // One resume by phases (printed, for BENCHMARKS.md; the timing below is the whole).
        let t = std::time::Instant::now();
        let (start, _) = session::open_at_point(&paths, Durability::None, &KEY).unwrap();
        let s = start.unwrap();
        let opened = t.elapsed();
        println!(
            "newest point after event {}: {} events to re-derive",
            s.point.seq,
            recorded.events - s.point.seq - 1
        );
        let mut engine = Engine::new(
            Counter { done: 0 },
            &registry,
            config(),
            s.tail,
            Some(s.writer),
        )
        .from_point_at(&s.point, s.state)
        .unwrap();
        let restored = t.elapsed();
        engine.drive().unwrap();
        let driven = t.elapsed();
        drop(engine);
        println!(
            "phases: open (point, tail, writer) {opened:?}; restore {:?}; drive {:?}; drop {:?}",
            restored - opened,
            driven - restored,
            t.elapsed() - driven
        );
    }

    let mut g = c.benchmark_group("resume");
    g.sample_size(10);
    g.bench_function("from_point_1m", |b| {
        b.iter(|| {
            let (start, refused) = session::open_at_point(&paths, Durability::None, &KEY).unwrap();
            assert!(refused.is_empty());
            let s = start.unwrap();
            let mut engine = Engine::new(
                Counter { done: 0 },
                &registry,
                config(),
                s.tail,
                Some(s.writer),
            )
            .from_point_at(&s.point, s.state)
            .unwrap();
            let r = engine.drive().unwrap();
            assert!(matches!(r.ending, Ending::Suspended { .. }));
            assert!(r.from_point.is_some());
            r.matched
        })
    });
    g.bench_function("from_start_1m", |b| {
        b.iter(|| {
            let writer = LogWriter::open(&paths, Durability::None).unwrap();
            let all = Recorded::read(&paths.log).unwrap();
            let mut engine =
                Engine::new(Counter { done: 0 }, &registry, config(), all, Some(writer));
            let r = engine.drive().unwrap();
            assert!(matches!(r.ending, Ending::Suspended { .. }));
            r.matched
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
oracle_runtime::bench_main!(benches);
