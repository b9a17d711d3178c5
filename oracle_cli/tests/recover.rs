//! Recovery from damage (issue 57, item 3): a run whose log is damaged at event 6 (a byte
//! flipped in a payload, a line cut short, a line that is no JSON) is forked before its
//! damage (`oracle fork --at 4`; `--at 7` is refused with the damage), and `oracle recover`
//! makes a new run from its valid prefix, recorded with reason `recovered` and the damaged
//! log's BLAKE3 hash, which is answered, completes, verifies and replays; the damaged log is
//! kept byte for byte. A log that verifies whole is not recovered, and nothing is written.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::Sandbox;
use oracle_core::Payload;
use serde_json::Value;

/// A plan whose first round is one pure call (events 1 to 3), whose second asks a person
/// (event 4 its decision, 5 and 6 the question's call), so event 4 is a boundary between
/// rounds and event 6 the question.
const PLAN: &str = "plan approve version 1

input text: string = \"Invoice 7, total: 1250\"

parts = text.split { text: text, separator: \"total: \" }

confirm = human.ask { question: \"Approve the invoice?\" }
  after parts
";

/// How the log is damaged at event 6.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// One byte of the question changed: the line parses, its payload hash no longer matches.
    FlippedByte,
    /// The file cut in the middle of event 6's line (a crash, a full disk).
    CutMidLine,
    /// Event 6's line is no JSON, the lines after it intact.
    BrokenJson,
}

/// The byte offset where line `seq` (event `seq`) of `bytes` starts.
fn line_start(bytes: &[u8], seq: usize) -> usize {
    let mut end = 0;
    for _ in 0..seq {
        end += bytes[end..].iter().position(|&b| b == b'\n').unwrap() + 1;
    }
    end
}

/// `clean` damaged at event 6 as `how` says.
fn damaged(clean: &[u8], how: Damage) -> Vec<u8> {
    let start = line_start(clean, 6);
    let len = clean[start..].iter().position(|&b| b == b'\n').unwrap();
    let mut bytes = clean.to_vec();
    match how {
        Damage::FlippedByte => {
            let word = b"Approve";
            let at = start + bytes[start..].windows(7).position(|w| w == word).unwrap();
            bytes[at] ^= 0x01;
        }
        Damage::CutMidLine => bytes.truncate(start + len / 2),
        Damage::BrokenJson => bytes[start] = b'x',
    }
    bytes
}

/// Runs the plan and answers its question: a completed run, `approve-1`. Returns its log.
fn completed_run(sb: &Sandbox) -> Vec<u8> {
    sb.write("fixtures/plans/approve.plan", PLAN);
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/approve.plan"]);
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = sb.oracle(&[
        "resume",
        "approve-1",
        "--step",
        "confirm",
        "--value",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
    std::fs::read(sb.log(".oracle", "approve-1")).unwrap()
}

/// Every file under `dir` with its bytes (directories by name), to tell that nothing changed.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.insert(path.clone(), Vec::new());
            out.extend(tree(&path));
        } else {
            out.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    out
}

/// Checks `oracle recover --json`'s answer `v` for a log damaged at event 6 whose bytes are
/// `bad`: the new run shares the valid prefix byte for byte, records why and the damaged log's
/// hash, waits on the question again; the damaged log and its kept copy are `bad`. Returns the
/// new run's id.
fn check_recovered(sb: &Sandbox, v: &Value, bad: &[u8]) -> String {
    let run = v["run"].as_str().unwrap().to_owned();
    assert_eq!(v["status"], "suspended", "{v}");
    assert_eq!(v["parent"], "approve-1", "{v}");
    assert_eq!(v["shared"], 4, "the last boundary before event 6: {v}");
    let hash = blake3::hash(bad).to_hex().to_string();
    let r = &v["recovered"];
    assert_eq!(
        (&r["last_valid"], &r["damaged_at"]),
        (&5.into(), &6.into()),
        "{v}"
    );
    assert_eq!(r["hash"], hash.as_str(), "{v}");
    // The damaged log is as it was, and so is the copy kept beside the home's runs.
    assert_eq!(std::fs::read(sb.log(".oracle", "approve-1")).unwrap(), bad);
    let kept = PathBuf::from(r["kept"].as_str().unwrap());
    assert!(kept.starts_with(sb.path().join(".oracle/damaged").canonicalize().unwrap()));
    assert_eq!(std::fs::read(&kept).unwrap(), bad);
    // The valid prefix's first four events, byte for byte (same hashes), then `forked`.
    let log = std::fs::read(sb.log(".oracle", &run)).unwrap();
    assert_eq!(log[..line_start(&log, 4)], bad[..line_start(bad, 4)]);
    let events = common::parse_events(&log);
    match events[4].typed().unwrap() {
        Payload::Forked(f) => {
            assert_eq!((f.parent.as_str(), f.seq), ("approve-1", 4));
            assert_eq!(f.reason.as_deref(), Some("recovered"));
            assert_eq!(f.damaged.map(|h| h.to_hex()), Some(hash));
            assert_eq!(f.by.as_deref(), Some("ops"));
        }
        other => panic!("{other:?}"),
    }
    run
}

/// Recovers `approve-1` damaged as `how`, answers the new run's question, and checks it
/// completes, verifies and replays like any run.
fn recovers(how: Damage) {
    let sb = Sandbox::new();
    let clean = completed_run(&sb);
    let bad = damaged(&clean, how);
    std::fs::write(sb.log(".oracle", "approve-1"), &bad).unwrap();
    let (code, v) = sb.json(&["verify", "approve-1", "--json"]);
    assert_eq!(code, 4, "{how:?}: {v}");
    let (code, v) = sb.json(&["recover", "approve-1", "--by", "ops", "--json"]);
    assert_eq!(code, 3, "{how:?}: {v}");
    let run = check_recovered(&sb, &v, &bad);
    let (code, _, err) = sb.oracle(&["resume", &run, "--step", "confirm", "--value", "true"]);
    assert_eq!(code, 0, "{how:?}: {err}");
    let proof = ["verify", run.as_str(), "--parent", "approve-1"];
    for args in [
        &["verify", run.as_str()][..],
        &["replay", run.as_str()],
        &proof,
    ] {
        let (code, out, err) = sb.oracle(args);
        assert_eq!(code, 0, "{how:?} {args:?}: {out}{err}");
    }
    // After its `forked`, the recovered run recorded what the undamaged run did.
    let kinds = |bytes: &[u8], from: usize| -> Vec<String> {
        common::parse_events(bytes)[from..]
            .iter()
            .map(|e| format!("{} {}", e.kind.as_str(), e.payload))
            .collect()
    };
    let recovered = std::fs::read(sb.log(".oracle", &run)).unwrap();
    assert_eq!(kinds(&recovered, 5), kinds(&clean, 4), "{how:?}");
}

#[test]
fn a_log_with_a_byte_flipped_at_event_6_is_recovered_answered_and_completed() {
    recovers(Damage::FlippedByte);
}

#[test]
fn a_log_cut_mid_line_at_event_6_is_recovered_answered_and_completed() {
    recovers(Damage::CutMidLine);
}

#[test]
fn a_log_whose_event_6_is_no_json_is_recovered_answered_and_completed() {
    recovers(Damage::BrokenJson);
}

#[test]
fn a_damaged_run_forks_before_its_damage_and_is_refused_past_it() {
    let sb = Sandbox::new();
    let clean = completed_run(&sb);
    let bad = damaged(&clean, Damage::FlippedByte);
    std::fs::write(sb.log(".oracle", "approve-1"), &bad).unwrap();
    // At 4, before the damage: only the prefix is read; the fork asks the question again.
    let (code, v) = sb.json(&["fork", "approve-1", "--at", "4", "--json"]);
    assert_eq!((code, v["shared"].as_u64()), (3, Some(4)), "{v}");
    assert!(
        v.get("recovered").is_none(),
        "a fork by choice is no recovery: {v}"
    );
    let fork = v["run"].as_str().unwrap().to_owned();
    let (code, _, err) = sb.oracle(&["resume", &fork, "--step", "confirm", "--value", "true"]);
    assert_eq!(code, 0, "{err}");
    // Its prefix is proved against the parent's valid prefix; damage inside it fails the proof.
    let (code, out, err) = sb.oracle(&["verify", &fork, "--parent", "approve-1"]);
    assert_eq!(code, 0, "{out}{err}");
    let mut inside = bad.clone();
    inside[line_start(&bad, 2) + 20] ^= 0x01;
    std::fs::write(sb.log(".oracle", "approve-1"), &inside).unwrap();
    let (code, v) = sb.json(&["verify", &fork, "--parent", "approve-1", "--json"]);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (4, Some("fork_prefix")),
        "{v}"
    );
    std::fs::write(sb.log(".oracle", "approve-1"), &bad).unwrap();
    // At 7, past the damage: refused with the damage, as `verify` reports it; nothing made.
    let runs = tree(&sb.path().join(".oracle/runs"));
    let (code, v) = sb.json(&["fork", "approve-1", "--at", "7", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(
        (v["error"]["code"].as_str(), v["error"]["seq"].as_u64()),
        (Some("integrity"), Some(6)),
        "{v}"
    );
    // So is a step the valid prefix never calls (it may have been called in the damage).
    let (code, v) = sb.json(&["fork", "approve-1", "--step", "nope", "--json"]);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (4, Some("integrity")),
        "{v}"
    );
    assert_eq!(tree(&sb.path().join(".oracle/runs")), runs);
    assert_eq!(std::fs::read(sb.log(".oracle", "approve-1")).unwrap(), bad);
}

#[test]
fn recover_prints_the_new_run_the_last_valid_event_and_where_the_damaged_log_went() {
    let sb = Sandbox::new();
    let clean = completed_run(&sb);
    std::fs::write(
        sb.log(".oracle", "approve-1"),
        damaged(&clean, Damage::CutMidLine),
    )
    .unwrap();
    let (code, out, err) = sb.oracle(&["recover", "approve-1"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains("forked   approve-2 from approve-1 at event 4"),
        "{out}"
    );
    assert!(
        out.contains("is valid to event 5 and damaged from event 6"),
        "{out}"
    );
    let kept = sb.path().join(".oracle/damaged").canonicalize().unwrap();
    assert!(out.contains(&kept.display().to_string()), "{out}");
}

#[test]
fn an_undamaged_run_is_not_recovered_and_nothing_is_written() {
    let sb = Sandbox::new();
    completed_run(&sb);
    let home = sb.path().join(".oracle");
    let before = tree(&home);
    let (code, v) = sb.json(&["recover", "approve-1", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "nothing_to_recover", "{v}");
    let (code, _, err) = sb.oracle(&["recover", "approve-1"]);
    assert_eq!(code, 2);
    assert!(err.contains("nothing to recover"), "{err}");
    assert_eq!(tree(&home), before, "a refused recovery writes nothing");
    assert!(!home.join("damaged").exists());
}
