//! The host's bounds on child runs (`spawn` steps, `crate::children`), each with why it is
//! what it is.

/// Deepest a chain of child runs may nest (a run, its child, the child's child, ...): a plan
/// may spawn itself, and each level is a run with its own log and drive on the same stack of
/// host calls, so the chain must end. Eight levels is deeper than any tree of work we have seen
/// described, and keeps the recursion of one host call small.
pub const CHILD_DEPTH_MAX: u32 = 8;

/// Most `spawn` calls one run may make (every attempt counts): each is a run directory and a
/// log, so a loop of retries cannot fill the home. Past it the step fails, recorded.
pub const CHILDREN_PER_RUN_MAX: u64 = 1_000;

/// Most run directories of a home looked at to find a run's children (a cancel's cascade,
/// `oracle runs --tree`): each costs an index open and a first-event read, as
/// `oracle_runtime::family::FAMILY_RUNS_MAX` bounds the same scan for forks.
pub const HOME_RUNS_SCANNED_MAX: usize = 10_000;
