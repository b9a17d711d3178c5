//! The watcher and the beacon: what is new in the home, announced once.
//!
//! Runs are appended to by other processes (`oracle run`, `resume`, `adjudicate`, a background
//! resume), so the server cannot be told about new events in-process: every
//! [`POLL_INTERVAL_MS`](crate::config::POLL_INTERVAL_MS) the watcher compares each run's log
//! size with the last it saw, and for a run that changed reads what it needs through the
//! index (the new events, the last program event, a waiting step's question), and the memory
//! projection only when a new event touched the memory. From that it keeps the inbox (each
//! suspended step with its question and output schema, each pending adjudication with both
//! claims and their provenance) and *announces* every new item once: a new suspension, a new
//! adjudication request, a failed run.
//!
//! Announcements go to the global SSE stream (`/api/v1/inbox/stream`) and, with
//! `--notify-cmd`, to the beacon: a thread that runs the program once per announcement with
//! the announcement as one JSON object on stdin (exit 0 = delivered; killed with its process
//! group after `NOTIFY_TIMEOUT_MS`). A failed delivery is tried again after a wait that doubles
//! from [`NOTIFY_BACKOFF_MS_MIN`] to [`NOTIFY_BACKOFF_MS_MAX`], for as long as the server runs:
//! the item is never dropped. Delivered ids are appended (and synced) to
//! `<home>/serve-delivered`, read at start: a restart announces nothing that was delivered,
//! and everything that was not and is still pending.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use oracle_host::data::Seen;
use oracle_host::runid::ValidRun;
use serde_json::{Value, json};

use crate::config::{NOTIFY_BACKOFF_MS_MAX, NOTIFY_BACKOFF_MS_MIN, WATCH_READS_MAX};

/// Announcements kept for SSE clients that fall behind (older ones are skipped for them).
pub const ANNOUNCE_BUFFER_MAX: usize = 1024;

/// What the watcher knows of one run.
#[derive(Clone, Debug, Default)]
struct RunWatch {
    /// Log bytes when last read.
    len: u64,
    /// What its log said when last read (events read, waiting step, pending adjudications, a
    /// failure), read by the host.
    seen: Seen,
    /// The last error reading the run (said once on stderr).
    error: Option<String>,
}

#[derive(Debug, Default)]
struct WatchState {
    runs: BTreeMap<String, RunWatch>,
    /// Ids announced (or, with a beacon, delivered before this server started).
    announced: BTreeSet<String>,
    /// Per named store (`<home>/memory`): its log's size when last read, and its pending
    /// requests ([`oracle_host::shared::request_json`] with `store`), re-read when it changed.
    stores: BTreeMap<String, (u64, Vec<Value>)>,
}

/// The watcher's state, shared by the poll thread, the API and the beacon.
#[derive(Debug)]
pub struct Watch {
    home: PathBuf,
    state: Mutex<WatchState>,
    /// Every announcement, for `/api/v1/inbox/stream`.
    pub(crate) announce: tokio::sync::broadcast::Sender<Value>,
    beacon: Mutex<Option<mpsc::Sender<Value>>>,
    base_url: Mutex<String>,
    /// Set by a write through the API: the poll thread looks again at once.
    soon: AtomicBool,
}

impl Watch {
    pub fn new(home: &Path) -> Watch {
        let (announce, _) = tokio::sync::broadcast::channel(ANNOUNCE_BUFFER_MAX);
        Watch {
            home: home.to_path_buf(),
            state: Mutex::new(WatchState::default()),
            announce,
            beacon: Mutex::new(None),
            base_url: Mutex::new(String::new()),
            soon: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchState> {
        match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// `http://ADDR`, for the links announcements carry.
    pub fn set_base_url(&self, url: &str) {
        if let Ok(mut b) = self.base_url.lock() {
            *b = url.to_owned();
        }
    }

    fn link(&self, run: &str) -> String {
        let base = self.base_url.lock().map(|b| b.clone()).unwrap_or_default();
        format!("{base}/runs/{run}")
    }

    /// Sends announcements to the beacon from now on; ids in `delivered` are not announced
    /// again.
    pub fn attach_beacon(&self, tx: mpsc::Sender<Value>, delivered: BTreeSet<String>) {
        self.lock().announced.extend(delivered);
        if let Ok(mut b) = self.beacon.lock() {
            *b = Some(tx);
        }
    }

    /// The inbox now: `{"suspended": [item], "adjudications": [request]}`, in run order, each
    /// with a `link`.
    pub fn inbox(&self) -> Value {
        let st = self.lock();
        let mut suspended = Vec::new();
        let mut adjudications = Vec::new();
        let mut ids: Vec<&String> = st.runs.keys().collect();
        ids.sort_by(|a, b| oracle_host::natural_order(a, b));
        for id in ids {
            let w = &st.runs[id];
            if let Some(item) = &w.seen.waiting {
                let mut item = item.clone();
                item["run"] = json!(id);
                item["link"] = json!(self.link(id));
                suspended.push(item);
            }
            for p in &w.seen.pending {
                let mut p = p.clone();
                p["link"] = json!(self.link(id));
                adjudications.push(p);
            }
        }
        let stored: Vec<Value> = st.stores.values().flat_map(|(_, r)| r.clone()).collect();
        json!({
            "suspended": suspended, "adjudications": adjudications,
            "store_adjudications": stored,
        })
    }

    /// Re-reads the named stores whose log changed size: their pending requests, each naming
    /// both runs. A store that cannot be read is said once on stderr and shows nothing.
    fn refresh_stores(&self) {
        let sizes = oracle_host::shared::store_sizes(&self.home);
        let known: BTreeMap<String, u64> = {
            let st = self.lock();
            st.stores
                .iter()
                .map(|(n, (len, _))| (n.clone(), *len))
                .collect()
        };
        let mut fresh = BTreeMap::new();
        for (name, len) in &sizes {
            if known.get(name) == Some(len) {
                continue;
            }
            let pending = match oracle_host::shared::pending_requests(&self.home, name) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("warning: oracle serve: store {name}: {e}");
                    Vec::new()
                }
            };
            fresh.insert(name.clone(), (*len, pending));
        }
        let mut st = self.lock();
        // Listed again after the reads, as before: a store removed meanwhile is dropped.
        let listed: BTreeSet<String> = oracle_host::shared::store_sizes(&self.home)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        st.stores.retain(|n, _| listed.contains(n));
        st.stores.extend(fresh);
    }

    /// Asks the poll thread to look again now rather than at its next interval (after a
    /// write through the API, so the inbox shows it at once).
    pub fn refresh_soon(&self) {
        self.soon.store(true, Ordering::Relaxed);
    }

    /// Polls every `interval_ms` (or sooner, after [`Watch::refresh_soon`]) until `stop`.
    pub fn poll(&self, interval_ms: u64, stop: &AtomicBool) {
        /// How often the poll thread checks `stop` and `refresh_soon` while it waits.
        const POLL_SLICE_MS: u64 = 10;
        while !stop.load(Ordering::Relaxed) {
            self.refresh();
            let mut waited = 0;
            while waited < interval_ms
                && !stop.load(Ordering::Relaxed)
                && !self.soon.swap(false, Ordering::Relaxed)
            {
                std::thread::sleep(Duration::from_millis(POLL_SLICE_MS));
                waited += POLL_SLICE_MS;
            }
        }
    }

    /// One poll: every run whose log changed size is read again, and new items announced.
    pub fn refresh(&self) {
        self.refresh_stores();
        let runs_dir = self.home.join("runs");
        let seen = oracle_host::data::log_sizes(&self.home);
        // The runs that changed, read without holding the lock (the inbox stays readable
        // meanwhile); only this thread writes the runs' entries.
        let changed: Vec<(String, u64, RunWatch)> = {
            let st = self.lock();
            seen.iter()
                .filter_map(|(id, len)| {
                    let w = st.runs.get(id).cloned().unwrap_or_default();
                    (w.len != *len || w.seen.next_seq == 0).then(|| (id.clone(), *len, w))
                })
                .collect()
        };
        let mut updated = Vec::new();
        for (id, len, mut w) in changed {
            let run = ValidRun {
                id: id.clone(),
                dir: runs_dir.join(&id),
                home: self.home.clone(),
            };
            match oracle_host::data::read_seen(&run, &mut w.seen, WATCH_READS_MAX) {
                Ok(()) => {
                    w.len = len;
                    w.error = None;
                }
                Err(e) => {
                    let e = e.to_string();
                    if w.error.as_deref() != Some(e.as_str()) {
                        eprintln!("warning: oracle serve: run {id}: {e}");
                        w.error = Some(e);
                    }
                }
            }
            updated.push((id, w));
        }
        let mut fresh = Vec::new();
        {
            let mut st = self.lock();
            st.runs.retain(|id, _| seen.contains_key(id));
            for (id, w) in updated {
                st.runs.insert(id, w);
            }
            // New items, in run order.
            let mut ids: Vec<String> = st.runs.keys().cloned().collect();
            ids.sort_by(|a, b| oracle_host::natural_order(a, b));
            for id in ids {
                let w = &st.runs[&id];
                let mut items = Vec::new();
                if let Some(wait) = &w.seen.waiting {
                    items.push(json!({
                        "id": format!("{id}/suspended/{}", wait["seq"]),
                        "run": id,
                        "kind": wait["kind"],
                        "step": wait["step"],
                        "handle": null,
                        "seq": wait["seq"],
                        "reason": wait["reason"],
                        "question": wait.get("question").cloned().unwrap_or(Value::Null),
                    }));
                }
                for p in &w.seen.pending {
                    items.push(json!({
                        "id": format!("{id}/{}", p["handle"].as_str().unwrap_or("?")),
                        "run": id,
                        "kind": "adjudication",
                        "step": p["challenger"]["step"],
                        "handle": p["handle"],
                        "seq": p["seq"],
                        "reason": p["reason"],
                        "question": null,
                    }));
                }
                if let Some(f) = &w.seen.failed {
                    items.push(json!({
                        "id": format!("{id}/failed/{}", f["seq"]),
                        "run": id,
                        "kind": "failed",
                        "step": null,
                        "handle": null,
                        "seq": f["seq"],
                        "reason": f["reason"],
                        "question": null,
                    }));
                }
                for mut item in items {
                    let key = item["id"].as_str().unwrap_or_default().to_owned();
                    if st.announced.insert(key) {
                        item["link"] = json!(self.link(&id));
                        fresh.push(item);
                    }
                }
            }
        }
        let beacon = self.beacon.lock().ok().and_then(|b| b.clone());
        for item in fresh {
            // No SSE client listening is not an error.
            let _ = self.announce.send(item.clone());
            if let Some(tx) = &beacon {
                let _ = tx.send(item);
            }
        }
    }
}

/// The ids the beacon delivered before, one per line (a torn last line is ignored).
pub fn read_delivered(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .map(|t| {
            t.split_inclusive('\n')
                .filter(|l| l.ends_with('\n'))
                .map(|l| l.trim_end().to_owned())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

fn record_delivered(path: &Path, id: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    // A torn last line (a crash mid-write) is ended first.
    let torn = std::fs::read(path).is_ok_and(|b| b.last().is_some_and(|&c| c != b'\n'));
    if torn {
        f.write_all(b"\n")?;
    }
    f.write_all(format!("{id}\n").as_bytes())?;
    f.sync_data()
}

/// The wait before attempt `attempt + 1` of a failed delivery.
pub fn backoff_ms(attempt: u32) -> u64 {
    NOTIFY_BACKOFF_MS_MIN
        .saturating_mul(1u64 << attempt.min(20))
        .min(NOTIFY_BACKOFF_MS_MAX)
}

/// The beacon: delivers each announcement `rx` gives to `program`, in order, trying failed
/// ones again with a bounded backoff until they are delivered or `stop` is set.
///
/// Each announcement is first taken (`announcements`): over a store, one another server
/// delivered or holds is dropped here, so however many servers serve one store, each item is
/// delivered by one of them.
pub fn beacon(
    program: PathBuf,
    delivered: PathBuf,
    rx: mpsc::Receiver<Value>,
    stop: Arc<AtomicBool>,
    announcements: oracle_host::backend::Announcements,
) {
    let mut port = oracle_host::Notifier::new(program);
    // (announcement, failed attempts, when it is due)
    let mut queue: Vec<(Value, u32, Instant)> = Vec::new();
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let wait = queue
            .iter()
            .map(|(_, _, due)| due.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_millis(100))
            .min(Duration::from_millis(100));
        match rx.recv_timeout(wait) {
            Ok(v) => queue.push((v, 0, Instant::now())),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) if queue.is_empty() => return,
            Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
        }
        let mut i = 0;
        while i < queue.len() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if queue[i].2 > Instant::now() {
                i += 1;
                continue;
            }
            let id = queue[i].0["id"].as_str().unwrap_or_default().to_owned();
            let taken = announcements.take(&id, queue[i].0["run"].as_str().unwrap_or(""));
            let outcome = match taken {
                Ok(false) => {
                    // Another server delivers it.
                    queue.remove(i);
                    continue;
                }
                Ok(true) => port.notify(&queue[i].0).map_err(|e| e.to_string()),
                Err(e) => Err(format!("taking it in the store: {e}")),
            };
            match outcome {
                Ok(()) => {
                    if let Err(e) = announcements.delivered(&id) {
                        eprintln!(
                            "warning: oracle serve: {id} was delivered but the store could not record it ({e}); another server may announce it again"
                        );
                    }
                    if let Err(e) = record_delivered(&delivered, &id) {
                        eprintln!(
                            "warning: oracle serve: {id} was delivered but {} could not record it ({e}); a restart announces it again",
                            delivered.display()
                        );
                    }
                    queue.remove(i);
                }
                Err(e) => {
                    let attempts = queue[i].1 + 1;
                    let wait = backoff_ms(attempts - 1);
                    eprintln!(
                        "warning: oracle serve: delivering {id} failed (attempt {attempts}; again in {wait} ms): {e}"
                    );
                    queue[i].1 = attempts;
                    queue[i].2 = Instant::now() + Duration::from_millis(wait);
                    i += 1;
                }
            }
        }
    }
}
