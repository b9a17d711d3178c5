//! Whether a diagnostic's place overlaps one already reported, in O(log n) per question: the
//! check leaves out a compiler diagnostic where the parser already reported one, and a type
//! diagnostic the compiler already gave. Asked of every diagnostic against every other, that
//! was quadratic in a plan full of mistakes.

use std::collections::BTreeSet;

use crate::ast::Span;
use crate::diagnostic::Diagnostic;

/// The bytes a diagnostic covers when comparing places: its span, or the byte at its start
/// when the span is empty.
fn covered(s: Span) -> (u32, u32) {
    (s.start, s.end.max(s.start.saturating_add(1)))
}

/// A fixed set of places, sorted by start with the furthest end reached so far.
pub(crate) struct Places {
    starts: Vec<u32>,
    reach: Vec<u32>,
}

impl Places {
    pub(crate) fn new(spans: impl Iterator<Item = Span>) -> Places {
        let mut all: Vec<(u32, u32)> = spans.map(covered).collect();
        all.sort_unstable();
        let mut far = 0;
        let reach = all
            .iter()
            .map(|&(_, end)| {
                far = far.max(end);
                far
            })
            .collect();
        Places {
            starts: all.into_iter().map(|(start, _)| start).collect(),
            reach,
        }
    }

    /// Whether any place of the set overlaps `s`: of those starting before `s` ends, the
    /// furthest end is past its start.
    pub(crate) fn overlaps(&self, s: Span) -> bool {
        let (start, end) = covered(s);
        let before = self.starts.partition_point(|&x| x < end);
        before
            .checked_sub(1)
            .and_then(|i| self.reach.get(i))
            .is_some_and(|&far| far > start)
    }
}

/// Reported diagnostics that grow as more are kept: whether one is said already, at its exact
/// span or overlapping one of its code. Places are keyed by (code, start) among all that may
/// be added, known up front; a max tree over the keys holds the furthest end at each.
pub(crate) struct Said {
    keys: Vec<(&'static str, u32)>,
    /// A segment tree of the furthest ends (leaves at `keys.len()..`).
    tree: Vec<u32>,
    spans: BTreeSet<Span>,
}

impl Said {
    /// Ready for diagnostics among `all` (the ones kept first and the ones asked about).
    pub(crate) fn new<'a>(all: impl Iterator<Item = &'a Diagnostic>) -> Said {
        let mut keys: Vec<(&'static str, u32)> = all.map(|x| (x.code, x.span.start)).collect();
        keys.sort_unstable();
        keys.dedup();
        let tree = vec![0; 2 * keys.len()];
        Said {
            keys,
            tree,
            spans: BTreeSet::new(),
        }
    }

    pub(crate) fn keep(&mut self, x: &Diagnostic) {
        self.spans.insert(x.span);
        let n = self.keys.len();
        let Ok(at) = self.keys.binary_search(&(x.code, x.span.start)) else {
            return;
        };
        let end = covered(x.span).1;
        let mut i = at + n;
        while let Some(node) = self.tree.get_mut(i).filter(|_| i > 0) {
            *node = (*node).max(end);
            i /= 2;
        }
    }

    /// Whether `x` repeats a kept diagnostic: the same span, or the same code at an
    /// overlapping place.
    pub(crate) fn said(&self, x: &Diagnostic) -> bool {
        if self.spans.contains(&x.span) {
            return true;
        }
        let (start, end) = covered(x.span);
        let lo = self.keys.partition_point(|k| *k < (x.code, 0));
        let hi = self.keys.partition_point(|k| *k < (x.code, end));
        self.furthest(lo, hi) > start
    }

    /// The furthest end kept at keys `lo..hi`.
    fn furthest(&self, lo: usize, hi: usize) -> u32 {
        let n = self.keys.len();
        let (mut l, mut r) = (lo + n, hi + n);
        let mut far = 0;
        let at = |i: usize| self.tree.get(i).copied().unwrap_or(0);
        while l < r {
            if l % 2 == 1 {
                far = far.max(at(l));
                l += 1;
            }
            if r % 2 == 1 {
                r -= 1;
                far = far.max(at(r));
            }
            l /= 2;
            r /= 2;
        }
        far
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether two places overlap, as [`covered`] counts them: the comparison the check made
    /// of every pair.
    fn overlap(a: Span, b: Span) -> bool {
        let ((a0, a1), (b0, b1)) = (covered(a), covered(b));
        a0 < b1 && b0 < a1
    }

    fn diag(code: &'static str, start: u32, end: u32) -> Diagnostic {
        Diagnostic::error(code, Span::new(start, end), "m", "l")
    }

    proptest::proptest! {
        /// Both structures answer what comparing with every place answers.
        #[test]
        fn answers_as_the_pairwise_comparison(
            kept in proptest::collection::vec((0u32..3, 0u32..40, 0u32..6), 0..30),
            asked in proptest::collection::vec((0u32..3, 0u32..40, 0u32..6), 0..30),
        ) {
            let codes = ["E0204", "E0218", "E0223"];
            let make = |&(c, s, w): &(u32, u32, u32)| diag(codes[c as usize], s, s + w);
            let kept: Vec<Diagnostic> = kept.iter().map(make).collect();
            let asked: Vec<Diagnostic> = asked.iter().map(make).collect();
            let places = Places::new(kept.iter().map(|d| d.span));
            let mut said = Said::new(kept.iter().chain(&asked));
            let mut so_far = kept.clone();
            kept.iter().for_each(|d| said.keep(d));
            for a in &asked {
                let any = kept.iter().any(|k| overlap(k.span, a.span));
                proptest::prop_assert_eq!(places.overlaps(a.span), any);
                let pairwise = so_far
                    .iter()
                    .any(|p| p.span == a.span || (p.code == a.code && overlap(p.span, a.span)));
                proptest::prop_assert_eq!(said.said(a), pairwise);
                if !pairwise {
                    said.keep(a);
                    so_far.push(a.clone());
                }
            }
        }
    }
}
