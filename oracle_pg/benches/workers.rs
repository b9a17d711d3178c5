//! Runs per second through the store (issue 21, BENCHMARKS.md "PostgreSQL store"), with the
//! real binary: `RUNS` runs of a plan of five trivial pure steps are queued with
//! `oracle submit` (two at a time; not timed, except once, one after another, before the
//! cases), then 1, 2 and 4 `oracle worker --concurrency 1 --until-idle` processes, started
//! together, drive them until all have exited. Beside it, the file home: the same number of
//! `oracle run PLAN --home DIR`, one after another (a process per run, where a worker is one
//! process for many runs). Two rounds, the second in reverse order, each case timed once per
//! round; a plain `write` + `fdatasync` loop is timed before each case, since this VM's sync
//! latency swings with other I/O.
//!
//! Needs the release binary: `cargo build -p oracle_cli --release` first (same
//! `CARGO_TARGET_DIR`), or `ORACLE_BIN=/path/to/oracle`. Then
//! `cargo bench -p oracle_pg --bench workers`. Prints a table; asserts nothing about time.

mod common;

use std::path::Path;
use std::time::Instant;

use oracle_pg::Store;
use oracle_pg::cluster::Cluster;

/// Runs per case.
const RUNS: usize = 500;

/// Five pure built-in steps, each after the one before.
const PLAN: &str = r#"plan trivial version 1

a = text.count { text: "one two three" }
b = text.split { text: "one,two,three", separator: "," }
  after a
c = text.count { text: "four five six seven" }
  after b
d = text.split { text: "a b c d", separator: " " }
  after c
e = text.contains { text: "one two three", pattern: "two" }
  after d
"#;

/// `oracle submit` of `RUNS` runs to `url`, from `threads` threads at once. Returns seconds.
fn submit(bin: &Path, dir: &Path, url: &str, threads: usize) -> f64 {
    let t = Instant::now();
    std::thread::scope(|s| {
        for k in 0..threads {
            s.spawn(move || {
                for _ in (k..RUNS).step_by(threads) {
                    common::oracle(bin, dir, &["submit", "trivial.plan", "--store", url]);
                }
            });
        }
    });
    t.elapsed().as_secs_f64()
}

/// `RUNS` runs of the plan with `oracle run`, one after another, in a new home. Returns
/// seconds and the machine's CPU busy share meanwhile.
fn file_home(bin: &Path, dir: &Path, round: usize) -> (f64, f64) {
    let home = dir.join(format!("home-{round}"));
    let home_arg = home.to_str().unwrap();
    let ticks = common::cpu_ticks();
    let t = Instant::now();
    for _ in 0..RUNS {
        common::oracle(bin, dir, &["run", "trivial.plan", "--home", home_arg]);
    }
    let seconds = t.elapsed().as_secs_f64();
    (seconds, common::busy_percent(ticks, common::cpu_ticks()))
}

/// `workers` worker processes started together on `RUNS` submitted runs, until all exit.
/// Returns seconds, the events per run the store holds, and the machine's CPU busy share.
fn store(
    bin: &Path,
    dir: &Path,
    cluster: &Cluster,
    workers: usize,
    round: usize,
) -> (f64, f64, f64) {
    let url = common::database(cluster, &format!("workers{workers}_{round}"));
    let store = Store::connect(&url).unwrap();
    submit(bin, dir, &url, 2);
    let scratch = dir.join(format!("scratch-{workers}-{round}"));
    std::fs::create_dir_all(&scratch).unwrap();
    let ticks = common::cpu_ticks();
    let t = Instant::now();
    let children: Vec<_> = (0..workers)
        .map(|_| {
            common::worker(
                bin,
                dir,
                &scratch,
                &url,
                &["--concurrency", "1", "--until-idle"],
            )
        })
        .collect();
    for mut c in children {
        let status = c.wait().unwrap();
        assert!(
            status.success(),
            "a worker exited with {status}\n{}",
            common::worker_logs(&scratch)
        );
    }
    let seconds = t.elapsed().as_secs_f64();
    let busy = common::busy_percent(ticks, common::cpu_ticks());
    let runs = store.runs().unwrap();
    assert!(
        runs.len() == RUNS && runs.iter().all(|r| r.state == "completed"),
        "every run completed: {}",
        common::states(&store)
    );
    let claims: i64 = runs.iter().map(|r| r.claims).sum();
    assert_eq!(claims as usize, RUNS, "each run claimed once");
    let events: i64 = runs.iter().map(|r| r.events).sum();
    (seconds, events as f64 / RUNS as f64, busy)
}

fn main() {
    // The machine line first: BENCHMARKS.md names the CPU of every figure.
    eprintln!("{}", oracle_runtime::machine::line());
    // `cargo bench` passes `--bench`; nothing else to parse.
    let bin = common::oracle_bin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    std::fs::write(dir.join("trivial.plan"), PLAN).unwrap();
    let cluster = common::cluster();
    println!("oracle: {}", bin.display());
    println!("load average at the start: {}", common::load());
    println!(
        "{RUNS} runs of a plan of 5 pure steps per case; two rounds, the second in reverse order"
    );

    let url = common::database(&cluster, "submit");
    let submit_s = submit(&bin, &dir, &url, 1);
    println!(
        "`oracle submit`, one after another: {RUNS} in {submit_s:.2} s, {:.0} submits/s",
        RUNS as f64 / submit_s
    );

    // Cases: 0 the file home, else that many workers.
    let cases = [0usize, 1, 2, 4];
    let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut busies: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut probes = Vec::new();
    for round in 0..2 {
        let order: Vec<usize> = if round == 0 {
            (0..cases.len()).collect()
        } else {
            (0..cases.len()).rev().collect()
        };
        for i in order {
            let probe = common::disk_probe(&dir);
            probes.push(probe);
            let (s, busy) = match cases[i] {
                0 => file_home(&bin, &dir, round),
                n => {
                    let (s, events, busy) = store(&bin, &dir, &cluster, n, round);
                    if round == 0 && n == 1 {
                        println!("{events} events per run in the store");
                    }
                    (s, busy)
                }
            };
            println!(
                "round {}, {}: {s:.2} s, {:.1} runs/s (CPU busy {busy:.0}% of both cores; disk probe just before: {probe:.0} syncs/s)",
                round + 1,
                name(cases[i]),
                RUNS as f64 / s
            );
            seconds[i].push(s);
            busies[i].push(busy);
        }
    }

    println!();
    println!(
        "disk probe (write + fdatasync of 545 bytes, plain loop) before each case: {}",
        probes
            .iter()
            .map(|p| format!("{p:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!();
    println!(
        "| {:<52} | {:>12} | {:>14} | {:>12} |",
        "case (round 1, round 2)", "seconds", "runs/s", "CPU busy %"
    );
    println!("| {:-<52} | {:->12} | {:->14} | {:->12} |", "", "", "", "");
    for (i, &case) in cases.iter().enumerate() {
        let s = &seconds[i];
        println!(
            "| {:<52} | {:>12} | {:>14} | {:>12} |",
            name(case),
            s.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
            s.iter()
                .map(|x| format!("{:.1}", RUNS as f64 / x))
                .collect::<Vec<_>>()
                .join(", "),
            busies[i]
                .iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

fn name(case: usize) -> String {
    match case {
        0 => format!("file home: {RUNS} x `oracle run`, one after another"),
        1 => "store: 1 worker process (--concurrency 1)".to_owned(),
        n => format!("store: {n} worker processes (--concurrency 1)"),
    }
}
