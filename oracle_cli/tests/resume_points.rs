//! Resume points at the command line: `run --snapshot-every` writes them, `resume` starts from
//! the newest one the log accepts (and says so), `resume --no-snapshots` and a damaged point
//! fall back to the first event with the same bytes, and `replay --from-snapshot` checks only
//! the tail while plain `replay` checks everything.

use crate::common;

use std::path::Path;

use common::json_in;

/// A chain of `n` pure steps, then a question that waits (asked at the start: it depends on
/// nothing), then a step that reads the answer.
fn chain_plan(dir: &Path, n: u32) -> String {
    let mut text =
        String::from("plan chain version 1\n\ns0 = json.get { value: {n: 0}, path: \"n\" }\n");
    for i in 1..n {
        text.push_str(&format!(
            "s{i} = json.get {{ value: {{n: s{}.value + 1}}, path: \"n\" }}\n",
            i - 1
        ));
    }
    text.push_str("ask = human.ask { question: \"go on?\" }\n");
    text.push_str(&format!(
        "last = json.get {{ value: {{n: s{}.value, a: ask.answer}}, path: \"n\" }}\n",
        n - 1
    ));
    std::fs::write(dir.join("chain.plan"), text).unwrap();
    "chain.plan".into()
}

fn run_suspended(dir: &Path, home: &str) -> u64 {
    let plan = chain_plan(dir, 1_500);
    let (code, v) = json_in(
        dir,
        &[
            "--home",
            home,
            "run",
            &plan,
            "--snapshot-every",
            "500",
            "--json",
        ],
    );
    assert_eq!(code, 3, "{v}");
    v["events"].as_u64().unwrap()
}

fn points(dir: &Path, home: &str) -> Vec<u64> {
    let mut seqs: Vec<u64> = std::fs::read_dir(dir.join(home).join("runs/chain-1/snapshots"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".resume.json")?.parse().ok()
        })
        .collect();
    seqs.sort_unstable();
    seqs
}

fn log(dir: &Path, home: &str) -> Vec<u8> {
    std::fs::read(dir.join(home).join("runs/chain-1/events.jsonl")).unwrap()
}

#[test]
fn resume_starts_from_the_newest_point_and_appends_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let events = run_suspended(dir, "a");
    let seqs = points(dir, "a");
    assert_eq!(seqs.len(), 2, "the newest two are kept: {seqs:?}");
    let newest = seqs[1];
    common::copy_dir(&dir.join("a"), &dir.join("b"));
    common::copy_dir(&dir.join("a"), &dir.join("c"));

    let answer = [
        "resume", "chain-1", "--step", "ask", "--value", "\"yes\"", "--json",
    ];
    let (code, fast) = json_in(dir, &[&["--home", "a"][..], &answer].concat());
    assert_eq!(code, 0, "{fast}");
    assert_eq!(fast["from_snapshot"], newest);
    assert_eq!(fast["rederived"].as_u64().unwrap(), events - (newest + 1));

    let (code, slow) = json_in(
        dir,
        &[&["--home", "b"][..], &answer, &["--no-snapshots"]].concat(),
    );
    assert_eq!(code, 0, "{slow}");
    assert_eq!(slow["from_snapshot"], serde_json::Value::Null);
    assert_eq!(slow["rederived"].as_u64().unwrap(), events);
    assert_eq!(fast["head"], slow["head"]);
    assert_eq!(log(dir, "a"), log(dir, "b"));

    // One byte of the newest point damaged: refused with a warning, the older one used.
    let file = dir
        .join("c/runs/chain-1/snapshots")
        .join(format!("{newest:020}.resume.json"));
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] = if bytes[at] == b'1' { b'2' } else { b'1' };
    std::fs::write(&file, bytes).unwrap();
    let (code, damaged) = json_in(dir, &[&["--home", "c"][..], &answer].concat());
    assert_eq!(code, 0, "{damaged}");
    assert_eq!(damaged["from_snapshot"], seqs[0]);
    let warnings = damaged["warnings"].to_string();
    assert!(
        warnings.contains(&format!("after event {newest}")) && warnings.contains("damaged"),
        "{warnings}"
    );
    assert_eq!(log(dir, "a"), log(dir, "c"));

    // The tail check and the audit.
    let (code, tail) = json_in(
        dir,
        &[
            "--home",
            "a",
            "replay",
            "chain-1",
            "--from-snapshot",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{tail}");
    let from = tail["from_snapshot"].as_u64().unwrap();
    let total = fast["events"].as_u64().unwrap();
    assert_eq!(tail["matched"].as_u64().unwrap(), total - (from + 1));
    let (code, full) = json_in(dir, &["--home", "a", "replay", "chain-1", "--json"]);
    assert_eq!(code, 0, "{full}");
    assert_eq!(full["from_snapshot"], serde_json::Value::Null);
    assert_eq!(full["matched"].as_u64().unwrap(), total);
}

#[test]
fn no_points_are_written_with_snapshot_every_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let plan = chain_plan(dir, 300);
    let (code, v) = json_in(
        dir,
        &[
            "--home",
            "h",
            "run",
            &plan,
            "--snapshot-every",
            "0",
            "--json",
        ],
    );
    assert_eq!(code, 3, "{v}");
    assert!(!dir.join("h/runs/chain-1/snapshots").exists());
    let (code, v) = json_in(
        dir,
        &[
            "--home", "h", "resume", "chain-1", "--step", "ask", "--value", "1", "--json",
        ],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["from_snapshot"], serde_json::Value::Null);
    assert_eq!(v["warnings"], serde_json::json!([]));
}

/// The auction economy is built by its calls, which a resume point does not hold: while one is
/// open no point is written, and a resume re-derives the run from its first event, so auction
/// calls after the resume see the economy the run built.
#[test]
fn no_point_is_written_while_an_auction_economy_is_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut text = String::from(
        "plan market version 1\n\nmarket = auction.open { accounts: { a: 1000, b: 1000 }, period: 4, bidding_window: 2, first_auction_tick: 0 }\ns0 = json.get { value: {n: 0}, path: \"n\" }\n  after market\n",
    );
    for i in 1..1_500 {
        text.push_str(&format!(
            "s{i} = json.get {{ value: {{n: s{}.value + 1}}, path: \"n\" }}\n",
            i - 1
        ));
    }
    text.push_str("ask = human.ask { question: \"go on?\" }\n  after s1499\n");
    text.push_str("work = auction.submit { agent: \"a\", artifact: \"w\", content: \"fn main() {}\" }\n  after ask\n");
    std::fs::write(dir.join("market.plan"), text).unwrap();
    let (code, v) = json_in(
        dir,
        &[
            "--home",
            "a",
            "run",
            "market.plan",
            "--snapshot-every",
            "500",
            "--json",
        ],
    );
    assert_eq!(code, 3, "{v}");
    let snapshots = dir.join("a/runs/market-1/snapshots");
    assert!(
        !snapshots.exists() || std::fs::read_dir(&snapshots).unwrap().next().is_none(),
        "no resume point while the economy is open"
    );
    common::copy_dir(&dir.join("a"), &dir.join("b"));
    let answer = [
        "resume", "market-1", "--step", "ask", "--value", "\"yes\"", "--json",
    ];
    let (code, a) = json_in(dir, &[&["--home", "a"][..], &answer].concat());
    assert_eq!(code, 0, "{a}");
    assert_eq!(a["from_snapshot"], serde_json::Value::Null);
    let (code, b) = json_in(
        dir,
        &[&["--home", "b"][..], &answer, &["--no-snapshots"]].concat(),
    );
    assert_eq!(code, 0, "{b}");
    assert_eq!(a["head"], b["head"]);
    let log = |h: &str| std::fs::read(dir.join(h).join("runs/market-1/events.jsonl")).unwrap();
    assert_eq!(log("a"), log("b"));
}
