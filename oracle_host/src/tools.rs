//! The tools a front end lists, checks, calls and audits outside any run (`oracle tools`,
//! `oracle plan tools|check`, `oracle lsp`), and the registry of a replay (`oracle replay`):
//! the built-ins and the declared tools of some directories (docs/TOOLS.md). What each
//! command prints is the front end's; what is loaded, called and compared is here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oracle_core::Payload;
use oracle_plan::ScopeFrom;
use oracle_plan::catalogue::{CapabilityRule, Catalogue};
use oracle_runtime::StoreError;
use oracle_runtime::declared::{self, McpMode, Problem};
use oracle_runtime::engine::Progress;
use oracle_runtime::session::{self, Replayed, SessionError};
use oracle_runtime::tool::{Registry, ToolContext, ToolDecl, ToolError, ToolOutput};
use serde_json::{Value, json};

use crate::{Home, HostError};

/// The built-in tools' catalogue (`oracle plan tools`).
pub fn builtin_catalogue() -> Catalogue {
    oracle_runtime::catalogue::builtin()
}

/// The catalogue a plan is checked against: the built-ins and the declared tools of `dirs`
/// (MCP servers started); with `schemas`, every tool's input and output schemas too (for an
/// editor's hover).
pub fn catalogue(dirs: &[PathBuf], schemas: bool) -> Result<Catalogue, Vec<Problem>> {
    let mut registry = oracle_runtime::tools::builtin();
    if !dirs.is_empty() {
        let loaded = declared::load(dirs, &Arc::default(), McpMode::Start)?;
        declared::declare(&mut registry, loaded)?;
    }
    if !schemas {
        return Ok(registry.catalogue());
    }
    let with = registry.iter().map(|r| {
        let s = oracle_plan::ToolSchemas {
            input: r.decl.input_schema.clone(),
            output: r.decl.output_schema.clone(),
        };
        (r.decl.name.clone(), s)
    });
    Ok(registry.catalogue().with_schemas(with))
}

/// A capability rule as `oracle tools` shows it (`fs:read:<path>`), `-` for none.
pub fn capability_text(rule: &Option<CapabilityRule>) -> String {
    match rule {
        None => "-".to_owned(),
        Some(r) => match &r.scope {
            ScopeFrom::Fixed(s) => format!("{}:{}:{s}", r.domain, r.action),
            ScopeFrom::Arg(a) => format!("{}:{}:<{a}>", r.domain, r.action),
        },
    }
}

/// The built-ins and the tools of some directories, loaded to be listed or called.
pub struct Toolbox {
    registry: Registry,
    /// The kind of each declared tool.
    kinds: BTreeMap<String, &'static str>,
    /// The wasm tools, for reporting the fuel a call used.
    wasm: BTreeMap<String, Arc<declared::wasm::WasmTool>>,
    /// Manifests that did not load: their tools are not served.
    problems: Vec<Problem>,
}

/// What a call outside any run gave: its output, why it failed, the fuel a wasm tool used.
#[derive(Clone, Debug)]
pub struct Called {
    pub output: Option<Value>,
    pub error: Option<String>,
    pub fuel: Option<u64>,
}

/// Why a tool was not called.
#[derive(Debug, thiserror::Error)]
pub enum CallRefused {
    #[error("tool `{name}` is declared by a manifest that cannot be loaded: {why}")]
    Unavailable { name: String, why: String },
    #[error("no tool `{name}` (`oracle tools list --tools DIR` lists them)")]
    NoTool { name: String },
    #[error("--input does not fit `{name}`: {why}")]
    Input { name: String, why: String },
}

impl Toolbox {
    /// The built-ins and the tools of `dirs` (MCP servers started). A manifest that does not
    /// load leaves the others served; it is in [`Toolbox::problems`].
    pub fn load(dirs: &[PathBuf]) -> Result<Toolbox, Vec<Problem>> {
        let mut out = Toolbox {
            registry: oracle_runtime::tools::builtin(),
            kinds: BTreeMap::new(),
            wasm: BTreeMap::new(),
            problems: Vec::new(),
        };
        if dirs.is_empty() {
            return Ok(out);
        }
        let loaded = declared::load(dirs, &Arc::default(), McpMode::Start)?;
        out.problems = loaded.problems();
        for e in &loaded.tools {
            let name = e.tool.decl().name;
            if let Some(w) = &e.wasm {
                out.wasm.insert(name.clone(), w.clone());
            }
            out.kinds.insert(name, e.kind);
        }
        declared::declare(&mut out.registry, loaded)?;
        Ok(out)
    }

    /// The manifests that did not load.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// One row per tool (`oracle tools list --json`): name, kind, effect, capability, version
    /// and description.
    pub fn rows(&self) -> Vec<Value> {
        self.registry
            .iter()
            // The plan agent's own wait between attempts is no tool a plan may call.
            .filter(|t| t.decl.name != oracle_plan::policy::BACKOFF_TOOL)
            .map(|t| {
                json!({
                    "name": t.decl.name,
                    "kind": self.kinds.get(&t.decl.name).copied().unwrap_or("builtin"),
                    "effect": t.decl.effect.as_str(),
                    "capability": capability_text(&t.decl.capability),
                    "version": t.decl.version,
                    "description": t.decl.description,
                })
            })
            .collect()
    }

    /// `oracle tools call NAME --input JSON`: the tool called once in the working directory,
    /// with no recorded state; its output checked against its schema.
    pub fn call(&self, name: &str, input: &Value) -> Result<Called, CallRefused> {
        let Some(t) = self.registry.get(name) else {
            if let Some(why) = self.registry.unavailable(name) {
                return Err(CallRefused::Unavailable {
                    name: name.to_owned(),
                    why: why.to_owned(),
                });
            }
            return Err(CallRefused::NoTool {
                name: name.to_owned(),
            });
        };
        t.input.check(input).map_err(|why| CallRefused::Input {
            name: name.to_owned(),
            why: why.to_string(),
        })?;
        let root = working_root();
        let state = oracle_core::State::new();
        let cx = context("call", 1, &state, &root, &t.decl);
        // A wasm tool is run through its module directly, to report the fuel it used.
        let mut fuel = None;
        let result = match self.wasm.get(name) {
            Some(w) => declared::input_json(input)
                .map_err(|e| ToolError::Failed(e.to_string()))
                .and_then(|bytes| w.execute(&bytes, t.decl.output_bytes_max))
                .map(|(output, usage)| {
                    fuel = Some(usage.fuel);
                    ToolOutput::of(output)
                }),
            None => t.tool.call(input, &cx),
        };
        let (output, error) = match result {
            Ok(out) => match t.output.check(&out.output) {
                Ok(()) => (Some(out.output), None),
                Err(m) => (
                    Some(out.output),
                    Some(format!("the output does not fit the output schema: {m}")),
                ),
            },
            Err(e) => (None, Some(e.to_string())),
        };
        Ok(Called {
            output,
            error,
            fuel,
        })
    }
}

/// What `oracle tools check DIR` found: a row per declared tool that loaded (with its
/// manifest's file name), and the manifests that did not.
#[derive(Debug)]
pub struct Checked {
    pub rows: Vec<Value>,
    pub broken: Vec<Problem>,
}

/// `oracle tools check DIR`: the manifests of `dirs` loaded and declared beside the built-ins.
pub fn check(dirs: &[PathBuf]) -> Result<Checked, Vec<Problem>> {
    let mut registry = oracle_runtime::tools::builtin();
    let loaded = declared::load(dirs, &Arc::default(), McpMode::Start)?;
    let tools: Vec<(String, &'static str, PathBuf)> = loaded
        .tools
        .iter()
        .map(|e| (e.tool.decl().name, e.kind, e.path.clone()))
        .collect();
    let broken = loaded.problems();
    declared::declare(&mut registry, loaded)?;
    let rows = tools
        .iter()
        .filter_map(|(name, kind, path)| {
            let t = registry.get(name)?;
            Some(json!({
                "name": name,
                "kind": kind,
                "effect": t.decl.effect.as_str(),
                "capability": capability_text(&t.decl.capability),
                "manifest": path.file_name().map(|f| f.to_string_lossy().into_owned()),
            }))
        })
        .collect();
    Ok(Checked { rows, broken })
}

/// The working directory, as the root of a call made outside any run.
fn working_root() -> PathBuf {
    std::env::current_dir()
        .and_then(|p| p.canonicalize())
        .unwrap_or_default()
}

/// A context for a call made outside the engine: no recorded state, the working directory as
/// root, the tool's own limits.
fn context<'a>(
    step: &'a str,
    attempt: u64,
    state: &'a oracle_core::State,
    root: &'a Path,
    decl: &ToolDecl,
) -> ToolContext<'a> {
    ToolContext {
        run: None,
        step,
        attempt,
        tick: 0,
        seed: 0,
        state,
        root,
        resolved: None,
        timeout_ms: decl.timeout_ms,
        output_bytes_max: decl.output_bytes_max,
        access: None,
        earlier_failures: &[],
    }
}

/// Why the tools of a recorded run could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RunTools {
    /// Manifests that did not load.
    #[error("{} problems with the declared tools", .0.len())]
    Problems(Vec<Problem>),
    /// The run's directories are not vouched for, or the home cannot be read.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A declared tool differs from what the run pinned.
    #[error("{text}")]
    Changed { tool: String, text: String },
}

impl From<Vec<Problem>> for RunTools {
    fn from(p: Vec<Problem>) -> RunTools {
        RunTools::Problems(p)
    }
}

/// The tools a replay (or an audit) of a recorded run loads: the built-ins with no model
/// bound (a replay never calls a model), and the run's declared tools.
pub struct Replaying {
    registry: Registry,
    /// A tool that changed since the run, when the change was allowed: to warn about.
    pub changed: Option<String>,
}

impl Replaying {
    /// Whether `tool` is a declared tool the run pinned as pure.
    pub fn declared_pure(&self, tool: &str) -> bool {
        let pinned = self.registry.pins().unwrap_or_default();
        pinned.iter().any(|p| p.name == tool && p.effect == "pure")
    }
}

/// Loads the tools run `run` of `home` uses (the directories it keeps, where the home's key
/// vouches for them, or `extra` when given) and checks them against the pins of its first
/// event: a tool that changed is refused, naming it, unless `allow_change`, which gives the
/// registry the recorded pins so the run diverges, if at all, at the first output that
/// changed. With `start_servers` false, MCP servers' listings are read from the run. An
/// unknown run, or a log that cannot be read, loads the built-ins alone: the command itself
/// reports it.
pub fn for_run(
    home: &Path,
    run: &str,
    extra: &[PathBuf],
    start_servers: bool,
    allow_change: bool,
) -> Result<Replaying, RunTools> {
    let mut out = Replaying {
        registry: oracle_runtime::tools::builtin(),
        changed: None,
    };
    let Ok(found) = session::find(home, run) else {
        return Ok(out);
    };
    let dirs = Home::open(home)?.replay_tools(&found, extra)?;
    let mode = if start_servers {
        McpMode::Start
    } else {
        McpMode::Recorded(&found.dir)
    };
    if !dirs.is_empty() {
        let loaded = declared::load(&dirs, &Arc::default(), mode)?;
        declared::declare(&mut out.registry, loaded)?;
    }
    let Ok(recorded) = session::recorded_pins(&found) else {
        return Ok(out);
    };
    let current = out.registry.pins().unwrap_or_default();
    if let Err(changed) = declared::compare(&recorded, &current) {
        if !allow_change {
            return Err(RunTools::Changed {
                tool: changed.tool.clone(),
                text: changed.to_string(),
            });
        }
        out.changed = Some(changed.to_string());
        out.registry.set_pins(recorded);
    }
    Ok(out)
}

/// `oracle replay`: the run re-executed against its record with `tools`, `progress` told of
/// every event.
pub fn replay(
    home: &Path,
    run: &str,
    plan_override: Option<&Path>,
    jobs: u32,
    from_point: bool,
    tools: &Replaying,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Replayed, SessionError> {
    session::replay_observed(
        home,
        run,
        plan_override,
        jobs,
        from_point,
        &tools.registry,
        progress,
    )
}

/// What `oracle tools audit` found: per declared pure tool, the calls audited, the calls whose
/// output varied, and the first step where one did.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    pub run: String,
    pub per_tool: BTreeMap<String, (u64, u64, Option<String>)>,
}

/// Why an audit did not run.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The run is unknown, or its pins cannot be read.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// Its tools could not be loaded.
    #[error(transparent)]
    Tools(#[from] RunTools),
    /// Its log cannot be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `oracle tools audit RUN`: every recorded call of a declared pure tool made `times` more
/// times with its recorded input, compared with its recorded output. Never starts a server or
/// calls an impure tool (MCP listings are read from the run).
pub fn audit(home: &Path, run: &str, extra: &[PathBuf], times: u32) -> Result<Audit, AuditError> {
    let found = session::find(home, run)?;
    let tools = for_run(home, run, extra, false, false)?;
    let declared_pure: Vec<String> = session::recorded_pins(&found)?
        .into_iter()
        .filter(|p| p.effect == "pure")
        .map(|p| p.name)
        .collect();
    let events = oracle_runtime::recorded::Recorded::read(&found.paths.log)?;
    let root = working_root();
    let state = oracle_core::State::new();
    // Calls by (step, attempt): the input, then the recorded output.
    let mut pending: BTreeMap<(String, u64), Value> = BTreeMap::new();
    let mut audit = Audit {
        run: found.id.clone(),
        per_tool: BTreeMap::new(),
    };
    for seq in 0..events.len() {
        let Some(event) = events.event(seq) else {
            continue;
        };
        match event.typed() {
            Ok(Payload::ToolCalled(c)) if declared_pure.contains(&c.tool) => {
                pending.insert((c.step, c.attempt), c.input);
            }
            Ok(Payload::ToolReturned(r)) if declared_pure.contains(&r.tool) => {
                let Some(input) = pending.remove(&(r.step.clone(), r.attempt)) else {
                    continue;
                };
                let Some(t) = tools.registry.get(&r.tool) else {
                    continue;
                };
                let entry = audit.per_tool.entry(r.tool.clone()).or_default();
                entry.0 += 1;
                let cx = context(&r.step, r.attempt, &state, &root, &t.decl);
                let varied = (0..times).any(|_| {
                    t.tool
                        .call(&input, &cx)
                        .map(|o| o.output != r.output)
                        .unwrap_or(true)
                });
                if varied {
                    entry.1 += 1;
                    entry.2.get_or_insert(r.step.clone());
                }
            }
            _ => {}
        }
    }
    Ok(audit)
}
