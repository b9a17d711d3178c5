//! A Rust agent without a plan: implements `oracle_core::agent::Agent` directly, runs it with the
//! built-in tools into a log, then replays that log by re-execution and checks it reproduces.
//!
//! The agent reads a file (`fs.read`, impure: replay takes its output from the log), counts its
//! words (`text.count`, pure: replay runs it again and compares), records the count in the run's
//! state with its own state change, and finishes.
//!
//! ```sh
//! cargo run -p oracle_runtime --example custom_agent            # in a temporary directory
//! cargo run -p oracle_runtime --example custom_agent -- HOME    # kept in HOME/runs/word-count-*
//! ```

use std::path::Path;

use oracle_core::agent::{Action, Agent, AgentError, Call, Decision, Observation, Outcome};
use oracle_core::hash::{domain, hash_in};
use oracle_core::payload::{RunStatus, StateChanged};
use oracle_core::{Hash, State};
use oracle_runtime::engine::{CALLS_MAX_DEFAULT, Ending, Engine, RunConfig};
use oracle_runtime::{Durability, LogPaths, LogWriter, reader, tools};
use serde_json::{Map, Value, json};

/// Counts the words of one file. It keeps no state of its own: each decision is a function of
/// the observations alone, which is all determinism asks for (an agent may also keep caches, as
/// long as they are derived only from what `decide` has been shown).
struct WordCounter {
    path: String,
}

/// A decision to call one tool (first attempt, the tool's own timeout).
fn call(step: &str, tool: &str, input: Value) -> Decision {
    let (step, tool) = (step.into(), tool.into());
    let call = Call {
        step,
        tool,
        attempt: 1,
        input,
        timeout_ms: None,
        // The steps this call reads, for the causal links of its events (none: the run start).
        reads: vec![],
    };
    Decision {
        changes: vec![],
        action: Action::Call(vec![call]),
    }
}

impl Agent for WordCounter {
    fn program(&self) -> &str {
        "word-count"
    }

    /// Identifies the program in `run_started`: any fixed hash of its definition will do. A
    /// change in behaviour should change it (hence the version in the hashed text).
    fn program_hash(&self) -> Hash {
        hash_in(domain::VALUE, b"example word-count agent, version 1")
    }

    fn decide(&mut self, _state: &State, seen: &[Observation]) -> Result<Decision, AgentError> {
        // `seen` holds the outcomes of the previous decision's calls (one call each here).
        let Some(last) = seen.first() else {
            // The first decision of a run: nothing observed yet.
            return Ok(call("read", "fs.read", json!({"path": self.path})));
        };
        match (last.step.as_str(), &last.outcome) {
            ("read", Outcome::Returned(out)) => {
                Ok(call("count", "text.count", json!({"text": out["text"]})))
            }
            ("count", Outcome::Returned(out)) => {
                // The agent's own state change: recorded as one `state_changed` event.
                let set = Map::from_iter([("words".to_owned(), out["words"].clone())]);
                let changes = vec![StateChanged {
                    set,
                    delete: vec![],
                }];
                let (status, reason) = (RunStatus::Completed, String::new());
                let action = Action::Finish { status, reason };
                Ok(Decision { changes, action })
            }
            // Failed, denied or unexpected: fail the run, saying why. The reason is recorded and
            // hashed, so it is built from the outcome's text, never from `Debug` output.
            (step, outcome) => {
                let why = match outcome {
                    Outcome::Failed(error) => error.as_str(),
                    Outcome::Denied { reason, .. } => reason.as_str(),
                    _ => "unexpected outcome",
                };
                let (status, reason) = (RunStatus::Failed, format!("step `{step}`: {why}"));
                let action = Action::Finish { status, reason };
                Ok(Decision {
                    changes: vec![],
                    action,
                })
            }
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Where the log goes: a new directory under HOME/runs (kept), or a temporary one.
    let home = std::env::args().nth(1);
    let dir = match &home {
        Some(h) => {
            let runs = Path::new(h).join("runs");
            std::fs::create_dir_all(&runs)?;
            tempfile::Builder::new()
                .prefix("word-count-")
                .tempdir_in(runs)?
        }
        None => tempfile::tempdir()?,
    };
    let paths = LogPaths::of_run(dir.path());

    // Relative paths in tool inputs resolve against `root` (canonical); grants say what the
    // run may touch, and every call is checked against them before its tool runs.
    let config = RunConfig {
        store: vec![],
        seed: 7,
        grants: vec!["fs:read:fixtures/data/**".parse()?],
        inputs: Map::new(),
        root: Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .canonicalize()?,
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
    };
    let registry = tools::builtin();
    let agent = || WordCounter {
        path: "fixtures/data/notes.txt".into(),
    };

    // Run: no recorded events, and a writer to append to.
    let writer = LogWriter::create(&paths, Durability::DEFAULT)?;
    let mut engine = Engine::new(agent(), &registry, config.clone(), Vec::new(), Some(writer));
    let run = engine.drive()?;
    if let Some(w) = engine.into_writer() {
        w.close()?; // syncs and releases the log's lock
    }
    println!("log:    {}", paths.log.display());
    println!("ending: {:?}", run.ending);
    println!("events: {}, head {}", run.events, run.head);
    println!("state:  hash {}", run.state.hash());
    for (key, value) in run.state.iter() {
        println!("  {key} = {value}");
    }
    let completed = Ending::Finished {
        status: RunStatus::Completed,
        reason: String::new(),
    };
    assert_eq!(run.ending, completed);

    // Replay by re-execution: a fresh agent, the recorded events, and no writer. The engine
    // compares every event it produces with the recorded one and stops at the end of the log.
    let recorded = reader::read_all(&paths.log)?;
    let mut engine = Engine::new(agent(), &registry, config, recorded, None);
    let replay = engine.drive()?;
    println!(
        "replay: {} events matched; {} call(s) re-executed, {} taken from the log",
        replay.matched, replay.executed, replay.reused
    );
    assert_eq!(replay.head, run.head);
    assert_eq!(replay.state.hash(), run.state.hash());
    assert_eq!(replay.ending, run.ending);

    if home.is_some() {
        let kept = dir.keep(); // leave the run for `oracle verify` / `oracle log`
        println!("kept:   {}", kept.display());
    }
    Ok(())
}
