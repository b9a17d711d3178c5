//! Golden vectors: the exact bytes and hashes of a sample payload, event and state. If this test
//! fails, the encoding drifted: every existing log would stop verifying. Bump the `v1` domains
//! and the format version instead. Refresh deliberately with `UPDATE_EXPECT=1 cargo test`.

use std::path::PathBuf;

use oracle_core::payload::*;
use oracle_core::{Hash, Recorder, State, canon, record};
use serde_json::{Map, Value, json};

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/golden/vectors.json")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn vectors() -> Value {
    let payload = json!({
        "zeta": [1, -1, 18446744073709551615u64, -9223372036854775808i64],
        "alpha": {"text": "héllo\n", "ok": true, "none": null},
    });
    let mut r = Recorder::new();
    let mut inputs = Map::new();
    inputs.insert("path".into(), json!("fixtures/data/notes.txt"));
    let e0 = r
        .record(
            0,
            vec![],
            Payload::RunStarted(RunStarted {
                format: None,
                program: "golden".into(),
                program_hash: oracle_core::hash::hash_in(
                    oracle_core::hash::domain::VALUE,
                    b"golden",
                ),
                seed: 42,
                grants: vec!["fs:read:fixtures/**".into()],
                inputs,
                budget: None,
                tools: None,
                memory: None,
                domains: None,
                key: None,
                parent: None,
            }),
        )
        .unwrap();
    let mut set = Map::new();
    set.insert("count".into(), json!(3));
    set.insert("words".into(), json!(["a", "b"]));
    let e1 = r
        .record(
            5,
            vec![0],
            Payload::StateChanged(StateChanged {
                set,
                delete: vec![],
            }),
        )
        .unwrap();
    let state = State::from_entries([
        ("count".to_string(), json!(3)),
        ("words".to_string(), json!(["a", "b"])),
    ])
    .unwrap();
    json!({
        "payload": payload,
        "payload_canonical_hex": hex(&canon::encode(&payload).unwrap()),
        "payload_hash": canon::payload_hash(&payload).unwrap(),
        "empty_state_hash": State::new().hash(),
        "state_entries": {"count": 3, "words": ["a", "b"]},
        "state_hash": state.hash(),
        "events_jsonl": [
            String::from_utf8(record::encode(&e0)).unwrap(),
            String::from_utf8(record::encode(&e1)).unwrap(),
        ],
        "event_body_hashes": [e0.body_hash(), e1.body_hash()],
        "head_hash": e1.hash,
        "zero_hash": Hash::ZERO,
    })
}

#[test]
fn golden_vectors_pin_the_encoding() {
    let actual = serde_json::to_string_pretty(&vectors()).unwrap() + "\n";
    let path = golden_path();
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .expect("fixtures/golden/vectors.json (run with UPDATE_EXPECT=1 to create)");
    assert_eq!(
        actual, expected,
        "encoding drifted from fixtures/golden/vectors.json"
    );
}

#[test]
fn golden_events_verify_as_a_log() {
    let v = vectors();
    let text: String = v["events_jsonl"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let head = oracle_core::verify::verify_bytes(text.as_bytes(), None).unwrap();
    assert_eq!(head.hash.to_hex(), v["head_hash"].as_str().unwrap());
    assert_eq!(head.state.to_hex(), v["state_hash"].as_str().unwrap());
}
