//! Loops through the real binary: `for` and `repeat` in `fixtures/plans/loops.plan`, the same
//! log bytes for any `--jobs`, replay, iterations named `step[i]`, and the bounds and
//! diagnostics that keep every loop finite.

use crate::common;

use std::fs;

use common::Sandbox;
use oracle_core::EventKind;
use serde_json::json;

#[test]
fn for_and_repeat_run_the_same_for_any_jobs_and_replay() {
    let sb = Sandbox::new();
    let (code, one) = sb.json(&["run", "fixtures/plans/loops.plan", "--json"]);
    assert_eq!(code, 0, "{one}");
    let (code, four) = sb.json(&[
        "run",
        "fixtures/plans/loops.plan",
        "--jobs",
        "4",
        "--home",
        "h4",
        "--json",
    ]);
    assert_eq!(code, 0, "{four}");
    let a = fs::read(sb.log(".oracle", "loops-1")).unwrap();
    let b = fs::read(sb.path().join("h4/runs/loops-1/events.jsonl")).unwrap();
    assert_eq!(a, b, "--jobs 1 and --jobs 4 logs differ");

    let events = sb.events(".oracle", "loops-1");
    let steps: Vec<String> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolCalled)
        .map(|e| e.payload["step"].as_str().unwrap().to_owned())
        .collect();
    for name in [
        "read[0]", "read[1]", "read[2]", "stats[2]", "seen[0]", "next[2]",
    ] {
        assert!(
            steps.iter().any(|s| s == name),
            "no call of `{name}`: {steps:?}"
        );
    }
    // The loop steps' outputs: one entry per iteration, keyed by the body's steps.
    let (code, v) = sb.json(&["inspect", "loops-1", "--json"]);
    assert_eq!(code, 0);
    let docs = &v["entries"]["step/docs"]["output"];
    assert_eq!(docs.as_array().unwrap().len(), 3, "{docs}");
    assert_eq!(docs[0]["stats"]["words"], 14);
    let rounds = &v["entries"]["step/rounds"]["output"];
    assert_eq!(rounds.as_array().unwrap().len(), 3, "{rounds}");
    assert_eq!(rounds[2]["seen"], json!({"found": true, "value": 2}));
    assert_eq!(v["entries"]["step/total"]["output"], json!({"value": 41}));

    let (code, r) = sb.json(&["replay", "loops-1", "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["result"], "reproduced");
}

#[test]
fn a_list_past_its_max_and_a_repeat_that_never_ends_fail_with_their_bound() {
    let sb = Sandbox::new();
    sb.write(
        "plans/bounds.plan",
        "plan bounds version 1\n\
         input items: list = [1, 2, 3]\n\
         many = for x in items max 2 {\n  c = text.count { text: \"a\" }\n}\n  on failure continue\n\
         never = repeat {\n  c2 = text.count { text: \"a b\" }\n} until c2.words > 5 max 3\n  on failure continue\n",
    );
    let (code, v) = sb.json(&["run", "plans/bounds.plan", "--json"]);
    assert_eq!(code, 0, "{v}");
    let (_, state) = sb.json(&["inspect", "bounds-1", "--json"]);
    assert_eq!(
        state["entries"]["step/many"]["error"],
        "for: 3 items, more than its max 2"
    );
    assert_eq!(
        state["entries"]["step/never"]["error"],
        "repeat: `until c2.words > 5` still false after its max 3 iterations"
    );
    assert!(state["entries"]["step/c2[2]"].is_object());
    assert!(state["entries"]["step/c2[3]"].is_null());
}

#[test]
fn loops_that_cannot_be_are_refused_by_plan_check() {
    let sb = Sandbox::new();
    for (text, expected) in [
        (
            "plan a version 1\nl = for x in [1] max 0 {\n  c = text.count { text: \"a\" }\n}\n",
            "a loop's `max` must be between 1 and 100000, found 0",
        ),
        (
            "plan a version 1\nl = for x in [1] max 5 {\n  c = text.count { text: \"a\" }\n}\n  attempts 2\n",
            "a loop step takes no `attempts` clause",
        ),
        (
            "plan a version 1\nl = for x in [1] max 5 {\n  inner = for y in [2] max 2 {\n    c = text.count { text: \"a\" }\n  }\n}\n",
            "loops do not nest (yet)",
        ),
        (
            "plan a version 1\ninput c: string = \"x\"\nl = for x in [1] max 5 {\n  c = text.count { text: \"a\" }\n}\n",
            "`c` inside the loop has the name of an input",
        ),
        (
            "plan a version 1\nl = repeat {\n  c = text.count { text: \"a\" }\n} until c.words > 1\n",
            "expected `max N`",
        ),
        (
            "plan a version 1\nl = for x in \"abc\" {\n  c = text.count { text: \"a\" }\n}\n",
            "`for` goes over a list, and this is a string",
        ),
    ] {
        sb.write("plans/bad.plan", text);
        let (code, _, err) = sb.oracle(&["plan", "check", "plans/bad.plan"]);
        assert_eq!(code, 2, "{text}\n{err}");
        assert!(err.contains(expected), "{text}\n{err}");
    }
}

#[test]
fn plan_graph_draws_loop_bodies_and_agent_tools() {
    let (code, out, err) = common::oracle(&["plan", "graph", "fixtures/plans/loops.plan"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("docs             for name in list.entries max 100  <- list"),
        "{out}"
    );
    assert!(
        out.contains("    stats[i]       text.count (body level 1)  <- read"),
        "{out}"
    );
    assert!(
        out.contains("rounds           repeat until seen.found and seen.value >= 2 max 5"),
        "{out}"
    );
    let (code, out, _) = common::oracle(&["plan", "graph", "fixtures/plans/research.plan"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("research         agent with [\"fs.list\", \"fs.read\"]"),
        "{out}"
    );
}
