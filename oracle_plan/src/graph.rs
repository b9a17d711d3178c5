//! A compiled plan's step graph as plain data: each step's level, what it runs and what it
//! waits for, with a loop's or sub-plan's body nested under its step.
//!
//! `oracle plan graph` prints it (text, JSON) and the HTML pages draw it (`oracle_html`); both
//! read it from here so that they cannot disagree about a plan's shape.

use oracle_core::Hash;

use crate::agent::AGENT_TOOL;
use crate::ast::LoopKind;
use crate::compile::{CompiledPlan, CompiledStep};
use crate::print::print_expr;

/// The step graph of one plan (or of one loop's body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph {
    pub plan: String,
    pub version: u64,
    pub hash: Hash,
    /// Steps in declaration order.
    pub steps: Vec<Node>,
    /// Topological order: indices into `steps`.
    pub order: Vec<usize>,
    /// Steps by depth (indices into `steps`): every step's dependencies are in earlier levels.
    pub levels: Vec<Vec<usize>>,
}

/// One step of a [`Graph`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// The tool its call names (`for {}`, `repeat {}` or the sub-plan's path for a loop).
    pub tool: String,
    /// What it runs, as the graph shows it ([`what`]).
    pub what: String,
    /// Names of the steps it waits for (data and `after`), in declaration order.
    pub deps: Vec<String>,
    /// Its level: 0 for a step that waits for nothing.
    pub level: u64,
    /// A loop's or sub-plan's body.
    pub body: Option<Body>,
}

/// The steps a loop step runs per iteration, or a sub-plan step runs once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    pub kind: LoopKind,
    pub graph: Box<Graph>,
}

impl Body {
    /// How a body step is named in a run: `STEP/INNER` for a sub-plan, `INNER[i]` per
    /// iteration of a loop.
    pub fn shown(&self, outer: &str, inner: &str) -> String {
        if self.kind == LoopKind::Use {
            format!("{outer}/{inner}")
        } else {
            format!("{inner}[i]")
        }
    }
}

/// The graph of a compiled plan.
pub fn of(c: &CompiledPlan) -> Graph {
    let mut level_of = vec![0u64; c.steps.len()];
    for (n, level) in c.levels.iter().enumerate() {
        for &i in level {
            if let Some(slot) = level_of.get_mut(i as usize) {
                *slot = n as u64;
            }
        }
    }
    let name = |i: &u32| {
        c.steps
            .get(*i as usize)
            .map_or_else(String::new, |s| s.name.clone())
    };
    let steps = c
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| Node {
            name: s.name.clone(),
            tool: s.call.tool.clone(),
            what: what(s),
            deps: s.deps.iter().map(name).collect(),
            level: level_of[i],
            body: s.body.as_ref().map(|b| Body {
                kind: b.kind,
                graph: Box::new(of(&b.plan)),
            }),
        })
        .collect();
    Graph {
        plan: c.name.clone(),
        version: c.version,
        hash: c.hash,
        steps,
        order: c.order.iter().map(|&i| i as usize).collect(),
        levels: c
            .levels
            .iter()
            .map(|l| l.iter().map(|&i| i as usize).collect())
            .collect(),
    }
}

/// What a step runs, as the graph shows it: its tool, a loop's header, or an agent's tools.
pub fn what(s: &CompiledStep) -> String {
    match &s.body {
        Some(b) => match b.kind {
            LoopKind::For => format!(
                "for {} in {} max {}",
                b.var.as_deref().unwrap_or("_"),
                b.items.as_ref().map(print_expr).unwrap_or_default(),
                b.max
            ),
            LoopKind::Repeat => format!(
                "repeat until {} max {}",
                b.until.as_ref().map(print_expr).unwrap_or_default(),
                b.max
            ),
            LoopKind::Use => format!("sub-plan `{}` ({})", s.call.tool, b.plan.name),
        },
        None if s.call.tool == AGENT_TOOL => match s.call.args.get("tools") {
            Some(t) => format!("agent with {}", print_expr(t)),
            None => "agent".to_owned(),
        },
        None => s.call.tool.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(src: &str) -> CompiledPlan {
        use crate::catalogue::{ArgSpec, ArgType, Catalogue, ToolSpec};
        let cat = Catalogue::new([ToolSpec {
            name: "json.get".into(),
            version: "1".into(),
            description: "test".into(),
            args: vec![ArgSpec {
                name: "value".into(),
                ty: ArgType::Any,
                required: true,
            }],
            capability: None,
        }]);
        let (c, diags) = crate::check(src, &cat);
        c.unwrap_or_else(|| panic!("{diags:?}"))
    }

    #[test]
    fn levels_deps_and_order_follow_the_compiled_plan() {
        let c = compiled(
            "plan g version 2\na = json.get { value: 1 }\nb = json.get { value: a }\nc = json.get { value: a }\nd = json.get { value: [b, c] }\n",
        );
        let g = of(&c);
        assert_eq!(g.plan, "g");
        assert_eq!(g.version, 2);
        let names: Vec<&str> = g.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        assert_eq!(g.steps[3].deps, ["b", "c"]);
        assert_eq!(g.steps[3].level, 2);
        assert_eq!(g.levels, vec![vec![0], vec![1, 2], vec![3]]);
        assert_eq!(g.steps[0].what, "json.get");
    }
}
