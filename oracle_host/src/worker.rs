//! A store's worker: claims runs from a PostgreSQL store (`oracle_pg`), drives each in a
//! scratch home through the same [`Home`] calls a file home uses (its queued signals first,
//! each one's events committed with the signal marked applied, in one transaction; then the
//! run itself), and releases it in the state its log ends in.
//!
//! What is absent: no lease judged by an error's text (a superseded fence is the replica's
//! typed [`PgReplica::fenced`](oracle_pg::PgReplica::fenced)); no process-wide state (the
//! caller owns the stop flag and where log lines go).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use oracle_core::Payload;
use oracle_pg::{Claim, PgError, PgReplica, Store};
use oracle_runtime::LogPaths;
use oracle_runtime::declared::McpMode;
use oracle_runtime::recorded::Recorded;
use oracle_runtime::session::{self, RunDir};

use crate::bind::Given;
use crate::error::HostError;
use crate::home::Home;
use crate::metrics::WorkerMetrics;
use crate::signal::{Applied, Signal};

/// How long a claimed run's lease lasts unless renewed (renewed every third of it).
pub const LEASE_MS_DEFAULT: u64 = 10_000;
/// How long an idle worker waits for a notification before looking for work again.
pub const POLL_MS_DEFAULT: u64 = 1_000;
/// The first wait before reconnecting to an unreachable store; doubled up to the next.
pub const RECONNECT_MS_MIN: u64 = 100;
/// The longest wait between two attempts to reach the store.
pub const RECONNECT_MS_MAX: u64 = 5_000;
/// Most runs one worker drives at once (one thread and one connection each).
pub const CONCURRENCY_MAX: u32 = 64;

/// Where a worker's log lines go (the command line prints them to stderr, timestamped).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// A worker's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    pub url: String,
    /// The name the store records as each run's holder.
    pub name: String,
    /// Runs driven at once (at most [`CONCURRENCY_MAX`]).
    pub concurrency: u32,
    pub lease_ms: u64,
    pub poll_ms: u64,
    /// Return once no run is left to claim and none is being driven.
    pub until_idle: bool,
    /// Where the runs in hand are written while driven (removed after each).
    pub scratch: PathBuf,
    /// Declared tool directories that replace every run's; empty: each run's own.
    pub tools: Vec<PathBuf>,
    /// The program told of new adjudication requests after each drive, replacing the one each
    /// run was submitted with (`submit --oracle-cmd`); `None`: the run's own, if any.
    pub oracle_cmd: Option<PathBuf>,
    /// The program that scores auctions, replacing the run's own and a resume's
    /// (`--scorer-cmd`); `None`: the run's own, else the built-in rubric.
    pub scorer_cmd: Option<PathBuf>,
    /// Appended events between two resume points, kept in the store at each commit; `None`:
    /// what each call says (the default spacing for a first drive).
    pub snapshot_every: Option<u64>,
    /// Where to serve `GET /metrics` (`--metrics`, loopback only); `None`: nowhere.
    pub metrics: Option<std::net::SocketAddr>,
    /// The code agents this worker may start (`--agent NAME=PATH`): each name to its program,
    /// an absolute path on this machine. A store's code run names its agent; a worker claims
    /// only the code runs whose agent is here (docs/STORE.md, "Code agents").
    pub agents: BTreeMap<String, PathBuf>,
    /// The rates every drive of this worker keeps (`--model-rate`, `--model-tokens`,
    /// `--tool-rate`, admitted by `crate::rate::admit`), counted in the store's
    /// `rate_windows` with every other worker's.
    pub rates: crate::rate::Rates,
}

/// What every thread of a worker shares.
struct Shared {
    settings: Settings,
    stop: Arc<AtomicBool>,
    log: Log,
    /// Runs in hand and their fences, for the lease renewer.
    held: Mutex<BTreeMap<String, i64>>,
    /// Runs being driven now: where each is written, and the cancel signal already asked of
    /// its drive, for the renewer, which looks for cancels sent meanwhile.
    driving: Mutex<BTreeMap<String, Driving>>,
    /// Threads claiming or driving, for `until_idle`.
    busy: AtomicU32,
    /// Claims, takeovers and signal waits, for `--metrics`.
    metrics: Arc<WorkerMetrics>,
    /// Runs this worker found it cannot drive (its program for their agent is not the one they
    /// were submitted with): left for another worker, never claimed again by this one.
    refused: Mutex<std::collections::BTreeSet<String>>,
    /// Where the rates' windows are kept: the store's rows, one connection for every drive.
    windows: Arc<dyn crate::pace::Windows>,
}

/// Claims and drives runs until `stop` is set (the runs in hand are finished or suspended,
/// then released) or, with `until_idle`, until there is nothing left to do. Fails at once on a
/// store this oracle cannot use; an unreachable store is tried again with backoff.
pub fn run(settings: Settings, stop: Arc<AtomicBool>, log: Log) -> Result<(), HostError> {
    if settings.concurrency == 0 || settings.concurrency > CONCURRENCY_MAX {
        return Err(HostError::Given {
            flag: "--concurrency",
            given: settings.concurrency.to_string(),
            why: format!("expected 1 to {CONCURRENCY_MAX}"),
        });
    }
    // Fail early on a bad store; each thread opens its own connection.
    Store::connect(&settings.url)?;
    std::fs::create_dir_all(&settings.scratch).map_err(|source| {
        HostError::Session(session::SessionError::Io {
            path: settings.scratch.clone(),
            source,
        })
    })?;
    log(&format!(
        "worker   {}: {} at a time, lease {} ms",
        settings.name, settings.concurrency, settings.lease_ms
    ));
    let metrics = Arc::new(WorkerMetrics::default());
    if let Some(addr) = settings.metrics {
        let bound = serve_metrics(addr, &settings.url, metrics.clone())?;
        log(&format!("worker   metrics on http://{bound}/metrics"));
    }
    let windows = Arc::new(crate::pace::StoreWindows::new(&settings.url));
    let shared = Arc::new(Shared {
        settings,
        stop,
        log,
        held: Mutex::default(),
        driving: Mutex::default(),
        busy: AtomicU32::new(0),
        windows,
        metrics,
        refused: Mutex::default(),
    });
    spawn_renewer(shared.clone());
    let schedules = spawn_schedules(shared.clone());
    let threads: Vec<_> = (0..shared.settings.concurrency)
        .map(|i| {
            let shared = shared.clone();
            std::thread::spawn(move || claim_loop(&shared, i))
        })
        .collect();
    let mut failed = None;
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some(HostError::Worker("a worker thread panicked".into())),
        }
    }
    schedules.0.store(true, Ordering::Relaxed);
    let _ = schedules.1.join();
    let _ = std::fs::remove_dir_all(&shared.settings.scratch);
    failed.map_or(Ok(()), Err)
}

/// Fires the store's schedules and wakes its due timers (`crate::schedule_store::fire_loop`)
/// on a thread of its own until the worker stops (its claim threads have returned) or is told
/// to: every worker sweeps; the ticks' idempotency keys make each tick start one run, and a
/// due run gets one wake signal.
fn spawn_schedules(shared: Arc<Shared>) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let handle = std::thread::spawn(move || {
        let scratch = shared.settings.scratch.join("schedules");
        let _ = std::fs::create_dir_all(&scratch);
        let stopped = || shared.stop.load(Ordering::Relaxed) || flag.load(Ordering::Relaxed);
        let log = |line: &str| (shared.log)(line);
        crate::schedule_store::fire_loop(&shared.settings.url, &scratch, true, &stopped, &log);
    });
    (done, handle)
}

/// Renews the lease of every run in hand every third of the lease, on its own connection. A
/// connection that fails is opened again at the next round: a lease not renewed in time is
/// taken over, and this worker's next commit is then refused.
fn spawn_renewer(shared: Arc<Shared>) {
    std::thread::spawn(move || {
        let mut store: Option<Store> = None;
        let lease_ms = shared.settings.lease_ms;
        loop {
            std::thread::sleep(Duration::from_millis(lease_ms / 3));
            let now: Vec<(String, i64)> = lock(&shared.held)
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            if now.is_empty() {
                continue;
            }
            if store.is_none() {
                store = Store::connect(&shared.settings.url).ok();
            }
            let Some(s) = &store else { continue };
            ask_drives_to_cancel(&shared, s);
            for (run, fence) in now {
                match s.renew(&run, fence, lease_ms as i64) {
                    Ok(true) => {}
                    // Said once: the run is no longer renewed, and the drive's next commit is
                    // refused by the store.
                    Ok(false) => {
                        lock(&shared.held).remove(&run);
                        (shared.log)(&lost_line(&run, fence));
                    }
                    Err(_) => {
                        store = None;
                        break;
                    }
                }
            }
        }
    });
}

/// A run being driven: its directory in the scratch home, and the cancel signal its drive was
/// asked to record (`None` until one is sent).
struct Driving {
    dir: PathBuf,
    cancel: Option<i64>,
}

/// Asks each drive in hand to record a cancel sent for its run since the drive began: the
/// request is left in the run's directory, where the drive looks between rounds (as a file
/// home's `oracle cancel` asks a drive in another process), so a running run stops at its next
/// decision boundary rather than when it next suspends or finishes. A store that cannot be
/// read is looked at again at the next round.
fn ask_drives_to_cancel(shared: &Shared, store: &Store) {
    let asked: Vec<(String, PathBuf)> = lock(&shared.driving)
        .iter()
        .filter(|(_, d)| d.cancel.is_none())
        .map(|(run, d)| (run.clone(), d.dir.clone()))
        .collect();
    for (run, dir) in asked {
        let Ok(pending) = store.pending(&run) else {
            return;
        };
        let cancel = pending
            .iter()
            .find_map(|p| match Signal::from_row(&run, &p.body) {
                Ok(Signal::Cancel { by, reason, .. }) => Some((p.id, by, reason)),
                _ => None,
            });
        let Some((id, by, reason)) = cancel else {
            continue;
        };
        let request = oracle_runtime::engine::Cancel { by, reason };
        if oracle_runtime::cancel::request(&dir, &request).is_ok()
            && let Some(d) = lock(&shared.driving).get_mut(&run)
        {
            d.cancel = Some(id);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A thread that panicked holding it left plain data (a map, a replica) usable as it is.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One thread: connect (with backoff), serve claims until stopping, reconnect when the
/// connection is lost.
fn claim_loop(shared: &Shared, thread: u32) -> Result<(), HostError> {
    let scratch = shared.settings.scratch.join(format!("t{thread}"));
    let mut backoff_ms = RECONNECT_MS_MIN;
    while !shared.stop.load(Ordering::SeqCst) {
        let store = match Store::connect(&shared.settings.url) {
            Ok(s) => s,
            // No retry fixes a schema this oracle cannot use.
            Err(e @ (PgError::NotInitialised | PgError::Newer { .. } | PgError::Older { .. })) => {
                return Err(e.into());
            }
            Err(e) => {
                (shared.log)(&format!(
                    "worker   the store is unreachable ({e}); trying again in {backoff_ms} ms"
                ));
                std::thread::sleep(Duration::from_millis(backoff_ms));
                backoff_ms = (backoff_ms * 2).min(RECONNECT_MS_MAX);
                continue;
            }
        };
        match serve_claims(shared, &store, &scratch) {
            Ok(()) => return Ok(()),
            Err(e) => {
                (shared.log)(&format!("worker   lost the store ({e}); reconnecting"));
                backoff_ms = RECONNECT_MS_MIN;
                std::thread::sleep(Duration::from_millis(backoff_ms));
            }
        }
    }
    Ok(())
}

/// Serves the worker's metrics on `addr`, each scrape reading the store's runs on a
/// connection of its own (opened again after a failure).
fn serve_metrics(
    addr: std::net::SocketAddr,
    url: &str,
    metrics: Arc<WorkerMetrics>,
) -> Result<std::net::SocketAddr, HostError> {
    let url = url.to_owned();
    let mut store: Option<Store> = None;
    crate::metrics::listen(
        addr,
        Box::new(move || {
            let s = match store.take() {
                Some(s) => s,
                None => Store::connect(&url)?,
            };
            let mut statuses = BTreeMap::new();
            for row in s.runs()? {
                *statuses.entry(row.state).or_insert(0u64) += 1;
            }
            let depth = u64::try_from(s.queue_depth()?).unwrap_or(0);
            store = Some(s);
            metrics.render(&statuses, depth)
        }),
    )
}

/// One connection's loop: claim, drive, release, wait for work. Returns when stopping (or
/// idle, with `until_idle`); an error means the connection is gone.
fn serve_claims(shared: &Shared, store: &Store, scratch: &Path) -> Result<(), PgError> {
    let s = &shared.settings;
    while !shared.stop.load(Ordering::SeqCst) {
        shared.busy.fetch_add(1, Ordering::SeqCst);
        let skip: Vec<String> = lock(&shared.refused).iter().cloned().collect();
        let claim = Claimed::next(store, s, &skip).inspect_err(|_| {
            shared.busy.fetch_sub(1, Ordering::SeqCst);
        })?;
        let Some(claim) = claim else {
            let idle = shared.busy.fetch_sub(1, Ordering::SeqCst) == 1;
            // Runs waiting in a queue (for its rate, or a place another worker holds) are
            // work left: not idle until they are claimed.
            if s.until_idle && idle && store.queued_waiting(&skip)? == 0 {
                return Ok(());
            }
            store.wait(s.poll_ms)?;
            continue;
        };
        (shared.log)(&claim_line(&claim));
        shared.metrics.claimed(&claim.from);
        lock(&shared.held).insert(claim.id.clone(), claim.fence);
        let outcome = drive_claim(shared, &claim, scratch);
        lock(&shared.held).remove(&claim.id);
        shared.busy.fetch_sub(1, Ordering::SeqCst);
        match outcome {
            Ok(state) => (shared.log)(&format!(
                "worker   {} (fence {}, from {}): {state}",
                claim.id, claim.fence, claim.from
            )),
            Err(e) => (shared.log)(&format!("worker   {}: {e}", claim.id)),
        }
    }
    Ok(())
}

/// A run this worker holds, with the connection it was claimed on: every store call the claim
/// makes until its release (its rows into a scratch home, its resume points, its signals, the
/// files kept beside its log, the release) goes through here, under the claim's fence. The
/// lease is renewed apart, by the renewer's own connection ([`spawn_renewer`]).
struct Claimed<'s> {
    store: &'s Store,
    claim: Claim,
}

impl std::ops::Deref for Claimed<'_> {
    type Target = Claim;
    fn deref(&self) -> &Claim {
        &self.claim
    }
}

impl<'s> Claimed<'s> {
    /// The next run for this worker to drive, claimed under a new fence, if any is waiting.
    /// Code runs whose agent this worker was not told about, and runs in `skip`, are left.
    fn next(
        store: &'s Store,
        s: &Settings,
        skip: &[String],
    ) -> Result<Option<Claimed<'s>>, PgError> {
        let lease_ms = i64::try_from(s.lease_ms).unwrap_or(i64::MAX);
        let agents: Vec<String> = s.agents.keys().cloned().collect();
        // A queued run in its turn first (the queue's one rule decides, under its row's
        // lock), then any other.
        let queued =
            store.claim_queued(&s.name, lease_ms, skip, &mut crate::queue::store::decide)?;
        let claim = match queued {
            Some(c) => Some(c),
            None => store.claim_for(&s.name, lease_ms, &agents, skip)?,
        };
        Ok(claim.map(|claim| Claimed { store, claim }))
    }

    /// The run written into `home` from the store's rows; its directory.
    fn hydrate(&self, home: &Path) -> Result<PathBuf, PgError> {
        self.store.hydrate(&self.id, home)
    }

    /// A replica committing the run's events to the store under the claim's fence.
    fn replica(&self) -> PgReplica {
        self.store.replica(&self.id, self.fence, None)
    }

    /// The store itself, for the named belief stores a run reads and publishes to.
    fn stores(&self) -> Arc<Store> {
        Arc::new(self.store.clone())
    }

    /// The resume points the store kept at earlier commits.
    fn points(&self) -> Result<Vec<(u64, Vec<u8>)>, PgError> {
        self.store.points(&self.id)
    }

    /// The run's pending signals, in order.
    fn pending(&self) -> Result<Vec<oracle_pg::Signal>, PgError> {
        self.store.pending(&self.id)
    }

    /// Marks `signal` done with `outcome`.
    fn settle(&self, signal: i64, outcome: &str) -> Result<bool, PgError> {
        self.store.settle(&self.id, self.fence, signal, outcome)
    }

    /// Keeps the files beside the run's log in `dir` in the store.
    fn upload_files(&self, dir: &Path) -> Result<(), PgError> {
        self.store.upload_files(&self.id, self.fence, dir)
    }

    /// Keeps one file beside the run's log (`path`, relative to its directory) in the store.
    fn put_file(&self, path: &str, bytes: &[u8]) -> Result<(), PgError> {
        self.store.put_file(&self.id, self.fence, path, bytes)
    }

    /// Releases the run in `state`; `false` when the lease was lost first.
    fn release(
        &self,
        state: &str,
        detail: Option<&str>,
        summary: Option<&oracle_pg::Summary>,
    ) -> Result<bool, PgError> {
        self.store
            .release(&self.id, self.fence, state, detail, summary)
    }
}

/// The log line of a claim: a run claimed from `running` had a holder whose lease expired (a
/// worker that crashed or lost the store), so it is said to be taken over.
fn claim_line(claim: &Claim) -> String {
    if claim.from == "running" {
        format!(
            "worker   {} taken over: its worker's lease expired (fence {})",
            claim.id, claim.fence
        )
    } else {
        format!(
            "worker   {} claimed (fence {}, {})",
            claim.id, claim.fence, claim.from
        )
    }
}

/// The log line of a lease this worker found taken over when renewing it.
fn lost_line(run: &str, fence: i64) -> String {
    format!(
        "worker   {run} taken over by another worker (our fence {fence}): this worker's next commit of it is refused"
    )
}

/// Why a claimed run's drive stopped short.
enum Stop {
    /// The store refused a commit or the release: the lease is gone.
    Fenced(String),
    /// The run cannot be driven here (a plan that no longer compiles, a damaged log).
    Broken(String),
    /// This worker cannot drive the run, another may (a code agent it was not told about, or
    /// whose program here is not the one submitted): left as it was claimed, untouched.
    Refused(String),
}

/// Why a claimed run was not released in the state its drive ended in; the worker's log line
/// says it (`worker   ID: TEXT`), worded as before this type existed.
#[derive(Debug, thiserror::Error)]
enum NotReleased {
    /// The store refused a commit: the run is another worker's now.
    #[error("lease lost, run left to its new holder: {reason}")]
    Fenced { reason: String },
    #[error("lease lost before release; the run is another worker's")]
    Taken,
    #[error(transparent)]
    Store(#[from] PgError),
}

/// Drives one claimed run in a scratch home of its own, then releases it in the state its
/// log ends in. Returns that state.
fn drive_claim(shared: &Shared, claim: &Claimed, scratch: &Path) -> Result<String, NotReleased> {
    let home = scratch.join(format!("{}-{}", claim.id, claim.fence));
    let _ = std::fs::remove_dir_all(&home);
    let result = drive_in(shared, claim, &home);
    let summary = summary_of(&home.join("runs").join(&claim.id));
    let _ = std::fs::remove_dir_all(&home);
    let (state, detail) = match result {
        Ok(done) => done,
        // The store refused a commit: the run is another worker's now. Leave it alone.
        Err(Stop::Fenced(reason)) => return Err(NotReleased::Fenced { reason }),
        Err(Stop::Broken(e)) => ("broken".to_owned(), Some(e)),
        Err(Stop::Refused(e)) => {
            lock(&shared.refused).insert(claim.id.clone());
            (left_as(&claim.from).to_owned(), Some(e))
        }
    };
    match claim.release(&state, detail.as_deref(), summary.as_ref()) {
        Ok(true) => Ok(detail.map_or(state.clone(), |d| format!("{state}: {d}"))),
        Ok(false) => Err(NotReleased::Taken),
        Err(e) => Err(e.into()),
    }
}

/// The state a run this worker refuses is released in: the one it was claimed from, a run
/// whose worker died being `runnable` again.
fn left_as(from: &str) -> &str {
    match from {
        "running" => "runnable",
        other => other,
    }
}

/// A drive's error as the worker takes it: a code agent this worker cannot start as submitted
/// leaves the run to another worker; any other error of the run's own breaks it.
fn stop_of(e: &HostError) -> Stop {
    use session::SessionError as E;
    match e {
        HostError::Session(E::AgentUnknown { .. } | E::AgentChanged { .. }) => {
            Stop::Refused(format!("{}: {e}", e.code()))
        }
        e => Stop::Broken(e.to_string()),
    }
}

/// The claimed run written into `home` from the store's rows, with a host whose every writer
/// commits to the store under the claim's fence.
fn hydrate(
    shared: &Shared,
    claim: &Claimed,
    home: &Path,
) -> Result<(Home, RunDir, Arc<Mutex<PgReplica>>), Stop> {
    let broken = |e: &dyn std::fmt::Display| Stop::Broken(e.to_string());
    let dir = claim.hydrate(home).map_err(|e| broken(&e))?;
    let replica = Arc::new(Mutex::new(claim.replica()));
    let shared_replica: oracle_runtime::replica::Shared = replica.clone();
    // A worker drives runs submitted from other directories (and machines): each works in
    // the directory it recorded, with this worker's tools when given, and scores with this
    // worker's program, else the one the run was submitted with.
    let scorer = shared
        .settings
        .scorer_cmd
        .clone()
        .or_else(|| claim.programs.scorer_cmd.as_ref().map(PathBuf::from));
    let host = Home::open(home)
        .map_err(|e| broken(&e))?
        .with_tools(shared.settings.tools.clone())
        .with_replica(Some(shared_replica))
        // A run attached to a named store reads and publishes to the store's rows, which every
        // worker shares, never to this scratch home's files.
        .with_stores(Some(claim.stores()))
        .with_scorer(scorer)
        .with_points_every(shared.settings.snapshot_every)
        .with_rates(shared.settings.rates.clone(), Some(shared.windows.clone()))
        .with_children(Some(Arc::new(StoreChildren {
            store: claim.stores(),
            scratch: home.join("children"),
        })))
        .in_recorded_roots();
    let found = RunDir {
        id: claim.id.clone(),
        paths: LogPaths::of_run(&dir),
        dir,
    };
    // The run's bindings come from the store's rows, written by an operator of the store
    // (`oracle submit`): this scratch home vouches for them as they are (docs/SECURITY.md).
    host.adopt_bindings(&found).map_err(|e| broken(&e))?;
    // Not its program: a code run's rows name an agent, and this worker starts the program
    // its own `--agent` list names, its command sealed with this home's key.
    if crate::code::is_code_run(&found.dir) {
        oracle_runtime::code_run::adopt_for_worker(home, &found, &shared.settings.agents)
            .map_err(|e| stop_of(&HostError::Session(e)))?;
    }
    // So do its resume points, which the store kept at a worker's commits: sealed with this
    // home's key, then checked against the log by the resume as any point is. One that cannot
    // be written costs time, never data: the resume starts further back.
    let mut restored = Vec::new();
    let key = host.key().map_err(|e| broken(&e))?;
    for (seq, body) in claim.points().map_err(|e| broken(&e))? {
        if oracle_runtime::resume_point::adopt(&found.paths, seq, &body, &key).is_ok() {
            restored.push(seq);
        }
    }
    // And its kept outside events (`oracle_runtime::events`), which a worker keeps in the
    // store's rows: sealed with this home's key as they are.
    oracle_runtime::events::adopt(&found.dir, &key).map_err(|e| broken(&e))?;
    lock(&replica).keep_points(found.paths.clone(), &restored);
    Ok((host, found, replica))
}

/// A worker's [`ChildStore`]: a run's children are submitted to the store, for any worker to
/// drive, and each child's outcome goes to its parent as a `child` signal.
struct StoreChildren {
    store: Arc<Store>,
    /// Where a child the key started already is read from the store, to see how it ended.
    scratch: PathBuf,
}

impl crate::children::ChildStore for StoreChildren {
    fn submit(
        &self,
        prepared: &session::Prepared,
    ) -> Result<(String, Option<serde_json::Value>), HostError> {
        let s = &prepared.submission;
        let key = s.key.as_deref().map(|k| {
            oracle_runtime::keys::KeyClaim::new(k, "", prepared.plan.hash, &s.inputs, s.seed)
        });
        let programs = oracle_pg::Programs::default();
        let submitted =
            self.store
                .submit_keyed(&prepared.plan.name, &prepared.dir, &programs, key.as_ref())?;
        let run = match submitted {
            oracle_pg::Submitted::New(id) => return Ok((id, None)),
            oracle_pg::Submitted::Existing { run, .. } => run,
        };
        let home = self.scratch.join(&run);
        let _ = std::fs::remove_dir_all(&home);
        let dir = self.store.hydrate(&run, &home)?;
        let answer = crate::children::child_answer(&run, &dir);
        let _ = std::fs::remove_dir_all(&home);
        Ok((run, answer))
    }

    fn send(&self, signal: &Signal) -> Result<(), HostError> {
        self.store
            .send(signal.run(), signal.kind(), &signal.to_row())?;
        Ok(())
    }

    fn children(&self, run: &str) -> Result<Vec<(String, String)>, HostError> {
        let limit = crate::limits::CHILDREN_PER_RUN_MAX as i64;
        Ok(self.store.children(run, limit)?)
    }
}

fn drive_in(
    shared: &Shared,
    claim: &Claimed,
    home: &Path,
) -> Result<(String, Option<String>), Stop> {
    let (host, found, replica) = hydrate(shared, claim, home)?;
    // What the store held: what this claim appends comes after it (timers fired, for metrics).
    let held = oracle_runtime::index::IndexedLog::open_with(&found.paths.log, false)
        .map_or(0, |l| l.len());
    let fenced = || lock(&replica).fenced().map(ToString::to_string);
    let notes = apply_signals(shared, claim, &host, &replica)?;
    lock(&shared.driving).insert(
        claim.id.clone(),
        Driving {
            dir: found.dir.clone(),
            cancel: None,
        },
    );
    let drove = drive_on(&host, &found, claim);
    let asked = lock(&shared.driving)
        .remove(&claim.id)
        .and_then(|d| d.cancel);
    match drove {
        Err(e) => {
            if let Some(f) = fenced() {
                return Err(Stop::Fenced(f));
            }
            // A run that stops with an error of its own (a step failing is not one) is left
            // for a person: its log is what the store holds.
            return Err(stop_of(&e));
        }
        Ok(Some(seq)) => told_from_point(shared, claim, seq),
        Ok(None) => {}
    }
    shared.metrics.timers_fired_since(&found.paths.log, held);
    let _ = claim.upload_files(&found.dir);
    notify(shared, claim, &host, &found.dir);
    let state = state_of(&found.dir).unwrap_or_else(|| "runnable".to_owned());
    // The cancel the drive was asked for is recorded: its signal is done. (A run that
    // finished otherwise first keeps it pending; the next holder refuses it, `finished`.)
    if let (Some(signal), "cancelled") = (asked, state.as_str()) {
        let outcome = "applied: recorded by the drive in hand at its next decision boundary";
        claim
            .settle(signal, outcome)
            .map_err(|e| Stop::Fenced(e.to_string()))?;
    }
    Ok((state, (!notes.is_empty()).then(|| notes.join("; "))))
}

/// Drives the run on where its log leaves off: from the start, or after a crash or a release.
/// Returns the resume point the drive started from, if any; `Ok(None)` also for a run left as
/// it is (at rest, nothing to do).
fn drive_on(host: &Home, found: &RunDir, claim: &Claim) -> Result<Option<u64>, HostError> {
    let drive = match (found.paths.log.is_file(), state_of(&found.dir).as_deref()) {
        (false, _) => Some(host.start_submitted(&claim.id).map(|s| s.report.from_point)),
        // A verdict recorded after the run suspended on a belief, whose resume did not happen
        // (its worker died in between, or it was sent without `resume`): go on.
        (true, Some("suspended")) if verdict_after_domain_wait(&found.dir) => Some(
            host.resume_after_outside(&claim.id, true)
                .map(|a| a.from_point()),
        ),
        (true, Some(_)) => None,
        (true, None) => Some(
            host.resume_after_outside(&claim.id, true)
                .map(|a| a.from_point()),
        ),
    };
    drive.transpose().map(Option::flatten)
}

/// Carries out the run's pending signals in order. A signal whose call records events is
/// marked applied in the transaction of its last commit; one that records nothing (refused,
/// or nothing to do) is settled here with its outcome. Returns the refusals, for the release.
fn apply_signals(
    shared: &Shared,
    claim: &Claimed,
    host: &Home,
    replica: &Mutex<PgReplica>,
) -> Result<Vec<String>, Stop> {
    let pending = claim.pending().map_err(|e| Stop::Broken(e.to_string()))?;
    let mut notes = Vec::new();
    for signal in pending {
        shared.metrics.signal_waited(signal.waited_ms);
        lock(replica).consume_next(Some(signal.id));
        let result = Signal::from_row(&claim.id, &signal.body)
            .map(|s| with_worker_scorer(s, &shared.settings))
            .and_then(|s| host.apply(s));
        if let Ok(Some(seq)) = result.as_ref().map(Applied::from_point) {
            told_from_point(shared, claim, seq);
        }
        let consumed = lock(replica).consumed();
        lock(replica).consume_next(None);
        if result.is_err()
            && let Some(f) = lock(replica).fenced()
        {
            return Err(Stop::Fenced(f.to_string()));
        }
        if consumed.is_some() {
            continue;
        }
        let outcome = match &result {
            Ok(_) => "applied: nothing to record".to_owned(),
            Err(e) => format!("refused ({}, exit {}): {e}", e.code(), e.exit()),
        };
        if result.is_err() {
            notes.push(format!("signal {} {outcome}", signal.id));
        }
        claim
            .settle(signal.id, &outcome)
            .map_err(|e| Stop::Fenced(e.to_string()))?;
    }
    Ok(notes)
}

/// A resume signal as this worker carries it out: with the worker's `--scorer-cmd`, when it
/// has one, in place of the sender's (a path on the sender's machine).
fn with_worker_scorer(signal: Signal, settings: &Settings) -> Signal {
    match (signal, &settings.scorer_cmd) {
        (
            Signal::Resume {
                run,
                answer,
                given,
                mut drive,
                allow_tool_change,
            },
            Some(program),
        ) => {
            drive.scorer_cmd = Some(program.clone());
            Signal::Resume {
                run,
                answer,
                given,
                drive,
                allow_tool_change,
            }
        }
        (other, _) => other,
    }
}

/// Says that a drive started from a resume point the store kept, not from the first event.
fn told_from_point(shared: &Shared, claim: &Claim, seq: u64) {
    (shared.log)(&format!(
        "worker   {} (fence {}) resumed from its resume point after event {seq}",
        claim.id, claim.fence
    ));
}

/// Sends the run's new adjudication requests to the worker's `--oracle-cmd`, else to the one
/// the run was submitted with, and keeps the outbox (what was delivered) in the store. Never
/// fails the drive: a request is in the log whether or not it was delivered, and one not
/// delivered is tried again after the run's next drive (a worker that dies between a delivery
/// and keeping the outbox delivers it again: at least once).
fn notify(shared: &Shared, claim: &Claimed, host: &Home, dir: &Path) {
    let program = shared
        .settings
        .oracle_cmd
        .clone()
        .or_else(|| claim.programs.oracle_cmd.as_ref().map(PathBuf::from));
    let Some(program) = program else { return };
    let line = match host.notify(&claim.id, &program) {
        Ok(n) if n.delivered.is_empty() && n.failed.is_empty() => return,
        Ok(n) => format!(
            "notified {} of {:?}; failed {:?}",
            program.display(),
            n.delivered,
            n.failed
        ),
        Err(e) => format!(
            "adjudication requests not sent to {}: {e}",
            program.display()
        ),
    };
    (shared.log)(&format!("worker   {}: {line}", claim.id));
    let outbox = dir.join(oracle_runtime::oracle::OUTBOX_FILE);
    if let Ok(bytes) = std::fs::read(&outbox)
        && let Err(e) = claim.put_file(oracle_runtime::oracle::OUTBOX_FILE, &bytes)
    {
        (shared.log)(&format!(
            "worker   {}: the outbox was not kept: {e}",
            claim.id
        ));
    }
}

/// What the run's log in `dir` says for `oracle runs` (as a file home lists it), if it has a
/// readable log.
pub fn summary_of(dir: &Path) -> Option<oracle_pg::Summary> {
    if !LogPaths::of_run(dir).log.is_file() {
        return None;
    }
    let info = session::run_info(dir);
    if info.status == "damaged" {
        return None;
    }
    Some(oracle_pg::Summary {
        waiting: info.waiting,
        attempts: info.attempts as i64,
        reason: info.reason,
        last_time: info.last_time as i64,
        models: info.models.map(|u| (u.calls as i64, u.tokens as i64)),
        wake_at_ms: if info.status == "suspended" {
            pending_timer(dir).and_then(|t| i64::try_from(t).ok())
        } else {
            None
        },
        expire_at_ms: pending_expiry(dir).and_then(|t| i64::try_from(t).ok()),
    })
}

/// The earliest real-time expiry (`expires_ms`) among the pending adjudication requests of
/// the run in `dir`, as its log's memory says (a run on a named store keeps none of its own).
fn pending_expiry(dir: &Path) -> Option<u64> {
    let events = Recorded::read(&LogPaths::of_run(dir).log).ok()?;
    let memory = oracle_runtime::adjudication::project(&events).ok()?;
    memory
        .requests()
        .filter(|r| r.status == oracle_memory::RequestStatus::Pending)
        .filter_map(|r| r.request.expires_ms)
        .min()
}

/// The due instant of the timer the run in `dir` sleeps on: its last `timer_set` with neither
/// a `timer_fired` nor a `resumed` (an answer that beat a deadline) after it.
fn pending_timer(dir: &Path) -> Option<u64> {
    let events = Recorded::read(&LogPaths::of_run(dir).log).ok()?;
    let mut due = None;
    use oracle_core::EventKind as K;
    for seq in events.base()..events.len() {
        match events.kind(seq) {
            Some(K::TimerSet) => {
                if let Some(Ok(Payload::TimerSet(t))) = events.event(seq).map(|e| e.typed()) {
                    due = Some(t.due_ms);
                }
            }
            Some(K::TimerFired | K::Resumed) => due = None,
            _ => {}
        }
    }
    due
}

/// The most due timers one sweep of a worker's timer wheel wakes (the rest, at the next).
pub const WAKES_PER_SWEEP_MAX: i64 = 256;

/// One sweep of a worker's timer wheel: every suspended run of the store whose timer is due
/// gets one wake signal (`Store::send_once`: workers racing on it queue one), which the
/// worker that claims the run carries out as `oracle resume --wake` does: `timer_fired` is
/// appended once, under the run's fence. Returns the runs sent a wake.
pub fn wake_due(store: &Store, now_ms: u64) -> Result<Vec<String>, HostError> {
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let mut woken = Vec::new();
    for run in store.due_timers(now, WAKES_PER_SWEEP_MAX)? {
        let signal = Signal::Resume {
            run: run.clone(),
            answer: None,
            given: Given::default(),
            drive: crate::signal::DriveSettings {
                wake: Some(false),
                ..Default::default()
            },
            allow_tool_change: false,
        };
        if store.send_once(&run, signal.kind(), &signal.to_row())? {
            woken.push(run);
        }
    }
    // The expiry wheel: a run at rest whose real-time adjudication request is due gets one
    // `sweep` (as `oracle sweep RUN` sends), which expires it once under the run's fence,
    // with the bytes a file home's server writes; a run waiting on that line is then resumed
    // by the claiming worker (`verdict_after_domain_wait`).
    for run in store.due_expiries(now, WAKES_PER_SWEEP_MAX)? {
        let signal = Signal::Sweep {
            run: run.clone(),
            now: None,
            durability: oracle_runtime::writer::Durability::DEFAULT,
        };
        if store.send_once(&run, signal.kind(), &signal.to_row())? {
            woken.push(run);
        }
    }
    Ok(woken)
}

/// Whether the log ends in an outside event (a verdict, a claim) recorded after the program
/// suspended waiting on a domain (a belief): a resume may now find the wait resolved.
fn verdict_after_domain_wait(dir: &Path) -> bool {
    let Ok(events) = Recorded::read(&LogPaths::of_run(dir).log) else {
        return false;
    };
    let last_external = events
        .len()
        .checked_sub(1)
        .and_then(|seq| events.kind(seq))
        .is_some_and(|k| k.is_external());
    let belief_wait = match session::last_program_event(&events)
        .as_ref()
        .map(|e| e.typed())
    {
        Some(Ok(Payload::Suspended(s))) => session::domain_wait(&events, &s.step).is_some(),
        _ => false,
    };
    last_external && belief_wait
}

/// The state a run's log ends in: `completed`, `failed`, `cancelled`, `suspended`, or `None` (it can go on).
pub fn state_of(dir: &Path) -> Option<String> {
    let events = Recorded::read(&LogPaths::of_run(dir).log).ok()?;
    let state = match session::last_program_event(&events)
        .as_ref()
        .map(|e| e.typed())
    {
        Some(Ok(Payload::RunFinished(f))) => f.status.as_str(),
        Some(Ok(Payload::Suspended(_))) => "suspended",
        _ => return None,
    };
    Some(state.to_owned())
}

impl Home {
    /// A worker's first drive of a submitted run (its directory is in this home, without a
    /// log: [`Home::prepare_submission`] made it elsewhere).
    pub fn start_submitted(&self, run: &str) -> Result<session::Session, HostError> {
        self.start_submitted_observed(run, &mut |_| {})
    }

    /// [`Home::start_submitted`], telling `progress` at each round.
    pub fn start_submitted_observed(
        &self,
        run: &str,
        progress: &mut dyn FnMut(&oracle_runtime::engine::Progress),
    ) -> Result<session::Session, HostError> {
        // Not `find`: a submitted run has no log yet, which is what `find` looks for.
        let dir = self.dir().join("runs").join(run);
        let found = RunDir {
            id: run.to_owned(),
            paths: LogPaths::of_run(&dir),
            dir,
        };
        let bound = self.bindings(&found, &Given::default(), true)?;
        let (mut registry, _) = bound.registry(McpMode::Start)?;
        self.pace(&bound, &mut registry);
        if crate::code::is_code_run(&found.dir) {
            let session = oracle_runtime::code_run::start_submitted(
                self.dir(),
                run,
                self.writing(oracle_runtime::Durability::DEFAULT),
                &registry,
                self.default_scorer(),
                progress,
            )?;
            self.note_timer(&session);
            return Ok(session);
        }
        let session = session::start_prepared(
            self.dir(),
            run,
            self.writing(oracle_runtime::Durability::DEFAULT),
            &registry,
            self.default_scorer(),
            self.points(oracle_runtime::resume_point::Policy::default()),
            progress,
        )?;
        self.note_timer(&session);
        self.settle(session, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(from: &str) -> Claim {
        Claim {
            id: "q-1".into(),
            fence: 3,
            events: 12,
            from: from.into(),
            programs: oracle_pg::Programs::default(),
        }
    }

    #[test]
    fn a_claim_from_running_is_a_takeover() {
        assert_eq!(
            claim_line(&claim("submitted")),
            "worker   q-1 claimed (fence 3, submitted)"
        );
        assert_eq!(
            claim_line(&claim("running")),
            "worker   q-1 taken over: its worker's lease expired (fence 3)"
        );
        assert!(lost_line("q-1", 2).starts_with("worker   q-1 taken over by another worker"));
    }
}
