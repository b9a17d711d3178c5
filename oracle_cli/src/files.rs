//! Files the CLI reads whole (plans, `--value-file`): through `oracle_runtime::fsread`, so a
//! FIFO, a device or a directory is refused at once and a file's size is checked against its
//! named limit before it is read. Exit 2, nothing started or written.

use std::path::Path;

use oracle_runtime::fsread;
use oracle_runtime::session::{self, PLAN_BYTES_MAX};
use serde_json::json;

use crate::exit::{self, CliError};

/// Largest `--value-file` (a step's output given by hand), in bytes: as large as a tool's
/// input or output may be (8 MiB), since it stands for one.
pub const VALUE_FILE_BYTES_MAX: u64 = 8 << 20;

/// Largest config file (`oracle.toml`, docs/CONFIG.md), in bytes: a few settings, written by
/// hand; anything larger is not one.
pub const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;

fn refused(e: fsread::ReadFileError, json_out: bool) -> CliError {
    let err = CliError::input(e.to_string());
    if json_out
        && let Err(closed) = crate::out::json(
            &json!({"ok": false, "error": exit::error_json(None, exit::INPUT, &err.message)}),
        )
    {
        return closed;
    }
    err
}

/// Checks that the plan at `path` is a regular file within [`PLAN_BYTES_MAX`], before the
/// runtime reads and parses it: a FIFO would otherwise hang the command and `/dev/zero` be read
/// up to the limit.
pub fn check_plan(path: &Path, json_out: bool) -> Result<(), CliError> {
    fsread::open_regular(path, PLAN_BYTES_MAX, "plan_bytes_max")
        .map(drop)
        .map_err(|e| refused(e, json_out))
}

/// [`check_plan`] for the copy of the plan a run keeps (read again by `resume` and `replay`), when
/// `run` names one. An unknown run is left for the runtime to report.
pub fn check_stored_plan(home: &Path, run: &str, json_out: bool) -> Result<(), CliError> {
    match session::find(home, run) {
        // A code run keeps its command, not a plan (docs/AGENTS.md).
        Ok(found) if oracle_host::code::is_code_run(&found.dir) => Ok(()),
        Ok(found) => check_plan(&found.dir.join(session::PLAN_FILE), json_out),
        Err(_) => Ok(()),
    }
}

/// Reads the `--value-file` at `path`: a regular file of at most [`VALUE_FILE_BYTES_MAX`].
pub fn read_value_file(path: &Path) -> Result<Vec<u8>, CliError> {
    fsread::read_regular_file(path, VALUE_FILE_BYTES_MAX, "value_file_bytes_max")
        .map_err(|e| refused(e, false))
}
