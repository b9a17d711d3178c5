//! `oracle dev`: the test helpers the README's walkthroughs need, built into the one binary so
//! that the set-up's `cargo run --release` is all a reader has to build. `llm-stub` is the
//! scripted model server (`oracle_llm_stub::program`), `mcp-example` the example MCP server
//! (`oracle_mcp_example`), which a tools manifest starts as `program = "oracle"`,
//! `args = ["dev", "mcp-example"]` (docs/TOOLS.md). Neither is a real model or a real tool.
//! `machine` prints the line benchmarks start with (`oracle_host::machine_line`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct DevArgs {
    #[command(subcommand)]
    command: DevCommand,
}

#[derive(Subcommand, Debug)]
enum DevCommand {
    /// Test helper: an OpenAI-compatible chat-completions server on 127.0.0.1 that plays the
    /// scripted replies of `--script FILE` (a JSON array, or one JSON object per line) in
    /// request order, never a real model. Prints the base URL to bind a model to (`oracle run
    /// PLAN --model fast=URL`). Exit 2 for a script that cannot be read.
    LlmStub(LlmStubArgs),
    /// Test helper: the example MCP server over stdin and stdout (tools `word_count` and
    /// `reverse`), started by a tools manifest, not by hand: `program = "oracle"`, `args =
    /// ["dev", "mcp-example"]`. `--mode` makes it misbehave, for tests.
    McpExample(McpExampleArgs),
    /// The machine line benchmarks print first (BENCHMARKS.md names the CPU of every figure):
    /// the CPU model, its SIMD features, the cores, and the lane expansion the state hash uses.
    Machine,
}

#[derive(Args, Debug)]
struct LlmStubArgs {
    /// The scripted replies (fixtures/llm/*.jsonl).
    #[arg(long, value_name = "FILE")]
    script: PathBuf,
    /// Where to listen: a loopback address; port 0 takes any free port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    addr: String,
    /// Also write the base URL to this file, once listening.
    #[arg(long, value_name = "PATH")]
    url_file: Option<PathBuf>,
    /// Serve from a background process and return once it listens (needs --url-file).
    #[arg(long, requires = "url_file")]
    detach: bool,
    /// Exit once every scripted reply has been sent.
    #[arg(long)]
    exit_when_played: bool,
}

#[derive(Args, Debug)]
struct McpExampleArgs {
    /// How it behaves: `normal`, or one of the hostile modes the tests use.
    #[arg(long, default_value = "normal", value_parser = clap::builder::PossibleValuesParser::new(oracle_mcp_example::MODES))]
    mode: String,
}

/// Runs a helper: its own exit status, or 2 with the reason on stderr. (A helper serves until
/// its client is done; it prints through nothing of the CLI's, so it is run outside
/// `run_command`.)
pub fn main(a: DevArgs) -> ExitCode {
    run(a).unwrap_or_else(|e| {
        eprintln!("error: {}", e.message);
        ExitCode::from(e.code)
    })
}

fn run(a: DevArgs) -> Result<ExitCode, CliError> {
    match a.command {
        DevCommand::LlmStub(a) => llm_stub(a),
        DevCommand::McpExample(a) => {
            let mode = oracle_mcp_example::Mode::parse(&a.mode)
                .ok_or_else(|| CliError::input(format!("no mode `{}`", a.mode)))?;
            Ok(oracle_mcp_example::run(mode))
        }
        DevCommand::Machine => {
            use std::io::Write as _;
            // Not `println!`: a closed stdout is an error to report, not a panic.
            writeln!(std::io::stdout().lock(), "{}", oracle_host::machine_line()).map_err(|e| {
                CliError {
                    code: exit::FAILED,
                    message: format!("cannot write the machine line: {e}"),
                    json: None,
                    quiet: false,
                }
            })?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn llm_stub(a: LlmStubArgs) -> Result<ExitCode, CliError> {
    let text = |p: &PathBuf| {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| CliError::input(format!("{} is not UTF-8", p.display())))
    };
    let options = oracle_llm_stub::program::Options {
        name: "oracle dev llm-stub".to_owned(),
        script: text(&a.script)?,
        addr: a.addr,
        url_file: a.url_file.as_ref().map(text).transpose()?,
        exit_when_played: a.exit_when_played,
    };
    match (&options.url_file, a.detach) {
        (Some(url_file), true) => {
            // The background copy is this very binary, so it needs nothing on PATH.
            let me = std::env::current_exe().map_err(|e| CliError {
                code: exit::FAILED,
                message: format!("cannot find oracle's own executable: {e}"),
                json: None,
                quiet: false,
            })?;
            let mut program = std::process::Command::new(me);
            program.args(["dev", "llm-stub"]);
            Ok(oracle_llm_stub::program::detach(
                &options, program, url_file,
            ))
        }
        _ => Ok(oracle_llm_stub::program::serve(&options)),
    }
}
