//! Runs every fuzz target's body (fuzz/src, included here as it is) over its seed corpus (taken
//! from fixtures/) and its crash regressions (fuzz/regressions/<target>/), so CI checks the
//! fuzzers' properties on every fixture and every crash ever found, without cargo-fuzz or
//! libFuzzer (docs/TESTING.md).

#[path = "../../fuzz/src/lib.rs"]
mod oracle_fuzz;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use oracle_fuzz::TARGETS;
use oracle_fuzz::seeds::{Seed, seeds};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The crash regressions of `target`: every file in fuzz/regressions/<target>/.
fn regressions(root: &Path, target: &str) -> Vec<Seed> {
    let dir = root.join("fuzz/regressions").join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<Seed> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| Seed {
            name: format!(
                "regressions/{target}/{}",
                p.file_name().unwrap().to_string_lossy()
            ),
            bytes: std::fs::read(&p).unwrap(),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Runs `target` over its seeds and regressions; fails naming every input that failed.
fn run(target: &str) {
    let (_, body) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no fuzz target `{target}`"));
    let root = root();
    let seeds = seeds(&root, target).unwrap();
    assert!(!seeds.is_empty(), "no seeds for `{target}`");
    let inputs: Vec<Seed> = seeds
        .into_iter()
        .chain(regressions(&root, target))
        .collect();
    let failed: Vec<&str> = inputs
        .iter()
        .filter(|input| catch_unwind(AssertUnwindSafe(|| body(&input.bytes))).is_err())
        .map(|input| input.name.as_str())
        .collect();
    assert!(
        failed.is_empty(),
        "fuzz target `{target}` fails on {} of {} inputs: {failed:?}",
        failed.len(),
        inputs.len()
    );
}

#[test]
fn log_target_holds_on_its_corpus() {
    run("log");
}

#[test]
fn plan_target_holds_on_its_corpus() {
    run("plan");
}

#[test]
fn capability_target_holds_on_its_corpus() {
    run("capability");
}

#[test]
fn canon_target_holds_on_its_corpus() {
    run("canon");
}

/// Every target in `TARGETS` has a test above, a one-line libFuzzer binary calling its body,
/// and an entry in fuzz/Cargo.toml; the corpus and regressions directories take its name.
#[test]
fn every_target_is_wired_up() {
    let root = root();
    let manifest = std::fs::read_to_string(root.join("fuzz/Cargo.toml")).unwrap();
    let this = std::fs::read_to_string(root.join("oracle_cli/tests/fuzz_corpus.rs")).unwrap();
    for (target, _) in TARGETS {
        let bin = std::fs::read_to_string(root.join(format!("fuzz/fuzz_targets/{target}.rs")))
            .unwrap_or_else(|e| panic!("fuzz/fuzz_targets/{target}.rs: {e}"));
        assert!(
            bin.contains(&format!("oracle_fuzz::{target}::check(data)")),
            "fuzz/fuzz_targets/{target}.rs calls oracle_fuzz::{target}::check"
        );
        assert!(
            manifest.contains(&format!(
                "name = \"{target}\"\npath = \"fuzz_targets/{target}.rs\""
            )),
            "fuzz/Cargo.toml has a [[bin]] for `{target}`"
        );
        assert!(
            this.contains(&format!("    run(\"{target}\");")),
            "a test runs `{target}`"
        );
    }
    if let Ok(dirs) = std::fs::read_dir(root.join("fuzz/regressions")) {
        for d in dirs {
            let name = d.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                name.starts_with('.') || TARGETS.iter().any(|(t, _)| *t == name),
                "fuzz/regressions/{name} is not a target"
            );
        }
    }
}
