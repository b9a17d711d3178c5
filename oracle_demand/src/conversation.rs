//! A conversation as a log: `oracle import --messages FILE` turns an OpenAI-style list of
//! messages (`[{"role": ..., "content": ...}, ...]`, or an object with such a `messages` list)
//! into the events of a completed run, sealed by `oracle_core`'s recorder, so it verifies and
//! `oracle demand` reads it like any run. Pure: the host reads the file and makes the run.
//!
//! The mapping (docs/FORMAT.md, "A conversation as a log"), message i in order:
//!
//! - `system`, `developer`, `user`: a `state_changed` setting `messages/<i>` to the message.
//! - `assistant`: a model call, as a run records one: a `tool_called` of `llm.chat` (step
//!   `turn-<i>`, input `{"messages": i}`: the i messages before it) and its `tool_returned`
//!   with the message as output; then a `tool_called` for each of its `tool_calls` (step
//!   `call-<id>`, the function's name as tool, input `{"arguments": ...}` as the text given).
//! - `tool`: the `tool_returned` of the call its `tool_call_id` names (same step), with
//!   `{"content": ...}`.
//!
//! Parents: every message's first event names the previous message's last event (the
//! conversation's order); a model call also names every `system` and `developer` message before
//! it (instructions every turn reads) and the messages since the previous assistant message (the
//! user's words and the tools' answers it answers); a reply names its call, a tool's answer its
//! call. That is what a message list states about what reads what; demand's `tools` source
//! pairs the calls and answers as it does in any run. (A call naming more than `PARENTS_MAX`
//! events is refused: `Record`.) The run starts with `run_started` (program `conversation`, its
//! hash the file's bytes' hash, no grants, input `messages`: the count) and ends with
//! `run_finished`. Times are message indexes. Only `role`, `content`, `name`, `tool_calls` and
//! `tool_call_id` are read; anything else in a message is left out.

use std::collections::BTreeMap;

use oracle_core::hash::{domain, hash_in};
use oracle_core::payload::{
    LOG_FORMAT, Payload, RunFinished, RunStarted, RunStatus, StateChanged, ToolCalled, ToolReturned,
};
use oracle_core::{Event, Recorder};
use serde_json::{Map, Value, json};

use crate::limits::{MESSAGES_FILE_BYTES_MAX, MESSAGES_MAX};

/// Why a file is not a conversation this import takes. Each names where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversationError {
    #[error("{bytes} bytes: a conversation is at most {limit}")]
    TooLarge { bytes: u64, limit: u64 },
    #[error("not JSON (line {line}, column {column})")]
    NotJson { line: u64, column: u64 },
    #[error("not a list of messages (nor an object with a `messages` list)")]
    NotAList,
    #[error("no messages")]
    Empty,
    #[error("{count} messages: at most {limit}")]
    TooMany { count: u64, limit: u64 },
    #[error("message {index}: {why}")]
    Message { index: u64, why: String },
    #[error(
        "message {index} answers tool call `{id}`, which no earlier assistant message made (or which was answered)"
    )]
    UnknownCall { index: u64, id: String },
    /// The recorder refused an event (a float, a value past the record's limits).
    #[error("message {index} cannot be recorded: {why}")]
    Record { index: u64, why: String },
}

impl ConversationError {
    /// The message it is about, if one.
    pub fn index(&self) -> Option<u64> {
        match self {
            ConversationError::Message { index, .. }
            | ConversationError::UnknownCall { index, .. }
            | ConversationError::Record { index, .. } => Some(*index),
            _ => None,
        }
    }
}

/// An open tool call: its `tool_called` and its function's name.
struct Call {
    seq: u64,
    tool: String,
}

/// The recorder and what the mapping remembers between messages.
struct Builder {
    recorder: Recorder,
    events: Vec<Event>,
    /// The previous message's last event.
    last: u64,
    calls: BTreeMap<String, Call>,
    /// The events of `system` and `developer` messages so far.
    instructions: Vec<u64>,
    /// The events of user messages and tool answers since the last assistant message.
    since: Vec<u64>,
    /// The message being mapped.
    index: u64,
}

impl Builder {
    fn record(&mut self, parents: Vec<u64>, payload: Payload) -> Result<u64, ConversationError> {
        let mut parents = parents;
        parents.sort_unstable();
        parents.dedup();
        let event = self
            .recorder
            .record(self.index, parents, payload)
            .map_err(|e| ConversationError::Record {
                index: self.index,
                why: e.to_string(),
            })?;
        let seq = event.seq;
        self.events.push(event);
        Ok(seq)
    }

    fn why(&self, why: &str) -> ConversationError {
        ConversationError::Message {
            index: self.index,
            why: why.to_owned(),
        }
    }

    /// One message's events.
    fn message(&mut self, m: &Value) -> Result<(), ConversationError> {
        let m = m.as_object().ok_or_else(|| self.why("not an object"))?;
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| self.why("no `role` text"))?;
        let content = m.get("content").cloned().unwrap_or(Value::Null);
        if !matches!(content, Value::Null | Value::String(_) | Value::Array(_)) {
            return Err(self.why("`content` is not text, a list of parts or null"));
        }
        let mut kept = Map::new();
        kept.insert("role".into(), json!(role));
        kept.insert("content".into(), content.clone());
        if let Some(name) = m.get("name") {
            let name = name
                .as_str()
                .ok_or_else(|| self.why("`name` is not text"))?;
            kept.insert("name".into(), json!(name));
        }
        match role {
            "system" | "developer" | "user" => {
                let mut set = Map::new();
                set.insert(format!("messages/{}", self.index), Value::Object(kept));
                let payload = Payload::StateChanged(StateChanged {
                    set,
                    delete: vec![],
                });
                self.last = self.record(vec![self.last], payload)?;
                if role == "user" {
                    self.since.push(self.last);
                } else {
                    self.instructions.push(self.last);
                }
            }
            "assistant" => self.assistant(m, kept)?,
            "tool" => self.tool(m, content)?,
            other => {
                return Err(self.why(&format!(
                    "role `{other}` is not system, developer, user, assistant or tool"
                )));
            }
        }
        Ok(())
    }

    fn assistant(
        &mut self,
        m: &Map<String, Value>,
        mut kept: Map<String, Value>,
    ) -> Result<(), ConversationError> {
        let step = format!("turn-{}", self.index);
        let mut read = vec![self.last];
        read.extend(self.instructions.iter().copied());
        read.append(&mut self.since);
        let called = self.record(
            read,
            Payload::ToolCalled(ToolCalled {
                step: step.clone(),
                tool: "llm.chat".into(),
                tool_version: "imported".into(),
                attempt: 1,
                input: json!({"messages": self.index}),
            }),
        )?;
        let calls = match m.get("tool_calls") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => list
                .iter()
                .map(|c| self.tool_call(c))
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err(self.why("`tool_calls` is not a list")),
        };
        if !calls.is_empty() {
            let shown: Vec<Value> = calls
                .iter()
                .map(|(id, name, args)| json!({"id": id, "function": {"name": name, "arguments": args}}))
                .collect();
            kept.insert("tool_calls".into(), Value::Array(shown));
        }
        let replied = self.record(
            vec![called],
            Payload::ToolReturned(ToolReturned {
                step,
                tool: "llm.chat".into(),
                attempt: 1,
                output: Value::Object(kept),
            }),
        )?;
        self.last = replied;
        for (id, name, args) in calls {
            if self.calls.contains_key(&id) {
                return Err(self.why(&format!("tool call `{id}` is made twice")));
            }
            let seq = self.record(
                vec![replied],
                Payload::ToolCalled(ToolCalled {
                    step: format!("call-{id}"),
                    tool: name.clone(),
                    tool_version: "imported".into(),
                    attempt: 1,
                    input: json!({"arguments": args}),
                }),
            )?;
            self.calls.insert(id, Call { seq, tool: name });
            self.last = seq;
        }
        Ok(())
    }

    /// A tool call of an assistant message: (id, function name, arguments as given).
    fn tool_call(&self, c: &Value) -> Result<(String, String, Value), ConversationError> {
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| self.why("a tool call without an `id`"))?;
        let f = c.get("function").unwrap_or(&Value::Null);
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| self.why("a tool call without a `function.name`"))?;
        let args = f.get("arguments").cloned().unwrap_or(Value::Null);
        Ok((id.to_owned(), name.to_owned(), args))
    }

    fn tool(&mut self, m: &Map<String, Value>, content: Value) -> Result<(), ConversationError> {
        let id = m
            .get("tool_call_id")
            .and_then(Value::as_str)
            .ok_or_else(|| self.why("a tool message without a `tool_call_id`"))?;
        let call = self
            .calls
            .remove(id)
            .ok_or_else(|| ConversationError::UnknownCall {
                index: self.index,
                id: id.to_owned(),
            })?;
        self.last = self.record(
            vec![self.last, call.seq],
            Payload::ToolReturned(ToolReturned {
                step: format!("call-{id}"),
                tool: call.tool,
                attempt: 1,
                output: json!({"content": content}),
            }),
        )?;
        self.since.push(self.last);
        Ok(())
    }
}

/// The messages of a conversation file: a JSON list, or an object's `messages` list, of at most
/// [`MESSAGES_MAX`] and at least one.
fn messages(bytes: &[u8]) -> Result<Vec<Value>, ConversationError> {
    let size = bytes.len() as u64;
    if size > MESSAGES_FILE_BYTES_MAX {
        return Err(ConversationError::TooLarge {
            bytes: size,
            limit: MESSAGES_FILE_BYTES_MAX,
        });
    }
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| ConversationError::NotJson {
        line: e.line() as u64,
        column: e.column() as u64,
    })?;
    let list = match doc {
        Value::Array(list) => list,
        Value::Object(mut o) => match o.remove("messages") {
            Some(Value::Array(list)) => list,
            _ => return Err(ConversationError::NotAList),
        },
        _ => return Err(ConversationError::NotAList),
    };
    let count = list.len() as u64;
    if count == 0 {
        return Err(ConversationError::Empty);
    }
    if count > MESSAGES_MAX {
        return Err(ConversationError::TooMany {
            count,
            limit: MESSAGES_MAX,
        });
    }
    Ok(list)
}

/// The events of the run a conversation file (`bytes`, JSON) becomes.
pub fn events(bytes: &[u8]) -> Result<Vec<Event>, ConversationError> {
    let list = messages(bytes)?;
    let count = list.len() as u64;
    let mut b = Builder {
        recorder: Recorder::new(),
        events: Vec::with_capacity(list.len() * 2 + 2),
        last: 0,
        calls: BTreeMap::new(),
        instructions: Vec::new(),
        since: Vec::new(),
        index: 0,
    };
    let mut inputs = Map::new();
    inputs.insert("messages".into(), json!(count));
    b.record(
        vec![],
        Payload::RunStarted(RunStarted {
            format: Some(LOG_FORMAT),
            program: "conversation".into(),
            program_hash: hash_in(domain::VALUE, bytes),
            seed: 0,
            grants: vec![],
            inputs,
            budget: None,
            tools: None,
            memory: None,
            domains: None,
            key: None,
            parent: None,
        }),
    )?;
    for (i, m) in list.iter().enumerate() {
        b.index = i as u64;
        b.message(m)?;
    }
    b.index = count;
    b.record(
        vec![b.last],
        Payload::RunFinished(RunFinished {
            status: RunStatus::Completed,
            reason: String::new(),
            by: None,
        }),
    )?;
    Ok(b.events)
}
