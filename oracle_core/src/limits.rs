//! The reader's limits stated once, so the writer can obey them: the recorder refuses to seal
//! an event whose record the reader would reject, and the runtime checks values from outside
//! against tighter bounds, so such a value becomes a recorded failure or a refusal long before
//! the recorder's backstop.
//!
//! What the reader rejects: a record over [`RECORD_BYTES_MAX`] bytes, or nested deeper than
//! serde_json's 127 levels (its recursion limit; the record's own object is one level). So a
//! payload may hold at most [`PAYLOAD_DEPTH_MAX`] nested containers and [`PAYLOAD_JSON_BYTES_MAX`]
//! bytes of JSON, leaving [`ENVELOPE_BYTES_MAX`] for the rest of the record.

use serde_json::Value;

pub use crate::record::RECORD_BYTES_MAX;

/// Deepest nesting of lists and maps in a payload (the payload's own map counts as one): the
/// reader parses a record with serde_json, which refuses more than 127 nested levels, and the
/// record's object is the first of them.
pub const PAYLOAD_DEPTH_MAX: u32 = 126;

/// Deepest nesting a value from outside the program may have: a tool input or output, an
/// answer, a key-value write, a run input. Events wrap such a value in a few levels (a step's
/// state record wraps an output in four), so this leaves [`PAYLOAD_DEPTH_MAX`] a wide margin.
pub const VALUE_DEPTH_MAX: u32 = 100;

/// Most parents one event may name (a bound on the envelope's size).
pub const PARENTS_MAX: u64 = 1024;

/// Bytes of a record that are not its payload: seq, time, kind, parents (at most
/// [`PARENTS_MAX`] decimal numbers) and five hashes.
pub const ENVELOPE_BYTES_MAX: u64 = 64 << 10;

/// Largest payload, as JSON bytes in its record.
pub const PAYLOAD_JSON_BYTES_MAX: u64 = RECORD_BYTES_MAX - ENVELOPE_BYTES_MAX;

/// A JSON string escapes a byte in at most six (`\u0001`), and no other canonical encoding
/// grows more in JSON, so a payload whose canonical encoding is at most this long always fits
/// in [`PAYLOAD_JSON_BYTES_MAX`] without measuring its JSON.
pub const PAYLOAD_CANONICAL_BYTES_SAFE: u64 = PAYLOAD_JSON_BYTES_MAX / 6;

/// Why a value or a payload breaks a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("nested {depth} levels deep, more than {name} = {limit}")]
    TooDeep {
        depth: u32,
        limit: u32,
        name: &'static str,
    },
    #[error("{bytes} bytes of JSON, more than {name} = {limit}")]
    TooLarge {
        bytes: u64,
        limit: u64,
        name: &'static str,
    },
    #[error("{count} parents, more than parents_max = {PARENTS_MAX}")]
    TooManyParents { count: u64 },
}

/// How deeply lists and maps nest in `value` (a scalar is 0, `[]` is 1). Iterative: a value
/// built by a program can be nested far deeper than any stack allows.
pub fn depth(value: &Value) -> u32 {
    let mut deepest = 0u32;
    let mut stack: Vec<(&Value, u32)> = vec![(value, 0)];
    while let Some((v, above)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        let here = above.saturating_add(1);
        deepest = deepest.max(here);
        stack.extend(children.map(|c| (c, here)));
    }
    deepest
}

/// The length of `value` as serde_json writes it (compact), without building the text.
pub fn json_len(value: &Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len() as u64);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail, and a `Value` always serialises.
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => u64::MAX,
    }
}

/// Whether lists and maps nest more than `limit` levels in `value`. The check every event
/// pays, so it allocates nothing and stops at `limit + 1` (its recursion is bounded by
/// `limit`, not by the value); [`depth`] gives the exact figure when it fails.
pub fn deeper_than(value: &Value, limit: u32) -> bool {
    let children: &mut dyn Iterator<Item = &Value> = match value {
        Value::Array(items) => &mut items.iter(),
        Value::Object(map) => &mut map.values(),
        _ => return false,
    };
    let Some(below) = limit.checked_sub(1) else {
        return true;
    };
    for c in children {
        if deeper_than(c, below) {
            return true;
        }
    }
    false
}

/// Checks a value from outside the program against [`VALUE_DEPTH_MAX`].
pub fn check_value(value: &Value) -> Result<(), LimitError> {
    if !deeper_than(value, VALUE_DEPTH_MAX) {
        return Ok(());
    }
    let d = depth(value);
    if d > VALUE_DEPTH_MAX {
        return Err(LimitError::TooDeep {
            depth: d,
            limit: VALUE_DEPTH_MAX,
            name: "value_depth_max",
        });
    }
    Ok(())
}

/// Checks that a payload (as a value) fits in a record the reader accepts. `canonical_len` is
/// the length of its canonical encoding, which decides whether its JSON must be measured.
pub fn check_payload(payload: &Value, canonical_len: u64) -> Result<(), LimitError> {
    if deeper_than(payload, PAYLOAD_DEPTH_MAX) {
        let d = depth(payload);
        return Err(LimitError::TooDeep {
            depth: d,
            limit: PAYLOAD_DEPTH_MAX,
            name: "payload_depth_max",
        });
    }
    if canonical_len > PAYLOAD_CANONICAL_BYTES_SAFE {
        let bytes = json_len(payload);
        if bytes > PAYLOAD_JSON_BYTES_MAX {
            return Err(LimitError::TooLarge {
                bytes,
                limit: PAYLOAD_JSON_BYTES_MAX,
                name: "payload_json_bytes_max",
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(n: u32) -> Value {
        (0..n).fold(json!(0), |v, _| Value::Array(vec![v]))
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!([])), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": []}]})), 4);
        // Dropping a value this deep recursively would overflow the stack: unwind it by hand.
        let mut v = nested(100_000);
        assert_eq!(depth(&v), 100_000);
        while let Value::Array(mut items) = v {
            v = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn a_payload_at_the_depth_limit_parses_as_a_record_and_one_more_does_not() {
        for (n, fits) in [(PAYLOAD_DEPTH_MAX, true), (PAYLOAD_DEPTH_MAX + 1, false)] {
            // The payload is a map holding n - 1 nested lists: n levels.
            let payload = json!({ "output": nested(n - 1) });
            assert_eq!(depth(&payload), n);
            assert_eq!(check_payload(&payload, 0).is_ok(), fits);
            let record = format!("{{\"payload\":{payload}}}");
            let parsed: Result<Value, _> = serde_json::from_str(&record);
            assert_eq!(parsed.is_ok(), fits, "serde_json agrees at {n}");
        }
    }

    #[test]
    fn deeper_than_agrees_with_depth() {
        let values = [
            json!(1),
            json!([]),
            json!({"a": [1, {"b": []}]}),
            nested(7),
            json!([[1], [[2]], {"x": [[[]]]}]),
        ];
        for v in &values {
            let d = depth(v);
            for limit in 0..10 {
                assert_eq!(deeper_than(v, limit), d > limit, "{v} at {limit}");
            }
        }
    }

    #[test]
    fn json_len_is_the_serialised_length() {
        for v in [
            json!(null),
            json!({"a": "\u{1}\u{2}", "b": [1, -2, "é"]}),
            nested(5),
        ] {
            assert_eq!(json_len(&v), serde_json::to_vec(&v).unwrap().len() as u64);
        }
    }

    #[test]
    fn six_json_bytes_per_canonical_byte_is_the_worst_case() {
        let s = "\u{1}".repeat(1000);
        let v = Value::String(s);
        let canonical = crate::canon::encode(&v).unwrap().len() as u64;
        assert!(json_len(&v) <= 6 * canonical);
    }
}
