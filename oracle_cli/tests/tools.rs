//! Declared tools end to end (docs/TOOLS.md): exec programs and WebAssembly modules declared by
//! manifests, run, replayed and verified by the real binary; a changed tool refused by name;
//! a tool declared pure that is not found by replay and `oracle tools audit`; and hostile
//! modules and programs, each a clear recorded failure or refusal, never a hang or a panic.

use crate::common;

use std::fs;
use std::path::Path;

use common::{Sandbox, copy_dir, root};
use oracle_core::EventKind;
use serde_json::Value;

/// A sandbox with the shipped tools under `tools/`.
fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    copy_dir(&root().join("fixtures/tools"), &sb.path().join("tools"));
    // These tests use exec and wasm only (tests/mcp.rs runs the MCP example): no server to
    // start for each command.
    fs::remove_file(sb.path().join("tools/example.toml")).unwrap();
    sb
}

/// A plan granting `grants`, using the tools of `tools/`, with `steps`.
fn plan(sb: &Sandbox, name: &str, grants: &[&str], steps: &str) -> String {
    let mut text = format!("plan {name} version 1\n");
    for g in grants {
        text.push_str(&format!("grant {g}\n"));
    }
    text.push_str("tools \"../tools\"\n");
    text.push_str(steps);
    let path = format!("plans/{name}.plan");
    sb.write(&path, &text);
    path
}

/// The error of the last `tool_failed` event of a run.
fn failure(sb: &Sandbox, run: &str) -> String {
    sb.events(".oracle", run)
        .into_iter()
        .rfind(|e| e.kind == EventKind::ToolFailed)
        .map(|e| e.payload["error"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no tool_failed in {run}"))
}

fn verify_ok(sb: &Sandbox, run: &str) {
    let (code, out, err) = sb.oracle(&["verify", run]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn exec_and_wasm_tools_run_replay_and_verify_with_their_pins_recorded() {
    let sb = sandbox();
    let p = plan(
        &sb,
        "both",
        &["tool:exec:text.fingerprint"],
        "input text: string = \"hello\"\nfp = text.fingerprint { text: text }\nsum = data.adler32 { text: text }\n",
    );
    let (code, v) = sb.json(&["run", &p, "--json"]);
    assert_eq!(code, 0, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let events = sb.events(".oracle", &run);
    // Compact JSON with sorted keys: `{"text":"hello"}`, 16 bytes.
    let out = |step: &str| {
        events
            .iter()
            .find(|e| e.kind == EventKind::ToolReturned && e.payload["step"] == step)
            .unwrap()
            .payload["output"]
            .clone()
    };
    assert_eq!(
        out("fp"),
        serde_json::json!({"bytes": 16, "crc": 3426297146u64})
    );
    assert_eq!(
        out("sum"),
        serde_json::json!({"adler32": 793838996, "bytes": 16})
    );
    let pins = events[0].payload["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = pins.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["data.adler32", "text.fingerprint"]);
    assert_eq!(pins[0]["kind"], "wasm");
    assert_eq!(pins[1]["effect"], "pure");
    verify_ok(&sb, &run);
    let (code, v) = sb.json(&["replay", &run, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["executed"], 2, "both pure calls ran again: {v}");
    // run.json keeps the directory, absolute, for resume and replay.
    let meta: Value = serde_json::from_str(
        &fs::read_to_string(sb.path().join(".oracle/runs").join(&run).join("run.json")).unwrap(),
    )
    .unwrap();
    assert!(
        meta["tools"][0].as_str().unwrap().ends_with("/tools"),
        "{meta}"
    );
}

#[test]
fn a_changed_module_is_refused_by_name_by_replay_and_resume_unless_allowed() {
    let sb = sandbox();
    let p = plan(
        &sb,
        "ask",
        &[],
        "sum = data.adler32 { text: \"x\" }\nq = human.ask { question: \"go on?\" }\n  after sum\n",
    );
    let (code, v) = sb.json(&["run", &p, "--json"]);
    assert_eq!(code, 3, "suspended: {v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let before = sb.events(".oracle", &run).len();
    fs::write(
        sb.path().join("tools/adler32.wat"),
        fs::read_to_string(sb.path().join("tools/adler32.wat")).unwrap() + ";; edited\n",
    )
    .unwrap();
    let (code, _, err) = sb.oracle(&["replay", &run]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("declared tool `data.adler32` changed"),
        "{err}"
    );
    let (code, _, err) = sb.oracle(&["resume", &run, "--step", "q", "--value", "\"yes\""]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("declared tool `data.adler32` changed"),
        "{err}"
    );
    assert_eq!(sb.events(".oracle", &run).len(), before, "nothing appended");
    let (code, v) = sb.json(&["replay", &run, "--allow-tool-change", "--json"]);
    assert_eq!(code, 0, "a comment changes no output: {v}");
    let (code, v) = sb.json(&[
        "resume",
        &run,
        "--step",
        "q",
        "--value",
        "\"yes\"",
        "--allow-tool-change",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    verify_ok(&sb, &run);
    // A tool that is gone is refused too.
    fs::remove_file(sb.path().join("tools/adler32.toml")).unwrap();
    let (code, _, err) = sb.oracle(&["replay", &run]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`data.adler32` was declared when the run started and is not now"),
        "{err}"
    );
}

/// An exec tool whose program is an interpreter and whose code is a script named in `args`,
/// beside the manifest: the script is pinned with the program (`run_started.tools[].files`),
/// the program is given the script beside the manifest (not a file of the run's working
/// directory), and a script changed after the run started is refused by `replay` and `resume`,
/// naming the tool and the file, as a changed module is (red team, issue 32, item 10).
#[test]
fn a_changed_script_named_in_args_is_refused_by_name_by_replay_and_resume_unless_allowed() {
    let sb = sandbox();
    sb.write("tools/script.sh", "cat > /dev/null\nprintf '{\"v\":1}'\n");
    sb.write(
        "tools/script.toml",
        r#"name = "text.script"
version = "1.0.0"
description = "a shell script run by the system's shell"
effect = "pure"
input_schema = { type = "object", properties = { text = { type = "string" } }, required = ["text"] }
output_schema = { type = "object", properties = { v = { type = "integer" } }, required = ["v"] }

[exec]
program = "/bin/sh"
args = ["script.sh", "--not-a-file"]
env = { PATH = "/usr/bin:/bin" }
"#,
    );
    let p = plan(
        &sb,
        "script",
        &["tool:exec:text.script"],
        "s = text.script { text: \"x\" }\nq = human.ask { question: \"go on?\" }\n  after s\n",
    );
    let (code, v) = sb.json(&["run", &p, "--json"]);
    assert_eq!(code, 3, "suspended: {v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let events = sb.events(".oracle", &run);
    let out = events
        .iter()
        .find(|e| e.kind == EventKind::ToolReturned && e.payload["step"] == "s")
        .unwrap_or_else(|| panic!("the script ran: {:?}", failure(&sb, &run)));
    assert_eq!(out.payload["output"], serde_json::json!({"v": 1}));
    let pin = events[0].payload["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "text.script")
        .unwrap()
        .clone();
    let files = pin["files"].as_array().unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    // The argument naming a file first, then every other file of its directory an interpreter
    // may load (sorted; its own manifest is pinned whole already).
    assert_eq!(
        paths,
        [
            "script.sh",
            "adler32.toml",
            "adler32.wat",
            "demo.plan",
            "fingerprint.sh",
            "fingerprint.toml"
        ],
        "{pin}"
    );
    let script = fs::read(sb.path().join("tools/script.sh")).unwrap();
    assert_eq!(
        files[0]["hash"],
        oracle_runtime::declared::file_hash(&script).to_hex()
    );
    // A wasm tool pins as before: no `files`.
    for other in events[0].payload["tools"].as_array().unwrap() {
        if other["kind"] == "wasm" {
            assert!(other.get("files").is_none(), "{other}");
        }
    }
    let before = sb.events(".oracle", &run).len();
    fs::write(
        sb.path().join("tools/script.sh"),
        String::from_utf8(script).unwrap() + "# edited\n",
    )
    .unwrap();
    // Both tools of the directory pin `script.sh`: `text.script` names it in its args, and
    // `text.fingerprint`, a `#!` script, may load it from beside itself. The first changed tool
    // by name is named.
    let (code, _, err) = sb.oracle(&["replay", &run]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("declared tool `text.fingerprint` changed"),
        "{err}"
    );
    assert!(
        err.contains(
            "`script.sh`, a file of the tool (named in its args, or beside its script), differs"
        ),
        "{err}"
    );
    let (code, _, err) = sb.oracle(&["resume", &run, "--step", "q", "--value", "\"yes\""]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("declared tool `text.fingerprint` changed"),
        "{err}"
    );
    assert!(err.contains("`script.sh`"), "{err}");
    assert_eq!(sb.events(".oracle", &run).len(), before, "nothing appended");
    let (code, v) = sb.json(&["replay", &run, "--allow-tool-change", "--json"]);
    assert_eq!(code, 0, "a comment changes no output: {v}");
    let (code, v) = sb.json(&[
        "resume",
        &run,
        "--step",
        "q",
        "--value",
        "\"yes\"",
        "--allow-tool-change",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    verify_ok(&sb, &run);
}

/// An interpreted tool in a directory of its own (`tools/NAME/`): its manifest, its script
/// `entry` run by `program`, and the module `module` the script loads from beside it.
fn interpreted_tool(
    sb: &Sandbox,
    name: &str,
    program: &str,
    entry: (&str, &str),
    module: (&str, &str),
) {
    sb.write(&format!("tools/{name}/{}", entry.0), entry.1);
    sb.write(&format!("tools/{name}/{}", module.0), module.1);
    sb.write(
        &format!("tools/{name}/{name}.toml"),
        &format!(
            r#"name = "lib.{name}"
version = "1.0.0"
description = "a script that loads a module beside it"
effect = "pure"
input_schema = {{ type = "object" }}
output_schema = {{ type = "object", properties = {{ v = {{ type = "integer" }} }}, required = ["v"] }}

[exec]
program = "{program}"
args = ["{}"]
env = {{ PATH = "/usr/bin:/bin" }}
"#,
            entry.0
        ),
    );
}

/// Issue 53: an interpreted tool pins every file it may load from its script's directory, the
/// modules it imports included: an edited module refuses `replay` and `resume`, naming it, as
/// an edited script does. Python's bytecode cache, written beside the module by the first run,
/// is not pinned (the run replays with it there).
#[test]
fn a_changed_module_beside_an_interpreted_script_is_refused_by_name() {
    let sb = sandbox();
    interpreted_tool(
        &sb,
        "shlib",
        "/bin/sh",
        (
            "main.sh",
            ". \"$(dirname \"$0\")/lib.sh\"\ncat > /dev/null\nprintf '{\"v\":%s}' \"$V\"\n",
        ),
        ("lib.sh", "V=1\n"),
    );
    let python = Path::new("/usr/bin/python3").exists();
    if python {
        interpreted_tool(
            &sb,
            "pylib",
            "/usr/bin/python3",
            (
                "main.py",
                "import json, sys\nimport helper\nsys.stdin.read()\nprint(json.dumps({\"v\": helper.V}))\n",
            ),
            ("helper.py", "V = 1\n"),
        );
    }
    let mut grants = vec!["tool:exec:lib.shlib"];
    let mut steps = String::from("s = lib.shlib {}\n");
    if python {
        grants.push("tool:exec:lib.pylib");
        steps.push_str("p = lib.pylib {}\n");
    }
    steps.push_str("q = human.ask { question: \"go on?\" }\n  after s\n");
    let mut text = String::from("plan modules version 1\n");
    for g in &grants {
        text.push_str(&format!("grant {g}\n"));
    }
    text.push_str("tools \"../tools/shlib\"\n");
    if python {
        text.push_str("tools \"../tools/pylib\"\n");
    }
    text.push_str(&steps);
    let p = sb.write("plans/modules.plan", &text);
    let p = p.to_str().unwrap().to_owned();
    let (code, v) = sb.json(&["run", &p, "--json"]);
    assert_eq!(code, 3, "suspended: {v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let events = sb.events(".oracle", &run);
    let pins = events[0].payload["tools"].as_array().unwrap().clone();
    let files_of = |name: &str| -> Vec<String> {
        let pin = pins.iter().find(|p| p["name"] == name).unwrap();
        pin["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(files_of("lib.shlib"), ["main.sh", "lib.sh"]);
    let mut edits = vec![("lib.shlib", "tools/shlib/lib.sh", "V=2\n", "lib.sh")];
    if python {
        assert_eq!(files_of("lib.pylib"), ["main.py", "helper.py"]);
        assert!(
            sb.path().join("tools/pylib/__pycache__").is_dir(),
            "python cached the module"
        );
        edits.push(("lib.pylib", "tools/pylib/helper.py", "V = 2\n", "helper.py"));
    }
    // Unchanged (the cache there too): the run replays.
    let (code, v) = sb.json(&["replay", &run, "--json"]);
    assert_eq!(code, 0, "{v}");
    let before = fs::read(sb.log(".oracle", &run)).unwrap();
    for (tool, path, edited, named) in edits {
        let kept = fs::read(sb.path().join(path)).unwrap();
        fs::write(sb.path().join(path), edited).unwrap();
        let (code, _, err) = sb.oracle(&["replay", &run]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("declared tool `{tool}` changed")),
            "{err}"
        );
        assert!(
            err.contains(&format!("`{named}`, a file of the tool")),
            "{err}"
        );
        let (code, _, err) = sb.oracle(&["resume", &run, "--step", "q", "--value", "\"yes\""]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(&format!("`{named}`")), "{err}");
        assert_eq!(
            fs::read(sb.log(".oracle", &run)).unwrap(),
            before,
            "nothing appended"
        );
        fs::write(sb.path().join(path), kept).unwrap();
    }
    // A module added beside the script is refused too (it could shadow one).
    sb.write("tools/shlib/extra.sh", "V=3\n");
    let (code, _, err) = sb.oracle(&["replay", &run]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`extra.sh`"), "{err}");
}

#[test]
fn an_exec_tool_declared_pure_that_counts_is_named_by_replay_and_audit() {
    let sb = sandbox();
    sb.write(
        "tools/counter.sh",
        "#!/bin/sh\n# Not pure: counts its calls in a file of the working directory.\nn=$(cat count.txt 2>/dev/null || echo 0)\nn=$((n + 1))\necho $n > count.txt\nprintf '{\"n\":%s}' $n\n",
    );
    let script = sb.path().join("tools/counter.sh");
    let mut perms = fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    fs::set_permissions(&script, perms).unwrap();
    sb.write(
        "tools/counter.toml",
        r#"name = "demo.counter"
version = "1.0.0"
description = "Declared pure, but counts its calls"
effect = "pure"
input_schema = { type = "object" }
output_schema = { type = "object", properties = { n = { type = "integer" } }, required = ["n"] }

[exec]
program = "counter.sh"
env = { PATH = "/usr/bin:/bin" }
"#,
    );
    let p = plan(
        &sb,
        "count",
        &["tool:exec:demo.counter"],
        "a = demo.counter {}\nb = demo.counter {}\n  after a\n",
    );
    let (code, v) = sb.json(&["run", &p, "--json"]);
    assert_eq!(code, 0, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let (code, out, err) = sb.oracle(&["replay", &run]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains("tool `demo.counter` declared pure returned different output"),
        "{err}"
    );
    let (code, v) = sb.json(&["replay", &run, "--json"]);
    assert_eq!(code, 4);
    assert_eq!(v["error"]["pure_tool_varied"], "demo.counter", "{v}");
    let (code, out, err) = sb.oracle(&["tools", "audit", &run, "--times", "2"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("VARIES   demo.counter: 2 of 2 calls"), "{out}");
    // The shipped pure tools do not vary.
    let p = plan(
        &sb,
        "steady",
        &["tool:exec:text.fingerprint"],
        "fp = text.fingerprint { text: \"a\" }\nsum = data.adler32 { text: \"b\" }\n",
    );
    let (_, v) = sb.json(&["run", &p, "--json"]);
    let run = v["run"].as_str().unwrap().to_owned();
    let (code, v) = sb.json(&["tools", "audit", &run, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["tools"].as_array().unwrap().len(), 2, "{v}");
}

/// A wasm manifest for `module` (text) named `bad.NAME`, with small limits.
fn wasm_tool(sb: &Sandbox, name: &str, wat: &str) {
    sb.write(&format!("tools/{name}.wat"), wat);
    sb.write(
        &format!("tools/{name}.toml"),
        &format!(
            r#"name = "bad.{name}"
version = "1.0.0"
description = "hostile"
input_schema = {{ type = "object" }}
output_schema = {{}}

[wasm]
module = "{name}.wat"
fuel_max = 1_000_000
memory_bytes_max = 1_048_576
"#
        ),
    );
}

const ABI: &str = r#"(memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) i32.const 1024)"#;

#[test]
fn hostile_wasm_modules_fail_their_call_recorded_and_the_run_verifies() {
    let sb = sandbox();
    let cases = [
        (
            "spin",
            "(func (export \"run\") (param i32 i32) (result i64) (loop $l (br $l)) i64.const 0)",
            "ran out of fuel: the manifest allows 1000000 units per call",
        ),
        (
            "hog",
            "(func (export \"run\") (param i32 i32) (result i64) (loop $l (drop (memory.grow (i32.const 1))) (br $l)) i64.const 0)",
            "tried to grow its memory past the limit of 1048576 bytes",
        ),
        (
            "trap",
            "(func (export \"run\") (param i32 i32) (result i64) unreachable)",
            "trapped:",
        ),
        (
            "garbage",
            "(data (i32.const 0) \"not json\") (func (export \"run\") (param i32 i32) (result i64) i64.const 8)",
            "the module returned 8 bytes that are not JSON",
        ),
        (
            "outside",
            "(func (export \"run\") (param i32 i32) (result i64) i64.const 0x7fff000000000010)",
            "returned an output outside the module's memory",
        ),
    ];
    for (name, run_fn, _) in &cases {
        wasm_tool(&sb, name, &format!("(module {ABI}\n  {run_fn})"));
    }
    let (code, out, err) = sb.oracle(&["tools", "check", "tools"]);
    assert_eq!(code, 0, "{out}{err}");
    for (name, _, expected) in cases {
        let p = plan(
            &sb,
            name,
            &[],
            &format!("x = bad.{name} {{}}\n  attempts 1\n"),
        );
        let (code, v) = sb.json(&["run", &p, "--json"]);
        assert_eq!(code, 1, "{name}: the run fails: {v}");
        let run = v["run"].as_str().unwrap().to_owned();
        let error = failure(&sb, &run);
        assert!(error.contains(expected), "{name}: {error}");
        verify_ok(&sb, &run);
        let (code, v) = sb.json(&["replay", &run, "--json"]);
        assert_eq!(code, 0, "{name}: the failure replays: {v}");
    }
}

#[test]
fn a_module_with_imports_or_without_the_abi_is_refused_before_anything_runs() {
    let sb = sandbox();
    wasm_tool(
        &sb,
        "clock",
        &format!(
            "(module (import \"wasi\" \"clock_time_get\" (func)) {ABI} (func (export \"run\") (param i32 i32) (result i64) i64.const 0))"
        ),
    );
    wasm_tool(&sb, "empty", "(module)");
    let (code, out, err) = sb.oracle(&["tools", "check", "tools"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("2 problems"), "{err}");
    assert!(
        err.contains("the module imports wasi.clock_time_get: a wasm tool gets no imports"),
        "{err}"
    );
    assert!(err.contains("does not export `memory`"), "{err}");
    // A plan that uses a broken module is refused before anything is written, naming it.
    let p = plan(&sb, "imports", &[], "x = bad.clock { }\n");
    let (code, _, err) = sb.oracle(&["run", &p]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("tool `bad.clock` is declared by a manifest that cannot be loaded")
            && err.contains("clock.toml")
            && err.contains("the module imports wasi.clock_time_get"),
        "{err}"
    );
    assert!(
        !sb.path().join(".oracle/runs").exists()
            || fs::read_dir(sb.path().join(".oracle/runs"))
                .unwrap()
                .count()
                == 0,
        "no run directory was created"
    );
}

/// An exec manifest named `bad.NAME` running `NAME.sh` with `script` as its body.
fn exec_tool(sb: &Sandbox, name: &str, script: &str, extra: &str) {
    let path = sb.write(
        &format!("tools/{name}.sh"),
        &format!("#!/bin/sh\n{script}\n"),
    );
    let mut perms = fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    fs::set_permissions(&path, perms).unwrap();
    sb.write(
        &format!("tools/{name}.toml"),
        &format!(
            r#"name = "bad.{name}"
version = "1.0.0"
description = "hostile"
{extra}
input_schema = {{ type = "object" }}
output_schema = {{ type = "object", properties = {{ ok = {{ type = "boolean" }} }}, required = ["ok"] }}

[exec]
program = "{name}.sh"
env = {{ PATH = "/usr/bin:/bin" }}
"#
        ),
    );
}

#[test]
fn hostile_exec_tools_fail_their_call_recorded_and_leave_no_process() {
    let sb = sandbox();
    let pid_file = sb.path().join("child.pid");
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "flood",
            // A gigabyte, far past the limit: killed once the limit is passed.
            "head -c 1000000000 /dev/zero".to_owned(),
            "output_bytes_max = 65536",
            "output is larger than the limit of 65536 bytes",
        ),
        (
            "stuck",
            "sleep 1000".to_owned(),
            "timeout_ms = 300",
            "timed out after 300 ms",
        ),
        (
            "forks",
            format!("sleep 1000 &\necho $! > {}\nsleep 1000", pid_file.display()),
            "timeout_ms = 300",
            "timed out after 300 ms",
        ),
        (
            "liar",
            "echo '{\"ok\": \"yes\"}'".to_owned(),
            "",
            "output does not match the tool's output schema",
        ),
        (
            "prose",
            "echo 'all good'".to_owned(),
            "",
            "`prose.sh` printed something that is not JSON on stdout",
        ),
        (
            "sad",
            "echo 'disk on fire' >&2; exit 3".to_owned(),
            "",
            "`sad.sh` exited with status 3; stderr: disk on fire",
        ),
    ];
    for (name, script, extra, _) in &cases {
        exec_tool(&sb, name, script, extra);
    }
    for (name, _, _, expected) in &cases {
        let grant = format!("tool:exec:bad.{name}");
        let p = plan(
            &sb,
            name,
            &[&grant],
            &format!("x = bad.{name} {{}}\n  attempts 1\n"),
        );
        let (code, v) = sb.json(&["run", &p, "--json"]);
        assert_eq!(code, 1, "{name}: the run fails: {v}");
        let run = v["run"].as_str().unwrap().to_owned();
        let error = failure(&sb, &run);
        assert!(error.contains(expected), "{name}: {error}");
        assert!(
            !error.contains(sb.path().to_str().unwrap()),
            "no absolute path: {error}"
        );
        verify_ok(&sb, &run);
    }
    // The child the script left running went with its process group.
    let pid = fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    // Killed, it may linger as a zombie until its new parent reaps it: that is not running.
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .next();
    let alive = matches!(state, Some(s) if s != "Z" && s != "X");
    assert!(!alive, "process {pid} outlived its call");
}

#[test]
fn tools_check_reports_every_problem_of_a_directory_located() {
    let sb = Sandbox::new();
    sb.write(
        "bad/a.toml",
        "name = \"x.y\"\nversion = \"1\"\ndescription = \"d\"\neffect = \"sometimes\"\ninput_schema = { type = \"object\" }\noutput_schema = {}\n[wasm]\nmodule = \"missing.wat\"\n",
    );
    sb.write(
        "bad/b.toml",
        "name = \"fs.read\"\nversion = \"1\"\ndescription = \"shadows a built-in\"\ninput_schema = { type = \"object\" }\noutput_schema = {}\n[exec]\nprogram = \"/bin/true\"\n",
    );
    sb.write(
        "bad/c.toml",
        "name = \"c\"\nversion = \"1\"\ncolour = \"red\"\n",
    );
    sb.write(
        "bad/d.toml",
        "name = \"d.d\"\nversion = \"1\"\ndescription = \"d\"\ncapability = \"fs:read:{path}\"\ninput_schema = { type = \"object\" }\noutput_schema = {}\n[exec]\nprogram = \"/bin/true\"\n",
    );
    let (code, v) = sb.json(&["tools", "check", "bad", "--json"]);
    assert_eq!(code, 2, "{v}");
    let problems = v["error"]["problems"].as_array().unwrap();
    let text: Vec<String> = problems
        .iter()
        .map(|p| {
            format!(
                "{}:{}:{} {}",
                p["path"].as_str().unwrap().rsplit('/').next().unwrap(),
                p["line"],
                p["col"],
                p["message"].as_str().unwrap()
            )
        })
        .collect();
    let all = text.join("\n");
    for expected in [
        "a.toml:4:1 `effect` is `pure` or `impure`, not `sometimes`",
        "a.toml:8:1 module `missing.wat` not found beside the manifest",
        "c.toml:3:1 unknown field `colour`",
        "d.toml:4:1 `capability` takes its scope from `path`, which must be a required string property of `input_schema`",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in\n{all}");
    }
    // The collision with a built-in is found once the valid manifests are registered.
    fs::remove_file(sb.path().join("bad/a.toml")).unwrap();
    fs::remove_file(sb.path().join("bad/c.toml")).unwrap();
    fs::remove_file(sb.path().join("bad/d.toml")).unwrap();
    let (code, _, err) = sb.oracle(&["tools", "check", "bad"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`fs.read` is already a tool"), "{err}");
}

/// Issue 34: one broken manifest (a missing MCP program, a wasm module that is not there, a
/// file that is not TOML) does not disable the directory: its other tools serve plans, `tools
/// check` names each problem (exit 2), and only a plan that uses a broken tool is refused,
/// before its first event, naming the tool and the problem.
#[test]
fn a_broken_manifest_is_refused_only_by_the_plans_that_use_it() {
    let sb = sandbox();
    sb.write(
        "tools/gone.toml",
        "name = \"gone\"\nversion = \"1\"\ndescription = \"a server not installed\"\n[mcp]\nprogram = \"no-such-mcp-server\"\n",
    );
    sb.write(
        "tools/lost.toml",
        "name = \"data.lost\"\nversion = \"1\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\noutput_schema = {}\n[wasm]\nmodule = \"lost.wat\"\n",
    );
    sb.write(
        "tools/mangled.toml",
        "name = \"data.mangled\"\nversion = [\n",
    );
    let (code, out, err) = sb.oracle(&["tools", "check", "tools"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("ok       data.adler32"),
        "the others are fine: {out}"
    );
    assert!(out.contains("ok       text.fingerprint"), "{out}");
    for expected in [
        "3 problems",
        "gone.toml: program `no-such-mcp-server` not found",
        "lost.toml:7:1: module `lost.wat` not found beside the manifest",
        "mangled.toml:",
    ] {
        assert!(err.contains(expected), "{expected:?} in {err}");
    }
    let (code, v) = sb.json(&["tools", "check", "tools", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["problems"].as_array().unwrap().len(), 3, "{v}");
    assert_eq!(v["tools"].as_array().unwrap().len(), 2, "{v}");

    // A plan using only the good tools runs, replays and verifies; the broken ones are not pinned.
    let good = plan(&sb, "good", &[], "sum = data.adler32 { text: \"hi\" }\n");
    let (code, v) = sb.json(&["run", &good, "--json"]);
    assert_eq!(code, 0, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let pins = sb.events(".oracle", &run)[0].payload["tools"].clone();
    let names: Vec<&str> = pins
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["data.adler32", "text.fingerprint"]);
    let (code, v) = sb.json(&["replay", &run, "--json"]);
    assert_eq!(code, 0, "{v}");
    verify_ok(&sb, &run);
    let (code, out, err) = sb.oracle(&[
        "tools",
        "call",
        "data.adler32",
        "--input",
        r#"{"text":"hi"}"#,
        "--tools",
        "tools",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("warning:") && err.contains("gone.toml"),
        "{err}"
    );

    // Plans that use a broken tool are refused before anything is written, naming the tool and
    // why: `plan check` with line and column, `run` with exit 2 and no new run.
    let runs = || {
        fs::read_dir(sb.path().join(".oracle/runs"))
            .unwrap()
            .count()
    };
    let before = runs();
    for (name, step, tool, why) in [
        (
            "mcp",
            "n = mcp.gone.word_count { text: \"a b\" }\n",
            "mcp.gone.word_count",
            "program `no-such-mcp-server` not found",
        ),
        (
            "wasm",
            "n = data.lost { }\n",
            "data.lost",
            "module `lost.wat` not found beside the manifest",
        ),
        (
            "toml",
            "n = data.mangled { }\n",
            "data.mangled",
            "mangled.toml:",
        ),
    ] {
        let p = plan(&sb, name, &["mcp:gone:*"], step);
        let (code, out, err) = sb.oracle(&["plan", "check", &p]);
        assert_eq!(code, 2, "{name}: {out}{err}");
        let said = format!("{out}{err}");
        assert!(
            said.contains(&format!(
                "tool `{tool}` is declared by a manifest that cannot be loaded"
            )) && said.contains(why)
                && said.contains("E0205"),
            "{name}: {said}"
        );
        let (code, _, err) = sb.oracle(&["run", &p]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(why), "{name}: {err}");
        assert_eq!(runs(), before, "{name}: no run was started");
    }
    let (code, _, err) = sb.oracle(&[
        "tools",
        "call",
        "mcp.gone.word_count",
        "--input",
        "{}",
        "--tools",
        "tools",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("program `no-such-mcp-server` not found"),
        "{err}"
    );
}

#[test]
fn tools_list_shows_builtin_and_declared_tools_and_call_runs_one_unrecorded() {
    let sb = sandbox();
    let (code, v) = sb.json(&["tools", "list", "--tools", "tools", "--json"]);
    assert_eq!(code, 0, "{v}");
    let tools = v["tools"].as_array().unwrap();
    let find = |n: &str| tools.iter().find(|t| t["name"] == n).unwrap().clone();
    assert_eq!(find("fs.read")["kind"], "builtin");
    assert_eq!(find("data.adler32")["kind"], "wasm");
    assert_eq!(find("data.adler32")["capability"], "-");
    assert_eq!(
        find("text.fingerprint")["capability"],
        "tool:exec:text.fingerprint"
    );
    let (code, out, _) = sb.oracle(&["tools", "list", "--tools", "tools"]);
    assert_eq!(code, 0);
    assert!(out.lines().next().unwrap().starts_with("NAME"), "{out}");
    let (code, v) = sb.json(&[
        "tools",
        "call",
        "data.adler32",
        "--input",
        r#"{"text":"hello"}"#,
        "--tools",
        "tools",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["output"]["adler32"], 793838996);
    let (code, _, err) = sb.oracle(&[
        "tools",
        "call",
        "data.adler32",
        "--input",
        "{}",
        "--tools",
        "tools",
    ]);
    assert_eq!(code, 2, "the input is checked: {err}");
    assert!(!sb.path().join(".oracle").exists(), "nothing recorded");
}

#[test]
fn an_agent_step_is_offered_declared_tools_and_its_calls_replay() {
    let sb = sandbox();
    let script = vec![
        serde_json::json!({"tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "data__adler32",
            "arguments": "{\"text\":\"hello\"}",
        }}]}),
        serde_json::json!({"json": {"sum": 793838996}}),
    ];
    let stub = oracle_llm_stub::Stub::start(script).unwrap();
    let p = plan(
        &sb,
        "agent_tools",
        &["llm:chat:fast"],
        r#"a = agent {
  model: "fast",
  instructions: "Checksum the text with the tool, then reply with JSON.",
  task: "hello",
  tools: ["data.adler32"],
  max_turns: 3,
  output: { type: "object", properties: { sum: { type: "integer" } }, required: ["sum"] },
}
"#,
    );
    let model = format!("fast={}", stub.url());
    let (code, v) = sb.json(&["run", &p, "--model", &model, "--json"]);
    assert_eq!(code, 0, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let requests = stub.requests();
    assert_eq!(
        requests[0].body["tools"][0]["function"]["name"], "data__adler32",
        "the declared tool is offered by its function name"
    );
    let events = sb.events(".oracle", &run);
    let returned = events
        .iter()
        .find(|e| e.kind == EventKind::ToolReturned && e.payload["tool"] == "data.adler32")
        .unwrap();
    assert_eq!(returned.payload["step"], "a@1.1");
    assert_eq!(returned.payload["output"]["adler32"], 793838996);
    drop(stub);
    let (code, v) = sb.json(&["replay", &run, "--json"]);
    assert_eq!(
        code, 0,
        "the model is not asked, the module runs again: {v}"
    );
}
