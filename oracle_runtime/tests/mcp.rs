//! `oracle_runtime::mcp` against a real MCP server: `oracle-mcp-example`, written with the
//! official Rust SDK, in its normal and hostile modes.
//!
//! The server is a binary of another package, which cargo does not build for this package's
//! tests; `cargo test --workspace` builds it (see `oracle_mcp_example/tests/server.rs`), and so
//! does `cargo build -p oracle_mcp_example`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oracle_runtime::mcp::{
    Connection, ListedTool, MESSAGE_BYTES_MAX, McpError, PROTOCOL_VERSION,
    START_TIMEOUT_MS_DEFAULT, ServerCommand, ServerInfo,
};
use serde_json::json;

/// `target/debug/oracle-mcp-example`, beside this test's own directory
/// (`target/debug/deps/runtime-HASH`).
fn example_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/PROFILE/deps");
    let bin = dir.join(format!(
        "oracle-mcp-example{}",
        std::env::consts::EXE_SUFFIX
    ));
    assert!(
        bin.is_file(),
        "the example MCP server is not built (looked for {}): run `cargo test --workspace`, \
         or `cargo build -p oracle_mcp_example` before `cargo test -p oracle_runtime --test runtime mcp::` \
         (cargo does not build another package's binaries for this package's tests)",
        bin.display()
    );
    bin
}

fn command(mode: &str, env: &[(&str, &str)]) -> ServerCommand {
    ServerCommand {
        program: example_bin(),
        args: vec!["--mode".to_owned(), mode.to_owned()],
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        cwd: std::env::temp_dir(),
    }
}

fn start(mode: &str) -> Connection {
    Connection::start(
        &command(mode, &[]),
        START_TIMEOUT_MS_DEFAULT,
        MESSAGE_BYTES_MAX,
    )
    .unwrap()
}

fn names(tools: &[ListedTool]) -> Vec<&str> {
    tools.iter().map(|t| t.name.as_str()).collect()
}

/// Calls `word_count` on a server in a hostile mode; returns the error and how long it took.
fn failed_call(mode: &str, timeout_ms: u64) -> (McpError, Duration) {
    let c = start(mode);
    assert_eq!(
        names(&c.list_tools(5_000).unwrap()),
        ["word_count", "reverse"]
    );
    let at = Instant::now();
    let e = c
        .call("word_count", &json!({"text": "a b"}), timeout_ms)
        .unwrap_err();
    let took = at.elapsed();
    // The connection is dead now.
    assert_eq!(c.list_tools(5_000), Err(McpError::Closed));
    (e, took)
}

#[test]
fn the_handshake_reports_the_example_server() {
    let c = start("normal");
    assert_eq!(
        c.info(),
        &ServerInfo {
            name: "oracle-mcp-example".to_owned(),
            version: "1.0.0".to_owned(),
            protocol_version: PROTOCOL_VERSION.to_owned(),
        }
    );
}

#[test]
fn both_tools_are_listed_with_their_schemas() {
    let tools = start("normal").list_tools(5_000).unwrap();
    assert_eq!(names(&tools), ["word_count", "reverse"]);
    let word_count = &tools[0];
    assert!(!word_count.description.is_empty());
    assert_eq!(word_count.input_schema["type"], "object");
    assert_eq!(word_count.input_schema["required"], json!(["text"]));
    assert_eq!(
        word_count.output_schema.as_ref().unwrap()["properties"]["words"]["type"],
        "integer"
    );
    let reverse = &tools[1];
    assert_eq!(reverse.input_schema["properties"]["text"]["type"], "string");
    assert_eq!(
        reverse.output_schema.as_ref().unwrap()["required"],
        json!(["text"])
    );
}

#[test]
fn a_call_returns_structured_content() {
    let c = start("normal");
    let counted = c
        .call(
            "word_count",
            &json!({"text": "the quick  brown fox"}),
            5_000,
        )
        .unwrap();
    assert_eq!(counted["structuredContent"], json!({"words": 4}));
    assert_eq!(
        counted["content"],
        json!([{"type": "text", "text": "{\"words\":4}"}])
    );
    assert_eq!(counted["isError"], json!(false));
    let reversed = c.call("reverse", &json!({"text": "héllo"}), 5_000).unwrap();
    assert_eq!(reversed["structuredContent"], json!({"text": "olléh"}));
}

#[test]
fn a_refused_call_is_a_json_rpc_error_and_the_connection_lives_on() {
    let c = start("normal");
    assert_eq!(
        c.call("word_count", &json!({"text": 7}), 5_000),
        Err(McpError::Rpc {
            code: -32602,
            message: "argument `text` must be a string".to_owned(),
        })
    );
    let e = c.call("nope", &json!({}), 5_000).unwrap_err();
    assert!(matches!(e, McpError::Rpc { code: -32602, .. }), "{e:?}");
    assert_eq!(
        c.call("word_count", &json!({"text": "still here"}), 5_000)
            .unwrap()["structuredContent"],
        json!({"words": 2})
    );
}

#[test]
fn a_crash_on_call_is_reported_with_its_status_and_stderr() {
    let (e, took) = failed_call("crash-on-call", 10_000);
    assert_eq!(
        e.to_string(),
        "the MCP server closed its output (exit status 3); its stderr ends with: \
         oracle-mcp-example: crashing on purpose (--mode crash-on-call)"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_hang_on_call_times_out() {
    let (e, took) = failed_call("hang-on-call", 300);
    assert_eq!(
        e,
        McpError::Timeout {
            what: "tools/call".to_owned(),
            timeout_ms: 300
        }
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[test]
fn a_malformed_answer_is_malformed() {
    let (e, took) = failed_call("malformed-on-call", 10_000);
    assert_eq!(
        e.to_string(),
        "the MCP server sent a malformed message: a line that is not JSON (expected ident at \
         line 1 column 2): `this is not JSON`"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_huge_answer_is_too_large() {
    let (e, took) = failed_call("huge-on-call", 10_000);
    assert_eq!(e, McpError::TooLarge { limit: 8 << 20 });
    assert_eq!(
        e.to_string(),
        "the MCP server sent a message larger than 8388608 bytes"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_hang_on_start_times_out() {
    let at = Instant::now();
    let e = Connection::start(&command("hang-on-start", &[]), 300, MESSAGE_BYTES_MAX)
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "the MCP server did not answer `initialize` within 300 ms"
    );
    assert!(at.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_colliding_name_is_listed_as_the_server_says() {
    // Refusing the collision with the built-in `fs.read` is the caller's job.
    let tools = start("collide").list_tools(5_000).unwrap();
    assert_eq!(names(&tools), ["word_count", "reverse", "fs.read"]);
}

#[test]
fn the_changing_server_lists_different_tools_per_variant() {
    let list = |variant: &str| {
        let cmd = command("changing", &[("ORACLE_MCP_EXAMPLE_VARIANT", variant)]);
        let c = Connection::start(&cmd, START_TIMEOUT_MS_DEFAULT, MESSAGE_BYTES_MAX).unwrap();
        c.list_tools(5_000).unwrap()
    };
    let (one, two) = (list("1"), list("2"));
    assert_eq!(names(&one), ["word_count"]);
    assert_eq!(names(&two), ["word_count"]);
    assert_eq!(one[0].input_schema["required"], json!(["text"]));
    assert_eq!(two[0].input_schema["required"], json!(["text", "lang"]));
    assert_ne!(one, two);
}

#[cfg(target_os = "linux")]
mod killing {
    use super::*;

    /// The pids of running (not zombie) processes whose environment holds `marker`.
    fn marked(marker: &str) -> Vec<u32> {
        let wanted = format!("ORACLE_MCP_TEST_MARKER={marker}");
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            // Processes of other users, and ones gone meanwhile, cannot be read: not ours.
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            if environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes()) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Starts a server in `mode` marked uniquely; returns it and its pid.
    fn marked_server(mode: &str, name: &str) -> (Connection, String, u32) {
        let marker = format!("{name}-{}", std::process::id());
        let cmd = command(mode, &[("ORACLE_MCP_TEST_MARKER", &marker)]);
        let c = Connection::start(&cmd, START_TIMEOUT_MS_DEFAULT, MESSAGE_BYTES_MAX).unwrap();
        let pids = marked(&marker);
        assert_eq!(pids.len(), 1, "{pids:?}");
        (c, marker, pids[0])
    }

    fn assert_gone(marker: &str, pid: u32) {
        let at = Instant::now();
        while !marked(marker).is_empty() {
            assert!(
                at.elapsed() < Duration::from_secs(5),
                "server {pid} still runs"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn dropping_a_connection_kills_the_server() {
        let (c, marker, pid) = marked_server("normal", "drop");
        c.list_tools(5_000).unwrap();
        drop(c);
        assert_gone(&marker, pid);
    }

    #[test]
    fn a_timeout_kills_the_server_at_once() {
        let (c, marker, pid) = marked_server("hang-on-call", "timeout");
        assert!(matches!(
            c.call("reverse", &json!({"text": "x"}), 300),
            Err(McpError::Timeout { .. })
        ));
        // Still connected (not dropped), yet the server is gone.
        assert_gone(&marker, pid);
        assert_eq!(
            c.call("reverse", &json!({"text": "x"}), 300),
            Err(McpError::Closed)
        );
    }
}
