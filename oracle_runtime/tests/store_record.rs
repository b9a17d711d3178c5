//! A store record found by seq (`StoreBackend::record`, a retried publication's answer) on a
//! file home: the log's byte range is halved, never read whole; every seq of a log longer than
//! one scan window is found as the log holds it, and a seq past the log is not.

use std::io::Write;

use oracle_core::Payload;
use oracle_core::payload::ClaimRecorded;
use oracle_memory::shared::Store;
use oracle_memory::{Cardinality, Claim, Criticality, Provenance};
use oracle_runtime::shared::{self as files, StoreBackend};
use serde_json::json;

/// Records in the test store: their lines take several times `RECORD_SCAN_BYTES`.
const RECORDS: u64 = 900;

#[test]
fn every_record_is_found_by_seq_as_the_log_holds_it() {
    let home = tempfile::tempdir().unwrap();
    let dir = files::stores_dir(home.path()).join("big");
    std::fs::create_dir_all(&dir).unwrap();
    let mut out = std::fs::File::create(dir.join(files::STORE_LOG)).unwrap();
    let mut store = Store::new();
    for i in 0..RECORDS {
        let claim = Claim {
            subject: format!("user-{i}"),
            predicate: "allergy".into(),
            value: json!(i),
            provenance: Provenance::UserAsserted,
            cardinality: Cardinality::Functional,
            valid: None,
            criticality: Criticality::Medium,
            derived_from: Vec::new(),
        };
        let a = store.decide_outside(claim).unwrap();
        let payload = Payload::ClaimRecorded(ClaimRecorded {
            assertion: serde_json::to_value(&a).unwrap(),
            note: String::new(),
            by: None,
        });
        let rec = store.seal("", "", &payload).unwrap();
        writeln!(out, "{}", files::line_of(&rec)).unwrap();
        store.apply(rec).unwrap();
    }
    drop(out);
    let len = std::fs::metadata(dir.join(files::STORE_LOG)).unwrap().len();
    assert!(
        len > 4 * files::RECORD_SCAN_BYTES,
        "{len} bytes: the halving is exercised"
    );
    let stores = files::FileStores::new(home.path());
    for (seq, rec) in store.records.iter().enumerate() {
        let found = stores.record("big", seq as u64).unwrap();
        assert_eq!(found.as_ref(), Some(rec), "record {seq}");
    }
    assert_eq!(stores.record("big", RECORDS).unwrap(), None);
}
