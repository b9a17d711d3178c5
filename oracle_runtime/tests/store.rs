//! The run store on a real filesystem: writing, reopening, locking, repair, durability modes,
//! the parallel file verifier against the in-memory reference, and snapshots.

use std::fs;
use std::path::Path;

use oracle_core::payload::*;
use oracle_core::synth::{SynthConfig, synth_events};
use oracle_core::verify::{LogBytesError, verify_bytes};
use oracle_core::{Event, Hash, Head, Recorder, State, record, replay};
use oracle_runtime::repair::{self, Repair};
use oracle_runtime::snapshots;
use oracle_runtime::{
    Durability, LogPaths, LogWriter, StoreError, VerifyOptions, reader, verify_file,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn run_paths(root: &Path) -> LogPaths {
    LogPaths::of_run(&root.join("runs").join("r1"))
}

fn run_started() -> Payload {
    oracle_test_support::run_started("store-test", 1, &["fs:read:data/**"])
}

/// Appends step `n` the way the runtime does (scheduled, called, returned, state written) and
/// commits at its end, which is where durability policies sync. Returns the state write's seq.
fn append_step(w: &mut LogWriter, n: u64, after: u64) -> u64 {
    let step = format!("step{n}");
    let time = n + 1;
    let sched = w
        .append(
            time,
            vec![after],
            Payload::StepScheduled(StepScheduled {
                step: step.clone(),
                tool: "text.count".into(),
                attempt: 1,
            }),
        )
        .unwrap()
        .seq;
    let call = w
        .append(
            time,
            vec![sched],
            Payload::ToolCalled(ToolCalled {
                step: step.clone(),
                tool: "text.count".into(),
                tool_version: "1.0.0".into(),
                attempt: 1,
                input: json!({"n": n}),
            }),
        )
        .unwrap()
        .seq;
    let ret = w
        .append(
            time,
            vec![call],
            Payload::ToolReturned(ToolReturned {
                step: step.clone(),
                tool: "text.count".into(),
                attempt: 1,
                output: json!(n * 10),
            }),
        )
        .unwrap()
        .seq;
    let mut set = Map::new();
    set.insert(step, json!(n * 10));
    let done = w
        .append(
            time,
            vec![ret],
            Payload::StateChanged(StateChanged {
                set,
                delete: vec![],
            }),
        )
        .unwrap()
        .seq;
    w.commit().unwrap();
    done
}

/// Writes a complete small run (start, `steps` steps) and returns its head.
fn write_run(paths: &LogPaths, durability: Durability, steps: u64) -> Head {
    let mut w = LogWriter::create(paths, durability).unwrap();
    let mut last = w.append(0, vec![], run_started()).unwrap().seq;
    for n in 0..steps {
        last = append_step(&mut w, n, last);
    }
    w.close().unwrap()
}

/// Verifies a log that must be valid.
fn verify(path: &Path) -> oracle_runtime::VerifySummary {
    let opts = VerifyOptions {
        threads: 2,
        expected_head: None,
    };
    verify_file(path, opts).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn reopened_log_continues_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let paths = run_paths(dir.path());
    let first = write_run(&paths, Durability::DEFAULT, 2);
    assert_eq!(first.next_seq, 9);

    let mut w = LogWriter::open(&paths, Durability::DEFAULT).unwrap();
    assert_eq!(w.head(), first, "reopening recovers the head");
    assert_eq!(w.state().get("step1"), Some(json!(10)), "and the state");
    let next = w
        .append(
            3,
            vec![first.next_seq - 1],
            Payload::StepScheduled(StepScheduled {
                step: "step2".into(),
                tool: "t".into(),
                attempt: 1,
            }),
        )
        .unwrap();
    assert_eq!(next.seq, first.next_seq);
    assert_eq!(
        next.prev, first.hash,
        "the first new event links to the old head"
    );
    let end = w.close().unwrap();

    let summary = verify(&paths.log);
    assert_eq!((summary.events, summary.head), (10, end));
    let events = reader::read_all(&paths.log).unwrap();
    assert!(
        events
            .windows(2)
            .all(|w| w[1].prev == w[0].hash && w[1].seq == w[0].seq + 1)
    );
}

#[test]
fn an_appended_event_that_breaks_the_rules_is_refused_and_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let paths = run_paths(dir.path());
    let head = write_run(&paths, Durability::Event, 1);
    let before = fs::read(&paths.log).unwrap();
    let mut w = LogWriter::open(&paths, Durability::Event).unwrap();
    // Time going backwards would make the log unverifiable: the writer must refuse it.
    let err = w
        .append(
            0,
            vec![],
            Payload::StepScheduled(StepScheduled {
                step: "s".into(),
                tool: "t".into(),
                attempt: 1,
            }),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Record { .. }), "{err}");
    assert_eq!(w.head(), head);
    drop(w);
    assert_eq!(fs::read(&paths.log).unwrap(), before);
}

#[test]
fn a_second_writer_is_refused_while_the_first_is_alive() {
    let dir = tempfile::tempdir().unwrap();
    let paths = run_paths(dir.path());
    let mut w = LogWriter::create(&paths, Durability::DEFAULT).unwrap();
    w.append(0, vec![], run_started()).unwrap();
    w.commit().unwrap();

    let locked = |r: Result<LogWriter, StoreError>| match r {
        Err(StoreError::Locked { lock, .. }) => assert_eq!(lock, paths.lock()),
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("a second writer was allowed"),
    };
    locked(LogWriter::open(&paths, Durability::DEFAULT));
    locked(LogWriter::create(&paths, Durability::DEFAULT));
    // Repair would truncate the log under the writer: it must wait its turn too.
    assert!(matches!(
        repair::repair(&paths),
        Err(StoreError::Locked { .. })
    ));

    drop(w);
    let w = LogWriter::open(&paths, Durability::DEFAULT).unwrap();
    assert_eq!(w.head().next_seq, 1);
}

#[test]
fn creating_over_an_existing_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let paths = run_paths(dir.path());
    write_run(&paths, Durability::DEFAULT, 1);
    let before = fs::read(&paths.log).unwrap();
    assert!(matches!(
        LogWriter::create(&paths, Durability::DEFAULT),
        Err(StoreError::AlreadyExists { .. })
    ));
    assert_eq!(fs::read(&paths.log).unwrap(), before);
}

/// Appends the first half of one more valid record, as a crash mid-write leaves it.
fn tear(paths: &LogPaths, head: Head) -> Vec<u8> {
    let mut r = Recorder::resume(
        head,
        replay::replay(&reader::read_all(&paths.log).unwrap()).unwrap(),
    )
    .unwrap();
    let e = r
        .record(
            head.time,
            vec![],
            Payload::StepScheduled(StepScheduled {
                step: "late".into(),
                tool: "t".into(),
                attempt: 1,
            }),
        )
        .unwrap();
    let rec = record::encode(&e);
    let torn = rec[..rec.len() / 2].to_vec();
    let mut bytes = fs::read(&paths.log).unwrap();
    bytes.extend_from_slice(&torn);
    fs::write(&paths.log, bytes).unwrap();
    torn
}

#[test]
fn a_torn_tail_is_refused_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let paths = run_paths(dir.path());
    let head = write_run(&paths, Durability::DEFAULT, 1);
    tear(&paths, head);
    match LogWriter::open(&paths, Durability::DEFAULT) {
        Err(StoreError::Log {
            error: LogBytesError::TornTail { seq, .. },
            ..
        }) => assert_eq!(seq, head.next_seq),
        Err(e) => panic!("expected a torn tail error, got {e}"),
        Ok(_) => panic!("a log with a torn tail was opened for appending"),
    }
}

/// Every way a reader reads a whole log: its events, or the error it reports.
#[allow(clippy::result_large_err)]
fn read_every_way(paths: &LogPaths) -> Vec<Result<u64, StoreError>> {
    let scanned = reader::scan(&paths.log, false, |_| Ok(true)).map(|end| {
        assert_eq!(end.torn_tail, None);
        end.head.next_seq
    });
    vec![
        verify_file(
            &paths.log,
            VerifyOptions {
                threads: 1,
                expected_head: None,
            },
        )
        .map(|s| s.events),
        verify_file(
            &paths.log,
            VerifyOptions {
                threads: 2,
                expected_head: None,
            },
        )
        .map(|s| s.events),
        scanned,
        oracle_runtime::recorded::Recorded::read(&paths.log).map(|r| r.len()),
        reader::read_all(&paths.log).map(|events| events.len() as u64),
    ]
}

#[test]
fn a_partial_last_line_is_not_yet_written_while_its_writer_is_live_and_torn_once_it_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let paths = run_paths(dir.path());
    let head = write_run(&paths, Durability::DEFAULT, 2);
    let complete = fs::read(&paths.log).unwrap();
    // A live writer holds the lock while the OS copies its record into the file; a reader can
    // catch the first half of it.
    let writer_lock = oracle_runtime::writer::lock_for_maintenance(&paths).unwrap();
    tear(&paths, head);
    for (i, read) in read_every_way(&paths).into_iter().enumerate() {
        assert_eq!(
            read.unwrap_or_else(|e| panic!("reader {i} saw a record being written as damage: {e}")),
            head.next_seq,
            "readers see the log as it was before the record"
        );
    }
    let summary = verify(&paths.log);
    assert_eq!((summary.head, summary.bytes), (head, complete.len() as u64));
    // The writer died without finishing the record: now it is a torn tail for every reader.
    drop(writer_lock);
    for read in read_every_way(&paths) {
        match read {
            Err(StoreError::Log {
                error: LogBytesError::TornTail { seq, offset, .. },
                ..
            }) => assert_eq!((seq, offset), (head.next_seq, complete.len() as u64)),
            other => panic!("expected a torn tail, got {other:?}"),
        }
    }
}

#[test]
fn repair_moves_exactly_the_torn_bytes_aside() {
    let dir = tempfile::tempdir().unwrap();
    let paths = run_paths(dir.path());
    let head = write_run(&paths, Durability::DEFAULT, 2);
    let valid = fs::read(&paths.log).unwrap();
    let torn = tear(&paths, head);

    let (kept, offset, len, saved_to) = match repair::repair(&paths).unwrap() {
        Repair::MovedTornTail {
            head,
            offset,
            len,
            saved_to,
        } => (head, offset, len, saved_to),
        other => panic!("expected a repair, got {other:?}"),
    };
    assert_eq!(kept, head);
    assert_eq!((offset, len), (valid.len() as u64, torn.len() as u64));
    assert!(
        saved_to.starts_with(paths.torn_dir()),
        "{}",
        saved_to.display()
    );
    assert_eq!(
        fs::read(&saved_to).unwrap(),
        torn,
        "the saved file holds exactly the cut bytes"
    );
    assert_eq!(
        fs::read(&paths.log).unwrap(),
        valid,
        "the valid prefix is kept byte for byte"
    );
    assert_eq!(verify(&paths.log).head, head);

    // Repairing again finds nothing to do; the log is appendable again.
    assert_eq!(repair::repair(&paths).unwrap(), Repair::Clean { head });
    let mut w = LogWriter::open(&paths, Durability::DEFAULT).unwrap();
    append_step(&mut w, 2, head.next_seq - 1);
    let end = w.close().unwrap();
    assert_eq!(verify(&paths.log).head, end);
    assert_eq!(end.next_seq, head.next_seq + 4);
}

#[test]
fn repair_refuses_damage_before_the_tail_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let paths = run_paths(dir.path());
    let head = write_run(&paths, Durability::DEFAULT, 2);
    tear(&paths, head);
    // Damage record 2 as well: a torn tail after a bad record must not be "repaired" either.
    let mut bytes = fs::read(&paths.log).unwrap();
    let (lines, _) = oracle_core::verify::split_records(&bytes);
    let (offset, line) = lines.into_iter().nth(2).unwrap();
    let at = offset as usize + line.windows(5).position(|w| w == b"step0").unwrap();
    bytes[at] = b'S';
    fs::write(&paths.log, &bytes).unwrap();

    let err = repair::repair(&paths).unwrap_err();
    assert!(err.is_integrity(), "{err}");
    assert!(
        matches!(&err, StoreError::Log { error: LogBytesError::Integrity { error, .. }, .. } if error.seq == 2),
        "{err}"
    );
    assert_eq!(
        fs::read(&paths.log).unwrap(),
        bytes,
        "the log is left exactly as it was"
    );
    assert!(!paths.torn_dir().exists(), "nothing was saved aside");
}

#[test]
fn every_durability_mode_writes_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let modes = [
        Durability::Event,
        Durability::Group { events_max: 3 },
        Durability::DEFAULT,
        Durability::None,
    ];
    let logs: Vec<Vec<u8>> = modes
        .iter()
        .enumerate()
        .map(|(i, &mode)| {
            let paths = LogPaths::of_file(&dir.path().join(format!("{i}.jsonl")));
            write_run(&paths, mode, 5);
            fs::read(&paths.log).unwrap()
        })
        .collect();
    assert!(
        logs.windows(2).all(|w| w[0] == w[1]),
        "durability changed the bytes written"
    );
    assert!(verify_bytes(&logs[0], None).is_ok());
}

#[test]
fn dropping_a_writer_without_close_still_writes_everything_appended() {
    let dir = tempfile::tempdir().unwrap();
    let paths = run_paths(dir.path());
    let mut w = LogWriter::create(&paths, Durability::None).unwrap();
    w.append(0, vec![], run_started()).unwrap();
    let head = w.head();
    drop(w);
    assert_eq!(verify(&paths.log).head, head);
}

/// Compares the file verifier, with each of `threads`, with the in-memory reference on the same
/// bytes.
fn same_as_reference(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    expected_head: Option<Hash>,
    threads: &[usize],
) -> Result<(), TestCaseError> {
    let path = dir.join(name);
    fs::write(&path, bytes).unwrap();
    let reference = verify_bytes(bytes, expected_head);
    for &threads in threads {
        let got = verify_file(
            &path,
            VerifyOptions {
                threads,
                expected_head,
            },
        );
        match (&got, &reference) {
            (Ok(s), Ok(h)) => {
                prop_assert_eq!(s.head, *h);
                prop_assert_eq!(s.events, h.next_seq);
                prop_assert_eq!(s.bytes, bytes.len() as u64);
            }
            (Err(StoreError::Log { error, .. }), Err(r)) => {
                prop_assert_eq!(error, r, "threads {}", threads)
            }
            _ => {
                return Err(TestCaseError::fail(format!(
                    "threads {threads}: file verifier says {got:?}, reference says {reference:?}"
                )));
            }
        }
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Mutation {
    None,
    /// XOR one byte with a non-zero mask.
    Byte(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::None),
        (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, m)| Mutation::Byte(i, m)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn file_verifier_agrees_with_the_reference(
        events in 1u64..40,
        seed in any::<u64>(),
        m in mutation(),
        check_head in any::<bool>(),
    ) {
        let log = synth_events(SynthConfig::steps(events, seed)).unwrap();
        let mut bytes: Vec<u8> = log.iter().flat_map(record::encode).collect();
        let head = log.last().map(|e| e.hash);
        match m {
            Mutation::None => {}
            Mutation::Byte(i, mask) => {
                let at = i.index(bytes.len());
                bytes[at] ^= mask;
            }
            Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len())),
        }
        let dir = tempfile::tempdir().unwrap();
        same_as_reference(dir.path(), "log.jsonl", &bytes, head.filter(|_| check_head), &[1, 2])?;
    }
}

/// Logs bigger than one read block (8 MiB): records straddle the block boundary, and damage
/// next to it must be reported exactly as the reference does.
#[test]
fn file_verifier_agrees_across_block_boundaries() {
    let mut r = Recorder::new();
    let mut events: Vec<Event> = vec![r.record(0, vec![], run_started()).unwrap()];
    for i in 0..9u64 {
        // 1 MiB outputs: nine of them cross the block boundary in the middle of a record.
        let text = format!("{i}").repeat(1 << 20);
        let p = Payload::ToolReturned(ToolReturned {
            step: format!("s{i}"),
            tool: "fs.read".into(),
            attempt: 1,
            output: Value::String(text),
        });
        events.push(r.record(i + 1, vec![], p).unwrap());
    }
    let bytes: Vec<u8> = events.iter().flat_map(record::encode).collect();
    let block = reader::BLOCK_BYTES;
    assert!(bytes.len() > block);
    let dir = tempfile::tempdir().unwrap();
    let head = events.last().map(|e| e.hash);
    // Two threads only: single-threaded agreement is covered above, and each pass over 9 MiB
    // costs about half a second in a debug build.
    same_as_reference(dir.path(), "valid.jsonl", &bytes, head, &[2]).unwrap();

    let mut damaged = bytes.clone();
    damaged[block + 10] ^= 1;
    same_as_reference(dir.path(), "damaged.jsonl", &damaged, None, &[2]).unwrap();

    let torn = &bytes[..block + 10];
    same_as_reference(dir.path(), "torn.jsonl", torn, None, &[2]).unwrap();

    // The streaming reader sees the same events as the bytes hold.
    let read = reader::read_all(&dir.path().join("valid.jsonl")).unwrap();
    assert_eq!(read, events);
}

/// A run with several state writes, and the state after each event by replay from genesis.
fn snapshot_run(root: &Path) -> (LogPaths, Vec<Event>) {
    let paths = run_paths(root);
    let events = synth_events(SynthConfig::steps(41, 3)).unwrap();
    let mut w = LogWriter::create(&paths, Durability::None).unwrap();
    for e in &events {
        w.append_sealed(e).unwrap();
    }
    w.close().unwrap();
    (paths, events)
}

fn genesis_state(events: &[Event], seq: u64) -> State {
    replay::replay(&events[..=seq as usize]).unwrap()
}

#[test]
fn snapshots_are_used_and_give_the_replayed_state() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, events) = snapshot_run(dir.path());
    let (snap, path) = snapshots::take(&paths, Some(20)).unwrap();
    assert_eq!(snap.seq, 20);
    assert_eq!(path, snapshots::path_of(&paths, 20));
    assert_eq!(snapshots::list(&paths).unwrap(), [20]);

    for at in [Some(20), Some(33), None] {
        let r = snapshots::state_at(&paths, at, true).unwrap();
        assert_eq!(r.from_snapshot, Some(20), "at {at:?}");
        assert!(r.rejected.is_empty());
        assert_eq!(r.state, genesis_state(&events, r.seq), "at {at:?}");
        assert_eq!(r.event, events[r.seq as usize]);
    }
    // A snapshot after the requested event cannot help.
    let early = snapshots::state_at(&paths, Some(10), true).unwrap();
    assert_eq!(early.from_snapshot, None);
    assert_eq!(early.state, genesis_state(&events, 10));
    // Asked not to, it does not use snapshots at all.
    assert_eq!(
        snapshots::state_at(&paths, None, false)
            .unwrap()
            .from_snapshot,
        None
    );
}

fn edit_snapshot(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
    edit(&mut v);
    fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn a_tampered_snapshot_is_rejected_and_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, events) = snapshot_run(dir.path());
    let (_, path) = snapshots::take(&paths, Some(30)).unwrap();
    edit_snapshot(&path, |v| {
        let entries = v["entries"].as_object_mut().unwrap();
        let first = entries.values_mut().next().unwrap();
        *first = json!({"words": 999_999_999});
    });

    let r = snapshots::state_at(&paths, None, true).unwrap();
    assert_eq!(r.from_snapshot, None);
    assert_eq!(r.rejected.len(), 1);
    assert_eq!(r.rejected[0].0, 30);
    assert!(r.rejected[0].1.contains("corrupt"), "{}", r.rejected[0].1);
    assert_eq!(r.state, genesis_state(&events, 40));
}

#[test]
fn a_consistent_snapshot_of_another_state_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, events) = snapshot_run(dir.path());
    snapshots::take(&paths, Some(10)).unwrap();
    let (_, path) = snapshots::take(&paths, Some(30)).unwrap();
    // A forger who also fixes `state_hash` still cannot match what the log recorded.
    edit_snapshot(&path, |v| {
        let mut entries: Map<String, Value> = v["entries"].as_object().unwrap().clone();
        entries.insert("forged".into(), json!(true));
        let state = State::from_entries(entries.clone()).unwrap();
        v["entries"] = Value::Object(entries);
        v["state_hash"] = json!(state.hash());
    });

    let r = snapshots::state_at(&paths, Some(35), true).unwrap();
    assert_eq!(r.rejected.len(), 1);
    assert!(
        r.rejected[0].1.contains("does not match the log"),
        "{}",
        r.rejected[0].1
    );
    assert_eq!(
        r.from_snapshot,
        Some(10),
        "the next older snapshot that matches is used"
    );
    assert_eq!(r.state, genesis_state(&events, 35));
    assert!(r.state.get("forged").is_none());
}
