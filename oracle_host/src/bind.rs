//! Binding a run: its models, its secrets (read from the environment of whoever drives it) and
//! its declared tools, from the bindings the home's key vouches for with what the caller gives
//! again over them; and the registry of tools a drive calls.
//!
//! The rule (docs/SECURITY.md, "Run bindings"): a binding that directs an effect is taken from
//! `run.json` only when its seal holds; one that changed, or that nothing sealed, refuses the
//! drive with a message naming it, unless it is given again here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use oracle_runtime::bindings::{Bindings, Unsealed};
use oracle_runtime::declared::{self, McpMode};
use oracle_runtime::secrets::{SECRET_BYTES_MIN, Secrets};
use oracle_runtime::session::{self, RunDir, SessionError};
use oracle_runtime::tool::Registry;
use oracle_runtime::tools::llm::{ModelBinding, Models};

use crate::error::HostError;
use crate::rate::Rates;

/// Bindings given for this drive (`--model`, `--model-id`, `--model-key`, `--secret`,
/// `--tools`, or a worker's settings), as written: `NAME=VALUE` pairs and directories. They
/// win over what the run keeps.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Given {
    /// `NAME=URL`.
    pub models: Vec<String>,
    /// `NAME=ID`.
    pub model_ids: Vec<String>,
    /// `NAME=ENV_VAR` (or `NAME=SECRET`, a run secret's name).
    pub model_keys: Vec<String>,
    /// `NAME`: ask that model's endpoint to stream its replies.
    pub model_streams: Vec<String>,
    /// `NAME=ENV_VAR`.
    pub secrets: Vec<String>,
    /// Declared tool directories; when given, they replace the run's.
    pub tools: Vec<PathBuf>,
    /// `NAME=N/P`: at most N calls of model NAME per second, minute or hour, across every run
    /// of the home or store (`crate::rate`). Never kept with the run: each drive's own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub model_rates: Vec<String>,
    /// `NAME=N/P`: at most N tokens of model NAME per period, charged after each call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub model_tokens: Vec<String>,
    /// `TOOL=N/P`: at most N calls of declared tool TOOL per period.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_rates: Vec<String>,
}

/// What a drive is bound to.
#[derive(Clone, Debug, Default)]
pub struct Bound {
    pub models: Models,
    /// The secrets' values, read from the environment now (never written anywhere).
    pub secrets: Arc<Secrets>,
    /// `NAME=ENV_VAR` of each secret, for `run.json`.
    pub secret_vars: BTreeMap<String, String>,
    /// Declared tool directories, absolute.
    pub tools: Vec<PathBuf>,
    /// The rates this drive was given (the home's or worker's go under them).
    pub rates: Rates,
}

/// `NAME=VALUE` of a repeatable flag.
fn pair<'a>(
    flag: &'static str,
    text: &'a str,
    what: &str,
) -> Result<(&'a str, &'a str), HostError> {
    match text.split_once('=') {
        Some((n, v)) if !n.is_empty() && !v.is_empty() => Ok((n, v)),
        _ => Err(HostError::Given {
            flag,
            given: text.to_owned(),
            why: format!("expected NAME={what}"),
        }),
    }
}

/// Directories made absolute against the current directory (`run.json` keeps them so).
pub fn absolute(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let here = std::env::current_dir().unwrap_or_default();
    dirs.iter()
        .map(|d| d.canonicalize().unwrap_or_else(|_| here.join(d)))
        .collect()
}

impl Given {
    /// Whether this drive gives binding `name` (as `run.json`'s seal names it) again.
    fn gives(&self, name: &str) -> bool {
        let names = |list: &[String]| -> Vec<String> {
            list.iter()
                .filter_map(|t| t.split_once('=').map(|(n, _)| n.to_owned()))
                .collect()
        };
        match name.split_once(' ') {
            Some(("model", m)) => names(&self.models).iter().any(|n| n == m),
            Some(("secret", s)) => names(&self.secrets).iter().any(|n| n == s),
            _ if name == "tools" => !self.tools.is_empty(),
            _ => false,
        }
    }

    /// The model bindings: `stored` with these `--model`, `--model-id` and `--model-key` over
    /// them.
    fn models(&self, stored: BTreeMap<String, ModelBinding>) -> Result<Models, HostError> {
        let mut models = Models { models: stored };
        for text in &self.models {
            let (name, url) = pair("--model", text, "URL")?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(HostError::Given {
                    flag: "--model",
                    given: text.clone(),
                    why: "the URL must start with http:// or https:// (an OpenAI-compatible base URL such as http://127.0.0.1:8080/v1)".into(),
                });
            }
            let old = models.models.remove(name);
            models.models.insert(
                name.to_owned(),
                ModelBinding {
                    url: url.to_owned(),
                    model: old.as_ref().map_or(name.to_owned(), |o| o.model.clone()),
                    stream: old.as_ref().is_some_and(|o| o.stream),
                    key_env: old.and_then(|o| o.key_env),
                },
            );
        }
        let unbound = |flag: &'static str, text: &str, name: &str| HostError::Given {
            flag,
            given: text.to_owned(),
            why: format!("model `{name}` is not bound; give --model {name}=URL too"),
        };
        for text in &self.model_ids {
            let (name, id) = pair("--model-id", text, "ID")?;
            let b = models
                .models
                .get_mut(name)
                .ok_or_else(|| unbound("--model-id", text, name))?;
            b.model = id.to_owned();
        }
        for text in &self.model_keys {
            let (name, var) = pair("--model-key", text, "ENV_VAR")?;
            let b = models
                .models
                .get_mut(name)
                .ok_or_else(|| unbound("--model-key", text, name))?;
            b.key_env = Some(var.to_owned());
        }
        for name in &self.model_streams {
            let b = models
                .models
                .get_mut(name.as_str())
                .ok_or_else(|| unbound("--model-stream", name, name))?;
            b.stream = true;
        }
        Ok(models)
    }

    /// The secrets: `stored` with these `--secret` over them, every one (and every model key)
    /// read from the environment now. A secret whose variable is not set is refused when
    /// `strict` (a new run, or a drive that gave it), and left out otherwise.
    fn secrets(
        &self,
        stored: BTreeMap<String, String>,
        models: &mut Models,
        strict: bool,
    ) -> Result<(Arc<Secrets>, BTreeMap<String, String>), HostError> {
        let mut vars = stored;
        for text in &self.secrets {
            let (name, var) = pair("--secret", text, "ENV_VAR")?;
            vars.insert(name.to_owned(), var.to_owned());
        }
        // `--model-key fast=TOKEN` where TOKEN is a secret: the key is that secret's variable.
        for b in models.models.values_mut() {
            if let Some(var) = b.key_env.as_ref().and_then(|k| vars.get(k)) {
                b.key_env = Some(var.clone());
            }
        }
        let mut values = Vec::new();
        for (name, var) in &vars {
            match std::env::var(var) {
                Ok(v) if !v.is_empty() => values.push((name.clone(), v)),
                _ if strict => {
                    return Err(HostError::SecretUnset {
                        name: name.clone(),
                        var: var.clone(),
                    });
                }
                _ => {}
            }
        }
        // Model keys are secrets too: kept out of every record by the same check.
        for b in models.models.values() {
            if let Some(var) = &b.key_env
                && let Ok(v) = std::env::var(var)
                && v.len() >= SECRET_BYTES_MIN
            {
                values.push((format!("model key {var}"), v));
            }
        }
        let secrets = Secrets::new(values).map_err(|e| HostError::Given {
            flag: "--secret",
            given: String::new(),
            why: e.to_string(),
        })?;
        Ok((Arc::new(secrets), vars))
    }

    /// The rates given, admitted ([`crate::rate::admit`]).
    pub fn rates(&self) -> Result<Rates, HostError> {
        Rates::admit(&self.model_rates, &self.model_tokens, &self.tool_rates)
    }

    /// What a new run is bound to: these bindings alone, every secret's variable set.
    pub fn for_new_run(&self, tool_dirs: Vec<PathBuf>) -> Result<Bound, HostError> {
        let mut models = self.models(BTreeMap::new())?;
        let (secrets, secret_vars) = self.secrets(BTreeMap::new(), &mut models, true)?;
        Ok(Bound {
            models,
            secrets,
            secret_vars,
            tools: tool_dirs,
            rates: self.rates()?,
        })
    }

    /// What a stored run's drive is bound to: the bindings the home's key vouches for, with
    /// these over them. A binding the seal does not vouch for refuses the drive, naming it,
    /// unless it is given again here. `strict`: a secret whose variable is unset is refused
    /// (a drive that runs tools) rather than left out (re-deriving to record an answer).
    pub fn for_stored_run(
        &self,
        run: &RunDir,
        sealed: Bindings,
        unsealed: Vec<Unsealed>,
        strict: bool,
    ) -> Result<Bound, HostError> {
        // The root is the working directory's business (`session::Workdir`), not a tool's.
        if let Some(u) = unsealed
            .into_iter()
            .find(|u| u.binding != "root" && !self.gives(&u.binding))
        {
            let hint = give_again_hint(&u.binding);
            return Err(SessionError::Unsealed {
                run: run.id.clone(),
                unsealed: u,
                hint,
            }
            .into());
        }
        let mut models = self.models(sealed.models)?;
        let (secrets, secret_vars) = self.secrets(sealed.secrets, &mut models, strict)?;
        let tools = if self.tools.is_empty() {
            sealed.tools
        } else {
            absolute(&self.tools)
        };
        Ok(Bound {
            models,
            secrets,
            secret_vars,
            tools,
            rates: self.rates()?,
        })
    }
}

/// How to give binding `name` again.
fn give_again_hint(name: &str) -> String {
    match name.split_once(' ') {
        Some(("model", m)) => {
            format!(
                "give it again with --model {m}=URL (and --model-key {m}=ENV_VAR if it has a key)"
            )
        }
        Some(("secret", s)) => format!("give it again with --secret {s}=ENV_VAR"),
        _ if name == "tools" => "give the run's tool directories again with --tools DIR".into(),
        _ => "give it again".into(),
    }
}

/// How a drive treats declared tools that differ from the run's pins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolChange {
    /// Refuse the drive, naming the tool.
    Refuse,
    /// Go on with the tools as they are now, against the recorded pins, so the run diverges
    /// at the first output that changed (`--allow-tool-change`). The caller is told.
    Allow,
}

impl ToolChange {
    /// `Allow` when `allow` (`--allow-tool-change`, a signal's `allow_tool_change`), else
    /// `Refuse`.
    pub fn allowed(allow: bool) -> ToolChange {
        if allow {
            ToolChange::Allow
        } else {
            ToolChange::Refuse
        }
    }
}

/// Files a new run keeps under `tools/` (what each MCP server listed), by file name.
pub type KeptFiles = Vec<(String, Vec<u8>)>;

impl Bound {
    /// The registry of a drive: the built-ins, `llm.chat` calling these models, these secrets,
    /// and the declared tools of these directories (MCP servers started, or their listing read
    /// from the run directory). Returns the files a new run keeps, too.
    pub fn registry(&self, mcp: McpMode<'_>) -> Result<(Registry, KeptFiles), HostError> {
        let mut registry = oracle_runtime::tools::builtin_with(
            Arc::new(self.models.clone()),
            self.secrets.clone(),
        );
        if self.tools.is_empty() {
            return Ok((registry, Vec::new()));
        }
        let loaded = declared::load(&self.tools, &self.secrets, mcp).map_err(HostError::Tools)?;
        let kept = loaded.kept.clone();
        declared::declare(&mut registry, loaded).map_err(HostError::Tools)?;
        Ok((registry, kept))
    }
}

/// Checks the declared tools of `registry` against the pins run `run` recorded. Under
/// [`ToolChange::Allow`] a change is returned (for the caller to warn about) and the registry
/// takes the recorded pins.
pub fn check_pins(
    run: &RunDir,
    registry: &mut Registry,
    change: ToolChange,
) -> Result<Option<String>, HostError> {
    // A log that cannot be read (empty, damaged) is for the drive itself to report.
    let Ok(recorded) = session::recorded_pins(run) else {
        return Ok(None);
    };
    let current = registry.pins().unwrap_or_default();
    match declared::compare(&recorded, &current) {
        Ok(()) => Ok(None),
        Err(changed) if change == ToolChange::Allow => {
            registry.set_pins(recorded);
            Ok(Some(changed.to_string()))
        }
        Err(changed) => Err(HostError::ToolChanged(changed)),
    }
}

/// The home a run directory lives in (`<home>/runs/<id>`), or `None` for a directory found
/// elsewhere (a copy given by path).
pub fn home_of(run: &RunDir) -> Option<&std::path::Path> {
    let runs = run.dir.parent()?;
    (runs.file_name()? == "runs").then(|| runs.parent())?
}

impl crate::home::Home {
    /// The declared-tool directories a replay of `run` loads, and nothing else: a replay calls
    /// nothing impure (every model reply, secret use and program output is recorded), so it
    /// binds no model, secret or working directory. `given` (`--tools`) wins; otherwise the
    /// directories in `run.json`, where the key of the run's *own* home (the run given by path
    /// may live in another) vouches for them. The key is read, never created: a replay writes
    /// nothing anywhere.
    pub fn replay_tools(&self, run: &RunDir, given: &[PathBuf]) -> Result<Vec<PathBuf>, HostError> {
        if !given.is_empty() {
            return Ok(absolute(given));
        }
        let home = home_of(run).unwrap_or(self.dir());
        let key = oracle_runtime::seal::SealKey::open(home)?;
        let (sealed, unsealed) = Bindings::read(&run.dir).sealed(key.as_ref());
        if let Some(u) = unsealed.into_iter().find(|u| u.binding == "tools") {
            return Err(SessionError::Unsealed {
                run: run.id.clone(),
                unsealed: u,
                hint: give_again_hint("tools"),
            }
            .into());
        }
        Ok(sealed.tools)
    }
}
