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
        program: "p".into(),
        program_hash: oracle_core::Hash::ZERO,
        seed: 0,
        grants: vec![],
        inputs: Map::new(),
        memory: None,
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
    assert_eq!(after.get("a"), Some(&json!(1)));
    assert_eq!(after.get("b"), Some(&json!("two")));
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
