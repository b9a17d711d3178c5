//! Benchmarks of the pure core: per-record verification, state-hash updates at 1k and 1M keys,
//! LtHash's expansion of one element on each path, and replay. Targets and results are in
//! BENCHMARKS.md.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use oracle_core::payload::StateChanged;
use oracle_core::synth::{Shape, SynthConfig, synth_events};
use oracle_core::{ChainCheck, Replayer, State, Value, record, verify};
use std::hint::black_box;

const RECORDS: u64 = 100_000;

fn records(shape: Shape) -> (Vec<u8>, Vec<oracle_core::Event>) {
    let events = synth_events(SynthConfig {
        events: RECORDS,
        seed: 1,
        keys: 64,
        shape,
    })
    .unwrap();
    let mut bytes = Vec::new();
    for e in &events {
        record::encode_into(e, &mut bytes);
    }
    (bytes, events)
}

fn verify_records(c: &mut Criterion) {
    let (bytes, _) = records(Shape::Steps);
    let mut g = c.benchmark_group("verify");
    g.sample_size(10);
    g.throughput(Throughput::Elements(RECORDS));
    g.bench_function("one_core_100k_records", |b| {
        b.iter(|| verify::verify_bytes(black_box(&bytes), None).unwrap());
    });
    let lines: Vec<&[u8]> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    g.bench_function("reference_path_one_core_100k_records", |b| {
        // The serde path alone (what every record took before the byte-level fast path).
        let mut scratch = Vec::new();
        b.iter(|| {
            let mut chain = ChainCheck::new();
            for l in &lines {
                chain
                    .push_line(verify::check_line_reference(l, &mut scratch))
                    .unwrap();
            }
            chain.head()
        });
    });
    g.bench_function("chain_link_only_100k", |b| {
        let mut scratch = verify::Scratch::default();
        let links: Vec<_> = lines
            .iter()
            .map(|l| verify::check_line(l, &mut scratch).unwrap().0)
            .collect();
        b.iter(|| {
            let mut chain = ChainCheck::new();
            for l in &links {
                chain.push(l, Ok(())).unwrap();
            }
            chain.head()
        });
    });
    g.finish();
}

fn state_with_keys(n: u64) -> State {
    State::from_entries((0..n).map(|i| (format!("key{i:08}"), Value::from(i)))).unwrap()
}

fn state_hash_update(c: &mut Criterion) {
    let mut g = c.benchmark_group("state_hash_update");
    g.sample_size(20);
    for n in [1_000u64, 1_000_000] {
        // Owned by the bench alone (no other clone shares its nodes), as in the recorder.
        let mut s = state_with_keys(n);
        g.bench_function(format!("{n}_keys"), |b| {
            // Steady state: the recorder and the replayer own their state, so after the first
            // write each insert mutates in place. Keys are spread over the whole map.
            let mut i = 0u64;
            let step = n / 1000 + 1;
            b.iter(|| {
                i += 1;
                let mut change = StateChanged::default();
                change
                    .set
                    .insert(format!("key{:08}", (i * step) % n), Value::from(i + n));
                s.apply_change(&change).unwrap();
                s.hash()
            });
        });
    }
    g.finish();
}

/// One element's expansion (2048 bytes of BLAKE3 XOF) on every path this CPU runs, side by
/// side: the `blake3` crate's XOF as it runs here, the same crate asked for one 64-byte block
/// per call (what it does on every CPU without AVX-512, where it has no batched XOF), and each
/// lane-parallel [`Expander`]. Elements of 40 bytes (a state entry of the replay workload: key
/// and small value) and of 1000 bytes (16 blocks, the most one chunk holds).
fn lthash_expand(c: &mut Criterion) {
    use oracle_core::hash::domain;
    use oracle_core::lthash::{BYTES, Expander};
    let mut g = c.benchmark_group("lthash/expand");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1));
    for len in [40usize, 1000] {
        let element: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
        let mut out = [0u8; BYTES];
        g.bench_function(format!("{len}B/blake3_xof"), |b| {
            b.iter(|| {
                Expander::Blake3.expand(black_box(&element), &mut out);
                out[0]
            });
        });
        g.bench_function(format!("{len}B/blake3_xof_block_at_a_time"), |b| {
            b.iter(|| {
                let mut h = blake3::Hasher::new_derive_key(domain::STATE_ENTRY);
                h.update(black_box(&element));
                let mut xof = h.finalize_xof();
                for block in out.chunks_exact_mut(64) {
                    xof.fill(block);
                }
                out[0]
            });
        });
        for x in Expander::ALL
            .into_iter()
            .filter(|x| *x != Expander::Blake3 && x.is_available())
        {
            g.bench_function(format!("{len}B/{}", format!("{x:?}").to_lowercase()), |b| {
                b.iter(|| {
                    x.expand(black_box(&element), &mut out);
                    out[0]
                });
            });
        }
    }
    g.finish();
}

fn replay(c: &mut Criterion) {
    let (_, events) = records(Shape::Writes);
    let mut g = c.benchmark_group("replay");
    g.sample_size(10);
    g.throughput(Throughput::Elements(RECORDS));
    g.bench_function("one_key_per_event_100k", |b| {
        b.iter(|| {
            let mut r = Replayer::genesis();
            for e in &events {
                r.step(e).unwrap();
            }
            r.state().hash()
        });
    });
    g.finish();
}

criterion_group!(
    benches,
    verify_records,
    state_hash_update,
    lthash_expand,
    replay
);
criterion_main!(benches);
