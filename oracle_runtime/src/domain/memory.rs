//! The belief-memory domain: the run's [`Memory`] (claims, verdicts, expiries, outside claims)
//! and the `memory.*` tools, which the engine runs against it when their outcome is recorded.

use std::any::Any;

use oracle_core::Payload;
use oracle_core::agent::Call;
use oracle_memory::settings::{DOMAIN, MemorySettings};
use oracle_memory::tools::{self as memory_tools, QueryOutcome};
use oracle_memory::{Memory, Origin};
use serde_json::Value;

use super::{Domain, DomainError, Handled, Resolved, Site, WaitWords, outcome};

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
    /// How to reach the store the run is attached to (`settings.store`), when it may be reached.
    attach: Option<crate::shared::Attach>,
}

impl MemoryDomain {
    /// The memory of a run whose settings are `config`'s (`domains.memory`), or why those are
    /// not settings.
    pub fn new(config: &RunConfig) -> Result<MemoryDomain, DomainError> {
        let settings = MemorySettings::from_recorded(config.domains.get(DOMAIN))?;
        Ok(MemoryDomain {
            memory: Memory::new(),
            settings,
            attach: config.shared.clone(),
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
        if self.settings.store.is_some() {
            // The memory is the store's; the run's log holds only its recorded answers.
            return false;
        }
        match payload {
            Payload::ToolReturned(r) => r.tool == memory_tools::ASSERT,
            other => other.kind().is_external(),
        }
    }

    fn apply(&mut self, seq: u64, time: u64, payload: &Payload) -> Result<(), DomainError> {
        Ok(self.memory.apply(seq, time, payload)?)
    }

    fn call(&mut self, call: &Call, site: Site<'_>) -> Result<Handled, EngineError> {
        if let Some(name) = self.settings.store.clone() {
            return shared_call(self.attach.as_ref(), &name, call, site);
        }
        if let Some(failed) = bad_deadline(call) {
            return Ok(Handled::Outcome(failed));
        }
        let settings = &self.settings;
        let origin = Origin {
            seq: site.seq,
            time: site.tick,
            step: call.step.clone(),
            tool: call.tool.clone(),
        };
        let result = match call.tool.as_str() {
            memory_tools::ASSERT => {
                let due = request_due(settings, &site);
                memory_tools::assert_until(&self.memory, &call.input, &origin, settings, due)
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
                let e = DomainError::NotMemoryTool {
                    tool: other.to_owned(),
                };
                return Ok(Handled::Outcome(outcome(call, Err(e))));
            }
        };
        Ok(Handled::Outcome(outcome(call, result)))
    }

    fn resolve_wait(&self, input: &Value, tick: u64) -> Result<Resolved, DomainError> {
        match memory_tools::query(&self.memory, input, &self.settings, tick) {
            Ok(QueryOutcome::Answer(v)) => Ok(Resolved::Answer(v)),
            Ok(QueryOutcome::Wait(why)) => Ok(Resolved::Waiting(why)),
            Err(e) => Err(e.into()),
        }
    }

    fn resolve_wait_recorded(
        &self,
        input: &Value,
        tick: u64,
        recorded: Option<Value>,
    ) -> Result<Resolved, DomainError> {
        let Some(name) = &self.settings.store else {
            return self.resolve_wait(input, tick);
        };
        if let Some(v) = recorded {
            return Ok(Resolved::Answer(v));
        }
        let Some(at) = &self.attach else {
            return Ok(Resolved::Waiting(shared_wait(name, input)));
        };
        match crate::shared::query(at.stores.as_ref(), name, input) {
            Ok(QueryOutcome::Answer(v)) => Ok(Resolved::Answer(v)),
            Ok(QueryOutcome::Wait(_)) => Ok(Resolved::Waiting(shared_wait(name, input))),
            Err(e) => Err(e.into()),
        }
    }

    fn wait_words(&self) -> WaitWords {
        WAIT_WORDS
    }

    fn deadlines(&self) -> Vec<u64> {
        let mut due: Vec<u64> = self
            .memory
            .requests()
            .filter(|r| r.status == oracle_memory::RequestStatus::Pending)
            .filter_map(|r| r.request.expires_ms)
            .collect();
        due.sort_unstable();
        due.dedup();
        due
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The due instant of a request a `memory.assert` at `site` may open under a real-time
/// expiry: the one its recorded outcome holds (resume, replay: the clock is never read again),
/// else the wall clock now plus the expiry (the one read, recorded in the outcome).
fn request_due(settings: &MemorySettings, site: &Site<'_>) -> Option<u64> {
    settings.expiry_ms?;
    if !site.past_record {
        return match &site.recorded {
            Some(Payload::ToolReturned(r)) => r
                .output
                .get("adjudication")
                .and_then(|a| a.get("expires_ms"))
                .and_then(Value::as_u64),
            _ => None,
        };
    }
    settings.due_ms(crate::wall::now_ms())
}

/// Why a step waits on a line of store `name`: from the call's input alone, so a replay, which
/// never reads the store, words it the same.
fn shared_wait(name: &str, input: &Value) -> String {
    let field = |k: &str| input.get(k).and_then(Value::as_str).unwrap_or("?");
    format!(
        "{}{}/{} (in store {name}: `oracle adjudications --memory {name}`)",
        memory_tools::BELIEF_WAIT_PREFIX,
        field("subject"),
        field("predicate")
    )
}

/// A memory call of a run attached to store `name`. Replaying, the recorded outcome is the
/// answer and the store is never read. Past the record, everything so far is made durable
/// (write-ahead), then the store answers: `memory.assert` is published under the store's lock
/// (keyed by the outcome's seq, so a run resumed after a crash gets the same answer back), and
/// reads answer with the store's head at that moment.
/// A `memory.query` whose `deadline` does not parse fails when called, before anything waits
/// (as a `human.ask`'s does): the failure its step records.
fn bad_deadline(call: &Call) -> Option<Payload> {
    use crate::tools::time::{DEADLINE_ARG, deadline_ms};
    if call.tool != memory_tools::QUERY || call.input.get(DEADLINE_ARG).is_none() {
        return None;
    }
    let e = deadline_ms(&call.input, 0).err()?;
    Some(outcome(call, Err(e)))
}

fn shared_call(
    attach: Option<&crate::shared::Attach>,
    name: &str,
    call: &Call,
    site: Site<'_>,
) -> Result<Handled, EngineError> {
    if !site.past_record {
        return Ok(match site.recorded {
            Some(p @ (Payload::ToolReturned(_) | Payload::ToolFailed(_)))
                if outcome_of(&p, call) =>
            {
                Handled::Outcome(p)
            }
            _ if call.tool == memory_tools::QUERY => Handled::Wait(shared_wait(name, &call.input)),
            _ => Handled::Outcome(outcome(
                call,
                Err(format!("store `{name}`: no recorded answer for this call")),
            )),
        });
    }
    if let Some(failed) = bad_deadline(call) {
        return Ok(Handled::Outcome(failed));
    }
    (site.commit)()?;
    let Some(at) = attach else {
        let e = format!("store `{name}` cannot be reached from here (a replay)");
        return Ok(Handled::Outcome(outcome(call, Err(e))));
    };
    let result = match call.tool.as_str() {
        memory_tools::ASSERT => crate::shared::publish(
            at.stores.as_ref(),
            name,
            &at.run,
            &site.seq.to_string(),
            &call.step,
            &call.input,
        ),
        memory_tools::QUERY => match crate::shared::query(at.stores.as_ref(), name, &call.input) {
            Ok(QueryOutcome::Answer(v)) => Ok(v),
            Ok(QueryOutcome::Wait(_)) => return Ok(Handled::Wait(shared_wait(name, &call.input))),
            Err(e) => Err(e),
        },
        memory_tools::HISTORY => crate::shared::history(at.stores.as_ref(), name, &call.input),
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

/// Whether a recorded outcome is this call's.
fn outcome_of(p: &Payload, call: &Call) -> bool {
    match p {
        Payload::ToolReturned(r) => r.step == call.step && r.tool == call.tool,
        Payload::ToolFailed(f) => f.step == call.step && f.tool == call.tool,
        _ => false,
    }
}
