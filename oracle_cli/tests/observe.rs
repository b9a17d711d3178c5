//! Observability end to end (docs/OBSERVABILITY.md): `GET /metrics` on the real `oracle serve`
//! parsed with a Prometheus text parser, its counters compared with what `oracle log --json`
//! shows of the same run, rejected replies' tokens included.

use crate::common;
use crate::web;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{at, samples};
use oracle_llm_stub::Stub;
use serde_json::{Value, json};
use web::Killed;

/// A running `oracle serve`, stopped (killed) when dropped.
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

/// A sandbox with a server token `alice`, and a completed run of a plan whose step `ask` gets
/// a rejected reply (prose where JSON was asked) then a good one, both charged (32 input and
/// 11 output tokens), followed by `more` (further plan lines): the token and the run id.
fn charged_run(sb: &common::Sandbox, more: &str) -> (String, String) {
    let (code, token, err) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    let stub = Stub::start(vec![
        json!({"content": "prose", "usage": {"prompt_tokens": 12, "completion_tokens": 6}}),
        json!({"json": {"ok": true}, "usage": {"prompt_tokens": 20, "completion_tokens": 5}}),
    ])
    .unwrap();
    sb.write(
        "plans/one.plan",
        &format!(
            "plan one version 1\ngrant llm:chat:m\n\
             ask = llm.chat {{ model: \"m\", messages: [{{ role: \"user\", content: \"hi\" }}], schema: {{ type: \"object\", required: [\"ok\"] }} }}\n  attempts 2\n{more}"
        ),
    );
    let model = format!("m={}", stub.url());
    let (code, v) = sb.json(&["run", "plans/one.plan", "--model", &model, "--json"]);
    assert_eq!(code, 0, "{v}");
    (
        token.trim().to_owned(),
        v["run"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn metrics_parse_as_prometheus_text_and_match_the_runs_log() {
    let sb = common::Sandbox::new();
    let (token, run) = charged_run(&sb, "");
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
    // Cost at the given prices (micro-units per 1M tokens), rejected reply included:
    // 32 * 3,000,000 / 1M + 11 * 15,000,000 / 1M = 96 + 165.
    let price = ["inspect", &run, "--model-price", "m=3000000/15000000"];
    let (code, out, err) = sb.oracle(&price);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cost   0.000261 (261 micro-units)"), "{out}");
    let (code, v) = sb.json(&["inspect", &run, "--model-price", "other=1/1", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["cost"], json!({"micro": 0, "unpriced": ["m"]}));
    let (code, _, err) = sb.oracle(&["inspect", &run, "--model-price", "m=1.5/2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--model-price"), "{err}");
}

/// Cost and latency per run and per step (issue 41, item 4): `inspect --steps`, `runs`, the
/// timeline route and the run page agree with the recorded usage; prices come from flags or
/// the config file's `[prices]`; wall times come from the times file beside the log, and
/// editing that file changes durations only, never what the log proves.
#[test]
fn cost_and_latency_show_per_step_in_inspect_runs_the_api_and_the_run_page() {
    let sb = common::Sandbox::new();
    let (token, run) = charged_run(&sb, "stats = text.count { text: \"one two\" }\n");
    let price = "m=3000000/15000000";
    // Per step: the model step has both replies' tokens (the rejected one included) and two
    // attempts; the pure step none. 32 * 3 + 11 * 15 = 261 micro-units.
    let (code, t) = sb.json(&["inspect", &run, "--steps", "--model-price", price, "--json"]);
    assert_eq!(code, 0, "{t}");
    let steps = t["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(names, ["ask", "stats"]);
    assert_eq!(
        (steps[0]["tokens"].as_u64(), steps[0]["attempts"].as_u64()),
        (Some(43), Some(2))
    );
    assert_eq!(steps[0]["cost"], json!({"micro": 261, "unpriced": []}));
    assert_eq!(steps[1]["tokens"], 0);
    assert_eq!(
        (t["tokens"].as_u64(), t["cost"]["micro"].as_u64()),
        (Some(43), Some(261))
    );
    for s in steps {
        assert!(s["wall_ms"].is_u64() && s["offset_ms"].is_u64(), "{s}");
    }
    assert!(t["wall_ms"].as_u64().unwrap() >= steps[0]["wall_ms"].as_u64().unwrap());
    let (code, out, err) = sb.oracle(&["inspect", &run, "--steps", "--model-price", price]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("STEP"), "{out}");
    assert!(out.contains("tokens, cost 0.000261"), "{out}");
    // `runs`: a wall time in the table, the cost from the config file's `[prices]`.
    sb.write("oracle.toml", "[prices]\nm = \"3000000/15000000\"\n");
    let (code, out, err) = sb.oracle(&["runs"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().next().unwrap().contains("WALL"), "{out}");
    assert!(
        out.contains("cost 0.000261; 2 model calls, 43 tokens"),
        "{out}"
    );
    let (code, out, err) = sb.oracle(&["runs", "--json"]);
    assert_eq!(code, 0, "{err}");
    let row: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(row["cost"]["micro"], 261);
    assert!(row["wall_ms"].is_u64(), "{row}");
    let (code, v) = sb.json(&["config", "show", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["settings"]["prices.m"]["value"], "3000000/15000000");
    // A malformed price in the file is refused with its line.
    sb.write("oracle.toml", "[prices]\nm = \"1.5/2\"\n");
    let (code, _, err) = sb.oracle(&["runs"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("oracle.toml:2") && err.contains("prices.m"),
        "{err}"
    );
    std::fs::remove_file(sb.path().join("oracle.toml")).unwrap();
    // The server: the timeline route and the run page, with the server's prices.
    let server = Server::start(sb.path(), &["--model-price", price, "--read-open"]);
    let (status, _, body) = get(
        &format!("{}/api/v1/runs/{run}/timeline", server.base),
        Some(&token),
    );
    assert_eq!(status, 200, "{body}");
    let api: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(api["steps"], t["steps"], "the API and the CLI agree");
    let (status, _, body) = get(&format!("{}/api/v1/runs/{run}", server.base), Some(&token));
    assert_eq!(status, 200, "{body}");
    let summary: Value = serde_json::from_str(&body).unwrap();
    assert!(summary["wall_ms"].is_u64(), "{summary}");
    let (status, _, page) = get(&format!("{}/runs/{run}", server.base), Some(&token));
    assert_eq!(status, 200);
    assert!(page.contains("<h2 id=\"latency-h\">Latency</h2>"), "{page}");
    assert!(page.contains("cost 0.000261"), "{page}");
    drop(server);
    // The times file is advisory: with it gone the durations are unknown, the run verifies
    // and replays as before, and the tokens still count.
    std::fs::remove_file(
        sb.path()
            .join(format!(".oracle/runs/{run}/events.jsonl.times")),
    )
    .unwrap();
    let (code, t) = sb.json(&["inspect", &run, "--steps", "--json"]);
    assert_eq!(code, 0, "{t}");
    assert_eq!(
        (t["wall_ms"].clone(), t["tokens"].as_u64()),
        (Value::Null, Some(43))
    );
    assert_eq!(sb.oracle(&["verify", &run]).0, 0);
    assert_eq!(sb.oracle(&["replay", &run]).0, 0);
}

/// A small OTLP/HTTP receiver on 127.0.0.1: takes `POST /v1/traces`, decodes the protobuf
/// body, answers 200 with an empty export response.
struct Collector {
    url: String,
    got: std::sync::Arc<std::sync::Mutex<Vec<ExportTraceServiceRequest>>>,
}

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;

impl Collector {
    fn start() -> Collector {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Some(req) = receive(stream) {
                    kept.lock().unwrap().push(req);
                }
            }
        });
        Collector { url, got }
    }

    /// Every span received: (trace id hex, name, attributes as text).
    fn spans(&self) -> Vec<(String, String, BTreeMap<String, String>)> {
        let mut out = Vec::new();
        for req in self.got.lock().unwrap().iter() {
            for rs in &req.resource_spans {
                for ss in &rs.scope_spans {
                    for s in &ss.spans {
                        let attrs = s
                            .attributes
                            .iter()
                            .map(|kv| {
                                (
                                    kv.key.clone(),
                                    any_text(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                                )
                            })
                            .collect();
                        let trace: String = s.trace_id.iter().map(|b| format!("{b:02x}")).collect();
                        out.push((trace, s.name.clone(), attrs));
                    }
                }
            }
        }
        out
    }

    /// When the run's root span (`run RUN`) started, in unix milliseconds.
    fn root_start_ms(&self) -> Option<u64> {
        let got = self.got.lock().unwrap();
        got.iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|rs| &rs.scope_spans)
            .flat_map(|ss| &ss.spans)
            .find(|s| s.name.starts_with("run "))
            .map(|s| s.start_time_unix_nano / 1_000_000)
    }
}

fn any_text(v: Option<&Any>) -> String {
    match v {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

/// Reads one request; answers it; the decoded body of a `POST /v1/traces`.
fn receive(mut stream: std::net::TcpStream) -> Option<ExportTraceServiceRequest> {
    use prost::Message;
    use std::io::{Read, Write};
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while data.len() < head_end + len {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
    }
    let ok = head.starts_with("post /v1/traces ") && head.contains("application/x-protobuf");
    let status = if ok { "200 OK" } else { "404 Not Found" };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    ok.then(|| ExportTraceServiceRequest::decode(&data[head_end..head_end + len]).ok())?
}

/// A sandbox with `plans/asks.plan` (a model call that fails once, then a person's answer,
/// then a pure step) and a stub scripted for its two model calls (32 input, 11 output tokens).
fn asks() -> (common::Sandbox, Stub) {
    let sb = common::Sandbox::new();
    let stub = Stub::start(vec![
        json!({"content": "prose", "usage": {"prompt_tokens": 12, "completion_tokens": 6}}),
        json!({"json": {"ok": true}, "usage": {"prompt_tokens": 20, "completion_tokens": 5}}),
    ])
    .unwrap();
    sb.write(
        "plans/asks.plan",
        "plan asks version 1\ngrant llm:chat:m\n\
         ask = llm.chat { model: \"m\", messages: [{ role: \"user\", content: \"hi\" }], schema: { type: \"object\", required: [\"ok\"] } }\n  attempts 2\n\
         go = human.ask { question: \"Go on?\" }\n  after ask\n\
         done = text.count { text: \"all done\" }\n  after go\n",
    );
    (sb, stub)
}

#[test]
fn a_runs_trace_reaches_a_collector_and_a_resumed_run_joins_the_same_trace() {
    let (sb, stub) = asks();
    let (code, v) = sb.json(&[
        "run",
        "plans/asks.plan",
        "--model",
        &format!("m={}", stub.url()),
        "--json",
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let first = Collector::start();
    let (code, v) = sb.json(&["export", &run, "--otlp", &first.url, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["dropped"], 0, "{v}");
    let spans = first.spans();
    // The spans take their instants from the times file beside the log: the root span starts
    // when event 0 was recorded.
    let times = std::fs::read(
        sb.path()
            .join(format!(".oracle/runs/{run}/events.jsonl.times")),
    )
    .unwrap();
    let event0_ms = u64::from_le_bytes(times[8..16].try_into().unwrap());
    assert_eq!(first.root_start_ms(), Some(event0_ms));
    assert_eq!(
        spans.len() as u64,
        v["spans"].as_u64().unwrap(),
        "{spans:?}"
    );
    let trace = v["trace_id"].as_str().unwrap().to_owned();
    assert!(
        spans
            .iter()
            .all(|(t, _, a)| *t == trace && a["oracle.run.id"] == run)
    );
    // Every span names the event that ended it, by seq and hash, as `oracle log` shows it.
    let events = logged(&sb, &run);
    for (_, name, a) in &spans {
        let seq: usize = a["oracle.seq"].parse().unwrap();
        assert_eq!(
            a["oracle.head"],
            events[seq]["hash"].as_str().unwrap(),
            "{name}"
        );
    }
    let names: Vec<&str> = spans.iter().map(|(_, n, _)| n.as_str()).collect();
    assert!(
        names.contains(&"step ask") && names.contains(&"step go"),
        "{names:?}"
    );
    let chats: Vec<_> = spans.iter().filter(|(_, n, _)| n == "chat m").collect();
    assert_eq!(chats.len(), 2, "{names:?}");
    for (_, _, a) in &chats {
        assert_eq!(a["gen_ai.request.model"], "m");
        assert!(a.contains_key("gen_ai.usage.input_tokens"), "{a:?}");
    }
    let input: u64 = chats
        .iter()
        .map(|(_, _, a)| a["gen_ai.usage.input_tokens"].parse::<u64>().unwrap())
        .sum();
    let output: u64 = chats
        .iter()
        .map(|(_, _, a)| a["gen_ai.usage.output_tokens"].parse::<u64>().unwrap())
        .sum();
    assert_eq!((input, output), (32, 11));
    // Resumed, exported again: the same trace, now with the later steps.
    let (code, out, err) = sb.oracle(&["resume", &run, "--step", "go", "--value", "true"]);
    assert_eq!(code, 0, "{out}{err}");
    let second = Collector::start();
    let (code, v) = sb.json(&["export", &run, "--otlp", &second.url, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["trace_id"], trace.as_str());
    let spans = second.spans();
    assert!(spans.iter().all(|(t, _, _)| *t == trace));
    assert!(spans.iter().any(|(_, n, _)| n == "step done"), "{spans:?}");
    // An unreachable collector: the spans are dropped and counted, and the command succeeds.
    let (code, out, err) = sb.oracle(&["export", &run, "--otlp", "http://127.0.0.1:9"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("spans dropped"), "{err}");
    assert!(out.contains("0 spans sent"), "{out}");
}

/// Live span export (`--otlp` on `run` and `resume`): the spans reach the collector while the
/// command runs (before it exits), with the trace id, names and attributes of `oracle export
/// --otlp`; the resumed drive's spans join the same trace, closing the attempt opened before
/// the resume and the run's root span; an unreachable collector is a warning, not a failure.
#[test]
fn a_live_runs_spans_reach_a_collector_and_a_resumed_drive_joins_the_same_trace() {
    let (sb, stub) = asks();
    let live = Collector::start();
    let model = format!("m={}", stub.url());
    let (code, out, err) = sb.oracle(&[
        "run",
        "plans/asks.plan",
        "--model",
        &model,
        "--otlp",
        &live.url,
    ]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(!err.contains("dropped"), "{err}");
    let run = "asks-1";
    let spans = live.spans();
    // The trace `oracle export --otlp` names for the run.
    let again = Collector::start();
    let (code, v) = sb.json(&["export", run, "--otlp", &again.url, "--json"]);
    assert_eq!(code, 0, "{v}");
    let trace = v["trace_id"].as_str().unwrap().to_owned();
    assert!(
        spans
            .iter()
            .all(|(t, _, a)| *t == trace && a["oracle.run.id"] == run),
        "{spans:?}"
    );
    let names: Vec<&str> = spans.iter().map(|(_, n, _)| n.as_str()).collect();
    // Two attempts of `ask`, each with its model call; `go` is still waiting.
    assert_eq!(
        names.iter().filter(|n| **n == "step ask").count(),
        2,
        "{names:?}"
    );
    assert!(!names.contains(&"step go"), "{names:?}");
    let chats: Vec<_> = spans.iter().filter(|(_, n, _)| n == "chat m").collect();
    assert_eq!(chats.len(), 2, "{names:?}");
    let tokens = |key: &str| -> u64 {
        chats
            .iter()
            .map(|(_, _, a)| a[key].parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(
        (
            tokens("gen_ai.usage.input_tokens"),
            tokens("gen_ai.usage.output_tokens")
        ),
        (32, 11)
    );
    assert!(
        chats
            .iter()
            .all(|(_, _, a)| a["gen_ai.request.model"] == "m")
    );
    // Every span names the event that ended it, as `oracle log` shows it.
    let events = logged(&sb, run);
    for (_, name, a) in &spans {
        let seq: usize = a["oracle.seq"].parse().unwrap();
        assert_eq!(
            a["oracle.head"],
            events[seq]["hash"].as_str().unwrap(),
            "{name}"
        );
    }
    // Resumed with --otlp: the same trace; `go` (opened before the resume) and `done` end
    // now, and the run's root span comes with its end.
    let resumed = Collector::start();
    let (code, out, err) = sb.oracle(&[
        "resume",
        run,
        "--step",
        "go",
        "--value",
        "true",
        "--otlp",
        &resumed.url,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let spans = resumed.spans();
    assert!(spans.iter().all(|(t, _, _)| *t == trace), "{spans:?}");
    let names: Vec<&str> = spans.iter().map(|(_, n, _)| n.as_str()).collect();
    for want in ["step go", "step done", "run asks-1"] {
        assert!(names.contains(&want), "{want}: {names:?}");
    }
    assert!(!names.contains(&"step ask"), "{names:?}");
    // A collector nobody listens on (a closed loopback port): the run goes on and completes,
    // and the command says how many spans it dropped.
    let stub = Stub::start(vec![json!({"json": {"ok": true}})]).unwrap();
    let model = format!("m={}", stub.url());
    let (code, out, err) = sb.oracle(&[
        "run",
        "plans/asks.plan",
        "--model",
        &model,
        "--otlp",
        "http://127.0.0.1:9",
    ]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("spans dropped"), "{err}");
    let (code, out, err) = sb.oracle(&[
        "resume",
        "asks-2",
        "--step",
        "go",
        "--value",
        "true",
        "--otlp",
        "http://127.0.0.1:9",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("spans dropped"), "{err}");
}

/// `oracle serve --otlp URL` wakes a sleeping run with its timer wheel: the woken drive's spans
/// reach the collector in the run's trace, and `/metrics` counts the timer's lag
/// (`oracle_timer_lag_seconds`, a histogram) as the log records it: `fired_ms - due_ms`.
#[test]
fn a_timer_the_server_wakes_shows_its_lag_in_metrics_and_its_spans_reach_the_collector() {
    let sb = common::Sandbox::new();
    let (code, token, err) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_owned();
    sb.write(
        "nap.plan",
        "plan nap version 1\n\nnap = sleep { for: \"1s\" }\ndone = text.count { text: nap.fired }\n",
    );
    let (code, _, err) = sb.oracle(&["run", "nap.plan"]);
    assert_eq!(code, 3, "{err}");
    let collector = Collector::start();
    let server = Server::start(sb.path(), &["--otlp", &collector.url]);
    let finished = || {
        logged(&sb, "nap-1")
            .last()
            .is_some_and(|e| e["kind"] == "run_finished")
    };
    web::wait_until("the server to wake nap-1", finished);
    let events = logged(&sb, "nap-1");
    let fired: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "timer_fired")
        .collect();
    assert_eq!(fired.len(), 1, "{events:?}");
    let ms = |k: &str| fired[0]["payload"][k].as_u64().unwrap();
    let lag_ms = ms("fired_ms").saturating_sub(ms("due_ms"));
    let (status, _, text) = get(&format!("{}/metrics", server.base), Some(&token));
    assert_eq!(status, 200, "{text}");
    // The scraper's parser takes it; the count and the sum are the log's.
    let m = samples(&text);
    assert_eq!(at(&m, "oracle_timer_lag_seconds", &[]), 1, "{text}");
    let line = |suffix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("oracle_timer_lag_seconds_{suffix} ")))
            .map(str::to_owned)
    };
    assert_eq!(line("count").as_deref(), Some("1"), "{text}");
    let sum: f64 = line("sum").unwrap().parse().unwrap();
    assert_eq!((sum * 1000.0).round() as u64, lag_ms, "{text}");
    // The woken drive's spans, with the run's root span at its end, in one trace.
    let root = |c: &Collector| c.spans().iter().any(|(_, n, _)| n == "run nap-1");
    web::wait_until("the run's root span at the collector", || root(&collector));
    let spans = collector.spans();
    let trace = &spans[0].0;
    assert!(
        spans
            .iter()
            .all(|(t, _, a)| t == trace && a["oracle.run.id"] == "nap-1"),
        "{spans:?}"
    );
    assert!(spans.iter().any(|(_, n, _)| n == "step done"), "{spans:?}");
}

/// `oracle worker --otlp URL` over a PostgreSQL store: the run it claims and drives sends its
/// spans, root span included, in one trace named by the run (skipped without PostgreSQL,
/// unless `ORACLE_REQUIRE_POSTGRES` is set).
#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_store_run_a_worker_drives_sends_its_spans_to_the_collector() {
    let Some(cluster) = oracle_pg::cluster::shared() else {
        return;
    };
    let url = cluster
        .database(&format!("observe_{}", std::process::id()))
        .unwrap();
    let sb = common::Sandbox::new();
    let (code, out, err) = sb.oracle(&["store", "init", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    sb.write(
        "two.plan",
        "plan two version 1\n\na = text.count { text: \"one two\" }\nb = text.count { text: \"three \" + a.words }\n",
    );
    let (code, id, err) = sb.oracle(&["submit", "two.plan", "--store", &url]);
    assert_eq!(code, 0, "{err}");
    let id = id.trim().to_owned();
    let collector = Collector::start();
    common::worker_until_idle(sb.path(), &url, &["--otlp", &collector.url]);
    let spans = collector.spans();
    let names: Vec<&str> = spans.iter().map(|(_, n, _)| n.as_str()).collect();
    for want in ["step a", "step b", &format!("run {id}")] {
        assert!(names.contains(&want), "{want}: {names:?}");
    }
    let trace = &spans[0].0;
    assert!(
        spans
            .iter()
            .all(|(t, _, a)| t == trace && a["oracle.run.id"] == id),
        "{spans:?}"
    );
}
