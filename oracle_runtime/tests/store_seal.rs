//! A file home's store seal across a crash (`oracle_runtime::store_seal`): every state an
//! append can be cut in (the intended head sealed, the records written or not, or written in
//! part) reads as the store before the append or after it, never a part; the next writer goes
//! on from there; and a record appended by anything but the home's writer is refused.

use std::fs;
use std::path::{Path, PathBuf};

use oracle_memory::{Cardinality, Claim, Criticality, Provenance};
use oracle_runtime::seal::SealKey;
use oracle_runtime::shared::{self as files, FileStores, SharedError, StoreBackend};
use oracle_runtime::store_seal::{self as sealing, Mark};
use serde_json::json;

const NAME: &str = "alice";

fn claim(stores: &FileStores, i: u64) {
    let c = Claim {
        subject: format!("user-{i}"),
        predicate: "allergy".into(),
        value: json!("penicillin"),
        provenance: Provenance::UserAsserted,
        cardinality: Cardinality::Functional,
        valid: None,
        criticality: Criticality::Medium,
        derived_from: Vec::new(),
    };
    files::claim(stores, NAME, c, "").unwrap();
}

fn dir(home: &Path) -> PathBuf {
    files::stores_dir(home).join(NAME)
}

/// Where the store stands now, as its settled seal names it.
fn mark(home: &Path, key: &SealKey) -> Mark {
    let seal = sealing::read(&dir(home), NAME, key).unwrap().unwrap();
    assert_eq!(seal.next, None, "a finished append leaves its seal settled");
    seal.at
}

#[test]
fn an_append_cut_anywhere_reads_as_before_or_after_it_and_nothing_else() {
    let home = tempfile::tempdir().unwrap();
    let stores = FileStores::new(home.path());
    claim(&stores, 0);
    let key = SealKey::open(home.path()).unwrap().unwrap();
    let log = dir(home.path()).join(files::STORE_LOG);
    let (one, one_bytes) = (mark(home.path(), &key), fs::read(&log).unwrap());
    claim(&stores, 1);
    let (two, two_bytes) = (mark(home.path(), &key), fs::read(&log).unwrap());
    assert_eq!((one.records, two.records), (1, 2));
    let records = |stores: &FileStores| stores.verify(NAME).map(|(s, _)| s.head.records);
    // The intended head sealed: the log before the append, after it, or cut in between.
    sealing::write(&dir(home.path()), NAME, &key, one, Some(two)).unwrap();
    assert_eq!(records(&stores).unwrap(), 2);
    fs::write(&log, &one_bytes).unwrap();
    assert_eq!(records(&stores).unwrap(), 1);
    let cut = &two_bytes[..one_bytes.len() + (two_bytes.len() - one_bytes.len()) / 2];
    fs::write(&log, cut).unwrap();
    assert_eq!(records(&stores).unwrap(), 1, "the cut tail is never read");
    assert_eq!(stores.load(NAME).unwrap().head.records, 1);
    // The next writer drops the cut tail and appends after the sealed prefix.
    claim(&stores, 2);
    assert_eq!(records(&stores).unwrap(), 2);
    assert_eq!(fs::read(&log).unwrap()[..one_bytes.len()], one_bytes[..]);
    // A settled seal takes its own log only: a record appended by anything else is refused.
    let three = mark(home.path(), &key);
    let mut extra = fs::read(&log).unwrap();
    extra.extend_from_slice(&two_bytes[one_bytes.len()..]);
    fs::write(&log, &extra).unwrap();
    assert!(matches!(
        records(&stores),
        Err(SharedError::Tampered { .. })
    ));
    assert!(matches!(
        stores.load(NAME),
        Err(SharedError::Tampered { .. })
    ));
    // Nor is a log shorter than the seal (the newest record removed).
    fs::write(&log, &one_bytes).unwrap();
    assert!(matches!(
        records(&stores),
        Err(SharedError::Tampered { .. })
    ));
    assert_eq!(three.records, 2);
}

#[test]
fn a_store_without_a_seal_is_refused_until_adopted_and_a_compaction_stays_sealed() {
    let home = tempfile::tempdir().unwrap();
    let stores = FileStores::new(home.path());
    for i in 0..5 {
        claim(&stores, i);
    }
    fs::remove_file(dir(home.path()).join(sealing::SEAL_FILE)).unwrap();
    assert!(matches!(
        stores.load(NAME),
        Err(SharedError::Unsealed { .. })
    ));
    let (head, adopted) = stores.adopt(NAME).unwrap();
    assert_eq!((head.records, adopted), (5, true));
    assert!(!stores.adopt(NAME).unwrap().1, "sealed already");
    let c = stores.compact(NAME, 2).unwrap();
    assert_eq!(c.kept, 2);
    let key = SealKey::open(home.path()).unwrap().unwrap();
    let m = mark(home.path(), &key);
    let len = fs::metadata(dir(home.path()).join(files::STORE_LOG))
        .unwrap()
        .len();
    assert_eq!((m.records, m.bytes), (5, len));
    claim(&stores, 9);
    assert_eq!(stores.verify(NAME).unwrap().0.head.records, 6);
}
