//! The one way the CLI writes to stdout: buffered, and a reader that went away (`oracle log |
//! head`) becomes [`CliError::stdout_closed`], which `main` turns into a silent exit 0.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe returns `BrokenPipe` instead of killing the
//! process; `println!` would then panic (exit 101). Every write here returns the error instead,
//! so commands stop at once (streaming ones stop reading) and unwind normally, dropping locks
//! and temporary files as usual. SIGPIPE is deliberately not reset to its default, which would
//! kill the process mid-write without that cleanup.

use std::fmt;
use std::io::{self, BufWriter, IsTerminal, Stdout, Write};
use std::sync::{Mutex, PoisonError};

use crate::exit::CliError;

/// When to colour output: `--color auto|always|never`; `auto` colours a terminal unless the
/// `NO_COLOR` environment variable is set (https://no-color.org).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

static COLOR: std::sync::OnceLock<ColorChoice> = std::sync::OnceLock::new();

/// Whether a JSON document went to stdout (so an error after it is not printed as a second).
static PRINTED_JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether any JSON document was printed by this process.
pub fn printed_json() -> bool {
    PRINTED_JSON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Sets the colour choice for the process (from `main`, once).
pub fn set_color(choice: ColorChoice) {
    let _ = COLOR.set(choice);
}

/// Whether output to a stream that `is_terminal` describes is coloured.
pub fn colored(is_terminal: bool) -> bool {
    match COLOR.get().copied().unwrap_or(ColorChoice::Auto) {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    }
}

/// Writes `format!`-style text to stdout; `Err` when stdout is closed or fails.
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write_fmt(format_args!($($arg)*)) };
}

/// [`out!`] followed by a newline.
macro_rules! outln {
    () => { $crate::out::write_fmt(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::write_line(format_args!($($arg)*)) };
}

/// Stdout, shared by every command (all output goes through here).
static STDOUT: Mutex<Option<Out>> = Mutex::new(None);

struct Out {
    w: BufWriter<Stdout>,
    /// A terminal gets each line at once, so it interleaves with stderr as written; a pipe or a
    /// file gets large writes.
    tty: bool,
    /// Set after the first failure: nothing more is attempted.
    failed: Option<io::ErrorKind>,
}

fn with<T>(f: impl FnOnce(&mut BufWriter<Stdout>, bool) -> io::Result<T>) -> Result<T, CliError> {
    let mut guard = STDOUT.lock().unwrap_or_else(PoisonError::into_inner);
    let out = guard.get_or_insert_with(|| {
        let stdout = io::stdout();
        Out {
            tty: stdout.is_terminal(),
            w: BufWriter::with_capacity(64 << 10, stdout),
            failed: None,
        }
    });
    if let Some(kind) = out.failed {
        return Err(error(io::Error::from(kind)));
    }
    f(&mut out.w, out.tty).map_err(|e| {
        out.failed = Some(e.kind());
        error(e)
    })
}

fn error(e: io::Error) -> CliError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        CliError::stdout_closed()
    } else {
        CliError::input(format!("writing to stdout: {e}"))
    }
}

/// Writes formatted text (see [`out!`]).
pub fn write_fmt(args: fmt::Arguments<'_>) -> Result<(), CliError> {
    with(|w, tty| {
        w.write_fmt(args)?;
        if tty { w.flush() } else { Ok(()) }
    })
}

/// Writes formatted text and a newline (see [`outln!`]).
pub fn write_line(args: fmt::Arguments<'_>) -> Result<(), CliError> {
    with(|w, tty| {
        w.write_fmt(args)?;
        w.write_all(b"\n")?;
        if tty { w.flush() } else { Ok(()) }
    })
}

/// Writes raw bytes.
pub fn write_bytes(bytes: &[u8]) -> Result<(), CliError> {
    with(|w, tty| {
        w.write_all(bytes)?;
        if tty { w.flush() } else { Ok(()) }
    })
}

/// Prints a JSON value on one line.
pub fn json(v: &serde_json::Value) -> Result<(), CliError> {
    PRINTED_JSON.store(true, std::sync::atomic::Ordering::Relaxed);
    write_line(format_args!("{v}"))
}

/// Sends everything buffered to stdout. `main` calls it before exiting; call it before handing
/// stdout to a child process too, so output stays in order.
pub fn flush() -> Result<(), CliError> {
    with(|w, _| w.flush())
}
