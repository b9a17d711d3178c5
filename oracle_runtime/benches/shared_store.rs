//! Named stores shared by runs (issue 40), timed by hand (`cargo bench --profile dev -p
//! oracle_runtime --bench shared_store`; BENCHMARKS.md): recall latency from a store of
//! `ORACLE_BENCH_CLAIMS` claims (default 1,000,000; one line each), and publish throughput
//! with 4 writers claiming at once into one store. Every recall is a fresh read of the files
//! (checkpoint, then the records after it), as a new process's would be. A bench, not a test:
//! nothing here asserts a time.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use oracle_core::Payload;
use oracle_core::payload::ClaimRecorded;
use oracle_memory::shared::Store;
use oracle_memory::{Cardinality, Claim, Criticality, Provenance};
use oracle_runtime::shared as files;
use oracle_runtime::shared::StoreBackend as _;
use serde_json::json;

/// Claims in the recall bench's store unless `ORACLE_BENCH_CLAIMS` says otherwise.
const CLAIMS_DEFAULT: u64 = 1_000_000;
/// Recalls timed unless `ORACLE_BENCH_RECALLS` says otherwise (the median and the slowest are
/// reported).
const RECALLS_DEFAULT: usize = 5;
/// Writers publishing at once, and claims each.
const WRITERS: u64 = 4;
const CLAIMS_PER_WRITER: u64 = 50;

fn claim(subject: String, value: u64) -> Claim {
    Claim {
        subject,
        predicate: "allergy".into(),
        value: json!(value),
        provenance: Provenance::UserAsserted,
        cardinality: Cardinality::Functional,
        valid: None,
        criticality: Criticality::Medium,
        derived_from: Vec::new(),
    }
}

/// Writes store `name` of `n` claims (one subject each) as `oracle claim --memory` records
/// them, built in one pass.
fn build(home: &Path, name: &str, n: u64) {
    let dir = files::stores_dir(home).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(dir.join(files::STORE_LOG)).unwrap());
    let mut store = Store::new();
    for i in 0..n {
        let a = store.decide_outside(claim(format!("user-{i}"), i)).unwrap();
        let payload = Payload::ClaimRecorded(ClaimRecorded {
            assertion: serde_json::to_value(&a).unwrap(),
            note: String::new(),
            by: None,
        });
        let rec = store.seal("", "", &payload).unwrap();
        let v = serde_json::to_value(&rec).unwrap();
        writeln!(out, "{}", serde_json::to_string(&v).unwrap()).unwrap();
        store.apply(rec).unwrap();
        // The fold is what the next claim is decided against; the records are on disk.
        store.records.clear();
    }
    out.flush().unwrap();
    drop(out);
    // Written by hand, not by the home's writer: adopted as `oracle memory seal` would.
    files::FileStores::new(home).adopt(name).unwrap();
}

fn recall(home: &Path, n: u64) {
    let t = Instant::now();
    build(home, "big", n);
    println!("built a store of {n} claims in {:?}", t.elapsed());
    let recalls = std::env::var("ORACLE_BENCH_RECALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(RECALLS_DEFAULT);
    let input = json!({"subject": "user-0", "predicate": "allergy"});
    let t = Instant::now();
    files::query(&files::FileStores::new(home), "big", &input).unwrap();
    println!(
        "first recall (no checkpoint yet: every record folded, the checkpoint written): {:?}",
        t.elapsed()
    );
    let mut times = Vec::new();
    for i in 0..recalls {
        let input =
            json!({"subject": format!("user-{}", (i as u64 * 7919) % n), "predicate": "allergy"});
        let t = Instant::now();
        files::query(&files::FileStores::new(home), "big", &input).unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "recall from {n} claims through the checkpoint: median {:?}, slowest {:?} ({recalls} recalls)",
        times[recalls / 2],
        times[recalls - 1]
    );
}

fn publish(home: &Path) {
    build(home, "shared", 1000);
    let t = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let home = home.to_path_buf();
            std::thread::spawn(move || {
                for i in 0..CLAIMS_PER_WRITER {
                    let c = claim(format!("w{w}-{i}"), i);
                    files::claim(&files::FileStores::new(&home), "shared", c, "").unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let total = WRITERS * CLAIMS_PER_WRITER;
    let secs = t.elapsed();
    println!(
        "publish: {total} claims by {WRITERS} writers at once into a store of 1000 claims in {secs:?} ({:.1}/s)",
        total as f64 / secs.as_secs_f64()
    );
    let store = files::load(&files::FileStores::new(home), "shared").unwrap();
    assert_eq!(store.head.records, 1000 + total);
}

fn main() {
    // The machine line first: BENCHMARKS.md names the CPU of every figure.
    eprintln!("{}", oracle_runtime::machine::line());
    let n = std::env::var("ORACLE_BENCH_CLAIMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CLAIMS_DEFAULT);
    let home = tempfile::tempdir().unwrap();
    publish(home.path());
    recall(home.path(), n);
}
