//! A code agent: an [`Agent`] whose decisions come from a program in another process, over the
//! JSON-lines agent protocol of docs/AGENTS.md (version [`PROTOCOL`]).
//!
//! The process only decides. It never touches the log, the home or the network on the
//! runtime's behalf: every effect it wants is a call in a decision, which the engine gates,
//! executes and records like any other agent's. A crash, a hang, a malformed line or a `fail`
//! after the start is a recorded failure with a stable code ([`Failure`]); one before it
//! refuses the start ([`StartError`]). The child's stderr goes to a file or to ours, never into
//! anything recorded. Dropping the agent ends the process.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oracle_core::agent::{Action, Agent, AgentError, Call, Decision, Observation, Outcome};
use oracle_core::hash::{Hash, domain, hash_in};
use oracle_core::payload::{RunStatus, StateChanged};
use oracle_core::state::State;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The protocol version this runtime speaks; a `hello` with another is refused.
pub const PROTOCOL: u64 = 1;

/// Longest line read from an agent, newline included: a reply holds a round's calls, whose
/// inputs may each be up to `engine::INPUT_BYTES_MAX` (8 MiB), so twice that.
pub const LINE_BYTES_MAX: u64 = 2 * crate::engine::INPUT_BYTES_MAX;

/// How long an agent may take to say `hello` after it is started, by default: an interpreter
/// importing its libraries takes seconds, never tens.
pub const HELLO_MS_DEFAULT: u64 = 10_000;

/// How long an agent may take to reply to one `decide`, by default: a decision is computation
/// over what it was shown (the slow work is tool calls, which are not the agent's time).
pub const DECIDE_MS_DEFAULT: u64 = 60_000;

/// How long a finished agent has to exit after its stdin is closed before it is killed.
pub const EXIT_MS: u64 = 1_000;

/// Most files a program may say it is made of: each is read and hashed at every start.
pub const FILES_MAX: usize = 1_000;

/// Largest file a program may say it is made of (source files, not data).
pub const FILE_BYTES_MAX: u64 = 16 << 20;

/// Longest step name an agent may give a call (it is in every event of the call).
pub const STEP_BYTES_MAX: usize = 128;

/// Longest program name: it names the run's directory (`NAME-N`), so it is also held to
/// letters, digits, `_`, `.` and `-`, starting with a letter or digit.
pub const NAME_BYTES_MAX: usize = 64;

/// The state key a `done` reply's output is recorded under.
pub const OUTPUT_KEY: &str = "output";

/// What to start and how long to wait for it.
#[derive(Clone, Debug)]
pub struct Command {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The working directory: the run's root, against which the program's files are read.
    pub dir: PathBuf,
    /// Where the child's stderr goes (appended); `None`: to this process's stderr.
    pub stderr: Option<PathBuf>,
    pub hello_ms: u64,
    pub decide_ms: u64,
}

impl Command {
    /// `program args...` in `dir`, with the default limits and stderr passed on.
    pub fn new(program: impl Into<PathBuf>, args: Vec<OsString>, dir: &Path) -> Command {
        Command {
            program: program.into(),
            args,
            dir: dir.to_path_buf(),
            stderr: None,
            hello_ms: HELLO_MS_DEFAULT,
            decide_ms: DECIDE_MS_DEFAULT,
        }
    }
}

/// Why an agent could not be started: nothing was recorded. Each has one stable code.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("agent_spawn: cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("agent_hello: {0}")]
    Hello(String),
    #[error("agent_protocol: the agent speaks protocol {found}; this runtime speaks {PROTOCOL}")]
    Protocol { found: u64 },
    #[error("agent_file: `{path}`: {reason}")]
    File { path: String, reason: String },
}

impl StartError {
    /// The stable code the message starts with.
    pub fn code(&self) -> &'static str {
        match self {
            StartError::Spawn { .. } => "agent_spawn",
            StartError::Hello(_) => "agent_hello",
            StartError::Protocol { .. } => "agent_protocol",
            StartError::File { .. } => "agent_file",
        }
    }
}

/// Why a started agent's run failed: recorded as the run's failure reason, so worded from
/// nothing but the protocol's exchange (never stderr, an exit status or a clock).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("agent_failed: {0}")]
    Failed(String),
    #[error("agent_crashed: the agent's process ended before replying to round {round}")]
    Crashed { round: u64 },
    #[error("agent_hung: no reply to round {round} within the decision time limit")]
    Hung { round: u64 },
    #[error("agent_malformed: round {round}: {reason}")]
    Malformed { round: u64, reason: String },
}

impl Failure {
    /// The stable code the reason starts with.
    pub fn code(&self) -> &'static str {
        match self {
            Failure::Failed(_) => "agent_failed",
            Failure::Crashed { .. } => "agent_crashed",
            Failure::Hung { .. } => "agent_hung",
            Failure::Malformed { .. } => "agent_malformed",
        }
    }
}

/// The program's name and version, as its `hello` says.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct ProgramId {
    pub name: String,
    pub version: u64,
}

/// The SDK that speaks for a program.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SdkId {
    pub name: String,
    pub version: String,
}

/// An agent's first line.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Hello {
    pub protocol: u64,
    pub sdk: SdkId,
    pub program: ProgramId,
    #[serde(default)]
    pub grants: Vec<String>,
    #[serde(default)]
    pub inputs: Value,
    pub files: Vec<String>,
}

/// The source line that made a reply, as the agent reports it (never recorded), with the
/// unrecorded calls the program made directly since its previous reply.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Site {
    pub file: String,
    pub line: u64,
    /// Clock or randomness read directly (`time.time()`), not through a recorded call: a
    /// decision that diverges after one is most likely its doing, so the refusal says which
    /// call to use instead (docs/AGENTS.md, "Resume and replay"). At most
    /// [`UNRECORDED_SHOWN_MAX`] are kept.
    #[serde(default, deserialize_with = "first_unrecorded")]
    pub unrecorded: Vec<Unrecorded>,
}

/// The most direct calls a refusal names: the first few say what went wrong; a loop reading
/// the clock a million times must not make the message a megabyte.
pub const UNRECORDED_SHOWN_MAX: usize = 3;

/// One direct call of the clock or of randomness, as the SDK saw it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Unrecorded {
    /// What was called, e.g. `time.time`.
    pub call: String,
    pub file: String,
    pub line: u64,
    /// The recorded call to use instead, e.g. `ctx.now()`.
    pub instead: String,
}

fn first_unrecorded<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Unrecorded>, D::Error> {
    let mut all = Vec::<Unrecorded>::deserialize(d)?;
    all.truncate(UNRECORDED_SHOWN_MAX);
    Ok(all)
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        for u in &self.unrecorded {
            write!(
                f,
                "; before it, {}:{} called {}() directly, which is not recorded: use {} instead",
                u.file, u.line, u.call, u.instead
            )?;
        }
        Ok(())
    }
}

/// Where the site of the agent's latest reply can be read after the engine has taken the
/// agent: a divergence is found right after the decision that made it.
#[derive(Clone, Debug, Default)]
pub struct Sites(Arc<Mutex<Option<Site>>>);

impl Sites {
    /// The site of the latest reply, if it named one.
    pub fn last(&self) -> Option<Site> {
        self.0.lock().ok().and_then(|s| s.clone())
    }

    fn set(&self, site: Option<Site>) {
        if let Ok(mut s) = self.0.lock() {
            *s = site;
        }
    }
}

/// One call in a `calls` reply.
#[derive(Debug, Deserialize)]
struct CallMsg {
    step: String,
    tool: String,
    input: Value,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// A reply to `decide`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Reply {
    Calls {
        calls: Vec<CallMsg>,
        #[serde(default)]
        set: Map<String, Value>,
        #[serde(default)]
        at: Option<Site>,
    },
    Suspend {
        step: String,
        reason: String,
        #[serde(default)]
        at: Option<Site>,
    },
    Done {
        output: Value,
        #[serde(default)]
        at: Option<Site>,
    },
    Fail {
        reason: String,
        #[serde(default)]
        at: Option<Site>,
    },
}

/// What the agent's stdout gave.
enum Line {
    Text(Vec<u8>),
    TooLong,
    /// The stream ended (cleanly, mid-line or with a read error): the process is gone.
    End,
}

/// The most bytes one read of the agent's stdout takes: a reply is usually far smaller, and a
/// longer one takes several reads.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The agent's stdout, read a line at a time with a time limit on the engine's own thread:
/// `poll(2)` waits for bytes, so no reader thread hands each reply over (one wake-up fewer per
/// decision; BENCHMARKS.md, "Code agents over the protocol").
struct Lines {
    out: std::process::ChildStdout,
    /// Bytes read and not yet given as a line.
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
    /// The stream ended: what `buf` holds is all there is.
    ended: bool,
}

impl Lines {
    fn new(out: std::process::ChildStdout) -> Lines {
        Lines {
            out,
            buf: Vec::new(),
            scanned: 0,
            ended: false,
        }
    }

    /// The next line within `ms` (`None`: none came in time). A line is at most
    /// [`LINE_BYTES_MAX`] bytes with its newline; past that it is [`Line::TooLong`].
    fn next(&mut self, ms: u64) -> Option<Line> {
        let deadline = Instant::now() + Duration::from_millis(ms);
        loop {
            if let Some(i) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
                let end = self.scanned + i;
                if end as u64 >= LINE_BYTES_MAX {
                    return Some(Line::TooLong);
                }
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                self.scanned = 0;
                return Some(Line::Text(line));
            }
            self.scanned = self.buf.len();
            if self.buf.len() as u64 >= LINE_BYTES_MAX {
                return Some(Line::TooLong);
            }
            if self.ended {
                return Some(Line::End);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            if self.readable(left) {
                self.read_some();
            }
        }
    }

    /// Whether bytes (or the end of the stream) can be read within `left`; an error of `poll`
    /// other than an interruption ends the stream.
    fn readable(&mut self, left: Duration) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let timeout = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&self.out, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(n) => n > 0,
            Err(rustix::io::Errno::INTR) => false,
            Err(_) => {
                self.ended = true;
                false
            }
        }
    }

    /// One read of what is there (`poll` said something is): at the end of the stream, or on
    /// an error, the stream has ended.
    fn read_some(&mut self) {
        let mut chunk = vec![0u8; READ_CHUNK_BYTES];
        match self.out.read(&mut chunk) {
            Ok(0) => self.ended = true,
            Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => self.ended = true,
        }
    }
}

/// A program in another process, driven over the agent protocol.
pub struct ProcessAgent {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines,
    /// Holds the engine and the agent on one CPU for each exchange.
    turns: crate::turns::Turns,
    hello: Hello,
    program: String,
    hash: Hash,
    /// Each listed file and its hash, sorted by path.
    files: Vec<(String, Hash)>,
    decide_ms: u64,
    inputs: Map<String, Value>,
    round: u64,
    steps: BTreeSet<String>,
    sites: Sites,
    /// Set once the run's last decision is made: later `decide`s repeat it.
    ended: Option<Decision>,
}

impl std::fmt::Debug for ProcessAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessAgent")
            .field("program", &self.program)
            .field("round", &self.round)
            .finish_non_exhaustive()
    }
}

impl ProcessAgent {
    /// Starts `cmd`, reads its `hello` and hashes the files it names. `inputs` are the run's,
    /// sent before the first decision.
    pub fn start(cmd: &Command, inputs: Map<String, Value>) -> Result<ProcessAgent, StartError> {
        let mut child = spawn(cmd)?;
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(StartError::Hello(
                "the agent's pipes were not opened".into(),
            ));
        };
        let turns = crate::turns::Turns::new(child.id());
        let mut agent = ProcessAgent {
            child,
            stdin: Some(stdin),
            lines: Lines::new(stdout),
            turns,
            hello: placeholder_hello(),
            program: String::new(),
            hash: Hash::ZERO,
            files: Vec::new(),
            decide_ms: cmd.decide_ms,
            inputs,
            round: 0,
            steps: BTreeSet::new(),
            sites: Sites::default(),
            ended: None,
        };
        // On any error below, dropping `agent` ends the process.
        agent.hello = agent.read_hello(cmd.hello_ms)?;
        agent.files = file_hashes(&agent.hello, &cmd.dir)?;
        agent.hash = program_hash(&agent.hello, &agent.files)?;
        agent.program = format!(
            "{}@{}",
            agent.hello.program.name, agent.hello.program.version
        );
        Ok(agent)
    }

    /// What the agent said it is.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// The files the program is made of, each with its hash, sorted by path.
    pub fn files(&self) -> &[(String, Hash)] {
        &self.files
    }

    /// The run's inputs, sent before the first decision: known once the `hello`'s schema has
    /// bound them.
    pub fn set_inputs(&mut self, inputs: Map<String, Value>) {
        self.inputs = inputs;
    }

    /// Where the site of each reply can be read, also after the engine has taken the agent.
    pub fn sites(&self) -> Sites {
        self.sites.clone()
    }

    fn read_hello(&mut self, hello_ms: u64) -> Result<Hello, StartError> {
        let line = match self.next_line(hello_ms) {
            Ok(line) => line,
            Err(Failure::Hung { .. }) => {
                return Err(StartError::Hello(format!("no hello within {hello_ms} ms")));
            }
            Err(Failure::Crashed { .. }) => {
                return Err(StartError::Hello(
                    "the agent's process ended before its hello".into(),
                ));
            }
            Err(other) => return Err(StartError::Hello(other.to_string())),
        };
        let value: Value = serde_json::from_slice(&line)
            .map_err(|e| StartError::Hello(format!("the first line is not JSON: {e}")))?;
        if value.get("type").and_then(Value::as_str) != Some("hello") {
            return Err(StartError::Hello(
                "the first line is not of type `hello`".into(),
            ));
        }
        let hello: Hello = serde_json::from_value(value)
            .map_err(|e| StartError::Hello(format!("the hello is malformed: {e}")))?;
        if !plain_name(&hello.program.name) {
            return Err(StartError::Hello(format!(
                "program name `{}` is not 1 to {NAME_BYTES_MAX} letters, digits, `_`, `.` or `-` starting with a letter or digit",
                hello.program.name
            )));
        }
        if hello.protocol != PROTOCOL {
            return Err(StartError::Protocol {
                found: hello.protocol,
            });
        }
        Ok(hello)
    }

    /// The next line within `ms`, or why there is none.
    fn next_line(&mut self, ms: u64) -> Result<Vec<u8>, Failure> {
        let round = self.round;
        match self.lines.next(ms) {
            Some(Line::Text(line)) => Ok(line),
            Some(Line::TooLong) => Err(Failure::Malformed {
                round,
                reason: format!("a line is longer than {LINE_BYTES_MAX} bytes"),
            }),
            Some(Line::End) => Err(Failure::Crashed { round }),
            None => Err(Failure::Hung { round }),
        }
    }

    /// Writes one message; a closed pipe means the process is gone.
    fn send(&mut self, message: &Value) -> Result<(), Failure> {
        let round = self.round;
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(Failure::Crashed { round });
        };
        let mut line = message.to_string();
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|_| Failure::Crashed { round })
    }

    /// One round: sends the observations, reads and checks the reply.
    fn exchange(&mut self, observations: &[Observation]) -> Result<Decision, Failure> {
        if self.round == 0 {
            let start = json!({"type": "start", "inputs": self.inputs});
            self.send(&start)?;
        }
        let seen: Vec<Value> = observations.iter().map(observation_json).collect();
        let decide = json!({"type": "decide", "round": self.round, "observations": seen});
        self.turns.begin();
        let line = self
            .send(&decide)
            .and_then(|()| self.next_line(self.decide_ms));
        self.turns.end();
        let line = line?;
        let round = self.round;
        let malformed = |reason: String| Failure::Malformed { round, reason };
        let text =
            std::str::from_utf8(&line).map_err(|_| malformed("a line is not UTF-8".into()))?;
        let value: Value = serde_json::from_str(text)
            .map_err(|e| malformed(format!("a line is not JSON: {e}")))?;
        oracle_core::canon::encode(&value)
            .map_err(|e| malformed(format!("a reply cannot be recorded: {e}")))?;
        let reply: Reply = serde_json::from_value(value)
            .map_err(|e| malformed(format!("a reply is malformed: {e}")))?;
        self.decision_of(reply)
    }

    /// The engine's decision for a well-formed reply, or why it is malformed.
    fn decision_of(&mut self, reply: Reply) -> Result<Decision, Failure> {
        let (changes, action, at) = match reply {
            Reply::Calls { calls, set, at } => {
                let calls = self.calls_of(calls)?;
                (set, Action::Call(calls), at)
            }
            Reply::Suspend { step, reason, at } => {
                let attempts = 1;
                (
                    Map::new(),
                    Action::Suspend {
                        step,
                        reason,
                        attempts,
                    },
                    at,
                )
            }
            Reply::Done { output, at } => {
                let set = Map::from_iter([(OUTPUT_KEY.to_owned(), output)]);
                let (status, reason) = (RunStatus::Completed, String::new());
                (set, Action::Finish { status, reason }, at)
            }
            Reply::Fail { reason, at } => {
                let reason = Failure::Failed(reason).to_string();
                let status = RunStatus::Failed;
                (Map::new(), Action::Finish { status, reason }, at)
            }
        };
        self.sites.set(at);
        let changes = if changes.is_empty() {
            vec![]
        } else {
            vec![StateChanged {
                set: changes,
                delete: vec![],
            }]
        };
        Ok(Decision { changes, action })
    }

    /// The engine's calls for a `calls` reply: each step named once in the whole run.
    fn calls_of(&mut self, calls: Vec<CallMsg>) -> Result<Vec<Call>, Failure> {
        let round = self.round;
        let malformed = |reason: String| Failure::Malformed { round, reason };
        if calls.is_empty() {
            return Err(malformed("a `calls` reply names no call".into()));
        }
        let mut out = Vec::with_capacity(calls.len());
        for c in calls {
            if c.step.is_empty() || c.step.len() > STEP_BYTES_MAX {
                return Err(malformed(format!(
                    "step name `{}` is empty or longer than {STEP_BYTES_MAX} bytes",
                    c.step
                )));
            }
            if !self.steps.insert(c.step.clone()) {
                return Err(malformed(format!("step `{}` is named twice", c.step)));
            }
            out.push(Call {
                step: c.step,
                tool: c.tool,
                attempt: 1,
                input: c.input,
                timeout_ms: c.timeout_ms,
                reads: vec![],
            });
        }
        Ok(out)
    }

    /// Ends the process: stdin closed, a grace of [`EXIT_MS`] when it finished cleanly, then
    /// killed.
    fn end(&mut self, grace: bool) {
        self.stdin = None;
        if grace {
            let deadline = Instant::now() + Duration::from_millis(EXIT_MS);
            while Instant::now() < deadline {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ProcessAgent {
    fn drop(&mut self) {
        let clean = matches!(
            &self.ended,
            Some(Decision {
                action: Action::Finish {
                    status: RunStatus::Completed,
                    ..
                },
                ..
            })
        );
        self.end(clean);
    }
}

impl Agent for ProcessAgent {
    fn program(&self) -> &str {
        &self.program
    }

    fn program_hash(&self) -> Hash {
        self.hash
    }

    /// Asks the process; a crash, hang, malformed reply or `fail` becomes the run's recorded
    /// failure (never an unrecorded error), and the process is ended.
    fn decide(&mut self, _state: &State, seen: &[Observation]) -> Result<Decision, AgentError> {
        if let Some(ended) = &self.ended {
            return Ok(ended.clone());
        }
        let decision = match self.exchange(seen) {
            Ok(d) => d,
            Err(failure) => {
                self.sites.set(None);
                let (status, reason) = (RunStatus::Failed, failure.to_string());
                Decision {
                    changes: vec![],
                    action: Action::Finish { status, reason },
                }
            }
        };
        self.round += 1;
        if let Action::Finish { status, .. } = &decision.action {
            self.ended = Some(decision.clone());
            self.end(*status == RunStatus::Completed);
        }
        Ok(decision)
    }
}

/// Whether `name` may name a run's directory: never a path, never hidden.
fn plain_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= NAME_BYTES_MAX
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A hello to hold until the real one is read.
fn placeholder_hello() -> Hello {
    Hello {
        protocol: 0,
        sdk: SdkId {
            name: String::new(),
            version: String::new(),
        },
        program: ProgramId {
            name: String::new(),
            version: 0,
        },
        grants: vec![],
        inputs: Value::Null,
        files: vec![],
    }
}

fn spawn(cmd: &Command) -> Result<Child, StartError> {
    let stderr = match &cmd.stderr {
        None => Stdio::inherit(),
        Some(path) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(Stdio::from)
            .map_err(|source| StartError::Spawn {
                program: path.display().to_string(),
                source,
            })?,
    };
    std::process::Command::new(&cmd.program)
        .args(&cmd.args)
        .current_dir(&cmd.dir)
        .env("ORACLE_AGENT_PROTOCOL", PROTOCOL.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|source| StartError::Spawn {
            program: cmd.program.display().to_string(),
            source,
        })
}

/// An observation as the protocol writes it (docs/AGENTS.md, `decide`).
fn observation_json(o: &Observation) -> Value {
    let mut v = json!({"step": o.step, "tool": o.tool, "attempt": o.attempt});
    let more = match &o.outcome {
        Outcome::Returned(output) => json!({"outcome": "returned", "output": output}),
        Outcome::Failed(error) => json!({"outcome": "failed", "error": error}),
        Outcome::Denied { capability, reason } => {
            json!({"outcome": "denied", "capability": capability, "reason": reason})
        }
        Outcome::Ask(question) => json!({"outcome": "ask", "question": question}),
        Outcome::Answered(value) => json!({"outcome": "answered", "value": value}),
    };
    if let (Some(v), Value::Object(more)) = (v.as_object_mut(), more) {
        v.extend(more);
    }
    v
}

/// A file path from a `hello`: relative, `/`-separated, without `..`.
fn checked_path(path: &str) -> Result<&Path, StartError> {
    let p = Path::new(path);
    let plain = !path.is_empty()
        && !path.contains('\\')
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if plain {
        Ok(p)
    } else {
        Err(StartError::File {
            path: path.to_owned(),
            reason: "not a relative path inside the working directory".into(),
        })
    }
}

/// One listed file's hash, read from `dir`.
fn file_hash(dir: &Path, path: &str) -> Result<Hash, StartError> {
    let fail = |reason: String| StartError::File {
        path: path.to_owned(),
        reason,
    };
    let full = dir.join(checked_path(path)?);
    let file = std::fs::File::open(&full).map_err(|e| fail(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > FILE_BYTES_MAX {
        return Err(fail(format!("larger than {FILE_BYTES_MAX} bytes")));
    }
    Ok(hash_in(domain::AGENT_FILE, &bytes))
}

/// Every listed file's hash, read from `dir`, sorted by path.
pub fn file_hashes(hello: &Hello, dir: &Path) -> Result<Vec<(String, Hash)>, StartError> {
    if hello.files.len() > FILES_MAX {
        return Err(StartError::File {
            path: String::new(),
            reason: format!("the program lists more than {FILES_MAX} files"),
        });
    }
    let mut files = std::collections::BTreeMap::new();
    for path in &hello.files {
        files.insert(path.clone(), file_hash(dir, path)?);
    }
    Ok(files.into_iter().collect())
}

/// The program hash of docs/AGENTS.md: every listed file's hash, the program's name and
/// version, the SDK's and the protocol's.
pub fn program_hash(hello: &Hello, files: &[(String, Hash)]) -> Result<Hash, StartError> {
    let files: Vec<Value> = files.iter().map(|(p, h)| json!([p, h.to_hex()])).collect();
    let program = json!({
        "files": files,
        "program": {"name": hello.program.name, "version": hello.program.version},
        "protocol": hello.protocol,
        "sdk": {"name": hello.sdk.name, "version": hello.sdk.version},
    });
    let bytes = oracle_core::canon::encode(&program).map_err(|e| StartError::File {
        path: String::new(),
        reason: e.to_string(),
    })?;
    Ok(hash_in(domain::AGENT_PROGRAM, &bytes))
}
