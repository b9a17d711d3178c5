//! Bearer tokens: a file of `name:<blake3 hex of secret>` lines, never the secrets.
//!
//! `oracle serve token add NAME` draws a secret from the OS (32 bytes, shown once as hex) and
//! appends its BLAKE3 hash under NAME; the server hashes what a request presents and compares
//! hashes (`blake3::Hash` compares in constant time), against every line so the time does not
//! tell which name matched. A token's NAME is what the log records as `by` for the answers,
//! verdicts and claims sent with it, so names are restricted to characters that read the same
//! everywhere. The server reads the file again when it changes, so a token added while it runs
//! works at once, and one removed stops working, with the browser sessions made with it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Longest token name, in bytes.
pub const TOKEN_NAME_BYTES_MAX: usize = 64;
/// Largest token file read.
pub const TOKEN_FILE_BYTES_MAX: u64 = 1 << 20;
/// Random bytes in a secret (shown as twice as many hex characters).
pub const TOKEN_SECRET_BYTES: usize = 32;

/// Why the token file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: larger than token_file_bytes_max = {limit} bytes", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{}: line {line}: not `name:<64 hex characters>`", path.display())]
    Malformed { path: PathBuf, line: u64 },
    #[error(
        "token name `{0}`: use 1 to {TOKEN_NAME_BYTES_MAX} of the characters A-Z a-z 0-9 . _ - (the name is recorded in the log as who answered)"
    )]
    BadName(String),
    #[error("{}: a token named `{name}` exists already", path.display())]
    Exists { path: PathBuf, name: String },
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

/// Whether `name` may name a token.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= TOKEN_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The tokens of one file.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    entries: Vec<(String, blake3::Hash)>,
}

impl Tokens {
    /// Parses the file's text; blank lines and `#` comments are skipped.
    pub fn parse(path: &Path, text: &str) -> Result<Tokens, TokenError> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let malformed = || TokenError::Malformed {
                path: path.to_path_buf(),
                line: i as u64 + 1,
            };
            let (name, hex) = line.split_once(':').ok_or_else(malformed)?;
            if !valid_name(name) {
                return Err(malformed());
            }
            let hash = blake3::Hash::from_hex(hex).map_err(|_| malformed())?;
            entries.push((name.to_owned(), hash));
        }
        Ok(Tokens { entries })
    }

    /// Reads the file; a missing file holds no token.
    pub fn load(path: &Path) -> Result<Tokens, TokenError> {
        match read_limited(path)? {
            Some(text) => Tokens::parse(path, &text),
            None => Ok(Tokens::default()),
        }
    }

    /// The name of the token whose secret is `secret`, if any. Every line is compared.
    pub fn check(&self, secret: &str) -> Option<&str> {
        let presented = blake3::hash(secret.as_bytes());
        let mut found = None;
        for (name, hash) in &self.entries {
            if *hash == presented && found.is_none() {
                found = Some(name.as_str());
            }
        }
        found
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn read_limited(path: &Path) -> Result<Option<String>, TokenError> {
    use std::io::Read as _;
    let io = |source| TokenError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let mut text = String::new();
    file.take(TOKEN_FILE_BYTES_MAX + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > TOKEN_FILE_BYTES_MAX {
        return Err(TokenError::TooLarge {
            path: path.to_path_buf(),
            limit: TOKEN_FILE_BYTES_MAX,
        });
    }
    Ok(Some(text))
}

/// Adds a token named `name` to the file at `path` (created with mode 0600), and returns its
/// secret: the only time it is ever shown.
pub fn add(path: &Path, name: &str) -> Result<String, TokenError> {
    if !valid_name(name) {
        return Err(TokenError::BadName(name.to_owned()));
    }
    let tokens = Tokens::load(path)?;
    if tokens.names().any(|n| n == name) {
        return Err(TokenError::Exists {
            path: path.to_path_buf(),
            name: name.to_owned(),
        });
    }
    let mut bytes = [0u8; TOKEN_SECRET_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let line = format!("{name}:{}\n", blake3::hash(secret.as_bytes()).to_hex());
    let io = |source| TokenError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(io)?;
    file.write_all(line.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    Ok(secret)
}

/// The server's view of the token file: read again whenever its size or modification time
/// changes.
#[derive(Debug)]
pub struct TokenStore {
    path: PathBuf,
    cache: Mutex<(Option<Stamp>, Tokens)>,
}

impl TokenStore {
    /// Reads the file now (a malformed file is refused at start, not at the first request).
    pub fn open(path: &Path) -> Result<TokenStore, TokenError> {
        let tokens = Tokens::load(path)?;
        Ok(TokenStore {
            path: path.to_path_buf(),
            cache: Mutex::new((stamp(path), tokens)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tokens as the file holds them now: read again when its stamp changed since the last
    /// look. A file that became unreadable or malformed since keeps the tokens last read (and
    /// says so on stderr once per change).
    fn current(&self) -> std::sync::MutexGuard<'_, (Option<Stamp>, Tokens)> {
        let mut cache = match self.cache.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        let now = stamp(&self.path);
        if now != cache.0 {
            match Tokens::load(&self.path) {
                Ok(t) => cache.1 = t,
                Err(e) => eprintln!(
                    "warning: token file not read again: {e}; keeping the tokens read before"
                ),
            }
            cache.0 = now;
        }
        cache
    }

    /// The name of the token whose secret is `secret`, as the file holds it now.
    pub fn check(&self, secret: &str) -> Option<String> {
        self.current().1.check(secret).map(str::to_owned)
    }

    /// Whether the file still holds the token `name` with the secret whose hash is `hash`
    /// (a browser session made with a token lives only as long as that token's line).
    pub fn holds(&self, name: &str, hash: &blake3::Hash) -> bool {
        let cache = self.current();
        let mut found = false;
        for (n, h) in &cache.1.entries {
            // Every line compared (constant-time hash comparison), as `check` does.
            if h == hash && n == name {
                found = true;
            }
        }
        found
    }
}

/// What tells a changed token file from the one read before: its length, modification time,
/// and (on Unix) inode and change time, so a rewrite of equal length within one tick of the
/// clock, or a file renamed over it, is still read again.
type Stamp = (u64, std::time::SystemTime, u64, i64, i64);

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let (ino, ctime, ctime_ns) = {
        use std::os::unix::fs::MetadataExt as _;
        (m.ino(), m.ctime(), m.ctime_nsec())
    };
    #[cfg(not(unix))]
    let (ino, ctime, ctime_ns) = (0, 0, 0);
    Some((m.len(), m.modified().ok()?, ino, ctime, ctime_ns))
}
