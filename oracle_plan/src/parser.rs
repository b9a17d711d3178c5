//! Parser for the plan language: tokens to an [`ast::Plan`](crate::ast::Plan), reporting every
//! syntax error it can in one pass. After an error it resumes at the next statement boundary (a
//! line starting with `grant`, `input`, `plan` or `NAME =`), so independent mistakes each get
//! their own diagnostic; mistakes with an obvious reading (`=` for `==`, a missing comma, a
//! keyword as a name, a duplicate clause) are reported and parsing carries straight on.
//!
//! Concrete syntax decided here, beyond the grammar in docs/PLAN.md:
//! - Newlines separate nothing (a capability must share its `grant` line, see `lexer.rs`). They
//!   matter only for recovery and messages: a word at the start of a line followed by `=` starts
//!   a new statement, so it is never taken as a missing name, tool or operand of the statement
//!   before it (except as an input's type, where `int = 5` is the type and its default).
//! - After `.` in a reference and as a bare map key any word is accepted, reserved or not
//!   (`read.version`, `{ input: 1 }`): JSON outputs have such fields and nothing is ambiguous
//!   there. Tool name parts after the first `.` are likewise any word.
//! - An index may be negative (`xs[-1]`), because `Segment::Index` holds an `i64`; what a negative
//!   index means is the evaluator's business.
//! - Postfix `.field` and `[index]` apply to names only, parenthesised or not (the AST has no
//!   other place for them).
//! - Expressions nest at most [`MAX_NESTING`] levels, counting both the depth of the tree and
//!   nested brackets, so neither the parser nor later tree walks can exhaust the stack.
//!
//! Diagnostic codes (lexical and syntax errors are E01xx):
// E0100  the source is larger than 4 GiB (spans are u32 byte offsets)
// E0101  unexpected character (`@`, `&&`, `!`, a single-quoted string...)
// E0102  unterminated string (strings end on their line)
// E0103  invalid escape in a string (`\q`, malformed or invalid `\u{...}`)
// E0104  integer or duration too large (a literal in an expression or index must fit i64)
// E0105  floating-point literal (`1.5`, `1e5`): plans have no floats
// E0106  unknown suffix after a number (`10m`): durations end in `ms` or `s`
// E0107  a character that cannot appear in an unquoted capability
// E0108  more than tokens_max tokens (lexer.rs: TOKENS_MAX); nothing is parsed
// E0110  unexpected token: expected one thing, found another (the catch-all syntax error)
// E0111  the file does not start with the header `plan NAME version N`
// E0112  a keyword used as a name (plan, input, step, argument or `after` target)
// E0113  unknown input type (not string, int, bool, list, map or json)
// E0114  a clause given twice on one step
// E0115  chained comparison (`a < b < c`): comparisons do not associate
// E0116  `=` where `==` was meant, in an expression
// E0117  expression nested more than 64 levels deep
// E0118  missing comma between arguments, list items, map entries or `after` names
// E0119  unknown failure policy (not stop, continue or yield)
// E0120  a timeout without a unit (`timeout 30`)
// E0121  `.field` or `[index]` after something that is not a name
// E0122  a second header, or the header after other items

use std::collections::BTreeMap;

use crate::ast::{
    Arg, BinaryOp, Body, Call, Expr, ExprKind, FailurePolicy, Ident, Input, InputType, LoopKind,
    MemoryStore, Path, Plan, Segment, Span, Spanned, Step, UnaryOp, Use,
};
use crate::diagnostic::{Diagnostic, Severity, closest};
use crate::lexer::{self, Keyword, Token, TokenKind};

/// The deepest expression accepted: tree depth and bracket nesting are both capped.
pub const MAX_NESTING: u32 = 64;

/// Parses a plan. Returns the plan whenever its header parsed, with every statement that parsed
/// (a statement with a syntax error it could not read past is left out), and every diagnostic
/// sorted by position. A plan returned alongside errors is for further checking only: callers
/// must not run it. Never panics.
pub fn parse(src: &str) -> (Option<Plan>, Vec<Diagnostic>) {
    if u32::try_from(src.len()).is_err() {
        let d = Diagnostic::error(
            "E0100",
            Span::new(0, 0),
            "the plan is larger than 4 GiB",
            "plan too large",
        );
        return (None, vec![d]);
    }
    let (tokens, mut diags) = lexer::lex(src);
    if diags.iter().any(|d| d.code == "E0108") {
        // Over `tokens_max`: the lexer stopped part way, so parsing would only report the cut.
        return (None, diags);
    }
    let mut p = Parser::new(src, tokens);
    let plan = p.plan();
    diags.append(&mut p.diags);
    // Stable, so diagnostics at one place keep the order they were found in.
    diags.sort_by_key(|d| (d.span.start, d.span.end));
    (plan, diags)
}

/// Whether `diags` holds an error (a plan parsed alongside one must not run).
pub fn has_errors(diags: &[Diagnostic]) -> bool {
    diags.iter().any(|d| d.severity == Severity::Error)
}

/// A diagnostic has been recorded; the statement is abandoned and parsing resumes at the next
/// statement boundary.
struct Fail;

type PResult<T> = Result<T, Fail>;

/// An expression with its tree height, tracked so deep trees are refused without re-walking.
struct Ex {
    e: Expr,
    h: u32,
}

/// The text a word, string or capability token carries (empty for other tokens).
fn into_text(kind: TokenKind) -> String {
    match kind {
        TokenKind::Ident(w) | TokenKind::Str(w) | TokenKind::Capability(w) => w,
        TokenKind::Keyword(k) => k.as_str().to_owned(),
        _ => String::new(),
    }
}

fn leaf(kind: ExprKind, span: Span) -> Ex {
    Ex {
        e: Expr { kind, span },
        h: 1,
    }
}

const CLAUSES: [&str; 8] = [
    "after", "when", "expect", "attempts", "retry", "fallback", "on", "timeout",
];

/// The clause word for the per-tier attempt count (`retry` is accepted as the same clause).
const ATTEMPTS: &str = "attempts";
/// The clause word declaring a step the compensation of another (`undo STEP`).
const UNDO: &str = "undo";
const POLICIES: [&str; 3] = ["stop", "continue", "yield"];

struct Header {
    name: Ident,
    version: Spanned<u64>,
    span: Span,
}

struct Parser<'s> {
    src: &'s str,
    toks: Vec<Token>,
    pos: usize,
    eof: Token,
    diags: Vec<Diagnostic>,
    /// Current bracket/prefix nesting of the expression being parsed.
    depth: u32,
    /// End of the last consumed token, for "found end of line" positions.
    prev_end: u32,
    /// Span of the last consumed token, for "after `when`" in messages.
    prev_span: Span,
    /// Whether the last consumed token was an unterminated string.
    prev_unterminated: bool,
}

impl<'s> Parser<'s> {
    fn new(src: &'s str, toks: Vec<Token>) -> Parser<'s> {
        let end = u32::try_from(src.len()).unwrap_or(u32::MAX);
        let eof = toks.last().cloned().unwrap_or(Token {
            kind: TokenKind::Eof,
            span: Span::new(end, end),
            line_start: true,
            lex_error: false,
            unterminated: false,
        });
        Parser {
            src,
            toks,
            pos: 0,
            eof,
            diags: Vec::new(),
            depth: 0,
            prev_end: 0,
            prev_span: Span::default(),
            prev_unterminated: false,
        }
    }

    // ----- token access -----

    fn tok(&self) -> &Token {
        self.toks.get(self.pos).unwrap_or(&self.eof)
    }

    fn kind(&self) -> &TokenKind {
        &self.tok().kind
    }

    fn kind_at(&self, n: usize) -> &TokenKind {
        self.toks
            .get(self.pos.saturating_add(n))
            .map_or(&self.eof.kind, |t| &t.kind)
    }

    fn at(&self, k: &TokenKind) -> bool {
        self.kind() == k
    }

    fn at_kw(&self, k: Keyword) -> bool {
        *self.kind() == TokenKind::Keyword(k)
    }

    /// Consumes the current token and hands it over (never moves past the end). Consumed tokens
    /// are moved out rather than cloned: nothing looks back at them.
    fn bump(&mut self) -> Token {
        let Some(slot) = self.toks.get_mut(self.pos) else {
            return self.eof.clone();
        };
        if slot.kind == TokenKind::Eof {
            return slot.clone();
        }
        let placeholder = Token {
            kind: TokenKind::Eof,
            ..*slot
        };
        let t = std::mem::replace(slot, placeholder);
        self.pos += 1;
        self.prev_end = t.span.end;
        self.prev_span = t.span;
        self.prev_unterminated = t.unterminated;
        t
    }

    /// Whether the current token is a word (identifier or keyword).
    fn at_word(&self) -> bool {
        matches!(self.kind(), TokenKind::Ident(_) | TokenKind::Keyword(_))
    }

    fn text(&self, span: Span) -> &str {
        self.src
            .get(span.start as usize..span.end as usize)
            .unwrap_or("")
    }

    /// The token as quoted in a message: its source text, shortened.
    fn describe(&self, t: &Token) -> String {
        if t.kind == TokenKind::Eof {
            return "end of file".to_owned();
        }
        let text = self.text(t.span);
        let mut shown: String = text.chars().take(24).collect();
        if shown.len() < text.len() {
            shown.push('…');
        }
        format!("`{shown}`")
    }

    /// Where the current token is and how to name it in "found ..." when it was expected to
    /// continue the current line: a token on a later line means the line ended too early.
    fn found(&self) -> (Span, String, bool) {
        let t = self.tok();
        if t.line_start && self.pos > 0 {
            let what = if t.kind == TokenKind::Eof {
                "end of file"
            } else {
                "end of line"
            };
            return (
                Span::new(self.prev_end, self.prev_end),
                what.to_owned(),
                false,
            );
        }
        (t.span, self.describe(t), t.lex_error)
    }

    fn prev_text(&self) -> String {
        let text: String = self.text(self.prev_span).chars().take(24).collect();
        format!("`{text}`")
    }

    /// Whether token `i` starts a statement: the recovery point after an error.
    fn is_boundary(&self, i: usize) -> bool {
        let Some(t) = self.toks.get(i) else {
            return true;
        };
        match &t.kind {
            TokenKind::Eof => true,
            _ if !t.line_start => false,
            TokenKind::Keyword(Keyword::Grant | Keyword::Input) => true,
            // `plan:` on a line of its own is a `spawn` step's argument, not a header.
            TokenKind::Keyword(Keyword::Plan) => !matches!(
                self.toks.get(i + 1).map(|t| &t.kind),
                Some(TokenKind::Colon)
            ),
            TokenKind::Ident(w) if w == "memory" => matches!(
                self.toks.get(i + 1).map(|t| &t.kind),
                Some(TokenKind::Str(_) | TokenKind::Keyword(Keyword::Input))
            ),
            TokenKind::Ident(w) if w == "use" || w == "tools" || w == "queue" => {
                matches!(
                    self.toks.get(i + 1).map(|t| &t.kind),
                    Some(TokenKind::Str(_))
                )
            }
            TokenKind::Ident(_) | TokenKind::Keyword(_) => {
                matches!(
                    self.toks.get(i + 1).map(|t| &t.kind),
                    Some(TokenKind::Assign)
                )
            }
            _ => false,
        }
    }

    /// Skips to the next statement boundary, always moving at least one token past `start`.
    fn sync(&mut self, start: usize) {
        if self.pos == start {
            self.bump();
        }
        while !self.is_boundary(self.pos) {
            self.bump();
        }
    }

    // ----- diagnostics -----

    fn report(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Reports "expected WHAT CONTEXT, found ..." at the current token, unless the lexer already
    /// reported the token (or an unterminated string just before it) and this is only an echo.
    fn expected(
        &mut self,
        code: &'static str,
        what: &str,
        context: &str,
        hint: Option<&str>,
    ) -> Fail {
        let (span, found, lex_error) = self.found();
        if lex_error || self.prev_unterminated {
            return Fail;
        }
        let sep = if context.is_empty() { "" } else { " " };
        let mut d = Diagnostic::error(
            code,
            span,
            format!("expected {what}{sep}{context}, found {found}"),
            format!("expected {what}"),
        );
        if let Some(h) = hint {
            d = d.with_hint(h);
        }
        self.report(d);
        Fail
    }

    fn keyword_as_name(&mut self, t: &Token, what: &str) {
        let word = self.text(t.span).to_owned();
        self.report(
            Diagnostic::error(
                "E0112",
                t.span,
                format!("`{word}` is a keyword and cannot name {what}"),
                "keyword used as a name",
            )
            .with_hint(format!("pick another name, such as `{word}_1`")),
        );
    }

    // ----- statements -----

    fn plan(&mut self) -> Option<Plan> {
        let mut header: Option<Header> = None;
        if self.at_kw(Keyword::Plan) {
            let start = self.pos;
            match self.header() {
                Ok(h) => header = Some(h),
                Err(Fail) => self.sync(start),
            }
        } else {
            let t = self.tok().clone();
            if !t.lex_error {
                let found = self.describe(&t);
                self.report(
                    Diagnostic::error(
                        "E0111",
                        t.span,
                        format!("expected the header `plan NAME version N` first, found {found}"),
                        "expected `plan`",
                    )
                    .with_hint(
                        "start the file with a header line such as `plan summarise version 1`",
                    ),
                );
            }
            if !self.is_boundary(self.pos) {
                self.sync(self.pos);
            }
        }

        let mut grants = Vec::new();
        let mut inputs = Vec::new();
        let mut uses = Vec::new();
        let mut tools = Vec::new();
        let mut memory = None;
        let mut queue = None;
        let mut steps = Vec::new();
        let mut after_step = false;
        loop {
            let start = self.pos;
            let is_step = self.at_word() && *self.kind_at(1) == TokenKind::Assign;
            let result = match self.kind() {
                TokenKind::Eof => break,
                _ if is_step => self.step().map(|s| steps.push(s)),
                TokenKind::Ident(w)
                    if w == "use" && matches!(self.kind_at(1), TokenKind::Str(_)) =>
                {
                    self.use_item().map(|u| uses.push(u))
                }
                TokenKind::Ident(w)
                    if w == "tools" && matches!(self.kind_at(1), TokenKind::Str(_)) =>
                {
                    self.bump(); // `tools`
                    let t = self.bump();
                    tools.push(Spanned::new(into_text(t.kind), t.span));
                    Ok(())
                }
                TokenKind::Ident(w) if w == "memory" && self.names_a_store() => {
                    self.memory_line(&mut memory)
                }
                TokenKind::Ident(w) if w == "queue" => self.queue_line(&mut queue),
                TokenKind::Keyword(Keyword::Grant) => self.grant().map(|g| grants.push(g)),
                TokenKind::Keyword(Keyword::Input) => self.input().map(|i| inputs.push(i)),
                TokenKind::Keyword(Keyword::Plan) => self.misplaced_header(header.as_ref()),
                _ => {
                    self.unexpected_item(after_step);
                    Err(Fail)
                }
            };
            after_step = is_step && result.is_ok();
            if result.is_err() {
                self.sync(start);
            }
        }
        let h = header?;
        Some(Plan {
            name: h.name,
            version: h.version,
            grants,
            inputs,
            uses,
            tools,
            memory,
            queue,
            steps,
        })
    }

    /// `queue "NAME"` (the caller has seen `queue`, not a step's name): the name must be a
    /// string (E0125), and a second line is E0124, since a run waits in one queue.
    fn queue_line(&mut self, slot: &mut Option<Spanned<String>>) -> PResult<()> {
        let start = self.bump().span; // `queue`
        if !matches!(self.kind(), TokenKind::Str(_)) {
            let d = Diagnostic::error(
                "E0125",
                Span::new(start.start, self.tok().span.end),
                "`queue` without a queue's name",
                "a `queue` line names the queue as a string",
            )
            .with_hint("write `queue \"nightly\"`");
            self.diags.push(d);
            return Err(Fail);
        }
        let t = self.bump();
        let name = Spanned::new(into_text(t.kind), t.span);
        if slot.is_some() {
            let d = Diagnostic::error(
                "E0124",
                Span::new(start.start, name.span.end),
                "a second `queue` line",
                "a run waits in one queue",
            );
            self.diags.push(d);
            return Err(Fail);
        }
        *slot = Some(name);
        Ok(())
    }

    /// Whether the `memory` here names a store (a string or `input` follows it), and so is a
    /// `memory` line rather than a misplaced word.
    fn names_a_store(&self) -> bool {
        matches!(
            self.kind_at(1),
            TokenKind::Str(_) | TokenKind::Keyword(Keyword::Input)
        )
    }

    /// `memory "NAME"` or `memory input.NAME` (the caller has seen `memory` and a string or
    /// `input`); a second line is E0123, since a run's memory attaches to one store.
    fn memory_line(&mut self, slot: &mut Option<Spanned<MemoryStore>>) -> PResult<()> {
        let start = self.bump().span; // `memory`
        let t = self.bump();
        let store = match t.kind {
            TokenKind::Str(s) => Spanned::new(MemoryStore::Named(s), t.span),
            _ => {
                if !self.at(&TokenKind::Dot) {
                    let hint = "name the input: `memory input.user`";
                    return Err(self.expected("E0110", "`.`", "after `input`", Some(hint)));
                }
                self.bump();
                let name = self.name("an input", "the input name", "after `input.`", |_| true)?;
                let span = Span::new(t.span.start, name.span.end);
                Spanned::new(MemoryStore::Input(name.node), span)
            }
        };
        if slot.is_some() {
            let d = Diagnostic::error(
                "E0123",
                Span::new(start.start, store.span.end),
                "a second `memory` line",
                "a plan's memory attaches to one store",
            );
            self.diags.push(d);
            return Err(Fail);
        }
        *slot = Some(store);
        Ok(())
    }

    /// `use "PATH" as NAME` (the caller has seen `use` and a string).
    fn use_item(&mut self) -> PResult<Use> {
        self.bump(); // `use`
        let t = self.bump();
        let path = Spanned::new(into_text(t.kind), t.span);
        if !matches!(self.kind(), TokenKind::Ident(w) if w == "as") {
            let hint = "a sub-plan is named: `use \"plans/other.plan\" as other`";
            return Err(self.expected(
                "E0110",
                "`as NAME`",
                "after the sub-plan's path",
                Some(hint),
            ));
        }
        self.bump();
        let name = self.tok().clone();
        let TokenKind::Ident(alias) = name.kind else {
            return Err(self.expected("E0110", "a name", "after `as`", None));
        };
        self.bump();
        Ok(Use {
            path,
            alias: Spanned::new(alias, name.span),
        })
    }

    /// `plan NAME version N`
    fn header(&mut self) -> PResult<Header> {
        let kw = self.bump();
        let name_tok = self.tok().clone();
        let name = match &name_tok.kind {
            TokenKind::Ident(w) => {
                self.bump();
                Spanned::new(w.clone(), name_tok.span)
            }
            TokenKind::Keyword(k)
                if *k != Keyword::Version
                    && !name_tok.line_start
                    && *self.kind_at(1) == TokenKind::Keyword(Keyword::Version) =>
            {
                self.keyword_as_name(&name_tok, "a plan");
                self.bump();
                Spanned::new(k.as_str().to_owned(), name_tok.span)
            }
            _ => {
                let hint = "the header is `plan NAME version N`";
                return Err(self.expected("E0110", "the plan name", "after `plan`", Some(hint)));
            }
        };
        if !self.at_kw(Keyword::Version) {
            let hint = "the header is `plan NAME version N`";
            return Err(self.expected("E0110", "`version`", "after the plan name", Some(hint)));
        }
        self.bump();
        let t = self.tok().clone();
        let TokenKind::Int(v) = t.kind else {
            let hint = "the version is a whole number, such as `version 1`";
            return Err(self.expected("E0110", "a version number", "after `version`", Some(hint)));
        };
        self.bump();
        Ok(Header {
            name,
            version: Spanned::new(v, t.span),
            span: kw.span.to(t.span),
        })
    }

    /// A `plan` line after the first item: reported, then read so recovery starts after it.
    fn misplaced_header(&mut self, first: Option<&Header>) -> PResult<()> {
        let t = self.tok().clone();
        let d = match first {
            Some(h) => Diagnostic::error(
                "E0122",
                t.span,
                "a plan has one header, and this is a second",
                "second header",
            )
            .with_related(h.span, "first header here")
            .with_hint("remove this line"),
            None => Diagnostic::error(
                "E0122",
                t.span,
                "the header must come before everything else",
                "header too late",
            )
            .with_hint("move this line to the top of the file"),
        };
        self.report(d);
        self.header().map(|_| ())
    }

    fn unexpected_item(&mut self, after_step: bool) {
        let t = self.tok().clone();
        if t.lex_error || self.prev_unterminated {
            return;
        }
        let expected = if after_step {
            "a clause, `grant`, `input` or a step `NAME = TOOL { ... }`"
        } else {
            "`grant`, `input` or a step `NAME = TOOL { ... }`"
        };
        let found = self.describe(&t);
        let mut d = Diagnostic::error(
            "E0110",
            t.span,
            format!("expected {expected}, found {found}"),
            "unexpected here",
        );
        let hint = match &t.kind {
            TokenKind::Ident(_) if *self.kind_at(1) == TokenKind::EqEq => {
                Some("a step is written `NAME = TOOL { ... }`, with a single `=`".to_owned())
            }
            TokenKind::Ident(_) if *self.kind_at(1) == TokenKind::Colon => {
                Some("an input is declared `input NAME: TYPE`".to_owned())
            }
            // Shorter words are too close to everything to suggest a keyword for.
            TokenKind::Ident(w) if w.len() >= 4 => {
                let candidates = CLAUSES.iter().chain(["grant", "input"].iter()).copied();
                closest(w, candidates).map(|c| format!("did you mean `{c}`?"))
            }
            TokenKind::Keyword(k) if k.starts_clause() => {
                Some("a clause goes right after its step, `NAME = TOOL { ... }`".to_owned())
            }
            _ => None,
        };
        if let Some(h) = hint {
            d = d.with_hint(h);
        }
        self.report(d);
    }

    /// `grant CAPABILITY`
    fn grant(&mut self) -> PResult<Spanned<String>> {
        self.bump();
        let t = self.tok().clone();
        match t.kind {
            TokenKind::Capability(s) | TokenKind::Str(s) => {
                self.bump();
                Ok(Spanned::new(s, t.span))
            }
            _ => {
                let hint = "write it on the `grant` line, such as `grant fs:read:data/**`";
                Err(self.expected(
                    "E0110",
                    "a capability `domain:action:scope`",
                    "after `grant`",
                    Some(hint),
                ))
            }
        }
    }

    /// `input NAME: TYPE [= DEFAULT]`
    fn input(&mut self) -> PResult<Input> {
        self.bump();
        let name = self.name("an input", "the input name", "after `input`", |k| {
            *k == TokenKind::Colon
        })?;
        if !self.at(&TokenKind::Colon) {
            let hint = "an input is declared `input NAME: TYPE`";
            return Err(self.expected("E0110", "`:`", "after the input name", Some(hint)));
        }
        self.bump();
        let t = self.tok().clone();
        let ty = match &t.kind {
            // No boundary check: `int` in `input n:` / `int = 5` (split over lines) is the type.
            TokenKind::Ident(w) => {
                self.bump();
                let ty = InputType::ALL
                    .into_iter()
                    .find(|ty| ty.as_str() == w.as_str());
                match ty {
                    Some(ty) => ty,
                    None => {
                        let mut d = Diagnostic::error(
                            "E0113",
                            t.span,
                            format!("unknown input type `{w}`"),
                            "unknown type",
                        );
                        let names = InputType::ALL.map(InputType::as_str);
                        d = d.with_hint(match closest(w, names) {
                            Some(c) => {
                                format!("did you mean `{c}`? The types are {}", names.join(", "))
                            }
                            None => format!("the types are {}", names.join(", ")),
                        });
                        self.report(d);
                        // Any value fits `json`, so checking goes on without more noise.
                        InputType::Json
                    }
                }
            }
            _ => {
                let hint = "the types are string, int, bool, list, map, json";
                return Err(self.expected("E0110", "a type", "after `:`", Some(hint)));
            }
        };
        let default = if self.at(&TokenKind::Assign) {
            self.bump();
            Some(self.expr()?.e)
        } else {
            None
        };
        Ok(Input {
            name,
            ty: Spanned::new(ty, t.span),
            default,
        })
    }

    /// A name that must not be a keyword. A keyword on the same line followed by what the grammar
    /// expects next (`follows`) is reported and accepted, since the intent is clear. A word that
    /// starts the next statement is not taken: the statement in hand ended too early.
    fn name(
        &mut self,
        what: &str,
        expected: &str,
        context: &str,
        follows: fn(&TokenKind) -> bool,
    ) -> PResult<Ident> {
        let placed = !self.is_boundary(self.pos);
        let t = self.tok();
        // `plan:` names a `spawn` step's child plan: the one keyword an argument may be named,
        // on a line of its own too (followed by `:`, it cannot start a plan's header).
        let plan_arg = what == "an argument" && t.kind == TokenKind::Keyword(Keyword::Plan);
        let ok = match t.kind {
            TokenKind::Ident(_) => placed,
            TokenKind::Keyword(_) => {
                placed && (plan_arg || !t.line_start) && follows(self.kind_at(1))
            }
            _ => false,
        };
        if !ok {
            return Err(self.expected("E0110", expected, context, None));
        }
        let t = self.bump();
        if matches!(t.kind, TokenKind::Keyword(_)) && !plan_arg {
            self.keyword_as_name(&t, what);
        }
        Ok(Spanned::new(into_text(t.kind), t.span))
    }

    /// `NAME = TOOL { ARGS } CLAUSE*` (the caller has seen `NAME =`).
    fn step(&mut self) -> PResult<Step> {
        let t = self.bump();
        if matches!(t.kind, TokenKind::Keyword(_)) {
            self.keyword_as_name(&t, "a step");
        }
        let name = Spanned::new(self.text(t.span).to_owned(), t.span);
        self.bump(); // `=`
        let is_ident = |k: &TokenKind, w: &str| matches!(k, TokenKind::Ident(x) if x == w);
        let looped = (is_ident(self.kind(), "for")
            && matches!(self.kind_at(1), TokenKind::Ident(_))
            && is_ident(self.kind_at(2), "in"))
            || (is_ident(self.kind(), "repeat") && *self.kind_at(1) == TokenKind::LBrace);
        let (call, body) = if looped {
            let start = self.tok().span;
            let body = self.body()?;
            let kind = body.kind.as_str().to_owned();
            let call = Call {
                tool: Spanned::new(kind, start),
                args: Vec::new(),
                span: start,
            };
            (call, Some(Box::new(body)))
        } else {
            (self.call("after `=`")?, None)
        };
        let mut step = Step {
            name,
            call,
            after: Vec::new(),
            when: None,
            expect: None,
            retry: None,
            retry_policy: None,
            undo: None,
            fallback: None,
            on_failure: None,
            timeout_ms: None,
            body,
            span: t.span,
        };
        let mut seen: BTreeMap<Keyword, Span> = BTreeMap::new();
        let mut undo_seen: Option<Span> = None;
        // The step ends at the first token that cannot start a clause.
        loop {
            let kw = match self.kind() {
                TokenKind::Keyword(kw) if kw.starts_clause() => *kw,
                // `attempts N`: the per-tier attempt count under its honest name. A contextual
                // word (like `stop`), so plans naming an input or argument `attempts` still
                // compile; `retry N` is the same clause.
                TokenKind::Ident(w)
                    if w == ATTEMPTS && matches!(self.kind_at(1), TokenKind::Int(_)) =>
                {
                    Keyword::Retry
                }
                // `undo STEP`: contextual too (a step may still be named `undo`).
                TokenKind::Ident(w)
                    if w == UNDO
                        && matches!(self.kind_at(1), TokenKind::Ident(_))
                        && *self.kind_at(2) != TokenKind::Assign =>
                {
                    let kw_tok = self.bump();
                    self.undo_clause(&mut step, kw_tok.span, &mut undo_seen)?;
                    continue;
                }
                _ => break,
            };
            let kw_tok = self.bump();
            // `on timeout` is a clause of its own beside `on failure`: kept apart under the
            // word `failure`, which starts no clause.
            let on_timeout = kw == Keyword::On && self.at_kw(Keyword::Timeout);
            let dup = self.clause_seen(&mut seen, kw, on_timeout, kw_tok.span);
            match kw {
                Keyword::After => {
                    let names = self.after_list()?;
                    if !dup {
                        step.after = names;
                    }
                }
                Keyword::When => {
                    let e = self.expr()?.e;
                    if !dup {
                        step.when = Some(e);
                    }
                }
                Keyword::Expect => {
                    let e = self.expr()?.e;
                    if !dup {
                        step.expect = Some(e);
                    }
                }
                Keyword::Retry if self.at(&TokenKind::LBrace) => {
                    // `retry { ... }`: a policy, read as a map literal the compiler checks.
                    let e = self.expr()?.e;
                    if !dup {
                        step.retry_policy = Some(e);
                    }
                }
                Keyword::Retry => {
                    let t = self.tok().clone();
                    let TokenKind::Int(n) = t.kind else {
                        let hint = (t.kind == TokenKind::Minus)
                            .then_some("an attempt count cannot be negative");
                        return Err(self.expected(
                            "E0110",
                            "a number of attempts",
                            "after `attempts` (or `retry`)",
                            hint,
                        ));
                    };
                    self.bump();
                    if !dup {
                        step.retry = Some(Spanned::new(n, t.span));
                    }
                }
                Keyword::Fallback => {
                    let call = self.call("after `fallback`")?;
                    if !dup {
                        step.fallback = Some(call);
                    }
                }
                Keyword::On if on_timeout => {
                    let arg = self.on_timeout()?;
                    if !dup && let Some(arg) = arg {
                        step.call.args.push(arg);
                    }
                }
                Keyword::On => {
                    let policy = self.policy()?;
                    if !dup {
                        step.on_failure = policy;
                    }
                }
                Keyword::Timeout => {
                    let ms = self.duration()?;
                    if !dup {
                        step.timeout_ms = ms;
                    }
                }
                _ => break,
            }
        }
        step.span = t.span.to(Span::new(self.prev_end, self.prev_end));
        Ok(step)
    }

    /// Whether clause `kw` (`on timeout` when `on_timeout`) was given before on this step
    /// (E0114: with a duplicate, the first clause wins; the second is still read for errors).
    fn clause_seen(
        &mut self,
        seen: &mut BTreeMap<Keyword, Span>,
        kw: Keyword,
        on_timeout: bool,
        at: Span,
    ) -> bool {
        let key = if on_timeout { Keyword::Failure } else { kw };
        let Some(first) = seen.get(&key).copied() else {
            seen.insert(key, at);
            return false;
        };
        let word = if kw == Keyword::Retry {
            "attempts"
        } else if on_timeout {
            "on timeout"
        } else {
            kw.as_str()
        };
        self.report(
            Diagnostic::error(
                "E0114",
                at,
                format!("duplicate `{word}` clause"),
                "given again here",
            )
            .with_related(first, format!("first `{word}` here"))
            .with_hint(format!(
                "a step has at most one `{word}` clause: remove one"
            )),
        );
        true
    }

    /// `STEP` after `undo` (the caller took the word): the step this one compensates.
    fn undo_clause(&mut self, step: &mut Step, at: Span, seen: &mut Option<Span>) -> PResult<()> {
        let target = self.name("a step", "a step name", "after `undo`", |_| true)?;
        match *seen {
            Some(first) => self.report(
                Diagnostic::error("E0114", at, "duplicate `undo` clause", "given again here")
                    .with_related(first, "first `undo` here")
                    .with_hint("a step undoes at most one step: remove one"),
            ),
            None => {
                *seen = Some(at);
                step.undo = Some(target);
            }
        }
        Ok(())
    }

    /// The names after `after`, comma separated.
    fn after_list(&mut self) -> PResult<Vec<Ident>> {
        let mut names = Vec::new();
        loop {
            let not_assign = |k: &TokenKind| *k != TokenKind::Assign;
            let context = format!("after {}", self.prev_text());
            names.push(self.name("a step", "a step name", &context, not_assign)?);
            if self.at(&TokenKind::Comma) {
                self.bump();
                continue;
            }
            let t = self.tok();
            let more = matches!(t.kind, TokenKind::Ident(_))
                && !t.line_start
                && *self.kind_at(1) != TokenKind::Assign;
            if !more {
                return Ok(names);
            }
            self.missing_comma("step names", "after a, b");
        }
    }

    /// `timeout (fail|EXPR)`, after `on`: what a `human.ask` with a `deadline` answers when
    /// the deadline passes first. `fail` (the default) adds nothing; a value becomes the call's
    /// `on_timeout` argument, so the clause is sugar the compiler checks like any argument.
    fn on_timeout(&mut self) -> PResult<Option<Arg>> {
        let kw = self.bump();
        if let TokenKind::Ident(w) = self.kind()
            && w == "fail"
        {
            self.bump();
            return Ok(None);
        }
        let value = self.expr()?.e;
        Ok(Some(Arg {
            name: Spanned::new("on_timeout".to_owned(), kw.span),
            value,
        }))
    }

    /// `failure (stop|continue|yield)`, after `on`. None when the policy word was unknown (reported).
    fn policy(&mut self) -> PResult<Option<Spanned<FailurePolicy>>> {
        if !self.at_kw(Keyword::Failure) {
            let hint =
                "the clause is `on failure stop`, `on failure continue` or `on failure yield`";
            return Err(self.expected("E0110", "`failure`", "after `on`", Some(hint)));
        }
        self.bump();
        let t = self.tok().clone();
        match &t.kind {
            TokenKind::Ident(w) if !self.is_boundary(self.pos) => {
                self.bump();
                let policy = match w.as_str() {
                    "stop" => FailurePolicy::Stop,
                    "continue" => FailurePolicy::Continue,
                    "yield" => FailurePolicy::Yield,
                    _ => {
                        let hint = match closest(w, POLICIES) {
                            Some(c) => format!(
                                "did you mean `{c}`? The policies are stop, continue and yield"
                            ),
                            None => "the policies are stop, continue and yield".to_owned(),
                        };
                        self.report(
                            Diagnostic::error(
                                "E0119",
                                t.span,
                                format!("unknown failure policy `{w}`"),
                                "unknown policy",
                            )
                            .with_hint(hint),
                        );
                        return Ok(None);
                    }
                };
                Ok(Some(Spanned::new(policy, t.span)))
            }
            _ => Err(self.expected(
                "E0110",
                "`stop`, `continue` or `yield`",
                "after `on failure`",
                None,
            )),
        }
    }

    /// A duration after `timeout`. None when the unit was missing (reported).
    fn duration(&mut self) -> PResult<Option<Spanned<u64>>> {
        let t = self.tok().clone();
        match t.kind {
            // `10m`, `1.5s` or an overflow: the lexer reported it; keep the step for checking.
            TokenKind::Duration(_) | TokenKind::Int(_) if t.lex_error && !t.line_start => {
                self.bump();
                Ok(None)
            }
            TokenKind::Duration(ms) => {
                self.bump();
                Ok(Some(Spanned::new(ms, t.span)))
            }
            TokenKind::Int(n) if !t.line_start => {
                self.bump();
                self.report(
                    Diagnostic::error(
                        "E0120",
                        t.span,
                        format!("expected a duration after `timeout`, found `{n}` without a unit"),
                        "no unit",
                    )
                    .with_hint(format!("give a unit: `{n}s` or `{n}ms`")),
                );
                Ok(None)
            }
            _ => Err(self.expected(
                "E0110",
                "a duration such as `30s` or `500ms`",
                "after `timeout`",
                None,
            )),
        }
    }

    /// `TOOL { ARG: EXPR, ... }`
    /// `for VAR in ITEMS max N { STEPS }` or `repeat { STEPS } until COND max N` (the caller
    /// has seen `for NAME in` or `repeat {`).
    fn body(&mut self) -> PResult<Body> {
        let kw = self.bump();
        let kind = if self.text(kw.span) == "for" {
            LoopKind::For
        } else {
            LoopKind::Repeat
        };
        let (mut var, mut items, mut until) = (None, None, None);
        let mut max = None;
        if kind == LoopKind::For {
            let v = self.bump();
            var = Some(Spanned::new(into_text(v.kind), v.span));
            self.bump(); // `in`
            items = Some(self.expr()?.e);
            // `max N` is optional for `for` (the list's length is known when it starts):
            // without it, at most FOR_MAX_DEFAULT items.
            if matches!(self.kind(), TokenKind::Ident(w) if w == "max") {
                max = Some(self.loop_max("after the list of a `for`")?);
            } else {
                max = Some(Spanned::new(
                    crate::compile::FOR_MAX_DEFAULT,
                    items.as_ref().map_or(kw.span, |e| e.span),
                ));
            }
        }
        if !self.at(&TokenKind::LBrace) {
            return Err(self.expected("E0110", "`{`", "to open the loop's steps", None));
        }
        self.bump();
        let mut steps = Vec::new();
        loop {
            if self.at(&TokenKind::RBrace) {
                break;
            }
            if self.at_word() && *self.kind_at(1) == TokenKind::Assign {
                steps.push(self.step()?);
                continue;
            }
            let hint = "a loop holds steps, `NAME = tool { ... }`, and ends with `}`";
            return Err(self.expected("E0110", "a step or `}`", "in the loop", Some(hint)));
        }
        self.bump(); // `}`
        if kind == LoopKind::Repeat {
            if !matches!(self.kind(), TokenKind::Ident(w) if w == "until") {
                return Err(self.expected(
                    "E0110",
                    "`until CONDITION max N`",
                    "after a `repeat` loop's steps",
                    Some("a repeat loop ends: `} until done.ok max 10`"),
                ));
            }
            self.bump();
            until = Some(self.expr()?.e);
            max = Some(self.loop_max("after `until CONDITION`")?);
        }
        let max = max.unwrap_or(Spanned::new(0, kw.span));
        Ok(Body {
            kind,
            var,
            items,
            until,
            max,
            steps,
        })
    }

    /// `max N`: a loop's bound on iterations.
    fn loop_max(&mut self, context: &str) -> PResult<Spanned<u64>> {
        if !matches!(self.kind(), TokenKind::Ident(w) if w == "max") {
            let hint = "every loop is bounded: write `max N`";
            return Err(self.expected("E0110", "`max N`", context, Some(hint)));
        }
        self.bump();
        let t = self.tok().clone();
        let TokenKind::Int(n) = t.kind else {
            return Err(self.expected("E0110", "a number of iterations", "after `max`", None));
        };
        self.bump();
        Ok(Spanned::new(n, t.span))
    }

    fn call(&mut self, context: &str) -> PResult<Call> {
        if !self.at_word() || self.is_boundary(self.pos) {
            let hint = "a step calls a tool: `NAME = tool.name { arg: value }`";
            return Err(self.expected("E0110", "a tool name", context, Some(hint)));
        }
        let first = self.bump();
        let start = first.span;
        let mut tool = into_text(first.kind);
        let mut tool_span = start;
        while self.at(&TokenKind::Dot) {
            self.bump();
            if !self.at_word() {
                return Err(self.expected("E0110", "a name", "after `.` in the tool name", None));
            }
            let t = self.bump();
            tool.push('.');
            tool.push_str(&into_text(t.kind));
            tool_span = tool_span.to(t.span);
        }
        if !self.at(&TokenKind::LBrace) {
            let hint = if self.at(&TokenKind::LParen) {
                "arguments go in braces: `fs.read { path: p }`"
            } else {
                "arguments go in braces; a call without arguments is written `tool {}`"
            };
            return Err(self.expected("E0110", "`{`", "after the tool name", Some(hint)));
        }
        self.bump();
        let mut args = Vec::new();
        loop {
            if self.at(&TokenKind::RBrace) {
                break;
            }
            let colon_next = |k: &TokenKind| matches!(k, TokenKind::Colon | TokenKind::Assign);
            let name = if matches!(self.kind(), TokenKind::Str(_)) && colon_next(self.kind_at(1)) {
                // A quoted argument name: the intent is clear, so report it and read on.
                let t = self.bump();
                let w = into_text(t.kind);
                self.report(
                    Diagnostic::error(
                        "E0110",
                        t.span,
                        "expected an argument name, found a string",
                        "quoted name",
                    )
                    .with_hint(format!("argument names are not quoted: `{w}: ...`")),
                );
                Spanned::new(w, t.span)
            } else {
                self.name("an argument", "an argument name or `}`", "", colon_next)?
            };
            self.colon(
                "after the argument name",
                "an argument is written `name: value`",
            )?;
            let value = self.expr()?.e;
            args.push(Arg { name, value });
            if self.at(&TokenKind::Comma) {
                self.bump();
                continue;
            }
            if self.at(&TokenKind::RBrace) {
                break;
            }
            let t = self.tok();
            let next_is_arg = matches!(t.kind, TokenKind::Ident(_) | TokenKind::Keyword(_))
                && colon_next(self.kind_at(1))
                && !self.is_boundary(self.pos);
            if !next_is_arg {
                return Err(self.expected("E0110", "`,` or `}`", "after the argument value", None));
            }
            self.missing_comma("arguments", "{ a: 1, b: 2 }");
        }
        let close = self.bump();
        Ok(Call {
            tool: Spanned::new(tool, tool_span),
            args,
            span: start.to(close.span),
        })
    }

    /// `:` between a name and its value; `=` is reported and accepted.
    fn colon(&mut self, context: &str, hint: &str) -> PResult<()> {
        if self.at(&TokenKind::Colon) {
            self.bump();
            return Ok(());
        }
        if self.at(&TokenKind::Assign) {
            let t = self.bump();
            self.report(
                Diagnostic::error(
                    "E0110",
                    t.span,
                    format!("expected `:` {context}, found `=`"),
                    "expected `:`",
                )
                .with_hint(hint.to_owned()),
            );
            return Ok(());
        }
        Err(self.expected("E0110", "`:`", context, Some(hint)))
    }

    fn missing_comma(&mut self, items: &str, example: &str) {
        let t = self.tok().clone();
        let found = self.describe(&t);
        self.report(
            Diagnostic::error(
                "E0118",
                t.span,
                format!("expected `,` between {items}, found {found}"),
                "missing `,` before this",
            )
            .with_hint(format!("separate {items} with commas: `{example}`")),
        );
    }

    // ----- expressions -----

    /// Runs `f` one nesting level deeper, refusing to go past [`MAX_NESTING`].
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        self.depth += 1;
        let r = if self.depth > MAX_NESTING {
            let span = self.tok().span;
            Err(self.too_deep(span))
        } else {
            f(self)
        };
        self.depth -= 1;
        r
    }

    fn too_deep(&mut self, span: Span) -> Fail {
        self.report(
            Diagnostic::error(
                "E0117",
                span,
                format!("expression nested more than {MAX_NESTING} levels deep"),
                "too deep",
            )
            .with_hint("split the expression across steps or simplify it"),
        );
        Fail
    }

    fn checked(&mut self, kind: ExprKind, span: Span, h: u32) -> PResult<Ex> {
        if h > MAX_NESTING {
            return Err(self.too_deep(span));
        }
        Ok(Ex {
            e: Expr { kind, span },
            h,
        })
    }

    fn binary(&mut self, op: BinaryOp, l: Ex, r: Ex) -> PResult<Ex> {
        let span = l.e.span.to(r.e.span);
        let h = l.h.max(r.h) + 1;
        self.checked(ExprKind::Binary(op, Box::new(l.e), Box::new(r.e)), span, h)
    }

    fn unary(&mut self, op: UnaryOp, op_span: Span, x: Ex) -> PResult<Ex> {
        let span = op_span.to(x.e.span);
        let h = x.h + 1;
        self.checked(ExprKind::Unary(op, Box::new(x.e)), span, h)
    }

    fn expr(&mut self) -> PResult<Ex> {
        self.nested(|p| p.or_expr())
    }

    fn or_expr(&mut self) -> PResult<Ex> {
        let mut left = self.and_expr()?;
        while self.at_kw(Keyword::Or) {
            self.bump();
            let right = self.and_expr()?;
            left = self.binary(BinaryOp::Or, left, right)?;
        }
        Ok(left)
    }

    fn and_expr(&mut self) -> PResult<Ex> {
        let mut left = self.not_expr()?;
        while self.at_kw(Keyword::And) {
            self.bump();
            let right = self.not_expr()?;
            left = self.binary(BinaryOp::And, left, right)?;
        }
        Ok(left)
    }

    /// `not` binds looser than comparisons: `not a == b` is `not (a == b)`.
    fn not_expr(&mut self) -> PResult<Ex> {
        if !self.at_kw(Keyword::Not) {
            return self.cmp_expr();
        }
        let op = self.bump();
        self.nested(|p| {
            let x = p.not_expr()?;
            p.unary(UnaryOp::Not, op.span, x)
        })
    }

    /// Comparisons do not associate: a second one in a row is reported (and read on, to find
    /// later mistakes).
    fn cmp_expr(&mut self) -> PResult<Ex> {
        let mut left = self.add_expr()?;
        let mut first_op: Option<Span> = None;
        loop {
            let op = match self.kind() {
                TokenKind::EqEq => BinaryOp::Eq,
                TokenKind::NotEq => BinaryOp::Ne,
                TokenKind::Lt => BinaryOp::Lt,
                TokenKind::Le => BinaryOp::Le,
                TokenKind::Gt => BinaryOp::Gt,
                TokenKind::Ge => BinaryOp::Ge,
                // Nothing valid puts `=` right after an expression, so this is a comparison.
                TokenKind::Assign => {
                    let span = self.tok().span;
                    self.report(
                        Diagnostic::error("E0116", span, "expected `==` to compare, found `=`", "use `==` here")
                            .with_hint("`=` names a step or gives an input's default; compare values with `==`"),
                    );
                    BinaryOp::Eq
                }
                _ => break,
            };
            let op_tok = self.bump();
            match first_op {
                Some(first) => {
                    self.report(
                        Diagnostic::error(
                            "E0115",
                            op_tok.span,
                            "comparison operators cannot be chained",
                            "second comparison",
                        )
                        .with_related(first, "first comparison")
                        .with_hint("combine comparisons with `and`: `a < b and b < c`"),
                    );
                }
                None => first_op = Some(op_tok.span),
            }
            let right = self.add_expr()?;
            left = self.binary(op, left, right)?;
        }
        Ok(left)
    }

    fn add_expr(&mut self) -> PResult<Ex> {
        let mut left = self.mul_expr()?;
        loop {
            let op = match self.kind() {
                TokenKind::Plus => BinaryOp::Add,
                TokenKind::Minus => BinaryOp::Sub,
                _ => return Ok(left),
            };
            self.bump();
            let right = self.mul_expr()?;
            left = self.binary(op, left, right)?;
        }
    }

    fn mul_expr(&mut self) -> PResult<Ex> {
        let mut left = self.neg_expr()?;
        loop {
            let op = match self.kind() {
                TokenKind::Star => BinaryOp::Mul,
                TokenKind::Slash => BinaryOp::Div,
                TokenKind::Percent => BinaryOp::Rem,
                _ => return Ok(left),
            };
            self.bump();
            let right = self.neg_expr()?;
            left = self.binary(op, left, right)?;
        }
    }

    fn neg_expr(&mut self) -> PResult<Ex> {
        if !self.at(&TokenKind::Minus) {
            return self.postfix();
        }
        let op = self.bump();
        self.nested(|p| {
            let x = p.neg_expr()?;
            p.unary(UnaryOp::Neg, op.span, x)
        })
    }

    /// A primary, then `.field` / `[index]` if it is a name.
    fn postfix(&mut self) -> PResult<Ex> {
        let base = self.primary()?;
        if !matches!(self.kind(), TokenKind::Dot | TokenKind::LBracket) {
            return Ok(base);
        }
        let ExprKind::Ref(mut path) = base.e.kind else {
            let t = self.tok().clone();
            self.report(
                Diagnostic::error(
                    "E0121",
                    t.span,
                    "only a name can have fields or indexes",
                    "not after this expression",
                )
                .with_related(base.e.span, "this is not a name")
                .with_hint("read fields from an input or a step output directly: `read.lines[0]`"),
            );
            return Err(Fail);
        };
        let mut span = base.e.span;
        loop {
            if self.at(&TokenKind::Dot) {
                self.bump();
                if !self.at_word() {
                    return Err(self.expected("E0110", "a field name", "after `.`", None));
                }
                let t = self.bump();
                span = span.to(t.span);
                path.segments
                    .push(Segment::Field(Spanned::new(into_text(t.kind), t.span)));
            } else if self.at(&TokenKind::LBracket) {
                self.bump();
                let index = self.index()?;
                if !self.at(&TokenKind::RBracket) {
                    return Err(self.expected("E0110", "`]`", "after the index", None));
                }
                let close = self.bump();
                span = span.to(close.span);
                path.segments.push(Segment::Index(index));
            } else {
                return Ok(Ex {
                    e: Expr {
                        kind: ExprKind::Ref(path),
                        span,
                    },
                    h: base.h,
                });
            }
        }
    }

    /// `[-]INT` inside `[ ]`.
    fn index(&mut self) -> PResult<Spanned<i64>> {
        let minus = if self.at(&TokenKind::Minus) {
            Some(self.bump().span)
        } else {
            None
        };
        let t = self.tok().clone();
        let TokenKind::Int(v) = t.kind else {
            let hint = matches!(t.kind, TokenKind::Str(_))
                .then_some("read a field with `.name`; an index is a number");
            return Err(self.expected("E0110", "an index (a whole number)", "after `[`", hint));
        };
        self.bump();
        let span = minus.map_or(t.span, |m| m.to(t.span));
        let value = if minus.is_some() {
            -i128::from(v)
        } else {
            i128::from(v)
        };
        match i64::try_from(value) {
            Ok(n) => Ok(Spanned::new(n, span)),
            Err(_) => {
                self.too_large(span, v);
                Ok(Spanned::new(0, span))
            }
        }
    }

    fn too_large(&mut self, span: Span, v: u64) {
        self.report(Diagnostic::error(
            "E0104",
            span,
            format!("integer `{v}` is too large (the largest is {})", i64::MAX),
            "too large",
        ));
    }

    fn primary(&mut self) -> PResult<Ex> {
        // The next statement begins: the expression is missing, not the name `b` in `b = ...`.
        if self.is_boundary(self.pos) {
            let context = format!("after {}", self.prev_text());
            return Err(self.expected("E0110", "an expression", &context, None));
        }
        match self.kind() {
            TokenKind::LBracket => return self.nested(|p| p.list()),
            TokenKind::LBrace => return self.nested(|p| p.map()),
            TokenKind::LParen => return self.nested(|p| p.parens()),
            TokenKind::Keyword(Keyword::Null | Keyword::True | Keyword::False)
            | TokenKind::Int(_)
            | TokenKind::Str(_)
            | TokenKind::Ident(_) => {}
            other => {
                let hint = match other {
                    TokenKind::Keyword(Keyword::Not) => Some(
                        "`not` binds more loosely than comparisons and arithmetic: write `(not x)`"
                            .to_owned(),
                    ),
                    TokenKind::Keyword(k) => Some(format!(
                        "`{}` is a keyword and cannot name an input or a step",
                        k.as_str()
                    )),
                    TokenKind::Duration(_) => {
                        Some("durations are written only after `timeout`".to_owned())
                    }
                    _ => None,
                };
                let context = format!("after {}", self.prev_text());
                return Err(self.expected("E0110", "an expression", &context, hint.as_deref()));
            }
        }
        let t = self.bump();
        let kind = match t.kind {
            TokenKind::Keyword(Keyword::Null) => ExprKind::Null,
            TokenKind::Keyword(Keyword::True) => ExprKind::Bool(true),
            TokenKind::Keyword(Keyword::False) => ExprKind::Bool(false),
            TokenKind::Int(v) => match i64::try_from(v) {
                Ok(n) => ExprKind::Int(n),
                Err(_) => {
                    // Reported, then read as the largest integer so checking goes on.
                    self.too_large(t.span, v);
                    ExprKind::Int(i64::MAX)
                }
            },
            TokenKind::Str(s) => ExprKind::Str(s),
            // `secret("NAME")`: a run secret by name (`oracle run --secret NAME=ENV_VAR`). Sugar
            // for the map `{"$secret": "NAME"}`, which is what is hashed and recorded: the
            // tool that receives it puts the value in only at the moment of use.
            TokenKind::Ident(w) if w == "secret" && self.at(&TokenKind::LParen) => {
                self.bump();
                let name = self.tok().clone();
                let TokenKind::Str(text) = name.kind else {
                    return Err(self.expected(
                        "E0110",
                        "the secret's name as a string",
                        "after `secret(`",
                        Some("write `secret(\"NAME\")`"),
                    ));
                };
                self.bump();
                if !self.at(&TokenKind::RParen) {
                    return Err(self.expected("E0110", "`)`", "after the secret's name", None));
                }
                let close = self.bump();
                let span = t.span.to(close.span);
                return Ok(leaf(
                    ExprKind::Map(vec![(
                        Spanned::new("$secret".to_owned(), name.span),
                        Expr {
                            kind: ExprKind::Str(text),
                            span: name.span,
                        },
                    )]),
                    span,
                ));
            }
            TokenKind::Ident(w) => ExprKind::Ref(Path {
                root: Spanned::new(w, t.span),
                segments: Vec::new(),
            }),
            // Only the kinds checked above get here.
            _ => ExprKind::Null,
        };
        Ok(leaf(kind, t.span))
    }

    fn parens(&mut self) -> PResult<Ex> {
        let open = self.bump();
        let inner = self.or_expr()?;
        if !self.at(&TokenKind::RParen) {
            return Err(self.expected("E0110", "`)`", "to close the parenthesis", None));
        }
        let close = self.bump();
        // Parentheses leave no node; the span grows to cover them.
        Ok(Ex {
            e: Expr {
                kind: inner.e.kind,
                span: open.span.to(close.span),
            },
            h: inner.h,
        })
    }

    fn list(&mut self) -> PResult<Ex> {
        let open = self.bump();
        let mut items = Vec::new();
        let mut h = 0;
        loop {
            if self.at(&TokenKind::RBracket) {
                break;
            }
            let item = self.or_expr()?;
            h = h.max(item.h);
            items.push(item.e);
            if self.at(&TokenKind::Comma) {
                self.bump();
                continue;
            }
            if self.at(&TokenKind::RBracket) {
                break;
            }
            if !self.can_start_expr() || self.is_boundary(self.pos) {
                return Err(self.expected("E0110", "`,` or `]`", "after the list item", None));
            }
            self.missing_comma("list items", "[1, 2]");
        }
        let close = self.bump();
        self.checked(ExprKind::List(items), open.span.to(close.span), h + 1)
    }

    fn map(&mut self) -> PResult<Ex> {
        let open = self.bump();
        let mut entries = Vec::new();
        let mut h = 0;
        loop {
            if self.at(&TokenKind::RBrace) {
                break;
            }
            if !self.at_word() && !matches!(self.kind(), TokenKind::Str(_)) {
                return Err(self.expected(
                    "E0110",
                    "a key (a name or a string) or `}`",
                    "in the map",
                    None,
                ));
            }
            let t = self.bump();
            let key = into_text(t.kind);
            self.colon("after the map key", "a map entry is written `key: value`")?;
            let value = self.or_expr()?;
            h = h.max(value.h);
            entries.push((Spanned::new(key, t.span), value.e));
            if self.at(&TokenKind::Comma) {
                self.bump();
                continue;
            }
            if self.at(&TokenKind::RBrace) {
                break;
            }
            let next_is_entry = matches!(
                self.kind(),
                TokenKind::Ident(_) | TokenKind::Keyword(_) | TokenKind::Str(_)
            ) && matches!(self.kind_at(1), TokenKind::Colon)
                && !self.is_boundary(self.pos);
            if !next_is_entry {
                return Err(self.expected("E0110", "`,` or `}`", "after the map value", None));
            }
            self.missing_comma("map entries", "{ a: 1, b: 2 }");
        }
        let close = self.bump();
        self.checked(ExprKind::Map(entries), open.span.to(close.span), h + 1)
    }

    fn can_start_expr(&self) -> bool {
        matches!(
            self.kind(),
            TokenKind::Keyword(Keyword::Null | Keyword::True | Keyword::False | Keyword::Not)
                | TokenKind::Int(_)
                | TokenKind::Str(_)
                | TokenKind::Ident(_)
                | TokenKind::LBracket
                | TokenKind::LBrace
                | TokenKind::LParen
                | TokenKind::Minus
        )
    }
}
