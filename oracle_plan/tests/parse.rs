//! Parser, printer and syntax-diagnostic tests: a realistic plan parses to the expected tree;
//! every kind of syntax error gets its code at the right line and column; independent mistakes
//! are all reported; the parser never panics on arbitrary or mutated input; and printing then
//! parsing gives back the same tree, for parsed plans, generated trees and reformatted sources.

use oracle_plan::ast::*;
use oracle_plan::diagnostic::{Diagnostic, line_col};
use oracle_plan::lexer::{Keyword, TokenKind, is_reserved, lex};
use oracle_plan::parser::parse;
use oracle_plan::print::{print, strip_spans};
use proptest::prelude::*;

/// Every construct of the language, written the way people write it.
const FULL: &str = r#"# Summarise a document and publish the counts.
plan summarise version 3

grant fs:read:/data/**
grant "net:post:https://api.example.com/v1/*?x=1"
grant fs:write:~/out/*.txt

input path: string = "/data/report.txt"
input limit: int = 10
input verbose: bool
input tags: list = ["a", "b",]
input meta: map = { owner: "ops", "max size": 1024, version: null }
input extra: json = { nested: [1, [2, 3], {}], flag: false }

read = fs.read { path: path }   # the source document
  retry 3
  timeout 30s
  on failure stop
stats = text.count { text: read.text, mode: "words" }
  after read
  expect stats.words >= 0 and not stats.words > 1000000
check = text.grep {
  text: read.lines[0],
  pattern: "\"quoted\"\t\u{1F600}\\",
  index: read.lines[-1].version,
}
  when limit * 2 + 1 > -3 or verbose
  fallback text.find { text: read.text }
  on failure continue
publish = net.post { url: "https://api.example.com/v1/x", body: { words: stats.words, tags: tags, n: (limit - 1) % 7 / 2 } }
  after stats, check
  timeout 500ms
  on failure yield
  expect publish.status != 500
"#;

fn parse_ok(src: &str) -> Plan {
    let (plan, diags) = parse(src);
    assert!(
        diags.is_empty(),
        "unexpected diagnostics: {diags:#?}\n{src}"
    );
    plan.expect("a plan")
}

fn e(kind: ExprKind) -> Expr {
    Expr {
        kind,
        span: Span::default(),
    }
}

fn int(n: i64) -> Expr {
    e(ExprKind::Int(n))
}

fn var(name: &str, fields: &[&str]) -> Expr {
    e(ExprKind::Ref(Path {
        root: Spanned::new(name.into(), Span::default()),
        segments: fields
            .iter()
            .map(|f| Segment::Field(Spanned::new((*f).into(), Span::default())))
            .collect(),
    }))
}

fn bin(op: BinaryOp, l: Expr, r: Expr) -> Expr {
    e(ExprKind::Binary(op, Box::new(l), Box::new(r)))
}

fn un(op: UnaryOp, x: Expr) -> Expr {
    e(ExprKind::Unary(op, Box::new(x)))
}

fn strip(x: &Expr) -> Expr {
    oracle_plan::print::strip_expr(x)
}

#[test]
fn a_realistic_plan_parses_to_the_expected_tree() {
    let plan = parse_ok(FULL);
    assert_eq!(plan.name.node, "summarise");
    assert_eq!(plan.version.node, 3);
    let grants: Vec<&str> = plan.grants.iter().map(|g| g.node.as_str()).collect();
    assert_eq!(
        grants,
        [
            "fs:read:/data/**",
            "net:post:https://api.example.com/v1/*?x=1",
            "fs:write:~/out/*.txt"
        ]
    );

    let types: Vec<(&str, InputType)> = plan
        .inputs
        .iter()
        .map(|i| (i.name.node.as_str(), i.ty.node))
        .collect();
    assert_eq!(
        types,
        [
            ("path", InputType::String),
            ("limit", InputType::Int),
            ("verbose", InputType::Bool),
            ("tags", InputType::List),
            ("meta", InputType::Map),
            ("extra", InputType::Json),
        ]
    );
    assert!(plan.inputs[2].default.is_none());
    let meta = strip(plan.inputs[4].default.as_ref().unwrap());
    let ExprKind::Map(entries) = meta.kind else {
        panic!("map")
    };
    let keys: Vec<&str> = entries.iter().map(|(k, _)| k.node.as_str()).collect();
    assert_eq!(keys, ["owner", "max size", "version"]);
    assert_eq!(entries[2].1, e(ExprKind::Null));

    let names: Vec<&str> = plan.steps.iter().map(|s| s.name.node.as_str()).collect();
    assert_eq!(names, ["read", "stats", "check", "publish"]);
    let [read, stats, check, publish] = &plan.steps[..] else {
        panic!("four steps")
    };

    assert_eq!(read.call.tool.node, "fs.read");
    assert_eq!(read.retry.as_ref().map(|r| r.node), Some(3));
    assert_eq!(read.timeout_ms.as_ref().map(|t| t.node), Some(30_000));
    assert_eq!(
        read.on_failure.as_ref().map(|p| p.node),
        Some(FailurePolicy::Stop)
    );
    // Spans point into the source.
    assert_eq!(
        &FULL[read.call.tool.span.start as usize..read.call.tool.span.end as usize],
        "fs.read"
    );
    assert_eq!(
        &FULL[read.span.start as usize..read.span.end as usize]
            .lines()
            .last(),
        &Some("  on failure stop")
    );

    assert_eq!(
        stats
            .after
            .iter()
            .map(|a| a.node.as_str())
            .collect::<Vec<_>>(),
        ["read"]
    );
    // `not` binds looser than `>`, and `and` looser than `not`.
    let want = bin(
        BinaryOp::And,
        bin(BinaryOp::Ge, var("stats", &["words"]), int(0)),
        un(
            UnaryOp::Not,
            bin(BinaryOp::Gt, var("stats", &["words"]), int(1_000_000)),
        ),
    );
    assert_eq!(strip(stats.expect.as_ref().unwrap()), want);

    let args: Vec<&str> = check
        .call
        .args
        .iter()
        .map(|a| a.name.node.as_str())
        .collect();
    assert_eq!(args, ["text", "pattern", "index"]);
    let ExprKind::Ref(p) = &check.call.args[0].value.kind else {
        panic!("ref")
    };
    assert_eq!(p.root.node, "read");
    assert!(
        matches!(&p.segments[..], [Segment::Field(f), Segment::Index(i)] if f.node == "lines" && i.node == 0)
    );
    assert_eq!(
        check.call.args[1].value.kind,
        ExprKind::Str("\"quoted\"\t\u{1F600}\\".into())
    );
    let ExprKind::Ref(p) = &check.call.args[2].value.kind else {
        panic!("ref")
    };
    assert!(
        matches!(&p.segments[..], [_, Segment::Index(i), Segment::Field(f)] if i.node == -1 && f.node == "version")
    );
    let want = bin(
        BinaryOp::Or,
        bin(
            BinaryOp::Gt,
            bin(
                BinaryOp::Add,
                bin(BinaryOp::Mul, var("limit", &[]), int(2)),
                int(1),
            ),
            un(UnaryOp::Neg, int(3)),
        ),
        var("verbose", &[]),
    );
    assert_eq!(strip(check.when.as_ref().unwrap()), want);
    assert_eq!(
        check.fallback.as_ref().map(|f| f.tool.node.as_str()),
        Some("text.find")
    );
    assert_eq!(
        check.on_failure.as_ref().map(|p| p.node),
        Some(FailurePolicy::Continue)
    );

    assert_eq!(
        publish
            .after
            .iter()
            .map(|a| a.node.as_str())
            .collect::<Vec<_>>(),
        ["stats", "check"]
    );
    assert_eq!(publish.timeout_ms.as_ref().map(|t| t.node), Some(500));
    assert_eq!(
        publish.on_failure.as_ref().map(|p| p.node),
        Some(FailurePolicy::Yield)
    );
    let ExprKind::Map(body) = &publish.call.args[1].value.kind else {
        panic!("map")
    };
    // `(limit - 1) % 7 / 2` is `((limit - 1) % 7) / 2`.
    let want = bin(
        BinaryOp::Div,
        bin(
            BinaryOp::Rem,
            bin(BinaryOp::Sub, var("limit", &[]), int(1)),
            int(7),
        ),
        int(2),
    );
    assert_eq!(strip(&body[2].1), want);
}

#[test]
fn shipped_plans_parse_and_round_trip() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/plans");
    for name in [
        "quickstart.plan",
        "diamond.plan",
        "escalation.plan",
        "loops.plan",
        "research.plan",
        "triage.plan",
        "report.plan",
    ] {
        let src = std::fs::read_to_string(format!("{dir}/{name}")).unwrap();
        let plan = parse_ok(&src);
        let printed = print(&plan);
        assert_eq!(
            strip_spans(&parse_ok(&printed)),
            strip_spans(&plan),
            "{name}:\n{printed}"
        );
        assert_eq!(
            print(&parse_ok(&printed)),
            printed,
            "{name}: printing is idempotent"
        );
    }
}

#[test]
fn the_canonical_layout() {
    let src = "plan  p version 1\ninput n : int=1\n grant a:b:c\nx=t.u{b:1,a:\"s\"}timeout 2000ms retry 1 after y , z\ny = t {}\nz = t { v: not (a and b) == c }\n";
    let (plan, diags) = parse(src);
    assert!(diags.is_empty(), "{diags:?}");
    let want = "plan p version 1\n\ngrant a:b:c\n\ninput n: int = 1\n\nx = t.u { b: 1, a: \"s\" }\n  after y, z\n  retry 1\n  timeout 2s\ny = t {}\nz = t { v: not (a and b) == c }\n";
    assert_eq!(print(&plan.unwrap()), want);
}

#[test]
fn precedence_and_parentheses_survive_printing() {
    let cases = [
        ("1 + 2 * 3", "1 + 2 * 3"),
        ("(1 + 2) * 3", "(1 + 2) * 3"),
        ("1 - (2 - 3)", "1 - (2 - 3)"),
        ("(1 - 2) - 3", "1 - 2 - 3"),
        ("not a == b", "not a == b"),
        ("(not a) == b", "(not a) == b"),
        ("not (a and b)", "not (a and b)"),
        ("a or b and c", "a or b and c"),
        ("(a or b) and c", "(a or b) and c"),
        ("-(1 + 2)", "-(1 + 2)"),
        ("- -x", "--x"),
        ("-x.y[2] * 3", "-x.y[2] * 3"),
        ("(a < b) == c", "(a < b) == c"),
        ("not not a", "not not a"),
        ("a and not b", "a and not b"),
        ("(((x)))", "x"),
        ("{ \"a b\": 1, c: [] }", "{ \"a b\": 1, c: [] }"),
    ];
    for (src, want) in cases {
        let text = format!("plan e version 1\nx = t {{ v: {src} }}\n");
        let plan = parse_ok(&text);
        let printed = oracle_plan::print::print_expr(&plan.steps[0].call.args[0].value);
        assert_eq!(printed, want, "{src}");
    }
}

/// The diagnostics of `src` as (code, line, column).
fn codes(src: &str) -> Vec<(&'static str, u32, u32)> {
    let (_, diags) = parse(src);
    diags
        .iter()
        .map(|d| {
            let (l, c) = line_col(src, d.span.start);
            (d.code, l, c)
        })
        .collect()
}

fn only(src: &str) -> Diagnostic {
    let (_, diags) = parse(src);
    assert_eq!(diags.len(), 1, "{src}\n{diags:#?}");
    diags.into_iter().next().unwrap()
}

#[test]
fn each_kind_of_syntax_error_has_its_code_and_position() {
    let h = "plan p version 1\n";
    let cases: Vec<(String, &str, u32, u32)> = vec![
        (format!("{h}a = fs.read {{ path: @x }}\n"), "E0101", 2, 21),
        (format!("{h}a = t {{ x: 1 && 2 }}\n"), "E0101", 2, 14),
        (
            format!("{h}a = t {{ x: \"never closed }}\n"),
            "E0102",
            2,
            12,
        ),
        (
            format!("{h}a = t {{ x: \"bad \\q escape\" }}\n"),
            "E0103",
            2,
            17,
        ),
        (
            format!("{h}a = t {{ x: \"\\u{{D800}}\" }}\n"),
            "E0103",
            2,
            13,
        ),
        (
            format!("{h}a = t {{ x: 99999999999999999999 }}\n"),
            "E0104",
            2,
            12,
        ),
        (
            format!("{h}a = t {{ x: 9223372036854775808 }}\n"),
            "E0104",
            2,
            12,
        ),
        (format!("{h}a = t {{ x: 1.5 }}\n"), "E0105", 2, 12),
        (format!("{h}a = t {{}}\n  timeout 10m\n"), "E0106", 3, 13),
        (format!("{h}grant fs:read:/tmp,x\n"), "E0107", 2, 19),
        (format!("{h}a = fs.read (path: x)\n"), "E0110", 2, 13),
        (format!("{h}a = fs.read\nb = t {{}}\n"), "E0110", 2, 12),
        (format!("{h}input n int\n"), "E0110", 2, 9),
        (format!("{h}a = t {{ x: 1 }} retry\n"), "E0110", 2, 21),
        (format!("{h}a = t {{ x: [1, 2 }}\n"), "E0110", 2, 18),
        (format!("{h}a = t {{ x: (1 + 2 }}\n"), "E0110", 2, 19),
        (format!("{h}a = t {{ x: 1 + }}\n"), "E0110", 2, 16),
        ("a = t {}\n".to_owned(), "E0111", 1, 1),
        (format!("{h}retry = t {{}}\n"), "E0112", 2, 1),
        (format!("{h}input when: int\n"), "E0112", 2, 7),
        (format!("{h}a = t {{ timeout: 1 }}\n"), "E0112", 2, 9),
        (format!("{h}input n: integer\n"), "E0113", 2, 10),
        (
            format!("{h}a = t {{}}\n  retry 1\n  retry 2\n"),
            "E0114",
            4,
            3,
        ),
        (format!("{h}a = t {{ x: 1 < 2 < 3 }}\n"), "E0115", 2, 18),
        (format!("{h}a = t {{}}\n  when x = 3\n"), "E0116", 3, 10),
        (format!("{h}a = t {{ x: 1 y: 2 }}\n"), "E0118", 2, 14),
        (format!("{h}a = t {{ x: [1 2] }}\n"), "E0118", 2, 15),
        (format!("{h}a = t {{}}\n  after b c\n"), "E0118", 3, 11),
        (
            format!("{h}a = t {{}}\n  on failure ignore\n"),
            "E0119",
            3,
            14,
        ),
        (format!("{h}a = t {{}}\n  timeout 30\n"), "E0120", 3, 11),
        (format!("{h}a = t {{ x: (a + 1).b }}\n"), "E0121", 2, 19),
        (format!("{h}a = t {{ x: [1][0] }}\n"), "E0121", 2, 15),
        (format!("{h}a = t {{}}\nplan q version 2\n"), "E0122", 3, 1),
    ];
    for (src, code, line, col) in &cases {
        let got = codes(src);
        assert_eq!(
            got,
            vec![(*code, *line, *col)],
            "{src}\n{:#?}",
            parse(src).1
        );
    }
}

#[test]
fn messages_say_what_was_expected_and_found() {
    let d = only("plan p version 1\ncount = text.count ( text: \"a b\" )\n");
    assert_eq!(d.message, "expected `{` after the tool name, found `(`");
    assert_eq!(d.label, "expected `{`");
    assert!(d.hint.unwrap().contains("braces"));

    let d = only("plan p version 1\na = t {}\n  when x.y = 3\n");
    assert_eq!(d.message, "expected `==` to compare, found `=`");
    assert!(d.hint.unwrap().contains("=="));

    let d = only("plan p version 1\na = t { x: 1.5 }\n");
    assert_eq!(
        d.hint.as_deref(),
        Some("plans have no floats: use an integer, a scaled integer or a string")
    );

    let d = only("plan p version 1\na = t { x: 1 y: 2 }\n");
    assert!(d.hint.unwrap().contains("commas"));

    let d = only("plan p version 1\nwhen = t {}\n");
    assert_eq!(d.message, "`when` is a keyword and cannot name a step");
    assert!(d.hint.is_some());

    let d = only("plan p version 1\na = t {}\nretyr 3\n");
    assert_eq!(d.hint.as_deref(), Some("did you mean `retry`?"));

    let d = only("plan p version 1\na = t {}\n  when\nb = t {}\n");
    assert_eq!(
        d.message,
        "expected an expression after `when`, found end of line"
    );
    assert_eq!(
        line_col(
            "plan p version 1\na = t {}\n  when\nb = t {}\n",
            d.span.start
        ),
        (3, 7)
    );

    let d = only("plan p version 1\na = t {}\n  retry 1\n  retry 2\n");
    assert_eq!(d.related.len(), 1);

    // A bad unit is reported once, and the step is kept for the compiler to check.
    let (plan, diags) = parse("plan p version 1\na = t {}\n  timeout 10m\n");
    assert_eq!(diags.len(), 1);
    assert_eq!(plan.unwrap().steps.len(), 1);

    let d = only("plan p version 1\ninput n: strng\n");
    assert!(d.hint.unwrap().starts_with("did you mean `string`?"));
}

#[test]
fn independent_mistakes_are_all_reported() {
    let src = "plan p version 1
grant fs:read:/data/**
input n: integer
a = fs.read (path: \"x\")
b = t { x: 1.5 }
c = t { y: a.text }
  retry -1
d = t { z: 1 }
";
    let got = codes(src);
    let lines: Vec<u32> = got.iter().map(|&(_, l, _)| l).collect();
    assert_eq!(lines, [3, 4, 5, 7], "{got:?}");
    // The statements without mistakes are all still there for the compiler to check.
    let (plan, _) = parse(src);
    let names: Vec<String> = plan
        .unwrap()
        .steps
        .iter()
        .map(|s| s.name.node.clone())
        .collect();
    assert_eq!(names, ["b", "d"]);
}

#[test]
fn a_header_is_needed_for_a_plan_and_errors_keep_what_parsed() {
    let (plan, diags) = parse("grant a:b:c\nx = t {}\n");
    assert!(plan.is_none());
    assert_eq!(diags[0].code, "E0111");
    let (plan, diags) = parse("");
    assert!(plan.is_none());
    assert_eq!(diags.len(), 1);
    let (plan, diags) = parse("plan p version 1\nx = t { a: 1 }\ny = t (\n");
    assert_eq!(diags.len(), 1);
    assert_eq!(plan.unwrap().steps.len(), 1);
}

#[test]
fn nesting_is_capped() {
    let deep_parens = format!(
        "plan p version 1\nx = t {{ v: {}1{} }}\n",
        "(".repeat(200),
        ")".repeat(200)
    );
    let deep_lists = format!(
        "plan p version 1\nx = t {{ v: {}{} }}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let long_chain = format!("plan p version 1\nx = t {{ v: 1{} }}\n", " + 1".repeat(100));
    let negations = format!(
        "plan p version 1\nx = t {{ v: {}1 }}\n",
        "-".repeat(100_000)
    );
    let nots = format!("plan p version 1\nx = t {{ v: {}x }}\n", "not ".repeat(100));
    for src in [deep_parens, deep_lists, long_chain, negations, nots] {
        let got: Vec<&str> = parse(&src).1.iter().map(|d| d.code).collect();
        assert_eq!(got, ["E0117"]);
    }
    // 60 levels are fine.
    let ok = format!(
        "plan p version 1\nx = t {{ v: {}1{} }}\n",
        "[".repeat(60),
        "]".repeat(60)
    );
    parse_ok(&ok);
}

#[test]
fn contextual_words_and_fields_may_be_names() {
    let plan = parse_ok(
        "plan p version 1\ninput int: string\nstop = t { list: int, m: { input: 1 }, v: stop.version[0] }\n  on failure continue\n",
    );
    assert_eq!(plan.inputs[0].name.node, "int");
    assert_eq!(plan.steps[0].name.node, "stop");
    assert!(is_reserved("null") && !is_reserved("stop") && !is_reserved("json"));
}

#[test]
fn lexing_keeps_going_after_errors() {
    let (toks, diags) = lex("a @ b 1.5 \"x");
    assert_eq!(diags.len(), 3);
    let kinds: Vec<&TokenKind> = toks.iter().map(|t| &t.kind).collect();
    assert!(matches!(
        kinds[..],
        [
            TokenKind::Ident(_),
            TokenKind::Ident(_),
            TokenKind::Int(1),
            TokenKind::Str(_),
            TokenKind::Eof
        ]
    ));
    let (toks, _) = lex("grant = x");
    assert_eq!(toks[0].kind, TokenKind::Keyword(Keyword::Grant));
    assert_eq!(toks[1].kind, TokenKind::Assign);
}

// ----- properties -----

/// Checks what must hold for any input: no panic, spans inside the source on character
/// boundaries, and a plan whenever the header parsed.
fn check_any(src: &str) -> (Option<Plan>, Vec<Diagnostic>) {
    let (plan, diags) = parse(src);
    for d in &diags {
        let (s, e) = (d.span.start as usize, d.span.end as usize);
        assert!(
            s <= e && e <= src.len() && src.is_char_boundary(s) && src.is_char_boundary(e),
            "{d:?}"
        );
        assert!(d.code.starts_with("E01") && !d.message.is_empty() && !d.label.is_empty());
    }
    if diags.is_empty() {
        assert!(plan.is_some(), "no diagnostics but no plan: {src:?}");
    }
    (plan, diags)
}

/// For a plan that parsed cleanly: printing and parsing again gives the same tree.
fn check_round_trip(plan: &Plan) {
    let printed = print(plan);
    let (again, diags) = parse(&printed);
    assert!(diags.is_empty(), "{diags:#?}\n{printed}");
    let again = again.unwrap();
    assert_eq!(strip_spans(&again), strip_spans(plan), "{printed}");
    assert_eq!(print(&again), printed);
}

const TOKENS: &[&str] = &[
    "plan",
    "version",
    "grant",
    "input",
    "after",
    "when",
    "expect",
    "retry",
    "fallback",
    "on",
    "failure",
    "timeout",
    "and",
    "or",
    "not",
    "true",
    "false",
    "null",
    "stop",
    "continue",
    "yield",
    "string",
    "int",
    "json",
    "x",
    "fs",
    "read",
    "a1",
    "_",
    "0",
    "7",
    "42",
    "9223372036854775808",
    "30s",
    "500ms",
    "1.5",
    "10m",
    "\"s\"",
    "\"\\u{41}\"",
    "\"\\q\"",
    "\"open",
    "fs:read:/a/**",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ",",
    ":",
    "=",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "%",
    ".",
    "#c",
    "@",
    "!",
    "'q'",
    "é",
    "\u{feff}",
];

const SEPARATORS: &[&str] = &[" ", "", "\n", "  ", "\t", "\r\n", " # note\n"];

fn token_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            prop::sample::select(TOKENS),
            prop::sample::select(SEPARATORS),
        ),
        0..80,
    )
    .prop_map(|parts| parts.into_iter().flat_map(|(t, s)| [t, s]).collect())
}

#[derive(Clone, Debug)]
enum Edit {
    Insert(usize, char),
    Delete(usize),
    Replace(usize, char),
}

fn edit() -> impl Strategy<Value = Edit> {
    let ch = prop_oneof![
        prop::sample::select(
            "{}[]()\",:=<>!+-*/%.#\n \\abz019_éu"
                .chars()
                .collect::<Vec<_>>()
        ),
        any::<char>(),
    ];
    prop_oneof![
        (any::<usize>(), ch.clone()).prop_map(|(i, c)| Edit::Insert(i, c)),
        any::<usize>().prop_map(Edit::Delete),
        (any::<usize>(), ch).prop_map(|(i, c)| Edit::Replace(i, c)),
    ]
}

fn apply(src: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = src.chars().collect();
    for ed in edits {
        match *ed {
            Edit::Insert(i, c) => chars.insert(i % (chars.len() + 1), c),
            Edit::Delete(i) if !chars.is_empty() => {
                chars.remove(i % chars.len());
            }
            Edit::Replace(i, c) if !chars.is_empty() => {
                let n = chars.len();
                chars[i % n] = c;
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

// Generated trees: names are identifiers that are not reserved; fields and tool parts are words.

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z_][a-z0-9_]{0,6}".prop_filter("not reserved", |s| !is_reserved(s)),
        1 => prop::sample::select(vec!["stop", "continue", "yield", "int", "map", "json"]).prop_map(String::from),
    ]
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[A-Za-z_][A-Za-z0-9_]{0,6}",
        1 => prop::sample::select(Keyword::ALL.to_vec()).prop_map(|k| k.as_str().to_owned()),
    ]
}

fn sp<T>(node: T) -> Spanned<T> {
    Spanned::new(node, Span::default())
}

fn any_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,8}",
        prop::collection::vec(any::<char>(), 0..6).prop_map(String::from_iter),
        prop::sample::select(vec![
            "\"",
            "\\",
            "\n\t\r",
            "\u{0}\u{7f}\u{85}",
            "\\u{41}",
            "#"
        ])
        .prop_map(String::from),
    ]
}

fn expr_strategy() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        Just(ExprKind::Null),
        any::<bool>().prop_map(ExprKind::Bool),
        (0..=i64::MAX).prop_map(ExprKind::Int),
        (0i64..100).prop_map(ExprKind::Int),
        any_string().prop_map(ExprKind::Str),
        (
            name(),
            prop::collection::vec(
                prop_oneof![
                    word().prop_map(|w| Segment::Field(sp(w))),
                    any::<i64>().prop_map(|i| Segment::Index(sp(i)))
                ],
                0..3
            )
        )
            .prop_map(|(root, segments)| ExprKind::Ref(Path {
                root: sp(root),
                segments
            })),
    ]
    .prop_map(e);
    leaf.prop_recursive(4, 32, 3, |inner| {
        let op = prop::sample::select(vec![
            BinaryOp::Or,
            BinaryOp::And,
            BinaryOp::Eq,
            BinaryOp::Ne,
            BinaryOp::Lt,
            BinaryOp::Le,
            BinaryOp::Gt,
            BinaryOp::Ge,
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Rem,
        ]);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(|v| e(ExprKind::List(v))),
            prop::collection::vec((prop_oneof![word(), any_string()], inner.clone()), 0..3)
                .prop_map(|v| e(ExprKind::Map(
                    v.into_iter().map(|(k, x)| (sp(k), x)).collect()
                ))),
            (
                prop::sample::select(vec![UnaryOp::Not, UnaryOp::Neg]),
                inner.clone()
            )
                .prop_map(|(op, x)| e(ExprKind::Unary(op, Box::new(x)))),
            (op, inner.clone(), inner).prop_map(|(op, l, r)| e(ExprKind::Binary(
                op,
                Box::new(l),
                Box::new(r)
            ))),
        ]
    })
}

fn call_strategy() -> impl Strategy<Value = Call> {
    (
        (name(), prop::collection::vec(word(), 0..3)),
        prop::collection::vec((name(), expr_strategy()), 0..3),
    )
        .prop_map(|((first, rest), args)| {
            let tool = std::iter::once(first)
                .chain(rest)
                .collect::<Vec<_>>()
                .join(".");
            Call {
                tool: sp(tool),
                args: args
                    .into_iter()
                    .map(|(n, v)| Arg {
                        name: sp(n),
                        value: v,
                    })
                    .collect(),
                span: Span::default(),
            }
        })
}

fn step_strategy() -> impl Strategy<Value = Step> {
    (
        (name(), call_strategy(), prop::collection::vec(name(), 0..3)),
        (
            proptest::option::of(expr_strategy()),
            proptest::option::of(expr_strategy()),
        ),
        (
            proptest::option::of(any::<u64>()),
            proptest::option::of(call_strategy()),
            proptest::option::of(prop::sample::select(vec![
                FailurePolicy::Stop,
                FailurePolicy::Continue,
                FailurePolicy::Yield,
            ])),
            proptest::option::of(prop_oneof![
                any::<u64>(),
                (0u64..100).prop_map(|s| s * 1000)
            ]),
        ),
    )
        .prop_map(
            |((name, call, after), (when, expect), (retry, fallback, policy, timeout))| Step {
                name: sp(name),
                call,
                after: after.into_iter().map(sp).collect(),
                when,
                expect,
                retry: retry.map(sp),
                retry_policy: None,
                undo: None,
                fallback,
                on_failure: policy.map(sp),
                timeout_ms: timeout.map(sp),
                body: None,
                span: Span::default(),
            },
        )
}

fn plan_strategy() -> impl Strategy<Value = Plan> {
    let grant = prop_oneof![
        "[a-z]{1,4}:[a-z*]{1,4}:[a-z0-9/*._~:-]{1,10}",
        "[a-z]{1,4}:[a-z]{1,4}:[ -~]{1,10}",
    ];
    let input = (
        name(),
        prop::sample::select(InputType::ALL.to_vec()),
        proptest::option::of(expr_strategy()),
    )
        .prop_map(|(n, ty, default)| Input {
            name: sp(n),
            ty: sp(ty),
            default,
        });
    (
        name(),
        any::<u64>(),
        prop::collection::vec(grant, 0..4),
        prop::collection::vec(input, 0..4),
        prop::collection::vec(step_strategy(), 0..5),
        prop::collection::vec("[a-z]{1,6}(/[a-z.]{1,6})?", 0..3),
    )
        .prop_map(|(n, version, grants, inputs, steps, tools)| Plan {
            uses: Vec::new(),
            tools: tools.into_iter().map(sp).collect(),
            memory: None,
            queue: None,
            name: sp(n),
            version: sp(version),
            grants: grants.into_iter().map(sp).collect(),
            inputs,
            steps,
        })
}

/// FULL re-tokenised with the given separators between its tokens (a blank after `grant`, since a
/// capability shares its `grant` line).
fn reformat(src: &str, seps: &[&str]) -> String {
    let (toks, diags) = lex(src);
    assert!(diags.is_empty());
    let mut out = String::new();
    let mut prev: Option<&TokenKind> = None;
    for (i, t) in toks.iter().enumerate() {
        if t.kind == TokenKind::Eof {
            break;
        }
        if let Some(p) = prev {
            let sep = match p {
                TokenKind::Keyword(Keyword::Grant) => " ",
                _ => seps[i % seps.len()],
            };
            out.push_str(sep);
        }
        out.push_str(&src[t.span.start as usize..t.span.end as usize]);
        prev = Some(&t.kind);
    }
    out.push('\n');
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn never_panics_on_arbitrary_strings(src in ".*") {
        check_any(&src);
    }

    #[test]
    fn never_panics_on_token_soup(body in token_soup(), header in any::<bool>()) {
        let src = if header { format!("plan p version 1\n{body}") } else { body };
        let (plan, diags) = check_any(&src);
        if let (Some(plan), true) = (plan, diags.is_empty()) {
            check_round_trip(&plan);
        }
    }

    #[test]
    fn never_panics_on_mutated_plans(edits in prop::collection::vec(edit(), 1..4)) {
        let src = apply(FULL, &edits);
        let (plan, diags) = check_any(&src);
        if let (Some(plan), true) = (plan, diags.is_empty()) {
            check_round_trip(&plan);
        }
    }

    #[test]
    fn generated_trees_print_and_parse_back(plan in plan_strategy()) {
        let printed = print(&plan);
        let (again, diags) = parse(&printed);
        prop_assert!(diags.is_empty(), "{:#?}\n{}", diags, printed);
        prop_assert_eq!(strip_spans(&again.unwrap()), strip_spans(&plan), "{}", printed);
    }

    #[test]
    fn formatting_does_not_change_the_tree(seps in prop::collection::vec(prop::sample::select(SEPARATORS.iter().copied().filter(|s| !s.is_empty()).collect::<Vec<_>>()), 1..16)) {
        let reformatted = reformat(FULL, &seps);
        let (plan, diags) = parse(&reformatted);
        prop_assert!(diags.is_empty(), "{:#?}\n{}", diags, reformatted);
        prop_assert_eq!(strip_spans(&plan.unwrap()), strip_spans(&parse_ok(FULL)), "{}", reformatted);
    }
}

#[test]
fn the_full_plan_round_trips() {
    check_round_trip(&parse_ok(FULL));
}

#[test]
fn secret_is_sugar_for_a_secret_reference_map() {
    let sugar = parse("plan p version 1\ns = t.x { h: secret(\"TOKEN\") }\n");
    let map = parse("plan p version 1\ns = t.x { h: { \"$secret\": \"TOKEN\" } }\n");
    assert!(sugar.1.is_empty(), "{:?}", sugar.1);
    assert_eq!(strip_spans(&sugar.0.unwrap()), strip_spans(&map.0.unwrap()));
    let (_, diags) = parse("plan p version 1\ns = t.x { h: secret(TOKEN) }\n");
    assert_eq!(diags[0].code, "E0110");
    assert!(
        diags[0].message.contains("the secret's name as a string"),
        "{}",
        diags[0].message
    );
}
