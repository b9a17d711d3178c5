//! Running a server: bind, announce the address, start the watcher (and the beacon), serve
//! until SIGTERM or SIGINT, then stop accepting, end the event streams and let requests in
//! flight finish.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;

use crate::config::{Config, ConfigError, DELIVERED_FILE};
use crate::state::{AppState, StateError};

/// Worker threads of the runtime: handlers only wait on the blocking pool, so two suffice on
/// the two-core machines this runs on.
pub const WORKER_THREADS: usize = 2;
/// Threads for blocking work (file reads, re-deriving runs); whole-log work is further held to
/// `heavy_jobs_max`.
pub const BLOCKING_THREADS_MAX: usize = 16;

/// Why a server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("--listen {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Serves `config` until SIGTERM or SIGINT, on a runtime of its own (the caller needs none).
/// `ui`: HTML routes to mount beside the API (see the crate docs).
pub fn run(
    config: Config,
    ui: Option<fn(&AppState) -> Router<AppState>>,
) -> Result<(), ServeError> {
    config.check()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .max_blocking_threads(BLOCKING_THREADS_MAX)
        .enable_all()
        .build()?;
    rt.block_on(serve(config, ui))
}

/// [`run`] on the caller's runtime.
pub async fn serve(
    config: Config,
    ui: Option<fn(&AppState) -> Router<AppState>>,
) -> Result<(), ServeError> {
    config.check()?;
    let listen = config.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: listen,
            source,
        })?;
    serve_on(listener, config, ui, wait_for_signal()).await
}

/// Serves `config` on `listener` until `shutdown` resolves (what [`serve`] does after binding,
/// with SIGTERM or SIGINT as `shutdown`): prints `listening http://ADDR` once requests are
/// taken, then stops accepting, ends the event streams and lets requests in flight finish.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    config: Config,
    ui: Option<fn(&AppState) -> Router<AppState>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    config.check()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Off the async threads: a store's client runs a runtime of its own while it connects.
    let rx = stop_rx.clone();
    let state = tokio::task::spawn_blocking(move || AppState::new(config, rx))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))??;
    let addr = listener.local_addr()?;
    let base = format!("http://{addr}");
    state.watch.set_base_url(&base);

    // The beacon first, so the first poll's announcements reach it.
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    if let Some(program) = state.config.notify_cmd.clone() {
        let delivered_path = state.home.join(DELIVERED_FILE);
        let delivered = crate::watch::read_delivered(&delivered_path);
        let (tx, rx) = std::sync::mpsc::channel();
        state.watch.attach_beacon(tx, delivered);
        let (stop, front) = (stop.clone(), state.front().cloned());
        threads.push(std::thread::spawn(move || {
            crate::watch::beacon(program, delivered_path, rx, stop, front)
        }));
    }
    // Over a store, the mirror holds every run before the inbox is read, and is kept up to
    // date by a thread woken by the store's notifications.
    if let Some(front) = state.front().cloned() {
        let first = front.clone();
        tokio::task::spawn_blocking(move || first.sync())
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?
            .map_err(|e| std::io::Error::other(format!("--store: {e}")))?;
        let (front, watch, stop) = (front.clone(), state.watch.clone(), stop.clone());
        threads.push(std::thread::spawn(move || mirror(&front, &watch, &stop)));
    }
    // The inbox is complete before the address is announced: a client that reads it next
    // sees every pending item.
    let watch = state.watch.clone();
    tokio::task::spawn_blocking(move || watch.refresh())
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    {
        let watch = state.watch.clone();
        let stop = stop.clone();
        let interval = state.config.poll_interval_ms.max(1);
        threads.push(std::thread::spawn(move || watch.poll(interval, &stop)));
    }

    // Over a store, the server fires the store's schedules as every worker does (each tick's
    // idempotency key makes it start one run however many fire).
    if let Some(front) = state.front().cloned() {
        let stop = stop.clone();
        let log_path = state.home.join(crate::config::RESUME_LOG_FILE);
        threads.push(std::thread::spawn(move || {
            let scratch = front.scratch_root().join("schedules");
            let _ = std::fs::create_dir_all(&scratch);
            let stopped = || stop.load(Ordering::Relaxed);
            let log = |line: &str| crate::signals::append_log(&log_path, line);
            oracle_host::schedule_store::fire_loop(front.url(), &scratch, false, &stopped, &log);
        }));
    }
    // Over a store the workers drive runs (and the mirror is never written): no wheel here.
    if state.front().is_none() {
        let st = state.clone();
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            crate::signals::timer_wheel(&st, &stop)
        }));
    }
    if state.config.recover {
        let st = state.clone();
        let n = tokio::task::spawn_blocking(move || crate::signals::recover_in_background(&st))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        eprintln!(
            "recover: {n} run(s) left behind by a stopped process, driven on in the background (outcomes in {})",
            crate::config::RESUME_LOG_FILE
        );
    }
    let limits = state.config.conn_limits();
    let app = crate::api::router(state.clone(), ui.map(|f| f(&state)));
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening {base}")?;
        out.flush()?;
    }
    tokio::spawn(async move {
        shutdown.await;
        // Streams end, the watcher and the beacon stop; requests in flight finish.
        let _ = stop_tx.send(true);
    });
    crate::conn::serve_connections(listener, app, limits, stop_rx).await;
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

/// Keeps the mirror of a store up to date until `stop`: waits for the store to say something
/// changed (or [`STORE_POLL_MS`](crate::config::STORE_POLL_MS) passes), copies what did, and
/// has the watcher look at once. A store that cannot be reached is said once per outage on
/// stderr and tried again; the mirror serves what it holds meanwhile.
fn mirror(
    front: &oracle_host::store_front::StoreFront,
    watch: &crate::watch::Watch,
    stop: &AtomicBool,
) {
    /// The wait after a failure before trying the store again.
    const RETRY_MS: u64 = 1_000;
    let mut failing = false;
    while !stop.load(Ordering::Relaxed) {
        let outcome = front
            .wait(crate::config::STORE_POLL_MS)
            .and_then(|()| front.sync());
        match outcome {
            Ok(changed) => {
                if failing {
                    eprintln!("oracle serve: the store answers again");
                }
                failing = false;
                if changed > 0 {
                    watch.refresh_soon();
                }
            }
            Err(e) => {
                if !failing {
                    eprintln!("warning: oracle serve: mirroring the store: {e} (trying again)");
                }
                failing = true;
                std::thread::sleep(std::time::Duration::from_millis(RETRY_MS));
            }
        }
    }
}

/// SIGTERM or SIGINT (Ctrl-C).
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            // No handler could be installed: the default actions stay (the process ends).
            _ => std::future::pending::<()>().await,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
