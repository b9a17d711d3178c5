//! Writes a run whose events carry large payloads, for measuring the server's memory under
//! load (bench/serve_memory.py, BENCHMARKS.md "Server memory under load"): `run_started`, then
//! state writes of one key whose value is a string of BYTES bytes, so every record is a little
//! larger than BYTES. Deterministic; the log verifies.
//!
//! `cargo run -p oracle_serve --example big_log -- HOME RUN EVENTS BYTES`

use std::path::PathBuf;
use std::process::ExitCode;

use oracle_core::payload::{Payload, StateChanged};
use oracle_core::synth::{Synth, SynthConfig};
use oracle_runtime::paths::LogPaths;
use oracle_runtime::{Durability, LogWriter};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [home, run, events, bytes] = args.as_slice() else {
        eprintln!("usage: big_log HOME RUN EVENTS BYTES");
        return ExitCode::from(2);
    };
    let (Ok(events), Ok(bytes)) = (events.parse::<u64>(), bytes.parse::<usize>()) else {
        eprintln!("EVENTS and BYTES are numbers");
        return ExitCode::from(2);
    };
    match write(&PathBuf::from(home), run, events, bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("big_log: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(
    home: &std::path::Path,
    run: &str,
    events: u64,
    bytes: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = home.join("runs").join(run);
    std::fs::create_dir_all(&dir)?;
    let mut w = LogWriter::create(&LogPaths::of_run(&dir), Durability::None)?;
    let first = Synth::new(SynthConfig::steps(2, 7))
        .next()
        .ok_or("no first event")??;
    w.append_sealed(&first)?;
    // One string, with each event's seq in front, so no two payloads are equal.
    let pad = "x".repeat(bytes);
    for seq in 1..events {
        let mut set = serde_json::Map::new();
        set.insert("blob".into(), format!("{seq}:{pad}").into());
        let payload = Payload::StateChanged(StateChanged {
            set,
            delete: vec![],
        });
        w.append(seq, vec![seq - 1], payload)?;
    }
    let head = w.close()?;
    println!("wrote {} events to {}", head.next_seq, dir.display());
    Ok(())
}
