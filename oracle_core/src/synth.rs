//! Synthetic logs of any size, for benchmarks, tests and fixtures. Deterministic in the seed.

use serde_json::{Map, json};

use crate::event::Event;
use crate::hash::{Hash, domain, hash_in};
use crate::log::{Recorder, RecordingError};
use crate::payload::*;
use crate::rng::SplitMix64;

/// What the generated run looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A plausible agent run: each step is scheduled, its capability checked, its tool called and
    /// answered, and its result written to the state (five events a step), ending with
    /// `run_finished`.
    Steps,
    /// After `run_started`, every event is a `state_changed` writing one key: the worst case for
    /// replay.
    Writes,
}

/// Parameters of a synthetic log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynthConfig {
    /// Exact number of events.
    pub events: u64,
    pub seed: u64,
    /// Distinct state keys written (key chosen at random among them).
    pub keys: u64,
    pub shape: Shape,
}

impl SynthConfig {
    pub fn steps(events: u64, seed: u64) -> SynthConfig {
        SynthConfig {
            events,
            seed,
            keys: 64,
            shape: Shape::Steps,
        }
    }
}

/// Generates the events of a synthetic log in order.
pub struct Synth {
    config: SynthConfig,
    rng: SplitMix64,
    recorder: Recorder,
    time: u64,
    last: u64,
}

impl Synth {
    pub fn new(config: SynthConfig) -> Synth {
        Synth {
            config,
            rng: SplitMix64::new(config.seed),
            recorder: Recorder::new(),
            time: 0,
            last: 0,
        }
    }

    fn next_payload(&mut self, seq: u64) -> (Vec<u64>, Payload) {
        let c = self.config;
        if seq == 0 {
            let mut inputs = Map::new();
            inputs.insert("corpus".into(), json!("fixtures/data"));
            inputs.insert("limit".into(), json!(c.events));
            let program_hash = hash_in(domain::VALUE, format!("synthetic-{}", c.seed).as_bytes());
            return (
                vec![],
                Payload::RunStarted(synthetic_start(program_hash, c.seed, inputs)),
            );
        }
        if seq + 1 == c.events && c.shape == Shape::Steps {
            return (
                vec![self.last],
                Payload::RunFinished(RunFinished {
                    status: RunStatus::Completed,
                    reason: String::new(),
                    by: None,
                }),
            );
        }
        let key = format!("k{:06}", self.rng.below(c.keys.max(1)));
        let n = self.rng.below(1_000_000);
        let phase = if c.shape == Shape::Writes {
            4
        } else {
            (seq - 1) % 5
        };
        let step = format!("step{}", (seq - 1) / 5);
        let parents = if seq == 1 { vec![0] } else { vec![self.last] };
        let payload = match phase {
            0 => Payload::StepScheduled(StepScheduled {
                step,
                tool: "text.count".into(),
                attempt: 1,
            }),
            1 => Payload::CapabilityAllowed(CapabilityAllowed {
                step,
                capability: format!("fs:read:fixtures/data/{key}.txt"),
                grant: "fs:read:fixtures/**".into(),
            }),
            2 => Payload::ToolCalled(ToolCalled {
                step,
                tool: "text.count".into(),
                tool_version: "1.0.0".into(),
                attempt: 1,
                input: json!({"path": format!("fixtures/data/{key}.txt"), "mode": "words"}),
            }),
            3 => Payload::ToolReturned(ToolReturned {
                step,
                tool: "text.count".into(),
                attempt: 1,
                output: json!({"words": n, "lines": n / 12, "digest": hash_in(domain::VALUE, key.as_bytes()).short()}),
            }),
            _ => {
                let mut set = Map::new();
                set.insert(key, json!({"words": n, "seq": seq}));
                Payload::StateChanged(StateChanged {
                    set,
                    delete: vec![],
                })
            }
        };
        (parents, payload)
    }
}

impl Iterator for Synth {
    type Item = Result<Event, RecordingError>;

    fn next(&mut self) -> Option<Self::Item> {
        let seq = self.recorder.head().next_seq;
        if seq >= self.config.events {
            return None;
        }
        let (parents, payload) = self.next_payload(seq);
        self.time += self.rng.below(3);
        let out = self.recorder.record(self.time, parents, payload);
        if let Ok(e) = &out {
            self.last = e.seq;
        }
        Some(out)
    }
}

/// All events of a synthetic log, in memory.
pub fn synth_events(config: SynthConfig) -> Result<Vec<Event>, RecordingError> {
    Synth::new(config).collect()
}

/// The hash of an empty state (handy for tests).
pub fn empty_state_hash() -> Hash {
    crate::state::State::new().hash()
}

/// The first event of a synthetic run.
fn synthetic_start(
    program_hash: Hash,
    seed: u64,
    inputs: Map<String, serde_json::Value>,
) -> RunStarted {
    RunStarted {
        format: None,
        program: "synthetic".into(),
        program_hash,
        seed,
        grants: vec!["fs:read:fixtures/**".into(), "kv:*:*".into()],
        inputs,
        budget: None,
        tools: None,
        memory: None,
        domains: None,
        key: None,
        parent: None,
    }
}
