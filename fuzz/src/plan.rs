//! Fuzz target `plan`: arbitrary UTF-8 text through the plan parser, printer and compiler
//! (against the built-in catalogue, `oracle_runtime::catalogue::builtin()`).
//!
//! Properties checked, beyond "never panics":
//! - every diagnostic's span lies inside the text on character boundaries, diagnostics come
//!   sorted by position, and no diagnostic means a plan;
//! - a plan that parsed cleanly prints to text that parses cleanly to the same tree (spans
//!   aside) and prints to the same text again;
//! - text that compiles reports no error, its plan hash is the hash of its canonical form by
//!   both encoders, its order is topological and its levels respect every dependency; and the
//!   printed plan compiles to the same hash and canonical form;
//! - text that does not compile says why (at least one error).

use std::sync::OnceLock;

use oracle_plan::catalogue::Catalogue;
use oracle_plan::compile::{CompiledPlan, canonical_form, plan_hash, plan_hash_via_value};
use oracle_plan::diagnostic::{Diagnostic, Severity};
use oracle_plan::parser::{has_errors, parse};
use oracle_plan::print::{print, strip_spans};

/// The built-in catalogue, built once (building it compiles every tool's JSON Schemas).
fn catalogue() -> &'static Catalogue {
    static CATALOGUE: OnceLock<Catalogue> = OnceLock::new();
    CATALOGUE.get_or_init(oracle_runtime::catalogue::builtin)
}

/// Checks every property above on one input (inputs that are not UTF-8 are skipped).
pub fn check(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let (plan, diags) = parse(src);
    check_diagnostics(src, &diags);
    assert!(
        diags.windows(2).all(|w| w[0].span.start <= w[1].span.start),
        "diagnostics are sorted by position"
    );
    if diags.is_empty() {
        assert!(plan.is_some(), "no diagnostic, yet no plan");
    }
    if let Some(plan) = &plan {
        let printed = print(plan);
        let (again, more) = parse(&printed);
        if !has_errors(&diags) {
            assert!(
                more.is_empty(),
                "the printed plan does not parse cleanly: {more:#?}\n{printed}"
            );
            let again = again.expect("a plan, with no diagnostic");
            assert!(
                strip_spans(&again) == strip_spans(plan),
                "printing changed the tree:\n{printed}"
            );
            assert_eq!(print(&again), printed, "printing is not stable");
        }
    }

    let (compiled, diags) = oracle_plan::check(src, catalogue());
    check_diagnostics(src, &diags);
    let Some(compiled) = compiled else {
        assert!(has_errors(&diags), "not compiled, yet no error: {diags:#?}");
        return;
    };
    assert!(!has_errors(&diags), "compiled despite errors: {diags:#?}");
    check_compiled(&compiled);
    let plan = plan.expect("compiled without a parsed plan");
    let printed = print(&plan);
    let (again, more) = oracle_plan::check(&printed, catalogue());
    let again =
        again.unwrap_or_else(|| panic!("the printed plan does not compile: {more:#?}\n{printed}"));
    assert_eq!(again.hash, compiled.hash, "printing changed the plan hash");
    assert_eq!(canonical_form(&again), canonical_form(&compiled));
}

/// Spans inside the text, on character boundaries; every diagnostic says something.
fn check_diagnostics(src: &str, diags: &[Diagnostic]) {
    for d in diags {
        let spans = std::iter::once(&d.span).chain(d.related.iter().map(|(s, _)| s));
        for span in spans {
            let (s, e) = (span.start as usize, span.end as usize);
            assert!(
                s <= e && e <= src.len() && src.is_char_boundary(s) && src.is_char_boundary(e),
                "span {s}..{e} outside the text or inside a character: {d:?}"
            );
        }
        assert!(
            d.code.starts_with('E') && !d.message.is_empty() && !d.label.is_empty(),
            "{d:?}"
        );
        if d.severity == Severity::Error {
            assert!(d.code.len() == 5, "{d:?}");
        }
    }
}

/// The invariants of a compiled plan.
fn check_compiled(c: &CompiledPlan) {
    assert_eq!(c.hash, plan_hash(c), "recorded hash is the plan hash");
    assert_eq!(
        c.hash,
        plan_hash_via_value(c),
        "both encoders of the plan hash agree"
    );
    assert!(
        c.grants.windows(2).all(|w| w[0] < w[1]),
        "grants sorted and unique"
    );
    assert!(
        c.inputs.windows(2).all(|w| w[0].name < w[1].name),
        "inputs sorted by name and unique"
    );
    let n = c.steps.len();
    // Position of each step in the order, and its level.
    let mut position = vec![usize::MAX; n];
    for (at, &i) in c.order.iter().enumerate() {
        let i = i as usize;
        assert!(i < n && position[i] == usize::MAX, "order is a permutation");
        position[i] = at;
    }
    assert_eq!(c.order.len(), n, "order is a permutation");
    let mut level = vec![usize::MAX; n];
    for (l, steps) in c.levels.iter().enumerate() {
        assert!(!steps.is_empty(), "no empty level");
        for &i in steps {
            let i = i as usize;
            assert!(
                i < n && level[i] == usize::MAX,
                "levels partition the steps"
            );
            level[i] = l;
        }
    }
    assert!(
        level.iter().all(|&l| l != usize::MAX),
        "every step has a level"
    );
    for (i, step) in c.steps.iter().enumerate() {
        assert!(
            step.deps.windows(2).all(|w| w[0] < w[1]),
            "deps ascending and unique"
        );
        for &d in &step.deps {
            let d = d as usize;
            assert!(d < n && d != i, "a dependency is another step");
            assert!(position[d] < position[i], "order is topological");
            assert!(level[d] < level[i], "levels respect dependencies");
        }
    }
}
