//! Connections: accepted at most `connections_max` at once, each served by hyper's HTTP/1
//! under three clocks (a request's head, the idle time between requests, the gaps in a request
//! body), and ended gracefully when the server shuts down.
//!
//! Every connection holds a file descriptor and a task, so none may be held by a client that
//! does nothing: without these clocks, 20,000 half-sent requests held 20,000 descriptors until
//! the process ran out. The limits are in [`crate::config`]; docs/SECURITY.md lists them.
//!
//! - **Slots.** A connection is accepted only once one of `connections_max` slots is free; past
//!   it new connections wait in the kernel's listen backlog, unaccepted (no descriptor of ours),
//!   until one closes.
//! - **Heads.** hyper's `header_read_timeout`: a request's line and headers must arrive whole
//!   within `header_read_timeout_ms` of the server starting to wait for them (the connection's
//!   opening, or the end of the previous response); else the connection is closed.
//! - **Idle.** A connection that answers no request and has read nothing for
//!   `keep_alive_idle_ms` is closed (a watchdog per connection; hyper has no idle clock of its
//!   own on the server side beyond the head's).
//! - **Bodies.** A request body must keep arriving: a gap of `body_read_timeout_ms` between its
//!   pieces fails the read (400 for the request). A request that is being answered is never
//!   idle, so without this a client that announced a body and sent none would hold its slot.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body as AxumBody;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower_service::Service as _;

use crate::config::{ACCEPT_ERROR_PAUSE_MS, CONNECTION_BUFFER_BYTES_MAX, IDLE_CHECKS_PER_LIMIT};

/// The clocks and the slot count of a server's connections (from [`crate::Config`]).
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub connections_max: usize,
    pub header_read_timeout: Duration,
    pub keep_alive_idle: Duration,
    pub body_read_timeout: Duration,
}

/// Accepts connections on `listener` and serves `app` on each, until `stop` turns `true`; then
/// stops accepting, lets every connection finish what it is answering (hyper's graceful
/// shutdown: idle ones close at once) and returns when the last has closed.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
) {
    let slots_max = limits.connections_max.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(slots_max));
    loop {
        // A slot first: past the limit, connections wait in the backlog, never accepted.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stopped(&mut stop) => break,
        };
        let stream = tokio::select! {
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                Err(e) => {
                    accept_error(&e).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => break,
        };
        tokio::spawn(serve_one(stream, app.clone(), limits, stop.clone(), permit));
    }
    drop(listener);
    // Every slot given back: every connection has closed.
    let all = u32::try_from(slots_max).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}

/// Resolves once `stop` is `true` (or its sender is gone, which means the same).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// An error from `accept`: one connection's (reset before it was accepted) is skipped; any
/// other (out of file descriptors, say) pauses accepting for [`ACCEPT_ERROR_PAUSE_MS`] rather
/// than spinning, and is said on stderr.
async fn accept_error(e: &std::io::Error) {
    use std::io::ErrorKind as K;
    if matches!(
        e.kind(),
        K::ConnectionAborted | K::ConnectionReset | K::ConnectionRefused
    ) {
        return;
    }
    eprintln!("warning: oracle serve: accepting a connection: {e}; pausing");
    tokio::time::sleep(Duration::from_millis(ACCEPT_ERROR_PAUSE_MS)).await;
}

/// What a connection's watchdog reads: requests being answered, and when the connection last
/// read a byte or finished a response.
#[derive(Debug)]
struct Activity {
    epoch: Instant,
    busy: AtomicUsize,
    /// Milliseconds after `epoch`.
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            epoch: Instant::now(),
            busy: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// How long the connection has been idle: zero while a request is being answered.
    fn idle_for(&self) -> Duration {
        if self.busy.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        let last = self.last_ms.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }
}

/// Held from a request's arrival until its response body is dropped (written whole, or the
/// connection gone).
struct Busy(Arc<Activity>);

impl Busy {
    fn enter(a: &Arc<Activity>) -> Busy {
        a.busy.fetch_add(1, Ordering::Relaxed);
        a.touch();
        Busy(a.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one connection until it closes, the watchdog finds it idle, or the server stops.
async fn serve_one(
    stream: TcpStream,
    app: Router,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        io: stream,
        activity: activity.clone(),
    });
    let service = {
        let activity = activity.clone();
        let body_timeout = limits.body_read_timeout;
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let busy = Busy::enter(&activity);
            let req = req.map(|b| AxumBody::new(TimedBody::new(b, body_timeout)));
            let mut app = app.clone();
            async move {
                let response = app.call(req).await?;
                Ok::<_, Infallible>(
                    response.map(|body| AxumBody::new(BusyBody { body, _busy: busy })),
                )
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(CONNECTION_BUFFER_BYTES_MAX)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let tick = (limits.keep_alive_idle / IDLE_CHECKS_PER_LIMIT).max(Duration::from_millis(10));
    let mut closing = false;
    loop {
        if !closing && *stop.borrow() {
            closing = true;
            conn.as_mut().graceful_shutdown();
        }
        tokio::select! {
            // An error here is the client's (gone, malformed, too slow): nothing to report.
            _ = conn.as_mut() => break,
            _ = stop.changed(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep(tick) => {
                // Nothing is being answered: dropping the connection loses nothing.
                if activity.idle_for() >= limits.keep_alive_idle {
                    break;
                }
            }
        }
    }
}

/// The connection's socket, noting each read for the watchdog.
struct Watched {
    io: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A request body that fails when its next piece takes longer than the timeout to come.
struct TimedBody {
    inner: Incoming,
    timeout: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl TimedBody {
    fn new(inner: Incoming, timeout: Duration) -> TimedBody {
        TimedBody {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

/// Why a request body was given up on.
#[derive(Debug, thiserror::Error)]
#[error("the request body stopped arriving: nothing for body_read_timeout_ms = {0} ms")]
pub struct BodyTimeout(u128);

impl Body for TimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(got) => {
                let next = tokio::time::Instant::now() + this.timeout;
                this.deadline.as_mut().reset(next);
                Poll::Ready(got.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout.as_millis())))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its request counted as being answered until it is dropped.
struct BusyBody {
    body: AxumBody,
    _busy: Busy,
}

impl Body for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
