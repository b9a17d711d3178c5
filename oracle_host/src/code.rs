//! Code agents through the host (docs/AGENTS.md): [`Home::start_code`] starts a run whose
//! program is a process speaking the agent protocol (`oracle run triage.py`, `agent.mjs`),
//! bound as a plan run is. Its resume, answer and replay go through the same calls as a plan
//! run's ([`Home::resume`]): the runtime tells the kinds apart by the run's directory.
//! [`Home::launch_agent`] starts one a server was told about (`oracle serve --agent
//! NAME=FILE`) by name, for `POST /api/v1/runs` with `"agent"`: a request names a program the
//! operator chose, never a command.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use oracle_runtime::declared::McpMode;
use oracle_runtime::engine::Progress;
use oracle_runtime::session::Session;
use oracle_runtime::tool::Registry;
use serde_json::{Map, Value};

pub use oracle_runtime::code_run::{AGENT_FILE, CodeStart, CodeSubmission, Limits, is_code_run};
pub use oracle_runtime::process_agent::{DECIDE_MS_DEFAULT, HELLO_MS_DEFAULT};

use crate::bind::Given;
use crate::error::HostError;
use crate::home::{Home, Start};

/// The environment variable that sets a code agent's decision time limit in milliseconds for
/// `oracle` (docs/AGENTS.md, "Time limits"): read by the front end, never by the runtime.
pub const DECIDE_MS_VAR: &str = "ORACLE_AGENT_DECIDE_MS";

/// The file extensions that name a code agent rather than a plan (docs/AGENTS.md): Python
/// (`python3`) and JavaScript modules (`node`; the TypeScript SDK is plain ES modules).
pub const CODE_EXTENSIONS: [&str; 3] = ["py", "mjs", "js"];

/// Whether `entry` names a code agent rather than a plan: a `.py`, `.mjs` or `.js` file.
pub fn is_code_entry(entry: &Path) -> bool {
    entry
        .extension()
        .is_some_and(|e| CODE_EXTENSIONS.iter().any(|c| e == *c))
}

/// The code agents a server may start by name (`oracle serve --agent NAME=FILE`, repeatable):
/// chosen by the operator on the server's command line, never by a request or a project's
/// files. Each FILE is a code entry ([`is_code_entry`]) relative to the server's `--root`.
#[derive(Clone, Debug, Default)]
pub struct Agents(BTreeMap<String, PathBuf>);

impl Agents {
    /// Adds `NAME=FILE`: a name of letters, digits, `_`, `.` or `-` (1 to 64) not given
    /// before, and a `.py`, `.mjs` or `.js` file named relatively, without `..`.
    pub fn add(&mut self, spec: &str) -> Result<(), HostError> {
        let bad = |why: &str| HostError::Given {
            flag: "--agent",
            given: spec.to_owned(),
            why: why.to_owned(),
        };
        let (name, file) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected NAME=FILE"))?;
        let name_ok = (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if !name_ok {
            return Err(bad("NAME is 1 to 64 letters, digits, `_`, `.` or `-`"));
        }
        let path = PathBuf::from(file);
        if !is_code_entry(&path) {
            return Err(bad("FILE is a code agent: a .py, .mjs or .js file"));
        }
        if !path.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(bad("FILE is relative to --root, without `..`"));
        }
        if self.0.insert(name.to_owned(), path).is_some() {
            return Err(bad("NAME is given twice"));
        }
        Ok(())
    }

    /// The entry file of agent `name`, relative to the server's root: refused (404
    /// `unknown_agent`, nothing created) when the server was not told about it.
    pub fn entry(&self, name: &str) -> Result<&Path, HostError> {
        self.0
            .get(name)
            .map(PathBuf::as_path)
            .ok_or_else(|| HostError::UnknownAgent {
                name: name.to_owned(),
                known: self.0.keys().cloned().collect(),
            })
    }

    /// Whether no agent was given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A code run asked for over the network (`POST /api/v1/runs` with `"agent"`): the agent's
/// name among the server's [`Agents`], its inputs as JSON values, and a seed.
#[derive(Clone, Debug, Default)]
pub struct AgentRequest {
    pub agent: String,
    pub inputs: Map<String, Value>,
    pub seed: u64,
}

impl AgentRequest {
    /// The options of the run this request asks for, working in `root`: an input given as a
    /// JSON string is passed as its text, any other as its JSON (bound by the program's inputs
    /// schema as `--input` is).
    pub(crate) fn options(&self, agents: &Agents, root: &Path) -> Result<CodeStart, HostError> {
        let entry = agents.entry(&self.agent)?;
        let inputs = self
            .inputs
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => (k.clone(), s.clone()),
                other => (k.clone(), other.to_string()),
            })
            .collect();
        Ok(CodeStart {
            home: PathBuf::new(),
            entry: entry.to_path_buf(),
            root: root.to_path_buf(),
            inputs,
            grants: Vec::new(),
            seed: self.seed,
            jobs: 1,
            durability: Default::default(),
            limits: Limits::default(),
            bindings: Default::default(),
            key: None,
        })
    }
}

impl Home {
    /// The registry and bindings of a new code run in this home, bound as `given` says.
    fn code_options(
        &self,
        mut opts: CodeStart,
        given: &Given,
    ) -> Result<(CodeStart, Registry), HostError> {
        let bound = given.for_new_run(Vec::new())?;
        let (mut registry, _) = bound.registry(McpMode::Start)?;
        self.pace(&bound, &mut registry);
        opts.home = self.dir().to_path_buf();
        opts.bindings = oracle_runtime::bindings::Bindings {
            root: None,
            models: bound.models.models.clone(),
            secrets: bound.secret_vars.clone(),
            tools: bound.tools.clone(),
        };
        Ok((opts, registry))
    }

    /// Starts the code agent `request` names among `agents` in the background (`POST
    /// /api/v1/runs` with `"agent"` on a file home) on a server whose `--root` is `root`
    /// (`None`: it starts no runs, `starts_off`): an unknown name is `unknown_agent`; the
    /// program is started and its inputs bound before this returns (a refusal creates
    /// nothing), then a thread drives the run and hands its outcome to `ended`. Returns the
    /// run's id once its first event is recorded (or after [`crate::home::LAUNCH_WAIT_MS`]).
    pub fn launch_agent(
        &self,
        request: &AgentRequest,
        agents: &Agents,
        (root, given): (Option<&Path>, &Given),
        ended: impl FnOnce(&str, Result<Session, HostError>) + Send + 'static,
    ) -> Result<String, HostError> {
        let opts = request.options(agents, Path::new(""))?;
        let root = root.ok_or(HostError::StartsOff)?;
        let opts = CodeStart {
            root: root.to_path_buf(),
            ..opts
        };
        let (opts, registry) = self.code_options(opts, given)?;
        let ready = oracle_runtime::code_run::prepare_start(&opts)?;
        let id = ready.id().to_owned();
        let (started, first_event) = std::sync::mpsc::sync_channel::<()>(1);
        let run = id.clone();
        let home = self.clone();
        std::thread::Builder::new()
            .name(format!("start {id}"))
            .spawn(move || {
                let mut started = Some(started);
                let mut progress = move |_: &Progress| {
                    if let Some(s) = started.take() {
                        let _ = s.send(());
                    }
                };
                let outcome = oracle_runtime::code_run::drive(ready, &registry, &mut progress)
                    .map_err(HostError::from);
                // A run that sleeps goes on the timer wheel, as one `oracle run` starts does.
                if let Ok(session) = &outcome {
                    home.note_timer(session);
                }
                drop(progress);
                ended(&run, outcome);
            })
            .map_err(|e| HostError::Thread(format!("cannot start a thread for the run: {e}")))?;
        let wait = std::time::Duration::from_millis(crate::home::LAUNCH_WAIT_MS);
        let _ = first_event.recv_timeout(wait);
        Ok(id)
    }

    /// Starts a code agent's run (`oracle run triage.py`): binds its models, secrets and tool
    /// directories as `given` says (sealed into its `run.json`), starts the program, and drives
    /// the run until it finishes or suspends. A program that cannot start, or bad inputs or
    /// grants, create nothing.
    pub fn start_code(
        &self,
        opts: CodeStart,
        given: &Given,
        progress: Option<&mut dyn FnMut(&Progress)>,
    ) -> Result<Start<Session>, HostError> {
        let (opts, registry) = self.code_options(opts, given)?;
        let mut nothing = |_: &Progress| {};
        let progress = match progress {
            Some(p) => p,
            None => &mut nothing,
        };
        let started = self.keyed(oracle_runtime::code_run::start(&opts, &registry, progress))?;
        // A run that sleeps goes on the timer wheel as a plan run does (`Home::start`).
        if let Start::New(session) = &started {
            self.note_timer(session);
        }
        Ok(started)
    }

    /// A store's code run written into this (temporary) home by a read-only command: its
    /// `agent.json` names an agent, and `agents` (name to program path, given by the person on
    /// the command line, as a worker's `--agent`) say which program that is, sealed with this
    /// home's key so `oracle replay` here can start it. A plan run, or one of an agent not in
    /// `agents`, is left as it is; the replay then says what is missing.
    pub fn adopt_agent(
        &self,
        run: &str,
        agents: &std::collections::BTreeMap<String, PathBuf>,
    ) -> Result<(), HostError> {
        let found = self.find(run)?;
        if !oracle_runtime::code_run::is_code_run(&found.dir) {
            return Ok(());
        }
        oracle_runtime::code_run::adopt_for_worker(self.dir(), &found, agents)?;
        Ok(())
    }

    /// Everything [`Home::start_code`] does before the first event, for a run a store's worker
    /// will start (`oracle submit triage.py --store URL`): the program is started once here, in
    /// `opts.root`, to bind its inputs and grants; the run's `agent.json` keeps the agent's
    /// name and program hash, never a command (docs/STORE.md, "Code agents").
    pub fn prepare_code_submission(
        &self,
        mut opts: CodeStart,
        given: &Given,
    ) -> Result<CodeSubmission, HostError> {
        let bound = given.for_new_run(Vec::new())?;
        opts.home = self.dir().to_path_buf();
        opts.bindings = oracle_runtime::bindings::Bindings {
            root: None,
            models: bound.models.models.clone(),
            secrets: bound.secret_vars.clone(),
            tools: bound.tools.clone(),
        };
        Ok(oracle_runtime::code_run::prepare_submission(&opts)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_and_javascript_files_are_code_entries_and_plans_are_not() {
        for code in ["triage.py", "agent.mjs", "dir/agent.js"] {
            assert!(is_code_entry(Path::new(code)), "{code}");
        }
        for plan in ["triage.plan", "agent.ts", "py", "mjs"] {
            assert!(!is_code_entry(Path::new(plan)), "{plan}");
        }
    }

    #[test]
    fn an_agent_is_a_named_code_file_under_the_root_given_once() {
        let mut agents = Agents::default();
        agents.add("triage=agents/triage.py").unwrap();
        agents.add("ts-1=agent.mjs").unwrap();
        assert_eq!(
            agents.entry("triage").unwrap(),
            Path::new("agents/triage.py")
        );
        for bad in [
            "triage",
            "=a.py",
            "a b=a.py",
            "x=plan.plan",
            "x=/abs/a.py",
            "x=../a.py",
            "triage=other.py",
        ] {
            assert!(agents.add(bad).is_err(), "{bad}");
        }
        match agents.entry("rm") {
            Err(e) => assert_eq!(e.class().code, "unknown_agent"),
            Ok(p) => panic!("{p:?}"),
        }
    }
}
