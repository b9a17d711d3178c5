//! A server over a PostgreSQL store (`oracle serve --store`): the store's runs mirrored into a
//! file home the server reads as it reads any home, and writes (answers, verdicts, claims,
//! cancels, resumes, new runs) checked there, exactly as a file home checks them, before they
//! are queued for the workers as typed signals ([`crate::signal`]).
//!
//! What is absent, by design: no record written by the server (the workers append, under their
//! leases; the mirror is a cache rebuilt from the store's rows, byte for byte); no second way
//! to check a write (each is the file home's own [`Home`] call, made on a scratch copy of the
//! mirrored run and thrown away, so a refusal has the file home's code and message and an
//! accepted write is queued whole); no write queued that the check refused.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use oracle_pg::{RunRow, Store, Submitted};
use oracle_runtime::adjudication::{OutsideClaim, Submission};
use oracle_runtime::engine::Cancel;
use oracle_runtime::paths::{CHECKPOINTS_FILE, LOG_FILE};
use oracle_runtime::session::SessionError;
use oracle_runtime::writer::Durability;
use serde_json::Value;

use crate::bind::Given;
use crate::error::HostError;
use crate::home::{Home, Start};
use crate::request::RunRequest;
use crate::signal::{Answer, DriveSettings, Signal};

/// The file that marks a directory as a server's mirror of a store: only a directory holding
/// it is emptied when a server starts (a mirror is rebuilt from the store each time).
pub const MIRROR_MARK_FILE: &str = "store-mirror";
/// Where scratch copies of mirrored runs are made to check a write, under the mirror.
const SCRATCH_DIR: &str = "scratch";
/// How long a server holds an announcement it is delivering before another server may take
/// it (its beacon tries a failed delivery again at most `notify_backoff_ms_max`, 30 s, apart,
/// taking it again each time).
pub const ANNOUNCE_LEASE_MS: i64 = 60_000;

/// What the mirror holds of one run.
#[derive(Clone, Debug, Default)]
struct Mirrored {
    events: u64,
    files: BTreeSet<String>,
    checkpoints: usize,
    state: String,
}

/// A server's handle on a store: its connection, its mirror, and who it is.
pub struct StoreFront {
    store: Conn,
    /// A second connection, for [`StoreFront::wait`] alone: waiting holds its connection, and
    /// requests must not wait behind it.
    listener: Conn,
    /// Held while the mirror is written, so a request's sync and the sync thread's never
    /// append the same events twice.
    syncing: Mutex<()>,
    /// The mirror: a file home holding the store's runs as the workers left them.
    mirror: Home,
    runs: Mutex<BTreeMap<String, Mirrored>>,
    /// Names this server in the store's announcements.
    server: String,
    scratch_seq: AtomicU64,
}

/// A connection to the store, made again after it is lost (a database restart, a cut
/// connection): a call that fails with the database's error drops it, and the next call
/// connects anew. Closed on a thread of its own when dropped: the synchronous client closes
/// through a runtime of its own, which cannot run on an async runtime's thread, where a
/// server's last handle on its front may be dropped.
struct Conn {
    url: String,
    store: Mutex<Option<Store>>,
}

impl Conn {
    fn open(url: &str) -> Result<Conn, HostError> {
        Ok(Conn {
            url: url.to_owned(),
            store: Mutex::new(Some(Store::connect(url)?)),
        })
    }

    /// [`Conn::call`] for a read, which is made once more on a new connection when the first
    /// attempt found the connection lost (a read done twice changes nothing; a write is never
    /// tried again, since a lost connection leaves unknown whether it committed).
    fn read<T>(&self, f: impl Fn(&Store) -> oracle_pg::Result<T>) -> Result<T, HostError> {
        match self.call(&f) {
            Err(HostError::Pg(
                oracle_pg::PgError::Db { .. } | oracle_pg::PgError::Connect { .. },
            )) => self.call(&f),
            other => other,
        }
    }

    /// Runs `f` on the connection (connecting first if it was lost); a failure of the
    /// database itself drops the connection for the next call to make again.
    fn call<T>(&self, f: impl FnOnce(&Store) -> oracle_pg::Result<T>) -> Result<T, HostError> {
        let store = {
            let mut held = self.store.lock().unwrap_or_else(PoisonError::into_inner);
            match &*held {
                Some(s) => s.clone(),
                None => held.insert(Store::connect(&self.url)?).clone(),
            }
        };
        let out = f(&store);
        if let Err(oracle_pg::PgError::Db { .. } | oracle_pg::PgError::Connect { .. }) = &out {
            let mut held = self.store.lock().unwrap_or_else(PoisonError::into_inner);
            // Only if no other call made a new one meanwhile.
            if held.as_ref().is_some_and(|s| s.same(&store)) {
                *held = None;
            }
        }
        Ok(out?)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let held = self
            .store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(store) = held {
            let _ = std::thread::spawn(move || drop(store)).join();
        }
    }
}

/// A write queued for the workers: the signal's id and kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queued {
    pub run: String,
    pub signal: i64,
    pub kind: &'static str,
}

/// A run submitted through the server: its id and the warnings its plan gave, or the run its
/// key started already.
#[derive(Clone, Debug)]
pub enum StoreStart {
    New { id: String, warnings: Vec<String> },
    Existing { id: String, state: String },
}

/// A scratch home holding a copy of one mirrored run, removed when dropped.
struct Scratch {
    dir: PathBuf,
    home: Home,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A copy that could not be removed is swept when the server next starts.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn io_err(path: &Path, source: std::io::Error) -> HostError {
    HostError::Session(SessionError::Io {
        path: path.to_path_buf(),
        source,
    })
}

impl StoreFront {
    /// Connects to the store at `url` and makes `mirror` its mirror: a directory that does not
    /// exist, is empty, or was a mirror before (its runs are removed and read again from the
    /// store). Any other directory is refused: a mirror is never made over a file home.
    pub fn open(url: &str, mirror: &Path, server: &str) -> Result<StoreFront, HostError> {
        let store = Conn::open(url)?;
        let listener = Conn::open(url)?;
        prepare_mirror(mirror)?;
        Ok(StoreFront {
            store,
            listener,
            syncing: Mutex::new(()),
            mirror: Home::open(mirror)?,
            runs: Mutex::new(BTreeMap::new()),
            server: server.to_owned(),
            scratch_seq: AtomicU64::new(0),
        })
    }

    /// The store's URL (a thread of the server that keeps its own connection: the schedule
    /// sweep).
    pub fn url(&self) -> &str {
        &self.store.url
    }

    /// Runs `f` on the front's connection (the API's schedule calls).
    pub fn with_store<T>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, HostError>,
    ) -> Result<T, HostError> {
        let mut out = None;
        let called = self.store.call(|s| {
            out = Some(f(s));
            Ok(())
        });
        called?;
        out.unwrap_or_else(|| Err(HostError::Worker("internal: no store call".into())))
    }

    /// A directory for scratch homes of this server (submissions made here).
    pub fn scratch_root(&self) -> PathBuf {
        self.mirror.dir().join(SCRATCH_DIR)
    }

    /// The mirror's directory: a file home the server reads.
    pub fn mirror_dir(&self) -> &Path {
        self.mirror.dir()
    }

    /// Brings the mirror up to the store: every run whose row changed gets its new files and
    /// events. Returns how many runs changed.
    pub fn sync(&self) -> Result<usize, HostError> {
        let rows = self.store.read(|s| s.runs())?;
        let mut changed = 0;
        for row in rows {
            let known = self.known(&row.id);
            if known.as_ref().is_some_and(|m| !stale(m, &row)) {
                continue;
            }
            self.sync_row(&row)?;
            changed += 1;
        }
        Ok(changed)
    }

    /// Blocks until the store says something changed (an append, a submission, a signal, a
    /// release) or `timeout_ms` passes.
    pub fn wait(&self, timeout_ms: u64) -> Result<(), HostError> {
        self.listener
            .read(|s| s.wait_on(&[oracle_pg::CHANNEL, oracle_pg::CHANGES], timeout_ms))
    }

    fn known(&self, run: &str) -> Option<Mirrored> {
        let runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        runs.get(run).cloned()
    }

    /// Brings one run of the mirror up to the store (before a write is checked against it).
    fn sync_one(&self, run: &str) -> Result<(), HostError> {
        let row = self
            .store
            .read(|s| s.run(run))?
            .ok_or_else(|| oracle_pg::PgError::NoRun {
                run: run.to_owned(),
            })?;
        self.sync_row(&row)
    }

    fn sync_row(&self, row: &RunRow) -> Result<(), HostError> {
        let _held = self.syncing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut m = self.known(&row.id).unwrap_or_default();
        let dir = self.mirror.dir().join("runs").join(&row.id);
        std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        // Files first: a log is read with its run's plan beside it.
        let paths = self.store.read(|s| s.file_paths(&row.id))?;
        let missing: Vec<String> = paths
            .iter()
            .filter(|p| !m.files.contains(*p))
            .cloned()
            .collect();
        if !missing.is_empty() {
            self.store
                .read(|s| s.write_files(&row.id, &missing, &dir))?;
            m.files.extend(missing);
        }
        m.events = self.append_events(&row.id, &dir, m.events)?;
        let lines = self.store.read(|s| s.checkpoints(&row.id))?;
        if lines.len() != m.checkpoints {
            let path = dir.join(CHECKPOINTS_FILE);
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            std::fs::write(&path, text).map_err(|e| io_err(&path, e))?;
            m.checkpoints = lines.len();
        }
        m.state = row.state.clone();
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        runs.insert(row.id.clone(), m);
        Ok(())
    }

    /// Appends the events of `run` the mirror lacks (from seq `from`), page by page, each page
    /// in one write. Returns the events the mirror holds now.
    fn append_events(&self, run: &str, dir: &Path, mut from: u64) -> Result<u64, HostError> {
        let path = dir.join(LOG_FILE);
        loop {
            let page = self.store.read(|s| s.events_from(run, from))?;
            if page.is_empty() {
                return Ok(from);
            }
            let bytes: Vec<u8> = page.concat();
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| io_err(&path, e))?;
            file.write_all(&bytes).map_err(|e| io_err(&path, e))?;
            from += page.len() as u64;
            if (page.len() as i64) < oracle_pg::EVENTS_PAGE_MAX {
                return Ok(from);
            }
        }
    }

    /// A new, empty scratch home under the mirror (removed when dropped).
    fn new_scratch(&self) -> Result<Scratch, HostError> {
        let n = self.scratch_seq.fetch_add(1, Ordering::Relaxed);
        let dir = self
            .mirror
            .dir()
            .join(SCRATCH_DIR)
            .join(format!("{}-{n}", std::process::id()));
        Ok(Scratch {
            home: Home::open(&dir)?,
            dir,
        })
    }

    /// A scratch home with a copy of `run` as the store holds it now.
    fn scratch(&self, run: &str) -> Result<Scratch, HostError> {
        self.sync_one(run)?;
        let scratch = self.new_scratch()?;
        let from = self.mirror.dir().join("runs").join(run);
        copy_dir(&from, &scratch.dir.join("runs").join(run))?;
        // The run's bindings come from the store's rows, as a worker takes them
        // (`worker::hydrate`): the scratch home vouches for them, so a check re-derives the
        // run bound as the worker that records the signal will (a model-calling run's answer
        // was refused `binding_unsealed` by a scratch key that sealed nothing).
        let found = scratch.home.find(run)?;
        scratch.home.adopt_bindings(&found)?;
        Ok(scratch)
    }

    fn queue(&self, signal: Signal) -> Result<Queued, HostError> {
        let (run, kind) = (signal.run().to_owned(), signal.kind());
        let id = self.store.call(|s| s.send(&run, kind, &signal.to_row()))?;
        Ok(Queued {
            run,
            signal: id,
            kind,
        })
    }

    /// Checks the answer `run` waits for as a file home's [`Home::answer`] does, then queues it
    /// for the workers, who record it (with `by`) and drive the run on.
    pub fn answer(
        &self,
        run: &str,
        (step, value): (String, Value),
        by: Option<String>,
    ) -> Result<Queued, HostError> {
        let scratch = self.scratch(run)?;
        scratch
            .home
            .check_store_answer(run, (step.clone(), value.clone()), by.clone())?;
        self.queue(Signal::Resume {
            run: run.to_owned(),
            answer: Some(Answer { step, value, by }),
            given: Given::default(),
            drive: DriveSettings::default(),
            allow_tool_change: false,
        })
    }

    /// Checks outside event `name` with `value` as [`Home::keep_event`] does (in a scratch
    /// copy of the run), then queues it for the workers, who keep it and deliver it when the
    /// run waits on it.
    pub fn send_event(&self, run: &str, name: &str, value: &Value) -> Result<Queued, HostError> {
        let scratch = self.scratch(run)?;
        let sent = scratch.home.keep_event(run, name, value)?;
        self.queue(Signal::Event(crate::signal::EventSignal {
            run: sent.id,
            name: name.to_owned(),
            value: value.clone(),
        }))
    }

    /// Checks a verdict as [`Home::adjudicate`] does, then queues it (with a resume after it).
    /// Returns what the check recorded in the scratch copy (what the worker will record) too.
    pub fn adjudicate(&self, run: &str, sub: &Submission) -> Result<(Queued, Value), HostError> {
        let scratch = self.scratch(run)?;
        let checked = scratch
            .home
            .adjudicate(run, sub, Durability::None)?
            .to_json();
        let queued = self.queue(Signal::Adjudicate {
            run: run.to_owned(),
            verdict: sub.clone(),
            durability: Durability::DEFAULT,
            resume: true,
        })?;
        Ok((queued, checked))
    }

    /// Checks a claim as [`Home::claim`] does, then queues it (with a resume after it).
    pub fn claim(&self, run: &str, claim: &OutsideClaim) -> Result<(Queued, Value), HostError> {
        let scratch = self.scratch(run)?;
        let checked = scratch.home.claim(run, claim, Durability::None)?.to_json();
        let queued = self.queue(Signal::Claim {
            run: run.to_owned(),
            claim: claim.clone(),
            durability: Durability::DEFAULT,
            resume: true,
        })?;
        Ok((queued, checked))
    }

    /// Checks that `run` can be cancelled (it has not finished; refused as [`Home::cancel`]
    /// refuses it, `finished`), then queues the cancel: the worker that holds the run asks its
    /// drive to record it at its next decision boundary, or the next one to hold it records it.
    ///
    /// Not checked by making the cancel on a scratch copy, as other writes are: a run a worker
    /// is driving looks interrupted in a copy, and a cancel there would first complete the
    /// round in flight, calling its tools, in the server.
    pub fn cancel(&self, run: &str, cancel: Cancel) -> Result<Queued, HostError> {
        self.sync_one(run)?;
        let dir = self.mirror.dir().join("runs").join(run);
        let status = oracle_runtime::session::run_info(&dir).status;
        if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
            return Err(HostError::Session(SessionError::CannotCancel {
                run: run.to_owned(),
                status,
            }));
        }
        self.queue(Signal::Cancel {
            run: run.to_owned(),
            by: cancel.by,
            reason: cancel.reason,
            durability: Durability::DEFAULT,
        })
    }

    /// Queues a resume of `run` (an interrupted or answered run goes on).
    pub fn resume(&self, run: &str) -> Result<Queued, HostError> {
        self.queue(Signal::Resume {
            run: run.to_owned(),
            answer: None,
            given: Given::default(),
            drive: DriveSettings::default(),
            allow_tool_change: false,
        })
    }

    /// Submits the run `request` asks for, for the workers, on a server whose `--root` is
    /// `root`: admitted at the network's door ([`RunRequest::admit`]) and checked as every new
    /// run is ([`Home::prepare_submission`], in a
    /// scratch home), then stored with its key (a key that started a run already with the same
    /// plan, inputs and seed returns that run; with anything else, `key_conflict`).
    pub fn submit(
        &self,
        request: RunRequest,
        root: Option<&Path>,
        given: &Given,
    ) -> Result<StoreStart, HostError> {
        let (root, tool_dirs) = request.admit(root)?;
        let ask = request.queue.clone();
        if let Some(ask) = &ask
            && self.store.call(|s| s.queue_spec(&ask.queue))?.is_none()
        {
            return Err(crate::queue::unknown(&ask.queue));
        }
        let scratch = self.new_scratch()?;
        let key = request.key.clone();
        let opts = request.options(&scratch.dir, &root)?;
        let prepared = match scratch.home.prepare_submission(opts, given, tool_dirs)? {
            Start::New(p) => p,
            // A scratch home holds no keys: the store's are in the store (below).
            Start::Existing(e) => {
                return Err(HostError::Worker(format!(
                    "internal: a scratch home found key `{}`",
                    e.key
                )));
            }
        };
        let claim = key.as_deref().map(|k| {
            let s = &prepared.submission;
            oracle_runtime::keys::KeyClaim::new(k, "", prepared.plan.hash, &s.inputs, s.seed)
        });
        let programs = oracle_pg::Programs::default();
        let queue = ask.as_ref().map(crate::queue::store::as_store);
        match self.store.call(|s| {
            s.submit_queued(
                &prepared.plan.name,
                &prepared.dir,
                &programs,
                claim.as_ref(),
                queue.as_ref(),
            )
        })? {
            Submitted::New(id) => {
                // In the mirror before the caller hears of it, so it can read the run at once.
                self.sync_one(&id)?;
                Ok(StoreStart::New {
                    id,
                    warnings: prepared.warnings,
                })
            }
            Submitted::Existing {
                run,
                state,
                differs,
            } if differs.is_empty() => Ok(StoreStart::Existing { id: run, state }),
            Submitted::Existing { run, differs, .. } => {
                Err(HostError::Session(SessionError::KeyUsed {
                    key: key.unwrap_or_default(),
                    run,
                    differs,
                }))
            }
        }
    }

    /// `POST /api/v1/runs` naming one of the server's code `agents` over a store: the program
    /// is started once in a scratch home, in `root`, to bind its inputs and grants (as `oracle
    /// submit triage.py` does), and the run is stored under the program's own name and hash for
    /// a worker told about that agent (`oracle worker --agent NAME=PATH`). The store keeps no
    /// command. An unknown name is `unknown_agent`, nothing created.
    pub fn submit_agent(
        &self,
        request: &crate::code::AgentRequest,
        agents: &crate::code::Agents,
        root: &Path,
        given: &Given,
    ) -> Result<String, HostError> {
        let opts = request.options(agents, root)?;
        let scratch = self.new_scratch()?;
        let prepared = scratch.home.prepare_code_submission(opts, given)?;
        let programs = oracle_pg::Programs::default();
        let submitted = self
            .store
            .call(|s| s.submit_keyed(&prepared.agent, &prepared.dir, &programs, None))?;
        let id = match submitted {
            Submitted::New(id) => id,
            // No key was given, so no run was found by one.
            Submitted::Existing { run, .. } => run,
        };
        self.sync_one(&id)?;
        Ok(id)
    }

    /// Takes announcement `id` of `run` for this server's beacon (see
    /// [`Store::take_announcement`]): `false` when another server delivers it.
    pub fn take_announcement(&self, id: &str, run: &str) -> Result<bool, HostError> {
        self.store
            .call(|s| s.take_announcement(id, run, &self.server, ANNOUNCE_LEASE_MS))
    }

    /// Marks announcement `id` delivered, for every server.
    pub fn announcement_delivered(&self, id: &str) -> Result<(), HostError> {
        self.store.call(|s| s.announcement_delivered(id))
    }
}

/// Checks an answer for a store's run exactly as the server does before queueing one
/// ([`StoreFront::answer`]: [`Home::answer`] on a copy of the run as the store holds it now,
/// thrown away), for a front end without a mirror (`oracle resume --store URL RUN --step S
/// --value V`): a refusal has the server's code and message, and nothing is queued. `scratch`
/// is an empty directory the caller removes.
pub fn check_answer(
    store: &Store,
    scratch: &Path,
    run: &str,
    answer: (String, Value),
    by: Option<String>,
) -> Result<(), HostError> {
    store.hydrate(run, scratch)?;
    Home::open(scratch)?.check_store_answer(run, answer, by)
}

impl Home {
    /// Checks an answer for a copy of a store's run in this (throwaway) home: as [`Home::answer`]
    /// records it, or, for a code run, whose program only a worker told about its agent starts,
    /// as far as the log can say without the program (the step, the question's schema, the
    /// limits: `session::check_answer_alone`); the worker's drive makes the program's checks.
    pub fn check_store_answer(
        &self,
        run: &str,
        answer: (String, Value),
        by: Option<String>,
    ) -> Result<(), HostError> {
        let found = self.find(run)?;
        if crate::code::is_code_run(&found.dir) {
            return Ok(oracle_runtime::session::check_answer_alone(
                self.dir(),
                run,
                &answer,
            )?);
        }
        self.answer(run, answer, by, Durability::None).map(|_| ())
    }
}

/// Checks outside event `name` with `value` for `run` as [`Home::keep_event`] does, in a copy
/// of the run as the store holds it now (thrown away), for a front end without a mirror
/// (`oracle signal --store URL`): a refusal has the server's code, and nothing is queued.
pub fn check_event(
    store: &Store,
    scratch: &Path,
    run: &str,
    name: &str,
    value: &Value,
) -> Result<(), HostError> {
    store.hydrate(run, scratch)?;
    Home::open(scratch)?
        .keep_event(run, name, value)
        .map(|_| ())
}

/// A store's run's state in a file home's words (`oracle runs`, the API's `status`): `running`
/// while it is queued, held or released (not finished, not suspended), `submitted` before a
/// worker first took it, `broken` for a run no worker will drive again.
pub fn status_of(state: &str) -> &str {
    match state {
        "runnable" | "running" => "running",
        other => other,
    }
}

/// Whether the mirror's copy `m` of a run is behind its row.
fn stale(m: &Mirrored, row: &RunRow) -> bool {
    m.events != u64::try_from(row.events).unwrap_or(0) || m.state != row.state
}

/// Makes `dir` an empty mirror (module docs): refuses a directory that holds anything and is
/// not one.
fn prepare_mirror(dir: &Path) -> Result<(), HostError> {
    let mark = dir.join(MIRROR_MARK_FILE);
    if dir.exists() && !mark.exists() {
        let mut entries = std::fs::read_dir(dir).map_err(|e| io_err(dir, e))?;
        if entries.next().is_some() {
            return Err(HostError::Given {
                flag: "--store",
                given: dir.display().to_string(),
                why: format!(
                    "the server's mirror of the store must be a new or empty directory, or one a server made (holding `{MIRROR_MARK_FILE}`); it is neither"
                ),
            });
        }
    }
    for sub in ["runs", SCRATCH_DIR] {
        let path = dir.join(sub);
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|e| io_err(&path, e))?;
        }
    }
    std::fs::create_dir_all(dir.join("runs")).map_err(|e| io_err(dir, e))?;
    std::fs::write(
        &mark,
        "a server's mirror of a PostgreSQL store: rebuilt from the store when a server starts\n",
    )
    .map_err(|e| io_err(&mark, e))
}

/// Copies the regular files and directories under `from` to `to` (a mirrored run holds
/// nothing else).
fn copy_dir(from: &Path, to: &Path) -> Result<(), HostError> {
    std::fs::create_dir_all(to).map_err(|e| io_err(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| io_err(from, e))? {
        let entry = entry.map_err(|e| io_err(from, e))?;
        let kind = entry.file_type().map_err(|e| io_err(&entry.path(), e))?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).map_err(|e| io_err(&target, e))?;
        }
    }
    Ok(())
}
