//! Resume points: the engine's whole derived state at a decision boundary, so a resume
//! re-derives only the events after it instead of the run's whole history.
//!
//! A resume point is a cache beside the log, never part of it: deleting one costs time, never
//! data, and the record's bytes are the same with or without them. A point may make a resume
//! faster, never different, so it is trusted only as far as it is checked:
//!
//! - the file's MAC under the home's sealing key (`crate::seal`): the agent's progress it holds
//!   (a step's saved output, say) is not in the log's hashes, so a point anyone but the home's
//!   owner could have written is refused, with a warning, and the resume starts further back.
//!   A plain content hash would not do: whoever can write the run directory can recompute one;
//! - its anchor: the record at the byte offset it names must be the event it names, with the
//!   hash it names, and the tail after it must verify as a chain continuing that event;
//! - its key-value state must hash to that event's recorded `state_after`.
//!
//! What the log cannot check (the agent's progress, the causal links the engine will name, the
//! projections' inputs) is checked by what follows: every event between the point and the end
//! of the record is produced again and compared with the record, so a point that would produce
//! a different run is refused there, and the resume starts from an older point or from the
//! start. `oracle replay` (the audit) never uses resume points.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use oracle_core::snapshot::SNAPSHOT_FORMAT;
use oracle_core::{Hash, Snapshot, State};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::error::{Result, StoreError};
use crate::paths::LogPaths;
use crate::recorded::Anchor;
use crate::seal::SealKey;

/// Version of the resume point file layout: 2 carries a keyed MAC where 1 had a plain content
/// hash (a point of format 1 is refused: nothing vouches for it).
pub const RESUME_POINT_FORMAT: u64 = 2;

/// Default spacing of automatic resume points: one after at least this many appended events.
/// Also at least as many events as the state has keys, and at least [`LOG_BYTES_PER_POINT_BYTE`]
/// log bytes per byte of the last point, so writing points stays a bounded share of the run's
/// work however large its state and its agent's progress grow.
pub const EVERY_EVENTS_DEFAULT: u64 = 65_536;

/// Log bytes appended between two points, per byte of the last point written (a point of 10 MB
/// waits for 80 MB of log). A point's byte costs about half a log byte to write (BENCHMARKS.md,
/// "Resume points"), so points add at most about 6% to a long run.
pub const LOG_BYTES_PER_POINT_BYTE: u64 = 8;

/// Resume points kept per run: the newest, and one older in case the newest is refused.
pub const KEPT_MAX: usize = 2;

/// Largest resume point file read (a bound on what a damaged or hostile file can make us load).
pub const FILE_BYTES_MAX: u64 = 1 << 30;

/// The MAC purpose of a resume point's body (`SealKey::mac`).
const MAC_PURPOSE: &str = "oracle v1 resume point";

/// When a run writes resume points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Appended events between two points (at least; see [`EVERY_EVENTS_DEFAULT`]). 0: never.
    pub every_events: u64,
    /// The home's sealing key, which every point is sealed with. `None`: no points are written
    /// (one nothing vouches for would never be used).
    pub key: Option<SealKey>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            every_events: EVERY_EVENTS_DEFAULT,
            key: None,
        }
    }
}

/// The engine's state after event `seq`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResumePoint {
    pub format: u64,
    /// The last event the point covers.
    pub seq: u64,
    /// Byte offset of that event's record in the log.
    pub offset: u64,
    /// That event's hash.
    pub hash: Hash,
    /// The key-value state after it.
    pub state: Snapshot,
    /// Everything else the engine derived (see `engine::Saved`), kept as its JSON text until
    /// the engine reads it (a long run's is tens of megabytes: never built as a JSON tree).
    pub engine: Box<RawValue>,
}

impl ResumePoint {
    /// Where the log's tail starts for this point.
    pub fn anchor(&self) -> Anchor {
        Anchor {
            seq: self.seq,
            offset: self.offset,
            hash: self.hash,
        }
    }
}

/// A resume point as the engine writes it: the same fields as [`ResumePoint`], borrowed and
/// serialised straight into the file's bytes (a long run's point is tens of megabytes; building
/// it as a JSON tree first doubled the memory and the time it took).
#[derive(Serialize)]
pub struct PointRef<'a, E: Serialize> {
    pub format: u64,
    pub seq: u64,
    pub offset: u64,
    pub hash: Hash,
    pub state: StateRef<'a>,
    pub engine: &'a E,
}

/// The state after event `seq`, serialised as a [`Snapshot`] of it.
pub struct StateRef<'a> {
    pub seq: u64,
    pub state: &'a State,
}

impl Serialize for StateRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        struct Entries<'a>(&'a State);
        impl Serialize for Entries<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_map(self.0.iter())
            }
        }
        let mut st = s.serialize_struct("Snapshot", 4)?;
        st.serialize_field("format", &SNAPSHOT_FORMAT)?;
        st.serialize_field("seq", &self.seq)?;
        st.serialize_field("state_hash", &self.state.hash())?;
        st.serialize_field("entries", &Entries(self.state))?;
        st.end()
    }
}

fn file_name(seq: u64) -> String {
    format!("{seq:020}.resume.json")
}

/// Seqs of the resume points of a log, ascending.
pub fn list(paths: &LogPaths) -> Result<Vec<u64>> {
    crate::snapshots::seqs_named(&paths.snapshots(), ".resume.json")
}

/// The path of the resume point after event `seq`.
pub fn path_of(paths: &LogPaths, seq: u64) -> PathBuf {
    paths.snapshots().join(file_name(seq))
}

/// Writes `point` (a [`ResumePoint`] or a [`PointRef`] after event `seq`) atomically, then
/// removes all but the newest [`KEPT_MAX`] points. The file is a header line holding the
/// MAC of the rest under `key`, then the point as JSON. Returns the file's path and the size
/// of its body.
pub fn save(
    paths: &LogPaths,
    seq: u64,
    point: &impl Serialize,
    key: &SealKey,
) -> Result<(PathBuf, u64)> {
    let body = serde_json::to_vec(point).map_err(|e| StoreError::SnapshotFile {
        path: path_of(paths, seq),
        reason: format!("cannot be written: {e}"),
    })?;
    let header = serde_json::json!({
        "format": RESUME_POINT_FORMAT,
        "mac": key.mac(MAC_PURPOSE, &body),
    })
    .to_string();
    let path =
        crate::snapshots::write_atomic(paths, &file_name(seq), &[header.as_bytes(), b"\n", &body])?;
    let seqs = list(paths)?;
    for old in seqs.iter().rev().skip(KEPT_MAX) {
        let p = path_of(paths, *old);
        fs::remove_file(&p).map_err(StoreError::io(&p))?;
    }
    Ok((path, body.len() as u64))
}

/// The body of the resume point file at `path` (the point as JSON, without its MAC line),
/// read but not checked: for a store, which keeps the bodies of a worker's points and hands
/// them to the next worker's home ([`adopt`]).
pub fn body(path: &Path) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|f| f.take(FILE_BYTES_MAX + 1).read_to_end(&mut bytes))
        .map_err(StoreError::io(path))?;
    let bad = |reason: &str| StoreError::SnapshotFile {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    if bytes.len() as u64 > FILE_BYTES_MAX {
        return Err(bad("larger than file_bytes_max"));
    }
    let nl = memchr::memchr(b'\n', &bytes).ok_or_else(|| bad("no header line"))?;
    Ok(bytes.split_off(nl + 1))
}

/// Writes the point `body` after event `seq` sealed with `key`, as [`save`] would have: a
/// store's worker vouches for the points the store kept for a run, as it vouches for the
/// run's bindings (docs/STORE.md). Nothing else is taken on trust: [`load`] and the resume
/// check the point against the log as they check any point.
pub fn adopt(paths: &LogPaths, seq: u64, body: &[u8], key: &SealKey) -> Result<PathBuf> {
    let header = serde_json::json!({
        "format": RESUME_POINT_FORMAT,
        "mac": key.mac(MAC_PURPOSE, body),
    })
    .to_string();
    crate::snapshots::write_atomic(paths, &file_name(seq), &[header.as_bytes(), b"\n", body])
}

/// Reads the resume point after event `seq`, refusing a file whose MAC under `key` is not the
/// one in its header, of another format, or not for `seq`.
pub fn load(paths: &LogPaths, seq: u64, key: &SealKey) -> Result<ResumePoint> {
    let path = path_of(paths, seq);
    read(&path, seq, key)
}

fn read(path: &Path, seq: u64, key: &SealKey) -> Result<ResumePoint> {
    let bad = |reason: String| StoreError::SnapshotFile {
        path: path.to_path_buf(),
        reason,
    };
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|f| f.take(FILE_BYTES_MAX + 1).read_to_end(&mut bytes))
        .map_err(StoreError::io(path))?;
    if bytes.len() as u64 > FILE_BYTES_MAX {
        return Err(bad(format!(
            "larger than file_bytes_max = {FILE_BYTES_MAX} bytes"
        )));
    }
    let nl = memchr::memchr(b'\n', &bytes).ok_or_else(|| bad("no header line".into()))?;
    #[derive(Deserialize)]
    struct Format {
        format: u64,
    }
    let format: Format =
        serde_json::from_slice(&bytes[..nl]).map_err(|e| bad(format!("header: {e}")))?;
    if format.format != RESUME_POINT_FORMAT {
        return Err(bad(format!(
            "format {} is not supported (expected {RESUME_POINT_FORMAT}, which is sealed with the home's key)",
            format.format
        )));
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Header {
        #[allow(dead_code)]
        format: u64,
        mac: Hash,
    }
    let header: Header =
        serde_json::from_slice(&bytes[..nl]).map_err(|e| bad(format!("header: {e}")))?;
    let body = &bytes[nl + 1..];
    if !key.verify(MAC_PURPOSE, body, &header.mac) {
        return Err(bad(
            "its MAC does not hold under this home's sealing key: it was damaged, edited, or written by another home".into(),
        ));
    }
    let point: ResumePoint = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    if point.format != RESUME_POINT_FORMAT || point.seq != seq || point.state.seq != seq {
        return Err(bad(format!(
            "the file is named for event {seq} but holds a point after event {} (state {})",
            point.seq, point.state.seq
        )));
    }
    Ok(point)
}
