//! End-to-end tests of belief memory and the adjudication oracle loop with the real `oracle`
//! binary: `run` suspending on a belief, `adjudications`, `adjudicate` (every outcome and exit
//! code), `sweep`, `memory --as-of`, `resume` after a verdict, `--oracle-cmd` deliveries, and
//! two processes racing on one handle. Every command is a new process, so everything asserted
//! here survives the process that wrote it. Each test uses its own temporary home; commands run
//! from the workspace root, so `fixtures/plans/adjudication.plan` is the shipped fixture.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::Home;
use serde_json::Value;

const PLAN: &str = common::ADJUDICATION_PLAN;
const RUN: &str = "adjudication-1";
/// The fixture's conflict is recorded by event 15 (`referral`), so its handle is `adj-15`.
const HANDLE: &str = "adj-15";
const EFH: &str = "external_first_hand";

/// What these tests ask of a home beyond the shared helpers of [`common::Home`].
impl Home {
    fn kinds(&self, run: &str) -> Vec<String> {
        self.events(run)
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The run's state entries, as `oracle inspect --json` shows them.
    fn state(&self, run: &str) -> Value {
        let (code, v) = self.json(&["inspect", run, "--json"]);
        assert_eq!(code, 0, "{v}");
        v["entries"].clone()
    }

    /// Runs a command that must be refused with `code` and leave the run's directory (log,
    /// index, outbox...) byte-identical; returns stdout and stderr.
    fn refused(&self, run: &str, args: &[&str], code: i32) -> (String, String) {
        let before = self.snapshot(run);
        let (got, out, err) = self.oracle(args);
        assert_eq!(got, code, "{args:?}: {out}{err}");
        assert!(
            self.snapshot(run) == before,
            "{args:?} changed the run's files"
        );
        (out, err)
    }

    /// As [`Home::refused`], for the log alone: after a simulated crash the derived index
    /// (`events.jsonl.idx`, a cache of offsets) may be brought back in line with the log.
    fn refused_log(&self, run: &str, args: &[&str], code: i32) -> (String, String) {
        let before = fs::read(self.log(run)).unwrap();
        let (got, out, err) = self.oracle(args);
        assert_eq!(got, code, "{args:?}: {out}{err}");
        assert!(
            fs::read(self.log(run)).unwrap() == before,
            "{args:?} changed the log"
        );
        (out, err)
    }
}

/// Disposition of the claim recorded by each step, from a line of `oracle memory --json`.
fn dispositions(line: &Value) -> BTreeMap<String, String> {
    line["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["step"].as_str().unwrap().to_owned(),
                c["disposition"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn disposition(line: &Value, step: &str) -> String {
    dispositions(line)
        .remove(step)
        .unwrap_or_else(|| panic!("no claim from step {step}: {line}"))
}

fn count(kinds: &[String], kind: &str) -> usize {
    kinds.iter().filter(|k| *k == kind).count()
}

fn adjudicate_args<'a>(run: &'a str, verdict: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "adjudicate",
        run,
        HANDLE,
        "--verdict",
        verdict,
        "--evidence",
        EFH,
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn affirm_walkthrough_suspends_lists_applies_resumes_and_replays() {
    let h = Home::new();
    let out = h.start(&[]);
    assert_eq!(out["run"], RUN);
    let reason = out["waiting"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("waits on belief patient-17/allergy"),
        "{reason}"
    );
    assert!(reason.contains(HANDLE), "{reason}");

    // Listed as pending work, by a process other than the one that ran it.
    let (code, rows) = h.json_lines(&["runs", "--status", "suspended", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["run"], RUN);
    assert_eq!(rows[0]["waiting"]["step"], "allergy");
    assert!(
        rows[0]["waiting"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("waits on belief"),
        "{rows:?}"
    );
    let (code, text, _) = h.oracle(&["runs", "--status", "suspended"]);
    assert_eq!(code, 0);
    assert!(
        text.contains(RUN) && text.contains("waits on belief"),
        "{text}"
    );

    // The queue: one pending request, penicillin on file against the referral's none.
    let pending = h.adjudications(RUN, &[]);
    assert_eq!(pending.len(), 1, "{pending:?}");
    let p = &pending[0];
    assert_eq!(p["handle"], HANDLE);
    assert_eq!(p["status"], "pending");
    assert_eq!(p["subject"], "patient-17");
    assert_eq!(p["predicate"], "allergy");
    assert_eq!(p["criticality"], "critical");
    assert_eq!(p["incumbent"]["value"], "penicillin");
    assert_eq!(p["challenger"]["value"], "none");
    assert_eq!(p["expires_at"], Value::Null, "no expiry by default");
    assert_eq!(p["step"], "referral");
    assert_eq!(p["seq"], 15);
    assert!(h.state(RUN).get("kv/prescription").is_none());

    // The verdict, then the run goes on by itself.
    let note = "referral letter checked with the clinic";
    let (code, out) = h.json(&adjudicate_args(
        RUN,
        "affirm",
        &["--note", note, "--resume", "--json"],
    ));
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["status"], "completed");
    let state = h.state(RUN);
    assert_eq!(state["kv/prescription"], "amoxicillin");
    assert_eq!(state["step/allergy"]["output"]["status"], "resolved");
    assert_eq!(state["step/allergy"]["output"]["value"], "none");
    assert_eq!(state["step/azithromycin"]["status"], "skipped");

    // One `adjudicated` event carrying the verdict, right before the `resumed` one.
    let events = h.events(RUN);
    let at = events
        .iter()
        .position(|e| e["kind"] == "adjudicated")
        .expect("the verdict is in the log");
    let kinds = h.kinds(RUN);
    assert_eq!(count(&kinds, "adjudicated"), 1);
    assert_eq!(events[at - 1]["kind"], "suspended");
    assert_eq!(events[at + 1]["kind"], "resumed");
    let verdict = &events[at]["payload"];
    assert_eq!(verdict["handle"], HANDLE);
    assert_eq!(verdict["verdict"], "affirm");
    assert_eq!(verdict["evidence"], EFH);
    assert_eq!(verdict["note"], note);
    assert_eq!(events[at]["parents"], serde_json::json!([15]));
    assert_eq!(kinds.last().unwrap(), "run_finished");

    // The queue is empty, the request is resolved; the line is resolved to "none".
    assert!(h.adjudications(RUN, &["--status", "pending"]).is_empty());
    let resolved = h.adjudications(RUN, &["--status", "resolved"]);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["outcome"]["verdict"], "affirm");
    assert_eq!(resolved[0]["outcome"]["note"], note);
    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["status"], "resolved");
    assert_eq!(line["belief"]["value"], "none");
    assert_eq!(disposition(&line, "referral"), "committed");
    assert_eq!(disposition(&line, "on_file"), "superseded");

    h.replays_and_verifies(RUN, "completed");
    let (_, rows) = h.json_lines(&["runs", "--status", "completed", "--json"]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["run"], RUN);
}

#[test]
fn deny_keeps_the_allergy_and_prescribes_azithromycin() {
    let h = Home::new();
    h.start(&[]);
    let (code, out) = h.json(&adjudicate_args(RUN, "deny", &["--json"]));
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["outcome"], "applied");
    assert_eq!(out["verdict"], "deny");
    assert_eq!(out["belief"]["status"], "resolved");
    assert_eq!(out["belief"]["value"], "penicillin");
    // Without --resume the run still waits, until resumed by another process.
    let (_, rows) = h.json_lines(&["runs", "--status", "suspended", "--json"]);
    assert_eq!(rows.len(), 1);
    let (code, out) = h.json(&["resume", RUN, "--json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["status"], "completed");
    let state = h.state(RUN);
    let rx = state["kv/prescription"].as_str().unwrap();
    assert!(rx.starts_with("azithromycin"), "{rx}");
    assert_eq!(state["step/amoxicillin"]["status"], "skipped");
    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["value"], "penicillin");
    assert_eq!(disposition(&line, "referral"), "superseded");
    assert_eq!(disposition(&line, "on_file"), "committed");
    h.replays_and_verifies(RUN, "completed");
}

#[test]
fn unknown_contests_both_claims_and_the_run_stays_suspended() {
    let h = Home::new();
    h.start(&[]);
    let (code, out) = h.json(&adjudicate_args(RUN, "unknown", &["--resume", "--json"]));
    assert_eq!(code, 3, "still suspended: {out}");
    assert_eq!(out["status"], "suspended");
    assert_eq!(out["waiting"]["step"], "allergy");
    assert_eq!(out["appended"], 0, "the resume wrote nothing: {out}");
    let reason = out["waiting"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("waits on belief"), "{reason}");
    assert!(reason.contains("contested"), "{reason}");

    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["status"], "contested");
    assert_eq!(line["belief"]["pending"], serde_json::json!([]));
    assert_eq!(disposition(&line, "referral"), "contested");
    assert_eq!(disposition(&line, "on_file"), "contested");
    let resolved = h.adjudications(RUN, &["--status", "resolved"]);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["outcome"]["verdict"], "unknown");
    assert!(h.adjudications(RUN, &["--status", "pending"]).is_empty());

    // Resuming again changes nothing: exit 3, nothing appended.
    let before = h.snapshot(RUN);
    let (code, out) = h.json(&["resume", RUN, "--json"]);
    assert_eq!(code, 3, "{out}");
    assert_eq!(out["appended"], 0);
    assert!(
        h.snapshot(RUN) == before,
        "a fruitless resume writes nothing"
    );
    // The handle is used up.
    h.refused(RUN, &adjudicate_args(RUN, "affirm", &[]), 6);
    assert!(h.state(RUN).get("kv/prescription").is_none());
    assert_eq!(count(&h.kinds(RUN), "adjudicated"), 1);
    h.replays_and_verifies(RUN, "suspended");
}

#[test]
fn pending_requests_survive_the_process_and_as_of_shows_before_and_after_the_verdict() {
    let h = Home::new();
    h.start(&[]);
    // The process that ran the plan is gone: the queue is the log's projection.
    let pending = h.adjudications(RUN, &["--status", "pending"]);
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["handle"], HANDLE);
    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["status"], "contested");
    assert_eq!(line["belief"]["pending"], serde_json::json!([HANDLE]));

    // A verdict given at tick 10 (the run stopped at tick 6).
    let (code, out) = h.json(&adjudicate_args(RUN, "affirm", &["--now", "10", "--json"]));
    assert_eq!(code, 0, "{out}");
    let seq = out["seq"].as_u64().unwrap();
    let events = h.events(RUN);
    assert_eq!(events.len() as u64, seq + 1);
    assert_eq!(events[seq as usize]["kind"], "adjudicated");
    assert_eq!(events[seq as usize]["time"], 10);

    // Before the referral: the record on file alone.
    let before_referral = h.allergy(RUN, &["--as-of", "3"]);
    assert_eq!(before_referral["belief"]["status"], "resolved");
    assert_eq!(before_referral["belief"]["value"], "penicillin");
    assert!(!dispositions(&before_referral).contains_key("referral"));
    // Just before the verdict: contested, the request pending.
    let before = h.allergy(RUN, &["--as-of", "9"]);
    assert_eq!(before["belief"]["status"], "contested", "{before}");
    assert_eq!(before["belief"]["pending"], serde_json::json!([HANDLE]));
    assert_eq!(disposition(&before, "referral"), "queued_for_adjudication");
    assert_eq!(disposition(&before, "on_file"), "committed");
    // From the verdict's tick on: resolved.
    for tick in ["10", "11"] {
        let after = h.allergy(RUN, &["--as-of", tick]);
        assert_eq!(after["belief"]["status"], "resolved", "{after}");
        assert_eq!(after["belief"]["value"], "none");
        assert_eq!(disposition(&after, "referral"), "committed");
        assert_eq!(disposition(&after, "on_file"), "superseded");
    }

    // Resumed by yet another process; history is not rewritten by it.
    let (code, out) = h.json(&["resume", RUN, "--json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(h.state(RUN)["kv/prescription"], "amoxicillin");
    let again = h.allergy(RUN, &["--as-of", "9"]);
    assert_eq!(again["belief"]["status"], "contested");
    let resolved = h.adjudications(RUN, &["--status", "resolved"]);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["outcome"]["time"], 10);
    h.replays_and_verifies(RUN, "completed");
}

#[test]
fn refused_verdicts_have_their_own_exit_codes_and_write_nothing() {
    let h = Home::new();
    h.start(&[]);

    // Unknown handle: 5.
    for handle in ["adj-1", "adj-16", "nope"] {
        let args = [
            "adjudicate",
            RUN,
            handle,
            "--verdict",
            "affirm",
            "--evidence",
            EFH,
            "--json",
        ];
        let (out, err) = h.refused(RUN, &args, 5);
        let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(v["outcome"], "unknown_handle");
        assert_eq!(v["handle"], handle);
        assert_eq!(v["ok"], false);
        assert!(err.contains(handle), "{err}");
    }

    // Evidence that is not external and first-hand: 2.
    for evidence in ["model_derived", "user_asserted", "recall_reentry"] {
        let args = [
            "adjudicate",
            RUN,
            HANDLE,
            "--verdict",
            "affirm",
            "--evidence",
            evidence,
            "--json",
        ];
        let (out, _) = h.refused(RUN, &args, 2);
        let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(v["outcome"], "evidence_refused", "{v}");
        assert_eq!(v["evidence"], evidence);
    }
    let bogus = [
        "adjudicate",
        RUN,
        HANDLE,
        "--verdict",
        "affirm",
        "--evidence",
        "hearsay",
    ];
    let (_, err) = h.refused(RUN, &bogus, 2);
    assert!(err.contains("hearsay"), "{err}");
    // A note over the limit: 2.
    let long = "x".repeat(5000);
    h.refused(RUN, &adjudicate_args(RUN, "affirm", &["--note", &long]), 2);
    assert_eq!(h.adjudications(RUN, &["--status", "pending"]).len(), 1);

    // Applied once.
    let note = "confirmed by phone";
    let (code, out) = h.json(&adjudicate_args(RUN, "affirm", &["--note", note, "--json"]));
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["ok"], true);
    assert_eq!(out["handle"], HANDLE);
    let seq = out["seq"].clone();

    // Any repeat: 6, with the original verdict, and nothing written.
    for verdict in ["affirm", "deny", "unknown"] {
        let args = adjudicate_args(RUN, verdict, &["--note", "second opinion", "--json"]);
        let (out, err) = h.refused(RUN, &args, 6);
        let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(v["outcome"], "already_resolved", "{v}");
        assert_eq!(v["seq"], seq);
        assert_eq!(v["original"]["verdict"], "affirm");
        assert_eq!(v["original"]["note"], note);
        assert_eq!(v["original"]["evidence"], EFH);
        assert!(err.contains("already resolved"), "{err}");
    }
    // The text form names the original verdict too.
    let (_, err) = h.refused(RUN, &adjudicate_args(RUN, "deny", &[]), 6);
    assert!(err.contains("affirm"), "{err}");
    // Unknown handles are still unknown.
    let args = [
        "adjudicate",
        RUN,
        "adj-99",
        "--verdict",
        "deny",
        "--evidence",
        EFH,
    ];
    h.refused(RUN, &args, 5);
    assert_eq!(count(&h.kinds(RUN), "adjudicated"), 1);
    h.replays_and_verifies(RUN, "suspended");
}

#[test]
fn expired_requests_refuse_verdicts_and_one_sweep_contests_them() {
    let h = Home::new();
    h.start(&["--adjudication-expiry", "3"]);
    // Recorded at tick 4, so it expires at tick 7; the run stopped at tick 6.
    let pending = h.adjudications(RUN, &[]);
    assert_eq!(pending[0]["expires_at"], 7);
    let events = h.events(RUN);
    assert_eq!(events[0]["payload"]["domains"]["memory"]["expiry_ticks"], 3);
    assert_eq!(events[0]["payload"]["domains"]["memory"]["oracle"], true);

    // A verdict at or past the expiry: 7, nothing written.
    for now in ["7", "12"] {
        let args = adjudicate_args(RUN, "affirm", &["--now", now, "--json"]);
        let (out, _) = h.refused(RUN, &args, 7);
        let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(v["outcome"], "expired", "{v}");
        assert_eq!(v["expires_at"], 7);
        assert_eq!(v["swept_at"], Value::Null);
    }
    // Anything from outside takes a tick after the log's last (6); a sweep at 6, where nothing
    // has expired, would write nothing, so it reports 0 (issue 34) and writes nothing. At 7
    // the request is past its expiry, and listed so before any sweep.
    let before = h.snapshot(RUN);
    let (code, v) = h.json(&["sweep", RUN, "--now", "6", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["expired"], 0, "{v}");
    assert_eq!(v["seq"], Value::Null, "{v}");
    assert!(h.snapshot(RUN) == before);
    let listed = h.adjudications(RUN, &[]);
    assert_eq!(listed[0]["status"], "expired_not_swept", "{listed:?}");

    // The sweep past the expiry: one event.
    let old = fs::read(h.log(RUN)).unwrap();
    let (code, v) = h.json(&["sweep", RUN, "--now", "8", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["expired"], 1);
    assert_eq!(v["handles"], serde_json::json!([HANDLE]));
    let kinds = h.kinds(RUN);
    assert_eq!(kinds.len(), events.len() + 1, "exactly one event appended");
    assert_eq!(kinds.last().unwrap(), "adjudications_expired");
    assert_eq!(v["seq"], events.len() as u64);
    let log = fs::read(h.log(RUN)).unwrap();
    assert!(
        log.len() > old.len() && log.starts_with(&old),
        "appended only"
    );

    // A second sweep: 0, byte-identical (JSON and text), at the same tick too.
    let before = h.snapshot(RUN);
    let (code, v) = h.json(&["sweep", RUN, "--now", "8", "--json"]);
    assert_eq!((code, &v["expired"]), (0, &serde_json::json!(0)), "{v}");
    let (code, v) = h.json(&["sweep", RUN, "--now", "9", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(v["expired"], 0);
    assert_eq!(v["seq"], Value::Null);
    let (code, text, _) = h.oracle(&["sweep", RUN]);
    assert_eq!(code, 0);
    assert!(text.contains("0 adjudications expired"), "{text}");
    assert!(h.snapshot(RUN) == before, "a second sweep writes nothing");

    // A verdict after the sweep: 7, even without --now, naming the sweep.
    let (out, _) = h.refused(RUN, &adjudicate_args(RUN, "affirm", &["--json"]), 7);
    let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(v["swept_at"], events.len() as u64);

    // Both claims contested; the request listed as expired.
    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["status"], "contested");
    assert_eq!(line["belief"]["pending"], serde_json::json!([]));
    assert_eq!(disposition(&line, "referral"), "contested");
    assert_eq!(disposition(&line, "on_file"), "contested");
    let expired = h.adjudications(RUN, &["--status", "expired"]);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0]["handle"], HANDLE);
    assert!(h.adjudications(RUN, &["--status", "pending"]).is_empty());

    // The run cannot go on, and says so without writing.
    let before = h.snapshot(RUN);
    let (code, v) = h.json(&["resume", RUN, "--json"]);
    assert_eq!(code, 3, "{v}");
    assert!(h.snapshot(RUN) == before);
    h.replays_and_verifies(RUN, "suspended");
}

#[test]
fn without_an_oracle_the_conflict_is_contested_and_nothing_can_be_adjudicated() {
    let h = Home::new();
    let out = h.start(&["--no-oracle"]);
    let reason = out["waiting"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("waits on belief"), "{reason}");
    assert!(!reason.contains("adj-"), "{reason}");
    let events = h.events(RUN);
    assert_eq!(events[0]["payload"]["domains"]["memory"]["oracle"], false);

    // The referral is contested, the record on file stays committed; no request.
    let state = h.state(RUN);
    let referral = &state["step/referral"]["output"];
    assert_eq!(referral["disposition"], "contested");
    assert_eq!(referral["adjudication"], Value::Null);
    assert_eq!(referral["conflicts_with"].as_array().unwrap().len(), 1);
    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["status"], "contested");
    assert_eq!(line["belief"]["pending"], serde_json::json!([]));
    assert_eq!(disposition(&line, "referral"), "contested");
    assert_eq!(disposition(&line, "on_file"), "committed");
    assert_eq!(disposition(&line, "guess"), "inferred");
    assert_eq!(disposition(&line, "recalled"), "corroborating");
    assert!(h.adjudications(RUN, &[]).is_empty());
    let (code, text, _) = h.oracle(&["adjudications", RUN]);
    assert_eq!(code, 0);
    assert!(text.contains("no adjudications"), "{text}");

    // Nothing to adjudicate, whatever the handle.
    for handle in [HANDLE, "adj-1", "adj-21"] {
        let args = [
            "adjudicate",
            RUN,
            handle,
            "--verdict",
            "affirm",
            "--evidence",
            EFH,
            "--resume",
        ];
        h.refused(RUN, &args, 5);
    }
    let (code, _) = h.json(&["resume", RUN, "--json"]);
    assert_eq!(code, 3);
    let (code, _) = h.json(&["sweep", RUN, "--now", "100", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(h.events(RUN).len(), events.len(), "nothing was written");
    // --no-oracle and an expiry do not go together: nothing is started.
    let (code, _, err) = h.oracle(&["run", PLAN, "--no-oracle", "--adjudication-expiry", "3"]);
    assert_eq!(code, 2, "{err}");
    assert!(!h.run_dir("adjudication-2").exists());
    h.replays_and_verifies(RUN, "suspended");
}

#[test]
fn two_processes_racing_on_one_handle_apply_exactly_once() {
    const RACES: usize = 6;
    let h = Home::new();
    for _ in 0..RACES {
        let (code, _) = h.json(&["run", PLAN, "--json"]);
        assert_eq!(code, 3);
    }
    for i in 1..=RACES {
        let run = format!("adjudication-{i}");
        // Opposite verdicts, so the log tells which one applied.
        let spawn = |verdict: &str| {
            h.command(&adjudicate_args(&run, verdict, &["--json"]))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn("affirm"), spawn("deny"));
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let mut results: Vec<(i32, Value)> = outs
            .iter()
            .map(|o| {
                let text = String::from_utf8_lossy(&o.stdout);
                let v = serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or_else(
                    |e| panic!("{e}: {text}{}", String::from_utf8_lossy(&o.stderr)),
                );
                (o.status.code().unwrap_or(-1), v)
            })
            .collect();
        results.sort_by_key(|(code, _)| *code);
        let codes: Vec<i32> = results.iter().map(|(c, _)| *c).collect();
        assert_eq!(codes, [0, 6], "{run}: {results:?}");
        let (winner, loser) = (&results[0].1, &results[1].1);
        assert_eq!(loser["outcome"], "already_resolved");
        assert_eq!(loser["original"]["verdict"], winner["verdict"]);
        assert_eq!(loser["seq"], winner["seq"]);
        let events = h.events(&run);
        let applied: Vec<&Value> = events
            .iter()
            .filter(|e| e["kind"] == "adjudicated")
            .collect();
        assert_eq!(applied.len(), 1, "{run}: exactly one verdict recorded");
        assert_eq!(applied[0]["payload"]["verdict"], winner["verdict"]);
        let (code, out, err) = h.oracle(&["verify", &run]);
        assert_eq!(code, 0, "{out}{err}");
    }
}

/// Writes an executable shell script into `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn outbox(h: &Home, run: &str) -> Vec<Value> {
    fs::read_to_string(h.run_dir(run).join("notifications.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn oracle_cmd_receives_the_request_and_failed_deliveries_are_retried() {
    let h = Home::new();
    let tools = tempfile::tempdir().unwrap();
    let got = tools.path().join("got.jsonl");
    let good = script(
        tools.path(),
        "good.sh",
        &format!("cat >> '{}'\nexit 0", got.display()),
    );
    let bad = script(
        tools.path(),
        "bad.sh",
        "cat > /dev/null\necho nope >&2\nexit 1",
    );
    let (good, bad) = (good.to_str().unwrap(), bad.to_str().unwrap());

    // Delivered: the program got the request on stdin.
    let out = h.start(&["--oracle-cmd", good]);
    assert_eq!(out["notified"]["delivered"], serde_json::json!([HANDLE]));
    let text = fs::read_to_string(&got).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let req: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(req["run"], RUN);
    assert_eq!(req["handle"], HANDLE);
    assert_eq!(req["subject"], "patient-17");
    assert_eq!(req["predicate"], "allergy");
    assert_eq!(req["incumbent"]["value"], "penicillin");
    assert_eq!(req["incumbent"]["provenance"], EFH);
    assert_eq!(req["challenger"]["value"], "none");
    assert_eq!(req["challenger"]["step"], "referral");
    let sent = outbox(&h, RUN);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["handle"], HANDLE);
    assert_eq!(sent[0]["delivered"], true);
    // Not sent twice.
    let rows = h.adjudications(RUN, &["--oracle-cmd", good]);
    assert_eq!(
        rows.last().unwrap()["notified"]["delivered"],
        serde_json::json!([])
    );
    assert_eq!(fs::read_to_string(&got).unwrap().lines().count(), 1);

    // A failing program: the run is suspended all the same, the failure is recorded.
    let run2 = "adjudication-2";
    let (code, out, err) = h.oracle(&["run", PLAN, "--oracle-cmd", bad, "--json"]);
    assert_eq!(code, 3, "{out}{err}");
    let out: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(out["status"], "suspended");
    assert_eq!(out["notified"]["failed"][0]["handle"], HANDLE);
    let sent = outbox(&h, run2);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["delivered"], false);
    assert!(
        sent[0]["error"].as_str().unwrap().contains("nope"),
        "{sent:?}"
    );
    // Delivery is not part of the record: both runs logged the same bytes.
    assert_eq!(
        fs::read(h.log(RUN)).unwrap(),
        fs::read(h.log(run2)).unwrap()
    );
    let pending = h.adjudications(run2, &["--status", "pending"]);
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["handle"], HANDLE);
    // Later, a working program gets it.
    let rows = h.adjudications(run2, &["--oracle-cmd", good]);
    assert_eq!(
        rows.last().unwrap()["notified"]["delivered"],
        serde_json::json!([HANDLE])
    );
    let sent = outbox(&h, run2);
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1]["delivered"], true);
    assert_eq!(sent[1]["attempt"], 2);
    let text = fs::read_to_string(&got).unwrap();
    let req: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(req["run"], run2);

    // Attempts are bounded: after five failures the request is left to `adjudications`.
    let run3 = "adjudication-3";
    let (code, _, _) = h.oracle(&["run", PLAN, "--oracle-cmd", bad]);
    assert_eq!(code, 3);
    for _ in 0..4 {
        let rows = h.adjudications(run3, &["--oracle-cmd", bad]);
        assert_eq!(
            rows.last().unwrap()["notified"]["failed"][0]["handle"],
            HANDLE
        );
    }
    let rows = h.adjudications(run3, &["--oracle-cmd", bad]);
    let n = &rows.last().unwrap()["notified"];
    assert_eq!(n["exhausted"], serde_json::json!([HANDLE]), "{n}");
    assert_eq!(n["failed"], serde_json::json!([]));
    assert_eq!(outbox(&h, run3).len(), 5);
    assert_eq!(rows[0]["status"], "pending", "never lost");
    // The verdict still applies, and `adjudicate --resume --oracle-cmd` goes through.
    let (code, out) = h.json(&adjudicate_args(
        run3,
        "affirm",
        &["--resume", "--oracle-cmd", good, "--json"],
    ));
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["status"], "completed");
}

#[test]
fn a_belief_wait_takes_a_verdict_not_a_value() {
    let h = Home::new();
    h.start(&[]);
    for step in ["allergy", "referral"] {
        let (_, err) = h.refused(RUN, &["resume", RUN, "--step", step, "--value", "\"x\""], 2);
        assert!(err.contains("waits on a belief"), "{err}");
        assert!(err.contains("oracle adjudicate"), "{err}");
    }
    let (out, _) = h.refused(
        RUN,
        &[
            "resume", RUN, "--step", "allergy", "--value", "\"none\"", "--json",
        ],
        2,
    );
    let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["exit"], 2);
    // The same code as the API gives (oracle_host::error).
    assert_eq!(v["error"]["code"], "belief_wait");
    // A resume before any verdict: suspended again, nothing appended.
    let (out, _) = h.refused(RUN, &["resume", RUN, "--json"], 3);
    let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(v["status"], "suspended");
    assert_eq!(v["appended"], 0);
    assert!(
        v["waiting"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("waits on belief")
    );
    let (text, _) = h.refused(RUN, &["resume", RUN], 3);
    assert!(text.contains("suspended"), "{text}");
    assert!(
        text.contains("oracle adjudicate"),
        "the next step is named: {text}"
    );
    // The wait is still answered by a verdict.
    let (code, out) = h.json(&adjudicate_args(RUN, "deny", &["--resume", "--json"]));
    assert_eq!(code, 0, "{out}");
}

#[test]
fn an_interrupted_run_must_be_resumed_before_a_verdict() {
    let h = Home::new();
    h.start(&[]);
    // Cut the log right after the last `tool_called` line, as a crash mid-step would.
    let text = fs::read_to_string(h.log(RUN)).unwrap();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let cut = lines
        .iter()
        .rposition(|l| l.contains("\"kind\":\"tool_called\""))
        .unwrap();
    fs::write(h.log(RUN), lines[..=cut].concat()).unwrap();
    let (code, out, err) = h.oracle(&["verify", RUN]);
    assert_eq!(code, 0, "whole lines: still a valid log: {out}{err}");

    let (_, err) = h.refused_log(RUN, &adjudicate_args(RUN, "affirm", &[]), 2);
    assert!(err.contains("middle of a step"), "{err}");
    assert!(err.contains(&format!("oracle resume {RUN}")), "{err}");
    let (out, _) = h.refused_log(RUN, &adjudicate_args(RUN, "affirm", &["--json"]), 2);
    let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(v["ok"], false);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("resume"),
        "{v}"
    );
    let (_, err) = h.refused_log(RUN, &["sweep", RUN, "--now", "100"], 2);
    assert!(err.contains("resume"), "{err}");
    // Still listed (a read-only projection), as pending.
    assert_eq!(h.adjudications(RUN, &["--status", "pending"]).len(), 1);

    // The way out: resume (suspends again), then the verdict applies.
    let (code, v) = h.json(&["resume", RUN, "--json"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["waiting"]["step"], "allergy");
    let (code, v) = h.json(&adjudicate_args(RUN, "affirm", &["--resume", "--json"]));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed");
    assert_eq!(h.state(RUN)["kv/prescription"], "amoxicillin");
    h.replays_and_verifies(RUN, "completed");
}

/// Runs `oracle ARGS` and waits at most `limit` for it; a process still running then is killed
/// and the test fails (an unbounded wait shows as that failure, not as a hung suite).
fn bounded(h: &Home, args: &[&str], limit: std::time::Duration) -> (i32, String, String) {
    let mut child = h
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            return (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still waiting after {limit:?}: the lock wait is not bounded");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Verdicts and sweeps wait for a busy run's lock, up to `LOCK_WAIT_ATTEMPTS_MAX` tries
/// `LOCK_WAIT_STEP_MS` apart (10 s), then give up with exit 2 naming the lock and write nothing. Both
/// sides fail without the bound: a command that never waits refuses the lock released after
/// 300 ms, and one that waits forever is killed by `bounded` (a generous 120 s, not a timing
/// assertion).
#[test]
fn verdicts_and_sweeps_wait_a_bounded_time_for_the_lock() {
    use oracle_runtime::adjudication::{LOCK_WAIT_ATTEMPTS_MAX, LOCK_WAIT_STEP_MS};
    use oracle_runtime::{Durability, LogPaths, LogWriter};
    assert_eq!(LOCK_WAIT_ATTEMPTS_MAX * LOCK_WAIT_STEP_MS, 10_000);
    let generous = std::time::Duration::from_secs(120);
    let h = Home::new();
    // Long enough that the verdict, at the tick after the log's last event, is in time.
    h.start(&["--adjudication-expiry", "30"]);
    let paths = LogPaths::of_run(&h.run_dir(RUN));
    let before = h.snapshot(RUN);

    // Held for the whole wait: both give up, exit 2, naming the lock; nothing written.
    let writer = LogWriter::open(&paths, Durability::DEFAULT).unwrap();
    let verdict = adjudicate_args(RUN, "affirm", &[]);
    let sweep = ["sweep", RUN, "--now", "60"];
    for args in [&verdict[..], &sweep[..]] {
        let (code, out, err) = bounded(&h, args, generous);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("holds the writer lock"), "{args:?}: {err}");
    }
    drop(writer);
    assert!(h.snapshot(RUN) == before, "a refused command wrote nothing");

    // Released while they wait: each goes through.
    for args in [&verdict[..], &sweep[..]] {
        let writer = LogWriter::open(&paths, Durability::DEFAULT).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(writer);
        });
        let (code, out, err) = bounded(&h, args, generous);
        release.join().unwrap();
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
    // The verdict applied (the sweep after it finds nothing left to expire).
    assert_eq!(h.kinds(RUN).last().unwrap(), "adjudicated");
}

/// A verdict's note may hold `NOTE_BYTES_MAX` bytes (counted in bytes, not characters): one
/// byte more is exit 2 with nothing written; exactly the limit is recorded whole.
#[test]
fn a_note_of_note_bytes_max_is_taken_and_one_byte_more_is_refused() {
    use oracle_runtime::adjudication::NOTE_BYTES_MAX;
    let h = Home::new();
    h.start(&[]);
    let max = NOTE_BYTES_MAX as usize;
    // Multi-byte characters: a limit counted in characters would take this one.
    let over = format!("{}x", "é".repeat(max / 2));
    assert_eq!(over.len(), max + 1);
    let (_, err) = h.refused(RUN, &adjudicate_args(RUN, "affirm", &["--note", &over]), 2);
    assert!(err.contains("4096"), "{err}");
    let exact = "n".repeat(max);
    let (code, out) = h.json(&adjudicate_args(
        RUN,
        "affirm",
        &["--note", &exact, "--json"],
    ));
    assert_eq!(code, 0, "{out}");
    let events = h.events(RUN);
    let verdict = events
        .iter()
        .find(|e| e["kind"] == "adjudicated")
        .expect("the verdict is in the log");
    assert_eq!(verdict["payload"]["note"], exact.as_str(), "recorded whole");
}

/// An adjudicator written in Python (`oracle_agent.adjudicator`) as the `--oracle-cmd`: it is
/// given the request and affirms the referral; its verdict is recorded once, through the checks
/// of `oracle adjudicate`, with the program as `by`; the resumed run completes, and a replay
/// without the program reproduces it. A program whose print is not a verdict is a failed
/// delivery, named, and the request stays pending for a person.
#[cfg_attr(
    not(oracle_python),
    ignore = "needs python3 on PATH; .ci/run installs it"
)]
#[test]
fn a_python_adjudicator_resolves_the_conflict_and_the_run_replays_offline() {
    use std::os::unix::fs::PermissionsExt;
    let h = Home::new();
    let tools = tempfile::tempdir().unwrap();
    let src = common::root().join("sdk/python/src");
    let write = |name: &str, decide: &str| {
        let program = tools.path().join(name);
        let text = format!(
            "#!/usr/bin/env python3\nimport sys\nsys.path.insert(0, {src:?})\nfrom oracle_agent import Verdict, adjudicator\n\n@adjudicator\ndef review(request):\n    {decide}\n\nif __name__ == \"__main__\":\n    review.main()\n",
            src = src.display().to_string()
        );
        fs::write(&program, text).unwrap();
        fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
        program.to_str().unwrap().to_owned()
    };
    let review = write(
        "review.py",
        "return Verdict(\"affirm\", note=\"the referral: \" + request[\"challenger\"][\"value\"])",
    );
    let out = h.start(&["--oracle-cmd", &review]);
    assert_eq!(
        out["notified"]["decided"],
        serde_json::json!([{"handle": HANDLE, "verdict": "affirm"}]),
        "{out}"
    );
    let events = h.events(RUN);
    let verdicts: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "adjudicated")
        .collect();
    assert_eq!(verdicts.len(), 1, "{events:?}");
    let p = &verdicts[0]["payload"];
    assert_eq!(
        (p["verdict"].as_str(), p["by"].as_str()),
        (Some("affirm"), Some("oracle-cmd review.py")),
        "{p}"
    );
    assert_eq!(p["note"], "the referral: none");
    let (code, out, err) = h.oracle(&["resume", RUN, "--oracle-cmd", &review, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(count(&h.kinds(RUN), "adjudicated"), 1, "decided once");
    h.replays_and_verifies(RUN, "completed");

    // A program that prints what is no verdict: a failed delivery, the request left pending.
    let chatty = write("chatty.py", "sys.__stdout__.write(\"looks fine\\n\")");
    let out = h.start(&["--oracle-cmd", &chatty]);
    let failed = &out["notified"]["failed"][0];
    assert_eq!(failed["handle"], HANDLE, "{out}");
    assert!(
        failed["error"].as_str().unwrap().contains("not JSON"),
        "{out}"
    );
    let pending = h.adjudications("adjudication-2", &["--status", "pending"]);
    assert_eq!(pending.len(), 1, "{pending:?}");
}

/// The same adjudicator in TypeScript (`oracle-agent`'s `adjudicator`, run by `node`): its
/// verdict is recorded once with the program as `by`, and the run replays without it.
#[cfg_attr(not(oracle_node), ignore = "needs node on PATH; .ci/run installs it")]
#[test]
fn a_typescript_adjudicator_resolves_the_conflict_too() {
    use std::os::unix::fs::PermissionsExt;
    let h = Home::new();
    let tools = tempfile::tempdir().unwrap();
    let index = common::root().join("sdk/typescript/index.js");
    let program = tools.path().join("review.mjs");
    let text = format!(
        "#!/usr/bin/env node\nimport {{ adjudicator, verdict }} from {index:?};\nconst review = adjudicator((request) => verdict(\"deny\", {{ note: \"kept: \" + request.incumbent.value }}));\nawait review.main();\n",
        index = format!("file://{}", index.display())
    );
    fs::write(&program, text).unwrap();
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    let program = program.to_str().unwrap();
    let out = h.start(&["--oracle-cmd", program]);
    assert_eq!(
        out["notified"]["decided"],
        serde_json::json!([{"handle": HANDLE, "verdict": "deny"}]),
        "{out}"
    );
    let events = h.events(RUN);
    let p = &events
        .iter()
        .find(|e| e["kind"] == "adjudicated")
        .expect("the verdict is recorded")["payload"];
    assert_eq!(
        (p["by"].as_str(), p["note"].as_str()),
        (Some("oracle-cmd review.mjs"), Some("kept: penicillin")),
        "{p}"
    );
    let (code, out, err) = h.oracle(&["resume", RUN, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    h.replays_and_verifies(RUN, "completed");
}

/// The verdict door refuses what `POST /runs/{id}/adjudications/{handle}` and `oracle
/// adjudicate` refuse: a word that is no verdict, an evidence that is no provenance, a field
/// it does not know, a value that is not text. Each is a failed delivery naming why, nothing is
/// recorded, and the request stays pending.
#[test]
fn an_oracle_programs_verdict_is_refused_as_the_api_refuses_it() {
    let h = Home::new();
    let tools = tempfile::tempdir().unwrap();
    let cases = [
        (r#"{"verdict":"maybe"}"#, "maybe"),
        (r#"{"verdict":"affirm","evidence":"gossip"}"#, "gossip"),
        (
            r#"{"verdict":"affirm","by":"someone else"}"#,
            "unknown field `by`",
        ),
        (r#"{"verdict":"affirm","note":7}"#, "`note` is not a string"),
    ];
    for (i, (printed, why)) in cases.iter().enumerate() {
        let name = format!("bad{i}.sh");
        let program = script(
            tools.path(),
            &name,
            &format!("cat > /dev/null\necho '{printed}'"),
        );
        let out = h.start(&["--oracle-cmd", program.to_str().unwrap()]);
        let run = out["run"].as_str().unwrap().to_owned();
        let failed = &out["notified"]["failed"][0];
        assert_eq!(failed["handle"], HANDLE, "{printed}: {out}");
        assert!(
            failed["error"].as_str().unwrap().contains(why),
            "{printed}: {out}"
        );
        assert_eq!(out["notified"]["decided"], serde_json::json!([]), "{out}");
        assert_eq!(count(&h.kinds(&run), "adjudicated"), 0, "{printed}");
        let pending = h.adjudications(&run, &["--status", "pending"]);
        assert_eq!(pending.len(), 1, "{printed}: {pending:?}");
    }
}
