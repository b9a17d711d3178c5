//! `llm.chat`: one chat completion from an OpenAI-compatible endpoint, as a recorded oracle
//! answer. The plan names a model (`model: "fast"`); where that name points is bound per run
//! ([`Models`], `oracle run --model fast=URL`), never in hashed plan text. The call's input and
//! its reply are recorded, so replay and resume never call the endpoint again.
//!
//! The request sent is a function of the record: the recorded input, the binding's model id,
//! and, after a failed attempt of the same tier, the recorded errors of those attempts
//! ([`crate::tool::ToolContext::earlier_failures`]) fed back as user messages. Only failures
//! that were the reply's fault (errors starting with [`REPLY_FAULT`]) are fed back.
//!
//! A binding with `stream` (`oracle run --model-stream NAME`) asks for server-sent deltas
//! (`stream: true`, usage through `stream_options.include_usage`): each piece of content goes
//! live to the run's watchers ([`crate::live`]) and is never recorded; the pieces are put back
//! together into the completion the server would have sent whole, which is then read exactly
//! as a whole reply is, so the recorded output is the same bytes either way. A stream that ends
//! before its `[DONE]` fails the attempt, like any cut reply.
//!
//! Deliberately absent: floats in anything recorded (`temperature_pct` is an integer
//! percentage; a reply whose JSON has a float is refused), and the endpoint's URL and the API
//! key in any hashed byte.

use std::collections::BTreeMap;
use std::sync::Arc;

use oracle_core::payload::TokenUsage;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{any, count, decl, integer, needs_arg, object, string};
use crate::http::{self, HttpError};
use crate::schema::Schema;
use crate::tool::{Effect, NotAnOutput, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// Most messages one call may send (the plan's, before feedback).
pub const MESSAGES_MAX: u64 = 256;
/// Most `stop` sequences (the OpenAI limit).
pub const STOP_MAX: u64 = 4;
/// Most characters of an invalid reply quoted in its recorded failure (and fed back).
pub const REPLY_QUOTE_CHARS_MAX: usize = 2_000;
/// Most earlier failures fed back to the model in one request (the latest ones).
pub const FEEDBACK_MAX: usize = 8;
/// Every recorded failure that was the reply's fault starts with this; these are fed back.
pub const REPLY_FAULT: &str = "the reply ";

/// Where one model name of a plan points in a run. Kept in the run's unhashed `models.json`
/// for `oracle resume`; the key's value is never kept anywhere, only the variable's name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelBinding {
    /// The OpenAI-compatible base URL (`http://127.0.0.1:8080/v1`); requests go to
    /// `<url>/chat/completions`.
    pub url: String,
    /// The model id sent in each request (default: the plan's name for the model).
    pub model: String,
    /// The environment variable holding the API key, sent as `Authorization: Bearer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// Ask the endpoint to stream its reply (`--model-stream NAME`). Absent from a binding
    /// written without it, so older bindings (and their seals) read unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

/// The model bindings of a run, by the name plans use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Models {
    pub models: BTreeMap<String, ModelBinding>,
}

/// What a call's `tools` may name: every other registered tool's name, description and input
/// schema, as the model is shown them. Shared with the registry, which adds each tool
/// registered after `llm.chat` (the declared ones, `crate::declared`).
pub type Offers = Arc<std::sync::RwLock<BTreeMap<String, (String, Value)>>>;

/// `llm.chat`.
pub struct Chat {
    pub models: Arc<Models>,
    pub tools: Offers,
}

/// Most tools one call may offer the model.
pub const TOOLS_MAX: u64 = 64;

/// A tool's name as an OpenAI function name (`[A-Za-z0-9_-]`): `.` becomes `__`.
pub fn function_name(tool: &str) -> String {
    tool.replace('.', "__")
}

/// The tool an OpenAI function name stands for.
pub fn tool_name(function: &str) -> String {
    function.replace("__", ".")
}

impl Chat {
    /// The OpenAI `tools` array for the tools `input` names; an unknown name fails the call.
    fn declarations(&self, input: &Value) -> Result<Vec<Value>, ToolError> {
        let Some(names) = input.get("tools").and_then(Value::as_array) else {
            return Ok(Vec::new());
        };
        names
            .iter()
            .filter_map(Value::as_str)
            .map(|n| {
                let offers = self.tools.read().unwrap_or_else(|p| p.into_inner());
                let (description, schema) = offers
                    .get(n)
                    .ok_or_else(|| ToolError::Failed(format!("`tools`: there is no tool `{n}`")))?;
                Ok(json!({"type": "function", "function": {
                    "name": function_name(n),
                    "description": description,
                    "parameters": schema,
                }}))
            })
            .collect()
    }
}

impl Tool for Chat {
    fn decl(&self) -> ToolDecl {
        // A conversation may carry tool calls (an assistant's) and their results (`tool`).
        let call = object(
            &[("id", string()), ("name", string()), ("arguments", any())],
            &["id", "name", "arguments"],
        );
        let message = object(
            &[
                (
                    "role",
                    json!({"enum": ["system", "user", "assistant", "tool"]}),
                ),
                ("content", string()),
                ("tool_calls", json!({"type": "array", "items": call})),
                ("tool_call_id", string()),
            ],
            &["role", "content"],
        );
        decl(
            "llm.chat",
            "One chat completion from the model bound to `model` (`oracle run --model NAME=URL`). With `schema`, the reply must be JSON matching it; a reply that is not fails the attempt, and the next attempt tells the model why. Needs llm:chat:<model>. Recorded: never called again on replay or resume.",
            Effect::Impure,
            object(
                &[
                    (
                        "model",
                        json!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"}),
                    ),
                    (
                        "messages",
                        json!({"type": "array", "items": message, "minItems": 1, "maxItems": MESSAGES_MAX}),
                    ),
                    ("schema", json!({"type": "object"})),
                    (
                        "temperature_pct",
                        json!({"type": "integer", "minimum": 0, "maximum": 200}),
                    ),
                    (
                        "max_tokens",
                        json!({"type": "integer", "minimum": 1, "maximum": 1_000_000}),
                    ),
                    ("seed", integer()),
                    (
                        "stop",
                        json!({"type": "array", "items": {"type": "string"}, "maxItems": STOP_MAX}),
                    ),
                    (
                        "tools",
                        json!({"type": "array", "items": {"type": "string"}, "maxItems": TOOLS_MAX}),
                    ),
                ],
                &["model", "messages"],
            ),
            object(
                &[
                    ("content", string()),
                    ("parsed", any()),
                    ("finish_reason", string()),
                    (
                        "usage",
                        object(
                            &[("prompt_tokens", count()), ("completion_tokens", count())],
                            &["prompt_tokens", "completion_tokens"],
                        ),
                    ),
                    ("model", string()),
                    (
                        "tool_calls",
                        json!({"type": "array", "items": object(
                            &[("id", string()), ("name", string()), ("arguments", any())],
                            &["id", "name", "arguments"],
                        )}),
                    ),
                ],
                &["content", "finish_reason", "usage", "model"],
            ),
            needs_arg("llm", "chat", "model"),
        )
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let name = super::arg_str(input, "model")?;
        let binding = self.models.models.get(name).ok_or_else(|| {
            ToolError::Failed(format!(
                "model `{name}` is not bound in this run: pass --model {name}=URL (an OpenAI-compatible base URL)"
            ))
        })?;
        let key = match &binding.key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.is_empty() => Some(k),
                _ => {
                    return Err(ToolError::Failed(format!(
                        "the API key of model `{name}` is not set: environment variable {var} is empty or missing"
                    )));
                }
            },
        };
        let schema = match input.get("schema") {
            Some(s) => Some(Schema::compile(s).map_err(|e| {
                ToolError::Failed(format!("`schema` is not a valid JSON Schema: {e}"))
            })?),
            None => None,
        };
        let offered = self.declarations(input)?;
        let mut body = request_body(input, &binding.model, cx.earlier_failures);
        if !offered.is_empty() {
            body["tools"] = Value::Array(offered);
        }
        if binding.stream {
            body["stream"] = Value::Bool(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        let bytes = serde_json::to_vec(&body)
            .map_err(|e| ToolError::Failed(format!("the request cannot be encoded: {e}")))?;
        let url = format!("{}/chat/completions", binding.url.trim_end_matches('/'));
        let headers: Vec<(&str, String)> = key
            .as_ref()
            .map(|k| ("Authorization", format!("Bearer {k}")))
            .into_iter()
            .collect();
        let reply = if binding.stream {
            let streamed = streamed(&url, &headers, &bytes, name, cx);
            if let Some(run) = cx.run {
                crate::live::finish(run);
            }
            streamed?
        } else {
            http::post_json(&url, &headers, &bytes, cx.timeout_ms, cx.output_bytes_max)
                .map_err(|e| endpoint_error(name, e))?
        };
        if !(200..300).contains(&reply.status) {
            let retry = http::retryable(reply.status);
            if retry {
                // Wait before the step's next attempt; the wait is never recorded.
                let ms = http::backoff_ms(cx.attempt, reply.retry_after_ms).min(cx.timeout_ms);
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            return Err(ToolError::Failed(format!(
                "the endpoint of model `{name}` answered HTTP {}{}: {}",
                reply.status,
                if retry { " (retryable)" } else { "" },
                http::excerpt(&reply.body)
            )));
        }
        if !reply.content_type.contains("json") {
            return Err(ToolError::Failed(format!(
                "the endpoint of model `{name}` answered with content type `{}`, not JSON",
                reply.content_type
            )));
        }
        let may_call = input
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty());
        // From here a refusal is of a reply the server charged for: keep its tokens.
        let usage = reported_usage(&reply.body);
        let out = parse_completion(&reply.body, name, &binding.model, may_call)
            .map_err(|e| charged(e, usage))?;
        let mut output = out;
        if let Some(k) = &key
            && serde_json::to_string(&output).is_ok_and(|t| t.contains(k.as_str()))
        {
            return Err(charged(
                ToolError::Failed(format!(
                    "the endpoint of model `{name}` echoed its API key ({}); the reply is not recorded",
                    binding.key_env.as_deref().unwrap_or("")
                )),
                usage,
            ));
        }
        // The schema is for the answer: a reply that calls tools is not one yet.
        if let Some(schema) = schema
            .as_ref()
            .filter(|_| output.get("tool_calls").is_none())
        {
            let content = output["content"].as_str().unwrap_or("");
            let parsed = structured(content, schema).map_err(|e| charged(e, usage))?;
            output["parsed"] = parsed;
        }
        Ok(ToolOutput::of(output))
    }

    /// A person answers in the model's stead: with a `schema`, the answer is the structured
    /// reply itself (checked against the schema) and is recorded as if the model had returned
    /// it, `model: "person"`; without one, a string is the reply's text. A full output
    /// (`content`, `usage`…) is taken as it is.
    fn answer_reads_input(&self) -> bool {
        true
    }

    fn answer(&self, input: &Value, answer: Value) -> Result<Value, NotAnOutput> {
        if answer.get("content").is_some() && answer.get("usage").is_some() {
            return Ok(answer);
        }
        let (content, parsed) = match input.get("schema") {
            Some(source) => {
                let schema = Schema::compile(source).map_err(NotAnOutput::InvalidSchema)?;
                schema.check(&answer).map_err(NotAnOutput::SchemaMismatch)?;
                (answer.to_string(), Some(answer))
            }
            None => match answer {
                Value::String(s) => (s, None),
                other => {
                    return Err(NotAnOutput::NotText {
                        given: other.to_string(),
                    });
                }
            },
        };
        let mut out = json!({
            "content": content,
            "finish_reason": "person",
            "usage": {"prompt_tokens": 0, "completion_tokens": 0},
            "model": "person",
        });
        if let Some(p) = parsed {
            out["parsed"] = p;
        }
        Ok(out)
    }
}

/// A failed exchange as the call's error (a timeout and an oversized reply keep their kinds).
fn endpoint_error(name: &str, e: HttpError) -> ToolError {
    match e {
        HttpError::Timeout { timeout_ms } => ToolError::Timeout { timeout_ms },
        HttpError::TooLarge { limit } => ToolError::OutputTooLarge { limit },
        other => ToolError::Failed(format!("the endpoint of model `{name}`: {other}")),
    }
}

/// A streamed exchange: each content delta published live (when the call knows its run), the
/// events put back together ([`Assembly`]) into the reply the server would have sent whole.
/// A reply that is not a stream (an error status, a server that ignores `stream`) is returned
/// as it came.
fn streamed(
    url: &str,
    headers: &[(&str, String)],
    bytes: &[u8],
    name: &str,
    cx: &ToolContext<'_>,
) -> Result<http::Reply, ToolError> {
    let mut assembly = Assembly::default();
    let mut on_data = |data: &str| {
        if let Some(text) = assembly.add(data)
            && let Some(run) = cx.run
        {
            crate::live::publish(crate::live::Delta {
                run: run.to_owned(),
                step: cx.step.to_owned(),
                attempt: cx.attempt,
                text,
            });
        }
    };
    let mut reply = http::post_json_stream(
        url,
        headers,
        bytes,
        cx.timeout_ms,
        cx.output_bytes_max,
        &mut on_data,
    )
    .map_err(|e| endpoint_error(name, e))?;
    if reply.content_type != "text/event-stream" {
        return Ok(reply);
    }
    reply.body = assembly
        .completion()
        .map_err(|why| ToolError::Failed(format!("the endpoint of model `{name}`: {why}")))?;
    reply.content_type = "application/json".into();
    Ok(reply)
}

/// Why a streamed completion could not be put back together (its text is recorded in the
/// attempt's `tool_failed`).
#[derive(Debug, thiserror::Error)]
enum StreamRefused {
    #[error("a streamed event is not a JSON object: {0}")]
    NotJson(String),
    #[error("the stream was cut short (it ended before `[DONE]`)")]
    Cut,
    #[error("the stream cannot be put together: {0}")]
    Encode(serde_json::Error),
}

/// The events of a streamed completion, put back together: content and each tool call's
/// arguments concatenated in order, the last finish reason, model and usage seen.
#[derive(Default)]
struct Assembly {
    content: Option<String>,
    /// By the stream's `index`: id, function name, arguments text.
    calls: BTreeMap<u64, (String, String, String)>,
    finish_reason: Option<Value>,
    model: Option<Value>,
    usage: Option<Value>,
    done: bool,
    /// The first event that was not a JSON object (the stream is refused at its end).
    bad: Option<String>,
}

impl Assembly {
    /// Takes one event's data; returns the content it adds, if any.
    fn add(&mut self, data: &str) -> Option<String> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return None;
        }
        let chunk: Value = match serde_json::from_str(data) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                self.bad
                    .get_or_insert_with(|| http::excerpt(data.as_bytes()));
                return None;
            }
        };
        if let Some(m) = chunk.get("model").filter(|m| m.is_string()) {
            self.model = Some(m.clone());
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        let choice = chunk.pointer("/choices/0")?;
        if let Some(f) = choice.get("finish_reason").filter(|f| !f.is_null()) {
            self.finish_reason = Some(f.clone());
        }
        let delta = choice.get("delta")?;
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.add_call(call);
        }
        let text = delta.get("content").and_then(Value::as_str)?;
        self.content.get_or_insert_with(String::new).push_str(text);
        (!text.is_empty()).then(|| text.to_owned())
    }

    fn add_call(&mut self, call: &Value) {
        let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
        let entry = self.calls.entry(index).or_default();
        let piece = |p: &str| call.pointer(p).and_then(Value::as_str).unwrap_or("");
        entry.0.push_str(piece("/id"));
        entry.1.push_str(piece("/function/name"));
        entry.2.push_str(piece("/function/arguments"));
    }

    /// The completion body a whole reply would have had; a stream cut before `[DONE]`, or one
    /// with an event that was not JSON, is refused.
    fn completion(&self) -> Result<Vec<u8>, StreamRefused> {
        if let Some(bad) = &self.bad {
            return Err(StreamRefused::NotJson(bad.clone()));
        }
        if !self.done {
            return Err(StreamRefused::Cut);
        }
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .values()
                .map(|(id, name, arguments)| {
                    let mut c = json!({"type": "function", "function": {"name": name, "arguments": arguments}});
                    if !id.is_empty() {
                        c["id"] = Value::String(id.clone());
                    }
                    c
                })
                .collect();
            message["tool_calls"] = Value::Array(calls);
        }
        let mut body = json!({
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        });
        if let Some(m) = &self.model {
            body["model"] = m.clone();
        }
        if let Some(u) = &self.usage {
            body["usage"] = u.clone();
        }
        serde_json::to_vec(&body).map_err(StreamRefused::Encode)
    }
}

/// The chat-completions request for `input`: the plan's messages, then one user message per
/// earlier failure of this tier that was the reply's fault, then the options. Integers only in
/// the input; the temperature becomes a float here, on the wire, never in a hashed byte.
pub fn request_body(input: &Value, model: &str, earlier: &[String]) -> Value {
    let mut messages: Vec<Value> = input
        .get("messages")
        .and_then(Value::as_array)
        .map(|m| m.iter().map(wire_message).collect())
        .unwrap_or_default();
    let faults: Vec<&String> = earlier
        .iter()
        .filter(|e| e.starts_with(REPLY_FAULT))
        .collect();
    let skip = faults.len().saturating_sub(FEEDBACK_MAX);
    for error in faults.into_iter().skip(skip) {
        messages.push(json!({
            "role": "user",
            "content": format!("Your previous reply was rejected: {error}. Answer again, with only the corrected reply."),
        }));
    }
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_owned()));
    body.insert("messages".into(), Value::Array(messages));
    if let Some(t) = input.get("temperature_pct").and_then(Value::as_u64) {
        body.insert("temperature".into(), json!(t as f64 / 100.0));
    }
    for key in ["max_tokens", "seed", "stop"] {
        if let Some(v) = input.get(key) {
            body.insert(key.into(), v.clone());
        }
    }
    if let Some(schema) = input.get("schema") {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}),
        );
    }
    Value::Object(body)
}

/// A recorded message as the wire format has it: an assistant's tool calls become OpenAI
/// function calls (`.` in names as `__`, arguments as JSON text).
fn wire_message(m: &Value) -> Value {
    let Some(calls) = m.get("tool_calls").and_then(Value::as_array) else {
        return m.clone();
    };
    let mut out = m.clone();
    out["tool_calls"] = Value::Array(
        calls
            .iter()
            .map(|c| {
                json!({
                    "id": c["id"],
                    "type": "function",
                    "function": {
                        "name": function_name(c["name"].as_str().unwrap_or("")),
                        "arguments": c["arguments"].to_string(),
                    },
                })
            })
            .collect(),
    );
    out
}

/// The recorded output of a completion body: content, finish reason, usage, model. Anything
/// missing or of the wrong type is a clear failure naming the field.
fn parse_completion(
    body: &[u8],
    name: &str,
    model: &str,
    may_call: bool,
) -> Result<Value, ToolError> {
    let fail = |why: String| ToolError::Failed(format!("the endpoint of model `{name}`: {why}"));
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| fail(format!("the reply body is not JSON ({e})")))?;
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| fail("the reply has no `choices[0]`".into()))?;
    let message = choice
        .get("message")
        .ok_or_else(|| fail("the reply has no `choices[0].message`".into()))?;
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array)
        && !calls.is_empty()
    {
        let names: Vec<String> = calls
            .iter()
            .filter_map(|c| c.pointer("/function/name").and_then(Value::as_str))
            .map(tool_name)
            .collect();
        if !may_call {
            return Err(ToolError::Failed(format!(
                "{REPLY_FAULT}calls tools ({}), but this step gave the model no tools",
                names.join(", ")
            )));
        }
        for (i, c) in calls.iter().enumerate() {
            let function = c
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let text = c
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}");
            let arguments: Value = match serde_json::from_str(text) {
                Ok(v @ Value::Object(_)) if oracle_core::canon::check(&v).is_ok() => v,
                _ => {
                    return Err(ToolError::Failed(format!(
                        "{REPLY_FAULT}calls `{}` with arguments that are not a JSON object without floats: {}",
                        tool_name(function),
                        text.chars().take(REPLY_QUOTE_CHARS_MAX).collect::<String>()
                    )));
                }
            };
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("call-{}", i + 1), str::to_owned);
            tool_calls.push(json!({"id": id, "name": tool_name(function), "arguments": arguments}));
        }
    }
    let content = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(_) => return Err(fail("`choices[0].message.content` is not a string".into())),
    };
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    let tokens = |field: &str| -> Result<u64, ToolError> {
        match v.get("usage").and_then(|u| u.get(field)) {
            None | Some(Value::Null) => Ok(0),
            Some(n) => n
                .as_u64()
                .ok_or_else(|| fail(format!("`usage.{field}` is not a whole number"))),
        }
    };
    let usage = json!({
        "prompt_tokens": tokens("prompt_tokens")?,
        "completion_tokens": tokens("completion_tokens")?,
    });
    let reported = v
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or(model);
    let mut out = json!({
        "content": content,
        "finish_reason": finish_reason,
        "usage": usage,
        "model": reported,
    });
    if !tool_calls.is_empty() {
        out["tool_calls"] = Value::Array(tool_calls);
    }
    Ok(out)
}

/// The usage a completion body reports, when it is JSON and has a `usage` object (missing
/// counts are 0, as in a recorded output).
fn reported_usage(body: &[u8]) -> Option<TokenUsage> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let u = v.get("usage").filter(|u| u.is_object())?;
    let n = |f: &str| u.get(f).and_then(Value::as_u64).unwrap_or(0);
    Some(TokenUsage {
        prompt_tokens: n("prompt_tokens"),
        completion_tokens: n("completion_tokens"),
    })
}

/// `e` as a rejection that keeps the tokens the server reported for the refused reply.
fn charged(e: ToolError, usage: Option<TokenUsage>) -> ToolError {
    match (e, usage) {
        (ToolError::Failed(error), Some(usage)) => ToolError::Rejected { error, usage },
        (e, _) => e,
    }
}

/// The content parsed as JSON and checked against the step's schema. Each failure is the
/// reply's fault, quotes the reply, and is fed back on the next attempt.
fn structured(content: &str, schema: &Schema) -> Result<Value, ToolError> {
    let quote = || {
        let mut q: String = content.chars().take(REPLY_QUOTE_CHARS_MAX).collect();
        if content.chars().count() > REPLY_QUOTE_CHARS_MAX {
            q.push('…');
        }
        q
    };
    let text = strip_fence(content);
    let parsed: Value = serde_json::from_str(text).map_err(|e| {
        ToolError::Failed(format!(
            "{REPLY_FAULT}is not JSON ({e}); it was: {}",
            quote()
        ))
    })?;
    if let Err(e) = oracle_core::canon::check(&parsed) {
        return Err(ToolError::Failed(format!(
            "{REPLY_FAULT}cannot be recorded ({e}); it was: {}",
            quote()
        )));
    }
    if let Err(e) = schema.check(&parsed) {
        return Err(ToolError::Failed(format!(
            "{REPLY_FAULT}does not match the schema ({e}); it was: {}",
            quote()
        )));
    }
    Ok(parsed)
}

/// JSON inside a Markdown code fence (```json … ```), as many models write it: the inside.
fn strip_fence(content: &str) -> &str {
    let t = content.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    rest.strip_suffix("```").unwrap_or(rest).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feedback_is_the_reply_faults_only_and_bounded() {
        let input = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature_pct": 30});
        let earlier: Vec<String> = (0..10)
            .map(|i| format!("{REPLY_FAULT}is not JSON ({i})"))
            .chain(["the endpoint of model `m` answered HTTP 500".to_owned()])
            .collect();
        let body = request_body(&input, "id", &earlier);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 1 + FEEDBACK_MAX);
        assert!(messages[1]["content"].as_str().unwrap().contains("(2)"));
        assert_eq!(body["model"], "id");
        assert_eq!(body["temperature"], json!(0.3));
    }

    #[test]
    fn fenced_json_is_unwrapped() {
        assert_eq!(strip_fence("```json\n{\"a\":1}\n```"), "{\"a\":1}");
        assert_eq!(strip_fence(" {\"a\":1} "), "{\"a\":1}");
    }

    #[test]
    fn completions_missing_fields_fail_naming_them() {
        let e = parse_completion(b"{}", "m", "id", false).unwrap_err();
        assert!(e.to_string().contains("choices[0]"), "{e}");
        let e = parse_completion(b"not json", "m", "id", false).unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
        let ok = parse_completion(
            br#"{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}"#,
            "m",
            "id",
            false,
        )
        .unwrap();
        assert_eq!(ok["usage"]["prompt_tokens"], 0);
        assert_eq!(ok["model"], "id");
    }
}
