//! What a server is asked to do (`oracle serve` flags), and every limit it keeps, by name.
//!
//! Limits are constants named after what they bound, units last (`body_bytes_max` is
//! [`BODY_BYTES_MAX`]); docs/API.md and docs/SECURITY.md list them with the tests that reach
//! them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Where `oracle serve` listens unless told otherwise.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:7420";
/// The token file under the home unless `--token-file` names another.
pub const TOKEN_FILE_DEFAULT: &str = "serve-tokens";
/// The ids of announcements the beacon delivered, under the home (so a restart announces
/// nothing twice).
pub const DELIVERED_FILE: &str = "serve-delivered";
/// What background resumes print, under the home.
pub const RESUME_LOG_FILE: &str = "serve-resume.log";

/// How often the timer wheel lists the home's timer index (`signals::timer_wheel`): a due
/// timer fires within about this long (plus the wakes before it), and an idle server reads
/// one directory five times a second.
pub const TIMER_POLL_MS: u64 = 200;

/// Timers the wheel wakes at once (`signals::timer_wheel`): each wake is a resume through the
/// host (a writer, its log read and appended, a sync), so wakes wait on the disk as much as on
/// a core, and a few at once overlap those waits; kept well under [`BACKGROUND_DRIVES_MAX`] so
/// a burst of due timers leaves room for the drives the API starts. 10,000 timers due in one
/// second: BENCHMARKS.md, "Timers".
pub const TIMER_WAKERS_MAX: usize = 4;

/// Largest request body: an answer may be `input_bytes_max` (8 MiB) of canonical bytes, which
/// is at most about twice that as JSON text. Past it: 413, nothing read further.
pub const BODY_BYTES_MAX: usize = 16 << 20;
/// How often the runs' log sizes are polled for new events (writers are other processes).
pub const POLL_INTERVAL_MS: u64 = 200;
// The read limits (pages of `/events` and `/runs`, `/state` entries, the scan for a waiting
// step's question) are kept by the host's reads, which the API answers with; named here too so
// every limit of the server has one list.
pub use oracle_host::data::{
    EVENTS_PAGE_BYTES_MAX, EVENTS_PAGE_LIMIT_DEFAULT, EVENTS_PAGE_LIMIT_MAX,
    RUNS_PAGE_LIMIT_DEFAULT, RUNS_PAGE_LIMIT_MAX, STATE_ENTRIES_MAX, WAIT_SCAN_EVENTS_MAX,
};
/// Bytes of records an SSE stream reads ahead of its client: the next batch is read from the
/// log only when the client has taken the last (at least one event per batch). A client that
/// never reads holds this much, plus what hyper and the kernel buffer for its connection
/// ([`CONNECTION_BUFFER_BYTES_MAX`]), never the log.
pub const STREAM_BUFFER_BYTES_MAX: u64 = 1 << 20;
/// Server-Sent Event streams open at once (each polls a log) unless `--streams-max` says:
/// past it, 503.
pub const STREAMS_MAX: usize = 64;
/// Runs this server drives at once in the background (runs started with `POST /runs`,
/// resumes after a signal): each is a thread and a writer, so past it a request that would
/// start one more is 503 `busy` and creates nothing; `--recover` drives one at a time besides.
pub const BACKGROUND_DRIVES_MAX: usize = 32;
/// The most `--streams-max` may allow (each stream holds a connection and polls its log).
pub const STREAMS_MAX_MAX: usize = 16_384;
/// Connections served at once besides the SSE streams: the server holds at most
/// `streams_max` + this many connections (320 by default). Past it a new connection waits in
/// the kernel's listen backlog, unaccepted, until one closes: file descriptors stay bounded
/// whatever clients open.
pub const CONNECTIONS_BESIDE_STREAMS_MAX: usize = 256;
/// Longest wait for a request's line and headers, from when the server starts waiting for
/// them (the connection's opening, or the end of the previous response); past it the
/// connection is closed. A client that sends half a request holds its slot this long at most.
pub const HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// Longest a connection may answer no request and read nothing before it is closed (browsers
/// open a new one when they need it).
pub const KEEP_ALIVE_IDLE_MS: u64 = 5_000;
/// Longest gap between the pieces of a request body: past it the request fails (400) and the
/// connection is closed, so a client that announces a body and sends none does not hold its
/// slot while the request waits for it.
pub const BODY_READ_TIMEOUT_MS: u64 = 10_000;
/// hyper's buffer per connection: the most it reads of a request head (past it: 431), and the
/// most of a response it holds before it stops asking for more (plus the one piece being
/// written) while the client does not read.
pub const CONNECTION_BUFFER_BYTES_MAX: usize = 400 << 10;
/// How long accepting pauses after an error that is not one connection's (out of file
/// descriptors, say), rather than spinning on it.
pub const ACCEPT_ERROR_PAUSE_MS: u64 = 1000;
/// How often, per `keep_alive_idle_ms`, a connection's watchdog looks whether it is idle (so an
/// idle connection is closed at most a quarter of the limit late).
pub const IDLE_CHECKS_PER_LIMIT: u32 = 4;
/// Browser sessions at once: the oldest is dropped past it.
pub const SESSIONS_MAX: usize = 1024;
/// How long a browser session lives (wall time; never recorded).
pub const SESSION_TTL_S: u64 = 12 * 60 * 60;
/// How long a sign-in form's token is taken after `/signin` gave it (time to paste a token;
/// monotonic time since the server started, never recorded).
pub const SIGNIN_TTL_S: u64 = 15 * 60;
/// Requests that read or re-derive whole logs (verify, diff, state, answers, signals) at once:
/// past it they wait, so two cores are not buried under full reads.
pub const HEAVY_JOBS_MAX: usize = 2;
/// The beacon's wait before trying a failed delivery again: doubled per attempt from the
/// first to the last value, then kept there. Deliveries are tried until one succeeds.
pub const NOTIFY_BACKOFF_MS_MIN: u64 = 250;
pub const NOTIFY_BACKOFF_MS_MAX: u64 = 30_000;
/// New events read one by one per run and poll before the watcher reads the log whole.
pub const WATCH_READS_MAX: u64 = 10_000;

/// How `oracle serve` was asked to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The oracle home (made absolute when the server starts).
    pub home: PathBuf,
    pub listen: SocketAddr,
    /// `name:<blake3 hex of secret>` lines ([`crate::tokens`]).
    pub token_file: PathBuf,
    /// Reads need no token (loopback only).
    pub read_open: bool,
    /// A listen address other than loopback is allowed.
    pub allow_remote: bool,
    /// The beacon: gets every announcement as one JSON object on stdin (exit 0 = delivered).
    pub notify_cmd: Option<PathBuf>,
    pub poll_interval_ms: u64,
    /// SSE streams open at once ([`STREAMS_MAX`] by default, at most [`STREAMS_MAX_MAX`]).
    pub streams_max: usize,
    /// Connections served at once; `None`: `streams_max` + [`CONNECTIONS_BESIDE_STREAMS_MAX`].
    pub connections_max: Option<usize>,
    /// [`HEADER_READ_TIMEOUT_MS`] unless a test wants a shorter one.
    pub header_read_timeout_ms: u64,
    /// [`KEEP_ALIVE_IDLE_MS`] unless a test wants a shorter one.
    pub keep_alive_idle_ms: u64,
    /// [`BODY_READ_TIMEOUT_MS`] unless a test wants a shorter one.
    pub body_read_timeout_ms: u64,
    /// Where runs started through the API (`POST /api/v1/runs`) work and resolve their plan's
    /// files (`--root DIR`); `None`: the server starts no runs (403 `starts_off`).
    pub root: Option<PathBuf>,
    /// The code agents `POST /api/v1/runs` may start by name (`--agent NAME=FILE`): the
    /// operator's choice, never a request's.
    pub agents: oracle_host::code::Agents,
    /// The models and secrets runs started through the API are bound to (the server's
    /// `--model` flags and the config file's `[models]` and `[secrets]`).
    pub given: oracle_host::Given,
    /// On start, drive on every run a dead process left behind (`--recover`,
    /// `oracle_host::recover`), one at a time, in the background.
    pub recover: bool,
    /// Serve a PostgreSQL store's runs (`--store URL`): they are mirrored under the home
    /// ([`STORE_MIRROR_DIR`]), and writes are checked there and queued for the store's workers
    /// (`oracle_host::store_front`).
    pub store: Option<String>,
    /// Model prices for the cost views (`--model-price`, `[prices]`): display only, applied to
    /// recorded usage when a timeline or run page is read, never recorded.
    pub prices: oracle_host::metrics::Prices,
}

/// The server's mirror of a store's runs, under the home (`--store`).
pub const STORE_MIRROR_DIR: &str = "store-mirror";

/// Why a configuration is refused before anything listens.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "--listen {0}: not a loopback address; the API would be reachable from other machines, where tokens cross the network in clear text (no TLS): pass --allow-remote to mean it"
    )]
    Remote(SocketAddr),
    #[error(
        "--read-open with --listen {0}: open reads are only allowed on a loopback address (anyone who can reach the port could read every run)"
    )]
    OpenRemote(SocketAddr),
    #[error("--notify-cmd {}: {reason}", path.display())]
    Program { path: PathBuf, reason: String },
    #[error(
        "--recover with --store: a store's workers take over the runs a stopped process left behind; the server does not drive them"
    )]
    RecoverStore,
}

impl Config {
    /// A configuration with every option at its default, for `home`.
    pub fn new(home: &Path) -> Config {
        Config {
            home: home.to_path_buf(),
            // Invariant: the default is a literal socket address.
            listen: LISTEN_DEFAULT
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 7420))),
            token_file: home.join(TOKEN_FILE_DEFAULT),
            read_open: false,
            allow_remote: false,
            notify_cmd: None,
            poll_interval_ms: POLL_INTERVAL_MS,
            streams_max: STREAMS_MAX,
            connections_max: None,
            header_read_timeout_ms: HEADER_READ_TIMEOUT_MS,
            keep_alive_idle_ms: KEEP_ALIVE_IDLE_MS,
            body_read_timeout_ms: BODY_READ_TIMEOUT_MS,
            root: None,
            agents: oracle_host::code::Agents::default(),
            given: oracle_host::Given::default(),
            recover: false,
            store: None,
            prices: oracle_host::metrics::Prices::new(),
        }
    }

    /// The connections served at once.
    pub fn connections_max(&self) -> usize {
        self.connections_max
            .unwrap_or_else(|| {
                self.streams_max
                    .saturating_add(CONNECTIONS_BESIDE_STREAMS_MAX)
            })
            .max(1)
    }

    /// The clocks and the slot count of the server's connections.
    pub fn conn_limits(&self) -> crate::conn::ConnLimits {
        let ms = |v: u64| std::time::Duration::from_millis(v.max(1));
        crate::conn::ConnLimits {
            connections_max: self.connections_max(),
            header_read_timeout: ms(self.header_read_timeout_ms),
            keep_alive_idle: ms(self.keep_alive_idle_ms),
            body_read_timeout: ms(self.body_read_timeout_ms),
        }
    }

    /// Refuses what would expose the runs: a non-loopback address without `allow_remote`, open
    /// reads anywhere but loopback, a beacon program that cannot be run.
    pub fn check(&self) -> Result<(), ConfigError> {
        let ip = self.listen.ip();
        if !ip.is_loopback() && !self.allow_remote {
            return Err(ConfigError::Remote(self.listen));
        }
        if self.read_open && !ip.is_loopback() {
            return Err(ConfigError::OpenRemote(self.listen));
        }
        if self.recover && self.store.is_some() {
            return Err(ConfigError::RecoverStore);
        }
        if let Some(p) = &self.notify_cmd {
            let meta = std::fs::metadata(p).map_err(|e| ConfigError::Program {
                path: p.clone(),
                reason: e.to_string(),
            })?;
            if !meta.is_file() {
                return Err(ConfigError::Program {
                    path: p.clone(),
                    reason: "not a file".into(),
                });
            }
        }
        Ok(())
    }
}
