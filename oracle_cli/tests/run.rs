//! End-to-end tests of `oracle run | resume | replay | runs` with the real binary. Each test
//! works in a temporary directory holding a copy of `fixtures/`, which is the working directory
//! of every command, so plans' relative paths (and the files they write) stay inside it.

use crate::common;

use common::{Sandbox, forge};

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use oracle_core::{Event, Payload};
use serde_json::Value;

/// The JSON paths of the differing fields in a divergence report.
fn field_paths(report: &Value) -> Vec<&str> {
    report["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect()
}

fn payloads(events: &[Event]) -> Vec<Payload> {
    events.iter().map(|e| e.typed().unwrap()).collect()
}

#[test]
fn quickstart_gives_the_same_head_in_two_homes_and_both_replay() {
    let sb = Sandbox::new();
    let plan = "fixtures/plans/quickstart.plan";
    let (c1, a) = sb.json(&["--home", "h1", "run", plan, "--json"]);
    let (c2, b) = sb.json(&["--home", "h2", "run", plan, "--json"]);
    assert_eq!((c1, c2), (0, 0), "{a} {b}");
    assert_eq!(a["status"], "completed");
    assert_eq!(a["head"], b["head"]);
    assert_eq!(a["run"], "quickstart-1");
    assert_eq!(
        fs::read(sb.log("h1", "quickstart-1")).unwrap(),
        fs::read(sb.log("h2", "quickstart-1")).unwrap(),
        "the two logs are byte-identical"
    );
    assert_eq!(
        fs::read_to_string(sb.path().join("out/summary.txt")).unwrap(),
        "words: 38, lines: 4"
    );
    for home in ["h1", "h2"] {
        let (code, r) = sb.json(&["--home", home, "replay", "quickstart-1", "--json"]);
        assert_eq!(code, 0, "{r}");
        assert_eq!(r["result"], "reproduced");
        assert_eq!(r["matched"], a["events"]);
        assert_eq!(r["state"], a["state"]);
    }
    // A second run in the same home gets the next id and the same head.
    let (_, c) = sb.json(&["--home", "h1", "run", plan, "--json"]);
    assert_eq!(c["run"], "quickstart-2");
    assert_eq!(c["head"], a["head"]);
    let (code, _, _) = sb.oracle(&["verify", "h1/runs/quickstart-2"]);
    assert_eq!(code, 0);
}

#[test]
fn jobs_do_not_change_the_log() {
    let sb = Sandbox::new();
    let plan = "fixtures/plans/diamond.plan";
    let (c1, _) = sb.json(&["--home", "j1", "run", plan, "--jobs", "1", "--json"]);
    let (c4, _) = sb.json(&["--home", "j4", "run", plan, "--jobs", "4", "--json"]);
    assert_eq!((c1, c4), (0, 0));
    assert_eq!(
        fs::read(sb.log("j1", "diamond-1")).unwrap(),
        fs::read(sb.log("j4", "diamond-1")).unwrap()
    );
}

/// `--jobs` is bounded by `JOBS_MAX` (the engine's pool size) for every command that takes it:
/// 0 and `JOBS_MAX + 1` are refused with exit 2 before anything is written; `JOBS_MAX` itself
/// runs and gives the same log as one job.
#[test]
fn jobs_past_jobs_max_or_zero_are_refused_and_jobs_max_runs() {
    use oracle_runtime::engine::JOBS_MAX;
    let sb = Sandbox::new();
    let plan = "fixtures/plans/diamond.plan";
    let (code, _) = sb.json(&["--home", "one", "run", plan, "--json"]);
    assert_eq!(code, 0);
    let max = JOBS_MAX.to_string();
    let (code, _) = sb.json(&["--home", "max", "run", plan, "--jobs", &max, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(
        fs::read(sb.log("one", "diamond-1")).unwrap(),
        fs::read(sb.log("max", "diamond-1")).unwrap()
    );
    let over = (JOBS_MAX + 1).to_string();
    for jobs in ["0", over.as_str()] {
        for command in [
            &["--home", "none", "run", plan][..],
            &["--home", "one", "resume", "diamond-1"],
            &["--home", "one", "replay", "diamond-1"],
        ] {
            let mut args = command.to_vec();
            args.extend(["--jobs", jobs]);
            let (code, _, err) = sb.oracle(&args);
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(err.contains("--jobs"), "{args:?}: {err}");
        }
    }
    assert!(!sb.path().join("none").exists(), "nothing written");
}

/// A plan that reads whatever path it is given, under a grant for `fixtures/data/**` only.
const READER: &str = "plan reader version 1\n\
grant fs:read:fixtures/data/**\n\
input path: string = \"fixtures/data/notes.txt\"\n\
read = fs.read { path: path }\n";

fn assert_denied(sb: &Sandbox, home: &str, path: &str, reason_part: &str) {
    let input = format!("path={path}");
    let (code, out) = sb.json(&[
        "--home",
        home,
        "run",
        "reader.plan",
        "--input",
        &input,
        "--json",
    ]);
    assert_eq!(code, 1, "a denial fails the step under `stop`: {out}");
    assert_eq!(out["status"], "failed");
    let events = sb.events(home, "reader-1");
    let ps = payloads(&events);
    let denied = ps
        .iter()
        .find_map(|p| match p {
            Payload::CapabilityDenied(d) => Some(d.clone()),
            _ => None,
        })
        .expect("the denial is in the log");
    assert_eq!(denied.step, "read");
    assert_eq!(denied.capability, format!("fs:read:{path}"));
    assert!(
        denied.reason.contains(reason_part),
        "reason {:?} should mention {reason_part:?}",
        denied.reason
    );
    // Nothing was read: the tool was never called, and the secret is nowhere in the log.
    assert!(!ps.iter().any(|p| matches!(p, Payload::ToolCalled(_))));
    let log = fs::read_to_string(sb.log(home, "reader-1")).unwrap();
    assert!(!log.contains("TOP SECRET"));
    // The run's failure names the missing capability.
    assert!(out["reason"].as_str().unwrap().contains(&denied.capability));
}

#[test]
fn reads_outside_the_grant_are_denied_before_anything_is_read() {
    let sb = Sandbox::new();
    sb.write("reader.plan", READER);
    sb.write("secret.txt", "TOP SECRET\n");
    sb.write("fixtures/secret.txt", "TOP SECRET\n");
    // `..` climbing out of the granted directory.
    assert_denied(
        &sb,
        "dotdot",
        "fixtures/data/../secret.txt",
        "no grant covers",
    );
    // `..` climbing out of the working directory altogether.
    assert_denied(&sb, "escape", "../secret.txt", "climbs out");
    // An absolute path outside the working directory.
    let abs = sb.path().parent().unwrap().join("secret.txt");
    assert_denied(&sb, "absolute", abs.to_str().unwrap(), "no grant covers");
    // A symlink inside the granted directory pointing out of it.
    std::os::unix::fs::symlink("../../secret.txt", sb.path().join("fixtures/data/link.txt"))
        .unwrap();
    assert_denied(&sb, "symlink", "fixtures/data/link.txt", "symlink");
    // The same read of a real granted file is allowed (the grant itself works).
    let (code, out) = sb.json(&["--home", "ok", "run", "reader.plan", "--json"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn escalation_retries_falls_back_suspends_and_resumes() {
    let sb = Sandbox::new();
    let (code, out) = sb.json(&["run", "fixtures/plans/escalation.plan", "--json"]);
    assert_eq!(code, 3, "suspended: {out}");
    assert_eq!(out["status"], "suspended");
    assert_eq!(out["waiting"]["step"], "total");
    assert_eq!(out["waiting"]["attempts"], 6);
    let events = sb.events(".oracle", "escalation-1");
    let calls: Vec<(String, u64)> = payloads(&events)
        .into_iter()
        .filter_map(|p| match p {
            Payload::StepScheduled(s) if s.step == "total" => Some((s.tool, s.attempt)),
            _ => None,
        })
        .collect();
    let tools: Vec<&str> = calls.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        tools,
        [
            "json.parse",
            "json.parse",
            "json.parse",
            "text.split",
            "text.split",
            "text.split"
        ],
        "three attempts, then the fallback three times"
    );
    let failures = payloads(&events)
        .into_iter()
        .filter(|p| matches!(p, Payload::ToolFailed(f) if f.tool == "json.parse"))
        .count();
    assert_eq!(failures, 3);

    // Listed as pending human work.
    let (code, list, _) = sb.oracle(&["runs", "--status", "suspended", "--json"]);
    assert_eq!(code, 0);
    let rows: Vec<Value> = list
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{list}");
    assert_eq!(rows[0]["run"], "escalation-1");
    assert_eq!(rows[0]["waiting"]["step"], "total");
    let (_, none, _) = sb.oracle(&["runs", "--status", "completed", "--json"]);
    assert!(none.trim().is_empty());

    // Wrong step, missing value, not JSON: clear errors, log untouched.
    let before = fs::read(sb.log(".oracle", "escalation-1")).unwrap();
    for (args, needle) in [
        (
            vec![
                "resume",
                "escalation-1",
                "--step",
                "confirm",
                "--value",
                "1",
            ],
            "waits on step `total`, not `confirm`",
        ),
        (vec!["resume", "escalation-1"], "--step total --value JSON"),
        (
            vec![
                "resume",
                "escalation-1",
                "--step",
                "total",
                "--value",
                "{nope",
            ],
            "not JSON",
        ),
        (
            // An unquoted string: the message shows the quoted form.
            vec![
                "resume",
                "escalation-1",
                "--step",
                "confirm",
                "--value",
                "approved",
            ],
            "'\"approved\"'",
        ),
        (
            // A value the step could not have produced: its `expect` needs `.value.total`.
            vec![
                "resume",
                "escalation-1",
                "--step",
                "total",
                "--value",
                "1250",
            ],
            "the answer for step `total` is refused (nothing was recorded): the step's `expect total.value.total > 0` fails on this value",
        ),
        (
            // It passes `expect` but is no output of the step's tools (json.parse, text.split).
            vec![
                "resume",
                "escalation-1",
                "--step",
                "total",
                "--value",
                r#"{"value":{"total":1250},"extra":1}"#,
            ],
            "not an output of the step's tools",
        ),
        (vec!["resume", "no-such-run"], "no such run"),
    ] {
        let (code, _, err) = sb.oracle(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert_eq!(fs::read(sb.log(".oracle", "escalation-1")).unwrap(), before);

    // The person supplies the total; the run goes on to ask for approval (human.ask).
    let value = r#"{"value":{"total":1250}}"#;
    let (code, out) = sb.json(&[
        "resume",
        "escalation-1",
        "--step",
        "total",
        "--value",
        value,
        "--json",
    ]);
    assert_eq!(code, 3, "{out}");
    assert_eq!(out["waiting"]["step"], "confirm");
    assert_eq!(
        out["waiting"]["reason"],
        "The invoice total is 1250. Approve payment?"
    );
    sb.write("answer.json", "\"approved\"");
    let (code, out) = sb.json(&[
        "resume",
        "escalation-1",
        "--step",
        "confirm",
        "--value-file",
        "answer.json",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["status"], "completed");
    let events = sb.events(".oracle", "escalation-1");
    assert!(
        payloads(&events).iter().any(
            |p| matches!(p, Payload::Resumed(r) if r.step == "confirm" && r.value == "approved")
        )
    );

    // The resumed run replays, and cannot be resumed again.
    let (code, r) = sb.json(&["replay", "escalation-1", "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["ending"], "completed");
    let (code, _, err) = sb.oracle(&["resume", "escalation-1"]);
    assert_eq!(code, 2);
    assert!(err.contains("has finished"), "{err}");
}

#[test]
fn a_forged_pure_output_that_verifies_is_caught_by_replay() {
    let sb = Sandbox::new();
    let (code, _) = sb.json(&["run", "fixtures/plans/quickstart.plan", "--json"]);
    assert_eq!(code, 0);
    let log = sb.log(".oracle", "quickstart-1");
    let events = sb.events(".oracle", "quickstart-1");
    let seq = events
        .iter()
        .position(
            |e| matches!(e.typed().unwrap(), Payload::ToolReturned(r) if r.tool == "text.count"),
        )
        .unwrap();
    forge(&log, seq, |p| p["output"]["words"] = Value::from(99));
    let (code, out, err) = sb.oracle(&["verify", log.to_str().unwrap()]);
    assert_eq!(code, 0, "the forgery is internally consistent: {out}{err}");
    let (code, r) = sb.json(&["replay", "quickstart-1", "--json"]);
    assert_eq!(code, 4, "{r}");
    assert_eq!(r["result"], "diverged");
    assert_eq!(r["seq"], seq as u64);
    assert_eq!(r["step"], "stats");
    assert_eq!(r["class"], "payload");
    let fields = field_paths(&r);
    assert!(fields.contains(&"payload.output.words"), "{fields:?}");
    // The text report says the same.
    let (code, out, _) = sb.oracle(&["replay", "quickstart-1"]);
    assert_eq!(code, 4);
    assert!(out.contains(&format!("diverged at event {seq}")), "{out}");
    assert!(
        out.contains("(replay)"),
        "the same report as `oracle diff`, B being the replay: {out}"
    );
    assert!(out.contains("payload.output.words"), "{out}");
}

#[test]
fn replay_against_an_edited_plan_names_the_first_step_that_differs() {
    let sb = Sandbox::new();
    let (code, _) = sb.json(&["run", "fixtures/plans/quickstart.plan", "--json"]);
    assert_eq!(code, 0);
    let original = fs::read_to_string(sb.path().join("fixtures/plans/quickstart.plan")).unwrap();
    // Layout and comments only: still valid, same plan hash.
    let relaid = format!(
        "# a comment\n\n{}",
        original.replace("  expect", "      expect")
    );
    sb.write("relaid.plan", &relaid);
    let (code, r) = sb.json(&["replay", "quickstart-1", "--plan", "relaid.plan", "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["plan_changes"], Value::Array(vec![]));
    // A different summary text: the run diverges at the write, and says so.
    let edited = original.replace("\"words: \"", "\"Words: \"");
    assert_ne!(edited, original);
    sb.write("edited.plan", &edited);
    let (code, r) = sb.json(&["replay", "quickstart-1", "--plan", "edited.plan", "--json"]);
    assert_eq!(code, 4, "{r}");
    assert_eq!(r["step"], "summary");
    assert_eq!(r["events"]["a"]["kind"], "tool_called");
    assert_eq!(r["events"]["b"]["kind"], "tool_called");
    // The causal parent of the diverging call (its capability check) is in the report.
    assert_eq!(r["parents"]["a"][0]["kind"], "capability_allowed");
    let fields = field_paths(&r);
    assert!(fields.contains(&"payload.input.content"), "{fields:?}");
}

#[test]
fn bad_plans_and_arguments_start_nothing() {
    let sb = Sandbox::new();
    for (args, needle) in [
        (vec!["run", "fixtures/plans/missing.plan"], "missing.plan"),
        (
            vec!["run", "fixtures/plans/quickstart.plan", "--input", "nope=1"],
            "has no input `nope`; its inputs: min_words: int, path: string",
        ),
        (
            vec!["run", "fixtures/plans/quickstart.plan", "--seed", "-1"],
            "`-1` is not a seed: give a whole number from 0 to 18446744073709551615",
        ),
        (
            vec![
                "run",
                "fixtures/plans/quickstart.plan",
                "--grant",
                "fs:raed:data/**",
            ],
            "no tool needs `fs:raed`, so it would allow nothing; grants name one of: evolve:propose, fs:list, fs:read",
        ),
        (
            vec![
                "run",
                "fixtures/plans/quickstart.plan",
                "--input",
                "min_words=many",
            ],
            "must be an integer",
        ),
        (
            vec![
                "run",
                "fixtures/plans/quickstart.plan",
                "--grant",
                "not a grant",
            ],
            "not a capability",
        ),
    ] {
        let (code, _, err) = sb.oracle(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    sb.write(
        "broken.plan",
        "plan broken version 1\nx = fs.read { path: }\n",
    );
    let (code, _, err) = sb.oracle(&["run", "broken.plan"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("broken.plan:2:"),
        "diagnostics with line:col: {err}"
    );
    assert!(
        !sb.path().join(".oracle/runs").exists(),
        "no run was created"
    );
}

/// A plan with pure steps before and after a slow impure one that waits for a marker file.
const SLOW: &str = "plan slow version 1\n\
grant proc:exec:sh\n\
a = text.count { text: \"one two three\" }\n\
wait = proc.exec { program: \"sh\", args: [\"-c\", \"while [ ! -e marker ]; do sleep 0.05; done; echo done\"] }\n  after a\n  timeout 60s\n\
b = text.count { text: \"four five\" }\n  after wait\n\
c = json.get { value: { a: a.words, b: b.words }, path: \"b\" }\n";

#[test]
fn a_run_killed_mid_way_verifies_and_resume_finishes_it() {
    let sb = Sandbox::new();
    sb.write("slow.plan", SLOW);
    let mut child = sb
        .command(&["--home", "killed", "run", "slow.plan"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the slow call is on disk (write-ahead), then kill the process.
    let log = sb.log("killed", "slow-1");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = fs::read_to_string(&log).unwrap_or_default();
        if text.contains("\"tool_called\"") && text.contains("proc.exec") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run never reached the slow step"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();

    let (code, out, err) = sb.oracle(&["verify", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, list, _) = sb.oracle(&["--home", "killed", "runs", "--status", "running", "--json"]);
    assert!(list.contains("slow-1"), "{list}");

    sb.write("marker", "");
    let (code, out) = sb.json(&["--home", "killed", "resume", "slow-1", "--json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["status"], "completed");

    // An uninterrupted run reaches the same state.
    let (code, clean) = sb.json(&["--home", "clean", "run", "slow.plan", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(out["state"], clean["state"]);
    assert_eq!(out["head"], clean["head"]);
    let (code, r) = sb.json(&["--home", "killed", "replay", "slow-1", "--json"]);
    assert_eq!(code, 0, "{r}");
}

#[test]
fn diff_of_two_real_runs_is_identical_or_names_the_input() {
    let sb = Sandbox::new();
    let plan = "fixtures/plans/quickstart.plan";
    sb.json(&["--home", "a", "run", plan, "--json"]);
    sb.json(&["--home", "b", "run", plan, "--json"]);
    sb.json(&[
        "--home",
        "c",
        "run",
        plan,
        "--input",
        "min_words=1000",
        "--json",
    ]);
    let (code, same) = sb.json(&[
        "diff",
        "a/runs/quickstart-1",
        "b/runs/quickstart-1",
        "--json",
    ]);
    assert_eq!(code, 0, "{same}");
    assert_eq!(same["result"], "identical");
    let (code, d) = sb.json(&[
        "diff",
        "a/runs/quickstart-1",
        "c/runs/quickstart-1",
        "--json",
    ]);
    assert_eq!(code, 1, "{d}");
    assert_eq!(d["seq"], 0);
    assert_eq!(d["class"], "inputs");
    assert_eq!(
        d["detail"]["fields"],
        serde_json::json!(["inputs.min_words"])
    );
}

#[test]
fn a_tampered_stored_plan_is_refused_on_resume_and_replay() {
    let sb = Sandbox::new();
    let (code, _) = sb.json(&["run", "fixtures/plans/escalation.plan", "--json"]);
    assert_eq!(code, 3);
    let stored = sb.path().join(".oracle/runs/escalation-1/plan.plan");
    let text = fs::read_to_string(&stored).unwrap();
    fs::write(&stored, text.replace("attempts 3", "attempts 4")).unwrap();
    let before = fs::read(sb.log(".oracle", "escalation-1")).unwrap();
    let (code, _, err) = sb.oracle(&["resume", "escalation-1", "--step", "total", "--value", "{}"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("stored plan does not match"), "{err}");
    let (code, _, err) = sb.oracle(&["replay", "escalation-1"]);
    assert_eq!(code, 4, "{err}");
    assert_eq!(fs::read(sb.log(".oracle", "escalation-1")).unwrap(), before);
}

#[test]
fn a_human_answer_must_match_the_schema_it_was_asked_with() {
    let sb = Sandbox::new();
    sb.write(
        "ask.plan",
        "plan ask version 1\n\
         ok = human.ask { question: \"Ship it?\", schema: { \"type\": \"string\", \"enum\": [\"yes\", \"no\"] } }\n",
    );
    let (code, out) = sb.json(&["run", "ask.plan", "--json"]);
    assert_eq!(code, 3, "{out}");
    assert_eq!(out["waiting"]["reason"], "Ship it?");
    let before = fs::read(sb.log(".oracle", "ask-1")).unwrap();
    let (code, _, err) = sb.oracle(&["resume", "ask-1", "--step", "ok", "--value", "\"maybe\""]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("does not match the question's schema"),
        "{err}"
    );
    assert_eq!(fs::read(sb.log(".oracle", "ask-1")).unwrap(), before);
    let (code, out) = sb.json(&[
        "resume", "ask-1", "--step", "ok", "--value", "\"yes\"", "--json",
    ]);
    assert_eq!(code, 0, "{out}");
    let events = sb.events(".oracle", "ask-1");
    let last_state = events.iter().rev().find_map(|e| match e.typed().unwrap() {
        Payload::StateChanged(c) => c.set.get("step/ok").cloned(),
        _ => None,
    });
    assert_eq!(
        last_state.unwrap()["output"],
        serde_json::json!({"answer": "yes"})
    );
}

/// `oracle run --key K`: the key is recorded in the first event; a second start with the same
/// key, plan, inputs and seed runs nothing and names the first run (with its exit status); one
/// that differs is refused with `key_conflict`, naming what differs, and creates nothing. A
/// key file edited to name another run never makes a start claim that run.
#[test]
fn a_key_starts_a_run_once_and_refuses_a_start_that_differs() {
    let sb = Sandbox::new();
    let plan = "fixtures/plans/escalation.plan";
    let (code, v) = sb.json(&["run", plan, "--key", "job-9", "--json"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["run"], "escalation-1");
    assert_eq!(
        sb.events(".oracle", "escalation-1")[0].payload["key"],
        "job-9"
    );
    let (code, v) = sb.json(&["run", plan, "--key", "job-9", "--json"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["run"], "escalation-1");
    assert_eq!(v["existing"], true);
    assert_eq!(v["status"], "suspended");
    let (code, out, _) = sb.oracle(&["run", plan, "--key", "job-9"]);
    assert_eq!(code, 3);
    assert!(out.contains("started this run already"), "{out}");
    let (code, v) = sb.json(&["run", plan, "--key", "job-9", "--seed", "2", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "key_conflict");
    assert_eq!(v["error"]["differs"], serde_json::json!(["seed"]));
    let (code, v) = sb.json(&[
        "run",
        plan,
        "--key",
        "job-9",
        "--input",
        "invoice=x",
        "--json",
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["differs"], serde_json::json!(["inputs"]));
    let (code, _, err) = sb.oracle(&["run", plan, "--key", ""]);
    assert_eq!(code, 2, "{err}");
    let runs = fs::read_dir(sb.path().join(".oracle/runs"))
        .unwrap()
        .count();
    assert_eq!(runs, 1, "nothing else was created");
    // Another run, then the key file edited to name it: the record of that run carries no key,
    // so the key names nothing there and a start under it is a new run.
    let (code, _) = sb.json(&["run", plan, "--json"]);
    assert_eq!(code, 3);
    let keys = sb.path().join(".oracle/keys");
    let file = fs::read_dir(&keys).unwrap().next().unwrap().unwrap().path();
    let text = fs::read_to_string(&file).unwrap();
    fs::write(&file, text.replace("escalation-1", "escalation-2")).unwrap();
    let (code, v) = sb.json(&["run", plan, "--key", "job-9", "--json"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["run"], "escalation-3");
    assert_eq!(v.get("existing"), None);
    let (code, v) = sb.json(&["run", plan, "--key", "job-9", "--json"]);
    assert_eq!(
        (code, &v["run"], &v["existing"]),
        (3, &"escalation-3".into(), &true.into())
    );
}

/// Every file under `dir`, as paths relative to it, sorted.
fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Issue 54, item 3: the read-only commands on a run of another home, named by its directory,
/// work from any directory and create no file anywhere: no home in the working directory, and
/// nothing in the run's home.
#[test]
fn read_only_commands_on_a_run_of_another_home_create_nothing() {
    let sb = Sandbox::new();
    let plan = "fixtures/plans/quickstart.plan";
    let (code, v) = sb.json(&["--home", "h1", "run", plan, "--json"]);
    assert_eq!(code, 0, "{v}");
    let run = sb.path().join("h1/runs").join(v["run"].as_str().unwrap());
    let run = run.to_str().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let listing = || (tree(sb.path()), tree(elsewhere.path()));
    let before = listing();
    for args in [
        &["replay", run][..],
        &["replay", run, "--from-snapshot"],
        &["log", run],
        &["log", run, "-n", "2"],
        &["inspect", run],
        &["verify", run],
    ] {
        let out = common::command_in(elsewhere.path(), args)
            .env_remove("ORACLE_HOME")
            .env_remove("ORACLE_STORE")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert_eq!(listing(), before, "{args:?} created files");
    }
}
