//! The one place text becomes HTML: escaping for text and attribute values, element ids, URL
//! path segments, and shortening long values.
//!
//! Everything a page shows from a log (step names, values, questions, reasons) is chosen by
//! whoever wrote the plan or answered it, so it is hostile until escaped. Pages build markup
//! only from constant strings and the output of these functions.

use std::fmt::Write as _;

/// `s` as HTML text or as a double-quoted attribute value: `&`, `<`, `>`, `"` and `'` become
/// character references, and control characters other than tab, newline and carriage return
/// (which HTML forbids, and which a log may hold) become U+FFFD.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Prose (a reason, an error, an event's summary) as HTML text: [`escape`]d, with each
/// `` `name` `` the messages use to quote a name shown as `<code>name</code>` rather than with
/// its backticks. An unpaired backtick, or an empty pair, stays as written.
pub fn prose(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    let mut rest = s;
    while let Some(open) = rest.find('`') {
        let after = &rest[open + 1..];
        match after.find('`') {
            Some(close) if close > 0 => {
                out.push_str(&escape(&rest[..open]));
                out.push_str("<code>");
                out.push_str(&escape(&after[..close]));
                out.push_str("</code>");
                rest = &after[close + 1..];
            }
            _ => break,
        }
    }
    out.push_str(&escape(rest));
    out
}

/// A part of an element id: ASCII letters, digits, `-` and `_` kept, every other character
/// `_`. Run ids and step names are identifiers already (`escalation-1`, `confirm`); this only
/// keeps an odd directory name or a loop step (`ask[0]`) from breaking an id or a CSS
/// selector. Never empty (an empty part is `_`).
pub fn id_part(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() { "_".to_owned() } else { out }
}

/// `s` as one URL path segment or query value: unreserved characters (RFC 3986) kept, every
/// other byte percent-encoded, so a run id can never add a path segment, a query or a scheme.
pub fn url_part(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

// The host's view shortens event summaries the same way, so the one definition lives there.
pub use oracle_host::view::shorten;

/// A JSON value as text: compact when short, else pretty-printed, then [`shorten`]ed to
/// `max` characters. Not escaped: pass the result through [`escape`].
pub fn json_text(v: &serde_json::Value, max: usize) -> String {
    let compact = v.to_string();
    let text = if compact.chars().count() <= 60 {
        compact
    } else {
        serde_json::to_string_pretty(v).unwrap_or(compact)
    };
    shorten(&text, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_become_references() {
        assert_eq!(
            escape(r#"<script>alert("x") & 'y'</script>"#),
            "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;"
        );
        // Already-escaped text is escaped again: a log's `&lt;` is shown as written.
        assert_eq!(escape("&lt;"), "&amp;lt;");
        assert_eq!(escape("plain text, 42 ✓"), "plain text, 42 ✓");
    }

    #[test]
    fn control_characters_are_replaced_but_whitespace_kept() {
        assert_eq!(escape("a\u{0}b\u{1b}[31mc"), "a\u{fffd}b\u{fffd}[31mc");
        assert_eq!(escape("a\tb\nc\r"), "a\tb\nc\r");
    }

    #[test]
    fn quoted_names_in_prose_become_code() {
        assert_eq!(
            prose("step `fetch` failed: no field `x.y`"),
            "step <code>fetch</code> failed: no field <code>x.y</code>"
        );
        // Escaped inside and out: a backtick pair is no way in for markup.
        assert_eq!(
            prose("a <b> `<i>` & c"),
            "a &lt;b&gt; <code>&lt;i&gt;</code> &amp; c"
        );
        // Unpaired or empty: kept as written.
        assert_eq!(prose("it's `odd"), "it&#39;s `odd");
        assert_eq!(prose("`a` and `b"), "<code>a</code> and `b");
        assert_eq!(prose("``"), "``");
        assert_eq!(prose("no quotes"), "no quotes");
    }

    #[test]
    fn id_parts_keep_only_safe_characters() {
        assert_eq!(id_part("escalation-1"), "escalation-1");
        assert_eq!(id_part("ask[0]"), "ask_0_");
        assert_eq!(id_part("a b\"><x"), "a_b___x");
        assert_eq!(id_part(""), "_");
    }

    #[test]
    fn url_parts_cannot_add_segments_or_queries() {
        assert_eq!(url_part("quickstart-1"), "quickstart-1");
        assert_eq!(url_part("../x?y=1#z"), "..%2Fx%3Fy%3D1%23z");
        assert_eq!(url_part("é"), "%C3%A9");
        assert_eq!(url_part("javascript:alert(1)"), "javascript%3Aalert%281%29");
    }

    #[test]
    fn long_text_is_shortened_on_a_character_boundary() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("ééééé", 2), "éé… (3 more characters)");
        let v = serde_json::json!({"k": "x".repeat(100)});
        assert!(json_text(&v, 20).starts_with("{\n  \"k\": \"xxxxxxx"));
    }
}
