//! A file home's store seal, `<home>/memory/<name>/store.seal`: the store's head sealed under
//! the home's key, as `run.json` is (`crate::seal`), so a log rewritten with its chain
//! recomputed is refused rather than believed.
//!
//! A store's hash chain finds damage, not forgery: whoever can write `store.jsonl` can write
//! new records and recompute every hash. The seal names what the home's own writers left: the
//! record count, the head hash and the log's length, under a MAC keyed by the home's sealing
//! key (`seal.key`, mode 0600, never in a store's directory). Every read checks the log against
//! it, and so does `oracle verify --memory`: a log whose head or length is not the sealed one
//! is refused (`store_tampered`).
//!
//! The rule for an append in flight (documented in docs/MEMORY.md, "Sealed stores"): a writer
//! first seals the head it intends (`next`, beside the head it stands on, `at`), synced and
//! renamed in; then appends the records and syncs them; then seals `next` alone. A reader
//! accepts a log that is exactly `at` or exactly `next`, or, when `next` adds records, a log
//! longer than `at` and shorter than `next` (an append cut short by a crash) of which it reads
//! the sealed prefix `at` only; a writer truncates that cut tail before it appends. Anything
//! else is refused. So a crash at any point leaves a log the reader takes, and nothing the
//! writer did not seal is ever read. Compaction (same head, a shorter log) and a compacted
//! import (a base, an empty log) go through the same two seals.
//!
//! A store without a seal (written before seals existed) is refused (`store_unsealed`) unless
//! its log is empty and it has no base: a deleted seal must not make a rewritten store
//! believed. `oracle memory seal NAME` adopts one after checking every record.
//!
//! What a seal does not prove: that the store is the newest the home wrote. An older copy of
//! the whole directory (log and seal together) is believed, as an older `run.json` would be.

use std::fs::{self, File};
use std::io::Read;
use std::path::Path;

use oracle_core::Hash;
use serde::{Deserialize, Serialize};

use crate::seal::SealKey;
use crate::shared::{Result, SharedError};
use crate::store_checkpoint::replace;

/// The seal's file beside `store.jsonl`.
pub const SEAL_FILE: &str = "store.seal";

/// The seal's layout version (a MAC line, then the JSON of [`Body`]).
pub const SEAL_FORMAT: u64 = 1;

/// The MAC purpose of a seal (`SealKey::mac`): no other sealed file passes as one.
const SEAL_PURPOSE: &str = "oracle v1 store seal";

/// Longest seal file read: a MAC line and two marks take a few hundred bytes.
const SEAL_BYTES_MAX: u64 = 4096;

/// A point of a store's log: how many records it holds (its base's included), the hash of the
/// last, and the log's length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mark {
    pub records: u64,
    pub head: Hash,
    pub bytes: u64,
}

/// What a seal holds, under its MAC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Body {
    pub format: u64,
    /// The store's name: a seal copied beside another store's log is refused.
    pub store: String,
    /// Where the log stands.
    pub at: Mark,
    /// Where an append (or compaction) in flight will leave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Mark>,
}

/// What a reader may take of a log, given its seal and its length: read the first `limit`
/// bytes, then the fold must end at one of `marks` (none: an unsealed empty store, which must
/// fold to nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    pub limit: u64,
    pub marks: Vec<Mark>,
}

fn tampered(name: &str, why: String) -> SharedError {
    SharedError::Tampered {
        name: name.into(),
        why,
    }
}

/// The seal of store `name` in `dir`, checked against `key`; `None` when it has none.
pub fn read(dir: &Path, name: &str, key: &SealKey) -> Result<Option<Body>> {
    let path = dir.join(SEAL_FILE);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(SharedError::Io { path, source }),
    };
    let mut bytes = Vec::new();
    file.take(SEAL_BYTES_MAX)
        .read_to_end(&mut bytes)
        .map_err(|source| SharedError::Io {
            path: path.clone(),
            source,
        })?;
    let bad = |why: &str| tampered(name, format!("its seal is refused: {why}"));
    let i = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| bad("no MAC line"))?;
    let mac = std::str::from_utf8(&bytes[..i])
        .ok()
        .and_then(|m| Hash::from_hex(m).ok())
        .ok_or_else(|| bad("a malformed MAC line"))?;
    let body = &bytes[i + 1..];
    if !key.verify(SEAL_PURPOSE, body, &mac) {
        return Err(bad(
            "its MAC does not verify under this home's sealing key (written elsewhere, or changed)",
        ));
    }
    let body: Body = serde_json::from_slice(body).map_err(|e| bad(&e.to_string()))?;
    if body.format != SEAL_FORMAT || body.store != name {
        return Err(bad(&format!(
            "it is format {} of store `{}`",
            body.format, body.store
        )));
    }
    Ok(Some(body))
}

/// Seals store `name` in `dir` at `at`, with `next` in flight: synced, renamed in, and the
/// directory synced, so the seal is durable before the log it describes changes.
pub fn write(dir: &Path, name: &str, key: &SealKey, at: Mark, next: Option<Mark>) -> Result<()> {
    let body = Body {
        format: SEAL_FORMAT,
        store: name.into(),
        at,
        next,
    };
    let json = serde_json::to_vec(&body).map_err(|e| SharedError::Damaged {
        name: name.into(),
        why: format!("a seal did not encode: {e}"),
    })?;
    let mut out = key.mac(SEAL_PURPOSE, &json).to_hex().into_bytes();
    out.push(b'\n');
    out.extend_from_slice(&json);
    replace(&dir.join(SEAL_FILE), &out, true)?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| SharedError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

/// Removes store `name`'s seal (`oracle memory forget`, before its log goes).
pub fn remove(dir: &Path) -> Result<()> {
    let path = dir.join(SEAL_FILE);
    match fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(SharedError::Io { path, source: e })
        }
        _ => Ok(()),
    }
}

/// What a reader may take of store `name`'s log of `len` bytes under `seal` (see the module
/// doc); `based`: the store has a compacted base. Refused when the log's length is none the
/// seal allows, or when there is no seal and the store is not empty.
pub fn expect(name: &str, seal: Option<&Body>, len: u64, based: bool) -> Result<Expect> {
    let Some(seal) = seal else {
        if len == 0 && !based {
            return Ok(Expect {
                limit: 0,
                marks: Vec::new(),
            });
        }
        return Err(SharedError::Unsealed { name: name.into() });
    };
    let marks: Vec<Mark> = std::iter::once(seal.at)
        .chain(seal.next)
        .filter(|m| m.bytes == len)
        .collect();
    if !marks.is_empty() {
        return Ok(Expect { limit: len, marks });
    }
    let cut = seal
        .next
        .is_some_and(|n| n.records > seal.at.records && seal.at.bytes < len && len < n.bytes);
    if cut {
        return Ok(Expect {
            limit: seal.at.bytes,
            marks: vec![seal.at],
        });
    }
    Err(tampered(
        name,
        format!(
            "its log is {len} bytes, and its seal names {} bytes{}",
            seal.at.bytes,
            seal.next
                .map_or(String::new(), |n| format!(" (or {} in flight)", n.bytes))
        ),
    ))
}

impl Expect {
    /// Whether the fold of the first `limit` bytes, ending at `records` records with head
    /// `head`, is one the seal names (an unsealed store: empty).
    pub fn check(&self, name: &str, records: u64, head: &Hash) -> Result<()> {
        let ok = match self.marks.is_empty() {
            true => records == 0,
            false => self
                .marks
                .iter()
                .any(|m| m.records == records && m.head == *head),
        };
        if ok {
            return Ok(());
        }
        Err(tampered(
            name,
            format!(
                "its log ends at record {records} with head {}, which is not what this home sealed: it was rewritten",
                head.short()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(records: u64, bytes: u64) -> Mark {
        Mark {
            records,
            head: Hash([records as u8; 32]),
            bytes,
        }
    }

    #[test]
    fn a_seal_round_trips_and_refuses_another_key_or_store() {
        let dir = tempfile::tempdir().unwrap();
        let key = SealKey::from_bytes([3; 32]);
        write(dir.path(), "a", &key, mark(2, 10), Some(mark(3, 15))).unwrap();
        let body = read(dir.path(), "a", &key).unwrap().unwrap();
        assert_eq!((body.at, body.next), (mark(2, 10), Some(mark(3, 15))));
        let other = SealKey::from_bytes([4; 32]);
        assert!(matches!(
            read(dir.path(), "a", &other),
            Err(SharedError::Tampered { .. })
        ));
        assert!(matches!(
            read(dir.path(), "b", &key),
            Err(SharedError::Tampered { .. })
        ));
    }

    /// The append-in-flight rule: `at`, `next`, or a cut tail between them (read to `at`);
    /// nothing else.
    #[test]
    fn a_log_is_taken_at_its_seal_or_the_append_in_flight() {
        let seal = Body {
            format: SEAL_FORMAT,
            store: "a".into(),
            at: mark(2, 10),
            next: Some(mark(3, 15)),
        };
        let e = |len| expect("a", Some(&seal), len, false);
        assert_eq!(e(10).unwrap().limit, 10);
        assert_eq!(e(15).unwrap().marks, vec![mark(3, 15)]);
        assert_eq!(
            e(12).unwrap(),
            Expect {
                limit: 10,
                marks: vec![mark(2, 10)]
            }
        );
        for len in [0, 9, 16, 100] {
            assert!(matches!(e(len), Err(SharedError::Tampered { .. })), "{len}");
        }
        let settled = Body { next: None, ..seal };
        assert!(expect("a", Some(&settled), 12, false).is_err());
        assert!(expect("a", None, 0, false).is_ok());
        assert!(matches!(
            expect("a", None, 0, true),
            Err(SharedError::Unsealed { .. })
        ));
        assert!(matches!(
            expect("a", None, 5, false),
            Err(SharedError::Unsealed { .. })
        ));
    }
}
