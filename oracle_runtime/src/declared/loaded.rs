//! The files an interpreted tool may load from its directory, pinned with it (docs/TOOLS.md,
//! "What a run pins"): a script an interpreter runs (a file the exec tool's `args` name, or a
//! program beside the manifest that starts with `#!`) imports what lies beside it (Python puts
//! the script's directory first on its module path; `require("./x")`, `. ./lib.sh` alike), and
//! an edit to such a module changes the tool's behaviour as surely as an edit to the script.
//! So every regular file under the script's directory is hashed into the pin, and a changed,
//! added or removed one refuses `resume` and `replay` as a changed script does.
//!
//! What is absent: no file is left out but Python's bytecode caches ([`CACHE_DIRS`], written
//! beside the modules by the interpreter itself from the pinned sources); no walk is unbounded
//! (files, bytes and depth, each a named limit: a directory past one refuses the tool, never a
//! silently partial pin).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Most files pinned from an interpreted tool's directory: each is read whole and hashed every
/// time the tools are loaded. A directory holding more is refused: give the tool one of its own.
pub const LOADED_FILES_MAX: usize = 256;
/// Most bytes read from an interpreted tool's directory, all files together (what one program
/// file may be, `manifest::PROGRAM_BYTES_MAX`).
pub const LOADED_BYTES_MAX: u64 = super::manifest::PROGRAM_BYTES_MAX;
/// Deepest directory walked below the script's (a package's subpackages); deeper, or a link
/// that loops, refuses the tool.
pub const LOADED_DEPTH_MAX: usize = 8;
/// Directories an interpreter writes its caches into, beside the modules it loaded: regenerated
/// from the pinned sources, and new after the first run, so never pinned.
pub const CACHE_DIRS: &[&str] = &["__pycache__"];

/// Why an interpreted tool's directory cannot be pinned.
#[derive(Debug, thiserror::Error)]
pub enum LoadedError {
    #[error("holds more than {LOADED_FILES_MAX} files")]
    TooManyFiles,
    #[error("holds more than {LOADED_BYTES_MAX} bytes of files")]
    TooManyBytes,
    #[error("is nested more than {LOADED_DEPTH_MAX} directories deep (or a link loops)")]
    TooDeep,
    #[error("`{path}` cannot be read: {reason}")]
    Io { path: String, reason: String },
}

/// One file pinned from a tool's directory.
pub struct LoadedFile {
    /// Relative to the manifest's directory (to the walked directory for one outside it), `/`
    /// separated: what the pin records and a refusal names.
    pub path: String,
    pub bytes: Vec<u8>,
}

/// Every regular file under each of `dirs` (sorted by their recorded path, each once), except
/// the files in `skip` (pinned already: the program, the files `args` name, the manifest) and
/// [`CACHE_DIRS`], bounded as the module says.
pub fn files_under(
    dirs: &BTreeSet<PathBuf>,
    manifest_dir: &Path,
    skip: &BTreeSet<PathBuf>,
) -> Result<Vec<LoadedFile>, LoadedError> {
    let mut found: BTreeMap<String, PathBuf> = BTreeMap::new();
    for dir in dirs {
        walk(dir, 0, &mut found)?;
    }
    let mut out = Vec::new();
    let mut bytes_read = 0u64;
    let mut seen = BTreeSet::new();
    for (_, path) in found {
        let canonical = path.canonicalize().unwrap_or_else(|_| path.clone());
        if skip.contains(&canonical) || !seen.insert(canonical.clone()) {
            continue;
        }
        let left = LOADED_BYTES_MAX.saturating_sub(bytes_read);
        let bytes = super::read_bounded(&canonical, left).map_err(|e| match e {
            super::ReadError::TooLarge { .. } => LoadedError::TooManyBytes,
            super::ReadError::Io { reason } => LoadedError::Io {
                path: path.display().to_string(),
                reason,
            },
        })?;
        bytes_read += bytes.len() as u64;
        let rel = named(&path, manifest_dir, dirs);
        out.push(LoadedFile { path: rel, bytes });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Collects the regular files under `dir` into `found` (by path), following links (bounded by
/// depth and count).
fn walk(
    dir: &Path,
    depth: usize,
    found: &mut BTreeMap<String, PathBuf>,
) -> Result<(), LoadedError> {
    if depth > LOADED_DEPTH_MAX {
        return Err(LoadedError::TooDeep);
    }
    let io = |e: std::io::Error| LoadedError::Io {
        path: dir.display().to_string(),
        reason: crate::tools::io_reason(&e),
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    // read_dir's order is the file system's: sorted, so the walk (and what a limit cuts) is
    // the same on every machine.
    entries.sort();
    for path in entries {
        // Followed: a link to a module is loaded as the module.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            let cache = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| CACHE_DIRS.contains(&n));
            if !cache {
                walk(&path, depth + 1, found)?;
            }
        } else if meta.is_file() {
            if found.len() >= LOADED_FILES_MAX {
                return Err(LoadedError::TooManyFiles);
            }
            found.insert(path.display().to_string(), path);
        }
    }
    Ok(())
}

/// The path a pin records for `path`: relative to the manifest's directory, else to the walked
/// directory holding it.
fn named(path: &Path, manifest_dir: &Path, dirs: &BTreeSet<PathBuf>) -> String {
    let rel = path
        .strip_prefix(manifest_dir)
        .ok()
        .or_else(|| dirs.iter().find_map(|d| path.strip_prefix(d).ok()));
    let rel = rel.unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}
