//! Real-time adjudication expiry end to end (issue 38, item 3), with the real `oracle` binary:
//! `--adjudication-expiry 2s` records each request's due instant (`expires_ms`, the clock read
//! once when it was opened) and indexes it in the home (`timers/<due>+<run>`); `oracle serve`
//! expires it when due with nobody sweeping, exactly once (`adjudications_expired` with
//! `fired_ms`), and a verdict that lands first wins (the later expiry writes nothing), in both
//! orders. Replay reads the recorded instants and never the clock: the log stays byte for byte
//! what it was. No test asserts timing: each polls with a generous bound.

use crate::common;
use crate::web;

use std::time::{Duration, Instant};

use common::Home;
use serde_json::Value;

const RUN: &str = "adjudication-1";
/// The fixture's conflict is recorded by event 15 (`referral`).
const HANDLE: &str = "adj-15";
/// Longest wait for the server to act on a due entry.
const WAIT_MS_MAX: u64 = 60_000;

/// Starts `oracle serve` on the home, on a free port; returns once it listens.
fn serve(h: &Home) -> web::Killed {
    web::listening(h.command(&["serve", "--listen", "127.0.0.1:0"])).0
}

/// The server's resume log once it holds a line containing `needle` (or panics at the bound).
fn resume_log_with(h: &Home, needle: &str) -> String {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(WAIT_MS_MAX) {
        let log = std::fs::read_to_string(h.path().join("serve-resume.log")).unwrap_or_default();
        if log.contains(needle) {
            return log;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the server never logged `{needle}`");
}

fn of_kind(h: &Home, kind: &str) -> Vec<Value> {
    h.events(RUN)
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// The request the run opened, from `memory.assert`'s recorded output.
fn request(h: &Home) -> Value {
    h.events(RUN)
        .into_iter()
        .find_map(|e| {
            let a = &e["payload"]["output"]["adjudication"];
            a.is_object().then(|| a.clone())
        })
        .expect("the run opened a request")
}

fn index(h: &Home) -> Vec<String> {
    std::fs::read_dir(h.path().join("timers"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_real_time_expiry_is_recorded_in_the_request_and_the_settings() {
    let h = Home::new();
    h.start(&["--adjudication-expiry", "2s"]);
    let first = &h.events(RUN)[0];
    let memory = &first["payload"]["domains"]["memory"];
    assert_eq!(memory["expiry_ms"], 2_000, "{first}");
    assert!(memory["expiry_ticks"].is_null(), "{first}");
    let r = request(&h);
    assert_eq!(r["handle"], HANDLE);
    assert!(r["expires_at"].is_null(), "{r}");
    let due = r["expires_ms"].as_u64().expect("a due instant in unix ms");
    assert_eq!(index(&h), vec![format!("{due:020}+{RUN}")]);
    // `oracle adjudications` shows the instant it expires (RFC 3339), not `never`; `--json`
    // gives it in unix ms beside the tick.
    let (code, out, err) = h.oracle(&["adjudications", RUN]);
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with(HANDLE))
        .unwrap_or_else(|| panic!("{out}"));
    let instant = oracle_runtime::wall::rfc3339(due);
    assert!(row.contains(&instant), "{row}");
    assert!(!row.contains("never"), "{row}");
    let listed = h.adjudications(RUN, &[]);
    assert_eq!(listed[0]["expires_ms"], due, "{listed:?}");
    // A bad duration is refused before anything starts.
    let (code, _, err) = h.oracle(&[
        "run",
        common::ADJUDICATION_PLAN,
        "--adjudication-expiry",
        "soon",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--adjudication-expiry"), "{err}");
}

#[test]
fn the_server_expires_a_due_request_once_with_nobody_sweeping() {
    let h = Home::new();
    h.start(&["--adjudication-expiry", "2s"]);
    let due = request(&h)["expires_ms"].as_u64().unwrap();
    let mut server = serve(&h);
    let log = resume_log_with(&h, &format!("resume {RUN} after the expiry"));
    server.stop();
    assert!(
        log.contains(&format!("expire {RUN} (adjudication due")),
        "{log}"
    );
    assert!(log.contains(&format!("expired [{HANDLE}]")), "{log}");
    let expired = of_kind(&h, "adjudications_expired");
    assert_eq!(expired.len(), 1, "exactly once: {expired:?}");
    let p = &expired[0]["payload"];
    assert!(p["fired_ms"].as_u64().unwrap() >= due, "{p}");
    assert_eq!(p["expired"][0]["handle"], HANDLE);
    assert_eq!(p["expired"][0]["expires_ms"], due);
    // The expiry's semantics: both claims contested; the run, woken, still waits on the line.
    assert_eq!(h.allergy(RUN, &[])["belief"]["status"], "contested");
    let (code, out, _) = h.oracle(&["runs"]);
    assert_eq!(code, 0);
    assert!(out.contains("waits on belief patient-17/allergy"), "{out}");
    assert!(index(&h).is_empty(), "{:?}", index(&h));
    // A verdict after the expiry is refused (exit 7) and writes nothing.
    let before = std::fs::read(h.log(RUN)).unwrap();
    let (code, _, err) = h.affirm(RUN, HANDLE, &[]);
    assert_eq!(code, 7, "{err}");
    assert_eq!(std::fs::read(h.log(RUN)).unwrap(), before);
    // Replay is offline: the same bytes, no clock read, no wait.
    h.replays_and_verifies(RUN, "suspended");
    assert_eq!(std::fs::read(h.log(RUN)).unwrap(), before);
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_verdict_before_the_due_instant_wins_and_the_later_expiry_writes_nothing() {
    let h = Home::new();
    h.start(&["--adjudication-expiry", "2s"]);
    let (code, out, err) = h.oracle(&[
        "adjudicate",
        RUN,
        HANDLE,
        "--verdict",
        "affirm",
        "--evidence",
        "external_first_hand",
        "--resume",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let before = std::fs::read(h.log(RUN)).unwrap();
    // The entry indexed at the start is still there: the server fires it once due, and finds
    // nothing pending.
    assert_eq!(index(&h).len(), 1);
    let mut server = serve(&h);
    let log = resume_log_with(&h, &format!("expire {RUN}"));
    server.stop();
    assert!(log.contains("expired []"), "{log}");
    assert!(!log.contains("after the expiry"), "{log}");
    assert!(of_kind(&h, "adjudications_expired").is_empty());
    assert_eq!(std::fs::read(h.log(RUN)).unwrap(), before);
    assert!(index(&h).is_empty());
    h.replays_and_verifies(RUN, "completed");
    assert_eq!(std::fs::read(h.log(RUN)).unwrap(), before);
}

/// A fresh store (its own database on the shared throwaway cluster); `None` (skip, loudly)
/// without PostgreSQL, unless ORACLE_REQUIRE_POSTGRES is set.
fn store_url() -> Option<String> {
    static DB: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let cluster = oracle_pg::cluster::shared()?;
    let n = DB.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let url = cluster
        .database(&format!("expiry_{}_{n}", std::process::id()))
        .unwrap();
    let h = Home::new();
    let (code, out, err) = h.oracle(&["store", "init", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    Some(url)
}

/// The store's events of `kind` for the run, as `oracle log --store --json` shows them.
/// `None` while the store has no log for it yet (no worker drove it so far).
fn store_events(h: &Home, url: &str, kind: &str) -> Option<Vec<Value>> {
    let (code, out, _) = h.oracle(&["log", RUN, "--store", url, "--json", "--kind", kind]);
    (code == 0).then(|| {
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    })
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn two_workers_expire_a_store_runs_due_request_exactly_once() {
    let Some(url) = store_url() else {
        return;
    };
    let h = Home::new();
    let (code, out, err) = h.oracle(&[
        "submit",
        common::ADJUDICATION_PLAN,
        "--store",
        &url,
        "--adjudication-expiry",
        "2s",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let worker = ["worker", "--store", &url, "--poll-ms", "100"];
    let spawn = || {
        let mut c = h.command(&worker);
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        web::Killed(c.spawn().unwrap())
    };
    let (mut w1, mut w2) = (spawn(), spawn());
    web::wait_until("the workers to expire the request", || {
        store_events(&h, &url, "adjudications_expired").is_some_and(|e| !e.is_empty())
    });
    // Both wheels keep turning for a while: a second expiry would show.
    std::thread::sleep(Duration::from_millis(1_500));
    w1.stop();
    w2.stop();
    let expired = store_events(&h, &url, "adjudications_expired").unwrap();
    assert_eq!(expired.len(), 1, "exactly once: {expired:?}");
    let opened = store_events(&h, &url, "tool_returned")
        .unwrap()
        .into_iter()
        .find_map(|e| {
            let a = &e["payload"]["output"]["adjudication"];
            a.is_object().then(|| a.clone())
        })
        .expect("the run opened a request");
    let due = opened["expires_ms"].as_u64().expect("a real-time request");
    // What a file home's server writes (`expire_due`): the tick after the log's last, the
    // request with its due instant, and when it fired.
    let p = &expired[0]["payload"];
    assert!(p["fired_ms"].as_u64().unwrap() >= due, "{p}");
    assert_eq!(p["now"], expired[0]["time"], "{p}");
    let entries = p["expired"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{p}");
    assert_eq!(entries[0]["handle"], HANDLE);
    assert_eq!(entries[0]["expires_ms"], due);
    assert_eq!(entries[0]["expires_at"], p["now"]);
    // The run, resumed after the expiry by the worker that claimed it, waits on the
    // contested line; the store no longer lists an expiry for it.
    let (code, v) = h.json(&["runs", "--store", &url, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "suspended", "{v}");
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let left: Option<i64> = c
        .query_one("SELECT expire_at_ms FROM runs WHERE id = $1", &[&RUN])
        .unwrap()
        .get(0);
    assert_eq!(left, None);
}

#[test]
fn oracle_sweep_expires_real_time_requests_whose_instant_has_passed() {
    // Not yet due: nothing written.
    let h = Home::new();
    h.start(&["--adjudication-expiry", "48h"]);
    let before = std::fs::read(h.log(RUN)).unwrap();
    let (code, v) = h.json(&["sweep", RUN, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["expired"], 0, "{v}");
    assert_eq!(std::fs::read(h.log(RUN)).unwrap(), before);
    // Due: one sweep expires it, with the instant it read; a second writes nothing.
    let h = Home::new();
    h.start(&["--adjudication-expiry", "1s"]);
    let due = request(&h)["expires_ms"].as_u64().unwrap();
    web::wait_until("the request's due instant", || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        now > u128::from(due)
    });
    let (code, v) = h.json(&["sweep", RUN, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["expired"], 1, "{v}");
    assert_eq!(v["handles"][0], HANDLE, "{v}");
    let expired = of_kind(&h, "adjudications_expired");
    assert_eq!(expired.len(), 1, "{expired:?}");
    let p = &expired[0]["payload"];
    assert!(p["fired_ms"].as_u64().unwrap() >= due, "{p}");
    assert_eq!(p["expired"][0]["expires_ms"], due);
    let (code, v) = h.json(&["sweep", RUN, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["expired"], 0, "{v}");
    assert_eq!(of_kind(&h, "adjudications_expired").len(), 1);
    h.replays_and_verifies(RUN, "suspended");
}
