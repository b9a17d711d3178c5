//! The compiler: resolves references into DAG edges, validates the plan against a tool
//! catalogue, and produces a deterministic topological order, the levels of independent steps,
//! and the plan hash.
//!
//! Diagnostic codes (docs/PLAN.md lists them with examples):
//! E0201 duplicate step · E0202 a step named like an input · E0203 duplicate input ·
//! E0204 unknown name · E0205 unknown tool · E0206 unknown argument · E0207 missing argument ·
//! E0208 argument of the wrong type · E0209 cycle · E0210 malformed grant ·
//! E0211 capability not granted · E0212 bad input default · E0213 step uses its own output ·
//! E0217 a grant no tool needs · E0218 a field the step's output cannot have ·
//! E0214 bound out of range (retry, timeout) · E0215 duplicate map key · E0216 too many steps ·
//! E0219 an agent step's tools or clauses it cannot have · E0220 a loop it cannot be (a bound
//! out of range, a clause loops do not take, a nested loop, a body step named like an outer name
//! or like a step of another loop's body) ·
//! E0221 a sub-plan that cannot be used (unreadable, not compiling, too deep, granting more
//! than the caller, inputs that do not fit) · E0222 a constant too large to build
//! (`eval::BUILD_BYTES_MAX`) · E0223 a field or index a value's type does not have · E0224
//! operands an operator cannot combine (E0223 and E0224 come from `crate::types`) · E0225 a
//! literal deadline that is not a duration or an RFC 3339 instant (`crate::time`) · E0227 a
//! retry policy that cannot be · E0228 an `undo` that cannot be (`crate::policy`) · E0229 a
//! `spawn` whose child plan cannot be used (not a literal path, climbing out, unreadable, not
//! compiling, granting more than the parent, inputs that do not fit).

use std::collections::{BTreeMap, BTreeSet};

use oracle_core::Hash;
use oracle_core::capability::Capability;
use serde_json::{Map, Value};

use crate::ast::{self, Expr, ExprKind, FailurePolicy, InputType, Segment, Span, Spanned};
use crate::catalogue::{ArgType, Catalogue, ScopeFrom, ToolSpec};
use crate::diagnostic::{Diagnostic, closest};
use crate::eval::{self, EvalErrorKind};

/// Attempts per tier when a step says nothing.
pub const RETRY_DEFAULT: u64 = 3;
/// Most attempts a step may ask for per tier.
pub const RETRY_MAX: u64 = 100;
/// Longest timeout a step may ask for (one day).
pub const TIMEOUT_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// Most steps one plan may declare. A 100,000-step plan compiles in well under a second; ten
/// times more takes seconds and a gigabyte of memory before a single step runs.
pub const STEPS_MAX: u64 = 200_000;
/// Most steps of a cycle an E0209 diagnostic names, in its message and as related places; the
/// rest are counted (`... and N more`). A cycle can run through every step of a plan, and
/// 200,000 names, each shown again with its source line, are megabytes no one reads.
pub const CYCLE_STEPS_SHOWN_MAX: u64 = 32;
/// Format version of the canonical compiled form (part of the plan hash).
pub const COMPILED_FORMAT: u64 = 1;

/// A run input after compilation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledInput {
    pub name: String,
    pub ty: InputType,
    /// The default, evaluated at compile time.
    pub default: Option<Value>,
}

/// A tool call after compilation: arguments by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledCall {
    pub tool: String,
    pub args: Args,
}

/// A call's arguments, sorted by name, each name once. A sorted `Vec` rather than a
/// `BTreeMap`, whose first node has room for 11 arguments: about 1 KB for each step of a plan
/// of up to [`STEPS_MAX`] steps, held for the whole run (issue 42).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args(Vec<(String, Expr)>);

impl Args {
    pub fn get(&self, name: &str) -> Option<&Expr> {
        let i = self
            .0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()?;
        self.0.get(i).map(|(_, e)| e)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Arguments in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Expr)> {
        self.0.iter().map(arg_pair)
    }

    /// Argument values in name order.
    pub fn values(&self) -> impl Iterator<Item = &Expr> {
        self.0.iter().map(|(_, e)| e)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, Expr)> for Args {
    /// Sorted by name; of a name given twice, the last (as collecting into a map keeps).
    fn from_iter<I: IntoIterator<Item = (String, Expr)>>(items: I) -> Args {
        let map: BTreeMap<String, Expr> = items.into_iter().collect();
        Args(map.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a Args {
    type Item = (&'a String, &'a Expr);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, Expr)>,
        fn(&'a (String, Expr)) -> (&'a String, &'a Expr),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(arg_pair)
    }
}

fn arg_pair((k, e): &(String, Expr)) -> (&String, &Expr) {
    (k, e)
}

/// A step after compilation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledStep {
    pub name: String,
    pub call: CompiledCall,
    /// Indices of the steps this one waits for (data and `after`), ascending.
    pub deps: Vec<u32>,
    /// The explicit `after` names, sorted.
    pub after: Vec<String>,
    pub when: Option<Expr>,
    pub expect: Option<Expr>,
    /// Attempts per tier.
    pub retry: u64,
    /// `retry { ... }`: waits between attempts and codes that end them (`None`: `retry N`,
    /// or nothing, retried at once).
    pub policy: Option<crate::policy::RetryPolicy>,
    /// `undo STEP`: the index of the step this one compensates.
    pub undo: Option<u32>,
    pub fallback: Option<CompiledCall>,
    pub on_failure: FailurePolicy,
    pub timeout_ms: Option<u64>,
    /// A loop step's body; its `call` is then `for {}` or `repeat {}`.
    pub body: Option<Box<CompiledBody>>,
}

/// A loop's body: its steps compiled as a plan of their own, whose inputs are the loop
/// variable and the outer inputs and steps the body reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledBody {
    pub kind: ast::LoopKind,
    pub var: Option<String>,
    pub items: Option<Expr>,
    pub until: Option<Expr>,
    pub max: u64,
    /// The outer names the body reads, sorted (bound as the body plan's inputs).
    pub outer: Vec<String>,
    pub plan: CompiledPlan,
}

/// Most iterations a loop may declare (`max N`).
pub const ITERATIONS_MAX: u64 = 100_000;
/// A `for` without `max N` takes at most this many items.
pub const FOR_MAX_DEFAULT: u64 = 1_000;

/// A plan ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledPlan {
    pub name: String,
    pub version: u64,
    /// Grants, sorted and unique.
    pub grants: Vec<Capability>,
    /// Inputs, sorted by name.
    pub inputs: Vec<CompiledInput>,
    /// Steps in declaration order.
    pub steps: Vec<CompiledStep>,
    /// Topological order (indices into `steps`); ties broken by declaration order.
    pub order: Vec<u32>,
    /// Steps grouped by depth: every step's dependencies are in earlier levels.
    pub levels: Vec<Vec<u32>>,
    /// Hash of the canonical compiled form.
    pub hash: Hash,
}

/// The text of the sub-plans a plan uses (`use "PATH" as NAME`), by path as written: the
/// compiler is pure, so the caller reads them (`uses_of` lists what to read).
pub type Sources = BTreeMap<String, String>;

/// How deep sub-plans may use sub-plans (a plan that uses itself stops here too).
pub const USES_DEPTH_MAX: u32 = 4;

/// The paths a plan's source uses (`use "PATH" as NAME`), as written; empty if it does not
/// parse.
pub fn uses_of(src: &str) -> Vec<String> {
    // Parsed once per text: a start asks this, `tools_of`, `memory_of` and compiles.
    crate::parsed::outline(src).uses
}

/// The plans a plan's `spawn` steps name with a literal `plan`, as written (relative to the
/// plan's directory); empty if it does not parse. A start keeps them beside the run as it keeps
/// sub-plans, so the child a run starts is the plan it was started with.
pub fn spawns_of(src: &str) -> Vec<String> {
    crate::parsed::outline(src).spawns
}

/// The literal `plan` of a top-level `spawn` step.
pub(crate) fn spawned_plan(s: &ast::Step) -> Option<String> {
    if s.call.tool.node != crate::agent::SPAWN_TOOL {
        return None;
    }
    match &s
        .call
        .args
        .iter()
        .find(|a| a.name.node == "plan")?
        .value
        .kind
    {
        ExprKind::Str(p) => Some(p.clone()),
        _ => None,
    }
}

/// The tools directories a plan's source names (`tools "DIR"`), as written (relative to the
/// plan's directory); empty if it does not parse.
pub fn tools_of(src: &str) -> Vec<String> {
    crate::parsed::outline(src).tools
}

/// The store a plan's `memory` line names, as `oracle run --memory` takes it (`NAME` or
/// `input.NAME`); `None` without one, or if the source does not parse.
pub fn memory_of(src: &str) -> Option<String> {
    crate::parsed::outline(src).memory
}

/// The queue a plan's `queue "NAME"` line names; `None` without one, or if the source does
/// not parse.
pub fn queue_of(src: &str) -> Option<String> {
    crate::parsed::outline(src).queue
}

/// The names of a plan's agent steps (`s = agent { ... }`), whose model calls are turns rather
/// than attempts (what `oracle log` calls them); empty if the source does not parse.
pub fn agent_steps_of(src: &str) -> std::collections::BTreeSet<String> {
    agent_steps_with(src, &Sources::new())
}

/// The agent steps of a plan as a run names their calls: a top-level one by its name, one in a
/// loop's body by its name too (its calls are `name[i]`, which [`is_agent_call`] reads), one in
/// a sub-plan used by step `notes` as `notes/name` (and so on down, with the sub-plans'
/// `sources` by the paths the plan wrote; one missing is left out).
pub fn agent_steps_with(src: &str, sources: &Sources) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    agent_steps_into(src, sources, "", 0, &mut out);
    out
}

fn agent_steps_into(
    src: &str,
    sources: &Sources,
    prefix: &str,
    depth: u32,
    out: &mut std::collections::BTreeSet<String>,
) {
    let Some(plan) = crate::parser::parse(src).0 else {
        return;
    };
    for s in &plan.steps {
        let body = s.body.iter().flat_map(|b| b.steps.iter());
        for t in std::iter::once(s).chain(body) {
            if t.call.tool.node == crate::agent::AGENT_TOOL {
                out.insert(format!("{prefix}{}", t.name.node));
            }
            // A step that calls a sub-plan: its calls are named under the step.
            let used = plan.uses.iter().find(|u| u.alias.node == t.call.tool.node);
            if let Some(sub) = used.and_then(|u| sources.get(&u.path.node))
                && depth < USES_DEPTH_MAX
            {
                let inner = format!("{prefix}{}/", t.name.node);
                agent_steps_into(sub, sources, &inner, depth + 1, out);
            }
        }
    }
}

/// Whether the recorded step name `step` is a call of one of `agents` (from
/// [`agent_steps_with`]): a loop iteration's `[i]` is not part of the step's name.
pub fn is_agent_call(agents: &std::collections::BTreeSet<String>, step: &str) -> bool {
    if agents.contains(step) {
        return true;
    }
    let mut plain = String::with_capacity(step.len());
    let mut rest = step;
    while let Some(open) = rest.find('[') {
        plain.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find(']') {
            Some(close) if after[..close].bytes().all(|b| b.is_ascii_digit()) => {
                rest = &after[close + 1..];
            }
            _ => {
                plain.push('[');
                rest = after;
            }
        }
    }
    plain.push_str(rest);
    agents.contains(&plain)
}

/// Parses and compiles: the plan if there are no errors, and every diagnostic found.
pub fn check(src: &str, catalogue: &Catalogue) -> (Option<CompiledPlan>, Vec<Diagnostic>) {
    check_with(src, catalogue, &Sources::new())
}

/// [`check`], with the sources of the sub-plans the plan uses.
pub fn check_with(
    src: &str,
    catalogue: &Catalogue,
    sources: &Sources,
) -> (Option<CompiledPlan>, Vec<Diagnostic>) {
    let compile = |plan: &ast::Plan, catalogue: &Catalogue| compile_in(plan, catalogue, sources, 0);
    // The parse `tools_of` or `memory_of` made of this text, if one did (`parsed`).
    let (plan, mut diags) = crate::parsed::take(src);
    let Some(plan) = plan else {
        return (None, diags);
    };
    if !diags.is_empty() {
        // Still report semantic problems the parser could not see, but not ones about the text
        // the parser already flagged (it put a placeholder there).
        if let Err(more) = compile(&plan, catalogue) {
            let parsed = crate::overlap::Places::new(diags.iter().map(|p| p.span));
            let more: Vec<Diagnostic> = more
                .into_iter()
                .filter(|d| !parsed.overlaps(d.span))
                .collect();
            diags.extend(more);
        }
        // In order of position, as a reader goes through the file.
        diags.sort_by_key(|x| x.span.start);
        return (None, diags);
    }
    match compile(&plan, catalogue) {
        Ok(c) => (Some(c), diags),
        Err(more) => {
            diags.extend(more);
            (None, diags)
        }
    }
}

/// Compiles a parsed plan, reporting every problem found. A plan that uses sub-plans needs
/// [`check_with`] (or [`compile_in`]) and their sources.
pub fn compile(plan: &ast::Plan, catalogue: &Catalogue) -> Result<CompiledPlan, Vec<Diagnostic>> {
    compile_in(plan, catalogue, &Sources::new(), 0)
}

/// [`compile`] with the sub-plans' sources, at sub-plan depth `depth`.
pub fn compile_in(
    plan: &ast::Plan,
    catalogue: &Catalogue,
    sources: &Sources,
    depth: u32,
) -> Result<CompiledPlan, Vec<Diagnostic>> {
    // One budget for every "did you mean" of the check, loop bodies and sub-plans included.
    let _suggestions = crate::diagnostic::SuggestionBudget::enter();
    let mut d = Vec::new();

    if let Some(first_over) = plan.steps.get(STEPS_MAX as usize) {
        return Err(vec![Diagnostic::error(
            "E0216",
            first_over.name.span,
            format!(
                "the plan declares {} steps, more than steps_max = {STEPS_MAX}",
                plan.steps.len()
            ),
            "one step too many",
        )]);
    }

    // Grants.
    let mut grants = BTreeSet::new();
    let kinds = catalogue.capability_kinds();
    for g in &plan.grants {
        match g.node.parse::<Capability>() {
            Ok(c) if !catalogue.grants_something(&c.domain, &c.action) => {
                let kind = format!("{}:{}", c.domain, c.action);
                let hint = crate::diagnostic::closest(&kind, kinds.iter().map(String::as_str));
                d.push(
                    Diagnostic::error(
                        "E0217",
                        g.span,
                        format!("no tool needs `{kind}`, so this grant allows nothing"),
                        "unknown capability",
                    )
                    .with_hint(match hint {
                        Some(h) => format!(
                            "did you mean `{h}`? Grants name one of: {}",
                            kinds.iter().cloned().collect::<Vec<_>>().join(", ")
                        ),
                        None => format!(
                            "grants name one of: {}",
                            kinds.iter().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    }),
                );
            }
            Ok(c) => {
                grants.insert(c);
            }
            Err(e) => d.push(Diagnostic::error(
                "E0210",
                g.span,
                e.to_string(),
                "not a capability",
            )),
        }
    }

    // Inputs.
    let mut inputs: BTreeMap<&str, CompiledInput> = BTreeMap::new();
    let mut input_spans: BTreeMap<&str, Span> = BTreeMap::new();
    for i in &plan.inputs {
        let name = i.name.node.as_str();
        if let Some(first) = input_spans.get(name) {
            d.push(
                Diagnostic::error(
                    "E0203",
                    i.name.span,
                    format!("input `{name}` is declared twice"),
                    "declared again here",
                )
                .with_related(*first, "first declared here"),
            );
            continue;
        }
        input_spans.insert(name, i.name.span);
        let default = match &i.default {
            None => None,
            Some(e) if !eval::is_constant(e) => {
                d.push(Diagnostic::error("E0212", e.span, format!("the default of `{name}` must be a constant"), "refers to a name")
                    .with_hint("defaults are fixed when the plan is compiled; pass a value with `--input` instead"));
                None
            }
            Some(e) => match eval::eval(e, &Map::new()) {
                Ok(v) if input_admits(i.ty.node, &v) => Some(v),
                Ok(v) => {
                    d.push(Diagnostic::error(
                        "E0212",
                        e.span,
                        format!(
                            "the default of `{name}` is {}, but the input is declared `{}`",
                            a_or_an(eval::type_name(&v)),
                            i.ty.node.as_str()
                        ),
                        "wrong type",
                    ));
                    None
                }
                Err(err) if matches!(err.kind, EvalErrorKind::TooLarge { .. }) => {
                    d.push(too_large(e.span, &err));
                    None
                }
                Err(err) => {
                    d.push(Diagnostic::error(
                        "E0212",
                        err.span,
                        format!(
                            "the default of `{name}` cannot be evaluated: {}",
                            err.message
                        ),
                        "here",
                    ));
                    None
                }
            },
        };
        inputs.insert(
            name,
            CompiledInput {
                name: name.to_owned(),
                ty: i.ty.node,
                default,
            },
        );
    }

    // Step names.
    let mut index: BTreeMap<&str, u32> = BTreeMap::new();
    for (n, s) in plan.steps.iter().enumerate() {
        let name = s.name.node.as_str();
        if let Some(&first) = index.get(name) {
            d.push(
                Diagnostic::error(
                    "E0201",
                    s.name.span,
                    format!("step `{name}` is defined twice"),
                    "defined again here",
                )
                .with_related(plan.steps[first as usize].name.span, "first defined here")
                .with_hint("give each step its own name"),
            );
            continue;
        }
        if let Some(span) = input_spans.get(name) {
            d.push(
                Diagnostic::error(
                    "E0202",
                    s.name.span,
                    format!("step `{name}` has the same name as an input"),
                    "step",
                )
                .with_related(*span, "input")
                .with_hint("rename one: a reference must name exactly one thing"),
            );
        }
        index.insert(name, n as u32);
    }
    loop_bodies_named_apart(plan, &mut d);
    let names: Vec<&str> = index
        .keys()
        .copied()
        .chain(inputs.keys().copied())
        .collect();
    // For membership: a loop body asks about each name it reads.
    let name_set: BTreeSet<&str> = names.iter().copied().collect();

    // The fields each step's output can have: the union over its tiers, when every tier's tool
    // declares a closed output object (otherwise anything goes and nothing is checked).
    let fields_of: Vec<Option<BTreeSet<&str>>> = plan
        .steps
        .iter()
        .map(|s| {
            let tiers = std::iter::once(&s.call).chain(s.fallback.as_ref());
            let mut all = BTreeSet::new();
            for c in tiers {
                all.extend(
                    catalogue
                        .output_fields(&c.tool.node)?
                        .iter()
                        .map(String::as_str),
                );
            }
            Some(all)
        })
        .collect();

    // Steps: calls, references, edges.
    let mut steps = Vec::with_capacity(plan.steps.len());
    for (n, s) in plan.steps.iter().enumerate() {
        let me = n as u32;
        let mut deps = BTreeSet::new();
        let mut resolve = |e: &Expr, own_output_ok: bool, d: &mut Vec<Diagnostic>| {
            let mut paths = Vec::new();
            eval::refs(e, &mut paths);
            for p in paths {
                let root = p.root.node.as_str();
                if let Some(&target) = index.get(root)
                    && let Some(Segment::Field(f)) = p.segments.first()
                    && let Some(Some(fields)) = fields_of.get(target as usize)
                    && !fields.contains(f.node.as_str())
                {
                    let tools: Vec<&str> = {
                        let t = &plan.steps[target as usize];
                        std::iter::once(&t.call)
                            .chain(t.fallback.as_ref())
                            .map(|c| c.tool.node.as_str())
                            .collect()
                    };
                    let known: Vec<&str> = fields.iter().copied().collect();
                    let mut hint = format!("its fields: {}", known.join(", "));
                    if let Some(c) = closest(&f.node, known.iter().copied()) {
                        hint = format!("did you mean `{root}.{c}`? {hint}");
                    }
                    d.push(
                        Diagnostic::error(
                            "E0218",
                            f.span,
                            format!(
                                "step `{root}` ({}) has no output field `{}`",
                                tools.join(" or "),
                                f.node
                            ),
                            "no such field",
                        )
                        .with_hint(hint),
                    );
                }
                if let Some(&target) = index.get(root) {
                    if target == me {
                        if !own_output_ok {
                            d.push(
                                Diagnostic::error(
                                    "E0213",
                                    p.root.span,
                                    format!("step `{root}` uses its own output"),
                                    "refers to this step",
                                )
                                .with_hint("only `expect` may refer to the step's own output"),
                            );
                        }
                    } else {
                        deps.insert(target);
                    }
                } else if !inputs.contains_key(root) {
                    let mut diag = Diagnostic::error(
                        "E0204",
                        p.root.span,
                        format!("unknown name `{root}`"),
                        "not an input or a step",
                    );
                    if let Some(c) = closest(root, names.iter().copied()) {
                        diag = diag.with_hint(format!("did you mean `{c}`?"));
                    }
                    d.push(diag);
                }
            }
        };
        let mut body = None;
        let mut loop_deps = Vec::new();
        let call = match &s.body {
            Some(b) => {
                body = compile_body(s, b, plan, catalogue, (sources, depth), &name_set, &mut d);
                if let Some(items) = &b.items {
                    resolve(items, false, &mut d);
                }
                if let Some(cb) = &body {
                    for o in &cb.outer {
                        if let Some(&t) = index.get(o.as_str()) {
                            loop_deps.push(t);
                        }
                    }
                }
                CompiledCall {
                    tool: b.kind.as_str().to_owned(),
                    args: Args::default(),
                }
            }
            None => match plan.uses.iter().find(|u| u.alias.node == s.call.tool.node) {
                Some(u) => {
                    body = compile_use(s, u, plan, &grants, catalogue, (sources, depth), &mut d);
                    CompiledCall {
                        tool: s.call.tool.node.clone(),
                        args: s
                            .call
                            .args
                            .iter()
                            .map(|a| (a.name.node.clone(), a.value.clone()))
                            .collect(),
                    }
                }
                None => {
                    if s.call.tool.node == crate::agent::SPAWN_TOOL {
                        check_spawn(s, &grants, catalogue, (sources, depth), &mut d);
                    }
                    compile_call(&s.call, catalogue, &grants, &mut d)
                }
            },
        };
        for a in &s.call.args {
            resolve(&a.value, false, &mut d);
        }
        if let Some(w) = &s.when {
            resolve(w, false, &mut d);
        }
        if let Some(e) = &s.expect {
            resolve(e, true, &mut d);
        }
        let fallback = s.fallback.as_ref().map(|f| {
            for a in &f.args {
                resolve(&a.value, false, &mut d);
            }
            compile_call(f, catalogue, &grants, &mut d)
        });
        if s.call.tool.node == crate::agent::AGENT_TOOL {
            agent_step(s, catalogue, &mut d);
        }
        let mut after = Vec::new();
        for a in &s.after {
            match index.get(a.node.as_str()) {
                Some(&t) if t == me => d.push(Diagnostic::error(
                    "E0213",
                    a.span,
                    format!("step `{}` cannot run after itself", a.node),
                    "this step",
                )),
                Some(&t) => {
                    deps.insert(t);
                    after.push(a.node.clone());
                }
                None => {
                    let mut diag = Diagnostic::error(
                        "E0204",
                        a.span,
                        format!("`after` names an unknown step `{}`", a.node),
                        "no such step",
                    );
                    if let Some(c) = closest(&a.node, index.keys().copied()) {
                        diag = diag.with_hint(format!("did you mean `{c}`?"));
                    }
                    d.push(diag);
                }
            }
        }
        after.sort();
        after.dedup();
        deps.extend(loop_deps);
        let (retry, policy) = step_retry(s, &mut d);
        let undo = crate::policy::undo_target(&plan.steps, me, &index, &mut d);
        deps.extend(undo);
        let timeout_ms = match &s.timeout_ms {
            Some(t) if t.node == 0 || t.node > TIMEOUT_MS_MAX => {
                d.push(Diagnostic::error(
                    "E0214",
                    t.span,
                    format!("timeout must be between 1 ms and 24 h, found {} ms", t.node),
                    "out of range",
                ));
                None
            }
            Some(t) => Some(t.node),
            None => None,
        };
        for e in s
            .call
            .args
            .iter()
            .map(|a| &a.value)
            .chain(s.when.iter())
            .chain(s.expect.iter())
        {
            duplicate_keys(e, &mut d);
        }
        let more = s
            .fallback
            .iter()
            .flat_map(|f| &f.args)
            .map(|a| &a.value)
            .chain(
                s.body
                    .iter()
                    .flat_map(|b| b.items.iter().chain(b.until.iter())),
            );
        for e in s
            .call
            .args
            .iter()
            .map(|a| &a.value)
            .chain(s.when.iter())
            .chain(s.expect.iter())
            .chain(more)
        {
            constants_too_large(e, &mut d);
        }
        steps.push(CompiledStep {
            name: s.name.node.clone(),
            call,
            deps: deps.into_iter().collect(),
            after,
            when: s.when.clone(),
            expect: s.expect.clone(),
            retry,
            policy,
            undo,
            fallback,
            on_failure: s
                .on_failure
                .as_ref()
                .map_or(FailurePolicy::Stop, |p| p.node),
            timeout_ms,
            body: body.map(Box::new),
        });
    }

    crate::policy::check_sagas(plan, &steps, &mut d);
    // Order.
    let (order, levels) = match topo(&steps) {
        Ok(x) => x,
        Err(cycle) => {
            d.push(cycle_diagnostic(plan, &steps, &cycle));
            (Vec::new(), Vec::new())
        }
    };

    let mut compiled = CompiledPlan {
        name: plan.name.node.clone(),
        version: plan.version.node,
        grants: grants.into_iter().collect(),
        inputs: inputs.into_values().collect(),
        steps,
        order,
        levels,
        hash: Hash::ZERO,
    };
    // Types last (E0223, E0224), and also when the plan has other errors, so one `plan check`
    // shows every mistake: the type check reads steps by name only, and a step the compiler
    // refused still has its arguments (an unknown tool or name is typed as anything, so it
    // adds nothing of its own).
    let typed = crate::types::check(&compiled, catalogue, None);
    if !d.is_empty() || !typed.is_empty() {
        merge_by_position(&mut d, typed);
        return Err(d);
    }
    compiled.hash = plan_hash(&compiled);
    Ok(compiled)
}

/// Adds `more` to `d`, leaving out one at a place `d` already reports (the same problem found
/// by both the compiler and the type check, E0218 for a step's first field, is said once),
/// then orders them all by where they start (stable: at one place, the order found).
fn merge_by_position(d: &mut Vec<Diagnostic>, more: Vec<Diagnostic>) {
    let mut said = crate::overlap::Said::new(d.iter().chain(&more));
    d.iter().for_each(|p| said.keep(p));
    for m in more {
        if !said.said(&m) {
            said.keep(&m);
            d.push(m);
        }
    }
    d.sort_by_key(|x| x.span.start);
}

/// E0209 for `cycle` (`a, b, ..., a`: each step uses the next): the first
/// [`CYCLE_STEPS_SHOWN_MAX`] steps named, the rest counted.
fn cycle_diagnostic(plan: &ast::Plan, steps: &[CompiledStep], cycle: &[u32]) -> Diagnostic {
    let name = |i: u32| steps[i as usize].name.as_str();
    let members = &cycle[..cycle.len().saturating_sub(1)];
    let first = members.first().copied().unwrap_or(0);
    let shown = &members[..members.len().min(CYCLE_STEPS_SHOWN_MAX as usize)];
    let mut path: Vec<String> = shown.iter().map(|&i| name(i).to_owned()).collect();
    if members.len() > shown.len() {
        path.push(format!("... and {} more", members.len() - shown.len()));
    }
    path.push(name(first).to_owned());
    let mut diag = Diagnostic::error(
        "E0209",
        plan.steps[first as usize].name.span,
        format!(
            "steps depend on each other in a cycle: {}",
            path.join(" -> ")
        ),
        "the cycle starts here",
    )
    .with_hint(
        "each step uses the next one's output or runs `after` it; remove one of these dependencies",
    );
    for &i in shown.iter().skip(1) {
        diag = diag.with_related(plan.steps[i as usize].name.span, "part of the cycle");
    }
    diag
}

/// A step's attempts per tier and retry policy (`attempts N`, `retry N` or `retry { ... }`;
/// E0214 for a count out of range).
fn step_retry(s: &ast::Step, d: &mut Vec<Diagnostic>) -> (u64, Option<crate::policy::RetryPolicy>) {
    if let Some(e) = &s.retry_policy {
        if s.call.tool.node == crate::agent::AGENT_TOOL {
            d.push(Diagnostic::error(
                "E0227",
                e.span,
                "an agent step takes `attempts N` per turn, not a retry policy",
                "not on an agent step",
            ));
            return (RETRY_DEFAULT, None);
        }
        return match crate::policy::compile(e, d) {
            Some((attempts, policy)) => (attempts, Some(policy)),
            None => (RETRY_DEFAULT, None),
        };
    }
    let retry = match &s.retry {
        Some(r) if r.node == 0 || r.node > RETRY_MAX => {
            d.push(Diagnostic::error(
                "E0214",
                r.span,
                format!("retry must be between 1 and {RETRY_MAX}, found {}", r.node),
                "out of range",
            ));
            RETRY_DEFAULT
        }
        Some(r) => r.node,
        None => RETRY_DEFAULT,
    };
    (retry, None)
}

/// `attempts`, `fallback` and `timeout` on a step that runs other steps (a loop, a sub-plan):
/// refused with `code`, pointing at where they belong.
fn clauses_not_taken(
    s: &ast::Step,
    code: &'static str,
    what: &str,
    instead: &str,
    d: &mut Vec<Diagnostic>,
) {
    let not_taken = [
        s.retry.as_ref().map(|r| (r.span, "attempts")),
        s.retry_policy.as_ref().map(|r| (r.span, "retry")),
        s.fallback.as_ref().map(|f| (f.span, "fallback")),
        s.timeout_ms.as_ref().map(|t| (t.span, "timeout")),
    ];
    for (span, clause) in not_taken.into_iter().flatten() {
        d.push(
            Diagnostic::error(
                code,
                span,
                format!("{what} takes no `{clause}` clause"),
                "not here",
            )
            .with_hint(format!("put it on {instead}")),
        );
    }
}

/// Compiles the sub-plan step `s` calls (`use "PATH" as NAME`, then `s = NAME { inputs }`): the
/// sub-plan, whose grants must be within the caller's, whose inputs the arguments must fit.
fn compile_use(
    s: &ast::Step,
    u: &ast::Use,
    plan: &ast::Plan,
    grants: &BTreeSet<Capability>,
    catalogue: &Catalogue,
    (sources, depth): (&Sources, u32),
    d: &mut Vec<Diagnostic>,
) -> Option<CompiledBody> {
    let err =
        |span: Span, message: String, label: &str| Diagnostic::error("E0221", span, message, label);
    let path = &u.path.node;
    if depth + 1 > USES_DEPTH_MAX {
        d.push(err(
            u.path.span,
            format!("sub-plans nest deeper than {USES_DEPTH_MAX} (does `{path}` use itself?)"),
            "too deep",
        ));
        return None;
    }
    let not_granted = |d: &mut Vec<Diagnostic>, span| {
        d.push(
            err(
                span,
                format!("the sub-plan `{path}` could not be read"),
                "no such plan",
            )
            .with_hint("paths are relative to the top plan's directory, without `..`"),
        );
    };
    if path.starts_with('/') || path.split('/').any(|c| c == "..") {
        d.push(err(
            u.path.span,
            format!(
                "`{path}`: a sub-plan's path is relative and stays below the top plan's directory"
            ),
            "not allowed",
        ));
        return None;
    }
    let Some(src) = sources.get(path) else {
        not_granted(d, u.path.span);
        return None;
    };
    let (sub, parse_diags) = crate::parser::parse(src);
    let compiled = match sub {
        Some(sub) if parse_diags.is_empty() => compile_in(&sub, catalogue, sources, depth + 1),
        _ => Err(parse_diags),
    };
    let compiled = match compiled {
        Ok(c) => c,
        Err(diags) => {
            let first = diags.first().map_or(String::new(), |x| {
                let (line, col) = crate::diagnostic::line_col(src, x.span.start);
                format!(": {}:{line}:{col}: [{}] {}", path, x.code, x.message)
            });
            d.push(err(
                u.path.span,
                format!("the sub-plan `{path}` has {} error(s){first}", diags.len()),
                "does not compile",
            ));
            return None;
        }
    };
    for g in &compiled.grants {
        if !grants.iter().any(|c| c.covers(g)) {
            d.push(
                err(
                    u.path.span,
                    format!("the sub-plan `{path}` grants `{g}`, which no grant of this plan covers"),
                    "more than the caller may do",
                )
                .with_hint("a sub-plan may do at most what the plan using it may: grant it here too, or narrow the sub-plan's grant"),
            );
        }
    }
    for a in &s.call.args {
        if !compiled.inputs.iter().any(|i| i.name == a.name.node) {
            let known: Vec<&str> = compiled.inputs.iter().map(|i| i.name.as_str()).collect();
            d.push(
                err(
                    a.name.span,
                    format!("the sub-plan `{path}` has no input `{}`", a.name.node),
                    "unknown input",
                )
                .with_hint(format!("its inputs: {}", known.join(", "))),
            );
        }
    }
    for i in compiled.inputs.iter().filter(|i| i.default.is_none()) {
        if !s.call.args.iter().any(|a| a.name.node == i.name) {
            let (name, ty) = (&i.name, i.ty.as_str());
            let message = format!("the sub-plan `{path}` needs input `{name}` ({ty})");
            d.push(err(s.call.span, message, "missing input"));
        }
    }
    let _ = plan;
    clauses_not_taken(s, "E0221", "a sub-plan step", "the sub-plan's steps", d);
    crate::policy::refuse_in_child(s, &compiled.steps, "E0221", "a sub-plan", d);
    Some(CompiledBody {
        kind: ast::LoopKind::Use,
        var: None,
        items: None,
        until: None,
        max: 1,
        outer: Vec::new(),
        plan: compiled,
    })
}

/// Checks the child plan a `spawn` step names (E0229): a literal path, relative and below the
/// plan's directory, to a plan that compiles, grants nothing this plan's grants do not cover,
/// and takes the literal `inputs` given. A child's own spawns are checked down to
/// [`USES_DEPTH_MAX`] levels (a plan may spawn itself; the host bounds how deep runs nest).
fn check_spawn(
    s: &ast::Step,
    grants: &BTreeSet<Capability>,
    catalogue: &Catalogue,
    (sources, depth): (&Sources, u32),
    d: &mut Vec<Diagnostic>,
) {
    let err =
        |span: Span, message: String, label: &str| Diagnostic::error("E0229", span, message, label);
    let Some(arg) = s.call.args.iter().find(|a| a.name.node == "plan") else {
        return; // E0207 says it is missing.
    };
    let ExprKind::Str(path) = &arg.value.kind else {
        d.push(err(
            arg.value.span,
            "a child plan is named by a literal path".to_owned(),
            "not a literal",
        ));
        return;
    };
    if path.is_empty() || path.starts_with('/') || path.split('/').any(|c| c == "..") {
        let message = format!(
            "`{path}`: a child plan's path is relative and stays below the plan's directory"
        );
        d.push(err(arg.value.span, message, "not allowed"));
        return;
    }
    if depth >= USES_DEPTH_MAX {
        return;
    }
    let Some(compiled) = compile_child(path, arg.value.span, catalogue, (sources, depth), d) else {
        return;
    };
    for g in compiled
        .grants
        .iter()
        .filter(|g| !grants.iter().any(|c| c.covers(g)))
    {
        d.push(
            err(
                arg.value.span,
                format!("the child plan `{path}` grants `{g}`, which no grant of this plan covers"),
                "more than the parent may do",
            )
            .with_hint("a child may do at most what the plan spawning it may: grant it here too"),
        );
    }
    spawn_inputs_fit(s, path, &compiled, d);
}

/// The child plan at `path` (named at `span`), compiled from `sources`, or E0229 saying why it
/// cannot be.
fn compile_child(
    path: &str,
    span: Span,
    catalogue: &Catalogue,
    (sources, depth): (&Sources, u32),
    d: &mut Vec<Diagnostic>,
) -> Option<CompiledPlan> {
    let Some(src) = sources.get(path) else {
        d.push(
            Diagnostic::error(
                "E0229",
                span,
                format!("the child plan `{path}` could not be read"),
                "no such plan",
            )
            .with_hint("paths are relative to the plan's directory, without `..`"),
        );
        return None;
    };
    let (sub, parse_diags) = crate::parser::parse(src);
    let compiled = match sub {
        Some(sub) if parse_diags.is_empty() => compile_in(&sub, catalogue, sources, depth + 1),
        _ => Err(parse_diags),
    };
    compiled
        .map_err(|diags| {
            let first = diags.first().map_or(String::new(), |x| {
                let (line, col) = crate::diagnostic::line_col(src, x.span.start);
                format!(": {path}:{line}:{col}: [{}] {}", x.code, x.message)
            });
            let message = format!(
                "the child plan `{path}` has {} error(s){first}",
                diags.len()
            );
            d.push(Diagnostic::error(
                "E0229",
                span,
                message,
                "does not compile",
            ));
        })
        .ok()
}

/// The literal `inputs` map of a `spawn` step against the child plan's inputs (E0229): no
/// unknown name, every input without a default given. An `inputs` that is not a literal map is
/// checked when the child starts.
fn spawn_inputs_fit(s: &ast::Step, path: &str, child: &CompiledPlan, d: &mut Vec<Diagnostic>) {
    let given = s.call.args.iter().find(|a| a.name.node == "inputs");
    let entries = match given.map(|a| &a.value.kind) {
        Some(ExprKind::Map(entries)) => entries.as_slice(),
        Some(_) => return,
        None => &[],
    };
    for (k, _) in entries {
        if !child.inputs.iter().any(|i| i.name == k.node) {
            let known: Vec<&str> = child.inputs.iter().map(|i| i.name.as_str()).collect();
            d.push(
                Diagnostic::error(
                    "E0229",
                    k.span,
                    format!("the child plan `{path}` has no input `{}`", k.node),
                    "unknown input",
                )
                .with_hint(format!("its inputs: {}", known.join(", "))),
            );
        }
    }
    for i in child.inputs.iter().filter(|i| i.default.is_none()) {
        if !entries.iter().any(|(k, _)| k.node == i.name) {
            let message = format!(
                "the child plan `{path}` needs input `{}` ({})",
                i.name,
                i.ty.as_str()
            );
            d.push(Diagnostic::error(
                "E0229",
                s.call.span,
                message,
                "missing input",
            ));
        }
    }
}

/// Two loops' bodies may not share a step name: an iteration is recorded as `NAME[i]`, so the
/// `c[0]` of one loop and the `c[0]` of another would be one step to the log, its causal links
/// and the engine (which refused the second outcome at run time before this check).
fn loop_bodies_named_apart(plan: &ast::Plan, d: &mut Vec<Diagnostic>) {
    let mut seen: BTreeMap<&str, (&str, Span)> = BTreeMap::new();
    for s in &plan.steps {
        let Some(b) = &s.body else { continue };
        for inner in &b.steps {
            let name = inner.name.node.as_str();
            match seen.get(name) {
                Some(&(other, span)) if other != s.name.node => d.push(
                    Diagnostic::error(
                        "E0220",
                        inner.name.span,
                        format!(
                            "`{name}` is also a step inside loop `{other}`: both loops' iterations would be `{name}[0]`, `{name}[1]`, ..."
                        ),
                        "name taken",
                    )
                    .with_related(span, "the other loop's step")
                    .with_hint("give the steps of each loop's body their own names"),
                ),
                Some(_) => {}
                None => {
                    seen.insert(name, (s.name.node.as_str(), inner.name.span));
                }
            }
        }
    }
}

/// Compiles a loop's body as a plan of its own (the loop variable and every outer name the
/// body reads become its inputs), and checks what a loop step may not be.
fn compile_body(
    s: &ast::Step,
    b: &ast::Body,
    plan: &ast::Plan,
    catalogue: &Catalogue,
    (sources, depth): (&Sources, u32),
    outer_names: &BTreeSet<&str>,
    d: &mut Vec<Diagnostic>,
) -> Option<CompiledBody> {
    let loop_error =
        |span: Span, message: String, label: &str| Diagnostic::error("E0220", span, message, label);
    if b.max.node == 0 || b.max.node > ITERATIONS_MAX {
        let m = b.max.node;
        let message = format!("a loop's `max` must be between 1 and {ITERATIONS_MAX}, found {m}");
        d.push(loop_error(b.max.span, message, "out of range"));
    }
    clauses_not_taken(s, "E0220", "a loop step", "the steps inside the loop", d);
    crate::policy::refuse_in_body(&b.steps, d);
    if let Some(items) = &b.items
        && eval::is_constant(items)
        && let Ok(v) = eval::eval(items, &Map::new())
        && !v.is_array()
    {
        d.push(loop_error(
            items.span,
            format!(
                "`for` goes over a list, and this is {}",
                a_or_an(eval::type_name(&v))
            ),
            "not a list",
        ));
    }
    let body_names: BTreeSet<&str> = b.steps.iter().map(|x| x.name.node.as_str()).collect();
    for inner in &b.steps {
        if inner.body.is_some() {
            d.push(loop_error(
                inner.name.span,
                "loops do not nest (yet): move the inner loop to a step of its own".into(),
                "a loop inside a loop",
            ));
        }
        let name = inner.name.node.as_str();
        if outer_names.contains(&name) || b.var.as_ref().is_some_and(|v| v.node == name) {
            d.push(loop_error(
                inner.name.span,
                format!("`{name}` inside the loop has the name of an input, a step or the loop variable outside it"),
                "name taken",
            ));
        }
    }
    // Every name the body reads that it does not define: the loop variable, or an outer name.
    let mut free = BTreeSet::new();
    let mut note = |e: &Expr| {
        let mut paths = Vec::new();
        eval::refs(e, &mut paths);
        for p in paths {
            let root = p.root.node.as_str();
            if !body_names.contains(root) && outer_names.contains(&root) {
                free.insert(root.to_owned());
            }
        }
    };
    for inner in &b.steps {
        for a in inner
            .call
            .args
            .iter()
            .chain(inner.fallback.iter().flat_map(|f| &f.args))
        {
            note(&a.value);
        }
        inner
            .when
            .iter()
            .chain(inner.expect.iter())
            .for_each(&mut note);
    }
    if let Some(u) = &b.until {
        note(u);
    }
    let var = b.var.as_ref().map(|v| v.node.clone());
    let json_input = |name: &str, span: Span| ast::Input {
        name: Spanned::new(name.to_owned(), span),
        ty: Spanned::new(InputType::Json, span),
        default: None,
    };
    let mut inputs: Vec<ast::Input> = free.iter().map(|n| json_input(n, s.name.span)).collect();
    if let Some(v) = &b.var {
        inputs.push(json_input(&v.node, v.span));
    }
    let sub = ast::Plan {
        name: s.name.clone(),
        version: plan.version.clone(),
        grants: plan.grants.clone(),
        inputs,
        uses: plan.uses.clone(),
        tools: plan.tools.clone(),
        // A loop body runs inside the plan's run, already attached to its store.
        memory: None,
        queue: None,
        steps: b.steps.clone(),
    };
    match compile_in(&sub, catalogue, sources, depth) {
        Ok(compiled) => {
            if let Some(u) = &b.until {
                // `until` reads the iteration's steps and outer names only.
                let mut paths = Vec::new();
                eval::refs(u, &mut paths);
                for p in paths {
                    let root = p.root.node.as_str();
                    if !body_names.contains(root) && !outer_names.contains(&root) {
                        d.push(Diagnostic::error(
                            "E0204",
                            p.root.span,
                            format!("unknown name `{root}`"),
                            "not a step of the loop or a name outside it",
                        ));
                    }
                }
            }
            Some(CompiledBody {
                kind: b.kind,
                var,
                items: b.items.clone(),
                until: b.until.clone(),
                max: b.max.node,
                outer: free.into_iter().collect(),
                plan: compiled,
            })
        }
        Err(diags) => {
            // The body's own grants were the outer plan's: report only what is not about them.
            d.extend(
                diags
                    .into_iter()
                    .filter(|x| x.code != "E0217" && x.code != "E0210"),
            );
            None
        }
    }
}

fn input_admits(ty: InputType, v: &Value) -> bool {
    let as_arg = match ty {
        InputType::String => ArgType::String,
        InputType::Int => ArgType::Int,
        InputType::Bool => ArgType::Bool,
        InputType::List => ArgType::List,
        InputType::Map => ArgType::Map,
        InputType::Json => ArgType::Any,
    };
    as_arg.admits(v)
}

fn compile_call(
    call: &ast::Call,
    catalogue: &Catalogue,
    grants: &BTreeSet<Capability>,
    d: &mut Vec<Diagnostic>,
) -> CompiledCall {
    let args: Args = call
        .args
        .iter()
        .map(|a| (a.name.node.clone(), a.value.clone()))
        .collect();
    let tool = call.tool.node.clone();
    let Some(spec) = catalogue.get(&tool) else {
        if let Some(why) = catalogue.unavailable(&tool) {
            d.push(unavailable("E0205", call.tool.span, &tool, why));
            return CompiledCall { tool, args };
        }
        let mut diag = Diagnostic::error(
            "E0205",
            call.tool.span,
            format!("unknown tool `{tool}`"),
            "not in the tool catalogue",
        );
        diag = match closest(&tool, catalogue.names()) {
            Some(c) => diag.with_hint(format!("did you mean `{c}`?")),
            None => diag.with_hint("`oracle plan tools` lists the tools"),
        };
        d.push(diag);
        return CompiledCall { tool, args };
    };
    let mut seen = BTreeSet::new();
    for a in &call.args {
        if !seen.insert(a.name.node.as_str()) {
            d.push(Diagnostic::error(
                "E0206",
                a.name.span,
                format!("argument `{}` is given twice", a.name.node),
                "again here",
            ));
            continue;
        }
        let Some(arg) = spec.arg(&a.name.node) else {
            let mut diag = Diagnostic::error(
                "E0206",
                a.name.span,
                format!("`{tool}` has no argument `{}`", a.name.node),
                "unknown argument",
            );
            let known: Vec<&str> = spec.args.iter().map(|x| x.name.as_str()).collect();
            diag = match closest(&a.name.node, known.iter().copied()) {
                Some(c) => diag.with_hint(format!("did you mean `{c}`?")),
                None => diag.with_hint(format!("`{tool}` takes: {}", known.join(", "))),
            };
            d.push(diag);
            continue;
        };
        if eval::is_constant(&a.value)
            && arg.ty != ArgType::Any
            && let Ok(v) = eval::eval(&a.value, &Map::new())
            && !arg.ty.admits(&v)
        {
            d.push(Diagnostic::error(
                "E0208",
                a.value.span,
                format!(
                    "argument `{}` of `{tool}` must be {}, found {}",
                    arg.name,
                    a_or_an(arg.ty.as_str()),
                    a_or_an(eval::type_name(&v))
                ),
                "wrong type",
            ));
        }
        if arg.ty == ArgType::Time
            && eval::is_constant(&a.value)
            && let Ok(Value::String(text)) = eval::eval(&a.value, &Map::new())
            && let Err(e) = crate::time::deadline_ms(&text, 0)
        {
            d.push(
                Diagnostic::error(
                    "E0225",
                    a.value.span,
                    format!("argument `{}` of `{tool}`: {e}", arg.name),
                    "not a duration or an instant",
                )
                .with_hint("a duration (`30s`, `10m`, `2h`, `2d`) or an RFC 3339 instant (`2026-12-01T09:00:00Z`)"),
            );
        }
    }
    let missing: Vec<&str> = spec
        .args
        .iter()
        .filter(|a| a.required && !args.contains_key(&a.name))
        .map(|a| a.name.as_str())
        .collect();
    if !missing.is_empty() {
        d.push(
            Diagnostic::error(
                "E0207",
                call.span,
                format!(
                    "`{tool}` is missing required argument{} {}",
                    if missing.len() > 1 { "s" } else { "" },
                    quote_list(&missing)
                ),
                "in this call",
            )
            .with_hint(format!(
                "add {}",
                missing
                    .iter()
                    .map(|m| format!("`{m}: ...`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        );
    }
    static_capability(spec, &args, call, grants, d);
    CompiledCall { tool, args }
}

/// `a string`, `an int`.
fn a_or_an(noun: &str) -> String {
    let article = if noun.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {noun}")
}

fn quote_list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the capability's scope is a literal, checks the grants cover it (the runtime checks
/// every call again, including the ones decided only at run time).
fn static_capability(
    spec: &ToolSpec,
    args: &Args,
    call: &ast::Call,
    grants: &BTreeSet<Capability>,
    d: &mut Vec<Diagnostic>,
) {
    let Some(rule) = &spec.capability else { return };
    let (scope, span) = match &rule.scope {
        ScopeFrom::Fixed(s) => (s.clone(), call.tool.span),
        ScopeFrom::Arg(a) => match args.get(a) {
            Some(e) if eval::is_constant(e) => match eval::eval(e, &Map::new()) {
                Ok(Value::String(s)) => (s, e.span),
                _ => return,
            },
            _ => return,
        },
    };
    let needed = rule.needed(&scope);
    if !grants.iter().any(|g| g.covers(&needed)) {
        let normalized = oracle_core::capability::PATH_DOMAINS
            .contains(&needed.domain.as_str())
            .then(|| needed.subject());
        let hint = match normalized {
            Some(None) => {
                "`..` climbs above where the path starts, so no grant can cover it".to_owned()
            }
            Some(Some(n)) if n != scope => format!(
                "`..` resolves this path to `{n}`, outside the grants; add `grant {}:{}:{n}` only if the plan should reach it",
                needed.domain, needed.action
            ),
            _ if needed.domain == "net" => match needed.subject() {
                Some(origin) => format!(
                    "add `grant {}:{}:{origin}` if the plan should be allowed this origin",
                    needed.domain, needed.action
                ),
                None => "only http and https URLs without user information have an origin a grant can cover".to_owned(),
            },
            _ => format!(
                "add `grant {needed}` (or a pattern covering it) if the plan should be allowed this"
            ),
        };
        d.push(
            Diagnostic::error(
                "E0211",
                span,
                format!(
                    "`{}` needs `{needed}`, which no grant of this plan covers",
                    spec.name
                ),
                "not granted",
            )
            .with_hint(hint),
        );
    }
}

/// What only an agent step can get wrong: a `tools` list (when written as a constant) naming
/// a tool that does not exist or cannot be an agent's, and a `fallback`, which agent steps do
/// not use.
fn agent_step(s: &ast::Step, catalogue: &Catalogue, d: &mut Vec<Diagnostic>) {
    use crate::agent::{AGENT_TOOL, CHAT_TOOL, EVENT_TOOL};
    if let Some(f) = s.fallback.as_ref().filter(|f| f.tool.node != AGENT_TOOL) {
        d.push(
            Diagnostic::error(
                "E0219",
                f.span,
                format!("an agent step's fallback is another agent, not `{}`", f.tool.node),
                "not an agent",
            )
            .with_hint("write `fallback agent { model: \"strong\", ... }`, or `on failure yield` to hand the step to a person"),
        );
    }
    let Some(tools) = s.call.args.iter().find(|a| a.name.node == "tools") else {
        return;
    };
    let ExprKind::List(items) = &tools.value.kind else {
        return;
    };
    for item in items {
        let ExprKind::Str(name) = &item.kind else {
            continue;
        };
        // `human.ask` may be offered: the model asks a person and the run suspends in the loop.
        // Not `wait.event`: an event is sent to a wait the plan declares, never to a model's.
        if [AGENT_TOOL, CHAT_TOOL, EVENT_TOOL].contains(&name.as_str()) {
            d.push(Diagnostic::error(
                "E0219",
                item.span,
                format!("`{name}` cannot be one of an agent's tools"),
                "not allowed here",
            ));
        } else if let (None, Some(why)) = (catalogue.get(name), catalogue.unavailable(name)) {
            d.push(unavailable("E0219", item.span, name, why));
        } else if catalogue.get(name).is_none() {
            let mut diag = Diagnostic::error(
                "E0219",
                item.span,
                format!("the agent's tools name `{name}`, which is not a tool"),
                "unknown tool",
            );
            if let Some(c) = closest(name, catalogue.names()) {
                diag = diag.with_hint(format!("did you mean `{c}`?"));
            }
            d.push(diag);
        }
    }
}

/// `code` for a declared tool at `span` whose manifest is broken (`why`): the plan uses it, so
/// the run cannot start; a plan that does not is not held up by it.
fn unavailable(code: &'static str, span: Span, tool: &str, why: &str) -> Diagnostic {
    Diagnostic::error(
        code,
        span,
        format!("tool `{tool}` is declared by a manifest that cannot be loaded: {why}"),
        "its manifest is broken",
    )
    .with_hint(
        "fix the manifest (`oracle tools check DIR` lists every problem), or use another tool",
    )
}

/// E0222 for the constant at `span`, whose value is larger than [`eval::BUILD_BYTES_MAX`]
/// (`err` says where building it passed the bound).
fn too_large(span: Span, err: &eval::EvalError) -> Diagnostic {
    let mut diag = Diagnostic::error(
        "E0222",
        span,
        format!("this constant is too large: {err}"),
        "too large",
    )
    .with_hint("values are built under this bound when the plan runs too, so this one never could be; read large data with a tool instead");
    if err.span != span {
        diag = diag.with_related(err.span, "the bound is passed here");
    }
    diag
}

/// E0222 for every constant part of `e` (the largest parts that name nothing) whose value is
/// larger than [`eval::BUILD_BYTES_MAX`]: it could never be built when its step runs. Building
/// it here is bounded by the same limit.
fn constants_too_large(e: &Expr, d: &mut Vec<Diagnostic>) {
    if eval::is_constant(e) {
        if let Err(err) = eval::eval(e, &Map::new())
            && matches!(err.kind, EvalErrorKind::TooLarge { .. })
        {
            d.push(too_large(e.span, &err));
        }
        return;
    }
    match &e.kind {
        ExprKind::List(items) => items.iter().for_each(|i| constants_too_large(i, d)),
        ExprKind::Map(entries) => entries.iter().for_each(|(_, v)| constants_too_large(v, d)),
        ExprKind::Unary(_, x) => constants_too_large(x, d),
        ExprKind::Binary(_, l, r) => {
            constants_too_large(l, d);
            constants_too_large(r, d);
        }
        _ => {}
    }
}

fn duplicate_keys(e: &Expr, d: &mut Vec<Diagnostic>) {
    match &e.kind {
        ExprKind::Map(entries) => {
            let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
            for (k, v) in entries {
                if let Some(first) = seen.insert(k.node.as_str(), k.span) {
                    d.push(
                        Diagnostic::error(
                            "E0215",
                            k.span,
                            format!("key `{}` appears twice in this map", k.node),
                            "again here",
                        )
                        .with_related(first, "first here"),
                    );
                }
                duplicate_keys(v, d);
            }
        }
        ExprKind::List(items) => items.iter().for_each(|i| duplicate_keys(i, d)),
        ExprKind::Unary(_, x) => duplicate_keys(x, d),
        ExprKind::Binary(_, l, r) => {
            duplicate_keys(l, d);
            duplicate_keys(r, d);
        }
        _ => {}
    }
}

/// Kahn's algorithm with the ready set ordered by declaration index: deterministic, ties broken
/// by declaration order. On a cycle, returns it as a path `a, b, ..., a` (each uses the next).
#[allow(clippy::type_complexity)]
fn topo(steps: &[CompiledStep]) -> Result<(Vec<u32>, Vec<Vec<u32>>), Vec<u32>> {
    let n = steps.len();
    let mut waiting: Vec<u64> = steps.iter().map(|s| s.deps.len() as u64).collect();
    let mut users: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (i, s) in steps.iter().enumerate() {
        for &dep in &s.deps {
            users[dep as usize].push(i as u32);
        }
    }
    let mut ready: BTreeSet<u32> = (0..n as u32)
        .filter(|&i| waiting[i as usize] == 0)
        .collect();
    let mut order = Vec::with_capacity(n);
    let mut level = vec![0u32; n];
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in &users[i as usize] {
            level[u as usize] = level[u as usize].max(level[i as usize] + 1);
            waiting[u as usize] -= 1;
            if waiting[u as usize] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() < n {
        return Err(find_cycle(steps, &waiting));
    }
    let depth = level.iter().copied().max().map_or(0, |m| m as usize + 1);
    let mut levels = vec![Vec::new(); depth];
    for i in 0..n {
        levels[level[i] as usize].push(i as u32);
    }
    Ok((order, levels))
}

/// A cycle among the steps Kahn's algorithm could not order: walk dependencies from the first
/// such step until one repeats. Linear in the steps and their dependencies: each step is entered
/// at most once, and where it sits on the path is looked up, not searched for (a search made a
/// 200,000-step cycle quadratic).
fn find_cycle(steps: &[CompiledStep], waiting: &[u64]) -> Vec<u32> {
    let stuck = |i: u32| waiting[i as usize] > 0;
    let Some(start) = (0..steps.len() as u32).find(|&i| stuck(i)) else {
        return Vec::new();
    };
    // Position of each step on the path, or `NOT_ON_PATH`.
    const NOT_ON_PATH: u32 = u32::MAX;
    let mut on_path = vec![NOT_ON_PATH; steps.len()];
    let mut path = vec![start];
    on_path[start as usize] = 0;
    let mut at = start;
    loop {
        // Every stuck step waits on at least one stuck dependency.
        let Some(&next) = steps[at as usize].deps.iter().find(|&&d| stuck(d)) else {
            return path;
        };
        let pos = on_path[next as usize];
        if pos != NOT_ON_PATH {
            let mut cycle = path.split_off(pos as usize);
            cycle.push(next);
            return cycle;
        }
        on_path[next as usize] = path.len() as u32;
        path.push(next);
        at = next;
    }
}

/// The canonical compiled form, as JSON: spans, comments, whitespace and argument order are
/// gone; everything that changes what a run does is kept (including declaration order, which
/// breaks ties in the execution order).
///
/// Built by moving values into place: `json!` would copy every embedded subtree again at each
/// level.
pub fn canonical_form(p: &CompiledPlan) -> Value {
    fn obj<const N: usize>(fields: [(&str, Value); N]) -> Value {
        Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }
    fn opt(v: Option<Value>) -> Value {
        v.unwrap_or(Value::Null)
    }
    let call = |c: &CompiledCall| {
        let args: Map<String, Value> = c
            .args
            .iter()
            .map(|(k, v)| (k.clone(), expr_form(v)))
            .collect();
        obj([
            ("tool", Value::from(c.tool.as_str())),
            ("args", Value::Object(args)),
        ])
    };
    let inputs: Map<String, Value> = p
        .inputs
        .iter()
        .map(|i| {
            (
                i.name.clone(),
                obj([
                    ("type", Value::from(i.ty.as_str())),
                    ("default", opt(i.default.clone())),
                ]),
            )
        })
        .collect();
    let steps: Vec<Value> = p
        .steps
        .iter()
        .map(|s| {
            let mut v = obj([
                ("name", Value::from(s.name.as_str())),
                ("call", call(&s.call)),
                (
                    "after",
                    Value::Array(s.after.iter().map(|a| Value::from(a.as_str())).collect()),
                ),
                ("when", opt(s.when.as_ref().map(expr_form))),
                ("expect", opt(s.expect.as_ref().map(expr_form))),
                ("retry", Value::from(s.retry)),
                ("fallback", opt(s.fallback.as_ref().map(call))),
                ("on_failure", Value::from(s.on_failure.as_str())),
                ("timeout_ms", opt(s.timeout_ms.map(Value::from))),
            ]);
            if let Value::Object(m) = &mut v {
                optional_forms(p, s, m);
            }
            v
        })
        .collect();
    obj([
        ("format", Value::from(COMPILED_FORMAT)),
        ("name", Value::from(p.name.as_str())),
        ("version", Value::from(p.version)),
        (
            "grants",
            Value::Array(
                p.grants
                    .iter()
                    .map(|g| Value::from(g.to_string()))
                    .collect(),
            ),
        ),
        ("inputs", Value::Object(inputs)),
        ("steps", Value::Array(steps)),
    ])
}

/// An expression without spans: `["int", 5]`, `["ref", "read", ["field", "content"]]`,
/// `["+", l, r]`...
pub fn expr_form(e: &Expr) -> Value {
    let tagged = |tag: &str, rest: Vec<Value>| {
        let mut v = Vec::with_capacity(rest.len() + 1);
        v.push(Value::from(tag));
        v.extend(rest);
        Value::Array(v)
    };
    match &e.kind {
        ExprKind::Null => tagged("null", vec![]),
        ExprKind::Bool(b) => tagged("bool", vec![Value::Bool(*b)]),
        ExprKind::Int(i) => tagged("int", vec![Value::from(*i)]),
        ExprKind::Str(s) => tagged("str", vec![Value::from(s.as_str())]),
        ExprKind::List(items) => tagged(
            "list",
            vec![Value::Array(items.iter().map(expr_form).collect())],
        ),
        ExprKind::Map(entries) => tagged(
            "map",
            vec![Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.node.clone(), expr_form(v)))
                    .collect(),
            )],
        ),
        ExprKind::Ref(p) => {
            let mut rest = vec![Value::from(p.root.node.as_str())];
            for s in &p.segments {
                rest.push(match s {
                    Segment::Field(f) => tagged("field", vec![Value::from(f.node.as_str())]),
                    Segment::Index(i) => tagged("index", vec![Value::from(i.node)]),
                });
            }
            tagged("ref", rest)
        }
        ExprKind::Unary(op, x) => tagged(
            if *op == ast::UnaryOp::Not {
                "not"
            } else {
                "neg"
            },
            vec![expr_form(x)],
        ),
        ExprKind::Binary(op, l, r) => tagged(op.as_str(), vec![expr_form(l), expr_form(r)]),
    }
}

/// The plan hash: the hash of the canonical compiled form in the `oracle v1 plan` domain.
///
/// Encodes [`canonical_form`] straight into canonical bytes (keys written in ascending order)
/// without building the JSON tree; `tests/compile.rs` checks both give the same hash.
pub fn plan_hash(p: &CompiledPlan) -> Hash {
    // The streaming encoder knows loop-free plans; a plan with a loop takes the reference path
    // (same bytes by definition).
    if p.steps
        .iter()
        .any(|s| s.body.is_some() || s.policy.is_some() || s.undo.is_some())
    {
        return plan_hash_via_value(p);
    }
    let mut out = Vec::with_capacity(256 + 256 * p.steps.len());
    encode_plan(p, &mut out);
    oracle_core::hash::hash_in(oracle_core::hash::domain::PLAN, &out)
}

/// The entries of a step's canonical form present only where given (a loop, a retry policy,
/// an `undo`), so the hashes of plans without them do not change.
fn optional_forms(p: &CompiledPlan, s: &CompiledStep, m: &mut Map<String, Value>) {
    let opt = |v: Option<Value>| v.unwrap_or(Value::Null);
    if let Some(policy) = &s.policy {
        m.insert("retry_policy".to_owned(), policy.form(s.retry));
    }
    if let Some(u) = s.undo {
        let target = p.steps[u as usize].name.as_str();
        m.insert("undo".to_owned(), Value::from(target));
    }
    if let Some(b) = &s.body {
        let outer = b.outer.iter().map(|o| Value::from(o.as_str())).collect();
        let form: Map<String, Value> = [
            ("kind", Value::from(b.kind.as_str())),
            ("var", opt(b.var.as_deref().map(Value::from))),
            ("items", opt(b.items.as_ref().map(expr_form))),
            ("until", opt(b.until.as_ref().map(expr_form))),
            ("max", Value::from(b.max)),
            ("outer", Value::Array(outer)),
            ("plan", canonical_form(&b.plan)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        m.insert("loop".to_owned(), Value::Object(form));
    }
}

/// The hash of [`canonical_form`] computed through a JSON value: the reference for
/// [`plan_hash`].
pub fn plan_hash_via_value(p: &CompiledPlan) -> Hash {
    // Invariant: the canonical form holds only strings, integers, bools, null, lists and maps
    // (expression integers are i64, defaults were checked canonical), so it always encodes.
    oracle_core::canon::hash_value_in(oracle_core::hash::domain::PLAN, &canonical_form(p))
        .unwrap_or(Hash::ZERO)
}

fn encode_plan(p: &CompiledPlan, out: &mut Vec<u8>) {
    use oracle_core::canon::write as w;
    w::map(out, 6);
    w::key(out, "format");
    w::uint(out, COMPILED_FORMAT);
    w::key(out, "grants");
    w::list(out, p.grants.len() as u64);
    for g in &p.grants {
        w::str(out, &g.to_string());
    }
    w::key(out, "inputs");
    w::map(out, p.inputs.len() as u64);
    // `inputs` is sorted by name (it came from a BTreeMap).
    for i in &p.inputs {
        w::key(out, &i.name);
        w::map(out, 2);
        w::key(out, "default");
        match &i.default {
            // Invariant: defaults were evaluated from constants, which have no floats.
            Some(v) => {
                let _ = oracle_core::canon::encode_into(v, out);
            }
            None => w::null(out),
        }
        w::key(out, "type");
        w::str(out, i.ty.as_str());
    }
    w::key(out, "name");
    w::str(out, &p.name);
    w::key(out, "steps");
    w::list(out, p.steps.len() as u64);
    for s in &p.steps {
        w::map(out, 9);
        w::key(out, "after");
        w::list(out, s.after.len() as u64);
        for a in &s.after {
            w::str(out, a);
        }
        w::key(out, "call");
        encode_call(&s.call, out);
        w::key(out, "expect");
        encode_opt_expr(s.expect.as_ref(), out);
        w::key(out, "fallback");
        match &s.fallback {
            Some(c) => encode_call(c, out),
            None => w::null(out),
        }
        w::key(out, "name");
        w::str(out, &s.name);
        w::key(out, "on_failure");
        w::str(out, s.on_failure.as_str());
        w::key(out, "retry");
        w::uint(out, s.retry);
        w::key(out, "timeout_ms");
        match s.timeout_ms {
            Some(t) => w::uint(out, t),
            None => w::null(out),
        }
        w::key(out, "when");
        encode_opt_expr(s.when.as_ref(), out);
    }
    w::key(out, "version");
    w::uint(out, p.version);
}

fn encode_call(c: &CompiledCall, out: &mut Vec<u8>) {
    use oracle_core::canon::write as w;
    w::map(out, 2);
    w::key(out, "args");
    w::map(out, c.args.len() as u64);
    for (k, v) in &c.args {
        w::key(out, k);
        encode_expr(v, out);
    }
    w::key(out, "tool");
    w::str(out, &c.tool);
}

fn encode_opt_expr(e: Option<&Expr>, out: &mut Vec<u8>) {
    match e {
        Some(e) => encode_expr(e, out),
        None => oracle_core::canon::write::null(out),
    }
}

/// [`expr_form`], encoded directly.
fn encode_expr(e: &Expr, out: &mut Vec<u8>) {
    use oracle_core::canon::write as w;
    let tagged = |out: &mut Vec<u8>, tag: &str, rest: u64| {
        w::list(out, rest + 1);
        w::str(out, tag);
    };
    match &e.kind {
        ExprKind::Null => tagged(out, "null", 0),
        ExprKind::Bool(b) => {
            tagged(out, "bool", 1);
            w::bool(out, *b);
        }
        ExprKind::Int(i) => {
            tagged(out, "int", 1);
            w::int(out, *i);
        }
        ExprKind::Str(s) => {
            tagged(out, "str", 1);
            w::str(out, s);
        }
        ExprKind::List(items) => {
            tagged(out, "list", 1);
            w::list(out, items.len() as u64);
            for i in items {
                encode_expr(i, out);
            }
        }
        ExprKind::Map(entries) => {
            tagged(out, "map", 1);
            // Keys are unique (E0215); the canonical map is in key order.
            let mut sorted: Vec<&(ast::Spanned<String>, Expr)> = entries.iter().collect();
            sorted.sort_by(|a, b| a.0.node.as_bytes().cmp(b.0.node.as_bytes()));
            sorted.dedup_by(|a, b| a.0.node == b.0.node);
            w::map(out, sorted.len() as u64);
            for (k, v) in sorted {
                w::key(out, &k.node);
                encode_expr(v, out);
            }
        }
        ExprKind::Ref(p) => {
            tagged(out, "ref", 1 + p.segments.len() as u64);
            w::str(out, &p.root.node);
            for s in &p.segments {
                match s {
                    Segment::Field(f) => {
                        tagged(out, "field", 1);
                        w::str(out, &f.node);
                    }
                    Segment::Index(i) => {
                        tagged(out, "index", 1);
                        w::int(out, i.node);
                    }
                }
            }
        }
        ExprKind::Unary(op, x) => {
            tagged(
                out,
                if *op == ast::UnaryOp::Not {
                    "not"
                } else {
                    "neg"
                },
                1,
            );
            encode_expr(x, out);
        }
        ExprKind::Binary(op, l, r) => {
            tagged(out, op.as_str(), 2);
            encode_expr(l, out);
            encode_expr(r, out);
        }
    }
}
