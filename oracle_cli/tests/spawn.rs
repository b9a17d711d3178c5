//! Child runs (`spawn` steps, issue 56 item 5) on a file home, with the real binary: a parent
//! waits for its children and reads their outputs; a child's failure is the step's failure; a
//! detached child lets the parent go on; a child that waits is delivered when it is resumed
//! later, and its outcome is the only answer the step takes; resuming a parent never starts a
//! second child; cancelling a parent cancels its live children; `oracle runs --tree` shows the
//! tree; every log verifies and replays byte for byte. `plan check` refuses a `spawn` whose
//! child plan cannot be used (E0229).

use crate::common;

use std::fs;
use std::path::Path;

use common::Sandbox;
use oracle_core::Payload;
use serde_json::Value;

const PARENT: &str = "fixtures/plans/refunds.plan";

/// A child that waits for a person, and a parent that spawns one detached and one it waits on.
fn waiting_family(sb: &Sandbox) {
    sb.write(
        "ask.plan",
        "plan ask version 1\n\na = human.ask { question: \"refund?\" }\n",
    );
    sb.write(
        "family.plan",
        "plan family version 1\n\nd = spawn { plan: \"ask.plan\", detach: true }\nw = spawn {\n  plan: \"ask.plan\",\n}\n  after d\n",
    );
}

/// `oracle runs --json` rows by run id.
fn runs(sb: &Sandbox, extra: &[&str]) -> Vec<Value> {
    let (code, out, err) = sb.oracle(&[&["runs", "--json"], extra].concat());
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn status(sb: &Sandbox, run: &str) -> String {
    runs(sb, &[])
        .into_iter()
        .find(|r| r["run"] == run)
        .map(|r| r["status"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no run {run}"))
}

/// `(step, value, by)` of every `resumed` event of `run`.
fn resumed(sb: &Sandbox, run: &str) -> Vec<(String, Value, Option<String>)> {
    sb.events(".oracle", run)
        .iter()
        .filter_map(|e| match e.typed().unwrap() {
            Payload::Resumed(r) => Some((r.step, r.value, r.by)),
            _ => None,
        })
        .collect()
}

/// The run's log replays byte for byte, and verifies.
fn replays(sb: &Sandbox, run: &str, ending: &str) {
    let (code, r) = sb.json(&["replay", run, "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["result"], "reproduced", "{r}");
    assert_eq!(r["ending"], ending);
    let (code, _, err) = sb.oracle(&["verify", run]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_parent_waits_for_its_children_and_reads_their_outputs() {
    let sb = Sandbox::new();
    let (code, v) = sb.json(&["run", PARENT, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed");
    // Each child: its own run, whose first event names the parent and the step.
    for (child, step, amount) in [("refund-1", "first", 30), ("refund-2", "second", 12)] {
        let events = sb.events(".oracle", child);
        let Payload::RunStarted(s) = events[0].typed().unwrap() else {
            panic!("first event");
        };
        let parent = s.parent.expect("the child names its parent");
        assert_eq!(
            (parent.run.as_str(), parent.step.as_str()),
            ("refunds-1", step)
        );
        assert_eq!(s.inputs["amount"], amount);
        replays(&sb, child, "completed");
    }
    // The parent recorded each child's outcome, by the child, and summed their outputs.
    let got = resumed(&sb, "refunds-1");
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1["run"], "refund-1");
    assert_eq!(got[0].1["status"], "completed");
    assert_eq!(got[0].1["outputs"]["receipt"]["value"], 30);
    assert_eq!(got[0].2.as_deref(), Some("child refund-1"));
    let total = sb
        .events(".oracle", "refunds-1")
        .iter()
        .find_map(|e| match e.typed().unwrap() {
            Payload::ToolReturned(r) if r.step == "total" => Some(r.output),
            _ => None,
        })
        .unwrap();
    assert_eq!(total["value"], 42);
    replays(&sb, "refunds-1", "completed");
    // The tree: both children under the parent.
    let rows = runs(&sb, &["--tree"]);
    let child = rows.iter().find(|r| r["run"] == "refund-2").unwrap();
    assert_eq!(child["spawned_by"]["run"], "refunds-1");
    assert_eq!(child["spawned_by"]["step"], "second");
    let (code, out, _) = sb.oracle(&["runs", "--tree"]);
    assert_eq!(code, 0);
    assert!(out.contains("└─ refund-1"), "{out}");
    assert!(out.contains("child of refunds-1 (step first)"), "{out}");
}

#[test]
fn a_failed_child_fails_the_step_naming_the_child() {
    let sb = Sandbox::new();
    sb.write(
        "broken.plan",
        "plan broken version 1\n\ngrant fs:read:missing.txt\n\nr = fs.read { path: \"missing.txt\" }\n",
    );
    sb.write(
        "boss.plan",
        "plan boss version 1\n\ngrant fs:read:missing.txt\n\nc = spawn { plan: \"broken.plan\" }\n",
    );
    let (code, v) = sb.json(&["run", "boss.plan", "--json"]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["status"], "failed");
    assert_eq!(status(&sb, "broken-1"), "failed");
    let reason = runs(&sb, &[])
        .into_iter()
        .find(|r| r["run"] == "boss-1")
        .unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.contains("step `c` failed: child run `broken-1` failed"),
        "{reason}"
    );
    replays(&sb, "boss-1", "failed");
}

#[test]
fn a_child_that_cannot_start_fails_the_step_with_why() {
    let sb = Sandbox::new();
    sb.write(
        "kid.plan",
        "plan kid version 1\n\ninput n: int\n\nx = json.get { value: { n: n }, path: \"n\" }\n",
    );
    // `inputs` computed: `plan check` cannot see that `n` is missing; the start refuses it.
    sb.write(
        "mom.plan",
        "plan mom version 1\n\ninput given: map = {}\n\nc = spawn { plan: \"kid.plan\", inputs: given }\n",
    );
    let (code, v) = sb.json(&["run", "mom.plan", "--json"]);
    assert_eq!(code, 1, "{v}");
    let row = runs(&sb, &[]);
    assert_eq!(row.len(), 1, "no child was made: {row:?}");
    let reason = row[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the child plan `kid.plan` was not started"),
        "{reason}"
    );
    replays(&sb, "mom-1", "failed");
}

#[test]
fn a_detached_child_lets_the_parent_go_on_and_a_waiting_child_delivers_later() {
    let sb = Sandbox::new();
    waiting_family(&sb);
    let (code, v) = sb.json(&["run", "family.plan", "--json"]);
    assert_eq!(code, 3, "the parent waits on its second child: {v}");
    // The detached child was answered at once with its id; both children wait for a person.
    let got = resumed(&sb, "family-1");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1["run"], "ask-1");
    assert_eq!(got[0].1["status"], "detached");
    assert_eq!(status(&sb, "ask-1"), "suspended");
    assert_eq!(status(&sb, "ask-2"), "suspended");
    // Nobody answers a `spawn` step from outside: only its child's outcome does.
    let (code, out, err) = sb.oracle(&["resume", "family-1", "--step", "w", "--value", "{}"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("child run"), "{err}");
    // Answering the child finishes it, and its outcome goes on to the parent.
    let (code, _, err) = sb.oracle(&["resume", "ask-2", "--step", "a", "--value", "\"yes\""]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(status(&sb, "family-1"), "completed");
    let got = resumed(&sb, "family-1");
    assert_eq!(got[1].1["outputs"]["a"]["answer"], "yes");
    assert_eq!(got[1].2.as_deref(), Some("child ask-2"));
    // The detached child is on its own: still waiting.
    assert_eq!(status(&sb, "ask-1"), "suspended");
    replays(&sb, "family-1", "completed");
    replays(&sb, "ask-2", "completed");
}

#[test]
fn resuming_a_parent_never_starts_a_second_child() {
    let sb = Sandbox::new();
    waiting_family(&sb);
    let (code, _) = sb.json(&["run", "family.plan", "--json"]);
    assert_eq!(code, 3);
    let children = |sb: &Sandbox| {
        runs(sb, &["--tree"])
            .into_iter()
            .filter(|r| r["spawned_by"]["run"] == "family-1")
            .count()
    };
    assert_eq!(children(&sb), 2);
    let log = fs::read(sb.log(".oracle", "family-1")).unwrap();
    // Resumed again and again: the same children, and the parent's log unchanged.
    for _ in 0..2 {
        let (code, _, err) = sb.oracle(&["resume", "family-1"]);
        assert_eq!(code, 3, "{err}");
        assert_eq!(children(&sb), 2);
    }
    assert_eq!(fs::read(sb.log(".oracle", "family-1")).unwrap(), log);
    // A crash between the parent's spawn and the child's start leaves the parent's log as it
    // is here, and no child: a resume starts exactly one.
    forget_run(sb.path(), "ask-2");
    assert_eq!(children(&sb), 1);
    let (code, _, err) = sb.oracle(&["resume", "family-1"]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(children(&sb), 2);
    let (code, _, err) = sb.oracle(&["resume", "family-1"]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(children(&sb), 2);
    assert_eq!(fs::read(sb.log(".oracle", "family-1")).unwrap(), log);
}

/// Removes a run and the idempotency keys that name it, as if it had never been started.
fn forget_run(dir: &Path, run: &str) {
    let home = dir.join(".oracle");
    fs::remove_dir_all(home.join("runs").join(run)).unwrap();
    for e in fs::read_dir(home.join("keys")).unwrap() {
        let p = e.unwrap().path();
        if fs::read_to_string(&p).unwrap_or_default().contains(run) {
            fs::remove_file(p).unwrap();
        }
    }
}

#[test]
fn a_parent_cancelled_with_2_running_children_leaves_3_cancelled_runs() {
    let sb = Sandbox::new();
    waiting_family(&sb);
    let (code, _) = sb.json(&["run", "family.plan", "--json"]);
    assert_eq!(code, 3);
    let (code, _, err) = sb.oracle(&["cancel", "family-1", "--reason", "order withdrawn"]);
    assert_eq!(code, 0, "{err}");
    let rows = runs(&sb, &[]);
    let cancelled: Vec<&str> = rows
        .iter()
        .filter(|r| r["status"] == "cancelled")
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(cancelled, ["ask-1", "ask-2", "family-1"], "{rows:?}");
    // Each child's cancel is in its own log, by its parent.
    for child in ["ask-1", "ask-2"] {
        let events = sb.events(".oracle", child);
        let Payload::RunFinished(f) = events.last().unwrap().typed().unwrap() else {
            panic!("the child's last event");
        };
        assert_eq!(f.by.as_deref(), Some("parent family-1"));
        replays(&sb, child, "cancelled");
    }
}

#[test]
fn plan_check_refuses_a_spawn_whose_child_plan_cannot_be_used() {
    let sb = Sandbox::new();
    sb.write(
        "kid.plan",
        "plan kid version 1\n\ninput n: int\n\nx = json.get { value: { n: n }, path: \"n\" }\n",
    );
    for (text, words) in [
        (
            "c = spawn { plan: \"../kid.plan\", inputs: { n: 1 } }",
            "stays below",
        ),
        ("c = spawn { plan: \"nope.plan\" }", "could not be read"),
        (
            "c = spawn { plan: \"kid.plan\", inputs: { m: 1, n: 2 } }",
            "has no input `m`",
        ),
        ("c = spawn { plan: \"kid.plan\" }", "needs input `n`"),
    ] {
        sb.write("p.plan", &format!("plan p version 1\n\n{text}\n"));
        let (code, out, err) = sb.oracle(&["plan", "check", "p.plan"]);
        assert_eq!(code, 2, "{text}: {out}");
        assert!(
            err.contains("E0229") && err.contains(words),
            "{text}: {err}"
        );
    }
    // The formatter keeps a spawn as written, `plan:` and all.
    sb.write(
        "p.plan",
        "plan p version 1\n\nc = spawn { plan: \"kid.plan\", inputs: { n: 1 }, detach: true }\n",
    );
    let (code, out, err) = sb.oracle(&["plan", "check", "p.plan"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = sb.oracle(&["plan", "fmt", "--check", "p.plan"]);
    assert_eq!(code, 0, "{err}");
}

static DB: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A fresh database with the schema, or `None` (skip) without PostgreSQL.
fn store_url() -> Option<String> {
    let cluster = oracle_pg::cluster::shared()?;
    let n = DB.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let url = cluster
        .database(&format!("spawn_{}_{n}", std::process::id()))
        .unwrap();
    let (code, out, err) = common::oracle_in(Path::new("."), &["store", "init", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    Some(url)
}

/// The store's runs (`oracle runs --store URL --json`) by id.
fn store_runs(dir: &Path, url: &str) -> Vec<Value> {
    let (code, out, err) = common::oracle_in(dir, &["runs", "--store", url, "--json"]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A store's run exported to a file: its events.
fn exported(dir: &Path, url: &str, run: &str) -> Vec<oracle_core::Event> {
    let out = dir.join(format!("{run}.jsonl"));
    let (code, v) = common::json_in(
        dir,
        &[
            "export",
            run,
            "--out",
            out.to_str().unwrap(),
            "--store",
            url,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{v}");
    common::parse_events(&fs::read(out).unwrap())
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn over_a_store_children_are_runs_of_the_store_and_their_outcomes_reach_the_parent() {
    let Some(url) = store_url() else { return };
    let sb = Sandbox::new();
    let st = sb.path();
    let (code, out, err) = common::oracle_in(st, &["submit", PARENT, "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    let parent = out.trim().to_owned();
    // Two workers at once: a child is a run of the store like any other, for whichever
    // claims it. A worker that finds nothing to claim while the other drives stops; one more
    // after both picks up what is left.
    let mut other = common::worker_command(st, &url, &["--until-idle"])
        .spawn()
        .unwrap();
    common::worker_until_idle(st, &url, &[]);
    assert!(other.wait().unwrap().success());
    for _ in 0..4 {
        common::worker_until_idle(st, &url, &[]);
    }
    let rows = store_runs(st, &url);
    let row = |id: &str| rows.iter().find(|r| r["run"] == id).cloned().unwrap();
    assert_eq!(row(&parent)["state"], "completed", "{rows:?}");
    assert_eq!(rows.len(), 3, "{rows:?}");
    let events = exported(st, &url, &parent);
    let answers: Vec<(Value, Option<String>)> = events
        .iter()
        .filter_map(|e| match e.typed().unwrap() {
            Payload::Resumed(r) => Some((r.value, r.by)),
            _ => None,
        })
        .collect();
    assert_eq!(answers.len(), 2);
    for (value, by) in &answers {
        let child = value["run"].as_str().unwrap();
        assert_eq!(by.as_deref(), Some(format!("child {child}").as_str()));
        assert_eq!(row(child)["state"], "completed");
        let first = exported(st, &url, child)[0].typed().unwrap();
        let Payload::RunStarted(s) = first else {
            panic!("first event");
        };
        assert_eq!(s.parent.unwrap().run, parent);
    }
    let total = events
        .iter()
        .find_map(|e| match e.typed().unwrap() {
            Payload::ToolReturned(r) if r.step == "total" => Some(r.output),
            _ => None,
        })
        .unwrap();
    assert_eq!(total["value"], 42);
    let (code, out, err) = common::oracle_in(st, &["replay", &parent, "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn over_a_store_a_parent_cancelled_with_2_running_children_leaves_3_cancelled_runs() {
    let Some(url) = store_url() else { return };
    let sb = Sandbox::new();
    waiting_family(&sb);
    let st = sb.path();
    let (code, out, err) = common::oracle_in(st, &["submit", "family.plan", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    let parent = out.trim().to_owned();
    for _ in 0..3 {
        common::worker_until_idle(st, &url, &[]);
    }
    let states = |url: &str| -> Vec<(String, String)> {
        store_runs(st, url)
            .iter()
            .map(|r| {
                let (id, state) = (r["run"].as_str(), r["state"].as_str());
                (id.unwrap().to_owned(), state.unwrap().to_owned())
            })
            .collect()
    };
    let before = states(&url);
    assert_eq!(before.len(), 3, "{before:?}");
    assert!(before.iter().all(|(_, s)| s == "suspended"), "{before:?}");
    let (code, out, err) = common::oracle_in(st, &["cancel", &parent, "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    for _ in 0..3 {
        common::worker_until_idle(st, &url, &[]);
    }
    let after = states(&url);
    assert!(after.iter().all(|(_, s)| s == "cancelled"), "{after:?}");
    assert_eq!(after.len(), 3);
    for (child, _) in after.iter().filter(|(id, _)| *id != parent) {
        let events = exported(st, &url, child);
        let Payload::RunFinished(f) = events.last().unwrap().typed().unwrap() else {
            panic!("the child's last event");
        };
        assert_eq!(f.by, Some(format!("parent {parent}")));
    }
}
