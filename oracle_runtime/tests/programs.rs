//! The programs oracle runs own their process trees: `proc.exec`, `--oracle-cmd` and
//! `--scorer-cmd` programs lead a process group of their own, and a timeout, an output cap or the
//! end of the call kills the whole group, grandchildren included. Real shell scripts that start
//! background processes, write their pids into the scratch directory, and sleep or print on.
//! Linux only: whether a process is gone is read from `/proc`.
#![cfg(target_os = "linux")]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use oracle_auction::{Answer, ScoreRequest};
use oracle_core::State;
use oracle_core::hash::Hash;
use oracle_runtime::oracle::{CommandPort, OraclePort};
use oracle_runtime::scorer::{CommandScorer, SCORER_OUTPUT_BYTES_MAX, Scorer};
use oracle_runtime::tool::{ToolContext, ToolError};
use oracle_runtime::tools;
use serde_json::{Value, json};

/// A scratch directory (canonical, as the runtime passes it) to run programs in.
struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        Scratch { _dir: dir, root }
    }

    /// Writes an executable `sh` script; its body may say `$DIR` for the scratch directory.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.root.join(name);
        let dir = self.root.display().to_string();
        fs::write(&p, format!("#!/bin/sh\nDIR='{dir}'\n{body}\n")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// Calls `proc.exec` with `input` in the scratch directory, the way the runtime does.
    fn exec(
        &self,
        input: Value,
        timeout_ms: u64,
        output_bytes_max: u64,
    ) -> Result<Value, ToolError> {
        let registry = tools::builtin();
        let t = registry.get("proc.exec").unwrap();
        t.input.check(&input).unwrap();
        let state = State::new();
        let cx = ToolContext {
            run: None,
            step: "step",
            attempt: 1,
            tick: 0,
            seed: 0,
            state: &state,
            root: &self.root,
            resolved: None,
            timeout_ms,
            output_bytes_max,
            access: None,
            earlier_failures: &[],
        };
        t.tool.call(&input, &cx).map(|o| o.output)
    }

    /// The pid a script wrote into `name` (it must have written it by now).
    fn pid(&self, name: &str) -> u32 {
        let text = fs::read_to_string(self.root.join(name))
            .unwrap_or_else(|e| panic!("the script never wrote `{name}`: {e}"));
        text.trim().parse().unwrap()
    }
}

/// Whether process `pid` is gone (or dead and only waiting to be reaped by whoever inherited
/// it). A killed process disappears shortly after the kill, so this polls, for at most five
/// seconds: a bound against hanging, not a duration under test.
fn gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let dead = match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            // The state follows the command name in parentheses: `Z` (zombie) or `X` (dead).
            Ok(stat) => stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|s| s == "Z" || s == "X"),
        };
        if dead || Instant::now() >= deadline {
            return dead;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn sh(script: &Path) -> Value {
    json!({"program": "sh", "args": [script.to_str().unwrap()]})
}

// ---------------------------------------------------------------------------------------------
// proc.exec

#[test]
fn a_proc_exec_timeout_kills_the_whole_process_group() {
    let s = Scratch::new();
    let script = s.script(
        "slow.sh",
        "echo $$ > \"$DIR/main.pid\"\nsleep 30 &\necho $! > \"$DIR/bg.pid\"\nsleep 30",
    );
    // Long enough for the script to start its grandchild and write both pids.
    let r = s.exec(sh(&script), 2_000, 1 << 20);
    assert_eq!(r, Err(ToolError::Timeout { timeout_ms: 2_000 }));
    let (main, bg) = (s.pid("main.pid"), s.pid("bg.pid"));
    assert!(gone(main), "the program {main} is still running");
    assert!(gone(bg), "its background child {bg} is still running");
}

#[test]
fn a_program_that_exits_is_not_waited_for_past_its_exit_and_leaves_nothing_behind() {
    let s = Scratch::new();
    // The background `sleep` inherits standard output and error and keeps them open for 30 s;
    // the program itself exits at once.
    let script = s.script(
        "quick.sh",
        "echo before\nsleep 30 &\necho $! > \"$DIR/bg.pid\"\necho after\necho warn >&2\nexit 0",
    );
    // Were the call to wait for the outputs to close, it would time out instead.
    let out = s.exec(sh(&script), 20_000, 1 << 20).unwrap();
    assert_eq!(
        out,
        json!({"status": 0, "stdout": "before\nafter\n", "stderr": "warn\n"})
    );
    let bg = s.pid("bg.pid");
    assert!(gone(bg), "the background child {bg} outlived the call");
}

#[test]
fn a_proc_exec_call_leaves_no_process_behind_even_one_that_closed_its_output() {
    let s = Scratch::new();
    let script = s.script(
        "daemon.sh",
        "sleep 30 > /dev/null 2>&1 < /dev/null &\necho $! > \"$DIR/bg.pid\"\necho ok",
    );
    let out = s.exec(sh(&script), 20_000, 1 << 20).unwrap();
    assert_eq!(out, json!({"status": 0, "stdout": "ok\n", "stderr": ""}));
    let bg = s.pid("bg.pid");
    assert!(gone(bg), "the background child {bg} outlived the call");
}

#[test]
fn a_program_over_the_output_limit_is_killed_with_its_group() {
    let s = Scratch::new();
    let script = s.script(
        "noisy.sh",
        "sleep 30 &\necho $! > \"$DIR/bg.pid\"\nexec yes",
    );
    let r = s.exec(sh(&script), 20_000, 1000);
    assert_eq!(r, Err(ToolError::OutputTooLarge { limit: 1000 }));
    let bg = s.pid("bg.pid");
    assert!(gone(bg), "the background child {bg} outlived the call");
}

// ---------------------------------------------------------------------------------------------
// --oracle-cmd

#[test]
fn an_oracle_cmd_past_its_timeout_is_killed_with_its_group() {
    let s = Scratch::new();
    let program = s.script(
        "oracle.sh",
        "sleep 30 &\necho $! > \"$DIR/bg.pid\"\nexec sleep 30",
    );
    let mut port = CommandPort {
        program: program.clone(),
        timeout_ms: 2_000,
        verdicts: true,
    };
    // A request larger than a pipe holds, which the program never reads, does not stall the
    // wait for its timeout.
    let r = port.notify(&json!({"handle": "h", "pad": "x".repeat(1 << 20)}));
    assert_eq!(
        r.map_err(|e| e.to_string()),
        Err(format!("{}: timed out after 2000 ms", program.display()))
    );
    let bg = s.pid("bg.pid");
    assert!(
        gone(bg),
        "the oracle program's child {bg} outlived its timeout"
    );
}

#[test]
fn an_oracle_cmd_that_exits_leaves_nothing_behind() {
    let s = Scratch::new();
    let program = s.script(
        "oracle.sh",
        "cat > /dev/null\nsleep 30 &\necho $! > \"$DIR/bg.pid\"\nexit 0",
    );
    let mut port = CommandPort {
        program,
        timeout_ms: 20_000,
        verdicts: true,
    };
    assert_eq!(port.notify(&json!({"handle": "h"})).ok(), Some(None));
    let bg = s.pid("bg.pid");
    assert!(gone(bg), "the oracle program's child {bg} outlived it");
}

// ---------------------------------------------------------------------------------------------
// --scorer-cmd

fn score(program: PathBuf, timeout_ms: u64) -> Answer {
    let hash = Hash([0; 32]);
    CommandScorer {
        program,
        timeout_ms,
    }
    .score(&ScoreRequest {
        auction: 1,
        agent: "ann",
        artifact: "essay",
        content: "An essay.\n",
        hash: &hash,
    })
}

#[test]
fn a_scorer_past_its_timeout_is_killed_with_its_group() {
    let s = Scratch::new();
    let program = s.script(
        "scorer.sh",
        "sleep 30 &\necho $! > \"$DIR/bg.pid\"\nexec sleep 30",
    );
    assert_eq!(
        score(program, 2_000),
        Answer::Failed {
            reason: "scorer command: timed out after 2000 ms".to_owned()
        }
    );
    let bg = s.pid("bg.pid");
    assert!(gone(bg), "the scorer's child {bg} outlived its timeout");
}

#[test]
fn a_scorer_that_exits_is_not_waited_for_past_its_exit() {
    let s = Scratch::new();
    // The background child holds stdout open and would spoil the reply, were it waited for.
    let program = s.script(
        "scorer.sh",
        "cat > /dev/null\n(sleep 5; echo late) &\necho $! > \"$DIR/bg.pid\"\necho '{\"score\": 7}'",
    );
    assert_eq!(
        score(program, 20_000),
        Answer::Scored {
            score: 7,
            reason: String::new()
        }
    );
    let bg = s.pid("bg.pid");
    assert!(gone(bg), "the scorer's child {bg} outlived it");
}

/// The reply a scorer over the cap would be taken to give were the cap not enforced: a valid
/// reply followed by more than the cap of spaces (which JSON allows after a value).
const PADDED_REPLY: &str = "printf '{\"score\": 50}'\n";

#[test]
fn a_scorer_printing_past_its_output_cap_is_a_recorded_failure() {
    let s = Scratch::new();
    let cap = SCORER_OUTPUT_BYTES_MAX;
    let expected = Answer::Failed {
        reason: format!(
            "scorer command: bound reached: printed more than scorer_output_bytes_max = {cap}"
        ),
    };
    // A program that dies of the closed pipe (SIGPIPE) once oracle stops reading.
    let program = s.script(
        "loud.sh",
        &format!(
            "{PADDED_REPLY}head -c {} /dev/zero | tr '\\0' ' '\nexit 0",
            cap + 1
        ),
    );
    assert_eq!(score(program, 20_000), expected);
    // A program that ignores the closed pipe and runs on: its group is killed at the cap, not
    // at its timeout (which would be a different failure).
    let program = s.script(
        "stubborn.sh",
        &format!(
            "{PADDED_REPLY}trap '' PIPE\nsleep 30 &\necho $! > \"$DIR/bg.pid\"\nyes ' '\nsleep 30"
        ),
    );
    assert_eq!(score(program, 20_000), expected);
    let bg = s.pid("bg.pid");
    assert!(gone(bg), "the scorer's child {bg} outlived the cap");
    // Exactly at the cap is allowed.
    let program = s.script(
        "full.sh",
        &format!(
            "{PADDED_REPLY}head -c {} /dev/zero | tr '\\0' ' '",
            cap - "{\"score\": 50}".len() as u64
        ),
    );
    assert_eq!(
        score(program, 20_000),
        Answer::Scored {
            score: 50,
            reason: String::new()
        }
    );
}
