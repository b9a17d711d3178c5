//! Scorers: where an auction's winning artifacts get their scores.
//!
//! A scorer is an oracle: its answer is recorded in the `auction.advance` outcome that asked
//! for it, and replay takes the answer from there, never asking again. The built-in
//! [`Rubric`] is deterministic and serves the fixtures; [`CommandScorer`] (`--scorer-cmd`) runs
//! a program with the artifact on stdin and reads `{"score": N, "reason": "..."}` from its
//! stdout. Whatever goes wrong with a program (it cannot start, times out, exits non-zero,
//! prints something else, or scores outside 0..=100) is a recorded scoring failure, never a
//! crash of the run. Failure reasons name the program as given, never an absolute path or a
//! duration, since they are hashed.

use std::fmt;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use oracle_auction::{Answer, SCORE_MAX, ScoreRequest, rubric};
use serde::Deserialize;

use crate::oracle::{Ended, group, wait_or_kill};

/// Longest a `--scorer-cmd` program may take for one artifact.
pub const SCORER_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Most bytes of a scorer's stdout read.
pub const SCORER_OUTPUT_BYTES_MAX: u64 = 64 << 10;
/// Most bytes of a scorer's reason (or stderr) kept in a recorded answer.
pub const SCORER_REASON_BYTES_MAX: usize = 1024;

/// Scores winning artifacts. Called by the engine only for answers not yet recorded.
pub trait Scorer: Send + Sync + fmt::Debug {
    fn score(&self, request: &ScoreRequest<'_>) -> Answer;
}

/// The built-in deterministic rubric (`oracle_auction::rubric`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Rubric;

impl Scorer for Rubric {
    fn score(&self, request: &ScoreRequest<'_>) -> Answer {
        rubric::score(request.content)
    }
}

/// `--scorer-cmd PROGRAM`: the artifact's text on stdin; `{"score", "reason"}` on stdout.
/// The program also gets `ORACLE_AUCTION`, `ORACLE_AGENT` and `ORACLE_ARTIFACT` in its
/// environment. It leads its own process group: past `timeout_ms`, or once it has printed more
/// than [`SCORER_OUTPUT_BYTES_MAX`], the whole group is killed and the answer is a failure; once
/// it exits, whatever it left running in the group is killed, so the reply is what it printed
/// before it exited.
#[derive(Clone, Debug)]
pub struct CommandScorer {
    pub program: PathBuf,
    pub timeout_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    score: u64,
    #[serde(default)]
    reason: String,
}

fn clip(mut s: String) -> String {
    if s.len() > SCORER_REASON_BYTES_MAX {
        let mut end = SCORER_REASON_BYTES_MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// Why a scorer command gave no score. Recorded (after `scorer command: `) as the failed
/// answer's reason, so each variant is worded as before this type existed.
#[derive(Debug, thiserror::Error)]
enum ScorerError {
    /// `reason` is [`crate::tools::io_reason`]'s, which names no path.
    #[error("cannot start: {reason}")]
    Start { reason: String },
    /// It printed more than [`SCORER_OUTPUT_BYTES_MAX`].
    #[error("bound reached: printed more than scorer_output_bytes_max = {SCORER_OUTPUT_BYTES_MAX}")]
    TooMuch,
    #[error("timed out after {timeout_ms} ms")]
    TimedOut { timeout_ms: u64 },
    #[error("{reason}")]
    Wait { reason: String },
    /// `clipped`: `exited with CODE[: STDERR]`, cut to [`SCORER_REASON_BYTES_MAX`] bytes.
    #[error("{clipped}")]
    Exited { clipped: String },
    #[error("printed something other than {{\"score\": 0..=100, \"reason\": \"...\"}}: {reason}")]
    NotReply { reason: String },
    #[error("scored {score} (outside 0..={SCORE_MAX})")]
    OutOfRange { score: u64 },
}

impl CommandScorer {
    fn run(&self, request: &ScoreRequest<'_>) -> Result<Answer, ScorerError> {
        let mut child = group::own(&mut Command::new(&self.program))
            .env("ORACLE_AUCTION", request.auction.to_string())
            .env("ORACLE_AGENT", request.agent)
            .env("ORACLE_ARTIFACT", request.artifact)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ScorerError::Start {
                reason: crate::tools::io_reason(&e),
            })?;
        // Feed stdin and drain stdout/stderr on their own threads: an artifact can be larger
        // than a pipe's buffer, and a program may write before it has read everything.
        let stdin = child.stdin.take();
        let content = request.content.to_owned();
        let feeder = thread::spawn(move || {
            if let Some(mut s) = stdin {
                // A program that exits without reading its input is judged by its reply.
                let _ = s.write_all(content.as_bytes());
            }
        });
        // Past the cap the stdout reader stops, raises `over`, and the program's process group
        // is killed: a program that goes on printing (or ignores the closed pipe) is not waited
        // for until its timeout.
        let over = Arc::new(AtomicBool::new(false));
        let drain = |pipe: Option<Box<dyn Read + Send>>, over: Option<Arc<AtomicBool>>| {
            thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(p) = pipe {
                    let _ = p.take(SCORER_OUTPUT_BYTES_MAX + 1).read_to_end(&mut buf);
                }
                if let Some(over) = over
                    && buf.len() as u64 > SCORER_OUTPUT_BYTES_MAX
                {
                    over.store(true, Ordering::SeqCst);
                }
                buf
            })
        };
        let out = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            Some(Arc::clone(&over)),
        );
        let err = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            None,
        );
        // On return the program's group is gone, so the readers and the feeder finish: nothing
        // is left holding the pipes open (except a process that left the group on purpose).
        let status = match wait_or_kill(&mut child, self.timeout_ms, Some(&over)) {
            Ok(Ended::Exited(status)) => status,
            Ok(Ended::Stopped) => return Err(ScorerError::TooMuch),
            Ok(Ended::TimedOut) => {
                return Err(ScorerError::TimedOut {
                    timeout_ms: self.timeout_ms,
                });
            }
            Err(e) => {
                return Err(ScorerError::Wait {
                    reason: crate::tools::io_reason(&e),
                });
            }
        };
        let _ = feeder.join();
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        // Checked before the status: a program stopped at the cap often dies of the closed pipe
        // (SIGPIPE), and the cap is the reason, not that signal.
        if stdout.len() as u64 > SCORER_OUTPUT_BYTES_MAX {
            return Err(ScorerError::TooMuch);
        }
        if !status.success() {
            let code = status
                .code()
                .map_or("a signal".to_owned(), |c| format!("status {c}"));
            let said = String::from_utf8_lossy(&stderr).trim().to_owned();
            let clipped = clip(if said.is_empty() {
                format!("exited with {code}")
            } else {
                format!("exited with {code}: {said}")
            });
            return Err(ScorerError::Exited { clipped });
        }
        let reply: Reply = serde_json::from_slice(&stdout).map_err(|e| ScorerError::NotReply {
            reason: e.to_string(),
        })?;
        if reply.score > SCORE_MAX {
            return Err(ScorerError::OutOfRange { score: reply.score });
        }
        Ok(Answer::Scored {
            score: reply.score,
            reason: clip(reply.reason),
        })
    }
}

impl Scorer for CommandScorer {
    fn score(&self, request: &ScoreRequest<'_>) -> Answer {
        self.run(request).unwrap_or_else(|why| Answer::Failed {
            reason: format!("scorer command: {why}"),
        })
    }
}
