//! Canonical formatting of a plan, and span stripping for comparing trees. `parse(print(p))`
//! gives back `p` up to spans, for any plan the parser produced and any tree whose names are
//! identifiers (not keywords), whose fields and tool name parts are words, and whose `Int`
//! literals are non-negative (the parser reads `-5` as negation of `5`).
//!
//! Layout: the header, then grants, inputs and steps, each group after one blank line; each
//! step's clauses on their own lines, indented two spaces, in a fixed order (after, when, expect,
//! retry, fallback, on failure, timeout). Parentheses appear only where precedence needs them.

use crate::ast::{
    Arg, BinaryOp, Body, Call, Expr, ExprKind, Ident, Input, LoopKind, MemoryStore, Path, Plan,
    Segment, Span, Spanned, Step, UnaryOp, Use,
};
use crate::lexer::{is_bare_capability, is_word};

/// The plan in canonical form, ending with a newline.
pub fn print(plan: &Plan) -> String {
    let mut out = String::new();
    out.push_str("plan ");
    out.push_str(&plan.name.node);
    out.push_str(" version ");
    out.push_str(&plan.version.node.to_string());
    out.push('\n');
    if !plan.grants.is_empty() {
        out.push('\n');
        for g in &plan.grants {
            out.push_str("grant ");
            if is_bare_capability(&g.node) {
                out.push_str(&g.node);
            } else {
                string(&mut out, &g.node);
            }
            out.push('\n');
        }
    }
    if !plan.uses.is_empty() {
        out.push('\n');
        for u in &plan.uses {
            out.push_str("use ");
            string(&mut out, &u.path.node);
            out.push_str(" as ");
            out.push_str(&u.alias.node);
            out.push('\n');
        }
    }
    if !plan.tools.is_empty() {
        out.push('\n');
        for t in &plan.tools {
            out.push_str("tools ");
            string(&mut out, &t.node);
            out.push('\n');
        }
    }
    if let Some(m) = &plan.memory {
        out.push_str("\nmemory ");
        match &m.node {
            MemoryStore::Named(n) => string(&mut out, n),
            MemoryStore::Input(i) => out.push_str(&format!("input.{i}")),
        }
        out.push('\n');
    }
    if let Some(q) = &plan.queue {
        out.push_str("\nqueue ");
        string(&mut out, &q.node);
        out.push('\n');
    }
    if !plan.inputs.is_empty() {
        out.push('\n');
        for i in &plan.inputs {
            input(&mut out, i);
        }
    }
    if !plan.steps.is_empty() {
        out.push('\n');
        for s in &plan.steps {
            step(&mut out, s);
        }
    }
    out
}

/// One expression in canonical form (for messages and tests).
pub fn print_expr(e: &Expr) -> String {
    let mut out = String::new();
    expr(&mut out, e, 0);
    out
}

fn input(out: &mut String, i: &Input) {
    out.push_str("input ");
    out.push_str(&i.name.node);
    out.push_str(": ");
    out.push_str(i.ty.node.as_str());
    if let Some(d) = &i.default {
        out.push_str(" = ");
        expr(out, d, 0);
    }
    out.push('\n');
}

fn step(out: &mut String, s: &Step) {
    out.push_str(&s.name.node);
    out.push_str(" = ");
    match &s.body {
        Some(b) => body(out, b),
        None => call(out, &s.call),
    }
    out.push('\n');
    if !s.after.is_empty() {
        out.push_str("  after ");
        let names: Vec<&str> = s.after.iter().map(|n| n.node.as_str()).collect();
        out.push_str(&names.join(", "));
        out.push('\n');
    }
    if let Some(e) = &s.when {
        out.push_str("  when ");
        expr(out, e, 0);
        out.push('\n');
    }
    if let Some(e) = &s.expect {
        out.push_str("  expect ");
        expr(out, e, 0);
        out.push('\n');
    }
    if let Some(e) = &s.retry_policy {
        out.push_str("  retry ");
        expr(out, e, 0);
        out.push('\n');
    }
    if let Some(n) = &s.retry {
        out.push_str(&format!("  retry {}\n", n.node));
    }
    if let Some(c) = &s.fallback {
        out.push_str("  fallback ");
        call(out, c);
        out.push('\n');
    }
    if let Some(p) = &s.on_failure {
        out.push_str("  on failure ");
        out.push_str(p.node.as_str());
        out.push('\n');
    }
    if let Some(ms) = &s.timeout_ms {
        let ms = ms.node;
        // Whole seconds read better; anything else stays exact in milliseconds.
        if ms != 0 && ms % 1000 == 0 {
            out.push_str(&format!("  timeout {}s\n", ms / 1000));
        } else {
            out.push_str(&format!("  timeout {ms}ms\n"));
        }
    }
    if let Some(u) = &s.undo {
        out.push_str(&format!("  undo {}\n", u.node));
    }
}

/// `for x in ITEMS max N {` … `}` or `repeat {` … `} until COND max N`, the body's steps
/// indented two spaces.
fn body(out: &mut String, b: &Body) {
    match b.kind {
        LoopKind::For => {
            out.push_str("for ");
            out.push_str(b.var.as_ref().map_or("_", |v| v.node.as_str()));
            out.push_str(" in ");
            if let Some(items) = &b.items {
                expr(out, items, 0);
            }
            out.push_str(&format!(" max {} {{\n", b.max.node));
        }
        LoopKind::Repeat => out.push_str("repeat {\n"),
        // A sub-plan's body is never printed: its call is (see `step`).
        LoopKind::Use => {}
    }
    for s in &b.steps {
        let mut inner = String::new();
        step(&mut inner, s);
        for line in inner.lines() {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push('}');
    if b.kind == LoopKind::Repeat {
        out.push_str(" until ");
        if let Some(until) = &b.until {
            expr(out, until, 0);
        }
        out.push_str(&format!(" max {}", b.max.node));
    }
}

/// A call on one line: `tool {}` or `tool { a: x, b: y }`.
pub(crate) fn call(out: &mut String, c: &Call) {
    out.push_str(&c.tool.node);
    if c.args.is_empty() {
        out.push_str(" {}");
        return;
    }
    out.push_str(" { ");
    for (i, a) in c.args.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&a.name.node);
        out.push_str(": ");
        expr(out, &a.value, 0);
    }
    out.push_str(" }");
}

// Binding levels, loosest first. `not` sits between `and` and the comparisons.
const OR: u8 = 1;
const AND: u8 = 2;
const NOT: u8 = 3;
const CMP: u8 = 4;
const ADD: u8 = 5;
const MUL: u8 = 6;
const NEG: u8 = 7;
const ATOM: u8 = 8;

fn level(e: &Expr) -> u8 {
    match &e.kind {
        ExprKind::Binary(op, _, _) => match op {
            BinaryOp::Or => OR,
            BinaryOp::And => AND,
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => CMP,
            BinaryOp::Add | BinaryOp::Sub => ADD,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => MUL,
        },
        ExprKind::Unary(UnaryOp::Not, _) => NOT,
        ExprKind::Unary(UnaryOp::Neg, _) => NEG,
        // Printed with a leading `-`, so it binds like negation.
        ExprKind::Int(n) if *n < 0 => NEG,
        _ => ATOM,
    }
}

/// Prints `e`, in parentheses if it binds more loosely than `min` requires.
fn expr(out: &mut String, e: &Expr, min: u8) {
    let lv = level(e);
    let paren = lv < min;
    if paren {
        out.push('(');
    }
    match &e.kind {
        ExprKind::Null => out.push_str("null"),
        ExprKind::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        ExprKind::Int(n) => out.push_str(&n.to_string()),
        ExprKind::Str(s) => string(out, s),
        ExprKind::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                expr(out, item, 0);
            }
            out.push(']');
        }
        ExprKind::Map(entries) => {
            // `secret("NAME")` is sugar for this map (parser.rs): printed as it was written.
            if let Some(name) = secret_name(entries) {
                out.push_str("secret(");
                string(out, name);
                out.push(')');
            } else if entries.is_empty() {
                out.push_str("{}");
            } else {
                out.push_str("{ ");
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    if is_word(&k.node) {
                        out.push_str(&k.node);
                    } else {
                        string(out, &k.node);
                    }
                    out.push_str(": ");
                    expr(out, v, 0);
                }
                out.push_str(" }");
            }
        }
        ExprKind::Ref(p) => path(out, p),
        ExprKind::Unary(UnaryOp::Not, x) => {
            out.push_str("not ");
            expr(out, x, NOT);
        }
        ExprKind::Unary(UnaryOp::Neg, x) => {
            out.push('-');
            expr(out, x, NEG);
        }
        ExprKind::Binary(op, l, r) => {
            // Left-associative levels allow their own level on the left; comparisons do not
            // associate, so both sides must bind tighter.
            let left_min = if lv == CMP { lv + 1 } else { lv };
            expr(out, l, left_min);
            out.push(' ');
            out.push_str(op.as_str());
            out.push(' ');
            expr(out, r, lv + 1);
        }
    }
    if paren {
        out.push(')');
    }
}

/// The name in `{"$secret": "NAME"}`, the map `secret("NAME")` stands for.
pub(crate) fn secret_name(entries: &[(Spanned<String>, Expr)]) -> Option<&str> {
    match entries {
        [
            (
                k,
                Expr {
                    kind: ExprKind::Str(name),
                    ..
                },
            ),
        ] if k.node == "$secret" => Some(name),
        _ => None,
    }
}

fn path(out: &mut String, p: &Path) {
    out.push_str(&p.root.node);
    for s in &p.segments {
        match s {
            Segment::Field(f) => {
                out.push('.');
                out.push_str(&f.node);
            }
            Segment::Index(i) => out.push_str(&format!("[{}]", i.node)),
        }
    }
}

/// A string literal: quotes, the five escapes, and `\u{..}` for other control characters.
pub(crate) fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:X}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A copy of `plan` with every span set to the default, for comparing trees.
pub fn strip_spans(plan: &Plan) -> Plan {
    Plan {
        name: ident(&plan.name),
        version: bare(plan.version.node),
        grants: plan.grants.iter().map(ident).collect(),
        inputs: plan
            .inputs
            .iter()
            .map(|i| Input {
                name: ident(&i.name),
                ty: bare(i.ty.node),
                default: i.default.as_ref().map(strip_expr),
            })
            .collect(),
        uses: plan
            .uses
            .iter()
            .map(|u| Use {
                path: bare(u.path.node.clone()),
                alias: ident(&u.alias),
            })
            .collect(),
        tools: plan.tools.iter().map(|t| bare(t.node.clone())).collect(),
        memory: plan.memory.as_ref().map(|m| bare(m.node.clone())),
        queue: plan.queue.as_ref().map(|q| bare(q.node.clone())),
        steps: plan.steps.iter().map(strip_step).collect(),
    }
}

/// A copy of `e` with every span set to the default.
pub fn strip_expr(e: &Expr) -> Expr {
    let kind = match &e.kind {
        ExprKind::Null => ExprKind::Null,
        ExprKind::Bool(b) => ExprKind::Bool(*b),
        ExprKind::Int(n) => ExprKind::Int(*n),
        ExprKind::Str(s) => ExprKind::Str(s.clone()),
        ExprKind::List(items) => ExprKind::List(items.iter().map(strip_expr).collect()),
        ExprKind::Map(entries) => ExprKind::Map(
            entries
                .iter()
                .map(|(k, v)| (ident(k), strip_expr(v)))
                .collect(),
        ),
        ExprKind::Ref(p) => ExprKind::Ref(Path {
            root: ident(&p.root),
            segments: p
                .segments
                .iter()
                .map(|s| match s {
                    Segment::Field(f) => Segment::Field(ident(f)),
                    Segment::Index(i) => Segment::Index(bare(i.node)),
                })
                .collect(),
        }),
        ExprKind::Unary(op, x) => ExprKind::Unary(*op, Box::new(strip_expr(x))),
        ExprKind::Binary(op, l, r) => {
            ExprKind::Binary(*op, Box::new(strip_expr(l)), Box::new(strip_expr(r)))
        }
    };
    Expr {
        kind,
        span: Span::default(),
    }
}

fn strip_step(s: &Step) -> Step {
    Step {
        name: ident(&s.name),
        call: strip_call(&s.call),
        after: s.after.iter().map(ident).collect(),
        when: s.when.as_ref().map(strip_expr),
        expect: s.expect.as_ref().map(strip_expr),
        retry: s.retry.as_ref().map(|r| bare(r.node)),
        retry_policy: s.retry_policy.as_ref().map(strip_expr),
        undo: s.undo.as_ref().map(ident),
        fallback: s.fallback.as_ref().map(strip_call),
        on_failure: s.on_failure.as_ref().map(|p| bare(p.node)),
        timeout_ms: s.timeout_ms.as_ref().map(|t| bare(t.node)),
        body: s.body.as_ref().map(|b| {
            Box::new(Body {
                kind: b.kind,
                var: b.var.as_ref().map(ident),
                items: b.items.as_ref().map(strip_expr),
                until: b.until.as_ref().map(strip_expr),
                max: bare(b.max.node),
                steps: b.steps.iter().map(strip_step).collect(),
            })
        }),
        span: Span::default(),
    }
}

fn strip_call(c: &Call) -> Call {
    Call {
        tool: ident(&c.tool),
        args: c
            .args
            .iter()
            .map(|a| Arg {
                name: ident(&a.name),
                value: strip_expr(&a.value),
            })
            .collect(),
        span: Span::default(),
    }
}

fn ident(i: &Ident) -> Ident {
    bare(i.node.clone())
}

fn bare<T>(node: T) -> Spanned<T> {
    Spanned::new(node, Span::default())
}
