//! Bounded inputs, end to end with the real binary: files read whole are regular files checked
//! against a named limit before reading (a FIFO, a device or a directory is refused at once,
//! exit 2, nothing written), hostile plans end in a diagnostic rather than exhausted memory, and
//! reading junk, huge or adversarial logs stays under 100 MB resident.

use crate::child;
use crate::common;

use std::fs;
use std::path::Path;

use child::Ended;
use common::Sandbox;

/// Peak resident memory allowed for reading any log (KiB).
const RSS_KIB_MAX: i64 = 100 * 1024;

/// Writes `head`, then `unit` repeated `times` times, then `tail` to `path`, a megabyte at a
/// time. Big inputs are streamed so that this test process stays small: a child's measured
/// peak memory can include the peak of the process that spawned it (the kernel carries the
/// parent's high-water mark across a `vfork` + `exec`), so the figures here are upper bounds.
fn write_big(path: &Path, head: &[u8], unit: &[u8], times: usize, tail: &[u8]) {
    use std::io::Write;
    let mut f = std::io::BufWriter::with_capacity(1 << 20, fs::File::create(path).unwrap());
    f.write_all(head).unwrap();
    for _ in 0..times {
        f.write_all(unit).unwrap();
    }
    f.write_all(tail).unwrap();
    f.flush().unwrap();
}

/// Exit 2 naming `needle` in stderr, no panic, not killed.
fn assert_refused(what: &str, ended: &Ended, err: &str, needle: &str) {
    assert!(
        ended.code == Some(2) && err.contains(needle) && !err.contains("panicked"),
        "{what}: expected exit 2 naming `{needle}`; got {ended:?}, stderr: {err}"
    );
}

/// A sandbox with a run suspended on a question (`ask-1`), and the bytes of its log.
fn suspended() -> (Sandbox, Vec<u8>) {
    let sb = Sandbox::new();
    sb.write(
        "ask.plan",
        "plan ask version 1\nq = human.ask { question: \"ok?\" }\n",
    );
    let (code, _, err) = sb.oracle(&["run", "ask.plan"]);
    assert_eq!(code, 3, "{err}");
    let log = fs::read(sb.log(".oracle", "ask-1")).unwrap();
    (sb, log)
}

#[test]
fn fifos_devices_and_directories_are_refused_at_once_wherever_a_file_is_read_whole() {
    let (sb, log) = suspended();
    child::mkfifo(&sb.path().join("fifo"));
    let (code, _, err) = sb.oracle(&["keygen", "--out", "k"]);
    assert_eq!(code, 0, "{err}");
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "--key FIFO",
            &["checkpoint", "ask-1", "--key", "fifo"],
            "FIFO",
        ),
        (
            "--pubkey FIFO",
            &["verify", "ask-1", "--pubkey", "fifo"],
            "FIFO",
        ),
        (
            "--pubkey dir",
            &["verify", "ask-1", "--pubkey", "."],
            "directory",
        ),
        ("run FIFO", &["run", "fifo"], "FIFO"),
        ("run /dev/zero", &["run", "/dev/zero"], "character device"),
        ("run --json FIFO", &["run", "fifo", "--json"], "FIFO"),
        ("plan check FIFO", &["plan", "check", "fifo"], "FIFO"),
        ("plan hash dir", &["plan", "hash", "fixtures"], "directory"),
        (
            "replay --plan FIFO",
            &["replay", "ask-1", "--plan", "fifo"],
            "FIFO",
        ),
        (
            "--value-file FIFO",
            &["resume", "ask-1", "--step", "q", "--value-file", "fifo"],
            "FIFO",
        ),
        (
            "--value-file /dev/zero",
            &[
                "resume",
                "ask-1",
                "--step",
                "q",
                "--value-file",
                "/dev/zero",
            ],
            "character device",
        ),
    ];
    for (what, args, needle) in cases {
        let (ended, _, err) = child::run(sb.command(args));
        assert_refused(what, &ended, &err, needle);
    }
    // The stored copy of the plan, which resume and replay read again, replaced by a FIFO.
    let stored = sb.path().join(".oracle/runs/ask-1/plan.plan");
    fs::remove_file(&stored).unwrap();
    child::mkfifo(&stored);
    for args in [
        &["resume", "ask-1", "--step", "q", "--value", "true"][..],
        &["replay", "ask-1"][..],
    ] {
        let (ended, _, err) = child::run(sb.command(args));
        assert_refused(&args.join(" "), &ended, &err, "FIFO");
    }
    assert_eq!(
        fs::read(sb.log(".oracle", "ask-1")).unwrap(),
        log,
        "nothing written"
    );
    assert!(
        !sb.path().join(".oracle/runs/checkpoints.jsonl").exists()
            && !sb
                .path()
                .join(".oracle/runs/ask-1/checkpoints.jsonl")
                .exists(),
        "no checkpoint signed"
    );
    assert!(
        !sb.path().join(".oracle/runs/fifo-1").exists(),
        "no run started"
    );
}

#[test]
fn files_over_their_limit_are_refused_by_name_before_reading() {
    let (sb, log) = suspended();
    // --value-file: over VALUE_FILE_BYTES_MAX (8 MiB), as a valid JSON string.
    write_big(
        &sb.path().join("big.json"),
        b"\"",
        b"a",
        (8 << 20) + 8,
        b"\"",
    );
    let (ended, _, err) =
        child::run(sb.command(&["resume", "ask-1", "--step", "q", "--value-file", "big.json"]));
    assert_refused(
        "--value-file",
        &ended,
        &err,
        "more than value_file_bytes_max = 8388608",
    );
    // A plan over PLAN_BYTES_MAX (32 MiB): a comment, so only the size is wrong.
    let head = b"plan big version 1\n#";
    write_big(
        &sb.path().join("big.plan"),
        head,
        b"x",
        (32 << 20) + 1 - head.len(),
        b"",
    );
    for args in [&["run", "big.plan"][..], &["plan", "check", "big.plan"][..]] {
        let (ended, _, err) = child::run(sb.command(args));
        assert_refused(
            &args.join(" "),
            &ended,
            &err,
            "more than plan_bytes_max = 33554432",
        );
    }
    // A key file over key_file_bytes_max.
    fs::write(sb.path().join("big.pub"), vec![b'a'; 4096]).unwrap();
    let (ended, _, err) = child::run(sb.command(&["verify", "ask-1", "--pubkey", "big.pub"]));
    assert_refused(
        "--pubkey",
        &ended,
        &err,
        "more than key_file_bytes_max = 1024",
    );
    let (ended, _, err) = child::run(sb.command(&["checkpoint", "ask-1", "--key", "big.pub"]));
    assert_refused("--key", &ended, &err, "more than key_file_bytes_max = 1024");
    assert_eq!(
        fs::read(sb.log(".oracle", "ask-1")).unwrap(),
        log,
        "nothing written"
    );
    assert!(
        !sb.path().join(".oracle/runs/big-1").exists(),
        "no run started"
    );
}

#[test]
fn hostile_plans_end_in_a_diagnostic_not_exhausted_memory() {
    let sb = Sandbox::new();
    let n = 4 << 20;
    let header = "plan h version 1\n";
    let shapes = [
        // A long flat expression: 1+1+1+... (a tree as deep as it is long).
        (
            "flat",
            format!(
                "{header}x = json.get {{ value: 1{}, path: \"\" }}\n",
                "+1".repeat(n / 2)
            ),
            "E0117",
        ),
        // Deep nesting of brackets.
        (
            "deep",
            format!(
                "{header}x = json.get {{ value: {}1{}, path: \"\" }}\n",
                "(".repeat(n / 2),
                ")".repeat(n / 2)
            ),
            "E0117",
        ),
        // Many steps, past steps_max.
        (
            "steps",
            format!(
                "{header}{}",
                (0..260_000)
                    .map(|i| format!("s{i}=clock.now{{}}\n"))
                    .collect::<String>()
            ),
            "E0216",
        ),
    ];
    for (name, text, code) in shapes {
        let file = format!("{name}.plan");
        fs::write(sb.path().join(&file), text).unwrap();
        for args in [&["plan", "check", &file][..], &["run", &file][..]] {
            let (ended, _, err) = child::run(sb.command(args));
            assert_refused(&args.join(" "), &ended, &err, code);
        }
    }
    // A list of more than tokens_max tokens (16 MB).
    write_big(
        &sb.path().join("tokens.plan"),
        format!("{header}x = json.get {{ value: [").as_bytes(),
        b"1,",
        4_000_001,
        b"1], path: \"\" }\n",
    );
    for args in [
        &["plan", "check", "tokens.plan"][..],
        &["run", "tokens.plan"][..],
    ] {
        let (ended, _, err) = child::run(sb.command(args));
        assert_refused(&args.join(" "), &ended, &err, "E0108");
    }
    let runs = sb.path().join(".oracle/runs");
    assert!(
        !runs.exists() || fs::read_dir(&runs).unwrap().next().is_none(),
        "no run started"
    );
}

/// Runs each reading command on `log` and checks its peak memory; returns the peaks (KiB).
fn peaks(dir: &Path, log: &str, expect_code: i32) -> Vec<(String, i64)> {
    let commands: &[&[&str]] = &[
        &["verify", log, "--threads", "1"],
        &["verify", log, "--threads", "2"],
        &["verify", log, "--threads", "8"],
        &["verify", log, "--json"],
        &["log", log],
        &["inspect", log],
        &["diff", log, log],
    ];
    let mut out = Vec::new();
    for args in commands {
        let (ended, _, err) = child::run(common::command_in(dir, args));
        let what = args.join(" ");
        let code = ended.code.unwrap_or(-1);
        // diff says 2 (trouble) for an invalid log where the others say 4.
        let expected = if args[0] == "diff" && expect_code == 4 {
            2
        } else {
            expect_code
        };
        assert_eq!(code, expected, "{what}: {ended:?} {err}");
        assert!(
            ended.max_rss_kib < RSS_KIB_MAX,
            "{what}: peak resident {} KiB, over {RSS_KIB_MAX} KiB",
            ended.max_rss_kib
        );
        out.push((what, ended.max_rss_kib));
    }
    out
}

#[test]
fn reading_junk_huge_or_adversarial_logs_stays_under_100_mb() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut report = Vec::new();
    // Blank lines: each is an integrity error, found at the first.
    write_big(&d.join("blank1m.jsonl"), b"", b"\n", 1 << 20, b"");
    report.extend(peaks(d, "blank1m.jsonl", 4));
    fs::remove_file(d.join("blank1m.jsonl")).unwrap();
    write_big(
        &d.join("blank100m.jsonl"),
        b"",
        &[b'\n'; 1024],
        100 << 10,
        b"",
    );
    report.extend(peaks(d, "blank100m.jsonl", 4));
    fs::remove_file(d.join("blank100m.jsonl")).unwrap();
    // One 100 MB line without a newline: over the 64 MiB record limit, refused at the limit.
    write_big(
        &d.join("line100m.jsonl"),
        b"",
        &[b'x'; 1024],
        100 << 10,
        b"",
    );
    report.extend(peaks(d, "line100m.jsonl", 4));
    fs::remove_file(d.join("line100m.jsonl")).unwrap();
    // A valid log of many small records.
    let (code, _, err) = common::oracle_in(
        d,
        &[
            "synth",
            "--events",
            "100000",
            "--out",
            "synth.jsonl",
            "--durability",
            "none",
        ],
    );
    assert_eq!(code, 0, "{err}");
    report.extend(peaks(d, "synth.jsonl", 0));
    // Shown with --nocapture; docs/TESTING.md records a run of it.
    for (what, kib) in report {
        println!("{kib:>8} KiB  {what}");
    }
}
