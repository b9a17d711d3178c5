//! What the PostgreSQL benches share: a throwaway cluster, fresh initialised databases, the
//! release `oracle` binary, and a run held under a lease for direct appends.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

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
    let id = store.submit("bench", &dir).unwrap();
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

/// Starts `oracle worker` on `url` (stdout and stderr discarded).
pub fn worker(bin: &Path, dir: &Path, url: &str, extra: &[&str]) -> std::process::Child {
    Command::new(bin)
        .args(["worker", "--store", url, "--scratch"])
        .arg(dir)
        .args(extra)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
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
