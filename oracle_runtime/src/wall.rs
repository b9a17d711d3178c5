//! Wall time, read in this one module: the clock is an outside answer. `clock.wall` records
//! what it read as a tool output, and a `sleep` step records its timer's due instant
//! (`timer_set`) and the instant it fired (`timer_fired`); replay and resume take all three
//! from the log and never come here. Instants are integer unix milliseconds (no floats in a
//! log) with their RFC 3339 UTC text beside them; parsing, arithmetic and printing are jiff's.

use jiff::{Span, SpanRelativeTo, Timestamp};

/// The longest `sleep { for: ... }`: 366 days. A longer wait is almost surely a unit mistake
/// (`10000d`), and the bound keeps every due instant far inside jiff's range.
pub const SLEEP_FOR_MS_MAX: u64 = 366 * 24 * 60 * 60 * 1000;

/// The latest instant `sleep { until: ... }` accepts: 9999-12-31T23:59:59Z (the last instant
/// RFC 3339 can write with a four-digit year), in unix milliseconds.
pub const INSTANT_MS_MAX: u64 = 253_402_300_799_000;

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

/// Why a duration or an instant is refused. A timer tool's failure records this text, so each
/// variant is worded as before; `reason` is the parser's own (jiff's) explanation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WallError {
    #[error("`{text}` is not a duration such as 2s, 10m, 2h or 2d: {reason}")]
    NotDuration { text: String, reason: String },
    #[error("`{text}`: {reason} (use days, hours, minutes or seconds)")]
    Calendar { text: String, reason: String },
    #[error("`{text}` is negative")]
    Negative { text: String },
    #[error("`{text}` is longer than {SLEEP_FOR_MS_MAX} ms (366 days), the longest sleep")]
    TooLong { text: String },
    #[error("`{text}` is not an RFC 3339 instant such as 2026-12-01T09:00:00Z: {reason}")]
    NotInstant { text: String, reason: String },
    #[error("`{text}` is before 1970 or after year 9999")]
    OutOfRange { text: String },
}

/// A duration such as `2s`, `10m`, `2h`, `2d`, `1h 30m` or `PT10M`, in milliseconds. Days
/// are 24 hours (a timer is an interval, not a calendar date); months and years, negative
/// durations and ones past [`SLEEP_FOR_MS_MAX`] are refused, and a fraction of a millisecond
/// is dropped.
pub fn duration_ms(text: &str) -> Result<u64, WallError> {
    let span: Span = text.parse().map_err(|e| WallError::NotDuration {
        text: text.to_owned(),
        reason: format!("{e}"),
    })?;
    let d = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|e| WallError::Calendar {
            text: text.to_owned(),
            reason: format!("{e}"),
        })?;
    if d.is_negative() {
        return Err(WallError::Negative {
            text: text.to_owned(),
        });
    }
    match u64::try_from(d.as_millis()) {
        Ok(ms) if ms <= SLEEP_FOR_MS_MAX => Ok(ms),
        _ => Err(WallError::TooLong {
            text: text.to_owned(),
        }),
    }
}

/// An RFC 3339 instant with its offset (`2026-12-01T09:00:00Z`, `...+01:00`), in unix
/// milliseconds; instants before 1970 or after [`INSTANT_MS_MAX`] are refused.
pub fn instant_ms(text: &str) -> Result<u64, WallError> {
    let t: Timestamp = text.parse().map_err(|e| WallError::NotInstant {
        text: text.to_owned(),
        reason: format!("{e}"),
    })?;
    match u64::try_from(t.as_millisecond()) {
        Ok(ms) if ms <= INSTANT_MS_MAX => Ok(ms),
        _ => Err(WallError::OutOfRange {
            text: text.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_whole_milliseconds() {
        assert_eq!(duration_ms("2s"), Ok(2_000));
        assert_eq!(duration_ms("10m"), Ok(600_000));
        assert_eq!(duration_ms("2h"), Ok(7_200_000));
        assert_eq!(duration_ms("2d"), Ok(172_800_000));
        assert_eq!(duration_ms("1h 30m"), Ok(5_400_000));
        assert_eq!(duration_ms("PT10M"), Ok(600_000));
        assert!(duration_ms("1mo").is_err());
        assert!(duration_ms("-2s").is_err());
        assert!(duration_ms("367d").is_err());
        assert!(duration_ms("soon").is_err());
    }

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
