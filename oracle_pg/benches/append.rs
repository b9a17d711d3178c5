//! Events per second into PostgreSQL (issue 21, BENCHMARKS.md "PostgreSQL store"), against a
//! throwaway cluster (fsync on, a Unix socket), beside the file home's figures:
//!
//! - `Store::append` of a log's records as they are (built once with `LogWriter`, then split
//!   into records): one transaction per event (batching off), and 100 or 1,000 records per
//!   transaction (batching on);
//! - the worker's path end to end: a `LogWriter` (`Durability::Effect`) with a `PgReplica`
//!   attached, committing every 1, 100 or 1,000 events (each commit syncs the local file, then
//!   appends its records to the store in one transaction);
//! - the file home alone: `LogWriter` syncing every event (`Durability::Event`), and committing
//!   every 100 or 1,000 events (`Durability::Effect`).
//!
//! `cargo bench -p oracle_pg --bench append`. Prints a table; asserts nothing about time.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use oracle_core::payload::{RunStarted, StateChanged, StepScheduled, ToolCalled, ToolReturned};
use oracle_core::{Hash, Payload};
use oracle_pg::Store;
use oracle_runtime::{Durability, LogPaths, LogWriter, replica};
use serde_json::{Map, json};

/// Events per case.
const EVENTS: u64 = 20_000;

fn run_started() -> Payload {
    Payload::RunStarted(RunStarted {
        format: None,
        program: "bench".into(),
        program_hash: Hash::ZERO,
        seed: 1,
        grants: vec![],
        inputs: Map::new(),
        budget: None,
        tools: None,
        memory: None,
    })
}

/// Event `i` (from 1) of a run of steps of four events each, as the runtime records a pure
/// step: scheduled, called, returned, state written.
fn event(i: u64) -> Payload {
    let n = (i - 1) / 4;
    let step = format!("step{n}");
    match (i - 1) % 4 {
        0 => Payload::StepScheduled(StepScheduled {
            step,
            tool: "text.count".into(),
            attempt: 1,
        }),
        1 => Payload::ToolCalled(ToolCalled {
            step,
            tool: "text.count".into(),
            tool_version: "1.0.0".into(),
            attempt: 1,
            input: json!({"text": format!("the words of step {n}")}),
        }),
        2 => Payload::ToolReturned(ToolReturned {
            step,
            tool: "text.count".into(),
            attempt: 1,
            output: json!({"chars": 20, "words": 5, "lines": 1}),
        }),
        _ => {
            let mut set = Map::new();
            set.insert(step, json!({"words": 5}));
            Payload::StateChanged(StateChanged {
                set,
                delete: vec![],
            })
        }
    }
}

/// Records `EVENTS` events at `paths` with `durability`, committing every `commit_every`
/// events. Returns the seconds taken (creating the log included) and the syncs made.
fn record(paths: &LogPaths, durability: Durability, commit_every: u64) -> (f64, u64) {
    let t = Instant::now();
    let mut w = LogWriter::create(paths, durability).unwrap();
    w.append(0, vec![], run_started()).unwrap();
    for i in 1..EVENTS {
        w.append((i - 1) / 4 + 1, vec![i - 1], event(i)).unwrap();
        if (i + 1) % commit_every == 0 {
            w.commit().unwrap();
        }
    }
    w.commit().unwrap();
    let syncs = w.syncs();
    w.close().unwrap();
    (t.elapsed().as_secs_f64(), syncs)
}

/// A log's bytes split into whole records.
fn records(log: &[u8]) -> Vec<&[u8]> {
    log.split_inclusive(|&b| b == b'\n').collect()
}

struct Row {
    what: String,
    seconds: f64,
    commits: u64,
}

/// Keeps a case's figures and prints them at once (the table follows at the end).
fn push(rows: &mut Vec<Row>, row: Row) {
    println!(
        "{}: {:.2} s, {:.0} events/s",
        row.what,
        row.seconds,
        EVENTS as f64 / row.seconds
    );
    rows.push(row);
}

fn check(store: &Store, run: &str, log: &Path) {
    let row = store
        .runs()
        .unwrap()
        .into_iter()
        .find(|r| r.id == run)
        .unwrap();
    assert_eq!(row.events as u64, EVENTS, "{run}: every event stored");
    let dir = tempfile::tempdir().unwrap();
    let hydrated = store.hydrate(run, dir.path()).unwrap();
    let stored = std::fs::read(hydrated.join("events.jsonl")).unwrap();
    assert!(
        stored == std::fs::read(log).unwrap(),
        "{run}: the store holds the log's bytes"
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tmp.path();
    let cluster = common::cluster();
    let url = common::database(&cluster, "append");
    let store = Store::connect(&url).unwrap();
    let version: String = postgres::Client::connect(&url, postgres::NoTls)
        .unwrap()
        .query_one("SHOW server_version", &[])
        .unwrap()
        .get(0);
    println!("PostgreSQL {version}, fsync on, Unix socket; {EVENTS} events per case");

    let mut rows: Vec<Row> = Vec::new();

    // The file home alone.
    for (n, (what, durability, every)) in [
        (
            "file home: Durability::Event (sync every event)",
            Durability::Event,
            EVENTS,
        ),
        (
            "file home: commit every 100 events",
            Durability::Effect,
            100,
        ),
        (
            "file home: commit every 1,000 events",
            Durability::Effect,
            1000,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let paths = LogPaths::of_run(&scratch.join("runs").join(format!("file-{n}")));
        let (seconds, syncs) = record(&paths, durability, every);
        push(
            &mut rows,
            Row {
                what: what.to_owned(),
                seconds,
                commits: syncs,
            },
        );
    }

    // A log to append as it is: the same events, built once.
    let source = LogPaths::of_file(&scratch.join("source.jsonl"));
    record(&source, Durability::None, EVENTS);
    let log = std::fs::read(&source.log).unwrap();
    let all = records(&log);
    assert_eq!(all.len() as u64, EVENTS);
    println!(
        "records: {} bytes, {:.0} bytes per record on average",
        log.len(),
        log.len() as f64 / EVENTS as f64
    );

    // Store::append of ready records, batching off and on.
    for batch in [1usize, 100, 1000] {
        let (run, fence) = common::held_run(&store, scratch);
        let t = Instant::now();
        let mut commits = 0;
        for chunk in all.chunks(batch) {
            let bytes: Vec<u8> = chunk.concat();
            store.append(&run, fence, &bytes, None).unwrap();
            commits += 1;
        }
        let seconds = t.elapsed().as_secs_f64();
        check(&store, &run, &source.log);
        push(
            &mut rows,
            Row {
                what: if batch == 1 {
                    "Store::append, 1 record per transaction (batching off)".to_owned()
                } else {
                    format!("Store::append, {batch} records per transaction")
                },
                seconds,
                commits,
            },
        );
    }

    // The worker's path: the writer syncs its file, then commits to the store, at each commit.
    for every in [1u64, 100, 1000] {
        let (run, fence) = common::held_run(&store, scratch);
        let paths = LogPaths::of_run(&scratch.join("runs").join(format!("replica-{every}")));
        let replica = Arc::new(Mutex::new(store.replica(&run, fence, None)));
        replica::attach(&paths.log, replica);
        let (seconds, _) = record(&paths, Durability::Effect, every);
        replica::detach(&paths.log);
        check(&store, &run, &paths.log);
        push(
            &mut rows,
            Row {
                what: format!(
                    "LogWriter + PgReplica, commit every {} event{}",
                    if every == 1000 {
                        "1,000".to_owned()
                    } else {
                        every.to_string()
                    },
                    if every == 1 { "" } else { "s" }
                ),
                seconds,
                commits: EVENTS.div_ceil(every),
            },
        );
    }

    println!();
    println!(
        "| {:<58} | {:>8} | {:>10} | {:>12} |",
        "case", "seconds", "events/s", "syncs/txns"
    );
    println!("| {:-<58} | {:->8} | {:->10} | {:->12} |", "", "", "", "");
    for r in &rows {
        println!(
            "| {:<58} | {:>8.2} | {:>10.0} | {:>12} |",
            r.what,
            r.seconds,
            EVENTS as f64 / r.seconds,
            r.commits
        );
    }
}
