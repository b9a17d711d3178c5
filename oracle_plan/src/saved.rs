//! A plan agent's progress between two decisions, as a value a fresh agent of the same plan and
//! inputs continues from (`Agent::save`, `Agent::restore`): a resume point keeps it so a long
//! run is not asked every earlier decision again.
//!
//! Only what the agent derived from its decisions so far is saved: each step's status (with a
//! completed step's output), the counts and queues the next decision reads, the conversations
//! of agent steps in progress, and the iterations of loop steps in progress, each a nested
//! agent saved the same way with its own inputs. The plan, and everything `PlanAgent::new`
//! derives from it, is not: the agent that restores already has it. The shape has no floats,
//! no `usize` and no hash maps, so the same agent gives the same value on every machine.
//!
//! A restore checks the whole value against the agent's plan and builds the restored agent
//! aside before it replaces anything: a value this agent could not have saved (another format,
//! another plan, lengths or step indexes that do not fit the plan, a conversation or iterations
//! for a step that cannot have them) is refused with what is wrong, and leaves the agent as it
//! was.

use std::collections::BTreeMap;
use std::sync::Arc;

use oracle_core::Hash;
use oracle_core::agent::{AgentError, Observation, Outcome};
use oracle_core::packed::Packed;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::agent::{
    AGENT_TOOL, Child, Inputs, IterationFailed, Iterations, Loop, PlanAgent, Queued, Status,
    TURNS_MAX,
};
use crate::ast::LoopKind;
use crate::compile::{CompiledPlan, CompiledStep};

/// Version of the saved shape. Any change to the shape or to what a field means takes a new
/// number: a value of another format is refused, and the run is derived again from its start.
/// Format 2 leaves out an ended iteration's agent and inputs (the agent is dropped when the
/// iteration ends: issue 42); a value of format 1, which has them, still restores.
const SAVED_FORMAT: u64 = 2;

/// The earlier format still read: its ended iterations carry their agents, which are ignored.
const SAVED_FORMAT_READ: u64 = 1;

/// Most calls a saved agent may have in flight: far more than a run holds (each is a call the
/// runtime keeps until its outcome comes), and low enough that counting on from it cannot
/// overflow.
const IN_FLIGHT_MAX: u64 = u32::MAX as u64;

/// What [`save`] returns.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Saved {
    format: u64,
    /// The hash of the plan it was saved under: progress through one plan means nothing for
    /// another, even one with as many steps.
    plan: Hash,
    agent: SavedAgent,
}

/// One agent's progress: the run's, or one iteration's of a loop step (which runs the loop's
/// body as a plan of its own).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedAgent {
    /// Whether the first decision was asked (it marks the steps without dependencies ready).
    started: bool,
    /// Each step's status, in the plan's declaration order.
    status: Vec<SavedStatus>,
    /// Each step's dependencies not yet settled, in declaration order.
    unsettled: Vec<u32>,
    /// Positions (in the plan's order) of the steps the next decision looks at, ascending.
    ready: Vec<u32>,
    /// Calls issued or queued whose outcomes have not been observed.
    in_flight: u64,
    /// Agent steps in progress, by ascending step index.
    loops: Vec<SavedLoop>,
    /// Loop steps in progress, by ascending step index.
    iterations: Vec<SavedIterations>,
    /// Calls decided on and not yet issued (one decision issues a bounded number), in order.
    queued: Vec<SavedCall>,
    /// Why the run stops, once a step failed under `on failure stop`.
    stopping: Option<String>,
}

/// A step's status. A completed step carries its output, so an output can only be saved for
/// a completed step, and a `null` output is told apart from none.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum SavedStatus {
    Pending,
    Running,
    Retrying { attempts: u64 },
    Completed { output: Packed },
    Skipped,
    Failed,
    Waiting { attempts: u64, reason: String },
    Backoff { attempts: u64 },
}

/// An agent step's conversation in progress (see `Loop` in `agent.rs`).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedLoop {
    step: u32,
    tier: u64,
    model: Value,
    tools: Vec<String>,
    /// Absent when the step gives no `output` schema. Present, even as `null`, when it gives
    /// one: the schema goes into every turn's input as given.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    schema: Option<Value>,
    max_turns: u64,
    messages: Vec<Value>,
    turn: u64,
    chats: u64,
    failures: u64,
    results: Vec<SavedResult>,
    previous: u64,
    /// The turn's `human.ask` calls waiting for a person: `[index in results, question]`.
    /// Absent when none waits, so a conversation saved before it existed reads the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    asks: Vec<(u64, String)>,
}

/// One tool call of the turn in progress: its id, and what it came to once known.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedResult {
    id: String,
    result: Option<String>,
}

/// A loop step in progress (see `Iterations` in `agent.rs`).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedIterations {
    step: u32,
    /// The outer values the body reads (what each new iteration's inputs start from).
    inputs: Map<String, Value>,
    running: u64,
    children: Vec<SavedChild>,
}

/// One iteration: the inputs its agent was built with, how it ended, and its progress.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedChild {
    /// The inputs its agent was built with; left out once it ended (format 2).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    inputs: Map<String, Value>,
    ended: Option<SavedEnded>,
    /// Calls of its last decision still without an outcome, and the outcomes received.
    waiting: u64,
    received: Vec<SavedObservation>,
    /// Its progress while it runs; left out once it ended (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<SavedAgent>,
}

/// An outcome held for a child until its decision's last one is in.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedObservation {
    step: String,
    tool: String,
    attempt: u64,
    outcome: Outcome,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum SavedEnded {
    /// Its steps' outputs, by name.
    Completed {
        outputs: Packed,
    },
    Failed {
        reason: String,
    },
}

/// A call not yet issued. A shape of its own rather than `Call`'s, so the saved format only
/// changes with [`SAVED_FORMAT`], and unknown fields are refused here too.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedCall {
    step: String,
    tool: String,
    attempt: u64,
    input: Packed,
    timeout_ms: Option<u64>,
    reads: Vec<String>,
}

/// Reads a field that is there as `Some`, even when it is `null` (an absent one is `None`
/// through `#[serde(default)]`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The agent's progress, as [`restore`] reads it.
pub(crate) fn save(agent: &PlanAgent) -> Option<Value> {
    // Fails only for a map whose keys are not strings, which this shape has none of.
    serde_json::to_value(saved(agent)).ok()
}

/// [`save`] as JSON text, written from the agent's packed outputs without building the value
/// as a tree first (a resume point of a long run would hold every output twice more: issue 42).
pub(crate) fn save_text(agent: &PlanAgent) -> Option<Box<RawValue>> {
    serde_json::value::to_raw_value(&saved(agent)).ok()
}

fn saved(agent: &PlanAgent) -> Saved {
    Saved {
        format: SAVED_FORMAT,
        plan: agent.plan().hash,
        agent: save_agent(agent),
    }
}

fn save_agent(a: &PlanAgent) -> SavedAgent {
    SavedAgent {
        started: a.started,
        status: a
            .status
            .iter()
            .zip(&a.outputs)
            .map(|(s, output)| save_status(s, output))
            .collect(),
        unsettled: a.unsettled.clone(),
        ready: a.ready.iter().copied().collect(),
        in_flight: a.in_flight,
        loops: a
            .loops
            .iter()
            .map(|(&step, l)| save_loop(step, l))
            .collect(),
        iterations: a
            .iterations
            .iter()
            .map(|(&step, it)| SavedIterations {
                step,
                inputs: Map::clone(&it.inputs),
                running: it.running,
                children: it
                    .children
                    .iter()
                    .map(|c| SavedChild {
                        inputs: c
                            .agent
                            .as_ref()
                            .map(|a| a.inputs_held().to_map())
                            .unwrap_or_default(),
                        ended: c.ended.clone().map(|e| match e {
                            Ok(outputs) => SavedEnded::Completed { outputs },
                            Err(failed) => SavedEnded::Failed {
                                reason: failed.to_string(),
                            },
                        }),
                        waiting: c.waiting,
                        received: c
                            .received
                            .iter()
                            .map(|o| SavedObservation {
                                step: o.step.clone(),
                                tool: o.tool.clone(),
                                attempt: o.attempt,
                                outcome: o.outcome.clone(),
                            })
                            .collect(),
                        agent: c.agent.as_ref().map(|a| save_agent(a)),
                    })
                    .collect(),
            })
            .collect(),
        queued: a
            .queued
            .iter()
            .map(|c| SavedCall {
                step: c.step.clone(),
                tool: c.tool.clone(),
                attempt: c.attempt,
                input: c.input.clone(),
                timeout_ms: c.timeout_ms,
                reads: c.reads.clone(),
            })
            .collect(),
        stopping: a.stopping.clone(),
    }
}

fn save_status(s: &Status, output: &Option<Packed>) -> SavedStatus {
    match s {
        Status::Pending => SavedStatus::Pending,
        Status::Running => SavedStatus::Running,
        Status::Retrying { attempts } => SavedStatus::Retrying {
            attempts: *attempts,
        },
        // A completed step always has its output (both are set together).
        Status::Completed => SavedStatus::Completed {
            output: output.clone().unwrap_or_else(|| Packed::new(&Value::Null)),
        },
        Status::Skipped => SavedStatus::Skipped,
        Status::Failed => SavedStatus::Failed,
        Status::Waiting { attempts, reason } => SavedStatus::Waiting {
            attempts: *attempts,
            reason: reason.clone(),
        },
        Status::Backoff { attempts } => SavedStatus::Backoff {
            attempts: *attempts,
        },
    }
}

fn save_loop(step: u32, l: &Loop) -> SavedLoop {
    SavedLoop {
        step,
        tier: l.tier,
        model: l.model.clone(),
        tools: l.tools.clone(),
        schema: l.schema.clone(),
        max_turns: l.max_turns,
        messages: l.messages.clone(),
        turn: l.turn,
        chats: l.chats,
        failures: l.failures,
        results: l
            .results
            .iter()
            .map(|(id, result)| SavedResult {
                id: id.clone(),
                result: result.clone(),
            })
            .collect(),
        // A count of tool calls held in memory fits in a u64.
        previous: l.previous as u64,
        asks: l.asks.iter().map(|(k, q)| (*k as u64, q.clone())).collect(),
    }
}

/// Makes `agent`, which has not decided yet, continue from `value`; see the module's doc.
pub(crate) fn restore(agent: &mut PlanAgent, value: &Value) -> Result<(), AgentError> {
    let refuse = |why: String| AgentError(format!("cannot restore the plan agent: {why}"));
    if agent.started {
        return Err(refuse(
            "it has already decided; only a fresh agent continues from a saved state".into(),
        ));
    }
    // The format first: a value of another format may have another shape, and saying so is
    // more use than naming the first field that does not fit.
    match value.get("format") {
        Some(f) if [SAVED_FORMAT, SAVED_FORMAT_READ].contains(&f.as_u64().unwrap_or(0)) => {}
        Some(f) => {
            return Err(refuse(format!(
                "the saved state has format {f}; this agent reads format {SAVED_FORMAT}"
            )));
        }
        None => {
            return Err(refuse(
                "the value is not a saved plan agent (it has no `format`)".into(),
            ));
        }
    }
    let saved = Saved::deserialize(value).map_err(|e| refuse(e.to_string()))?;
    if saved.plan != agent.plan().hash {
        return Err(refuse(format!(
            "it was saved for plan {}, and this agent runs plan {}",
            saved.plan,
            agent.plan().hash
        )));
    }
    let restored = restore_agent(agent.fresh(agent.inputs_held().clone()), saved.agent)
        .map_err(|e| refuse(e.to_string()))?;
    *agent = restored;
    Ok(())
}

/// Why saved progress does not fit the agent it is restored into: each names the field and the
/// count that cannot be. The text ends up in the `AgentError` a refused restore gives.
#[derive(Debug, thiserror::Error)]
enum RestoreError {
    #[error("`{what}` has {len} entries, and the plan has {n} steps")]
    Entries {
        what: &'static str,
        len: usize,
        n: usize,
    },
    #[error("step `{step}` has {left} unsettled dependencies, and only {deps} dependencies")]
    Unsettled {
        step: String,
        left: u32,
        deps: usize,
    },
    #[error("{in_flight} calls in flight, more than any run holds ({IN_FLIGHT_MAX})")]
    InFlight { in_flight: u64 },
    #[error(
        "step `{step}`'s conversation waits on tool call {index}, which is not one of its turn's calls without a result"
    )]
    Ask { step: String, index: u64 },
    #[error("`loops` holds a conversation for step `{step}`, which is not an agent step")]
    NotAgentStep { step: String },
    #[error("`iterations` holds iterations for step `{step}`, which is not a loop step")]
    NotLoopStep { step: String },
    #[error("loop step `{step}` has {count} iterations, and it runs from 1 to {most}")]
    IterationCount { step: String, count: u64, most: u64 },
    #[error("loop step `{step}` counts {running} iterations running, and {unended} have not ended")]
    RunningCount {
        step: String,
        running: u64,
        unended: u64,
    },
    #[error("iteration {i} of step `{step}`: {source}")]
    Iteration {
        i: usize,
        step: String,
        source: Box<RestoreError>,
    },
    #[error("iteration {i} of step `{step}` has ended but waits for outcomes")]
    EndedWaiting { i: usize, step: String },
    #[error("iteration {i} of step `{step}` has not ended, and has no saved agent")]
    RunningWithoutAgent { i: usize, step: String },
    #[error(
        "iteration {i} of step `{step}` waits for {waiting} outcomes, more than its {in_flight} calls running"
    )]
    Waiting {
        i: usize,
        step: String,
        waiting: u64,
        in_flight: u64,
    },
    #[error("step `{step}` is to retry after attempt {attempts}, and it has {most} attempts")]
    Retry {
        step: String,
        attempts: u64,
        most: u64,
    },
    #[error("agent step `{step}` is in tier {tier}, not 1 or 2")]
    Tier { step: String, tier: u64 },
    #[error("agent step `{step}` has max_turns {max_turns}, not from 1 to {TURNS_MAX}")]
    MaxTurns { step: String, max_turns: u64 },
    #[error("agent step `{step}` is at turn {turn}, not from 1 to its max_turns {max_turns}")]
    Turn {
        step: String,
        turn: u64,
        max_turns: u64,
    },
    #[error(
        "agent step `{step}` has made {chats} model calls, not from 1 to the {most} its turns and attempts allow"
    )]
    Chats { step: String, chats: u64, most: u64 },
    #[error(
        "agent step `{step}` has {failures} failed turns, and it has {retry} attempts per turn"
    )]
    Failures {
        step: String,
        failures: u64,
        retry: u64,
    },
    #[error(
        "agent step `{step}` says its previous turn made {previous} tool calls, more than its {messages} messages"
    )]
    Previous {
        step: String,
        previous: u64,
        messages: usize,
    },
    #[error("`{field}` names {what} {key}, and the plan has {n} steps")]
    OutOfRange {
        field: &'static str,
        what: &'static str,
        key: u32,
        n: usize,
    },
    #[error("`{field}` lists {what} {key} out of order or twice")]
    OutOfOrder {
        field: &'static str,
        what: &'static str,
        key: u32,
    },
    #[error("step `{step}`'s conversation waits on a person, and the step is not waiting")]
    AsksNotWaiting { step: String },
    #[error("step `{step}` has {what} in progress, and is not running")]
    NotRunning { step: String, what: &'static str },
}

/// A new agent for `plan` and `inputs` with the progress `saved`, or what does not fit.
/// Iteration `i` of loop step `step` of `parent`, continuing from its saved progress if it
/// has any: a fresh agent of the loop's body (sharing the body's plan with its template).
fn restore_child(
    parent: &PlanAgent,
    step: u32,
    i: usize,
    inputs: Map<String, Value>,
    saved: Option<SavedAgent>,
) -> Result<Option<PlanAgent>, RestoreError> {
    let name = || parent.plan().steps[step as usize].name.clone();
    let Some(saved) = saved else {
        return Ok(None);
    };
    let Some(template) = parent.bodies.get(&step) else {
        return Err(RestoreError::NotLoopStep { step: name() });
    };
    restore_agent(template.fresh(Inputs::from(inputs)), saved)
        .map(Some)
        .map_err(|e| RestoreError::Iteration {
            i,
            step: name(),
            source: Box::new(e),
        })
}

/// Makes `agent`, fresh, continue from `saved`.
fn restore_agent(mut agent: PlanAgent, saved: SavedAgent) -> Result<PlanAgent, RestoreError> {
    let plan = agent.plan();
    let n = plan.steps.len();
    for (what, len) in [
        ("status", saved.status.len()),
        ("unsettled", saved.unsettled.len()),
    ] {
        if len != n {
            return Err(RestoreError::Entries { what, len, n });
        }
    }
    let mut status = Vec::with_capacity(n);
    let mut outputs = Vec::with_capacity(n);
    for (step, s) in plan.steps.iter().zip(saved.status) {
        let (s, output) = restore_status(step, s)?;
        status.push(s);
        outputs.push(output);
    }
    for (step, &left) in plan.steps.iter().zip(&saved.unsettled) {
        if left as usize > step.deps.len() {
            return Err(RestoreError::Unsettled {
                step: step.name.clone(),
                left,
                deps: step.deps.len(),
            });
        }
    }
    ascending("ready", "position", &saved.ready, n)?;
    if saved.in_flight > IN_FLIGHT_MAX {
        return Err(RestoreError::InFlight {
            in_flight: saved.in_flight,
        });
    }

    let loops = restore_loops(plan, &status, saved.loops)?;

    let keys: Vec<u32> = saved.iterations.iter().map(|it| it.step).collect();
    ascending("iterations", "step", &keys, n)?;
    let mut iterations = BTreeMap::new();
    for it in saved.iterations {
        let step = &plan.steps[it.step as usize];
        let Some(body) = &step.body else {
            return Err(RestoreError::NotLoopStep {
                step: step.name.clone(),
            });
        };
        running(&status, it.step, step, "iterations")?;
        let most = if body.kind == LoopKind::Use {
            1
        } else {
            body.max
        };
        let count = it.children.len() as u64;
        if count == 0 || count > most {
            return Err(RestoreError::IterationCount {
                step: step.name.clone(),
                count,
                most,
            });
        }
        let unended = it.children.iter().filter(|c| c.ended.is_none()).count() as u64;
        if it.running != unended {
            return Err(RestoreError::RunningCount {
                step: step.name.clone(),
                running: it.running,
                unended,
            });
        }
        let mut children = Vec::with_capacity(it.children.len());
        for (i, c) in it.children.into_iter().enumerate() {
            let child = restore_child(&agent, it.step, i, c.inputs, c.agent)?;
            if c.ended.is_some() && (c.waiting > 0 || !c.received.is_empty()) {
                return Err(RestoreError::EndedWaiting {
                    i,
                    step: step.name.clone(),
                });
            }
            // An ended iteration keeps no agent (a format 1 value's is checked, then dropped).
            let child = match (&c.ended, child) {
                (Some(_), _) => None,
                (None, Some(child)) => Some(Box::new(child)),
                (None, None) => {
                    return Err(RestoreError::RunningWithoutAgent {
                        i,
                        step: step.name.clone(),
                    });
                }
            };
            if let Some(child) = &child
                && c.waiting > child.in_flight
            {
                return Err(RestoreError::Waiting {
                    i,
                    step: step.name.clone(),
                    waiting: c.waiting,
                    in_flight: child.in_flight,
                });
            }
            children.push(Child {
                agent: child,
                ended: c.ended.map(|e| match e {
                    SavedEnded::Completed { outputs } => Ok(outputs),
                    SavedEnded::Failed { reason } => Err(IterationFailed::Failed { reason }),
                }),
                waiting: c.waiting,
                received: c
                    .received
                    .into_iter()
                    .map(|o| Observation {
                        step: o.step,
                        tool: o.tool,
                        attempt: o.attempt,
                        outcome: o.outcome,
                    })
                    .collect(),
            });
        }
        iterations.insert(
            it.step,
            Iterations {
                children,
                inputs: Arc::new(it.inputs),
                running: it.running,
            },
        );
    }

    let queued = saved
        .queued
        .into_iter()
        .map(|c| Queued {
            step: c.step,
            tool: c.tool,
            attempt: c.attempt,
            input: c.input,
            timeout_ms: c.timeout_ms,
            reads: c.reads,
        })
        .collect();

    agent.started = saved.started;
    agent.status = status;
    agent.outputs = outputs;
    agent.unsettled = saved.unsettled;
    agent.ready = saved.ready.into_iter().collect();
    agent.in_flight = saved.in_flight;
    agent.loops = loops;
    agent.iterations = iterations;
    agent.queued = queued;
    agent.stopping = saved.stopping;
    Ok(agent)
}

/// A step's status and output, refusing a retry the step has no attempts left for (its next
/// attempt would be past its last).
fn restore_status(
    step: &CompiledStep,
    s: SavedStatus,
) -> Result<(Status, Option<Packed>), RestoreError> {
    Ok(match s {
        SavedStatus::Pending => (Status::Pending, None),
        SavedStatus::Running => (Status::Running, None),
        SavedStatus::Retrying { attempts } => {
            retry_left(step, attempts)?;
            (Status::Retrying { attempts }, None)
        }
        SavedStatus::Backoff { attempts } if step.policy.is_some() => {
            retry_left(step, attempts)?;
            (Status::Backoff { attempts }, None)
        }
        SavedStatus::Backoff { attempts } => {
            return Err(RestoreError::Retry {
                step: step.name.clone(),
                attempts,
                most: 0,
            });
        }
        SavedStatus::Completed { output } => (Status::Completed, Some(output)),
        SavedStatus::Skipped => (Status::Skipped, None),
        SavedStatus::Failed => (Status::Failed, None),
        SavedStatus::Waiting { attempts, reason } => (Status::Waiting { attempts, reason }, None),
    })
}

/// Refuses a retry after `attempts` when the step has no attempts left.
fn retry_left(step: &CompiledStep, attempts: u64) -> Result<(), RestoreError> {
    let tiers = if step.fallback.is_some() { 2 } else { 1 };
    let most = step.retry.saturating_mul(tiers);
    if attempts >= most {
        return Err(RestoreError::Retry {
            step: step.name.clone(),
            attempts,
            most,
        });
    }
    Ok(())
}

/// An agent step's conversation, refusing counts its settings rule out: a tier other than the
/// step's own agent or its fallback, a turn past `max_turns`, more model calls or failed turns
/// than the step's attempts allow, or a previous turn with more tool calls than the
/// conversation holds. Within these bounds no later count can overflow.
/// The agent steps' conversations in progress, each for an agent step that runs, or that
/// waits on its model's questions.
fn restore_loops(
    plan: &CompiledPlan,
    status: &[Status],
    saved: Vec<SavedLoop>,
) -> Result<BTreeMap<u32, Loop>, RestoreError> {
    let n = plan.steps.len();
    let keys: Vec<u32> = saved.iter().map(|l| l.step).collect();
    ascending("loops", "step", &keys, n)?;
    let mut loops = BTreeMap::new();
    for l in saved {
        let step = &plan.steps[l.step as usize];
        let tools = [Some(&step.call), step.fallback.as_ref()];
        if step.body.is_some() || !tools.iter().flatten().any(|c| c.tool == AGENT_TOOL) {
            return Err(RestoreError::NotAgentStep {
                step: step.name.clone(),
            });
        }
        // A conversation exists while its step runs, or waits on its model's questions.
        if l.asks.is_empty() {
            running(status, l.step, step, "a conversation")?;
        } else if !matches!(status.get(l.step as usize), Some(Status::Waiting { .. })) {
            return Err(RestoreError::AsksNotWaiting {
                step: step.name.clone(),
            });
        }
        loops.insert(l.step, restore_loop(step, l)?);
    }
    Ok(loops)
}

fn restore_loop(step: &CompiledStep, l: SavedLoop) -> Result<Loop, RestoreError> {
    let name = &step.name;
    if !(1..=2).contains(&l.tier) {
        return Err(RestoreError::Tier {
            step: name.clone(),
            tier: l.tier,
        });
    }
    if !(1..=TURNS_MAX).contains(&l.max_turns) {
        return Err(RestoreError::MaxTurns {
            step: name.clone(),
            max_turns: l.max_turns,
        });
    }
    if !(1..=l.max_turns).contains(&l.turn) {
        return Err(RestoreError::Turn {
            step: name.clone(),
            turn: l.turn,
            max_turns: l.max_turns,
        });
    }
    // Each turn of each tier makes at most `retry` model calls.
    let chats_max = TURNS_MAX.saturating_mul(2).saturating_mul(step.retry);
    if !(1..=chats_max).contains(&l.chats) {
        return Err(RestoreError::Chats {
            step: name.clone(),
            chats: l.chats,
            most: chats_max,
        });
    }
    if l.failures >= step.retry {
        return Err(RestoreError::Failures {
            step: name.clone(),
            failures: l.failures,
            retry: step.retry,
        });
    }
    // Each of the previous turn's tool calls left a message: the bound keeps the next turn's
    // list of what it reads as long as the conversation at most.
    let previous = match usize::try_from(l.previous) {
        Ok(p) if p <= l.messages.len() => p,
        _ => {
            return Err(RestoreError::Previous {
                step: name.clone(),
                previous: l.previous,
                messages: l.messages.len(),
            });
        }
    };
    let asks = restore_asks(name, &l.asks, &l.results)?;
    Ok(Loop {
        model: l.model,
        tools: l.tools,
        schema: l.schema,
        max_turns: l.max_turns,
        messages: l.messages,
        turn: l.turn,
        chats: l.chats,
        failures: l.failures,
        results: l.results.into_iter().map(|r| (r.id, r.result)).collect(),
        previous,
        tier: l.tier,
        asks,
    })
}

/// A conversation's waiting questions: each names a call of its turn that has no result yet,
/// once.
fn restore_asks(
    name: &str,
    saved: &[(u64, String)],
    results: &[SavedResult],
) -> Result<Vec<(usize, String)>, RestoreError> {
    let mut asks: Vec<(usize, String)> = Vec::with_capacity(saved.len());
    for (k, question) in saved {
        let slot = usize::try_from(*k).ok().filter(|&k| {
            results.get(k).is_some_and(|r| r.result.is_none())
                && !asks.iter().any(|(seen, _)| *seen == k)
        });
        let Some(k) = slot else {
            return Err(RestoreError::Ask {
                step: name.to_owned(),
                index: *k,
            });
        };
        asks.push((k, question.clone()));
    }
    Ok(asks)
}

/// Refuses `keys` unless each is below `n` and they strictly ascend (as a map's or set's keys
/// are listed): a value out of range or repeated is not one this agent saved.
fn ascending(
    field: &'static str,
    what: &'static str,
    keys: &[u32],
    n: usize,
) -> Result<(), RestoreError> {
    let mut last: Option<u32> = None;
    for &k in keys {
        if k as usize >= n {
            return Err(RestoreError::OutOfRange {
                field,
                what,
                key: k,
                n,
            });
        }
        if last.is_some_and(|l| l >= k) {
            return Err(RestoreError::OutOfOrder {
                field,
                what,
                key: k,
            });
        }
        last = Some(k);
    }
    Ok(())
}

/// Refuses progress (`what`) for a step that is not running: a conversation or iterations
/// exist only while their step runs.
fn running(
    status: &[Status],
    idx: u32,
    step: &CompiledStep,
    what: &'static str,
) -> Result<(), RestoreError> {
    match status.get(idx as usize) {
        Some(Status::Running) => Ok(()),
        _ => Err(RestoreError::NotRunning {
            step: step.name.clone(),
            what,
        }),
    }
}
