//! The example server over raw stdio, without oracle's client: a whole session, and the usage
//! error.
//!
//! This file has a second purpose: cargo builds a package's binaries for `cargo test` only
//! when the package has an integration test, so without it `cargo test --workspace` would not
//! build `target/debug/oracle-mcp-example`, which `oracle_runtime/tests/mcp.rs` runs.

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_oracle-mcp-example");

/// Sends `lines` to a server started with `args`, closes its input and returns what it wrote.
fn session(args: &[&str], lines: &[Value]) -> (Option<i32>, Vec<Value>, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let replies = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        out.status.code(),
        replies,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[test]
fn serves_a_whole_session_and_exits_when_its_input_closes() {
    let (status, replies, _) = session(
        &[],
        &[
            request(
                1,
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "0"}}),
            ),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            request(2, "tools/list", json!({})),
            request(
                3,
                "tools/call",
                json!({"name": "word_count", "arguments": {"text": "one two  three"}}),
            ),
            request(
                4,
                "tools/call",
                json!({"name": "reverse", "arguments": {"text": "abc"}}),
            ),
        ],
    );
    assert_eq!(status, Some(0));
    assert_eq!(replies.len(), 4, "{replies:?}");
    assert_eq!(replies[0]["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        replies[0]["result"]["serverInfo"],
        json!({"name": "oracle-mcp-example", "version": "1.0.0"})
    );
    let names: Vec<&str> = replies[1]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["word_count", "reverse"]);
    assert_eq!(
        replies[2]["result"]["structuredContent"],
        json!({"words": 3})
    );
    assert_eq!(
        replies[2]["result"]["content"],
        json!([{"type": "text", "text": "{\"words\":3}"}])
    );
    assert_eq!(
        replies[3]["result"]["structuredContent"],
        json!({"text": "cba"})
    );
}

#[test]
fn an_unknown_mode_is_refused_with_the_usage() {
    let (status, replies, stderr) = session(&["--mode", "sideways"], &[]);
    assert_eq!(status, Some(2));
    assert!(replies.is_empty());
    assert!(
        stderr.starts_with("usage: oracle-mcp-example [--mode normal|"),
        "{stderr}"
    );
}
