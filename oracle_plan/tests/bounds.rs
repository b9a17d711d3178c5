//! What evaluating a plan's expressions may build (issue 32, item 9): an expression naming one
//! large value many times is refused once it would hold `BUILD_BYTES_MAX` bytes, before it
//! builds more, instead of building every copy first; a call's arguments share one budget; a
//! constant too large to ever build is a compile error (E0222). Sizes are counted, never timed.

use crate::common;

use common::tool;
use oracle_core::State;
use oracle_core::agent::{Action, Agent, Observation};
use oracle_plan::agent::PlanAgent;
use oracle_plan::ast::Expr;
use oracle_plan::catalogue::{ArgType, Catalogue};
use oracle_plan::eval::{self, BUILD_BYTES_MAX, Budget, EvalErrorKind, build_cost};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn catalogue() -> Catalogue {
    let any = |name| (name, ArgType::Any, false);
    Catalogue::new([tool("t.take", &[any("x"), any("y"), any("z")])])
}

fn parse_expr(src: &str) -> Expr {
    let text = format!("plan e version 1\ns = t.take {{ x: {src} }}\n");
    let (plan, diags) = oracle_plan::parse(&text);
    assert!(diags.is_empty(), "{diags:?}");
    plan.unwrap().steps[0].call.args[0].value.clone()
}

/// `n` references to `name`, as a list.
fn list_of(name: &str, n: usize) -> String {
    format!("[{}]", vec![name; n].join(", "))
}

fn env_with(name: &str, value: Value) -> Map<String, Value> {
    let mut env = Map::new();
    env.insert(name.into(), value);
    env
}

/// 200 references to a 1 MiB string: the unbounded evaluator built all 200 copies (200 MiB;
/// with an 8 MiB value, 1.7 GB, and with 2,000 references the process aborted). Bounded, it
/// stops after the copies the budget holds (16 MiB: at most sixteen), refusing by kind.
#[test]
fn naming_one_large_value_many_times_is_refused_before_the_copies_are_built() {
    let big = "x".repeat(1 << 20);
    let env = env_with("big", Value::String(big));
    let one = build_cost(&env["big"], u64::MAX).unwrap();
    for src in [
        list_of("big", 200),
        format!(
            "{{ {} }}",
            (0..200)
                .map(|i| format!("k{i}: big"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!("[{}]", vec!["[big, big, big, big]"; 50].join(", ")),
        // `+` nests (64 levels at most), so a long sum is a list of sums.
        format!("[{}]", vec!["big + big + big + big"; 50].join(", ")),
        format!("[{}]", vec!["[big] + [big, big] + [big]"; 50].join(", ")),
    ] {
        let mut budget = Budget::default();
        let err = eval::eval_with(&parse_expr(&src), &env, &mut budget).unwrap_err();
        assert_eq!(
            err.kind,
            EvalErrorKind::TooLarge {
                limit: BUILD_BYTES_MAX
            },
            "{}: {err}",
            &src[..40]
        );
        assert!(err.message.contains("build_bytes_max"), "{}", err.message);
        // What was built before the refusal: within the bound, at most sixteen copies.
        assert!(budget.held() <= BUILD_BYTES_MAX);
        assert!(budget.held() / one <= 16, "{} copies", budget.held() / one);
    }
    // The same references, few enough, are built as before.
    let v = eval::eval(&parse_expr(&list_of("big", 15)), &env).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(15));
}

/// A call's arguments are its input: they share one budget. Three arguments of 7 MiB each are
/// refused at the decision (no call is made; the step fails, naming the bound), though each one
/// alone is within it.
#[test]
fn a_calls_arguments_share_one_budget_and_the_step_fails_naming_it() {
    let src = "plan p version 1\ninput big: string\ns = t.take { x: big, y: big, z: big }\n";
    let (plan, diags) = oracle_plan::check(src, &catalogue());
    let plan = plan.unwrap_or_else(|| panic!("{diags:?}"));
    let inputs = env_with("big", Value::String("x".repeat(7 << 20)));
    let mut agent = PlanAgent::new(plan, inputs);
    let decision = agent.decide(&State::new(), &[] as &[Observation]).unwrap();
    assert!(
        !matches!(&decision.action, Action::Call(c) if !c.is_empty()),
        "no call is made: {:?}",
        decision.action
    );
    let status = decision
        .changes
        .iter()
        .rev()
        .find_map(|c| c.set.get("step/s").cloned())
        .expect("the step's state is recorded");
    assert_eq!(status["status"], "failed", "{status}");
    let error = status["error"].as_str().unwrap();
    assert!(
        error.contains("argument `z`") && error.contains("build_bytes_max"),
        "{error}"
    );
}

/// An input over the runtime's own bound (8 MiB) but within twice it is still built and handed
/// to the runtime, which refuses it by name as a recorded failed call, as before the bound.
#[test]
fn an_input_the_runtime_refuses_by_name_still_reaches_it() {
    let src = "plan p version 1\ninput big: string\ns = t.take { x: big + big }\n";
    let (plan, _) = oracle_plan::check(src, &catalogue());
    let inputs = env_with("big", Value::String("x".repeat(5 << 20)));
    let mut agent = PlanAgent::new(plan.unwrap(), inputs);
    let decision = agent.decide(&State::new(), &[] as &[Observation]).unwrap();
    match &decision.action {
        Action::Call(c) => {
            assert_eq!(c.len(), 1);
            assert_eq!(c[0].input["x"].as_str().map(str::len), Some(10 << 20));
        }
        other => panic!("expected the call, got {other:?}"),
    }
}

/// A constant that could never be built when its step runs is a compile error, E0222, and
/// building it at compile time stops at the same bound.
#[test]
fn a_constant_larger_than_the_build_bound_is_e0222() {
    let chunk = "y".repeat(1 << 20);
    let list = format!("[{}]", vec![format!("\"{chunk}\""); 17].join(", "));
    for src in [
        format!("plan p version 1\ninput big: list = {list}\ns = t.take {{ x: big }}\n"),
        format!("plan p version 1\ns = t.take {{ x: {list} }}\n"),
        format!("plan p version 1\ninput n: int\ns = t.take {{ x: [n, {list}] }}\n"),
    ] {
        let (plan, diags) = oracle_plan::check(&src, &catalogue());
        assert!(plan.is_none());
        let codes: Vec<&str> = diags.iter().map(|d| d.code).collect();
        assert_eq!(
            codes,
            ["E0222"],
            "{:?}",
            diags.iter().map(|d| &d.message).collect::<Vec<_>>()
        );
        // It points at the whole constant, and at where building it passed the bound.
        assert_eq!(diags[0].span.start as usize, src.find("[\"").unwrap());
        assert_eq!(diags[0].related.len(), 1);
        assert!(
            diags[0].message.contains("build_bytes_max"),
            "{}",
            diags[0].message
        );
    }
    // Fifteen chunks and their list fit.
    let fits = format!("[{}]", vec![format!("\"{chunk}\""); 15].join(", "));
    let (plan, diags) = oracle_plan::check(
        &format!("plan p version 1\ninput big: list = {fits}\ns = t.take {{ x: big }}\n"),
        &catalogue(),
    );
    assert!(plan.is_some(), "{diags:?}");
}

/// `build_cost` is the canonical length, with nulls and bools counted as integers (9 bytes),
/// and stops early past its `within`.
#[test]
fn build_cost_is_the_canonical_length_with_scalars_counted_as_integers() {
    for v in [
        json!(""),
        json!("abc"),
        json!(-5),
        json!(u64::MAX),
        json!([]),
        json!({}),
        json!({"a": [1, "xy", {"": 3}], "bc": {"d": []}}),
    ] {
        let canonical = oracle_core::canon::encode(&v).unwrap().len() as u64;
        assert_eq!(build_cost(&v, u64::MAX), Some(canonical), "{v}");
        assert_eq!(build_cost(&v, canonical), Some(canonical), "{v}");
        if canonical > 0 {
            assert_eq!(build_cost(&v, canonical - 1), None, "{v}");
        }
    }
    assert_eq!(
        build_cost(&json!([null, true, false]), u64::MAX),
        Some(9 + 27)
    );
}

/// Expressions over a few named values: literals, references, lists, maps, `+` of strings and
/// of lists (construction only, so what is held is exactly what the value counts).
fn construction() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("l".to_owned()),
        Just("m.k".to_owned()),
        "[a-z]{0,8}".prop_map(|s| format!("\"{s}\"")),
        (0i64..1000).prop_map(|i| i.to_string()),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| {
                let entries: Vec<String> = v
                    .iter()
                    .enumerate()
                    .map(|(i, e)| format!("k{i}: {e}"))
                    .collect();
                format!("{{ {} }}", entries.join(", "))
            }),
            (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("({x} + {y})")),
            (inner.clone(), inner).prop_map(|(x, y)| format!("({x} == {y})")),
        ]
    })
}

fn named() -> Map<String, Value> {
    let mut env = Map::new();
    env.insert("a".into(), json!("a".repeat(300)));
    env.insert("b".into(), json!("bb"));
    env.insert("l".into(), json!(["x".repeat(100), 7, ["y"]]));
    env.insert("m".into(), json!({"k": "z".repeat(50)}));
    env
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Under any limit, evaluation never panics, never holds more than the limit, and either
    /// gives the value the unbounded evaluation gives (holding exactly what it counts) or is
    /// refused by kind; and a value refused under a limit is one that needs more.
    #[test]
    fn bounded_evaluation_never_panics_and_never_holds_more_than_its_limit(
        src in construction(),
        limit in 0u64..20_000,
    ) {
        let text = format!("plan e version 1\ns = t.take {{ x: {src} }}\n");
        let (plan, diags) = oracle_plan::parse(&text);
        prop_assume!(diags.is_empty());
        let expr = plan.unwrap().steps[0].call.args[0].value.clone();
        let env = named();
        let full = eval::eval_with(&expr, &env, &mut Budget::new(u64::MAX));
        let mut budget = Budget::new(limit);
        let bounded = eval::eval_with(&expr, &env, &mut budget);
        prop_assert!(budget.held() <= limit);
        match (&full, &bounded) {
            (Ok(v), Ok(w)) => {
                prop_assert_eq!(v, w);
                prop_assert_eq!(Some(budget.held()), build_cost(w, u64::MAX));
            }
            (_, Err(e)) if e.kind == (EvalErrorKind::TooLarge { limit }) => {
                if let Ok(v) = &full
                    && !src.contains("==")
                {
                    // Without `==` (whose operands are built, then dropped), only a value
                    // larger than the limit is refused, give or take the operands of a `+`
                    // held while their result is counted (a tag and a length each).
                    let pluses = src.matches('+').count() as u64;
                    prop_assert!(build_cost(v, u64::MAX).unwrap() + 18 * pluses > limit);
                }
            }
            (Err(e), Err(f)) => prop_assert_eq!(e, f),
            (full, bounded) => prop_assert!(false, "{:?} vs {:?}", full, bounded),
        }
    }
}
