//! Schedules on a file home end to end (issue 38): `oracle schedule add|list|pause|resume|
//! remove|trigger`, and `oracle serve` firing each tick exactly once however many servers
//! sweep the home (the tick's instant is the run's idempotency key), with the catch-up policy
//! applied after downtime. No test asserts timing: servers run for a while, then the runs are
//! counted per key.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::Sandbox;
use serde_json::Value;

const PLAN: &str =
    "plan tick version 1\n\ninput n: int = 1\n\ncount = text.count { text: \"tick \" + n }\n";

/// How long the servers of a firing test run: several ticks of a schedule firing every second.
const SERVE_MS: u64 = 6_000;

fn serve(sb: &Sandbox) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(sb.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening "), "{line}");
    child
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// Every run of the home by the idempotency key it was started with.
fn runs_by_key(sb: &Sandbox) -> BTreeMap<String, Vec<String>> {
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(sb.path().join(".oracle/runs")) else {
        return by_key;
    };
    for e in entries.flatten() {
        let sub = e.path().join("submitted.json");
        let Ok(text) = std::fs::read_to_string(sub) else {
            continue;
        };
        let v: Value = serde_json::from_str(&text).unwrap();
        if let Some(k) = v["key"].as_str() {
            by_key
                .entry(k.to_owned())
                .or_default()
                .push(e.file_name().into_string().unwrap());
        }
    }
    by_key
}

/// The tick instants (unix seconds) of the runs started, each checked to have one run.
fn ticks_started_once(sb: &Sandbox, name: &str) -> Vec<i64> {
    let mut ticks = Vec::new();
    for (key, runs) in runs_by_key(sb) {
        assert_eq!(runs.len(), 1, "key {key} started {runs:?}");
        let at = key
            .strip_prefix(&format!("schedule:{name}:"))
            .unwrap_or_else(|| panic!("{key}"));
        let ms = oracle_runtime::wall::instant_ms(at).unwrap();
        ticks.push(i64::try_from(ms / 1000).unwrap());
    }
    ticks.sort();
    ticks
}

#[test]
fn schedules_are_added_listed_paused_resumed_triggered_and_removed() {
    let sb = Sandbox::new();
    sb.write("tick.plan", PLAN);
    let (code, v) = sb.json(&[
        "schedule",
        "add",
        "nightly",
        "tick.plan",
        "--cron",
        "0 6 * * *",
        "--timezone",
        "Europe/Berlin",
        "--input",
        "n=3",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["timezone"], "Europe/Berlin");
    assert_eq!(v["overlap"], "skip");
    assert_eq!(v["catch_up"], "none");
    // Next fire times in the zone: 06:00 Berlin is 05:00Z in winter, 04:00Z in summer.
    let (code, v) = sb.json(&["schedule", "list", "--at", "2026-01-10T12:00:00Z", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["schedules"][0]["next"], "2026-01-11T05:00:00Z");
    let (_, v) = sb.json(&["schedule", "list", "--at", "2026-07-10T12:00:00Z", "--json"]);
    assert_eq!(v["schedules"][0]["next"], "2026-07-11T04:00:00Z");
    let (code, out, _) = sb.oracle(&["schedule", "list", "--at", "2026-01-10T12:00:00Z"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("nightly") && out.contains("2026-01-11T05:00:00Z"),
        "{out}"
    );

    let (code, v) = sb.json(&["schedule", "pause", "nightly", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["paused"], true);
    assert_eq!(v["next"], Value::Null);
    let (code, out, _) = sb.oracle(&["schedule", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains("paused"), "{out}");
    let (code, v) = sb.json(&["schedule", "resume", "nightly", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["paused"], false);
    assert!(v["next"].is_string(), "{v}");

    // A trigger runs the plan now, as `oracle run` would, under a trigger key.
    let (code, v) = sb.json(&["schedule", "trigger", "nightly", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed");
    let run = v["run"].as_str().unwrap().to_owned();
    let started = sb.events(".oracle", &run)[0].clone();
    let key = serde_json::to_value(&started).unwrap()["payload"]["key"].clone();
    assert!(
        key.as_str()
            .unwrap()
            .starts_with("schedule:nightly:trigger:"),
        "{key}"
    );

    // Refusals: each with its code, nothing written.
    let (code, v) = sb.json(&[
        "schedule",
        "add",
        "nightly",
        "tick.plan",
        "--cron",
        "0 6 * * *",
        "--json",
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "schedule_exists");
    let (code, v) = sb.json(&[
        "schedule",
        "add",
        "bad",
        "tick.plan",
        "--cron",
        "61 * * * *",
        "--json",
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "schedule_invalid");
    let (code, v) = sb.json(&[
        "schedule",
        "add",
        "bad",
        "tick.plan",
        "--cron",
        "0 6 * * *",
        "--timezone",
        "Mars/Base",
        "--json",
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "schedule_invalid");
    let (code, v) = sb.json(&["schedule", "pause", "nope", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "not_found");

    let (code, _, err) = sb.oracle(&["schedule", "remove", "nightly"]);
    assert_eq!(code, 0, "{err}");
    let (_, v) = sb.json(&["schedule", "list", "--json"]);
    assert_eq!(v["schedules"], serde_json::json!([]));
    // Its run stays.
    let (code, _, err) = sb.oracle(&["verify", &run]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn two_servers_on_one_home_start_one_run_per_tick() {
    let sb = Sandbox::new();
    sb.write("tick.plan", PLAN);
    let (code, _, err) = sb.oracle(&[
        "schedule",
        "add",
        "every",
        "tick.plan",
        "--cron",
        "* * * * * *",
        "--overlap",
        "allow",
    ]);
    assert_eq!(code, 0, "{err}");
    let (a, b) = (serve(&sb), serve(&sb));
    std::thread::sleep(Duration::from_millis(SERVE_MS));
    stop(a);
    stop(b);
    let ticks = ticks_started_once(&sb, "every");
    assert!(ticks.len() >= 3, "{ticks:?}");
    // One second apart, none missing between the first and the last.
    for w in ticks.windows(2) {
        assert_eq!(w[1] - w[0], 1, "{ticks:?}");
    }
    let log = std::fs::read_to_string(sb.path().join(".oracle/serve-resume.log")).unwrap();
    assert!(log.contains("schedule every tick "), "{log}");
}

/// A plan slower than its schedule's tick: it sleeps on a timer (woken by the server's timer
/// wheel) for longer than a second.
const SLOW_PLAN: &str = "plan slow version 1\n\nnap = sleep { for: \"2s\" }\n";

/// Runs one server for a while on a home with a schedule of [`SLOW_PLAN`] firing every second
/// under `overlap` (and `--catch-up all`): the ticks it started, and its resume log.
fn overlapping(overlap: &str) -> (Vec<i64>, String) {
    let sb = Sandbox::new();
    sb.write("slow.plan", SLOW_PLAN);
    let (code, _, err) = sb.oracle(&[
        "schedule",
        "add",
        "slow",
        "slow.plan",
        "--cron",
        "* * * * * *",
        "--overlap",
        overlap,
        "--catch-up",
        "all",
    ]);
    assert_eq!(code, 0, "{err}");
    let server = serve(&sb);
    std::thread::sleep(Duration::from_millis(SERVE_MS + 2_000));
    stop(server);
    let log = std::fs::read_to_string(sb.path().join(".oracle/serve-resume.log")).unwrap();
    (ticks_started_once(&sb, "slow"), log)
}

#[test]
fn overlap_skip_drops_the_ticks_while_the_previous_run_sleeps() {
    let (ticks, log) = overlapping("skip");
    assert!(ticks.len() >= 2, "{ticks:?}\n{log}");
    // Each run sleeps 2 s, so the next one starts at least 2 ticks later; the ticks between
    // were dropped, not started late.
    for w in ticks.windows(2) {
        assert!(w[1] - w[0] >= 2, "{ticks:?}\n{log}");
    }
    assert!(log.contains(": dropped (overlap)"), "{log}");
    assert!(log.contains(": completed ("), "the wheel woke a run: {log}");
}

#[test]
fn overlap_queue_starts_every_tick_after_the_previous_run_ends() {
    let (ticks, log) = overlapping("queue");
    assert!(ticks.len() >= 2, "{ticks:?}\n{log}");
    // No tick dropped: the ticks started are consecutive seconds from the first...
    for w in ticks.windows(2) {
        assert_eq!(w[1] - w[0], 1, "{ticks:?}\n{log}");
    }
    assert!(!log.contains("dropped"), "{log}");
    // ...but they wait for each other: far fewer runs than the seconds served, each started
    // only once the one before completed.
    let served_s = (SERVE_MS + 2_000) / 1000;
    assert!((ticks.len() as u64) < served_s * 2 / 3, "{ticks:?}\n{log}");
    let started: Vec<usize> = log
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(": started "))
        .map(|(i, _)| i)
        .collect();
    let woken: Vec<usize> = log
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("wake ") && l.contains(": completed ("))
        .map(|(i, _)| i)
        .collect();
    for (n, pair) in started.windows(2).enumerate() {
        assert!(
            woken.get(n).is_some_and(|&w| pair[0] < w && w < pair[1]),
            "run {n} completed before the next started: {log}"
        );
    }
}

/// Adds a schedule firing every second under `catch_up`, as if added `ago_s` seconds ago while
/// no server ran, then runs one server for a while: the ticks it started.
fn after_downtime(catch_up: &str, ago_s: u64) -> (Vec<i64>, i64) {
    let sb = Sandbox::new();
    sb.write("tick.plan", PLAN);
    let (code, _, err) = sb.oracle(&[
        "schedule",
        "add",
        "every",
        "tick.plan",
        "--cron",
        "* * * * * *",
        "--overlap",
        "allow",
        "--catch-up",
        catch_up,
    ]);
    assert_eq!(code, 0, "{err}");
    // The downtime: the schedule's start moved back, as a server down since then would find it.
    let path = sb.path().join(".oracle/schedules/every.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let since = v["since_ms"].as_u64().unwrap() - ago_s * 1000;
    v["since_ms"] = since.into();
    std::fs::write(&path, v.to_string()).unwrap();
    let server = serve(&sb);
    std::thread::sleep(Duration::from_millis(SERVE_MS / 2));
    stop(server);
    let since_s = i64::try_from(since / 1000).unwrap();
    (ticks_started_once(&sb, "every"), since_s)
}

/// How far past a tick the server finds it still on time (`LATE_AFTER_MS`), in seconds.
const LATE_S: i64 = 5;
/// The downtime of the catch-up tests: far longer than a tick is on time.
const DOWNTIME_S: u64 = 30;

#[test]
fn after_downtime_catch_up_all_fires_every_missed_tick() {
    let (ticks, since) = after_downtime("all", DOWNTIME_S);
    // Every tick from the first after the schedule's start, none missing.
    assert_eq!(ticks.first().copied(), Some(since + 1), "{ticks:?}");
    for w in ticks.windows(2) {
        assert_eq!(w[1] - w[0], 1, "{ticks:?}");
    }
    assert!(ticks.len() as u64 > DOWNTIME_S, "{ticks:?}");
}

#[test]
fn after_downtime_catch_up_last_fires_the_latest_missed_tick_once() {
    let (ticks, since) = after_downtime("last", DOWNTIME_S);
    let first = *ticks.first().expect("a tick");
    let last = *ticks.last().expect("a tick");
    // One late tick, then only the ticks on time: far fewer than the downtime's.
    assert!(first > since + 1, "{ticks:?}");
    assert!(
        first >= last - (SERVE_MS as i64 / 1000) - LATE_S - 2,
        "{ticks:?}"
    );
    assert!((ticks.len() as u64) < DOWNTIME_S / 2, "{ticks:?}");
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn after_downtime_catch_up_none_drops_the_missed_ticks() {
    let (ticks, since) = after_downtime("none", DOWNTIME_S);
    let first = *ticks.first().expect("a tick on time");
    // Nothing from the downtime's start: only ticks found within LATE_S of their instant.
    assert!(
        first > since + (DOWNTIME_S as i64) - LATE_S - 2,
        "{ticks:?}"
    );
}

/// A fresh PostgreSQL database with the schema, or `None` (skip) without PostgreSQL.
fn store_url(sb: &Sandbox) -> Option<String> {
    static DB: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let cluster = oracle_pg::cluster::shared()?;
    let n = DB.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let url = cluster
        .database(&format!("sched_{}_{n}", std::process::id()))
        .unwrap();
    let (code, out, err) = sb.oracle(&["store", "init", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    Some(url)
}

fn spawn(sb: &Sandbox, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(args)
        .current_dir(sb.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The store's runs by the idempotency key their submission holds (read from the run's files,
/// not from the key index, so a tick started twice would show as two runs).
fn store_ticks_started_once(url: &str, name: &str) -> Vec<i64> {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let rows = c
        .query(
            "SELECT run, bytes FROM run_files WHERE path = 'submitted.json'",
            &[],
        )
        .unwrap();
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in rows {
        let bytes: Vec<u8> = r.get(1);
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        if let Some(k) = v["key"].as_str() {
            by_key.entry(k.to_owned()).or_default().push(r.get(0));
        }
    }
    let mut ticks = Vec::new();
    for (key, runs) in by_key {
        assert_eq!(runs.len(), 1, "key {key} started {runs:?}");
        let Some(at) = key.strip_prefix(&format!("schedule:{name}:")) else {
            continue;
        };
        let ms = oracle_runtime::wall::instant_ms(at).unwrap();
        ticks.push(i64::try_from(ms / 1000).unwrap());
    }
    ticks.sort();
    ticks
}

/// How long the firers of the store test run: ten ticks of a schedule firing every second.
const STORE_SERVE_MS: u64 = 10_000;

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn two_workers_and_a_server_on_one_store_start_one_run_per_tick() {
    let sb = Sandbox::new();
    let Some(url) = store_url(&sb) else {
        return;
    };
    sb.write("tick.plan", PLAN);
    let (code, v) = sb.json(&[
        "schedule",
        "add",
        "every",
        "tick.plan",
        "--cron",
        "* * * * * *",
        "--overlap",
        "allow",
        "--store",
        &url,
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = sb.json(&["schedule", "list", "--store", &url, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["schedules"][0]["name"], "every");
    let worker = ["worker", "--store", &url, "--poll-ms", "100"];
    let (w1, w2) = (spawn(&sb, &worker), spawn(&sb, &worker));
    let server = spawn(&sb, &["serve", "--store", &url, "--listen", "127.0.0.1:0"]);
    std::thread::sleep(Duration::from_millis(STORE_SERVE_MS));
    // Paused: the firers start nothing more.
    let (code, v) = sb.json(&["schedule", "pause", "every", "--store", &url, "--json"]);
    assert_eq!(code, 0, "{v}");
    for c in [w1, w2, server] {
        stop(c);
    }
    let ticks = store_ticks_started_once(&url, "every");
    assert!(ticks.len() >= 5, "{ticks:?}");
    for w in ticks.windows(2) {
        assert_eq!(w[1] - w[0], 1, "{ticks:?}");
    }
    // The workers drove them: `oracle runs --store` lists them completed.
    let (code, out, err) = sb.oracle(&["runs", "--store", &url]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("completed"), "{out}");
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_store_firer_restarted_after_downtime_applies_the_catch_up_policy() {
    let sb = Sandbox::new();
    let Some(url) = store_url(&sb) else {
        return;
    };
    sb.write("tick.plan", PLAN);
    for (name, policy) in [("all", "all"), ("none", "none")] {
        let (code, v) = sb.json(&[
            "schedule",
            "add",
            name,
            "tick.plan",
            "--cron",
            "* * * * * *",
            "--overlap",
            "allow",
            "--catch-up",
            policy,
            "--store",
            &url,
            "--json",
        ]);
        assert_eq!(code, 0, "{v}");
    }
    // The downtime: both schedules' start moved back, as a firer down since then finds them.
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let back = i64::try_from(DOWNTIME_S * 1000).unwrap();
    c.execute(
        "UPDATE schedules SET spec = jsonb_set(spec::jsonb, '{since_ms}',
           to_jsonb((spec::jsonb->>'since_ms')::bigint - $1))::text",
        &[&back],
    )
    .unwrap();
    let since: i64 = c
        .query_one(
            "SELECT (spec::jsonb->>'since_ms')::bigint / 1000 FROM schedules WHERE name = 'all'",
            &[],
        )
        .unwrap()
        .get(0);
    let w = spawn(&sb, &["worker", "--store", &url, "--poll-ms", "100"]);
    std::thread::sleep(Duration::from_millis(SERVE_MS / 2));
    stop(w);
    let all = store_ticks_started_once(&url, "all");
    assert_eq!(all.first().copied(), Some(since + 1), "{all:?}");
    for w in all.windows(2) {
        assert_eq!(w[1] - w[0], 1, "{all:?}");
    }
    let none = store_ticks_started_once(&url, "none");
    let first = *none.first().expect("a tick on time");
    assert!(first > since + (DOWNTIME_S as i64) - LATE_S - 2, "{none:?}");
}

/// A fresh store with run `nap-1` submitted: a plan that sleeps `nap` (a duration), then
/// records when it woke; `None` (skip) without PostgreSQL.
fn submit_nap(sb: &Sandbox, nap: &str) -> Option<String> {
    let url = store_url(sb)?;
    sb.write(
        "nap.plan",
        &format!(
            "plan nap version 1\n\nnap = sleep {{ for: \"{nap}\" }}\ndone = text.count {{ text: nap.fired }}\n"
        ),
    );
    let (code, out, err) = sb.oracle(&["submit", "nap.plan", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    Some(url)
}

#[test]
fn workers_wake_a_store_run_sleeping_on_a_timer_once() {
    let sb = Sandbox::new();
    let Some(url) = submit_nap(&sb, "2s") else {
        return;
    };
    let worker = ["worker", "--store", &url, "--poll-ms", "100"];
    let (w1, w2) = (spawn(&sb, &worker), spawn(&sb, &worker));
    let start = std::time::Instant::now();
    let mut status = String::new();
    while start.elapsed() < Duration::from_secs(60) {
        let (_, v) = sb.json(&["runs", "--store", &url, "--json"]);
        status = v["status"].as_str().unwrap_or_default().to_owned();
        if status == "completed" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop(w1);
    stop(w2);
    assert_eq!(status, "completed");
    let (code, out, err) = sb.oracle(&["log", "nap-1", "--store", &url, "--kind", "timer_fired"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("timer_fired").count(), 1, "{out}");
    // One wake was queued and applied, none refused.
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let outcomes: Vec<String> = c
        .query("SELECT outcome FROM signals WHERE run = 'nap-1'", &[])
        .unwrap()
        .iter()
        .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default())
        .collect();
    assert_eq!(outcomes, vec!["applied".to_owned()], "{outcomes:?}");
}

/// One API request: status and the body (JSON, or `Value::String` of the text when not JSON).
fn call(base: &str, method: &str, path: &str, token: &str, body: Option<&Value>) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut b = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .header("Authorization", format!("Bearer {token}"));
    let sent = match body {
        Some(v) => {
            b = b.header("Content-Type", "application/json");
            agent.run(b.body(v.to_string().into_bytes()).unwrap())
        }
        None => agent.run(b.body(()).unwrap()),
    };
    let mut r = sent.unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[test]
fn the_api_adds_lists_pauses_triggers_and_deletes_schedules() {
    let sb = Sandbox::new();
    let (code, token, err) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--root",
            ".",
            "--read-open",
        ])
        .current_dir(sb.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line.trim().strip_prefix("listening ").unwrap().to_owned();
    let body = serde_json::json!({
        "name": "nightly", "plan": PLAN, "cron": "0 6 * * *", "timezone": "Europe/Berlin",
        "inputs": {"n": "4"},
    });
    let (status, v) = call(&base, "POST", "/api/v1/schedules", &token, Some(&body));
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["name"], "nightly");
    assert!(v["next"].is_string(), "{v}");
    let (status, v) = call(&base, "POST", "/api/v1/schedules", &token, Some(&body));
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"]["code"], "schedule_exists");
    let (status, v) = call(&base, "GET", "/api/v1/schedules", &token, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["schedules"][0]["cron"], "0 6 * * *");
    let (status, v) = call(
        &base,
        "POST",
        "/api/v1/schedules/nightly/pause",
        &token,
        None,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["paused"], true);
    let (status, v) = call(
        &base,
        "POST",
        "/api/v1/schedules/nightly/resume",
        &token,
        None,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["paused"], false);
    let (status, v) = call(
        &base,
        "POST",
        "/api/v1/schedules/nightly/trigger",
        &token,
        None,
    );
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    // The page lists it with its next fire time.
    let (status, page) = call(&base, "GET", "/schedules", &token, None);
    assert_eq!(status, 200);
    let page = page.as_str().unwrap_or_default().to_owned();
    assert!(
        page.contains("<th scope=\"row\">nightly</th>") && page.contains("Europe/Berlin"),
        "{page}"
    );
    let (status, v) = call(&base, "DELETE", "/api/v1/schedules/nightly", &token, None);
    assert_eq!(status, 200, "{v}");
    let (status, v) = call(
        &base,
        "POST",
        "/api/v1/schedules/nightly/pause",
        &token,
        None,
    );
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["code"], "not_found");
    // The triggered run completes with the schedule's input.
    let start = std::time::Instant::now();
    let mut done = false;
    while start.elapsed() < Duration::from_secs(60) && !done {
        let (_, v) = call(&base, "GET", &format!("/api/v1/runs/{run}"), &token, None);
        done = v["status"] == "completed";
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(child);
    assert!(done, "the triggered run did not complete");
}

/// The outcomes of the signals sent to `run`, in the order they were sent.
fn signal_outcomes(url: &str, run: &str) -> Vec<Option<String>> {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.query(
        "SELECT outcome FROM signals WHERE run = $1 ORDER BY id",
        &[&run],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// `oracle resume RUN --wake --store URL` over a store: a wake before the timer is due is
/// refused by the worker that claims it (the run still sleeps, nothing fired); with `--force`
/// the worker fires the timer once (`fired_ms` before `due_ms`) and the run completes.
#[test]
fn resume_wake_over_a_store_is_carried_out_by_a_worker() {
    let sb = Sandbox::new();
    let Some(url) = submit_nap(&sb, "2d") else {
        return;
    };
    common::worker_until_idle(sb.path(), &url, &[]);
    let status = |sb: &Sandbox| {
        let (_, v) = sb.json(&["runs", "--store", &url, "--json"]);
        v["status"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(status(&sb), "suspended");

    let (code, out, err) = sb.oracle(&["resume", "nap-1", "--wake", "--store", &url]);
    assert_eq!(code, 0, "the wake is queued: {out}{err}");
    common::worker_until_idle(sb.path(), &url, &[]);
    assert_eq!(status(&sb), "suspended", "not due: the run still sleeps");
    let outcomes = signal_outcomes(&url, "nap-1");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert!(
        outcomes[0].is_some() && outcomes[0].as_deref() != Some("applied"),
        "{outcomes:?}"
    );

    let (code, out, err) = sb.oracle(&["resume", "nap-1", "--wake", "--force", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    common::worker_until_idle(sb.path(), &url, &[]);
    assert_eq!(status(&sb), "completed");
    let outcomes = signal_outcomes(&url, "nap-1");
    assert_eq!(
        outcomes.last(),
        Some(&Some("applied".to_owned())),
        "{outcomes:?}"
    );
    let (code, out, err) = sb.oracle(&["log", "nap-1", "--store", &url, "--kind", "timer_fired"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("timer_fired").count(), 1, "{out}");
}

/// `oracle schedule trigger NAME --store URL` submits one run now under a trigger key (the
/// schedule's plan and inputs), which a worker drives to completion.
#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn schedule_trigger_over_a_store_submits_a_run_a_worker_completes() {
    let sb = Sandbox::new();
    let Some(url) = store_url(&sb) else {
        return;
    };
    sb.write("tick.plan", PLAN);
    let (code, v) = sb.json(&[
        "schedule",
        "add",
        "nightly",
        "tick.plan",
        "--cron",
        "0 6 * * *",
        "--input",
        "n=3",
        "--store",
        &url,
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = sb.json(&["schedule", "trigger", "nightly", "--store", &url, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "submitted", "{v}");
    assert_eq!(v["existing"], false, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    common::worker_until_idle(sb.path(), &url, &[]);
    let (code, v) = sb.json(&["runs", "--store", &url, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["run"], run.as_str(), "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    // The run was started from the schedule's plan and input, under a trigger key.
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let rows = c
        .query(
            "SELECT bytes FROM run_files WHERE run = $1 AND path = 'submitted.json'",
            &[&run],
        )
        .unwrap();
    assert_eq!(rows.len(), 1);
    let submitted: Value = serde_json::from_slice(&rows[0].get::<_, Vec<u8>>(0)).unwrap();
    let key = submitted["key"].as_str().unwrap_or_default();
    assert!(key.starts_with("schedule:nightly:trigger:"), "{submitted}");
    let (code, out, err) = sb.oracle(&[
        "log",
        &run,
        "--store",
        &url,
        "--kind",
        "tool_called",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tick 3"), "{out}");
}
