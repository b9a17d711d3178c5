//! A JSON value held as its compact text instead of as a tree, for what a run keeps of every
//! step: the state's values and a plan agent's outputs (issue 42, item 4).
//!
//! A `serde_json::Value` object is a `BTreeMap`, whose first node has room for 11 entries: about
//! 630 bytes for `{"found": true}`, whose text is 14. A run holds one state entry per step and
//! per loop iteration, so a tree per value made `oracle run` grow by about 1.4 KB an event. The
//! text is what serde_json writes for the value (keys in order, no spaces), so serialising a
//! `Packed` into JSON writes the same bytes as serialising the value, and two packed values are
//! equal exactly when the values are. A value is decoded where it is read ([`Packed::value`]),
//! which the hot paths (applying a change, writing a resume point) do not do.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// Deepest nesting held as text. serde_json reads text back only to 127 levels (its recursion
/// limit), and a canonical value may nest to [`crate::canon::DEPTH_MAX`] (128), so a value
/// nested deeper than this is kept as a tree: it always reads back, and such values are rare.
pub const TEXT_DEPTH_MAX: u32 = 100;

/// A value, as its compact JSON text (or, nested deeper than [`TEXT_DEPTH_MAX`], as a tree).
#[derive(Clone, Debug)]
pub struct Packed(Repr);

#[derive(Clone, Debug)]
enum Repr {
    Text(Box<RawValue>),
    Tree(Box<Value>),
}

impl Packed {
    /// `value`, packed.
    pub fn new(value: &Value) -> Packed {
        if within(value, TEXT_DEPTH_MAX)
            && let Ok(raw) = serde_json::value::to_raw_value(value)
        {
            return Packed(Repr::Text(raw));
        }
        Packed(Repr::Tree(Box::new(value.clone())))
    }

    /// The value, decoded (a tree of its own).
    pub fn value(&self) -> Value {
        match &self.0 {
            // The text was written by serde_json from a value nested at most TEXT_DEPTH_MAX
            // deep, so it reads back as that value; `null` is never reached.
            Repr::Text(raw) => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
            Repr::Tree(v) => Value::clone(v),
        }
    }

    /// Whether it is held as text (a value nested deeper than [`TEXT_DEPTH_MAX`] is not).
    pub fn is_text(&self) -> bool {
        matches!(self.0, Repr::Text(_))
    }
}

impl From<&Value> for Packed {
    fn from(value: &Value) -> Packed {
        Packed::new(value)
    }
}

impl PartialEq for Packed {
    /// Equal exactly when the values are: the text of a value is unique (serde_json writes
    /// object keys in order), and whether a value is held as text depends on the value alone.
    fn eq(&self, other: &Packed) -> bool {
        match (&self.0, &other.0) {
            (Repr::Text(a), Repr::Text(b)) => a.get() == b.get(),
            (Repr::Tree(a), Repr::Tree(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Packed {}

impl Serialize for Packed {
    /// Into JSON, the same bytes as the value's; into any other format, the value.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::Text(raw) if s.is_human_readable() => raw.serialize(s),
            Repr::Text(_) => self.value().serialize(s),
            Repr::Tree(v) => v.serialize(s),
        }
    }
}

impl std::fmt::Display for Packed {
    /// The value's compact JSON, as `Value`'s `Display` writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Text(raw) => f.write_str(raw.get()),
            Repr::Tree(v) => v.fmt(f),
        }
    }
}

impl<'de> Deserialize<'de> for Packed {
    /// Reads a value and packs it.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Packed, D::Error> {
        Value::deserialize(d).map(|v| Packed::new(&v))
    }
}

/// Whether `value` nests at most `depth` containers deep (a scalar nests none).
fn within(value: &Value, depth: u32) -> bool {
    match value {
        Value::Array(items) => depth > 0 && items.iter().all(|v| within(v, depth - 1)),
        Value::Object(map) => depth > 0 && map.values().all(|v| within(v, depth - 1)),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_reads_back_and_serialises_as_the_value() {
        let v = json!({"b": [1, -2, 18446744073709551615u64, "é\n\"x\""], "a": {"found": true}});
        let p = Packed::new(&v);
        assert!(p.is_text());
        assert_eq!(p.value(), v);
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            serde_json::to_string(&v).unwrap()
        );
        assert_eq!(p, Packed::new(&v));
        assert_ne!(p, Packed::new(&json!({"a": 1})));
    }

    /// The state holds each value once, as text, and hashes it as the value.
    #[test]
    fn the_state_holds_its_values_packed() {
        let v = json!({"attempts": 1, "output": {"found": true}, "status": "completed"});
        let state = crate::State::from_entries([("step/a".to_owned(), v.clone())]).unwrap();
        assert!(state.get_packed("step/a").is_some_and(Packed::is_text));
        assert_eq!(state.get("step/a"), Some(v));
        assert_eq!(state.hash(), state.hash_from_scratch().unwrap());
    }

    #[test]
    fn a_deep_value_is_kept_as_a_tree() {
        let mut v = json!(1);
        for _ in 0..=TEXT_DEPTH_MAX {
            v = json!([v]);
        }
        let p = Packed::new(&v);
        assert!(!p.is_text());
        assert_eq!(p.value(), v);
        let mut shallow = json!(1);
        for _ in 0..TEXT_DEPTH_MAX {
            shallow = json!([shallow]);
        }
        assert!(Packed::new(&shallow).is_text());
    }
}
