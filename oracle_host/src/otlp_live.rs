//! Live span export (`oracle run|resume --otlp`, `oracle serve --otlp`, `oracle worker
//! --otlp`): the spans of `crate::otlp` (same names, attributes and trace id as `oracle export
//! --otlp`) sent while runs go, derived from the records each log writer of the process
//! writes (`oracle_runtime::live::tap_appends`), so the log stays the source of truth.
//!
//! Nothing here can slow or fail a run: writers hand their records to a bounded queue without
//! waiting (a full queue drops the batch, counted); one thread of this module turns records
//! into spans and hands them to the SDK's batch processor, whose own bounded queue
//! ([`LIVE_SPANS_QUEUED_MAX`]) and export thread talk to the collector. A span the collector
//! does not take (unreachable, refusing, too slow) is counted dropped; [`LiveExport::finish`]
//! reports the counts, and the front end says them as a warning.
//!
//! Times: a span starts and ends when the records that start and end it reached the log's
//! file (as this thread saw them), so a live trace shows how long steps took, to the
//! precision of the writer's flushes. Spans of a run resumed by this process join its trace:
//! the records before the resume are read from the log (never sent again) to know which
//! attempts were open. A run's root span (`run RUN`, a span id derived from the trace) is sent
//! when its `run_finished` is written; until then the other spans name it as their parent.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, SdkTracer,
    SdkTracerProvider, SpanData, SpanExporter,
};
use oracle_core::{Event, Payload};
use oracle_runtime::live::Appended;

use crate::error::HostError;
use crate::otlp::{self, EXPORT_TIMEOUT_MS, SpanPlan};

/// Spans waiting for the collector in the SDK's queue: a few thousand steps of a fast run; a
/// collector further behind loses spans (counted), never holds up the run.
pub const LIVE_SPANS_QUEUED_MAX: usize = 4_096;
/// How long spans wait in the queue before a batch is sent: a trace shows up within about a
/// second, and a fast run's spans go in batches, not one request each.
pub const LIVE_EXPORT_DELAY_MS: u64 = 1_000;
/// How often the span thread looks for its stop flag when no records come.
const POLL_MS: u64 = 50;
/// Runs whose open attempts the span thread keeps at once (a server driving many runs): past
/// it the oldest-seen run is forgotten, and its later spans start from the log again.
pub const LIVE_RUNS_MAX: usize = 1_024;

/// What a live export sent, once finished.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveReport {
    /// Spans handed to the exporter.
    pub spans: u64,
    /// Spans the collector took.
    pub exported: u64,
    /// Spans lost: not taken by the collector, dropped from a full queue, or never made
    /// because a batch of records was dropped.
    pub dropped: u64,
    /// Batches of records not read while the collector was down, after the last span of
    /// their run this process made (their spans are not in `spans`).
    pub skipped_batches: u64,
    /// Why, when spans were dropped.
    pub warning: Option<String>,
}

/// After the collector refuses a batch, how long later batches are dropped without trying
/// (each try of an unreachable collector costs a connection attempt, and a black hole up to
/// the export timeout): the collector is tried again at most every 10 s.
pub const LIVE_COOLDOWN_MS: u64 = 10_000;

/// The export's counts, shared by the span thread and the exporter.
#[derive(Debug, Default)]
struct Tally {
    spans: AtomicU64,
    exported: AtomicU64,
    why: Mutex<Option<String>>,
    /// Until when batches are dropped untried (after a refusal).
    cooling: Mutex<Option<std::time::Instant>>,
    /// Batches of records of a run already traced that were not read while the collector was
    /// down (the spans they end are counted if a later batch of the run catches up).
    skipped: AtomicU64,
}

impl Tally {
    /// Whether batches are being dropped untried now.
    fn cooling_now(&self) -> bool {
        let cooling = *self.cooling.lock().unwrap_or_else(|p| p.into_inner());
        cooling.is_some_and(|until| std::time::Instant::now() < until)
    }

    fn failed(&self, why: String) {
        let mut w = self.why.lock().unwrap_or_else(|p| p.into_inner());
        w.get_or_insert(why);
    }
}

/// The OTLP exporter, counting what the collector took and why it refused.
#[derive(Debug)]
struct Counting {
    inner: opentelemetry_otlp::SpanExporter,
    tally: Arc<Tally>,
}

impl SpanExporter for Counting {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let now = std::time::Instant::now();
        let cooling = *self.tally.cooling.lock().unwrap_or_else(|p| p.into_inner());
        if cooling.is_some_and(|until| now < until) {
            return Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                "the collector refused a batch less than 10 s ago".into(),
            ));
        }
        let r = self.inner.export(batch).await;
        match &r {
            Ok(()) => {
                self.tally.exported.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                self.tally
                    .failed(format!("the collector did not take the spans: {e}"));
                let until = now + Duration::from_millis(LIVE_COOLDOWN_MS);
                *self.tally.cooling.lock().unwrap_or_else(|p| p.into_inner()) = Some(until);
            }
        }
        r
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// Span ids at random, except the root span of a run, whose ids are set just before it is
/// built (its trace id and the span id its children already named as their parent; the SDK
/// asks for each once, in an order of its own).
#[derive(Debug, Default)]
struct LiveIds {
    next_trace: Mutex<Option<TraceId>>,
    next_span: Mutex<Option<SpanId>>,
    random: RandomIdGenerator,
}

impl LiveIds {
    fn set_root(&self, trace: TraceId, span: SpanId) {
        *self.next_trace.lock().unwrap_or_else(|p| p.into_inner()) = Some(trace);
        *self.next_span.lock().unwrap_or_else(|p| p.into_inner()) = Some(span);
    }
}

impl IdGenerator for LiveIds {
    fn new_trace_id(&self) -> TraceId {
        let mut next = self.next_trace.lock().unwrap_or_else(|p| p.into_inner());
        next.take().unwrap_or_else(|| self.random.new_trace_id())
    }
    fn new_span_id(&self) -> SpanId {
        let mut next = self.next_span.lock().unwrap_or_else(|p| p.into_inner());
        next.take().unwrap_or_else(|| self.random.new_span_id())
    }
}

/// The root span id of a run's live trace: derived from the trace id, so every process that
/// drives the run names the same parent.
pub fn root_span_id(trace: TraceId) -> SpanId {
    let h = blake3::derive_key("oracle 2026 otlp live root span", &trace.to_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&h[..8]);
    SpanId::from_bytes(id)
}

/// A live export: its span thread, until [`LiveExport::finish`].
pub struct LiveExport {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    provider: SdkTracerProvider,
    tally: Arc<Tally>,
}

impl LiveExport {
    /// Starts exporting the spans of every run this process writes to `endpoint` (as for
    /// `oracle export --otlp`). `Ok(None)` when this process already exports.
    pub fn start(endpoint: Option<&str>) -> Result<Option<LiveExport>, HostError> {
        let tally = Arc::new(Tally::default());
        let exporter = Counting {
            inner: otlp::exporter(endpoint, false)?,
            tally: tally.clone(),
        };
        let Some(rx) = oracle_runtime::live::tap_appends() else {
            return Ok(None);
        };
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(LIVE_SPANS_QUEUED_MAX)
                    .with_scheduled_delay(Duration::from_millis(LIVE_EXPORT_DELAY_MS))
                    .build(),
            )
            .build();
        let ids = Arc::new(LiveIds::default());
        let provider = SdkTracerProvider::builder()
            .with_id_generator(SharedIds(ids.clone()))
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name("oracle")
                    .build(),
            )
            .with_span_processor(batch)
            .build();
        let probe = otlp::exporter(endpoint, false)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut spans = Spans {
            tracer: provider.tracer("oracle"),
            ids,
            runs: BTreeMap::new(),
            tally: tally.clone(),
        };
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("otlp-live".into())
            .spawn(move || {
                spans.probe(&probe);
                spans.serve(&rx, &flag)
            })
            .map_err(|e| HostError::Telemetry(format!("cannot start its thread: {e}")))?;
        Ok(Some(LiveExport {
            stop,
            thread: Some(thread),
            provider,
            tally,
        }))
    }

    /// Turns the records still queued into spans, sends what the collector takes (waiting at
    /// most about [`EXPORT_TIMEOUT_MS`] for it), and says what was sent and dropped.
    pub fn finish(mut self) -> LiveReport {
        self.stop.store(true, Ordering::SeqCst);
        oracle_runtime::live::nudge_appends();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let flushed = self
            .provider
            .shutdown_with_timeout(Duration::from_millis(EXPORT_TIMEOUT_MS));
        if let Err(e) = flushed {
            self.tally
                .failed(format!("the last spans were not sent in time: {e}"));
        }
        let spans = self.tally.spans.load(Ordering::Relaxed);
        let exported = self.tally.exported.load(Ordering::Relaxed).min(spans);
        let lost_batches = oracle_runtime::live::appends_dropped();
        let mut warning = self.tally.why.lock().map(|w| w.clone()).unwrap_or(None);
        if lost_batches > 0 {
            warning.get_or_insert_with(|| {
                format!("{lost_batches} batches of records were dropped before they became spans (the span thread fell behind)")
            });
        }
        let dropped = spans - exported + lost_batches;
        let skipped_batches = self.tally.skipped.load(Ordering::Relaxed);
        LiveReport {
            spans,
            exported,
            dropped,
            skipped_batches,
            warning: warning.filter(|_| dropped > 0 || skipped_batches > 0),
        }
    }
}

/// [`LiveIds`] as the provider holds it (the span thread keeps another handle).
#[derive(Debug)]
struct SharedIds(Arc<LiveIds>);

impl IdGenerator for SharedIds {
    fn new_trace_id(&self) -> TraceId {
        self.0.new_trace_id()
    }
    fn new_span_id(&self) -> SpanId {
        self.0.new_span_id()
    }
}

/// One run's live trace.
struct RunTrace {
    plan: SpanPlan,
    trace: TraceId,
    parent: Context,
    /// The next seq expected from the writer.
    next: u64,
    /// When records reached the file: the seq of a batch's first record and the time it was
    /// seen, from the oldest still needed (the oldest open attempt's start).
    times: BTreeMap<u64, SystemTime>,
    /// When this process first saw the run (the start of spans begun before it).
    since: SystemTime,
}

impl RunTrace {
    /// The time the record `seq` reached the file, as well as it is known.
    fn at(&self, seq: u64) -> SystemTime {
        self.times
            .range(..=seq)
            .next_back()
            .map_or(self.since, |(_, t)| *t)
    }
}

/// The span thread's state.
struct Spans {
    tracer: SdkTracer,
    ids: Arc<LiveIds>,
    runs: BTreeMap<String, RunTrace>,
    tally: Arc<Tally>,
}

impl Spans {
    /// Sends one empty export (a valid OTLP request with no spans) before any record is read:
    /// a collector that refuses it starts the cooldown at once, so a run whose collector is
    /// down makes no spans only to drop them (the work that was the overhead of an
    /// unreachable collector, BENCHMARKS.md "Live span export").
    fn probe(&self, exporter: &opentelemetry_otlp::SpanExporter) {
        if let Err(e) = poll_ready(exporter.export(Vec::new())) {
            self.tally
                .failed(format!("the collector did not take the spans: {e}"));
            let until = std::time::Instant::now() + Duration::from_millis(LIVE_COOLDOWN_MS);
            *self.tally.cooling.lock().unwrap_or_else(|p| p.into_inner()) = Some(until);
        }
    }

    fn serve(&mut self, rx: &Receiver<Appended>, stop: &AtomicBool) {
        loop {
            match rx.recv_timeout(Duration::from_millis(POLL_MS)) {
                Ok(batch) => self.take(&batch),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            // Told to stop (and nudged awake by `finish`): what is still queued is taken below.
            if stop.load(Ordering::SeqCst) {
                break;
            }
        }
        while let Ok(batch) = rx.try_recv() {
            self.take(&batch);
        }
    }

    /// Turns one batch of records into the spans it ends.
    fn take(&mut self, batch: &Appended) {
        if batch.records.is_empty() {
            // A nudge from `finish`: no records, only a wake.
            return;
        }
        let now = SystemTime::now();
        // The collector is down: reading the records would only make spans to drop. A later
        // batch of the run catches up from the log (counting the spans it skips); a run first
        // seen now gets its trace then, from its log.
        if self.tally.cooling_now() {
            self.tally.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let events = decode(&batch.records);
        let Some(first) = events.first().map(|e| e.seq) else {
            return;
        };
        if !self.runs.contains_key(&batch.run) || self.runs[&batch.run].next < first {
            // New to this process, or records were dropped: what came before is in the log.
            self.catch_up(batch, first, now);
        }
        let Some(rt) = self.runs.get_mut(&batch.run) else {
            return;
        };
        rt.times.insert(first, now);
        let mut finished = false;
        for e in &events {
            if e.seq < rt.next {
                continue;
            }
            rt.plan.add(e);
            rt.next = e.seq + 1;
            finished |= matches!(e.typed(), Ok(Payload::RunFinished(_)));
        }
        // A finished run's attempts that never ended (a step a person answered) are sent
        // too, as the export sends them.
        let ended = if finished {
            std::mem::take(&mut rt.plan).into_all()
        } else {
            rt.plan.take_ended()
        };
        let mut n = 0;
        for p in &ended {
            n += otlp::emit(&self.tracer, p, &rt.parent, &|s| rt.at(s));
        }
        // Keep the times from the batch that holds the oldest open attempt's start on.
        let oldest = rt.plan.oldest_open().unwrap_or(rt.next);
        if let Some(&keep) = rt.times.range(..=oldest).next_back().map(|(k, _)| k) {
            rt.times = rt.times.split_off(&keep);
        }
        self.tally.spans.fetch_add(n, Ordering::Relaxed);
        if finished {
            self.root(&batch.run, events.last());
        }
    }

    /// Reads `batch`'s log up to `first` (the records this process did not see written):
    /// attempts they open are kept open, spans they end are not sent (they were, or are the
    /// export's). A run new to this process gets its trace.
    fn catch_up(&mut self, batch: &Appended, first: u64, now: SystemTime) {
        if !self.runs.contains_key(&batch.run) {
            if self.runs.len() >= LIVE_RUNS_MAX
                && let Some(oldest) = self.runs.keys().next().cloned()
            {
                self.runs.remove(&oldest);
            }
            let Some(rt) = new_trace(&batch.run, &batch.log, now) else {
                return;
            };
            self.runs.insert(batch.run.clone(), rt);
        }
        let Some(rt) = self.runs.get_mut(&batch.run) else {
            return;
        };
        // A run this process traced already: what it skips here were its own spans, lost.
        let known = rt.next > 0;
        let from = rt.next;
        if known {
            // Only the records since the run's last batch, found through the index: a run
            // caught up after every cooldown must not cost a read of its whole log each time.
            if let Ok(mut log) = oracle_runtime::index::IndexedLog::open_with(&batch.log, false) {
                for seq in from..first.min(log.len()) {
                    let Ok(e) = log.read(seq) else { break };
                    rt.plan.add(&e);
                    rt.next = e.seq + 1;
                }
            }
        } else {
            let _ = oracle_runtime::reader::scan(&batch.log, true, |e| {
                if e.seq >= first {
                    return Ok(false);
                }
                rt.plan.add(&e);
                rt.next = e.seq + 1;
                Ok(true)
            });
        }
        let skipped = rt.plan.take_ended();
        if known {
            let n: u64 = skipped.iter().map(|p| 1 + u64::from(p.has_child())).sum();
            self.tally.spans.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Sends run `run`'s root span, from when this process first saw it to its last record.
    fn root(&mut self, run: &str, last: Option<&Event>) {
        let Some(rt) = self.runs.remove(run) else {
            return;
        };
        let (seq, head) = last.map_or((0, String::new()), |e| (e.seq, e.hash.to_string()));
        self.ids.set_root(rt.trace, root_span_id(rt.trace));
        let mut span = self.tracer.build_with_context(
            self.tracer
                .span_builder(format!("run {run}"))
                .with_start_time(rt.since)
                .with_attributes([
                    KeyValue::new("oracle.run.id", run.to_owned()),
                    KeyValue::new("oracle.seq", seq as i64),
                    KeyValue::new("oracle.head", head),
                ]),
            &Context::new(),
        );
        opentelemetry::trace::Span::end_with_timestamp(&mut span, rt.at(seq));
        self.tally.spans.fetch_add(1, Ordering::Relaxed);
    }
}

/// The trace of run `run` whose log is `log`, its first event's hash read from the log (or
/// the batch's own first record, which is in the file already).
fn new_trace(run: &str, log: &Path, now: SystemTime) -> Option<RunTrace> {
    let mut first_hash = None;
    oracle_runtime::reader::scan(log, true, |e| {
        first_hash = Some(e.hash.to_string());
        Ok(false)
    })
    .ok()?;
    let trace = otlp::trace_id(run, &first_hash?);
    let parent = SpanContext::new(
        trace,
        root_span_id(trace),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Some(RunTrace {
        plan: SpanPlan::new(run),
        trace,
        parent: Context::new().with_remote_span_context(parent),
        next: 0,
        times: BTreeMap::new(),
        since: now,
    })
}

/// The value of `f`, which the exporter's client finishes without waking anyone (its HTTP
/// exchange blocks inside the call): polled until ready, yielding between polls.
fn poll_ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// The events of a batch of whole records (one that does not decode ends the batch: the
/// catch-up from the log covers it next time).
fn decode(records: &[u8]) -> Vec<Event> {
    let mut scratch = Vec::new();
    records
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map_while(|line| oracle_core::record::decode(line, &mut scratch).ok())
        .collect()
}
