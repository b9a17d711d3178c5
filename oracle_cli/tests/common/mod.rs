//! Helpers shared by the end-to-end tests that run the real `oracle` binary from the workspace
//! root (so fixture paths in its output are relative and stable).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use oracle_core::Event;
use serde_json::Value;

// Helpers of other crates the end-to-end tests use, under the one module they name for
// helpers; not every test binary uses each.
#[allow(unused_imports)]
pub use oracle_core::rng::SplitMix64;
#[allow(unused_imports)]
pub use oracle_test_support::copy_dir;

/// The shipped plan that suspends on a conflicting belief: its run is `adjudication-1`, its
/// request `adj-15` (recorded by event 15).
pub const ADJUDICATION_PLAN: &str = "fixtures/plans/adjudication.plan";

/// The allergy scenario of named stores shared by runs (issue 40): run A asserts what the user
/// said in the store named by its `user` input (`--memory input.user`), B recalls it and acts
/// on it, C contradicts it ([`allergy_contradiction`]).
pub const ALLERGY_ASSERT: &str = "plan allergy_assert version 1

input user: string = \"alice\"

said = memory.assert {
  subject: user,
  predicate: \"allergy\",
  value: \"penicillin\",
  provenance: \"user_asserted\",
  criticality: \"critical\",
}
";

pub const ALLERGY_RECALL: &str = "plan allergy_recall version 1

grant kv:set:prescription

input user: string = \"alice\"

allergy = memory.query { subject: user, predicate: \"allergy\" }

amoxicillin = kv.set { key: \"prescription\", value: \"amoxicillin\" }
  when allergy.value != \"penicillin\"

azithromycin = kv.set { key: \"prescription\", value: \"azithromycin (penicillin allergy)\" }
  when allergy.value == \"penicillin\"
";

/// A plan `name` asserting `value` about alice's allergy with first-hand evidence.
pub fn allergy_contradiction(name: &str, value: &str) -> String {
    format!(
        "plan {name} version 1

said = memory.assert {{
  subject: \"alice\",
  predicate: \"allergy\",
  value: \"{value}\",
  provenance: \"external_first_hand\",
  criticality: \"critical\",
}}
"
    )
}

/// A plan waiting until alice's allergy is resolved.
pub const ALLERGY_WAIT: &str = "plan allergy_wait version 1\n\nallergy = memory.query { subject: \"alice\", predicate: \"allergy\", require: \"resolved\" }\n";

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What a finished command printed: its exit code (-1 if a signal ended it), stdout and stderr
/// (invalid UTF-8 replaced, never refused).
pub fn outcome(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The last line of `out` parsed as JSON (a `--json` command prints its document last).
/// Panics, naming `args` and showing stdout and stderr, if there is no line or it is not JSON.
pub fn last_json(args: &[&str], out: &str, err: &str) -> Value {
    let line = out
        .lines()
        .last()
        .unwrap_or_else(|| panic!("{args:?}: no output; stderr: {err}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}\n{err}"))
}

/// Runs `oracle ARGS` from the workspace root: exit code, stdout, stderr.
pub fn oracle(args: &[&str]) -> (i32, String, String) {
    outcome(command_in(&root(), args).output().unwrap())
}

/// A temporary directory holding a copy of the fixture plans and data, which is the working
/// directory of every command run in it (so plans' relative paths stay inside it).
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["data", "plans", "economy", "docs"] {
            copy_dir(
                &root().join("fixtures").join(sub),
                &dir.path().join("fixtures").join(sub),
            );
        }
        Sandbox { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, text).unwrap();
        p
    }

    pub fn command(&self, args: &[&str]) -> Command {
        command_in(self.path(), args)
    }

    /// Runs `oracle ARGS` in the sandbox: exit code, stdout, stderr.
    pub fn oracle(&self, args: &[&str]) -> (i32, String, String) {
        outcome(self.command(args).output().unwrap())
    }

    /// Runs a command with `--json` output and parses its last stdout line.
    pub fn json(&self, args: &[&str]) -> (i32, Value) {
        let (code, out, err) = self.oracle(args);
        (code, last_json(args, &out, &err))
    }

    pub fn log(&self, home: &str, run: &str) -> PathBuf {
        self.path()
            .join(home)
            .join("runs")
            .join(run)
            .join("events.jsonl")
    }

    pub fn events(&self, home: &str, run: &str) -> Vec<Event> {
        fs::read_to_string(self.log(home, run))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Rewrites one event's payload and recomputes every hash after it, so `verify` passes.
pub fn forge(log: &Path, seq: usize, edit: impl FnOnce(&mut Value)) {
    let text = fs::read_to_string(log).unwrap();
    let mut events: Vec<Event> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    edit(&mut events[seq].payload);
    events[seq].payload_hash = oracle_core::canon::payload_hash(&events[seq].payload).unwrap();
    oracle_core::event::relink(&mut events).unwrap();
    let mut out = Vec::new();
    for e in &events {
        out.extend(oracle_core::record::encode(e));
    }
    fs::write(log, out).unwrap();
}

/// `oracle ARGS` with `dir` as its working directory, not yet started.
pub fn command_in(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_oracle"));
    c.args(args).current_dir(dir);
    c
}

/// Runs `oracle ARGS` in `dir`: exit code, stdout, stderr.
pub fn oracle_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    outcome(command_in(dir, args).output().unwrap())
}

/// Runs a `--json` command in `dir` and parses its last stdout line: exit code and value.
pub fn json_in(dir: &Path, args: &[&str]) -> (i32, Value) {
    let (code, out, err) = oracle_in(dir, args);
    (code, last_json(args, &out, &err))
}

/// The events of a log's complete records (a torn last line, if any, is left out).
pub fn parse_events(bytes: &[u8]) -> Vec<Event> {
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    bytes[..complete]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// A temporary `--home` for runs, removed when dropped. Every command runs as `oracle --home
/// HOME ARGS` from the workspace root, so the shipped fixtures' relative paths resolve and
/// nothing is written outside the home.
pub struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    pub fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A temporary home inside `parent` (a filesystem the test chose), removed when dropped.
    pub fn new_in(parent: &Path) -> Home {
        Home {
            dir: tempfile::tempdir_in(parent).unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `oracle --home HOME ARGS`, from the workspace root, not yet started.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = command_in(&root(), &[]);
        c.arg("--home").arg(self.path()).args(args);
        c
    }

    /// Runs `oracle ARGS`: exit code, stdout, stderr.
    pub fn oracle(&self, args: &[&str]) -> (i32, String, String) {
        outcome(self.command(args).output().unwrap())
    }

    /// Runs a `--json` command and parses its last stdout line.
    pub fn json(&self, args: &[&str]) -> (i32, Value) {
        let (code, out, err) = self.oracle(args);
        (code, last_json(args, &out, &err))
    }

    /// Runs a command printing one JSON object per line; every line parsed (panics on one
    /// that is not JSON).
    pub fn json_lines(&self, args: &[&str]) -> (i32, Vec<Value>) {
        let (code, out, err) = self.oracle(args);
        let rows = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}\n{err}")))
            .collect();
        (code, rows)
    }

    pub fn run_dir(&self, run: &str) -> PathBuf {
        self.path().join("runs").join(run)
    }

    pub fn log(&self, run: &str) -> PathBuf {
        self.run_dir(run).join("events.jsonl")
    }

    /// Every entry of the run's directory with its bytes (a directory with none: its files
    /// are not read), so two snapshots are equal exactly when no file there changed.
    pub fn snapshot(&self, run: &str) -> BTreeMap<String, Vec<u8>> {
        fs::read_dir(self.run_dir(run))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let bytes = if e.file_type().unwrap().is_dir() {
                    Vec::new()
                } else {
                    fs::read(e.path()).unwrap()
                };
                (e.file_name().to_string_lossy().into_owned(), bytes)
            })
            .collect()
    }

    /// The events of a run as `oracle log --json` shows them.
    pub fn events(&self, run: &str) -> Vec<Value> {
        let (code, rows) = self.json_lines(&["log", run, "--json"]);
        assert_eq!(code, 0);
        rows
    }

    /// `oracle verify RUN` succeeds, without repairing anything.
    pub fn verifies(&self, run: &str) {
        let (code, out, err) = self.oracle(&["verify", run]);
        assert_eq!(code, 0, "verify without repair: {out}{err}");
    }

    /// `oracle replay RUN` reproduces the run, ending `ending`, and the run verifies.
    pub fn replays_and_verifies(&self, run: &str, ending: &str) {
        let (code, r) = self.json(&["replay", run, "--json"]);
        assert_eq!(code, 0, "{r}");
        assert_eq!(r["result"], "reproduced");
        assert_eq!(r["ending"], ending);
        self.verifies(run);
    }
}

/// The adjudication fixture ([`ADJUDICATION_PLAN`]) in a [`Home`].
impl Home {
    /// Starts the fixture with `extra` options: it must suspend on the allergy belief. Its
    /// `--json` report.
    pub fn start(&self, extra: &[&str]) -> Value {
        let mut args = vec!["run", ADJUDICATION_PLAN, "--json"];
        args.extend_from_slice(extra);
        let (code, out) = self.json(&args);
        assert_eq!(code, 3, "the run suspends: {out}");
        assert_eq!(out["status"], "suspended");
        assert_eq!(out["waiting"]["step"], "allergy");
        out
    }

    /// The allergy line as `oracle memory --json` shows it (with `extra` options): exactly one.
    pub fn allergy(&self, run: &str, extra: &[&str]) -> Value {
        let mut args = vec![
            "memory",
            run,
            "--subject",
            "patient-17",
            "--predicate",
            "allergy",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (code, rows) = self.json_lines(&args);
        assert_eq!(code, 0, "{rows:?}");
        assert_eq!(rows.len(), 1, "one line: {rows:?}");
        rows.into_iter().next().unwrap()
    }

    /// `oracle adjudicate RUN HANDLE --verdict affirm --evidence external_first_hand EXTRA`.
    pub fn affirm(&self, run: &str, handle: &str, extra: &[&str]) -> (i32, String, String) {
        let mut args = vec![
            "adjudicate",
            run,
            handle,
            "--verdict",
            "affirm",
            "--evidence",
            "external_first_hand",
        ];
        args.extend_from_slice(extra);
        self.oracle(&args)
    }

    /// The run's adjudications (`--status` and the like in `extra`).
    pub fn adjudications(&self, run: &str, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["adjudications", run, "--json"];
        args.extend_from_slice(extra);
        let (code, rows) = self.json_lines(&args);
        assert_eq!(code, 0, "{rows:?}");
        rows
    }
}

/// A Prometheus scrape's samples by (name, sorted labels).
pub type Samples = BTreeMap<(String, Vec<(String, String)>), u64>;

/// The samples of a scrape, parsed by `prometheus-parse` (a parser other than the encoder):
/// counters and gauges as whole numbers, a histogram as its total count.
pub fn samples(text: &str) -> Samples {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    let mut out = BTreeMap::new();
    for s in scrape.samples {
        let v = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(h) => h
                .iter()
                .find(|b| b.less_than.is_infinite())
                .map_or(0.0, |b| b.count),
            other => panic!("unexpected sample {other:?}"),
        };
        let mut labels: Vec<(String, String)> = s
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.sort();
        if v.fract() == 0.0 && v >= 0.0 {
            out.insert((s.metric, labels), v as u64);
        }
    }
    out
}

/// One sample's value (0 when absent).
pub fn at(m: &Samples, name: &str, labels: &[(&str, &str)]) -> u64 {
    let mut l: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    l.sort();
    m.get(&(name.to_owned(), l)).copied().unwrap_or(0)
}

/// `oracle worker` on `url` in `dir` with the tests' short lease and poll, then `extra` flags.
pub fn worker_command(dir: &Path, url: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_oracle"));
    c.args([
        "worker",
        "--store",
        url,
        "--lease-ms",
        "1000",
        "--poll-ms",
        "100",
    ])
    .args(extra)
    .current_dir(dir)
    .stdin(Stdio::null());
    c
}

/// Runs a worker until nothing is left to claim; returns its log (stderr).
pub fn worker_until_idle(dir: &Path, url: &str, extra: &[&str]) -> String {
    let out = worker_command(dir, url, &[&["--until-idle"], extra].concat())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "worker: {err}");
    err
}

/// Writes plan `text` to `<home>/plans/<file>`; its path (the shared-store tests).
pub fn plan_file(home: &Home, file: &str, text: &str) -> String {
    let dir = home.path().join("plans");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(file);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// Runs `oracle ARGS` in `home` and requires exit 0.
pub fn run_ok(home: &Home, args: &[&str]) {
    let (code, out, err) = home.oracle(args);
    assert_eq!(code, 0, "{args:?}: {out}{err}");
}

/// The output run `run` recorded for its step `step`.
pub fn output_of(home: &Home, run: &str, step: &str) -> Value {
    home.events(run)
        .into_iter()
        .find(|e| e["kind"] == "tool_returned" && e["payload"]["step"] == step)
        .map(|e| e["payload"]["output"].clone())
        .unwrap_or_else(|| panic!("no output for {step} in {run}"))
}

/// The arguments of an `oracle claim` from outside any run that user `i` of store `name` is
/// allergic to penicillin: the filler claims of the retention tests, whichever backend.
pub fn filler_claim(name: &str, i: u64) -> Vec<String> {
    let subject = format!("user-{i}");
    let args = [
        "claim",
        "--memory",
        name,
        "--subject",
        &subject,
        "--predicate",
        "allergy",
        "--value",
        "\"penicillin\"",
        "--provenance",
        "user_asserted",
    ];
    args.iter().map(|a| a.to_string()).collect()
}

/// `oracle memory --memory NAME --json`, required to succeed.
pub fn store_json(home: &Home, name: &str) -> Value {
    let (code, v) = home.json(&["memory", "--memory", name, "--json"]);
    assert_eq!(code, 0, "{v}");
    v
}
