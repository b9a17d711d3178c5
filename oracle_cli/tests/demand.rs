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
    assert_eq!(
        cols,
        ["policy", "budget", "faults", "rate", "tokens", "gap"]
    );
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
            assert_eq!(r[5], "0");
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

// ---------------------------------------------------------------------------------------------
// Plugged policies (docs/FORMAT.md, "Pluggable policies")

const PIN_WASM: &str = "wasm:fixtures/demand/policies/pin_first.wat";
const PIN_EXEC: &str = "exec:python3 fixtures/demand/policies/pin_first.py";
const CAUSAL_EXEC: &str = "exec:python3 fixtures/demand/policies/causal.py";

/// The `results` of `oracle demand --json` by (policy, budget): (faults, tokens, gap).
fn results(v: &serde_json::Value) -> std::collections::BTreeMap<(String, u64), (u64, u64, i64)> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                (
                    r["policy"].as_str().unwrap().to_owned(),
                    r["budget"].as_u64().unwrap(),
                ),
                (
                    r["faults"].as_u64().unwrap(),
                    r["tokens"].as_u64().unwrap(),
                    r["gap"].as_i64().unwrap(),
                ),
            )
        })
        .collect()
}

#[test]
fn a_wasm_policy_and_a_program_are_graded_beside_the_built_ins() {
    let policies = format!("recent,lru,causal,{PIN_WASM},{PIN_EXEC},{CAUSAL_EXEC}");
    let budgets = [1u64, 2, 3, 4, 8, 64];
    let list: Vec<String> = budgets.iter().map(u64::to_string).collect();
    let (code, out, err) = oracle(&[
        "demand",
        "fixtures/demand/tools.jsonl",
        "--horizon",
        "4",
        "--budgets",
        &list.join(","),
        "--policy",
        &policies,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "recent",
            "lru",
            "causal",
            PIN_WASM,
            PIN_EXEC,
            CAUSAL_EXEC,
            "oracle"
        ]
    );
    let r = results(&v);
    assert_eq!(r.len(), budgets.len() * names.len());
    for b in budgets {
        let at = |p: &str| r[&(p.to_owned(), b)];
        // The module and the program make the same choices, so they fault alike.
        assert_eq!(at(PIN_WASM), at(PIN_EXEC), "budget {b}");
        // The same oracle bounds every policy, plugged or not.
        for p in &names {
            assert!(at(p).2 >= 0, "{p} at {b}: {:?}", at(p));
            assert_eq!(at(p).2, at(p).0 as i64 - at("oracle").0 as i64);
        }
    }
    // Pinning event 0 is a choice that shows: it differs from plain lru at small budgets, and
    // with every event kept each policy has only the compulsory faults.
    assert_ne!(r[&(PIN_WASM.to_owned(), 4)], r[&("lru".to_owned(), 4)]);
    for p in &names {
        assert_eq!(r[&(p.to_string(), 64)].0, 56, "{p}");
    }
    // The table names each plugged policy as given.
    let (code, table, err) = oracle(&[
        "demand",
        "fixtures/demand/tools.jsonl",
        "--horizon",
        "4",
        "--budget",
        "4",
        "--policy",
        &format!("lru,{PIN_WASM}"),
    ]);
    assert_eq!(code, 0, "{err}");
    let row = table.lines().find(|l| l.starts_with(PIN_WASM)).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    let (faults, tokens, gap) = r[&(PIN_WASM.to_owned(), 4)];
    assert_eq!(
        cols[1..],
        [
            "4",
            &faults.to_string(),
            cols[3],
            &tokens.to_string(),
            &gap.to_string()
        ]
    );
}

/// Writes a policy program that prints `answer` whatever it is asked.
fn answering(dir: &Path, name: &str, answer: &str) -> String {
    let file = dir.join(name);
    fs::write(
        &file,
        format!("import sys\nsys.stdin.read()\nprint({answer:?})\n"),
    )
    .unwrap();
    format!("exec:python3 {}", file.display())
}

#[test]
fn a_plugged_policy_that_breaks_the_abi_is_refused_with_its_own_code() {
    let dir = tempfile::tempdir().unwrap();
    let trap = dir.path().join("trap.wat");
    fs::write(
        &trap,
        r#"(module (memory (export "memory") 1)
             (func (export "alloc") (param i32) (result i32) i32.const 1024)
             (func (export "run") (param i32 i32) (result i64) unreachable))"#,
    )
    .unwrap();
    let imports = dir.path().join("imports.wat");
    fs::write(
        &imports,
        r#"(module (import "env" "clock" (func)) (memory (export "memory") 1))"#,
    )
    .unwrap();
    let d = dir.path();
    let cases = [
        (
            answering(d, "future.py", r#"{"keep": [[], [5]]}"#),
            "policy_unknown_id",
        ),
        (
            answering(d, "self.py", r#"{"keep": [[], [1]]}"#),
            "policy_unknown_id",
        ),
        (
            answering(d, "over.py", r#"{"keep": [[], [0], [0, 1, 0]]}"#),
            "policy_over_budget",
        ),
        (answering(d, "shape.py", r#"{"kept": []}"#), "policy_output"),
        (
            answering(d, "ids.py", r#"{"keep": [["0"]]}"#),
            "policy_output",
        ),
        (answering(d, "text.py", "not json"), "policy_failed"),
        (
            "exec:python3 -c 'import sys; sys.exit(3)'".to_owned(),
            "policy_failed",
        ),
        (format!("wasm:{}", trap.display()), "policy_failed"),
        (format!("wasm:{}", imports.display()), "policy_load"),
        (
            "wasm:fixtures/demand/policies/missing.wat".to_owned(),
            "policy_load",
        ),
        ("exec:".to_owned(), "usage"),
        ("fifo".to_owned(), "usage"),
    ];
    for (policy, expected) in cases {
        let (code, out, err) = oracle(&[
            "demand",
            "fixtures/demand/tools.jsonl",
            "--horizon",
            "4",
            "--budget",
            "1",
            "--policy",
            &policy,
            "--json",
        ]);
        assert_eq!(code, 2, "{policy}: {out} {err}");
        let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap())
            .unwrap_or_else(|e| panic!("{policy}: {e}: {out} {err}"));
        assert_eq!(v["ok"], false, "{policy}");
        assert_eq!(v["error"]["code"], expected, "{policy}: {v}");
        // Without --json, the same failure in words.
        let (code, _, err) = oracle(&[
            "demand",
            "fixtures/demand/tools.jsonl",
            "--horizon",
            "4",
            "--budget",
            "1",
            "--policy",
            &policy,
        ]);
        assert_eq!(code, 2, "{policy}");
        assert!(
            err.contains("policy") || err.contains("--policy"),
            "{policy}: {err}"
        );
    }
}

#[test]
fn pareto_sweeps_the_named_budgets_and_draws_faults_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pareto.svg");
    let policies = format!("recent,lru,causal,{PIN_WASM}");
    let args = |json: bool| {
        let mut a = vec![
            "demand",
            "fixtures/demand/tools.jsonl",
            "--horizon",
            "4",
            "--policy",
            &policies,
            "--pareto",
            file.to_str().unwrap(),
        ];
        if json {
            a.push("--json");
        }
        a.into_iter().map(str::to_owned).collect::<Vec<String>>()
    };
    let args_json = args(true);
    let (code, out, err) = oracle(&args_json.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The named sweep (oracle_demand::limits::PARETO_BUDGETS), up to the first budget at least
    // the 56 events.
    assert_eq!(
        v["budgets"],
        serde_json::json!([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64])
    );
    let r = results(&v);
    assert_eq!(r.len(), 12 * 5);
    // The oracle's faults and tokens never grow with the budget.
    let oracle_rows: Vec<(u64, u64, i64)> = r
        .iter()
        .filter(|((p, _), _)| p == "oracle")
        .map(|(_, x)| *x)
        .collect();
    assert!(
        oracle_rows
            .windows(2)
            .all(|w| w[1].0 <= w[0].0 && w[1].1 <= w[0].1)
    );
    // The chart: both panels, every policy in each legend; the same bytes every time.
    let svg = fs::read_to_string(&file).unwrap();
    balanced(&svg).unwrap();
    let texts: Vec<&str> = svg
        .split("<text")
        .skip(1)
        .filter_map(|t| t.split_once('>').and_then(|(_, r)| r.split_once("</text>")))
        .map(|(t, _)| t.trim())
        .collect();
    for label in ["recent", "lru", "causal", PIN_WASM, "oracle"] {
        let n = texts.iter().filter(|t| **t == label).count();
        assert_eq!(n, 2, "{label}: one legend entry per panel");
    }
    assert!(
        texts.contains(&"faults") && texts.contains(&"tokens read"),
        "{texts:?}"
    );
    golden(&root().join("docs/demand-pareto.svg"), svg.as_bytes());
    // The table prints faults and tokens for every budget of the sweep.
    let args_text = args(false);
    let (code, out, err) = oracle(&args_text.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tokens"), "{out}");
    let rows = out.lines().filter(|l| l.starts_with("oracle ")).count();
    assert_eq!(rows, 12, "{out}");
    assert_eq!(fs::read_to_string(&file).unwrap(), svg);
    // A sweep is its own set of budgets.
    let (code, _, err) = oracle(&[
        "demand",
        "fixtures/demand/tools.jsonl",
        "--horizon",
        "4",
        "--budget",
        "2",
        "--pareto",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
}
