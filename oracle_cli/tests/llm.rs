//! Model calls end to end: the real binary against the in-repository OpenAI-compatible stub
//! (`oracle_llm_stub`) on 127.0.0.1. The escalation circuit (feedback, a second tier, a person),
//! replay with the server gone, keys kept out of the run directory, and every HTTP failure mode
//! as a clear recorded failure.

use crate::common;

use std::fs;
use std::path::Path;

use common::Sandbox;
use oracle_core::EventKind;
use oracle_llm_stub::Stub;
use serde_json::{Value, json};

/// The triage fixture's script: three bad replies from `fast`, a good one from `strong`.
fn triage_script() -> Vec<Value> {
    let text = fs::read_to_string(common::root().join("fixtures/llm/triage.jsonl")).unwrap();
    oracle_llm_stub::parse_script(&text).unwrap()
}

fn run_triage(sb: &Sandbox, stub: &Stub) -> (i32, Value) {
    let fast = format!("fast={}", stub.url());
    let strong = format!("strong={}", stub.url());
    sb.json(&[
        "run",
        "fixtures/plans/triage.plan",
        "--model",
        &fast,
        "--model",
        &strong,
        "--json",
    ])
}

/// The `tool_failed` errors of a run, in order.
fn failures(sb: &Sandbox, run: &str) -> Vec<String> {
    sb.events(".oracle", run)
        .iter()
        .filter(|e| e.kind == EventKind::ToolFailed)
        .map(|e| e.payload["error"].as_str().unwrap().to_owned())
        .collect()
}

/// Every file under `dir`, as bytes.
fn all_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let p = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(all_bytes(&p));
        } else {
            out.push((p.display().to_string(), fs::read(&p).unwrap()));
        }
    }
    out
}

#[test]
fn three_invalid_replies_then_the_strong_tier_answers_and_the_run_replays_without_a_server() {
    let sb = Sandbox::new();
    let stub = Stub::start(triage_script()).unwrap();
    let (code, v) = run_triage(&sb, &stub);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    assert_eq!(
        fs::read_to_string(sb.path().join("out/triage.txt")).unwrap(),
        "billing high: Card charged twice for invoice 2026-11; refund one payment (ORD-88213)."
    );

    // Each rejected reply is recorded, and fed back on the tier's next attempt only.
    let errors = failures(&sb, &run);
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors[0].starts_with("the reply is not JSON"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].contains("does not match the schema"),
        "{}",
        errors[1]
    );
    assert!(errors[1].contains("summary"), "{}", errors[1]);
    assert!(errors[2].contains("payments"), "{}", errors[2]);
    let requests = stub.requests();
    assert_eq!(requests.len(), 4);
    let count = |i: usize| requests[i].body["messages"].as_array().unwrap().len();
    assert_eq!((count(0), count(1), count(2), count(3)), (2, 3, 4, 2));
    let feedback = requests[1].body["messages"][2]["content"].as_str().unwrap();
    assert!(feedback.contains("the reply is not JSON"), "{feedback}");
    assert_eq!(requests[0].body["model"], "fast");
    assert_eq!(requests[3].body["model"], "strong");
    assert_eq!(requests[0].body["temperature"], json!(0.0));
    assert_eq!(requests[0].body["seed"], 7);
    assert_eq!(
        requests[0].body["response_format"]["type"], "json_schema",
        "{}",
        requests[0].body
    );

    // The record stands without the server: replay never calls it.
    drop(stub);
    let (code, r) = sb.json(&["replay", &run, "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["result"], "reproduced");
    // Four model calls, the file read and the file write: all taken from the log.
    assert_eq!(r["reused"], 6, "{r}");
    let (code, out, err) = sb.oracle(&["verify", &format!(".oracle/runs/{run}/events.jsonl")]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn invalid_everywhere_suspends_and_a_persons_answer_is_checked_against_the_schema() {
    let sb = Sandbox::new();
    let bad = |m: &str| json!({"model": m, "content": "I think it is about billing."});
    let script = vec![
        bad("fast"),
        bad("fast"),
        bad("fast"),
        bad("strong"),
        bad("strong"),
        bad("strong"),
    ];
    let stub = Stub::start(script).unwrap();
    let (code, v) = run_triage(&sb, &stub);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["status"], "suspended", "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    assert_eq!(failures(&sb, &run).len(), 6);
    assert_eq!(stub.unplayed(), 0);

    // Every failed attempt is visible.
    let (code, out, _) = sb.oracle(&["runs"]);
    assert_eq!(code, 0);
    assert!(out.contains("suspended"), "{out}");
    assert!(
        out.contains("waits on step `triage` after 6 attempts"),
        "{out}"
    );
    let (code, out, _) = sb.oracle(&["log", &run]);
    assert_eq!(code, 0);
    assert_eq!(out.matches("tool_failed").count(), 6, "{out}");

    // An answer that does not match the step's schema is refused, and nothing is recorded.
    let before = fs::read(sb.log(".oracle", &run)).unwrap();
    let (code, _, err) = sb.oracle(&[
        "resume",
        &run,
        "--step",
        "triage",
        "--value",
        r#"{"severity": "urgent", "team": "billing", "summary": "x"}"#,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("schema"), "{err}");
    assert_eq!(fs::read(sb.log(".oracle", &run)).unwrap(), before);

    // A valid one is injected as the model's reply, and the run completes, with the server gone.
    drop(stub);
    let (code, v) = sb.json(&[
        "resume",
        &run,
        "--step",
        "triage",
        "--value",
        r#"{"severity": "medium", "team": "billing", "summary": "Double charge"}"#,
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        fs::read_to_string(sb.path().join("out/triage.txt")).unwrap(),
        "billing medium: Double charge"
    );
    let resumed = sb
        .events(".oracle", &run)
        .into_iter()
        .find(|e| e.kind == EventKind::Resumed)
        .unwrap();
    assert_eq!(resumed.payload["value"]["model"], "person");
    assert_eq!(resumed.payload["value"]["parsed"]["team"], "billing");
    let (code, r) = sb.json(&["replay", &run, "--json"]);
    assert_eq!(code, 0, "{r}");
}

#[test]
fn the_api_key_is_sent_but_never_written_to_the_run_directory() {
    let sb = Sandbox::new();
    let secret = "sk-test-0123456789-never-recorded";
    // The strong tier is bound to another model id: its scripted reply answers that id.
    let script = triage_script()
        .into_iter()
        .map(|mut r| {
            if r["model"] == "strong" {
                r["model"] = json!("big-model-v2");
            }
            r
        })
        .collect();
    let stub = Stub::start(script).unwrap();
    let out = sb
        .command(&[
            "run",
            "fixtures/plans/triage.plan",
            "--model",
            &format!("fast={}", stub.url()),
            "--model",
            &format!("strong={}", stub.url()),
            "--model-key",
            "fast=ORACLE_TEST_KEY",
            "--secret",
            "KEY=ORACLE_TEST_KEY",
            "--model-key",
            "strong=KEY",
            "--model-id",
            "strong=big-model-v2",
        ])
        .env("ORACLE_TEST_KEY", secret)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let requests = stub.requests();
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {secret}").as_str())
    );
    assert_eq!(requests[3].body["model"], "big-model-v2");
    assert_eq!(
        requests[3].header("authorization"),
        Some(format!("Bearer {secret}").as_str())
    );
    for (path, bytes) in all_bytes(&sb.path().join(".oracle")) {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(secret), "the key is in {path}");
        // Hosts and ports stay out of the log (run.json keeps the bindings, unhashed).
        if path.ends_with("events.jsonl") {
            assert!(!text.contains("127.0.0.1"), "an address is in {path}");
        }
    }
    let run_json = all_bytes(&sb.path().join(".oracle"))
        .into_iter()
        .find(|(p, _)| p.ends_with("run.json"))
        .unwrap();
    let meta: Value = serde_json::from_slice(&run_json.1).unwrap();
    assert_eq!(meta["models"]["strong"]["model"], "big-model-v2");
    assert_eq!(meta["models"]["fast"]["key_env"], "ORACLE_TEST_KEY");
    // `--model-key strong=KEY` named the secret KEY: its variable is the key's.
    assert_eq!(meta["models"]["strong"]["key_env"], "ORACLE_TEST_KEY");
    assert_eq!(meta["secrets"]["KEY"], "ORACLE_TEST_KEY");
}

/// A one-step plan calling model `m` with `clauses` after the call.
fn one_call(sb: &Sandbox, clauses: &str, schema: bool) -> String {
    let schema = if schema {
        r#"schema: { type: "object", required: ["ok"] },"#
    } else {
        ""
    };
    sb.write(
        "plans/one.plan",
        &format!(
            "plan one version 1\ngrant llm:chat:m\nask = llm.chat {{ model: \"m\", messages: [{{ role: \"user\", content: \"hi\" }}], {schema} }}\n{clauses}\n"
        ),
    );
    "plans/one.plan".into()
}

/// Runs the one-step plan against a stub playing `script`: exit code, run id, failures.
fn run_one(sb: &Sandbox, url: &str, clauses: &str, schema: bool) -> (i32, String, Vec<String>) {
    let plan = one_call(sb, clauses, schema);
    let (code, v) = sb.json(&["run", &plan, "--model", &format!("m={url}"), "--json"]);
    let run = v["run"].as_str().unwrap_or_default().to_owned();
    let errors = if run.is_empty() {
        vec![]
    } else {
        failures(sb, &run)
    };
    (code, run, errors)
}

#[test]
fn every_http_failure_is_a_clear_recorded_failure() {
    let big = (8 << 20) + 1024;
    let cases: Vec<(Value, &str)> = vec![
        (json!({"status": 500}), "answered HTTP 500 (retryable)"),
        (
            json!({"status": 400, "body": "bad request: no such model"}),
            "answered HTTP 400: bad request: no such model",
        ),
        (
            json!({"raw": "<html>hi</html>", "content_type": "text/html"}),
            "content type `text/html`, not JSON",
        ),
        (
            json!({"raw": "{\"choices\": [", "content_type": "application/json"}),
            "the reply body is not JSON",
        ),
        (
            json!({"raw": "{\"choices\": []}"}),
            "the reply has no `choices[0]`",
        ),
        (
            json!({"raw": "{\"choices\": [{\"message\": {\"content\": 5}}]}"}),
            "`choices[0].message.content` is not a string",
        ),
        (json!({"truncate": true, "content": "hello"}), "cut short"),
        (
            json!({"huge_bytes": big}),
            "larger than the limit of 8388608 bytes",
        ),
        (json!({"close": true}), "the endpoint of model `m`"),
        (
            json!({"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}),
            "calls tools (lookup)",
        ),
        (json!({"content": "{\"ok\": 0.5}"}), "cannot be recorded"),
    ];
    // TLS spoken to a server that speaks plain HTTP: a clear failure, not a hang or a panic.
    {
        let sb = Sandbox::new();
        let stub = Stub::start(vec![json!({"content": "hi"})]).unwrap();
        let url = format!("https://{}/v1", stub.addr());
        let (code, run, errors) = run_one(&sb, &url, "attempts 1", false);
        assert_eq!(code, 1, "{errors:?}");
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("the endpoint of model `m`: "),
            "{}",
            errors[0]
        );
        let (code, r) = sb.json(&["replay", &run, "--json"]);
        assert_eq!(code, 0, "{r}");
    }
    for (reply, expected) in cases {
        let sb = Sandbox::new();
        let stub = Stub::start(vec![reply.clone()]).unwrap();
        let schema = expected == "cannot be recorded";
        let (code, run, errors) = run_one(&sb, &stub.url(), "attempts 1", schema);
        assert_eq!(code, 1, "{reply}: {errors:?}");
        assert_eq!(errors.len(), 1, "{reply}");
        assert!(errors[0].contains(expected), "{reply}: {}", errors[0]);
        assert!(!errors[0].contains("127.0.0.1"), "{}", errors[0]);
        // A recorded failure verifies and replays like any other outcome.
        let (code, r) = sb.json(&["replay", &run, "--json"]);
        assert_eq!(code, 0, "{reply}: {r}");
    }
}

#[test]
fn a_rate_limit_is_retried_after_its_wait_and_each_attempt_is_recorded() {
    let sb = Sandbox::new();
    let stub = Stub::start(vec![
        json!({"status": 429, "retry_after": 1}),
        json!({"status": 503}),
        json!({"content": "fine"}),
    ])
    .unwrap();
    let (code, _, errors) = run_one(&sb, &stub.url(), "attempts 3", false);
    assert_eq!(code, 0, "{errors:?}");
    assert_eq!(errors.len(), 2);
    assert!(errors[0].contains("HTTP 429 (retryable)"), "{}", errors[0]);
    assert!(errors[1].contains("HTTP 503 (retryable)"), "{}", errors[1]);
    // The server's failures are not the reply's fault: nothing is fed back.
    let requests = stub.requests();
    assert_eq!(requests[2].body["messages"].as_array().unwrap().len(), 1);
}

#[test]
fn a_slow_reply_times_out_and_a_refused_connection_fails_clearly() {
    let sb = Sandbox::new();
    let stub = Stub::start(vec![json!({"delay_ms": 3000, "content": "late"})]).unwrap();
    let (code, _, errors) = run_one(&sb, &stub.url(), "attempts 1\n  timeout 500ms", false);
    assert_eq!(code, 1);
    assert_eq!(errors, vec!["timed out after 500 ms".to_owned()]);

    // A port nothing listens on: bind one, then close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sb = Sandbox::new();
    let (code, _, errors) = run_one(
        &sb,
        &format!("http://127.0.0.1:{port}/v1"),
        "attempts 1",
        false,
    );
    assert_eq!(code, 1);
    assert_eq!(
        errors,
        vec!["the endpoint of model `m`: the connection was refused".to_owned()]
    );
}

#[test]
fn an_unbound_model_is_refused_naming_the_flag_and_so_are_bad_bindings() {
    let sb = Sandbox::new();
    let plan = one_call(&sb, "attempts 1", false);
    let (code, _, err) = sb.oracle(&["run", &plan]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the plan's model `m` is not bound: pass --model m=URL (an OpenAI-compatible base URL) or set [models.m] url in oracle.toml; nothing was created"),
        "{err}"
    );
    for (args, expected) in [
        (vec!["--model", "m"], "expected NAME=URL"),
        (vec!["--model", "m=ftp://x"], "must start with http://"),
        (vec!["--model-id", "m=x"], "model `m` is not bound"),
    ] {
        let mut all = vec!["run", plan.as_str()];
        all.extend(args);
        let (code, _, err) = sb.oracle(&all);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(expected), "{err}");
    }
    // Nothing was started by the refused commands.
    assert_eq!(run_dirs(&sb), Vec::<String>::new());
}

#[test]
fn replay_against_a_plan_whose_prompt_changed_diverges_at_the_request() {
    let sb = Sandbox::new();
    let stub = Stub::start(triage_script()).unwrap();
    let (code, v) = run_triage(&sb, &stub);
    assert_eq!(code, 0, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let plan = fs::read_to_string(sb.path().join("fixtures/plans/triage.plan")).unwrap();
    let edited = plan.replacen(
        "You triage support tickets.",
        "You triage support tickets politely.",
        1,
    );
    sb.write("plans/edited.plan", &edited);
    drop(stub);
    let (code, out, err) = sb.oracle(&["replay", &run, "--plan", "plans/edited.plan"]);
    assert_ne!(code, 0, "{out}");
    let text = format!("{out}{err}");
    assert!(text.contains("tool_called"), "{text}");
    assert!(text.contains("politely"), "{text}");
}

#[test]
fn a_run_killed_during_a_call_calls_again_on_resume() {
    let sb = Sandbox::new();
    let stub = Stub::start(vec![
        json!({"delay_ms": 20_000, "content": "too late"}),
        json!({"content": "second time"}),
    ])
    .unwrap();
    let plan = one_call(&sb, "attempts 1", false);
    let mut child = sb
        .command(&["run", &plan, "--model", &format!("m={}", stub.url())])
        .spawn()
        .unwrap();
    let mut waited = 0;
    while stub.requests().is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(50));
        waited += 1;
        assert!(waited < 600, "the call never reached the stub");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let run = fs::read_dir(sb.path().join(".oracle/runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap();
    // The call was recorded before it was made (write-ahead); its outcome was not.
    let kinds: Vec<String> = sb
        .events(".oracle", &run)
        .iter()
        .map(|e| format!("{:?}", e.kind))
        .collect();
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("ToolCalled"),
        "{kinds:?}"
    );
    // Resume reuses the binding run.json kept, and calls again (at least once).
    let (code, v) = sb.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{v}");
    let returned = sb
        .events(".oracle", &run)
        .into_iter()
        .find(|e| e.kind == EventKind::ToolReturned)
        .unwrap();
    assert_eq!(returned.payload["output"]["content"], "second time");
    assert_eq!(stub.requests().len(), 2);
}

#[test]
fn a_call_budget_stops_model_calls_and_the_step_yields_to_a_person() {
    let sb = Sandbox::new();
    let stub = Stub::start(triage_script()).unwrap();
    let url = stub.url();
    let (code, v) = sb.json(&[
        "run",
        "fixtures/plans/triage.plan",
        "--model",
        &format!("fast={url}"),
        "--model",
        &format!("strong={url}"),
        "--max-model-calls",
        "2",
        "--json",
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    // Two calls reached the model; the other four attempts were refused before it.
    assert_eq!(stub.requests().len(), 2);
    let errors = failures(&sb, &run);
    assert_eq!(errors.len(), 6, "{errors:?}");
    for e in &errors[2..] {
        assert_eq!(
            e,
            "budget reached: model_calls_max = 2 model calls per run (--max-model-calls); the model was not called"
        );
    }
    let started = &sb.events(".oracle", &run)[0];
    assert_eq!(started.payload["budget"], json!({"model_calls_max": 2}));
    let (code, out, _) = sb.oracle(&["runs"]);
    assert_eq!(code, 0);
    // Both replies that reached the model were rejected; the server's usage still counts.
    let charged: u64 = sb
        .events(".oracle", &run)
        .iter()
        .filter(|e| e.kind == EventKind::ToolFailed)
        .filter_map(|e| e.payload.get("usage"))
        .map(|u| u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
        .sum();
    assert!(charged > 0);
    assert!(
        out.contains(&format!("2 model calls, {charged} tokens")),
        "{out}"
    );
    drop(stub);
    let (code, r) = sb.json(&["replay", &run, "--json"]);
    assert_eq!(code, 0, "{r}");
}

#[test]
fn a_token_budget_refuses_the_call_after_it_is_spent_and_the_run_fails() {
    let sb = Sandbox::new();
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 5});
    let stub = Stub::start(vec![
        json!({"content": "first", "usage": usage}),
        json!({"content": "second", "usage": usage}),
    ])
    .unwrap();
    sb.write(
        "plans/two.plan",
        "plan two version 1\ngrant llm:chat:m\n\
         a = llm.chat { model: \"m\", messages: [{ role: \"user\", content: \"one\" }] }\n  attempts 1\n\
         b = llm.chat { model: \"m\", messages: [{ role: \"user\", content: a.content }] }\n  attempts 1\n",
    );
    let (code, v) = sb.json(&[
        "run",
        "plans/two.plan",
        "--model",
        &format!("m={}", stub.url()),
        "--max-tokens-total",
        "10",
        "--json",
    ]);
    assert_eq!(code, 1, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    assert_eq!(stub.requests().len(), 1);
    assert_eq!(
        failures(&sb, &run),
        vec![
            "budget reached: tokens_max = 10 tokens per run, 15 used (--max-tokens-total); the model was not called"
                .to_owned()
        ]
    );
    let (code, out, _) = sb.oracle(&["inspect", &run]);
    assert_eq!(code, 0);
    assert!(out.contains("models 1 call, 15 tokens"), "{out}");
    let (code, v) = sb.json(&["runs", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(v["models"], json!({"calls": 1, "tokens": 15}));
}

#[test]
fn rejected_replies_tokens_are_counted_in_runs_inspect_the_budget_and_replay() {
    let sb = Sandbox::new();
    let usage = json!({"prompt_tokens": 12, "completion_tokens": 6});
    let prose = json!({"content": "not JSON at all", "usage": usage});
    let stub = Stub::start(vec![prose.clone(), prose.clone(), prose]).unwrap();
    let (code, run, errors) = run_one(&sb, &stub.url(), "attempts 2", true);
    assert_ne!(code, 0);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.starts_with("the reply is not JSON")),
        "{errors:?}"
    );
    let charged: Vec<Value> = sb
        .events(".oracle", &run)
        .iter()
        .filter(|e| e.kind == EventKind::ToolFailed)
        .map(|e| e.payload["usage"].clone())
        .collect();
    assert_eq!(charged, vec![usage.clone(), usage.clone()]);
    let (code, out, _) = sb.oracle(&["inspect", &run]);
    assert_eq!(code, 0);
    assert!(out.contains("models 2 calls, 36 tokens"), "{out}");
    let (code, v) = sb.json(&["runs", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(v["models"], json!({"calls": 2, "tokens": 36}), "{v}");
    // Replay reads the recorded usage back, with no server.
    drop(stub);
    let (code, r) = sb.json(&["replay", &run, "--json"]);
    assert_eq!(code, 0, "{r}");
    let (code, r) = sb.json(&["verify", &run, "--json"]);
    assert_eq!(code, 0, "{r}");
    // The token budget counts a rejected reply: 18 spent, so the second attempt is refused.
    let stub = Stub::start(vec![json!({"content": "prose", "usage": usage})]).unwrap();
    let plan = one_call(&sb, "attempts 2", true);
    let model = format!("m={}", stub.url());
    let args = [
        "run",
        &plan,
        "--model",
        &model,
        "--max-tokens-total",
        "18",
        "--json",
    ];
    let (_, v) = sb.json(&args);
    let run = v["run"].as_str().unwrap().to_owned();
    assert_eq!(stub.requests().len(), 1);
    let errors = failures(&sb, &run);
    assert_eq!(
        errors[1],
        "budget reached: tokens_max = 18 tokens per run, 18 used (--max-tokens-total); the model was not called"
    );
}

/// The run directories of the sandbox's home (none when it was never created).
fn run_dirs(sb: &Sandbox) -> Vec<String> {
    match fs::read_dir(sb.path().join(".oracle/runs")) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn an_unbound_model_or_secret_refuses_the_run_before_anything_is_written() {
    let sb = Sandbox::new();
    // Neither model bound: both named, with the flags that bind them, and no run directory.
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/triage.plan"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim_end(),
        "error: the plan's models `fast`, `strong` are not bound: pass --model fast=URL --model strong=URL (an OpenAI-compatible base URL) or set [models.fast] url, [models.strong] url in oracle.toml; nothing was created"
    );
    assert_eq!(run_dirs(&sb), Vec::<String>::new());
    // One bound: the other (the fallback's) is named; `--json` gives the stable code.
    let (code, v) = sb.json(&[
        "run",
        "fixtures/plans/triage.plan",
        "--model",
        "fast=http://127.0.0.1:9/v1",
        "--json",
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "unbound", "{v}");
    assert_eq!(v["error"]["models"], json!(["strong"]), "{v}");
    // A model named by an input is the input's value at start; a secret is named too.
    sb.write(
        "pick.plan",
        "plan pick version 1\ngrant llm:chat:*\ninput which: string = \"fast\"\n\
         a = llm.chat { model: which, messages: [{ role: \"user\", content: \"hi\" }] }\n\
         b = json.get { value: { token: secret(\"TOKEN\") }, path: \"token\" }\n",
    );
    let (code, _, err) = sb.oracle(&[
        "run",
        "pick.plan",
        "--model",
        "fast=http://127.0.0.1:9/v1",
        "--input",
        "which=big",
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim_end(),
        "error: the plan's model `big` is not bound: pass --model big=URL (an OpenAI-compatible base URL) or set [models.big] url in oracle.toml; the plan's secret `TOKEN` is not bound: pass --secret TOKEN=ENV_VAR or set [secrets] TOKEN = { env = \"ENV_VAR\" } in oracle.toml; nothing was created"
    );
    assert_eq!(run_dirs(&sb), Vec::<String>::new());
}

#[test]
fn a_schema_given_by_an_input_types_the_reply_before_the_run_starts() {
    let sb = Sandbox::new();
    sb.write(
        "brief.plan",
        "plan brief version 1\ngrant llm:chat:fast\ninput shape: map\n\
         analyst = llm.chat { model: \"fast\", messages: [{ role: \"user\", content: \"hi\" }], schema: shape }\n\
         count = text.count { text: analyst.parsed.hedline }\n",
    );
    let (code, _, err) = sb.oracle(&[
        "run",
        "brief.plan",
        "--model",
        "fast=http://127.0.0.1:9/v1",
        "--input",
        r#"shape={"type": "object", "properties": {"headline": {"type": "string"}}}"#,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("[E0223] Error: `analyst.parsed` has no field `hedline`"),
        "{err}"
    );
    assert!(err.contains("brief.plan:5:43"), "{err}");
    assert!(
        err.contains("did you mean `analyst.parsed.headline`?"),
        "{err}"
    );
    assert_eq!(run_dirs(&sb), Vec::<String>::new());
}
