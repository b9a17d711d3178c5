//! Code agents through the host (docs/AGENTS.md): [`Home::start_code`] starts a run whose
//! program is a process speaking the agent protocol (`oracle run triage.py`, `agent.mjs`),
//! bound as a plan run is. Its resume, answer and replay go through the same calls as a plan
//! run's ([`Home::resume`]): the runtime tells the kinds apart by the run's directory.

use std::path::Path;

use oracle_runtime::declared::McpMode;
use oracle_runtime::engine::Progress;
use oracle_runtime::session::Session;

pub use oracle_runtime::code_run::{AGENT_FILE, CodeStart, CodeSubmission, Limits, is_code_run};
pub use oracle_runtime::process_agent::{DECIDE_MS_DEFAULT, HELLO_MS_DEFAULT};

use crate::bind::Given;
use crate::error::HostError;
use crate::home::Home;

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

impl Home {
    /// Starts a code agent's run (`oracle run triage.py`): binds its models, secrets and tool
    /// directories as `given` says (sealed into its `run.json`), starts the program, and drives
    /// the run until it finishes or suspends. A program that cannot start, or bad inputs or
    /// grants, create nothing.
    pub fn start_code(
        &self,
        mut opts: CodeStart,
        given: &Given,
        progress: Option<&mut dyn FnMut(&Progress)>,
    ) -> Result<Session, HostError> {
        let bound = given.for_new_run(Vec::new())?;
        let (registry, _) = bound.registry(McpMode::Start)?;
        opts.home = self.dir().to_path_buf();
        opts.bindings = oracle_runtime::bindings::Bindings {
            root: None,
            models: bound.models.models.clone(),
            secrets: bound.secret_vars.clone(),
            tools: bound.tools.clone(),
        };
        let mut nothing = |_: &Progress| {};
        let progress = match progress {
            Some(p) => p,
            None => &mut nothing,
        };
        Ok(oracle_runtime::code_run::start(&opts, &registry, progress)?)
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
}
