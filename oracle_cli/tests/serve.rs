//! End-to-end tests of `oracle serve` (docs/API.md), with the real binary listening on
//! 127.0.0.1:0 and plain HTTP from `ureq` (and a raw socket where a client would tidy the
//! request: odd paths, event streams). Runs are made by the command line in a sandbox, which is
//! also the server's working directory, so background resumes find the runs' directory.
//!
//! Every request loop here is bounded in count and time, and every server is stopped with
//! SIGTERM when its test ends.

use crate::common;
use crate::web;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use web::Killed;

/// Longest wait for anything a test expects to happen (a background resume, a delivery).
const WAIT_MS_MAX: u64 = 60_000;

/// A running `oracle serve`.
struct Server {
    child: Killed,
    base: String,
    addr: String,
}

impl Server {
    /// Starts `oracle serve --listen 127.0.0.1:0 ARGS` in `dir` and waits for its `listening`
    /// line.
    fn start(dir: &Path, args: &[&str]) -> Server {
        Server::start_program(Path::new(env!("CARGO_BIN_EXE_oracle")), dir, args)
    }

    /// [`Server::start`] with another copy of the binary.
    fn start_program(program: &Path, dir: &Path, args: &[&str]) -> Server {
        let (child, base) = web::serve_in(program, dir, args);
        let addr = base.trim_start_matches("http://").to_owned();
        Server { child, base, addr }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGTERM, then the exit status (killed if it does not stop within ten seconds).
    fn stop(&mut self) -> Option<i32> {
        self.child.stop()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.0.try_wait() {
            self.stop();
        }
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// One request: status and the body parsed as JSON (`Value::Null` when it is not JSON).
fn call(method: &str, url: &str, token: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let text = body.map(Value::to_string);
    call_raw(method, url, token, text.as_deref(), "application/json", &[])
}

fn call_raw(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
    content_type: &str,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut b = ureq::http::Request::builder().method(method).uri(url);
    if let Some(t) = token {
        b = b.header("Authorization", format!("Bearer {t}"));
    }
    if body.is_some() {
        b = b.header("Content-Type", content_type);
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let a = agent();
    let sent = match body {
        Some(text) => a.run(b.body(text.as_bytes().to_vec()).unwrap()),
        None => a.run(b.body(()).unwrap()),
    };
    let mut r = sent.unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn get(s: &Server, path: &str, token: &str) -> Value {
    let (status, v) = call("GET", &s.url(path), Some(token), None);
    assert_eq!(status, 200, "GET {path}: {v}");
    v
}

/// Asserts the one error shape: `ok` false, `error.code` as given, `exit` and `message`.
fn assert_error(status: u16, v: &Value, want_status: u16, code: &str) {
    assert_eq!(status, want_status, "{v}");
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert!(v["error"]["exit"].is_u64(), "{v}");
    assert!(v["error"]["message"].is_string(), "{v}");
}

/// A raw HTTP/1.1 request on a socket (the path exactly as given): the status and the body.
fn raw(s: &Server, method: &str, path: &str, headers: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(&s.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{headers}\r\n",
        s.addr
    )
    .unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// Waits (bounded) until `f` gives a value.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_millis(WAIT_MS_MAX),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A sandbox with a token `alice` (and `bob`); their secrets.
fn setup() -> (common::Sandbox, String, String) {
    let sb = common::Sandbox::new();
    let add = |name: &str| {
        let (code, out, err) = sb.oracle(&["serve", "token", "add", name]);
        assert_eq!(code, 0, "{err}");
        out.trim().to_owned()
    };
    let alice = add("alice");
    let bob = add("bob");
    (sb, alice, bob)
}

fn run(sb: &common::Sandbox, args: &[&str], want: i32) {
    let (code, out, err) = sb.oracle(args);
    assert_eq!(code, want, "{args:?}: {out}{err}");
}

/// The bytes of run `run`'s log, or for `memory:NAME` of that store's log.
fn log_bytes(sb: &common::Sandbox, run: &str) -> Vec<u8> {
    match run.strip_prefix("memory:") {
        Some(name) => std::fs::read(
            sb.path()
                .join(".oracle/memory")
                .join(name)
                .join("store.jsonl"),
        )
        .unwrap(),
        None => std::fs::read(sb.log(".oracle", run)).unwrap(),
    }
}

/// A form route's path for the run (or `memory:NAME` store) it writes.
fn form_path(route: &str, target: &str) -> String {
    match target.strip_prefix("memory:") {
        Some(name) => route.replace("{name}", name),
        None => route.replace("{id}", target),
    }
}

/// In store `name`: a user-asserted allergy (run `allergy_assert-N`), then a first-hand
/// contradiction (`allergy_contradict-N`) that opens request `adj-1` naming both runs.
fn shared_conflict(sb: &common::Sandbox, name: &str) {
    sb.write(
        "assert.plan",
        "plan allergy_assert version 1\n\nsaid = memory.assert { subject: \"alice\", predicate: \"allergy\", value: \"penicillin\", provenance: \"user_asserted\", criticality: \"critical\" }\n",
    );
    sb.write(
        "contradict.plan",
        "plan allergy_contradict version 1\n\nsaid = memory.assert { subject: \"alice\", predicate: \"allergy\", value: \"none\", provenance: \"external_first_hand\", criticality: \"critical\" }\n",
    );
    run(sb, &["run", "assert.plan", "--memory", name], 0);
    run(sb, &["run", "contradict.plan", "--memory", name], 0);
}

#[test]
fn a_stores_request_is_listed_with_both_runs_decided_once_and_wakes_its_waiting_run() {
    let (sb, alice, bob) = setup();
    shared_conflict(&sb, "alice");
    sb.write(
        "wait.plan",
        "plan allergy_wait version 1\n\nallergy = memory.query { subject: \"alice\", predicate: \"allergy\", require: \"resolved\" }\n",
    );
    run(&sb, &["run", "wait.plan", "--memory", "alice"], 3);
    let s = Server::start(sb.path(), &[]);
    let listed = get(&s, "/api/v1/memory/alice/adjudications", &alice);
    let r = &listed["adjudications"][0];
    assert_eq!(r["handle"], "adj-1", "{listed}");
    assert_eq!(r["status"], "pending");
    assert_eq!(r["challenger"]["run"], "allergy_contradict-1");
    assert_eq!(r["incumbent"]["run"], "allergy_assert-1");
    // The inbox (JSON and page) shows it; the watcher sees the waiting run.
    wait_for(
        "the inbox to list the store's request and the waiting run",
        || {
            let i = get(&s, "/api/v1/inbox", &alice);
            let waiting = i["suspended"]
                .as_array()?
                .iter()
                .any(|w| w["run"] == "allergy_wait-1");
            (waiting && i["store_adjudications"][0]["store"] == "alice").then_some(())
        },
    );
    let (pair, _) = json_login(&s, &alice);
    let mut r = agent()
        .run(
            ureq::http::Request::builder()
                .method("GET")
                .uri(s.url("/inbox"))
                .header("Cookie", &pair)
                .body(Vec::new())
                .unwrap(),
        )
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let page = r.body_mut().read_to_string().unwrap();
    assert!(page.contains("id=\"store-verdict-alice-adj-1\""), "{page}");
    assert!(page.contains("allergy_contradict-1") && page.contains("allergy_assert-1"));
    let (status, v) = call(
        "GET",
        &s.url("/api/v1/memory/nobody/adjudications"),
        Some(&alice),
        None,
    );
    assert_error(status, &v, 404, "unknown_store");
    // Two adjudicators at once: one verdict applies, the other is refused.
    let url = s.url("/api/v1/memory/alice/adjudications/adj-1");
    let racers: Vec<_> = [(alice.clone(), "deny"), (bob.clone(), "affirm")]
        .into_iter()
        .map(|(token, verdict)| {
            let url = url.clone();
            std::thread::spawn(move || {
                call(
                    "POST",
                    &url,
                    Some(&token),
                    Some(&json!({"verdict": verdict, "evidence": "external_first_hand"})),
                )
            })
        })
        .collect();
    let results: Vec<(u16, Value)> = racers.into_iter().map(|t| t.join().unwrap()).collect();
    let applied: Vec<&(u16, Value)> = results.iter().filter(|(s, _)| *s == 200).collect();
    let refused: Vec<&(u16, Value)> = results.iter().filter(|(s, _)| *s != 200).collect();
    assert_eq!((applied.len(), refused.len()), (1, 1), "{results:?}");
    assert_error(refused[0].0, &refused[0].1, 409, "already_resolved");
    assert_eq!(
        applied[0].1["resumed"],
        json!(["allergy_wait-1"]),
        "{results:?}"
    );
    // The waiting run goes on by itself with the store's belief, and replays.
    settled(&s, &alice, "allergy_wait-1", "completed");
    let want = if applied[0].1["verdict"] == "deny" {
        "penicillin"
    } else {
        "none"
    };
    let resumed: Vec<Value> = sb
        .events(".oracle", "allergy_wait-1")
        .iter()
        .filter(|e| e.kind.as_str() == "resumed")
        .map(|e| e.payload.clone())
        .collect();
    assert_eq!(resumed[0]["value"]["value"], want, "{resumed:?}");
    run(&sb, &["verify", "--memory", "alice"], 0);
    run(&sb, &["replay", "allergy_wait-1"], 0);
}

fn run_status(s: &Server, token: &str, id: &str) -> Value {
    get(s, &format!("/api/v1/runs/{id}"), token)
}

/// Waits until run `id` is no longer `running` and the watcher has seen it; its summary.
fn settled(s: &Server, token: &str, id: &str, status: &str) -> Value {
    wait_for(&format!("{id} to be {status}"), || {
        let v = run_status(s, token, id);
        (v["status"] == status).then_some(v)
    })
}

#[test]
fn tokens_are_stored_as_hashes_and_shown_once() {
    let (sb, alice, _) = setup();
    let file = std::fs::read_to_string(sb.path().join(".oracle/serve-tokens")).unwrap();
    assert!(!file.contains(&alice), "the secret is not stored");
    assert!(file.starts_with("alice:"), "{file}");
    assert_eq!(alice.len(), 64);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(sb.path().join(".oracle/serve-tokens"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let (code, _, err) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 2, "a second `alice` is refused: {err}");
    let (code, _, err) = sb.oracle(&["serve", "token", "add", "a:b"]);
    assert_eq!(code, 2, "{err}");
    // token_name_bytes_max: 64 bytes are taken, 65 are not.
    let (code, _, err) = sb.oracle(&["serve", "token", "add", &"n".repeat(65)]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = sb.oracle(&["serve", "token", "add", &"n".repeat(64)]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn every_read_endpoint_answers_in_the_documented_shape() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/quickstart.plan"], 0);
    run(&sb, &["run", "fixtures/plans/quickstart.plan"], 0);
    run(
        &sb,
        &[
            "run",
            "fixtures/plans/quickstart.plan",
            "--input",
            "min_words=99",
        ],
        0,
    );
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    run(&sb, &["run", "fixtures/plans/adjudication.plan"], 3);
    let s = Server::start(sb.path(), &[]);

    let v = get(&s, "/api/v1/whoami", &alice);
    assert_eq!(v["name"], "alice");

    // Runs: all, filtered, paged.
    let v = get(&s, "/api/v1/runs", &alice);
    let ids: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "adjudication-1",
            "escalation-1",
            "quickstart-1",
            "quickstart-2",
            "quickstart-3"
        ]
    );
    assert_eq!(v["next"], Value::Null);
    let v = get(&s, "/api/v1/runs?status=suspended", &alice);
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    let v = get(&s, "/api/v1/runs?plan=quickstart&limit=2", &alice);
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    assert_eq!(v["next"], "quickstart-2");
    let v = get(
        &s,
        "/api/v1/runs?plan=quickstart&limit=2&after=quickstart-2",
        &alice,
    );
    assert_eq!(v["runs"][0]["run"], "quickstart-3");
    assert_eq!(v["next"], Value::Null);

    // One run: what it waits on.
    let v = get(&s, "/api/v1/runs/escalation-1", &alice);
    assert_eq!(v["status"], "suspended");
    assert_eq!(v["waiting_on"]["step"], "total");
    assert_eq!(v["waiting_on"]["kind"], "yield");
    assert_eq!(v["events"], 31);
    assert_eq!(v["head"].as_str().unwrap().len(), 64);
    let v = get(&s, "/api/v1/runs/adjudication-1", &alice);
    assert_eq!(v["waiting_on"]["kind"], "belief");
    assert_eq!(v["waiting_on"]["subject"], "patient-17");

    // Events: paged by seq, one by seq.
    let v = get(
        &s,
        "/api/v1/runs/quickstart-1/events?from=3&limit=4",
        &alice,
    );
    let seqs: Vec<u64> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [3, 4, 5, 6]);
    assert_eq!(v["next"], 7);
    let total = v["total"].as_u64().unwrap();
    let v = get(
        &s,
        &format!("/api/v1/runs/quickstart-1/events?from={}", total - 1),
        &alice,
    );
    assert_eq!(v["next"], Value::Null);
    assert_eq!(v["events"][0]["kind"], "run_finished");
    let v = get(&s, "/api/v1/runs/quickstart-1/events/0", &alice);
    assert_eq!(v["kind"], "run_started");
    assert_eq!(v["payload"]["program"], "quickstart");
    let (status, v) = call(
        "GET",
        &s.url("/api/v1/runs/quickstart-1/events/100000"),
        Some(&alice),
        None,
    );
    assert_error(status, &v, 404, "seq_out_of_range");

    // State at a seq, and at the end.
    let v = get(&s, "/api/v1/runs/quickstart-1/state", &alice);
    assert_eq!(v["seq"], total - 1);
    assert!(
        v["entries"]["step/stats"]["output"]["words"].is_u64(),
        "{v}"
    );
    let v = get(&s, "/api/v1/runs/quickstart-1/state?seq=0", &alice);
    assert_eq!(v["keys"], 0);
    let v = get(
        &s,
        "/api/v1/runs/quickstart-1/state?prefix=step/read",
        &alice,
    );
    assert_eq!(v["entries"].as_object().unwrap().len(), 1);

    // Verify: the chain, as `oracle verify` reports it.
    let v = get(&s, "/api/v1/runs/quickstart-1/verify", &alice);
    assert_eq!(v["valid"], true);
    assert_eq!(v["events"], total);
    let (_, out, _) = sb.oracle(&["verify", "quickstart-1", "--json"]);
    let cli: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["head"], cli["head"]);

    // Diff: identical, then the first divergence.
    let v = get(&s, "/api/v1/diff?a=quickstart-1&b=quickstart-2", &alice);
    assert_eq!(v["result"], "identical", "{v}");
    let v = get(&s, "/api/v1/diff?a=quickstart-1&b=quickstart-3", &alice);
    assert_eq!(v["result"], "diverged", "{v}");
    assert_eq!(v["seq"], 0);
    assert_eq!(v["class"], "inputs");
    let v = get(
        &s,
        "/api/v1/diff?a=quickstart-1&b=quickstart-3&verify=false",
        &alice,
    );
    assert_eq!(v["verified"], false);
    assert_eq!(v["seq"], 0);

    // Beliefs and adjudications.
    let v = get(&s, "/api/v1/runs/adjudication-1/beliefs", &alice);
    assert_eq!(v["lines"][0]["subject"], "patient-17");
    assert_eq!(v["lines"][0]["belief"]["status"], "contested", "{v}");
    let v = get(&s, "/api/v1/runs/adjudication-1/adjudications", &alice);
    let a = &v["adjudications"][0];
    assert_eq!(a["handle"], "adj-15");
    assert_eq!(a["status"], "pending");
    assert_eq!(a["incumbent"]["value"], "penicillin");
    assert_eq!(a["incumbent"]["provenance"], "external_first_hand");
    assert_eq!(a["challenger"]["value"], "none");
    let v = get(
        &s,
        "/api/v1/runs/adjudication-1/adjudications?status=resolved",
        &alice,
    );
    assert_eq!(v["adjudications"].as_array().unwrap().len(), 0);

    // The inbox: both suspended steps, the pending adjudication with both claims.
    let v = get(&s, "/api/v1/inbox", &alice);
    let steps: Vec<(&str, &str)> = v["suspended"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["run"].as_str().unwrap(), i["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [("adjudication-1", "belief"), ("escalation-1", "yield")]
    );
    assert_eq!(v["adjudications"][0]["handle"], "adj-15");
    assert_eq!(
        v["adjudications"][0]["challenger"]["provenance"],
        "external_first_hand"
    );
    assert!(
        v["adjudications"][0]["link"]
            .as_str()
            .unwrap()
            .ends_with("/runs/adjudication-1")
    );

    // Unknown routes and methods: the same error shape.
    let (status, v) = call("GET", &s.url("/api/v1/nothing"), Some(&alice), None);
    assert_error(status, &v, 404, "no_route");
    let (status, v) = call("DELETE", &s.url("/api/v1/runs"), Some(&alice), None);
    assert_error(status, &v, 405, "method");
    let (status, v) = call("GET", &s.url("/api/v1/runs/nope-1"), Some(&alice), None);
    assert_error(status, &v, 404, "not_found");
}

#[test]
fn reads_and_writes_need_a_token_and_open_reads_are_loopback_only() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let before = log_bytes(&sb, "escalation-1");
    let answer = json!({"step": "total", "value": {"value": {"total": 1250}}});
    {
        let s = Server::start(sb.path(), &[]);
        let (status, v) = call("GET", &s.url("/api/v1/runs"), None, None);
        assert_error(status, &v, 401, "unauthorized");
        let (status, v) = call("GET", &s.url("/api/v1/runs"), Some("0123abcd"), None);
        assert_error(status, &v, 401, "bad_token");
        // A malformed Authorization header is refused, not ignored.
        let (status, v) = call_raw(
            "GET",
            &s.url("/api/v1/runs"),
            None,
            None,
            "",
            &[("Authorization", "Basic YWxpY2U6eA==")],
        );
        assert_error(status, &v, 401, "bad_token");
        let url = s.url("/api/v1/runs/escalation-1/answer");
        let (status, v) = call("POST", &url, None, Some(&answer));
        assert_error(status, &v, 401, "unauthorized");
        let (status, v) = call("POST", &url, Some("wrong"), Some(&answer));
        assert_error(status, &v, 401, "bad_token");
        assert_eq!(log_bytes(&sb, "escalation-1"), before, "nothing written");
        // The SSE streams need a token too.
        let (status, _) = raw(&s, "GET", "/api/v1/inbox/stream", "");
        assert_eq!(status, 401);
    }
    {
        let s = Server::start(sb.path(), &["--read-open"]);
        let (status, v) = call("GET", &s.url("/api/v1/runs"), None, None);
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["runs"][0]["run"], "escalation-1");
        // A page on another site that rebinds its name to 127.0.0.1 reads nothing.
        let mut stream = TcpStream::connect(&s.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "GET /api/v1/runs HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        assert!(text.starts_with("HTTP/1.1 403"), "{text}");
        assert!(text.contains("\"code\":\"host\""), "{text}");
        // Writes still need a token.
        let url = s.url("/api/v1/runs/escalation-1/answer");
        let (status, v) = call("POST", &url, None, Some(&answer));
        assert_error(status, &v, 401, "unauthorized");
        assert_eq!(log_bytes(&sb, "escalation-1"), before, "nothing written");
        let (status, _) = call("GET", &s.url("/api/v1/whoami"), Some(&alice), None);
        assert_eq!(status, 200);
    }
    // Refused before listening: a remote address without --allow-remote, open reads on it.
    for args in [
        vec!["serve", "--listen", "0.0.0.0:0"],
        vec![
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--allow-remote",
            "--read-open",
        ],
    ] {
        let (code, out, err) = sb.oracle(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(!out.contains("listening"), "{out}");
        assert!(err.contains("--listen"), "{err}");
    }
}

#[test]
fn oversized_and_malformed_requests_are_refused_in_the_error_shape() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let before = log_bytes(&sb, "escalation-1");
    let s = Server::start(sb.path(), &[]);
    let url = s.url("/api/v1/runs/escalation-1/answer");
    // One byte over body_bytes_max (16 MiB).
    let big = format!(
        "{{\"step\": \"total\", \"value\": \"{}\"}}",
        "x".repeat(16 << 20)
    );
    let (status, v) = call_raw(
        "POST",
        &url,
        Some(&alice),
        Some(&big),
        "application/json",
        &[],
    );
    assert_error(status, &v, 413, "too_large");
    assert_eq!(v["error"]["limit"], 16 << 20);
    let (status, v) = call_raw(
        "POST",
        &url,
        Some(&alice),
        Some("{\"step\": \"total\""),
        "application/json",
        &[],
    );
    assert_error(status, &v, 400, "usage");
    let (status, v) = call_raw(
        "POST",
        &url,
        Some(&alice),
        Some("step=total"),
        "text/plain",
        &[],
    );
    assert_error(status, &v, 415, "media_type");
    let (status, v) = call(
        "POST",
        &url,
        Some(&alice),
        Some(&json!({"step": "total", "value": 1, "extra": true})),
    );
    assert_error(status, &v, 400, "usage");
    // A float has no canonical form: refused by name, nothing written.
    let (status, v) = call(
        "POST",
        &url,
        Some(&alice),
        Some(&json!({"step": "total", "value": {"value": {"total": 1.5}}})),
    );
    assert_error(status, &v, 422, "bad_answer");
    // JSON nested past serde's depth limit: a 400, no crash.
    let deep = format!(
        "{{\"step\": \"total\", \"value\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let (status, v) = call_raw(
        "POST",
        &url,
        Some(&alice),
        Some(&deep),
        "application/json",
        &[],
    );
    assert_error(status, &v, 400, "usage");
    for q in [
        "/api/v1/runs?limit=abc",
        "/api/v1/runs?limit=0",
        "/api/v1/runs?limit=1001",
        "/api/v1/runs?status=sleeping",
        "/api/v1/runs?bogus=1",
        "/api/v1/runs/escalation-1/events?from=-1",
        "/api/v1/runs/escalation-1/events/x",
        "/api/v1/runs/escalation-1/adjudications?status=open",
    ] {
        let (status, v) = call("GET", &s.url(q), Some(&alice), None);
        assert_error(status, &v, 400, "usage");
    }
    assert_eq!(log_bytes(&sb, "escalation-1"), before, "nothing written");
    // The server is still there.
    let (status, _) = call("GET", &s.url("/api/v1/runs"), Some(&alice), None);
    assert_eq!(status, 200);
}

#[test]
fn run_ids_that_would_leave_the_runs_directory_are_refused() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/quickstart.plan"], 0);
    // A run-like directory outside the home, and a symlink to it under runs/.
    let outside = sb.path().join("elsewhere/secret-1");
    common::copy_dir(&sb.path().join(".oracle/runs/quickstart-1"), &outside);
    #[cfg(unix)]
    std::os::unix::fs::symlink(&outside, sb.path().join(".oracle/runs/linked-1")).unwrap();
    let s = Server::start(sb.path(), &[]);
    let auth = format!("Authorization: Bearer {alice}\r\n");
    for path in [
        "/api/v1/runs/..%2F..%2Felsewhere%2Fsecret-1",
        "/api/v1/runs/..%2F..%2Felsewhere%2Fsecret-1/events",
        "/api/v1/runs/%2E%2E/events",
        "/api/v1/runs/..",
        "/api/v1/runs/%2Fetc%2Fpasswd",
        "/api/v1/runs/%2Fetc/verify",
        "/api/v1/runs/quickstart-1%2F..%2F..%2F..%2Felsewhere%2Fsecret-1",
        "/api/v1/runs/a%5C..%5Cb",
        "/api/v1/runs/quickstart-1%00",
        "/api/v1/runs/../../elsewhere/secret-1/events",
        "/api/v1/runs/linked-1",
        "/api/v1/runs/linked-1/events",
        "/api/v1/diff?a=quickstart-1&b=..%2F..%2Felsewhere%2Fsecret-1",
    ] {
        let (status, body) = raw(&s, "GET", path, &auth);
        assert!(status == 400 || status == 404, "{path}: {status} {body}");
        assert!(!body.contains("run_started"), "{path}: {body}");
    }
    let (status, body) = raw(
        &s,
        "POST",
        "/api/v1/runs/..%2F..%2Felsewhere%2Fsecret-1/resume",
        &auth,
    );
    assert!(status == 400 || status == 404, "{status} {body}");
    // The run itself is there.
    let (status, _) = raw(&s, "GET", "/api/v1/runs/quickstart-1", &auth);
    assert_eq!(status, 200);
}

#[test]
fn an_answer_that_breaks_its_schema_or_expect_writes_nothing() {
    let (sb, alice, _) = setup();
    sb.write(
        "fixtures/plans/ship.plan",
        "plan ship version 1\n\
         ok = human.ask { question: \"Ship it?\", schema: { \"type\": \"string\", \"enum\": [\"yes\", \"no\", \"maybe\"] } }\n  expect ok.answer != \"maybe\"\n",
    );
    run(&sb, &["run", "fixtures/plans/ship.plan"], 3);
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    run(&sb, &["run", "fixtures/plans/adjudication.plan"], 3);
    let s = Server::start(sb.path(), &[]);
    let v = get(&s, "/api/v1/runs/ship-1", &alice);
    assert_eq!(v["waiting_on"]["kind"], "question");
    assert_eq!(v["waiting_on"]["question"], "Ship it?");
    assert_eq!(v["waiting_on"]["schema"]["enum"][0], "yes");
    let cases = [
        // (run, body, status, code)
        (
            "ship-1",
            json!({"step": "ok", "value": "perhaps"}),
            422,
            "bad_answer",
        ),
        (
            "ship-1",
            json!({"step": "ok", "value": "maybe"}),
            422,
            "bad_answer",
        ),
        (
            "ship-1",
            json!({"step": "nope", "value": "yes"}),
            409,
            "wrong_step",
        ),
        (
            "escalation-1",
            json!({"step": "total", "value": {"value": {"total": 0}}}),
            422,
            "bad_answer",
        ),
        (
            "escalation-1",
            json!({"step": "total", "value": {"value": "lots"}}),
            422,
            "bad_answer",
        ),
        (
            "adjudication-1",
            json!({"step": "allergy", "value": "none"}),
            409,
            "belief_wait",
        ),
    ];
    for (id, body, want, code) in cases {
        let before = log_bytes(&sb, id);
        let url = s.url(&format!("/api/v1/runs/{id}/answer"));
        let (status, v) = call("POST", &url, Some(&alice), Some(&body));
        assert_error(status, &v, want, code);
        assert_eq!(log_bytes(&sb, id), before, "{id} {body}: nothing written");
    }
    // The expect's message names it.
    let (_, v) = call(
        "POST",
        &s.url("/api/v1/runs/ship-1/answer"),
        Some(&alice),
        Some(&json!({"step": "ok", "value": "maybe"})),
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("expect"),
        "{v}"
    );
    // A good one is recorded, by alice, and a second is a conflict.
    let url = s.url("/api/v1/runs/ship-1/answer");
    let (status, v) = call(
        "POST",
        &url,
        Some(&alice),
        Some(&json!({"step": "ok", "value": "yes"})),
    );
    assert_eq!(status, 200, "{v}");
    let before = log_bytes(&sb, "ship-1");
    let (status, v) = call(
        "POST",
        &url,
        Some(&alice),
        Some(&json!({"step": "ok", "value": "no"})),
    );
    assert_error(status, &v, 409, "already_answered");
    assert_eq!(v["error"]["by"], "alice");
    assert_eq!(log_bytes(&sb, "ship-1"), before);
}

/// An answer recorded through the API (without resuming), then `oracle resume` from the
/// command line: the run goes on from the recorded answer, and its log verifies and replays.
#[test]
fn a_cancel_through_the_api_records_the_token_as_who_and_a_second_is_refused() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let s = Server::start(sb.path(), &[]);
    let url = s.url("/api/v1/runs/escalation-1/cancel");
    let body = json!({"reason": "superseded"});
    let (status, v) = call("POST", &url, None, Some(&body));
    assert_error(status, &v, 401, "unauthorized");
    let (status, v) = call("POST", &url, Some(&alice), Some(&body));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "cancelled");
    assert_eq!(v["seq"], 31);
    assert_eq!(v["by"], "alice");
    let v = settled(&s, &alice, "escalation-1", "cancelled");
    assert_eq!(v["status"], "cancelled");
    let events = sb.events(".oracle", "escalation-1");
    assert_eq!(events[31].kind.as_str(), "run_finished");
    assert_eq!(events[31].payload["status"], "cancelled");
    assert_eq!(events[31].payload["by"], "alice");
    assert_eq!(events[31].payload["reason"], "superseded");
    // Finished: refused with the command line's code, nothing written.
    let before = log_bytes(&sb, "escalation-1");
    let (status, v) = call("POST", &url, Some(&alice), Some(&json!({})));
    assert_error(status, &v, 409, "finished");
    assert_eq!(log_bytes(&sb, "escalation-1"), before);
    run(&sb, &["verify", "escalation-1"], 0);
    run(&sb, &["replay", "escalation-1"], 0);
}

#[test]
fn a_fork_through_the_api_records_the_token_as_who_and_shares_its_prefix() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    // A fork that brings a plan is admitted like a new run: the server must start runs.
    let root = sb.path().to_str().unwrap().to_owned();
    let s = Server::start(sb.path(), &["--root", &root]);
    let url = s.url("/api/v1/runs/escalation-1/fork");
    let body = json!({"step": "total", "value": {"value": {"total": 1240}}});
    let (status, v) = call("POST", &url, Some(&alice), Some(&body));
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["run"], "escalation-2");
    assert_eq!(v["parent"], "escalation-1");
    assert_eq!(v["status"], "suspended", "it asks for approval: {v}");
    assert_eq!(v["by"], "alice");
    let shared = v["shared"].as_u64().unwrap() as usize;
    let events = sb.events(".oracle", "escalation-2");
    assert_eq!(events[shared].kind.as_str(), "forked");
    assert_eq!(events[shared].payload["by"], "alice");
    // Not a boundary: refused, nothing created.
    let (status, v) = call("POST", &url, Some(&alice), Some(&json!({"at": 2})));
    assert_error(status, &v, 422, "fork_point");
    assert!(!sb.path().join(".oracle/runs/escalation-3").exists());
    run(
        &sb,
        &["verify", "escalation-2", "--parent", "escalation-1"],
        0,
    );
    run(&sb, &["replay", "escalation-2"], 0);

    // A plan's text uploaded with the fork: a change after the fork point is followed...
    let source = std::fs::read_to_string(sb.path().join("fixtures/plans/escalation.plan")).unwrap();
    let later = source.replace("Approve payment?", "Approve this payment?");
    let body = json!({"step": "total", "value": {"value": {"total": 1240}}, "plan": later});
    let (status, v) = call("POST", &url, Some(&alice), Some(&body));
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["run"], "escalation-3");
    let events = sb.events(".oracle", "escalation-3");
    assert!(
        events.iter().any(|e| e.kind.as_str() == "plan_upgraded"),
        "upgraded"
    );
    // ...a change before it is refused with the first divergent event, nothing created...
    let earlier = source.replace(
        "fs.read { path: invoice }",
        "fs.read { path: \"fixtures/data/notes.txt\" }",
    );
    assert_ne!(earlier, source);
    let body = json!({"step": "total", "plan": earlier});
    let (status, v) = call("POST", &url, Some(&alice), Some(&body));
    assert_error(status, &v, 409, "upgrade_refused");
    // ...and a plan that uses another file is refused: nothing is read from the server's disk.
    let uses = source.replace(
        "confirm = human.ask",
        "use \"fixtures/plans/count-words.plan\" as count\nwords = count { path: invoice }\n\nconfirm = human.ask",
    );
    let body = json!({"step": "total", "plan": uses});
    let (status, v) = call("POST", &url, Some(&alice), Some(&body));
    assert_eq!(status / 100, 4, "{v}");
    assert!(!sb.path().join(".oracle/runs/escalation-4").exists());

    // With a key, a retried request finds the fork it made.
    let body = json!({"step": "total", "value": {"value": {"total": 1240}}, "key": "req-9"});
    let (status, v) = call("POST", &url, Some(&alice), Some(&body));
    assert_eq!(status, 201, "{v}");
    assert_eq!(
        (v["run"].as_str(), v["existing"].as_bool()),
        (Some("escalation-4"), Some(false))
    );
    let (status, v) = call("POST", &url, Some(&alice), Some(&body));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["run"].as_str(), v["existing"].as_bool()),
        (Some("escalation-4"), Some(true))
    );
    let other = json!({"step": "total", "value": {"value": {"total": 7}}, "key": "req-9"});
    let (status, v) = call("POST", &url, Some(&alice), Some(&other));
    assert_error(status, &v, 409, "key_conflict");

    // The family, as the run says it.
    let (status, v) = call(
        "GET",
        &s.url("/api/v1/runs/escalation-1"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["forked_from"], Value::Null);
    let forks: Vec<&str> = v["forks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["run"].as_str().unwrap())
        .collect();
    assert_eq!(
        forks,
        ["escalation-2", "escalation-3", "escalation-4"],
        "{v}"
    );
    let (_, v) = call(
        "GET",
        &s.url("/api/v1/runs/escalation-3"),
        Some(&alice),
        None,
    );
    assert_eq!(v["forked_from"]["run"], "escalation-1", "{v}");
    assert_eq!(v["forks"], json!([]));
}

#[test]
fn an_answer_alone_is_taken_up_by_a_later_resume_and_the_log_verifies_and_replays() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let s = Server::start(sb.path(), &[]);
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/escalation-1/answer"),
        Some(&alice),
        Some(&json!({"step": "total", "value": {"value": {"total": 1250}}})),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["seq"], 31);
    assert_eq!(v["by"], "alice");
    let v = get(&s, "/api/v1/runs/escalation-1", &alice);
    assert_eq!(v["answered"]["step"], "total");
    assert_eq!(v["answered"]["by"], "alice");
    // The recorded event: `by` is in the payload; the log verifies as it is.
    let events = sb.events(".oracle", "escalation-1");
    assert_eq!(events.len(), 32);
    assert_eq!(events[31].kind.as_str(), "resumed");
    assert_eq!(events[31].payload["by"], "alice");
    run(&sb, &["verify", "escalation-1"], 0);
    run(&sb, &["resume", "escalation-1"], 3);
    let (code, out, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--step",
        "confirm",
        "--value",
        "\"approved\"",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    run(&sb, &["verify", "escalation-1"], 0);
    run(&sb, &["replay", "escalation-1"], 0);
    // The answer taken from the log is the one alice gave.
    let events = sb.events(".oracle", "escalation-1");
    let resumed: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind.as_str() == "resumed")
        .map(|e| &e.payload)
        .collect();
    assert_eq!(resumed[0]["by"], "alice");
    assert!(
        resumed[1].get("by").is_none(),
        "the command line names nobody"
    );
}

#[test]
fn a_question_answered_through_the_api_resumes_in_the_background_and_replays() {
    let (sb, alice, bob) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let s = Server::start(sb.path(), &[]);
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/escalation-1/answer"),
        Some(&alice),
        Some(&json!({"step": "total", "value": {"value": {"total": 1250}}, "resume": true})),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["resume"]["started"], true);
    // The resume runs on to the next question (human.ask).
    let v = wait_for("the run to ask for approval", || {
        let v = run_status(&s, &alice, "escalation-1");
        (v["waiting_on"]["step"] == "confirm").then_some(v)
    });
    assert_eq!(v["waiting_on"]["kind"], "question");
    assert!(
        v["waiting_on"]["question"]
            .as_str()
            .unwrap()
            .contains("1250")
    );
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/escalation-1/answer"),
        Some(&bob),
        Some(&json!({"step": "confirm", "value": "approved", "resume": true})),
    );
    assert_eq!(status, 200, "{v}");
    settled(&s, &alice, "escalation-1", "completed");
    run(&sb, &["verify", "escalation-1"], 0);
    run(&sb, &["replay", "escalation-1"], 0);
    let by: Vec<Value> = sb
        .events(".oracle", "escalation-1")
        .iter()
        .filter(|e| e.kind.as_str() == "resumed")
        .map(|e| e.payload["by"].clone())
        .collect();
    assert_eq!(by, [json!("alice"), json!("bob")]);
    let v = get(&s, "/api/v1/runs/escalation-1/state", &alice);
    assert_eq!(v["entries"]["step/confirm"]["output"]["answer"], "approved");
}

/// The children of process `pid` (all its threads'), from /proc.
fn children(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let path = task.unwrap().path().join("children");
        out.extend(
            std::fs::read_to_string(path)
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned),
        );
    }
    out
}

/// Issue 33: the server resumes a run in its own process, through the host's one resume path.
/// It is started from a copy of the binary that is then deleted: a server that started
/// `oracle resume` as a child (as it used to) could not resume at all; this one goes on to the
/// next question, and has no child process afterwards.
#[test]
fn the_server_resumes_in_process_without_starting_a_program() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let copy = sb.path().join("oracle-copy");
    std::fs::copy(env!("CARGO_BIN_EXE_oracle"), &copy).unwrap();
    let s = Server::start_program(&copy, sb.path(), &[]);
    std::fs::remove_file(&copy).unwrap();
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/escalation-1/answer"),
        Some(&alice),
        Some(&json!({"step": "total", "value": {"value": {"total": 1250}}, "resume": true})),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["resume"]["started"], true);
    wait_for("the run to ask for approval", || {
        let v = run_status(&s, &alice, "escalation-1");
        (v["waiting_on"]["step"] == "confirm").then_some(v)
    });
    let line = wait_for("the resume's line", || {
        std::fs::read_to_string(sb.path().join(".oracle/serve-resume.log"))
            .ok()
            .filter(|t| t.contains("resume escalation-1"))
    });
    assert!(line.contains("(asked by alice): suspended"), "{line}");
    assert_eq!(children(s.child.0.id()), Vec::<String>::new());
}

/// Issue 33: one error taxonomy. The same failures, driven through the command line (`--json`)
/// and through the API, carry the same `code` and `exit` (the host classifies both).
#[test]
fn the_command_line_and_the_api_name_a_failure_alike() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    run(&sb, &["run", "fixtures/plans/quickstart.plan"], 0);
    let s = Server::start(sb.path(), &[]);
    let cases: [(&str, &str, Value); 4] = [
        ("escalation-1", "confirm", json!("approved")),
        ("escalation-1", "total", json!("not an object")),
        ("quickstart-1", "summary", json!("x")),
        ("nosuchrun-1", "total", json!(1)),
    ];
    for (run_id, step, value) in cases {
        let (_, api) = call(
            "POST",
            &s.url(&format!("/api/v1/runs/{run_id}/answer")),
            Some(&alice),
            Some(&json!({"step": step, "value": value})),
        );
        let (code, cli) = sb.json(&[
            "resume",
            run_id,
            "--step",
            step,
            "--value",
            &value.to_string(),
            "--json",
        ]);
        assert_eq!(
            cli["error"]["code"], api["error"]["code"],
            "{run_id} {step}: cli {cli} api {api}"
        );
        assert_eq!(cli["error"]["exit"], api["error"]["exit"], "{cli} {api}");
        assert_eq!(Some(code), cli["error"]["exit"].as_i64().map(|c| c as i32));
    }
}

/// Issue 32, item 2: a background resume once worked in the directory `run.json` names, so a
/// plan's `fs:write:**` could write into any directory an edit named. The root is sealed with
/// the home's key now: an edited one refuses the resume with the command line's code, before
/// anything runs, and nothing is written there.
#[test]
fn the_server_refuses_to_resume_in_an_edited_working_directory() {
    let (sb, alice, _) = setup();
    sb.write(
        "write.plan",
        "plan write version 1\ngrant fs:write:**\n\
         go = human.ask { question: \"write?\" }\n\
         out = fs.write { path: \"harm.txt\", content: \"written\" }\n  after go\n",
    );
    run(&sb, &["run", "write.plan"], 3);
    let victim = tempfile::tempdir().unwrap();
    let meta_path = sb.path().join(".oracle/runs/write-1/run.json");
    let mut meta: Value =
        serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    meta["root"] = json!(victim.path().canonicalize().unwrap());
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let s = Server::start(sb.path(), &[]);
    let before = log_bytes(&sb, "write-1");
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/write-1/resume"),
        Some(&alice),
        Some(&json!({})),
    );
    // Nothing to resume yet (it waits on `go`), or the binding: either way, refused.
    assert_ne!(status, 200, "{v}");
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/write-1/answer"),
        Some(&alice),
        Some(&json!({"step": "go", "value": "yes", "resume": true})),
    );
    assert_error(status, &v, 409, "binding_unsealed");
    assert_eq!(v["error"]["binding"], "root", "{v}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!victim.path().join("harm.txt").exists());
    assert!(!sb.path().join("harm.txt").exists());
    // Refused before the answer was recorded: nothing is half done.
    assert_eq!(log_bytes(&sb, "write-1"), before);
    // The command line refuses it too, from the run's own directory.
    let (code, out, err) = sb.oracle(&["resume", "write-1"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(!victim.path().join("harm.txt").exists());
}

#[test]
fn a_conflict_adjudicated_and_claims_recorded_through_the_api_resume_and_replay() {
    let (sb, alice, bob) = setup();
    run(&sb, &["run", "fixtures/plans/adjudication.plan"], 3);
    run(
        &sb,
        &[
            "run",
            "fixtures/plans/adjudication.plan",
            "--adjudication-expiry",
            "10",
        ],
        3,
    );
    let s = Server::start(sb.path(), &[]);
    // Refusals write nothing: bad evidence, an unknown handle, a bad verdict word.
    let before = log_bytes(&sb, "adjudication-1");
    let url = s.url("/api/v1/runs/adjudication-1/adjudications/adj-15");
    let (status, v) = call(
        "POST",
        &url,
        Some(&alice),
        Some(&json!({"verdict": "affirm", "evidence": "user_asserted"})),
    );
    assert_error(status, &v, 422, "refused");
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/adjudication-1/adjudications/adj-99"),
        Some(&alice),
        Some(&json!({"verdict": "affirm", "evidence": "external_first_hand"})),
    );
    assert_error(status, &v, 404, "unknown_handle");
    assert_eq!(v["error"]["exit"], 5);
    let (status, v) = call(
        "POST",
        &url,
        Some(&alice),
        Some(&json!({"verdict": "maybe", "evidence": "external_first_hand"})),
    );
    assert_error(status, &v, 400, "usage");
    assert_eq!(log_bytes(&sb, "adjudication-1"), before);

    let (status, v) = call(
        "POST",
        &url,
        Some(&alice),
        Some(
            &json!({"verdict": "affirm", "evidence": "external_first_hand",
                     "note": "referral confirmed by phone", "resume": true}),
        ),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["outcome"], "applied");
    assert_eq!(v["by"], "alice");
    assert_eq!(v["belief"]["status"], "resolved");
    settled(&s, &alice, "adjudication-1", "completed");
    run(&sb, &["verify", "adjudication-1"], 0);
    run(&sb, &["replay", "adjudication-1"], 0);
    let events = sb.events(".oracle", "adjudication-1");
    let adjudicated: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind.as_str() == "adjudicated")
        .map(|e| &e.payload)
        .collect();
    assert_eq!(adjudicated.len(), 1);
    assert_eq!(adjudicated[0]["by"], "alice");
    assert_eq!(adjudicated[0]["note"], "referral confirmed by phone");
    // A second verdict on the same handle: already resolved (exit 6), with the original.
    let (status, v) = call(
        "POST",
        &url,
        Some(&bob),
        Some(&json!({"verdict": "deny", "evidence": "external_first_hand"})),
    );
    assert_error(status, &v, 409, "already_resolved");
    assert_eq!(v["error"]["exit"], 6);
    assert_eq!(v["original"]["verdict"], "affirm");

    // The second run: its request expires, a sweep makes the line contested, and new
    // evidence through the API opens a new request, which a verdict settles.
    run(&sb, &["sweep", "adjudication-2", "--now", "20"], 0);
    let curl = s.url("/api/v1/runs/adjudication-2/claims");
    let before = log_bytes(&sb, "adjudication-2");
    let (status, v) = call(
        "POST",
        &curl,
        Some(&bob),
        Some(
            &json!({"subject": "patient-17", "predicate": "allergy", "value": "none",
                     "provenance": "model_derived"}),
        ),
    );
    assert_error(status, &v, 422, "refused");
    assert_eq!(log_bytes(&sb, "adjudication-2"), before);
    let (status, v) = call(
        "POST",
        &curl,
        Some(&bob),
        Some(
            &json!({"subject": "patient-17", "predicate": "allergy", "value": "none",
                     "provenance": "external_first_hand", "note": "allergy test negative"}),
        ),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["by"], "bob");
    let handle = v["adjudication"]["handle"].as_str().unwrap().to_owned();
    assert_eq!(handle, "adj-22");
    let claimed = &sb.events(".oracle", "adjudication-2")[22];
    assert_eq!(claimed.kind.as_str(), "claim_recorded");
    assert_eq!(claimed.payload["by"], "bob");
    let (status, v) = call(
        "POST",
        &s.url(&format!(
            "/api/v1/runs/adjudication-2/adjudications/{handle}"
        )),
        Some(&alice),
        Some(&json!({"verdict": "affirm", "evidence": "external_first_hand", "resume": true})),
    );
    assert_eq!(status, 200, "{v}");
    settled(&s, &alice, "adjudication-2", "completed");
    run(&sb, &["verify", "adjudication-2"], 0);
    run(&sb, &["replay", "adjudication-2"], 0);
}

#[test]
fn two_adjudicators_racing_on_one_handle_apply_exactly_once() {
    let (sb, alice, bob) = setup();
    run(&sb, &["run", "fixtures/plans/adjudication.plan"], 3);
    let s = Server::start(sb.path(), &[]);
    let url = s.url("/api/v1/runs/adjudication-1/adjudications/adj-15");
    let racers: Vec<_> = [(alice.clone(), "affirm"), (bob.clone(), "deny")]
        .into_iter()
        .map(|(token, verdict)| {
            let url = url.clone();
            std::thread::spawn(move || {
                call(
                    "POST",
                    &url,
                    Some(&token),
                    Some(&json!({"verdict": verdict, "evidence": "external_first_hand"})),
                )
            })
        })
        .collect();
    let results: Vec<(u16, Value)> = racers.into_iter().map(|t| t.join().unwrap()).collect();
    let applied: Vec<&(u16, Value)> = results.iter().filter(|(s, _)| *s == 200).collect();
    let refused: Vec<&(u16, Value)> = results.iter().filter(|(s, _)| *s != 200).collect();
    assert_eq!(applied.len(), 1, "{results:?}");
    assert_eq!(refused.len(), 1, "{results:?}");
    assert_error(refused[0].0, &refused[0].1, 409, "already_resolved");
    let winner = applied[0].1["by"].clone();
    assert_eq!(refused[0].1["original"]["verdict"], applied[0].1["verdict"]);
    let adjudicated: Vec<Value> = sb
        .events(".oracle", "adjudication-1")
        .iter()
        .filter(|e| e.kind.as_str() == "adjudicated")
        .map(|e| e.payload.clone())
        .collect();
    assert_eq!(adjudicated.len(), 1);
    assert_eq!(adjudicated[0]["by"], winner);
    run(&sb, &["verify", "adjudication-1"], 0);
}

/// The lines a notify program appended, parsed.
fn delivered(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn script(sb: &common::Sandbox, name: &str, text: &str) -> PathBuf {
    let p = sb.write(name, text);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    p
}

#[test]
fn the_beacon_announces_each_item_once_and_retries_a_failing_program_without_losing_it() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    run(&sb, &["run", "fixtures/plans/adjudication.plan"], 3);
    run(&sb, &["run", "fixtures/plans/denied.plan"], 1);
    let got = sb.path().join("got.jsonl");
    let count = sb.path().join("count");
    // Fails its first three calls, then takes everything.
    let flaky = script(
        &sb,
        "flaky.sh",
        &format!(
            "#!/bin/sh\nn=$(cat {c} 2>/dev/null || echo 0)\nn=$((n + 1))\necho $n > {c}\nif [ $n -le 3 ]; then cat > /dev/null; echo no >&2; exit 1; fi\ncat >> {g}\n",
            c = count.display(),
            g = got.display()
        ),
    );
    let ids = |v: &[Value]| -> Vec<String> {
        let mut ids: Vec<String> = v
            .iter()
            .map(|x| x["id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let want = [
        "adjudication-1/adj-15",
        "adjudication-1/suspended/20",
        "denied-1/failed/4",
        "escalation-1/suspended/30",
    ];
    {
        let flaky_arg = flaky.to_string_lossy().into_owned();
        let _s = Server::start(sb.path(), &["--notify-cmd", &flaky_arg]);
        let all = wait_for("every item delivered", || {
            let d = delivered(&got);
            (d.len() >= want.len()).then_some(d)
        });
        assert_eq!(ids(&all), want, "each once: {all:?}");
        let calls: u64 = std::fs::read_to_string(&count)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(calls, want.len() as u64 + 3, "three failures, each retried");
        let adj = all.iter().find(|v| v["kind"] == "adjudication").unwrap();
        assert_eq!(adj["run"], "adjudication-1");
        assert_eq!(adj["handle"], "adj-15");
        assert!(
            adj["link"]
                .as_str()
                .unwrap()
                .ends_with("/runs/adjudication-1")
        );
        let failed = all.iter().find(|v| v["kind"] == "failed").unwrap();
        assert!(
            failed["reason"].as_str().unwrap().contains("denied"),
            "{failed}"
        );
    }
    // A restart announces nothing delivered before; a new suspension is announced once.
    let ok = script(
        &sb,
        "ok.sh",
        &format!("#!/bin/sh\ncat >> {g}\n", g = got.display()),
    );
    let ok_arg = ok.to_string_lossy().into_owned();
    let s = Server::start(sb.path(), &["--notify-cmd", &ok_arg]);
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let all = wait_for("the new suspension delivered", || {
        let d = delivered(&got);
        (d.len() > want.len()).then_some(d)
    });
    // One more poll interval: nothing else arrives.
    std::thread::sleep(Duration::from_millis(600));
    let all2 = delivered(&got);
    assert_eq!(all2.len(), all.len(), "{all2:?}");
    assert_eq!(all2.len(), want.len() + 1, "{all2:?}");
    assert_eq!(all2.last().unwrap()["id"], "escalation-2/suspended/30");
    // The same items are in the inbox.
    let v = get(&s, "/api/v1/inbox", &alice);
    assert_eq!(v["suspended"].as_array().unwrap().len(), 3);
    assert_eq!(v["adjudications"].as_array().unwrap().len(), 1);
}

/// Reads SSE events (`event`, `id`, `data`) from a stream until `n` have come, bounded.
fn sse_events(reader: &mut impl BufRead, n: usize) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let (mut event, mut id, mut data) = (String::new(), String::new(), String::new());
    let start = Instant::now();
    while out.len() < n {
        assert!(
            start.elapsed() < Duration::from_millis(WAIT_MS_MAX),
            "{out:?}"
        );
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(e) => panic!("{e}"),
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            if !data.is_empty() {
                out.push((event.clone(), id.clone(), data.clone()));
            }
            event.clear();
            id.clear();
            data.clear();
        } else if let Some(v) = line.strip_prefix("event: ") {
            event = v.to_owned();
        } else if let Some(v) = line.strip_prefix("id: ") {
            id = v.to_owned();
        } else if let Some(v) = line.strip_prefix("data: ") {
            data = v.to_owned();
        }
    }
    out
}

/// Opens an SSE stream on a socket; the reader is past the response headers (chunked
/// encoding's size lines are skipped by `sse_events`, as they hold no `:`-prefixed field).
fn open_stream(s: &Server, path: &str, token: &str) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(&s.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n",
        s.addr
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < Duration::from_secs(30));
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => panic!("closed before the headers ended"),
            Ok(_) if line == "\r\n" => return reader,
            Ok(_) => assert!(!line.starts_with("HTTP/1.1 4"), "{line}"),
            Err(_) => {}
        }
    }
}

#[test]
fn event_streams_deliver_the_tail_and_announcements_and_end_on_sigterm() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let mut s = Server::start(sb.path(), &[]);
    let mut tail = open_stream(
        &s,
        "/api/v1/runs/escalation-1/events/stream?from=28",
        &alice,
    );
    let mut inbox = open_stream(&s, "/api/v1/inbox/stream", &alice);
    let first = sse_events(&mut tail, 3);
    let seqs: Vec<&str> = first.iter().map(|(_, id, _)| id.as_str()).collect();
    assert_eq!(seqs, ["28", "29", "30"]);
    let record: Value = serde_json::from_str(&first[2].2).unwrap();
    assert_eq!(record["kind"], "suspended");
    // The record is sent exactly as stored.
    let stored = std::fs::read_to_string(sb.log(".oracle", "escalation-1")).unwrap();
    assert_eq!(stored.lines().nth(30).unwrap(), first[2].2);
    // A new event (an answer through the API) reaches the tail.
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/escalation-1/answer"),
        Some(&alice),
        Some(&json!({"step": "total", "value": {"value": {"total": 1250}}})),
    );
    assert_eq!(status, 200, "{v}");
    let next = sse_events(&mut tail, 1);
    assert_eq!(next[0].0, "event");
    assert_eq!(next[0].1, "31");
    assert!(next[0].2.contains("\"kind\":\"resumed\""), "{next:?}");
    // A run that suspends after the stream opened is announced on the inbox stream.
    run(&sb, &["run", "fixtures/plans/adjudication.plan"], 3);
    let mut got = sse_events(&mut inbox, 2);
    got.sort_by(|a, b| a.1.cmp(&b.1));
    let ids: Vec<&str> = got.iter().map(|(_, id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["adjudication-1/adj-15", "adjudication-1/suspended/20"]
    );
    assert!(got.iter().all(|(e, _, _)| e == "announcement"));
    // SIGTERM ends the open streams and the server exits 0.
    assert_eq!(s.stop(), Some(0));
    let rest = sse_events(&mut tail, 1);
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn browsers_log_in_for_a_cookie_and_their_writes_need_the_csrf_token() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let s = Server::start(sb.path(), &[]);
    // A JSON login: the cookie and the CSRF token.
    let a = agent();
    let r = a
        .run(
            ureq::http::Request::builder()
                .method("POST")
                .uri(s.url("/login"))
                .header("Content-Type", "application/json")
                .body(json!({"token": alice}).to_string().into_bytes())
                .unwrap(),
        )
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let cookie = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    let pair = cookie.split(';').next().unwrap().to_owned();
    let mut r = r;
    let body: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    let csrf = body["csrf"].as_str().unwrap().to_owned();
    assert_eq!(body["name"], "alice");
    // Reads with the cookie.
    let (status, v) = call_raw(
        "GET",
        &s.url("/api/v1/whoami"),
        None,
        None,
        "",
        &[("Cookie", &pair)],
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["name"], "alice");
    // A write with the cookie alone is refused; with the token it is taken, recorded as alice.
    let url = s.url("/api/v1/runs/escalation-1/answer");
    let body = json!({"step": "total", "value": {"value": {"total": 1250}}}).to_string();
    let before = log_bytes(&sb, "escalation-1");
    let (status, v) = call_raw(
        "POST",
        &url,
        None,
        Some(&body),
        "application/json",
        &[("Cookie", &pair)],
    );
    assert_error(status, &v, 403, "csrf");
    let (status, v) = call_raw(
        "POST",
        &url,
        None,
        Some(&body),
        "application/json",
        &[("Cookie", &pair), ("X-CSRF-Token", "0000")],
    );
    assert_error(status, &v, 403, "csrf");
    assert_eq!(log_bytes(&sb, "escalation-1"), before);
    let (status, v) = call_raw(
        "POST",
        &url,
        None,
        Some(&body),
        "application/json",
        &[("Cookie", &pair), ("X-CSRF-Token", &csrf)],
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["by"], "alice");
    // A form login (with the sign-in form's token) redirects to a local `next` only.
    for (next, want) in [
        ("/inbox", "/inbox"),
        ("//evil.example/x", "/"),
        ("https://evil.example", "/"),
    ] {
        let (signin_cookie, field) = signin_form(&s);
        let form = format!(
            "token={alice}&signin={field}&next={}",
            next.replace('/', "%2F").replace(':', "%3A")
        );
        let r = a
            .run(
                ureq::http::Request::builder()
                    .method("POST")
                    .uri(s.url("/login"))
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .header("Cookie", &signin_cookie)
                    .body(form.into_bytes())
                    .unwrap(),
            )
            .unwrap();
        assert_eq!(r.status().as_u16(), 303);
        assert_eq!(r.headers().get("location").unwrap().to_str().unwrap(), want);
    }
    // A wrong token logs nobody in; logout needs the CSRF token, then the cookie is dead.
    let (status, v) = call(
        "POST",
        &s.url("/login"),
        None,
        Some(&json!({"token": "nope"})),
    );
    assert_error(status, &v, 401, "bad_token");
    let (status, _) = call_raw(
        "POST",
        &s.url("/logout"),
        None,
        Some("{}"),
        "application/json",
        &[("Cookie", &pair)],
    );
    assert_eq!(status, 403);
    let (status, _) = call_raw(
        "POST",
        &s.url("/logout"),
        None,
        None,
        "",
        &[("Cookie", &pair), ("X-CSRF-Token", &csrf)],
    );
    assert_eq!(status, 200);
    let (status, _) = call_raw(
        "GET",
        &s.url("/api/v1/whoami"),
        None,
        None,
        "",
        &[("Cookie", &pair)],
    );
    assert_eq!(status, 401);
}

#[test]
fn streams_past_streams_max_are_refused_busy_and_a_closed_one_frees_its_place() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let s = Server::start(sb.path(), &["--streams-max", "2"]);
    let path = "/api/v1/runs/escalation-1/events/stream?from=0";
    let first = open_stream(&s, path, &alice);
    let _second = open_stream(&s, "/api/v1/inbox/stream", &alice);
    // At the limit: the third stream is refused in the error shape, with the limit named.
    let (status, v) = call("GET", &s.url(path), Some(&alice), None);
    assert_error(status, &v, 503, "busy");
    assert!(v["error"]["message"].as_str().unwrap().contains('2'), "{v}");
    // One closes: its place is given back (the server notices at its next write or poll).
    drop(first);
    let start = Instant::now();
    loop {
        let (status, _) = call_stream_status(&s, path, &alice);
        if status == 200 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the place never came back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The status of a stream request, read from its first line only (a stream never ends).
fn call_stream_status(s: &Server, path: &str, token: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(&s.addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        s.addr
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, line)
}

/// A form login goes on to a path on this server only: every spelling of another origin, as a
/// browser's form would send it (percent-encoded in the body), is answered with `/`.
#[test]
fn a_form_login_redirects_to_a_path_on_this_server_only() {
    let (sb, alice, _) = setup();
    let s = Server::start(sb.path(), &[]);
    let a = agent();
    // The `next` field as it stands in the form body (one decoding by the form parser).
    for (next, want) in [
        ("%2Finbox", "/inbox"),
        ("%2Fruns%3Ffrom%3D5", "/runs?from=5"),
        ("%2F%09%2Fevil.example", "/"),
        ("/%09/evil.example", "/"),
        ("/%0A/evil.example", "/"),
        ("/%0D%0A/evil.example", "/"),
        ("/+/evil.example", "/"),
        ("/%2509/evil.example", "/"),
        ("%2F%2Fevil.example", "/"),
        ("%2F%5Cevil.example", "/"),
        ("%5C%5Cevil.example", "/"),
        ("/%252F%252Fevil.example", "/"),
        ("/%25252F%25252Fevil.example", "/"),
        ("https%3A%2F%2Fevil.example", "/"),
        ("javascript%3Aalert(1)", "/"),
        ("/%E2%80%A8/evil.example", "/"),
    ] {
        // As `/signin`'s form posts it: with its sign-in token and cookie.
        let (signin_cookie, field) = signin_form(&s);
        let form = format!("token={alice}&signin={field}&next={next}");
        let r = a
            .run(
                ureq::http::Request::builder()
                    .method("POST")
                    .uri(s.url("/login"))
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .header("Cookie", &signin_cookie)
                    .body(form.into_bytes())
                    .unwrap(),
            )
            .unwrap();
        assert_eq!(r.status().as_u16(), 303, "next={next}");
        let location = r.headers().get("location").unwrap().as_bytes();
        assert_eq!(location, want.as_bytes(), "next={next}");
    }
}

/// A raw request with the given `Host`, read to its end (the server closes after it): the
/// status and the whole response text.
fn with_host(s: &Server, method: &str, path: &str, host: &str, headers: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(&s.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let body = if method == "POST" { "{}" } else { "" };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// The status of a request with the given `Host`, from its first line only (an event stream
/// never ends).
fn status_with_host(s: &Server, method: &str, path: &str, host: &str) -> u16 {
    let mut stream = TcpStream::connect(&s.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
    )
    .unwrap();
    let mut line = String::new();
    let _ = BufReader::new(stream).read_line(&mut line);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Under `--read-open` every route the server has (its own list: API, pages, sign-in, login,
/// logout, forms) and the fallback refuse a foreign `Host` with 403 `host`, with or without
/// credentials, while a loopback `Host` gets past the check on each: a page whose DNS name is
/// rebound to 127.0.0.1 reads nothing, and writes nothing.
#[test]
fn under_read_open_every_route_refuses_a_foreign_host() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let before = log_bytes(&sb, "escalation-1");
    let s = Server::start(sb.path(), &["--read-open"]);
    let routes = oracle_serve::api::route_list();
    for must in [
        "/api/v1/runs",
        "/runs",
        "/runs/{id}",
        "/inbox",
        "/login",
        "/logout",
    ] {
        assert!(
            routes.iter().any(|(_, p)| *p == must),
            "{must} is not in the route list: {routes:?}"
        );
    }
    let mut paths: Vec<(String, String)> = routes
        .iter()
        .map(|(m, p)| {
            let path = p
                .replace("{id}", "escalation-1")
                .replace("{seq}", "0")
                .replace("{handle}", "adj-1")
                .replace("{name}", "nightly");
            let path = if path == "/api/v1/diff" {
                "/api/v1/diff?a=escalation-1&b=escalation-1".to_owned()
            } else {
                path
            };
            (m.to_string(), path)
        })
        .collect();
    // Paths no route has, and a static-looking one: the fallback is checked too.
    for p in ["/no/such/route", "/static/app.css", "/favicon.ico"] {
        paths.push(("GET".to_owned(), p.to_owned()));
    }
    let creds = [String::new(), format!("Authorization: Bearer {alice}\r\n")];
    for (method, path) in &paths {
        for host in ["evil.example", "evil.example:80", "127.0.0.1.evil.example"] {
            for cred in &creds {
                let (status, text) = with_host(&s, method, path, host, cred);
                assert_eq!(status, 403, "{method} {path} Host: {host}: {text}");
                assert!(
                    text.contains("\"code\":\"host\""),
                    "{method} {path} Host: {host}: {text}"
                );
            }
        }
        // The same request naming this server gets past the check (whatever it then says).
        for host in [s.addr.as_str(), "localhost", "[::1]:7420"] {
            let status = status_with_host(&s, method, path, host);
            assert!(
                status != 0 && status != 403,
                "{method} {path} Host: {host}: {status}"
            );
        }
    }
    assert_eq!(log_bytes(&sb, "escalation-1"), before, "nothing written");
}

/// `GET /signin`: the sign-in cookie's `Cookie` pair and the form's `signin` field.
fn signin_form(s: &Server) -> (String, String) {
    let mut r = agent().get(s.url("/signin")).call().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let cookie = r.headers().get("set-cookie").unwrap().to_str().unwrap();
    assert!(cookie.starts_with("oracle_signin="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let page = r.body_mut().read_to_string().unwrap();
    let at = page.find("name=\"signin\" value=\"").unwrap() + "name=\"signin\" value=\"".len();
    let field = page[at..].split('"').next().unwrap().to_owned();
    (pair, field)
}

/// `POST /login` as a form, with `headers`: the status and the `Set-Cookie` values.
fn form_login(s: &Server, form: &str, headers: &[(&str, &str)]) -> (u16, Vec<String>, String) {
    let mut b = ureq::http::Request::builder()
        .method("POST")
        .uri(s.url("/login"))
        .header("Content-Type", "application/x-www-form-urlencoded");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut r = agent()
        .run(b.body(form.as_bytes().to_vec()).unwrap())
        .unwrap();
    let cookies = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let body = r.body_mut().read_to_string().unwrap_or_default();
    (r.status().as_u16(), cookies, body)
}

/// Login CSRF (issue 53, item 7): a sign-in posted from another site (its browser says so with
/// `Origin` or `Sec-Fetch-Site`), or a sign-in form without the token `/signin` put in it
/// beside its cookie, is refused with 403 `csrf` and sets no session cookie, even with a good
/// token; the form `/signin` serves signs in; a program's JSON login still works.
#[test]
fn sign_in_refuses_cross_site_posts() {
    let (sb, alice, _) = setup();
    let s = Server::start(sb.path(), &[]);
    let host = s.addr.clone();
    let here = format!("http://{host}");
    let no_session = |cookies: &[String]| !cookies.iter().any(|c| c.starts_with("oracle_session="));
    let (pair, field) = signin_form(&s);
    let good = format!("token={alice}&signin={field}&next=%2Finbox");
    let cross_site: [&[(&str, &str)]; 5] = [
        &[("Cookie", &pair), ("Origin", "http://evil.example")],
        &[("Cookie", &pair), ("Origin", "null")],
        &[("Cookie", &pair), ("Sec-Fetch-Site", "cross-site")],
        // Another port of this host is the same site, not the same origin.
        &[("Cookie", &pair), ("Sec-Fetch-Site", "same-site")],
        &[("Cookie", &pair), ("Origin", "http://127.0.0.1:1")],
    ];
    for headers in cross_site {
        let (status, cookies, body) = form_login(&s, &good, headers);
        assert_eq!(status, 403, "{headers:?}: {body}");
        assert!(body.contains("\"code\":\"csrf\""), "{headers:?}: {body}");
        assert!(no_session(&cookies), "{headers:?}: {cookies:?}");
    }
    // JSON from another site is refused alike.
    for (k, v) in [
        ("Origin", "http://evil.example"),
        ("Sec-Fetch-Site", "cross-site"),
    ] {
        let body = json!({"token": alice}).to_string();
        let (status, v) = call_raw(
            "POST",
            &s.url("/login"),
            None,
            Some(&body),
            "application/json",
            &[(k, v)],
        );
        assert_error(status, &v, 403, "csrf");
    }
    // A form without the sign-in token, without its cookie, with another form's, or forged.
    let (other_pair, other_field) = signin_form(&s);
    let forms = [
        (format!("token={alice}&next=%2Finbox"), pair.clone()),
        (good.clone(), String::new()),
        (good.clone(), other_pair.clone()),
        (format!("token={alice}&signin={other_field}"), pair.clone()),
        (
            format!("token={alice}&signin={}", "0".repeat(64)),
            pair.clone(),
        ),
        (
            good.clone(),
            pair.replace("oracle_signin=", "oracle_signin=9"),
        ),
    ];
    for (form, cookie) in &forms {
        let headers: Vec<(&str, &str)> = if cookie.is_empty() {
            vec![]
        } else {
            vec![("Cookie", cookie)]
        };
        let (status, cookies, body) = form_login(&s, form, &headers);
        assert_eq!(status, 403, "{form} {cookie}: {body}");
        assert!(body.contains("\"code\":\"csrf\""), "{body}");
        assert!(no_session(&cookies), "{cookies:?}");
    }
    // The form as a browser posts it from this server: signed in, the sign-in cookie dropped.
    let headers = [
        ("Cookie", pair.as_str()),
        ("Origin", here.as_str()),
        ("Sec-Fetch-Site", "same-origin"),
    ];
    let (status, cookies, body) = form_login(&s, &good, &headers);
    assert_eq!(status, 303, "{body}");
    assert!(!no_session(&cookies), "{cookies:?}");
    assert!(
        cookies
            .iter()
            .any(|c| c.starts_with("oracle_signin=;") && c.contains("Max-Age=0")),
        "{cookies:?}"
    );
    // A program's JSON login needs no form token.
    let (session, _) = json_login(&s, &alice);
    assert!(session.starts_with("oracle_session="), "{session}");
}

/// `POST /login` with JSON: the session's `Cookie` pair and its CSRF token.
fn json_login(s: &Server, secret: &str) -> (String, String) {
    let mut r = agent()
        .run(
            ureq::http::Request::builder()
                .method("POST")
                .uri(s.url("/login"))
                .header("Content-Type", "application/json")
                .body(json!({"token": secret}).to_string().into_bytes())
                .unwrap(),
        )
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let cookie = r.headers().get("set-cookie").unwrap().to_str().unwrap();
    let pair = cookie.split(';').next().unwrap().to_owned();
    let body: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    (pair, body["csrf"].as_str().unwrap().to_owned())
}

/// A form post with a session cookie: the status (redirects not followed) and the body.
fn form_post(s: &Server, path: &str, cookie: &str, form: &str) -> (u16, String) {
    let mut r = agent()
        .run(
            ureq::http::Request::builder()
                .method("POST")
                .uri(s.url(path))
                .header("Content-Type", "application/x-www-form-urlencoded")
                .header("Cookie", cookie)
                .body(form.as_bytes().to_vec())
                .unwrap(),
        )
        .unwrap();
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().unwrap_or_default())
}

/// Removes the line of token `name` from the sandbox's token file.
fn remove_token(sb: &common::Sandbox, name: &str) {
    let file = sb.path().join(".oracle/serve-tokens");
    let text = std::fs::read_to_string(&file).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with(&format!("{name}:")))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(kept, text, "{name} was in the token file");
    std::fs::write(&file, kept).unwrap();
}

/// A browser session lives only as long as the token it was made with: once the token's line
/// is removed from the token file (or replaced by a new token of the same name), the session's
/// next request is refused, by the API (401) and by the pages and forms (sent to sign in), and
/// nothing is recorded with it.
#[test]
fn a_removed_token_ends_the_browser_sessions_made_with_it() {
    let (sb, alice, bob) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let s = Server::start(sb.path(), &[]);
    let (pair, csrf) = json_login(&s, &alice);
    let whoami = |pair: &str| {
        call_raw(
            "GET",
            &s.url("/api/v1/whoami"),
            None,
            None,
            "",
            &[("Cookie", pair)],
        )
    };
    let (status, v) = whoami(&pair);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["name"], "alice");

    remove_token(&sb, "alice");
    let before = log_bytes(&sb, "escalation-1");
    let (status, v) = whoami(&pair);
    assert_error(status, &v, 401, "unauthorized");
    let body = json!({"step": "total", "value": {"value": {"total": 1250}}}).to_string();
    let (status, v) = call_raw(
        "POST",
        &s.url("/api/v1/runs/escalation-1/answer"),
        None,
        Some(&body),
        "application/json",
        &[("Cookie", &pair), ("X-CSRF-Token", &csrf)],
    );
    assert_error(status, &v, 401, "unauthorized");
    let form = format!(
        "csrf={csrf}&step=total&value_type=json&value=%7B%22value%22%3A%7B%22total%22%3A1250%7D%7D"
    );
    let (status, text) = form_post(&s, "/runs/escalation-1/answer", &pair, &form);
    assert_eq!(status, 303, "sent to sign in: {text}");
    let (status, _) = call_raw("GET", &s.url("/runs"), None, None, "", &[("Cookie", &pair)]);
    assert_eq!(status, 303, "the pages send it to sign in");
    assert_eq!(log_bytes(&sb, "escalation-1"), before, "nothing recorded");
    // The other token is untouched.
    let (status, v) = call("GET", &s.url("/api/v1/whoami"), Some(&bob), None);
    assert_eq!((status, &v["name"]), (200, &json!("bob")), "{v}");

    // A token replaced by a new one of the same name ends the old one's sessions too.
    let (bob_pair, _) = json_login(&s, &bob);
    assert_eq!(whoami(&bob_pair).0, 200);
    remove_token(&sb, "bob");
    let (code, out, err) = sb.oracle(&["serve", "token", "add", "bob"]);
    assert_eq!(code, 0, "{err}");
    let (status, v) = whoami(&bob_pair);
    assert_error(status, &v, 401, "unauthorized");
    let (new_pair, _) = json_login(&s, out.trim());
    assert_eq!(whoami(&new_pair).1["name"], "bob");
    assert_eq!(log_bytes(&sb, "escalation-1"), before, "nothing recorded");
}

/// A run directory under `<home>/runs` that is a symlink (here to a run outside the home) is
/// skipped everywhere: not listed by the API or the pages, not in either inbox, not readable by
/// its id. The runs beside it are.
#[test]
fn a_symlinked_run_directory_is_neither_listed_nor_read() {
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let outside = sb.path().join("elsewhere/secret-1");
    common::copy_dir(&sb.path().join(".oracle/runs/escalation-1"), &outside);
    #[cfg(unix)]
    std::os::unix::fs::symlink(&outside, sb.path().join(".oracle/runs/linked-1")).unwrap();
    let s = Server::start(sb.path(), &["--read-open"]);
    let v = get(&s, "/api/v1/runs", &alice);
    let ids: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["escalation-1"], "{v}");
    for path in [
        "/api/v1/runs/linked-1",
        "/api/v1/runs/linked-1/events",
        "/api/v1/runs/linked-1/events/0",
    ] {
        let (status, v) = call("GET", &s.url(path), Some(&alice), None);
        assert_error(status, &v, 404, "not_found");
    }
    let inbox = get(&s, "/api/v1/inbox", &alice);
    assert!(inbox.to_string().contains("escalation-1"), "{inbox}");
    assert!(!inbox.to_string().contains("linked-1"), "{inbox}");
    for page in ["/runs", "/inbox"] {
        let (status, body) = raw(&s, "GET", page, "");
        assert_eq!(status, 200, "{page}: {body}");
        assert!(body.contains("escalation-1"), "{page}: {body}");
        assert!(!body.contains("linked-1"), "{page}: {body}");
    }
    let (status, _) = raw(&s, "GET", "/runs/linked-1", "");
    assert_eq!(status, 404);
}

/// Every form route of the web UI (every `POST` outside `/api/v1` but `/login`) refuses a post
/// whose `csrf` field is missing, empty, garbage or another session's, with 403 and nothing
/// recorded (the session stays signed in); the same post with the right field is taken, so
/// the refusals are the CSRF check's and nothing else's.
#[test]
fn every_form_route_refuses_a_post_without_its_sessions_csrf_token() {
    let (sb, alice, bob) = setup();
    sb.write(
        "ask.plan",
        "plan ask version 1\nq = human.ask { question: \"Ship release 2.4 today?\", schema: { type: \"string\" } }\n",
    );
    run(&sb, &["run", "ask.plan"], 3);
    run(&sb, &["run", "fixtures/plans/adjudication.plan"], 3);
    shared_conflict(&sb, "s");
    // A run that proposes a plan change, which the inbox's reject form decides.
    sb.write(
        "prop.plan",
        "plan prop version 1\ngrant evolve:propose:self\np = evolve.propose { source: \"plan prop version 2\\nx = human.ask { question: \\\"ok?\\\" }\\n\", reason: \"ask first\" }\n",
    );
    run(&sb, &["run", "prop.plan"], 0);
    let (_, listed) = sb.json(&["evolve", "list", "--json"]);
    let pid = listed["proposals"][0]["id"].as_str().unwrap().to_owned();
    let s = Server::start(sb.path(), &[]);
    let (pair, csrf) = json_login(&s, &alice);
    let (_, bobs_csrf) = json_login(&s, &bob);
    // What a form route would write: a run's log, or the evolution ledger for a proposal.
    let written = |route: &str, id: &str| {
        if route.starts_with("/proposals/") {
            std::fs::read(sb.path().join(".oracle/evolution/ledger")).unwrap_or_default()
        } else {
            log_bytes(&sb, id)
        }
    };
    // Each form route: its path, the run (or proposal) it would write, and its fields but
    // `csrf`.
    let forms = [
        ("/proposals/{id}/reject", pid.as_str(), "reason=too+broad"),
        (
            "/runs/{id}/answer",
            "ask-1",
            "step=q&value_type=string&value=yes",
        ),
        (
            "/runs/{id}/verdict",
            "adjudication-1",
            "handle=adj-15&verdict=affirm&evidence=external_first_hand&note=checked",
        ),
        (
            "/runs/{id}/fork",
            "ask-1",
            "step=q&value=%7B%22answer%22%3A%22yes%22%7D",
        ),
        (
            "/memory/{name}/verdict",
            "memory:s",
            "handle=adj-1&verdict=affirm&evidence=external_first_hand",
        ),
        ("/logout", "ask-1", ""),
    ];
    // What a form can write: what `written` reads, and (a fork) a new run beside it.
    let footprint = |route: &str, id: &str| {
        let mut runs: Vec<String> = std::fs::read_dir(sb.path().join(".oracle/runs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        runs.sort();
        (written(route, id), runs)
    };
    let routes: std::collections::BTreeSet<&str> = oracle_serve::api::route_list()
        .into_iter()
        .filter(|(m, p)| *m == "POST" && !p.starts_with("/api/") && *p != "/login")
        .map(|(_, p)| p)
        .collect();
    let tested: std::collections::BTreeSet<&str> = forms.iter().map(|(p, _, _)| *p).collect();
    assert_eq!(routes, tested, "every form route has its CSRF cases here");
    let whoami = || {
        call_raw(
            "GET",
            &s.url("/api/v1/whoami"),
            None,
            None,
            "",
            &[("Cookie", &pair)],
        )
        .0
    };
    for (route, run_id, fields) in forms {
        let path = form_path(route, run_id);
        let before = footprint(route, run_id);
        let sep = if fields.is_empty() { "" } else { "&" };
        for bad in [
            fields.to_owned(),
            format!("csrf={sep}{fields}"),
            format!("csrf=0000{sep}{fields}"),
            format!("csrf={}{sep}{fields}", "f".repeat(64)),
            format!("csrf={bobs_csrf}{sep}{fields}"),
            format!("{fields}{sep}csrf={}", &csrf[..csrf.len() - 1]),
        ] {
            let (status, body) = form_post(&s, &path, &pair, &bad);
            assert_eq!(status, 403, "{path} with `{bad}`: {body}");
            assert_eq!(
                footprint(route, run_id),
                before,
                "{path} with `{bad}` wrote"
            );
            assert_eq!(whoami(), 200, "{path} with `{bad}`: still signed in");
        }
    }
    // The right token: each is taken.
    for (route, run_id, fields) in forms {
        let path = form_path(route, run_id);
        let before = footprint(route, run_id);
        let sep = if fields.is_empty() { "" } else { "&" };
        let (status, body) = form_post(&s, &path, &pair, &format!("csrf={csrf}{sep}{fields}"));
        assert_eq!(status, 200, "{path}: {body}");
        let after = footprint(route, run_id);
        if route == "/logout" {
            assert_eq!(whoami(), 401, "signed out");
        } else if route == "/runs/{id}/fork" {
            assert_eq!(after.1.len(), before.1.len() + 1, "{path} made a run");
        } else {
            assert!(after.0.len() > before.0.len(), "{path} recorded");
        }
    }
}

/// The real server's defaults against clients that send half a request: each is closed within
/// `header_read_timeout_ms` (10 s), and while `connections_max` of them (320 by default) are
/// open, a further connection is not served; once they are closed it is.
#[test]
fn half_sent_requests_are_closed_and_connections_past_the_limit_wait() {
    use oracle_serve::config::{
        CONNECTIONS_BESIDE_STREAMS_MAX, HEADER_READ_TIMEOUT_MS, STREAMS_MAX,
    };
    let (sb, alice, _) = setup();
    let s = Server::start(sb.path(), &[]);
    let limit = STREAMS_MAX + CONNECTIONS_BESIDE_STREAMS_MAX;
    let start = Instant::now();
    let mut half: Vec<TcpStream> = (0..limit)
        .map(|_| {
            let mut c = TcpStream::connect(&s.addr).unwrap();
            c.write_all(b"GET /api/v1/whoami HT").unwrap();
            c
        })
        .collect();
    // One more, whole: it waits (unaccepted) while the half-sent ones hold every place.
    let mut extra = TcpStream::connect(&s.addr).unwrap();
    write!(
        extra,
        "GET /api/v1/whoami HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {alice}\r\nConnection: close\r\n\r\n",
        s.addr
    )
    .unwrap();
    extra
        .set_read_timeout(Some(Duration::from_millis(1000)))
        .unwrap();
    let mut buf = [0u8; 64];
    match extra.read(&mut buf) {
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) => {}
        other => panic!("served past the connection limit: {other:?}"),
    }
    // Every half-sent request is closed by the server, within its clock (and a margin).
    let bound = Duration::from_millis(HEADER_READ_TIMEOUT_MS) + Duration::from_secs(20);
    for c in &mut half {
        let left = bound
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(1));
        c.set_read_timeout(Some(left)).unwrap();
        let mut sink = Vec::new();
        match c.read_to_end(&mut sink) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!(
                "a half-sent request still open after {:?}: {e}",
                start.elapsed()
            ),
        }
    }
    assert!(start.elapsed() < bound);
    // The waiting connection is served.
    extra
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut text = String::new();
    let _ = extra.read_to_string(&mut text);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

/// The escalation fixture's text: a run of it suspends on a person's answer.
fn escalation_text(sb: &common::Sandbox) -> String {
    std::fs::read_to_string(sb.path().join("fixtures/plans/escalation.plan")).unwrap()
}

fn start_run(s: &Server, token: &str, body: &Value) -> (u16, Value) {
    call("POST", &s.url("/api/v1/runs"), Some(token), Some(body))
}

/// `POST /api/v1/runs` (docs/API.md): a run started through the API is the run `oracle run`
/// starts, byte for byte; a key makes a second start find the first run, and refuses a start
/// that differs; the run is answered, cancelled, verified and replayed like any other.
#[test]
fn a_run_started_through_the_api_is_the_command_lines_run_and_a_key_finds_it_again() {
    let (sb, alice, _) = setup();
    let plan = escalation_text(&sb);
    // docs/API.md's walkthrough sends this file: it is the fixture, as the docs say.
    let example = common::root().join("examples/api/start-escalation.json");
    let example: Value = serde_json::from_slice(&std::fs::read(example).unwrap()).unwrap();
    assert_eq!(example["plan"], plan.as_str());
    // Without --root, the server starts nothing.
    let s = Server::start(sb.path(), &[]);
    let (status, v) = start_run(&s, &alice, &json!({"plan": plan}));
    assert_error(status, &v, 403, "starts_off");
    drop(s);
    let root = sb.path().to_str().unwrap().to_owned();
    let s = Server::start(sb.path(), &["--root", &root]);
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs"),
        None,
        Some(&json!({"plan": plan})),
    );
    assert_error(status, &v, 401, "unauthorized");
    let keyed = json!({"plan": plan, "key": "order-17"});
    let (status, v) = start_run(&s, &alice, &keyed);
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["run"], "escalation-1");
    assert_eq!(v["existing"], false);
    assert_eq!(v["by"], "alice");
    settled(&s, &alice, "escalation-1", "suspended");
    // The same key, plan and inputs: the same run, nothing started.
    let (status, v) = start_run(&s, &alice, &keyed);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["run"], "escalation-1");
    assert_eq!(v["existing"], true);
    assert_eq!(v["status"], "suspended");
    // The same key with anything else: refused, naming what differs, nothing created.
    let other_seed = json!({"plan": plan, "key": "order-17", "seed": 7});
    let (status, v) = start_run(&s, &alice, &other_seed);
    assert_error(status, &v, 409, "key_conflict");
    assert_eq!(v["error"]["differs"], json!(["seed"]));
    assert_eq!(v["error"]["run"], "escalation-1");
    let other_inputs = json!({"plan": plan, "key": "order-17", "inputs": {"invoice": "x.txt"}});
    let (status, v) = start_run(&s, &alice, &other_inputs);
    assert_error(status, &v, 409, "key_conflict");
    assert_eq!(v["error"]["differs"], json!(["inputs"]));
    // Without a key, a second run; the command line's run of the same plan is the same bytes.
    let (status, v) = start_run(&s, &alice, &json!({"plan": plan}));
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["run"], "escalation-2");
    settled(&s, &alice, "escalation-2", "suspended");
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    assert_eq!(
        log_bytes(&sb, "escalation-2"),
        log_bytes(&sb, "escalation-3")
    );
    // The key is recorded in the keyed run's first event, and only there.
    assert_eq!(
        sb.events(".oracle", "escalation-1")[0].payload["key"],
        "order-17"
    );
    assert!(
        sb.events(".oracle", "escalation-2")[0]
            .payload
            .get("key")
            .is_none()
    );
    // Answered and resumed through the API, it completes; the other is cancelled.
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/escalation-1/answer"),
        Some(&alice),
        Some(&json!({"step": "total", "value": {"value": {"total": 1250}}, "resume": true})),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/escalation-2/cancel"),
        Some(&alice),
        Some(&json!({"reason": "duplicate order"})),
    );
    assert_eq!(status, 200, "{v}");
    settled(&s, &alice, "escalation-2", "cancelled");
    wait_for("escalation-1 to wait on its confirmation", || {
        let v = run_status(&s, &alice, "escalation-1");
        (v["waiting_on"]["step"] == "confirm").then_some(())
    });
    for id in ["escalation-1", "escalation-2"] {
        run(&sb, &["verify", id], 0);
        run(&sb, &["replay", id], 0);
    }
    // A keyed start of a finished run still finds it.
    let (status, v) = start_run(&s, &alice, &keyed);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["run"], "escalation-1");
}

/// A plan in a request names files under the server's `--root` only and runs no programs; a
/// bad request is refused with the command line's code and creates nothing.
#[test]
fn a_requested_plan_stays_under_the_root_and_a_refused_start_creates_nothing() {
    let (sb, alice, _) = setup();
    let plan = escalation_text(&sb);
    let root = sb.path().to_str().unwrap().to_owned();
    let s = Server::start(sb.path(), &["--root", &root]);
    let cases = [
        (
            json!({"plan": plan.replace("fs:read:fixtures/data/**", "fs:read:/etc/**")}),
            403,
            "not_allowed",
        ),
        (
            json!({"plan": plan.replace("fs:read:fixtures/data/**", "fs:read:../**")}),
            403,
            "not_allowed",
        ),
        (
            json!({"plan": plan.replace("grant fs:read:fixtures/data/**", "grant proc:exec:sh")}),
            403,
            "not_allowed",
        ),
        (
            json!({"plan": plan.replace("input invoice", "tools \"/opt/tools\"\ninput invoice")}),
            403,
            "not_allowed",
        ),
        (
            json!({"plan": plan, "inputs": {"invoice": 5}}),
            422,
            "input",
        ),
        (
            json!({"plan": plan, "inputs": {"invoce": "x"}}),
            422,
            "input",
        ),
        (json!({"plan": "plan p version 1\nx = \n"}), 422, "plan"),
        (json!({"plan": plan, "key": ""}), 400, "usage"),
        (
            json!({"plan": plan, "grants": ["proc:exec:*"]}),
            400,
            "usage",
        ),
        (json!({"plan": plan, "seed": -1}), 400, "usage"),
    ];
    for (body, want, code) in cases {
        let (status, v) = start_run(&s, &alice, &body);
        assert_error(status, &v, want, code);
    }
    let (_, v) = start_run(&s, &alice, &json!({"plan": "plan p version 1\nx = \n"}));
    assert!(v["error"]["diagnostics"][0]["line"].is_u64(), "{v}");
    let runs = sb.path().join(".oracle/runs");
    let made = std::fs::read_dir(&runs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(made, 0, "nothing created under {}", runs.display());
}

/// A plan full of mistakes (2,000 unknown names) sent to every route that checks a plan (a
/// run, a fork) is refused with at most `DIAGNOSTICS_MAX` diagnostics and one more counting
/// the rest (issue 53, item 5): one request costs the server a bounded answer. (A schedule's
/// plan is not checked when it is created, so it makes no diagnostics there; checking it is
/// the one admission rule's, item 1.)
#[test]
fn a_plan_full_of_mistakes_gets_a_bounded_answer_on_every_route() {
    const UNKNOWN: usize = 2_000;
    let max = oracle_plan::diagnostic::DIAGNOSTICS_MAX;
    let (sb, alice, _) = setup();
    run(&sb, &["run", "fixtures/plans/escalation.plan"], 3);
    let mut typos = String::from("plan typos version 1\n");
    for i in 0..UNKNOWN {
        typos.push_str(&format!("s{i} = text.count {{ text: t{i} }}\n"));
    }
    let root = sb.path().to_str().unwrap().to_owned();
    let s = Server::start(sb.path(), &["--root", &root]);
    let routes = [
        ("/api/v1/runs", json!({"plan": typos})),
        (
            "/api/v1/runs/escalation-1/fork",
            json!({"step": "total", "plan": typos}),
        ),
    ];
    for (route, body) in routes {
        let (status, v) = call("POST", &s.url(route), Some(&alice), Some(&body));
        assert_error(status, &v, 422, "plan");
        let diags = v["error"]["diagnostics"].as_array().unwrap();
        assert_eq!(diags.len(), max + 1, "{route}: {}", diags.len());
        assert!(diags[..max].iter().all(|d| d["code"] == "E0204"), "{route}");
        assert_eq!(
            (diags[0]["line"].as_u64(), diags[max - 1]["line"].as_u64()),
            (Some(2), Some(max as u64 + 1))
        );
        let more = &diags[max];
        assert_eq!(more["code"], "E0226", "{route}: {more}");
        let rest = UNKNOWN - max;
        let message = more["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("and {rest} more diagnostics")),
            "{route}: {message}"
        );
        assert_eq!(
            more["line"].as_u64(),
            Some(max as u64 + 2),
            "{route}: at the first left out"
        );
    }
}

/// A plan whose second step waits for a file `marker` in the working directory.
const SLOW: &str = "plan slow version 1\n\
grant proc:exec:sh\n\
a = text.count { text: \"one two three\" }\n\
wait = proc.exec { program: \"sh\", args: [\"-c\", \"while [ ! -e marker ]; do sleep 0.05; done; echo done\"] }\n  after a\n  timeout 60s\n\
b = text.count { text: \"four five\" }\n  after wait\n";

/// `oracle serve --recover` drives on a run whose process was killed mid-way (`interrupted`),
/// through the one resume path: it completes with the log an uninterrupted run records.
#[test]
fn serve_recover_drives_on_a_run_a_killed_process_left_behind() {
    let (sb, alice, _) = setup();
    sb.write("slow.plan", SLOW);
    let mut child = sb
        .command(&["run", "slow.plan"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = sb.log(".oracle", "slow-1");
    wait_for("the slow call on disk", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (text.contains("\"tool_called\"") && text.contains("proc.exec")).then_some(())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let (_, list, _) = sb.oracle(&["runs"]);
    assert!(list.contains("interrupted"), "{list}");
    // Without --recover the server leaves it; with it, the run is driven on.
    let s = Server::start(sb.path(), &[]);
    assert_eq!(run_status(&s, &alice, "slow-1")["status"], "running");
    drop(s);
    sb.write("marker", "");
    let s = Server::start(sb.path(), &["--recover"]);
    settled(&s, &alice, "slow-1", "completed");
    // The line is written when the drive has returned, just after its last event.
    let resume_log = sb.path().join(".oracle/serve-resume.log");
    wait_for("the recover line in serve-resume.log", || {
        let resumes = std::fs::read_to_string(&resume_log).unwrap_or_default();
        resumes
            .contains("recover slow-1 (interrupted): completed")
            .then_some(())
    });
    run(&sb, &["--home", "clean", "run", "slow.plan"], 0);
    let clean = std::fs::read(sb.log("clean", "slow-1")).unwrap();
    let recovered = log_bytes(&sb, "slow-1");
    let heads = |b: &[u8]| common::parse_events(b).last().map(|e| e.hash);
    assert_eq!(heads(&recovered), heads(&clean));
    run(&sb, &["verify", "slow-1"], 0);
}

/// Streamed model output (issue 41): a run started through the API whose model binding
/// streams sends the reply's pieces to the run's SSE tail as `event: delta` while the call is
/// in flight, more than one of them; the log records the reply whole, and the pieces put
/// together are that reply.
#[test]
fn a_streamed_reply_arrives_on_the_sse_tail_in_pieces_and_the_log_has_it_whole() {
    let (sb, alice, _) = setup();
    let reply = "The quick brown fox jumps over the lazy dog, twice.";
    // Slow enough that the tail is open before the first piece: a wait before the reply,
    // and between pieces.
    let stub = oracle_llm_stub::Stub::start(vec![json!({
        "content": reply, "chunks": 5, "delay_ms": 1500, "chunk_delay_ms": 150,
    })])
    .unwrap();
    let root = sb.path().to_str().unwrap().to_owned();
    let model = format!("m={}", stub.url());
    let s = Server::start(
        sb.path(),
        &["--root", &root, "--model", &model, "--model-stream", "m"],
    );
    let plan = "plan talk version 1\ngrant llm:chat:m\n\
                say = llm.chat { model: \"m\", messages: [{ role: \"user\", content: \"hi\" }] }\n";
    let (status, v) = start_run(&s, &alice, &json!({"plan": plan}));
    assert_eq!(status, 201, "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    let mut tail = open_stream(&s, &format!("/api/v1/runs/{id}/events/stream"), &alice);
    let mut deltas = Vec::new();
    let mut returned = None;
    let start = Instant::now();
    while returned.is_none() {
        assert!(start.elapsed() < Duration::from_millis(WAIT_MS_MAX));
        for (event, _, data) in sse_events(&mut tail, 1) {
            let v: Value = serde_json::from_str(&data).unwrap();
            match event.as_str() {
                "delta" => deltas.push(v),
                "event" if v["kind"] == "tool_returned" => returned = Some(v),
                _ => {}
            }
        }
    }
    assert!(deltas.len() > 1, "{deltas:?}");
    assert!(
        deltas
            .iter()
            .all(|d| d["step"] == "say" && d["run"] == id.as_str())
    );
    let joined: String = deltas.iter().map(|d| d["text"].as_str().unwrap()).collect();
    let recorded = returned.unwrap();
    assert_eq!(recorded["payload"]["output"]["content"], reply);
    assert_eq!(joined, reply);
    assert_eq!(deltas.last().unwrap()["dropped"], 0);
    // The request asked for a stream, with usage at its end.
    let request = &stub.requests()[0].body;
    assert_eq!(request["stream"], true);
    assert_eq!(request["stream_options"]["include_usage"], true);
    settled(&s, &alice, &id, "completed");
    run(&sb, &["replay", &id], 0);
}

/// `POST /api/v1/runs` honours the plan's `memory "NAME"` line as `oracle run` does: the run's
/// belief memory is the named store's (here taken from a string input, one store per user),
/// recorded in its `run_started`, and its claim is published there.
#[test]
fn a_run_started_through_the_api_attaches_the_store_its_plans_memory_line_names() {
    let (sb, alice, _) = setup();
    let plan = common::ALLERGY_ASSERT
        .replace("plan allergy_assert", "plan api_allergy")
        .replace("input user:", "memory input.user\n\ninput user:");
    let root = sb.path().to_str().unwrap().to_owned();
    let s = Server::start(sb.path(), &["--root", &root]);
    let body = json!({"plan": plan, "inputs": {"user": "carol"}});
    let (status, v) = start_run(&s, &alice, &body);
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["run"], "api_allergy-1");
    settled(&s, &alice, "api_allergy-1", "completed");
    let started = &sb.events(".oracle", "api_allergy-1")[0];
    assert_eq!(started.payload["domains"]["memory"]["store"], "carol");
    let listed = get(&s, "/api/v1/memory/carol/adjudications", &alice);
    assert_eq!(listed["store"]["records"], 1, "{listed}");
    // The same plan from the command line records the same store.
    sb.write("api_allergy.plan", &plan);
    run(
        &sb,
        &["run", "api_allergy.plan", "--input", "user=carol"],
        0,
    );
    assert_eq!(
        sb.events(".oracle", "api_allergy-2")[0].payload["domains"],
        started.payload["domains"]
    );
    // An input that is not a string cannot name a store: refused, nothing started.
    let bad = json!({"plan": plan, "inputs": {"user": 7}});
    let (status, v) = start_run(&s, &alice, &bad);
    assert!(status == 400 || status == 422, "{status} {v}");
}

/// A sleeping run's timer shows on its page (the "Timers" section: step, due instant, not
/// fired) and in `GET /api/v1/runs/{id}` (`waiting_on.timer`, the due instant `timer_set`
/// recorded).
#[test]
fn a_sleeping_runs_timer_is_on_its_page_and_in_the_api() {
    let (sb, alice, _) = setup();
    sb.write(
        "nap.plan",
        "plan nap version 1\n\nnap = sleep { for: \"2d\" }\n",
    );
    run(&sb, &["run", "nap.plan"], 3);
    let set = sb
        .events(".oracle", "nap-1")
        .iter()
        .find_map(|e| match e.typed() {
            Ok(oracle_core::Payload::TimerSet(t)) => Some(t),
            _ => None,
        })
        .expect("a timer_set");
    let s = Server::start(sb.path(), &[]);
    let v = get(&s, "/api/v1/runs/nap-1", &alice);
    let w = &v["waiting_on"];
    assert_eq!(w["step"], "nap", "{v}");
    assert_eq!(w["timer"]["due_ms"], set.due_ms, "{v}");
    assert_eq!(w["timer"]["due"], set.due.as_str(), "{v}");
    assert_eq!(w["reason"], format!("waits until {}", set.due), "{v}");
    let (pair, _) = json_login(&s, &alice);
    let mut r = agent()
        .run(
            ureq::http::Request::builder()
                .method("GET")
                .uri(s.url("/runs/nap-1"))
                .header("Cookie", &pair)
                .body(Vec::new())
                .unwrap(),
        )
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body = r.body_mut().read_to_string().unwrap();
    let timers = body
        .split("<section id=\"timers\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no Timers section: {body}"));
    let timers = &timers[..timers.find("</section>").unwrap()];
    assert!(
        timers.contains("<h2 id=\"timers-h\">Timers</h2>"),
        "{timers}"
    );
    assert!(timers.contains("nap"), "{timers}");
    assert!(timers.contains(&set.due), "{timers}");
    assert!(timers.contains("status-pending"), "not fired yet: {timers}");
}

/// A run started at the terminal that may run `sh`, and waits on a person before it does.
const SHELL_PARENT: &str = "plan shell version 1\n\
grant proc:exec:sh\n\
ok = human.ask { question: \"go?\" }\n";

/// The same plan, brought by a fork: after the answer, a shell command of the forker's.
const SHELL_FORK: &str = "plan shell version 1\n\
grant proc:exec:sh\n\
ok = human.ask { question: \"go?\" }\n\
pwn = proc.exec { program: \"sh\", args: [\"-c\", \"touch pwned\"] }\n  after ok\n";

/// Issue 53's critical finding: `POST /runs/{id}/fork` with a plan ran that plan under the
/// parent's grants, so a token holder ran a shell command of their own, even on a server that
/// starts no runs. Every door that takes a plan (`POST /runs`, a fork through the API and the
/// run page's form, a schedule added through the API) goes through `oracle_host::admit` and
/// refuses what `POST /runs` refuses, with the same code; nothing runs and no run is created.
#[test]
fn every_door_that_takes_a_plan_refuses_what_post_runs_refuses() {
    // The routes walked below are every API route whose body takes a plan, as the server's own
    // OpenAPI description lists them: a new one fails here until it is walked too.
    assert_eq!(
        routes_taking_a_plan(),
        ["/runs", "/runs/{id}/fork", "/schedules"],
        "walk every route that takes a plan"
    );
    let (sb, alice, _) = setup();
    std::fs::write(sb.path().join("shell.plan"), SHELL_PARENT).unwrap();
    run(&sb, &["run", "shell.plan"], 3);
    let runs = || {
        std::fs::read_dir(sb.path().join(".oracle/runs"))
            .unwrap()
            .count()
    };
    let before = runs();
    let fork_body = json!({"step": "ok", "value": "yes", "plan": SHELL_FORK});
    let doors = |s: &Server, pair: &str, csrf: &str| -> Vec<(&'static str, u16, String)> {
        let mut out = Vec::new();
        let (st, v) = start_run(s, &alice, &json!({"plan": SHELL_FORK}));
        out.push(("POST /api/v1/runs", st, v["error"]["code"].to_string()));
        let url = s.url("/api/v1/runs/shell-1/fork");
        let (st, v) = call("POST", &url, Some(&alice), Some(&fork_body));
        out.push((
            "POST /api/v1/runs/{id}/fork",
            st,
            v["error"]["code"].to_string(),
        ));
        let sched = json!({"name": "nightly", "cron": "0 3 * * *", "plan": SHELL_FORK});
        let (st, v) = call(
            "POST",
            &s.url("/api/v1/schedules"),
            Some(&alice),
            Some(&sched),
        );
        out.push(("POST /api/v1/schedules", st, v["error"]["code"].to_string()));
        let form = format!(
            "csrf={csrf}&step=ok&at=&value=%22yes%22&plan={}",
            form_encode(SHELL_FORK)
        );
        let (st, body) = form_post(s, "/runs/shell-1/fork", pair, &form);
        out.push(("POST /runs/{id}/fork (form)", st, body));
        out
    };
    // Without --root: every door says the server starts no runs.
    let s = Server::start(sb.path(), &[]);
    let (pair, csrf) = json_login(&s, &alice);
    for (door, status, code) in doors(&s, &pair, &csrf) {
        assert_eq!(status, 403, "{door}: {code}");
        if !door.ends_with("(form)") {
            assert_eq!(code, "\"starts_off\"", "{door}");
        }
    }
    drop(s);
    // With --root: the program-running grant (the plan's own, or the parent's the fork keeps)
    // is refused at every door with the code `POST /runs` gives.
    let root = sb.path().to_str().unwrap().to_owned();
    let s = Server::start(sb.path(), &["--root", &root]);
    let (pair, csrf) = json_login(&s, &alice);
    for (door, status, code) in doors(&s, &pair, &csrf) {
        assert_eq!(status, 403, "{door}: {code}");
        if door.ends_with("(form)") {
            assert!(code.contains("cannot run programs"), "{door}: {code}");
        } else {
            assert_eq!(code, "\"not_allowed\"", "{door}");
        }
    }
    // A fork of a parent that may run programs is refused even when the plan given names no
    // such grant: the fork keeps the parent's grants.
    let quiet = SHELL_FORK.replace("grant proc:exec:sh\n", "");
    let body = json!({"step": "ok", "value": "yes", "plan": quiet});
    let (status, v) = call(
        "POST",
        &s.url("/api/v1/runs/shell-1/fork"),
        Some(&alice),
        Some(&body),
    );
    assert_error(status, &v, 403, "not_allowed");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("recorded grant `proc:exec:sh`"),
        "{v}"
    );
    assert!(!sb.path().join("pwned").exists(), "no shell command ran");
    assert_eq!(runs(), before, "no run was created");
    // The person at the terminal forks with their own plan as before.
    std::fs::write(sb.path().join("fork.plan"), SHELL_FORK).unwrap();
    run(
        &sb,
        &[
            "fork",
            "shell-1",
            "--step",
            "ok",
            "--value",
            "\"yes\"",
            "--plan",
            "fork.plan",
        ],
        0,
    );
    assert!(
        sb.path().join("pwned").exists(),
        "the terminal's own fork ran"
    );
}

/// `application/x-www-form-urlencoded` for a form field's value.
fn form_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The `/api/v1` routes (POST) whose request body has a `plan` property, by docs/openapi.json,
/// which the server serves as its own description (`openapi_describes_every_route`).
fn routes_taking_a_plan() -> Vec<String> {
    let api: Value =
        serde_json::from_str(include_str!("../../docs/openapi.json")).expect("docs/openapi.json");
    let schema = |v: &Value| -> Value {
        match v["$ref"].as_str() {
            Some(r) => api
                .pointer(&r.replacen('#', "", 1))
                .cloned()
                .unwrap_or_default(),
            None => v.clone(),
        }
    };
    let mut out: Vec<String> = api["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, ops)| {
            let body = &ops["post"]["requestBody"]["content"]["application/json"]["schema"];
            schema(body)["properties"].get("plan").is_some()
        })
        .map(|(p, _)| p.clone())
        .collect();
    out.sort();
    out
}
