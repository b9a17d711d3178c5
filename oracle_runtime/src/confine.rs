//! Opening a checked path without following any symlink, so a file tool touches exactly the
//! path its capability check resolved, even if a link appeared after the check.
//!
//! The check ([`crate::access::Guard::check`]) resolves every symlink and approves a real path
//! (absolute, canonical). These functions walk that path one component at a time from `/` with
//! `openat(O_NOFOLLOW)`: if any component is (now) a symlink, the open fails with `ELOOP` or
//! `ENOTDIR` instead of going where the link points. A link created between the check and the
//! use (by another call of the same round, or another process) therefore cannot lead outside
//! what was approved; the tool fails instead.
//!
//! Deliberately absent: `openat2(RESOLVE_BENEATH)`, which needs Linux 5.6; the walk works on any
//! Unix and costs one `openat` per component.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, CWD, Mode, OFlags};

/// Flags for every directory opened on the way.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn not_canonical(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("`{}` is not a canonical absolute path", path.display()),
    )
}

/// The normal components of a canonical absolute path (`Err` for anything else).
fn components(path: &Path) -> io::Result<Vec<&OsStr>> {
    let mut parts = path.components();
    if parts.next() != Some(Component::RootDir) {
        return Err(not_canonical(path));
    }
    parts
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(not_canonical(path)),
        })
        .collect()
}

/// Opens the directory at `path` (canonical, absolute), following no symlink on the way. With
/// `create`, missing directories are made (mode 0777 less the umask), each one then opened
/// without following links like the rest.
pub fn open_dir(path: &Path, create: bool) -> io::Result<OwnedFd> {
    let mut dir = rustix::fs::openat(CWD, "/", dir_flags(), Mode::empty())?;
    for name in components(path)? {
        let next = match rustix::fs::openat(&dir, name, dir_flags(), Mode::empty()) {
            Err(rustix::io::Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                rustix::fs::openat(&dir, name, dir_flags(), Mode::empty())?
            }
            other => other?,
        };
        dir = next;
    }
    Ok(dir)
}

/// The parent directory and the final name of a canonical absolute path.
fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(not_canonical(path)),
    }
}

/// Opens the file at `path` for reading, following no symlink (not even a last component that
/// is one). Opened non-blocking, so a named pipe or device does not hang the open; the caller
/// checks the kind of what it got through the handle.
pub fn open_read(path: &Path) -> io::Result<File> {
    let (parent, name) = split(path)?;
    let dir = open_dir(parent, false)?;
    let fd = rustix::fs::openat(
        &dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// A directory held open for writing a file into it by name.
pub struct DirHandle {
    fd: OwnedFd,
}

impl DirHandle {
    /// Opens (with `create`, making) the directory at `path`, following no symlink.
    pub fn open(path: &Path, create: bool) -> io::Result<DirHandle> {
        open_dir(path, create).map(|fd| DirHandle { fd })
    }

    /// What `name` in this directory is, without following it if it is a link: `None` if
    /// there is nothing by that name.
    pub fn kind_of(&self, name: &OsStr) -> io::Result<Option<rustix::fs::Stat>> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates a new file `name` in this directory (it must not exist), for writing.
    pub fn create_new(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )?;
        Ok(File::from(fd))
    }

    /// Renames `from` to `to`, both in this directory (atomic replacement).
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, from, &self.fd, to).map_err(Into::into)
    }

    /// Removes the file `name` from this directory.
    pub fn remove(&self, name: &OsStr) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()).map_err(Into::into)
    }

    /// Syncs the directory, so a rename in it survives a crash.
    pub fn sync(&self) -> io::Result<()> {
        rustix::fs::fsync(&self.fd).map_err(Into::into)
    }

    /// The handle, for listing the directory through `/proc/self/fd`.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

/// Whether an I/O error means a symlink stood where the walk expected a plain component.
pub fn is_link_in_the_way(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == rustix::io::Errno::LOOP.raw_os_error()
        || code == rustix::io::Errno::NOTDIR.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_link_anywhere_on_the_path_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::write(root.join("real/f"), "x").unwrap();
        symlink(root.join("real"), root.join("link")).unwrap();
        symlink(root.join("real/f"), root.join("real/g")).unwrap();
        assert!(open_read(&root.join("real/f")).is_ok());
        let e = open_read(&root.join("link/f")).unwrap_err();
        assert!(is_link_in_the_way(&e), "{e}");
        let e = open_read(&root.join("real/g")).unwrap_err();
        assert!(is_link_in_the_way(&e), "{e}");
        assert!(DirHandle::open(&root.join("link/new"), true).is_err());
        assert!(
            !root.join("real/new").exists(),
            "nothing made through the link"
        );
        assert!(DirHandle::open(&root.join("real/a/b"), true).is_ok());
        assert!(root.join("real/a/b").is_dir());
        assert!(open_read(Path::new("relative/path")).is_err());
        assert!(open_read(&root.join("real/../real/f")).is_err());
    }
}
