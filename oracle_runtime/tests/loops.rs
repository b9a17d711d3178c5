//! Loops in plans, as a property: random bounded `for` and `repeat` plans end within their
//! bounds (a `for` over more items than its `max` fails, a `repeat` runs at most `max`
//! iterations), give the same log bytes for any `--jobs`, and replay bit-identically.

use std::fs;
use std::path::Path;

use oracle_core::Payload;
use oracle_runtime::engine::Ending;
use oracle_runtime::session::{self, StartOptions};
use oracle_runtime::{Durability, tools};
use proptest::prelude::*;

fn start(plan: &Path, home: &Path, jobs: u32, items: &[u64]) -> session::Session {
    let list = format!(
        "[{}]",
        items
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    let opts = StartOptions {
        inputs: vec![("items".into(), list)],
        seed: 3,
        jobs,
        durability: Durability::None,
        ..StartOptions::new(home, plan)
    };
    session::start(&opts, &tools::builtin()).unwrap()
}

/// A `for` over the `items` input (bounded by `for_max`), each iteration parsing its item and
/// counting words, skipping the item 3; and a `repeat` that counts up in the key-value store
/// until it has seen `target`, bounded by `repeat_max`.
fn plan_text(for_max: u64, target: u64, repeat_max: u64) -> String {
    format!(
        r#"plan random_loops version 1
grant kv:get:c
grant kv:set:c
input items: list

each = for item in items max {for_max} {{
  parsed = json.parse {{ text: "{{\"n\": " + item + "}}" }}
  words = text.count {{ text: "a b c" }}
    when parsed.value.n != 3
}}
  on failure continue

count = repeat {{
  seen = kv.get {{ key: "c" }}
  next = kv.set {{ key: "c", value: seen.value + 1 }}
    when seen.found
  first = kv.set {{ key: "c", value: 1 }}
    when not seen.found
}} until seen.found and seen.value >= {target} max {repeat_max}
  on failure continue
"#
    )
}

/// The recorded output of step `name`, or `None` if it did not complete.
fn output_of(events: &[oracle_core::Event], name: &str) -> Option<serde_json::Value> {
    events.iter().find_map(|e| match e.typed() {
        Ok(Payload::StateChanged(c)) => c
            .set
            .get(&format!("step/{name}"))
            .filter(|v| v["status"] == "completed")
            .map(|v| v["output"].clone()),
        _ => None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn bounded_loops_end_within_their_bounds_and_replay_bit_identically(
        items in proptest::collection::vec(0u64..6, 0..10),
        for_max in 1u64..10,
        target in 1u64..6,
        repeat_max in 1u64..8,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let plan = dir.path().join("loops.plan");
        fs::write(&plan, plan_text(for_max, target, repeat_max)).unwrap();
        let one = start(&plan, &dir.path().join("one"), 1, &items);
        let four = start(&plan, &dir.path().join("four"), 4, &items);
        let log = one.dir.join("events.jsonl");
        let bytes = fs::read(&log).unwrap();
        prop_assert_eq!(&bytes, &fs::read(four.dir.join("events.jsonl")).unwrap(), "--jobs 1 and 4 differ");
        let finished = matches!(one.report.ending, Ending::Finished { .. });
        prop_assert!(finished, "the run did not finish");

        let events = oracle_runtime::reader::read_all(&log).unwrap();
        // `for`: one result per item, or none at all past its bound.
        match output_of(&events, "each") {
            Some(list) => {
                prop_assert!(items.len() as u64 <= for_max);
                let list = list.as_array().unwrap().clone();
                prop_assert_eq!(list.len(), items.len());
                for (item, it) in items.iter().zip(&list) {
                    prop_assert_eq!(it["words"].is_null(), *item == 3, "{}", it);
                }
            }
            None => prop_assert!(items.len() as u64 > for_max),
        }
        // `repeat`: it needs target + 1 iterations, and never runs more than its max.
        let iterations = (0..=repeat_max + 1)
            .filter(|i| output_of(&events, &format!("seen[{i}]")).is_some())
            .count() as u64;
        prop_assert!(iterations <= repeat_max);
        match output_of(&events, "count") {
            Some(list) => {
                prop_assert!(target < repeat_max);
                prop_assert_eq!(list.as_array().unwrap().len() as u64, target + 1);
            }
            None => prop_assert!(target + 1 > repeat_max),
        }

        let registry = tools::builtin();
        let replayed = session::replay(&dir.path().join("one"), &one.id, None, 2, &registry).unwrap();
        prop_assert_eq!(replayed.report.matched, one.report.events);
        prop_assert_eq!(replayed.report.state.hash(), one.report.state.hash());
    }
}

/// An iteration whose steps run at once (two independent steps in a `for` body, and in a
/// `repeat` body) sees both outcomes together, as a run's agent sees a round's: the loop
/// completes with every iteration's outputs, any `--jobs` gives the same bytes, and the run
/// replays. (Before, the iteration was given its first outcome alone and the run failed with
/// "an outcome for `b[0]`, which has no call running".)
#[test]
fn iterations_with_calls_running_at_once_see_their_outcomes_together() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("two.plan");
    fs::write(
        &plan,
        r#"plan two version 1
grant kv:get:c
grant kv:set:c
input items: list

each = for i in items max 10 {
  a = json.get { value: {n: i}, path: "n" }
  b = text.count { text: "one two" }
}

count = repeat {
  seen = kv.get { key: "c" }
  other = text.count { text: "x" }
  next = kv.set { key: "c", value: seen.value + 1 }
    when seen.found
  first = kv.set { key: "c", value: 1 }
    when not seen.found
} until seen.found and seen.value >= 2 max 5
"#,
    )
    .unwrap();
    let one = start(&plan, &dir.path().join("one"), 1, &[4, 5, 6]);
    let four = start(&plan, &dir.path().join("four"), 4, &[4, 5, 6]);
    assert!(
        matches!(
            one.report.ending,
            Ending::Finished {
                status: oracle_core::payload::RunStatus::Completed,
                ..
            }
        ),
        "{:?}",
        one.report.ending
    );
    let log = one.dir.join("events.jsonl");
    assert_eq!(
        fs::read(&log).unwrap(),
        fs::read(four.dir.join("events.jsonl")).unwrap()
    );
    let events = oracle_runtime::reader::read_all(&log).unwrap();
    let each = output_of(&events, "each").unwrap();
    let each = each.as_array().unwrap();
    assert_eq!(each.len(), 3);
    for (it, n) in each.iter().zip([4, 5, 6]) {
        assert_eq!(it["a"]["value"], n, "{it}");
        assert_eq!(it["b"]["words"], 2, "{it}");
    }
    assert_eq!(
        output_of(&events, "count")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let replayed =
        session::replay(&dir.path().join("one"), &one.id, None, 2, &tools::builtin()).unwrap();
    assert_eq!(replayed.report.matched, one.report.events);
}
