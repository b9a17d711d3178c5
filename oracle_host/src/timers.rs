//! A file home's timer index: one empty file `timers/<due_ms>-<run>` per run suspended on a
//! `sleep` step, written when a drive through the home ends on one, so `oracle serve` finds
//! the due timers by listing a directory (streamed, never all in memory) instead of reading
//! every run's log. The index is a hint: the run's log decides (a wake of a run that no
//! longer waits is refused and its entry dropped), and the writer's lock makes each timer fire
//! once however many wakers race.

use std::path::PathBuf;

use oracle_runtime::session::{Drive, Session, SessionError};

use crate::error::HostError;
use crate::home::{Home, Resume, Resumed};

/// The index's directory in a home.
pub const TIMERS_DIR: &str = "timers";

/// The most due timers one sweep wakes: a bound on the memory a sweep holds whatever the
/// index's size (a million pending timers are never listed into memory); the rest are woken
/// by the next sweep.
pub const WAKES_PER_SWEEP_MAX: usize = 1024;

/// Digits of the due instant in an entry's name: unix milliseconds zero-padded to 20 digits
/// (every `u64`), so names sort by due instant.
const DUE_DIGITS: usize = 20;

/// A timer in the index: when it is due (unix milliseconds) and the run that waits on it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timer {
    pub due_ms: u64,
    pub run: String,
}

impl Timer {
    fn name(&self) -> String {
        format!("{:0width$}-{}", self.due_ms, self.run, width = DUE_DIGITS)
    }

    fn parse(name: &str) -> Option<Timer> {
        let (due, run) = name.split_at_checked(DUE_DIGITS)?;
        let run = run.strip_prefix('-')?;
        if run.is_empty() || run.contains(['/', '\\']) || !due.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Timer {
            due_ms: due.parse().ok()?,
            run: run.to_owned(),
        })
    }
}

impl Home {
    fn timers_dir(&self) -> PathBuf {
        self.dir().join(TIMERS_DIR)
    }

    /// Indexes the timer `session` ended suspended on, if any. Best effort: a home whose index
    /// cannot be written still has the run's log, which is what a wake checks.
    pub(crate) fn note_timer(&self, session: &Session) {
        if let Some(t) = &session.report.timer {
            let timer = Timer {
                due_ms: t.due_ms,
                run: session.id.clone(),
            };
            let dir = self.timers_dir();
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(dir.join(timer.name()), b"");
        }
    }

    /// Timers in the index due at `now_ms`, earliest first, at most [`WAKES_PER_SWEEP_MAX`]
    /// of them. The directory is streamed: memory is bounded by the due timers kept, not by
    /// the index's size.
    pub fn due_timers(&self, now_ms: u64) -> Vec<Timer> {
        let Ok(entries) = std::fs::read_dir(self.timers_dir()) else {
            return Vec::new();
        };
        let mut due: Vec<Timer> = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(t) = name.to_str().and_then(Timer::parse) else {
                continue;
            };
            if t.due_ms <= now_ms {
                due.push(t);
                if due.len() > WAKES_PER_SWEEP_MAX {
                    due.sort();
                    due.truncate(WAKES_PER_SWEEP_MAX);
                }
            }
        }
        due.sort();
        due
    }

    /// Fires the timer `run` waits on (`oracle resume --wake`) and drives the run on: only if
    /// it is due, unless `force`.
    pub fn wake(&self, run: &str, force: bool, r: Resume<'_>) -> Result<Resumed, HostError> {
        let drive = Drive {
            wake: Some(force),
            ..r.drive
        };
        self.resume(run, Resume { drive, ..r })
    }

    /// Wakes `timer` (a due one from [`Home::due_timers`]) and drops its entry, which the
    /// drive writes again if the run sleeps once more. A wake refused because the run no
    /// longer waits on a timer (woken by someone else, cancelled, gone) drops it too; any
    /// other failure (its lock held by a drive, a binding missing) keeps it for a later sweep.
    pub fn wake_indexed(&self, timer: &Timer) -> Result<Resumed, HostError> {
        let path = self.timers_dir().join(timer.name());
        let _ = std::fs::remove_file(&path);
        let woken = self.wake(&timer.run, false, Resume::default());
        match &woken {
            Ok(_) => {}
            Err(HostError::Session(
                SessionError::NoTimer { .. }
                | SessionError::Finished { .. }
                | SessionError::NotFound { .. },
            )) => {}
            Err(_) => {
                let _ = std::fs::write(&path, b"");
            }
        }
        woken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_due_and_parse_back() {
        let a = Timer {
            due_ms: 9,
            run: "r-1".into(),
        };
        let b = Timer {
            due_ms: 10,
            run: "r-0".into(),
        };
        assert!(a.name() < b.name());
        assert_eq!(Timer::parse(&a.name()), Some(a));
        assert_eq!(Timer::parse("123-r"), None);
        assert_eq!(Timer::parse(&format!("{}-", "0".repeat(20))), None);
    }
}
