//! `oracle-llm-stub --script FILE [--addr 127.0.0.1:PORT] [--url-file PATH] [--detach]
//! [--exit-when-played]`, the program the tests start by path (the README runs the same server
//! as `oracle dev llm-stub`, `oracle_llm_stub::program`): serves the scripted replies of FILE (see the library's
//! documentation), after printing its base URL (`http://127.0.0.1:PORT/v1`) on stdout and, with
//! `--url-file`, writing it to PATH (atomically: a reader that sees the file sees the whole URL,
//! and the server is listening).

use std::process::{Command, ExitCode};

use oracle_llm_stub::program;

const USAGE: &str = "usage: oracle-llm-stub --script FILE [--addr 127.0.0.1:PORT] [--url-file PATH] [--detach] [--exit-when-played]

Plays the scripted replies of FILE (a JSON array, or one JSON object per line) to
OpenAI-compatible chat-completion requests on a loopback address, in request order,
until killed. Prints the base URL to bind a model to, e.g.
  oracle run PLAN --model fast=$(cat URL_FILE)

  --detach            serve from a background process; return once it listens
                      (needs --url-file)
  --exit-when-played  exit once every scripted reply has been sent";

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
    let options = program::Options {
        name: "oracle-llm-stub".to_owned(),
        script,
        addr,
        url_file: url_file.clone(),
        exit_when_played,
    };
    if !detach {
        return program::serve(&options);
    }
    let Some(url_file) = url_file else {
        eprintln!("oracle-llm-stub: --detach needs --url-file\n\n{USAGE}");
        return ExitCode::from(2);
    };
    let Ok(me) = std::env::current_exe() else {
        eprintln!("oracle-llm-stub: cannot find its own executable");
        return ExitCode::from(1);
    };
    program::detach(&options, Command::new(me), &url_file)
}
