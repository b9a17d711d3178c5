//! Exactly once on a file home (issue 53, item 3), with the real binary: many `oracle run
//! --key K` started at once on one home make one run of K, and every one of them reports that
//! run; several `oracle serve` sweeping one home's schedule start each tick's run once. The
//! key is claimed before anything is created (`oracle_runtime::keys`), so timing decides only
//! which start wins, never how many runs there are.

use crate::common;
use crate::web;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::Home;
use serde_json::Value;

/// A plan of one pure step: a start is a few milliseconds, so the racers overlap.
const PLAN: &str =
    "plan tick version 1\n\ninput n: int = 1\n\ncount = text.count { text: \"tick \" + n }\n";

/// Starts racing on one key in each round.
const STARTERS: usize = 8;
/// Rounds of the racing test, each with a key of its own; more with `ORACLE_KEY_ROUNDS`.
const ROUNDS_ENV: &str = "ORACLE_KEY_ROUNDS";
const ROUNDS_DEFAULT: usize = 50;

/// The runs of `home` by the key their first event records (runs without a key left out).
fn runs_by_recorded_key(home: &Home) -> BTreeMap<String, Vec<String>> {
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(home.path().join("runs")) else {
        return by_key;
    };
    for e in entries.flatten() {
        let id = e.file_name().into_string().unwrap();
        let Ok(bytes) = std::fs::read(e.path().join("events.jsonl")) else {
            continue;
        };
        let events = common::parse_events(&bytes);
        if let Some(k) = events
            .first()
            .and_then(|first| first.payload["key"].as_str())
        {
            by_key.entry(k.to_owned()).or_default().push(id);
        }
    }
    by_key
}

/// `STARTERS` × rounds: in each round, `STARTERS` processes run `oracle run PLAN --key
/// round-N` at once. Every key ends with exactly one run recording it, every starter exits 0
/// naming that run (one as new, the rest as `existing`), and no other run directory is left.
#[test]
fn concurrent_starts_with_one_key_make_one_run_and_all_report_it() {
    let rounds = std::env::var(ROUNDS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ROUNDS_DEFAULT);
    let home = Home::new();
    let plan = common::plan_file(&home, "tick.plan", PLAN);
    let mut reported: BTreeMap<String, String> = BTreeMap::new();
    for round in 0..rounds {
        let key = format!("round-{round}");
        let args = [
            "run",
            plan.as_str(),
            "--key",
            key.as_str(),
            "--durability",
            "none",
            "--json",
        ];
        let children: Vec<Child> = (0..STARTERS)
            .map(|_| {
                home.command(&args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut runs = BTreeSet::new();
        let mut new = 0;
        for child in children {
            let o = child.wait_with_output().unwrap();
            let (out, err) = (
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr),
            );
            assert_eq!(o.status.code(), Some(0), "{key}: {out}{err}");
            let v = common::last_json(&args, &out, &err);
            runs.insert(v["run"].as_str().unwrap().to_owned());
            if v.get("existing").is_none() {
                new += 1;
            }
        }
        assert_eq!(runs.len(), 1, "{key}: the starters reported {runs:?}");
        assert_eq!(new, 1, "{key}: {new} starters said they started the run");
        reported.insert(key, runs.pop_first().unwrap());
    }
    let recorded = runs_by_recorded_key(&home);
    let doubled: Vec<_> = recorded.iter().filter(|(_, r)| r.len() != 1).collect();
    assert!(
        doubled.is_empty(),
        "keys with more than one run: {doubled:?}"
    );
    let once: BTreeMap<String, String> = recorded
        .into_iter()
        .map(|(k, mut r)| (k, r.pop().unwrap()))
        .collect();
    assert_eq!(
        once, reported,
        "each key's one run is the run its starters named"
    );
    let dirs = std::fs::read_dir(home.path().join("runs")).unwrap().count();
    assert_eq!(dirs, rounds, "no start left a run directory behind");
}

/// Servers sweeping one home in the schedule test.
const SERVERS: usize = 3;
/// Ticks of a schedule firing every second the servers must have started before they stop.
const TICKS: usize = 60;
/// How long the schedule test waits for [`TICKS`] ticks at most: a tick a second, with room
/// for servers starting on a loaded machine.
const TICKS_WAIT: Duration = Duration::from_secs(150);

/// `oracle serve` on `home`, killed with the test (web.rs's one way of starting a server).
fn serve(home: &Home) -> web::Killed {
    let mut command = Command::new(env!("CARGO_BIN_EXE_oracle"));
    command
        .arg("--home")
        .arg(home.path())
        .args(["serve", "--listen", "127.0.0.1:0"]);
    web::listening(command).0
}

/// The runs of `home` by the key of their submission (every run a tick started has one,
/// written before the key is let go; its first event may come later).
fn runs_by_submitted_key(home: &Home) -> BTreeMap<String, Vec<String>> {
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(home.path().join("runs")) else {
        return by_key;
    };
    for e in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path().join("submitted.json")) else {
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

/// Three `oracle serve` on one home, one schedule firing every second: once the servers have
/// started [`TICKS`] ticks they stop, and every tick's key has exactly one run (by its
/// submission and by its recorded first event), one second after the last.
#[test]
fn three_servers_firing_one_schedule_start_each_tick_once() {
    let home = Home::new();
    let plan = common::plan_file(&home, "tick.plan", PLAN);
    let (code, _, err) = home.oracle(&[
        "schedule",
        "add",
        "every",
        &plan,
        "--cron",
        "* * * * * *",
        "--overlap",
        "allow",
    ]);
    assert_eq!(code, 0, "{err}");
    let mut servers: Vec<web::Killed> = (0..SERVERS).map(|_| serve(&home)).collect();
    let waited = std::time::Instant::now();
    while runs_by_submitted_key(&home).len() < TICKS && waited.elapsed() < TICKS_WAIT {
        std::thread::sleep(Duration::from_millis(250));
    }
    for s in &mut servers {
        s.stop();
    }
    let submitted = runs_by_submitted_key(&home);
    assert!(
        submitted.len() >= TICKS,
        "{} ticks started",
        submitted.len()
    );
    let doubled: Vec<_> = submitted.iter().filter(|(_, r)| r.len() != 1).collect();
    assert!(doubled.is_empty(), "ticks started twice: {doubled:?}");
    let recorded = runs_by_recorded_key(&home);
    let doubled: Vec<_> = recorded.iter().filter(|(_, r)| r.len() != 1).collect();
    assert!(doubled.is_empty(), "ticks recorded twice: {doubled:?}");
    let mut ticks: Vec<u64> = submitted
        .keys()
        .map(|k| {
            let at = k
                .strip_prefix("schedule:every:")
                .unwrap_or_else(|| panic!("{k}"));
            oracle_runtime::wall::instant_ms(at).unwrap() / 1000
        })
        .collect();
    ticks.sort_unstable();
    for w in ticks.windows(2) {
        assert_eq!(w[1] - w[0], 1, "a tick missing: {ticks:?}");
    }
}
