//! `oracle serve --store`: the API, the inbox and the beacon over a PostgreSQL store whose
//! workers drive the runs, end to end with the real binary, a throwaway cluster and (where it
//! is installed) Chromium. A run started with `POST /api/v1/runs` suspends, a person answers it
//! in the browser, a worker resumes it, and its log is byte for byte the log of the same
//! requests made to a server over a file home; bad answers are refused before anything is
//! queued, with the file home's codes; two servers announce each suspension once.
//!
//! Skips loudly where PostgreSQL is not installed (CI sets ORACLE_REQUIRE_POSTGRES); answers
//! through the API instead of a browser where Chromium is not (CI sets ORACLE_REQUIRE_BROWSER).

use crate::common;
use crate::web;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{json_in, oracle_in};
use fantoccini::Locator;
use serde_json::{Value, json};
use web::{Killed, wait_until};

static DB: AtomicU64 = AtomicU64::new(0);

/// A plan that asks a person, then goes on with the answer.
const ASK: &str = "plan ask version 1

a = text.count { text: \"release notes\" }
q = human.ask { question: \"Ship the release?\", schema: { type: \"string\" } }
  after a
b = text.count { text: \"answered\" }
  after q
";

/// A fresh database with the schema, or `None` (skip) without PostgreSQL.
fn store_url() -> Option<String> {
    let cluster = oracle_pg::cluster::shared()?;
    let n = DB.fetch_add(1, Ordering::Relaxed);
    let url = cluster
        .database(&format!("serve_{}_{n}", std::process::id()))
        .unwrap();
    let (code, out, err) = oracle_in(Path::new("."), &["store", "init", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    Some(url)
}

fn worker(dir: &Path, url: &str) -> Killed {
    Killed(
        Command::new(env!("CARGO_BIN_EXE_oracle"))
            .args(["worker", "--store", url, "--lease-ms", "2000"])
            .args(["--poll-ms", "100"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// A running `oracle serve --listen 127.0.0.1:0 ARGS` in `dir`, and its base URL.
struct Server {
    _child: Killed,
    base: String,
}

impl Server {
    fn start(dir: &Path, args: &[&str]) -> Server {
        let (child, base) = web::serve(dir, args);
        Server {
            _child: child,
            base,
        }
    }

    /// SIGTERM, then the exit status (`None` if it did not stop within ten seconds).
    fn stop(&mut self) -> Option<i32> {
        self._child.stop()
    }

    /// One request with `token`: status and the body parsed as JSON.
    fn call(&self, method: &str, path: &str, token: &str, body: Option<&Value>) -> (u16, Value) {
        web::call(&self.base, method, path, token, body)
    }

    /// The run's status as `GET /api/v1/runs/ID` says it (empty while it cannot be read).
    fn status(&self, run: &str, token: &str) -> String {
        let (code, v) = self.call("GET", &format!("/api/v1/runs/{run}"), token, None);
        if code != 200 {
            return String::new();
        }
        v["status"].as_str().unwrap_or_default().to_owned()
    }

    fn wait_status(&self, run: &str, token: &str, want: &str) {
        wait_until(&format!("run {run} to be {want}"), || {
            self.status(run, token) == want
        });
    }
}

/// A directory with a home holding token `alice`, and a working root; returns the secret.
fn side(dir: &Path) -> String {
    std::fs::create_dir_all(dir.join("root")).unwrap();
    let (code, out, err) = oracle_in(dir, &["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    out.lines().next().unwrap().trim().to_owned()
}

/// A person signs in at `base` with `secret` and answers step `q` of `run` in the inbox's form
/// with `value`; returns the message the page shows.
fn answer_in_browser(base: &str, secret: &str, run: &str, value: &str) -> Option<String> {
    let (chromium, driver) = web::browser("the browser step answers through the API instead")?;
    let (_driver, webdriver) = web::start_driver(&driver);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    Some(rt.block_on(async {
        let c = web::chromium_session(&webdriver, &chromium).await;
        c.goto(&format!("{base}/signin?next=/inbox")).await.unwrap();
        web::sign_in(&c, secret, "inbox").await;
        c.find(Locator::Id(&format!("answer-{run}-q-value")))
            .await
            .unwrap()
            .send_keys(value)
            .await
            .unwrap();
        c.find(Locator::Id(&format!("answer-{run}-q-submit")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let message = c
            .wait()
            .for_element(Locator::Id("message"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let _ = c.close().await;
        message
    }))
}

fn start_body(key: &str) -> Value {
    json!({"plan": ASK, "inputs": {}, "key": key})
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_run_started_through_a_server_over_a_store_is_answered_in_the_browser_and_matches_a_file_home()
{
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (st, fh) = (tmp.path().join("store"), tmp.path().join("home"));
    let (s_token, f_token) = (side(&st), side(&fh));
    let _workers = [worker(&st, &url), worker(&st, &url)];
    let s = Server::start(&st, &["--store", &url, "--root", "root"]);
    let f = Server::start(&fh, &["--root", "root"]);

    // Started through the API on both sides; the store's is submitted for the workers.
    let (code, v) = s.call("POST", "/api/v1/runs", &s_token, Some(&start_body("k-1")));
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["status"], "submitted", "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    // Readable at once, submitted or taken by a worker already.
    let path = format!("/api/v1/runs/{id}");
    let (code, v) = s.call("GET", &path, &s_token, None);
    assert_eq!(code, 200, "{v}");
    let (code, v) = f.call("POST", "/api/v1/runs", &f_token, Some(&start_body("k-1")));
    assert_eq!(code, 201, "{v}");
    let fid = v["run"].as_str().unwrap().to_owned();
    s.wait_status(&id, &s_token, "suspended");
    f.wait_status(&fid, &f_token, "suspended");

    // The same key: the same run; with another plan: refused, naming the difference.
    let (code, v) = s.call("POST", "/api/v1/runs", &s_token, Some(&start_body("k-1")));
    assert_eq!(
        (code, v["run"].as_str(), v["existing"].as_bool()),
        (200, Some(id.as_str()), Some(true)),
        "{v}"
    );
    let other = json!({"plan": ASK.replace("release notes", "other notes"), "key": "k-1"});
    let (code, v) = s.call("POST", "/api/v1/runs", &s_token, Some(&other));
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (409, Some("key_conflict")),
        "{v}"
    );

    // Bad answers are refused before anything is queued, as a file home refuses them.
    for bad in [
        json!({"step": "nope", "value": "ship"}),
        json!({"step": "q", "value": 42}),
    ] {
        let (sc, sv) = s.call(
            "POST",
            &format!("/api/v1/runs/{id}/answer"),
            &s_token,
            Some(&bad),
        );
        let (fc, fv) = f.call(
            "POST",
            &format!("/api/v1/runs/{fid}/answer"),
            &f_token,
            Some(&bad),
        );
        assert_eq!(
            (sc, &sv["error"]["code"]),
            (fc, &fv["error"]["code"]),
            "{sv}\n{fv}"
        );
        assert!(sc >= 400 && sv["error"]["code"].is_string(), "{sv}");
        // The command line over the store refuses it with the same code, queueing nothing
        // (issue 53: it used to queue it and say "sent").
        let value = bad["value"].to_string();
        let step = bad["step"].as_str().unwrap();
        let (cc, cv) = json_in(
            &st,
            &[
                "resume", &id, "--step", step, "--value", &value, "--store", &url, "--json",
            ],
        );
        assert_eq!(cc, 2, "{cv}");
        assert_eq!(cv["error"]["code"], sv["error"]["code"], "{cv}\n{sv}");
    }
    let (code, out, err) = oracle_in(&st, &["runs", "--store", &url, "--json"]);
    assert_eq!(code, 0, "{err}");
    let row: Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["run"] == id.as_str())
        .unwrap();
    assert_eq!(
        row["signals_pending"], 0,
        "nothing queued for a refused answer: {row}"
    );

    // The inbox over the store shows the question; a person answers it there.
    let (_, inbox) = s.call("GET", "/api/v1/inbox", &s_token, None);
    assert!(inbox.to_string().contains(&id), "{inbox}");
    match answer_in_browser(&s.base, &s_token, &id, "ship") {
        Some(message) => {
            assert!(message.contains("checked and queued"), "{message}");
            assert!(message.contains("by alice"), "{message}");
        }
        None => {
            let body = json!({"step": "q", "value": "ship"});
            let (code, v) = s.call(
                "POST",
                &format!("/api/v1/runs/{id}/answer"),
                &s_token,
                Some(&body),
            );
            assert_eq!(code, 202, "{v}");
        }
    }
    let body = json!({"step": "q", "value": "ship", "resume": true});
    let (code, v) = f.call(
        "POST",
        &format!("/api/v1/runs/{fid}/answer"),
        &f_token,
        Some(&body),
    );
    assert_eq!(code, 200, "{v}");
    s.wait_status(&id, &s_token, "completed");
    f.wait_status(&fid, &f_token, "completed");

    // The store's run, exported, is the file home's log byte for byte.
    let out = st.join("exported.jsonl");
    let (code, v) = json_in(
        &st,
        &[
            "export",
            &id,
            "--out",
            out.to_str().unwrap(),
            "--store",
            &url,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{v}");
    let home_log = std::fs::read(fh.join(format!(".oracle/runs/{fid}/events.jsonl"))).unwrap();
    assert_eq!(
        std::fs::read(&out).unwrap(),
        home_log,
        "the store's run differs from the file home's"
    );

    // A second run, cancelled while it waits: checked, queued, recorded by a worker.
    let (code, v) = s.call("POST", "/api/v1/runs", &s_token, Some(&start_body("k-2")));
    assert_eq!(code, 201, "{v}");
    let second = v["run"].as_str().unwrap().to_owned();
    s.wait_status(&second, &s_token, "suspended");
    let body = json!({"reason": "not needed"});
    let (code, v) = s.call(
        "POST",
        &format!("/api/v1/runs/{second}/cancel"),
        &s_token,
        Some(&body),
    );
    assert_eq!(
        (code, v["status"].as_str()),
        (202, Some("cancel_queued")),
        "{v}"
    );
    s.wait_status(&second, &s_token, "cancelled");
    let (code, out, err) = oracle_in(&st, &["runs", "--status", "cancelled", "--store", &url]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&second), "{out}");
    // Forks are a file home's for now: refused, nothing written.
    let at = json!({"at": 1});
    let (code, v) = s.call(
        "POST",
        &format!("/api/v1/runs/{id}/fork"),
        &s_token,
        Some(&at),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (403, Some("not_allowed")),
        "{v}"
    );
    // A cancel of a finished run is refused by the check, as in a file home.
    let (code, v) = s.call(
        "POST",
        &format!("/api/v1/runs/{second}/cancel"),
        &s_token,
        Some(&body),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (409, Some("finished")),
        "{v}"
    );
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn two_servers_over_one_store_announce_each_suspension_once() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("ask.plan"), ASK).unwrap();
    let announced = dir.join("announced.jsonl");
    let notify = dir.join("notify.sh");
    std::fs::write(
        &notify,
        format!(
            "#!/bin/sh\ncat >> {}\necho >> {}\n",
            announced.display(),
            announced.display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .args(["+x", notify.to_str().unwrap()])
        .status()
        .unwrap();
    let (a, b) = (dir.join("a"), dir.join("b"));
    for d in [&a, &b] {
        std::fs::create_dir_all(d).unwrap();
    }
    let notify = notify.to_str().unwrap();
    let mut server_a = Server::start(&a, &["--store", &url, "--notify-cmd", notify]);
    let _b = Server::start(&b, &["--store", &url, "--notify-cmd", notify]);
    let _worker = worker(dir, &url);
    for _ in 0..3 {
        let (code, out, err) = oracle_in(dir, &["submit", "ask.plan", "--store", &url]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let lines = || -> Vec<Value> {
        std::fs::read_to_string(&announced)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    wait_until("three announcements", || lines().len() >= 3);
    // Both servers saw the three suspensions; give the slower one time to announce twice.
    std::thread::sleep(Duration::from_millis(3_000));
    let got = lines();
    let ids: std::collections::BTreeSet<&str> =
        got.iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!((got.len(), ids.len()), (3, 3), "{got:?}");
    // A server over a store stops as one over a file home does.
    assert_eq!(server_a.stop(), Some(0));
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_server_over_a_store_goes_on_after_its_connections_are_cut() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let st = tmp.path().join("store");
    let token = side(&st);
    let _worker = worker(&st, &url);
    let s = Server::start(&st, &["--store", &url, "--root", "root"]);
    let (code, v) = s.call("POST", "/api/v1/runs", &token, Some(&start_body("cut-1")));
    assert_eq!(code, 201, "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    s.wait_status(&id, &token, "suspended");
    // Every connection to the database is cut: the server's two and the worker's.
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let cut = c
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap()
        .len();
    assert!(cut >= 2, "the server's connections at least: {cut}");
    // The answer's check reads the run again on a new connection, then queues it there.
    let body = json!({"step": "q", "value": "ship"});
    let path = format!("/api/v1/runs/{id}/answer");
    let (code, v) = s.call("POST", &path, &token, Some(&body));
    assert_eq!(code, 202, "{v}");
    // The mirror listens again and sees the worker's appends.
    s.wait_status(&id, &token, "completed");
}

/// A plan that asks a model, then a person.
const CHAT_ASK: &str = "plan chatask version 1

grant llm:chat:fast

c = llm.chat { model: \"fast\", messages: [{ role: \"user\", content: \"Draft the notes.\" }] }
q = human.ask { question: \"Ship the release?\", schema: { type: \"string\" } }
  after c
";

/// Issue 54: over a store, an answer to any run that calls a model was refused 409
/// `binding_unsealed`: the server checked it in a scratch home whose fresh key sealed none of
/// the run's bindings. The check now takes the run's bindings from the store as a worker does,
/// so the answer is checked, queued and recorded, and the run completes; a bad answer is still
/// refused before anything is queued. A second such run is answered by a person in the inbox's
/// form, in a real browser (through the API where none is installed).
#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_model_calling_run_over_a_store_is_answered_through_the_api_and_the_inbox() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let st = tmp.path().join("store");
    let token = side(&st);
    let reply = json!({"model": "fast", "content": "notes"});
    let stub = oracle_llm_stub::Stub::start(vec![reply.clone(), reply]).unwrap();
    let model = format!("fast={}", stub.url());
    // The model is the server's binding, stored with the submission; the worker adopts it.
    let _worker = worker(&st, &url);
    let s = Server::start(&st, &["--store", &url, "--root", "root", "--model", &model]);
    let body = json!({"plan": CHAT_ASK, "inputs": {}});
    let (code, v) = s.call("POST", "/api/v1/runs", &token, Some(&body));
    assert_eq!(code, 201, "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    s.wait_status(&id, &token, "suspended");
    let path = format!("/api/v1/runs/{id}/answer");
    let (code, v) = s.call(
        "POST",
        &path,
        &token,
        Some(&json!({"step": "q", "value": 42})),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (422, Some("bad_answer")),
        "{v}"
    );
    let (code, v) = s.call(
        "POST",
        &path,
        &token,
        Some(&json!({"step": "q", "value": "ship"})),
    );
    assert_eq!(code, 202, "{v}");
    s.wait_status(&id, &token, "completed");
    assert_eq!(stub.requests().len(), 1, "the model was asked once");

    let (code, v) = s.call("POST", "/api/v1/runs", &token, Some(&body));
    assert_eq!(code, 201, "{v}");
    let second = v["run"].as_str().unwrap().to_owned();
    s.wait_status(&second, &token, "suspended");
    match answer_in_browser(&s.base, &token, &second, "ship") {
        Some(message) => assert!(message.contains("checked and queued"), "{message}"),
        None => {
            let path = format!("/api/v1/runs/{second}/answer");
            let answer = json!({"step": "q", "value": "ship"});
            let (code, v) = s.call("POST", &path, &token, Some(&answer));
            assert_eq!(code, 202, "{v}");
        }
    }
    s.wait_status(&second, &token, "completed");
    assert_eq!(stub.requests().len(), 2, "each run asked the model once");
}

const LOOP_ASK: &str = r#"plan loopask version 1

grant llm:chat:fast

pick = agent {
  model: "fast",
  instructions: "Pick a city. Ask a person if you must.",
  task: "Where should the offsite be?",
  tools: ["human.ask"],
}
"#;

/// Issue 56, item 4, over a store: an agent step's model asks a person; the run suspends on
/// the model's call (`pick@1.1`) with its question, the API's answer is checked against the
/// schema the model gave, and the worker feeds the value back to the model as the tool's
/// result.
#[test]
fn over_a_store_an_agents_model_asks_a_person_and_gets_the_answer() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let st = tmp.path().join("store");
    let token = side(&st);
    let ask = json!({"tool_calls": [{"id": "q1", "type": "function", "function": {
        "name": "human__ask",
        "arguments": json!({"question": "Which city?", "schema": {"type": "string"}}).to_string(),
    }}]});
    let stub = oracle_llm_stub::Stub::start(vec![ask, json!({"content": "Oslo it is"})]).unwrap();
    let model = format!("fast={}", stub.url());
    let _worker = worker(&st, &url);
    let s = Server::start(&st, &["--store", &url, "--root", "root", "--model", &model]);
    let body = json!({"plan": LOOP_ASK, "inputs": {}});
    let (code, v) = s.call("POST", "/api/v1/runs", &token, Some(&body));
    assert_eq!(code, 201, "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    s.wait_status(&id, &token, "suspended");
    let (code, v) = s.call("GET", &format!("/api/v1/runs/{id}"), &token, None);
    assert_eq!(code, 200, "{v}");
    assert!(v.to_string().contains("Which city?"), "{v}");
    let path = format!("/api/v1/runs/{id}/answer");
    let bad = json!({"step": "pick@1.1", "value": 7});
    let (code, v) = s.call("POST", &path, &token, Some(&bad));
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (422, Some("bad_answer")),
        "{v}"
    );
    let good = json!({"step": "pick@1.1", "value": "Oslo"});
    let (code, v) = s.call("POST", &path, &token, Some(&good));
    assert_eq!(code, 202, "{v}");
    s.wait_status(&id, &token, "completed");
    let requests = stub.requests();
    assert_eq!(requests.len(), 2, "one turn before the question, one after");
    let told: Vec<&Value> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(told[0]["content"], r#"{"answer":"Oslo"}"#, "{told:?}");
}
