//! Idempotency keys of a file home: `keys/<BLAKE3 of the key>.json` names the run a key
//! started, so a second start with the same key, plan and inputs finds that run instead of
//! starting another, and the same key with anything else is refused, naming what differs.
//!
//! The key file is an index, not a record: the run's `run_started` holds the key, and when the
//! run has a log, what a second start is compared with is read from there. An edited key file
//! can therefore make a start find no run (a new one is started) or be refused, never make a
//! run's log say what it did not record (docs/SECURITY.md).

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use oracle_core::Hash;
use oracle_core::payload::RunStarted;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::session::{Result, SessionError};

/// Where a home keeps its key files.
pub const KEYS_DIR: &str = "keys";

/// Longest key, in bytes: a key names a request (a UUID, a job id with a date), and it is
/// recorded in `run_started`, so it stays short.
pub const KEY_BYTES_MAX: usize = 256;

/// Most bytes of a key file read: one small JSON object.
const KEY_FILE_BYTES_MAX: u64 = 4096;

/// The lock that makes claims one at a time, in [`KEYS_DIR`].
const LOCK_FILE: &str = ".lock";

/// The context of the inputs' hash in a key file.
const INPUTS_CONTEXT: &str = "oracle key inputs v1";

/// The context of a fork's parent, point and value in a key file.
const FORK_CONTEXT: &str = "oracle fork key inputs v1";

/// What a key file holds: the key, the run it started, and what a second start must match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyClaim {
    pub key: String,
    pub run: String,
    /// The plan's hash (`run_started.program_hash`).
    pub plan: Hash,
    /// The hash of the bound inputs' canonical encoding; for a fork, of its parent, fork point
    /// and given value ([`KeyClaim::fork`]).
    pub inputs: Hash,
    pub seed: u64,
    /// For a fork (`oracle fork --key`): the seq of its `forked` event, where the record holds
    /// the key (a fork's first event is its parent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_at: Option<u64>,
}

impl KeyClaim {
    /// The claim a start of `run` with this plan hash, inputs and seed makes on `key`.
    pub fn new(key: &str, run: &str, plan: Hash, inputs: &Map<String, Value>, seed: u64) -> Self {
        KeyClaim {
            key: key.to_owned(),
            run: run.to_owned(),
            plan,
            inputs: inputs_hash(inputs),
            seed,
            forked_at: None,
        }
    }

    /// The claim a fork of `parent` sharing its events `0..shared` makes on `key`: `plan` is
    /// the new plan's hash, or [`Hash::ZERO`] for the parent's own; `inputs` covers the parent,
    /// the point and the value given for its step.
    pub fn fork(
        key: &str,
        run: &str,
        plan: Hash,
        parent: &str,
        shared: u64,
        value: Option<&Value>,
    ) -> Self {
        let asked = serde_json::json!({"parent": parent, "seq": shared, "value": value});
        KeyClaim {
            key: key.to_owned(),
            run: run.to_owned(),
            plan,
            inputs: oracle_core::canon::hash_value_in(FORK_CONTEXT, &asked)
                .unwrap_or_else(|_| oracle_core::hash::hash_in(FORK_CONTEXT, b"")),
            seed: 0,
            forked_at: Some(shared),
        }
    }

    /// What a fork's own `forked` event (at `at`) and the events right after it say: the
    /// record, not the index. The plan is a `plan_upgraded` that follows it; the value is the
    /// one `forked` holds, or the answer of a `resumed` that follows it (a value given for the
    /// question the fork waits on is recorded as that answer).
    fn of_forked(key: &str, run: &str, at: u64, log: &Path) -> Result<Option<KeyClaim>> {
        use oracle_core::payload::Payload;
        let mut ix = crate::index::IndexedLog::open(log)?;
        let Ok(Payload::Forked(f)) = ix.read(at)?.typed() else {
            return Ok(None);
        };
        if f.key.as_deref() != Some(key) {
            return Ok(None);
        }
        let (mut plan, mut value) = (Hash::ZERO, f.value.clone());
        // At most a `plan_upgraded` and then a `resumed` follow before the fork's own events.
        for seq in at + 1..(at + 3).min(ix.len()) {
            match ix.read(seq)?.typed() {
                Ok(Payload::PlanUpgraded(u)) => plan = u.to,
                Ok(Payload::Resumed(r)) if value.is_none() => value = Some(r.value),
                _ => break,
            }
        }
        Ok(Some(KeyClaim::fork(
            key,
            run,
            plan,
            &f.parent,
            f.seq,
            value.as_ref(),
        )))
    }

    /// What the run's own first event says, where it has one: the record, not the index.
    fn of_started(key: &str, run: &str, started: &RunStarted) -> KeyClaim {
        KeyClaim::new(
            key,
            run,
            started.program_hash,
            &started.inputs,
            started.seed,
        )
    }

    /// The names of what differs between two starts with one key: `plan`, `inputs`, `seed`.
    pub fn differs(&self, other: &KeyClaim) -> Vec<String> {
        let mut out = Vec::new();
        if self.plan != other.plan {
            out.push("plan".to_owned());
        }
        if self.inputs != other.inputs {
            out.push("inputs".to_owned());
        }
        if self.seed != other.seed {
            out.push("seed".to_owned());
        }
        out
    }
}

fn inputs_hash(inputs: &Map<String, Value>) -> Hash {
    // Inputs were checked to have a canonical encoding when they were bound; one that has none
    // hashes as the empty object's context alone, which no bound inputs equal.
    oracle_core::canon::hash_value_in(INPUTS_CONTEXT, &Value::Object(inputs.clone()))
        .unwrap_or_else(|_| oracle_core::hash::hash_in(INPUTS_CONTEXT, b""))
}

/// Why an idempotency key is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadKey {
    #[error("an idempotency key cannot be empty")]
    Empty,
    #[error(
        "an idempotency key is at most {KEY_BYTES_MAX} bytes (key_bytes_max); this one is {len}"
    )]
    TooLong { len: usize },
    #[error("an idempotency key cannot hold control characters")]
    Control,
}

/// Refuses a key that is empty, longer than [`KEY_BYTES_MAX`], or holds a control character.
pub fn check_key(key: &str) -> std::result::Result<(), BadKey> {
    if key.is_empty() {
        return Err(BadKey::Empty);
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(BadKey::TooLong { len: key.len() });
    }
    if key.chars().any(char::is_control) {
        return Err(BadKey::Control);
    }
    Ok(())
}

fn key_path(home: &Path, key: &str) -> PathBuf {
    let name = oracle_core::hash::hash_in("oracle key file v1", key.as_bytes()).to_hex();
    home.join(KEYS_DIR).join(format!("{name}.json"))
}

/// The run a key started, compared with what a new start would record: `Ok(None)` when the
/// key names no run of this home (never used, its run deleted, or the run's record does not
/// carry the key: the index is wrong and the record wins).
pub fn find(home: &Path, want: &KeyClaim) -> Result<Option<(String, Vec<String>)>> {
    Ok(live_claim(home, &want.key)?.map(|(run, recorded)| (run, recorded.differs(want))))
}

/// The run `key` names and what it recorded (its `run_started` where it has a log, else the
/// key file), if the key file names a run that holds the key.
fn live_claim(home: &Path, key: &str) -> Result<Option<(String, KeyClaim)>> {
    let claim = match read_claim(&key_path(home, key))? {
        Some(c) if c.key == key => c,
        // None, or another key's file (a hash collision is not credible; an edit is).
        _ => return Ok(None),
    };
    let dir = home.join("runs").join(&claim.run);
    if !dir.is_dir() {
        return Ok(None);
    }
    let log = crate::paths::LogPaths::of_run(&dir).log;
    if !log.exists() {
        return Ok(Some((claim.run.clone(), claim)));
    }
    if let Some(at) = claim.forked_at {
        return Ok(KeyClaim::of_forked(key, &claim.run, at, &log)?.map(|c| (claim.run.clone(), c)));
    }
    Ok(match crate::session::first_event(&log)? {
        Some(started) if started.key.as_deref() == Some(key) => Some((
            claim.run.clone(),
            KeyClaim::of_started(key, &claim.run, &started),
        )),
        _ => None,
    })
}

fn read_claim(path: &Path) -> Result<Option<KeyClaim>> {
    let bytes = match crate::fsread::read_regular_file(path, KEY_FILE_BYTES_MAX, "key_file_bytes") {
        Ok(b) => b,
        Err(e) => {
            let source = e.into_io();
            if source.kind() == std::io::ErrorKind::NotFound {
                return Ok(None);
            }
            return Err(SessionError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    // A key file that does not parse names no run: a start under its key replaces it.
    Ok(serde_json::from_slice(&bytes).ok())
}

/// Claims `claim.key` for `claim.run`: `Ok(false)` when the key names a live run already
/// ([`find`]'s sense). Claims are made one at a time (a lock on the keys directory), so two
/// starts racing on one key never both win; the key file appears whole (written aside, then
/// renamed over any stale one).
pub fn claim(home: &Path, claim: &KeyClaim) -> Result<bool> {
    let dir = home.join(KEYS_DIR);
    fs::create_dir_all(&dir).map_err(SessionError::io(&dir))?;
    let lock_path = dir.join(LOCK_FILE);
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(SessionError::io(&lock_path))?;
    // Held for a read and a rename: short, so waiting on it is bounded by other claims.
    lock.lock().map_err(SessionError::io(&lock_path))?;
    if live_claim(home, &claim.key)?.is_some() {
        return Ok(false);
    }
    let path = key_path(home, &claim.key);
    let tmp = dir.join(format!(".{}.tmp", claim.run));
    let text = serde_json::to_string_pretty(claim).unwrap_or_default();
    let mut f = fs::File::create(&tmp).map_err(SessionError::io(&tmp))?;
    f.write_all(format!("{text}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(SessionError::io(&tmp))?;
    drop(f);
    fs::rename(&tmp, &path).map_err(SessionError::io(&path))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim_of(run: &str, seed: u64) -> KeyClaim {
        KeyClaim::new("k-1", run, Hash([1; 32]), &Map::new(), seed)
    }

    #[test]
    fn a_key_is_claimed_once_and_found_with_what_differs() {
        let home = tempfile::tempdir().expect("a temporary directory");
        let h = home.path();
        fs::create_dir_all(h.join("runs/p-1")).expect("a run directory");
        assert_eq!(find(h, &claim_of("p-1", 0)).expect("find"), None);
        assert!(claim(h, &claim_of("p-1", 0)).expect("claim"));
        assert!(!claim(h, &claim_of("p-2", 0)).expect("claim"));
        assert_eq!(
            find(h, &claim_of("p-2", 0)).expect("find"),
            Some(("p-1".to_owned(), vec![]))
        );
        assert_eq!(
            find(h, &claim_of("p-2", 7)).expect("find"),
            Some(("p-1".to_owned(), vec!["seed".to_owned()]))
        );
    }

    #[test]
    fn a_key_whose_run_was_deleted_is_free_again() {
        let home = tempfile::tempdir().expect("a temporary directory");
        let h = home.path();
        assert!(claim(h, &claim_of("gone-1", 0)).expect("claim"));
        assert_eq!(find(h, &claim_of("p-2", 0)).expect("find"), None);
        fs::create_dir_all(h.join("runs/p-2")).expect("a run directory");
        assert!(claim(h, &claim_of("p-2", 0)).expect("claim"));
        assert_eq!(
            find(h, &claim_of("p-3", 0)).expect("find"),
            Some(("p-2".to_owned(), vec![]))
        );
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key("order-2026-11-26").is_ok());
        assert!(check_key("").is_err());
        assert!(check_key("a\nb").is_err());
        assert!(check_key(&"x".repeat(KEY_BYTES_MAX + 1)).is_err());
    }
}
