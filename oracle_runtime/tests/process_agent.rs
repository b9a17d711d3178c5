//! Code agents over the agent protocol (docs/AGENTS.md): a tiny scripted agent in Python, run by
//! the engine into a log, replayed by re-execution, and each failure the protocol names (a
//! crash, a hang past the limit, a malformed line, a `fail`, a bad start) seen as its code.
//! Needs `python3` on PATH (skipped, saying so, without it).

use std::path::PathBuf;

use oracle_core::payload::RunStatus;
use oracle_runtime::engine::{CALLS_MAX_DEFAULT, Ending, Engine, RunConfig};
use oracle_runtime::process_agent::{Command, ProcessAgent, StartError};
use oracle_runtime::{Durability, LogPaths, LogWriter, reader, tools};
use serde_json::{Map, Value, json};

/// A protocol-speaking agent: says hello, then answers each `decide` with the next reply of
/// the script given as JSON in argv[1]; a reply `"crash"` exits, `"hang"` sleeps, `"junk"`
/// writes a line that is not JSON, `"long"` one of 17 MiB, and a reply with `"split": true` is
/// written in two pieces 200 ms apart. Each observation it is shown is echoed to stderr.
const AGENT: &str = r#"
import json, sys, time
script = json.loads(sys.argv[1])
hello = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
h = {"type": "hello", "protocol": 1, "sdk": {"name": "test", "version": "0"},
     "program": {"name": "scripted", "version": 1}, "grants": [], "inputs": {},
     "files": ["agent.py"]}
h.update(hello)
print(json.dumps(h), flush=True)
assert json.loads(sys.stdin.readline())["type"] == "start"
for reply in script:
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    sys.stderr.write(line)
    if reply == "crash":
        sys.exit(3)
    if reply == "hang":
        time.sleep(30)
    if reply == "junk":
        print("this is not json", flush=True)
        continue
    if reply == "long":
        sys.stdout.write("x" * (17 << 20) + "\n")
        sys.stdout.flush()
        continue
    if isinstance(reply, dict) and reply.get("split"):
        del reply["split"]
        text = json.dumps(reply)
        sys.stdout.write(text[:7])
        sys.stdout.flush()
        time.sleep(0.2)
        print(text[7:], flush=True)
        continue
    print(json.dumps(reply), flush=True)
sys.stdin.readline()
"#;

struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

fn python() -> bool {
    let found = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        eprintln!("skipped: no python3 on PATH");
    }
    found
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("agent.py"), AGENT).unwrap();
        std::fs::write(root.join("words.txt"), "one two three").unwrap();
        Scratch { _dir: dir, root }
    }

    fn command(&self, script: &Value, hello: &Value) -> Command {
        let args = vec![
            "agent.py".into(),
            script.to_string().into(),
            hello.to_string().into(),
        ];
        let mut cmd = Command::new("python3", args, &self.root);
        cmd.stderr = Some(self.root.join("agent.stderr"));
        cmd
    }

    fn config(&self, grants: &[&str]) -> RunConfig {
        RunConfig {
            store: vec![],
            seed: 7,
            grants: grants.iter().map(|g| g.parse().unwrap()).collect(),
            inputs: Map::new(),
            root: self.root.clone(),
            jobs: 1,
            calls_max: CALLS_MAX_DEFAULT,
            domains: Default::default(),
            budget: None,
            scorer: None,
            resume_points: Default::default(),
            key: None,
            parent: None,
            shared: None,
            live: None,
        }
    }

    /// Runs the scripted agent into a new log, then replays it with a fresh process and checks
    /// it reproduces; gives the ending and the final state's `output`.
    fn run(&self, script: Value, grants: &[&str], decide_ms: u64) -> (Ending, Option<Value>) {
        let mut cmd = self.command(&script, &json!({}));
        cmd.decide_ms = decide_ms;
        let config = self.config(grants);
        let registry = tools::builtin();
        let dir = tempfile::tempdir_in(&self.root).unwrap();
        let paths = LogPaths::of_run(dir.path());
        let writer = LogWriter::create(&paths, Durability::DEFAULT).unwrap();
        let agent = ProcessAgent::start(&cmd, Map::new()).unwrap();
        let mut engine = Engine::new(agent, &registry, config.clone(), vec![], Some(writer));
        let run = engine.drive().unwrap();
        engine.into_writer().unwrap().close().unwrap();
        let output = run.state.get("output");

        let recorded = reader::read_all(&paths.log).unwrap();
        let agent = ProcessAgent::start(&cmd, Map::new()).unwrap();
        let mut engine = Engine::new(agent, &registry, config, recorded, None);
        let replay = engine.drive().unwrap();
        assert_eq!(replay.head, run.head, "a replay gives the same events");
        assert_eq!(replay.ending, run.ending);
        (run.ending, output)
    }
}

fn failed_with(ending: &Ending, code: &str) {
    match ending {
        Ending::Finished {
            status: RunStatus::Failed,
            reason,
        } => assert!(reason.starts_with(code), "{reason}"),
        other => panic!("expected a failure {code}, got {other:?}"),
    }
}

fn calls(step: &str, tool: &str, input: Value) -> Value {
    json!({"type": "calls", "calls": [{"step": step, "tool": tool, "input": input}],
           "at": {"file": "agent.py", "line": 3}})
}

#[test]
fn a_scripted_agent_runs_records_and_replays() {
    if !python() {
        return;
    }
    let s = Scratch::new();
    let script = json!([
        calls("read", "fs.read", json!({"path": "words.txt"})),
        calls("count", "text.count", json!({"text": "one two three"})),
        {"type": "done", "output": {"words": 3}},
    ]);
    let (ending, output) = s.run(script, &["fs:read:words.txt"], 10_000);
    assert!(
        matches!(
            ending,
            Ending::Finished {
                status: RunStatus::Completed,
                ..
            }
        ),
        "{ending:?}"
    );
    assert_eq!(output, Some(json!({"words": 3})));
    // The agent was shown what its calls returned; stderr went to its file, never the log.
    let stderr = std::fs::read_to_string(s.root.join("agent.stderr")).unwrap();
    assert!(stderr.contains(r#""outcome":"returned""#), "{stderr}");
    assert!(stderr.contains("one two three"), "{stderr}");
}

#[test]
fn an_ungranted_call_is_a_recorded_refusal_the_agent_sees() {
    if !python() {
        return;
    }
    let s = Scratch::new();
    let script = json!([
        calls("read", "fs.read", json!({"path": "words.txt"})),
        {"type": "fail", "reason": "denied"},
    ]);
    let (ending, _) = s.run(script, &[], 10_000);
    failed_with(&ending, "agent_failed: denied");
    let stderr = std::fs::read_to_string(s.root.join("agent.stderr")).unwrap();
    assert!(stderr.contains(r#""outcome":"denied""#), "{stderr}");
}

#[test]
fn a_crash_a_hang_and_a_malformed_line_are_named_failures() {
    if !python() {
        return;
    }
    let s = Scratch::new();
    let (crash, _) = s.run(json!(["crash"]), &[], 10_000);
    failed_with(&crash, "agent_crashed");
    let (hang, _) = s.run(json!(["hang"]), &[], 300);
    failed_with(&hang, "agent_hung");
    let (junk, _) = s.run(json!(["junk"]), &[], 10_000);
    failed_with(&junk, "agent_malformed");
    let twice = json!([
        calls("a", "text.count", json!({"text": "x"})),
        calls("a", "text.count", json!({"text": "y"})),
    ]);
    let (twice, _) = s.run(twice, &[], 10_000);
    failed_with(&twice, "agent_malformed: round 1: step `a` is named twice");
    let (float, _) = s.run(json!([{"type": "done", "output": 1.5}]), &[], 10_000);
    failed_with(&float, "agent_malformed");
    // A line past LINE_BYTES_MAX (16 MiB) is malformed, however it arrives.
    let (long, _) = s.run(json!(["long"]), &[], 10_000);
    failed_with(&long, "agent_malformed: round 0: a line is longer than");
    // A reply that arrives in two pieces is one line, read whole.
    let (split, output) = s.run(
        json!([{"type": "done", "output": {"ok": true}, "split": true}]),
        &[],
        10_000,
    );
    assert!(
        matches!(
            split,
            Ending::Finished {
                status: RunStatus::Completed,
                ..
            }
        ),
        "{split:?}"
    );
    assert_eq!(output, Some(json!({"ok": true})));
}

fn start_error(s: &Scratch, hello: Value) -> StartError {
    let cmd = s.command(&json!([]), &hello);
    ProcessAgent::start(&cmd, Map::new()).unwrap_err()
}

#[test]
fn a_bad_start_is_refused_with_its_code() {
    if !python() {
        return;
    }
    let s = Scratch::new();
    let protocol = start_error(&s, json!({"protocol": 2}));
    assert_eq!(protocol.code(), "agent_protocol", "{protocol}");
    let outside = start_error(&s, json!({"files": ["../agent.py"]}));
    assert_eq!(outside.code(), "agent_file", "{outside}");
    let missing = start_error(&s, json!({"files": ["gone.py"]}));
    assert_eq!(missing.code(), "agent_file", "{missing}");
    let name = json!({"program": {"name": "../escape", "version": 1}});
    let name = start_error(&s, name);
    assert_eq!(name.code(), "agent_hello", "{name}");
    let hello = start_error(&s, json!({"type": "hi"}));
    assert_eq!(hello.code(), "agent_hello", "{hello}");
    // Silent past the hello limit: refused, and the process is ended.
    let args = vec!["-c".into(), "import time; time.sleep(30)".into()];
    let mut slow = Command::new("python3", args, &s.root);
    slow.hello_ms = 300;
    let slow = ProcessAgent::start(&slow, Map::new()).unwrap_err();
    assert_eq!(slow.code(), "agent_hello", "{slow}");
    let cmd = Command::new(s.root.join("no-such-program"), vec![], &s.root);
    let spawn = ProcessAgent::start(&cmd, Map::new()).unwrap_err();
    assert_eq!(spawn.code(), "agent_spawn", "{spawn}");
}

#[test]
fn the_program_hash_covers_every_listed_file() {
    if !python() {
        return;
    }
    let s = Scratch::new();
    let hello = json!({"files": ["agent.py", "words.txt"]});
    let hash = |s: &Scratch| {
        let agent = ProcessAgent::start(&s.command(&json!([]), &hello), Map::new()).unwrap();
        oracle_core::agent::Agent::program_hash(&agent)
    };
    let before = hash(&s);
    assert_eq!(hash(&s), before, "the same files give the same hash");
    std::fs::write(s.root.join("words.txt"), "changed").unwrap();
    assert_ne!(hash(&s), before, "a changed module changes the hash");
}
