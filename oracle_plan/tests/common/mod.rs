//! Tool specifications the plan tests compile against, written once.
#![allow(dead_code)]

use oracle_plan::catalogue::{ArgSpec, ArgType, ToolSpec};

/// A tool `name`, version 1, with `args` as (name, type, required) in the order given and no
/// capability rule: what the compiler needs of a tool and nothing more.
pub fn tool(name: &str, args: &[(&str, ArgType, bool)]) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        version: "1".into(),
        description: "test".into(),
        args: args
            .iter()
            .map(|(n, ty, required)| ArgSpec {
                name: (*n).into(),
                ty: *ty,
                required: *required,
            })
            .collect(),
        capability: None,
    }
}

/// The agent tests' tools: `t.a` and `t.b` taking an optional `x` of any type, and
/// `human.ask` taking a required string `question`.
pub fn agent_tools() -> Vec<ToolSpec> {
    vec![
        tool("t.a", &[("x", ArgType::Any, false)]),
        tool("t.b", &[("x", ArgType::Any, false)]),
        tool("human.ask", &[("question", ArgType::String, true)]),
    ]
}
