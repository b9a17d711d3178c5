//! Helpers the workspace's tests share, so each is written once: the smallest `run_started` a
//! log can begin with, and a strategy for JSON values without floats. A dev-dependency only:
//! no library crate depends on it (tidy keeps it so).

use oracle_core::payload::{Payload, RunStarted};
use oracle_core::{Hash, Value};
use proptest::prelude::*;

/// The first event of a test log: a run of `program` with `seed` and `grants`, no inputs,
/// budget, tools or memory settings, and the zero program hash.
pub fn run_started(program: &str, seed: u64, grants: &[&str]) -> Payload {
    Payload::RunStarted(RunStarted {
        format: None,
        program: program.into(),
        program_hash: Hash::ZERO,
        seed,
        grants: grants.iter().map(|g| (*g).to_owned()).collect(),
        inputs: Default::default(),
        budget: None,
        tools: None,
        memory: None,
    })
}

/// Any small JSON value without floats (what a record may hold): nested at most two levels,
/// at most three entries an array or object, strings of at most six characters of any kind.
pub fn small_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        ".{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]{1,2}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_started_is_a_valid_first_event() {
        let mut r = oracle_core::Recorder::new();
        r.record(0, vec![], run_started("p", 1, &["fs:read:data/**"]))
            .unwrap();
    }
}
