//! `oracle verify`: integrity of a log, streaming, on every core.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use oracle_core::Hash;
use oracle_runtime::{VerifyOptions, verify_file};
use serde_json::json;

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A run directory, a run id, or a log file (`events.jsonl`).
    target: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Worker threads for record checks (default: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// A head hash you hold from earlier: the log must contain it. This is what detects a log
    /// cut short exactly on a record boundary, or rewritten from some point on.
    #[arg(long, value_name = "HASH")]
    head: Option<Hash>,
}

pub fn run(home: &Path, a: VerifyArgs) -> Result<u8, CliError> {
    let paths = match crate::resolve(home, &a.target) {
        Ok(p) => p,
        Err(err) => {
            if a.json {
                crate::print_json(
                    &json!({"ok": false, "path": a.target, "error": {"kind": "input", "reason": err.message}}),
                );
            }
            return Err(err);
        }
    };
    let threads = if a.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        a.threads
    };
    // Wall-clock time is only printed, never recorded or hashed.
    let started = Instant::now();
    let result = verify_file(
        &paths.log,
        VerifyOptions {
            threads,
            expected_head: a.head,
        },
    );
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    match result {
        Ok(s) => {
            if a.json {
                crate::print_json(&json!({
                    "ok": true,
                    "path": paths.log,
                    "events": s.events,
                    "bytes": s.bytes,
                    "head": s.head.hash,
                    "state": s.head.state,
                    "last_time": s.head.time,
                    "threads": threads,
                    "elapsed_ms": (elapsed_ms * 1000.0).round() / 1000.0,
                }));
            } else {
                let rate = if elapsed_ms > 0.0 {
                    s.events as f64 / elapsed_ms * 1e3
                } else {
                    0.0
                };
                println!("valid  {}", paths.log.display());
                println!("  events   {}", s.events);
                println!("  head     {}", s.head.hash);
                println!("  state    {}", s.head.state);
                println!("  elapsed  {elapsed_ms:.1} ms ({threads} threads, {rate:.0} events/s)");
            }
            Ok(exit::OK)
        }
        Err(e) => {
            let err = CliError::from(e);
            if a.json {
                crate::print_json(&json!({"ok": false, "path": paths.log, "error": err.json}));
            }
            Err(err)
        }
    }
}
