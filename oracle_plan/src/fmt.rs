//! The formatter behind `oracle plan fmt`: a plan in one canonical layout, with every comment
//! kept. Pure text to text; a plan with a syntax error is refused with the parser's diagnostics,
//! never half-formatted.
//!
//! What is canonical: the header first; grants, inputs, `use`, `tools` and steps in the order
//! written, one per line, with a blank line where the source had one or more and between items
//! of different kinds; spaces as [`crate::print`] puts them inside a statement (expressions with
//! only the parentheses precedence needs, strings with canonical escapes, `500ms`/`2s`); a
//! step's clauses on their own lines, indented two spaces, in the fixed order after, when,
//! expect, attempts, fallback, on failure, timeout (`retry N` is written `attempts N`, its honest
//! name); a call on one line when it fits [`LINE_WIDTH_MAX`] and holds no comment, else one
//! argument per line with a trailing comma, and likewise a list or map literal that is an
//! argument or an input's default (and, inward, its items); a loop's steps indented two spaces.
//!
//! The tree does not change: `parse(format(src))` equals `parse(src)` up to spans (the
//! properties in tests/fmt.rs), so neither does the plan hash, which is computed from the tree.
//!
//! Comments are not in the tree. Each is placed by where it was: a comment after code on a
//! line stays at the end of the output line that ends there; any other comment goes on its own
//! line before the first output line that ends after it (so one inside an expression moves
//! just above that expression's line). Formatting twice gives the same text.

use crate::ast::{
    Body, Call, Expr, ExprKind, Input, LoopKind, MemoryStore, Plan, Span, Spanned, Step, Use,
};
use crate::diagnostic::Diagnostic;
use crate::lexer::{self, Token, TokenKind, is_bare_capability, is_word};
use crate::parser::{self, has_errors};
use crate::print::{self, print_expr};

/// The widest line a call is kept on, in characters with its indentation; a longer call puts
/// one argument per line. The width `oracle`'s help is wrapped to, and a common editor ruler.
pub const LINE_WIDTH_MAX: usize = 100;

/// The plan `src` in canonical form (ending with a newline), or the parser's diagnostics when
/// it does not parse cleanly. Never panics.
pub fn format(src: &str) -> Result<String, Vec<Diagnostic>> {
    let (plan, diags) = parser::parse(src);
    let plan = match plan {
        Some(p) if !has_errors(&diags) => p,
        _ => return Err(diags),
    };
    let (tokens, _) = lexer::lex(src);
    let comments = comments(src, &tokens);
    let mut f = Layout {
        tokens: &tokens,
        comments: &comments,
        lines: Vec::new(),
    };
    f.plan(&plan);
    Ok(render(src, &f.lines, &comments))
}

/// A `#` comment: where it starts, its text (trailing blanks dropped), and whether it was
/// alone on its line.
struct Comment {
    start: u32,
    text: String,
    own_line: bool,
}

/// Every comment of `src`: the lexer skips them, so they are what lies between its tokens
/// besides whitespace (a clean parse leaves nothing else there).
fn comments(src: &str, tokens: &[Token]) -> Vec<Comment> {
    let mut out = Vec::new();
    let mut from = if src.starts_with('\u{feff}') { 3 } else { 0 };
    for t in tokens {
        let to = (t.span.start as usize).max(from);
        let mut at = from;
        while let Some(k) = src.get(at..to).and_then(|gap| gap.find('#')) {
            let start = at + k;
            let end = src[start..to].find('\n').map_or(to, |n| start + n);
            let line_start = src[..start].rfind('\n').map_or(0, |n| n + 1);
            let before = src[line_start..start].trim_start_matches('\u{feff}');
            out.push(Comment {
                start: u32::try_from(start).unwrap_or(u32::MAX),
                text: src[start..end].trim_end().to_owned(),
                own_line: before.trim().is_empty(),
            });
            at = end;
        }
        from = (t.span.end as usize).max(from);
    }
    out
}

/// Whether a blank line may be kept (or must be put) before a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blank {
    /// Never: inside a statement, and right after a loop opens.
    Never,
    /// Where the source had one (top-level items, a loop's steps).
    Keep,
    /// Always: between items of different kinds, and after the header.
    Force,
}

/// One output line, with the source range `[start, end)` of the code it prints (comments are
/// placed by it).
struct Line {
    indent: usize,
    text: String,
    start: u32,
    end: u32,
    blank: Blank,
    /// The indentation of comments placed before it: deeper for a closing `}`, whose comments
    /// were inside the braces.
    comment_indent: usize,
}

struct Layout<'a> {
    tokens: &'a [Token],
    comments: &'a [Comment],
    lines: Vec<Line>,
}

/// A top-level item, for putting them back in the order written.
enum Item<'a> {
    Grant(&'a Spanned<String>),
    Use(&'a Use),
    Tools(&'a Spanned<String>),
    Memory(&'a Spanned<MemoryStore>),
    Queue(&'a Spanned<String>),
    Input(&'a Input),
    Step(&'a Step),
}

impl Item<'_> {
    fn kind(&self) -> u8 {
        match self {
            Item::Grant(_) => 0,
            Item::Use(_) => 1,
            Item::Tools(_) => 2,
            Item::Input(_) => 3,
            Item::Step(_) => 4,
            Item::Memory(_) => 5,
            Item::Queue(_) => 6,
        }
    }

    /// Where it is: the span start of what follows its first word (`grant`, `use`...), or of a
    /// step's name.
    fn anchor(&self) -> u32 {
        match self {
            Item::Grant(g) => g.span.start,
            Item::Use(u) => u.path.span.start,
            Item::Tools(t) => t.span.start,
            Item::Memory(m) => m.span.start,
            Item::Queue(q) => q.span.start,
            Item::Input(i) => i.name.span.start,
            Item::Step(s) => s.span.start,
        }
    }
}

impl Layout<'_> {
    fn push(&mut self, indent: usize, text: String, range: (u32, u32), blank: Blank) {
        self.lines.push(Line {
            indent,
            text,
            start: range.0,
            end: range.1,
            blank,
            comment_indent: indent,
        });
    }

    /// A closing line (`}`): comments before it were inside the braces, so indent them more.
    fn push_close(&mut self, indent: usize, text: String, range: (u32, u32)) {
        self.push(indent, text, range, Blank::Never);
        if let Some(l) = self.lines.last_mut() {
            l.comment_indent = indent + 2;
        }
    }

    /// The index of the token starting at `pos` (or the first after it).
    fn token_index(&self, pos: u32) -> usize {
        self.tokens.partition_point(|t| t.span.start < pos)
    }

    /// Where the token before the one at `pos` starts: the keyword of a statement whose tree
    /// keeps only the span of what follows it.
    fn start_before(&self, pos: u32) -> u32 {
        let i = self.token_index(pos);
        i.checked_sub(1)
            .and_then(|i| self.tokens.get(i))
            .map_or(pos, |t| t.span.start)
    }

    /// The first token of `kind` at or after `pos` (a brace the tree does not keep).
    fn find(&self, pos: u32, kind: &TokenKind) -> Span {
        let i = self.token_index(pos);
        self.tokens
            .get(i..)
            .and_then(|rest| rest.iter().find(|t| t.kind == *kind))
            .map_or(Span::new(pos, pos), |t| t.span)
    }

    fn plan(&mut self, p: &Plan) {
        let header = format!("plan {} version {}", p.name.node, p.version.node);
        let start = self.start_before(p.name.span.start);
        self.push(0, header, (start, p.version.span.end), Blank::Keep);
        let mut items: Vec<Item<'_>> = Vec::new();
        items.extend(p.grants.iter().map(Item::Grant));
        items.extend(p.uses.iter().map(Item::Use));
        items.extend(p.tools.iter().map(Item::Tools));
        items.extend(p.memory.iter().map(Item::Memory));
        items.extend(p.queue.iter().map(Item::Queue));
        items.extend(p.inputs.iter().map(Item::Input));
        items.extend(p.steps.iter().map(Item::Step));
        items.sort_by_key(Item::anchor);
        let mut prev = None;
        for item in &items {
            let blank = if prev == Some(item.kind()) {
                Blank::Keep
            } else {
                Blank::Force
            };
            prev = Some(item.kind());
            self.item(item, blank);
        }
    }

    fn item(&mut self, item: &Item<'_>, blank: Blank) {
        // Every item but a step starts with a word the tree does not keep.
        let start = self.start_before(item.anchor());
        match item {
            Item::Grant(g) => {
                let mut text = "grant ".to_owned();
                if is_bare_capability(&g.node) {
                    text.push_str(&g.node);
                } else {
                    print::string(&mut text, &g.node);
                }
                self.push(0, text, (start, g.span.end), blank);
            }
            Item::Use(u) => {
                let mut text = "use ".to_owned();
                print::string(&mut text, &u.path.node);
                text.push_str(" as ");
                text.push_str(&u.alias.node);
                self.push(0, text, (start, u.alias.span.end), blank);
            }
            Item::Memory(m) => {
                let mut text = "memory ".to_owned();
                match &m.node {
                    MemoryStore::Named(n) => print::string(&mut text, n),
                    MemoryStore::Input(i) => text.push_str(&format!("input.{i}")),
                }
                self.push(0, text, (start, m.span.end), blank);
            }
            Item::Queue(q) => {
                let mut text = "queue ".to_owned();
                print::string(&mut text, &q.node);
                self.push(0, text, (start, q.span.end), blank);
            }
            Item::Tools(t) => {
                let mut text = "tools ".to_owned();
                print::string(&mut text, &t.node);
                self.push(0, text, (start, t.span.end), blank);
            }
            Item::Input(i) => {
                let text = format!("input {}: {}", i.name.node, i.ty.node.as_str());
                match &i.default {
                    Some(d) => self.value(0, format!("{text} = "), d, "", start, blank),
                    None => self.push(0, text, (start, i.ty.span.end), blank),
                }
            }
            Item::Step(s) => self.step(s, 0, blank),
        }
    }

    fn step(&mut self, s: &Step, indent: usize, blank: Blank) {
        let head = format!("{} = ", s.name.node);
        match &s.body {
            Some(b) if b.kind != LoopKind::Use => self.body(s, b, indent, head, blank),
            _ => self.call(&s.call, indent, head, s.span.start, blank),
        }
        self.clauses(s, indent + 2);
    }

    /// `PREFIX tool { ... }` on one line when it fits and holds no comment, else one argument
    /// per line.
    fn call(&mut self, c: &Call, indent: usize, prefix: String, start: u32, blank: Blank) {
        let mut one = prefix.clone();
        print::call(&mut one, c);
        if !self.commented(c.span)
            && (c.args.is_empty() || indent + one.chars().count() <= LINE_WIDTH_MAX)
        {
            self.push(indent, one, (start, c.span.end), blank);
            return;
        }
        let open = self.find(c.tool.span.end, &TokenKind::LBrace);
        let head = format!("{prefix}{} {{", c.tool.node);
        self.push(indent, head, (start, open.end), blank);
        for a in &c.args {
            let prefix = format!("{}: ", a.name.node);
            let start = a.name.span.start;
            self.value(indent + 2, prefix, &a.value, ",", start, Blank::Never);
        }
        let close = c.span.end.saturating_sub(1);
        self.push_close(indent, "}".to_owned(), (close, c.span.end));
    }

    /// Whether a comment lies strictly inside `span`.
    fn commented(&self, span: Span) -> bool {
        let first = self.comments.partition_point(|k| k.start <= span.start);
        self.comments.get(first).is_some_and(|k| k.start < span.end)
    }

    /// `PREFIX VALUE SUFFIX` on one line when it fits and holds no comment. A list or map
    /// literal that does not is broken: one item per line, indented two more, each followed by
    /// a comma, and so on inward.
    fn value(
        &mut self,
        indent: usize,
        prefix: String,
        e: &Expr,
        suffix: &str,
        start: u32,
        blank: Blank,
    ) {
        let one = format!("{prefix}{}{suffix}", print_expr(e));
        let (open, close) = match &e.kind {
            ExprKind::List(items) if !items.is_empty() => ("[", "]"),
            ExprKind::Map(m) if !m.is_empty() && print::secret_name(m).is_none() => ("{", "}"),
            _ => ("", ""),
        };
        let fits = !self.commented(e.span) && indent + one.chars().count() <= LINE_WIDTH_MAX;
        if open.is_empty() || fits {
            self.push(indent, one, (start, e.span.end), blank);
            return;
        }
        let inner = indent + 2;
        self.push(
            indent,
            format!("{prefix}{open}"),
            (start, e.span.start + 1),
            blank,
        );
        match &e.kind {
            ExprKind::List(items) => {
                for item in items {
                    self.value(
                        inner,
                        String::new(),
                        item,
                        ",",
                        item.span.start,
                        Blank::Never,
                    );
                }
            }
            ExprKind::Map(entries) => {
                for (k, v) in entries {
                    let mut key = String::new();
                    if is_word(&k.node) {
                        key.push_str(&k.node);
                    } else {
                        print::string(&mut key, &k.node);
                    }
                    key.push_str(": ");
                    self.value(inner, key, v, ",", k.span.start, Blank::Never);
                }
            }
            _ => {}
        }
        let end = e.span.end;
        self.push_close(
            indent,
            format!("{close}{suffix}"),
            (end.saturating_sub(1), end),
        );
    }

    /// A loop step: its head line, its steps indented, and its closing line.
    fn body(&mut self, s: &Step, b: &Body, indent: usize, head: String, blank: Blank) {
        let mut text = head;
        let from = match (&b.kind, &b.items) {
            (LoopKind::For, Some(items)) => {
                let var = b.var.as_ref().map_or("_", |v| v.node.as_str());
                text.push_str(&format!("for {var} in {}", print_expr(items)));
                // Without `max`, the parser gives the default the list's span: keep it unwritten.
                if b.max.span != items.span {
                    text.push_str(&format!(" max {}", b.max.node));
                }
                items.span.end.max(b.max.span.end)
            }
            _ => {
                text.push_str("repeat");
                s.call.span.end
            }
        };
        text.push_str(" {");
        let open = self.find(from, &TokenKind::LBrace);
        self.push(indent, text, (s.span.start, open.end), blank);
        for (i, inner) in b.steps.iter().enumerate() {
            let blank = if i == 0 { Blank::Never } else { Blank::Keep };
            self.step(inner, indent + 2, blank);
        }
        let after = b.steps.last().map_or(open.end, |inner| inner.span.end);
        let close = self.find(after, &TokenKind::RBrace);
        match (&b.kind, &b.until) {
            (LoopKind::Repeat, Some(until)) => {
                let text = format!("}} until {} max {}", print_expr(until), b.max.node);
                self.push_close(indent, text, (close.start, b.max.span.end));
            }
            _ => self.push_close(indent, "}".to_owned(), (close.start, close.end)),
        }
    }

    fn clauses(&mut self, s: &Step, indent: usize) {
        let never = Blank::Never;
        if let (Some(first), Some(last)) = (s.after.first(), s.after.last()) {
            let names: Vec<&str> = s.after.iter().map(|n| n.node.as_str()).collect();
            let text = format!("after {}", names.join(", "));
            self.push(indent, text, (first.span.start, last.span.end), never);
        }
        for (word, e) in [("when", &s.when), ("expect", &s.expect)] {
            if let Some(e) = e {
                let text = format!("{word} {}", print_expr(e));
                self.push(indent, text, (e.span.start, e.span.end), never);
            }
        }
        if let Some(e) = &s.retry_policy {
            let text = format!("retry {}", print_expr(e));
            self.push(indent, text, (e.span.start, e.span.end), never);
        }
        if let Some(n) = &s.retry {
            let text = format!("attempts {}", n.node);
            self.push(indent, text, (n.span.start, n.span.end), never);
        }
        if let Some(c) = &s.fallback {
            self.call(c, indent, "fallback ".to_owned(), c.span.start, never);
        }
        if let Some(p) = &s.on_failure {
            let text = format!("on failure {}", p.node.as_str());
            self.push(indent, text, (p.span.start, p.span.end), never);
        }
        if let Some(t) = &s.timeout_ms {
            self.push(indent, timeout(t.node), (t.span.start, t.span.end), never);
        }
        if let Some(u) = &s.undo {
            let text = format!("undo {}", u.node);
            self.push(indent, text, (u.span.start, u.span.end), never);
        }
    }
}

/// `timeout 2s` for whole seconds, else exact in milliseconds (as `print` writes it).
fn timeout(ms: u64) -> String {
    if ms != 0 && ms.is_multiple_of(1000) {
        format!("timeout {}s", ms / 1000)
    } else {
        format!("timeout {ms}ms")
    }
}

/// Whether the source has a blank line right before `pos` (only whitespace back to some text).
fn blank_before(src: &str, pos: u32) -> bool {
    let before = src.get(..pos as usize).unwrap_or("");
    let text = before.trim_end_matches([' ', '\t', '\r', '\n']);
    let gap = &before[text.len()..];
    !text.trim_start_matches('\u{feff}').is_empty() && gap.matches('\n').count() >= 2
}

/// Where each comment goes: `trailing[i]` ends line `i`; `leading[i]` come before it, and
/// `leading[lines.len()]` after the last line.
fn place<'c>(
    src: &str,
    lines: &[Line],
    comments: &'c [Comment],
) -> (Vec<Vec<&'c Comment>>, Vec<Option<&'c Comment>>) {
    let mut by_end: Vec<(u32, usize)> = lines.iter().enumerate().map(|(i, l)| (l.end, i)).collect();
    by_end.sort_unstable();
    let mut leading: Vec<Vec<&Comment>> = (0..=lines.len()).map(|_| Vec::new()).collect();
    let mut trailing: Vec<Option<&Comment>> = vec![None; lines.len()];
    for c in comments {
        let k = by_end.partition_point(|(end, _)| *end <= c.start);
        if !c.own_line
            && let Some(&(end, i)) = k.checked_sub(1).and_then(|k| by_end.get(k))
        {
            let gap = src.get(end as usize..c.start as usize).unwrap_or("\n");
            if gap.chars().all(|ch| matches!(ch, ' ' | '\t' | ',')) && trailing[i].is_none() {
                trailing[i] = Some(c);
                continue;
            }
        }
        let i = by_end.get(k).map_or(lines.len(), |&(_, i)| i);
        leading[i].push(c);
    }
    (leading, trailing)
}

/// The output text: lines with their comments, blank lines where [`Blank`] says.
fn render(src: &str, lines: &[Line], comments: &[Comment]) -> String {
    let (leading, trailing) = place(src, lines, comments);
    let mut out = String::new();
    let mut emit = |blank: bool, indent: usize, text: &str| {
        if blank && !out.is_empty() {
            out.push('\n');
        }
        out.extend(std::iter::repeat_n(' ', indent));
        out.push_str(text);
        out.push('\n');
    };
    for (i, l) in lines.iter().enumerate() {
        let before = &leading[i];
        for (j, c) in before.iter().enumerate() {
            let blank = match l.blank {
                Blank::Never => false,
                Blank::Force => j == 0 || blank_before(src, c.start),
                Blank::Keep => blank_before(src, c.start),
            };
            emit(blank, l.comment_indent, &c.text);
        }
        let blank = match l.blank {
            Blank::Never => false,
            Blank::Force => before.is_empty() || blank_before(src, l.start),
            Blank::Keep => blank_before(src, l.start),
        };
        match trailing[i] {
            Some(c) => emit(blank, l.indent, &format!("{} {}", l.text, c.text)),
            None => emit(blank, l.indent, &l.text),
        }
    }
    for c in leading.last().into_iter().flatten() {
        emit(blank_before(src, c.start), 0, &c.text);
    }
    out
}
