//! Fixture logs: builds realistic runs (and deliberately broken copies) deterministically and
//! checks them byte for byte against `fixtures/logs/`, so the files other tests, the README and
//! users rely on can never drift from what the recorder writes. Regenerate deliberately with
//! `UPDATE_EXPECT=1 cargo test -p oracle_runtime --test fixtures`.

use std::path::PathBuf;

use oracle_core::event::relink;
use oracle_core::hash::{domain, hash_in};
use oracle_core::payload::*;
use oracle_core::verify::{LogBytesError, Reason, verify_bytes};
use oracle_core::{Event, EventKind, Recorder, record, replay};
use serde_json::{Map, Value, json};

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

/// Records events and remembers them, so a fixture reads like the run it describes.
#[derive(Default)]
struct Run {
    recorder: Recorder,
    events: Vec<Event>,
}

impl Run {
    /// Records `payload` at logical `time` caused by `parents`; returns its seq for later links.
    fn record(&mut self, time: u64, parents: &[u64], payload: Payload) -> u64 {
        let event = self
            .recorder
            .record(time, parents.to_vec(), payload)
            .unwrap();
        let seq = event.seq;
        self.events.push(event);
        seq
    }
}

fn map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("expected an object, got {other}"),
    }
}

fn state_set(key: &str, value: Value) -> Payload {
    let mut set = Map::new();
    set.insert(key.to_owned(), value);
    Payload::StateChanged(StateChanged {
        set,
        delete: vec![],
    })
}

fn scheduled(step: &str, tool: &str, attempt: u64) -> Payload {
    Payload::StepScheduled(StepScheduled {
        step: step.into(),
        tool: tool.into(),
        attempt,
    })
}

fn called(step: &str, tool: &str, attempt: u64, input: Value) -> Payload {
    Payload::ToolCalled(ToolCalled {
        step: step.into(),
        tool: tool.into(),
        tool_version: "1.0.0".into(),
        attempt,
        input,
    })
}

fn returned(step: &str, tool: &str, output: Value) -> Payload {
    Payload::ToolReturned(ToolReturned {
        step: step.into(),
        tool: tool.into(),
        attempt: 1,
        output,
    })
}

fn allowed(step: &str, capability: &str, grant: &str) -> Payload {
    Payload::CapabilityAllowed(CapabilityAllowed {
        step: step.into(),
        capability: capability.into(),
        grant: grant.into(),
    })
}

fn words_and_lines(text: &str) -> (u64, u64) {
    (
        text.split_whitespace().count() as u64,
        text.lines().count() as u64,
    )
}

/// The summary the `write` step writes to `out/summary.txt`.
fn summary_text() -> String {
    let (words, lines) = words_and_lines(NOTES);
    format!("{words} words, {lines} lines\n")
}

/// A plan that reads a file, counts its words, checks a minimum and writes a summary. Each step
/// runs at its own logical time; a step is scheduled once the previous one has written its
/// result to the state, and a call that consumes another step's output (or a run input) lists
/// that step's `tool_returned` (or `run_started`) among its parents.
fn quickstart() -> Vec<Event> {
    let mut run = Run::default();
    let (words, lines) = words_and_lines(NOTES);
    let start = run.record(
        0,
        &[],
        Payload::RunStarted(RunStarted {
            format: None,
            program: "quickstart".into(),
            program_hash: hash_in(domain::VALUE, b"quickstart plan v1"),
            seed: 7,
            grants: vec!["fs:read:fixtures/data/**".into(), "fs:write:out/**".into()],
            inputs: map(json!({"path": "fixtures/data/notes.txt", "min_words": 5})),
            memory: None,
        }),
    );

    // read: needs a capability, consumes the `path` input.
    let sched = run.record(1, &[start], scheduled("read", "fs.read", 1));
    let cap = run.record(
        1,
        &[sched],
        allowed(
            "read",
            "fs:read:fixtures/data/notes.txt",
            "fs:read:fixtures/data/**",
        ),
    );
    let call = run.record(
        1,
        &[start, sched, cap],
        called(
            "read",
            "fs.read",
            1,
            json!({"path": "fixtures/data/notes.txt"}),
        ),
    );
    let output = json!({"bytes": NOTES.len(), "text": NOTES});
    let read = run.record(1, &[call], returned("read", "fs.read", output.clone()));
    let read_done = run.record(1, &[read], state_set("read", output));

    // stats: a pure tool, so no capability check; consumes read's output.
    let sched = run.record(2, &[read_done], scheduled("stats", "text.count", 1));
    let call = run.record(
        2,
        &[read, sched],
        called("stats", "text.count", 1, json!({"text": NOTES})),
    );
    let output = json!({"words": words, "lines": lines});
    let stats = run.record(2, &[call], returned("stats", "text.count", output.clone()));
    let stats_done = run.record(2, &[stats], state_set("stats", output));

    // check: a pure comparison of stats' word count with the `min_words` input.
    let sched = run.record(3, &[stats_done], scheduled("check", "cmp.at_least", 1));
    let call = run.record(
        3,
        &[start, stats, sched],
        called(
            "check",
            "cmp.at_least",
            1,
            json!({"value": words, "min": 5}),
        ),
    );
    let check = run.record(
        3,
        &[call],
        returned("check", "cmp.at_least", json!({"ok": true})),
    );
    let check_done = run.record(3, &[check], state_set("check", json!({"ok": true})));

    // write: needs a capability; writes what stats found, gated on check.
    let summary = summary_text();
    let sched = run.record(4, &[check_done], scheduled("write", "fs.write", 1));
    let cap = run.record(
        4,
        &[sched],
        allowed("write", "fs:write:out/summary.txt", "fs:write:out/**"),
    );
    let call = run.record(
        4,
        &[stats, check, sched, cap],
        called(
            "write",
            "fs.write",
            1,
            json!({"path": "out/summary.txt", "text": summary}),
        ),
    );
    let write = run.record(
        4,
        &[call],
        returned("write", "fs.write", json!({"bytes": summary.len()})),
    );
    let write_done = run.record(
        4,
        &[write],
        state_set(
            "write",
            json!({"path": "out/summary.txt", "bytes": summary.len()}),
        ),
    );

    run.record(
        5,
        &[write_done],
        Payload::RunFinished(RunFinished {
            status: RunStatus::Completed,
            reason: String::new(),
        }),
    );
    run.events
}

/// A step asks for a file outside its grant: the check fails, the tool is never called and the
/// run fails naming the capability.
fn denied() -> Vec<Event> {
    let mut run = Run::default();
    let start = run.record(
        0,
        &[],
        Payload::RunStarted(RunStarted {
            format: None,
            program: "read-secrets".into(),
            program_hash: hash_in(domain::VALUE, b"read-secrets plan v1"),
            seed: 7,
            grants: vec!["fs:read:fixtures/data/**".into()],
            inputs: map(json!({"path": "/etc/passwd"})),
            memory: None,
        }),
    );
    let sched = run.record(1, &[start], scheduled("read", "fs.read", 1));
    let deny = run.record(
        1,
        &[start, sched],
        Payload::CapabilityDenied(CapabilityDenied {
            step: "read".into(),
            capability: "fs:read:/etc/passwd".into(),
            reason: "no grant covers it (granted: fs:read:fixtures/data/**)".into(),
        }),
    );
    run.record(
        2,
        &[deny],
        Payload::RunFinished(RunFinished {
            status: RunStatus::Failed,
            reason: "step read: capability fs:read:/etc/passwd denied".into(),
        }),
    );
    run.events
}

/// A step whose tool fails on every one of its 3 attempts: the run suspends awaiting input
/// instead of finishing, so `suspended` is the last event.
fn suspended() -> Vec<Event> {
    let mut run = Run::default();
    let start = run.record(
        0,
        &[],
        Payload::RunStarted(RunStarted {
            format: None,
            program: "fetch-report".into(),
            program_hash: hash_in(domain::VALUE, b"fetch-report plan v1"),
            seed: 11,
            grants: vec!["net:get:reports.example.org/**".into()],
            inputs: map(json!({"url": "reports.example.org/daily.csv"})),
            memory: None,
        }),
    );
    let mut last = start;
    let mut error = String::new();
    for attempt in 1..=3 {
        // Logical time advances per attempt: retries are separated by a backoff.
        let sched = run.record(attempt, &[last], scheduled("fetch", "http.get", attempt));
        let cap = run.record(
            attempt,
            &[sched],
            allowed(
                "fetch",
                "net:get:reports.example.org/daily.csv",
                "net:get:reports.example.org/**",
            ),
        );
        let call = run.record(
            attempt,
            &[start, sched, cap],
            called(
                "fetch",
                "http.get",
                attempt,
                json!({"url": "reports.example.org/daily.csv"}),
            ),
        );
        error = format!("connection refused (attempt {attempt} of 3)");
        last = run.record(
            attempt,
            &[call],
            Payload::ToolFailed(ToolFailed {
                step: "fetch".into(),
                tool: "http.get".into(),
                attempt,
                error: error.clone(),
            }),
        );
    }
    run.record(
        3,
        &[last],
        Payload::Suspended(Suspended {
            step: "fetch".into(),
            reason: format!("http.get failed 3 times; last error: {error}"),
            attempts: 3,
        }),
    );
    run.events
}

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
    ok("logs/quickstart.jsonl", 20);
    ok("logs/denied.jsonl", 4);
    ok("logs/suspended.jsonl", 14);
    ok("logs/broken/relinked.jsonl", 20);

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
            assert_eq!((seq, offset), (19, last_start as u64));
            assert_eq!(
                len as usize,
                fixture("logs/broken/torn-tail.jsonl").len() - last_start
            );
        }
        other => panic!("torn-tail: expected a torn tail, got {other}"),
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
    assert_eq!(words_and_lines(NOTES), (38, 4));
    assert_eq!(events[4].payload["output"]["text"], json!(on_disk));
    assert_eq!(
        events[8].payload["output"],
        json!({"words": 38, "lines": 4})
    );

    for e in &events {
        let parent_kinds: Vec<EventKind> =
            e.parents.iter().map(|&p| events[p as usize].kind).collect();
        match e.kind {
            EventKind::ToolCalled => assert!(
                parent_kinds.contains(&EventKind::StepScheduled),
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
    assert_eq!(keys, ["check", "read", "stats", "write"]);
    assert_eq!(
        state.get("write").unwrap()["bytes"],
        json!(summary_text().len())
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
fn suspended_run_ends_after_three_failed_attempts() {
    let events = suspended();
    let failures = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolFailed)
        .count();
    assert_eq!(failures, 3);
    assert!(!events.iter().any(|e| e.kind == EventKind::RunFinished));
    match events.last().unwrap().typed().unwrap() {
        Payload::Suspended(s) => assert_eq!((s.step.as_str(), s.attempts), ("fetch", 3)),
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
