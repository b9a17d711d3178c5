//! Model test: random operation sequences run against the memory and against a deliberately
//! simple reference written here from the documented rules (gate.rs, belief.rs, adjudicate.rs
//! and docs/MEMORY.md): a list of claim records and a list of verdict and expiry records, every
//! answer found by scanning them, no indices. After every step the two must agree on the
//! outcome, the belief of every line (now, as of earlier ticks, at other valid times), and the
//! disposition of every claim.

use crate::common;

use std::cmp::Reverse;

use common::*;
use oracle_memory::adjudicate::{BoundEffect, DispositionEffect, Expired, Repoint};
use oracle_memory::belief::{self, Alternative, Belief, Query, Support};
use oracle_memory::gate::Request;
use oracle_memory::{
    AdjudicateError, Cardinality, Claim, ClaimId, Criticality, Disposition, Effects,
    MemorySettings, Provenance, RequestStatus, ValidTime, Verdict,
};
use proptest::prelude::*;
use serde_json::Value;

/// A claim as recorded.
#[derive(Clone, Debug)]
struct MClaim {
    id: ClaimId,
    claim: Claim,
    seq: u64,
    time: u64,
    initial: Disposition,
    corroborates: Option<ClaimId>,
}

/// A request as opened.
#[derive(Clone, Debug)]
struct MRequest {
    handle: String,
    seq: u64,
    time: u64,
    subject: String,
    predicate: String,
    incumbent: ClaimId,
    challenger: ClaimId,
    expires_at: Option<u64>,
}

/// A verdict or a sweep as recorded.
#[derive(Clone, Debug)]
enum MRecord {
    Verdict {
        seq: u64,
        time: u64,
        fx: Effects,
    },
    Expiry {
        seq: u64,
        time: u64,
        list: Vec<Expired>,
    },
}

impl MRecord {
    fn at(&self) -> (u64, u64) {
        match self {
            MRecord::Verdict { seq, time, .. } | MRecord::Expiry { seq, time, .. } => (*time, *seq),
        }
    }
}

/// Where a request stands, as the reference sees it.
#[derive(Clone, Debug, PartialEq)]
enum MStatus {
    Pending,
    Resolved { seq: u64 },
    Expired { seq: u64 },
}

#[derive(Clone, Debug)]
struct Model {
    settings: MemorySettings,
    seq: u64,
    time: u64,
    /// The latest time of any event.
    now: u64,
    claims: Vec<MClaim>,
    requests: Vec<MRequest>,
    records: Vec<MRecord>,
}

/// Whether valid tick `t` is in a window.
fn inside(w: &ValidTime, t: u64) -> bool {
    w.start <= t && w.end.is_none_or(|e| t < e)
}

/// Whether two windows share a tick, by trying every tick up to past their finite ends.
fn share_a_tick(a: &ValidTime, b: &ValidTime) -> bool {
    let last = [Some(a.start), a.end, Some(b.start), b.end]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0);
    (0..=last + 1).any(|t| inside(a, t) && inside(b, t))
}

/// The order of criticalities as docs/MEMORY.md writes it (`low` < `medium` < `high` <
/// `critical`), by name: the model never uses the implementation's `Ord` on [`Criticality`], so
/// an implementation that swapped two of them (in the enum or its comparisons) disagrees here.
const CRITICALITY_ORDER: [&str; 4] = ["low", "medium", "high", "critical"];

fn rank(c: Criticality) -> usize {
    CRITICALITY_ORDER
        .iter()
        .position(|name| *name == c.as_str())
        .unwrap_or_else(|| panic!("criticality {c:?} is not in docs/MEMORY.md"))
}

/// The higher of two criticalities, by the documented order.
fn higher(a: Criticality, b: Criticality) -> Criticality {
    if rank(b) > rank(a) { b } else { a }
}

fn key(c: &MClaim) -> (Reverse<usize>, Reverse<u64>, Reverse<u64>, ClaimId) {
    (
        Reverse(rank(c.claim.criticality)),
        Reverse(c.time),
        Reverse(c.seq),
        c.id,
    )
}

fn canon(v: &Value) -> Vec<u8> {
    oracle_core::canon::encode(v).unwrap()
}

impl Model {
    fn new(settings: MemorySettings) -> Model {
        Model {
            settings,
            seq: 0,
            time: 0,
            now: 0,
            claims: vec![],
            requests: vec![],
            records: vec![],
        }
    }

    fn min(&self) -> u64 {
        self.settings.confidence_min_pct
    }

    fn claim(&self, id: &ClaimId) -> Option<&MClaim> {
        self.claims.iter().find(|c| c.id == *id)
    }

    fn on_line<'a>(&'a self, s: &'a str, p: &'a str) -> impl Iterator<Item = &'a MClaim> + 'a {
        self.claims
            .iter()
            .filter(move |c| c.claim.subject == s && c.claim.predicate == p)
    }

    fn request(&self, handle: &str) -> Option<&MRequest> {
        self.requests.iter().find(|r| r.handle == handle)
    }

    fn event(&mut self) -> u64 {
        self.seq += 1;
        self.now = self.now.max(self.time);
        self.seq
    }

    // -- Derived facts, each by a scan of the records. -----------------------------------------

    /// A claim's disposition at `as_of`: the latest of its initial one and every disposition a
    /// verdict or a sweep recorded for it by then.
    fn disposition(&self, id: &ClaimId, as_of: u64) -> Option<Disposition> {
        let c = self.claim(id)?;
        let mut all = vec![(c.time, c.seq, c.initial)];
        for r in &self.records {
            let (time, seq) = r.at();
            match r {
                MRecord::Verdict { fx, .. } => {
                    for d in &fx.dispositions {
                        if d.claim == *id {
                            all.push((time, seq, d.disposition));
                        }
                    }
                    for h in &fx.agreed {
                        if self.request(h).is_some_and(|q| q.challenger == *id) {
                            all.push((time, seq, Disposition::Committed));
                        }
                    }
                }
                MRecord::Expiry { list, .. } => {
                    if list
                        .iter()
                        .any(|x| x.challenger == *id || x.incumbent == *id)
                    {
                        all.push((time, seq, Disposition::Contested));
                    }
                }
            }
        }
        all.into_iter()
            .filter(|(t, _, _)| *t <= as_of)
            .max()
            .map(|(_, _, d)| d)
    }

    fn status(&self, handle: &str, as_of: u64) -> MStatus {
        for r in &self.records {
            let (time, seq) = r.at();
            if time > as_of {
                continue;
            }
            match r {
                MRecord::Verdict { fx, .. } => {
                    if fx.handle == handle
                        || fx.agreed.iter().any(|h| h == handle)
                        || fx.withdrawn.iter().any(|h| h == handle)
                    {
                        return MStatus::Resolved { seq };
                    }
                }
                MRecord::Expiry { list, .. } => {
                    if list.iter().any(|x| x.handle == handle) {
                        return MStatus::Expired { seq };
                    }
                }
            }
        }
        MStatus::Pending
    }

    /// The claim a request compares against now: the last re-pointing, or the original.
    fn incumbent(&self, r: &MRequest) -> ClaimId {
        let mut out = r.incumbent;
        for rec in &self.records {
            if let MRecord::Verdict { fx, .. } = rec {
                for p in &fx.repointed {
                    if p.handle == r.handle {
                        out = p.incumbent;
                    }
                }
            }
        }
        out
    }

    /// The earliest validity bound verdicts given by `as_of` put on a claim.
    fn bound(&self, id: &ClaimId, as_of: u64) -> Option<u64> {
        let mut out: Option<u64> = None;
        for r in &self.records {
            if let MRecord::Verdict { time, fx, .. } = r
                && *time <= as_of
            {
                for b in &fx.bounds {
                    if b.claim == *id {
                        out = Some(out.map_or(b.until, |o| o.min(b.until)));
                    }
                }
            }
        }
        out
    }

    /// The window a claim counts over at `as_of`: its own (all time without one), cut by
    /// bounds; `None` when a bound leaves nothing of it. (An incoherent window of its own still
    /// counts, as uncertain.)
    fn window(&self, c: &MClaim, as_of: u64) -> Option<ValidTime> {
        let mut w = c.claim.valid.unwrap_or(ValidTime {
            start: 0,
            end: None,
            confidence_pct: 100,
        });
        match self.bound(&c.id, as_of) {
            Some(until) if until <= w.start => None,
            Some(until) => {
                w.end = Some(w.end.map_or(until, |e| e.min(until)));
                Some(w)
            }
            None => Some(w),
        }
    }

    /// Empty or reversed, or starting after the time it was given at.
    fn incoherent(v: &ValidTime, time: u64) -> bool {
        v.end.is_some_and(|e| e <= v.start) || v.start > time
    }

    /// Whether a claim's window can be relied on: none at all, or coherent and confident.
    fn trusted(&self, valid: Option<ValidTime>, time: u64) -> bool {
        valid.is_none_or(|v| !Model::incoherent(&v, time) && v.confidence_pct >= self.min())
    }

    fn counts(c: &MClaim) -> bool {
        c.initial != Disposition::Quarantined && c.claim.provenance != Provenance::RecallReentry
    }

    fn corroborations(&self, id: &ClaimId, as_of: u64) -> u64 {
        self.claims
            .iter()
            .filter(|c| c.corroborates == Some(*id) && c.time <= as_of)
            .count() as u64
    }

    // -- The gate. ----------------------------------------------------------------------------

    fn gate(&self, claim: &Claim, seq: u64, time: u64) -> Result<MClaim, MRefusal> {
        let id = claim.id_at(seq).unwrap();
        if claim.derived_from.iter().any(|d| self.claim(d).is_none()) {
            return Err(MRefusal::UnknownClaim);
        }
        if let Some(first) = self.on_line(&claim.subject, &claim.predicate).next()
            && first.claim.cardinality != claim.cardinality
        {
            return Err(MRefusal::Cardinality);
        }
        let decided = |initial, corroborates| MClaim {
            id,
            claim: claim.clone(),
            seq,
            time,
            initial,
            corroborates,
        };
        if claim.provenance == Provenance::RecallReentry {
            let [src] = claim.derived_from.as_slice() else {
                return Err(MRefusal::Recall);
            };
            let s = self.claim(src).unwrap();
            if (&s.claim.subject, &s.claim.predicate, &s.claim.value)
                != (&claim.subject, &claim.predicate, &claim.value)
            {
                return Err(MRefusal::Recall);
            }
            return Ok(decided(Disposition::Corroborating, Some(*src)));
        }
        if let Some(v) = claim.valid
            && Model::incoherent(&v, time)
            && v.confidence_pct >= self.min()
        {
            return Ok(decided(Disposition::Quarantined, None));
        }
        if claim.provenance == Provenance::ModelDerived {
            return Ok(decided(Disposition::Inferred, None));
        }
        if claim.cardinality == Cardinality::SetValued {
            return Ok(decided(Disposition::Committed, None));
        }
        if self.conflicts(claim, time).is_empty() {
            return Ok(decided(Disposition::Committed, None));
        }
        let disposition = if self.settings.oracle {
            Disposition::QueuedForAdjudication
        } else {
            Disposition::Contested
        };
        Ok(decided(disposition, None))
    }

    /// The live external claims of the line with another value whose window overlaps the
    /// claim's (a missing or untrusted window, on either side, overlaps everything), in
    /// retrieval order.
    fn conflicts<'a>(&'a self, claim: &'a Claim, time: u64) -> Vec<&'a MClaim> {
        let mine = claim.valid.filter(|_| self.trusted(claim.valid, time));
        let mut out: Vec<&MClaim> = self
            .on_line(&claim.subject, &claim.predicate)
            .filter(|e| Model::counts(e) && e.claim.provenance.is_external())
            .filter(|e| e.claim.value != claim.value)
            .filter(|e| match (self.window(e, u64::MAX), mine) {
                (None, _) => false,
                (Some(w), Some(m)) if self.trusted(e.claim.valid, e.time) => share_a_tick(&m, &w),
                _ => true,
            })
            .collect();
        out.sort_by_key(|e| key(e));
        out
    }

    /// The conflicts and the request the gate opens for an accepted claim `c`.
    fn conflicts_of(&self, c: &MClaim) -> (Vec<ClaimId>, Option<MRequest>, Criticality) {
        if !matches!(
            c.initial,
            Disposition::QueuedForAdjudication | Disposition::Contested
        ) {
            return (vec![], None, c.claim.criticality);
        }
        let conflicts = self.conflicts(&c.claim, c.time);
        let incumbent = conflicts
            .iter()
            .find(|e| self.disposition(&e.id, u64::MAX) == Some(Disposition::Committed))
            .unwrap_or(&conflicts[0]);
        let criticality = higher(c.claim.criticality, incumbent.claim.criticality);
        let request = (c.initial == Disposition::QueuedForAdjudication).then(|| MRequest {
            handle: format!("adj-{}", c.seq),
            seq: c.seq,
            time: c.time,
            subject: c.claim.subject.clone(),
            predicate: c.claim.predicate.clone(),
            incumbent: incumbent.id,
            challenger: c.id,
            expires_at: self.settings.expiry_ticks.map(|e| c.time + e),
        });
        (
            conflicts.iter().map(|e| e.id).collect(),
            request,
            criticality,
        )
    }

    // -- Verdicts and sweeps. -----------------------------------------------------------------

    fn adjudicate(
        &self,
        handle: &str,
        verdict: Verdict,
        evidence: Provenance,
    ) -> Result<Effects, AdjudicateError> {
        let Some(r) = self.request(handle) else {
            return Err(AdjudicateError::UnknownHandle {
                handle: handle.into(),
            });
        };
        match self.status(handle, u64::MAX) {
            MStatus::Resolved { seq } => {
                return Err(AdjudicateError::AlreadyResolved {
                    handle: handle.into(),
                    seq,
                    verdict: String::new(),
                    original: Value::Null,
                });
            }
            MStatus::Expired { seq } => {
                return Err(AdjudicateError::Expired {
                    handle: handle.into(),
                    expires_at: r.expires_at.unwrap_or(0),
                    swept_at: Some(seq),
                });
            }
            MStatus::Pending => {}
        }
        if let Some(at) = r.expires_at
            && at <= self.time
        {
            return Err(AdjudicateError::Expired {
                handle: handle.into(),
                expires_at: at,
                swept_at: None,
            });
        }
        if evidence != Provenance::ExternalFirstHand {
            return Err(AdjudicateError::Evidence { given: evidence });
        }
        let (challenger, incumbent) = (r.challenger, self.incumbent(r));
        let mut fx = Effects {
            handle: handle.into(),
            challenger,
            incumbent,
            bounds: vec![],
            dispositions: vec![],
            repointed: vec![],
            agreed: vec![],
            withdrawn: vec![],
        };
        let mut others: Vec<&MRequest> = self
            .requests
            .iter()
            .filter(|o| {
                o.handle != handle && (&o.subject, &o.predicate) == (&r.subject, &r.predicate)
            })
            .filter(|o| self.status(&o.handle, u64::MAX) == MStatus::Pending)
            .collect();
        others.sort_by_key(|o| o.seq);
        let d = |claim, disposition| DispositionEffect { claim, disposition };
        let (ch, inc) = (
            self.claim(&challenger).unwrap(),
            self.claim(&incumbent).unwrap(),
        );
        match verdict {
            Verdict::Affirm => {
                let start = |c: &MClaim| c.claim.valid.map_or(0, |v| v.start);
                let until = if ch.claim.valid.is_some() && start(ch) > start(inc) {
                    start(ch)
                } else {
                    0
                };
                fx.bounds.push(BoundEffect {
                    claim: incumbent,
                    until,
                });
                fx.dispositions.push(d(challenger, Disposition::Committed));
                fx.dispositions.push(d(incumbent, Disposition::Superseded));
                // docs/MEMORY.md: an affirm settles the line where the challenger holds. Every
                // other counting external claim, committed or contested, whose window shares a
                // tick with the challenger's: another value is superseded (bounded like the
                // incumbent), the same value committed if it was contested.
                let mut superseded = vec![incumbent];
                let live_now = |c: &MClaim| {
                    matches!(
                        self.disposition(&c.id, u64::MAX),
                        Some(
                            Disposition::Committed
                                | Disposition::Contested
                                | Disposition::QueuedForAdjudication
                        )
                    )
                };
                let line: Vec<&MClaim> = self
                    .on_line(&r.subject, &r.predicate)
                    .filter(|c| Model::counts(c) && c.claim.provenance.is_external())
                    .collect();
                // Where the affirmed value holds now: its live claims' windows.
                let winners: Vec<(&MClaim, ValidTime)> = line
                    .iter()
                    .filter(|c| {
                        c.id == challenger || (c.claim.value == ch.claim.value && live_now(c))
                    })
                    .filter_map(|c| Some((*c, self.window(c, u64::MAX)?)))
                    .collect();
                let mut others_on_line: Vec<&&MClaim> = line
                    .iter()
                    .filter(|c| c.id != challenger && c.id != incumbent)
                    .collect();
                others_on_line.sort_by_key(|c| c.id);
                for c in others_on_line {
                    let now = self.disposition(&c.id, u64::MAX);
                    if !matches!(now, Some(Disposition::Committed | Disposition::Contested)) {
                        continue;
                    }
                    let Some(mine) = self.window(c, u64::MAX) else {
                        continue;
                    };
                    let met: Vec<&(&MClaim, ValidTime)> = winners
                        .iter()
                        .filter(|(_, w)| share_a_tick(w, &mine))
                        .collect();
                    if met.is_empty() {
                        continue;
                    }
                    if c.claim.value == ch.claim.value {
                        if now == Some(Disposition::Contested) {
                            fx.dispositions.push(d(c.id, Disposition::Committed));
                        }
                        continue;
                    }
                    let until = if met
                        .iter()
                        .all(|(w, _)| w.claim.valid.is_some() && start(w) > start(c))
                    {
                        met.iter().map(|(w, _)| start(w)).min().unwrap_or(0)
                    } else {
                        0
                    };
                    fx.bounds.push(BoundEffect { claim: c.id, until });
                    fx.dispositions.push(d(c.id, Disposition::Superseded));
                    superseded.push(c.id);
                }
                for o in others {
                    if superseded.contains(&o.challenger) {
                        fx.withdrawn.push(o.handle.clone());
                    } else if self.claim(&o.challenger).unwrap().claim.value == ch.claim.value {
                        fx.agreed.push(o.handle.clone());
                    } else if superseded.contains(&self.incumbent(o)) {
                        fx.repointed.push(Repoint {
                            handle: o.handle.clone(),
                            incumbent: challenger,
                        });
                    }
                }
            }
            Verdict::Deny => {
                fx.bounds.push(BoundEffect {
                    claim: challenger,
                    until: 0,
                });
                fx.dispositions.push(d(challenger, Disposition::Superseded));
                // A request never pairs equal values: one whose challenger says what the
                // incumbent says is closed as agreeing instead of re-pointed.
                // Unless a committed claim of another value meets its challenger: then it
                // compares against that one (the first in retrieval order) instead.
                for o in others {
                    if self.incumbent(o) != challenger {
                        continue;
                    }
                    let theirs = self.claim(&o.challenger).unwrap();
                    if theirs.claim.value == inc.claim.value {
                        let mine = self.window(theirs, u64::MAX);
                        let mut against: Vec<&MClaim> = self
                            .on_line(&r.subject, &r.predicate)
                            .filter(|c| Model::counts(c) && c.claim.provenance.is_external())
                            .filter(|c| c.claim.value != theirs.claim.value)
                            .filter(|c| {
                                self.disposition(&c.id, u64::MAX) == Some(Disposition::Committed)
                            })
                            .filter(|c| match (mine, self.window(c, u64::MAX)) {
                                (Some(a), Some(b)) => share_a_tick(&a, &b),
                                _ => false,
                            })
                            .collect();
                        against.sort_by_key(|c| key(c));
                        match against.first() {
                            Some(c) => fx.repointed.push(Repoint {
                                handle: o.handle.clone(),
                                incumbent: c.id,
                            }),
                            None => fx.agreed.push(o.handle.clone()),
                        }
                    } else {
                        fx.repointed.push(Repoint {
                            handle: o.handle.clone(),
                            incumbent,
                        });
                    }
                }
            }
            Verdict::Unknown => {
                fx.dispositions.push(d(challenger, Disposition::Contested));
                fx.dispositions.push(d(incumbent, Disposition::Contested));
            }
        }
        Ok(fx)
    }

    fn sweep(&self) -> Vec<Expired> {
        let mut out: Vec<&MRequest> = self
            .requests
            .iter()
            .filter(|r| self.status(&r.handle, u64::MAX) == MStatus::Pending)
            .filter(|r| r.expires_at.is_some_and(|at| at <= self.time))
            .collect();
        out.sort_by_key(|r| r.seq);
        out.into_iter()
            .map(|r| Expired {
                handle: r.handle.clone(),
                challenger: r.challenger,
                incumbent: self.incumbent(r),
                expires_at: r.expires_at.unwrap(),
                expires_ms: None,
            })
            .collect()
    }

    // -- Beliefs. -----------------------------------------------------------------------------

    fn support(&self, c: &MClaim, as_of: u64) -> Support {
        Support {
            claim: c.id,
            provenance: c.claim.provenance,
            criticality: c.claim.criticality,
            disposition: self.disposition(&c.id, as_of),
            seq: c.seq,
            time: c.time,
            step: format!("step{}", c.seq),
            tool: "memory.assert".into(),
            corroborations: self.corroborations(&c.id, as_of),
        }
    }

    fn alternatives(&self, claims: &[&MClaim], as_of: u64) -> Vec<Alternative> {
        let mut groups: Vec<Vec<&MClaim>> = vec![];
        for c in claims {
            match groups
                .iter_mut()
                .find(|g| g[0].claim.value == c.claim.value)
            {
                Some(g) => g.push(c),
                None => groups.push(vec![c]),
            }
        }
        for g in &mut groups {
            g.sort_by_key(|c| key(c));
        }
        groups.sort_by_key(|g| key(g[0]));
        groups
            .into_iter()
            .map(|g| Alternative {
                value: g[0].claim.value.clone(),
                support: g.iter().map(|c| self.support(c, as_of)).collect(),
            })
            .collect()
    }

    fn belief(&self, q: &Query) -> Belief {
        let as_of = q.as_of.unwrap_or(u64::MAX);
        let t = q.valid_at.or(q.as_of).unwrap_or(self.now);
        let mut candidates = vec![];
        let mut uncertain = vec![];
        for c in self.on_line(&q.subject, &q.predicate) {
            if c.time > as_of || !Model::counts(c) {
                continue;
            }
            let Some(w) = self.window(c, as_of) else {
                continue;
            };
            if !self.trusted(c.claim.valid, c.time) {
                uncertain.push(c);
            } else if inside(&w, t) {
                candidates.push(c);
            }
        }
        let external = candidates
            .iter()
            .chain(&uncertain)
            .any(|c| c.claim.provenance.is_external());
        candidates.retain(|c| c.claim.provenance.is_external() == external);
        uncertain.retain(|c| c.claim.provenance.is_external() == external);
        if uncertain
            .iter()
            .any(|u| candidates.iter().all(|c| c.claim.value != u.claim.value))
        {
            let all: Vec<&MClaim> = candidates.iter().chain(&uncertain).copied().collect();
            return Belief::TimingUncertain {
                alternatives: self.alternatives(&all, as_of),
            };
        }
        let set_valued = self
            .on_line(&q.subject, &q.predicate)
            .next()
            .is_some_and(|c| c.claim.cardinality == Cardinality::SetValued);
        let mut values: Vec<Value> = vec![];
        for c in &candidates {
            if !values.contains(&c.claim.value) {
                values.push(c.claim.value.clone());
            }
        }
        if values.is_empty() {
            return Belief::NoBelief;
        }
        if set_valued || values.len() == 1 {
            values.sort_by_key(canon);
            candidates.sort_by_key(|c| key(c));
            return Belief::Resolved {
                value: if set_valued {
                    Value::Array(values)
                } else {
                    values.remove(0)
                },
                support: candidates.iter().map(|c| self.support(c, as_of)).collect(),
            };
        }
        let mut pending: Vec<&MRequest> = self
            .requests
            .iter()
            .filter(|r| (r.subject.as_str(), r.predicate.as_str()) == (&q.subject, &q.predicate))
            .filter(|r| r.time <= as_of && self.status(&r.handle, as_of) == MStatus::Pending)
            .collect();
        pending.sort_by_key(|r| r.seq);
        Belief::Contested {
            alternatives: self.alternatives(&candidates, as_of),
            pending: pending.into_iter().map(|r| r.handle.clone()).collect(),
        }
    }

    // -- Driving. -----------------------------------------------------------------------------

    fn perform(&mut self, action: &Action) -> MOutcome {
        match action {
            Action::Tick(n) => {
                self.time += n;
                MOutcome::Tick
            }
            Action::Assert(input) => {
                let claim: Claim = serde_json::from_value(input.clone()).unwrap();
                let seq = self.seq + 1;
                let decided = self.gate(&claim, seq, self.time);
                self.event();
                match decided {
                    Err(e) => MOutcome::Refused(e),
                    Ok(c) => {
                        let (conflicts, request, criticality) = self.conflicts_of(&c);
                        let out = MOutcome::Assert {
                            id: c.id,
                            disposition: c.initial,
                            corroborates: c.corroborates,
                            conflicts,
                            request: request.clone().map(|r| (r, criticality)),
                        };
                        self.claims.push(c);
                        self.requests.extend(request);
                        out
                    }
                }
            }
            Action::Verdict {
                handle,
                verdict,
                evidence,
            } => {
                let r = self.adjudicate(handle, *verdict, *evidence);
                if let Ok(fx) = &r {
                    let seq = self.event();
                    self.records.push(MRecord::Verdict {
                        seq,
                        time: self.time,
                        fx: fx.clone(),
                    });
                }
                MOutcome::Verdict(r)
            }
            Action::Sweep => {
                let list = self.sweep();
                if !list.is_empty() {
                    let seq = self.event();
                    self.records.push(MRecord::Expiry {
                        seq,
                        time: self.time,
                        list: list.clone(),
                    });
                }
                MOutcome::Sweep(list)
            }
            // The comparison draws from `op()`, which never reinstates: reinstatement is
            // checked by the invariant over `op_all()` and by the scenarios instead.
            Action::Reinstate { .. } => unreachable!("the reference does not model reinstatement"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MRefusal {
    UnknownClaim,
    Cardinality,
    Recall,
}

#[derive(Debug)]
enum MOutcome {
    Assert {
        id: ClaimId,
        disposition: Disposition,
        corroborates: Option<ClaimId>,
        conflicts: Vec<ClaimId>,
        request: Option<(MRequest, Criticality)>,
    },
    Refused(MRefusal),
    Verdict(Result<Effects, AdjudicateError>),
    Sweep(Vec<Expired>),
    Tick,
}

/// The parts of a refused verdict the reference decides.
fn refusal(e: &AdjudicateError) -> (u8, String, u64, Option<u64>) {
    match e {
        AdjudicateError::UnknownHandle { handle } => (0, handle.clone(), 0, None),
        AdjudicateError::AlreadyResolved { handle, seq, .. } => (1, handle.clone(), *seq, None),
        AdjudicateError::Expired {
            handle,
            expires_at,
            swept_at,
        } => (2, handle.clone(), *expires_at, *swept_at),
        AdjudicateError::Evidence { given } => (3, given.to_string(), 0, None),
        AdjudicateError::UnknownClaim { claim } => (4, claim.clone(), 0, None),
        AdjudicateError::NotReinstatable { claim, .. } => (5, claim.clone(), 0, None),
        AdjudicateError::CannotCarry { claim, .. } => (6, claim.clone(), 0, None),
        AdjudicateError::AmbiguousClaim { prefix, matches } => (7, prefix.clone(), *matches, None),
        AdjudicateError::ClaimPrefix { given, min } => (8, given.clone(), *min, None),
    }
}

fn same_outcome(step: usize, real: &Outcome, model: &MOutcome) -> Result<(), TestCaseError> {
    match (real, model) {
        (Outcome::Tick, MOutcome::Tick) => {}
        (Outcome::Assert(Err(e)), MOutcome::Refused(r)) => {
            let kind = match e {
                oracle_memory::MemoryError::UnknownClaim(_) => MRefusal::UnknownClaim,
                oracle_memory::MemoryError::Cardinality { .. } => MRefusal::Cardinality,
                oracle_memory::MemoryError::Recall(_) => MRefusal::Recall,
                other => return Err(TestCaseError::fail(format!("step {step}: {other}"))),
            };
            prop_assert_eq!(kind, *r, "step {}", step);
        }
        (
            Outcome::Assert(Ok(a)),
            MOutcome::Assert {
                id,
                disposition,
                corroborates,
                conflicts,
                request,
            },
        ) => {
            prop_assert_eq!(&a.id, id, "step {}", step);
            prop_assert_eq!(a.disposition, *disposition, "step {}: {}", step, a.reason);
            prop_assert_eq!(&a.corroborates, corroborates, "step {}", step);
            prop_assert_eq!(&a.conflicts_with, conflicts, "step {}", step);
            let want = request.as_ref().map(|(r, criticality)| Request {
                handle: r.handle.clone(),
                subject: r.subject.clone(),
                predicate: r.predicate.clone(),
                incumbent: r.incumbent,
                challenger: r.challenger,
                criticality: *criticality,
                reason: a
                    .adjudication
                    .as_ref()
                    .map(|x| x.reason.clone())
                    .unwrap_or_default(),
                expires_at: r.expires_at,
                expires_ms: None,
            });
            prop_assert_eq!(&a.adjudication, &want, "step {}", step);
        }
        (Outcome::Verdict(Ok(fx)), MOutcome::Verdict(Ok(want))) => {
            prop_assert_eq!(fx, want, "step {}", step);
        }
        (Outcome::Verdict(Err(e)), MOutcome::Verdict(Err(want))) => {
            prop_assert_eq!(refusal(e), refusal(want), "step {}", step);
        }
        (Outcome::Sweep(list), MOutcome::Sweep(want)) => {
            prop_assert_eq!(list, want, "step {}", step);
        }
        (real, model) => {
            return Err(TestCaseError::fail(format!(
                "step {step}: the memory did {real:?}, the reference {model:?}"
            )));
        }
    }
    Ok(())
}

/// Compares every belief and every disposition of the two after a step.
fn same_state(step: usize, log: &Log, model: &Model) -> Result<(), TestCaseError> {
    let mut lines: Vec<(String, String)> = log.mem.lines().cloned().collect();
    for c in &model.claims {
        lines.push(c.claim.line());
    }
    lines.sort();
    lines.dedup();
    let now = model.time;
    let ticks = [0, now / 2, now.saturating_sub(1), now + 3];
    let min = log.settings.confidence_min_pct;
    for (s, p) in &lines {
        let mut qs = vec![Query::now(s, p)];
        for t in ticks {
            for (as_of, valid_at) in [(Some(t), None), (None, Some(t)), (Some(t), Some(now))] {
                qs.push(Query {
                    subject: s.clone(),
                    predicate: p.clone(),
                    as_of,
                    valid_at,
                });
            }
        }
        for q in qs {
            let real = belief::query(&log.mem, &q, min);
            let want = model.belief(&q);
            prop_assert_eq!(real, want, "step {}: {:?}", step, q);
        }
    }
    prop_assert_eq!(log.mem.len(), model.claims.len() as u64);
    for c in &model.claims {
        for as_of in [u64::MAX, now.saturating_sub(1), now / 2] {
            prop_assert_eq!(
                log.mem.disposition(&c.id, as_of),
                model.disposition(&c.id, as_of),
                "step {}: claim {} as of {}",
                step,
                c.id.short(),
                as_of
            );
        }
        prop_assert_eq!(
            log.mem.corroborations(&c.id, u64::MAX),
            model.corroborations(&c.id, u64::MAX)
        );
    }
    prop_assert_eq!(log.mem.requests().count(), model.requests.len());
    for r in &model.requests {
        let real = log.mem.request_by_handle(&r.handle).unwrap();
        let status = match real.status {
            RequestStatus::Pending => MStatus::Pending,
            RequestStatus::Resolved { seq, .. } => MStatus::Resolved { seq },
            RequestStatus::Expired { seq, .. } => MStatus::Expired { seq },
        };
        prop_assert_eq!(status, model.status(&r.handle, u64::MAX), "step {}", step);
        prop_assert_eq!(real.incumbent(), model.incumbent(r), "step {}", step);
    }
    prop_assert_eq!(log.mem.now(), model.now);
    Ok(())
}

/// docs/MEMORY.md, "Every conflict ends somewhere": at rest, any two live claims of a line
/// (counting, external, committed, contested or queued) with different values whose windows
/// share a tick are either contested by a recorded outcome (one of them is `contested`) or one of them is
/// the challenger of a pending request, whose verdict of any kind ends the pair. Checked on the implementation after every step.
fn every_conflict_ends_somewhere(step: usize, log: &Log) -> Result<(), TestCaseError> {
    use oracle_memory::Memory;
    let mem = &log.mem;
    let tick = |w: &ValidTime| w.end.is_none_or(|e| w.start < e);
    for (subject, predicate) in mem.lines() {
        // A set-valued line holds many values at once: nothing there conflicts.
        if mem.line_cardinality(subject, predicate) == Some(Cardinality::SetValued) {
            continue;
        }
        let live: Vec<_> = mem
            .line_claims(subject, predicate)
            .filter(|e| Memory::counts(e) && e.claim.provenance.is_external())
            .filter_map(|e| {
                let d = mem.disposition(&e.id, u64::MAX)?;
                matches!(
                    d,
                    Disposition::Committed
                        | Disposition::Contested
                        | Disposition::QueuedForAdjudication
                )
                .then_some((e, d, mem.window(e, u64::MAX)?))
            })
            .filter(|(_, _, w)| tick(w))
            .collect();
        let challengers: Vec<ClaimId> = mem
            .pending_on(subject, predicate, u64::MAX)
            .iter()
            .map(|r| r.request.challenger)
            .collect();
        for (x, dx, wx) in &live {
            for (y, dy, wy) in &live {
                // Conflict: another value over windows (as bounded by verdicts) that share a
                // tick. (Whether a window is trusted is a question of timing, not of conflict:
                // an untrusted window makes a belief `timing_uncertain`, a documented answer.)
                if y.claim.value == x.claim.value || !wx.overlaps(wy) {
                    continue;
                }
                // Ended: contested by a recorded outcome (a verdict `unknown`, an expiry, or no
                // oracle), or both sides awaiting a pending request.
                let contested = *dx == Disposition::Contested || *dy == Disposition::Contested;
                // Or one of them awaits a verdict as a pending request's challenger: `affirm`
                // supersedes every live claim it conflicts with, `deny` supersedes it,
                // `unknown` contests it. Either way the pair ends.
                let awaiting = challengers.contains(&x.id) || challengers.contains(&y.id);
                prop_assert!(
                    contested || awaiting,
                    "step {}: {}/{}: claim {} ({}, {:?}) and claim {} ({}, {:?}) conflict, neither is contested and neither awaits a verdict\nline: {:#?}\npending: {:?}",
                    step,
                    subject,
                    predicate,
                    x.id.short(),
                    x.claim.value,
                    dx,
                    y.id.short(),
                    y.claim.value,
                    dy,
                    mem.line_claims(subject, predicate)
                        .map(|e| format!(
                            "{} {} {:?} {:?} t{} initial {:?} {}",
                            e.id.short(),
                            e.claim.value,
                            e.claim.provenance,
                            e.claim.valid,
                            e.origin.time,
                            e.initial,
                            e.reason
                        ))
                        .collect::<Vec<_>>(),
                    mem.pending_on(subject, predicate, u64::MAX)
                        .iter()
                        .map(|r| format!(
                            "{} {} vs {}",
                            r.request.handle,
                            r.request.challenger.short(),
                            r.incumbent().short()
                        ))
                        .collect::<Vec<_>>()
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(480))]

    #[test]
    fn memory_agrees_with_the_reference(
        settings in settings(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut log = Log::new(settings.clone());
        let mut model = Model::new(settings);
        for (step, op) in ops.iter().enumerate() {
            let action = op.concretize(&log);
            let real = log.perform(&action);
            let want = model.perform(&action);
            same_outcome(step, &real, &want)?;
            same_state(step, &log, &model)?;
            every_conflict_ends_somewhere(step, &log)?;
        }
        prop_assert_eq!(log.seq, model.seq);
    }
}

proptest! {
    // The invariant alone, on the implementation, over many more sequences than the
    // reference comparison can afford (issue 15 asks for at least 10,000 per run).
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn every_conflict_ends_somewhere_over_random_sequences(
        settings in settings(),
        ops in prop::collection::vec(op_all(), 1..40),
    ) {
        let mut log = Log::new(settings);
        for (step, op) in ops.iter().enumerate() {
            let action = op.concretize(&log);
            let _ = log.perform(&action);
            every_conflict_ends_somewhere(step, &log)?;
        }
    }
}
