//! A PostgreSQL store as one explicit value a front end holds for one command (`oracle ...
//! --store URL`): its administration (`store init`, `store status`), its runs' rows, submission,
//! signals, imports, signed checkpoints, schedules, and the named belief stores it keeps.
//!
//! Why a value and not a process-wide connection: every call names the store it reaches, so a
//! command (or a test driving several stores in one process) can never read one store's rows
//! while meaning another's. Errors stay the store's own ([`PgError`]): the command line words
//! them as it always did.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oracle_pg::{PgError, Programs, RunRow, Store, Submitted};
use oracle_runtime::keys::KeyClaim;
use oracle_runtime::session::{Prepared, RunDir};
use oracle_runtime::shared::StoreBackend;

use crate::schedule::{NewSchedule, Schedule};
use crate::signal::Signal;
use crate::{Home, HostError, schedule_store};

/// One store's connection, for the commands of one process that name it.
#[derive(Clone)]
pub struct Database {
    store: Store,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: only its redacted form is ever shown.
        f.debug_struct("Database")
            .field("url", &oracle_pg::redact(self.store.url()))
            .finish()
    }
}

/// `oracle store status`: the schema this oracle speaks, and the store's runs by state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub schema: i32,
    pub runs: usize,
    pub states: BTreeMap<String, u64>,
}

/// What `oracle import --store` stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Imported {
    pub run: String,
    pub state: String,
}

impl Database {
    /// Connects to the store at `url`, whose schema must be this oracle's.
    pub fn connect(url: &str) -> Result<Database, PgError> {
        Store::connect(url).map(|store| Database { store })
    }

    /// `oracle store init`: creates the schema or migrates it to this oracle's version; the
    /// versions before and after.
    pub fn init(url: &str) -> Result<(i32, i32), PgError> {
        Store::connect_unchecked(url)?.init()
    }

    /// `oracle store status`.
    pub fn status(&self) -> Result<Status, PgError> {
        let rows = self.store.runs()?;
        let mut states: BTreeMap<String, u64> = BTreeMap::new();
        for r in &rows {
            *states.entry(r.state.clone()).or_default() += 1;
        }
        Ok(Status {
            schema: oracle_pg::schema::VERSION,
            runs: rows.len(),
            states,
        })
    }

    /// Every run's row (`oracle runs --store`).
    pub fn runs(&self) -> Result<Vec<RunRow>, PgError> {
        self.store.runs()
    }

    /// The store's named belief stores, for a [`Home`] whose shared stores are this database's
    /// ([`Home::with_database`]).
    pub fn stores(&self) -> Arc<dyn StoreBackend> {
        Arc::new(self.store.clone())
    }

    /// `oracle submit`: hands a run [`Home::prepare_submission`] made to the store, under
    /// `key` when one was given (the plan, inputs and seed are what a key's run must match).
    pub fn submit(
        &self,
        prepared: &Prepared,
        oracle_cmd: Option<String>,
        scorer_cmd: Option<String>,
        key: Option<&str>,
    ) -> Result<Submitted, PgError> {
        self.submit_queued(prepared, (oracle_cmd, scorer_cmd), key, None)
    }

    /// [`Database::submit`], the run waiting in `ask`'s queue when given (checked with
    /// [`Database::queue_check`] first): no worker claims it but in its turn.
    pub fn submit_queued(
        &self,
        prepared: &Prepared,
        (oracle_cmd, scorer_cmd): (Option<String>, Option<String>),
        key: Option<&str>,
        ask: Option<&crate::queue::Ask>,
    ) -> Result<Submitted, PgError> {
        let programs = Programs {
            oracle_cmd,
            scorer_cmd,
        };
        let s = &prepared.submission;
        let key = key.map(|k| KeyClaim::new(k, "", prepared.plan.hash, &s.inputs, s.seed));
        let queue = ask.map(crate::queue::store::as_store);
        self.store.submit_queued(
            &prepared.plan.name,
            &prepared.dir,
            &programs,
            key.as_ref(),
            queue.as_ref(),
        )
    }

    /// The store this value connects to, for the host's modules.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// `oracle submit triage.py`: hands a code run [`Home::prepare_code_submission`] made to the
    /// store under its agent's name (what a worker's `--agent` list is looked up by), under
    /// `key` when one was given (the program hash, inputs and seed are what a key's run must
    /// match).
    pub fn submit_code(
        &self,
        prepared: &crate::code::CodeSubmission,
        oracle_cmd: Option<String>,
        scorer_cmd: Option<String>,
        key: Option<&str>,
    ) -> Result<Submitted, PgError> {
        let programs = Programs {
            oracle_cmd,
            scorer_cmd,
        };
        let s = &prepared.submission;
        let key = key.map(|k| KeyClaim::new(k, "", prepared.program_hash, &s.inputs, s.seed));
        self.store
            .submit_keyed(&prepared.agent, &prepared.dir, &programs, key.as_ref())
    }

    /// Checks an answer `signal` carries on a throwaway copy of its run in `scratch` (an empty
    /// directory the caller removes), so a refused answer is refused before it is queued, with
    /// the API's code. Any other signal passes.
    pub fn check(&self, scratch: &Path, signal: &Signal) -> Result<(), HostError> {
        match signal {
            Signal::Resume {
                run,
                answer: Some(a),
                ..
            } => crate::store_front::check_answer(
                &self.store,
                scratch,
                run,
                (a.step.clone(), a.value.clone()),
                a.by.clone(),
            ),
            Signal::Event(e) => {
                crate::store_front::check_event(&self.store, scratch, &e.run, &e.name, &e.value)
            }
            _ => Ok(()),
        }
    }

    /// Queues `signal` for the worker that next holds its run; the signal's id.
    pub fn send(&self, signal: &Signal) -> Result<i64, PgError> {
        self.store
            .send(signal.run(), signal.kind(), &signal.to_row())
    }

    /// Writes every store run among `names` into `home` (its files and its log, byte for byte)
    /// for a read-only command to run there; the store's rows are the authority on a run's
    /// bindings, so `home` vouches for them as they are, as a worker's home does.
    pub fn read_into(&self, names: &[String], home: &Home) -> Result<(), HostError> {
        for name in self.store.existing(names)? {
            let dir = self.store.hydrate(&name, home.dir())?;
            home.adopt_bindings(&RunDir {
                id: name.clone(),
                paths: oracle_runtime::LogPaths::of_run(&dir),
                dir,
            })?;
        }
        Ok(())
    }

    /// Writes the run `run` into the file home `home`; its directory there.
    pub fn hydrate(&self, run: &str, home: &Path) -> Result<PathBuf, PgError> {
        self.store.hydrate(run, home)
    }

    /// How many checkpoint lines the store keeps for `run`.
    pub fn checkpoint_count(&self, run: &str) -> Result<usize, PgError> {
        Ok(self.store.checkpoints(run)?.len())
    }

    /// Adds to the store the lines of `dir`'s checkpoints file after its first `before` (those
    /// a command signed in a hydrated copy of the run).
    pub fn add_checkpoints(&self, run: &str, dir: &Path, before: usize) -> Result<(), PgError> {
        let path = dir.join(oracle_runtime::paths::CHECKPOINTS_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| PgError::Io {
            path: path.clone(),
            source: e,
        })?;
        let new: Vec<String> = text.lines().skip(before).map(str::to_owned).collect();
        self.store.add_checkpoints(run, &new)
    }

    /// Stores whole the run a file home's import made in `dir` (its log at `log`), under a
    /// new id with `prefix`: finished, or `broken` when it had not finished (nothing can
    /// drive it on without its plan).
    pub fn import(&self, prefix: &str, dir: &Path, log: &Path) -> Result<Imported, PgError> {
        let records = std::fs::read(log).map_err(|e| PgError::Io {
            path: log.to_path_buf(),
            source: e,
        })?;
        let summary = crate::worker::summary_of(dir).unwrap_or_default();
        let (state, detail) = match crate::worker::state_of(dir).as_deref() {
            Some(s @ ("completed" | "failed" | "cancelled")) => (s.to_owned(), None),
            _ => (
                "broken".to_owned(),
                Some("imported before it finished, without its plan: nothing can drive it on"),
            ),
        };
        let run = self
            .store
            .import(prefix, dir, &records, &state, detail, &summary)?;
        Ok(Imported { run, state })
    }

    /// Sends a resume signal to every suspended run of the store waiting on a line of the
    /// named store `name` ([`crate::shared::signal_store_waiters`]); `scratch` is a directory
    /// the caller removes.
    pub fn signal_store_waiters(
        &self,
        scratch: &Path,
        name: &str,
    ) -> Result<Vec<(crate::shared::StoreWaiter, i64)>, HostError> {
        crate::shared::signal_store_waiters(&self.store, scratch, name)
    }

    /// Adds a schedule to the store (`oracle schedule add --store`).
    pub fn schedule_add(&self, new: NewSchedule, now_ms: u64) -> Result<Schedule, HostError> {
        let ask = crate::queue::ask(new.queue.as_deref(), new.priority, new.partition.as_deref())?;
        if let Some(ask) = &ask {
            self.queue_check(ask)?;
        }
        schedule_store::add(&self.store, new, now_ms)
    }

    /// The store's schedules.
    pub fn schedules(&self) -> Result<Vec<Schedule>, HostError> {
        Ok(schedule_store::list(&self.store)?
            .into_iter()
            .map(|(s, _)| s)
            .collect())
    }

    /// Pauses or resumes the store's schedule `name`.
    pub fn schedule_pause(
        &self,
        name: &str,
        paused: bool,
        now_ms: u64,
    ) -> Result<Schedule, HostError> {
        schedule_store::pause(&self.store, name, paused, now_ms)
    }

    /// Removes the store's schedule `name`.
    pub fn schedule_remove(&self, name: &str) -> Result<Schedule, HostError> {
        schedule_store::remove(&self.store, name)
    }

    /// Starts a run of the store's schedule `name` now ([`schedule_store::trigger`]).
    pub fn schedule_trigger(
        &self,
        scratch: &Path,
        name: &str,
        now_ms: u64,
    ) -> Result<(String, bool), HostError> {
        schedule_store::trigger(&self.store, scratch, name, now_ms)
    }
}

impl Home {
    /// This home with the named belief stores of `database` (`--store URL`) in place of its
    /// own files, when one is given.
    pub fn with_database(self, database: Option<&Database>) -> Home {
        match database {
            Some(db) => self.with_stores(Some(db.stores())),
            None => self,
        }
    }
}

/// Whether a stored value is a store's URL (`postgres://...`), for a flag or a config file.
pub fn is_store_url(text: &str) -> bool {
    oracle_pg::is_store_url(text)
}

/// `url` with any password hidden, for messages and `oracle config --json`.
pub fn redact(url: &str) -> String {
    oracle_pg::redact(url)
}
