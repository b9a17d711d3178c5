//! Signed checkpoints: Ed25519 signatures over a log's (run, seq, head hash), chained, kept
//! beside the log, and optionally copied to a witness file.
//!
//! A chain hash commits to every event before it, but anyone who can write the log can also
//! recompute every hash after a change ("relink"), or cut the log on a record boundary: the
//! chain alone cannot tell. A checkpoint closes that gap. Its signature binds the hash of event
//! `seq` to a key whose secret half the writer of the log need not have, so a log rewritten
//! or cut after the checkpoint no longer matches it. `verify --pubkey` checks every checkpoint
//! of one key.
//!
//! Checkpoints live in `checkpoints.jsonl` (see [`LogPaths::checkpoints`]), one JSON line each,
//! appended and never rewritten. The file is not part of the log's hash chain: nothing in a
//! log depends on it, and a checkpoint adds no event. But the file is a chain of its own
//! (format 2): each line signs the hash of the line before it and the run's identity (the
//! chain hash of event 0), so a line cannot be removed from the middle, moved to another run
//! or reordered. What one file cannot show is its own newest lines cut off; a *witness* (the
//! same lines appended to a file the writer does not control) does. A witness is the default:
//! each key pair has a witness directory beside its key files ([`witness_dir`]), holding one
//! witness per run, which `checkpoint` appends to and `verify --pubkey` requires, unless told
//! another file (`--witness`) or none (`--no-witness`). Nothing on the log's disk alone can
//! show its newest signed statements cut (what remains is exactly an earlier, valid state), so
//! the one default that finds it is a record kept where the key is.
//! Formats (docs/FORMAT.md, "Signed checkpoints"):
//!
//! - key files: one line, `oracle-ed25519-secret-v1:` or `oracle-ed25519-public-v1:` then 64
//!   lowercase hex characters (the 32-byte seed, or the 32-byte public key), then `\n`;
//! - the signed message: `"oracle v2 checkpoint\0"` ‖ format 2 (u64 big-endian) ‖ run (32) ‖
//!   seq (u64 big-endian) ‖ head hash (32) ‖ prev line hash (32);
//! - a line: `{"format":2,"head":H,"prev":P,"public_key":K,"run":R,"seq":S,"signature":G}`
//!   then `\n`. Format-1 lines (no `run`, no `prev`, message `"oracle v1 checkpoint\0"` ‖ seq
//!   ‖ head) are still read, with their old meaning.
//!
//! No clock is read here: the message holds only hashes and the seq. The one use of
//! randomness is [`SecretKey::generate`], whose seed never reaches a hash, an event or a
//! checkpoint line.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use oracle_core::Hash;
use serde::Deserialize;

use crate::error::StoreError;
use crate::paths::LogPaths;
use crate::reader::{self, VerifyOptions, VerifySummary};

/// First bytes of a secret key file; the hex of the 32-byte seed follows.
pub const SECRET_KEY_PREFIX: &str = "oracle-ed25519-secret-v1:";
/// First bytes of a public key file; the hex of the 32-byte public key follows.
pub const PUBLIC_KEY_PREFIX: &str = "oracle-ed25519-public-v1:";
/// Domain separation of the signed message: what an oracle checkpoint key signs can never be
/// taken for a signature over anything else, and each format gets its own prefix.
pub const MESSAGE_PREFIX: &[u8; 21] = b"oracle v2 checkpoint\0";
/// Length of the format-2 signed message: prefix, format, run, seq, head, prev.
pub const MESSAGE_LEN: usize = MESSAGE_PREFIX.len() + 8 + 32 + 8 + 32 + 32;
/// The `format` of the lines oracle writes.
pub const LINE_FORMAT: u64 = 2;
/// The prefix of the format-1 message (old files; read, never written).
pub const MESSAGE_PREFIX_V1: &[u8; 21] = b"oracle v1 checkpoint\0";
/// Length of the format-1 signed message: prefix, seq, head hash.
pub const MESSAGE_LEN_V1: usize = MESSAGE_PREFIX_V1.len() + 8 + 32;
/// The `format` of an old line.
pub const LINE_FORMAT_V1: u64 = 1;
/// BLAKE3 `derive_key` context of [`Checkpoint::line_hash`], the hash a line's successor
/// names as its `prev`.
pub const LINE_HASH_CONTEXT: &str = "oracle v2 checkpoint line";
/// Largest witness file read or appended to, in bytes (about 200,000 lines): a witness is
/// read whole by `verify --witness`, so it is bounded like every other input.
pub const WITNESS_BYTES_MAX: u64 = 64 << 20;
/// Key files are one short line; anything longer is refused before it is read whole.
pub const KEY_FILE_BYTES_MAX: u64 = 1024;
/// What a key pair's witness directory is named after its secret key file: `FILE.witnesses`.
pub const WITNESS_DIR_SUFFIX: &str = ".witnesses";
/// What `keygen` appends to the secret key file's name for its public key: `FILE.pub`.
pub const PUBLIC_KEY_SUFFIX: &str = ".pub";

/// Which witness a checkpoint is copied to ([`create`]) or checked against ([`verify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Witness<'a> {
    /// None (`--no-witness`): checkpoints cut off the end of `checkpoints.jsonl` go unseen.
    None,
    /// A file given (`--witness W`).
    File(&'a Path),
    /// The default: the run's witness in a key pair's witness directory
    /// ([`witness_dir`], [`witness_dir_of_public`]), `DIR/<run, 64 hex>.jsonl`. [`create`]
    /// makes the directory when missing; for [`verify`] a missing witness is
    /// [`CheckpointError::WitnessMissing`].
    Beside(&'a Path),
}

/// The witness directory of the key pair whose secret key file is `secret`:
/// `<secret>.witnesses`, beside the key (kept where the key is kept, away from the log).
pub fn witness_dir(secret: &Path) -> PathBuf {
    let mut name = secret.as_os_str().to_owned();
    name.push(WITNESS_DIR_SUFFIX);
    PathBuf::from(name)
}

/// The witness directory of the key pair whose public key file is `public`: the secret key's
/// path (`public` without its `.pub`, as `keygen` names the pair) plus `.witnesses`; for a
/// public key file named otherwise, `<public>.witnesses`.
pub fn witness_dir_of_public(public: &Path) -> PathBuf {
    let text = public.as_os_str().to_string_lossy();
    match text.strip_suffix(PUBLIC_KEY_SUFFIX) {
        Some(secret) if !secret.is_empty() && public.to_str().is_some() => {
            witness_dir(Path::new(secret))
        }
        _ => witness_dir(public),
    }
}

/// The default witness of `run` in the witness directory `dir`: `dir/<run, 64 hex>.jsonl`.
pub fn default_witness(dir: &Path, run: &Hash) -> PathBuf {
    dir.join(format!("{}.jsonl", run.to_hex()))
}

/// Why a key file's text is not a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFormatError {
    #[error("this is an oracle {found} key file, and a {expected} key is needed here")]
    WrongKind {
        expected: &'static str,
        found: &'static str,
    },
    #[error("expected one line `{prefix}` followed by 64 lowercase hex characters")]
    Prefix { prefix: &'static str },
    #[error("{0}")]
    Hex(#[from] HexError),
    #[error("expected a single line ending in one newline, found more after the key")]
    Trailing,
    #[error("the public key is not a valid Ed25519 point")]
    NotAPoint,
    #[error("the public key has small order (a weak key that would accept forged signatures)")]
    Weak,
}

/// Why a hex field does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    #[error("expected {expected} lowercase hex characters, found {found}")]
    Length { expected: usize, found: usize },
    #[error("character {at} is not a lowercase hex digit")]
    Char { at: usize },
}

/// Errors of keys, checkpoint files and checkpoint verification. Each names the file, and a
/// checkpoint's errors its line and seq.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a valid oracle {kind} key file: {source}")]
    KeyFile {
        path: PathBuf,
        kind: &'static str,
        source: KeyFormatError,
    },
    #[error("{path}: already exists; a key file is never overwritten")]
    KeyExists { path: PathBuf },
    #[error("cannot get randomness from the operating system for a new key: {reason}")]
    Random { reason: String },
    #[error("{path}: line {line}: not a checkpoint: {reason}")]
    Malformed {
        path: PathBuf,
        line: u64,
        reason: String,
    },
    #[error(
        "{path}: line {line}: the checkpoint of seq {seq} does not carry a valid signature by key {key}"
    )]
    BadSignature {
        path: PathBuf,
        line: u64,
        seq: u64,
        key: String,
    },
    #[error(
        "{path}: line {line}: the checkpoint of seq {seq} signed head {signed}, but event {seq} of {log} has hash {found}: the log was rewritten after the checkpoint"
    )]
    Rewritten {
        path: PathBuf,
        line: u64,
        seq: u64,
        signed: Hash,
        found: Hash,
        log: PathBuf,
    },
    #[error(
        "{path}: line {line}: the checkpoint of seq {seq} is past the end of {log} ({events} events): the log was cut short after the checkpoint"
    )]
    Truncated {
        path: PathBuf,
        line: u64,
        seq: u64,
        events: u64,
        log: PathBuf,
    },
    #[error(
        "{path}: line {line}: the checkpoint of seq {seq} breaks the chain of checkpoints: {reason}"
    )]
    Chain {
        path: PathBuf,
        line: u64,
        seq: u64,
        reason: String,
    },
    #[error(
        "{path}: line {line}: checkpoint {line} (seq {seq}) was signed for run {}, this log's run is {}: it vouches for another run", signed.short(), found.short()
    )]
    OtherRun {
        path: PathBuf,
        line: u64,
        seq: u64,
        /// The run the checkpoint names.
        signed: Hash,
        /// This log's run (the chain hash of its event 0).
        found: Hash,
    },
    #[error(
        "{path}: line {line}: the witnessed checkpoint of seq {seq} (head {}) is not in {file}: its newest lines were cut or rewritten after the witness saw them", head.short()
    )]
    NotInFile {
        path: PathBuf,
        line: u64,
        seq: u64,
        head: Hash,
        file: PathBuf,
    },
    #[error(
        "{path}: the witness holds no checkpoint: it proves nothing (an emptied witness looks the same)"
    )]
    WitnessEmpty { path: PathBuf },
    #[error("{path}: larger than WITNESS_BYTES_MAX = {limit} bytes")]
    WitnessTooLarge { path: PathBuf, limit: u64 },
    #[error(
        "{path}: no witness of this run by this key: without one, checkpoints cut off the end of {file} cannot be found (what remains still verifies); give the witness with --witness W, or --no-witness to check {file} alone"
    )]
    WitnessMissing {
        /// Where the default witness was looked for.
        path: PathBuf,
        /// The checkpoint file.
        file: PathBuf,
    },
    #[error(
        "{path}: no checkpoint signed by key {key} ({others} by other keys): nothing proves this log; a deleted checkpoint file looks the same"
    )]
    NoCheckpoint {
        path: PathBuf,
        key: String,
        others: u64,
    },
}

impl CheckpointError {
    fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CheckpointError {
        let path = path.into();
        move |source| CheckpointError::Io { path, source }
    }

    /// True when the recorded data (the log or its checkpoints) is damaged, rewritten, cut
    /// short or unproven (exit code 4), as opposed to unreadable or malformed input such as a
    /// bad key file (exit code 2).
    pub fn is_integrity(&self) -> bool {
        match self {
            CheckpointError::Store(e) => e.is_integrity(),
            CheckpointError::Malformed { .. }
            | CheckpointError::BadSignature { .. }
            | CheckpointError::Rewritten { .. }
            | CheckpointError::Truncated { .. }
            | CheckpointError::NoCheckpoint { .. }
            | CheckpointError::Chain { .. }
            | CheckpointError::OtherRun { .. }
            | CheckpointError::NotInFile { .. }
            | CheckpointError::WitnessEmpty { .. }
            | CheckpointError::WitnessMissing { .. } => true,
            CheckpointError::Io { .. }
            | CheckpointError::WitnessTooLarge { .. }
            | CheckpointError::KeyFile { .. }
            | CheckpointError::KeyExists { .. }
            | CheckpointError::Random { .. } => false,
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn to_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 0xf) as usize] as char);
    }
    out
}

/// Decodes exactly `2 * N` lowercase hex characters.
fn from_hex<const N: usize>(s: &str) -> Result<[u8; N], HexError> {
    let bytes = s.as_bytes();
    if bytes.len() != 2 * N {
        return Err(HexError::Length {
            expected: 2 * N,
            found: bytes.len(),
        });
    }
    let digit = |at: usize| -> Result<u8, HexError> {
        match bytes[at] {
            c @ b'0'..=b'9' => Ok(c - b'0'),
            c @ b'a'..=b'f' => Ok(c - b'a' + 10),
            _ => Err(HexError::Char { at }),
        }
    };
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (digit(2 * i)? << 4) | digit(2 * i + 1)?;
    }
    Ok(out)
}

/// Parses the one line of a key file: `prefix`, hex, and at most one `\n`.
fn parse_key_line(
    text: &str,
    prefix: &'static str,
    other_prefix: &'static str,
    expected: &'static str,
    other: &'static str,
) -> Result<[u8; 32], KeyFormatError> {
    let Some(rest) = text.strip_prefix(prefix) else {
        if text.starts_with(other_prefix) {
            return Err(KeyFormatError::WrongKind {
                expected,
                found: other,
            });
        }
        return Err(KeyFormatError::Prefix { prefix });
    };
    let hex = rest.strip_suffix('\n').unwrap_or(rest);
    if hex.len() > 64 && hex.is_char_boundary(64) && from_hex::<32>(&hex[..64]).is_ok() {
        return Err(KeyFormatError::Trailing);
    }
    Ok(from_hex::<32>(hex)?)
}

/// An Ed25519 secret key (its 32-byte seed). Its `Debug` shows only the public key.
#[derive(Clone)]
pub struct SecretKey(SigningKey);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKey(public {})", self.public_key().to_hex())
    }
}

impl SecretKey {
    /// The key of a 32-byte seed (RFC 8032's "secret key").
    pub fn from_seed(seed: &[u8; 32]) -> SecretKey {
        SecretKey(SigningKey::from_bytes(seed))
    }

    /// A new key from the operating system's randomness: the only randomness in oracle that
    /// does not come from a recorded seed, and it never reaches a hash or an event.
    pub fn generate() -> Result<SecretKey, CheckpointError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| CheckpointError::Random {
            reason: e.to_string(),
        })?;
        let key = SecretKey::from_seed(&seed);
        seed.fill(0);
        Ok(key)
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// Signs `message` (RFC 8032 Ed25519, deterministic: the same key and message always give
    /// the same signature).
    pub fn sign(&self, message: &[u8]) -> Signature {
        Signature(self.0.sign(message).to_bytes())
    }

    /// The key file text: `oracle-ed25519-secret-v1:<64 hex>\n`.
    pub fn to_file_text(&self) -> String {
        format!("{SECRET_KEY_PREFIX}{}\n", to_hex(self.0.as_bytes()))
    }

    /// Parses a secret key file's text, strictly (see [`SecretKey::to_file_text`]).
    pub fn parse(text: &str) -> Result<SecretKey, KeyFormatError> {
        let seed = parse_key_line(
            text,
            SECRET_KEY_PREFIX,
            PUBLIC_KEY_PREFIX,
            "secret",
            "public",
        )?;
        Ok(SecretKey::from_seed(&seed))
    }
}

/// An Ed25519 public key: a valid point of full order (weak keys are refused when parsed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// The key of 32 encoded bytes; refuses bytes that are not a point, and small-order
    /// ("weak") points, under which a signature can verify for many messages.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<PublicKey, KeyFormatError> {
        let key = VerifyingKey::from_bytes(bytes).map_err(|_| KeyFormatError::NotAPoint)?;
        if key.is_weak() {
            return Err(KeyFormatError::Weak);
        }
        Ok(PublicKey(key))
    }

    pub fn from_hex(hex: &str) -> Result<PublicKey, KeyFormatError> {
        PublicKey::from_bytes(&from_hex::<32>(hex)?)
    }

    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    pub fn to_hex(&self) -> String {
        to_hex(self.0.as_bytes())
    }

    /// Checks `signature` over `message`.
    ///
    /// `verify_strict`, not `verify`: plain Ed25519 verification (RFC 8032 leaves it open)
    /// accepts a small-order public key or `R`, with which a signature can be made to verify
    /// for many messages or under many keys, and the crate's cofactored checks differ between
    /// implementations. A checkpoint must mean "this key signed exactly this (seq, hash)", so
    /// anything a strict verifier refuses is refused here. (Non-canonical `s` is refused by
    /// both, so a valid signature cannot be altered into another valid one.)
    pub fn verify(&self, message: &[u8], signature: &Signature) -> Result<(), SignatureInvalid> {
        let sig = ed25519_dalek::Signature::from_bytes(&signature.0);
        self.0
            .verify_strict(message, &sig)
            .map_err(|_| SignatureInvalid)
    }

    /// The key file text: `oracle-ed25519-public-v1:<64 hex>\n`.
    pub fn to_file_text(&self) -> String {
        format!("{PUBLIC_KEY_PREFIX}{}\n", self.to_hex())
    }

    /// Parses a public key file's text, strictly (see [`PublicKey::to_file_text`]).
    pub fn parse(text: &str) -> Result<PublicKey, KeyFormatError> {
        let bytes = parse_key_line(
            text,
            PUBLIC_KEY_PREFIX,
            SECRET_KEY_PREFIX,
            "public",
            "secret",
        )?;
        PublicKey::from_bytes(&bytes)
    }
}

/// A signature does not verify (deliberately without detail: there is nothing to act on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the signature does not verify")]
pub struct SignatureInvalid;

/// A 64-byte Ed25519 signature (`R` ‖ `s`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature(pub [u8; 64]);

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signature({})", self.to_hex())
    }
}

impl Signature {
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    pub fn from_hex(hex: &str) -> Result<Signature, HexError> {
        Ok(Signature(from_hex::<64>(hex)?))
    }
}

/// The bytes a format-1 checkpoint signs: `"oracle v1 checkpoint\0"` ‖ seq (u64 big-endian) ‖
/// head hash. Read for old files only; oracle signs format 2.
pub fn message_v1(seq: u64, head: &Hash) -> [u8; MESSAGE_LEN_V1] {
    let mut out = [0u8; MESSAGE_LEN_V1];
    let (prefix, rest) = out.split_at_mut(MESSAGE_PREFIX_V1.len());
    prefix.copy_from_slice(MESSAGE_PREFIX_V1);
    let (seq_bytes, hash_bytes) = rest.split_at_mut(8);
    seq_bytes.copy_from_slice(&seq.to_be_bytes());
    hash_bytes.copy_from_slice(head.as_bytes());
    out
}

/// The bytes a format-2 checkpoint signs (docs/FORMAT.md, "The signed message"):
/// `"oracle v2 checkpoint\0"` ‖ format (u64 big-endian, 2) ‖ run (32) ‖ seq (u64 big-endian)
/// ‖ head (32) ‖ prev (32). Every field has a fixed width, so no two field tuples give the
/// same bytes.
pub fn message(run: &Hash, seq: u64, head: &Hash, prev: &Hash) -> [u8; MESSAGE_LEN] {
    let mut out = [0u8; MESSAGE_LEN];
    let fields: [&[u8]; 6] = [
        MESSAGE_PREFIX,
        &LINE_FORMAT.to_be_bytes(),
        run.as_bytes(),
        &seq.to_be_bytes(),
        head.as_bytes(),
        prev.as_bytes(),
    ];
    let mut at = 0;
    for field in fields {
        out[at..at + field.len()].copy_from_slice(field);
        at += field.len();
    }
    out
}

/// What a format-2 checkpoint adds to format 1: which run it is of, and which line it follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chained {
    /// The run's identity: the chain hash of its event 0.
    pub run: Hash,
    /// The [`Checkpoint::line_hash`] of the line before it in `checkpoints.jsonl`, or zeros
    /// for the first line.
    pub prev: Hash,
}

/// One signed checkpoint: the key says event `seq` of the log has chain hash `head` (and, in
/// format 2, that the log is run `run` and the checkpoint follows line hash `prev`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub seq: u64,
    pub head: Hash,
    /// `None` for a format-1 line (read from old files, never written).
    pub chained: Option<Chained>,
    pub public_key: PublicKey,
    pub signature: Signature,
}

/// The stored form of a line (format 1 has no `prev` and no `run`; no other fields).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    format: u64,
    head: Hash,
    #[serde(default)]
    prev: Option<Hash>,
    public_key: String,
    #[serde(default)]
    run: Option<Hash>,
    seq: u64,
    signature: String,
}

impl Checkpoint {
    /// Signs a format-2 checkpoint: event `seq` of run `run` has hash `head`, and this
    /// checkpoint follows the line whose [`Checkpoint::line_hash`] is `prev` (zeros: first).
    pub fn sign(key: &SecretKey, run: Hash, seq: u64, head: Hash, prev: Hash) -> Checkpoint {
        Checkpoint {
            seq,
            head,
            chained: Some(Chained { run, prev }),
            public_key: key.public_key(),
            signature: key.sign(&message(&run, seq, &head, &prev)),
        }
    }

    /// Signs a format-1 checkpoint, as oracle did before format 2: only for tests of old
    /// files (oracle itself writes format 2 only).
    pub fn sign_v1(key: &SecretKey, seq: u64, head: Hash) -> Checkpoint {
        Checkpoint {
            seq,
            head,
            chained: None,
            public_key: key.public_key(),
            signature: key.sign(&message_v1(seq, &head)),
        }
    }

    /// The line's `format`: 1 or 2.
    pub fn format(&self) -> u64 {
        if self.chained.is_some() {
            LINE_FORMAT
        } else {
            LINE_FORMAT_V1
        }
    }

    /// The bytes the signature is over.
    pub fn message(&self) -> Vec<u8> {
        match &self.chained {
            Some(c) => message(&c.run, self.seq, &self.head, &c.prev).to_vec(),
            None => message_v1(self.seq, &self.head).to_vec(),
        }
    }

    /// Checks the signature against the checkpoint's own key (strictly; see
    /// [`PublicKey::verify`]). Says nothing about whether that key is one you trust.
    pub fn verify_signature(&self) -> Result<(), SignatureInvalid> {
        self.public_key.verify(&self.message(), &self.signature)
    }

    /// The line stored in `checkpoints.jsonl` (and in a witness), with its `\n`: keys in byte
    /// order, no spaces.
    pub fn to_line(&self) -> String {
        match &self.chained {
            Some(c) => format!(
                "{{\"format\":{LINE_FORMAT},\"head\":\"{}\",\"prev\":\"{}\",\"public_key\":\"{}\",\"run\":\"{}\",\"seq\":{},\"signature\":\"{}\"}}\n",
                self.head,
                c.prev,
                self.public_key.to_hex(),
                c.run,
                self.seq,
                self.signature.to_hex()
            ),
            None => format!(
                "{{\"format\":{LINE_FORMAT_V1},\"head\":\"{}\",\"public_key\":\"{}\",\"seq\":{},\"signature\":\"{}\"}}\n",
                self.head,
                self.public_key.to_hex(),
                self.seq,
                self.signature.to_hex()
            ),
        }
    }

    /// The hash the next line's `prev` names: BLAKE3 in `derive_key` mode with context
    /// [`LINE_HASH_CONTEXT`], over this line's bytes without the `\n`. It covers the signature
    /// and `prev` too, so each line commits to every line before it.
    pub fn line_hash(&self) -> Hash {
        let line = self.to_line();
        let mut h = oracle_core::hash::hasher(LINE_HASH_CONTEXT);
        h.update(line.trim_end_matches('\n').as_bytes());
        Hash(*h.finalize().as_bytes())
    }

    /// Parses one line (without its `\n`), strictly: exactly the bytes [`Checkpoint::to_line`]
    /// writes (its fields and no others, in that order, no spaces), `format` 1 or 2, lowercase
    /// hex of the right lengths, a valid public key. The signature is not checked here.
    pub fn parse_line(line: &str) -> Result<Checkpoint, LineError> {
        let l: Line = serde_json::from_str(line)?;
        let chained = match (l.format, l.run, l.prev) {
            (LINE_FORMAT_V1, None, None) => None,
            (LINE_FORMAT, Some(run), Some(prev)) => Some(Chained { run, prev }),
            (LINE_FORMAT_V1 | LINE_FORMAT, _, _) => {
                return Err(LineError::Chained { format: l.format });
            }
            (other, _, _) => return Err(LineError::Format { format: other }),
        };
        let public_key = PublicKey::from_hex(&l.public_key)?;
        let signature = Signature::from_hex(&l.signature)?;
        let c = Checkpoint {
            seq: l.seq,
            head: l.head,
            chained,
            public_key,
            signature,
        };
        let canonical = c.to_line();
        if canonical.strip_suffix('\n') != Some(line) {
            return Err(LineError::NotCanonical {
                expected: canonical.trim_end().to_owned(),
            });
        }
        Ok(c)
    }
}

/// Why a checkpoint line does not parse ([`Checkpoint::parse_line`]); a malformed line's error
/// quotes it, worded as before.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("format {format} has `run` and `prev` exactly when it is 2")]
    Chained { format: u64 },
    #[error(
        "format {format} is not known (this oracle reads formats {LINE_FORMAT_V1} and {LINE_FORMAT})"
    )]
    Format { format: u64 },
    #[error("public_key: {0}")]
    PublicKey(#[from] KeyFormatError),
    #[error("signature: {0}")]
    Signature(#[from] HexError),
    #[error("not in canonical form (expected {expected})")]
    NotCanonical { expected: String },
}

/// Reads a small text file (a key file): a regular file only (a FIFO or a device is refused
/// before anything is read), refusing one larger than a key file can be.
fn read_small(path: &Path) -> Result<String, CheckpointError> {
    let bytes = crate::fsread::read_regular_file(path, KEY_FILE_BYTES_MAX, "key_file_bytes_max")
        .map_err(|e| CheckpointError::Io {
            path: path.to_path_buf(),
            source: e.into_io(),
        })?;
    String::from_utf8(bytes).map_err(|_| CheckpointError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not UTF-8 text: not a key file",
        ),
    })
}

/// Reads a regular file of at most `max` bytes. The type is checked by path before opening
/// (so a FIFO is refused rather than waited on) and again on the open handle (so what was read
/// is what was checked). `what` names the file in the refusal.
fn read_regular(path: &Path, max: u64, what: &str) -> Result<Vec<u8>, CheckpointError> {
    let not_regular = || CheckpointError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file: not {what}"),
        ),
    };
    let meta = std::fs::metadata(path).map_err(CheckpointError::io(path))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let file = File::open(path).map_err(CheckpointError::io(path))?;
    if !file
        .metadata()
        .map_err(CheckpointError::io(path))?
        .is_file()
    {
        return Err(not_regular());
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(CheckpointError::io(path))?;
    if bytes.len() as u64 > max {
        return Err(CheckpointError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("larger than {max} bytes: not {what}"),
            ),
        });
    }
    Ok(bytes)
}

/// Reads a secret key file.
pub fn read_secret_key(path: &Path) -> Result<SecretKey, CheckpointError> {
    let text = read_small(path)?;
    SecretKey::parse(&text).map_err(|source| CheckpointError::KeyFile {
        path: path.to_path_buf(),
        kind: "secret",
        source,
    })
}

/// Reads a public key file.
pub fn read_public_key(path: &Path) -> Result<PublicKey, CheckpointError> {
    let text = read_small(path)?;
    PublicKey::parse(&text).map_err(|source| CheckpointError::KeyFile {
        path: path.to_path_buf(),
        kind: "public",
        source,
    })
}

/// Where the public key of the secret key file `secret` goes: `<secret>.pub`.
pub fn public_key_path(secret: &Path) -> PathBuf {
    let mut name = secret.as_os_str().to_owned();
    name.push(PUBLIC_KEY_SUFFIX);
    PathBuf::from(name)
}

/// Creates `path` (which must not exist) holding `text`, synced; mode 0600 on Unix when
/// `private`.
fn create_key_file(path: &Path, text: &str, private: bool) -> Result<(), CheckpointError> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            CheckpointError::KeyExists {
                path: path.to_path_buf(),
            }
        } else {
            CheckpointError::Io {
                path: path.to_path_buf(),
                source: e,
            }
        }
    })?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(CheckpointError::io(path))
}

/// Writes a key pair: the secret key to `secret` (mode 0600 on Unix) and its public key to
/// `<secret>.pub`. Neither file may exist: an existing key is never overwritten, and if the
/// public key cannot be written the new secret key file is removed again. Returns the public
/// key file's path.
pub fn write_key_pair(secret: &Path, key: &SecretKey) -> Result<PathBuf, CheckpointError> {
    let public = public_key_path(secret);
    for p in [secret, public.as_path()] {
        if p.symlink_metadata().is_ok() {
            return Err(CheckpointError::KeyExists {
                path: p.to_path_buf(),
            });
        }
    }
    create_key_file(secret, &key.to_file_text(), true)?;
    if let Err(e) = create_key_file(&public, &key.public_key().to_file_text(), false) {
        // Ours: created just above with `create_new`.
        let _ = std::fs::remove_file(secret);
        return Err(e);
    }
    if let Some(dir) = secret.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(dir)?;
    }
    Ok(public)
}

fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(CheckpointError::io(dir))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Parses a whole checkpoint file's bytes: the checkpoints with their 1-based line numbers,
/// or the first line that is not one. A last line without its `\n` (a write cut short) is
/// malformed too.
/// Parses a file of checkpoint lines, each on its own: the checkpoints with their 1-based line
/// numbers, or the first line that is not one. A last line without its `\n` (a write cut
/// short) is malformed too. No rule between lines is checked (see [`parse_file`]).
pub fn parse_lines(path: &Path, bytes: &[u8]) -> Result<Vec<(u64, Checkpoint)>, CheckpointError> {
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut line_no = 0u64;
    while !rest.is_empty() {
        line_no += 1;
        let malformed = |reason: String| CheckpointError::Malformed {
            path: path.to_path_buf(),
            line: line_no,
            reason,
        };
        let Some(end) = memchr::memchr(b'\n', rest) else {
            return Err(malformed(
                "no newline at the end (a write cut short, or an edit)".to_owned(),
            ));
        };
        let line =
            std::str::from_utf8(&rest[..end]).map_err(|_| malformed("not UTF-8".to_owned()))?;
        let checkpoint = Checkpoint::parse_line(line).map_err(|e| malformed(e.to_string()))?;
        out.push((line_no, checkpoint));
        rest = &rest[end + 1..];
    }
    Ok(out)
}

/// Checks the rules between the lines of one `checkpoints.jsonl` (docs/FORMAT.md, "The
/// chain"): format-1 lines only before format-2 lines; each format-2 line's `prev` is the
/// [`Checkpoint::line_hash`] of the line before it (zeros for the first line), its seq is at
/// least the previous format-2 line's, and all format-2 lines name one run.
pub fn check_chain(path: &Path, lines: &[(u64, Checkpoint)]) -> Result<(), CheckpointError> {
    let mut before: Option<&(u64, Checkpoint)> = None;
    let mut last_v2: Option<(u64, &Checkpoint, &Chained)> = None;
    for entry in lines {
        let (line, c) = entry;
        let broken = |reason: String| CheckpointError::Chain {
            path: path.to_path_buf(),
            line: *line,
            seq: c.seq,
            reason,
        };
        match &c.chained {
            None => {
                if let Some((at, _, _)) = last_v2 {
                    return Err(broken(format!(
                        "a format {LINE_FORMAT_V1} line after the format {LINE_FORMAT} line {at} (old lines only come first)"
                    )));
                }
            }
            Some(ch) => {
                let expected = before.map_or(Hash::ZERO, |(_, b)| b.line_hash());
                if ch.prev != expected {
                    let what = match before {
                        None => "this is the first line, whose prev is zeros".to_owned(),
                        Some((at, _)) => format!("line {at} hashes to {}", expected.short()),
                    };
                    return Err(broken(format!(
                        "its prev is {}, but {what}: a line before it was removed, changed or inserted",
                        ch.prev.short()
                    )));
                }
                if let Some((at, last, last_ch)) = last_v2 {
                    if c.seq < last.seq {
                        return Err(broken(format!(
                            "its seq is below line {at}'s ({}): checkpoints never go back",
                            last.seq
                        )));
                    }
                    if ch.run != last_ch.run {
                        return Err(broken(format!(
                            "it names run {}, line {at} names run {}: one file holds one run's checkpoints",
                            ch.run.short(),
                            last_ch.run.short()
                        )));
                    }
                }
                last_v2 = Some((*line, c, ch));
            }
        }
        before = Some(entry);
    }
    Ok(())
}

/// Parses a whole `checkpoints.jsonl`: every line (as [`parse_lines`]) and the chain between
/// them (as [`check_chain`]).
pub fn parse_file(path: &Path, bytes: &[u8]) -> Result<Vec<(u64, Checkpoint)>, CheckpointError> {
    let lines = parse_lines(path, bytes)?;
    check_chain(path, &lines)?;
    Ok(lines)
}

/// Reads and parses a checkpoint file; a missing file has no checkpoints.
pub fn read_file(path: &Path) -> Result<Vec<(u64, Checkpoint)>, CheckpointError> {
    match std::fs::read(path) {
        Ok(bytes) => parse_file(path, &bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(CheckpointError::Io {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// What [`append`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// The checkpoint's 1-based line in the file.
    pub line: u64,
    /// False when the same line was there already (same key, seq and head: signatures are
    /// deterministic, so it is the same checkpoint) and nothing was written.
    pub written: bool,
}

/// Opens `path` for appending (creating it), takes an exclusive advisory lock on it, parses
/// what is there with `parse`, asks `make` for the line to add, and appends it in one write,
/// then syncs, unless an identical line is there already.
///
/// Safe against concurrent appenders: the file is opened with `O_APPEND` and held under the
/// lock (the writer's mechanism, on this file rather than the log's lock, which stays free
/// for the log's writer) while it is read, checked and extended. A file that does not parse is
/// refused (nothing is appended to damage).
fn append_with(
    path: &Path,
    parse: impl FnOnce(&Path, &[u8]) -> Result<Vec<(u64, Checkpoint)>, CheckpointError>,
    make: impl FnOnce(&[(u64, Checkpoint)]) -> Result<Checkpoint, CheckpointError>,
) -> Result<(Checkpoint, Appended), CheckpointError> {
    let existed = path.symlink_metadata().is_ok();
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(CheckpointError::io(path))?;
    file.lock().map_err(CheckpointError::io(path))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(CheckpointError::io(path))?;
    let present = parse(path, &bytes)?;
    let checkpoint = make(&present)?;
    if let Some((line, _)) = present.iter().find(|(_, c)| *c == checkpoint) {
        return Ok((
            checkpoint,
            Appended {
                line: *line,
                written: false,
            },
        ));
    }
    file.write_all(checkpoint.to_line().as_bytes())
        .and_then(|()| file.sync_data())
        .map_err(CheckpointError::io(path))?;
    if !existed && let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(dir)?;
    }
    // The lock is released when `file` is dropped.
    Ok((
        checkpoint,
        Appended {
            line: present.len() as u64 + 1,
            written: true,
        },
    ))
}

/// Appends one checkpoint line, as it is, to the checkpoint file at `path`, creating it if
/// needed; refused if the file does not parse or the line would break its chain. A line
/// already present is not written twice. [`append_signed`] is what `oracle checkpoint` uses.
pub fn append(path: &Path, checkpoint: &Checkpoint) -> Result<Appended, CheckpointError> {
    append_with(path, parse_file, |present| {
        let mut all = present.to_vec();
        all.push((present.len() as u64 + 1, *checkpoint));
        if !present.iter().any(|(_, c)| c == checkpoint) {
            check_chain(path, &all)?;
        }
        Ok(*checkpoint)
    })
    .map(|(_, a)| a)
}

/// Signs event `seq` (hash `head`) of run `run` with `key` as the next link of the chain in
/// the checkpoint file at `path`, under the file's lock: `prev` is the hash of the file's last
/// line at that moment. If the key already signed this (run, seq, head) in the file, that line
/// is returned and nothing is written. Refused if the file's checkpoints are of another run, or
/// its newest one is past `seq` (the log is shorter than a checkpoint already taken).
pub fn append_signed(
    path: &Path,
    key: &SecretKey,
    run: Hash,
    seq: u64,
    head: Hash,
    log: &Path,
) -> Result<(Checkpoint, Appended), CheckpointError> {
    let public_key = key.public_key();
    append_with(path, parse_file, |present| {
        let same = |c: &Checkpoint| {
            c.public_key == public_key
                && c.seq == seq
                && c.head == head
                && c.chained.is_some_and(|ch| ch.run == run)
        };
        if let Some((_, c)) = present.iter().find(|(_, c)| same(c)) {
            return Ok(*c);
        }
        if let Some((line, last)) = present.last() {
            if let Some(ch) = last.chained
                && ch.run != run
            {
                return Err(CheckpointError::OtherRun {
                    path: path.to_path_buf(),
                    line: *line,
                    seq: last.seq,
                    signed: ch.run,
                    found: run,
                });
            }
            if last.chained.is_some() && last.seq > seq {
                return Err(CheckpointError::Truncated {
                    path: path.to_path_buf(),
                    line: *line,
                    seq: last.seq,
                    events: seq + 1,
                    log: log.to_path_buf(),
                });
            }
        }
        let prev = present.last().map_or(Hash::ZERO, |(_, c)| c.line_hash());
        Ok(Checkpoint::sign(key, run, seq, head, prev))
    })
}

/// Appends `checkpoint`'s line to the witness file at `path` (created if missing), under an
/// exclusive lock on it, unless that exact line is there already. The witness must be a
/// regular file of whole checkpoint lines (any runs, any order); a damaged one is refused and
/// left as it is.
pub fn append_witness(path: &Path, checkpoint: &Checkpoint) -> Result<Appended, CheckpointError> {
    if let Ok(meta) = std::fs::metadata(path) {
        if !meta.is_file() {
            return Err(CheckpointError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a regular file: a witness is a file of checkpoint lines",
                ),
            });
        }
        // Checked again on what is read, under the lock.
        if meta.len() > WITNESS_BYTES_MAX {
            return Err(CheckpointError::WitnessTooLarge {
                path: path.to_path_buf(),
                limit: WITNESS_BYTES_MAX,
            });
        }
    }
    let checkpoint = *checkpoint;
    append_with(
        path,
        |p, bytes| {
            if bytes.len() as u64 > WITNESS_BYTES_MAX {
                return Err(CheckpointError::WitnessTooLarge {
                    path: p.to_path_buf(),
                    limit: WITNESS_BYTES_MAX,
                });
            }
            parse_lines(p, bytes)
        },
        |_| Ok(checkpoint),
    )
    .map(|(_, a)| a)
}

/// What [`create`] did.
#[derive(Clone, Debug)]
pub struct Created {
    pub checkpoint: Checkpoint,
    pub file: PathBuf,
    pub appended: Appended,
    /// The witness file and what was done to it, unless [`Witness::None`].
    pub witness: Option<(PathBuf, Appended)>,
    pub summary: VerifySummary,
}

/// Verifies the log of `paths` and signs its head (the last event's seq and chain hash, with
/// the run's identity, the chain hash of event 0) with `key`, appending the checkpoint to
/// [`LogPaths::checkpoints`] as the next link of its chain, then the same line to the witness
/// (the file given, or the run's witness in a key pair's witness directory, which is made when
/// missing). Takes no lock on the log: a writer may go on appending (what was verified and
/// signed is a prefix it cannot change), though a record it is writing at that moment is a
/// torn tail and fails the verification.
pub fn create(
    paths: &LogPaths,
    key: &SecretKey,
    witness: Witness<'_>,
    threads: usize,
) -> Result<Created, CheckpointError> {
    let (summary, hashes) = reader::verify_file_at(
        &paths.log,
        VerifyOptions {
            threads,
            expected_head: None,
        },
        &[0],
    )?;
    let (Some(seq), Some(&(0, run))) = (summary.events.checked_sub(1), hashes.first()) else {
        return Err(StoreError::Empty {
            path: paths.log.clone(),
        }
        .into());
    };
    let file = paths.checkpoints();
    let (checkpoint, appended) =
        append_signed(&file, key, run, seq, summary.head.hash, &paths.log)?;
    let witness = match witness {
        Witness::None => None,
        Witness::File(w) => Some((w.to_path_buf(), append_witness(w, &checkpoint)?)),
        Witness::Beside(dir) => {
            make_witness_dir(dir)?;
            let w = default_witness(dir, &run);
            let appended = append_witness(&w, &checkpoint)?;
            Some((w, appended))
        }
    };
    Ok(Created {
        checkpoint,
        file,
        appended,
        witness,
        summary,
    })
}

/// Makes a key pair's witness directory when it is missing (mode 0700 on Unix: it says which
/// runs the key vouched for). One level only: its parent is the key's own directory.
fn make_witness_dir(dir: &Path) -> Result<(), CheckpointError> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    match builder.create(dir) {
        Ok(()) => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(CheckpointError::Io {
            path: dir.to_path_buf(),
            source: e,
        }),
    }
}

/// The run identity (chain hash of event 0) as the log's first record states it, read without
/// verifying the rest; `None` when it cannot be read (the verification then says why).
fn first_hash(log: &Path) -> Option<Hash> {
    let mut first = None;
    reader::scan(log, true, |e| {
        first = Some(e.hash);
        Ok(false)
    })
    .ok()?;
    first
}

/// One checkpoint that held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proven {
    pub line: u64,
    pub seq: u64,
    pub head: Hash,
    /// 1 (an old line: seq and head only) or 2 (bound to the run and chained).
    pub format: u64,
}

/// What a witness check found: every statement held.
#[derive(Clone, Debug)]
pub struct Witnessed {
    pub file: PathBuf,
    /// Lines in the witness (each one checked).
    pub statements: u64,
    /// The highest seq a statement names.
    pub latest_seq: u64,
}

/// What [`verify`] found: the log's summary and the checkpoints of the key, all valid.
#[derive(Clone, Debug)]
pub struct Verified {
    pub summary: VerifySummary,
    pub file: PathBuf,
    pub public_key: PublicKey,
    /// The log's run identity: the chain hash of its event 0.
    pub run: Hash,
    /// The key's checkpoints, in file order.
    pub proven: Vec<Proven>,
    /// Checkpoints by other keys: parsed, otherwise ignored (they prove nothing to this key's
    /// holder).
    pub others: u64,
    pub witness: Option<Witnessed>,
}

/// Reads a witness file: a regular file of at most [`WITNESS_BYTES_MAX`] bytes holding whole
/// format-2 checkpoint lines. Missing or not a regular file: an input error (exit 2); damaged:
/// an integrity error naming the line.
pub fn read_witness(path: &Path) -> Result<Vec<(u64, Checkpoint)>, CheckpointError> {
    let bytes = match read_regular(path, WITNESS_BYTES_MAX, "a witness file") {
        Err(CheckpointError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::InvalidData =>
        {
            return Err(CheckpointError::WitnessTooLarge {
                path: path.to_path_buf(),
                limit: WITNESS_BYTES_MAX,
            });
        }
        other => other?,
    };
    let lines = parse_lines(path, &bytes)?;
    if let Some((line, _)) = lines.iter().find(|(_, c)| c.chained.is_none()) {
        return Err(CheckpointError::Malformed {
            path: path.to_path_buf(),
            line: *line,
            reason: format!(
                "a witness holds format {LINE_FORMAT} statements only (a format {LINE_FORMAT_V1} line names no run)"
            ),
        });
    }
    Ok(lines)
}

/// Verifies the log of `paths` (as [`reader::verify_file`] does, with `opts`) and every
/// checkpoint in its checkpoint file signed by `key`: the signature must verify strictly, a
/// format-2 checkpoint must name this log's run (the chain hash of its event 0), the log must
/// reach the checkpoint's seq, and its event there must have exactly the signed chain hash.
/// The file's chain is checked as it is parsed ([`parse_file`]). The hashes are taken in the
/// same pass that verifies the log.
///
/// Then, unless [`Witness::None`], every statement in the witness (the file given, or the
/// run's witness in a key pair's witness directory, which must exist): (a) signed by `key`,
/// validly; (b) of this log's run; (c) the log has event `seq` with hash `head`; (d) the
/// checkpoint file holds the identical line. (d) is what finds the newest lines of
/// `checkpoints.jsonl` cut off.
///
/// Reported in this order: an unreadable checkpoint or witness file; a damaged log; a
/// malformed checkpoint line or broken chain (any key); then the key's checkpoints in file
/// order (signature, other run, cut short, rewritten); no checkpoint by `key` at all; a
/// default witness that is missing; then the witness's statements in its order ((a), (b),
/// (c), (d)).
pub fn verify(
    paths: &LogPaths,
    key: &PublicKey,
    witness: Witness<'_>,
    opts: VerifyOptions,
) -> Result<Verified, CheckpointError> {
    let file = paths.checkpoints();
    let parsed = match std::fs::read(&file) {
        Ok(bytes) => Some(parse_file(&file, &bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(CheckpointError::Io {
                path: file,
                source: e,
            });
        }
    };
    // The default witness is named by the run, so event 0 is read first (without verifying:
    // the statements are checked against the verified log below, naming this run or failing).
    let default = match witness {
        Witness::Beside(dir) => first_hash(&paths.log).map(|run| default_witness(dir, &run)),
        _ => None,
    };
    let mut missing = None;
    let witnessed = match (witness, &default) {
        (Witness::File(w), _) => Some((w.to_path_buf(), read_witness(w)?)),
        (Witness::Beside(_), Some(w)) => match std::fs::symlink_metadata(w) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing = Some(w.clone());
                None
            }
            _ => Some((w.clone(), read_witness(w)?)),
        },
        (Witness::Beside(_), None) | (Witness::None, _) => None,
    };
    let mut seqs: Vec<u64> = vec![0];
    if let Some(Ok(all)) = &parsed {
        seqs.extend(
            all.iter()
                .filter(|(_, c)| c.public_key == *key)
                .map(|(_, c)| c.seq),
        );
    }
    if let Some((_, lines)) = &witnessed {
        seqs.extend(lines.iter().map(|(_, c)| c.seq));
    }
    let (summary, hashes) = reader::verify_file_at(&paths.log, opts, &seqs)?;
    let all = match parsed {
        Some(result) => result?,
        None => Vec::new(),
    };
    let Some(&(0, run)) = hashes.first() else {
        return Err(StoreError::Empty {
            path: paths.log.clone(),
        }
        .into());
    };
    // Checks one signed statement (from `path`, at `line`) against the log.
    let check = |path: &Path, line: u64, c: &Checkpoint| -> Result<(), CheckpointError> {
        if c.public_key != *key || c.verify_signature().is_err() {
            return Err(CheckpointError::BadSignature {
                path: path.to_path_buf(),
                line,
                seq: c.seq,
                key: key.to_hex(),
            });
        }
        if let Some(ch) = c.chained
            && ch.run != run
        {
            return Err(CheckpointError::OtherRun {
                path: path.to_path_buf(),
                line,
                seq: c.seq,
                signed: ch.run,
                found: run,
            });
        }
        let Ok(at) = hashes.binary_search_by_key(&c.seq, |(seq, _)| *seq) else {
            return Err(CheckpointError::Truncated {
                path: path.to_path_buf(),
                line,
                seq: c.seq,
                events: summary.events,
                log: paths.log.clone(),
            });
        };
        let found = hashes[at].1;
        if found != c.head {
            return Err(CheckpointError::Rewritten {
                path: path.to_path_buf(),
                line,
                seq: c.seq,
                signed: c.head,
                found,
                log: paths.log.clone(),
            });
        }
        Ok(())
    };
    let mut proven = Vec::new();
    let mut others = 0;
    for (line, c) in &all {
        if c.public_key != *key {
            others += 1;
            continue;
        }
        check(&file, *line, c)?;
        proven.push(Proven {
            line: *line,
            seq: c.seq,
            head: c.head,
            format: c.format(),
        });
    }
    if proven.is_empty() {
        return Err(CheckpointError::NoCheckpoint {
            path: file,
            key: key.to_hex(),
            others,
        });
    }
    // Event 0 unreadable before the pass yet verified by it (the log was written meanwhile):
    // the witness was not read, so it fails closed.
    if let (Witness::Beside(dir), None) = (witness, &default) {
        missing = Some(default_witness(dir, &run));
    }
    if let Some(path) = missing {
        return Err(CheckpointError::WitnessMissing { path, file });
    }
    let witness = match witnessed {
        None => None,
        Some((w, lines)) => {
            if lines.is_empty() {
                return Err(CheckpointError::WitnessEmpty { path: w });
            }
            for (line, c) in &lines {
                check(&w, *line, c)?;
                if !all.iter().any(|(_, f)| f == c) {
                    return Err(CheckpointError::NotInFile {
                        path: w.clone(),
                        line: *line,
                        seq: c.seq,
                        head: c.head,
                        file: file.clone(),
                    });
                }
            }
            Some(Witnessed {
                file: w,
                statements: lines.len() as u64,
                latest_seq: lines.iter().map(|(_, c)| c.seq).max().unwrap_or_default(),
            })
        }
    };
    Ok(Verified {
        summary,
        file,
        public_key: *key,
        run,
        proven,
        others,
        witness,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(hex: &str) -> Vec<u8> {
        assert_eq!(hex.len() % 2, 0, "{hex}");
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    fn seed(hex: &str) -> [u8; 32] {
        from_hex::<32>(hex).unwrap()
    }

    /// One RFC 8032 section 7.1 vector through our helpers: the public key derived from the
    /// seed, the signature over the message, strict verification, and refusal of a changed
    /// message or signature.
    fn check_vector(secret: &str, public: &str, message: &[u8], signature: &str) {
        let key = SecretKey::from_seed(&seed(secret));
        assert_eq!(key.public_key().to_hex(), public);
        let sig = key.sign(message);
        assert_eq!(sig.to_hex(), signature);
        let pk = PublicKey::from_hex(public).unwrap();
        assert_eq!(pk, key.public_key());
        pk.verify(message, &sig).unwrap();
        // And through the key file formats, as `keygen` writes and `verify` reads them.
        let reread = SecretKey::parse(&key.to_file_text()).unwrap();
        assert_eq!(reread.sign(message), sig);
        let pk_file = PublicKey::parse(&pk.to_file_text()).unwrap();
        pk_file.verify(message, &sig).unwrap();

        let mut other = message.to_vec();
        other.push(0);
        assert_eq!(pk.verify(&other, &sig), Err(SignatureInvalid));
        for i in [0, 31, 32, 63] {
            let mut bad = sig;
            bad.0[i] ^= 1;
            assert_eq!(pk.verify(message, &bad), Err(SignatureInvalid), "byte {i}");
        }
    }

    #[test]
    fn rfc8032_test_1_empty_message() {
        check_vector(
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
            b"",
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
        );
    }

    #[test]
    fn rfc8032_test_2_one_byte() {
        check_vector(
            "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
            "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
            &[0x72],
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
        );
    }

    #[test]
    fn rfc8032_test_3_two_bytes() {
        check_vector(
            "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
            "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
            &[0xaf, 0x82],
            "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
        );
    }

    /// TEST 1024: a 1023-byte message.
    const TEST_1024_MESSAGE: &str = concat!(
        "08b8b2b733424243760fe426a4b54908632110a66c2f6591eabd3345e3e4eb98fa6e264bf09efe12",
        "ee50f8f54e9f77b1e355f6c50544e23fb1433ddf73be84d879de7c0046dc4996d9e773f4bc9efe57",
        "38829adb26c81b37c93a1b270b20329d658675fc6ea534e0810a4432826bf58c941efb65d57a338b",
        "bd2e26640f89ffbc1a858efcb8550ee3a5e1998bd177e93a7363c344fe6b199ee5d02e82d522c4fe",
        "ba15452f80288a821a579116ec6dad2b3b310da903401aa62100ab5d1a36553e06203b33890cc9b8",
        "32f79ef80560ccb9a39ce767967ed628c6ad573cb116dbefefd75499da96bd68a8a97b928a8bbc10",
        "3b6621fcde2beca1231d206be6cd9ec7aff6f6c94fcd7204ed3455c68c83f4a41da4af2b74ef5c53",
        "f1d8ac70bdcb7ed185ce81bd84359d44254d95629e9855a94a7c1958d1f8ada5d0532ed8a5aa3fb2",
        "d17ba70eb6248e594e1a2297acbbb39d502f1a8c6eb6f1ce22b3de1a1f40cc24554119a831a9aad6",
        "079cad88425de6bde1a9187ebb6092cf67bf2b13fd65f27088d78b7e883c8759d2c4f5c65adb7553",
        "878ad575f9fad878e80a0c9ba63bcbcc2732e69485bbc9c90bfbd62481d9089beccf80cfe2df16a2",
        "cf65bd92dd597b0707e0917af48bbb75fed413d238f5555a7a569d80c3414a8d0859dc65a46128ba",
        "b27af87a71314f318c782b23ebfe808b82b0ce26401d2e22f04d83d1255dc51addd3b75a2b1ae078",
        "4504df543af8969be3ea7082ff7fc9888c144da2af58429ec96031dbcad3dad9af0dcbaaaf268cb8",
        "fcffead94f3c7ca495e056a9b47acdb751fb73e666c6c655ade8297297d07ad1ba5e43f1bca32301",
        "651339e22904cc8c42f58c30c04aafdb038dda0847dd988dcda6f3bfd15c4b4c4525004aa06eeff8",
        "ca61783aacec57fb3d1f92b0fe2fd1a85f6724517b65e614ad6808d6f6ee34dff7310fdc82aebfd9",
        "04b01e1dc54b2927094b2db68d6f903b68401adebf5a7e08d78ff4ef5d63653a65040cf9bfd4aca7",
        "984a74d37145986780fc0b16ac451649de6188a7dbdf191f64b5fc5e2ab47b57f7f7276cd419c17a",
        "3ca8e1b939ae49e488acba6b965610b5480109c8b17b80e1b7b750dfc7598d5d5011fd2dcc5600a3",
        "2ef5b52a1ecc820e308aa342721aac0943bf6686b64b2579376504ccc493d97e6aed3fb0f9cd71a4",
        "3dd497f01f17c0e2cb3797aa2a2f256656168e6c496afc5fb93246f6b1116398a346f1a641f3b041",
        "e989f7914f90cc2c7fff357876e506b50d334ba77c225bc307ba537152f3f1610e4eafe595f6d9d9",
        "0d11faa933a15ef1369546868a7f3a45a96768d40fd9d03412c091c6315cf4fde7cb68606937380d",
        "b2eaaa707b4c4185c32eddcdd306705e4dc1ffc872eeee475a64dfac86aba41c0618983f8741c5ef",
        "68d3a101e8a3b8cac60c905c15fc910840b94c00a0b9d0",
    );

    #[test]
    fn rfc8032_test_1024_long_message() {
        let message = bytes(TEST_1024_MESSAGE);
        assert_eq!(message.len(), 1023);
        check_vector(
            "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5",
            "278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e",
            &message,
            "0aab4c900501b3e24d7cdf4663326a3a87df5e4843b2cbdb67cbf6e460fec350aa5371b1508f9f4528ecea23c436d94b5e8fcd4f681e30a6ac00a9704a188a03",
        );
    }

    #[test]
    fn rfc8032_test_sha_abc() {
        // The message is SHA-512("abc").
        check_vector(
            "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
            "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
            &bytes(concat!(
                "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a",
                "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
            )),
            "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704",
        );
    }

    #[test]
    fn a_malleated_signature_is_refused() {
        // s + L (L = 2^252 + 27742317777372353535851937790883648493, little-endian) is the
        // same residue mod L: lax verifiers accept it as a second valid signature.
        const L: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let key = SecretKey::from_seed(&[1; 32]);
        let msg = message_v1(5, &Hash([9; 32]));
        let sig = key.sign(&msg);
        key.public_key().verify(&msg, &sig).unwrap();
        let mut malleated = sig;
        let mut carry = 0u16;
        for (i, l) in L.iter().enumerate() {
            carry += u16::from(malleated.0[32 + i]) + u16::from(*l);
            malleated.0[32 + i] = carry as u8;
            carry >>= 8;
        }
        assert_ne!(malleated, sig);
        assert_eq!(
            key.public_key().verify(&msg, &malleated),
            Err(SignatureInvalid)
        );
    }

    #[test]
    fn key_files_are_parsed_strictly() {
        let key = SecretKey::from_seed(&[9; 32]);
        let secret = key.to_file_text();
        let public = key.public_key().to_file_text();
        assert!(secret.starts_with("oracle-ed25519-secret-v1:0909"));
        assert!(public.starts_with("oracle-ed25519-public-v1:"));
        assert_eq!(secret.len(), SECRET_KEY_PREFIX.len() + 64 + 1);
        assert!(
            SecretKey::parse(secret.trim_end()).is_ok(),
            "no final newline is fine"
        );
        assert_eq!(
            PublicKey::parse(&public).unwrap(),
            key.public_key(),
            "round trip"
        );

        assert!(matches!(
            SecretKey::parse(&public),
            Err(KeyFormatError::WrongKind {
                expected: "secret",
                ..
            })
        ));
        assert!(matches!(
            PublicKey::parse(&secret),
            Err(KeyFormatError::WrongKind {
                expected: "public",
                ..
            })
        ));
        let hex = &public[PUBLIC_KEY_PREFIX.len()..PUBLIC_KEY_PREFIX.len() + 64];
        let bad = [
            hex.to_owned(),
            format!("{PUBLIC_KEY_PREFIX}{}\n", hex.to_uppercase()),
            format!("{PUBLIC_KEY_PREFIX}{hex}\n\n"),
            format!("{PUBLIC_KEY_PREFIX}{hex}\r\n"),
            format!("{PUBLIC_KEY_PREFIX}{hex} \n"),
            format!("{PUBLIC_KEY_PREFIX}{hex}00\n"),
            format!("{PUBLIC_KEY_PREFIX}{}\n", &hex[..62]),
            format!(" {PUBLIC_KEY_PREFIX}{hex}\n"),
            format!("oracle-ed25519-public-v2:{hex}\n"),
            String::new(),
        ];
        for b in &bad {
            assert!(PublicKey::parse(b).is_err(), "accepted {b:?}");
        }
        // The identity point (small order) is a weak key; `from_bytes` refuses it.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert_eq!(PublicKey::from_bytes(&identity), Err(KeyFormatError::Weak));
    }

    #[test]
    fn key_pairs_are_written_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("k");
        let key = SecretKey::from_seed(&[5; 32]);
        let public = write_key_pair(&secret, &key).unwrap();
        assert_eq!(public, dir.path().join("k.pub"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(
            read_secret_key(&secret).unwrap().public_key(),
            key.public_key()
        );
        assert_eq!(read_public_key(&public).unwrap(), key.public_key());
        let other = SecretKey::from_seed(&[6; 32]);
        assert!(matches!(
            write_key_pair(&secret, &other),
            Err(CheckpointError::KeyExists { .. })
        ));
        assert_eq!(
            read_secret_key(&secret).unwrap().public_key(),
            key.public_key(),
            "unchanged"
        );
        // A stray `.pub` blocks a new pair without leaving a secret key behind.
        let lone = dir.path().join("lone");
        std::fs::write(dir.path().join("lone.pub"), "x").unwrap();
        assert!(matches!(
            write_key_pair(&lone, &other),
            Err(CheckpointError::KeyExists { .. })
        ));
        assert!(!lone.exists());
    }

    #[test]
    fn generated_keys_differ_and_sign() {
        let a = SecretKey::generate().unwrap();
        let b = SecretKey::generate().unwrap();
        assert_ne!(a.public_key(), b.public_key());
        let c = Checkpoint::sign(&a, Hash::ZERO, 0, Hash::ZERO, Hash::ZERO);
        c.verify_signature().unwrap();
        assert!(!format!("{a:?}").contains(&a.to_file_text()[SECRET_KEY_PREFIX.len()..]));
    }

    #[test]
    fn the_v1_message_is_domain_separated_and_exact() {
        let head = Hash([0xab; 32]);
        let m = message_v1(0x0102_0304_0506_0708, &head);
        let mut expected = b"oracle v1 checkpoint\0".to_vec();
        expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        expected.extend_from_slice(&[0xab; 32]);
        assert_eq!(m.to_vec(), expected);
        assert_eq!(m.len(), 61);
    }

    /// The golden vector of docs/FORMAT.md ("The signed message"): a fixed seed and fixed
    /// inputs give exactly these message bytes, this signature (Ed25519 is deterministic), this
    /// line and this line hash. Changing any of them is a format change.
    #[test]
    fn golden_vector_of_a_v2_checkpoint() {
        let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
        let key = SecretKey::from_seed(&seed);
        let (run, seq, head, prev) = (Hash([0x11; 32]), 41, Hash([0x22; 32]), Hash([0x33; 32]));
        let m = message(&run, seq, &head, &prev);
        assert_eq!(m.len(), MESSAGE_LEN);
        assert_eq!(MESSAGE_LEN, 133);
        let mut expected = b"oracle v2 checkpoint\0".to_vec();
        expected.extend_from_slice(&2u64.to_be_bytes());
        expected.extend_from_slice(&[0x11; 32]);
        expected.extend_from_slice(&41u64.to_be_bytes());
        expected.extend_from_slice(&[0x22; 32]);
        expected.extend_from_slice(&[0x33; 32]);
        assert_eq!(m.to_vec(), expected);
        let c = Checkpoint::sign(&key, run, seq, head, prev);
        assert_eq!(to_hex(&m), GOLDEN_MESSAGE);
        assert_eq!(c.public_key.to_hex(), GOLDEN_PUBLIC_KEY);
        assert_eq!(c.signature.to_hex(), GOLDEN_SIGNATURE);
        c.verify_signature().unwrap();
        assert_eq!(c.to_line(), format!("{GOLDEN_LINE}\n"));
        assert_eq!(c.line_hash().to_hex(), GOLDEN_LINE_HASH);
        assert_eq!(Checkpoint::parse_line(GOLDEN_LINE).unwrap(), c);
    }

    const GOLDEN_MESSAGE: &str = concat!(
        "6f7261636c6520763220636865636b706f696e74000000000000000002111111",
        "1111111111111111111111111111111111111111111111111111111111000000",
        "0000000029222222222222222222222222222222222222222222222222222222",
        "2222222222333333333333333333333333333333333333333333333333333333",
        "3333333333",
    );
    const GOLDEN_PUBLIC_KEY: &str =
        "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8";
    const GOLDEN_SIGNATURE: &str = concat!(
        "37935a79f0f0f1bfb28988f38a3eb199ab7325bbbfdabde97c6dc4064d95e1c9",
        "c6b03b12cddf7b40372b5ab3d12fb4f5171dbed04748e4b86e452942a650660a",
    );
    const GOLDEN_LINE: &str = concat!(
        r#"{"format":2,"head":"222222222222222222222222222222222222222222222222222222222222"#,
        r#"2222","prev":"3333333333333333333333333333333333333333333333333333333333333333","#,
        r#""public_key":"03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8","#,
        r#""run":"1111111111111111111111111111111111111111111111111111111111111111","seq":4"#,
        r#"1,"signature":"37935a79f0f0f1bfb28988f38a3eb199ab7325bbbfdabde97c6dc4064d95e1c9c"#,
        r#"6b03b12cddf7b40372b5ab3d12fb4f5171dbed04748e4b86e452942a650660a"}"#,
    );
    const GOLDEN_LINE_HASH: &str =
        "89baab9aa02096affe1d7a3777f1c127180637521537eee067aea2ec4cd676fd";

    #[test]
    fn a_checkpoint_round_trips_and_binds_every_signed_field() {
        let key = SecretKey::from_seed(&[7; 32]);
        let (run, prev) = (Hash([5; 32]), Hash([6; 32]));
        let c = Checkpoint::sign(&key, run, 19, Hash([3; 32]), prev);
        c.verify_signature().unwrap();
        assert_eq!(c.format(), 2);
        let line = c.to_line();
        assert!(line.ends_with('\n'));
        assert!(line.starts_with(r#"{"format":2,"head":"0303"#), "{line}");
        let back = Checkpoint::parse_line(line.trim_end_matches('\n')).unwrap();
        assert_eq!(back, c);

        let other = SecretKey::from_seed(&[8; 32]);
        let changed = [
            Checkpoint { seq: 18, ..c },
            Checkpoint {
                head: Hash([4; 32]),
                ..c
            },
            Checkpoint {
                public_key: other.public_key(),
                ..c
            },
            Checkpoint {
                chained: Some(Chained {
                    run: Hash([9; 32]),
                    prev,
                }),
                ..c
            },
            Checkpoint {
                chained: Some(Chained {
                    run,
                    prev: Hash::ZERO,
                }),
                ..c
            },
            // The same signature read as a format-1 line: another message, another prefix.
            Checkpoint { chained: None, ..c },
        ];
        for x in &changed {
            assert_eq!(x.verify_signature(), Err(SignatureInvalid), "{x:?}");
        }

        // A format-1 line still round-trips and verifies with its old meaning.
        let old = Checkpoint::sign_v1(&key, 19, Hash([3; 32]));
        old.verify_signature().unwrap();
        assert_eq!(old.format(), 1);
        assert!(old.to_line().starts_with(r#"{"format":1,"head":"0303"#));
        assert_eq!(
            Checkpoint::parse_line(old.to_line().trim_end()).unwrap(),
            old
        );
    }

    #[test]
    fn checkpoint_lines_are_parsed_strictly() {
        let key = SecretKey::from_seed(&[7; 32]);
        let line = Checkpoint::sign(&key, Hash([8; 32]), 1, Hash([3; 32]), Hash::ZERO).to_line();
        let line = line.trim_end();
        let old = Checkpoint::sign_v1(&key, 1, Hash([3; 32])).to_line();
        let old = old.trim_end();
        let bad = [
            line.replace(r#""format":2"#, r#""format":3"#),
            line.replace(r#""format":2"#, r#""format":1"#),
            old.replace(r#""format":1"#, r#""format":2"#),
            line.replace(r#""seq":1"#, r#""seq":"1""#),
            line.replace(r#""seq":1"#, r#""seq":-1"#),
            line.replace('}', r#","extra":0}"#),
            line.replace(r#""head":"03"#, r#""head":"0A"#),
            line.replace(r#""run":"08"#, r#""run":"8"#),
            line.replace(r#""prev":"00"#, r#""prev":null,"x":"00"#),
            line.replace(r#""signature":""#, r#""signature":"00"#),
            line.to_uppercase(),
            String::new(),
            "[]".to_owned(),
        ];
        for b in &bad {
            assert!(Checkpoint::parse_line(b).is_err(), "accepted {b}");
        }
        let missing_seq = line.replace(r#","seq":1"#, "");
        assert!(Checkpoint::parse_line(&missing_seq).is_err());

        let path = Path::new("x/checkpoints.jsonl");
        let torn = &line.as_bytes()[..line.len() - 3];
        assert!(matches!(
            parse_file(path, torn),
            Err(CheckpointError::Malformed { line: 1, .. })
        ));
        let two = format!("{line}\nnot json\n");
        assert!(matches!(
            parse_file(path, two.as_bytes()),
            Err(CheckpointError::Malformed { line: 2, .. })
        ));
        assert_eq!(parse_file(path, b"").unwrap(), Vec::new());
    }

    /// A chain of `n` format-2 checkpoints of run `run` by `key`, at seqs 0, 1, ...
    fn chain_of(key: &SecretKey, run: Hash, n: u64) -> Vec<Checkpoint> {
        let mut out: Vec<Checkpoint> = Vec::new();
        for seq in 0..n {
            let prev = out.last().map_or(Hash::ZERO, Checkpoint::line_hash);
            out.push(Checkpoint::sign(key, run, seq, Hash([seq as u8; 32]), prev));
        }
        out
    }

    fn file_of(lines: &[Checkpoint]) -> Vec<u8> {
        lines
            .iter()
            .flat_map(|c| c.to_line().into_bytes())
            .collect()
    }

    #[test]
    fn the_lines_of_a_file_form_one_chain_of_one_run() {
        let path = Path::new("x/checkpoints.jsonl");
        let key = SecretKey::from_seed(&[7; 32]);
        let run = Hash([1; 32]);
        let chain = chain_of(&key, run, 4);
        assert_eq!(parse_file(path, &file_of(&chain)).unwrap().len(), 4);
        // Cutting the newest lines leaves a valid chain: that is what a witness is for.
        assert!(parse_file(path, &file_of(&chain[..2])).is_ok());

        let chain_err = |lines: &[Checkpoint]| match parse_file(path, &file_of(lines)) {
            Err(CheckpointError::Chain { line, reason, .. }) => (line, reason),
            other => panic!("{other:?}"),
        };
        // A line removed from the middle, two swapped, the first one dropped.
        let (line, reason) = chain_err(&[chain[0], chain[2], chain[3]]);
        assert_eq!(line, 2);
        assert!(reason.contains("line 1 hashes to"), "{reason}");
        assert_eq!(chain_err(&[chain[1], chain[0]]).0, 1);
        assert!(chain_err(&chain[1..]).1.contains("first line"));
        // Properly chained, but going back in seq, or naming another run.
        let back = Checkpoint::sign(&key, run, 1, Hash([9; 32]), chain[3].line_hash());
        let mut lines = chain.clone();
        lines.push(back);
        assert!(chain_err(&lines).1.contains("never go back"));
        let elsewhere =
            Checkpoint::sign(&key, Hash([2; 32]), 9, Hash([9; 32]), chain[3].line_hash());
        lines.pop();
        lines.push(elsewhere);
        assert!(chain_err(&lines).1.contains("one file holds one run"));
        // Format-1 lines may precede the chain (its first line names the last of them), not
        // follow it.
        let old = Checkpoint::sign_v1(&key, 7, Hash([7; 32]));
        let first = Checkpoint::sign(&key, run, 0, Hash([0; 32]), old.line_hash());
        assert!(parse_file(path, &file_of(&[old, old, first])).is_ok());
        let genesis = Checkpoint::sign(&key, run, 0, Hash([0; 32]), Hash::ZERO);
        let late = [genesis, Checkpoint::sign_v1(&key, 7, Hash([7; 32]))];
        assert!(chain_err(&late).1.contains("old lines only come first"));
    }

    #[test]
    fn appending_signs_the_next_link_is_idempotent_and_refuses_a_damaged_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoints.jsonl");
        let log = dir.path().join("events.jsonl");
        let key = SecretKey::from_seed(&[5; 32]);
        let run = Hash([7; 32]);
        let (a, first) = append_signed(&path, &key, run, 3, Hash([1; 32]), &log).unwrap();
        assert_eq!(
            first,
            Appended {
                line: 1,
                written: true
            }
        );
        assert_eq!(a.chained.unwrap().prev, Hash::ZERO);
        let (b, second) = append_signed(&path, &key, run, 4, Hash([2; 32]), &log).unwrap();
        assert_eq!(second.line, 2);
        assert_eq!(b.chained.unwrap().prev, a.line_hash());
        let (again, third) = append_signed(&path, &key, run, 3, Hash([1; 32]), &log).unwrap();
        assert_eq!(
            third,
            Appended {
                line: 1,
                written: false
            }
        );
        assert_eq!(again, a);
        assert_eq!(read_file(&path).unwrap(), vec![(1, a), (2, b)]);

        // Behind the newest checkpoint, or for another run: refused, nothing written.
        let before = std::fs::read(&path).unwrap();
        assert!(matches!(
            append_signed(&path, &key, run, 2, Hash([3; 32]), &log),
            Err(CheckpointError::Truncated {
                line: 2,
                seq: 4,
                ..
            })
        ));
        assert!(matches!(
            append_signed(&path, &key, Hash([8; 32]), 9, Hash([3; 32]), &log),
            Err(CheckpointError::OtherRun { line: 2, .. })
        ));
        // A raw line that would break the chain.
        assert!(matches!(
            append(
                &path,
                &Checkpoint::sign(&key, run, 5, Hash([3; 32]), Hash::ZERO)
            ),
            Err(CheckpointError::Chain { line: 3, .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), before);

        let mut text = before.clone();
        text.extend_from_slice(b"{\"format\":2");
        std::fs::write(&path, &text).unwrap();
        assert!(matches!(
            append_signed(&path, &key, run, 5, Hash([3; 32]), &log),
            Err(CheckpointError::Malformed { line: 3, .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), text, "nothing appended");
    }

    #[test]
    fn a_witness_gets_each_line_once_and_must_be_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join("witness.jsonl");
        let key = SecretKey::from_seed(&[5; 32]);
        let chain = chain_of(&key, Hash([1; 32]), 2);
        assert!(append_witness(&w, &chain[0]).unwrap().written);
        assert!(!append_witness(&w, &chain[0]).unwrap().written);
        assert_eq!(append_witness(&w, &chain[1]).unwrap().line, 2);
        assert_eq!(read_witness(&w).unwrap().len(), 2);
        assert!(matches!(
            append_witness(dir.path(), &chain[0]),
            Err(CheckpointError::Io { .. })
        ));
        assert!(matches!(
            read_witness(&dir.path().join("missing")),
            Err(CheckpointError::Io { .. })
        ));
        // An old line names no run: it cannot be witnessed.
        std::fs::write(&w, Checkpoint::sign_v1(&key, 1, Hash::ZERO).to_line()).unwrap();
        assert!(matches!(
            read_witness(&w),
            Err(CheckpointError::Malformed { line: 1, .. })
        ));
    }

    #[test]
    fn a_witness_over_its_limit_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join("witness.jsonl");
        // Sparse: no 64 MiB is written, only read.
        std::fs::File::create(&w)
            .unwrap()
            .set_len(WITNESS_BYTES_MAX + 1)
            .unwrap();
        assert!(matches!(
            read_witness(&w),
            Err(CheckpointError::WitnessTooLarge { .. })
        ));
        let key = SecretKey::from_seed(&[5; 32]);
        let c = Checkpoint::sign(&key, Hash::ZERO, 0, Hash::ZERO, Hash::ZERO);
        assert!(matches!(
            append_witness(&w, &c),
            Err(CheckpointError::WitnessTooLarge { .. })
        ));
        assert_eq!(std::fs::metadata(&w).unwrap().len(), WITNESS_BYTES_MAX + 1);
    }

    /// A verified log of synthetic events, written to a run directory in `dir`.
    fn synth_run(dir: &Path, events: u64) -> (LogPaths, Vec<oracle_core::Event>, Vec<u8>) {
        use oracle_core::synth::{SynthConfig, synth_events};
        let events = synth_events(SynthConfig::steps(events, 3)).unwrap();
        let paths = LogPaths::of_run(dir);
        let mut bytes = Vec::new();
        for e in &events {
            bytes.extend(oracle_core::record::encode(e));
        }
        std::fs::write(&paths.log, &bytes).unwrap();
        (paths, events, bytes)
    }

    #[test]
    fn verify_checks_each_checkpoint_against_the_verified_log() {
        let dir = tempfile::tempdir().unwrap();
        let (paths, events, bytes) = synth_run(dir.path(), 50);
        let n = events.len() as u64;
        let run = events[0].hash;
        let key = SecretKey::from_seed(&[2; 32]);
        let other = SecretKey::from_seed(&[3; 32]);
        let opts = VerifyOptions {
            threads: 2,
            expected_head: None,
        };
        assert!(matches!(
            verify(&paths, &key.public_key(), Witness::None, opts),
            Err(CheckpointError::NoCheckpoint { others: 0, .. })
        ));

        // Old lines first (format 1: seq and head only), then the chain.
        let file = paths.checkpoints();
        for seq in [0, 20] {
            append(
                &file,
                &Checkpoint::sign_v1(&key, seq, events[seq as usize].hash),
            )
            .unwrap();
        }
        let created = create(&paths, &key, Witness::None, 1).unwrap();
        assert_eq!(created.checkpoint.seq, n - 1);
        assert_eq!(created.checkpoint.chained.unwrap().run, run);
        assert_eq!(created.file, dir.path().join("checkpoints.jsonl"));
        let (_, by_other) = append_signed(
            &file,
            &other,
            run,
            n - 1,
            events[n as usize - 1].hash,
            &paths.log,
        )
        .unwrap();
        assert_eq!(by_other.line, 4);
        let v = verify(&paths, &key.public_key(), Witness::None, opts).unwrap();
        let seqs: Vec<(u64, u64)> = v.proven.iter().map(|p| (p.seq, p.format)).collect();
        assert_eq!(seqs, vec![(0, 1), (20, 1), (n - 1, 2)]);
        assert_eq!(v.others, 1);
        assert_eq!(v.run, run);

        // Cut the log after event 9: the first checkpoint past its end (line 2, seq 20) is
        // reported first (file order).
        let cut: usize = events[..10]
            .iter()
            .map(|e| oracle_core::record::encode(e).len())
            .sum();
        std::fs::write(&paths.log, &bytes[..cut]).unwrap();
        assert!(matches!(
            verify(&paths, &key.public_key(), Witness::None, opts),
            Err(CheckpointError::Truncated {
                line: 2,
                seq: 20,
                events: 10,
                ..
            })
        ));
    }

    #[test]
    fn a_checkpoint_of_another_run_is_refused_by_name() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let (paths_a, _, _) = synth_run(a.path(), 30);
        // Another run: same shape, another seed, so another event 0.
        use oracle_core::synth::{SynthConfig, synth_events};
        let events_b = synth_events(SynthConfig {
            seed: 99,
            ..SynthConfig::steps(30, 3)
        })
        .unwrap();
        let paths_b = LogPaths::of_run(b.path());
        let bytes: Vec<u8> = events_b
            .iter()
            .flat_map(oracle_core::record::encode)
            .collect();
        std::fs::write(&paths_b.log, bytes).unwrap();
        let key = SecretKey::from_seed(&[2; 32]);
        create(&paths_a, &key, Witness::None, 1).unwrap();
        std::fs::copy(paths_a.checkpoints(), paths_b.checkpoints()).unwrap();
        let opts = VerifyOptions::default();
        let err = verify(&paths_b, &key.public_key(), Witness::None, opts).unwrap_err();
        assert!(
            matches!(err, CheckpointError::OtherRun { line: 1, found, .. } if found == events_b[0].hash),
            "{err:?}"
        );
        assert!(err.to_string().contains("was signed for run"), "{err}");
        assert!(err.is_integrity());
        // And `checkpoint` will not extend another run's chain.
        assert!(matches!(
            create(&paths_b, &key, Witness::None, 1),
            Err(CheckpointError::OtherRun { .. })
        ));
    }

    #[test]
    fn a_witness_finds_the_newest_checkpoints_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (paths, events, _) = synth_run(dir.path(), 40);
        let key = SecretKey::from_seed(&[2; 32]);
        let w = dir.path().join("witness");
        let file = paths.checkpoints();
        for seq in [10u64, 25] {
            let (c, _) = append_signed(
                &file,
                &key,
                events[0].hash,
                seq,
                events[seq as usize].hash,
                &paths.log,
            )
            .unwrap();
            append_witness(&w, &c).unwrap();
        }
        let opts = VerifyOptions::default();
        let v = verify(&paths, &key.public_key(), Witness::File(&w), opts).unwrap();
        let witnessed = v.witness.unwrap();
        assert_eq!((witnessed.statements, witnessed.latest_seq), (2, 25));

        // Cut the newest line: the file alone still verifies; the witness does not.
        let text = std::fs::read_to_string(&file).unwrap();
        let first: String = text.split_inclusive('\n').take(1).collect();
        std::fs::write(&file, first).unwrap();
        assert!(verify(&paths, &key.public_key(), Witness::None, opts).is_ok());
        assert!(matches!(
            verify(&paths, &key.public_key(), Witness::File(&w), opts),
            Err(CheckpointError::NotInFile {
                line: 2,
                seq: 25,
                ..
            })
        ));
        // An emptied witness proves nothing.
        std::fs::write(&w, "").unwrap();
        assert!(matches!(
            verify(&paths, &key.public_key(), Witness::File(&w), opts),
            Err(CheckpointError::WitnessEmpty { .. })
        ));
    }

    #[test]
    fn the_default_witness_is_the_runs_file_beside_the_key_and_must_exist() {
        assert_eq!(
            witness_dir(Path::new("keys/audit")),
            Path::new("keys/audit.witnesses")
        );
        assert_eq!(
            witness_dir_of_public(Path::new("keys/audit.pub")),
            Path::new("keys/audit.witnesses")
        );
        assert_eq!(
            witness_dir_of_public(Path::new("keys/audit.key")),
            Path::new("keys/audit.key.witnesses")
        );
        assert_eq!(
            witness_dir_of_public(Path::new(".pub")),
            Path::new(".pub.witnesses")
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("run")).unwrap();
        let (paths, events, _) = synth_run(&dir.path().join("run"), 40);
        let key = SecretKey::from_seed(&[2; 32]);
        let wdir = witness_dir(&dir.path().join("k"));
        let opts = VerifyOptions::default();
        let beside = Witness::Beside(&wdir);
        let created = create(&paths, &key, beside, 1).unwrap();
        let (file, appended) = created.witness.unwrap();
        assert_eq!(file, default_witness(&wdir, &events[0].hash));
        assert_eq!((appended.line, appended.written), (1, true));
        let v = verify(&paths, &key.public_key(), beside, opts).unwrap();
        assert_eq!(v.witness.unwrap().file, file);

        // The newest line cut: found with the default, not without a witness.
        std::fs::write(paths.checkpoints(), "").unwrap();
        assert!(matches!(
            verify(&paths, &key.public_key(), beside, opts),
            Err(CheckpointError::NoCheckpoint { .. })
        ));
        let older = Checkpoint::sign(&key, events[0].hash, 3, events[3].hash, Hash::ZERO);
        append(&paths.checkpoints(), &older).unwrap();
        assert!(verify(&paths, &key.public_key(), Witness::None, opts).is_ok());
        let err = verify(&paths, &key.public_key(), beside, opts).unwrap_err();
        assert!(
            matches!(&err, CheckpointError::NotInFile { path, line: 1, .. } if *path == file),
            "{err:?}"
        );
        assert!(err.is_integrity());

        // No witness there at all: a failure, naming where it was looked for.
        std::fs::remove_file(&file).unwrap();
        let err = verify(&paths, &key.public_key(), beside, opts).unwrap_err();
        assert!(
            matches!(&err, CheckpointError::WitnessMissing { path, .. } if *path == file),
            "{err:?}"
        );
        assert!(err.is_integrity());
        assert!(err.to_string().contains("--no-witness"), "{err}");
    }

    #[test]
    fn concurrent_appends_each_land_on_a_whole_link() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoints.jsonl");
        let log = dir.path().join("events.jsonl");
        let key = SecretKey::from_seed(&[5; 32]);
        let run = Hash([1; 32]);
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let (path, key, log) = (&path, &key, &log);
                s.spawn(move || {
                    for i in 0..25u8 {
                        append_signed(path, key, run, 7, Hash([t * 25 + i; 32]), log).unwrap();
                    }
                });
            }
        });
        // `read_file` checks the chain: each line names the one before it.
        let all = read_file(&path).unwrap();
        assert_eq!(all.len(), 100);
        assert!(all.iter().all(|(_, c)| c.verify_signature().is_ok()));
    }
}
