//! Resuming a long run (issue 22, item 3): a recorded run of a million events, suspended at
//! its end, resumed from its newest resume point (`resume/from_point_1m`: the tail after the
//! point read and verified, the point checked and restored, the tail re-derived) and from its
//! first event (`resume/from_start_1m`: the whole log verified and replayed, then re-derived).
//! Each resume catches up and waits again at the suspension, so nothing is appended and every
//! iteration resumes the same log. The agent is a Rust counter (one pure `json.get` a step),
//! so the figure is the engine's and the store's, not a plan compiler's.
//!
//! The target (issue 42, item 4) is printed beside the measurement: a resume of this run in
//! under [`TARGET`]. What is measured is what a caller waits for: the point read and checked,
//! the engine restored, the tail re-derived, and the engine dropped (freed, as the library
//! always does). One resume is also printed by phase, in wall time and in this thread's CPU
//! time (on a machine shared with other work the wall time is inflated; the CPU time is not).

use criterion::{Criterion, criterion_group};
use oracle_core::agent::{Action, Agent, AgentError, Call, Decision, Observation, Outcome};
use oracle_core::hash::{domain, hash_in};
use oracle_core::{Hash, State};
use oracle_runtime::engine::{CALLS_MAX_DEFAULT, Ending, Engine, RunConfig};
use oracle_runtime::recorded::Recorded;
use oracle_runtime::resume_point::{self, Policy};
use oracle_runtime::seal::SealKey;

/// The key the bench's points are sealed with.
const KEY: SealKey = SealKey::from_bytes([3; 32]);
use oracle_runtime::{Durability, LogPaths, LogWriter, session, tools};
use serde_json::{Map, Value, json};

/// Issue 42's target for `resume/from_point_1m`.
const TARGET: std::time::Duration = std::time::Duration::from_millis(500);

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
        parent: None,
        shared: None,
        live: None,
        scorer: None,
        resume_points: Policy {
            key: Some(KEY),
            ..Policy::default()
        },
    }
}

/// A copy of the run at `paths` in `to`, without its newest resume point.
fn without_newest_point(paths: &LogPaths, to: &std::path::Path) -> LogPaths {
    let copy = LogPaths::of_run(to);
    std::fs::create_dir_all(copy.snapshots()).unwrap();
    // The log and what lives beside it (its index), as they are.
    let dir = paths.run_dir.as_ref().unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
    let seqs = resume_point::list(paths).unwrap();
    for seq in &seqs[..seqs.len() - 1] {
        std::fs::copy(
            resume_point::path_of(paths, *seq),
            resume_point::path_of(&copy, *seq),
        )
        .unwrap();
    }
    copy
}

/// This thread's CPU time so far (`CLOCK_THREAD_CPUTIME_ID`).
fn cpu() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid out-pointer for clock_gettime.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(r, 0, "clock_gettime: {}", std::io::Error::last_os_error());
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// One resume by phases, in wall and CPU time (printed, for BENCHMARKS.md; the criterion
/// timing below is the whole).
fn one_resume_by_phases(paths: &LogPaths, registry: &oracle_runtime::tool::Registry, events: u64) {
    let mut marks = vec![(std::time::Instant::now(), cpu())];
    let mark = |marks: &mut Vec<_>| marks.push((std::time::Instant::now(), cpu()));
    let (start, _) = session::open_at_point(paths, Durability::None, &KEY).unwrap();
    let s = start.unwrap();
    mark(&mut marks);
    let point = resume_point::path_of(paths, s.point.seq);
    println!(
        "newest point after event {} ({} bytes): {} events to re-derive",
        s.point.seq,
        std::fs::metadata(point).unwrap().len(),
        events - s.point.seq - 1
    );
    let mut engine = Engine::new(
        Counter { done: 0 },
        registry,
        config(),
        s.tail,
        Some(s.writer),
    )
    .from_point_at(&s.point, s.state)
    .unwrap();
    mark(&mut marks);
    engine.drive().unwrap();
    mark(&mut marks);
    drop(engine);
    mark(&mut marks);
    let span = |i: usize, j: usize| {
        let (w, c) = (marks[j].0 - marks[i].0, marks[j].1 - marks[i].1);
        format!(
            "{:.0} ms ({:.0} ms CPU)",
            w.as_secs_f64() * 1e3,
            c.as_secs_f64() * 1e3
        )
    };
    println!(
        "one resume: {} (target {:.1} s); open (point, tail, writer) {}; restore {}; drive {}; drop {}",
        span(0, 4),
        TARGET.as_secs_f64(),
        span(0, 1),
        span(1, 2),
        span(2, 3),
        span(3, 4)
    );
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
    one_resume_by_phases(&paths, &registry, recorded.events);
    // Where the newest point falls depends on the spacing rule; the older point kept shows a
    // tail of about a whole spacing (the longest a resume of this run re-derives).
    let older = tempfile::tempdir().unwrap();
    let older_paths = without_newest_point(&paths, older.path());
    println!("from the older point kept:");
    one_resume_by_phases(&older_paths, &registry, recorded.events);
    let mut g = c.benchmark_group("resume");
    g.sample_size(10);
    println!("resume/from_point_1m: target {:.1} s", TARGET.as_secs_f64());
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
