//! Power loss, simulated: the writer runs on `storage::sim::SimStorage`, the power goes out
//! before any one of its storage operations, and what the model says may survive (durable
//! bytes, then a torn or zero-filled part of the rest; a file whose creation was never made
//! durable may be gone) is written to a real directory and recovered the way an operator does:
//! `repair`, `verify`, read through the index, then `LogWriter::open` and append the rest.
//!
//! What must hold, for every durability mode (docs/TESTING.md, "Power loss, simulated"):
//! - no event acknowledged as durable is lost. Acknowledged means: `Event`, every event
//!   appended before a `step_done` (a step boundary, where the engine calls it), `commit` or
//!   `close` that returned; `Group { events_max }`, every event appended before a `commit` (or
//!   `close`) that returned, and every event up to the `events_max`-th since the last sync
//!   once its `append` returned; `Effect`, every event appended before a `commit` (or `close`)
//!   that returned (the engine commits where an effect needs it); `None`, nothing (it never syncs: a power loss may take every
//!   record, and only the prefix property below holds);
//! - after `repair` the log verifies and is a byte prefix of the uninterrupted run's log;
//! - appending the rest of the run after recovery ends at exactly the uninterrupted run's bytes
//!   and head, with a complete index.

use std::fs;

use oracle_core::payload::*;
use oracle_core::{Event, Payload, Value};
use oracle_runtime::index::{IndexedLog, index_path};
use oracle_runtime::repair::{Repair, repair};
use oracle_runtime::storage::sim::SimStorage;
use oracle_runtime::{Durability, LogPaths, LogWriter, VerifyOptions, reader, verify_file};
use oracle_test_support::{copy_dir, small_payload};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        Just(Durability::Event),
        (1u64..5).prop_map(|n| Durability::Group { events_max: n }),
        Just(Durability::Effect),
        Just(Durability::None)
    ]
}

fn then() -> impl Strategy<Value = Then> {
    prop_oneof![Just(Then::Nothing), Just(Then::Step), Just(Then::Commit)]
}

fn start() -> Payload {
    oracle_test_support::run_started("p", 1, &[])
}

/// What follows an event's append: nothing, a step boundary, or a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    Nothing,
    Step,
    Commit,
}

/// One step of a run: append an event, then what the item says.
type Item = (Payload, Then);

/// Events acknowledged as durable, from the documented contract of each mode (not from the
/// writer's code): the count after an `append` returned.
fn acked_after_append(d: Durability, appended: u64, acked: u64) -> u64 {
    match d {
        Durability::Group { events_max } if appended - acked >= events_max => appended,
        Durability::Event | Durability::Group { .. } | Durability::Effect | Durability::None => {
            acked
        }
    }
}

/// The same after a `step_done` returned: a commit under `Event`, nothing under the others.
fn acked_after_step(d: Durability, appended: u64, acked: u64) -> u64 {
    match d {
        Durability::Event => appended,
        Durability::Group { .. } | Durability::Effect | Durability::None => acked,
    }
}

/// The same after a `commit` or `close` returned.
fn acked_after_commit(d: Durability, appended: u64, acked: u64) -> u64 {
    match d {
        Durability::None => acked,
        Durability::Event | Durability::Group { .. } | Durability::Effect => appended,
    }
}

/// What a run on `sim` did before it stopped (at the end, or at the first error).
struct Run {
    events: Vec<Event>,
    acked: u64,
}

/// Runs `items` through a writer on `sim` until an operation fails (the power went out).
fn run(sim: &SimStorage, paths: &LogPaths, d: Durability, items: &[Item]) -> Run {
    let mut out = Run {
        events: Vec::new(),
        acked: 0,
    };
    let Ok(mut w) = LogWriter::with_storage(paths, &mut sim.clone(), d) else {
        return out;
    };
    let payloads = std::iter::once((start(), Then::Nothing)).chain(items.iter().cloned());
    for (i, (payload, then)) in payloads.enumerate() {
        let parents = out.events.len().checked_sub(1).map(|p| p as u64);
        match w.append(i as u64, parents.into_iter().collect(), payload) {
            Ok(e) => out.events.push(e),
            Err(_) => return out,
        }
        let appended = out.events.len() as u64;
        out.acked = acked_after_append(d, appended, out.acked);
        match then {
            Then::Nothing => {}
            Then::Step => {
                if w.step_done().is_err() {
                    return out;
                }
                out.acked = acked_after_step(d, appended, out.acked);
            }
            Then::Commit => {
                if w.commit().is_err() {
                    return out;
                }
                out.acked = acked_after_commit(d, appended, out.acked);
            }
        }
    }
    if w.close().is_ok() {
        out.acked = acked_after_commit(d, out.events.len() as u64, out.acked);
    }
    out
}

/// The uninterrupted run: its events, log and index bytes, and how many storage operations it
/// made. Also checks that the seam changes nothing: the same run on the real file system
/// writes the same log and index bytes.
struct Full {
    events: Vec<Event>,
    log: Vec<u8>,
    ops: u64,
}

fn full_run(d: Durability, items: &[Item]) -> Result<Full, TestCaseError> {
    let sim = SimStorage::new();
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let paths = LogPaths::of_run(&dir.path().join("run"));
    let done = run(&sim, &paths, d, items);
    let log = sim.log_bytes().unwrap_or_default();
    prop_assert_eq!(done.events.len(), items.len() + 1);
    // After `close` every record is durable, except under `None`, which never syncs.
    let durable = sim.log_durable();
    prop_assert_eq!(
        durable,
        acked_durable(d, log.len() as u64),
        "after close, {:?} left {:?} of {} log bytes durable",
        d,
        durable,
        log.len()
    );

    let mut real = LogWriter::create(&paths, d).map_err(|e| TestCaseError::fail(e.to_string()))?;
    for e in &done.events {
        real.append_sealed(e)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    real.close()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&fs::read(&paths.log).unwrap(), &log);
    prop_assert_eq!(
        fs::read(index_path(&paths.log)).ok(),
        sim.index_bytes(),
        "the index on the real file system differs from the simulated one"
    );
    Ok(Full {
        events: done.events,
        log,
        ops: sim.ops(),
    })
}

/// The durable length of a completed run's log: all of it unless nothing syncs.
fn acked_durable(d: Durability, len: u64) -> Option<u64> {
    Some(if d == Durability::None { 0 } else { len })
}

/// What a recovery found, for the floors of the deterministic test.
#[derive(Default)]
struct Seen {
    cases: u64,
    log_gone: u64,
    torn_repaired: u64,
    lost_unacked: u64,
    index_rebuilt: u64,
}

/// Loses power before operation `loss` of the run, draws what survives from `tear`, recovers,
/// and checks the properties of the module comment.
fn check(
    d: Durability,
    items: &[Item],
    full: &Full,
    loss: u64,
    tear: u64,
    seen: &mut Seen,
) -> Result<(), TestCaseError> {
    seen.cases += 1;
    let sim = SimStorage::new();
    sim.lose_power_at(loss);
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let paths = LogPaths::of_run(&dir.path().join("run"));
    let cut = run(&sim, &paths, d, items);
    prop_assert!(
        full.events.starts_with(&cut.events),
        "the interrupted run appended other events"
    );

    let survivors = sim.survivors(tear);
    fs::create_dir_all(dir.path().join("run")).unwrap();
    if let Some(index) = &survivors.index {
        fs::write(index_path(&paths.log), index).unwrap();
    }
    let Some(log) = &survivors.log else {
        seen.log_gone += 1;
        prop_assert_eq!(cut.acked, 0, "the log is gone with acknowledged events");
        return Ok(());
    };
    fs::write(&paths.log, log).unwrap();

    let repaired = repair(&paths).map_err(|e| TestCaseError::fail(format!("repair: {e}")))?;
    if matches!(repaired, Repair::MovedTornTail { .. }) {
        seen.torn_repaired += 1;
    }
    let recovered = fs::read(&paths.log).unwrap();
    prop_assert!(
        full.log.starts_with(&recovered),
        "the repaired log is not a prefix of the uninterrupted run's"
    );
    let opts = VerifyOptions {
        threads: 1,
        expected_head: None,
    };
    let summary =
        verify_file(&paths.log, opts).map_err(|e| TestCaseError::fail(format!("verify: {e}")))?;
    let n = summary.head.next_seq;
    prop_assert!(
        n >= cut.acked,
        "{} events survived, {} were acknowledged as durable ({:?}, power lost at op {}, tear {})",
        n,
        cut.acked,
        d,
        loss,
        tear
    );
    if n < cut.events.len() as u64 {
        seen.lost_unacked += 1;
    }
    let kept = usize::try_from(n).unwrap();
    prop_assert_eq!(&reader::read_all(&paths.log).unwrap(), &full.events[..kept]);

    // Read back through whatever index survived: a torn, zero-filled or too-long one is
    // rebuilt, never trusted.
    let mut indexed =
        IndexedLog::open(&paths.log).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(indexed.len(), n);
    if indexed.was_rebuilt() {
        seen.index_rebuilt += 1;
    }
    for (seq, e) in full.events[..kept].iter().enumerate() {
        prop_assert_eq!(&indexed.read(seq as u64).unwrap(), e);
    }
    drop(indexed);

    // Resume: the rest of the run appended to the recovered log ends where the uninterrupted
    // run ended, byte for byte, and leaves a complete index.
    // Without syncs: what is checked here is the bytes, which no durability mode changes, and
    // fsyncs on a real disk would make the test slow for nothing.
    let mut w = LogWriter::open(&paths, Durability::None)
        .map_err(|e| TestCaseError::fail(format!("open: {e}")))?;
    for e in &full.events[kept..] {
        w.append_sealed(e)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    let head = w.close().map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(head.hash, full.events.last().map(|e| e.hash).unwrap());
    prop_assert_eq!(&fs::read(&paths.log).unwrap(), &full.log);
    let indexed = IndexedLog::open(&paths.log).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(!indexed.was_rebuilt() && indexed.extended_by() == 0);
    prop_assert_eq!(indexed.len(), full.events.len() as u64);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random runs, any durability, power lost before a random storage operation, a random
    /// tear of what was not synced.
    #[test]
    fn power_loss_never_loses_an_acknowledged_event(
        items in prop::collection::vec((small_payload(), then()), 0..16),
        d in durability(),
        loss in any::<prop::sample::Index>(),
        tear in any::<u64>(),
    ) {
        let full = full_run(d, &items)?;
        // `ops` itself: the power goes out after the run closed.
        let loss = loss.index(usize::try_from(full.ops + 1).unwrap()) as u64;
        check(d, &items, &full, loss, tear, &mut Seen::default())?;
    }
}

/// A fixed run of small steps, the power lost before every one of its storage operations in
/// turn, each with several tears, in every durability mode; with floors on how often the
/// interesting outcomes were reached, so the test cannot pass by never reaching them.
#[test]
fn power_loss_at_every_operation_never_loses_an_acknowledged_event() {
    let items: Vec<Item> = (0..8u64)
        .map(|i| {
            let output = Value::from(format!("output of step {i}"));
            let p = Payload::ToolReturned(ToolReturned {
                step: format!("s{i}"),
                tool: "t".into(),
                attempt: 1,
                output,
            });
            let then = match i % 3 {
                2 => Then::Commit,
                1 => Then::Step,
                _ => Then::Nothing,
            };
            (p, then)
        })
        .collect();
    let mut seen = Seen::default();
    for d in [
        Durability::Event,
        Durability::Group { events_max: 2 },
        Durability::Group { events_max: 1000 },
        Durability::None,
    ] {
        let full = full_run(d, &items).unwrap();
        for loss in 0..=full.ops {
            for tear in 0..12 {
                if let Err(e) = check(d, &items, &full, loss, tear, &mut seen) {
                    panic!("{d:?}, power lost at op {loss}, tear {tear}: {e}");
                }
            }
        }
    }
    // Every kind of outcome the model allows was reached.
    assert!(seen.log_gone >= 4, "log gone {} times", seen.log_gone);
    assert!(
        seen.torn_repaired >= 50,
        "torn tails {}",
        seen.torn_repaired
    );
    assert!(
        seen.lost_unacked >= 50,
        "unacknowledged losses {}",
        seen.lost_unacked
    );
    assert!(
        seen.index_rebuilt >= 50,
        "index rebuilt {}",
        seen.index_rebuilt
    );
    eprintln!(
        "{} cases: log gone {}, torn tail repaired {}, unacknowledged events lost {}, index rebuilt {}",
        seen.cases, seen.log_gone, seen.torn_repaired, seen.lost_unacked, seen.index_rebuilt
    );
}

/// A plan whose rounds mix pure steps, impure reads and kv writes, so that its commits fall at
/// step boundaries of several kinds.
const PLAN: &str = "plan power version 1
grant kv:set:*
grant fs:read:Cargo.toml

t0 = json.get { value: { n: \"a\" }, path: \"n\" }
t1 = random.int { min: 0, max: 9 }
t2 = fs.read { path: \"Cargo.toml\" }
t3 = kv.set { key: \"k3\", value: \"v\" }
s0 = json.get { value: { n: t0.value }, path: \"\" }
s1 = json.get { value: { n: t1.value }, path: \"\" }
s2 = json.get { value: { n: t2.bytes }, path: \"\" }
t4 = kv.set { key: \"k4\", value: s0.value.n }
t5 = fs.read { path: \"Cargo.toml\" }
  after s2
s3 = json.get { value: { n: t5.bytes }, path: \"\" }
";

/// Runs the plan with the engine, the way `oracle run` does, on `sim`.
fn engine_on_sim(
    sim: &SimStorage,
    plan_path: &std::path::Path,
    run_dir: &std::path::Path,
    d: Durability,
) {
    use oracle_plan::agent::{PlanAgent, bind_inputs};
    use oracle_runtime::engine::{CALLS_MAX_DEFAULT, Engine, RunConfig};

    let registry = oracle_runtime::tools::builtin();
    let plan = oracle_runtime::session::compile(plan_path, PLAN, &registry).unwrap();
    let inputs = bind_inputs(&plan, &[]).unwrap();
    let mut grants = plan.grants.clone();
    grants.sort_by_key(|c| c.to_string());
    grants.dedup();
    let config = RunConfig {
        seed: 7,
        grants,
        inputs: inputs.clone(),
        root: std::path::Path::new(".").canonicalize().unwrap(),
        store: vec![run_dir.to_path_buf()],
        jobs: 1,
        calls_max: CALLS_MAX_DEFAULT,
        domains: Default::default(),
        budget: None,
        scorer: None,
        resume_points: Default::default(),
        key: None,
        parent: None,
        shared: None,
        live: None,
    };
    let Ok(writer) = LogWriter::with_storage(&LogPaths::of_run(run_dir), &mut sim.clone(), d)
    else {
        return;
    };
    let agent = PlanAgent::new(plan, inputs);
    let mut engine = Engine::new(agent, &registry, config, Vec::new(), Some(writer));
    // After the power is lost the drive fails at its next write: that is the point.
    let _ = engine.drive();
    if let Some(w) = engine.into_writer() {
        let _ = w.close();
    }
}

/// The engine's run of a plan on simulated storage, the power lost before every storage
/// operation in turn, recovered, and continued with `session::resume` (which repairs a torn
/// tail itself): it ends with exactly the bytes of the uninterrupted run, in every mode. A log
/// that kept no event is refused by `resume` with its cause, as the CLI documents.
#[test]
fn power_loss_in_an_engine_run_resumes_to_the_uninterrupted_log() {
    use oracle_runtime::session::{self, SessionError, StartOptions};

    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("power.plan");
    fs::write(&plan_path, PLAN).unwrap();
    let registry = oracle_runtime::tools::builtin();
    let home = dir.path().join("home");
    let whole = session::start(
        &StartOptions {
            seed: 7,
            ..StartOptions::new(&home, &plan_path)
        },
        &registry,
    )
    .unwrap();
    let whole_log = fs::read(whole.dir.join("events.jsonl")).unwrap();
    let events = reader::read_all(&whole.dir.join("events.jsonl"))
        .unwrap()
        .len() as u64;
    assert!(events >= 20, "the plan made only {events} events");

    let (mut resumed, mut nothing, mut finished) = (0u64, 0u64, 0u64);
    for d in [Durability::Event, Durability::DEFAULT, Durability::None] {
        let sim = SimStorage::new();
        engine_on_sim(&sim, &plan_path, &whole.dir, d);
        assert_eq!(
            sim.log_bytes().as_ref(),
            Some(&whole_log),
            "{d:?}: the engine on simulated storage wrote other bytes"
        );
        let ops = sim.ops();
        for loss in 0..=ops {
            for tear in 0..3 {
                let sim = SimStorage::new();
                sim.lose_power_at(loss);
                engine_on_sim(&sim, &plan_path, &whole.dir, d);
                let durable = sim.log_durable().unwrap_or(0);
                let survivors = sim.survivors(tear);

                let case = dir.path().join(format!("case-{loss}-{tear}"));
                let run_dir = case.join("runs").join(whole.dir.file_name().unwrap());
                copy_dir(&whole.dir, &run_dir);
                let log = run_dir.join("events.jsonl");
                match &survivors.index {
                    Some(index) => fs::write(index_path(&log), index).unwrap(),
                    None => fs::remove_file(index_path(&log)).unwrap(),
                }
                let Some(bytes) = &survivors.log else {
                    assert_eq!(
                        durable, 0,
                        "{d:?}, op {loss}: a log with synced bytes is gone"
                    );
                    continue;
                };
                fs::write(&log, bytes).unwrap();
                let context = format!("{d:?}, power lost at op {loss} of {ops}, tear {tear}");
                // Resumed without syncs: only its bytes are checked here.
                match session::resume(&case, &whole.id, None, 1, Durability::None, &registry) {
                    Ok(_) => resumed += 1,
                    Err(SessionError::NothingRecorded { .. }) => {
                        // Only a log that kept no whole event; never one with synced records.
                        assert!(!bytes.contains(&b'\n'), "{context}: refused with events");
                        nothing += 1;
                        continue;
                    }
                    // The whole run survived (a torn tail after it repaired).
                    Err(SessionError::Finished { .. }) => finished += 1,
                    Err(e) => panic!("{context}: resume failed: {e}"),
                }
                assert_eq!(fs::read(&log).unwrap(), whole_log, "{context}");
                assert!(
                    bytes.len() as u64 >= durable,
                    "{context}: fewer bytes than were synced"
                );
            }
        }
    }
    assert!(resumed >= 100, "only {resumed} cases resumed");
    assert!(nothing >= 4, "only {nothing} cases had nothing recorded");
    eprintln!(
        "engine runs cut by power loss: {resumed} resumed, {nothing} had nothing recorded, \
         {finished} had survived whole"
    );
}
