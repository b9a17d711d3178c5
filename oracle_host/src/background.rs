//! Runs a server drives in the background on a file home: a bounded pool of places, one per
//! drive, taken before anything is created and given back when the drive's thread ends; and
//! the resume log where each drive's outcome is one line.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::HostError;
use crate::home::Home;
use crate::runid::ValidRun;

/// What the pool's refusal names (`busy`, with the limit).
const WHAT: &str = "runs driven in the background";

/// The background drives of one server: at most `max` at once, each outcome logged to `log`.
pub struct Background {
    count: Arc<AtomicUsize>,
    max: usize,
    log: PathBuf,
}

/// One place among a [`Background`]'s drives, given back when dropped (its thread drops it).
pub struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Background {
    /// A pool of `max` places whose drives log to `log`.
    pub fn new(log: PathBuf, max: usize) -> Background {
        Background {
            count: Arc::new(AtomicUsize::new(0)),
            max,
            log,
        }
    }

    /// The resume log this pool's drives write to.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Drives holding a place now.
    pub fn running(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// A place, or `busy` naming the limit.
    pub fn take(&self) -> Result<Place, HostError> {
        let max = self.max;
        self.count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|_| HostError::Busy {
                what: WHAT,
                limit: u64::try_from(max).unwrap_or(u64::MAX),
            })?;
        Ok(Place(self.count.clone()))
    }

    /// When a signal asks for a resume after it, the resume's checks (bindings, working
    /// directory) are made, and its place taken, before the signal is recorded: a refusal
    /// then leaves nothing half done.
    pub fn reserve(
        &self,
        home: &Home,
        run: &ValidRun,
        resume: bool,
    ) -> Result<Option<Place>, HostError> {
        if !resume {
            return Ok(None);
        }
        home.check_resumable(&home.find(&run.arg())?)?;
        self.take().map(Some)
    }

    /// Resumes `run` on a thread of its own in `place`, once its bindings are checked (a
    /// binding the home's key does not vouch for is refused here, before anything runs). One
    /// line, with who asked (`by`) and how it ended, goes to the log.
    pub fn resume(
        &self,
        home: &Home,
        run: &ValidRun,
        by: &str,
        place: Place,
    ) -> Result<(), HostError> {
        let found = home.find(&run.arg())?;
        // Checked now, so the caller hears of a refused binding or directory; the drive checks
        // again.
        home.check_resumable(&found)?;
        let log = self.log.clone();
        let (host, id, arg, by) = (home.clone(), run.id.clone(), run.arg(), by.to_owned());
        std::thread::Builder::new()
            .name(format!("resume {id}"))
            .spawn(move || {
                let _place = place;
                let outcome = match host.resume(&arg, crate::home::Resume::default()) {
                    Ok(r) => format!(
                        "{} ({} events, {} appended)",
                        crate::ending_word(&r.session.report.ending),
                        r.session.report.events,
                        r.session.report.appended
                    ),
                    Err(e) => format!("refused: {} ({})", e, e.code()),
                };
                append_log(&log, &format!("resume {id} (asked by {by}): {outcome}"));
            })
            .map_err(|e| {
                HostError::Thread(format!("cannot start a thread to resume {}: {e}", run.id))
            })?;
        Ok(())
    }
}

/// Appends one line to the resume log (best effort: a log that cannot be written loses it).
/// The line goes in one `write` to a file opened for appending, so lines from several
/// threads never interleave.
pub fn append_log(path: &Path, line: &str) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    if let Ok(mut log) = log {
        use std::io::Write as _;
        let _ = log.write_all(format!("{line}\n").as_bytes());
    }
}

/// Appends `WHAT: ENDING (N events)` (or `WHAT: refused: WHY (CODE)`) to the resume log: how
/// a drive started in the background ended.
pub fn log_outcome(path: &Path, what: &str, outcome: Result<crate::Session, HostError>) {
    let outcome = match outcome {
        Ok(s) => format!(
            "{} ({} events)",
            crate::ending_word(&s.report.ending),
            s.report.events
        ),
        Err(e) => format!("refused: {} ({})", e, e.code()),
    };
    append_log(path, &format!("{what}: {outcome}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_drives_are_bounded_and_given_back() {
        let max = 3;
        let pool = Background::new(PathBuf::from("unused.log"), max);
        let held: Vec<Place> = (0..max)
            .map(|_| pool.take().expect("a place below the limit"))
            .collect();
        let refused = pool.take().err().expect("none past the limit");
        assert_eq!(refused.code(), "busy");
        assert_eq!(refused.http_status(), 503);
        drop(held);
        assert_eq!(pool.running(), 0);
        assert!(pool.take().is_ok());
    }
}
