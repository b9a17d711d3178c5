//! End to end: `oracle demand` on the fixture runs (fixtures/demand/): the fixture logs are
//! reproducible runs of the plans in fixtures/plans/demand/, the JSON reports match their golden
//! files byte for byte, the table and the SVG chart are what a person expects, and bad input
//! and damaged logs get their exit codes.
//!
//! `UPDATE_GOLDEN=1 cargo test -p oracle_cli --test cli demand::` rewrites the fixture logs and the
//! golden reports (then re-check the hand-checked dependencies in oracle_demand/tests/demand.rs).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{oracle, oracle_in, root};

fn update() -> bool {
    std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1")
}

/// Compares `actual` with the golden file, or rewrites it under `UPDATE_GOLDEN=1`.
fn golden(path: &Path, actual: &[u8]) {
    if update() {
        fs::write(path, actual).unwrap();
        return;
    }
    let expected = fs::read(path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} differs from what was produced (UPDATE_GOLDEN=1 rewrites it after a deliberate change)",
        path.display()
    );
}

/// How each fixture log is made: the plan, then the commands that finish its run.
fn fixture_runs() -> Vec<(&'static str, &'static str, Vec<Vec<&'static str>>)> {
    vec![
        (
            "tools",
            "demand_tools-1",
            vec![vec![
                "resume",
                "demand_tools-1",
                "--step",
                "confirm",
                "--value",
                "\"yes\"",
            ]],
        ),
        (
            "memory",
            "demand_memory-1",
            vec![vec![
                "adjudicate",
                "demand_memory-1",
                "adj-15",
                "--verdict",
                "deny",
                "--evidence",
                "external_first_hand",
                "--resume",
            ]],
        ),
    ]
}

#[test]
fn fixture_logs_are_reproducible_runs_of_the_plans() {
    for (name, run, then) in fixture_runs() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let home = home.to_str().unwrap();
        let plan: PathBuf = root().join(format!("fixtures/plans/demand/{name}.plan"));
        let (code, _, err) =
            oracle_in(dir.path(), &["--home", home, "run", plan.to_str().unwrap()]);
        assert_eq!(code, 3, "{name}: the run suspends first: {err}");
        for args in then {
            let mut full = vec!["--home", home];
            full.extend(args);
            let (code, _, err) = oracle_in(dir.path(), &full);
            assert_eq!(code, 0, "{name}: {full:?}: {err}");
        }
        let log = dir.path().join(format!("home/runs/{run}/events.jsonl"));
        golden(
            &root().join(format!("fixtures/demand/{name}.jsonl")),
            &fs::read(&log).unwrap(),
        );
        // A run id resolves like a log file does.
        let (code, by_id, err) = oracle_in(
            dir.path(),
            &["--home", home, "demand", run, "--horizon", "4", "--json"],
        );
        assert_eq!(code, 0, "{err}");
        let by_id: serde_json::Value = serde_json::from_str(&by_id).unwrap();
        assert_eq!(by_id["log"], run);
    }
}

#[test]
fn json_reports_match_their_golden_files() {
    for name in ["tools", "memory"] {
        let log = format!("fixtures/demand/{name}.jsonl");
        let (code, out, err) = oracle(&[
            "demand",
            &log,
            "--horizon",
            "4",
            "--budgets",
            "1,2,4,8,16,32,64",
            "--json",
            "--trace",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(out.ends_with('\n') && out.lines().count() == 1, "one line");
        golden(
            &root().join(format!("fixtures/demand/{name}.report.json")),
            out.as_bytes(),
        );
        if name == "tools" {
            // The chart in the README is this run's.
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("demand.svg");
            let (code, _, err) = oracle(&[
                "demand",
                &log,
                "--horizon",
                "4",
                "--svg",
                file.to_str().unwrap(),
            ]);
            assert_eq!(code, 0, "{err}");
            golden(&root().join("docs/demand.svg"), &fs::read(&file).unwrap());
        }
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["log"], log.as_str());
        let n = v["events"].as_u64().unwrap();
        assert_eq!(v["trace"].as_array().unwrap().len() as u64, n);
        // Every result: compulsory = events, the oracle's gap 0, the others' never negative.
        for r in v["results"].as_array().unwrap() {
            assert_eq!(r["compulsory"].as_u64(), Some(n));
            let gap = r["gap"].as_i64().unwrap();
            if r["policy"] == "oracle" {
                assert_eq!(gap, 0);
            } else {
                assert!(gap >= 0, "{r}");
            }
        }
    }
}

#[test]
fn table_lists_every_policy_and_budget_with_gaps() {
    let (code, out, err) = oracle(&[
        "demand",
        "fixtures/demand/tools.jsonl",
        "--horizon",
        "4",
        "--budgets",
        "4,2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("log       fixtures/demand/tools.jsonl\n"),
        "{out}"
    );
    assert!(
        out.contains("events    56 (horizon 4; sources parents,tools,state,memory,paths)"),
        "{out}"
    );
    assert!(
        out.contains("deps      86 (parents 75, tools 28, state 2, memory 0, paths 2)"),
        "{out}"
    );
    let header = out.lines().find(|l| l.starts_with("policy")).unwrap();
    let cols: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(cols, ["policy", "budget", "faults", "rate", "gap"]);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip_while(|l| !l.starts_with("policy"))
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    // Budget-major, ascending budgets, policies in the default order.
    let keys: Vec<(&str, &str)> = rows.iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(
        keys,
        [
            ("recent", "2"),
            ("lru", "2"),
            ("causal", "2"),
            ("oracle", "2"),
            ("recent", "4"),
            ("lru", "4"),
            ("causal", "4"),
            ("oracle", "4"),
        ]
    );
    for r in &rows {
        assert!(r[3].ends_with('%'), "{r:?}");
        if r[0] == "oracle" {
            assert_eq!(r[4], "0");
        }
    }

    // One policy asked for: the oracle is still evaluated (gaps are measured against it).
    let (code, out, _) = oracle(&[
        "demand",
        "fixtures/demand/tools.jsonl",
        "--horizon",
        "2",
        "--budget",
        "3",
        "--policy",
        "lru",
    ]);
    assert_eq!(code, 0);
    let policies: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("policy"))
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(policies, ["lru", "oracle"]);
}

#[test]
fn trace_prints_dependencies_and_demand_per_event() {
    let (code, out, err) = oracle(&[
        "demand",
        "fixtures/demand/memory.jsonl",
        "--horizon",
        "1",
        "--budget",
        "8",
        "--trace",
        "--sources",
        "memory",
    ]);
    assert_eq!(code, 0, "{err}");
    // Event 30 is memory.history: the three claims it lists (hand-checked in oracle_core).
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("30 "))
        .unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], "tool_returned");
    let (deps, demand) = row.split_once(']').unwrap();
    assert!(deps.ends_with("[3, 7, 15"), "{row}");
    assert_eq!(demand.trim(), "[3, 7, 15]", "{row}");
    assert!(out.contains("sources memory)"), "{out}");
}

/// Checks that `svg` is one well-formed element tree: every tag closed in order.
fn balanced(svg: &str) -> Result<(), String> {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        let close = rest[open..].find('>').ok_or("a tag is never closed")? + open;
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        let name = |t: &str| {
            t.split(|c: char| c.is_whitespace() || c == '/')
                .next()
                .unwrap_or("")
                .to_owned()
        };
        if let Some(end) = tag.strip_prefix('/') {
            let top = stack.pop().ok_or(format!("</{end}> closes nothing"))?;
            if top != name(end) {
                return Err(format!("</{end}> closes <{top}>"));
            }
        } else if !tag.ends_with('/') {
            stack.push(name(tag));
        }
    }
    if stack.is_empty() {
        Ok(())
    } else {
        Err(format!("unclosed: {stack:?}"))
    }
}

#[test]
fn svg_is_well_formed_with_one_series_per_policy_and_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("faults.svg");
    let budgets = "1,2,4,8,16";
    let (code, out, err) = oracle(&[
        "demand",
        "fixtures/demand/memory.jsonl",
        "--horizon",
        "4",
        "--budgets",
        budgets,
        "--policy",
        "recent,lru,causal",
        "--svg",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("svg      "), "{out}");
    let svg = fs::read_to_string(&file).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
    assert!(svg.trim_end().ends_with("</svg>"));
    balanced(&svg).unwrap();
    // The legend names each series once, and the oracle is drawn although not asked for.
    let texts: Vec<&str> = svg
        .split("<text")
        .skip(1)
        .filter_map(|t| t.split_once('>').and_then(|(_, r)| r.split_once("</text>")))
        .map(|(t, _)| t.trim())
        .collect();
    for p in ["recent", "lru", "causal", "oracle"] {
        assert_eq!(
            texts.iter().filter(|t| **t == p).count(),
            1,
            "{p}: {texts:?}"
        );
    }
    assert!(
        texts.iter().any(|t| t.starts_with("budget")),
        "x axis label"
    );
    assert!(texts.contains(&"faults"), "y axis label");
    // One line per series through every budget, each in its own color.
    let points = budgets.split(',').count();
    let mut colors: Vec<&str> = svg
        .split("<polyline")
        .skip(1)
        .filter(|p| {
            p.split_once("points=\"")
                .map(|(_, r)| r.split('"').next().unwrap().split_whitespace().count())
                == Some(points)
        })
        .map(|p| {
            p.split_once("stroke=\"")
                .unwrap()
                .1
                .split('"')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(colors.len(), 4, "{colors:?}");
    colors.sort_unstable();
    colors.dedup();
    assert_eq!(colors.len(), 4, "distinct colors");
}

#[test]
fn bad_input_exits_2_and_a_damaged_log_exits_4() {
    let log = "fixtures/demand/tools.jsonl";
    for args in [
        vec!["demand", log, "--horizon", "0"],
        vec!["demand", log, "--horizon", "4", "--budgets", "0,4"],
        vec!["demand", log, "--horizon", "4", "--policy", "fifo"],
        vec!["demand", log, "--horizon", "4", "--sources", "parents,text"],
        vec![
            "demand",
            log,
            "--horizon",
            "4",
            "--budget",
            "2",
            "--budgets",
            "4",
        ],
        vec!["demand", log],
        vec!["demand", "fixtures/demand/missing.jsonl", "--horizon", "4"],
    ] {
        let (code, _, err) = oracle(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!err.is_empty());
    }
    let (code, _, err) = oracle(&[
        "demand",
        "fixtures/logs/broken/tampered-middle.jsonl",
        "--horizon",
        "4",
    ]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("event 7"), "{err}");
}
