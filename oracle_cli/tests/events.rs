//! Runs that wait for named outside events (`wait.event`, issue 56 item 3), through every
//! door: `oracle signal` on a file home and over a PostgreSQL store, and `POST
//! /api/v1/runs/{id}/events/{name}` (the Python client's `send_event` is tested in
//! sdk/python/tests/test_events.py). An event sent before the run waits on it is kept beside
//! the run and delivered when the run gets there; one sent after wakes the run; a value the
//! step's schema refuses, or a name no wait declares, is refused with nothing kept; a deadline
//! fires `on timeout`; and the finished run verifies and replays byte for byte without the
//! kept events.

use crate::common;
use crate::web;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use common::{Sandbox, json_in, oracle_in};
use oracle_core::Payload;
use serde_json::{Value, json};

const PLAN: &str = "fixtures/plans/order.plan";

/// The plan with the payment's deadline already past, so a wake fires it.
fn late_plan(sb: &Sandbox) -> &'static str {
    let text = fs::read_to_string(sb.path().join(PLAN)).unwrap();
    sb.write(
        "late.plan",
        &text
            .replace("plan order", "plan late")
            .replace("\"2h\"", "\"2020-01-01T00:00:00Z\""),
    );
    "late.plan"
}

fn run_dir(sb: &Sandbox, run: &str) -> PathBuf {
    sb.path().join(".oracle/runs").join(run)
}

/// The kept events' files of `run` (none when the directory was never made).
fn kept(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir.join("inbox"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `(step, value, by)` of every `resumed` event of the log at `log`.
fn resumed(log: &Path) -> Vec<(String, Value, Option<String>)> {
    common::parse_events(&fs::read(log).unwrap())
        .iter()
        .filter_map(|e| match e.typed().unwrap() {
            Payload::Resumed(r) => Some((r.step, r.value, r.by)),
            _ => None,
        })
        .collect()
}

/// The input the `done` step was called with: what the two waits gave it.
fn done_input(log: &Path) -> Value {
    common::parse_events(&fs::read(log).unwrap())
        .iter()
        .find_map(|e| match e.typed().unwrap() {
            Payload::ToolCalled(c) if c.step == "done" => Some(c.input["value"].clone()),
            _ => None,
        })
        .expect("step done was called")
}

fn signal(dir: &Path, args: &[&str]) -> (i32, Value) {
    json_in(dir, &[&["signal"], args, &["--json"]].concat())
}

#[test]
fn an_event_sent_before_its_wait_is_kept_and_one_sent_after_wakes_the_run() {
    let sb = Sandbox::new();
    let (code, v) = sb.json(&["run", PLAN, "--json"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["waiting"]["step"], "paid");
    assert_eq!(
        v["waiting"]["reason"].as_str().unwrap().split(" (").next(),
        Some("waits on event `payment`")
    );
    let dir = run_dir(&sb, "order-1");
    let log = dir.join("events.jsonl");
    let before = fs::read(&log).unwrap();

    // Before its wait: kept beside the run, nothing recorded.
    let (code, v) = signal(
        sb.path(),
        &["order-1", "shipped", "--value", r#"{"carrier":"ups"}"#],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (v["n"].as_u64(), v["delivered"].as_bool()),
        (Some(1), Some(false)),
        "{v}"
    );
    assert_eq!(
        fs::read(&log).unwrap(),
        before,
        "a kept event records nothing"
    );
    assert_eq!(kept(&dir).len(), 1);

    // After: wakes the run, which takes the kept one at its second wait and completes.
    let (code, v) = signal(
        sb.path(),
        &["order-1", "payment", "--value", r#"{"amount":5}"#],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["delivered"], true, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(
        resumed(&log),
        vec![
            (
                "paid".into(),
                json!({"amount": 5}),
                Some("event payment #2".into())
            ),
            (
                "shipped".into(),
                json!({"carrier": "ups"}),
                Some("event shipped #1".into())
            ),
        ]
    );
    assert_eq!(
        done_input(&log),
        json!({"paid": {"amount": 5}, "shipped": {"carrier": "ups"}})
    );

    // Verified, and replayed byte for byte with the kept events gone: replay needs none.
    let finished = fs::read(&log).unwrap();
    let (code, out, err) = sb.oracle(&["verify", "order-1"]);
    assert_eq!(code, 0, "{out}{err}");
    fs::remove_dir_all(dir.join("inbox")).unwrap();
    let (code, out, err) = sb.oracle(&["replay", "order-1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ending   completed"), "{out}");
    assert_eq!(fs::read(&log).unwrap(), finished);

    // A finished run keeps nothing more.
    let (code, v) = signal(sb.path(), &["order-1", "shipped", "--value", "{}"]);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (2, Some("finished")),
        "{v}"
    );
    assert!(kept(&dir).is_empty());
}

#[test]
fn a_value_the_schema_refuses_and_a_name_no_wait_declares_are_refused_with_nothing_kept() {
    let sb = Sandbox::new();
    let (code, _) = sb.json(&["run", PLAN, "--json"]);
    assert_eq!(code, 3);
    let dir = run_dir(&sb, "order-1");
    let before = fs::read(dir.join("events.jsonl")).unwrap();
    for (args, want) in [
        (
            ["order-1", "payment", "--value", r#"{"amount":"five"}"#],
            "bad_event",
        ),
        (
            ["order-1", "payment", "--value", r#"{"total":5}"#],
            "bad_event",
        ),
        (
            ["order-1", "refund", "--value", r#"{"amount":5}"#],
            "event_unknown",
        ),
        (["order-1", "Pay Ment", "--value", "1"], "bad_event"),
    ] {
        let (code, v) = signal(sb.path(), &args);
        assert_eq!(code, 2, "{args:?}: {v}");
        assert_eq!(v["error"]["code"], want, "{args:?}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("nothing was kept"),
            "{v}"
        );
    }
    let (code, v) = signal(sb.path(), &["order-9", "payment", "--value", "{}"]);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (2, Some("not_found")),
        "{v}"
    );
    assert!(kept(&dir).is_empty(), "{:?}", kept(&dir));
    assert_eq!(fs::read(dir.join("events.jsonl")).unwrap(), before);
}

#[test]
fn a_deadline_that_passes_first_gives_the_wait_its_on_timeout_value() {
    let sb = Sandbox::new();
    let plan = late_plan(&sb);
    let (code, v) = sb.json(&["run", plan, "--json"]);
    assert_eq!(code, 3, "{v}");
    let (code, v) = sb.json(&["resume", "late-1", "--wake", "--json"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["waiting"]["step"], "shipped", "{v}");
    // The payment comes too late: its wait is over, so it is kept and never consumed.
    let (code, v) = signal(
        sb.path(),
        &["late-1", "payment", "--value", r#"{"amount":5}"#],
    );
    assert_eq!((code, v["delivered"].as_bool()), (0, Some(false)), "{v}");
    let (code, v) = signal(sb.path(), &["late-1", "shipped", "--value", r#""dhl""#]);
    assert_eq!((code, v["status"].as_str()), (0, Some("completed")), "{v}");
    let log = sb.log(".oracle", "late-1");
    assert_eq!(
        done_input(&log),
        json!({"paid": {"amount": 0}, "shipped": "dhl"})
    );
    let kinds: Vec<String> = sb
        .events(".oracle", "late-1")
        .iter()
        .map(|e| e.kind.as_str().to_owned())
        .collect();
    assert!(kinds.contains(&"timer_fired".to_owned()), "{kinds:?}");
    let (code, out, err) = sb.oracle(&["replay", "late-1"]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_kept_event_edited_on_disk_is_never_delivered() {
    let sb = Sandbox::new();
    let (code, _) = sb.json(&["run", PLAN, "--json"]);
    assert_eq!(code, 3);
    let dir = run_dir(&sb, "order-1");
    let (code, _) = signal(sb.path(), &["order-1", "shipped", "--value", r#""ups""#]);
    assert_eq!(code, 0);
    let file = dir.join("inbox").join(&kept(&dir)[0]);
    let text = fs::read_to_string(&file).unwrap();
    fs::write(&file, text.replace("\"ups\"", "\"evil\"")).unwrap();
    let (code, v) = signal(
        sb.path(),
        &["order-1", "payment", "--value", r#"{"amount":1}"#],
    );
    assert_eq!(code, 0, "{v}");
    // The payment is delivered; the edited shipment is not: the run waits on.
    assert_eq!(v["status"], "suspended", "{v}");
    let log = sb.log(".oracle", "order-1");
    assert_eq!(resumed(&log).len(), 1);
    let (code, v) = signal(sb.path(), &["order-1", "shipped", "--value", r#""ups""#]);
    assert_eq!((code, v["status"].as_str()), (0, Some("completed")), "{v}");
    assert_eq!(resumed(&log)[1].2.as_deref(), Some("event shipped #3"));
}

/// A sandbox with a token `alice`: its secret.
fn with_token(sb: &Sandbox) -> String {
    let (code, out, err) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    out.trim().to_owned()
}

#[test]
fn the_api_refuses_what_the_command_line_refuses_and_delivers_what_it_keeps() {
    let sb = Sandbox::new();
    let token = with_token(&sb);
    let (code, _) = sb.json(&["run", PLAN, "--json"]);
    assert_eq!(code, 3);
    let (_server, base) = web::serve(sb.path(), &[]);
    let post = |name: &str, value: Value| {
        web::call(
            &base,
            "POST",
            &format!("/api/v1/runs/order-1/events/{name}"),
            &token,
            Some(&json!({ "value": value })),
        )
    };
    let (status, v) = post("payment", json!({"amount": "five"}));
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("bad_event")),
        "{v}"
    );
    let (status, v) = post("refund", json!({"amount": 5}));
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("event_unknown")),
        "{v}"
    );
    let dir = run_dir(&sb, "order-1");
    assert!(kept(&dir).is_empty());

    let (status, v) = post("shipped", json!("ups"));
    assert_eq!((status, v["n"].as_u64()), (200, Some(1)), "{v}");
    let (status, v) = post("payment", json!({"amount": 7}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["resume"]["started"], true, "{v}");
    web::wait_until("the run to complete", || {
        let (_, v) = web::call(&base, "GET", "/api/v1/runs/order-1", &token, None);
        v["status"] == "completed"
    });
    let log = sb.log(".oracle", "order-1");
    assert_eq!(
        resumed(&log)
            .into_iter()
            .map(|(s, v, by)| (s, v, by.unwrap()))
            .collect::<Vec<_>>(),
        vec![
            (
                "paid".into(),
                json!({"amount": 7}),
                "event payment #2".into()
            ),
            ("shipped".into(), json!("ups"), "event shipped #1".into()),
        ]
    );
    let (code, out, err) = sb.oracle(&["replay", "order-1"]);
    assert_eq!(code, 0, "{out}{err}");
}

static DB: AtomicU64 = AtomicU64::new(0);

/// A fresh database with the schema, or `None` (skip) without PostgreSQL.
fn store_url() -> Option<String> {
    let cluster = oracle_pg::cluster::shared()?;
    let n = DB.fetch_add(1, Ordering::Relaxed);
    let url = cluster
        .database(&format!("events_{}_{n}", std::process::id()))
        .unwrap();
    let (code, out, err) = oracle_in(Path::new("."), &["store", "init", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    Some(url)
}

fn state(dir: &Path, url: &str, run: &str) -> Value {
    let (code, out, err) = oracle_in(dir, &["runs", "--store", url, "--json"]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["run"] == run)
        .unwrap_or(Value::Null)
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn over_a_store_events_are_refused_kept_and_delivered_as_in_a_file_home() {
    let Some(url) = store_url() else { return };
    let sb = Sandbox::new();
    let st = sb.path();
    let (code, out, err) = oracle_in(st, &["submit", PLAN, "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    let id = out.trim().to_owned();
    common::worker_until_idle(st, &url, &[]);
    assert_eq!(state(st, &url, &id)["state"], "suspended");

    // Refused before anything is queued, with the file home's codes.
    let (code, v) = signal(
        st,
        &[
            &id,
            "payment",
            "--value",
            r#"{"amount":"x"}"#,
            "--store",
            &url,
        ],
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (2, Some("bad_event")),
        "{v}"
    );
    let (code, v) = signal(st, &[&id, "refund", "--value", "1", "--store", &url]);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (2, Some("event_unknown")),
        "{v}"
    );
    assert_eq!(state(st, &url, &id)["signals_pending"], 0);

    // Before its wait: kept (in the store's files of the run); after: delivered.
    let (code, v) = signal(
        st,
        &[&id, "shipped", "--value", r#""ups""#, "--store", &url],
    );
    assert_eq!(code, 0, "{v}");
    common::worker_until_idle(st, &url, &[]);
    assert_eq!(state(st, &url, &id)["state"], "suspended");
    let (code, v) = signal(
        st,
        &[
            &id,
            "payment",
            "--value",
            r#"{"amount":5}"#,
            "--store",
            &url,
        ],
    );
    assert_eq!(code, 0, "{v}");
    common::worker_until_idle(st, &url, &[]);
    assert_eq!(state(st, &url, &id)["state"], "completed");

    // The same events in a file home: the same run.
    let home = sb.path().join("fh");
    fs::create_dir_all(&home).unwrap();
    let plan = sb.path().join(PLAN);
    let plan = plan.to_str().unwrap();
    let fh = |args: &[&str]| oracle_in(st, &[&["--home", home.to_str().unwrap()], args].concat());
    assert_eq!(fh(&["run", plan]).0, 3);
    assert_eq!(
        fh(&["signal", "order-1", "shipped", "--value", r#""ups""#]).0,
        0
    );
    assert_eq!(
        fh(&["signal", "order-1", "payment", "--value", r#"{"amount":5}"#]).0,
        0
    );
    let home_log = fs::read(home.join("runs/order-1/events.jsonl")).unwrap();
    let out = sb.path().join("store.jsonl");
    let (code, v) = json_in(
        st,
        &[
            "export",
            &id,
            "--out",
            out.to_str().unwrap(),
            "--store",
            &url,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{v}");
    // The same record but for the deadline's wall-clock instants (`timer_set`).
    let kinds = |bytes: &[u8]| -> Vec<String> {
        common::parse_events(bytes)
            .iter()
            .map(|e| e.kind.as_str().to_owned())
            .collect()
    };
    assert_eq!(kinds(&fs::read(&out).unwrap()), kinds(&home_log));
    assert_eq!(
        resumed(&out),
        resumed(&home.join("runs/order-1/events.jsonl"))
    );
    let (code, out, err) = oracle_in(st, &["replay", &id, "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn over_a_store_a_deadline_that_passes_first_gives_the_wait_its_on_timeout_value() {
    let Some(url) = store_url() else { return };
    let sb = Sandbox::new();
    let st = sb.path();
    let plan = late_plan(&sb);
    let (code, out, err) = oracle_in(st, &["submit", plan, "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    let id = out.trim().to_owned();
    common::worker_until_idle(st, &url, &[]);
    let (code, out, err) = oracle_in(st, &["resume", &id, "--wake", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    common::worker_until_idle(st, &url, &[]);
    let row = state(st, &url, &id);
    assert_eq!(row["state"], "suspended", "{row}");
    assert_eq!(row["waiting"]["step"], "shipped", "{row}");
    let (code, v) = signal(
        st,
        &[&id, "shipped", "--value", r#""dhl""#, "--store", &url],
    );
    assert_eq!(code, 0, "{v}");
    common::worker_until_idle(st, &url, &[]);
    assert_eq!(state(st, &url, &id)["state"], "completed");
    let out = sb.path().join("late.jsonl");
    let (code, v) = json_in(
        st,
        &[
            "export",
            &id,
            "--out",
            out.to_str().unwrap(),
            "--store",
            &url,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        done_input(&out),
        json!({"paid": {"amount": 0}, "shipped": "dhl"})
    );
}

#[test]
fn a_literal_schema_types_the_events_value() {
    let sb = Sandbox::new();
    sb.write(
        "typo.plan",
        "plan typo version 1\n\np = wait.event { name: \"p\", schema: { type: \"object\", properties: { amount: { type: \"integer\" } } } }\nd = text.count { text: \"x\" + p.value.amout }\n",
    );
    let (code, _, err) = sb.oracle(&["plan", "check", "typo.plan"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("E0223") && err.contains("did you mean `p.value.amount`"),
        "{err}"
    );
}
