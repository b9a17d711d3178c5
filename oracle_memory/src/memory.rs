//! The memory: the projection of a run's claim, verdict and expiry records, with a per-line
//! index so a query reads one line, never the whole memory.
//!
//! Everything here is a set of records (claims, dispositions over time, validity bounds,
//! requests), so two memories merge by union ([`Memory::merge`]): commutative, associative and
//! idempotent. Beliefs are folded from these sets on demand (`belief.rs`) and do not depend on
//! the order records arrived in.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use oracle_core::Payload;
use oracle_core::payload::{Adjudicated, AdjudicationsExpired};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adjudicate::{Effects, Expired, Reinstatement, Repoint, Verdict};
use crate::claim::{Cardinality, Claim, ClaimId, Criticality, Origin, Provenance, ValidTime};
use crate::error::ProjectionError;
use crate::gate::{Assertion, Disposition, Request};
use crate::tools;

/// The fewest hex characters of a claim's id that name it at the command line.
pub const CLAIM_PREFIX_HEX_MIN: u64 = 8;

/// A line: subject and predicate.
pub type Line = (String, String);

/// A recorded claim with what the gate said when it arrived.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub id: ClaimId,
    pub claim: Claim,
    pub origin: Origin,
    pub initial: Disposition,
    pub reason: String,
    pub corroborates: Option<ClaimId>,
}

/// A claim's disposition from logical time `time` (event `seq`) on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Transition {
    pub time: u64,
    pub seq: u64,
    pub disposition: Disposition,
    pub reason: String,
}

/// A verdict's bound on a claim's validity: from `time` on, the claim holds only before
/// valid tick `until` (0: nowhere).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Bound {
    pub time: u64,
    pub seq: u64,
    pub until: u64,
}

/// Where a request stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RequestStatus {
    Pending,
    Resolved {
        seq: u64,
        time: u64,
        verdict: Verdict,
        evidence: Provenance,
        note: String,
        /// Set when another request's verdict closed this one (its challenger agreed with the
        /// value that verdict affirmed).
        by: Option<String>,
        effects: Value,
    },
    Expired {
        seq: u64,
        time: u64,
        now: u64,
    },
}

impl RequestStatus {
    pub fn name(&self) -> &'static str {
        match self {
            RequestStatus::Pending => "pending",
            RequestStatus::Resolved { .. } => "resolved",
            RequestStatus::Expired { .. } => "expired",
        }
    }

    fn time(&self) -> Option<u64> {
        match self {
            RequestStatus::Pending => None,
            RequestStatus::Resolved { time, .. } | RequestStatus::Expired { time, .. } => {
                Some(*time)
            }
        }
    }
}

/// A request with where it was recorded, its re-pointings and its status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestState {
    pub request: Request,
    pub origin: Origin,
    /// `(time, seq, new incumbent)`: after a verdict on another request of the line.
    pub repoints: BTreeSet<(u64, u64, ClaimId)>,
    pub status: RequestStatus,
}

impl RequestState {
    /// The incumbent the request compares against now.
    pub fn incumbent(&self) -> ClaimId {
        self.repoints
            .last()
            .map_or(self.request.incumbent, |(_, _, id)| *id)
    }

    /// The status as it was at logical time `as_of`.
    pub fn status_at(&self, as_of: u64) -> &RequestStatus {
        match self.status.time() {
            Some(t) if t > as_of => &RequestStatus::Pending,
            _ => &self.status,
        }
    }
}

/// The projection. Cheap to clone (persistent maps). Serializable so a store's checkpoint can
/// keep its fold (`oracle_runtime::store_checkpoint`): its maps have non-string keys, so it is
/// written in a binary encoding, never JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    entries: OrdMap<ClaimId, Arc<Entry>>,
    lines: OrdMap<Line, OrdSet<ClaimId>>,
    corroborations: OrdMap<ClaimId, OrdSet<ClaimId>>,
    bounds: OrdMap<ClaimId, OrdSet<Bound>>,
    /// `(time, seq)` of each reinstatement of a claim: bounds recorded before the latest one
    /// (as of a query's time) no longer cut its window.
    lifts: OrdMap<ClaimId, OrdSet<(u64, u64)>>,
    transitions: OrdMap<ClaimId, OrdSet<Transition>>,
    /// By challenger: a claim has at most one request.
    requests: OrdMap<ClaimId, RequestState>,
    handles: OrdMap<String, ClaimId>,
    /// Verdict and expiry records about requests not applied yet (records applied out of
    /// order, or a merge of partial memories), by handle: applied when the request arrives.
    early: OrdMap<String, Early>,
    now: u64,
}

/// What verdicts and sweeps recorded about a request before the request itself was applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Early {
    status: Option<RequestStatus>,
    repoints: BTreeSet<(u64, u64, ClaimId)>,
    /// Transitions of the request's challenger (closed as agreeing: known only by handle).
    transitions: BTreeSet<Transition>,
}

impl Early {
    fn join(mut self, other: Early) -> Early {
        self.status = match (self.status, other.status) {
            (Some(a), Some(b)) => Some(join_status(a, b)),
            (a, b) => a.or(b),
        };
        self.repoints.extend(other.repoints);
        self.transitions.extend(other.transitions);
        self
    }
}

/// Of two records of one key, the one with the larger canonical encoding (a join: the same
/// whichever side each is on, and in whatever order they meet).
fn pick<T: Serialize + Clone>(a: &T, b: &T) -> T {
    let key = |x: &T| {
        serde_json::to_value(x)
            .ok()
            .and_then(|v| oracle_core::canon::encode(&v).ok())
    };
    if key(a) >= key(b) {
        a.clone()
    } else {
        b.clone()
    }
}

/// The status a request settles on when two are recorded for it: resolved or expired over
/// pending, then the larger canonical encoding. A valid log records at most one for a request,
/// so this only decides between branches; being a join, it does not depend on the order
/// records were applied or memories merged in.
fn join_status(a: RequestStatus, b: RequestStatus) -> RequestStatus {
    match (&a, &b) {
        (RequestStatus::Pending, _) => b,
        (_, RequestStatus::Pending) => a,
        _ => pick(&a, &b),
    }
}

/// Two states of one request (the same challenger): the request as recorded by the larger
/// encoding, the joined status, every re-pointing.
fn join_requests(a: &RequestState, b: &RequestState) -> RequestState {
    let (request, origin) = pick(&(&a.request, &a.origin), &(&b.request, &b.origin));
    RequestState {
        request: request.clone(),
        origin: origin.clone(),
        repoints: a.repoints.union(&b.repoints).cloned().collect(),
        status: join_status(a.status.clone(), b.status.clone()),
    }
}

/// A transition's reason with the note that came with it, if any.
fn note_reason(what: &str, note: &str) -> String {
    if note.is_empty() {
        what.to_owned()
    } else {
        format!("{what}: {note}")
    }
}

/// What closed other requests: a verdict (by its handle) or a reinstatement.
struct Closer<'a> {
    by: String,
    evidence: Provenance,
    note: &'a str,
    effects: Value,
    /// Recorded as the closed requests' verdict: `affirm` for those that agreed.
    verdict: Verdict,
    /// Why a claim whose request closed as agreeing is committed.
    agreed_reason: String,
}

/// The order claims are retrieved in: criticality (highest first), then recency in logical
/// time (latest first), then claim id.
pub type RetrievalKey = (Reverse<Criticality>, Reverse<u64>, Reverse<u64>, ClaimId);

impl Memory {
    pub fn new() -> Memory {
        Memory::default()
    }

    /// The latest logical time of any record applied.
    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entry(&self, id: &ClaimId) -> Option<&Entry> {
        self.entries.get(id).map(|e| &**e)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values().map(|e| &**e)
    }

    /// Every line, sorted.
    pub fn lines(&self) -> impl Iterator<Item = &Line> {
        self.lines.keys()
    }

    /// The claims of one line (recall re-entries included), by id.
    pub fn line_claims<'a>(
        &'a self,
        subject: &str,
        predicate: &str,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        self.lines
            .get(&(subject.to_owned(), predicate.to_owned()))
            .into_iter()
            .flat_map(|ids| ids.iter())
            .filter_map(|id| self.entry(id))
    }

    /// The lines of one subject, sorted (a range of the index, not a scan).
    pub fn subject_lines(&self, subject: &str) -> Vec<(&str, &str)> {
        self.lines
            .range((subject.to_owned(), String::new())..)
            .take_while(|((s, _), _)| s == subject)
            .map(|((s, p), _)| (s.as_str(), p.as_str()))
            .collect()
    }

    pub fn line_is_empty(&self, subject: &str, predicate: &str) -> bool {
        self.line_claims(subject, predicate).next().is_none()
    }

    /// The cardinality the line's claims were recorded with (`functional` wins if merged
    /// memories disagree).
    pub fn line_cardinality(&self, subject: &str, predicate: &str) -> Option<Cardinality> {
        self.line_claims(subject, predicate)
            .map(|e| e.claim.cardinality)
            .min()
    }

    pub fn retrieval_key(&self, id: &ClaimId) -> RetrievalKey {
        match self.entry(id) {
            Some(e) => (
                Reverse(e.claim.criticality),
                Reverse(e.origin.time),
                Reverse(e.origin.seq),
                *id,
            ),
            None => (Reverse(Criticality::Low), Reverse(0), Reverse(0), *id),
        }
    }

    /// A claim's disposition at logical time `as_of` (`None` before it was recorded).
    pub fn disposition(&self, id: &ClaimId, as_of: u64) -> Option<Disposition> {
        self.transitions
            .get(id)?
            .iter()
            .filter(|t| t.time <= as_of)
            .max_by_key(|t| (t.time, t.seq))
            .map(|t| t.disposition)
    }

    /// Every disposition a claim has had, in order.
    pub fn transitions(&self, id: &ClaimId) -> Vec<Transition> {
        self.transitions
            .get(id)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// How many recall re-entries corroborate a claim, as of `as_of`.
    pub fn corroborations(&self, id: &ClaimId, as_of: u64) -> u64 {
        self.corroborations.get(id).map_or(0, |s| {
            s.iter()
                .filter(|c| self.entry(c).is_some_and(|e| e.origin.time <= as_of))
                .count() as u64
        })
    }

    /// The valid-time bound verdicts put on a claim, as of `as_of`.
    pub fn bound(&self, id: &ClaimId, as_of: u64) -> Option<u64> {
        let lifted = self
            .lifts
            .get(id)
            .and_then(|s| s.iter().filter(|(time, _)| *time <= as_of).max().copied());
        self.bounds
            .get(id)?
            .iter()
            .filter(|b| b.time <= as_of && lifted.is_none_or(|l| (b.time, b.seq) > l))
            .map(|b| b.until)
            .min()
    }

    /// The claim whose id is `text` or starts with it (at least
    /// [`CLAIM_PREFIX_HEX_MIN`] lowercase hex characters), refused when none or several match.
    pub fn claim_by_prefix(&self, text: &str) -> Result<ClaimId, crate::AdjudicateError> {
        use crate::AdjudicateError as E;
        let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
        if (text.len() as u64) < CLAIM_PREFIX_HEX_MIN || text.len() > 64 || !text.chars().all(hex) {
            return Err(E::ClaimPrefix {
                given: text.to_owned(),
                min: CLAIM_PREFIX_HEX_MIN,
            });
        }
        let mut found = self
            .entries
            .keys()
            .filter(|id| id.to_hex().starts_with(text));
        match (found.next(), found.next()) {
            (Some(id), None) => Ok(*id),
            (None, _) => Err(E::UnknownClaim {
                claim: text.to_owned(),
            }),
            (Some(_), Some(_)) => Err(E::AmbiguousClaim {
                prefix: text.to_owned(),
                matches: 2 + found.count() as u64,
            }),
        }
    }

    /// When a claim was reinstated (`(time, seq)` of each reinstatement), oldest first.
    pub fn reinstatements(&self, id: &ClaimId) -> Vec<(u64, u64)> {
        self.lifts
            .get(id)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The window over which a claim can count, as of `as_of`: its own (or all time) cut by
    /// verdict bounds. `None` when nothing is left. Whether the window is trusted is separate.
    pub fn window(&self, e: &Entry, as_of: u64) -> Option<ValidTime> {
        let mut w = e.claim.valid.unwrap_or(ValidTime {
            start: 0,
            end: None,
            confidence_pct: 100,
        });
        if let Some(until) = self.bound(&e.id, as_of) {
            w.end = Some(w.end.map_or(until, |end| end.min(until)));
            if until <= w.start {
                return None;
            }
        }
        Some(w)
    }

    /// Whether a claim's own window can be relied on (no window counts as trusted).
    pub fn trusted(e: &Entry, confidence_min_pct: u64) -> bool {
        e.claim
            .valid
            .is_none_or(|v| v.trusted(e.origin.time, confidence_min_pct))
    }

    /// Whether a claim can carry a belief at all: not quarantined, not a recall re-entry.
    pub fn counts(e: &Entry) -> bool {
        e.initial != Disposition::Quarantined && e.claim.provenance != Provenance::RecallReentry
    }

    /// Live external claims of `claim`'s line that contradict it: another value over an
    /// overlapping window (an untrusted window overlaps everything), in retrieval order.
    pub fn conflicts(&self, claim: &Claim, now: u64, confidence_min_pct: u64) -> Vec<ClaimId> {
        let mine = claim.valid.filter(|v| v.trusted(now, confidence_min_pct));
        let mut out: Vec<ClaimId> = self
            .line_claims(&claim.subject, &claim.predicate)
            .filter(|e| Memory::counts(e) && e.claim.provenance.is_external())
            .filter(|e| e.claim.value != claim.value)
            .filter(|e| {
                let Some(w) = self.window(e, u64::MAX) else {
                    return false;
                };
                // A claim without a trusted window (none, or an untrusted one) overlaps
                // everything; so does a claim whose own window is untrusted.
                match (mine, claim.valid) {
                    (Some(m), _) if Memory::trusted(e, confidence_min_pct) => m.overlaps(&w),
                    _ => true,
                }
            })
            .map(|e| e.id)
            .collect();
        out.sort_by_cached_key(|id| self.retrieval_key(id));
        out
    }

    pub fn request(&self, challenger: &ClaimId) -> Option<&RequestState> {
        self.requests.get(challenger)
    }

    pub fn request_by_handle(&self, handle: &str) -> Option<&RequestState> {
        self.requests.get(self.handles.get(handle)?)
    }

    /// Every request, by challenger id.
    pub fn requests(&self) -> impl Iterator<Item = &RequestState> {
        self.requests.values()
    }

    /// Requests pending at `as_of` on one line.
    pub fn pending_on(&self, subject: &str, predicate: &str, as_of: u64) -> Vec<&RequestState> {
        self.line_claims(subject, predicate)
            .filter_map(|e| self.requests.get(&e.id))
            .filter(|r| r.origin.time <= as_of)
            .filter(|r| *r.status_at(as_of) == RequestStatus::Pending)
            .collect()
    }

    fn transition(&mut self, id: ClaimId, t: Transition) {
        self.transitions.entry(id).or_default().insert(t);
    }

    /// Adds a claim the gate decided on, recorded at `origin`.
    pub fn insert(&mut self, a: &Assertion, origin: &Origin) {
        self.now = self.now.max(origin.time);
        let entry = Entry {
            id: a.id,
            claim: a.claim.clone(),
            origin: origin.clone(),
            initial: a.disposition,
            reason: a.reason.clone(),
            corroborates: a.corroborates,
        };
        self.lines.entry(a.claim.line()).or_default().insert(a.id);
        if let Some(src) = a.corroborates {
            self.corroborations.entry(src).or_default().insert(a.id);
        }
        self.transition(
            a.id,
            Transition {
                time: origin.time,
                seq: origin.seq,
                disposition: a.disposition,
                reason: a.reason.clone(),
            },
        );
        if let Some(r) = &a.adjudication {
            self.handles.insert(r.handle.clone(), a.id);
            let mut state = RequestState {
                request: r.clone(),
                origin: origin.clone(),
                repoints: BTreeSet::new(),
                status: RequestStatus::Pending,
            };
            if let Some(old) = self.requests.get(&a.id) {
                state = join_requests(old, &state);
            }
            self.requests.insert(a.id, state);
            self.settle_early(&r.handle);
        }
        self.entries.insert(a.id, Arc::new(entry));
    }

    /// Applies what verdicts and sweeps recorded about `handle` before its request arrived.
    fn settle_early(&mut self, handle: &str) {
        let Some(c) = self.handles.get(handle).copied() else {
            return;
        };
        let Some(state) = self.requests.get_mut(&c) else {
            return;
        };
        let Some(early) = self.early.remove(handle) else {
            return;
        };
        if let Some(status) = early.status {
            state.status = join_status(state.status.clone(), status);
        }
        state.repoints.extend(early.repoints);
        for t in early.transitions {
            self.transition(c, t);
        }
    }

    /// Records a status for the request `handle` (challenger `challenger` when known).
    fn set_status(&mut self, handle: &str, challenger: Option<ClaimId>, status: RequestStatus) {
        let c = challenger.or_else(|| self.handles.get(handle).copied());
        match c.and_then(|c| self.requests.get_mut(&c)) {
            Some(state) => state.status = join_status(state.status.clone(), status),
            None => {
                let e = self.early.entry(handle.to_owned()).or_default();
                e.status = Some(match e.status.take() {
                    Some(old) => join_status(old, status),
                    None => status,
                });
            }
        }
    }

    /// Applies a verdict's recorded effects (event `seq` at `time`).
    pub fn apply_verdict(
        &mut self,
        verdict: Verdict,
        evidence: Provenance,
        note: &str,
        effects: &Effects,
        seq: u64,
        time: u64,
    ) {
        self.now = self.now.max(time);
        let handle = &effects.handle;
        let resolved = |by: Option<String>| RequestStatus::Resolved {
            seq,
            time,
            verdict,
            evidence,
            note: note.to_owned(),
            by,
            effects: effects.to_value(),
        };
        self.set_status(handle, Some(effects.challenger), resolved(None));
        self.add_bounds(&effects.bounds, seq, time);
        for d in &effects.dispositions {
            self.transition(
                d.claim,
                Transition {
                    time,
                    seq,
                    disposition: d.disposition,
                    reason: format!("{} on {handle}", verdict.as_str()),
                },
            );
        }
        let closer = Closer {
            by: handle.clone(),
            evidence,
            note,
            effects: effects.to_value(),
            verdict,
            agreed_reason: format!("agrees with the belief {verdict} on {handle} left"),
        };
        self.close_others(
            &closer,
            &effects.repointed,
            &effects.withdrawn,
            &effects.agreed,
            seq,
            time,
        );
    }

    /// Applies a reinstatement's recorded effects (event `seq` at `time`).
    pub fn apply_reinstatement(
        &mut self,
        evidence: Provenance,
        note: &str,
        fx: &Reinstatement,
        seq: u64,
        time: u64,
    ) {
        self.now = self.now.max(time);
        self.lifts.entry(fx.claim).or_default().insert((time, seq));
        self.add_bounds(&fx.bounds, seq, time);
        let by = Reinstatement::by(&fx.claim);
        for d in &fx.dispositions {
            let reason = if d.claim == fx.claim {
                note_reason("reinstated", note)
            } else {
                format!(
                    "{} by the reinstatement of {}",
                    d.disposition.as_str(),
                    fx.claim.short()
                )
            };
            self.transition(
                d.claim,
                Transition {
                    time,
                    seq,
                    disposition: d.disposition,
                    reason,
                },
            );
        }
        let closer = Closer {
            by: by.clone(),
            evidence,
            note,
            effects: fx.to_value(),
            verdict: Verdict::Affirm,
            agreed_reason: format!("agrees with claim {} reinstated", fx.claim.short()),
        };
        self.close_others(&closer, &fx.repointed, &fx.withdrawn, &fx.agreed, seq, time);
    }

    /// Records the validity bounds a verdict or reinstatement (event `seq` at `time`) put.
    fn add_bounds(&mut self, bounds: &[crate::adjudicate::BoundEffect], seq: u64, time: u64) {
        for b in bounds {
            self.bounds.entry(b.claim).or_default().insert(Bound {
                time,
                seq,
                until: b.until,
            });
        }
    }

    /// The other requests of a line a verdict or reinstatement ended or re-pointed.
    fn close_others(
        &mut self,
        closer: &Closer<'_>,
        repointed: &[Repoint],
        withdrawn: &[String],
        agreed: &[String],
        seq: u64,
        time: u64,
    ) {
        let handle = &closer.by;
        let (verdict, evidence, note) = (closer.verdict, closer.evidence, closer.note);
        let resolved = |by: Option<String>| RequestStatus::Resolved {
            seq,
            time,
            verdict,
            evidence,
            note: note.to_owned(),
            by,
            effects: closer.effects.clone(),
        };
        for r in repointed {
            let repoint = (time, seq, r.incumbent);
            match self
                .handles
                .get(&r.handle)
                .copied()
                .and_then(|c| self.requests.get_mut(&c))
            {
                Some(state) => {
                    state.repoints.insert(repoint);
                }
                None => {
                    let e = self.early.entry(r.handle.clone()).or_default();
                    e.repoints.insert(repoint);
                }
            }
        }
        for h in withdrawn {
            // Its challenger lost on this verdict: closed as denied.
            let status = RequestStatus::Resolved {
                seq,
                time,
                verdict: Verdict::Deny,
                evidence,
                note: note.to_owned(),
                by: Some(handle.clone()),
                effects: closer.effects.clone(),
            };
            self.set_status(h, None, status);
        }
        for h in agreed {
            self.set_status(h, None, resolved(Some(handle.clone())));
            let t = Transition {
                time,
                seq,
                disposition: Disposition::Committed,
                reason: closer.agreed_reason.clone(),
            };
            match self.handles.get(h).copied() {
                Some(c) => self.transition(c, t),
                None => {
                    self.early
                        .entry(h.clone())
                        .or_default()
                        .transitions
                        .insert(t);
                }
            }
        }
    }

    /// Applies a sweep's recorded expiries (event `seq` at `time`).
    pub fn apply_expired(&mut self, now: u64, expired: &[Expired], seq: u64, time: u64) {
        self.now = self.now.max(time);
        for x in expired {
            self.set_status(
                &x.handle,
                Some(x.challenger),
                RequestStatus::Expired { seq, time, now },
            );
            for claim in [x.challenger, x.incumbent] {
                self.transition(
                    claim,
                    Transition {
                        time,
                        seq,
                        disposition: Disposition::Contested,
                        reason: match x.expires_ms {
                            Some(due) => {
                                format!("{} expired at its deadline (unix ms {due})", x.handle)
                            }
                            None => format!("{} expired at tick {}", x.handle, x.expires_at),
                        },
                    },
                );
            }
        }
    }

    /// Applies one recorded event: the output of `memory.assert`, a verdict or a sweep. Other
    /// events only move the clock.
    pub fn apply(&mut self, seq: u64, time: u64, payload: &Payload) -> Result<(), ProjectionError> {
        self.now = self.now.max(time);
        let bad = |reason: String| ProjectionError { seq, reason };
        match payload {
            // A claim published to a shared store (its answer names the store) belongs to the
            // store's memory, not the run's: its id is the store's (`crate::shared`).
            Payload::ToolReturned(r)
                if r.tool == tools::ASSERT && r.output.get("store").is_some() => {}
            Payload::ToolReturned(r) if r.tool == tools::ASSERT => {
                let a: Assertion = serde_json::from_value(r.output.clone())
                    .map_err(|e| bad(format!("memory.assert output does not read back: {e}")))?;
                let id = a.claim.id_at(seq).map_err(|e| bad(e.to_string()))?;
                if id != a.id {
                    return Err(bad(format!(
                        "claim id {} does not match its content and position ({})",
                        a.id.short(),
                        id.short()
                    )));
                }
                let origin = Origin {
                    seq,
                    time,
                    step: r.step.clone(),
                    tool: r.tool.clone(),
                };
                self.insert(&a, &origin);
            }
            Payload::Adjudicated(Adjudicated {
                verdict,
                evidence,
                note,
                effects,
                handle,
                by: _,
            }) => {
                let verdict = verdict.parse::<Verdict>().map_err(|e| bad(e.to_string()))?;
                let evidence = evidence
                    .parse::<Provenance>()
                    .map_err(|e| bad(e.to_string()))?;
                let effects = Effects::from_value(effects).map_err(|e| bad(e.to_string()))?;
                if &effects.handle != handle {
                    return Err(bad(format!(
                        "the verdict is for `{handle}` but its effects are for `{}`",
                        effects.handle
                    )));
                }
                self.apply_verdict(verdict, evidence, note, &effects, seq, time);
            }
            Payload::AdjudicationsExpired(AdjudicationsExpired { now, expired, .. }) => {
                let list: Vec<Expired> = serde_json::from_value(expired.clone())
                    .map_err(|e| bad(format!("expired list does not read back: {e}")))?;
                self.apply_expired(*now, &list, seq, time);
            }
            Payload::ClaimRecorded(c) => crate::external::apply(self, seq, time, c)?,
            Payload::Reinstated(r) => {
                let evidence = r
                    .evidence
                    .parse::<Provenance>()
                    .map_err(|e| bad(e.to_string()))?;
                let fx = Reinstatement::from_value(&r.effects).map_err(|e| bad(e.to_string()))?;
                if fx.claim.to_hex() != r.claim {
                    return Err(bad(format!(
                        "the reinstatement names claim {} but its effects are for {}",
                        r.claim,
                        fx.claim.short()
                    )));
                }
                self.apply_reinstatement(evidence, &r.note, &fx, seq, time);
            }
            _ => {}
        }
        Ok(())
    }

    /// The union of two memories. Commutative, associative and idempotent: every part is a
    /// set, and where two records share a key (the same claim recorded differently by two
    /// branches) the one with the larger canonical encoding wins, whichever side it is on. A
    /// request's status is joined on its own (resolved or expired over pending) and its
    /// re-pointings are united, so the result equals applying both memories' records.
    pub fn merge(&self, other: &Memory) -> Memory {
        fn union_sets<K: Ord + Clone, V: Ord + Clone>(
            a: &OrdMap<K, OrdSet<V>>,
            b: &OrdMap<K, OrdSet<V>>,
        ) -> OrdMap<K, OrdSet<V>> {
            a.clone().union_with(b.clone(), |x, y| x.union(y))
        }
        let mut merged = Memory {
            entries: self
                .entries
                .clone()
                .union_with(other.entries.clone(), |a, b| Arc::new(pick(&*a, &*b))),
            lines: union_sets(&self.lines, &other.lines),
            corroborations: union_sets(&self.corroborations, &other.corroborations),
            bounds: union_sets(&self.bounds, &other.bounds),
            lifts: union_sets(&self.lifts, &other.lifts),
            transitions: union_sets(&self.transitions, &other.transitions),
            requests: self
                .requests
                .clone()
                .union_with(other.requests.clone(), |a, b| join_requests(&a, &b)),
            handles: self
                .handles
                .clone()
                .union_with(other.handles.clone(), |a, b| a.min(b)),
            early: self
                .early
                .clone()
                .union_with(other.early.clone(), |a, b| a.join(b)),
            now: self.now.max(other.now),
        };
        // What one side recorded about a request only the other side holds.
        let early: Vec<String> = merged.early.keys().cloned().collect();
        for handle in early {
            merged.settle_early(&handle);
        }
        merged
    }

    /// Lines contested after a merge that neither side had contested: the conflicts the merge
    /// revealed. The fold leaves them contested (every alternative, no primary: gate rule 6 as
    /// if no oracle were configured); a caller with an oracle queues them. Nothing picks a
    /// winner.
    pub fn revealed_by_merge(
        a: &Memory,
        b: &Memory,
        merged: &Memory,
        confidence_min_pct: u64,
    ) -> Vec<Line> {
        use crate::belief::{Belief, Query, query};
        let contested = |m: &Memory, (s, p): &Line| {
            matches!(
                query(m, &Query::now(s, p), confidence_min_pct),
                Belief::Contested { .. }
            )
        };
        merged
            .lines()
            .filter(|line| contested(merged, line) && !contested(a, line) && !contested(b, line))
            .cloned()
            .collect()
    }
}

/// A memory cut into parts by line ([`Memory::split`]): one per section, and what belongs to
/// no line.
#[derive(Clone, Debug, Default)]
pub struct Split {
    pub sections: Vec<Memory>,
    /// Records keyed by a claim no entry holds, verdicts and sweeps about requests not applied
    /// yet (`early`): a partial read takes these with its section.
    pub rest: Memory,
}

impl Memory {
    /// Cuts the memory into `n` parts (at least one) by the section `section_of` gives each
    /// line (below `n`), so that a query or history of one line reads the same from its
    /// section merged with [`Split::rest`] as from the whole: every record keyed by a claim
    /// (entry, transitions, bounds, lifts, corroborations, the request it challenges, its
    /// handle) goes to the section of the claim's line; what no line holds goes to `rest`.
    /// Every part keeps the logical clock. The parts are disjoint, so merging them all gives
    /// the memory back.
    pub fn split(&self, n: u64, section_of: impl Fn(&Line) -> u64) -> Split {
        let n = n.max(1);
        let blank = || Memory {
            now: self.now,
            ..Memory::default()
        };
        let mut sections: Vec<Memory> = (0..n).map(|_| blank()).collect();
        let rest = blank();
        let mut owner: OrdMap<ClaimId, usize> = OrdMap::new();
        for (line, ids) in &self.lines {
            let i = usize::try_from(section_of(line).min(n - 1)).unwrap_or(0);
            if let Some(section) = sections.get_mut(i) {
                section.lines.insert(line.clone(), ids.clone());
            }
            for id in ids {
                owner.insert(*id, i);
            }
        }
        let mut split = Split { sections, rest };
        by_claim(&self.entries, &mut split, &owner, |m| &mut m.entries);
        by_claim(&self.corroborations, &mut split, &owner, |m| {
            &mut m.corroborations
        });
        by_claim(&self.bounds, &mut split, &owner, |m| &mut m.bounds);
        by_claim(&self.lifts, &mut split, &owner, |m| &mut m.lifts);
        by_claim(&self.transitions, &mut split, &owner, |m| {
            &mut m.transitions
        });
        by_claim(&self.requests, &mut split, &owner, |m| &mut m.requests);
        for (h, id) in &self.handles {
            split.part(&owner, id).handles.insert(h.clone(), *id);
        }
        split.rest.early = self.early.clone();
        split
    }
}

/// Puts every record of `from` (keyed by claim) into the same map (`field`) of the part that
/// holds its claim.
fn by_claim<V: Clone>(
    from: &OrdMap<ClaimId, V>,
    split: &mut Split,
    owner: &OrdMap<ClaimId, usize>,
    field: fn(&mut Memory) -> &mut OrdMap<ClaimId, V>,
) {
    for (id, v) in from {
        field(split.part(owner, id)).insert(*id, v.clone());
    }
}

impl Split {
    /// The part that holds records keyed by claim `id`.
    fn part(&mut self, owner: &OrdMap<ClaimId, usize>, id: &ClaimId) -> &mut Memory {
        match owner.get(id).and_then(|i| self.sections.get_mut(*i)) {
            Some(m) => m,
            None => &mut self.rest,
        }
    }
}
