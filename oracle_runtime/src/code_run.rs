//! Runs whose program is a code agent (docs/AGENTS.md): started from its entry file
//! (`oracle run triage.py`), resumed and replayed by starting a fresh process of the command
//! the run directory keeps in [`AGENT_FILE`] and re-deriving the run from its first event.
//!
//! A code run's directory holds `agent.json` where a plan run's holds `plan.plan`: the command,
//! the entry file and the hash of every file the program said it is made of. Nothing there is
//! trusted: the program hash recorded in `run_started` is what the drive is checked against.

use std::path::{Path, PathBuf};

use oracle_core::agent::Agent;
use oracle_core::capability::Capability;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::engine::{Engine, Progress};
use crate::paths::LogPaths;
use crate::process_agent::{self, Command, ProcessAgent, Sites};
use crate::recorded::Recorded;
use crate::session::{self, Drive, Replayed, Result, RunDir, Session, SessionError};
use crate::tool::Registry;
use crate::writer::{Durability, LogWriter};

/// The file in a code run's directory naming its command (where a plan run keeps its plan).
pub const AGENT_FILE: &str = "agent.json";

/// The MAC purpose of a code run's command (`SealKey::mac`). The log does not hash the command,
/// and every resume, answer, cancel and replay starts it: unsealed, whoever can edit the file
/// beside the log would choose the program this runs, before any hash check could refuse it.
const COMMAND_SEAL: &str = "oracle v1 code run command";

/// The MAC of run `run`'s command under the home's key (over `[run id, command]`, so a record
/// copied from another run or another home does not verify).
fn command_mac(key: &crate::seal::SealKey, run: &str, command: &[String]) -> oracle_core::Hash {
    key.mac(COMMAND_SEAL, &command_bytes(run, command))
}

/// What [`command_mac`] covers: the canonical JSON of `[run id, command]`.
fn command_bytes(run: &str, command: &[String]) -> Vec<u8> {
    serde_json::to_vec(&(run, command)).unwrap_or_default()
}

/// What a code run keeps to be resumed and replayed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// The program and its arguments, run in the run's working directory.
    pub command: Vec<String>,
    /// `name@version`, as recorded in `run_started`.
    pub program: String,
    pub program_hash: String,
    /// Every file the program said it is made of, with its hash, sorted by path.
    pub files: Vec<(String, String)>,
    /// The MAC of `command` under the home's key ([`COMMAND_SEAL`]); empty: none, never started.
    #[serde(default)]
    pub seal: String,
    /// A store's run: the agent's name, which each worker maps to a program of its own
    /// (`oracle worker --agent NAME=PATH`); the store keeps no command ([`adopt_for_worker`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// How long a code agent may take, and where its stderr goes.
#[derive(Clone, Debug)]
pub struct Limits {
    pub hello_ms: u64,
    pub decide_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            hello_ms: process_agent::HELLO_MS_DEFAULT,
            decide_ms: process_agent::DECIDE_MS_DEFAULT,
        }
    }
}

/// `oracle run ENTRY` for a code agent: what a plan run's `StartOptions` are for a plan.
#[derive(Clone, Debug)]
pub struct CodeStart {
    pub home: PathBuf,
    /// The entry file, relative to `root` or absolute inside it.
    pub entry: PathBuf,
    /// The working directory (canonicalised): the program's files are read against it.
    pub root: PathBuf,
    /// `--input NAME=VALUE`: a string for a parameter typed `string`, JSON otherwise.
    pub inputs: Vec<(String, String)>,
    /// Grants beyond the ones the program declares.
    pub grants: Vec<String>,
    pub seed: u64,
    pub jobs: u32,
    pub durability: Durability,
    pub limits: Limits,
    /// The models, secrets and tool directories bound, sealed into `run.json` as a plan
    /// run's are.
    pub bindings: crate::bindings::Bindings,
    /// An idempotency key: a start under a key that started a run already with the same
    /// program hash, inputs and seed starts nothing (`SessionError::KeyUsed` with nothing
    /// differing names that run), as a plan run's `--key`.
    pub key: Option<String>,
}

/// Whether the run in `dir` is a code run.
pub fn is_code_run(dir: &Path) -> bool {
    dir.join(AGENT_FILE).is_file()
}

/// The command that runs `entry`: `python3 ENTRY` for a `.py` file (the `python3` on PATH),
/// `node ENTRY` for a `.mjs` or `.js` module (the `node` on PATH), the file itself otherwise.
pub fn command_of(entry: &Path) -> Vec<String> {
    let entry = entry.to_string_lossy().into_owned();
    let interpreter = if entry.ends_with(".py") {
        Some("python3")
    } else if entry.ends_with(".mjs") || entry.ends_with(".js") {
        Some("node")
    } else {
        None
    };
    match interpreter {
        Some(i) => vec![i.to_owned(), entry],
        None => vec![entry],
    }
}

fn process_command(command: &[String], root: &Path, limits: &Limits) -> Result<Command> {
    let Some((program, args)) = command.split_first() else {
        return Err(SessionError::BadInputs(
            "the agent's command is empty".into(),
        ));
    };
    let mut cmd = Command::new(program, args.iter().map(Into::into).collect(), root);
    cmd.hello_ms = limits.hello_ms;
    cmd.decide_ms = limits.decide_ms;
    Ok(cmd)
}

/// The inputs given as text, bound by the program's inputs schema: a string for a parameter
/// typed `string`, JSON otherwise; each name must be a parameter, and the whole must meet the
/// schema.
fn bind_inputs(schema: &Value, given: &[(String, String)]) -> Result<Map<String, Value>> {
    let props = schema.get("properties").and_then(Value::as_object);
    let mut inputs = Map::new();
    for (name, text) in given {
        let Some(prop) = props.and_then(|p| p.get(name)) else {
            return Err(SessionError::BadInputs(format!(
                "the program has no input `{name}`"
            )));
        };
        let value = if prop.get("type").and_then(Value::as_str) == Some("string") {
            Value::String(text.clone())
        } else {
            serde_json::from_str(text)
                .map_err(|e| SessionError::BadInputs(format!("input `{name}`: not JSON: {e}")))?
        };
        inputs.insert(name.clone(), value);
    }
    let inputs_value = Value::Object(inputs);
    if schema.is_object() {
        let compiled = crate::schema::Schema::compile(schema)
            .map_err(|e| SessionError::BadInputs(format!("the program's inputs schema: {e}")))?;
        compiled
            .check(&inputs_value)
            .map_err(|e| SessionError::BadInputs(format!("the inputs: {e}")))?;
    }
    session::check_outside_value(&inputs_value, "the run's inputs")
        .map_err(|e| SessionError::BadInputs(e.to_string()))?;
    match inputs_value {
        Value::Object(m) => Ok(m),
        _ => Ok(Map::new()),
    }
}

/// The declared grants and `extra`, parsed, sorted and without duplicates.
fn grants_of(declared: &[String], extra: &[String]) -> Result<Vec<Capability>> {
    let mut all = Vec::new();
    for g in declared.iter().chain(extra) {
        all.push(g.parse::<Capability>().map_err(SessionError::Grant)?);
    }
    all.sort_by_key(|c| c.to_string());
    all.dedup();
    Ok(all)
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    std::fs::write(path, format!("{text}\n")).map_err(SessionError::io(path))
}

/// Starts the agent, binds its inputs and grants and creates the run's directory with its
/// [`AGENT_FILE`] and `run.json`: everything before the first event. With `submit` (a store's
/// run, started by a worker), the agent file names the agent instead of a command, and the
/// submission is written beside it ([`session::SUBMISSION_FILE`]).
/// What [`prepare`] made: the started program, its settings, the run, its submission, and the
/// key this start holds (until the run is live: its writer lock taken, or its submission
/// written).
type Prepared = (
    ProcessAgent,
    crate::engine::RunConfig,
    RunDir,
    session::Submission,
    Option<crate::keys::KeyGuard>,
);

fn prepare(opts: &CodeStart, submit: bool) -> Result<Prepared> {
    let root = opts
        .root
        .canonicalize()
        .map_err(SessionError::io(&opts.root))?;
    // A missing entry file is named as such, not as an agent that never said hello.
    let entry = root.join(&opts.entry);
    std::fs::metadata(&entry).map_err(SessionError::io(&entry))?;
    let command = command_of(&opts.entry);
    let mut agent =
        ProcessAgent::start(&process_command(&command, &root, &opts.limits)?, Map::new())?;
    let inputs = bind_inputs(&agent.hello().inputs, &opts.inputs)?;
    agent.set_inputs(inputs.clone());
    let grants = grants_of(&agent.hello().grants, &opts.grants)?;
    let claim = |run: &str| {
        let hash = agent.program_hash();
        let key = opts.key.as_deref();
        key.map(|k| crate::keys::KeyClaim::new(k, run, hash, &inputs, opts.seed))
    };
    // The key is claimed before anything is created: a start that loses finds the winner's run.
    let key_guard = claim("")
        .map(|want| session::take_key(&opts.home, &want))
        .transpose()?;
    let (id, dir) = session::new_run_dir(&opts.home, &agent.hello().program.name)?;
    if let (Some(guard), Some(claim)) = (&key_guard, claim(&id)) {
        guard.record(&claim)?;
    }
    let key = crate::seal::SealKey::open_or_create(&opts.home)?;
    let record = agent_record(&agent, (&id, command), &key, submit);
    write_json(&dir.join(AGENT_FILE), &record)?;
    let bindings = crate::bindings::Bindings {
        root: Some(root.clone()),
        ..opts.bindings.clone()
    };
    let meta = bindings.to_json(&id, &key);
    write_json(&dir.join(crate::bindings::META_FILE), &meta)?;
    let submission = session::Submission {
        seed: opts.seed,
        grants: grants.iter().map(ToString::to_string).collect(),
        inputs,
        root,
        jobs: opts.jobs,
        domains: Default::default(),
        memory: None,
        budget: None,
        key: opts.key.clone(),
        parent: None,
    };
    if submit {
        write_json(&dir.join(session::SUBMISSION_FILE), &submission)?;
    }
    let config = submission.config(&opts.home, &dir, None, None)?;
    let paths = LogPaths::of_run(&dir);
    // A submission is live once written: the key is let go here.
    let key_guard = if submit { None } else { key_guard };
    Ok((
        agent,
        config,
        RunDir { id, paths, dir },
        submission,
        key_guard,
    ))
}

/// The `agent.json` of run `id` of `agent`: a submission's names the agent, never a command
/// (a worker's own `--agent` list says which program that is); a start's keeps `command`,
/// sealed with `key`.
fn agent_record(
    agent: &ProcessAgent,
    (id, command): (&str, Vec<String>),
    key: &crate::seal::SealKey,
    submit: bool,
) -> AgentRecord {
    if submit {
        AgentRecord {
            agent: Some(agent.hello().program.name.clone()),
            ..record_of_agent(agent, Vec::new(), String::new())
        }
    } else {
        let seal = command_mac(key, id, &command).to_hex();
        record_of_agent(agent, command, seal)
    }
}

/// What a code run keeps of `agent`, started as `command` (sealed by `seal`).
fn record_of_agent(agent: &ProcessAgent, command: Vec<String>, seal: String) -> AgentRecord {
    AgentRecord {
        command,
        program: agent.program().to_owned(),
        program_hash: agent.program_hash().to_hex(),
        files: agent
            .files()
            .iter()
            .map(|(p, h)| (p.clone(), h.to_hex()))
            .collect(),
        seal,
        agent: None,
    }
}

/// A code run made ready for a store's worker to start (`oracle submit triage.py --store`).
pub struct CodeSubmission {
    pub id: String,
    pub dir: PathBuf,
    /// The agent's name (its program's name): what a worker looks up in its `--agent` list.
    pub agent: String,
    /// The program's hash when submitted: the program a worker starts must have it.
    pub program_hash: oracle_core::Hash,
    pub submission: session::Submission,
}

/// Everything [`start`] does before the first event, for a run a store's worker will start
/// ([`start_submitted`]): the program is started once here to learn its name, hash, grants and
/// inputs schema; the run's [`AGENT_FILE`] names the agent and its hash, never a command.
pub fn prepare_submission(opts: &CodeStart) -> Result<CodeSubmission> {
    let (agent, _, run, submission, _) = prepare(opts, true)?;
    Ok(CodeSubmission {
        id: run.id,
        dir: run.dir,
        agent: agent.hello().program.name.clone(),
        program_hash: agent.program_hash(),
        submission,
    })
}

/// A code run made and its program started, not yet driven ([`prepare_start`]): everything
/// that can refuse a start has been checked.
pub struct CodeReady {
    agent: ProcessAgent,
    config: crate::engine::RunConfig,
    run: RunDir,
    durability: Durability,
    key_guard: Option<crate::keys::KeyGuard>,
}

impl CodeReady {
    /// The new run's id.
    pub fn id(&self) -> &str {
        &self.run.id
    }
}

/// Starts the code agent of `opts` and makes its run, ready to be driven ([`drive`]). A
/// program that cannot start, or bad inputs or grants, create nothing.
pub fn prepare_start(opts: &CodeStart) -> Result<CodeReady> {
    let (agent, config, run, _, key_guard) = prepare(opts, false)?;
    Ok(CodeReady {
        agent,
        config,
        run,
        durability: opts.durability,
        key_guard,
    })
}

/// Drives a run made by [`prepare_start`] until it finishes or suspends.
pub fn drive(
    ready: CodeReady,
    registry: &Registry,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Session> {
    let CodeReady {
        agent,
        config,
        run,
        durability,
        key_guard,
    } = ready;
    let writer = LogWriter::create(&run.paths, durability)?;
    // Its writer lock held, the run is live for every other start with its key.
    drop(key_guard);
    let mut watch = crate::cancel::Watch::new(&run.dir);
    let mut probe = || watch.probe();
    let mut engine = Engine::new(agent, registry, config, Vec::new(), Some(writer))
        .with_progress(progress)
        .with_cancel(&mut probe);
    let report = engine.drive()?;
    if let Some(w) = engine.into_writer() {
        w.close()?;
    }
    session::finished_drive(&run.dir, &report);
    Ok(Session {
        id: run.id,
        dir: run.dir,
        report,
        repaired: None,
        warnings: Vec::new(),
    })
}

/// `oracle run ENTRY`: starts the code agent and drives the run until it finishes or
/// suspends. A program that cannot start, or bad inputs or grants, create nothing.
pub fn start(
    opts: &CodeStart,
    registry: &Registry,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Session> {
    drive(prepare_start(opts)?, registry, progress)
}

/// A store's code run written into a worker's scratch home `home`: its [`AGENT_FILE`] names
/// an agent, and the worker's own `agents` (name to program path) say which program that is.
/// The file is written again with that program's command, sealed with `home`'s key, so every
/// drive of the run in this home starts it; the store's rows never choose a command. Returns
/// the bytes the store held, which the worker leaves there as they were. An agent not in
/// `agents` is refused, `agent_unknown`, before anything starts.
pub fn adopt_for_worker(
    home: &Path,
    run: &RunDir,
    agents: &std::collections::BTreeMap<String, PathBuf>,
) -> Result<Vec<u8>> {
    let path = run.dir.join(AGENT_FILE);
    let bytes = std::fs::read(&path).map_err(SessionError::io(&path))?;
    let mut record: AgentRecord =
        serde_json::from_slice(&bytes).map_err(|e| SessionError::AgentRecord {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    let name = record.agent.clone().unwrap_or_default();
    let Some(program) = agents.get(&name) else {
        return Err(SessionError::AgentUnknown {
            run: run.id.clone(),
            agent: name,
        });
    };
    record.command = command_of(program);
    let key = crate::seal::SealKey::open_or_create(home)?;
    record.seal = command_mac(&key, &run.id, &record.command).to_hex();
    write_json(&path, &record)?;
    Ok(bytes)
}

/// A worker's first drive of a store's code run ([`prepare_submission`] made its directory
/// elsewhere; [`adopt_for_worker`] sealed its command in `home`): the program is started in
/// the submitted working directory and must have the program hash it was submitted with
/// (`agent_changed` otherwise, nothing recorded); then the run is driven from its first event.
pub fn start_submitted(
    home: &Path,
    run: &str,
    writing: impl Into<crate::writer::Writing>,
    registry: &Registry,
    scorer: Option<std::sync::Arc<dyn crate::scorer::Scorer>>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Session> {
    let dir = home.join("runs").join(run);
    let found = RunDir {
        id: run.to_owned(),
        paths: LogPaths::of_run(&dir),
        dir,
    };
    let submission = session::read_submission(&found.dir)?;
    let record = record_of(&found)?;
    let writing = writing.into();
    let config = submission.config(home, &found.dir, scorer, writing.stores.as_ref())?;
    let (mut agent, sites) = fresh_agent(&found, &submission.root, &Limits::default())?;
    let now = agent.program_hash().to_hex();
    if now != record.program_hash {
        return Err(SessionError::AgentChanged {
            run: found.id,
            agent: record.agent.unwrap_or(record.program),
            submitted: record.program_hash,
            now,
        });
    }
    agent.set_inputs(config.inputs.clone());
    let writer =
        LogWriter::create(&found.paths, writing.durability)?.with_replica(writing.replica.clone());
    let mut watch = crate::cancel::Watch::new(&found.dir);
    let mut probe = || watch.probe();
    let mut engine = Engine::new(agent, registry, config, Vec::new(), Some(writer))
        .with_progress(progress)
        .with_cancel(&mut probe);
    let report = engine.drive().map_err(|e| with_site(e, &sites))?;
    if let Some(w) = engine.into_writer() {
        w.close()?;
    }
    session::finished_drive(&found.dir, &report);
    Ok(Session {
        id: found.id,
        dir: found.dir,
        report,
        repaired: None,
        warnings: Vec::new(),
    })
}

/// The command a code run keeps, refused unless the key of the run's own home
/// (`<home>/runs/<run>`) sealed it: nothing is started from a record the home does not vouch
/// for. The key is only opened, never created (a replay creates nothing).
pub fn record_of(run: &RunDir) -> Result<AgentRecord> {
    let path = run.dir.join(AGENT_FILE);
    let record = stored_record(run)?;
    let home = run.dir.parent().and_then(Path::parent);
    let key = match home {
        Some(home) => crate::seal::SealKey::open(home)?,
        None => None,
    };
    let mac = oracle_core::Hash::from_hex(&record.seal).ok();
    let sealed = match (key, mac) {
        (Some(key), Some(mac)) => {
            key.verify(COMMAND_SEAL, &command_bytes(&run.id, &record.command), &mac)
        }
        _ => false,
    };
    if !sealed {
        return Err(SessionError::AgentUnsealed { path });
    }
    Ok(record)
}

/// Writes `run`'s [`AGENT_FILE`] into `dir`, the directory of run `id` of the same home (a
/// fork), sealed under `key` for `id`: only a record the home sealed for `run` is copied
/// ([`record_of`]; `binding_unsealed` otherwise).
pub fn reseal(run: &RunDir, id: &str, dir: &Path, key: &crate::seal::SealKey) -> Result<()> {
    let record = record_of(run)?;
    let seal = command_mac(key, id, &record.command).to_hex();
    write_json(&dir.join(AGENT_FILE), &AgentRecord { seal, ..record })
}

/// The file beside an exported log (`oracle export RUN --out FILE`) that carries a code run's
/// record: `FILE.agent.json`, unsealed (a seal is worth nothing outside its home).
pub fn exported_record_path(log: &Path) -> PathBuf {
    let mut name = log.file_name().unwrap_or_default().to_os_string();
    name.push(".agent.json");
    log.with_file_name(name)
}

/// Writes `run`'s record, unsealed, to `out` (the export of a code run): only a record its
/// home sealed is exported, or a store's copy, which holds no command.
pub fn export_record(run: &RunDir, out: &Path) -> Result<AgentRecord> {
    let record = match stored_record(run)? {
        // A store's copy names its agent and holds no command: nothing to vouch for.
        r if r.agent.is_some() && r.command.is_empty() => r,
        _ => record_of(run)?,
    };
    let record = AgentRecord {
        seal: String::new(),
        ..record
    };
    write_json(out, &record)?;
    Ok(record)
}

/// The record of `run` as written, unchecked: read only to tell a store's copy (which names
/// an agent and holds no command) from a home's.
fn stored_record(run: &RunDir) -> Result<AgentRecord> {
    let path = run.dir.join(AGENT_FILE);
    let text = std::fs::read_to_string(&path).map_err(SessionError::io(&path))?;
    serde_json::from_str(&text).map_err(|e| SessionError::AgentRecord {
        path,
        reason: e.to_string(),
    })
}

/// Makes `file` (an exported record) the [`AGENT_FILE`] of the imported run `run`: checked to
/// be a record of the log's program (`program_hash`), then sealed under `key` for the run only
/// when `trust` (`oracle import --trust-commands`: the person vouches for the command, which
/// whoever wrote the file chose), otherwise left unsealed, so every resume, answer, cancel,
/// fork and replay refuses it (`binding_unsealed`) and nothing is started.
pub fn import_record(
    file: &Path,
    run: &RunDir,
    program_hash: &oracle_core::Hash,
    trust: Option<&crate::seal::SealKey>,
) -> Result<Vec<String>> {
    let bad = |reason: String| SessionError::AgentRecord {
        path: file.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(file).map_err(SessionError::io(file))?;
    let record: AgentRecord = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if record.program_hash != program_hash.to_hex() {
        return Err(bad(format!(
            "its program hash {} is not the log's {}",
            record.program_hash,
            program_hash.to_hex()
        )));
    }
    if record.command.is_empty() {
        // A store's record names its agent instead: the run is read (verify, log, diff), and
        // nothing can be started from it, trusted or not.
        return match (&record.agent, trust) {
            (Some(_), None) => {
                write_json(&run.dir.join(AGENT_FILE), &record)?;
                Ok(Vec::new())
            }
            (Some(agent), Some(_)) => Err(bad(format!(
                "it names the store's agent `{agent}` and holds no command to trust; import it without --trust-commands"
            ))),
            (None, _) => Err(bad("its command is empty".into())),
        };
    }
    let seal = match trust {
        Some(key) => command_mac(key, &run.id, &record.command).to_hex(),
        None => String::new(),
    };
    let command = record.command.clone();
    write_json(&run.dir.join(AGENT_FILE), &AgentRecord { seal, ..record })?;
    Ok(command)
}

/// A fresh process of the run's program, in `root`, for a drive that re-derives the run.
fn fresh_agent(run: &RunDir, root: &Path, limits: &Limits) -> Result<(ProcessAgent, Sites)> {
    let record = record_of(run)?;
    let agent = ProcessAgent::start(&process_command(&record.command, root, limits)?, Map::new())?;
    let sites = agent.sites();
    Ok((agent, sites))
}

/// A divergence, with the agent's source line that made the differing decision.
fn with_site(e: crate::engine::EngineError, sites: &Sites) -> SessionError {
    match (&e, sites.last()) {
        (crate::engine::EngineError::Diverged(d), Some(site)) => {
            // The step of either side's event: a call's or a suspension's (never a hash).
            let step_of = |ev: &oracle_core::Event| {
                ev.payload
                    .get("step")
                    .and_then(|s| s.as_str())
                    .map(str::to_owned)
            };
            let step = step_of(&d.a).or_else(|| step_of(&d.b)).unwrap_or_default();
            SessionError::CodeDiverged {
                step,
                site: site.to_string(),
                source: e,
            }
        }
        _ => e.into(),
    }
}

/// The program hash `events` were last recorded as made by: the last `plan_upgraded`'s `to`,
/// or the first event's.
fn recorded_program(events: &Recorded, started: oracle_core::Hash) -> oracle_core::Hash {
    (0..events.len())
        .rev()
        .filter(|&seq| events.kind(seq) == Some(oracle_core::EventKind::PlanUpgraded))
        .find_map(|seq| match events.event(seq).map(|e| e.typed()) {
            Some(Ok(oracle_core::payload::Payload::PlanUpgraded(u))) => Some(u.to),
            _ => None,
        })
        .unwrap_or(started)
}

/// Before a resume: when the agent's files changed since the log last recorded its program,
/// the new program must re-derive every recorded event (a fresh process, nothing written;
/// refused at the first that differs, exit 4, with its source line), and then `plan_upgraded`
/// records the change, so the log says which program made what follows, as `oracle resume
/// --plan` does for a plan. A finished run is left to the resume to refuse; a run stopped
/// inside a round is refused (`inside_round`): restore the files it ran with to resume it.
fn upgrade_if_changed(
    home: &Path,
    found: &RunDir,
    root: &Path,
    limits: &Limits,
    registry: &Registry,
    by: Option<String>,
) -> Result<()> {
    let events = Recorded::read(&found.paths.log)?;
    let started = session::run_started(&found.paths.log, &events)?;
    let from = recorded_program(&events, started.program_hash);
    let (mut agent, sites) = fresh_agent(found, root, limits)?;
    let to = agent.program_hash();
    let finished = session::last_program_kind(&events) == Some(oracle_core::EventKind::RunFinished);
    if to == from || finished {
        return Ok(());
    }
    if !crate::fork::at_boundary(&events, events.len()) {
        return Err(SessionError::InsideRound {
            run: found.id.clone(),
        });
    }
    let config = session::replay_config(&started, root.to_path_buf(), home, &found.dir)?;
    agent.set_inputs(config.inputs.clone());
    let program = agent.program().to_owned();
    let mut engine = Engine::new(agent, registry, config, events, None).allow_program_change();
    engine.drive().map_err(|e| with_site(e, &sites))?;
    drop(engine);
    let mut writer = LogWriter::open(&found.paths, Durability::DEFAULT)?;
    // The time of the event before it: the rounds that follow keep their ticks.
    let time = writer.head().time;
    let upgraded = oracle_core::payload::PlanUpgraded {
        from,
        to,
        program,
        by,
    };
    writer.append(
        time,
        vec![],
        oracle_core::payload::Payload::PlanUpgraded(upgraded),
    )?;
    writer.close()?;
    Ok(())
}

/// `oracle resume` of a code run: a fresh process re-derives the run from its first event
/// (the engine checks every decision against the log), then goes on.
pub fn resume(
    home: &Path,
    found: RunDir,
    answer: Option<(String, Value)>,
    drive: &Drive,
    limits: &Limits,
    registry: &Registry,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Session> {
    let key = crate::seal::SealKey::open_or_create(home)?;
    let root = session::resume_root(&found, drive.workdir, Some(&key))?;
    upgrade_if_changed(
        home,
        &found,
        &root,
        limits,
        registry,
        drive.answered_by.clone(),
    )?;
    let start = session::prepare_code_resume(&found, answer.as_ref(), drive)?;
    let config = session::code_config(home, &found, &start.started, root.clone(), drive)?;
    let (mut agent, sites) = fresh_agent(&found, &root, limits)?;
    agent.set_inputs(config.inputs.clone());
    let changed = agent.program_hash() != start.started.program_hash;
    let mut watch = crate::cancel::Watch::new(&found.dir);
    let mut probe = || watch.probe();
    let writer = start.writer.with_replica(drive.replica.clone());
    let mut engine = Engine::new(agent, registry, config, start.events, Some(writer))
        .allow_program_change_if(changed)
        .with_progress(progress)
        .with_cancel(&mut probe);
    if let Some((step, value)) = answer {
        engine = engine
            .with_answer(step, value)
            .answered_by(drive.answered_by.clone());
    }
    if let Some(force) = drive.wake {
        engine = engine.with_wake(force);
    }
    let report = engine.drive().map_err(|e| with_site(e, &sites))?;
    if let Some(w) = engine.into_writer() {
        w.close()?;
    }
    session::finished_drive(&found.dir, &report);
    Ok(Session {
        id: found.id,
        dir: found.dir,
        report,
        repaired: start.repaired,
        warnings: Vec::new(),
    })
}

/// `oracle replay` of a code run: a fresh process in this directory, fed the recorded
/// outcomes; nothing impure runs and nothing is written.
pub fn replay(
    home: &Path,
    found: RunDir,
    jobs: u32,
    limits: &Limits,
    registry: &Registry,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Replayed> {
    let events = Recorded::read(&found.paths.log)?;
    let started = session::run_started(&found.paths.log, &events)?;
    let root = std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .map_err(SessionError::io("."))?;
    let mut config = session::replay_config(&started, root.clone(), home, &found.dir)?;
    config.jobs = jobs;
    let (mut agent, sites) = fresh_agent(&found, &root, limits)?;
    agent.set_inputs(config.inputs.clone());
    let changed = agent.program_hash() != started.program_hash;
    let recorded_events = events.len();
    let mut engine = Engine::new(agent, registry, config, events, None)
        .allow_program_change_if(changed)
        .with_progress(progress);
    let report = engine.drive().map_err(|e| with_site(e, &sites))?;
    let program_changes = if changed {
        vec![format!(
            "program hash {} changed; its decisions reproduced",
            started.program_hash.short()
        )]
    } else {
        Vec::new()
    };
    Ok(Replayed {
        id: found.id,
        report,
        program_changes,
        recorded_events,
        warnings: Vec::new(),
    })
}

/// The program of a stored run of either kind, for the drives that record one outside event
/// and stop (an answer recorded alone, a cancel): the plan, or a fresh process of the code
/// agent, which re-derives the run up to that event like any drive.
pub(crate) enum RunAgent {
    Plan(Box<oracle_plan::agent::PlanAgent>),
    Code(Box<ProcessAgent>),
}

impl Agent for RunAgent {
    fn program(&self) -> &str {
        match self {
            RunAgent::Plan(a) => a.program(),
            RunAgent::Code(a) => a.program(),
        }
    }

    fn program_hash(&self) -> oracle_core::Hash {
        match self {
            RunAgent::Plan(a) => a.program_hash(),
            RunAgent::Code(a) => a.program_hash(),
        }
    }

    fn decide(
        &mut self,
        state: &oracle_core::State,
        seen: &[oracle_core::agent::Observation],
    ) -> std::result::Result<oracle_core::agent::Decision, oracle_core::agent::AgentError> {
        match self {
            RunAgent::Plan(a) => a.decide(state, seen),
            RunAgent::Code(a) => a.decide(state, seen),
        }
    }

    fn check_answer(
        &self,
        step: &str,
        value: &Value,
    ) -> std::result::Result<Vec<String>, oracle_core::agent::AnswerRefused> {
        match self {
            RunAgent::Plan(a) => a.check_answer(step, value),
            RunAgent::Code(a) => a.check_answer(step, value),
        }
    }

    fn save(&self) -> Option<Value> {
        match self {
            RunAgent::Plan(a) => a.save(),
            RunAgent::Code(a) => a.save(),
        }
    }

    fn save_text(&self) -> Option<Box<serde_json::value::RawValue>> {
        match self {
            RunAgent::Plan(a) => a.save_text(),
            RunAgent::Code(a) => a.save_text(),
        }
    }

    fn restore(
        &mut self,
        saved: &Value,
    ) -> std::result::Result<(), oracle_core::agent::AgentError> {
        match self {
            RunAgent::Plan(a) => a.restore(saved),
            RunAgent::Code(a) => a.restore(saved),
        }
    }
}

/// A fresh code agent of `run` in `root` with the run's inputs, and whether its program hash
/// differs from the recorded one (its files changed: the drive re-derives, and refuses a
/// changed decision).
pub(crate) fn stored_code_agent(
    run: &RunDir,
    root: &Path,
    started: &oracle_core::payload::RunStarted,
) -> Result<(RunAgent, bool)> {
    let (mut agent, _) = fresh_agent(run, root, &Limits::default())?;
    agent.set_inputs(started.inputs.clone());
    let changed = agent.program_hash() != started.program_hash;
    Ok((RunAgent::Code(Box::new(agent)), changed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's run written into a worker's home: its record names agent `triage`.
    fn stored_run(home: &Path) -> RunDir {
        let dir = home.join("runs").join("triage-1");
        std::fs::create_dir_all(&dir).unwrap();
        let record = AgentRecord {
            command: Vec::new(),
            program: "triage@1".into(),
            program_hash: "00".into(),
            files: Vec::new(),
            seal: String::new(),
            agent: Some("triage".into()),
        };
        write_json(&dir.join(AGENT_FILE), &record).unwrap();
        RunDir {
            id: "triage-1".into(),
            paths: LogPaths::of_run(&dir),
            dir,
        }
    }

    #[test]
    fn a_worker_seals_the_command_of_its_own_agent_and_refuses_an_agent_it_was_not_told_about() {
        let tmp = tempfile::tempdir().unwrap();
        let run = stored_run(tmp.path());
        // As stored, the record starts nothing.
        assert!(matches!(
            record_of(&run),
            Err(SessionError::AgentUnsealed { .. })
        ));
        let none = std::collections::BTreeMap::new();
        match adopt_for_worker(tmp.path(), &run, &none) {
            Err(SessionError::AgentUnknown { run, agent }) => {
                assert_eq!((run.as_str(), agent.as_str()), ("triage-1", "triage"));
            }
            other => panic!("{other:?}"),
        }
        let program = tmp.path().join("agents/triage.py");
        let agents = [("triage".to_owned(), program.clone())]
            .into_iter()
            .collect();
        let stored = adopt_for_worker(tmp.path(), &run, &agents).unwrap();
        assert!(
            String::from_utf8(stored)
                .unwrap()
                .contains(r#""agent": "triage""#)
        );
        let record = record_of(&run).unwrap();
        assert_eq!(record.command, command_of(&program));
        assert_eq!(record.command[0], "python3");
    }
}
