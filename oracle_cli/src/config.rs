//! The config file (docs/CONFIG.md): `oracle.toml` in the working directory and the user's
//! `$XDG_CONFIG_HOME/oracle/config.toml`, read here in the front end and handed on as the flags
//! they stand for (the host never sees a file). Precedence: flags > environment > the working
//! directory's file > the user's file. `oracle config show` says where each setting came from.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::Deserialize;
use serde_json::{Value, json};
use toml::Spanned;

use crate::exit::{self, CliError};
use crate::files::CONFIG_FILE_BYTES_MAX;
use crate::{Cli, Command};

/// The config file of the working directory.
pub const FILE_NAME: &str = "oracle.toml";
/// The user's config file, under `$XDG_CONFIG_HOME` (default `~/.config`).
pub const USER_FILE: &str = "oracle/config.toml";
/// The error code (`--json`: `error.code`) of a config file that cannot be used.
pub const ERROR_CODE: &str = "config";

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
    /// The settings in effect, filled in before the command runs (never a flag).
    #[arg(skip)]
    settings: Option<Settings>,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print every setting in effect and where it came from: a flag, an environment variable,
    /// a file and line, or the default. Exit 2 if a config file cannot be used.
    Show {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Print the config files oracle reads, in precedence order, and whether each exists.
    Path {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Where a setting's value came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Source {
    Flag(&'static str),
    Env(&'static str),
    File {
        path: PathBuf,
        line: usize,
    },
    #[default]
    Default,
}

impl Source {
    fn text(&self) -> String {
        match self {
            Source::Flag(f) => format!("flag {f}"),
            Source::Env(v) => format!("env {v}"),
            Source::File { path, line } => format!("{}:{line}", path.display()),
            Source::Default => "default".to_owned(),
        }
    }

    fn json(&self) -> Value {
        match self {
            Source::Flag(f) => json!({"kind": "flag", "flag": f}),
            Source::Env(v) => json!({"kind": "env", "var": v}),
            Source::File { path, line } => json!({"kind": "file", "path": path, "line": line}),
            Source::Default => json!({"kind": "default"}),
        }
    }
}

/// One setting's value and its source.
#[derive(Clone, Debug, Default)]
pub struct Item<T> {
    pub value: T,
    pub source: Source,
}

/// A model binding; each field has its own source (a flag may replace the URL and keep the
/// file's id).
#[derive(Clone, Debug, Default)]
pub struct Model {
    pub url: Option<Item<String>>,
    pub id: Option<Item<String>>,
    pub key_env: Option<Item<String>>,
}

/// `[serve]`: the settings of `oracle serve` a file may hold.
#[derive(Clone, Debug, Default)]
pub struct Serve {
    pub listen: Option<Item<SocketAddr>>,
    pub token_file: Option<Item<PathBuf>>,
    pub notify_cmd: Option<Item<PathBuf>>,
    pub streams_max: Option<Item<u64>>,
}

/// What one file says, or both merged.
#[derive(Clone, Debug, Default)]
struct Layer {
    home: Option<Item<PathBuf>>,
    store: Option<Item<String>>,
    tools: Option<Item<Vec<PathBuf>>>,
    models: BTreeMap<String, Model>,
    /// Secret name to the environment variable holding its value.
    secrets: BTreeMap<String, Item<String>>,
    serve: Serve,
    require_approval: Option<Item<bool>>,
    /// `[prices]`: a model binding's `IN/OUT` micro-units per 1M tokens.
    prices: BTreeMap<String, Item<String>>,
}

impl Layer {
    /// `self` over `lower`, setting by setting (a model field by field).
    fn over(self, lower: Layer) -> Layer {
        let mut models = lower.models;
        for (name, m) in self.models {
            let low = models.remove(&name).unwrap_or_default();
            models.insert(
                name,
                Model {
                    url: m.url.or(low.url),
                    id: m.id.or(low.id),
                    key_env: m.key_env.or(low.key_env),
                },
            );
        }
        let mut secrets = lower.secrets;
        secrets.extend(self.secrets);
        let mut prices = lower.prices;
        prices.extend(self.prices);
        Layer {
            prices,
            home: self.home.or(lower.home),
            store: self.store.or(lower.store),
            tools: self.tools.or(lower.tools),
            models,
            secrets,
            serve: Serve {
                listen: self.serve.listen.or(lower.serve.listen),
                token_file: self.serve.token_file.or(lower.serve.token_file),
                notify_cmd: self.serve.notify_cmd.or(lower.serve.notify_cmd),
                streams_max: self.serve.streams_max.or(lower.serve.streams_max),
            },
            require_approval: self.require_approval.or(lower.require_approval),
        }
    }
}

/// The settings in effect.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The files looked at, in precedence order, and whether each exists.
    files: Vec<(PathBuf, bool)>,
    pub home: Item<PathBuf>,
    pub store: Option<Item<String>>,
    pub tools: Option<Item<Vec<PathBuf>>>,
    pub models: BTreeMap<String, Model>,
    pub secrets: BTreeMap<String, Item<String>>,
    pub serve: Serve,
    /// `[evolution] require_approval`: runs of a proposed plan need its approval.
    pub require_approval_item: Option<Item<bool>>,
    /// `[prices]`: model prices for the cost views (`runs`, `inspect`, `serve`).
    pub prices: BTreeMap<String, Item<String>>,
}

// The file as written. Every leaf is `Spanned`, so `config show` can name its line.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Raw {
    home: Option<Spanned<String>>,
    store: Option<Spanned<String>>,
    tools: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    models: BTreeMap<String, RawModel>,
    // Checked by hand: a plain string here is a secret's value, refused without echoing it.
    #[serde(default)]
    secrets: BTreeMap<String, Spanned<toml::Value>>,
    serve: Option<RawServe>,
    evolution: Option<RawEvolution>,
    #[serde(default)]
    prices: BTreeMap<String, Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvolution {
    require_approval: Option<Spanned<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    url: Spanned<String>,
    id: Option<Spanned<String>>,
    key_env: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServe {
    listen: Option<Spanned<String>>,
    token_file: Option<Spanned<String>>,
    notify_cmd: Option<Spanned<String>>,
    streams_max: Option<Spanned<u64>>,
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

/// A config file that cannot be used: exit 2, code [`ERROR_CODE`], with its place.
fn error(path: &Path, at: Option<(usize, usize)>, message: &str) -> CliError {
    let text = match at {
        Some((l, c)) => format!("{}:{l}:{c}: {message}", path.display()),
        None => format!("{}: {message}", path.display()),
    };
    let mut details = json!({"kind": ERROR_CODE, "path": path});
    if let Some((l, c)) = at {
        details["line"] = json!(l);
        details["col"] = json!(c);
    }
    CliError {
        code: exit::INPUT,
        json: Some(exit::error_json(Some(details), exit::INPUT, &text)),
        message: text,
        quiet: false,
    }
}

/// A serde message made safe and helpful: a string value it quotes is cut out (it may be a
/// secret typed in the wrong place), and an unknown key gets the closest known one.
fn explain(message: &str) -> String {
    let message = message.trim_end();
    if let Some(i) = message.find("invalid type: string \"") {
        let rest = &message[i + "invalid type: string \"".len()..];
        let after = rest.find("\", ").map_or("", |j| &rest[j + 1..]);
        return format!("{}invalid type: a string{after}", &message[..i]);
    }
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let names: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
        if let Some((given, known)) = names.split_first() {
            let hint = oracle_plan::diagnostic::closest(given, known.iter().copied())
                .map(|c| format!(": did you mean `{c}`?"))
                .unwrap_or_default();
            let list: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
            return format!(
                "unknown key `{given}`{hint} (the keys here: {})",
                list.join(", ")
            );
        }
    }
    message.to_owned()
}

/// An environment variable's name: what the file holds instead of a value.
fn is_var_name(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A binding's name as `--model NAME=...` and `--secret NAME=...` take it.
fn is_binding_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Whether a PostgreSQL URL carries a password (in its user part or as `password=`).
fn has_password(url: &str) -> bool {
    let in_user = match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => url[s + 3..at].contains(':'),
        _ => false,
    };
    let in_query = url
        .split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p.starts_with("password=")));
    in_user || in_query
}

/// Parses one config file's `text`, read from `path`; relative paths in it resolve against
/// its directory.
fn parse(path: &Path, text: &str) -> Result<Layer, CliError> {
    let raw: Raw = toml::from_str(text).map_err(|e| {
        let at = e.span().map(|s| line_col(text, s.start));
        error(path, at, &explain(e.message()))
    })?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let at = |span: std::ops::Range<usize>| line_col(text, span.start);
    let item = |span: std::ops::Range<usize>| Source::File {
        path: path.to_path_buf(),
        line: line_col(text, span.start).0,
    };
    let mut layer = Layer::default();
    if let Some(h) = raw.home {
        layer.home = Some(Item {
            source: item(h.span()),
            value: dir.join(h.get_ref()),
        });
    }
    if let Some(s) = raw.store {
        let url = s.get_ref();
        if has_password(url) {
            return Err(error(
                path,
                Some(at(s.span())),
                "`store`: a password in the store URL is refused in a config file (it is never kept in one): set the whole URL in ORACLE_STORE instead, or connect in a way that needs none (a local socket, ?host=/DIR)",
            ));
        }
        if !oracle_pg::is_store_url(url) {
            return Err(error(
                path,
                Some(at(s.span())),
                "`store`: expected a PostgreSQL URL, postgres://USER@HOST:PORT/DB (a socket directory as ?host=/DIR)",
            ));
        }
        layer.store = Some(Item {
            source: item(s.span()),
            value: url.clone(),
        });
    }
    if let Some(t) = raw.tools {
        layer.tools = Some(Item {
            source: item(t.span()),
            value: t.get_ref().iter().map(|d| dir.join(d)).collect(),
        });
    }
    for (name, m) in raw.models {
        if !is_binding_name(&name) {
            return Err(error(
                path,
                Some(at(m.url.span())),
                &format!(
                    "`models.{}`: a model's name is letters, digits, `_`, `-` and `.`",
                    name.escape_debug()
                ),
            ));
        }
        let url = m.url.get_ref();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(error(
                path,
                Some(at(m.url.span())),
                &format!(
                    "`models.{name}.url`: the URL must start with http:// or https:// (an OpenAI-compatible base URL such as http://127.0.0.1:8080/v1)"
                ),
            ));
        }
        if let Some(id) = &m.id
            && id.get_ref().is_empty()
        {
            return Err(error(
                path,
                Some(at(id.span())),
                &format!("`models.{name}.id` is empty"),
            ));
        }
        if let Some(k) = &m.key_env
            && !is_var_name(k.get_ref())
        {
            return Err(error(
                path,
                Some(at(k.span())),
                &format!(
                    "`models.{name}.key_env` is not a variable's name (letters, digits, `_`): the file names where the key is, never the key itself"
                ),
            ));
        }
        layer.models.insert(
            name,
            Model {
                url: Some(Item {
                    source: item(m.url.span()),
                    value: url.clone(),
                }),
                id: m.id.map(|i| Item {
                    source: item(i.span()),
                    value: i.into_inner(),
                }),
                key_env: m.key_env.map(|k| Item {
                    source: item(k.span()),
                    value: k.into_inner(),
                }),
            },
        );
    }
    for (name, v) in raw.prices {
        let given = format!("{name}={}", v.get_ref());
        if let Err(e) = oracle_host::metrics::parse_price(&given) {
            return Err(error(
                path,
                Some(at(v.span())),
                &format!("`prices.{}`: {e}", name.escape_debug()),
            ));
        }
        layer.prices.insert(
            name,
            Item {
                source: item(v.span()),
                value: v.into_inner(),
            },
        );
    }
    for (name, v) in raw.secrets {
        let place = Some(at(v.span()));
        if !is_binding_name(&name) {
            return Err(error(
                path,
                place,
                &format!(
                    "`secrets.{}`: a secret's name is letters, digits, `_`, `-` and `.`",
                    name.escape_debug()
                ),
            ));
        }
        let refused = || {
            error(
                path,
                place,
                &format!(
                    "`secrets.{name}`: a secret's value is never kept in a config file; write `{name} = {{ env = \"VAR\" }}` and set VAR in the environment"
                ),
            )
        };
        let toml::Value::Table(t) = v.get_ref() else {
            return Err(refused());
        };
        if let Some(k) = t.keys().find(|k| k.as_str() != "env") {
            let hint = oracle_plan::diagnostic::closest(k, ["env"])
                .map(|c| format!(": did you mean `{c}`?"))
                .unwrap_or_default();
            return Err(error(
                path,
                place,
                &format!("`secrets.{name}`: unknown key `{k}`{hint} (the keys here: `env`)"),
            ));
        }
        let Some(toml::Value::String(var)) = t.get("env") else {
            return Err(refused());
        };
        if !is_var_name(var) {
            return Err(error(
                path,
                place,
                &format!(
                    "`secrets.{name}.env` is not a variable's name (letters, digits, `_`): the file names where the secret is, never the secret itself"
                ),
            ));
        }
        layer.secrets.insert(
            name,
            Item {
                source: item(v.span()),
                value: var.clone(),
            },
        );
    }
    if let Some(r) = raw.evolution.and_then(|e| e.require_approval) {
        layer.require_approval = Some(Item {
            source: item(r.span()),
            value: *r.get_ref(),
        });
    }
    if let Some(s) = raw.serve {
        if let Some(l) = s.listen {
            let addr = l.get_ref().parse::<SocketAddr>().map_err(|_| {
                error(
                    path,
                    Some(at(l.span())),
                    "`serve.listen`: expected an address and port, e.g. 127.0.0.1:7420",
                )
            })?;
            layer.serve.listen = Some(Item {
                source: item(l.span()),
                value: addr,
            });
        }
        if let Some(f) = s.token_file {
            layer.serve.token_file = Some(Item {
                source: item(f.span()),
                value: dir.join(f.get_ref()),
            });
        }
        if let Some(p) = s.notify_cmd {
            // A bare name is looked up on PATH, as on the command line; a path is the file's.
            let value = if p.get_ref().contains('/') {
                dir.join(p.get_ref())
            } else {
                PathBuf::from(p.get_ref())
            };
            layer.serve.notify_cmd = Some(Item {
                source: item(p.span()),
                value,
            });
        }
        if let Some(n) = s.streams_max {
            let max = oracle_serve::config::STREAMS_MAX_MAX as u64;
            if !(1..=max).contains(n.get_ref()) {
                return Err(error(
                    path,
                    Some(at(n.span())),
                    &format!("`serve.streams_max`: from 1 to {max}"),
                ));
            }
            layer.serve.streams_max = Some(Item {
                source: item(n.span()),
                value: *n.get_ref(),
            });
        }
    }
    Ok(layer)
}

/// The user's config file: `$XDG_CONFIG_HOME/oracle/config.toml` (an absolute
/// `XDG_CONFIG_HOME` only, as the XDG spec says), else `$HOME/.config/oracle/config.toml`.
fn user_file() -> Option<PathBuf> {
    let nonempty = |v: std::ffi::OsString| (!v.is_empty()).then_some(v);
    match std::env::var_os("XDG_CONFIG_HOME").and_then(nonempty) {
        Some(d) if Path::new(&d).is_absolute() => Some(PathBuf::from(d).join(USER_FILE)),
        _ => std::env::var_os("HOME")
            .and_then(nonempty)
            .map(|h| PathBuf::from(h).join(".config").join(USER_FILE)),
    }
}

/// The files read, highest precedence first.
fn files() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from(FILE_NAME)];
    out.extend(user_file());
    out
}

/// Reads one file: `None` if there is none.
fn read(path: &Path) -> Result<Option<String>, CliError> {
    if let Err(e) = std::fs::symlink_metadata(path)
        && e.kind() == std::io::ErrorKind::NotFound
    {
        return Ok(None);
    }
    let bytes = oracle_runtime::fsread::read_regular_file(
        path,
        CONFIG_FILE_BYTES_MAX,
        "config_file_bytes_max",
    )
    .map_err(|e| error(path, None, &e.reason.to_string()))?;
    String::from_utf8(bytes).map(Some).map_err(|e| {
        error(
            path,
            None,
            &format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()),
        )
    })
}

/// An environment variable's value, if set and not empty.
fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

/// The settings in effect, given the global flags.
fn load(flag_home: Option<&Path>, flag_store: Option<&str>) -> Result<Settings, CliError> {
    let mut merged = Layer::default();
    let mut files_seen = Vec::new();
    // Lowest precedence first, each over the one before.
    for path in files().into_iter().rev() {
        let text = read(&path)?;
        files_seen.push((path.clone(), text.is_some()));
        if let Some(text) = text {
            merged = parse(&path, &text)?.over(merged);
        }
    }
    files_seen.reverse();
    let home_env = oracle_runtime::paths::HOME_ENV;
    let home = match (flag_home, env(home_env)) {
        (Some(h), _) => Item {
            value: h.to_path_buf(),
            source: Source::Flag("--home"),
        },
        (None, Some(e)) => Item {
            value: PathBuf::from(e),
            source: Source::Env(home_env),
        },
        (None, None) => merged.home.unwrap_or(Item {
            value: PathBuf::from(oracle_runtime::paths::HOME_DEFAULT),
            source: Source::Default,
        }),
    };
    let store = match (flag_store, env(oracle_pg::STORE_ENV)) {
        (Some(s), _) => Some(Item {
            value: s.to_owned(),
            source: Source::Flag("--store"),
        }),
        (None, Some(e)) => Some(Item {
            value: e,
            source: Source::Env(oracle_pg::STORE_ENV),
        }),
        (None, None) => merged.store,
    };
    Ok(Settings {
        files: files_seen,
        home,
        store,
        tools: merged.tools,
        models: merged.models,
        secrets: merged.secrets,
        serve: merged.serve,
        require_approval_item: merged.require_approval,
        prices: merged.prices,
    })
}

/// Whether `command` reads no setting (so a broken config file does not stop it): plans, the
/// language server, keys, completions, the man page, and `config path`.
fn needs_no_settings(command: &Command) -> bool {
    matches!(
        command,
        Command::Plan(_)
            | Command::Lsp
            | Command::Keygen(_)
            | Command::Completions { .. }
            | Command::Man
            | Command::Config(ConfigArgs {
                command: ConfigCommand::Path { .. },
                ..
            })
    )
}

/// Reads the config files and puts what they say under the parsed flags: the home and the
/// store for every command, bindings for new runs (`run`, `submit`), tool directories for
/// `tools list` and `tools call`, and `serve`'s settings. A run that exists keeps its own
/// bindings (`resume`, `replay`, `worker` use those, with flags over them).
pub fn apply(cli: &mut Cli) -> Result<(), CliError> {
    if needs_no_settings(&cli.command) {
        return Ok(());
    }
    let settings = load(cli.home.as_deref(), cli.store.as_deref())?;
    cli.home = Some(settings.home.value.clone());
    cli.store = settings.store.as_ref().map(|s| s.value.clone());
    match &mut cli.command {
        Command::Run(a) | Command::Submit(a) => a.configure(&settings),
        Command::Resume(a) => a.set_require_approval(settings.require_approval()),
        Command::Fork(a) => a.set_require_approval(settings.require_approval()),
        Command::Evolve(a) => a.require_approval = settings.require_approval(),
        Command::Serve(a) => {
            a.configure(&settings);
            settings.fill_prices(&mut a.model_price);
        }
        Command::Inspect(a) => settings.fill_prices(&mut a.model_price),
        Command::Runs(a) => settings.fill_prices(&mut a.model_price),
        Command::Tools(a) => a.configure(settings.tools.as_ref().map(|t| t.value.as_slice())),
        Command::Config(a) => a.settings = Some(settings),
        _ => {}
    }
    Ok(())
}

/// Whether `list` (`NAME=VALUE` flags) names `name`.
fn names(list: &[String], name: &str) -> bool {
    list.iter()
        .any(|t| t.split_once('=').is_some_and(|(n, _)| n == name))
}

impl Settings {
    /// Whether the file requires approval of proposed plans (`[evolution]`).
    pub fn require_approval(&self) -> bool {
        self.require_approval_item.as_ref().is_some_and(|i| i.value)
    }

    /// Adds the file's prices to `--model-price` flags, each binding a flag does not price.
    pub fn fill_prices(&self, flags: &mut Vec<String>) {
        for (name, price) in &self.prices {
            if !names(flags, name) {
                flags.push(format!("{name}={}", price.value));
            }
        }
    }

    /// Adds the file's bindings to a new run's flags, each where no flag gives it: a model's
    /// URL, id and key one by one, secrets by name; `--tools` replaces the file's list.
    pub fn fill_bindings(
        &self,
        models: &mut Vec<String>,
        model_ids: &mut Vec<String>,
        model_keys: &mut Vec<String>,
        secrets: &mut Vec<String>,
        tools: &mut Vec<PathBuf>,
    ) {
        for (name, m) in &self.models {
            for (field, list) in [
                (&m.url, &mut *models),
                (&m.id, &mut *model_ids),
                (&m.key_env, &mut *model_keys),
            ] {
                if let Some(f) = field
                    && !names(list, name)
                {
                    list.push(format!("{name}={}", f.value));
                }
            }
        }
        for (name, var) in &self.secrets {
            if !names(secrets, name) {
                secrets.push(format!("{name}={}", var.value));
            }
        }
        if tools.is_empty()
            && let Some(t) = &self.tools
        {
            tools.clone_from(&t.value);
        }
    }

    /// Every setting, in a fixed order: key, value (null when unset) and source.
    fn rows(&self) -> Vec<(String, Value, Source)> {
        fn row<T: serde::Serialize>(
            key: &str,
            item: Option<&Item<T>>,
            default: Value,
        ) -> (String, Value, Source) {
            match item {
                Some(i) => (key.to_owned(), json!(i.value), i.source.clone()),
                None => (key.to_owned(), default, Source::Default),
            }
        }
        let mut rows = vec![
            (
                "home".to_owned(),
                json!(self.home.value),
                self.home.source.clone(),
            ),
            match &self.store {
                Some(s) => (
                    "store".to_owned(),
                    json!(oracle_pg::redact(&s.value)),
                    s.source.clone(),
                ),
                None => ("store".to_owned(), Value::Null, Source::Default),
            },
            row("tools", self.tools.as_ref(), json!([])),
        ];
        for (name, m) in &self.models {
            rows.push(row(
                &format!("models.{name}.url"),
                m.url.as_ref(),
                Value::Null,
            ));
            rows.push(row(
                &format!("models.{name}.id"),
                m.id.as_ref(),
                json!(name),
            ));
            rows.push(row(
                &format!("models.{name}.key_env"),
                m.key_env.as_ref(),
                Value::Null,
            ));
        }
        for (name, price) in &self.prices {
            rows.push((
                format!("prices.{name}"),
                json!(price.value),
                price.source.clone(),
            ));
        }
        for (name, var) in &self.secrets {
            rows.push((
                format!("secrets.{name}.env"),
                json!(var.value),
                var.source.clone(),
            ));
        }
        let s = &self.serve;
        rows.extend([
            row(
                "serve.listen",
                s.listen.as_ref(),
                json!(oracle_serve::config::LISTEN_DEFAULT),
            ),
            row(
                "serve.token_file",
                s.token_file.as_ref(),
                json!(
                    self.home
                        .value
                        .join(oracle_serve::config::TOKEN_FILE_DEFAULT)
                ),
            ),
            row("serve.notify_cmd", s.notify_cmd.as_ref(), Value::Null),
            row(
                "serve.streams_max",
                s.streams_max.as_ref(),
                json!(oracle_serve::config::STREAMS_MAX),
            ),
            row(
                "evolution.require_approval",
                self.require_approval_item.as_ref(),
                json!(false),
            ),
        ]);
        rows
    }
}

/// `oracle config show | path`.
pub fn run(a: ConfigArgs) -> Result<u8, CliError> {
    match a.command {
        ConfigCommand::Path { json: json_out } => {
            let found: Vec<(PathBuf, bool)> = files()
                .into_iter()
                .map(|p| {
                    let exists = p.exists();
                    (p, exists)
                })
                .collect();
            print_files(&found, json_out)
        }
        ConfigCommand::Show { json: json_out } => {
            let settings = a
                .settings
                .ok_or_else(|| CliError::input("the settings were not read"))?;
            let rows = settings.rows();
            if json_out {
                let map: serde_json::Map<String, Value> = rows
                    .into_iter()
                    .map(|(k, v, s)| (k, json!({"value": v, "source": s.json()})))
                    .collect();
                let files: Vec<Value> = settings
                    .files
                    .iter()
                    .map(|(p, f)| json!({"path": p, "found": f}))
                    .collect();
                crate::out::json(&json!({"ok": true, "files": files, "settings": map}))?;
                return Ok(exit::OK);
            }
            let text = |v: &Value| match v {
                Value::Null => "-".to_owned(),
                Value::String(s) => s.clone(),
                Value::Array(items) if items.is_empty() => "-".to_owned(),
                Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
                    .collect::<Vec<_>>()
                    .join(", "),
                other => other.to_string(),
            };
            let width = rows.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
            let values: Vec<String> = rows.iter().map(|(_, v, _)| text(v)).collect();
            let vwidth = values.iter().map(String::len).max().unwrap_or(0);
            for ((key, _, source), value) in rows.iter().zip(&values) {
                outln!("{key:width$}  {value:vwidth$}  {}", source.text())?;
            }
            let read: Vec<String> = settings
                .files
                .iter()
                .filter(|(_, f)| *f)
                .map(|(p, _)| p.display().to_string())
                .collect();
            if read.is_empty() {
                outln!("(no config file: `oracle config path` lists where oracle looks)")?;
            }
            Ok(exit::OK)
        }
    }
}

fn print_files(found: &[(PathBuf, bool)], json_out: bool) -> Result<u8, CliError> {
    if json_out {
        let files: Vec<Value> = found
            .iter()
            .map(|(p, f)| json!({"path": p, "found": f}))
            .collect();
        crate::out::json(&json!({"ok": true, "files": files}))?;
    } else {
        for (p, f) in found {
            outln!(
                "{}  {}",
                p.display(),
                if *f { "found" } else { "not found" }
            )?;
        }
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_get_the_closest_known_one() {
        let m = explain("unknown field `hoem`, expected one of `home`, `store`, `tools`");
        assert!(
            m.starts_with("unknown key `hoem`: did you mean `home`?"),
            "{m}"
        );
    }

    #[test]
    fn a_string_in_the_wrong_place_is_not_echoed() {
        let m = explain("invalid type: string \"sk-secret\", expected u64");
        assert!(!m.contains("sk-secret"), "{m}");
        assert!(m.contains("expected u64"), "{m}");
    }

    #[test]
    fn passwords_in_store_urls_are_found() {
        assert!(has_password("postgres://u:p@h/db"));
        assert!(has_password("postgres://u@h/db?password=x"));
        assert!(!has_password("postgres://u@h/db?host=/tmp"));
    }

    #[test]
    fn lines_and_columns_count_from_one() {
        assert_eq!(line_col("a\nbc = 1", 3), (2, 2));
        assert_eq!(line_col("x", 0), (1, 1));
    }
}
