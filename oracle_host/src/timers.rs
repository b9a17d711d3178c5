//! A file home's timer index: one empty file per thing that comes due in a run, named by its
//! due instant: `timers/<due_ms>-<run>` for a run suspended on a `sleep` step or a deadline,
//! `timers/<due_ms>+<run>` for a pending adjudication under a real-time expiry
//! (`--adjudication-expiry 48h`). Written when a drive (or an outside claim) through the home
//! leaves one, so `oracle serve` finds what is due by listing a directory (streamed, never all
//! in memory) instead of reading every run's log. The index is a hint: the run's log decides (a
//! wake of a run that no longer waits is refused, an expiry of a request resolved first writes
//! nothing, and the entry is dropped), and the writer's lock makes each fire once however many
//! wakers race.

use std::path::PathBuf;

use oracle_runtime::adjudication::Swept;
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

/// What comes due: a run's timer (wake it) or a real-time adjudication expiry (expire the
/// run's due requests, then resume the run if it waits on a belief).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Due {
    Wake,
    Expiry,
}

impl Due {
    /// The separator between the instant and the run in an entry's name (neither can appear
    /// in a run id).
    fn separator(self) -> char {
        match self {
            Due::Wake => '-',
            Due::Expiry => '+',
        }
    }
}

/// A timer in the index: when it is due (unix milliseconds), the run, and what comes due.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timer {
    pub due_ms: u64,
    pub run: String,
    pub what: Due,
}

impl Timer {
    fn name(&self) -> String {
        let sep = self.what.separator();
        format!(
            "{:0width$}{sep}{}",
            self.due_ms,
            self.run,
            width = DUE_DIGITS
        )
    }

    fn parse(name: &str) -> Option<Timer> {
        let (due, rest) = name.split_at_checked(DUE_DIGITS)?;
        let (what, run) = match rest.strip_prefix('-') {
            Some(run) => (Due::Wake, run),
            None => (Due::Expiry, rest.strip_prefix('+')?),
        };
        if run.is_empty() || run.contains(['/', '\\']) || !due.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Timer {
            due_ms: due.parse().ok()?,
            run: run.to_owned(),
            what,
        })
    }
}

/// What a due expiry did: the requests it expired (none when a verdict came first), and the
/// drive of the run it resumed after them, when it waited on a belief.
pub struct Expiry {
    pub swept: Swept,
    pub resumed: Option<Result<Resumed, HostError>>,
}

impl Home {
    fn timers_dir(&self) -> PathBuf {
        self.dir().join(TIMERS_DIR)
    }

    /// Indexes the timer `session` ended suspended on, if any. Best effort: a home whose index
    /// cannot be written still has the run's log, which is what a wake checks.
    /// Also indexes the run's pending real-time expiries ([`Due::Expiry`]).
    pub(crate) fn note_timer(&self, session: &Session) {
        if let Some(t) = &session.report.timer {
            self.index(&Timer {
                due_ms: t.due_ms,
                run: session.id.clone(),
                what: Due::Wake,
            });
        }
        self.note_expiries(&session.id, &session.report.deadlines);
    }

    /// Indexes real-time adjudication expiries of `run` due at `due` (unix ms).
    pub(crate) fn note_expiries(&self, run: &str, due: &[u64]) {
        for &due_ms in due {
            self.index(&Timer {
                due_ms,
                run: run.to_owned(),
                what: Due::Expiry,
            });
        }
    }

    /// Writes one entry (best effort, as [`Home::note_timer`]).
    fn index(&self, timer: &Timer) {
        let dir = self.timers_dir();
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join(timer.name()), b"");
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

    /// Expires the due requests of `timer`'s run (a due [`Due::Expiry`] from
    /// [`Home::due_timers`]) and drops its entry: one `adjudications_expired` under the run's
    /// lock, or nothing when a verdict came first. When something expired and the run waits
    /// (on a belief of that line), it is resumed: it goes on, or stays waiting with nothing
    /// written. A failure to expire (its lock held past the wait, a torn log) keeps the entry
    /// for a later sweep; a run gone drops it.
    pub fn expire_indexed(&self, timer: &Timer) -> Result<Expiry, HostError> {
        let path = self.timers_dir().join(timer.name());
        let _ = std::fs::remove_file(&path);
        let swept = match self.expire_due(&timer.run) {
            Ok(s) => s,
            Err(e @ HostError::Session(SessionError::NotFound { .. })) => return Err(e),
            Err(e) => {
                let _ = std::fs::write(&path, b"");
                return Err(e);
            }
        };
        let resumed = (swept.seq.is_some() && self.waits_on_belief(&timer.run))
            .then(|| self.resume(&timer.run, Resume::default()));
        Ok(Expiry { swept, resumed })
    }

    /// Whether `run` is suspended on a belief (`memory.query` with `require: "resolved"`), as
    /// its log says; a run that cannot be read is not.
    fn waits_on_belief(&self, run: &str) -> bool {
        let Ok(found) = self.find(run) else {
            return false;
        };
        let Ok(events) = oracle_runtime::recorded::Recorded::read(&found.paths.log) else {
            return false;
        };
        matches!(
            oracle_runtime::session::last_program_event(&events).map(|e| e.typed()),
            Some(Ok(oracle_core::Payload::Suspended(s)))
                if s.reason.starts_with(oracle_memory::tools::BELIEF_WAIT_PREFIX)
        )
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
            what: Due::Wake,
        };
        let b = Timer {
            due_ms: 10,
            run: "r-0".into(),
            what: Due::Expiry,
        };
        assert!(a.name() < b.name());
        assert_eq!(b.name(), format!("{}10+r-0", "0".repeat(18)));
        assert_eq!(Timer::parse(&a.name()), Some(a));
        assert_eq!(Timer::parse(&b.name()), Some(b));
        assert_eq!(Timer::parse("123-r"), None);
        assert_eq!(Timer::parse(&format!("{}-", "0".repeat(20))), None);
    }
}
