//! A scripted stand-in for an OpenAI-compatible model server, listening on 127.0.0.1 only.
//!
//! Tests (and the README's model example) start it on a free port with a script: a list of
//! replies played in request order. Each reply is a JSON object; a `model` key makes it answer
//! only requests for that model id (so two tiers can share one server), and the first unplayed
//! reply that matches is played. What it can play, one field per behaviour:
//!
//! | field | reply |
//! | --- | --- |
//! | `content` (string) | 200, a chat completion with that message content |
//! | `json` (any value) | 200, a chat completion whose content is that value as JSON text |
//! | `tool_calls` (array) | 200, a chat completion with those tool calls and no content |
//! | `status` (+ `body`, `retry_after`) | that status, a JSON error body (or `body`), `Retry-After` in seconds |
//! | `raw` (+ `content_type`) | 200, exactly these bytes, `application/json` unless `content_type` |
//! | `huge_bytes` | 200, a well-formed completion at least this many bytes long |
//! | `truncate: true` | a completion whose `Content-Length` promises more than is sent |
//! | `close: true` | the connection closed without a reply |
//!
//! A request with `stream: true` gets a completion (`content`, `json`, `tool_calls`) as
//! server-sent events, the way OpenAI streams: the content cut into `chunks` pieces (default
//! [`STREAM_CHUNKS_DEFAULT`]) of `chat.completion.chunk` deltas, each tool call's arguments in
//! two pieces, the finish reason, a last chunk with `usage` when the request asked for it
//! (`stream_options.include_usage`), then `data: [DONE]`. `chunk_delay_ms` waits before each
//! event; `cut_after: N` closes the connection after N content pieces (no `[DONE]`).
//!
//! `delay_ms` waits before replying (a slow model), `finish_reason` and `usage` override the
//! defaults, `forever: true` keeps a reply in the script after it is played (a server that
//! always answers the same, for benchmarks), and `headers` (an object) adds response headers to a `status` or `raw` reply (a
//! redirect's `Location`, say). When the script is used up every request gets 500 "script exhausted". Every
//! request is kept (method, path, headers, body, the time it arrived) for the test to inspect, and is also served
//! at `GET /requests`.
//!
//! Deliberately absent: TLS, keep-alive (every reply says `Connection: close`), chunked
//! request bodies, and any listening address but loopback.

pub mod program;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

/// Largest request the stub reads (header and body together): tests never send more, and a
/// bound keeps a confused client from growing the stub without limit.
pub const REQUEST_BYTES_MAX: u64 = 16 << 20;
/// Longest a connection may take to send its request before the stub gives up on it.
pub const READ_TIMEOUT_MS: u64 = 10_000;
/// Pieces a streamed reply's content is cut into unless the reply says `chunks`: more than
/// one, so a watcher sees a reply arrive in pieces.
pub const STREAM_CHUNKS_DEFAULT: u64 = 4;

/// One request as received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// When its request line arrived, in wall-clock milliseconds since the Unix epoch: what a
    /// provider counts a rate limit by (tests check a binding's rate against it).
    pub received_ms: u64,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn to_json(&self) -> Value {
        let headers: serde_json::Map<String, Value> = self
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), Value::String(v.clone())))
            .collect();
        json!({"method": self.method, "path": self.path, "headers": headers, "body": self.body, "received_ms": self.received_ms})
    }
}

struct Shared {
    script: Mutex<Vec<(bool, Value)>>,
    requests: Mutex<Vec<Request>>,
    stop: AtomicBool,
    /// Connections being served now.
    busy: AtomicU64,
}

/// A running stub. Dropping it stops it (the listening socket closes at once; a reply being
/// delayed finishes first).
pub struct Stub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<thread::JoinHandle<()>>,
}

impl Stub {
    /// Starts a stub on 127.0.0.1 and a free port.
    pub fn start(script: Vec<Value>) -> io::Result<Stub> {
        Stub::start_on("127.0.0.1:0", script)
    }

    /// Starts a stub on `addr`, which must be a loopback address.
    pub fn start_on(addr: &str, script: Vec<Value>) -> io::Result<Stub> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        if !addr.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{addr} is not a loopback address: the stub listens on 127.0.0.1 only"),
            ));
        }
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into_iter().map(|r| (false, r)).collect()),
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            busy: AtomicU64::new(0),
        });
        let accept = {
            let shared = shared.clone();
            thread::spawn(move || {
                for conn in listener.incoming() {
                    if shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let shared = shared.clone();
                    shared.busy.fetch_add(1, Ordering::SeqCst);
                    thread::spawn(move || {
                        let _ = serve(conn, &shared);
                        shared.busy.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            })
        };
        Ok(Stub {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The base URL to bind a model to: `http://127.0.0.1:PORT/v1`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The requests received so far (not counting `GET /requests`).
    pub fn requests(&self) -> Vec<Request> {
        self.shared
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Whether every scripted reply has been played and sent.
    pub fn finished(&self) -> bool {
        self.unplayed() == 0 && self.shared.busy.load(Ordering::SeqCst) == 0
    }

    /// How many scripted replies are still to be played.
    pub fn unplayed(&self) -> usize {
        self.shared
            .script
            .lock()
            .map(|s| s.iter().filter(|(played, _)| !played).count())
            .unwrap_or(0)
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// Why a script does not read ([`parse_script`]).
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("the script must be a JSON array or JSON lines")]
    NotArray,
    #[error("the script is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// `line` counts from 1.
    #[error("line {line}: {source}")]
    Line {
        line: usize,
        source: serde_json::Error,
    },
}

/// Reads a script: a JSON array of replies, or one reply per line (blank lines and lines
/// starting with `#` skipped).
pub fn parse_script(text: &str) -> Result<Vec<Value>, ScriptError> {
    if text.trim_start().starts_with('[') {
        return match serde_json::from_str(text) {
            Ok(Value::Array(items)) => Ok(items),
            Ok(_) => Err(ScriptError::NotArray),
            Err(e) => Err(ScriptError::NotJson(e)),
        };
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|source| ScriptError::Line {
                line: i + 1,
                source,
            })
        })
        .collect()
}

fn serve(mut conn: TcpStream, shared: &Shared) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_millis(READ_TIMEOUT_MS)))?;
    let request = match read_request(&conn)? {
        Some(r) => r,
        None => return Ok(()),
    };
    if request.method == "GET" && request.path == "/requests" {
        let all: Vec<Value> = shared
            .requests
            .lock()
            .map(|r| r.iter().map(Request::to_json).collect())
            .unwrap_or_default();
        return respond(
            &mut conn,
            200,
            "application/json",
            &[],
            Value::Array(all).to_string().as_bytes(),
            None,
        );
    }
    let model = request
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if let Ok(mut r) = shared.requests.lock() {
        r.push(request.clone());
    }
    let reply = shared.script.lock().ok().and_then(|mut script| {
        let next = script.iter_mut().find(|(played, r)| {
            !played
                && r.get("model")
                    .and_then(Value::as_str)
                    .is_none_or(|m| m == model)
        })?;
        next.0 = next.1.get("forever").and_then(Value::as_bool) != Some(true);
        Some(next.1.clone())
    });
    let Some(reply) = reply else {
        let body = json!({"error": {"message": "oracle-llm-stub: script exhausted", "type": "server_error"}});
        return respond(
            &mut conn,
            500,
            "application/json",
            &[],
            body.to_string().as_bytes(),
            None,
        );
    };
    play(&mut conn, &request, &model, &reply)
}

fn play(conn: &mut TcpStream, request: &Request, model: &str, reply: &Value) -> io::Result<()> {
    if let Some(ms) = reply.get("delay_ms").and_then(Value::as_u64) {
        thread::sleep(Duration::from_millis(ms));
    }
    if reply.get("close").and_then(Value::as_bool) == Some(true) {
        return conn.shutdown(Shutdown::Both);
    }
    if let Some(status) = reply.get("status").and_then(Value::as_u64) {
        let body = match reply.get("body").and_then(Value::as_str) {
            Some(b) => b.to_owned(),
            None => {
                json!({"error": {"message": format!("scripted status {status}"), "type": "stub"}})
                    .to_string()
            }
        };
        let retry = reply
            .get("retry_after")
            .map(|v| v.as_str().map_or(v.to_string(), str::to_owned));
        let mut headers: Vec<(&str, String)> =
            retry.map(|r| ("Retry-After", r)).into_iter().collect();
        headers.extend(extra_headers(reply));
        return respond(
            conn,
            status as u16,
            "application/json",
            &headers,
            body.as_bytes(),
            None,
        );
    }
    if let Some(raw) = reply.get("raw").and_then(Value::as_str) {
        let ct = reply
            .get("content_type")
            .and_then(Value::as_str)
            .unwrap_or("application/json");
        return respond(conn, 200, ct, &extra_headers(reply), raw.as_bytes(), None);
    }
    let content = if let Some(n) = reply.get("huge_bytes").and_then(Value::as_u64) {
        Value::String("x".repeat(n as usize))
    } else if let Some(c) = reply.get("content") {
        c.clone()
    } else if let Some(v) = reply.get("json") {
        Value::String(v.to_string())
    } else {
        Value::Null
    };
    let tool_calls = reply.get("tool_calls").cloned();
    let finish = reply
        .get("finish_reason")
        .and_then(Value::as_str)
        .unwrap_or(if tool_calls.is_some() {
            "tool_calls"
        } else {
            "stop"
        });
    // Token counts a test can predict: a quarter of the characters, rounded up.
    let prompt_chars: usize = request
        .body
        .get("messages")
        .and_then(Value::as_array)
        .map(|m| {
            m.iter()
                .filter_map(|x| x.get("content").and_then(Value::as_str))
                .map(str::len)
                .sum()
        })
        .unwrap_or(0);
    let completion_chars = content.as_str().map_or(0, str::len);
    let usage = reply.get("usage").cloned().unwrap_or_else(|| {
        let (p, c) = (prompt_chars.div_ceil(4), completion_chars.div_ceil(4));
        json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})
    });
    let mut message = json!({"role": "assistant", "content": content});
    if let Some(calls) = tool_calls {
        message["tool_calls"] = calls;
    }
    if request.body.get("stream").and_then(Value::as_bool) == Some(true)
        && reply.get("truncate").is_none()
    {
        let include_usage = request
            .body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            == Some(true);
        let completion = Completion {
            model,
            message: &message,
            finish,
            usage: include_usage.then_some(&usage),
        };
        return stream(conn, reply, &completion);
    }
    let body = json!({
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    })
    .to_string();
    let truncate = reply.get("truncate").and_then(Value::as_bool) == Some(true);
    let claimed = truncate.then_some(body.len() * 2 + 16);
    let sent = if truncate {
        &body.as_bytes()[..body.len() / 2]
    } else {
        body.as_bytes()
    };
    respond(conn, 200, "application/json", &[], sent, claimed)
}

/// What a streamed reply sends, in pieces.
struct Completion<'a> {
    model: &'a str,
    message: &'a Value,
    finish: &'a str,
    /// Sent in a last chunk when the request asked for it.
    usage: Option<&'a Value>,
}

/// Plays a completion as server-sent events (see the module's doc), closing the connection
/// after `cut_after` content pieces when the reply says so.
fn stream(conn: &mut TcpStream, reply: &Value, c: &Completion<'_>) -> io::Result<()> {
    let delay = reply
        .get("chunk_delay_ms")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let cut_after = reply.get("cut_after").and_then(Value::as_u64);
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0,
            "model": c.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
    conn.write_all(head.as_bytes())?;
    let send = |conn: &mut TcpStream, event: &str| -> io::Result<()> {
        thread::sleep(Duration::from_millis(delay));
        conn.write_all(format!("data: {event}\n\n").as_bytes())?;
        conn.flush()
    };
    send(
        conn,
        &chunk(json!({"role": "assistant", "content": ""}), None).to_string(),
    )?;
    let content = c.message.get("content").and_then(Value::as_str);
    let chunks = reply
        .get("chunks")
        .and_then(Value::as_u64)
        .unwrap_or(STREAM_CHUNKS_DEFAULT);
    for (i, piece) in pieces(content.unwrap_or(""), chunks).iter().enumerate() {
        if cut_after.is_some_and(|n| i as u64 >= n) {
            return conn.shutdown(Shutdown::Both);
        }
        send(conn, &chunk(json!({"content": piece}), None).to_string())?;
    }
    let calls = c.message.get("tool_calls").and_then(Value::as_array);
    for (i, call) in calls.into_iter().flatten().enumerate() {
        let args = call
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("");
        for (j, part) in pieces(args, 2).iter().enumerate() {
            let mut d = json!({"index": i, "function": {"arguments": part}});
            if j == 0 {
                d["id"] = call.get("id").cloned().unwrap_or(Value::Null);
                d["type"] = json!("function");
                d["function"]["name"] = call.pointer("/function/name").cloned().unwrap_or_default();
            }
            send(conn, &chunk(json!({"tool_calls": [d]}), None).to_string())?;
        }
    }
    send(conn, &chunk(json!({}), Some(c.finish)).to_string())?;
    if let Some(usage) = c.usage {
        let last = json!({
            "id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0,
            "model": c.model, "choices": [], "usage": usage,
        });
        send(conn, &last.to_string())?;
    }
    send(conn, "[DONE]")?;
    conn.shutdown(Shutdown::Both)
}

/// `text` cut into at most `n` pieces of about equal length, on character boundaries (one
/// empty piece for empty text).
fn pieces(text: &str, n: u64) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n.max(1) as usize).max(1);
    let out: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
    if out.is_empty() && !text.is_empty() {
        return vec![text.to_owned()];
    }
    out
}

/// A reply's `headers` object, as header lines.
fn extra_headers(reply: &Value) -> Vec<(&str, String)> {
    reply
        .get("headers")
        .and_then(Value::as_object)
        .map(|h| {
            h.iter()
                .filter_map(|(n, v)| Some((n.as_str(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn respond(
    conn: &mut TcpStream,
    status: u16,
    content_type: &str,
    headers: &[(&str, String)],
    body: &[u8],
    claimed_len: Option<usize>,
) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        claimed_len.unwrap_or(body.len())
    );
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()?;
    conn.shutdown(Shutdown::Both)
}

fn read_request(conn: &TcpStream) -> io::Result<Option<Request>> {
    let mut reader = BufReader::new(conn.take(REQUEST_BYTES_MAX));
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        return Ok(None);
    };
    let received_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let (method, path) = (method.to_owned(), path.to_owned());
    let mut headers = Vec::new();
    let mut length = 0u64;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((n, v)) = h.split_once(':') {
            let (n, v) = (n.trim().to_ascii_lowercase(), v.trim().to_owned());
            if n == "content-length" {
                length = v.parse().unwrap_or(0);
            }
            headers.push((n, v));
        }
    }
    let mut body = Vec::new();
    reader
        .take(length.min(REQUEST_BYTES_MAX))
        .read_to_end(&mut body)?;
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    Ok(Some(Request {
        method,
        path,
        headers,
        body,
        received_ms,
    }))
}
