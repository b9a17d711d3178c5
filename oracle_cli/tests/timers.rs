//! Durable time end to end (issue 38): `clock.wall` is recorded once and replayed from the
//! log; a `sleep` step suspends on a recorded `timer_set`, is woken by `oracle resume --wake`
//! (refused while not due, unless `--force`) or by `oracle serve`'s timer wheel, fires once
//! (`timer_fired`), and its replay is offline and never sleeps. No test asserts timing: the
//! server test polls for completion with a generous deadline.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox;
use oracle_core::Payload;

/// Longest wait for the server to wake and finish a run.
const WAIT_MS_MAX: u64 = 60_000;

fn payloads(sb: &Sandbox, run: &str) -> Vec<Payload> {
    sb.events(".oracle", run)
        .iter()
        .map(|e| e.typed().unwrap())
        .collect()
}

#[test]
fn the_wall_clock_is_an_answer_replay_takes_from_the_log() {
    let sb = Sandbox::new();
    sb.write(
        "wall.plan",
        "plan wall version 1\n\nnow = clock.wall {}\nlater = clock.wall {}\n  after now\n",
    );
    let (code, _, err) = sb.oracle(&["run", "wall.plan"]);
    assert_eq!(code, 0, "{err}");
    let returned: Vec<serde_json::Value> = payloads(&sb, "wall-1")
        .into_iter()
        .filter_map(|p| match p {
            Payload::ToolReturned(r) if r.tool == "clock.wall" => Some(r.output),
            _ => None,
        })
        .collect();
    assert_eq!(returned.len(), 2);
    for out in &returned {
        let ms = out["unix_ms"].as_u64().expect("integer millis");
        assert_eq!(out["unix_s"].as_u64(), Some(ms / 1000));
        assert!(out["instant"].as_str().unwrap().ends_with('Z'), "{out}");
    }
    let log = std::fs::read(sb.log(".oracle", "wall-1")).unwrap();
    // Replay reads no clock: it reproduces the log exactly (the same head), a second later.
    let (code, out, err) = sb.oracle(&["replay", "wall-1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ending   completed"), "{out}");
    assert_eq!(std::fs::read(sb.log(".oracle", "wall-1")).unwrap(), log);
}

#[test]
fn a_past_timer_is_woken_by_hand_and_replays_without_sleeping() {
    let sb = Sandbox::new();
    sb.write(
        "nap.plan",
        "plan nap version 1\n\nnap = sleep { until: \"2020-01-01T00:00:00Z\" }\ndone = text.count { text: nap.due }\n",
    );
    let (code, out, err) = sb.oracle(&["run", "nap.plan"]);
    assert_eq!(code, 3, "{err}");
    // The hint names the command that works (`--wake`), never `--step/--value`, which is
    // refused below (`timer_wait`).
    assert!(out.contains("next     oracle resume nap-1 --wake"), "{out}");
    assert!(!out.contains("--step"), "{out}");
    let p = payloads(&sb, "nap-1");
    let set = p
        .iter()
        .find_map(|p| match p {
            Payload::TimerSet(t) => Some(t.clone()),
            _ => None,
        })
        .expect("a timer_set");
    assert_eq!(set.due_ms, 1_577_836_800_000);
    assert_eq!(set.due, "2020-01-01T00:00:00Z");
    match p.last() {
        Some(Payload::Suspended(s)) => assert_eq!(s.reason, "waits until 2020-01-01T00:00:00Z"),
        other => panic!("{other:?}"),
    }
    let (code, out, _) = sb.oracle(&["runs"]);
    assert_eq!(code, 0);
    assert!(out.contains("waits until 2020-01-01T00:00:00Z"), "{out}");
    // The home's timer index has it.
    let index: Vec<String> = std::fs::read_dir(sb.path().join(".oracle/timers"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(index, vec![format!("{:020}-nap-1", set.due_ms)]);

    // Resuming without --wake, or answering it, is refused and writes nothing.
    let before = std::fs::read(sb.log(".oracle", "nap-1")).unwrap();
    let (code, v) = sb.json(&["resume", "nap-1", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "timer_wait");
    let (code, v) = sb.json(&[
        "resume", "nap-1", "--step", "nap", "--value", "{}", "--json",
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "timer_wait");
    assert_eq!(std::fs::read(sb.log(".oracle", "nap-1")).unwrap(), before);

    let (code, out, err) = sb.oracle(&["resume", "nap-1", "--wake"]);
    assert_eq!(code, 0, "{out}{err}");
    let fired: Vec<_> = payloads(&sb, "nap-1")
        .into_iter()
        .filter_map(|p| match p {
            Payload::TimerFired(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(fired.len(), 1);
    assert!(fired[0].fired_ms >= fired[0].due_ms);
    // A second wake finds nothing to wake.
    let (code, v) = sb.json(&["resume", "nap-1", "--wake", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "finished");
    let (code, out, err) = sb.oracle(&["replay", "nap-1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ending   completed"), "{out}");
    let (code, _, err) = sb.oracle(&["verify", "nap-1"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_timer_not_yet_due_is_refused_unless_forced() {
    let sb = Sandbox::new();
    sb.write(
        "long.plan",
        "plan long version 1\n\nnap = sleep { for: \"2d\" }\n",
    );
    let (code, _, err) = sb.oracle(&["run", "long.plan"]);
    assert_eq!(code, 3, "{err}");
    let set = payloads(&sb, "long-1")
        .into_iter()
        .find_map(|p| match p {
            Payload::TimerSet(t) => Some(t),
            _ => None,
        })
        .unwrap();
    assert_eq!(set.due_ms - set.set_ms, 172_800_000);
    let before = std::fs::read(sb.log(".oracle", "long-1")).unwrap();
    let (code, v) = sb.json(&["resume", "long-1", "--wake", "--json"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["error"]["code"], "timer_not_due");
    assert_eq!(v["error"]["due"], set.due);
    assert_eq!(std::fs::read(sb.log(".oracle", "long-1")).unwrap(), before);
    let (code, out, err) = sb.oracle(&["resume", "long-1", "--wake", "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    let fired = payloads(&sb, "long-1")
        .into_iter()
        .find_map(|p| match p {
            Payload::TimerFired(f) => Some(f),
            _ => None,
        })
        .unwrap();
    assert!(fired.fired_ms < fired.due_ms, "forced: fired early");
}

#[test]
fn a_bad_duration_fails_the_step_before_anything_waits() {
    let sb = Sandbox::new();
    sb.write(
        "bad.plan",
        "plan bad version 1\n\nnap = sleep { for: \"3 fortnights\" }\n",
    );
    let (code, _, err) = sb.oracle(&["run", "bad.plan"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        !payloads(&sb, "bad-1")
            .iter()
            .any(|p| matches!(p, Payload::TimerSet(_)))
    );
}

#[test]
fn the_server_wakes_a_due_timer_and_the_run_completes() {
    let sb = Sandbox::new();
    sb.write(
        "nap.plan",
        "plan nap version 1\n\nnap = sleep { for: \"2s\" }\ndone = text.count { text: nap.fired }\n",
    );
    let (code, _, err) = sb.oracle(&["run", "nap.plan"]);
    assert_eq!(code, 3, "{err}");
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
    let start = Instant::now();
    let mut done = false;
    while start.elapsed() < Duration::from_millis(WAIT_MS_MAX) {
        if matches!(payloads(&sb, "nap-1").last(), Some(Payload::RunFinished(_))) {
            done = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    assert!(done, "the server did not wake the run");
    let p = payloads(&sb, "nap-1");
    assert_eq!(
        p.iter()
            .filter(|p| matches!(p, Payload::TimerFired(_)))
            .count(),
        1
    );
    let resume_log = std::fs::read_to_string(sb.path().join(".oracle/serve-resume.log")).unwrap();
    assert!(resume_log.contains("wake nap-1"), "{resume_log}");
    // Replay is offline and reads the recorded instants: it does not wait two seconds.
    let (code, out, err) = sb.oracle(&["replay", "nap-1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ending   completed"), "{out}");
}

/// A `human.ask` whose deadline (an instant long past) races an answer; the step after it
/// records which won in its input.
const DEADLINE_PLAN: &str = r#"plan ship version 1

ask = human.ask { question: "Ship it?", deadline: "2020-01-01T00:00:00Z" }
  on timeout "no"

note = text.count { text: "answer: " + ask.answer }
"#;

/// The text the `note` step was called with, once the run got there.
fn note_text(sb: &Sandbox, run: &str) -> Option<String> {
    payloads(sb, run).into_iter().find_map(|p| match p {
        Payload::ToolCalled(c) if c.step == "note" => c.input["text"].as_str().map(str::to_owned),
        _ => None,
    })
}

#[test]
fn a_deadline_that_passes_first_answers_with_its_on_timeout_value_once() {
    let sb = Sandbox::new();
    sb.write("ship.plan", DEADLINE_PLAN);
    let (code, _, err) = sb.oracle(&["run", "ship.plan"]);
    assert_eq!(code, 3, "{err}");
    match payloads(&sb, "ship-1").last() {
        Some(Payload::Suspended(s)) => {
            assert_eq!(s.reason, "Ship it? (deadline 2020-01-01T00:00:00Z)")
        }
        other => panic!("{other:?}"),
    }
    let (code, out, err) = sb.oracle(&["resume", "ship-1", "--wake"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(note_text(&sb, "ship-1").as_deref(), Some("answer: no"));
    // The answer comes too late: refused with its own code, nothing written.
    let before = std::fs::read(sb.log(".oracle", "ship-1")).unwrap();
    let (code, v) = sb.json(&[
        "resume", "ship-1", "--step", "ask", "--value", "\"yes\"", "--json",
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "deadline_passed");
    assert_eq!(std::fs::read(sb.log(".oracle", "ship-1")).unwrap(), before);
    let (code, out, err) = sb.oracle(&["replay", "ship-1"]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn an_answer_that_comes_first_wins_and_the_deadline_is_ignored() {
    let sb = Sandbox::new();
    sb.write("ship.plan", DEADLINE_PLAN);
    let (code, _, err) = sb.oracle(&["run", "ship.plan"]);
    assert_eq!(code, 3, "{err}");
    let (code, out, err) = sb.oracle(&["resume", "ship-1", "--step", "ask", "--value", "\"yes\""]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(note_text(&sb, "ship-1").as_deref(), Some("answer: yes"));
    let (code, v) = sb.json(&["resume", "ship-1", "--wake", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "finished");
    assert!(
        !payloads(&sb, "ship-1")
            .iter()
            .any(|p| matches!(p, Payload::TimerFired(_)))
    );
    let (code, out, err) = sb.oracle(&["replay", "ship-1"]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_deadline_without_a_value_fails_the_step() {
    let sb = Sandbox::new();
    sb.write(
        "strict.plan",
        "plan strict version 1\n\nask = human.ask { question: \"Ship it?\", deadline: \"2020-01-01T00:00:00Z\" }\n  on timeout fail\n",
    );
    let (code, _, err) = sb.oracle(&["run", "strict.plan"]);
    assert_eq!(code, 3, "{err}");
    let (code, out, err) = sb.oracle(&["resume", "strict-1", "--wake"]);
    assert_eq!(code, 1, "{out}{err}");
    match payloads(&sb, "strict-1").last() {
        Some(Payload::RunFinished(f)) => assert!(f.reason.contains("deadline"), "{}", f.reason),
        other => panic!("{other:?}"),
    }
}

/// An answer and a wake sent at once, several times: exactly one of them is recorded for the
/// step (a `resumed` or a `timer_fired`, never both), the other is refused, and the run's
/// next step saw the winner.
#[test]
fn an_answer_and_a_wake_racing_are_recorded_exactly_once() {
    let sb = Sandbox::new();
    sb.write("ship.plan", DEADLINE_PLAN);
    for i in 1..=4 {
        let run = format!("ship-{i}");
        let (code, _, err) = sb.oracle(&["run", "ship.plan"]);
        assert_eq!(code, 3, "{err}");
        let mut answer = sb
            .command(&["resume", &run, "--step", "ask", "--value", "\"yes\""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut wake = sb
            .command(&["resume", &run, "--wake"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let a = answer.wait().unwrap().code();
        let w = wake.wait().unwrap().code();
        let p = payloads(&sb, &run);
        let answered = p
            .iter()
            .filter(|p| matches!(p, Payload::Resumed(r) if r.step == "ask"))
            .count();
        let fired = p
            .iter()
            .filter(|p| matches!(p, Payload::TimerFired(_)))
            .count();
        assert_eq!(answered + fired, 1, "{run}: answer {a:?}, wake {w:?}");
        let expected = if answered == 1 {
            "answer: yes"
        } else {
            "answer: no"
        };
        assert_eq!(note_text(&sb, &run).as_deref(), Some(expected));
        assert!(
            a == Some(0) || w == Some(0),
            "{run}: answer {a:?}, wake {w:?}"
        );
        let (code, out, err) = sb.oracle(&["verify", &run]);
        assert_eq!(code, 0, "{out}{err}");
    }
}
