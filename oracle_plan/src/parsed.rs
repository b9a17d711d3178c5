//! The last plan text parsed on this thread, kept so that starting a run parses its plan once
//! (issue 42, item 3). `oracle run` asks for a plan's tool directories and memory line before
//! it can build the tool registry, then compiles the plan, then reads the sub-plans it uses:
//! each was a parse of its own, five of a 10,000-step plan's text, a fifth of the whole run's
//! instructions. Parsing is a pure function of the text, so a parse kept under the text's hash
//! gives the same answers as parsing again.
//!
//! What is kept is bounded: one entry per thread. The full tree is kept only from a question
//! about the outline ([`outline`]) until the compiler takes it ([`take`]); after that, only the
//! outline (a few paths), so a run holds no more of its plan's tree than before.

use std::cell::RefCell;

use oracle_core::hash::{Hash, hash_in};

use crate::ast::Plan;
use crate::diagnostic::Diagnostic;

/// A parse: the tree if one could be built, and every problem found.
pub(crate) type Parse = (Option<Plan>, Vec<Diagnostic>);

/// The hash context of a kept parse's key (never written anywhere: a cache key only).
const KEY_CONTEXT: &str = "oracle v1 plan text parsed";

/// What a plan's text declares besides its steps, as the runtime asks before compiling:
/// empty (and no memory) when the text does not parse.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outline {
    pub uses: Vec<String>,
    /// The plans its `spawn` steps name with a literal `plan` (`crate::compile::spawns_of`).
    pub spawns: Vec<String>,
    pub tools: Vec<String>,
    pub memory: Option<String>,
    pub queue: Option<String>,
}

impl Outline {
    fn of(plan: Option<&Plan>) -> Outline {
        let Some(p) = plan else {
            return Outline::default();
        };
        Outline {
            uses: p.uses.iter().map(|u| u.path.node.clone()).collect(),
            spawns: p
                .steps
                .iter()
                .filter_map(crate::compile::spawned_plan)
                .collect(),
            tools: p.tools.iter().map(|t| t.node.clone()).collect(),
            memory: p.memory.as_ref().map(|m| m.node.to_flag()),
            queue: p.queue.as_ref().map(|q| q.node.clone()),
        }
    }
}

enum Kept {
    /// Parsed for its outline, not compiled yet: the compiler takes the tree.
    Full(Box<Parse>, Outline),
    /// Compiled already: the outline alone.
    Outline(Outline),
}

thread_local! {
    static LAST: RefCell<Option<(Hash, Kept)>> = const { RefCell::new(None) };
}

fn key(src: &str) -> Hash {
    hash_in(KEY_CONTEXT, src.as_bytes())
}

/// The outline of `src`: from the kept parse when it is this text's, else parsed now (and the
/// parse kept for the compiler).
pub(crate) fn outline(src: &str) -> Outline {
    let k = key(src);
    let hit = LAST.with_borrow(|last| match last {
        Some((h, Kept::Full(_, o) | Kept::Outline(o))) if *h == k => Some(o.clone()),
        _ => None,
    });
    if let Some(o) = hit {
        return o;
    }
    let parse = crate::parser::parse(src);
    let o = Outline::of(parse.0.as_ref());
    LAST.set(Some((k, Kept::Full(Box::new(parse), o.clone()))));
    o
}

/// The parse of `src` for the compiler: the kept one when it is this text's (and not taken
/// yet), else parsed now. Only the outline stays kept.
pub(crate) fn take(src: &str) -> Parse {
    let k = key(src);
    let parse = match LAST.take() {
        Some((h, Kept::Full(p, _))) if h == k => *p,
        _ => crate::parser::parse(src),
    };
    LAST.set(Some((k, Kept::Outline(Outline::of(parse.0.as_ref())))));
    parse
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str =
        "plan p version 1\ntools \"t\"\nuse \"sub.plan\" as sub\na = text.count { text: \"x\" }\n";

    #[test]
    fn a_kept_parse_is_the_parse_of_its_text() {
        let fresh = crate::parser::parse(PLAN);
        let o = outline(PLAN);
        assert_eq!(o.tools, vec!["t".to_string()]);
        assert_eq!(o.uses, vec!["sub.plan".to_string()]);
        assert_eq!(take(PLAN), fresh);
        // Taken: the outline is still answered, and a second take parses again.
        assert_eq!(outline(PLAN).uses, o.uses);
        assert_eq!(take(PLAN), fresh);
    }

    #[test]
    fn another_text_is_parsed_for_itself() {
        let other = "plan q version 1\nb = text.count { text: \"y\" }\n";
        let _ = outline(PLAN);
        assert_eq!(take(other), crate::parser::parse(other));
        assert!(outline(other).tools.is_empty());
        assert!(outline("not a plan").uses.is_empty());
    }
}
