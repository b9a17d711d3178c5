//! Events for test logs: the smallest `run_started`, and a strategy for the payloads a log
//! writer is usually exercised with.

use oracle_core::Hash;
use oracle_core::payload::{Payload, RunStarted, StateChanged, ToolReturned};
use proptest::prelude::*;

use crate::small_json;

/// The body of [`run_started`]: a run of `program` with `seed` and `grants` (in the order
/// given), format `None`, no inputs, budget, tools or memory settings, and the zero program
/// hash. For a test that needs one field more: `RunStarted { inputs, ..minimal_run_started(..) }`.
pub fn minimal_run_started(program: &str, seed: u64, grants: &[&str]) -> RunStarted {
    RunStarted {
        format: None,
        program: program.into(),
        program_hash: Hash::ZERO,
        seed,
        grants: grants.iter().map(|g| (*g).to_owned()).collect(),
        inputs: Default::default(),
        budget: None,
        tools: None,
        memory: None,
        domains: None,
        key: None,
        parent: None,
    }
}

/// The first event of a test log: [`minimal_run_started`] as a payload. Always a valid first
/// event for `Recorder::record` and `LogWriter::append`.
pub fn run_started(program: &str, seed: u64, grants: &[&str]) -> Payload {
    Payload::RunStarted(minimal_run_started(program, seed, grants))
}

/// A `tool_returned` (step of one to four lowercase letters, tool `t`, attempt 1, a
/// [`small_json`] output) or a `state_changed` (at most two keys of `a`..`d` set to
/// [`small_json`] values, at most one key of `e`..`f` deleted), half and half. Every value is
/// one a log writer must accept after a `run_started`, in any order and number.
pub fn small_payload() -> impl Strategy<Value = Payload> {
    prop_oneof![
        ("[a-z]{1,4}", small_json()).prop_map(|(step, output)| Payload::ToolReturned(
            ToolReturned {
                step,
                tool: "t".into(),
                attempt: 1,
                output
            }
        )),
        (
            prop::collection::btree_map("[a-d]", small_json(), 0..3),
            prop::collection::btree_set("[e-f]", 0..2)
        )
            .prop_map(|(set, delete)| Payload::StateChanged(StateChanged {
                set: set.into_iter().collect(),
                delete: delete.into_iter().collect()
            })),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    #[test]
    fn the_run_started_is_a_valid_first_event() {
        let mut r = oracle_core::Recorder::new();
        r.record(0, vec![], run_started("p", 1, &["fs:read:data/**"]))
            .unwrap();
    }

    #[test]
    fn small_payloads_are_recorded_after_a_run_started() {
        let mut runner = TestRunner::deterministic();
        let mut r = oracle_core::Recorder::new();
        r.record(0, vec![], run_started("p", 1, &[])).unwrap();
        for t in 1..64 {
            let p = small_payload().new_tree(&mut runner).unwrap().current();
            r.record(t, vec![], p).unwrap();
        }
    }
}
