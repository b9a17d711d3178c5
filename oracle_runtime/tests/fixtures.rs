//! Fixture logs: builds realistic runs (and deliberately broken copies) deterministically and
//! checks them byte for byte against `fixtures/logs/`, so the files other tests, the README and
//! users rely on can never drift from what the recorder writes. Regenerate deliberately with
//! `UPDATE_EXPECT=1 cargo test -p oracle_runtime --test runtime fixtures::`.

use std::path::PathBuf;

use oracle_core::event::relink;
use oracle_core::payload::*;
use oracle_core::verify::{LogBytesError, Reason, verify_bytes};
use oracle_core::{Event, EventKind, record, replay};
use serde_json::json;

/// The file `fs.read` returns in the quickstart run. `wc -w -l` says 38 words, 4 lines.
const NOTES: &str = "Oracle keeps a log of every step an agent takes.\n\
Each entry is hashed and linked to the one before it,\n\
so changing any line breaks the chain.\n\
Anyone can replay the log and get the same state.\n";

/// Seq of the record `broken/tampered-middle.jsonl` edits: the `tool_called` of step `stats`,
/// whose input carries the notes text (README.md names this seq).
const TAMPERED_SEQ: u64 = 7;
/// Seq of the `tool_returned` of step `stats`, forged in `forged-payload` and `relinked`.
const FORGED_SEQ: u64 = 8;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The log `oracle run fixtures/plans/NAME.plan` writes from the repository root with every
/// default (seed 0, no extra grants or inputs): the plan is run for real, in a scratch copy of
/// `fixtures/data`, so the fixture log is exactly what the shipped plan records.
fn run_shipped_plan(name: &str) -> Vec<Event> {
    run_shipped_plan_keyed(name, None)
}

/// [`run_shipped_plan`], started with an idempotency key (`oracle run --key KEY`).
fn run_shipped_plan_keyed(name: &str, key: Option<&str>) -> Vec<Event> {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    let data = root.join("fixtures/data");
    std::fs::create_dir_all(&data).unwrap();
    for entry in std::fs::read_dir(fixtures_dir().join("data")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), data.join(entry.file_name())).unwrap();
    }
    let opts = oracle_runtime::session::StartOptions {
        durability: oracle_runtime::Durability::None,
        root: root.canonicalize().unwrap(),
        key: key.map(str::to_owned),
        ..oracle_runtime::session::StartOptions::new(
            &dir.path().join("home"),
            &fixtures_dir().join(format!("plans/{name}.plan")),
        )
    };
    let s = oracle_runtime::session::start(&opts, &oracle_runtime::tools::builtin()).unwrap();
    oracle_runtime::reader::read_all(&s.dir.join("events.jsonl")).unwrap()
}

/// `fixtures/plans/quickstart.plan`: read a note, count its words, write a summary. Each step
/// runs at its own logical time; a call that consumes another step's output (or a run input)
/// lists that step's `tool_returned` (or `run_started`) among its parents.
fn quickstart() -> Vec<Event> {
    let events = run_shipped_plan("quickstart");
    // The seqs the broken copies edit (README.md and fixtures/logs/README.md name them).
    assert_eq!(events[TAMPERED_SEQ as usize].kind, EventKind::ToolCalled);
    assert_eq!(events[TAMPERED_SEQ as usize].payload["step"], "stats");
    assert_eq!(events[FORGED_SEQ as usize].kind, EventKind::ToolReturned);
    assert_eq!(events[FORGED_SEQ as usize].payload["step"], "stats");
    events
}

/// `fixtures/plans/denied.plan`: a step asks for a file outside its grant; the check fails, the
/// tool is never called and the run fails naming the capability.
fn denied() -> Vec<Event> {
    run_shipped_plan("denied")
}

/// `fixtures/plans/escalation.plan`: a step retried, then its fallback tier tried, each attempt
/// rejected, so the run suspends awaiting a person: `suspended` is the last event.
fn suspended() -> Vec<Event> {
    run_shipped_plan("escalation")
}

/// `fixtures/plans/denied.plan` started with the idempotency key `invoice-2026-11-0042`
/// (format 3's `run_started.key`): the key is in the first event and nowhere else.
fn keyed() -> Vec<Event> {
    run_shipped_plan_keyed("denied", Some(KEY))
}

/// The key `keyed.jsonl` was started with.
const KEY: &str = "invoice-2026-11-0042";

fn jsonl(events: &[Event]) -> Vec<u8> {
    events.iter().flat_map(record::encode).collect()
}

fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// The quickstart run with the `stats` result inflated and its payload hash recomputed, as a
/// forger who knows the format would. Its `hash` (and every later link) is left alone.
fn forged_quickstart() -> Vec<Event> {
    let mut events = quickstart();
    let e = &mut events[FORGED_SEQ as usize];
    e.payload["output"]["words"] = json!(3800);
    e.payload_hash = oracle_core::canon::payload_hash(&e.payload).unwrap();
    events
}

/// Every fixture file, relative to `fixtures/`, with its exact bytes.
fn fixture_files() -> Vec<(&'static str, Vec<u8>)> {
    let good = quickstart();
    let good_bytes = jsonl(&good);

    let mut tampered = good.clone();
    let input = &mut tampered[TAMPERED_SEQ as usize].payload["input"]["text"];
    *input = json!(NOTES.replacen("Oracle", "Oracla", 1));
    let tampered = jsonl(&tampered);

    let forged = jsonl(&forged_quickstart());

    let mut relinked = forged_quickstart();
    relink(&mut relinked).unwrap();
    let relinked = jsonl(&relinked);

    // The last record's first half, as a crash in the middle of its write would leave it.
    let mut torn = good_bytes.clone();
    let last_len = lines(&good_bytes).last().map_or(0, Vec::len);
    torn.truncate(good_bytes.len() - last_len + (last_len - 1) / 2);

    let mut swapped = lines(&good_bytes);
    swapped.swap(3, 4);
    let swapped = swapped.concat();

    let mut not_json = lines(&good_bytes);
    not_json[2] = b"not json at all\n".to_vec();
    let not_json = not_json.concat();

    vec![
        ("data/notes.txt", NOTES.as_bytes().to_vec()),
        ("logs/quickstart.jsonl", good_bytes),
        ("logs/denied.jsonl", jsonl(&denied())),
        ("logs/suspended.jsonl", jsonl(&suspended())),
        ("logs/keyed.jsonl", jsonl(&keyed())),
        ("logs/broken/tampered-middle.jsonl", tampered),
        ("logs/broken/forged-payload.jsonl", forged),
        ("logs/broken/relinked.jsonl", relinked),
        ("logs/broken/torn-tail.jsonl", torn),
        ("logs/broken/swapped.jsonl", swapped),
        ("logs/broken/not-json.jsonl", not_json),
    ]
}

fn fixture(name: &str) -> Vec<u8> {
    fixture_files()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("no fixture {name}"))
}

#[test]
fn fixtures_on_disk_match_the_generator() {
    let root = fixtures_dir();
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        for (name, bytes) in fixture_files() {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes).unwrap();
        }
        return;
    }
    let stale: Vec<&str> = fixture_files()
        .into_iter()
        .filter(|(name, bytes)| std::fs::read(root.join(name)).ok().as_ref() != Some(bytes))
        .map(|(name, _)| name)
        .collect();
    assert!(
        stale.is_empty(),
        "fixtures differ from the generator (run with UPDATE_EXPECT=1 to rewrite): {stale:?}"
    );
}

/// What `oracle verify` must say about each log; README.md documents the same table.
#[test]
fn each_log_verifies_as_documented() {
    let ok = |name: &str, events: u64| {
        let head = verify_bytes(&fixture(name), None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(head.next_seq, events, "{name}");
    };
    ok("logs/quickstart.jsonl", 16);
    ok("logs/denied.jsonl", 5);
    ok("logs/suspended.jsonl", 31);
    ok("logs/keyed.jsonl", 5);
    ok("logs/broken/relinked.jsonl", 16);

    let err = |name: &str| verify_bytes(&fixture(name), None).expect_err(name);
    let reason = |name: &str, seq: u64| match err(name) {
        LogBytesError::Integrity { error, .. } => {
            assert_eq!(error.seq, seq, "{name}: {error}");
            error.reason
        }
        other => panic!("{name}: expected an integrity error, got {other}"),
    };
    assert!(matches!(
        reason("logs/broken/tampered-middle.jsonl", TAMPERED_SEQ),
        Reason::PayloadHash { .. }
    ));
    assert!(matches!(
        reason("logs/broken/forged-payload.jsonl", FORGED_SEQ),
        Reason::Hash { .. }
    ));
    assert_eq!(
        reason("logs/broken/swapped.jsonl", 3),
        Reason::Seq {
            expected: 3,
            found: 4
        }
    );
    assert!(matches!(
        reason("logs/broken/not-json.jsonl", 2),
        Reason::Malformed(_)
    ));

    let quickstart = fixture("logs/quickstart.jsonl");
    let last_start = quickstart[..quickstart.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    match err("logs/broken/torn-tail.jsonl") {
        LogBytesError::TornTail { seq, offset, len } => {
            assert_eq!((seq, offset), (15, last_start as u64));
            assert_eq!(
                len as usize,
                fixture("logs/broken/torn-tail.jsonl").len() - last_start
            );
        }
        other => panic!("torn-tail: expected a torn tail, got {other}"),
    }
}

/// A key changes the first event (and so every hash after it) and nothing else: without it, the
/// keyed log is `denied.jsonl`'s payloads, event for event.
#[test]
fn a_key_is_recorded_in_run_started_only() {
    let keyed = keyed();
    let plain = denied();
    assert_eq!(keyed[0].payload["key"], KEY);
    assert!(plain[0].payload.get("key").is_none());
    let mut first = keyed[0].payload.clone();
    first.as_object_mut().unwrap().remove("key");
    assert_eq!(first, plain[0].payload);
    for (k, p) in keyed.iter().zip(&plain).skip(1) {
        assert_eq!((k.kind, &k.payload), (p.kind, &p.payload));
    }
}

/// Relinking makes a forged log self-consistent: only a head hash kept from before catches it.
#[test]
fn relinked_log_is_caught_only_by_the_known_head() {
    let original = verify_bytes(&fixture("logs/quickstart.jsonl"), None)
        .unwrap()
        .hash;
    let relinked = fixture("logs/broken/relinked.jsonl");
    let forged_head = verify_bytes(&relinked, None).unwrap().hash;
    assert_ne!(forged_head, original);
    match verify_bytes(&relinked, Some(original)) {
        Err(LogBytesError::HeadNotFound { expected, found }) => {
            assert_eq!(expected, original);
            assert_eq!(found.hash, forged_head);
        }
        other => panic!("expected the original head to be missing, got {other:?}"),
    }
    // Records before the forged one are untouched, so heads up to there still match.
    let prefix: Vec<Vec<u8>> = lines(&relinked)
        .into_iter()
        .take(FORGED_SEQ as usize)
        .collect();
    let good: Vec<Vec<u8>> = lines(&fixture("logs/quickstart.jsonl"))
        .into_iter()
        .take(FORGED_SEQ as usize)
        .collect();
    assert_eq!(prefix, good);
}

/// Each broken log differs from quickstart only as its name says.
#[test]
fn broken_logs_are_minimal_edits_of_quickstart() {
    let good = fixture("logs/quickstart.jsonl");
    let tampered = fixture("logs/broken/tampered-middle.jsonl");
    assert_eq!(tampered.len(), good.len());
    let diffs: Vec<usize> = (0..good.len())
        .filter(|&i| good[i] != tampered[i])
        .collect();
    assert_eq!(diffs.len(), 1, "exactly one byte is changed");
    let line_of = |at: usize| good[..at].iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(line_of(diffs[0]), TAMPERED_SEQ);

    let forged: Vec<Event> = forged_quickstart();
    let good_events = quickstart();
    assert_eq!(
        forged[FORGED_SEQ as usize].hash,
        good_events[FORGED_SEQ as usize].hash
    );
    assert_ne!(
        forged[FORGED_SEQ as usize].payload_hash,
        good_events[FORGED_SEQ as usize].payload_hash
    );
    assert_eq!(forged[FORGED_SEQ as usize].kind, EventKind::ToolReturned);
    assert_eq!(forged[FORGED_SEQ as usize].payload["step"], "stats");

    let torn = fixture("logs/broken/torn-tail.jsonl");
    assert!(good.starts_with(&torn) && !torn.ends_with(b"\n"));
}

/// The quickstart run tells a coherent story: what `fs.read` returned is the data file, the
/// counts are right, every call follows its scheduling, and the final state holds every step.
#[test]
fn quickstart_is_a_coherent_run() {
    let events = quickstart();
    let on_disk = std::fs::read_to_string(fixtures_dir().join("data/notes.txt")).unwrap();
    assert_eq!(on_disk, NOTES);
    assert_eq!(events[4].payload["output"]["text"], json!(on_disk));
    assert_eq!(
        events[8].payload["output"],
        json!({"chars": 192, "words": 38, "lines": 4})
    );

    for e in &events {
        let parent_kinds: Vec<EventKind> =
            e.parents.iter().map(|&p| events[p as usize].kind).collect();
        match e.kind {
            // Its capability verdict, or its scheduling when it needs no capability.
            EventKind::ToolCalled => assert!(
                parent_kinds.contains(&EventKind::StepScheduled)
                    || parent_kinds.contains(&EventKind::CapabilityAllowed),
                "seq {}",
                e.seq
            ),
            EventKind::ToolReturned => {
                assert_eq!(parent_kinds, [EventKind::ToolCalled], "seq {}", e.seq)
            }
            _ => {}
        }
        for &p in &e.parents {
            let parent = &events[p as usize];
            assert!(
                parent.time <= e.time,
                "seq {} is caused by a later event",
                e.seq
            );
        }
    }
    let state = replay::replay(&events).unwrap();
    let keys: Vec<&str> = state.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["step/read", "step/stats", "step/summary"]);
    assert_eq!(
        state.get("step/summary").unwrap()["output"]["bytes"],
        json!("words: 38, lines: 4".len())
    );
    assert!(matches!(
        events.last().unwrap().typed().unwrap(),
        Payload::RunFinished(RunFinished {
            status: RunStatus::Completed,
            ..
        })
    ));
}

#[test]
fn denied_run_never_calls_the_tool() {
    let events = denied();
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&EventKind::CapabilityDenied));
    assert!(!kinds.contains(&EventKind::ToolCalled));
    match events.last().unwrap().typed().unwrap() {
        Payload::RunFinished(f) => {
            assert_eq!(f.status, RunStatus::Failed);
            assert!(f.reason.contains("fs:read:/etc/passwd"), "{}", f.reason);
        }
        other => panic!("expected run_finished, got {other:?}"),
    }
}

#[test]
fn suspended_run_ends_after_both_tiers_fail() {
    let events = suspended();
    let failures = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolFailed)
        .count();
    assert_eq!(failures, 3, "three json.parse attempts fail");
    assert!(!events.iter().any(|e| e.kind == EventKind::RunFinished));
    match events.last().unwrap().typed().unwrap() {
        Payload::Suspended(s) => assert_eq!((s.step.as_str(), s.attempts), ("total", 6)),
        other => panic!("expected suspended, got {other:?}"),
    }
}

/// README.md is the user's index of the fixtures: every log must be in it, and the head it
/// gives for `verify --head` must be quickstart's.
#[test]
fn readme_lists_every_log_and_the_quickstart_head() {
    let readme = std::fs::read_to_string(fixtures_dir().join("logs/README.md")).unwrap();
    for (name, _) in fixture_files() {
        if let Some(log) = name.strip_prefix("logs/") {
            assert!(
                readme.contains(&format!("`{log}`")),
                "README.md does not list {log}"
            );
        }
    }
    let head = quickstart().last().unwrap().hash.to_hex();
    assert!(
        readme.contains(&head),
        "README.md does not give quickstart's head {head}"
    );
}
