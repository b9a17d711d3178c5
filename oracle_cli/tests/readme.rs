//! README.md is a script a newcomer pastes: every ```sh block runs as written, in order, in a
//! scratch copy of the repository, with a `PATH` holding `oracle` (what the set-up builds) and
//! the system's `/usr/bin:/bin`, nothing else and nothing inherited: a block that needed another
//! program built or installed would fail here as it would for the newcomer. Each command exits
//! with the code its comment states (`# exit N`; no mention means 0). A block right after a line
//! `<!-- readme: not run: WHY -->` is skipped: the set-up commands (this test runs the binary
//! they build) and the reference block, whose placeholders the README explains. The docs'
//! shell blocks are held to the same rule.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One command of the README, with where it is and what it must exit with.
#[derive(Debug)]
struct Step {
    line: usize,
    command: String,
    exit: i32,
}

/// The marker that keeps the next block from running.
const SKIP: &str = "<!-- readme: not run:";
/// Longest one README command may take before the test calls it hung.
const COMMAND_MS_MAX: u64 = 120_000;

/// The comment of a shell line: from the first `#` outside quotes that starts a word.
fn split_comment(line: &str) -> (&str, &str) {
    let (mut single, mut double, mut prev) = (false, false, ' ');
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => {
                return (line[..i].trim_end(), &line[i + 1..]);
            }
            _ => {}
        }
        prev = c;
    }
    (line.trim_end(), "")
}

/// The exit code a comment states: the number after its first `exit `.
fn stated_exit(comment: &str) -> i32 {
    comment
        .split("exit ")
        .nth(1)
        .and_then(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(0)
}

/// Every command of every runnable block, in order. Continuation lines (`\`) are joined; the
/// stated exit code may be on any of them.
fn steps(readme: &str) -> Vec<Step> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut skip = false;
    let mut last_text = "";
    let mut pending: Option<Step> = None;
    for (i, raw) in readme.lines().enumerate() {
        let line = i + 1;
        if !in_block {
            if raw.trim_start().starts_with("```sh") {
                in_block = true;
                skip = last_text.trim_start().starts_with(SKIP);
            } else if !raw.trim().is_empty() {
                last_text = raw;
            }
            continue;
        }
        if raw.trim_start().starts_with("```") {
            assert!(
                pending.is_none(),
                "line {line}: a block ends inside a command"
            );
            in_block = false;
            last_text = "";
            continue;
        }
        if skip {
            continue;
        }
        let (code, comment) = split_comment(raw);
        let (code, continued) = match code.strip_suffix('\\') {
            Some(c) => (c.trim_end(), true),
            None => (code, false),
        };
        let step = match pending.take() {
            Some(mut s) => {
                s.command.push(' ');
                s.command.push_str(code.trim());
                s.exit = s.exit.max(stated_exit(comment));
                s
            }
            None if code.trim().is_empty() => continue,
            None => Step {
                line,
                command: code.trim().to_owned(),
                exit: stated_exit(comment),
            },
        };
        if continued {
            pending = Some(step);
        } else {
            out.push(step);
        }
    }
    out
}

/// The system's directories a newcomer's shell has (`sh`, `cat`, `cp`, ...), after the set-up's
/// output.
const SYSTEM_PATH: &str = "/usr/bin:/bin";

/// Runs `command` with `sh -c` in `dir`; exit code, stdout and stderr. A command that runs past
/// [`COMMAND_MS_MAX`] is killed and reported as exit -1. `PATH` is `bin` (holding only
/// `oracle`) and [`SYSTEM_PATH`]: no cargo directory, nothing from the test's own environment.
fn run(dir: &Path, bin: &Path, command: &str) -> (i32, String, String) {
    let path = format!("{}:{SYSTEM_PATH}", bin.display());
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        // A newcomer's environment, not the test's: no ORACLE_HOME, ORACLE_STORE or cargo
        // variables leak in.
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir.join("home"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_millis(COMMAND_MS_MAX) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_readme_parser_reads_comments_exits_and_continuations() {
    let text = "x\n\n```sh\noracle a '#x' # exit 3: why\noracle b \\\n  --c   # exit 4\n```\n\
                <!-- readme: not run: set-up -->\n```sh\nnope\n```\n";
    let s = steps(text);
    let got: Vec<(&str, i32)> = s.iter().map(|s| (s.command.as_str(), s.exit)).collect();
    assert_eq!(got, [("oracle a '#x'", 3), ("oracle b --c", 4)]);
}

#[test]
fn every_readme_command_runs_as_written() {
    let steps = runs_as_written("README.md");
    assert!(steps >= 40, "the README runs {steps} commands");
}

/// Runs `git ARGS` in `dir` (a scratch repository with a fixed identity); its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=readme",
            "-c",
            "user.email=readme@localhost",
        ])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir.join("home"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The same for every other document's shell blocks: docs/*.md, BENCHMARKS.md and the fixture
/// READMEs (each in a scratch copy of its own). Returns nothing: a document may have only
/// blocks marked not run (benchmarks, fuzzing), each with its reason.
#[test]
fn every_docs_command_runs_as_written() {
    let root = common::root();
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    docs.extend([
        "BENCHMARKS.md".to_owned(),
        "fixtures/logs/README.md".to_owned(),
    ]);
    let ran: usize = docs.iter().map(|d| runs_as_written(d)).sum();
    assert!(ran >= 5, "the docs run {ran} commands");
}

/// Runs every runnable command of the document `doc` (relative to the repository root) in a
/// fresh scratch copy of the repository; returns how many ran.
fn runs_as_written(doc: &str) -> usize {
    let root = common::root();
    let text = std::fs::read_to_string(root.join(doc)).unwrap();
    let steps = steps(&text);
    if steps.is_empty() {
        return 0;
    }

    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("oracle");
    // The SDKs' sources too: the README's code agents import them (no install, no caches).
    let subs = [
        "fixtures",
        "examples",
        "docs",
        "sdk/python/src",
        "sdk/typescript",
    ];
    for sub in subs {
        common::copy_dir(&root.join(sub), &dir.join(sub));
    }
    std::fs::copy(root.join(".gitignore"), dir.join(".gitignore")).unwrap();
    // The scratch copy is a repository, so what the commands leave behind can be checked
    // against .gitignore: nothing they create may show up as untracked, nothing tracked may
    // change. (`home` stands for the user's home directory, outside the repository.)
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::fs::write(dir.join("home/.keep"), "").unwrap();
    git(&dir, &["init", "-q"]);
    std::fs::write(dir.join(".git/info/exclude"), "/home/\n").unwrap();
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-q", "-m", "scratch"]);
    // What the set-up builds, and nothing else: the helpers the walkthroughs use are `oracle
    // dev` subcommands, and a tools manifest names the running oracle as `program = "oracle"`.
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_oracle"), bin.join("oracle")).unwrap();
    for step in &steps {
        let (code, out, err) = run(&dir, &bin, &step.command);
        assert_eq!(
            code, step.exit,
            "{doc} line {}: `{}` exited {code}, the document says {}\nstdout:\n{out}\nstderr:\n{err}",
            step.line, step.command, step.exit
        );
    }
    let left = git(&dir, &["status", "--porcelain", "--untracked-files=all"]);
    assert!(
        left.is_empty(),
        "{doc}'s commands left files git sees (add them to .gitignore or keep them out of the repository):\n{left}"
    );
    steps.len()
}
