//! Property tests of the core invariants: the chain catches every tampering at the right seq,
//! the incremental state hash equals the from-scratch hash, snapshots replay like genesis, and
//! every lane expansion of LtHash gives the bytes of BLAKE3's XOF.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use oracle_core::payload::StateChanged;
use oracle_core::verify::{LogBytesError, Reason, verify_bytes};
use oracle_core::{Log, Replayer, Snapshot, State, Value, record, replay};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn valid_logs_round_trip_through_bytes(events in log(24)) {
        let mut mem = Log::new();
        for e in &events {
            mem.append(e.clone()).unwrap();
        }
        let bytes = to_bytes(&events);
        let head = verify_bytes(&bytes, Some(events.last().unwrap().hash)).unwrap();
        prop_assert_eq!(head, mem.head());
        let mut scratch = Vec::new();
        for ((_, line), e) in oracle_core::verify::split_records(&bytes).0.zip(&events) {
            prop_assert_eq!(&record::decode(line, &mut scratch).unwrap(), e);
        }
        // Replay reaches the state every event recorded.
        let state = replay::replay(&events).unwrap();
        prop_assert_eq!(state.hash(), events.last().unwrap().state_after);
    }

    #[test]
    fn any_single_byte_change_fails_at_its_record(events in log(16), pos in any::<prop::sample::Index>(), new in any::<u8>()) {
        let mut bytes = to_bytes(&events);
        let at = pos.index(bytes.len());
        prop_assume!(bytes[at] != new);
        bytes[at] = new;
        let seq = record_spans(&to_bytes(&events)).iter().position(|&(s, e)| s <= at && at < e).unwrap() as u64;
        let err = verify_bytes(&bytes, Some(events.last().unwrap().hash)).unwrap_err();
        prop_assert_eq!(err.seq(), seq, "{}", err);
    }

    #[test]
    fn removed_duplicated_or_swapped_records_fail_at_the_right_seq(events in log(16), pick in any::<prop::sample::Index>(), how in 0u8..3) {
        let n = events.len();
        let k = pick.index(n);
        let head = events.last().unwrap().hash;
        let mut changed = events.clone();
        let expected = match how {
            0 => { changed.remove(k); k }
            1 => { changed.insert(k + 1, events[k].clone()); k + 1 }
            _ => {
                prop_assume!(k + 1 < n);
                changed.swap(k, k + 1);
                k
            }
        };
        let err = verify_bytes(&to_bytes(&changed), Some(head)).unwrap_err();
        prop_assert_eq!(err.seq(), expected as u64, "{}", err);
    }

    #[test]
    fn any_truncation_is_detected(events in log(16), cut in any::<prop::sample::Index>()) {
        let bytes = to_bytes(&events);
        let at = cut.index(bytes.len());
        let spans = record_spans(&bytes);
        let err = verify_bytes(&bytes[..at], Some(events.last().unwrap().hash)).unwrap_err();
        match spans.iter().position(|&(s, _)| s == at) {
            // Cut on a record boundary: a valid prefix, caught only by the known head.
            Some(k) => prop_assert!(matches!(err, LogBytesError::HeadNotFound { .. }) && err.seq() == k as u64, "{}", err),
            None => {
                let k = spans.iter().position(|&(s, e)| s < at && at < e).unwrap();
                prop_assert!(matches!(err, LogBytesError::TornTail { .. }) && err.seq() == k as u64, "{}", err);
            }
        }
    }

    #[test]
    fn forged_payload_with_recomputed_payload_hash_is_caught(events in log(12), pick in any::<prop::sample::Index>(), v in value()) {
        let k = pick.index(events.len());
        let mut forged = events.clone();
        prop_assume!(forged[k].payload != v);
        forged[k].payload = v;
        forged[k].payload_hash = oracle_core::canon::payload_hash(&forged[k].payload).unwrap();
        let err = verify_bytes(&to_bytes(&forged), None).unwrap_err();
        prop_assert_eq!(err.seq(), k as u64);
    }

    /// Model test: the state behaves like a `BTreeMap`, and its incremental hash always equals
    /// the hash computed from scratch.
    #[test]
    fn incremental_state_hash_equals_from_scratch(ops in prop::collection::vec((0u8..12, prop::option::of(value())), 1..60)) {
        let mut state = State::new();
        let mut model: BTreeMap<String, Value> = BTreeMap::new();
        for (key, value) in ops {
            let key = format!("key{key}");
            let mut change = StateChanged::default();
            match value {
                Some(v) => { model.insert(key.clone(), v.clone()); change.set.insert(key, v); }
                None => { model.remove(&key); change.delete.push(key); }
            }
            state.apply_change(&change).unwrap();
            prop_assert_eq!(state.hash(), state.hash_from_scratch().unwrap());
            let entries: BTreeMap<String, Value> = state.iter().map(|(k, v)| (k.clone(), v.value())).collect();
            prop_assert_eq!(&entries, &model);
            prop_assert_eq!(state.hash(), State::from_entries(model.clone()).unwrap().hash());
        }
    }

    #[test]
    fn replay_from_any_snapshot_equals_replay_from_genesis(events in log(24), pick in any::<prop::sample::Index>()) {
        let k = pick.index(events.len());
        let genesis = replay::replay(&events).unwrap();
        let at_k = replay::replay(&events[..=k]).unwrap();
        let snap = Snapshot::capture(k as u64, &at_k);
        // Through JSON, as the store keeps it.
        let snap: Snapshot = serde_json::from_str(&serde_json::to_string(&snap).unwrap()).unwrap();
        let mut r = Replayer::from_snapshot(&snap, events[k].state_after).unwrap();
        for e in &events[k + 1..] {
            r.step(e).unwrap();
        }
        prop_assert_eq!(r.state(), &genesis);
    }
}

#[test]
fn a_tampered_snapshot_is_rejected() {
    let events = oracle_core::synth::synth_events(oracle_core::synth::SynthConfig {
        events: 40,
        seed: 3,
        keys: 5,
        shape: oracle_core::synth::Shape::Writes,
    })
    .unwrap();
    let state = replay::replay(&events[..=20]).unwrap();
    let mut snap = Snapshot::capture(20, &state);
    let key = snap.entries.keys().next().unwrap().clone();
    snap.entries.insert(key, Value::from(-7));
    assert!(matches!(
        Replayer::from_snapshot(&snap, events[20].state_after),
        Err(oracle_core::ReplayError::Snapshot(
            oracle_core::SnapshotError::Content { seq: 20, .. }
        ))
    ));
    // Consistent with itself but not with the log: also refused.
    snap.state_hash = State::from_entries(snap.entries.clone()).unwrap().hash();
    assert!(matches!(
        Replayer::from_snapshot(&snap, events[20].state_after),
        Err(oracle_core::ReplayError::Snapshot(
            oracle_core::SnapshotError::NotInLog { seq: 20, .. }
        ))
    ));
}

#[test]
fn replay_names_the_event_whose_state_hash_is_wrong() {
    let mut events = oracle_core::synth::synth_events(oracle_core::synth::SynthConfig {
        events: 30,
        seed: 9,
        keys: 4,
        shape: oracle_core::synth::Shape::Writes,
    })
    .unwrap();
    // A nondeterministic reducer would record a different state_after; forge one and relink so
    // the chain itself is valid.
    events[12].state_after = oracle_core::Hash([7; 32]);
    oracle_core::event::relink(&mut events).unwrap();
    let err = replay::replay(&events).unwrap_err();
    match err {
        oracle_core::ReplayError::StateAfter { seq, keys, .. } => {
            assert_eq!(seq, 12);
            assert_eq!(keys.len(), 1, "the one key event 12 wrote");
        }
        other => panic!("expected a state_after mismatch, got {other}"),
    }
    // Verification alone sees that state_before of 13 no longer follows.
    let err = oracle_core::verify::verify_events(&events).unwrap_err();
    assert_eq!(
        (err.seq, matches!(err.reason, Reason::StateBefore { .. })),
        (13, true)
    );
}

proptest! {
    /// The reducer's borrowed reader of `state_changed` accepts exactly what the typed decoder
    /// accepts, for valid payloads and for ones with fields dropped, added or retyped.
    #[test]
    fn borrowed_state_change_reader_matches_the_typed_decoder(
        set in prop::collection::btree_map("[a-e]", value(), 0..3),
        delete in prop::collection::vec("[a-h]", 0..3),
        extra in prop::option::of(("[a-z]{1,6}", value())),
        drop_set in any::<bool>(),
    ) {
        use oracle_core::payload::{EventKind, Payload, StateChangedRef};
        let mut obj = serde_json::Map::new();
        if !drop_set {
            obj.insert("set".into(), Value::Object(set.into_iter().collect()));
        }
        obj.insert("delete".into(), Value::from(delete));
        if let Some((k, v)) = extra {
            obj.insert(k, v);
        }
        let v = Value::Object(obj);
        prop_assert_eq!(StateChangedRef::read(&v).is_some(), Payload::decode(EventKind::StateChanged, &v).is_ok(), "{}", v);
    }
}

proptest! {
    /// The hand-written record envelope is exactly what serde_json writes for the event.
    #[test]
    fn record_encoder_matches_serde(events in log(12), seq in any::<u64>(), time in any::<u64>()) {
        for mut e in events {
            prop_assert_eq!(record::encode(&e), [serde_json::to_vec(&e).unwrap(), b"\n".to_vec()].concat());
            e.seq = seq;
            e.time = time;
            e.parents = vec![0, seq / 2, seq];
            prop_assert_eq!(record::encode(&e), [serde_json::to_vec(&e).unwrap(), b"\n".to_vec()].concat());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every lane expansion this CPU runs (portable, AVX2, AVX-512), forced, gives the bytes of
    /// the `blake3` crate's XOF, for lengths across the 64-byte block and 1024-byte chunk
    /// boundaries (an element over one chunk takes the crate's XOF on every path).
    #[test]
    fn every_expander_gives_the_blake3_xof(element in prop::collection::vec(any::<u8>(), 0..=3000)) {
        use oracle_core::lthash::{BYTES, Expander, expand};
        let mut h = blake3::Hasher::new_derive_key(oracle_core::hash::domain::STATE_ENTRY);
        h.update(&element);
        let mut want = [0u8; BYTES];
        h.finalize_xof().fill(&mut want);
        let mut got = [0u8; BYTES];
        for x in Expander::ALL.into_iter().filter(|x| x.is_available()) {
            x.expand(&element, &mut got);
            prop_assert!(got == want, "{:?} differs at length {}", x, element.len());
        }
        expand(&element, &mut got);
        prop_assert!(got == want, "expand ({:?}) differs at length {}", Expander::detected(), element.len());
    }
}

proptest! {
    /// Moving a payload into its value gives the same value as copying it.
    #[test]
    fn into_value_equals_to_value(p in payload(), seed in any::<u64>()) {
        prop_assert_eq!(p.clone().into_value(), p.to_value());
        let r = run_started(seed);
        prop_assert_eq!(r.clone().into_value(), r.to_value());
    }
}

/// The shape a capability had to have before grants were checked for `..` (docs/PLAN.md,
/// "Capabilities"): domain and action `*` or lowercase letters, digits, `_`, `-`, `.`; a scope
/// that is not empty and holds no whitespace or control character. Written here independently
/// of the parser.
fn shaped(domain: &str, action: &str, scope: &str) -> bool {
    let word = |w: &str| {
        w == "*"
            || (!w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.".contains(&b)))
    };
    word(domain)
        && word(action)
        && !scope.is_empty()
        && !scope.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Path patterns built from components that include `..`, `.`, names with dots in them and
/// globs, absolute or not, with doubled or trailing slashes.
fn path_pattern() -> impl Strategy<Value = String> {
    let component = prop_oneof![
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just("...".to_owned()),
        Just("..a".to_owned()),
        Just("a..".to_owned()),
        Just("*".to_owned()),
        Just("**".to_owned()),
        Just(String::new()),
        "[a-z.]{1,4}",
    ];
    (
        any::<bool>(),
        prop::collection::vec(component, 1..6),
        any::<bool>(),
    )
        .prop_map(|(absolute, parts, trailing)| {
            let mut p = parts.join("/");
            if absolute {
                p.insert(0, '/');
            }
            if trailing {
                p.push('/');
            }
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A grant that reaches paths (`fs`, `proc`, `*`) is refused exactly when its pattern has a
    /// `..` component, naming the grant; every other grant of the old shape still parses, to
    /// the same capability. Other domains' scopes are not paths: `..` in them is left alone.
    #[test]
    fn a_grant_is_refused_exactly_when_its_path_pattern_has_a_dot_dot_component(
        domain in prop_oneof![Just("fs"), Just("proc"), Just("*"), Just("net"), Just("tool"), Just("kv")],
        action in prop_oneof![Just("read"), Just("write"), Just("exec"), Just("*")],
        scope in path_pattern(),
    ) {
        use oracle_core::capability::{Capability, CapabilityError};
        let text = format!("{domain}:{action}:{scope}");
        let dot_dot = scope.split('/').any(|c| c == "..");
        let paths = matches!(domain, "fs" | "proc" | "*");
        match text.parse::<Capability>() {
            Ok(c) => {
                prop_assert!(shaped(domain, action, &scope), "{}", text);
                prop_assert!(!(paths && dot_dot), "`{}` has a `..` component, yet parsed", text);
                prop_assert_eq!(c.to_string(), text);
            }
            Err(CapabilityError::DotDot(named)) => {
                prop_assert!(paths && dot_dot, "`{}` refused for a `..` it does not have", text);
                prop_assert_eq!(&named, &text, "the error names the grant");
            }
            Err(other) => {
                prop_assert!(!shaped(domain, action, &scope), "`{}` refused: {}", text, other);
            }
        }
    }
}
