//! What a plan needs bound before it runs: the models its `llm.chat` and `agent` calls name and
//! the secrets it reads (`secret("NAME")`). Pure: the runtime compares this with a new run's
//! bindings before it writes anything, so an unbound model refuses the run instead of failing
//! it forty events in.
//!
//! A model is known when its `model` argument is a constant, or can be evaluated from the run's
//! inputs (a sub-plan's from the arguments its step gives it, a loop body's for each item of a
//! list known at start); one read from a step's output is known only when the call is made.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::agent::{AGENT_TOOL, CHAT_TOOL};
use crate::ast::{Expr, ExprKind, LoopKind};
use crate::compile::{CompiledPlan, CompiledStep};
use crate::eval;

/// The map key `secret("NAME")` stands for (docs/PLAN.md, "Grammar").
pub const SECRET_KEY: &str = "$secret";

/// What a plan references that a run binds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Referenced {
    /// Model names, sorted.
    pub models: BTreeSet<String>,
    /// Secret names, sorted.
    pub secrets: BTreeSet<String>,
}

/// The models and secrets `plan` references, run with `inputs` (bound: every input has its
/// value or default).
pub fn referenced(plan: &CompiledPlan, inputs: &Map<String, Value>) -> Referenced {
    let mut r = Referenced::default();
    steps(&plan.steps, inputs, &mut r);
    r
}

fn steps(list: &[CompiledStep], env: &Map<String, Value>, r: &mut Referenced) {
    for s in list {
        for c in std::iter::once(&s.call).chain(s.fallback.as_ref()) {
            for e in c.args.values() {
                secrets(e, &mut r.secrets);
            }
            if (c.tool == CHAT_TOOL || c.tool == AGENT_TOOL)
                && let Some(m) = c.args.get("model")
            {
                model(m, env, r);
            }
        }
        for e in s.when.iter().chain(s.expect.iter()) {
            secrets(e, &mut r.secrets);
        }
        let Some(b) = s.body.as_deref() else {
            continue;
        };
        for e in b.items.iter().chain(b.until.iter()) {
            secrets(e, &mut r.secrets);
        }
        match (b.kind, &b.var, &b.items) {
            (LoopKind::Use, _, _) => {
                // The sub-plan's inputs: its defaults, with what the step gives it over them.
                let mut inner: Map<String, Value> = b
                    .plan
                    .inputs
                    .iter()
                    .filter_map(|i| Some((i.name.clone(), i.default.clone()?)))
                    .collect();
                for (name, e) in &s.call.args {
                    if let Ok(v) = eval::eval(e, env) {
                        inner.insert(name.clone(), v);
                    }
                }
                steps(&b.plan.steps, &inner, r);
            }
            (_, Some(var), Some(items)) => {
                let mut inner = env.clone();
                inner.remove(var);
                match eval::eval_ref(items, env).as_deref() {
                    Ok(Value::Array(list)) => {
                        for item in list {
                            inner.insert(var.clone(), item.clone());
                            steps(&b.plan.steps, &inner, r);
                        }
                    }
                    _ => steps(&b.plan.steps, &inner, r),
                }
            }
            _ => steps(&b.plan.steps, env, r),
        }
    }
}

/// The model `e` names, when it can be told before the run.
fn model(e: &Expr, env: &Map<String, Value>, r: &mut Referenced) {
    if let Ok(Value::String(name)) = eval::eval(e, env) {
        r.models.insert(name);
    }
}

/// Every `secret("NAME")` in `e`.
fn secrets(e: &Expr, out: &mut BTreeSet<String>) {
    match &e.kind {
        ExprKind::Map(entries) => {
            if let [(k, v)] = entries.as_slice()
                && k.node == SECRET_KEY
                && let ExprKind::Str(name) = &v.kind
            {
                out.insert(name.clone());
            }
            for (_, v) in entries {
                secrets(v, out);
            }
        }
        ExprKind::List(items) => items.iter().for_each(|x| secrets(x, out)),
        ExprKind::Unary(_, x) => secrets(x, out),
        ExprKind::Binary(_, l, r) => {
            secrets(l, out);
            secrets(r, out);
        }
        _ => {}
    }
}
