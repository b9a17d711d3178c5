//! Runs per second through the store (issue 21, BENCHMARKS.md "PostgreSQL store"), with the
//! real binary: `RUNS` runs of a plan of five trivial pure steps are queued with
//! `oracle submit`, then 1, 2 and 4 `oracle worker --concurrency 1 --until-idle` processes,
//! started together, drive them until all have exited. Beside it, the file home: the same
//! number of `oracle run PLAN --home DIR`, one after another.
//!
//! Needs the release binary: `cargo build -p oracle_cli --release` first (same
//! `CARGO_TARGET_DIR`), or `ORACLE_BIN=/path/to/oracle`. Then
//! `cargo bench -p oracle_pg --bench workers`. Prints a table; asserts nothing about time.

mod common;

use std::time::Instant;

use oracle_pg::Store;

/// Runs per case.
const RUNS: usize = 200;

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

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let bin = common::oracle_bin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    std::fs::write(dir.join("trivial.plan"), PLAN).unwrap();
    let cluster = common::cluster();
    println!("oracle: {}", bin.display());
    println!("{RUNS} runs of a plan of 5 pure steps per case");

    // The file home: one `oracle run` after another.
    let home = dir.join("home");
    let home_arg = home.to_str().unwrap();
    let t = Instant::now();
    for _ in 0..RUNS {
        common::oracle(&bin, &dir, &["run", "trivial.plan", "--home", home_arg]);
    }
    let file_s = t.elapsed().as_secs_f64();

    let mut rows: Vec<(String, f64)> = vec![(
        format!("file home: {RUNS} x `oracle run`, one after another"),
        file_s,
    )];
    let mut submits: Vec<f64> = Vec::new();
    for workers in [1usize, 2, 4] {
        let url = common::database(&cluster, &format!("workers{workers}"));
        let store = Store::connect(&url).unwrap();
        let t = Instant::now();
        for _ in 0..RUNS {
            common::oracle(&bin, &dir, &["submit", "trivial.plan", "--store", &url]);
        }
        submits.push(t.elapsed().as_secs_f64());
        let scratch = dir.join(format!("scratch-{workers}"));
        std::fs::create_dir_all(&scratch).unwrap();
        let t = Instant::now();
        let children: Vec<_> = (0..workers)
            .map(|_| {
                common::worker(
                    &bin,
                    &scratch,
                    &url,
                    &["--concurrency", "1", "--until-idle"],
                )
            })
            .collect();
        for mut c in children {
            let status = c.wait().unwrap();
            assert!(status.success(), "a worker exited with {status}");
        }
        let seconds = t.elapsed().as_secs_f64();
        let runs = store.runs().unwrap();
        assert!(
            runs.len() == RUNS && runs.iter().all(|r| r.state == "completed"),
            "every run completed: {}",
            common::states(&store)
        );
        let events: i64 = runs.iter().map(|r| r.events).sum();
        let claims: i64 = runs.iter().map(|r| r.claims).sum();
        assert_eq!(claims as usize, RUNS, "each run claimed once");
        if workers == 1 {
            println!(
                "{} events per run in the store",
                events as f64 / RUNS as f64
            );
        }
        rows.push((
            format!(
                "store: {workers} worker process{} (--concurrency 1)",
                if workers == 1 { "" } else { "es" }
            ),
            seconds,
        ));
    }

    println!();
    println!(
        "`oracle submit`, one after another: {:.2} s per {RUNS} ({:.0} submits/s; fastest of {})",
        submits.iter().cloned().fold(f64::MAX, f64::min),
        RUNS as f64 / submits.iter().cloned().fold(f64::MAX, f64::min),
        submits.len()
    );
    println!();
    println!("| {:<52} | {:>8} | {:>8} |", "case", "seconds", "runs/s");
    println!("| {:-<52} | {:->8} | {:->8} |", "", "", "");
    for (what, s) in &rows {
        println!("| {:<52} | {:>8.2} | {:>8.1} |", what, s, RUNS as f64 / s);
    }
}
