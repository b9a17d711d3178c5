//! The belief-memory domain: the run's [`Memory`] (claims, verdicts, expiries, outside claims)
//! and the `memory.*` tools, which the engine runs against it when their outcome is recorded.

use std::any::Any;

use oracle_core::Payload;
use oracle_core::agent::Call;
use oracle_memory::settings::{DOMAIN, MemorySettings};
use oracle_memory::tools::{self as memory_tools, QueryOutcome};
use oracle_memory::{Memory, Origin};
use serde_json::Value;

use super::{Domain, Handled, Resolved, Site, WaitWords, outcome};

/// A belief waits for a verdict, never a value: a person answering it is told to adjudicate
/// (`belief_wait`, a code the API and `--json` documented before domains).
pub const WAIT_WORDS: WaitWords = WaitWords {
    code: "belief_wait",
    noun: "belief",
    resolve: "adjudicate it (`oracle adjudicate`)",
};

/// The memory's tools whose calls can wait (`memory.query` with `require: "resolved"`).
pub const WAITS: &[(&str, WaitWords)] = &[(memory_tools::QUERY, WAIT_WORDS)];
use crate::engine::{EngineError, RunConfig};
use crate::tool::Effect;

/// The effect `memory.*` tools are registered with.
pub const EFFECT: Effect = Effect::Domain("memory");

/// The run's belief memory, as far as the drive got.
pub struct MemoryDomain {
    memory: Memory,
    settings: MemorySettings,
}

impl MemoryDomain {
    /// The memory of a run whose settings are `config`'s (`domains.memory`), or why those are
    /// not settings.
    pub fn new(config: &RunConfig) -> Result<MemoryDomain, String> {
        let settings = MemorySettings::from_recorded(config.domains.get(DOMAIN))?;
        Ok(MemoryDomain {
            memory: Memory::new(),
            settings,
        })
    }

    pub fn memory(&self) -> &Memory {
        &self.memory
    }
}

impl Domain for MemoryDomain {
    fn effect(&self) -> Effect {
        EFFECT
    }

    fn folds(&self, payload: &Payload) -> bool {
        match payload {
            Payload::ToolReturned(r) => r.tool == memory_tools::ASSERT,
            other => other.kind().is_external(),
        }
    }

    fn apply(&mut self, seq: u64, time: u64, payload: &Payload) -> Result<(), String> {
        self.memory
            .apply(seq, time, payload)
            .map_err(|e| e.to_string())
    }

    fn call(&mut self, call: &Call, site: Site<'_>) -> Result<Handled, EngineError> {
        let settings = &self.settings;
        let origin = Origin {
            seq: site.seq,
            time: site.tick,
            step: call.step.clone(),
            tool: call.tool.clone(),
        };
        let result = match call.tool.as_str() {
            memory_tools::ASSERT => {
                memory_tools::assert(&self.memory, &call.input, &origin, settings)
            }
            memory_tools::QUERY => {
                match memory_tools::query(&self.memory, &call.input, settings, site.tick) {
                    Ok(QueryOutcome::Answer(v)) => Ok(v),
                    Ok(QueryOutcome::Wait(why)) => return Ok(Handled::Wait(why)),
                    Err(e) => Err(e),
                }
            }
            memory_tools::HISTORY => memory_tools::history(&self.memory, &call.input),
            other => {
                let e = format!("`{other}` is not a memory tool");
                return Ok(Handled::Outcome(outcome(call, Err(e))));
            }
        };
        Ok(Handled::Outcome(outcome(
            call,
            result.map_err(|e| e.to_string()),
        )))
    }

    fn resolve_wait(&self, input: &Value, tick: u64) -> Result<Resolved, String> {
        match memory_tools::query(&self.memory, input, &self.settings, tick) {
            Ok(QueryOutcome::Answer(v)) => Ok(Resolved::Answer(v)),
            Ok(QueryOutcome::Wait(why)) => Ok(Resolved::Waiting(why)),
            Err(e) => Err(e.to_string()),
        }
    }

    fn wait_words(&self) -> WaitWords {
        WAIT_WORDS
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
