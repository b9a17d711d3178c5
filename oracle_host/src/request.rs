//! A run asked for over the network (`POST /api/v1/runs`): its plan comes in the request, and
//! whoever sent it is trusted less than a person at the server's terminal. What such a plan may
//! name is narrower: files resolve against the working root the server was started with
//! (`oracle serve --root DIR`), never against a path in the request, and no grant lets it run
//! programs.
//!
//! What is absent, by design: no path from the request (the plan's `tools` lines, sub-plans and
//! `fs` grants are relative and stay under the root); no `proc` grant (a program is not confined
//! by grants, docs/SECURITY.md); no grant beyond the plan text's own.

use std::path::{Component, Path, PathBuf};

use std::collections::BTreeMap;

use oracle_runtime::session::{Prepared, Session, StartOptions};
use oracle_runtime::shared::SharedError;
use serde_json::{Map, Value};

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
}

/// Why a requested plan is refused before anything is created.
fn refused(what: String) -> HostError {
    HostError::NotAllowed { what }
}

/// A directory written in a requested plan: relative and never climbing out of the root.
fn inside(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// Refuses what a requested plan may not name (module docs), and returns the directories its
/// `tools` lines name, under `root`.
pub fn check_plan(source: &str, root: &Path) -> Result<Vec<PathBuf>, HostError> {
    // A plan that does not parse is left to the compiler, which names every error.
    let Some(plan) = oracle_plan::parse(source).0 else {
        return Ok(Vec::new());
    };
    for grant in &plan.grants {
        let g = grant.node.as_str();
        let mut parts = g.splitn(3, ':');
        let (domain, scope) = (parts.next().unwrap_or(""), parts.nth(1).unwrap_or(""));
        if domain == "proc" || domain == "*" {
            return Err(refused(format!(
                "grant `{g}`: a run started through the API cannot run programs (programs are not confined by grants; docs/SECURITY.md)"
            )));
        }
        if domain == "fs" && (scope.starts_with('/') || scope.split('/').any(|c| c == "..")) {
            return Err(refused(format!(
                "grant `{g}`: a run started through the API reaches files under the server's --root only (a relative scope without `..`)"
            )));
        }
    }
    let mut dirs = Vec::new();
    for t in &plan.tools {
        if !inside(&t.node) {
            return Err(refused(format!(
                "tools \"{}\": a run started through the API loads tools from under the server's --root only (a relative path without `..`)",
                t.node
            )));
        }
        dirs.push(root.join(&t.node));
    }
    Ok(dirs)
}

impl Home {
    /// Starts the run `request` asks for in the background (`POST /api/v1/runs` on a file home),
    /// in the working root `root`: checked as [`check_plan`] says, then as every new run
    /// ([`Home::launch`]). Models and secrets come from `given` (the server's own bindings).
    pub fn launch_request(
        &self,
        request: RunRequest,
        root: &Path,
        given: &Given,
        ended: impl FnOnce(&str, Result<Session, HostError>) + Send + 'static,
    ) -> Result<Start<Prepared>, HostError> {
        let tool_dirs = check_plan(&request.plan, root)?;
        let opts = request.options(self.dir(), root)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(lines: &str) -> String {
        format!("plan p version 1\n{lines}\ns = json.parse {{ text: \"1\" }}\n")
    }

    #[test]
    fn paths_from_a_request_stay_under_the_root() {
        let root = Path::new("/srv/work");
        assert!(check_plan(&plan("grant fs:read:data/**"), root).is_ok());
        assert!(check_plan(&plan("grant fs:write:*.txt"), root).is_ok());
        assert!(check_plan(&plan("grant net:http:127.0.0.1:*"), root).is_ok());
        assert!(check_plan(&plan("grant fs:read:/etc/**"), root).is_err());
        assert!(check_plan(&plan("grant fs:read:../x"), root).is_err());
        assert!(check_plan(&plan("grant proc:exec:*"), root).is_err());
        assert_eq!(
            check_plan(&plan("tools \"tools\""), root).expect("allowed"),
            vec![root.join("tools")]
        );
        assert!(check_plan(&plan("tools \"/opt/tools\""), root).is_err());
        assert!(check_plan(&plan("tools \"a/../../b\""), root).is_err());
    }
}
