//! Tidy: keeps the architecture rules of DEVELOPERS.md and docs/ARCHITECTURE.md true as code
//! changes. Crate edges, purity of the pure crates, determinism hazards, module docs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

const CRATES: [&str; 5] = [
    "oracle_core",
    "oracle_plan",
    "oracle_runtime",
    "oracle_memory",
    "oracle_cli",
];
const PURE: [&str; 3] = ["oracle_core", "oracle_plan", "oracle_memory"];

/// Names of the dependencies in `[dependencies]` (not dev- or build-dependencies).
fn normal_deps(krate: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(krate).join("Cargo.toml")).unwrap();
    let mut deps = BTreeSet::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.']).next().unwrap().trim();
            deps.insert(name.to_owned());
        }
    }
    deps
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn sources(krate: &str) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&root().join(krate).join("src"), &mut files);
    files
        .into_iter()
        .map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

/// Lines of code with `//` comments removed, so prose may mention what code may not use.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
        .filter(|(_, l)| !l.trim().is_empty())
}

#[test]
fn crate_edges_follow_the_architecture() {
    let internal = |k: &str| {
        normal_deps(k)
            .into_iter()
            .filter(|d| d.starts_with("oracle_"))
            .collect::<BTreeSet<_>>()
    };
    assert!(
        internal("oracle_core").is_empty(),
        "oracle_core depends on no internal crate"
    );
    for k in ["oracle_plan", "oracle_memory"] {
        let deps = internal(k);
        assert!(
            deps.iter().all(|d| d == "oracle_core"),
            "{k} may depend only on oracle_core, has {deps:?}"
        );
    }
    for k in CRATES {
        if k != "oracle_cli" {
            assert!(
                !normal_deps(k).contains("clap"),
                "only oracle_cli uses clap; {k} does too"
            );
        }
    }
}

#[test]
fn pure_crates_touch_no_world() {
    let forbidden = [
        "std::fs",
        "std::net",
        "std::process",
        "std::thread",
        "std::env",
        "SystemTime",
        "Instant",
        "thread::spawn",
        "rayon",
        "HashMap",
        "HashSet",
    ];
    let mut found = Vec::new();
    for k in PURE {
        for (path, text) in sources(k) {
            for (n, line) in code_lines(&text) {
                for f in forbidden {
                    if line.contains(f) {
                        found.push(format!("{}:{n}: `{f}`", path.display()));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "pure crates must not do IO, read clocks, spawn threads or use hashed containers:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_hashed_containers_reach_output_anywhere() {
    // Iteration order of HashMap/HashSet varies between runs; nothing in this workspace needs one.
    let mut found = Vec::new();
    for k in CRATES {
        for (path, text) in sources(k) {
            for (n, line) in code_lines(&text) {
                if line.contains("HashMap") || line.contains("HashSet") {
                    found.push(format!("{}:{n}", path.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "use BTreeMap/BTreeSet:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_module_says_what_it_is_for() {
    let mut missing = Vec::new();
    for k in CRATES {
        for (path, text) in sources(k) {
            if !text.trim_start().starts_with("//!") {
                missing.push(path.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "start each module with a `//!` line:\n{}",
        missing.join("\n")
    );
}

#[test]
fn serde_json_keeps_sorted_maps_and_exact_integers() {
    // Feature unification could turn on `preserve_order` or `arbitrary_precision` from any
    // dependency. Check the behaviour of the serde_json this workspace is built with.
    let v: serde_json::Value = serde_json::from_str(r#"{"b":1,"a":2}"#).unwrap();
    assert_eq!(
        v.to_string(),
        r#"{"a":2,"b":1}"#,
        "serde_json maps must iterate in key order (no preserve_order)"
    );
    let f: serde_json::Value = serde_json::from_str("1.0e0").unwrap();
    assert_eq!(
        f.to_string(),
        "1.0",
        "numbers must not keep their source text (no arbitrary_precision)"
    );
    let big: serde_json::Value = serde_json::from_str("18446744073709551615").unwrap();
    assert_eq!(big.as_u64(), Some(u64::MAX), "u64 is exact");
}
