//! `oracle tools list | check | call | audit`, and loading declared tools (`--tools DIR`, a
//! plan's `tools "DIR"` lines, the directories a run keeps) into the registry of `run`,
//! `resume`, `replay` and `plan check`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use oracle_core::payload::Payload;
use oracle_plan::catalogue::ScopeFrom;
use oracle_runtime::declared::{self, McpMode, Problem};
use oracle_runtime::secrets::Secrets;
use oracle_runtime::session;
use oracle_runtime::tool::{Registry, ToolContext};
use serde_json::{Value, json};

use crate::exit::{self, CliError};

/// Largest `--times` of `oracle tools audit`.
pub const AUDIT_TIMES_MAX: u32 = 100;

/// `--tools DIR`, shared by the commands that take declared tools.
#[derive(Args, Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ToolDirs {
    /// A directory of tool manifests (docs/TOOLS.md) whose tools the run may call, besides the
    /// plan's own `tools "DIR"` lines (repeatable). `resume` and `replay` load the directories
    /// the run started with unless given others.
    #[arg(long = "tools", value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ToolsArgs {
    #[command(subcommand)]
    command: ToolsCommand,
}

#[derive(Subcommand, Debug)]
enum ToolsCommand {
    /// List the built-in tools and those the manifests in --tools declare, with their
    /// capability and effect.
    List(ListArgs),
    /// Check every manifest of DIR: schemas, capabilities, programs; compile wasm modules; start
    /// each MCP server and list its tools. Exit 2 with every problem located.
    Check(CheckArgs),
    /// Call one tool outside any run, for debugging: nothing is recorded and no capability is
    /// checked. The input is checked against the tool's schema, and the output too.
    Call(CallArgs),
    /// Re-execute every call of a run to a declared pure tool N times and list the tools whose
    /// output varies: tools that should be declared `effect = "impure"`.
    Audit(AuditArgs),
}

#[derive(Args, Debug)]
struct ListArgs {
    #[command(flatten)]
    tools: ToolDirs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// The directory of manifests.
    dir: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct CallArgs {
    /// The tool, as a plan names it (`json.field`, `mcp.example.reverse`).
    name: String,
    /// The input, a JSON object.
    #[arg(long, value_name = "JSON")]
    input: String,
    #[command(flatten)]
    tools: ToolDirs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct AuditArgs {
    /// Run id (under `<home>/runs`) or run directory.
    run: String,
    /// How many times each pure call is executed again.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=AUDIT_TIMES_MAX as i64))]
    times: u32,
    #[command(flatten)]
    tools: ToolDirs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

impl ToolsArgs {
    /// `tools list` and `tools call` without `--tools` use the config file's directories
    /// (`crate::config`); `check` names its directory and `audit` a run, which keeps its own.
    pub(crate) fn configure(&mut self, settings: &crate::config::Settings) {
        let (ToolsCommand::List(ListArgs { tools, .. })
        | ToolsCommand::Call(CallArgs { tools, .. })) = &mut self.command
        else {
            return;
        };
        settings.fill_tools(&mut tools.dirs);
    }
}

/// Paths as given, made absolute against the working directory (so `run.json` can keep them).
pub fn absolute(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let cwd = std::env::current_dir().unwrap_or_default();
    dirs.iter()
        .map(|d| d.canonicalize().unwrap_or_else(|_| cwd.join(d)))
        .collect()
}

/// The directories of a plan's `tools "DIR"` lines (relative to the plan), then `extra`.
pub fn plan_dirs(plan: &Path, extra: &[PathBuf]) -> Vec<PathBuf> {
    let source = std::fs::read_to_string(plan).unwrap_or_default();
    let base = plan.parent().unwrap_or(Path::new("."));
    let mut dirs: Vec<PathBuf> = oracle_plan::tools_of(&source)
        .into_iter()
        .map(|d| base.join(d))
        .collect();
    dirs.extend(extra.iter().cloned());
    absolute(&dirs)
}

/// Every problem, one per line, as one input error (exit 2).
pub fn problems_error(problems: &[Problem]) -> CliError {
    let mut message = format!(
        "{} with the declared tools:",
        match problems.len() {
            1 => "1 problem".to_owned(),
            n => format!("{n} problems"),
        }
    );
    for p in problems {
        message.push_str(&format!("\n  {p}"));
    }
    message.push_str("\nnothing was run (docs/TOOLS.md describes manifests)");
    CliError {
        code: exit::INPUT,
        json: Some(exit::error_json(
            Some(
                json!({"kind": "tools", "problems": problems.iter().map(problem_json).collect::<Vec<_>>()}),
            ),
            exit::INPUT,
            &message,
        )),
        message,
        quiet: false,
    }
}

fn problem_json(p: &Problem) -> Value {
    json!({"path": p.path, "line": p.at.map(|a| a.0), "col": p.at.map(|a| a.1), "message": p.message})
}

/// Loads the declared tools of `dirs` into `registry`; the files a new run keeps.
pub fn declare(
    registry: &mut Registry,
    dirs: &[PathBuf],
    secrets: &Arc<Secrets>,
    mode: McpMode<'_>,
) -> Result<Vec<(String, Vec<u8>)>, CliError> {
    if dirs.is_empty() {
        return Ok(Vec::new());
    }
    let loaded = declared::load(dirs, secrets, mode).map_err(|p| problems_error(&p))?;
    let kept = loaded.kept.clone();
    declared::declare(registry, loaded).map_err(|p| problems_error(&p))?;
    Ok(kept)
}

/// Loads the tools a recorded run uses into `registry` (the directories it keeps, or `extra`
/// when given) and checks them against the pins of its first event: a tool that changed is
/// refused, naming it, unless `allow_change`, which gives the registry the recorded pins so the
/// run diverges, if at all, at the first output that changed.
pub fn for_run(
    home: &Path,
    run: &str,
    extra: &[PathBuf],
    registry: &mut Registry,
    secrets: &Arc<Secrets>,
    start_servers: bool,
    allow_change: bool,
) -> Result<(), CliError> {
    // An unknown run is left for the command itself to report.
    let Ok(found) = session::find(home, run) else {
        return Ok(());
    };
    // The run's own directories only where its home's key vouches for them (run.json is not
    // hashed): otherwise they are given again with --tools. Nothing else is bound (replay).
    let host = oracle_host::Home::open(home).map_err(|e| crate::run::host_error(e, false))?;
    let dirs = host
        .replay_tools(&found, extra)
        .map_err(|e| crate::run::host_error(e, false))?;
    let mode = if start_servers {
        McpMode::Start
    } else {
        McpMode::Recorded(&found.dir)
    };
    declare(registry, &dirs, secrets, mode)?;
    // A log that cannot be read (empty, damaged) is for the command itself to report.
    let Ok(recorded) = session::recorded_pins(&found) else {
        return Ok(());
    };
    let current = registry.pins().unwrap_or_default();
    if let Err(changed) = declared::compare(&recorded, &current) {
        if allow_change {
            eprintln!(
                "warning: {changed}; going on (--allow-tool-change): the run diverges at the first output that changed, if any"
            );
            registry.set_pins(recorded);
        } else {
            let message = format!(
                "{changed}: nothing was run; give the run's tools (--tools DIR), or pass --allow-tool-change to check the run against the changed tool"
            );
            return Err(CliError {
                code: exit::INPUT,
                json: Some(exit::error_json(
                    Some(json!({"kind": "tool_changed", "tool": changed.tool})),
                    exit::INPUT,
                    &message,
                )),
                message,
                quiet: false,
            });
        }
    }
    Ok(())
}

pub fn run(home: &Path, a: ToolsArgs) -> Result<u8, CliError> {
    match a.command {
        ToolsCommand::List(a) => list(a),
        ToolsCommand::Check(a) => check(a),
        ToolsCommand::Call(a) => call(a),
        ToolsCommand::Audit(a) => audit(home, a),
    }
}

/// What `list` and `call` load: the built-ins and the tools of some directories.
struct Loaded {
    registry: Registry,
    /// The kind of each declared tool.
    kinds: BTreeMap<String, &'static str>,
    /// The wasm tools, for reporting the fuel a call used.
    wasm: BTreeMap<String, Arc<declared::wasm::WasmTool>>,
}

/// The built-ins and the tools of `dirs` (MCP servers started).
fn loaded(dirs: &[PathBuf]) -> Result<Loaded, CliError> {
    let mut out = Loaded {
        registry: oracle_runtime::tools::builtin(),
        kinds: BTreeMap::new(),
        wasm: BTreeMap::new(),
    };
    if !dirs.is_empty() {
        let loaded = declared::load(&absolute(dirs), &Arc::default(), McpMode::Start)
            .map_err(|p| problems_error(&p))?;
        // The others are served; the broken ones are named, and refused only if called.
        for p in loaded.problems() {
            eprintln!("warning: {p} (its tools are not loaded)");
        }
        for e in &loaded.tools {
            let name = e.tool.decl().name;
            if let Some(w) = &e.wasm {
                out.wasm.insert(name.clone(), w.clone());
            }
            out.kinds.insert(name, e.kind);
        }
        declared::declare(&mut out.registry, loaded).map_err(|p| problems_error(&p))?;
    }
    Ok(out)
}

fn capability_text(rule: &Option<oracle_plan::catalogue::CapabilityRule>) -> String {
    match rule {
        None => "-".to_owned(),
        Some(r) => match &r.scope {
            ScopeFrom::Fixed(s) => format!("{}:{}:{s}", r.domain, r.action),
            ScopeFrom::Arg(a) => format!("{}:{}:<{a}>", r.domain, r.action),
        },
    }
}

fn list(a: ListArgs) -> Result<u8, CliError> {
    let Loaded {
        registry, kinds, ..
    } = loaded(&a.tools.dirs)?;
    let rows: Vec<Value> = registry
        .iter()
        .map(|t| {
            json!({
                "name": t.decl.name,
                "kind": kinds.get(&t.decl.name).copied().unwrap_or("builtin"),
                "effect": t.decl.effect.as_str(),
                "capability": capability_text(&t.decl.capability),
                "version": t.decl.version,
                "description": t.decl.description,
            })
        })
        .collect();
    if a.json {
        crate::out::json(&json!({"ok": true, "tools": rows}))?;
        return Ok(exit::OK);
    }
    let s = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
    let w = |k: &str, min: usize| {
        rows.iter()
            .map(|r| s(r, k).chars().count())
            .max()
            .unwrap_or(0)
            .max(min)
    };
    let (wn, wk, we, wc) = (
        w("name", 4),
        w("kind", 4),
        w("effect", 6),
        w("capability", 10),
    );
    outln!(
        "{:wn$}  {:wk$}  {:we$}  {:wc$}  DESCRIPTION",
        "NAME",
        "KIND",
        "EFFECT",
        "CAPABILITY"
    )?;
    for r in &rows {
        outln!(
            "{:wn$}  {:wk$}  {:we$}  {:wc$}  {}",
            s(r, "name"),
            s(r, "kind"),
            s(r, "effect"),
            s(r, "capability"),
            s(r, "description")
        )?;
    }
    Ok(exit::OK)
}

fn check(a: CheckArgs) -> Result<u8, CliError> {
    let dirs = absolute(std::slice::from_ref(&a.dir));
    let mut registry = oracle_runtime::tools::builtin();
    let result = declared::load(&dirs, &Arc::default(), McpMode::Start).and_then(|loaded| {
        let tools: Vec<(String, &'static str, PathBuf)> = loaded
            .tools
            .iter()
            .map(|e| (e.tool.decl().name, e.kind, e.path.clone()))
            .collect();
        let broken = loaded.problems();
        declared::declare(&mut registry, loaded).map(|()| (tools, broken))
    });
    let (tools, broken) = match result {
        Ok(t) => t,
        Err(problems) => {
            let err = problems_error(&problems);
            if a.json {
                crate::out::json(&json!({"ok": false, "error": err.error_value()}))?;
            }
            return Err(err);
        }
    };
    let rows: Vec<Value> = tools
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
    if a.json {
        if broken.is_empty() {
            crate::out::json(&json!({"ok": true, "dir": a.dir, "tools": rows}))?;
        }
    } else {
        for r in &rows {
            outln!(
                "ok       {}  ({} {}, needs {}; {})",
                r["name"].as_str().unwrap_or_default(),
                r["effect"].as_str().unwrap_or_default(),
                r["kind"].as_str().unwrap_or_default(),
                r["capability"].as_str().unwrap_or_default(),
                r["manifest"].as_str().unwrap_or_default(),
            )?;
        }
    }
    // A broken manifest does not keep the others from being served (a plan is refused only
    // if it uses its tools), but it is a problem of the directory: exit 2, each located.
    if !broken.is_empty() {
        let err = problems_error(&broken);
        if a.json {
            crate::out::json(
                &json!({"ok": false, "dir": a.dir, "tools": rows, "error": err.error_value()}),
            )?;
        }
        return Err(err);
    }
    if !a.json {
        outln!(
            "check    {}: {} declared, no problems",
            a.dir.display(),
            match rows.len() {
                1 => "1 tool".to_owned(),
                n => format!("{n} tools"),
            }
        )?;
    }
    Ok(exit::OK)
}

/// A context for a call made outside the engine: no recorded state, the working directory as
/// root, the tool's own limits.
fn context<'a>(
    step: &'a str,
    attempt: u64,
    state: &'a oracle_core::State,
    root: &'a Path,
    decl: &oracle_runtime::tool::ToolDecl,
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

fn call(a: CallArgs) -> Result<u8, CliError> {
    let input: Value = serde_json::from_str(&a.input)
        .map_err(|e| CliError::input(format!("--input: not JSON: {e}")))?;
    let mut dirs = a.tools.dirs.clone();
    dirs.dedup();
    let loaded = loaded(&dirs)?;
    let registry = &loaded.registry;
    let Some(t) = registry.get(&a.name) else {
        if let Some(why) = registry.unavailable(&a.name) {
            return Err(CliError::input(format!(
                "tool `{}` is declared by a manifest that cannot be loaded: {why}",
                a.name
            )));
        }
        return Err(CliError::input(format!(
            "no tool `{}` (`oracle tools list --tools DIR` lists them)",
            a.name
        )));
    };
    t.input
        .check(&input)
        .map_err(|m| CliError::input(format!("--input does not fit `{}`: {m}", a.name)))?;
    let root = std::env::current_dir()
        .and_then(|p| p.canonicalize())
        .unwrap_or_default();
    let state = oracle_core::State::new();
    let cx = context("call", 1, &state, &root, &t.decl);
    // A wasm tool is run through its module directly, to report the fuel it used.
    let mut fuel = None;
    let result = match loaded.wasm.get(&a.name) {
        Some(w) => declared::input_json(&input)
            .map_err(|e| oracle_runtime::tool::ToolError::Failed(e.to_string()))
            .and_then(|bytes| w.execute(&bytes, t.decl.output_bytes_max))
            .map(|(output, usage)| {
                fuel = Some(usage.fuel);
                oracle_runtime::tool::ToolOutput::of(output)
            }),
        None => t.tool.call(&input, &cx),
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
    if a.json {
        crate::out::json(
            &json!({"ok": error.is_none(), "tool": a.name, "output": output, "error": error, "fuel": fuel}),
        )?;
    } else {
        if let Some(o) = &output {
            outln!("{}", serde_json::to_string_pretty(o).unwrap_or_default())?;
        }
        if let Some(e) = &error {
            eprintln!("error: `{}` failed: {e}", a.name);
        }
        if let Some(f) = fuel {
            eprintln!("fuel     {f} units");
        }
    }
    Ok(if error.is_none() {
        exit::OK
    } else {
        exit::FAILED
    })
}

fn audit(home: &Path, a: AuditArgs) -> Result<u8, CliError> {
    let found = session::find(home, &a.run).map_err(|e| CliError::input(e.to_string()))?;
    let mut registry = oracle_runtime::tools::builtin();
    // Audit never starts a server or calls an impure tool: MCP lists are read from the run.
    for_run(
        home,
        &a.run,
        &a.tools.dirs,
        &mut registry,
        &Arc::default(),
        false,
        false,
    )?;
    let declared_pure: Vec<String> = session::recorded_pins(&found)
        .map_err(|e| CliError::input(e.to_string()))?
        .into_iter()
        .filter(|p| p.effect == "pure")
        .map(|p| p.name)
        .collect();
    let events = oracle_runtime::recorded::Recorded::read(&found.paths.log)?;
    let root = std::env::current_dir()
        .and_then(|p| p.canonicalize())
        .unwrap_or_default();
    let state = oracle_core::State::new();
    // Calls by (step, attempt): the input, then the recorded output.
    let mut pending: BTreeMap<(String, u64), Value> = BTreeMap::new();
    // Per tool: calls audited, calls whose output varied, the first varying step.
    let mut per_tool: BTreeMap<String, (u64, u64, Option<String>)> = BTreeMap::new();
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
                let Some(t) = registry.get(&r.tool) else {
                    continue;
                };
                let entry = per_tool.entry(r.tool.clone()).or_default();
                entry.0 += 1;
                let cx = context(&r.step, r.attempt, &state, &root, &t.decl);
                let varied = (0..a.times).any(|_| {
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
    let varying: Vec<&String> = per_tool
        .iter()
        .filter(|(_, v)| v.1 > 0)
        .map(|(k, _)| k)
        .collect();
    if a.json {
        let tools: Vec<Value> = per_tool
            .iter()
            .map(|(name, (calls, varied, step))| {
                json!({"tool": name, "calls": calls, "varied": varied, "first_step": step})
            })
            .collect();
        crate::out::json(&json!({
            "ok": varying.is_empty(),
            "run": found.id,
            "times": a.times,
            "tools": tools,
        }))?;
    } else {
        if per_tool.is_empty() {
            outln!("audit    {}: no calls to declared pure tools", found.id)?;
        }
        for (name, (calls, varied, step)) in &per_tool {
            if *varied == 0 {
                outln!(
                    "same     {name}: {calls} calls, each gave its recorded output {} more times",
                    a.times
                )?;
            } else {
                outln!(
                    "VARIES   {name}: {varied} of {calls} calls gave another output (first at step `{}`): declared pure, it is not; declare it `effect = \"impure\"`",
                    step.as_deref().unwrap_or("?")
                )?;
            }
        }
    }
    Ok(if varying.is_empty() {
        exit::OK
    } else {
        exit::FAILED
    })
}
