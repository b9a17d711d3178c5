//! `oracle tools list | check | call | audit`, and loading declared tools (`--tools DIR`, a
//! plan's `tools "DIR"` lines, the directories a run keeps) into the registry of `run`,
//! `resume`, `replay` and `plan check`.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use oracle_host::Problem;
use oracle_host::tools::{self as host_tools, RunTools, Toolbox};
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

/// A failure to load a recorded run's tools, as the command reports it.
pub fn run_tools_error(e: RunTools) -> CliError {
    match e {
        RunTools::Problems(p) => problems_error(&p),
        RunTools::Host(e) => crate::run::host_error(e, false),
        RunTools::Changed { tool, text } => {
            let message = format!(
                "{text}: nothing was run; give the run's tools (--tools DIR), or pass --allow-tool-change to check the run against the changed tool"
            );
            CliError {
                code: exit::INPUT,
                json: Some(exit::error_json(
                    Some(json!({"kind": "tool_changed", "tool": tool})),
                    exit::INPUT,
                    &message,
                )),
                message,
                quiet: false,
            }
        }
    }
}

/// Loads the tools a recorded run uses (`oracle_host::tools::for_run`), warning when a
/// changed tool was allowed.
pub fn for_run(
    home: &Path,
    run: &str,
    extra: &[PathBuf],
    start_servers: bool,
    allow_change: bool,
) -> Result<host_tools::Replaying, CliError> {
    let tools = host_tools::for_run(home, run, extra, start_servers, allow_change)
        .map_err(run_tools_error)?;
    if let Some(changed) = &tools.changed {
        eprintln!(
            "warning: {changed}; going on (--allow-tool-change): the run diverges at the first output that changed, if any"
        );
    }
    Ok(tools)
}

pub fn run(home: &Path, a: ToolsArgs) -> Result<u8, CliError> {
    match a.command {
        ToolsCommand::List(a) => list(a),
        ToolsCommand::Check(a) => check(a),
        ToolsCommand::Call(a) => call(a),
        ToolsCommand::Audit(a) => audit(home, a),
    }
}

/// The built-ins and the tools of `dirs` (MCP servers started); a manifest that does not load
/// is named, and refused only if its tools are called.
fn loaded(dirs: &[PathBuf]) -> Result<Toolbox, CliError> {
    let toolbox = Toolbox::load(&absolute(dirs)).map_err(|p| problems_error(&p))?;
    for p in toolbox.problems() {
        eprintln!("warning: {p} (its tools are not loaded)");
    }
    Ok(toolbox)
}

fn list(a: ListArgs) -> Result<u8, CliError> {
    let rows: Vec<Value> = loaded(&a.tools.dirs)?.rows();
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
    let result = host_tools::check(&dirs);
    let host_tools::Checked { rows, broken } = match result {
        Ok(t) => t,
        Err(problems) => {
            let err = problems_error(&problems);
            if a.json {
                crate::out::json(&json!({"ok": false, "error": err.error_value()}))?;
            }
            return Err(err);
        }
    };
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

fn call(a: CallArgs) -> Result<u8, CliError> {
    let input: Value = serde_json::from_str(&a.input)
        .map_err(|e| CliError::input(format!("--input: not JSON: {e}")))?;
    let mut dirs = a.tools.dirs.clone();
    dirs.dedup();
    let called = loaded(&dirs)?
        .call(&a.name, &input)
        .map_err(|e| CliError::input(e.to_string()))?;
    let host_tools::Called {
        output,
        error,
        fuel,
    } = called;
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
    let audit = host_tools::audit(home, &a.run, &a.tools.dirs, a.times).map_err(|e| match e {
        host_tools::AuditError::Session(e) => CliError::input(e.to_string()),
        host_tools::AuditError::Tools(e) => run_tools_error(e),
        host_tools::AuditError::Store(e) => CliError::from(e),
    })?;
    let (found_id, per_tool) = (audit.run, audit.per_tool);
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
            "run": found_id,
            "times": a.times,
            "tools": tools,
        }))?;
    } else {
        if per_tool.is_empty() {
            outln!("audit    {}: no calls to declared pure tools", found_id)?;
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
