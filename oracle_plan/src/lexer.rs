//! Lexer for the plan language: source text to tokens with byte spans. It reports every lexical
//! error and carries on, so one pass of the parser can report the syntax errors after it too.
//!
//! Concrete syntax decided here (the diagnostic codes are listed at the top of `parser.rs`):
//!
//! - Reserved words are `ast::KEYWORDS` plus `null`; they lex as [`TokenKind::Keyword`]. The
//!   failure policies (`stop`, `continue`, `yield`) and the type names (`string`, `int`, `bool`,
//!   `list`, `map`, `json`) are contextual: they lex as identifiers, the parser gives them meaning
//!   only after `on failure` and after `input NAME:`, and they may name inputs and steps.
//! - Identifiers are ASCII: `[A-Za-z_][A-Za-z0-9_]*`. Dotted tool names are joined by the parser.
//! - Integers are decimal digits read as `u64` (a leading `-` is the negation operator); the
//!   parser checks that expression literals fit `i64`. An integer immediately followed by `ms` or
//!   `s` is one duration token holding milliseconds (`500ms`, `30s`); any other letters glued to a
//!   number (`10m`, `1e5`) and `1.5` are errors, so a unit typo is never read as two tokens.
//! - A capability is the word after `grant` on the same line, when it starts with a letter,
//!   digit, `_` or `*`: every character up to the next whitespace, which must be ASCII letters,
//!   digits or `* / . - _ ~ :` (so paths and globs need no quotes). A quoted capability lexes as
//!   an ordinary string. `grant` after `.` (a field or tool name part) starts no capability.
//!   Whether the text is `domain:action:scope` is left to the compiler, which owns the capability
//!   grammar (`oracle_core::capability`), so a malformed grant is reported once, not twice.
//! - `&&`, `||` and a lone `!` are reported and stand in for `and`, `or` and `not`, so the parser
//!   does not report the same mistake again; other unexpected characters are reported and skipped.
//! - Strings end on their own line: a raw newline inside one makes it unterminated, so a missing
//!   quote cannot swallow the rest of the file.

use crate::ast::Span;
use crate::diagnostic::Diagnostic;

/// A reserved word: `ast::KEYWORDS` plus `null`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Keyword {
    Plan,
    Version,
    Grant,
    Input,
    After,
    When,
    Expect,
    Retry,
    Fallback,
    On,
    Failure,
    Timeout,
    And,
    Or,
    Not,
    True,
    False,
    Null,
}

impl Keyword {
    pub const ALL: [Keyword; 18] = [
        Keyword::Plan,
        Keyword::Version,
        Keyword::Grant,
        Keyword::Input,
        Keyword::After,
        Keyword::When,
        Keyword::Expect,
        Keyword::Retry,
        Keyword::Fallback,
        Keyword::On,
        Keyword::Failure,
        Keyword::Timeout,
        Keyword::And,
        Keyword::Or,
        Keyword::Not,
        Keyword::True,
        Keyword::False,
        Keyword::Null,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Keyword::Plan => "plan",
            Keyword::Version => "version",
            Keyword::Grant => "grant",
            Keyword::Input => "input",
            Keyword::After => "after",
            Keyword::When => "when",
            Keyword::Expect => "expect",
            Keyword::Retry => "retry",
            Keyword::Fallback => "fallback",
            Keyword::On => "on",
            Keyword::Failure => "failure",
            Keyword::Timeout => "timeout",
            Keyword::And => "and",
            Keyword::Or => "or",
            Keyword::Not => "not",
            Keyword::True => "true",
            Keyword::False => "false",
            Keyword::Null => "null",
        }
    }

    pub fn from_word(word: &str) -> Option<Keyword> {
        // A match rather than a search of ALL: every identifier goes through here.
        Some(match word {
            "plan" => Keyword::Plan,
            "version" => Keyword::Version,
            "grant" => Keyword::Grant,
            "input" => Keyword::Input,
            "after" => Keyword::After,
            "when" => Keyword::When,
            "expect" => Keyword::Expect,
            "retry" => Keyword::Retry,
            "fallback" => Keyword::Fallback,
            "on" => Keyword::On,
            "failure" => Keyword::Failure,
            "timeout" => Keyword::Timeout,
            "and" => Keyword::And,
            "or" => Keyword::Or,
            "not" => Keyword::Not,
            "true" => Keyword::True,
            "false" => Keyword::False,
            "null" => Keyword::Null,
            _ => return None,
        })
    }

    /// Whether the keyword starts a step clause.
    pub fn starts_clause(self) -> bool {
        matches!(
            self,
            Keyword::After
                | Keyword::When
                | Keyword::Expect
                | Keyword::Retry
                | Keyword::Fallback
                | Keyword::On
                | Keyword::Timeout
        )
    }
}

/// Whether `word` is reserved (cannot name a plan, input, step or argument).
pub fn is_reserved(word: &str) -> bool {
    Keyword::from_word(word).is_some()
}

/// Whether `s` is an identifier-shaped word, `[A-Za-z_][A-Za-z0-9_]*` (reserved or not).
pub fn is_word(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(is_ident_start) && chars.all(is_ident_continue)
}

/// Whether `s` can be written after `grant` without quotes.
pub fn is_bare_capability(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '*')
        && s.chars().all(is_capability_char)
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_continue(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_capability_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '*' | '/' | '.' | '-' | '_' | '~' | ':')
}

/// Characters that start some token or are skipped; anything else is reported as unexpected.
fn is_known_start(c: char) -> bool {
    c.is_whitespace() || is_ident_continue(c) || "#\"'{}[](),:=<>+-*/%.!".contains(c)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenKind {
    Ident(String),
    Keyword(Keyword),
    /// A decimal integer; may exceed `i64` (the parser decides where that matters).
    Int(u64),
    /// A string literal, escapes resolved.
    Str(String),
    /// `500ms` / `30s`, in milliseconds.
    Duration(u64),
    /// An unquoted capability after `grant`, as written.
    Capability(String),
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    LParen,
    RParen,
    Comma,
    Colon,
    /// `=`
    Assign,
    /// `==`
    EqEq,
    /// `!=`
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Dot,
    Eof,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    pub span: Span,
    /// The first token on its line: statement recovery restarts only at such tokens.
    pub line_start: bool,
    /// The lexer already reported a problem inside this token, so the parser stays quiet about it.
    pub lex_error: bool,
    /// An unterminated string: whatever the parser finds next is a consequence, not a new mistake.
    pub unterminated: bool,
}

/// Splits `src` into tokens, always ending with one [`TokenKind::Eof`], plus lexical diagnostics.
/// Spans above `u32::MAX` saturate; `parser::parse` refuses such inputs before lexing.
/// The most tokens a plan may have (about 8 bytes of plan text each). Tokens are what a plan's
/// memory grows with (some 50 bytes each, then the syntax tree): 32 MiB of `1,1,1,...` held
/// 2.7 GB before this limit. Generous for real plans: `steps_max` steps of a few arguments each
/// fit. Reached: E0108 at the first token past it, and nothing is parsed.
pub const TOKENS_MAX: usize = 8_000_000;

pub fn lex(src: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let mut lx = Lexer {
        src,
        pos: 0,
        // Plans average a token per four or five bytes; sizing up front saves regrowing copies.
        tokens: Vec::with_capacity(src.len() / 4 + 1),
        diags: Vec::new(),
        line_start: true,
        capability_next: false,
    };
    // An editor's byte-order mark is not part of the plan.
    if src.starts_with('\u{feff}') {
        lx.pos = '\u{feff}'.len_utf8();
    }
    lx.run();
    let end = lx.pos;
    lx.tokens.push(Token {
        kind: TokenKind::Eof,
        span: span(end, end),
        line_start: lx.line_start,
        lex_error: false,
        unterminated: false,
    });
    (lx.tokens, lx.diags)
}

fn to_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

fn span(start: usize, end: usize) -> Span {
    Span::new(to_u32(start), to_u32(end))
}

impl Lexer<'_> {
    /// Reports [`TOKENS_MAX`] at the next token and skips the rest of the source.
    fn too_many_tokens(&mut self) {
        let rest = &self.src[self.pos..];
        let start = self.pos + (rest.len() - rest.trim_start().len());
        self.diags.push(
            Diagnostic::error(
                "E0108",
                span(start, start),
                format!("the plan has more than tokens_max = {TOKENS_MAX} tokens"),
                "the limit is reached here",
            )
            .with_hint("split the plan, or put large data in a file the plan reads"),
        );
        self.pos = self.src.len();
    }
}

struct Lexer<'s> {
    src: &'s str,
    pos: usize,
    tokens: Vec<Token>,
    diags: Vec<Diagnostic>,
    line_start: bool,
    /// Set after `grant`: the next word on the line is a capability.
    capability_next: bool,
}

impl Lexer<'_> {
    fn rest(&self) -> &str {
        self.src.get(self.pos..).unwrap_or("")
    }

    fn peek(&self) -> Option<char> {
        // ASCII without decoding: almost every character of a plan.
        match self.src.as_bytes().get(self.pos) {
            Some(&b) if b.is_ascii() => Some(char::from(b)),
            Some(_) => self.rest().chars().next(),
            None => None,
        }
    }

    fn peek2(&self) -> Option<char> {
        self.rest().chars().nth(1)
    }

    fn eat_while(&mut self, f: impl Fn(char) -> bool) {
        while let Some(c) = self.peek() {
            if !f(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
    }

    fn text(&self, start: usize, end: usize) -> &str {
        self.src.get(start..end).unwrap_or("")
    }

    fn push(&mut self, kind: TokenKind, start: usize, lex_error: bool) {
        self.tokens.push(Token {
            kind,
            span: span(start, self.pos),
            line_start: self.line_start,
            lex_error,
            unterminated: false,
        });
        self.line_start = false;
    }

    fn error(
        &mut self,
        code: &'static str,
        at: Span,
        message: String,
        label: &str,
        hint: Option<&str>,
    ) {
        let mut d = Diagnostic::error(code, at, message, label);
        if let Some(h) = hint {
            d = d.with_hint(h);
        }
        self.diags.push(d);
    }

    fn run(&mut self) {
        loop {
            if self.tokens.len() >= TOKENS_MAX {
                self.too_many_tokens();
                return;
            }
            if self.capability_next {
                self.capability_next = false;
                if self.capability() {
                    continue;
                }
            }
            let Some(c) = self.peek() else { break };
            let start = self.pos;
            match c {
                '\n' => {
                    self.pos += 1;
                    self.line_start = true;
                }
                c if c.is_whitespace() => {
                    self.pos += c.len_utf8();
                }
                '#' => self.eat_while(|c| c != '\n'),
                c if is_ident_start(c) => {
                    self.eat_while(is_ident_continue);
                    let word = self.text(start, self.pos);
                    let kind = match Keyword::from_word(word) {
                        Some(k) => {
                            // `.grant` is a field or tool name part, never the statement.
                            let after_dot =
                                self.tokens.last().is_some_and(|t| t.kind == TokenKind::Dot);
                            self.capability_next = k == Keyword::Grant && !after_dot;
                            TokenKind::Keyword(k)
                        }
                        None => TokenKind::Ident(word.to_owned()),
                    };
                    self.push(kind, start, false);
                }
                c if c.is_ascii_digit() => self.number(),
                '"' => self.string(),
                '\'' => self.single_quoted(),
                _ => self.punctuation(c),
            }
        }
    }

    /// After `grant`: lexes the next word on the same line as a capability if it starts like one
    /// (a letter, digit, `_` or `*`). Otherwise returns false, having skipped only blanks, and
    /// normal lexing goes on: the line ended, a comment or a quoted capability follows, or `grant`
    /// is misused as a name or key (`grant = ...`, `{ grant: 1 }`) and the parser says so.
    fn capability(&mut self) -> bool {
        self.eat_while(|c| c.is_whitespace() && c != '\n');
        if !self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '*')
        {
            return false;
        }
        let start = self.pos;
        self.eat_while(|c| !c.is_whitespace());
        let word = self.text(start, self.pos).to_owned();
        let mut bad = false;
        if let Some((i, c)) = word.char_indices().find(|&(_, c)| !is_capability_char(c)) {
            bad = true;
            let at = span(start + i, start + i + c.len_utf8());
            let hint = if c == '#' {
                "put a space before a comment, or quote the capability: `grant \"...\"`"
            } else {
                "quote the capability to use other characters: `grant \"...\"`"
            };
            self.error(
                "E0107",
                at,
                format!("`{c}` cannot appear in an unquoted capability"),
                "not allowed here",
                Some(hint),
            );
        }
        self.push(TokenKind::Capability(word), start, bad);
        true
    }

    fn number(&mut self) {
        let start = self.pos;
        let mut value: Option<u64> = Some(0);
        while let Some(c) = self.peek() {
            let Some(d) = c.to_digit(10) else { break };
            value = value
                .and_then(|v| v.checked_mul(10))
                .and_then(|v| v.checked_add(u64::from(d)));
            self.pos += 1;
        }
        let digits_end = self.pos;
        let is_float = self.peek() == Some('.') && self.peek2().is_some_and(|c| c.is_ascii_digit());
        if is_float {
            self.pos += 1;
            self.eat_while(is_ident_continue);
        }
        let suffix_start = self.pos;
        self.eat_while(is_ident_continue);
        let suffix = self.text(suffix_start, self.pos).to_owned();
        let whole = span(start, self.pos);
        let exponent = suffix.starts_with(['e', 'E'])
            && suffix
                .get(1..)
                .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()));
        if is_float || exponent {
            let text = self.text(start, self.pos).to_owned();
            self.error(
                "E0105",
                whole,
                format!("`{text}` is a floating-point number"),
                "not an integer",
                Some("plans have no floats: use an integer, a scaled integer or a string"),
            );
            self.push(TokenKind::Int(value.unwrap_or(0)), start, true);
            return;
        }
        let digits = self.text(start, digits_end).to_owned();
        let too_large = |what: &str| {
            format!(
                "{what} `{digits}` is too large (the largest integer is {})",
                u64::MAX
            )
        };
        match suffix.as_str() {
            "" => match value {
                Some(v) => self.push(TokenKind::Int(v), start, false),
                None => {
                    self.error("E0104", whole, too_large("integer"), "too large", None);
                    self.push(TokenKind::Int(0), start, true);
                }
            },
            "ms" | "s" => {
                let factor = if suffix == "s" { 1000 } else { 1 };
                match value.and_then(|v| v.checked_mul(factor)) {
                    Some(ms) => self.push(TokenKind::Duration(ms), start, false),
                    None => {
                        let msg = format!(
                            "duration `{digits}{suffix}` is too large (at most {} ms)",
                            u64::MAX
                        );
                        self.error("E0104", whole, msg, "too large", None);
                        self.push(TokenKind::Duration(0), start, true);
                    }
                }
            }
            _ => {
                self.error(
                    "E0106",
                    span(suffix_start, self.pos),
                    format!("unknown suffix `{suffix}` after the number `{digits}`"),
                    "unknown suffix",
                    Some(
                        "a number is plain digits; a duration ends in `ms` or `s` (`500ms`, `30s`)",
                    ),
                );
                self.push(TokenKind::Int(value.unwrap_or(0)), start, true);
            }
        }
    }

    fn string(&mut self) {
        let start = self.pos;
        self.pos += 1; // the opening quote
        let mut out = String::new();
        let mut bad = false;
        loop {
            match self.peek() {
                None | Some('\n') => {
                    self.error(
                        "E0102",
                        span(start, self.pos),
                        "unterminated string: a string must end on the line it starts".to_owned(),
                        "string starts here",
                        Some("close it with `\"`; write a line break inside a string as `\\n`"),
                    );
                    self.tokens.push(Token {
                        kind: TokenKind::Str(out),
                        span: span(start, self.pos),
                        line_start: self.line_start,
                        lex_error: true,
                        unterminated: true,
                    });
                    self.line_start = false;
                    return;
                }
                Some('"') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') => {
                    if let Some(c) = self.escape() {
                        out.push(c);
                    } else {
                        bad = true;
                    }
                }
                Some(c) => {
                    self.pos += c.len_utf8();
                    out.push(c);
                }
            }
        }
        self.push(TokenKind::Str(out), start, bad);
    }

    /// At a backslash inside a string: the escaped character, or None after reporting a bad escape.
    fn escape(&mut self) -> Option<char> {
        const HINT: &str = "the escapes are `\\\"`, `\\\\`, `\\n`, `\\t`, `\\r` and `\\u{HEX}`";
        let start = self.pos;
        self.pos += 1; // the backslash
        let c = match self.peek() {
            // The line or file ends: the caller reports the unterminated string.
            None | Some('\n') => return None,
            Some(c) => c,
        };
        self.pos += c.len_utf8();
        let simple = match c {
            '"' => Some('"'),
            '\\' => Some('\\'),
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            _ => None,
        };
        if simple.is_some() {
            return simple;
        }
        if c != 'u' {
            let msg = format!("unknown escape `\\{c}` in a string");
            self.error(
                "E0103",
                span(start, self.pos),
                msg,
                "unknown escape",
                Some(HINT),
            );
            return None;
        }
        // `\u{HEX}`: one to six hex digits naming a Unicode scalar value.
        let well_formed = 'parse: {
            if self.peek() != Some('{') {
                break 'parse None;
            }
            self.pos += 1;
            let digits_start = self.pos;
            self.eat_while(|c| c.is_ascii_hexdigit());
            let digits = self.text(digits_start, self.pos).to_owned();
            if self.peek() != Some('}') {
                break 'parse None;
            }
            self.pos += 1;
            if digits.is_empty() || digits.len() > 6 {
                break 'parse None;
            }
            Some(
                u32::from_str_radix(&digits, 16)
                    .ok()
                    .and_then(char::from_u32),
            )
        };
        match well_formed {
            Some(Some(ch)) => Some(ch),
            Some(None) => {
                let text = self.text(start, self.pos).to_owned();
                let msg = format!("`{text}` is not a Unicode scalar value");
                self.error(
                    "E0103",
                    span(start, self.pos),
                    msg,
                    "invalid code point",
                    Some(HINT),
                );
                None
            }
            None => {
                let text = self.text(start, self.pos).to_owned();
                let msg = format!("malformed Unicode escape `{text}`");
                let hint =
                    "write a Unicode escape as `\\u{` one to six hex digits `}`, e.g. `\\u{1F600}`";
                self.error(
                    "E0103",
                    span(start, self.pos),
                    msg,
                    "malformed escape",
                    Some(hint),
                );
                None
            }
        }
    }

    /// `'...'` on one line: reported, but kept as a string so the parser does not cascade.
    fn single_quoted(&mut self) {
        let start = self.pos;
        // Only as far as the next quote or line end, so a line of quotes stays linear.
        let after = self.rest().get(1..).unwrap_or("");
        let close = match after.find(['\'', '\n']) {
            Some(i) if after.as_bytes().get(i) == Some(&b'\'') => Some(i),
            _ => None,
        };
        let Some(close) = close else {
            self.pos += 1;
            self.unexpected(start);
            return;
        };
        let content = self.text(start + 1, start + 1 + close).to_owned();
        self.pos = start + 1 + close + 1;
        self.error(
            "E0101",
            span(start, start + 1),
            "unexpected character `'`: strings use double quotes".to_owned(),
            "single quote",
            Some("write the string as `\"...\"`"),
        );
        self.push(TokenKind::Str(content), start, true);
    }

    fn punctuation(&mut self, c: char) {
        let start = self.pos;
        self.pos += c.len_utf8();
        let next = self.peek();
        let kind = match c {
            '{' => TokenKind::LBrace,
            '}' => TokenKind::RBrace,
            '[' => TokenKind::LBracket,
            ']' => TokenKind::RBracket,
            '(' => TokenKind::LParen,
            ')' => TokenKind::RParen,
            ',' => TokenKind::Comma,
            ':' => TokenKind::Colon,
            '+' => TokenKind::Plus,
            '-' => TokenKind::Minus,
            '*' => TokenKind::Star,
            '/' => TokenKind::Slash,
            '%' => TokenKind::Percent,
            '.' => TokenKind::Dot,
            '=' if next == Some('=') => {
                self.pos += 1;
                TokenKind::EqEq
            }
            '=' => TokenKind::Assign,
            '!' if next == Some('=') => {
                self.pos += 1;
                TokenKind::NotEq
            }
            '<' if next == Some('=') => {
                self.pos += 1;
                TokenKind::Le
            }
            '<' => TokenKind::Lt,
            '>' if next == Some('=') => {
                self.pos += 1;
                TokenKind::Ge
            }
            '>' => TokenKind::Gt,
            _ => {
                self.unexpected(start);
                return;
            }
        };
        self.push(kind, start, false);
    }

    /// Reports a run of characters no token starts with as one diagnostic (the first is consumed).
    fn unexpected(&mut self, start: usize) {
        // `!` alone is not a token, but `!=` is: stop a run before it.
        while let Some(c) = self.peek() {
            if (is_known_start(c) && c != '!') || (c == '!' && self.peek2() == Some('=')) {
                break;
            }
            self.pos += c.len_utf8();
        }
        let text = self.text(start, self.pos).to_owned();
        let hint = match text.as_str() {
            "!" => Some("negation is written `not`"),
            "&" | "&&" => Some("logical and is written `and`"),
            "|" | "||" => Some("logical or is written `or`"),
            "'" => Some("strings use double quotes: `\"...\"`"),
            ";" => Some("remove the `;`: statements need no terminator"),
            _ => None,
        };
        // Control characters (a NUL, an escape) would print as nothing or garble the terminal:
        // show them escaped.
        let shown: String = text
            .chars()
            .take(16)
            .map(|c| {
                if c.is_control() {
                    c.escape_debug().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect();
        let (what, label) = if text.chars().count() == 1 {
            (
                format!("unexpected character `{shown}`"),
                "unexpected character",
            )
        } else {
            (
                format!("unexpected characters `{shown}`"),
                "unexpected characters",
            )
        };
        self.error("E0101", span(start, self.pos), what, label, hint);
        // Where the intent is plain, stand in the right operator so the parser does not
        // report the same mistake again as a missing operand.
        let stand_in = match text.as_str() {
            "!" => Some(Keyword::Not),
            "&&" => Some(Keyword::And),
            "||" => Some(Keyword::Or),
            _ => None,
        };
        if let Some(k) = stand_in {
            self.push(TokenKind::Keyword(k), start, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::KEYWORDS;

    fn kinds(src: &str) -> Vec<TokenKind> {
        lex(src).0.into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn keywords_are_ast_keywords_plus_null() {
        let mine: Vec<&str> = Keyword::ALL.iter().map(|k| k.as_str()).collect();
        let mut want: Vec<&str> = KEYWORDS.to_vec();
        want.push("null");
        assert_eq!(mine, want);
        for k in Keyword::ALL {
            assert_eq!(Keyword::from_word(k.as_str()), Some(k));
        }
    }

    #[test]
    fn durations_numbers_and_capabilities() {
        use TokenKind::*;
        assert_eq!(
            kinds("30s 500ms 7"),
            vec![Duration(30_000), Duration(500), Int(7), Eof]
        );
        assert_eq!(
            kinds("grant fs:read:/a/**/*.txt\ngrant \"x y\""),
            vec![
                Keyword(self::Keyword::Grant),
                Capability("fs:read:/a/**/*.txt".into()),
                Keyword(self::Keyword::Grant),
                Str("x y".into()),
                Eof
            ]
        );
        let (_, d) = lex("1.5 10m 99999999999999999999 \"\\q\" @");
        let codes: Vec<&str> = d.iter().map(|d| d.code).collect();
        assert_eq!(codes, ["E0105", "E0106", "E0104", "E0103", "E0101"]);
    }

    #[test]
    fn strings_unescape_and_stop_at_line_end() {
        assert_eq!(
            kinds(r#""a\"b\\\n\t\r\u{1F600}""#)[0],
            TokenKind::Str("a\"b\\\n\t\r\u{1F600}".into())
        );
        let (toks, d) = lex("\"open\nx");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].code, "E0102");
        assert!(toks[0].unterminated);
        assert_eq!(toks[1].kind, TokenKind::Ident("x".into()));
        assert!(toks[1].line_start);
    }
}
