//! Tools: what a tool declares (schemas, capability, effect, limits), the context a call gets,
//! and the registry the runtime and the plan compiler read tools from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oracle_core::State;
use oracle_core::capability::Capability;
use oracle_plan::catalogue::{ArgSpec, ArgType, CapabilityRule, Catalogue, ToolSpec};
use serde_json::Value;

use crate::access::{Guard, Verdict};
use crate::schema::Schema;

/// Longest a call may run when neither the tool nor the step says (one minute).
pub const TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Largest output a tool may return when it does not say (canonical JSON bytes, 8 MiB). Kept
/// well under the log's record limit so an output always fits in its event.
pub const OUTPUT_BYTES_MAX_DEFAULT: u64 = 8 << 20;

/// Whether a tool's output can be recomputed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Effect {
    /// Same input and context, same output: executed again on replay and compared.
    Pure,
    /// Touches the world: executed once, its output recorded and injected on replay.
    Impure,
    /// Needs a person: the run suspends until `oracle resume` supplies the answer.
    Ask,
    /// Reads or changes a domain's projection (the belief memory, the auction economy): run by
    /// the engine's domain of that name when its outcome is recorded, in call order (so it sees
    /// every record before it), and again on replay, where it must give the recorded output.
    /// See `crate::domain`.
    Domain(&'static str),
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Pure => "pure",
            Effect::Impure => "impure",
            Effect::Ask => "ask",
            Effect::Domain(name) => name,
        }
    }
}

/// Everything a tool declares about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolDecl {
    pub name: String,
    pub version: String,
    pub description: String,
    pub effect: Effect,
    /// JSON Schema of the input object. Its top-level `properties` and `required` are also
    /// what the plan compiler checks arguments against.
    pub input_schema: Value,
    /// JSON Schema of the output.
    pub output_schema: Value,
    /// The capability a call needs, computed from its input.
    pub capability: Option<CapabilityRule>,
    pub timeout_ms: u64,
    pub output_bytes_max: u64,
}

/// The input-schema keyword marking a string argument as a time (a duration or an instant),
/// which the compiler checks when literal (`ArgType::Time`). JSON Schema ignores keywords it
/// does not know, so validation is unchanged.
pub const TIME_KEYWORD: &str = "x-oracle-time";

impl ToolDecl {
    /// The tool as the plan compiler sees it: arguments read from the input schema's
    /// `properties` (type from `type`, `any` when absent or a list) and `required`. Arguments
    /// come in the order of `required`, then the optional ones by name: `properties` is a
    /// sorted map, and this keeps `oracle plan tools` and diagnostics listing `path` before
    /// `content`.
    pub fn spec(&self) -> ToolSpec {
        let required: Vec<&str> = self
            .input_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut args: Vec<ArgSpec> = self
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .map(|(name, schema)| ArgSpec {
                        name: name.clone(),
                        ty: match schema.get("type").and_then(Value::as_str) {
                            Some("string") if schema.get(TIME_KEYWORD).is_some() => ArgType::Time,
                            Some("string") => ArgType::String,
                            Some("integer") => ArgType::Int,
                            Some("boolean") => ArgType::Bool,
                            Some("array") => ArgType::List,
                            Some("object") => ArgType::Map,
                            _ => ArgType::Any,
                        },
                        required: required.contains(&name.as_str()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        // Stable: optional arguments keep their (sorted) order.
        args.sort_by_key(|a| {
            required
                .iter()
                .position(|r| *r == a.name)
                .unwrap_or(required.len())
        });
        ToolSpec {
            name: self.name.clone(),
            version: self.version.clone(),
            description: self.description.clone(),
            args,
            capability: self.capability.clone(),
        }
    }
}

/// What a call may know besides its input. Everything here is recorded in the log or derived
/// from it, except `root` and `resolved`, which only locate files and never enter an event.
#[derive(Clone, Copy, Debug)]
pub struct ToolContext<'a> {
    pub step: &'a str,
    pub attempt: u64,
    /// The run's logical time at this call (the `time` of its events).
    pub tick: u64,
    /// The run's recorded seed.
    pub seed: u64,
    /// The run's state after the decision that made this call was recorded (the same for every
    /// call of a round).
    pub state: &'a State,
    /// The directory relative paths are resolved against (canonical).
    pub root: &'a Path,
    /// For a call whose capability scope is a path: that path with every symlink resolved, as
    /// approved by the capability check. File tools must use this, not the input string.
    pub resolved: Option<&'a Path>,
    pub timeout_ms: u64,
    pub output_bytes_max: u64,
    /// The run's guard and the capability this call needs, for checking the path again at the
    /// moment a tool touches it ([`ToolContext::path_now`]). `None` for callers that made no
    /// check (tests, embedders).
    pub access: Option<Access<'a>>,
    /// The errors of this step's earlier failed executions of the same tool with the same
    /// input (the same tier of the escalation circuit), oldest first; empty on a first attempt.
    /// Derived from recorded `tool_failed` events, so a call that depends on them (`llm.chat`
    /// feeding a schema violation back to the model) is a function of the record.
    pub earlier_failures: &'a [String],
    /// The run's id, under which a streamed model reply's deltas go live ([`crate::live`]);
    /// never recorded. `None` (tests, embedders, replay): nothing is published.
    pub run: Option<&'a str>,
}

/// What a file tool checks its path against at the moment of use.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    pub guard: &'a Guard,
    pub needed: &'a Capability,
}

impl ToolContext<'_> {
    /// The real path a file tool must touch, checked now: the capability check is run again
    /// (symlinks resolved, grants, the working directory, the run store), so a link made since
    /// the round's recorded verdict (by an earlier call of the same round, say) cannot lead
    /// elsewhere. The tool then opens the path without following links
    /// ([`crate::confine`]), which closes the gap between this check and the open.
    pub fn path_now(&self, path: &str) -> Result<PathBuf, ToolError> {
        match self.access {
            Some(Access { guard, needed }) => match guard.check(needed) {
                Verdict::Allowed {
                    resolved: Some(real),
                    ..
                } => Ok(real),
                Verdict::Allowed { resolved: None, .. } => Err(ToolError::Failed(format!(
                    "`{needed}` names no file to check"
                ))),
                Verdict::Denied { reason } => Err(ToolError::Failed(format!(
                    "capability `{needed}` denied at the moment of use: {reason}"
                ))),
            },
            None => {
                let named = match self.resolved {
                    Some(p) => p.to_path_buf(),
                    None => self.root.join(path),
                };
                Ok(crate::access::real_path_for_use(&named).unwrap_or(named))
            }
        }
    }
}

/// A tool's result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolOutput {
    pub output: Value,
    /// Keys of the run's key-value store to write (`kv.set`); recorded as a state change under
    /// `kv/<key>` right after the call's events.
    pub writes: BTreeMap<String, Value>,
}

impl ToolOutput {
    pub fn of(output: Value) -> ToolOutput {
        ToolOutput {
            output,
            writes: BTreeMap::new(),
        }
    }
}

/// Why a call produced no output. Recorded as the `error` of a `tool_failed` event, so messages
/// must not contain anything that varies between machines (absolute paths, durations).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("{0}")]
    Failed(String),
    #[error("timed out after {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("output is larger than the limit of {limit} bytes")]
    OutputTooLarge { limit: u64 },
    /// A model's reply refused after the server reported its usage (not JSON, not matching
    /// the schema, …): recorded as a failure that keeps the tokens, so they are counted.
    #[error("{error}")]
    Rejected {
        error: String,
        usage: oracle_core::payload::TokenUsage,
    },
    /// Only from tools with [`Effect::Ask`]: the question to suspend with.
    #[error("needs an answer: {0}")]
    Ask(String),
}

/// Why a tool refuses a person's answer as its output ([`Tool::answer`]). Not recorded: the
/// engine refuses the answer with this text before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum NotAnOutput {
    #[error("the step's `schema` is not valid: {0}")]
    InvalidSchema(crate::schema::SchemaError),
    #[error("it does not match the step's schema: {0}")]
    SchemaMismatch(crate::schema::SchemaError),
    /// `given` is the JSON the person gave.
    #[error(
        "the step has no `schema`, so the answer is the reply's text: give a JSON string, not {given}"
    )]
    NotText { given: String },
}

/// A call's input that does not carry its capability's scope ([`needed_capability`]).
/// Recorded as the call's failure, so worded as before.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("argument `{arg}` must be a string")]
pub struct ScopeArgError {
    pub arg: String,
}

impl ToolError {
    /// A failure whose recorded text is `e`'s (`Display`), for the typed errors tools meet.
    pub fn failed(e: impl std::fmt::Display) -> ToolError {
        ToolError::Failed(e.to_string())
    }
}

/// A tool the runtime can call.
pub trait Tool: Send + Sync {
    fn decl(&self) -> ToolDecl;
    /// Runs the call. The input has passed the input schema and the capability check.
    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError>;
    /// A person's answer for a step that suspended after calling this tool with `input`
    /// (`oracle resume --step S --value JSON`), as this tool's output: refused (`Err`, why)
    /// when it could not have been one. The default takes the answer as it is; the engine then
    /// checks it against the step's `expect` and this tool's output schema.
    fn answer(&self, input: &Value, answer: Value) -> Result<Value, NotAnOutput> {
        let _ = input;
        Ok(answer)
    }
    /// Whether [`Tool::answer`] reads the call's input: the engine keeps a step's last input
    /// only for such tools (and timers), not a copy of every step's input.
    fn answer_reads_input(&self) -> bool {
        false
    }
}

/// A tool with its declaration and compiled schemas.
pub struct Registered {
    pub decl: ToolDecl,
    pub input: Schema,
    pub output: Schema,
    pub tool: Arc<dyn Tool>,
}

/// Why a tool cannot be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("tool `{0}` is registered twice")]
    Duplicate(String),
    /// Only a domain's tools run without a body of their own ([`Registry::declare`]).
    #[error("tool `{0}` has no body to run: only a domain's tools are declared without one")]
    NoBody(String),
    #[error("tool `{tool}`: {which} schema: {message}")]
    Schema {
        tool: String,
        which: &'static str,
        message: crate::schema::SchemaError,
    },
}

/// Tools by name, and the run secrets some of them use.
#[derive(Default)]
pub struct Registry {
    tools: BTreeMap<String, Registered>,
    /// The values the engine keeps out of every record ([`crate::secrets`]).
    secrets: Arc<crate::secrets::Secrets>,
    /// What the declared tools were when they were loaded ([`crate::declared`]), sorted by
    /// name: recorded in `run_started`.
    pins: Vec<oracle_core::payload::ToolPin>,
    /// What `llm.chat` may offer a model; every tool registered is added but the agent step
    /// and `llm.chat` itself.
    offers: Option<crate::tools::llm::Offers>,
    /// Declared tools whose manifest could not be loaded, by the name a plan calls them (a
    /// name ending in `.` covers every tool under it: an MCP server's), with why: the plan
    /// compiler refuses a plan that uses one, and no other ([`crate::declared::Broken`]).
    unavailable: BTreeMap<String, String>,
    /// What paces the impure calls of a drive by the host's rates ([`crate::pace`]); `None`:
    /// every call goes at once.
    pacer: Option<Arc<dyn crate::pace::Pacer>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let decl = tool.decl();
        if self.tools.contains_key(&decl.name) {
            return Err(RegistryError::Duplicate(decl.name));
        }
        let compile = |which: &'static str, source: &Value| {
            Schema::compile(source).map_err(|message| RegistryError::Schema {
                tool: decl.name.clone(),
                which,
                message,
            })
        };
        let input = compile("input", &decl.input_schema)?;
        let output = compile("output", &decl.output_schema)?;
        if let Some(offers) = &self.offers
            && decl.name != crate::tools::agent::NAME
            && decl.name != "llm.chat"
        {
            offers.write().unwrap_or_else(|p| p.into_inner()).insert(
                decl.name.clone(),
                (decl.description.clone(), decl.input_schema.clone()),
            );
        }
        self.tools.insert(
            decl.name.clone(),
            Registered {
                decl,
                input,
                output,
                tool,
            },
        );
        Ok(())
    }

    /// Declares a domain's tool: its catalogue entry (schemas, description, capability) and no
    /// body, since the engine hands each of its calls to the domain its effect names
    /// ([`crate::domain`]) and never runs it. So a domain gives data, not a [`Tool`]. Refused
    /// for any other effect: the engine would run that tool's body, and there is none.
    pub fn declare(&mut self, decl: ToolDecl) -> Result<(), RegistryError> {
        match decl.effect {
            Effect::Domain(_) => self.register(Arc::new(DomainTool(decl))),
            _ => Err(RegistryError::NoBody(decl.name)),
        }
    }

    /// Gives the registry the run's secrets: the engine refuses to record any value that
    /// contains one of them.
    pub fn with_secrets(mut self, secrets: Arc<crate::secrets::Secrets>) -> Registry {
        self.secrets = secrets;
        self
    }

    /// Shares the map of tools `llm.chat` may offer: every tool registered from now on joins
    /// it.
    pub fn with_offers(mut self, offers: crate::tools::llm::Offers) -> Registry {
        self.offers = Some(offers);
        self
    }

    pub fn secrets(&self) -> &crate::secrets::Secrets {
        &self.secrets
    }

    /// Paces this registry's impure calls with `pacer` (a host's rates, [`crate::pace`]).
    pub fn set_pacer(&mut self, pacer: Arc<dyn crate::pace::Pacer>) {
        self.pacer = Some(pacer);
    }

    /// What paces this registry's impure calls, if anything does.
    pub fn pacer(&self) -> Option<&dyn crate::pace::Pacer> {
        self.pacer.as_deref()
    }

    /// Records what a declared tool is, for `run_started` (replaces a pin of the same name).
    pub fn pin(&mut self, pin: oracle_core::payload::ToolPin) {
        self.pins.retain(|p| p.name != pin.name);
        self.pins.push(pin);
        self.pins.sort();
    }

    /// Replaces every pin: `--allow-tool-change` gives a replay the recorded ones, so the first
    /// event matches and the run diverges, if at all, at the first output that changed.
    pub fn set_pins(&mut self, pins: Vec<oracle_core::payload::ToolPin>) {
        self.pins = pins;
        self.pins.sort();
    }

    /// Marks `name` (or, ending in `.`, every name under it) as a declared tool that cannot be
    /// used, for `why`.
    pub fn mark_unavailable(&mut self, name: String, why: String) {
        self.unavailable.insert(name, why);
    }

    /// Why `name` cannot be used, if its manifest was broken.
    pub fn unavailable(&self, name: &str) -> Option<&str> {
        oracle_plan::catalogue::unavailable_in(&self.unavailable, name)
    }

    /// The pins of the declared tools, as `run_started` records them: `None` when there are
    /// none.
    pub fn pins(&self) -> Option<Vec<oracle_core::payload::ToolPin>> {
        (!self.pins.is_empty()).then(|| self.pins.clone())
    }

    pub fn get(&self, name: &str) -> Option<&Registered> {
        self.tools.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Registered> {
        self.tools.values()
    }

    /// What the plan compiler checks plans against.
    pub fn catalogue(&self) -> Catalogue {
        // The plan agent's own backoff call is no tool a plan may name.
        let named = || {
            self.tools
                .values()
                .filter(|r| r.decl.name != crate::tools::time::BACKOFF_TOOL)
        };
        let schemas = named().map(|r| (r.decl.name.clone(), r.decl.output_schema.clone()));
        Catalogue::new(named().map(|r| r.decl.spec()))
            .with_output_schemas(schemas)
            .with_unavailable(self.unavailable.clone())
    }
}

/// What [`Registry::declare`] registers for a domain's tool: the declaration, and a body that
/// the engine never reaches (it hands the call to the domain) and that refuses anyone else.
struct DomainTool(ToolDecl);

impl Tool for DomainTool {
    fn decl(&self) -> ToolDecl {
        self.0.clone()
    }

    fn call(&self, _input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed(format!(
            "`{}` runs against the run's `{}` domain, inside the engine only",
            self.0.name,
            self.0.effect.as_str()
        )))
    }
}

/// The capability a call with `input` needs, if the tool needs one. `Err` names the argument
/// that should carry the scope when it is missing or not a string (the input schema normally
/// catches this first).
pub fn needed_capability(
    decl: &ToolDecl,
    input: &Value,
) -> Result<Option<Capability>, ScopeArgError> {
    use oracle_plan::catalogue::ScopeFrom;
    let Some(rule) = &decl.capability else {
        return Ok(None);
    };
    let scope = match &rule.scope {
        ScopeFrom::Fixed(s) => s.clone(),
        ScopeFrom::Arg(arg) => match input.get(arg).and_then(Value::as_str) {
            Some(s) => s.to_owned(),
            None => return Err(ScopeArgError { arg: arg.clone() }),
        },
    };
    Ok(Some(rule.needed(&scope)))
}
