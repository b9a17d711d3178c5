//! The tool catalogue a plan is compiled against: plain data (names, arguments, types, the
//! capability a call needs), passed in by the caller so this crate never depends on the runtime.

use std::collections::BTreeMap;

use oracle_core::capability::Capability;
use serde::Serialize;
use serde_json::Value;

/// The type of a tool argument, checked statically where the argument is a literal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgType {
    String,
    Int,
    Bool,
    List,
    Map,
    Any,
    /// A string in the time grammar ([`crate::time`]): a duration (`2d`) or an RFC 3339
    /// instant. A literal one that does not parse is E0225.
    Time,
}

impl ArgType {
    pub fn as_str(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Int => "int",
            ArgType::Bool => "bool",
            ArgType::List => "list",
            ArgType::Map => "map",
            ArgType::Any => "any",
            ArgType::Time => "time",
        }
    }

    /// Whether a JSON value has this type.
    pub fn admits(self, v: &Value) -> bool {
        match self {
            ArgType::String | ArgType::Time => v.is_string(),
            ArgType::Int => v.is_i64() || v.is_u64(),
            ArgType::Bool => v.is_boolean(),
            ArgType::List => v.is_array(),
            ArgType::Map => v.is_object(),
            ArgType::Any => true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ArgSpec {
    pub name: String,
    pub ty: ArgType,
    pub required: bool,
}

/// Where the scope of a needed capability comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeFrom {
    /// The value of this (string) argument: `fs.read { path: P }` needs `fs:read:P`.
    Arg(String),
    /// Always this scope.
    Fixed(String),
}

/// The capability a call needs: `domain:action:<scope>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CapabilityRule {
    pub domain: String,
    pub action: String,
    pub scope: ScopeFrom,
}

impl CapabilityRule {
    /// The capability needed for a call whose scope argument is the literal `scope`.
    pub fn needed(&self, scope: &str) -> Capability {
        Capability {
            domain: self.domain.clone(),
            action: self.action.clone(),
            scope: scope.to_owned(),
        }
    }
}

/// One tool as the compiler sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub version: String,
    pub description: String,
    pub args: Vec<ArgSpec>,
    pub capability: Option<CapabilityRule>,
}

impl ToolSpec {
    /// Its arguments as people read them: `path: string, mode?: int` (`?`: optional), as
    /// `oracle plan tools` and the language server's hover show them.
    pub fn args_text(&self) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| {
                let optional = if a.required { "" } else { "?" };
                format!("{}{optional}: {}", a.name, a.ty.as_str())
            })
            .collect();
        args.join(", ")
    }

    pub fn arg(&self, name: &str) -> Option<&ArgSpec> {
        self.args.iter().find(|a| a.name == name)
    }
}

/// The JSON Schemas of a tool's input and output, as its declaration gives them: for showing
/// (hover in `oracle lsp`); the compiler checks arguments against [`ToolSpec::args`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolSchemas {
    pub input: Value,
    pub output: Value,
}

/// Tools by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Catalogue {
    tools: BTreeMap<String, ToolSpec>,
    /// Per tool, the fields of its output object when its output schema lists all of them
    /// (a closed object); a tool not here may return anything, and is not checked.
    outputs: BTreeMap<String, Vec<String>>,
    /// Per tool, its schemas, when the caller gave them (`with_schemas`), for showing them.
    schemas: BTreeMap<String, ToolSchemas>,
    /// Per tool, its whole output schema, which `crate::types` reads deeper than `outputs`.
    output_schemas: BTreeMap<String, Value>,
    /// Declared tools whose manifest is broken, with why (see [`unavailable_in`]): a plan that
    /// calls one is told why, not just that the tool is unknown.
    unavailable: BTreeMap<String, String>,
}

/// Why `name` cannot be used, looked up in `unavailable`: a key that is the name, or a key
/// ending in `.` that the name starts with (every tool of an MCP server, `mcp.example.`).
pub fn unavailable_in<'a>(
    unavailable: &'a BTreeMap<String, String>,
    name: &str,
) -> Option<&'a str> {
    unavailable
        .iter()
        .find(|(k, _)| *k == name || (k.ends_with('.') && name.starts_with(k.as_str())))
        .map(|(_, why)| why.as_str())
}

impl Catalogue {
    /// The same catalogue, knowing these declared tools cannot be used, and why (a broken
    /// manifest): a plan that calls one is refused with the reason.
    pub fn with_unavailable(mut self, unavailable: BTreeMap<String, String>) -> Catalogue {
        self.unavailable.extend(unavailable);
        self
    }

    /// Why `name` cannot be used, when it is a declared tool whose manifest is broken.
    pub fn unavailable(&self, name: &str) -> Option<&str> {
        unavailable_in(&self.unavailable, name)
    }

    /// The same catalogue, knowing these tools' output schemas: `plan check` then types every
    /// `step.field` against the fields of a closed one (`additionalProperties: false`), and
    /// paths deeper into any of them (`crate::types`).
    pub fn with_output_schemas(
        mut self,
        schemas: impl IntoIterator<Item = (String, Value)>,
    ) -> Catalogue {
        for (tool, schema) in schemas {
            if let Some(fields) = closed_fields(&schema) {
                self.outputs.insert(tool.clone(), fields);
            }
            self.output_schemas.insert(tool, schema);
        }
        self
    }

    /// The same catalogue, with the schemas of these tools (for showing them).
    pub fn with_schemas(
        mut self,
        schemas: impl IntoIterator<Item = (String, ToolSchemas)>,
    ) -> Catalogue {
        self.schemas.extend(schemas);
        self
    }

    /// The schemas of `tool`, when given.
    pub fn schemas(&self, tool: &str) -> Option<&ToolSchemas> {
        self.schemas.get(tool)
    }

    /// The output schema of `tool`, when the catalogue was given it.
    pub fn output_schema(&self, tool: &str) -> Option<&Value> {
        self.output_schemas.get(tool)
    }

    /// The output fields of `tool`, when they are known and closed.
    pub fn output_fields(&self, tool: &str) -> Option<&[String]> {
        self.outputs.get(tool).map(Vec::as_slice)
    }

    /// Every `domain:action` some tool of the catalogue needs, sorted: what a grant can name.
    /// A custom tool registered with a capability rule adds its own pair.
    pub fn capability_kinds(&self) -> std::collections::BTreeSet<String> {
        self.tools
            .values()
            .filter_map(|t| t.capability.as_ref())
            .map(|c| format!("{}:{}", c.domain, c.action))
            .collect()
    }

    /// Whether a grant of `domain:action` (either may be `*`) allows something some tool needs.
    pub fn grants_something(&self, domain: &str, action: &str) -> bool {
        self.tools
            .values()
            .filter_map(|t| t.capability.as_ref())
            .any(|c| (domain == "*" || domain == c.domain) && (action == "*" || action == c.action))
    }

    pub fn new(tools: impl IntoIterator<Item = ToolSpec>) -> Catalogue {
        Catalogue {
            tools: tools.into_iter().map(|t| (t.name.clone(), t)).collect(),
            outputs: BTreeMap::new(),
            schemas: BTreeMap::new(),
            output_schemas: BTreeMap::new(),
            unavailable: BTreeMap::new(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name)
    }

    /// Tool names in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    pub fn tools(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values()
    }
}

/// The property names of an object schema that allows no others (`additionalProperties:
/// false`): the only fields an output can have. `None` for any other schema.
fn closed_fields(schema: &Value) -> Option<Vec<String>> {
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        return None;
    }
    let props = schema.get("properties")?.as_object()?;
    Some(props.keys().cloned().collect())
}
