//! Tools declared by manifests instead of compiled in (docs/TOOLS.md): a directory of TOML
//! manifests, each an exec program, a WebAssembly module or an MCP server, loaded into the
//! registry beside the built-ins and pinned in the run's first event.
//!
//! What is deliberately absent: a declared tool never gets a capability it did not declare
//! (exec tools need `tool:exec:<name>` unless they name another; MCP tools
//! `mcp:<server>:<tool>`), a wasm module never gets an import, and a replay never starts an MCP
//! server or runs an impure program: it reads their recorded outputs, as for every impure tool.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use oracle_core::hash::{Hash, domain};
use oracle_core::payload::{PinnedFile, ToolPin};

use crate::secrets::Secrets;
use crate::tool::{Effect, Registry, RegistryError, Tool, ToolDecl};

pub mod exec;
pub mod loaded;
pub mod manifest;
pub mod mcp;
pub mod wasm;

pub use manifest::{Manifest, Problem};

/// Where a run keeps what its MCP servers listed (`tools/mcp.<server>.json`).
pub const KEPT_DIR: &str = "tools";

/// How MCP servers are treated while loading.
#[derive(Clone, Copy, Debug)]
pub enum McpMode<'a> {
    /// Start each server and ask for its tools (`run`, `resume`, `tools check`, `tools call`).
    Start,
    /// Read the tools a run's servers listed from its directory; start nothing (`replay`,
    /// `tools audit`).
    Recorded(&'a Path),
}

/// One declared tool, loaded.
pub struct Entry {
    /// The manifest that declares it.
    pub path: PathBuf,
    /// `exec`, `wasm` or `mcp`.
    pub kind: &'static str,
    pub tool: Arc<dyn Tool>,
    /// The wasm tool itself, for `oracle tools call` to report fuel.
    pub wasm: Option<Arc<wasm::WasmTool>>,
}

/// Every tool the manifests of some directories declare.
#[derive(Default)]
pub struct Declared {
    pub tools: Vec<Entry>,
    pub pins: Vec<ToolPin>,
    /// Files a run keeps under [`KEPT_DIR`]: what each MCP server listed.
    pub kept: Vec<(String, Vec<u8>)>,
    /// Manifests that could not be loaded. They do not hold up the others: `oracle tools
    /// check` reports them, and a plan is refused only if it uses one of their tools.
    pub broken: Vec<Broken>,
}

/// A manifest that could not be loaded (it does not parse, names a program that is missing, a
/// module that does not compile, a server that does not start, ...), and the tools it would
/// have declared, as far as it says.
#[derive(Clone, Debug)]
pub struct Broken {
    /// What a plan would call: the tool's name, or `mcp.<server>.` (ending in `.`) for every
    /// tool of an MCP server. `None` when the manifest does not even say its name.
    pub calls: Option<String>,
    pub problems: Vec<Problem>,
}

impl Declared {
    /// Every problem of the broken manifests, in the order found.
    pub fn problems(&self) -> Vec<Problem> {
        self.broken
            .iter()
            .flat_map(|b| b.problems.iter().cloned())
            .collect()
    }
}

/// What a plan calls the tools of the manifest named `name` (an MCP server's with `mcp`).
fn calls(name: &str, mcp: bool) -> String {
    if mcp {
        format!("mcp.{name}.")
    } else {
        name.to_owned()
    }
}

/// The manifests of `dir`: every `*.toml` file in it (not below), by file name, and those
/// that could not be read or parsed. `Err` when the directory itself cannot be used.
pub fn manifests(dir: &Path) -> Result<(Vec<Manifest>, Vec<Broken>), Vec<Problem>> {
    let problem = |path: &Path, message: String| Problem {
        path: path.to_path_buf(),
        at: None,
        message,
    };
    let entries = std::fs::read_dir(dir).map_err(|e| {
        vec![problem(
            dir,
            format!(
                "cannot read the tools directory: {}",
                crate::tools::io_reason(&e)
            ),
        )]
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    paths.sort();
    if paths.len() > manifest::MANIFESTS_MAX {
        return Err(vec![problem(
            dir,
            format!(
                "{} manifests; a tools directory holds at most {}",
                paths.len(),
                manifest::MANIFESTS_MAX
            ),
        )]);
    }
    let mut out = Vec::new();
    let mut broken = Vec::new();
    for path in paths {
        match read_bounded(&path, manifest::MANIFEST_BYTES_MAX) {
            Ok(bytes) => {
                let named = manifest::declared_name(&bytes);
                match manifest::parse(&path, bytes) {
                    Ok(m) => out.push(m),
                    Err(problems) => broken.push(Broken {
                        calls: named.map(|(name, mcp)| calls(&name, mcp)),
                        problems,
                    }),
                }
            }
            Err(m) => broken.push(Broken {
                calls: None,
                problems: vec![problem(&path, m.to_string())],
            }),
        }
    }
    Ok((out, broken))
}

/// Why a file a manifest names cannot be read ([`read_bounded`]).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// `reason` is [`crate::tools::io_reason`]'s, without OS error numbers.
    #[error("cannot read: {reason}")]
    Io { reason: String },
    #[error("larger than {max} bytes")]
    TooLarge { max: u64 },
}

/// Why a declared tool does not load: the message of its manifest's problem, worded as before
/// this type existed (`oracle tools check` and a refused run print it).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("program: {0}")]
    Program(ReadError),
    /// `written`: the path as the manifest's arguments write it.
    #[error("`{written}` (named in args): {source}")]
    NamedFile { written: String, source: ReadError },
    /// An interpreted tool's directory that cannot be pinned whole ([`loaded`]).
    #[error(
        "the directory of its script ({dir}) {source}: every file an interpreter may load from it is pinned, so keep the tool in a directory of its own"
    )]
    Loaded {
        dir: String,
        source: loaded::LoadedError,
    },
    #[error("module: {0}")]
    Module(ReadError),
    #[error("module `{file}`: {source}")]
    Wasm {
        file: String,
        source: wasm::WasmError,
    },
    #[error(transparent)]
    McpList(#[from] mcp::ListError),
    #[error(transparent)]
    Secret(#[from] crate::secrets::SecretError),
    #[error("the run kept no tool list for MCP server `{server}` ({source})")]
    NoKeptList { server: String, source: ReadError },
    #[error("the tool list the run kept for MCP server `{server}` is not valid: {source}")]
    KeptList {
        server: String,
        source: serde_json::Error,
    },
    #[error(
        "MCP server `{server}` lists a tool named `{tool}`, the name of a built-in tool: refused, so that nobody takes `{plan_name}` for it"
    )]
    Builtin {
        server: String,
        tool: String,
        plan_name: String,
    },
    /// `escaped`: the tool's name as `str::escape_debug` writes it.
    #[error(
        "MCP server `{server}` lists a tool named `{escaped}`, which a plan cannot write as a tool name"
    )]
    Unwritable { server: String, escaped: String },
    #[error(
        "MCP server `{server}` lists `{other}` and `{tool}`, which a plan would both call `{name}`"
    )]
    Clash {
        server: String,
        other: String,
        tool: String,
        name: String,
    },
}

/// The files beside an interpreted exec tool's script ([`loaded`]): under the directory of each
/// file its `args` name, and of its program when that is its own file starting with `#!`; none
/// for a tool that is neither (a binary beside its manifest, a program on `PATH` alone).
fn interpreted_files(
    m: &Manifest,
    e: &manifest::Exec,
    program: Option<&[u8]>,
) -> Result<Vec<loaded::LoadedFile>, LoadError> {
    let script = e.pinned_program && program.is_some_and(|b| b.starts_with(b"#!"));
    let entries = e
        .files
        .iter()
        .map(|f| f.path.as_path())
        .chain(script.then_some(e.program.as_path()));
    let dirs: std::collections::BTreeSet<PathBuf> = entries
        .filter_map(|p| p.parent().map(Path::to_path_buf))
        .collect();
    if dirs.is_empty() {
        return Ok(Vec::new());
    }
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let manifest_dir = m.path.parent().map(canonical).unwrap_or_default();
    let mut skip: std::collections::BTreeSet<PathBuf> =
        e.files.iter().map(|f| f.path.clone()).collect();
    skip.insert(canonical(&e.program));
    skip.insert(canonical(&m.path));
    loaded::files_under(&dirs, &manifest_dir, &skip).map_err(|source| LoadError::Loaded {
        dir: dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        source,
    })
}

/// The bytes of `path`, refusing a file over `max` bytes.
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read as _;
    let io = |e: std::io::Error| ReadError::Io {
        reason: crate::tools::io_reason(&e),
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(ReadError::TooLarge { max });
    }
    Ok(bytes)
}

/// The bytes a declared tool receives for `input`: compact JSON text with object keys sorted
/// (serde_json without `preserve_order`, as the tidy test keeps it), so equal inputs give equal
/// bytes.
pub fn input_json(input: &serde_json::Value) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(input)
}

/// The pin hash of a tool: its manifest's bytes, then the bytes of what it names.
pub fn pin_hash(manifest: &[u8], named: &[&[u8]]) -> Hash {
    let mut h = oracle_core::hash::hasher(domain::TOOL_PIN);
    for part in std::iter::once(manifest).chain(named.iter().copied()) {
        h.update(&(part.len() as u64).to_be_bytes());
        h.update(part);
    }
    Hash(*h.finalize().as_bytes())
}

/// The hash a pin records beside a file an exec tool's `args` name: BLAKE3 (context
/// `oracle v1 tool file`) over its bytes.
pub fn file_hash(bytes: &[u8]) -> Hash {
    oracle_core::hash::hash_in(domain::TOOL_FILE, bytes)
}

/// The declaration a manifest makes (exec and wasm tools).
fn decl_of(m: &Manifest) -> ToolDecl {
    ToolDecl {
        name: m.name.clone(),
        version: m.version.clone(),
        description: m.description.clone(),
        effect: if m.pure { Effect::Pure } else { Effect::Impure },
        input_schema: m.input_schema.clone(),
        output_schema: m.output_schema.clone(),
        capability: m.capability.clone(),
        timeout_ms: m.timeout_ms,
        output_bytes_max: m.output_bytes_max,
    }
}

/// Loads every manifest of `dirs` (each directory once, in the order given) into tools, with
/// their pins. A manifest that cannot be loaded is set aside in [`Declared::broken`], with
/// every problem located, and holds up nothing else. `Err` (every problem, located) only for
/// what makes the whole set unusable: a directory that cannot be read, or a name declared
/// twice (which tool a plan means would be a guess).
pub fn load(
    dirs: &[PathBuf],
    secrets: &Arc<Secrets>,
    mcp_mode: McpMode<'_>,
) -> Result<Declared, Vec<Problem>> {
    let mut seen = Vec::new();
    let mut all = Vec::new();
    let mut problems = Vec::new();
    let mut declared = Declared::default();
    for dir in dirs {
        let key = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        match manifests(dir) {
            Ok((ms, broken)) => {
                all.extend(ms);
                declared.broken.extend(broken);
            }
            Err(p) => problems.extend(p),
        }
    }
    let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
    for m in all {
        let pin_name = match &m.kind {
            manifest::Kind::Mcp(_) => format!("mcp.{}", m.name),
            _ => m.name.clone(),
        };
        if let Some(first) = names.get(&pin_name) {
            problems.push(Problem {
                path: m.path.clone(),
                at: None,
                message: format!(
                    "`{}` is declared twice (first in {})",
                    m.name,
                    first.display()
                ),
            });
            continue;
        }
        names.insert(pin_name.clone(), m.path.clone());
        if let Err(e) = load_one(&m, &pin_name, secrets, mcp_mode, &mut declared) {
            let message = e.to_string();
            declared.broken.push(Broken {
                calls: Some(calls(&m.name, matches!(m.kind, manifest::Kind::Mcp(_)))),
                problems: vec![Problem {
                    path: m.path.clone(),
                    at: None,
                    message,
                }],
            });
        }
    }
    if problems.is_empty() {
        declared.pins.sort();
        Ok(declared)
    } else {
        // The whole set is refused: every problem found is reported, the broken manifests'
        // too.
        problems.extend(declared.problems());
        Err(problems)
    }
}

fn load_one(
    m: &Manifest,
    pin_name: &str,
    secrets: &Arc<Secrets>,
    mcp_mode: McpMode<'_>,
    out: &mut Declared,
) -> Result<(), LoadError> {
    let pin = |version: &str, effect: &str, hash: Hash, files: Vec<PinnedFile>| ToolPin {
        name: pin_name.to_owned(),
        kind: m.kind.name().to_owned(),
        version: version.to_owned(),
        effect: effect.to_owned(),
        hash,
        // Absent rather than empty: a tool that names no file pins exactly as before.
        files: (!files.is_empty()).then_some(files),
    };
    let effect = if m.pure { "pure" } else { "impure" };
    match &m.kind {
        manifest::Kind::Exec(e) => {
            let program = if e.pinned_program {
                read_bounded(&e.program, manifest::PROGRAM_BYTES_MAX).map_err(LoadError::Program)?
            } else {
                Vec::new()
            };
            // The program, then each file the arguments name, in the order written.
            let mut named = vec![program];
            let mut files = Vec::with_capacity(e.files.len());
            for f in &e.files {
                let bytes =
                    read_bounded(&f.path, manifest::PROGRAM_BYTES_MAX).map_err(|source| {
                        LoadError::NamedFile {
                            written: f.written.clone(),
                            source,
                        }
                    })?;
                files.push(PinnedFile {
                    path: f.written.clone(),
                    hash: file_hash(&bytes),
                });
                named.push(bytes);
            }
            // Then every other file an interpreter may load from the script's directory.
            for f in interpreted_files(m, e, named.first().map(Vec::as_slice))? {
                files.push(PinnedFile {
                    path: f.path,
                    hash: file_hash(&f.bytes),
                });
                named.push(f.bytes);
            }
            let named: Vec<&[u8]> = named.iter().map(Vec::as_slice).collect();
            out.pins
                .push(pin(&m.version, effect, pin_hash(&m.bytes, &named), files));
            out.tools.push(Entry {
                path: m.path.clone(),
                kind: "exec",
                tool: Arc::new(exec::ExecTool {
                    decl: decl_of(m),
                    exec: e.clone(),
                    secrets: secrets.clone(),
                }),
                wasm: None,
            });
        }
        manifest::Kind::Wasm(w) => {
            let bytes =
                read_bounded(&w.module, manifest::MODULE_BYTES_MAX).map_err(LoadError::Module)?;
            let text = w.module.extension().is_some_and(|x| x == "wat");
            let tool = Arc::new(
                wasm::WasmTool::new(decl_of(m), &bytes, text, w.clone()).map_err(|source| {
                    LoadError::Wasm {
                        file: file_name(&w.module),
                        source,
                    }
                })?,
            );
            out.pins.push(pin(
                &m.version,
                effect,
                pin_hash(&m.bytes, &[&bytes]),
                Vec::new(),
            ));
            out.tools.push(Entry {
                path: m.path.clone(),
                kind: "wasm",
                tool: tool.clone(),
                wasm: Some(tool),
            });
        }
        manifest::Kind::Mcp(spec) => {
            let (conn, listing) = match mcp_mode {
                McpMode::Start => {
                    let (conn, listing) = mcp::list(m, spec, secrets)?;
                    (Some(conn), listing)
                }
                McpMode::Recorded(run_dir) => {
                    let path = run_dir.join(KEPT_DIR).join(format!("{pin_name}.json"));
                    let bytes =
                        read_bounded(&path, manifest::MODULE_BYTES_MAX).map_err(|source| {
                            LoadError::NoKeptList {
                                server: m.name.clone(),
                                source,
                            }
                        })?;
                    let listing: mcp::Listing =
                        serde_json::from_slice(&bytes).map_err(|source| LoadError::KeptList {
                            server: m.name.clone(),
                            source,
                        })?;
                    (None, listing)
                }
            };
            let builtin = crate::tools::builtin();
            let mut plan_names = BTreeMap::new();
            for t in &listing.tools {
                if builtin.get(&t.name).is_some() {
                    return Err(LoadError::Builtin {
                        server: m.name.clone(),
                        tool: t.name.clone(),
                        plan_name: mcp::plan_name(&m.name, &t.name),
                    });
                }
                let name = mcp::plan_name(&m.name, &t.name);
                if !manifest::is_tool_name(&name) {
                    return Err(LoadError::Unwritable {
                        server: m.name.clone(),
                        escaped: t.name.escape_debug().to_string(),
                    });
                }
                if let Some(other) = plan_names.insert(name.clone(), t.name.clone()) {
                    return Err(LoadError::Clash {
                        server: m.name.clone(),
                        other,
                        tool: t.name.clone(),
                        name,
                    });
                }
            }
            let kept = listing.bytes();
            out.pins.push(pin(
                &listing.version,
                "impure",
                pin_hash(&m.bytes, &[&kept]),
                Vec::new(),
            ));
            out.kept.push((format!("{pin_name}.json"), kept));
            let command = match mcp_mode {
                McpMode::Start => {
                    let cwd = m.path.parent().map(Path::to_path_buf).unwrap_or_default();
                    Some((mcp::command(spec, secrets, &cwd)?, spec.start_timeout_ms))
                }
                McpMode::Recorded(_) => None,
            };
            let server = Arc::new(mcp::Server {
                name: m.name.clone(),
                command,
                conn: Mutex::new(conn),
            });
            for t in &listing.tools {
                out.tools.push(Entry {
                    path: m.path.clone(),
                    kind: "mcp",
                    tool: Arc::new(mcp::McpTool {
                        decl: mcp::decl(m, t),
                        remote: t.name.clone(),
                        structured: t.output_schema.is_some(),
                        server: server.clone(),
                    }),
                    wasm: None,
                });
            }
        }
    }
    Ok(())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// Adds the declared tools to `registry` (a name that is already there, a built-in's say, is
/// refused) and pins them; the tools of broken manifests are marked unavailable, with why, so
/// a plan that uses one is refused with the reason.
pub fn declare(registry: &mut Registry, declared: Declared) -> Result<(), Vec<Problem>> {
    for b in &declared.broken {
        if let Some(name) = &b.calls {
            let why: Vec<String> = b.problems.iter().map(ToString::to_string).collect();
            registry.mark_unavailable(name.clone(), why.join("; "));
        }
    }
    // Should a collision refuse the set, the broken manifests are reported with it.
    let broken = declared.problems();
    let mut problems = Vec::new();
    for entry in declared.tools {
        if let Err(e) = registry.register(entry.tool) {
            let message = match e {
                RegistryError::Duplicate(name) => format!(
                    "`{name}` is already a tool (a built-in, or declared twice): choose another name"
                ),
                other => other.to_string(),
            };
            problems.push(Problem {
                path: entry.path,
                at: None,
                message,
            });
        }
    }
    for pin in declared.pins {
        registry.pin(pin);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(broken.into_iter().chain(problems).collect())
    }
}

/// How the tools given to a replay or resume differ from those the run started with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("declared tool `{tool}` {what}")]
pub struct ToolChanged {
    pub tool: String,
    pub what: String,
}

/// Compares the pins a run recorded with the tools given now: the first difference, by tool
/// name.
pub fn compare(recorded: &[ToolPin], current: &[ToolPin]) -> Result<(), ToolChanged> {
    let by_name = |pins: &[ToolPin]| -> BTreeMap<String, ToolPin> {
        pins.iter().map(|p| (p.name.clone(), p.clone())).collect()
    };
    let (was, now) = (by_name(recorded), by_name(current));
    let mut names: Vec<&String> = was.keys().chain(now.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let what = match (was.get(name), now.get(name)) {
            (Some(a), Some(b)) if a == b => continue,
            (Some(a), Some(b)) if a.kind != b.kind => {
                format!("was a {} tool and is now a {} tool", a.kind, b.kind)
            }
            (Some(a), Some(b)) if a.effect != b.effect => {
                format!("was declared {} and is now {}", a.effect, b.effect)
            }
            (Some(a), Some(b)) if a.kind == "mcp" => format!(
                "changed: the server or its manifest differs (version {} then, {} now; pin {} then, {} now): its tool list or manifest changed",
                a.version,
                b.version,
                a.hash.short(),
                b.hash.short()
            ),
            (Some(a), Some(b)) if files_of(a) != files_of(b) => file_changed(a, b),
            (Some(a), Some(b)) => format!(
                "changed since the run started: its manifest, module or program differs (version {} then, {} now; pin {} then, {} now)",
                a.version,
                b.version,
                a.hash.short(),
                b.hash.short()
            ),
            (Some(_), None) => "was declared when the run started and is not now: give its tools directory with --tools".to_owned(),
            (None, Some(_)) => "is declared now but was not when the run started".to_owned(),
            (None, None) => continue,
        };
        return Err(ToolChanged {
            tool: name.clone(),
            what,
        });
    }
    Ok(())
}

/// The files a pin lists (none when it lists none, or predates the list).
fn files_of(pin: &ToolPin) -> &[PinnedFile] {
    pin.files.as_deref().unwrap_or_default()
}

/// How the files two pins of one exec tool name differ (they do), naming the first file that
/// changed, went or came, in the order the run's pin lists them.
fn file_changed(was: &ToolPin, now: &ToolPin) -> String {
    let (then, current) = (files_of(was), files_of(now));
    for f in then {
        match current.iter().find(|c| c.path == f.path) {
            Some(c) if c.hash == f.hash => {}
            Some(c) => {
                return format!(
                    "changed since the run started: `{}`, a file of the tool (named in its args, or beside its script), differs (file {} then, {} now; pin {} then, {} now)",
                    f.path,
                    f.hash.short(),
                    c.hash.short(),
                    was.hash.short(),
                    now.hash.short()
                );
            }
            None => {
                return format!(
                    "changed since the run started: `{}`, a file of the tool then (named in its args, or beside its script), is not one now (pin {} then, {} now)",
                    f.path,
                    was.hash.short(),
                    now.hash.short()
                );
            }
        }
    }
    let Some(added) = current
        .iter()
        .find(|c| !then.iter().any(|f| f.path == c.path))
        .map(|c| c.path.as_str())
    else {
        return format!(
            "changed since the run started: the same files of the tool in another order (pin {} then, {} now)",
            was.hash.short(),
            now.hash.short()
        );
    };
    let why = if was.files.is_none() {
        " (or the run predates the pinning of a tool's files)"
    } else {
        ""
    };
    format!(
        "changed since the run started: `{added}` is now a file of the tool (named in its args, or beside its script), which the run's pin did not cover{why} (pin {} then, {} now)",
        was.hash.short(),
        now.hash.short()
    )
}
