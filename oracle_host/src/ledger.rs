//! The home's evolution ledger, `<home>/evolution/ledger`: one canonical JSON line per
//! decision about a proposal (approved, rejected), per check report written (checked) or per
//! policy (who may approve, and whether approval is required), each hash-chained to the
//! one before as a run's events are (`hash = H(prev ‖ body_hash)`), appended whole under an
//! exclusive lock and checked before every append. [`verify`] names the first line that is
//! not what was appended (docs/EVOLUTION.md, "The ledger").

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use oracle_core::Hash;
use oracle_runtime::checkpoint::{PublicKey, SecretKey, Signature};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The ledger's directory under a home, and its files.
pub const DIR: &str = "evolution";
pub const LEDGER_FILE: &str = "ledger";

/// BLAKE3 `derive_key` contexts of the ledger: an entry's body, and its link to the one before.
/// Their own, so no ledger hash equals a hash of any other kind of object.
const BODY_CONTEXT: &str = "oracle v1 evolution entry";
const CHAIN_CONTEXT: &str = "oracle v1 evolution chain";

/// What an approval's signature covers, after this prefix: the proposal's hash, its base plan's
/// hash and the check report's hash, 32 bytes each.
pub const APPROVAL_PREFIX: &[u8] = b"oracle evolution approval v1\0";

/// A ledger line longer than this is refused: an entry holds hashes, a key, a signature and a
/// reason bounded by [`REASON_BYTES_MAX`], far below it, so a longer line was not written here.
pub const LINE_BYTES_MAX: usize = 16 * 1024;

/// A rejection's or policy change's reason: a sentence or a paragraph, not a document.
pub const REASON_BYTES_MAX: usize = 4 * 1024;

/// What an entry decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approved,
    Rejected,
    Policy,
    /// A check report `oracle evolve check` wrote: only a report recorded so may be signed.
    Checked,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approved => "approved",
            Decision::Rejected => "rejected",
            Decision::Policy => "policy",
            Decision::Checked => "checked",
        }
    }
}

/// One ledger line. Which fields are set depends on `decision` (checked by [`check_fields`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// 1-based position in the ledger.
    pub entry: u64,
    /// The previous entry's `hash` (zero for the first).
    pub prev: Hash,
    pub decision: Decision,
    /// The proposal's hash (approved, rejected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<Hash>,
    /// The plan it replaces (approved, rejected): the lineage's parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<Hash>,
    /// The proposed plan's program hash (approved, rejected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_hash: Option<Hash>,
    /// The BLAKE3 hash of the check report's file (approved, checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Hash>,
    /// The policy set (policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,
    /// The approvers' Ed25519 public keys, hex, sorted, each once (policy): only their
    /// approvals are appended and counted. Absent in a policy entry written before approvers
    /// were named, which names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The approver's Ed25519 public key, hex (approved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// The signature over [`approval_message`], hex (approved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// `H(prev ‖ body_hash)`, the body being this line without `hash`.
    pub hash: Hash,
}

/// Why one ledger entry is not what was appended (or could not be made): the `why` of
/// [`LedgerError::Tampered`], worded as before this type existed.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    /// A value the canonical encoding refuses (a float).
    #[error(transparent)]
    Canon(#[from] oracle_core::canon::CanonError),
    /// An entry that does not convert to JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("an approval without its proposal, base, report, key or signature")]
    ApprovalIncomplete,
    #[error("an approval without its plan hash")]
    ApprovalPlan,
    #[error("public_key: {0}")]
    PublicKey(oracle_runtime::checkpoint::KeyFormatError),
    #[error("signature: {0}")]
    Signature(oracle_runtime::checkpoint::HexError),
    #[error("the signature does not verify with its public key")]
    SignatureInvalid,
    #[error("a rejection without its proposal")]
    RejectionIncomplete,
    #[error("a policy entry without require_approval")]
    PolicyIncomplete,
    #[error("approver {0}")]
    Approver(oracle_runtime::checkpoint::KeyFormatError),
    #[error("approvers are not sorted, or one is named twice")]
    ApproversUnsorted,
    #[error("a check without its proposal, base, plan hash or report")]
    CheckIncomplete,
    #[error("a partial line at the end (a write cut short)")]
    Partial,
    #[error("longer than {LINE_BYTES_MAX} bytes")]
    TooLong,
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("not canonical JSON (changed after it was written)")]
    NotCanonical,
    #[error("not an entry: {0}")]
    NotEntry(serde_json::Error),
    #[error("numbered {found}, expected {n}")]
    Numbered { found: u64, n: u64 },
    /// Hashes shortened as [`Hash::short`] writes them.
    #[error(
        "prev {found} is not the hash of entry {before} ({expected}): an entry was removed, inserted or changed"
    )]
    Unlinked {
        found: String,
        before: u64,
        expected: String,
    },
    #[error("its hash does not match its content (the entry was changed)")]
    Changed,
}

/// Why the ledger cannot be used or extended.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// A line is not what was appended: named by its 1-based number.
    #[error("{}: entry {entry}: {why}", path.display())]
    Tampered {
        path: PathBuf,
        entry: u64,
        why: EntryError,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// `value` as canonical JSON text: keys sorted (serde_json's maps are sorted), no whitespace,
/// no floats (refused, as the canonical encoding refuses them).
pub fn json_bytes(value: &Value) -> Result<Vec<u8>, EntryError> {
    oracle_core::canon::check(value)?;
    Ok(serde_json::to_vec(value)?)
}

/// The bytes an approval signs: [`APPROVAL_PREFIX`], then the three hashes.
pub fn approval_message(proposal: &Hash, base: &Hash, report: &Hash) -> Vec<u8> {
    let mut m = APPROVAL_PREFIX.to_vec();
    for h in [proposal, base, report] {
        m.extend_from_slice(h.as_bytes());
    }
    m
}

/// The hash an entry must carry: its body (the entry without `hash`, in the canonical
/// encoding of docs/FORMAT.md) hashed, then linked to `prev`.
pub fn entry_hash(e: &Entry) -> Result<Hash, EntryError> {
    let mut v = serde_json::to_value(e)?;
    if let Value::Object(m) = &mut v {
        m.remove("hash");
    }
    let body = oracle_core::canon::hash_value_in(BODY_CONTEXT, &v)?;
    Ok(Hash(
        *oracle_core::hash::hasher(CHAIN_CONTEXT)
            .update(e.prev.as_bytes())
            .update(body.as_bytes())
            .finalize()
            .as_bytes(),
    ))
}

/// The fields each decision must and must not have, and the approval's signature.
fn check_fields(e: &Entry) -> Result<(), EntryError> {
    let proposal = e.proposal.is_some() && e.base.is_some() && e.plan_hash.is_some();
    match e.decision {
        Decision::Approved => {
            let (Some(p), Some(b), Some(r), Some(k), Some(s)) = (
                e.proposal,
                e.base,
                e.report,
                e.public_key.as_deref(),
                e.signature.as_deref(),
            ) else {
                return Err(EntryError::ApprovalIncomplete);
            };
            if !proposal {
                return Err(EntryError::ApprovalPlan);
            }
            let key = PublicKey::from_hex(k).map_err(EntryError::PublicKey)?;
            let sig = Signature::from_hex(s).map_err(EntryError::Signature)?;
            key.verify(&approval_message(&p, &b, &r), &sig)
                .map_err(|_| EntryError::SignatureInvalid)
        }
        Decision::Rejected if !proposal => Err(EntryError::RejectionIncomplete),
        Decision::Policy if e.require_approval.is_none() => Err(EntryError::PolicyIncomplete),
        Decision::Policy => check_approvers(e.approvers.as_deref().unwrap_or_default()),
        Decision::Checked if !proposal || e.report.is_none() => Err(EntryError::CheckIncomplete),
        _ => Ok(()),
    }
}

/// A policy's approvers: each a public key, in the one order (sorted, none twice), so one set
/// of approvers has one entry body.
fn check_approvers(keys: &[String]) -> Result<(), EntryError> {
    for k in keys {
        PublicKey::from_hex(k).map_err(EntryError::Approver)?;
    }
    if keys.windows(2).any(|w| w[0] >= w[1]) {
        return Err(EntryError::ApproversUnsorted);
    }
    Ok(())
}

/// Checks one line as entry `n` after `prev`: canonical, hashed, linked, complete.
fn check_line(line: &[u8], n: u64, prev: &Hash) -> Result<Entry, EntryError> {
    if line.len() > LINE_BYTES_MAX {
        return Err(EntryError::TooLong);
    }
    let value: Value = serde_json::from_slice(line).map_err(EntryError::NotJson)?;
    if json_bytes(&value)? != line {
        return Err(EntryError::NotCanonical);
    }
    let e: Entry = serde_json::from_value(value).map_err(EntryError::NotEntry)?;
    if e.entry != n {
        return Err(EntryError::Numbered { found: e.entry, n });
    }
    if e.prev != *prev {
        return Err(EntryError::Unlinked {
            found: e.prev.short(),
            before: n - 1,
            expected: prev.short(),
        });
    }
    if entry_hash(&e)? != e.hash {
        return Err(EntryError::Changed);
    }
    check_fields(&e)?;
    Ok(e)
}

/// Parses and checks every line of `bytes`, the ledger at `path`.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<Entry>, LedgerError> {
    let mut out: Vec<Entry> = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = out.len() as u64 + 1;
        let tampered = |why: EntryError| LedgerError::Tampered {
            path: path.to_path_buf(),
            entry: n,
            why,
        };
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Err(tampered(EntryError::Partial));
        };
        let prev = out.last().map_or(Hash::ZERO, |e| e.hash);
        out.push(check_line(&rest[..end], n, &prev).map_err(tampered)?);
        rest = &rest[end + 1..];
    }
    Ok(out)
}

/// The ledger of `home` (empty when there is none yet).
pub fn read(home: &Path) -> Result<Vec<Entry>, LedgerError> {
    let path = home.join(DIR).join(LEDGER_FILE);
    match fs::read(&path) {
        Ok(bytes) => parse(&path, &bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(LedgerError::Io { path, source }),
    }
}

/// What an entry to append says; numbered, linked and hashed by [`append`].
pub struct Draft {
    pub decision: Decision,
    pub proposal: Option<Hash>,
    pub base: Option<Hash>,
    pub plan_hash: Option<Hash>,
    pub report: Option<Hash>,
    pub require_approval: Option<bool>,
    /// The approvers a policy names, hex, sorted, each once (policy only).
    pub approvers: Option<Vec<String>>,
    pub reason: Option<String>,
    pub by: Option<String>,
    /// Signs the approval (approved only).
    pub key: Option<SecretKey>,
    /// An approval signed elsewhere (approved only, without `key`): the public key and the
    /// signature, hex, checked by [`check_fields`] before anything is written.
    pub signed: Option<(String, String)>,
}

/// Appends `draft` to `home`'s ledger under an exclusive lock on it: the ledger is read and
/// checked first (a damaged one is never extended), `refuse` may still say no given what it
/// holds, and the line goes out in one write, then is synced. Returns the entry written.
pub fn append(
    home: &Path,
    draft: Draft,
    refuse: impl FnOnce(&[Entry]) -> Result<(), crate::HostError>,
) -> Result<Entry, crate::HostError> {
    let dir = home.join(DIR);
    let path = dir.join(LEDGER_FILE);
    let io = |source| LedgerError::Io {
        path: path.clone(),
        source,
    };
    fs::create_dir_all(&dir).map_err(io)?;
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(&path)
        .map_err(io)?;
    file.lock().map_err(io)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io)?;
    let present = parse(&path, &bytes)?;
    refuse(&present)?;
    let entry = seal(draft, &present).map_err(|why| LedgerError::Tampered {
        path: path.clone(),
        entry: present.len() as u64 + 1,
        why,
    })?;
    let mut line = serde_json::to_value(&entry)
        .map_err(EntryError::from)
        .and_then(|v| json_bytes(&v))
        .map_err(|why| LedgerError::Tampered {
            path: path.clone(),
            entry: entry.entry,
            why,
        })?;
    line.push(b'\n');
    file.write_all(&line)
        .and_then(|()| file.sync_data())
        .map_err(io)?;
    Ok(entry)
}

/// The entry `draft` makes after `present`: numbered, signed when it is an approval, hashed.
fn seal(draft: Draft, present: &[Entry]) -> Result<Entry, EntryError> {
    let (public_key, signature) = match (&draft.key, draft.proposal, draft.base, draft.report) {
        (Some(k), Some(p), Some(b), Some(r)) => (
            Some(k.public_key().to_hex()),
            Some(k.sign(&approval_message(&p, &b, &r)).to_hex()),
        ),
        _ => match draft.signed {
            Some((k, s)) => (Some(k), Some(s)),
            None => (None, None),
        },
    };
    let mut e = Entry {
        entry: present.len() as u64 + 1,
        prev: present.last().map_or(Hash::ZERO, |e| e.hash),
        decision: draft.decision,
        proposal: draft.proposal,
        base: draft.base,
        plan_hash: draft.plan_hash,
        report: draft.report,
        require_approval: draft.require_approval,
        approvers: draft.approvers,
        reason: draft.reason,
        by: draft.by,
        public_key,
        signature,
        hash: Hash::ZERO,
    };
    e.hash = entry_hash(&e)?;
    check_fields(&e)?;
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(decision: Decision, n: u8, key: Option<SecretKey>) -> Draft {
        let h = |b: u8| Some(Hash([b; 32]));
        Draft {
            decision,
            proposal: h(n),
            base: h(n + 1),
            plan_hash: h(n + 2),
            report: h(n + 3),
            require_approval: None,
            approvers: None,
            reason: Some(format!("reason {n}")),
            by: Some("ana".into()),
            key,
            signed: None,
        }
    }

    /// Every byte of every entry changed (or a line cut) is found, at that entry exactly: a
    /// change inside an entry fails its JSON, its numbering, its `prev`, its hash or its
    /// signature before anything of a later entry is looked at.
    #[test]
    fn every_changed_byte_is_found_at_its_entry() {
        let home = tempfile::tempdir().unwrap();
        let key = SecretKey::from_seed(&[7; 32]);
        let mut policy = draft(Decision::Policy, 0, None);
        policy.require_approval = Some(true);
        for d in [
            draft(Decision::Approved, 1, Some(key.clone())),
            draft(Decision::Rejected, 9, None),
            policy,
        ] {
            append(home.path(), d, |_| Ok(())).unwrap();
        }
        let path = home.path().join(DIR).join(LEDGER_FILE);
        let good = fs::read(&path).unwrap();
        assert_eq!(parse(&path, &good).unwrap().len(), 3);
        let mut line = 1u64;
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] = if bad[i] == b'0' { b'1' } else { b'0' };
            match parse(&path, &bad) {
                Err(LedgerError::Tampered { entry, .. }) => assert_eq!(entry, line, "byte {i}"),
                other => panic!("byte {i}: {other:?}"),
            }
            if good[i] == b'\n' {
                line += 1;
            }
        }
    }

    /// The signature is checked on every read, not only on append: an approval whose
    /// signature was replaced (another key's over the same message) and whose entry hash was
    /// recomputed, so chain and hash agree, is refused at that entry. Fails if `check_fields`'
    /// Ed25519 check is disabled (issue 53, item 11).
    #[test]
    fn a_forged_signature_with_a_recomputed_hash_is_found_on_read() {
        let home = tempfile::tempdir().unwrap();
        let key = SecretKey::from_seed(&[7; 32]);
        let forger = SecretKey::from_seed(&[8; 32]);
        let e = append(
            home.path(),
            draft(Decision::Approved, 1, Some(key.clone())),
            |_| Ok(()),
        )
        .unwrap();
        let path = home.path().join(DIR).join(LEDGER_FILE);
        let mut forged = e.clone();
        forged.signature = Some(forger.sign(b"something else").to_hex());
        forged.hash = entry_hash(&forged).unwrap();
        let mut line = json_bytes(&serde_json::to_value(&forged).unwrap()).unwrap();
        line.push(b'\n');
        fs::write(&path, &line).unwrap();
        match read(home.path()) {
            Err(LedgerError::Tampered {
                entry: 1,
                why: EntryError::SignatureInvalid,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    /// A policy's approvers are keys in one order: an unsorted list, a repeated key or a word
    /// that is not a key is refused, so one set of approvers has one body.
    #[test]
    fn a_policys_approvers_are_sorted_keys() {
        let a = SecretKey::from_seed(&[1; 32]).public_key().to_hex();
        let b = SecretKey::from_seed(&[2; 32]).public_key().to_hex();
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let home = tempfile::tempdir().unwrap();
        let policy = |keys: Vec<String>| {
            let mut d = draft(Decision::Policy, 0, None);
            d.require_approval = Some(true);
            d.approvers = Some(keys);
            d
        };
        let bad = [
            vec![hi.clone(), lo.clone()],
            vec![lo.clone(), lo.clone()],
            vec!["the-cto".to_owned()],
        ];
        for keys in bad {
            assert!(append(home.path(), policy(keys), |_| Ok(())).is_err());
        }
        append(home.path(), policy(vec![lo, hi]), |_| Ok(())).unwrap();
        assert_eq!(read(home.path()).unwrap().len(), 1);
    }
}
