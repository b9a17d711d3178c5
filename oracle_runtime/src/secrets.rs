//! Run secrets: values the operator names from the environment (`oracle run --secret
//! NAME=ENV_VAR`), which a call receives only at the moment of use and which are never
//! recorded. A plan refers to a secret as `secret("NAME")`, the map `{"$secret": "NAME"}` in
//! hashed bytes; `http.request` headers and `proc.exec`'s `env` put the value in. The engine
//! refuses to record any input, output, error or answer that contains a secret's value
//! ([`Secrets::found_in`]), as a failure naming the secret.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// The key of a secret reference: `{"$secret": "NAME"}`.
pub const SECRET_KEY: &str = "$secret";
/// Shortest secret value accepted: a shorter one would be "found" in ordinary text everywhere.
pub const SECRET_BYTES_MIN: usize = 8;

/// The run's secrets by name. `Debug` shows the names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    values: BTreeMap<String, String>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.values.keys()).finish()
    }
}

/// A secret too short to keep out of the record, or a reference to one a run was not given.
/// A declared tool's failure can record the text, so it is worded as before.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error(
        "secret `{name}` is shorter than {SECRET_BYTES_MIN} bytes, too short to keep out of the record"
    )]
    TooShort { name: String },
    #[error("{what}: secret `{name}` is not given to this run: pass --secret {name}=ENV_VAR")]
    NotGiven { what: String, name: String },
    #[error("{what} must be a string or secret(\"NAME\")")]
    NotText { what: String },
}

impl Secrets {
    /// Secrets from `(name, value)` pairs; `Err` names one whose value is shorter than
    /// [`SECRET_BYTES_MIN`].
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Result<Secrets, SecretError> {
        let mut values = BTreeMap::new();
        for (name, value) in pairs {
            if value.len() < SECRET_BYTES_MIN {
                return Err(SecretError::TooShort { name });
            }
            values.insert(name, value);
        }
        Ok(Secrets { values })
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    /// The text `v` stands for: a string as it is, or a secret reference's value. `what` names
    /// the argument in the error.
    pub fn resolve(&self, v: &Value, what: &str) -> Result<String, SecretError> {
        if let Some(s) = v.as_str() {
            return Ok(s.to_owned());
        }
        match reference(v) {
            Some(name) => self
                .values
                .get(name)
                .cloned()
                .ok_or_else(|| SecretError::NotGiven {
                    what: what.to_owned(),
                    name: name.to_owned(),
                }),
            None => Err(SecretError::NotText {
                what: what.to_owned(),
            }),
        }
    }

    /// The name of a secret whose value appears in `text`, if any.
    pub fn found_in(&self, text: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(_, v)| text.contains(v.as_str()))
            .map(|(n, _)| n.as_str())
    }

    /// The name of a secret whose value appears anywhere in `value` (its JSON text, where a
    /// string is escaped as it is in the log), if any.
    pub fn found_in_value(&self, value: &Value) -> Option<&str> {
        if self.values.is_empty() {
            return None;
        }
        // Strings are searched unescaped as well as in the JSON text.
        fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
            match v {
                Value::String(s) => out.push(s),
                Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
                Value::Object(m) => m.iter().for_each(|(k, x)| {
                    out.push(k);
                    strings(x, out);
                }),
                _ => {}
            }
        }
        let mut all = Vec::new();
        strings(value, &mut all);
        all.into_iter()
            .find_map(|s| self.found_in(s))
            .or_else(|| self.found_in(&value.to_string()))
    }
}

/// The name in a secret reference `{"$secret": "NAME"}` (exactly that one key).
pub fn reference(v: &Value) -> Option<&str> {
    let m = v.as_object()?;
    if m.len() != 1 {
        return None;
    }
    m.get(SECRET_KEY)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_resolve_and_values_are_found_but_never_shown() {
        let s = Secrets::new([("TOKEN".to_owned(), "s3cr3t-value".to_owned())]).unwrap();
        assert_eq!(
            s.resolve(&json!({"$secret": "TOKEN"}), "x").unwrap(),
            "s3cr3t-value"
        );
        assert_eq!(s.resolve(&json!("plain"), "x").unwrap(), "plain");
        assert!(
            s.resolve(&json!({"$secret": "NOPE"}), "x")
                .unwrap_err()
                .to_string()
                .contains("--secret NOPE=")
        );
        assert_eq!(
            s.found_in_value(&json!({"a": ["x s3cr3t-value y"]})),
            Some("TOKEN")
        );
        assert_eq!(s.found_in_value(&json!({"a": "nothing"})), None);
        assert!(!format!("{s:?}").contains("s3cr3t"));
        assert!(Secrets::new([("S".to_owned(), "short".to_owned())]).is_err());
    }
}
