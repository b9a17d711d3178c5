//! Resume points: a long run resumed from one re-derives only the events after it, and ends in
//! exactly the bytes a resume from the first event gives; a damaged or foreign point is refused
//! and the next one (finally the start) is used.

use std::path::Path;

use oracle_core::agent::{Action, Agent, AgentError, Call, Decision, Observation, Outcome};
use oracle_core::hash::{domain, hash_in};
use oracle_core::payload::RunStatus;
use oracle_core::{Hash, State};
use oracle_runtime::engine::{CALLS_MAX_DEFAULT, Ending, Engine, Report, RunConfig};
use oracle_runtime::recorded::Recorded;
use oracle_runtime::resume_point::{self, Policy};
use oracle_runtime::seal::SealKey;
use oracle_runtime::tool::Registry;
use oracle_runtime::{Durability, LogPaths, LogWriter, session, tools};
use serde_json::{Map, Value, json};

/// Calls the pure `json.get` once per decision, `steps` times, then waits for a person (so the
/// run can be resumed without changing it: the resume catches up and waits again).
struct Counter {
    steps: u64,
    done: u64,
}

impl Agent for Counter {
    fn program(&self) -> &str {
        "counter"
    }

    fn program_hash(&self) -> Hash {
        hash_in(domain::VALUE, b"test counter agent, version 1")
    }

    fn decide(&mut self, _state: &State, seen: &[Observation]) -> Result<Decision, AgentError> {
        if let Some(o) = seen.first() {
            match &o.outcome {
                Outcome::Returned(_) => self.done += 1,
                Outcome::Answered(_) => {
                    return Ok(Decision {
                        changes: vec![],
                        action: Action::Finish {
                            status: RunStatus::Completed,
                            reason: String::new(),
                        },
                    });
                }
                other => return Err(AgentError(format!("unexpected {other:?}"))),
            }
        }
        if self.done == self.steps {
            return Ok(Decision {
                changes: vec![],
                action: Action::Suspend {
                    step: "end".into(),
                    reason: "go on?".into(),
                    attempts: 1,
                },
            });
        }
        Ok(Decision {
            changes: vec![],
            action: Action::Call(vec![Call {
                step: format!("s{}", self.done),
                tool: "json.get".into(),
                attempt: 1,
                input: json!({"value": {"n": self.done}, "path": "n"}),
                timeout_ms: None,
                reads: vec![],
            }]),
        })
    }

    fn save(&self) -> Option<Value> {
        Some(json!({"done": self.done}))
    }

    fn restore(&mut self, saved: &Value) -> Result<(), AgentError> {
        self.done = saved["done"]
            .as_u64()
            .ok_or_else(|| AgentError("no `done`".into()))?;
        Ok(())
    }
}

/// The home's key these runs' points are sealed with.
const KEY: SealKey = SealKey::from_bytes([9; 32]);

fn config(every_events: u64) -> RunConfig {
    RunConfig {
        store: vec![],
        seed: 1,
        grants: vec![],
        inputs: Map::new(),
        root: std::env::temp_dir().canonicalize().unwrap(),
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
            every_events,
            key: Some(KEY),
        },
    }
}

/// Runs a counter of `steps` steps to its suspension, writing resume points.
fn record(dir: &Path, steps: u64, every: u64, registry: &Registry) -> (LogPaths, Report) {
    let paths = LogPaths::of_run(dir);
    let writer = LogWriter::create(&paths, Durability::None).unwrap();
    let agent = Counter { steps, done: 0 };
    let mut engine = Engine::new(agent, registry, config(every), Vec::new(), Some(writer));
    let report = engine.drive().unwrap();
    engine.into_writer().unwrap().close().unwrap();
    (paths, report)
}

/// Resumes with the answer, from the newest usable point (or, with `from_start`, the start).
fn resume(paths: &LogPaths, steps: u64, from_start: bool, registry: &Registry) -> Report {
    let agent = Counter { steps, done: 0 };
    let (start, _refused) = if from_start {
        (None, Vec::new())
    } else {
        session::open_at_point(paths, Durability::None, &KEY).unwrap()
    };
    let mut engine = match start {
        Some(s) => Engine::new(agent, registry, config(0), s.tail, Some(s.writer))
            .from_point_at(&s.point, s.state)
            .unwrap(),
        None => {
            let writer = LogWriter::open(paths, Durability::None).unwrap();
            let all = Recorded::read(&paths.log).unwrap();
            Engine::new(agent, registry, config(0), all, Some(writer))
        }
    };
    engine = engine.with_answer("end".into(), json!("yes"));
    let report = engine.drive().unwrap();
    engine.into_writer().unwrap().close().unwrap();
    report
}

fn copy_run(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("snapshots")).unwrap();
    std::fs::copy(from.join("events.jsonl"), to.join("events.jsonl")).unwrap();
    for e in std::fs::read_dir(from.join("snapshots")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join("snapshots").join(e.file_name())).unwrap();
    }
}

/// The issue's case: a run of a million events is resumed from its newest resume point,
/// re-deriving only the events after it (the bytes equal a resume from the first event: see
/// the next test, on a shorter run, since re-deriving a million events takes minutes in a
/// debug build).
#[test]
fn a_million_event_run_resumes_from_its_newest_point() {
    let registry = tools::builtin();
    let tmp = tempfile::tempdir().unwrap();
    // Three events a step (scheduled, called, returned), plus the start and the suspension.
    let steps = 333_334;
    let (paths, recorded) = record(&tmp.path().join("a"), steps, 65_536, &registry);
    assert!(recorded.events >= 1_000_000, "{} events", recorded.events);
    assert!(recorded.points_written >= 2, "{recorded:?}");
    let points = resume_point::list(&paths).unwrap();
    assert_eq!(
        points.len(),
        resume_point::KEPT_MAX,
        "older points are removed"
    );
    let newest = *points.last().unwrap();

    let fast = resume(&paths, steps, false, &registry);
    assert_eq!(fast.from_point, Some(newest));
    // Re-derived: exactly the recorded events after the point (points are spaced by at least
    // 65,536 events and by 32 log bytes per byte of the last point).
    assert_eq!(fast.matched, recorded.events - (newest + 1));
    assert!(
        fast.matched < recorded.events / 2,
        "re-derived {}",
        fast.matched
    );
    assert!(matches!(fast.ending, Ending::Finished { .. }));
    let verified = oracle_runtime::verify_file(&paths.log, Default::default()).unwrap();
    assert_eq!(verified.head.hash, fast.head);
}

/// From a point or from the first event, a resume appends the same bytes.
#[test]
fn resume_from_a_point_gives_the_bytes_of_a_resume_from_the_start() {
    let registry = tools::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let steps = 5_000;
    let (paths, recorded) = record(&tmp.path().join("a"), steps, 2_000, &registry);
    let newest = *resume_point::list(&paths).unwrap().last().unwrap();
    copy_run(&tmp.path().join("a"), &tmp.path().join("b"));
    let fast = resume(&paths, steps, false, &registry);
    assert_eq!(fast.from_point, Some(newest));
    assert_eq!(fast.matched, recorded.events - (newest + 1));
    let paths_b = LogPaths::of_run(&tmp.path().join("b"));
    let slow = resume(&paths_b, steps, true, &registry);
    assert_eq!(slow.from_point, None);
    assert_eq!(slow.matched, recorded.events);
    assert_eq!(fast.head, slow.head);
    assert_eq!(fast.ending, slow.ending);
    assert_eq!(
        std::fs::read(&paths.log).unwrap(),
        std::fs::read(&paths_b.log).unwrap()
    );
}

/// A damaged newest point (one byte changed), a point whose state does not match the log and a
/// point of another run are each refused with why, and the resume goes on from the next one.
#[test]
fn a_bad_point_is_refused_and_an_older_one_used() {
    let registry = tools::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let steps = 3_000;
    let (paths, recorded) = record(&tmp.path().join("a"), steps, 1_000, &registry);
    let points = resume_point::list(&paths).unwrap();
    assert_eq!(points.len(), 2);
    let (older, newest) = (points[0], points[1]);

    // One byte of the newest point's body changed: its MAC no longer holds.
    let file = resume_point::path_of(&paths, newest);
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let (start, refused) = session::open_at_point(&paths, Durability::None, &KEY).unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, newest);
    assert!(refused[0].1.contains("MAC does not hold"), "{refused:?}");
    let start = start.unwrap();
    assert_eq!(start.point.seq, older);
    assert_eq!(start.tail.base(), older + 1);
    drop(start);

    // A well-formed point whose anchor is not in this log (another run's hash).
    let mut foreign = resume_point::load(&paths, older, &KEY).unwrap();
    foreign.hash = hash_in(domain::VALUE, b"another run");
    resume_point::save(&paths, foreign.seq, &foreign, &KEY).unwrap();
    let (start, refused) = session::open_at_point(&paths, Durability::None, &KEY).unwrap();
    assert!(start.is_none());
    assert!(
        refused
            .iter()
            .any(|(s, why)| *s == older && why.contains("not event")),
        "{refused:?}"
    );

    // Resuming then starts from the first event and still finishes the run.
    let report = resume(&paths, steps, false, &registry);
    assert_eq!(report.from_point, None);
    assert_eq!(report.matched, recorded.events);
}

/// A point whose engine state is wrong (the agent's progress moved back) but well formed and
/// anchored is refused by the drive itself: the events it produces differ from the record.
#[test]
fn a_point_that_does_not_reproduce_the_record_is_refused_by_the_drive() {
    let registry = tools::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let steps = 3_000;
    let (paths, _) = record(&tmp.path().join("a"), steps, 1_000, &registry);
    let newest = *resume_point::list(&paths).unwrap().last().unwrap();
    let mut point = resume_point::load(&paths, newest, &KEY).unwrap();
    let mut engine: Value = serde_json::from_str(point.engine.get()).unwrap();
    engine["agent"]["done"] = json!(engine["agent"]["done"].as_u64().unwrap() - 1);
    point.engine = serde_json::value::to_raw_value(&engine).unwrap();
    resume_point::save(&paths, point.seq, &point, &KEY).unwrap();
    let (start, _) = session::open_at_point(&paths, Durability::None, &KEY).unwrap();
    let start = start.unwrap();
    let agent = Counter { steps, done: 0 };
    let mut engine = Engine::new(agent, &registry, config(0), start.tail, Some(start.writer))
        .from_point(&start.point)
        .unwrap();
    let err = engine.drive().unwrap_err();
    assert!(
        err.seq().is_some_and(|s| s > newest),
        "refused while catching up: {err}"
    );
}

/// A point forged without the home's key: the agent's progress edited and the file written
/// again whole, as anyone who can write the run directory could (before points were sealed, a
/// recomputed content hash made it pass). Refused, and the resume starts further back.
#[test]
fn a_point_sealed_with_another_key_is_refused() {
    let registry = tools::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let steps = 3_000;
    let (paths, recorded) = record(&tmp.path().join("a"), steps, 1_000, &registry);
    let points = resume_point::list(&paths).unwrap();
    let (older, newest) = (points[0], points[1]);
    let mut point = resume_point::load(&paths, newest, &KEY).unwrap();
    let mut engine: Value = serde_json::from_str(point.engine.get()).unwrap();
    engine["agent"]["done"] = json!(0);
    point.engine = serde_json::value::to_raw_value(&engine).unwrap();
    let forger = SealKey::from_bytes([1; 32]);
    resume_point::save(&paths, point.seq, &point, &forger).unwrap();
    let (start, refused) = session::open_at_point(&paths, Durability::None, &KEY).unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, newest);
    assert!(refused[0].1.contains("MAC does not hold"), "{refused:?}");
    assert_eq!(start.unwrap().point.seq, older);
    let report = resume(&paths, steps, false, &registry);
    assert_eq!(report.from_point, Some(older));
    assert_eq!(report.matched, recorded.events - older - 1);
}

/// A well-formed, sealed point whose key-value state differs from the state the log records
/// at its event: refused by the state check before anything is driven.
#[test]
fn a_sealed_point_whose_state_differs_from_the_log_is_refused() {
    let registry = tools::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let (paths, _) = record(&tmp.path().join("a"), 3_000, 1_000, &registry);
    let points = resume_point::list(&paths).unwrap();
    let (older, newest) = (points[0], points[1]);
    let mut point = resume_point::load(&paths, newest, &KEY).unwrap();
    point
        .state
        .entries
        .insert("forged".into(), json!("not in the log"));
    resume_point::save(&paths, point.seq, &point, &KEY).unwrap();
    let (start, refused) = session::open_at_point(&paths, Durability::None, &KEY).unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, newest);
    assert_eq!(start.unwrap().point.seq, older);
}

/// The engine state of a point written before the per-step table (engine format 1: four maps
/// of step names and `last_called`), made from a current one.
fn as_engine_format_1(engine: &str) -> String {
    let mut e: Value = serde_json::from_str(engine).unwrap();
    let causes = e["causes"].take();
    let tools = causes["tools"].as_array().unwrap().clone();
    let (mut last, mut attempts, mut read, mut called) =
        (Map::new(), Map::new(), Vec::new(), Map::new());
    let unusual: Map<String, Value> = causes["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_owned(), p[1].clone()))
        .collect();
    for row in causes["steps"].as_array().unwrap() {
        let name = row[0].as_str().unwrap().to_owned();
        let usual = match row[1].is_null() {
            true => json!([]),
            false => json!([row[1]]),
        };
        let tried = unusual.get(&name).cloned().unwrap_or(usual);
        if !row[1].is_null() {
            last.insert(name.clone(), row[1].clone());
        }
        if !tried.as_array().unwrap().is_empty() {
            attempts.insert(name.clone(), tried);
        }
        if row[3] == json!(1) {
            read.push(json!(name));
        }
        if let Some(t) = row[2].as_u64() {
            let input = causes["inputs"].get(&name).cloned().unwrap_or(Value::Null);
            called.insert(name, json!([tools[t as usize], input]));
        }
    }
    e["format"] = json!(1);
    e["causes"] = json!({"on": causes["on"], "last": last, "attempts": attempts,
        "observed": causes["observed"], "read": read});
    e["last_called"] = Value::Object(called);
    e.to_string()
}

/// A point whose engine state has the older layout (format 1) still restores, and the resume
/// from it appends the bytes a resume from the first event does.
#[test]
fn a_point_of_engine_format_1_still_restores() {
    let registry = tools::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let steps = 3_000;
    let (paths, recorded) = record(&tmp.path().join("a"), steps, 1_000, &registry);
    let newest = *resume_point::list(&paths).unwrap().last().unwrap();
    let mut point = resume_point::load(&paths, newest, &KEY).unwrap();
    assert!(
        point.engine.get().contains(r#""steps":[["s0","#),
        "format 2 rows"
    );
    let old = as_engine_format_1(point.engine.get());
    point.engine = serde_json::value::RawValue::from_string(old).unwrap();
    resume_point::save(&paths, newest, &point, &KEY).unwrap();
    copy_run(&tmp.path().join("a"), &tmp.path().join("b"));

    let fast = resume(&paths, steps, false, &registry);
    assert_eq!(fast.from_point, Some(newest));
    assert_eq!(fast.matched, recorded.events - (newest + 1));
    let slow = resume(
        &LogPaths::of_run(&tmp.path().join("b")),
        steps,
        true,
        &registry,
    );
    assert_eq!(fast.head, slow.head);
    assert_eq!(
        std::fs::read(&paths.log).unwrap(),
        std::fs::read(tmp.path().join("b").join("events.jsonl")).unwrap()
    );
}
