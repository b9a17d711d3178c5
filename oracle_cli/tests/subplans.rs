//! Sub-plans through the real binary: `use "PATH" as NAME` and `r = NAME { inputs }`, calls
//! named under the step, the run's own copy of the sub-plan for resume and replay, and the
//! checks that keep a sub-plan within its caller (grants, inputs, paths, depth).

use crate::common;

use common::Sandbox;
use oracle_core::EventKind;
use serde_json::json;

#[test]
fn a_sub_plan_runs_under_its_step_and_replays_from_the_runs_own_copy() {
    let sb = Sandbox::new();
    let (code, v) = sb.json(&["run", "fixtures/plans/report.plan", "--json"]);
    assert_eq!(code, 0, "{v}");
    let steps: Vec<String> = sb
        .events(".oracle", "report-1")
        .iter()
        .filter(|e| e.kind == EventKind::ToolCalled)
        .map(|e| e.payload["step"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        steps,
        [
            "notes/read",
            "invoice/read",
            "notes/stats",
            "invoice/stats",
            "total"
        ]
    );
    let (_, state) = sb.json(&["inspect", "report-1", "--json"]);
    assert_eq!(
        state["entries"]["step/total"]["output"],
        json!({"value": 55})
    );
    assert_eq!(
        state["entries"]["step/notes"]["output"]["stats"]["words"],
        38
    );
    assert!(
        sb.path()
            .join(".oracle/runs/report-1/uses/count-words.plan")
            .is_file()
    );

    // Editing the sub-plan afterwards changes nothing the run recorded: replay compiles the
    // copy the run kept (and the plan hash covers the sub-plan, so it is checked).
    let sub = sb.path().join("fixtures/plans/count-words.plan");
    let text = std::fs::read_to_string(&sub).unwrap();
    std::fs::write(
        &sub,
        text.replace(
            "text.count { text: read.text }",
            "text.count { text: read.text + \" more\" }",
        ),
    )
    .unwrap();
    let (code, r) = sb.json(&["replay", "report-1", "--json"]);
    assert_eq!(code, 0, "{r}");
    // Replaying against the plan as it now is finds the first call whose input differs.
    let (code, out, err) =
        sb.oracle(&["replay", "report-1", "--plan", "fixtures/plans/report.plan"]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(out.contains("notes/stats"), "{out}");
}

#[test]
fn sub_plans_that_cannot_be_used_are_refused_by_plan_check() {
    let sb = Sandbox::new();
    sb.write(
        "plans/wide.plan",
        "plan wide version 1\ngrant fs:read:**\ninput path: string\nr = fs.read { path: path }\n",
    );
    sb.write(
        "plans/selfish.plan",
        "plan selfish version 1\nuse \"selfish.plan\" as me\nx = me {}\n",
    );
    for (text, expected) in [
        (
            "plan a version 1\ngrant fs:read:fixtures/**\nuse \"wide.plan\" as w\nx = w { path: \"a\" }\n",
            "grants `fs:read:**`, which no grant of this plan covers",
        ),
        (
            "plan a version 1\ngrant fs:read:**\nuse \"wide.plan\" as w\nx = w {}\n",
            "needs input `path`",
        ),
        (
            "plan a version 1\ngrant fs:read:**\nuse \"wide.plan\" as w\nx = w { path: \"a\", pth: 1 }\n",
            "has no input `pth`",
        ),
        (
            "plan a version 1\nuse \"../escape.plan\" as w\nx = w {}\n",
            "stays below the top plan's directory",
        ),
        (
            "plan a version 1\nuse \"missing.plan\" as w\nx = w {}\n",
            "could not be read",
        ),
        (
            "plan a version 1\nuse \"selfish.plan\" as s\nx = s {}\n",
            "sub-plans nest deeper than 4",
        ),
    ] {
        sb.write("plans/caller.plan", text);
        let (code, _, err) = sb.oracle(&["plan", "check", "plans/caller.plan"]);
        assert_eq!(code, 2, "{text}\n{err}");
        assert!(err.contains(expected), "{text}\n{err}");
    }
}
