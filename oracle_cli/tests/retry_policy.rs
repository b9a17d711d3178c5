//! Retry policies and sagas end to end (issue 56, item 6): `retry { attempts, backoff, initial,
//! max, jitter, non_retryable }` waits between attempts on a recorded timer (`timer_set`,
//! `timer_fired`), waited out in process when short and suspended on when long; replay never
//! waits; a non-retryable code stops at once; and `undo STEP` compensations run in reverse
//! when the run fails. The failing tool is an exec script counting its calls in a file.

use crate::common;

use common::Sandbox;
use oracle_core::Payload;

/// An impure exec tool `demo.flaky {key, fails, code}`: its first `fails` calls for `key` fail
/// (printing `code` on stderr), the next succeed with `{n}`; every call is appended to
/// `calls.log` as `KEY N`.
fn flaky_tool(sb: &Sandbox) {
    let script = sb.write(
        "tools/flaky.sh",
        r#"#!/bin/sh
input=$(cat)
fails=$(printf '%s' "$input" | sed 's/.*"fails":\([0-9]*\).*/\1/')
key=$(printf '%s' "$input" | sed 's/.*"key":"\([a-z_]*\)".*/\1/')
code=$(printf '%s' "$input" | sed 's/.*"code":"\([a-z_]*\)".*/\1/')
n=$(cat "count-$key.txt" 2>/dev/null || echo 0)
n=$((n + 1))
echo $n > "count-$key.txt"
echo "$key $n" >> calls.log
if [ "$n" -le "$fails" ]; then echo "$code" >&2; exit 1; fi
printf '{"n":%s}' $n
"#,
    );
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    sb.write(
        "tools/flaky.toml",
        r#"name = "demo.flaky"
version = "1.0.0"
description = "Fails its first calls, then succeeds"
input_schema = { type = "object", properties = { key = { type = "string" }, fails = { type = "integer" }, code = { type = "string" } }, required = ["key", "fails", "code"] }
output_schema = { type = "object", properties = { n = { type = "integer" } }, required = ["n"] }

[exec]
program = "flaky.sh"
env = { PATH = "/usr/bin:/bin" }
"#,
    );
}

/// A plan `name` with the flaky tool's grant and `body`.
fn plan(sb: &Sandbox, name: &str, body: &str) -> String {
    let file = format!("{name}.plan");
    sb.write(
        &file,
        &format!(
            "plan {name} version 1\n\ntools \"tools\"\n\ngrant tool:exec:demo.flaky\n\n{body}"
        ),
    );
    file
}

fn payloads(sb: &Sandbox, run: &str) -> Vec<Payload> {
    sb.events(".oracle", run)
        .iter()
        .map(|e| e.typed().unwrap())
        .collect()
}

fn timers(p: &[Payload]) -> (Vec<oracle_core::payload::TimerSet>, usize) {
    let set = p
        .iter()
        .filter_map(|p| match p {
            Payload::TimerSet(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    let fired = p
        .iter()
        .filter(|p| matches!(p, Payload::TimerFired(_)))
        .count();
    (set, fired)
}

fn failures(p: &[Payload], step: &str) -> usize {
    p.iter()
        .filter(|p| matches!(p, Payload::ToolFailed(f) if f.step == step && f.tool == "demo.flaky"))
        .count()
}

#[test]
fn a_step_failing_twice_waits_twice_on_recorded_timers_completes_and_replays_exactly() {
    let sb = Sandbox::new();
    flaky_tool(&sb);
    let p = plan(
        &sb,
        "flaky",
        "pay = demo.flaky { key: \"pay\", fails: 2, code: \"busy\" }\n  retry { attempts: 3, backoff: \"exponential\", initial: \"50ms\" }\n",
    );
    let (code, out, err) = sb.oracle(&["run", &p]);
    assert_eq!(code, 0, "{out}{err}");
    let p = payloads(&sb, "flaky-1");
    assert_eq!(failures(&p, "pay"), 2);
    let (set, fired) = timers(&p);
    assert_eq!((set.len(), fired), (2, 2), "two timer pairs");
    // The waits grow: 50 ms, then 100 ms.
    assert_eq!(set[0].due_ms - set[0].set_ms, 50);
    assert_eq!(set[1].due_ms - set[1].set_ms, 100);
    assert!(set[1].due_ms > set[0].due_ms);
    for f in p.iter().filter_map(|p| match p {
        Payload::TimerFired(f) => Some(f),
        _ => None,
    }) {
        assert!(f.fired_ms >= f.due_ms, "waited in process until due: {f:?}");
    }
    match p.last() {
        Some(Payload::RunFinished(f)) => assert_eq!(f.status.as_str(), "completed"),
        other => panic!("{other:?}"),
    }
    let log = std::fs::read(sb.log(".oracle", "flaky-1")).unwrap();
    let (code, out, err) = sb.oracle(&["replay", "flaky-1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ending   completed"), "{out}");
    assert_eq!(std::fs::read(sb.log(".oracle", "flaky-1")).unwrap(), log);
    let (code, out, err) = sb.oracle(&["verify", "flaky-1"]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_non_retryable_code_ends_the_attempts_at_once() {
    let sb = Sandbox::new();
    flaky_tool(&sb);
    let p = plan(
        &sb,
        "declined",
        "pay = demo.flaky { key: \"pay\", fails: 3, code: \"card_declined\" }\n  retry { attempts: 5, backoff: \"fixed\", initial: \"50ms\", non_retryable: [\"card_declined\"] }\n",
    );
    let (code, out, err) = sb.oracle(&["run", &p]);
    assert_eq!(code, 1, "{out}{err}");
    let p = payloads(&sb, "declined-1");
    assert_eq!(failures(&p, "pay"), 1);
    assert_eq!(timers(&p).0.len(), 0);
    match p.last() {
        Some(Payload::RunFinished(f)) => {
            assert_eq!(f.status.as_str(), "failed");
            assert!(
                f.reason.contains("non-retryable: card_declined"),
                "{}",
                f.reason
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_long_backoff_suspends_on_its_timer_and_a_wake_completes_the_run() {
    let sb = Sandbox::new();
    flaky_tool(&sb);
    let p = plan(
        &sb,
        "patient",
        "pay = demo.flaky { key: \"pay\", fails: 1, code: \"busy\" }\n  retry { attempts: 2, backoff: \"fixed\", initial: \"2m\", jitter: true }\n",
    );
    let (code, out, err) = sb.oracle(&["run", &p]);
    assert_eq!(code, 3, "suspended: {out}{err}");
    assert!(
        out.contains("next     oracle resume patient-1 --wake"),
        "{out}"
    );
    let p = payloads(&sb, "patient-1");
    let (set, fired) = timers(&p);
    assert_eq!((set.len(), fired), (1, 0));
    // Jitter draws the wait in [1 min, 2 min] from the run's seed.
    let wait = set[0].due_ms - set[0].set_ms;
    assert!((60_000..=120_000).contains(&wait), "{wait}");
    match p.last() {
        Some(Payload::Suspended(s)) => assert_eq!(
            s.reason,
            format!("waits until {} (retry after attempt 1)", set[0].due)
        ),
        other => panic!("{other:?}"),
    }
    // The home's timer index has it, for `oracle serve`'s wheel.
    let index: Vec<String> = std::fs::read_dir(sb.path().join(".oracle/timers"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(index, vec![format!("{:020}-patient-1", set[0].due_ms)]);
    // Not due: a wake is refused; resuming without one too.
    let (code, v) = sb.json(&["resume", "patient-1", "--wake", "--json"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["error"]["code"], "timer_not_due");
    let (code, v) = sb.json(&["resume", "patient-1", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "timer_wait");
    let (code, out, err) = sb.oracle(&["resume", "patient-1", "--wake", "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    let p = payloads(&sb, "patient-1");
    assert_eq!(timers(&p).1, 1);
    assert_eq!(failures(&p, "pay"), 1);
    match p.last() {
        Some(Payload::RunFinished(f)) => assert_eq!(f.status.as_str(), "completed"),
        other => panic!("{other:?}"),
    }
    let (code, out, err) = sb.oracle(&["replay", "patient-1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = sb.oracle(&["verify", "patient-1"]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_failed_saga_undoes_the_completed_steps_in_reverse_and_fails_with_the_original_failure() {
    let sb = Sandbox::new();
    flaky_tool(&sb);
    let step = |name: &str, fails: u32| {
        format!("{name} = demo.flaky {{ key: \"{name}\", fails: {fails}, code: \"sold_out\" }}\n")
    };
    let body = [
        step("book_flight", 0),
        step("book_hotel", 0) + "  after book_flight\n",
        step("book_car", 9) + "  after book_hotel\n  attempts 1\n",
        step("cancel_car", 0) + "  undo book_car\n",
        // A compensation may retry, waiting on its own timer while the run fails.
        step("cancel_hotel", 1) + "  retry { attempts: 2, initial: \"50ms\" }\n  undo book_hotel\n",
        step("cancel_flight", 0) + "  undo book_flight\n",
    ]
    .concat();
    let p = plan(&sb, "trip", &body);
    let (code, out, err) = sb.oracle(&["run", &p]);
    assert_eq!(code, 1, "{out}{err}");
    let calls = std::fs::read_to_string(sb.path().join("calls.log")).unwrap();
    assert_eq!(
        calls,
        "book_flight 1\nbook_hotel 1\nbook_car 1\ncancel_hotel 1\ncancel_hotel 2\ncancel_flight 1\n"
    );
    let p = payloads(&sb, "trip-1");
    let called: Vec<&str> = p
        .iter()
        .filter_map(|p| match p {
            Payload::ToolCalled(c) => Some(c.step.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        called,
        [
            "book_flight",
            "book_hotel",
            "book_car",
            "cancel_hotel",
            "cancel_hotel",
            "cancel_hotel",
            "cancel_flight"
        ]
    );
    assert_eq!(timers(&p).1, 1, "the compensation's wait");
    match p.last() {
        Some(Payload::RunFinished(f)) => {
            assert_eq!(f.status.as_str(), "failed");
            assert!(
                f.reason.starts_with("step `book_car` failed: "),
                "{}",
                f.reason
            );
        }
        other => panic!("{other:?}"),
    }
    let (code, out, err) = sb.oracle(&["replay", "trip-1"]);
    assert_eq!(code, 0, "{out}{err}");
    // A saga that completes runs no compensation.
    std::fs::remove_file(sb.path().join("calls.log")).unwrap();
    let body = [step("reserve", 0), step("release", 0) + "  undo reserve\n"].concat();
    let p = plan(&sb, "fine", &body);
    let (code, out, err) = sb.oracle(&["run", &p]);
    assert_eq!(code, 0, "{out}{err}");
    let calls = std::fs::read_to_string(sb.path().join("calls.log")).unwrap();
    assert_eq!(calls, "reserve 1\n");
}

#[test]
fn a_run_killed_during_its_in_process_wait_leaves_a_timer_a_wake_fires() {
    let sb = Sandbox::new();
    flaky_tool(&sb);
    let p = plan(
        &sb,
        "killed",
        "pay = demo.flaky { key: \"pay\", fails: 1, code: \"busy\" }\n  retry { attempts: 2, backoff: \"fixed\", initial: \"50s\" }\n",
    );
    let mut child = sb
        .command(&["run", &p])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log = sb.log(".oracle", "killed-1");
    let start = std::time::Instant::now();
    // The timer and the suspension are durable before the drive waits.
    while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("\"suspended\"")) {
        assert!(start.elapsed().as_secs() < 30, "never suspended");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let p = payloads(&sb, "killed-1");
    assert_eq!(timers(&p), (timers(&p).0, 0));
    assert!(
        matches!(p.last(), Some(Payload::Suspended(_))),
        "{:?}",
        p.last()
    );
    let (code, out, err) = sb.oracle(&["resume", "killed-1", "--wake", "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    let p = payloads(&sb, "killed-1");
    assert_eq!(timers(&p).1, 1);
    match p.last() {
        Some(Payload::RunFinished(f)) => assert_eq!(f.status.as_str(), "completed"),
        other => panic!("{other:?}"),
    }
}

/// A fresh database of the shared throwaway cluster with the schema, or `None` (skip) without
/// PostgreSQL (`ORACLE_REQUIRE_POSTGRES=1` makes that a failure).
fn store_url() -> Option<String> {
    let cluster = oracle_pg::cluster::shared()?;
    let url = cluster
        .database(&format!("retry_{}", std::process::id()))
        .unwrap();
    let (code, out, err) = common::oracle_in(
        std::path::Path::new("."),
        &["store", "init", "--store", &url],
    );
    assert_eq!(code, 0, "{out}{err}");
    Some(url)
}

/// Over a store, a worker drives a step that fails twice and waits its short backoffs in
/// process, recording both timers, to completion; the exported log verifies and its timers
/// are the file home's.
#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_worker_completes_a_retry_with_a_short_backoff() {
    let Some(url) = store_url() else { return };
    let sb = Sandbox::new();
    flaky_tool(&sb);
    let p = plan(
        &sb,
        "flaky",
        "pay = demo.flaky { key: \"pay\", fails: 2, code: \"busy\" }\n  retry { attempts: 3, backoff: \"exponential\", initial: \"50ms\", jitter: true }\n",
    );
    let (code, out, err) = sb.oracle(&["submit", &p, "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    let id = out.trim().to_owned();
    common::worker_until_idle(sb.path(), &url, &["--tools", "tools"]);
    let export = sb.path().join("exported.jsonl");
    let (code, v) = sb.json(&[
        "export",
        &id,
        "--out",
        export.to_str().unwrap(),
        "--store",
        &url,
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    let (code, out, err) = sb.oracle(&["verify", export.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let p: Vec<Payload> = common::parse_events(&std::fs::read(&export).unwrap())
        .iter()
        .map(|e| e.typed().unwrap())
        .collect();
    assert_eq!(failures(&p, "pay"), 2);
    let (set, fired) = timers(&p);
    assert_eq!((set.len(), fired), (2, 2));
    // Jitter: within [wait / 2, wait] of 50 ms, then 100 ms.
    assert!(
        (25..=50).contains(&(set[0].due_ms - set[0].set_ms)),
        "{set:?}"
    );
    assert!(
        (50..=100).contains(&(set[1].due_ms - set[1].set_ms)),
        "{set:?}"
    );
    match p.last() {
        Some(Payload::RunFinished(f)) => assert_eq!(f.status.as_str(), "completed"),
        other => panic!("{other:?}"),
    }
    let (code, out, err) = sb.oracle(&["replay", &id, "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
}
