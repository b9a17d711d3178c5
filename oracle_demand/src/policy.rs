//! Working-set policies evaluated against a demand trace, and the oracle that bounds them.
//!
//! The model: a working set holds at most B events. For each event t in order, the requests are
//! t itself (its arrival), then every u in Demand(t) ascending. A request for an event not in
//! the set is a fault, and the event is then inserted, evicting one when the set is full (no
//! policy may decline to keep what was just requested). The first request of every event is its
//! arrival, so every policy has exactly n compulsory faults for n events.
//!
//! Eviction, by policy:
//! - `recent`: the lowest seq (the set keeps the B most recent events requested).
//! - `lru`: the least recently requested.
//! - `causal`: the least recently requested among the events that are not causal ancestors of
//!   the current event t within two levels of the dependency graph, A(t) = D(t) ∪ ⋃ D(v) for v
//!   in D(t); when every event in the set is in A(t), the least recently requested of all. Uses
//!   only what is known at t (its own dependencies), never the demand of later events.
//! - `oracle`: Belady's MIN: the event whose next request is furthest in the future, one never
//!   requested again first, ties (among those) by lowest seq. Optimal for this model, so no
//!   policy faults less at the same budget, and its faults never grow with the budget.
//! - a plugged policy (`crate::plugged`): it names, for every event t, the events to keep
//!   while t's requests are served, K(t) (at most B); the victim is the least recently
//!   requested event outside K(t), or when every resident event is in K(t), the least recently
//!   requested of all. So it is `causal` with K(t) in place of A(t), and K(t) = ∅ is `lru`:
//!   the same fault model as the built-ins, graded against the same oracle.
//!
//! Costs for m requests: next requests are precomputed once per trace in O(m + n); each run is
//! O(m) for `lru`, O(m log B) for `recent` and `oracle`, and for `causal` O(m) plus, per event,
//! O(|A(t)|) to mark its ancestors and skip them when evicting.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use super::{DemandError, DemandTrace, Dependencies, ix};

/// An eviction policy: a built-in one, or the i-th plugged one of an analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Policy {
    Recent,
    Lru,
    Causal,
    Oracle,
    /// The plugged policy at this index of the analysis' advisors (its name is theirs:
    /// [`crate::Report::name`]).
    Plugged(u16),
}

impl Policy {
    /// Every policy, in the order `recent,lru,causal,oracle`.
    pub const ALL: [Policy; 4] = [Policy::Recent, Policy::Lru, Policy::Causal, Policy::Oracle];

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Recent => "recent",
            Policy::Lru => "lru",
            Policy::Causal => "causal",
            Policy::Oracle => "oracle",
            Policy::Plugged(_) => "plugged",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = DemandError;
    fn from_str(s: &str) -> Result<Policy, DemandError> {
        Policy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| DemandError::UnknownPolicy(s.to_owned()))
    }
}

/// What one policy did at one budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub policy: Policy,
    pub budget: u64,
    pub requests: u64,
    pub faults: u64,
    /// Faults on the first request of an event (every event's arrival).
    pub compulsory: u64,
    /// Tokens read in: the size ([`crate::Dependencies::tokens`]) of every event faulted on,
    /// summed (each fault brings its event back into the working set).
    pub tokens: u64,
}

impl Outcome {
    /// Faults per 10,000 requests, rounded half up (0 without requests).
    pub fn fault_rate_bp(&self) -> u64 {
        if self.requests == 0 {
            return 0;
        }
        let r = u128::from(self.requests);
        let bp = (u128::from(self.faults) * 10_000 + r / 2) / r;
        // At most 10,000: faults never exceed requests.
        u64::try_from(bp).unwrap_or(u64::MAX)
    }
}

/// "Never requested again".
const NEVER: usize = usize::MAX;

/// Evaluates policies over one trace; the next-request table (for the oracle) is computed once.
pub struct Evaluator<'a> {
    deps: &'a Dependencies,
    trace: &'a DemandTrace,
    /// For the request at each position, the position of the next request of the same event.
    next: Vec<usize>,
}

impl<'a> Evaluator<'a> {
    pub fn new(
        deps: &'a Dependencies,
        trace: &'a DemandTrace,
    ) -> Result<Evaluator<'a>, DemandError> {
        let n = deps.events();
        if trace.events() != n {
            return Err(DemandError::Mismatch {
                trace: trace.events(),
                deps: n,
            });
        }
        let m = ix(n + trace.total());
        let mut next = vec![NEVER; m];
        let mut last = vec![NEVER; ix(n)];
        let mut p = m;
        // Backwards over the request sequence: each group is t, then Demand(t) ascending.
        for t in (0..n).rev() {
            for &u in trace.of(t).iter().rev() {
                p -= 1;
                next[p] = last[ix(u)];
                last[ix(u)] = p;
            }
            p -= 1;
            next[p] = last[ix(t)];
            last[ix(t)] = p;
        }
        Ok(Evaluator { deps, trace, next })
    }

    /// Requests per run: one arrival per event plus Σ |Demand(t)|.
    pub fn requests(&self) -> u64 {
        self.next.len() as u64
    }

    /// Runs `policy` with a working set of `budget` ≥ 1 events.
    pub fn run(&self, policy: Policy, budget: u64) -> Result<Outcome, DemandError> {
        if budget == 0 {
            return Err(DemandError::ZeroBudget);
        }
        let n = ix(self.deps.events());
        // A budget of n or more never evicts; capping keeps it a valid in-memory size.
        let cap = ix(budget.min(self.deps.events()));
        let (faults, compulsory, tokens) = match policy {
            Policy::Recent => self.drive(&mut Recent::new(cap)),
            Policy::Lru => self.drive(&mut Lru::new(cap, n)),
            Policy::Causal => self.drive(&mut Causal::new(cap, n, self.deps)),
            Policy::Oracle => self.drive(&mut Min::new(cap, n, &self.next)),
            // A plugged policy is driven by its choices: `run_kept`. Without them, none.
            Policy::Plugged(_) => self.drive(&mut Kept::new(cap, n, &[])),
        };
        Ok(Outcome {
            policy,
            budget,
            requests: self.requests(),
            faults,
            compulsory,
            tokens,
        })
    }

    /// Runs a plugged policy whose choices are `keep`: K(t) for each event t (lists missing at
    /// the end are empty). Each K(t) must hold only events before t, at most `budget` of them
    /// (`crate::plugged` checks a policy's answer before it gets here; an event past t is
    /// ignored).
    pub fn run_kept(
        &self,
        policy: Policy,
        budget: u64,
        keep: &[Vec<u64>],
    ) -> Result<Outcome, DemandError> {
        if budget == 0 {
            return Err(DemandError::ZeroBudget);
        }
        let n = ix(self.deps.events());
        let cap = ix(budget.min(self.deps.events()));
        let (faults, compulsory, tokens) = self.drive(&mut Kept::new(cap, n, keep));
        Ok(Outcome {
            policy,
            budget,
            requests: self.requests(),
            faults,
            compulsory,
            tokens,
        })
    }

    /// Feeds the request sequence to `cache`: (faults, compulsory faults, tokens read in).
    fn drive<C: Cache>(&self, cache: &mut C) -> (u64, u64, u64) {
        let mut seen = vec![false; ix(self.deps.events())];
        let (mut faults, mut compulsory, mut tokens) = (0u64, 0u64, 0u64);
        let mut p = 0usize;
        let deps = self.deps;
        let mut request = |cache: &mut C, x: u64, p: usize| {
            if cache.request(x, p) {
                faults += 1;
                tokens += deps.tokens(x);
                let s = &mut seen[ix(x)];
                if !*s {
                    *s = true;
                    compulsory += 1;
                }
            }
        };
        for t in 0..self.deps.events() {
            cache.begin(t);
            request(cache, t, p);
            p += 1;
            for &u in self.trace.of(t) {
                request(cache, u, p);
                p += 1;
            }
        }
        (faults, compulsory, tokens)
    }
}

/// A working set under one policy.
trait Cache {
    /// The requests of event `t` start.
    fn begin(&mut self, _t: u64) {}
    /// A request for `x` at position `p` of the sequence: true on a fault (then `x` is in the
    /// set afterwards).
    fn request(&mut self, x: u64, p: usize) -> bool;
}

struct Recent {
    cap: usize,
    set: BTreeSet<u64>,
}

impl Recent {
    fn new(cap: usize) -> Recent {
        Recent {
            cap,
            set: BTreeSet::new(),
        }
    }
}

impl Cache for Recent {
    fn request(&mut self, x: u64, _p: usize) -> bool {
        if self.set.contains(&x) {
            return false;
        }
        if self.set.len() == self.cap {
            self.set.pop_first();
        }
        self.set.insert(x);
        true
    }
}

/// Resident events in recency order: an intrusive doubly linked list over seqs, so moving an
/// event to the most recent end is O(1).
struct Recency {
    prev: Vec<usize>,
    next: Vec<usize>,
    resident: Vec<bool>,
    /// Least recently requested, or `NEVER` when empty.
    oldest: usize,
    newest: usize,
    len: usize,
}

impl Recency {
    fn new(n: usize) -> Recency {
        Recency {
            prev: vec![NEVER; n],
            next: vec![NEVER; n],
            resident: vec![false; n],
            oldest: NEVER,
            newest: NEVER,
            len: 0,
        }
    }

    fn unlink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        if p == NEVER {
            self.oldest = n;
        } else {
            self.next[p] = n;
        }
        if n == NEVER {
            self.newest = p;
        } else {
            self.prev[n] = p;
        }
        self.resident[x] = false;
        self.len -= 1;
    }

    fn push_newest(&mut self, x: usize) {
        self.prev[x] = self.newest;
        self.next[x] = NEVER;
        if self.newest == NEVER {
            self.oldest = x;
        } else {
            self.next[self.newest] = x;
        }
        self.newest = x;
        self.resident[x] = true;
        self.len += 1;
    }

    /// A request under recency: a hit moves `x` to the newest end; a miss evicts
    /// `victim(self)` when full, then inserts `x`. True on a miss.
    fn touch(&mut self, x: usize, cap: usize, victim: impl FnOnce(&Recency) -> usize) -> bool {
        if self.resident[x] {
            self.unlink(x);
            self.push_newest(x);
            return false;
        }
        if self.len == cap {
            let v = victim(self);
            self.unlink(v);
        }
        self.push_newest(x);
        true
    }
}

struct Lru {
    cap: usize,
    list: Recency,
}

impl Lru {
    fn new(cap: usize, n: usize) -> Lru {
        Lru {
            cap,
            list: Recency::new(n),
        }
    }
}

impl Cache for Lru {
    fn request(&mut self, x: u64, _p: usize) -> bool {
        self.list.touch(ix(x), self.cap, |l| l.oldest)
    }
}

struct Causal<'a> {
    cap: usize,
    list: Recency,
    deps: &'a Dependencies,
    /// `mark[u] == epoch` when u is an ancestor (within two levels) of the current event.
    mark: Vec<u64>,
    epoch: u64,
}

impl<'a> Causal<'a> {
    fn new(cap: usize, n: usize, deps: &'a Dependencies) -> Causal<'a> {
        Causal {
            cap,
            list: Recency::new(n),
            deps,
            mark: vec![0; n],
            epoch: 0,
        }
    }
}

impl Cache for Causal<'_> {
    fn begin(&mut self, t: u64) {
        // Epochs start at 1, so a fresh `mark` of zeros marks nothing.
        self.epoch = t + 1;
        for &v in self.deps.of(t) {
            self.mark[ix(v)] = self.epoch;
            for &w in self.deps.of(v) {
                self.mark[ix(w)] = self.epoch;
            }
        }
    }

    fn request(&mut self, x: u64, _p: usize) -> bool {
        let (mark, epoch) = (&self.mark, self.epoch);
        // Skips at most |A(t)| events: each skipped one is a distinct marked ancestor.
        self.list
            .touch(ix(x), self.cap, |l| oldest_unmarked(l, mark, epoch))
    }
}

/// The least recently requested event not marked with `epoch`, or when every one is, the least
/// recently requested of all.
fn oldest_unmarked(l: &Recency, mark: &[u64], epoch: u64) -> usize {
    let mut v = l.oldest;
    while v != NEVER && mark[v] == epoch {
        v = l.next[v];
    }
    if v == NEVER { l.oldest } else { v }
}

/// A plugged policy's choices: K(t) marked at each event, evicting like `causal`.
struct Kept<'a> {
    cap: usize,
    list: Recency,
    keep: &'a [Vec<u64>],
    mark: Vec<u64>,
    epoch: u64,
}

impl<'a> Kept<'a> {
    fn new(cap: usize, n: usize, keep: &'a [Vec<u64>]) -> Kept<'a> {
        Kept {
            cap,
            list: Recency::new(n),
            keep,
            mark: vec![0; n],
            epoch: 0,
        }
    }
}

impl Cache for Kept<'_> {
    fn begin(&mut self, t: u64) {
        self.epoch = t + 1;
        for &v in self.keep.get(ix(t)).map_or(&[][..], Vec::as_slice) {
            if v < t {
                self.mark[ix(v)] = self.epoch;
            }
        }
    }

    fn request(&mut self, x: u64, _p: usize) -> bool {
        let (mark, epoch) = (&self.mark, self.epoch);
        self.list
            .touch(ix(x), self.cap, |l| oldest_unmarked(l, mark, epoch))
    }
}

/// Belady's MIN over the precomputed next requests.
struct Min<'a> {
    cap: usize,
    next: &'a [usize],
    /// Resident events by (next request, Reverse(seq)): the last entry is the victim.
    set: BTreeSet<(usize, Reverse<u64>)>,
    /// The next request each resident event is filed under in `set`.
    key: Vec<usize>,
    resident: Vec<bool>,
}

impl<'a> Min<'a> {
    fn new(cap: usize, n: usize, next: &'a [usize]) -> Min<'a> {
        Min {
            cap,
            next,
            set: BTreeSet::new(),
            key: vec![NEVER; n],
            resident: vec![false; n],
        }
    }
}

impl Cache for Min<'_> {
    fn request(&mut self, x: u64, p: usize) -> bool {
        let i = ix(x);
        let upcoming = self.next[p];
        let fault = !self.resident[i];
        if fault {
            if self.set.len() == self.cap
                && let Some((_, Reverse(v))) = self.set.pop_last()
            {
                self.resident[ix(v)] = false;
            }
            self.resident[i] = true;
        } else {
            self.set.remove(&(self.key[i], Reverse(x)));
        }
        self.key[i] = upcoming;
        self.set.insert((upcoming, Reverse(x)));
        fault
    }
}
