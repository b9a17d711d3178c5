//! Events per second into PostgreSQL (issue 21, BENCHMARKS.md "PostgreSQL store"), against a
//! throwaway cluster (fsync on, a Unix socket), beside the file home's figures:
//!
//! - `Store::append` of a log's records as they are (built once with `LogWriter`, then split
//!   into records): one transaction per event (batching off), and 100 or 1,000 records per
//!   transaction (batching on);
//! - the worker's path end to end: a `LogWriter` (`Durability::Effect`) with a `PgReplica`
//!   attached, committing every 1, 100 or 1,000 events (each commit syncs the local file, then
//!   appends its records to the store in one transaction);
//! - the file home alone: `LogWriter` syncing every event (`Durability::Group` bounded at one
//!   event: `Event` syncs at step boundaries, which this writer has none of), and committing
//!   every 100 or 1,000 events (`Durability::Effect`).
//!
//! Batched cases write 20,000 events; the cases of one sync or one transaction per event
//! write 5,000, one right after the other. A plain `write` + `fdatasync` loop (no oracle code)
//! is timed before, between and after, since this VM's sync latency swings with other I/O.
//!
//! `cargo bench -p oracle_pg --bench append`. Prints a table; asserts nothing about time.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use oracle_core::Payload;
use oracle_core::payload::{StateChanged, StepScheduled, ToolCalled, ToolReturned};
use oracle_pg::Store;
use oracle_runtime::writer::Writing;
use oracle_runtime::{Durability, LogPaths, LogWriter};
use serde_json::{Map, json};

/// Events per batched case.
const EVENTS: u64 = 20_000;
/// Events per case of one event per sync or per transaction (each costs a sync: a few
/// seconds on a quiet disk, more while other I/O shares it).
const EVENTS_SINGLE: u64 = 5_000;

fn run_started() -> Payload {
    oracle_test_support::run_started("bench", 1, &[])
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

/// Records `events` events at `paths` with `durability`, committing every `commit_every`
/// events. Returns the seconds taken (creating the log included) and the syncs made.
fn record(
    paths: &LogPaths,
    writing: impl Into<Writing>,
    events: u64,
    commit_every: u64,
) -> (f64, u64) {
    let writing = writing.into();
    let t = Instant::now();
    let mut w = LogWriter::create(paths, writing.durability)
        .unwrap()
        .with_replica(writing.replica);
    w.append(0, vec![], run_started()).unwrap();
    for i in 1..events {
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
    events: u64,
    seconds: f64,
    /// Syncs of the file, transactions in the store, or commits of the writer (each one sync
    /// and one transaction).
    commits: u64,
}

/// Keeps a case's figures and prints them at once (the table follows at the end).
fn push(rows: &mut Vec<Row>, row: Row) {
    println!(
        "{}: {} events in {:.2} s, {:.0} events/s",
        row.what,
        row.events,
        row.seconds,
        row.events as f64 / row.seconds
    );
    rows.push(row);
}

/// Checks that the store holds exactly the log at `log`, byte for byte.
fn check(store: &Store, run: &str, log: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let hydrated = store.hydrate(run, dir.path()).unwrap();
    let stored = std::fs::read(hydrated.join("events.jsonl")).unwrap();
    assert!(
        stored == std::fs::read(log).unwrap(),
        "{run}: the store holds the log's bytes"
    );
}

/// Appends `all` to a new run in `store`, `batch` records per transaction.
fn direct(
    rows: &mut Vec<Row>,
    store: &Store,
    scratch: &Path,
    all: &[&[u8]],
    batch: usize,
    source: &Path,
) {
    let (run, fence) = common::held_run(store, scratch);
    let t = Instant::now();
    let mut commits = 0;
    for chunk in all.chunks(batch) {
        let bytes: Vec<u8> = chunk.concat();
        store.append(&run, fence, &bytes, None).unwrap();
        commits += 1;
    }
    let seconds = t.elapsed().as_secs_f64();
    check(store, &run, source);
    push(
        rows,
        Row {
            what: if batch == 1 {
                "Store::append, 1 record per transaction (batching off)".to_owned()
            } else {
                format!(
                    "Store::append, {} records per transaction",
                    thousands(batch as u64)
                )
            },
            events: all.len() as u64,
            seconds,
            commits,
        },
    );
}

/// The worker's path: a writer (`Durability::Effect`) committing every `every` events, each
/// commit syncing its file and then appending its records to the store in one transaction.
fn through_writer(rows: &mut Vec<Row>, store: &Store, scratch: &Path, events: u64, every: u64) {
    let (run, fence) = common::held_run(store, scratch);
    let paths = LogPaths::of_run(&scratch.join("runs").join(format!("replica-{every}")));
    let replica = Arc::new(Mutex::new(store.replica(&run, fence, None)));
    let writing = Writing {
        durability: Durability::Effect,
        replica: Some(replica),
        stores: None,
    };
    let (seconds, _) = record(&paths, writing, events, every);
    check(store, &run, &paths.log);
    push(
        rows,
        Row {
            what: format!(
                "LogWriter + PgReplica, commit every {} event{}",
                thousands(every),
                if every == 1 { "" } else { "s" }
            ),
            events,
            seconds,
            commits: events.div_ceil(every),
        },
    );
}

/// The file home alone: a writer with `durability` committing every `every` events.
fn file_home(
    rows: &mut Vec<Row>,
    scratch: &Path,
    what: &str,
    durability: Durability,
    events: u64,
    every: u64,
) {
    let paths = LogPaths::of_run(&scratch.join("runs").join(format!("file-{}", rows.len())));
    let (seconds, syncs) = record(&paths, durability, events, every);
    push(
        rows,
        Row {
            what: what.to_owned(),
            events,
            seconds,
            commits: syncs,
        },
    );
}

fn thousands(n: u64) -> String {
    if n >= 1000 && n.is_multiple_of(1000) {
        format!("{},000", n / 1000)
    } else {
        n.to_string()
    }
}

fn main() {
    // The machine line first: BENCHMARKS.md names the CPU of every figure.
    eprintln!("{}", oracle_runtime::machine::line());
    // `cargo bench` passes `--bench`; nothing else to parse.
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tmp.path();
    let cluster = common::cluster();
    println!("load average at the start: {}", common::load());
    let url = common::database(&cluster, "append");
    let store = Store::connect(&url).unwrap();
    let version: String = postgres::Client::connect(&url, postgres::NoTls)
        .unwrap()
        .query_one("SHOW server_version", &[])
        .unwrap()
        .get(0);
    println!(
        "PostgreSQL {version}, fsync on, Unix socket; {} events per case ({} one event per sync or transaction)",
        thousands(EVENTS),
        thousands(EVENTS_SINGLE)
    );

    // The same events for every case, built once; the first EVENTS_SINGLE of them are a log of
    // their own (the records of a prefix are the prefix of the records).
    let source = LogPaths::of_file(&scratch.join("source.jsonl"));
    record(&source, Durability::None, EVENTS, EVENTS);
    let log = std::fs::read(&source.log).unwrap();
    let all = records(&log);
    assert_eq!(all.len() as u64, EVENTS);
    let single = &all[..EVENTS_SINGLE as usize];
    let single_source = scratch.join("single.jsonl");
    std::fs::write(&single_source, single.concat()).unwrap();
    println!(
        "records: {} bytes, {:.0} bytes per record on average",
        log.len(),
        log.len() as f64 / EVENTS as f64
    );

    let mut rows: Vec<Row> = Vec::new();
    let mut probes = vec![common::disk_probe(scratch)];
    // One event per sync or per transaction, one case right after the other: they depend on
    // the disk's sync latency, which drifts.
    file_home(
        &mut rows,
        scratch,
        "file home: sync every event (Durability::Group { events_max: 1 })",
        Durability::Group { events_max: 1 },
        EVENTS_SINGLE,
        EVENTS_SINGLE,
    );
    direct(&mut rows, &store, scratch, single, 1, &single_source);
    through_writer(&mut rows, &store, scratch, EVENTS_SINGLE, 1);
    probes.push(common::disk_probe(scratch));
    // Batched.
    for every in [100u64, 1000] {
        file_home(
            &mut rows,
            scratch,
            &format!("file home: commit every {} events", thousands(every)),
            Durability::Effect,
            EVENTS,
            every,
        );
        direct(
            &mut rows,
            &store,
            scratch,
            &all,
            every as usize,
            &source.log,
        );
        through_writer(&mut rows, &store, scratch, EVENTS, every);
    }
    probes.push(common::disk_probe(scratch));

    println!();
    println!(
        "disk probe (write + fdatasync of 545 bytes, plain loop) before, between and after: {}",
        probes
            .iter()
            .map(|p| format!("{p:.0}/s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!();
    println!(
        "| {:<58} | {:>6} | {:>8} | {:>8} | {:>10} |",
        "case", "events", "seconds", "events/s", "syncs/txns"
    );
    println!(
        "| {:-<58} | {:->6} | {:->8} | {:->8} | {:->10} |",
        "", "", "", "", ""
    );
    for r in &rows {
        println!(
            "| {:<58} | {:>6} | {:>8.2} | {:>8.0} | {:>10} |",
            r.what,
            r.events,
            r.seconds,
            r.events as f64 / r.seconds,
            r.commits
        );
    }
}
