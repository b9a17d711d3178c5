//! `oracle keygen` and `oracle checkpoint`: Ed25519 key pairs, and signed checkpoints of a
//! log's head kept beside it as a chain, copied to a witness file (by default the run's in
//! the key's witness directory; `oracle verify --pubkey` checks both). The formats are in docs/FORMAT.md; the work is done by
//! `oracle_host::keys`.

use std::path::{Path, PathBuf};

use clap::Args;
use oracle_host::CheckpointError;
use oracle_host::keys::{self, WitnessAt};
use serde_json::json;

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Where to write the new secret key (created with mode 0600 on Unix). Its public key is
    /// written to FILE.pub. Refused, writing nothing, if either file exists: a key is never
    /// overwritten.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct CheckpointArgs {
    /// A run directory, a run id, or a log file (`events.jsonl`).
    target: PathBuf,
    /// The secret key file to sign with (from `oracle keygen`). The log is verified first;
    /// then its last event's seq and chain hash are signed and the checkpoint appended to
    /// `checkpoints.jsonl` beside the log. Give the public key (FILE.pub) to whoever will run
    /// `oracle verify --pubkey`; keep the secret key away from the machine that writes runs
    /// if the checkpoint must hold against someone who can rewrite the log there.
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// Append the signed checkpoint line to FILE (created if missing) instead of the default
    /// witness, which is KEY.witnesses/<run>.jsonl beside the key: a witness kept where the
    /// writer of the log cannot change it (with the key, another machine, an append-only
    /// store). `oracle verify --pubkey` then fails if the log or checkpoints.jsonl no longer
    /// reaches what the witness holds: the one thing that finds the newest checkpoints cut off.
    #[arg(long, value_name = "FILE", conflicts_with = "no_witness")]
    witness: Option<PathBuf>,
    /// Copy the checkpoint to no witness (then `verify --pubkey` needs --no-witness or another
    /// witness of the run, and cannot find the newest checkpoints cut off).
    #[arg(long)]
    no_witness: bool,
    /// Print one JSON object instead of text (with the signed line as `statement`).
    #[arg(long)]
    json: bool,
    /// Worker threads for verifying the log (default: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
}

/// A checkpoint error on its way to the user: exit 4 when recorded data is damaged, rewritten,
/// cut short or unproven, else 2; with its `--json` description.
pub fn cli_error(e: CheckpointError) -> CliError {
    let code = if e.is_integrity() {
        exit::INTEGRITY
    } else {
        exit::INPUT
    };
    let reason = e.to_string();
    let json = match &e {
        CheckpointError::Store(s) => exit::store_error_json(s),
        CheckpointError::Io { path, .. }
        | CheckpointError::KeyFile { path, .. }
        | CheckpointError::KeyExists { path } => {
            json!({"kind": "input", "path": path, "reason": reason})
        }
        CheckpointError::Random { .. } => json!({"kind": "input", "reason": reason}),
        CheckpointError::Malformed { path, line, .. } => {
            json!({"kind": "checkpoint_malformed", "path": path, "line": line, "seq": null, "reason": reason})
        }
        CheckpointError::BadSignature {
            path, line, seq, ..
        } => {
            json!({"kind": "checkpoint_signature", "path": path, "line": line, "seq": seq, "reason": reason})
        }
        CheckpointError::Rewritten {
            path,
            line,
            seq,
            signed,
            found,
            ..
        } => json!({
            "kind": "checkpoint_rewritten", "path": path, "line": line, "seq": seq,
            "signed": signed, "found": found, "reason": reason,
        }),
        CheckpointError::Truncated {
            path,
            line,
            seq,
            events,
            ..
        } => json!({
            "kind": "checkpoint_truncated", "path": path, "line": line, "seq": seq,
            "events": events, "reason": reason,
        }),
        CheckpointError::NoCheckpoint { path, others, .. } => json!({
            "kind": "no_checkpoint", "path": path, "line": null, "seq": null,
            "other_keys": others, "reason": reason,
        }),
        CheckpointError::Chain {
            path, line, seq, ..
        } => {
            json!({"kind": "checkpoint_chain", "path": path, "line": line, "seq": seq, "reason": reason})
        }
        CheckpointError::OtherRun {
            path,
            line,
            seq,
            signed,
            found,
        } => json!({
            "kind": "checkpoint_other_run", "path": path, "line": line, "seq": seq,
            "signed_run": signed, "run": found, "reason": reason,
        }),
        CheckpointError::NotInFile {
            path,
            line,
            seq,
            head,
            file,
        } => json!({
            "kind": "witness_not_in_file", "path": path, "line": line, "seq": seq,
            "head": head, "file": file, "reason": reason,
        }),
        CheckpointError::WitnessEmpty { path } => json!({
            "kind": "witness_empty", "path": path, "line": null, "seq": null, "reason": reason,
        }),
        CheckpointError::WitnessTooLarge { path, .. } => {
            json!({"kind": "input", "path": path, "reason": reason})
        }
        CheckpointError::WitnessMissing { path, file } => json!({
            "kind": "witness_missing", "path": path, "line": null, "seq": null,
            "file": file, "reason": reason,
        }),
    };
    CliError {
        code,
        json: Some(exit::error_json(Some(json), code, &reason)),
        message: reason,
        quiet: false,
    }
}

/// Prints the `--json` failure object when asked, and passes the error on.
fn fail(json: bool, path: &Path, err: CliError) -> CliError {
    if json {
        // A closed stdout wins: the process then exits quietly.
        if let Err(closed) =
            crate::out::json(&json!({"ok": false, "path": path, "error": err.error_value()}))
        {
            return closed;
        }
    }
    err
}

pub fn keygen(a: KeygenArgs) -> Result<u8, CliError> {
    let (public_key, public) =
        keys::generate(&a.out).map_err(|e| fail(a.json, &a.out, cli_error(e)))?;
    if a.json {
        crate::out::json(&json!({
            "ok": true,
            "secret": a.out,
            "public": public,
            "public_key": public_key.to_hex(),
        }))?;
    } else {
        outln!(
            "secret key  {}  (mode 0600: keep it private)",
            a.out.display()
        )?;
        outln!("public key  {}", public.display())?;
        outln!("  key       {}", public_key.to_hex())?;
    }
    Ok(exit::OK)
}

pub fn checkpoint(home: &Path, a: CheckpointArgs) -> Result<u8, CliError> {
    let paths = crate::resolve(home, &a.target).map_err(|e| fail(a.json, &a.target, e))?;
    let witness = match (&a.witness, a.no_witness) {
        (Some(w), _) => WitnessAt::File(w),
        (None, true) => WitnessAt::None,
        (None, false) => WitnessAt::BesideKey,
    };
    let created = keys::sign(&paths, &a.key, witness, a.threads)
        .map_err(|e| fail(a.json, &paths.log, cli_error(e)))?;
    let c = created.checkpoint;
    let chained = c.chained;
    if a.json {
        let line = c.to_line();
        crate::out::json(&json!({
            "ok": true,
            "path": paths.log,
            "file": created.file,
            "line": created.appended.line,
            "written": created.appended.written,
            "format": c.format(),
            "run": chained.map(|ch| ch.run),
            "seq": c.seq,
            "head": c.head,
            "prev": chained.map(|ch| ch.prev),
            "public_key": c.public_key.to_hex(),
            "signature": c.signature.to_hex(),
            "statement": line.trim_end_matches('\n'),
            "witness": created.witness.as_ref().map(|(file, appended)| json!({
                "file": file, "line": appended.line, "written": appended.written,
            })),
        }))?;
    } else {
        outln!("checkpoint  {}", paths.log.display())?;
        if let Some(ch) = chained {
            // The run's identity is a hash (event 0's chain hash), not its id: say so.
            outln!("  identity  {} (event 0's chain hash)", ch.run)?;
        }
        outln!("  seq       {}", c.seq)?;
        outln!("  head      {}", c.head)?;
        outln!("  key       {}", c.public_key.to_hex())?;
        let note = if created.appended.written {
            ""
        } else {
            ", already there: nothing written"
        };
        outln!(
            "  file      {} (line {}{note})",
            created.file.display(),
            created.appended.line
        )?;
        if let Some((file, appended)) = &created.witness {
            let note = if appended.written {
                ""
            } else {
                ", already there: nothing written"
            };
            outln!(
                "  witness   {} (line {}{note})",
                file.display(),
                appended.line
            )?;
        }
    }
    Ok(exit::OK)
}

impl CheckpointArgs {
    /// The run this command names (a store's run id, with `--store`).
    pub(crate) fn run_name(&self) -> String {
        self.target.to_string_lossy().into_owned()
    }
}
