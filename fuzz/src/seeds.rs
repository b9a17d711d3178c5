//! The seed corpus of every fuzz target, taken from the repository's fixtures (so it follows
//! them): `examples/seed.rs` writes it to `fuzz/corpus/<target>/` for libFuzzer, and
//! `oracle_cli/tests/fuzz_corpus.rs` runs each target over it directly.
//!
//! - `log`: every `.jsonl` log under fixtures/logs (including broken/), fixtures/demand and
//!   fixtures/diff, and the golden events;
//! - `plan`: every `.plan` under fixtures/plans (including bad/ and demand/), and the ```plan
//!   and ```plan-error examples of docs/PLAN.md;
//! - `capability`: the grant lines of each plan with the capabilities its literal `fs.*` paths
//!   and `proc.exec` programs need (one file per plan), and [`CAPABILITIES`];
//! - `canon`: from fixtures/golden/vectors.json the canonical payload bytes, the payload and
//!   state entries as JSON text and each event record; from the fixture logs each record, its
//!   payload as JSON text and its payload's canonical bytes.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Hand-written capability seeds: the cases the matching rules single out.
pub const CAPABILITIES: &str = "\
fs:read:fixtures/data/**
fs:read:fixtures/data/../../etc/passwd
fs:read:fixtures/data/x/../notes.txt
fs:read:../fixtures/data/notes.txt
fs:read:data/*.txt
fs:read:data/sub/x.txt
fs:write:/fuzz/root/out/a.txt
fs:read:/../etc
fs:list:.
*:*:**
proc:exec:/usr/bin/wc
proc:exec:sh
proc:exec:./sh
kv:get:a/*
net:get:https://x.org/a";

/// One seed input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seed {
    /// File name in the corpus directory (from the fixture it came from).
    pub name: String,
    pub bytes: Vec<u8>,
}

/// The seeds of `target` (one of [`super::TARGETS`]), read from the repository at `root`,
/// without duplicates. An unknown target has none.
pub fn seeds(root: &Path, target: &str) -> io::Result<Vec<Seed>> {
    let mut out = Vec::new();
    match target {
        "log" => log(root, &mut out)?,
        "plan" => plan(root, &mut out)?,
        "capability" => capability(root, &mut out)?,
        "canon" => canon(root, &mut out)?,
        _ => {}
    }
    let mut seen = BTreeSet::new();
    out.retain(|s| seen.insert(s.bytes.clone()));
    Ok(out)
}

/// Files under `dir` (recursively) whose names end with `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<io::Result<_>>()?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(files(&p, suffix)?);
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    Ok(out)
}

/// A corpus file name for a fixture: its path under the root, `/` replaced.
fn name(root: &Path, path: &Path, suffix: &str) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    format!(
        "{}{suffix}",
        rel.to_string_lossy().replace(['/', '\\'], "_")
    )
}

fn log(root: &Path, out: &mut Vec<Seed>) -> io::Result<()> {
    for dir in ["fixtures/logs", "fixtures/demand", "fixtures/diff"] {
        for p in files(&root.join(dir), ".jsonl")? {
            out.push(Seed {
                name: name(root, &p, ""),
                bytes: std::fs::read(&p)?,
            });
        }
    }
    let golden = vectors(root)?;
    let events: String = strings(&golden["events_jsonl"]).concat();
    out.push(Seed {
        name: "golden_events.jsonl".into(),
        bytes: events.into_bytes(),
    });
    Ok(())
}

fn plan_files(root: &Path) -> io::Result<Vec<PathBuf>> {
    files(&root.join("fixtures/plans"), ".plan")
}

fn plan(root: &Path, out: &mut Vec<Seed>) -> io::Result<()> {
    for p in plan_files(root)? {
        out.push(Seed {
            name: name(root, &p, ""),
            bytes: std::fs::read(&p)?,
        });
    }
    let doc = std::fs::read_to_string(root.join("docs/PLAN.md"))?;
    let mut block: Option<String> = None;
    let mut n = 0;
    for line in doc.lines() {
        match (&mut block, line.trim_end()) {
            (None, "```plan" | "```plan-error") => block = Some(String::new()),
            (Some(text), "```") => {
                n += 1;
                out.push(Seed {
                    name: format!("docs_PLAN.md_{n}.plan"),
                    bytes: std::mem::take(text).into_bytes(),
                });
                block = None;
            }
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    Ok(())
}

fn capability(root: &Path, out: &mut Vec<Seed>) -> io::Result<()> {
    for p in plan_files(root)? {
        let text = std::fs::read_to_string(&p)?;
        let mut caps: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("grant "))
            .map(|g| g.trim().trim_matches('"').to_owned())
            .collect();
        caps.extend(text.lines().filter_map(needed_literal));
        if !caps.is_empty() {
            out.push(Seed {
                name: name(root, &p, ".caps"),
                bytes: caps.join("\n").into_bytes(),
            });
        }
    }
    for (i, line) in CAPABILITIES.lines().enumerate() {
        out.push(Seed {
            name: format!("capability_{i}"),
            bytes: line.as_bytes().to_vec(),
        });
    }
    out.push(Seed {
        name: "capabilities".into(),
        bytes: CAPABILITIES.as_bytes().to_vec(),
    });
    Ok(())
}

/// The capability a plan line's literal `fs.*` path or `proc.exec` program needs, if it has one.
fn needed_literal(line: &str) -> Option<String> {
    let literal = |arg: &str| {
        let rest = &line[line.find(arg)? + arg.len()..];
        rest.split('"').next().map(str::to_owned)
    };
    if let Some(at) = line.find("fs.") {
        let action: String = line[at + 3..]
            .chars()
            .take_while(char::is_ascii_lowercase)
            .collect();
        return Some(format!("fs:{action}:{}", literal("path: \"")?));
    }
    line.contains("proc.exec")
        .then(|| literal("program: \""))
        .flatten()
        .map(|p| format!("proc:exec:{p}"))
}

fn canon(root: &Path, out: &mut Vec<Seed>) -> io::Result<()> {
    let golden = vectors(root)?;
    let hex = golden["payload_canonical_hex"].as_str().unwrap_or_default();
    out.push(Seed {
        name: "golden_payload.canon".into(),
        bytes: from_hex(hex).ok_or_else(|| invalid("payload_canonical_hex is not hex"))?,
    });
    for key in ["payload", "state_entries"] {
        out.push(Seed {
            name: format!("golden_{key}.json"),
            bytes: golden[key].to_string().into_bytes(),
        });
    }
    for (i, e) in strings(&golden["events_jsonl"]).into_iter().enumerate() {
        out.push(Seed {
            name: format!("golden_event_{i}.record"),
            bytes: e.as_bytes().to_vec(),
        });
    }
    for log in ["quickstart", "suspended", "denied"] {
        let path = root.join(format!("fixtures/logs/{log}.jsonl"));
        let text = std::fs::read_to_string(&path)?;
        for (i, line) in text.lines().enumerate() {
            out.push(Seed {
                name: format!("{log}_{i}.record"),
                bytes: line.as_bytes().to_vec(),
            });
            let record: Value = serde_json::from_str(line).map_err(invalid)?;
            let payload = &record["payload"];
            out.push(Seed {
                name: format!("{log}_{i}_payload.json"),
                bytes: payload.to_string().into_bytes(),
            });
            if let Ok(bytes) = oracle_core::canon::encode(payload) {
                out.push(Seed {
                    name: format!("{log}_{i}_payload.canon"),
                    bytes,
                });
            }
        }
    }
    Ok(())
}

fn vectors(root: &Path) -> io::Result<Value> {
    let text = std::fs::read_to_string(root.join("fixtures/golden/vectors.json"))?;
    serde_json::from_str(&text).map_err(invalid)
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn invalid(e: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}
