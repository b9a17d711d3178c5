//! The syntax tree of a plan, as written: every node keeps the byte span it came from, so
//! diagnostics can point at it. `docs/PLAN.md` gives the grammar.

/// A byte range `[start, end)` in the plan source. Spans are never hashed or encoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: u32, end: u32) -> Span {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// A value with the span it was written at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spanned<T> {
    pub node: T,
    pub span: Span,
}

impl<T> Spanned<T> {
    pub fn new(node: T, span: Span) -> Spanned<T> {
        Spanned { node, span }
    }
}

/// A name: plan, input, step, argument or field.
pub type Ident = Spanned<String>;

/// A whole plan file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub name: Ident,
    pub version: Spanned<u64>,
    /// Capabilities as written (`domain:action:scope`), in file order.
    pub grants: Vec<Spanned<String>>,
    pub inputs: Vec<Input>,
    /// `use "PATH" as NAME`: other plans this one calls as steps (`r = NAME { inputs }`).
    pub uses: Vec<Use>,
    /// `tools "DIR"`: directories of tool manifests (docs/TOOLS.md) the plan's tools come
    /// from, relative to the plan's directory. The runtime reads them before compiling
    /// (`tools_of`); the compiler only carries them.
    pub tools: Vec<Spanned<String>>,
    /// `memory "NAME"` or `memory input.NAME`: the named belief store shared by runs that the
    /// run's memory attaches to (docs/MEMORY.md "Shared stores"). The runtime reads it before
    /// running (`memory_of`); the compiler only carries it.
    pub memory: Option<Spanned<MemoryStore>>,
    /// `queue "NAME"`: the named queue a run of the plan waits its turn in (docs/PLAN.md,
    /// "Queues"), unless its start names another. The host reads it before a start
    /// (`queue_of`); the compiler only carries it, and nothing of it is recorded.
    pub queue: Option<Spanned<String>>,
    /// Steps in declaration order (which breaks ties in the topological order).
    pub steps: Vec<Step>,
}

/// The store a `memory` line names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryStore {
    /// `memory "NAME"`: one store for every run of the plan.
    Named(String),
    /// `memory input.NAME`: the store named by a string input (one store per user, say).
    Input(String),
}

impl MemoryStore {
    /// As `oracle run --memory` takes it: `NAME` or `input.NAME`.
    pub fn to_flag(&self) -> String {
        match self {
            MemoryStore::Named(n) => n.clone(),
            MemoryStore::Input(i) => format!("input.{i}"),
        }
    }
}

/// `use "PATH" as NAME`: a sub-plan, called by steps as the tool `NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Use {
    /// As written: relative to the top plan's directory.
    pub path: Spanned<String>,
    pub alias: Ident,
}

/// `input NAME: TYPE [= DEFAULT]`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    pub name: Ident,
    pub ty: Spanned<InputType>,
    pub default: Option<Expr>,
}

/// The type of a run input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InputType {
    String,
    Int,
    Bool,
    List,
    Map,
    /// Any JSON value (no floats).
    Json,
}

impl InputType {
    pub const ALL: [InputType; 6] = [
        InputType::String,
        InputType::Int,
        InputType::Bool,
        InputType::List,
        InputType::Map,
        InputType::Json,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InputType::String => "string",
            InputType::Int => "int",
            InputType::Bool => "bool",
            InputType::List => "list",
            InputType::Map => "map",
            InputType::Json => "json",
        }
    }
}

/// `NAME = TOOL { ARGS } CLAUSES*`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub name: Ident,
    pub call: Call,
    /// `after a, b`: explicit ordering beyond data dependencies.
    pub after: Vec<Ident>,
    /// `when EXPR`: the step runs only if true; otherwise it is recorded as skipped.
    pub when: Option<Expr>,
    /// `expect EXPR`: a condition on the step's output (the step's own name refers to it).
    pub expect: Option<Expr>,
    /// `retry N`: attempts of the first tier (and of the fallback).
    pub retry: Option<Spanned<u64>>,
    /// `retry { attempts: 5, backoff: "exponential", initial: "1s", ... }`: a retry policy,
    /// a map literal the compiler reads (the same clause as `retry N`, so not both).
    pub retry_policy: Option<Expr>,
    /// `undo STEP`: this step is the compensation of `STEP`, run only when the run fails
    /// after `STEP` completed.
    pub undo: Option<Ident>,
    /// `fallback TOOL { ARGS }`: the second tier, tried when the first is exhausted.
    pub fallback: Option<Call>,
    /// `on failure stop|continue|yield`
    pub on_failure: Option<Spanned<FailurePolicy>>,
    /// `timeout 30s` / `timeout 500ms`, in milliseconds.
    pub timeout_ms: Option<Spanned<u64>>,
    /// A loop step's body (`for ...` or `repeat ...`); its `call` is then the synthetic call
    /// `for {}` or `repeat {}`.
    pub body: Option<Box<Body>>,
    /// The whole step, for diagnostics.
    pub span: Span,
}

/// `for VAR in ITEMS max N { STEPS }` or `repeat { STEPS } until COND max N`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    pub kind: LoopKind,
    /// The loop variable (`for` only).
    pub var: Option<Ident>,
    /// The list iterated over (`for` only).
    pub items: Option<Expr>,
    /// The condition that ends a `repeat`, over the iteration's step outputs.
    pub until: Option<Expr>,
    /// At most this many iterations.
    pub max: Spanned<u64>,
    pub steps: Vec<Step>,
}

/// Which loop a body belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LoopKind {
    /// One iteration per item, all at once.
    For,
    /// One iteration after another until a condition holds.
    Repeat,
    /// A sub-plan (`use`), run once with the step's arguments as its inputs.
    Use,
}

impl LoopKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LoopKind::For => "for",
            LoopKind::Repeat => "repeat",
            LoopKind::Use => "use",
        }
    }
}

/// A tool call: `fs.read { path: p }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// Dotted tool name (`fs.read`).
    pub tool: Spanned<String>,
    /// Arguments in the order written (the compiler sorts them).
    pub args: Vec<Arg>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arg {
    pub name: Ident,
    pub value: Expr,
}

/// What happens when a step has failed for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailurePolicy {
    /// Fail the run (the default).
    Stop,
    /// Record the failure and go on with steps that do not depend on this one.
    Continue,
    /// Suspend the run until a person supplies the step's output.
    Yield,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Stop => "stop",
            FailurePolicy::Continue => "continue",
            FailurePolicy::Yield => "yield",
        }
    }
}

/// An expression. Pure: evaluation reads inputs and earlier steps' outputs, nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExprKind {
    Null,
    Bool(bool),
    Int(i64),
    Str(String),
    List(Vec<Expr>),
    /// `{ key: value, "any key": value }` in the order written.
    Map(Vec<(Spanned<String>, Expr)>),
    /// An input or a step's output, with a field path: `stats.words`, `read.lines[0]`.
    Ref(Path),
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
}

/// `root.field[index]...`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path {
    pub root: Ident,
    pub segments: Vec<Segment>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Field(Ident),
    Index(Spanned<i64>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UnaryOp {
    Not,
    Neg,
}

/// Binary operators, loosest first: `or`; `and`; comparisons; `+ -`; `* / %`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BinaryOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl BinaryOp {
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryOp::Or => "or",
            BinaryOp::And => "and",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
        }
    }

    /// Binding strength: higher binds tighter.
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => 3,
            BinaryOp::Add | BinaryOp::Sub => 4,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => 5,
        }
    }
}

/// Words that cannot name a plan, input, step or argument.
pub const KEYWORDS: [&str; 17] = [
    "plan", "version", "grant", "input", "after", "when", "expect", "retry", "fallback", "on",
    "failure", "timeout", "and", "or", "not", "true", "false",
];
