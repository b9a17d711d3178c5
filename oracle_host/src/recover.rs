//! Recovery of a file home after a crash (`oracle serve --recover`): every run a dead process
//! left behind is driven on, as a store's worker takes over a run whose lease expired. A run is
//! left behind when its log says it can go on (not finished, not suspended) and no process
//! holds its writer lock (it is `interrupted`), or when it was prepared for a background start
//! that never wrote its first event (`submitted`).
//!
//! What is absent, by design: no run is driven twice at once (the writer lock refuses a second
//! writer, so a run another process is driving is skipped, not taken); nothing is guessed (a
//! recovered run resumes through [`Home::resume`], checked against its record like any other).

use oracle_runtime::session::{self, Session};

use crate::error::HostError;
use crate::home::{Home, Resume};

/// Most runs one recovery looks at: a home with more left behind is recovered in part, the
/// rest on the next start (each recovery is one drive at a time, so this bounds its length).
pub const RECOVER_RUNS_MAX: usize = 10_000;

/// Why a run is taken up by a recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeftBehind {
    /// Its log can go on and no process holds its lock.
    Interrupted,
    /// Prepared for a background start that never wrote its first event.
    Submitted,
}

impl LeftBehind {
    pub fn as_str(self) -> &'static str {
        match self {
            LeftBehind::Interrupted => "interrupted",
            LeftBehind::Submitted => "submitted",
        }
    }
}

impl Home {
    /// The runs of this home a dead process left behind, in `oracle runs` order.
    pub fn left_behind(&self) -> Result<Vec<(String, LeftBehind)>, HostError> {
        let runs = session::list(self.dir())?;
        // A run waiting in a queue is not left behind: its turn starts it.
        let queued = crate::queue::places(self.dir());
        Ok(runs
            .into_iter()
            .filter(|r| !queued.contains_key(&r.id))
            .filter_map(|r| match (r.status.as_str(), r.live) {
                ("running", Some(false)) if r.events > 0 => Some((r.id, LeftBehind::Interrupted)),
                ("submitted", _) => Some((r.id, LeftBehind::Submitted)),
                _ => None,
            })
            .take(RECOVER_RUNS_MAX)
            .collect())
    }

    /// Drives one run [`Home::left_behind`] named on, until it finishes or suspends.
    pub fn recover(&self, run: &str, why: LeftBehind) -> Result<Session, HostError> {
        match why {
            LeftBehind::Interrupted => self.resume(run, Resume::default()).map(|r| r.session),
            LeftBehind::Submitted => self.start_submitted(run),
        }
    }
}
