//! Code runs beyond one life (issue 55): `oracle fork` of a Python and a TypeScript agent's run
//! at its question with another answer (the fork's `agent.json` sealed for the fork's own id),
//! `oracle diff` naming where parent and fork part, a fork of an edited `agent.json` refused,
//! `oracle serve --agent NAME=FILE` starting a code run by name, and `oracle export`/`import`
//! of a code run, whose command the importing home runs only when told to trust it.

use crate::code_agent::{
    TRIAGE, TRIAGE_MJS, WORDS_MJS, answer_through_the_api, api, finished, node_sandbox, run, run_id,
};
use crate::common::{self, Sandbox, root};
use crate::web;

use std::collections::BTreeMap;

use oracle_core::payload::RunStatus;
use serde_json::Value;

/// Every file under `dir` with its bytes, by relative path.
fn snapshot(dir: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                files.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// Runs `entry` to its question, answers `"yes"`, and returns the completed run's id.
fn answered_yes(sb: &Sandbox, entry: &str) -> String {
    let (code, out, err) = run(sb, &["run", entry, "--json"], &[]);
    assert_eq!(code, 3, "suspended on the question: {out}{err}");
    let id = run_id(&out, &err);
    let answer = ["resume", &id, "--step", "approve", "--value", "\"yes\""];
    let (code, out, err) = run(sb, &answer, &[]);
    assert_eq!(code, 0, "{out}{err}");
    id
}

/// Forks completed run `parent` at `approve` with `"no"`: the fork completes with approved
/// `"no"`, both verify, the fork replays to the same bytes twice, the parent's files are
/// unchanged, and `diff` names the step where they part.
fn forked_with_no(sb: &Sandbox, parent: &str) {
    let parent_dir = sb.log(".oracle", parent).parent().unwrap().to_path_buf();
    let before = snapshot(&parent_dir);
    let fork = [
        "fork", parent, "--step", "approve", "--value", "\"no\"", "--json",
    ];
    let (code, out, err) = run(sb, &fork, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let child = run_id(&out, &err);
    assert_ne!(child, parent);
    assert!(
        child.starts_with("triage-"),
        "named as `oracle run` names it: {child}"
    );
    let (status, _) = finished(sb, &child);
    assert_eq!(status, RunStatus::Completed);
    let log = std::fs::read_to_string(sb.log(".oracle", &child)).unwrap();
    assert!(log.contains(r#""approved":"no""#), "{log}");
    let child_dir = sb.log(".oracle", &child).parent().unwrap().to_path_buf();
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(child_dir.join("agent.json")).unwrap())
            .unwrap();
    let parent_record: Value =
        serde_json::from_str(&std::fs::read_to_string(parent_dir.join("agent.json")).unwrap())
            .unwrap();
    assert_eq!(record["command"], parent_record["command"]);
    assert_ne!(
        record["seal"], parent_record["seal"],
        "sealed for the fork's id"
    );
    for id in [parent, child.as_str()] {
        let (code, out, err) = run(sb, &["verify", id], &[]);
        assert_eq!(code, 0, "{id}: {out}{err}");
    }
    let (code, out, err) = run(sb, &["verify", &child, "--parent", parent], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, first, err) = run(sb, &["replay", &child, "--json"], &[]);
    assert_eq!(code, 0, "{first}{err}");
    let (code, again, err) = run(sb, &["replay", &child, "--json"], &[]);
    assert_eq!((code, &again), (0, &first), "{err}");
    assert_eq!(
        std::fs::read_to_string(sb.log(".oracle", &child)).unwrap(),
        log
    );
    assert_eq!(snapshot(&parent_dir), before, "the parent is unchanged");

    let (code, d) = sb.json(&["diff", parent, &child, "--json"]);
    assert_eq!(code, 1, "{d}");
    assert_eq!(d["fork"]["step"], "approve", "{d}");
    assert_eq!(d["fork"]["given"], "no", "{d}");
    let (_, text, err) = sb.oracle(&["diff", parent, &child]);
    assert!(text.contains("step `approve` was given"), "{text}{err}");
}

#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn a_python_code_run_forked_at_its_question_with_another_answer_completes_and_replays() {
    let sb = Sandbox::new();
    sb.write("triage.py", TRIAGE);
    let parent = answered_yes(&sb, "triage.py");
    forked_with_no(&sb, &parent);
}

#[cfg_attr(not(oracle_node), ignore = "needs node on PATH; .ci/run installs it")]
#[test]
fn a_typescript_code_run_forked_at_its_question_with_another_answer_completes_and_replays() {
    let sb = node_sandbox();
    sb.write("agent.mjs", TRIAGE_MJS);
    sb.write("lib/words.mjs", WORDS_MJS);
    let parent = answered_yes(&sb, "agent.mjs");
    forked_with_no(&sb, &parent);
}

/// A fork starts the parent's command: one whose `agent.json` was edited is refused with
/// resume's code (`binding_unsealed`, exit 2), nothing started and no fork left behind; one
/// given a plan instead is refused (`upgrade_refused`, exit 4).
#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn forking_a_code_run_whose_agent_json_was_edited_is_refused() {
    let sb = Sandbox::new();
    sb.write("triage.py", TRIAGE);
    let parent = answered_yes(&sb, "triage.py");
    // A plan in place of the program is refused as any plan that does not re-derive the run.
    let plan = root().join("fixtures/plans/escalation.plan");
    let plan = plan.display().to_string();
    let with_plan = [
        "fork", &parent, "--step", "approve", "--plan", &plan, "--json",
    ];
    let (code, out, err) = run(&sb, &with_plan, &[]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(out.contains("upgrade_refused"), "{out}{err}");
    let record_path = sb
        .log(".oracle", &parent)
        .parent()
        .unwrap()
        .join("agent.json");
    let mut record: Value =
        serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
    record["command"] = serde_json::json!(["sh", "-c", "touch pwned"]);
    std::fs::write(&record_path, record.to_string()).unwrap();
    let runs = std::fs::read_dir(sb.path().join(".oracle/runs"))
        .unwrap()
        .count();
    let fork = [
        "fork", &parent, "--step", "approve", "--value", "\"no\"", "--json",
    ];
    let (code, out, err) = run(&sb, &fork, &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("binding_unsealed"),
        "{out}{err}"
    );
    assert!(!sb.path().join("pwned").exists(), "the edited command ran");
    let after = std::fs::read_dir(sb.path().join(".oracle/runs"))
        .unwrap()
        .count();
    assert_eq!(after, runs, "no fork is left behind");
}

/// The runs under the sandbox's home.
fn runs(sb: &Sandbox) -> usize {
    std::fs::read_dir(sb.path().join(".oracle/runs")).map_or(0, |d| d.count())
}

/// `oracle serve --agent triage=triage.py` starts the agent a request names (`POST
/// /api/v1/runs` with `"agent"`): it suspends on its question, is answered through the API,
/// completes, verifies and replays, and is forked through the API with another answer. A name
/// the server was not told about is 404
/// `unknown_agent`, and a body with both a plan and an agent 400 `usage`, nothing created.
#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn serve_starts_a_code_agent_it_was_told_about_by_name_and_refuses_any_other() {
    let sb = Sandbox::new();
    sb.write("triage.py", TRIAGE);
    let (code, token, err) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    let token = token.trim();
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--root",
        ".",
        "--agent",
        "triage=triage.py",
    ];
    let mut serve = common::command_in(sb.path(), &args);
    serve.env("PYTHONPATH", root().join("sdk/python/src"));
    let (_server, base) = web::listening(serve);

    let before = runs(&sb);
    for (body, status, code) in [
        (serde_json::json!({"agent": "rm"}), 404, "unknown_agent"),
        (
            serde_json::json!({"agent": "triage", "plan": "x"}),
            400,
            "usage",
        ),
    ] {
        let (got, v) = api(&base, "POST", "/api/v1/runs", token, Some(&body));
        assert_eq!(got, status, "{v}");
        assert_eq!(v["error"]["code"], code, "{v}");
        assert_eq!(runs(&sb), before, "nothing created: {v}");
    }
    let (_, v) = api(
        &base,
        "POST",
        "/api/v1/runs",
        token,
        Some(&serde_json::json!({"agent": "rm"})),
    );
    assert_eq!(v["error"]["known"], serde_json::json!(["triage"]), "{v}");

    let body =
        serde_json::json!({"agent": "triage", "inputs": {"path": "fixtures/data/notes.txt"}});
    let (status, v) = api(&base, "POST", "/api/v1/runs", token, Some(&body));
    assert_eq!(status, 201, "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    assert!(id.starts_with("triage-"), "{v}");
    let path = format!("/api/v1/runs/{id}");
    web::wait_until(&format!("{id} to suspend"), || {
        api(&base, "GET", &path, token, None).1["status"] == "suspended"
    });
    answer_through_the_api(&sb, &base, token, &id);
    let (status, _) = finished(&sb, &id);
    assert_eq!(status, RunStatus::Completed);

    // The API's fork of the code run goes through the same host call as `oracle fork`.
    let body = serde_json::json!({"step": "approve", "value": "no"});
    let (status, v) = api(&base, "POST", &format!("{path}/fork"), token, Some(&body));
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    let child = v["run"].as_str().unwrap().to_owned();
    let log = std::fs::read_to_string(sb.log(".oracle", &child)).unwrap();
    assert!(log.contains(r#""approved":"no""#), "{log}");
    let (code, out, err) = sb.oracle(&["verify", &child, "--parent", &id]);
    assert_eq!(code, 0, "{out}{err}");
}

/// `oracle export` of a code run writes its record beside the log (`FILE.agent.json`, without
/// the home's seal); `oracle import` keeps it unsealed, so another home starts nothing from a
/// command whoever wrote the file chose (`binding_unsealed`, naming `--trust-commands`), until
/// `oracle import --trust-commands` seals it: then the run replays there. A record of another
/// program is refused, nothing created.
#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn an_imported_code_run_runs_its_command_only_when_told_to_trust_it() {
    let sb = Sandbox::new();
    sb.write("triage.py", TRIAGE);
    let id = answered_yes(&sb, "triage.py");
    let out = sb.path().join("bundle.jsonl");
    let out_text = out.display().to_string();
    let (code, v) = sb.json(&["export", &id, "--out", &out_text, "--json"]);
    assert_eq!(code, 0, "{v}");
    let record_path = sb.path().join("bundle.jsonl.agent.json");
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
    assert_eq!(
        record["command"],
        serde_json::json!(["python3", "triage.py"])
    );
    assert_eq!(
        record["seal"], "",
        "a seal is worth nothing outside its home"
    );

    let other = Sandbox::new();
    other.write("triage.py", TRIAGE);
    let mut hostile = record.clone();
    hostile["command"] = serde_json::json!(["sh", "-c", "touch pwned"]);
    std::fs::write(&record_path, hostile.to_string()).unwrap();
    let (code, v) = other.json(&["import", &out_text, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["trusted"], false, "{v}");
    let imported = v["run"].as_str().unwrap().to_owned();
    let (code, out, err) = run(&other, &["verify", &imported], &[]);
    assert_eq!(code, 0, "an imported run is read as any: {out}{err}");
    for args in [
        &["replay", imported.as_str(), "--json"][..],
        &[
            "fork",
            imported.as_str(),
            "--step",
            "approve",
            "--value",
            "\"no\"",
            "--json",
        ],
    ] {
        let (code, out, err) = run(&other, args, &[]);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(
            format!("{out}{err}").contains("binding_unsealed"),
            "{out}{err}"
        );
        let said = format!("{out}{err}");
        assert!(said.contains("--trust-commands"), "how to trust it: {said}");
        assert!(
            !other.path().join("pwned").exists(),
            "{args:?} ran the command"
        );
    }

    std::fs::write(&record_path, record.to_string()).unwrap();
    let (code, v) = other.json(&["import", &out_text, "--trust-commands", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["trusted"], true, "{v}");
    let trusted = v["run"].as_str().unwrap().to_owned();
    let (code, out, err) = run(&other, &["replay", &trusted], &[]);
    assert_eq!(code, 0, "{out}{err}");

    let mut stranger = record.clone();
    stranger["program_hash"] = serde_json::json!("00".repeat(32));
    std::fs::write(&record_path, stranger.to_string()).unwrap();
    let runs = std::fs::read_dir(other.path().join(".oracle/runs"))
        .unwrap()
        .count();
    let (code, out, err) = other.oracle(&["import", &out_text, "--trust-commands"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("program hash"), "{err}");
    let after = std::fs::read_dir(other.path().join(".oracle/runs"))
        .unwrap()
        .count();
    assert_eq!(after, runs, "nothing created");
}
