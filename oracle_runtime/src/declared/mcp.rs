//! Declared MCP servers: each tool a server lists becomes the impure tool
//! `mcp.<server>.<tool>`, needing `mcp:<server>:<tool>`, its calls recorded. What the server
//! listed is kept with the run (and pinned in `run_started`), so replay knows the tools without
//! starting the server.

use std::sync::{Arc, Mutex};

use oracle_plan::catalogue::{CapabilityRule, ScopeFrom};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::manifest::{Manifest, Mcp};
use crate::mcp::{Connection, McpError, ServerCommand};
use crate::secrets::Secrets;
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// What a server said about itself and its tools, as a run keeps it (`tools/mcp.<server>.json`
/// in the run directory) and pins it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listing {
    pub name: String,
    pub version: String,
    pub protocol_version: String,
    pub tools: Vec<ListedTool>,
}

/// One tool of a [`Listing`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListedTool {
    /// As the server names it (what `tools/call` is sent).
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

impl Listing {
    /// The bytes kept and pinned: serde_json with sorted keys, so equal listings give equal
    /// bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

/// The name a plan writes for a server's tool: `mcp.<server>.<tool>`, with every character
/// a plan name cannot hold (`-`, say) written `_`.
pub fn plan_name(server: &str, tool: &str) -> String {
    let tool: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("mcp.{server}.{tool}")
}

/// Why a server's tools could not be listed ([`list`]); a declared tool's problem quotes it.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error(
        "program `{program}` not found (a path is relative to the manifest's directory; a bare name is looked for there, then on PATH; `oracle` is this oracle program)"
    )]
    NotFound { program: String },
    #[error(transparent)]
    Secret(#[from] crate::secrets::SecretError),
    #[error("MCP server `{server}` did not start: {source}")]
    Start {
        server: String,
        source: crate::mcp::McpError,
    },
    #[error("MCP server `{server}`: tools/list failed: {source}")]
    List {
        server: String,
        source: crate::mcp::McpError,
    },
}

/// The process a manifest's `[mcp]` table starts.
pub fn command(
    m: &Mcp,
    secrets: &Secrets,
    cwd: &std::path::Path,
) -> Result<ServerCommand, crate::secrets::SecretError> {
    let mut env: Vec<(String, String)> =
        m.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    for name in &m.secrets {
        env.push((
            name.clone(),
            secrets.resolve(&json!({"$secret": name}), &format!("secret `{name}`"))?,
        ));
    }
    Ok(ServerCommand {
        program: m.program.clone(),
        args: m.args.clone(),
        env,
        cwd: cwd.to_path_buf(),
    })
}

/// Starts the server and asks for its tools.
pub fn list(
    manifest: &Manifest,
    m: &Mcp,
    secrets: &Secrets,
) -> Result<(Connection, Listing), ListError> {
    let cwd = manifest
        .path
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_default();
    if !m.found {
        return Err(ListError::NotFound {
            program: m.program.display().to_string(),
        });
    }
    let cmd = command(m, secrets, &cwd)?;
    let conn = Connection::start(&cmd, m.start_timeout_ms, crate::mcp::MESSAGE_BYTES_MAX).map_err(
        |source| ListError::Start {
            server: manifest.name.clone(),
            source,
        },
    )?;
    let tools = conn
        .list_tools(m.start_timeout_ms)
        .map_err(|source| ListError::List {
            server: manifest.name.clone(),
            source,
        })?;
    let info = conn.info();
    let listing = Listing {
        name: info.name.clone(),
        version: info.version.clone(),
        protocol_version: info.protocol_version.clone(),
        tools: tools
            .into_iter()
            .map(|t| ListedTool {
                name: t.name,
                description: t.description,
                input_schema: t.input_schema,
                output_schema: t.output_schema,
            })
            .collect(),
    };
    Ok((conn, listing))
}

/// A live connection shared by a server's tools (one call at a time), or none on replay. A
/// connection that failed is started again on the next call.
pub struct Server {
    pub name: String,
    pub command: Option<(ServerCommand, u64)>,
    pub conn: Mutex<Option<Connection>>,
}

impl Server {
    fn call(&self, tool: &str, input: &Value, timeout_ms: u64) -> Result<Value, ToolError> {
        let Some((cmd, start_timeout_ms)) = &self.command else {
            return Err(ToolError::Failed(format!(
                "MCP server `{}` is not started during a replay: its calls are recorded",
                self.name
            )));
        };
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(
                Connection::start(cmd, *start_timeout_ms, crate::mcp::MESSAGE_BYTES_MAX).map_err(
                    |e| ToolError::Failed(format!("MCP server `{}` did not start: {e}", self.name)),
                )?,
            );
        }
        let Some(conn) = guard.as_ref() else {
            return Err(ToolError::Failed("no connection".to_owned()));
        };
        match conn.call(tool, input, timeout_ms) {
            Ok(v) => Ok(v),
            Err(e) => {
                // Anything but an error reply leaves the connection unusable: start afresh next
                // time.
                if !matches!(e, McpError::Rpc { .. }) {
                    *guard = None;
                }
                Err(match e {
                    McpError::Timeout { timeout_ms, .. } => ToolError::Timeout { timeout_ms },
                    McpError::TooLarge { limit } => ToolError::OutputTooLarge { limit },
                    other => ToolError::Failed(format!("MCP server `{}`: {other}", self.name)),
                })
            }
        }
    }
}

/// One tool of a server.
pub struct McpTool {
    pub decl: ToolDecl,
    /// The name the server knows it by.
    pub remote: String,
    /// Whether the server listed an output schema: then `structuredContent` is the output.
    pub structured: bool,
    pub server: Arc<Server>,
}

/// The declaration of a listed tool.
pub fn decl(manifest: &Manifest, t: &ListedTool) -> ToolDecl {
    let output_schema = t.output_schema.clone().unwrap_or_else(|| {
        json!({
            "type": "object",
            "properties": {"content": {"type": "array"}},
            "required": ["content"],
        })
    });
    ToolDecl {
        name: plan_name(&manifest.name, &t.name),
        version: manifest.version.clone(),
        description: t.description.clone(),
        effect: Effect::Impure,
        input_schema: t.input_schema.clone(),
        output_schema,
        capability: Some(CapabilityRule {
            domain: "mcp".to_owned(),
            action: manifest.name.clone(),
            scope: ScopeFrom::Fixed(t.name.clone()),
        }),
        timeout_ms: manifest.timeout_ms,
        output_bytes_max: manifest.output_bytes_max,
    }
}

impl Tool for McpTool {
    fn decl(&self) -> ToolDecl {
        self.decl.clone()
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let result = self.server.call(&self.remote, input, cx.timeout_ms)?;
        output_of(&self.remote, self.structured, &result).map(ToolOutput::of)
    }
}

/// The recorded output of a `tools/call` result (docs/TOOLS.md): with an output schema, the
/// result's `structuredContent`; otherwise `{"content": [...]}`, plus the `structuredContent`
/// when the server sent one anyway (an object), so a tool returning JSON is recorded as JSON a
/// plan or an agent reads, not only as text to parse. A result with `isError: true` fails.
fn output_of(remote: &str, structured: bool, result: &Value) -> Result<Value, ToolError> {
    let content = result.get("content").cloned().unwrap_or(json!([]));
    if result.get("isError") == Some(&Value::Bool(true)) {
        let text: Vec<&str> = content
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        return Err(ToolError::Failed(format!(
            "MCP tool `{remote}` reported an error: {}",
            text.join(" ")
        )));
    }
    let sent = result.get("structuredContent").filter(|v| v.is_object());
    if structured {
        return sent.cloned().ok_or_else(|| {
            ToolError::Failed(format!(
                "MCP tool `{remote}` lists an output schema but returned no `structuredContent` object"
            ))
        });
    }
    let mut output = json!({"content": content});
    if let Some(sent) = sent {
        output["structuredContent"] = sent.clone();
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Value {
        json!([{"type": "text", "text": t}])
    }

    #[test]
    fn structured_content_a_server_sends_without_an_output_schema_is_recorded_beside_the_text() {
        let sent =
            json!({"content": text("{\n \"vowels\": 7\n}"), "structuredContent": {"vowels": 7}});
        let out = output_of("count", false, &sent).unwrap();
        assert_eq!(out["structuredContent"], json!({"vowels": 7}));
        assert_eq!(out["content"], text("{\n \"vowels\": 7\n}"));
    }

    #[test]
    fn a_result_with_text_only_is_recorded_as_its_content() {
        let out = output_of("count", false, &json!({"content": text("seven")})).unwrap();
        assert_eq!(out, json!({"content": text("seven")}));
        // A structuredContent that is not an object is not JSON a plan can read by field.
        let odd = json!({"content": text("7"), "structuredContent": 7});
        assert_eq!(
            output_of("count", false, &odd).unwrap(),
            json!({"content": text("7")})
        );
    }

    #[test]
    fn with_an_output_schema_the_structured_content_is_the_output_and_must_be_sent() {
        let sent = json!({"content": text("x"), "structuredContent": {"vowels": 7}});
        assert_eq!(
            output_of("count", true, &sent).unwrap(),
            json!({"vowels": 7})
        );
        let missing = output_of("count", true, &json!({"content": text("x")}));
        assert!(matches!(missing, Err(ToolError::Failed(m)) if m.contains("structuredContent")));
    }

    #[test]
    fn an_error_result_fails_with_its_text() {
        let sent =
            json!({"content": text("no such city"), "isError": true, "structuredContent": {}});
        let err = output_of("weather", false, &sent);
        assert!(matches!(err, Err(ToolError::Failed(m)) if m.contains("no such city")));
    }
}
