//! A run asked for over the network (`POST /api/v1/runs`): its plan comes in the request, and
//! whoever sent it is trusted less than a person at the server's terminal. What such a plan may
//! name is narrower: files resolve against the working root the server was started with
//! (`oracle serve --root DIR`), never against a path in the request, and no grant lets it run
//! programs.
//!
//! What such a plan may name is decided by the one admission rule (`crate::admit`), which every
//! door that takes a plan calls; this module only turns a request into a run's options.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use oracle_runtime::session::{Prepared, Session, StartOptions};
use oracle_runtime::shared::SharedError;
use serde_json::{Map, Value};

use crate::admit::{Door, Plan, admit};
use crate::bind::Given;
use crate::error::HostError;
use crate::home::{Home, Start};

/// The name a requested plan has in messages (`request.plan:3:5: ...`), in the root.
pub const REQUEST_PLAN_NAME: &str = "request.plan";

/// A run asked for: the plan's text, its inputs as JSON values, an idempotency key, a seed.
#[derive(Clone, Debug, Default)]
pub struct RunRequest {
    pub plan: String,
    pub inputs: Map<String, Value>,
    pub key: Option<String>,
    pub seed: u64,
    /// The queue it waits in, checked ([`crate::queue::ask`]); `None`: it starts at once.
    pub queue: Option<crate::queue::Ask>,
}

impl Home {
    /// Starts the run `request` asks for in the background (`POST /api/v1/runs` on a file home)
    /// on a server whose `--root` is `root` (`None`: it starts no runs): admitted at the
    /// network's door ([`admit`]), then checked as every new run is ([`Home::launch`]). Models
    /// and secrets come from `given` (the server's own bindings).
    pub fn launch_request(
        &self,
        request: RunRequest,
        root: Option<&Path>,
        given: &Given,
        ended: impl FnOnce(&str, Result<Session, HostError>) + Send + 'static,
    ) -> Result<Start<Prepared>, HostError> {
        let (root, tool_dirs) = request.admit(root)?;
        let opts = request.options(self.dir(), &root)?;
        self.launch(opts, given, tool_dirs, ended)
    }
}

/// The memory settings of a requested run whose plan has a `memory "NAME"` (or `memory
/// input.USER`) line, as `oracle run` records them: the run's belief memory attached to that
/// store. Empty without the line. The input named must be a string in the request.
pub fn attached_memory(
    source: &str,
    inputs: &Map<String, Value>,
) -> Result<BTreeMap<String, Value>, HostError> {
    let Some(declared) = oracle_plan::memory_of(source) else {
        return Ok(BTreeMap::new());
    };
    let name = match declared.strip_prefix("input.") {
        Some(input) => inputs
            .get(input)
            .and_then(Value::as_str)
            .ok_or_else(|| {
                SharedError::Name(format!(
                    "the plan's `memory {declared}` line: give the input `{input}` as a string"
                ))
            })?
            .to_owned(),
        None => declared.clone(),
    };
    oracle_memory::shared::check_name(&name).map_err(SharedError::BadName)?;
    let memory = oracle_memory::MemorySettings {
        store: Some(name),
        ..oracle_memory::MemorySettings::default()
    };
    Ok(BTreeMap::from([(
        oracle_memory::settings::DOMAIN.to_owned(),
        memory.to_value(),
    )]))
}

impl RunRequest {
    /// Admits this request's plan at the network's door of a server whose `--root` is `root`
    /// ([`admit`]): the root it works in and the tool directories its `tools` lines name.
    pub fn admit(&self, root: Option<&Path>) -> Result<(PathBuf, Vec<PathBuf>), HostError> {
        let admitted = admit(
            Door::Network { root },
            Plan {
                text: &self.plan,
                inherited: &[],
                works_in: None,
            },
        )?;
        let root = admitted.root.ok_or(HostError::StartsOff)?;
        Ok((root, admitted.tool_dirs))
    }

    /// The options of the run this request asks for, in home `home`, working in `root`: with
    /// its plan's `memory` line, attached to that store ([`attached_memory`]).
    pub fn options(self, home: &Path, root: &Path) -> Result<StartOptions, HostError> {
        let domains = attached_memory(&self.plan, &self.inputs)?;
        Ok(StartOptions {
            domains,
            plan_text: Some(self.plan),
            input_values: self.inputs,
            key: self.key,
            seed: self.seed,
            root: root.to_path_buf(),
            ..StartOptions::new(home, &root.join(REQUEST_PLAN_NAME))
        })
    }
}
