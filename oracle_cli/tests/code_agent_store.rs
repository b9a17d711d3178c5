//! Code agents over a PostgreSQL store (docs/STORE.md, "Code agents"), end to end with the
//! real binary against a throwaway cluster: `oracle submit triage.py --store` queues a Python
//! agent under its name and program hash; a worker told about it (`--agent triage=triage.py`)
//! starts it, it suspends on `ctx.ask`, is answered with `oracle resume --store` and completes,
//! and the store's run and its export verify, byte for byte the same run's log in a file home.
//! A worker not told about the agent, and one whose program is not the one submitted, leave
//! the run for one that is. A worker SIGKILLed (with its agent's process) mid-run is taken
//! over by another, which finishes the run from its last commit with no event lost or
//! duplicated. A cancel waits for a worker told about the agent; an answer through `oracle
//! serve --store` is checked without the program, and `oracle serve --store --agent` submits a
//! named agent's run for such a worker. Skips loudly where PostgreSQL or python3 is absent.

use crate::common;

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{outcome, root};
use oracle_core::Payload;
use serde_json::Value;

static DB: AtomicU64 = AtomicU64::new(0);

const TRIAGE: &str = r#"
from oracle_agent import agent

@agent(name="triage", version=1, grants=["fs:read:data/**"])
def triage(ctx, path: str = "data/notes.txt"):
    text = ctx.call("fs.read", path=path, step="read")["text"]
    words = ctx.call("text.count", text=text)["words"]
    ok = ctx.ask("send this reply?", schema={"type": "string"}, step="approve")
    return {"words": words, "approved": ok}

if __name__ == "__main__":
    triage.main()
"#;

/// Two writes, each followed by two seconds of thought (well under the decision limit): a
/// kill lands in the middle of the run.
const SLOW: &str = r#"
import time
from oracle_agent import agent

@agent(name="slow", version=1, grants=["fs:write:out/**"])
def slow(ctx):
    ctx.call("fs.write", path="out/first.txt", content="first", step="first")
    time.sleep(2)
    ctx.call("fs.write", path="out/second.txt", content="second", step="second")
    time.sleep(2)
    words = ctx.call("text.count", text="one two three", step="count")["words"]
    return {"words": words}

if __name__ == "__main__":
    slow.main()
"#;

/// [`SLOW`] in TypeScript (the `oracle-agent` package, through a `node_modules` link).
const SLOW_MJS: &str = r#"
import { agent } from "oracle-agent";

const think = () => new Promise((done) => setTimeout(done, 2000));

const slow = agent({ name: "slow", grants: ["fs:write:out/**"] }, async (ctx) => {
  await ctx.call("fs.write", { path: "out/first.txt", content: "first" }, { step: "first" });
  await think();
  await ctx.call("fs.write", { path: "out/second.txt", content: "second" }, { step: "second" });
  await think();
  const { words } = await ctx.call("text.count", { text: "one two three" }, { step: "count" });
  return { words };
});
slow.main();
"#;

/// A fresh database with the schema, or `None` (skip) without PostgreSQL.
fn store_url() -> Option<String> {
    let cluster = oracle_pg::cluster::shared()?;
    let n = DB.fetch_add(1, Ordering::Relaxed);
    let url = cluster
        .database(&format!("code_{}_{n}", std::process::id()))
        .unwrap();
    let (code, out, err) = oracle(Path::new("."), &["store", "init", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    Some(url)
}

/// `oracle ARGS` in `dir`, the Python SDK found through `PYTHONPATH`.
fn command(dir: &Path, args: &[&str]) -> Command {
    let mut c = common::command_in(dir, args);
    c.env("PYTHONPATH", root().join("sdk/python/src"));
    c
}

fn oracle(dir: &Path, args: &[&str]) -> (i32, String, String) {
    outcome(command(dir, args).output().unwrap())
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let (code, out, err) = oracle(dir, args);
    assert_eq!(code, 0, "oracle {args:?}: {out}\n{err}");
    out
}

/// `oracle worker` on `url` in `dir` with a 1 s lease and `extra`, its log kept.
fn worker(dir: &Path, url: &str, extra: &[&str]) -> Command {
    let mut c = common::worker_command(dir, url, extra);
    c.env("PYTHONPATH", root().join("sdk/python/src"));
    c.stdout(Stdio::null());
    c
}

/// Runs a worker until nothing is left for it; its log.
fn worker_until_idle(dir: &Path, url: &str, extra: &[&str]) -> String {
    let out = worker(dir, url, &[&["--until-idle"], extra].concat())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "worker: {err}");
    err
}

/// The store's row of `run` (`oracle runs --store --json`).
fn row(dir: &Path, url: &str, run: &str) -> Value {
    let out = ok(dir, &["runs", "--store", url, "--json"]);
    out.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["run"] == run)
        .unwrap_or_else(|| panic!("no row for {run}: {out}"))
}

/// The store's run exported to a file that verifies; its events.
fn exported(dir: &Path, url: &str, run: &str) -> Vec<oracle_core::Event> {
    let out = dir.join(format!("{run}.jsonl"));
    let file = out.to_str().unwrap();
    ok(
        dir,
        &["export", run, "--out", file, "--force", "--store", url],
    );
    ok(dir, &["verify", file]);
    common::parse_events(&fs::read(out).unwrap())
}

/// A working directory holding the agent and its data.
fn project(dir: &Path) {
    fs::create_dir_all(dir.join("data")).unwrap();
    fs::write(dir.join("data/notes.txt"), "one two three four\n").unwrap();
    fs::write(dir.join("triage.py"), TRIAGE).unwrap();
    fs::write(dir.join("slow.py"), SLOW).unwrap();
    fs::write(dir.join("slow.mjs"), SLOW_MJS).unwrap();
    let link = dir.join("node_modules/oracle-agent");
    fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(root().join("sdk/typescript"), &link).unwrap();
}

/// How many `tool_called` events of `step` the log holds.
fn calls_of(events: &[oracle_core::Event], step: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e.typed(), Ok(Payload::ToolCalled(c)) if c.step == step))
        .count()
}

#[cfg_attr(
    not(all(oracle_postgres, oracle_python)),
    ignore = "needs PostgreSQL (initdb) and python3; .ci/run installs them"
)]
#[test]
fn a_python_agent_submitted_to_the_store_suspends_is_answered_and_completes() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    project(dir);
    let id = ok(dir, &["submit", "triage.py", "--store", &url]);
    let id = id.trim();
    assert_eq!(id, "triage-1");
    assert_eq!(row(dir, &url, id)["state"], "submitted");

    let log = worker_until_idle(dir, &url, &["--agent", "triage=triage.py"]);
    let r = row(dir, &url, id);
    assert_eq!(r["state"], "suspended", "{r}\n{log}");
    assert_eq!(r["waiting"]["step"], "approve", "{r}");

    // An answer for another step is refused before anything is queued, as for a plan run.
    let (code, out, err) = oracle(
        dir,
        &[
            "resume", id, "--step", "nope", "--value", "\"x\"", "--store", &url, "--json",
        ],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("wrong_step"), "{out}{err}");
    assert_eq!(row(dir, &url, id)["signals_pending"], 0);

    ok(
        dir,
        &[
            "resume", id, "--step", "approve", "--value", "\"yes\"", "--store", &url,
        ],
    );
    let log = worker_until_idle(dir, &url, &["--agent", "triage=triage.py"]);
    let r = row(dir, &url, id);
    assert_eq!(r["state"], "completed", "{r}\n{log}");
    assert_eq!(r["signals_pending"], 0, "{r}");
    ok(dir, &["verify", id, "--store", &url]);
    let events = exported(dir, &url, id);
    let last = serde_json::to_string(&events.last().unwrap().payload).unwrap();
    assert!(last.contains("completed"), "{last}");
    let all: String = events
        .iter()
        .map(|e| serde_json::to_string(&e.payload).unwrap())
        .collect();
    assert!(all.contains(r#""approved":"yes""#), "{all}");
    assert_eq!(calls_of(&events, "read"), 1);
    // A replay starts the program, and the rows hold no command: it must be named.
    let (code, out, err) = oracle(dir, &["replay", id, "--store", &url, "--json"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("--agent triage=PATH"),
        "{out}{err}"
    );
    ok(
        dir,
        &["replay", id, "--store", &url, "--agent", "triage=triage.py"],
    );

    // The same agent, inputs and answer in a file home: the same bytes.
    let home = tmp.path().join("home");
    project(&home);
    let (code, out, err) = oracle(&home, &["run", "triage.py"]);
    assert_eq!(code, 3, "{out}{err}");
    ok(
        &home,
        &[
            "resume", "triage-1", "--step", "approve", "--value", "\"yes\"",
        ],
    );
    let home_log = fs::read(home.join(".oracle/runs/triage-1/events.jsonl")).unwrap();
    assert_eq!(fs::read(dir.join(format!("{id}.jsonl"))).unwrap(), home_log);

    // The export imports into a file home as a run to read: its record names the store's
    // agent and holds no command, so there is nothing to trust and nothing is ever started.
    let file = dir.join(format!("{id}.jsonl"));
    let file = file.to_str().unwrap();
    let reader = tmp.path().join("reader");
    fs::create_dir_all(&reader).unwrap();
    let (code, out, err) = oracle(&reader, &["import", file, "--trust-commands"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("holds no command to trust"), "{err}");
    let (code, out, err) = oracle(&reader, &["import", file, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let imported = common::last_json(&["import"], &out, &err)["run"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(&reader, &["verify", &imported]);
    let (code, out, err) = oracle(&reader, &["replay", &imported]);
    assert_eq!(code, 2, "nothing is started from it: {out}{err}");
}

#[cfg_attr(
    not(all(oracle_postgres, oracle_python)),
    ignore = "needs PostgreSQL (initdb) and python3; .ci/run installs them"
)]
#[test]
fn a_worker_not_told_about_the_agent_leaves_the_run_for_one_that_is() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    project(dir);
    let id = ok(dir, &["submit", "triage.py", "--store", &url]);
    let id = id.trim();

    // No agents: the run is not this worker's to claim.
    worker_until_idle(dir, &url, &[]);
    let r = row(dir, &url, id);
    assert_eq!(r["state"], "submitted", "{r}");
    assert_eq!(r["claims"], 0, "{r}");

    // Told about `triage`, but its program there is another (its hash differs): refused,
    // `agent_changed`, the run left submitted with the reason and nothing recorded.
    fs::write(dir.join("other.py"), format!("# another version\n{TRIAGE}")).unwrap();
    let log = worker_until_idle(dir, &url, &["--agent", "triage=other.py"]);
    let r = row(dir, &url, id);
    assert_eq!(r["state"], "submitted", "{r}\n{log}");
    assert_eq!(r["events"], 0, "{r}");
    let detail = r["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("agent_changed"), "{r}\n{log}");

    // The worker with the submitted program takes it.
    worker_until_idle(dir, &url, &["--agent", "triage=triage.py"]);
    assert_eq!(row(dir, &url, id)["state"], "suspended");
}

/// The processes whose parent is `pid` (Linux `/proc`).
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: the comm may hold spaces, so read after its `)`.
        let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or_default();
        let ppid = after.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// SIGKILLs `worker` and every process it started (its agents).
fn kill_with_children(worker: &mut Child) {
    let children = children_of(worker.id());
    worker.kill().unwrap(); // SIGKILL
    for c in &children {
        let _ = Command::new("kill").args(["-9", &c.to_string()]).status();
    }
    worker.wait().unwrap();
    assert!(!children.is_empty(), "the worker was running its agent");
}

#[cfg_attr(
    not(all(oracle_postgres, oracle_python)),
    ignore = "needs PostgreSQL (initdb) and python3; .ci/run installs them"
)]
#[test]
fn a_worker_killed_mid_run_is_taken_over_and_the_code_run_completes_once() {
    taken_over_after_a_kill("slow.py");
}

/// The same for the TypeScript SDK's agent: the worker's `node` process is killed with it.
#[cfg_attr(
    not(all(oracle_postgres, oracle_node)),
    ignore = "needs PostgreSQL (initdb) and node; .ci/run installs them"
)]
#[test]
fn a_worker_killed_mid_run_of_a_typescript_agent_is_taken_over_and_it_completes_once() {
    taken_over_after_a_kill("slow.mjs");
}

/// Submits `entry` (the `slow` agent), kills worker A and its agent's process in the middle
/// of the run, and checks that worker B finishes it from the store's log, each call once.
fn taken_over_after_a_kill(entry: &str) {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    project(dir);
    let id = ok(dir, &["submit", entry, "--store", &url]);
    let id = id.trim();
    let agent = format!("slow={entry}");
    let mut a = worker(dir, &url, &["--agent", &agent, "--name", "A"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The second write has started (its intent committed first): the agent now thinks for two
    // seconds, and the worker is killed in the middle of that.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("out/second.txt").exists() {
        assert!(Instant::now() < deadline, "the second write never happened");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    kill_with_children(&mut a);
    let r = row(dir, &url, id);
    assert_eq!(r["state"], "running", "{r}");
    let held = r["events"].as_i64().unwrap();
    assert!(held > 0, "{r}");

    // Worker B claims it once A's 1 s lease has expired and finishes it from the store's log.
    std::thread::sleep(Duration::from_millis(1_500));
    let log = worker_until_idle(dir, &url, &["--agent", &agent, "--name", "B"]);
    assert!(log.contains("taken over"), "{log}");
    let r = row(dir, &url, id);
    assert_eq!(r["state"], "completed", "{r}\n{log}");
    assert_eq!(r["worker"], Value::Null);
    assert_eq!(r["claims"], 2, "{r}");
    ok(dir, &["verify", id, "--store", &url]);
    let events = exported(dir, &url, id);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64, "seqs 0 to n-1, none lost or repeated");
    }
    assert!(events.len() as i64 > held);
    for step in ["first", "second", "count"] {
        assert_eq!(calls_of(&events, step), 1, "step {step} called once");
    }
    let returned = events
        .iter()
        .filter(|e| matches!(e.typed(), Ok(Payload::ToolReturned(_))))
        .count();
    assert_eq!(returned, 3, "each call's outcome once");
    assert_eq!(
        fs::read_to_string(dir.join("out/second.txt")).unwrap(),
        "second"
    );
}

#[cfg_attr(
    not(all(oracle_postgres, oracle_python)),
    ignore = "needs PostgreSQL (initdb) and python3; .ci/run installs them"
)]
#[test]
fn a_suspended_store_code_run_is_cancelled_by_a_worker_told_about_its_agent() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    project(dir);
    let id = ok(dir, &["submit", "triage.py", "--store", &url]);
    let id = id.trim();
    worker_until_idle(dir, &url, &["--agent", "triage=triage.py"]);
    assert_eq!(row(dir, &url, id)["state"], "suspended");
    let cancel = [
        "cancel", id, "--reason", "stop", "--by", "ops", "--store", &url,
    ];
    ok(dir, &cancel);
    // Its signal waits for a worker that knows the agent: one without `--agent` leaves it.
    worker_until_idle(dir, &url, &[]);
    assert_eq!(row(dir, &url, id)["signals_pending"], 1);
    let log = worker_until_idle(dir, &url, &["--agent", "triage=triage.py"]);
    let r = row(dir, &url, id);
    assert_eq!(r["state"], "cancelled", "{r}\n{log}");
    assert_eq!(r["signals_pending"], 0, "{r}");
    ok(dir, &["verify", id, "--store", &url]);
    let events = exported(dir, &url, id);
    let last = serde_json::to_string(&events.last().unwrap().payload).unwrap();
    assert!(last.contains("cancelled"), "{last}");
}

#[cfg_attr(
    not(all(oracle_postgres, oracle_python)),
    ignore = "needs PostgreSQL (initdb) and python3; .ci/run installs them"
)]
#[test]
fn a_store_code_run_is_answered_through_a_servers_api_and_a_worker_completes_it() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    project(dir);
    let (code, out, err) = oracle(dir, &["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{out}{err}");
    let token = out.lines().next().unwrap().trim().to_owned();
    let id = ok(dir, &["submit", "triage.py", "--store", &url]);
    let id = id.trim();
    let _worker = crate::web::Killed(
        worker(dir, &url, &["--agent", "triage=triage.py"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The server starts no program: it checks the answer against the log alone.
    let (_server, base) = crate::web::serve(dir, &["--store", &url, "--root", "."]);
    let status = || {
        let (code, v) = crate::web::call(&base, "GET", &format!("/api/v1/runs/{id}"), &token, None);
        if code == 200 {
            v["status"].as_str().unwrap_or_default().to_owned()
        } else {
            String::new()
        }
    };
    crate::web::wait_until("the run to suspend", || status() == "suspended");
    let path = format!("/api/v1/runs/{id}/answer");
    let (code, v) = crate::web::call(
        &base,
        "POST",
        &path,
        &token,
        Some(&serde_json::json!({"step": "approve", "value": 42})),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (422, Some("bad_answer")),
        "{v}"
    );
    let (code, v) = crate::web::call(
        &base,
        "POST",
        &path,
        &token,
        Some(&serde_json::json!({"step": "approve", "value": "yes"})),
    );
    assert_eq!(code, 202, "{v}");
    crate::web::wait_until("the run to complete", || status() == "completed");
    ok(dir, &["verify", id, "--store", &url]);
    let events = exported(dir, &url, id);
    let all: String = events
        .iter()
        .map(|e| serde_json::to_string(&e.payload).unwrap())
        .collect();
    assert!(all.contains(r#""approved":"yes""#), "{all}");
    assert!(
        all.contains(r#""by":"alice""#),
        "the answer's sender is recorded: {all}"
    );
}

/// `oracle serve --store URL --agent triage=triage.py`: `POST /runs {"agent": "triage"}`
/// starts the program once in a scratch home to bind its inputs and submits the run (202-style
/// `submitted`, the store keeping no command); an unknown name is 404 `unknown_agent`, nothing
/// stored; a worker told about the agent drives the run to its question, the API's answer
/// completes it, and the store's run verifies.
#[cfg_attr(
    not(all(oracle_postgres, oracle_python)),
    ignore = "needs PostgreSQL (initdb) and python3; .ci/run installs them"
)]
#[test]
fn serve_over_a_store_submits_a_named_code_agent_for_a_worker_told_about_it() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    project(dir);
    let (code, out, err) = oracle(dir, &["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{out}{err}");
    let token = out.lines().next().unwrap().trim().to_owned();
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--store",
        &url,
        "--root",
        ".",
        "--agent",
        "ticket=triage.py",
    ];
    let mut serve = common::command_in(dir, &args);
    serve.env("PYTHONPATH", root().join("sdk/python/src"));
    let (_server, base) = crate::web::listening(serve);
    let start = |name: &str| {
        let body = serde_json::json!({"agent": name});
        crate::web::call(&base, "POST", "/api/v1/runs", &token, Some(&body))
    };
    let (code, v) = start("nobody");
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (404, Some("unknown_agent")),
        "{v}"
    );
    let (code, v) = start("ticket");
    assert_eq!(
        (code, v["status"].as_str()),
        (201, Some("submitted")),
        "{v}"
    );
    let id = v["run"].as_str().unwrap().to_owned();
    let rows = ok(dir, &["runs", "--store", &url, "--json"]);
    assert_eq!(
        rows.lines().count(),
        1,
        "the unknown name stored nothing: {rows}"
    );
    assert_eq!(row(dir, &url, &id)["plan"], "triage", "{rows}");

    // Stored under the program's own name (`triage`), which the worker is told about.
    let _worker = crate::web::Killed(
        worker(dir, &url, &["--agent", "triage=triage.py"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let status = || {
        let (code, v) = crate::web::call(&base, "GET", &format!("/api/v1/runs/{id}"), &token, None);
        if code == 200 {
            v["status"].as_str().unwrap_or_default().to_owned()
        } else {
            String::new()
        }
    };
    crate::web::wait_until("the run to suspend", || status() == "suspended");
    let body = serde_json::json!({"step": "approve", "value": "yes"});
    let path = format!("/api/v1/runs/{id}/answer");
    let (code, v) = crate::web::call(&base, "POST", &path, &token, Some(&body));
    assert_eq!(code, 202, "{v}");
    crate::web::wait_until("the run to complete", || status() == "completed");
    ok(dir, &["verify", &id, "--store", &url]);

    // A replay from the store is told the program, as a worker is; without it, it says so.
    let replay = ["replay", &id, "--store", &url, "--json"];
    let (code, out, err) = oracle(dir, &replay);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("--agent triage=PATH"), "{out}{err}");
    let out = ok(
        dir,
        &[&replay[..], &["--agent", "triage=triage.py"]].concat(),
    );
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["result"].as_str(), v["ending"].as_str()),
        (Some("reproduced"), Some("completed")),
        "{v}"
    );
    let (code, out, err) = oracle(dir, &["replay", &id, "--agent", "triage=triage.py"]);
    assert_eq!(code, 2, "--agent without --store is refused: {out}{err}");
}
