//! File tools: read a text file, write one atomically, list a directory. Each checks its path
//! again at the moment it touches it (`ToolContext::path_now`: grants, symlinks, the working
//! directory, the run store) and then opens that real path without following any link
//! (`crate::confine`), so what is touched is exactly what a grant covers, even when a link was
//! made after the round's recorded verdict.
//!
//! None of them enforces the call's timeout: a local read, write or listing is bounded by its
//! size limit instead, and stopping one half-way would gain nothing.

use std::ffi::OsString;
use std::fs;
use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::{arg_str, count, decl, io_reason, needs_arg, object, string, strings};
use crate::confine::{self, DirHandle};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

fn failed(path: &str, doing: &str, e: &std::io::Error) -> ToolError {
    if confine::is_link_in_the_way(e) {
        return ToolError::Failed(format!(
            "cannot {doing} `{path}`: a symlink appeared on its path after it was checked; refused rather than followed"
        ));
    }
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
        let file = cx.path_now(path)?;
        let limit = cx.output_bytes_max;
        // Look before opening: opening a device may have effects of its own (the open below is
        // non-blocking, so a named pipe would not hang it either way).
        let meta = fs::symlink_metadata(&file).map_err(|e| failed(path, "read", &e))?;
        if !meta.is_file() {
            return Err(ToolError::Failed(format!(
                "cannot read `{path}`: it is {}, not a regular file",
                kind_of(&meta)
            )));
        }
        if meta.len() > limit {
            return Err(ToolError::OutputTooLarge { limit });
        }
        let f = confine::open_read(&file).map_err(|e| failed(path, "read", &e))?;
        // The file may have been swapped since the look above; check what was opened.
        let meta = f.metadata().map_err(|e| failed(path, "read", &e))?;
        if !meta.is_file() {
            return Err(ToolError::Failed(format!(
                "cannot read `{path}`: it is {}, not a regular file",
                kind_of(&meta)
            )));
        }
        // A hard link is the same file under another name, which may lie outside every grant
        // (or in the run store): no check of this name can tell, so it is refused.
        if meta.nlink() > 1 {
            return Err(ToolError::Failed(format!(
                "cannot read `{path}`: it has {} hard links, and another name of the same file may lie outside the grant; fs.read refuses hard-linked files",
                meta.nlink()
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
        let file = cx.path_now(path)?;
        let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
            return Err(ToolError::Failed(format!(
                "cannot write `{path}`: it names no file"
            )));
        };
        // Made and opened without following links: a link that appeared on the way since the
        // check fails the call instead of redirecting the write.
        let dir =
            DirHandle::open(dir, true).map_err(|e| failed(path, "create the directory of", &e))?;
        let mode = match dir.kind_of(name).map_err(|e| failed(path, "write", &e))? {
            None => None,
            Some(st) => {
                let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
                if kind != rustix::fs::FileType::RegularFile {
                    return Err(ToolError::Failed(format!(
                        "cannot write `{path}`: it is {}, not a regular file",
                        describe(kind)
                    )));
                }
                Some(st.st_mode & 0o7777)
            }
        };
        write_atomic(&dir, name, content.as_bytes(), mode)
            .map_err(|e| failed(path, "write", &e))?;
        Ok(ToolOutput::of(json!({"bytes": content.len() as u64})))
    }
}

/// Distinguishes temporary files of concurrent writes from one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What a non-regular directory entry is, for messages.
fn describe(kind: rustix::fs::FileType) -> &'static str {
    use rustix::fs::FileType;
    match kind {
        FileType::Symlink => "a symlink",
        FileType::Directory => "a directory",
        FileType::Fifo => "a named pipe",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        _ => "not a regular file",
    }
}

/// Writes `bytes` to a new temporary file in `dir`, syncs it, renames it over `name` and syncs
/// the directory, so the rename itself survives a crash. A file it replaces keeps its
/// permissions (`mode`). The temporary file is removed if anything fails before the rename.
fn write_atomic(
    dir: &DirHandle,
    name: &std::ffi::OsStr,
    bytes: &[u8],
    mode: Option<u32>,
) -> std::io::Result<()> {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temp = OsString::from(".");
    temp.push(name);
    temp.push(format!(".oracle-tmp.{}.{n}", std::process::id()));
    let written = (|| {
        let mut f = dir.create_new(&temp, mode.unwrap_or(0o666))?;
        f.write_all(bytes)?;
        if let Some(m) = mode {
            use std::os::unix::fs::PermissionsExt as _;
            f.set_permissions(fs::Permissions::from_mode(m))?;
        }
        f.sync_all()?;
        dir.rename(&temp, name)
    })();
    if let Err(e) = written {
        // Best effort: the temporary file may not exist, and the first error is the one to
        // report.
        let _ = dir.remove(&temp);
        return Err(e);
    }
    dir.sync()
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
        let dir = cx.path_now(path)?;
        let limit = cx.output_bytes_max;
        let meta = fs::symlink_metadata(&dir).map_err(|e| failed(path, "list", &e))?;
        if !meta.is_dir() {
            return Err(ToolError::Failed(format!(
                "cannot list `{path}`: it is not a directory"
            )));
        }
        let handle = DirHandle::open(&dir, false).map_err(|e| failed(path, "list", &e))?;
        // The directory that was opened (no link followed), not whatever the name means now.
        let opened = format!("/proc/self/fd/{}", handle.fd().as_raw_fd());
        let mut entries = Vec::new();
        let mut total: u64 = 0;
        for entry in fs::read_dir(&opened).map_err(|e| failed(path, "list", &e))? {
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
