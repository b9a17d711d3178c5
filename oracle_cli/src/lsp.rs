//! `oracle lsp`: the language server for plans (`oracle_lsp`) on stdin and stdout. This side
//! gives it what only the host knows (`oracle_host::tools`, `oracle_host::plans`): the built-in
//! tools with their schemas, the tools a plan's `tools "DIR"` lines declare, and the sub-plans
//! it uses, read from disk as `oracle plan check` reads them, so the server reports exactly
//! what `plan check` would.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oracle_plan::{Catalogue, Sources};

use crate::exit::{self, CliError};

/// The most sets of tool directories whose catalogues are kept between keystrokes. Loading one
/// may start MCP servers, so it is done once per set, not per change; a plan names one or two,
/// so past this the cache is simply emptied.
const TOOL_DIR_SETS_CACHED_MAX: usize = 16;

struct CliContext {
    builtin: Catalogue,
    /// Catalogues with declared tools, by the directories they came from. Read again only
    /// when the server restarts.
    declared: RefCell<BTreeMap<Vec<PathBuf>, Catalogue>>,
}

impl oracle_lsp::Context for CliContext {
    fn catalogue(&self, path: Option<&Path>, src: &str) -> (Catalogue, Sources) {
        let Some(dir) = path.map(|p| p.parent().unwrap_or(Path::new("."))) else {
            return (self.builtin.clone(), Sources::new());
        };
        let sources = oracle_host::plans::sources(dir, src);
        let dirs: Vec<PathBuf> = oracle_plan::tools_of(src)
            .into_iter()
            .map(|d| dir.join(d))
            .collect();
        if dirs.is_empty() {
            return (self.builtin.clone(), sources);
        }
        let mut cache = self.declared.borrow_mut();
        if let Some(c) = cache.get(&dirs) {
            return (c.clone(), sources);
        }
        // A directory that does not load leaves the built-in tools: `plan check` names the
        // problem, and the unknown tools show as E0205 here.
        let catalogue =
            oracle_host::tools::catalogue(&dirs, true).unwrap_or_else(|_| self.builtin.clone());
        if cache.len() >= TOOL_DIR_SETS_CACHED_MAX {
            cache.clear();
        }
        cache.insert(dirs, catalogue.clone());
        (catalogue, sources)
    }
}

pub fn run() -> Result<u8, CliError> {
    let context = CliContext {
        builtin: oracle_host::tools::catalogue(&[], true).unwrap_or_default(),
        declared: RefCell::new(BTreeMap::new()),
    };
    match oracle_lsp::run_stdio(&context) {
        Ok(()) => Ok(exit::OK),
        Err(e) => Err(CliError {
            // A message refused (longer than lsp_message_bytes_max, malformed): what was given
            // is refused, exit 2; anything else ends the session badly, exit 1.
            code: match e {
                oracle_lsp::LspError::Refused(_) => exit::INPUT,
                _ => exit::FAILED,
            },
            message: format!("lsp: {e}"),
            json: None,
            quiet: false,
        }),
    }
}
