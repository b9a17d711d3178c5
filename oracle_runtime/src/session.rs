//! Runs as the command line sees them: start a plan, resume a suspended or interrupted run,
//! replay a run by re-execution, list runs.
//!
//! A run lives in `<home>/runs/<id>/`: `events.jsonl` (the log), `plan.plan` (the plan source
//! the run was started from, checked against the hash `run_started` recorded) and `run.json` (the
//! run's bindings: working directory, models, secret variables, tool directories; unhashed, so
//! sealed with the home's key, `crate::bindings`, and never acted on unless the seal holds).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use oracle_core::capability::{Capability, CapabilityError};
use oracle_core::payload::{RunStarted, RunStatus};
use oracle_core::verify::LogBytesError;
use oracle_core::{Event, Hash, Payload};
use oracle_plan::agent::{InputError, PlanAgent, bind_input_values, bind_inputs};
use oracle_plan::{CompiledPlan, Diagnostic, Severity};
use serde_json::{Map, Value, json};

use crate::answer::AnswerError;
use crate::engine::{
    CALLS_MAX_DEFAULT, Cancel, Ending, Engine, EngineError, INPUT_BYTES_MAX, Progress, Report,
    RunConfig,
};
use crate::error::StoreError;
use crate::paths::{LOG_FILE, LogPaths};
use crate::recorded::Recorded;
use crate::repair::{self, Repair};
use crate::resume_point::{self, ResumePoint};
use crate::schema::Schema;
use crate::tool::Registry;
use crate::writer::{Durability, LogWriter};

/// File name of the plan copy in a run directory.
pub const PLAN_FILE: &str = "plan.plan";
pub use crate::bindings::META_FILE;
/// Most run ids tried for one plan name before giving up (another process may be creating runs
/// at the same time).
pub const RUN_ID_ATTEMPTS_MAX: u64 = 10_000;

/// Why a session could not do what was asked. Every variant leaves recorded data as it was.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not UTF-8 text: invalid bytes on line {line} (byte offset {offset})", path.display())]
    NotText {
        path: PathBuf,
        line: u64,
        offset: u64,
    },
    #[error("{}: {len} bytes, more than plan_bytes_max = {limit}", path.display())]
    TooLarge { path: PathBuf, len: u64, limit: u64 },
    #[error("{}: the plan has {} error(s)", path.display(), diagnostics.iter().filter(|d| d.severity == Severity::Error).count())]
    Plan {
        path: PathBuf,
        text: String,
        diagnostics: Vec<Diagnostic>,
    },
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("--grant {0}")]
    Grant(CapabilityError),
    /// Models or secrets the plan references that the new run does not bind
    /// (`oracle_plan::bindings`): refused before anything is created.
    #[error("{}; nothing was created", unbound_text(models, secrets))]
    Unbound {
        models: Vec<String>,
        secrets: Vec<String>,
    },
    /// An idempotency key that cannot be one (`oracle_runtime::keys::check_key`).
    #[error("--key: {why}; nothing was created")]
    BadKey { why: crate::keys::BadKey },
    /// The idempotency key started run `run` already. With nothing in `differs`, this start is
    /// that run's (the caller answers with it); otherwise it is refused, naming what differs.
    #[error("{}", key_used_text(key, run, differs))]
    KeyUsed {
        key: String,
        run: String,
        /// `plan`, `inputs`, `seed`: what this start has that the run's differs in.
        differs: Vec<String>,
    },
    #[error("--grant {grant}: no tool needs `{kind}`, so it would allow nothing; grants name one of: {}", known.join(", "))]
    UnknownGrant {
        grant: String,
        kind: String,
        known: Vec<String>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Transfer(#[from] crate::transfer::TransferError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(
        "{run}: no such run: not a run id under {}, a run directory or a run's log file{hint}",
        home.join("runs").display()
    )]
    NotFound {
        run: String,
        home: PathBuf,
        /// ` (did you mean ...?)` from the run list, or empty.
        hint: String,
    },
    #[error("{run}: the run has finished ({status}); there is nothing to resume")]
    Finished { run: String, status: String },
    /// An event no `wait.event` step of the run's plan waits on: nothing was kept.
    #[error(
        "{run}: no `wait.event` step of the run's plan waits on event `{name}`; nothing was kept"
    )]
    EventUnknown { run: String, name: String },
    /// An event whose name or value the run could not take: nothing was kept.
    #[error("{run}: event `{name}` is refused: {reason}; nothing was kept")]
    EventRefused {
        run: String,
        name: String,
        reason: String,
    },
    /// Where a fork was asked to start is not a place a run can go on from.
    #[error("{run}: cannot fork here: {why}; nothing was created")]
    ForkPoint { run: String, why: String },
    /// `oracle recover` of a run whose log verifies whole: nothing is damaged, nothing written.
    #[error(
        "{run}: its log verifies whole: there is nothing to recover (`oracle fork --at SEQ` forks it); nothing was written"
    )]
    NothingToRecover { run: String },
    /// A plan upgrade asked of a run that stopped inside a round (a crash).
    #[error(
        "{run}: a plan is upgraded between rounds (suspended, answered, or after an outside event such as `forked`); this run stopped inside one: resume it without --plan first; nothing was written"
    )]
    InsideRound { run: String },
    /// A new plan does not re-derive the run's record (`oracle resume --plan`, `oracle fork
    /// --plan`): nothing was written.
    #[error("{}", upgrade_refused_text(run, divergence))]
    UpgradeRefused {
        run: String,
        divergence: Box<oracle_core::diff::Divergence>,
    },
    #[error("{run}: the run has already finished ({status}); there is nothing to cancel")]
    CannotCancel { run: String, status: String },
    #[error(
        "{run}: the run waits on step `{step}` ({reason}); give its output with `--step {step} --value JSON`"
    )]
    NeedsAnswer {
        run: String,
        step: String,
        reason: String,
    },
    #[error(
        "{run}: the run is not suspended (it was interrupted); resume it without --step/--value"
    )]
    NotSuspended { run: String },
    /// A run suspended on a `sleep` step, resumed without `--wake` or given an answer.
    #[error(
        "{run}: step `{step}` sleeps ({reason}): a timer is woken, not answered; once it is due, `oracle resume {run} --wake` (or `oracle serve`) fires it (`--force`: now)"
    )]
    TimerWait {
        run: String,
        step: String,
        reason: String,
    },
    /// An answer to a `human.ask` whose deadline was recorded first (`timer_fired`).
    #[error(
        "{run}: step `{step}` is no longer waiting: its deadline passed first (recorded at {fired}); the answer is not recorded"
    )]
    DeadlinePassed {
        run: String,
        step: String,
        fired: String,
    },
    /// `--wake` for a run that is not suspended on a timer.
    #[error("{run}: the run does not wait on a timer; there is nothing to wake")]
    NoTimer { run: String },
    #[error(
        "{run}: step `{step}` was answered already{} and the run has not gone on since; resume it without --step/--value",
        by.as_ref().map_or(String::new(), |b| format!(" (by {b})"))
    )]
    AlreadyAnswered {
        run: String,
        step: String,
        by: Option<String>,
    },
    /// An answer refused before the engine starts (the engine refuses the same way where the
    /// run waits, as [`EngineError::Answer`]).
    #[error("{run}: {source}")]
    Answer {
        run: String,
        #[source]
        source: crate::answer::AnswerError,
    },
    #[error(
        "{path}: the stored plan does not match the run (plan hash {found}, the run recorded {recorded})"
    )]
    PlanChanged {
        path: PathBuf,
        found: Hash,
        recorded: Hash,
    },
    #[error("{path}: the run's first event is not `run_started`")]
    NoStart { path: PathBuf },
    /// A code run's `agent.json` cannot be read (docs/AGENTS.md).
    #[error("{path}: the code run's agent record cannot be read: {reason}")]
    AgentRecord { path: PathBuf, reason: String },
    /// A code run's `agent.json` whose command the home's key did not seal (edited, or from
    /// another run or home): nothing is started from it.
    #[error(
        "{path}: the code run's command is not sealed by its home's key (edited, or copied from another run or home); nothing was started (an imported run's command is sealed only by `oracle import --trust-commands`, docs/AGENTS.md)"
    )]
    AgentUnsealed { path: PathBuf },
    /// A store's code run whose agent this worker was not told about (`oracle worker --agent
    /// NAME=PATH`): nothing is started; the run is left for a worker that was.
    #[error(
        "{run}: its code agent `{agent}` is not one this worker was told about (`oracle worker --agent {agent}=PATH`); nothing was started, the run is left for a worker that was"
    )]
    AgentUnknown { run: String, agent: String },
    /// A store's code run whose program, as this worker starts it, is not the program it was
    /// submitted with (its program hash differs): nothing is recorded.
    #[error(
        "{run}: the program this worker starts for code agent `{agent}` has hash {now}, not {submitted}, the hash it was submitted with; nothing was recorded, the run is left for a worker with that program"
    )]
    AgentChanged {
        run: String,
        agent: String,
        submitted: String,
        now: String,
    },
    #[error(
        "{run}: the run recorded nothing before it stopped (it was interrupted while starting, before any effect could happen), so there is nothing to resume; start it again with `oracle run`"
    )]
    NothingRecorded { run: String },
    #[error("{run}: {source}")]
    Adjudicate {
        run: String,
        #[source]
        source: oracle_memory::AdjudicateError,
    },
    #[error(
        "{run}: the run stopped in the middle of a step (its last event is `{kind}`); `oracle resume {run}` it first, then adjudicate once it is suspended or finished"
    )]
    Interrupted { run: String, kind: String },
    #[error("{run}: the run's memory does not read back: {source}")]
    Projection {
        run: String,
        #[source]
        source: oracle_memory::ProjectionError,
    },
    #[error("{0}; nothing was started")]
    BadInputs(String),
    /// A code agent could not be started (docs/AGENTS.md, "Failures"): nothing was recorded.
    #[error(transparent)]
    CodeAgent(#[from] crate::process_agent::StartError),
    /// A code agent's decision differs from the log; `step` is the step of the recorded event
    /// it differs from, `site` the agent's source line that made it (`file:line`, as it
    /// reported).
    #[error("{source} (step `{step}`: the agent's decision at {site})")]
    CodeDiverged {
        step: String,
        site: String,
        #[source]
        source: EngineError,
    },
    #[error("--note is longer than {limit} bytes")]
    BadNote { limit: u64 },
    #[error(
        "{run}: --now {given} is too early: the earliest tick an outside event can take is {earliest}, one after the log's last event (tick {last}); an earlier tick would change what was believed at a time already recorded"
    )]
    TooEarly {
        run: String,
        given: u64,
        earliest: u64,
        last: u64,
    },
    #[error("{run}: {reason}")]
    OutsideTime { run: String, reason: String },
    #[error("{run}: the claim is refused: {source}")]
    ClaimRefused {
        run: String,
        #[source]
        source: oracle_memory::MemoryError,
    },
    #[error("{run}: the declared tools the run used cannot be loaded: {problems}")]
    Tools { run: String, problems: String },
    #[error(
        "{run}: run.json says the run worked in {recorded}, but this is {here}; run.json is not hashed, so oracle never takes a directory from it: resume from the run's directory (or, if the project moved, correct run.json)"
    )]
    WorkdirMismatch {
        run: String,
        recorded: PathBuf,
        here: PathBuf,
    },
    #[error(
        "{run}: {unsealed}: oracle acts on no binding the home's key does not vouch for; {hint}"
    )]
    Unsealed {
        run: String,
        unsealed: crate::bindings::Unsealed,
        /// How to give the binding again.
        hint: String,
    },
    #[error(transparent)]
    Seal(#[from] crate::seal::SealError),
}

impl SessionError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> SessionError {
        let path = path.into();
        move |source| SessionError::Io { path, source }
    }

    /// True when recorded data is damaged or a run does not reproduce (exit code 4).
    pub fn is_integrity(&self) -> bool {
        match self {
            SessionError::Store(e) => e.is_integrity(),
            SessionError::Engine(EngineError::Store(e)) => e.is_integrity(),
            SessionError::Engine(EngineError::Answer(_)) => false,
            SessionError::Engine(_) => true,
            SessionError::PlanChanged { .. }
            | SessionError::CodeDiverged { .. }
            | SessionError::NoStart { .. }
            | SessionError::Projection { .. } => true,
            _ => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, SessionError>;

/// What `oracle run` was asked.
#[derive(Clone, Debug)]
pub struct StartOptions {
    pub home: PathBuf,
    pub plan: PathBuf,
    pub inputs: Vec<(String, String)>,
    pub seed: u64,
    /// Grants beyond the plan's, as written.
    pub grants: Vec<String>,
    pub jobs: u32,
    pub durability: Durability,
    /// When the run writes resume points (never recorded).
    pub resume_points: resume_point::Policy,
    /// Where relative paths resolve (canonicalised here).
    pub root: PathBuf,
    /// Each domain's settings by the domain's name (`oracle_memory::settings::DOMAIN`), as the
    /// domain declares them; recorded in `run_started.domains`. Empty: every domain's defaults.
    pub domains: BTreeMap<String, Value>,
    /// Scores auction winners; `None`: the built-in rubric.
    pub scorer: Option<std::sync::Arc<dyn crate::scorer::Scorer>>,
    /// Where the plan's model names point (`--model`): kept in the unhashed `run.json` so a
    /// resume can call the same endpoints; never in the log (hosts and ports are not hashed).
    pub models: crate::tools::llm::Models,
    /// Limits on model calls, recorded in `run_started`; `None`: none.
    pub budget: Option<oracle_core::payload::Budget>,
    /// `--secret NAME=ENV_VAR` as given, for `run.json` (so `resume` can read the same variables
    /// again). The values go to the registry (`tools::builtin_with`), never to a file.
    pub secret_vars: std::collections::BTreeMap<String, String>,
    /// The tools directories the registry's declared tools came from (absolute), for
    /// `run.json`: `resume` and `replay` load the same directories unless given others.
    pub tools: Vec<PathBuf>,
    /// Files the run keeps under `tools/` (what each MCP server listed: replay reads it instead
    /// of starting the server), by file name.
    pub tool_files: Vec<(String, Vec<u8>)>,
    /// The plan's text when it is not read from the file `plan` (a request's body): `plan` then
    /// names it in messages, and its sub-plans resolve against `plan`'s directory.
    pub plan_text: Option<String>,
    /// Inputs given as JSON values (an API request) instead of text (`inputs`), each checked
    /// against the type the plan declares.
    pub input_values: Map<String, Value>,
    /// The idempotency key (`--key`, the API's `key`): recorded in `run_started`; a second
    /// start with the same key is the first run ([`crate::keys`]).
    pub key: Option<String>,
    /// The run and step spawning this one (a `spawn` step's child, started by the host):
    /// recorded in `run_started`.
    pub parent: Option<oracle_core::payload::ParentRun>,
}

impl StartOptions {
    /// `oracle run PLAN` with every option at its default: no inputs or extra grants, seed 0,
    /// one job, the default durability, the working directory `.`, no models, budget or
    /// secrets.
    pub fn new(home: &Path, plan: &Path) -> StartOptions {
        StartOptions {
            home: home.to_path_buf(),
            plan: plan.to_path_buf(),
            inputs: Vec::new(),
            seed: 0,
            grants: Vec::new(),
            jobs: 1,
            durability: Durability::DEFAULT,
            resume_points: resume_point::Policy::default(),
            root: PathBuf::from("."),
            domains: BTreeMap::new(),
            scorer: None,
            models: Default::default(),
            budget: None,
            secret_vars: Default::default(),
            tools: Vec::new(),
            tool_files: Vec::new(),
            plan_text: None,
            input_values: Map::new(),
            key: None,
            parent: None,
        }
    }
}

/// A run that was started or resumed.
#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    pub dir: PathBuf,
    pub report: Report,
    /// Set when a torn tail left by a crash was moved aside before resuming.
    pub repaired: Option<Repair>,
    /// What the person who started the run should know about its grants (`grant_warnings`).
    pub warnings: Vec<String>,
}

/// Warnings about grants that reach further than they seem: an `fs:write` scope that covers the
/// run store (tools are denied there anyway, but the grant says more than the run may do), and
/// any `proc:exec` grant, whose programs run with the user's rights, unconfined by grants.
pub fn grant_warnings(grants: &[Capability], home: &Path, root: &Path) -> Vec<String> {
    use oracle_core::capability::glob_match;
    let word = |g: &str, w: &str| g == "*" || g == w;
    let absolute = |p: &Path| {
        p.canonicalize()
            .unwrap_or_else(|_| root.join(p))
            .to_string_lossy()
            .into_owned()
    };
    let home_abs = absolute(home);
    let root_abs = absolute(root);
    let home_rel = Path::new(&home_abs)
        .strip_prefix(&root_abs)
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    let mut out = Vec::new();
    for g in grants {
        if word(&g.domain, "fs") && word(&g.action, "write") {
            // A file the store holds, named as the grant would name it.
            let probe = match (&home_rel, g.scope.starts_with('/')) {
                (_, true) => Some(format!("{home_abs}/runs/run/events.jsonl")),
                (Some(rel), false) => Some(format!("{rel}/runs/run/events.jsonl")),
                (None, false) => None,
            };
            if probe.is_some_and(|p| glob_match(&g.scope, &p)) {
                out.push(format!(
                    "grant `{g}` covers the oracle home ({}): tools are denied there whatever the grants say, but narrow the grant",
                    home.display()
                ));
            }
        }
        if word(&g.domain, "proc") && word(&g.action, "exec") {
            out.push(format!(
                "grant `{g}`: programs run with your rights and are not confined by grants; they can read and change anything you can, the run store included (docs/SECURITY.md)"
            ));
        }
    }
    out
}

/// Compiles plan source against the registry.
pub fn compile(path: &Path, source: &str, registry: &Registry) -> Result<CompiledPlan> {
    let dir = path.parent().unwrap_or(Path::new("."));
    compile_with_uses(path, source, registry, &plan_sources(dir, source))
}

/// Where a run keeps copies of the sub-plans its plan uses, by the paths the plan wrote.
pub const USES_DIR: &str = "uses";
/// Most sub-plan files one plan may use, directly or through others.
pub const USES_FILES_MAX: usize = 64;

/// The sources of the sub-plans `source` uses (`use "PATH" as NAME`), and those they use,
/// read from `dir` by the paths as written. Paths that are absolute or climb with `..` are not
/// read (the compiler refuses them); a file that cannot be read is left out (the compiler
/// reports it by path).
pub fn plan_sources(dir: &Path, source: &str) -> oracle_plan::Sources {
    let mut sources = oracle_plan::Sources::new();
    // The plans `spawn` steps name are kept too: the child a run starts is the plan it had.
    let named = |text: &str| {
        let mut all = oracle_plan::uses_of(text);
        all.extend(oracle_plan::spawns_of(text));
        all
    };
    let mut todo: Vec<(String, u32)> = named(source).into_iter().map(|p| (p, 1)).collect();
    while let Some((path, depth)) = todo.pop() {
        if sources.contains_key(&path)
            || sources.len() >= USES_FILES_MAX
            || depth > oracle_plan::compile::USES_DEPTH_MAX
            || path.starts_with('/')
            || path.split('/').any(|c| c == "..")
        {
            continue;
        }
        if let Ok(text) = read_text(&dir.join(&path)) {
            todo.extend(named(&text).into_iter().map(|p| (p, depth + 1)));
            sources.insert(path, text);
        }
    }
    sources
}

/// [`compile`] with the sub-plans' sources given.
pub fn compile_with_uses(
    path: &Path,
    source: &str,
    registry: &Registry,
    sources: &oracle_plan::Sources,
) -> Result<CompiledPlan> {
    let (plan, diagnostics) = oracle_plan::check_with(source, &registry.catalogue(), sources);
    match plan {
        Some(p) if !diagnostics.iter().any(|d| d.severity == Severity::Error) => Ok(p),
        _ => Err(SessionError::Plan {
            path: path.to_path_buf(),
            text: source.to_owned(),
            diagnostics,
        }),
    }
}

/// Largest plan file read, in bytes: the plan language's own bound (`oracle_plan`), which
/// `oracle lsp` applies to open documents too.
pub const PLAN_BYTES_MAX: u64 = oracle_plan::PLAN_BYTES_MAX;

/// Reads a plan file: at most [`PLAN_BYTES_MAX`] bytes of UTF-8 text (the error names the line
/// of the first invalid byte).
pub fn read_text(path: &Path) -> Result<String> {
    use crate::fsread::{Refused, read_regular_file};
    // A regular file only (a FIFO or device is refused, not waited on or read forever), and
    // never more than the limit read, whatever the file does meanwhile.
    let bytes =
        read_regular_file(path, PLAN_BYTES_MAX, "plan_bytes_max").map_err(|e| match e.reason {
            Refused::TooLarge { len, limit, .. } => SessionError::TooLarge {
                path: path.to_path_buf(),
                len,
                limit,
            },
            _ => SessionError::Io {
                path: path.to_path_buf(),
                source: e.into_io(),
            },
        })?;
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..offset]
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64;
        SessionError::NotText {
            path: path.to_path_buf(),
            line,
            offset: offset as u64,
        }
    })
}

fn canonical_root(root: &Path) -> Result<PathBuf> {
    root.canonicalize().map_err(SessionError::io(root))
}

fn parse_grants(texts: &[String]) -> Result<Vec<Capability>> {
    texts
        .iter()
        .map(|t| t.parse::<Capability>().map_err(SessionError::Grant))
        .collect()
}

fn merged_grants(plan: &CompiledPlan, extra: Vec<Capability>) -> Vec<Capability> {
    let mut all: Vec<Capability> = plan.grants.iter().cloned().chain(extra).collect();
    all.sort_by_key(|c| c.to_string());
    all.dedup();
    all
}

/// A file written whole, synced, then renamed into place.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::File::create(&tmp).map_err(SessionError::io(&tmp))?;
    f.write_all(bytes).map_err(SessionError::io(&tmp))?;
    f.sync_all().map_err(SessionError::io(&tmp))?;
    fs::rename(&tmp, path).map_err(SessionError::io(path))
}

/// Creates `<home>/runs/<name>-<n>` with the first free `n`.
pub(crate) fn new_run_dir(home: &Path, name: &str) -> Result<(String, PathBuf)> {
    let runs = home.join("runs");
    fs::create_dir_all(&runs).map_err(SessionError::io(&runs))?;
    let prefix = format!("{name}-");
    let mut next = 1u64;
    for entry in fs::read_dir(&runs).map_err(SessionError::io(&runs))? {
        let entry = entry.map_err(SessionError::io(&runs))?;
        let file_name = entry.file_name();
        if let Some(n) = file_name
            .to_str()
            .and_then(|s| s.strip_prefix(&prefix))
            .and_then(|s| s.parse::<u64>().ok())
        {
            next = next.max(n.saturating_add(1));
        }
    }
    for n in next..next.saturating_add(RUN_ID_ATTEMPTS_MAX) {
        let id = format!("{name}-{n}");
        let dir = runs.join(&id);
        match fs::create_dir(&dir) {
            Ok(()) => return Ok((id, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(SessionError::Io {
                    path: dir,
                    source: e,
                });
            }
        }
    }
    Err(SessionError::Io {
        path: runs,
        source: std::io::Error::other(format!(
            "no free run id for `{name}` after {RUN_ID_ATTEMPTS_MAX} attempts"
        )),
    })
}

/// `oracle run`: compiles, binds inputs, creates the run directory and drives the run until it
/// finishes or suspends. A bad plan, input or grant is reported before anything is created.
pub fn start(opts: &StartOptions, registry: &Registry) -> Result<Session> {
    start_observed(opts, registry, &mut |_| {})
}

/// [`start`], reporting progress after every round.
pub fn start_observed(
    opts: &StartOptions,
    registry: &Registry,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Session> {
    let mut prepared = prepare(opts, registry, false)?;
    let paths = LogPaths::of_run(&prepared.dir);
    let writer = LogWriter::create(&paths, opts.durability)?;
    // Its writer lock held, the run is live for every other start with its key.
    drop(prepared.key_guard.take());
    let mut config =
        prepared
            .submission
            .config(&opts.home, &prepared.dir, opts.scorer.clone(), None)?;
    config.resume_points = resume_point::Policy {
        key: Some(crate::seal::SealKey::open_or_create(&opts.home)?),
        ..opts.resume_points
    };
    let agent = PlanAgent::new(prepared.plan, config.inputs.clone());
    let mut watch = crate::cancel::Watch::new(&prepared.dir);
    let mut probe = || watch.probe();
    let mut engine = Engine::new(agent, registry, config, Vec::new(), Some(writer))
        .with_progress(progress)
        .with_cancel(&mut probe);
    let report = engine.drive()?;
    if let Some(w) = engine.into_writer() {
        w.close()?;
    }
    finished_drive(&prepared.dir, &report);
    Ok(Session {
        id: prepared.id,
        dir: prepared.dir,
        report,
        repaired: None,
        warnings: prepared.warnings,
    })
}

/// The file beside a submitted run's plan (`oracle submit`): what its start needs that the
/// run directory does not already hold. A worker starts the run from it.
pub const SUBMISSION_FILE: &str = "submitted.json";

/// Everything a run's start needs beyond its directory: bound inputs, merged grants, seed.
/// Written as [`SUBMISSION_FILE`] by [`prepare`] for a submitted run; never hashed (the run's
/// first event records all of it).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Submission {
    pub seed: u64,
    /// Merged and sorted, as written.
    pub grants: Vec<String>,
    pub inputs: Map<String, Value>,
    pub root: PathBuf,
    pub jobs: u32,
    /// Each domain's settings ([`StartOptions::domains`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub domains: BTreeMap<String, Value>,
    /// The memory's settings as a submission written before `domains` held them; read into
    /// `domains` and never written.
    #[serde(default, skip_serializing)]
    pub memory: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<oracle_core::payload::Budget>,
    /// The idempotency key ([`StartOptions::key`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The run and step spawning this one ([`StartOptions::parent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<oracle_core::payload::ParentRun>,
}

impl Submission {
    pub(crate) fn config(
        &self,
        home: &Path,
        dir: &Path,
        scorer: Option<std::sync::Arc<dyn crate::scorer::Scorer>>,
        stores: Option<&std::sync::Arc<dyn crate::shared::StoreBackend>>,
    ) -> Result<RunConfig> {
        Ok(RunConfig {
            seed: self.seed,
            grants: parse_grants(&self.grants)?,
            inputs: self.inputs.clone(),
            root: self.root.clone(),
            store: store_of(home, dir),
            jobs: self.jobs,
            calls_max: CALLS_MAX_DEFAULT,
            domains: match &self.memory {
                Some(m) if self.domains.is_empty() => {
                    BTreeMap::from([(oracle_memory::settings::DOMAIN.to_owned(), m.clone())])
                }
                _ => self.domains.clone(),
            },
            budget: self.budget.clone(),
            key: self.key.clone(),
            parent: self.parent.clone(),
            scorer,
            resume_points: resume_point::Policy::default(),
            shared: dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|id| attach(home, id, stores)),
            live: dir.file_name().and_then(|n| n.to_str()).map(str::to_owned),
        })
    }
}

/// How a run of `home` named `id` reaches the shared stores (used only when its memory is
/// attached to one): `stores` when the caller keeps them elsewhere (a store's worker), else the
/// home's own.
fn attach(
    home: &Path,
    id: &str,
    stores: Option<&std::sync::Arc<dyn crate::shared::StoreBackend>>,
) -> Option<crate::shared::Attach> {
    let stores = match stores {
        Some(s) => s.clone(),
        None => std::sync::Arc::new(crate::shared::FileStores::new(home)),
    };
    Some(crate::shared::Attach {
        stores,
        run: id.to_owned(),
    })
}

/// A run directory made ready to start: its plan compiled, its files written.
pub struct Prepared {
    pub id: String,
    pub dir: PathBuf,
    pub plan: CompiledPlan,
    pub submission: Submission,
    pub warnings: Vec<String>,
    /// The run's idempotency key, still claimed: held until the run is live for other starts
    /// (its writer lock taken); `None` without a key, and for a submission (whose written
    /// submission makes it live).
    pub key_guard: Option<crate::keys::KeyGuard>,
}

/// Everything `oracle run` does before the first event: compiles, binds inputs, checks grants,
/// creates the run directory with the plan, its sub-plans, settings and kept tool files. With
/// `submit`, also writes [`SUBMISSION_FILE`] so that a worker can start the run elsewhere
/// ([`start_prepared`]). A bad plan, input or grant is reported before anything is created.
pub fn prepare(opts: &StartOptions, registry: &Registry, submit: bool) -> Result<Prepared> {
    let source = match &opts.plan_text {
        Some(text) => plan_text_checked(&opts.plan, text)?,
        None => read_text(&opts.plan)?,
    };
    // The sub-plans read once: compiled here, and the same texts kept in the run below.
    let plan_dir = opts.plan.parent().unwrap_or(Path::new("."));
    let sources = plan_sources(plan_dir, &source);
    let plan = compile_with_uses(&opts.plan, &source, registry, &sources)?;
    let inputs = if opts.input_values.is_empty() {
        bind_inputs(&plan, &opts.inputs)?
    } else {
        bind_input_values(&plan, &opts.input_values)?
    };
    check_outside_value(&Value::Object(inputs.clone()), "the run's inputs")
        .map_err(|e| SessionError::BadInputs(e.to_string()))?;
    check_bound(&plan, &inputs, opts)?;
    let catalogue = registry.catalogue();
    // A `schema` (or an agent's `output`) given by an input is known now: type what reads it.
    let typed = oracle_plan::types::check(&plan, &catalogue, Some(&inputs));
    if !typed.is_empty() {
        return Err(SessionError::Plan {
            path: opts.plan.clone(),
            text: source,
            diagnostics: typed,
        });
    }
    let extra = parse_grants(&opts.grants)?;
    if let Some(g) = extra
        .iter()
        .find(|g| !catalogue.grants_something(&g.domain, &g.action))
    {
        return Err(SessionError::UnknownGrant {
            grant: g.to_string(),
            kind: format!("{}:{}", g.domain, g.action),
            known: catalogue.capability_kinds().into_iter().collect(),
        });
    }
    let grants = merged_grants(&plan, extra);
    let root = canonical_root(&opts.root)?;
    let warnings = grant_warnings(&grants, &opts.home, &root);
    let key_claim = |run: &str| {
        opts.key
            .as_ref()
            .map(|k| crate::keys::KeyClaim::new(k, run, plan.hash, &inputs, opts.seed))
    };
    // The key is claimed before anything is created: a start that loses finds the winner's run.
    let key_guard = key_claim("")
        .map(|want| take_key(&opts.home, &want))
        .transpose()?;
    let (id, dir) = new_run_dir(&opts.home, &plan.name)?;
    if let (Some(guard), Some(claim)) = (&key_guard, key_claim(&id)) {
        guard.record(&claim)?;
    }
    write_atomic(&dir.join(PLAN_FILE), source.as_bytes())?;
    keep_uses(&dir, sources)?;
    let bindings = crate::bindings::Bindings {
        root: Some(root.clone()),
        models: opts.models.models.clone(),
        secrets: opts.secret_vars.clone(),
        tools: opts.tools.clone(),
    };
    let meta = bindings.to_json(&id, &crate::seal::SealKey::open_or_create(&opts.home)?);
    for (name, bytes) in &opts.tool_files {
        let kept = dir.join(crate::declared::KEPT_DIR);
        fs::create_dir_all(&kept).map_err(SessionError::io(&kept))?;
        write_atomic(&kept.join(name), bytes)?;
    }
    write_atomic(&dir.join(META_FILE), format!("{meta:#}\n").as_bytes())?;
    let submission = Submission {
        seed: opts.seed,
        grants: grants.iter().map(ToString::to_string).collect(),
        inputs,
        root,
        jobs: opts.jobs,
        domains: opts.domains.clone(),
        memory: None,
        budget: opts.budget.clone(),
        key: opts.key.clone(),
        parent: opts.parent.clone(),
    };
    if submit {
        let text = serde_json::to_string_pretty(&submission).unwrap_or_default();
        write_atomic(&dir.join(SUBMISSION_FILE), format!("{text}\n").as_bytes())?;
    }
    Ok(Prepared {
        id,
        dir,
        plan,
        submission,
        warnings,
        // A submission is live once written: the key is let go here.
        key_guard: if submit { None } else { key_guard },
    })
}

/// The sub-plans (and child plans) of a new run, kept beside its plan: `resume` and `replay`
/// compile these copies, and a `spawn` step starts its child from one.
fn keep_uses(dir: &Path, sources: oracle_plan::Sources) -> Result<()> {
    for (path, text) in sources {
        let target = dir.join(USES_DIR).join(&path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(SessionError::io(parent))?;
        }
        write_atomic(&target, text.as_bytes())?;
    }
    Ok(())
}

/// A plan's text given in a request, held to the limit a plan file is.
fn plan_text_checked(path: &Path, text: &str) -> Result<String> {
    let len = text.len() as u64;
    if len > PLAN_BYTES_MAX {
        return Err(SessionError::TooLarge {
            path: path.to_path_buf(),
            len,
            limit: PLAN_BYTES_MAX,
        });
    }
    Ok(text.to_owned())
}

/// Claims a start's key ([`crate::keys::take`]): the guard that holds it, or
/// [`SessionError::KeyUsed`] naming the run it started, with what differs (nothing: the start
/// is that run's).
pub(crate) fn take_key(home: &Path, want: &crate::keys::KeyClaim) -> Result<crate::keys::KeyGuard> {
    crate::keys::check_key(&want.key).map_err(|why| SessionError::BadKey { why })?;
    match crate::keys::take(home, want)? {
        crate::keys::Taken::Free(guard) => Ok(guard),
        crate::keys::Taken::Used { run, differs } => Err(SessionError::KeyUsed {
            key: want.key.clone(),
            run,
            differs,
        }),
    }
}

/// An answer refused for run `run` before anything is recorded.
pub fn refused_answer(run: &str, source: AnswerError) -> SessionError {
    SessionError::Answer {
        run: run.to_owned(),
        source,
    }
}

fn upgrade_refused_text(run: &str, d: &oracle_core::diff::Divergence) -> String {
    let step =
        d.a.payload
            .get("step")
            .and_then(Value::as_str)
            .map_or(String::new(), |s| format!(" at step `{s}`"));
    let fields: Vec<&str> = d.fields.iter().map(|f| f.path.as_str()).collect();
    format!(
        "{run}: the new plan does not re-derive the recorded run: event {} (`{}`){step} differs in {} ({}); nothing was written",
        d.seq,
        d.a.kind,
        if fields.is_empty() {
            "kind".to_owned()
        } else {
            fields.join(", ")
        },
        d.class.name()
    )
}

fn key_used_text(key: &str, run: &str, differs: &[String]) -> String {
    if differs.is_empty() {
        format!("idempotency key `{key}` started run {run} already, with the same plan and inputs")
    } else {
        format!(
            "idempotency key `{key}` started run {run} with another {}; nothing was created (use a new key for a different run)",
            differs.join(" and ")
        )
    }
}

/// Refuses a new run that does not bind every model and secret its plan references (with
/// these inputs): a run that started would fail at the first call of an unbound model, after
/// events (and perhaps a person's approval) were recorded.
fn check_bound(
    plan: &CompiledPlan,
    inputs: &Map<String, Value>,
    opts: &StartOptions,
) -> Result<()> {
    let wanted = oracle_plan::bindings::referenced(plan, inputs);
    let models: Vec<String> = wanted
        .models
        .into_iter()
        .filter(|m| !opts.models.models.contains_key(m))
        .collect();
    let secrets: Vec<String> = wanted
        .secrets
        .into_iter()
        .filter(|s| !opts.secret_vars.contains_key(s))
        .collect();
    if models.is_empty() && secrets.is_empty() {
        return Ok(());
    }
    Err(SessionError::Unbound { models, secrets })
}

/// `model `fast` is not bound: pass --model fast=URL ... or set [models.fast] url in
/// oracle.toml`, for every unbound model and secret: both ways to bind one are named, the flag
/// and the config file's key (docs/CONFIG.md).
fn unbound_text(models: &[String], secrets: &[String]) -> String {
    let one = |kind: &str,
               names: &[String],
               flag: &dyn Fn(&str) -> String,
               key: &dyn Fn(&str) -> String,
               why: &str| {
        let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
        let flags: Vec<String> = names.iter().map(|n| flag(n)).collect();
        let keys: Vec<String> = names.iter().map(|n| key(n)).collect();
        let (noun, verb) = match names.len() {
            1 => (kind.to_owned(), "is"),
            _ => (format!("{kind}s"), "are"),
        };
        format!(
            "the plan's {noun} {} {verb} not bound: pass {}{why} or set {} in oracle.toml",
            quoted.join(", "),
            flags.join(" "),
            keys.join(", ")
        )
    };
    let mut parts = Vec::new();
    if !models.is_empty() {
        parts.push(one(
            "model",
            models,
            &|m| format!("--model {m}=URL"),
            &|m| format!("[models.{}] url", toml_key(m)),
            " (an OpenAI-compatible base URL)",
        ));
    }
    if !secrets.is_empty() {
        parts.push(one(
            "secret",
            secrets,
            &|s| format!("--secret {s}=ENV_VAR"),
            &|s| format!("[secrets] {} = {{ env = \"ENV_VAR\" }}", toml_key(s)),
            "",
        ));
    }
    parts.join("; ")
}

/// `name` as a TOML key: bare when it can be (letters, digits, `_`, `-`), otherwise quoted, so
/// a name with a `.` is one key and not a table path.
fn toml_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

#[cfg(test)]
mod unbound_tests {
    use super::*;

    #[test]
    fn names_the_flag_and_the_config_key() {
        let t = unbound_text(&["fast".into(), "a.b".into()], &["TOKEN".into()]);
        assert_eq!(
            t,
            "the plan's models `fast`, `a.b` are not bound: pass --model fast=URL --model a.b=URL \
             (an OpenAI-compatible base URL) or set [models.fast] url, [models.\"a.b\"] url in \
             oracle.toml; the plan's secret `TOKEN` is not bound: pass --secret TOKEN=ENV_VAR or \
             set [secrets] TOKEN = { env = \"ENV_VAR\" } in oracle.toml"
        );
    }
}

/// Starts a run [`prepare`]d with `submit` (a worker's first drive of a submitted run): the
/// stored plan is compiled again from the run directory, as `resume` does, and driven from
/// its first event. The run's log must not exist yet.
pub fn start_prepared(
    home: &Path,
    run: &str,
    writing: impl Into<crate::writer::Writing>,
    registry: &Registry,
    scorer: Option<std::sync::Arc<dyn crate::scorer::Scorer>>,
    points: resume_point::Policy,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Session> {
    // Not `find`: a submitted run has no log yet, which is what `find` looks for.
    let dir = home.join("runs").join(run);
    let found = RunDir {
        id: run.to_owned(),
        paths: LogPaths::of_run(&dir),
        dir,
    };
    let submission = read_submission(&found.dir)?;
    let plan_path = found.dir.join(PLAN_FILE);
    let source = read_text(&plan_path)?;
    let sources = plan_sources(&found.dir.join(USES_DIR), &source);
    let plan = compile_with_uses(&plan_path, &source, registry, &sources)?;
    let writing = writing.into();
    let writer =
        LogWriter::create(&found.paths, writing.durability)?.with_replica(writing.replica.clone());
    let mut config = submission.config(home, &found.dir, scorer, writing.stores.as_ref())?;
    config.resume_points = resume_point::Policy {
        key: Some(crate::seal::SealKey::open_or_create(home)?),
        ..points
    };
    let agent = PlanAgent::new(plan, config.inputs.clone());
    // A live drive: a cancel asked of it by another process is taken between rounds.
    let mut watch = crate::cancel::Watch::new(&found.dir);
    let mut probe = || watch.probe();
    let mut engine = Engine::new(agent, registry, config, Vec::new(), Some(writer))
        .with_progress(progress)
        .with_cancel(&mut probe);
    let report = engine.drive()?;
    if let Some(w) = engine.into_writer() {
        w.close()?;
    }
    finished_drive(&found.dir, &report);
    Ok(Session {
        id: found.id,
        dir: found.dir,
        report,
        repaired: None,
        warnings: Vec::new(),
    })
}

/// The checks an answer for `run` gets before anything is recorded, made without its program:
/// the run must be suspended on that step, the value within the question's schema and the
/// limits. For a store's code run, whose program only a worker told about its agent starts
/// (that worker's drive makes the program's own checks). Nothing is written.
pub fn check_answer_alone(home: &Path, run: &str, answer: &(String, Value)) -> Result<()> {
    let found = find(home, run)?;
    prepare_resume(
        &found,
        Intent::Go(Some(answer)),
        Durability::None,
        true,
        None,
    )
    .map(|_| ())
}

/// The [`Submission`] a submitted run's directory `dir` keeps ([`SUBMISSION_FILE`]).
pub(crate) fn read_submission(dir: &Path) -> Result<Submission> {
    let path = dir.join(SUBMISSION_FILE);
    let text = read_text(&path)?;
    serde_json::from_str(&text).map_err(|e| SessionError::Io {
        path: path.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

/// A run directory found by id or path.
#[derive(Clone, Debug)]
pub struct RunDir {
    pub id: String,
    pub paths: LogPaths,
    pub dir: PathBuf,
}

/// Finds a run by id (under `<home>/runs`) or by its directory.
///
/// Every command that takes a run resolves it here: a run id, a run directory, or the run's
/// log file (`<dir>/events.jsonl` beside its `plan.plan`) name the same run.
pub fn find(home: &Path, run: &str) -> Result<RunDir> {
    let paths = LogPaths::resolve(Path::new(run), home).ok_or_else(|| not_found(home, run))?;
    let paths = as_run(paths);
    let Some(dir) = paths.run_dir.clone() else {
        return Err(SessionError::NotFound {
            run: run.to_owned(),
            home: home.to_path_buf(),
            hint: " (it is a log file outside a run directory: this command needs a run, the directory holding its events.jsonl and plan.plan)".to_owned(),
        });
    };
    let id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| run.to_owned());
    Ok(RunDir { id, paths, dir })
}

/// A run's log named by its path (`<dir>/events.jsonl` beside `<dir>/plan.plan`) as the run
/// it belongs to, so that it gets the same snapshots, torn-tail and checkpoint files as when
/// named by id or directory. Other paths are left as they are.
pub fn as_run(paths: LogPaths) -> LogPaths {
    if paths.run_dir.is_some() || paths.log.file_name() != Some(std::ffi::OsStr::new(LOG_FILE)) {
        return paths;
    }
    match paths.log.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) if dir.join(PLAN_FILE).is_file() => LogPaths::of_run(dir),
        _ => paths,
    }
}

/// Most edits between a name given and a run id for the id to be suggested.
pub const SUGGEST_EDITS_MAX: u64 = 3;

/// The error for a run that cannot be found, with a "did you mean" from the run list (the
/// closest id by edit distance, ties to the first in id order) when one is close.
pub fn not_found(home: &Path, run: &str) -> SessionError {
    let ids: Vec<String> = list(home)
        .map(|l| l.into_iter().map(|i| i.id).collect())
        .unwrap_or_default();
    // A path's last component is what is compared with run ids.
    let name = Path::new(run)
        .file_name()
        .map_or_else(|| run.to_owned(), |n| n.to_string_lossy().into_owned());
    let best = ids
        .iter()
        .map(|id| (edits(&name, id), id))
        .filter(|(d, _)| *d <= SUGGEST_EDITS_MAX)
        .min_by_key(|(d, _)| *d);
    let hint = match best {
        Some((_, id)) => format!(" (did you mean `{id}`? see `oracle runs`)"),
        None if ids.is_empty() => " (there are no runs yet)".to_owned(),
        None => " (see `oracle runs`)".to_owned(),
    };
    SessionError::NotFound {
        run: run.to_owned(),
        home: home.to_path_buf(),
        hint,
    }
}

/// Levenshtein distance over chars (names are short: at most a few hundred chars compared).
fn edits(a: &str, b: &str) -> u64 {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<u64> = (0..=b.len() as u64).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i as u64 + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + u64::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

pub(crate) fn run_started(path: &Path, events: &Recorded) -> Result<RunStarted> {
    match events.event(0).as_ref().map(Event::typed) {
        Some(Ok(Payload::RunStarted(p))) => Ok(p),
        _ => Err(SessionError::NoStart {
            path: path.to_path_buf(),
        }),
    }
}

/// Checks a value given from outside (an answer, the run's inputs) against the limits a recorded
/// value must meet, so it is refused before anything is written rather than failing the event
/// that would record it: at most [`INPUT_BYTES_MAX`] canonical bytes, nested at most
/// [`oracle_core::limits::VALUE_DEPTH_MAX`] levels.
pub fn check_outside_value(value: &Value, what: &str) -> std::result::Result<(), OutsideValue> {
    oracle_core::limits::check_value(value).map_err(|source| OutsideValue::Limit {
        what: what.to_owned(),
        source,
    })?;
    let bytes = oracle_core::canon::encode(value).map_or(u64::MAX, |b| b.len() as u64);
    if bytes > INPUT_BYTES_MAX {
        return Err(OutsideValue::TooLarge {
            what: what.to_owned(),
            bytes,
        });
    }
    Ok(())
}

/// Why a value given from outside is refused ([`check_outside_value`]); `what` names it (`the
/// answer`, `the run's inputs`). Worded as before: a refused answer's reason quotes it.
#[derive(Debug, thiserror::Error)]
pub enum OutsideValue {
    #[error("{what} is {source}")]
    Limit {
        what: String,
        source: oracle_core::limits::LimitError,
    },
    #[error("{what} is {bytes} bytes, more than input_bytes_max = {INPUT_BYTES_MAX}")]
    TooLarge { what: String, bytes: u64 },
}

/// The declared tools a run pinned in its first event (none for a run without them).
pub fn recorded_pins(run: &RunDir) -> Result<Vec<oracle_core::payload::ToolPin>> {
    let first = crate::index::IndexedLog::open(&run.paths.log)?.read(0)?;
    match first.typed() {
        Ok(Payload::RunStarted(p)) => Ok(p.tools.unwrap_or_default()),
        _ => Err(SessionError::NoStart {
            path: run.paths.log.clone(),
        }),
    }
}

/// Where a resumed run works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workdir {
    /// The directory oracle is run from, as for `oracle run`; a resume from another directory
    /// than the one the run recorded is refused (relative paths would mean other files).
    Here,
    /// The directory the run recorded, sealed in `run.json` (`oracle serve` and a store's
    /// worker, which drive runs started elsewhere). An unsealed one is refused.
    Recorded,
}

/// The working directory a resumed run continues in (see [`Workdir`]).
pub fn resume_root(
    found: &RunDir,
    workdir: Workdir,
    key: Option<&crate::seal::SealKey>,
) -> Result<PathBuf> {
    let stored = crate::bindings::Bindings::read(&found.dir);
    match workdir {
        Workdir::Recorded => {
            let (sealed, problems) = stored.sealed(key);
            match sealed.root {
                Some(root) => Ok(root),
                None => Err(SessionError::Unsealed {
                    run: found.id.clone(),
                    unsealed: problems
                        .into_iter()
                        .find(|u| u.binding == "root")
                        .unwrap_or(crate::bindings::Unsealed {
                            binding: "root".into(),
                            why: crate::bindings::UnsealedWhy::Removed,
                        }),
                    hint: format!(
                        "resume it with `oracle resume {}` from its working directory",
                        found.id
                    ),
                }),
            }
        }
        Workdir::Here => {
            // Only ever a reason to refuse: the directory used is this one, whatever the file
            // says, so an edited root cannot send a write anywhere.
            let here = canonical_root(Path::new("."))?;
            match stored.unchecked().root.clone() {
                Some(recorded) if recorded != here => Err(SessionError::WorkdirMismatch {
                    run: found.id.clone(),
                    recorded,
                    here,
                }),
                _ => Ok(here),
            }
        }
    }
}

/// The directories of the run store no tool may touch: the home and the run's directory (which
/// may lie elsewhere when a run is named by its directory).
fn store_of(home: &Path, run_dir: &Path) -> Vec<PathBuf> {
    let mut store = vec![home.to_path_buf(), run_dir.to_path_buf()];
    for p in &mut store {
        if let Ok(c) = p.canonicalize() {
            *p = c;
        }
    }
    store.sort();
    store.dedup();
    store
}

/// The stored plan, compiled and checked against the hash the run recorded.
/// The plan is the version the run follows now: the last `plan_upgraded`'s, kept as
/// `plans/<hash>.plan` (`crate::fork`), or the one it started with.
fn stored_plan(run: &RunDir, started: &RunStarted, registry: &Registry) -> Result<CompiledPlan> {
    stored_plan_source(run, started, registry).map(|(plan, _)| plan)
}

/// [`stored_plan`] with the text it was compiled from.
fn stored_plan_source(
    run: &RunDir,
    started: &RunStarted,
    registry: &Registry,
) -> Result<(CompiledPlan, String)> {
    let current = crate::fork::current_program(run, started.program_hash)?;
    let path = crate::fork::version_path(&run.dir, &current);
    let source = read_text(&path)?;
    let sources = plan_sources(&run.dir.join(USES_DIR), &source);
    let plan = compile_with_uses(&path, &source, registry, &sources)?;
    if plan.hash != current {
        return Err(SessionError::PlanChanged {
            path,
            found: plan.hash,
            recorded: current,
        });
    }
    Ok((plan, source))
}

/// The program a drive of `run` re-derives it with, of either kind, and whether it differs
/// from the one the run started with (an upgraded plan; a code agent's changed files).
fn stored_agent(
    run: &RunDir,
    started: &RunStarted,
    registry: &Registry,
    config: &RunConfig,
) -> Result<(crate::code_run::RunAgent, bool)> {
    if crate::code_run::is_code_run(&run.dir) {
        return crate::code_run::stored_code_agent(run, &config.root, started);
    }
    let plan = stored_plan(run, started, registry)?;
    let upgraded = plan.hash != started.program_hash;
    let agent = PlanAgent::new(plan, config.inputs.clone());
    Ok((crate::code_run::RunAgent::Plan(Box::new(agent)), upgraded))
}

/// A drive's settings for re-deriving a recorded run (no writer): `config_of` as a replay has
/// it.
pub(crate) fn replay_config(
    started: &RunStarted,
    root: PathBuf,
    home: &Path,
    run_dir: &Path,
) -> Result<RunConfig> {
    config_of(started, root, store_of(home, run_dir), 1, None)
}

/// The domain settings a run recorded, by domain: `domains` (format 3), or the memory's under
/// `memory` (formats 1 and 2).
fn recorded_domains(started: &RunStarted) -> BTreeMap<String, Value> {
    match (&started.domains, &started.memory) {
        (Some(d), _) => d.clone(),
        (None, Some(m)) => {
            BTreeMap::from([(oracle_memory::settings::DOMAIN.to_owned(), m.clone())])
        }
        (None, None) => BTreeMap::new(),
    }
}

fn config_of(
    started: &RunStarted,
    root: PathBuf,
    store: Vec<PathBuf>,
    jobs: u32,
    shared: Option<crate::shared::Attach>,
) -> Result<RunConfig> {
    Ok(RunConfig {
        seed: started.seed,
        grants: parse_grants(&started.grants)?,
        inputs: started.inputs.clone(),
        root,
        store,
        jobs,
        calls_max: CALLS_MAX_DEFAULT,
        domains: recorded_domains(started),
        budget: started.budget.clone(),
        scorer: None,
        resume_points: resume_point::Policy::default(),
        key: started.key.clone(),
        parent: started.parent.clone(),
        live: shared.as_ref().map(|a| a.run.clone()),
        shared,
    })
}

/// The kind of the last event the program produced: verdicts and sweeps appended after it
/// (external events) are skipped.
pub fn last_program_kind(events: &Recorded) -> Option<oracle_core::EventKind> {
    (0..events.len())
        .rev()
        .filter_map(|seq| events.kind(seq))
        .find(|k| !k.is_external())
}

/// How the domain `step` waits on names its wait, when the step's last call was one that
/// waits on a domain (`memory.query` with `require: "resolved"` waits on a belief).
pub fn domain_wait(events: &Recorded, step: &str) -> Option<crate::domain::WaitWords> {
    latest_call(events, step).and_then(|(tool, _)| crate::domain::wait_of(&tool))
}

/// The line (subject, predicate) of store `name` the suspended run in `dir` waits on, read from
/// what its log records, never from its suspension's words: the store its `run_started`
/// attaches its memory to (`domains.memory.store`) and the `memory.query` its waiting step last
/// called. `None` for a run not suspended, or waiting on anything else.
pub fn shared_wait(dir: &Path, name: &str) -> Result<Option<(String, String)>> {
    let info = run_info(dir);
    let Some((step, _)) = info.waiting.filter(|_| info.status == "suspended") else {
        return Ok(None);
    };
    let log = dir.join(LOG_FILE);
    let Some(started) = first_event(&log)? else {
        return Ok(None);
    };
    let settings = recorded_domains(&started);
    let store = settings
        .get(oracle_memory::settings::DOMAIN)
        .and_then(|m| m.get("store"))
        .and_then(Value::as_str);
    if store != Some(name) {
        return Ok(None);
    }
    let events = Recorded::read(&log)?;
    Ok(match latest_call(&events, &step) {
        Some((tool, input)) if tool == oracle_memory::tools::QUERY => {
            let field = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_owned);
            field("subject").zip(field("predicate"))
        }
        _ => None,
    })
}

/// The last event the program produced, parsed (verdicts and sweeps appended after it are
/// skipped): what says whether the run is suspended, finished or still running.
pub fn last_program_event(events: &Recorded) -> Option<Event> {
    (0..events.len())
        .rev()
        .find(|&seq| events.kind(seq).is_some_and(|k| !k.is_external()))
        .and_then(|seq| events.event(seq))
}

/// The JSON Schema a `human.ask` call of `step` asked its answer to follow, if any.
pub fn answer_schema(events: &Recorded, step: &str) -> Option<Value> {
    latest_call(events, step)
        .filter(|(tool, _)| tool == oracle_plan::agent::ASK_TOOL)
        .and_then(|(_, input)| input.get("schema").cloned())
}

/// The step a suspended run waits on, and what an answer for it should look like: what
/// `oracle runs` says in a line, and what a form asking for the answer needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub step: String,
    /// Why it waits, as its `suspended` event recorded it (the question, the last failure, the
    /// belief it needs).
    pub reason: String,
    /// Attempts the step made before it waited.
    pub attempts: u64,
    /// The seq of the `suspended` event.
    pub seq: u64,
    /// The tool the step called last (`human.ask`, `llm.chat`, `memory.query`, ...), if any.
    pub tool: Option<String>,
    /// The question of a `human.ask` step.
    pub question: Option<String>,
    /// The JSON Schema an answer should meet, when one is known: a `human.ask` call's `schema`;
    /// an `llm.chat` call's `schema`, else a string (the reply's text); else the output schema
    /// of the step's tool in `registry`. A hint for asking: `resume` checks the answer itself
    /// (the step's `expect` too), so a value that meets it can still be refused.
    pub schema: Option<Value>,
    /// The step waits on a belief (`memory.query` with `require: "resolved"`): it takes a
    /// verdict (`oracle adjudicate`), never a value.
    pub belief: bool,
}

/// What the run of `events` waits on, if its program's last event is `suspended` (verdicts and
/// sweeps appended since are skipped, as `oracle runs` skips them). `registry` gives the output
/// schemas of tools other than `human.ask` and `llm.chat`.
pub fn waiting(events: &Recorded, registry: &Registry) -> Option<Waiting> {
    let last = last_program_event(events)?;
    let Ok(Payload::Suspended(s)) = last.typed() else {
        return None;
    };
    // The step's latest call: what it asked, and so what an answer stands in for.
    let call = (0..last.seq).rev().find_map(|seq| {
        if events.kind(seq) != Some(oracle_core::EventKind::ToolCalled) {
            return None;
        }
        match events.event(seq)?.typed() {
            Ok(Payload::ToolCalled(c)) if c.step == s.step => Some(c),
            _ => None,
        }
    });
    let tool = call.as_ref().map(|c| c.tool.clone());
    let input = call.as_ref().map(|c| &c.input);
    let belief = tool.as_deref() == Some(oracle_memory::tools::QUERY);
    let question = match (tool.as_deref(), input) {
        (Some(oracle_plan::agent::ASK_TOOL), Some(i)) => {
            i.get("question").and_then(Value::as_str).map(str::to_owned)
        }
        _ => None,
    };
    let schema = match (tool.as_deref(), input) {
        _ if belief => None,
        (Some(oracle_plan::agent::ASK_TOOL), Some(i)) => i.get("schema").cloned(),
        (Some(oracle_plan::agent::CHAT_TOOL), Some(i)) => Some(
            i.get("schema")
                .cloned()
                .unwrap_or_else(|| json!({"type": "string"})),
        ),
        (Some(t), _) => registry.get(t).map(|r| r.decl.output_schema.clone()),
        (None, _) => None,
    };
    Some(Waiting {
        step: s.step,
        reason: s.reason,
        attempts: s.attempts,
        seq: last.seq,
        tool,
        question,
        schema,
        belief,
    })
}

/// The compiled plan a recorded run keeps (`plan.plan` and its `uses/`), checked against the
/// hash its first event recorded: the plan as the run ran it, for showing its step graph.
/// Declared tools are loaded from the directories `run.json` keeps so that a plan calling them
/// compiles, starting no MCP server (the listing the run kept is read instead).
pub fn recorded_plan(run: &RunDir) -> Result<CompiledPlan> {
    recorded_plan_source(run).map(|(plan, _)| plan)
}

/// [`recorded_plan`] with its text: the plan the run follows now, checked against the program
/// hash its log records (an edited plan file is refused, never shown as the run's plan).
pub fn recorded_plan_source(run: &RunDir) -> Result<(CompiledPlan, String)> {
    let first = crate::index::IndexedLog::open_with(&run.paths.log, false)?.read(0)?;
    let started = match first.typed() {
        Ok(Payload::RunStarted(p)) => p,
        _ => {
            return Err(SessionError::NoStart {
                path: run.paths.log.clone(),
            });
        }
    };
    let mut registry = crate::tools::builtin();
    // To compile the plan for showing it: no tool is called and no MCP server started, so the
    // directories are taken as the file says (the pins of the run's first event still apply).
    let dirs = crate::bindings::Bindings::read(&run.dir)
        .unchecked()
        .tools
        .clone();
    if !dirs.is_empty() {
        let problems = |p: Vec<crate::declared::Problem>| SessionError::Tools {
            run: run.id.clone(),
            problems: p
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        };
        let loaded = crate::declared::load(
            &dirs,
            &std::sync::Arc::default(),
            crate::declared::McpMode::Recorded(&run.dir),
        )
        .map_err(problems)?;
        crate::declared::declare(&mut registry, loaded).map_err(problems)?;
    }
    stored_plan_source(run, &started, &registry)
}

/// How a resume uses resume points (`crate::resume_point`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Points {
    /// Start from the newest resume point the log accepts; `false` re-derives the run from its
    /// first event (`oracle resume --no-snapshots`).
    pub start_from: bool,
    /// When the drive writes new ones.
    pub policy: resume_point::Policy,
}

impl Default for Points {
    fn default() -> Self {
        Points {
            start_from: true,
            policy: resume_point::Policy::default(),
        }
    }
}

/// How a resume drives the run, beyond what it resumes with.
#[derive(Clone)]
pub struct Drive {
    /// Tools of one round that may run at once.
    pub jobs: u32,
    pub durability: Durability,
    /// Scores auctions that close from here on; `None`: the built-in rubric.
    pub scorer: Option<std::sync::Arc<dyn crate::scorer::Scorer>>,
    pub points: Points,
    pub workdir: Workdir,
    /// Where the drive's commits go besides the log (a store's worker), if anywhere.
    pub replica: Option<crate::replica::Shared>,
    /// Where the named stores are kept, when not in the home (a store's worker).
    pub stores: Option<std::sync::Arc<dyn crate::shared::StoreBackend>>,
    /// Who gave the answer a resume records (the `by` of its `resumed` event): a token's name
    /// when a server over a store queued the answer for a worker.
    pub answered_by: Option<String>,
    /// Fire the timer the run waits on: `Some(false)` if it is due, `Some(true)` in any case
    /// (`oracle resume --wake [--force]`).
    pub wake: Option<bool>,
    /// How long a code agent may take (a code run's resume; docs/AGENTS.md).
    pub agent_limits: crate::code_run::Limits,
}

impl Default for Drive {
    fn default() -> Self {
        Drive {
            jobs: 1,
            durability: Durability::DEFAULT,
            scorer: None,
            points: Points::default(),
            workdir: Workdir::Here,
            replica: None,
            stores: None,
            answered_by: None,
            wake: None,
            agent_limits: crate::code_run::Limits::default(),
        }
    }
}

/// What a code run's resume starts from ([`prepare_resume`] without resume points: a code
/// agent cannot save itself, so its runs are always re-derived from the start).
pub(crate) fn prepare_code_resume(
    found: &RunDir,
    answer: Option<&(String, Value)>,
    drive: &Drive,
) -> Result<ResumeStart> {
    let intent = match drive.wake {
        Some(_) => Intent::Wake,
        None => Intent::Go(answer),
    };
    prepare_resume(found, intent, drive.durability, false, None)
}

/// The settings of a code run's resume, as a plan run's resume has them.
pub(crate) fn code_config(
    home: &Path,
    found: &RunDir,
    started: &RunStarted,
    root: PathBuf,
    drive: &Drive,
) -> Result<RunConfig> {
    let shared = attach(home, &found.id, drive.stores.as_ref());
    let mut config = config_of(
        started,
        root,
        store_of(home, &found.dir),
        drive.jobs,
        shared,
    )?;
    config.scorer = drive.scorer.clone();
    Ok(config)
}

/// What a resume starts from: the writer at the log's end, the record to catch up with (the
/// whole log, or its tail after `point`), the first event, and what was refused or repaired.
pub(crate) struct ResumeStart {
    pub(crate) writer: LogWriter,
    pub(crate) events: Recorded,
    pub(crate) started: RunStarted,
    pub(crate) repaired: Option<Repair>,
    /// The point, and the state after its event (checked).
    point: Option<(ResumePoint, oracle_core::State)>,
    /// Resume points refused, newest first, with why.
    refused: Vec<(u64, String)>,
}

/// The checks every resume makes before the log is touched, under the run's writer lock
/// (taken at once, or waited for a bounded time when `wait`): a torn tail left by a crash is
/// moved aside, the log is read under the lock, and the run must be resumable with `answer`
/// (suspended on that step, the answer within its schema and the limits; or interrupted, with
/// no answer). With `points`, the log is read from the newest resume point it accepts
/// (verified from there on) instead of from its start.
fn prepare_resume(
    found: &RunDir,
    intent: Intent<'_>,
    durability: Durability,
    wait: bool,
    points: Option<&crate::seal::SealKey>,
) -> Result<ResumeStart> {
    let paths = &found.paths;
    let mut refused = Vec::new();
    if let Some(key) = points.filter(|_| !wait) {
        let (start, why) = open_at_point(paths, durability, key)?;
        refused = why;
        if let Some(PointStart {
            point,
            writer,
            tail: events,
            state,
        }) = start
        {
            match first_event(&paths.log)? {
                Some(started) if tail_knows_enough(&events) => {
                    check_resumable(found, intent, &events, Some(&point))?;
                    return Ok(ResumeStart {
                        writer,
                        events,
                        started,
                        repaired: None,
                        point: Some((point, state)),
                        refused,
                    });
                }
                _ => refused.push((
                    point.seq,
                    "the run's last decision is before it: read from the start".into(),
                )),
            }
        }
    }
    // A crash can leave a torn last record: move it aside (saved, never deleted) first.
    let mut repaired = None;
    let open = |paths: &LogPaths| {
        if wait {
            crate::adjudication::open_waiting(paths, durability)
        } else {
            LogWriter::open(paths, durability).map_err(SessionError::from)
        }
    };
    let writer = match open(paths) {
        Ok(w) => w,
        Err(SessionError::Store(StoreError::Log {
            error: LogBytesError::TornTail { .. },
            ..
        })) => {
            repaired = Some(repair::repair(paths)?);
            open(paths)?
        }
        Err(e) => return Err(e),
    };
    let events = Recorded::read(&paths.log)?;
    // A start killed between creating the log and its first commit leaves it empty. Nothing
    // impure runs before that commit, so nothing happened; but the seed, inputs and grants
    // were never recorded, so the run cannot be continued.
    if events.is_empty() {
        return Err(SessionError::NothingRecorded {
            run: found.id.clone(),
        });
    }
    let started = run_started(&paths.log, &events)?;
    check_resumable(found, intent, &events, None)?;
    Ok(ResumeStart {
        writer,
        events,
        started,
        repaired,
        point: None,
        refused,
    })
}

/// A resume point the log accepts, ready to drive from ([`open_at_point`]).
pub struct PointStart {
    pub point: ResumePoint,
    /// Opened at the log's end, under the lock the tail was read with.
    pub writer: LogWriter,
    /// The log after the point's event, verified.
    pub tail: Recorded,
    /// The state after the point's event, checked against the log
    /// ([`Engine::from_point_at`]).
    pub state: oracle_core::State,
}

/// The newest resume point the log accepts, with a writer opened at the log's end and the
/// log's tail after the point; and the points refused on the way, newest first, with why.
/// Everything is read under the writer lock, taken once. `None` when no point is usable (or
/// the lock is held: the caller's own open reports that).
#[allow(clippy::type_complexity)]
pub fn open_at_point(
    paths: &LogPaths,
    durability: Durability,
    key: &crate::seal::SealKey,
) -> Result<(Option<PointStart>, Vec<(u64, String)>)> {
    let mut refused = Vec::new();
    let seqs = match resume_point::list(paths) {
        Ok(s) if !s.is_empty() => s,
        _ => return Ok((None, refused)),
    };
    let Ok(lock) = LogWriter::lock(paths) else {
        return Ok((None, refused));
    };
    for &seq in seqs.iter().rev() {
        match read_from_point(paths, seq, key) {
            Ok((point, tail, state, head, end)) => {
                let writer =
                    LogWriter::open_tail(paths, durability, lock, &point.anchor(), head, end)?;
                let start = PointStart {
                    point,
                    writer,
                    tail,
                    state,
                };
                return Ok((Some(start), refused));
            }
            Err(why) => refused.push((seq, why)),
        }
    }
    Ok((None, refused))
}

/// Loads resume point `seq`, reads and verifies the log's tail after it, and replays the
/// tail's state changes from the point's checked state: the state at the point, and the log's
/// head and state at its end.
#[allow(clippy::type_complexity)]
fn read_from_point(
    paths: &LogPaths,
    seq: u64,
    key: &crate::seal::SealKey,
) -> std::result::Result<
    (
        ResumePoint,
        Recorded,
        oracle_core::State,
        oracle_core::Head,
        oracle_core::State,
    ),
    String,
> {
    let point = resume_point::load(paths, seq, key).map_err(|e| e.to_string())?;
    let tail = Recorded::read_tail(&paths.log, &point.anchor()).map_err(|e| e.to_string())?;
    let anchor = *tail
        .anchor()
        .ok_or("the tail was read without its anchor")?;
    let at_point = point
        .state
        .restore(anchor.state_after)
        .map_err(|e| e.to_string())?;
    // Only `state_changed` events change the state: they are parsed and applied; every other
    // event's state hashes are checked from its verified link (a persistent map: the clone
    // shares every node with `at_point`).
    let mut state = at_point.clone();
    let mut head = oracle_core::Head {
        next_seq: anchor.seq + 1,
        hash: anchor.hash,
        time: anchor.time,
        state: anchor.state_after,
    };
    for s in tail.base()..tail.len() {
        let link = *tail
            .link(s)
            .ok_or_else(|| format!("event {s} of the tail has no link"))?;
        if link.kind == oracle_core::EventKind::StateChanged {
            let e = tail
                .event(s)
                .ok_or_else(|| format!("event {s} of the tail does not read back"))?;
            oracle_core::reduce::apply_in_place(&mut state, &e)
                .map_err(|e| format!("event {s}: {e}"))?;
        }
        if link.state_before != head.state || link.state_after != state.hash() {
            return Err(format!(
                "event {s}: the state it records ({}) is not the state replayed from the point ({})",
                link.state_after.short(),
                state.hash().short()
            ));
        }
        head = oracle_core::Head {
            next_seq: s + 1,
            hash: link.hash,
            time: link.time,
            state: link.state_after,
        };
    }
    Ok((point, tail, at_point, head, state))
}

/// The log's first event (`run_started`), read and checked on its own.
pub(crate) fn first_event(log: &Path) -> Result<Option<RunStarted>> {
    let mut first = None;
    crate::reader::scan(log, false, |e| {
        first = Some(e);
        Ok(false)
    })?;
    Ok(first.and_then(|e| match e.typed() {
        Ok(Payload::RunStarted(p)) => Some(p),
        _ => None,
    }))
}

/// Whether a tail holds what the resume checks read: the run's last decision.
fn tail_knows_enough(events: &Recorded) -> bool {
    last_program_event(events).is_some()
}

/// The latest recorded call of `step`: its tool and input.
/// The tool and input of `step`'s latest call in the record, if any.
pub fn latest_call_of(events: &Recorded, step: &str) -> Option<(String, Value)> {
    latest_call(events, step)
}

fn latest_call(events: &Recorded, step: &str) -> Option<(String, Value)> {
    (events.base()..events.len()).rev().find_map(|seq| {
        if events.kind(seq) != Some(oracle_core::EventKind::ToolCalled) {
            return None;
        }
        match events.event(seq)?.typed() {
            Ok(Payload::ToolCalled(c)) if c.step == step => Some((c.tool, c.input)),
            _ => None,
        }
    })
}

/// Whether a run waiting on a step whose latest call is `call` is resumed without an answer:
/// a `wait.event` step with a kept event for it (the drive delivers the event), or a `spawn`
/// step (the drive goes to its wait and stays there; the host answers it with the child's
/// outcome).
fn goes_on_unanswered(dir: &Path, call: Option<(String, Value)>) -> bool {
    match call {
        Some((tool, _)) if tool == crate::tools::spawn::SPAWN_TOOL => true,
        call => crate::events::kept_for(dir, call),
    }
}

/// What a drive of a stored run is for: going on (with the answer for the step it waits on,
/// if it waits) or recording a cancel at its first decision boundary.
#[derive(Clone, Copy)]
enum Intent<'a> {
    Go(Option<&'a (String, Value)>),
    /// Fire the timer the run waits on (`oracle resume --wake`).
    Wake,
    Cancel,
}

/// A run suspended on a `sleep` step is woken (`wake`), never answered or resumed without a
/// wake; one whose `human.ask` has a deadline takes an answer or a wake, whichever comes
/// first; a wake needs a run waiting on a timer; and an answer to a step whose deadline fired
/// first is refused as such. `true`: a wake of a run waiting on a timer, which needs no
/// further check.
fn check_timer(
    found: &RunDir,
    events: &Recorded,
    wake: bool,
    answer: Option<&(String, Value)>,
    call_of: &dyn Fn(&str) -> Option<(String, Value)>,
) -> Result<bool> {
    use crate::tools::time::{TimerKind, timer_kind};
    let last = last_program_event(events).map(|e| e.typed());
    let waiting = match &last {
        Some(Ok(Payload::Suspended(s))) => Some(s),
        _ => None,
    };
    if let Some((step, _)) = answer
        && waiting.is_none_or(|s| &s.step != step)
        && let Some(fired) = deadline_fired(events, step)
    {
        return Err(SessionError::DeadlinePassed {
            run: found.id.clone(),
            step: step.clone(),
            fired: fired.fired,
        });
    }
    if let Some(Ok(Payload::RunFinished(_))) = &last {
        // Refused below as for any resume (`finished`).
        return Ok(false);
    }
    let kind = waiting.and_then(|s| {
        let (tool, input) = call_of(&s.step)?;
        timer_kind(&tool, &input)
    });
    match (wake, kind, waiting) {
        (true, Some(_), _) => Ok(true),
        (false, None, _) | (false, Some(TimerKind::Deadline), _) => Ok(false),
        (true, None, _) => Err(SessionError::NoTimer {
            run: found.id.clone(),
        }),
        (false, Some(TimerKind::Sleep | TimerKind::Backoff), Some(s)) => {
            Err(SessionError::TimerWait {
                run: found.id.clone(),
                step: s.step.clone(),
                reason: s.reason.clone(),
            })
        }
        (false, Some(TimerKind::Sleep | TimerKind::Backoff), None) => Ok(false),
    }
}

/// The `timer_fired` that ended `step`'s last wait, if the step's latest wait ended so (its
/// deadline passed before an answer).
fn deadline_fired(events: &Recorded, step: &str) -> Option<oracle_core::payload::TimerFired> {
    use oracle_core::EventKind as K;
    (0..events.len()).rev().find_map(|seq| {
        if !matches!(
            events.kind(seq),
            Some(K::Suspended | K::Resumed | K::TimerFired)
        ) {
            return None;
        }
        match events.event(seq)?.typed() {
            Ok(Payload::TimerFired(f)) if f.step == step => Some(Some(f)),
            Ok(Payload::Suspended(p)) if p.step == step => Some(None),
            Ok(Payload::Resumed(p)) if p.step == step => Some(None),
            _ => None,
        }
    })?
}

/// The schema a value given for a call of `tool` with `input` must meet, when the call names
/// one (a `human.ask`'s, a `wait.event`'s `schema`).
fn asked_schema(tool: &str, input: &Value) -> Option<Value> {
    [
        oracle_plan::agent::ASK_TOOL,
        crate::tools::event::WAIT_EVENT_TOOL,
    ]
    .contains(&tool)
    .then(|| input.get("schema").cloned())
    .flatten()
}

/// Whether `found` can be resumed now with `answer` (or woken, `wake`), from what its log
/// says: the check every resume makes before it writes, made alone, so a caller that would
/// write something first (an upgrade's `plan_upgraded`) refuses before writing anything.
pub fn check_resume(found: &RunDir, answer: Option<&(String, Value)>, wake: bool) -> Result<()> {
    let events = Recorded::read(&found.paths.log)?;
    let intent = if wake {
        Intent::Wake
    } else {
        Intent::Go(answer)
    };
    check_resumable(found, intent, &events, None)
}

/// Whether the run can be resumed with `answer`, from what its log says.
fn check_resumable(
    found: &RunDir,
    intent: Intent<'_>,
    events: &Recorded,
    point: Option<&ResumePoint>,
) -> Result<()> {
    let (answer, wake) = match intent {
        Intent::Go(answer) => (answer, false),
        Intent::Wake => (None, true),
        Intent::Cancel => {
            return match last_program_event(events).as_ref().map(Event::typed) {
                Some(Ok(Payload::RunFinished(f))) => Err(SessionError::CannotCancel {
                    run: found.id.clone(),
                    status: f.status.as_str().into(),
                }),
                _ => Ok(()),
            };
        }
    };
    // The step's latest call: in the record, or (when it was made before a resume point's
    // event) as the point's engine state holds it, which the drive relies on alike.
    let call_of = |step: &str| {
        latest_call(events, step).or_else(|| crate::engine::point_last_call(point?, step))
    };
    if check_timer(found, events, wake, answer, &call_of)? {
        return Ok(());
    }
    let domain_wait =
        |step: &str| call_of(step).and_then(|(tool, _)| crate::domain::wait_of(&tool));
    let answer_schema = |step: &str| call_of(step).and_then(|(t, i)| asked_schema(&t, &i));
    match last_program_event(events).as_ref().map(Event::typed) {
        Some(Ok(Payload::RunFinished(f))) => {
            return Err(SessionError::Finished {
                run: found.id.clone(),
                status: f.status.as_str().into(),
            });
        }
        // A step waiting on a domain (a belief) is resolved by the domain, never by a value.
        Some(Ok(Payload::Suspended(s))) if answer.is_some() && domain_wait(&s.step).is_some() => {
            return Err(refused_answer(
                &found.id,
                AnswerError::DomainWait {
                    words: domain_wait(&s.step).expect("checked just above"),
                    step: s.step,
                    reason: Some(s.reason),
                },
            ));
        }
        Some(Ok(Payload::Suspended(s))) if domain_wait(&s.step).is_some() => {}
        // A `wait.event` step with a kept event for it, or a step waiting on its child run.
        Some(Ok(Payload::Suspended(s)))
            if answer.is_none() && goes_on_unanswered(&found.dir, call_of(&s.step)) => {}
        Some(Ok(Payload::Suspended(s))) => match answer {
            None => {
                return Err(SessionError::NeedsAnswer {
                    run: found.id.clone(),
                    step: s.step,
                    reason: s.reason,
                });
            }
            Some((given, _)) if given != &s.step => {
                return Err(refused_answer(
                    &found.id,
                    AnswerError::WrongStep {
                        given: given.clone(),
                        waiting: s.step,
                    },
                ));
            }
            Some((_, value)) => {
                let bad = |reason: String| {
                    refused_answer(
                        &found.id,
                        AnswerError::Refused {
                            step: s.step.clone(),
                            reason,
                        },
                    )
                };
                if let Some(schema) = answer_schema(&s.step) {
                    let schema = Schema::compile(&schema).map_err(|e| bad(e.to_string()))?;
                    schema.check(value).map_err(|reason| {
                        bad(format!("it does not match the question's schema: {reason}"))
                    })?;
                }
                oracle_core::canon::check(value).map_err(|e| bad(e.to_string()))?;
                check_outside_value(value, "the answer").map_err(|e| bad(e.to_string()))?;
            }
        },
        // Answered (`oracle serve` records an answer alone) but not yet resumed.
        Some(Ok(Payload::Resumed(r))) if answer.is_some() => {
            return Err(SessionError::AlreadyAnswered {
                run: found.id.clone(),
                step: r.step,
                by: r.by,
            });
        }
        _ if answer.is_some() => {
            return Err(SessionError::NotSuspended {
                run: found.id.clone(),
            });
        }
        _ => {}
    }
    Ok(())
}

/// `oracle resume`: continues a suspended run with an answer, or an interrupted one without.
/// Every check happens before the log is touched.
pub fn resume(
    home: &Path,
    run: &str,
    answer: Option<(String, Value)>,
    jobs: u32,
    durability: Durability,
    registry: &Registry,
) -> Result<Session> {
    let drive = Drive {
        jobs,
        durability,
        ..Drive::default()
    };
    resume_observed(home, run, answer, &drive, registry, &mut |_| {})
}

/// [`resume`] as `drive` says (jobs, durability, scorer, resume points, working directory),
/// reporting progress after every round.
pub fn resume_observed(
    home: &Path,
    run: &str,
    answer: Option<(String, Value)>,
    drive: &Drive,
    registry: &Registry,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Session> {
    let found = find(home, run)?;
    if crate::code_run::is_code_run(&found.dir) {
        let limits = drive.agent_limits.clone();
        return crate::code_run::resume(home, found, answer, drive, &limits, registry, progress);
    }
    // Resume points are read and written under the home's key: a point it did not seal is
    // never used (`crate::seal`).
    let key = crate::seal::SealKey::open_or_create(home)?;
    let (jobs, durability, points) = (drive.jobs, drive.durability, drive.points);
    let mut start_from = points.start_from;
    let mut refused = Vec::new();
    let mut watch = crate::cancel::Watch::new(&found.dir);
    let mut probe = || watch.probe();
    // At most twice: from a resume point, then (if the point is refused by the drive) from
    // the start. Nothing is appended while the drive catches up with the record, so the
    // second pass starts from exactly the log the first one read.
    let (report, repaired) = loop {
        let from = start_from.then_some(&key);
        let intent = match drive.wake {
            Some(_) => Intent::Wake,
            None => Intent::Go(answer.as_ref()),
        };
        let start = prepare_resume(&found, intent, durability, false, from)?;
        refused.extend(start.refused);
        let plan = stored_plan(&found, &start.started, registry)?;
        let root = resume_root(&found, drive.workdir, Some(&key))?;
        let mut config = config_of(
            &start.started,
            root,
            store_of(home, &found.dir),
            jobs,
            attach(home, &found.id, drive.stores.as_ref()),
        )?;
        config.scorer = drive.scorer.clone();
        config.resume_points = resume_point::Policy {
            key: Some(key),
            ..points.policy
        };
        let upgraded = plan.hash != start.started.program_hash;
        let agent = PlanAgent::new(plan, config.inputs.clone());
        let recorded = start.events.len();
        let writer = start.writer.with_replica(drive.replica.clone());
        let mut engine = Engine::new(agent, registry, config, start.events, Some(writer))
            .allow_program_change_if(upgraded)
            .with_progress(progress)
            .with_cancel(&mut probe)
            .with_events(&found.dir, &key);
        if let Some((point, state)) = &start.point {
            engine = match engine.from_point_at(point, state.clone()) {
                Ok(e) => e,
                Err(why) => {
                    refused.push((point.seq, why.to_string()));
                    start_from = false;
                    continue;
                }
            };
        }
        if let Some((step, value)) = answer.clone() {
            engine = engine
                .with_answer(step, value)
                .answered_by(drive.answered_by.clone());
        }
        if let Some(force) = drive.wake {
            engine = engine.with_wake(force);
        }
        match engine.drive() {
            // Refused while catching up with the record: the point does not reproduce it.
            Err(e) if start.point.is_some() && e.seq().is_some_and(|s| s < recorded) => {
                let seq = start.point.as_ref().map_or(0, |(p, _)| p.seq);
                refused.push((
                    seq,
                    format!("the run from it does not reproduce the record: {e}"),
                ));
                start_from = false;
                continue;
            }
            Err(e) => return Err(e.into()),
            Ok(report) => {
                if let Some(w) = engine.into_writer() {
                    w.close()?;
                }
                finished_drive(&found.dir, &report);
                break (report, start.repaired);
            }
        }
    };
    Ok(Session {
        id: found.id,
        dir: found.dir,
        report,
        repaired,
        warnings: refused_warnings(&refused),
    })
}

/// After a live drive: a finished run asks nothing more of a cancel request (one that came
/// after its last boundary was never seen, and is dropped with it).
pub(crate) fn finished_drive(dir: &Path, report: &Report) {
    if matches!(report.ending, Ending::Finished { .. }) {
        crate::cancel::clear(dir);
    }
}

/// What a person should know about resume points that were not used.
fn refused_warnings(refused: &[(u64, String)]) -> Vec<String> {
    refused
        .iter()
        .map(|(seq, why)| format!("resume point after event {seq} not used: {why}"))
        .collect()
}

/// What [`answer`] recorded.
#[derive(Clone, Debug)]
pub struct Answered {
    pub id: String,
    pub dir: PathBuf,
    pub step: String,
    /// The `resumed` event that holds the answer.
    pub seq: u64,
    /// Events in the log now.
    pub events: u64,
    pub head: Hash,
    /// Set when a torn tail left by a crash was moved aside first.
    pub repaired: Option<Repair>,
}

/// Records the answer for the step a suspended run waits on, and drives nothing further: one
/// `resumed` event (naming `by`, who answered), appended under the run's writer lock (waited
/// for a bounded time, as a verdict waits). The answer goes through every check `resume` makes
/// before anything is written (the step, its question's schema, the limits, the step's
/// `expect`, its tools' output schemas): the run is re-derived up to its suspension, so this
/// costs what a resume's catch-up costs. A later `resume` (`oracle resume RUN`, no value) takes
/// the answer from the log and goes on. `oracle serve` answers this way, then resumes the run
/// in the background when asked.
pub fn answer(
    home: &Path,
    run: &str,
    answer: (String, Value),
    by: Option<String>,
    durability: Durability,
    registry: &Registry,
) -> Result<Answered> {
    let found = find(home, run)?;
    let ResumeStart {
        writer,
        events,
        started,
        repaired,
        ..
    } = prepare_resume(&found, Intent::Go(Some(&answer)), durability, true, None)?;
    let config = config_of(
        &started,
        quiet_root(home, &found)?,
        store_of(home, &found.dir),
        1,
        attach(home, &found.id, None),
    )?;
    let (agent, upgraded) = stored_agent(&found, &started, registry, &config)?;
    let (step, value) = answer;
    let mut engine = Engine::new(agent, registry, config, events, Some(writer))
        .allow_program_change_if(upgraded)
        .with_answer(step.clone(), value)
        .answered_by(by)
        .stop_after_answer();
    let report = engine.drive()?;
    if let Some(w) = engine.into_writer() {
        w.close()?;
    }
    match report.ending {
        Ending::Answered { step, seq } => Ok(Answered {
            id: found.id,
            dir: found.dir,
            step,
            seq,
            events: report.events,
            head: report.head,
            repaired,
        }),
        // Invariant: `prepare_resume` found the run suspended on `step`, so the engine reaches
        // the suspension and records the answer there.
        _ => Err(SessionError::NotSuspended { run: found.id }),
    }
}

/// The working directory of a drive that records one outside event and runs nothing past it
/// (an answer, a cancel): outcomes of impure calls come from the log, so the directory matters
/// only to pure tools run again while catching up, and the run's own one is used when the
/// home's key vouches for it and it exists.
fn quiet_root(home: &Path, found: &RunDir) -> Result<PathBuf> {
    let key = crate::seal::SealKey::open(home)?;
    let sealed = crate::bindings::Bindings::read(&found.dir)
        .sealed(key.as_ref())
        .0;
    match sealed.root.filter(|p| p.is_dir()) {
        Some(p) => Ok(p),
        None => canonical_root(Path::new(".")),
    }
}

/// What [`cancel`] did.
#[derive(Clone, Debug)]
pub enum Cancelled {
    /// Nothing was driving the run: the cancel is recorded as event `seq`, the last.
    Recorded {
        id: String,
        dir: PathBuf,
        seq: u64,
        head: Hash,
        /// Set when a torn tail left by a crash was moved aside first.
        repaired: Option<Repair>,
    },
    /// Another process holds the run's writer: the request is in the run's directory
    /// ([`crate::cancel::REQUEST_FILE`]), and that drive records the cancel at its next
    /// decision boundary.
    Requested { id: String, dir: PathBuf },
}

/// Cancels a run that has not finished. A suspended run, or one nothing drives (interrupted,
/// or answered and not yet resumed), gets its `run_finished` (`cancelled`, `by`, the reason)
/// here, under its writer lock, after the record is re-derived up to its end; an interrupted
/// run inside a round first completes that round, as a resume would, since a cancel lands
/// only between rounds. A run another process is driving is asked to stop instead
/// ([`Cancelled::Requested`]). A finished run is refused (`finished`), nothing written.
pub fn cancel(
    home: &Path,
    run: &str,
    cancel: Cancel,
    writing: crate::writer::Writing,
    registry: &Registry,
) -> Result<Cancelled> {
    let found = find(home, run)?;
    let start = match prepare_resume(&found, Intent::Cancel, writing.durability, false, None) {
        Err(SessionError::Store(StoreError::Locked { .. })) => {
            let path = found.dir.join(crate::cancel::REQUEST_FILE);
            crate::cancel::request(&found.dir, &cancel)
                .map_err(|source| SessionError::Io { path, source })?;
            return Ok(Cancelled::Requested {
                id: found.id,
                dir: found.dir,
            });
        }
        other => other?,
    };
    let config = config_of(
        &start.started,
        quiet_root(home, &found)?,
        store_of(home, &found.dir),
        1,
        attach(home, &found.id, writing.stores.as_ref()),
    )?;
    let (agent, upgraded) = stored_agent(&found, &start.started, registry, &config)?;
    let mut always = || Some(cancel.clone());
    let writer = start.writer.with_replica(writing.replica);
    let mut engine = Engine::new(agent, registry, config, start.events, Some(writer))
        .allow_program_change_if(upgraded)
        .with_cancel(&mut always);
    let report = engine.drive()?;
    if let Some(w) = engine.into_writer() {
        w.close()?;
    }
    crate::cancel::clear(&found.dir);
    match report.ending {
        Ending::Finished {
            status: RunStatus::Cancelled,
            ..
        } => Ok(Cancelled::Recorded {
            id: found.id,
            dir: found.dir,
            seq: report.events.saturating_sub(1),
            head: report.head,
            repaired: start.repaired,
        }),
        // Invariant: the probe asks at the first boundary past the record, before the program
        // decides anything, so no other ending is reached.
        other => Err(SessionError::CannotCancel {
            run: found.id,
            status: ending_word(&other).into(),
        }),
    }
}

/// What a replay found.
#[derive(Clone, Debug)]
pub struct Replayed {
    pub id: String,
    pub report: Report,
    /// Differences in the first event accepted because a different plan was given.
    pub program_changes: Vec<String>,
    pub recorded_events: u64,
    /// Resume points `--from-snapshot` could not use, and why.
    pub warnings: Vec<String>,
}

/// `oracle replay`: re-executes the run against its record; pure tools run again, impure
/// outputs and answers come from the log; nothing is written.
pub fn replay(
    home: &Path,
    run: &str,
    plan_override: Option<&Path>,
    jobs: u32,
    registry: &Registry,
) -> Result<Replayed> {
    replay_observed(home, run, plan_override, jobs, false, registry, &mut |_| {})
}

/// [`replay`], reporting progress after every round.
///
/// With `from_point` (`oracle replay --from-snapshot`), the replay starts from the newest
/// resume point the log accepts and checks only the events after it: a quick check of a long
/// run's tail. Without it (the default), the run is re-derived from its first event: the
/// audit, which never trusts a resume point.
pub fn replay_observed(
    home: &Path,
    run: &str,
    plan_override: Option<&Path>,
    jobs: u32,
    from_point: bool,
    registry: &Registry,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Replayed> {
    let found = find(home, run)?;
    if crate::code_run::is_code_run(&found.dir) && plan_override.is_none() {
        let limits = crate::code_run::Limits::default();
        return crate::code_run::replay(home, found, jobs, &limits, registry, progress);
    }
    let mut refused = Vec::new();
    if from_point && plan_override.is_none() {
        // Only a point this home sealed is trusted to stand for the events before it. A
        // replay only reads: a home with no key yet trusts none, and none is created.
        let key = crate::seal::SealKey::open(home)?;
        for seq in resume_point::list(&found.paths)?.into_iter().rev() {
            let Some(key) = &key else {
                refused.push((
                    seq,
                    "this home has no seal key, so it sealed no point".into(),
                ));
                continue;
            };
            let tail = resume_point::load(&found.paths, seq, key).and_then(|point| {
                Recorded::read_tail(&found.paths.log, &point.anchor()).map(|t| (point, t))
            });
            let (point, tail) = match tail {
                Ok(x) => x,
                Err(e) => {
                    refused.push((seq, e.to_string()));
                    continue;
                }
            };
            let Some(started) = first_event(&found.paths.log)? else {
                break;
            };
            let root = canonical_root(Path::new("."))?;
            let config = config_of(
                &started,
                root,
                store_of(home, &found.dir),
                jobs,
                attach(home, &found.id, None),
            )?;
            let plan = stored_plan(&found, &started, registry)?;
            let upgraded = plan.hash != started.program_hash;
            let agent = PlanAgent::new(plan, config.inputs.clone());
            let recorded_events = tail.len();
            let engine = Engine::new(agent, registry, config, tail, None)
                .allow_program_change_if(upgraded)
                .with_progress(progress);
            let mut engine = match engine.from_point(&point) {
                Ok(e) => e,
                Err(why) => {
                    refused.push((seq, why.to_string()));
                    continue;
                }
            };
            let report = engine.drive()?;
            return Ok(Replayed {
                id: found.id,
                report,
                program_changes: Vec::new(),
                recorded_events,
                warnings: refused_warnings(&refused),
            });
        }
    }
    let mut warnings = refused_warnings(&refused);
    if from_point {
        warnings.push("no resume point was usable: replayed from the run's first event".into());
    }
    let events = Recorded::read(&found.paths.log)?;
    let started = run_started(&found.paths.log, &events)?;
    // Replay executes nothing impure: it runs where it is asked, and never takes a directory
    // from the unhashed run.json.
    let root = canonical_root(Path::new("."))?;
    let mut config = config_of(&started, root, store_of(home, &found.dir), jobs, None)?;
    let mut changes = Vec::new();
    let plan = match plan_override {
        None => stored_plan(&found, &started, registry)?,
        Some(path) => {
            let source = read_text(path)?;
            let plan = compile(path, &source, registry)?;
            // Grants given on the command line (beyond the stored plan's) still apply.
            let stored = stored_plan(&found, &started, registry).ok();
            let extra: Vec<Capability> = config
                .grants
                .iter()
                .filter(|g| stored.as_ref().is_none_or(|s| !s.grants.contains(g)))
                .cloned()
                .collect();
            config.grants = merged_grants(&plan, extra);
            config.inputs = bind_inputs_partial(&plan, &started.inputs)?;
            if plan.hash != started.program_hash {
                changes.push(format!(
                    "plan hash {} -> {}",
                    started.program_hash.short(),
                    plan.hash.short()
                ));
            }
            let grants: Vec<String> = config.grants.iter().map(|g| g.to_string()).collect();
            if grants != started.grants {
                changes.push(format!(
                    "grants [{}] -> [{}]",
                    started.grants.join(", "),
                    grants.join(", ")
                ));
            }
            if config.inputs != started.inputs {
                changes.push("inputs changed".to_owned());
            }
            plan
        }
    };
    let upgraded = plan.hash != started.program_hash;
    let agent = PlanAgent::new(plan, config.inputs.clone());
    let recorded_events = events.len();
    let mut engine = Engine::new(agent, registry, config, events, None).with_progress(progress);
    if plan_override.is_some() || upgraded {
        engine = engine.allow_program_change();
    }
    let report = engine.drive()?;
    Ok(Replayed {
        id: found.id,
        report,
        program_changes: changes,
        recorded_events,
        warnings,
    })
}

/// Inputs for a new plan: the recorded values it still declares, defaults for the rest.
fn bind_inputs_partial(
    plan: &CompiledPlan,
    kept: &Map<String, Value>,
) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    for i in &plan.inputs {
        match (kept.get(&i.name), &i.default) {
            (Some(v), _) => {
                out.insert(i.name.clone(), v.clone());
            }
            (None, Some(d)) => {
                out.insert(i.name.clone(), d.clone());
            }
            (None, None) => {
                return Err(InputError::Missing {
                    name: i.name.clone(),
                }
                .into());
            }
        }
    }
    Ok(out)
}

/// One line of `oracle runs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInfo {
    pub id: String,
    pub program: String,
    /// `running` (or interrupted), `suspended`, `completed`, `failed`, or `damaged`.
    pub status: String,
    pub events: u64,
    /// For a suspended run: the step it waits on and why.
    pub waiting: Option<(String, String)>,
    /// For a suspended run: how many attempts the step made before it waited (each failed
    /// one is in the log: `oracle log RUN --kind tool_failed`).
    pub attempts: u64,
    /// For a failed run: why.
    pub reason: Option<String>,
    /// The logical time of the last event.
    pub last_time: u64,
    /// For a `running` run: whether a process holds its writer lock now (`live`) or not
    /// (`interrupted`: a crash or kill; `oracle resume` continues it). `None` when it cannot be
    /// told.
    pub live: Option<bool>,
    /// Model calls and tokens, for a run whose plan calls a model ([`model_usage`]).
    pub models: Option<crate::domain::models::Usage>,
}

/// The model calls and tokens recorded in the log at `log` up to event `upto` (all when
/// `None`), when the run's plan copy beside it calls a model (`llm.chat`); `None` otherwise or
/// when the log cannot be read. Reads the log whole, so only runs that use models pay for it.
pub fn model_usage(log: &Path, upto: Option<u64>) -> Option<crate::domain::models::Usage> {
    use crate::domain::models::{CHAT, Usage, tokens_of_outcome};
    let plan = fs::read_to_string(log.parent()?.join(PLAN_FILE)).ok()?;
    if !plan.contains(CHAT) {
        return None;
    }
    let mut usage = Usage::default();
    crate::reader::scan(log, true, |e| {
        if upto.is_some_and(|u| e.seq > u) {
            return Ok(false);
        }
        match e.typed() {
            Ok(Payload::ToolCalled(c)) if c.tool == CHAT => usage.calls += 1,
            Ok(p @ (Payload::ToolReturned(_) | Payload::ToolFailed(_))) => {
                let chat = match &p {
                    Payload::ToolReturned(r) => r.tool == CHAT,
                    Payload::ToolFailed(f) => f.tool == CHAT,
                    _ => false,
                };
                if chat {
                    usage.tokens = usage.tokens.saturating_add(tokens_of_outcome(&p));
                }
            }
            _ => {}
        }
        Ok(true)
    })
    .ok()?;
    Some(usage)
}

/// The conversation of a model step (an `llm.chat` step or an agent step) as of event `upto`
/// (the end when `None`): the messages of its latest `llm.chat` call, that call's reply if it
/// is recorded by then, and how many model calls the step had made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conversation {
    pub messages: Vec<Value>,
    pub reply: Option<Value>,
    pub calls: u64,
}

/// [`Conversation`] of `step` in the log at `log`; `None` if the step made no model call by
/// then. Reads the log up to `upto`, verifying it as it goes.
pub fn conversation(
    log: &Path,
    step: &str,
    upto: Option<u64>,
) -> std::result::Result<Option<Conversation>, StoreError> {
    use crate::domain::models::CHAT;
    let mut found: Option<Conversation> = None;
    let mut calls = 0;
    crate::reader::scan(log, true, |e| {
        if upto.is_some_and(|u| e.seq > u) {
            return Ok(false);
        }
        match e.typed() {
            Ok(Payload::ToolCalled(c)) if c.tool == CHAT && c.step == step => {
                calls += 1;
                let messages = c
                    .input
                    .get("messages")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                found = Some(Conversation {
                    messages,
                    reply: None,
                    calls,
                });
            }
            Ok(Payload::ToolReturned(r)) if r.tool == CHAT && r.step == step => {
                if let Some(c) = found.as_mut() {
                    c.reply = Some(r.output);
                }
            }
            Ok(Payload::ToolFailed(f)) if f.tool == CHAT && f.step == step => {
                if let Some(c) = found.as_mut() {
                    c.reply = Some(json!({"error": f.error}));
                }
            }
            _ => {}
        }
        Ok(true)
    })?;
    Ok(found)
}

/// Orders run ids as people count: `x-2` before `x-10` (runs of digits compare as numbers).
pub fn natural_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for ((da, xa), (db, xb)) in ca.iter().zip(cb.iter()) {
        let ord = match (da, db) {
            (true, true) => {
                let (ta, tb) = (xa.trim_start_matches('0'), xb.trim_start_matches('0'));
                ta.len().cmp(&tb.len()).then(ta.cmp(tb))
            }
            _ => xa.cmp(xb),
        };
        if ord != std::cmp::Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len()).then(a.cmp(b))
}

/// Every run under `<home>/runs`, sorted by id. Reads only the first and last event of each
/// log (through its index).
pub fn list(home: &Path) -> Result<Vec<RunInfo>> {
    let runs = home.join("runs");
    let mut out = Vec::new();
    let entries = match fs::read_dir(&runs) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => {
            return Err(SessionError::Io {
                path: runs,
                source: e,
            });
        }
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(SessionError::io(&runs))?;
        // A run with a log, or one prepared for a background start that has not written it.
        let dir = entry.path();
        if dir.join(LOG_FILE).is_file() || dir.join(SUBMISSION_FILE).is_file() {
            dirs.push(dir);
        }
    }
    dirs.sort_by(|a, b| natural_order(&a.to_string_lossy(), &b.to_string_lossy()));
    for dir in dirs {
        out.push(run_info(&dir));
    }
    Ok(out)
}

/// One run's line of [`list`], from its directory: reads the first and last events of its log
/// through the index (and the whole log only for a run whose plan calls a model).
pub fn run_info(dir: &Path) -> RunInfo {
    let id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let log = dir.join(LOG_FILE);
    if !log.exists() && dir.join(SUBMISSION_FILE).exists() {
        // Prepared for a drive that has not written its first event yet (`oracle serve`
        // starting it in the background, or a store's worker about to).
        return RunInfo {
            id,
            program: String::new(),
            status: "submitted".into(),
            events: 0,
            waiting: None,
            attempts: 0,
            reason: Some("not started yet".into()),
            last_time: 0,
            live: None,
            models: None,
        };
    }
    let mut info = info_of(&id, &log);
    if info.status != "damaged" {
        info.models = model_usage(&dir.join(LOG_FILE), None);
    }
    if info.status == "running" {
        info.live = crate::writer::lock_held(&LogPaths::of_run(dir));
    }
    info
}

fn info_of(id: &str, log: &Path) -> RunInfo {
    let damaged = |program: String| RunInfo {
        id: id.to_owned(),
        program,
        status: "damaged".into(),
        events: 0,
        waiting: None,
        attempts: 0,
        reason: None,
        last_time: 0,
        live: None,
        models: None,
    };
    let Ok(mut indexed) = crate::index::IndexedLog::open(log) else {
        return damaged(String::new());
    };
    let events = indexed.len();
    if events == 0 {
        // Killed between creating its log and its first commit: nothing happened, nothing is
        // damaged (`oracle resume` says to start it again).
        return RunInfo {
            id: id.to_owned(),
            program: String::new(),
            status: "running".into(),
            events: 0,
            waiting: None,
            attempts: 0,
            reason: Some("nothing recorded: start the plan again with `oracle run`".into()),
            last_time: 0,
            live: None,
            models: None,
        };
    }
    let (Ok(first), Ok(mut last)) = (indexed.read(0), indexed.read(events.saturating_sub(1)))
    else {
        return damaged(String::new());
    };
    // Verdicts and sweeps appended after the program stopped do not change its status.
    let mut seq = events.saturating_sub(1);
    let external_since = last.kind.is_external();
    while last.kind.is_external() && seq > 0 {
        seq -= 1;
        match indexed.read(seq) {
            Ok(e) => last = e,
            Err(_) => return damaged(String::new()),
        }
    }
    let program = match first.typed() {
        Ok(Payload::RunStarted(p)) => p.program,
        _ => return damaged(String::new()),
    };
    let status = crate::engine::status_of(Some(&last)).to_owned();
    let attempts = match last.typed() {
        Ok(Payload::Suspended(s)) => s.attempts,
        _ => 0,
    };
    let (waiting, reason) = match last.typed() {
        // The reason was true when the run stopped; say when a verdict or sweep came since.
        Ok(Payload::Suspended(s)) if external_since => (
            Some((
                s.step,
                format!(
                    "{} [a verdict or sweep was recorded since: `oracle resume` re-checks]",
                    s.reason
                ),
            )),
            None,
        ),
        Ok(Payload::Suspended(s)) => (Some((s.step, s.reason)), None),
        Ok(Payload::RunFinished(f)) if f.status == RunStatus::Failed => (None, Some(f.reason)),
        Ok(Payload::RunFinished(f)) if f.status == RunStatus::Cancelled => {
            let by = f.by.map(|b| format!(" by {b}")).unwrap_or_default();
            (None, Some(format!("cancelled{by}: {}", f.reason)))
        }
        _ => (None, None),
    };
    RunInfo {
        id: id.to_owned(),
        program,
        status,
        events,
        waiting,
        attempts,
        reason,
        last_time: indexed
            .read(events.saturating_sub(1))
            .map_or(last.time, |e| e.time),
        live: None,
        models: None,
    }
}

/// How a drive ended, in one word.
pub fn ending_word(e: &Ending) -> &'static str {
    match e {
        Ending::Finished { status, .. } => status.as_str(),
        Ending::Suspended { .. } => "suspended",
        Ending::EndOfRecord => "interrupted",
        Ending::Answered { .. } => "answered",
    }
}
