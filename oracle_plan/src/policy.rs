//! Retry policies (`retry { attempts: 5, backoff: "exponential", initial: "1s", max: "1m" }`)
//! and sagas (`undo STEP`): what the compiler reads from the clauses and the pure arithmetic
//! the plan agent uses. The waits themselves are the runtime's (a recorded timer).

use serde_json::{Map, Value};

use crate::ast::{self, Expr};
use crate::compile::CompiledStep;
use crate::diagnostic::Diagnostic;
use crate::eval;

/// The tool the plan agent calls between two attempts of a step with a retry policy: the
/// runtime records a timer for it (`timer_set`, `timer_fired`), never a tool of a plan.
pub const BACKOFF_TOOL: &str = "retry.backoff";

/// `initial` when a policy does not say.
pub const INITIAL_MS_DEFAULT: u64 = 1_000;
/// `max` when a policy does not say.
pub const MAX_MS_DEFAULT: u64 = 5 * 60 * 1_000;
/// The longest wait a policy may name (`initial`, `max`): one day, as `timeout`.
pub const WAIT_MS_MAX: u64 = crate::compile::TIMEOUT_MS_MAX;
/// Most codes in `non_retryable`.
pub const NON_RETRYABLE_MAX: usize = 64;

/// How the wait grows between attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backoff {
    /// `initial`, doubled after each failed attempt, at most `max`.
    Exponential,
    /// `initial` every time.
    Fixed,
}

impl Backoff {
    pub fn as_str(self) -> &'static str {
        match self {
            Backoff::Exponential => "exponential",
            Backoff::Fixed => "fixed",
        }
    }
}

/// A step's retry policy, compiled. Its attempts are the step's `retry`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub backoff: Backoff,
    pub initial_ms: u64,
    pub max_ms: u64,
    /// Whether each wait is drawn in `[wait / 2, wait]` from the run's seed (by the runtime).
    pub jitter: bool,
    /// Failure codes that end the attempts at once, sorted and unique.
    pub non_retryable: Vec<String>,
}

impl RetryPolicy {
    /// The wait after failed attempt `attempt` (from 1), before jitter.
    pub fn wait_ms(&self, attempt: u64) -> u64 {
        match self.backoff {
            Backoff::Fixed => self.initial_ms,
            Backoff::Exponential => {
                let shift = attempt.saturating_sub(1).min(63) as u32;
                let factor = 1u64.checked_shl(shift).unwrap_or(u64::MAX);
                self.initial_ms.saturating_mul(factor).min(self.max_ms)
            }
        }
    }

    /// The first of `non_retryable` that `error` carries: a code matches a failure whose
    /// recorded text holds it as a whole word (not inside a longer name or number).
    pub fn non_retryable_in(&self, error: &str) -> Option<&str> {
        self.non_retryable
            .iter()
            .find(|c| holds_word(error, c))
            .map(String::as_str)
    }

    /// The canonical form (part of the plan hash).
    pub fn form(&self, attempts: u64) -> Value {
        let mut m = Map::new();
        m.insert("attempts".into(), Value::from(attempts));
        m.insert("backoff".into(), Value::from(self.backoff.as_str()));
        m.insert("initial_ms".into(), Value::from(self.initial_ms));
        m.insert("jitter".into(), Value::from(self.jitter));
        m.insert("max_ms".into(), Value::from(self.max_ms));
        let codes = self.non_retryable.iter().map(|c| Value::from(c.as_str()));
        m.insert("non_retryable".into(), Value::Array(codes.collect()));
        Value::Object(m)
    }
}

/// Whether `text` holds `word` with no letter, digit or `_` right before or after it.
fn holds_word(text: &str, word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    let part = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(part) && !after.is_some_and(part)
    })
}

struct NoNames;

impl eval::Env for NoNames {
    fn lookup(&self, _name: &str) -> Option<&Value> {
        None
    }
}

/// Reads `retry { ... }` (E0227 for anything it cannot be): the attempts and the policy.
pub fn compile(e: &Expr, d: &mut Vec<Diagnostic>) -> Option<(u64, RetryPolicy)> {
    let bad = |d: &mut Vec<Diagnostic>, message: String| {
        d.push(
            Diagnostic::error("E0227", e.span, message, "not a retry policy").with_hint(
                "retry { attempts: 5, backoff: \"exponential\", initial: \"1s\", max: \"1m\", jitter: true, non_retryable: [\"code\"] }",
            ),
        );
        None
    };
    let value = match (eval::is_constant(e), eval::eval(e, &NoNames)) {
        (true, Ok(Value::Object(m))) => m,
        _ => return bad(d, "a retry policy must be a constant map".into()),
    };
    match read(&value) {
        Ok(x) => Some(x),
        Err(e) => bad(d, e.to_string()),
    }
}

/// Why a retry policy cannot be (E0227's message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "a retry policy has no `{key}`; it takes attempts, backoff, initial, max, jitter, non_retryable"
    )]
    Unknown { key: String },
    #[error("`attempts` must be from 1 to {}", crate::compile::RETRY_MAX)]
    Attempts,
    #[error("`backoff` must be \"exponential\" or \"fixed\"")]
    Backoff,
    #[error("`{key}` must be a duration string such as \"1s\"")]
    NotText { key: &'static str },
    #[error("`{key}`: {error}")]
    Time {
        key: &'static str,
        error: crate::time::TimeError,
    },
    #[error("`{key}` must be between 1 ms and 24 h")]
    Wait { key: &'static str },
    #[error("`max` must not be shorter than `initial`")]
    MaxBelowInitial,
    #[error("`jitter` must be true or false")]
    Jitter,
    #[error("`non_retryable` must be a list of at most {NON_RETRYABLE_MAX} non-empty strings")]
    Codes,
}

const KEYS: [&str; 6] = [
    "attempts",
    "backoff",
    "initial",
    "max",
    "jitter",
    "non_retryable",
];

fn read(m: &Map<String, Value>) -> Result<(u64, RetryPolicy), PolicyError> {
    if let Some(k) = m.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(PolicyError::Unknown { key: k.clone() });
    }
    let attempts = match m.get("attempts") {
        None => crate::compile::RETRY_DEFAULT,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=crate::compile::RETRY_MAX).contains(&n) => n,
            _ => return Err(PolicyError::Attempts),
        },
    };
    let backoff = match m.get("backoff").map(|v| v.as_str()) {
        None | Some(Some("exponential")) => Backoff::Exponential,
        Some(Some("fixed")) => Backoff::Fixed,
        _ => return Err(PolicyError::Backoff),
    };
    let initial_ms = wait(m, "initial", INITIAL_MS_DEFAULT)?;
    let max_ms = wait(m, "max", MAX_MS_DEFAULT.max(initial_ms))?;
    if max_ms < initial_ms {
        return Err(PolicyError::MaxBelowInitial);
    }
    let jitter = match m.get("jitter") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(PolicyError::Jitter),
    };
    let non_retryable = codes(m.get("non_retryable"))?;
    let policy = RetryPolicy {
        backoff,
        initial_ms,
        max_ms,
        jitter,
        non_retryable,
    };
    Ok((attempts, policy))
}

fn wait(m: &Map<String, Value>, key: &'static str, default: u64) -> Result<u64, PolicyError> {
    let Some(v) = m.get(key) else {
        return Ok(default);
    };
    let text = v.as_str().ok_or(PolicyError::NotText { key })?;
    let ms = crate::time::duration_ms(text).map_err(|error| PolicyError::Time { key, error })?;
    if ms == 0 || ms > WAIT_MS_MAX {
        return Err(PolicyError::Wait { key });
    }
    Ok(ms)
}

fn codes(v: Option<&Value>) -> Result<Vec<String>, PolicyError> {
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    let items = v.as_array().ok_or(PolicyError::Codes)?;
    if items.len() > NON_RETRYABLE_MAX {
        return Err(PolicyError::Codes);
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item.as_str() {
            Some(s) if !s.is_empty() => out.push(s.to_owned()),
            _ => return Err(PolicyError::Codes),
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// `undo STEP` of step `me` (E0228 when it names no earlier-declared step, itself, or a step
/// that is itself a compensation): the index of the step it compensates.
pub fn undo_target(
    steps: &[ast::Step],
    me: u32,
    index: &std::collections::BTreeMap<&str, u32>,
    d: &mut Vec<Diagnostic>,
) -> Option<u32> {
    let s = &steps[me as usize];
    let target = s.undo.as_ref()?;
    let err = |d: &mut Vec<Diagnostic>, message: String| {
        d.push(Diagnostic::error(
            "E0228",
            target.span,
            message,
            "cannot be undone here",
        ));
        None
    };
    match index.get(target.node.as_str()) {
        None => err(d, format!("`undo` names an unknown step `{}`", target.node)),
        Some(&t) if t == me => err(d, format!("step `{}` cannot undo itself", target.node)),
        Some(&t) if steps[t as usize].undo.is_some() => err(
            d,
            format!(
                "step `{}` is itself a compensation: it cannot be undone",
                target.node
            ),
        ),
        Some(&t) => Some(t),
    }
}

/// E0228 for a step that reads a compensation (it runs only when the run fails, so a step
/// waiting for it would never run), compensations included.
pub fn check_sagas(plan: &ast::Plan, steps: &[CompiledStep], d: &mut Vec<Diagnostic>) {
    for (i, s) in steps.iter().enumerate() {
        for &t in &s.deps {
            let target = &steps[t as usize];
            if target.undo.is_some() && s.undo != Some(t) {
                d.push(
                    Diagnostic::error(
                        "E0228",
                        plan.steps[i].name.span,
                        format!(
                            "step `{}` waits for `{}`, a compensation, which runs only when the run fails",
                            s.name, target.name
                        ),
                        "reads a compensation",
                    )
                    .with_hint("no step may read or run after an `undo` step"),
                );
            }
        }
    }
}

/// E0220 for `retry { ... }` or `undo` on a step inside a loop body: its waits would suspend
/// the run, which a body's steps may not, and a body has no saga of its own.
pub fn refuse_in_body(steps: &[ast::Step], d: &mut Vec<Diagnostic>) {
    for s in steps {
        let spans = [
            s.retry_policy.as_ref().map(|e| (e.span, "retry { ... }")),
            s.undo.as_ref().map(|u| (u.span, "undo")),
        ];
        for (span, what) in spans.into_iter().flatten() {
            d.push(
                Diagnostic::error(
                    "E0220",
                    span,
                    format!("a step inside a loop takes no `{what}` clause"),
                    "not here",
                )
                .with_hint("put the retry policy or the compensation on a step outside the loop"),
            );
        }
    }
}

/// `code` on the step calling a sub-plan (`what`) whose steps have a retry policy or an
/// `undo`: a sub-plan's steps may not suspend the run, and it has no saga of its own.
pub fn refuse_in_child(
    s: &ast::Step,
    steps: &[CompiledStep],
    code: &'static str,
    what: &str,
    d: &mut Vec<Diagnostic>,
) {
    if let Some(x) = steps
        .iter()
        .find(|x| x.policy.is_some() || x.undo.is_some())
    {
        d.push(Diagnostic::error(
            code,
            s.call.span,
            format!(
                "{what}'s step `{}` has a retry policy or an `undo`, which only a top plan's steps may have",
                x.name
            ),
            "not in a sub-plan",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_waits_double_to_their_cap() {
        let p = RetryPolicy {
            backoff: Backoff::Exponential,
            initial_ms: 50,
            max_ms: 300,
            jitter: false,
            non_retryable: vec![],
        };
        let waits: Vec<u64> = (1..=5).map(|a| p.wait_ms(a)).collect();
        assert_eq!(waits, [50, 100, 200, 300, 300]);
        assert_eq!(p.wait_ms(u64::MAX), 300);
        let fixed = RetryPolicy {
            backoff: Backoff::Fixed,
            ..p
        };
        assert_eq!(fixed.wait_ms(4), 50);
    }

    #[test]
    fn codes_match_whole_words_only() {
        let p = RetryPolicy {
            backoff: Backoff::Fixed,
            initial_ms: 1,
            max_ms: 1,
            jitter: false,
            non_retryable: vec!["card_declined".into(), "status 4".into()],
        };
        assert_eq!(
            p.non_retryable_in("`pay` exited with status 2; stderr: card_declined\n"),
            Some("card_declined")
        );
        assert_eq!(p.non_retryable_in("card_declined_soft"), None);
        assert_eq!(p.non_retryable_in("exited with status 42"), None);
        assert_eq!(
            p.non_retryable_in("exited with status 4;"),
            Some("status 4")
        );
    }
}
