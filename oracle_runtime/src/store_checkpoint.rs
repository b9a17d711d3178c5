//! A file home's store checkpoints and compacted bases: a store's fold at a verified head kept
//! beside its log, so a read folds only the records after it instead of the whole store.
//!
//! Two files in `<home>/memory/<name>/`, of one layout (a MAC line, then a CBOR body):
//!
//! - `checkpoint.bin`, a cache: the fold at some record of the log. Deleting it costs time,
//!   never data. It is believed only when checked as a run's resume point is
//!   (`crate::resume_point`): its MAC under the home's sealing key (whoever can write the
//!   store's directory could recompute a plain hash), its anchor (the line ending at the byte
//!   offset it names must be the record it names, with the head hash it names) and the base it
//!   was taken over. A checkpoint that fails any check is ignored and the store is folded from
//!   its start (or base) again, which writes a fresh one. `oracle verify --memory` never uses it.
//! - `base.bin`, written by `oracle memory compact NAME --keep N`: the fold of the records the
//!   compaction took out of the log, with each taken segment named (its seq range, the head
//!   hash at its end, and a BLAKE3 digest of its lines' bytes), so an exported copy of the old
//!   log can still be proven to be what was compacted. The log then starts at the base's head
//!   (its first record links to it). A base cannot be rebuilt: one that fails its MAC is
//!   refused (an integrity error), never ignored.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use oracle_core::hash::hash_in;
use oracle_memory::shared::{Store, StoreRecord, StoreState};
use serde::{Deserialize, Serialize};

use crate::seal::SealKey;
use crate::shared::{Result, SharedError, line_of};

/// Version of the checkpoint and base layout.
pub const CHECKPOINT_FORMAT: u64 = 1;
/// A store's checkpoint and its compacted base, beside `store.jsonl`.
pub const CHECKPOINT_FILE: &str = "checkpoint.bin";
pub const BASE_FILE: &str = "base.bin";
/// The MAC purposes of the two files' bodies (`SealKey::mac`): one file cannot pass as the other.
const CHECKPOINT_PURPOSE: &str = "oracle v1 store checkpoint";
const BASE_PURPOSE: &str = "oracle v1 store base";
/// The BLAKE3 context of a compacted segment's digest (the bytes of its lines, newlines included).
pub const SEGMENT_DIGEST: &str = "oracle v1 store compacted segment";
/// A fresh checkpoint is written once a read folds at least this many records after the last
/// one: below it, folding the tail costs less than writing the fold again.
pub const TAIL_RECORDS_MIN: u64 = 16;
/// ...and at least one record per this many the checkpoint already holds, so rewriting a large
/// fold (a million claims take about a second to write) stays a bounded share of the work.
pub const RECORDS_PER_TAIL_RECORD: u64 = 64;
/// Largest checkpoint or base file read (a bound on what a damaged or hostile file makes us load).
pub const FILE_BYTES_MAX: u64 = 1 << 32;
/// Longest anchor line read: a record's line is far shorter (a claim's fields are bounded).
pub const ANCHOR_BYTES_MAX: u64 = 1 << 24;

/// Where in the log a fold stands: the log's length and the start of its last line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogPos {
    pub len: u64,
    pub last_start: u64,
}

/// Records `[from, to)` of a store taken out of its log by a compaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub from: u64,
    pub to: u64,
    /// The hash of record `to - 1`: the head the base folds.
    pub head: String,
    /// `BLAKE3(SEGMENT_DIGEST, the segment's lines)`, hex.
    pub digest: String,
}

impl Segment {
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::json!({"from": self.from, "to": self.to, "head": self.head, "digest": self.digest})
    }
}

/// What both files hold, under their MAC.
#[derive(Debug, Serialize, Deserialize)]
struct Body {
    format: u64,
    name: String,
    /// The records of the base the fold was taken over (0: none).
    base: u64,
    /// Checkpoint: the log's length at the fold, and the start of the line of its last record.
    log_bytes: u64,
    anchor: u64,
    /// Every segment compaction took out, oldest first.
    segments: Vec<Segment>,
    state: StoreState,
}

/// A store's base as read: its fold and the segments it stands for.
pub struct Base {
    pub store: Store,
    pub segments: Vec<Segment>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SharedError + '_ {
    move |source| SharedError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The home's sealing key, which every checkpoint and base is sealed with.
pub fn key(home: &Path, name: &str) -> Result<SealKey> {
    SealKey::open_or_create(home).map_err(|e| SharedError::Backend {
        name: name.into(),
        why: e.to_string(),
    })
}

fn seal(key: &SealKey, purpose: &str, body: &Body) -> Result<Vec<u8>> {
    let mut cbor = Vec::new();
    ciborium::into_writer(body, &mut cbor).map_err(|e| SharedError::Damaged {
        name: body.name.clone(),
        why: format!("a checkpoint did not encode: {e}"),
    })?;
    let mut out = key.mac(purpose, &cbor).to_hex().into_bytes();
    out.push(b'\n');
    out.extend_from_slice(&cbor);
    Ok(out)
}

/// Why a sealed file is not believed.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("it has no MAC line, or a malformed one")]
    Mac,
    #[error("its MAC does not verify under this home's sealing key")]
    Forged,
    #[error("its body does not decode: {0}")]
    Body(String),
    #[error("format {0}, not {CHECKPOINT_FORMAT}")]
    Format(u64),
}

/// The body of a sealed file, or why it is not believed.
fn open(key: &SealKey, purpose: &str, bytes: &[u8]) -> std::result::Result<Body, Refused> {
    let i = bytes.iter().position(|b| *b == b'\n').ok_or(Refused::Mac)?;
    let (mac, cbor) = (&bytes[..i], &bytes[i + 1..]);
    let mac = std::str::from_utf8(mac)
        .ok()
        .and_then(|m| oracle_core::Hash::from_hex(m).ok())
        .ok_or(Refused::Mac)?;
    if !key.verify(purpose, cbor, &mac) {
        return Err(Refused::Forged);
    }
    let body: Body = ciborium::from_reader(cbor).map_err(|e| Refused::Body(e.to_string()))?;
    match body.format {
        CHECKPOINT_FORMAT => Ok(body),
        f => Err(Refused::Format(f)),
    }
}

/// The bytes of `path`, `None` when there is no such file; refused past [`FILE_BYTES_MAX`].
fn read_file(path: &Path) -> Result<Option<Vec<u8>>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let mut bytes = Vec::new();
    file.take(FILE_BYTES_MAX)
        .read_to_end(&mut bytes)
        .map_err(io(path))?;
    Ok(Some(bytes))
}

/// Writes `bytes` to `path` through a temporary file renamed over it; `sync`: synced first
/// (a base must survive a crash; a checkpoint is a cache).
pub fn replace(path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    // One temporary name per process and thread: two readers may write a checkpoint at once.
    let thread = format!("{:?}", std::thread::current().id());
    let thread: String = thread.chars().filter(char::is_ascii_digit).collect();
    let tmp = path.with_extension(format!("tmp.{}.{thread}", std::process::id()));
    let written = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        if sync {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.map_err(io(path))
}

/// Store `name`'s base in `dir`, if it was compacted: refused (an integrity error) when it
/// fails its MAC, since the records it folds are no longer in the log.
pub fn read_base(dir: &Path, name: &str, key: &SealKey) -> Result<Option<Base>> {
    let Some(bytes) = read_file(&dir.join(BASE_FILE))? else {
        return Ok(None);
    };
    let damaged = |why: String| SharedError::Damaged {
        name: name.into(),
        why: format!("its compacted base is refused: {why}"),
    };
    let body = open(key, BASE_PURPOSE, &bytes).map_err(|e| damaged(e.to_string()))?;
    base_of(name, body, true).map(Some)
}

/// The base `body` holds, checked: its name (when `same_name`), its fold, and that its last
/// segment ends at the fold's head.
fn base_of(name: &str, body: Body, same_name: bool) -> Result<Base> {
    let damaged = |why: String| SharedError::Damaged {
        name: name.into(),
        why: format!("its compacted base is refused: {why}"),
    };
    if same_name && body.name != name {
        return Err(damaged(format!("it is the base of store `{}`", body.name)));
    }
    let ends = body.segments.last().map(|s| (s.to, s.head.as_str()));
    if ends != Some((body.state.records, body.state.head.as_str())) {
        return Err(damaged("its last segment does not end at its head".into()));
    }
    let store = Store::from_state(body.state).map_err(|e| damaged(e.to_string()))?;
    Ok(Base {
        store,
        segments: body.segments,
    })
}

/// The BLAKE3 context of the digest a database keeps beside a base's body (`oracle_pg`): a
/// plain hash, which finds damage; whoever can write the rows could rewrite records too.
pub const BASE_DIGEST: &str = "oracle v1 store base digest";

/// Store `name`'s base as kept outside a home (a database row, an export's first line): the
/// CBOR body a `base.bin` seals, without the MAC, and its [`BASE_DIGEST`] hash, hex.
pub fn encode_base(
    name: &str,
    state: StoreState,
    segments: Vec<Segment>,
) -> Result<(Vec<u8>, String)> {
    let body = base_body(name, state, segments);
    let mut cbor = Vec::new();
    ciborium::into_writer(&body, &mut cbor).map_err(|e| SharedError::Damaged {
        name: name.into(),
        why: format!("a base did not encode: {e}"),
    })?;
    let digest = hash_in(BASE_DIGEST, &cbor).to_hex();
    Ok((cbor, digest))
}

/// The base an [`encode_base`] body holds, refused (an integrity error) when its digest is not
/// `digest` or it does not decode; `same_name`: it must be store `name`'s (false for an import
/// into a new name).
pub fn decode_base(name: &str, cbor: &[u8], digest: &str, same_name: bool) -> Result<Base> {
    let damaged = |why: String| SharedError::Damaged {
        name: name.into(),
        why: format!("its compacted base is refused: {why}"),
    };
    if hash_in(BASE_DIGEST, cbor).to_hex() != digest {
        return Err(damaged("its bytes do not match their digest".into()));
    }
    let body: Body = ciborium::from_reader(cbor).map_err(|e| damaged(e.to_string()))?;
    if body.format != CHECKPOINT_FORMAT {
        return Err(damaged(format!(
            "format {}, not {CHECKPOINT_FORMAT}",
            body.format
        )));
    }
    base_of(name, body, same_name)
}

/// The fold the checkpoint in `dir` keeps and where in the log it stands, if there is one that
/// passes every check against `log` (the store's log, opened) and the base's `base` records;
/// `None` otherwise (it is then ignored, and replaced after the next full fold).
pub fn read_checkpoint(
    dir: &Path,
    name: &str,
    key: &SealKey,
    base: u64,
    log: &mut File,
) -> Result<Option<(Store, LogPos)>> {
    let Some(bytes) = read_file(&dir.join(CHECKPOINT_FILE))? else {
        return Ok(None);
    };
    let Ok(body) = open(key, CHECKPOINT_PURPOSE, &bytes) else {
        return Ok(None);
    };
    if body.name != name || body.base != base || body.state.records <= base {
        return Ok(None);
    }
    let pos = LogPos {
        len: body.log_bytes,
        last_start: body.anchor,
    };
    if !anchored(log, pos, &body.state)? {
        return Ok(None);
    }
    Ok(Store::from_state(body.state).ok().map(|s| (s, pos)))
}

/// Whether the line of `log` at `pos` is the record `state` folds last, with its head hash.
fn anchored(log: &mut File, pos: LogPos, state: &StoreState) -> Result<bool> {
    let len = pos.len.saturating_sub(pos.last_start);
    let fits = pos.last_start < pos.len && len <= ANCHOR_BYTES_MAX;
    let log_len = log.metadata().map(|m| m.len()).unwrap_or(0);
    if !fits || pos.len > log_len {
        return Ok(false);
    }
    let mut line = vec![0; usize::try_from(len).unwrap_or(0)];
    let read = log
        .seek(SeekFrom::Start(pos.last_start))
        .and_then(|_| log.read_exact(&mut line));
    if read.is_err() || line.pop() != Some(b'\n') {
        return Ok(false);
    }
    let Ok(rec) = serde_json::from_slice::<StoreRecord>(&line) else {
        return Ok(false);
    };
    Ok(line == line_of(&rec).as_bytes() && rec.seq + 1 == state.records && rec.hash == state.head)
}

/// Writes a checkpoint of `store` (folded over base `base` and segments) at `pos`, if the
/// tail it folded since the last one (`tail` records) is long enough to be worth it.
pub fn maybe_write(
    dir: &Path,
    name: &str,
    key: &SealKey,
    base: &Basis,
    store: &Store,
    pos: LogPos,
    tail: u64,
) -> Result<()> {
    let enough = tail >= TAIL_RECORDS_MIN
        && tail.saturating_mul(RECORDS_PER_TAIL_RECORD) >= store.head.records;
    if !enough || store.head.records <= base.records || pos.len == 0 {
        return Ok(());
    }
    let body = Body {
        format: CHECKPOINT_FORMAT,
        name: name.into(),
        base: base.records,
        log_bytes: pos.len,
        anchor: pos.last_start,
        segments: base.segments.clone(),
        state: store.state(),
    };
    replace(
        &dir.join(CHECKPOINT_FILE),
        &seal(key, CHECKPOINT_PURPOSE, &body)?,
        false,
    )
}

/// What a checkpoint names of the base it was taken over.
#[derive(Clone, Debug, Default)]
pub struct Basis {
    pub records: u64,
    pub segments: Vec<Segment>,
}

/// Writes store `name`'s base (synced): `state` folds every record before the log's first.
pub fn write_base(
    dir: &Path,
    name: &str,
    key: &SealKey,
    state: StoreState,
    segments: Vec<Segment>,
) -> Result<()> {
    let body = base_body(name, state, segments);
    replace(&dir.join(BASE_FILE), &seal(key, BASE_PURPOSE, &body)?, true)
}

/// The body of store `name`'s base: a base has no log position (`log_bytes = anchor = 0`).
fn base_body(name: &str, state: StoreState, segments: Vec<Segment>) -> Body {
    Body {
        format: CHECKPOINT_FORMAT,
        name: name.into(),
        base: state.records,
        log_bytes: 0,
        anchor: 0,
        segments,
        state,
    }
}

/// The digest of a compacted segment's lines.
pub fn digest(lines: &[u8]) -> String {
    hash_in(SEGMENT_DIGEST, lines).to_hex()
}

/// Removes a store's checkpoint (after its log was rewritten), if any.
pub fn drop_checkpoint(dir: &Path) -> Result<()> {
    let path = dir.join(CHECKPOINT_FILE);
    match fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&path)(e)),
        _ => Ok(()),
    }
}

/// Opens a store's log for reading.
pub fn open_log(path: &Path) -> Result<File> {
    OpenOptions::new().read(true).open(path).map_err(io(path))
}
