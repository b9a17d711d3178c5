//! Observability end to end (docs/OBSERVABILITY.md): `GET /metrics` on the real `oracle serve`
//! parsed with a Prometheus text parser, its counters compared with what `oracle log --json`
//! shows of the same run, rejected replies' tokens included.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{at, samples};
use oracle_llm_stub::Stub;
use serde_json::{Value, json};

/// A running `oracle serve`, stopped (killed) when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(dir: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_oracle"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("no listening line: {line:?}"))
            .to_owned();
        Server { child, base }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `url` with an optional bearer token: status, content type, body.
fn get(url: &str, token: Option<&str>) -> (u16, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut b = ureq::http::Request::builder().method("GET").uri(url);
    if let Some(t) = token {
        b = b.header("Authorization", format!("Bearer {t}"));
    }
    let mut r = agent.run(b.body(()).unwrap()).unwrap();
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let status = r.status().as_u16();
    (
        status,
        ct,
        r.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// The events of `run` as `oracle log RUN --json` prints them.
fn logged(sb: &common::Sandbox, run: &str) -> Vec<Value> {
    let (code, out, err) = sb.oracle(&["log", run, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap_or(Value::Null);
    match v {
        Value::Array(events) => events,
        _ => out
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    }
}

fn payload_sum(events: &[Value], kind: &str, pointer: &str) -> u64 {
    events
        .iter()
        .filter(|e| e["kind"] == kind)
        .filter_map(|e| e["payload"].pointer(pointer).and_then(Value::as_u64))
        .sum()
}

fn count(events: &[Value], kind: &str) -> u64 {
    events.iter().filter(|e| e["kind"] == kind).count() as u64
}

#[test]
fn metrics_parse_as_prometheus_text_and_match_the_runs_log() {
    let sb = common::Sandbox::new();
    let (code, token, err) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_owned();
    // A rejected reply (prose where JSON was asked) then a good one: both charged.
    let stub = Stub::start(vec![
        json!({"content": "prose", "usage": {"prompt_tokens": 12, "completion_tokens": 6}}),
        json!({"json": {"ok": true}, "usage": {"prompt_tokens": 20, "completion_tokens": 5}}),
    ])
    .unwrap();
    sb.write(
        "plans/one.plan",
        "plan one version 1\ngrant llm:chat:m\n\
         ask = llm.chat { model: \"m\", messages: [{ role: \"user\", content: \"hi\" }], schema: { type: \"object\", required: [\"ok\"] } }\n  attempts 2\n",
    );
    let (code, v) = sb.json(&[
        "run",
        "plans/one.plan",
        "--model",
        &format!("m={}", stub.url()),
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let server = Server::start(sb.path(), &[]);
    let url = format!("{}/metrics", server.base);
    // A read like any other: no token, no metrics.
    let (status, _, _) = get(&url, None);
    assert_eq!(status, 401);
    let (status, ct, text) = get(&url, Some(&token));
    assert_eq!(status, 200, "{text}");
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let m = samples(&text);
    let events = logged(&sb, &run);
    let returned = count(&events, "tool_returned");
    let failed = count(&events, "tool_failed");
    assert_eq!((returned, failed), (1, 1));
    assert_eq!(at(&m, "oracle_runs", &[("status", "completed")]), 1);
    let attempts = "oracle_step_attempts_total";
    assert_eq!(at(&m, attempts, &[("outcome", "returned")]), returned);
    assert_eq!(at(&m, attempts, &[("outcome", "failed")]), failed);
    let tools = "oracle_tool_calls_total";
    assert_eq!(
        at(&m, tools, &[("tool", "llm.chat"), ("outcome", "failed")]),
        failed
    );
    let calls = events
        .iter()
        .filter(|e| e["kind"] == "tool_called" && e["payload"]["tool"] == "llm.chat")
        .count() as u64;
    assert_eq!(at(&m, "oracle_model_calls_total", &[("model", "m")]), calls);
    let input = payload_sum(&events, "tool_returned", "/output/usage/prompt_tokens")
        + payload_sum(&events, "tool_failed", "/usage/prompt_tokens");
    let output = payload_sum(&events, "tool_returned", "/output/usage/completion_tokens")
        + payload_sum(&events, "tool_failed", "/usage/completion_tokens");
    assert_eq!((input, output), (32, 11));
    let tokens = "oracle_model_tokens_total";
    assert_eq!(at(&m, tokens, &[("model", "m"), ("type", "input")]), input);
    assert_eq!(
        at(&m, tokens, &[("model", "m"), ("type", "output")]),
        output
    );
    // A second scrape of an unchanged home says the same (the tallies are kept).
    let (_, _, again) = get(&url, Some(&token));
    assert_eq!(samples(&again), m);
}
