//! Signals: the calls a store queues for whichever worker next holds a run (resume it, record a
//! verdict, a claim, a reinstatement or a sweep), as typed, versioned rows, and
//! [`Home::apply`], which carries one out exactly as the call would have been made in a file
//! home.
//!
//! What is absent: no command line in a row (a worker never parses arguments again), and no
//! second implementation of any call (each signal is one [`Home`] call).

use std::path::PathBuf;
use std::sync::Arc;

use oracle_runtime::adjudication::{
    ClaimApplied, OutsideClaim, Reinstate, ReinstatementApplied, Submission, Swept, VerdictApplied,
};
use oracle_runtime::resume_point::Policy;
use oracle_runtime::scorer::{CommandScorer, SCORER_TIMEOUT_MS_DEFAULT, Scorer};
use oracle_runtime::session::{self, Session, SessionError};
use oracle_runtime::writer::Durability;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bind::{Given, ToolChange};
use crate::error::HostError;
use crate::home::{Home, Resume, Resumed};

/// Version of a queued signal's row ([`Queued`]). 1 held the command line's argument
/// structs; 2 holds the host's calls.
pub const SIGNAL_FORMAT: u64 = 2;

/// A queued signal's row: `{"format": 2, "signal": {"kind": ..., ...}}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Queued {
    pub format: u64,
    pub signal: Signal,
}

/// One host call, as a store queues it for the worker that next holds `run`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Signal {
    /// [`Home::resume`]: an interrupted run goes on, a suspended one with `answer`.
    Resume {
        run: String,
        answer: Option<Answer>,
        given: Given,
        drive: DriveSettings,
        allow_tool_change: bool,
    },
    /// [`Home::adjudicate`], then a resume when `resume`.
    Adjudicate {
        run: String,
        verdict: Submission,
        durability: Durability,
        resume: bool,
    },
    /// [`Home::claim`], then a resume when `resume`.
    Claim {
        run: String,
        claim: OutsideClaim,
        durability: Durability,
        resume: bool,
    },
    /// [`Home::reinstate`], then a resume when `resume`.
    Reinstate {
        run: String,
        reinstate: Reinstate,
        durability: Durability,
        resume: bool,
    },
    /// [`Home::sweep`].
    Sweep {
        run: String,
        now: Option<u64>,
        durability: Durability,
    },
    /// [`Home::send_event`]: outside event `name` with `value` is kept for the run, and
    /// delivered at once when the run waits on it.
    Event(EventSignal),
    /// [`Home::cancel`]: the run ends `cancelled`, by `by`, for `reason`.
    Cancel {
        run: String,
        by: Option<String>,
        reason: String,
        durability: Durability,
    },
    /// [`Home::child_ended`]: a child run ended.
    Child(ChildEnded),
}

/// Child run `child` (started with `key`) ended; `value` is the answer of `run`'s `spawn` step
/// `step` that started it ([`Signal::Child`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildEnded {
    pub run: String,
    pub step: String,
    pub key: String,
    pub child: String,
    pub value: Value,
}

/// Outside event `name` with `value` for `run`'s `wait.event` steps ([`Signal::Event`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSignal {
    pub run: String,
    pub name: String,
    pub value: Value,
}

/// The output of the step a suspended run waits on.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub step: String,
    pub value: Value,
    /// Who answered (recorded as the `resumed` event's `by`); absent in rows queued by the
    /// command line, which records none, as a file home's `oracle resume --value` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// How a resume drives: the settings of [`session::Drive`] a caller chooses, as plain data.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriveSettings {
    pub jobs: u32,
    pub durability: Durability,
    /// Appended events between two resume points; 0: none.
    pub snapshot_every: u64,
    /// Start from the newest resume point the log accepts (`false`: from the first event).
    pub from_snapshots: bool,
    /// A program that scores auction winners instead of the built-in rubric.
    pub scorer_cmd: Option<PathBuf>,
    /// Fire the timer the run sleeps on first (`oracle resume --wake`; a worker's timer
    /// wheel): `Some(false)` once it is due, `Some(true)` now. Absent in rows of older oracles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<bool>,
}

impl Default for DriveSettings {
    fn default() -> Self {
        let d = session::Drive::default();
        DriveSettings {
            jobs: d.jobs,
            durability: d.durability,
            snapshot_every: d.points.policy.every_events,
            from_snapshots: d.points.start_from,
            scorer_cmd: None,
            wake: None,
        }
    }
}

impl DriveSettings {
    /// The drive these settings describe (the working directory and replica are the home's).
    pub fn drive(&self) -> session::Drive {
        session::Drive {
            jobs: self.jobs,
            durability: self.durability,
            scorer: self.scorer_cmd.as_ref().map(|program| {
                Arc::new(CommandScorer {
                    program: program.clone(),
                    timeout_ms: SCORER_TIMEOUT_MS_DEFAULT,
                }) as Arc<dyn Scorer>
            }),
            points: session::Points {
                start_from: self.from_snapshots,
                policy: Policy {
                    every_events: self.snapshot_every,
                    ..Policy::default()
                },
            },
            wake: self.wake,
            ..session::Drive::default()
        }
    }
}

impl Signal {
    /// The run the signal is for.
    pub fn run(&self) -> &str {
        match self {
            Signal::Resume { run, .. }
            | Signal::Adjudicate { run, .. }
            | Signal::Claim { run, .. }
            | Signal::Reinstate { run, .. }
            | Signal::Sweep { run, .. }
            | Signal::Event(EventSignal { run, .. })
            | Signal::Cancel { run, .. }
            | Signal::Child(ChildEnded { run, .. }) => run,
        }
    }

    /// Its kind, as the store lists it.
    pub fn kind(&self) -> &'static str {
        match self {
            Signal::Resume { .. } => "resume",
            Signal::Adjudicate { .. } => "adjudicate",
            Signal::Claim { .. } => "claim",
            Signal::Reinstate { .. } => "reinstate",
            Signal::Sweep { .. } => "sweep",
            Signal::Event(_) => "event",
            Signal::Cancel { .. } => "cancel",
            Signal::Child(_) => "child",
        }
    }

    /// The row the store keeps for it.
    pub fn to_row(&self) -> Value {
        // Invariant: plain structs with string keys always convert.
        serde_json::to_value(Queued {
            format: SIGNAL_FORMAT,
            signal: self.clone(),
        })
        .expect("a signal always converts to JSON")
    }

    /// Reads a row the store kept for `run`; a row of another format or another run is refused.
    pub fn from_row(run: &str, row: &Value) -> Result<Signal, HostError> {
        let bad = |why: String| HostError::Signal { why };
        if row.get("argv").is_some() {
            return Err(bad(
                "a signal queued by an older oracle as an argument list: send it again".into(),
            ));
        }
        match row.get("format").and_then(Value::as_u64) {
            Some(SIGNAL_FORMAT) => {}
            Some(f) => {
                return Err(bad(format!(
                    "a signal of format {f} (this oracle reads format {SIGNAL_FORMAT}): send it again with this oracle"
                )));
            }
            None => return Err(bad("a signal row without a format".into())),
        }
        let queued: Queued = serde_json::from_value(row.clone())
            .map_err(|e| bad(format!("a signal that is not one: {e}")))?;
        if queued.signal.run() != run {
            return Err(bad(format!("a signal for another run than {run}")));
        }
        Ok(queued.signal)
    }
}

/// What a carried-out signal did.
pub enum Applied {
    Resumed(Resumed),
    Verdict(VerdictApplied, AfterOutside),
    Claim(ClaimApplied, AfterOutside),
    Reinstated(ReinstatementApplied, AfterOutside),
    Swept(Swept),
    Cancelled(session::Cancelled),
    Event(crate::home::EventSent),
    /// A child's outcome recorded in its parent, which was driven on; `None`: the parent no
    /// longer waited on that child, and nothing was recorded.
    Child(Option<Box<Session>>),
}

impl Applied {
    /// The resume point the drive this signal made started from, if it drove and used one.
    pub fn from_point(&self) -> Option<u64> {
        match self {
            Applied::Resumed(r) => r.session.report.from_point,
            Applied::Verdict(_, a) | Applied::Claim(_, a) | Applied::Reinstated(_, a) => {
                a.from_point()
            }
            Applied::Event(e) => e.resumed.as_ref().and_then(|s| s.report.from_point),
            Applied::Swept(_) | Applied::Cancelled(_) => None,
            Applied::Child(s) => s.as_ref().and_then(|s| s.report.from_point),
        }
    }
}

impl AfterOutside {
    /// The resume point the resume started from, if it resumed and used one.
    pub fn from_point(&self) -> Option<u64> {
        match self {
            AfterOutside::Resumed(s) => s.report.from_point,
            _ => None,
        }
    }
}

/// The resume after an outside event, when one was asked for.
pub enum AfterOutside {
    /// None was asked for.
    NotAsked,
    /// The run had finished: there was nothing to resume.
    Finished {
        status: String,
    },
    Resumed(Box<Session>),
}

impl Home {
    /// Carries out `signal` in this home, as the call it names.
    pub fn apply(&self, signal: Signal) -> Result<Applied, HostError> {
        Ok(match signal {
            Signal::Resume {
                run,
                answer,
                given,
                drive,
                allow_tool_change,
            } => Applied::Resumed(self.resume(
                &run,
                Resume {
                    drive: session::Drive {
                        answered_by: answer.as_ref().and_then(|a| a.by.clone()),
                        ..drive.drive()
                    },
                    answer: answer.map(|a| (a.step, a.value)),
                    given,
                    tool_change: ToolChange::allowed(allow_tool_change),
                    upgrade: None,
                    progress: None,
                },
            )?),
            Signal::Adjudicate {
                run,
                verdict,
                durability,
                resume,
            } => {
                let applied = self.adjudicate(&run, &verdict, durability)?;
                Applied::Verdict(applied, self.resume_after_outside(&run, resume)?)
            }
            Signal::Claim {
                run,
                claim,
                durability,
                resume,
            } => {
                let applied = self.claim(&run, &claim, durability)?;
                Applied::Claim(applied, self.resume_after_outside(&run, resume)?)
            }
            Signal::Reinstate {
                run,
                reinstate,
                durability,
                resume,
            } => {
                let applied = self.reinstate(&run, &reinstate, durability)?;
                Applied::Reinstated(applied, self.resume_after_outside(&run, resume)?)
            }
            Signal::Sweep {
                run,
                now,
                durability,
            } => Applied::Swept(self.sweep(&run, now, durability)?),
            Signal::Event(e) => Applied::Event(self.send_event(&e.run, &e.name, &e.value)?),
            Signal::Cancel {
                run,
                by,
                reason,
                durability,
            } => Applied::Cancelled(self.cancel(
                &run,
                oracle_runtime::engine::Cancel { by, reason },
                durability,
            )?),
            Signal::Child(c) => Applied::Child(self.child_ended(c)?.map(Box::new)),
        })
    }

    /// Resumes `run` after an outside event (a verdict may have resolved what it waits on),
    /// when `asked`; a run that has finished has nothing to go on with, which is no error.
    pub fn resume_after_outside(&self, run: &str, asked: bool) -> Result<AfterOutside, HostError> {
        if !asked {
            return Ok(AfterOutside::NotAsked);
        }
        match self.resume(run, Resume::default()) {
            Ok(r) => Ok(AfterOutside::Resumed(Box::new(r.session))),
            Err(HostError::Session(SessionError::Finished { status, .. })) => {
                Ok(AfterOutside::Finished { status })
            }
            Err(e) => Err(e),
        }
    }
}
