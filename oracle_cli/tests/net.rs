//! `http.request` and run secrets end to end: the real binary against servers on 127.0.0.1
//! (the scripted stub). Grants by origin, redirects checked again, secrets put into headers and
//! `proc.exec` environments but never into the run directory, and replay without a server.

use crate::common;

use std::fs;
use std::path::Path;

use common::Sandbox;
use oracle_core::EventKind;
use oracle_llm_stub::Stub;
use serde_json::{Value, json};

const SECRET: &str = "tok-0123456789abcdef-never-recorded";

/// `http://127.0.0.1:PORT` of a stub.
fn origin(stub: &Stub) -> String {
    format!("http://{}", stub.addr())
}

/// Writes a one-step plan granting `grant` and calling `call` (attempts 1).
fn plan(sb: &Sandbox, grant: &str, call: &str) -> String {
    sb.write(
        "plans/net.plan",
        &format!(
            "plan net version 1\ngrant proc:exec:sh\ngrant \"{grant}\"\nstep = {call}\n  attempts 1\n"
        ),
    );
    "plans/net.plan".into()
}

/// Runs `oracle ARGS --json` with the secret's variable set: exit code and result.
fn run(sb: &Sandbox, args: &[&str]) -> (i32, Value) {
    let out = sb
        .command(args)
        .arg("--json")
        .env("ORACLE_TEST_TOKEN", SECRET)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

fn outcome(sb: &Sandbox, run: &str) -> (EventKind, Value) {
    let e = sb
        .events(".oracle", run)
        .into_iter()
        .rfind(|e| {
            matches!(
                e.kind,
                EventKind::ToolReturned | EventKind::ToolFailed | EventKind::CapabilityDenied
            )
        })
        .unwrap();
    (e.kind, e.payload)
}

fn nothing_in(dir: &Path, secret: &str) {
    for entry in fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            nothing_in(&p, secret);
        } else {
            let text = String::from_utf8_lossy(&fs::read(&p).unwrap()).into_owned();
            assert!(!text.contains(secret), "the secret is in {}", p.display());
        }
    }
}

#[test]
fn a_granted_get_returns_json_and_replays_without_the_server() {
    let sb = Sandbox::new();
    let stub = Stub::start(vec![json!({"raw": "{\"items\": [1, 2], \"next\": null}"})]).unwrap();
    let o = origin(&stub);
    let p = plan(
        &sb,
        &format!("net:http:{o}"),
        &format!("http.request {{ method: \"GET\", url: \"{o}/v1/items?page=1\" }}"),
    );
    let (code, v) = run(&sb, &["run", &p]);
    assert_eq!(code, 0, "{v}");
    let run_id = v["run"].as_str().unwrap().to_owned();
    let (kind, payload) = outcome(&sb, &run_id);
    assert_eq!(kind, EventKind::ToolReturned);
    assert_eq!(payload["output"]["status"], 200);
    assert_eq!(
        payload["output"]["json"],
        json!({"items": [1, 2], "next": null})
    );
    assert_eq!(
        payload["output"]["headers"]["content-type"],
        "application/json"
    );
    assert_eq!(stub.requests()[0].path, "/v1/items?page=1");
    drop(stub);
    let (code, r) = sb.json(&["replay", &run_id, "--json"]);
    assert_eq!(code, 0, "{r}");
}

#[test]
fn only_the_granted_origin_is_reached_and_redirects_are_checked_again() {
    let sb = Sandbox::new();
    let elsewhere = Stub::start(vec![json!({"raw": "{\"stolen\": true}"})]).unwrap();
    let target = format!("{}/collect", origin(&elsewhere));
    let stub = Stub::start(vec![
        json!({"status": 302, "headers": {"Location": target}, "body": ""}),
        json!({"status": 301, "headers": {"Location": "/moved"}, "body": ""}),
        json!({"raw": "{\"here\": true}"}),
    ])
    .unwrap();
    let o = origin(&stub);
    let grant = format!("net:http:{o}");

    // Another port of the same host is another origin: denied before anything is sent (the
    // URL comes from an input, so the plan's own check cannot see it).
    sb.write(
        "plans/input.plan",
        &format!(
            "plan fetch version 1\ngrant \"{grant}\"\ninput url: string\nstep = http.request {{ method: \"GET\", url: url }}\n  attempts 1\n"
        ),
    );
    let url = format!("url={}/x", origin(&elsewhere));
    let (code, v) = run(&sb, &["run", "plans/input.plan", "--input", &url]);
    assert_eq!(code, 1, "{v}");
    let (kind, _) = outcome(&sb, v["run"].as_str().unwrap());
    assert_eq!(kind, EventKind::CapabilityDenied);
    assert!(elsewhere.requests().is_empty());

    // A redirect out of the grant is not followed.
    let p = plan(
        &sb,
        &grant,
        &format!("http.request {{ method: \"GET\", url: \"{o}/a\" }}"),
    );
    let (code, v) = run(&sb, &["run", &p]);
    assert_eq!(code, 1, "{v}");
    let (kind, payload) = outcome(&sb, v["run"].as_str().unwrap());
    assert_eq!(kind, EventKind::ToolFailed);
    let error = payload["error"].as_str().unwrap();
    assert!(
        error.contains("is not followed: no grant covers"),
        "{error}"
    );
    assert!(elsewhere.requests().is_empty());

    // One inside it is.
    let (code, v) = run(&sb, &["run", &p]);
    assert_eq!(code, 0, "{v}");
    let (_, payload) = outcome(&sb, v["run"].as_str().unwrap());
    assert_eq!(payload["output"]["json"], json!({"here": true}));
    let paths: Vec<String> = stub.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/a", "/a", "/moved"]);
}

#[test]
fn a_secret_header_is_sent_but_never_recorded_and_an_echo_is_refused() {
    let sb = Sandbox::new();
    let stub = Stub::start(vec![
        json!({"raw": "{\"ok\": true}"}),
        json!({"raw": format!("{{\"echo\": \"Bearer {SECRET}\"}}")}),
    ])
    .unwrap();
    let o = origin(&stub);
    let p = plan(
        &sb,
        &format!("net:http:{o}"),
        &format!(
            "http.request {{ method: \"POST\", url: \"{o}/send\", headers: {{ Authorization: secret(\"TOKEN\") }}, json: {{ a: 1 }} }}"
        ),
    );
    let args = ["run", p.as_str(), "--secret", "TOKEN=ORACLE_TEST_TOKEN"];
    let (code, v) = run(&sb, &args);
    assert_eq!(code, 0, "{v}");
    let sent = &stub.requests()[0];
    assert_eq!(sent.header("authorization"), Some(SECRET));
    assert_eq!(sent.body, json!({"a": 1}));
    // The log has the secret's name where the plan used it.
    let run_id = v["run"].as_str().unwrap();
    let called = sb
        .events(".oracle", run_id)
        .into_iter()
        .find(|e| e.kind == EventKind::ToolCalled)
        .unwrap();
    assert_eq!(
        called.payload["input"]["headers"]["Authorization"],
        json!({"$secret": "TOKEN"})
    );

    // A reply that echoes it is not recorded.
    let (code, v) = run(&sb, &args);
    assert_eq!(code, 1, "{v}");
    let (_, payload) = outcome(&sb, v["run"].as_str().unwrap());
    assert_eq!(
        payload["error"],
        "the output contains the value of secret `TOKEN`; it is not recorded"
    );
    nothing_in(&sb.path().join(".oracle"), SECRET);
    let meta = fs::read_to_string(sb.path().join(".oracle/runs/net-1/run.json")).unwrap();
    assert!(meta.contains("ORACLE_TEST_TOKEN"), "{meta}");
}

#[test]
fn a_secret_reaches_a_program_through_env_only_and_missing_secrets_are_named() {
    let sb = Sandbox::new();
    // The program can use the value (here: its length) without it entering the record.
    let p = plan(
        &sb,
        "kv:get:none",
        &format!(
            "proc.exec {{ program: \"sh\", args: [\"-c\", \"test ${{#TOKEN}} = {} && echo matched\"], env: {{ TOKEN: secret(\"TOKEN\") }} }}",
            SECRET.len()
        ),
    );
    let (code, v) = run(&sb, &["run", &p, "--secret", "TOKEN=ORACLE_TEST_TOKEN"]);
    assert_eq!(code, 0, "{v}");
    let (_, payload) = outcome(&sb, v["run"].as_str().unwrap());
    assert_eq!(payload["output"]["stdout"], "matched\n");
    // A program that prints it fails its call instead of recording it.
    let p = plan(
        &sb,
        "kv:get:none",
        "proc.exec { program: \"sh\", args: [\"-c\", \"echo $TOKEN\"], env: { TOKEN: secret(\"TOKEN\") } }",
    );
    let (code, v) = run(&sb, &["run", &p, "--secret", "TOKEN=ORACLE_TEST_TOKEN"]);
    assert_eq!(code, 1, "{v}");
    let (_, payload) = outcome(&sb, v["run"].as_str().unwrap());
    assert_eq!(
        payload["error"],
        "the output contains the value of secret `TOKEN`; it is not recorded"
    );
    // Without --secret, or with an unset variable, nothing runs, naming the flag.
    let (code, _, err) = sb.oracle(&["run", &p]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the plan's secret `TOKEN` is not bound: pass --secret TOKEN=ENV_VAR"),
        "{err}"
    );
    let (code, _, err) = sb.oracle(&["run", &p, "--secret", "TOKEN=ORACLE_NO_SUCH_VAR"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ORACLE_NO_SUCH_VAR is not set"), "{err}");
    nothing_in(&sb.path().join(".oracle"), SECRET);
}

#[test]
fn a_server_error_is_retried_as_a_recorded_attempt_and_urls_must_be_http() {
    let sb = Sandbox::new();
    let stub = Stub::start(vec![
        json!({"status": 503}),
        json!({"raw": "plain text", "content_type": "text/plain"}),
    ])
    .unwrap();
    let o = origin(&stub);
    sb.write(
        "plans/again.plan",
        &format!(
            "plan again version 1\ngrant \"net:http:{o}\"\nstep = http.request {{ method: \"GET\", url: \"{o}/t\" }}\n  attempts 2\n"
        ),
    );
    let (code, v) = run(&sb, &["run", "plans/again.plan"]);
    assert_eq!(code, 0, "{v}");
    let run_id = v["run"].as_str().unwrap();
    let events = sb.events(".oracle", run_id);
    let failed: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolFailed)
        .map(|e| e.payload["error"].as_str().unwrap())
        .collect();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].contains("answered HTTP 503 (retryable)"),
        "{}",
        failed[0]
    );
    let (_, payload) = outcome(&sb, run_id);
    assert_eq!(payload["output"]["body"], "plain text");

    // A URL with user information, or another scheme, has no origin: no grant covers it.
    sb.write(
        "plans/input.plan",
        "plan fetch version 1\ngrant \"net:http:**\"\ninput url: string\nstep = http.request { method: \"GET\", url: url }\n  attempts 1\n",
    );
    for url in ["http://user@127.0.0.1:1/", "ftp://127.0.0.1/x"] {
        let arg = format!("url={url}");
        let (code, v) = run(&sb, &["run", "plans/input.plan", "--input", &arg]);
        assert_eq!(code, 1, "{url}: {v}");
        let (kind, _) = outcome(&sb, v["run"].as_str().unwrap());
        assert_eq!(kind, EventKind::CapabilityDenied, "{url}");
    }
}
