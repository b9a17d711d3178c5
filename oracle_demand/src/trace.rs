//! The demand trace: Demand(t) = ⋃ D(t') for t' in [t, t + h) ∩ [0, n), restricted to u < t.
//!
//! A sliding window: every event in the window holds one reference to each of its
//! dependencies; a dependency is live while some event in the window references it. Moving
//! from t to t + 1 drops the references of t and adds those of t + h, so each D(t') enters and
//! leaves the window once: O(n·d·log w) to maintain (w the most live dependencies at once), and
//! emitting Demand(t) walks the live set only up to t, so the total is that plus the output.
//! Buffers are allocated once (the reference counts, one per event) and reused.

use std::collections::BTreeSet;

use super::{DemandError, Dependencies, ix};

/// A streaming window over the demand of a log: [`Window::advance`] yields Demand(t) for
/// t = 0, 1, … in a buffer it reuses.
pub struct Window<'d> {
    deps: &'d Dependencies,
    horizon: u64,
    /// The next t to emit.
    t: u64,
    /// References to each event from the events in the window.
    refs: Vec<u64>,
    /// Events with at least one reference.
    live: BTreeSet<u64>,
    out: Vec<u64>,
}

impl<'d> Window<'d> {
    pub fn new(deps: &'d Dependencies, horizon: u64) -> Result<Window<'d>, DemandError> {
        if horizon == 0 {
            return Err(DemandError::ZeroHorizon);
        }
        let n = deps.events();
        let mut w = Window {
            deps,
            horizon,
            t: 0,
            refs: vec![0; ix(n)],
            live: BTreeSet::new(),
            out: Vec::new(),
        };
        for t in 0..horizon.min(n) {
            w.enter(t);
        }
        Ok(w)
    }

    fn enter(&mut self, t: u64) {
        for &u in self.deps.of(t) {
            let r = &mut self.refs[ix(u)];
            *r += 1;
            if *r == 1 {
                self.live.insert(u);
            }
        }
    }

    fn leave(&mut self, t: u64) {
        for &u in self.deps.of(t) {
            let r = &mut self.refs[ix(u)];
            *r -= 1;
            if *r == 0 {
                self.live.remove(&u);
            }
        }
    }

    /// Demand(t) for the next t, or `None` after the last event. The slice is valid until the
    /// next call.
    pub fn advance(&mut self) -> Option<(u64, &[u64])> {
        let t = self.t;
        if t >= self.deps.events() {
            return None;
        }
        self.out.clear();
        self.out.extend(self.live.range(..t));
        // Slide: t leaves the window [t, t + h), t + h enters.
        self.leave(t);
        if let Some(next) = t.checked_add(self.horizon)
            && next < self.deps.events()
        {
            self.enter(next);
        }
        self.t = t + 1;
        Some((t, &self.out))
    }
}

/// Demand(t) for every event, in compressed rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemandTrace {
    horizon: u64,
    /// Row t is `items[starts[t]..starts[t + 1]]`.
    starts: Vec<usize>,
    items: Vec<u64>,
    max: u64,
}

impl DemandTrace {
    /// The whole trace for horizon `horizon` ≥ 1.
    pub fn new(deps: &Dependencies, horizon: u64) -> Result<DemandTrace, DemandError> {
        let mut w = Window::new(deps, horizon)?;
        let n = ix(deps.events());
        let mut starts = Vec::with_capacity(n + 1);
        starts.push(0);
        let mut items = Vec::with_capacity(ix(deps.edges()));
        let mut max = 0;
        while let Some((_, demand)) = w.advance() {
            items.extend_from_slice(demand);
            starts.push(items.len());
            max = max.max(demand.len() as u64);
        }
        Ok(DemandTrace {
            horizon,
            starts,
            items,
            max,
        })
    }

    pub fn horizon(&self) -> u64 {
        self.horizon
    }

    /// Number of events.
    pub fn events(&self) -> u64 {
        (self.starts.len() - 1) as u64
    }

    /// Demand(seq), sorted; empty past the end.
    pub fn of(&self, seq: u64) -> &[u64] {
        if seq >= self.events() {
            return &[];
        }
        let t = ix(seq);
        &self.items[self.starts[t]..self.starts[t + 1]]
    }

    /// Σ |Demand(t)|.
    pub fn total(&self) -> u64 {
        self.items.len() as u64
    }

    /// max |Demand(t)|.
    pub fn max(&self) -> u64 {
        self.max
    }
}
