//! When each event of a log was recorded, by the wall clock, kept beside it in `<log>.times`:
//! what latency views read (`oracle inspect --steps`, `oracle runs`, the run page's timeline).
//!
//! Times are advisory and never part of what a log proves: not hashed, not synced, and read by
//! no replay, resume, verify or diff, so wall time still enters a run's record only as a
//! recorded answer. An edited, truncated or lost file changes only the durations a person is
//! shown, never a run. Each entry is 16 bytes, the event's seq and the unix time in
//! milliseconds, both little-endian `u64`s. Naming the seq means entries need no alignment
//! with the log: a log repaired and appended again repeats seqs (the last entry wins), and a
//! forked log's copied prefix has none (those durations are unknown, not invented).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Bytes of one entry: a seq and a unix time in milliseconds.
pub const ENTRY_BYTES: u64 = 16;

/// The largest times file read (16M entries): a display never loads an unbounded file; past
/// this the run's durations are shown as unknown.
pub const TIMES_BYTES_MAX: u64 = 256 << 20;

/// The times file of the log at `log`: the same path with `.times` appended.
pub fn times_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".times");
    PathBuf::from(name)
}

/// The wall clock now, in unix milliseconds (0 before 1970: a clock that wrong shows no
/// durations rather than wrong ones, since readers skip zero).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The times file a writer appends to. A failed write stops it (the log goes on: times are
/// advisory), so a half-written entry is never followed by more.
pub(crate) struct TimesAppender {
    file: File,
}

impl TimesAppender {
    /// For a new log: any file of an earlier log of the same name describes nothing.
    pub(crate) fn create(log: &Path) -> Option<TimesAppender> {
        let file = File::create(times_path(log)).ok()?;
        Some(TimesAppender { file })
    }

    /// For an existing log: appends after the last whole entry (a crash may have cut one).
    pub(crate) fn open(log: &Path) -> Option<TimesAppender> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(times_path(log))
            .ok()?;
        let len = file.metadata().ok()?.len();
        if len % ENTRY_BYTES != 0 {
            file.set_len(len - len % ENTRY_BYTES).ok()?;
        }
        Some(TimesAppender { file })
    }

    /// Appends whole entries; `false` when the write failed (the caller stops appending).
    pub(crate) fn append(&mut self, entries: &[u8]) -> bool {
        entries.is_empty() || self.file.write_all(entries).is_ok()
    }
}

/// Queues the entry of event `seq`, recorded now, into `buf`.
pub(crate) fn queue(buf: &mut Vec<u8>, seq: u64) {
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(&now_ms().to_le_bytes());
}

/// Milliseconds from the first entry of the times file beside `log` to its last, read from
/// its two ends alone (a listing of many runs must not load every file): `None` without a
/// file, with fewer than two entries, or when they are out of order.
pub fn span(log: &Path) -> Option<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = File::open(times_path(log)).ok()?;
    let len = f.metadata().ok()?.len();
    let len = len - len % ENTRY_BYTES;
    if len < 2 * ENTRY_BYTES {
        return None;
    }
    let mut entry = |at: u64| -> Option<u64> {
        let mut b = [0u8; 16];
        f.seek(SeekFrom::Start(at)).ok()?;
        f.read_exact(&mut b).ok()?;
        Some(u64::from_le_bytes(
            b[8..].try_into().expect("8 of 16 bytes"),
        ))
    };
    let (first, last) = (entry(0)?, entry(len - ENTRY_BYTES)?);
    if first == 0 {
        return None;
    }
    last.checked_sub(first)
}

/// The recorded times of a log's events, by seq.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Times(BTreeMap<u64, u64>);

impl Times {
    /// The times kept beside the log at `log`: empty when there is no file, it cannot be read,
    /// or it is over [`TIMES_BYTES_MAX`]. Entries with a zero time are skipped.
    pub fn read(log: &Path) -> Times {
        let mut bytes = Vec::new();
        let read = File::open(times_path(log)).and_then(|f| {
            f.take(TIMES_BYTES_MAX + 1).read_to_end(&mut bytes)?;
            Ok(())
        });
        if read.is_err() || bytes.len() as u64 > TIMES_BYTES_MAX {
            return Times::default();
        }
        Times::decode(&bytes)
    }

    /// The entries of a times file's bytes (a partial last entry is left out).
    pub fn decode(bytes: &[u8]) -> Times {
        let (entries, _) = bytes.as_chunks::<16>();
        let mut map = BTreeMap::new();
        for e in entries {
            let (seq, ms) = e.split_at(8);
            let word =
                |b: &[u8]| u64::from_le_bytes(b.try_into().expect("an entry half is 8 bytes"));
            let ms = word(ms);
            if ms > 0 {
                map.insert(word(seq), ms);
            }
        }
        Times(map)
    }

    /// When event `seq` was recorded (unix ms), if known.
    pub fn at(&self, seq: u64) -> Option<u64> {
        self.0.get(&seq).copied()
    }

    /// The milliseconds from event `from` to event `to`, when both are known and in order.
    pub fn between(&self, from: u64, to: u64) -> Option<u64> {
        self.at(to)?.checked_sub(self.at(from)?)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, ms: u64) -> Vec<u8> {
        let mut b = seq.to_le_bytes().to_vec();
        b.extend_from_slice(&ms.to_le_bytes());
        b
    }

    #[test]
    fn the_last_entry_for_a_seq_wins_and_a_partial_entry_is_left_out() {
        let mut bytes = [entry(0, 100), entry(1, 150), entry(1, 170), entry(2, 0)].concat();
        bytes.extend_from_slice(&[9, 9, 9]);
        let t = Times::decode(&bytes);
        assert_eq!(t.at(0), Some(100));
        assert_eq!(t.at(1), Some(170));
        assert_eq!(t.at(2), None, "a zero time is unknown");
        assert_eq!(t.between(0, 1), Some(70));
        assert_eq!(
            t.between(1, 0),
            None,
            "out of order is unknown, not negative"
        );
    }
}
