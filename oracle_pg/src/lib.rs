//! Runs stored in PostgreSQL: the shared store behind `oracle submit`, `oracle worker` and
//! every command given `--store postgres://...` (docs/STORE.md).
//!
//! What this crate deliberately does not do:
//! - It never computes a hash or an event. Events are made by the runtime's writer in a
//!   worker's scratch file home and reach the database as their canonical records, the same
//!   bytes as a file home's log line ([`oracle_runtime::replica`]).
//! - It never lets two writers extend a run. Every append compares and sets the run's
//!   `(events, head)` under the run's fencing token in the transaction that inserts the events;
//!   a worker whose lease was taken over finds its next commit refused.
//! - It never trusts the database's clock with anything hashed: lease expiry is the only use.

pub mod cluster;
mod memory_stores;
mod queues;
mod rates;
mod schedules;
pub use queues::{Pick, QueueAsk, QueueSnapshot};
pub mod schema;

pub use schedules::ScheduleRow;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use oracle_core::record;
use postgres::{Client, NoTls};

/// The file naming a code run's agent (docs/AGENTS.md): in the store it holds the agent's
/// name, never a command; a worker starts the program it was told that name stands for.
pub const CODE_AGENT_FILE: &str = oracle_runtime::code_run::AGENT_FILE;
/// Longest run-directory file the store keeps (a plan, its settings, a kept tool file).
pub const RUN_FILE_BYTES_MAX: u64 = 32 << 20;
/// Most files one run directory may hold in the store.
pub const RUN_FILES_MAX: usize = 1024;
/// The channel workers listen on; a submit, a signal or a released run notifies it.
pub const CHANNEL: &str = "oracle_runs";
/// The channel servers over the store listen on (`oracle serve --store`): a commit that appends
/// events notifies it, so a server mirrors them at once rather than at its next poll. Workers
/// do not listen on it (an append is no work for them).
pub const CHANGES: &str = "oracle_changes";
/// Most events [`Store::events_from`] returns at once: a server mirroring a long run reads it
/// in pages of this many, so one read never holds a whole log.
pub const EVENTS_PAGE_MAX: i64 = 10_000;
/// The environment variable that names the store when `--store` is not given.
pub const STORE_ENV: &str = "ORACLE_STORE";

/// What went wrong talking to the store.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("cannot connect to the store {url}: {}", detail(source))]
    Connect {
        url: String,
        #[source]
        source: postgres::Error,
    },
    #[error("the store: {what}: {}", detail(source))]
    Db {
        what: &'static str,
        #[source]
        source: postgres::Error,
    },
    #[error(
        "the store has no oracle schema: run `oracle store init --store URL` once to create it"
    )]
    NotInitialised,
    #[error(
        "the store's schema is version {found}, newer than this oracle knows ({known}): upgrade oracle before using this store"
    )]
    Newer { found: i32, known: i32 },
    #[error(
        "the store's schema is version {found}, older than this oracle's ({known}): run `oracle store init --store URL` to migrate it"
    )]
    Older { found: i32, known: i32 },
    #[error("no run `{run}` in the store (`oracle runs --store URL` lists them)")]
    NoRun { run: String },
    #[error(
        "run {run}: lease lost: fence {fence} was superseded (another worker took the run over); nothing of this commit was kept"
    )]
    Fenced { run: String, fence: i64 },
    #[error(
        "run {run}: the store holds {events} events, but this commit starts at seq {seq} (or links to another head); nothing was kept"
    )]
    NotNext { run: String, events: i64, seq: u64 },
    #[error("run {run}: record at byte {offset} of a commit: {reason}")]
    BadRecord {
        run: String,
        offset: u64,
        reason: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: {reason}")]
    RunFiles { path: PathBuf, reason: String },
}

pub type Result<T> = std::result::Result<T, PgError>;

/// What PostgreSQL said: the server's message (and its detail), or the client's error with
/// its cause (`postgres::Error` alone displays as "db error").
pub fn detail(e: &postgres::Error) -> String {
    if let Some(d) = e.as_db_error() {
        return match d.detail() {
            Some(more) => format!("{} ({more})", d.message()),
            None => d.message().to_owned(),
        };
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

fn db(what: &'static str) -> impl FnOnce(postgres::Error) -> PgError {
    move |source| PgError::Db { what, source }
}

/// The URL with any password replaced, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Whether `text` names a PostgreSQL store (a `postgres://` or `postgresql://` URL).
pub fn is_store_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

/// A run's row, as `oracle runs --store` lists it.
#[derive(Clone, Debug)]
pub struct RunRow {
    pub id: String,
    pub program: String,
    pub state: String,
    pub events: i64,
    pub head: Option<Vec<u8>>,
    pub fence: i64,
    pub worker: Option<String>,
    /// Milliseconds left on the lease (negative: expired), if one is held.
    pub lease_ms: Option<i64>,
    pub claims: i64,
    pub detail: Option<String>,
    pub pending_signals: i64,
    /// What its log said when a worker last released it (schema version 4).
    pub summary: Summary,
}

/// What a run's log says about it that its row cannot tell otherwise, as a file home's
/// `oracle runs` reads it from the log (`oracle_runtime::session::run_info`): kept in the row
/// by the worker each time it releases the run, so listing runs reads no log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// For a suspended run: the step it waits on and why (a `human.ask`'s question).
    pub waiting: Option<(String, String)>,
    /// For a suspended run: the attempts its step made before it waited.
    pub attempts: i64,
    /// For a failed or cancelled run: why.
    pub reason: Option<String>,
    /// The logical time of the last event.
    pub last_time: i64,
    /// Model calls and tokens, for a run whose plan calls a model.
    pub models: Option<(i64, i64)>,
    /// For a run suspended on a timer (`sleep`, a deadline): when it is due, unix ms (schema
    /// version 7).
    pub wake_at_ms: Option<i64>,
    /// The earliest real-time expiry of the run's pending adjudication requests, unix ms
    /// (schema version 9).
    pub expire_at_ms: Option<i64>,
}

/// Programs a run's drives call, given at submission (`--oracle-cmd`, `--scorer-cmd`): paths
/// on the workers' machines, kept with the run and never hashed or recorded in its log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Programs {
    pub oracle_cmd: Option<String>,
    pub scorer_cmd: Option<String>,
}

/// What a keyed submission did ([`Store::submit_keyed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Stored a new run, this one.
    New(String),
    /// The key started `run` already (now in `state`); nothing was stored. `differs` names what
    /// this submission has that the run's differs in; empty, it is the same run.
    Existing {
        run: String,
        state: String,
        differs: Vec<String>,
    },
}

/// A run a worker now holds.
#[derive(Clone, Debug)]
pub struct Claim {
    pub id: String,
    pub fence: i64,
    pub events: i64,
    /// The state it was claimed from (`submitted`, `runnable`, `running` after a lease expired,
    /// `suspended`, `completed` or `failed` with signals pending).
    pub from: String,
    /// The programs its submission named.
    pub programs: Programs,
}

/// An outside event waiting for the worker that next holds its run.
#[derive(Clone, Debug)]
pub struct Signal {
    pub id: i64,
    pub kind: String,
    pub body: serde_json::Value,
    /// How long it had waited when read, in ms (the database's clock: `now() - sent_at`), for
    /// the worker's signal-latency histogram; never recorded in a log.
    pub waited_ms: i64,
}

/// A connection to the store. Cheap to clone (one connection, shared); not for two threads
/// at once (each worker thread connects its own).
#[derive(Clone)]
pub struct Store {
    client: Arc<Mutex<Client>>,
    url: String,
}

impl Store {
    /// Connects and checks the schema version.
    pub fn connect(url: &str) -> Result<Store> {
        let store = Store::connect_unchecked(url)?;
        let found = store.version()?;
        match found {
            None => Err(PgError::NotInitialised),
            Some(v) if v > schema::VERSION => Err(PgError::Newer {
                found: v,
                known: schema::VERSION,
            }),
            Some(v) if v < schema::VERSION => Err(PgError::Older {
                found: v,
                known: schema::VERSION,
            }),
            Some(_) => Ok(store),
        }
    }

    /// Connects without looking at the schema (for `oracle store init`).
    pub fn connect_unchecked(url: &str) -> Result<Store> {
        let client = Client::connect(url, NoTls).map_err(|source| PgError::Connect {
            url: redact(url),
            source,
        })?;
        Ok(Store {
            client: Arc::new(Mutex::new(client)),
            url: url.to_owned(),
        })
    }

    /// Whether `other` is this very connection (a clone of it), not another to the same store.
    pub fn same(&self, other: &Store) -> bool {
        Arc::ptr_eq(&self.client, &other.client)
    }

    /// The URL this store was opened with (password included: never print it; see [`redact`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    fn client(&self) -> std::sync::MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The schema version, or `None` for a database never initialised.
    pub fn version(&self) -> Result<Option<i32>> {
        let mut c = self.client();
        let exists = c
            .query_one("SELECT to_regclass('oracle_schema') IS NOT NULL", &[])
            .map_err(db("reading the schema version"))?
            .get::<_, bool>(0);
        if !exists {
            return Ok(None);
        }
        let row = c
            .query_one("SELECT version FROM oracle_schema", &[])
            .map_err(db("reading the schema version"))?;
        Ok(Some(row.get(0)))
    }

    /// Applies the migrations the database lacks, each in its own transaction, under an
    /// advisory lock so that two `init`s cannot race. Returns the versions before and after.
    pub fn init(&self) -> Result<(i32, i32)> {
        let before = self.version()?.unwrap_or(0);
        if before > schema::VERSION {
            return Err(PgError::Newer {
                found: before,
                known: schema::VERSION,
            });
        }
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("starting a migration"))?;
        // One key for "oracle schema migration"; held to the end of the transaction.
        tx.execute("SELECT pg_advisory_xact_lock(7242390318)", &[])
            .map_err(db("locking for a migration"))?;
        let exists: bool = tx
            .query_one("SELECT to_regclass('oracle_schema') IS NOT NULL", &[])
            .map_err(db("reading the schema version"))?
            .get(0);
        let mut version: i32 = if exists {
            tx.query_one("SELECT version FROM oracle_schema", &[])
                .map_err(db("reading the schema version"))?
                .get(0)
        } else {
            0
        };
        while (version as usize) < schema::MIGRATIONS.len() {
            tx.batch_execute(schema::MIGRATIONS[version as usize])
                .map_err(db("applying a migration"))?;
            version += 1;
            tx.execute("UPDATE oracle_schema SET version = $1", &[&version])
                .map_err(db("recording the schema version"))?;
        }
        tx.commit().map_err(db("committing a migration"))?;
        Ok((before, version))
    }

    /// Stores a prepared run directory (no log yet) as a new submitted run of `program`, and
    /// wakes the workers. Returns its id, `<program>-<n>` with `n` from the store's sequence.
    pub fn submit(&self, program: &str, dir: &Path, programs: &Programs) -> Result<String> {
        match self.submit_keyed(program, dir, programs, None)? {
            Submitted::New(id) => Ok(id),
            // Invariant: without a key, no run is found.
            Submitted::Existing { run, .. } => Ok(run),
        }
    }

    /// [`Store::submit`] with an idempotency key: when `key` started a run already, nothing is
    /// stored and that run is returned with what differs between the two submissions (`plan`,
    /// `inputs`, `seed`; nothing: the same run). The key's row is written in the submission's
    /// transaction under an advisory lock on the key, so submissions racing on one key store
    /// one run.
    pub fn submit_keyed(
        &self,
        program: &str,
        dir: &Path,
        programs: &Programs,
        key: Option<&oracle_runtime::keys::KeyClaim>,
    ) -> Result<Submitted> {
        self.submit_queued(program, dir, programs, key, None)
    }

    /// [`Store::submit_keyed`], the run waiting in `queue` when given: its queue, priority and
    /// partition are written in the submission's transaction, so no worker claims it but
    /// through its queue ([`Store::claim_queued`]).
    pub fn submit_queued(
        &self,
        program: &str,
        dir: &Path,
        programs: &Programs,
        key: Option<&oracle_runtime::keys::KeyClaim>,
        queue: Option<&QueueAsk<'_>>,
    ) -> Result<Submitted> {
        let files = read_run_files(dir)?;
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("submitting a run"))?;
        if let Some(want) = key
            && let Some(existing) = key_holder(&mut tx, want)?
        {
            return Ok(existing);
        }
        let id = new_run(&mut tx, program, "submitted", &files)?;
        if let Some(k) = key {
            tx.execute(
                "INSERT INTO run_keys (key, run, plan, inputs, seed) VALUES ($1, $2, $3, $4, $5)",
                &[
                    &k.key,
                    &id,
                    &k.plan.0.as_slice(),
                    &k.inputs.0.as_slice(),
                    &k.seed.to_string(),
                ],
            )
            .map_err(db("storing an idempotency key"))?;
        }
        tx.execute(
            "UPDATE runs SET oracle_cmd = $2, scorer_cmd = $3 WHERE id = $1",
            &[&id, &programs.oracle_cmd, &programs.scorer_cmd],
        )
        .map_err(db("submitting a run"))?;
        if let Some(q) = queue {
            tx.execute(
                "UPDATE runs SET queue = $2, priority = $3, partition_key = $4 WHERE id = $1",
                &[&id, &q.queue, &q.priority, &q.partition],
            )
            .map_err(db("submitting a run to its queue"))?;
        }
        tx.execute(&format!("NOTIFY {CHANNEL}"), &[])
            .map_err(db("waking workers"))?;
        tx.commit().map_err(db("submitting a run"))?;
        Ok(Submitted::New(id))
    }

    /// Stores a verified log (`oracle import LOG --store`) as a new run of `program` at rest in
    /// `state` (with `detail`), with the files of `dir` (none but the log, for an import).
    /// Returns its id. One transaction: the run appears whole or not at all.
    pub fn import(
        &self,
        program: &str,
        dir: &Path,
        records: &[u8],
        state: &str,
        detail: Option<&str>,
        summary: &Summary,
    ) -> Result<String> {
        let files = read_run_files(dir)?;
        let parsed = parse_records(program, records)?;
        let ok = parsed
            .first()
            .is_some_and(|r| r.seq == 0 && r.prev == [0; 32]);
        if !ok {
            return Err(PgError::BadRecord {
                run: program.to_owned(),
                offset: 0,
                reason: "an import must start at seq 0".into(),
            });
        }
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("importing a run"))?;
        let id = new_run(&mut tx, program, state, &files)?;
        insert_events(&mut tx, &id, &parsed, records, 0)?;
        let head: Option<&[u8]> = parsed.last().map(|r| r.hash.as_slice());
        let events = parsed.len() as i64;
        tx.execute(
            "UPDATE runs SET events = $2, head = $3, detail = $4 WHERE id = $1",
            &[&id, &events, &head, &detail],
        )
        .map_err(db("importing a run"))?;
        set_summary(&mut tx, &id, summary)?;
        tx.commit().map_err(db("importing a run"))?;
        Ok(id)
    }

    /// Takes the next runnable run: submitted, released, suspended or at rest with a signal
    /// pending, or running under an expired lease (its worker died). `FOR UPDATE SKIP LOCKED`:
    /// workers claiming at once take different runs, and none waits on another.
    pub fn claim(&self, worker: &str, lease_ms: i64) -> Result<Option<Claim>> {
        self.claim_for(worker, lease_ms, &[], &[])
    }

    /// [`Store::claim`] for a worker told about the code agents named `agents`: a code run
    /// (one whose files hold [`CODE_AGENT_FILE`]) is claimed only when its program's name is
    /// one of them, so a worker never claims a run whose program it cannot start; and never one
    /// of `skip` (runs this worker already found it cannot drive, docs/STORE.md "Code agents").
    pub fn claim_for(
        &self,
        worker: &str,
        lease_ms: i64,
        agents: &[String],
        skip: &[String],
    ) -> Result<Option<Claim>> {
        let mut c = self.client();
        let row = c
            .query_opt(
                "WITH next AS (
                   SELECT id, state FROM runs
                   WHERE ((state = 'submitted' AND queue IS NULL) OR state = 'runnable'
                      OR (state = 'running' AND lease_until < now())
                      OR (state IN ('suspended', 'completed', 'failed', 'cancelled') AND EXISTS
                           (SELECT 1 FROM signals s WHERE s.run = runs.id AND s.outcome IS NULL)))
                     AND (program = ANY($4) OR NOT EXISTS
                           (SELECT 1 FROM run_files f WHERE f.run = runs.id AND f.path = $3))
                     AND NOT (id = ANY($5))
                   ORDER BY number
                   FOR UPDATE SKIP LOCKED
                   LIMIT 1)
                 UPDATE runs r SET state = 'running', worker = $1, fence = r.fence + 1,
                   lease_until = now() + $2 * interval '1 millisecond', claims = r.claims + 1,
                   updated_at = now()
                 FROM next WHERE r.id = next.id
                 RETURNING r.id, r.fence, r.events, next.state, r.oracle_cmd, r.scorer_cmd",
                &[
                    &worker,
                    &(lease_ms as f64),
                    &CODE_AGENT_FILE,
                    &agents,
                    &skip,
                ],
            )
            .map_err(db("claiming a run"))?;
        Ok(row.map(|r| Claim {
            id: r.get(0),
            fence: r.get(1),
            events: r.get(2),
            from: r.get(3),
            programs: Programs {
                oracle_cmd: r.get(4),
                scorer_cmd: r.get(5),
            },
        }))
    }

    /// How many runs a worker could claim now (the condition of [`Store::claim`]): the queue
    /// depth `oracle worker --metrics` shows.
    pub fn queue_depth(&self) -> Result<i64> {
        let row = self
            .client()
            .query_one(
                "SELECT count(*) FROM runs
                 WHERE state IN ('submitted', 'runnable')
                    OR (state = 'running' AND lease_until < now())
                    OR (state IN ('suspended', 'completed', 'failed', 'cancelled') AND EXISTS
                         (SELECT 1 FROM signals s WHERE s.run = runs.id AND s.outcome IS NULL))",
                &[],
            )
            .map_err(db("counting runnable runs"))?;
        Ok(row.get(0))
    }

    /// Extends the lease on a held run. `false`: the lease is no longer this worker's.
    pub fn renew(&self, run: &str, fence: i64, lease_ms: i64) -> Result<bool> {
        let n = self
            .client()
            .execute(
                "UPDATE runs SET lease_until = now() + $3 * interval '1 millisecond'
                 WHERE id = $1 AND fence = $2 AND state = 'running'",
                &[&run, &fence, &(lease_ms as f64)],
            )
            .map_err(db("renewing a lease"))?;
        Ok(n == 1)
    }

    /// Lets go of a held run, leaving it in `state` (with `detail`, and what its log says,
    /// `summary`, when it could be read), and wakes the workers if it can be taken again.
    /// `false`: the lease was no longer this worker's (nothing changed).
    pub fn release(
        &self,
        run: &str,
        fence: i64,
        state: &str,
        detail: Option<&str>,
        summary: Option<&Summary>,
    ) -> Result<bool> {
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("releasing a run"))?;
        let released = tx
            .query_opt(
                "UPDATE runs SET state = $3, detail = $4, worker = NULL, lease_until = NULL,
                   updated_at = now()
                 WHERE id = $1 AND fence = $2 AND state = 'running'
                 RETURNING queue IS NOT NULL",
                &[&run, &fence, &state, &detail],
            )
            .map_err(db("releasing a run"))?;
        let n = u64::from(released.is_some());
        // A queued run's place is free: a worker waiting on its queue may take the next.
        let queued = released.is_some_and(|r| r.get::<_, bool>(0));
        if n == 1
            && let Some(summary) = summary
        {
            set_summary(&mut tx, run, summary)?;
        }
        if n == 1 && (queued || matches!(state, "runnable" | "submitted")) {
            tx.execute(&format!("NOTIFY {CHANNEL}"), &[])
                .map_err(db("waking workers"))?;
        }
        tx.commit().map_err(db("releasing a run"))?;
        Ok(n == 1)
    }

    /// Writes run `run` into `home` as a file home would hold it: `<home>/runs/<run>/` with its
    /// files and its log (`events.jsonl`, the records in seq order). Returns the directory.
    pub fn hydrate(&self, run: &str, home: &Path) -> Result<PathBuf> {
        let mut c = self.client();
        let mut tx = c
            .build_transaction()
            .read_only(true)
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .start()
            .map_err(db("reading a run"))?;
        let exists = tx
            .query_opt("SELECT 1 FROM runs WHERE id = $1", &[&run])
            .map_err(db("reading a run"))?
            .is_some();
        if !exists {
            return Err(PgError::NoRun {
                run: run.to_owned(),
            });
        }
        let dir = home.join("runs").join(run);
        std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        for row in tx
            .query(
                "SELECT path, bytes FROM run_files WHERE run = $1 ORDER BY path",
                &[&run],
            )
            .map_err(db("reading a run's files"))?
        {
            let path: String = row.get(0);
            let bytes: Vec<u8> = row.get(1);
            let target = safe_join(&dir, &path)?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(io_at(parent))?;
            }
            std::fs::write(&target, bytes).map_err(io_at(&target))?;
        }
        // Streamed row by row into the file: a long run's log never sits in memory whole.
        let path = dir.join(oracle_runtime::paths::LOG_FILE);
        let mut written = 0u64;
        {
            use postgres::fallible_iterator::FallibleIterator;
            use std::io::Write;
            let mut rows = tx
                .query_raw(
                    "SELECT record FROM events WHERE run = $1 ORDER BY seq",
                    [&run as &(dyn postgres::types::ToSql + Sync)],
                )
                .map_err(db("reading a run's events"))?;
            let mut out: Option<std::io::BufWriter<std::fs::File>> = None;
            while let Some(row) = rows.next().map_err(db("reading a run's events"))? {
                let w = match &mut out {
                    Some(w) => w,
                    None => out.insert(std::io::BufWriter::with_capacity(
                        1 << 20,
                        std::fs::File::create(&path).map_err(io_at(&path))?,
                    )),
                };
                let record: &[u8] = row.get(0);
                w.write_all(record).map_err(io_at(&path))?;
                written += record.len() as u64;
            }
            // Not synced: a scratch copy, rewritten from the store after any crash.
            if let Some(mut w) = out {
                w.flush().map_err(io_at(&path))?;
            }
        }
        let mut checkpoints = String::new();
        for row in tx
            .query(
                "SELECT line FROM checkpoints WHERE run = $1 ORDER BY id",
                &[&run],
            )
            .map_err(db("reading a run's checkpoints"))?
        {
            checkpoints.push_str(row.get::<_, &str>(0));
            checkpoints.push('\n');
        }
        tx.commit().map_err(db("reading a run"))?;
        if !checkpoints.is_empty() {
            let path = dir.join(oracle_runtime::paths::CHECKPOINTS_FILE);
            std::fs::write(&path, checkpoints).map_err(io_at(&path))?;
        }
        debug_assert!(written > 0 || !path.exists());
        Ok(dir)
    }

    /// Adds the files a drive left in a run's directory that the store lacks (a kept MCP
    /// listing, say). Files already stored are never replaced.
    pub fn upload_files(&self, run: &str, fence: i64, dir: &Path) -> Result<()> {
        let files = read_run_files(dir)?;
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("storing a run's files"))?;
        let held = tx
            .query_opt(
                "SELECT 1 FROM runs WHERE id = $1 AND fence = $2 FOR UPDATE",
                &[&run, &fence],
            )
            .map_err(db("storing a run's files"))?
            .is_some();
        if !held {
            return Err(PgError::Fenced {
                run: run.to_owned(),
                fence,
            });
        }
        for (path, bytes) in &files {
            tx.execute(
                "INSERT INTO run_files (run, path, bytes) VALUES ($1, $2, $3)
                 ON CONFLICT (run, path) DO NOTHING",
                &[&run, path, bytes],
            )
            .map_err(db("storing a run's files"))?;
        }
        tx.commit().map_err(db("storing a run's files"))?;
        Ok(())
    }

    /// The signed checkpoint lines of `run`, oldest first.
    pub fn checkpoints(&self, run: &str) -> Result<Vec<String>> {
        let rows = self
            .client()
            .query(
                "SELECT line FROM checkpoints WHERE run = $1 ORDER BY id",
                &[&run],
            )
            .map_err(db("reading a run's checkpoints"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Adds signed checkpoint lines to `run` (made and checked by `oracle checkpoint` against
    /// the run's log as the store holds it).
    pub fn add_checkpoints(&self, run: &str, lines: &[String]) -> Result<()> {
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("adding checkpoints"))?;
        for line in lines {
            tx.execute(
                "INSERT INTO checkpoints (run, line) VALUES ($1, $2)",
                &[&run, line],
            )
            .map_err(db("adding checkpoints"))?;
        }
        tx.commit().map_err(db("adding checkpoints"))?;
        Ok(())
    }

    /// Appends whole records to `run` under lease `fence`: all of them in one transaction, or
    /// none. Refused unless the lease is still `fence` and the records continue the stored log
    /// exactly (their first seq is the stored count, their first `prev` the stored head, and
    /// each links to the one before). With `consume`, that pending signal is marked applied,
    /// recorded at the first of these events, in the same transaction.
    pub fn append(
        &self,
        run: &str,
        fence: i64,
        records: &[u8],
        consume: Option<i64>,
    ) -> Result<()> {
        self.append_with_points(run, fence, records, consume, &[])
            .map(|_| ())
    }

    /// [`Store::append`], keeping in the same transaction the resume points `points` (seq and
    /// body) whose events the store then holds, and only the newest
    /// [`oracle_runtime::resume_point::KEPT_MAX`] of the run's. Returns the seqs kept (a point
    /// past the stored log waits for the commit that stores its event).
    pub fn append_with_points(
        &self,
        run: &str,
        fence: i64,
        records: &[u8],
        consume: Option<i64>,
        points: &[(u64, Vec<u8>)],
    ) -> Result<Vec<u64>> {
        let parsed = parse_records(run, records)?;
        if parsed.is_empty() && points.is_empty() {
            return Ok(Vec::new());
        }
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("appending events"))?;
        let row = tx
            .query_opt(
                "SELECT fence, events, head FROM runs WHERE id = $1 FOR UPDATE",
                &[&run],
            )
            .map_err(db("appending events"))?
            .ok_or_else(|| PgError::NoRun {
                run: run.to_owned(),
            })?;
        let (held, events, head): (i64, i64, Option<Vec<u8>>) =
            (row.get(0), row.get(1), row.get(2));
        if held != fence {
            return Err(PgError::Fenced {
                run: run.to_owned(),
                fence,
            });
        }
        // The log's length once this commit is kept (a commit of resume points alone, written
        // after the events they follow were committed, adds none).
        let mut count = events;
        if let (Some(first), Some(last)) = (parsed.first(), parsed.last()) {
            let head = head.unwrap_or_else(|| vec![0; 32]);
            if first.seq != events as u64 || first.prev.as_slice() != head.as_slice() {
                return Err(PgError::NotNext {
                    run: run.to_owned(),
                    events,
                    seq: first.seq,
                });
            }
            insert_events(&mut tx, run, &parsed, records, fence)?;
            count = last.seq as i64 + 1;
            tx.execute(
                "UPDATE runs SET events = $2, head = $3, updated_at = now() WHERE id = $1",
                &[&run, &count, &last.hash.as_slice()],
            )
            .map_err(db("appending events"))?;
            tx.execute(&format!("NOTIFY {CHANGES}"), &[])
                .map_err(db("telling servers of appended events"))?;
            if let Some(signal) = consume {
                let seq = first.seq as i64;
                tx.execute(
                    "UPDATE signals SET outcome = 'applied', seq = $2 WHERE id = $1 AND outcome IS NULL",
                    &[&signal, &seq],
                )
                .map_err(db("marking a signal applied"))?;
            }
        }
        let mut kept = Vec::new();
        for (seq, body) in points.iter().filter(|(seq, _)| (*seq as i64) < count) {
            // The anchor is the stored event's hash: a point names the event it follows.
            tx.execute(
                "INSERT INTO snapshots (run, seq, bytes, hash)
                 SELECT $1, $2, $3, e.hash FROM events e WHERE e.run = $1 AND e.seq = $2
                 ON CONFLICT (run, seq) DO NOTHING",
                &[&run, &(*seq as i64), body],
            )
            .map_err(db("keeping a resume point"))?;
            kept.push(*seq);
        }
        if !kept.is_empty() {
            let newest = oracle_runtime::resume_point::KEPT_MAX as i64;
            tx.execute(
                "DELETE FROM snapshots WHERE run = $1 AND seq NOT IN
                   (SELECT seq FROM snapshots WHERE run = $1 ORDER BY seq DESC LIMIT $2)",
                &[&run, &newest],
            )
            .map_err(db("keeping a resume point"))?;
        }
        tx.commit().map_err(db("committing appended events"))?;
        Ok(kept)
    }

    /// The resume points of `run` (seq and body), oldest first: only those whose anchor is
    /// still the stored event at their seq. What else a point claims is checked by the runtime
    /// when a resume reads it, as any resume point is.
    pub fn points(&self, run: &str) -> Result<Vec<(u64, Vec<u8>)>> {
        let rows = self
            .client()
            .query(
                "SELECT s.seq, s.bytes FROM snapshots s
                 JOIN events e ON e.run = s.run AND e.seq = s.seq AND e.hash = s.hash
                 WHERE s.run = $1 ORDER BY s.seq",
                &[&run],
            )
            .map_err(db("reading a run's resume points"))?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, i64>(0) as u64, r.get(1)))
            .collect())
    }

    /// Replaces one of a held run's files (a file a drive rewrites, such as the notification
    /// outbox). Only while `fence` holds the run.
    pub fn put_file(&self, run: &str, fence: i64, path: &str, bytes: &[u8]) -> Result<()> {
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("storing a run's file"))?;
        let held = tx
            .query_opt(
                "SELECT 1 FROM runs WHERE id = $1 AND fence = $2 FOR UPDATE",
                &[&run, &fence],
            )
            .map_err(db("storing a run's file"))?
            .is_some();
        if !held {
            return Err(PgError::Fenced {
                run: run.to_owned(),
                fence,
            });
        }
        tx.execute(
            "INSERT INTO run_files (run, path, bytes) VALUES ($1, $2, $3)
             ON CONFLICT (run, path) DO UPDATE SET bytes = EXCLUDED.bytes",
            &[&run, &path, &bytes],
        )
        .map_err(db("storing a run's file"))?;
        tx.commit().map_err(db("storing a run's file"))?;
        Ok(())
    }

    /// A replica for the log of `run` held under `fence` ([`oracle_runtime::replica`]): its
    /// commits are [`Store::append`]s; the first one also consumes signal `consume`.
    pub fn replica(&self, run: &str, fence: i64, consume: Option<i64>) -> PgReplica {
        PgReplica {
            store: self.clone(),
            run: run.to_owned(),
            fence,
            consume,
            consumed: None,
            fenced: None,
            points: None,
            kept: std::collections::BTreeSet::new(),
        }
    }

    /// Queues an outside event for `run` and wakes the workers. Returns the signal's id.
    pub fn send(&self, run: &str, kind: &str, body: &serde_json::Value) -> Result<i64> {
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("sending a signal"))?;
        let exists = tx
            .query_opt("SELECT 1 FROM runs WHERE id = $1", &[&run])
            .map_err(db("sending a signal"))?
            .is_some();
        if !exists {
            return Err(PgError::NoRun {
                run: run.to_owned(),
            });
        }
        let id: i64 = tx
            .query_one(
                "INSERT INTO signals (run, kind, body) VALUES ($1, $2, $3) RETURNING id",
                &[&run, &kind, &body.to_string()],
            )
            .map_err(db("sending a signal"))?
            .get(0);
        tx.execute(&format!("NOTIFY {CHANNEL}"), &[])
            .map_err(db("waking workers"))?;
        tx.commit().map_err(db("sending a signal"))?;
        Ok(id)
    }

    /// The signals of `run` still pending, oldest first.
    pub fn pending(&self, run: &str) -> Result<Vec<Signal>> {
        let rows = self
            .client()
            .query(
                "SELECT id, kind, body, (extract(epoch FROM now() - sent_at) * 1000)::bigint
                 FROM signals WHERE run = $1 AND outcome IS NULL ORDER BY id",
                &[&run],
            )
            .map_err(db("reading signals"))?;
        Ok(rows
            .iter()
            .map(|r| Signal {
                id: r.get(0),
                kind: r.get(1),
                body: serde_json::from_str(r.get::<_, &str>(2)).unwrap_or_default(),
                waited_ms: r.get(3),
            })
            .collect())
    }

    /// Settles a pending signal that recorded no event: refused (`outcome` says why) or with
    /// nothing to do. Only while `fence` holds the run.
    pub fn settle(&self, run: &str, fence: i64, signal: i64, outcome: &str) -> Result<bool> {
        let n = self
            .client()
            .execute(
                "UPDATE signals SET outcome = $4 WHERE id = $3 AND run = $1 AND outcome IS NULL
                   AND EXISTS (SELECT 1 FROM runs WHERE id = $1 AND fence = $2)",
                &[&run, &fence, &signal, &outcome],
            )
            .map_err(db("settling a signal"))?;
        Ok(n == 1)
    }

    /// The outcome of signal `id` (`None` while pending) and the seq it was recorded at.
    pub fn signal_outcome(&self, id: i64) -> Result<Option<(String, Option<i64>)>> {
        let row = self
            .client()
            .query_opt("SELECT outcome, seq FROM signals WHERE id = $1", &[&id])
            .map_err(db("reading a signal"))?;
        Ok(row.and_then(|r| r.get::<_, Option<String>>(0).map(|o| (o, r.get(1)))))
    }

    /// Which of `names` are runs in the store.
    pub fn existing(&self, names: &[String]) -> Result<Vec<String>> {
        let rows = self
            .client()
            .query(
                "SELECT id FROM runs WHERE id = ANY($1) ORDER BY id",
                &[&names],
            )
            .map_err(db("looking up runs"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The runs whose first event names `run` as the run that spawned them (a `spawn` step's
    /// children, docs/STORE.md "Child runs"), with their states, by id; at most `limit`.
    pub fn children(&self, run: &str, limit: i64) -> Result<Vec<(String, String)>> {
        let rows = self
            .client()
            .query(
                "SELECT e.run, r.state FROM events e JOIN runs r ON r.id = e.run
                 WHERE e.seq = 0
                   AND convert_from(e.record, 'UTF8')::jsonb #>> '{payload,parent,run}' = $1
                 ORDER BY e.run LIMIT $2",
                &[&run, &limit],
            )
            .map_err(db("looking up a run's children"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Every run, in submission order.
    pub fn runs(&self) -> Result<Vec<RunRow>> {
        self.rows("TRUE", &[])
    }

    /// Run `run`'s row, if the store holds it.
    pub fn run(&self, run: &str) -> Result<Option<RunRow>> {
        Ok(self.rows("id = $1", &[&run])?.pop())
    }

    /// The rows `filter` (an SQL condition over `runs`, its parameters `params`) selects.
    fn rows(
        &self,
        filter: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<RunRow>> {
        let rows = self
            .client()
            .query(
                &format!(
                    "SELECT id, program, state, events, head, fence, worker,
                   (extract(epoch FROM lease_until - now()) * 1000)::bigint, claims, detail,
                   (SELECT count(*) FROM signals s WHERE s.run = runs.id AND s.outcome IS NULL),
                   waiting_step, waiting_reason, attempts, reason, last_time, model_calls,
                   model_tokens, wake_at_ms, expire_at_ms
                 FROM runs WHERE {filter} ORDER BY number"
                ),
                params,
            )
            .map_err(db("listing runs"))?;
        Ok(rows
            .iter()
            .map(|r| RunRow {
                id: r.get(0),
                program: r.get(1),
                state: r.get(2),
                events: r.get(3),
                head: r.get(4),
                fence: r.get(5),
                worker: r.get(6),
                lease_ms: r.get(7),
                claims: r.get(8),
                detail: r.get(9),
                pending_signals: r.get(10),
                summary: Summary {
                    waiting: match (
                        r.get::<_, Option<String>>(11),
                        r.get::<_, Option<String>>(12),
                    ) {
                        (Some(step), reason) => Some((step, reason.unwrap_or_default())),
                        (None, _) => None,
                    },
                    attempts: r.get(13),
                    reason: r.get(14),
                    last_time: r.get(15),
                    models: match (r.get::<_, Option<i64>>(16), r.get::<_, Option<i64>>(17)) {
                        (Some(calls), Some(tokens)) => Some((calls, tokens)),
                        _ => None,
                    },
                    wake_at_ms: r.get(18),
                    expire_at_ms: r.get(19),
                },
            })
            .collect())
    }

    /// Blocks until a notification on [`CHANNEL`] arrives or `timeout_ms` passes (the
    /// fallback poll). `LISTEN` is issued on first use.
    pub fn wait(&self, timeout_ms: u64) -> Result<()> {
        self.wait_on(&[CHANNEL], timeout_ms)
    }

    /// Blocks until a notification on one of `channels` arrives or `timeout_ms` passes. Every
    /// notification waiting is taken: one wake-up is enough for any number of them.
    pub fn wait_on(&self, channels: &[&str], timeout_ms: u64) -> Result<()> {
        use postgres::fallible_iterator::FallibleIterator;
        let mut c = self.client();
        for channel in channels {
            c.batch_execute(&format!("LISTEN {channel}"))
                .map_err(db("listening for work"))?;
        }
        let mut n = c.notifications();
        {
            let mut it = n.timeout_iter(std::time::Duration::from_millis(timeout_ms));
            let _ = it.next().map_err(db("listening for work"))?;
        }
        // Drain the rest: one wake-up is enough for any number of notifications.
        let mut rest = n.iter();
        while rest.next().map_err(db("listening for work"))?.is_some() {}
        Ok(())
    }

    /// The records of `run` from seq `from` on, in order, at most [`EVENTS_PAGE_MAX`] (a server
    /// mirroring the run asks again from where the page ended).
    pub fn events_from(&self, run: &str, from: u64) -> Result<Vec<Vec<u8>>> {
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let rows = self
            .client()
            .query(
                "SELECT record FROM events WHERE run = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
                &[&run, &from, &EVENTS_PAGE_MAX],
            )
            .map_err(db("reading a run's events"))?;
        Ok(rows.iter().map(|r| r.get::<_, Vec<u8>>(0)).collect())
    }

    /// The paths of the files the store keeps for `run`'s directory, sorted.
    pub fn file_paths(&self, run: &str) -> Result<Vec<String>> {
        let rows = self
            .client()
            .query(
                "SELECT path FROM run_files WHERE run = $1 ORDER BY path",
                &[&run],
            )
            .map_err(db("reading a run's files"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Writes the files of `run` named in `paths` into `dir` (paths the store lacks are
    /// skipped; each is checked to stay inside `dir`).
    pub fn write_files(&self, run: &str, paths: &[String], dir: &Path) -> Result<()> {
        let rows = self
            .client()
            .query(
                "SELECT path, bytes FROM run_files WHERE run = $1 AND path = ANY($2) ORDER BY path",
                &[&run, &paths],
            )
            .map_err(db("reading a run's files"))?;
        for row in rows {
            let (path, bytes): (String, Vec<u8>) = (row.get(0), row.get(1));
            let target = safe_join(dir, &path)?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(io_at(parent))?;
            }
            std::fs::write(&target, bytes).map_err(io_at(&target))?;
        }
        Ok(())
    }

    /// Takes announcement `id` (of `run`) for delivery by `server` for `lease_ms`: `true` when
    /// this server may deliver it now (no server has, none holds it, or this one does),
    /// `false` when another server delivered it or holds it. With many servers over one store,
    /// each suspension is announced by one of them; one that stops before delivering lets
    /// another take it when its lease ends.
    pub fn take_announcement(
        &self,
        id: &str,
        run: &str,
        server: &str,
        lease_ms: i64,
    ) -> Result<bool> {
        let rows = self
            .client()
            .query(
                "INSERT INTO announcements (id, run, server, until)
                   VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
                 ON CONFLICT (id) DO UPDATE SET server = $3,
                   until = now() + $4 * interval '1 millisecond'
                 WHERE NOT announcements.delivered
                   AND (announcements.server = $3 OR announcements.until < now())
                 RETURNING 1",
                &[&id, &run, &server, &(lease_ms as f64)],
            )
            .map_err(db("taking an announcement"))?;
        Ok(!rows.is_empty())
    }

    /// Marks announcement `id` delivered: no server announces it again.
    pub fn announcement_delivered(&self, id: &str) -> Result<()> {
        self.client()
            .execute(
                "UPDATE announcements SET delivered = true WHERE id = $1",
                &[&id],
            )
            .map_err(db("recording a delivered announcement"))?;
        Ok(())
    }
}

/// Commits a worker's records to the store ([`oracle_runtime::replica::Replica`]).
pub struct PgReplica {
    store: Store,
    run: String,
    fence: i64,
    consume: Option<i64>,
    consumed: Option<i64>,
    /// A commit was refused because the lease's fence was superseded.
    fenced: Option<PgError>,
    /// The log whose resume points each commit keeps in the store, if any.
    points: Option<oracle_runtime::LogPaths>,
    /// Resume points the store holds already.
    kept: std::collections::BTreeSet<u64>,
}

impl PgReplica {
    /// Why the store refused a commit of this replica's because its lease was taken over, if it
    /// did: the worker then leaves the run to its new holder. Typed, so no caller reads it out
    /// of an error message.
    pub fn fenced(&self) -> Option<&PgError> {
        self.fenced.as_ref()
    }

    /// The signal the next non-empty commit marks applied (the one being applied now).
    pub fn consume_next(&mut self, signal: Option<i64>) {
        self.consume = signal;
        self.consumed = None;
    }

    /// The signal the last commit consumed, if it consumed one since [`PgReplica::consume_next`].
    pub fn consumed(&self) -> Option<i64> {
        self.consumed
    }

    /// Each commit also keeps the resume points written beside `paths`' log since the last
    /// one (those in `kept` the store holds already): a worker that takes the run over
    /// starts from the newest.
    pub fn keep_points(&mut self, paths: oracle_runtime::LogPaths, kept: &[u64]) {
        self.points = Some(paths);
        self.kept = kept.iter().copied().collect();
    }

    /// The resume points written since the last commit, as (seq, body). A point that cannot
    /// be read is left out: it is a cache, and the log is what the commit is for.
    fn new_points(&self) -> Vec<(u64, Vec<u8>)> {
        let Some(paths) = &self.points else {
            return Vec::new();
        };
        let seqs = oracle_runtime::resume_point::list(paths).unwrap_or_default();
        seqs.into_iter()
            .filter(|seq| !self.kept.contains(seq))
            .filter_map(|seq| {
                let path = oracle_runtime::resume_point::path_of(paths, seq);
                oracle_runtime::resume_point::body(&path)
                    .ok()
                    .map(|b| (seq, b))
            })
            .collect()
    }
}

impl oracle_runtime::replica::Replica for PgReplica {
    fn commit(&mut self, records: &[u8]) -> io::Result<()> {
        let consume = self.consume;
        let points = self.new_points();
        match self
            .store
            .append_with_points(&self.run, self.fence, records, consume, &points)
        {
            Ok(kept) => self.kept.extend(kept),
            Err(e @ PgError::Fenced { .. }) => {
                let message = e.to_string();
                self.fenced = Some(e);
                return Err(io::Error::other(message));
            }
            Err(e) => return Err(io::Error::other(e)),
        }
        if consume.is_some() {
            self.consume = None;
            self.consumed = consume;
        }
        Ok(())
    }
}

/// Writes what a run's log says into its row.
fn set_summary(tx: &mut postgres::Transaction<'_>, run: &str, s: &Summary) -> Result<()> {
    let (step, why) = match &s.waiting {
        Some((step, why)) => (Some(step.as_str()), Some(why.as_str())),
        None => (None, None),
    };
    let (calls, tokens) = match s.models {
        Some((c, t)) => (Some(c), Some(t)),
        None => (None, None),
    };
    tx.execute(
        "UPDATE runs SET waiting_step = $2, waiting_reason = $3, attempts = $4, reason = $5,
           last_time = $6, model_calls = $7, model_tokens = $8, wake_at_ms = $9,
           expire_at_ms = $10
         WHERE id = $1",
        &[
            &run,
            &step,
            &why,
            &s.attempts,
            &s.reason,
            &s.last_time,
            &calls,
            &tokens,
            &s.wake_at_ms,
            &s.expire_at_ms,
        ],
    )
    .map_err(db("recording what a run's log says"))?;
    Ok(())
}

/// The run idempotency key `want` submitted already, with what differs, taking the key's
/// advisory lock for the rest of `tx` (so submissions racing on one key store one run).
fn key_holder(
    tx: &mut postgres::Transaction<'_>,
    want: &oracle_runtime::keys::KeyClaim,
) -> Result<Option<Submitted>> {
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&want.key],
    )
    .map_err(db("locking an idempotency key"))?;
    let row = tx
        .query_opt(
            "SELECT k.run, k.plan, k.inputs, k.seed, r.state FROM run_keys k
                 JOIN runs r ON r.id = k.run WHERE k.key = $1",
            &[&want.key],
        )
        .map_err(db("reading an idempotency key"))?;
    if let Some(row) = row {
        let run: String = row.get(0);
        let hash = |b: Vec<u8>| <[u8; 32]>::try_from(b.as_slice()).map(oracle_core::Hash);
        let (plan, inputs) = match (hash(row.get(1)), hash(row.get(2))) {
            (Ok(p), Ok(i)) => (p, i),
            _ => {
                return Err(PgError::BadRecord {
                    run,
                    offset: 0,
                    reason: "an idempotency key's row holds a hash that is not 32 bytes".into(),
                });
            }
        };
        let seed: String = row.get(3);
        let had = oracle_runtime::keys::KeyClaim {
            key: want.key.clone(),
            run: run.clone(),
            plan,
            inputs,
            seed: seed.parse().unwrap_or(u64::MAX),
            // The store's keys start runs; forks are a file home's.
            forked_at: None,
        };
        return Ok(Some(Submitted::Existing {
            differs: had.differs(want),
            state: row.get(4),
            run,
        }));
    }
    Ok(None)
}

/// A new run's row, numbered from the store's sequence (`<program>-<n>`), and its files.
fn new_run(
    tx: &mut postgres::Transaction<'_>,
    program: &str,
    state: &str,
    files: &[(String, Vec<u8>)],
) -> Result<String> {
    let number: i64 = tx
        .query_one("SELECT nextval('run_numbers')", &[])
        .map_err(db("numbering a run"))?
        .get(0);
    let id = format!("{program}-{number}");
    tx.execute(
        "INSERT INTO runs (id, number, program, state) VALUES ($1, $2, $3, $4)",
        &[&id, &number, &program, &state],
    )
    .map_err(db("storing a run"))?;
    for (path, bytes) in files {
        tx.execute(
            "INSERT INTO run_files (run, path, bytes) VALUES ($1, $2, $3)",
            &[&id, path, bytes],
        )
        .map_err(db("storing a run's files"))?;
    }
    Ok(id)
}

/// Inserts parsed records in one statement (arrays unnested server-side): a round trip per
/// record would cost more than the commit itself (BENCHMARKS.md, "PostgreSQL store").
fn insert_events(
    tx: &mut postgres::Transaction<'_>,
    run: &str,
    parsed: &[Parsed],
    records: &[u8],
    fence: i64,
) -> Result<()> {
    let seqs: Vec<i64> = parsed.iter().map(|r| r.seq as i64).collect();
    let hashes: Vec<&[u8]> = parsed.iter().map(|r| r.hash.as_slice()).collect();
    let prevs: Vec<&[u8]> = parsed.iter().map(|r| r.prev.as_slice()).collect();
    let bytes: Vec<&[u8]> = parsed.iter().map(|r| &records[r.range.clone()]).collect();
    tx.execute(
        "INSERT INTO events (run, seq, hash, prev, record, fence)
         SELECT $1, s, h, p, r, $6
         FROM unnest($2::bigint[], $3::bytea[], $4::bytea[], $5::bytea[]) AS t(s, h, p, r)",
        &[&run, &seqs, &hashes, &prevs, &bytes, &fence],
    )
    .map_err(db("appending events"))?;
    Ok(())
}

struct Parsed {
    seq: u64,
    hash: Vec<u8>,
    prev: Vec<u8>,
    range: std::ops::Range<usize>,
}

/// Splits a commit into its records and checks that they link: seqs consecutive, each `prev`
/// the hash before it. The store keeps the bytes as they are.
fn parse_records(run: &str, records: &[u8]) -> Result<Vec<Parsed>> {
    let mut out: Vec<Parsed> = Vec::new();
    let mut scratch = Vec::new();
    let mut start = 0usize;
    while start < records.len() {
        let bad = |reason: String| PgError::BadRecord {
            run: run.to_owned(),
            offset: start as u64,
            reason,
        };
        let end = records[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|i| start + i)
            .ok_or_else(|| bad("no newline at the end of the record".into()))?;
        let event =
            record::decode(&records[start..end], &mut scratch).map_err(|e| bad(e.to_string()))?;
        if let Some(before) = out.last()
            && (event.seq != before.seq + 1 || event.prev.as_bytes().as_slice() != before.hash)
        {
            return Err(bad(format!(
                "seq {} does not follow seq {} of the same commit",
                event.seq, before.seq
            )));
        }
        out.push(Parsed {
            seq: event.seq,
            hash: event.hash.as_bytes().to_vec(),
            prev: event.prev.as_bytes().to_vec(),
            range: start..end + 1,
        });
        start = end + 1;
    }
    Ok(out)
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> PgError + '_ {
    move |source| PgError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether a run-directory file belongs in the store: not the log, its index, its lock,
/// snapshots, files of a repair (all derived or local), or checkpoints (their own table).
fn kept(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    !(rel == oracle_runtime::paths::LOG_FILE
        || rel == oracle_runtime::paths::CHECKPOINTS_FILE
        || name.ends_with(".idx")
        || name.ends_with(".lock")
        || rel.starts_with("snapshots")
        || rel.starts_with("torn"))
}

/// The files of a run directory the store keeps, as (relative path, bytes), sorted. Symlinks
/// and special files are refused: a run directory holds plain files.
pub fn read_run_files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let here = dir.join(&rel);
        let entries = std::fs::read_dir(&here).map_err(io_at(&here))?;
        for entry in entries {
            let entry = entry.map_err(io_at(&here))?;
            let kind = entry.file_type().map_err(io_at(&entry.path()))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                return Err(PgError::RunFiles {
                    path: entry.path(),
                    reason: "a file name that is not UTF-8".into(),
                });
            };
            let child = rel.join(name);
            let text = child.to_string_lossy().into_owned();
            if kind.is_dir() {
                stack.push(child);
            } else if kind.is_file() {
                if !kept(&text) {
                    continue;
                }
                let path = entry.path();
                let len = entry.metadata().map_err(io_at(&path))?.len();
                if len > RUN_FILE_BYTES_MAX {
                    return Err(PgError::RunFiles {
                        path,
                        reason: format!("{len} bytes, more than {RUN_FILE_BYTES_MAX}"),
                    });
                }
                out.push((text, std::fs::read(&path).map_err(io_at(&path))?));
            } else {
                return Err(PgError::RunFiles {
                    path: entry.path(),
                    reason: "not a plain file or directory".into(),
                });
            }
            if out.len() > RUN_FILES_MAX {
                return Err(PgError::RunFiles {
                    path: dir.to_path_buf(),
                    reason: format!("more than {RUN_FILES_MAX} files"),
                });
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `dir/rel` for a stored relative path, refusing anything that would leave `dir`.
fn safe_join(dir: &Path, rel: &str) -> Result<PathBuf> {
    let path = Path::new(rel);
    let ok = !rel.is_empty()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !ok {
        return Err(PgError::RunFiles {
            path: dir.join(rel),
            reason: "a stored file path that leaves the run directory".into(),
        });
    }
    Ok(dir.join(path))
}
