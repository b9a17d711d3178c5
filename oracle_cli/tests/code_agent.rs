//! Code agents end to end (docs/AGENTS.md): `oracle run triage.py` runs a Python agent written
//! with `oracle_agent` (found through `PYTHONPATH`, no install), which suspends on `ctx.ask`, is
//! answered with `oracle resume`, completes, verifies and replays to the same bytes; an
//! ungranted call is a recorded refusal; a crash, a hang past `ORACLE_AGENT_DECIDE_MS` and a
//! malformed line each end the run with their named failure; `oracle cancel` ends a suspended
//! one; `ctx.chat` calls the model bound with `--model` (the in-repository stub), and a replay
//! needs no model. `oracle run agent.mjs` runs a TypeScript SDK agent (`sdk/typescript`, found
//! through a `node_modules` link, no install) through the same life; a Python run suspended on a
//! question, and a TypeScript one, are answered through `oracle serve`'s API and complete.

use crate::common;
use crate::web;

use std::process::Command;

use common::{Sandbox, outcome, root};
use oracle_core::Payload;
use oracle_core::payload::RunStatus;
use serde_json::Value;

pub(crate) const TRIAGE: &str = r#"
from oracle_agent import agent

@agent(name="triage", version=1, grants=["fs:read:fixtures/data/**"])
def triage(ctx, path: str = "fixtures/data/notes.txt"):
    text = ctx.call("fs.read", path=path, step="read")["text"]
    words = ctx.call("text.count", text=text)["words"]
    ok = ctx.ask("send this reply?", schema={"type": "string"}, step="approve")
    return {"words": words, "approved": ok}

if __name__ == "__main__":
    triage.main()
"#;

/// An agent that reads its data, then does what `BODY` says (one indented line).
fn misbehaving(body: &str) -> String {
    format!(
        r#"
import os, sys, time
from oracle_agent import agent

@agent(name="bad", version=1, grants=["fs:read:fixtures/data/**"])
def bad(ctx):
    ctx.call("text.count", text="one two")
    {body}
    return "unreachable"

if __name__ == "__main__":
    bad.main()
"#
    )
}

pub(crate) fn python(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = sb.command(args);
    cmd.env("PYTHONPATH", root().join("sdk/python/src"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

pub(crate) fn run(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    outcome(python(sb, args, env).output().unwrap())
}

/// The run a `--json` start names.
pub(crate) fn run_id(out: &str, err: &str) -> String {
    let line = out.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line).unwrap_or_else(|_| panic!("{out}{err}"));
    v["run"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_owned()
}

pub(crate) fn finished(sb: &Sandbox, run: &str) -> (RunStatus, String) {
    let events = sb.events(".oracle", run);
    match events.last().unwrap().typed().unwrap() {
        Payload::RunFinished(f) => (f.status, f.reason),
        other => panic!("last event: {other:?}"),
    }
}

#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn a_python_agent_suspends_is_answered_completes_verifies_and_replays() {
    let sb = Sandbox::new();
    sb.write("triage.py", TRIAGE);
    let (code, out, err) = run(&sb, &["run", "triage.py", "--json"], &[]);
    assert_eq!(code, 3, "suspended on the question: {out}{err}");
    let id = run_id(&out, &err);
    let answer = ["resume", &id, "--step", "approve", "--value", "\"yes\""];
    let (code, out, err) = run(&sb, &answer, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (status, _) = finished(&sb, &id);
    assert_eq!(status, RunStatus::Completed);
    let log = std::fs::read_to_string(sb.log(".oracle", &id)).unwrap();
    assert!(log.contains(r#""approved":"yes""#), "{log}");

    let (code, out, err) = run(&sb, &["verify", &id], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, first, err) = run(&sb, &["replay", &id, "--json"], &[]);
    assert_eq!(code, 0, "{first}{err}");
    let (code, again, err) = run(&sb, &["replay", &id, "--json"], &[]);
    assert_eq!(code, 0, "{again}{err}");
    assert_eq!(first, again, "a replay gives the same bytes");
    assert_eq!(
        std::fs::read_to_string(sb.log(".oracle", &id)).unwrap(),
        log
    );

    // Changed files re-derive first: a comment changes the program hash, not a decision, so
    // the replay goes on; a changed step is refused (exit 4) naming the agent's source line.
    sb.write("triage.py", &format!("# a comment\n{TRIAGE}"));
    let (code, out, err) = run(&sb, &["replay", &id], &[]);
    assert_eq!(code, 0, "{out}{err}");
    sb.write(
        "triage.py",
        &TRIAGE.replace(r#"step="read""#, r#"step="read-it""#),
    );
    let (code, out, err) = run(&sb, &["replay", &id], &[]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains("triage.py:"),
        "the source line is named: {err}"
    );
    assert!(err.contains("step `read"), "the step is named: {err}");
}

/// A resume with the agent's files changed re-derives first: a changed decision is refused at
/// its event with the agent's source line (exit 4) and the log is untouched; the same
/// decisions from changed files are recorded as `plan_upgraded` (from the hash the run started
/// with to the new one) before the run goes on, and the upgraded run verifies and replays.
#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn a_resume_with_changed_files_records_the_upgrade_or_refuses_the_changed_decision() {
    let sb = Sandbox::new();
    sb.write("triage.py", TRIAGE);
    let (code, out, err) = run(&sb, &["run", "triage.py", "--json"], &[]);
    assert_eq!(code, 3, "{out}{err}");
    let id = run_id(&out, &err);
    let log = sb.log(".oracle", &id);
    let before = std::fs::read_to_string(&log).unwrap();
    let answer = ["resume", &id, "--step", "approve", "--value", "\"yes\""];

    sb.write(
        "triage.py",
        &TRIAGE.replace(r#"step="read""#, r#"step="read-it""#),
    );
    let (code, out, err) = run(&sb, &answer, &[]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains("triage.py:"),
        "the source line is named: {err}"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), before);

    sb.write("triage.py", &format!("# a comment\n{TRIAGE}"));
    let (code, out, err) = run(&sb, &answer, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(finished(&sb, &id).0, RunStatus::Completed);
    let events = sb.events(".oracle", &id);
    let Payload::RunStarted(started) = events[0].typed().unwrap() else {
        panic!("the first event starts the run")
    };
    let upgrades: Vec<_> = events
        .iter()
        .filter_map(|e| match e.typed() {
            Ok(Payload::PlanUpgraded(u)) => Some(u),
            _ => None,
        })
        .collect();
    assert_eq!(upgrades.len(), 1, "one upgrade recorded");
    assert_eq!(upgrades[0].from, started.program_hash);
    assert_ne!(upgrades[0].to, started.program_hash);
    assert_eq!(upgrades[0].program, started.program);
    for args in [["verify", id.as_str()], ["replay", id.as_str()]] {
        let (code, out, err) = run(&sb, &args, &[]);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
}

/// `oracle run triage.py --key K`: a second start under the key with the same program, inputs
/// and seed starts nothing and names the first run (its exit status that run's); another input
/// under the key is `key_conflict`, exit 2; only one run exists.
#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn a_code_run_started_twice_under_one_key_is_one_run() {
    let sb = Sandbox::new();
    sb.write("triage.py", TRIAGE);
    let start = ["run", "triage.py", "--key", "ticket-7", "--json"];
    let (code, out, err) = run(&sb, &start, &[]);
    assert_eq!(code, 3, "{out}{err}");
    let id = run_id(&out, &err);
    let (code, out, err) = run(&sb, &start, &[]);
    assert_eq!(code, 3, "the first run's status: {out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["run"].as_str(), v["existing"].as_bool()),
        (Some(id.as_str()), Some(true)),
        "{v}"
    );
    let other = [&start[..], &["--input", "path=fixtures/data/other.txt"]].concat();
    let (code, out, err) = run(&sb, &other, &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(format!("{out}{err}").contains("key_conflict"), "{out}{err}");
    let runs = std::fs::read_dir(sb.path().join(".oracle/runs"))
        .unwrap()
        .count();
    assert_eq!(runs, 1, "one run under the key");
}

/// `agent.json` names the command every resume, answer, cancel and replay starts, and the log
/// does not hash it: an edited command is refused before anything is started (409
/// `binding_unsealed`, exit 2), and the log is untouched. Before the seal, the edited command
/// ran, and only then did the program-hash check refuse the run.
#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn an_edited_agent_command_is_refused_before_anything_starts() {
    let sb = Sandbox::new();
    sb.write("triage.py", TRIAGE);
    let (code, out, err) = run(&sb, &["run", "triage.py", "--json"], &[]);
    assert_eq!(code, 3, "suspended on the question: {out}{err}");
    let id = run_id(&out, &err);
    let log_path = sb.log(".oracle", &id);
    let record_path = log_path.parent().unwrap().join("agent.json");
    let mut record: Value =
        serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
    record["command"] = serde_json::json!(["sh", "-c", "touch pwned"]);
    std::fs::write(&record_path, record.to_string()).unwrap();
    let log = std::fs::read(&log_path).unwrap();
    let answer = [
        "resume", &id, "--step", "approve", "--value", "\"yes\"", "--json",
    ];
    for args in [
        &answer[..],
        &["replay", &id, "--json"],
        &["cancel", &id, "--json"],
    ] {
        let (code, out, err) = run(&sb, args, &[]);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(
            format!("{out}{err}").contains("binding_unsealed"),
            "{args:?}: {out}{err}"
        );
        assert!(
            !sb.path().join("pwned").exists(),
            "{args:?} ran the edited command"
        );
        assert_eq!(
            std::fs::read(&log_path).unwrap(),
            log,
            "{args:?} wrote to the log"
        );
    }
}

#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn an_ungranted_call_is_a_recorded_refusal() {
    let sb = Sandbox::new();
    sb.write(
        "bad.py",
        &misbehaving(r#"ctx.call("fs.read", path="secret.txt")"#),
    );
    let (code, out, err) = run(&sb, &["run", "bad.py", "--json"], &[]);
    assert_eq!(code, 1, "{out}{err}");
    let id = run_id(&out, &err);
    let (status, reason) = finished(&sb, &id);
    assert_eq!(status, RunStatus::Failed);
    assert!(reason.starts_with("agent_failed: CallDenied"), "{reason}");
    let log = std::fs::read_to_string(sb.log(".oracle", &id)).unwrap();
    assert!(
        log.contains("fs:read:secret.txt"),
        "the refusal is recorded: {log}"
    );
}

#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn a_crash_a_hang_and_a_malformed_line_are_named_failures() {
    let cases = [
        ("os._exit(3)", "agent_crashed"),
        ("time.sleep(30)", "agent_hung"),
        (
            r#"sys.__stdout__.write("junk\n"); sys.__stdout__.flush(); time.sleep(30)"#,
            "agent_malformed",
        ),
    ];
    for (body, code_word) in cases {
        let sb = Sandbox::new();
        sb.write("bad.py", &misbehaving(body));
        let env = [("ORACLE_AGENT_DECIDE_MS", "1500")];
        let (code, out, err) = run(&sb, &["run", "bad.py", "--json"], &env);
        assert_eq!(code, 1, "{body}: {out}{err}");
        let id = run_id(&out, &err);
        let (status, reason) = finished(&sb, &id);
        assert_eq!(status, RunStatus::Failed);
        assert!(reason.starts_with(code_word), "{body}: {reason}");
        let (code, out, err) = run(&sb, &["verify", &id], &[]);
        assert_eq!(code, 0, "{out}{err}");
    }
}

#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn a_suspended_code_run_is_cancelled_and_still_verifies_and_replays() {
    let sb = Sandbox::new();
    sb.write("triage.py", TRIAGE);
    let (code, out, err) = run(&sb, &["run", "triage.py", "--json"], &[]);
    assert_eq!(code, 3, "{out}{err}");
    let id = run_id(&out, &err);
    let (code, out, err) = run(&sb, &["cancel", &id, "--reason", "not needed"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (status, reason) = finished(&sb, &id);
    assert_eq!(
        (status, reason.as_str()),
        (RunStatus::Cancelled, "not needed")
    );
    let (code, out, err) = run(&sb, &["verify", &id], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run(&sb, &["replay", &id], &[]);
    assert_eq!(code, 0, "{out}{err}");
}

/// The issue's example: a file read, a model's reply and a person's approval.
const CHAT: &str = r#"
from oracle_agent import agent

@agent(name="triage", version=1, grants=["fs:read:fixtures/data/**", "llm:chat:fast"])
def triage(ctx, path: str = "fixtures/data/notes.txt"):
    text = ctx.call("fs.read", path=path, step="read")["text"]
    reply = ctx.chat("fast", [{"role": "user", "content": text}], step="classify")
    ok = ctx.ask("send this reply?", schema={"type": "string"}, step="approve")
    return {"reply": reply, "approved": ok}

if __name__ == "__main__":
    triage.main()
"#;

#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn ctx_chat_calls_the_bound_model_once_and_a_replay_needs_no_model() {
    let sb = Sandbox::new();
    sb.write("triage.py", CHAT);
    let reply = serde_json::json!({"content": "a refund, politely"});
    let stub = oracle_llm_stub::Stub::start(vec![reply]).unwrap();
    let model = format!("fast={}", stub.url());
    let (code, out, err) = run(&sb, &["run", "triage.py", "--model", &model, "--json"], &[]);
    assert_eq!(code, 3, "{out}{err}");
    let id = run_id(&out, &err);
    let answer = ["resume", &id, "--step", "approve", "--value", "\"yes\""];
    let (code, out, err) = run(&sb, &answer, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let log = std::fs::read_to_string(sb.log(".oracle", &id)).unwrap();
    assert!(log.contains(r#""reply":"a refund, politely""#), "{log}");
    drop(stub);
    let (code, out, err) = run(&sb, &["replay", &id], &[]);
    assert_eq!(code, 0, "no model is needed: {out}{err}");
}

/// The TypeScript SDK's shape of [`TRIAGE`], with a project module of its own: the program's
/// files are the entry and `lib/words.mjs`.
pub(crate) const TRIAGE_MJS: &str = r#"
import { agent } from "oracle-agent";
import { firstWord } from "./lib/words.mjs";

const triage = agent(
  { name: "triage", version: 1, grants: ["fs:read:fixtures/data/**"], inputs: { path: "string" } },
  async (ctx, { path = "fixtures/data/notes.txt" }) => {
    const { text } = await ctx.call("fs.read", { path }, { step: "read" });
    const { words } = await ctx.call("text.count", { text });
    const ok = await ctx.ask("send this reply?", { schema: { type: "string" }, step: "approve" });
    return { words, approved: ok, first: firstWord(text) };
  },
);
triage.main();
"#;

pub(crate) const WORDS_MJS: &str =
    "export const firstWord = (t) => t.split(/\\s+/).find((w) => w) ?? null;\n";

/// A sandbox whose `node_modules/oracle-agent` is this repository's `sdk/typescript`, as an
/// `npm install` of it would leave.
pub(crate) fn node_sandbox() -> Sandbox {
    let sb = Sandbox::new();
    let link = sb.path().join("node_modules/oracle-agent");
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(root().join("sdk/typescript"), &link).unwrap();
    sb
}

#[cfg_attr(not(oracle_node), ignore = "needs node on PATH; .ci/run installs it")]
#[test]
fn a_typescript_agent_suspends_is_answered_completes_verifies_and_replays() {
    let sb = node_sandbox();
    sb.write("agent.mjs", TRIAGE_MJS);
    sb.write("lib/words.mjs", WORDS_MJS);
    let (code, out, err) = sb.oracle(&["run", "agent.mjs", "--json"]);
    assert_eq!(code, 3, "suspended on the question: {out}{err}");
    let id = run_id(&out, &err);
    assert!(id.starts_with("triage-"), "{id}");
    let dir = sb.log(".oracle", &id).parent().unwrap().to_path_buf();
    let agent_json = std::fs::read_to_string(dir.join("agent.json")).unwrap();
    assert!(agent_json.contains("\"node\""), "{agent_json}");
    assert!(
        agent_json.contains("lib/words.mjs"),
        "the imported module is one of the program's files: {agent_json}"
    );
    let answer = ["resume", &id, "--step", "approve", "--value", "\"yes\""];
    let (code, out, err) = sb.oracle(&answer);
    assert_eq!(code, 0, "{out}{err}");
    let (status, _) = finished(&sb, &id);
    assert_eq!(status, RunStatus::Completed);
    let log = std::fs::read_to_string(sb.log(".oracle", &id)).unwrap();
    assert!(log.contains(r#""approved":"yes""#), "{log}");
    assert!(
        log.contains(r#""text.count#1""#),
        "the default step name: {log}"
    );

    let (code, out, err) = sb.oracle(&["verify", &id]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, first, err) = sb.oracle(&["replay", &id, "--json"]);
    assert_eq!(code, 0, "{first}{err}");
    let (code, again, err) = sb.oracle(&["replay", &id, "--json"]);
    assert_eq!(code, 0, "{again}{err}");
    assert_eq!(first, again, "a replay gives the same bytes");
    assert_eq!(
        std::fs::read_to_string(sb.log(".oracle", &id)).unwrap(),
        log
    );

    // A changed step in the imported module's caller is refused, naming the agent's line.
    sb.write(
        "agent.mjs",
        &TRIAGE_MJS.replace(r#"step: "read""#, r#"step: "read-it""#),
    );
    let (code, out, err) = sb.oracle(&["replay", &id]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains("agent.mjs:"),
        "the source line is named: {err}"
    );
}

/// One API request with `token`: status and body.
pub(crate) fn api(
    base: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    web::call(base, method, path, token, body)
}

/// Answers run `id`'s `approve` through the API with `"resume": true` and waits for it to
/// complete; then it verifies and replays.
pub(crate) fn answer_through_the_api(sb: &Sandbox, base: &str, token: &str, id: &str) {
    let path = format!("/api/v1/runs/{id}");
    let (status, v) = api(base, "GET", &path, token, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["waiting_on"]["step"], "approve", "{v}");
    let body = serde_json::json!({"step": "approve", "value": "yes", "resume": true});
    let (status, v) = api(base, "POST", &format!("{path}/answer"), token, Some(&body));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["resume"]["started"], true, "{v}");
    web::wait_until(&format!("{id} to complete"), || {
        api(base, "GET", &path, token, None).1["status"] == "completed"
    });
    let log = std::fs::read_to_string(sb.log(".oracle", id)).unwrap();
    assert!(log.contains(r#""approved":"yes""#), "{log}");
    assert!(
        log.contains(r#""by":"alice""#),
        "the answer names its token: {log}"
    );
    let (code, out, err) = sb.oracle(&["verify", id]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run(sb, &["replay", id], &[]);
    assert_eq!(code, 0, "{out}{err}");
}

#[cfg_attr(
    not(all(oracle_python, oracle_node)),
    ignore = "needs python3 and node on PATH; .ci/run installs them"
)]
#[test]
fn python_and_typescript_code_runs_are_answered_through_the_api_and_complete() {
    let sb = node_sandbox();
    sb.write("triage.py", TRIAGE);
    sb.write("agent.mjs", TRIAGE_MJS);
    sb.write("lib/words.mjs", WORDS_MJS);
    let mut ids = Vec::new();
    for entry in ["triage.py", "agent.mjs"] {
        let (code, out, err) = run(&sb, &["run", entry, "--json"], &[]);
        assert_eq!(code, 3, "{entry}: {out}{err}");
        ids.push(run_id(&out, &err));
    }
    let (code, token, err) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    // The server re-derives a run in its own process: it needs the Python SDK on its
    // PYTHONPATH (node finds the TypeScript one in the sandbox's node_modules).
    let mut serve = common::command_in(sb.path(), &["serve", "--listen", "127.0.0.1:0"]);
    serve.env("PYTHONPATH", root().join("sdk/python/src"));
    let (_server, base) = web::listening(serve);
    for id in &ids {
        answer_through_the_api(&sb, &base, token.trim(), id);
    }
}

const NAP: &str = r#"
from oracle_agent import agent

@agent(name="nap", version=1)
def nap(ctx):
    slept = ctx.sleep("1s", step="nap")
    return {"late_ms": slept["fired_ms"] - slept["due_ms"] >= 0}

if __name__ == "__main__":
    nap.main()
"#;

/// A code run that sleeps is on `oracle serve`'s timer wheel like a plan run that does: the
/// start writes its timer entry, and the server wakes it when due, with no one resuming it.
#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn a_sleeping_code_run_is_woken_by_the_servers_timer_wheel() {
    let sb = Sandbox::new();
    sb.write("nap.py", NAP);
    let (code, out, err) = run(&sb, &["run", "nap.py", "--json"], &[]);
    assert_eq!(code, 3, "{out}{err}");
    let id = run_id(&out, &err);
    let timers = std::fs::read_dir(sb.path().join(".oracle/timers"))
        .unwrap()
        .count();
    assert_eq!(timers, 1, "the start wrote the run's timer entry");
    let mut serve = common::command_in(sb.path(), &["serve", "--listen", "127.0.0.1:0"]);
    serve.env("PYTHONPATH", root().join("sdk/python/src"));
    let (_server, _base) = web::listening(serve);
    let log = sb.log(".oracle", &id);
    web::wait_until(&format!("{id} to be woken"), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("run_finished"))
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("timer_fired") && text.contains(r#""late_ms":true"#),
        "{text}"
    );
    let (code, out, err) = sb.oracle(&["verify", &id]);
    assert_eq!(code, 0, "{out}{err}");
}
