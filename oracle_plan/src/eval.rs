//! Pure, deterministic evaluation of plan expressions over JSON values.
//!
//! Strictly typed, no implicit truthiness: `and`, `or`, `not` and `when` want booleans;
//! arithmetic is on integers, checked (overflow and division by zero are errors, never wrap);
//! `+` also joins two strings, a string and an integer (its decimal form), or two lists.
//! Comparisons `< <= > >=` order integers, or strings by their bytes; `==`/`!=` compare any
//! two values structurally. A field or index that is not there is an error, not `null`.

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

/// Why an expression has no value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EvalError {
    pub span: Span,
    pub message: String,
}

fn err<T>(span: Span, message: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError {
        span,
        message: message.into(),
    })
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

/// Evaluates `expr` in `env`.
pub fn eval(expr: &Expr, env: &impl Env) -> Result<Value, EvalError> {
    let span = expr.span;
    match &expr.kind {
        ExprKind::Null => Ok(Value::Null),
        ExprKind::Bool(b) => Ok(Value::Bool(*b)),
        ExprKind::Int(i) => Ok(Value::from(*i)),
        ExprKind::Str(s) => Ok(Value::String(s.clone())),
        ExprKind::List(items) => items
            .iter()
            .map(|e| eval(e, env))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        ExprKind::Map(entries) => {
            let mut m = Map::new();
            for (k, v) in entries {
                m.insert(k.node.clone(), eval(v, env)?);
            }
            Ok(Value::Object(m))
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
            Ok(v.clone())
        }
        ExprKind::Unary(op, inner) => {
            let v = eval(inner, env)?;
            match (op, &v) {
                (UnaryOp::Not, Value::Bool(b)) => Ok(Value::Bool(!b)),
                (UnaryOp::Neg, _) if int_of(&v).is_some() => {
                    int_value(-int_of(&v).unwrap_or(0), span)
                }
                (UnaryOp::Not, _) => {
                    err(span, format!("`not` needs a bool, found {}", type_name(&v)))
                }
                (UnaryOp::Neg, _) => {
                    err(span, format!("`-` needs an int, found {}", type_name(&v)))
                }
            }
        }
        ExprKind::Binary(op, l, r) => binary(*op, l, r, span, env),
    }
}

fn binary(
    op: BinaryOp,
    l: &Expr,
    r: &Expr,
    span: Span,
    env: &impl Env,
) -> Result<Value, EvalError> {
    // `and` / `or` short-circuit: the right side is evaluated only when needed.
    if matches!(op, BinaryOp::And | BinaryOp::Or) {
        let a = eval(l, env)?;
        let Value::Bool(a) = a else {
            return err(
                l.span,
                format!(
                    "`{}` needs bools, found {} on the left",
                    op.as_str(),
                    type_name(&a)
                ),
            );
        };
        if (op == BinaryOp::And && !a) || (op == BinaryOp::Or && a) {
            return Ok(Value::Bool(a));
        }
        let b = eval(r, env)?;
        return match b {
            Value::Bool(b) => Ok(Value::Bool(b)),
            other => err(
                r.span,
                format!(
                    "`{}` needs bools, found {} on the right",
                    op.as_str(),
                    type_name(&other)
                ),
            ),
        };
    }
    let a = eval(l, env)?;
    let b = eval(r, env)?;
    let mismatch = || {
        err(
            span,
            format!(
                "`{}` cannot combine {} and {}",
                op.as_str(),
                type_name(&a),
                type_name(&b)
            ),
        )
    };
    match op {
        BinaryOp::Eq => Ok(Value::Bool(a == b)),
        BinaryOp::Ne => Ok(Value::Bool(a != b)),
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
            let ord = match (int_of(&a), int_of(&b), &a, &b) {
                (Some(x), Some(y), _, _) => x.cmp(&y),
                (_, _, Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
                _ => return mismatch(),
            };
            Ok(Value::Bool(match op {
                BinaryOp::Lt => ord.is_lt(),
                BinaryOp::Le => ord.is_le(),
                BinaryOp::Gt => ord.is_gt(),
                _ => ord.is_ge(),
            }))
        }
        BinaryOp::Add => match (&a, &b) {
            (Value::String(x), Value::String(y)) => Ok(Value::String(format!("{x}{y}"))),
            (Value::String(x), _) if int_of(&b).is_some() => Ok(Value::String(format!("{x}{b}"))),
            (_, Value::String(y)) if int_of(&a).is_some() => Ok(Value::String(format!("{a}{y}"))),
            (Value::Array(x), Value::Array(y)) => {
                Ok(Value::Array(x.iter().chain(y).cloned().collect()))
            }
            _ => match (int_of(&a), int_of(&b)) {
                (Some(x), Some(y)) => int_value(x + y, span),
                _ => mismatch(),
            },
        },
        BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => {
            let (Some(x), Some(y)) = (int_of(&a), int_of(&b)) else {
                return mismatch();
            };
            if matches!(op, BinaryOp::Div | BinaryOp::Rem) && y == 0 {
                return err(span, "division by zero");
            }
            // Operands fit in 65 bits, so i128 cannot overflow here; the result is range-checked.
            let n = match op {
                BinaryOp::Sub => x - y,
                BinaryOp::Mul => x * y,
                BinaryOp::Div => x / y,
                _ => x % y,
            };
            int_value(n, span)
        }
        // Handled above.
        BinaryOp::And | BinaryOp::Or => mismatch(),
    }
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
