//! Tests written for mutants that cargo-mutants found surviving oracle_core's own suite
//! (docs/TESTING.md, "Mutation score"): each pins a behaviour the rest of the suite only
//! exercised through other crates, or not at all.

use oracle_core::lthash::{BYTES, LtHash, expand};
use oracle_core::payload::{RunStarted, StateChanged};
use oracle_core::{Event, Payload, Recorder, ReplayError, Replayer, State, reduce};
use serde_json::{Map, json};

/// A three-event log: `run_started`, a `state_changed` writing `a` and `b`, one deleting `a`.
fn log() -> Vec<Event> {
    let mut r = Recorder::new();
    let started = Payload::RunStarted(RunStarted {
        format: Some(2),
        ..oracle_test_support::minimal_run_started("p", 0, &[])
    });
    let mut set = Map::new();
    set.insert("a".into(), json!(1));
    set.insert("b".into(), json!("two"));
    let write = Payload::StateChanged(StateChanged {
        set,
        delete: vec![],
    });
    let delete = Payload::StateChanged(StateChanged {
        set: Map::new(),
        delete: vec!["a".into()],
    });
    vec![
        r.record(0, vec![], started).unwrap(),
        r.record(1, vec![0], write).unwrap(),
        r.record(2, vec![1], delete).unwrap(),
    ]
}

#[test]
fn the_reducer_applies_state_changes_and_ignores_other_kinds() {
    let events = log();
    let empty = State::new();
    assert_eq!(reduce::apply(&empty, &events[0]).unwrap(), empty);
    let after = reduce::apply(&empty, &events[1]).unwrap();
    assert_eq!(after.get("a"), Some(json!(1)));
    assert_eq!(after.get("b"), Some(json!("two")));
    assert_eq!(after.hash(), events[1].state_after);
    let after = reduce::apply(&after, &events[2]).unwrap();
    assert_eq!(after.get("a"), None);
    assert_eq!(after.hash(), events[2].state_after);

    // The typed path gives the same state.
    let mut typed = State::new();
    reduce::apply_payload(&mut typed, &events[1].typed().unwrap()).unwrap();
    assert_eq!(typed.hash(), events[1].state_after);
    reduce::apply_payload(&mut typed, &events[0].typed().unwrap()).unwrap();
    assert_eq!(
        typed.hash(),
        events[1].state_after,
        "run_started writes nothing"
    );
}

#[test]
fn touched_keys_are_the_keys_set_and_deleted() {
    let events = log();
    assert!(reduce::touched_keys(&events[0]).is_empty());
    assert_eq!(reduce::touched_keys(&events[1]), ["a", "b"]);
    assert_eq!(reduce::touched_keys(&events[2]), ["a"]);
}

#[test]
fn a_replay_error_names_its_seq_and_the_keys_the_event_wrote() {
    let mut events = log();
    let mut rep = Replayer::genesis();
    assert_eq!(rep.next_seq(), 0);
    rep.step(&events[0]).unwrap();
    assert_eq!(rep.next_seq(), 1);
    // A recorded state_after that the reducer does not compute.
    events[1].state_after = oracle_core::Hash([9; 32]);
    let e = rep.step(&events[1]).unwrap_err();
    assert_eq!(e.seq(), Some(1));
    assert!(matches!(e, ReplayError::StateAfter { .. }));
    assert!(
        e.to_string()
            .ends_with("(keys written by this event: a, b)"),
        "{e}"
    );
    // Out of order: the seq the replay stopped at.
    let mut rep = Replayer::genesis();
    let e = rep.step(&events[2]).unwrap_err();
    assert_eq!(e.seq(), Some(2));
    assert_eq!(rep.next_seq(), 0);
}

#[test]
fn the_accumulator_bytes_are_the_sum_of_its_elements() {
    let mut acc = LtHash::default();
    assert_eq!(acc.as_bytes(), &[0u8; BYTES]);
    let mut e = [0u8; BYTES];
    expand(b"x", &mut e);
    acc.add(&e);
    assert_eq!(acc.as_bytes(), &e, "0 + e = e, lane by lane");
    assert!(format!("{acc:?}").starts_with("LtHash("), "{acc:?}");
    assert!(format!("{acc:?}").contains(&acc.digest().short()));
    acc.remove(&e);
    assert_eq!(acc.as_bytes(), &[0u8; BYTES]);
}

/// The streaming writers give the bytes `canon::encode` gives for the same value (the plan hash
/// uses them; only oracle_plan's goldens exercised them).
#[test]
fn the_streaming_writers_match_the_encoder() {
    use oracle_core::canon::{encode, write as w};
    let same = |v: serde_json::Value, f: &dyn Fn(&mut Vec<u8>)| {
        let mut out = Vec::new();
        f(&mut out);
        assert_eq!(out, encode(&v).unwrap(), "{v}");
    };
    same(json!(null), &|o| w::null(o));
    same(json!(true), &|o| w::bool(o, true));
    same(json!(false), &|o| w::bool(o, false));
    same(json!(7), &|o| w::int(o, 7));
    same(json!(0), &|o| w::int(o, 0));
    same(json!(-3), &|o| w::int(o, -3));
    same(json!(i64::MIN), &|o| w::int(o, i64::MIN));
    same(json!(u64::MAX), &|o| w::uint(o, u64::MAX));
    same(json!("héllo"), &|o| w::str(o, "héllo"));
    same(json!([1, "a"]), &|o| {
        w::list(o, 2);
        w::int(o, 1);
        w::str(o, "a");
    });
    same(json!({"a": null, "b": [true]}), &|o| {
        w::map(o, 2);
        w::key(o, "a");
        w::null(o);
        w::key(o, "b");
        w::list(o, 1);
        w::bool(o, true);
    });
}

/// Error paths name keys as `.key` when plain (letters, digits, `_`, `-`), else quoted.
#[test]
fn a_float_is_reported_at_its_path() {
    use oracle_core::canon::encode;
    let e = encode(&json!({"a_b-1": {"x y": [1.5]}})).unwrap_err();
    assert!(e.to_string().contains(r#"$.a_b-1["x y"][0]"#), "{e}");
}

#[test]
fn hashes_print_parse_and_refuse_as_documented() {
    use oracle_core::Hash;
    let h = Hash([0xab; 32]);
    let hex = "ab".repeat(32);
    assert_eq!(h.to_string(), hex);
    assert_eq!(format!("{h:?}"), "Hash(abababababab)");
    assert_eq!(h.short(), "abababababab");
    assert_eq!(hex.parse::<Hash>().unwrap(), h);
    assert_eq!(h.as_bytes(), &[0xab; 32]);
    // The first character that is not lowercase hex is named.
    let bad = format!("0g{}", "0".repeat(62));
    assert_eq!(
        Hash::from_hex(&bad),
        Err(oracle_core::hash::HashParseError::Char { at: 1 })
    );
    // Two bad characters do not cancel out.
    let two = format!("gg{}", "0".repeat(62));
    assert!(Hash::from_hex(&two).is_err());
    assert!(Hash::from_hex(&hex.to_uppercase()).is_err());
    let e = serde_json::from_value::<Hash>(json!(5)).unwrap_err();
    assert!(e.to_string().contains("64 lowercase hex characters"), "{e}");
}

/// Capability words may hold digits (`v2`), and a record exactly at the size limit is not
/// refused for its size.
#[test]
fn capability_words_take_digits_and_records_at_the_limit_are_read() {
    let c: oracle_core::capability::Capability = "net2:get3:x".parse().unwrap();
    assert_eq!(c.to_string(), "net2:get3:x");
    let line = vec![b'x'; oracle_core::record::RECORD_BYTES_MAX as usize];
    let e = oracle_core::record::decode(&line, &mut Vec::new()).unwrap_err();
    assert!(
        !matches!(e, oracle_core::record::RecordError::TooLarge { .. }),
        "{e}"
    );
    let over = vec![b'x'; oracle_core::record::RECORD_BYTES_MAX as usize + 1];
    assert!(matches!(
        oracle_core::record::decode(&over, &mut Vec::new()),
        Err(oracle_core::record::RecordError::TooLarge { .. })
    ));
}
