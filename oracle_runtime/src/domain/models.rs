//! The model-usage domain: how many `llm.chat` calls the run has made and how many tokens their
//! recorded replies used, folded from the log, and the run's budget (`run_started.budget`),
//! which refuses a call past either limit before it reaches the model ([`Domain::admit`]). It
//! owns no tools.

use std::any::Any;

use oracle_core::Payload;
use oracle_core::agent::Call;
use oracle_core::payload::Budget;
use serde_json::Value;

use super::{Domain, DomainError, Handled, Resolved, Site};
use crate::engine::{EngineError, RunConfig};
use crate::tool::Effect;

/// The tool whose calls are counted.
pub const CHAT: &str = "llm.chat";

/// Model calls and tokens so far, and the limits on them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// `llm.chat` calls recorded (`tool_called`), failed attempts included.
    pub calls: u64,
    /// Prompt and completion tokens of the recorded replies, rejected ones included (a
    /// `tool_failed` with `usage`: the server charged for them).
    pub tokens: u64,
}

pub struct ModelsDomain {
    usage: Usage,
    budget: Budget,
}

impl ModelsDomain {
    pub fn new(config: &RunConfig) -> ModelsDomain {
        ModelsDomain {
            usage: Usage::default(),
            budget: config.budget.clone().unwrap_or_default(),
        }
    }

    pub fn usage(&self) -> &Usage {
        &self.usage
    }
}

/// The tokens a recorded `llm.chat` outcome used: a reply's `usage`, or a rejected reply's
/// (0 for anything else).
pub fn tokens_of_outcome(payload: &Payload) -> u64 {
    match payload {
        Payload::ToolReturned(r) => tokens_of(&r.output),
        Payload::ToolFailed(f) => f
            .usage
            .map_or(0, |u| u.prompt_tokens.saturating_add(u.completion_tokens)),
        _ => 0,
    }
}

/// The tokens a recorded `llm.chat` output used (0 for anything else).
pub fn tokens_of(output: &Value) -> u64 {
    let n = |f: &str| {
        output
            .get("usage")
            .and_then(|u| u.get(f))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    n("prompt_tokens").saturating_add(n("completion_tokens"))
}

impl Domain for ModelsDomain {
    fn effect(&self) -> Effect {
        Effect::Domain("models")
    }

    fn folds(&self, payload: &Payload) -> bool {
        match payload {
            Payload::ToolCalled(c) => c.tool == CHAT,
            Payload::ToolReturned(r) => r.tool == CHAT,
            Payload::ToolFailed(f) => f.tool == CHAT,
            _ => false,
        }
    }

    fn apply(&mut self, _: u64, _: u64, payload: &Payload) -> Result<(), DomainError> {
        match payload {
            Payload::ToolCalled(_) => self.usage.calls = self.usage.calls.saturating_add(1),
            other => {
                self.usage.tokens = self.usage.tokens.saturating_add(tokens_of_outcome(other));
            }
        }
        Ok(())
    }

    fn admit(&self, tool: &str) -> Result<(), DomainError> {
        if tool != CHAT {
            return Ok(());
        }
        if let Some(max) = self.budget.model_calls_max
            && self.usage.calls >= max
        {
            return Err(DomainError::ModelCalls { max });
        }
        if let Some(max) = self.budget.tokens_max
            && self.usage.tokens >= max
        {
            return Err(DomainError::Tokens {
                max,
                used: self.usage.tokens,
            });
        }
        Ok(())
    }

    fn call(&mut self, call: &Call, _: Site<'_>) -> Result<Handled, EngineError> {
        Err(EngineError::Unexpected {
            seq: 0,
            message: format!(
                "the models domain runs no tool, asked to run `{}`",
                call.tool
            ),
        })
    }

    fn resolve_wait(&self, _: &Value, _: u64) -> Result<Resolved, DomainError> {
        Err(DomainError::ModelsNeverWait)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
