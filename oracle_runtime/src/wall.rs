//! Wall time, read in this one module: the clock is an outside answer. `clock.wall` records
//! what it read as a tool output, and a `sleep` step records its timer's due instant
//! (`timer_set`) and the instant it fired (`timer_fired`); replay and resume take all three
//! from the log and never come here. Instants are integer unix milliseconds (no floats in a
//! log) with their RFC 3339 UTC text beside them; parsing, arithmetic and printing are jiff's.

use jiff::Timestamp;

pub use oracle_plan::time::{
    INSTANT_MS_MAX, SLEEP_FOR_MS_MAX, TimeError as WallError, duration_ms, instant_ms,
};

/// The longest backoff wait (a retry policy's, between two attempts) a drive waits out in its
/// own process, recording the timer's `timer_fired` itself: 60 s. Why: `oracle run` of a plan
/// whose step retries after a second should complete in one command, while a longer wait
/// holds no process (or a worker's thread) and suspends the run on its timer like a `sleep`,
/// for the wakers. A process killed mid-wait leaves the recorded timer for a wake.
pub const BACKOFF_IN_PROCESS_MS_MAX: u64 = 60_000;

/// Blocks until the wall clock reaches `due_ms` (at once if it has), then returns the clock.
pub fn wait_until(due_ms: u64) -> u64 {
    loop {
        let now = now_ms();
        if now >= due_ms {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(due_ms - now));
    }
}

/// The wall clock now, in unix milliseconds (0 for a clock set before 1970).
pub fn now_ms() -> u64 {
    u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0)
}

/// `ms` as RFC 3339 UTC text (`2026-11-26T19:07:47.123Z`; whole seconds print without a
/// fraction). `ms` at most [`INSTANT_MS_MAX`] always prints; past it, the bound's text.
pub fn rfc3339(ms: u64) -> String {
    let ms = i64::try_from(ms.min(INSTANT_MS_MAX)).unwrap_or(0);
    match Timestamp::from_millisecond(ms) {
        Ok(t) => t.to_string(),
        Err(_) => "9999-12-31T23:59:59Z".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_round_trip_through_rfc3339() {
        let ms = instant_ms("2026-12-01T09:00:00Z").unwrap();
        assert_eq!(ms, 1_796_115_600_000);
        assert_eq!(rfc3339(ms), "2026-12-01T09:00:00Z");
        assert_eq!(instant_ms("2026-12-01T10:00:00+01:00"), Ok(ms));
        assert_eq!(rfc3339(ms + 5), "2026-12-01T09:00:00.005Z");
        assert!(instant_ms("1969-12-31T23:59:59Z").is_err());
        assert!(instant_ms("2026-12-01 09:00").is_err());
        assert_eq!(rfc3339(u64::MAX), "9999-12-31T23:59:59Z");
    }
}
