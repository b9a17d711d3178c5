//! End-to-end tests of a shared store's checkpoint and retention, with the real `oracle`
//! binary: a read from a checkpoint answers exactly what a read of the whole log answers (and a
//! run records the same bytes), a damaged, foreign or stale checkpoint is ignored and rebuilt,
//! and `oracle memory compact NAME --keep N` folds old records into a checked base that names
//! what it took out, after which the store reads, verifies and takes claims as before, and a run
//! that read compacted records still replays offline.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::Home;
use common::{ALLERGY_ASSERT as ASSERT, ALLERGY_RECALL as RECALL};
use common::{output_of, plan_file as plan, run_ok, store_json as store};
use serde_json::Value;

fn dir(home: &Home, name: &str) -> PathBuf {
    home.path().join("memory").join(name)
}

/// `n` claims from outside any run about `n` users of store `name` (more than a checkpoint
/// needs to be written).
fn claims(home: &Home, name: &str, n: u64) {
    for i in 0..n {
        let args = common::filler_claim(name, i);
        run_ok(home, &args.iter().map(String::as_str).collect::<Vec<_>>());
    }
}

fn flip_last_byte(path: &Path) {
    let last = fs::metadata(path).unwrap().len() - 1;
    flip_byte(path, last);
}

fn flip_byte(path: &Path, at: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at as usize] ^= 1;
    fs::write(path, bytes).unwrap();
}

#[test]
fn a_checkpoint_answers_as_the_whole_log_does_and_a_bad_one_is_ignored_and_rebuilt() {
    let home = Home::new();
    let (a, b) = (plan(&home, "a.plan", ASSERT), plan(&home, "b.plan", RECALL));
    run_ok(&home, &["run", &a, "--memory", "alice"]);
    claims(&home, "alice", 20);
    let ck = dir(&home, "alice").join("checkpoint.bin");
    assert!(ck.is_file(), "20 records folded: a checkpoint is written");
    let full = store(&home, "alice");
    // One line asked for: only its section of the checkpoint is read, and it shows what the
    // whole store shows for that line.
    let (code, one) = home.json(&[
        "memory",
        "--memory",
        "alice",
        "--subject",
        "user-3",
        "--predicate",
        "allergy",
        "--json",
    ]);
    assert_eq!(code, 0, "{one}");
    let wanted: Vec<&Value> = full["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["subject"] == "user-3")
        .collect();
    assert_eq!(wanted.len(), 1);
    assert_eq!(
        one["lines"].as_array().unwrap().iter().collect::<Vec<_>>(),
        wanted
    );
    assert_eq!(one["store"], full["store"]);
    // A run reading through the checkpoint records exactly what it records without one.
    run_ok(&home, &["run", &b, "--memory", "alice"]);
    fs::remove_file(&ck).unwrap();
    run_ok(&home, &["run", &b, "--memory", "alice"]);
    assert!(ck.is_file(), "a reader that finds none rebuilds it");
    let (r1, r2) = (
        output_of(&home, "allergy_recall-1", "allergy"),
        output_of(&home, "allergy_recall-2", "allergy"),
    );
    assert_eq!(r1, r2, "the recorded read is the same bytes");
    assert_eq!(r1["value"], "penicillin");
    assert_eq!(r1["store"]["records"], 21);
    // A byte changed anywhere in the checkpoint (its header, its table, a line's section, the
    // whole fold) is never believed: the run records the same read, and the store the same.
    let size = fs::metadata(&ck).unwrap().len();
    for (k, at) in [10, 80, size / 3, size / 2, size - 2]
        .into_iter()
        .enumerate()
    {
        flip_byte(&ck, at);
        run_ok(&home, &["run", &b, "--memory", "alice"]);
        let r = output_of(&home, &format!("allergy_recall-{}", k + 3), "allergy");
        assert_eq!(r, r1, "a read through a checkpoint damaged at byte {at}");
    }
    // A checkpoint with a damaged header is ignored (never believed) and replaced. (A damaged
    // section is never believed for its lines, above; a whole read does not need it.)
    flip_byte(&ck, 80);
    let damaged = fs::read(&ck).unwrap();
    assert_eq!(store(&home, "alice"), full);
    assert_ne!(fs::read(&ck).unwrap(), damaged, "rewritten");
    // Another store's checkpoint (sealed, but not this store's) is ignored.
    run_ok(&home, &["run", &a, "--memory", "bob"]);
    claims(&home, "bob", 20);
    fs::copy(&ck, dir(&home, "bob").join("checkpoint.bin")).unwrap();
    assert_eq!(store(&home, "bob")["store"]["records"], 21);
    assert_ne!(
        store(&home, "bob")["store"]["head"],
        full["store"]["head"],
        "bob's own records, not alice's fold"
    );
    // A stale checkpoint (from before more records) is used with the records after it.
    let old = fs::read(&ck).unwrap();
    claims(&home, "alice", 1);
    fs::write(&ck, &old).unwrap();
    let after = store(&home, "alice");
    assert_eq!(after["store"]["records"], 22);
    let (code, v) = home.json(&["verify", "--memory", "alice", "--json"]);
    assert_eq!((code, &v["store"]), (0, &after["store"]), "{v}");
}

#[test]
fn compaction_keeps_the_newest_records_and_a_checked_base_naming_what_it_took_out() {
    let home = Home::new();
    let (a, b) = (plan(&home, "a.plan", ASSERT), plan(&home, "b.plan", RECALL));
    run_ok(&home, &["run", &a, "--memory", "alice"]);
    claims(&home, "alice", 5);
    run_ok(&home, &["run", &b, "--memory", "alice"]);
    let b_before = home.snapshot("allergy_recall-1");
    let before = store(&home, "alice");
    let (_, exported, _) = home.oracle(&["memory", "export", "alice"]);
    let log = fs::read_to_string(dir(&home, "alice").join("store.jsonl")).unwrap();
    assert_eq!(
        exported, log,
        "an uncompacted store exports its log's bytes"
    );
    let (code, v) = home.json(&["memory", "compact", "alice", "--keep", "2", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["kept"], 2);
    assert_eq!(v["compacted"]["from"], 0);
    assert_eq!(v["compacted"]["to"], 4);
    // The segment is provable: its head is record 3's hash, its digest that of its lines.
    let lines: Vec<&str> = exported.split_inclusive('\n').collect();
    let rec3: Value = serde_json::from_str(lines[3]).unwrap();
    assert_eq!(v["compacted"]["head"], rec3["hash"]);
    let mut h = blake3::Hasher::new_derive_key("oracle v1 store compacted segment");
    h.update(lines[..4].concat().as_bytes());
    assert_eq!(v["compacted"]["digest"], h.finalize().to_hex().as_str());
    let log = fs::read_to_string(dir(&home, "alice").join("store.jsonl")).unwrap();
    assert_eq!(
        log,
        lines[4..].concat(),
        "the newest two records stay, unchanged"
    );
    // The store answers as before, verifies, and names the segment.
    assert_eq!(store(&home, "alice"), before);
    let (code, ver) = home.json(&["verify", "--memory", "alice", "--json"]);
    assert_eq!(code, 0, "{ver}");
    assert_eq!(ver["compacted"][0], v["compacted"]);
    // Its export carries the base on a first line, and imports into a store that verifies.
    let (code, compacted, _) = home.oracle(&["memory", "export", "alice"]);
    assert_eq!(code, 0);
    let (first, rest) = compacted.split_once('\n').unwrap();
    assert!(first.starts_with("{\"base\":"), "{first}");
    assert_eq!(rest, lines[4..].concat());
    let file = home.path().join("alice.export");
    fs::write(&file, &compacted).unwrap();
    run_ok(
        &home,
        &["memory", "import", "bob", "--file", file.to_str().unwrap()],
    );
    let (code, bob) = home.json(&["verify", "--memory", "bob", "--json"]);
    assert_eq!(code, 0, "{bob}");
    assert_eq!(
        (&bob["store"]["head"], &bob["compacted"]),
        (&ver["store"]["head"], &ver["compacted"])
    );
    // A base line whose body was changed is refused on import.
    let forged = compacted.replacen("\"cbor\":\"", "\"cbor\":\"AA", 1);
    fs::write(&file, forged).unwrap();
    let (code, _, err) = home.oracle(&[
        "memory",
        "import",
        "carol",
        "--file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 4, "{err}");
    // It takes new claims on top, and compacts again, keeping both segments.
    claims(&home, "alice", 3);
    run_ok(&home, &["memory", "compact", "alice", "--keep", "1"]);
    let (code, ver) = home.json(&["verify", "--memory", "alice", "--json"]);
    assert_eq!(code, 0, "{ver}");
    assert_eq!(ver["store"]["records"], 9);
    assert_eq!(ver["compacted"][1]["from"], 4);
    assert_eq!(ver["compacted"][1]["to"], 8);
    // A run that read compacted records replays offline, byte for byte.
    home.replays_and_verifies("allergy_recall-1", "completed");
    assert_eq!(home.snapshot("allergy_recall-1"), b_before);
    run_ok(&home, &["run", &b, "--memory", "alice"]);
    assert_eq!(
        output_of(&home, "allergy_recall-2", "allergy")["value"],
        "penicillin"
    );
    // A base that was changed is refused, never believed (it cannot be rebuilt).
    flip_last_byte(&dir(&home, "alice").join("base.bin"));
    let (code, _, err) = home.oracle(&["verify", "--memory", "alice"]);
    assert_eq!(code, 4, "{err}");
    let (code, _, _) = home.oracle(&["memory", "--memory", "alice"]);
    assert_eq!(code, 4);
}

#[test]
fn compact_needs_keep_and_a_short_log_has_nothing_to_compact() {
    let home = Home::new();
    let a = plan(&home, "a.plan", ASSERT);
    run_ok(&home, &["run", &a, "--memory", "alice"]);
    let (code, _, err) = home.oracle(&["memory", "compact", "alice"]);
    assert_eq!(code, 2, "{err}");
    let (code, v) = home.json(&["memory", "compact", "alice", "--keep", "5", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["compacted"], Value::Null);
    assert!(!dir(&home, "alice").join("base.bin").exists());
    let (code, _, _) = home.oracle(&["memory", "compact", "nobody", "--keep", "1"]);
    assert_eq!(code, 5);
}
