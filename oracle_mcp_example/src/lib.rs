//! A tiny MCP server over stdio, written with the official Rust SDK (`rmcp`), for oracle's
//! declared MCP tools and the tests of its MCP client (`oracle_runtime::mcp`). It runs as
//! `oracle dev mcp-example` (so the README's tools walkthrough needs nothing but the `oracle`
//! binary) and as the program `oracle-mcp-example` (a thin wrapper the tests start).
//!
//! Server `oracle-mcp-example` 1.0.0, with two tools:
//!
//! - `word_count {text}` → structured content `{"words": N}` (words are separated by
//!   whitespace), also given as a text content item;
//! - `reverse {text}` → structured content `{"text": ...}`, the text reversed character by
//!   character.
//!
//! `--mode MODE` (the first argument; `normal` by default) makes it misbehave, for the tests:
//!
//! - `normal`: as above.
//! - `crash-on-call`: starts and lists normally; any tool call makes it write a line to stderr
//!   and exit with status 3.
//! - `hang-on-call`: starts and lists normally; never answers a tool call.
//! - `malformed-on-call`: starts and lists normally; answers a tool call with a line that is not
//!   JSON.
//! - `huge-on-call`: starts and lists normally; answers a tool call with one line of more than
//!   16 MiB (a JSON-RPC response whose text is too long).
//! - `collide`: also lists a tool named `fs.read` (the name of one of oracle's built-in tools),
//!   which only returns a tool error; the caller must refuse the collision.
//! - `changing`: the tool list depends on the environment variable
//!   `ORACLE_MCP_EXAMPLE_VARIANT`: `1` (or unset) lists `word_count` only; `2` lists
//!   `word_count` with a second required argument `lang`. So a test can change the tools between
//!   two runs.
//! - `hang-on-start`: never answers `initialize` (it does not even read it).
//!
//! The misbehaving answers are written straight to stdout, around `rmcp`, which would never
//! send them; the SDK writes nothing while a call is being handled, so the lines do not mix.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{Value, json};

/// How the server behaves (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Normal,
    CrashOnCall,
    HangOnCall,
    MalformedOnCall,
    HugeOnCall,
    Collide,
    Changing,
    HangOnStart,
}

/// Every mode's name, as `--mode` takes it.
pub const MODES: [&str; 8] = [
    "normal",
    "crash-on-call",
    "hang-on-call",
    "malformed-on-call",
    "huge-on-call",
    "collide",
    "changing",
    "hang-on-start",
];

impl Mode {
    /// The mode named `name` (one of [`MODES`]).
    pub fn parse(name: &str) -> Option<Mode> {
        Some(match name {
            "normal" => Mode::Normal,
            "crash-on-call" => Mode::CrashOnCall,
            "hang-on-call" => Mode::HangOnCall,
            "malformed-on-call" => Mode::MalformedOnCall,
            "huge-on-call" => Mode::HugeOnCall,
            "collide" => Mode::Collide,
            "changing" => Mode::Changing,
            "hang-on-start" => Mode::HangOnStart,
            _ => return None,
        })
    }
}

/// Bytes of the line `huge-on-call` answers with: past the 16 MiB the tests expect.
const HUGE_BYTES: usize = (16 << 20) + (1 << 20);

/// The server: its mode and, in `changing` mode, whether `word_count` needs `lang`.
#[derive(Clone, Debug)]
struct Example {
    mode: Mode,
    with_lang: bool,
}

/// The mode the program's arguments ask for: none (`normal`) or `--mode MODE`; `None` for
/// anything else.
pub fn mode_of(args: &[String]) -> Option<Mode> {
    match args {
        [] => Some(Mode::Normal),
        [flag, name] if flag == "--mode" => Mode::parse(name),
        _ => None,
    }
}

/// The usage line of the program.
pub fn usage() -> String {
    format!("usage: oracle-mcp-example [--mode {}]", MODES.join("|"))
}

/// Serves one client over stdin and stdout in `mode` until it closes stdin: exit 0, or 1 (with
/// the reason on stderr) if the session broke. `hang-on-start` never returns.
pub fn run(mode: Mode) -> ExitCode {
    if mode == Mode::HangOnStart {
        // The client gives up and kills the process; until then, nothing happens.
        loop {
            std::thread::park();
        }
    }
    let with_lang = mode == Mode::Changing
        && std::env::var("ORACLE_MCP_EXAMPLE_VARIANT").is_ok_and(|v| v == "2");
    match serve(Example { mode, with_lang }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oracle-mcp-example: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Serves one client over stdin and stdout until it closes stdin. One thread is plenty: the
/// client asks one thing at a time.
#[tokio::main(flavor = "current_thread")]
async fn serve(server: Example) -> Result<(), Box<dyn std::error::Error>> {
    let running = server.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

impl ServerHandler for Example {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("oracle-mcp-example", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = match self.mode {
            Mode::Changing => vec![word_count_tool(self.with_lang)],
            _ => vec![word_count_tool(false), reverse_tool()],
        };
        if self.mode == Mode::Collide {
            tools.push(Tool::new(
                "fs.read",
                "Collides with oracle's built-in fs.read.",
                schema(json!({
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                })),
            ));
        }
        Ok(ListToolsResult {
            tools,
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match self.mode {
            Mode::CrashOnCall => {
                eprintln!("oracle-mcp-example: crashing on purpose (--mode crash-on-call)");
                std::process::exit(3);
            }
            Mode::HangOnCall => std::future::pending().await,
            Mode::MalformedOnCall => {
                raw_line(b"this is not JSON");
                std::future::pending().await
            }
            Mode::HugeOnCall => {
                let text = "x".repeat(HUGE_BYTES);
                let response = json!({
                    "jsonrpc": "2.0",
                    "id": context.id.into_json_value(),
                    "result": {"content": [{"type": "text", "text": text}]},
                });
                raw_line(response.to_string().as_bytes());
                std::future::pending().await
            }
            Mode::Normal | Mode::Collide | Mode::Changing | Mode::HangOnStart => {
                self.answer(&request).map(CallToolResponse::from)
            }
        }
    }
}

impl Example {
    /// Runs a well-behaved call.
    fn answer(&self, request: &CallToolRequestParams) -> Result<CallToolResult, ErrorData> {
        let text_arg = |name: &str| {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    ErrorData::invalid_params(format!("argument `{name}` must be a string"), None)
                })
        };
        match &*request.name {
            "word_count" => {
                if self.with_lang {
                    text_arg("lang")?;
                }
                let words = text_arg("text")?.split_whitespace().count();
                Ok(CallToolResult::structured(json!({"words": words})))
            }
            "reverse" if self.mode != Mode::Changing => {
                let reversed: String = text_arg("text")?.chars().rev().collect();
                Ok(CallToolResult::structured(json!({"text": reversed})))
            }
            "fs.read" if self.mode == Mode::Collide => {
                Ok(CallToolResult::error(vec![ContentBlock::text(
                    "this fs.read only exists to collide with oracle's",
                )]))
            }
            other => Err(ErrorData::invalid_params(
                format!("unknown tool `{other}`"),
                None,
            )),
        }
    }
}

fn word_count_tool(with_lang: bool) -> Tool {
    let mut properties = json!({"text": {"type": "string", "description": "The text to count."}});
    let mut required = vec!["text"];
    if with_lang {
        properties["lang"] = json!({"type": "string", "description": "The text's language."});
        required.push("lang");
    }
    Tool::new(
        "word_count",
        "Count the words (separated by whitespace) of a text: {words}.",
        schema(json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })),
    )
    .with_raw_output_schema(schema(json!({
        "type": "object",
        "properties": {"words": {"type": "integer", "minimum": 0}},
        "required": ["words"],
        "additionalProperties": false,
    })))
}

fn reverse_tool() -> Tool {
    Tool::new(
        "reverse",
        "Reverse a text, character by character: {text}.",
        schema(json!({
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The text to reverse."}},
            "required": ["text"],
            "additionalProperties": false,
        })),
    )
    .with_raw_output_schema(schema(json!({
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": false,
    })))
}

/// A JSON Schema (always written here as an object) as `rmcp` holds one.
fn schema(value: Value) -> Arc<JsonObject> {
    Arc::new(match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    })
}

/// Writes one line to stdout around `rmcp`. A client that stopped reading makes the write fail;
/// there is nobody to tell then.
fn raw_line(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(bytes)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
}
