//! End to end: the limits on the programs a run starts are enforced by the real binary and
//! recorded. A plan step's `timeout` kills its `proc.exec` program (and what it started), a
//! program that exits is not waited for past its exit, and a `--scorer-cmd` program printing past
//! its 64 KiB cap is a recorded scoring failure.

use crate::common;

use common::Sandbox;

use oracle_core::payload::EventKind;
use serde_json::Value;

/// The `error` of every `tool_failed` event of a run, in order.
fn tool_failures(sb: &Sandbox, run: &str) -> Vec<String> {
    sb.events(".oracle", run)
        .iter()
        .filter(|e| e.kind == EventKind::ToolFailed)
        .map(|e| e.payload["error"].as_str().unwrap().to_owned())
        .collect()
}

/// The `proc.exec` outputs recorded by a run's `tool_returned` events, in order.
fn proc_outputs(sb: &Sandbox, run: &str) -> Vec<Value> {
    sb.events(".oracle", run)
        .iter()
        .filter(|e| e.kind == EventKind::ToolReturned)
        .map(|e| e.payload["output"].clone())
        .filter(|o| o.get("status").is_some())
        .collect()
}

#[test]
fn a_steps_timeout_kills_its_program_and_is_recorded() {
    let sb = Sandbox::new();
    // Without the timeout this step would run for 30 s and succeed.
    sb.write(
        "nap.plan",
        "plan nap version 1\n\
         grant proc:exec:sleep\n\
         nap = proc.exec { program: \"sleep\", args: [\"30\"] }\n  retry 1\n  timeout 1s\n",
    );
    let (code, r) = sb.json(&["run", "nap.plan", "--json"]);
    assert_eq!(code, 1, "the run fails: {r}");
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(tool_failures(&sb, "nap-1"), ["timed out after 1000 ms"]);
    let (code, out, err) = sb.oracle(&["verify", ".oracle/runs/nap-1/events.jsonl"]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_step_whose_program_leaves_a_process_on_its_output_completes_at_the_exit() {
    let sb = Sandbox::new();
    // The background `sleep` holds standard output open for 30 s, past the step's timeout.
    sb.write(
        "bg.plan",
        "plan bg version 1\n\
         grant proc:exec:sh\n\
         go = proc.exec { program: \"sh\", args: [\"-c\", \"echo started; sleep 30 & echo done\"] }\n  retry 1\n  timeout 10s\n",
    );
    let (code, r) = sb.json(&["run", "bg.plan", "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        proc_outputs(&sb, "bg-1"),
        [serde_json::json!({"status": 0, "stdout": "started\ndone\n", "stderr": ""})]
    );
}

/// One artifact, one bid, one auction closed: the winner is scored once.
const SCORED: &str = r#"plan scored version 1

market = auction.open {
  accounts: { ann: 50, ben: 50 },
  period: 4,
  bidding_window: 2,
  first_auction_tick: 2,
  refund_on_scoring_failure: true,
}
work = auction.submit { agent: "ann", artifact: "essay", content: "An essay.\n" }
  after market
open = auction.advance { to: 2 }
  after work
ann = auction.bid { agent: "ann", artifact: "essay", amount: 30 }
  after open
close = auction.advance { to: 4 }
  after ann
"#;

#[test]
fn a_scorer_printing_past_its_cap_is_a_recorded_scoring_failure() {
    let sb = Sandbox::new();
    sb.write("scored.plan", SCORED);
    // A valid reply, then 64 KiB of spaces: it would parse were the cap not enforced.
    let p = sb.write(
        "loud.sh",
        "#!/bin/sh\ncat > /dev/null\nprintf '{\"score\": 90}'\nhead -c 65536 /dev/zero | tr '\\0' ' '\nexit 0\n",
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, r) = sb.json(&["run", "scored.plan", "--scorer-cmd", "./loud.sh", "--json"]);
    assert_eq!(code, 0, "{r}");
    let (code, report) = sb.json(&["auction", "scored-1", "--json"]);
    assert_eq!(code, 0, "{report}");
    let winners: Vec<&Value> = report["auctions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["winners"].as_array().unwrap())
        .collect();
    assert_eq!(winners.len(), 1, "{report}");
    assert_eq!(winners[0]["scoring"]["outcome"], "failed", "{report}");
    assert_eq!(
        winners[0]["scoring"]["reason"],
        "scorer command: bound reached: printed more than scorer_output_bytes_max = 65536"
    );
    assert_eq!(winners[0]["minted"], 0);
}

/// Issue 16: a `--scorer-cmd` or `--oracle-cmd` that cannot be started is refused before the
/// run starts (exit 2), naming the program and why; nothing is recorded. Before, a missing
/// scorer failed the run with `expect ... is false`, the cause only in the log.
#[test]
fn a_program_that_cannot_be_started_is_refused_before_anything_runs() {
    let sb = Sandbox::new();
    sb.write("scored.plan", SCORED);
    sb.write("not-executable.sh", "#!/bin/sh\nexit 0\n");
    for (flag, program, why) in [
        ("--scorer-cmd", "./score.sh", "no such file"),
        ("--oracle-cmd", "./notify.sh", "no such file"),
        ("--scorer-cmd", "./not-executable.sh", "not executable"),
        (
            "--oracle-cmd",
            "no-such-program-anywhere",
            "no such program on PATH",
        ),
        ("--scorer-cmd", "./", "not a file"),
    ] {
        let (code, out, err) = sb.oracle(&["run", "scored.plan", flag, program]);
        assert_eq!(code, 2, "{flag} {program}: {out}{err}");
        assert!(
            err.contains(&format!("{flag} {program}: cannot be started: {why}")),
            "{flag} {program}: {err}"
        );
        assert!(
            !sb.path().join(".oracle/runs").exists(),
            "{flag} {program}: nothing recorded"
        );
    }
    // The same for the commands that deliver adjudications.
    let (code, _, err) = sb.oracle(&["adjudications", "scored-1", "--oracle-cmd", "./nope.sh"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--oracle-cmd ./nope.sh: cannot be started"),
        "{err}"
    );
}
