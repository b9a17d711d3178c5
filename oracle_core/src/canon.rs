//! Canonical binary encoding of JSON values: the only bytes that are ever hashed.
//!
//! Values are `serde_json::Value`s with one restriction: no floats. Every value has exactly one
//! encoding: integers are exact over the whole `i64`/`u64` range, map keys are sorted by their
//! UTF-8 bytes (sorted here, whatever order the map iterates in), and every length is an explicit
//! big-endian `u64`. `docs/FORMAT.md` specifies the bytes; `fixtures/golden` pins them.

use serde_json::Value;

use crate::hash::{Hash, domain, hasher};

/// Deepest nesting of lists and maps the encoder accepts. serde_json's own parser stops at 128,
/// so any value that came from JSON text fits; this bounds values built in code too.
pub const DEPTH_MAX: u32 = 128;

/// Type tags of the canonical encoding.
pub mod tag {
    pub const NULL: u8 = 0x00;
    pub const FALSE: u8 = 0x01;
    pub const TRUE: u8 = 0x02;
    pub const INT_NON_NEGATIVE: u8 = 0x03;
    pub const INT_NEGATIVE: u8 = 0x04;
    pub const STRING: u8 = 0x05;
    pub const LIST: u8 = 0x06;
    pub const MAP: u8 = 0x07;
}

/// Why a value has no canonical encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonError {
    #[error(
        "float {value} at {path}: hashed data has no floats (use an integer, a scaled integer or a string)"
    )]
    Float { path: String, value: String },
    #[error("value nested deeper than {DEPTH_MAX} levels at {path}")]
    TooDeep { path: String },
}

impl CanonError {
    /// The JSON path (`$.a[2].b`) of the offending value.
    pub fn path(&self) -> &str {
        match self {
            CanonError::Float { path, .. } | CanonError::TooDeep { path } => path,
        }
    }

    fn prefixed(self, segment: &str) -> CanonError {
        let join = |p: String| format!("{segment}{}", p.trim_start_matches('$'));
        match self {
            CanonError::Float { path, value } => CanonError::Float {
                path: format!("${}", join(path)),
                value,
            },
            CanonError::TooDeep { path } => CanonError::TooDeep {
                path: format!("${}", join(path)),
            },
        }
    }
}

/// Appends the canonical encoding of `value` to `out`.
pub fn encode_into(value: &Value, out: &mut Vec<u8>) -> Result<(), CanonError> {
    encode_at(value, out, 0)
}

/// The canonical encoding of `value`.
pub fn encode(value: &Value) -> Result<Vec<u8>, CanonError> {
    let mut out = Vec::with_capacity(64);
    encode_into(value, &mut out)?;
    Ok(out)
}

/// Checks that `value` has a canonical encoding (no floats, bounded depth) without keeping bytes.
pub fn check(value: &Value) -> Result<(), CanonError> {
    encode(value).map(|_| ())
}

/// `H_payload(canon(value))`: the `payload_hash` of an event.
pub fn payload_hash(value: &Value) -> Result<Hash, CanonError> {
    hash_value_in(domain::PAYLOAD, value)
}

/// [`payload_hash`] and the length of the canonical encoding it hashed.
pub fn payload_hash_and_len(value: &Value) -> Result<(Hash, u64), CanonError> {
    let mut buf = Vec::with_capacity(256);
    encode_into(value, &mut buf)?;
    let mut h = hasher(domain::PAYLOAD);
    h.update(&buf);
    Ok((Hash(*h.finalize().as_bytes()), buf.len() as u64))
}

/// Hashes the canonical encoding of `value` in the given domain.
pub fn hash_value_in(context: &str, value: &Value) -> Result<Hash, CanonError> {
    let mut buf = Vec::with_capacity(256);
    encode_into(value, &mut buf)?;
    let mut h = hasher(context);
    h.update(&buf);
    Ok(Hash(*h.finalize().as_bytes()))
}

/// Appends a big-endian `u64`.
pub fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(&n.to_be_bytes());
}

/// Appends a length-prefixed byte string (no tag).
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Streaming writers of the canonical encoding, for callers that encode a structure directly
/// instead of building a `Value` first. The caller writes map entries in ascending key order.
pub mod write {
    use super::{put_bytes, put_u64, tag};

    pub fn null(out: &mut Vec<u8>) {
        out.push(tag::NULL);
    }
    pub fn bool(out: &mut Vec<u8>, b: bool) {
        out.push(if b { tag::TRUE } else { tag::FALSE });
    }
    pub fn int(out: &mut Vec<u8>, i: i64) {
        if i >= 0 {
            uint(out, i as u64);
        } else {
            out.push(tag::INT_NEGATIVE);
            put_u64(out, !i as u64);
        }
    }
    pub fn uint(out: &mut Vec<u8>, u: u64) {
        out.push(tag::INT_NON_NEGATIVE);
        put_u64(out, u);
    }
    pub fn str(out: &mut Vec<u8>, s: &str) {
        out.push(tag::STRING);
        put_bytes(out, s.as_bytes());
    }
    /// Starts a list of `n` items.
    pub fn list(out: &mut Vec<u8>, n: u64) {
        out.push(tag::LIST);
        put_u64(out, n);
    }
    /// Starts a map of `n` entries; follow with `key` then the value, keys ascending.
    pub fn map(out: &mut Vec<u8>, n: u64) {
        out.push(tag::MAP);
        put_u64(out, n);
    }
    pub fn key(out: &mut Vec<u8>, k: &str) {
        put_bytes(out, k.as_bytes());
    }
}

fn encode_at(value: &Value, out: &mut Vec<u8>, depth: u32) -> Result<(), CanonError> {
    match value {
        Value::Null => out.push(tag::NULL),
        Value::Bool(false) => out.push(tag::FALSE),
        Value::Bool(true) => out.push(tag::TRUE),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                out.push(tag::INT_NON_NEGATIVE);
                put_u64(out, u);
            } else if let Some(i) = n.as_i64() {
                // Negative: store -(i + 1), which maps i64::MIN..=-1 onto 0..=i64::MAX exactly.
                out.push(tag::INT_NEGATIVE);
                put_u64(out, !i as u64);
            } else {
                return Err(CanonError::Float {
                    path: "$".into(),
                    value: n.to_string(),
                });
            }
        }
        Value::String(s) => {
            out.push(tag::STRING);
            put_bytes(out, s.as_bytes());
        }
        Value::Array(items) => {
            if depth >= DEPTH_MAX {
                return Err(CanonError::TooDeep { path: "$".into() });
            }
            out.push(tag::LIST);
            put_u64(out, items.len() as u64);
            for (i, item) in items.iter().enumerate() {
                encode_at(item, out, depth + 1).map_err(|e| e.prefixed(&format!("[{i}]")))?;
            }
        }
        Value::Object(map) => {
            if depth >= DEPTH_MAX {
                return Err(CanonError::TooDeep { path: "$".into() });
            }
            out.push(tag::MAP);
            put_u64(out, map.len() as u64);
            // serde_json's map iterates in key order unless `preserve_order` is enabled somewhere in
            // the build; never rely on it: check, and sort when needed.
            let sorted = map
                .keys()
                .zip(map.keys().skip(1))
                .all(|(a, b)| a.as_bytes() < b.as_bytes());
            if sorted {
                encode_entries(map.iter(), out, depth)?;
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                encode_entries(entries.into_iter(), out, depth)?;
            }
        }
    }
    Ok(())
}

/// The entries of a map at `depth`, in the order given (ascending key bytes).
fn encode_entries<'a>(
    entries: impl Iterator<Item = (&'a String, &'a Value)>,
    out: &mut Vec<u8>,
    depth: u32,
) -> Result<(), CanonError> {
    for (k, v) in entries {
        put_bytes(out, k.as_bytes());
        encode_at(v, out, depth + 1).map_err(|e| e.prefixed(&key_segment(k)))?;
    }
    Ok(())
}

fn key_segment(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!(".{key}")
    } else {
        format!("[{}]", Value::String(key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integers_are_exact_at_the_edges() {
        let enc = |v: Value| encode(&v).unwrap();
        assert_eq!(
            enc(json!(0)),
            [vec![tag::INT_NON_NEGATIVE], 0u64.to_be_bytes().to_vec()].concat()
        );
        assert_eq!(
            enc(json!(u64::MAX)),
            [vec![tag::INT_NON_NEGATIVE], u64::MAX.to_be_bytes().to_vec()].concat()
        );
        assert_eq!(
            enc(json!(-1)),
            [vec![tag::INT_NEGATIVE], 0u64.to_be_bytes().to_vec()].concat()
        );
        assert_eq!(
            enc(json!(i64::MIN)),
            [
                vec![tag::INT_NEGATIVE],
                (i64::MAX as u64).to_be_bytes().to_vec()
            ]
            .concat()
        );
        assert_ne!(enc(json!(i64::MAX)), enc(json!(-1)));
    }

    #[test]
    fn floats_are_refused_with_their_path() {
        let err = encode(&json!({"a": [1, {"b c": 0.5}]})).unwrap_err();
        assert_eq!(
            err,
            CanonError::Float {
                path: "$.a[1][\"b c\"]".into(),
                value: "0.5".into()
            }
        );
    }

    #[test]
    fn depth_is_bounded() {
        let mut v = json!(1);
        for _ in 0..(DEPTH_MAX + 1) {
            v = json!([v]);
        }
        assert!(matches!(encode(&v), Err(CanonError::TooDeep { .. })));
    }

    /// `levels` nested containers around a scalar, alternating lists and maps.
    fn nested(levels: u32) -> Value {
        (0..levels).fold(json!(1), |v, i| {
            if i % 2 == 0 {
                json!([v])
            } else {
                json!({ "k": v })
            }
        })
    }

    /// Exactly DEPTH_MAX levels encode; one more is refused, naming the path to the container
    /// that is one too deep. A depth counter that never grows (`depth * 1`) or a bound off by
    /// one (`>` for `>=`) fails one of the two.
    #[test]
    fn depth_max_levels_encode_and_one_more_is_too_deep() {
        for wrap in [json!([0]), json!({"k": 0})] {
            let at_limit = nested(DEPTH_MAX - 1);
            let mut v = wrap.clone();
            match &mut v {
                Value::Array(items) => items[0] = at_limit,
                Value::Object(map) => {
                    map.insert("k".into(), at_limit);
                }
                _ => unreachable!(),
            }
            let bytes = encode(&v).unwrap();
            let lists = bytes.iter().filter(|&&b| b == tag::LIST).count();
            assert!(lists >= (DEPTH_MAX / 2) as usize, "{lists} lists encoded");
            let over = match wrap {
                Value::Array(_) => json!([v]),
                _ => json!({ "k": v }),
            };
            let err = encode(&over).unwrap_err();
            assert!(matches!(err, CanonError::TooDeep { .. }), "{err:?}");
            // The path names DEPTH_MAX steps: the container at depth DEPTH_MAX (zero-based).
            let steps = err.path().matches('[').count() + err.path().matches(".k").count();
            assert_eq!(steps, DEPTH_MAX as usize, "{}", err.path());
            assert_eq!(check(&over), Err(err));
        }
        assert!(encode(&nested(DEPTH_MAX)).is_ok());
        assert!(matches!(
            encode(&nested(DEPTH_MAX + 1)),
            Err(CanonError::TooDeep { .. })
        ));
    }

    #[test]
    fn types_never_collide() {
        let all = [
            json!(null),
            json!(false),
            json!(true),
            json!(0),
            json!(-1),
            json!(""),
            json!([]),
            json!({}),
        ];
        let encs: Vec<_> = all.iter().map(|v| encode(v).unwrap()).collect();
        for i in 0..encs.len() {
            for j in 0..i {
                assert_ne!(encs[i], encs[j]);
            }
        }
    }
}
