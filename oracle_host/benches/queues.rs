//! Benchmarks of named queues (BENCHMARKS.md, "Named queues"): what a queue adds to a run's
//! start on a file home (taking a ticket, being picked, giving it back: three locked reads and
//! writes of the queue's state), and 1,000 queued runs of a store draining at the queue's rate
//! through a worker of four threads. Plain timings (no criterion): `cargo bench -p oracle_host
//! --bench queues`, or in the dev profile `cargo test -p oracle_host --bench queues`.

// Host errors carry the runtime's session errors whole, large on purpose (oracle_host/src/lib.rs).
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use oracle_host::queue::{Ask, Queue};
use oracle_host::{Database, Home, Start, StartOptions, worker};

/// Starts measured on a file home.
const STARTS: usize = 2_000;
/// Runs queued in the store.
const QUEUED: usize = 1_000;
/// The store queue's rate, starts a second.
const RATE_PER_S: u32 = 50;

fn ask(priority: u8) -> Ask {
    Ask {
        queue: "q".into(),
        priority,
        partition: None,
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A queue's overhead per start on a file home, with `waiting` other runs of a lower priority
/// waiting in it (held by this process, never started).
fn file_home(waiting: usize) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    home.queue_set(Queue {
        name: "q".into(),
        concurrency: 1,
        rate: None,
        partition_concurrency: None,
    })
    .unwrap();
    // Held, never waited on: they wait below every measured start's priority, so each
    // measured start takes the queue's one place past all of them.
    let blocker = home.queue_take(&ask(9), "blocker").unwrap();
    let held: Vec<_> = (0..waiting)
        .map(|i| home.queue_take(&ask(0), &format!("waiting-{i}")).unwrap())
        .collect();
    drop(blocker);
    let mut times = Vec::with_capacity(STARTS);
    for i in 0..STARTS {
        let t = Instant::now();
        let mine = ask(9);
        let ticket = home.queue_take(&mine, &format!("run-{i}")).unwrap();
        ticket.wait(&mut |_| {}).unwrap();
        drop(ticket);
        times.push(t.elapsed());
    }
    drop(held);
    times.sort();
    let total: Duration = times.iter().sum();
    println!(
        "file home, {waiting} waiting: {STARTS} starts, mean {:.0} µs, p50 {:.0} µs, p99 {:.0} µs",
        micros(total) / STARTS as f64,
        micros(times[STARTS / 2]),
        micros(times[STARTS * 99 / 100]),
    );
}

/// 1,000 runs of a one-step plan queued at [`RATE_PER_S`] a second, drained by a worker of
/// four threads: the wall time, and the rate it came to.
fn store() {
    let Some(cluster) = oracle_pg::cluster::shared() else {
        println!("store: skipped (no PostgreSQL)");
        return;
    };
    let url = cluster.database("bench_queues").unwrap();
    Database::init(&url).unwrap();
    let db = Database::connect(&url).unwrap();
    db.queue_set(Queue {
        name: "q".into(),
        concurrency: 4,
        rate: Some(format!("{RATE_PER_S}/s")),
        partition_concurrency: None,
    })
    .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let home = Home::open(scratch.path()).unwrap();
    let plan = "plan one version 1\n\nc = text.count { text: \"one two\" }\n";
    let opts = StartOptions {
        plan_text: Some(plan.into()),
        ..StartOptions::new(scratch.path(), &scratch.path().join("one.plan"))
    };
    let Start::New(prepared) = home
        .prepare_submission(opts, &Default::default(), Vec::new())
        .unwrap()
    else {
        panic!("a new run");
    };
    for _ in 0..QUEUED {
        db.submit_queued(&prepared, (None, None), None, Some(&ask(0)))
            .unwrap();
    }
    let work = tempfile::tempdir().unwrap();
    let settings = worker::Settings {
        url: url.clone(),
        name: "bench".into(),
        concurrency: 4,
        lease_ms: 30_000,
        poll_ms: 10,
        until_idle: true,
        scratch: work.path().to_path_buf(),
        tools: Vec::new(),
        oracle_cmd: None,
        scorer_cmd: None,
        snapshot_every: None,
        metrics: None,
        agents: Default::default(),
        rates: Default::default(),
    };
    let t = Instant::now();
    worker::run(
        settings,
        Arc::new(AtomicBool::new(false)),
        Arc::new(|_: &str| {}),
    )
    .unwrap();
    let wall = t.elapsed().as_secs_f64();
    let done = db
        .runs()
        .unwrap()
        .iter()
        .filter(|r| r.state == "completed")
        .count();
    println!(
        "store: {done} of {QUEUED} queued runs completed in {wall:.2} s at {RATE_PER_S}/s \
         configured: {:.1} starts/s (ideal {:.2} s)",
        done as f64 / wall,
        QUEUED as f64 / f64::from(RATE_PER_S),
    );
}

fn main() {
    println!("{}", oracle_host::machine_line());
    file_home(0);
    file_home(1_000);
    store();
}
