//! `oracle-mcp-example [--mode MODE]`: the example MCP server as a program of its own, for the
//! tests that start it by path; everyone else runs `oracle dev mcp-example` (the same server,
//! `oracle_mcp_example::run`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match oracle_mcp_example::mode_of(&args) {
        Some(mode) => oracle_mcp_example::run(mode),
        None => {
            eprintln!("{}", oracle_mcp_example::usage());
            ExitCode::from(2)
        }
    }
}
