//! Live deltas: the pieces of a streamed model reply (`llm.chat` on a binding with `stream`),
//! sent to whoever watches the run in this process (`oracle serve`'s SSE tail and run page,
//! `oracle run --follow`) while the call is in flight. Never recorded: the log records only
//! the whole reply, so nothing here touches a hash, a replay or a resume.
//!
//! One hub per process. A watcher subscribes (to one run, or to every run the process drives)
//! and gets a bounded queue ([`DELTAS_QUEUED_MAX`]); publishing never blocks the engine: a
//! delta a full queue cannot take is dropped and counted ([`Subscription::dropped`]), and the
//! reply itself is unaffected. The hub also keeps each run's partial reply of the call in
//! flight (at most [`PARTIAL_BYTES_MAX`]), for a page drawn mid-call.
//!
//! The second tap is of records: once a process asks for them ([`tap_appends`], the live span
//! exporter of `--otlp`), every log writer in it hands each batch of records it wrote to the
//! file to a bounded queue ([`APPENDS_QUEUED_MAX`]) without waiting; a batch the queue cannot
//! take is dropped and counted ([`appends_dropped`]). Spans are derived from those records,
//! so the log stays the source of truth, and a slow or absent collector never holds up a writer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, OnceLock};

/// Deltas one watcher's queue holds: a streamed reply of a few thousand tokens arrives in a
/// few hundred deltas, and a watcher that falls further behind than this is slower than the
/// model: it loses deltas (counted), never the reply, which the log has whole.
pub const DELTAS_QUEUED_MAX: usize = 1024;
/// Most watchers at once in one process (each holds a queue of up to [`DELTAS_QUEUED_MAX`]):
/// a server's SSE streams are bounded far below this; a subscription past it gets nothing.
pub const SUBSCRIBERS_MAX: usize = 256;
/// Most bytes of a partial reply kept for a page drawn mid-call; the rest is in the log once
/// the call ends.
pub const PARTIAL_BYTES_MAX: usize = 64 << 10;

/// One piece of a streamed reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    pub run: String,
    pub step: String,
    pub attempt: u64,
    /// The piece of the reply's content (text as the server sent it).
    pub text: String,
}

impl Delta {
    /// The delta as the SSE tail sends it (`event: delta`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "run": self.run, "step": self.step, "attempt": self.attempt, "text": self.text,
        })
    }
}

/// The partial reply of a run's call in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Partial {
    pub step: String,
    pub attempt: u64,
    pub text: String,
    /// Whether text past [`PARTIAL_BYTES_MAX`] was left out.
    pub cut: bool,
}

struct Subscriber {
    id: u64,
    /// `None`: every run this process drives.
    run: Option<String>,
    tx: SyncSender<Delta>,
    dropped: Arc<AtomicU64>,
}

#[derive(Default)]
struct Hub {
    next: u64,
    subscribers: Vec<Subscriber>,
    partial: BTreeMap<String, Partial>,
}

fn hub() -> &'static Mutex<Hub> {
    static HUB: OnceLock<Mutex<Hub>> = OnceLock::new();
    HUB.get_or_init(Mutex::default)
}

fn lock() -> std::sync::MutexGuard<'static, Hub> {
    hub().lock().unwrap_or_else(|p| p.into_inner())
}

/// A watcher's queue of deltas; dropping it unsubscribes.
pub struct Subscription {
    id: u64,
    pub rx: Receiver<Delta>,
    dropped: Arc<AtomicU64>,
}

impl Subscription {
    /// Deltas this watcher lost because its queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        lock().subscribers.retain(|s| s.id != self.id);
    }
}

/// Watches run `run` (`None`: every run this process drives). `None` past
/// [`SUBSCRIBERS_MAX`].
pub fn subscribe(run: Option<&str>) -> Option<Subscription> {
    let mut hub = lock();
    if hub.subscribers.len() >= SUBSCRIBERS_MAX {
        return None;
    }
    let (tx, rx) = sync_channel(DELTAS_QUEUED_MAX);
    let dropped = Arc::new(AtomicU64::new(0));
    hub.next += 1;
    let id = hub.next;
    hub.subscribers.push(Subscriber {
        id,
        run: run.map(str::to_owned),
        tx,
        dropped: dropped.clone(),
    });
    Some(Subscription { id, rx, dropped })
}

/// Sends `delta` to its run's watchers without waiting: a full queue drops it (counted).
pub fn publish(delta: Delta) {
    let mut hub = lock();
    let partial = hub.partial.entry(delta.run.clone()).or_default();
    if partial.step != delta.step || partial.attempt != delta.attempt {
        *partial = Partial {
            step: delta.step.clone(),
            attempt: delta.attempt,
            ..Partial::default()
        };
    }
    append_bounded(partial, &delta.text);
    for s in hub
        .subscribers
        .iter()
        .filter(|s| s.run.as_deref().is_none_or(|r| r == delta.run))
    {
        match s.tx.try_send(delta.clone()) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                s.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Adds `text` to `partial`, up to [`PARTIAL_BYTES_MAX`] (cut on a character boundary).
fn append_bounded(partial: &mut Partial, text: &str) {
    let room = PARTIAL_BYTES_MAX.saturating_sub(partial.text.len());
    let mut end = text.len().min(room);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    partial.text.push_str(&text[..end]);
    partial.cut |= end < text.len();
}

/// The call of `run` now in flight ended (its outcome is being recorded): its partial reply
/// is forgotten.
pub fn finish(run: &str) {
    lock().partial.remove(run);
}

/// The partial reply of `run`'s call in flight, if one is streaming.
pub fn partial(run: &str) -> Option<Partial> {
    lock().partial.get(run).cloned()
}

/// Batches of records queued for the span exporter: a batch is what one flush wrote (a
/// commit point, or a full buffer), so this holds thousands of steps of a fast run while the
/// exporter thread catches up; past it the exporter is slower than the run and loses batches.
pub const APPENDS_QUEUED_MAX: usize = 4096;

/// Records a writer put in its log's file.
#[derive(Clone, Debug)]
pub struct Appended {
    /// The run's id (its directory's name; the log's file stem for a log outside a run).
    pub run: String,
    pub log: std::path::PathBuf,
    /// Whole canonical records, `\n`-terminated, in seq order.
    pub records: Vec<u8>,
}

struct AppendTap {
    tx: SyncSender<Appended>,
    dropped: AtomicU64,
}

static APPENDS: OnceLock<AppendTap> = OnceLock::new();

/// Asks every log writer of this process for the records it writes from now on; the receiver
/// once per process (`None` when asked before).
pub fn tap_appends() -> Option<Receiver<Appended>> {
    let (tx, rx) = sync_channel(APPENDS_QUEUED_MAX);
    let mut fresh = false;
    APPENDS.get_or_init(|| {
        fresh = true;
        AppendTap {
            tx,
            dropped: AtomicU64::new(0),
        }
    });
    fresh.then_some(rx)
}

/// Batches of records the tap could not take (its queue was full).
pub fn appends_dropped() -> u64 {
    APPENDS
        .get()
        .map_or(0, |t| t.dropped.load(Ordering::Relaxed))
}

/// Wakes the tap's reader without a record (an empty batch, which it skips): a reader told to
/// stop sees it now, not at its next poll. Dropped silently when the queue is full (the reader
/// is busy then, and sees its stop flag after the batch at hand).
pub fn nudge_appends() {
    if let Some(tap) = APPENDS.get() {
        let _ = tap.tx.try_send(Appended {
            run: String::new(),
            log: std::path::PathBuf::new(),
            records: Vec::new(),
        });
    }
}

/// A writer wrote `records` to `paths`' log: queued for the tap, if one was asked for, without
/// waiting (a full queue drops them, counted).
pub(crate) fn appended(paths: &crate::paths::LogPaths, records: &[u8]) {
    let Some(tap) = APPENDS.get() else {
        return;
    };
    let run = match &paths.run_dir {
        Some(dir) => dir.file_name(),
        None => paths.log.file_stem(),
    }
    .map(|n| n.to_string_lossy().into_owned())
    .unwrap_or_default();
    let batch = Appended {
        run,
        log: paths.log.clone(),
        records: records.to_vec(),
    };
    if let Err(TrySendError::Full(_)) = tap.tx.try_send(batch) {
        tap.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(run: &str, text: &str) -> Delta {
        Delta {
            run: run.into(),
            step: "s".into(),
            attempt: 1,
            text: text.into(),
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_never_blocks() {
        let sub = subscribe(Some("full-run")).unwrap();
        for _ in 0..DELTAS_QUEUED_MAX + 5 {
            publish(delta("full-run", "x"));
        }
        assert_eq!(sub.dropped(), 5);
        assert_eq!(sub.rx.try_iter().count(), DELTAS_QUEUED_MAX);
        assert_eq!(
            partial("full-run").unwrap().text.len(),
            DELTAS_QUEUED_MAX + 5
        );
        finish("full-run");
        assert!(partial("full-run").is_none());
    }

    #[test]
    fn a_watcher_of_one_run_sees_only_it() {
        let one = subscribe(Some("a-run")).unwrap();
        let all = subscribe(None).unwrap();
        publish(delta("b-run", "b"));
        publish(delta("a-run", "a"));
        assert_eq!(one.rx.try_iter().map(|d| d.text).collect::<Vec<_>>(), ["a"]);
        // Other tests publish too: count this test's runs only.
        let mine = all
            .rx
            .try_iter()
            .filter(|d| d.run == "a-run" || d.run == "b-run");
        assert_eq!(mine.count(), 2);
        finish("a-run");
        finish("b-run");
    }

    #[test]
    fn a_partial_reply_is_bounded_on_a_character_boundary() {
        let mut p = Partial::default();
        append_bounded(&mut p, &"é".repeat(PARTIAL_BYTES_MAX));
        assert!(p.cut && p.text.len() <= PARTIAL_BYTES_MAX);
    }
}
