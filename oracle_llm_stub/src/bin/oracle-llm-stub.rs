//! `oracle-llm-stub --script FILE [--addr 127.0.0.1:PORT] [--url-file PATH] [--detach]
//! [--exit-when-played]`: serves the scripted replies of FILE (see the library's
//! documentation), after printing its base URL (`http://127.0.0.1:PORT/v1`) on stdout and, with
//! `--url-file`, writing it to PATH (atomically: a reader that sees the file sees the whole URL,
//! and the server is listening).

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: oracle-llm-stub --script FILE [--addr 127.0.0.1:PORT] [--url-file PATH] [--detach] [--exit-when-played]

Plays the scripted replies of FILE (a JSON array, or one JSON object per line) to
OpenAI-compatible chat-completion requests on a loopback address, in request order,
until killed. Prints the base URL to bind a model to, e.g.
  oracle run PLAN --model fast=$(cat URL_FILE)

  --detach            serve from a background process; return once it listens
                      (needs --url-file)
  --exit-when-played  exit once every scripted reply has been sent";

/// Longest `--detach` waits for the background server to write its URL.
const DETACH_WAIT_MS_MAX: u64 = 10_000;
/// How often a finished script is looked for (`--exit-when-played`).
const POLL_MS: u64 = 50;

fn main() -> ExitCode {
    let mut script = None;
    let mut addr = "127.0.0.1:0".to_owned();
    let mut url_file: Option<String> = None;
    let mut detach = false;
    let mut exit_when_played = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        let r = match a.as_str() {
            "--script" => value("--script").map(|v| script = Some(v)),
            "--addr" => value("--addr").map(|v| addr = v),
            "--url-file" => value("--url-file").map(|v| url_file = Some(v)),
            "--detach" => {
                detach = true;
                Ok(())
            }
            "--exit-when-played" => {
                exit_when_played = true;
                Ok(())
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument `{other}`")),
        };
        if let Err(e) = r {
            eprintln!("oracle-llm-stub: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let Some(script) = script else {
        eprintln!("oracle-llm-stub: --script is required\n\n{USAGE}");
        return ExitCode::from(2);
    };
    if detach {
        let Some(url_file) = url_file else {
            eprintln!("oracle-llm-stub: --detach needs --url-file\n\n{USAGE}");
            return ExitCode::from(2);
        };
        return detached(&script, &addr, &url_file, exit_when_played);
    }
    let replies = match std::fs::read_to_string(&script)
        .map_err(|e| e.to_string())
        .and_then(|t| oracle_llm_stub::parse_script(&t))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("oracle-llm-stub: {script}: {e}");
            return ExitCode::from(2);
        }
    };
    let stub = match oracle_llm_stub::Stub::start_on(&addr, replies) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("oracle-llm-stub: cannot listen on {addr}: {e}");
            return ExitCode::from(1);
        }
    };
    let url = stub.url();
    if let Some(path) = url_file {
        let tmp = format!("{path}.tmp");
        let written =
            std::fs::write(&tmp, format!("{url}\n")).and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            eprintln!("oracle-llm-stub: cannot write {path}: {e}");
            return ExitCode::from(1);
        }
    }
    println!("{url}");
    loop {
        if exit_when_played && stub.finished() {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// Starts this program again without `--detach`, its output discarded, and returns once it
/// has written its URL.
fn detached(script: &str, addr: &str, url_file: &str, exit_when_played: bool) -> ExitCode {
    let _ = std::fs::remove_file(url_file);
    let Ok(me) = std::env::current_exe() else {
        eprintln!("oracle-llm-stub: cannot find its own executable");
        return ExitCode::from(1);
    };
    let mut c = Command::new(me);
    c.args(["--script", script, "--addr", addr, "--url-file", url_file]);
    if exit_when_played {
        c.arg("--exit-when-played");
    }
    let spawned = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("oracle-llm-stub: cannot start the background server: {e}");
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
            eprintln!("oracle-llm-stub: the background server exited ({status}) before listening");
            return ExitCode::from(1);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    eprintln!(
        "oracle-llm-stub: the background server did not start within {DETACH_WAIT_MS_MAX} ms"
    );
    ExitCode::from(1)
}
