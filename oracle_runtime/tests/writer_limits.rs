//! The writer never writes what the reader rejects: random plans over a tool whose outputs sit
//! at, under and over every limit a record must meet (nesting depth, size, strings that grow
//! sixfold as JSON escapes), passed on through key-value writes, wrappers that nest them
//! deeper and answers. Every log the engine writes verifies and replays; every value over a
//! limit ends in a recorded failure, never in a record the reader refuses.

use std::fs;
use std::sync::Arc;

use oracle_core::limits::{PAYLOAD_JSON_BYTES_MAX, VALUE_DEPTH_MAX};
use oracle_core::{Payload, limits};
use oracle_runtime::session::{self, StartOptions};
use oracle_runtime::tool::{Effect, Registry, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};
use oracle_runtime::tools::{self, decl, integer, object};
use oracle_runtime::{Durability, VerifyOptions, verify_file};
use proptest::prelude::*;
use serde_json::{Value, json};

/// `gen.value {depth, bytes, escape}` → `{value}`: a value nested `depth` levels (the output's
/// own map adds one more) around a string of `bytes` bytes, of control characters (six JSON
/// bytes each) when `escape` is 1.
struct Gen;

impl Tool for Gen {
    fn decl(&self) -> ToolDecl {
        let mut d = decl(
            "gen.value",
            "A value of a given depth and size.",
            Effect::Impure,
            object(
                &[
                    ("depth", integer()),
                    ("bytes", integer()),
                    ("escape", integer()),
                ],
                &["depth", "bytes", "escape"],
            ),
            json!({"type": "object"}),
            None,
        );
        d.output_bytes_max = 64 << 20;
        d
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let n = |k: &str| input.get(k).and_then(Value::as_u64).unwrap_or(0);
        let fill = if n("escape") == 1 { "\u{1}" } else { "x" };
        let leaf = Value::String(fill.repeat(n("bytes") as usize));
        let value = (0..n("depth")).fold(leaf, |v, _| Value::Array(vec![v]));
        Ok(ToolOutput::of(json!({ "value": value })))
    }
}

fn registry() -> Registry {
    let mut r = tools::builtin();
    r.register(Arc::new(Gen)).unwrap();
    r
}

/// One step: a generated value, then what is done with it.
#[derive(Clone, Debug)]
struct StepGen {
    depth: u64,
    bytes: u64,
    escape: bool,
    /// 0: nothing more; 1: kv.set of the value; 2: wrapped three levels deeper by json.get.
    use_: u8,
}

fn step_gen() -> impl Strategy<Value = StepGen> {
    let limit = u64::from(VALUE_DEPTH_MAX);
    (
        prop_oneof![
            Just(0u64),
            Just(limit - 4),
            Just(limit - 1),
            Just(limit),
            Just(limit + 1),
            Just(125),
            Just(126),
            Just(127),
            Just(140),
        ],
        prop_oneof![Just(0u64), Just(1000), Just(1 << 20)],
        any::<bool>(),
        0u8..3,
    )
        .prop_map(|(depth, bytes, escape, use_)| StepGen {
            depth,
            bytes,
            escape,
            use_,
        })
}

fn plan_text(steps: &[StepGen]) -> String {
    let mut s = String::from("plan limits version 1\ngrant kv:set:*\n");
    for (i, g) in steps.iter().enumerate() {
        s.push_str(&format!(
            "g{i} = gen.value {{ depth: {}, bytes: {}, escape: {} }}\n  on failure continue\n",
            g.depth,
            g.bytes,
            u8::from(g.escape)
        ));
        match g.use_ {
            1 => s.push_str(&format!(
                "k{i} = kv.set {{ key: \"k{i}\", value: g{i}.value }}\n  on failure continue\n"
            )),
            2 => s.push_str(&format!(
                "w{i} = json.get {{ value: {{ a: {{ b: {{ c: g{i}.value }} }} }}, path: \"a\" }}\n  on failure continue\n"
            )),
            _ => {}
        }
    }
    s
}

fn start(dir: &std::path::Path, plan: &str, registry: &Registry) -> session::Session {
    let path = dir.join("limits.plan");
    fs::write(&path, plan).unwrap();
    let opts = StartOptions {
        seed: 1,
        jobs: 2,
        durability: Durability::None,
        ..StartOptions::new(&dir.join("home"), &path)
    };
    session::start(&opts, registry).unwrap_or_else(|e| panic!("{e}"))
}

fn verify_and_replay(dir: &std::path::Path, s: &session::Session, registry: &Registry) {
    let log = s.dir.join("events.jsonl");
    verify_file(&log, VerifyOptions::default()).unwrap_or_else(|e| panic!("verify: {e}"));
    let replayed = session::replay(&dir.join("home"), &s.id, None, 1, registry)
        .unwrap_or_else(|e| panic!("replay: {e}"));
    assert_eq!(replayed.report.head, s.report.head);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_log_the_engine_writes_verifies(steps in proptest::collection::vec(step_gen(), 1..6)) {
        let dir = tempfile::tempdir().unwrap();
        let registry = registry();
        let s = start(dir.path(), &plan_text(&steps), &registry);
        verify_and_replay(dir.path(), &s, &registry);
        // Every generated value over the depth limit was refused, recorded, by name.
        let events = oracle_runtime::reader::read_all(&s.dir.join("events.jsonl")).unwrap();
        for (i, g) in steps.iter().enumerate() {
            let over = g.depth + 1 > u64::from(VALUE_DEPTH_MAX);
            let failed = events.iter().any(|e| matches!(
                e.typed().unwrap(),
                Payload::ToolFailed(f) if f.step == format!("g{i}") && f.error.contains("value_depth_max")
            ));
            prop_assert_eq!(failed, over, "step g{} at depth {}", i, g.depth);
        }
    }
}

/// Twenty key-value writes of 4 MB in one round: one state change of 80 MB, more than a record
/// holds. The engine records it as several consecutive state changes; the log verifies and the
/// state holds every key.
#[test]
fn a_round_of_writes_larger_than_a_record_is_split_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    let mut plan = String::from("plan wide version 1\ngrant kv:set:*\n");
    for i in 0..20 {
        plan.push_str(&format!(
            "g{i} = gen.value {{ depth: 0, bytes: {}, escape: 0 }}\n",
            4 << 20
        ));
        plan.push_str(&format!(
            "k{i} = kv.set {{ key: \"k{i}\", value: g{i}.value }}\n"
        ));
    }
    let s = start(dir.path(), &plan, &registry);
    assert!(matches!(
        s.report.ending,
        oracle_runtime::engine::Ending::Finished {
            status: oracle_core::payload::RunStatus::Completed,
            ..
        }
    ));
    verify_and_replay(dir.path(), &s, &registry);
    let events = oracle_runtime::reader::read_all(&s.dir.join("events.jsonl")).unwrap();
    let kv_changes: Vec<u64> = events
        .iter()
        .filter_map(|e| match e.typed().unwrap() {
            Payload::StateChanged(c) if c.set.keys().any(|k| k.starts_with("kv/")) => {
                Some(limits::json_len(&serde_json::to_value(&c).unwrap()))
            }
            _ => None,
        })
        .collect();
    assert!(kv_changes.len() >= 2, "split: {kv_changes:?}");
    assert!(kv_changes.iter().all(|&n| n <= PAYLOAD_JSON_BYTES_MAX));
    for i in 0..20 {
        assert!(s.report.state.get(&format!("kv/k{i}")).is_some(), "kv/k{i}");
    }
}

#[test]
fn a_payload_the_reader_would_refuse_is_never_sealed() {
    use oracle_core::payload::ToolReturned;
    let mut recorder = oracle_core::Recorder::new();
    recorder
        .record(0, vec![], oracle_test_support::run_started("p", 0, &[]))
        .unwrap();
    let deep = (0..limits::PAYLOAD_DEPTH_MAX).fold(json!(0), |v, _| Value::Array(vec![v]));
    let head = recorder.head();
    let e = recorder
        .record(
            1,
            vec![],
            Payload::ToolReturned(ToolReturned {
                step: "s".into(),
                tool: "t".into(),
                attempt: 1,
                output: deep,
            }),
        )
        .unwrap_err();
    assert!(e.to_string().contains("payload_depth_max"), "{e}");
    assert_eq!(recorder.head(), head, "nothing sealed");
    let big = Value::String("\u{1}".repeat((PAYLOAD_JSON_BYTES_MAX / 6 + 10) as usize));
    let e = recorder
        .record(
            1,
            vec![],
            Payload::ToolReturned(ToolReturned {
                step: "s".into(),
                tool: "t".into(),
                attempt: 1,
                output: big,
            }),
        )
        .unwrap_err();
    assert!(e.to_string().contains("payload_json_bytes_max"), "{e}");
    assert_eq!(recorder.head(), head, "nothing sealed");
}
