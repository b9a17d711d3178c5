//! Types from schemas: what `plan check` knows about the values a plan reads, and the references
//! and operators it can prove wrong.
//!
//! A small JSON-Schema subset becomes a [`Ty`]: `type` (`object`, `array`, `string`, `integer`,
//! `number`, `boolean`, `null`; a list of one type and `null` counts as that type, since a null
//! fails any field, index or operator anyway), an object's `properties` and
//! `additionalProperties`, an array's `items`. Anything else (`anyOf`, `$ref`, a list of types,
//! no `type`) is [`Ty::Any`], which is never an error: a check only fails what would fail at
//! run time whatever the values.
//!
//! Each step's output gets a type: its tools' output schemas (every tier), with `parsed`
//! typed by a literal `schema` of `llm.chat` or `output` of `agent`, `answer` by a
//! `human.ask`'s `schema` and `value` by a `wait.event`'s (each without an `on_timeout`); a
//! loop's list of its body's outputs; a sub-plan's map of its steps' outputs. Inputs have their declared types.
//! Then every reference's path and every arithmetic, concatenation and ordering operand is
//! checked: E0218 for the first field of a step's output, E0223 for any other field or index
//! a value cannot have, E0224 for operands an operator cannot combine.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::agent::{AGENT_TOOL, ASK_TOOL, CHAT_TOOL, EVENT_TOOL};
use crate::ast::{BinaryOp, Expr, ExprKind, InputType, LoopKind, Path, Segment, UnaryOp};
use crate::catalogue::Catalogue;
use crate::compile::{CompiledBody, CompiledCall, CompiledPlan, CompiledStep};
use crate::diagnostic::{Diagnostic, closest};
use crate::eval;

/// Deepest schema nesting turned into a type; below it everything is [`Ty::Any`]. Schemas come
/// from tool manifests and run inputs, so their depth is not the plan's, and the conversion
/// recurses: 64 levels is deeper than any output a plan reads field by field.
pub const SCHEMA_DEPTH_MAX: u32 = 64;

/// The argument of a `human.ask` whose value is its answer when its deadline passes first (the
/// parser's `on timeout VALUE`; the runtime's `tools::time::ON_TIMEOUT_ARG`).
const ON_TIMEOUT_ARG: &str = "on_timeout";

/// What is known about a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    /// Anything: nothing is checked.
    Any,
    Null,
    Bool,
    Int,
    /// A JSON Schema `number`: an int as far as a plan can tell (plans have no floats).
    Number,
    Str,
    List(Box<Ty>),
    Map(Fields),
}

/// A map's known fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fields {
    pub known: BTreeMap<String, Ty>,
    /// Whether `known` lists every field the map can have.
    pub closed: bool,
}

/// Which objects of a schema list every field they can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// A tool's output schema: only one that says `additionalProperties: false`.
    Explicitly,
    /// A schema written in the plan (`llm.chat`'s `schema`, `agent`'s `output`): its
    /// `properties` are what the plan expects, so one that does not allow other fields
    /// (`additionalProperties` true or a schema, or `patternProperties`) is closed.
    Unless,
}

impl Ty {
    /// The type a schema describes (see the module documentation for the subset).
    pub fn from_schema(schema: &Value, closed: Closed) -> Ty {
        schema_ty(schema, closed, 0)
    }

    /// The type of a run input declared `ty`.
    pub fn of_input(ty: InputType) -> Ty {
        match ty {
            InputType::String => Ty::Str,
            InputType::Int => Ty::Int,
            InputType::Bool => Ty::Bool,
            InputType::List => Ty::List(Box::new(Ty::Any)),
            InputType::Map => Ty::Map(Fields {
                known: BTreeMap::new(),
                closed: false,
            }),
            InputType::Json => Ty::Any,
        }
    }

    /// The name messages use, as the evaluator names values.
    pub fn name(&self) -> &'static str {
        match self {
            Ty::Any => "any value",
            Ty::Null => "null",
            Ty::Bool => "bool",
            Ty::Int => "int",
            Ty::Number => "number",
            Ty::Str => "string",
            Ty::List(_) => "list",
            Ty::Map(_) => "map",
        }
    }

    /// What either of two values is: the fields of both maps (closed if both are), otherwise
    /// the type if they agree, or anything.
    pub fn join(self, other: Ty) -> Ty {
        match (self, other) {
            (Ty::Map(mut a), Ty::Map(b)) => {
                for (k, t) in b.known {
                    let joined = match a.known.remove(&k) {
                        Some(u) => u.join(t),
                        None => t,
                    };
                    a.known.insert(k, joined);
                }
                a.closed &= b.closed;
                Ty::Map(a)
            }
            (Ty::List(a), Ty::List(b)) => Ty::List(Box::new(a.join(*b))),
            (Ty::Int | Ty::Number, Ty::Int | Ty::Number) => Ty::Number,
            (a, b) if a == b => a,
            _ => Ty::Any,
        }
    }

    fn is_int(&self) -> bool {
        matches!(self, Ty::Int | Ty::Number)
    }
}

fn schema_ty(schema: &Value, closed: Closed, depth: u32) -> Ty {
    let Some(s) = schema.as_object() else {
        return Ty::Any;
    };
    let combined = ["anyOf", "oneOf", "allOf", "not", "$ref", "if"];
    if depth >= SCHEMA_DEPTH_MAX || combined.iter().any(|k| s.contains_key(*k)) {
        return Ty::Any;
    }
    let ty = match s.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => {
            let not_null: Vec<&Value> = ts.iter().filter(|t| t.as_str() != Some("null")).collect();
            match not_null.as_slice() {
                [Value::String(t)] => t.as_str(),
                _ => return Ty::Any,
            }
        }
        None if s.get("properties").is_some_and(Value::is_object) => "object",
        _ => return Ty::Any,
    };
    match ty {
        "object" => object_ty(s, closed, depth),
        "array" => Ty::List(Box::new(match s.get("items") {
            Some(items @ Value::Object(_)) => schema_ty(items, closed, depth + 1),
            _ => Ty::Any,
        })),
        "string" => Ty::Str,
        "integer" => Ty::Int,
        "number" => Ty::Number,
        "boolean" => Ty::Bool,
        "null" => Ty::Null,
        _ => Ty::Any,
    }
}

fn object_ty(s: &Map<String, Value>, closed: Closed, depth: u32) -> Ty {
    let props = s.get("properties").and_then(Value::as_object);
    let known = props
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), schema_ty(v, closed, depth + 1)))
        .collect();
    let extra = s.get("additionalProperties");
    let is_closed = props.is_some()
        && match closed {
            Closed::Explicitly => extra == Some(&Value::Bool(false)),
            Closed::Unless => {
                matches!(extra, None | Some(Value::Bool(false)))
                    && !s.contains_key("patternProperties")
            }
        };
    Ty::Map(Fields {
        known,
        closed: is_closed,
    })
}

/// What a name stands for where it is read.
#[derive(Clone, Debug)]
struct Named {
    ty: Ty,
    /// For a step: its tools (every tier), for E0218's message; `None` for an input or a loop
    /// variable.
    tools: Option<String>,
}

type Scope = BTreeMap<String, Named>;

/// Every reference and operator of `plan` checked against the types of what it reads. With
/// `inputs` (a run about to start), a `schema` or `output` given by inputs is typed by their
/// values too; without, only literal ones are.
pub fn check(
    plan: &CompiledPlan,
    catalogue: &Catalogue,
    inputs: Option<&Map<String, Value>>,
) -> Vec<Diagnostic> {
    // Within a compile, its budget; called alone (a run's inputs typed), one of its own.
    let _suggestions = crate::diagnostic::SuggestionBudget::enter();
    let mut scope = Scope::new();
    for i in &plan.inputs {
        let named = Named {
            ty: Ty::of_input(i.ty),
            tools: None,
        };
        scope.insert(i.name.clone(), named);
    }
    let mut d = Vec::new();
    check_steps(&plan.steps, catalogue, inputs, &mut scope, &mut d);
    d
}

/// Checks `steps` (a plan's, or a loop body's) with `scope` (the names outside them), which
/// it leaves as it found it. The names of a body are added to the one scope and taken out
/// after rather than added to a copy: a copy of the plan's names per loop was quadratic.
fn check_steps(
    steps: &[CompiledStep],
    catalogue: &Catalogue,
    inputs: Option<&Map<String, Value>>,
    scope: &mut Scope,
    d: &mut Vec<Diagnostic>,
) {
    let mut hidden = Vec::with_capacity(steps.len());
    for s in steps {
        let named = Named {
            ty: step_ty(s, catalogue, inputs),
            tools: Some(
                tiers(s)
                    .map(|c| c.tool.as_str())
                    .collect::<Vec<_>>()
                    .join(" or "),
            ),
        };
        hidden.push((s.name.clone(), scope.insert(s.name.clone(), named)));
    }
    for s in steps {
        let exprs = tiers(s)
            .flat_map(|c| c.args.values())
            .chain(s.when.iter())
            .chain(s.expect.iter());
        for e in exprs {
            infer(e, scope, d);
        }
        let Some(b) = s.body.as_deref().filter(|b| b.kind != LoopKind::Use) else {
            continue;
        };
        let mut var_hid = Vec::new();
        if let (Some(var), Some(items)) = (&b.var, &b.items) {
            let item = match infer(items, scope, d) {
                Ty::List(t) => *t,
                _ => Ty::Any,
            };
            let named = Named {
                ty: item,
                tools: None,
            };
            var_hid.push((var.clone(), scope.insert(var.clone(), named)));
        }
        let inputs = body_inputs(b, inputs);
        check_steps(&b.plan.steps, catalogue, inputs, scope, d);
        if let Some(u) = &b.until {
            let mut until_hid = Vec::with_capacity(b.plan.steps.len());
            for t in &b.plan.steps {
                let named = Named {
                    ty: step_ty(t, catalogue, inputs),
                    tools: Some(t.call.tool.clone()),
                };
                until_hid.push((t.name.clone(), scope.insert(t.name.clone(), named)));
            }
            infer(u, scope, d);
            restore(scope, until_hid);
        }
        restore(scope, var_hid);
    }
    restore(scope, hidden);
}

/// Puts back what inserting `hidden` (name, what it replaced), in order, changed in `scope`.
fn restore(scope: &mut Scope, hidden: Vec<(String, Option<Named>)>) {
    for (name, before) in hidden.into_iter().rev() {
        match before {
            Some(named) => scope.insert(name, named),
            None => scope.remove(&name),
        };
    }
}

/// The run inputs a body's expressions may be evaluated with: a sub-plan has inputs of its
/// own, and a loop variable named like an input hides it.
fn body_inputs<'i>(
    b: &CompiledBody,
    inputs: Option<&'i Map<String, Value>>,
) -> Option<&'i Map<String, Value>> {
    let hidden = b
        .var
        .as_ref()
        .is_some_and(|v| inputs.is_some_and(|i| i.contains_key(v)));
    inputs.filter(|_| b.kind != LoopKind::Use && !hidden)
}

fn tiers(s: &CompiledStep) -> impl Iterator<Item = &CompiledCall> {
    std::iter::once(&s.call).chain(s.fallback.as_ref())
}

/// The type of a step's output.
fn step_ty(s: &CompiledStep, catalogue: &Catalogue, inputs: Option<&Map<String, Value>>) -> Ty {
    match s.body.as_deref() {
        Some(b) => {
            let outputs = Ty::Map(Fields {
                known: b
                    .plan
                    .steps
                    .iter()
                    .map(|t| {
                        (
                            t.name.clone(),
                            step_ty(t, catalogue, body_inputs(b, inputs)),
                        )
                    })
                    .collect(),
                closed: true,
            });
            match b.kind {
                LoopKind::Use => outputs,
                LoopKind::For | LoopKind::Repeat => Ty::List(Box::new(outputs)),
            }
        }
        None => tiers(s)
            .map(|c| call_ty(c, catalogue, inputs))
            .reduce(Ty::join)
            .unwrap_or(Ty::Any),
    }
}

/// The output type of one call: its tool's output schema, with `parsed` typed by the schema
/// the call gives `llm.chat` or `agent`, and a `human.ask`'s `answer` by its `schema` (which
/// every answer is checked against before it is recorded), when it is known.
fn call_ty(c: &CompiledCall, catalogue: &Catalogue, inputs: Option<&Map<String, Value>>) -> Ty {
    let base = catalogue
        .output_schema(&c.tool)
        .map_or(Ty::Any, |s| Ty::from_schema(s, Closed::Explicitly));
    let (arg, field) = match c.tool.as_str() {
        CHAT_TOOL => ("schema", "parsed"),
        AGENT_TOOL => ("output", "parsed"),
        // An `on_timeout` value becomes the answer unchecked when the deadline passes first, so
        // only an ask without one has an answer its schema describes.
        ASK_TOOL if !c.args.contains_key(ON_TIMEOUT_ARG) => ("schema", "answer"),
        EVENT_TOOL if !c.args.contains_key(ON_TIMEOUT_ARG) => ("schema", "value"),
        _ => return base,
    };
    let Some(e) = c.args.get(arg) else {
        return base;
    };
    let schema = if eval::is_constant(e) {
        eval::eval(e, &Map::new()).ok()
    } else {
        inputs.and_then(|i| eval::eval(e, i).ok())
    };
    match (base, schema) {
        (Ty::Map(mut f), Some(schema)) => {
            let typed = Ty::from_schema(&schema, Closed::Unless);
            f.known.insert(field.to_owned(), typed);
            Ty::Map(f)
        }
        (base, _) => base,
    }
}

/// The type of `e`, reporting what in it cannot work whatever the values.
fn infer(e: &Expr, scope: &Scope, d: &mut Vec<Diagnostic>) -> Ty {
    match &e.kind {
        ExprKind::Null => Ty::Null,
        ExprKind::Bool(_) => Ty::Bool,
        ExprKind::Int(_) => Ty::Int,
        ExprKind::Str(_) => Ty::Str,
        ExprKind::List(items) => {
            let item = items
                .iter()
                .map(|x| infer(x, scope, d))
                .reduce(Ty::join)
                .unwrap_or(Ty::Any);
            Ty::List(Box::new(item))
        }
        ExprKind::Map(entries) => Ty::Map(Fields {
            known: entries
                .iter()
                .map(|(k, v)| (k.node.clone(), infer(v, scope, d)))
                .collect(),
            closed: true,
        }),
        ExprKind::Ref(p) => path_ty(p, scope, d),
        ExprKind::Unary(UnaryOp::Not, x) => {
            infer(x, scope, d);
            Ty::Bool
        }
        ExprKind::Unary(UnaryOp::Neg, x) => {
            let t = infer(x, scope, d);
            if t != Ty::Any && !t.is_int() {
                d.push(operand_error("-", &[(x, &t)], e));
            }
            Ty::Int
        }
        ExprKind::Binary(op, l, r) => {
            let (lt, rt) = (infer(l, scope, d), infer(r, scope, d));
            match combine(*op, &lt, &rt) {
                Some(t) => t,
                None => {
                    d.push(operand_error(op.as_str(), &[(l, &lt), (r, &rt)], e));
                    Ty::Any
                }
            }
        }
    }
}

/// What `op` gives for operands of these types, or `None` when it cannot combine them
/// whatever their values (as `eval` decides: docs/PLAN.md, "Expressions").
fn combine(op: BinaryOp, l: &Ty, r: &Ty) -> Option<Ty> {
    use Ty::{Any, List, Str};
    let scalar_or_any = |t: &Ty| matches!(t, Any | Str) || t.is_int();
    match op {
        BinaryOp::Add => match (l, r) {
            (List(a), List(b)) => Some(List(Box::new((**a).clone().join((**b).clone())))),
            (List(_), Any) | (Any, List(_)) => Some(Any),
            (Str, x) | (x, Str) if scalar_or_any(x) => Some(Str),
            (a, b) if a.is_int() && b.is_int() => Some(Ty::Int),
            (a, b) if scalar_or_any(a) && scalar_or_any(b) => Some(Any),
            _ => None,
        },
        BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => {
            let int_or_any = |t: &Ty| *t == Any || t.is_int();
            (int_or_any(l) && int_or_any(r)).then_some(Ty::Int)
        }
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
            let fits = match (l, r) {
                (Any, x) | (x, Any) => scalar_or_any(x),
                (Str, Str) => true,
                (a, b) => a.is_int() && b.is_int(),
            };
            fits.then_some(Ty::Bool)
        }
        BinaryOp::Eq | BinaryOp::Ne | BinaryOp::And | BinaryOp::Or => Some(Ty::Bool),
    }
}

/// E0224: `op` at `whole` cannot combine its operands, named with their types.
fn operand_error(op: &str, operands: &[(&Expr, &Ty)], whole: &Expr) -> Diagnostic {
    let types: Vec<String> = operands.iter().map(|(_, t)| a_or_an(t.name())).collect();
    let known: Vec<String> = operands
        .iter()
        .filter_map(|(x, t)| match &x.kind {
            ExprKind::Ref(p) => Some(format!(
                "`{}` is {}",
                shown(p, p.segments.len()),
                a_or_an(t.name())
            )),
            _ => None,
        })
        .collect();
    let mut diag = Diagnostic::error(
        "E0224",
        whole.span,
        format!("`{op}` cannot combine {}", types.join(" and ")),
        "wrong types",
    );
    if !known.is_empty() {
        diag = diag.with_hint(format!(
            "{}; `+` joins strings, a string and an int, or lists; `- * / %` and `-x` take ints; `< <= > >=` order ints or strings",
            known.join(", ")
        ));
    }
    diag
}

/// The type of what `p` names, reporting the first segment it cannot have.
fn path_ty(p: &Path, scope: &Scope, d: &mut Vec<Diagnostic>) -> Ty {
    let Some(named) = scope.get(&p.root.node) else {
        // An unknown name is E0204's, reported by the compiler.
        return Ty::Any;
    };
    let mut ty = named.ty.clone();
    for (n, seg) in p.segments.iter().enumerate() {
        let next = match (seg, &ty) {
            (_, Ty::Any) => return Ty::Any,
            (Segment::Field(f), Ty::Map(fields)) => match fields.known.get(&f.node) {
                Some(t) => t.clone(),
                None if fields.closed => {
                    d.push(no_field(p, n, fields, named));
                    return Ty::Any;
                }
                None => return Ty::Any,
            },
            (Segment::Index(_), Ty::List(item)) => (**item).clone(),
            (Segment::Field(f), other) => {
                d.push(wrong_kind(
                    f.span,
                    format!(
                        "`{}` is {}, not a map: it has no field `{}`",
                        shown(p, n),
                        a_or_an(other.name()),
                        f.node
                    ),
                ));
                return Ty::Any;
            }
            (Segment::Index(i), other) => {
                d.push(wrong_kind(
                    i.span,
                    format!(
                        "`{}` is {}, not a list: it cannot be indexed",
                        shown(p, n),
                        a_or_an(other.name())
                    ),
                ));
                return Ty::Any;
            }
        };
        ty = next;
    }
    ty
}

fn wrong_kind(span: crate::ast::Span, message: String) -> Diagnostic {
    Diagnostic::error("E0223", span, message, "not here")
}

/// E0218 (the first field of a step's output) or E0223 (any other) for the field
/// `p.segments[n]`, which `fields` does not have.
fn no_field(p: &Path, n: usize, fields: &Fields, named: &Named) -> Diagnostic {
    let Some(Segment::Field(f)) = p.segments.get(n) else {
        return wrong_kind(p.root.span, "a field a value cannot have".into());
    };
    let before = shown(p, n);
    let names: Vec<&str> = fields.known.keys().map(String::as_str).collect();
    let mut hint = if names.is_empty() {
        "it has no fields".to_owned()
    } else {
        format!("its fields: {}", names.join(", "))
    };
    if let Some(c) = closest(&f.node, names.iter().copied()) {
        hint = format!("did you mean `{before}.{c}`? {hint}");
    }
    let diag = match (&named.tools, n) {
        (Some(tools), 0) => Diagnostic::error(
            "E0218",
            f.span,
            format!("step `{before}` ({tools}) has no output field `{}`", f.node),
            "no such field",
        ),
        _ => Diagnostic::error(
            "E0223",
            f.span,
            format!("`{before}` has no field `{}`", f.node),
            "no such field",
        ),
    };
    diag.with_hint(hint)
}

/// `root.a[0]` up to (not including) segment `n`.
fn shown(p: &Path, n: usize) -> String {
    let mut s = p.root.node.clone();
    for seg in p.segments.iter().take(n) {
        match seg {
            Segment::Field(f) => {
                s.push('.');
                s.push_str(&f.node);
            }
            Segment::Index(i) => s.push_str(&format!("[{}]", i.node)),
        }
    }
    s
}

fn a_or_an(noun: &str) -> String {
    match noun {
        "any value" => noun.to_owned(),
        n if n.starts_with(['a', 'e', 'i', 'o', 'u']) => format!("an {n}"),
        n => format!("a {n}"),
    }
}
