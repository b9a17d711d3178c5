//! Rate limits on model bindings and declared tools (issue 56, item 2), end to end with the
//! real binary: a call waits for its turn, across the processes of one home (and the workers of
//! one store: store.rs's twin test), the provider never sees more than the rate in any window,
//! a limit never changes what is recorded, and every door refuses a rate that is not one with
//! the same code, `rate_invalid`.

use crate::common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox;
use oracle_llm_stub::Stub;
use serde_json::{Value, json};

/// A plan making `calls` model calls to `fast`, every iteration at once (as `--jobs` allows).
pub fn paced_plan(calls: u64) -> String {
    let items: Vec<String> = (0..calls).map(|i| i.to_string()).collect();
    format!(
        "plan paced version 1\n\ngrant llm:chat:fast\n\n\
         replies = for i in [{}] max 100 {{\n  \
         reply = llm.chat {{ model: \"fast\", messages: [{{ role: \"user\", content: \"hello\" }}] }}\n\
         }}\n",
        items.join(", ")
    )
}

/// A model that always answers.
pub fn always() -> Vec<Value> {
    vec![json!({"content": "ok", "forever": true})]
}

/// The stub's request times, sorted, after checking that no `n + 1` of them fall in one window
/// of `period_ms` (so no window `[t, t + period)` holds more than `n`).
pub fn never_more_than(stub: &Stub, n: usize, period_ms: u64) -> Vec<u64> {
    let mut at: Vec<u64> = stub.requests().iter().map(|r| r.received_ms).collect();
    at.sort_unstable();
    for w in at.windows(n + 1) {
        assert!(
            w[n] - w[0] >= period_ms,
            "{} requests within {} ms: {w:?}",
            n + 1,
            w[n] - w[0]
        );
    }
    at
}

/// `oracle ARGS` in the sandbox, its config files its own (no user's file leaks in).
fn command(sb: &Sandbox, args: &[&str]) -> Command {
    let mut c = sb.command(args);
    c.env("XDG_CONFIG_HOME", sb.path().join("xdg"))
        .env_remove("ORACLE_CONFIG_DIR")
        .env_remove("ORACLE_HOME")
        .env_remove("ORACLE_STORE");
    c
}

fn json(sb: &Sandbox, args: &[&str]) -> (i32, Value) {
    let (code, out, err) = common::outcome(command(sb, args).output().unwrap());
    (code, common::last_json(args, &out, &err))
}

#[test]
fn a_hundred_calls_through_a_ten_per_second_binding_take_nine_seconds_and_never_exceed_it() {
    let sb = Sandbox::new();
    let stub = Stub::start(always()).unwrap();
    sb.write("paced.plan", &paced_plan(50));
    let model = format!("fast={}", stub.url());
    let args = [
        "run",
        "paced.plan",
        "--model",
        &model,
        "--model-rate",
        "fast=10/s",
        "--jobs",
        "4",
        "--json",
    ];
    // Two processes of one home, fifty calls each, at once: they share the binding's window.
    let began = Instant::now();
    let children: Vec<_> = (0..2)
        .map(|_| {
            command(&sb, &args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let (code, out, err) = common::outcome(child.wait_with_output().unwrap());
        assert_eq!(code, 0, "{out}{err}");
        let v = common::last_json(&args, &out, &err);
        assert_eq!(v["status"], "completed", "{v}");
    }
    assert!(
        began.elapsed() >= Duration::from_secs(9),
        "{:?}",
        began.elapsed()
    );
    let at = never_more_than(&stub, 10, 1_000);
    assert_eq!(at.len(), 100);
    assert!(at[99] - at[0] >= 9_000, "{} ms", at[99] - at[0]);
    // The window the two shared, under the home.
    assert!(sb.path().join(".oracle/rates/model.fast.json").is_file());
}

#[test]
fn a_run_records_the_same_bytes_with_a_rate_as_without() {
    let sb = Sandbox::new();
    let stub = Stub::start(always()).unwrap();
    sb.write("paced.plan", &paced_plan(6));
    let model = format!("fast={}", stub.url());
    let (code, free) = json(&sb, &["run", "paced.plan", "--model", &model, "--json"]);
    assert_eq!(code, 0, "{free}");
    let began = Instant::now();
    let (code, paced) = json(
        &sb,
        &[
            "run",
            "paced.plan",
            "--model",
            &model,
            "--model-rate",
            "fast=3/s",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{paced}");
    // Six calls at 3/s: the last three wait a second for the first three.
    assert!(
        began.elapsed() >= Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    let log = |v: &Value| fs::read(sb.log(".oracle", v["run"].as_str().unwrap())).unwrap();
    assert_eq!(log(&free), log(&paced), "a rate changed the recorded bytes");
    let (code, out, err) = common::outcome(
        command(&sb, &["replay", paced["run"].as_str().unwrap()])
            .output()
            .unwrap(),
    );
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_declared_tool_waits_for_its_turn() {
    let sb = Sandbox::new();
    sb.write(
        "tools/stamp.sh",
        "#!/bin/sh\ncat > /dev/null\ndate +%s%3N >> \"$STAMPS\"\necho '{\"ok\": true}'\n",
    );
    let script = sb.path().join("tools/stamp.sh");
    let mut perms = fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    fs::set_permissions(&script, perms).unwrap();
    let stamps = sb.path().join("stamps.txt");
    sb.write(
        "tools/stamp.toml",
        &format!(
            "name = \"stamp.now\"\nversion = \"1.0.0\"\ndescription = \"The time, written down\"\n\
             effect = \"impure\"\ntimeout_ms = 5000\n\
             input_schema = {{ type = \"object\", properties = {{ i = {{ type = \"integer\" }} }} }}\n\
             output_schema = {{ type = \"object\" }}\n\n[exec]\nprogram = \"stamp.sh\"\n\
             env = {{ PATH = \"/usr/bin:/bin\", STAMPS = \"{}\" }}\n",
            stamps.display()
        ),
    );
    sb.write(
        "stamp.plan",
        "plan stamps version 1\n\ngrant tool:exec:stamp.now\n\ntools \"tools\"\n\n\
         stamps = for i in [0, 1, 2, 3, 4, 5, 6] max 10 {\n  s = stamp.now { i: i }\n}\n",
    );
    let (code, v) = json(
        &sb,
        &[
            "run",
            "stamp.plan",
            "--tool-rate",
            "stamp.now=3/s",
            "--jobs",
            "4",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    let mut at: Vec<u64> = fs::read_to_string(&stamps)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    at.sort_unstable();
    assert_eq!(at.len(), 7);
    for w in at.windows(4) {
        assert!(
            w[3] - w[0] >= 1_000,
            "4 calls within {} ms: {w:?}",
            w[3] - w[0]
        );
    }
}

/// What each door says to a rate that is not one: exit 2 and `rate_invalid`.
const BAD: [&str; 5] = ["0/s", "abc", "10/y", "10001/s", "99999999999999999999999/m"];

#[test]
fn every_door_refuses_a_rate_that_is_not_one_with_one_code() {
    let sb = Sandbox::new();
    let dead = "fast=http://127.0.0.1:9/v1";
    sb.write("paced.plan", &paced_plan(1));
    for bad in BAD {
        let rate = format!("fast={bad}");
        // The command line's flags, on a new run and on a resume.
        // 10,001 is past the calls' limit, not the tokens'.
        let flags = match bad {
            "10001/s" => &["--model-rate"][..],
            _ => &["--model-rate", "--model-tokens"],
        };
        for &flag in flags {
            let args = ["run", "paced.plan", "--model", dead, flag, &rate, "--json"];
            let (code, v) = json(&sb, &args);
            assert_eq!(code, 2, "{bad}: {v}");
            assert_eq!(v["error"]["code"], "rate_invalid", "{bad}: {v}");
        }
        let tool = format!("stamp.now={bad}");
        let (code, v) = json(&sb, &["run", "paced.plan", "--tool-rate", &tool, "--json"]);
        assert_eq!(
            (code, &v["error"]["code"]),
            (2, &json!("rate_invalid")),
            "{v}"
        );
        assert!(
            !sb.path().join(".oracle/runs").exists(),
            "{bad}: a run was made"
        );
        // The config file.
        sb.write(
            "oracle.toml",
            &format!("[models.fast]\nurl = \"http://127.0.0.1:9/v1\"\nrate = \"{bad}\"\n"),
        );
        let (code, v) = json(&sb, &["run", "paced.plan", "--json"]);
        assert_eq!(
            (code, &v["error"]["code"]),
            (2, &json!("rate_invalid")),
            "{v}"
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("oracle.toml:3"),
            "{v}"
        );
        sb.write(
            "oracle.toml",
            &format!("[tool_rates]\n\"stamp.now\" = \"{bad}\"\n"),
        );
        let (code, v) = json(&sb, &["run", "paced.plan", "--json"]);
        assert_eq!(
            (code, &v["error"]["code"]),
            (2, &json!("rate_invalid")),
            "{v}"
        );
        fs::remove_file(sb.path().join("oracle.toml")).unwrap();
        // A server and a worker refuse it before they listen or connect.
        let (code, _, err) = common::outcome(
            command(
                &sb,
                &["serve", "--listen", "127.0.0.1:0", "--model-rate", &rate],
            )
            .output()
            .unwrap(),
        );
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(err.contains(&format!("--model-rate `{rate}`")), "{err}");
        let url = "postgres://oracle@127.0.0.1:9/none";
        let (code, _, err) = common::outcome(
            command(&sb, &["worker", "--store", url, "--model-rate", &rate])
                .output()
                .unwrap(),
        );
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(err.contains(&format!("--model-rate `{rate}`")), "{err}");
    }
    // A resume refuses it too, and the run is as it was.
    let stub = Stub::start(always()).unwrap();
    let model = format!("fast={}", stub.url());
    let (code, v) = json(&sb, &["run", "paced.plan", "--model", &model, "--json"]);
    assert_eq!(code, 0, "{v}");
    let run = v["run"].as_str().unwrap();
    let before = fs::read(sb.log(".oracle", run)).unwrap();
    let (code, v) = json(&sb, &["resume", run, "--model-rate", "fast=10/y", "--json"]);
    assert_eq!(
        (code, &v["error"]["code"]),
        (2, &json!("rate_invalid")),
        "{v}"
    );
    assert_eq!(fs::read(sb.log(".oracle", run)).unwrap(), before);
}

#[test]
fn tokens_are_charged_after_each_call_and_the_next_waits_for_the_debt() {
    let sb = Sandbox::new();
    // Each reply reports 100 tokens: with 100 a second, each call waits a second after the
    // one before it ended. (Calls made at once are not held back by tokens none has reported
    // yet: a calls rate bounds those.)
    let usage = json!({"prompt_tokens": 60, "completion_tokens": 40});
    let stub = Stub::start(vec![
        json!({"content": "ok", "usage": usage, "forever": true}),
    ])
    .unwrap();
    sb.write("paced.plan", &paced_plan(4));
    let model = format!("fast={}", stub.url());
    let began = Instant::now();
    let args = [
        "run",
        "paced.plan",
        "--model",
        &model,
        "--model-tokens",
        "fast=100/s",
        "--json",
    ];
    let (code, v) = json(&sb, &args);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert!(
        began.elapsed() >= Duration::from_secs(3),
        "{:?}",
        began.elapsed()
    );
    let at = never_more_than(&stub, 1, 1_000);
    assert_eq!(at.len(), 4);
}
