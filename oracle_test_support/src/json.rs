//! Strategies for JSON values without floats (what hashed data and records may hold), of a
//! shape each test chooses.

use oracle_core::Value;
use proptest::prelude::*;

/// The shape of the JSON values [`json`] draws. Every leaf is `null`, a boolean, an `i64`, a
/// `u64` or a string; never a float.
#[derive(Clone, Copy, Debug)]
pub struct JsonShape {
    /// Levels of arrays and objects at most.
    pub depth: u32,
    /// The number of nodes proptest aims at (`prop_recursive`'s desired size).
    pub nodes: u32,
    /// Entries of an array or object: fewer than this.
    pub width: usize,
    /// A regular expression for string leaves.
    pub text: &'static str,
    /// A regular expression for object keys.
    pub keys: &'static str,
}

impl JsonShape {
    /// Small values, for tests whose cost grows with each value: nested at most two levels,
    /// at most two entries an array or object, strings of at most six characters of any kind.
    pub const SMALL: JsonShape = JsonShape {
        depth: 2,
        nodes: 12,
        width: 3,
        text: ".{0,6}",
        keys: "[a-c]{1,2}",
    };
}

/// Any JSON value of `shape`, without floats.
pub fn json(shape: JsonShape) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        shape.text.prop_map(Value::String),
    ];
    let width = shape.width;
    let keys = shape.keys;
    leaf.prop_recursive(shape.depth, shape.nodes, width as u32, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..width).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..width)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// [`json`] of [`JsonShape::SMALL`]: any small JSON value without floats.
pub fn small_json() -> impl Strategy<Value = Value> {
    json(JsonShape::SMALL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    fn depth(v: &Value) -> u32 {
        match v {
            Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
            Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    fn floats(v: &Value) -> bool {
        match v {
            Value::Number(n) => n.is_f64(),
            Value::Array(a) => a.iter().any(floats),
            Value::Object(m) => m.values().any(floats),
            _ => false,
        }
    }

    #[test]
    fn values_keep_to_their_shape_and_hold_no_float() {
        let mut runner = TestRunner::deterministic();
        for _ in 0..256 {
            let v = small_json().new_tree(&mut runner).unwrap().current();
            assert!(depth(&v) <= JsonShape::SMALL.depth, "{v}");
            assert!(!floats(&v), "{v}");
            oracle_core::canon::payload_hash(&v).unwrap();
        }
    }
}
