//! Demand traces: which earlier events a recorded run actually needs, and how well a bounded
//! working set of events serves those needs under a policy, against the optimal (Belady) one.
//!
//! Three stages, each a pure function of the previous one:
//!
//! 1. [`Dependencies`] (`deps`): for every event t, the sorted set D(t) of earlier events it
//!    depends on, from the sources in [`Sources`] (causal parents, tool call pairs, state
//!    keys, memory claims, file paths). Read from the recorded payloads, never guessed from text.
//! 2. [`DemandTrace`] (`trace`): for a horizon h, Demand(t) is the sorted union of D(t') for
//!    t' in [t, t + h), restricted to u < t: what the next h events will need from the past.
//!    A sliding window with reference counts: O(n·d·log w) for n events with d dependencies
//!    each (w the largest window), plus the size of the output.
//! 3. [`Evaluator`] (`policy`): a working set of at most B events serves the requests "t, then
//!    every u in Demand(t)" for each t in order; a request for an event not in the set is a
//!    fault. Policies `recent`, `lru`, `causal` and `oracle` (Belady's MIN, optimal for this
//!    model, so the lower bound). O(m log B) per policy and budget for m requests.
//!
//! Besides the built-ins, a policy of the user's own is graded alike through [`Advisor`]
//! (`plugged`: its ABI and the checks on its answers), and every result counts the tokens read
//! in ([`tokens`]: an event's payload as compact JSON, 4 bytes a token, rounded up).
//!
//! [`analyse`] runs all three and returns a [`Report`] for several policies and budgets. Nothing
//! here is a float or a `usize` once it leaves the module: counts are u64, fault rates basis
//! points.
//!
//! docs/FORMAT.md ("Demand analysis") defines exactly what each source reads, Demand(t) and
//! the policies. How they are computed:
//!
//! - The window counts, per event, the references from D(t') for t' in the window; each D(t')
//!   enters and leaves once and emitting walks only the live events below t, so the total is
//!   O(n·d·log w) plus the output, never quadratic in n. A property test checks it against the
//!   naive union.
//! - The oracle precomputes every request's next request in O(m) and keeps the working set in a
//!   `BTreeSet` ordered by next request: O(m log B). Property tests: MIN equals a brute-force
//!   optimum on small traces, never faults more than any policy, never more with a larger
//!   budget; with B ≥ n every policy has only the compulsory faults.
//!
//! Alternatives considered: guessing references from text (paths and ids mentioned in
//! messages) misses dependencies and invents others; a "limited to the horizon" oracle that
//! sees only h events ahead is not optimal and so not a lower bound, while the demand trace
//! already limits what is requested to what the next h events need.

pub mod conversation;
mod deps;
pub mod limits;
pub mod plugged;
mod policy;
mod trace;

use std::fmt;
use std::str::FromStr;

use serde_json::{Value, json};

use oracle_core::event::Event;

pub use deps::{Dependencies, tokens};
pub use plugged::{Advisor, CallFailed, PluggedError};
pub use policy::{Evaluator, Outcome, Policy};
pub use trace::{DemandTrace, Window};

/// One source of dependencies (docs/FORMAT.md, "Demand analysis", lists exactly what each one
/// reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The event's causal `parents`.
    Parents,
    /// A tool outcome and its call, a call or capability verdict and its `step_scheduled`, a
    /// `resumed` and its `suspended`.
    Tools,
    /// A `kv.get` call and the last `state_changed` that wrote or deleted its key.
    State,
    /// A memory tool's answer and the events that recorded the claims it reports.
    Memory,
    /// An `fs.*` call and the first `fs.*` call that touched the same path.
    Paths,
}

impl Source {
    /// Every source, in the order of `--sources parents,tools,state,memory,paths`.
    pub const ALL: [Source; 5] = [
        Source::Parents,
        Source::Tools,
        Source::State,
        Source::Memory,
        Source::Paths,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Source::Parents => "parents",
            Source::Tools => "tools",
            Source::State => "state",
            Source::Memory => "memory",
            Source::Paths => "paths",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Source {
    type Err = DemandError;
    fn from_str(s: &str) -> Result<Source, DemandError> {
        Source::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| DemandError::UnknownSource(s.to_owned()))
    }
}

/// Which sources of dependencies are switched on. [`Sources::default`] is all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sources(u8);

impl Sources {
    pub const ALL: Sources = Sources(0b1_1111);
    pub const NONE: Sources = Sources(0);

    /// Exactly one source.
    pub fn only(source: Source) -> Sources {
        Sources(source.bit())
    }

    pub fn with(self, source: Source) -> Sources {
        Sources(self.0 | source.bit())
    }

    pub fn has(self, source: Source) -> bool {
        self.0 & source.bit() != 0
    }

    /// The sources switched on, in [`Source::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Source> {
        Source::ALL.into_iter().filter(move |s| self.has(*s))
    }

    /// Parses a comma-separated list of source names (`parents,tools,state,memory,paths`).
    /// At least one is required; repeating one is allowed.
    pub fn parse(list: &str) -> Result<Sources, DemandError> {
        let mut out = Sources::NONE;
        for name in list.split(',').map(str::trim) {
            out = out.with(name.parse()?);
        }
        Ok(out)
    }
}

impl Default for Sources {
    fn default() -> Self {
        Sources::ALL
    }
}

impl fmt::Display for Sources {
    /// The canonical list, `parents,tools,state,memory,paths` order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Source::as_str).collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for Sources {
    type Err = DemandError;
    fn from_str(s: &str) -> Result<Sources, DemandError> {
        Sources::parse(s)
    }
}

/// Why an analysis could not run. Every variant names the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DemandError {
    #[error("unknown dependency source `{0}` (known: parents, tools, state, memory, paths)")]
    UnknownSource(String),
    #[error("unknown policy `{0}` (known: recent, lru, causal, oracle)")]
    UnknownPolicy(String),
    #[error("the horizon must be at least 1 event")]
    ZeroHorizon,
    #[error("a budget must be at least 1 event")]
    ZeroBudget,
    #[error("event at position {position} has seq {seq}: events must be numbered from 0 in order")]
    SeqOutOfOrder { position: u64, seq: u64 },
    #[error("event {seq} depends on {dependency}, which is not earlier")]
    NotEarlier { seq: u64, dependency: u64 },
    #[error("the trace covers {trace} events but the dependencies {deps}")]
    Mismatch { trace: u64, deps: u64 },
    #[error(transparent)]
    Plugged(#[from] PluggedError),
}

/// What to analyse: a horizon, the sources, and the (policy, budget) pairs to evaluate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub horizon: u64,
    pub sources: Sources,
    /// Evaluated in this order (duplicates dropped); the oracle is always evaluated too, since
    /// every gap is measured against it, and is appended when missing.
    pub policies: Vec<Policy>,
    /// Evaluated in ascending order (duplicates dropped).
    pub budgets: Vec<u64>,
}

/// One (policy, budget) result with its gap to the oracle at the same budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub outcome: Outcome,
    /// `faults - oracle faults` at the same budget: 0 for the oracle; never negative, since the
    /// oracle is optimal (signed so that a broken invariant shows instead of wrapping).
    pub gap: i64,
}

/// Everything [`analyse`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub events: u64,
    pub horizon: u64,
    pub sources: Sources,
    /// Distinct (t, u) dependency pairs over all sources.
    pub dependencies: u64,
    /// Pairs per source switched on (a pair given by two sources counts for both).
    pub by_source: Vec<(Source, u64)>,
    /// Σ |Demand(t)| and max |Demand(t)|.
    pub demand_total: u64,
    pub demand_max: u64,
    /// Requests per simulation: one arrival per event plus `demand_total`.
    pub requests: u64,
    pub policies: Vec<Policy>,
    /// The names of the plugged policies, by index ([`Policy::Plugged`]).
    pub plugged: Vec<String>,
    pub budgets: Vec<u64>,
    /// Budget-major: for each budget ascending, each policy in `policies` order.
    pub rows: Vec<Row>,
}

impl Report {
    /// A policy's name: a built-in's, or a plugged one's as given.
    pub fn name(&self, policy: Policy) -> &str {
        match policy {
            Policy::Plugged(i) => self
                .plugged
                .get(usize::from(i))
                .map_or("plugged", String::as_str),
            p => p.as_str(),
        }
    }

    /// The report as JSON (the `oracle demand --json` object without `log` and `trace`; see
    /// docs/FORMAT.md).
    pub fn to_value(&self) -> Value {
        let mut deps = serde_json::Map::new();
        deps.insert("total".into(), json!(self.dependencies));
        for (s, n) in &self.by_source {
            deps.insert(s.as_str().into(), json!(n));
        }
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "policy": self.name(r.outcome.policy),
                    "budget": r.outcome.budget,
                    "requests": r.outcome.requests,
                    "faults": r.outcome.faults,
                    "compulsory": r.outcome.compulsory,
                    "tokens": r.outcome.tokens,
                    "fault_rate_bp": r.outcome.fault_rate_bp(),
                    "gap": r.gap,
                })
            })
            .collect();
        json!({
            "events": self.events,
            "horizon": self.horizon,
            "sources": self.sources.iter().map(Source::as_str).collect::<Vec<_>>(),
            "dependencies": deps,
            "demand": {"total": self.demand_total, "max": self.demand_max},
            "requests": self.requests,
            "policies": self.policies.iter().map(|p| self.name(*p)).collect::<Vec<_>>(),
            "budgets": self.budgets,
            "results": rows,
        })
    }

    /// The row of one policy at one budget.
    pub fn row(&self, policy: Policy, budget: u64) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.outcome.policy == policy && r.outcome.budget == budget)
    }
}

/// Dependencies, demand trace and every (policy, budget) of `config`, for a log whose events
/// are numbered from 0 in order (any verified log).
pub fn analyse(events: &[Event], config: &Config) -> Result<Report, DemandError> {
    let deps = Dependencies::extract(events, config.sources)?;
    let trace = DemandTrace::new(&deps, config.horizon)?;
    report(&deps, &trace, config)
}

/// [`analyse`] for dependencies and a trace computed already (the CLI prints the trace too).
pub fn report(
    deps: &Dependencies,
    trace: &DemandTrace,
    config: &Config,
) -> Result<Report, DemandError> {
    report_plugged(deps, trace, config, &mut [])
}

/// [`report`] with plugged policies too, graded after the built-ins of `config` (before the
/// oracle when it is not among them), each called once per budget.
pub fn report_plugged(
    deps: &Dependencies,
    trace: &DemandTrace,
    config: &Config,
    advisors: &mut [&mut dyn Advisor],
) -> Result<Report, DemandError> {
    let limit = limits::PLUGGED_POLICIES_MAX;
    let count = advisors.len() as u64;
    if count > limit {
        return Err(PluggedError::TooMany { count, limit }.into());
    }
    let mut policies: Vec<Policy> = Vec::new();
    for p in &config.policies {
        if !policies.contains(p) && !matches!(p, Policy::Plugged(_)) {
            policies.push(*p);
        }
    }
    // At most PLUGGED_POLICIES_MAX (checked above), so an index fits in u16.
    policies.extend((0..advisors.len()).map(|i| Policy::Plugged(i as u16)));
    if !policies.contains(&Policy::Oracle) {
        policies.push(Policy::Oracle);
    }
    let mut budgets = config.budgets.clone();
    budgets.sort_unstable();
    budgets.dedup();
    if budgets.contains(&0) {
        return Err(DemandError::ZeroBudget);
    }
    let evaluator = Evaluator::new(deps, trace)?;
    let mut rows = Vec::with_capacity(budgets.len() * policies.len());
    for &budget in &budgets {
        let oracle = evaluator.run(Policy::Oracle, budget)?;
        for &policy in &policies {
            let outcome = match policy {
                Policy::Oracle => oracle.clone(),
                Policy::Plugged(i) => {
                    let advisor = &mut *advisors[usize::from(i)];
                    let keep = plugged::advise(advisor, deps, budget)?;
                    evaluator.run_kept(policy, budget, &keep)?
                }
                _ => evaluator.run(policy, budget)?,
            };
            let gap = signed(outcome.faults) - signed(oracle.faults);
            rows.push(Row { outcome, gap });
        }
    }
    Ok(Report {
        events: deps.events(),
        horizon: trace.horizon(),
        sources: deps.sources(),
        dependencies: deps.edges(),
        by_source: deps.by_source(),
        demand_total: trace.total(),
        demand_max: trace.max(),
        requests: evaluator.requests(),
        policies,
        plugged: advisors.iter().map(|a| a.name().to_owned()).collect(),
        budgets,
        rows,
    })
}

/// A fault count as i64 (counts are bounded by the requests of an in-memory trace).
fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A seq as an index into an in-memory slice. Every seq passed here was checked to be below the
/// length of a slice (of events, or of per-event arrays), so it fits in `usize`.
fn ix(seq: u64) -> usize {
    seq as usize
}
