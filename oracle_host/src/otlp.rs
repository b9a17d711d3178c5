//! OpenTelemetry traces of a run, re-emitted from its log (`oracle export RUN --otlp [URL]`):
//! one trace per run, a span per step attempt, per tool call and per model call, sent over
//! OTLP/HTTP (protobuf) with the official `opentelemetry`, `opentelemetry_sdk` and
//! `opentelemetry-otlp` crates, through the runtime's HTTP client.
//!
//! The log is the source of truth, so a trace can be sent again at any time and says exactly
//! what the log says. The trace id is derived from the run (its id and its first event's
//! hash), so the exports of a run before and after a resume are one trace. Every span carries
//! `oracle.run.id`, `oracle.seq` (the event that ended it) and `oracle.head` (that event's
//! hash), so a trace leads to `oracle log RUN --seq SEQ`. A log holds no wall clock: spans take
//! their instants from the times file beside it (`oracle_runtime::times`, advisory) when every
//! event was timed, and are otherwise laid out one millisecond per event, ending at the
//! export's time (order and nesting, not durations).
//!
//! What is absent: export never fails a run or this command for a collector's sake (an
//! unreachable collector drops the spans, counted in [`Exported::dropped`]); no gRPC.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, TraceId, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};
use oracle_core::{Event, Payload};
use serde_json::Value;

use crate::error::HostError;
use crate::home::Home;

/// Longest one batch of spans may take to reach the collector: after one batch is not taken
/// the rest are dropped unsent, so a collector that never answers delays an export by at most
/// about twice this (that batch, then the root span at shutdown).
pub const EXPORT_TIMEOUT_MS: u64 = 5_000;
/// Spans ended before the batch is flushed: keeps the SDK's queue (2048 by default) from
/// dropping spans of a long run.
pub const FLUSH_EVERY_SPANS: u64 = 1_024;
/// Largest collector reply read (an OTLP reply is a small protobuf message).
pub const REPLY_BYTES_MAX: u64 = 1 << 20;
/// The OTLP/HTTP path of traces, added to a `--otlp` base URL as to
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
const TRACES_PATH: &str = "/v1/traces";
/// The tool whose calls are model calls.
const CHAT: &str = oracle_runtime::domain::models::CHAT;

/// What an export sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exported {
    pub run: String,
    /// The trace id, 32 hex digits.
    pub trace_id: String,
    pub spans: u64,
    /// Spans the collector did not take (unreachable, refused, timed out).
    pub dropped: u64,
    /// Why spans were dropped, when some were.
    pub warning: Option<String>,
}

/// The trace id of a run: BLAKE3 of its id and its first event's hash, first 16 bytes.
pub fn trace_id(run: &str, first_hash: &str) -> TraceId {
    let mut h = blake3::Hasher::new_derive_key("oracle 2026 otlp trace id");
    h.update(run.as_bytes());
    h.update(&[0]);
    h.update(first_hash.as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&h.finalize().as_bytes()[..16]);
    TraceId::from_bytes(id)
}

/// Trace ids from the run, span ids at random (the SDK asks it for both).
#[derive(Debug)]
struct RunIds {
    trace: TraceId,
    spans: RandomIdGenerator,
}

impl IdGenerator for RunIds {
    fn new_trace_id(&self) -> TraceId {
        self.trace
    }
    fn new_span_id(&self) -> opentelemetry::trace::SpanId {
        self.spans.new_span_id()
    }
}

/// Sends the exporter's requests through `oracle_runtime::http` (the workspace's one client).
#[derive(Debug)]
struct Via;

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Via {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let url = request.uri().to_string();
        let headers: Vec<(&str, String)> = request
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?.to_owned())))
            .collect();
        let method = request.method().as_str().to_owned();
        let reply = oracle_runtime::http::exchange(
            &method,
            &url,
            &headers,
            Some(request.body()),
            EXPORT_TIMEOUT_MS,
            REPLY_BYTES_MAX,
        )?;
        let mut b = opentelemetry_http::Response::builder().status(reply.status);
        for (k, v) in &reply.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        Ok(b.body(opentelemetry_http::Bytes::from(reply.body))?)
    }
}

/// One span to send, read from the log.
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    name: String,
    start: u64,
    end: u64,
    /// The hash of the event at `end`.
    head: String,
    attributes: Vec<KeyValue>,
    error: Option<String>,
    /// For a step attempt: its tool call, a child span.
    child: Option<Box<Planned>>,
}

impl Home {
    /// Sends `run`'s trace to the OTLP/HTTP collector at `endpoint` (a base URL; `None`: the
    /// standard `OTEL_EXPORTER_OTLP_ENDPOINT`, else `http://localhost:4318`). Headers come
    /// from `OTEL_EXPORTER_OTLP_HEADERS`. Spans the collector does not take are counted, not
    /// an error.
    pub fn export_otlp(&self, run: &str, endpoint: Option<&str>) -> Result<Exported, HostError> {
        let dir = self.find(run)?;
        let mut events = Vec::new();
        oracle_runtime::reader::scan(&dir.paths.log, true, |e| {
            events.push(e);
            Ok(true)
        })?;
        let first = events
            .first()
            .map(|e| e.hash.to_string())
            .unwrap_or_default();
        let trace = trace_id(&dir.id, &first);
        let planned = plan_spans(&dir.id, &events);
        let spans = planned
            .iter()
            .map(|p| 1 + u64::from(p.child.is_some()))
            .sum::<u64>()
            + 1;
        let times = oracle_runtime::times::Times::read(&dir.paths.log);
        let (dropped, warning) = send(&dir.id, trace, &events, &times, &planned, endpoint)?;
        Ok(Exported {
            run: dir.id.clone(),
            trace_id: trace.to_string(),
            spans,
            dropped: dropped.min(spans),
            warning,
        })
    }
}

/// Attributes every span has: the run, and the event that ends the span (its seq and hash).
fn common(run: &str, end: u64, head: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("oracle.run.id", run.to_owned()),
        KeyValue::new("oracle.seq", end as i64),
        KeyValue::new("oracle.head", head.to_owned()),
    ]
}

/// The spans of a run's step attempts (each with its tool call), built from its events in log
/// order: taken whole by the export, and as each attempt ends by the live exporter
/// (`crate::otlp_live`).
#[derive(Debug, Default)]
pub(crate) struct SpanPlan {
    run: String,
    /// Attempts scheduled and not ended, by step and attempt.
    open: BTreeMap<(String, u64), Planned>,
    /// Attempts ended, in the order they ended.
    ended: Vec<Planned>,
}

impl Planned {
    /// Whether this attempt called its tool (a child span).
    pub(crate) fn has_child(&self) -> bool {
        self.child.is_some()
    }
}

impl SpanPlan {
    pub(crate) fn new(run: &str) -> SpanPlan {
        SpanPlan {
            run: run.to_owned(),
            ..SpanPlan::default()
        }
    }

    /// Takes the next event of the log.
    pub(crate) fn add(&mut self, e: &Event) {
        let Ok(p) = e.typed() else { return };
        let (seq, head) = (e.seq, e.hash.to_string());
        match &p {
            Payload::StepScheduled(s) => {
                let planned = Planned {
                    name: format!("step {}", s.step),
                    start: seq,
                    end: seq,
                    head,
                    attributes: vec![
                        KeyValue::new("oracle.step", s.step.clone()),
                        KeyValue::new("oracle.tool", s.tool.clone()),
                        KeyValue::new("oracle.attempt", s.attempt as i64),
                    ],
                    error: None,
                    child: None,
                };
                self.open.insert((s.step.clone(), s.attempt), planned);
            }
            Payload::ToolCalled(c) => {
                if let Some(o) = self.open.get_mut(&(c.step.clone(), c.attempt)) {
                    o.child = Some(Box::new(call_span(&c.tool, &c.input, seq, head)));
                }
            }
            Payload::ToolReturned(_) | Payload::ToolFailed(_) | Payload::CapabilityDenied(_) => {
                let (step, attempt) = match &p {
                    Payload::ToolReturned(r) => (r.step.clone(), r.attempt),
                    Payload::ToolFailed(f) => (f.step.clone(), f.attempt),
                    Payload::CapabilityDenied(d) => {
                        (d.step.clone(), last_attempt(&self.open, &d.step))
                    }
                    _ => return,
                };
                if let Some(mut o) = self.open.remove(&(step, attempt)) {
                    finish(&mut o, &p, seq, &head);
                    self.ended.push(o);
                }
            }
            _ => {}
        }
    }

    /// The attempts ended since the last call, with the attributes every span has.
    pub(crate) fn take_ended(&mut self) -> Vec<Planned> {
        let mut out = std::mem::take(&mut self.ended);
        for p in &mut out {
            with_common(&self.run, p);
        }
        out
    }

    /// The seq where the oldest attempt still open started.
    pub(crate) fn oldest_open(&self) -> Option<u64> {
        self.open.values().map(|p| p.start).min()
    }

    /// Every attempt: those ended, then those still open (ending where they started).
    pub(crate) fn into_all(mut self) -> Vec<Planned> {
        let mut out = self.take_ended();
        for mut p in std::mem::take(&mut self.open).into_values() {
            with_common(&self.run, &mut p);
            out.push(p);
        }
        out
    }
}

/// Adds the attributes every span has to `p` and its call.
fn with_common(run: &str, p: &mut Planned) {
    p.attributes.extend(common(run, p.end, &p.head));
    if let Some(c) = &mut p.child {
        c.attributes.extend(common(run, c.end, &c.head));
    }
}

/// The spans of the step attempts (each with its tool call) of a whole log.
fn plan_spans(run: &str, events: &[Event]) -> Vec<Planned> {
    let mut plan = SpanPlan::new(run);
    for e in events {
        plan.add(e);
    }
    plan.into_all()
}

/// The latest attempt of `step` still open (a denial names the step, not the attempt).
fn last_attempt(open: &BTreeMap<(String, u64), Planned>, step: &str) -> u64 {
    open.keys()
        .filter(|(s, _)| s == step)
        .map(|(_, a)| *a)
        .max()
        .unwrap_or(0)
}

/// A tool call's span; a model call's carries the GenAI request attributes.
fn call_span(tool: &str, input: &Value, seq: u64, head: String) -> Planned {
    let mut attributes = vec![KeyValue::new("oracle.tool", tool.to_owned())];
    let name = if tool == CHAT {
        let model = input.get("model").and_then(Value::as_str).unwrap_or("");
        attributes.push(KeyValue::new("gen_ai.operation.name", "chat"));
        attributes.push(KeyValue::new("gen_ai.request.model", model.to_owned()));
        format!("chat {model}")
    } else {
        format!("tool {tool}")
    };
    Planned {
        name,
        start: seq,
        end: seq,
        head,
        attributes,
        error: None,
        child: None,
    }
}

/// Ends an attempt (and its call) at the outcome event `p`, at `seq` with hash `head`.
fn finish(attempt: &mut Planned, p: &Payload, seq: u64, head: &str) {
    let (outcome, error, usage, model) = match p {
        Payload::ToolReturned(r) => {
            let n = |f: &str| r.output.pointer(f).and_then(Value::as_u64);
            let usage = n("/usage/prompt_tokens").zip(n("/usage/completion_tokens"));
            let model = r
                .output
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned);
            ("returned", None, usage, model)
        }
        Payload::ToolFailed(f) => {
            let usage = f.usage.map(|u| (u.prompt_tokens, u.completion_tokens));
            ("failed", Some(f.error.clone()), usage, None)
        }
        Payload::CapabilityDenied(d) => ("denied", Some(d.reason.clone()), None, None),
        _ => return,
    };
    attempt.end = seq;
    attempt.head = head.to_owned();
    attempt.error = error.clone();
    attempt
        .attributes
        .push(KeyValue::new("oracle.outcome", outcome));
    if let Some(call) = &mut attempt.child {
        call.end = seq;
        call.head = head.to_owned();
        call.error = error;
        if let Some((input, output)) = usage {
            call.attributes
                .push(KeyValue::new("gen_ai.usage.input_tokens", input as i64));
            call.attributes
                .push(KeyValue::new("gen_ai.usage.output_tokens", output as i64));
        }
        if let Some(m) = model {
            call.attributes
                .push(KeyValue::new("gen_ai.response.model", m));
        }
    }
}

/// The exporter: OTLP/HTTP protobuf to `endpoint` (with the traces path) or the standard
/// variables, through [`Via`].
///
/// `retry`: whether a refused batch is tried again after a wait (the SDK's recommended
/// policy); the live exporter says no, so an unreachable collector costs one attempt a batch.
pub(crate) fn exporter(
    endpoint: Option<&str>,
    retry: bool,
) -> Result<opentelemetry_otlp::SpanExporter, HostError> {
    let mut b = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(Via)
        .with_timeout(Duration::from_millis(EXPORT_TIMEOUT_MS));
    if !retry {
        b = b.with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled());
    }
    if let Some(base) = endpoint.filter(|e| !e.is_empty()) {
        let base = base.trim_end_matches('/');
        let url = if base.ends_with(TRACES_PATH) {
            base.to_owned()
        } else {
            format!("{base}{TRACES_PATH}")
        };
        b = b.with_endpoint(url);
    }
    b.build().map_err(|e| HostError::Given {
        flag: "--otlp",
        given: endpoint.unwrap_or("").to_owned(),
        why: e.to_string(),
    })
}

/// When event `seq` happened, for a span's ends: the times file's instant when every event of
/// the log was timed (so spans show real durations), else one millisecond per event with the
/// last one now (a log copied by a fork, or written before times were kept: order and
/// nesting, not durations). Either way the instants are a display: nothing is recorded.
fn span_clock<'a>(
    events: &[Event],
    times: &'a oracle_runtime::times::Times,
    last: u64,
) -> impl Fn(u64) -> SystemTime + 'a {
    let timed = !events.is_empty() && events.iter().all(|e| times.at(e.seq).is_some());
    let now = SystemTime::now();
    move |seq: u64| match times.at(seq).filter(|_| timed) {
        Some(ms) => SystemTime::UNIX_EPOCH + Duration::from_millis(ms),
        None => now - Duration::from_millis(last.saturating_sub(seq)),
    }
}

/// Builds and sends the spans; the spans dropped and why.
fn send(
    run: &str,
    trace: TraceId,
    events: &[Event],
    times: &oracle_runtime::times::Times,
    planned: &[Planned],
    endpoint: Option<&str>,
) -> Result<(u64, Option<String>), HostError> {
    let provider = SdkTracerProvider::builder()
        .with_id_generator(RunIds {
            trace,
            spans: RandomIdGenerator::default(),
        })
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("oracle")
                .build(),
        )
        .with_batch_exporter(exporter(endpoint, true)?)
        .build();
    let tracer = provider.tracer("oracle");
    let last = events.last().map_or(0, |e| e.seq);
    let at = span_clock(events, times, last);
    let mut root = tracer.build_with_context(
        tracer
            .span_builder(format!("run {run}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(at(0))
            .with_attributes(common(
                run,
                last,
                &events
                    .last()
                    .map(|e| e.hash.to_string())
                    .unwrap_or_default(),
            )),
        &Context::new(),
    );
    let root_cx = Context::new().with_remote_span_context(root.span_context().clone());
    let mut pending = 0u64;
    let mut dropped = 0u64;
    let mut warning = None;
    for p in planned {
        if warning.is_some() {
            // The collector did not take the last batch: drop the rest unsent.
            dropped += 1 + u64::from(p.child.is_some());
            continue;
        }
        pending += emit(&tracer, p, &root_cx, &at);
        if pending >= FLUSH_EVERY_SPANS {
            flush(&provider, pending, &mut dropped, &mut warning);
            pending = 0;
        }
    }
    root.end_with_timestamp(at(last));
    if warning.is_some() {
        dropped += pending + 1;
    } else {
        flush(&provider, pending + 1, &mut dropped, &mut warning);
    }
    let _ = provider.shutdown();
    Ok((dropped, warning))
}

/// Ends `p` (and its child) as spans under `parent`; how many.
pub(crate) fn emit(
    tracer: &opentelemetry_sdk::trace::SdkTracer,
    p: &Planned,
    parent: &Context,
    at: &impl Fn(u64) -> SystemTime,
) -> u64 {
    let mut span = start(tracer, p, parent, at);
    let mut n = 1;
    if let Some(c) = &p.child {
        let cx = Context::new().with_remote_span_context(span.span_context().clone());
        let mut child = start(tracer, c, &cx, at);
        child.end_with_timestamp(at(c.end));
        n += 1;
    }
    span.end_with_timestamp(at(p.end));
    n
}

fn start(
    tracer: &opentelemetry_sdk::trace::SdkTracer,
    p: &Planned,
    parent: &Context,
    at: &impl Fn(u64) -> SystemTime,
) -> opentelemetry_sdk::trace::Span {
    let mut span = tracer.build_with_context(
        tracer
            .span_builder(p.name.clone())
            .with_start_time(at(p.start))
            .with_attributes(p.attributes.clone()),
        parent,
    );
    if let Some(e) = &p.error {
        span.set_status(Status::error(e.clone()));
    }
    span
}

/// Sends the `pending` spans ended since the last flush; if the collector did not take them,
/// they are counted dropped.
fn flush(
    provider: &SdkTracerProvider,
    pending: u64,
    dropped: &mut u64,
    warning: &mut Option<String>,
) {
    if let Err(e) = provider.force_flush() {
        *dropped = dropped.saturating_add(pending);
        warning.get_or_insert_with(|| format!("the collector did not take the spans: {e}"));
    }
}
