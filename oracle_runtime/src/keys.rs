//! Idempotency keys of a file home: `keys/<BLAKE3 of the key>.json` names the run a key
//! started, so a second start with the same key, plan and inputs finds that run instead of
//! starting another, and the same key with anything else is refused, naming what differs.
//!
//! The key file is an index, not a record: the run's `run_started` holds the key, and when the
//! run has a log, what a second start is compared with is read from there. An edited key file
//! can therefore make a start find no run (a new one is started) or be refused, never make a
//! run's log say what it did not record (docs/SECURITY.md).
//!
//! Exactly once: a start claims its key ([`take`]) before it creates anything. The claim is
//! the lock of the key's stripe (`keys/.lock-XX`, an exclusive `flock`), held while the key
//! file is read, the run's directory made, the key file written naming it, and until the run
//! can be seen to be live (its writer lock taken, or its submission written). Whoever takes
//! the stripe lock next therefore finds either a live run (and is answered with it) or a claim
//! whose claimer is gone: the kernel lets go of a lock when its process dies, so a crashed
//! start never holds a key. The rule a claimer applies to the key file it finds, lock held:
//!
//! - no key file, one that does not parse, or one naming a run that is gone: free;
//! - the run's log has a first event: live if that event holds the key (for a fork, its
//!   `forked` event at `forked_at`), free otherwise (the record wins over the index);
//! - the log has no first event yet: live while a process holds the run's writer lock (it is
//!   being started; the lock is asked before the log is read, since a writer that let go has
//!   written all it ever will) or while it is a submission with no log (its launcher or
//!   `oracle serve --recover` starts it: the claim is finished, never replaced); otherwise its
//!   start ended before anything was recorded, and the key is free: replaced, never doubled,
//!   since that run has no first event and nothing drives a run without one.

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

/// Stripes of the claim lock (`keys/.lock-00` ..): a key's claim holds its stripe's lock for
/// the few milliseconds a start takes to make its run visible, so keys sharing a stripe only
/// wait on each other that long, and a home keeps at most this many lock files (a lock file
/// per key would never be removable: removing a lock file races whoever opens it).
const LOCK_STRIPES: u8 = 64;

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
        if !log.exists() {
            return Ok(None);
        }
        let mut ix = crate::index::IndexedLog::open(log)?;
        if ix.len() <= at {
            return Ok(None);
        }
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

fn key_name(key: &str) -> Hash {
    oracle_core::hash::hash_in("oracle key file v1", key.as_bytes())
}

fn key_path(home: &Path, key: &str) -> PathBuf {
    home.join(KEYS_DIR)
        .join(format!("{}.json", key_name(key).to_hex()))
}

/// The run a key started, compared with what a new start would record: `Ok(None)` when the
/// key names no run of this home (never used, its run deleted, its start ended before its
/// first event, or the run's record does not carry the key: the index is wrong and the record
/// wins). Read without the claim lock: what it says may change at once; [`take`] decides.
pub fn find(home: &Path, want: &KeyClaim) -> Result<Option<(String, Vec<String>)>> {
    Ok(live_claim(home, &want.key)?.map(|(run, recorded)| (run, recorded.differs(want))))
}

/// The run `key` names and what it recorded (its `run_started` where it has a log, else the
/// key file), if the key file names a run that holds the key or is being started (the rule in
/// the module's documentation).
fn live_claim(home: &Path, key: &str) -> Result<Option<(String, KeyClaim)>> {
    let claim = match read_claim(&key_path(home, key))? {
        Some(c) if c.key == key => c,
        // None, or another key's file (a hash collision is not credible; an edit is).
        _ => return Ok(None),
    };
    let dir = home.join("runs").join(&claim.run);
    if claim.run.is_empty() || !dir.is_dir() {
        return Ok(None);
    }
    let paths = crate::paths::LogPaths::of_run(&dir);
    if let Some(at) = claim.forked_at {
        // A fork's log is written whole, `forked` included, before its claim is let go: a
        // shorter one is a fork that died being made.
        return Ok(
            KeyClaim::of_forked(key, &claim.run, at, &paths.log)?.map(|c| (claim.run.clone(), c))
        );
    }
    let live = Some((claim.run.clone(), claim.clone()));
    // Asked before the log is read: a writer gone by then has written all it ever will.
    let alive = writer_alive(&paths)?;
    if let Some(decided) = by_first_event(key, &claim.run, &paths.log)? {
        return Ok(decided);
    }
    if alive {
        return Ok(live);
    }
    if !paths.log.exists() {
        // Never started: a submission is started by its launcher, or by `oracle serve
        // --recover` after a crash; any other start died before making its log.
        return Ok(dir
            .join(crate::session::SUBMISSION_FILE)
            .exists()
            .then_some(live)
            .flatten());
    }
    // An empty log whose writer was gone before it was read, or one whose writer (a
    // submission's) made it since: asked again, in the same order.
    if writer_alive(&paths)? {
        return Ok(live);
    }
    Ok(by_first_event(key, &claim.run, &paths.log)?.flatten())
}

/// What a run's first event decides: `Some(Some(..))` when it holds `key` (what it recorded),
/// `Some(None)` when it holds another (the index is wrong), `None` when there is none yet.
fn by_first_event(key: &str, run: &str, log: &Path) -> Result<Option<Option<(String, KeyClaim)>>> {
    if !log.exists() {
        return Ok(None);
    }
    Ok(crate::session::first_event(log)?.map(|started| {
        (started.key.as_deref() == Some(key))
            .then(|| (run.to_owned(), KeyClaim::of_started(key, run, &started)))
    }))
}

/// Whether a process holds the run's writer lock now.
fn writer_alive(paths: &crate::paths::LogPaths) -> Result<bool> {
    crate::writer::writer_alive(paths).map_err(SessionError::io(paths.lock()))
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

/// A key this start holds: its stripe's claim lock, kept until the run the key file names is
/// live for every other start (its writer lock taken, its submission or fork written).
/// Dropping it lets the next start with the key decide (module documentation).
#[derive(Debug)]
pub struct KeyGuard {
    _lock: fs::File,
    home: PathBuf,
    key: String,
}

/// What [`take`] found.
#[derive(Debug)]
pub enum Taken {
    /// The key names no live run: this start holds it until the guard is dropped.
    Free(KeyGuard),
    /// The key names a live run already: that run, and what differs from this start.
    Used { run: String, differs: Vec<String> },
}

/// Claims `want.key` before anything of a start is created: waits for the key's stripe lock,
/// then applies the rule of the module's documentation to its key file. [`Taken::Free`] holds
/// the lock until the caller has made its run live ([`KeyGuard::record`], then a drop).
pub fn take(home: &Path, want: &KeyClaim) -> Result<Taken> {
    let dir = home.join(KEYS_DIR);
    fs::create_dir_all(&dir).map_err(SessionError::io(&dir))?;
    let stripe = key_name(&want.key).0[0] % LOCK_STRIPES;
    let lock_path = dir.join(format!(".lock-{stripe:02x}"));
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(SessionError::io(&lock_path))?;
    // Waiting is bounded by the claims ahead on this stripe, each as long as a start takes
    // to make its run live (milliseconds: a plan is compiled before the claim).
    lock.lock().map_err(SessionError::io(&lock_path))?;
    if let Some((run, recorded)) = live_claim(home, &want.key)? {
        return Ok(Taken::Used {
            run,
            differs: recorded.differs(want),
        });
    }
    Ok(Taken::Free(KeyGuard {
        _lock: lock,
        home: home.to_path_buf(),
        key: want.key.clone(),
    }))
}

impl KeyGuard {
    /// Writes the key file naming `claim.run` (the key is this guard's): whole, written aside
    /// and renamed over a stale one.
    pub fn record(&self, claim: &KeyClaim) -> Result<()> {
        let claim = KeyClaim {
            key: self.key.clone(),
            ..claim.clone()
        };
        let dir = self.home.join(KEYS_DIR);
        let path = key_path(&self.home, &claim.key);
        let tmp = dir.join(format!(".{}.tmp", claim.run));
        let text = serde_json::to_string_pretty(&claim).unwrap_or_default();
        let mut f = fs::File::create(&tmp).map_err(SessionError::io(&tmp))?;
        f.write_all(format!("{text}\n").as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(SessionError::io(&tmp))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(SessionError::io(&path))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim_of(run: &str, seed: u64) -> KeyClaim {
        KeyClaim::new("k-1", run, Hash([1; 32]), &Map::new(), seed)
    }

    /// Takes `claim.key` for `claim.run` as a start does: the run's directory made, the key
    /// file written; the guard let go. `true` when the key was free.
    fn claim(h: &Path, claim: &KeyClaim) -> Result<bool> {
        match take(h, claim)? {
            Taken::Free(guard) => {
                fs::create_dir_all(h.join("runs").join(&claim.run)).expect("a run directory");
                guard.record(claim)?;
                Ok(true)
            }
            Taken::Used { .. } => Ok(false),
        }
    }

    /// Makes run `run` live as a start does once it holds its key: an empty log, its writer
    /// lock held for as long as the returned file is.
    fn writing(h: &Path, run: &str) -> fs::File {
        let paths = crate::paths::LogPaths::of_run(&h.join("runs").join(run));
        fs::write(&paths.log, b"").expect("a log");
        let lock = fs::File::create(paths.lock()).expect("a lock file");
        lock.lock().expect("the writer lock");
        lock
    }

    #[test]
    fn a_key_is_claimed_once_and_found_with_what_differs() {
        let home = tempfile::tempdir().expect("a temporary directory");
        let h = home.path();
        assert_eq!(find(h, &claim_of("p-1", 0)).expect("find"), None);
        let Taken::Free(guard) = take(h, &claim_of("p-1", 0)).expect("take") else {
            panic!("a new key is free");
        };
        fs::create_dir_all(h.join("runs/p-1")).expect("a run directory");
        guard.record(&claim_of("p-1", 0)).expect("record");
        let _live = writing(h, "p-1");
        drop(guard);
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
        let _live = writing(h, "gone-1");
        fs::remove_dir_all(h.join("runs/gone-1")).expect("deleted");
        assert_eq!(find(h, &claim_of("p-2", 0)).expect("find"), None);
        assert!(claim(h, &claim_of("p-2", 0)).expect("claim"));
        let _live = writing(h, "p-2");
        assert_eq!(
            find(h, &claim_of("p-3", 0)).expect("find"),
            Some(("p-2".to_owned(), vec![]))
        );
    }

    /// The recovery rule, state by state: a claim whose start died before its first event
    /// (no log; an empty log no process writes) is replaced; one being started (its writer
    /// lock held) or submitted (no log yet, a submission written) is found, never replaced.
    #[test]
    fn a_dead_claim_is_replaced_and_a_live_one_is_found() {
        let home = tempfile::tempdir().expect("a temporary directory");
        let h = home.path();
        // Died after making its directory: no log.
        assert!(claim(h, &claim_of("dir-only", 0)).expect("claim"));
        assert!(claim(h, &claim_of("empty-log", 0)).expect("claim"));
        // Died with its log made, nothing in it: the lock let go.
        drop(writing(h, "empty-log"));
        assert!(claim(h, &claim_of("being-started", 0)).expect("claim"));
        let live = writing(h, "being-started");
        assert!(!claim(h, &claim_of("other", 0)).expect("claim"));
        assert_eq!(
            find(h, &claim_of("x", 0)).expect("find"),
            Some(("being-started".to_owned(), vec![]))
        );
        // Its writer gone before any first event: the next start replaces it.
        drop(live);
        assert!(claim(h, &claim_of("submitted", 0)).expect("claim"));
        let dir = h.join("runs/submitted");
        fs::write(dir.join(crate::session::SUBMISSION_FILE), b"{}").expect("a submission");
        assert!(!claim(h, &claim_of("other", 0)).expect("claim"));
        assert_eq!(
            find(h, &claim_of("x", 0)).expect("find"),
            Some(("submitted".to_owned(), vec![]))
        );
    }

    /// Property: however starts racing on one key interleave, and whichever of them die while
    /// holding the claim (with a directory and a key file made, nothing live), the key ends
    /// with exactly one live run, and every start that did not get the key was answered with
    /// that run. Each round begins from a state a crash can leave (none, a key file naming a
    /// deleted run, a directory without a log, an empty log no process writes).
    #[test]
    fn racing_starts_with_crashes_leave_one_live_run_and_answer_it() {
        const ROUNDS: usize = 24;
        const STARTERS: usize = 8;
        for round in 0..ROUNDS {
            let home = tempfile::tempdir().expect("a temporary directory");
            let h = home.path().to_path_buf();
            match round % 4 {
                0 => {}
                1 => assert!(claim(&h, &claim_of("deleted", 0)).expect("claim")),
                2 => assert!(claim(&h, &claim_of("no-log", 0)).expect("claim")),
                _ => {
                    assert!(claim(&h, &claim_of("dead", 0)).expect("claim"));
                    drop(writing(&h, "dead"));
                }
            }
            let _ = fs::remove_dir_all(h.join("runs/deleted"));
            let start = std::sync::Arc::new(std::sync::Barrier::new(STARTERS));
            let racers: Vec<_> = (0..STARTERS)
                .map(|i| {
                    let (h, start) = (h.clone(), start.clone());
                    // Which starters die holding the claim: a few, different each round.
                    let crashes = (round + i) % 3 == 0;
                    std::thread::spawn(move || {
                        let run = format!("r{i}");
                        start.wait();
                        match take(&h, &claim_of(&run, 0)).expect("take") {
                            Taken::Free(guard) => {
                                fs::create_dir_all(h.join("runs").join(&run)).expect("a dir");
                                guard.record(&claim_of(&run, 0)).expect("record");
                                if crashes {
                                    return (None, None);
                                }
                                let live = writing(&h, &run);
                                drop(guard);
                                (Some(run), Some(live))
                            }
                            Taken::Used { run, differs } => {
                                assert!(differs.is_empty());
                                (Some(run), None)
                            }
                        }
                    })
                })
                .collect();
            let outcomes: Vec<_> = racers
                .into_iter()
                .map(|r| r.join().expect("a racer"))
                .collect();
            let winners: Vec<&String> = outcomes
                .iter()
                .filter_map(|(run, live)| live.as_ref().and(run.as_ref()))
                .collect();
            assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
            for (run, _) in &outcomes {
                if let Some(run) = run {
                    assert_eq!(run, winners[0], "round {round}: {outcomes:?}");
                }
            }
            assert_eq!(
                find(&h, &claim_of("x", 0)).expect("find"),
                Some((winners[0].clone(), vec![]))
            );
        }
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key("order-2026-11-26").is_ok());
        assert!(check_key("").is_err());
        assert!(check_key("a\nb").is_err());
        assert!(check_key(&"x".repeat(KEY_BYTES_MAX + 1)).is_err());
    }
}
