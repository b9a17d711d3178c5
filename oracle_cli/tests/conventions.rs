//! Command-line conventions people know (issue 16): shell completions and a man page built from
//! the parser's own definitions, help wrapped to the terminal, and the small promises of
//! `verify --head` and `log --tail`.

use crate::common;

use std::process::Command;

fn oracle(args: &[&str]) -> (i32, String, String) {
    common::oracle(args)
}

#[test]
fn completions_for_every_shell_are_generated_and_bash_parses_them() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let (code, out, err) = oracle(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains("oracle"), "{shell}");
        for sub in ["adjudicate", "reinstate", "verify", "completions"] {
            assert!(out.contains(sub), "{shell} completes `{sub}`");
        }
        if shell == "bash" {
            let dir = tempfile::tempdir().unwrap();
            let script = dir.path().join("oracle.bash");
            std::fs::write(&script, &out).unwrap();
            let check = Command::new("bash")
                .arg("-n")
                .arg(&script)
                .output()
                .unwrap();
            assert!(check.status.success(), "bash -n: {check:?}");
        }
    }
    let (code, _, err) = oracle(&["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is a usage error: {err}");
}

#[test]
fn the_man_page_is_roff_and_names_every_command() {
    let (code, out, err) = oracle(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(".TH oracle 1"), "{out}");
    for sub in ["run", "resume", "replay", "verify", "reinstate"] {
        assert!(out.contains(sub), "man names `{sub}`");
    }
}

/// Every command's `--help` fits in 100 columns (clap `wrap_help`, `max_term_width = 100`):
/// before, lines of up to 435 characters were printed unwrapped.
#[test]
fn help_is_wrapped_to_a_hundred_columns_for_every_command() {
    let (_, top, _) = oracle(&["--help"]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A command's line starts with two spaces; its wrapped description with more.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 20, "{commands:?}");
    for c in std::iter::once(None).chain(commands.iter().map(Some)) {
        let args: Vec<&str> = c
            .map(String::as_str)
            .into_iter()
            .chain(["--help"])
            .collect();
        let (code, out, _) = oracle(&args);
        assert_eq!(code, 0, "{args:?}");
        // The usage line is clap's and is not wrapped (only `claim`'s, with four required
        // options, is longer).
        let widest = out
            .lines()
            .filter(|l| !l.starts_with("Usage:"))
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0);
        assert!(
            widest <= 100,
            "{args:?}: a help line of {widest} characters"
        );
    }
}

/// The seqs of `oracle log`'s table rows.
fn seqs(table: &str) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn log_tail_shows_the_last_n_selected_events() {
    let log = "fixtures/logs/quickstart.jsonl";
    let (code, out, _) = oracle(&["log", log, "-n", "3"]);
    assert_eq!(code, 0);
    assert_eq!(seqs(&out), [13, 14, 15]);
    let (_, out, _) = oracle(&["log", log, "--tail", "2", "--kind", "tool_called"]);
    assert_eq!(seqs(&out), [7, 12]);
    let (_, out, _) = oracle(&["log", log, "--tail", "100", "--to", "2"]);
    assert_eq!(seqs(&out), [0, 1, 2]);
    let (_, out, _) = oracle(&["log", log, "--tail", "0"]);
    assert!(seqs(&out).is_empty());
    let (_, out, _) = oracle(&["log", log, "-n", "2", "--from", "15"]);
    assert_eq!(seqs(&out), [15]);
    let (_, out, _) = oracle(&["log", log, "-n", "2", "--from", "16"]);
    assert!(seqs(&out).is_empty());
    // Read through the index from the end: two events whose links are cut are refused,
    // naming the seq (an edit before them is `oracle verify`'s to find).
    let (code, out, err) = oracle(&["log", "fixtures/logs/broken/swapped.jsonl", "-n", "16"]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(err.contains("event"), "{err}");
}

#[test]
fn verify_head_says_what_it_proved() {
    let head = "5ef62b5145e65f44cca78c834003c6c6ea0239473e746b139a9711a1f6e67b36";
    let (code, out, _) = oracle(&["verify", "fixtures/logs/quickstart.jsonl", "--head", head]);
    assert_eq!(code, 0);
    assert!(
        out.contains("kept     5ef62b5145e6 is in the log: nothing up to it was rewritten or cut"),
        "{out}"
    );
    let (code, out, _) = oracle(&[
        "verify",
        "fixtures/logs/quickstart.jsonl",
        "--head",
        head,
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["head_kept"]["found"], true);
    let (_, out, _) = oracle(&["verify", "fixtures/logs/quickstart.jsonl"]);
    assert!(!out.contains("kept"), "{out}");
}

/// `oracle runs`: ids in natural order (`quickstart-2` before `quickstart-10`), the event count
/// and last logical tick of each, and a running run told apart as `live` (a process holds its
/// writer lock) or `interrupted` (nobody does: `oracle resume` continues it).
#[test]
fn runs_are_listed_in_natural_order_with_live_and_interrupted_told_apart() {
    let sb = common::Sandbox::new();
    for _ in 0..11 {
        let (code, _, err) = sb.oracle(&["run", "fixtures/plans/quickstart.plan"]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, _) = sb.oracle(&["runs", "--json"]);
    assert_eq!(code, 0);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = rows.iter().map(|r| r["run"].as_str().unwrap()).collect();
    let want: Vec<String> = (1..=11).map(|i| format!("quickstart-{i}")).collect();
    assert_eq!(ids, want);
    assert_eq!(rows[0]["events"], 16);
    assert_eq!(rows[0]["last_time"], 4);

    // Cut quickstart-3's log after its fifth record: it stopped mid-run, nobody holds it.
    let log = sb.log(".oracle", "quickstart-3");
    let text = std::fs::read_to_string(&log).unwrap();
    let cut: String = text.split_inclusive('\n').take(5).collect();
    std::fs::write(&log, cut).unwrap();
    let _ = std::fs::remove_file(log.with_extension("jsonl.idx"));
    let (_, out, _) = sb.oracle(&["runs"]);
    let line = out
        .lines()
        .find(|l| l.starts_with("quickstart-3 "))
        .unwrap();
    assert!(
        line.contains("interrupted") && line.contains("oracle resume quickstart-3"),
        "{line}"
    );

    // While a process holds its writer lock, it is live.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(log.with_extension("jsonl.lock"))
        .unwrap();
    lock.lock().unwrap();
    let (_, out, _) = sb.oracle(&["runs"]);
    let line = out
        .lines()
        .find(|l| l.starts_with("quickstart-3 "))
        .unwrap();
    assert!(line.contains(" live "), "{line}");
    let (_, out, _) = sb.oracle(&["runs", "--json"]);
    assert!(out.contains(r#""live":true"#), "{out}");
    drop(lock);
}

/// Ctrl-C during a run says how to continue it, and the run is then listed as interrupted.
#[test]
fn ctrl_c_during_a_run_says_how_to_resume_it() {
    use std::os::unix::process::ExitStatusExt;
    let sb = common::Sandbox::new();
    sb.write(
        "nap.plan",
        "plan nap version 1\ngrant proc:exec:sleep\nnap = proc.exec { program: \"sleep\", args: [\"5\"] }\n",
    );
    let child = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(["run", "nap.plan"])
        .current_dir(sb.path())
        .env_remove("ORACLE_HOME")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (bounded) until the call is recorded: the run is then inside `sleep`.
    let log = sb.path().join(".oracle/runs/nap-1/events.jsonl");
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("tool_called")) {
        assert!(
            started.elapsed().as_secs() < 30,
            "the run never called its tool"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.signal() == Some(2) || out.status.code() == Some(130),
        "{:?}",
        out.status
    );
    assert!(
        err.contains("interrupted") && err.contains("oracle resume"),
        "{err}"
    );
    let (_, runs, _) = sb.oracle(&["runs"]);
    assert!(runs.contains("interrupted"), "{runs}");
}

/// `--color always|never|auto` on every command (global); `auto` colours a terminal only, and
/// not when NO_COLOR is set. Pipes (as here) are plain unless `always` is asked for.
#[test]
fn color_is_chosen_by_flag_and_never_reaches_a_pipe_by_default() {
    let a = "fixtures/diff/payload/a.jsonl";
    let b = "fixtures/diff/payload/b.jsonl";
    let esc = "\u{1b}[";
    let (code, out, _) = oracle(&["diff", a, b, "--color", "always"]);
    assert_eq!(code, 1);
    assert!(out.contains(esc), "always colours: {out}");
    for args in [
        &["diff", a, b][..],
        &["diff", a, b, "--color", "never"],
        &["diff", a, b, "--color", "auto"],
    ] {
        let (_, out, _) = oracle(args);
        assert!(!out.contains(esc), "{args:?}: {out}");
    }
    let bad = "fixtures/plans/bad/several-mistakes.plan";
    let (code, _, err) = oracle(&["plan", "check", bad, "--color", "always"]);
    assert_eq!(code, 2);
    assert!(
        err.contains(esc),
        "plan check colours its diagnostics when asked"
    );
    let (_, _, err) = oracle(&["plan", "check", bad]);
    assert!(!err.contains(esc), "plain when piped");
    // NO_COLOR never overrides an explicit choice, and is honoured by `auto`.
    let out = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(["diff", a, b])
        .current_dir(common::root())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains(esc));
}

/// `--head` takes the 12-character prefix `oracle log` shows (or any of at least 8), naming one
/// event; a prefix no event has fails like a missing head (4), a short one is a usage error.
#[test]
fn verify_head_takes_a_hash_prefix() {
    let log = "fixtures/logs/quickstart.jsonl";
    for prefix in ["5ef62b5145e6", "5ef62b51", "5EF62B5145E65F44"] {
        let (code, out, err) = oracle(&["verify", log, "--head", prefix]);
        assert_eq!(code, 0, "{prefix}: {err}");
        assert!(out.contains("kept     5ef62b5145e6 is in the log"), "{out}");
    }
    let (code, _, err) = oracle(&[
        "verify",
        "fixtures/logs/broken/relinked.jsonl",
        "--head",
        "5ef62b5145e6",
    ]);
    assert_eq!(code, 4, "the relinked log lost that head: {err}");
    let (code, _, err) = oracle(&["verify", log, "--head", "5614458"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a prefix of at least 8"), "{err}");
    let (code, _, err) = oracle(&["verify", log, "--head", "zzzzzzzzzzzz"]);
    assert_eq!(code, 2, "{err}");
}

/// A negative number where a tick, seq or count goes is refused saying so (clap's own advice,
/// `-- -5`, would be wrong here), as text and as the one JSON error document.
#[test]
fn negative_numbers_are_refused_with_a_clear_message() {
    for args in [
        &["inspect", "fixtures/logs/quickstart.jsonl", "--at", "-1"][..],
        &["sweep", "some-run", "--now", "-5"],
        &["log", "fixtures/logs/quickstart.jsonl", "--tail", "-3"],
    ] {
        let (code, _, err) = oracle(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(
            err.contains("is negative: every number oracle takes"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("-- -"), "{args:?}: {err}");
    }
    let (code, out, _) = oracle(&[
        "inspect",
        "fixtures/logs/quickstart.jsonl",
        "--at",
        "-1",
        "--json",
    ]);
    assert_eq!(code, 2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["error"]["exit"], 2);
}

/// On a real terminal (a pseudo-terminal from util-linux `script`), `auto` colours and
/// `NO_COLOR` turns it off.
#[test]
fn no_color_turns_colour_off_on_a_terminal() {
    let diff = format!(
        "{} diff fixtures/diff/payload/a.jsonl fixtures/diff/payload/b.jsonl",
        env!("CARGO_BIN_EXE_oracle")
    );
    let on_tty = |env: &str| {
        let out = Command::new("script")
            .args(["-qec", &format!("{env} {diff}"), "/dev/null"])
            .current_dir(common::root())
            .env_remove("NO_COLOR")
            .output()
            .expect("util-linux `script` gives the test a terminal");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let esc = "\u{1b}[";
    assert!(
        on_tty("").contains(esc),
        "a terminal is coloured by default"
    );
    assert!(!on_tty("NO_COLOR=1").contains(esc), "NO_COLOR turns it off");
    assert!(on_tty("NO_COLOR=1").contains("diverged at event 8"));
}
