//! `oracle lsp`: a language server for plans, a front end over `oracle_plan` (no run, no
//! store, no runtime). Diagnostics as you type (the codes and messages of `oracle plan check`),
//! hover (a tool's signature, capability and schemas; a step's tool), go to definition of a
//! step, input or loop variable, and completion of tool names, argument names and a step's
//! output fields. Over stdio, with rust-analyzer's synchronous `lsp-server`.
//!
//! What only the runtime knows (the tool catalogue, with declared tools, and the sub-plans a
//! plan uses, read from disk) comes from the caller through [`Context`], so the server depends
//! on nothing that touches the world.

pub mod analysis;
pub mod server;
pub mod symbols;
pub mod text;
pub mod transport;

use std::path::Path;

use lsp_server::Connection;
use oracle_plan::{Catalogue, Sources};

/// The most documents the server keeps open at once. Each may hold up to `PLAN_BYTES_MAX`
/// (32 MiB) of text and its tree, so this bounds the server's memory near a gigabyte even
/// against a client that opens every file it sees; editors open a handful of plans. Past it a
/// new document is not checked, and the client is told so (`window/showMessage`).
pub const DOCUMENTS_MAX: usize = 32;

/// What the server needs from outside for one plan: the catalogue to check it against and the
/// text of the sub-plans it uses. `path` is the plan's file, when its URI is a local file.
pub trait Context {
    fn catalogue(&self, path: Option<&Path>, src: &str) -> (Catalogue, Sources);
}

/// Why serving a client ended badly (`oracle lsp` then exits 1, as the protocol asks).
#[derive(Debug, thiserror::Error)]
pub enum LspError {
    #[error(transparent)]
    Capabilities(#[from] serde_json::Error),
    #[error(transparent)]
    Protocol(#[from] lsp_server::ProtocolError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("exit without shutdown")]
    ExitWithoutShutdown,
    #[error("the client closed the connection without exit")]
    Closed,
    /// A message that could not be taken (too long, malformed): answered with an error, then
    /// the connection closed (`oracle lsp` exits 2).
    #[error("{0}")]
    Refused(#[from] transport::Refused),
}

/// Serves one client over `conn` until it asks to shut down and exit (Ok) or goes away (Err).
pub fn serve(conn: &Connection, context: &dyn Context) -> Result<(), LspError> {
    let caps = serde_json::to_value(server::capabilities())?;
    conn.initialize(caps)?;
    server::Server::new(conn, context).run()
}

/// Serves the client on stdin and stdout (`oracle lsp`), framed by [`transport`] (within
/// `LSP_MESSAGE_BYTES_MAX`).
pub fn run_stdio(context: &dyn Context) -> Result<(), LspError> {
    let (conn, io) = transport::stdio();
    let served = serve(&conn, context);
    // The writer thread ends when the connection's sender is dropped.
    drop(conn);
    match io.join() {
        // A refused message is why serving ended (the reader stopped, so the server saw the
        // connection close).
        Err(refused @ LspError::Refused(_)) => Err(refused),
        joined => served.and(joined),
    }
}
