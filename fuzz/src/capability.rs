//! Fuzz target `capability`: arbitrary UTF-8 text, one capability per line, through the
//! capability parser, path normalisation, the glob matcher, `Capability::covers` (the compiler's
//! static check) and `oracle_runtime::access::lexical` (the runtime's check, without the file
//! system), every line as a grant against every line as a needed capability.
//!
//! Properties checked, beyond "never panics":
//! - a line parses exactly when it has the documented shape and, for a grant that reaches
//!   paths (domain `fs`, `proc` or `*`), no `..` component; parse → to_string → parse is the
//!   identity;
//! - normalisation is idempotent, leaves no `.`, `..` or empty component, and refuses exactly
//!   the paths whose `..` climbs above their start;
//! - `glob_match` agrees with an independent matcher written from the documented rules;
//! - `covers` is the documented rule; matching is reflexive for literal normalised scopes; the
//!   grant `*:*:**` covers everything that normalises; and `..` never climbs out of a grant:
//!   whatever a grant covers resolves to a path that starts with the grant's fixed prefix (also
//!   for paths built as that prefix followed by the line, such as `data/` + `../../etc`);
//! - the runtime never allows what the compiler denies (docs/ARCHITECTURE.md): a relative path
//!   `lexical` allows is covered by some grant, and never one that climbs out.

use std::path::Path;

use oracle_core::capability::{
    Capability, CapabilityError, PATH_DOMAINS, glob_match, normalize_path,
};
use oracle_runtime::access;

/// Lines compared pairwise, at most; longer inputs are checked line by line only.
const PAIR_LINES: usize = 16;
/// Longest scope compared pairwise (the matchers are quadratic).
const PAIR_SCOPE_CHARS: usize = 256;
/// The working directory `lexical` is given (it never touches the file system).
const ROOT: &str = "/fuzz/root";

/// Checks every property above on one input (inputs that are not UTF-8 are skipped).
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Grants are what parses; needed capabilities are every line of the documented shape,
    // built field by field as a call builds them (they may hold `..`, which grants may not).
    let mut caps = Vec::new();
    let mut needed = Vec::new();
    for line in text.split('\n') {
        check_normalize(line);
        match line.parse::<Capability>() {
            Ok(c) => {
                check_parsed(line, &c);
                check_normalize(&c.scope);
                caps.push(c);
            }
            Err(e) => check_refused(line, &e),
        }
        if let Some(n) = shaped(line) {
            needed.push(n);
        }
    }
    let small = |c: &Capability| c.scope.chars().count() <= PAIR_SCOPE_CHARS;
    let caps: Vec<Capability> = caps.into_iter().filter(small).take(PAIR_LINES).collect();
    let needed: Vec<Capability> = needed.into_iter().filter(small).take(PAIR_LINES).collect();
    for g in &caps {
        check_grant(g);
        for n in &needed {
            check_pair(g, n);
            let escape = Capability {
                domain: n.domain.clone(),
                action: n.action.clone(),
                scope: format!("{}{}", literal_prefix(&g.scope), n.scope),
            };
            check_pair(g, &escape);
        }
    }
    for n in &needed {
        check_lexical(&caps, n);
    }
}

/// `line` as a needed capability when it has the documented shape, split field by field.
fn shaped(line: &str) -> Option<Capability> {
    if !grammar_accepts(line) {
        return None;
    }
    let (domain, rest) = line.split_once(':')?;
    let (action, scope) = rest.split_once(':')?;
    Some(Capability {
        domain: domain.to_owned(),
        action: action.to_owned(),
        scope: scope.to_owned(),
    })
}

/// The documented rule for grants beyond the shape: one that reaches paths (domain `fs`,
/// `proc` or `*`) has no `..` component in its scope.
fn grant_rule_accepts(s: &str) -> bool {
    let mut parts = s.splitn(3, ':');
    let (Some(domain), Some(_), Some(scope)) = (parts.next(), parts.next(), parts.next()) else {
        return true;
    };
    let paths = domain == "*" || PATH_DOMAINS.contains(&domain);
    !(paths && scope.split('/').any(|c| c == ".."))
}

/// The documented grammar: `domain:action:scope`, domain and action `*` or lowercase letters,
/// digits, `_`, `-`, `.`; the scope non-empty, without whitespace or control characters.
fn grammar_accepts(s: &str) -> bool {
    let word = |w: &str| {
        w == "*"
            || (!w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.".contains(&b)))
    };
    let Some((domain, rest)) = s.split_once(':') else {
        return false;
    };
    let Some((action, scope)) = rest.split_once(':') else {
        return false;
    };
    word(domain)
        && word(action)
        && !scope.is_empty()
        && !scope.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn check_parsed(line: &str, c: &Capability) {
    assert!(
        grammar_accepts(line) && grant_rule_accepts(line),
        "`{line:?}` parsed, against the grammar"
    );
    assert_eq!(c.to_string(), line, "to_string gives back the text");
    assert_eq!(c.to_string().parse::<Capability>().as_ref(), Ok(c));
}

fn check_refused(line: &str, e: &CapabilityError) {
    assert!(
        !(grammar_accepts(line) && grant_rule_accepts(line)),
        "`{line:?}` refused ({e}), against the grammar"
    );
    assert_eq!(
        matches!(e, CapabilityError::DotDot(_)),
        grammar_accepts(line),
        "`{line:?}`: refused for a `..` exactly when it has the shape ({e})"
    );
    assert!(!e.to_string().is_empty());
}

/// Normalisation, against a count of how deep the path goes.
fn check_normalize(path: &str) {
    let mut depth = 0i64;
    let mut climbs_out = false;
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                climbs_out |= depth < 0;
            }
            _ => depth += 1,
        }
    }
    let Some(n) = normalize_path(path) else {
        assert!(
            climbs_out,
            "`{path:?}` refused, but it never climbs above its start"
        );
        return;
    };
    assert!(
        !climbs_out,
        "`{path:?}` climbs above its start, yet normalises to `{n:?}`"
    );
    assert_eq!(
        normalize_path(&n).as_deref(),
        Some(n.as_str()),
        "idempotent"
    );
    assert_eq!(
        n.starts_with('/'),
        path.starts_with('/'),
        "absolute stays absolute"
    );
    let body = n.strip_prefix('/').unwrap_or(&n);
    assert!(
        body.is_empty()
            || body
                .split('/')
                .all(|p| !p.is_empty() && p != "." && p != ".."),
        "`{path:?}` normalises to `{n:?}`"
    );
    assert_eq!(
        body.split('/').filter(|p| !p.is_empty()).count() as i64,
        depth,
        "`{path:?}` normalises to `{n:?}`"
    );
}

fn word_covers(grant: &str, needed: &str) -> bool {
    grant == "*" || grant == needed
}

fn is_path(c: &Capability) -> bool {
    PATH_DOMAINS.contains(&c.domain.as_str())
}

/// A grant's scope as the pattern it is matched with: a `net` grant naming an origin is
/// normalised like the origins it covers.
fn pattern(g: &Capability) -> String {
    match g.domain.as_str() {
        "net" => oracle_core::capability::url_origin(&g.scope).unwrap_or_else(|_| g.scope.clone()),
        _ => g.scope.clone(),
    }
}

/// What a grant's scope matches without a wildcard: everything before its first `*`.
fn literal_prefix(scope: &str) -> &str {
    scope.split('*').next().unwrap_or("")
}

/// The scope a grant must match, by the documented rule: normalised for the path domains
/// (`None` if it climbs out), and a program named by a path that normalises to a bare name
/// keeps its `./`.
fn subject(n: &Capability) -> Option<String> {
    // Network scopes are URL origins (`url_origin` has its own unit tests).
    if n.domain == "net" {
        return oracle_core::capability::url_origin(&n.scope).ok();
    }
    if !is_path(n) {
        return Some(n.scope.clone());
    }
    let normal = normalize_path(&n.scope)?;
    let bare = !normal.contains('/');
    if n.domain == "proc" && n.scope.contains('/') && bare {
        return Some(format!("./{normal}"));
    }
    Some(normal)
}

fn check_grant(g: &Capability) {
    let everything = Capability {
        domain: "*".into(),
        action: "*".into(),
        scope: "**".into(),
    };
    assert_eq!(
        everything.covers(g),
        subject(g).is_some(),
        "`*:*:**` covers `{g}` exactly when it normalises"
    );
    let literal = !g.scope.contains('*');
    if literal && subject(g).as_deref() == Some(pattern(g).as_str()) {
        assert!(g.covers(g), "`{g}` does not cover itself");
    }
}

fn check_pair(g: &Capability, n: &Capability) {
    assert_eq!(
        glob_match(&g.scope, &n.scope),
        reference_glob(&g.scope, &n.scope),
        "glob_match({:?}, {:?})",
        g.scope,
        n.scope
    );
    let covered = g.covers(n);
    let subject = subject(n);
    let pattern = pattern(g);
    let expected = word_covers(&g.domain, &n.domain)
        && word_covers(&g.action, &n.action)
        && subject
            .as_deref()
            .is_some_and(|s| reference_glob(&pattern, s));
    assert_eq!(covered, expected, "`{g}` covers `{n}`");
    if covered {
        let s = subject.as_deref().unwrap_or_default();
        let prefix = literal_prefix(&pattern);
        assert!(
            s.starts_with(prefix),
            "`{g}` covers `{n}`, which resolves to `{s}`, outside the grant's prefix `{prefix}`"
        );
    }
    if is_path(n)
        && let Some(s) = subject
    {
        let normal = Capability {
            scope: s,
            ..n.clone()
        };
        assert_eq!(
            g.covers(&normal),
            covered,
            "`{g}` on `{n}` and on `{normal}`"
        );
    }
}

/// The runtime's lexical check never allows what the compiler's check denies (for paths named
/// relative to the working directory; absolute ones inside it are made relative at run time,
/// which the compiler cannot know).
fn check_lexical(grants: &[Capability], n: &Capability) {
    let root = Path::new(ROOT);
    let Ok(by) = access::lexical(grants, n, root) else {
        return;
    };
    let g = grants
        .iter()
        .find(|g| g.to_string() == by)
        .unwrap_or_else(|| panic!("`{n}` allowed by `{by}`, which is not a grant"));
    assert!(word_covers(&g.domain, &n.domain) && word_covers(&g.action, &n.action));
    let normal = subject(n);
    assert!(
        normal.is_some(),
        "`{n}` climbs out, yet the runtime allows it by `{by}`"
    );
    if !n.scope.starts_with('/') {
        assert!(
            grants.iter().any(|g| g.covers(n)),
            "the runtime allows `{n}` (by `{by}`), the compiler's check denies it"
        );
    }
    if n.domain == "fs"
        && let Some(s) = normal
        && s.starts_with('/')
        && !Path::new(&s).starts_with(root)
    {
        assert!(
            g.scope.starts_with('/'),
            "`{n}` is outside the working directory, allowed by the relative `{by}`"
        );
    }
}

/// Glob matching written from the documented rules, by dynamic programming from the end:
/// `*` matches any run of characters other than `/`, `**` any run at all, anything else itself.
fn reference_glob(pattern: &str, text: &str) -> bool {
    enum Tok {
        Char(char),
        Star,
        DoubleStar,
    }
    let p: Vec<char> = pattern.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < p.len() {
        if p[i] == '*' && p.get(i + 1) == Some(&'*') {
            toks.push(Tok::DoubleStar);
            i += 2;
        } else {
            toks.push(if p[i] == '*' {
                Tok::Star
            } else {
                Tok::Char(p[i])
            });
            i += 1;
        }
    }
    let t: Vec<char> = text.chars().collect();
    // m[j]: tokens from the current one on match t[j..]. Start after the last token.
    let mut m: Vec<bool> = (0..=t.len()).map(|j| j == t.len()).collect();
    for tok in toks.iter().rev() {
        let mut next = vec![false; t.len() + 1];
        for j in (0..=t.len()).rev() {
            next[j] = match tok {
                Tok::Char(c) => j < t.len() && t[j] == *c && m[j + 1],
                Tok::Star => m[j] || (j < t.len() && t[j] != '/' && next[j + 1]),
                Tok::DoubleStar => m[j] || (j < t.len() && next[j + 1]),
            };
        }
        m = next;
    }
    m[0]
}
