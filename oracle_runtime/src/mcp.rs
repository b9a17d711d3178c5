//! A small synchronous Model Context Protocol client over stdio: newline-delimited JSON-RPC
//! 2.0, spec revision [`PROTOCOL_VERSION`], enough to start a server, list its tools and call
//! them.
//!
//! Why a client of our own rather than an SDK (such as `rmcp`, which the example server uses):
//!
//! - **The runtime is synchronous.** Tools are called from the engine's threads; an async
//!   runtime would enter the engine for this one use.
//! - **Every call has its own deadline.** [`Connection::start`], [`Connection::list_tools`] and
//!   [`Connection::call`] each take a timeout; past it the server is killed and the call fails
//!   with [`McpError::Timeout`].
//! - **Every read is bounded in bytes.** One message (a line) may hold at most the
//!   `message_bytes_max` given to [`Connection::start`] ([`MESSAGE_BYTES_MAX`] by default): a
//!   hostile server printing a gigabyte without a newline costs that many bytes, not a
//!   gigabyte. (A parsed message may take a few times its bytes in memory.) Only the last
//!   [`STDERR_KEPT_BYTES_MAX`] bytes of the server's stderr are kept, to explain a failure.
//! - **The server is killed as a whole process group.** It leads a group of its own, like every
//!   program oracle runs (`crate::oracle::group`), and whatever it started goes with it.
//!
//! One call at a time per server: a [`Connection`] is `Send + Sync`, and calls from several
//! threads wait for each other. Requests carry increasing integer ids and there is never more
//! than one outstanding, so a response must carry the id of the request waiting for it.
//! Notifications from the server are ignored; a `ping` request from the server is answered
//! with an empty result and any other request with JSON-RPC error -32601 (the client offers no
//! capabilities).
//!
//! After any failure other than [`McpError::Rpc`] (the server answered a request with a
//! JSON-RPC error, which leaves it usable) the connection is dead: the server's group is killed
//! at once and later calls fail with [`McpError::Closed`]. Dropping a [`Connection`] kills the
//! group too.
//!
//! Error messages ([`McpError`]'s `Display`) end up in recorded, hashed events, so they hold
//! nothing that differs between machines or runs: no absolute paths (the program is named by its
//! file name), no pids, no measured durations (the configured timeout only). They may quote what
//! the server sent (bounded), which a deterministic server sends the same way every time.

use std::io::{self, BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::oracle::group;
use crate::tools::io_reason;

/// The MCP spec revision this client speaks (sent in `initialize`).
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// Most bytes of one JSON-RPC message from a server (a line). Default 8 MiB.
pub const MESSAGE_BYTES_MAX: u64 = 8 << 20;
/// Most tools one server may list (over all pages).
pub const TOOLS_MAX: usize = 256;
/// Most pages of tools/list followed.
pub const LIST_PAGES_MAX: u32 = 16;
/// How long `start` waits for the `initialize` reply (ms) by default.
pub const START_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Bytes of the server's stderr kept (the last ones) to explain a failure.
pub const STDERR_KEPT_BYTES_MAX: usize = 4096;

/// Most bytes of text from the server quoted in an error message (a JSON-RPC error's message,
/// the start of a malformed line, a tool name): enough to recognise it, and an error, which is
/// recorded, cannot be made to hold megabytes.
const QUOTED_BYTES_MAX: usize = 512;

/// Messages to the server waiting to be written. The client itself has at most one request
/// outstanding; the rest are answers to the server's pings, so a full queue means the server
/// keeps asking without reading the answers, and the connection fails rather than grow.
const WRITES_QUEUED_MAX: usize = 64;

/// After the server closes its output, how long (ms) it may take to exit by itself before its
/// group is killed: only to learn its exit status for [`McpError::Exited`]. A server that
/// closes its output and runs on is reported without a status.
const EXIT_GRACE_MS: u64 = 200;

/// Once the server's group is gone, how long (ms) the stderr reader may take to gather the last
/// bytes the server wrote, so a crash's message is reported whole.
const STDERR_DRAIN_MS: u64 = 100;

/// The longest timeout honoured as given (a year); longer ones are treated as this, so a
/// deadline cannot overflow.
const TIMEOUT_MS_CAP: u64 = 365 * 24 * 60 * 60 * 1000;

/// How to start a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerCommand {
    /// The program: a path (relative ones are taken from `cwd`). The environment is cleared, so
    /// a bare name is found only through a `PATH` that `env` sets.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment: nothing of oracle's own environment is passed on, so what a
    /// server does depends on what the caller configured, not on the machine's variables.
    pub env: Vec<(String, String)>,
    /// Its working directory.
    pub cwd: PathBuf,
}

/// Who the server said it is, in its answer to `initialize`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// The `protocolVersion` the server chose. It may differ from [`PROTOCOL_VERSION`]; the
    /// caller decides whether to go on.
    pub protocol_version: String,
}

/// One tool from `tools/list`.
#[derive(Clone, Debug, PartialEq)]
pub struct ListedTool {
    /// Its name, unique among the server's tools.
    pub name: String,
    /// Its description (empty when the server gave none).
    pub description: String,
    /// JSON Schema of its arguments: always an object.
    pub input_schema: Value,
    /// JSON Schema of its `structuredContent`, if the server declared one: an object.
    pub output_schema: Option<Value>,
}

/// Why talking to a server failed. Every variant but [`McpError::Rpc`] leaves the connection
/// dead (its server killed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The program could not be started.
    #[error("cannot start the MCP server `{program}`: {reason}")]
    Spawn {
        /// The program's file name (never its whole path).
        program: String,
        /// Why, without OS error numbers.
        reason: String,
    },
    /// No answer within the timeout; the server was killed.
    #[error("the MCP server did not answer `{what}` within {timeout_ms} ms")]
    Timeout {
        /// The method asked (`initialize`, `tools/list`, `tools/call`).
        what: String,
        /// The configured timeout.
        timeout_ms: u64,
    },
    /// The server closed its output (it exited, most likely).
    #[error(
        "the MCP server closed its output ({}){}",
        exit_status(*.status),
        stderr_suffix(.stderr_tail)
    )]
    Exited {
        /// Its exit code if it exited by itself; `None` if a signal ended it or it ran on after
        /// closing its output (and was killed).
        status: Option<i32>,
        /// The end of what it wrote to stderr (at most [`STDERR_KEPT_BYTES_MAX`] bytes),
        /// trimmed.
        stderr_tail: String,
    },
    /// A message longer than the limit.
    #[error("the MCP server sent a message larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// A line that is not JSON, JSON that is not a JSON-RPC 2.0 message, or a response to no
    /// request waiting.
    #[error("the MCP server sent a malformed message: {detail}")]
    Malformed {
        /// What is wrong with it.
        detail: String,
    },
    /// The server answered the request with a JSON-RPC error. The connection stays usable.
    #[error("the MCP server answered with error {code}: {message}")]
    Rpc {
        /// The JSON-RPC error code.
        code: i64,
        /// Its message (at most [`QUOTED_BYTES_MAX`] bytes of it).
        message: String,
    },
    /// Well-formed JSON-RPC that breaks MCP (or this client's limits): a result without the
    /// fields it must have, too many tools, a name listed twice.
    #[error("the MCP server broke the protocol: {detail}")]
    Protocol {
        /// What is wrong.
        detail: String,
    },
    /// The connection is unusable after an earlier failure.
    #[error("the connection to the MCP server is closed after an earlier failure")]
    Closed,
}

fn exit_status(status: Option<i32>) -> String {
    match status {
        Some(code) => format!("exit status {code}"),
        None => "no exit status".to_owned(),
    }
}

fn stderr_suffix(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends with: {tail}")
    }
}

/// A running server, initialized. Dropping it kills the server's process group.
pub struct Connection {
    info: ServerInfo,
    /// Everything a call changes: one call at a time.
    inner: Mutex<Inner>,
}

/// What the reader of the server's output hands to the caller.
enum Incoming {
    /// A response: its id, and its result or its error's code and message.
    Response {
        id: Value,
        outcome: Result<Value, (i64, String)>,
    },
    /// The reader stopped: at the end of the output (`None`) or on a failure. Always the last.
    Ended(Option<McpError>),
}

/// The mutable part of a [`Connection`].
struct Inner {
    /// The server; `None` once its group is killed and it is reaped.
    child: Option<Child>,
    /// Lines to write to the server's stdin (by the writer thread, so that a server not
    /// reading its input cannot block a call past its deadline).
    to_server: SyncSender<Vec<u8>>,
    /// Responses and the end, from the reader thread.
    from_server: Receiver<Incoming>,
    /// The last bytes of the server's stderr.
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    /// Disconnects when the stderr reader has stopped.
    stderr_done: Receiver<()>,
    /// The id of the next request.
    next_id: u64,
    /// Set after a failure other than [`McpError::Rpc`]: every later call is refused.
    dead: bool,
}

impl Connection {
    /// Spawns the server (its own process group, env cleared then only `cmd.env` set, cwd =
    /// `cmd.cwd`, stdin/stdout piped, stderr piped to a bounded reader thread keeping the last
    /// [`STDERR_KEPT_BYTES_MAX`] bytes), sends `initialize` {protocolVersion, capabilities: {},
    /// clientInfo: {name: "oracle", version}}, waits for its result up to `timeout_ms`, checks
    /// it (`serverInfo` name and version, `protocolVersion`: strings), then sends
    /// `notifications/initialized`. No message from the server may exceed
    /// `message_bytes_max` bytes ([`MESSAGE_BYTES_MAX`] is the usual value).
    pub fn start(
        cmd: &ServerCommand,
        timeout_ms: u64,
        message_bytes_max: u64,
    ) -> Result<Connection, McpError> {
        let deadline = deadline(timeout_ms);
        let shown = shown_name(&cmd.program);
        // A relative path with a separator is relative to the server's directory: resolved
        // here, because how `Command` combines one with `current_dir` differs by platform.
        let program = if cmd.program.is_relative() && cmd.program.components().count() > 1 {
            cmd.cwd.join(&cmd.program)
        } else {
            cmd.program.clone()
        };
        let mut command = Command::new(program);
        group::own(&mut command)
            .args(&cmd.args)
            .current_dir(&cmd.cwd)
            .env_clear()
            .envs(cmd.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let spawn_failed = |reason: String| McpError::Spawn {
            program: shown.clone(),
            reason,
        };
        let child = command.spawn().map_err(|e| spawn_failed(io_reason(&e)))?;
        let inner =
            Inner::attach(child, message_bytes_max).map_err(|e| spawn_failed(e.to_string()))?;
        let mut connection = Connection {
            info: ServerInfo {
                name: String::new(),
                version: String::new(),
                protocol_version: String::new(),
            },
            inner: Mutex::new(inner),
        };
        // From here on a failure drops `connection`, which kills the server.
        connection.info = connection.with_inner(|inner| {
            let params = json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "oracle", "version": env!("CARGO_PKG_VERSION")},
            });
            let result = inner.request("initialize", params, timeout_ms, deadline)?;
            let info = server_info(&result)?;
            inner.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
            Ok(info)
        })?;
        Ok(connection)
    }

    /// Who the server said it is.
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    /// `tools/list`, following `nextCursor` up to [`LIST_PAGES_MAX`] pages, all within
    /// `timeout_ms`; refuses more than [`TOOLS_MAX`] tools, duplicate names, a tool without a
    /// name or an `inputSchema` that is not an object (or an `outputSchema` that is neither
    /// absent nor an object). Tools keep the server's order.
    pub fn list_tools(&self, timeout_ms: u64) -> Result<Vec<ListedTool>, McpError> {
        let deadline = deadline(timeout_ms);
        self.with_inner(|inner| {
            let mut tools: Vec<ListedTool> = Vec::new();
            let mut cursor: Option<String> = None;
            for page in 1..=LIST_PAGES_MAX {
                let params = match &cursor {
                    Some(c) => json!({"cursor": c}),
                    None => json!({}),
                };
                let result = inner.request("tools/list", params, timeout_ms, deadline)?;
                cursor = tools_page(&result, page, &mut tools)?;
                if cursor.is_none() {
                    return Ok(tools);
                }
            }
            Err(protocol(format!(
                "`tools/list` has more than {LIST_PAGES_MAX} pages"
            )))
        })
    }

    /// `tools/call` {name: `tool`, arguments}; returns the `result` object as the server sent it
    /// (the caller maps `content`, `structuredContent`, `isError`). A tool that failed is
    /// usually a result with `isError: true`, not an error here.
    pub fn call(&self, tool: &str, arguments: &Value, timeout_ms: u64) -> Result<Value, McpError> {
        let deadline = deadline(timeout_ms);
        self.with_inner(|inner| {
            let params = json!({"name": tool, "arguments": arguments});
            let result = inner.request("tools/call", params, timeout_ms, deadline)?;
            if !result.is_object() {
                return Err(protocol(format!(
                    "the `tools/call` result is {}, not an object",
                    json_type(&result)
                )));
            }
            Ok(result)
        })
    }

    /// Runs `f` on the live connection; after any failure but [`McpError::Rpc`], kills the
    /// server and marks the connection dead.
    fn with_inner<T>(
        &self,
        f: impl FnOnce(&mut Inner) -> Result<T, McpError>,
    ) -> Result<T, McpError> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.dead {
            return Err(McpError::Closed);
        }
        let result = f(&mut inner);
        if let Err(e) = &result
            && !matches!(e, McpError::Rpc { .. })
        {
            inner.dead = true;
            inner.shut();
        }
        result
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // SIGKILL cannot be ignored, so the reap that follows is quick. The reader threads stop
        // when the pipes close; nobody waits for them.
        self.inner
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .shut();
    }
}

/// Why a started server's pipes cannot be served: the reason of an [`McpError::Spawn`].
#[derive(Debug, thiserror::Error)]
enum PipeError {
    #[error("its standard streams could not be piped")]
    NotPiped,
    /// `reason` is [`io_reason`]'s, without OS error numbers.
    #[error("cannot start a thread: {reason}")]
    Thread { reason: String },
}

/// Why a JSON value is no JSON-RPC 2.0 message: the detail of an [`McpError::Malformed`].
/// `ty` names a JSON type as `json_type` does.
#[derive(Debug, thiserror::Error)]
enum NotRpc {
    #[error("{ty} where a JSON-RPC message (an object) belongs")]
    NotObject { ty: &'static str },
    #[error(r#"not a JSON-RPC 2.0 message (`jsonrpc` is not "2.0")"#)]
    Version,
    #[error("`method` is {ty}, not a string")]
    Method { ty: &'static str },
    #[error("a request whose `id` is {ty}, not a string or a number")]
    Id { ty: &'static str },
    #[error("a message with neither `method` nor `id`")]
    Neither,
    #[error("a response with both `result` and `error`")]
    Both,
    #[error("a response with neither `result` nor `error`")]
    NoOutcome,
    #[error("an error response without an integer `code` and a string `message`")]
    ErrorShape,
}

impl Inner {
    /// Takes over `child`: starts the threads that serve its pipes. If one cannot start, kills
    /// the child and says why.
    fn attach(mut child: Child, message_bytes_max: u64) -> Result<Inner, PipeError> {
        let (to_server, writes) = mpsc::sync_channel(WRITES_QUEUED_MAX);
        // Room for one message: a server sending responses nobody asked for is held back by its
        // pipe (the reader waits), not buffered without bound.
        let (to_caller, from_server) = mpsc::sync_channel(1);
        let (stderr_open, stderr_done) = mpsc::channel();
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        let served = serve_pipes(
            &mut child,
            message_bytes_max,
            writes,
            (to_caller, to_server.clone()),
            Arc::clone(&stderr_tail),
            stderr_open,
        );
        let mut inner = Inner {
            child: Some(child),
            to_server,
            from_server,
            stderr_tail,
            stderr_done,
            next_id: 1,
            dead: false,
        };
        match served {
            Ok(()) => Ok(inner),
            Err(reason) => {
                inner.shut();
                Err(reason)
            }
        }
    }

    /// Queues one message for the server.
    fn send(&mut self, message: &Value) -> Result<(), McpError> {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        match self.to_server.try_send(line) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(protocol(
                "the server sends requests faster than it reads the answers".to_owned(),
            )),
            // The writer stopped: the server closed its input. How it ended is what the reader
            // reports next (or the deadline passes).
            Err(TrySendError::Disconnected(_)) => Ok(()),
        }
    }

    /// Sends request `method` and waits for its response until `deadline`.
    fn request(
        &mut self,
        method: &str,
        params: Value,
        timeout_ms: u64,
        deadline: Instant,
    ) -> Result<Value, McpError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.from_server.recv_timeout(wait) {
            Ok(Incoming::Response { id: got, outcome }) => {
                // One request is outstanding, so a JSON-RPC error with a null id (the server
                // could not read the request) can only be about it.
                let about_it = got.as_u64() == Some(id) || (got.is_null() && outcome.is_err());
                if !about_it {
                    return Err(malformed(format!(
                        "a response with id {} while request {id} waits for its answer",
                        quote(got.to_string().as_bytes())
                    )));
                }
                outcome.map_err(|(code, message)| McpError::Rpc { code, message })
            }
            Ok(Incoming::Ended(Some(failure))) => Err(failure),
            Ok(Incoming::Ended(None)) | Err(RecvTimeoutError::Disconnected) => Err(self.exited()),
            Err(RecvTimeoutError::Timeout) => Err(McpError::Timeout {
                what: method.to_owned(),
                timeout_ms,
            }),
        }
    }

    /// The server closed its output: gives it [`EXIT_GRACE_MS`] to exit, kills its group, and
    /// says how it ended.
    fn exited(&mut self) -> McpError {
        let until = Instant::now() + Duration::from_millis(EXIT_GRACE_MS);
        let by_itself = loop {
            match self.child.as_mut().map(group::exited) {
                Some(Ok(true)) => break true,
                Some(Ok(false)) if Instant::now() < until => {
                    thread::sleep(Duration::from_millis(2));
                }
                _ => break false,
            }
        };
        let status = self.shut();
        // The group is gone, so the stderr pipe closes and its reader takes the last bytes.
        let _ = self
            .stderr_done
            .recv_timeout(Duration::from_millis(STDERR_DRAIN_MS));
        let tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        McpError::Exited {
            status: status.filter(|_| by_itself).and_then(|s| s.code()),
            stderr_tail: tail_text(&tail),
        }
    }

    /// Kills the server's group and reaps the server, once; returns its exit status if known.
    fn shut(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        group::kill_and_reap(&mut child).ok()
    }
}

/// The deadline of a call starting now.
fn deadline(timeout_ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(timeout_ms.min(TIMEOUT_MS_CAP))
}

/// The program as error messages name it: its file name only, never a path that differs
/// between machines.
fn shown_name(program: &Path) -> String {
    program.file_name().map_or_else(
        || program.to_string_lossy().into_owned(),
        |name| name.to_string_lossy().into_owned(),
    )
}

fn malformed(detail: String) -> McpError {
    McpError::Malformed { detail }
}

fn protocol(detail: String) -> McpError {
    McpError::Protocol { detail }
}

/// "an object", "a string"...: the JSON name of a value's type, for messages.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// At most [`QUOTED_BYTES_MAX`] bytes of `bytes`, as text in backquotes with control
/// characters escaped (so a quote cannot break the message's line).
fn quote(bytes: &[u8]) -> String {
    let cut = bytes.len() > QUOTED_BYTES_MAX;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(QUOTED_BYTES_MAX)]);
    format!(
        "`{}`{}",
        text.escape_debug(),
        if cut { " (cut)" } else { "" }
    )
}

/// `s` cut to at most [`QUOTED_BYTES_MAX`] bytes, at a character boundary.
fn bounded(s: &str) -> String {
    let mut end = s.len().min(QUOTED_BYTES_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// The kept stderr as text: lossy UTF-8 (a cut character at the start is skipped), trimmed.
fn tail_text(bytes: &[u8]) -> String {
    let start = bytes
        .iter()
        .position(|b| (b & 0xC0) != 0x80)
        .unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).trim().to_owned()
}

/// Checks the result of `initialize`.
fn server_info(result: &Value) -> Result<ServerInfo, McpError> {
    let string = |v: Option<&Value>, what: &str| match v {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(protocol(format!(
            "the `initialize` result has no string `{what}`"
        ))),
    };
    let server = result.get("serverInfo");
    Ok(ServerInfo {
        protocol_version: string(result.get("protocolVersion"), "protocolVersion")?,
        name: string(server.and_then(|s| s.get("name")), "serverInfo.name")?,
        version: string(server.and_then(|s| s.get("version")), "serverInfo.version")?,
    })
}

/// Adds the tools of one `tools/list` result (page `page`) to `tools`; returns its
/// `nextCursor`.
fn tools_page(
    result: &Value,
    page: u32,
    tools: &mut Vec<ListedTool>,
) -> Result<Option<String>, McpError> {
    let Some(listed) = result.get("tools").and_then(Value::as_array) else {
        return Err(protocol(format!(
            "the `tools/list` result (page {page}) has no `tools` array"
        )));
    };
    for (i, tool) in listed.iter().enumerate() {
        if tools.len() == TOOLS_MAX {
            return Err(protocol(format!("more than {TOOLS_MAX} tools are listed")));
        }
        let name = match tool.get("name") {
            Some(Value::String(name)) if !name.is_empty() => name,
            _ => {
                return Err(protocol(format!(
                    "tool {i} of `tools/list` page {page} has no name"
                )));
            }
        };
        let shown = quote(name.as_bytes());
        if tools.iter().any(|t| t.name == *name) {
            return Err(protocol(format!("tool {shown} is listed twice")));
        }
        let description = match tool.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(d)) => d.clone(),
            Some(other) => {
                return Err(protocol(format!(
                    "the description of tool {shown} is {}, not a string",
                    json_type(other)
                )));
            }
        };
        let input_schema = match tool.get("inputSchema") {
            Some(schema @ Value::Object(_)) => schema.clone(),
            other => {
                return Err(protocol(format!(
                    "the `inputSchema` of tool {shown} is {}, not an object",
                    other.map_or("missing", json_type)
                )));
            }
        };
        let output_schema = match tool.get("outputSchema") {
            None | Some(Value::Null) => None,
            Some(schema @ Value::Object(_)) => Some(schema.clone()),
            Some(other) => {
                return Err(protocol(format!(
                    "the `outputSchema` of tool {shown} is {}, not an object",
                    json_type(other)
                )));
            }
        };
        tools.push(ListedTool {
            name: name.clone(),
            description,
            input_schema,
            output_schema,
        });
    }
    match result.get("nextCursor") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(c)) => Ok(Some(c.clone())),
        Some(other) => Err(protocol(format!(
            "`nextCursor` (page {page}) is {}, not a string",
            json_type(other)
        ))),
    }
}

/// Starts the three threads of a server's pipes: the writer of its stdin (fed by `writes`), the
/// reader of its stdout (to the caller, answering the server's requests through the writer),
/// and the keeper of its stderr's tail (which drops `stderr_open` when it stops).
fn serve_pipes(
    child: &mut Child,
    message_bytes_max: u64,
    writes: Receiver<Vec<u8>>,
    (to_caller, answers): (SyncSender<Incoming>, SyncSender<Vec<u8>>),
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    stderr_open: mpsc::Sender<()>,
) -> Result<(), PipeError> {
    let stdin = child.stdin.take().ok_or(PipeError::NotPiped)?;
    let stdout = child.stdout.take().ok_or(PipeError::NotPiped)?;
    let stderr = child.stderr.take().ok_or(PipeError::NotPiped)?;
    let thread_failed = |e: io::Error| PipeError::Thread {
        reason: io_reason(&e),
    };
    thread::Builder::new()
        .name("mcp stdin".to_owned())
        .spawn(move || write_messages(stdin, &writes))
        .map_err(thread_failed)?;
    thread::Builder::new()
        .name("mcp stdout".to_owned())
        .spawn(move || {
            let ended = read_messages(stdout, message_bytes_max, &to_caller, &answers);
            // The caller may be gone (the connection dropped): nobody to tell then.
            let _ = to_caller.send(Incoming::Ended(ended));
        })
        .map_err(thread_failed)?;
    thread::Builder::new()
        .name("mcp stderr".to_owned())
        .spawn(move || {
            keep_tail(stderr, &stderr_tail);
            drop(stderr_open);
        })
        .map_err(thread_failed)?;
    Ok(())
}

/// Writes each queued line to the server's stdin, until the queue closes or a write fails (the
/// server closed its input, or its group was killed).
fn write_messages(mut stdin: ChildStdin, lines: &Receiver<Vec<u8>>) {
    for line in lines {
        if stdin.write_all(&line).and_then(|()| stdin.flush()).is_err() {
            return;
        }
    }
}

/// Keeps the last [`STDERR_KEPT_BYTES_MAX`] bytes of the server's stderr in `tail`, until it
/// closes.
fn keep_tail(mut stderr: ChildStderr, tail: &Mutex<Vec<u8>>) {
    let mut chunk = [0u8; 4096];
    loop {
        match stderr.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => {
                let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                tail.extend_from_slice(&chunk[..n]);
                let over = tail.len().saturating_sub(STDERR_KEPT_BYTES_MAX);
                tail.drain(..over);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Reads the server's output line by line, each at most `max` bytes, until it ends (`None`) or
/// fails. Responses go to the caller; requests are answered through `answers`; notifications
/// are dropped. Also returns `None` once the caller is gone.
fn read_messages(
    stdout: ChildStdout,
    max: u64,
    to_caller: &SyncSender<Incoming>,
    answers: &SyncSender<Vec<u8>>,
) -> Option<McpError> {
    let mut reader = BufReader::with_capacity(64 << 10, stdout);
    let mut line: Vec<u8> = Vec::new();
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Some(protocol(format!(
                    "cannot read the server's output: {}",
                    io_reason(&e)
                )));
            }
        };
        // The end of the output. A last line without its newline is not a message: the server
        // stopped in the middle of one, and how it ended says more.
        if buf.is_empty() {
            return None;
        }
        let (take, complete) = match memchr::memchr(b'\n', buf) {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        // Checked before the bytes are kept: a line never holds more than `max` bytes.
        if line.len() as u64 + take as u64 > max {
            return Some(McpError::TooLarge { limit: max });
        }
        line.extend_from_slice(&buf[..take]);
        reader.consume(take + usize::from(complete));
        if complete {
            match handle_line(&line, to_caller, answers) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(e),
            }
            line.clear();
            // One huge message should not pin its buffer for the connection's life.
            if line.capacity() > 64 << 10 {
                line = Vec::new();
            }
        }
    }
}

/// Handles one line from the server. `Ok(false)`: the caller is gone, stop reading.
fn handle_line(
    line: &[u8],
    to_caller: &SyncSender<Incoming>,
    answers: &SyncSender<Vec<u8>>,
) -> Result<bool, McpError> {
    // A blank line (or the `\r` of a `\r\n` ending, which JSON takes as whitespace) carries no
    // message.
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(true);
    }
    let message: Value = serde_json::from_slice(line)
        .map_err(|e| malformed(format!("a line that is not JSON ({e}): {}", quote(line))))?;
    match classify(message).map_err(|e| malformed(e.to_string()))? {
        Message::Notification => Ok(true),
        Message::Request { id, method } => {
            // The client declares no capabilities, so `ping` is the only request it serves.
            let answer = if method == "ping" {
                json!({"jsonrpc": "2.0", "id": id, "result": {}})
            } else {
                json!({"jsonrpc": "2.0", "id": id,
                       "error": {"code": -32601, "message": "Method not found"}})
            };
            let mut bytes = answer.to_string().into_bytes();
            bytes.push(b'\n');
            match answers.try_send(bytes) {
                // Disconnected: the server closed its input; its end is reported by the read.
                Ok(()) | Err(TrySendError::Disconnected(_)) => Ok(true),
                Err(TrySendError::Full(_)) => Err(protocol(
                    "the server sends requests faster than it reads the answers".to_owned(),
                )),
            }
        }
        Message::Response { id, outcome } => {
            Ok(to_caller.send(Incoming::Response { id, outcome }).is_ok())
        }
    }
}

/// A JSON-RPC 2.0 message, as the reader tells them apart.
enum Message {
    Notification,
    Request {
        id: Value,
        method: String,
    },
    Response {
        id: Value,
        outcome: Result<Value, (i64, String)>,
    },
}

/// Tells what kind of JSON-RPC 2.0 message `value` is; `Err` says why it is none.
fn classify(value: Value) -> Result<Message, NotRpc> {
    let Value::Object(mut m) = value else {
        return Err(NotRpc::NotObject {
            ty: json_type(&value),
        });
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(NotRpc::Version);
    }
    if let Some(method) = m.remove("method") {
        let Value::String(method) = method else {
            return Err(NotRpc::Method {
                ty: json_type(&method),
            });
        };
        return match m.remove("id") {
            None => Ok(Message::Notification),
            Some(id @ (Value::String(_) | Value::Number(_))) => Ok(Message::Request { id, method }),
            Some(other) => Err(NotRpc::Id {
                ty: json_type(&other),
            }),
        };
    }
    let Some(id) = m.remove("id") else {
        return Err(NotRpc::Neither);
    };
    match (m.remove("result"), m.remove("error")) {
        (Some(result), None) => Ok(Message::Response {
            id,
            outcome: Ok(result),
        }),
        (None, Some(error)) => Ok(Message::Response {
            id,
            outcome: Err(rpc_error(error.as_object())?),
        }),
        (Some(_), Some(_)) => Err(NotRpc::Both),
        (None, None) => Err(NotRpc::NoOutcome),
    }
}

/// The code and message of a JSON-RPC error object.
fn rpc_error(error: Option<&Map<String, Value>>) -> Result<(i64, String), NotRpc> {
    let code = error.and_then(|e| e.get("code")).and_then(Value::as_i64);
    let message = error.and_then(|e| e.get("message")).and_then(Value::as_str);
    match (code, message) {
        (Some(code), Some(message)) => Ok((code, bounded(message))),
        _ => Err(NotRpc::ErrorShape),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A fake server: a shell script.
    fn sh(script: &str) -> ServerCommand {
        ServerCommand {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".to_owned(), script.to_owned()],
            env: vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
            cwd: PathBuf::from("/"),
        }
    }

    const INIT_REPLY: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"fake","version":"0.1"}}}"#;

    /// Script lines that answer `initialize` and read `notifications/initialized`.
    fn handshake() -> String {
        format!("read l; printf '%s\\n' '{INIT_REPLY}'; read l; ")
    }

    /// Reads lines forever, answering none.
    const IDLE: &str = "while read l; do :; done";

    fn start(script: &str) -> Result<Connection, McpError> {
        Connection::start(&sh(script), 5_000, MESSAGE_BYTES_MAX)
    }

    fn start_err(script: &str) -> McpError {
        match start(script) {
            Ok(_) => panic!("the fake server started"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_connection_is_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<Connection>();
    }

    #[test]
    fn starts_and_reports_what_the_server_said() {
        let c = start(&format!("{}{IDLE}", handshake())).unwrap();
        assert_eq!(
            c.info(),
            &ServerInfo {
                name: "fake".to_owned(),
                version: "0.1".to_owned(),
                protocol_version: PROTOCOL_VERSION.to_owned(),
            }
        );
    }

    #[test]
    fn the_initialize_request_is_what_the_spec_asks() {
        // The server answers only if the request is exactly the expected one.
        let expected = format!(
            r#"{{"id":1,"jsonrpc":"2.0","method":"initialize","params":{{"capabilities":{{}},"clientInfo":{{"name":"oracle","version":"{}"}},"protocolVersion":"2025-06-18"}}}}"#,
            env!("CARGO_PKG_VERSION")
        );
        let script = format!(
            "read l; [ \"$l\" = '{expected}' ] || exit 9; printf '%s\\n' '{INIT_REPLY}'; \
             read l; [ \"$l\" = '{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}}' ] || exit 8; \
             printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{{\"content\":[]}}}}'; {IDLE}"
        );
        let c = start(&script).unwrap();
        // The server got past both checks only if it answers the call.
        assert_eq!(
            c.call("t", &json!({}), 5_000).unwrap(),
            json!({"content": []})
        );
    }

    #[test]
    fn an_initialize_result_without_server_info_is_refused() {
        let script = r#"read l; printf '%s\n' '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18"}}'; sleep 5"#;
        assert_eq!(
            start_err(script),
            McpError::Protocol {
                detail: "the `initialize` result has no string `serverInfo.name`".to_owned()
            }
        );
    }

    #[test]
    fn a_line_that_is_not_json_is_malformed() {
        let e = start_err("read l; echo hello; sleep 5");
        assert_eq!(
            e.to_string(),
            "the MCP server sent a malformed message: a line that is not JSON (expected value at \
             line 1 column 1): `hello`"
        );
    }

    #[test]
    fn json_that_is_not_json_rpc_is_malformed() {
        for (line, detail) in [
            (
                r#"{"id":1,"result":{}}"#,
                r#"not a JSON-RPC 2.0 message (`jsonrpc` is not "2.0")"#,
            ),
            (
                "[1,2]",
                "an array where a JSON-RPC message (an object) belongs",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1}"#,
                "a response with neither `result` nor `error`",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#,
                "a response with both `result` and `error`",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}"#,
                "an error response without an integer `code` and a string `message`",
            ),
            (
                r#"{"jsonrpc":"2.0","method":7}"#,
                "`method` is a number, not a string",
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                "a request whose `id` is null, not a string or a number",
            ),
            (
                r#"{"jsonrpc":"2.0"}"#,
                "a message with neither `method` nor `id`",
            ),
        ] {
            let e = start_err(&format!("read l; printf '%s\\n' '{line}'; sleep 5"));
            assert_eq!(
                e,
                McpError::Malformed {
                    detail: detail.to_owned()
                },
                "{line}"
            );
        }
    }

    #[test]
    fn a_response_to_another_request_is_malformed() {
        let e =
            start_err(r#"read l; printf '%s\n' '{"jsonrpc":"2.0","id":7,"result":{}}'; sleep 5"#);
        assert_eq!(
            e.to_string(),
            "the MCP server sent a malformed message: a response with id `7` while request 1 \
             waits for its answer"
        );
    }

    #[test]
    fn a_line_past_the_limit_is_too_large_however_long_it_goes_on() {
        // An endless line: the reader stops at the limit instead of gathering it all.
        let script = "read l; yes | tr -d '\\n'";
        let at = Instant::now();
        let e = Connection::start(&sh(script), 20_000, 1 << 20)
            .err()
            .unwrap();
        assert_eq!(e, McpError::TooLarge { limit: 1 << 20 });
        assert!(at.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_line_at_the_limit_is_accepted() {
        let limit = INIT_REPLY.len() as u64;
        let script = format!("{}{IDLE}", handshake());
        assert!(Connection::start(&sh(&script), 5_000, limit).is_ok());
        let e = Connection::start(&sh(&script), 5_000, limit - 1)
            .err()
            .unwrap();
        assert_eq!(e, McpError::TooLarge { limit: limit - 1 });
    }

    #[test]
    fn no_answer_times_out_quickly() {
        let at = Instant::now();
        let e = Connection::start(&sh("sleep 60"), 300, MESSAGE_BYTES_MAX)
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "the MCP server did not answer `initialize` within 300 ms"
        );
        assert!(at.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_crash_is_reported_with_its_status_and_stderr() {
        let e = start_err("read l; echo 'boom: it broke' >&2; exit 3");
        assert_eq!(
            e,
            McpError::Exited {
                status: Some(3),
                stderr_tail: "boom: it broke".to_owned()
            }
        );
        assert_eq!(
            e.to_string(),
            "the MCP server closed its output (exit status 3); its stderr ends with: boom: it broke"
        );
        let e = start_err("exec 1>&-; exec 2>&-; sleep 60");
        assert_eq!(
            e.to_string(),
            "the MCP server closed its output (no exit status)"
        );
    }

    #[test]
    fn only_the_end_of_stderr_is_kept() {
        let e = start_err("head -c 10000 /dev/zero | tr '\\0' e >&2; echo END >&2; exit 1");
        let McpError::Exited {
            status,
            stderr_tail,
        } = e
        else {
            panic!("{e:?}")
        };
        assert_eq!(status, Some(1));
        assert!(
            stderr_tail.len() <= STDERR_KEPT_BYTES_MAX,
            "{}",
            stderr_tail.len()
        );
        assert!(stderr_tail.ends_with("eeeeEND"));
    }

    #[test]
    fn a_json_rpc_error_leaves_the_connection_usable() {
        let script = format!(
            "{}read l; printf '%s\\n' '{}'; read l; printf '%s\\n' '{}'; {IDLE}",
            handshake(),
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"unknown tool"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"isError":false}}"#,
        );
        let c = start(&script).unwrap();
        let e = c.call("nope", &json!({}), 5_000).unwrap_err();
        assert_eq!(
            e,
            McpError::Rpc {
                code: -32602,
                message: "unknown tool".to_owned()
            }
        );
        assert_eq!(
            e.to_string(),
            "the MCP server answered with error -32602: unknown tool"
        );
        assert_eq!(
            c.call("t", &json!({}), 5_000).unwrap(),
            json!({"content": [], "isError": false})
        );
    }

    #[test]
    fn a_ping_from_the_server_is_answered() {
        // The server answers the call only once its ping got the right answer.
        let script = format!(
            "{}read l; printf '%s\\n' '{}'; read a; \
             if [ \"$a\" = '{}' ]; then printf '%s\\n' '{}'; else echo \"$a\"; fi; {IDLE}",
            handshake(),
            r#"{"jsonrpc":"2.0","id":"p-1","method":"ping"}"#,
            r#"{"id":"p-1","jsonrpc":"2.0","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#,
        );
        let c = start(&script).unwrap();
        assert_eq!(
            c.call("t", &json!({}), 5_000).unwrap(),
            json!({"content": []})
        );
    }

    #[test]
    fn other_requests_from_the_server_are_refused_and_notifications_ignored() {
        let script = format!(
            "{}read l; printf '%s\\n' '{}' '{}'; read a; \
             if [ \"$a\" = '{}' ]; then printf '%s\\n' '{}'; else echo \"$a\"; fi; {IDLE}",
            handshake(),
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}"#,
            r#"{"error":{"code":-32601,"message":"Method not found"},"id":5,"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#,
        );
        let c = start(&script).unwrap();
        assert_eq!(
            c.call("t", &json!({}), 5_000).unwrap(),
            json!({"content": []})
        );
    }

    #[test]
    fn after_a_failure_the_connection_is_closed() {
        let script = format!("{}read l; echo oops; {IDLE}", handshake());
        let c = start(&script).unwrap();
        assert!(matches!(
            c.call("t", &json!({}), 5_000),
            Err(McpError::Malformed { .. })
        ));
        assert_eq!(c.call("t", &json!({}), 5_000), Err(McpError::Closed));
        assert_eq!(c.list_tools(5_000), Err(McpError::Closed));
        assert_eq!(
            McpError::Closed.to_string(),
            "the connection to the MCP server is closed after an earlier failure"
        );
    }

    #[test]
    fn a_call_result_that_is_not_an_object_is_refused() {
        let script = format!(
            "{}read l; printf '%s\\n' '{}'; {IDLE}",
            handshake(),
            r#"{"jsonrpc":"2.0","id":2,"result":[1]}"#
        );
        let c = start(&script).unwrap();
        assert_eq!(
            c.call("t", &json!({}), 5_000).unwrap_err().to_string(),
            "the MCP server broke the protocol: the `tools/call` result is an array, not an object"
        );
    }

    #[test]
    fn a_spawn_failure_names_the_file_only() {
        let cmd = ServerCommand {
            program: PathBuf::from("/nonexistent/place/mcp-server"),
            args: Vec::new(),
            env: Vec::new(),
            cwd: PathBuf::from("/"),
        };
        let e = Connection::start(&cmd, 1_000, MESSAGE_BYTES_MAX)
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "cannot start the MCP server `mcp-server`: it does not exist"
        );
    }

    /// A server that answers each `tools/list` page (ids 2, 3, ...) with `pages[i]` (the
    /// `result` object), then idles.
    fn lister(pages: &[Value]) -> Connection {
        let mut script = handshake();
        for (i, page) in pages.iter().enumerate() {
            let reply = json!({"jsonrpc": "2.0", "id": i + 2, "result": page});
            script.push_str(&format!("read l; printf '%s\\n' '{reply}'; "));
        }
        script.push_str(IDLE);
        start(&script).unwrap()
    }

    fn tool(name: &str) -> Value {
        json!({"name": name, "inputSchema": {"type": "object"}})
    }

    #[test]
    fn tools_are_listed_over_pages() {
        let c = lister(&[
            json!({"tools": [tool("a")], "nextCursor": "2"}),
            json!({"tools": [{"name": "b", "description": "B", "inputSchema": {"type": "object"},
                              "outputSchema": {"type": "object"}}]}),
        ]);
        let tools = c.list_tools(5_000).unwrap();
        assert_eq!(
            tools,
            vec![
                ListedTool {
                    name: "a".to_owned(),
                    description: String::new(),
                    input_schema: json!({"type": "object"}),
                    output_schema: None,
                },
                ListedTool {
                    name: "b".to_owned(),
                    description: "B".to_owned(),
                    input_schema: json!({"type": "object"}),
                    output_schema: Some(json!({"type": "object"})),
                },
            ]
        );
    }

    #[test]
    fn bad_tool_lists_are_refused() {
        let cases = [
            (
                vec![json!({"tools": [tool("a"), tool("a")]})],
                "tool `a` is listed twice",
            ),
            (
                vec![json!({"tools": [{"inputSchema": {}}]})],
                "tool 0 of `tools/list` page 1 has no name",
            ),
            (
                vec![json!({"tools": [{"name": "a", "inputSchema": true}]})],
                "the `inputSchema` of tool `a` is a boolean, not an object",
            ),
            (
                vec![json!({"tools": [{"name": "a"}]})],
                "the `inputSchema` of tool `a` is missing, not an object",
            ),
            (
                vec![json!({"tools": [{"name": "a", "inputSchema": {}, "outputSchema": []}]})],
                "the `outputSchema` of tool `a` is an array, not an object",
            ),
            (
                vec![json!({"tools": {}})],
                "the `tools/list` result (page 1) has no `tools` array",
            ),
            (
                vec![json!({"tools": [], "nextCursor": 3})],
                "`nextCursor` (page 1) is a number, not a string",
            ),
            (
                vec![
                    json!({"tools": (0..=TOOLS_MAX).map(|i| tool(&format!("t{i}"))).collect::<Vec<_>>()}),
                ],
                "more than 256 tools are listed",
            ),
            (
                (0..LIST_PAGES_MAX)
                    .map(|i| json!({"tools": [tool(&format!("t{i}"))], "nextCursor": "more"}))
                    .collect(),
                "`tools/list` has more than 16 pages",
            ),
        ];
        for (pages, detail) in cases {
            let c = lister(&pages);
            assert_eq!(
                c.list_tools(5_000),
                Err(McpError::Protocol {
                    detail: detail.to_owned()
                })
            );
            assert_eq!(c.list_tools(5_000), Err(McpError::Closed));
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn dropping_the_connection_kills_the_whole_group() {
        // The server starts a process of its own and reports its pid as its version.
        let script = format!(
            "read l; sleep 60 & printf '%s\\n' '{}'\"$!\"'{}'; read l; {IDLE}",
            r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","serverInfo":{"name":"fake","version":""#,
            r#""}}}"#,
        );
        let c = start(&script).unwrap();
        let pid: u32 = c.info().version.parse().unwrap();
        assert!(alive(pid));
        drop(c);
        let at = Instant::now();
        while alive(pid) {
            assert!(at.elapsed() < Duration::from_secs(5), "{pid} still runs");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether `pid` runs (a zombie does not).
    #[cfg(target_os = "linux")]
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }
}
