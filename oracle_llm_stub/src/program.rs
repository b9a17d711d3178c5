//! The stub as a program: serve a script file in the foreground, or from a background copy of
//! the program that this one waits for (`--detach`). Shared by `oracle dev llm-stub`, which the
//! README's model walkthroughs run, and the `oracle-llm-stub` wrapper the tests start by path.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Longest `--detach` waits for the background server to write its URL.
pub const DETACH_WAIT_MS_MAX: u64 = 10_000;
/// How often a finished script is looked for (`--exit-when-played`).
const POLL_MS: u64 = 50;

/// What to serve, and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// How messages name the program (`oracle-llm-stub`, `oracle dev llm-stub`).
    pub name: String,
    /// The script file (a JSON array, or one JSON object per line).
    pub script: String,
    /// Where to listen: a loopback address, port 0 for any free one.
    pub addr: String,
    /// Where to write the base URL once listening (atomically: whoever sees the file sees the
    /// whole URL, and the server is listening).
    pub url_file: Option<String>,
    /// Exit once every scripted reply has been sent.
    pub exit_when_played: bool,
}

/// Serves `o.script` until killed (or played, with `exit_when_played`), after printing the
/// base URL on stdout and writing it to `o.url_file`. Exit 2 for a script that cannot be read,
/// 1 for an address or URL file that cannot be used.
pub fn serve(o: &Options) -> ExitCode {
    let name = &o.name;
    let replies = match std::fs::read_to_string(&o.script)
        .map_err(|e| e.to_string())
        .and_then(|t| crate::parse_script(&t).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: {}: {e}", o.script);
            return ExitCode::from(2);
        }
    };
    let stub = match crate::Stub::start_on(&o.addr, replies) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{name}: cannot listen on {}: {e}", o.addr);
            return ExitCode::from(1);
        }
    };
    let url = stub.url();
    if let Some(path) = &o.url_file {
        let tmp = format!("{path}.tmp");
        let written =
            std::fs::write(&tmp, format!("{url}\n")).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            eprintln!("{name}: cannot write {path}: {e}");
            return ExitCode::from(1);
        }
    }
    println!("{url}");
    loop {
        if o.exit_when_played && stub.finished() {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// Starts `program` (this program again, already given whatever selects the stub, such as
/// `dev llm-stub`) with `o`'s options and no `--detach`, its output discarded, and returns once
/// it has written its URL to `url_file`, which it prints.
pub fn detach(o: &Options, mut program: Command, url_file: &str) -> ExitCode {
    let name = &o.name;
    let _ = std::fs::remove_file(url_file);
    program.args([
        "--script",
        &o.script,
        "--addr",
        &o.addr,
        "--url-file",
        url_file,
    ]);
    if o.exit_when_played {
        program.arg("--exit-when-played");
    }
    let spawned = program
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: cannot start the background server: {e}");
            return ExitCode::from(1);
        }
    };
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(DETACH_WAIT_MS_MAX) {
        if Path::new(url_file).exists() {
            if let Ok(url) = std::fs::read_to_string(url_file) {
                print!("{url}");
            }
            return ExitCode::SUCCESS;
        }
        if let Ok(Some(status)) = child.try_wait() {
            eprintln!("{name}: the background server exited ({status}) before listening");
            return ExitCode::from(1);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    eprintln!("{name}: the background server did not start within {DETACH_WAIT_MS_MAX} ms");
    ExitCode::from(1)
}
