//! Named queues on a file home (`oracle queue set`, `oracle run --queue`): runs of a queue of
//! concurrency 1 never overlap and start by priority; partitions take turns; a queued run is
//! listed `queued` with its position; waiting changes nothing a run records; and every bad
//! queue, priority or partition is refused as the API refuses it.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{self, Home};

/// Each run appends `start NAME` and `end NAME` to the trace around its command.
const PLAN: &str = "plan q version 1
grant proc:exec:sh

input name: string = \"x\"
input trace: string = \"trace\"
input cmd: string = \"true\"

s = proc.exec { program: \"sh\", args: [\"-c\", \"echo start \" + name + \" >> \" + trace + \"; \" + cmd + \"; echo end \" + name + \" >> \" + trace] }
";

/// How long a test waits for what a background `oracle run` does before failing.
const WAIT_MS: u64 = 60_000;

fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_millis(WAIT_MS),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn trace(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `oracle run PLAN --queue q --input name=NAME ...` started in the background.
fn spawn(home: &Home, plan: &str, trace: &Path, name: &str, extra: &[&str]) -> Child {
    let (n, t) = (format!("name={name}"), format!("trace={}", trace.display()));
    let mut args = vec!["run", plan, "--queue", "q", "--input", &n, "--input", &t];
    args.extend_from_slice(extra);
    home.command(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn waiting(home: &Home) -> u64 {
    let (_, rows) = home.json_lines(&["queue", "list", "--json"]);
    rows.first()
        .and_then(|q| q["waiting"].as_u64())
        .unwrap_or(0)
}

fn blocker(home: &Home, plan: &str, trace: &Path, go: &Path) -> Child {
    let cmd = format!("cmd=while [ ! -f {} ]; do sleep 0.02; done", go.display());
    spawn(home, plan, trace, "blocker", &["--input", &cmd])
}

#[test]
fn queue_of_one_runs_never_overlap_and_go_by_priority() {
    let home = Home::new();
    let plan = common::plan_file(&home, "q.plan", PLAN);
    common::run_ok(&home, &["queue", "set", "q", "--concurrency", "1"]);
    let (t, go) = (home.path().join("trace"), home.path().join("go"));
    let mut first = blocker(&home, &plan, &t, &go);
    until("the first run to start", || trace(&t).len() == 1);
    let mut low = spawn(&home, &plan, &t, "low", &["--priority", "1"]);
    until("the low run to wait", || waiting(&home) == 1);
    let mut high = spawn(&home, &plan, &t, "high", &["--priority", "9"]);
    until("the high run to wait", || waiting(&home) == 2);
    // Both listed `queued`, the higher first.
    let (code, rows) = home.json_lines(&["runs", "--json", "--status", "queued"]);
    assert_eq!(code, 0);
    let places: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["queue"]["priority"].as_u64().unwrap(),
                r["queue"]["position"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(places.len(), 2, "{rows:?}");
    assert!(
        places.contains(&(9, 1)) && places.contains(&(1, 2)),
        "{rows:?}"
    );
    let (_, text, _) = home.oracle(&["runs"]);
    assert!(
        text.contains("queued") && text.contains("position 1 in queue q"),
        "{text}"
    );
    std::fs::write(&go, "").unwrap();
    for c in [&mut first, &mut low, &mut high] {
        assert!(c.wait().unwrap().success());
    }
    let want = [
        "start blocker",
        "end blocker",
        "start high",
        "end high",
        "start low",
        "end low",
    ];
    assert_eq!(trace(&t), want);
    let (_, rows) = home.json_lines(&["runs", "--json"]);
    assert!(rows.iter().all(|r| r["status"] == "completed"), "{rows:?}");
}

#[test]
fn queue_partitions_take_turns() {
    let home = Home::new();
    let plan = common::plan_file(&home, "q.plan", PLAN);
    common::run_ok(&home, &["queue", "set", "q", "--concurrency", "1"]);
    let (t, go) = (home.path().join("trace"), home.path().join("go"));
    let mut children = vec![blocker(&home, &plan, &t, &go)];
    until("the first run to start", || trace(&t).len() == 1);
    let mut n = 0;
    for part in ["a", "b"] {
        for i in 1..=10 {
            let name = format!("{part}{i}");
            children.push(spawn(&home, &plan, &t, &name, &["--partition", part]));
            n += 1;
            until("the run to wait", || waiting(&home) == n);
        }
    }
    std::fs::write(&go, "").unwrap();
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    let starts: Vec<String> = trace(&t)
        .iter()
        .filter_map(|l| l.strip_prefix("start ").map(str::to_owned))
        .collect();
    let mut want = vec!["blocker".to_owned()];
    want.extend((1..=10).flat_map(|i| [format!("a{i}"), format!("b{i}")]));
    assert_eq!(starts, want);
}

#[test]
fn queue_waiting_changes_no_byte_of_the_run() {
    let (plain, queued) = (Home::new(), Home::new());
    for h in [&plain, &queued] {
        common::plan_file(h, "q.plan", PLAN);
    }
    common::run_ok(&queued, &["queue", "set", "q", "--concurrency", "2"]);
    // One trace file for both, outside the repository: the runs' inputs are the same.
    let scratch = tempfile::tempdir().unwrap();
    let tr = format!("trace={}", scratch.path().join("trace").display());
    common::run_ok(
        &plain,
        &[
            "run",
            &plain.path().join("plans/q.plan").to_string_lossy(),
            "--input",
            &tr,
        ],
    );
    common::run_ok(
        &queued,
        &[
            "run",
            &queued.path().join("plans/q.plan").to_string_lossy(),
            "--input",
            &tr,
            "--queue",
            "q",
            "--priority",
            "3",
        ],
    );
    let bytes = |h: &Home| std::fs::read(h.log("q-1")).unwrap();
    let (a, b) = (bytes(&plain), bytes(&queued));
    // The plan's path differs between the homes; nothing else may.
    let (pa, pb) = (
        plain
            .path()
            .join("plans/q.plan")
            .to_string_lossy()
            .into_owned(),
        queued
            .path()
            .join("plans/q.plan")
            .to_string_lossy()
            .into_owned(),
    );
    let a = String::from_utf8(a).unwrap();
    let b = String::from_utf8(b).unwrap();
    assert_eq!(a.lines().count(), b.lines().count());
    assert!(!b.contains("\"queue\""), "{b}");
    assert_eq!(a.replace(&pa, "P"), b.replace(&pb, "P"));
}

#[test]
fn queue_bad_asks_are_refused_with_one_code() {
    let home = Home::new();
    let plan = common::plan_file(&home, "q.plan", PLAN);
    let refused = |args: &[&str], code: &str| {
        let mut all = args.to_vec();
        all.push("--json");
        let (exit, v) = home.json(&all);
        assert_eq!(exit, 2, "{args:?}: {v}");
        assert_eq!(v["error"]["code"], code, "{args:?}: {v}");
    };
    refused(
        &["queue", "set", "q", "--concurrency", "0"],
        "queue_invalid",
    );
    refused(
        &["queue", "set", "q", "--concurrency", "1", "--rate", "5/d"],
        "queue_invalid",
    );
    refused(
        &["queue", "set", "../q", "--concurrency", "1"],
        "queue_invalid",
    );
    refused(&["run", &plan, "--queue", "nope"], "queue_unknown");
    common::run_ok(
        &home,
        &["queue", "set", "q", "--concurrency", "1", "--rate", "5/s"],
    );
    refused(
        &["run", &plan, "--queue", "q", "--priority", "10"],
        "queue_invalid",
    );
    refused(&["run", &plan, "--priority", "1"], "queue_invalid");
    refused(&["run", &plan, "--partition", "a"], "queue_invalid");
    refused(
        &["run", &plan, "--queue", "q", "--partition", ""],
        "queue_invalid",
    );
    // Nothing was created by a refusal.
    assert!(!home.path().join("runs").exists());
    let (code, rows) = home.json_lines(&["queue", "list", "--json"]);
    assert_eq!(code, 0);
    let q: &Value = &rows[0];
    assert_eq!(
        (
            q["name"].as_str(),
            q["concurrency"].as_u64(),
            q["rate"].as_str()
        ),
        (Some("q"), Some(1), Some("5/s"))
    );
}

/// A plan the API may start (no program): it counts words.
const PURE: &str = "plan pure version 1

input n: int = 0

count = text.count { text: \"one two three\" }
";

/// `POST /api/v1/runs` with a queue on a file home: the runs wait `queued` (listed with their
/// positions) while a command line's run holds the queue's one place, then the server starts
/// them by priority; a bad priority or an unknown queue is refused with the command line's
/// codes.
#[test]
fn queue_api_runs_wait_their_turn_and_start_by_priority() {
    let sb = common::Sandbox::new();
    let (code, token, _) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 0);
    let token = token.trim().to_owned();
    let plan = sb.write("q.plan", PLAN);
    let (code, _, err) = sb.oracle(&["queue", "set", "q", "--concurrency", "1"]);
    assert_eq!(code, 0, "{err}");
    let (t, go) = (sb.path().join("trace"), sb.path().join("go"));
    let cmd = format!("cmd=while [ ! -f {} ]; do sleep 0.02; done", go.display());
    let tr = format!("trace={}", t.display());
    let plan = plan.to_string_lossy().into_owned();
    let mut blocker = sb
        .command(&[
            "run", &plan, "--queue", "q", "--input", &tr, "--input", &cmd,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until("the blocker to start", || trace(&t).len() == 1);
    let root = sb.path().to_string_lossy().into_owned();
    let (_server, base) = crate::web::serve(sb.path(), &["--root", &root]);
    let post = |body: Value| crate::web::call(&base, "POST", "/api/v1/runs", &token, Some(&body));
    let (status, v) = post(serde_json::json!({"plan": PURE, "queue": "q", "priority": 10}));
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("queue_invalid")),
        "{v}"
    );
    let (status, v) = post(serde_json::json!({"plan": PURE, "queue": "nope"}));
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("queue_unknown")),
        "{v}"
    );
    let mut ids = Vec::new();
    for (n, priority) in [(1, 1), (2, 9), (3, 5)] {
        let body = serde_json::json!({
            "plan": PURE, "inputs": {"n": n}, "queue": "q", "priority": priority,
        });
        let (status, v) = post(body);
        assert_eq!((status, v["status"].as_str()), (201, Some("queued")), "{v}");
        ids.push(v["run"].as_str().unwrap().to_owned());
    }
    let (_, v) = crate::web::call(&base, "GET", "/api/v1/runs?status=queued", &token, None);
    let positions: Vec<(String, u64)> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run"].as_str().unwrap().to_owned(),
                r["queue"]["position"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = vec![
        (ids[0].clone(), 3),
        (ids[1].clone(), 1),
        (ids[2].clone(), 2),
    ];
    assert_eq!(positions, want, "{v}");
    let (_, one) = crate::web::call(
        &base,
        "GET",
        &format!("/api/v1/runs/{}", ids[1]),
        &token,
        None,
    );
    assert_eq!(
        (one["status"].as_str(), one["queue"]["position"].as_u64()),
        (Some("queued"), Some(1)),
        "{one}"
    );
    std::fs::write(&go, "").unwrap();
    assert!(blocker.wait().unwrap().success());
    let log = sb.path().join(".oracle/serve-resume.log");
    until("the queued runs to end", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("(queue q)")
            .count()
            == 3
    });
    let text = std::fs::read_to_string(&log).unwrap();
    let order: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("start ")?.split(' ').next())
        .collect();
    assert_eq!(
        order,
        [ids[1].as_str(), ids[2].as_str(), ids[0].as_str()],
        "{text}"
    );
    assert!(text.matches("completed").count() >= 3, "{text}");
}

static DB: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A fresh store with the schema, or `None` (skip) without PostgreSQL.
fn store_url() -> Option<String> {
    let cluster = oracle_pg::cluster::shared()?;
    let n = DB.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let url = cluster
        .database(&format!("queues_{}_{n}", std::process::id()))
        .unwrap();
    let (code, out, err) = common::oracle_in(Path::new("."), &["store", "init", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    Some(url)
}

/// `oracle submit PLAN --store URL --queue q --input name=NAME ...` in `dir`; the run's id.
fn submit(dir: &Path, url: &str, name: &str, extra: &[&str]) -> String {
    let t = format!("trace={}", dir.join("trace").display());
    let n = format!("name={name}");
    let mut args = vec![
        "submit",
        "q.plan",
        "--store",
        url,
        "--queue",
        "q",
        "--input",
        &n,
        "--input",
        &t,
        "--input",
        "cmd=sleep 0.05",
        "--json",
    ];
    args.extend_from_slice(extra);
    let (code, v) = common::json_in(dir, &args);
    assert_eq!(code, 0, "{v}");
    v["run"].as_str().unwrap().to_owned()
}

/// The starts in `dir`'s trace, each checked to end before the next starts.
fn starts_one_at_a_time(dir: &Path) -> Vec<String> {
    let lines = trace(&dir.join("trace"));
    let mut starts = Vec::new();
    for pair in lines.chunks(2) {
        let name = pair[0].strip_prefix("start ").expect("a start").to_owned();
        assert_eq!(
            pair.get(1),
            Some(&format!("end {name}")),
            "overlap: {lines:?}"
        );
        starts.push(name);
    }
    starts
}

/// Over a store, with a worker of four threads: runs of a queue of concurrency 1 never
/// overlap and start by priority, listed `queued` with their places until then.
#[test]
fn queue_store_runs_never_overlap_and_go_by_priority() {
    let Some(url) = store_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("q.plan"), PLAN).unwrap();
    let (code, _, err) = common::oracle_in(
        dir.path(),
        &["queue", "set", "q", "--concurrency", "1", "--store", &url],
    );
    assert_eq!(code, 0, "{err}");
    let (code, v) = common::json_in(
        dir.path(),
        &[
            "submit", "q.plan", "--store", &url, "--queue", "nope", "--json",
        ],
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (2, Some("queue_unknown")),
        "{v}"
    );
    let low = submit(dir.path(), &url, "low", &["--priority", "1"]);
    let high = submit(dir.path(), &url, "high", &["--priority", "9"]);
    let mid = submit(dir.path(), &url, "mid", &["--priority", "5"]);
    let (_, out, _) = common::oracle_in(dir.path(), &["runs", "--store", &url, "--json"]);
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let place = |run: &str| {
        let r = rows.iter().find(|r| r["run"] == run).unwrap();
        assert_eq!(r["status"], "queued", "{r}");
        r["queue"]["position"].as_u64().unwrap()
    };
    assert_eq!((place(&high), place(&mid), place(&low)), (1, 2, 3));
    common::worker_until_idle(dir.path(), &url, &["--concurrency", "4"]);
    assert_eq!(starts_one_at_a_time(dir.path()), ["high", "mid", "low"]);
    let (_, out, _) = common::oracle_in(dir.path(), &["runs", "--store", &url, "--json"]);
    assert_eq!(out.matches("\"status\":\"completed\"").count(), 3, "{out}");
}

/// Over a store, two partitions of ten runs each take turns through a queue of concurrency 1.
#[test]
fn queue_store_partitions_take_turns() {
    let Some(url) = store_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("q.plan"), PLAN).unwrap();
    let (code, _, err) = common::oracle_in(
        dir.path(),
        &["queue", "set", "q", "--concurrency", "1", "--store", &url],
    );
    assert_eq!(code, 0, "{err}");
    for part in ["a", "b"] {
        for i in 1..=10 {
            submit(
                dir.path(),
                &url,
                &format!("{part}{i}"),
                &["--partition", part],
            );
        }
    }
    common::worker_until_idle(dir.path(), &url, &["--concurrency", "4"]);
    let want: Vec<String> = (1..=10)
        .flat_map(|i| [format!("a{i}"), format!("b{i}")])
        .collect();
    assert_eq!(starts_one_at_a_time(dir.path()), want);
}

/// A plan's `queue "q"` line puts its runs in the queue with no flag: one waits while
/// another holds the queue's place.
#[test]
fn queue_line_of_a_plan_makes_its_runs_wait() {
    let home = Home::new();
    let plan = common::plan_file(&home, "q.plan", PLAN);
    let lined = common::plan_file(
        &home,
        "lined.plan",
        &PLAN.replace("grant proc", "queue \"q\"\ngrant proc"),
    );
    common::run_ok(&home, &["queue", "set", "q", "--concurrency", "1"]);
    let (t, go) = (home.path().join("trace"), home.path().join("go"));
    let mut first = blocker(&home, &plan, &t, &go);
    until("the first run to start", || trace(&t).len() == 1);
    let tr = format!("trace={}", t.display());
    let mut lined_run = home
        .command(&["run", &lined, "--input", "name=lined", "--input", &tr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until("the plan's run to wait", || waiting(&home) == 1);
    std::fs::write(&go, "").unwrap();
    assert!(first.wait().unwrap().success());
    assert!(lined_run.wait().unwrap().success());
    assert_eq!(
        trace(&t),
        ["start blocker", "end blocker", "start lined", "end lined"]
    );
}

/// A schedule's ticks wait in its queue (`oracle schedule add --queue`): a server starts
/// each in its turn; an unknown queue or a bad priority is refused at `add`.
#[test]
fn queue_of_a_schedule_is_where_its_ticks_wait() {
    let sb = common::Sandbox::new();
    let plan = sb.write("pure.plan", PURE).to_string_lossy().into_owned();
    let refused = |args: &[&str], code: &str| {
        let (exit, v) = sb.json(args);
        assert_eq!((exit, v["error"]["code"].as_str()), (2, Some(code)), "{v}");
    };
    let every = "* * * * * *";
    refused(
        &[
            "schedule", "add", "s", &plan, "--cron", every, "--queue", "q", "--json",
        ],
        "queue_unknown",
    );
    let (code, _, err) = sb.oracle(&["queue", "set", "q", "--concurrency", "1"]);
    assert_eq!(code, 0, "{err}");
    refused(
        &[
            "schedule",
            "add",
            "s",
            &plan,
            "--cron",
            every,
            "--queue",
            "q",
            "--priority",
            "12",
            "--json",
        ],
        "queue_invalid",
    );
    let (code, _, err) = sb.oracle(&[
        "schedule",
        "add",
        "s",
        &plan,
        "--cron",
        every,
        "--queue",
        "q",
        "--priority",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    let root = sb.path().to_string_lossy().into_owned();
    let (mut server, _) = crate::web::serve(sb.path(), &["--root", &root]);
    let log = sb.path().join(".oracle/serve-resume.log");
    until("a tick's run to start through its queue", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("(queue q): completed")
    });
    server.stop();
}
