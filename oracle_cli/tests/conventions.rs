//! Command-line conventions people know (issue 16): shell completions and a man page built from
//! the parser's own definitions, help wrapped to the terminal, and the small promises of
//! `verify --head` and `log --tail`.

mod common;

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
}

#[test]
fn verify_head_says_what_it_proved() {
    let head = "5614458e7158838a219f693eaaec96bf8229a38fb9bf8a5e8a2c2f04cf153f22";
    let (code, out, _) = oracle(&["verify", "fixtures/logs/quickstart.jsonl", "--head", head]);
    assert_eq!(code, 0);
    assert!(
        out.contains("kept     5614458e7158 is in the log: nothing up to it was rewritten or cut"),
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
