//! [`Home`]: the explicit handle every host call takes (the home's directory, its sealing key,
//! where resumed runs work, and a worker's tool directories), and the calls that drive a stored
//! run through it: [`Home::resume`] and [`Home::answer`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use oracle_runtime::bindings::Bindings;
use oracle_runtime::declared::McpMode;
use oracle_runtime::engine::Cancel;
use oracle_runtime::engine::Progress;
use oracle_runtime::replica::Shared;
use oracle_runtime::seal::SealKey;
use oracle_runtime::session::{
    self, Answered, Cancelled, Drive, Prepared, RunDir, Session, SessionError, StartOptions,
    Workdir,
};
use oracle_runtime::shared::{FileStores, StoreBackend};
use oracle_runtime::tool::Registry;
use oracle_runtime::writer::{Durability, Writing};
use serde_json::Value;

use crate::bind::{Bound, Given, ToolChange, check_pins};
use crate::error::HostError;

/// A home: where runs live, the key that seals what beside their logs steers a resume, and how
/// this caller drives them. Cheap to clone; holds no run state.
#[derive(Clone)]
pub struct Home {
    dir: PathBuf,
    /// Read on first use ([`Home::key`]).
    key: Arc<OnceLock<SealKey>>,
    workdir: Workdir,
    /// Tool directories that replace every run's (a worker's `--tools`).
    tools: Vec<PathBuf>,
    /// Where the commits of every writer a call opens go besides the log (a store's worker).
    replica: Option<Shared>,
    /// Where the named stores are kept when not in this home's directory (a store's worker, a
    /// command over a database store): `oracle_runtime::shared::StoreBackend`.
    stores: Option<Arc<dyn StoreBackend>>,
    /// Told what a call did on its own that its caller should pass on (a front end prints it).
    notes: Option<Notes>,
    /// The program that scores auctions in a drive whose call names none (a store's worker:
    /// the one its run was submitted with, or the worker's own).
    scorer_cmd: Option<PathBuf>,
    /// Appended events between two resume points in every drive, whatever the call says (a
    /// worker's `--snapshot-every`).
    points_every: Option<u64>,
    /// Runs of a proposed plan need its approval in the ledger (`[evolution]
    /// require_approval`; the ledger's policy entries can also require it).
    pub(crate) require_approval: bool,
    /// Rates every drive through this home keeps, under those a drive is given (a server's
    /// or worker's `--model-rate`, `--model-tokens`, `--tool-rate`).
    rates: crate::rate::Rates,
    /// Where the windows of those rates are kept when not under the home (a store's rows).
    rate_windows: Option<Arc<dyn crate::pace::Windows>>,
    /// Where children of runs driven here go when not started here (a store's worker).
    children: Option<Arc<dyn crate::children::ChildStore>>,
}

/// Something a host call did on its own, for its caller to pass on to whoever drives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// A torn final record (a write cut short) was moved aside before an append.
    MovedTornTail { len: u64, saved_to: PathBuf },
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::MovedTornTail { len, saved_to } => write!(
                f,
                "a torn final record ({len} bytes, from a write cut short) was moved to {}",
                saved_to.display()
            ),
        }
    }
}

/// Where a home's [`Note`]s go.
pub type Notes = Arc<dyn Fn(&Note) + Send + Sync>;

impl std::fmt::Debug for Home {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Home")
            .field("dir", &self.dir)
            .field("workdir", &self.workdir)
            .field("tools", &self.tools)
            .field("replica", &self.replica.is_some())
            .finish_non_exhaustive()
    }
}

/// How long [`Home::cancel`] waits for a drive in another process to record the cancel it was
/// asked for: it looks between rounds every `oracle_runtime::cancel::POLL_MS`, so only a round
/// running longer than this (a slow tool, a model call) outlasts the wait, and the cancel is
/// still recorded when that round ends.
pub const CANCEL_WAIT_MS: u64 = 10_000;

/// How long [`Home::launch`] waits for a run it started in the background to write its first
/// event, so the caller can read the run at once: binding its tools (an MCP server starting)
/// is what takes long; past this the caller is answered anyway and the run appears later.
pub const LAUNCH_WAIT_MS: u64 = 5_000;

/// How often [`Home::cancel`] looks at the run while it waits.
const CANCEL_LOOK_MS: u64 = 50;

/// Waits for the drive that was asked to cancel the run in `dir` to record it.
fn wait_cancelled(id: String, dir: PathBuf) -> Result<Cancelled, HostError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(CANCEL_WAIT_MS);
    while std::time::Instant::now() < deadline {
        let info = session::run_info(&dir);
        match info.status.as_str() {
            "cancelled" => {
                let log = oracle_runtime::paths::LogPaths::of_run(&dir).log;
                let seq = info.events.saturating_sub(1);
                let head = oracle_runtime::index::IndexedLog::open(&log)
                    .and_then(|mut l| l.read(seq))
                    .map(|e| e.hash)
                    .map_err(|e| HostError::Session(SessionError::from(e)))?;
                return Ok(Cancelled::Recorded {
                    id,
                    dir,
                    seq,
                    head,
                    repaired: None,
                });
            }
            "completed" | "failed" => {
                return Err(HostError::Session(SessionError::CannotCancel {
                    run: id,
                    status: info.status,
                }));
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(CANCEL_LOOK_MS)),
        }
    }
    Ok(Cancelled::Requested { id, dir })
}

/// What a start did: started (or prepared) a new run, or found the run its idempotency key
/// started already.
#[derive(Debug)]
pub enum Start<T> {
    New(T),
    Existing(Existing),
}

/// The run an idempotency key started, found by a second start with the same plan, inputs and
/// seed: nothing was created or run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Existing {
    pub id: String,
    pub dir: PathBuf,
    pub key: String,
    /// Its status now, as `oracle runs` shows it.
    pub status: String,
}

/// What a resume is given beyond the run.
pub struct Resume<'p> {
    /// The output of the step a suspended run waits on (`--step S --value V`).
    pub answer: Option<(String, Value)>,
    /// Bindings given again.
    pub given: Given,
    /// Jobs, durability, scorer and resume points (the working directory is the home's).
    pub drive: Drive,
    pub tool_change: ToolChange,
    /// Told after every round.
    pub progress: Option<&'p mut dyn FnMut(&Progress)>,
    /// A new plan to go on under (`oracle resume --plan`), checked first
    /// ([`Home::upgrade`]).
    pub upgrade: Option<Upgrade>,
}

/// A plan upgrade asked of a run in flight.
#[derive(Clone, Debug)]
pub struct Upgrade {
    /// The new plan's file.
    pub plan: PathBuf,
    /// Who upgrades it (recorded in `plan_upgraded`).
    pub by: Option<String>,
}

impl Default for Resume<'_> {
    fn default() -> Self {
        Resume {
            answer: None,
            given: Given::default(),
            drive: Drive::default(),
            tool_change: ToolChange::Refuse,
            progress: None,
            upgrade: None,
        }
    }
}

/// What [`Home::send_event`] did: kept the event as number `n` of `run`, and, when the run
/// waited on it, the resume that delivered it.
pub struct EventSent {
    pub run: String,
    pub n: u64,
    pub resumed: Option<Session>,
}

/// A resume's outcome, and what the caller should be told.
pub struct Resumed {
    pub session: Session,
    /// A declared tool that changed, gone on with under [`ToolChange::Allow`].
    pub tool_changed: Option<String>,
}

/// The home directory a front end works in: `flag` (`--home DIR`) when given, else
/// `$ORACLE_HOME` when set and not empty, else `.oracle` in the current directory. Only named
/// here: nothing is created until a command writes.
pub fn home_dir(flag: Option<&Path>) -> PathBuf {
    oracle_runtime::paths::resolve_home(
        flag,
        std::env::var_os(oracle_runtime::paths::HOME_ENV).as_deref(),
    )
}

/// The scorer of a new run's auctions that runs `program` (`oracle run --scorer-cmd`), with
/// the default timeout; `None` without one.
pub fn command_scorer(program: Option<&Path>) -> Option<Arc<dyn oracle_runtime::scorer::Scorer>> {
    use oracle_runtime::scorer::{CommandScorer, SCORER_TIMEOUT_MS_DEFAULT};
    program.map(|program| {
        Arc::new(CommandScorer {
            program: program.to_path_buf(),
            timeout_ms: SCORER_TIMEOUT_MS_DEFAULT,
        }) as Arc<dyn oracle_runtime::scorer::Scorer>
    })
}

impl Home {
    /// The home at `dir`. Nothing is read or created until a call needs it: the home and its
    /// sealing key are made by the first call that writes a run (a refused plan leaves no
    /// home behind). Resumed runs work in the caller's directory ([`Workdir::Here`]).
    pub fn open(dir: &Path) -> Result<Home, HostError> {
        Ok(Home {
            dir: dir.to_path_buf(),
            key: Arc::new(OnceLock::new()),
            workdir: Workdir::Here,
            tools: Vec::new(),
            replica: None,
            stores: None,
            notes: None,
            scorer_cmd: None,
            points_every: None,
            require_approval: false,
            rates: crate::rate::Rates::default(),
            rate_windows: None,
            children: None,
        })
    }

    /// The children of runs driven through this home are submitted to `children` (a store's
    /// worker) instead of started here ([`crate::children::ChildStore`]).
    pub fn with_children(mut self, children: Option<Arc<dyn crate::children::ChildStore>>) -> Home {
        self.children = children;
        self
    }

    /// Where the children of runs driven through this home go, when not started here.
    pub(crate) fn child_store(&self) -> Option<&Arc<dyn crate::children::ChildStore>> {
        self.children.as_ref()
    }

    /// Whether every writer a call through this home opens commits elsewhere too (a store's
    /// worker): such a home starts no run of its own.
    pub(crate) fn replicated(&self) -> bool {
        self.replica.is_some()
    }

    /// Runs and upgrades through this home refuse a proposed plan nobody approved, whatever
    /// the ledger's policy says (`[evolution] require_approval = true`; docs/EVOLUTION.md).
    pub fn with_require_approval(mut self, require: bool) -> Home {
        self.require_approval = require;
        self
    }

    /// Drives through this home whose call names no scorer score auctions with `program`.
    pub fn with_scorer(mut self, program: Option<PathBuf>) -> Home {
        self.scorer_cmd = program;
        self
    }

    /// Every drive through this home writes a resume point after every `every` appended
    /// events (see `resume_point::Policy`), whatever its call says; `None`: as the call says.
    pub fn with_points_every(mut self, every: Option<u64>) -> Home {
        self.points_every = every;
        self
    }

    /// The scorer a drive through this home uses when its call names none.
    pub(crate) fn default_scorer(&self) -> Option<Arc<dyn oracle_runtime::scorer::Scorer>> {
        self.scorer_cmd.as_ref().map(|program| {
            Arc::new(oracle_runtime::scorer::CommandScorer {
                program: program.clone(),
                timeout_ms: oracle_runtime::scorer::SCORER_TIMEOUT_MS_DEFAULT,
            }) as Arc<dyn oracle_runtime::scorer::Scorer>
        })
    }

    /// The resume point policy of a drive through this home whose call asked for `policy`.
    pub(crate) fn points(
        &self,
        policy: oracle_runtime::resume_point::Policy,
    ) -> oracle_runtime::resume_point::Policy {
        oracle_runtime::resume_point::Policy {
            every_events: self.points_every.unwrap_or(policy.every_events),
            ..policy
        }
    }

    /// Every writer a call through this home opens commits to `replica` too (a store's worker,
    /// whose scratch home holds one run).
    pub fn with_replica(mut self, replica: Option<Shared>) -> Home {
        self.replica = replica;
        self
    }

    /// The named stores of calls through this home are kept by `stores` (a database's), not in
    /// the home's directory.
    pub fn with_stores(mut self, stores: Option<Arc<dyn StoreBackend>>) -> Home {
        self.stores = stores;
        self
    }

    /// Where the named stores of calls through this home are kept.
    pub fn shared_stores(&self) -> Arc<dyn StoreBackend> {
        match &self.stores {
            Some(s) => s.clone(),
            None => Arc::new(FileStores::new(&self.dir)),
        }
    }

    /// The home tells `notes` what its calls did on their own (a torn tail moved aside).
    pub fn with_notes(mut self, notes: Notes) -> Home {
        self.notes = Some(notes);
        self
    }

    pub(crate) fn note(&self, note: Note) {
        if let Some(n) = &self.notes {
            n(&note);
        }
    }

    /// How the writers of a call through this home write, at `durability`.
    pub fn writing(&self, durability: Durability) -> Writing {
        Writing {
            durability,
            replica: self.replica.clone(),
            stores: self.stores.clone(),
        }
    }

    /// Resumed runs work in the directory each one recorded, sealed in its `run.json`
    /// (`oracle serve` and a store's worker, which drive runs started elsewhere).
    pub fn in_recorded_roots(mut self) -> Home {
        self.workdir = Workdir::Recorded;
        self
    }

    /// Every drive through this home keeps `rates` (under those it is given), their windows
    /// kept by `windows` (a store's), else under the home.
    pub fn with_rates(
        mut self,
        rates: crate::rate::Rates,
        windows: Option<Arc<dyn crate::pace::Windows>>,
    ) -> Home {
        self.rates = rates;
        self.rate_windows = windows;
        self
    }

    /// Paces `registry`'s calls by the rates `bound` was given over this home's.
    pub(crate) fn pace(&self, bound: &Bound, registry: &mut Registry) {
        let rates = bound.rates.over(&self.rates);
        if let Some(p) = crate::pace::pacer(&self.dir, self.rate_windows.as_ref(), &rates) {
            registry.set_pacer(p);
        }
    }

    /// Every run's declared tools come from `dirs` instead of the directories it keeps (a
    /// worker's `--tools`).
    pub fn with_tools(mut self, dirs: Vec<PathBuf>) -> Home {
        self.tools = dirs;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The home's sealing key, read (or made, the first time) when first needed.
    pub fn key(&self) -> Result<SealKey, HostError> {
        if let Some(k) = self.key.get() {
            return Ok(*k);
        }
        let k = SealKey::open_or_create(&self.dir)?;
        // Another thread may have set it meanwhile: both read the same file.
        Ok(*self.key.get_or_init(|| k))
    }

    /// Finds a run by id (under `<home>/runs`), directory or log file.
    pub fn find(&self, run: &str) -> Result<RunDir, HostError> {
        Ok(session::find(&self.dir, run)?)
    }

    /// What a drive of `run` is bound to: the bindings the home's key vouches for, with
    /// `given` (and this home's tool directories) over them. `strict`: see
    /// [`Given::for_stored_run`].
    pub fn bindings(&self, run: &RunDir, given: &Given, strict: bool) -> Result<Bound, HostError> {
        let (sealed, unsealed) = Bindings::read(&run.dir).sealed(Some(&self.key()?));
        let mut given = given.clone();
        if given.tools.is_empty() {
            given.tools = self.tools.clone();
        }
        given.for_stored_run(run, sealed, unsealed, strict)
    }

    /// The registry a drive of `run` calls, bound as [`Home::bindings`] says, its declared
    /// tools checked against the run's pins.
    pub(crate) fn registry(
        &self,
        run: &RunDir,
        given: &Given,
        strict: bool,
        mcp: McpMode<'_>,
        change: ToolChange,
    ) -> Result<(Registry, Option<String>), HostError> {
        let bound = self.bindings(run, given, strict)?;
        let (mut registry, _) = bound.registry(mcp)?;
        self.pace(&bound, &mut registry);
        let changed = check_pins(run, &mut registry, change)?;
        Ok((registry, changed))
    }

    /// The directory a resume of `run` would work in, or why it may not be resumed here (an
    /// unsealed root, under [`Home::in_recorded_roots`]; another directory than the one
    /// recorded, otherwise).
    pub fn workdir(&self, run: &RunDir) -> Result<PathBuf, HostError> {
        Ok(session::resume_root(run, self.workdir, Some(&self.key()?))?)
    }

    /// Everything a resume of `run` checks before it runs (its bindings and its working
    /// directory), so a caller can refuse before it records anything else (the server checks
    /// this before recording an answer it was asked to resume after).
    pub fn check_resumable(&self, run: &RunDir) -> Result<(), HostError> {
        self.bindings(run, &Given::default(), true)?;
        self.workdir(run)?;
        Ok(())
    }

    /// Resumes `run`: an interrupted one goes on, a suspended one with `r.answer`. The one
    /// resume path of the command line, the server and the worker. A run waiting on its child
    /// (a `spawn` step) takes no answer from outside: it is resumed without one, and gets the
    /// child's outcome when the child has ended ([`Home::settle`]).
    pub fn resume(&self, run: &str, r: Resume<'_>) -> Result<Resumed, HostError> {
        if let Some((step, _)) = &r.answer {
            self.refuse_child_answer(run, step)?;
        }
        let resumed = self.drive_resume(run, r)?;
        Ok(Resumed {
            session: self.settle(resumed.session, true)?,
            tool_changed: resumed.tool_changed,
        })
    }

    /// Refuses an answer given from outside to a `spawn` step (only its child's outcome
    /// answers it), before anything is recorded.
    fn refuse_child_answer(&self, run: &str, step: &str) -> Result<(), HostError> {
        let found = self.find(run)?;
        match crate::children::spawn_wait(&found.id, &found.dir)? {
            Some(w) if w.step == step => Err(HostError::Session(session::refused_answer(
                &found.id,
                oracle_runtime::answer::AnswerError::Refused {
                    step: step.to_owned(),
                    reason: "the step waits on its child run, whose outcome alone answers it"
                        .to_owned(),
                },
            ))),
            _ => Ok(()),
        }
    }

    /// [`Home::resume`] without the checks and the settling of child runs around it.
    pub(crate) fn drive_resume(&self, run: &str, r: Resume<'_>) -> Result<Resumed, HostError> {
        let found = self.find(run)?;
        let (registry, tool_changed) =
            self.registry(&found, &r.given, true, McpMode::Start, r.tool_change)?;
        if let Some(up) = &r.upgrade {
            // A resume that would be refused (a run waiting on a question given no answer, a
            // wrong step) is refused before the upgrade is recorded: nothing is written.
            session::check_resume(&found, r.answer.as_ref(), r.drive.wake.is_some())?;
            self.upgrade(&found, up, &registry)?;
        }
        let mut drive = Drive {
            workdir: self.workdir,
            replica: self.replica.clone(),
            stores: self.stores.clone(),
            ..r.drive
        };
        if drive.scorer.is_none() {
            drive.scorer = self.default_scorer();
        }
        drive.points.policy = self.points(drive.points.policy);
        let mut nothing = |_: &Progress| {};
        let progress = match r.progress {
            Some(p) => p,
            None => &mut nothing,
        };
        let session =
            session::resume_observed(&self.dir, run, r.answer, &drive, &registry, progress)?;
        self.note_timer(&session);
        Ok(Resumed {
            session,
            tool_changed,
        })
    }

    /// The registry of a drive that records one outside event and runs nothing past it (an
    /// answer, a cancel): MCP servers are not started (their answers come from the log), and
    /// bindings the home's key does not vouch for are not needed.
    fn quiet_registry(&self, run: &str) -> Result<Registry, HostError> {
        let found = self.find(run)?;
        let (registry, _) = self.registry(
            &found,
            &Given::default(),
            false,
            McpMode::Recorded(&found.dir),
            ToolChange::Refuse,
        )?;
        Ok(registry)
    }

    /// Records the answer for the step `run` waits on, by `by`, and drives nothing further
    /// (`session::answer`). Secrets the run names are read from this process's environment
    /// where set, so an answer holding one is refused; MCP servers are not started (their
    /// answers come from the log).
    pub fn answer(
        &self,
        run: &str,
        answer: (String, Value),
        by: Option<String>,
        durability: Durability,
    ) -> Result<Answered, HostError> {
        self.refuse_child_answer(run, &answer.0)?;
        let registry = self.quiet_registry(run)?;
        Ok(session::answer(
            &self.dir, run, answer, by, durability, &registry,
        )?)
    }

    /// Keeps outside event `name` with `value` for `run` (`oracle signal`, `POST
    /// /api/v1/runs/ID/events/NAME`, a store's `event` signal): checked against every
    /// `wait.event` step of the run's plan that waits on the name, refused with nothing kept
    /// when none does (`event_unknown`) or the value does not fit (`bad_event`), else kept
    /// beside the run under its writer lock (`oracle_runtime::events`). Nothing is driven:
    /// when `waiting` says the run waits on the name now, a resume delivers it.
    pub fn keep_event(
        &self,
        run: &str,
        name: &str,
        value: &Value,
    ) -> Result<oracle_runtime::events::Sent, HostError> {
        Ok(oracle_runtime::events::send(&self.dir, run, name, value)?)
    }

    /// [`Home::keep_event`], then, when the run waits on the event's name, a resume that
    /// records it as the step's answer and drives the run on (to its next wait, or its end).
    pub fn send_event(&self, run: &str, name: &str, value: &Value) -> Result<EventSent, HostError> {
        let sent = self.keep_event(run, name, value)?;
        // A drive that took the run's writer lock since the event was kept delivers it: this
        // resume is refused (`locked`), and the event is kept all the same.
        let resumed = match sent
            .waiting
            .then(|| self.resume(&sent.id, Resume::default()))
        {
            Some(Ok(r)) => Some(r.session),
            Some(Err(e)) if e.code() != "locked" => return Err(e),
            _ => None,
        };
        Ok(EventSent {
            run: sent.id,
            n: sent.n,
            resumed,
        })
    }

    /// Cancels `run` (`oracle cancel`, `POST /api/v1/runs/ID/cancel`): recorded at once when
    /// nothing drives it (`session::cancel`); when another process drives it, that drive is
    /// asked to stop at its next decision boundary and this call waits up to
    /// [`CANCEL_WAIT_MS`] for the cancel to be recorded. A finished run is refused.
    pub fn cancel(
        &self,
        run: &str,
        cancel: Cancel,
        durability: Durability,
    ) -> Result<Cancelled, HostError> {
        let cancelled = self.cancel_one(run, cancel, durability)?;
        // Its children, and theirs: each cancel recorded in the child's own log.
        self.cancel_children(run, durability, 0)?;
        // A child cancelled on its own is its parent's step's failure.
        if let Cancelled::Recorded { dir, .. } = &cancelled {
            self.deliver_up(dir)?;
        }
        Ok(cancelled)
    }

    /// [`Home::cancel`] of `run` alone.
    pub(crate) fn cancel_one(
        &self,
        run: &str,
        cancel: Cancel,
        durability: Durability,
    ) -> Result<Cancelled, HostError> {
        let registry = self.quiet_registry(run)?;
        match session::cancel(&self.dir, run, cancel, self.writing(durability), &registry)? {
            Cancelled::Requested { id, dir } => wait_cancelled(id, dir),
            recorded => Ok(recorded),
        }
    }

    /// Binds a new run's options as `given` says (declared tools from `tool_dirs`): its models,
    /// secrets and tool directories go into `opts` (and so, sealed, into its `run.json`), and
    /// the registry its drive calls is returned.
    fn bind_new(
        &self,
        opts: &mut StartOptions,
        given: &Given,
        tool_dirs: Vec<PathBuf>,
    ) -> Result<Registry, HostError> {
        let bound = given.for_new_run(tool_dirs)?;
        let (mut registry, kept) = bound.registry(McpMode::Start)?;
        self.pace(&bound, &mut registry);
        opts.home = self.dir.clone();
        opts.models = bound.models;
        opts.secret_vars = bound.secret_vars;
        opts.tools = bound.tools;
        opts.tool_files = kept;
        Ok(registry)
    }

    /// Starts a run (`oracle run`): binds it, creates its directory and drives it until it
    /// finishes or suspends. A bad plan, input, grant or binding is refused before anything is
    /// created.
    ///
    /// With an idempotency key ([`StartOptions::key`]) that started a run already with the
    /// same plan, inputs and seed, nothing is started and that run is returned
    /// ([`Start::Existing`]); with anything else different, `key_conflict`.
    pub fn start(
        &self,
        opts: StartOptions,
        given: &Given,
        tool_dirs: Vec<PathBuf>,
        progress: Option<&mut dyn FnMut(&Progress)>,
    ) -> Result<Start<Session>, HostError> {
        match self.start_unsettled(opts, given, tool_dirs, progress)? {
            Start::New(session) => Ok(Start::New(self.settle(session, true)?)),
            existing => Ok(existing),
        }
    }

    /// [`Home::start`] without settling the run's children ([`Home::settle`]).
    pub(crate) fn start_unsettled(
        &self,
        mut opts: StartOptions,
        given: &Given,
        tool_dirs: Vec<PathBuf>,
        progress: Option<&mut dyn FnMut(&Progress)>,
    ) -> Result<Start<Session>, HostError> {
        let registry = self.bind_new(&mut opts, given, tool_dirs)?;
        self.check_policy_of(&opts.plan, &registry)?;
        let mut nothing = |_: &Progress| {};
        let progress = match progress {
            Some(p) => p,
            None => &mut nothing,
        };
        let started = self.keyed(session::start_observed(&opts, &registry, progress))?;
        if let Start::New(session) = &started {
            self.note_timer(session);
        }
        Ok(started)
    }

    /// Everything [`Home::start`] does before the first event, for a run a worker will start
    /// elsewhere (`oracle submit`): the run directory with its plan, sealed bindings and
    /// submission. A key its run holds already is [`Start::Existing`], as for `start`.
    pub fn prepare_submission(
        &self,
        opts: StartOptions,
        given: &Given,
        tool_dirs: Vec<PathBuf>,
    ) -> Result<Start<Prepared>, HostError> {
        self.prepare_bound(opts, given, tool_dirs).map(|(p, _)| p)
    }

    /// [`Home::prepare_submission`], with the registry the run was bound to (a queued start
    /// drives the run with it once its turn comes).
    pub(crate) fn prepare_bound(
        &self,
        mut opts: StartOptions,
        given: &Given,
        tool_dirs: Vec<PathBuf>,
    ) -> Result<(Start<Prepared>, Registry), HostError> {
        let registry = self.bind_new(&mut opts, given, tool_dirs)?;
        self.check_policy_of(&opts.plan, &registry)?;
        let prepared = self.keyed(session::prepare(&opts, &registry, true))?;
        Ok((prepared, registry))
    }

    /// Starts a run in the background (`POST /api/v1/runs` on a file home): everything
    /// [`Home::prepare_submission`] checks and writes happens before this returns (a bad plan,
    /// input, grant, binding or key is refused here, nothing created), then a thread of this
    /// process drives the run as a worker would ([`Home::start_submitted`]) and hands its
    /// outcome to `ended`.
    pub fn launch(
        &self,
        opts: StartOptions,
        given: &Given,
        tool_dirs: Vec<PathBuf>,
        ended: impl FnOnce(&str, Result<Session, HostError>) + Send + 'static,
    ) -> Result<Start<Prepared>, HostError> {
        let prepared = match self.prepare_submission(opts, given, tool_dirs)? {
            Start::New(p) => p,
            existing => return Ok(existing),
        };
        let (host, id) = (self.clone(), prepared.id.clone());
        // The drive says when its first event is written, so a caller that reads the run at
        // once finds it; a drive that fails before that ends the wait too (its sender drops).
        let (started, first_event) = std::sync::mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name(format!("start {id}"))
            .spawn(move || {
                let mut started = Some(started);
                let mut progress = move |_: &Progress| {
                    if let Some(s) = started.take() {
                        let _ = s.send(());
                    }
                };
                let outcome = host.start_submitted_observed(&id, &mut progress);
                // A drive that ended before its first round ends the caller's wait here.
                drop(progress);
                ended(&id, outcome);
            })
            .map_err(|e| HostError::Worker(format!("cannot start a thread for the run: {e}")))?;
        let _ = first_event.recv_timeout(std::time::Duration::from_millis(LAUNCH_WAIT_MS));
        Ok(Start::New(prepared))
    }

    /// A start's outcome, with a key its run holds already turned into [`Start::Existing`].
    pub(crate) fn keyed<T>(&self, started: session::Result<T>) -> Result<Start<T>, HostError> {
        match started {
            Ok(t) => Ok(Start::New(t)),
            Err(SessionError::KeyUsed { key, run, differs }) if differs.is_empty() => {
                let dir = self.dir.join("runs").join(&run);
                let status = session::run_info(&dir).status;
                Ok(Start::Existing(Existing {
                    id: run,
                    dir,
                    key,
                    status,
                }))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Seals the bindings of a run this home did not start, as its `run.json` says: for a
    /// store's worker, whose run directories are written from the store's rows (and whoever can
    /// write those is an operator of the store, docs/STORE.md), never for a file home.
    pub fn adopt_bindings(&self, run: &RunDir) -> Result<(), HostError> {
        let stored = Bindings::read(&run.dir);
        let meta = stored.unchecked().to_json(&run.id, &self.key()?);
        let path = run.dir.join(oracle_runtime::bindings::META_FILE);
        std::fs::write(&path, format!("{meta:#}\n"))
            .map_err(|source| HostError::Session(session::SessionError::Io { path, source }))
    }
}
