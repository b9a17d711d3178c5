//! Whether a project's config file may choose a secret, an endpoint or a program: only once the
//! user trusted that file's exact bytes at that path (`oracle config trust`, as direnv's
//! `allow`), recorded in the user's own config directory. A front end parses the file and says
//! which of its settings a command would use; [`decide`] is the one rule, so every front end
//! refuses alike (docs/CONFIG.md, "Trusting a project's file"; docs/SECURITY.md).
//!
//! Why: an `oracle.toml` in the working directory is often someone else's (a cloned
//! repository). Left trusted, it chose a model's URL and which variable is sent there as its
//! key, a program `oracle serve` runs with the whole environment, and tool directories whose
//! programs a plan may run.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The environment variable naming the user's config directory outright (tests set it).
pub const CONFIG_DIR_ENV: &str = "ORACLE_CONFIG_DIR";
/// The config directory's name under `$XDG_CONFIG_HOME` (or `~/.config`).
pub const CONFIG_DIR_NAME: &str = "oracle";
/// The trust list, in the config directory: one `BLAKE3-HEX  CANONICAL-PATH` line per trusted
/// file (the layout `b3sum` prints, so a user can check it by hand).
pub const TRUST_FILE: &str = "trusted-files";
/// Largest trust list: a line per trusted project (about 100 bytes each), so 1 MiB is some
/// ten thousand projects; a larger file is not one this program wrote.
pub const TRUST_FILE_BYTES_MAX: u64 = 1 << 20;
/// The stable error code (`--json`: `error.code`) of a refusal.
pub const CODE: &str = "config_untrusted";
/// What the trust list opens with.
const HEADER: &str = "# oracle config trust: the BLAKE3 hash of each trusted project config file's bytes, two spaces, its canonical path (docs/CONFIG.md)\n";
/// Length of a BLAKE3 hash in hex.
const HASH_HEX_LEN: usize = 64;

/// The user's config directory: `$ORACLE_CONFIG_DIR`, else `$XDG_CONFIG_HOME/oracle` (an
/// absolute `XDG_CONFIG_HOME` only, as the XDG spec says), else `$HOME/.config/oracle`; `None`
/// when none is set. `var` reads the environment (a parameter, so the rule is testable).
pub fn config_dir(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(d) = set(CONFIG_DIR_ENV) {
        return Some(PathBuf::from(d));
    }
    match set("XDG_CONFIG_HOME") {
        Some(d) if Path::new(&d).is_absolute() => Some(PathBuf::from(d).join(CONFIG_DIR_NAME)),
        _ => set("HOME").map(|h| PathBuf::from(h).join(".config").join(CONFIG_DIR_NAME)),
    }
}

/// Whether setting `key` (dotted, as `oracle config show` names it) may come from a project's
/// file only once it is trusted. Deny by default: every setting needs trust but those known
/// to choose no secret, endpoint or program, so a key added later is guarded until someone
/// decides it is harmless.
pub fn needs_trust(key: &str) -> bool {
    const HARMLESS: [&str; 4] = [
        "home",
        "serve.listen",
        "serve.streams_max",
        "evolution.require_approval",
    ];
    let model_id = key.starts_with("models.") && key.ends_with(".id");
    // A rate chooses when a call goes, never where or with what (`crate::rate`).
    let rate = key.starts_with("models.") && (key.ends_with(".rate") || key.ends_with(".tokens"));
    let tool_rate = key.starts_with("tool_rates.");
    !(HARMLESS.contains(&key) || key.starts_with("prices.") || model_id || rate || tool_rate)
}

/// The hash trust is given to: BLAKE3 of the file's exact bytes, in hex.
pub fn content_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// A file's standing in the trust list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Trusted with exactly these bytes.
    Trusted,
    /// Never trusted (at this path).
    Untrusted,
    /// Trusted once, and changed since.
    Changed,
}

impl State {
    /// The word `oracle config show` prints.
    pub fn word(self) -> &'static str {
        match self {
            State::Trusted => "trusted",
            State::Untrusted => "untrusted",
            State::Changed => "changed",
        }
    }
}

/// A setting a command would take from a project's file, and its line there.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Setting {
    pub key: String,
    pub line: Option<usize>,
}

/// Why a project's file was not used, or the trust list could not be.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// A command would take settings that need trust from a file not trusted as it is.
    #[error("{}", untrusted_text(.shown, .settings, *.changed, .command))]
    Untrusted {
        /// The file as the user named it (`oracle.toml`).
        shown: String,
        /// Its canonical path, which the trust list keys.
        path: PathBuf,
        settings: Vec<Setting>,
        /// It was trusted once, with other bytes.
        changed: bool,
        /// The command that trusts it, ready to paste.
        command: String,
    },
    /// The trust list cannot be read or written, or a path cannot be kept in it.
    #[error("{}: {why}", .path.display())]
    List { path: PathBuf, why: String },
    /// No config directory: neither `ORACLE_CONFIG_DIR`, `XDG_CONFIG_HOME` nor `HOME` is set.
    #[error(
        "no config directory to keep trusted files in: set {CONFIG_DIR_ENV} (or XDG_CONFIG_HOME or HOME)"
    )]
    NoConfigDir,
}

fn untrusted_text(shown: &str, settings: &[Setting], changed: bool, command: &str) -> String {
    let named: Vec<String> = settings
        .iter()
        .map(|s| match s.line {
            Some(l) => format!("`{}` ({shown}:{l})", s.key),
            None => format!("`{}`", s.key),
        })
        .collect();
    let why = if changed {
        "changed since you trusted it"
    } else {
        "is not trusted"
    };
    format!(
        "{shown} {why}, and a project's config file may choose a secret, an endpoint or a program only once you trust its exact content: this command would take {} from it; read the file, then run `{command}` (or give these settings as flags or in your own config file); nothing was run",
        named.join(", ")
    )
}

impl TrustError {
    /// The stable code and details of this error (`crate::error` classes it).
    pub fn details(&self) -> (&'static str, Value) {
        match self {
            TrustError::Untrusted {
                path,
                settings,
                changed,
                command,
                ..
            } => {
                let list: Vec<Value> = settings
                    .iter()
                    .map(|s| json!({"key": s.key, "line": s.line}))
                    .collect();
                let details = json!({"path": path, "settings": list, "changed": changed, "trust_command": command});
                (CODE, details)
            }
            TrustError::List { path, .. } => ("config", json!({"path": path})),
            TrustError::NoConfigDir => ("config", json!({})),
        }
    }
}

/// The command that trusts `path`, quoted for a POSIX shell when it needs to be.
pub fn trust_command(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        format!("oracle config trust {text}")
    } else {
        format!("oracle config trust '{}'", text.replace('\'', "'\\''"))
    }
}

/// The user's trust list: canonical path to the hash trusted there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustList {
    entries: BTreeMap<PathBuf, String>,
}

impl TrustList {
    /// Reads the list in config directory `dir` (an empty list when there is none).
    pub fn read(dir: &Path) -> Result<TrustList, TrustError> {
        let path = dir.join(TRUST_FILE);
        let list_error = |why: String| TrustError::List {
            path: path.clone(),
            why,
        };
        if std::fs::symlink_metadata(&path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            return Ok(TrustList::default());
        }
        let bytes = oracle_runtime::fsread::read_regular_file(
            &path,
            TRUST_FILE_BYTES_MAX,
            "trust_file_bytes_max",
        )
        .map_err(|e| list_error(e.reason.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|_| list_error("not UTF-8".into()))?;
        TrustList::parse(&text, &path)
    }

    /// The list's text, as [`TrustList::write`] makes it, read from `path`.
    fn parse(text: &str, path: &Path) -> Result<TrustList, TrustError> {
        let mut entries = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let entry = line.split_once("  ").filter(|(h, p)| {
                h.len() == HASH_HEX_LEN
                    && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                    && Path::new(p).is_absolute()
            });
            let Some((hash, path)) = entry else {
                return Err(TrustError::List {
                    path: path.to_path_buf(),
                    why: format!(
                        "line {}: expected `BLAKE3-HEX  /ABSOLUTE/PATH` (remove the line, or the file, and trust again)",
                        i + 1
                    ),
                });
            };
            entries.insert(PathBuf::from(path), hash.to_owned());
        }
        Ok(TrustList { entries })
    }

    /// Where the file at canonical path `path`, holding `bytes`, stands.
    pub fn state(&self, path: &Path, bytes: &[u8]) -> State {
        match self.entries.get(path) {
            Some(h) if *h == content_hash(bytes) => State::Trusted,
            Some(_) => State::Changed,
            None => State::Untrusted,
        }
    }

    /// Writes the list into `dir` whole: a new file renamed over the old, so a reader sees the
    /// old list or the new one, never half of one. The directory is made (0700) if missing.
    fn write(&self, dir: &Path) -> Result<(), TrustError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let path = dir.join(TRUST_FILE);
        let list_error = |e: std::io::Error| TrustError::List {
            path: path.clone(),
            why: e.to_string(),
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(list_error)?;
        let mut text = String::from(HEADER);
        for (p, h) in &self.entries {
            text.push_str(&format!("{h}  {}\n", p.display()));
        }
        let tmp = dir.join(format!(".{TRUST_FILE}.{}.tmp", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map_err(list_error)
    }
}

/// A path the list can keep: UTF-8 (the list is text) with no line break.
fn keepable(dir: &Path, path: &Path) -> Result<(), TrustError> {
    match path.to_str() {
        Some(p) if !p.contains(['\n', '\r']) => Ok(()),
        _ => Err(TrustError::List {
            path: dir.join(TRUST_FILE),
            why: format!(
                "{}: a path with a line break or not in UTF-8 cannot be trusted",
                path.display()
            ),
        }),
    }
}

/// Records that the file at canonical path `path` is trusted with exactly `bytes` (replacing
/// what was trusted there before); returns the hash.
pub fn trust(dir: &Path, path: &Path, bytes: &[u8]) -> Result<String, TrustError> {
    keepable(dir, path)?;
    let mut list = TrustList::read(dir)?;
    let hash = content_hash(bytes);
    list.entries.insert(path.to_path_buf(), hash.clone());
    list.write(dir)?;
    Ok(hash)
}

/// Forgets the file at canonical path `path`; whether it was in the list.
pub fn untrust(dir: &Path, path: &Path) -> Result<bool, TrustError> {
    let mut list = TrustList::read(dir)?;
    if list.entries.remove(path).is_none() {
        return Ok(false);
    }
    list.write(dir)?;
    Ok(true)
}

/// The rule: a command may take `used` settings from the project file at canonical `path`
/// (named `shown`), holding `bytes`, if none of them needs trust ([`needs_trust`]) or the
/// user's list in `dir` trusts exactly these bytes there. The list is read only when a
/// setting needs it, so harmless settings never depend on it.
pub fn decide(
    dir: Option<&Path>,
    shown: &str,
    path: &Path,
    bytes: &[u8],
    used: &[Setting],
) -> Result<(), TrustError> {
    let mut settings: Vec<Setting> = used
        .iter()
        .filter(|s| needs_trust(&s.key))
        .cloned()
        .collect();
    if settings.is_empty() {
        return Ok(());
    }
    let state = match dir {
        Some(d) => TrustList::read(d)?.state(path, bytes),
        None => State::Untrusted,
    };
    if state == State::Trusted {
        return Ok(());
    }
    settings.sort();
    settings.dedup();
    Err(TrustError::Untrusted {
        shown: shown.to_owned(),
        path: path.to_path_buf(),
        settings,
        changed: state == State::Changed,
        command: trust_command(path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(keys: &[&str]) -> Vec<Setting> {
        keys.iter()
            .map(|k| Setting {
                key: (*k).to_owned(),
                line: Some(1),
            })
            .collect()
    }

    #[test]
    fn harmless_settings_need_no_trust_and_the_rest_do() {
        for k in ["home", "serve.listen", "prices.fast", "models.fast.id"] {
            assert!(!needs_trust(k), "{k}");
        }
        for k in [
            "store",
            "tools",
            "models.fast.url",
            "models.fast.key_env",
            "secrets.TOKEN.env",
            "serve.notify_cmd",
            "serve.token_file",
            "otlp.endpoint",
        ] {
            assert!(needs_trust(k), "{k}");
        }
    }

    #[test]
    fn only_the_exact_bytes_at_the_exact_path_are_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("cfg");
        let file = Path::new("/p/oracle.toml");
        let keys = used(&["models.fast.url"]);
        let e = decide(Some(&d), "oracle.toml", file, b"a", &keys).unwrap_err();
        assert!(
            matches!(e, TrustError::Untrusted { changed: false, .. }),
            "{e}"
        );
        assert!(
            e.to_string().contains("oracle config trust /p/oracle.toml"),
            "{e}"
        );
        decide(Some(&d), "oracle.toml", file, b"a", &used(&["home"])).unwrap();

        trust(&d, file, b"a").unwrap();
        decide(Some(&d), "oracle.toml", file, b"a", &keys).unwrap();
        let e = decide(Some(&d), "oracle.toml", file, b"b", &keys).unwrap_err();
        assert!(
            matches!(e, TrustError::Untrusted { changed: true, .. }),
            "{e}"
        );
        let other = Path::new("/q/oracle.toml");
        assert!(decide(Some(&d), "oracle.toml", other, b"a", &keys).is_err());
        assert!(decide(None, "oracle.toml", file, b"a", &keys).is_err());

        assert!(untrust(&d, file).unwrap());
        assert!(!untrust(&d, file).unwrap());
        assert!(decide(Some(&d), "oracle.toml", file, b"a", &keys).is_err());
    }

    #[test]
    fn a_damaged_list_is_refused_by_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TRUST_FILE), "# x\nnot a hash  /p\n").unwrap();
        let e = TrustList::read(dir.path()).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let over = vec![b'#'; TRUST_FILE_BYTES_MAX as usize + 1];
        std::fs::write(dir.path().join(TRUST_FILE), over).unwrap();
        let e = TrustList::read(dir.path()).unwrap_err();
        assert!(e.to_string().contains("trust_file_bytes_max"), "{e}");
    }

    #[test]
    fn the_config_dir_honours_the_override_then_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let all = env(&[
            (CONFIG_DIR_ENV, "/o"),
            ("XDG_CONFIG_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(config_dir(all), Some(PathBuf::from("/o")));
        let xdg = env(&[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(config_dir(xdg), Some(PathBuf::from("/x/oracle")));
        let relative = env(&[("XDG_CONFIG_HOME", "x"), ("HOME", "/h")]);
        assert_eq!(
            config_dir(relative),
            Some(PathBuf::from("/h/.config/oracle"))
        );
        assert_eq!(config_dir(env(&[])), None);
    }

    #[test]
    fn paths_that_need_it_are_quoted_in_the_command() {
        assert_eq!(
            trust_command(Path::new("/a b/it's.toml")),
            "oracle config trust '/a b/it'\\''s.toml'"
        );
    }
}
