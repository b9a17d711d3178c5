//! Causal links (log format 2, docs/FORMAT.md "Causal links"), checked on real runs of the
//! shipped plans: each kind of event names exactly the earlier events it depends on.

use std::path::{Path, PathBuf};

use oracle_core::payload::LOG_FORMAT;
use oracle_core::{Event, EventKind, Payload};
use oracle_runtime::session::{self, StartOptions};
use oracle_runtime::{Durability, tools};

/// The workspace root, where the shipped plans' relative paths resolve.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(plan: &str, home: &Path) -> (session::Session, Vec<Event>) {
    let opts = StartOptions {
        durability: Durability::None,
        root: root(),
        ..StartOptions::new(home, &root().join(plan))
    };
    let s = session::start(&opts, &tools::builtin()).unwrap();
    let events = oracle_runtime::reader::read_all(&s.dir.join("events.jsonl")).unwrap();
    (s, events)
}

/// The seq of the outcome (`tool_returned` / `tool_failed`) of `step`'s attempt `attempt`.
fn outcome(events: &[Event], step: &str, attempt: u64) -> u64 {
    events
        .iter()
        .find(|e| match e.typed().unwrap() {
            Payload::ToolReturned(r) => r.step == step && r.attempt == attempt,
            Payload::ToolFailed(f) => f.step == step && f.attempt == attempt,
            _ => false,
        })
        .unwrap_or_else(|| panic!("no outcome of {step} attempt {attempt}"))
        .seq
}

fn scheduled<'a>(events: &'a [Event], step: &str, attempt: u64) -> &'a Event {
    events
        .iter()
        .find(|e| matches!(e.typed().unwrap(), Payload::StepScheduled(s) if s.step == step && s.attempt == attempt))
        .unwrap_or_else(|| panic!("{step} attempt {attempt} was not scheduled"))
}

#[test]
fn a_diamond_links_each_call_to_what_it_reads_and_the_end_to_the_last_branch() {
    let home = tempfile::tempdir().unwrap();
    let (_, events) = run("fixtures/plans/diamond.plan", home.path());
    match events[0].typed().unwrap() {
        Payload::RunStarted(r) => assert_eq!(r.format, Some(LOG_FORMAT)),
        other => panic!("{other:?}"),
    }
    let read = outcome(&events, "read", 1);
    let (lines, words) = (outcome(&events, "lines", 1), outcome(&events, "words", 1));
    // A root step depends on the run's start; the others on the outcomes they read.
    assert_eq!(scheduled(&events, "read", 1).parents, vec![0]);
    assert_eq!(scheduled(&events, "lines", 1).parents, vec![read]);
    assert_eq!(scheduled(&events, "words", 1).parents, vec![read]);
    assert_eq!(scheduled(&events, "report", 1).parents, vec![lines, words]);
    // Within a call: verdict on scheduled, call on verdict, outcome on call.
    for e in &events {
        if matches!(e.kind, EventKind::ToolReturned | EventKind::ToolFailed) {
            assert_eq!(e.parents.len(), 1);
            assert_eq!(events[e.parents[0] as usize].kind, EventKind::ToolCalled);
        }
    }
    // A decision depends on what it observed: the outcomes of the round before it.
    let decisions: Vec<&Event> = events
        .iter()
        .filter(|e| e.kind == EventKind::StateChanged)
        .collect();
    assert!(!decisions.is_empty());
    for d in &decisions {
        let round = d.time - 1;
        let observed: Vec<u64> = events
            .iter()
            .filter(|e| {
                e.time == round
                    && matches!(
                        e.kind,
                        EventKind::ToolReturned
                            | EventKind::ToolFailed
                            | EventKind::CapabilityDenied
                    )
            })
            .map(|e| e.seq)
            .collect();
        let want = if observed.is_empty() {
            vec![0]
        } else {
            observed
        };
        assert_eq!(d.parents, want, "{d:?}");
    }
    // Only `report` ends a branch: read, lines and words are all read by later calls.
    let last = events.last().unwrap();
    assert_eq!(last.kind, EventKind::RunFinished);
    assert_eq!(last.parents, vec![outcome(&events, "report", 1)]);
}

#[test]
fn a_suspension_names_every_attempt_given_up_on_and_a_retry_its_own_last_attempt() {
    let home = tempfile::tempdir().unwrap();
    let (_, events) = run("fixtures/plans/escalation.plan", home.path());
    let last = events.last().unwrap();
    assert_eq!(last.kind, EventKind::Suspended);
    // Every attempt the agent gave up on: the failures and the outputs `expect` rejected.
    let attempts: Vec<u64> = events
        .iter()
        .filter(|e| match e.typed().unwrap() {
            Payload::ToolFailed(f) => f.step == "total",
            Payload::ToolReturned(r) => r.step == "total",
            _ => false,
        })
        .map(|e| e.seq)
        .collect();
    assert_eq!(attempts.len(), 6, "three per tier: {attempts:?}");
    assert_eq!(last.parents, attempts);
    let read = outcome(&events, "read", 1);
    assert_eq!(scheduled(&events, "total", 1).parents, vec![read]);
    assert_eq!(
        scheduled(&events, "total", 2).parents,
        vec![read, outcome(&events, "total", 1)],
        "a retry depends on its inputs and on the attempt before it"
    );
}
