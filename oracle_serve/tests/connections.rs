//! The connection limits of `oracle serve` (`oracle_serve::conn`): a server run in-process on
//! 127.0.0.1 with short clocks, so each test waits a fraction of a second for what the real
//! server does after seconds. Every wait is bounded (`WAIT_S_MAX`); the tests assert only that
//! something happened before that bound, never how fast.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use oracle_serve::Config;
use oracle_serve::config::{CONNECTIONS_BESIDE_STREAMS_MAX, STREAMS_MAX};

/// The longest any test here waits for the server to do something.
const WAIT_S_MAX: u64 = 10;
/// A clock the tests want to reach: short.
const SHORT_MS: u64 = 300;
/// A clock the tests do not want to reach: longer than any wait.
const LONG_MS: u64 = 120_000;

/// A server on its own runtime, stopped (gracefully) when dropped.
struct TestServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _home: tempfile::TempDir,
}

impl TestServer {
    /// A `--read-open` server with every clock long, then changed by `adjust`.
    fn start(adjust: impl FnOnce(&mut Config)) -> TestServer {
        let home = tempfile::tempdir().unwrap();
        let mut config = Config::new(home.path());
        config.read_open = true;
        config.header_read_timeout_ms = LONG_MS;
        config.keep_alive_idle_ms = LONG_MS;
        config.body_read_timeout_ms = LONG_MS;
        adjust(&mut config);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        config.listen = addr;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let stop = async move {
                    let _ = rx.await;
                };
                oracle_serve::serve::serve_on(listener, config, None, stop)
                    .await
                    .unwrap();
            });
        });
        TestServer {
            addr,
            stop: Some(tx),
            thread: Some(thread),
            _home: home,
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(WAIT_S_MAX)))
            .unwrap();
        s
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How a connection ended for the reader: closed by the server (with what it said first), or
/// still open when the read timed out.
#[derive(Debug, PartialEq)]
enum End {
    Closed(String),
    StillOpen,
}

/// Reads until the server closes the connection or `WAIT_S_MAX` passes without a byte.
fn read_to_close(s: &mut TcpStream) -> End {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return End::Closed(String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return End::StillOpen;
            }
            // Reset by the server: closed too.
            Err(_) => return End::Closed(String::from_utf8_lossy(&got).into_owned()),
        }
    }
}

/// One whole response on a keep-alive connection (the API's answers carry a length).
fn read_response(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed before a response: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= len {
                return text;
            }
        }
    }
}

const WHOAMI: &[u8] = b"GET /api/v1/whoami HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

#[test]
fn a_half_sent_request_is_closed_after_the_header_read_timeout() {
    let server = TestServer::start(|c| c.header_read_timeout_ms = SHORT_MS);
    // Half a request line, then nothing.
    let mut s = server.connect();
    let start = Instant::now();
    s.write_all(b"GET /api/v1/whoami HT").unwrap();
    assert!(matches!(read_to_close(&mut s), End::Closed(_)));
    assert!(start.elapsed() < Duration::from_secs(WAIT_S_MAX));
    // Headers trickled a byte at a time, each well within the clock: the head as a whole must
    // still arrive in time.
    let mut s = server.connect();
    s.write_all(b"GET /api/v1/whoami HTTP/1.1\r\nX-Slow: ")
        .unwrap();
    let start = Instant::now();
    let mut closed = false;
    while start.elapsed() < Duration::from_secs(WAIT_S_MAX) {
        std::thread::sleep(Duration::from_millis(SHORT_MS / 6));
        if s.write_all(b"a").is_err() {
            closed = true;
            break;
        }
    }
    assert!(closed || matches!(read_to_close(&mut s), End::Closed(_)));
    // A whole request in time is answered.
    let mut s = server.connect();
    s.write_all(WHOAMI).unwrap();
    assert!(read_response(&mut s).starts_with("HTTP/1.1 200"));
}

#[test]
fn an_idle_connection_is_closed_after_the_keep_alive_idle_limit() {
    let server = TestServer::start(|c| c.keep_alive_idle_ms = SHORT_MS);
    // After a response, nothing more: closed.
    let mut s = server.connect();
    s.write_all(WHOAMI).unwrap();
    assert!(read_response(&mut s).starts_with("HTTP/1.1 200"));
    assert_eq!(read_to_close(&mut s), End::Closed(String::new()));
    // Opened and never used: closed too (the head's clock is long here).
    let mut s = server.connect();
    assert_eq!(read_to_close(&mut s), End::Closed(String::new()));
    // A connection kept busy with requests stays open across several idle limits.
    let mut s = server.connect();
    for _ in 0..6 {
        s.write_all(WHOAMI).unwrap();
        assert!(read_response(&mut s).starts_with("HTTP/1.1 200"));
        std::thread::sleep(Duration::from_millis(SHORT_MS / 3));
    }
}

#[test]
fn a_request_body_that_stops_arriving_fails_after_the_body_read_timeout() {
    let server = TestServer::start(|c| c.body_read_timeout_ms = SHORT_MS);
    let mut s = server.connect();
    let start = Instant::now();
    s.write_all(
        b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"token\": ",
    )
    .unwrap();
    match read_to_close(&mut s) {
        End::Closed(text) => assert!(text.starts_with("HTTP/1.1 400"), "{text}"),
        End::StillOpen => panic!("a stalled body held the connection"),
    }
    assert!(start.elapsed() < Duration::from_secs(WAIT_S_MAX));
}

#[test]
fn connections_past_the_limit_wait_until_one_closes() {
    assert_eq!(
        Config::new(std::path::Path::new("/h")).connections_max(),
        STREAMS_MAX + CONNECTIONS_BESIDE_STREAMS_MAX
    );
    let server = TestServer::start(|c| c.connections_max = Some(2));
    let mut a = server.connect();
    let mut b = server.connect();
    for s in [&mut a, &mut b] {
        s.write_all(WHOAMI).unwrap();
        assert!(read_response(s).starts_with("HTTP/1.1 200"));
    }
    // The third is not served while both are open...
    let mut c = server.connect();
    c.write_all(WHOAMI).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(SHORT_MS * 3)))
        .unwrap();
    let mut buf = [0u8; 64];
    match c.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("served past the limit: {other:?}"),
    }
    // ...and is once one of them closes.
    drop(a);
    c.set_read_timeout(Some(Duration::from_secs(WAIT_S_MAX)))
        .unwrap();
    assert!(read_response(&mut c).starts_with("HTTP/1.1 200"));
    // The others still work.
    b.write_all(WHOAMI).unwrap();
    assert!(read_response(&mut b).starts_with("HTTP/1.1 200"));
}

#[test]
fn a_request_head_past_the_connection_buffer_is_refused() {
    use oracle_serve::config::CONNECTION_BUFFER_BYTES_MAX;
    let server = TestServer::start(|_| {});
    let mut s = server.connect();
    // Header lines, each short, together past the buffer: read no further than it.
    let mut head = b"GET /api/v1/whoami HTTP/1.1\r\nHost: 127.0.0.1\r\n".to_vec();
    let line = format!("X-Pad: {}\r\n", "a".repeat(1000));
    while head.len() <= CONNECTION_BUFFER_BYTES_MAX + line.len() {
        head.extend_from_slice(line.as_bytes());
    }
    // The server may close before taking all of it.
    let _ = s.write_all(&head);
    match read_to_close(&mut s) {
        End::Closed(text) => assert!(
            text.is_empty() || text.starts_with("HTTP/1.1 431"),
            "{text}"
        ),
        End::StillOpen => panic!("a head past the buffer held the connection"),
    }
    // One within it is answered.
    let mut s = server.connect();
    s.write_all(WHOAMI).unwrap();
    assert!(read_response(&mut s).starts_with("HTTP/1.1 200"));
}
