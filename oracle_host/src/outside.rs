//! Outside events on a run's memory, recorded through the host: a verdict on a pending
//! adjudication, a claim, a reinstatement and a sweep of expired requests. The command line,
//! the server and a store's worker all record them here, so a torn final record is handled,
//! and a writer set up, one way.

use oracle_runtime::adjudication::{
    self, ClaimApplied, OutsideClaim, Reinstate, ReinstatementApplied, RunMemory, Submission,
    Swept, VerdictApplied,
};
use std::path::Path;

use oracle_memory::{Cardinality, Provenance, Verdict};
use oracle_runtime::oracle::{CommandPort, NOTIFY_TIMEOUT_MS, Notified};
use oracle_runtime::repair::{Repair, repair};
use oracle_runtime::writer::Durability;
use serde_json::Value;

use crate::error::HostError;
use crate::home::{Home, Note};

impl Home {
    /// A run's memory as its log leaves it: beliefs, claims and pending adjudications.
    pub fn memory(&self, run: &str) -> Result<RunMemory, HostError> {
        Ok(adjudication::load(self.dir(), run)?)
    }

    /// Records a verdict on one of `run`'s pending adjudications (one `adjudicated` event);
    /// a refusal (unknown handle, resolved, expired, bad evidence) writes nothing.
    pub fn adjudicate(
        &self,
        run: &str,
        verdict: &Submission,
        durability: Durability,
    ) -> Result<VerdictApplied, HostError> {
        self.move_torn_tail_aside(run);
        Ok(adjudication::adjudicate(
            self.dir(),
            run,
            verdict,
            self.writing(durability),
        )?)
    }

    /// Records a claim from outside the plan, through the same gate as `memory.assert`. The
    /// claim joins its line with the line's cardinality (fixed by the line's first claim); a
    /// new line is functional: the cardinality `claim` carries is not asked of its sender.
    pub fn claim(
        &self,
        run: &str,
        claim: &OutsideClaim,
        durability: Durability,
    ) -> Result<ClaimApplied, HostError> {
        self.move_torn_tail_aside(run);
        let mut claim = claim.clone();
        let line = &claim.claim;
        claim.claim.cardinality = self
            .memory(run)?
            .memory
            .line_cardinality(&line.subject, &line.predicate)
            .unwrap_or(Cardinality::Functional);
        let applied = adjudication::claim(self.dir(), run, &claim, self.writing(durability))?;
        // A request it opened under a real-time expiry: indexed, so a waker expires it.
        if let Some(due) = applied
            .assertion
            .adjudication
            .as_ref()
            .and_then(|r| r.expires_ms)
        {
            self.note_expiries(&applied.run, &[due]);
        }
        Ok(applied)
    }

    /// Makes a superseded claim live again by a verdict naming it.
    pub fn reinstate(
        &self,
        run: &str,
        r: &Reinstate,
        durability: Durability,
    ) -> Result<ReinstatementApplied, HostError> {
        self.move_torn_tail_aside(run);
        Ok(adjudication::reinstate(
            self.dir(),
            run,
            r,
            self.writing(durability),
        )?)
    }

    /// Turns the adjudications expired at `now` into contested claims; nothing expired,
    /// nothing written.
    pub fn sweep(
        &self,
        run: &str,
        now: Option<u64>,
        durability: Durability,
    ) -> Result<Swept, HostError> {
        self.move_torn_tail_aside(run);
        Ok(adjudication::sweep(
            self.dir(),
            run,
            now,
            self.writing(durability),
        )?)
    }

    /// Expires `run`'s real-time requests due now (`adjudication::expire_due`): one
    /// `adjudications_expired` with the wall instant, or nothing when none is due (a verdict
    /// came first).
    pub fn expire_due(&self, run: &str) -> Result<Swept, HostError> {
        self.move_torn_tail_aside(run);
        Ok(adjudication::expire_due(
            self.dir(),
            run,
            self.writing(Durability::default()),
        )?)
    }

    /// Sends `run`'s undelivered adjudication requests to `program` (JSON on its stdin; exit 0
    /// delivered). A failed delivery is kept in the run's outbox and tried again later; the
    /// request itself is in the log and never lost. `run` may be a directory outside the home.
    ///
    /// A program that prints a verdict (an adjudicator written in code, `oracle_agent`'s
    /// `adjudicator`) has it recorded here as `oracle adjudicate` records one, through the same
    /// checks, with `by` naming the program: [`Notified::verdicts`] keeps the ones recorded,
    /// and one refused (not a verdict, a bad evidence, a resolved handle) is listed in `failed`
    /// and the request stays pending for a person.
    pub fn notify(&self, run: &str, program: &Path) -> Result<Notified, HostError> {
        let mut notified = self.deliver_requests(run, program)?;
        let name = program.file_name().unwrap_or(program.as_os_str());
        let by = format!("oracle-cmd {}", name.to_string_lossy());
        for (handle, v) in std::mem::take(&mut notified.verdicts) {
            let recorded = verdict_of(&handle, &v, &by)
                .map_err(|e| e.to_string())
                .and_then(|sub| {
                    self.adjudicate(run, &sub, Durability::default())
                        .map_err(|e| e.to_string())
                });
            match recorded {
                Ok(_) => notified.verdicts.push((handle, v)),
                Err(why) => notified.failed.push((handle, why)),
            }
        }
        Ok(notified)
    }

    /// [`Home::notify`]'s deliveries, before any verdict is recorded.
    fn deliver_requests(&self, run: &str, program: &Path) -> Result<Notified, HostError> {
        let rm = self.memory(run)?;
        let mut port = CommandPort {
            program: program.to_path_buf(),
            timeout_ms: NOTIFY_TIMEOUT_MS,
            verdicts: true,
        };
        let dir = rm.run.dir.clone();
        oracle_runtime::oracle::notify_pending(&dir, &rm.run.id, &rm.memory, &mut port).map_err(
            |source| {
                HostError::Session(oracle_runtime::session::SessionError::Io {
                    path: dir.join(oracle_runtime::oracle::OUTBOX_FILE),
                    source,
                })
            },
        )
    }

    /// Before an outside append: a torn final record left by a writer killed mid-write (Linux
    /// copies a write page by page, and a fatal signal can stop it between pages) is moved
    /// aside into the run's `torn/`, saved, as a resume does, so the append can go on. Every
    /// complete record is verified first; anything else (a busy run, damage before the tail)
    /// is left for the append to report.
    fn move_torn_tail_aside(&self, run: &str) {
        let Ok(found) = self.find(run) else {
            return;
        };
        let torn = matches!(
            oracle_runtime::reader::scan(&found.paths.log, true, |_| Ok(true)),
            Ok(end) if end.torn_tail.is_some()
        );
        if torn && let Ok(Repair::MovedTornTail { len, saved_to, .. }) = repair(&found.paths) {
            self.note(Note::MovedTornTail { len, saved_to });
        }
    }
}

/// Why an oracle program's printed verdict cannot be recorded.
#[derive(Debug, thiserror::Error)]
#[error("the oracle program's verdict: {0}")]
pub struct BadVerdict(String);

/// The verdict an oracle program printed for `handle` (`{"verdict", "evidence"?, "note"?}`,
/// nothing else), as `oracle adjudicate` would submit it: the verdict and evidence words are
/// parsed as the command line's and the API's are; the logical time is the log's next.
fn verdict_of(handle: &str, v: &Value, by: &str) -> Result<crate::Submission, BadVerdict> {
    let known = ["verdict", "evidence", "note"];
    if let Some(k) = v
        .as_object()
        .and_then(|o| o.keys().find(|k| !known.contains(&k.as_str())))
    {
        return Err(BadVerdict(format!("unknown field `{k}`")));
    }
    let text = |k: &str| match v.get(k) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(BadVerdict(format!("`{k}` is not a string"))),
    };
    let verdict: Verdict = text("verdict")?
        .ok_or_else(|| BadVerdict("no `verdict`".into()))?
        .parse()
        .map_err(|e: oracle_memory::adjudicate::ReadError| BadVerdict(e.to_string()))?;
    let evidence: Provenance = text("evidence")?
        .unwrap_or("external_first_hand")
        .parse()
        .map_err(|e: oracle_memory::claim::UnknownProvenance| BadVerdict(e.to_string()))?;
    Ok(crate::Submission {
        handle: handle.to_owned(),
        verdict,
        evidence,
        note: text("note")?.unwrap_or_default().to_owned(),
        now: None,
        by: Some(by.to_owned()),
    })
}
