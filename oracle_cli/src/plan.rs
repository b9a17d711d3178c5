//! `oracle plan check | graph | hash | fmt | tools`: the plan language from the command line.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use ariadne::{Config, IndexType, Label, Report, ReportKind, Source};
use clap::{Args, Subcommand, ValueEnum};
use oracle_plan::compile::CompiledPlan;
use oracle_plan::diagnostic::{Diagnostic, LineIndex, Severity};
use serde_json::json;

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(subcommand)]
    command: PlanCommand,
}

#[derive(Subcommand, Debug)]
enum PlanCommand {
    /// Parse and compile a plan against the built-in tools; print every problem found, with
    /// line:column, a source snippet and a hint. Exit 0 clean, 2 if there are errors.
    Check {
        plan: PathBuf,
        /// Diagnostics as one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Show the step graph: levels of independent steps and their dependencies.
    Graph {
        plan: PathBuf,
        #[arg(long, value_enum, default_value_t = GraphFormat::Text)]
        format: GraphFormat,
    },
    /// Print the plan hash: unchanged by whitespace, comments and argument order; changed by
    /// any change to what the plan does.
    Hash {
        plan: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Print a plan in canonical layout, comments kept (docs/PLAN.md, "Editor support"); the
    /// plan hash never changes. `--write` rewrites the files in place (atomically), `--check`
    /// only names those not canonical. Exit 0 canonical (or written), 1 with `--check` when a
    /// file is not canonical, 2 when one does not parse: its diagnostics are printed as `plan
    /// check` prints them and it is left as it is.
    Fmt {
        #[arg(required = true)]
        plans: Vec<PathBuf>,
        /// Change nothing: exit 1 and name each plan that is not canonical.
        #[arg(long, conflicts_with = "write")]
        check: bool,
        /// Rewrite the plans that are not canonical, in place.
        #[arg(long)]
        write: bool,
        /// One JSON object on stdout: each file, whether it was canonical or written.
        #[arg(long)]
        json: bool,
    },
    /// List the built-in tools: arguments, types and the capability each call needs.
    Tools {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum GraphFormat {
    /// Levels and dependencies, for reading in a terminal.
    Text,
    /// Graphviz DOT (`dot -Tsvg`).
    Dot,
    /// Steps, order and levels as JSON.
    Json,
}

pub fn run(a: PlanArgs) -> Result<u8, CliError> {
    match a.command {
        PlanCommand::Check { plan, json } => {
            let (src, compiled, diags) = load(&plan)?;
            if json {
                let list = diagnostics_json(&src, &diags);
                let mut doc = json!({
                    "ok": compiled.is_some(),
                    "path": plan,
                    "hash": compiled.as_ref().map(|c| c.hash),
                    "diagnostics": list,
                });
                if compiled.is_none()
                    && let serde_json::Value::Object(m) = &mut doc
                {
                    let errors = diags
                        .iter()
                        .filter(|d| d.severity == oracle_plan::diagnostic::Severity::Error)
                        .count();
                    let first = list.first();
                    m.insert(
                        "error".into(),
                        crate::exit::error_json(
                            Some(json!({
                                "kind": "plan",
                                "path": plan,
                                "line": first.map(|d| d["line"].clone()),
                                "col": first.map(|d| d["column"].clone()),
                            })),
                            crate::exit::INPUT,
                            &format!(
                                "{}: {errors} error{} in the plan",
                                plan.display(),
                                if errors == 1 { "" } else { "s" }
                            ),
                        ),
                    );
                }
                crate::out::json(&doc)?;
            } else {
                print_diagnostics(&plan, &src, &diags);
                if let Some(c) = &compiled {
                    outln!(
                        "ok  {} (plan {} version {}, {} steps, hash {})",
                        plan.display(),
                        c.name,
                        c.version,
                        c.steps.len(),
                        c.hash
                    )?;
                }
            }
            Ok(if compiled.is_some() {
                exit::OK
            } else {
                exit::INPUT
            })
        }
        PlanCommand::Graph { plan, format } => {
            let c = compiled_or_report(&plan)?;
            match format {
                GraphFormat::Text => out!("{}", graph_text(&c))?,
                GraphFormat::Dot => out!("{}", graph_dot(&c))?,
                GraphFormat::Json => crate::out::json(&graph_json(&c))?,
            }
            Ok(exit::OK)
        }
        PlanCommand::Hash { plan, json } => {
            let c = compiled_or_report(&plan)?;
            if json {
                crate::out::json(&json!({"plan": c.name, "version": c.version, "hash": c.hash}))?;
            } else {
                outln!("{}", c.hash)?;
            }
            Ok(exit::OK)
        }
        PlanCommand::Fmt {
            plans,
            check,
            write,
            json,
        } => {
            let mode = match (check, write) {
                (true, _) => crate::plan_fmt::Mode::Check,
                (false, true) => crate::plan_fmt::Mode::Write,
                (false, false) => crate::plan_fmt::Mode::Print,
            };
            crate::plan_fmt::run(&plans, mode, json)
        }
        PlanCommand::Tools { json } => {
            let catalogue = oracle_host::tools::builtin_catalogue();
            if json {
                crate::out::json(
                    &serde_json::to_value(catalogue.tools().collect::<Vec<_>>())
                        .unwrap_or_default(),
                )?;
            } else {
                for t in catalogue.tools() {
                    let needs = t.capability.as_ref().map_or(String::new(), |c| {
                        let scope = match &c.scope {
                            oracle_plan::ScopeFrom::Arg(a) => format!("<{a}>"),
                            oracle_plan::ScopeFrom::Fixed(s) => s.clone(),
                        };
                        format!("  needs {}:{}:{scope}", c.domain, c.action)
                    });
                    outln!(
                        "{:<14} {{ {} }}{needs}\n{:<14} {}",
                        t.name,
                        t.args_text(),
                        "",
                        t.description
                    )?;
                }
            }
            Ok(exit::OK)
        }
    }
}

pub(crate) fn load(
    path: &Path,
) -> Result<(String, Option<CompiledPlan>, Vec<Diagnostic>), CliError> {
    crate::files::check_plan(path, false)?;
    let src = oracle_host::plans::read(path).map_err(|e| CliError::input(e.to_string()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let sources = oracle_host::plans::sources(dir, &src);
    // The plan's own `tools "DIR"` lines declare tools it may call.
    let catalogue = oracle_host::tools::catalogue(&crate::tools::plan_dirs(path, &[]), false)
        .map_err(|p| crate::tools::problems_error(&p))?;
    let (compiled, diags) = oracle_plan::check_with(&src, &catalogue, &sources);
    Ok((src, compiled, diags))
}

/// The compiled plan, or the diagnostics printed and exit 2.
fn compiled_or_report(path: &Path) -> Result<CompiledPlan, CliError> {
    let (src, compiled, diags) = load(path)?;
    print_diagnostics(path, &src, &diags);
    compiled.ok_or_else(|| {
        let n = diags
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        CliError::input(format!(
            "{}: {n} error{} (see above)",
            path.display(),
            if n == 1 { "" } else { "s" }
        ))
    })
}

/// Renders every diagnostic to stderr: coloured on a terminal, plain when piped.
pub fn print_diagnostics(path: &Path, src: &str, diags: &[Diagnostic]) {
    let color = crate::out::colored(std::io::stderr().is_terminal());
    let text = Rendering::new(&path.display().to_string(), src, color);
    for d in diags {
        eprint!("{}", text.render(d));
    }
}

/// Longest source line shown in a snippet (characters). A longer one (generated plans, a
/// hundred thousand nested brackets) would flood the terminal: the diagnostic is shown without it.
const SNIPPET_LINE_CHARS_MAX: u64 = 300;

/// The diagnostics of one text as text: its line index and ariadne's copy of its lines are
/// built once for all of them (built per diagnostic, rendering was quadratic in their number).
pub struct Rendering<'a> {
    path: String,
    lines: LineIndex<'a>,
    source: Source<&'a str>,
    color: bool,
}

impl<'a> Rendering<'a> {
    pub fn new(path: &str, src: &'a str, color: bool) -> Rendering<'a> {
        Rendering {
            path: path.to_owned(),
            lines: LineIndex::new(src),
            source: Source::from(src),
            color,
        }
    }

    /// One diagnostic with a source snippet and carets.
    pub fn render(&self, d: &Diagnostic) -> String {
        let path = self.path.as_str();
        let (_, shown) = self.lines.line_of(d.span.start);
        if shown > SNIPPET_LINE_CHARS_MAX {
            let (l, c) = self.lines.line_col(d.span.start);
            let mut out = format!(
                "[{}] {}: {}\n  at {path}:{l}:{c} ({}: a line of {shown} characters, not shown)\n",
                d.code,
                match d.severity {
                    Severity::Error => "Error",
                    Severity::Warning => "Warning",
                },
                d.message,
                d.label
            );
            if let Some(h) = &d.hint {
                out.push_str(&format!("  help: {h}\n"));
            }
            return out;
        }
        let mut out = Vec::new();
        match self.report(d).write((path, &self.source), &mut out) {
            Ok(()) => String::from_utf8_lossy(&out).into_owned(),
            // Rendering into memory cannot fail; keep the plain facts if it ever does.
            Err(_) => {
                let (l, c) = self.lines.line_col(d.span.start);
                format!("{path}:{l}:{c}: error[{}]: {}\n", d.code, d.message)
            }
        }
    }

    fn report(&self, d: &Diagnostic) -> Report<'_, (&str, std::ops::Range<usize>)> {
        let path = self.path.as_str();
        let range = |s: oracle_plan::ast::Span| (s.start as usize)..(s.end.max(s.start) as usize);
        let kind = match d.severity {
            Severity::Error => ReportKind::Error,
            Severity::Warning => ReportKind::Warning,
        };
        let config = Config::default()
            .with_color(self.color)
            .with_index_type(IndexType::Byte);
        let mut report = Report::build(kind, (path, range(d.span)))
            .with_config(config)
            .with_code(d.code)
            .with_message(&d.message)
            .with_label(
                Label::new((path, range(d.span)))
                    .with_message(&d.label)
                    .with_order(0),
            );
        for (i, (span, label)) in d.related.iter().enumerate() {
            report = report.with_label(
                Label::new((path, range(*span)))
                    .with_message(label)
                    .with_order(i as i32 + 1),
            );
        }
        if let Some(h) = &d.hint {
            report = report.with_help(h);
        }
        report.finish()
    }
}

/// Every diagnostic of `src` as `--json` prints it, with one line index of the text for all
/// their positions (one scan of the text per diagnostic was quadratic).
pub(crate) fn diagnostics_json(src: &str, diags: &[Diagnostic]) -> Vec<serde_json::Value> {
    let lines = LineIndex::new(src);
    diags.iter().map(|d| d.to_json_at(&lines)).collect()
}

fn graph_text(c: &CompiledPlan) -> String {
    let g = oracle_plan::graph::of(c);
    let mut out = format!(
        "plan {} version {} ({} steps, hash {})\n",
        g.plan,
        g.version,
        g.steps.len(),
        g.hash.short()
    );
    let after = |deps: &[String]| {
        if deps.is_empty() {
            String::new()
        } else {
            format!("  <- {}", deps.join(", "))
        }
    };
    for (n, level) in g.levels.iter().enumerate() {
        out.push_str(&format!("level {n}\n"));
        for s in level.iter().filter_map(|&i| g.steps.get(i)) {
            out.push_str(&format!("  {:<16} {}{}\n", s.name, s.what, after(&s.deps)));
            // A loop's body: its steps by level, indented under it, as `STEP[i]`.
            if let Some(b) = &s.body {
                for (m, inner) in b.graph.levels.iter().enumerate() {
                    for t in inner.iter().filter_map(|&j| b.graph.steps.get(j)) {
                        out.push_str(&format!(
                            "    {:<14} {} (body level {m}){}\n",
                            b.shown(&s.name, &t.name),
                            t.what,
                            after(&t.deps)
                        ));
                    }
                }
            }
        }
    }
    out
}

fn graph_dot(c: &CompiledPlan) -> String {
    let q = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    let mut out = format!(
        "digraph {} {{\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n",
        q(&c.name)
    );
    for &i in &c.order {
        let s = &c.steps[i as usize];
        out.push_str(&format!(
            "  {} [label={}];\n",
            q(&s.name),
            q(&format!("{}\n{}", s.name, s.call.tool))
        ));
    }
    for &i in &c.order {
        let s = &c.steps[i as usize];
        for &d in &s.deps {
            out.push_str(&format!(
                "  {} -> {};\n",
                q(&c.steps[d as usize].name),
                q(&s.name)
            ));
        }
    }
    out.push_str("}\n");
    out
}

fn graph_json(c: &CompiledPlan) -> serde_json::Value {
    let g = oracle_plan::graph::of(c);
    let name = |i: &usize| g.steps.get(*i).map_or("", |s| s.name.as_str());
    let steps: Vec<_> = g
        .steps
        .iter()
        .map(|s| json!({"name": s.name, "tool": s.tool, "deps": s.deps, "level": s.level}))
        .collect();
    json!({
        "plan": g.plan,
        "version": g.version,
        "hash": g.hash,
        "steps": steps,
        "order": g.order.iter().map(name).collect::<Vec<_>>(),
        "levels": g.levels.iter().map(|l| l.iter().map(name).collect::<Vec<_>>()).collect::<Vec<_>>(),
    })
}
