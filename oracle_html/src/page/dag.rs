//! The plan's step graph as inline SVG: one column per level, steps as boxes coloured by
//! status (and labelled with it in words), arrows from each dependency.
//!
//! Laid out here rather than by Graphviz so a page needs no program and no request; the layout
//! is a pure function of the graph, so the same plan draws the same bytes.

use std::fmt::Write as _;

use crate::escape::{escape, id_part};
use crate::page::css::STATUS_COLOURS;
use crate::view::{Dag, StepStatus};

const NODE_W: u64 = 190;
const NODE_H: u64 = 54;
const COL_GAP: u64 = 56;
const ROW_GAP: u64 = 22;
const MARGIN: u64 = 12;
/// Characters of a step's name and of what it runs shown in its box (the table below the
/// drawing has them whole).
const NAME_CHARS: usize = 21;
const WHAT_CHARS: usize = 25;

/// Fill and stroke of a status.
pub fn colours(s: StepStatus) -> (&'static str, &'static str) {
    STATUS_COLOURS
        .iter()
        .find(|(name, _, _)| *name == s.as_str())
        .map_or(("#ffffff", "#000000"), |(_, f, st)| (*f, *st))
}

/// Top-left corner of step `i`'s box, if it is in a level.
fn position(dag: &Dag, i: usize) -> Option<(u64, u64)> {
    dag.graph
        .levels
        .iter()
        .enumerate()
        .find_map(|(col, level)| {
            level.iter().position(|&j| j == i).map(|row| {
                (
                    MARGIN + col as u64 * (NODE_W + COL_GAP),
                    MARGIN + row as u64 * (NODE_H + ROW_GAP),
                )
            })
        })
}

/// The drawing, as an `<svg>` element for inline use in HTML (which puts it in the SVG
/// namespace itself: no `xmlns`, so the page names no URL at all).
pub fn svg(dag: &Dag) -> String {
    let cols = dag.graph.levels.len() as u64;
    let rows = dag
        .graph
        .levels
        .iter()
        .map(|l| l.len() as u64)
        .max()
        .unwrap_or(0);
    let width = 2 * MARGIN + cols * NODE_W + cols.saturating_sub(1) * COL_GAP;
    let height = 2 * MARGIN + rows * NODE_H + rows.saturating_sub(1) * ROW_GAP;
    let mut out = String::new();
    // Writing to a String cannot fail: the results below are ignored for that reason.
    let _ = write!(
        out,
        r##"<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-labelledby="dag-title dag-desc">"##
    );
    let _ = write!(
        out,
        r##"<title id="dag-title">Step graph of plan {}</title><desc id="dag-desc">{} steps in {} levels, each box coloured and labelled with its status; the table below lists the same.</desc>"##,
        escape(&dag.graph.plan),
        dag.graph.steps.len(),
        cols
    );
    out.push_str(
        r##"<defs><marker id="dag-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#57606a"/></marker></defs>"##,
    );
    for (i, step) in dag.graph.steps.iter().enumerate() {
        let Some((x2, y2)) = position(dag, i) else {
            continue;
        };
        for dep in &step.deps {
            let Some(j) = dag.graph.steps.iter().position(|s| &s.name == dep) else {
                continue;
            };
            let Some((x1, y1)) = position(dag, j) else {
                continue;
            };
            let (x1, y1, y2) = (x1 + NODE_W, y1 + NODE_H / 2, y2 + NODE_H / 2);
            let mid = x1 + COL_GAP / 2;
            let _ = write!(
                out,
                r##"<path class="edge" d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}" fill="none" stroke="#57606a" stroke-width="1.5" marker-end="url(#dag-arrow)"/>"##
            );
        }
    }
    for (i, step) in dag.graph.steps.iter().enumerate() {
        let Some((x, y)) = position(dag, i) else {
            continue;
        };
        let status = dag
            .status
            .get(i)
            .map_or(StepStatus::NotStarted, |(s, _)| *s);
        let (fill, stroke) = colours(status);
        let dash = if status == StepStatus::NotStarted {
            r#" stroke-dasharray="5 3""#
        } else {
            ""
        };
        let _ = write!(
            out,
            r##"<g class="node {cls}" id="dag-step-{id}"><title>{name}: {word}</title><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" fill="{fill}" stroke="{stroke}" stroke-width="2"{dash}/><text x="{tx}" y="{ty1}" font-family="monospace" font-size="14" font-weight="bold" fill="#1b1f24">{short}</text><text x="{tx}" y="{ty2}" font-family="sans-serif" font-size="12" fill="#1b1f24">{what} · {word}</text></g>"##,
            cls = status.as_str(),
            id = id_part(&step.name),
            name = escape(&step.name),
            word = status.label(),
            tx = x + 8,
            ty1 = y + 21,
            ty2 = y + 41,
            short = escape(&shorten_plain(&step.name, NAME_CHARS)),
            what = escape(&shorten_plain(&step.what, WHAT_CHARS)),
        );
    }
    out.push_str("</svg>");
    out
}

/// `s` cut to `max` characters with a trailing `…` (no count: a box has no room).
fn shorten_plain(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oracle_plan::graph::{Graph, Node};

    fn dag(statuses: &[StepStatus]) -> Dag {
        let steps: Vec<Node> = statuses
            .iter()
            .enumerate()
            .map(|(i, _)| Node {
                name: format!("s{i}"),
                tool: "t".into(),
                what: "t".into(),
                deps: if i == 0 { vec![] } else { vec!["s0".into()] },
                level: u64::from(i != 0),
                body: None,
            })
            .collect();
        let n = steps.len();
        Dag {
            graph: Graph {
                plan: "p".into(),
                version: 1,
                hash: oracle_core::Hash::ZERO,
                order: (0..n).collect(),
                levels: vec![vec![0], (1..n).collect()],
                steps,
            },
            status: statuses.iter().map(|s| (*s, None)).collect(),
        }
    }

    #[test]
    fn each_step_is_coloured_and_labelled_by_its_status() {
        let all = StepStatus::ALL;
        let s = svg(&dag(&all));
        for (i, st) in all.iter().enumerate() {
            let (fill, stroke) = colours(*st);
            let node = format!(r#"<g class="node {}" id="dag-step-s{i}">"#, st.as_str());
            let at = s.find(&node).unwrap_or_else(|| panic!("{node} in {s}"));
            let rest = &s[at..];
            let end = rest.find("</g>").unwrap();
            let g = &rest[..end];
            assert!(
                g.contains(&format!(r#"fill="{fill}" stroke="{stroke}""#)),
                "{g}"
            );
            assert!(g.contains(&format!("· {}</text>", st.label())), "{g}");
        }
        // Five edges from s0, each ending in an arrow.
        assert_eq!(s.matches(r#"class="edge""#).count(), all.len() - 1);
        // Every status has its own colours.
        let fills: std::collections::BTreeSet<_> = all.iter().map(|s| colours(*s)).collect();
        assert_eq!(fills.len(), all.len());
    }

    #[test]
    fn names_are_escaped_and_shortened_inside_the_drawing() {
        let mut d = dag(&[StepStatus::Done]);
        d.graph.steps[0].name = "<b>&\"quoted\" and a very long step name".into();
        let s = svg(&d);
        assert!(!s.contains("<b>"), "{s}");
        assert!(
            s.contains("&lt;b&gt;&amp;&quot;quoted&quot; and a v…"),
            "{s}"
        );
        assert!(s.contains(r#"id="dag-step-_b___"#), "{s}");
    }
}
