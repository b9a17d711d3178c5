//! The time grammar of plans, shared by the compiler (`oracle plan check` refuses a literal
//! deadline that does not parse, E0225) and the runtime (`sleep`, `human.ask` and
//! `memory.query` deadlines, `--adjudication-expiry`): durations and RFC 3339 instants,
//! parsed by jiff, as integer unix milliseconds. No clock is read here.

use jiff::{Span, SpanRelativeTo, Timestamp};

/// The longest `sleep { for: ... }`: 366 days. A longer wait is almost surely a unit mistake
/// (`10000d`), and the bound keeps every due instant far inside jiff's range.
pub const SLEEP_FOR_MS_MAX: u64 = 366 * 24 * 60 * 60 * 1000;

/// The latest instant `sleep { until: ... }` accepts: 9999-12-31T23:59:59Z (the last instant
/// RFC 3339 can write with a four-digit year), in unix milliseconds.
pub const INSTANT_MS_MAX: u64 = 253_402_300_799_000;

/// Why a duration or an instant is refused. A timer tool's failure records this text, so each
/// variant is worded as before; `reason` is the parser's own (jiff's) explanation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("`{text}` is not a duration such as 2s, 10m, 2h or 2d: {reason}")]
    NotDuration { text: String, reason: String },
    #[error("`{text}`: {reason} (use days, hours, minutes or seconds)")]
    Calendar { text: String, reason: String },
    #[error("`{text}` is negative")]
    Negative { text: String },
    #[error("`{text}` is longer than {SLEEP_FOR_MS_MAX} ms (366 days), the longest sleep")]
    TooLong { text: String },
    #[error("`{text}` is not an RFC 3339 instant such as 2026-12-01T09:00:00Z: {reason}")]
    NotRfc3339 { text: String, reason: String },
    #[error("`{text}` is before 1970 or after year 9999")]
    OutOfRange { text: String },
}

/// A duration such as `2s`, `10m`, `2h`, `2d`, `1h 30m` or `PT10M`, in milliseconds. Days
/// are 24 hours (a timer is an interval, not a calendar date); months and years, negative
/// durations and ones past [`SLEEP_FOR_MS_MAX`] are refused, and a fraction of a millisecond
/// is dropped.
pub fn duration_ms(text: &str) -> Result<u64, TimeError> {
    let span: Span = text.parse().map_err(|e| TimeError::NotDuration {
        text: text.to_owned(),
        reason: format!("{e}"),
    })?;
    let d = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|e| TimeError::Calendar {
            text: text.to_owned(),
            reason: format!("{e}"),
        })?;
    if d.is_negative() {
        return Err(TimeError::Negative {
            text: text.to_owned(),
        });
    }
    match u64::try_from(d.as_millis()) {
        Ok(ms) if ms <= SLEEP_FOR_MS_MAX => Ok(ms),
        _ => Err(TimeError::TooLong {
            text: text.to_owned(),
        }),
    }
}

/// An RFC 3339 instant with its offset (`2026-12-01T09:00:00Z`, `...+01:00`), in unix
/// milliseconds; instants before 1970 or after [`INSTANT_MS_MAX`] are refused.
pub fn instant_ms(text: &str) -> Result<u64, TimeError> {
    let t: Timestamp = text.parse().map_err(|e| TimeError::NotRfc3339 {
        text: text.to_owned(),
        reason: format!("{e}"),
    })?;
    match u64::try_from(t.as_millisecond()) {
        Ok(ms) if ms <= INSTANT_MS_MAX => Ok(ms),
        _ => Err(TimeError::OutOfRange {
            text: text.to_owned(),
        }),
    }
}

/// A deadline: a duration after `now_ms` (`2d`), or an RFC 3339 instant (text with a `T`).
pub fn deadline_ms(text: &str, now_ms: u64) -> Result<u64, TimeError> {
    match duration_ms(text) {
        Ok(ms) => Ok(now_ms.saturating_add(ms)),
        Err(_) if text.contains('T') => instant_ms(text),
        Err(e) => Err(e),
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
    fn deadlines_are_durations_or_instants() {
        assert_eq!(deadline_ms("2s", 1_000), Ok(3_000));
        assert_eq!(
            deadline_ms("2026-12-01T09:00:00Z", 5),
            Ok(1_796_115_600_000)
        );
        assert!(deadline_ms("2 fortnights", 0).is_err());
        assert!(deadline_ms("2026-13-01T09:00:00Z", 0).is_err());
    }
}
