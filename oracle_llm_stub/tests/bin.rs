//! The stub's program: `--detach` returns once it listens, and `--exit-when-played` ends it
//! after the last scripted reply. (This test also makes `cargo test` build the program, which
//! the README test puts on `PATH`.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

fn post(url: &str, body: &str) -> String {
    let addr = url
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches("/v1");
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn a_detached_stub_serves_its_script_then_exits() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.jsonl");
    std::fs::write(&script, "{\"content\": \"one\"}\n").unwrap();
    let url_file = dir.path().join("url");
    let out = Command::new(env!("CARGO_BIN_EXE_oracle-llm-stub"))
        .arg("--script")
        .arg(&script)
        .arg("--url-file")
        .arg(&url_file)
        .args(["--detach", "--exit-when-played"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let url = std::fs::read_to_string(&url_file).unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let reply = post(&url, r#"{"model": "m", "messages": []}"#);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("\"content\":\"one\""), "{reply}");
    // Played out: the server goes away.
    let started = Instant::now();
    let addr = url
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    while TcpStream::connect(&addr).is_ok() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still listening"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_bad_script_or_flag_is_refused_with_usage() {
    let out = Command::new(env!("CARGO_BIN_EXE_oracle-llm-stub"))
        .args(["--nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage:"));
}
