//! Pure, deterministic evaluation of plan expressions over JSON values.
//!
//! Strictly typed, no implicit truthiness: `and`, `or`, `not` and `when` want booleans;
//! arithmetic is on integers, checked (overflow and division by zero are errors, never wrap);
//! `+` also joins two strings, a string and an integer (its decimal form), or two lists.
//! Comparisons `< <= > >=` order integers, or strings by their bytes; `==`/`!=` compare any
//! two values structurally. A field or index that is not there is an error, not `null`.
//!
//! Building is bounded. A reference reads its value where it is, without a copy; every value an
//! evaluation builds (a literal, a list, a map, a `+`, a copy of a value it names) is counted,
//! in the bytes of its canonical encoding, against a [`Budget`] before it is built, and an
//! evaluation that would hold more than the budget's limit stops with
//! [`EvalErrorKind::TooLarge`]. Without this, `[big, big, ...]` built a copy of `big` for each
//! reference before the runtime measured the input (200 references to a 7 MiB value: 2.9 GB at
//! peak; 2,000 aborted the process).

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::ast::{BinaryOp, Expr, ExprKind, Segment, Span, UnaryOp};

/// Where names come from: run inputs and the outputs of steps that have run.
pub trait Env {
    fn lookup(&self, name: &str) -> Option<&Value>;
}

impl Env for Map<String, Value> {
    fn lookup(&self, name: &str) -> Option<&Value> {
        self.get(name)
    }
}

impl Env for std::collections::BTreeMap<String, Value> {
    fn lookup(&self, name: &str) -> Option<&Value> {
        self.get(name)
    }
}

/// Most bytes one evaluation may build and hold at once, counted as [`build_cost`] counts them
/// (a value's canonical encoding, `oracle_core::canon`). Twice the runtime's largest tool input
/// (`input_bytes_max`, 8 MiB): the plan agent builds a call's whole input under one budget, so
/// an input the runtime takes is built as before, and one it refuses by name (a recorded failed
/// call) still reaches it unless it is about twice too large; while an expression naming one
/// large value thousands of times stops after building at most this much, instead of
/// exhausting memory before the runtime can measure it.
pub const BUILD_BYTES_MAX: u64 = 16 << 20;

/// What a scalar counts: an integer's canonical size (a tag and eight bytes). A null or a bool
/// encodes in one byte but takes 32 in memory, so counting it as one would let a budget hold
/// tens of times its size in memory. The cost: an input the runtime takes no longer fits when
/// it holds more than a million nulls and bools, which is not an input a plan builds.
const SCALAR_COST: u64 = 9;
/// What a list or a map counts besides its items: a tag and a length.
const CONTAINER_COST: u64 = 9;
/// What a map entry counts besides its value: the key's length.
const KEY_COST: u64 = 8;

/// Why an expression has no value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EvalError {
    pub span: Span,
    pub message: String,
    pub kind: EvalErrorKind,
}

/// The kinds of [`EvalError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvalErrorKind {
    /// The expression has no value: a type mismatch, a missing name, field or index, an
    /// overflow, a division by zero.
    NoValue,
    /// Its value would take more than `limit` bytes to build (see [`BUILD_BYTES_MAX`]); nothing
    /// past the limit was built.
    TooLarge { limit: u64 },
}

fn err<T>(span: Span, message: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError {
        span,
        message: message.into(),
        kind: EvalErrorKind::NoValue,
    })
}

fn too_large(span: Span, limit: u64) -> EvalError {
    EvalError {
        span,
        message: format!("the value would take more than build_bytes_max = {limit} bytes to build"),
        kind: EvalErrorKind::TooLarge { limit },
    }
}

/// Name of a value's type, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

fn int_of(v: &Value) -> Option<i128> {
    v.as_i64()
        .map(i128::from)
        .or_else(|| v.as_u64().map(i128::from))
}

fn int_value(n: i128, span: Span) -> Result<Value, EvalError> {
    if let Ok(i) = i64::try_from(n) {
        return Ok(Value::from(i));
    }
    match u64::try_from(n) {
        Ok(u) => Ok(Value::from(u)),
        Err(_) => err(
            span,
            format!("integer overflow: {n} is outside the range of 64-bit integers"),
        ),
    }
}

/// The bytes an evaluation may still build: [`BUILD_BYTES_MAX`] for one expression, or one
/// budget shared by several (the plan agent evaluates a call's arguments, which together are
/// its input, under one). Counts values built and still held; what an operator consumes (the
/// operands of `==`, the parts of a `+`) is given back when its result replaces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    limit: u64,
    held: u64,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget::new(BUILD_BYTES_MAX)
    }
}

impl Budget {
    pub fn new(limit: u64) -> Budget {
        Budget { limit, held: 0 }
    }

    /// Bytes built and still held.
    pub fn held(&self) -> u64 {
        self.held
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Takes `bytes` before they are built, or refuses.
    fn take(&mut self, bytes: u64, span: Span) -> Result<(), EvalError> {
        match self.held.checked_add(bytes) {
            Some(total) if total <= self.limit => {
                self.held = total;
                Ok(())
            }
            _ => Err(too_large(span, self.limit)),
        }
    }

    fn give_back(&mut self, bytes: u64) {
        self.held = self.held.saturating_sub(bytes);
    }

    fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.held)
    }
}

/// What `value` counts against a [`Budget`]: the length of its canonical encoding, except that
/// a null or a bool counts as much as an integer (9 bytes). `None` once that passes `within`:
/// the walk stops there, so measuring a value costs no more than building the part of it the
/// budget allows. Iterative (a value can nest deeper than the stack allows) and allocates only
/// one iterator per level of nesting.
pub fn build_cost(value: &Value, within: u64) -> Option<u64> {
    enum Items<'a> {
        List(std::slice::Iter<'a, Value>),
        Map(serde_json::map::Iter<'a>),
    }
    let mut total = 0u64;
    let mut stack: Vec<Items<'_>> = Vec::new();
    let mut next = Some(value);
    loop {
        if let Some(v) = next.take() {
            let cost = match v {
                Value::String(s) => SCALAR_COST.saturating_add(s.len() as u64),
                Value::Array(items) => {
                    stack.push(Items::List(items.iter()));
                    CONTAINER_COST
                }
                Value::Object(m) => {
                    stack.push(Items::Map(m.iter()));
                    CONTAINER_COST
                }
                _ => SCALAR_COST,
            };
            total = total.saturating_add(cost);
            if total > within {
                return None;
            }
        }
        let Some(top) = stack.last_mut() else {
            return Some(total);
        };
        match top {
            Items::List(items) => next = items.next(),
            Items::Map(entries) => {
                if let Some((k, v)) = entries.next() {
                    total = total.saturating_add(KEY_COST.saturating_add(k.len() as u64));
                    next = Some(v);
                }
            }
        }
        if next.is_none() {
            stack.pop();
        }
    }
}

/// A value an expression gave: borrowed where a reference found it, or built, holding `held`
/// bytes of the budget.
struct Got<'e> {
    value: Cow<'e, Value>,
    held: u64,
}

impl Got<'_> {
    fn built(value: Value, held: u64) -> Got<'static> {
        Got {
            value: Cow::Owned(value),
            held,
        }
    }
}

/// Builds a scalar result (a bool, an int) in place of operands holding `operands` bytes.
fn scalar<'e>(
    value: Value,
    operands: u64,
    span: Span,
    b: &mut Budget,
) -> Result<Got<'e>, EvalError> {
    b.give_back(operands);
    b.take(SCALAR_COST, span)?;
    Ok(Got::built(value, SCALAR_COST))
}

/// `got` as a value of its own: a borrowed one is copied, counted first.
fn own(got: Got<'_>, span: Span, b: &mut Budget) -> Result<(Value, u64), EvalError> {
    match got.value {
        Cow::Owned(v) => Ok((v, got.held)),
        Cow::Borrowed(v) => {
            let cost = build_cost(v, b.remaining()).ok_or_else(|| too_large(span, b.limit))?;
            b.take(cost, span)?;
            Ok((v.clone(), cost))
        }
    }
}

/// What `got` counts, measured if it is borrowed (`None`: more than the budget's limit).
fn cost_of(got: &Got<'_>, b: &Budget) -> Option<u64> {
    match &got.value {
        Cow::Owned(_) => Some(got.held),
        Cow::Borrowed(v) => build_cost(v, b.limit),
    }
}

/// Evaluates `expr` in `env`, building at most [`BUILD_BYTES_MAX`] bytes.
pub fn eval(expr: &Expr, env: &impl Env) -> Result<Value, EvalError> {
    eval_with(expr, env, &mut Budget::default())
}

/// [`eval`] under the caller's budget, which is left holding the value's bytes.
pub fn eval_with(expr: &Expr, env: &impl Env, budget: &mut Budget) -> Result<Value, EvalError> {
    let got = build(expr, env, budget)?;
    own(got, expr.span, budget).map(|(v, _)| v)
}

/// [`eval`] without copying a value the expression only names: what `when`, `expect`, `until`
/// and a loop's list read is looked at where it is.
pub fn eval_ref<'e, E: Env>(expr: &Expr, env: &'e E) -> Result<Cow<'e, Value>, EvalError> {
    build(expr, env, &mut Budget::default()).map(|g| g.value)
}

fn build<'e, E: Env>(expr: &Expr, env: &'e E, b: &mut Budget) -> Result<Got<'e>, EvalError> {
    let span = expr.span;
    match &expr.kind {
        ExprKind::Null => scalar(Value::Null, 0, span, b),
        ExprKind::Bool(x) => scalar(Value::Bool(*x), 0, span, b),
        ExprKind::Int(i) => scalar(Value::from(*i), 0, span, b),
        ExprKind::Str(s) => {
            let cost = SCALAR_COST.saturating_add(s.len() as u64);
            b.take(cost, span)?;
            Ok(Got::built(Value::String(s.clone()), cost))
        }
        ExprKind::List(items) => {
            b.take(CONTAINER_COST, span)?;
            let mut held = CONTAINER_COST;
            // Room for no more items than the budget can hold (each counts at least a scalar).
            let room = usize::try_from(b.remaining() / SCALAR_COST).unwrap_or(usize::MAX);
            let mut out = Vec::with_capacity(items.len().min(room));
            for e in items {
                let (v, cost) = own(build(e, env, b)?, e.span, b)?;
                held = held.saturating_add(cost);
                out.push(v);
            }
            Ok(Got::built(Value::Array(out), held))
        }
        ExprKind::Map(entries) => {
            b.take(CONTAINER_COST, span)?;
            let mut held = CONTAINER_COST;
            let mut m = Map::new();
            for (k, v) in entries {
                let key = KEY_COST.saturating_add(k.node.len() as u64);
                b.take(key, k.span)?;
                let (value, cost) = own(build(v, env, b)?, v.span, b)?;
                held = held.saturating_add(key).saturating_add(cost);
                if let Some(old) = m.insert(k.node.clone(), value) {
                    // A key given twice (a plan cannot: E0215): the first value is gone.
                    let gone = key.saturating_add(build_cost(&old, u64::MAX).unwrap_or(0));
                    b.give_back(gone);
                    held = held.saturating_sub(gone);
                }
            }
            Ok(Got::built(Value::Object(m), held))
        }
        ExprKind::Ref(path) => {
            let root = &path.root.node;
            let Some(mut v) = env.lookup(root) else {
                return err(path.root.span, format!("`{root}` has no value here"));
            };
            let mut shown = root.clone();
            for seg in &path.segments {
                match seg {
                    Segment::Field(f) => {
                        let Some(obj) = v.as_object() else {
                            return err(
                                f.span,
                                format!(
                                    "`{shown}` is a {}, not a map: it has no field `{}`",
                                    type_name(v),
                                    f.node
                                ),
                            );
                        };
                        let Some(next) = obj.get(&f.node) else {
                            let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
                            return err(
                                f.span,
                                format!(
                                    "`{shown}` has no field `{}` (it has: {})",
                                    f.node,
                                    keys.join(", ")
                                ),
                            );
                        };
                        shown = format!("{shown}.{}", f.node);
                        v = next;
                    }
                    Segment::Index(i) => {
                        let Some(list) = v.as_array() else {
                            return err(
                                i.span,
                                format!(
                                    "`{shown}` is a {}, not a list: it cannot be indexed",
                                    type_name(v)
                                ),
                            );
                        };
                        let Some(next) = usize::try_from(i.node).ok().and_then(|n| list.get(n))
                        else {
                            return err(
                                i.span,
                                format!(
                                    "index {} is out of range: `{shown}` has {} items",
                                    i.node,
                                    list.len()
                                ),
                            );
                        };
                        shown = format!("{shown}[{}]", i.node);
                        v = next;
                    }
                }
            }
            Ok(Got {
                value: Cow::Borrowed(v),
                held: 0,
            })
        }
        ExprKind::Unary(op, inner) => {
            let x = build(inner, env, b)?;
            let v = x.value.as_ref();
            let result = match (op, v) {
                (UnaryOp::Not, Value::Bool(y)) => Value::Bool(!y),
                (UnaryOp::Neg, _) if int_of(v).is_some() => {
                    int_value(-int_of(v).unwrap_or(0), span)?
                }
                (UnaryOp::Not, _) => {
                    return err(span, format!("`not` needs a bool, found {}", type_name(v)));
                }
                (UnaryOp::Neg, _) => {
                    return err(span, format!("`-` needs an int, found {}", type_name(v)));
                }
            };
            scalar(result, x.held, span, b)
        }
        ExprKind::Binary(op, l, r) => binary(*op, l, r, span, env, b),
    }
}

fn binary<'e, E: Env>(
    op: BinaryOp,
    l: &Expr,
    r: &Expr,
    span: Span,
    env: &'e E,
    b: &mut Budget,
) -> Result<Got<'e>, EvalError> {
    // `and` / `or` short-circuit: the right side is evaluated only when needed.
    if matches!(op, BinaryOp::And | BinaryOp::Or) {
        let a = build(l, env, b)?;
        let Value::Bool(x) = *a.value else {
            return err(
                l.span,
                format!(
                    "`{}` needs bools, found {} on the left",
                    op.as_str(),
                    type_name(&a.value)
                ),
            );
        };
        if (op == BinaryOp::And && !x) || (op == BinaryOp::Or && x) {
            return scalar(Value::Bool(x), a.held, span, b);
        }
        let c = build(r, env, b)?;
        return match *c.value {
            Value::Bool(y) => scalar(Value::Bool(y), a.held.saturating_add(c.held), span, b),
            ref other => err(
                r.span,
                format!(
                    "`{}` needs bools, found {} on the right",
                    op.as_str(),
                    type_name(other)
                ),
            ),
        };
    }
    let a = build(l, env, b)?;
    let c = build(r, env, b)?;
    let operands = a.held.saturating_add(c.held);
    let (x, y) = (a.value.as_ref(), c.value.as_ref());
    let mismatch = || {
        err(
            span,
            format!(
                "`{}` cannot combine {} and {}",
                op.as_str(),
                type_name(x),
                type_name(y)
            ),
        )
    };
    match op {
        BinaryOp::Eq => scalar(Value::Bool(x == y), operands, span, b),
        BinaryOp::Ne => scalar(Value::Bool(x != y), operands, span, b),
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
            let ord = match (int_of(x), int_of(y), x, y) {
                (Some(i), Some(j), _, _) => i.cmp(&j),
                (_, _, Value::String(s), Value::String(t)) => s.as_bytes().cmp(t.as_bytes()),
                _ => return mismatch(),
            };
            let holds = match op {
                BinaryOp::Lt => ord.is_lt(),
                BinaryOp::Le => ord.is_le(),
                BinaryOp::Gt => ord.is_gt(),
                _ => ord.is_ge(),
            };
            scalar(Value::Bool(holds), operands, span, b)
        }
        BinaryOp::Add => match (x, y) {
            (Value::String(_), Value::String(_)) => join(a, c, span, b),
            (Value::String(_), _) if int_of(y).is_some() => join(a, c, span, b),
            (_, Value::String(_)) if int_of(x).is_some() => join(a, c, span, b),
            (Value::Array(_), Value::Array(_)) => concat(a, c, span, b),
            _ => match (int_of(x), int_of(y)) {
                (Some(i), Some(j)) => scalar(int_value(i + j, span)?, operands, span, b),
                _ => mismatch(),
            },
        },
        BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => {
            let (Some(i), Some(j)) = (int_of(x), int_of(y)) else {
                return mismatch();
            };
            if matches!(op, BinaryOp::Div | BinaryOp::Rem) && j == 0 {
                return err(span, "division by zero");
            }
            // Operands fit in 65 bits, so i128 cannot overflow here; the result is range-checked.
            let n = match op {
                BinaryOp::Sub => i - j,
                BinaryOp::Mul => i * j,
                BinaryOp::Div => i / j,
                _ => i % j,
            };
            scalar(int_value(n, span)?, operands, span, b)
        }
        // Handled above.
        BinaryOp::And | BinaryOp::Or => mismatch(),
    }
}

/// The text of a string or an integer operand of `+`.
fn text_of(v: &Value) -> Cow<'_, str> {
    match v {
        Value::String(s) => Cow::Borrowed(s),
        other => Cow::Owned(other.to_string()),
    }
}

/// `+` of two strings, or of a string and an integer (its decimal form): counted, then built
/// on the left operand's text when it was built here.
fn join<'e>(a: Got<'e>, c: Got<'e>, span: Span, b: &mut Budget) -> Result<Got<'e>, EvalError> {
    let right = text_of(&c.value);
    let len = text_of(&a.value).len().saturating_add(right.len());
    let cost = SCALAR_COST.saturating_add(len as u64);
    b.give_back(a.held.saturating_add(c.held));
    b.take(cost, span)?;
    let mut s = match a.value {
        Cow::Owned(Value::String(mut s)) => {
            s.reserve_exact(right.len());
            s
        }
        other => {
            let mut s = String::with_capacity(len);
            s.push_str(&text_of(&other));
            s
        }
    };
    s.push_str(&right);
    Ok(Got::built(Value::String(s), cost))
}

/// `+` of two lists: counted (the items of a borrowed list are copied), then built on the left
/// list when it was built here.
fn concat<'e>(a: Got<'e>, c: Got<'e>, span: Span, b: &mut Budget) -> Result<Got<'e>, EvalError> {
    let (Some(ca), Some(cc)) = (cost_of(&a, b), cost_of(&c, b)) else {
        return Err(too_large(span, b.limit));
    };
    // One list's tag and length fewer.
    let cost = ca.saturating_add(cc).saturating_sub(CONTAINER_COST);
    b.give_back(a.held.saturating_add(c.held));
    b.take(cost, span)?;
    let more = c.value.as_array().map_or(0, Vec::len);
    let mut items = match a.value {
        Cow::Owned(Value::Array(mut items)) => {
            items.reserve_exact(more);
            items
        }
        Cow::Borrowed(Value::Array(items)) => {
            let mut copy = Vec::with_capacity(items.len().saturating_add(more));
            copy.extend(items.iter().cloned());
            copy
        }
        _ => Vec::new(),
    };
    match c.value {
        Cow::Owned(Value::Array(more)) => items.extend(more),
        Cow::Borrowed(Value::Array(more)) => items.extend(more.iter().cloned()),
        _ => {}
    }
    Ok(Got::built(Value::Array(items), cost))
}

/// Whether an expression reads nothing from the environment (so it can be evaluated at compile
/// time).
pub fn is_constant(expr: &Expr) -> bool {
    match &expr.kind {
        ExprKind::Ref(_) => false,
        ExprKind::List(items) => items.iter().all(is_constant),
        ExprKind::Map(entries) => entries.iter().all(|(_, v)| is_constant(v)),
        ExprKind::Unary(_, e) => is_constant(e),
        ExprKind::Binary(_, l, r) => is_constant(l) && is_constant(r),
        _ => true,
    }
}

/// Every reference in an expression, in source order.
pub fn refs(expr: &Expr, out: &mut Vec<crate::ast::Path>) {
    match &expr.kind {
        ExprKind::Ref(p) => out.push(p.clone()),
        ExprKind::List(items) => items.iter().for_each(|e| refs(e, out)),
        ExprKind::Map(entries) => entries.iter().for_each(|(_, v)| refs(v, out)),
        ExprKind::Unary(_, e) => refs(e, out),
        ExprKind::Binary(_, l, r) => {
            refs(l, out);
            refs(r, out);
        }
        _ => {}
    }
}
