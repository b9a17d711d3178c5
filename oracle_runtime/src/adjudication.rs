//! The oracle loop over a stored run: the memory projection of its log, verdicts and sweeps
//! appended under the run's lock, and what `oracle memory` and `oracle adjudications` show.
//!
//! A verdict, a sweep or an outside claim is one event appended to the run's log under the same
//! single-writer lock a running engine holds, so two submitters on one handle cannot both
//! apply: the second waits for the lock, then finds the handle resolved. The append is whole
//! or undone ([`LogWriter::append_whole`]): a failed write leaves the log byte for byte as it
//! was. Each such event takes a logical time strictly after every event before it
//! ([`RunMemory::earliest_outside_tick`]), so what was believed at any recorded time never
//! changes afterwards. Pending adjudications are never stored anywhere else: they are the
//! projection of the log, so they survive any exit or restart.

use std::path::Path;
use std::thread;
use std::time::Duration;

use oracle_core::payload;
use oracle_core::{EventKind, Payload};
use oracle_memory::MemorySettings;
use oracle_memory::adjudicate::{self as rules, Effects, Expired};
use oracle_memory::{Assertion, Belief, Claim, Memory, Provenance, Query, Verdict};

use crate::error::StoreError;
use crate::recorded::Recorded;
use crate::session::{self, Result, RunDir, SessionError};
use crate::writer::{Durability, LogWriter, Writing};

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

impl RunMemory {
    /// The earliest logical tick an event appended from outside may take: one after the log's
    /// last event, so that `--as-of T` for every recorded `T` answers the same before and after
    /// it is appended.
    pub fn earliest_outside_tick(&self) -> u64 {
        self.time.saturating_add(1)
    }

    /// Whether the pending request `r` is past its expiry for anything given from outside now
    /// (a verdict now would be refused as expired; a sweep now would expire it).
    pub fn expired_unswept(&self, r: &oracle_memory::memory::RequestState) -> bool {
        r.status == oracle_memory::RequestStatus::Pending
            && r.request
                .expires_at
                .is_some_and(|at| at <= self.earliest_outside_tick())
    }

    /// Where a request stands as `oracle adjudications` lists it: `pending`, `resolved`,
    /// `expired`, or `expired_not_swept` for a pending request past its expiry (a verdict now
    /// would be refused, a sweep now would expire it).
    pub fn request_status(&self, r: &oracle_memory::memory::RequestState) -> &'static str {
        if self.expired_unswept(r) {
            "expired_not_swept"
        } else {
            r.status.name()
        }
    }

    /// Every request of the run, in the order they were opened (by the seq of the event that
    /// recorded each).
    pub fn requests_in_order(&self) -> Vec<&oracle_memory::memory::RequestState> {
        let mut all: Vec<_> = self.memory.requests().collect();
        all.sort_by_key(|r| r.origin.seq);
        all
    }

    /// The tick an outside event is recorded at: `now` if given, else the earliest allowed.
    /// A `now` before the earliest allowed tick is refused (it would rewrite the past), and so
    /// is any tick past [`oracle_core::event::TIME_MAX`].
    pub fn outside_tick(&self, now: Option<u64>) -> Result<u64> {
        let earliest = self.earliest_outside_tick();
        let tick = match now {
            Some(given) if given < earliest => {
                return Err(SessionError::TooEarly {
                    run: self.run.id.clone(),
                    given,
                    earliest,
                    last: self.time,
                });
            }
            Some(given) => given,
            None => earliest,
        };
        oracle_core::event::check_time("the tick of an outside event", tick).map_err(|e| {
            SessionError::OutsideTime {
                run: self.run.id.clone(),
                reason: e.to_string(),
            }
        })?;
        Ok(tick)
    }
}

fn settings_of(events: &Recorded, run: &RunDir) -> Result<MemorySettings> {
    match events.event(0).as_ref().map(oracle_core::Event::typed) {
        Some(Ok(Payload::RunStarted(p))) => {
            MemorySettings::of_run(&p).map_err(|reason| SessionError::Projection {
                run: run.id.clone(),
                source: oracle_memory::ProjectionError {
                    seq: 0,
                    reason: reason.to_string(),
                },
            })
        }
        _ => Err(SessionError::NoStart {
            path: run.paths.log.clone(),
        }),
    }
}

/// The memory of run `run` from its log, already read and verified (`Recorded::read`): for a
/// caller that reads the log for more than the memory.
pub fn load_from(run: RunDir, events: &Recorded) -> Result<RunMemory> {
    let settings = settings_of(events, &run)?;
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

/// The start of every outside append (verdict, sweep, claim): the run found, its lock taken
/// (waiting a bounded time), the log read under the lock (so what another submitter appended
/// is seen), the run checked to be at rest, its memory projected, and the tick the event will
/// carry.
fn begin_outside_append(
    home: &Path,
    run: &str,
    now: Option<u64>,
    writing: Writing,
) -> Result<(LogWriter, RunMemory, u64)> {
    let found = session::find(home, run)?;
    let writer = open_waiting(&found.paths, writing.durability)?.with_replica(writing.replica);
    let events = Recorded::read(&found.paths.log)?;
    check_at_rest(&found, &events)?;
    let rm = load_from(found, &events)?;
    let now = rm.outside_tick(now)?;
    Ok((writer, rm, now))
}

/// Opens the run's log for appending, waiting a bounded time for a writer that holds it.
pub(crate) fn open_waiting(paths: &crate::LogPaths, durability: Durability) -> Result<LogWriter> {
    let mut tries = 0;
    loop {
        match LogWriter::open(paths, durability) {
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

impl VerdictApplied {
    /// The one JSON form of an applied verdict: what `oracle adjudicate --json` prints and the
    /// HTTP API answers (which adds `by` and `resume`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ok": true,
            "outcome": "applied",
            "run": self.run,
            "handle": self.handle,
            "verdict": self.verdict,
            "seq": self.seq,
            "effects": self.effects.to_value(),
            "subject": self.subject,
            "predicate": self.predicate,
            "belief": self.belief.to_value(),
        })
    }
}

/// A verdict to submit.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submission {
    pub handle: String,
    pub verdict: Verdict,
    pub evidence: Provenance,
    pub note: String,
    /// The logical time the verdict is given at (default, and earliest: one after the log's
    /// last time).
    pub now: Option<u64>,
    /// Who gives it (a token's name under `oracle serve`), recorded in the event.
    pub by: Option<String>,
}

/// `oracle adjudicate`: checks the verdict against the run's pending adjudications and
/// appends one `adjudicated` event. Refusals (unknown handle, already resolved, expired, bad
/// evidence) write nothing.
pub fn adjudicate(
    home: &Path,
    run: &str,
    sub: &Submission,
    writing: impl Into<Writing>,
) -> Result<VerdictApplied> {
    if sub.note.len() as u64 > NOTE_BYTES_MAX {
        return Err(SessionError::BadNote {
            limit: NOTE_BYTES_MAX,
        });
    }
    let (writer, mut rm, now) = begin_outside_append(home, run, sub.now, writing.into())?;
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
        by: sub.by.clone(),
    });
    let parents = vec![state.origin.seq];
    let (ev, belief) = append_outside(
        writer,
        &mut rm,
        now,
        parents,
        payload,
        (&subject, &predicate),
    )?;
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

/// A reinstatement to submit: a verdict naming a superseded claim.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reinstate {
    /// The claim's id, or a prefix of it (at least 8 hex characters).
    pub claim: String,
    pub evidence: Provenance,
    pub note: String,
    /// The logical time it is given at (default, and earliest: one after the log's last time).
    pub now: Option<u64>,
}

/// What a reinstatement did.
#[derive(Clone, Debug)]
pub struct ReinstatementApplied {
    pub run: String,
    pub claim: oracle_memory::ClaimId,
    /// The `reinstated` event.
    pub seq: u64,
    pub time: u64,
    pub effects: rules::Reinstatement,
    pub subject: String,
    pub predicate: String,
    /// The line's belief after it.
    pub belief: Belief,
}

/// `oracle reinstate`: makes a superseded claim live again with one `reinstated` event (whole
/// or not at all, under the lock, at a tick after every event before it). Refusals (unknown or
/// ambiguous claim, a claim that is not superseded, evidence that is not first-hand) write
/// nothing.
pub fn reinstate(
    home: &Path,
    run: &str,
    r: &Reinstate,
    writing: impl Into<Writing>,
) -> Result<ReinstatementApplied> {
    if r.note.len() as u64 > NOTE_BYTES_MAX {
        return Err(SessionError::BadNote {
            limit: NOTE_BYTES_MAX,
        });
    }
    let (writer, mut rm, now) = begin_outside_append(home, run, r.now, writing.into())?;
    let refused = |source| SessionError::Adjudicate {
        run: rm.run.id.clone(),
        source,
    };
    let id = rm.memory.claim_by_prefix(&r.claim).map_err(refused)?;
    let effects = rules::reinstate(&rm.memory, &id, r.evidence).map_err(refused)?;
    // Invariant: `reinstate` succeeded, so the claim is in memory.
    let entry = rm.memory.entry(&id).ok_or_else(|| {
        refused(oracle_memory::AdjudicateError::UnknownClaim { claim: id.short() })
    })?;
    let (subject, predicate) = (entry.claim.subject.clone(), entry.claim.predicate.clone());
    // Causal links: the claim's own event and the events of the claims it overturns.
    let mut parents: Vec<u64> = std::iter::once(entry.origin.seq)
        .chain(
            effects
                .bounds
                .iter()
                .filter_map(|b| rm.memory.entry(&b.claim).map(|e| e.origin.seq)),
        )
        .collect();
    parents.sort_unstable();
    parents.dedup();
    let payload = Payload::Reinstated(payload::Reinstated {
        claim: id.to_hex(),
        evidence: r.evidence.as_str().to_owned(),
        note: r.note.clone(),
        effects: effects.to_value(),
    });
    let (ev, belief) = append_outside(
        writer,
        &mut rm,
        now,
        parents,
        payload,
        (&subject, &predicate),
    )?;
    Ok(ReinstatementApplied {
        run: rm.run.id,
        claim: id,
        seq: ev.seq,
        time: now,
        effects,
        subject,
        predicate,
        belief,
    })
}

/// Appends an outside event (whole or not at all, see [`LogWriter::append_whole`]), applies it to
/// the run's memory, and returns its seq with the belief of `line` just after it.
fn append_outside(
    mut writer: LogWriter,
    rm: &mut RunMemory,
    now: u64,
    parents: Vec<u64>,
    payload: Payload,
    (subject, predicate): (&str, &str),
) -> Result<(oracle_core::Event, Belief)> {
    let ev = writer.append_whole(now, parents, payload.clone())?;
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
            subject: subject.to_owned(),
            predicate: predicate.to_owned(),
            as_of: None,
            valid_at: Some(now),
        },
        rm.settings.confidence_min_pct,
    );
    Ok((ev, belief))
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

/// `oracle sweep`: turns the pending adjudications expired at `now` (default, and earliest:
/// one after the log's last time) into contested claims with one `adjudications_expired`
/// event. Nothing expired, nothing written: a second sweep reports 0, at the same tick too
/// (a tick already past is refused only when something would expire at it).
pub fn sweep(
    home: &Path,
    run: &str,
    now: Option<u64>,
    writing: impl Into<Writing>,
) -> Result<Swept> {
    let writing = writing.into();
    let found = session::find(home, run)?;
    let writer = open_waiting(&found.paths, writing.durability)?.with_replica(writing.replica);
    let events = Recorded::read(&found.paths.log)?;
    check_at_rest(&found, &events)?;
    let rm = load_from(found, &events)?;
    // Real-time requests (`--adjudication-expiry 48h`) due now expire too, as a server's
    // expiry would: the clock is read once, and recorded as `fired_ms` when one expired.
    let now_ms = crate::wall::now_ms();
    let now = match rm.outside_tick(now) {
        // A tick already past where nothing is expired (a sweep repeated at the same tick):
        // nothing would be written, which is no refusal (0 expired), as at a later tick.
        Err(SessionError::TooEarly { given, .. })
            if rules::sweep_at(&rm.memory, given, now_ms).is_empty() =>
        {
            given
        }
        other => other?,
    };
    let expired = rules::sweep_at(&rm.memory, now, now_ms);
    let fired_ms = expired
        .iter()
        .any(|x| x.expires_ms.is_some())
        .then_some(now_ms);
    record_expired(writer, rm, now, expired, fired_ms)
}

/// Expires the run's real-time requests (`--adjudication-expiry 48h`) due now: the wall clock
/// is read once, under the run's lock, and recorded as the event's `fired_ms`, so replay never
/// reads it. A request resolved first (a verdict recorded before) is not pending, so a waker
/// that comes after it writes nothing: exactly one of the two is ever recorded.
pub fn expire_due(home: &Path, run: &str, writing: impl Into<Writing>) -> Result<Swept> {
    let (writer, rm, now) = begin_outside_append(home, run, None, writing.into())?;
    let now_ms = crate::wall::now_ms();
    let expired = rules::expire_due(&rm.memory, now_ms, now);
    record_expired(writer, rm, now, expired, Some(now_ms))
}

/// Appends one `adjudications_expired` for `expired` at tick `now` (caused by the events that
/// opened each request), or nothing when none expired; closes the writer either way.
fn record_expired(
    mut writer: LogWriter,
    rm: RunMemory,
    now: u64,
    expired: Vec<Expired>,
    fired_ms: Option<u64>,
) -> Result<Swept> {
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
        fired_ms,
    });
    let ev = writer.append_whole(now, parents, payload)?;
    writer.close()?;
    Ok(Swept {
        run: rm.run.id,
        now,
        expired,
        seq: Some(ev.seq),
    })
}

/// A claim from outside the plan, to record with `oracle claim`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutsideClaim {
    pub claim: Claim,
    pub note: String,
    /// The logical time the claim is recorded at (default, and earliest: one after the log's
    /// last time).
    pub now: Option<u64>,
    /// Who records it (a token's name under `oracle serve`), recorded in the event.
    pub by: Option<String>,
}

/// What an outside claim did.
#[derive(Clone, Debug)]
pub struct ClaimApplied {
    pub run: String,
    /// The `claim_recorded` event.
    pub seq: u64,
    pub time: u64,
    /// The gate's decision (committed, queued for adjudication with its request, contested...).
    pub assertion: Assertion,
    /// The line's belief after the claim.
    pub belief: Belief,
}

impl ClaimApplied {
    /// The one JSON form of a recorded outside claim: what `oracle claim --json` prints and the
    /// HTTP API answers (which adds `by` and `resume`).
    pub fn to_json(&self) -> serde_json::Value {
        let x = &self.assertion;
        serde_json::json!({
            "ok": true,
            "outcome": "recorded",
            "run": self.run,
            "seq": self.seq,
            "time": self.time,
            "claim": x.id,
            "disposition": x.disposition,
            "reason": x.reason,
            "conflicts_with": x.conflicts_with,
            "adjudication": x.adjudication,
            "subject": x.claim.subject,
            "predicate": x.claim.predicate,
            "belief": self.belief.to_value(),
        })
    }
}

/// `oracle claim`: runs the claim through the same gate as `memory.assert` and appends one
/// `claim_recorded` event (whole or not at all, under the lock, at a tick after every event
/// before it). A claim the gate refuses writes nothing.
pub fn claim(
    home: &Path,
    run: &str,
    c: &OutsideClaim,
    writing: impl Into<Writing>,
) -> Result<ClaimApplied> {
    if c.note.len() as u64 > NOTE_BYTES_MAX {
        return Err(SessionError::BadNote {
            limit: NOTE_BYTES_MAX,
        });
    }
    let (writer, mut rm, now) = begin_outside_append(home, run, c.now, writing.into())?;
    let seq = rm.events;
    let mut assertion =
        oracle_memory::external::decide(&rm.memory, c.claim.clone(), seq, now, &rm.settings)
            .map_err(|source| SessionError::ClaimRefused {
                run: rm.run.id.clone(),
                source,
            })?;
    // A request it opens under a real-time expiry: the clock read once, recorded in it.
    if let Some(r) = assertion.adjudication.as_mut() {
        r.expires_ms = rm.settings.due_ms(crate::wall::now_ms());
    }
    // Causal links: the events of the claims it contradicts (none when it contradicts none).
    let mut parents: Vec<u64> = assertion
        .conflicts_with
        .iter()
        .filter_map(|id| rm.memory.entry(id).map(|e| e.origin.seq))
        .collect();
    parents.sort_unstable();
    parents.dedup();
    let payload = Payload::ClaimRecorded(payload::ClaimRecorded {
        // Invariant: an assertion is plain data with string keys.
        assertion: serde_json::to_value(&assertion).expect("assertions always convert to JSON"),
        note: c.note.clone(),
        by: c.by.clone(),
    });
    let (ev, belief) = append_outside(
        writer,
        &mut rm,
        now,
        parents,
        payload,
        (&c.claim.subject, &c.claim.predicate),
    )?;
    Ok(ClaimApplied {
        run: rm.run.id,
        seq: ev.seq,
        time: now,
        assertion,
        belief,
    })
}
