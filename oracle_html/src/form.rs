//! The contract of the inbox's forms, both ways: which control a suspended step's answer gets
//! from its JSON Schema ([`Field::for_schema`]), and how a server turns the submitted fields
//! back into what `oracle resume` and `oracle adjudicate` take ([`answer_value`],
//! [`verdict`]).
//!
//! Both halves live here so the markup and the decoding cannot drift apart. Nothing here is
//! trusted: a server checks the CSRF token, and `resume` and `adjudicate` check the value, the
//! verdict and the evidence again before anything is written.

use oracle_memory::adjudicate::EVIDENCE_ACCEPTED;
use oracle_memory::{Provenance, Verdict};
use serde_json::Value;

/// Name of the hidden field holding the CSRF token, on every form.
pub const CSRF_FIELD: &str = "csrf";
/// An answer form's fields: the step answered, the answer, and how to read it.
pub const STEP_FIELD: &str = "step";
pub const VALUE_FIELD: &str = "value";
pub const VALUE_TYPE_FIELD: &str = "value_type";
/// A verdict form's fields: the request's handle, the verdict (the name of the button
/// pressed), the evidence, the note, and whether to resume the run afterwards (`1` when
/// ticked).
pub const HANDLE_FIELD: &str = "handle";
pub const VERDICT_FIELD: &str = "verdict";
pub const EVIDENCE_FIELD: &str = "evidence";
pub const NOTE_FIELD: &str = "note";
pub const RESUME_FIELD: &str = "resume";

/// Longest answer typed into a form, in bytes (as `--value`: a tool's output at most).
pub const ANSWER_BYTES_MAX: u64 = 8 << 20;

/// The control an answer gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// `{"type": "string"}`: a text input; submitted with `value_type=string`.
    Text {
        min_length: Option<u64>,
        max_length: Option<u64>,
    },
    /// `{"type": "integer"}`: a number input with step 1; `value_type=integer`.
    Integer {
        minimum: Option<i64>,
        maximum: Option<i64>,
    },
    /// `{"type": "boolean"}`: yes/no radio buttons (`true`, `false`); `value_type=boolean`.
    Boolean,
    /// `{"enum": [...]}`: a select whose options' values are the members as JSON text;
    /// `value_type=json`.
    Choice(Vec<Value>),
    /// Anything else (an object, an array, a union, no schema): a textarea of JSON;
    /// `value_type=json`.
    Json,
}

impl Field {
    /// The control for an answer that should meet `schema` (none: any JSON value).
    pub fn for_schema(schema: Option<&Value>) -> Field {
        let Some(Value::Object(s)) = schema else {
            return Field::Json;
        };
        if let Some(Value::Array(members)) = s.get("enum")
            && !members.is_empty()
        {
            return Field::Choice(members.clone());
        }
        let uint = |k: &str| s.get(k).and_then(Value::as_u64);
        let int = |k: &str| s.get(k).and_then(Value::as_i64);
        match s.get("type").and_then(Value::as_str) {
            Some("string") => Field::Text {
                min_length: uint("minLength"),
                max_length: uint("maxLength"),
            },
            Some("integer") => Field::Integer {
                minimum: int("minimum"),
                maximum: int("maximum"),
            },
            Some("boolean") => Field::Boolean,
            _ => Field::Json,
        }
    }

    /// The `value_type` the form submits with this control.
    pub fn value_type(&self) -> &'static str {
        match self {
            Field::Text { .. } => "string",
            Field::Integer { .. } => "integer",
            Field::Boolean => "boolean",
            Field::Choice(_) | Field::Json => "json",
        }
    }
}

/// Why submitted fields do not make an answer or a verdict.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    #[error("`{VALUE_TYPE_FIELD}` is `{0}`; expected string, integer, boolean or json")]
    ValueType(String),
    #[error("the answer is {len} bytes, more than {ANSWER_BYTES_MAX}")]
    TooLong { len: u64 },
    #[error("the answer `{text}` is not a whole number")]
    NotInteger { text: String },
    #[error("the answer `{text}` is neither `true` nor `false`")]
    NotBoolean { text: String },
    #[error("the answer is not JSON: {reason}")]
    NotJson { reason: String },
    #[error("{0}")]
    Verdict(String),
    #[error("no evidence chosen: a verdict needs the evidence it rests on")]
    NoEvidence,
    #[error("{0}")]
    Evidence(String),
    #[error("evidence `{given}` cannot carry a verdict; accepted: {accepted}")]
    EvidenceRefused { given: String, accepted: String },
    #[error("say where the fork starts: a step, or an event number, not both")]
    ForkPoint,
    #[error("the event number `{text}` is not a whole number")]
    NotSeq { text: String },
    #[error("the plan is {len} bytes, more than {}", oracle_plan::PLAN_BYTES_MAX)]
    PlanTooLong { len: u64 },
}

/// What the run page's fork form asks for ([`fork_request`]): where the fork starts, and
/// optionally the output of the step it starts at and a new plan to follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRequest {
    pub step: Option<String>,
    pub at: Option<u64>,
    pub value: Option<Value>,
    pub plan: Option<String>,
}

/// The fork form's fields (`step`, `at`, `value`, `plan`; blank means not given) as a request:
/// exactly one of `step` and `at`; `value` any JSON text; `plan` a plan's text. The host checks
/// the rest (the fork point, the value against the step, the plan against the shared events).
pub fn fork_request(
    step: &str,
    at: &str,
    value: &str,
    plan: &str,
) -> Result<ForkRequest, FormError> {
    let given = |t: &str| Some(t.trim()).filter(|t| !t.is_empty()).map(str::to_owned);
    let (step, at_text) = (given(step), given(at));
    if step.is_some() == at_text.is_some() {
        return Err(FormError::ForkPoint);
    }
    let at = match at_text {
        Some(t) => Some(t.parse::<u64>().map_err(|_| FormError::NotSeq {
            text: crate::escape::shorten(&t, 40),
        })?),
        None => None,
    };
    let value = match given(value) {
        Some(_) => Some(answer_value("json", value)?),
        None => None,
    };
    if plan.len() as u64 > oracle_plan::PLAN_BYTES_MAX {
        return Err(FormError::PlanTooLong {
            len: plan.len() as u64,
        });
    }
    let plan = Some(plan.to_owned()).filter(|p| !p.trim().is_empty());
    Ok(ForkRequest {
        step,
        at,
        value,
        plan,
    })
}

/// The JSON value an answer form submitted: `text` (the `value` field) read as `value_type`
/// says. `string` takes the text as it is; `integer` a whole number (surrounding spaces
/// ignored); `boolean` `true` or `false`; `json` any JSON text. The run's `resume` checks the
/// value against the step's schema and `expect`.
pub fn answer_value(value_type: &str, text: &str) -> Result<Value, FormError> {
    if text.len() as u64 > ANSWER_BYTES_MAX {
        return Err(FormError::TooLong {
            len: text.len() as u64,
        });
    }
    match value_type {
        "string" => Ok(Value::String(text.to_owned())),
        "integer" => {
            let t = text.trim();
            if let Ok(n) = t.parse::<i64>() {
                Ok(Value::from(n))
            } else if let Ok(n) = t.parse::<u64>() {
                Ok(Value::from(n))
            } else {
                Err(FormError::NotInteger {
                    text: crate::escape::shorten(t, 40),
                })
            }
        }
        "boolean" => match text.trim() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            other => Err(FormError::NotBoolean {
                text: crate::escape::shorten(other, 40),
            }),
        },
        "json" => serde_json::from_str(text).map_err(|e| FormError::NotJson {
            reason: e.to_string(),
        }),
        other => Err(FormError::ValueType(crate::escape::shorten(other, 40))),
    }
}

/// The verdict, evidence and note a verdict form submitted. The evidence must be one the
/// verdict accepts ([`EVIDENCE_ACCEPTED`]); `adjudicate` checks it again.
pub fn verdict(
    verdict: &str,
    evidence: &str,
    note: &str,
) -> Result<(Verdict, Provenance, String), FormError> {
    let v: Verdict = verdict
        .parse()
        .map_err(|e: oracle_memory::adjudicate::ReadError| FormError::Verdict(e.to_string()))?;
    if evidence.is_empty() {
        return Err(FormError::NoEvidence);
    }
    let e: Provenance = evidence
        .parse()
        .map_err(|e: oracle_memory::claim::UnknownProvenance| FormError::Evidence(e.to_string()))?;
    if !EVIDENCE_ACCEPTED.contains(&e) {
        return Err(FormError::EvidenceRefused {
            given: e.as_str().to_owned(),
            accepted: EVIDENCE_ACCEPTED
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok((v, e, note.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_fork_form_names_one_point_and_may_give_a_value_and_a_plan() {
        let r = fork_request("q", " ", r#"{"answer": 1}"#, "").unwrap();
        assert_eq!(r.step.as_deref(), Some("q"));
        assert_eq!((r.at, r.plan), (None, None));
        assert_eq!(r.value, Some(json!({"answer": 1})));
        let r = fork_request("", "12", "", "plan p version 2\n").unwrap();
        assert_eq!((r.step, r.at, r.value), (None, Some(12), None));
        assert_eq!(r.plan.as_deref(), Some("plan p version 2\n"));
        assert_eq!(fork_request("q", "3", "", ""), Err(FormError::ForkPoint));
        assert_eq!(fork_request("", "", "", ""), Err(FormError::ForkPoint));
        assert!(matches!(
            fork_request("", "-1", "", ""),
            Err(FormError::NotSeq { .. })
        ));
        assert!(matches!(
            fork_request("q", "", "{", ""),
            Err(FormError::NotJson { .. })
        ));
        let huge = "x".repeat(oracle_plan::PLAN_BYTES_MAX as usize + 1);
        assert!(matches!(
            fork_request("q", "", "", &huge),
            Err(FormError::PlanTooLong { .. })
        ));
    }

    #[test]
    fn each_schema_type_gets_its_control() {
        assert_eq!(
            Field::for_schema(Some(&json!({"type": "string", "maxLength": 5}))),
            Field::Text {
                min_length: None,
                max_length: Some(5)
            }
        );
        assert_eq!(
            Field::for_schema(Some(&json!({"type": "integer", "minimum": -3}))),
            Field::Integer {
                minimum: Some(-3),
                maximum: None
            }
        );
        assert_eq!(
            Field::for_schema(Some(&json!({"type": "boolean"}))),
            Field::Boolean
        );
        assert_eq!(
            Field::for_schema(Some(&json!({"type": "string", "enum": ["a", "b"]}))),
            Field::Choice(vec![json!("a"), json!("b")])
        );
        for other in [
            json!({"type": "object"}),
            json!({"type": "array"}),
            json!({"type": ["string", "null"]}),
            json!({"type": "number"}),
            json!({}),
            json!(true),
        ] {
            assert_eq!(Field::for_schema(Some(&other)), Field::Json, "{other}");
        }
        assert_eq!(Field::for_schema(None), Field::Json);
    }

    #[test]
    fn submitted_answers_decode_by_their_value_type() {
        assert_eq!(answer_value("string", " hi ").unwrap(), json!(" hi "));
        assert_eq!(answer_value("integer", " -42 ").unwrap(), json!(-42));
        assert_eq!(
            answer_value("integer", "18446744073709551615").unwrap(),
            json!(u64::MAX)
        );
        assert!(matches!(
            answer_value("integer", "4.5"),
            Err(FormError::NotInteger { .. })
        ));
        assert_eq!(answer_value("boolean", "false").unwrap(), json!(false));
        assert!(answer_value("boolean", "yes").is_err());
        assert_eq!(
            answer_value("json", r#"{"total": 1250}"#).unwrap(),
            json!({"total": 1250})
        );
        assert!(matches!(
            answer_value("json", "{"),
            Err(FormError::NotJson { .. })
        ));
        assert!(matches!(
            answer_value("float", "1"),
            Err(FormError::ValueType(_))
        ));
    }

    #[test]
    fn a_verdict_needs_accepted_evidence() {
        assert_eq!(
            verdict("affirm", "external_first_hand", "phoned").unwrap(),
            (
                Verdict::Affirm,
                Provenance::ExternalFirstHand,
                "phoned".to_owned()
            )
        );
        assert_eq!(
            verdict("deny", "", ""),
            Err(FormError::NoEvidence),
            "the empty first option of the select"
        );
        assert!(matches!(
            verdict("deny", "model_derived", ""),
            Err(FormError::EvidenceRefused { .. })
        ));
        assert!(matches!(
            verdict("maybe", "external_first_hand", ""),
            Err(FormError::Verdict(_))
        ));
    }
}
