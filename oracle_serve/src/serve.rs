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
        let (stop, announcements) = (stop.clone(), state.backend.announcements());
        threads.push(std::thread::spawn(move || {
            crate::watch::beacon(program, delivered_path, rx, stop, announcements)
        }));
    }
    // Over a store, the mirror holds every run before the inbox is read (then a loop below
    // keeps it up to date).
    let backend = state.backend.clone();
    tokio::task::spawn_blocking(move || backend.catch_up())
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?
        .map_err(|e| std::io::Error::other(format!("--store: {e}")))?;
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

    // The backend's loops: over a store, the mirror (which has the watcher look at once when
    // it changed) and the store's schedules; on a file home, the timer wheel.
    let changed = {
        let watch = state.watch.clone();
        move || watch.refresh_soon()
    };
    let wheel = {
        let (st, stop) = (state.clone(), stop.clone());
        move || crate::signals::timer_wheel(&st, &stop)
    };
    let log = state.home.join(crate::config::RESUME_LOG_FILE);
    for each in state.backend.background_loops(&stop, &log, changed, wheel) {
        threads.push(std::thread::spawn(each));
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
