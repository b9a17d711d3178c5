//! File tools: read a text file, write one atomically, list a directory. Each works on the path
//! the capability check approved (`ToolContext::resolved`, every symlink already resolved), so
//! what is touched is exactly what a grant covers.
//!
//! None of them enforces the call's timeout: a local read, write or listing is bounded by its
//! size limit instead, and stopping one half-way would gain nothing.

use std::fs::{self, File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::{arg_str, count, decl, io_reason, needs_arg, object, string, strings};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// The file a call works on: the resolved path from the capability check, or, for a caller that
/// made no check (tests, embedders), the input path under the working directory.
fn target(cx: &ToolContext<'_>, path: &str) -> PathBuf {
    match cx.resolved {
        Some(p) => p.to_path_buf(),
        None => cx.root.join(path),
    }
}

fn failed(path: &str, doing: &str, e: &std::io::Error) -> ToolError {
    ToolError::Failed(format!("cannot {doing} `{path}`: {}", io_reason(e)))
}

/// What a non-regular file is, for messages.
fn kind_of(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a named pipe"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// `fs.read {path}` → `{text, bytes}`: the whole file, which must be a regular file of UTF-8
/// text no larger than the call's output limit. Needs `fs:read:<path>`.
pub struct Read;

impl Tool for Read {
    fn decl(&self) -> ToolDecl {
        decl(
            "fs.read",
            "Read a UTF-8 text file: {text, bytes}.",
            Effect::Impure,
            object(&[("path", string())], &["path"]),
            object(
                &[("text", string()), ("bytes", count())],
                &["text", "bytes"],
            ),
            needs_arg("fs", "read", "path"),
        )
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let path = arg_str(input, "path")?;
        let file = target(cx, path);
        let limit = cx.output_bytes_max;
        // Look before opening: opening a named pipe for reading would block until a writer
        // appears, and a device may never end.
        let meta = fs::metadata(&file).map_err(|e| failed(path, "read", &e))?;
        if !meta.is_file() {
            return Err(ToolError::Failed(format!(
                "cannot read `{path}`: it is {}, not a regular file",
                kind_of(&meta)
            )));
        }
        if meta.len() > limit {
            return Err(ToolError::OutputTooLarge { limit });
        }
        let f = File::open(&file).map_err(|e| failed(path, "read", &e))?;
        // The file may have been swapped since the look above; check what was opened.
        let meta = f.metadata().map_err(|e| failed(path, "read", &e))?;
        if !meta.is_file() {
            return Err(ToolError::Failed(format!(
                "cannot read `{path}`: it is {}, not a regular file",
                kind_of(&meta)
            )));
        }
        // One byte past the limit tells a file that grew since the size check from one that
        // fits exactly.
        let mut bytes = Vec::new();
        f.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| failed(path, "read", &e))?;
        if bytes.len() as u64 > limit {
            return Err(ToolError::OutputTooLarge { limit });
        }
        let n = bytes.len() as u64;
        let text = String::from_utf8(bytes).map_err(|e| {
            ToolError::Failed(format!(
                "`{path}` is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ))
        })?;
        Ok(ToolOutput::of(json!({"text": text, "bytes": n})))
    }
}

/// `fs.write {path, content}` → `{bytes}`: replaces the file atomically, so a reader sees the
/// old content or the new, never a mix, and a crash leaves no half-written file. Creates the
/// parent directories; refuses to replace anything but a regular file; keeps the permissions of
/// a file it replaces. Needs `fs:write:<path>`.
pub struct Write;

impl Tool for Write {
    fn decl(&self) -> ToolDecl {
        decl(
            "fs.write",
            "Write a file atomically (temporary file, then rename): {bytes}.",
            Effect::Impure,
            object(
                &[("path", string()), ("content", string())],
                &["path", "content"],
            ),
            object(&[("bytes", count())], &["bytes"]),
            needs_arg("fs", "write", "path"),
        )
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let path = arg_str(input, "path")?;
        let content = arg_str(input, "content")?;
        let file = target(cx, path);
        let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
            return Err(ToolError::Failed(format!(
                "cannot write `{path}`: it names no file"
            )));
        };
        let permissions = match fs::symlink_metadata(&file) {
            Ok(meta) if meta.is_file() => Some(meta.permissions()),
            Ok(meta) => {
                return Err(ToolError::Failed(format!(
                    "cannot write `{path}`: it is {}, not a regular file",
                    if meta.file_type().is_symlink() {
                        "a symlink"
                    } else {
                        kind_of(&meta)
                    }
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(failed(path, "write", &e)),
        };
        fs::create_dir_all(dir).map_err(|e| failed(path, "create the directory of", &e))?;
        write_atomic(
            dir,
            &name.to_string_lossy(),
            &file,
            content.as_bytes(),
            permissions,
        )
        .map_err(|e| failed(path, "write", &e))?;
        Ok(ToolOutput::of(json!({"bytes": content.len() as u64})))
    }
}

/// Distinguishes temporary files of concurrent writes from one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to a new temporary file beside `file`, syncs it, renames it over `file` and
/// syncs the directory, so the rename itself survives a crash. The temporary file is removed if
/// anything fails before the rename.
fn write_atomic(
    dir: &Path,
    name: &str,
    file: &Path,
    bytes: &[u8],
    permissions: Option<fs::Permissions>,
) -> std::io::Result<()> {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(".{name}.oracle-tmp.{}.{n}", std::process::id()));
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        f.write_all(bytes)?;
        if let Some(p) = permissions {
            f.set_permissions(p)?;
        }
        f.sync_all()?;
        fs::rename(&temp, file)
    })();
    if let Err(e) = written {
        // Best effort: the temporary file may not exist, and the first error is the one to
        // report.
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    File::open(dir)?.sync_all()
}

/// `fs.list {path}` → `{entries}`: the names in a directory, sorted by their bytes, directories
/// marked with a trailing `/` (a symlink is listed as itself, unmarked, as `ls -p` does). Names
/// that are not UTF-8 are shown with U+FFFD in place of the bad bytes. Needs `fs:list:<path>`.
pub struct List;

impl Tool for List {
    fn decl(&self) -> ToolDecl {
        decl(
            "fs.list",
            "List a directory, sorted: {entries}.",
            Effect::Impure,
            object(&[("path", string())], &["path"]),
            object(&[("entries", strings())], &["entries"]),
            needs_arg("fs", "list", "path"),
        )
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let path = arg_str(input, "path")?;
        let dir = target(cx, path);
        let limit = cx.output_bytes_max;
        let meta = fs::metadata(&dir).map_err(|e| failed(path, "list", &e))?;
        if !meta.is_dir() {
            return Err(ToolError::Failed(format!(
                "cannot list `{path}`: it is not a directory"
            )));
        }
        let mut entries = Vec::new();
        let mut total: u64 = 0;
        for entry in fs::read_dir(&dir).map_err(|e| failed(path, "list", &e))? {
            let entry = entry.map_err(|e| failed(path, "list", &e))?;
            let mut name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry
                .file_type()
                .map_err(|e| failed(path, "list", &e))?
                .is_dir();
            if is_dir {
                name.push('/');
            }
            total = total.saturating_add(name.len() as u64);
            if total > limit {
                return Err(ToolError::OutputTooLarge { limit });
            }
            entries.push(name);
        }
        // `String`'s order is the order of its UTF-8 bytes.
        entries.sort();
        Ok(ToolOutput::of(json!({"entries": entries})))
    }
}
