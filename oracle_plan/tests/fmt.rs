//! `oracle plan fmt` (oracle_plan::fmt): formatting keeps the tree (so the plan hash) and every
//! comment, is idempotent, and refuses a plan that does not parse with the parser's own
//! diagnostics. Over the shipped plans, generated plans with comments and odd spacing, and
//! random edits of both.

use oracle_plan::catalogue::{ArgSpec, ArgType, Catalogue, ToolSpec};
use oracle_plan::fmt::format;
use oracle_plan::parser::{has_errors, parse};
use oracle_plan::print::strip_spans;
use proptest::prelude::*;

/// The comments of `src`, in order (what the lexer skips between tokens).
fn comments(src: &str) -> Vec<String> {
    let (tokens, _) = oracle_plan::lexer::lex(src);
    let mut out = Vec::new();
    let mut from = 0;
    for t in &tokens {
        let gap = &src[from.min(t.span.start as usize)..t.span.start as usize];
        for line in gap.split('\n') {
            if let Some(i) = line.find('#') {
                out.push(line[i..].trim_end().to_owned());
            }
        }
        from = t.span.end as usize;
    }
    out
}

/// The properties every input must have: a clean parse formats to the same tree with the same
/// comments, and formatting again changes nothing; anything else is refused with exactly the
/// parser's diagnostics.
fn check(src: &str) -> Result<(), TestCaseError> {
    let (plan, diags) = parse(src);
    match format(src) {
        Ok(text) => {
            prop_assert!(
                !has_errors(&diags),
                "formatted a plan with errors: {:?}",
                diags
            );
            let (again, diags2) = parse(&text);
            prop_assert!(diags2.is_empty(), "{:?}\n{}", diags2, text);
            prop_assert_eq!(
                strip_spans(&again.unwrap()),
                strip_spans(&plan.unwrap()),
                "{}",
                text
            );
            prop_assert_eq!(comments(&text), comments(src), "{}", text);
            prop_assert_eq!(
                format(&text).ok(),
                Some(text.clone()),
                "not idempotent:\n{}",
                text
            );
        }
        Err(refused) => {
            prop_assert!(has_errors(&diags) || plan.is_none(), "refused a clean plan");
            prop_assert_eq!(refused, diags);
        }
    }
    Ok(())
}

fn shipped() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/plans");
    let mut out = Vec::new();
    for sub in ["", "/demand"] {
        let mut entries: Vec<_> = std::fs::read_dir(format!("{dir}{sub}"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "plan"))
            .collect();
        entries.sort();
        for p in entries {
            out.push((
                p.display().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            ));
        }
    }
    out
}

#[test]
fn shipped_plans_are_canonical() {
    for (name, src) in shipped() {
        check(&src).unwrap();
        assert_eq!(
            format(&src).unwrap(),
            src,
            "{name} is not canonical: oracle plan fmt --write {name}"
        );
    }
}

#[test]
fn comments_stay_where_they_were() {
    let src = "# top\n\nplan  p version 1 # header\ninput n : int=1\n grant a:b:c\n# before x\n\nx=t.u{b:1, # about b\na:\"s\" # about a\n}timeout 2000ms retry 1 # retry\n  after y , z\ny = t { v: [1, # in list\n  2] }\n  when a and # in when\n   b\n# the end\n";
    let want = "# top\n\nplan p version 1 # header\n\ninput n: int = 1\n\ngrant a:b:c\n\n# before x\n\nx = t.u {\n  b: 1, # about b\n  a: \"s\", # about a\n}\n  after y, z\n  attempts 1 # retry\n  timeout 2s\ny = t {\n  v: [\n    1, # in list\n    2,\n  ],\n}\n  # in when\n  when a and b\n# the end\n";
    assert_eq!(format(src).unwrap(), want);
    check(src).unwrap();
}

#[test]
fn long_calls_and_literals_break_and_sugar_stays() {
    let long = "x".repeat(90);
    let src = format!("plan p version 1\ns = t {{ a: \"{long}\", b: [1, 2], h: secret(\"K\") }}\n");
    let want = format!(
        "plan p version 1\n\ns = t {{\n  a: \"{long}\",\n  b: [1, 2],\n  h: secret(\"K\"),\n}}\n"
    );
    assert_eq!(format(&src).unwrap(), want);
    let src = "plan p version 1\nd = for x in [1, 2] {\n c = t {}\n}\n";
    assert_eq!(
        format(src).unwrap(),
        "plan p version 1\n\nd = for x in [1, 2] {\n  c = t {}\n}\n"
    );
}

#[test]
fn a_plan_that_does_not_parse_is_refused_with_its_diagnostics() {
    let src = "plan p version 1\nx = t { a: @ }\n";
    let err = format(src).unwrap_err();
    assert_eq!(err, parse(src).1);
    assert_eq!(err[0].code, "E0101");
}

/// Tools `t.a` and `t.b`, each taking `x`, `y` and `z` of any type: enough for generated plans
/// to compile, so their hashes can be compared.
fn catalogue() -> Catalogue {
    let tool = |name: &str| ToolSpec {
        name: name.to_owned(),
        version: "1".to_owned(),
        description: String::new(),
        args: ["x", "y", "z"]
            .map(|a| ArgSpec {
                name: a.to_owned(),
                ty: ArgType::Any,
                required: false,
            })
            .to_vec(),
        capability: None,
    };
    Catalogue::new([tool("t.a"), tool("t.b")])
}

/// A generated plan, as text: steps reading inputs and earlier steps, with clauses, a loop, and
/// between its tokens the given separators (spaces, newlines, blank lines, comments).
fn plan_text(steps: &[(u8, Vec<u8>, u8)], seps: &[&str]) -> String {
    let mut parts: Vec<String> = vec!["plan g version 1".into(), "input n: int = 3".into()];
    for (i, (tool, args, clause)) in steps.iter().enumerate() {
        let tool = if tool % 2 == 0 { "t.a" } else { "t.b" };
        let args: Vec<String> = args
            .iter()
            .zip(["x", "y", "z"])
            .map(|(v, name)| match (v % 5, i) {
                (0, _) | (_, 0) => format!("{name}: n + {v}"),
                (1, i) => format!("{name}: s{}.out", usize::from(*v) % i),
                (2, _) => format!("{name}: [\"a\", {v}, {{ k: n }}]"),
                (3, _) => format!("{name}: secret(\"S{v}\")"),
                _ => format!("{name}: \"{}\"", "w".repeat(usize::from(*v))),
            })
            .collect();
        parts.push(format!("s{i} = {tool} {{ {} }}", args.join(", ")));
        match (clause % 6, i) {
            (0, i) if i > 0 => parts.push(format!("after s{}", i - 1)),
            (1, _) => parts.push("when n > 1 and not (n == 2)".into()),
            (2, _) => parts.push("retry 2 timeout 1500ms on failure continue".into()),
            (3, _) => parts.push("fallback t.b { x: 1 }".into()),
            (4, _) => parts.push(format!(
                "l{i} = for v in [1, n] max 4 {{ b{i} = t.a {{ x: v }} }}"
            )),
            _ => {}
        }
    }
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        out.push_str(p);
        out.push_str(seps[i % seps.len()]);
    }
    out
}

const SEPARATORS: &[&str] = &[
    "\n",
    "\n\n",
    " ",
    "\n  ",
    " # note\n",
    "\n# own line\n",
    "\n\n\n# after blanks\n\n",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn formatting_keeps_the_tree_the_comments_and_the_hash(
        steps in prop::collection::vec((any::<u8>(), prop::collection::vec(any::<u8>(), 0..4), any::<u8>()), 1..8),
        seps in prop::collection::vec(prop::sample::select(SEPARATORS), 1..6),
    ) {
        let src = plan_text(&steps, &seps);
        check(&src)?;
        let text = format(&src).unwrap();
        let cat = catalogue();
        let (before, d1) = oracle_plan::check(&src, &cat);
        let (after, d2) = oracle_plan::check(&text, &cat);
        prop_assert!(before.is_some(), "{:?}\n{}", d1, src);
        prop_assert_eq!(before.map(|c| c.hash), after.map(|c| c.hash), "{:?}", d2);
    }

    #[test]
    fn edited_plans_format_or_are_refused_with_their_diagnostics(
        pick in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<usize>(), prop::sample::select("{}[](),:=#\"\n .a1".chars().collect::<Vec<_>>()), any::<bool>()), 1..4),
    ) {
        let plans = shipped();
        let (_, src) = &plans[pick.index(plans.len())];
        let mut chars: Vec<char> = src.chars().collect();
        for (at, c, insert) in edits {
            let i = at % (chars.len() + 1);
            if insert || i == chars.len() {
                chars.insert(i, c);
            } else {
                chars[i] = c;
            }
        }
        check(&chars.into_iter().collect::<String>())?;
    }
}

/// A plan's `queue "NAME"` line (docs/PLAN.md, "Queues"): formatted in place, printed and
/// parsed back to the same tree; `queue` with no string, or a second line, is refused with
/// its own code; a step named `queue` is still a step.
#[test]
fn queue_lines_round_trip_and_misplaced_ones_are_named() {
    let src = "plan p version 1\nqueue   \"nightly\"\ninput n: int = 1\nx = t { a: n }\n";
    let want = "plan p version 1\n\nqueue \"nightly\"\n\ninput n: int = 1\n\nx = t { a: n }\n";
    assert_eq!(format(src).unwrap(), want);
    check(src).unwrap();
    let (plan, diags) = parse(src);
    assert!(!has_errors(&diags), "{diags:?}");
    let plan = plan.unwrap();
    assert_eq!(
        plan.queue.as_ref().map(|q| q.node.as_str()),
        Some("nightly")
    );
    let printed = oracle_plan::print::print(&plan);
    let (again, _) = parse(&printed);
    assert_eq!(strip_spans(&again.unwrap()), strip_spans(&plan));
    assert_eq!(oracle_plan::queue_of(src).as_deref(), Some("nightly"));
    let code = |src: &str| parse(src).1.first().map(|d| d.code);
    assert_eq!(code("plan p version 1\nqueue nightly\n"), Some("E0125"));
    assert_eq!(
        code("plan p version 1\nqueue \"a\"\nqueue \"b\"\n"),
        Some("E0124")
    );
    let (plan, diags) = parse("plan p version 1\nqueue = t { a: 1 }\n");
    assert!(!has_errors(&diags), "{diags:?}");
    assert_eq!(plan.unwrap().steps.len(), 1);
}
