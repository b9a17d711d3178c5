//! `oracle diff`'s search on two 1M-event logs that diverge at a random seq: opening both
//! indexes, the binary search over chain hashes, and the explanation (target: under 100 ms;
//! BENCHMARKS.md). Prints how many events each search read.

use std::io::Write;

use criterion::{Criterion, criterion_group};
use oracle_core::diff::{Outcome, Reader, first_divergence};
use oracle_core::rng::SplitMix64;
use oracle_core::synth::{Synth, SynthConfig};
use oracle_core::{Hash, record};
use oracle_runtime::index::IndexedLog;

const EVENTS: u64 = 1_000_000;

/// Writes log A and log B, identical before `k` (a `tool_returned`); from `k` on B's tool
/// outputs differ and its chain is relinked.
fn write_pair(dir: &std::path::Path, k: u64) -> (std::path::PathBuf, std::path::PathBuf) {
    let (pa, pb) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    let mut fa = std::io::BufWriter::new(std::fs::File::create(&pa).unwrap());
    let mut fb = std::io::BufWriter::new(std::fs::File::create(&pb).unwrap());
    let mut prev_b = Hash::ZERO;
    let mut buf = Vec::new();
    for e in Synth::new(SynthConfig::steps(EVENTS, 3)) {
        let e = e.unwrap();
        buf.clear();
        record::encode_into(&e, &mut buf);
        fa.write_all(&buf).unwrap();
        let mut b = e;
        if b.seq >= k {
            if b.kind == oracle_core::EventKind::ToolReturned {
                b.payload["output"]["diverged"] = serde_json::json!(true);
            }
            b.prev = prev_b;
            b.reseal().unwrap();
        }
        prev_b = b.hash;
        buf.clear();
        record::encode_into(&b, &mut buf);
        fb.write_all(&buf).unwrap();
    }
    fa.flush().unwrap();
    fb.flush().unwrap();
    (pa, pb)
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = SplitMix64::new(11);
    // A random tool_returned event (every fifth event from seq 4 in the synthetic run).
    let k = (rng.below(EVENTS / 5 - 1)) * 5 + 4;
    let (pa, pb) = write_pair(dir.path(), k);
    // Build and save both indexes once, as the writer would have.
    IndexedLog::open(&pa).unwrap();
    IndexedLog::open(&pb).unwrap();
    let mut reported = false;
    let mut g = c.benchmark_group("diff");
    g.sample_size(20);
    g.bench_function("first_divergence_1m_events_indexed", |b| {
        b.iter(|| {
            let mut a = IndexedLog::open(&pa).unwrap();
            let mut bb = IndexedLog::open(&pb).unwrap();
            let mut r = Reader::new(&mut a, &mut bb);
            let out = first_divergence(&mut r).unwrap();
            assert!(matches!(&out, Outcome::Diverged(d) if d.seq == k));
            if !reported {
                let (ra, rb) = r.reads();
                eprintln!("diverged at {k}: read {ra} events of A and {rb} of B");
                reported = true;
            }
            out
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
oracle_runtime::bench_main!(benches);
