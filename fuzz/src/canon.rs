//! Fuzz target `canon`: arbitrary bytes as a canonical value encoding, as JSON text and as a
//! record, through `oracle_core::canon` and `oracle_core::record`.
//!
//! `canon` has no decoder (nothing reads canonical bytes back; they are only hashed), so this
//! module has a strict one written from docs/FORMAT.md, which makes it a second, independent
//! reading of the format. Properties checked, beyond "never panics":
//! - bytes the format decoder accepts are exactly `canon::encode` of the decoded value
//!   (decode → encode is the identity on canonical input), and hash to its payload hash;
//! - a value parsed from JSON text either encodes, and decodes back to itself, with the same
//!   bytes after any re-serialisation of the text; or is refused for a float, with the path
//!   and spelling of a float that is really there (never for depth: JSON text cannot nest
//!   deeper than the encoder allows);
//! - such a value, recorded by the writer (run inputs, then a state change), is accepted by
//!   the byte-level fast path, verifies and replays;
//! - the record decoder either refuses a line or accepts exactly the bytes it would write; a
//!   line refused only for its spelling has a canonical spelling that decodes to the same event.

use oracle_core::canon::{self, CanonError, DEPTH_MAX, tag};
use oracle_core::fast::{FastScratch, check_line_fast};
use oracle_core::hash::{domain, hash_in};
use oracle_core::payload::Payload;
use oracle_core::record::{self, RECORD_BYTES_MAX, RecordError};
use oracle_core::{Event, EventKind, Link, Recorder, Value};
use serde_json::{Map, json};

/// Checks every property above on one input.
pub fn check(data: &[u8]) {
    check_binary(data);
    check_json(data);
    check_record(data);
}

fn check_binary(data: &[u8]) {
    let Some(value) = decode(data) else {
        return;
    };
    let encoded = canon::encode(&value).expect("a decoded value has an encoding");
    assert!(
        encoded == data,
        "decode → encode is not the identity: {value}"
    );
    assert_eq!(
        canon::payload_hash(&value),
        Ok(hash_in(domain::PAYLOAD, data))
    );
    let text = serde_json::to_string(&value).expect("values serialise");
    let again: Value = serde_json::from_str(&text).expect("serialised values parse");
    assert_eq!(again, value, "JSON text round trip");
}

fn check_json(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    match canon::encode(&value) {
        Ok(encoded) => {
            assert_eq!(decode(&encoded).as_ref(), Some(&value), "encode → decode");
            for text in [
                serde_json::to_vec(&value).expect("values serialise"),
                serde_json::to_vec_pretty(&value).expect("values serialise"),
            ] {
                let again: Value = serde_json::from_slice(&text).expect("serialised values parse");
                assert!(
                    canon::encode(&again).as_ref() == Ok(&encoded),
                    "the encoding changed with the spelling of the text"
                );
            }
            check_recorded(&value);
        }
        Err(CanonError::Float { path, value: shown }) => {
            let at = resolve(&value, &path)
                .unwrap_or_else(|| panic!("float path `{path}` is not in the value"));
            let Value::Number(n) = at else {
                panic!("float path `{path}` names {at}, not a number");
            };
            assert!(n.as_u64().is_none() && n.as_i64().is_none(), "{path}: {n}");
            assert_eq!(shown, n.to_string());
        }
        Err(e @ CanonError::TooDeep { .. }) => {
            panic!("a value parsed from JSON text is never too deep, yet: {e}")
        }
    }
}

/// Records `value` as a run input and as a state entry, through the writer's path.
fn check_recorded(value: &Value) {
    let started = json!({
        "program": "fuzz",
        "program_hash": "00".repeat(32),
        "seed": 0,
        "grants": [],
        "inputs": {"v": value},
    });
    let changed = json!({"set": {"v": value}, "delete": []});
    let payloads = [
        (EventKind::RunStarted, started),
        (EventKind::StateChanged, changed),
    ];
    let mut recorder = Recorder::new();
    let mut events = Vec::new();
    let mut log = Vec::new();
    let mut fast = FastScratch::default();
    for (kind, payload) in payloads {
        let payload = Payload::decode(kind, &payload)
            .unwrap_or_else(|e| panic!("a {kind} payload around the value: {e}"));
        let event = recorder
            .record(0, Vec::new(), payload)
            .unwrap_or_else(|e| panic!("the recorder refuses an encodable value: {e}"));
        let bytes = record::encode(&event);
        assert_eq!(
            check_line_fast(&bytes[..bytes.len() - 1], &mut fast),
            Some(Link::of(&event)),
            "the fast path declines a record the writer produced: {}",
            String::from_utf8_lossy(&bytes)
        );
        log.extend_from_slice(&bytes);
        events.push(event);
    }
    assert_eq!(
        oracle_core::verify::verify_bytes(&log, None),
        Ok(recorder.head())
    );
    let state = oracle_core::replay::replay(&events)
        .unwrap_or_else(|e| panic!("the writer's log does not replay: {e}"));
    assert_eq!(state.hash(), recorder.state().hash());
}

fn check_record(data: &[u8]) {
    let line = data.strip_suffix(b"\n").unwrap_or(data);
    let mut scratch = Vec::new();
    match record::decode(line, &mut scratch) {
        Ok(event) => {
            let mut bytes = record::encode(&event);
            assert_eq!(bytes.pop(), Some(b'\n'));
            assert!(bytes == line, "an accepted record re-encodes differently");
        }
        Err(RecordError::NotCanonical) => {
            let event: Event = serde_json::from_slice(line).expect("parsed before, parses again");
            if canon::check(&event.payload).is_err() {
                // Floats: no canonical form to speak of (verification refuses them anyway).
                return;
            }
            let bytes = record::encode(&event);
            let again = record::decode(&bytes[..bytes.len() - 1], &mut scratch)
                .unwrap_or_else(|e| panic!("the canonical spelling is refused: {e}"));
            assert_eq!(
                again, event,
                "the canonical spelling decodes to another event"
            );
        }
        Err(RecordError::Json(_)) => {
            assert!(serde_json::from_slice::<Event>(line).is_err());
        }
        Err(RecordError::TooLarge { len }) => assert!(len > RECORD_BYTES_MAX),
    }
}

/// Decodes canonical bytes (docs/FORMAT.md, "Canonical encoding"), strictly: one value and
/// nothing after it, keys in ascending byte order (so unique), strings UTF-8, negative
/// integers within `i64`, lists and maps nested at most [`DEPTH_MAX`] deep.
pub fn decode(bytes: &[u8]) -> Option<Value> {
    let mut r = Reader { bytes, at: 0 };
    let value = r.value(0)?;
    (r.at == bytes.len()).then_some(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    fn u64(&mut self) -> Option<u64> {
        let b: [u8; 8] = self.take(8)?.try_into().ok()?;
        Some(u64::from_be_bytes(b))
    }

    /// A length that must fit in what is left (every item takes at least one byte).
    fn count(&mut self) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n <= self.bytes.len() - self.at).then_some(n)
    }

    fn string(&mut self) -> Option<String> {
        let n = self.count()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }

    fn value(&mut self, depth: u32) -> Option<Value> {
        let t = *self.take(1)?.first()?;
        Some(match t {
            tag::NULL => Value::Null,
            tag::FALSE => Value::Bool(false),
            tag::TRUE => Value::Bool(true),
            tag::INT_NON_NEGATIVE => Value::from(self.u64()?),
            tag::INT_NEGATIVE => {
                let n = i64::try_from(self.u64()?).ok()?;
                Value::from(-n - 1)
            }
            tag::STRING => Value::String(self.string()?),
            tag::LIST if depth < DEPTH_MAX => {
                let n = self.count()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Value::Array(items)
            }
            tag::MAP if depth < DEPTH_MAX => {
                let n = self.count()?;
                let mut map = Map::new();
                let mut last: Option<String> = None;
                for _ in 0..n {
                    let key = self.string()?;
                    if last
                        .as_ref()
                        .is_some_and(|l| l.as_bytes() >= key.as_bytes())
                    {
                        return None;
                    }
                    let v = self.value(depth + 1)?;
                    map.insert(key.clone(), v);
                    last = Some(key);
                }
                Value::Object(map)
            }
            _ => return None,
        })
    }
}

/// The value at a path as `CanonError` writes it: `$`, then `.key` (plain keys), `["key"]` (a
/// JSON string, other keys) or `[index]`.
fn resolve<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    let mut v = root;
    let mut rest = path.strip_prefix('$')?;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(r.len());
            v = v.as_object()?.get(&r[..end])?;
            rest = &r[end..];
        } else if rest.starts_with("[\"") {
            let quoted = &rest[1..];
            let mut strings = serde_json::Deserializer::from_str(quoted).into_iter::<String>();
            let key = strings.next()?.ok()?;
            let used = strings.byte_offset();
            v = v.as_object()?.get(&key)?;
            rest = quoted[used..].strip_prefix(']')?;
        } else {
            let r = rest.strip_prefix('[')?;
            let (index, after) = r.split_once(']')?;
            v = v.as_array()?.get(index.parse::<usize>().ok()?)?;
            rest = after;
        }
    }
    Some(v)
}
