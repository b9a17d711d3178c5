//! A closed stdout (`oracle runs | head -1`): every command exits 0 and says nothing, and a
//! streaming command stops reading as soon as its reader is gone. Real binary, real pipes.

use crate::child;
use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use child::Ended;
use common::Sandbox;

/// Runs `cmd` with stdout a pipe whose read end is closed after `lines` lines were read (0:
/// closed before the command starts, so its first write fails). How it ended, its stderr, and
/// the lines read.
fn closed_after(mut cmd: Command, lines: usize) -> (Ended, String, Vec<String>) {
    let (reader, writer) = std::io::pipe().unwrap();
    let err_file = tempfile::NamedTempFile::new().unwrap();
    cmd.stdin(Stdio::null())
        .stdout(writer)
        .stderr(err_file.reopen().unwrap());
    let reader = (lines > 0).then_some(reader);
    let child = cmd.spawn().unwrap();
    // The parent's copy of the write end, so the reader sees the end when the child exits.
    drop(cmd);
    let mut read = Vec::new();
    if let Some(reader) = reader {
        let mut reader = BufReader::new(reader);
        for _ in 0..lines {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 {
                break;
            }
            read.push(line);
        }
        // Dropped here: the read end closes while the child is still writing.
    }
    let ended = child::wait(child);
    let err = std::fs::read_to_string(err_file.path()).unwrap();
    (ended, err, read)
}

fn assert_quiet(what: &str, ended: &Ended, err: &str) {
    assert!(
        ended.code == Some(0) && err.is_empty(),
        "{what}: a closed stdout must end the command with exit 0 and nothing on stderr; got {ended:?}, stderr: {err}"
    );
}

/// A sandbox with a completed economy run (`economy-1`) and a quickstart run.
fn sandbox_with_runs() -> Sandbox {
    let sb = Sandbox::new();
    for plan in [
        "fixtures/plans/economy.plan",
        "fixtures/plans/quickstart.plan",
    ] {
        let (code, _, err) = sb.oracle(&["run", plan]);
        assert_eq!(code, 0, "{plan}: {err}");
    }
    sb
}

#[test]
fn every_command_exits_0_silently_when_stdout_is_closed_before_it_writes() {
    let sb = sandbox_with_runs();
    let commands: &[&[&str]] = &[
        &["runs"],
        &["runs", "--json"],
        &["log", "economy-1"],
        &["log", "economy-1", "--json"],
        &["inspect", "economy-1"],
        &["inspect", "economy-1", "--json"],
        &["verify", "economy-1"],
        &["verify", "economy-1", "--json"],
        &["auction", "economy-1"],
        &["auction", "economy-1", "--json"],
        &["memory", "economy-1"],
        &["adjudications", "economy-1"],
        &["demand", "economy-1", "--horizon", "8", "--trace"],
        &["diff", "economy-1", "economy-1"],
        &["replay", "quickstart-1"],
        &["replay", "quickstart-1", "--json"],
        &["plan", "check", "fixtures/plans/economy.plan"],
        &["plan", "check", "fixtures/plans/economy.plan", "--json"],
        &["plan", "graph", "fixtures/plans/economy.plan"],
        &[
            "plan",
            "graph",
            "fixtures/plans/economy.plan",
            "--format",
            "dot",
        ],
        &["plan", "hash", "fixtures/plans/economy.plan"],
        &["plan", "tools"],
        &["plan", "tools", "--json"],
        // Writes a new run, then finds stdout closed when it reports it.
        &["run", "fixtures/plans/quickstart.plan"],
    ];
    for args in commands {
        let (ended, err, _) = closed_after(sb.command(args), 0);
        assert_quiet(&args.join(" "), &ended, &err);
    }
    // A failure whose report finds stdout closed is quiet too (exit 0, as documented).
    let (ended, err, _) = closed_after(sb.command(&["verify", "no-such-run", "--json"]), 0);
    assert_quiet("verify of a missing run", &ended, &err);
}

#[test]
fn auction_json_closed_after_a_few_bytes_exits_0() {
    let sb = sandbox_with_runs();
    for args in [&["auction", "economy-1", "--json"][..], &["runs"][..]] {
        let (ended, err, _) = closed_after(sb.command(args), 1);
        assert_quiet(&args.join(" "), &ended, &err);
    }
}

/// A 50,000-event log (about 28 MB), made once for this test binary.
fn big_log() -> &'static std::path::Path {
    static LOG: OnceLock<(tempfile::TempDir, std::path::PathBuf)> = OnceLock::new();
    let (_, path) = LOG.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("big.jsonl");
        let (code, _, err) = common::oracle_in(
            dir.path(),
            &[
                "synth",
                "--events",
                "50000",
                "--out",
                "big.jsonl",
                "--durability",
                "none",
            ],
        );
        assert_eq!(code, 0, "{err}");
        (dir, log)
    });
    path
}

#[test]
fn log_stops_reading_when_its_reader_goes_away() {
    let log = big_log();
    let size = std::fs::metadata(log).unwrap().len();
    for json in [false, true] {
        let mut args = vec!["log", log.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        let (ended, err, read) = closed_after(common::command_in(log.parent().unwrap(), &args), 2);
        assert_eq!(read.len(), 2, "the first lines arrive");
        assert_quiet(&args.join(" "), &ended, &err);
        // Countable proof that it stopped: it read one block or two, not the whole log.
        assert!(
            ended.rchar < size / 2,
            "log --json={json} read {} of {size} bytes after its reader went away",
            ended.rchar
        );
    }
}

#[test]
fn verify_and_inspect_of_a_big_log_with_stdout_closed_exit_0() {
    let log = big_log();
    let dir = log.parent().unwrap();
    for args in [
        &["verify", log.to_str().unwrap(), "--json"][..],
        &["verify", log.to_str().unwrap(), "--threads", "1"][..],
        &["inspect", log.to_str().unwrap()][..],
    ] {
        let (ended, err, _) = closed_after(common::command_in(dir, args), 0);
        assert_quiet(&args.join(" "), &ended, &err);
    }
}

/// Progress is drawn only on a terminal: with stderr a pipe (as here, and in every script),
/// commands that take seconds on a big log say nothing on stderr, escape codes least of all,
/// however long they take. On a terminal (util-linux `script`), `--json` keeps it off too.
#[test]
fn no_progress_on_a_pipe_or_with_json() {
    let sb = Sandbox::new();
    let big = sb.path().join("big.jsonl");
    let big = big.to_str().unwrap();
    let quiet = |args: &[&str]| {
        let started = std::time::Instant::now();
        let (code, out, err) = sb.oracle(args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        assert!(
            err.is_empty() && !out.contains('\u{1b}'),
            "{args:?} ({:?}) wrote progress to a pipe: {err:?}",
            started.elapsed()
        );
        out
    };
    // 100k events (54 MB): verifying takes over the one-second delay in a debug build on a
    // 2-core machine, so the display would be drawn if a pipe were taken for a terminal.
    quiet(&["synth", "--events", "100000", "--out", big]);
    quiet(&["verify", big]);
    quiet(&["log", big, "--kind", "run_started", "-n", "1"]);
    quiet(&["log", big, "--seq", "99999"]);
    // A terminal, but `--json`: a program reads it, so no progress either.
    let on_tty = format!("{} verify {big} --json", env!("CARGO_BIN_EXE_oracle"));
    let out = Command::new("script")
        .args(["-qec", &on_tty, "/dev/null"])
        .current_dir(sb.path())
        .output()
        .expect("util-linux `script` gives the test a terminal");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"ok\":true"), "{text}");
    assert!(!text.contains("verifying"), "{text}");
}
