//! Reading a whole file that a user names (a plan, a key, a value): only a regular file, its
//! size checked on the opened handle against a named limit before anything is read, and never
//! more than the limit read even if the file grows meanwhile.
//!
//! Opening is non-blocking, so a FIFO with no writer is refused at once instead of hanging the
//! command, and `/dev/zero` or a terminal is refused instead of read forever.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct ReadFileError {
    pub path: PathBuf,
    pub reason: Refused,
}

/// The reason part of a [`ReadFileError`].
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A FIFO, a device, a socket or a directory: only regular files are read.
    #[error("is a {0}, not a regular file: refused")]
    NotRegular(&'static str),
    /// Larger than the limit: nothing was read (or, for a file that grew, nothing kept).
    #[error("{len} bytes, more than {name} = {limit}")]
    TooLarge {
        len: u64,
        limit: u64,
        name: &'static str,
    },
}

impl ReadFileError {
    fn new(path: &Path, reason: impl Into<Refused>) -> ReadFileError {
        ReadFileError {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// The reason as an `io::Error` (for error types that carry one beside the path).
    pub fn into_io(self) -> io::Error {
        match self.reason {
            Refused::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

/// What kind of non-regular file `t` is, for the message.
fn kind_name(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO (named pipe)"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// Opens `path` for reading if it is a regular file of at most `limit` bytes (`name` names the
/// limit in the error): the open file and its size. The checks are made on the opened handle,
/// so the file checked is the file read.
pub fn open_regular(
    path: &Path,
    limit: u64,
    name: &'static str,
) -> Result<(File, u64), ReadFileError> {
    // A socket cannot be opened at all (ENXIO): name it from the path first.
    if let Ok(meta) = std::fs::metadata(path)
        && meta.file_type().is_socket()
    {
        return Err(ReadFileError::new(path, Refused::NotRegular("socket")));
    }
    let file = OpenOptions::new()
        .read(true)
        // Without O_NONBLOCK, opening a FIFO waits for a writer; O_NOCTTY keeps a terminal from
        // becoming the controlling one. Neither changes how a regular file reads.
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| ReadFileError::new(path, e))?;
    let meta = file.metadata().map_err(|e| ReadFileError::new(path, e))?;
    if !meta.file_type().is_file() {
        return Err(ReadFileError::new(
            path,
            Refused::NotRegular(kind_name(meta.file_type())),
        ));
    }
    if meta.len() > limit {
        return Err(ReadFileError::new(
            path,
            Refused::TooLarge {
                len: meta.len(),
                limit,
                name,
            },
        ));
    }
    Ok((file, meta.len()))
}

/// Reads the whole of `path` if it is a regular file of at most `limit` bytes (see
/// [`open_regular`]). At most `limit + 1` bytes are ever read: a file that grew past the limit
/// after it was measured is refused too.
pub fn read_regular_file(
    path: &Path,
    limit: u64,
    name: &'static str,
) -> Result<Vec<u8>, ReadFileError> {
    let (file, len) = open_regular(path, limit, name)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ReadFileError::new(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(ReadFileError::new(
            path,
            Refused::TooLarge {
                len: bytes.len() as u64,
                limit,
                name,
            },
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_within_the_limit_are_read_and_others_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read_regular_file(&f, 5, "X_MAX").unwrap(), b"12345");
        let e = read_regular_file(&f, 4, "X_MAX").unwrap_err();
        assert!(
            matches!(
                e.reason,
                Refused::TooLarge {
                    len: 5,
                    limit: 4,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("X_MAX"), "{e}");
        let e = read_regular_file(dir.path(), 4, "X_MAX").unwrap_err();
        assert!(matches!(e.reason, Refused::NotRegular("directory")), "{e}");
        let e = read_regular_file(Path::new("/dev/zero"), 4, "X_MAX").unwrap_err();
        assert!(
            matches!(e.reason, Refused::NotRegular("character device")),
            "{e}"
        );
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Would block forever without O_NONBLOCK: no writer ever opens it.
        let e = read_regular_file(&fifo, 4, "X_MAX").unwrap_err();
        assert!(
            matches!(e.reason, Refused::NotRegular("FIFO (named pipe)")),
            "{e}"
        );
    }
}
