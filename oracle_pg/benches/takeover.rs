//! Time from a worker's death to its run going on elsewhere (issue 21, BENCHMARKS.md
//! "PostgreSQL store"), with the real binary. Two workers, A and B, wait on an empty store; a
//! run of a long chain of impure steps (`proc.exec sleep 0.05`, each committed to the store
//! before it starts) is submitted; once the store holds some of its events (and after a delay
//! that differs per trial, 0 to 4/5 of the lease, so that the kill falls at different points of
//! the lease's renewal and of the idle worker's poll), the worker holding it is killed
//! (SIGKILL), and the store is polled every 10 ms until the run's event count grows again: the
//! other worker has claimed it (its lease having expired), written it into its scratch home,
//! resumed it, and committed.
//!
//! Per case, 5 trials: `--lease-ms` 1000 and 3000 with the default `--poll-ms` (1000: an
//! expired lease sends no notification, so the idle worker finds it at its next poll), and
//! `--lease-ms 1000 --poll-ms 100` to show the poll's share.
//!
//! Needs the release binary: `cargo build -p oracle_cli --release` first (same
//! `CARGO_TARGET_DIR`), or `ORACLE_BIN=/path/to/oracle`. Then
//! `cargo bench -p oracle_pg --bench takeover`. Prints a table; asserts nothing about time.

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use oracle_pg::cluster::Cluster;
use oracle_pg::{RunRow, Store};

/// Trials per case.
const TRIALS: usize = 5;
/// Steps of the long run (far more than a trial lets it reach).
const STEPS: usize = 400;
/// Events the store must hold before the holder is killed.
const EVENTS_BEFORE_KILL: i64 = 12;
const POLL: Duration = Duration::from_millis(10);

fn plan() -> String {
    let mut s = String::from("plan slow version 1\ngrant proc:exec:sleep\n\n");
    for i in 1..=STEPS {
        s.push_str(&format!(
            "s{i} = proc.exec {{ program: \"sleep\", args: [\"0.05\"] }}\n"
        ));
        if i > 1 {
            s.push_str(&format!("  after s{}\n", i - 1));
        }
    }
    s
}

fn row(store: &Store) -> Option<RunRow> {
    store.runs().unwrap().into_iter().next()
}

struct Trial {
    /// Lease left on the run when its holder was killed.
    lease_left_ms: i64,
    /// From the kill until the store held a new event.
    continued_ms: f64,
    /// From the kill until the other worker's claim was seen (fence bumped).
    claimed_ms: f64,
    events_at_kill: i64,
    /// The first events the new holder appended (kind and step).
    first_new: Vec<String>,
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One trial: the holder is killed `delay_ms` after the store first holds
/// `EVENTS_BEFORE_KILL` events (the delays spread the kill over the lease's renewal cycle and
/// the idle worker's poll cycle).
fn trial(
    bin: &Path,
    cluster: &Cluster,
    dir: &Path,
    lease_ms: u64,
    poll_ms: u64,
    delay_ms: u64,
) -> Trial {
    let url = common::database(cluster, "takeover");
    let store = Store::connect(&url).unwrap();
    let scratch = dir.join(format!("scratch-{lease_ms}-{poll_ms}"));
    std::fs::create_dir_all(&scratch).unwrap();
    let (lease, poll) = (lease_ms.to_string(), poll_ms.to_string());
    let mut workers: Vec<(String, Option<Killed>)> = ["A", "B"]
        .into_iter()
        .map(|name| {
            let child = common::worker(
                bin,
                dir,
                &scratch,
                &url,
                &["--name", name, "--lease-ms", &lease, "--poll-ms", &poll],
            );
            (name.to_owned(), Some(Killed(child)))
        })
        .collect();
    // Both listening before the run is queued.
    std::thread::sleep(Duration::from_millis(500));
    common::oracle(bin, dir, &["submit", "slow.plan", "--store", &url]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let before = loop {
        assert!(
            Instant::now() < deadline,
            "the run never started: {:?}\n{}",
            row(&store),
            common::worker_logs(&scratch)
        );
        if let Some(r) = row(&store)
            && r.events >= EVENTS_BEFORE_KILL
        {
            break r;
        }
        std::thread::sleep(POLL);
    };
    std::thread::sleep(Duration::from_millis(delay_ms));
    let holder = row(&store)
        .and_then(|r| r.worker)
        .expect("a running run has a holder");
    assert_eq!(before.claims, 1);
    let (_, slot) = workers.iter_mut().find(|(n, _)| *n == holder).unwrap();
    let mut victim = slot.take().unwrap();
    let killed_at = Instant::now();
    victim.0.kill().unwrap();
    victim.0.wait().unwrap();
    let at_kill = row(&store).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut claimed_ms = None;
    let after = loop {
        let r = row(&store).unwrap();
        if claimed_ms.is_none() && r.fence > at_kill.fence {
            claimed_ms = Some(killed_at.elapsed().as_secs_f64() * 1000.0);
        }
        if r.events > at_kill.events {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the run never went on: {r:?}\n{}",
            common::worker_logs(&scratch)
        );
        std::thread::sleep(POLL);
    };
    let continued_ms = killed_at.elapsed().as_secs_f64() * 1000.0;
    // What the new holder recorded first, as the log in the store shows it.
    let seen = dir.join(format!("seen-{lease_ms}-{poll_ms}"));
    let run_dir = store.hydrate(&after.id, &seen).unwrap();
    let log = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let first_new: Vec<String> = log
        .lines()
        .skip(at_kill.events as usize)
        .take(3)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            format!(
                "{} {}",
                v["kind"].as_str().unwrap_or("?"),
                v["payload"]["step"].as_str().unwrap_or("")
            )
        })
        .collect();
    std::fs::remove_dir_all(&seen).unwrap();
    assert_ne!(after.worker.as_deref(), Some(holder.as_str()));
    assert_eq!(after.state, "running", "{after:?}");
    assert_eq!(after.claims, 2, "claimed once more, by the other worker");
    drop(workers);
    Trial {
        lease_left_ms: at_kill.lease_ms.unwrap_or(0),
        continued_ms,
        claimed_ms: claimed_ms.unwrap_or(continued_ms),
        events_at_kill: at_kill.events,
        first_new,
    }
}

fn main() {
    // The machine line first: BENCHMARKS.md names the CPU of every figure.
    eprintln!("{}", oracle_runtime::machine::line());
    // `cargo bench` passes `--bench`; nothing else to parse.
    let bin = common::oracle_bin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    std::fs::write(dir.join("slow.plan"), plan()).unwrap();
    let cluster = common::cluster();
    println!("load average at the start: {}", common::load());
    println!("oracle: {}", bin.display());

    let mut rows = Vec::new();
    for (lease_ms, poll_ms) in [(1000u64, 1000u64), (3000, 1000), (1000, 100)] {
        let trials: Vec<Trial> = (0..TRIALS)
            .map(|k| {
                let delay_ms = lease_ms * k as u64 / TRIALS as u64;
                trial(&bin, &cluster, &dir, lease_ms, poll_ms, delay_ms)
            })
            .collect();
        for (i, t) in trials.iter().enumerate() {
            println!(
                "--lease-ms {lease_ms} --poll-ms {poll_ms}, trial {}: killed at {} events with {} ms of lease left; claimed by the other after {:.0} ms; went on after {:.0} ms with {}",
                i + 1,
                t.events_at_kill,
                t.lease_left_ms,
                t.claimed_ms,
                t.continued_ms,
                t.first_new.join(", ")
            );
        }
        rows.push((lease_ms, poll_ms, trials));
    }

    let span = |v: Vec<f64>| {
        let min = v.iter().cloned().fold(f64::MAX, f64::min);
        let max = v.iter().cloned().fold(f64::MIN, f64::max);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        format!("{mean:.0} ({min:.0}–{max:.0})")
    };
    println!();
    println!("{TRIALS} trials per row; mean (min–max), ms");
    println!();
    println!(
        "| {:>10} | {:>9} | {:>24} | {:>24} | {:>24} | {:>24} |",
        "--lease-ms",
        "--poll-ms",
        "lease left at the kill",
        "kill to claim",
        "kill to next event",
        "after the lease ran out"
    );
    println!(
        "| {:->10} | {:->9} | {:->24} | {:->24} | {:->24} | {:->24} |",
        "", "", "", "", "", ""
    );
    for (lease_ms, poll_ms, trials) in &rows {
        println!(
            "| {:>10} | {:>9} | {:>24} | {:>24} | {:>24} | {:>24} |",
            lease_ms,
            poll_ms,
            span(trials.iter().map(|t| t.lease_left_ms as f64).collect()),
            span(trials.iter().map(|t| t.claimed_ms).collect()),
            span(trials.iter().map(|t| t.continued_ms).collect()),
            span(
                trials
                    .iter()
                    .map(|t| t.continued_ms - t.lease_left_ms as f64)
                    .collect()
            ),
        );
    }
}
