//! The state every handler shares: the home, the tokens, the browser sessions, the
//! configuration, and the watcher's inbox.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use crate::auth::Sessions;
use crate::config::{BACKGROUND_DRIVES_MAX, Config, HEAVY_JOBS_MAX, RESUME_LOG_FILE};
use crate::error::ApiError;
use crate::runid::{self, ValidRun};
use crate::tokens::{TokenError, TokenStore};
use crate::watch::Watch;

/// What a server (and the UI routes mounted in it) share. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    /// The oracle home, absolute.
    pub home: Arc<PathBuf>,
    pub tokens: Arc<TokenStore>,
    pub sessions: Arc<Sessions>,
    /// The inbox, kept up to date by the poll thread `serve` starts.
    pub watch: Arc<Watch>,
    /// Requests that read or re-derive whole logs hold one of these.
    pub(crate) heavy: Arc<tokio::sync::Semaphore>,
    /// SSE streams open now.
    pub(crate) streams: Arc<AtomicUsize>,
    /// The runs this server drives in the background on a file home (runs started with
    /// `POST /runs`, resumes after a signal), at most `BACKGROUND_DRIVES_MAX` at once.
    pub(crate) drives: Arc<oracle_host::Background>,
    /// What this server serves, called without asking which: the file home, or the store
    /// (`--store`) whose runs are mirrored into `home`, writes checked there and queued for its
    /// workers.
    pub backend: oracle_host::Backend,
    /// The runs' metrics, each run's kept until its log grows (`GET /metrics`).
    pub(crate) metrics: Arc<oracle_host::metrics::Metrics>,
    /// Becomes `true` when the server shuts down (SSE streams end on it).
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
}

/// Why a server's state could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{}: {source}", path.display())]
    Home {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tokens(#[from] TokenError),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("--store: {0}")]
    Store(#[from] oracle_host::HostError),
}

impl AppState {
    /// The state for `config`: the home made absolute (and created), the token file read.
    /// `shutdown` ends the SSE streams when it turns `true`.
    pub fn new(
        config: Config,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Result<AppState, StateError> {
        let home_err = |source| StateError::Home {
            path: config.home.clone(),
            source,
        };
        std::fs::create_dir_all(&config.home).map_err(home_err)?;
        let mut home = config.home.canonicalize().map_err(home_err)?;
        let tokens = TokenStore::open(&config.token_file)?;
        let front = match &config.store {
            Some(url) => {
                let mirror = home.join(crate::config::STORE_MIRROR_DIR);
                let server = format!("serve-{}-{}", std::process::id(), config.listen);
                let front = oracle_host::store_front::StoreFront::open(url, &mirror, &server)?;
                // Reads see the store's runs as a file home's, in the mirror.
                home = mirror;
                Some(Arc::new(front))
            }
            None => None,
        };
        let backend = match front {
            Some(front) => oracle_host::Backend::Store(front),
            None => oracle_host::Backend::Home(home.clone()),
        };
        Ok(AppState {
            backend,
            watch: Arc::new(Watch::new(&home)),
            drives: Arc::new(oracle_host::Background::new(
                home.join(RESUME_LOG_FILE),
                BACKGROUND_DRIVES_MAX,
            )),
            home: Arc::new(home),
            tokens: Arc::new(tokens),
            sessions: Arc::new(Sessions::new()?),
            config: Arc::new(config),
            heavy: Arc::new(tokio::sync::Semaphore::new(HEAVY_JOBS_MAX)),
            streams: Arc::new(AtomicUsize::new(0)),
            metrics: Arc::new(oracle_host::metrics::Metrics::new()),
            shutdown,
        })
    }

    /// The run a request names, checked ([`runid::validate`]).
    pub fn run(&self, id: &str) -> Result<ValidRun, ApiError> {
        Ok(runid::validate(&self.home, id)?)
    }
}
