//! The built-in scorer: a deterministic rubric over an artifact's text, so fixture economies
//! need no external program. It is a function of the bytes alone (no clock, no randomness).
//!
//! Points, capped at 100: substance (up to 40, one per non-blank line that is not a comment),
//! documentation (up to 20, four per comment or doc line), tests (20 when the text has a test:
//! `#[test]`, `def test_` or `assert`), error handling (10 when it mentions `Result`, `Err`,
//! `except` or `error`), and 10 for no `TODO` or `FIXME`. Empty text scores 0.

use super::Answer;

/// Scores `content` by the rubric. Never fails.
pub fn score(content: &str) -> Answer {
    let mut code = 0u64;
    let mut docs = 0u64;
    for line in content.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if t.starts_with("//") || t.starts_with('#') && !t.starts_with("#[") || t.starts_with("--")
        {
            docs += 1;
        } else {
            code += 1;
        }
    }
    if code == 0 && docs == 0 {
        return Answer::Scored {
            score: 0,
            reason: "rubric v1: empty".to_owned(),
        };
    }
    let substance = code.min(40);
    let documentation = (docs * 4).min(20);
    let has = |words: &[&str]| words.iter().any(|w| content.contains(w));
    let tests = if has(&["#[test]", "def test_", "assert"]) {
        20
    } else {
        0
    };
    let errors = if has(&["Result", "Err", "except", "error"]) {
        10
    } else {
        0
    };
    let tidy = if has(&["TODO", "FIXME"]) { 0 } else { 10 };
    let total = (substance + documentation + tests + errors + tidy).min(100);
    Answer::Scored {
        score: total,
        reason: format!(
            "rubric v1: substance {substance}/40, documentation {documentation}/20, tests {tests}/20, errors {errors}/10, tidy {tidy}/10"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(content: &str) -> u64 {
        match score(content) {
            Answer::Scored { score, .. } => score,
            Answer::Failed { .. } => unreachable!("the rubric never fails"),
        }
    }

    #[test]
    fn empty_text_scores_zero_and_the_rubric_rewards_what_it_says() {
        assert_eq!(points(""), 0);
        assert_eq!(points("  \n\n"), 0);
        // One line of code, no docs, no test, no error handling, tidy.
        assert_eq!(points("fn f() {}"), 1 + 10);
        let good = "/// Adds.\nfn add(a: u8, b: u8) -> Result<u8, E> { a.checked_add(b).ok_or(E) }\n#[test]\nfn t() { assert_eq!(add(1, 2), Ok(3)); }\n";
        // 3 code lines (`#[test]` counts as code), 1 doc line.
        assert_eq!(points(good), 3 + 4 + 20 + 10 + 10);
        assert_eq!(points(&format!("{good}// TODO: more\n")), 3 + 8 + 20 + 10);
    }

    #[test]
    fn scores_stay_within_100() {
        let long = "x = 1\n# note\nassert x\nerror\n".repeat(500);
        assert_eq!(points(&long), 100);
    }
}
