//! The analysis behind every request never panics: random edits of real plans, and random
//! positions in them, through diagnostics, hover, definition and completion, and through the
//! position conversions.

use lsp_types::Position;
use oracle_lsp::analysis::{self, Analysis};
use oracle_lsp::text::LineIndex;
use oracle_plan::catalogue::{ArgSpec, ArgType, Catalogue, ToolSpec};
use proptest::prelude::*;

const PLAN: &str = "# A plan\nplan p version 1\n\ngrant fs:read:data/**\ninput n: int = 2\n\nread = fs.read { path: \"data/é😀.txt\" }\nstats = text.count { text: read.text }\n  when n > 1\nall = for x in [1, n] max 3 {\n  c = text.count { text: read.text + x }\n} \nr = repeat { k = text.count { text: \"a\" } } until k.words > 0 max 2\n";

fn catalogue() -> Catalogue {
    let tool = |name: &str, args: &[&str]| ToolSpec {
        name: name.to_owned(),
        version: "1".to_owned(),
        description: "a tool".to_owned(),
        args: args
            .iter()
            .map(|a| ArgSpec {
                name: (*a).to_owned(),
                ty: ArgType::String,
                required: true,
            })
            .collect(),
        capability: None,
    };
    Catalogue::new([tool("fs.read", &["path"]), tool("text.count", &["text"])]).with_output_schemas(
        [(
            "fs.read".to_owned(),
            serde_json::json!({
                "type": "object",
                "properties": {"bytes": {"type": "integer"}, "text": {"type": "string"}},
                "additionalProperties": false
            }),
        )],
    )
}

fn run_all(src: &str, line: u32, character: u32) {
    let cat = catalogue();
    let ix = LineIndex::new(src);
    for d in analysis::diagnostics(src, &cat, &Default::default()) {
        let r = ix.range(src, d.span);
        assert!(r.start <= r.end);
    }
    let a = Analysis::new(src);
    let offset = ix.offset(src, Position::new(line, character));
    assert!(offset <= src.len() && src.is_char_boundary(offset));
    let _ = ix.position(src, u32::try_from(offset).unwrap());
    let _ = analysis::hover(&a, &cat, offset);
    let _ = analysis::definition(&a, offset);
    let _ = analysis::completion(&a, &cat, src, offset);
}

#[test]
fn the_features_find_what_is_under_the_cursor() {
    let a = Analysis::new(PLAN);
    let cat = catalogue();
    let at = |needle: &str| PLAN.find(needle).unwrap();
    // `read` in `read.text` resolves to the step; `x` inside the loop to its variable.
    let def = analysis::definition(&a, at("read.text") + 1).unwrap();
    assert_eq!(&PLAN[def.start as usize..def.end as usize], "read");
    let x = at("+ x") + 2;
    let def = analysis::definition(&a, x).unwrap();
    assert_eq!(def.start as usize, at("for x") + 4);
    let (_, text) = analysis::hover(&a, &cat, at("text.count")).unwrap();
    assert!(text.contains("text.count { text: string }"), "{text}");
    let fields = analysis::completion(&a, &cat, PLAN, at("read.text") + 5);
    let labels: Vec<_> = fields.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["bytes", "text"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_edits_never_panic_the_analysis(
        edits in prop::collection::vec((any::<usize>(), any::<char>(), any::<bool>()), 0..6),
        line in 0u32..20,
        character in 0u32..80,
    ) {
        let mut chars: Vec<char> = PLAN.chars().collect();
        for (at, c, insert) in edits {
            let i = at % (chars.len() + 1);
            if insert || i == chars.len() {
                chars.insert(i, c);
            } else {
                chars.remove(i);
            }
        }
        run_all(&chars.into_iter().collect::<String>(), line, character);
    }

    #[test]
    fn arbitrary_text_never_panics_the_analysis(src in ".{0,200}", line in 0u32..5, character in 0u32..300) {
        run_all(&src, line, character);
    }
}
