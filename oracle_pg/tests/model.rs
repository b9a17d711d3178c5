//! The store's one-writer rule against a plain model (redb's style): workers claim a run in
//! turn (each claim takes over the lease), write events into their own copy of the log and
//! append them; the model says which appends the store must keep (the holder's, continuing the
//! stored log) and which it must refuse (a superseded lease, a copy that fell behind), and the
//! stored log must equal the model's bytes after every step. Against a real, throwaway
//! PostgreSQL; skips loudly without one.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use oracle_core::Payload;
use oracle_core::payload::StepScheduled;
use oracle_pg::{PgError, Store};
use oracle_runtime::{Durability, LogPaths, LogWriter};
use proptest::prelude::*;

static DB: AtomicU64 = AtomicU64::new(0);

#[derive(Clone, Debug)]
enum Op {
    /// Worker `w`'s lease: any earlier one is expired first, so this is a takeover.
    Claim(usize),
    /// Worker `w` records `n` events in its copy and appends them.
    Append(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize).prop_map(Op::Claim),
        (0..3usize, 1..4u64).prop_map(|(w, n)| Op::Append(w, n)),
        (0..3usize, 1..4u64).prop_map(|(w, n)| Op::Append(w, n)),
    ]
}

/// A worker: its lease's fence and its copy of the log (a file), if it ever claimed.
#[derive(Default)]
struct Worker {
    fence: Option<i64>,
    log: Option<PathBuf>,
}

fn started() -> Payload {
    oracle_test_support::run_started("model", 1, &[])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn only_the_holders_appends_that_continue_the_log_are_kept(
        ops in proptest::collection::vec(op(), 1..16)
    ) {
        let Some(cluster) = oracle_pg::cluster::shared() else { return Ok(()) };
        let n = DB.fetch_add(1, Ordering::Relaxed);
        let url = cluster.database(&format!("model_{}_{n}", std::process::id())).unwrap();
        Store::connect_unchecked(&url).unwrap().init().unwrap();
        let store = Store::connect(&url).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let prepared = tmp.path().join("prepared");
        std::fs::create_dir_all(&prepared).unwrap();
        std::fs::write(prepared.join("plan.plan"), "plan model version 1\n").unwrap();
        let run = store
            .submit("model", &prepared, &oracle_pg::Programs::default())
            .unwrap();
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();

        // The model: the stored log's bytes and the fence that may extend it.
        let mut model: Vec<u8> = Vec::new();
        let mut current: Option<i64> = None;
        let mut workers: Vec<Worker> = (0..3).map(|_| Worker::default()).collect();
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Claim(w) => {
                    admin.execute("UPDATE runs SET lease_until = now() - interval '1 second'", &[]).unwrap();
                    let claim = store.claim(&format!("w{w}"), 60_000).unwrap().expect("claimable");
                    prop_assert_eq!(claim.events as usize, model.iter().filter(|&&b| b == b'\n').count());
                    current = Some(claim.fence);
                    // A new copy of what the store holds.
                    let home = tmp.path().join(format!("op{i}-w{w}"));
                    let dir = store.hydrate(&run, &home).unwrap();
                    workers[w] = Worker { fence: Some(claim.fence), log: Some(LogPaths::of_run(&dir).log) };
                }
                Op::Append(w, k) => {
                    let (Some(fence), Some(log)) = (workers[w].fence, workers[w].log.clone()) else {
                        continue;
                    };
                    let paths = LogPaths::of_file(&log);
                    let before = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) as usize;
                    let mut writer = if before == 0 {
                        let _ = std::fs::remove_file(&log);
                        let mut wr = LogWriter::create(&paths, Durability::None).unwrap();
                        wr.append(0, vec![], started()).unwrap();
                        wr
                    } else {
                        LogWriter::open(&paths, Durability::None).unwrap()
                    };
                    for j in 0..k {
                        let head = writer.head();
                        let last = head.next_seq - 1;
                        writer.append(head.time + 1, vec![last], Payload::StepScheduled(StepScheduled {
                            step: format!("w{w}-op{i}-{j}"),
                            tool: "text.count".into(),
                            attempt: 1,
                        })).unwrap();
                    }
                    writer.close().unwrap();
                    let bytes = std::fs::read(&log).unwrap();
                    let new = &bytes[before..];
                    let expect_kept = current == Some(fence) && bytes[..before] == model[..];
                    match store.append(&run, fence, new, None) {
                        Ok(()) => {
                            prop_assert!(expect_kept, "op {}: an append the model refuses was kept", i);
                            model.extend_from_slice(new);
                        }
                        Err(PgError::Fenced { .. } | PgError::NotNext { .. }) => {
                            prop_assert!(!expect_kept, "op {}: an append the model keeps was refused", i);
                        }
                        Err(e) => prop_assert!(false, "op {}: {}", i, e),
                    }
                }
            }
            let check = tmp.path().join(format!("check{i}"));
            let dir = store.hydrate(&run, &check).unwrap();
            let stored = std::fs::read(dir.join("events.jsonl")).unwrap_or_default();
            prop_assert!(stored == model, "op {}: the store's log is not the model's", i);
        }
    }
}
