//! Streamed model output end to end (issue 41, docs/OBSERVABILITY.md): the real binary against
//! the in-repository stub streaming its replies. What is recorded does not depend on whether
//! the reply came whole or in pieces; a stream cut short fails its attempt like any cut
//! reply; `--follow` prints the pieces as they come.

use crate::common;

use std::fs;

use common::Sandbox;
use oracle_core::EventKind;
use oracle_llm_stub::Stub;
use serde_json::{Value, json};

fn triage_script() -> Vec<Value> {
    let text = fs::read_to_string(common::root().join("fixtures/llm/triage.jsonl")).unwrap();
    oracle_llm_stub::parse_script(&text).unwrap()
}

/// Runs the triage fixture against a fresh stub, its two models streaming or not; the run's
/// log bytes and the stub's requests.
fn triage(stream: bool) -> (Sandbox, String, Vec<u8>, Vec<Value>) {
    let sb = Sandbox::new();
    let stub = Stub::start(triage_script()).unwrap();
    let (fast, strong) = (
        format!("fast={}", stub.url()),
        format!("strong={}", stub.url()),
    );
    let mut args = vec![
        "run",
        "fixtures/plans/triage.plan",
        "--model",
        &fast,
        "--model",
        &strong,
        "--json",
    ];
    if stream {
        args.extend(["--model-stream", "fast", "--model-stream", "strong"]);
    }
    let (code, v) = sb.json(&args);
    assert_eq!(code, 0, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let log = fs::read(sb.log(".oracle", &run)).unwrap();
    let requests = stub.requests().into_iter().map(|r| r.body).collect();
    (sb, run, log, requests)
}

#[test]
fn a_streamed_reply_is_recorded_byte_for_byte_as_the_whole_reply_and_replays() {
    let (_whole_sb, _, whole, plain) = triage(false);
    let (sb, run, streamed, asked) = triage(true);
    // Four model calls, three of them rejected (their tokens kept): the same log, byte for
    // byte, whether each reply came whole or in pieces.
    assert_eq!(asked.len(), 4);
    assert!(asked.iter().all(|r| r["stream"] == true), "{asked:?}");
    assert!(plain.iter().all(|r| r.get("stream").is_none()), "{plain:?}");
    assert_eq!(
        String::from_utf8_lossy(&streamed),
        String::from_utf8_lossy(&whole)
    );
    let failed: Vec<_> = sb
        .events(".oracle", &run)
        .into_iter()
        .filter(|e| e.kind == EventKind::ToolFailed)
        .collect();
    assert_eq!(failed.len(), 3);
    assert!(
        failed
            .iter()
            .all(|e| e.payload["usage"]["prompt_tokens"].as_u64() > Some(0))
    );
    let (code, r) = sb.json(&["replay", &run, "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["result"], "reproduced");
}

#[test]
fn a_stream_cut_after_one_piece_fails_its_attempt_and_the_next_attempt_answers() {
    let sb = Sandbox::new();
    let reply = "Hello there, streaming world.";
    let stub = Stub::start(vec![
        json!({"content": reply, "cut_after": 1}),
        json!({"content": reply, "chunks": 3}),
    ])
    .unwrap();
    sb.write(
        "plans/talk.plan",
        "plan talk version 1\ngrant llm:chat:m\n\
         say = llm.chat { model: \"m\", messages: [{ role: \"user\", content: \"hi\" }] }\n  attempts 2\n",
    );
    let model = format!("m={}", stub.url());
    let (code, out, err) = sb.oracle(&[
        "run",
        "plans/talk.plan",
        "--model",
        &model,
        "--model-stream",
        "m",
        "--follow",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let events = sb.events(".oracle", "talk-1");
    let failed: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolFailed)
        .map(|e| e.payload["error"].as_str().unwrap())
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("cut short"), "{}", failed[0]);
    let returned = events
        .iter()
        .find(|e| e.kind == EventKind::ToolReturned)
        .unwrap();
    assert_eq!(returned.payload["output"]["content"], reply);
    assert_eq!(returned.payload["attempt"], 2);
    // --follow printed the pieces as they came: the cut attempt's first piece, then the
    // second attempt's reply whole, on stderr (stdout is the run's summary, as without it).
    assert!(err.contains("say (attempt 1): "), "{err}");
    assert!(err.contains(&format!("say (attempt 2): {reply}")), "{err}");
    assert!(!out.contains(reply), "{out}");
}
