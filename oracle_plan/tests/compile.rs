//! Compiler properties: any DAG compiles to a valid, deterministic topological order with
//! correct levels; cycles are reported as real paths; the plan hash ignores formatting and
//! argument order but not meaning; expressions evaluate as documented.

use crate::common;

use common::tool;
use oracle_plan::catalogue::{ArgType, Catalogue};
use oracle_plan::compile::check;
use oracle_plan::eval::{self, eval};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn catalogue() -> Catalogue {
    Catalogue::new([tool(
        "json.get",
        &[
            ("value", ArgType::Any, true),
            ("path", ArgType::String, true),
        ],
    )])
}

/// A plan of `n` steps where step `k` (in hidden order) uses the outputs of `deps[k]` (all
/// earlier in hidden order), declared in the order `decl`.
fn plan_text(deps: &[Vec<usize>], decl: &[usize], spaced: bool) -> String {
    let mut s = String::from("plan random version 1\n");
    for &k in decl {
        let refs: Vec<String> = deps[k].iter().map(|d| format!("s{d}.out")).collect();
        if spaced {
            s.push_str(&format!(
                "\n# step {k}\ns{k}   =   json.get {{\n    path: \"x\",\n    value: [{}],\n}}\n",
                refs.join(" ,  ")
            ));
        } else {
            s.push_str(&format!(
                "s{k} = json.get {{ value: [{}], path: \"x\" }}\n",
                refs.join(", ")
            ));
        }
    }
    s
}

fn dag() -> impl Strategy<Value = (Vec<Vec<usize>>, Vec<usize>)> {
    (1usize..30).prop_flat_map(|n| {
        let deps = (0..n)
            .map(|k| {
                if k == 0 {
                    Just(vec![]).boxed()
                } else {
                    prop::collection::btree_set(0..k, 0..k.min(4))
                        .prop_map(|s| s.into_iter().collect())
                        .boxed()
                }
            })
            .collect::<Vec<_>>();
        (deps, Just((0..n).collect::<Vec<_>>()).prop_shuffle())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_dags_compile_to_a_valid_deterministic_order((deps, decl) in dag()) {
        let (compiled, diags) = check(&plan_text(&deps, &decl, false), &catalogue());
        prop_assert!(diags.is_empty(), "{:?}", diags);
        let c = compiled.unwrap();
        let n = deps.len();
        prop_assert_eq!(c.order.len(), n);
        // Position of each declared step in the order; every dependency comes first.
        let mut pos = vec![0; n];
        for (p, &i) in c.order.iter().enumerate() {
            pos[i as usize] = p;
        }
        for (i, s) in c.steps.iter().enumerate() {
            for &d in &s.deps {
                prop_assert!(pos[d as usize] < pos[i]);
            }
        }
        // Ties are broken by declaration order: the order is the smallest ready step each time.
        let mut done = vec![false; n];
        for &next in &c.order {
            let smallest = (0..n).find(|&i| !done[i] && c.steps[i].deps.iter().all(|&d| done[d as usize])).unwrap();
            prop_assert_eq!(next as usize, smallest);
            done[smallest] = true;
        }
        // Levels: one more than the deepest dependency.
        let mut level = vec![0usize; n];
        for (l, members) in c.levels.iter().enumerate() {
            for &i in members {
                level[i as usize] = l;
            }
        }
        for (i, s) in c.steps.iter().enumerate() {
            let want = s.deps.iter().map(|&d| level[d as usize] + 1).max().unwrap_or(0);
            prop_assert_eq!(level[i], want);
        }
    }

    #[test]
    fn the_plan_hash_ignores_formatting_and_argument_order((deps, decl) in dag()) {
        let (a, _) = check(&plan_text(&deps, &decl, false), &catalogue());
        let (b, _) = check(&plan_text(&deps, &decl, true), &catalogue());
        prop_assert_eq!(a.unwrap().hash, b.unwrap().hash);
    }

    #[test]
    fn the_plan_hash_changes_with_meaning((deps, decl) in dag()) {
        let text = plan_text(&deps, &decl, false);
        let (a, _) = check(&text, &catalogue());
        let (b, _) = check(&text.replacen("path: \"x\"", "path: \"y\"", 1), &catalogue());
        prop_assert_ne!(a.unwrap().hash, b.unwrap().hash);
    }

    #[test]
    fn a_back_edge_is_reported_as_a_cycle_path((deps, decl) in dag(), pick in any::<prop::sample::Index>()) {
        let n = deps.len();
        prop_assume!(n >= 2);
        // Make step 0 (first in hidden order) use the last one, closing a cycle if a path exists.
        let last = n - 1;
        let mut deps = deps;
        let _ = pick;
        deps[0].push(last);
        let (compiled, diags) = check(&plan_text(&deps, &decl, false), &catalogue());
        let reaches = {
            // Does `last` (transitively) depend on 0? Then adding 0 -> last closes a cycle.
            let mut seen = vec![false; n];
            let mut stack = vec![last];
            while let Some(k) = stack.pop() {
                if !seen[k] { seen[k] = true; stack.extend(deps[k].iter().copied().filter(|&d| !(k == 0 && d == last))); }
            }
            seen[0]
        };
        if !reaches {
            prop_assert!(compiled.is_some());
            return Ok(());
        }
        let cycle = diags.iter().find(|d| d.code == "E0209").expect("a cycle diagnostic");
        let path: Vec<&str> = cycle.message.split(": ").nth(1).unwrap().split(" -> ").collect();
        prop_assert_eq!(path.first(), path.last());
        for w in path.windows(2) {
            let a: usize = w[0][1..].parse().unwrap();
            let b: usize = w[1][1..].parse().unwrap();
            prop_assert!(deps[a].contains(&b), "{} does not use {}", w[0], w[1]);
        }
    }
}

fn parse_expr(src: &str) -> oracle_plan::ast::Expr {
    let text = format!("plan e version 1\nx = json.get {{ value: {src}, path: \"p\" }}\n");
    let (plan, diags) = oracle_plan::parse(&text);
    assert!(diags.is_empty(), "{src}: {diags:?}");
    plan.unwrap().steps[0].call.args[0].value.clone()
}

fn env() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "stats".into(),
        json!({"words": 12, "lines": 3, "tags": ["a", "b"]}),
    );
    m.insert("name".into(), json!("notes"));
    m
}

#[test]
fn expressions_evaluate_as_documented() {
    let cases = [
        ("1 + 2 * 3", json!(7)),
        ("(1 + 2) * 3", json!(9)),
        ("-7 / 2", json!(-3)),
        ("-7 % 2", json!(-1)),
        ("stats.words >= 10 and stats.lines < 5", json!(true)),
        ("not stats.words == 12", json!(false)),
        (
            "\"file: \" + name + \" has \" + stats.words",
            json!("file: notes has 12"),
        ),
        ("stats.tags[1]", json!("b")),
        ("[1] + [2]", json!([1, 2])),
        (
            "{ b: 1, a: [true, null] }",
            json!({"a": [true, null], "b": 1}),
        ),
        ("\"abc\" < \"abd\"", json!(true)),
        ("9223372036854775807 + 1", json!(9223372036854775808u64)),
    ];
    for (src, want) in cases {
        assert_eq!(eval(&parse_expr(src), &env()), Ok(want), "{src}");
    }
}

#[test]
fn expression_errors_say_what_is_wrong() {
    let cases = [
        (
            "stats.wrds",
            "has no field `wrds` (it has: lines, tags, words)",
        ),
        ("stats.tags[5]", "index 5 is out of range"),
        ("1 / 0", "division by zero"),
        ("stats.words and true", "needs bools"),
        ("name - 1", "cannot combine string and int"),
        ("9223372036854775807 * 4", "integer overflow"),
        ("missing", "`missing` has no value"),
    ];
    for (src, want) in cases {
        let err = eval(&parse_expr(src), &env()).unwrap_err();
        assert!(err.message.contains(want), "{src}: {}", err.message);
    }
    assert!(eval::is_constant(&parse_expr("[1, {a: 2}]")));
    assert!(!eval::is_constant(&parse_expr("[1, stats.words]")));
}

#[test]
fn and_or_short_circuit() {
    // The right side would be an error if evaluated.
    assert_eq!(
        eval(&parse_expr("false and missing"), &env()),
        Ok(json!(false))
    );
    assert_eq!(eval(&parse_expr("true or 1 / 0"), &env()), Ok(json!(true)));
}

proptest! {
    /// The streaming plan hash equals the hash of the readable canonical form.
    #[test]
    fn streamed_plan_hash_equals_the_canonical_form_hash((deps, decl) in dag(), extra in "[a-z]{0,6}") {
        let mut text = plan_text(&deps, &decl, false);
        text.push_str(&format!(
            "input limit: int = 3\ninput tag: json = {{ b: [1, \"{extra}\"], a: null }}\nlast = json.get {{ value: {{ z: 1, y: -2, x: [true, tag] }}, path: \"{extra}\" }}\n  when not (limit < 2) and s0.out != null\n  expect last.v[0] == 1\n  retry 5\n  fallback json.get {{ value: 1, path: \"p\" }}\n  on failure yield\n  timeout 2s\n  after s0\n"
        ));
        let (c, diags) = check(&text, &catalogue());
        prop_assert!(diags.is_empty(), "{:?}", diags);
        let c = c.unwrap();
        prop_assert_eq!(c.hash, oracle_plan::compile::plan_hash_via_value(&c));
    }
}

/// `retry` (1 to `RETRY_MAX` attempts) and `timeout` (1 ms to `TIMEOUT_MS_MAX`, 24 h) are
/// accepted at their bounds and refused one past them with E0214, pointing at the number.
#[test]
fn retry_and_timeout_are_bounded_at_both_ends() {
    use oracle_plan::compile::{RETRY_MAX, TIMEOUT_MS_MAX};
    assert_eq!(TIMEOUT_MS_MAX, 24 * 60 * 60 * 1000);
    let plan = |clause: &str| {
        format!("plan p version 1\nx = json.get {{ value: 1, path: \"\" }}\n  {clause}\n")
    };
    let accepted = |clause: &str| {
        let (compiled, diags) = check(&plan(clause), &catalogue());
        assert!(diags.is_empty(), "{clause}: {diags:?}");
        compiled.unwrap().steps.remove(0)
    };
    assert_eq!(accepted("retry 1").retry, 1);
    assert_eq!(accepted(&format!("retry {RETRY_MAX}")).retry, RETRY_MAX);
    assert_eq!(accepted("timeout 1ms").timeout_ms, Some(1));
    assert_eq!(
        accepted(&format!("timeout {}s", TIMEOUT_MS_MAX / 1000)).timeout_ms,
        Some(TIMEOUT_MS_MAX)
    );
    for clause in [
        "retry 0".to_owned(),
        format!("retry {}", RETRY_MAX + 1),
        "timeout 0ms".to_owned(),
        format!("timeout {}ms", TIMEOUT_MS_MAX + 1),
        format!("timeout {}s", TIMEOUT_MS_MAX / 1000 + 1),
    ] {
        let text = plan(&clause);
        let (compiled, diags) = check(&text, &catalogue());
        assert!(compiled.is_none(), "{clause} compiled");
        assert_eq!(
            diags.iter().map(|d| d.code).collect::<Vec<_>>(),
            ["E0214"],
            "{clause}: {diags:?}"
        );
        let number = clause.split(' ').nth(1).unwrap();
        let at = text.find(number).unwrap();
        assert_eq!(
            diags[0].span.start as usize, at,
            "{clause}: points at the number"
        );
    }
}

/// A cycle through 100,000 steps (half of `STEPS_MAX`) is found in one walk and named in
/// bounded space: its first `CYCLE_STEPS_SHOWN_MAX` steps, then how many more. The search for a
/// repeat was quadratic (this test took 41 s in a debug build, 148 s at 200,000 steps) and the
/// diagnostic named every step, which the CLI printed as megabytes (32 MB at 200,000).
#[test]
fn a_cycle_through_100000_steps_is_found_in_one_walk_and_named_in_bounded_space() {
    use oracle_plan::compile::CYCLE_STEPS_SHOWN_MAX;
    use std::fmt::Write;
    let shown = CYCLE_STEPS_SHOWN_MAX as usize;
    let ring = |n: usize| {
        let mut text = String::from("plan ring version 1\n");
        for i in 0..n {
            let next = (i + 1) % n;
            writeln!(
                text,
                "s{i} = json.get {{ value: s{next}.out, path: \"x\" }}"
            )
            .unwrap();
        }
        let (compiled, diags) = check(&text, &catalogue());
        assert!(compiled.is_none());
        assert_eq!(
            diags.len(),
            1,
            "{:?}",
            diags.iter().map(|d| d.code).collect::<Vec<_>>()
        );
        diags.into_iter().next().unwrap()
    };
    let names = |n: usize| {
        (0..n)
            .map(|i| format!("s{i}"))
            .collect::<Vec<_>>()
            .join(" -> ")
    };

    let all = 100_000;
    let d = ring(all);
    assert_eq!(d.code, "E0209");
    assert_eq!(
        d.message,
        format!(
            "steps depend on each other in a cycle: {} -> ... and {} more -> s0",
            names(shown),
            all - shown
        )
    );
    assert_eq!(d.related.len(), shown - 1);

    // At the limit every step is named; one more is counted instead.
    let d = ring(shown);
    assert!(
        d.message.ends_with(&format!(": {} -> s0", names(shown))),
        "{}",
        d.message
    );
    assert_eq!(d.related.len(), shown - 1);
    let d = ring(shown + 1);
    assert!(
        d.message
            .ends_with(&format!(": {} -> ... and 1 more -> s0", names(shown))),
        "{}",
        d.message
    );
}

/// Agent steps are found where a run names their calls: at the top, in a loop's body (calls
/// `name[i]`) and in sub-plans (`step/name`, with the sub-plan's source); the `[i]` of an
/// iteration is not part of the name.
#[test]
fn agent_steps_are_found_in_loop_bodies_and_sub_plans() {
    let top = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/plans/agent-loop.plan"),
    )
    .unwrap();
    let sub = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/plans/agent-ask.plan"),
    )
    .unwrap();
    let without = oracle_plan::agent_steps_of(&top);
    assert_eq!(without.into_iter().collect::<Vec<_>>(), ["think"]);
    let mut sources = oracle_plan::Sources::new();
    sources.insert("agent-ask.plan".to_owned(), sub);
    let agents = oracle_plan::agent_steps_with(&top, &sources);
    assert_eq!(
        agents.iter().map(String::as_str).collect::<Vec<_>>(),
        ["nested/ask", "think"]
    );
    for step in ["think", "think[0]", "think[12]", "nested/ask"] {
        assert!(oracle_plan::is_agent_call(&agents, step), "{step}");
    }
    for step in [
        "each",
        "think@1.1",
        "think[x]",
        "nested",
        "ask",
        "thinker[0]",
        "nested/ask@2.1",
    ] {
        assert!(!oracle_plan::is_agent_call(&agents, step), "{step}");
    }
}

/// Two loops whose bodies share a step name are refused (E0220), pointing at both: each
/// iteration is recorded as `NAME[i]`, so both loops' `c[0]` would be one step to the log (a run
/// of such a plan used to stop with "an outcome for `c[0]`, which has no call running"). Other
/// names in the second body compile.
#[test]
fn two_loops_may_not_share_a_body_step_name() {
    let body = |name: &str, step: &str| {
        format!(
            "{name} = for x in [1, 2] max 2 {{\n  {step} = json.get {{ value: x, path: \"a\" }}\n}}\n"
        )
    };
    let twins = format!("plan p version 1\n{}{}", body("a", "c"), body("b", "c"));
    let (plan, d) = check(&twins, &catalogue());
    assert!(plan.is_none());
    let codes: Vec<&str> = d.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["E0220"], "{d:#?}");
    assert!(
        d[0].message.contains("`c` is also a step inside loop `a`"),
        "{}",
        d[0].message
    );
    assert_eq!(d[0].related.len(), 1, "{d:#?}");
    let apart = format!("plan p version 1\n{}{}", body("a", "c"), body("b", "e"));
    let (plan, d) = check(&apart, &catalogue());
    assert!(plan.is_some(), "{d:#?}");
}
