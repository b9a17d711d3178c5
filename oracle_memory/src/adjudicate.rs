//! Verdicts and expiry: what an oracle's answer, or its absence, does to the memory.
//!
//! [`adjudicate`] and [`sweep`] are pure: they check a verdict (or find expired requests) and
//! return the effects to record. The log records those effects verbatim (`adjudicated`,
//! `adjudications_expired`), and the projection applies the record, so a verdict's meaning is
//! fixed when it is given, whatever later versions of these rules say.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::claim::ValidTime;
use crate::claim::{ClaimId, Provenance};
use crate::error::AdjudicateError;
use crate::gate::Disposition;
use crate::memory::{Entry, Memory, RequestStatus};

/// An oracle's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The challenger is right: it becomes the belief, the incumbent is superseded.
    Affirm,
    /// The incumbent stands: the challenger is superseded.
    Deny,
    /// The oracle cannot tell: both are contested and the request is closed.
    Unknown,
}

/// The evidence a verdict or reinstatement may rest on: only first-hand evidence from outside
/// the run can overturn (or uphold) an externally sourced belief. Every other provenance is
/// refused (`AdjudicateError::Evidence`). Listed here once so that what the command line and a
/// form offer cannot drift from what is checked.
pub const EVIDENCE_ACCEPTED: [Provenance; 1] = [Provenance::ExternalFirstHand];

impl Verdict {
    /// Every verdict, in the order they are offered.
    pub const ALL: [Verdict; 3] = [Verdict::Affirm, Verdict::Deny, Verdict::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Affirm => "affirm",
            Verdict::Deny => "deny",
            Verdict::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a verdict's name or a recorded effect does not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("unknown verdict `{text}` (expected affirm, deny or unknown)")]
    Verdict { text: String },
    #[error("verdict effects do not read back: {0}")]
    Effects(serde_json::Error),
    #[error("reinstatement effects do not read back: {0}")]
    Reinstatement(serde_json::Error),
}

impl FromStr for Verdict {
    type Err = ReadError;
    fn from_str(s: &str) -> Result<Self, ReadError> {
        match s {
            "affirm" => Ok(Verdict::Affirm),
            "deny" => Ok(Verdict::Deny),
            "unknown" => Ok(Verdict::Unknown),
            _ => Err(ReadError::Verdict { text: s.to_owned() }),
        }
    }
}

/// A verdict's bound on a claim's validity: it holds only before valid tick `until` (0:
/// nowhere).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundEffect {
    pub claim: ClaimId,
    pub until: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispositionEffect {
    pub claim: ClaimId,
    pub disposition: Disposition,
}

/// Another pending request of the line, now compared against a new incumbent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Repoint {
    pub handle: String,
    pub incumbent: ClaimId,
}

/// Everything a verdict changes, recorded in its `adjudicated` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Effects {
    pub handle: String,
    pub challenger: ClaimId,
    pub incumbent: ClaimId,
    pub bounds: Vec<BoundEffect>,
    pub dispositions: Vec<DispositionEffect>,
    pub repointed: Vec<Repoint>,
    /// Other requests closed because their challenger has the value this verdict affirmed.
    pub agreed: Vec<String>,
    /// Other requests closed because their challenger is the claim this verdict superseded
    /// (it lost here, so it cannot win there).
    #[serde(default)]
    pub withdrawn: Vec<String>,
}

impl Effects {
    pub fn to_value(&self) -> Value {
        // Invariant: plain structs with string keys always convert.
        serde_json::to_value(self).expect("effects always convert to JSON")
    }

    pub fn from_value(v: &Value) -> Result<Effects, ReadError> {
        serde_json::from_value(v.clone()).map_err(ReadError::Effects)
    }
}

/// One request a sweep found expired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expired {
    pub handle: String,
    pub challenger: ClaimId,
    pub incumbent: ClaimId,
    /// The tick it expired at: its logical expiry (a sweep), or the tick the expiry of a
    /// real-time request was recorded at.
    pub expires_at: u64,
    /// A real-time request's due instant (unix ms); absent for a logical expiry, so earlier
    /// logs keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
}

/// Checks a verdict on `handle` at logical time `now` and returns its effects. Refusals are
/// distinct: unknown handle, already resolved (with the original verdict), expired, evidence
/// that is not external and first-hand.
pub fn adjudicate(
    memory: &Memory,
    handle: &str,
    verdict: Verdict,
    evidence: Provenance,
    now: u64,
) -> Result<Effects, AdjudicateError> {
    let Some(state) = memory.request_by_handle(handle) else {
        return Err(AdjudicateError::UnknownHandle {
            handle: handle.to_owned(),
        });
    };
    match &state.status {
        RequestStatus::Resolved {
            seq,
            verdict,
            evidence,
            note,
            by,
            effects,
            ..
        } => {
            return Err(AdjudicateError::AlreadyResolved {
                handle: handle.to_owned(),
                seq: *seq,
                verdict: match by {
                    Some(h) => format!("closed by the verdict on {h} ({verdict})"),
                    None => verdict.to_string(),
                },
                original: serde_json::json!({
                    "verdict": verdict,
                    "evidence": evidence,
                    "note": note,
                    "by": by,
                    "effects": effects,
                }),
            });
        }
        RequestStatus::Expired { seq, now, .. } => {
            return Err(AdjudicateError::Expired {
                handle: handle.to_owned(),
                expires_at: state.request.expires_at.unwrap_or(*now),
                swept_at: Some(*seq),
            });
        }
        RequestStatus::Pending => {}
    }
    if let Some(at) = state.request.expires_at
        && at <= now
    {
        return Err(AdjudicateError::Expired {
            handle: handle.to_owned(),
            expires_at: at,
            swept_at: None,
        });
    }
    if !EVIDENCE_ACCEPTED.contains(&evidence) {
        return Err(AdjudicateError::Evidence { given: evidence });
    }
    let challenger = state.request.challenger;
    let incumbent = state.incumbent();
    let mut fx = Effects {
        handle: handle.to_owned(),
        challenger,
        incumbent,
        bounds: vec![],
        dispositions: vec![],
        repointed: vec![],
        agreed: vec![],
        withdrawn: vec![],
    };
    let set = |fx: &mut Effects, claim, disposition| {
        fx.dispositions
            .push(DispositionEffect { claim, disposition })
    };
    // Other pending requests of the line, in the order they were opened.
    let mut others: Vec<_> = memory
        .pending_on(&state.request.subject, &state.request.predicate, u64::MAX)
        .into_iter()
        .filter(|r| r.request.handle != handle)
        .collect();
    others.sort_by_key(|r| r.origin.seq);
    match verdict {
        Verdict::Affirm => {
            let (inc, ch) = (memory.entry(&incumbent), memory.entry(&challenger));
            // The incumbent keeps the part of its window before the challenger's starts;
            // otherwise it holds nowhere. Superseded claims are bounded, never deleted.
            let until = match (inc, ch) {
                (Some(i), Some(c))
                    if c.claim.valid.is_some() && c.claim.start() > i.claim.start() =>
                {
                    c.claim.start()
                }
                _ => 0,
            };
            fx.bounds.push(BoundEffect {
                claim: incumbent,
                until,
            });
            set(&mut fx, challenger, Disposition::Committed);
            set(&mut fx, incumbent, Disposition::Superseded);
            let value = ch.map(|c| &c.claim.value);
            // The verdict settles the line where the challenger holds (see [`settle`]).
            let winner = ch.and_then(|c| {
                let w = memory.window(c, u64::MAX)?;
                nonempty(&w).then_some((c.claim.start(), c.claim.valid.is_some(), w))
            });
            let mut superseded = vec![incumbent];
            superseded.extend(settle(
                memory,
                &state.request.subject,
                &state.request.predicate,
                (challenger, winner),
                &[challenger, incumbent],
                &mut fx.bounds,
                &mut fx.dispositions,
            ));
            let ends = close_requests(memory, others, &superseded, value, challenger);
            fx.withdrawn = ends.withdrawn;
            fx.agreed = ends.agreed;
            fx.repointed = ends.repointed;
        }
        Verdict::Deny => {
            fx.bounds.push(BoundEffect {
                claim: challenger,
                until: 0,
            });
            set(&mut fx, challenger, Disposition::Superseded);
            // Requests that compared against the denied claim now compare against the
            // incumbent, unless their challenger says what the incumbent says: a request never
            // pairs equal values, so that one is closed as agreeing (its claim committed).
            let standing = memory.entry(&incumbent).map(|e| &e.claim.value);
            for r in others {
                if r.incumbent() != challenger {
                    continue;
                }
                let theirs = memory.entry(&r.request.challenger);
                let agrees = theirs.is_some_and(|e| Some(&e.claim.value) == standing);
                // Closing as agreeing commits the challenger: not while a committed claim of
                // another value meets it, or the two would stand side by side with nothing
                // pending. The request then compares against that claim instead.
                let committed_against = theirs.and_then(|e| committed_conflict(memory, e));
                if let (true, Some(other)) = (agrees, committed_against) {
                    fx.repointed.push(Repoint {
                        handle: r.request.handle.clone(),
                        incumbent: other,
                    });
                } else if agrees {
                    fx.agreed.push(r.request.handle.clone());
                } else {
                    fx.repointed.push(Repoint {
                        handle: r.request.handle.clone(),
                        incumbent,
                    });
                }
            }
        }
        Verdict::Unknown => {
            set(&mut fx, challenger, Disposition::Contested);
            set(&mut fx, incumbent, Disposition::Contested);
        }
    }
    Ok(fx)
}

/// The committed claim (first in retrieval order) of `e`'s line whose value differs from `e`'s
/// and whose window, as bounded by verdicts, shares a tick with `e`'s.
fn committed_conflict(memory: &Memory, e: &Entry) -> Option<ClaimId> {
    let mine = memory.window(e, u64::MAX).filter(nonempty)?;
    memory
        .line_claims(&e.claim.subject, &e.claim.predicate)
        .filter(|o| Memory::counts(o) && o.claim.provenance.is_external())
        .filter(|o| o.claim.value != e.claim.value)
        .filter(|o| memory.disposition(&o.id, u64::MAX) == Some(Disposition::Committed))
        .filter(|o| {
            memory
                .window(o, u64::MAX)
                .filter(nonempty)
                .is_some_and(|w| w.overlaps(&mine))
        })
        .map(|o| o.id)
        .min_by_key(|id| memory.retrieval_key(id))
}

fn nonempty(w: &ValidTime) -> bool {
    w.end.is_none_or(|end| w.start < end)
}

/// A claim's window as the winner of a settlement: `(start, has a window, window)`.
type Winner = (u64, bool, ValidTime);

/// Settles the line where `winner` now holds: every other live claim (committed or contested)
/// of the line whose window meets a window of the winner's value is superseded when its value
/// differs, and committed when it agrees. Queued claims keep their own requests (see
/// [`close_requests`]). Without this a committed sibling of another value would stay live beside
/// the winner with nothing pending: a line stuck `contested`. `skip` are claims the caller
/// decides itself. Returns the claims superseded.
fn settle(
    memory: &Memory,
    subject: &str,
    predicate: &str,
    winner: (ClaimId, Option<Winner>),
    skip: &[ClaimId],
    bounds: &mut Vec<BoundEffect>,
    dispositions: &mut Vec<DispositionEffect>,
) -> Vec<ClaimId> {
    let (winner_id, winner_window) = winner;
    let value = memory.entry(&winner_id).map(|e| &e.claim.value);
    let line = || memory.line_claims(subject, predicate);
    let external = |e: &&Entry| Memory::counts(e) && e.claim.provenance.is_external();
    let live_now = |e: &Entry| {
        matches!(
            memory.disposition(&e.id, u64::MAX),
            Some(
                Disposition::Committed
                    | Disposition::Contested
                    | Disposition::QueuedForAdjudication
            )
        )
    };
    // Where the winner's value now holds: the winner's window, and those of the live claims
    // of its value (committed or contested siblings, and queued ones whose requests close as
    // agreeing).
    let winners: Vec<Winner> = winner_window
        .into_iter()
        .chain(
            line()
                .filter(external)
                .filter(|e| e.id != winner_id && Some(&e.claim.value) == value && live_now(e))
                .filter_map(|e| {
                    let w = memory.window(e, u64::MAX)?;
                    nonempty(&w).then_some((e.claim.start(), e.claim.valid.is_some(), w))
                }),
        )
        .collect();
    let mut superseded = vec![];
    for e in line().filter(external) {
        if e.id == winner_id || skip.contains(&e.id) {
            continue;
        }
        let now = memory.disposition(&e.id, u64::MAX);
        if !matches!(now, Some(Disposition::Committed | Disposition::Contested)) {
            continue;
        }
        let Some(mine) = memory.window(e, u64::MAX).filter(nonempty) else {
            continue;
        };
        let met: Vec<&Winner> = winners
            .iter()
            .filter(|(_, _, w)| w.overlaps(&mine))
            .collect();
        if met.is_empty() {
            continue;
        }
        if Some(&e.claim.value) == value {
            if now == Some(Disposition::Contested) {
                dispositions.push(DispositionEffect {
                    claim: e.id,
                    disposition: Disposition::Committed,
                });
            }
            continue;
        }
        // It keeps the part of its window before the winner's value starts holding over it,
        // as an affirmed request's incumbent does; otherwise it holds nowhere.
        let until = if met
            .iter()
            .all(|(start, windowed, _)| *windowed && *start > e.claim.start())
        {
            met.iter().map(|(start, _, _)| *start).min().unwrap_or(0)
        } else {
            0
        };
        bounds.push(BoundEffect { claim: e.id, until });
        dispositions.push(DispositionEffect {
            claim: e.id,
            disposition: Disposition::Superseded,
        });
        superseded.push(e.id);
    }
    superseded
}

/// What happens to the other pending requests of a line when `winner`'s value wins there.
#[derive(Default)]
struct RequestEnds {
    withdrawn: Vec<String>,
    agreed: Vec<String>,
    repointed: Vec<Repoint>,
}

/// Requests whose challenger was superseded are withdrawn (it lost here, so it cannot win
/// there); those whose challenger has the winning value close as agreeing; those whose
/// incumbent was superseded now compare against the winner.
fn close_requests(
    memory: &Memory,
    others: Vec<&crate::memory::RequestState>,
    superseded: &[ClaimId],
    value: Option<&Value>,
    winner: ClaimId,
) -> RequestEnds {
    let mut ends = RequestEnds::default();
    for r in others {
        if superseded.contains(&r.request.challenger) {
            ends.withdrawn.push(r.request.handle.clone());
            continue;
        }
        let agrees = memory
            .entry(&r.request.challenger)
            .is_some_and(|e| Some(&e.claim.value) == value);
        if agrees {
            ends.agreed.push(r.request.handle.clone());
        } else if superseded.contains(&r.incumbent()) {
            ends.repointed.push(Repoint {
                handle: r.request.handle.clone(),
                incumbent: winner,
            });
        }
    }
    ends
}

/// Everything a reinstatement changes, recorded in its `reinstated` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reinstatement {
    /// The claim made live again: committed, with every bound verdicts put on it lifted.
    pub claim: ClaimId,
    /// Claims of another value it overturns where it holds (bounded as by an `affirm`).
    pub bounds: Vec<BoundEffect>,
    pub dispositions: Vec<DispositionEffect>,
    pub repointed: Vec<Repoint>,
    pub agreed: Vec<String>,
    pub withdrawn: Vec<String>,
}

impl Reinstatement {
    pub fn to_value(&self) -> Value {
        // Invariant: plain structs with string keys always convert.
        serde_json::to_value(self).expect("reinstatements always convert to JSON")
    }

    pub fn from_value(v: &Value) -> Result<Reinstatement, ReadError> {
        serde_json::from_value(v.clone()).map_err(ReadError::Reinstatement)
    }

    /// The name requests closed by a reinstatement give as what closed them.
    pub fn by(claim: &ClaimId) -> String {
        format!("reinstate {}", claim.short())
    }
}

/// Checks a verdict that reinstates the claim `id` and returns its effects: the claim is
/// committed over its whole window (every bound lifted), and the line is settled where it holds
/// exactly as an `affirm` settles it for its challenger. A superseded claim becomes live again;
/// for a contested claim, or a committed one that a contested claim contradicts, this is the way
/// out that needs no request (after `unknown`, an expiry, or in a run without an oracle).
/// Refused: an unknown claim, a claim that is none of these (or committed with nothing live
/// against it), a claim that cannot carry a belief (not external,
/// quarantined, a recall re-entry), evidence that is not external and first-hand.
pub fn reinstate(
    memory: &Memory,
    id: &ClaimId,
    evidence: Provenance,
) -> Result<Reinstatement, AdjudicateError> {
    let Some(e) = memory.entry(id) else {
        return Err(AdjudicateError::UnknownClaim { claim: id.short() });
    };
    let now = memory.disposition(id, u64::MAX);
    let not_reinstatable = || AdjudicateError::NotReinstatable {
        claim: id.short(),
        disposition: now.map_or("unknown", |d| d.as_str()).to_owned(),
    };
    if !matches!(
        now,
        Some(Disposition::Superseded | Disposition::Contested | Disposition::Committed)
    ) {
        return Err(not_reinstatable());
    }
    if !Memory::counts(e) || !e.claim.provenance.is_external() {
        return Err(AdjudicateError::CannotCarry {
            claim: id.short(),
            provenance: e.claim.provenance,
        });
    }
    if !EVIDENCE_ACCEPTED.contains(&evidence) {
        return Err(AdjudicateError::Evidence { given: evidence });
    }
    let mut fx = Reinstatement {
        claim: *id,
        bounds: vec![],
        // A committed claim (upheld on a contested line) keeps its disposition.
        dispositions: (now != Some(Disposition::Committed))
            .then_some(DispositionEffect {
                claim: *id,
                disposition: Disposition::Committed,
            })
            .into_iter()
            .collect(),
        repointed: vec![],
        agreed: vec![],
        withdrawn: vec![],
    };
    // Its own window, unbounded: the reinstatement lifts every bound verdicts put on it.
    let own = e.claim.valid.unwrap_or(ValidTime {
        start: 0,
        end: None,
        confidence_pct: 100,
    });
    let winner = nonempty(&own).then_some((e.claim.start(), e.claim.valid.is_some(), own));
    let superseded = settle(
        memory,
        &e.claim.subject,
        &e.claim.predicate,
        (*id, winner),
        &[],
        &mut fx.bounds,
        &mut fx.dispositions,
    );
    let mut others = memory.pending_on(&e.claim.subject, &e.claim.predicate, u64::MAX);
    others.sort_by_key(|r| r.origin.seq);
    let ends = close_requests(memory, others, &superseded, Some(&e.claim.value), *id);
    fx.withdrawn = ends.withdrawn;
    fx.agreed = ends.agreed;
    fx.repointed = ends.repointed;
    // A committed claim is reinstated only to settle a line contested against it: with
    // nothing to settle, there is nothing to record.
    if now == Some(Disposition::Committed)
        && fx.bounds.is_empty()
        && fx.dispositions.is_empty()
        && fx.agreed.is_empty()
        && fx.withdrawn.is_empty()
        && fx.repointed.is_empty()
    {
        return Err(not_reinstatable());
    }
    Ok(fx)
}

/// The pending requests that have expired at logical time `now`, in the order they were opened. Empty when there
/// are none, so a second sweep finds nothing and records nothing.
pub fn sweep(memory: &Memory, now: u64) -> Vec<Expired> {
    expired_where(memory, |r| {
        let at = r.request.expires_at?;
        (at <= now).then_some((at, None))
    })
}

/// The pending requests of a real-time expiry (`expires_ms`) due at wall instant `now_ms`, in
/// the order they were opened, each expiring at logical `tick` (the tick its
/// `adjudications_expired` is recorded at). A request resolved first is not among them, so a
/// waker that comes after a verdict expires nothing.
pub fn expire_due(memory: &Memory, now_ms: u64, tick: u64) -> Vec<Expired> {
    expired_where(memory, |r| {
        let due = r.request.expires_ms?;
        (due <= now_ms).then_some((tick, Some(due)))
    })
}

/// What `oracle sweep` expires at tick `now`, the wall clock reading `now_ms`: the requests
/// expiring by ticks at `now` (as [`sweep`]) and the real-time ones due at `now_ms` (as
/// [`expire_due`], each at `now`), in the order they were opened.
pub fn sweep_at(memory: &Memory, now: u64, now_ms: u64) -> Vec<Expired> {
    expired_where(memory, |r| {
        match (r.request.expires_at, r.request.expires_ms) {
            (Some(at), _) => (at <= now).then_some((at, None)),
            (None, Some(due)) => (due <= now_ms).then_some((now, Some(due))),
            (None, None) => None,
        }
    })
}

/// The pending requests `when` says expired (at which tick, and which due instant), in the
/// order they were opened.
fn expired_where(
    memory: &Memory,
    when: impl Fn(&crate::memory::RequestState) -> Option<(u64, Option<u64>)>,
) -> Vec<Expired> {
    let mut out: Vec<(u64, Expired)> = memory
        .requests()
        .filter(|r| r.status == RequestStatus::Pending)
        .filter_map(|r| {
            let (at, due) = when(r)?;
            Some((
                r.origin.seq,
                Expired {
                    handle: r.request.handle.clone(),
                    challenger: r.request.challenger,
                    incumbent: r.incumbent(),
                    expires_at: at,
                    expires_ms: due,
                },
            ))
        })
        .collect();
    out.sort_by_key(|(seq, _)| *seq);
    out.into_iter().map(|(_, x)| x).collect()
}
