//! The names of a plan, as the editor features need them: where each input, step and loop
//! variable is defined, where each is referred to, and where tool and argument names stand.
//! Built from the parser's tree, which keeps every statement that parsed, so a plan being typed
//! (with errors elsewhere) still has its names.

use oracle_plan::ast::{Call, Expr, ExprKind, Ident, InputType, Plan, Span, Step};

/// What a name defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DefKind {
    Input(InputType),
    /// A step calling this tool (`for`/`repeat` for a loop step).
    Step {
        tool: String,
        looped: bool,
    },
    /// The variable of a `for` loop.
    LoopVar,
}

/// A definition. `scope` is the index (in `Symbols::defs`) of the loop step whose body holds
/// it, `None` at the top level.
#[derive(Clone, Debug)]
pub struct Def {
    pub name: String,
    pub span: Span,
    pub kind: DefKind,
    pub scope: Option<usize>,
}

/// A name referred to: the root of a reference, or a step after `after`.
#[derive(Clone, Debug)]
pub struct Ref {
    pub name: String,
    pub span: Span,
    pub scope: Option<usize>,
}

#[derive(Clone, Debug, Default)]
pub struct Symbols {
    pub defs: Vec<Def>,
    pub refs: Vec<Ref>,
    /// Tool names in calls (first tier and fallback), with their spans.
    pub tools: Vec<(Span, String)>,
    /// Argument names: (span, argument, tool).
    pub args: Vec<(Span, String, String)>,
}

impl Symbols {
    pub fn of(plan: &Plan) -> Symbols {
        let mut s = Symbols::default();
        for i in &plan.inputs {
            s.def(&i.name, DefKind::Input(i.ty.node), None);
            if let Some(d) = &i.default {
                s.expr(d, None);
            }
        }
        for step in &plan.steps {
            s.step(step, None);
        }
        s
    }

    /// The definition `name` (referred to from `scope`) resolves to: a loop body's own names
    /// first, then the top level.
    pub fn resolve(&self, name: &str, scope: Option<usize>) -> Option<&Def> {
        let find = |sc: Option<usize>| self.defs.iter().find(|d| d.name == name && d.scope == sc);
        scope.and_then(|sc| find(Some(sc))).or_else(|| find(None))
    }

    /// The step named `name` anywhere in the plan (for completing its fields).
    pub fn step_tool(&self, name: &str) -> Option<&str> {
        self.defs.iter().find_map(|d| match &d.kind {
            DefKind::Step {
                tool,
                looped: false,
            } if d.name == name => Some(tool.as_str()),
            _ => None,
        })
    }

    fn def(&mut self, name: &Ident, kind: DefKind, scope: Option<usize>) -> usize {
        self.defs.push(Def {
            name: name.node.clone(),
            span: name.span,
            kind,
            scope,
        });
        self.defs.len() - 1
    }

    fn step(&mut self, step: &Step, scope: Option<usize>) {
        let looped = step.body.is_some();
        let tool = step.call.tool.node.clone();
        let id = self.def(&step.name, DefKind::Step { tool, looped }, scope);
        match &step.body {
            Some(b) => {
                if let Some(items) = &b.items {
                    self.expr(items, scope);
                }
                if let Some(v) = &b.var {
                    self.def(v, DefKind::LoopVar, Some(id));
                }
                for inner in &b.steps {
                    self.step(inner, Some(id));
                }
                if let Some(until) = &b.until {
                    self.expr(until, Some(id));
                }
            }
            None => self.call(&step.call, scope),
        }
        for name in &step.after {
            self.refs.push(Ref {
                name: name.node.clone(),
                span: name.span,
                scope,
            });
        }
        for e in [&step.when, &step.expect].into_iter().flatten() {
            self.expr(e, scope);
        }
        if let Some(c) = &step.fallback {
            self.call(c, scope);
        }
    }

    fn call(&mut self, c: &Call, scope: Option<usize>) {
        self.tools.push((c.tool.span, c.tool.node.clone()));
        for a in &c.args {
            self.args
                .push((a.name.span, a.name.node.clone(), c.tool.node.clone()));
            self.expr(&a.value, scope);
        }
    }

    /// The references in `e`. Iterative: expressions nest up to the parser's limit, and a
    /// walk of the editor's analysis must not be the thing that runs out of stack.
    fn expr(&mut self, e: &Expr, scope: Option<usize>) {
        let mut todo = vec![e];
        while let Some(e) = todo.pop() {
            match &e.kind {
                ExprKind::Ref(p) => self.refs.push(Ref {
                    name: p.root.node.clone(),
                    span: p.root.span,
                    scope,
                }),
                ExprKind::List(items) => todo.extend(items),
                ExprKind::Map(entries) => todo.extend(entries.iter().map(|(_, v)| v)),
                ExprKind::Unary(_, x) => todo.push(x),
                ExprKind::Binary(_, l, r) => todo.extend([&**l, &**r]),
                ExprKind::Null | ExprKind::Bool(_) | ExprKind::Int(_) | ExprKind::Str(_) => {}
            }
        }
    }
}

/// Whether byte `offset` is on `span` (its end included: the cursor just after a name is on it).
pub fn on(span: Span, offset: usize) -> bool {
    span.start as usize <= offset && offset <= span.end as usize
}
