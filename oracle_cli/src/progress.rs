//! Progress on a terminal for work that can take more than a second (`verify` of a big log,
//! `run`, `resume`, `replay`, `log` scans, `synth`): an indicatif bar or spinner on stderr.
//!
//! Drawn only when stderr is a terminal and the command was not asked for `--json` (never in a
//! pipe, a file or a test), and only once the work has taken [`DELAY`]: a command that ends
//! sooner prints exactly what it would without it. Nothing shown here is recorded or hashed.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before its progress is drawn: shorter work shows none.
pub const DELAY: Duration = Duration::from_secs(1);

/// How often a shown display is redrawn (and a watched counter read).
const TICK: Duration = Duration::from_millis(120);

/// Whether progress may be drawn: on a terminal (stderr), and never with `--json`, whose
/// reader is a program.
pub fn should_show(stderr_is_terminal: bool, json: bool) -> bool {
    stderr_is_terminal && !json
}

/// A progress display: hidden until [`DELAY`] has passed, then drawn on stderr until dropped
/// (dropping clears it). Inert where [`should_show`] says no.
pub struct Meter {
    bar: Option<ProgressBar>,
    stop: Option<mpsc::Sender<()>>,
    ticker: Option<JoinHandle<()>>,
}

/// What a [`Meter`] counts, for its template.
#[derive(Clone, Copy)]
pub enum Unit {
    Bytes,
    Events,
}

impl Meter {
    /// A spinner with `verb` and a message (no known end).
    pub fn spinner(verb: &'static str, json: bool) -> Meter {
        Meter::new(verb, None, Unit::Events, json, None)
    }

    /// A bar from 0 to `len` in `unit`s.
    pub fn bar(verb: &'static str, len: u64, unit: Unit, json: bool) -> Meter {
        Meter::new(verb, Some(len), unit, json, None)
    }

    /// A bar from 0 to `len` whose position is read from `counter` (set by work on another
    /// thread, which need not know about the display).
    pub fn watching(
        verb: &'static str,
        len: u64,
        unit: Unit,
        json: bool,
        counter: Arc<AtomicU64>,
    ) -> Meter {
        Meter::new(verb, Some(len), unit, json, Some(counter))
    }

    fn new(
        verb: &'static str,
        len: Option<u64>,
        unit: Unit,
        json: bool,
        counter: Option<Arc<AtomicU64>>,
    ) -> Meter {
        if !should_show(std::io::stderr().is_terminal(), json) {
            return Meter {
                bar: None,
                stop: None,
                ticker: None,
            };
        }
        let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::hidden());
        let template = match (len, unit) {
            (None, _) => "{spinner} {prefix} {msg} [{elapsed}]",
            (Some(_), Unit::Bytes) => {
                "{spinner} {prefix} [{bar:30}] {bytes}/{total_bytes} ({eta} left) {msg}"
            }
            (Some(_), Unit::Events) => {
                "{spinner} {prefix} [{bar:30}] {human_pos}/{human_len} events ({eta} left) {msg}"
            }
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(verb);
        let (stop, stopped) = mpsc::channel::<()>();
        let shown = bar.clone();
        // One thread shows the display after the delay and then redraws it (reading the
        // counter, if any); it ends when the meter is dropped, at once if before the delay.
        let ticker = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                match stopped.recv_timeout(DELAY) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                shown.set_draw_target(ProgressDrawTarget::stderr());
                loop {
                    if let Some(c) = &counter {
                        shown.set_position(c.load(Ordering::Relaxed));
                    }
                    shown.tick();
                    match stopped.recv_timeout(TICK) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }
            })
            .ok();
        Meter {
            bar: Some(bar),
            stop: Some(stop),
            ticker,
        }
    }

    /// Where the work is, in the meter's unit.
    pub fn set_position(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.set_position(n);
        }
    }

    /// The text after the bar or spinner.
    pub fn set_message(&self, text: impl FnOnce() -> String) {
        if let Some(b) = &self.bar {
            b.set_message(text());
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        // Dropping the sender wakes the thread; after it has ended nothing draws again.
        self.stop.take();
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_only_on_a_terminal_and_never_with_json() {
        assert!(should_show(true, false));
        assert!(!should_show(true, true));
        assert!(!should_show(false, false));
        assert!(!should_show(false, true));
    }

    #[test]
    fn a_meter_off_a_terminal_is_inert() {
        // `cargo test` captures stderr (not a terminal): nothing is drawn, nothing waits.
        if std::io::stderr().is_terminal() {
            return;
        }
        let started = std::time::Instant::now();
        let m = Meter::bar("testing", 10, Unit::Events, false);
        m.set_position(5);
        m.set_message(|| "half".into());
        assert!(m.bar.is_none() && m.ticker.is_none());
        drop(m);
        assert!(started.elapsed() < DELAY);
    }
}
