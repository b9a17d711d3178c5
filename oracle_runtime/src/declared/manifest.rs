//! The manifest format of declared tools (docs/TOOLS.md): one TOML file per tool (or per MCP
//! server), parsed and checked here into a [`Manifest`] with every problem located.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oracle_plan::catalogue::{CapabilityRule, ScopeFrom};
use serde::Deserialize;
use serde_json::Value;

use crate::tool::{OUTPUT_BYTES_MAX_DEFAULT, TIMEOUT_MS_DEFAULT};

/// Largest manifest file read (bytes).
pub const MANIFEST_BYTES_MAX: u64 = 64 << 10;
/// Largest WebAssembly module (`.wasm` bytes or `.wat` text) read.
pub const MODULE_BYTES_MAX: u64 = 16 << 20;
/// Largest program file hashed for an exec tool's pin.
pub const PROGRAM_BYTES_MAX: u64 = 64 << 20;
/// Most manifests one directory may hold.
pub const MANIFESTS_MAX: usize = 256;
/// Longest timeout a manifest may set (one hour).
pub const TIMEOUT_MS_MAX: u64 = 60 * 60 * 1000;
/// Largest output limit a manifest may set (the default is also the most a record holds
/// comfortably).
pub const OUTPUT_BYTES_MAX_MAX: u64 = OUTPUT_BYTES_MAX_DEFAULT;
/// Fuel a wasm call gets when the manifest does not say.
pub const FUEL_MAX_DEFAULT: u64 = 100_000_000;
/// Most fuel a manifest may give a call.
pub const FUEL_MAX_MAX: u64 = 100_000_000_000;
/// Linear memory a wasm call may use when the manifest does not say (16 MiB).
pub const MEMORY_BYTES_MAX_DEFAULT: u64 = 16 << 20;
/// Most linear memory a manifest may give a call (1 GiB).
pub const MEMORY_BYTES_MAX_MAX: u64 = 1 << 30;
/// Most environment variables an exec tool or MCP server may be given.
pub const ENV_VARS_MAX: usize = 64;
/// Most files an exec tool's `args` may name inside its manifest's directory: each is read
/// whole (up to [`PROGRAM_BYTES_MAX`]) and hashed every time the tools are loaded, so the
/// number is bounded like everything else read from a manifest.
pub const ARG_FILES_MAX: usize = 16;

/// One problem with a manifest, located as precisely as known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {message}", path.display(), at.map_or(String::new(), |(l, c)| format!(":{l}:{c}")))]
pub struct Problem {
    pub path: PathBuf,
    /// Line and column (from 1), when the problem is at a place in the file.
    pub at: Option<(u64, u64)>,
    pub message: String,
}

/// How a declared tool is implemented.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Exec(Exec),
    Wasm(Wasm),
    Mcp(Mcp),
}

impl Kind {
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Exec(_) => "exec",
            Kind::Wasm(_) => "wasm",
            Kind::Mcp(_) => "mcp",
        }
    }
}

/// `[exec]`: a program run once per call, the input as JSON on stdin, the output as JSON on
/// stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exec {
    /// Absolute: a path in the manifest resolves against the manifest's directory.
    pub program: PathBuf,
    /// Whether `program` is a file of the tool's own (a path in the manifest, or a name found
    /// beside it), whose bytes are pinned; a name found on `PATH` is the system's, not pinned.
    pub pinned_program: bool,
    /// The arguments the program is given: as written, except that one naming a file of the
    /// tool ([`arg_file`]) is that file's absolute path, so the program reads the very file
    /// that is pinned whatever the run's working directory.
    pub args: Vec<String>,
    /// The files the arguments name inside the manifest's directory, in the order written:
    /// pinned with the program (docs/TOOLS.md, "What a run pins").
    pub files: Vec<ArgFile>,
    /// Fixed variables, then run secrets by name (`secrets = ["TOKEN"]` sets `TOKEN`).
    pub env: BTreeMap<String, String>,
    pub secrets: Vec<String>,
}

/// A file an exec tool's `args` name inside its manifest's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgFile {
    /// The argument as written (what the pin records and messages name).
    pub written: String,
    /// Absolute, every symlink resolved (what the program is given and what is hashed).
    pub path: PathBuf,
}

/// `[wasm]`: a module run in the interpreter with fuel and memory limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wasm {
    pub module: PathBuf,
    pub fuel_max: u64,
    pub memory_bytes_max: u64,
}

/// `[mcp]`: an MCP server over stdio whose tools become `mcp.<server>.<tool>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mcp {
    /// Absolute when found; as written when not (a replay needs no server, so a program that
    /// is missing is reported only when the server is to be started).
    pub program: PathBuf,
    pub found: bool,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub secrets: Vec<String>,
    /// Longest wait for the server to answer `initialize` and `tools/list`.
    pub start_timeout_ms: u64,
}

/// A checked manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Where it was read from (as found in the directory).
    pub path: PathBuf,
    /// The bytes read: part of the tool's pin.
    pub bytes: Vec<u8>,
    /// The tool's name; for an MCP manifest, the server's (tools are `mcp.<name>.<tool>`).
    pub name: String,
    pub version: String,
    pub description: String,
    /// `true` for `pure`. Always `true` for wasm, `false` for MCP.
    pub pure: bool,
    pub capability: Option<CapabilityRule>,
    pub timeout_ms: u64,
    pub output_bytes_max: u64,
    pub input_schema: Value,
    pub output_schema: Value,
    pub kind: Kind,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    version: String,
    description: String,
    effect: Option<String>,
    capability: Option<String>,
    timeout_ms: Option<u64>,
    output_bytes_max: Option<u64>,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    exec: Option<RawExec>,
    wasm: Option<RawWasm>,
    mcp: Option<RawExec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExec {
    program: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    secrets: Vec<String>,
    start_timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWasm {
    module: String,
    fuel_max: Option<u64>,
    memory_bytes_max: Option<u64>,
}

/// Whether `name` can be written as a tool in a plan: identifiers (`[A-Za-z_][A-Za-z0-9_]*`)
/// joined by dots.
pub fn is_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|seg| {
            let mut c = seg.chars();
            c.next()
                .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
                && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        })
}

/// Line and column (from 1) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (u64, u64) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() as u64 + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map_or(0, |l| l.chars().count() as u64)
        + 1;
    (line, col)
}

/// The line and column of `key = ` at the start of a line of `text`, if it is there: where a
/// problem with that key's value is reported.
fn key_at(text: &str, key: &str) -> Option<(u64, u64)> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return Some(line_col(text, offset + (line.len() - trimmed.len())));
        }
        offset += line.len();
    }
    None
}

/// The name a manifest gives, and whether it declares an MCP server (`[mcp]`), read as
/// leniently as possible: from a manifest that [`parse`] refuses, this is what tells which
/// tools a plan cannot use. A file that is not even TOML is read line by line (a `name =
/// "..."` line before the first table, a `[mcp]` line). `None` when no name can be found.
pub fn declared_name(bytes: &[u8]) -> Option<(String, bool)> {
    let text = std::str::from_utf8(bytes).ok()?;
    if let Ok(table) = toml::from_str::<toml::Table>(text) {
        let name = table.get("name")?.as_str()?.to_owned();
        return Some((name, table.contains_key("mcp")));
    }
    let lines = || text.lines().map(str::trim);
    let name = lines().take_while(|l| !l.starts_with('[')).find_map(|l| {
        let value = l
            .strip_prefix("name")?
            .trim_start()
            .strip_prefix('=')?
            .trim();
        let inner = value.strip_prefix('"')?.split('"').next()?;
        (!inner.is_empty() && !inner.contains('\\')).then(|| inner.to_owned())
    })?;
    Some((name, lines().any(|l| l == "[mcp]")))
}

/// Parses and checks the manifest `bytes` read from `path` (whose directory relative paths in
/// it resolve against). Every problem found is returned, not only the first.
pub fn parse(path: &Path, bytes: Vec<u8>) -> Result<Manifest, Vec<Problem>> {
    let problem = |at: Option<(u64, u64)>, message: String| Problem {
        path: path.to_path_buf(),
        at,
        message,
    };
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => t,
        Err(e) => {
            return Err(vec![problem(
                None,
                format!("not UTF-8 (byte {})", e.valid_up_to()),
            )]);
        }
    };
    let raw: Raw = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            let at = e.span().map(|s| line_col(text, s.start));
            return Err(vec![problem(at, e.message().trim_end().to_owned())]);
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut problems = Vec::new();
    let mut bad = |key: &str, message: String| problems.push(problem(key_at(text, key), message));

    let kinds = [raw.exec.is_some(), raw.wasm.is_some(), raw.mcp.is_some()];
    if kinds.iter().filter(|k| **k).count() != 1 {
        bad(
            "name",
            "a manifest has exactly one of the tables [exec], [wasm] and [mcp]".to_owned(),
        );
    }
    let is_mcp = raw.mcp.is_some();
    if is_mcp {
        let ok = raw
            .name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && raw
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            bad(
                "name",
                format!(
                    "`{}`: an MCP server's name is one identifier (letters, digits, `_`), used in `mcp.<server>.<tool>`",
                    raw.name.escape_debug()
                ),
            );
        }
    } else if !is_tool_name(&raw.name) {
        bad(
            "name",
            format!(
                "`{}` is not a tool name a plan can call: identifiers joined by dots, like `json.field`",
                raw.name.escape_debug()
            ),
        );
    } else if raw.name == "mcp" || raw.name.starts_with("mcp.") {
        bad(
            "name",
            "names under `mcp.` are the tools of MCP servers".to_owned(),
        );
    }
    if raw.version.trim().is_empty() {
        bad("version", "`version` is empty".to_owned());
    }
    let pure = match (raw.effect.as_deref(), &raw.wasm, is_mcp) {
        (Some(_), _, true) => {
            bad(
                "effect",
                "an MCP server's tools are always impure: remove `effect`".to_owned(),
            );
            false
        }
        (_, _, true) => false,
        (Some("impure"), Some(_), _) => {
            bad(
                "effect",
                "a wasm tool reaches nothing outside its input, so it is `pure` (replay runs it again)"
                    .to_owned(),
            );
            true
        }
        (None, Some(_), _) | (Some("pure"), _, _) => true,
        (None | Some("impure"), _, _) => false,
        (Some(other), _, _) => {
            bad(
                "effect",
                format!(
                    "`effect` is `pure` or `impure`, not `{}`",
                    other.escape_debug()
                ),
            );
            false
        }
    };
    let timeout_ms = match raw.timeout_ms {
        Some(_) if raw.wasm.is_some() => {
            bad(
                "timeout_ms",
                "a wasm tool is bounded by `fuel_max`, not by time (time would make it depend on the machine)"
                    .to_owned(),
            );
            TIMEOUT_MS_DEFAULT
        }
        Some(t) if t == 0 || t > TIMEOUT_MS_MAX => {
            bad(
                "timeout_ms",
                format!("`timeout_ms` is from 1 to {TIMEOUT_MS_MAX}, not {t}"),
            );
            TIMEOUT_MS_DEFAULT
        }
        Some(t) => t,
        None => TIMEOUT_MS_DEFAULT,
    };
    let output_bytes_max = match raw.output_bytes_max {
        Some(b) if b == 0 || b > OUTPUT_BYTES_MAX_MAX => {
            bad(
                "output_bytes_max",
                format!("`output_bytes_max` is from 1 to {OUTPUT_BYTES_MAX_MAX}, not {b}"),
            );
            OUTPUT_BYTES_MAX_DEFAULT
        }
        Some(b) => b,
        None => OUTPUT_BYTES_MAX_DEFAULT,
    };
    let object_schema = serde_json::json!({"type": "object"});
    let (input_schema, output_schema) = if is_mcp {
        if raw.input_schema.is_some() || raw.output_schema.is_some() {
            bad(
                "input_schema",
                "an MCP server lists its tools' schemas itself: remove `input_schema` and `output_schema`"
                    .to_owned(),
            );
        }
        (object_schema.clone(), object_schema)
    } else {
        let input = match raw.input_schema {
            Some(s) if s.get("type").and_then(Value::as_str) == Some("object") => s,
            Some(_) => {
                bad(
                    "input_schema",
                    "`input_schema` must be an object schema (`type = \"object\"`): a call's input is the step's arguments"
                        .to_owned(),
                );
                object_schema.clone()
            }
            None => {
                bad(
                    "name",
                    "`input_schema` is missing: every declared tool says what it takes".to_owned(),
                );
                object_schema.clone()
            }
        };
        let output = match raw.output_schema {
            Some(s) => s,
            None => {
                bad(
                    "name",
                    "`output_schema` is missing: every declared tool says what it returns"
                        .to_owned(),
                );
                serde_json::json!({})
            }
        };
        for (which, schema) in [("input_schema", &input), ("output_schema", &output)] {
            if let Err(m) = crate::schema::Schema::compile(schema) {
                bad(which, format!("`{which}` is not a valid JSON Schema: {m}"));
            }
        }
        (input, output)
    };
    let capability = match &raw.capability {
        Some(_) if is_mcp => {
            bad(
                "capability",
                "an MCP server's tools each need `mcp:<server>:<tool>`: remove `capability`"
                    .to_owned(),
            );
            None
        }
        Some(text) => match capability_rule(text, &input_schema) {
            Ok(rule) => Some(rule),
            Err(m) => {
                bad("capability", m.to_string());
                None
            }
        },
        // Exec tools run a program with the user's rights: a plan must grant them by name.
        None if raw.exec.is_some() => Some(CapabilityRule {
            domain: "tool".to_owned(),
            action: "exec".to_owned(),
            scope: ScopeFrom::Fixed(raw.name.clone()),
        }),
        // A wasm module reaches nothing but its input; an MCP tool's rule is made per tool.
        None => None,
    };
    let env_check = |section: &RawExec, bad: &mut dyn FnMut(&str, String)| {
        if section.env.len() + section.secrets.len() > ENV_VARS_MAX {
            bad(
                "env",
                format!("at most {ENV_VARS_MAX} variables (`env` and `secrets` together)"),
            );
        }
        for name in section.env.keys().chain(&section.secrets) {
            if name.is_empty() || name.contains(['=', '\0']) {
                bad(
                    "env",
                    format!("`{}` is not a variable name", name.escape_debug()),
                );
            }
        }
    };
    let kind = if let Some(e) = &raw.exec {
        env_check(e, &mut bad);
        if e.start_timeout_ms.is_some() {
            bad(
                "start_timeout_ms",
                "`start_timeout_ms` is for [mcp] servers; an exec tool has `timeout_ms`".to_owned(),
            );
        }
        let (program, pinned_program) = resolve_program(dir, &e.program);
        if e.program.is_empty() {
            bad("program", "`program` is empty".to_owned());
        } else if program.is_none() {
            bad(
                "program",
                format!(
                    "program `{}` not found (a path is relative to the manifest's directory; a bare name is looked for there, then on PATH; `oracle` is this oracle program)",
                    e.program.escape_debug()
                ),
            );
        }
        let mut args = Vec::with_capacity(e.args.len());
        let mut files = Vec::new();
        for arg in &e.args {
            match arg_file(dir, arg) {
                None => args.push(arg.clone()),
                Some(path) => match path.to_str() {
                    Some(text) => {
                        args.push(text.to_owned());
                        files.push(ArgFile {
                            written: arg.clone(),
                            path: path.clone(),
                        });
                    }
                    None => bad(
                        "args",
                        format!(
                            "`{}` names a file of the tool whose full path is not UTF-8",
                            arg.escape_debug()
                        ),
                    ),
                },
            }
        }
        if files.len() > ARG_FILES_MAX {
            bad(
                "args",
                format!(
                    "{} arguments name files in the tool's directory; at most {ARG_FILES_MAX} may (each is pinned)",
                    files.len()
                ),
            );
        }
        Some(Kind::Exec(Exec {
            program: program.unwrap_or_default(),
            pinned_program,
            args,
            files,
            env: e.env.clone(),
            secrets: e.secrets.clone(),
        }))
    } else if let Some(w) = &raw.wasm {
        let fuel_max = w.fuel_max.unwrap_or(FUEL_MAX_DEFAULT);
        if fuel_max == 0 || fuel_max > FUEL_MAX_MAX {
            bad(
                "fuel_max",
                format!("`fuel_max` is from 1 to {FUEL_MAX_MAX}, not {fuel_max}"),
            );
        }
        let memory_bytes_max = w.memory_bytes_max.unwrap_or(MEMORY_BYTES_MAX_DEFAULT);
        if !(65_536..=MEMORY_BYTES_MAX_MAX).contains(&memory_bytes_max) {
            bad(
                "memory_bytes_max",
                format!(
                    "`memory_bytes_max` is from 65536 (one page) to {MEMORY_BYTES_MAX_MAX}, not {memory_bytes_max}"
                ),
            );
        }
        let module = dir.join(&w.module);
        if !(w.module.ends_with(".wasm") || w.module.ends_with(".wat")) {
            bad(
                "module",
                format!(
                    "`module` names a `.wasm` or `.wat` file, not `{}`",
                    w.module.escape_debug()
                ),
            );
        } else if !module.is_file() {
            bad(
                "module",
                format!(
                    "module `{}` not found beside the manifest",
                    w.module.escape_debug()
                ),
            );
        }
        Some(Kind::Wasm(Wasm {
            module,
            fuel_max,
            memory_bytes_max,
        }))
    } else if let Some(m) = &raw.mcp {
        env_check(m, &mut bad);
        let start_timeout_ms = m
            .start_timeout_ms
            .unwrap_or(crate::mcp::START_TIMEOUT_MS_DEFAULT);
        if start_timeout_ms == 0 || start_timeout_ms > TIMEOUT_MS_MAX {
            bad(
                "start_timeout_ms",
                format!("`start_timeout_ms` is from 1 to {TIMEOUT_MS_MAX}"),
            );
        }
        let (program, _) = resolve_program(dir, &m.program);
        if m.program.is_empty() {
            bad("program", "`program` is empty".to_owned());
        }
        Some(Kind::Mcp(Mcp {
            found: program.is_some(),
            program: program.unwrap_or_else(|| PathBuf::from(&m.program)),
            args: m.args.clone(),
            env: m.env.clone(),
            secrets: m.secrets.clone(),
            start_timeout_ms,
        }))
    } else {
        None
    };
    match kind {
        Some(kind) if problems.is_empty() => Ok(Manifest {
            path: path.to_path_buf(),
            bytes,
            name: raw.name,
            version: raw.version,
            description: raw.description,
            pure,
            capability,
            timeout_ms,
            output_bytes_max,
            input_schema,
            output_schema,
            kind,
        }),
        _ => Err(problems),
    }
}

/// Why a manifest's `capability` is refused; the manifest's problem quotes it, worded as
/// before. `escaped`: the text as `str::escape_debug` writes it.
#[derive(Debug, thiserror::Error)]
enum RuleError {
    #[error(
        "`capability` is `domain:action:scope` (the scope fixed or `{{argument}}`), not `{escaped}`"
    )]
    Shape { escaped: String },
    #[error("`capability` is `domain:action:scope` with lowercase words, not `{escaped}`")]
    Words { escaped: String },
    #[error(
        "`capability` takes its scope from `{arg}`, which must be a required string property of `input_schema`"
    )]
    ScopeArg { arg: String },
}

/// `domain:action:scope`, where the scope is fixed text or `{arg}`: the value of the string
/// argument `arg`.
fn capability_rule(text: &str, input_schema: &Value) -> Result<CapabilityRule, RuleError> {
    let parts: Vec<&str> = text.splitn(3, ':').collect();
    let word = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    let [domain, action, scope] = parts[..] else {
        return Err(RuleError::Shape {
            escaped: text.escape_debug().to_string(),
        });
    };
    if !word(domain) || !word(action) || scope.is_empty() {
        return Err(RuleError::Words {
            escaped: text.escape_debug().to_string(),
        });
    }
    let scope = match scope.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        Some(arg) => {
            let ty = input_schema
                .get("properties")
                .and_then(|p| p.get(arg))
                .and_then(|p| p.get("type"))
                .and_then(Value::as_str);
            let required = input_schema
                .get("required")
                .and_then(Value::as_array)
                .is_some_and(|r| r.iter().any(|x| x.as_str() == Some(arg)));
            if ty != Some("string") || !required {
                return Err(RuleError::ScopeArg {
                    arg: arg.to_owned(),
                });
            }
            ScopeFrom::Arg(arg.to_owned())
        }
        None => ScopeFrom::Fixed(scope.to_owned()),
    };
    Ok(CapabilityRule {
        domain: domain.to_owned(),
        action: action.to_owned(),
        scope,
    })
}

/// The file of the tool an exec argument names, if it names one: an argument that is a
/// relative path with no `..` component (`script.py`, `./lib/run.py`), naming a regular file
/// (after symlinks) under the manifest's directory. Returned absolute, every symlink resolved.
///
/// The rule is lexical on purpose, so a reader of the manifest can tell which arguments are
/// pinned: an absolute path or one climbing out with `..` names the system's files (like a
/// program found on `PATH`) and is passed as written, unpinned; so is anything that is not an
/// existing regular file there (an option such as `--json`, a directory, a name that only the
/// run's working directory holds).
pub fn arg_file(dir: &Path, arg: &str) -> Option<PathBuf> {
    if arg.is_empty() || arg.starts_with('/') || arg.split('/').any(|c| c == "..") {
        return None;
    }
    let path = dir.join(arg);
    if !path.is_file() {
        return None;
    }
    path.canonicalize().ok()
}

/// The `program` that names the oracle program itself (docs/TOOLS.md): the executable of the
/// running process, never a file beside the manifest or on `PATH`, so a tools directory can run
/// `oracle dev mcp-example` (or any `oracle` subcommand) wherever and however oracle was
/// built, without installing it. Not pinned, like a program found on `PATH`: it is a host
/// path whose bytes change with every build, and what a pin records must not depend on the
/// machine. (A program embedding oracle_runtime is itself what `oracle` runs.)
pub const ORACLE_PROGRAM: &str = "oracle";

/// Where a manifest's `program` is: [`ORACLE_PROGRAM`], the running executable; a path (with a
/// `/`) relative to the manifest's directory; a bare name beside the manifest, else on `PATH`.
/// The flag says whether it is the tool's own file (pinned) rather than the system's.
fn resolve_program(dir: &Path, program: &str) -> (Option<PathBuf>, bool) {
    if program.is_empty() {
        return (None, false);
    }
    if program == ORACLE_PROGRAM {
        return (std::env::current_exe().ok().filter(|p| p.is_file()), false);
    }
    let canonical = |p: PathBuf| p.canonicalize().ok().filter(|p| p.is_file());
    if program.contains('/') {
        return (canonical(dir.join(program)), true);
    }
    if let Some(p) = canonical(dir.join(program)) {
        return (Some(p), true);
    }
    // Found on `PATH`, the path is kept as found (absolute), not with its symlinks resolved: a
    // program that reads where it was started from (a virtual environment's `python3`, a
    // symlink to a multi-call binary) must see its own name. It is the system's, never pinned.
    let on_path = |d: PathBuf| {
        let p = d.join(program);
        if p.is_absolute() {
            p.is_file().then_some(p)
        } else {
            canonical(p)
        }
    };
    let found =
        std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).find_map(on_path));
    (found, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_dotted_identifiers() {
        for ok in ["json.field", "a", "_x.y_2"] {
            assert!(is_tool_name(ok), "{ok}");
        }
        for bad in ["", ".a", "a.", "a..b", "a-b", "1a", "a.1b", "a b"] {
            assert!(!is_tool_name(bad), "{bad}");
        }
    }

    #[test]
    fn an_argument_names_a_file_of_the_tool_only_inside_its_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let dir = root.join("tools");
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(dir.join("script.py"), "print(1)").unwrap();
        std::fs::write(dir.join("lib/run.py"), "").unwrap();
        std::fs::write(root.join("outside.py"), "").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("script.py", dir.join("link.py")).unwrap();
        for (arg, file) in [
            ("script.py", Some("script.py")),
            ("./script.py", Some("script.py")),
            ("lib/run.py", Some("lib/run.py")),
            ("lib//run.py", Some("lib/run.py")),
            #[cfg(unix)]
            ("link.py", Some("script.py")),
        ] {
            assert_eq!(arg_file(&dir, arg), file.map(|f| dir.join(f)), "{arg}");
        }
        let absolute = dir.join("script.py");
        for arg in [
            "",
            "--json",
            "lib",
            ".",
            "missing.py",
            "../outside.py",
            "lib/../script.py",
            absolute.to_str().unwrap(),
        ] {
            assert_eq!(arg_file(&dir, arg), None, "{arg}");
        }
    }

    #[test]
    fn the_name_of_a_broken_manifest_is_read_leniently() {
        let name = |t: &str| declared_name(t.as_bytes());
        assert_eq!(
            name("name = \"x.y\"\nversion = 3\n[wasm]\n"),
            Some(("x.y".to_owned(), false))
        );
        assert_eq!(
            name("name = \"srv\"\n[mcp]\nprogram = \"gone\"\n"),
            Some(("srv".to_owned(), true))
        );
        // Not TOML at all: read line by line.
        assert_eq!(
            name("name = \"x.z\"\nversion = [\n[mcp]\n"),
            Some(("x.z".to_owned(), true))
        );
        assert_eq!(name("version = [\n"), None);
        assert_eq!(name("[exec]\nname = \"late\"\nx = [\n"), None);
        assert_eq!(name("name = 3\n"), None);
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(key_at("x = 1\n  effect = \"y\"\n", "effect"), Some((2, 3)));
    }
}
