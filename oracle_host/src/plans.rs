//! Plans and other files a front end reads whole (`oracle run PLAN`, `plan check|fmt`,
//! `--value-file`, the config file): a regular file only (a FIFO, a device or a directory is
//! refused at once) whose size is checked against its named limit before it is read, and the
//! sub-plans a plan's `use` lines name.

use std::path::{Path, PathBuf};

use oracle_runtime::fsread::{self, ReadFileError};
use oracle_runtime::session::{self, PLAN_BYTES_MAX, SessionError};

/// Checks that the plan at `path` is a regular file within [`PLAN_BYTES_MAX`], before it is
/// read and parsed: a FIFO would otherwise hang the command and `/dev/zero` be read up to the
/// limit.
pub fn check(path: &Path) -> Result<(), ReadFileError> {
    fsread::open_regular(path, PLAN_BYTES_MAX, "plan_bytes_max").map(drop)
}

/// The copy of the plan run `run` of `home` keeps (read again by `resume` and `replay`), or
/// `None` for a run that cannot be found (left for the command to report) or a code run (it
/// keeps its command, not a plan).
pub fn stored(home: &Path, run: &str) -> Option<PathBuf> {
    let found = session::find(home, run).ok()?;
    // A code run keeps its command, not a plan (docs/AGENTS.md).
    (!crate::code::is_code_run(&found.dir)).then(|| found.dir.join(session::PLAN_FILE))
}

/// The text of the plan at `path` (a regular file within [`PLAN_BYTES_MAX`], UTF-8).
pub fn read(path: &Path) -> Result<String, SessionError> {
    session::read_text(path)
}

/// The sub-plans a plan's `use` lines name, read from `dir` (recursively, within the limits).
pub fn sources(dir: &Path, source: &str) -> oracle_plan::Sources {
    session::plan_sources(dir, source)
}

/// The bytes of the regular file at `path`, at most `limit` of them (`name` is the limit's
/// name in the refusal).
pub fn read_regular(path: &Path, limit: u64, name: &'static str) -> Result<Vec<u8>, ReadFileError> {
    fsread::read_regular_file(path, limit, name)
}
