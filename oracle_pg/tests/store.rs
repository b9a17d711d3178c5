//! The store against a real, throwaway PostgreSQL: migrations, fenced appends, claims, files.
//! Skips loudly where PostgreSQL is not installed (CI sets ORACLE_REQUIRE_POSTGRES).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use oracle_core::Payload;
use oracle_core::payload::StepScheduled;
use oracle_pg::{PgError, Store};
use oracle_runtime::{Durability, LogPaths, LogWriter};

static DB: AtomicU64 = AtomicU64::new(0);

/// A fresh, initialised database, or `None` (skip) without PostgreSQL.
fn store() -> Option<Store> {
    let cluster = oracle_pg::cluster::shared()?;
    let n = DB.fetch_add(1, Ordering::Relaxed);
    let url = cluster
        .database(&format!("store_{}_{n}", std::process::id()))
        .unwrap();
    let s = Store::connect_unchecked(&url).unwrap();
    assert_eq!(s.init().unwrap(), (0, oracle_pg::schema::VERSION));
    Some(Store::connect(&url).unwrap())
}

fn started() -> Payload {
    oracle_test_support::run_started("pg-test", 1, &[])
}

fn step(n: u64) -> Payload {
    Payload::StepScheduled(StepScheduled {
        step: format!("s{n}"),
        tool: "text.count".into(),
        attempt: 1,
    })
}

/// A submitted run whose directory holds one plan file.
fn submit(store: &Store, root: &Path) -> String {
    let dir = root.join("prepared");
    std::fs::create_dir_all(dir.join("uses")).unwrap();
    std::fs::write(dir.join("plan.plan"), "plan \"x\"\n").unwrap();
    std::fs::write(dir.join("uses/sub.plan"), "sub\n").unwrap();
    store
        .submit("pg-test", &dir, &oracle_pg::Programs::default())
        .unwrap()
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn init_is_idempotent_and_a_newer_schema_is_refused() {
    let Some(s) = store() else { return };
    let v = oracle_pg::schema::VERSION;
    assert_eq!(s.init().unwrap(), (v, v));
    let url = s.url().to_owned();
    drop(s);
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.execute("UPDATE oracle_schema SET version = 99", &[])
        .unwrap();
    match Store::connect(&url) {
        Err(PgError::Newer { found: 99, .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a newer schema was accepted"),
    }
    let fresh = oracle_pg::cluster::shared()
        .unwrap()
        .database(&format!("never_init_{}", std::process::id()))
        .unwrap();
    let err = Store::connect(&fresh).err().unwrap();
    assert!(matches!(err, PgError::NotInitialised), "{err}");
    assert!(err.to_string().contains("oracle store init"));
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_writer_whose_lease_was_taken_over_cannot_extend_the_run() {
    let Some(s) = store() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let id = submit(&s, tmp.path());
    let first = s.claim("w1", 60_000).unwrap().unwrap();
    assert_eq!(
        (first.id.as_str(), first.fence, first.from.as_str()),
        (id.as_str(), 1, "submitted")
    );
    // Nothing else is claimable while the lease holds.
    assert!(s.claim("w2", 60_000).unwrap().is_none());

    let home1 = tmp.path().join("w1");
    let dir = s.hydrate(&id, &home1).unwrap();
    assert_eq!(std::fs::read(dir.join("uses/sub.plan")).unwrap(), b"sub\n");
    let paths = LogPaths::of_run(&dir);
    let mut w = LogWriter::create(&paths, Durability::Effect)
        .unwrap()
        .with_replica(Some(Arc::new(Mutex::new(s.replica(
            &id,
            first.fence,
            None,
        )))));
    w.append(0, vec![], started()).unwrap();
    w.append(1, vec![0], step(1)).unwrap();
    w.commit().unwrap();

    // The lease runs out (the worker stalled); another worker takes the run over.
    let mut c = postgres::Client::connect(s.url(), postgres::NoTls).unwrap();
    c.execute(
        "UPDATE runs SET lease_until = now() - interval '1 second'",
        &[],
    )
    .unwrap();
    let second = s.claim("w2", 60_000).unwrap().unwrap();
    assert_eq!(
        (second.fence, second.from.as_str(), second.events),
        (2, "running", 2)
    );

    // The stalled writer wakes up and commits: refused, and it stops.
    w.append(2, vec![1], step(2)).unwrap();
    let err = w.commit().unwrap_err();
    assert!(err.to_string().contains("lease lost"), "{err}");
    assert!(
        w.append(3, vec![1], step(3)).is_err(),
        "a refused writer must stop"
    );
    drop(w);

    // The new holder continues from what the store holds.
    let home2 = tmp.path().join("w2");
    let dir2 = s.hydrate(&id, &home2).unwrap();
    let paths2 = LogPaths::of_run(&dir2);
    let mut w2 = LogWriter::open(&paths2, Durability::Effect)
        .unwrap()
        .with_replica(Some(Arc::new(Mutex::new(s.replica(
            &id,
            second.fence,
            None,
        )))));
    w2.append(2, vec![1], step(7)).unwrap();
    w2.close().unwrap();

    // The store's log is the second writer's, byte for byte, and verifies.
    let home3 = tmp.path().join("reader");
    let dir3 = s.hydrate(&id, &home3).unwrap();
    let log = std::fs::read(dir3.join("events.jsonl")).unwrap();
    assert_eq!(log, std::fs::read(&paths2.log).unwrap());
    oracle_runtime::verify_file(&dir3.join("events.jsonl"), Default::default()).unwrap();
    let row = s.runs().unwrap().into_iter().find(|r| r.id == id).unwrap();
    assert_eq!(row.events, 3);
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn an_append_that_does_not_continue_the_log_is_refused_whole() {
    let Some(s) = store() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let id = submit(&s, tmp.path());
    let claim = s.claim("w1", 60_000).unwrap().unwrap();
    // Two logs made apart: both start at seq 0; only the first to commit is kept.
    let mut records = Vec::new();
    for name in ["a", "b"] {
        let paths = LogPaths::of_file(&tmp.path().join(format!("{name}.jsonl")));
        let mut w = LogWriter::create(&paths, Durability::None).unwrap();
        w.append(0, vec![], started()).unwrap();
        w.append(1, vec![0], step(if name == "a" { 1 } else { 2 }))
            .unwrap();
        w.close().unwrap();
        records.push(std::fs::read(&paths.log).unwrap());
    }
    s.append(&id, claim.fence, &records[0], None).unwrap();
    let err = s.append(&id, claim.fence, &records[1], None).unwrap_err();
    assert!(
        matches!(
            err,
            PgError::NotNext {
                events: 2,
                seq: 0,
                ..
            }
        ),
        "{err}"
    );
    // A commit that skips ahead or repeats the last event is refused too.
    let second_line = records[1].iter().position(|&b| b == b'\n').unwrap() + 1;
    let err = s
        .append(&id, claim.fence, &records[1][second_line..], None)
        .unwrap_err();
    assert!(matches!(err, PgError::NotNext { .. }), "{err}");
    // Garbage is refused before the database is asked.
    let err = s
        .append(&id, claim.fence, b"{\"not\": \"a record\"}\n", None)
        .unwrap_err();
    assert!(matches!(err, PgError::BadRecord { .. }), "{err}");
    let dir = s.hydrate(&id, &tmp.path().join("h")).unwrap();
    assert_eq!(std::fs::read(dir.join("events.jsonl")).unwrap(), records[0]);
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn concurrent_claims_take_different_runs() {
    let Some(s) = store() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..20).map(|_| submit(&s, tmp.path())).collect();
    let url = s.url().to_owned();
    let handles: Vec<_> = (0..4)
        .map(|w| {
            let url = url.clone();
            std::thread::spawn(move || {
                let s = Store::connect(&url).unwrap();
                let mut got = Vec::new();
                while let Some(c) = s.claim(&format!("w{w}"), 60_000).unwrap() {
                    got.push(c.id);
                }
                got
            })
        })
        .collect();
    let mut all: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(all, expected, "every run claimed exactly once");
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_signal_is_consumed_in_the_transaction_of_its_event() {
    let Some(s) = store() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let id = submit(&s, tmp.path());
    let sig = s
        .send(&id, "resume", &serde_json::json!({"step": "ask"}))
        .unwrap();
    assert_eq!(s.signal_outcome(sig).unwrap(), None);
    let claim = s.claim("w1", 60_000).unwrap().unwrap();
    assert_eq!(s.pending(&id).unwrap().len(), 1);
    let dir = s.hydrate(&id, &tmp.path().join("h")).unwrap();
    let paths = LogPaths::of_run(&dir);
    let r = Arc::new(Mutex::new(s.replica(&id, claim.fence, Some(sig))));
    let mut w = LogWriter::create(&paths, Durability::Effect)
        .unwrap()
        .with_replica(Some(r.clone()));
    w.append(0, vec![], started()).unwrap();
    w.close().unwrap();
    assert_eq!(r.lock().unwrap().consumed(), Some(sig));
    assert_eq!(
        s.signal_outcome(sig).unwrap(),
        Some(("applied".into(), Some(0)))
    );
    assert!(s.pending(&id).unwrap().is_empty());
    // A second signal, refused: settled with the reason, no event.
    let sig2 = s.send(&id, "resume", &serde_json::json!({})).unwrap();
    assert!(
        s.settle(&id, claim.fence, sig2, "refused: not suspended")
            .unwrap()
    );
    assert_eq!(
        s.signal_outcome(sig2).unwrap(),
        Some(("refused: not suspended".into(), None))
    );
    assert!(matches!(
        s.send("nope-1", "resume", &serde_json::json!({})),
        Err(PgError::NoRun { .. })
    ));
}
