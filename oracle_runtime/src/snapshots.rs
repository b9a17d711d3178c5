//! Snapshot files: written atomically, and trusted only after matching the log.

use std::fs::{self, File};
use std::io::Write;
use std::path::PathBuf;

use oracle_core::{Event, Replayer, Snapshot, State};

use crate::error::{Result, StoreError};
use crate::paths::LogPaths;
use crate::reader;

fn file_name(seq: u64) -> String {
    format!("{seq:020}.json")
}

/// Writes `snapshot` atomically (temporary file, sync, rename, sync directory).
pub fn save(paths: &LogPaths, snapshot: &Snapshot) -> Result<PathBuf> {
    // Invariant: a snapshot is string keys and JSON values; serialisation cannot fail.
    let bytes = serde_json::to_vec(snapshot).expect("snapshots always serialise");
    write_atomic(paths, &file_name(snapshot.seq), &[&bytes])
}

/// Writes `parts` as the file `name` in the snapshots directory, atomically: a temporary file,
/// synced, renamed into place, the directory synced. Readers see the old file or the whole new
/// one, and a crash leaves at most a `.NAME.tmp` that no listing takes.
pub(crate) fn write_atomic(paths: &LogPaths, name: &str, parts: &[&[u8]]) -> Result<PathBuf> {
    let dir = paths.snapshots();
    fs::create_dir_all(&dir).map_err(StoreError::io(&dir))?;
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = File::create(&tmp).map_err(StoreError::io(&tmp))?;
    parts
        .iter()
        .try_for_each(|p| f.write_all(p))
        .and_then(|_| f.sync_all())
        .map_err(StoreError::io(&tmp))?;
    fs::rename(&tmp, &path).map_err(StoreError::io(&path))?;
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::io(&dir))?;
    Ok(path)
}

/// Seqs of the snapshots on disk, ascending. Files that do not look like snapshots are ignored.
pub fn list(paths: &LogPaths) -> Result<Vec<u64>> {
    seqs_named(&paths.snapshots(), ".json")
}

/// Seqs of the files in `dir` named `<seq>SUFFIX`, ascending (none when `dir` does not exist).
pub(crate) fn seqs_named(dir: &std::path::Path, suffix: &str) -> Result<Vec<u64>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(StoreError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut seqs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::io(dir))?;
        if let Some(seq) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_suffix(suffix))
            .and_then(|n| n.parse::<u64>().ok())
        {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

pub fn load(paths: &LogPaths, seq: u64) -> Result<Snapshot> {
    let path = paths.snapshots().join(file_name(seq));
    let bytes = fs::read(&path).map_err(StoreError::io(&path))?;
    let snap: Snapshot = serde_json::from_slice(&bytes).map_err(|e| StoreError::SnapshotFile {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if snap.seq != seq {
        return Err(StoreError::SnapshotFile {
            path,
            reason: format!("file is named for seq {seq} but holds seq {}", snap.seq),
        });
    }
    Ok(snap)
}

/// Replays the log up to and including `seq` and saves a snapshot of the state there.
pub fn take(paths: &LogPaths, seq: Option<u64>) -> Result<(Snapshot, PathBuf)> {
    let rebuilt = state_at(paths, seq, false)?;
    let snap = Snapshot::capture(rebuilt.seq, &rebuilt.state);
    let path = save(paths, &snap)?;
    Ok((snap, path))
}

/// The state after an event, and how it was rebuilt.
#[derive(Clone, Debug)]
pub struct Rebuilt {
    pub seq: u64,
    pub state: State,
    /// The event at `seq`.
    pub event: Event,
    /// Snapshot the replay started from, if one was usable.
    pub from_snapshot: Option<u64>,
    /// Snapshots that were refused (corrupt, or not matching the log), with why.
    pub rejected: Vec<(u64, String)>,
}

/// Rebuilds the state after event `seq` (default: the last), verifying the log up to there and
/// starting from the newest snapshot at or before `seq` that matches the log. A snapshot that
/// cannot be read or does not match is reported in `rejected` and never used; the next older
/// one (finally genesis) is tried instead.
pub fn state_at(paths: &LogPaths, seq: Option<u64>, use_snapshots: bool) -> Result<Rebuilt> {
    let mut candidates: Vec<u64> = if use_snapshots {
        list(paths)?
            .into_iter()
            .filter(|s| seq.is_none_or(|at| *s <= at))
            .collect()
    } else {
        Vec::new()
    };
    let mut rejected = Vec::new();
    loop {
        let snap = match candidates.pop() {
            None => None,
            Some(s) => match load(paths, s) {
                Ok(snap) => Some(snap),
                Err(e) => {
                    rejected.push((s, e.to_string()));
                    continue;
                }
            },
        };
        match replay_from(paths, snap.as_ref(), seq)? {
            Ok((event, state)) => {
                let from_snapshot = snap.map(|s| s.seq);
                return Ok(Rebuilt {
                    seq: event.seq,
                    state,
                    event,
                    from_snapshot,
                    rejected,
                });
            }
            Err((s, why)) => rejected.push((s, why)),
        }
    }
}

/// One pass over the log from `snap` (or genesis) to `seq`. The inner error is a snapshot the
/// log refuses.
#[allow(clippy::type_complexity)]
fn replay_from(
    paths: &LogPaths,
    snap: Option<&Snapshot>,
    seq: Option<u64>,
) -> Result<std::result::Result<(Event, State), (u64, String)>> {
    let log = &paths.log;
    let mut replayer = if snap.is_some() {
        None
    } else {
        Some(Replayer::genesis())
    };
    let mut refused = None;
    let mut last = None;
    let end = reader::scan(log, false, |e| {
        let es = e.seq;
        match (&mut replayer, snap) {
            (Some(r), _) => r.step(&e).map_err(|source| StoreError::Replay {
                path: log.clone(),
                source,
            })?,
            (None, Some(s)) if s.seq == es => match Replayer::from_snapshot(s, e.state_after) {
                Ok(r) => replayer = Some(r),
                Err(err) => {
                    refused = Some((s.seq, err.to_string()));
                    return Ok(false);
                }
            },
            // Before the snapshot: the scan verifies the chain; nothing to replay.
            (None, _) => {}
        }
        last = Some(e);
        Ok(seq.is_none_or(|at| es < at))
    })?;
    if let Some(r) = refused {
        return Ok(Err(r));
    }
    let Some(event) = last else {
        return Err(StoreError::Empty { path: log.clone() });
    };
    if let Some(at) = seq.filter(|at| event.seq < *at) {
        return Err(StoreError::SeqOutOfRange {
            path: log.clone(),
            seq: at,
            events: end.head.next_seq,
        });
    }
    match replayer {
        Some(r) => Ok(Ok((event, r.into_state()))),
        // The log ended before the snapshot's seq: the snapshot belongs to another log.
        None => Ok(Err((
            snap.map_or(0, |s| s.seq),
            "the log has no event at the snapshot's seq".into(),
        ))),
    }
}

/// The path of the snapshot file for `seq`.
pub fn path_of(paths: &LogPaths, seq: u64) -> PathBuf {
    paths.snapshots().join(file_name(seq))
}
