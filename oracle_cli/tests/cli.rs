//! End-to-end tests of the `oracle` binary on the fixture logs: exit codes, what is printed on
//! stdout and stderr, and what commands that write (repair, snapshot, synth) leave on disk.
//! Every test works on copies in a temporary directory, never on `fixtures/` itself.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use oracle_core::verify::verify_bytes;
use oracle_runtime::{Durability, LogPaths, LogWriter};
use serde_json::Value;

fn fixture_logs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/logs")
}

/// A temporary directory holding a copy of the fixture logs in `logs/` and an empty oracle
/// home in `home/`; the binary runs inside it, so nothing can touch the real fixtures or `.oracle`.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        common::copy_dir(&fixture_logs(), &dir.path().join("logs"));
        Sandbox { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn home(&self) -> PathBuf {
        self.path("home")
    }

    /// Runs `oracle --home <home> <args>` in `cwd`.
    fn run_in(&self, cwd: &Path, home: &Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_oracle"))
            .arg("--home")
            .arg(home)
            .args(args)
            .current_dir(cwd)
            .env_remove("ORACLE_HOME")
            .output()
            .unwrap()
    }

    /// Runs `oracle --home <sandbox>/home <args>` in the sandbox.
    fn run(&self, args: &[&str]) -> Output {
        self.run_in(self.dir.path(), &self.home(), args)
    }

    /// Runs and returns (exit code, stdout, stderr).
    fn oracle(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.run(args);
        let code = out.status.code().expect("oracle was killed by a signal");
        (
            code,
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }

    /// Runs a `--json` command and parses its single line of stdout.
    fn json(&self, args: &[&str]) -> (i32, Value) {
        let (code, stdout, stderr) = self.oracle(args);
        let v = serde_json::from_str(stdout.trim_end()).unwrap_or_else(|e| {
            panic!("{args:?}: stdout is not JSON ({e}): {stdout:?} (stderr {stderr:?})")
        });
        (code, v)
    }
}

/// The head of quickstart.jsonl, computed independently of the binary.
fn quickstart_head() -> String {
    let bytes = fs::read(fixture_logs().join("quickstart.jsonl")).unwrap();
    verify_bytes(&bytes, None).unwrap().hash.to_hex()
}

#[test]
fn verify_accepts_a_valid_log_and_prints_its_head() {
    let s = Sandbox::new();
    let (code, stdout, stderr) = s.oracle(&["verify", "logs/quickstart.jsonl"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("valid"), "{stdout}");
    assert!(stdout.contains(&quickstart_head()), "{stdout}");
    assert!(stdout.contains("events   16"), "{stdout}");

    let (code, v) = s.json(&["verify", "--json", "logs/quickstart.jsonl"]);
    assert_eq!(code, 0);
    assert_eq!(v["ok"], true);
    assert_eq!(v["events"], 16);
    assert_eq!(v["head"], quickstart_head().as_str());
}

#[test]
fn verify_accepts_a_run_directory_and_a_run_id() {
    let s = Sandbox::new();
    let run = s.home().join("runs/qs");
    fs::create_dir_all(&run).unwrap();
    fs::copy(s.path("logs/quickstart.jsonl"), run.join("events.jsonl")).unwrap();
    for target in [run.to_str().unwrap(), "qs"] {
        let (code, v) = s.json(&["verify", "--json", target]);
        assert_eq!(code, 0, "{target}");
        assert_eq!(v["head"], quickstart_head().as_str(), "{target}");
    }
}

/// Checks a failing `verify`: exit 4, the text names the seq and reason, and `--json` agrees.
fn assert_integrity_failure(s: &Sandbox, log: &str, seq: u64, kind: &str, reason: &str) {
    let (code, _, stderr) = s.oracle(&["verify", log]);
    assert_eq!(code, 4, "{log}: {stderr}");
    assert!(stderr.contains(reason), "{log}: {stderr}");
    if kind == "integrity" {
        assert!(stderr.contains(&format!("event {seq}:")), "{log}: {stderr}");
    }

    let (code, v) = s.json(&["verify", "--json", log]);
    assert_eq!(code, 4, "{log}");
    assert_eq!(v["ok"], false, "{log}");
    assert_eq!(v["error"]["kind"], kind, "{log}: {v}");
    assert_eq!(v["error"]["seq"], seq, "{log}: {v}");
    assert!(
        v["error"]["reason"].as_str().unwrap().contains(reason),
        "{log}: {v}"
    );
}

#[test]
fn verify_reports_a_tampered_record_at_its_seq() {
    let s = Sandbox::new();
    assert_integrity_failure(
        &s,
        "logs/broken/tampered-middle.jsonl",
        7,
        "integrity",
        "payload hash mismatch",
    );
}

#[test]
fn verify_reports_a_forged_payload_at_its_seq() {
    let s = Sandbox::new();
    assert_integrity_failure(
        &s,
        "logs/broken/forged-payload.jsonl",
        8,
        "integrity",
        "hash mismatch",
    );
}

#[test]
fn verify_reports_swapped_and_garbage_records() {
    let s = Sandbox::new();
    assert_integrity_failure(
        &s,
        "logs/broken/swapped.jsonl",
        3,
        "integrity",
        "seq out of order",
    );
    assert_integrity_failure(
        &s,
        "logs/broken/not-json.jsonl",
        2,
        "integrity",
        "malformed record",
    );
}

#[test]
fn a_relinked_log_is_caught_only_by_the_known_head() {
    let s = Sandbox::new();
    let (code, _, stderr) = s.oracle(&["verify", "logs/broken/relinked.jsonl"]);
    assert_eq!(code, 0, "a relinked chain is self-consistent: {stderr}");

    let head = quickstart_head();
    let (code, _, stderr) = s.oracle(&["verify", "--head", &head, "logs/quickstart.jsonl"]);
    assert_eq!(code, 0, "the original log contains its own head: {stderr}");

    let (code, _, stderr) = s.oracle(&["verify", "--head", &head, "logs/broken/relinked.jsonl"]);
    assert_eq!(code, 4);
    assert!(stderr.contains(&head), "{stderr}");
    let (code, v) = s.json(&[
        "verify",
        "--json",
        "--head",
        &head,
        "logs/broken/relinked.jsonl",
    ]);
    assert_eq!(code, 4);
    assert_eq!(v["error"]["kind"], "head_not_found");
}

#[test]
fn a_torn_tail_is_reported_then_repaired() {
    let s = Sandbox::new();
    let log = "logs/broken/torn-tail.jsonl";
    let original = fs::read(s.path(log)).unwrap();
    let valid_len = original.iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let cut = &original[valid_len..];

    assert_integrity_failure(&s, log, 15, "torn_tail", "torn tail");

    let (code, v) = s.json(&["repair", "--json", log]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["repaired"], true);
    assert_eq!(v["events"], 15);
    assert_eq!(v["torn_bytes"], cut.len());
    // Relative paths in the output are relative to where oracle ran: the sandbox.
    let saved = s.path(v["saved_to"].as_str().unwrap());
    assert_eq!(
        fs::read(&saved).unwrap(),
        cut,
        "the cut bytes are saved, byte for byte"
    );
    assert_eq!(fs::read(s.path(log)).unwrap(), &original[..valid_len]);

    let (code, v) = s.json(&["verify", "--json", log]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["events"], 15, "one event fewer than quickstart");

    let (code, stdout, _) = s.oracle(&["repair", log]);
    assert_eq!(code, 0);
    assert!(stdout.contains("nothing to repair"), "{stdout}");
}

#[test]
fn repair_refuses_damage_before_the_tail() {
    let s = Sandbox::new();
    let log = "logs/broken/tampered-middle.jsonl";
    let before = fs::read(s.path(log)).unwrap();
    let (code, _, stderr) = s.oracle(&["repair", log]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("event 7"), "{stderr}");
    assert_eq!(fs::read(s.path(log)).unwrap(), before);
}

/// `oracle repair events.jsonl` from the log's own directory: the bare relative path has an
/// empty parent directory.
#[test]
fn repair_works_on_a_log_in_the_current_directory() {
    let s = Sandbox::new();
    let out = s.run_in(
        &s.path("logs/broken"),
        &s.home(),
        &["repair", "torn-tail.jsonl"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(s.oracle(&["verify", "logs/broken/torn-tail.jsonl"]).0, 0);
}

#[test]
fn a_missing_log_is_an_input_error() {
    let s = Sandbox::new();
    let (code, _, stderr) = s.oracle(&["verify", "logs/no-such-log.jsonl"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no-such-log.jsonl"), "{stderr}");
}

/// A zero-byte log is not a valid one: every run's log begins with `run_started`, and a log cut
/// to nothing looks the same. `verify` says "no events" with exit 2 and the stable code
/// `no_events`, with or without `--head`, and as a run named by id (red team, issue 32, item 10).
#[test]
fn an_empty_log_is_refused_as_having_no_events() {
    let s = Sandbox::new();
    fs::write(s.path("empty.jsonl"), b"").unwrap();
    let run = s.home().join("runs/empty-1");
    fs::create_dir_all(&run).unwrap();
    fs::write(run.join("events.jsonl"), b"").unwrap();
    let head = quickstart_head();
    for args in [
        vec!["verify", "empty.jsonl"],
        vec!["verify", "empty-1"],
        vec!["verify", "empty.jsonl", "--head", &head],
        vec!["verify", "empty.jsonl", "--head", &head[..12]],
    ] {
        let (code, stdout, stderr) = s.oracle(&args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(stderr.contains("no events"), "{args:?}: {stderr}");
        let mut json = args.clone();
        json.push("--json");
        let (code, v) = s.json(&json);
        assert_eq!(code, 2, "{args:?}");
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(v["error"]["code"], "no_events", "{v}");
        assert_eq!(v["error"]["kind"], "no_events", "{v}");
        assert_eq!(v["error"]["exit"], 2, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no events"),
            "{v}"
        );
    }
    // One record is enough to be a log again; a missing file stays an input error.
    let first = fs::read_to_string(s.path("logs/quickstart.jsonl")).unwrap();
    let first = first.split_inclusive('\n').next().unwrap();
    fs::write(s.path("one.jsonl"), first).unwrap();
    assert_eq!(s.oracle(&["verify", "one.jsonl"]).0, 0);
    assert_eq!(s.oracle(&["verify", "none.jsonl"]).0, 2);
}

#[test]
fn a_second_writer_is_refused_by_the_lock() {
    let s = Sandbox::new();
    let run = s.home().join("runs/held");
    fs::create_dir_all(&run).unwrap();
    fs::copy(s.path("logs/quickstart.jsonl"), run.join("events.jsonl")).unwrap();

    let writer = LogWriter::open(&LogPaths::of_run(&run), Durability::DEFAULT).unwrap();
    let (code, _, stderr) = s.oracle(&["repair", "held"]);
    assert_ne!(
        code, 0,
        "repair ran while another process held the writer lock"
    );
    assert!(stderr.contains("lock"), "{stderr}");

    // Once the writer is gone, the same command goes through. A flock lives as long as any copy
    // of its file descriptor: another test thread's fork may hold one for the instant before its
    // exec closes it, so allow a short, bounded wait.
    drop(writer);
    let mut attempt = 0;
    let (code, stdout, stderr) = loop {
        let out = s.oracle(&["repair", "held"]);
        attempt += 1;
        if out.0 == 0 || attempt == 50 {
            break out;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("nothing to repair"), "{stdout}");
}

/// The seq column of `oracle log`'s table.
fn table_seqs(stdout: &str) -> Vec<u64> {
    let mut lines = stdout.lines();
    let header = lines.next().unwrap();
    assert!(
        header
            .split_whitespace()
            .eq(["seq", "time", "kind", "hash", "summary"]),
        "{header}"
    );
    lines
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn log_lists_every_event_and_filters_by_kind() {
    let s = Sandbox::new();
    let (code, stdout, _) = s.oracle(&["log", "logs/quickstart.jsonl"]);
    assert_eq!(code, 0);
    assert_eq!(table_seqs(&stdout), (0..16).collect::<Vec<u64>>());
    assert!(stdout.contains("run completed"), "{stdout}");

    let (code, stdout, _) = s.oracle(&["log", "--kind", "capability_denied", "logs/denied.jsonl"]);
    assert_eq!(code, 0);
    assert_eq!(table_seqs(&stdout), [2]);
    assert!(stdout.contains("fs:read:/etc/passwd DENIED"), "{stdout}");

    let (code, stdout, _) = s.oracle(&["log", "--from", "4", "--to", "6", "logs/quickstart.jsonl"]);
    assert_eq!(code, 0);
    assert_eq!(table_seqs(&stdout), [4, 5, 6]);

    let (code, _, stderr) = s.oracle(&["log", "--kind", "tool_exploded", "logs/quickstart.jsonl"]);
    assert_eq!(code, 2, "an unknown kind is a usage error");
    assert!(
        stderr.contains("capability_denied"),
        "the error lists the known kinds: {stderr}"
    );
}

/// `log --step`, `--full` and `--seq` (issue 34): one step's events, summaries uncut, and one
/// event in full.
#[test]
fn log_filters_by_step_shows_values_whole_and_one_event_in_full() {
    let s = Sandbox::new();
    let (code, stdout, _) = s.oracle(&["log", "--step", "stats", "logs/quickstart.jsonl"]);
    assert_eq!(code, 0);
    assert_eq!(table_seqs(&stdout), [6, 7, 8]);

    let (_, cut, _) = s.oracle(&["log", "--from", "4", "--to", "4", "logs/quickstart.jsonl"]);
    let (code, full, _) = s.oracle(&[
        "log",
        "--full",
        "--from",
        "4",
        "--to",
        "4",
        "logs/quickstart.jsonl",
    ]);
    assert_eq!(code, 0);
    assert!(
        cut.contains('…'),
        "the fixture's output is long enough to be cut: {cut}"
    );
    assert!(!full.contains('…') && full.len() > cut.len(), "{full}");

    let (code, one, _) = s.oracle(&["log", "--seq", "4", "logs/quickstart.jsonl"]);
    assert_eq!(code, 0, "{one}");
    for field in [
        "seq           4",
        "kind          tool_returned",
        "state after",
        "payload",
        "  \"step\": \"read\"",
    ] {
        assert!(one.contains(field), "{field}: {one}");
    }
    let out = s.run(&["log", "--seq", "4", "--json", "logs/quickstart.jsonl"]);
    let record = fs::read(s.path("logs/quickstart.jsonl")).unwrap();
    let line4 = record.split_inclusive(|&b| b == b'\n').nth(4).unwrap();
    assert_eq!(out.stdout, line4, "--json prints the exact record");
    let (code, _, err) = s.oracle(&["log", "--seq", "99", "logs/quickstart.jsonl"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no event 99"), "{err}");
}

#[test]
fn log_json_prints_the_records_exactly_as_stored() {
    let s = Sandbox::new();
    for log in [
        "logs/quickstart.jsonl",
        "logs/denied.jsonl",
        "logs/suspended.jsonl",
    ] {
        let out = s.run(&["log", "--json", log]);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(out.stdout, fs::read(s.path(log)).unwrap(), "{log}");
    }
}

#[test]
fn log_stops_with_an_integrity_error_at_the_damage() {
    let s = Sandbox::new();
    let (code, stdout, stderr) = s.oracle(&["log", "logs/broken/tampered-middle.jsonl"]);
    assert_eq!(code, 4, "{stderr}");
    assert_eq!(
        table_seqs(&stdout),
        (0..7).collect::<Vec<u64>>(),
        "only verified events are shown"
    );
}

/// The `key = value` lines of `oracle inspect`'s text output.
fn inspect_keys(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| {
            l.strip_prefix("  ")?
                .split_once(" = ")
                .map(|(k, _)| k.to_owned())
        })
        .collect()
}

#[test]
fn inspect_shows_the_state_after_an_event() {
    let s = Sandbox::new();
    let (code, stdout, stderr) = s.oracle(&["inspect", "logs/quickstart.jsonl"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("state after event 15"), "{stdout}");
    assert_eq!(
        inspect_keys(&stdout),
        ["step/read", "step/stats", "step/summary"]
    );
    assert!(
        stdout.contains(r#"step/stats = {"attempts":1,"output":{"chars":192,"lines":4,"words":38},"status":"completed"}"#),
        "{stdout}"
    );

    let (code, stdout, _) = s.oracle(&["inspect", "--at", "9", "logs/quickstart.jsonl"]);
    assert_eq!(code, 0);
    assert!(stdout.starts_with("state after event 9"), "{stdout}");
    assert_eq!(inspect_keys(&stdout), ["step/read", "step/stats"]);

    let (code, _, stderr) = s.oracle(&["inspect", "--at", "16", "logs/quickstart.jsonl"]);
    assert_eq!(code, 2, "past the end: {stderr}");
}

#[test]
fn inspect_starts_from_a_snapshot_once_taken() {
    let s = Sandbox::new();
    let log = "logs/quickstart.jsonl";
    let (_, genesis) = s.json(&["inspect", "--json", log]);
    assert_eq!(genesis["from_snapshot"], Value::Null);

    let (code, snap) = s.json(&["snapshot", "--json", "--at", "13", log]);
    assert_eq!(code, 0, "{snap}");
    assert_eq!(snap["seq"], 13);
    assert!(s.path(snap["path"].as_str().unwrap()).is_file(), "{snap}");

    let (code, v) = s.json(&["inspect", "--json", log]);
    assert_eq!(code, 0);
    assert_eq!(v["from_snapshot"], 13);
    assert_eq!(
        v["state_hash"], genesis["state_hash"],
        "a snapshot never changes the state"
    );
    assert_eq!(v["entries"], genesis["entries"]);

    let (_, v) = s.json(&["inspect", "--json", "--no-snapshots", log]);
    assert_eq!(v["from_snapshot"], Value::Null);
    let (_, v) = s.json(&["inspect", "--json", "--at", "12", log]);
    assert_eq!(
        v["from_snapshot"],
        Value::Null,
        "a snapshot after --at cannot be used"
    );
}

#[test]
fn synth_is_deterministic_across_homes() {
    let s = Sandbox::new();
    let mut heads = Vec::new();
    for home in ["a", "b"] {
        let out = s.run_in(
            s.dir.path(),
            &s.path(home),
            &[
                "synth", "--run", "x", "--events", "60", "--seed", "9", "--json",
            ],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["events"], 60);
        heads.push(v["head"].clone());
    }
    assert_eq!(heads[0], heads[1]);
    let a = fs::read(s.path("a/runs/x/events.jsonl")).unwrap();
    assert_eq!(a, fs::read(s.path("b/runs/x/events.jsonl")).unwrap());

    // An existing run is never overwritten.
    let out = s.run_in(s.dir.path(), &s.path("a"), &["synth", "--run", "x"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fs::read(s.path("a/runs/x/events.jsonl")).unwrap(), a);
}

#[test]
fn every_subcommand_has_help() {
    let s = Sandbox::new();
    for cmd in ["verify", "log", "inspect", "repair", "snapshot", "synth"] {
        let (code, stdout, _) = s.oracle(&[cmd, "--help"]);
        assert_eq!(code, 0, "{cmd} --help");
        assert!(stdout.contains("Usage:"), "{cmd}: {stdout}");
    }
    let (code, stdout, _) = s.oracle(&["--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("Exit codes"), "{stdout}");
}

/// A mistyped command is answered with the closest one (issue 34: `oracle rn` named
/// `reinstate` and `runs`, never `run`), and exits 2 like every usage error.
#[test]
fn a_mistyped_command_names_the_closest_one() {
    let s = Sandbox::new();
    for (typed, meant) in [
        ("rn", "'run'"),
        ("verfy", "'verify'"),
        ("rsume", "'resume'"),
    ] {
        let (code, stdout, stderr) = s.oracle(&[typed]);
        assert_eq!(code, 2, "{typed}: {stderr}");
        assert!(stdout.is_empty(), "{typed}: {stdout}");
        assert!(stderr.contains(meant), "{typed}: {stderr}");
        assert!(
            stderr.contains("unrecognized subcommand"),
            "{typed}: {stderr}"
        );
    }
}

#[test]
fn dev_machine_names_the_cpu_its_simd_features_and_its_cores() {
    // The line every benchmark starts with (BENCHMARKS.md names the CPU of each figure).
    let out = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(["dev", "machine"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let line = String::from_utf8(out.stdout).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(line.starts_with("cpu "), "{line}");
    assert!(line.contains(&format!("; cores {cores};")), "{line}");
    assert!(line.contains("; simd "), "{line}");
    assert!(line.contains("; lane expansion "), "{line}");
    assert_eq!(line.lines().count(), 1, "{line}");
}
