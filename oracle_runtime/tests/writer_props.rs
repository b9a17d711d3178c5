//! Property test of the whole write path: arbitrary events appended through `LogWriter` (any
//! durability, commits anywhere, the log closed and reopened midway) read back exactly, verify
//! with the writer's head, and replay to the writer's state.

use oracle_core::Payload;
use oracle_core::payload::*;
use oracle_runtime::{Durability, LogPaths, LogWriter, VerifyOptions, reader, verify_file};
use proptest::prelude::*;

/// A `tool_returned`, a `state_changed` (both from `small_payload`) or a `capability_denied`,
/// a third each.
fn payload() -> impl Strategy<Value = Payload> {
    prop_oneof![
        2 => oracle_test_support::small_payload(),
        1 => ("[a-z]{1,4}", ".{0,8}").prop_map(|(step, reason)| Payload::CapabilityDenied(
            CapabilityDenied {
                step,
                capability: "fs:read:/x".into(),
                reason
            }
        )),
    ]
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        Just(Durability::Event),
        (1u64..5).prop_map(|n| Durability::Group { events_max: n }),
        Just(Durability::None)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn appended_events_read_back_verify_and_replay(
        items in prop::collection::vec((payload(), any::<bool>()), 0..24),
        reopen_at in any::<prop::sample::Index>(),
        d in durability(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let paths = LogPaths::of_run(&dir.path().join("run"));
        let start = oracle_test_support::run_started("p", 1, &[]);
        let mut w = LogWriter::create(&paths, d).unwrap();
        let mut written = vec![w.append(0, vec![], start).unwrap()];
        let reopen = reopen_at.index(items.len() + 1);
        for (i, (p, commit)) in items.into_iter().enumerate() {
            if i == reopen {
                w.close().unwrap();
                w = LogWriter::open(&paths, d).unwrap();
            }
            let parents = vec![written.len() as u64 - 1];
            written.push(w.append(i as u64, parents, p).unwrap());
            if commit {
                w.commit().unwrap();
            }
        }
        let (head, state) = (w.head(), w.state().clone());
        w.close().unwrap();

        prop_assert_eq!(reader::read_all(&paths.log).unwrap(), written.clone());
        let summary = verify_file(&paths.log, VerifyOptions { threads: 2, expected_head: Some(head.hash) }).unwrap();
        prop_assert_eq!(summary.head, head);
        let (replayed_head, replayed) = reader::verify_and_replay(&paths).unwrap();
        prop_assert_eq!(replayed_head, head);
        prop_assert_eq!(replayed, state);
    }
}
