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
use oracle_memory::MemorySettings;
use oracle_memory::shared::{LineSection, Store, StoreRecord, StoreState, section_of};
use serde::{Deserialize, Serialize};

use crate::seal::SealKey;
use crate::shared::{Result, SharedError, line_of};

/// Version of the base layout (a MAC line, then the CBOR of [`Body`]); unchanged.
pub const BASE_FORMAT: u64 = 1;
/// Version of the checkpoint layout: 2, indexed by line (see the module doc). A checkpoint of
/// format 1 (one CBOR body) fails format 2's header MAC and is ignored, then rebuilt.
pub const CHECKPOINT_FORMAT: u64 = 2;
/// A store's checkpoint and its compacted base, beside `store.jsonl`.
pub const CHECKPOINT_FILE: &str = "checkpoint.bin";
pub const BASE_FILE: &str = "base.bin";
/// The MAC purposes of the two files' bodies (`SealKey::mac`): one file cannot pass as the other.
const CHECKPOINT_PURPOSE: &str = "oracle v2 store checkpoint header";
/// The MAC purpose of one section's entry in a checkpoint's table.
const SECTION_PURPOSE: &str = "oracle v2 store checkpoint section";
/// The BLAKE3 contexts of a checkpoint header's id (what every section's MAC binds it to) and
/// of its whole-fold and no-line parts' digests.
const HEADER_ID: &str = "oracle v2 store checkpoint header id";
const PART_DIGEST: &str = "oracle v2 store checkpoint part";
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
/// Longest checkpoint header read (its segment list grows by one per compaction).
pub const HEADER_BYTES_MAX: u64 = 1 << 26;
/// Lines a checkpoint section holds on average: a one-line read decodes about this many lines'
/// claims, and the table (48 bytes an entry) stays under 1 byte per claim.
pub const LINES_PER_SECTION: u64 = 64;
/// Bytes of one entry of a checkpoint's table: the section's offset and length (u64 LE each)
/// and its MAC.
const TABLE_ENTRY_BYTES: u64 = 48;
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
    #[error("format {0}, not {BASE_FORMAT}")]
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
        BASE_FORMAT => Ok(body),
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
    if body.format != BASE_FORMAT {
        return Err(damaged(format!(
            "format {}, not {BASE_FORMAT}",
            body.format
        )));
    }
    base_of(name, body, same_name)
}

/// The fold the checkpoint in `dir` keeps and where in the log it stands, if there is one that
/// passes every check against `log` (the store's log, opened) and the base's `base` records;
/// `None` otherwise (it is then ignored, and replaced after the next full fold). Reads the
/// header and the whole-fold part.
pub fn read_checkpoint(
    dir: &Path,
    name: &str,
    key: &SealKey,
    base: u64,
    log: &mut File,
) -> Result<Option<(Store, LogPos)>> {
    let Some(mut ck) = Opened::open(dir, key)? else {
        return Ok(None);
    };
    let h = &ck.header;
    if h.name != name || h.base != base || !ck.anchored(log)? {
        return Ok(None);
    }
    let whole = ck.header.whole.clone();
    let Some(bytes) = ck.part(&whole)? else {
        return Ok(None);
    };
    let Ok(state) = ciborium::from_reader::<StoreState, _>(&bytes[..]) else {
        return Ok(None);
    };
    if state.records != ck.header.records || state.head != ck.header.head {
        return Ok(None);
    }
    Ok(Store::from_state(state).ok().map(|s| (s, ck.pos())))
}

/// A view of the store at the checkpoint in `dir` that answers for line (`subject`,
/// `predicate`) only (`Store::from_sections`), and where in the log it stands: read from the
/// header, the line's section and the part about no line, each checked (the header's MAC, the
/// section's MAC bound to that header, the part's digest the header names, the anchor and the
/// base named by its MAC line). `None` when any check fails or there is no checkpoint: the
/// caller then folds the whole store, which rewrites it.
pub fn read_line(
    dir: &Path,
    name: &str,
    key: &SealKey,
    log: &mut File,
    line: (&str, &str),
) -> Result<Option<(Store, LogPos, Basis)>> {
    let Some(mut ck) = Opened::open(dir, key)? else {
        return Ok(None);
    };
    let base_mac = base_mac(dir)?;
    if ck.header.name != name || ck.header.base_mac != base_mac || !ck.anchored(log)? {
        return Ok(None);
    }
    let i = section_of(line.0, line.1, ck.header.sections);
    let (Some(section), Some(rest)) = (ck.section(key, i)?, ck.part(&ck.header.rest.clone())?)
    else {
        return Ok(None);
    };
    let decoded = ciborium::from_reader::<LineSection, _>(&section[..])
        .and_then(|s| Ok((s, ciborium::from_reader::<LineSection, _>(&rest[..])?)));
    let Ok((section, rest)) = decoded else {
        return Ok(None);
    };
    let h = &ck.header;
    let Ok(head) = oracle_core::Hash::from_hex(&h.head) else {
        return Ok(None);
    };
    let store = Store::from_sections(h.settings.clone(), h.records, head, section, rest);
    let basis = Basis {
        records: h.base,
        segments: h.segments.clone(),
    };
    Ok(Some((store, ck.pos(), basis)))
}

/// The MAC line of the store's base (empty when it has none): names the base a checkpoint was
/// taken over without reading the base's body.
fn base_mac(dir: &Path) -> Result<String> {
    let path = dir.join(BASE_FILE);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(io(&path)(e)),
    };
    let mut first = Vec::new();
    file.take(MAC_LINE_BYTES)
        .read_to_end(&mut first)
        .map_err(io(&path))?;
    let end = first
        .iter()
        .position(|b| *b == b'\n')
        .unwrap_or(first.len());
    Ok(String::from_utf8_lossy(&first[..end]).into_owned())
}

/// Whether the line of `log` at `pos` is record `records - 1`, with head hash `head`.
fn anchored(log: &mut File, pos: LogPos, records: u64, head: &str) -> Result<bool> {
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
    Ok(line == line_of(&rec).as_bytes() && rec.seq + 1 == records && rec.hash == head)
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
    if !worth_writing(store.head.records, tail)
        || store.head.records <= base.records
        || pos.len == 0
    {
        return Ok(());
    }
    let bytes = layout(dir, name, key, base, &store.state(), pos)?;
    replace(&dir.join(CHECKPOINT_FILE), &bytes, false)
}

/// Whether a read that folded `tail` records after a checkpoint, to a store of `records`,
/// writes a fresh one.
pub fn worth_writing(records: u64, tail: u64) -> bool {
    tail >= TAIL_RECORDS_MIN && tail.saturating_mul(RECORDS_PER_TAIL_RECORD) >= records
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
        format: BASE_FORMAT,
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

/// Longest MAC line read (64 hex characters and a newline).
const MAC_LINE_BYTES: u64 = 65;

/// Where a part of a checkpoint lies after its table, and its digest
/// (`BLAKE3(PART_DIGEST, bytes)`, hex).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Span {
    at: u64,
    len: u64,
    digest: String,
}

/// A checkpoint's header, under its MAC: everything about the fold but its lines.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: u64,
    name: String,
    /// The records of the base the fold was taken over (0: none), and the base's MAC line
    /// (empty: none), which a one-line read checks instead of decoding the base.
    base: u64,
    base_mac: String,
    /// The log's length at the fold, and the start of the line of its last record.
    log_bytes: u64,
    anchor: u64,
    segments: Vec<Segment>,
    /// The head the fold is at: its record count and hash (hex).
    records: u64,
    head: String,
    settings: MemorySettings,
    /// How many line sections the table lists (`oracle_memory::shared::section_of`).
    sections: u64,
    /// The whole fold (`StoreState`), read by a writer; the part about no line.
    whole: Span,
    rest: Span,
}

/// A checkpoint file opened: its header checked against its MAC, the file kept open to read
/// parts from.
struct Opened {
    file: File,
    header: Header,
    /// The header's id, which every section's MAC names.
    id: oracle_core::Hash,
    /// Where the table starts, and the parts after it.
    table_at: u64,
    data_at: u64,
}

impl Opened {
    /// The checkpoint in `dir` with a header that passes its MAC and is of this format; `None`
    /// when there is none or it is not believed.
    fn open(dir: &Path, key: &SealKey) -> Result<Option<Opened>> {
        let path = dir.join(CHECKPOINT_FILE);
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        let mut head = vec![0; (MAC_LINE_BYTES + 8) as usize];
        if file.read_exact(&mut head).is_err() || head[64] != b'\n' {
            return Ok(None);
        }
        let mac = std::str::from_utf8(&head[..64])
            .ok()
            .and_then(|m| oracle_core::Hash::from_hex(m).ok());
        let mut len = [0u8; 8];
        len.copy_from_slice(&head[65..]);
        let len = u64::from_le_bytes(len);
        let (Some(mac), true) = (mac, len <= HEADER_BYTES_MAX) else {
            return Ok(None);
        };
        let mut cbor = vec![0; usize::try_from(len).unwrap_or(0)];
        if file.read_exact(&mut cbor).is_err() || !key.verify(CHECKPOINT_PURPOSE, &cbor, &mac) {
            return Ok(None);
        }
        let Ok(header) = ciborium::from_reader::<Header, _>(&cbor[..]) else {
            return Ok(None);
        };
        if header.format != CHECKPOINT_FORMAT || header.records <= header.base {
            return Ok(None);
        }
        let table_at = MAC_LINE_BYTES + 8 + len;
        let data_at = header
            .sections
            .checked_mul(TABLE_ENTRY_BYTES)
            .and_then(|t| t.checked_add(table_at));
        let Some(data_at) = data_at else {
            return Ok(None);
        };
        let id = hash_in(HEADER_ID, &cbor);
        Ok(Some(Opened {
            file,
            header,
            id,
            table_at,
            data_at,
        }))
    }

    fn pos(&self) -> LogPos {
        LogPos {
            len: self.header.log_bytes,
            last_start: self.header.anchor,
        }
    }

    /// Whether the log's line the header names is the record it folds last.
    fn anchored(&self, log: &mut File) -> Result<bool> {
        anchored(log, self.pos(), self.header.records, &self.header.head)
    }

    /// `len` bytes at `at` after the table; `None` past [`FILE_BYTES_MAX`] or the file's end.
    fn bytes_at(&mut self, at: u64, len: u64) -> Option<Vec<u8>> {
        let from = self.data_at.checked_add(at)?;
        if len > FILE_BYTES_MAX {
            return None;
        }
        let mut out = vec![0; usize::try_from(len).ok()?];
        self.file.seek(SeekFrom::Start(from)).ok()?;
        self.file.read_exact(&mut out).ok()?;
        Some(out)
    }

    /// The bytes of a part the header names, if they have its digest.
    fn part(&mut self, span: &Span) -> Result<Option<Vec<u8>>> {
        let bytes = self.bytes_at(span.at, span.len);
        Ok(bytes.filter(|b| hash_in(PART_DIGEST, b).to_hex() == span.digest))
    }

    /// The bytes of section `i`, if its table entry's MAC verifies for them and this header.
    fn section(&mut self, key: &SealKey, i: u64) -> Result<Option<Vec<u8>>> {
        let mut entry = [0u8; TABLE_ENTRY_BYTES as usize];
        let at = self.table_at + i * TABLE_ENTRY_BYTES;
        let read = self
            .file
            .seek(SeekFrom::Start(at))
            .and_then(|_| self.file.read_exact(&mut entry));
        if i >= self.header.sections || read.is_err() {
            return Ok(None);
        }
        let word = |k: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&entry[k..k + 8]);
            u64::from_le_bytes(w)
        };
        let (off, len) = (word(0), word(8));
        let mut mac = [0u8; 32];
        mac.copy_from_slice(&entry[16..]);
        let Some(bytes) = self.bytes_at(off, len) else {
            return Ok(None);
        };
        let signed = section_signed(&self.id, i, off, &bytes);
        let ok = key.verify(SECTION_PURPOSE, &signed, &oracle_core::Hash(mac));
        Ok(Some(bytes).filter(|_| ok))
    }
}

/// What a section's MAC covers: the header's id, the section's index and offset, and a BLAKE3
/// of its bytes, so a section cannot be moved to another checkpoint, index or place.
fn section_signed(id: &oracle_core::Hash, i: u64, off: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = id.as_bytes().to_vec();
    out.extend_from_slice(&i.to_le_bytes());
    out.extend_from_slice(&off.to_le_bytes());
    out.extend_from_slice(hash_in(PART_DIGEST, bytes).as_bytes());
    out
}

fn cbor<T: Serialize>(name: &str, value: &T) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).map_err(|e| SharedError::Damaged {
        name: name.into(),
        why: format!("a checkpoint did not encode: {e}"),
    })?;
    Ok(out)
}

/// Appends `bytes` to `data` and returns where they lie, with their digest.
fn push(data: &mut Vec<u8>, bytes: &[u8]) -> Span {
    let span = Span {
        at: data.len() as u64,
        len: bytes.len() as u64,
        digest: hash_in(PART_DIGEST, bytes).to_hex(),
    };
    data.extend_from_slice(bytes);
    span
}

/// The bytes of a checkpoint of `state` at `pos`: its header's MAC line, the header's length
/// (u64 LE) and CBOR, the table (one entry per section: offset, length, MAC), then the parts
/// (the whole fold, the part about no line, each section), offsets counted from the first.
fn layout(
    dir: &Path,
    name: &str,
    key: &SealKey,
    base: &Basis,
    state: &StoreState,
    pos: LogPos,
) -> Result<Vec<u8>> {
    let lines = state.memory.lines().count() as u64;
    let n = lines.div_ceil(LINES_PER_SECTION).max(1);
    let (sections, rest) = state.sections(n);
    let mut data = Vec::new();
    let whole = push(&mut data, &cbor(name, state)?);
    let rest = push(&mut data, &cbor(name, &rest)?);
    let mut spans = Vec::with_capacity(sections.len());
    for section in &sections {
        spans.push(push(&mut data, &cbor(name, section)?));
    }
    let header = Header {
        format: CHECKPOINT_FORMAT,
        name: name.into(),
        base: base.records,
        base_mac: base_mac(dir)?,
        log_bytes: pos.len,
        anchor: pos.last_start,
        segments: base.segments.clone(),
        records: state.records,
        head: state.head.clone(),
        settings: state.settings.clone(),
        sections: n,
        whole,
        rest,
    };
    let head = cbor(name, &header)?;
    let id = hash_in(HEADER_ID, &head);
    let mut out = key.mac(CHECKPOINT_PURPOSE, &head).to_hex().into_bytes();
    out.push(b'\n');
    out.extend_from_slice(&(head.len() as u64).to_le_bytes());
    out.extend_from_slice(&head);
    for (i, span) in (0u64..).zip(&spans) {
        let signed = section_signed(
            &id,
            i,
            span.at,
            &data[span.at as usize..][..span.len as usize],
        );
        out.extend_from_slice(&span.at.to_le_bytes());
        out.extend_from_slice(&span.len.to_le_bytes());
        out.extend_from_slice(key.mac(SECTION_PURPOSE, &signed).as_bytes());
    }
    out.extend_from_slice(&data);
    Ok(out)
}
