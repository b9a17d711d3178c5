//! JSON Schema checks for tool inputs, outputs and human answers, compiled once per schema.

use serde_json::Value;

/// A compiled JSON Schema with its source.
pub struct Schema {
    source: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema")
            .field("source", &self.source)
            .finish()
    }
}

/// A schema that does not compile, or a value that does not conform. A violation's text is
/// recorded (a tool's refused input or output), so both are worded as before; `reason` is the
/// validator's own text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("invalid JSON Schema: {reason}")]
    Invalid { reason: String },
    /// `at` is the JSON pointer of the offending part (`/` for the whole value).
    #[error("at {at}: {reason}")]
    Violation { at: String, reason: String },
}

impl Schema {
    /// Compiles `source`; an invalid schema is an error naming what is wrong with it.
    pub fn compile(source: &Value) -> Result<Schema, SchemaError> {
        let validator = jsonschema::validator_for(source).map_err(|e| SchemaError::Invalid {
            reason: e.to_string(),
        })?;
        Ok(Schema {
            source: source.clone(),
            validator,
        })
    }

    pub fn source(&self) -> &Value {
        &self.source
    }

    /// `Ok` if `value` conforms; otherwise the first violation, with the JSON pointer of the
    /// offending part. The schema's keywords are visited in sorted order (serde_json maps are
    /// sorted), so the message is the same on every run and can be recorded in a hashed event.
    pub fn check(&self, value: &Value) -> Result<(), SchemaError> {
        match self.validator.iter_errors(value).next() {
            None => Ok(()),
            Some(e) => {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_owned() } else { at };
                Err(SchemaError::Violation {
                    at,
                    reason: e.to_string(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_the_offending_part() {
        let s = Schema::compile(&json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }))
        .unwrap();
        assert!(s.check(&json!({"n": 3})).is_ok());
        let e = s.check(&json!({"n": "three"})).unwrap_err().to_string();
        assert!(e.starts_with("at /n: "), "{e}");
        let e = s.check(&json!({})).unwrap_err().to_string();
        assert!(e.contains("\"n\" is a required property"), "{e}");
    }

    #[test]
    fn an_invalid_schema_is_refused() {
        let e = Schema::compile(&json!({"type": "no-such-type"}))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("invalid JSON Schema"), "{e}");
    }
}
