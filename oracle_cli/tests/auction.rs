//! End to end: the auction economy with the real binary. The fixture economy runs, replays
//! bit-identically, and its `oracle auction` report matches the golden files; an external
//! scorer's answers are recorded and never asked again on replay; a failing scorer refunds the
//! winner; a forged outcome is refused; refusals are recorded as failed calls.
//!
//! `UPDATE_GOLDEN=1 cargo test -p oracle_cli --test cli auction::` rewrites the golden reports in
//! fixtures/economy/ after a deliberate change.

use crate::common;

use std::fs;
use std::path::Path;

use common::{Sandbox, forge, root};
use oracle_core::Payload;
use serde_json::Value;

fn golden(name: &str, actual: &str) {
    let path = root().join("fixtures/economy").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        fs::write(&path, actual).unwrap();
        return;
    }
    let expected = fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} differs from what was produced (UPDATE_GOLDEN=1 rewrites it after a deliberate change):\n{actual}",
        path.display()
    );
}

/// A scorer program: `body` runs under `sh` with the artifact on stdin.
fn script(sb: &Sandbox, name: &str, body: &str) -> String {
    let p = sb.write(name, &format!("#!/bin/sh\n{body}\n"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    format!("./{name}")
}

fn winners(report: &Value) -> Vec<&Value> {
    report["auctions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["winners"].as_array().unwrap())
        .collect()
}

#[test]
fn the_fixture_economy_runs_replays_and_matches_its_golden_report() {
    let sb = Sandbox::new();
    let (code, r) = sb.json(&["run", "fixtures/plans/economy.plan", "--json"]);
    assert_eq!(code, 0, "{r}");
    let (code, r) = sb.json(&["replay", "economy-1", "--json"]);
    assert_eq!(code, 0, "replays bit-identically: {r}");

    let (code, text, err) = sb.oracle(&["auction", "economy-1"]);
    assert_eq!(code, 0, "{err}");
    golden("report.txt", &text);
    let (code, json_text, err) = sb.oracle(&["auction", "economy-1", "--json"]);
    assert_eq!(code, 0, "{err}");
    golden("report.json", &json_text);

    // What the golden report says, in the terms of the issue.
    let report: Value = serde_json::from_str(&json_text).unwrap();
    let w = winners(&report);
    assert_eq!(w.len(), 3);
    // Auction 0: second price, Bob's losing 30 sets Alice's price; basic income 10 each.
    assert_eq!(
        (w[0]["agent"].as_str(), w[0]["price"].as_u64()),
        (Some("alice"), Some(30))
    );
    assert_eq!(w[0]["scoring"]["outcome"], "scored");
    // Auction 1: Dave's copy of Alice's parser is a duplicate: score 0, nothing minted.
    assert_eq!(w[1]["scoring"]["outcome"], "duplicate");
    assert_eq!(w[1]["scoring"]["of"], "parser");
    assert_eq!(w[1]["minted"], 0);
    // Auction 2: a tie at 12, Carol bid first and wins.
    assert_eq!(
        (w[2]["agent"].as_str(), w[2]["bid"].as_u64()),
        (Some("carol"), Some(12))
    );
    assert_eq!(report["supply"]["conserved"], true);
    let balances: u64 = report["balances"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(
        balances,
        report["supply"]["initial"].as_u64().unwrap()
            + report["supply"]["minted"].as_u64().unwrap()
    );
}

#[test]
fn scorer_answers_are_recorded_and_replay_never_asks_the_scorer_again() {
    let sb = Sandbox::new();
    let scorer = script(
        &sb,
        "score.sh",
        "cat > /dev/null\necho \"$ORACLE_ARTIFACT\" >> asked.txt\necho '{\"score\": 64, \"reason\": \"reviewed\"}'",
    );
    let (code, r) = sb.json(&[
        "run",
        "fixtures/plans/economy.plan",
        "--scorer-cmd",
        &scorer,
        "--json",
    ]);
    assert_eq!(code, 0, "{r}");
    // Asked for Alice's parser and Carol's notes; Dave's duplicate is never sent.
    let asked = fs::read_to_string(sb.path().join("asked.txt")).unwrap();
    assert_eq!(asked, "parser\nnotes\n");
    let (_, report) = sb.json(&["auction", "economy-1", "--json"]);
    let w = winners(&report);
    assert_eq!(w[0]["scoring"]["score"], 64);
    assert_eq!(w[0]["scoring"]["reason"], "reviewed");
    assert_eq!(w[0]["minted"], 32);

    // The scorer now fails; replay does not call it, and reproduces the run.
    script(&sb, "score.sh", "echo called >> asked.txt\nexit 9");
    let (code, r) = sb.json(&["replay", "economy-1", "--json"]);
    assert_eq!(code, 0, "{r}");
    let asked = fs::read_to_string(sb.path().join("asked.txt")).unwrap();
    assert_eq!(asked, "parser\nnotes\n", "replay never asks the scorer");
}

const SMALL: &str = r#"plan small version 1

market = auction.open {
  accounts: { ann: 50, ben: 50, cat: 50 },
  period: 4,
  bidding_window: 2,
  first_auction_tick: 2,
  refund_on_scoring_failure: REFUND,
}
work = auction.submit { agent: "ann", artifact: "essay", content: "An essay.\n" }
  after market
# Same round as `open`, before it in plan order: the economy is still at tick 0.
early = auction.bid { agent: "ann", artifact: "essay", amount: 5 }
  after work
  retry 1
  on failure continue
open = auction.advance { to: 2 }
  after work
ann = auction.bid { agent: "ann", artifact: "essay", amount: 30 }
  after open
broke = auction.bid { agent: "ben", artifact: "essay", amount: 10 }
  after open
  retry 1
  on failure continue
close = auction.advance { to: 4 }
  after ann
"#;

#[test]
fn a_failing_scorer_is_recorded_and_refunds_the_winner_without_creating_credits() {
    let sb = Sandbox::new();
    let scorer = script(&sb, "down.sh", "echo 'model offline' >&2\nexit 3");
    // Alone in its auction, the winner's price is the minimum bid (1).
    for (refund, paid, refunded) in [("true", 0, 1), ("false", 1, 0)] {
        let plan = format!("small_{refund}.plan");
        sb.write(&plan, &SMALL.replace("REFUND", refund));
        let (code, r) = sb.json(&["run", &plan, "--scorer-cmd", &scorer, "--json"]);
        assert_eq!(code, 0, "{r}");
        let run = r["run"].as_str().unwrap().to_owned();
        let (code, report) = sb.json(&["auction", &run, "--json"]);
        assert_eq!(code, 0, "{report}");
        let w = winners(&report);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0]["scoring"]["outcome"], "failed");
        let reason = w[0]["scoring"]["reason"].as_str().unwrap();
        assert!(
            reason.contains("exited with status 3: model offline"),
            "{reason}"
        );
        assert_eq!(w[0]["price"], 1);
        assert_eq!(w[0]["paid"], paid);
        assert_eq!(w[0]["refunded"], refunded);
        assert_eq!(w[0]["minted"], 0);
        assert_eq!(report["supply"]["minted"], 0);
        assert_eq!(report["supply"]["conserved"], true);
        let total: u64 = report["balances"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(total, 150, "no credit created or lost");
        let (code, r) = sb.json(&["replay", &run, "--json"]);
        assert_eq!(code, 0, "{r}");
    }
}

#[test]
fn refused_bids_are_recorded_failures_that_change_nothing() {
    let sb = Sandbox::new();
    sb.write("small.plan", &SMALL.replace("REFUND", "true"));
    let (code, r) = sb.json(&["run", "small.plan", "--json"]);
    assert_eq!(code, 0, "{r}");
    let events = sb.events(".oracle", "small-1");
    let failures: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e.typed().unwrap() {
            Payload::ToolFailed(f) => Some((f.step, f.error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        failures,
        vec![
            (
                "early".to_owned(),
                "no auction takes bids at tick 0 (waiting; next auction opens at tick 2)"
                    .to_owned()
            ),
            (
                "broke".to_owned(),
                "artifact `essay` belongs to `ann`, not `ben`".to_owned()
            ),
        ]
    );
    let (_, report) = sb.json(&["auction", "small-1", "--json"]);
    assert_eq!(report["auctions"][0]["bids"].as_array().unwrap().len(), 1);
}

fn advance_outcome(events: &[oracle_core::Event], step: &str) -> usize {
    events
        .iter()
        .position(|e| matches!(e.typed().unwrap(), Payload::ToolReturned(r) if r.step == step))
        .unwrap()
}

#[test]
fn a_forged_auction_outcome_is_refused_by_auction_and_caught_by_replay() {
    let sb = Sandbox::new();
    let (code, _) = sb.json(&["run", "fixtures/plans/economy.plan", "--json"]);
    assert_eq!(code, 0);
    let log = sb.log(".oracle", "economy-1");
    let events = sb.events(".oracle", "economy-1");
    let seq = advance_outcome(&events, "close_0");
    // Credits from nothing: the winner is minted more than its score allows.
    forge(&log, seq, |p| {
        p["output"]["resolved"][0]["winners"][0]["minted"] = Value::from(90)
    });
    let (code, out, err) = sb.oracle(&["verify", log.to_str().unwrap()]);
    assert_eq!(code, 0, "the forgery is internally consistent: {out}{err}");
    let (code, _, err) = sb.oracle(&["auction", "economy-1"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(&format!("event {seq}")) && err.contains("does not follow"),
        "{err}"
    );
    let (code, r) = sb.json(&["replay", "economy-1", "--json"]);
    assert_eq!(code, 4, "{r}");
    assert_eq!(r["seq"], seq as u64);
}

#[test]
fn a_run_without_an_economy_is_an_input_error() {
    let sb = Sandbox::new();
    let (code, _) = sb.json(&["run", "fixtures/plans/quickstart.plan", "--json"]);
    assert_eq!(code, 0);
    let (code, _, err) = sb.oracle(&["auction", "quickstart-1"]);
    assert_eq!(code, 2);
    assert!(err.contains("no auction economy"), "{err}");
    let (code, _, err) = sb.oracle(&["auction", "no-such-run"]);
    assert_eq!(code, 2, "{err}");
    assert!(!Path::new(&sb.path().join(".oracle/runs/no-such-run")).exists());
}
