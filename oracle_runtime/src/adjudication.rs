//! The oracle loop over a stored run: the memory projection of its log, verdicts and sweeps
//! appended under the run's lock, and what `oracle memory` and `oracle adjudications` show.
//!
//! A verdict or a sweep is one event appended to the run's log, atomically and under the same
//! single-writer lock a running engine holds, so two submitters on one handle cannot both
//! apply: the second waits for the lock, then finds the handle resolved. Pending adjudications
//! are never stored anywhere else: they are the projection of the log, so they survive any
//! exit or restart.

use std::path::Path;
use std::thread;
use std::time::Duration;

use oracle_core::payload::{self, MemorySettings};
use oracle_core::{EventKind, Payload};
use oracle_memory::adjudicate::{self as rules, Effects, Expired};
use oracle_memory::{Belief, Memory, Provenance, Query, Verdict};

use crate::error::StoreError;
use crate::recorded::Recorded;
use crate::session::{self, Result, RunDir, SessionError};
use crate::writer::{Durability, LogWriter};

/// Tries to take a busy run's lock before giving up (with [`LOCK_WAIT_STEP_MS`] between
/// tries: ten seconds in all).
pub const LOCK_WAIT_ATTEMPTS_MAX: u64 = 400;
pub const LOCK_WAIT_STEP_MS: u64 = 25;
/// Longest note a verdict may carry, in bytes.
pub const NOTE_BYTES_MAX: u64 = 4096;

/// The memory of a stored run.
#[derive(Clone, Debug)]
pub struct RunMemory {
    pub run: RunDir,
    pub memory: Memory,
    pub settings: MemorySettings,
    /// The logical time of the log's last event.
    pub time: u64,
    pub events: u64,
}

/// The memory projection of a verified log: claims, verdicts and expiries, in log order.
pub fn project(events: &Recorded) -> std::result::Result<Memory, oracle_memory::ProjectionError> {
    let mut memory = Memory::new();
    for seq in 0..events.len() {
        let Some(kind) = events.kind(seq) else {
            continue;
        };
        if kind != EventKind::ToolReturned && !kind.is_external() {
            continue;
        }
        let Some(ev) = events.event(seq) else {
            continue;
        };
        let payload = ev.typed().map_err(|e| oracle_memory::ProjectionError {
            seq,
            reason: e.to_string(),
        })?;
        memory.apply(seq, ev.time, &payload)?;
    }
    Ok(memory)
}

fn settings_of(events: &Recorded, path: &Path) -> Result<MemorySettings> {
    match events.event(0).as_ref().map(oracle_core::Event::typed) {
        Some(Ok(Payload::RunStarted(p))) => Ok(p.memory.unwrap_or_default()),
        _ => Err(SessionError::NoStart {
            path: path.to_path_buf(),
        }),
    }
}

fn load_from(run: RunDir, events: &Recorded) -> Result<RunMemory> {
    let settings = settings_of(events, &run.paths.log)?;
    let memory = project(events).map_err(|source| SessionError::Projection {
        run: run.id.clone(),
        source,
    })?;
    let time = events
        .link(events.len().saturating_sub(1))
        .map_or(0, |l| l.time);
    Ok(RunMemory {
        run,
        memory,
        settings,
        time,
        events: events.len(),
    })
}

/// The memory of run `run` (read only; takes no lock).
pub fn load(home: &Path, run: &str) -> Result<RunMemory> {
    let found = session::find(home, run)?;
    let events = Recorded::read(&found.paths.log)?;
    load_from(found, &events)
}

/// Opens the run's log for appending, waiting a bounded time for a writer that holds it.
fn open_waiting(run: &RunDir, durability: Durability) -> Result<LogWriter> {
    let mut tries = 0;
    loop {
        match LogWriter::open(&run.paths, durability) {
            Err(StoreError::Locked { .. }) if tries + 1 < LOCK_WAIT_ATTEMPTS_MAX => {
                tries += 1;
                thread::sleep(Duration::from_millis(LOCK_WAIT_STEP_MS));
            }
            other => return other.map_err(SessionError::from),
        }
    }
}

/// Refuses to append to a run that stopped in the middle of a round (a crash): the engine
/// takes outside events only where the run was at rest, suspended or finished.
fn check_at_rest(run: &RunDir, events: &Recorded) -> Result<()> {
    let last = session::last_program_kind(events);
    match last {
        Some(EventKind::Suspended | EventKind::RunFinished) => Ok(()),
        other => Err(SessionError::Interrupted {
            run: run.id.clone(),
            kind: other.map_or("nothing", EventKind::as_str).to_owned(),
        }),
    }
}

/// Refuses a `now` past [`oracle_core::event::TIME_MAX`] before anything is opened: a verdict
/// or sweep at a later time would leave the run unable to take its next round. (Reported as
/// an input error on the log's path: `SessionError` has no variant of its own for it yet.)
fn check_now(home: &Path, run: &str, now: Option<u64>) -> Result<()> {
    let Some(now) = now else {
        return Ok(());
    };
    oracle_core::event::check_time("--now", now)
        .map(|_| ())
        .map_err(|e| SessionError::Io {
            path: home.join("runs").join(run),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })
}

/// What a verdict did.
#[derive(Clone, Debug)]
pub struct VerdictApplied {
    pub run: String,
    pub handle: String,
    pub verdict: Verdict,
    /// The `adjudicated` event.
    pub seq: u64,
    pub effects: Effects,
    pub subject: String,
    pub predicate: String,
    /// The line's belief after the verdict.
    pub belief: Belief,
}

/// A verdict to submit.
#[derive(Clone, Debug)]
pub struct Submission {
    pub handle: String,
    pub verdict: Verdict,
    pub evidence: Provenance,
    pub note: String,
    /// The logical time the verdict is given at (at least the log's last time).
    pub now: Option<u64>,
}

/// `oracle adjudicate`: checks the verdict against the run's pending adjudications and
/// appends one `adjudicated` event. Refusals (unknown handle, already resolved, expired, bad
/// evidence) write nothing.
pub fn adjudicate(
    home: &Path,
    run: &str,
    sub: &Submission,
    durability: Durability,
) -> Result<VerdictApplied> {
    if sub.note.len() as u64 > NOTE_BYTES_MAX {
        return Err(SessionError::BadNote {
            limit: NOTE_BYTES_MAX,
        });
    }
    check_now(home, run, sub.now)?;
    let found = session::find(home, run)?;
    let mut writer = open_waiting(&found, durability)?;
    // Read under the lock: what another submitter appended is seen here.
    let events = Recorded::read(&found.paths.log)?;
    check_at_rest(&found, &events)?;
    let mut rm = load_from(found, &events)?;
    let now = rm.time.max(sub.now.unwrap_or(0));
    let refused = |source| SessionError::Adjudicate {
        run: rm.run.id.clone(),
        source,
    };
    let effects = rules::adjudicate(&rm.memory, &sub.handle, sub.verdict, sub.evidence, now)
        .map_err(refused)?;
    // Invariant: `adjudicate` succeeded, so the handle names a request.
    let state = rm.memory.request_by_handle(&sub.handle).ok_or_else(|| {
        refused(oracle_memory::AdjudicateError::UnknownHandle {
            handle: sub.handle.clone(),
        })
    })?;
    let (subject, predicate) = (
        state.request.subject.clone(),
        state.request.predicate.clone(),
    );
    let payload = Payload::Adjudicated(payload::Adjudicated {
        handle: sub.handle.clone(),
        verdict: sub.verdict.as_str().to_owned(),
        evidence: sub.evidence.as_str().to_owned(),
        note: sub.note.clone(),
        effects: effects.to_value(),
    });
    let parents = vec![state.origin.seq];
    let ev = writer.append(now, parents, payload.clone())?;
    writer.close()?;
    rm.memory
        .apply(ev.seq, now, &payload)
        .map_err(|source| SessionError::Projection {
            run: rm.run.id.clone(),
            source,
        })?;
    let belief = oracle_memory::belief::query(
        &rm.memory,
        &Query {
            subject: subject.clone(),
            predicate: predicate.clone(),
            as_of: None,
            valid_at: Some(now),
        },
        rm.settings.confidence_min_pct,
    );
    Ok(VerdictApplied {
        run: rm.run.id,
        handle: sub.handle.clone(),
        verdict: sub.verdict,
        seq: ev.seq,
        effects,
        subject,
        predicate,
        belief,
    })
}

/// What a sweep did.
#[derive(Clone, Debug)]
pub struct Swept {
    pub run: String,
    pub now: u64,
    pub expired: Vec<Expired>,
    /// The `adjudications_expired` event, when anything expired.
    pub seq: Option<u64>,
}

/// `oracle sweep`: turns the pending adjudications expired at `now` (default: the log's last
/// time) into contested claims with one `adjudications_expired` event. Nothing expired,
/// nothing written: a second sweep reports 0.
pub fn sweep(home: &Path, run: &str, now: Option<u64>, durability: Durability) -> Result<Swept> {
    check_now(home, run, now)?;
    let found = session::find(home, run)?;
    let mut writer = open_waiting(&found, durability)?;
    let events = Recorded::read(&found.paths.log)?;
    check_at_rest(&found, &events)?;
    let rm = load_from(found, &events)?;
    let now = rm.time.max(now.unwrap_or(0));
    let expired = rules::sweep(&rm.memory, now);
    if expired.is_empty() {
        writer.close()?;
        return Ok(Swept {
            run: rm.run.id,
            now,
            expired,
            seq: None,
        });
    }
    let mut parents: Vec<u64> = expired
        .iter()
        .filter_map(|x| rm.memory.request(&x.challenger).map(|r| r.origin.seq))
        .collect();
    parents.sort_unstable();
    parents.dedup();
    let payload = Payload::AdjudicationsExpired(payload::AdjudicationsExpired {
        now,
        // Invariant: plain structs with string keys always convert.
        expired: serde_json::to_value(&expired).expect("expiries always convert to JSON"),
    });
    let ev = writer.append(now, parents, payload)?;
    writer.close()?;
    Ok(Swept {
        run: rm.run.id,
        now,
        expired,
        seq: Some(ev.seq),
    })
}
