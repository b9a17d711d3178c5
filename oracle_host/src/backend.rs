//! One entry for a server over either kind of home: a file home, or a PostgreSQL store served
//! through its mirror ([`StoreFront`]). A front end holds one [`Backend`] and calls it; which
//! kind it is is decided here, once per call, so no handler branches on it.
//!
//! So far: schedules (list, add, pause or resume, remove, trigger), cancel, and what only a file
//! home does ([`FileHomeOnly`]); the other writes of a server over a store (answer, verdict,
//! claim, resume, start) still go through [`Backend::front`] (issue 54, item 4).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oracle_runtime::engine::Cancel;
use oracle_runtime::session::Cancelled;
use oracle_runtime::writer::Durability;

use crate::error::HostError;
use crate::home::Home;
use crate::runid::ValidRun;
use crate::schedule::{Cursor, NewSchedule, Schedule};
use crate::schedule_store as stored;
use crate::store_front::{Queued, StoreFront};

/// Where a scratch home for a store's schedule triggers is made, under the front's scratch
/// root (a trigger is checked as a file home's run is, then queued).
const SCHEDULE_SCRATCH_DIR: &str = "schedules";

/// The runs a server serves: a file home (absolute), or a store's front.
#[derive(Clone)]
pub enum Backend {
    Home(PathBuf),
    Store(Arc<StoreFront>),
}

/// A run started outside its schedule's ticks: its id, whether it was already started under
/// the same key, and its status now (`running` on a file home, `submitted` to a store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Triggered {
    pub run: String,
    pub existing: bool,
    pub status: &'static str,
}

/// What a cancel did: recorded now or requested of the process that holds the run (a file
/// home), or queued for the store's workers.
#[derive(Clone, Debug)]
pub enum CancelOutcome {
    Now(Cancelled),
    Queued(Queued),
}

/// What only a file home does; over a store each is refused as `not_allowed`, saying why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileHomeOnly {
    /// Checking, approving and rejecting proposals: a store has no evolution ledger yet.
    Evolve,
    /// A fork would be written into the mirror, which only the store's rows write.
    Fork,
    /// Named belief stores live under `<home>/memory`.
    NamedStores,
}

impl FileHomeOnly {
    /// Why a store refuses it (the `message` of the `not_allowed` error).
    fn refusal(self) -> &'static str {
        match self {
            FileHomeOnly::Evolve => {
                "a store (`oracle serve --store`) has no evolution ledger yet: check, approve and reject on a file home"
            }
            FileHomeOnly::Fork => {
                "forking a run of a store (`oracle serve --store`) is not supported yet (`oracle fork` forks a file home's runs)"
            }
            FileHomeOnly::NamedStores => {
                "named belief stores live on a file home (`oracle serve` without --store)"
            }
        }
    }
}

impl Backend {
    /// Whether `what` is done here: `Ok` on a file home, `not_allowed` over a store.
    pub fn file_home_only(&self, what: FileHomeOnly) -> Result<(), HostError> {
        match self {
            Backend::Home(_) => Ok(()),
            Backend::Store(_) => Err(HostError::NotAllowed {
                what: what.refusal().into(),
            }),
        }
    }

    /// Cancels `run`: recorded (or requested of its holder) in a file home, queued for a
    /// store's workers after the mirror says it can be.
    pub fn cancel(&self, run: &ValidRun, cancel: Cancel) -> Result<CancelOutcome, HostError> {
        match self {
            Backend::Store(front) => Ok(CancelOutcome::Queued(front.cancel(&run.id, cancel)?)),
            Backend::Home(dir) => {
                let home = Home::open(dir)?.in_recorded_roots();
                let done = home.cancel(&run.arg(), cancel, Durability::DEFAULT)?;
                Ok(CancelOutcome::Now(done))
            }
        }
    }

    /// The store's front, when this serves a store (for what has no neutral call yet).
    pub fn front(&self) -> Option<&Arc<StoreFront>> {
        match self {
            Backend::Store(front) => Some(front),
            Backend::Home(_) => None,
        }
    }

    fn home(home: &Path) -> Result<Home, HostError> {
        Home::open(home)
    }

    /// Every schedule, with its cursor.
    pub fn schedules(&self) -> Result<Vec<(Schedule, Cursor)>, HostError> {
        match self {
            Backend::Store(front) => front.with_store(stored::list),
            Backend::Home(dir) => {
                let h = Backend::home(dir)?;
                Ok(h.schedules()?
                    .into_iter()
                    .map(|s| {
                        let c = h.schedule_cursor(&s.name);
                        (s, c)
                    })
                    .collect())
            }
        }
    }

    /// Adds schedule `new` at `now_ms`.
    pub fn schedule_add(&self, new: NewSchedule, now_ms: u64) -> Result<Schedule, HostError> {
        match self {
            Backend::Store(front) => front.with_store(|st| stored::add(st, new, now_ms)),
            Backend::Home(dir) => Backend::home(dir)?.schedule_add(new, now_ms),
        }
    }

    /// Pauses (`true`) or resumes schedule `name`.
    pub fn schedule_pause(
        &self,
        name: &str,
        paused: bool,
        now_ms: u64,
    ) -> Result<Schedule, HostError> {
        match self {
            Backend::Store(front) => front.with_store(|st| stored::pause(st, name, paused, now_ms)),
            Backend::Home(dir) => Backend::home(dir)?.schedule_pause(name, paused, now_ms),
        }
    }

    /// Removes schedule `name` (its runs stay).
    pub fn schedule_remove(&self, name: &str) -> Result<Schedule, HostError> {
        match self {
            Backend::Store(front) => front.with_store(|st| stored::remove(st, name)),
            Backend::Home(dir) => Backend::home(dir)?.schedule_remove(name),
        }
    }

    /// Starts a run of `name` now, outside its ticks: in the background on a file home, queued
    /// for the workers over a store.
    pub fn schedule_trigger(&self, name: &str, now_ms: u64) -> Result<Triggered, HostError> {
        let ((run, existing), status) = match self {
            Backend::Store(front) => {
                let scratch = front.scratch_root().join(SCHEDULE_SCRATCH_DIR);
                // A scratch root that cannot be made fails the check below, with its path.
                let _ = std::fs::create_dir_all(&scratch);
                let queued = front.with_store(|st| stored::trigger(st, &scratch, name, now_ms))?;
                (queued, "submitted")
            }
            Backend::Home(dir) => (
                Backend::home(dir)?.schedule_launch(name, now_ms)?,
                "running",
            ),
        };
        Ok(Triggered {
            run,
            existing,
            status,
        })
    }
}
