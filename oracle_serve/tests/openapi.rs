//! `docs/openapi.json` describes exactly the routes `oracle serve` mounts under `/api/v1`.
//!
//! The description is kept by hand (through `sdk/python/tools/openapi.py`), so nothing but this
//! test stops a new route from going undescribed or a removed one from staying described. It
//! also checks what makes the file usable by OpenAPI tools: version 3.1, unique operation ids,
//! every `$ref` resolving, and every operation answering with something.

use std::collections::BTreeSet;

use oracle_serve::api::{OPENAPI_JSON, route_list};
use serde_json::Value;

/// Routes the description may name before the server has them (a route being added in
/// parallel, whose contract a client is written to first). An entry here that the server now
/// routes fails the test, so the list empties itself. Empty: `POST /api/v1/runs`, the last
/// such route, is mounted.
const PENDING: &[(&str, &str)] = &[];

fn doc() -> Value {
    serde_json::from_str(OPENAPI_JSON).expect("docs/openapi.json is JSON")
}

fn described(doc: &Value) -> BTreeSet<(String, String)> {
    let base = doc["servers"][0]["url"].as_str().expect("servers[0].url");
    assert_eq!(base, "/api/v1");
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            out.insert((method.clone(), format!("{base}{path}")));
        }
    }
    out
}

fn mounted() -> BTreeSet<(String, String)> {
    route_list()
        .into_iter()
        .filter(|(_, p)| p.starts_with("/api/v1/"))
        .map(|(m, p)| (m.as_str().to_ascii_lowercase(), p.to_owned()))
        .collect()
}

#[test]
fn openapi_describes_every_route() {
    let doc = doc();
    let described = described(&doc);
    let mounted = mounted();
    let pending: BTreeSet<(String, String)> = PENDING
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let undescribed: Vec<_> = mounted.difference(&described).collect();
    assert!(
        undescribed.is_empty(),
        "routes the server mounts but docs/openapi.json does not describe: {undescribed:?}"
    );
    let phantom: Vec<_> = described
        .difference(&mounted)
        .filter(|r| !pending.contains(*r))
        .collect();
    assert!(
        phantom.is_empty(),
        "paths docs/openapi.json describes but the server does not mount: {phantom:?}"
    );
    let landed: Vec<_> = pending.intersection(&mounted).collect();
    assert!(
        landed.is_empty(),
        "the server mounts these now: remove them from PENDING: {landed:?}"
    );
    assert!(mounted.contains(&("get".into(), "/api/v1/openapi.json".into())));
}

#[test]
fn openapi_is_a_usable_3_1_document() {
    let doc = doc();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path}: no operationId"));
            assert!(ids.insert(id.to_owned()), "operationId {id} twice");
            let responses = op["responses"].as_object().unwrap();
            assert!(
                responses.keys().any(|s| s.starts_with('2')),
                "{method} {path}: no success response"
            );
            // Every `{name}` of the path is a declared path parameter.
            for segment in path.split('/').filter(|s| s.starts_with('{')) {
                let name = segment.trim_matches(|c| c == '{' || c == '}');
                let declared = op["parameters"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["in"] == "path" && p["name"] == name));
                assert!(
                    declared,
                    "{method} {path}: path parameter {name} not declared"
                );
            }
        }
    }
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(!refs.is_empty());
    for r in refs {
        let pointer = r
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("external $ref {r}"));
        assert!(
            doc.pointer(pointer).is_some(),
            "$ref {r} resolves to nothing"
        );
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(s)) => out.push(s.clone()),
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}
