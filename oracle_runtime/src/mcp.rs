//! A synchronous Model Context Protocol client over stdio: a stand-in with the final API until
//! the client lands.

use std::path::PathBuf;

use serde_json::Value;

pub const MESSAGE_BYTES_MAX: u64 = 8 << 20;
pub const START_TIMEOUT_MS_DEFAULT: u64 = 10_000;

pub struct ServerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
}
pub struct ServerInfo {
    pub name: String,
    pub version: String,
    pub protocol_version: String,
}
pub struct ListedTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
}
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    #[error("timed out")]
    Timeout { what: String, timeout_ms: u64 },
    #[error("too large")]
    TooLarge { limit: u64 },
    #[error("rpc")]
    Rpc { code: i64, message: String },
    #[error("closed")]
    Closed,
}
pub struct Connection {
    info: ServerInfo,
}
impl Connection {
    pub fn start(_: &ServerCommand, _: u64, _: u64) -> Result<Connection, McpError> {
        Err(McpError::Closed)
    }
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }
    pub fn list_tools(&self, _: u64) -> Result<Vec<ListedTool>, McpError> {
        Err(McpError::Closed)
    }
    pub fn call(&self, _: &str, _: &Value, _: u64) -> Result<Value, McpError> {
        Err(McpError::Closed)
    }
}
