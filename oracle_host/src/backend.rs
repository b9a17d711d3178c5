//! One entry for a server over either kind of home: a file home, or a PostgreSQL store served
//! through its mirror ([`StoreFront`]). A front end holds one [`Backend`] and calls it; which
//! kind it is is decided here, once per call, so no handler branches on it.
//!
//! Schedules (list, add, pause or resume, remove, trigger), cancel, what only a file home does
//! ([`FileHomeOnly`]), and the signals: answer, verdict, claim, resume and start. On a file
//! home a signal that asks for a resume reserves its place among the server's background
//! drives ([`Background`]) before it is recorded; over a store it is checked and queued for the
//! workers, who drive the run on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use oracle_runtime::engine::Cancel;
use oracle_runtime::session::Cancelled;
use oracle_runtime::writer::Durability;

use oracle_runtime::adjudication::{OutsideClaim, Submission};
use oracle_runtime::session::Answered;
use serde_json::Value;

use crate::background::{Background, log_outcome};
use crate::bind::Given;
use crate::code::{AgentRequest, Agents};
use crate::error::HostError;
use crate::home::{Home, Start};
use crate::request::RunRequest;
use crate::runid::ValidRun;
use crate::schedule::{Cursor, NewSchedule, Schedule};
use crate::schedule_store as stored;
pub use crate::store_front::Queued;
use crate::store_front::{StoreFront, StoreStart, status_of};

/// Where a scratch home for a store's schedule triggers is made, under the front's scratch
/// root (a trigger is checked as a file home's run is, then queued).
const SCHEDULE_SCRATCH_DIR: &str = "schedules";

/// How long a store's mirror waits for the store to say something changed before it looks
/// anyway.
pub const MIRROR_POLL_MS: u64 = 1_000;
/// The wait after a failed look at the store before the mirror tries it again.
const MIRROR_RETRY_MS: u64 = 1_000;

/// A loop a server runs on a thread of its own for its life (until its stop flag is set).
pub type Loop = Box<dyn FnOnce() + Send + 'static>;

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

/// What a signal into a run did: recorded now (then, when asked, a resume started in the
/// background), or checked in a copy of the run and queued for a store's workers (`checked`:
/// what the check made of it, what the worker records unless the run moved on meanwhile).
#[derive(Clone, Debug)]
pub enum Signalled<T> {
    Recorded {
        done: T,
        resumed: bool,
    },
    Queued {
        queued: Queued,
        checked: Option<Value>,
    },
}

/// What a resume asked for did: started in the background here, or queued for the workers.
#[derive(Clone, Debug)]
pub enum ResumeOutcome {
    Started,
    Queued(Queued),
}

/// A run started through a server: new (`status` `running` on a file home, `submitted` to a
/// store, with its plan's warnings), or the run its idempotency key started already (`existing`,
/// its status now).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    pub run: String,
    pub status: String,
    pub existing: bool,
    pub key: Option<String>,
    pub warnings: Vec<String>,
}

/// Where a server's announcements are taken before delivery and marked delivered after: on a
/// file home nowhere (this server delivers each); over a store in the store, so however many
/// servers serve one store, each item is delivered by one of them.
#[derive(Clone)]
pub struct Announcements(Option<Arc<StoreFront>>);

impl Announcements {
    /// Whether this server delivers announcement `id` (of `run`): `false` when another server
    /// delivered it or holds it.
    pub fn take(&self, id: &str, run: &str) -> Result<bool, HostError> {
        match &self.0 {
            Some(front) => front.take_announcement(id, run),
            None => Ok(true),
        }
    }

    /// Records that `id` was delivered, for every server.
    pub fn delivered(&self, id: &str) -> Result<(), HostError> {
        match &self.0 {
            Some(front) => front.announcement_delivered(id),
            None => Ok(()),
        }
    }
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

    /// The file home's host handle: resumed runs work in the directory each one recorded
    /// (sealed in its run.json), as a server drives runs started elsewhere.
    fn recorded(dir: &Path) -> Result<Home, HostError> {
        Ok(Home::open(dir)?.in_recorded_roots())
    }

    /// Records `answer` for the step `run` waits on, by `by`; on a file home, then resumes it in
    /// `bg` when `resume` asks (over a store the workers drive it on anyway).
    pub fn answer(
        &self,
        bg: &Background,
        run: &ValidRun,
        answer: (String, Value),
        by: &str,
        resume: bool,
    ) -> Result<Signalled<Answered>, HostError> {
        match self {
            Backend::Store(front) => Ok(Signalled::Queued {
                queued: front.answer(&run.id, answer, Some(by.to_owned()))?,
                checked: None,
            }),
            Backend::Home(dir) => {
                let home = Backend::recorded(dir)?;
                let place = bg.reserve(&home, run, resume)?;
                let done =
                    home.answer(&run.arg(), answer, Some(by.to_owned()), Durability::DEFAULT)?;
                let resumed = place.map(|p| bg.resume(&home, run, by, p)).transpose()?;
                Ok(Signalled::Recorded {
                    done,
                    resumed: resumed.is_some(),
                })
            }
        }
    }

    /// Sends outside event `name` with `value` to `run` (`by` asked for it): on a file home
    /// kept beside the run ([`Home::keep_event`]) and, when the run waits on it, delivered by
    /// a resume in `bg`; over a store checked and queued for the workers, who do the same.
    pub fn send_event(
        &self,
        bg: &Background,
        run: &ValidRun,
        (name, value): (&str, &Value),
        by: &str,
    ) -> Result<Signalled<u64>, HostError> {
        match self {
            Backend::Store(front) => Ok(Signalled::Queued {
                queued: front.send_event(&run.id, name, value)?,
                checked: None,
            }),
            Backend::Home(dir) => {
                let home = Backend::recorded(dir)?;
                let place = bg.reserve(&home, run, true)?;
                let sent = home.keep_event(&run.arg(), name, value)?;
                // A resume follows every kept event, not only one the run waits on now: a drive
                // running while the event was kept may end waiting on it. The resume waits for
                // any such drive to let go, then delivers what is kept for the step the run
                // waits on, or is refused (`needs_answer`) and changes nothing.
                if let Some(p) = place {
                    bg.resume(&home, run, by, p)?;
                }
                Ok(Signalled::Recorded {
                    done: sent.n,
                    resumed: sent.waiting,
                })
            }
        }
    }

    /// Gives verdict `sub` on one of `run`'s pending adjudications (`by` is `sub.by`'s name),
    /// then, on a file home, resumes it when asked. Recorded: the applied verdict's JSON.
    pub fn adjudicate(
        &self,
        bg: &Background,
        run: &ValidRun,
        sub: &Submission,
        by: &str,
        resume: bool,
    ) -> Result<Signalled<Value>, HostError> {
        self.outside_signal(
            (bg, run, by, resume),
            |front| front.adjudicate(&run.id, sub),
            |home| {
                Ok(home
                    .adjudicate(&run.arg(), sub, Durability::DEFAULT)?
                    .to_json())
            },
        )
    }

    /// Records `claim` from outside the plan in `run`, then, on a file home, resumes it when
    /// asked. Recorded: the recorded claim's JSON.
    pub fn claim(
        &self,
        bg: &Background,
        run: &ValidRun,
        claim: &OutsideClaim,
        by: &str,
        resume: bool,
    ) -> Result<Signalled<Value>, HostError> {
        self.outside_signal(
            (bg, run, by, resume),
            |front| front.claim(&run.id, claim),
            |home| {
                Ok(home
                    .claim(&run.arg(), claim, Durability::DEFAULT)?
                    .to_json())
            },
        )
    }

    /// The shape verdicts and claims share: over a store, checked and queued (`queue`); on a
    /// file home, recorded at once (`record`, its result's JSON) with a resume after it when
    /// asked, whose place is taken (and its checks made) before anything is recorded.
    fn outside_signal(
        &self,
        (bg, run, by, resume): (&Background, &ValidRun, &str, bool),
        queue: impl FnOnce(&StoreFront) -> Result<(Queued, Value), HostError>,
        record: impl FnOnce(&Home) -> Result<Value, HostError>,
    ) -> Result<Signalled<Value>, HostError> {
        match self {
            Backend::Store(front) => {
                let (queued, checked) = queue(front)?;
                Ok(Signalled::Queued {
                    queued,
                    checked: Some(checked),
                })
            }
            Backend::Home(dir) => {
                let home = Backend::recorded(dir)?;
                let place = bg.reserve(&home, run, resume)?;
                let done = record(&home)?;
                let resumed = place.map(|p| bg.resume(&home, run, by, p)).transpose()?;
                Ok(Signalled::Recorded {
                    done,
                    resumed: resumed.is_some(),
                })
            }
        }
    }

    /// Resumes `run`, asked by `by`: in `bg` on a file home, queued for a store's workers.
    pub fn resume(
        &self,
        bg: &Background,
        run: &ValidRun,
        by: &str,
    ) -> Result<ResumeOutcome, HostError> {
        match self {
            Backend::Store(front) => Ok(ResumeOutcome::Queued(front.resume(&run.id)?)),
            Backend::Home(dir) => {
                bg.resume(&Backend::recorded(dir)?, run, by, bg.take()?)?;
                Ok(ResumeOutcome::Started)
            }
        }
    }

    /// Starts the run `request` asks for, asked by `by`, on a server whose `--root` is `root`:
    /// in `bg` on a file home (one line goes to its log when the drive ends), submitted for a
    /// store's workers.
    pub fn start(
        &self,
        bg: &Background,
        request: RunRequest,
        (root, given): (Option<&Path>, &Given),
        by: &str,
    ) -> Result<Started, HostError> {
        let key = request.key.clone();
        let started =
            |run: String, status: &str, existing: bool, key: Option<String>, warnings| Started {
                run,
                status: status.to_owned(),
                existing,
                key,
                warnings,
            };
        let dir = match self {
            Backend::Store(front) => {
                let status = match request.queue {
                    Some(_) => crate::queue::QUEUED,
                    None => "submitted",
                };
                return Ok(match front.submit(request, root, given)? {
                    StoreStart::New { id, warnings } => started(id, status, false, key, warnings),
                    StoreStart::Existing { id, state } => {
                        started(id, status_of(&state), true, key, Vec::new())
                    }
                });
            }
            Backend::Home(dir) => dir,
        };
        // Admitted before a place among the drives is taken (the launch admits it again,
        // cheaply); the place is taken before anything is created, and a key that finds its
        // run gives it back at once.
        request.admit(root)?;
        if let Some(ask) = request.queue.clone() {
            let home = Backend::recorded(dir)?;
            return Ok(match home.enqueue_request(request, root, given, &ask)? {
                Start::New(p) => {
                    let now = home.queue_dispatch(bg)?.contains(&p.id);
                    let status = if now { "running" } else { crate::queue::QUEUED };
                    started(p.id, status, false, p.submission.key, p.warnings)
                }
                Start::Existing(e) => started(e.id, &e.status, true, Some(e.key), Vec::new()),
            });
        }
        let place = bg.take()?;
        let (log, who) = (bg.log().to_owned(), by.to_owned());
        let ended = move |id: &str, outcome: Result<crate::Session, HostError>| {
            log_outcome(&log, &format!("start {id} (asked by {who})"), outcome);
            drop(place);
        };
        Ok(
            match Backend::recorded(dir)?.launch_request(request, root, given, ended)? {
                Start::New(p) => started(p.id, "running", false, p.submission.key, p.warnings),
                Start::Existing(e) => started(e.id, &e.status, true, Some(e.key), Vec::new()),
            },
        )
    }

    /// Starts the code agent `request` names among the server's `agents`, asked by `by`, on a
    /// server whose `--root` is `root`: on a file home in `bg` ([`Home::launch_agent`]); over a
    /// store submitted for the workers told about the agent (`StoreFront::submit_agent`).
    pub fn start_agent(
        &self,
        bg: &Background,
        request: &AgentRequest,
        agents: &Agents,
        (root, given): (Option<&Path>, &Given),
        by: &str,
    ) -> Result<Started, HostError> {
        let dir = match self {
            Backend::Store(front) => {
                let root = root.ok_or(HostError::StartsOff)?;
                return Ok(Started {
                    run: front.submit_agent(request, agents, root, given)?,
                    status: "submitted".to_owned(),
                    existing: false,
                    key: None,
                    warnings: Vec::new(),
                });
            }
            Backend::Home(dir) => dir,
        };
        // An unknown name takes no place among the drives.
        agents.entry(&request.agent)?;
        let place = bg.take()?;
        let (log, who) = (bg.log().to_owned(), by.to_owned());
        let ended = move |id: &str, outcome: Result<crate::Session, HostError>| {
            log_outcome(&log, &format!("start {id} (asked by {who})"), outcome);
            drop(place);
        };
        let run = Backend::recorded(dir)?.launch_agent(request, agents, (root, given), ended)?;
        Ok(Started {
            run,
            status: "running".to_owned(),
            existing: false,
            key: None,
            warnings: Vec::new(),
        })
    }

    /// Brings a store's mirror up to date before the server first reads it (a file home has
    /// nothing to catch up).
    pub fn catch_up(&self) -> Result<(), HostError> {
        match self {
            Backend::Store(front) => front.sync().map(|_| ()),
            Backend::Home(_) => Ok(()),
        }
    }

    /// Where this server's announcements are taken and marked delivered.
    pub fn announcements(&self) -> Announcements {
        match self {
            Backend::Store(front) => Announcements(Some(front.clone())),
            Backend::Home(_) => Announcements(None),
        }
    }

    /// The loops a server runs beside its requests until `stop`, each for a thread of its own:
    /// over a store, one keeping the mirror up to date (calling `changed` when it copied
    /// something) and one firing the store's schedules as every worker does (each tick a line
    /// in `log`); on a file home, the server's own `wheel` (its timers and schedule ticks). Over
    /// a store the workers drive runs, and the mirror is never written: no wheel there.
    pub fn background_loops(
        &self,
        stop: &Arc<AtomicBool>,
        log: &Path,
        changed: impl Fn() + Send + 'static,
        wheel: impl FnOnce() + Send + 'static,
    ) -> Vec<Loop> {
        let front = match self {
            Backend::Home(_) => return vec![Box::new(wheel) as Loop],
            Backend::Store(front) => front,
        };
        let (mirror, mirror_stop) = (front.clone(), stop.clone());
        let (fire, fire_stop, log) = (front.clone(), stop.clone(), log.to_owned());
        vec![
            Box::new(move || keep_mirrored(&mirror, &mirror_stop, &changed)) as Loop,
            Box::new(move || {
                let scratch = fire.scratch_root().join(SCHEDULE_SCRATCH_DIR);
                // A scratch root that cannot be made fails each tick's check, with its path.
                let _ = std::fs::create_dir_all(&scratch);
                let stopped = || fire_stop.load(Ordering::Relaxed);
                let log = |line: &str| crate::background::append_log(&log, line);
                stored::fire_loop(fire.url(), &scratch, false, &stopped, &log);
            }),
        ]
    }
}

/// Keeps the mirror of a store up to date until `stop`: waits for the store to say something
/// changed (or [`MIRROR_POLL_MS`] passes), copies what did, and calls `changed`. A store that
/// cannot be reached is said once per outage on stderr and tried again; the mirror serves what
/// it holds meanwhile.
fn keep_mirrored(front: &StoreFront, stop: &AtomicBool, changed: &dyn Fn()) {
    let mut failing = false;
    while !stop.load(Ordering::Relaxed) {
        match front.wait(MIRROR_POLL_MS).and_then(|()| front.sync()) {
            Ok(copied) => {
                if failing {
                    eprintln!("oracle serve: the store answers again");
                }
                failing = false;
                if copied > 0 {
                    changed();
                }
            }
            Err(e) => {
                if !failing {
                    eprintln!("warning: oracle serve: mirroring the store: {e} (trying again)");
                }
                failing = true;
                std::thread::sleep(std::time::Duration::from_millis(MIRROR_RETRY_MS));
            }
        }
    }
}
