//! `oracle repair`, `oracle snapshot`, `oracle synth`: looking after logs.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use oracle_core::synth::{Shape, SynthConfig};
use oracle_host::maintain::{self, SynthError};
use oracle_host::{CheckpointsRepair, Durability, LogPaths, Repair};
use serde_json::{Value, json};

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct RepairArgs {
    /// A run directory, a run id, or a log file.
    target: PathBuf,
    #[arg(long)]
    json: bool,
}

pub fn repair(home: &Path, a: RepairArgs) -> Result<u8, CliError> {
    let paths = crate::resolve(home, &a.target)?;
    let log = maintain::repair_log(&paths)?;
    // Then the checkpoint file beside the log: its torn last line, if any. A damaged line
    // before it is an integrity error (exit 4) and the file is left as it is.
    let checkpoints = maintain::repair_checkpoints(&paths).map_err(crate::checkpoint::cli_error)?;
    if a.json {
        let mut v = match &log {
            Repair::Clean { head } => {
                json!({"repaired": false, "events": head.next_seq, "head": head.hash})
            }
            Repair::MovedTornTail {
                head,
                offset,
                len,
                saved_to,
            } => json!({
                "repaired": true, "events": head.next_seq, "head": head.hash,
                "torn_offset": offset, "torn_bytes": len, "saved_to": saved_to,
            }),
        };
        v["checkpoints"] = match &checkpoints {
            CheckpointsRepair::Missing => Value::Null,
            CheckpointsRepair::Clean { lines } => json!({"repaired": false, "lines": lines}),
            CheckpointsRepair::MovedTornLine {
                lines,
                offset,
                len,
                saved_to,
            } => json!({
                "repaired": true, "lines": lines, "torn_offset": offset, "torn_bytes": len,
                "saved_to": saved_to,
            }),
        };
        crate::out::json(&v)?;
        return Ok(exit::OK);
    }
    match &log {
        Repair::Clean { head } => {
            outln!(
                "nothing to repair: {} ends on a complete record ({} events)",
                paths.log.display(),
                head.next_seq
            )?;
        }
        Repair::MovedTornTail {
            head,
            offset,
            len,
            saved_to,
        } => {
            outln!("repaired {}", paths.log.display())?;
            outln!("  kept     {} events (head {})", head.next_seq, head.hash)?;
            outln!(
                "  moved    {len} torn bytes from offset {offset} to {}",
                saved_to.display()
            )?;
        }
    }
    if let CheckpointsRepair::MovedTornLine {
        lines,
        offset,
        len,
        saved_to,
    } = &checkpoints
    {
        outln!("repaired {}", paths.checkpoints().display())?;
        outln!("  kept     {lines} checkpoint line(s)")?;
        outln!(
            "  moved    {len} torn bytes from offset {offset} to {}",
            saved_to.display()
        )?;
    }
    Ok(exit::OK)
}

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    /// A run directory, a run id, or a log file.
    target: PathBuf,
    /// Snapshot the state after this event (default: the last).
    #[arg(long, value_name = "SEQ")]
    at: Option<u64>,
    #[arg(long)]
    json: bool,
}

pub fn snapshot(home: &Path, a: SnapshotArgs) -> Result<u8, CliError> {
    let paths = crate::resolve(home, &a.target)?;
    let (snap, path) = maintain::snapshot(&paths, a.at)?;
    if a.json {
        crate::out::json(
            &json!({"seq": snap.seq, "state_hash": snap.state_hash, "keys": snap.entries.len(), "path": path}),
        )?;
    } else {
        outln!(
            "snapshot after event {} ({} keys, state {}) -> {}",
            snap.seq,
            snap.entries.len(),
            snap.state_hash,
            path.display()
        )?;
    }
    Ok(exit::OK)
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ShapeArg {
    /// Five events per step: scheduled, capability, call, return, state change.
    Steps,
    /// Every event writes one state key: the worst case for replay.
    Writes,
}

/// Sync policy for appends.
#[derive(Clone, Copy, Debug, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DurabilityArg {
    /// Sync exactly where an effect needs it: before an impure tool, model or program starts,
    /// after an outside answer, and when the run stops (default; docs/SECURITY.md).
    Effect,
    /// Every step durable before the next: a sync at every step boundary, besides `effect`'s
    /// points (one sync per pure step, two per impure one).
    Event,
    /// Sync at the same points as `effect`, and also every 1000 events.
    Group,
    /// Never sync (the OS writes when it likes).
    None,
}

impl From<DurabilityArg> for Durability {
    fn from(d: DurabilityArg) -> Durability {
        match d {
            DurabilityArg::Event => Durability::Event,
            DurabilityArg::Effect => Durability::Effect,
            DurabilityArg::Group => Durability::GROUP,
            DurabilityArg::None => Durability::None,
        }
    }
}

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Number of events.
    #[arg(long, default_value_t = 1000)]
    events: u64,
    /// Seed of every random choice; the same seed gives the same bytes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Distinct state keys written.
    #[arg(long, default_value_t = 64)]
    keys: u64,
    #[arg(long, value_enum, default_value_t = ShapeArg::Steps)]
    shape: ShapeArg,
    /// Write a bare log file here (must not exist).
    #[arg(long, value_name = "FILE", conflicts_with = "run")]
    out: Option<PathBuf>,
    /// Write a run directory `<home>/runs/<ID>` (must not exist).
    #[arg(long, value_name = "ID")]
    run: Option<String>,
    #[arg(long, value_enum, default_value_t = DurabilityArg::Effect)]
    durability: DurabilityArg,
    #[arg(long)]
    json: bool,
}

pub fn synth(home: &Path, a: SynthArgs) -> Result<u8, CliError> {
    let paths = match (&a.out, &a.run) {
        (Some(f), None) => LogPaths::of_file(f),
        (None, Some(id)) => {
            if id.is_empty() || id.contains(['/', '\\']) || id == "." || id == ".." {
                return Err(CliError::input(format!(
                    "run id `{id}` must be a plain name (no path separators)"
                )));
            }
            LogPaths::of_run(&home.join("runs").join(id))
        }
        _ => {
            return Err(CliError::input(
                "say where to write: --out FILE or --run ID",
            ));
        }
    };
    if a.events == 0 {
        return Err(CliError::input(
            "--events must be at least 1 (every log starts with run_started)",
        ));
    }
    let shape = match a.shape {
        ShapeArg::Steps => Shape::Steps,
        ShapeArg::Writes => Shape::Writes,
    };
    let meter =
        crate::progress::Meter::bar("writing", a.events, crate::progress::Unit::Events, a.json);
    let config = SynthConfig {
        events: a.events,
        seed: a.seed,
        keys: a.keys,
        shape,
    };
    let head = maintain::synth(&paths, config, a.durability.into(), |n, _| {
        // Every 4096 events: the bar is redrawn at most a few times a second anyway.
        if n.is_multiple_of(4096) {
            meter.set_position(n);
        }
    })
    .map_err(|e| match e {
        SynthError::Event(_) => CliError::input(e.to_string()),
        SynthError::Store(e) => CliError::from(e),
    })?;
    drop(meter);
    if a.json {
        crate::out::json(&json!({"path": paths.log, "events": head.next_seq, "head": head.hash}))?;
    } else {
        outln!(
            "wrote {} events to {} (head {})",
            head.next_seq,
            paths.log.display(),
            head.hash
        )?;
    }
    Ok(exit::OK)
}
