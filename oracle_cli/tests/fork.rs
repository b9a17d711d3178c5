//! Time travel and plan versions end to end (issue 37): `oracle fork` shares its parent's
//! events byte for byte and proves it (`verify --parent`), a failed run forked with a fixed
//! plan completes, `resume --plan` upgrades a run only when the new plan re-derives its record
//! (a refusal writes nothing), `diff` of two plan versions names the first content divergence,
//! and forked and upgraded runs replay offline.

use crate::common;

use common::Sandbox;
use oracle_core::Payload;

const ESCALATION: &str = "fixtures/plans/escalation.plan";

/// The escalation fixture, run to its first suspension (`total`), answered, run to its
/// second (`confirm`) and answered: a completed run with two outside answers.
fn escalation_completed(sb: &Sandbox) {
    escalation_completed_with(sb, 1250);
}

/// [`escalation_completed`] with `total` as the first answer's total.
fn escalation_completed_with(sb: &Sandbox, total: u64) {
    let (code, _, err) = sb.oracle(&["run", ESCALATION]);
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--step",
        "total",
        "--value",
        &format!(r#"{{"value":{{"total":{total}}}}}"#),
    ]);
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--step",
        "confirm",
        "--value",
        r#""approved""#,
    ]);
    assert_eq!(code, 0, "{err}");
}

/// The log's bytes up to (not including) record `seq`.
fn prefix(bytes: &[u8], seq: usize) -> &[u8] {
    let mut end = 0;
    for _ in 0..seq {
        end += bytes[end..].iter().position(|&b| b == b'\n').unwrap() + 1;
    }
    &bytes[..end]
}

/// Every seq a fork may start at: each round's first event, and each event after a
/// `suspended`.
fn boundaries(sb: &Sandbox, run: &str) -> Vec<u64> {
    let events = sb.events(".oracle", run);
    (1..events.len())
        .filter(|&s| {
            events[s].time > events[s - 1].time
                || events[s - 1].kind == oracle_core::EventKind::Suspended
        })
        .map(|s| s as u64)
        .collect()
}

#[test]
fn a_fork_at_every_boundary_verifies_and_shares_its_prefix_byte_for_byte() {
    let sb = Sandbox::new();
    escalation_completed(&sb);
    let parent = std::fs::read(sb.log(".oracle", "escalation-1")).unwrap();
    let points = boundaries(&sb, "escalation-1");
    assert!(points.len() >= 4, "{points:?}");
    for (n, at) in points.iter().enumerate() {
        let fork = format!("escalation-{}", n + 2);
        let (code, v) = sb.json(&["fork", "escalation-1", "--at", &at.to_string(), "--json"]);
        // A fork goes on as the parent did until it needs an answer again: suspended (3), or
        // completed (0) when every answer is in the shared prefix.
        assert!(code == 0 || code == 3, "fork at {at}: {v}");
        assert_eq!(v["run"], fork.as_str(), "{v}");
        assert_eq!(v["parent"], "escalation-1");
        assert_eq!(v["shared"], *at);
        let bytes = std::fs::read(sb.log(".oracle", &fork)).unwrap();
        let at = *at as usize;
        assert_eq!(prefix(&bytes, at), prefix(&parent, at), "fork at {at}");
        let events = sb.events(".oracle", &fork);
        match events[at].typed().unwrap() {
            Payload::Forked(f) => {
                assert_eq!(f.parent, "escalation-1");
                assert_eq!(f.seq, at as u64);
                assert_eq!(f.head, events[at - 1].hash);
            }
            other => panic!("event {at} of {fork}: {other:?}"),
        }
        let (code, out, err) = sb.oracle(&["verify", &fork, "--parent", "escalation-1"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("parent   escalation-1 shares events"), "{out}");
        let (code, r) = sb.json(&["replay", &fork, "--json"]);
        assert_eq!(code, 0, "replay of the fork at {at}: {r}");
        assert_eq!(r["result"], "reproduced");
    }
}

#[test]
fn a_fork_at_a_step_starts_at_its_round_and_a_value_stands_for_its_output() {
    let sb = Sandbox::new();
    escalation_completed(&sb);
    // `total` asked for a person after its attempts; fork it with the right total given.
    let (code, v) = sb.json(&[
        "fork",
        "escalation-1",
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":1240}}"#,
        "--by",
        "alice",
        "--json",
    ]);
    assert_eq!(code, 3, "it asks for approval again: {v}");
    assert_eq!(v["waiting"]["step"], "confirm", "{v}");
    let events = sb.events(".oracle", "escalation-2");
    let shared = v["shared"].as_u64().unwrap() as usize;
    match events[shared].typed().unwrap() {
        Payload::Forked(f) => {
            assert_eq!(f.by.as_deref(), Some("alice"));
            assert_eq!(f.step.as_deref(), Some("total"));
        }
        other => panic!("{other:?}"),
    }
    // The given value is `total`'s output: no attempt of it ran in the fork.
    let outputs: Vec<_> = events[shared..]
        .iter()
        .filter_map(|e| match e.typed().unwrap() {
            Payload::ToolReturned(r) if r.step == "total" => Some(r.output),
            _ => None,
        })
        .collect();
    assert_eq!(outputs, vec![serde_json::json!({"value": {"total": 1240}})]);
    let (code, r) = sb.json(&["replay", "escalation-2", "--json"]);
    assert_eq!(code, 0, "{r}");
    // Issue 58: `diff` of a fork named only the fork's marker; it now says what the fork gave
    // and what the parent had recorded for that step (a person's answer here).
    let (code, d) = sb.json(&["diff", "escalation-1", "escalation-2", "--json"]);
    assert_eq!(code, 1, "{d}");
    assert_eq!(d["fork"]["side"], "B", "{d}");
    assert_eq!(d["fork"]["by"], "alice", "{d}");
    assert_eq!(d["fork"]["step"], "total", "{d}");
    assert_eq!(
        d["fork"]["given"],
        serde_json::json!({"value": {"total": 1240}})
    );
    assert_eq!(
        d["fork"]["recorded"]["value"],
        serde_json::json!({"value": {"total": 1250}}),
        "{d}"
    );
    let (_, text, _) = sb.oracle(&["diff", "escalation-1", "escalation-2"]);
    assert!(
        text.contains("B is a fork of A made here (by alice): step `total` was given"),
        "{text}"
    );
    assert!(text.contains("A recorded"), "{text}");

    // A value its step's `expect` refuses: refused, and no fork is left behind.
    let (code, _, err) = sb.oracle(&[
        "fork",
        "escalation-1",
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":0}}"#,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("total"), "{err}");
    assert!(!sb.path().join(".oracle/runs/escalation-3").exists());

    // Not a boundary: refused, naming the nearest ones.
    let (code, _, err) = sb.oracle(&["fork", "escalation-1", "--at", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a decision boundary"), "{err}");
}

#[test]
fn a_failed_run_forked_at_its_failing_step_with_a_fixed_plan_completes() {
    let sb = Sandbox::new();
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/fix-failed.plan"]);
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = sb.oracle(&["resume", "notes-1"]);
    assert_eq!(code, 2, "a failed run cannot be resumed: {err}");
    let (code, v) = sb.json(&[
        "fork",
        "notes-1",
        "--step",
        "stats",
        "--plan",
        "fixtures/plans/fix-fixed.plan",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed");
    let written = std::fs::read_to_string(sb.path().join("out/notes-summary.txt")).unwrap();
    assert_eq!(written, "words: 38");
    let events = sb.events(".oracle", "notes-2");
    let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
    let forked = kinds.iter().position(|k| *k == "forked").unwrap();
    assert_eq!(kinds[forked + 1], "plan_upgraded", "{kinds:?}");
    let dir = sb.path().join(".oracle/runs/notes-2/plans");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        2,
        "both versions kept"
    );
    let (code, out, err) = sb.oracle(&["verify", "notes-2", "--parent", "notes-1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, r) = sb.json(&["replay", "notes-2", "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["result"], "reproduced");
    let (code, out, _) = sb.oracle(&["log", "notes-2"]);
    assert_eq!(code, 0);
    assert!(out.contains("forked from notes-1 at event"), "{out}");
    assert!(out.contains("plan upgraded to notes"), "{out}");
    let (code, out, _) = sb.oracle(&["runs", "--tree"]);
    assert_eq!(code, 0);
    assert!(out.contains("└─ notes-2"), "{out}");

    // A fork of the fork: its own `forked` names notes-2 (notes-1's is in its prefix).
    let (code, v) = sb.json(&["fork", "notes-2", "--step", "summary", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["parent"], "notes-2");
    let (code, out, err) = sb.oracle(&["verify", "notes-3", "--parent", "notes-2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("parent   notes-2 shares events"), "{out}");
    let (code, out, _) = sb.oracle(&["runs", "--tree"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("   └─ notes-3"),
        "one level under notes-2: {out}"
    );
    let (code, r) = sb.json(&["replay", "notes-3", "--json"]);
    assert_eq!(code, 0, "{r}");

    // What the fix changed, as a text diff of the plans the two runs follow now; none between
    // a fork and its own fork, which follow the same plan.
    let (code, out, _) = sb.oracle(&["diff", "notes-1", "notes-2", "--plans"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("-  expect stats.words > 1000\n+  expect stats.words > 10\n"),
        "{out}"
    );
    let (_, v) = sb.json(&["diff", "notes-2", "notes-3", "--plans", "--json"]);
    assert_eq!(v["plan_diff"], serde_json::Value::Null, "{v}");
}

#[test]
fn an_upgrade_is_accepted_when_it_rederives_the_record_and_refused_with_nothing_written_otherwise()
{
    let sb = Sandbox::new();
    let (code, _, err) = sb.oracle(&["run", ESCALATION]);
    assert_eq!(code, 3, "{err}");
    let log = sb.log(".oracle", "escalation-1");
    let source = std::fs::read_to_string(sb.path().join(ESCALATION)).unwrap();

    // Changing an earlier step (the fallback's separator) is refused: exit 4, nothing written.
    let earlier = sb.write(
        "plans/earlier.plan",
        &source.replace(r#"separator: "total: ""#, r#"separator: "Total: ""#),
    );
    let before = std::fs::read(&log).unwrap();
    let dir_before: Vec<_> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let (code, v) = sb.json(&[
        "resume",
        "escalation-1",
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":1250}}"#,
        "--plan",
        earlier.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["code"], "upgrade_refused", "{v}");
    assert!(v["error"]["seq"].as_u64().is_some(), "{v}");
    assert_eq!(v["error"]["step"], "total", "{v}");
    assert_eq!(std::fs::read(&log).unwrap(), before, "nothing written");
    let dir_after: Vec<_> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(dir_before, dir_after);

    // Changing only a step after the suspension (the approval's question) is accepted.
    let later = sb.write(
        "plans/later.plan",
        &source.replace("Approve payment?", "Approve this payment?"),
    );
    // ...but not with the resume refused: the run waits on `total`, and without an answer
    // (or with one for another step) it is refused (exit 2) before the upgrade is recorded.
    for answer in [
        &[][..],
        &["--step", "confirm", "--value", r#""approved""#][..],
    ] {
        let mut args = vec!["resume", "escalation-1"];
        args.extend(answer);
        args.extend(["--plan", later.to_str().unwrap(), "--json"]);
        let (code, v) = sb.json(&args);
        assert_eq!(code, 2, "{v}");
        let want = if answer.is_empty() {
            "needs_answer"
        } else {
            "wrong_step"
        };
        assert_eq!(v["error"]["code"], want, "{v}");
        assert_eq!(std::fs::read(&log).unwrap(), before, "nothing written");
        let dir_now: Vec<_> = std::fs::read_dir(log.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(dir_before, dir_now, "no plan version kept");
        let kept = std::fs::read_to_string(log.parent().unwrap().join("plan.plan")).unwrap();
        assert!(
            !kept.contains("Approve this payment?"),
            "the plan is unchanged"
        );
    }
    let (code, v) = sb.json(&[
        "resume",
        "escalation-1",
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":1250}}"#,
        "--plan",
        later.to_str().unwrap(),
        "--by",
        "bob",
        "--json",
    ]);
    assert_eq!(code, 3, "{v}");
    let events = sb.events(".oracle", "escalation-1");
    let upgraded = events
        .iter()
        .find_map(|e| match e.typed().unwrap() {
            Payload::PlanUpgraded(u) => Some(u),
            _ => None,
        })
        .expect("plan_upgraded recorded");
    assert_eq!(upgraded.by.as_deref(), Some("bob"));
    assert_ne!(upgraded.from, upgraded.to);
    let asked = events.iter().any(|e| {
        matches!(e.typed().unwrap(), Payload::ToolCalled(c)
            if c.step == "confirm" && c.input.to_string().contains("Approve this payment?"))
    });
    assert!(asked, "the new plan asks the new question");
    let (code, _, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--step",
        "confirm",
        "--value",
        r#""approved""#,
    ]);
    assert_eq!(code, 0, "{err}");
    sb.oracle(&["verify", "escalation-1"]);
    let (code, r) = sb.json(&["replay", "escalation-1", "--json"]);
    assert_eq!(code, 0, "replay of an upgraded run: {r}");
    assert_eq!(r["result"], "reproduced");
}

#[test]
fn diff_of_two_plan_versions_names_the_first_content_divergence() {
    let sb = Sandbox::new();
    let source = std::fs::read_to_string(sb.path().join(ESCALATION)).unwrap();
    let edited = sb.write(
        "plans/edited.plan",
        &source.replace("Approve payment?", "Approve this payment?"),
    );
    for plan in [ESCALATION, edited.to_str().unwrap()] {
        let (code, _, err) = sb.oracle(&["run", plan]);
        assert_eq!(code, 3, "{err}");
        let run = if plan == ESCALATION {
            "escalation-1"
        } else {
            "escalation-2"
        };
        let (code, _, err) = sb.oracle(&[
            "resume",
            run,
            "--step",
            "total",
            "--value",
            r#"{"value":{"total":1250}}"#,
        ]);
        assert_eq!(code, 3, "{err}");
    }
    let (code, v) = sb.json(&["diff", "escalation-1", "escalation-2", "--json"]);
    assert_eq!(code, 1, "{v}");
    assert!(v["plans_differ"].is_object(), "{v}");
    let seq = v["seq"].as_u64().expect("a divergence");
    assert!(seq > 0, "not event 0: {v}");
    let events = sb.events(".oracle", "escalation-1");
    let e = &events[seq as usize];
    assert_eq!(e.kind.as_str(), "tool_called", "{v}");
    assert_eq!(e.payload["step"], "confirm");
    let (code, out, _) = sb.oracle(&["diff", "escalation-1", "escalation-2"]);
    assert_eq!(code, 1);
    assert!(out.contains("plans differ"), "{out}");
    assert!(!out.contains("@@"), "no text diff unless asked: {out}");

    // On request, the plans' text diff: the one changed line, each side named by its run.
    let (code, out, _) = sb.oracle(&["diff", "escalation-1", "escalation-2", "--plans"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("--- escalation-1: plan\n+++ escalation-2: plan\n"),
        "{out}"
    );
    let changed: Vec<&str> = out
        .lines()
        .filter(|l| (l.starts_with('-') || l.starts_with('+')) && !l.contains(": plan"))
        .collect();
    assert_eq!(changed.len(), 2, "{out}");
    assert!(changed[0].starts_with('-') && changed[0].contains("Approve payment?"));
    assert!(changed[1].starts_with('+') && changed[1].contains("Approve this payment?"));
    let (_, v) = sb.json(&["diff", "escalation-1", "escalation-2", "--plans", "--json"]);
    let text = v["plan_diff"].as_str().expect("the text diff in --json");
    assert!(out.contains(text), "the same diff as the text output: {v}");

    // A plan file edited beside the log is refused, never shown as the run's plan.
    let kept = sb.path().join(".oracle/runs/escalation-2/plan.plan");
    std::fs::write(&kept, source.replace("Approve payment?", "Pay at once.")).unwrap();
    let (code, _, err) = sb.oracle(&["diff", "escalation-1", "escalation-2", "--plans"]);
    assert_eq!(code, 4, "an integrity error: {err}");
    assert!(
        err.contains("plan.plan") && err.contains("does not match"),
        "{err}"
    );
}

#[test]
fn a_fork_with_a_key_is_made_once_and_the_key_with_anything_else_is_refused() {
    let sb = Sandbox::new();
    escalation_completed(&sb);
    let fork = |value: &str, extra: &[&str]| {
        let mut args = vec![
            "fork",
            "escalation-1",
            "--step",
            "total",
            "--value",
            value,
            "--key",
            "job-7",
            "--json",
        ];
        args.extend_from_slice(extra);
        sb.json(&args)
    };
    let v1240 = r#"{"value":{"total":1240}}"#;
    let (code, v) = fork(v1240, &[]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["run"], "escalation-2");
    let shared = v["shared"].as_u64().unwrap() as usize;
    let events = sb.events(".oracle", "escalation-2");
    assert_eq!(
        events[shared].payload["key"], "job-7",
        "the key is in the record"
    );

    // Again with the same key, parent, point and value: that fork, nothing made or run.
    let log = std::fs::read(sb.log(".oracle", "escalation-2")).unwrap();
    let (code, v) = fork(v1240, &[]);
    assert_eq!(code, 3, "the exit of the fork's status: {v}");
    assert_eq!(v["run"], "escalation-2");
    assert_eq!(v["existing"], true);
    assert_eq!(
        std::fs::read(sb.log(".oracle", "escalation-2")).unwrap(),
        log
    );
    let (code, out, _) = sb.oracle(&[
        "fork",
        "escalation-1",
        "--step",
        "total",
        "--value",
        v1240,
        "--key",
        "job-7",
    ]);
    assert_eq!(code, 3);
    assert!(
        out.contains("key      job-7 forked this run already; nothing was run"),
        "{out}"
    );

    // The same key with another value, or another plan: refused, naming what differs.
    let (code, v) = fork(r#"{"value":{"total":99}}"#, &[]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "key_conflict", "{v}");
    assert_eq!(v["error"]["differs"], serde_json::json!(["inputs"]), "{v}");
    let source = std::fs::read_to_string(sb.path().join(ESCALATION)).unwrap();
    let edited = sb.write(
        "plans/edited.plan",
        &source.replace("Approve payment?", "Approve this payment?"),
    );
    let (code, v) = fork(v1240, &["--plan", edited.to_str().unwrap()]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["differs"], serde_json::json!(["plan"]), "{v}");
    assert!(
        !sb.path().join(".oracle/runs/escalation-3").exists(),
        "nothing made"
    );

    // The key file is an index, not the record: without it, the key makes a new fork.
    std::fs::remove_dir_all(sb.path().join(".oracle/keys")).unwrap();
    let (code, v) = fork(v1240, &[]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["run"], "escalation-3");
    let (code, out, err) = sb.oracle(&["verify", "escalation-3", "--parent", "escalation-1"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// `verify FORK --parent RUN` proves a relation between two runs, not only equal bytes: a
/// sibling fork holds the very same prefix (every hash the proof compares is equal), but it is
/// not the run the fork names, so it is refused (exit 4, `not_the_parent`); the real parent
/// still proves. Fails if the comparison of `forked.parent` with the run given is removed.
#[test]
fn verify_parent_refuses_a_run_with_the_same_prefix_that_is_not_the_parent() {
    let sb = Sandbox::new();
    escalation_completed(&sb);
    let at = *boundaries(&sb, "escalation-1").last().unwrap();
    for fork in ["escalation-2", "escalation-3"] {
        let (code, v) = sb.json(&["fork", "escalation-1", "--at", &at.to_string(), "--json"]);
        assert!(code == 0 || code == 3, "{v}");
        assert_eq!(v["run"], fork, "{v}");
    }
    let (code, out, err) = sb.oracle(&["verify", "escalation-3", "--parent", "escalation-1"]);
    assert_eq!(code, 0, "{out}{err}");
    for not_parent in ["escalation-2", ".oracle/runs/escalation-2"] {
        let (code, v) = sb.json(&["verify", "escalation-3", "--parent", not_parent, "--json"]);
        assert_eq!(code, 4, "{not_parent}: {v}");
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(v["error"]["code"], "not_the_parent", "{v}");
        let reason = v["error"]["reason"].as_str().unwrap();
        assert!(
            reason.contains("`escalation-1`") && reason.contains("`escalation-2`"),
            "{reason}"
        );
        let (code, out, err) = sb.oracle(&["verify", "escalation-3", "--parent", not_parent]);
        assert_eq!(code, 4, "{out}{err}");
        assert!(err.contains("not `escalation-2`"), "{err}");
    }
}

/// The hash half of the proof: a run under the parent's very id (another home's
/// `escalation-1`, answered differently) or a bare log of it verifies on its own, but its
/// event at the fork's last shared seq has another hash, so the proof fails (exit 4,
/// `fork_prefix`). Fails if the comparison of the parent's hash with `forked.head` is removed.
#[test]
fn verify_parent_refuses_a_run_under_the_parents_id_whose_prefix_differs() {
    let sb = Sandbox::new();
    escalation_completed(&sb);
    let at = *boundaries(&sb, "escalation-1").last().unwrap();
    let (code, v) = sb.json(&["fork", "escalation-1", "--at", &at.to_string(), "--json"]);
    assert!(code == 0 || code == 3, "{v}");
    let other = Sandbox::new();
    escalation_completed_with(&other, 1300);
    let (code, out, err) = other.oracle(&["verify", "escalation-1"]);
    assert_eq!(code, 0, "the impostor verifies on its own: {out}{err}");
    let impostor = other.path().join(".oracle/runs/escalation-1");
    let bare = other.path().join("escalation-1.jsonl");
    std::fs::copy(impostor.join("events.jsonl"), &bare).unwrap();
    for given in [&impostor, &bare] {
        let given = given.to_str().unwrap();
        let (code, v) = sb.json(&["verify", "escalation-2", "--parent", given, "--json"]);
        assert_eq!(code, 4, "{given}: {v}");
        assert_eq!(v["error"]["code"], "fork_prefix", "{v}");
        let reason = v["error"]["reason"].as_str().unwrap();
        assert!(reason.contains("the prefixes differ"), "{reason}");
    }
    // The real parent, as a bare log too: the prefix proves (the id is not compared then).
    let real = sb.path().join("parent.jsonl");
    std::fs::copy(sb.log(".oracle", "escalation-1"), &real).unwrap();
    let (code, out, err) =
        sb.oracle(&["verify", "escalation-2", "--parent", real.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("the run id was not compared"), "{out}");
}

/// Issue 57 (Oracle Omen's "log corruption → restore from the last valid snapshot"): a run
/// damaged at event 6 is recovered from its valid prefix: `oracle recover` forks it at the last
/// decision boundary before the damage, records why (`reason: recovered`) and the damaged
/// log's hash, keeps the damaged log as it was (and a copy under `damaged/`), and the new run
/// completes with the bytes an undamaged run records after the fork. `fork --at` works at any
/// boundary before the damage and is refused past it.
#[test]
fn a_run_damaged_at_event_6_is_recovered_and_completes_with_the_damaged_log_kept() {
    let sb = Sandbox::new();
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/quickstart.plan"]);
    assert_eq!(code, 0, "{err}");
    let log = sb.log(".oracle", "quickstart-1");
    let clean = std::fs::read(&log).unwrap();
    // Nothing to recover in a log that verifies.
    let (code, v) = sb.json(&["recover", "quickstart-1", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "nothing_to_recover", "{v}");
    // One byte of event 6's payload changed: the log no longer verifies from there.
    let mut damaged = clean.clone();
    let line6 = prefix(&clean, 6).len();
    let at = line6 + clean[line6..].iter().position(|&b| b == b':').unwrap() + 3;
    damaged[at] ^= 0x01;
    std::fs::write(&log, &damaged).unwrap();
    let (code, _, _) = sb.oracle(&["verify", "quickstart-1"]);
    assert_eq!(code, 4);
    // A fork before the damage works; past it, refused with the damage, nothing made.
    let (code, v) = sb.json(&["fork", "quickstart-1", "--at", "1", "--json"]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = sb.json(&["fork", "quickstart-1", "--at", "9", "--json"]);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (4, Some("integrity")),
        "{v}"
    );
    // Recovered: a fork at the last boundary before event 6, driven to the end.
    let (code, v) = sb.json(&["recover", "quickstart-1", "--by", "ops", "--json"]);
    assert_eq!(code, 0, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let shared = v["shared"].as_u64().unwrap();
    assert!(shared <= 6, "{v}");
    assert_eq!(v["recovered"]["damaged_at"], 6, "{v}");
    let hash = blake3::hash(&damaged).to_hex().to_string();
    assert_eq!(v["recovered"]["hash"], hash.as_str(), "{v}");
    let events = sb.events(".oracle", &run);
    match events[shared as usize].typed().unwrap() {
        Payload::Forked(f) => {
            assert_eq!(f.reason.as_deref(), Some("recovered"));
            assert_eq!(f.damaged.map(|h| h.to_hex()), Some(hash.clone()));
            assert_eq!(f.by.as_deref(), Some("ops"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(events.last().unwrap().kind.as_str(), "run_finished");
    // The damaged log is as it was, and a copy of it is kept.
    assert_eq!(std::fs::read(&log).unwrap(), damaged);
    let kept = std::path::PathBuf::from(v["recovered"]["kept"].as_str().unwrap());
    assert_eq!(std::fs::read(&kept).unwrap(), damaged);
    for args in [vec!["verify", run.as_str()], vec!["replay", run.as_str()]] {
        let (code, out, err) = sb.oracle(&args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
    // What it did after the fork point is what the undamaged run recorded there.
    let recovered = std::fs::read(sb.log(".oracle", &run)).unwrap();
    let after = |bytes: &[u8], from: usize| -> Vec<String> {
        common::parse_events(bytes)[from..]
            .iter()
            .map(|e| format!("{} {}", e.kind.as_str(), e.payload))
            .collect()
    };
    assert_eq!(
        after(&recovered, shared as usize + 1),
        after(&clean, shared as usize),
        "the recovered run goes on as the original did"
    );
}
