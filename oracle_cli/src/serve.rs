//! `oracle serve`: the HTTP JSON API over the home (oracle_serve, docs/API.md), and
//! `oracle serve token add NAME`, which makes the bearer tokens it accepts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use oracle_serve::config::{Config, LISTEN_DEFAULT, TOKEN_FILE_DEFAULT};

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServeArgs {
    #[command(subcommand)]
    command: Option<ServeCommand>,
    /// The address to listen on (default: 127.0.0.1:7420, or `[serve] listen` of oracle.toml).
    /// Port 0 picks a free port; the server prints `listening http://ADDR` on stdout once it
    /// accepts requests. A non-loopback address needs --allow-remote.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// The tokens accepted: `name:<blake3 hex of secret>` lines (default: <home>/serve-tokens;
    /// `oracle serve token add NAME` adds one).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Reads need no token (only on a loopback address). Writes always do.
    #[arg(long)]
    read_open: bool,
    /// Allow a listen address other than loopback (tokens then cross the network in clear
    /// text: put a TLS proxy in front).
    #[arg(long)]
    allow_remote: bool,
    /// Run PROGRAM once per new suspension, adjudication request and failed run, with one JSON
    /// object on stdin (exit 0 = delivered). Failed deliveries are retried with a bounded
    /// backoff; delivered ids are kept in <home>/serve-delivered.
    #[arg(long, value_name = "PROGRAM")]
    notify_cmd: Option<PathBuf>,
    /// Server-Sent Event streams open at once (live tails and the inbox stream); past it a
    /// new stream gets 503 `busy` (default: 64).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=oracle_serve::config::STREAMS_MAX_MAX as u64))]
    streams_max: Option<u64>,
    /// Start runs asked for with `POST /api/v1/runs`, working in DIR: their plan's sub-plans,
    /// `tools` lines and `fs` grants resolve under it, never a path in the request, and no
    /// grant may run programs (docs/API.md). Without it the server starts no runs.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// A code agent `POST /api/v1/runs` may start by name, `NAME=FILE` (repeatable): FILE is a
    /// `.py`, `.mjs` or `.js` program relative to --root. A request names an agent, never a
    /// command (docs/AGENTS.md).
    #[arg(long = "agent", value_name = "NAME=FILE")]
    agents: Vec<String>,
    /// Bind a model name for runs started through the API, `NAME=URL` (repeatable; the config
    /// file's `[models]` and `[secrets]` are used too, as for `oracle run`).
    #[arg(long = "model", value_name = "NAME=URL")]
    models: Vec<String>,
    /// Ask model NAME's endpoint to stream its replies (repeatable): the pieces go to the
    /// run's SSE tail (`event: delta`) and run page while the call is in flight; the log
    /// records the whole reply.
    #[arg(long = "model-stream", value_name = "NAME")]
    model_streams: Vec<String>,
    /// At most N calls of model NAME per period in every run the server drives,
    /// `NAME=N/s|m|h` (repeatable; or `rate` in the config file's `[models.NAME]`).
    #[arg(long = "model-rate", value_name = "NAME=N/P")]
    model_rates: Vec<String>,
    /// At most N tokens of model NAME per period, `NAME=N/s|m|h` (repeatable).
    #[arg(long = "model-tokens", value_name = "NAME=N/P")]
    model_tokens: Vec<String>,
    /// At most N calls of declared tool TOOL per period, `TOOL=N/s|m|h` (repeatable).
    #[arg(long = "tool-rate", value_name = "TOOL=N/P")]
    tool_rates: Vec<String>,
    /// Send the spans of the runs this server drives (started, resumed, woken through it) to
    /// an OpenTelemetry collector as they go (as `oracle run --otlp [URL]`).
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    otlp: Option<String>,
    /// On start, drive on every run a stopped process left behind (`interrupted`, or started
    /// through the API and never begun), one at a time in the background, as a store's worker
    /// takes over a run whose lease expired. One line per run goes to <home>/serve-resume.log.
    #[arg(long)]
    recover: bool,
    /// A model binding's price, `NAME=IN/OUT` micro-units per 1M input and output tokens
    /// (repeatable; or `[prices]` in the config file): costs in `GET /api/v1/runs/{id}/timeline`
    /// and on run pages. Display only, never recorded.
    #[arg(long = "model-price", value_name = "NAME=IN/OUT")]
    pub(crate) model_price: Vec<String>,
    /// Bindings from the config file, for runs started through the API.
    #[arg(skip)]
    file_bindings: oracle_host::Given,
    /// The store to serve (`--store URL` or $ORACLE_STORE, docs/STORE.md): its runs are
    /// mirrored under the home, and writes are checked there and queued for its workers.
    #[arg(skip)]
    store: Option<String>,
}

#[derive(Subcommand, Debug)]
enum ServeCommand {
    /// Manage the bearer tokens the server accepts.
    Token(TokenArgs),
}

#[derive(Args, Debug)]
struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(Subcommand, Debug)]
enum TokenCommand {
    /// Make a token named NAME (recorded as `by` in what it writes) and print its secret once;
    /// the file keeps only its hash. The file is created with mode 0600.
    Add {
        /// Letters, digits, `.`, `_` and `-`, at most 64.
        name: String,
        /// The token file (default: <home>/serve-tokens).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
    },
}

impl ServeArgs {
    /// Serve the store at `url` instead of the home's runs.
    pub(crate) fn serve_store(&mut self, url: &str) {
        self.store = Some(url.to_owned());
    }

    /// Fills what the flags leave unsaid from the config file's `[serve]` (`crate::config`).
    /// `--read-open` and `--allow-remote` are not in the file: they open the server, so they
    /// are said on the command line each time (and a flag could not turn them off).
    pub(crate) fn configure(&mut self, settings: &crate::config::Settings) {
        let file = &settings.serve;
        // The token file says who may use the server: noted as taken, so a project's file
        // must be trusted to set it (and likewise the beacon, a program the server runs).
        let take_tokens = |token_file: &mut Option<PathBuf>| {
            if token_file.is_none()
                && let Some(i) = &file.token_file
            {
                settings.take("serve.token_file", &i.source);
                *token_file = Some(i.value.clone());
            }
        };
        if let Some(ServeCommand::Token(TokenArgs {
            command: TokenCommand::Add { token_file, .. },
        })) = &mut self.command
        {
            // Adding a token serves nothing: only the token file is read.
            take_tokens(token_file);
            return;
        }
        take_tokens(&mut self.token_file);
        let mut given = oracle_host::Given {
            models: std::mem::take(&mut self.models),
            ..Default::default()
        };
        settings.fill_bindings(
            &mut given.models,
            &mut given.model_ids,
            &mut given.model_keys,
            &mut given.secrets,
            &mut Vec::new(),
        );
        given.model_rates = std::mem::take(&mut self.model_rates);
        given.model_tokens = std::mem::take(&mut self.model_tokens);
        given.tool_rates = std::mem::take(&mut self.tool_rates);
        settings.fill_rates(
            &mut given.model_rates,
            &mut given.model_tokens,
            &mut given.tool_rates,
        );
        self.file_bindings = given;
        self.listen = self.listen.or(file.listen.as_ref().map(|i| i.value));
        if self.notify_cmd.is_none()
            && let Some(i) = &file.notify_cmd
        {
            settings.take("serve.notify_cmd", &i.source);
            self.notify_cmd = Some(i.value.clone());
        }
        self.streams_max = self
            .streams_max
            .or(file.streams_max.as_ref().map(|i| i.value));
    }
}

pub fn run(home: &Path, a: ServeArgs) -> Result<u8, CliError> {
    match a.command {
        Some(ServeCommand::Token(TokenArgs {
            command: TokenCommand::Add { name, token_file },
        })) => {
            let file = token_file.unwrap_or_else(|| home.join(TOKEN_FILE_DEFAULT));
            let secret = oracle_serve::tokens::add(&file, &name)
                .map_err(|e| CliError::input(e.to_string()))?;
            outln!("{secret}")?;
            eprintln!(
                "token `{name}` added to {}; the secret above is shown only now (send it as `Authorization: Bearer SECRET`)",
                file.display()
            );
            Ok(exit::OK)
        }
        None => {
            let mut config = Config::new(home);
            config.listen = match a.listen {
                Some(addr) => addr,
                None => LISTEN_DEFAULT.parse().map_err(|e| {
                    CliError::input(format!("the default address {LISTEN_DEFAULT}: {e}"))
                })?,
            };
            if let Some(f) = a.token_file {
                config.token_file = f;
            }
            config.read_open = a.read_open;
            config.allow_remote = a.allow_remote;
            config.notify_cmd = a.notify_cmd;
            config.recover = a.recover;
            config.store = a.store;
            config.prices = crate::show::price_table(&a.model_price)?;
            config.root = match a.root {
                Some(dir) => Some(
                    dir.canonicalize()
                        .map_err(|e| CliError::input(format!("--root {}: {e}", dir.display())))?,
                ),
                None => None,
            };
            for spec in &a.agents {
                config
                    .agents
                    .add(spec)
                    .map_err(|e| crate::run::host_error(e, false))?;
            }
            // `configure` moved the flags' models into `file_bindings`; any left are kept.
            config.given = a.file_bindings;
            config.given.models.extend(a.models);
            config.given.model_streams.extend(a.model_streams);
            config.given.model_rates.extend(a.model_rates);
            config.given.model_tokens.extend(a.model_tokens);
            config.given.tool_rates.extend(a.tool_rates);
            // The server's rates are admitted before it listens: a bad one is refused at once.
            config
                .given
                .rates()
                .map_err(|e| crate::run::host_error(e, false))?;
            config.streams_max = match a.streams_max {
                Some(n) => usize::try_from(n).unwrap_or(1),
                None => oracle_serve::config::STREAMS_MAX,
            };
            let spans = crate::spans::start(a.otlp.as_deref())?;
            let served = oracle_serve::serve::run(config, Some(oracle_serve::ui::routes));
            crate::spans::finish(spans);
            served.map_err(|e| CliError::input(e.to_string()))?;
            Ok(exit::OK)
        }
    }
}
