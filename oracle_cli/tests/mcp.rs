//! Declared MCP servers end to end (docs/TOOLS.md): the shipped demo plan with all three kinds of
//! declared tool run, verified and replayed by the real binary, replay without the server, and
//! hostile servers (crashing, hanging, malformed, huge, colliding, changing between runs), each
//! a clear recorded failure or refusal. The server is the repository's `oracle-mcp-example`
//! (rmcp), built beside `oracle` by `cargo test --workspace`.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Sandbox, copy_dir, root};
use oracle_core::EventKind;
use serde_json::Value;

/// The directory holding `oracle` and `oracle-mcp-example`.
fn bin_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_oracle"))
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        dir.join("oracle-mcp-example").exists(),
        "{} has no oracle-mcp-example: run the tests with `cargo test --workspace`",
        dir.display()
    );
    dir
}

/// `PATH` with the example server's directory first.
fn path_with_server() -> String {
    format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `oracle ARGS` in the sandbox with `path` as `PATH`: exit code, stdout, stderr.
fn oracle(sb: &Sandbox, path: &str, args: &[&str]) -> (i32, String, String) {
    common::outcome(sb.command(args).env("PATH", path).output().unwrap())
}

/// [`oracle`] with `--json`: exit code and the last line parsed.
fn json(sb: &Sandbox, path: &str, args: &[&str]) -> (i32, Value) {
    let mut args = args.to_vec();
    args.push("--json");
    let (code, out, err) = oracle(sb, path, &args);
    let v = serde_json::from_str(out.lines().last().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, v)
}

fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    copy_dir(&root().join("fixtures/tools"), &sb.path().join("tools"));
    sb
}

#[test]
fn the_demo_plan_runs_every_kind_of_declared_tool_and_replays_without_the_server() {
    let sb = sandbox();
    // The shipped manifest starts the server as `program = "oracle"` (`oracle dev
    // mcp-example`): the running oracle, so nothing but the system's directories on PATH.
    let path = "/usr/bin:/bin";
    let (code, out, err) = oracle(&sb, path, &["tools", "check", "tools"]);
    assert_eq!(code, 0, "{out}{err}");
    for name in [
        "mcp.example.word_count",
        "mcp.example.reverse",
        "data.adler32",
        "text.fingerprint",
    ] {
        assert!(out.contains(name), "{name} in {out}");
    }
    assert!(
        out.contains("needs mcp:example:word_count"),
        "MCP tools need mcp:<server>:<tool>: {out}"
    );
    let (code, v) = json(&sb, path, &["run", "tools/demo.plan"]);
    assert_eq!(code, 0, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    // No host path (the tools directory's, the oracle program's) is in a hashed byte: the
    // same run in another directory has the same head.
    let elsewhere = sandbox();
    let (code, again) = json(&elsewhere, path, &["run", "tools/demo.plan"]);
    assert_eq!(code, 0, "{again}");
    assert_eq!(again["head"], v["head"], "{again} vs {v}");
    let events = sb.events(".oracle", &run);
    let output = |step: &str| {
        events
            .iter()
            .find(|e| e.kind == EventKind::ToolReturned && e.payload["step"] == step)
            .unwrap_or_else(|| panic!("no output of {step}"))
            .payload["output"]
            .clone()
    };
    assert_eq!(output("words"), serde_json::json!({"words": 9}));
    assert_eq!(
        output("reversed")["text"],
        "god yzal eht revo spmuj xof nworb kciuq eht"
    );
    let pins = events[0].payload["tools"].as_array().unwrap();
    let mcp = pins.iter().find(|p| p["name"] == "mcp.example").unwrap();
    assert_eq!(
        (mcp["kind"].as_str(), mcp["effect"].as_str()),
        (Some("mcp"), Some("impure"))
    );
    assert_eq!(mcp["version"], "1.0.0", "the version the server reported");
    // What the server listed is kept with the run.
    let kept = sb
        .path()
        .join(".oracle/runs")
        .join(&run)
        .join("tools/mcp.example.json");
    let listing: Value = serde_json::from_str(&fs::read_to_string(&kept).unwrap()).unwrap();
    assert_eq!(listing["name"], "oracle-mcp-example");
    assert_eq!(listing["tools"].as_array().unwrap().len(), 2);
    let (code, out, err) = oracle(&sb, path, &["verify", &run]);
    assert_eq!(code, 0, "{out}{err}");
    // Replay never starts the server: without it on PATH, the run still reproduces, with the
    // MCP answers taken from the log and the pure tools run again.
    let (code, v) = json(&sb, "/usr/bin:/bin", &["replay", &run]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (v["executed"].as_u64(), v["reused"].as_u64()),
        (Some(2), Some(2)),
        "{v}"
    );
    // Audit runs the pure tools only.
    let (code, v) = json(&sb, "/usr/bin:/bin", &["tools", "audit", &run]);
    assert_eq!(code, 0, "{v}");
}

/// A tools directory holding one MCP manifest for the example server in `mode`.
fn server(sb: &Sandbox, dir: &str, mode: &str, extra: &str) {
    sb.write(
        &format!("{dir}/server.toml"),
        &format!(
            r#"name = "example"
version = "1.0.0"
description = "the example server, {mode}"
timeout_ms = 500
{extra}
[mcp]
program = "oracle-mcp-example"
args = ["--mode", "{mode}"]
start_timeout_ms = 500
"#
        ),
    );
}

fn plan(sb: &Sandbox, name: &str, dir: &str, steps: &str) -> String {
    let path = format!("plans/{name}.plan");
    sb.write(
        &path,
        &format!("plan {name} version 1\ngrant mcp:example:*\ntools \"../{dir}\"\n{steps}"),
    );
    path
}

#[test]
fn a_server_that_crashes_hangs_or_garbles_its_answer_fails_the_call_recorded() {
    let sb = Sandbox::new();
    let path = path_with_server();
    for (mode, expected) in [
        ("crash-on-call", "the MCP server closed its output"),
        ("hang-on-call", "timed out after 500 ms"),
        (
            "malformed-on-call",
            "the MCP server sent a malformed message",
        ),
        (
            "huge-on-call",
            "output is larger than the limit of 8388608 bytes",
        ),
    ] {
        let dir = format!("tools-{mode}");
        server(&sb, &dir, mode, "");
        let p = plan(
            &sb,
            &mode.replace('-', "_"),
            &dir,
            "w = mcp.example.word_count { text: \"a b\" }\n  attempts 1\n",
        );
        let started = std::time::Instant::now();
        let (code, v) = json(&sb, &path, &["run", &p]);
        assert_eq!(code, 1, "{mode}: the run fails: {v}");
        assert!(started.elapsed().as_secs() < 30, "{mode}: no hang");
        let run = v["run"].as_str().unwrap().to_owned();
        let failed = sb
            .events(".oracle", &run)
            .into_iter()
            .rfind(|e| e.kind == EventKind::ToolFailed)
            .unwrap();
        let error = failed.payload["error"].as_str().unwrap();
        assert!(error.contains(expected), "{mode}: {error}");
        let (code, out, err) = oracle(&sb, &path, &["verify", &run]);
        assert_eq!(code, 0, "{mode}: {out}{err}");
        let (code, v) = json(&sb, "/usr/bin:/bin", &["replay", &run]);
        assert_eq!(
            code, 0,
            "{mode}: the failure replays without the server: {v}"
        );
    }
}

#[test]
fn a_server_that_never_starts_or_lists_a_builtin_name_is_refused_before_anything_runs() {
    let sb = Sandbox::new();
    let path = path_with_server();
    for (mode, expected) in [
        ("hang-on-start", "did not answer `initialize` within 500 ms"),
        (
            "collide",
            "lists a tool named `fs.read`, the name of a built-in tool",
        ),
    ] {
        let dir = format!("tools-{mode}");
        server(&sb, &dir, mode, "");
        let p = plan(
            &sb,
            &mode.replace('-', "_"),
            &dir,
            "w = mcp.example.word_count { text: \"a\" }\n",
        );
        let (code, _, err) = oracle(&sb, &path, &["run", &p]);
        assert_eq!(code, 2, "{mode}: {err}");
        assert!(err.contains(expected), "{mode}: {err}");
        assert!(
            !sb.path().join(".oracle/runs").exists(),
            "{mode}: nothing was created"
        );
        let (code, _, err) = oracle(&sb, &path, &["tools", "check", &dir]);
        assert_eq!(code, 2, "{mode}: {err}");
        assert!(err.contains(expected), "{mode}: {err}");
    }
}

#[test]
fn a_server_whose_tool_list_changed_is_refused_by_resume_naming_it() {
    let sb = Sandbox::new();
    // The server's tools depend on a file beside the manifest, which the manifest does not
    // name: only the listing the server reports changes.
    let script = sb.write(
        "tools-changing/server.sh",
        "#!/bin/sh\nORACLE_MCP_EXAMPLE_VARIANT=$(cat variant.txt) exec oracle-mcp-example --mode changing\n",
    );
    let mut perms = fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    fs::set_permissions(&script, perms).unwrap();
    sb.write("tools-changing/variant.txt", "1\n");
    sb.write(
        "tools-changing/server.toml",
        &format!(
            r#"name = "example"
version = "1.0.0"
description = "changes its tools"

[mcp]
program = "server.sh"
env = {{ PATH = "{}:/usr/bin:/bin" }}
"#,
            bin_dir().display()
        ),
    );
    let p = plan(
        &sb,
        "changing",
        "tools-changing",
        "w = mcp.example.word_count { text: \"a b c\" }\nq = human.ask { question: \"ok?\" }\n  after w\n",
    );
    let path = path_with_server();
    let (code, v) = json(&sb, &path, &["run", &p]);
    assert_eq!(code, 3, "suspended: {v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let before = sb.events(".oracle", &run).len();
    sb.write("tools-changing/variant.txt", "2\n");
    let (code, _, err) = oracle(
        &sb,
        &path,
        &["resume", &run, "--step", "q", "--value", "\"yes\""],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("declared tool `mcp.example` changed"), "{err}");
    assert_eq!(sb.events(".oracle", &run).len(), before, "nothing appended");
    // Replay reads the listing the run kept: the change does not matter to it.
    let (code, v) = json(&sb, &path, &["replay", &run]);
    assert_eq!(code, 0, "{v}");
    // Back as it was, the run resumes and completes.
    sb.write("tools-changing/variant.txt", "1\n");
    let (code, v) = json(
        &sb,
        &path,
        &["resume", &run, "--step", "q", "--value", "\"yes\""],
    );
    assert_eq!(code, 0, "{v}");
    let (code, out, err) = oracle(&sb, &path, &["verify", &run]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn the_example_server_refuses_an_unknown_mode_as_a_program_and_as_oracle_dev() {
    // The server speaks MCP through rmcp; oracle's own client is in oracle_runtime and does
    // not use it. The server is both a program of its own (what these tests start by path) and
    // `oracle dev mcp-example` (what the shipped manifest starts): each refuses a mode it does
    // not have with a usage error, so it can be told apart.
    let out = Command::new(bin_dir().join("oracle-mcp-example"))
        .args(["--mode", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(["dev", "mcp-example", "--mode", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("crash-on-call"), "the modes are listed: {err}");
}
