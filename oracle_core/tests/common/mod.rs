//! Strategies shared by the core property tests.
#![allow(dead_code)]

use oracle_core::payload::*;
use oracle_core::{Event, Recorder, Value};
use oracle_test_support::JsonShape;
use proptest::prelude::*;

/// Values of hashed data: deeper and wider than `JsonShape::SMALL`, with strings that need
/// escaping (a quote, a backslash, a control character, a non-ASCII letter), so the canonical
/// encoding is exercised where it differs from the plain text.
const VALUE: JsonShape = JsonShape {
    depth: 3,
    nodes: 24,
    width: 4,
    text: "[a-z\u{e9}\u{1f}\"\\\\ ]{0,8}",
    keys: "[a-d]{1,2}",
};

/// Any JSON value without floats: what hashed data may hold.
pub fn value() -> impl Strategy<Value = Value> {
    oracle_test_support::json(VALUE)
}

/// One payload of any kind but `run_started`.
pub fn payload() -> impl Strategy<Value = Payload> {
    let name = "[a-z]{1,6}";
    prop_oneof![
        (name, name, 1u64..4).prop_map(|(step, tool, attempt)| Payload::StepScheduled(
            StepScheduled {
                step,
                tool,
                attempt
            }
        )),
        (name, value()).prop_map(|(step, input)| Payload::ToolCalled(ToolCalled {
            step,
            tool: "fs.read".into(),
            tool_version: "1".into(),
            attempt: 1,
            input
        })),
        (name, value()).prop_map(|(step, output)| Payload::ToolReturned(ToolReturned {
            step,
            tool: "fs.read".into(),
            attempt: 1,
            output
        })),
        (name, ".{0,10}").prop_map(
            |(step, reason)| Payload::CapabilityDenied(CapabilityDenied {
                step,
                capability: "fs:read:/etc".into(),
                reason
            })
        ),
        (
            prop::collection::btree_map("[a-e]", value(), 0..3),
            prop::collection::btree_set("[f-h]", 0..2)
        )
            .prop_map(|(set, delete)| Payload::StateChanged(StateChanged {
                set: set.into_iter().collect(),
                delete: delete.into_iter().collect()
            })),
        (name, value(), by()).prop_map(|(step, value, by)| Payload::Resumed(Resumed {
            step,
            value,
            by
        })),
    ]
}

/// Who gave an answer, verdict or outside claim (`oracle serve` records the token's name);
/// mostly absent, as in logs the command line writes.
pub fn by() -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(0.3, "[a-z0-9._-]{1,8}")
}

pub fn run_started(seed: u64) -> Payload {
    oracle_test_support::run_started("prop", seed, &["fs:read:**"])
}

/// A valid log: `run_started` then the given payloads, with random time steps and parents.
pub fn log(max_len: usize) -> impl Strategy<Value = Vec<Event>> {
    (
        any::<u64>(),
        prop::collection::vec((payload(), 0u64..3, any::<bool>()), 0..max_len),
    )
        .prop_map(|(seed, items)| {
            let mut r = Recorder::new();
            let mut out = vec![r.record(0, vec![], run_started(seed)).unwrap()];
            let mut time = 0;
            for (p, dt, link) in items {
                time += dt;
                let parents = if link {
                    vec![out.len() as u64 - 1]
                } else {
                    vec![]
                };
                out.push(r.record(time, parents, p).unwrap());
            }
            out
        })
}

pub fn to_bytes(events: &[Event]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        oracle_core::record::encode_into(e, &mut out);
    }
    out
}

/// Byte ranges `[start, end)` of each record, newline included.
pub fn record_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'\n' {
            spans.push((start, i + 1));
            start = i + 1;
        }
    }
    spans
}
