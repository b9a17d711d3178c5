//! `oracle verify`: integrity of a log, streaming, on every core; with `--pubkey`, also the
//! signed checkpoints of one key and what a witness holds (the run's witness beside the key
//! pair unless `--witness FILE` or `--no-witness`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use oracle_core::Hash;
use oracle_host::keys::{self, WitnessAt};
use oracle_host::{CheckpointError, StoreError, VerifyOptions};
use serde_json::json;

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A run directory, a run id, or a log file (`events.jsonl`).
    #[arg(required_unless_present = "memory")]
    target: Option<PathBuf>,
    /// Verify the named belief store shared by runs instead (every record's link and hash, and
    /// every claim id and decision re-read).
    #[arg(long, value_name = "NAME")]
    pub(crate) memory: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Worker threads for record checks (default: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// A head hash you hold from earlier: the log must contain it. This is what detects a log
    /// cut short exactly on a record boundary, or rewritten from some point on. The full 64 hex
    /// characters, or a prefix of at least 8 (as `oracle log` shows 12) naming one event.
    #[arg(long, value_name = "HASH")]
    head: Option<String>,
    /// A public key file (FILE.pub from `oracle keygen`): also check every checkpoint that key
    /// signed (`oracle checkpoint`, kept in `checkpoints.jsonl` beside the log). Each signature
    /// must verify and the log must still have, at the checkpoint's seq, exactly the signed
    /// hash: a log rewritten (even fully relinked) or cut short after a checkpoint fails with
    /// exit 4 naming it, and so does finding no checkpoint by that key.
    #[arg(long, value_name = "FILE")]
    pubkey: Option<PathBuf>,
    /// With --pubkey: the witness file to check instead of the default, which is the run's
    /// witness beside the key pair, KEY.witnesses/<run>.jsonl (KEY the public key's path
    /// without `.pub`, where `oracle checkpoint --key KEY` writes it). Every statement in it
    /// must be signed by the key, be of this log's run, match the log at its seq, and still be
    /// in checkpoints.jsonl; otherwise exit 4 naming it. This is what finds the newest
    /// checkpoints cut off, with the log relinked after the ones that remain; so a default
    /// witness that is missing is exit 4 too.
    #[arg(
        long,
        value_name = "FILE",
        requires = "pubkey",
        conflicts_with = "no_witness"
    )]
    witness: Option<PathBuf>,
    /// With --pubkey: check checkpoints.jsonl alone, without a witness. Its newest checkpoints
    /// cut off (with the log cut or relinked after the ones that remain) then go unseen.
    #[arg(long, requires = "pubkey")]
    no_witness: bool,
    /// The run this one was forked from (id, directory or log): also prove the shared prefix.
    /// The fork's `forked` event must stand right after the events it shares and name this run
    /// (a run's id is its directory's name; a bare log has none, so its id is not compared),
    /// and the parent's log (verified too) must hold the same hash at the last of them, which
    /// commits to every event before it. Exit 4 when it does not: code `not_the_parent` for
    /// another run than the one the fork names, `fork_prefix` otherwise.
    #[arg(long, value_name = "RUN")]
    parent: Option<PathBuf>,
}

/// Fewest hex characters of a head hash `--head` takes.
pub const HASH_PREFIX_HEX_MIN: usize = 8;

/// The stable `--json` code of a log with no events.
pub const NO_EVENTS: &str = "no_events";

/// A log that holds no event: exit 2 ([`exit::INPUT`]), code [`NO_EVENTS`]. Every run's log
/// begins with its `run_started`, so an empty one proves nothing about any run (and a log cut
/// to zero bytes looks the same): a failure, never a pass. Exit 2 rather than 4, as every
/// other refusal of an empty log is (`resume` of a run that "recorded nothing", `checkpoint`):
/// an empty log is a log that was never written to, like a missing one (exit 2), and what
/// a run shows between creating its log and its first commit.
fn no_events(log: &Path) -> CliError {
    let message = format!(
        "{}: no events: the log is empty, so it proves nothing (every run's log begins with run_started; a log cut to zero bytes looks the same)",
        log.display()
    );
    CliError {
        code: exit::INPUT,
        json: Some(exit::error_json(
            Some(json!({"kind": NO_EVENTS, "path": log, "seq": null, "reason": message})),
            exit::INPUT,
            &message,
        )),
        message,
        quiet: false,
    }
}

/// Whether the file at `log` exists and holds no byte (anything else, a missing file included,
/// is left to the verification to report).
fn is_empty_file(log: &Path) -> bool {
    std::fs::metadata(log).is_ok_and(|m| m.is_file() && m.len() == 0)
}

/// The full hash `--head` names: 64 hex characters as given, or the one event hash of `log`
/// starting with a prefix of at least [`HASH_PREFIX_HEX_MIN`]. A prefix no event has is exit 4
/// (the head you kept is not in the log); one several events share is exit 2 (give more).
fn head_of(log: &Path, text: &str) -> Result<Hash, CliError> {
    let text = text.to_ascii_lowercase();
    if let Ok(h) = text.parse::<Hash>() {
        return Ok(h);
    }
    let hex = text.chars().all(|c| c.is_ascii_hexdigit());
    if !hex || text.len() < HASH_PREFIX_HEX_MIN || text.len() > 64 {
        return Err(CliError::input(format!(
            "--head `{text}`: a head hash is 64 hex characters, or a prefix of at least {HASH_PREFIX_HEX_MIN}"
        )));
    }
    // Two are enough to call it ambiguous.
    let found = oracle_host::inspect::hashes_starting(log, &text, 2).map_err(CliError::from)?;
    match found.as_slice() {
        [h] => Ok(*h),
        [] => Err(CliError {
            code: exit::INTEGRITY,
            message: format!(
                "{}: no event's hash starts with `{text}`: the head you kept is not in this log (rewritten or cut since?)",
                log.display()
            ),
            json: None,
            quiet: false,
        }),
        _ => Err(CliError::input(format!(
            "--head `{text}` is ambiguous: several events' hashes start with it (give more characters)"
        ))),
    }
}

pub fn run(
    home: &Path,
    database: Option<&oracle_host::Database>,
    a: VerifyArgs,
) -> Result<u8, CliError> {
    if let Some(name) = &a.memory {
        return crate::stores::verify(home, database, name, a.json);
    }
    verify(home, a, false)
}

/// `oracle verify RUN --store URL`: the run was written into a temporary home (`home`), so
/// what is printed names the run as given, never the temporary file, which is gone once the
/// command ends.
pub fn run_in_store(home: &Path, a: VerifyArgs) -> Result<u8, CliError> {
    verify(home, a, true)
}

fn verify(home: &Path, a: VerifyArgs, by_name: bool) -> Result<u8, CliError> {
    let target = a.target.clone().unwrap_or_default();
    let paths = match crate::resolve(home, &target) {
        Ok(p) => p,
        Err(err) => {
            if a.json {
                crate::out::json(
                    &json!({"ok": false, "path": target, "error": exit::error_json(Some(json!({"kind": "input", "reason": err.message})), err.code, &err.message)}),
                )?;
            }
            return Err(err);
        }
    };
    // What the output calls the log: its path, or in a store the run as named.
    let shown = if by_name {
        target.clone()
    } else {
        paths.log.clone()
    };
    let parent = match &a.parent {
        Some(p) => Some(prove_parent(home, &paths.log, p, a.json)?),
        None => None,
    };
    let result = verify_resolved(&a, &paths, &shown);
    if let (Ok(exit::OK), Some((f, compared)), false) = (&result, &parent, a.json) {
        outln!(
            "  parent   {} shares events 0..{} (head {} at event {}){}",
            f.parent,
            f.seq,
            f.head,
            f.seq.saturating_sub(1),
            if *compared {
                ""
            } else {
                "; a bare log was given, so the run id was not compared"
            }
        )?;
    }
    match result {
        Err(mut err) if by_name => {
            let tmp = paths.log.display().to_string();
            err.message = err.message.replace(&tmp, &shown.display().to_string());
            Err(err)
        }
        other => other,
    }
}

/// `--parent`: the fork at `fork_log` is a fork of the run `parent` names and shares its
/// prefix (`oracle_host::inspect::prove_prefix`), or exit 4 saying why not (code
/// `not_the_parent` for another run than the one the fork names, `fork_prefix` otherwise).
/// Returns the `forked` event and whether the run's id was compared (a bare log has none).
fn prove_parent(
    home: &Path,
    fork_log: &Path,
    parent: &Path,
    json_out: bool,
) -> Result<(oracle_core::payload::Forked, bool), CliError> {
    let parent = crate::resolve(home, parent)?;
    // A run's id is its directory's name (in a store, the run as named: it is written into a
    // temporary home under that name); a bare log file carries no id to compare.
    let id = parent
        .run_dir
        .as_deref()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned());
    let proved = oracle_host::inspect::prove_prefix(fork_log, &parent.log, id.as_deref());
    proved.map(|f| (f, id.is_some())).map_err(|why| {
        let kind = why.code();
        let why = why.to_string();
        let message = format!("--parent {}: {why}", parent.log.display());
        let err = CliError {
            code: exit::INTEGRITY,
            json: Some(exit::error_json(
                Some(json!({"kind": kind, "reason": why})),
                exit::INTEGRITY,
                &message,
            )),
            message,
            quiet: false,
        };
        if json_out {
            let _ = crate::out::json(
                &json!({"ok": false, "path": fork_log, "error": err.error_value()}),
            );
        }
        err
    })
}

fn verify_resolved(
    a: &VerifyArgs,
    paths: &oracle_host::LogPaths,
    shown: &Path,
) -> Result<u8, CliError> {
    let threads = if a.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        a.threads
    };
    let pubkey = match &a.pubkey {
        Some(file) => match keys::read_public_key(file) {
            Ok(key) => Some((key, file.as_path())),
            Err(e) => {
                let err = crate::checkpoint::cli_error(e);
                if a.json {
                    crate::out::json(
                        &json!({"ok": false, "path": shown, "error": err.error_value()}),
                    )?;
                }
                return Err(err);
            }
        },
        None => None,
    };
    // Before `--head` is looked for, so an empty log is named as such rather than as a log
    // lacking the head.
    if is_empty_file(&paths.log) {
        let err = no_events(shown);
        if a.json {
            crate::out::json(&json!({"ok": false, "path": shown, "error": err.error_value()}))?;
        }
        return Err(err);
    }
    let head = match a
        .head
        .as_deref()
        .map(|h| head_of(&paths.log, h))
        .transpose()
    {
        Ok(h) => h,
        Err(err) => {
            if a.json {
                crate::out::json(
                    &json!({"ok": false, "path": shown, "error": exit::error_json(Some(json!({"kind": if err.code == exit::INTEGRITY { "head_not_found" } else { "input" }, "reason": err.message})), err.code, &err.message)}),
                )?;
            }
            return Err(err);
        }
    };
    let opts = VerifyOptions {
        threads,
        expected_head: head,
    };
    // Wall-clock time is only printed, never recorded or hashed.
    let started = Instant::now();
    let witness = match (&a.witness, a.no_witness) {
        (Some(w), _) => WitnessAt::File(w),
        (None, false) => WitnessAt::BesideKey,
        (None, true) => WitnessAt::None,
    };
    // A bar of the bytes checked on a terminal (a big log takes seconds); with --pubkey the
    // checkpoints' own pass has no counter, so a spinner.
    let size = std::fs::metadata(&paths.log).map_or(0, |m| m.len());
    let checked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let meter = match &pubkey {
        None => crate::progress::Meter::watching(
            "verifying",
            size,
            crate::progress::Unit::Bytes,
            a.json,
            checked.clone(),
        ),
        Some(_) => crate::progress::Meter::spinner("verifying", a.json),
    };
    let result = match &pubkey {
        None => oracle_host::inspect::verify(&paths.log, opts, Some(&checked))
            .map(|s| (s, None))
            .map_err(CliError::from),
        Some((key, file)) => keys::verify(paths, key, file, witness, opts)
            .map(|v| (v.summary, Some(v)))
            .map_err(|e| match e {
                CheckpointError::Store(StoreError::Empty { path }) => no_events(&path),
                other => crate::checkpoint::cli_error(other),
            }),
    };
    // Emptied between the check above and the verification.
    let result = match result {
        Ok((s, _)) if s.events == 0 => Err(no_events(shown)),
        other => other,
    };
    drop(meter);
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    match result {
        Ok((s, checked)) => {
            let checkpoints = checked.as_ref().map(|v| {
                let verified: Vec<_> = v
                    .proven
                    .iter()
                    .map(|p| json!({"line": p.line, "seq": p.seq, "head": p.head, "format": p.format}))
                    .collect();
                json!({
                    "file": v.file,
                    "public_key": v.public_key.to_hex(),
                    "run": v.run,
                    "verified": verified,
                    "other_keys": v.others,
                    "witness": v.witness.as_ref().map(|w| json!({
                        "file": w.file, "statements": w.statements, "latest_seq": w.latest_seq,
                    })),
                })
            });
            if a.json {
                crate::out::json(&json!({
                    "ok": true,
                    "path": shown,
                    "events": s.events,
                    "bytes": s.bytes,
                    "head": s.head.hash,
                    "state": s.head.state,
                    "last_time": s.head.time,
                    "threads": threads,
                    "elapsed_ms": (elapsed_ms * 1000.0).round() / 1000.0,
                    "checkpoints": checkpoints,
                    "head_kept": head.map(|h| json!({"hash": h, "found": true})),
                }))?;
            } else {
                let rate = if elapsed_ms > 0.0 {
                    s.events as f64 / elapsed_ms * 1e3
                } else {
                    0.0
                };
                outln!("valid  {}", shown.display())?;
                outln!("  events   {}", s.events)?;
                outln!("  head     {}", s.head.hash)?;
                outln!("  state    {}", s.head.state)?;
                if let Some(kept) = head {
                    // What --head proved, said plainly: a rewrite or cut before the kept head
                    // would have removed it from the chain.
                    outln!(
                        "  kept     {} is in the log: nothing up to it was rewritten or cut since you kept it",
                        kept.short()
                    )?;
                }
                if let Some(v) = &checked {
                    // In a store the checkpoints were written beside the temporary log: named
                    // as the run's, not by that path.
                    let file = match (shown != paths.log, paths.log.parent()) {
                        (true, Some(dir)) => match v.file.strip_prefix(dir) {
                            Ok(rest) => format!("{} of {}", rest.display(), shown.display()),
                            Err(_) => v.file.display().to_string(),
                        },
                        _ => v.file.display().to_string(),
                    };
                    // Non-empty: `keys::verify` fails when the key signed none.
                    let last = v.proven.iter().map(|p| p.seq).max().unwrap_or_default();
                    outln!(
                        "  signed   {} checkpoint(s) hold, latest at seq {last} ({file})",
                        v.proven.len(),
                    )?;
                    outln!("  key      {}", v.public_key.to_hex())?;
                    match &v.witness {
                        Some(w) => outln!(
                            "  witness  {} statement(s) hold, latest at seq {} ({})",
                            w.statements,
                            w.latest_seq,
                            w.file.display()
                        )?,
                        // Said, because it is the one thing --no-witness gives up.
                        None => outln!(
                            "  witness  none (--no-witness): checkpoints cut off the end of {} would go unseen",
                            v.file.display()
                        )?,
                    }
                }
                outln!("  elapsed  {elapsed_ms:.1} ms ({threads} threads, {rate:.0} events/s)")?;
            }
            Ok(exit::OK)
        }
        Err(err) => {
            if a.json {
                crate::out::json(&json!({"ok": false, "path": shown, "error": err.error_value()}))?;
            }
            Err(err)
        }
    }
}
