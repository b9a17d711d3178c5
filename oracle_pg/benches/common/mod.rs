//! What the PostgreSQL benches share: a throwaway cluster, fresh initialised databases, the
//! release `oracle` binary, and a run held under a lease for direct appends.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use oracle_pg::Store;
use oracle_pg::cluster::Cluster;

/// The throwaway cluster of this bench (fsync on, a Unix socket in a temporary directory).
/// Fails loudly: a bench without PostgreSQL has nothing to measure.
pub fn cluster() -> Cluster {
    Cluster::start().unwrap_or_else(|e| panic!("no PostgreSQL cluster for the bench: {e}"))
}

static DB: AtomicU64 = AtomicU64::new(0);

/// A new database in `cluster` with the oracle schema; returns its URL.
pub fn database(cluster: &Cluster, what: &str) -> String {
    let n = DB.fetch_add(1, Ordering::Relaxed);
    let url = cluster.database(&format!("bench_{what}_{n}")).unwrap();
    Store::connect_unchecked(&url).unwrap().init().unwrap();
    url
}

/// A run submitted to `store` and claimed by this process: its id and fencing token, ready for
/// [`Store::append`].
pub fn held_run(store: &Store, scratch: &Path) -> (String, i64) {
    let dir = scratch.join(format!("prepared-{}", DB.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plan.plan"), "plan bench version 1\n").unwrap();
    let id = store
        .submit("bench", &dir, &oracle_pg::Programs::default())
        .unwrap();
    let claim = store.claim("bench", 3_600_000).unwrap().unwrap();
    assert_eq!(claim.id, id, "a fresh database holds only this run");
    (claim.id, claim.fence)
}

/// The release `oracle` binary: `$ORACLE_BIN`, else `oracle` beside this bench's own
/// directory (`<target>/release/deps/<bench>` → `<target>/release/oracle`), which
/// `cargo build -p oracle_cli --release` (same `CARGO_TARGET_DIR`) puts there.
pub fn oracle_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("ORACLE_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|release| release.join("oracle"))
        .unwrap();
    assert!(
        bin.is_file(),
        "no oracle binary at {}: run `cargo build -p oracle_cli --release` first (same CARGO_TARGET_DIR), or set ORACLE_BIN",
        bin.display()
    );
    bin
}

/// `oracle ARGS` in `dir`, its output discarded; panics unless it exits 0.
pub fn oracle(bin: &Path, dir: &Path, args: &[&str]) {
    let out = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "oracle {}: {}: {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts `oracle worker` on `url` in `cwd` (the directory the runs were submitted from: a
/// resume refuses a run whose `run.json` names another working directory), its scratch homes
/// under `scratch`; stdout is discarded and stderr (a line per run driven) goes to
/// `scratch/worker-<n>.log`.
pub fn worker(
    bin: &Path,
    cwd: &Path,
    scratch: &Path,
    url: &str,
    extra: &[&str],
) -> std::process::Child {
    let n = DB.fetch_add(1, Ordering::Relaxed);
    let log = std::fs::File::create(scratch.join(format!("worker-{n}.log"))).unwrap();
    Command::new(bin)
        .args(["worker", "--store", url, "--scratch"])
        .arg(scratch)
        .args(extra)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The stderr of every worker started under `dir`, for a failure's message.
pub fn worker_logs(dir: &Path) -> String {
    let mut out = String::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    names.sort();
    for path in names {
        if path.extension().is_some_and(|e| e == "log") {
            out.push_str(&format!("--- {}\n", path.display()));
            out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
    out
}

/// Runs in the store by state, e.g. `completed 200`.
pub fn states(store: &Store) -> String {
    let mut by: std::collections::BTreeMap<String, u64> = Default::default();
    for r in store.runs().unwrap() {
        *by.entry(r.state).or_default() += 1;
    }
    by.iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// This disk's rate of plain `write` + `fdatasync` of a 545-byte record (no oracle code), for
/// reading the other figures: on this VM it swings widely with other I/O on the machine.
pub fn disk_probe(dir: &Path) -> f64 {
    use std::io::Write;
    let path = dir.join("probe");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let record = [b'x'; 545];
    let n = 300;
    let t = Instant::now();
    for _ in 0..n {
        f.write_all(&record).unwrap();
        f.sync_data().unwrap();
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    std::fs::remove_file(&path).unwrap();
    rate
}

/// The machine's load averages (1, 5, 15 minutes): other work shares the two cores.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The machine's CPU time so far, busy and in all, in clock ticks (`/proc/stat`), for the share
/// of both cores that was busy over an interval: [`busy_percent`].
pub fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let total: u64 = ticks.iter().sum();
    // idle and iowait
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The share of the machine's CPU time that was busy between two [`cpu_ticks`] readings
/// (all processes, other work on the machine included), in percent.
pub fn busy_percent(before: (u64, u64), after: (u64, u64)) -> f64 {
    let total = after.1.saturating_sub(before.1).max(1);
    100.0 * after.0.saturating_sub(before.0) as f64 / total as f64
}
