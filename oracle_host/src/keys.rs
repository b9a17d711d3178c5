//! Signing keys and signed checkpoints for a front end (`oracle keygen`, `oracle checkpoint`,
//! `oracle verify --pubkey`, the approvers of `oracle evolve`): key files read and written,
//! a run's head signed and copied to a witness, and the checkpoints of one key checked. The
//! formats are in docs/FORMAT.md; the work is `oracle_runtime::checkpoint`'s.

use std::path::{Path, PathBuf};

use oracle_runtime::checkpoint::{
    self, CheckpointError, Created, PublicKey, SecretKey, Verified, Witness,
};
use oracle_runtime::{LogPaths, VerifyOptions};

/// Where a checkpoint's statement is copied, or which witness a verification reads.
#[derive(Clone, Copy, Debug)]
pub enum WitnessAt<'a> {
    /// This file.
    File(&'a Path),
    /// None (a checkpoint cut off the end of the file then goes unseen).
    None,
    /// The run's file in the key pair's witness directory (`KEY.witnesses/`).
    BesideKey,
}

/// `oracle keygen --out FILE`: a new key pair, the secret key at `secret` (mode 0600 on Unix)
/// and its public key at `FILE.pub`, never overwriting either. The public key and its file.
pub fn generate(secret: &Path) -> Result<(PublicKey, PathBuf), CheckpointError> {
    let key = SecretKey::generate()?;
    let public = checkpoint::write_key_pair(secret, &key)?;
    Ok((key.public_key(), public))
}

/// `oracle checkpoint`: verifies the log at `paths`, signs its head with the secret key in
/// `key_file`, appends the checkpoint beside the log and copies it to `witness`.
pub fn sign(
    paths: &LogPaths,
    key_file: &Path,
    witness: WitnessAt<'_>,
    threads: usize,
) -> Result<Created, CheckpointError> {
    let key = checkpoint::read_secret_key(key_file)?;
    let dir = checkpoint::witness_dir(key_file);
    let witness = match witness {
        WitnessAt::File(w) => Witness::File(w),
        WitnessAt::None => Witness::None,
        WitnessAt::BesideKey => Witness::Beside(&dir),
    };
    checkpoint::create(paths, &key, witness, threads)
}

/// The secret key in the file at `path`.
pub fn read_secret_key(path: &Path) -> Result<SecretKey, CheckpointError> {
    checkpoint::read_secret_key(path)
}

/// The public key in the file at `path` (from `oracle keygen`, `FILE.pub`).
pub fn read_public_key(path: &Path) -> Result<PublicKey, CheckpointError> {
    checkpoint::read_public_key(path)
}

/// `oracle verify --pubkey FILE`: the log at `paths` and the checkpoints `key` (read from
/// `key_file`) signed of it, with the witness `witness` (beside the key pair: the one of
/// `key_file`).
pub fn verify(
    paths: &LogPaths,
    key: &PublicKey,
    key_file: &Path,
    witness: WitnessAt<'_>,
    opts: VerifyOptions,
) -> Result<Verified, CheckpointError> {
    let dir = checkpoint::witness_dir_of_public(key_file);
    let witness = match witness {
        WitnessAt::File(w) => Witness::File(w),
        WitnessAt::None => Witness::None,
        WitnessAt::BesideKey => Witness::Beside(&dir),
    };
    checkpoint::verify(paths, key, witness, opts)
}
