//! Tests written for mutants that cargo-mutants found surviving oracle_core's own suite in
//! `verify.rs` and `fast.rs` (docs/TESTING.md, "Mutation score"): payloads whose shape the
//! typed payload refuses, sealed so every hash holds, must be refused by the fast path exactly
//! as by the reference path; and the chain's own bookkeeping.

use oracle_core::payload::{RunFinished, RunStarted, RunStatus};
use oracle_core::verify::{self, ChainCheck, Head, LogBytesError, Reason, Scratch};
use oracle_core::{Event, EventBody, EventKind, Hash, Payload, Recorder, record};
use serde_json::{Map, Value, json};

fn started() -> Payload {
    Payload::RunStarted(RunStarted {
        format: Some(2),
        ..oracle_test_support::minimal_run_started("p", 0, &["fs:read:a", "fs:read:b"])
    })
}

/// A valid event of `payload`'s kind as event 0 (`run_started`) or event 1 after it, then its
/// payload replaced by `edit` and everything resealed, encoded as a record line.
fn line_with(payload: Payload, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut r = Recorder::new();
    let first = r.record(0, vec![], started()).unwrap();
    let e = if matches!(payload, Payload::RunStarted(_)) {
        first
    } else {
        r.record(1, vec![0], payload).unwrap()
    };
    let mut body = EventBody {
        seq: e.seq,
        time: e.time,
        kind: e.kind,
        parents: e.parents.clone(),
        payload: e.payload.clone(),
        state_before: e.state_before,
        state_after: e.state_after,
    };
    edit(&mut body.payload);
    let sealed = Event::seal(body, e.prev).unwrap();
    let mut line = record::encode(&sealed);
    // A record line, as the verifier is given it: without its newline.
    line.pop();
    line
}

/// Both paths refuse the record (the fast path may only be faster, never laxer).
fn both_refuse(line: &[u8], what: &str) {
    assert!(!line.ends_with(b"\n"));
    let mut scratch = Scratch::default();
    let fast = verify::check_line(line, &mut scratch);
    let reference = verify::check_line_reference(line, &mut Vec::new());
    let refused = |c: &verify::LineCheck| !matches!(c, Ok((_, Ok(()))));
    assert!(refused(&reference), "{what}: the reference accepts it");
    assert!(
        refused(&fast),
        "{what}: the fast path accepts what the reference refuses"
    );
}

#[test]
fn payload_shapes_the_typed_payload_refuses_are_refused_by_the_fast_path_too() {
    // The lines below are valid but for the edit: unedited, they take the fast path.
    let mut scratch = oracle_core::fast::FastScratch::default();
    for p in [
        started(),
        Payload::RunFinished(RunFinished {
            status: RunStatus::Failed,
            reason: "r".into(),
            by: None,
        }),
    ] {
        let line = line_with(p, |_| {});
        assert!(oracle_core::fast::check_line_fast(&line, &mut scratch).is_some());
    }
    // A hash field that is hex but not 64 characters (fast.rs: the HashHex length check).
    both_refuse(
        &line_with(started(), |p| p["program_hash"] = json!("abcd")),
        "a short program_hash",
    );
    // Grants not strictly sorted: a repeated one (SortedStrings: `<`, not `<=`).
    both_refuse(
        &line_with(started(), |p| {
            p["grants"] = json!(["fs:read:a", "fs:read:a"]);
        }),
        "a repeated grant",
    );
    // A run's status that is neither `completed` nor `failed`.
    let finished = Payload::RunFinished(RunFinished {
        status: RunStatus::Completed,
        reason: String::new(),
        by: None,
    });
    both_refuse(
        &line_with(finished.clone(), |p| p["status"] = json!("paused")),
        "status paused",
    );
    both_refuse(
        &line_with(finished, |p| p["status"] = json!("failed ")),
        "status with a trailing space",
    );
    // A key both set and deleted, first in both lists, and later in either (the merge walk
    // of `disjoint` must advance on both sides).
    let change = |set: Value, delete: Value| {
        let mut v = json!({"set": {}, "delete": []});
        v["set"] = set;
        v["delete"] = delete;
        v
    };
    let changed = Payload::StateChanged(oracle_core::payload::StateChanged {
        set: Map::new(),
        delete: vec!["z".into()],
    });
    for (set, delete) in [
        (json!({"k": 1}), json!(["k"])),
        (json!({"a": 1, "k": 2}), json!(["k"])),
        (json!({"k": 1}), json!(["a", "k"])),
    ] {
        let what = format!("set {set} and delete {delete}");
        both_refuse(
            &line_with(changed.clone(), |p| *p = change(set, delete)),
            &what,
        );
    }
}

#[test]
fn non_canonical_text_is_refused_by_the_fast_path_too() {
    // The record's text is not hashed (its canonical encoding is): `\u0041` for `A` and an
    // integer below i64::MIN hash like canonical text would, so only the canonical-form check
    // refuses them.
    let good = line_with(started(), |p| p["program"] = json!("pA"));
    let mut scratch = oracle_core::fast::FastScratch::default();
    assert!(
        oracle_core::fast::check_line_fast(&good, &mut scratch).is_some(),
        "the unedited line takes the fast path"
    );
    let text = String::from_utf8(good.clone()).unwrap();
    assert!(text.contains("\"pA\""));
    both_refuse(
        text.replacen("\"pA\"", "\"p\\u0041\"", 1).as_bytes(),
        "an escaped A",
    );
    both_refuse(
        text.replacen("\"pA\"", "\"p\\u0020\"", 1).as_bytes(),
        "an escaped space",
    );
    let big = line_with(started(), |p| p["inputs"] = json!({"n": -5}));
    let text = String::from_utf8(big).unwrap();
    both_refuse(
        text.replacen("-5", "-9223372036854775809", 1).as_bytes(),
        "an integer below i64::MIN",
    );
}

#[test]
fn a_resumed_chain_check_continues_from_its_head() {
    let head = Head {
        next_seq: 7,
        hash: Hash::ZERO,
        time: 3,
        state: oracle_core::State::new().hash(),
    };
    assert_eq!(ChainCheck::resume(head).head(), head);
    assert_ne!(ChainCheck::resume(head).head(), ChainCheck::new().head());
}

#[test]
fn a_second_run_started_is_refused_as_such() {
    let mut r = Recorder::new();
    let first = r.record(0, vec![], started()).unwrap();
    let mut chain = ChainCheck::new();
    chain.push_event(&first).unwrap();
    // A `run_started` at seq 1, linked and sealed correctly.
    let body = EventBody {
        seq: 1,
        time: 0,
        kind: EventKind::RunStarted,
        parents: vec![],
        payload: first.payload.clone(),
        state_before: first.state_after,
        state_after: first.state_after,
    };
    let second = Event::seal(body, first.hash).unwrap();
    let err = chain.push_event(&second).unwrap_err();
    assert_eq!(err.seq, 1);
    assert_eq!(err.reason, Reason::RunStartedLater);
}

#[test]
fn records_are_split_at_their_offsets_and_a_torn_tail_is_reported_where_it_starts() {
    let mut r = Recorder::new();
    let mut bytes = Vec::new();
    let mut starts = Vec::new();
    for (i, p) in [
        started(),
        Payload::RunFinished(RunFinished {
            status: RunStatus::Completed,
            reason: "done".into(),
            by: None,
        }),
    ]
    .into_iter()
    .enumerate()
    {
        starts.push(bytes.len() as u64);
        let parents = if i == 0 { vec![] } else { vec![0] };
        let e = r.record(i as u64, parents, p).unwrap();
        record::encode_into(&e, &mut bytes);
    }
    let (lines, tail) = verify::split_records(&bytes);
    let offsets: Vec<u64> = lines.map(|(at, _)| at).collect();
    assert_eq!(offsets, starts);
    assert!(tail.is_empty());
    let complete = bytes.len() as u64;
    assert_eq!(verify::verify_bytes(&bytes, None).unwrap().next_seq, 2);
    bytes.extend_from_slice(b"{\"seq\":2");
    match verify::verify_bytes(&bytes, None) {
        Err(LogBytesError::TornTail { seq, offset, len }) => {
            assert_eq!((seq, offset, len), (2, complete, 8));
        }
        other => panic!("{other:?}"),
    }
}

/// A forged `run_started` line: its `inputs` are `{"n": shown}` in the canonical bytes that
/// `edit` derives from the honest encoding, under a payload hash of those bytes; then `from` in
/// the line's text is replaced by `to` (text a lax encoder would map to the edited bytes).
fn forged_line(shown: Value, edit: impl FnOnce(&mut Vec<u8>), from: &str, to: &str) -> String {
    use oracle_core::canon;
    use oracle_core::hash::{domain, hash_in};
    let mut r = Recorder::new();
    let e = r.record(0, vec![], started()).unwrap();
    let mut payload = e.payload.clone();
    payload["inputs"] = json!({ "n": shown });
    let mut canonical = canon::encode(&payload).unwrap();
    edit(&mut canonical);
    let body = EventBody {
        seq: 0,
        time: 0,
        kind: EventKind::RunStarted,
        parents: vec![],
        payload,
        state_before: e.state_before,
        state_after: e.state_after,
    };
    let sealed = Event::seal_hashed(body, hash_in(domain::PAYLOAD, &canonical), Hash::ZERO);
    let mut line = record::encode(&sealed);
    line.pop();
    let text = String::from_utf8(line).unwrap();
    assert!(text.contains(from));
    text.replacen(from, to, 1)
}

/// An integer below i64::MIN has no canonical encoding, but a forger can hash the bytes a lax
/// encoder would give it (`INT_NEGATIVE` and 2^63): the fast path must still refuse the text
/// (`m > 2^63` is not an integer), as the reference does.
#[test]
fn an_integer_below_i64_min_is_refused_even_with_a_forged_payload_hash() {
    use oracle_core::canon::tag;
    // -5 is INT_NEGATIVE then 4 (big-endian u64): make it 2^63, the lax encoding of
    // -9223372036854775809.
    let forged = forged_line(
        json!(-5),
        |canonical| {
            let mut four = vec![tag::INT_NEGATIVE];
            four.extend_from_slice(&4u64.to_be_bytes());
            let at = canonical
                .windows(9)
                .position(|w| w == four.as_slice())
                .unwrap();
            canonical[at + 1..at + 9].copy_from_slice(&(1u64 << 63).to_be_bytes());
        },
        "-5",
        "-9223372036854775809",
    );
    both_refuse(forged.as_bytes(), "an integer below i64::MIN, hash forged");
}

/// A payload nested past the canonical depth limit (`DEPTH_MAX`) has no canonical encoding;
/// a forger can still hash the bytes a lax encoder would give it. The fast path hands deep
/// payloads to the reference path, which refuses them: it must not follow them itself.
#[test]
fn a_payload_nested_past_the_depth_limit_is_refused_even_with_a_forged_payload_hash() {
    use oracle_core::canon::tag;
    let nest = |depth: usize| {
        let mut v = json!([]);
        for _ in 1..depth {
            v = json!([v]);
        }
        v
    };
    let (deep, deeper) = (100usize, 140usize);
    let forged = forged_line(
        nest(deep),
        |canonical| {
            // `deep` nested lists are `deep - 1` groups (LIST, 1) then (LIST, 0): add more.
            let mut group = vec![tag::LIST];
            group.extend_from_slice(&1u64.to_be_bytes());
            let at = canonical
                .windows(9)
                .position(|w| w == group.as_slice())
                .unwrap();
            for _ in deep..deeper {
                canonical.splice(at..at, group.iter().copied());
            }
        },
        &nest(deep).to_string(),
        &nest(deeper).to_string(),
    );
    both_refuse(
        forged.as_bytes(),
        "a payload nested 140 levels, hash forged",
    );
}
