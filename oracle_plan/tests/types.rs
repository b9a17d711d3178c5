//! Types from schemas (`oracle_plan::types`) and what a plan needs bound
//! (`oracle_plan::bindings`): the typo and the wrong type are caught with their line, column and
//! suggestion, and nothing a run could evaluate is refused (the property tests).

use crate::common;

use common::tool;
use oracle_plan::bindings::referenced;
use oracle_plan::catalogue::{ArgType, Catalogue};
use oracle_plan::compile::{Sources, check, check_with};
use oracle_plan::diagnostic::line_col;
use oracle_plan::eval::{self, EvalErrorKind};
use oracle_plan::{Diagnostic, parse};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn closed(props: Value) -> Value {
    json!({"type": "object", "properties": props, "additionalProperties": false})
}

/// `llm.chat`, `agent`, `text.count` and `json.get` with their output schemas, as the runtime
/// declares them (trimmed).
fn catalogue() -> Catalogue {
    let chat_out =
        closed(json!({"content": {"type": "string"}, "parsed": {}, "model": {"type": "string"}}));
    Catalogue::new([
        tool(
            "llm.chat",
            &[
                ("model", ArgType::String, true),
                ("messages", ArgType::List, true),
                ("schema", ArgType::Map, false),
            ],
        ),
        tool(
            "agent",
            &[
                ("model", ArgType::String, true),
                ("task", ArgType::Any, true),
                ("output", ArgType::Map, false),
            ],
        ),
        tool("text.count", &[("text", ArgType::String, true)]),
        tool(
            "json.get",
            &[
                ("value", ArgType::Any, true),
                ("path", ArgType::String, true),
            ],
        ),
    ])
    .with_output_schemas([
        ("llm.chat".to_owned(), chat_out.clone()),
        ("agent".to_owned(), chat_out),
        (
            "text.count".to_owned(),
            closed(json!({"words": {"type": "integer"}, "lines": {"type": "integer"}})),
        ),
        ("json.get".to_owned(), json!({})),
    ])
}

const ANALYST: &str = r#"plan brief version 1

analyst = llm.chat {
  model: "fast",
  messages: [],
  schema: { type: "object", properties: { headline: { type: "string" }, tags: { type: "array", items: { type: "string" } } } },
}
"#;

fn errors(src: &str) -> Vec<Diagnostic> {
    let (_, d) = check(src, &catalogue());
    d
}

/// `CODE line:col message | hint` of each diagnostic.
fn shown(src: &str) -> Vec<String> {
    errors(src)
        .iter()
        .map(|d| {
            let (l, c) = line_col(src, d.span.start);
            format!(
                "{} {l}:{c} {} | {}",
                d.code,
                d.message,
                d.hint.clone().unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn a_misspelt_schema_property_is_an_error_with_a_suggestion() {
    let src = format!("{ANALYST}out = text.count {{ text: analyst.parsed.hedline }}\n");
    assert_eq!(
        shown(&src),
        [
            "E0223 8:41 `analyst.parsed` has no field `hedline` | did you mean `analyst.parsed.headline`? its fields: headline, tags"
        ]
    );
}

#[test]
fn a_schema_typed_value_in_the_wrong_operation_is_an_error() {
    let src = format!(
        "{ANALYST}out = text.count {{ text: analyst.parsed.headline + analyst.parsed.tags }}\n"
    );
    let got = shown(&src);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("E0224 8:26 `+` cannot combine a string and a list"),
        "{got:?}"
    );
    let src =
        format!("{ANALYST}out = text.count {{ text: \"n\" + (analyst.parsed.headline - 1) }}\n");
    assert!(shown(&src)[0].starts_with("E0224"), "{:?}", shown(&src));
    // Indexing a string, a field of a list.
    let src = format!("{ANALYST}out = text.count {{ text: analyst.parsed.headline[0] }}\n");
    assert!(
        shown(&src)[0].starts_with("E0223 8:50 `analyst.parsed.headline` is a string, not a list"),
        "{:?}",
        shown(&src)
    );
    let src = format!(
        "{ANALYST}n = text.count {{ text: \"a\" }}\nout = text.count {{ text: \"w\" + n.words.x }}\n"
    );
    assert!(shown(&src)[0].starts_with("E0223"), "{:?}", shown(&src));
}

#[test]
fn what_is_not_known_is_not_checked() {
    let ok = [
        // A schema that does not close the object (additionalProperties), or is not a literal.
        "a = llm.chat { model: \"m\", messages: [], schema: { type: \"object\", properties: { x: {} }, additionalProperties: true } }\nb = text.count { text: a.parsed.y }\n",
        "input s: map\na = llm.chat { model: \"m\", messages: [], schema: s }\nb = text.count { text: a.parsed.y }\n",
        // No schema: `parsed` is anything.
        "a = llm.chat { model: \"m\", messages: [] }\nb = text.count { text: a.parsed.y.z[3] + 1 }\n",
        // `number`, `enum` without a type, nullable types.
        "a = agent { model: \"m\", task: \"t\", output: { properties: { n: { type: \"number\" }, e: { enum: [1] }, s: { type: [\"string\", \"null\"] } } } }\nb = text.count { text: \"\" + (a.parsed.n * 2) + a.parsed.e + a.parsed.s }\n",
        // Inputs of type json; a map input's fields.
        "input j: json\ninput m: map\nb = text.count { text: j.a.b + m.c }\n",
        // Loops and sub-plan-free paths into a loop's output.
        "docs = for x in [\"a\", \"b\"] max 5 {\n  c = text.count { text: x }\n}\nd = text.count { text: \"\" + docs[0].c.words }\n",
    ];
    for body in ok {
        let src = format!("plan ok version 1\n{body}");
        assert_eq!(shown(&src), Vec::<String>::new(), "{src}");
    }
}

#[test]
fn loops_sub_plans_and_inputs_are_typed() {
    let bad = [
        (
            "docs = for x in [1, 2] max 5 {\n  c = text.count { text: \"a\" }\n}\nd = text.count { text: \"\" + docs[0].c.wrods }\n",
            "E0223",
        ),
        (
            "docs = for x in [\"a\"] max 5 {\n  c = text.count { text: x - 1 }\n}\n",
            "E0224",
        ),
        ("input n: int\nc = text.count { text: n.x }\n", "E0223"),
        ("input s: string\nc = text.count { text: s * 2 }\n", "E0224"),
        (
            "docs = for x in [1] max 5 {\n  c = text.count { text: \"a\" }\n}\nd = text.count { text: docs.c }\n",
            "E0223",
        ),
    ];
    for (body, code) in bad {
        let src = format!("plan bad version 1\n{body}");
        let got = errors(&src);
        assert_eq!(got.len(), 1, "{src}: {got:?}");
        assert_eq!(got[0].code, code, "{src}: {got:?}");
    }
    let mut sources = Sources::new();
    sources.insert(
        "count.plan".into(),
        "plan count version 1\ninput t: string\nstats = text.count { text: t }\n".into(),
    );
    let top = "plan top version 1\nuse \"count.plan\" as count\nn = count { t: \"a b\" }\nm = text.count { text: \"\" + n.stats.wrds }\nk = text.count { text: \"\" + n.stat }\n";
    let (_, d) = check_with(top, &catalogue(), &sources);
    let codes: Vec<&str> = d.iter().map(|x| x.code).collect();
    assert_eq!(codes, ["E0223", "E0218"], "{d:?}");
    assert_eq!(d[0].message, "`n.stats` has no field `wrds`");
    assert_eq!(d[1].message, "step `n` (count) has no output field `stat`");
}

#[test]
fn with_inputs_a_schema_from_an_input_is_typed_at_start() {
    let src = "plan s version 1\ninput s: map\na = llm.chat { model: \"m\", messages: [], schema: s }\nb = text.count { text: a.parsed.hedline }\n";
    let (plan, d) = check(src, &catalogue());
    assert!(d.is_empty(), "{d:?}");
    let plan = plan.unwrap();
    let inputs: Map<String, Value> =
        json!({"s": {"type": "object", "properties": {"headline": {}}}})
            .as_object()
            .cloned()
            .unwrap();
    let d = oracle_plan::types::check(&plan, &catalogue(), Some(&inputs));
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].code, "E0223");
    assert_eq!(line_col(src, d[0].span.start), (4, 33));
}

#[test]
fn the_models_and_secrets_a_plan_references() {
    let src = r#"plan refs version 1
input which: string = "strong"
input many: list = ["a", "b"]
x = llm.chat { model: "fast", messages: [{ role: "user", content: "h" }] }
  fallback llm.chat { model: which, messages: [] }
y = agent { model: x.content, task: { key: secret("TOKEN") } }
z = for m in many max 5 {
  c = llm.chat { model: m, messages: [] }
}
"#;
    let (plan, d) = check(src, &catalogue());
    assert!(d.is_empty(), "{d:?}");
    let plan = plan.unwrap();
    let inputs =
        oracle_plan::agent::bind_inputs(&plan, &[("which".into(), "slow".into())]).unwrap();
    let r = referenced(&plan, &inputs);
    assert_eq!(
        r.models.into_iter().collect::<Vec<_>>(),
        ["a", "b", "fast", "slow"]
    );
    assert_eq!(r.secrets.into_iter().collect::<Vec<_>>(), ["TOKEN"]);
}

/// A JSON value a plan can write as a literal: maps with `[a-z]` keys, lists, small ints,
/// `[a-z]` strings, bools, null.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(Value::from),
        "[a-z]{0,3}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The schema `v` matches as it is: its maps' keys as properties, a list's items typed when all
/// alike.
fn schema_of(v: &Value) -> Value {
    match v {
        Value::Null => json!({"type": "null"}),
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Number(_) => json!({"type": "integer"}),
        Value::String(_) => json!({"type": "string"}),
        Value::Array(items) => {
            let schemas: Vec<Value> = items.iter().map(schema_of).collect();
            match schemas.first() {
                Some(s) if schemas.iter().all(|x| x == s) => json!({"type": "array", "items": s}),
                _ => json!({"type": "array"}),
            }
        }
        Value::Object(m) => {
            let props: Map<String, Value> =
                m.iter().map(|(k, x)| (k.clone(), schema_of(x))).collect();
            json!({"type": "object", "properties": props})
        }
    }
}

/// `v` as a plan literal.
fn literal(v: &Value) -> String {
    match v {
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{ {} }}",
            m.iter()
                .map(|(k, x)| format!("\"{k}\": {}", literal(x)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Number(n) if n.as_i64().is_some_and(|i| i < 0) => {
            format!("(0 - {})", -n.as_i64().unwrap_or(0))
        }
        other => other.to_string(),
    }
}

/// Every path into `v` (`.key`, `[i]`), with the value there.
fn paths(v: &Value, at: String, out: &mut Vec<(String, Value)>) {
    out.push((at.clone(), v.clone()));
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, x)| paths(x, format!("{at}[{i}]"), out)),
        Value::Object(m) => m
            .iter()
            .for_each(|(k, x)| paths(x, format!("{at}.{k}"), out)),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Never a false error: a reply matching its schema, read at any path it has, with any
    /// operator the evaluator accepts for the values there, checks clean; and an operator the
    /// evaluator refuses for mismatched types is refused by `plan check` too when both sides'
    /// types are definite.
    #[test]
    fn reading_what_a_reply_has_checks_clean(v in value(), ops in prop::collection::vec((0usize..64, 0usize..64, 0usize..7), 1..6)) {
        let mut all = Vec::new();
        paths(&v, String::new(), &mut all);
        let schema = json!({"type": "object", "properties": {"r": schema_of(&v)}});
        let reply = json!({"parsed": {"r": v}});
        let env: Map<String, Value> = [("a".to_owned(), reply)].into_iter().collect();
        for (p, q, op) in ops {
            let (l, lv) = &all[p % all.len()];
            let (r, rv) = &all[q % all.len()];
            let op = ["+", "-", "*", "<", ">=", "==", "%"][op];
            let expr = format!("a.parsed.r{l} {op} a.parsed.r{r}");
            let src = format!(
                "plan p version 1\na = llm.chat {{ model: \"m\", messages: [], schema: {} }}\nb = json.get {{ value: {expr}, path: \"\" }}\n",
                literal(&schema)
            );
            let (parsed, _) = parse(&src);
            let Some(parsed) = parsed else {
                return Err(TestCaseError::fail(format!("does not parse: {src}")));
            };
            let (_, diags) = check(&src, &catalogue());
            let evaluated = eval::eval(&parsed.steps[1].call.args[0].value, &env);
            match evaluated {
                Ok(_) => prop_assert!(diags.is_empty(), "{src}\n{diags:?}"),
                Err(err) if err.kind == EvalErrorKind::NoValue && err.message.contains("cannot combine") => {
                    prop_assert!(diags.iter().all(|d| d.code == "E0224"), "{src}\n{diags:?}\n{lv} {rv}");
                }
                Err(_) => prop_assert!(diags.iter().all(|d| d.code == "E0224"), "{src}\n{diags:?}"),
            }
        }
    }
}
