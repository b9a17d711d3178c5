//! The config file (docs/CONFIG.md): `oracle.toml` in the working directory (a project's) and
//! the user's `$XDG_CONFIG_HOME/oracle/config.toml`, read here in the front end and handed on as
//! the flags they stand for (the host never sees a file). Precedence: flags > environment > the
//! user's file > the project's file. A project's file is often someone else's, so the settings
//! of it that choose a secret, an endpoint or a program are taken only once the user trusted its
//! exact bytes (`oracle config trust`; the rule is `oracle_host::trust::decide`). `oracle config
//! show` says where each setting came from and whether it is trusted.

use std::cell::RefCell;
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
use oracle_host::trust::{self, Setting};

/// The config file of the working directory.
pub const FILE_NAME: &str = "oracle.toml";
/// The user's config file, in the user's config directory (`oracle_host::trust::config_dir`:
/// `$ORACLE_CONFIG_DIR`, else `$XDG_CONFIG_HOME/oracle`, else `~/.config/oracle`).
pub const USER_FILE: &str = "config.toml";
/// The error code (`--json`: `error.code`) of a config file that cannot be used.
pub const ERROR_CODE: &str = "config";

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
    /// The settings in effect, filled in before the command runs (never a flag).
    #[arg(skip)]
    settings: Option<Box<Settings>>,
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
    /// Trust a project's config file as it is now (default: ./oracle.toml): its settings that
    /// choose a secret, an endpoint or a program (model URLs and keys, secrets, tools, the
    /// store, `[serve] notify_cmd` and `token_file`) are then used. Its BLAKE3 hash and
    /// canonical path go to the user's trust list; any change to the file needs trusting again.
    Trust {
        /// The file (default: oracle.toml in the working directory).
        file: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Forget that a project's config file is trusted (default: ./oracle.toml).
    Untrust {
        /// The file (default: oracle.toml in the working directory).
        file: Option<PathBuf>,
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
    /// `rate = "60/m"`: `--model-rate NAME=60/m`.
    pub rate: Option<Item<String>>,
    /// `tokens = "100000/m"`: `--model-tokens NAME=100000/m`.
    pub tokens: Option<Item<String>>,
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
    /// `[tool_rates]`: a declared tool's `N/P` (`--tool-rate TOOL=N/P`).
    tool_rates: BTreeMap<String, Item<String>>,
}

impl Layer {
    /// The settings this file sets that need trust (`oracle_host::trust::needs_trust`), in a
    /// fixed order, each with its line: what `config trust` says it lets through.
    fn guarded(&self) -> Vec<Setting> {
        let mut all: Vec<(String, &Source)> = Vec::new();
        all.extend(self.home.as_ref().map(|i| ("home".to_owned(), &i.source)));
        all.extend(self.store.as_ref().map(|i| ("store".to_owned(), &i.source)));
        all.extend(self.tools.as_ref().map(|i| ("tools".to_owned(), &i.source)));
        for (name, m) in &self.models {
            all.extend(
                m.url
                    .as_ref()
                    .map(|i| (format!("models.{name}.url"), &i.source)),
            );
            all.extend(
                m.id.as_ref()
                    .map(|i| (format!("models.{name}.id"), &i.source)),
            );
            let key = m.key_env.as_ref();
            all.extend(key.map(|i| (format!("models.{name}.key_env"), &i.source)));
        }
        for (name, i) in &self.secrets {
            all.push((format!("secrets.{name}.env"), &i.source));
        }
        let s = &self.serve;
        all.extend(
            s.token_file
                .as_ref()
                .map(|i| ("serve.token_file".to_owned(), &i.source)),
        );
        all.extend(
            s.notify_cmd
                .as_ref()
                .map(|i| ("serve.notify_cmd".to_owned(), &i.source)),
        );
        all.into_iter()
            .filter(|(k, _)| trust::needs_trust(k))
            .map(|(key, source)| Setting {
                key,
                line: match source {
                    Source::File { line, .. } => Some(*line),
                    _ => None,
                },
            })
            .collect()
    }

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
                    // A key goes only to the URL of the file that names it (every model a
                    // file names has its URL there): the lower file never picks the variable
                    // sent to the upper file's endpoint.
                    key_env: m.key_env,
                    rate: m.rate.or(low.rate),
                    tokens: m.tokens.or(low.tokens),
                },
            );
        }
        let mut tool_rates = lower.tool_rates;
        tool_rates.extend(self.tool_rates);
        let mut secrets = lower.secrets;
        secrets.extend(self.secrets);
        let mut prices = lower.prices;
        prices.extend(self.prices);
        Layer {
            prices,
            tool_rates,
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

/// The project's file (`oracle.toml` in the working directory), as read.
#[derive(Clone, Debug)]
struct Project {
    /// As settings name it in their source (`oracle.toml`).
    shown: PathBuf,
    /// The path the trust list keys.
    canonical: PathBuf,
    /// The exact bytes parsed, which trust is given to.
    bytes: Vec<u8>,
}

/// The settings in effect.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The files looked at, in precedence order, and whether each exists.
    files: Vec<(PathBuf, bool)>,
    /// The project's file, if there is one.
    project: Option<Project>,
    /// The settings the command took from the project's file (`Settings::take`), for the
    /// trust decision once the command is configured (`Settings::admit`).
    used: RefCell<Vec<Setting>>,
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
    /// `[tool_rates]`: declared tools' rates (`--tool-rate`).
    pub tool_rates: BTreeMap<String, Item<String>>,
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
    #[serde(default)]
    tool_rates: BTreeMap<String, Spanned<String>>,
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
    rate: Option<Spanned<String>>,
    tokens: Option<Spanned<String>>,
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

/// The file's `[prices]` and `[tool_rates]`, each checked as its flag is.
fn priced_and_paced(
    path: &Path,
    at: &dyn Fn(std::ops::Range<usize>) -> (usize, usize),
    prices: BTreeMap<String, Spanned<String>>,
    tool_rates: BTreeMap<String, Spanned<String>>,
    layer: &mut Layer,
) -> Result<(), CliError> {
    for (name, v) in prices {
        let given = format!("{name}={}", v.get_ref());
        if let Err(e) = oracle_host::metrics::parse_price(&given) {
            return Err(error(
                path,
                Some(at(v.span())),
                &format!("`prices.{}`: {e}", name.escape_debug()),
            ));
        }
        let (line, _) = at(v.span());
        let source = Source::File {
            path: path.to_path_buf(),
            line,
        };
        let value = v.into_inner();
        layer.prices.insert(name, Item { source, value });
    }
    for (name, v) in tool_rates {
        if let Some(i) = rate_item(path, at, "tool_rates", &name, Some(v))? {
            layer.tool_rates.insert(name, i);
        }
    }
    Ok(())
}

/// A rate of the file (`models.NAME.rate`, `models.NAME.tokens`, `tool_rates.NAME`), admitted
/// by the host's one function (`oracle_host::rate::admit`): one that is not a rate is refused
/// with its place and the code every door gives, `rate_invalid`.
fn rate_item(
    path: &Path,
    at: &dyn Fn(std::ops::Range<usize>) -> (usize, usize),
    setting: &str,
    name: &str,
    value: Option<Spanned<String>>,
) -> Result<Option<Item<String>>, CliError> {
    let Some(v) = value else {
        return Ok(None);
    };
    let key = match setting.split_once('.') {
        Some((table, field)) => format!("{table}.{name}.{field}"),
        None => format!("{setting}.{name}"),
    };
    let given = format!("{name}={}", v.get_ref());
    if let Err(e) = oracle_host::rate::admit(&key, &given) {
        let mut refused = error(path, Some(at(v.span())), &format!("`{key}`: {e}"));
        if let Some(j) = refused.json.as_mut() {
            j["code"] = json!(e.code());
            j["kind"] = json!(e.code());
        }
        return Err(refused);
    }
    let (line, _) = at(v.span());
    Ok(Some(Item {
        source: Source::File {
            path: path.to_path_buf(),
            line,
        },
        value: v.into_inner(),
    }))
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
        if !oracle_host::database::is_store_url(url) {
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
        let rate = rate_item(path, &at, "models.rate", &name, m.rate)?;
        let tokens = rate_item(path, &at, "models.tokens", &name, m.tokens)?;
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
                rate,
                tokens,
            },
        );
    }
    priced_and_paced(path, &at, raw.prices, raw.tool_rates, &mut layer)?;
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

/// The user's config directory (`oracle_host::trust::config_dir`), which holds the user's
/// file and the trust list.
fn config_dir() -> Option<PathBuf> {
    trust::config_dir(|k| std::env::var_os(k))
}

/// The user's config file.
fn user_file() -> Option<PathBuf> {
    config_dir().map(|d| d.join(USER_FILE))
}

/// The files read, highest precedence first: the user's, then the project's.
fn files() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = user_file().into_iter().collect();
    out.push(PathBuf::from(FILE_NAME));
    out
}

/// Reads one file: `None` if there is none.
fn read(path: &Path) -> Result<Option<String>, CliError> {
    if let Err(e) = std::fs::symlink_metadata(path)
        && e.kind() == std::io::ErrorKind::NotFound
    {
        return Ok(None);
    }
    let bytes =
        oracle_host::plans::read_regular(path, CONFIG_FILE_BYTES_MAX, "config_file_bytes_max")
            .map_err(|e| error(path, None, &e.reason.to_string()))?;
    String::from_utf8(bytes).map(Some).map_err(|e| {
        error(
            path,
            None,
            &format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()),
        )
    })
}

/// `path` with every link resolved, which the trust list keys.
fn canonical(path: &Path) -> Result<PathBuf, CliError> {
    path.canonicalize()
        .map_err(|e| error(path, None, &format!("cannot resolve its path: {e}")))
}

/// An environment variable's value, if set and not empty.
fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

/// The settings in effect, given the global flags.
fn load(flag_home: Option<&Path>, flag_store: Option<&str>) -> Result<Settings, CliError> {
    let mut merged = Layer::default();
    let mut files_seen = Vec::new();
    let mut project = None;
    // Lowest precedence first (the project's), each over the one before.
    for path in files().into_iter().rev() {
        let text = read(&path)?;
        files_seen.push((path.clone(), text.is_some()));
        let Some(text) = text else { continue };
        merged = parse(&path, &text)?.over(merged);
        if path == Path::new(FILE_NAME) {
            project = Some(Project {
                canonical: canonical(&path)?,
                shown: path,
                bytes: text.into_bytes(),
            });
        }
    }
    files_seen.reverse();
    let home_env = oracle_host::HOME_ENV;
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
            value: PathBuf::from(oracle_host::HOME_DEFAULT),
            source: Source::Default,
        }),
    };
    let store = match (flag_store, env(oracle_host::STORE_ENV)) {
        (Some(s), _) => Some(Item {
            value: s.to_owned(),
            source: Source::Flag("--store"),
        }),
        (None, Some(e)) => Some(Item {
            value: e,
            source: Source::Env(oracle_host::STORE_ENV),
        }),
        (None, None) => merged.store,
    };
    Ok(Settings {
        files: files_seen,
        project,
        used: RefCell::default(),
        home,
        store,
        tools: merged.tools,
        models: merged.models,
        secrets: merged.secrets,
        serve: merged.serve,
        require_approval_item: merged.require_approval,
        prices: merged.prices,
        tool_rates: merged.tool_rates,
    })
}

/// Whether `command` reads no setting (so a broken config file does not stop it): plans, the
/// language server, keys, completions, the man page, `config path`, and `config trust` and
/// `untrust` (which read the one file they are given).
fn needs_no_settings(command: &Command) -> bool {
    matches!(
        command,
        Command::Plan(_)
            | Command::Lsp
            | Command::Keygen(_)
            | Command::Completions { .. }
            | Command::Man
            | Command::Config(ConfigArgs {
                command: ConfigCommand::Path { .. }
                    | ConfigCommand::Trust { .. }
                    | ConfigCommand::Untrust { .. },
                ..
            })
    )
}

/// Reads the config files and puts what they say under the parsed flags: the home and the
/// store for every command, bindings for new runs (`run`, `submit`), tool directories for
/// `tools list` and `tools call`, and `serve`'s settings. A run that exists keeps its own
/// bindings (`resume`, `replay`, `worker` use those, with flags over them). Refused
/// (`config_untrusted`) when the command would take a setting that needs trust from a project's
/// file not trusted as it is; `config show` only shows them.
pub fn apply(cli: &mut Cli) -> Result<(), CliError> {
    if needs_no_settings(&cli.command) {
        return Ok(());
    }
    let settings = load(cli.home.as_deref(), cli.store.as_deref())?;
    cli.home = Some(settings.home.value.clone());
    cli.store = settings.store.as_ref().map(|s| s.value.clone());
    if let Command::Config(a) = &mut cli.command {
        a.settings = Some(Box::new(settings));
        return Ok(());
    }
    if let Some(s) = &settings.store {
        settings.take("store", &s.source);
    }
    match &mut cli.command {
        Command::Run(a) | Command::Submit(a) => a.configure(&settings),
        Command::Resume(a) => a.configure(&settings),
        Command::Fork(a) => a.configure(&settings),
        Command::Evolve(a) => a.require_approval = settings.require_approval(),
        Command::Serve(a) => {
            a.configure(&settings);
            settings.fill_prices(&mut a.model_price);
        }
        Command::Inspect(a) => settings.fill_prices(&mut a.model_price),
        Command::Runs(a) => settings.fill_prices(&mut a.model_price),
        Command::Tools(a) => a.configure(&settings),
        _ => {}
    }
    settings.admit()
}

/// Whether `list` (`NAME=VALUE` flags) names `name`.
fn names(list: &[String], name: &str) -> bool {
    list.iter()
        .any(|t| t.split_once('=').is_some_and(|(n, _)| n == name))
}

/// A trust refusal (or an unusable trust list) on its way to the user, with the host's code.
fn trust_error(e: trust::TrustError) -> CliError {
    let e = oracle_host::HostError::from(e);
    CliError {
        code: e.exit(),
        message: e.to_string(),
        json: Some(e.error_value()),
        quiet: false,
    }
}

impl Settings {
    /// Notes that the command takes setting `key` from `source`: kept for the trust decision
    /// when it is the project's file.
    pub fn take(&self, key: &str, source: &Source) {
        if let (Some(p), Source::File { path, line }) = (&self.project, source)
            && *path == p.shown
        {
            self.used.borrow_mut().push(Setting {
                key: key.to_owned(),
                line: Some(*line),
            });
        }
    }

    /// The project's file's standing in the trust list: `None` without one.
    fn project_state(&self) -> Result<Option<trust::State>, CliError> {
        let Some(p) = &self.project else {
            return Ok(None);
        };
        let state = match config_dir() {
            Some(d) => trust::TrustList::read(&d)
                .map_err(trust_error)?
                .state(&p.canonical, &p.bytes),
            None => trust::State::Untrusted,
        };
        Ok(Some(state))
    }

    /// Whether `source` is the project's file.
    fn is_project(&self, source: &Source) -> bool {
        matches!((&self.project, source), (Some(p), Source::File { path, .. }) if *path == p.shown)
    }

    /// The trust decision (`oracle_host::trust::decide`) on what the command took from the
    /// project's file.
    fn admit(&self) -> Result<(), CliError> {
        let Some(p) = &self.project else {
            return Ok(());
        };
        let used = self.used.borrow();
        let shown = p.shown.display().to_string();
        trust::decide(
            config_dir().as_deref(),
            &shown,
            &p.canonical,
            &p.bytes,
            &used,
        )
        .map_err(trust_error)
    }

    /// The file's tool directories where no `--tools` flag gives any.
    pub fn fill_tools(&self, dirs: &mut Vec<PathBuf>) {
        if dirs.is_empty()
            && let Some(t) = &self.tools
        {
            self.take("tools", &t.source);
            dirs.clone_from(&t.value);
        }
    }

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

    /// Adds the file's rates to a drive's `--model-rate`, `--model-tokens` and `--tool-rate`
    /// flags, each a flag does not give (the host admits them all alike).
    pub fn fill_rates(
        &self,
        model_rates: &mut Vec<String>,
        model_tokens: &mut Vec<String>,
        tool_rates: &mut Vec<String>,
    ) {
        for (name, m) in &self.models {
            for (field, key, list) in [
                (&m.rate, "rate", &mut *model_rates),
                (&m.tokens, "tokens", &mut *model_tokens),
            ] {
                if let Some(f) = field
                    && !names(list, name)
                {
                    self.take(&format!("models.{name}.{key}"), &f.source);
                    list.push(format!("{name}={}", f.value));
                }
            }
        }
        for (name, r) in &self.tool_rates {
            if !names(tool_rates, name) {
                self.take(&format!("tool_rates.{name}"), &r.source);
                tool_rates.push(format!("{name}={}", r.value));
            }
        }
    }

    /// Adds the file's bindings to a new run's flags, each where no flag gives it: a model's
    /// URL, id and key one by one, secrets by name; `--tools` replaces the file's list. A
    /// project's `key_env` goes only with the project's URL: under a `--model NAME=URL` flag it
    /// is dropped, so the project never picks the secret sent to an endpoint the user named.
    pub fn fill_bindings(
        &self,
        models: &mut Vec<String>,
        model_ids: &mut Vec<String>,
        model_keys: &mut Vec<String>,
        secrets: &mut Vec<String>,
        tools: &mut Vec<PathBuf>,
    ) {
        for (name, m) in &self.models {
            let flag_url = names(models, name);
            for (field, key, list) in [
                (&m.url, "url", &mut *models),
                (&m.id, "id", &mut *model_ids),
                (&m.key_env, "key_env", &mut *model_keys),
            ] {
                let Some(f) = field else { continue };
                let key_elsewhere = key == "key_env" && flag_url && self.is_project(&f.source);
                if !names(list, name) && !key_elsewhere {
                    self.take(&format!("models.{name}.{key}"), &f.source);
                    list.push(format!("{name}={}", f.value));
                }
            }
        }
        for (name, var) in &self.secrets {
            if !names(secrets, name) {
                self.take(&format!("secrets.{name}.env"), &var.source);
                secrets.push(format!("{name}={}", var.value));
            }
        }
        self.fill_tools(tools);
    }

    /// Every setting, in a fixed order: key, value (null when unset) and source.
    /// The rows of the settings given as text by name: prices and rates.
    fn table_rows(&self) -> Vec<(String, Value, Source)> {
        let text = |key: String, i: &Item<String>| (key, json!(i.value), i.source.clone());
        let mut rows = Vec::new();
        for (name, m) in &self.models {
            for (key, field) in [("rate", &m.rate), ("tokens", &m.tokens)] {
                rows.extend(
                    field
                        .as_ref()
                        .map(|i| text(format!("models.{name}.{key}"), i)),
                );
            }
        }
        for (name, r) in &self.tool_rates {
            rows.push(text(format!("tool_rates.{name}"), r));
        }
        for (name, price) in &self.prices {
            rows.push(text(format!("prices.{name}"), price));
        }
        rows
    }

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
                    json!(oracle_host::database::redact(&s.value)),
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
        rows.extend(self.table_rows());
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

/// `oracle config show | path | trust | untrust`.
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
            show(&settings, json_out)
        }
        ConfigCommand::Trust { file, json } => trust_file(file, json),
        ConfigCommand::Untrust { file, json } => untrust_file(file, json),
    }
}

/// How `config show` marks a setting of the project's file that needs trust: `None` for every
/// other setting, else whether it is trusted and the words for it.
fn trust_mark(
    settings: &Settings,
    state: Option<trust::State>,
    key: &str,
    source: &Source,
) -> Option<(bool, &'static str)> {
    let state = state.filter(|_| settings.is_project(source) && trust::needs_trust(key))?;
    Some(match state {
        trust::State::Trusted => (true, ""),
        trust::State::Untrusted => (false, " (untrusted: refused)"),
        trust::State::Changed => (false, " (changed since trusted: refused)"),
    })
}

/// `oracle config show`: every setting, its source, and whether the project's file is trusted.
fn show(settings: &Settings, json_out: bool) -> Result<u8, CliError> {
    let state = settings.project_state()?;
    let rows = settings.rows();
    let command = settings
        .project
        .as_ref()
        .map(|p| trust::trust_command(&p.canonical));
    if json_out {
        let map: serde_json::Map<String, Value> = rows
            .into_iter()
            .map(|(k, v, s)| {
                let mut row = json!({"value": v, "source": s.json()});
                if let Some((trusted, _)) = trust_mark(settings, state, &k, &s) {
                    row["needs_trust"] = json!(true);
                    row["trusted"] = json!(trusted);
                }
                (k, row)
            })
            .collect();
        let files: Vec<Value> = settings
            .files
            .iter()
            .map(|(p, f)| {
                let mut file = json!({"path": p, "found": f});
                if let (Some(st), true) = (state, *f && p == Path::new(FILE_NAME)) {
                    file["trust"] = json!(st.word());
                    file["trust_command"] = json!(command);
                }
                file
            })
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
        let mark = trust_mark(settings, state, key, source).map_or("", |(_, m)| m);
        outln!("{key:width$}  {value:vwidth$}  {}{mark}", source.text())?;
    }
    if settings.files.iter().all(|(_, f)| !*f) {
        outln!("(no config file: `oracle config path` lists where oracle looks)")?;
    }
    match (state, command) {
        (Some(trust::State::Trusted), _) => outln!("{FILE_NAME}: trusted as it is")?,
        (Some(st), Some(c)) => outln!(
            "{FILE_NAME}: {}: its settings that choose a secret, an endpoint or a program are refused until `{c}`",
            if st == trust::State::Changed {
                "changed since trusted"
            } else {
                "not trusted"
            }
        )?,
        _ => {}
    }
    Ok(exit::OK)
}

/// The file `config trust` or `untrust` was given (default: the project's), and its text.
fn given_file(file: Option<PathBuf>) -> Result<(PathBuf, Option<String>), CliError> {
    let path = file.unwrap_or_else(|| PathBuf::from(FILE_NAME));
    let text = read(&path)?;
    Ok((path, text))
}

/// The user's config directory, or the error that names how to set one.
fn needed_config_dir() -> Result<PathBuf, CliError> {
    config_dir().ok_or_else(|| trust_error(trust::TrustError::NoConfigDir))
}

/// `oracle config trust [FILE]`: checks the file parses, then records its hash and path.
fn trust_file(file: Option<PathBuf>, json_out: bool) -> Result<u8, CliError> {
    let (path, text) = given_file(file)?;
    let Some(text) = text else {
        return Err(error(&path, None, "no such file to trust"));
    };
    // A file that cannot be used is not trusted: it would be refused anyway.
    let guarded = parse(&path, &text)?.guarded();
    let canonical = canonical(&path)?;
    let dir = needed_config_dir()?;
    let hash = trust::trust(&dir, &canonical, text.as_bytes()).map_err(trust_error)?;
    if json_out {
        let list: Vec<Value> = guarded
            .iter()
            .map(|s| json!({"key": s.key, "line": s.line}))
            .collect();
        crate::out::json(&json!({"ok": true, "path": canonical, "blake3": hash,
            "trust_list": dir.join(trust::TRUST_FILE), "settings": list}))?;
        return Ok(exit::OK);
    }
    let keys: Vec<&str> = guarded.iter().map(|s| s.key.as_str()).collect();
    let what = match keys.len() {
        0 => "it sets nothing that needs trust".to_owned(),
        _ => format!("its {} are used from now on", keys.join(", ")),
    };
    outln!(
        "trusted {} (BLAKE3 {hash}): {what}; any change to it needs `oracle config trust` again (the programs and directories it names are not covered: read them too)",
        canonical.display()
    )?;
    Ok(exit::OK)
}

/// `oracle config untrust [FILE]`: forgets the file (exit 0 whether or not it was trusted).
fn untrust_file(file: Option<PathBuf>, json_out: bool) -> Result<u8, CliError> {
    let path = file.unwrap_or_else(|| PathBuf::from(FILE_NAME));
    // A file gone since it was trusted is forgotten by the path it had.
    let canonical = path.canonicalize().unwrap_or_else(|_| {
        std::env::current_dir()
            .map(|d| d.join(&path))
            .unwrap_or_else(|_| path.clone())
    });
    let dir = needed_config_dir()?;
    let was = trust::untrust(&dir, &canonical).map_err(trust_error)?;
    if json_out {
        crate::out::json(&json!({"ok": true, "path": canonical, "was_trusted": was}))?;
    } else if was {
        outln!("{} is no longer trusted", canonical.display())?;
    } else {
        outln!("{} was not trusted", canonical.display())?;
    }
    Ok(exit::OK)
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
