//! Ctrl-C during a drive: say how the run continues, then end as SIGINT always did.
//!
//! A run stopped by Ctrl-C is an interrupted run like one stopped by a crash: its log ends
//! where it ends (a torn last record is moved aside by the next `oracle resume`), and nothing is
//! lost. What was missing is saying so. A thread receives SIGINT (so no code runs inside a
//! signal handler), prints the hint on stderr, then restores the default action and raises the
//! signal again: the exit status stays "killed by SIGINT" (130 in a shell).

use signal_hook::consts::SIGINT;
use signal_hook::iterator::Signals;

/// Installs the hint for a drive of run `run` (or of whatever run the command starts, when it
/// is not known yet). Best effort: without it, Ctrl-C ends the process as before.
pub fn on_ctrl_c(run: Option<&str>) {
    // A worker handles SIGINT itself (stop claiming, finish the runs in hand), for every run.
    if WORKER.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let hint = match run {
        Some(id) => format!(
            "\ninterrupted: run {id} stopped where it was; `oracle resume {id}` continues it"
        ),
        None => "\ninterrupted: the run stopped where it was; `oracle runs` lists it as interrupted and `oracle resume RUN` continues it".to_owned(),
    };
    let Ok(mut signals) = Signals::new([SIGINT]) else {
        return;
    };
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            eprintln!("{hint}");
            let _ = signal_hook::low_level::emulate_default_handler(SIGINT);
            std::process::exit(130);
        }
    });
}

/// Set by `oracle worker`: drives in this process install no Ctrl-C hint of their own.
static WORKER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks this process as a worker (see [`on_ctrl_c`]).
pub fn set_worker() {
    WORKER.store(true, std::sync::atomic::Ordering::SeqCst);
}
