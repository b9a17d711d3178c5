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
    /// `src` (the text it was found in). One diagnostic: for many, [`Diagnostic::to_json_at`]
    /// with one [`LineIndex`] of the text, or [`json_capped`].
    pub fn to_json(&self, src: &str) -> serde_json::Value {
        self.to_json_at(&LineIndex::new(src))
    }

    /// [`Diagnostic::to_json`] with positions from `lines`, built once for every diagnostic of
    /// a text (each position then costs O(log n) instead of a scan of the text).
    pub fn to_json_at(&self, lines: &LineIndex<'_>) -> serde_json::Value {
        let (line, column) = lines.line_col(self.span.start);
        let (end_line, end_column) = lines.line_col(self.span.end);
        let related: Vec<_> = self
            .related
            .iter()
            .map(|(s, label)| {
                let (l, c) = lines.line_col(s.start);
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

/// Bytes of text per block of [`LineIndex`]'s character counts: a column is found by counting
/// at most this many bytes past the nearest block start, so it costs O(1) even on a line of
/// megabytes, for 8 bytes of index per block.
const CHARS_BLOCK_BYTES: usize = 256;

/// Lines and character counts of a text, built once in O(n) so that the line and column of
/// any offset cost O(log n): rendering every diagnostic of a plan with [`line_col`] instead
/// scans the text from its start for each, quadratic in a plan full of mistakes.
#[derive(Clone, Debug)]
pub struct LineIndex<'a> {
    src: &'a str,
    /// Byte offset where each line starts (after each `\n`); the first is 0.
    line_starts: Vec<usize>,
    /// Characters before byte `i * CHARS_BLOCK_BYTES`, for each block of the text.
    block_chars: Vec<u64>,
}

impl<'a> LineIndex<'a> {
    pub fn new(src: &'a str) -> LineIndex<'a> {
        let bytes = src.as_bytes();
        let mut line_starts = vec![0];
        line_starts.extend(
            (0..bytes.len())
                .filter(|&i| bytes[i] == b'\n')
                .map(|i| i + 1),
        );
        let mut block_chars = Vec::with_capacity(bytes.len() / CHARS_BLOCK_BYTES + 1);
        let mut chars = 0u64;
        for block in bytes.chunks(CHARS_BLOCK_BYTES) {
            block_chars.push(chars);
            chars += char_starts(block);
        }
        block_chars.push(chars);
        LineIndex {
            src,
            line_starts,
            block_chars,
        }
    }

    /// What [`line_col`] gives for `offset`: 1-based line and column (in characters).
    pub fn line_col(&self, offset: u32) -> (u32, u32) {
        let offset = (offset as usize).min(self.src.len());
        let line = self.line_starts.partition_point(|&s| s <= offset);
        let start = self
            .line_starts
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or(0);
        let col = self.chars_before(offset) - self.chars_before(start) + 1;
        (to_u32(line as u64), to_u32(col))
    }

    /// The bytes of the line holding `offset` (without its `\n`) and how many characters
    /// they are.
    pub fn line_of(&self, offset: u32) -> (std::ops::Range<usize>, u64) {
        let offset = (offset as usize).min(self.src.len());
        let line = self.line_starts.partition_point(|&s| s <= offset);
        let start = self
            .line_starts
            .get(line.wrapping_sub(1))
            .copied()
            .unwrap_or(0);
        let end = self
            .line_starts
            .get(line)
            .map_or(self.src.len(), |next| next - 1);
        let chars = self.chars_before(end) - self.chars_before(start);
        (start..end, chars)
    }

    /// Characters that start before byte `offset` (a character `offset` falls inside counts).
    fn chars_before(&self, offset: usize) -> u64 {
        let block = offset / CHARS_BLOCK_BYTES;
        let from = block * CHARS_BLOCK_BYTES;
        let counted = self.block_chars.get(block).copied().unwrap_or(0);
        counted + char_starts(self.src.as_bytes().get(from..offset).unwrap_or(&[]))
    }
}

/// Characters starting in `bytes`: every byte but UTF-8's continuation bytes (`10xxxxxx`).
fn char_starts(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b & 0xC0 != 0x80).count() as u64
}

fn to_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Most diagnostics a front end that serves others reports for one plan (the API's answer to
/// a run, a fork or a schedule with a plan; the language server's diagnostics of a document);
/// past it one more counts the rest ([`capped`]). A person reads the first few dozen; a plan
/// of a million mistakes would otherwise make a response of hundreds of megabytes, built on
/// the server's CPU. `oracle plan check` on one's own machine reports every one.
pub const DIAGNOSTICS_MAX: usize = 100;

/// `diags` in the order given, at most [`DIAGNOSTICS_MAX`] of them, then, when some were left
/// out, one more (`E0226`, at the first left out, an error if any left out is) saying how many.
pub fn capped(diags: &[Diagnostic]) -> Vec<Diagnostic> {
    let mut shown: Vec<Diagnostic> = diags.iter().take(DIAGNOSTICS_MAX).cloned().collect();
    let rest = diags.get(DIAGNOSTICS_MAX..).unwrap_or(&[]);
    let Some(first) = rest.first() else {
        return shown;
    };
    let errors = rest
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    let mut more = Diagnostic::error(
        "E0226",
        first.span,
        format!(
            "and {} more diagnostic{} ({errors} error{}) not shown: at most diagnostics_max = {DIAGNOSTICS_MAX} are reported",
            rest.len(),
            if rest.len() == 1 { "" } else { "s" },
            if errors == 1 { "" } else { "s" },
        ),
        "the next one is here",
    )
    .with_hint("`oracle plan check` on the plan reports every one");
    if errors == 0 {
        more.severity = Severity::Warning;
    }
    shown.push(more);
    shown
}

/// The first [`DIAGNOSTICS_MAX`] diagnostics of `src` as JSON ([`capped`]), with one index
/// of the text for all their positions.
pub fn json_capped(src: &str, diags: &[Diagnostic]) -> Vec<serde_json::Value> {
    let lines = LineIndex::new(src);
    capped(diags).iter().map(|d| d.to_json_at(&lines)).collect()
}

/// Most work one check spends on "did you mean" suggestions, in cells of the edit-distance
/// table (a few nanoseconds each), over all of its diagnostics. A suggestion compares a name
/// with every candidate, so a plan of n unknown names among n steps would cost n² (4,000 of
/// them took 3 s); within this budget the first dozens of mistakes of a 10,000-step plan get
/// their suggestion (about 40 ms here), and the rest are reported without one.
pub const SUGGESTION_CELLS_MAX: u64 = 10_000_000;

thread_local! {
    /// Cells left for suggestions in the check running on this thread; `None` outside one. A
    /// thread-local rather than a parameter: suggestions are made in the parser, the compiler,
    /// the type check and their recursion into loop bodies and sub-plans, and one budget must
    /// cover them all. It is spent in the check's own deterministic order, so one text always
    /// gets the same suggestions.
    static SUGGESTION_CELLS_LEFT: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// While alive, suggestions on this thread spend one budget of [`SUGGESTION_CELLS_MAX`]: the
/// outermost check starts it, the checks nested in it (loop bodies, sub-plans) share it.
pub(crate) struct SuggestionBudget {
    outermost: bool,
}

impl SuggestionBudget {
    pub(crate) fn enter() -> SuggestionBudget {
        let outermost = SUGGESTION_CELLS_LEFT.with(|left| {
            let fresh = left.get().is_none();
            if fresh {
                left.set(Some(SUGGESTION_CELLS_MAX));
            }
            fresh
        });
        SuggestionBudget { outermost }
    }
}

impl Drop for SuggestionBudget {
    fn drop(&mut self) {
        if self.outermost {
            SUGGESTION_CELLS_LEFT.with(|left| left.set(None));
        }
    }
}

/// Takes `cells` from the running check's budget; false when it has not that many left (then
/// it is spent). Outside a check nothing is counted: those callers offer a few fixed names.
fn spend(cells: u64) -> bool {
    SUGGESTION_CELLS_LEFT.with(|left| match left.get() {
        None => true,
        Some(n) if n >= cells => {
            left.set(Some(n - cells));
            true
        }
        Some(_) => {
            left.set(Some(0));
            false
        }
    })
}

/// The closest of `candidates` to `name`, if close enough to be a likely typo (ties to the
/// least name). Inside a check, `None` once its suggestion budget is spent, even part way
/// through the candidates: no suggestion rather than a worse one.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let len = name.chars().count();
    let limit = (len / 3).max(1) + 1;
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let c_len = c.chars().count();
        // The distance is at least the difference in length: farther ones are not computed.
        let near = len.abs_diff(c_len) <= limit;
        let table = if near {
            (len as u64) * (c_len as u64)
        } else {
            0
        };
        if !spend(1 + c_len as u64 + table) {
            return None;
        }
        if near {
            let d = edit_distance(name, c);
            if d <= limit && best.is_none_or(|b| (d, c) < b) {
                best = Some((d, c));
            }
        }
    }
    best.map(|(_, c)| c)
}

/// Levenshtein distance over characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
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

    proptest::proptest! {
        /// The index gives what the scan from the start gives, at every offset of any text
        /// (multi-byte characters, offsets inside them, past the end, lines longer than a block).
        #[test]
        fn line_index_agrees_with_line_col(
            parts in proptest::collection::vec("[a\\né😀\r]{0,40}|x{250,300}", 0..12),
            extra in 0u32..8,
        ) {
            let src: String = parts.concat();
            let ix = LineIndex::new(&src);
            for offset in 0..=(src.len() as u32 + extra) {
                proptest::prop_assert_eq!(ix.line_col(offset), line_col(&src, offset), "at {}", offset);
                // The line, as a scan back and forth from the offset finds it.
                let at = (offset as usize).min(src.len());
                let bytes = src.as_bytes();
                let start = bytes[..at].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                let end = bytes[at..].iter().position(|&b| b == b'\n').map_or(src.len(), |i| at + i);
                let chars = src[start..end].chars().count() as u64;
                proptest::prop_assert_eq!(ix.line_of(offset), (start..end, chars));
            }
        }
    }

    #[test]
    fn past_diagnostics_max_one_more_counts_the_rest() {
        let at = |i: u32, severity| Diagnostic {
            severity,
            ..Diagnostic::error("E0204", Span::new(i, i + 1), "unknown name", "here")
        };
        let few: Vec<_> = (0..DIAGNOSTICS_MAX as u32)
            .map(|i| at(i, Severity::Error))
            .collect();
        assert_eq!(capped(&few), few);
        let mut many: Vec<_> = (0..250).map(|i| at(i, Severity::Warning)).collect();
        many[200].severity = Severity::Error;
        let shown = capped(&many);
        assert_eq!(shown.len(), DIAGNOSTICS_MAX + 1);
        assert_eq!(&shown[..DIAGNOSTICS_MAX], &many[..DIAGNOSTICS_MAX]);
        let last = &shown[DIAGNOSTICS_MAX];
        assert_eq!((last.code, last.severity), ("E0226", Severity::Error));
        assert_eq!(last.span, many[DIAGNOSTICS_MAX].span);
        assert!(
            last.message
                .starts_with("and 150 more diagnostics (1 error)"),
            "{}",
            last.message
        );
        let src = "x".repeat(300);
        assert_eq!(json_capped(&src, &many).len(), DIAGNOSTICS_MAX + 1);
    }

    #[test]
    fn suggestions_stop_when_the_checks_budget_is_spent() {
        let names: Vec<String> = (0..1000).map(|i| format!("step_{i:04}")).collect();
        let ask = || closest("step_0999x", names.iter().map(String::as_str));
        // Outside a check, and in a fresh one, the typo is found.
        assert_eq!(ask(), Some("step_0999"));
        {
            let _budget = SuggestionBudget::enter();
            // A nested check shares the budget rather than starting another.
            let _nested = SuggestionBudget::enter();
            let per_ask = 1000 * (1 + 9 + 10 * 9);
            let fit = SUGGESTION_CELLS_MAX / per_ask;
            for _ in 0..fit {
                assert_eq!(ask(), Some("step_0999"));
            }
            assert_eq!(ask(), None, "past the budget, no suggestion");
        }
        // The budget ends with the outermost check.
        assert_eq!(ask(), Some("step_0999"));
    }

    #[test]
    fn line_col_counts_characters() {
        let src = "ab\ncdé\nx";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 3), (2, 1));
        assert_eq!(line_col(src, 8), (3, 1));
    }
}
