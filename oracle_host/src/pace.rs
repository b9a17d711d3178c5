//! Pacing a drive's calls by its rates ([`crate::rate`]), with the windows kept where every
//! process of a home or a store finds them: a file per model or tool under `<home>/rates/`,
//! changed under an exclusive lock, or a row of the store's `rate_windows`, changed in one
//! transaction with the database's clock. The runtime asks for a turn through
//! `oracle_runtime::pace::Pacer` and names neither.
//!
//! A call that must wait sleeps until its window frees (at most [`SLEEP_MS_MAX`] at a time,
//! then asks again), for as long as it takes: a wait is never a failure, so a run records the
//! same events with a limit as without. A window that cannot be read or written fails the call
//! (recorded, as an unreachable endpoint is).

use std::fs::{self, File, OpenOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use oracle_runtime::pace::{PaceError, Pacer, Turn};
use serde_json::Value;

use crate::rate::{Limits, Rates, SLEEP_MS_MAX, Window};

/// The directory of a home's windows.
pub const RATES_DIR: &str = "rates";

/// Why a window could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the window cannot be written: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(transparent)]
    Store(#[from] oracle_pg::PgError),
}

/// `source` at `path`.
fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> WindowError + '_ {
    move |source| WindowError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where windows are kept, each changed whole under that place's lock with that place's clock.
pub trait Windows: Send + Sync {
    /// Runs `change` on `key`'s window at the place's time now (milliseconds), keeping what it
    /// leaves; returns what it returned.
    fn change(
        &self,
        key: &str,
        change: &mut dyn FnMut(&mut Window, u64) -> Option<u64>,
    ) -> Result<Option<u64>, WindowError>;
}

/// A pacer over `windows` for `rates`.
pub struct Paced {
    pub rates: Rates,
    pub windows: Arc<dyn Windows>,
}

impl Paced {
    fn limits(&self, key: &str) -> Limits {
        self.rates.limits.get(key).copied().unwrap_or_default()
    }
}

impl Pacer for Paced {
    fn turn(&self, tool: &str, input: &Value) -> Result<Option<Turn>, PaceError> {
        let Some((key, limits)) = self.rates.for_call(tool, input) else {
            return Ok(None);
        };
        loop {
            // `Some(now)`: the turn is taken at `now`; `None` with `wait` set: not yet.
            let mut wait = 0u64;
            let mut ask = |w: &mut Window, now: u64| match w.ask(limits, now) {
                Ok(()) => Some(now),
                Err(at) => {
                    wait = at.saturating_sub(now);
                    None
                }
            };
            let taken = self.windows.change(&key, &mut ask).map_err(|e| PaceError {
                key: key.clone(),
                why: e.to_string(),
            })?;
            if let Some(at_ms) = taken {
                return Ok(Some(Turn { key, at_ms }));
            }
            std::thread::sleep(Duration::from_millis(wait.clamp(1, SLEEP_MS_MAX)));
        }
    }

    fn done(&self, turn: &Turn, tokens: u64) {
        let limits = self.limits(&turn.key);
        let mut end = |w: &mut Window, now: u64| {
            w.done(limits, turn.at_ms, now, tokens);
            None
        };
        // The call is over: a window not written only paces later calls less well.
        let _ = self.windows.change(&turn.key, &mut end);
    }
}

/// A home's windows: `<home>/rates/<key>.json` (the key's space a `.`: `model.fast.json`),
/// rewritten whole (a temporary file renamed over it) under an exclusive lock on
/// `<key>.lock`, with the wall clock.
pub struct HomeWindows {
    pub dir: PathBuf,
}

impl HomeWindows {
    fn lock(&self, name: &str) -> Result<File, WindowError> {
        fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let path = self.dir.join(format!("{name}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        // Held for a read and a write of a small file: waiting for it blocks, never spins.
        file.lock().map_err(io(&path))?;
        Ok(file)
    }
}

impl Windows for HomeWindows {
    fn change(
        &self,
        key: &str,
        change: &mut dyn FnMut(&mut Window, u64) -> Option<u64>,
    ) -> Result<Option<u64>, WindowError> {
        let name = key.replace(' ', ".");
        let _lock = self.lock(&name)?;
        let path = self.dir.join(format!("{name}.json"));
        // A window that cannot be read (never written, cut by a crash) starts empty: at worst
        // one window's calls go again.
        let mut window: Window = fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let out = change(&mut window, crate::now_ms());
        let bytes = serde_json::to_vec(&window)?;
        let tmp = self.dir.join(format!("{name}.json.tmp"));
        fs::write(&tmp, bytes).map_err(io(&tmp))?;
        fs::rename(&tmp, &path).map_err(io(&path))?;
        Ok(out)
    }
}

/// A store's windows: a row of `rate_windows` each, changed in one transaction with the
/// database's clock (`oracle_pg::Store::change_rate_window`). One connection, made when first
/// needed and made again after a failure, shared by every drive of a worker.
pub struct StoreWindows {
    url: String,
    store: std::sync::Mutex<Option<oracle_pg::Store>>,
}

impl StoreWindows {
    pub fn new(url: &str) -> StoreWindows {
        StoreWindows {
            url: url.to_owned(),
            store: std::sync::Mutex::new(None),
        }
    }
}

impl Windows for StoreWindows {
    fn change(
        &self,
        key: &str,
        change: &mut dyn FnMut(&mut Window, u64) -> Option<u64>,
    ) -> Result<Option<u64>, WindowError> {
        let mut held = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let store = match held.take() {
            Some(store) => store,
            None => oracle_pg::Store::connect(&self.url)?,
        };
        let mut on_row = |body: &str, now: u64| {
            // A row never written (or not one) starts empty, as a home's file does.
            let mut window: Window = serde_json::from_str(body).unwrap_or_default();
            let out = change(&mut window, now);
            (serde_json::to_string(&window).unwrap_or_default(), out)
        };
        // A connection that failed is dropped: the next change connects again.
        let changed = store.change_rate_window(key, &mut on_row)?;
        *held = Some(store);
        Ok(changed)
    }
}

/// The pacer of a drive for `rates` over `windows` (a store's), else the home's at `home`;
/// `None` when there are no rates.
pub fn pacer(
    home: &std::path::Path,
    windows: Option<&Arc<dyn Windows>>,
    rates: &Rates,
) -> Option<Arc<dyn Pacer>> {
    if rates.is_empty() {
        return None;
    }
    let windows = windows.cloned().unwrap_or_else(|| {
        Arc::new(HomeWindows {
            dir: home.join(RATES_DIR),
        })
    });
    Some(Arc::new(Paced {
        rates: rates.clone(),
        windows,
    }))
}
