//! End-to-end tests of events appended to a run from outside, with the real `oracle` binary:
//! `oracle claim` (new evidence, the way out of `contested`), all-or-nothing appends (a write
//! cut short by a file-size limit, SIGKILL at seeded random points), time that stays put
//! (`--as-of` answers never change, a `--now` before the log is refused), honest listings and
//! exit codes (`expired (not swept)`, `--resume` on a finished run, one resolution of a run by
//! id, directory or log path). Commands run from the workspace root, so
//! `fixtures/plans/adjudication.plan` is the shipped fixture.

use crate::common;

use std::fs;
use std::process::{Command, Stdio};

use common::Home;
use serde_json::Value;

const RUN: &str = "adjudication-1";
/// The fixture's conflict is recorded by event 15 (`referral`).
const HANDLE: &str = "adj-15";
const EFH: &str = "external_first_hand";

/// What these tests ask of a home beyond the shared helpers of [`common::Home`].
impl Home {
    /// The status of adjudication `handle` of the run (empty if it is not listed).
    fn status(&self, handle: &str) -> String {
        self.adjudications(RUN, &[])
            .iter()
            .find(|r| r["handle"] == handle)
            .map(|r| r["status"].as_str().unwrap().to_owned())
            .unwrap_or_default()
    }
}

fn claim_args<'a>(value: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "claim",
        RUN,
        "--subject",
        "patient-17",
        "--predicate",
        "allergy",
        "--value",
        value,
        "--provenance",
        EFH,
    ];
    v.extend_from_slice(extra);
    v
}

fn verdict_args<'a>(handle: &'a str, verdict: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "adjudicate",
        RUN,
        handle,
        "--verdict",
        verdict,
        "--evidence",
        EFH,
    ];
    v.extend_from_slice(extra);
    v
}

/// The walkthrough's way out: a run that went through `unknown`, new evidence from
/// `oracle claim`, an expiry and a sweep, then more evidence and a verdict, completes and
/// replays bit-identically; every as-of answer stays what it was.
#[test]
fn unknown_claim_expiry_sweep_claim_affirm_completes_and_replays() {
    let h = Home::new();
    // Requests expire 10 ticks after they are opened: adj-15 (tick 4) at 14.
    h.start(&["--adjudication-expiry", "10"]);
    let (code, v) = h.json(&verdict_args(HANDLE, "unknown", &["--json"]));
    assert_eq!(code, 0, "{v}");
    let (code, text, _) = h.oracle(&["resume", RUN]);
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains("oracle claim adjudication-1 --subject patient-17 --predicate allergy"),
        "the hint names the command: {text}"
    );
    let contested = h.allergy(RUN, &[]);
    assert_eq!(contested["belief"]["status"], "contested");
    let as_of_contested = h.allergy(RUN, &["--as-of", "7"]);

    // New evidence: it opens a new request (the gate decides, as for memory.assert).
    let (code, v) = h.json(&claim_args(
        "\"none\"",
        &["--note", "allergy test negative", "--json"],
    ));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["outcome"], "recorded");
    assert_eq!(v["disposition"], "queued_for_adjudication", "{v}");
    let first = v["adjudication"]["handle"].as_str().unwrap().to_owned();
    let claim_seq = v["seq"].as_u64().unwrap();
    assert_eq!(first, format!("adj-{claim_seq}"));
    let ev = &h.events(RUN)[claim_seq as usize];
    assert_eq!(ev["kind"], "claim_recorded");
    assert!(!ev["parents"].as_array().unwrap().is_empty(), "{ev}");

    // It expires unanswered: listed as such before the sweep, contested after it.
    let expires = v["adjudication"]["expires_at"].as_u64().unwrap();
    let (code, v) = h.json(&["sweep", RUN, "--now", &expires.to_string(), "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["handles"], serde_json::json!([first]));
    assert_eq!(h.status(&first), "expired");
    let (code, _, _) = h.oracle(&["resume", RUN]);
    assert_eq!(code, 3);

    // More evidence, affirmed: the run goes on and completes.
    let (code, v) = h.json(&claim_args("\"none\"", &["--json"]));
    assert_eq!(code, 0, "{v}");
    let second = v["adjudication"]["handle"].as_str().unwrap().to_owned();
    let (code, out, err) = h.oracle(&verdict_args(&second, "affirm", &["--resume"]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("status   completed"), "{out}");
    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["status"], "resolved", "{line}");
    assert_eq!(line["belief"]["value"], "none");
    // What was believed at tick 7 is what was believed then.
    assert_eq!(h.allergy(RUN, &["--as-of", "7"]), as_of_contested);
    h.replays_and_verifies(RUN, "completed");
}

/// A claim that commits on a new line, a window and a criticality; a refused claim (the
/// gate's reason, a model-derived provenance, a float) writes nothing, exit 2.
#[test]
fn claims_commit_or_are_refused_with_the_gates_reason_and_write_nothing() {
    let h = Home::new();
    h.start(&[]);
    let args = [
        "claim",
        RUN,
        "--subject",
        "patient-17",
        "--predicate",
        "weight_kg",
        "--value",
        "71",
        "--provenance",
        "user_asserted",
        "--criticality",
        "high",
        "--valid",
        "2..@90",
        "--json",
    ];
    let (code, v) = h.json(&args);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["disposition"], "committed");
    assert_eq!(v["belief"]["status"], "resolved");
    let log = fs::read(h.log(RUN)).unwrap();
    for (value, prov, why) in [
        ("1.5", EFH, "float"),
        (
            "\"x\"",
            "model_derived",
            "external_first_hand or user_asserted",
        ),
        ("\"x\"", "hearsay", "unknown provenance"),
    ] {
        let (code, out, err) = h.oracle(&claim_args(value, &["--provenance", prov]));
        // The second --provenance wins or clap refuses duplicates: either way exit 2.
        assert_eq!(code, 2, "{value} {prov}: {out}{err}");
        assert!(
            err.contains(why) || err.contains("cannot be used multiple times"),
            "{why}: {err}"
        );
        assert_eq!(fs::read(h.log(RUN)).unwrap(), log, "nothing written");
    }
    let empty = [
        "claim",
        RUN,
        "--subject",
        "",
        "--predicate",
        "p",
        "--value",
        "1",
        "--provenance",
        EFH,
        "--json",
    ];
    let (code, v) = h.json(&empty);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["outcome"], "refused");
    assert!(
        v["reason"].as_str().unwrap().contains("subject is empty"),
        "{v}"
    );
    let (code, out, err) = h.oracle(&claim_args("1.5", &[]));
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("float"), "{err}");
    assert_eq!(fs::read(h.log(RUN)).unwrap(), log, "nothing written");
    h.verifies(RUN);
}

/// Time that stays put: a verdict is stamped after the log's last tick, so `--as-of` that tick
/// answers the same before and after it; a `--now` before the earliest tick is refused.
#[test]
fn as_of_answers_do_not_change_and_an_early_now_is_refused() {
    let h = Home::new();
    h.start(&[]);
    let last = h.events(RUN).last().unwrap()["time"].as_u64().unwrap();
    let before: Vec<Value> = (0..=last)
        .map(|t| h.allergy(RUN, &["--as-of", &t.to_string()]))
        .collect();
    let log = fs::read(h.log(RUN)).unwrap();
    for now in [0, last] {
        let (code, v) = h.json(&verdict_args(
            HANDLE,
            "affirm",
            &["--now", &now.to_string(), "--json"],
        ));
        assert_eq!(code, 2, "{v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(
            m.contains(&format!(
                "earliest tick an outside event can take is {}",
                last + 1
            )),
            "{m}"
        );
        assert_eq!(fs::read(h.log(RUN)).unwrap(), log);
    }
    let (code, v) = h.json(&verdict_args(HANDLE, "affirm", &["--json"]));
    assert_eq!(code, 0, "{v}");
    let ev = &h.events(RUN)[v["seq"].as_u64().unwrap() as usize];
    assert_eq!(ev["time"].as_u64().unwrap(), last + 1);
    let after: Vec<Value> = (0..=last)
        .map(|t| h.allergy(RUN, &["--as-of", &t.to_string()]))
        .collect();
    assert_eq!(before, after);
    assert_eq!(
        h.allergy(RUN, &["--as-of", &(last + 1).to_string()])["belief"]["status"],
        "resolved"
    );
}

/// `bash -c '[trap "" XFSZ;] ulimit -f BLOCKS; exec oracle ARGS'`: the file-size limit in
/// 1024-byte blocks, with SIGXFSZ ignored (it stays ignored across exec) or left to its default
/// (which kills a process whose write crosses the limit: oracle must not get that far).
fn limited(h: &Home, blocks: u64, trap: bool, args: &[&str]) -> (i32, String, String) {
    let trap = if trap { "trap '' XFSZ; " } else { "" };
    let script = format!("{trap}ulimit -f {blocks}; exec \"$0\" \"$@\"");
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_oracle"))
        .arg("--home")
        .arg(h.path())
        .args(args)
        .current_dir(common::root())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Pads the log with claims on their own lines (notes of chosen length) until the next 1024
/// boundary is `gap` bytes away, so a limit there cuts the next record partway.
fn pad_to_gap(h: &Home, gap: u64) {
    for round in 0..6 {
        let len = fs::metadata(h.log(RUN)).unwrap().len();
        let to_boundary = 1024 - len % 1024;
        if to_boundary == gap {
            return;
        }
        // Measure one padding record, then size the next one's note to land on the gap.
        let subject = format!("pad-{round}");
        let before = len;
        let (code, _, err) = h.oracle(&[
            "claim",
            RUN,
            "--subject",
            &subject,
            "--predicate",
            "p",
            "--value",
            "1",
            "--provenance",
            EFH,
        ]);
        assert_eq!(code, 0, "{err}");
        let len = fs::metadata(h.log(RUN)).unwrap().len();
        let record = len - before;
        // The next record: one more byte of subject, plus the note.
        let target = 1024 - gap as i64;
        let note = (target - (len + record + 1) as i64).rem_euclid(1024);
        let note = "n".repeat(note as usize);
        let subject = format!("pad-{round}b");
        let (code, _, err) = h.oracle(&[
            "claim",
            RUN,
            "--subject",
            &subject,
            "--predicate",
            "p",
            "--value",
            "1",
            "--provenance",
            EFH,
            "--note",
            &note,
        ]);
        assert_eq!(code, 0, "{err}");
    }
    let len = fs::metadata(h.log(RUN)).unwrap().len();
    assert_eq!(1024 - len % 1024, gap, "padding did not land");
}

/// A verdict, a sweep and a claim under a file-size limit they would cross (with SIGXFSZ
/// ignored and not): refused before writing, the log byte-identical afterwards, the exit code
/// says nothing changed, `verify` passes without `repair`, the request is still pending, and
/// the retry applies.
#[test]
fn a_file_size_limit_is_refused_before_writing_and_a_retry_applies() {
    let h = Home::new();
    h.start(&["--adjudication-expiry", "40"]);
    let big = "v".repeat(3000);
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "verdict",
            verdict_args(HANDLE, "affirm", &["--note", &big])
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
        (
            "claim",
            claim_args("\"none\"", &["--note", &big])
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
    ];
    for ((what, args), trap) in cases.iter().zip([true, false]) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let before = fs::read(h.log(RUN)).unwrap();
        let blocks = before.len() as u64 / 1024 + 1;
        let (code, out, err) = limited(&h, blocks, trap, &args);
        assert_eq!(code, 2, "{what}: {out}{err}");
        assert!(err.contains("file-size limit"), "{what}: {err}");
        assert!(err.contains("nothing was changed"), "{what}: {err}");
        assert_eq!(
            fs::read(h.log(RUN)).unwrap(),
            before,
            "{what}: byte-identical"
        );
        h.verifies(RUN);
        if *what == "verdict" {
            assert_eq!(h.status(HANDLE), "pending", "{what}");
        }
        let (code, out, err) = h.oracle(&args);
        assert_eq!(code, 0, "{what} retried: {out}{err}");
    }
    // A sweep: a new conflict to expire; a small record, so the log is padded to end 16 bytes
    // before a block boundary.
    let (code, v) = h.json(&claim_args("\"penicillin\"", &["--json"]));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["disposition"], "queued_for_adjudication", "{v}");
    let expiring = h
        .adjudications(RUN, &["--status", "pending"])
        .iter()
        .map(|r| r["expires_at"].as_u64().unwrap())
        .max()
        .unwrap();
    pad_to_gap(&h, 16);
    let before = fs::read(h.log(RUN)).unwrap();
    let now = expiring.to_string();
    let blocks = before.len() as u64 / 1024 + 1;
    let (code, out, err) = limited(&h, blocks, false, &["sweep", RUN, "--now", &now]);
    assert_eq!(code, 2, "sweep: {out}{err}");
    assert!(err.contains("nothing was changed"), "sweep: {err}");
    assert_eq!(fs::read(h.log(RUN)).unwrap(), before);
    h.verifies(RUN);
    let (code, v) = h.json(&["sweep", RUN, "--now", &now, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert!(v["expired"].as_u64().unwrap() >= 1, "{v}");
    h.replays_and_verifies(RUN, "suspended");
}

/// A tmpfs mount that unmounts when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `kib` KiB, or `None` where this process may not mount (not root, no
    /// mount namespace): the test then says so and checks nothing.
    fn mount(kib: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A full filesystem: the verdict's write is cut short by ENOSPC partway through a record (the
/// log's last page has room for part of it), the writer truncates the part back under the
/// lock, exit 2 "undone", the log byte-identical, `verify` passes, and after space is freed the
/// retry applies.
#[test]
fn a_write_cut_short_by_a_full_filesystem_is_truncated_back_and_a_retry_applies() {
    let Some(fs_) = Tmpfs::mount(2048) else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let h = Home::new_in(fs_.dir.path());
    h.start(&[]);
    let before = fs::read(h.log(RUN)).unwrap();
    assert!(
        !before.len().is_multiple_of(4096),
        "the last page has room for part of a record"
    );
    // Fill the filesystem.
    let filler = fs_.dir.path().join("filler");
    {
        use std::io::Write as _;
        let mut f = fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }
    let note = "v".repeat(4000);
    let args = verdict_args(HANDLE, "affirm", &["--note", &note]);
    let (code, out, err) = h.oracle(&args);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("was undone"), "{err}");
    assert_eq!(fs::read(h.log(RUN)).unwrap(), before, "byte-identical");
    h.verifies(RUN);
    assert_eq!(h.status(HANDLE), "pending");
    fs::remove_file(&filler).unwrap();
    let (code, out, err) = h.oracle(&args);
    assert_eq!(code, 0, "retry: {out}{err}");
    assert_eq!(h.status(HANDLE), "resolved");
    h.verifies(RUN);
    drop(h);
}

/// SIGKILL at seeded random points of `oracle claim`: afterwards every complete record is
/// untouched, the claim is there whole or not at all (a record cut mid-write is a torn tail
/// the next outside command moves aside, never a damaged log), and a retry records it. A floor on how
/// many kills landed while the command was still running keeps the test meaningful.
#[test]
fn sigkill_at_random_points_leaves_a_whole_log_and_a_retry_applies() {
    let h = Home::new();
    h.start(&[]);
    let mut rng = common::SplitMix64::new(0x5eed_c1a1);
    let trials = 40u64;
    let mut killed = 0u64;
    let mut landed_killed = 0u64;
    let mut torn_tails = 0u64;
    // How long one claim takes here, to spread the kills over it (not asserted).
    let mut span_us = 200;
    for value in ["\"none\"", "\"none\"", "\"none\""] {
        let t0 = std::time::Instant::now();
        let (code, _, err) = h.oracle(&claim_args(value, &["--durability", "event"]));
        assert_eq!(code, 0, "{err}");
        span_us = span_us.max(t0.elapsed().as_micros() as u64);
    }
    // Kills spread past the longest measured run, so some land late in the command.
    let span_us = span_us * 3 / 2;
    for i in 0..trials {
        let subject = format!("kill-{i}");
        let events_before = h.events(RUN).len();
        let args = [
            "claim",
            RUN,
            "--subject",
            &subject,
            "--predicate",
            "p",
            "--value",
            "1",
            "--provenance",
            EFH,
            "--durability",
            "event",
        ];
        let mut child = h
            .command(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_micros(rng.below(span_us)));
        let _ = child.kill();
        let status = child.wait().unwrap();
        let was_killed = status.code().is_none();
        // Every complete record is untouched. The record being written may be cut short
        // where the kernel copies a write page by page (a fatal signal stops it between
        // pages): then `verify` names it as a torn tail after exactly the records before,
        // and the next outside command moves it aside and applies.
        let (code, out, err) = h.oracle(&["verify", RUN]);
        let torn = code != 0;
        if torn {
            assert!(
                err.contains("torn tail")
                    && err.contains(&format!("after {events_before} complete records")),
                "only the record being written may be cut: {out}{err}"
            );
            torn_tails += 1;
        }
        let landed = !torn && h.events(RUN).len() == events_before + 1;
        if !torn {
            let n = h.events(RUN).len();
            assert!(
                n == events_before || landed,
                "whole or nothing: {events_before} -> {n}"
            );
        }
        if was_killed {
            killed += 1;
            landed_killed += u64::from(landed);
        }
        if !landed {
            let (code, out, err) = h.oracle(&args);
            assert_eq!(code, 0, "retry after a kill: {out}{err}");
            assert_eq!(torn, err.contains("torn final record"), "{err}");
        }
        h.verifies(RUN);
        let (code, rows) = h.json_lines(&["memory", RUN, "--subject", &subject, "--json"]);
        assert_eq!(code, 0);
        assert_eq!(rows.len(), 1, "{subject}: exactly one line");
        assert_eq!(
            rows[0]["claims"].as_array().unwrap().len(),
            1,
            "{subject}: one claim"
        );
    }
    eprintln!(
        "{killed} of {trials} killed while running ({landed_killed} after the append, {torn_tails} mid-write)"
    );
    assert!(
        killed * 5 >= trials,
        "only {killed} of {trials} kills landed while the command ran"
    );
}

/// Honest listings and exit codes: `--resume` on a finished run applies and exits 0; a run is
/// named alike by id, directory or log path; an unknown name gets one wording and a "did you
/// mean"; `--oracle-cmd` delivers when the run is named by its directory.
#[test]
fn a_finished_run_a_run_named_three_ways_and_a_misspelt_one() {
    let h = Home::new();
    h.start(&[]);
    let dir = h.run_dir(RUN);
    let log = h.log(RUN);
    for target in [
        RUN.to_owned(),
        dir.display().to_string(),
        log.display().to_string(),
    ] {
        for cmd in [
            vec!["memory", target.as_str()],
            vec!["adjudications", target.as_str()],
            vec!["verify", target.as_str()],
            vec!["log", target.as_str()],
            vec!["sweep", target.as_str()],
        ] {
            let (code, out, err) = h.oracle(&cmd);
            assert_eq!(code, 0, "{cmd:?}: {out}{err}");
        }
    }
    // The oracle is notified when the run is named by its directory.
    let seen = h.path().join("seen.json");
    let script = h.path().join("oracle.sh");
    fs::write(&script, format!("#!/bin/sh\ncat >> '{}'\n", seen.display())).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let dir_s = dir.display().to_string();
    let script_s = script.display().to_string();
    let (code, out, err) = h.oracle(&["adjudications", &dir_s, "--oracle-cmd", &script_s]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        fs::read_to_string(&seen)
            .unwrap_or_default()
            .contains(HANDLE),
        "delivered: {out}{err}"
    );
    // A misspelt id: one wording and a suggestion, for a run command and a log command alike.
    for cmd in ["memory", "verify", "claim"] {
        let mut args = vec![cmd, "adjudicaton-1"];
        if cmd == "claim" {
            args.extend(["--subject", "s", "--predicate", "p", "--value", "1"]);
            args.extend(["--provenance", EFH]);
        }
        let (code, _, err) = h.oracle(&args);
        assert_eq!(code, 2, "{cmd}: {err}");
        assert!(err.contains("no such run"), "{cmd}: {err}");
        assert!(
            err.contains("did you mean `adjudication-1`"),
            "{cmd}: {err}"
        );
    }
    // Finish the run, then a verdict/claim with --resume: applied, exit 0, nothing to resume.
    let (code, out, err) = h.oracle(&verdict_args(HANDLE, "affirm", &["--resume"]));
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = h.oracle(&claim_args("\"none\"", &["--resume"]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("nothing to resume"), "{out}");
    let handle = h
        .adjudications(RUN, &["--status", "pending"])
        .first()
        .map(|r| r["handle"].as_str().unwrap().to_owned());
    if let Some(handle) = handle {
        let (code, v) = h.json(&verdict_args(&handle, "deny", &["--resume", "--json"]));
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["resumed"], false);
    }
    h.replays_and_verifies(RUN, "completed");
}

/// `adjudications` lists a request past its expiry as `expired (not swept)`.
#[test]
fn a_request_past_its_expiry_is_listed_as_expired_not_swept() {
    let h = Home::new();
    h.start(&["--adjudication-expiry", "3"]);
    let (code, out, _) = h.oracle(&["adjudications", RUN]);
    assert_eq!(code, 0);
    assert!(out.contains("expired (not swept)"), "{out}");
    assert_eq!(h.status(HANDLE), "expired_not_swept");
    assert_eq!(h.adjudications(RUN, &["--status", "expired"]).len(), 1);
    assert!(h.adjudications(RUN, &["--status", "pending"]).is_empty());
}

/// The id of the claim of `value` on the allergy line (from `oracle memory --json`).
fn claim_of(h: &Home, value: &str) -> String {
    let line = h.allergy(RUN, &[]);
    line["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["value"] == value && c["provenance"] == EFH)
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no claim of {value}: {line}"))
}

/// Reinstatement: a denied claim made live again by a verdict that names it (by an id prefix),
/// recorded as one `reinstated` event the run goes on from; as-of answers before it stay, the
/// run replays bit-identically, and every refusal writes nothing.
#[test]
fn a_denied_claim_is_reinstated_by_name_and_the_run_completes_and_replays() {
    let h = Home::new();
    h.start(&[]);
    let (code, v) = h.json(&verdict_args(HANDLE, "deny", &["--json"]));
    assert_eq!(code, 0, "{v}");
    let referral = claim_of(&h, "none");
    let before = h.allergy(RUN, &["--as-of", "5"]);
    let log = fs::read(h.log(RUN)).unwrap();
    for (args, want) in [
        (vec![referral[..7].to_owned(), EFH.to_owned()], 2), // prefix too short
        (vec!["0123456789abcdef".to_owned(), EFH.to_owned()], 5), // no such claim
        (vec![claim_of(&h, "penicillin"), EFH.to_owned()], 2), // committed: nothing to reinstate
        (
            vec![referral[..12].to_owned(), "user_asserted".to_owned()],
            2,
        ), // evidence
    ] {
        let (code, v) = h.json(&["reinstate", RUN, &args[0], "--evidence", &args[1], "--json"]);
        assert_eq!(code, want, "{args:?}: {v}");
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(fs::read(h.log(RUN)).unwrap(), log, "{args:?} wrote nothing");
    }
    let (code, out, err) = h.oracle(&[
        "reinstate",
        RUN,
        &referral[..12],
        "--evidence",
        EFH,
        "--note",
        "referral letter confirmed by phone",
        "--resume",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("reinstated claim"), "{out}");
    assert!(out.contains("status   completed"), "{out}");
    let ev = h
        .events(RUN)
        .into_iter()
        .find(|e| e["kind"] == "reinstated")
        .expect("a reinstated event");
    assert_eq!(ev["payload"]["claim"], referral.as_str());
    assert!(!ev["parents"].as_array().unwrap().is_empty(), "{ev}");
    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["status"], "resolved", "{line}");
    assert_eq!(line["belief"]["value"], "none");
    assert_eq!(h.allergy(RUN, &["--as-of", "5"]), before);
    h.replays_and_verifies(RUN, "completed");
}

/// A run without an oracle: the contested line's way out is a verdict naming the claim to
/// keep; the suspended run's hint says so.
#[test]
fn without_an_oracle_reinstating_a_contested_claim_settles_the_line() {
    let h = Home::new();
    let out = h.start(&["--no-oracle"]);
    assert_eq!(out["waiting"]["step"], "allergy");
    let (code, text, _) = h.oracle(&["resume", RUN]);
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains("oracle reinstate adjudication-1 CLAIM --evidence external_first_hand"),
        "{text}"
    );
    // New evidence only joins the contest: nobody can be asked.
    let (code, v) = h.json(&claim_args("\"none\"", &["--json"]));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["disposition"], "contested", "{v}");
    let penicillin = claim_of(&h, "penicillin");
    let (code, v) = h.json(&[
        "reinstate",
        RUN,
        &penicillin,
        "--evidence",
        EFH,
        "--resume",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["value"], "penicillin", "{line}");
    h.replays_and_verifies(RUN, "completed");
}

/// "Why", several challengers: affirm B, which also commits its sibling C (same value) as
/// agreeing; then affirm D against the same line. Every claim of another value where D holds is
/// superseded (C included), nothing is left pending, the line is resolved and the run goes on.
#[test]
fn several_challengers_a_later_affirm_settles_the_whole_line() {
    let h = Home::new();
    h.start(&[]);
    // C: a second "none" from outside, queued against the allergy on file.
    let (code, v) = h.json(&claim_args("\"none\"", &["--json"]));
    assert_eq!(code, 0, "{v}");
    let c = v["adjudication"]["handle"].as_str().unwrap().to_owned();
    // Affirm B (the referral): C agrees with it and is closed as agreeing.
    let (code, v) = h.json(&verdict_args(HANDLE, "affirm", &["--json"]));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["effects"]["agreed"], serde_json::json!([c]), "{v}");
    // D: a third value, queued; affirmed.
    let (code, v) = h.json(&claim_args("\"latex\"", &["--json"]));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["disposition"], "queued_for_adjudication", "{v}");
    let d = v["adjudication"]["handle"].as_str().unwrap().to_owned();
    let (code, out, err) = h.oracle(&verdict_args(&d, "affirm", &["--resume"]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("status   completed"), "{out}");
    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["status"], "resolved", "{line}");
    assert_eq!(line["belief"]["value"], "latex");
    for claim in line["claims"].as_array().unwrap() {
        if claim["provenance"] == EFH && claim["value"] != "latex" {
            assert_eq!(claim["disposition"], "superseded", "{claim}");
        }
    }
    assert!(
        h.adjudications(RUN, &[])
            .iter()
            .all(|r| r["status"] != "pending"),
        "nothing is left pending"
    );
    h.replays_and_verifies(RUN, "completed");
}

/// "Why", deny: a request whose incumbent is denied away is never re-pointed onto a claim of
/// its own value ("penicillin" vs "penicillin"): it is closed as agreeing, and the line is
/// resolved, not left with a request nobody can sensibly answer.
#[test]
fn a_deny_never_leaves_a_request_pairing_equal_values() {
    let h = Home::new();
    h.start(&[]);
    // X: "penicillin" again from outside, queued against the referral ("none").
    let (code, v) = h.json(&claim_args("\"penicillin\"", &["--json"]));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["disposition"], "queued_for_adjudication", "{v}");
    let x = v["adjudication"]["handle"].as_str().unwrap().to_owned();
    let (code, v) = h.json(&verdict_args(HANDLE, "deny", &["--json"]));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["effects"]["agreed"], serde_json::json!([x]), "{v}");
    assert_eq!(h.status(&x), "resolved");
    let line = h.allergy(RUN, &[]);
    assert_eq!(line["belief"]["status"], "resolved", "{line}");
    assert_eq!(line["belief"]["value"], "penicillin");
    let (code, out, err) = h.oracle(&["resume", RUN]);
    assert_eq!(code, 0, "{out}{err}");
    h.replays_and_verifies(RUN, "completed");
}

/// A record cut mid-write (as SIGKILL between two pages of one write leaves it) is a torn
/// tail: read-only commands report it, and the next outside command moves it aside into
/// `torn/`, says so, and applies; the log then verifies.
#[test]
fn the_next_outside_command_moves_a_record_cut_mid_write_aside_and_applies() {
    let h = Home::new();
    h.start(&[]);
    let before = std::fs::read(h.log(RUN)).unwrap();
    let mut torn = before.clone();
    torn.extend_from_slice(br#"{"seq":99,"kind":"claim_recor"#);
    std::fs::write(h.log(RUN), &torn).unwrap();
    let (code, _, err) = h.oracle(&["verify", RUN]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("torn tail"), "{err}");
    let (code, out, err) = h.oracle(&claim_args("\"none\"", &[]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("note: a torn final record (29 bytes"), "{err}");
    let saved: Vec<_> = std::fs::read_dir(h.run_dir(RUN).join("torn"))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(saved, vec![br#"{"seq":99,"kind":"claim_recor"#.to_vec()]);
    h.verifies(RUN);
    let after = std::fs::read(h.log(RUN)).unwrap();
    assert!(after.starts_with(&before) && after.len() > before.len());
}
