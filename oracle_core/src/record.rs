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
///
/// The envelope is written by hand (its layout is fixed) and only the payload goes through
/// serde_json; the result is byte-for-byte what serde_json writes for the whole event, which
/// `tests/properties.rs` checks.
pub fn encode_into(event: &Event, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"seq\":");
    put_decimal(out, event.seq);
    out.extend_from_slice(b",\"time\":");
    put_decimal(out, event.time);
    out.extend_from_slice(b",\"kind\":\"");
    out.extend_from_slice(event.kind.as_str().as_bytes());
    out.extend_from_slice(b"\",\"parents\":[");
    for (i, p) in event.parents.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_decimal(out, *p);
    }
    out.extend_from_slice(b"],\"payload\":");
    // Invariant: a `Value` serialises infallibly into a Vec (string keys; writing to memory
    // cannot fail).
    serde_json::to_writer(&mut *out, &event.payload).expect("JSON values always serialise");
    for (name, h) in [
        (&b",\"payload_hash\":\""[..], &event.payload_hash),
        (b"\",\"state_before\":\"", &event.state_before),
        (b"\",\"state_after\":\"", &event.state_after),
        (b"\",\"prev\":\"", &event.prev),
        (b"\",\"hash\":\"", &event.hash),
    ] {
        out.extend_from_slice(name);
        put_hex(out, h);
    }
    out.extend_from_slice(b"\"}\n");
}

fn put_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

fn put_hex(out: &mut Vec<u8>, h: &crate::hash::Hash) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 64];
    for (pair, b) in buf.chunks_exact_mut(2).zip(h.0.iter()) {
        pair[0] = HEX[(b >> 4) as usize];
        pair[1] = HEX[(b & 0x0f) as usize];
    }
    out.extend_from_slice(&buf);
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
