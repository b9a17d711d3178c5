//! Diagnostics: what is wrong with a plan, where, and what to do about it. Plain data; the CLI
//! renders them (with a source snippet and a caret) for people and as JSON for programs.

use serde::Serialize;

use crate::ast::Span;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

/// One problem in a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// Stable identifier of the kind of problem (`E0101`...); listed in docs/PLAN.md.
    pub code: &'static str,
    /// One line: what is wrong.
    pub message: String,
    /// Where.
    pub span: Span,
    /// Short text shown at the caret.
    pub label: String,
    /// Other places involved (the first definition of a duplicate, the steps of a cycle).
    pub related: Vec<(Span, String)>,
    /// What to do, when it is clear (`did you mean `fs.read`?`).
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn error(
        code: &'static str,
        span: Span,
        message: impl Into<String>,
        label: impl Into<String>,
    ) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            span,
            label: label.into(),
            related: Vec::new(),
            hint: None,
        }
    }

    /// The diagnostic as `plan check --json` and the API print it, positions as line:column of
    /// `src` (the text it was found in).
    pub fn to_json(&self, src: &str) -> serde_json::Value {
        let (line, column) = line_col(src, self.span.start);
        let (end_line, end_column) = line_col(src, self.span.end);
        let related: Vec<_> = self
            .related
            .iter()
            .map(|(s, label)| {
                let (l, c) = line_col(src, s.start);
                serde_json::json!({"line": l, "column": c, "label": label})
            })
            .collect();
        serde_json::json!({
            "severity": self.severity, "code": self.code, "message": self.message,
            "line": line, "column": column, "end_line": end_line, "end_column": end_column,
            "label": self.label, "hint": self.hint, "related": related,
        })
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    pub fn with_related(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.related.push((span, label.into()));
        self
    }
}

/// 1-based line and column (in characters) of byte `offset` in `src`.
pub fn line_col(src: &str, offset: u32) -> (u32, u32) {
    let offset = (offset as usize).min(src.len());
    let mut line = 1u32;
    let mut col = 1u32;
    for (i, c) in src.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
    }
    (line, col)
}

/// The closest of `candidates` to `name`, if close enough to be a likely typo.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1) + 1;
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

/// Levenshtein distance over characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_typos_only() {
        let tools = ["fs.read", "fs.write", "text.count"];
        assert_eq!(closest("fs.raed", tools), Some("fs.read"));
        assert_eq!(closest("text.cont", tools), Some("text.count"));
        assert_eq!(closest("network.get", tools), None);
    }

    #[test]
    fn line_col_counts_characters() {
        let src = "ab\ncdé\nx";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 3), (2, 1));
        assert_eq!(line_col(src, 8), (3, 1));
    }
}
