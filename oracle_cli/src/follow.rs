//! `oracle run|resume --follow`: the pieces of streamed model replies printed on stderr as
//! they arrive, from a thread of their own, so a slow terminal never holds up the drive (the
//! hub drops what a full queue cannot take, and this says how many). Nothing here is recorded.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use oracle_host::{Delta, Subscription};

/// How often the printing thread looks for its stop flag while no delta comes.
const POLL: Duration = Duration::from_millis(50);

/// The printing thread, until dropped (which prints what is left and the drop count).
pub struct Follow {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Follow {
    /// Starts printing every delta this process publishes; `None` when not asked (or when the
    /// hub has no room for another watcher, said on stderr).
    pub fn start(asked: bool) -> Option<Follow> {
        if !asked {
            return None;
        }
        let Some(sub) = oracle_host::inspect::follow() else {
            eprintln!("warning: --follow: too many watchers in this process; not following");
            return None;
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("follow".into())
            .spawn(move || print_until(&sub, &flag))
            .ok()?;
        Some(Follow {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Prints deltas until `stop`, then those still queued: a line `STEP (attempt N): ` when a new
/// call starts streaming, then its pieces as they come.
fn print_until(sub: &Subscription, stop: &AtomicBool) {
    let mut current: Option<(String, String, u64)> = None;
    let mut err = std::io::stderr();
    let mut show = |d: Delta| {
        let key = (d.run.clone(), d.step.clone(), d.attempt);
        if current.as_ref() != Some(&key) {
            let nl = if current.is_some() { "\n" } else { "" };
            let _ = write!(err, "{nl}{} (attempt {}): ", d.step, d.attempt);
            current = Some(key);
        }
        let _ = write!(err, "{}", d.text);
        let _ = err.flush();
    };
    while !stop.load(Ordering::SeqCst) {
        if let Ok(d) = sub.rx.recv_timeout(POLL) {
            show(d);
        }
    }
    sub.rx.try_iter().for_each(&mut show);
    if current.is_some() {
        eprintln!();
    }
    if sub.dropped() > 0 {
        eprintln!(
            "warning: --follow: {} streamed pieces dropped (stderr was slower than the model); the log has every reply whole",
            sub.dropped()
        );
    }
}
