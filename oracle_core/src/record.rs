//! The JSONL record: one event per line, in exactly one textual form.
//!
//! A record is the event serialised by serde_json with fields in declaration order, map keys
//! sorted, no whitespace, and a terminating `\n`. Reading re-serialises the parsed event and
//! requires the same bytes back, so every byte of a record is significant: an edit that leaves
//! the parsed event unchanged (a `\u00E9` for `\u00e9`, a reordered key, a space) is still
//! caught, and two runs that record the same events write byte-identical files.

use crate::event::Event;

/// Largest record the reader accepts, in bytes (64 MiB): a tool output bigger than this belongs
/// in a file referenced by the event, not inline.
pub const RECORD_BYTES_MAX: u64 = 64 << 20;

/// Why bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record is {len} bytes, over the {RECORD_BYTES_MAX}-byte limit")]
    TooLarge { len: u64 },
    #[error("not a valid event record: {0}")]
    Json(String),
    #[error("record is not in canonical form (re-encoding it gives different bytes)")]
    NotCanonical,
}

/// Appends the record for `event`, including its `\n`.
pub fn encode_into(event: &Event, out: &mut Vec<u8>) {
    // Invariant: `Event` serialises to JSON infallibly (string keys, no floats introduced, and
    // writing into a Vec cannot fail).
    serde_json::to_writer(&mut *out, event).expect("events always serialise");
    out.push(b'\n');
}

/// The record for `event`, including its `\n`.
pub fn encode(event: &Event) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    encode_into(event, &mut out);
    out
}

/// Parses one record (without its `\n`) and checks it is in canonical form. `scratch` is reused
/// between calls to avoid an allocation per record.
pub fn decode(line: &[u8], scratch: &mut Vec<u8>) -> Result<Event, RecordError> {
    if line.len() as u64 > RECORD_BYTES_MAX {
        return Err(RecordError::TooLarge {
            len: line.len() as u64,
        });
    }
    let event: Event =
        serde_json::from_slice(line).map_err(|e| RecordError::Json(e.to_string()))?;
    scratch.clear();
    encode_into(&event, scratch);
    if scratch.len() != line.len() + 1 || scratch[..line.len()] != *line {
        return Err(RecordError::NotCanonical);
    }
    Ok(event)
}
