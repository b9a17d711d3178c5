//! The protocol loop: open documents (full text sync), diagnostics published on open and on
//! every change, and the hover, definition and completion requests answered from
//! `analysis`. One thread: each message is handled before the next is read.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lsp_server::{Connection, ErrorCode, Message, Notification, Request, RequestId, Response};
use lsp_types::{
    CompletionItem, CompletionItemKind, CompletionOptions, CompletionResponse, Diagnostic,
    DiagnosticRelatedInformation, DiagnosticSeverity, GotoDefinitionResponse, Hover, HoverContents,
    HoverProviderCapability, Location, MarkupContent, MarkupKind, MessageType, NumberOrString,
    OneOf, ServerCapabilities, ShowMessageParams, TextDocumentPositionParams,
    TextDocumentSyncCapability, TextDocumentSyncKind, Uri,
};
use serde_json::Value;

use crate::analysis::{self, Analysis, Kind};
use crate::text::LineIndex;
use crate::{Context, DOCUMENTS_MAX};

/// What the server can do, sent in answer to `initialize`.
pub fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        definition_provider: Some(OneOf::Left(true)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![".".to_owned(), "{".to_owned(), ",".to_owned()]),
            ..CompletionOptions::default()
        }),
        ..ServerCapabilities::default()
    }
}

/// An open document: its text (empty when over the size limit) and its analysis.
struct Document {
    uri: Uri,
    text: String,
    lines: LineIndex,
    analysis: Analysis,
}

impl Document {
    fn new(uri: Uri, text: String) -> Document {
        let text = if too_large(&text) {
            String::new()
        } else {
            text
        };
        Document {
            lines: LineIndex::new(&text),
            analysis: Analysis::new(&text),
            uri,
            text,
        }
    }
}

fn too_large(text: &str) -> bool {
    u64::try_from(text.len()).map_or(true, |n| n > oracle_plan::PLAN_BYTES_MAX)
}

/// The server's state between messages.
pub struct Server<'a> {
    conn: &'a Connection,
    context: &'a dyn Context,
    /// By URI text (a `BTreeMap`: the workspace keeps no hashed containers).
    docs: BTreeMap<String, Document>,
}

impl<'a> Server<'a> {
    pub fn new(conn: &'a Connection, context: &'a dyn Context) -> Server<'a> {
        Server {
            conn,
            context,
            docs: BTreeMap::new(),
        }
    }

    /// Handles messages until `shutdown` and `exit` (Ok), or `exit` without `shutdown` or a
    /// closed connection (Err, so the process exits 1 as the protocol asks).
    pub fn run(&mut self) -> Result<(), crate::LspError> {
        while let Ok(msg) = self.conn.receiver.recv() {
            match msg {
                Message::Request(req) => {
                    if self.conn.handle_shutdown(&req)? {
                        return Ok(());
                    }
                    let resp = self.request(req);
                    self.send(resp.into());
                }
                Message::Notification(n) if n.method == "exit" => {
                    return Err(crate::LspError::ExitWithoutShutdown);
                }
                Message::Notification(n) => self.notification(n),
                Message::Response(_) => {}
            }
        }
        Err(crate::LspError::Closed)
    }

    fn send(&self, msg: Message) {
        // The writer thread is gone only when the client is: the loop then ends on its own.
        let _ = self.conn.sender.send(msg);
    }

    fn notification(&mut self, n: Notification) {
        let params = n.params;
        match n.method.as_str() {
            "textDocument/didOpen" => {
                let p: Option<lsp_types::DidOpenTextDocumentParams> = parse(params);
                if let Some(p) = p {
                    self.open(p.text_document.uri, p.text_document.text);
                }
            }
            "textDocument/didChange" => {
                let p: Option<lsp_types::DidChangeTextDocumentParams> = parse(params);
                // Full sync: the last change holds the whole text.
                if let Some(mut p) = p
                    && let Some(change) = p.content_changes.pop()
                    && self.docs.contains_key(p.text_document.uri.as_str())
                {
                    self.open(p.text_document.uri, change.text);
                }
            }
            "textDocument/didClose" => {
                let p: Option<lsp_types::DidCloseTextDocumentParams> = parse(params);
                if let Some(p) = p {
                    self.docs.remove(p.text_document.uri.as_str());
                    self.publish(&p.text_document.uri, Vec::new());
                }
            }
            _ => {}
        }
    }

    /// Keeps the document's new text and publishes its diagnostics.
    fn open(&mut self, uri: Uri, text: String) {
        let key = uri.as_str().to_owned();
        if !self.docs.contains_key(&key) && self.docs.len() >= DOCUMENTS_MAX {
            let message = format!(
                "oracle lsp: more than documents_max = {DOCUMENTS_MAX} plans open; {} is not checked (close another)",
                uri.as_str()
            );
            let params = ShowMessageParams {
                typ: MessageType::WARNING,
                message,
            };
            self.send(Notification::new("window/showMessage".to_owned(), params).into());
            return;
        }
        let large = too_large(&text);
        let doc = Document::new(uri.clone(), text);
        let diags = if large {
            vec![too_large_diagnostic()]
        } else {
            self.diagnostics(&doc)
        };
        self.docs.insert(key, doc);
        self.publish(&uri, diags);
    }

    fn diagnostics(&self, doc: &Document) -> Vec<Diagnostic> {
        let (catalogue, sources) = self
            .context
            .catalogue(file_path(&doc.uri).as_deref(), &doc.text);
        // At most DIAGNOSTICS_MAX, then one counting the rest: a document full of mistakes
        // costs one bounded message per change.
        let all = analysis::diagnostics(&doc.text, &catalogue, &sources);
        oracle_plan::diagnostic::capped(&all)
            .iter()
            .map(|d| to_lsp(doc, d))
            .collect()
    }

    fn publish(&self, uri: &Uri, diagnostics: Vec<Diagnostic>) {
        let params = lsp_types::PublishDiagnosticsParams {
            uri: uri.clone(),
            diagnostics,
            version: None,
        };
        let n = Notification::new("textDocument/publishDiagnostics".to_owned(), params);
        self.send(n.into());
    }

    fn request(&self, req: Request) -> Response {
        let id = req.id.clone();
        let result = match req.method.as_str() {
            "textDocument/hover" => self.at(req.params, |doc, off| self.hover(doc, off)),
            "textDocument/definition" => self.at(req.params, definition),
            "textDocument/completion" => self.at(req.params, |doc, off| self.completion(doc, off)),
            _ => return error(id, ErrorCode::MethodNotFound, "unknown method"),
        };
        match result {
            Some(v) => Response::new_ok(id, v),
            None => error(
                id,
                ErrorCode::InvalidParams,
                "expected a document and a position",
            ),
        }
    }

    /// Runs `f` on the document and byte offset a position request names; `Value::Null` when
    /// the document is not open, `None` when the parameters are not a position.
    fn at(&self, params: Value, f: impl Fn(&Document, usize) -> Value) -> Option<Value> {
        let p: TextDocumentPositionParams = parse(params)?;
        let Some(doc) = self.docs.get(p.text_document.uri.as_str()) else {
            return Some(Value::Null);
        };
        let offset = doc.lines.offset(&doc.text, p.position);
        Some(f(doc, offset))
    }

    fn hover(&self, doc: &Document, offset: usize) -> Value {
        let (catalogue, _) = self
            .context
            .catalogue(file_path(&doc.uri).as_deref(), &doc.text);
        let Some((span, text)) = analysis::hover(&doc.analysis, &catalogue, offset) else {
            return Value::Null;
        };
        let hover = Hover {
            contents: HoverContents::Markup(MarkupContent {
                kind: MarkupKind::Markdown,
                value: text,
            }),
            range: Some(doc.lines.range(&doc.text, span)),
        };
        serde_json::to_value(hover).unwrap_or(Value::Null)
    }

    fn completion(&self, doc: &Document, offset: usize) -> Value {
        let (catalogue, _) = self
            .context
            .catalogue(file_path(&doc.uri).as_deref(), &doc.text);
        let items: Vec<CompletionItem> =
            analysis::completion(&doc.analysis, &catalogue, &doc.text, offset)
                .into_iter()
                .map(|c| CompletionItem {
                    label: c.label,
                    kind: Some(match c.kind {
                        Kind::Tool => CompletionItemKind::FUNCTION,
                        Kind::Argument => CompletionItemKind::PROPERTY,
                        Kind::Field => CompletionItemKind::FIELD,
                        Kind::Name => CompletionItemKind::VARIABLE,
                    }),
                    detail: Some(c.detail),
                    ..CompletionItem::default()
                })
                .collect();
        serde_json::to_value(CompletionResponse::Array(items)).unwrap_or(Value::Null)
    }
}

fn definition(doc: &Document, offset: usize) -> Value {
    let Some(span) = analysis::definition(&doc.analysis, offset) else {
        return Value::Null;
    };
    let location = Location::new(doc.uri.clone(), doc.lines.range(&doc.text, span));
    serde_json::to_value(GotoDefinitionResponse::Scalar(location)).unwrap_or(Value::Null)
}

fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Option<T> {
    serde_json::from_value(params).ok()
}

fn error(id: RequestId, code: ErrorCode, message: &str) -> Response {
    Response::new_err(id, code as i32, message.to_owned())
}

/// A plan diagnostic as the protocol spells it: the same code and message as `oracle plan
/// check`, the hint after it, the related places as related information.
fn to_lsp(doc: &Document, d: &oracle_plan::Diagnostic) -> Diagnostic {
    let mut message = d.message.clone();
    if let Some(h) = &d.hint {
        message.push_str("\nhelp: ");
        message.push_str(h);
    }
    let related: Vec<DiagnosticRelatedInformation> = d
        .related
        .iter()
        .map(|(span, label)| DiagnosticRelatedInformation {
            location: Location::new(doc.uri.clone(), doc.lines.range(&doc.text, *span)),
            message: label.clone(),
        })
        .collect();
    Diagnostic {
        range: doc.lines.range(&doc.text, d.span),
        severity: Some(match d.severity {
            oracle_plan::Severity::Error => DiagnosticSeverity::ERROR,
            oracle_plan::Severity::Warning => DiagnosticSeverity::WARNING,
        }),
        code: Some(NumberOrString::String(d.code.to_owned())),
        source: Some("oracle".to_owned()),
        message,
        related_information: (!related.is_empty()).then_some(related),
        ..Diagnostic::default()
    }
}

/// The one diagnostic of a document over `PLAN_BYTES_MAX` (what `plan check` refuses too).
fn too_large_diagnostic() -> Diagnostic {
    Diagnostic {
        severity: Some(DiagnosticSeverity::ERROR),
        code: Some(NumberOrString::String("E0216".to_owned())),
        source: Some("oracle".to_owned()),
        message: format!(
            "the plan is larger than plan_bytes_max = {} bytes: it is not checked",
            oracle_plan::PLAN_BYTES_MAX
        ),
        ..Diagnostic::default()
    }
}

/// The local path of a `file:` URI (percent-escapes decoded), for the plan's directory.
pub fn file_path(uri: &Uri) -> Option<PathBuf> {
    let rest = uri.as_str().strip_prefix("file://")?;
    let path = rest.get(rest.find('/')?..)?;
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok().map(PathBuf::from)
}
