//! Prometheus metrics of a home's runs, derived from their logs (the log is the source of
//! truth): runs by status, step attempts by outcome, tool calls by tool and outcome, model
//! calls and tokens by model binding. Encoded with the `prometheus-client` crate in the
//! OpenMetrics text format, which Prometheus scrapes (`GET /metrics` on `oracle serve`).
//!
//! Every number is a count of events in the logs, so a scrape says exactly what
//! `oracle log RUN --json` would let anyone count; a run's tally is kept with the length of the
//! log it was read from and read again only when the log grew. What is absent: no clock, no
//! process-wide registry (a [`Metrics`] is a value its owner keeps), nothing hashed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use oracle_core::Payload;
use oracle_runtime::paths::LOG_FILE;
use oracle_runtime::session::RunInfo;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::error::HostError;

/// The content type of [`Metrics::scrape`]'s text (OpenMetrics 1.0, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Distinct label values kept per metric family (tool names and model bindings come from
/// plans): past it the rest are summed under `other`, so a home of many odd plans cannot make
/// a scrape unbounded.
pub const LABEL_VALUES_MAX: usize = 512;

/// The tool whose calls are model calls.
const CHAT: &str = oracle_runtime::domain::models::CHAT;

/// What one run's log holds, counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Step attempts by outcome: `returned`, `failed`, `denied`.
    pub attempts: BTreeMap<String, u64>,
    /// Tool calls by (tool, outcome `returned` or `failed`).
    pub tools: BTreeMap<(String, String), u64>,
    /// `llm.chat` calls (`tool_called`) by model binding.
    pub model_calls: BTreeMap<String, u64>,
    /// Tokens by (model binding, `input` or `output`), rejected replies' included.
    pub tokens: BTreeMap<(String, String), u64>,
    /// How late each timer fired after its due instant (`timer_fired`'s `fired_ms - due_ms`;
    /// a timer woken early by hand counts as 0).
    pub timer_lag: LagCounts,
}

/// Upper bounds of the timer-lag buckets, in milliseconds: a wheel that polls every 200 ms
/// fires within the first few; the later ones show a server that was down or behind.
pub const TIMER_LAG_BUCKETS_MS: [u64; 10] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 60_000, 600_000,
];

/// Timer lags counted into [`TIMER_LAG_BUCKETS_MS`] (the last count is past the last bound),
/// with their count and sum, in whole milliseconds: integers, so tallies merge exactly.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LagCounts {
    pub buckets: [u64; TIMER_LAG_BUCKETS_MS.len() + 1],
    pub count: u64,
    pub sum_ms: u64,
}

impl LagCounts {
    /// Counts one lag.
    pub fn observe(&mut self, lag_ms: u64) {
        let i = TIMER_LAG_BUCKETS_MS
            .iter()
            .position(|b| lag_ms <= *b)
            .unwrap_or(TIMER_LAG_BUCKETS_MS.len());
        self.buckets[i] = self.buckets[i].saturating_add(1);
        self.count = self.count.saturating_add(1);
        self.sum_ms = self.sum_ms.saturating_add(lag_ms);
    }

    fn merge(&mut self, other: &LagCounts) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a = a.saturating_add(b);
        }
        self.count = self.count.saturating_add(other.count);
        self.sum_ms = self.sum_ms.saturating_add(other.sum_ms);
    }
}

/// [`LagCounts`] as a Prometheus histogram in seconds (the crate's own histogram only takes
/// observations one by one; these were counted from logs).
#[derive(Debug)]
struct LagHistogram(LagCounts);

impl prometheus_client::encoding::EncodeMetric for LagHistogram {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        // Display only (never hashed): Prometheus's unit is the float second.
        let seconds = |ms: u64| ms as f64 / 1000.0;
        let bounds = TIMER_LAG_BUCKETS_MS
            .iter()
            .map(|b| seconds(*b))
            .chain(std::iter::once(f64::INFINITY));
        let buckets: Vec<(f64, u64)> = bounds.zip(self.0.buckets).collect();
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            seconds(self.0.sum_ms),
            self.0.count,
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

fn bump<K: Ord>(map: &mut BTreeMap<K, u64>, key: K, by: u64) {
    let n = map.entry(key).or_default();
    *n = n.saturating_add(by);
}

impl Tally {
    /// Counts the events of the log at `log` (a torn tail is left out).
    pub fn of_log(log: &Path) -> Result<Tally, oracle_runtime::error::StoreError> {
        Tally::of_log_upto(log, None)
    }

    /// Counts the events of the log at `log` up to event `upto` (all when `None`).
    pub fn of_log_upto(
        log: &Path,
        upto: Option<u64>,
    ) -> Result<Tally, oracle_runtime::error::StoreError> {
        let mut t = Tally::default();
        // The model binding of each (step, attempt) of `llm.chat`, for its outcome's tokens.
        let mut models: BTreeMap<(String, u64), String> = BTreeMap::new();
        oracle_runtime::reader::scan(log, true, |e| {
            if upto.is_some_and(|u| e.seq > u) {
                return Ok(false);
            }
            if let Ok(p) = e.typed() {
                t.add(&p, &mut models);
            }
            Ok(true)
        })?;
        Ok(t)
    }

    /// Counts one event; `models` maps each `llm.chat` (step, attempt) to its binding.
    pub(crate) fn add(&mut self, p: &Payload, models: &mut BTreeMap<(String, u64), String>) {
        let model_of = |step: &str, attempt: u64, m: &BTreeMap<(String, u64), String>| {
            m.get(&(step.to_owned(), attempt)).cloned()
        };
        match p {
            Payload::ToolCalled(c) if c.tool == CHAT => {
                let model = c.input.get("model").and_then(Value::as_str).unwrap_or("");
                bump(&mut self.model_calls, model.to_owned(), 1);
                models.insert((c.step.clone(), c.attempt), model.to_owned());
            }
            Payload::ToolReturned(r) => {
                self.outcome(&r.tool, "returned");
                if let Some(m) = model_of(&r.step, r.attempt, models).filter(|_| r.tool == CHAT) {
                    let n = |f: &str| r.output.pointer(f).and_then(Value::as_u64).unwrap_or(0);
                    self.tokens_of(m, n("/usage/prompt_tokens"), n("/usage/completion_tokens"));
                }
            }
            Payload::ToolFailed(f) => {
                self.outcome(&f.tool, "failed");
                if let (Some(m), Some(u)) = (model_of(&f.step, f.attempt, models), f.usage) {
                    self.tokens_of(m, u.prompt_tokens, u.completion_tokens);
                }
            }
            Payload::CapabilityDenied(_) => bump(&mut self.attempts, "denied".into(), 1),
            Payload::TimerFired(f) => self.timer_lag.observe(f.fired_ms.saturating_sub(f.due_ms)),
            _ => {}
        }
    }

    fn outcome(&mut self, tool: &str, outcome: &str) {
        bump(&mut self.attempts, outcome.to_owned(), 1);
        bump(&mut self.tools, (tool.to_owned(), outcome.to_owned()), 1);
    }

    fn tokens_of(&mut self, model: String, input: u64, output: u64) {
        bump(&mut self.tokens, (model.clone(), "input".into()), input);
        bump(&mut self.tokens, (model, "output".into()), output);
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Tally) {
        for (k, n) in &other.attempts {
            bump(&mut self.attempts, k.clone(), *n);
        }
        for (k, n) in &other.tools {
            bump(&mut self.tools, k.clone(), *n);
        }
        for (k, n) in &other.model_calls {
            bump(&mut self.model_calls, k.clone(), *n);
        }
        for (k, n) in &other.tokens {
            bump(&mut self.tokens, k.clone(), *n);
        }
        self.timer_lag.merge(&other.timer_lag);
    }
}

/// The tallies of a home's runs, each kept with the log length it was read at.
#[derive(Default)]
pub struct Metrics {
    cache: Mutex<BTreeMap<String, (u64, Tally)>>,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// The metrics of `runs` (as the caller lists `home`'s runs: `oracle serve` lists only
    /// those a request could name), as OpenMetrics text ([`CONTENT_TYPE`]).
    pub fn scrape(&self, home: &Path, runs: &[RunInfo]) -> Result<String, HostError> {
        let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
        let mut total = Tally::default();
        let mut fresh = BTreeMap::new();
        for info in runs {
            bump(&mut statuses, info.status.clone(), 1);
            if matches!(info.status.as_str(), "damaged" | "submitted" | "queued") {
                continue;
            }
            let log = home.join("runs").join(&info.id).join(LOG_FILE);
            let len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
            let kept = self
                .lock()
                .get(&info.id)
                .filter(|(l, _)| *l == len)
                .cloned();
            let tally = match kept {
                Some((_, t)) => t,
                None => Tally::of_log(&log).unwrap_or_default(),
            };
            total.merge(&tally);
            fresh.insert(info.id.clone(), (len, tally));
        }
        // Keep only runs that still exist.
        *self.lock() = fresh;
        render(&statuses, &total, &Extra::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (u64, Tally)>> {
        // A panic while holding the lock leaves a cache that is at worst stale: use it.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Gauges and counters a process adds of its own (a store's worker).
#[derive(Clone, Debug, Default)]
pub struct Extra {
    /// Runs waiting to be claimed.
    pub queue_depth: Option<u64>,
    /// Runs this worker claimed from a holder whose lease expired.
    pub takeovers: Option<u64>,
    /// Runs this worker claimed, by the state they were claimed from.
    pub claims: BTreeMap<String, u64>,
}

/// A family of metrics `F` set from `values`, at most [`LABEL_VALUES_MAX`] label sets (the
/// rest summed under `other`).
fn family<F>(
    registry: &mut Registry,
    metric: &str,
    help: &str,
    values: impl Iterator<Item = (Vec<(&'static str, String)>, u64)>,
    set: impl Fn(&F, u64),
) where
    F: prometheus_client::metrics::TypedMetric
        + prometheus_client::encoding::EncodeMetric
        + Default
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let fam = Family::<Vec<(&'static str, String)>, F>::default();
    let mut kept: BTreeMap<Vec<(&'static str, String)>, u64> = BTreeMap::new();
    for (labels, n) in values {
        let key = if kept.len() < LABEL_VALUES_MAX || kept.contains_key(&labels) {
            labels
        } else {
            labels
                .into_iter()
                .map(|(k, _)| (k, "other".into()))
                .collect()
        };
        bump(&mut kept, key, n);
    }
    for (labels, n) in kept {
        set(&fam.get_or_create(&labels), n);
    }
    registry.register(metric, help, fam);
}

fn counters(
    registry: &mut Registry,
    metric: &str,
    help: &str,
    values: impl Iterator<Item = (Vec<(&'static str, String)>, u64)>,
) {
    family(registry, metric, help, values, |c: &Counter<u64>, n| {
        c.inc_by(n);
    });
}

fn gauges(
    registry: &mut Registry,
    metric: &str,
    help: &str,
    values: impl Iterator<Item = (Vec<(&'static str, String)>, u64)>,
) {
    family(registry, metric, help, values, |g: &Gauge<i64>, n| {
        g.set(i64::try_from(n).unwrap_or(i64::MAX));
    });
}

/// The OpenMetrics text of these counts.
pub fn render(
    statuses: &BTreeMap<String, u64>,
    t: &Tally,
    extra: &Extra,
) -> Result<String, HostError> {
    let mut r = Registry::default();
    let status = statuses
        .iter()
        .map(|(s, n)| (vec![("status", s.clone())], *n));
    gauges(&mut r, "oracle_runs", "Runs by status", status);
    let attempts = t
        .attempts
        .iter()
        .map(|(o, n)| (vec![("outcome", o.clone())], *n));
    counters(
        &mut r,
        "oracle_step_attempts",
        "Step attempts by outcome (tool_returned, tool_failed, capability_denied events)",
        attempts,
    );
    let tools = t
        .tools
        .iter()
        .map(|((tool, o), n)| (vec![("tool", tool.clone()), ("outcome", o.clone())], *n));
    counters(
        &mut r,
        "oracle_tool_calls",
        "Tool call outcomes by tool",
        tools,
    );
    let calls = t
        .model_calls
        .iter()
        .map(|(m, n)| (vec![("model", m.clone())], *n));
    counters(
        &mut r,
        "oracle_model_calls",
        "llm.chat calls by model binding",
        calls,
    );
    let tokens = t
        .tokens
        .iter()
        .map(|((m, ty), n)| (vec![("model", m.clone()), ("type", ty.clone())], *n));
    counters(
        &mut r,
        "oracle_model_tokens",
        "Tokens by model binding and type (input, output), rejected replies included",
        tokens,
    );
    r.register(
        "oracle_timer_lag_seconds",
        "How late each timer fired after its due instant (timer_fired events)",
        LagHistogram(t.timer_lag.clone()),
    );
    extras(&mut r, extra);
    let mut out = String::new();
    encode(&mut out, &r).map_err(|e| HostError::Metrics(format!("not encoded: {e}")))?;
    Ok(out)
}

fn extras(r: &mut Registry, extra: &Extra) {
    if let Some(q) = extra.queue_depth {
        let v = std::iter::once((Vec::new(), q));
        gauges(
            r,
            "oracle_store_queue_depth",
            "Runs in the store waiting for a worker",
            v,
        );
    }
    if let Some(n) = extra.takeovers {
        let v = std::iter::once((Vec::new(), n));
        counters(
            r,
            "oracle_worker_lease_takeovers",
            "Runs this worker claimed after their holder's lease expired",
            v,
        );
    }
    if !extra.claims.is_empty() {
        let v = extra
            .claims
            .iter()
            .map(|(f, n)| (vec![("from", f.clone())], *n));
        counters(
            r,
            "oracle_worker_claims",
            "Runs this worker claimed, by the state they were claimed from",
            v,
        );
    }
}

/// What a store's worker counts of its own work, for `oracle worker --metrics`: its claims by
/// the state they were taken from, its lease takeovers, and how long each signal it carried
/// out had waited in the store (the database's clock).
pub struct WorkerMetrics {
    claims: Mutex<BTreeMap<String, u64>>,
    takeovers: std::sync::atomic::AtomicU64,
    latency: prometheus_client::metrics::histogram::Histogram,
    /// The lags of the timers this worker's drives fired (read from what they appended).
    timer_lag: Mutex<LagCounts>,
}

/// Buckets of the signal-latency histogram, in seconds: 5 ms doubling to about 41 s (a
/// signal waits for the run's holder to finish its drive, or for the next claim).
const LATENCY_BUCKET_FIRST_S: f64 = 0.005;
const LATENCY_BUCKETS: u16 = 14;

impl Default for WorkerMetrics {
    fn default() -> WorkerMetrics {
        WorkerMetrics {
            claims: Mutex::default(),
            takeovers: std::sync::atomic::AtomicU64::new(0),
            latency: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(
                    LATENCY_BUCKET_FIRST_S,
                    2.0,
                    LATENCY_BUCKETS,
                ),
            ),
            timer_lag: Mutex::default(),
        }
    }
}

impl WorkerMetrics {
    /// A claim of a run in state `from` (`running`: a takeover, its holder's lease expired).
    pub fn claimed(&self, from: &str) {
        let mut c = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        bump(&mut c, from.to_owned(), 1);
        if from == "running" {
            self.takeovers
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// A signal picked up after waiting `waited_ms`.
    pub fn signal_waited(&self, waited_ms: i64) {
        // Display only (never hashed): the one place a float is right, Prometheus's unit.
        self.latency.observe(waited_ms.max(0) as f64 / 1000.0);
    }

    /// Counts the lag of every timer fired in the log at `log` from event `from` on (what a
    /// drive of this worker appended; a log that cannot be read counts nothing).
    pub fn timers_fired_since(&self, log: &Path, from: u64) {
        let Ok(mut indexed) = oracle_runtime::index::IndexedLog::open_with(log, false) else {
            return;
        };
        let mut lag = self.timer_lag.lock().unwrap_or_else(|p| p.into_inner());
        for seq in from..indexed.len() {
            let Ok(event) = indexed.read(seq) else { break };
            if let Ok(Payload::TimerFired(f)) = event.typed() {
                lag.observe(f.fired_ms.saturating_sub(f.due_ms));
            }
        }
    }

    /// The worker's metrics with the store's `statuses` (runs by state) and `queue_depth`.
    pub fn render(
        &self,
        statuses: &BTreeMap<String, u64>,
        queue_depth: u64,
    ) -> Result<String, HostError> {
        let extra = Extra {
            queue_depth: Some(queue_depth),
            takeovers: Some(self.takeovers.load(std::sync::atomic::Ordering::Relaxed)),
            claims: self
                .claims
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        };
        let mut r = Registry::default();
        let status = statuses
            .iter()
            .map(|(s, n)| (vec![("status", s.clone())], *n));
        gauges(&mut r, "oracle_runs", "Runs in the store by state", status);
        extras(&mut r, &extra);
        r.register(
            "oracle_signal_latency_seconds",
            "How long a signal waited in the store before this worker carried it out",
            self.latency.clone(),
        );
        let lag = self
            .timer_lag
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        r.register(
            "oracle_timer_lag_seconds",
            "How late each timer this worker fired was, after its due instant (timer_fired events)",
            LagHistogram(lag),
        );
        let mut out = String::new();
        encode(&mut out, &r).map_err(|e| HostError::Metrics(format!("not encoded: {e}")))?;
        Ok(out)
    }
}

/// Longest a scrape's request may take to arrive before its connection is dropped (one
/// connection is served at a time, so a silent client must not hold the listener).
pub const SCRAPE_READ_TIMEOUT_MS: u64 = 5_000;
/// Largest request head read (a scraper's `GET /metrics` with its headers is far smaller).
pub const SCRAPE_REQUEST_BYTES_MAX: usize = 8 * 1024;

/// What renders a scrape's body.
pub type Render = Box<dyn FnMut() -> Result<String, HostError> + Send>;

/// Serves `GET /metrics` on `addr` (a loopback address: the metrics carry no secret but have
/// no token either) from a thread of its own, one connection at a time, `render` called per
/// scrape. Returns the address bound (port 0 picks one).
pub fn listen(
    addr: std::net::SocketAddr,
    mut render: Render,
) -> Result<std::net::SocketAddr, HostError> {
    let refuse = |why: String| HostError::Given {
        flag: "--metrics",
        given: addr.to_string(),
        why,
    };
    if !addr.ip().is_loopback() {
        return Err(refuse(
            "a metrics address must be loopback (127.0.0.1 or ::1): the endpoint has no token; put a proxy in front to scrape from elsewhere".into(),
        ));
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|e| refuse(e.to_string()))?;
    let bound = listener.local_addr().map_err(|e| refuse(e.to_string()))?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            answer(stream, &mut render);
        }
    });
    Ok(bound)
}

/// Answers one connection: `GET /metrics` with the rendered text, anything else 404 (or 405
/// for another method). Errors of the connection only drop it.
fn answer(mut stream: std::net::TcpStream, render: &mut Render) {
    use std::io::{Read, Write};
    let timeout = std::time::Duration::from_millis(SCRAPE_READ_TIMEOUT_MS);
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < SCRAPE_REQUEST_BYTES_MAX {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&head);
    let first = line.lines().next().unwrap_or("");
    let mut parts = first.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, ctype, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => match render() {
            Ok(text) => ("200 OK", CONTENT_TYPE, text),
            Err(e) => ("503 Service Unavailable", "text/plain", format!("{e}\n")),
        },
        (_, "/metrics") => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
        _ => (
            "404 Not Found",
            "text/plain",
            "only /metrics is here\n".into(),
        ),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n{body}",
        body.len()
    );
}

/// A model binding's prices: micro-units (of any currency) per 1M input and output tokens.
/// Integers, so no float is ever computed; the cost is display only (never recorded).
pub type Prices = BTreeMap<String, (u64, u64)>;

/// One `--model-price NAME=IN/OUT` (micro-units per 1M tokens).
pub fn parse_price(text: &str) -> Result<(String, (u64, u64)), HostError> {
    let bad = |why: &str| HostError::Given {
        flag: "--model-price",
        given: text.to_owned(),
        why: why.to_owned(),
    };
    let (name, rest) = text
        .split_once('=')
        .ok_or_else(|| bad("expected NAME=IN/OUT"))?;
    let (input, output) = rest
        .split_once('/')
        .ok_or_else(|| bad("expected NAME=IN/OUT"))?;
    let n = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| bad("IN and OUT are whole micro-units per 1M tokens"))
    };
    if name.is_empty() {
        return Err(bad("the model binding's name is empty"));
    }
    Ok((name.to_owned(), (n(input)?, n(output)?)))
}

/// The cost of `t`'s tokens at `prices`, in micro-units (rounded down), and the model
/// bindings that used tokens but have no price.
pub fn cost(t: &Tally, prices: &Prices) -> (u64, Vec<String>) {
    let mut total: u128 = 0;
    let mut unpriced = Vec::new();
    for ((model, ty), n) in &t.tokens {
        match prices.get(model) {
            Some((i, o)) => {
                let per = if ty == "input" { *i } else { *o };
                total += u128::from(*n) * u128::from(per);
            }
            None if *n > 0 && !unpriced.contains(model) => unpriced.push(model.clone()),
            None => {}
        }
    }
    let micro = u64::try_from(total / 1_000_000).unwrap_or(u64::MAX);
    (micro, unpriced)
}
