//! The built-in tools: one module per concept, and [`builtin`], the registry of all of them,
//! which is also where the plan compiler's catalogue comes from (`crate::catalogue`).
//!
//! Every error message a tool returns is recorded in a hashed `tool_failed` event, so messages
//! name paths and programs as the call wrote them and never contain absolute paths, durations,
//! error numbers or anything else that differs between machines.

use std::io;
use std::sync::Arc;

use oracle_plan::catalogue::{CapabilityRule, ScopeFrom};
use serde_json::{Map, Value, json};

use crate::secrets::Secrets;
use crate::tool::{
    Effect, OUTPUT_BYTES_MAX_DEFAULT, Registry, TIMEOUT_MS_DEFAULT, Tool, ToolDecl, ToolError,
};

pub mod agent;
pub mod auction;
pub mod clock;
pub mod event;
pub mod evolve;
pub mod fs;
pub mod human;
pub mod json;
pub mod kv;
pub mod llm;
pub mod memory;
pub mod net;
pub mod proc;
pub mod spawn;
pub mod text;
pub mod time;

/// Every built-in tool, registered with its compiled schemas; no model is bound (`llm.chat`
/// fails naming the flag that binds one). What `plan check` and replay use.
pub fn builtin() -> Registry {
    builtin_with(Arc::default(), Arc::default())
}

/// Every built-in tool, with `llm.chat` calling the models bound in `models`, and
/// `http.request` and `proc.exec` given the run's `secrets`.
pub fn builtin_with(models: Arc<llm::Models>, secrets: Arc<Secrets>) -> Registry {
    let tools: [Arc<dyn Tool>; 23] = [
        Arc::new(fs::Read),
        Arc::new(fs::Write),
        Arc::new(fs::List),
        Arc::new(proc::Exec {
            secrets: secrets.clone(),
        }),
        Arc::new(text::Count),
        Arc::new(text::Lines),
        Arc::new(text::Contains),
        Arc::new(text::Split),
        Arc::new(json::Parse),
        Arc::new(json::Get),
        Arc::new(kv::Get),
        Arc::new(kv::Set),
        Arc::new(clock::Now),
        Arc::new(clock::RandomInt),
        Arc::new(time::Wall),
        Arc::new(time::Sleep),
        Arc::new(time::Backoff),
        Arc::new(human::Ask),
        Arc::new(event::WaitEvent),
        Arc::new(spawn::Spawn),
        Arc::new(agent::Agent),
        Arc::new(net::Request {
            secrets: secrets.clone(),
        }),
        Arc::new(evolve::Propose),
    ];
    // What `llm.chat` may offer a model: every other tool, as declared; the registry adds
    // each one it registers (declared tools too) but the agent step and `llm.chat` itself.
    let offers = llm::Offers::default();
    let mut registry = Registry::new()
        .with_secrets(secrets)
        .with_offers(offers.clone());
    let chat: Arc<dyn Tool> = Arc::new(llm::Chat {
        models,
        tools: offers,
    });
    for tool in tools.into_iter().chain([chat]) {
        // Invariant: the built-in names are distinct and every schema compiles; the test
        // `registers_every_builtin_tool` checks both, so this cannot fail at run time.
        registry
            .register(tool)
            .expect("built-in tools have distinct names and valid schemas");
    }
    // The domains' tools are declarations: the engine hands their calls to the domains.
    for decl in memory::decls().into_iter().chain(auction::decls()) {
        // Invariant: as above, and every one has a domain's effect (the same test).
        registry
            .declare(decl)
            .expect("domain tools have distinct names, valid schemas and a domain's effect");
    }
    registry
}

/// A declaration with the defaults every built-in shares: version 1.0.0, the default timeout
/// and output limit.
pub fn decl(
    name: &str,
    description: &str,
    effect: Effect,
    input_schema: Value,
    output_schema: Value,
    capability: Option<CapabilityRule>,
) -> ToolDecl {
    ToolDecl {
        name: name.to_owned(),
        version: "1.0.0".to_owned(),
        description: description.to_owned(),
        effect,
        input_schema,
        output_schema,
        capability,
        timeout_ms: TIMEOUT_MS_DEFAULT,
        output_bytes_max: OUTPUT_BYTES_MAX_DEFAULT,
    }
}

/// A closed object schema: these `properties`, the `required` ones in this order (the order the
/// plan compiler lists arguments in), nothing else.
pub fn object(properties: &[(&str, Value)], required: &[&str]) -> Value {
    let properties: Map<String, Value> = properties
        .iter()
        .map(|(name, schema)| ((*name).to_owned(), schema.clone()))
        .collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// The capability rule `domain:action:<arg>`: the scope is the value of the argument `arg`.
pub fn needs_arg(domain: &str, action: &str, arg: &str) -> Option<CapabilityRule> {
    Some(CapabilityRule {
        domain: domain.to_owned(),
        action: action.to_owned(),
        scope: ScopeFrom::Arg(arg.to_owned()),
    })
}

/// Schema shorthands.
pub fn string() -> Value {
    json!({"type": "string"})
}

pub fn integer() -> Value {
    json!({"type": "integer"})
}

pub fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}

pub fn boolean() -> Value {
    json!({"type": "boolean"})
}

pub fn strings() -> Value {
    json!({"type": "array", "items": {"type": "string"}})
}

/// A string in the plans' time grammar (a duration or an RFC 3339 instant): the compiler
/// checks a literal one ([`crate::tool::TIME_KEYWORD`], `ArgType::Time`).
pub fn time_text() -> Value {
    json!({"type": "string", (crate::tool::TIME_KEYWORD): true})
}

/// Any JSON value.
pub fn any() -> Value {
    json!({})
}

/// The string argument `name`. The input schema has normally checked it already; this keeps a
/// call made without that check from panicking.
pub(crate) fn arg_str<'a>(input: &'a Value, name: &str) -> Result<&'a str, ToolError> {
    input
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::Failed(format!("argument `{name}` must be a string")))
}

/// The integer argument `name` (within `i64`).
pub(crate) fn arg_i64(input: &Value, name: &str) -> Result<i64, ToolError> {
    input.get(name).and_then(Value::as_i64).ok_or_else(|| {
        ToolError::Failed(format!(
            "argument `{name}` must be an integer from {} to {}",
            i64::MIN,
            i64::MAX
        ))
    })
}

/// An IO error in words that are the same on every machine: the error's kind, never the OS
/// message (which carries an error number and may be localised).
pub(crate) fn io_reason(e: &io::Error) -> String {
    use io::ErrorKind as K;
    match e.kind() {
        K::NotFound => "it does not exist".to_owned(),
        K::PermissionDenied => "permission denied".to_owned(),
        K::AlreadyExists => "it already exists".to_owned(),
        K::NotADirectory => "a part of the path is not a directory".to_owned(),
        K::IsADirectory => "it is a directory".to_owned(),
        K::DirectoryNotEmpty => "the directory is not empty".to_owned(),
        K::ReadOnlyFilesystem => "the file system is read-only".to_owned(),
        K::StorageFull => "no space left on the device".to_owned(),
        K::InvalidFilename => "the name is not valid here".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_every_builtin_tool() {
        let r = builtin();
        let names: Vec<&str> = r.iter().map(|t| t.decl.name.as_str()).collect();
        assert_eq!(names.len(), 33, "{names:?}");
        for t in r.iter() {
            assert_eq!(t.decl.version, "1.0.0");
            assert!(!t.decl.description.is_empty());
            assert_eq!(t.decl.input_schema["type"], "object", "{}", t.decl.name);
            assert_eq!(
                t.decl.input_schema["additionalProperties"], false,
                "{}",
                t.decl.name
            );
            assert_eq!(t.decl.output_schema["type"], "object", "{}", t.decl.name);
        }
    }

    /// A domain's tools are declarations: registered with a domain's effect, and a body that
    /// refuses to run outside the engine; a tool of any other effect cannot be declared, since
    /// the engine would run its (missing) body.
    #[test]
    fn only_a_domains_tools_are_declared_without_a_body() {
        let r = builtin();
        let bid = r.get("auction.bid").unwrap();
        assert_eq!(bid.decl.effect, Effect::Domain("economy"));
        assert_eq!(
            r.get("memory.query").unwrap().decl.effect,
            Effect::Domain("memory")
        );
        let state = oracle_core::State::new();
        let cx = crate::tool::ToolContext {
            run: None,
            step: "s",
            attempt: 1,
            tick: 0,
            seed: 0,
            state: &state,
            root: std::path::Path::new("."),
            resolved: None,
            timeout_ms: TIMEOUT_MS_DEFAULT,
            output_bytes_max: OUTPUT_BYTES_MAX_DEFAULT,
            access: None,
            earlier_failures: &[],
        };
        assert_eq!(
            bid.tool.call(&json!({}), &cx),
            Err(ToolError::Failed(
                "`auction.bid` runs against the run's `economy` domain, inside the engine only"
                    .into()
            ))
        );
        let mut fresh = Registry::new();
        let pure = decl("x.y", "x", Effect::Pure, object(&[], &[]), json!({}), None);
        assert_eq!(
            fresh.declare(pure),
            Err(crate::tool::RegistryError::NoBody("x.y".into()))
        );
        assert!(fresh.get("x.y").is_none());
    }

    #[test]
    fn io_reasons_carry_no_error_numbers() {
        let e = io::Error::from_raw_os_error(2);
        assert_eq!(io_reason(&e), "it does not exist");
        let e = io::Error::from_raw_os_error(13);
        assert_eq!(io_reason(&e), "permission denied");
    }
}
