//! The home's sealing key: how oracle trusts a file beside a log that the log cannot check.
//!
//! Two kinds of file beside a log steer what a resume does, yet are not part of the hash chain:
//! the bindings a run was started with (`run.json`: where its models are, which environment
//! variables hold its secrets, where its tools and its working directory are) and resume
//! points (the engine's derived state). Anyone who can write a run directory can rewrite them,
//! and a hash alone proves nothing (it can be recomputed). So each is authenticated with a
//! keyed MAC under a secret that lives in the home, outside every run directory, readable by
//! its owner alone ([`KEY_FILE`], mode 0600): a file that does not carry the MAC its content
//! should have is not used. A binding is then given again (`--model`, `--secret`, `--tools`, or
//! by resuming from the run's directory), and a resume point is skipped with a warning.
//!
//! What is absent: no key ever enters a log, an event, a resume point or an error message; no
//! MAC is compared by anything but BLAKE3's constant-time equality.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The key's file in the home: 64 lowercase hex digits and a newline, mode 0600.
pub const KEY_FILE: &str = "seal.key";

/// Bytes of key material (BLAKE3's key size).
pub const KEY_BYTES: usize = 32;

/// Most bytes of the key file read (64 hex digits, a newline, and room for a CRLF).
const KEY_FILE_BYTES_MAX: u64 = 2 * KEY_BYTES as u64 + 2;

/// Why the home's key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: not a sealing key (64 hex digits expected); move it aside and oracle makes a new one (runs sealed with the old one then need their bindings given again)",
        path.display()
    )]
    Malformed { path: PathBuf },
    #[error(
        "{}: readable by others (mode {mode:o}); `chmod 600` it: whoever reads it can forge run bindings and resume points",
        path.display()
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error("no randomness for a new sealing key: {0}")]
    Random(String),
}

/// The home's secret. Its `Debug` never shows it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SealKey([u8; KEY_BYTES]);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

impl SealKey {
    /// A key from its bytes (tests, and a home whose key is kept elsewhere).
    pub const fn from_bytes(bytes: [u8; KEY_BYTES]) -> SealKey {
        SealKey(bytes)
    }

    /// The key of `home`, made (from OS randomness) the first time it is needed. The home is
    /// created if missing. Two processes making it at once end with one key: the file is
    /// linked into place only if none exists, and the loser reads the winner's.
    pub fn open_or_create(home: &Path) -> Result<SealKey, SealError> {
        let path = home.join(KEY_FILE);
        match read_key(&path) {
            Ok(k) => return Ok(k),
            Err(SealError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        fs::create_dir_all(home).map_err(io(home))?;
        let mut bytes = [0u8; KEY_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| SealError::Random(e.to_string()))?;
        // A name no other writer uses, thread or process: two threads of one server creating
        // the key at once must not remove each other's file (the process id alone is shared).
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| SealError::Random(e.to_string()))?;
        let tmp = home.join(format!(
            "{KEY_FILE}.{}.{}.tmp",
            std::process::id(),
            u64::from_be_bytes(nonce)
        ));
        let write = || -> std::io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(format!("{}\n", hex(&bytes)).as_bytes())?;
            f.sync_all()
        };
        let _ = fs::remove_file(&tmp);
        write().map_err(io(&tmp))?;
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                // The new name is durable before anything is sealed with the key.
                let _ = fs::File::open(home).and_then(|d| d.sync_all());
                Ok(SealKey(bytes))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key(&path),
            Err(e) => Err(SealError::Io { path, source: e }),
        }
    }

    /// The key of `home` if it has one; `None` when it has none yet.
    pub fn open(home: &Path) -> Result<Option<SealKey>, SealError> {
        match read_key(&home.join(KEY_FILE)) {
            Ok(k) => Ok(Some(k)),
            Err(SealError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The MAC of `bytes` for `purpose` (a fixed string per kind of file, so a MAC made for one
    /// kind never verifies as another).
    pub fn mac(&self, purpose: &str, bytes: &[u8]) -> oracle_core::Hash {
        let sub = blake3::derive_key(purpose, &self.0);
        oracle_core::Hash(*blake3::keyed_hash(&sub, bytes).as_bytes())
    }

    /// Whether `mac` is the MAC of `bytes` for `purpose` (compared in constant time).
    pub fn verify(&self, purpose: &str, bytes: &[u8], mac: &oracle_core::Hash) -> bool {
        let sub = blake3::derive_key(purpose, &self.0);
        blake3::keyed_hash(&sub, bytes) == blake3::Hash::from_bytes(mac.0)
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> SealError + '_ {
    move |source| SealError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads a key file: never through a symlink, never one others may read.
fn read_key(path: &Path) -> Result<SealKey, SealError> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(io(path))?;
    let meta = f.metadata().map_err(io(path))?;
    if !meta.is_file() {
        return Err(SealError::Malformed {
            path: path.to_path_buf(),
        });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SealError::Exposed {
            path: path.to_path_buf(),
            mode,
        });
    }
    let mut text = String::new();
    f.take(KEY_FILE_BYTES_MAX)
        .read_to_string(&mut text)
        .map_err(|_| SealError::Malformed {
            path: path.to_path_buf(),
        })?;
    let digits = text.trim_end();
    let mut out = [0u8; KEY_BYTES];
    let valid = digits.len() == 2 * KEY_BYTES
        && digits
            .as_bytes()
            .chunks(2)
            .zip(out.iter_mut())
            .all(|(pair, o)| {
                std::str::from_utf8(pair)
                    .ok()
                    .and_then(|p| u8::from_str_radix(p, 16).ok())
                    .map(|b| *o = b)
                    .is_some()
            });
    if !valid {
        return Err(SealError::Malformed {
            path: path.to_path_buf(),
        });
    }
    Ok(SealKey(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_gets_one_key_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = SealKey::open_or_create(dir.path()).unwrap();
        let b = SealKey::open_or_create(dir.path()).unwrap();
        assert_eq!(a, b);
        let mode = fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(format!("{a:?}"), "SealKey(..)");
    }

    /// Threads of one process (a server starting runs at once on a fresh home) creating the key
    /// together all get the one key the file keeps.
    #[test]
    fn threads_creating_a_key_at_once_agree_on_it() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let keys: Vec<SealKey> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|_| s.spawn(|| SealKey::open_or_create(dir.path()).unwrap()))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let kept = SealKey::open(dir.path()).unwrap().unwrap();
            assert!(keys.iter().all(|k| *k == kept));
        }
    }

    #[test]
    fn a_key_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        SealKey::open_or_create(dir.path()).unwrap();
        let path = dir.path().join(KEY_FILE);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            SealKey::open(dir.path()),
            Err(SealError::Exposed { .. })
        ));
    }

    #[test]
    fn a_mac_is_for_one_purpose_and_one_content() {
        let k = SealKey::from_bytes([7; KEY_BYTES]);
        let m = k.mac("a", b"x");
        assert!(k.verify("a", b"x", &m));
        assert!(!k.verify("b", b"x", &m));
        assert!(!k.verify("a", b"y", &m));
        assert!(!SealKey::from_bytes([8; KEY_BYTES]).verify("a", b"x", &m));
    }
}
