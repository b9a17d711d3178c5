//! Named belief stores shared by runs: their hash-chained records and the projection of them.
//!
//! A store is a log of its own: every record carries one payload of a kind a run's log already
//! has (`tool_returned` of `memory.assert` for a claim a run published, `adjudicated`,
//! `adjudications_expired`, `claim_recorded`, `reinstated`), so the store's memory is exactly
//! [`Memory::apply`] folded over its records, with the same gate and the same verdict rules as
//! one run. What a store adds is who wrote each record (`run`) and a per-writer key, so a run
//! that publishes again after a crash gets its first answer back instead of a second claim.
//! Pure: reading and writing the file, and the lock, are the runtime's (`oracle_runtime::shared`).
//!
//! Logical time in a store is its own: record `seq` is at tick `seq + 1`, so every record takes
//! a tick strictly after the one before it and `--as-of` any recorded tick never changes.

use std::collections::BTreeMap;

use oracle_core::hash::{Hash, chain_link, hash_in};
use oracle_core::payload::ToolReturned;
use oracle_core::{EventKind, Payload};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::claim::{Claim, ClaimId, Origin};
use crate::error::MemoryError;
use crate::memory::Memory;
use crate::settings::MemorySettings;
use crate::tools::{self, QueryOutcome};

/// The BLAKE3 context of a store record's body.
pub const STORE_RECORD: &str = "oracle v1 store record";
/// Longest store name, in bytes: a directory name with room to spare under any file system's
/// 255-byte limit.
pub const STORE_NAME_BYTES_MAX: u64 = 64;
/// The `run` of a record given from outside any run (a verdict, a sweep, `oracle claim`).
pub const OUTSIDE: &str = "";

/// Why a store name, a store record or a ledger record is refused. Each message is worded as
/// before this type existed (a damaged store's error quotes it).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "`{name}` is not a store name: 1 to {STORE_NAME_BYTES_MAX} bytes of a-z, 0-9, `-`, `_`, `.`, not starting with `.`"
    )]
    Name { name: String },
    /// A record's body has no canonical form.
    #[error("{0}")]
    Encode(#[from] oracle_core::canon::CanonError),
    #[error("{0}")]
    Kind(#[from] oracle_core::payload::UnknownKind),
    #[error("{0}")]
    Payload(#[from] oracle_core::payload::PayloadError),
    #[error("store record {seq}: has seq {found_seq} time {found_time}")]
    Place {
        seq: u64,
        found_seq: u64,
        found_time: u64,
    },
    #[error("store record {seq}: does not link to the record before it")]
    Link { seq: u64 },
    #[error("store record {seq}: hash {found} is not {computed}")]
    Hash {
        seq: u64,
        found: String,
        computed: String,
    },
    /// A record whose payload does not decode.
    #[error("store record {seq}: {source}")]
    Undecodable { seq: u64, source: Box<StoreError> },
    /// A record the memory's projection refuses.
    #[error("store record {seq}: {source}")]
    Projection {
        seq: u64,
        source: crate::error::ProjectionError,
    },
    #[error("record {found} should be {seq}")]
    LedgerPlace { seq: u64, found: u64 },
    #[error("record {seq} does not link to the one before")]
    LedgerLink { seq: u64 },
    #[error("record {seq}: hash {found} is not {computed}")]
    LedgerHash {
        seq: u64,
        found: String,
        computed: String,
    },
}

/// Whether `name` may name a store: 1 to [`STORE_NAME_BYTES_MAX`] bytes of lowercase ASCII
/// letters, digits, `-`, `_` and `.`, not starting with `.` (it is a directory name).
pub fn check_name(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() as u64 <= STORE_NAME_BYTES_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
    match ok {
        true => Ok(()),
        false => Err(StoreError::Name {
            name: name.to_owned(),
        }),
    }
}

/// One record of a store, as its line holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreRecord {
    pub seq: u64,
    pub time: u64,
    /// The run that wrote it ([`OUTSIDE`] for a verdict, sweep or outside claim).
    pub run: String,
    /// The writer's key for it (a run: the seq of the event that records the answer), so a
    /// retry finds it; empty for records from outside.
    pub key: String,
    pub kind: String,
    pub payload: Value,
    pub prev: String,
    pub hash: String,
}

impl StoreRecord {
    /// The hash a record's fields give: `H_chain(prev ‖ H_store_record(canonical body))`.
    fn computed(&self, prev: &Hash) -> Result<Hash, StoreError> {
        let body = json!({
            "seq": self.seq, "time": self.time, "run": self.run, "key": self.key,
            "kind": self.kind, "payload": self.payload,
        });
        let bytes = oracle_core::canon::encode(&body)?;
        Ok(chain_link(prev, &hash_in(STORE_RECORD, &bytes)))
    }

    /// The typed payload.
    pub fn typed(&self) -> Result<Payload, StoreError> {
        let kind: EventKind = self.kind.parse()?;
        Ok(Payload::decode(kind, &self.payload)?)
    }
}

/// Where a store stands: how many records, and the hash of the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreHead {
    pub records: u64,
    pub hash: Hash,
}

impl StoreHead {
    /// The store's logical time: the tick of its last record.
    pub fn time(&self) -> u64 {
        self.records
    }

    /// How an answer names it: `{seq, head}` (`seq`: the records it had).
    pub fn to_value(&self, name: &str) -> Value {
        json!({"name": name, "records": self.records, "head": self.hash.to_hex()})
    }
}

/// A store's memory: the fold of its records, with who wrote each claim.
#[derive(Clone, Debug)]
pub struct Store {
    pub memory: Memory,
    pub settings: MemorySettings,
    pub head: StoreHead,
    /// The run that published each claim ([`OUTSIDE`] for `oracle claim`).
    pub writers: BTreeMap<ClaimId, String>,
    /// The record each (run, key) wrote.
    published: BTreeMap<(String, String), u64>,
    /// The records folded since the store was read from its start, its base or a checkpoint,
    /// in order (all of them when read from the first record).
    pub records: Vec<StoreRecord>,
    /// The seq of `records[0]`: 0, or the head a base or checkpoint folded.
    pub first: u64,
}

/// A store's fold at its head without its records: what a checkpoint or a compacted store's
/// base keeps (`oracle_runtime::store_checkpoint`). Its maps have non-string keys: it is
/// written in a binary encoding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreState {
    pub memory: Memory,
    pub settings: MemorySettings,
    pub records: u64,
    /// The head hash, hex.
    pub head: String,
    pub writers: BTreeMap<ClaimId, String>,
    pub published: BTreeMap<(String, String), u64>,
}

/// The BLAKE3 context of the key that places a line in a checkpoint's section.
pub const SECTION_OF_LINE: &str = "oracle v1 store checkpoint section of a line";

/// The section (below `n`, at least one) a line's records are kept in by a checkpoint cut into
/// `n` sections: the first 8 bytes of a BLAKE3 of the line, little-endian, modulo `n`. Fixed by
/// the line's bytes alone, so a reader finds a line's section without reading any other.
pub fn section_of(subject: &str, predicate: &str, n: u64) -> u64 {
    let mut bytes = (subject.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(subject.as_bytes());
    bytes.extend_from_slice(predicate.as_bytes());
    let h = hash_in(SECTION_OF_LINE, &bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(first) % n.max(1)
}

/// A part of a store's fold about some lines: their memory ([`Memory::split`]) and who wrote
/// each of their claims. What a checkpoint keeps per section, and what it keeps about no line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineSection {
    pub memory: Memory,
    pub writers: BTreeMap<ClaimId, String>,
}

impl StoreState {
    /// The fold cut into `n` sections by [`section_of`], and the part about no line: a query
    /// or history of one line reads the same from its section and that part
    /// ([`Store::from_sections`]) as from the whole.
    pub fn sections(&self, n: u64) -> (Vec<LineSection>, LineSection) {
        let split = self
            .memory
            .split(n, |(s, p): &crate::memory::Line| section_of(s, p, n));
        let mut rest = LineSection {
            memory: split.rest,
            writers: BTreeMap::new(),
        };
        let mut sections: Vec<LineSection> = split
            .sections
            .into_iter()
            .map(|memory| LineSection {
                memory,
                writers: BTreeMap::new(),
            })
            .collect();
        for (id, run) in &self.writers {
            let at = self.memory.entry(id).map(|e| {
                let (s, p) = e.claim.line();
                section_of(&s, &p, n)
            });
            let part = at
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| sections.get_mut(i))
                .unwrap_or(&mut rest);
            part.writers.insert(*id, run.clone());
        }
        (sections, rest)
    }
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

impl Store {
    /// An empty store. Its settings are the defaults: an oracle answers conflicts (they are
    /// queued), requests never expire, windows are trusted at 50 %.
    pub fn new() -> Store {
        Store {
            memory: Memory::new(),
            settings: MemorySettings::default(),
            head: StoreHead {
                records: 0,
                hash: Hash::ZERO,
            },
            writers: BTreeMap::new(),
            published: BTreeMap::new(),
            records: Vec::new(),
            first: 0,
        }
    }

    /// The fold at the head, without the records.
    pub fn state(&self) -> StoreState {
        StoreState {
            memory: self.memory.clone(),
            settings: self.settings.clone(),
            records: self.head.records,
            head: self.head.hash.to_hex(),
            writers: self.writers.clone(),
            published: self.published.clone(),
        }
    }

    /// The store a [`StoreState`] keeps, ready to fold the records after its head.
    pub fn from_state(state: StoreState) -> Result<Store, StoreError> {
        let hash =
            Hash::from_hex(&state.head).map_err(|_| StoreError::Link { seq: state.records })?;
        Ok(Store {
            memory: state.memory,
            settings: state.settings,
            head: StoreHead {
                records: state.records,
                hash,
            },
            writers: state.writers,
            published: state.published,
            records: Vec::new(),
            first: state.records,
        })
    }

    /// A view of the store at head `head` (`records` records) that answers exactly for the
    /// lines of `section` (queries and histories of those lines, with their writers), from a
    /// checkpoint's section and its part about no line; ready to fold the records after the
    /// head. It knows no (run, key) publications: it must never decide a write.
    pub fn from_sections(
        settings: MemorySettings,
        records: u64,
        head: Hash,
        section: LineSection,
        rest: LineSection,
    ) -> Store {
        let mut writers = section.writers;
        writers.extend(rest.writers);
        Store {
            memory: section.memory.merge(&rest.memory),
            settings,
            head: StoreHead {
                records,
                hash: head,
            },
            writers,
            published: BTreeMap::new(),
            records: Vec::new(),
            first: records,
        }
    }

    /// Folds the next record, checking its place, its chain link and its meaning (claim ids
    /// recomputed by the memory's projection).
    pub fn apply(&mut self, rec: StoreRecord) -> Result<(), StoreError> {
        let seq = self.head.records;
        if rec.seq != seq || rec.time != seq + 1 {
            return Err(StoreError::Place {
                seq,
                found_seq: rec.seq,
                found_time: rec.time,
            });
        }
        if rec.prev != self.head.hash.to_hex() {
            return Err(StoreError::Link { seq });
        }
        let hash = rec.computed(&self.head.hash)?;
        if rec.hash != hash.to_hex() {
            return Err(StoreError::Hash {
                seq,
                found: rec.hash,
                computed: hash.to_hex(),
            });
        }
        let payload = rec.typed().map_err(|e| StoreError::Undecodable {
            seq,
            source: Box::new(e),
        })?;
        self.memory
            .apply(seq, rec.time, &payload)
            .map_err(|source| StoreError::Projection { seq, source })?;
        if let Some(id) = claim_of(&payload) {
            self.writers.insert(id, rec.run.clone());
        }
        if !rec.key.is_empty() {
            self.published
                .insert((rec.run.clone(), rec.key.clone()), seq);
        }
        self.head = StoreHead {
            records: seq + 1,
            hash,
        };
        self.records.push(rec);
        Ok(())
    }

    /// The next record, sealed at the head: `payload` written by `run` under `key`.
    pub fn seal(&self, run: &str, key: &str, payload: &Payload) -> Result<StoreRecord, StoreError> {
        let mut rec = StoreRecord {
            seq: self.head.records,
            time: self.head.records + 1,
            run: run.to_owned(),
            key: key.to_owned(),
            kind: payload.kind().as_str().to_owned(),
            payload: payload.to_value(),
            prev: self.head.hash.to_hex(),
            hash: String::new(),
        };
        rec.hash = rec.computed(&self.head.hash)?.to_hex();
        Ok(rec)
    }

    /// The seq of the record `run` wrote under `key`, if any.
    pub fn published_seq(&self, run: &str, key: &str) -> Option<u64> {
        self.published
            .get(&(run.to_owned(), key.to_owned()))
            .copied()
    }

    /// The record `run` wrote under `key`, if any and folded since this store was read (a
    /// record before its checkpoint is read again from the log by the caller).
    pub fn published(&self, run: &str, key: &str) -> Option<&StoreRecord> {
        let seq = self.published_seq(run, key)?;
        self.records
            .get(usize::try_from(seq.checked_sub(self.first)?).ok()?)
    }

    /// `memory.assert` of `input` by step `step` of `run`: the gate's decision against the
    /// store's memory, as the record to append (`None` when `run` published under `key`
    /// already: that record is the answer).
    pub fn publish(
        &self,
        run: &str,
        key: &str,
        step: &str,
        input: &Value,
    ) -> Result<Option<StoreRecord>, MemoryError> {
        if self.published_seq(run, key).is_some() {
            return Ok(None);
        }
        let seq = self.head.records;
        let origin = Origin {
            seq,
            time: seq + 1,
            step: step.to_owned(),
            tool: tools::ASSERT.to_owned(),
        };
        let output = tools::assert(&self.memory, input, &origin, &self.settings)?;
        let payload = Payload::ToolReturned(ToolReturned {
            step: step.to_owned(),
            tool: tools::ASSERT.to_owned(),
            attempt: 0,
            output,
        });
        self.seal(run, key, &payload)
            .map(Some)
            .map_err(|e| MemoryError::Input(e.to_string()))
    }

    /// What a run is told about a published record: the assertion, its writers, and the store
    /// at that moment.
    pub fn answer_of(&self, name: &str, rec: &StoreRecord) -> Value {
        let mut out = rec
            .payload
            .get("output")
            .cloned()
            .unwrap_or_else(|| json!({}));
        self.annotate(name, &mut out);
        out
    }

    /// Adds `store` (name, records, head) and, for a request, the runs behind both claims.
    pub fn annotate(&self, name: &str, out: &mut Value) {
        let runs = request_runs(self, out);
        if let Value::Object(m) = out {
            if let Some(r) = runs {
                m.insert("runs".into(), r);
            }
            m.insert("store".into(), self.head.to_value(name));
        }
    }

    /// `memory.query` against the store at its current time.
    pub fn query(&self, name: &str, input: &Value) -> Result<QueryOutcome, MemoryError> {
        let now = self.head.time();
        match tools::query(&self.memory, input, &self.settings, now)? {
            QueryOutcome::Answer(mut v) => {
                self.annotate(name, &mut v);
                Ok(QueryOutcome::Answer(v))
            }
            QueryOutcome::Wait(why) => Ok(QueryOutcome::Wait(format!("{why} in store {name}"))),
        }
    }

    /// `memory.history` against the store.
    pub fn history(&self, name: &str, input: &Value) -> Result<Value, MemoryError> {
        let mut v = tools::history(&self.memory, input)?;
        self.annotate(name, &mut v);
        Ok(v)
    }

    /// The run that wrote claim `id` ([`OUTSIDE`] for `oracle claim`), if the store has it.
    pub fn writer(&self, id: &ClaimId) -> Option<&str> {
        self.writers.get(id).map(String::as_str)
    }

    /// A claim the store would accept from outside (`oracle claim --memory`), decided now.
    pub fn decide_outside(&self, claim: Claim) -> Result<crate::Assertion, MemoryError> {
        let seq = self.head.records;
        crate::external::decide(&self.memory, claim, seq, seq + 1, &self.settings)
    }
}

/// The claim a record adds, if it adds one.
fn claim_of(payload: &Payload) -> Option<ClaimId> {
    let out = match payload {
        Payload::ToolReturned(r) if r.tool == tools::ASSERT => &r.output,
        Payload::ClaimRecorded(c) => &c.assertion,
        _ => return None,
    };
    serde_json::from_value(out.get("id")?.clone()).ok()
}

/// `{challenger, incumbent}` runs of the request in an assertion's output, if it opened one.
fn request_runs(store: &Store, out: &Value) -> Option<Value> {
    let req = out.get("adjudication").filter(|a| !a.is_null())?;
    let id = |k: &str| -> Option<ClaimId> { serde_json::from_value(req.get(k)?.clone()).ok() };
    let challenger = id("challenger")?;
    let incumbent = id("incumbent")?;
    let challenger_run = store.writer(&challenger);
    Some(json!({
        // The challenger is being recorded now when it is not in the store yet.
        "challenger": challenger_run,
        "incumbent": store.writer(&incumbent),
    }))
}

/// The runs behind a pending request of the store: `(challenger's, incumbent's)`.
pub fn runs_of(store: &Store, req: &crate::memory::RequestState) -> (String, String) {
    let name = |id: &ClaimId| store.writer(id).unwrap_or("?").to_owned();
    (name(&req.request.challenger), name(&req.incumbent()))
}

/// The BLAKE3 context of a home ledger record's body.
pub const LEDGER_RECORD: &str = "oracle v1 memory ledger record";
/// The `kind` of a ledger record saying a store was deleted whole (`oracle memory forget`).
pub const FORGOTTEN: &str = "forgotten";

/// One record of a home's store ledger (`<home>/memory/ledger.jsonl`): what was done to a
/// store as a whole, hash-chained like a store's records. A `forgotten` record keeps the
/// store's name, length and head (so a run's recorded copies can still be matched to the store
/// they came from) and none of its claims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerRecord {
    pub seq: u64,
    pub kind: String,
    pub store: String,
    /// The store's record count and head hash when it was forgotten.
    pub records: u64,
    pub head: String,
    pub note: String,
    pub prev: String,
    pub hash: String,
}

impl LedgerRecord {
    /// `H_chain(prev ‖ H_ledger_record(canonical body))`.
    fn computed(&self, prev: &Hash) -> Result<Hash, StoreError> {
        let body = json!({
            "seq": self.seq, "kind": self.kind, "store": self.store, "records": self.records,
            "head": self.head, "note": self.note,
        });
        let bytes = oracle_core::canon::encode(&body)?;
        Ok(chain_link(prev, &hash_in(LEDGER_RECORD, &bytes)))
    }
}

/// A home's ledger, every record checked: the records and the hash of the last.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    pub records: Vec<LedgerRecord>,
    pub head: Hash,
}

impl Ledger {
    /// Checks `rec` follows the ledger (seq, link, hash) and takes it.
    pub fn apply(&mut self, rec: LedgerRecord) -> Result<(), StoreError> {
        let seq = self.records.len() as u64;
        if rec.seq != seq {
            return Err(StoreError::LedgerPlace {
                seq,
                found: rec.seq,
            });
        }
        if rec.prev != self.head.to_hex() {
            return Err(StoreError::LedgerLink { seq });
        }
        let hash = rec.computed(&self.head)?;
        if rec.hash != hash.to_hex() {
            return Err(StoreError::LedgerHash {
                seq,
                found: rec.hash,
                computed: hash.to_hex(),
            });
        }
        self.head = hash;
        self.records.push(rec);
        Ok(())
    }

    /// The next record saying `store` (at `head`) was forgotten, sealed.
    pub fn forgotten(
        &self,
        store: &str,
        head: &StoreHead,
        note: &str,
    ) -> Result<LedgerRecord, StoreError> {
        let mut rec = LedgerRecord {
            seq: self.records.len() as u64,
            kind: FORGOTTEN.into(),
            store: store.into(),
            records: head.records,
            head: head.hash.to_hex(),
            note: note.into(),
            prev: self.head.to_hex(),
            hash: String::new(),
        };
        rec.hash = rec.computed(&self.head)?.to_hex();
        Ok(rec)
    }

    pub fn to_value(&self) -> Value {
        // Invariant: ledger records are plain data with string keys.
        let records = serde_json::to_value(&self.records).expect("ledger records always convert");
        json!({"records": records, "head": self.head.to_hex()})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cardinality, Claim, Criticality, Provenance};

    /// A record of `store`'s next claim, written by `run` under `key`.
    fn record(store: &Store, run: &str, key: &str) -> StoreRecord {
        let claim = Claim {
            subject: "alice".into(),
            predicate: "allergy".into(),
            value: json!("penicillin"),
            provenance: Provenance::UserAsserted,
            cardinality: Cardinality::Functional,
            valid: None,
            criticality: Criticality::Critical,
            derived_from: Vec::new(),
        };
        let a = store.decide_outside(claim).unwrap();
        let payload = Payload::ClaimRecorded(oracle_core::payload::ClaimRecorded {
            assertion: serde_json::to_value(&a).unwrap(),
            note: String::new(),
            by: None,
        });
        store.seal(run, key, &payload).unwrap()
    }

    /// Every field a record's hash covers is checked on apply, the ones the projection does not
    /// read included: an edited `run` or `key` of the newest record (no later record's link
    /// would catch it) is refused as a hash mismatch. Fails if the record-hash check of
    /// `Store::apply` is disabled (issue 53, item 11).
    #[test]
    fn an_edited_run_or_key_field_fails_the_record_hash() {
        let mut store = Store::new();
        store.apply(record(&store, "run-1", "3")).unwrap();
        let good = record(&store, "run-2", "4");
        for edit in [
            |r: &mut StoreRecord| r.run = "run-9".into(),
            |r: &mut StoreRecord| r.key = "9".into(),
        ] {
            let mut bad = good.clone();
            edit(&mut bad);
            let mut s = store.clone();
            assert!(matches!(s.apply(bad), Err(StoreError::Hash { seq: 1, .. })));
        }
        store.apply(good).unwrap();
        assert_eq!(store.head.records, 2);
    }
}
