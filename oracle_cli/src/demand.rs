//! `oracle demand`: the demand trace of a recorded run and the faults of working-set policies
//! against the oracle, as a table, JSON or an SVG chart (the analysis is `oracle_demand`; which
//! policies a `--policy` list names, and running plugged ones, is the host's:
//! `oracle_host::demand`). `--pareto` sweeps the budgets of `PARETO_BUDGETS` and draws faults
//! and tokens against budget. The charts are drawn with `plotters`, SVG backend and line series
//! only: the one place in the workspace that draws.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use oracle_core::{Event, EventKind};
use oracle_demand::{Config, DemandTrace, Dependencies, Policy, Report, Sources};
use oracle_host::demand::Named;
use serde_json::{Value, json};

use crate::exit::{self, CliError};

/// Largest default budget: 2^16 events.
const DEFAULT_BUDGET_MAX: u64 = 1 << 16;

#[derive(Args, Debug)]
pub struct DemandArgs {
    /// A run directory, a run id, or a log file.
    target: PathBuf,
    /// Lookahead, in events: Demand(t) is what events t .. t+H-1 need from before t.
    #[arg(long, value_name = "H")]
    horizon: u64,
    /// One working-set size, in events.
    #[arg(long, value_name = "B", conflicts_with = "budgets")]
    budget: Option<u64>,
    /// Several working-set sizes. Default: 1, 2, 4, ... up to the first power of two at least
    /// the number of events (at most 65536).
    #[arg(long, value_name = "B,B,...", value_delimiter = ',')]
    budgets: Vec<u64>,
    /// Policies to evaluate: recent, lru, causal, oracle, and plugged ones: `wasm:FILE` (a
    /// WebAssembly module, `.wat` text or binary) or `exec:PROGRAM [ARGS]` (a program), graded
    /// alike (docs/FORMAT.md, "Pluggable policies"). The oracle is evaluated in any case: every
    /// gap is measured against it.
    #[arg(
        long = "policy",
        value_name = "P,P,...",
        value_delimiter = ',',
        default_value = "recent,lru,causal,oracle"
    )]
    policies: Vec<String>,
    /// Sweep the budgets 1, 2, 3, 4, 6, 8, 12, ... (up to the first at least the number of
    /// events), print faults and tokens for every policy, and draw both against budget to
    /// this SVG file.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["budget", "budgets", "svg"])]
    pareto: Option<PathBuf>,
    /// Sources of dependencies: parents, tools, state, memory, paths.
    #[arg(
        long,
        value_name = "S,S,...",
        default_value = "parents,tools,state,memory,paths"
    )]
    sources: Sources,
    /// Print one JSON object instead of a table (docs/FORMAT.md).
    #[arg(long)]
    json: bool,
    /// Also draw faults against budget, one line per policy, to this SVG file.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Also print every event's dependencies and demand set.
    #[arg(long)]
    trace: bool,
}

/// `PARETO_BUDGETS` up to the first at least `events` (at least one budget).
fn pareto_budgets(events: u64) -> Vec<u64> {
    let all = oracle_demand::limits::PARETO_BUDGETS;
    let end = all
        .iter()
        .position(|&b| b >= events)
        .map_or(all.len(), |i| i + 1);
    all[..end].to_vec()
}

/// Powers of two from 1 to the first one at least `events`, at most [`DEFAULT_BUDGET_MAX`].
fn default_budgets(events: u64) -> Vec<u64> {
    let mut out = vec![1];
    let mut b = 1;
    while b < events && b < DEFAULT_BUDGET_MAX {
        b *= 2;
        out.push(b);
    }
    out
}

pub fn run(home: &Path, a: DemandArgs) -> Result<u8, CliError> {
    if a.horizon == 0 {
        return Err(CliError::input("--horizon must be at least 1"));
    }
    let host_error = |e| crate::run::host_error(e, a.json);
    let named = oracle_host::demand::name_policies(&a.policies).map_err(host_error)?;
    let paths = crate::resolve(home, &a.target)?;
    let events = oracle_host::inspect::events(&paths.log)?;
    let n = events.len() as u64;
    let budgets = match (a.budget, a.budgets.is_empty()) {
        _ if a.pareto.is_some() => pareto_budgets(n),
        (Some(b), _) => vec![b],
        (None, false) => a.budgets.clone(),
        (None, true) => default_budgets(n),
    };
    let config = Config {
        horizon: a.horizon,
        sources: a.sources,
        policies: named.builtins.clone(),
        budgets,
    };
    let input = |e: oracle_demand::DemandError| CliError::input(e.to_string());
    let deps = Dependencies::extract(&events, config.sources).map_err(input)?;
    let trace = DemandTrace::new(&deps, config.horizon).map_err(input)?;
    let report = grade(&deps, &trace, &config, &named, a.json)?;
    let shown = a.target.display().to_string();
    if a.json {
        let mut v = report.to_value();
        if let Value::Object(m) = &mut v {
            m.insert("log".into(), json!(shown));
            if a.trace {
                m.insert("trace".into(), trace_json(&events, &deps, &trace));
            }
        }
        crate::out::json(&v)?;
    } else {
        let mut out = String::new();
        if a.trace {
            write_trace(&mut out, &events, &deps, &trace);
        }
        write_table(&mut out, &shown, &report);
        out!("{out}")?;
    }
    let drawn = match (&a.svg, &a.pareto) {
        (Some(file), _) => Some((file, svg(&report, &shown))),
        (None, Some(file)) => Some((file, pareto_svg(&report, &shown))),
        (None, None) => None,
    };
    if let Some((file, svg)) = drawn {
        let svg = svg.map_err(|e| CliError::input(format!("drawing: {e}")))?;
        std::fs::write(file, svg)
            .map_err(|e| CliError::input(format!("{}: cannot write: {e}", file.display())))?;
        if !a.json {
            outln!("svg      {}", file.display())?;
        }
    }
    Ok(exit::OK)
}

/// The report, through the host when plugged policies are named (it loads and runs them).
fn grade(
    deps: &Dependencies,
    trace: &DemandTrace,
    config: &Config,
    named: &Named,
    json_out: bool,
) -> Result<Report, CliError> {
    // Plugged policies' relative paths are the working directory's.
    let cwd = match named.plugged.is_empty() {
        true => PathBuf::from("."),
        false => std::env::current_dir()
            .map_err(|e| CliError::input(format!("the working directory: {e}")))?,
    };
    oracle_host::demand::grade(deps, trace, config, named, &cwd)
        .map_err(|e| crate::run::host_error(e, json_out))
}

fn kind_of(events: &[Event], seq: u64) -> EventKind {
    // Invariant: the trace has one row per event, so every seq shown indexes `events`.
    events[seq as usize].kind
}

fn trace_json(events: &[Event], deps: &Dependencies, trace: &DemandTrace) -> Value {
    let rows: Vec<Value> = (0..trace.events())
        .map(|t| {
            json!({
                "seq": t,
                "kind": kind_of(events, t).as_str(),
                "deps": deps.of(t),
                "demand": trace.of(t),
            })
        })
        .collect();
    Value::Array(rows)
}

fn list(items: &[u64]) -> String {
    let items: Vec<String> = items.iter().map(u64::to_string).collect();
    format!("[{}]", items.join(", "))
}

fn write_trace(out: &mut String, events: &[Event], deps: &Dependencies, trace: &DemandTrace) {
    let _ = writeln!(out, "{:>6}  {:<20}  {:<24}  demand", "seq", "kind", "deps");
    for t in 0..trace.events() {
        let _ = writeln!(
            out,
            "{:>6}  {:<20}  {:<24}  {}",
            t,
            kind_of(events, t).as_str(),
            list(deps.of(t)),
            list(trace.of(t))
        );
    }
    out.push('\n');
}

/// Basis points as a percentage with two decimals.
fn percent(bp: u64) -> String {
    format!("{}.{:02}%", bp / 100, bp % 100)
}

fn write_table(out: &mut String, shown: &str, r: &Report) {
    let by_source: Vec<String> = r
        .by_source
        .iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    let _ = writeln!(out, "log       {shown}");
    let _ = writeln!(
        out,
        "events    {} (horizon {}; sources {})",
        r.events, r.horizon, r.sources
    );
    let _ = writeln!(
        out,
        "deps      {} ({})",
        r.dependencies,
        by_source.join(", ")
    );
    let _ = writeln!(
        out,
        "demand    {} in all, at most {} for one event",
        r.demand_total, r.demand_max
    );
    let _ = writeln!(
        out,
        "requests  {} per policy and budget ({} compulsory: each event's arrival)",
        r.requests, r.events
    );
    out.push('\n');
    // As wide as the longest name: a plugged policy is named by its file or program.
    let w = r
        .policies
        .iter()
        .map(|p| r.name(*p).len())
        .max()
        .unwrap_or(0);
    let w = w.max(8);
    let _ = writeln!(
        out,
        "{:<w$}  {:>8}  {:>10}  {:>8}  {:>10}  {:>10}",
        "policy", "budget", "faults", "rate", "tokens", "gap"
    );
    for (i, row) in r.rows.iter().enumerate() {
        let o = &row.outcome;
        // A blank line between budgets: each block compares the policies at one budget.
        if i > 0 && r.rows[i - 1].outcome.budget != o.budget {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "{:<w$}  {:>8}  {:>10}  {:>8}  {:>10}  {:>10}",
            r.name(o.policy),
            o.budget,
            o.faults,
            percent(o.fault_rate_bp()),
            o.tokens,
            row.gap
        );
    }
}

/// One color per policy, the oracle in black.
fn color(p: Policy) -> plotters::style::RGBColor {
    use plotters::style::RGBColor;
    match p {
        Policy::Recent => RGBColor(214, 39, 40),
        Policy::Lru => RGBColor(31, 119, 180),
        Policy::Causal => RGBColor(44, 160, 44),
        Policy::Oracle => RGBColor(0, 0, 0),
        Policy::Plugged(i) => PLUGGED_COLORS[usize::from(i) % PLUGGED_COLORS.len()],
    }
}

/// Colors of plugged policies, in the order named (then again).
const PLUGGED_COLORS: [plotters::style::RGBColor; 4] = [
    plotters::style::RGBColor(148, 103, 189),
    plotters::style::RGBColor(255, 127, 14),
    plotters::style::RGBColor(23, 190, 207),
    plotters::style::RGBColor(140, 86, 75),
];

/// What a chart draws against budget.
#[derive(Clone, Copy)]
enum Metric {
    Faults,
    Tokens,
}

impl Metric {
    fn of(self, o: &oracle_demand::Outcome) -> u64 {
        match self {
            Metric::Faults => o.faults,
            Metric::Tokens => o.tokens,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Metric::Faults => "faults",
            Metric::Tokens => "tokens read",
        }
    }
}

type Drawn = Result<(), Box<dyn std::error::Error>>;

/// One chart on `area`: `metric` against budget (log scale), one line per policy, a legend.
fn chart<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    r: &Report,
    caption: String,
    metric: Metric,
) -> Drawn
where
    DB::ErrorType: 'static,
{
    use plotters::prelude::*;
    let x_min = r.budgets.first().copied().unwrap_or(1);
    let x_max = r.budgets.last().copied().unwrap_or(1).max(x_min + 1);
    let y_max = r.rows.iter().map(|row| metric.of(&row.outcome)).max();
    let y_max = y_max.unwrap_or(0);
    let y_max = y_max + y_max / 20 + 1;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((x_min..x_max).log_scale(), 0u64..y_max)?;
    // Log-scale x grids repeat lines; ticks and labels are enough there.
    chart
        .configure_mesh()
        .disable_x_mesh()
        .bold_line_style(BLACK.mix(0.15))
        .light_line_style(BLACK.mix(0.04))
        .x_desc("budget (events kept, log scale)")
        .y_desc(metric.name())
        .draw()?;
    for &p in &r.policies {
        let c = color(p);
        let points: Vec<(u64, u64)> = r
            .rows
            .iter()
            .filter(|row| row.outcome.policy == p)
            .map(|row| (row.outcome.budget, metric.of(&row.outcome)))
            .collect();
        let width = if p == Policy::Oracle { 3 } else { 2 };
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(width)))?
            .label(r.name(p))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(width))
            });
        chart.draw_series(points.iter().map(|&pt| Circle::new(pt, 3, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Faults against budget (log scale), one line per policy, with a legend.
fn svg(r: &Report, shown: &str) -> Result<String, Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let caption = format!(
            "faults by working-set budget: {shown}, horizon {}",
            r.horizon
        );
        chart(&root, r, caption, Metric::Faults)?;
        root.present()?;
    }
    Ok(out)
}

/// The Pareto view: faults (above) and tokens read (below) against budget, every policy.
fn pareto_svg(r: &Report, shown: &str) -> Result<String, Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (800, 900)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(450);
        for (area, metric) in [(&top, Metric::Faults), (&bottom, Metric::Tokens)] {
            let caption = format!(
                "{} by working-set budget: {shown}, horizon {}",
                metric.name(),
                r.horizon
            );
            chart(area, r, caption, metric)?;
        }
        root.present()?;
    }
    Ok(out)
}
