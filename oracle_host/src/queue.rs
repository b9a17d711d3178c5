//! Named queues on a file home (`oracle queue set`, `oracle run --queue`, `POST /runs` with a
//! `queue`): a run beyond its queue's limits waits, `queued`, until the one ordering rule
//! ([`order::pick`]) lets it start. Every door that starts a run asks here; none decides
//! itself.
//!
//! Files, under `<home>/queues/`: `NAME.json` is the queue (its limits, written by `oracle
//! queue set`); `NAME.state` holds its waiting and started runs, the recent starts the rate
//! counts and when each partition was last served; `NAME.lock` is the lock every change of
//! the two takes (an exclusive `flock`, so the limits hold across every process on the home);
//! `NAME.tickets/T.lock` is held by the process that waits for or drives ticket `T`, so an
//! entry whose process died is seen dead (the kernel lets go of its lock) and dropped.
//!
//! What is absent, by design: nothing of a queue reaches a run's log. A queue changes when a
//! run starts, never what it records: a run's bytes are the same whether it waited or not.
//! Wall time (the rate) is read here only.

pub mod order;
pub mod store;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use oracle_runtime::session::{self, Session, StartOptions};
use serde::{Deserialize, Serialize};

use crate::bind::Given;
use crate::error::HostError;
use crate::home::{Home, Start};

pub use order::PRIORITY_MAX;

/// The queues' directory in a home.
pub const QUEUES_DIR: &str = "queues";

/// The longest queue name: it is a file name.
pub const NAME_BYTES_MAX: usize = 64;

/// The longest partition key (`--partition KEY`): kept in the queue's state for every waiting
/// run.
pub const PARTITION_BYTES_MAX: usize = 128;

/// The highest concurrency (and partition concurrency) a queue may have.
pub const CONCURRENCY_MAX: u32 = 10_000;

/// The most starts a rate may allow per unit: the queue keeps one wall time per start.
pub const RATE_COUNT_MAX: u32 = 10_000;

/// The most runs one queue holds (waiting and started): its state is read whole on every
/// decision, so a start past it is refused (`queue_full`) instead of slowing every other.
pub const ENTRIES_MAX: usize = 100_000;

/// The most queues a home keeps: `oracle queue list` and `oracle runs` read every one.
pub const QUEUES_MAX: usize = 1_000;

/// The most partitions whose last turn a queue keeps (round robin remembers this many; one
/// served longer ago than all of them counts as never served, which is where it stood).
pub const SERVED_MAX: usize = 10_000;

/// How often a run waiting for its turn looks again (and a server, for its queued runs): a
/// look is one lock and one small read, and a slot freed is taken at most this late.
pub const POLL_MS: u64 = 50;

/// A queue as kept in `<home>/queues/NAME.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Queue {
    pub name: String,
    pub concurrency: u32,
    /// `N/s`, `N/m` or `N/h`: at most N starts in any second, minute or hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_concurrency: Option<u32>,
}

/// Where a run asks to wait: its queue, priority (0-9, higher first) and partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ask {
    pub queue: String,
    pub priority: u8,
    pub partition: Option<String>,
}

/// Who drives an entry once it starts, and so what keeps it alive while it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Holder {
    /// A process holding the ticket's lock (`oracle run --queue`, or a server's drive).
    Process,
    /// Whatever server drives the home (a run submitted through the API): alive while the
    /// run is prepared and has not started.
    Server,
}

/// One run in a queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    ticket: u64,
    run: String,
    priority: u8,
    partition: String,
    started: bool,
    holder: Holder,
    /// The ticket lock file its process holds (`NAME.tickets/SLOT.lock`): the lowest no other
    /// entry names, so a file is reused only once its last entry is gone.
    #[serde(default)]
    slot: u32,
}

/// A queue's changing part, `<home>/queues/NAME.state`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct State {
    next_ticket: u64,
    round: u64,
    served: BTreeMap<String, u64>,
    starts_ms: Vec<u64>,
    entries: Vec<Entry>,
}

/// A queue as `oracle queue list` and the API show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QueueView {
    #[serde(flatten)]
    pub queue: Queue,
    /// Runs started through it that have not ended.
    pub running: u64,
    /// Runs waiting for their turn.
    pub waiting: u64,
}

/// A run waiting in a queue, as the run lists show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Place {
    pub queue: String,
    /// 1 is next.
    pub position: u64,
    pub priority: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
}

fn bad(code: &'static str, why: impl Into<String>) -> HostError {
    HostError::Queue {
        code,
        why: why.into(),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HostError + '_ {
    move |source| {
        HostError::Session(session::SessionError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// A queue name: letters, digits, `-` and `_`, at most [`NAME_BYTES_MAX`] bytes.
pub fn check_name(name: &str) -> Result<(), HostError> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(bad(
            "queue_invalid",
            format!("queue name `{name}`: use 1 to {NAME_BYTES_MAX} letters, digits, `-` or `_`"),
        ))
    }
}

/// A rate as `--rate` takes it: `N/s`, `N/m` or `N/h`, N from 1 to [`RATE_COUNT_MAX`].
pub fn parse_rate(text: &str) -> Result<order::Rate, HostError> {
    let refuse = || {
        bad(
            "queue_invalid",
            format!("rate `{text}`: write N/s, N/m or N/h with N from 1 to {RATE_COUNT_MAX}"),
        )
    };
    let (n, unit) = text.split_once('/').ok_or_else(refuse)?;
    let count: u32 = n.parse().map_err(|_| refuse())?;
    let per_ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(refuse()),
    };
    if count == 0 || count > RATE_COUNT_MAX {
        return Err(refuse());
    }
    Ok(order::Rate { count, per_ms })
}

fn check_concurrency(flag: &str, n: u32) -> Result<(), HostError> {
    if n == 0 || n > CONCURRENCY_MAX {
        return Err(bad(
            "queue_invalid",
            format!("{flag} {n}: give 1 to {CONCURRENCY_MAX}"),
        ));
    }
    Ok(())
}

impl Queue {
    /// Every field checked (`oracle queue set` and a queue read back alike).
    pub fn check(&self) -> Result<(), HostError> {
        check_name(&self.name)?;
        check_concurrency("--concurrency", self.concurrency)?;
        if let Some(n) = self.partition_concurrency {
            check_concurrency("--partition-concurrency", n)?;
        }
        if let Some(r) = &self.rate {
            parse_rate(r)?;
        }
        Ok(())
    }

    fn limits(&self) -> order::Limits {
        order::Limits {
            concurrency: self.concurrency,
            partition_concurrency: self.partition_concurrency,
            rate: self.rate.as_deref().and_then(|r| parse_rate(r).ok()),
        }
    }
}

/// A run's queue, priority and partition as a door gives them, checked: the one rule every
/// door applies (`oracle run`, `POST /runs`, a schedule). No queue with a priority or a
/// partition is refused (`queue_invalid`), as is a priority past [`PRIORITY_MAX`] or a
/// partition key that is empty or longer than [`PARTITION_BYTES_MAX`].
pub fn ask(
    queue: Option<&str>,
    priority: Option<u64>,
    partition: Option<&str>,
) -> Result<Option<Ask>, HostError> {
    let Some(queue) = queue else {
        if priority.is_some() || partition.is_some() {
            return Err(bad(
                "queue_invalid",
                "a priority or a partition needs a queue (--queue NAME, the API's `queue`)",
            ));
        }
        return Ok(None);
    };
    check_name(queue)?;
    let priority = priority.unwrap_or(0);
    let priority = u8::try_from(priority)
        .ok()
        .filter(|p| *p <= PRIORITY_MAX)
        .ok_or_else(|| {
            bad(
                "queue_invalid",
                format!("priority {priority}: give 0 to {PRIORITY_MAX} (higher goes first)"),
            )
        })?;
    if let Some(p) = partition {
        let ok =
            !p.is_empty() && p.len() <= PARTITION_BYTES_MAX && !p.chars().any(char::is_control);
        if !ok {
            return Err(bad(
                "queue_invalid",
                format!(
                    "partition `{p}`: give 1 to {PARTITION_BYTES_MAX} bytes with no control characters"
                ),
            ));
        }
    }
    Ok(Some(Ask {
        queue: queue.to_owned(),
        priority,
        partition: partition.map(str::to_owned),
    }))
}

/// [`ask`] for a run of the plan `source`: a queue its start names, else the one its
/// `queue "NAME"` line names (docs/PLAN.md, "Queues"), else none.
pub fn ask_for(
    source: &str,
    queue: Option<&str>,
    priority: Option<u64>,
    partition: Option<&str>,
) -> Result<Option<Ask>, HostError> {
    let declared = oracle_plan::queue_of(source);
    ask(queue.or(declared.as_deref()), priority, partition)
}

/// A queue's lock held, with what its files say.
struct Locked {
    _lock: File,
    dir: PathBuf,
    queue: Queue,
    state: State,
    /// The state file, open for writing in place.
    file: File,
}

/// The refusal of a queue that does not exist (`queue_unknown`).
pub fn unknown(name: &str) -> HostError {
    bad(
        "queue_unknown",
        format!("no queue `{name}`: make it with `oracle queue set {name} --concurrency N`"),
    )
}

fn read_queue(dir: &Path, name: &str) -> Result<Queue, HostError> {
    let path = dir.join(format!("{name}.json"));
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(unknown(name)),
        Err(e) => return Err(io(&path)(e)),
    };
    let queue: Queue = serde_json::from_str(&text)
        .map_err(|e| bad("queue_invalid", format!("{}: {e}", path.display())))?;
    queue.check()?;
    Ok(queue)
}

/// Writes `bytes` to `path` whole or not at all (a temporary file renamed over it).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), HostError> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, bytes).map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

/// A queue's state as its file holds it. The file is written in place under the queue's lock
/// (a rename per change costs a millisecond on this kind of disk, BENCHMARKS.md "Named
/// queues"), so only a machine's crash mid-write can tear it: it is then read as empty, since
/// every process that held an entry died with the machine, and runs a server had waiting are
/// taken up by `oracle serve --recover` as any prepared run.
fn read_state(file: &mut File) -> State {
    use std::io::Read;
    let mut text = String::new();
    if file.read_to_string(&mut text).is_err() || text.is_empty() {
        return State::default();
    }
    serde_json::from_str(&text).unwrap_or_default()
}

/// Whether a process holds the lock file at `path` now. A file that cannot be opened was let
/// go of and removed.
fn held(path: &Path) -> bool {
    let Ok(f) = fs::OpenOptions::new().read(true).write(true).open(path) else {
        return false;
    };
    match f.try_lock() {
        Ok(()) => false,
        Err(fs::TryLockError::WouldBlock) => true,
        // Cannot tell: kept, as a live entry is never dropped.
        Err(fs::TryLockError::Error(_)) => true,
    }
}

impl Locked {
    /// Takes queue `name`'s lock in `home`, waiting for it; an unknown queue is refused.
    fn take(home: &Path, name: &str) -> Result<Locked, HostError> {
        check_name(name)?;
        let dir = home.join(QUEUES_DIR);
        let queue = read_queue(&dir, name)?;
        let lock = lock_file(&dir, name)?;
        let path = dir.join(format!("{name}.state"));
        let mut file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        let state = read_state(&mut file);
        Ok(Locked {
            _lock: lock,
            dir,
            queue,
            state,
            file,
        })
    }

    fn slot_path(&self, slot: u32) -> PathBuf {
        slot_path(&self.dir, &self.queue.name, slot)
    }

    /// Whether entry `e` is held by anyone: a process's while its ticket's lock is held, a
    /// server's while its run is prepared and not started.
    fn alive(&self, home: &Path, e: &Entry) -> bool {
        match e.holder {
            Holder::Process => held(&self.slot_path(e.slot)),
            Holder::Server => {
                let run = home.join("runs").join(&e.run);
                run.join(session::SUBMISSION_FILE).exists()
                    && !run.join(oracle_runtime::paths::LOG_FILE).exists()
            }
        }
    }

    /// Drops every entry nobody holds any more (the run lists look at every one).
    fn prune(&mut self, home: &Path) {
        let dead: Vec<u64> = self
            .state
            .entries
            .iter()
            .filter(|e| !self.alive(home, e))
            .map(|e| e.ticket)
            .collect();
        self.state.entries.retain(|e| !dead.contains(&e.ticket));
    }

    /// What may start now, with dead entries dropped where they would matter: among those
    /// picked (ahead of every other), and among those started when nothing can start. So a
    /// decision checks a few entries, not every one of a long queue.
    fn pick_live(&mut self, home: &Path, now_ms: u64) -> order::Pick {
        loop {
            let pick = order::pick(&self.queue.limits(), &self.waiting(), &self.load(), now_ms);
            let suspects: Vec<u64> = if pick.start.is_empty() && pick.retry_at_ms.is_none() {
                let started = self.state.entries.iter().filter(|e| e.started);
                started.map(|e| e.ticket).collect()
            } else {
                pick.start.clone()
            };
            let dead: Vec<u64> = self
                .state
                .entries
                .iter()
                .filter(|e| suspects.contains(&e.ticket) && !self.alive(home, e))
                .map(|e| e.ticket)
                .collect();
            if dead.is_empty() {
                return pick;
            }
            self.state.entries.retain(|e| !dead.contains(&e.ticket));
        }
    }

    /// The lowest ticket file no entry names.
    fn free_slot(&self) -> u32 {
        let used: std::collections::BTreeSet<u32> = self
            .state
            .entries
            .iter()
            .filter(|e| e.holder == Holder::Process)
            .map(|e| e.slot)
            .collect();
        (0..).find(|s| !used.contains(s)).unwrap_or(0)
    }

    fn save(&mut self) -> Result<(), HostError> {
        use std::io::{Seek, Write};
        let path = self.dir.join(format!("{}.state", self.queue.name));
        // Partitions' turns kept at most SERVED_MAX: those served longest ago are dropped
        // first, which changes no order (never served counts as longest ago, and they were).
        if self.state.served.len() > SERVED_MAX {
            let mut rounds: Vec<u64> = self.state.served.values().copied().collect();
            rounds.sort_unstable();
            let cut = rounds[rounds.len() - SERVED_MAX];
            self.state.served.retain(|_, r| *r >= cut);
        }
        let text = serde_json::to_vec(&self.state)
            .map_err(|e| bad("queue_invalid", format!("{}: {e}", path.display())))?;
        let len = u64::try_from(text.len()).unwrap_or(u64::MAX);
        self.file.rewind().map_err(io(&path))?;
        self.file.write_all(&text).map_err(io(&path))?;
        self.file.set_len(len).map_err(io(&path))
    }

    fn waiting(&self) -> Vec<order::Waiting> {
        self.state
            .entries
            .iter()
            .filter(|e| !e.started)
            .map(|e| order::Waiting {
                ticket: e.ticket,
                priority: e.priority,
                partition: e.partition.clone(),
            })
            .collect()
    }

    fn load(&self) -> order::Load {
        let mut running = BTreeMap::new();
        for e in self.state.entries.iter().filter(|e| e.started) {
            *running.entry(e.partition.clone()).or_insert(0) += 1;
        }
        order::Load {
            running,
            starts_ms: self.state.starts_ms.clone(),
            served: self.state.served.clone(),
            round: self.state.round,
        }
    }

    /// Adds `run` as a new waiting entry; its ticket.
    fn enqueue(&mut self, ask: &Ask, run: &str, holder: Holder) -> Result<(u64, u32), HostError> {
        if self.state.entries.len() >= ENTRIES_MAX {
            return Err(bad(
                "queue_full",
                format!(
                    "queue `{}` holds {ENTRIES_MAX} runs, its most; try again later",
                    self.queue.name
                ),
            ));
        }
        self.state.next_ticket += 1;
        let ticket = self.state.next_ticket;
        let slot = self.free_slot();
        self.state.entries.push(Entry {
            ticket,
            run: run.to_owned(),
            priority: ask.priority,
            partition: ask.partition.clone().unwrap_or_default(),
            started: false,
            holder,
            slot,
        });
        Ok((ticket, slot))
    }

    /// Marks `ticket` started at `now_ms`, held by this process from now on (through ticket
    /// file `slot`).
    fn start(&mut self, ticket: u64, slot: u32, now_ms: u64) {
        let rate = self.queue.limits().rate;
        let mut load = self.load();
        if let Some(e) = self.state.entries.iter_mut().find(|e| e.ticket == ticket) {
            e.started = true;
            e.holder = Holder::Process;
            e.slot = slot;
            load.started(&e.partition, now_ms, rate);
        }
        self.state.round = load.round;
        self.state.served = load.served;
        self.state.starts_ms = load.starts_ms;
    }

    /// The waiting runs' places, by ticket.
    fn places(&self) -> BTreeMap<u64, u64> {
        order::order(&self.waiting(), &self.load())
            .into_iter()
            .zip(1..)
            .collect()
    }
}

fn slot_path(dir: &Path, queue: &str, slot: u32) -> PathBuf {
    dir.join(format!("{queue}.tickets"))
        .join(format!("{slot}.lock"))
}

fn lock_file(dir: &Path, name: &str) -> Result<File, HostError> {
    let path = dir.join(format!("{name}.lock"));
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io(&path))?;
    f.lock().map_err(io(&path))?;
    Ok(f)
}

/// A queued run a server starts now: its id, its ticket and its place among the drives.
type Turn = (String, Ticket, crate::background::Place);

/// A run's place in a queue, held by this process: while it lives the run waits or runs in
/// the queue; dropped, the place is given back (and if the process dies, its lock is).
pub struct Ticket {
    home: PathBuf,
    queue: String,
    ticket: u64,
    slot: u32,
    /// Started already when it was taken (the queue had room).
    started: bool,
    _held: File,
}

impl Ticket {
    /// Holds ticket `ticket` of `queue` through ticket file `slot` (made if new, and locked:
    /// no live entry names it, so the lock is free).
    fn hold(locked: &Locked, home: &Path, ticket: u64, slot: u32) -> Result<Ticket, HostError> {
        let path = locked.slot_path(slot);
        let open = || {
            fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
        };
        let f = match open() {
            Ok(f) => f,
            Err(_) => {
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent).map_err(io(parent))?;
                }
                open().map_err(io(&path))?
            }
        };
        f.lock().map_err(io(&path))?;
        Ok(Ticket {
            home: home.to_path_buf(),
            queue: locked.queue.name.clone(),
            ticket,
            slot,
            started: false,
            _held: f,
        })
    }

    /// Waits until the queue lets this ticket start, then marks it started. `waiting` is told
    /// the ticket's place each time it changes (1 is next).
    pub fn wait(&self, waiting: &mut dyn FnMut(u64)) -> Result<(), HostError> {
        if self.started {
            return Ok(());
        }
        let mut told = None;
        loop {
            let mut locked = Locked::take(&self.home, &self.queue)?;
            let now = crate::now_ms();
            let pick = locked.pick_live(&self.home, now);
            if pick.start.contains(&self.ticket) {
                locked.start(self.ticket, self.slot, now);
                return locked.save();
            }
            let place = locked.places().get(&self.ticket).copied().unwrap_or(0);
            drop(locked);
            if told != Some(place) {
                waiting(place);
                told = Some(place);
            }
            let sleep = pick
                .retry_at_ms
                .map_or(POLL_MS, |at| at.saturating_sub(now).clamp(1, POLL_MS));
            std::thread::sleep(std::time::Duration::from_millis(sleep));
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Given back at once; if this fails, the lock let go when the file closes says the
        // same to the next look.
        if let Ok(mut locked) = Locked::take(&self.home, &self.queue) {
            locked.state.entries.retain(|e| e.ticket != self.ticket);
            let _ = locked.save();
        }
    }
}

impl Home {
    fn queues_dir(&self) -> PathBuf {
        self.dir().join(QUEUES_DIR)
    }

    /// Makes queue `q.name`, or changes its limits (`oracle queue set`); runs already started
    /// keep their places, waiting runs are decided by the new limits from now on.
    pub fn queue_set(&self, q: Queue) -> Result<Queue, HostError> {
        q.check()?;
        let dir = self.queues_dir();
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = dir.join(format!("{}.json", q.name));
        if !path.exists() && self.queue_names()?.len() >= QUEUES_MAX {
            return Err(bad(
                "queue_invalid",
                format!("this home has {QUEUES_MAX} queues, its most"),
            ));
        }
        let _lock = lock_file(&dir, &q.name)?;
        let text =
            serde_json::to_string_pretty(&q).map_err(|e| bad("queue_invalid", e.to_string()))?;
        write_atomic(&path, format!("{text}\n").as_bytes())?;
        Ok(q)
    }

    fn queue_names(&self) -> Result<Vec<String>, HostError> {
        let dir = self.queues_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&dir)(e)),
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".json").map(str::to_owned)
            })
            .filter(|n| check_name(n).is_ok())
            .take(QUEUES_MAX)
            .collect();
        names.sort();
        Ok(names)
    }

    /// Every queue of the home with its runs started and waiting, by name.
    pub fn queues(&self) -> Result<Vec<QueueView>, HostError> {
        let mut out = Vec::new();
        for name in self.queue_names()? {
            let mut locked = Locked::take(self.dir(), &name)?;
            locked.prune(self.dir());
            let running = locked.state.entries.iter().filter(|e| e.started).count();
            let waiting = locked.state.entries.len() - running;
            out.push(QueueView {
                queue: locked.queue.clone(),
                running: running as u64,
                waiting: waiting as u64,
            });
        }
        Ok(out)
    }

    /// Checks that `ask`'s queue exists (an unknown one is `queue_unknown`).
    pub fn queue_check(&self, ask: &Ask) -> Result<(), HostError> {
        read_queue(&self.queues_dir(), &ask.queue).map(|_| ())
    }

    /// Every run waiting in a queue of this home, with its place.
    pub fn queued(&self) -> Result<BTreeMap<String, Place>, HostError> {
        let mut out = BTreeMap::new();
        for name in self.queue_names()? {
            let mut locked = Locked::take(self.dir(), &name)?;
            locked.prune(self.dir());
            let places = locked.places();
            for e in locked.state.entries.iter().filter(|e| !e.started) {
                out.insert(
                    e.run.clone(),
                    Place {
                        queue: name.clone(),
                        position: places.get(&e.ticket).copied().unwrap_or(0),
                        priority: e.priority,
                        partition: (!e.partition.is_empty()).then(|| e.partition.clone()),
                    },
                );
            }
        }
        Ok(out)
    }

    /// Puts prepared run `run` in `ask`'s queue, held by this process: the ticket waits for
    /// its turn ([`Ticket::wait`]) and gives its place back when dropped.
    pub fn queue_take(&self, ask: &Ask, run: &str) -> Result<Ticket, HostError> {
        let mut locked = Locked::take(self.dir(), &ask.queue)?;
        let (ticket, slot) = locked.enqueue(ask, run, Holder::Process)?;
        let mut held = Ticket::hold(&locked, self.dir(), ticket, slot)?;
        // Its turn at once when the queue has room: one look fewer.
        let now = crate::now_ms();
        if locked.pick_live(self.dir(), now).start.contains(&ticket) {
            locked.start(ticket, slot, now);
            held.started = true;
        }
        let saved = locked.save();
        // The queue's lock is let go before a ticket can be dropped: dropping one takes it.
        drop(locked);
        saved.map(|()| held)
    }

    /// Starts a run in a queue (`oracle run --queue`): everything [`Home::start`] checks and
    /// writes before the first event happens first (the run is `queued`, with its place, in
    /// the run lists), then it waits for its turn, telling `waiting` its place each time it
    /// changes, and is driven as `start` drives it; its place is given back when it ends.
    pub fn start_queued(
        &self,
        opts: StartOptions,
        given: &Given,
        tool_dirs: Vec<PathBuf>,
        ask: &Ask,
        waiting: &mut dyn FnMut(u64),
        progress: &mut dyn FnMut(&oracle_runtime::engine::Progress),
    ) -> Result<Start<Session>, HostError> {
        self.queue_check(ask)?;
        let (durability, scorer, points) =
            (opts.durability, opts.scorer.clone(), opts.resume_points);
        let (prepared, registry) = match self.prepare_bound(opts, given, tool_dirs)? {
            (Start::New(p), r) => (p, r),
            (Start::Existing(e), _) => return Ok(Start::Existing(e)),
        };
        let ticket = self.queue_take(ask, &prepared.id)?;
        ticket.wait(waiting)?;
        let session = session::start_prepared(
            self.dir(),
            &prepared.id,
            self.writing(durability),
            &registry,
            scorer,
            self.points(points),
            progress,
        )?;
        drop(ticket);
        self.note_timer(&session);
        Ok(Start::New(session))
    }
}

/// Every run waiting in a queue of `home`, with its place (for the run lists). A queue whose
/// files cannot be read shows no places: a list never fails on a queue.
pub fn places(home: &Path) -> BTreeMap<String, Place> {
    Home::open(home)
        .and_then(|h| h.queued())
        .unwrap_or_default()
}

/// The run lists' rows with every run waiting in a queue shown `queued`, its place as the
/// reason (`position 2 in queue nightly`). A run has this status only while it is prepared
/// and waits: once started it is listed by its log as any other.
pub fn mark(places: &BTreeMap<String, Place>, runs: &mut [session::RunInfo]) {
    for r in runs.iter_mut().filter(|r| r.status == "submitted") {
        if let Some(p) = places.get(&r.id) {
            r.status = QUEUED.into();
            r.reason = Some(p.reason());
        }
    }
}

/// The status of a run waiting in a queue.
pub const QUEUED: &str = "queued";

impl Place {
    /// `position 2 in queue nightly`, as the run lists print it.
    pub fn reason(&self) -> String {
        format!("position {} in queue {}", self.position, self.queue)
    }
}

/// The refusal of a queue for a kind of run that does not wait in one yet (`queue_invalid`).
pub fn not_yet(what: &str) -> HostError {
    bad(
        "queue_invalid",
        format!("{what} does not wait in a queue yet; nothing was created"),
    )
}

impl Home {
    /// Prepares the run `request` asks for and puts it in its queue for a server to start
    /// (`POST /api/v1/runs` with a `queue` on a file home): admitted and checked as every
    /// requested run is, nothing created on a refusal. It waits, `queued`, while no server
    /// of the home has a place for it; [`Home::queue_dispatch`] starts it in its turn.
    pub fn enqueue_request(
        &self,
        request: crate::request::RunRequest,
        root: Option<&Path>,
        given: &Given,
        ask: &Ask,
    ) -> Result<Start<session::Prepared>, HostError> {
        self.queue_check(ask)?;
        let (root, tool_dirs) = request.admit(root)?;
        let opts = request.options(self.dir(), &root)?;
        self.enqueue_options(opts, given, tool_dirs, ask)
    }

    /// Prepares the run of `opts` (checked as every new run is) and puts it in `ask`'s queue
    /// for a server to start in its turn (a request, a schedule's tick).
    pub fn enqueue_options(
        &self,
        opts: StartOptions,
        given: &Given,
        tool_dirs: Vec<PathBuf>,
        ask: &Ask,
    ) -> Result<Start<session::Prepared>, HostError> {
        self.queue_check(ask)?;
        let prepared = match self.prepare_submission(opts, given, tool_dirs)? {
            Start::New(p) => p,
            existing => return Ok(existing),
        };
        let mut locked = Locked::take(self.dir(), &ask.queue)?;
        locked.enqueue(ask, &prepared.id, Holder::Server)?;
        locked.save()?;
        Ok(Start::New(prepared))
    }

    /// Starts in `bg` every run a server holds in a queue of this home whose turn it is (a
    /// server's wheel calls it, and every start through the API), each driven as a worker
    /// drives a submitted run; its outcome goes to `bg`'s log. The runs started.
    pub fn queue_dispatch(&self, bg: &crate::Background) -> Result<Vec<String>, HostError> {
        let mut started = Vec::new();
        for name in self.queue_names()? {
            let mut locked = Locked::take(self.dir(), &name)?;
            let now = crate::now_ms();
            let pick = locked.pick_live(self.dir(), now);
            let (go, held) = self.take_turns(&mut locked, bg, &pick.start, now);
            let saved = if go.is_empty() { Ok(()) } else { locked.save() };
            // The queue's lock is let go before a ticket can be dropped: dropping one takes it.
            drop(locked);
            saved?;
            held?;
            for (run, ticket, place) in go {
                self.drive_queued(bg, &run, ticket, place)?;
                started.push(run);
            }
        }
        Ok(started)
    }

    /// The runs a server holds among `picked`, each marked started with its ticket and a place
    /// of `bg` (as many as `bg` has), and whether holding a ticket failed.
    fn take_turns(
        &self,
        locked: &mut Locked,
        bg: &crate::Background,
        picked: &[u64],
        now: u64,
    ) -> (Vec<Turn>, Result<(), HostError>) {
        let mut go = Vec::new();
        for &t in picked {
            let Some(e) = locked.state.entries.iter().find(|e| e.ticket == t) else {
                continue;
            };
            // A process's entry: that process takes its own turn.
            if e.holder != Holder::Server {
                continue;
            }
            let Ok(place) = bg.take() else { break };
            let run = e.run.clone();
            let slot = locked.free_slot();
            match Ticket::hold(locked, self.dir(), t, slot) {
                Ok(ticket) => {
                    locked.start(t, slot, now);
                    go.push((run, ticket, place));
                }
                Err(e) => return (go, Err(e)),
            }
        }
        (go, Ok(()))
    }

    /// Drives queued run `run` on a thread of this process, holding `ticket` and `place` until
    /// the drive ends.
    fn drive_queued(
        &self,
        bg: &crate::Background,
        run: &str,
        ticket: Ticket,
        place: crate::background::Place,
    ) -> Result<(), HostError> {
        let (host, id, log) = (self.clone(), run.to_owned(), bg.log().to_owned());
        let queue = ticket.queue.clone();
        std::thread::Builder::new()
            .name(format!("start {id}"))
            .spawn(move || {
                let outcome = host.start_submitted(&id);
                drop(ticket);
                crate::background::log_outcome(
                    &log,
                    &format!("start {id} (queue {queue})"),
                    outcome,
                );
                drop(place);
            })
            .map_err(|e| HostError::Thread(format!("cannot start a thread for {run}: {e}")))?;
        Ok(())
    }
}
