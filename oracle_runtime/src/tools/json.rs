//! JSON tools: `json.parse` turns text into a value (refusing floats, which hashed data cannot
//! hold), `json.get` picks a part of a value by a path like `a.b[0]`. Pure, and bounded by the
//! size of their input.

use oracle_core::canon::{self, CanonError};
use oracle_plan::eval::type_name;
use serde_json::{Value, json};

use super::{any, arg_str, decl, object, string};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// `json.parse {text}` → `{value}`. A float anywhere in the text fails the call, naming its JSON
/// path (`$.a[2]`): a run's values are hashed, and the canonical encoding has no floats.
pub struct Parse;

impl Tool for Parse {
    fn decl(&self) -> ToolDecl {
        decl(
            "json.parse",
            "Parse JSON text (no floats): {value}.",
            Effect::Pure,
            object(&[("text", string())], &["text"]),
            object(&[("value", any())], &["value"]),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let text = arg_str(input, "text")?;
        // serde_json's messages give a line and column in the text: the same on every machine.
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ToolError::Failed(format!("`text` is not JSON: {e}")))?;
        canon::check(&value).map_err(|e| {
            ToolError::Failed(match e {
                CanonError::Float { path, value } => format!(
                    "`text` has the float {value} at {path}; run data has no floats (use an integer, a scaled integer or a string)"
                ),
                CanonError::TooDeep { .. } => format!("`text`: {e}"),
            })
        })?;
        Ok(ToolOutput::of(json!({"value": value})))
    }
}

/// `json.get {value, path}` → `{value}`: the part of `value` at `path`. A path is keys and
/// indexes: `a.b[0].c`, `[2].name`; the empty path is the whole value. Keys cannot contain `.`,
/// `[` or `]`. A missing key or index fails the call, naming the shortest prefix of the path that
/// does not exist.
pub struct Get;

impl Tool for Get {
    fn decl(&self) -> ToolDecl {
        decl(
            "json.get",
            "The value at a path (`a.b[0]`) in a JSON value: {value}.",
            Effect::Pure,
            object(&[("value", any()), ("path", string())], &["value", "path"]),
            object(&[("value", any())], &["value"]),
            None,
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let path = arg_str(input, "path")?;
        let value = input
            .get("value")
            .ok_or_else(|| ToolError::Failed("argument `value` is missing".to_owned()))?;
        let found = get(value, path).map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok(ToolOutput::of(json!({"value": found})))
    }
}

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment<'a> {
    Key(&'a str),
    Index(u64),
}

/// Why `json.get` finds nothing at a path. Recorded as the call's failure, so worded as before.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// `character` counts from 1.
    #[error("bad path `{path}`: {why} at character {character}")]
    Bad {
        path: String,
        why: &'static str,
        character: usize,
    },
    /// `at` names the part of the value already reached (`the value` or `` `a.b` ``).
    #[error("`{prefix}` does not exist: {at} has no key `{key}`")]
    NoKey {
        prefix: String,
        at: String,
        key: String,
    },
    #[error("`{prefix}` does not exist: {at} has {len} item{}", if *.len == 1 { "" } else { "s" })]
    NoItem {
        prefix: String,
        at: String,
        len: usize,
    },
    #[error("`{prefix}` does not exist: {at} is a {ty}, not a map")]
    NotMap {
        prefix: String,
        at: String,
        ty: &'static str,
    },
    #[error("`{prefix}` does not exist: {at} is a {ty}, not a list")]
    NotList {
        prefix: String,
        at: String,
        ty: &'static str,
    },
}

/// The segments of `path`, each with the byte offset where it ends (so `&path[..end]` is the
/// prefix up to and including it, for messages).
fn parse_path(path: &str) -> Result<Vec<(Segment<'_>, usize)>, PathError> {
    let bad = |at: usize, why: &'static str| PathError::Bad {
        path: path.to_owned(),
        why,
        character: at + 1,
    };
    let bytes = path.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'[' {
            let start = i + 1;
            let len = bytes[start..]
                .iter()
                .position(|&b| b == b']')
                .ok_or_else(|| bad(i, "`[` without `]`"))?;
            let digits = &path[start..start + len];
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(start, "an index is digits only"));
            }
            let index = digits
                .parse::<u64>()
                .map_err(|_| bad(start, "index too large"))?;
            i = start + len + 1;
            out.push((Segment::Index(index), i));
        } else {
            if !out.is_empty() {
                // After the first segment a key needs its dot.
                if bytes[i] != b'.' {
                    return Err(bad(i, "expected `.` or `[`"));
                }
                i += 1;
            }
            let start = i;
            let len = bytes[start..]
                .iter()
                .position(|&b| matches!(b, b'.' | b'[' | b']'))
                .unwrap_or(bytes.len() - start);
            if len == 0 {
                return Err(bad(start, "empty key"));
            }
            i = start + len;
            out.push((Segment::Key(&path[start..i]), i));
        }
    }
    Ok(out)
}

/// The part of `value` at `path`, or why there is none.
fn get<'v>(value: &'v Value, path: &str) -> Result<&'v Value, PathError> {
    let mut here = value;
    let mut before = "";
    for (segment, end) in parse_path(path)? {
        let prefix = &path[..end];
        // The part of the value already reached, for messages.
        let at = if before.is_empty() {
            "the value".to_owned()
        } else {
            format!("`{before}`")
        };
        here = match (&segment, here) {
            (Segment::Key(k), Value::Object(map)) => {
                map.get(*k).ok_or_else(|| PathError::NoKey {
                    prefix: prefix.to_owned(),
                    at: at.clone(),
                    key: (*k).to_owned(),
                })?
            }
            (Segment::Index(n), Value::Array(items)) => usize::try_from(*n)
                .ok()
                .and_then(|n| items.get(n))
                .ok_or_else(|| PathError::NoItem {
                    prefix: prefix.to_owned(),
                    at: at.clone(),
                    len: items.len(),
                })?,
            (Segment::Key(_), other) => {
                return Err(PathError::NotMap {
                    prefix: prefix.to_owned(),
                    at,
                    ty: type_name(other),
                });
            }
            (Segment::Index(_), other) => {
                return Err(PathError::NotList {
                    prefix: prefix.to_owned(),
                    at,
                    ty: type_name(other),
                });
            }
        };
        before = prefix;
    }
    Ok(here)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse() {
        use Segment::*;
        let segs = |p| {
            parse_path(p)
                .unwrap()
                .into_iter()
                .map(|(s, _)| s)
                .collect::<Vec<_>>()
        };
        assert_eq!(segs(""), vec![]);
        assert_eq!(segs("a.b[0]"), vec![Key("a"), Key("b"), Index(0)]);
        assert_eq!(segs("[2].name"), vec![Index(2), Key("name")]);
        assert_eq!(segs("a[1][2]"), vec![Key("a"), Index(1), Index(2)]);
        assert_eq!(segs("x-y_z"), vec![Key("x-y_z")]);
        for bad in [
            "a..b", ".a", "a.", "a[", "a[x]", "a[-1]", "a[]", "[0]b", "a]",
        ] {
            let e = parse_path(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("bad path `{bad}`")), "{bad}: {e}");
        }
    }

    #[test]
    fn get_names_the_missing_prefix() {
        let v = json!({"a": {"b": [10, 20]}, "s": "text"});
        assert_eq!(get(&v, "a.b[1]"), Ok(&json!(20)));
        assert_eq!(get(&v, ""), Ok(&v));
        assert_eq!(
            get(&v, "a.b[2].c").unwrap_err().to_string(),
            "`a.b[2]` does not exist: `a.b` has 2 items"
        );
        assert_eq!(
            get(&v, "a.x.y").unwrap_err().to_string(),
            "`a.x` does not exist: `a` has no key `x`"
        );
        assert_eq!(
            get(&v, "zz").unwrap_err().to_string(),
            "`zz` does not exist: the value has no key `zz`"
        );
        assert_eq!(
            get(&v, "s.t").unwrap_err().to_string(),
            "`s.t` does not exist: `s` is a string, not a map"
        );
        assert_eq!(
            get(&v, "[0]").unwrap_err().to_string(),
            "`[0]` does not exist: the value is a map, not a list"
        );
    }
}
