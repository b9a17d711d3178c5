//! What the server knows about one document: the plan check's diagnostics, and what is under
//! the cursor (hover, definition, completion). Pure functions of the text and the catalogue,
//! total over any text: the property test feeds them random edits.

use oracle_plan::ast::{Plan, Span};
use oracle_plan::catalogue::{Catalogue, ToolSpec};
use oracle_plan::lexer::{self, Keyword, TokenKind};
use oracle_plan::{Diagnostic, Sources};

use crate::symbols::{DefKind, Symbols, on};

/// One parse of a document, for the cursor features.
pub struct Analysis {
    pub plan: Option<Plan>,
    pub symbols: Symbols,
}

impl Analysis {
    pub fn new(src: &str) -> Analysis {
        let plan = oracle_plan::parse(src).0;
        let symbols = plan.as_ref().map(Symbols::of).unwrap_or_default();
        Analysis { plan, symbols }
    }

    /// `use ... as NAME` aliases: tools of this plan only.
    fn aliases(&self) -> Vec<(String, String)> {
        self.plan
            .iter()
            .flat_map(|p| &p.uses)
            .map(|u| (u.alias.node.clone(), u.path.node.clone()))
            .collect()
    }
}

/// What `oracle plan check` reports for the text: the same function, so the same codes,
/// messages and spans.
pub fn diagnostics(src: &str, catalogue: &Catalogue, sources: &Sources) -> Vec<Diagnostic> {
    oracle_plan::check_with(src, catalogue, sources).1
}

/// Markdown for what is at `offset`: a tool, an argument, a step, an input or a loop variable.
pub fn hover(a: &Analysis, catalogue: &Catalogue, offset: usize) -> Option<(Span, String)> {
    let s = &a.symbols;
    if let Some((span, tool)) = s.tools.iter().find(|(sp, _)| on(*sp, offset)) {
        return Some((*span, tool_text(a, catalogue, tool)));
    }
    if let Some((span, arg, tool)) = s.args.iter().find(|(sp, _, _)| on(*sp, offset)) {
        let spec = catalogue.get(tool).and_then(|t| t.arg(arg));
        let text = match spec {
            Some(x) => format!(
                "argument `{arg}` of `{tool}`: {}{}",
                x.ty.as_str(),
                if x.required {
                    ", required"
                } else {
                    ", optional"
                }
            ),
            None => format!("argument `{arg}` of `{tool}`"),
        };
        return Some((*span, text));
    }
    let def = s.defs.iter().position(|d| on(d.span, offset)).or_else(|| {
        let r = s.refs.iter().find(|r| on(r.span, offset))?;
        let d = s.resolve(&r.name, r.scope)?;
        s.defs.iter().position(|x| std::ptr::eq(x, d))
    })?;
    let d = &s.defs[def];
    let span = s
        .refs
        .iter()
        .find(|r| on(r.span, offset))
        .map_or(d.span, |r| r.span);
    Some((span, def_text(a, catalogue, def)))
}

fn def_text(a: &Analysis, catalogue: &Catalogue, def: usize) -> String {
    let d = &a.symbols.defs[def];
    match &d.kind {
        DefKind::Input(ty) => format!("input `{}`: {}", d.name, ty.as_str()),
        DefKind::LoopVar => format!("`{}`: the item of this `for` loop's iteration", d.name),
        DefKind::Step { tool, looped: true } => format!(
            "step `{}`: a `{tool}` loop; its output is a list with one entry per iteration, an object of its steps' outputs",
            d.name
        ),
        DefKind::Step {
            tool,
            looped: false,
        } => {
            format!(
                "step `{}` = `{tool}`\n\n{}",
                d.name,
                tool_text(a, catalogue, tool)
            )
        }
    }
}

/// A tool's signature, description, capability and schemas, in Markdown.
pub fn tool_text(a: &Analysis, catalogue: &Catalogue, tool: &str) -> String {
    let Some(t) = catalogue.get(tool) else {
        return match a.aliases().into_iter().find(|(alias, _)| alias == tool) {
            Some((_, path)) => format!("`{tool}`: the sub-plan `{path}` (`use`)"),
            None => format!("`{tool}`: not a tool of the catalogue"),
        };
    };
    let mut out = format!("```\n{}\n```\n{}", signature(t), t.description);
    if let Some(c) = &t.capability {
        let scope = match &c.scope {
            oracle_plan::ScopeFrom::Arg(arg) => format!("<{arg}>"),
            oracle_plan::ScopeFrom::Fixed(s) => s.clone(),
        };
        out.push_str(&format!("\n\nneeds `{}:{}:{scope}`", c.domain, c.action));
    }
    if let Some(fields) = catalogue.output_fields(tool) {
        out.push_str(&format!("\n\noutput fields: {}", fields.join(", ")));
    }
    if let Some(s) = catalogue.schemas(tool) {
        let pretty = |v| serde_json::to_string_pretty(v).unwrap_or_default();
        out.push_str(&format!(
            "\n\ninput schema:\n```json\n{}\n```\noutput schema:\n```json\n{}\n```",
            pretty(&s.input),
            pretty(&s.output)
        ));
    }
    out
}

/// `fs.write { path: string, content: string, mode?: int }`
fn signature(t: &ToolSpec) -> String {
    format!(
        "{} {{ {} }}  (version {})",
        t.name,
        t.args_text(),
        t.version
    )
}

/// Where the name at `offset` is defined: a step, an input or a loop variable.
pub fn definition(a: &Analysis, offset: usize) -> Option<Span> {
    let s = &a.symbols;
    let r = s.refs.iter().find(|r| on(r.span, offset))?;
    s.resolve(&r.name, r.scope).map(|d| d.span)
}

/// What a completion offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Tool,
    Argument,
    Field,
    Name,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub label: String,
    pub kind: Kind,
    pub detail: String,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Completions at byte `offset`: tool names where a call's tool goes (after `NAME =` or
/// `fallback`), argument names inside a call's braces, fields of a step's output after
/// `step.`, and otherwise the plan's inputs and steps.
pub fn completion(
    a: &Analysis,
    catalogue: &Catalogue,
    src: &str,
    offset: usize,
) -> Vec<Completion> {
    let mut offset = offset.min(src.len());
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    let prefix = &src[..offset];
    let word_start = prefix.trim_end_matches(is_word_char).len();
    if tool_position(prefix) {
        return tools(a, catalogue);
    }
    if let Some(root) = field_root(&prefix[..word_start]) {
        return fields(a, catalogue, root);
    }
    if let Some(items) = arguments(catalogue, src, word_start) {
        return items;
    }
    names(a)
}

/// Whether the cursor is on a call's tool name: after `NAME =` starting a line, or `fallback`.
fn tool_position(prefix: &str) -> bool {
    let before = prefix.trim_end_matches(|c| is_word_char(c) || c == '.');
    let before = before.trim_end();
    if let Some(head) = before.strip_suffix('=') {
        if head.ends_with(['=', '!', '<', '>']) {
            return false;
        }
        let head = head.trim_end_matches([' ', '\t']);
        let name_start = head.trim_end_matches(is_word_char);
        let line = name_start.rsplit('\n').next().unwrap_or(name_start);
        return name_start.len() < head.len() && line.trim().is_empty();
    }
    before
        .strip_suffix("fallback")
        .is_some_and(|b| b.is_empty() || b.ends_with(char::is_whitespace))
}

/// `ROOT` when the text before the word being typed ends with `ROOT.` (a reference's first field).
fn field_root(before_word: &str) -> Option<&str> {
    let rest = before_word.strip_suffix('.')?;
    let root_start = rest.trim_end_matches(is_word_char).len();
    let root = &rest[root_start..];
    let preceded = rest[..root_start].chars().next_back();
    let ok = !root.is_empty()
        && !root.starts_with(|c: char| c.is_ascii_digit())
        && preceded.is_none_or(|c| c != '.');
    ok.then_some(root)
}

fn tools(a: &Analysis, catalogue: &Catalogue) -> Vec<Completion> {
    let mut out: Vec<Completion> = catalogue
        .tools()
        .map(|t| Completion {
            label: t.name.clone(),
            kind: Kind::Tool,
            detail: t.description.clone(),
        })
        .collect();
    out.extend(a.aliases().into_iter().map(|(alias, path)| Completion {
        label: alias,
        kind: Kind::Tool,
        detail: format!("sub-plan {path}"),
    }));
    out
}

fn fields(a: &Analysis, catalogue: &Catalogue, root: &str) -> Vec<Completion> {
    let Some(tool) = a.symbols.step_tool(root) else {
        return Vec::new();
    };
    catalogue
        .output_fields(tool)
        .unwrap_or_default()
        .iter()
        .map(|f| Completion {
            label: f.clone(),
            kind: Kind::Field,
            detail: format!("output of {tool}"),
        })
        .collect()
}

/// Argument names, when the cursor (at `word_start`, before the word being typed) is where an
/// argument name goes in a call's braces: right after `{` or `,`. Arguments already given in
/// that call are left out.
fn arguments(catalogue: &Catalogue, src: &str, word_start: usize) -> Option<Vec<Completion>> {
    let (tokens, _) = lexer::lex(src);
    let before: Vec<_> = tokens
        .iter()
        .filter(|t| (t.span.end as usize) <= word_start && t.kind != TokenKind::Eof)
        .collect();
    // Open brackets, each with the tool it is a call of and the arguments given so far.
    let mut open: Vec<Option<(String, Vec<String>)>> = Vec::new();
    for (i, t) in before.iter().enumerate() {
        match &t.kind {
            TokenKind::LBrace => open.push(call_tool(&before[..i]).map(|tool| (tool, Vec::new()))),
            TokenKind::LBracket | TokenKind::LParen => open.push(None),
            TokenKind::RBrace | TokenKind::RBracket | TokenKind::RParen => {
                open.pop();
            }
            TokenKind::Colon => {
                if let (Some(Some((_, given))), Some(prev)) = (open.last_mut(), i.checked_sub(1))
                    && let Some(w) = word(&before[prev].kind)
                {
                    given.push(w);
                }
            }
            _ => {}
        }
    }
    let last = before.last()?;
    if !matches!(last.kind, TokenKind::LBrace | TokenKind::Comma) {
        return None;
    }
    let (tool, given) = open.pop().flatten()?;
    let spec = catalogue.get(&tool)?;
    let items = spec
        .args
        .iter()
        .filter(|x| !given.contains(&x.name))
        .map(|x| Completion {
            label: x.name.clone(),
            kind: Kind::Argument,
            detail: format!(
                "{}{}",
                x.ty.as_str(),
                if x.required { ", required" } else { "" }
            ),
        })
        .collect();
    Some(items)
}

fn word(kind: &TokenKind) -> Option<String> {
    match kind {
        TokenKind::Ident(w) => Some(w.clone()),
        TokenKind::Keyword(k) => Some(k.as_str().to_owned()),
        _ => None,
    }
}

/// The tool a `{` opens a call of, from the tokens before it: `= tool.name {` or `fallback
/// tool.name {`. `None` for a map literal.
fn call_tool(before: &[&lexer::Token]) -> Option<String> {
    let mut parts = Vec::new();
    let mut i = before.len();
    loop {
        i = i.checked_sub(1)?;
        parts.push(word(&before[i].kind)?);
        match before.get(i.wrapping_sub(1)).map(|t| &t.kind) {
            Some(TokenKind::Dot) => i -= 1,
            Some(TokenKind::Assign) | Some(TokenKind::Keyword(Keyword::Fallback)) => break,
            _ => return None,
        }
    }
    parts.reverse();
    Some(parts.join("."))
}

fn names(a: &Analysis) -> Vec<Completion> {
    a.symbols
        .defs
        .iter()
        .filter(|d| d.scope.is_none())
        .map(|d| Completion {
            label: d.name.clone(),
            kind: Kind::Name,
            detail: match &d.kind {
                DefKind::Input(ty) => format!("input: {}", ty.as_str()),
                DefKind::Step { tool, .. } => format!("step: {tool}"),
                DefKind::LoopVar => "loop variable".to_owned(),
            },
        })
        .collect()
}
