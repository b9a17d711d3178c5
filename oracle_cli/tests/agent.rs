//! Agent steps end to end: the real binary, a plan with an `agent` step, and the scripted model
//! stub on 127.0.0.1 asking for tool calls. Every turn and tool call is recorded and
//! capability-checked like a plan step; denials and bad arguments go back to the model; a
//! loop that runs out of turns yields to a person; a kill mid-loop resumes to the same bytes;
//! replay needs no model.

use crate::common;

use std::fs;

use common::Sandbox;
use oracle_core::EventKind;
use oracle_llm_stub::Stub;
use serde_json::{Value, json};

fn script(name: &str) -> Vec<Value> {
    let text = fs::read_to_string(common::root().join("fixtures/llm").join(name)).unwrap();
    oracle_llm_stub::parse_script(&text).unwrap()
}

/// A reply asking for one call of `tool` with `arguments`.
fn call(id: &str, tool: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"id": id, "type": "function", "function": {
        "name": tool.replace('.', "__"),
        "arguments": arguments.to_string(),
    }}]})
}

fn answer(source: &str) -> Value {
    json!({"json": {"answer": "14 Harbour Street, on 1 December 2026", "source": source}})
}

fn run(sb: &Sandbox, stub: &Stub, extra: &[&str]) -> (i32, Value) {
    let model = format!("fast={}", stub.url());
    let mut args = vec![
        "run",
        "fixtures/plans/research.plan",
        "--model",
        &model,
        "--json",
    ];
    args.extend(extra);
    sb.json(&args)
}

/// The `role: tool` messages the model was sent in request `i`.
fn tool_messages(stub: &Stub, i: usize) -> Vec<String> {
    stub.requests()[i].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_scripted_agent_lists_reads_answers_and_replays_offline() {
    let sb = Sandbox::new();
    let stub = Stub::start(script("research.jsonl")).unwrap();
    let (code, v) = run(&sb, &stub, &[]);
    assert_eq!(code, 0, "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    assert_eq!(
        fs::read_to_string(sb.path().join("out/research.txt")).unwrap(),
        "memo-2026-11.txt: 14 Harbour Street, on 1 December 2026"
    );
    // Three turns; each offered the two tools by their function names.
    let requests = stub.requests();
    assert_eq!(requests.len(), 3);
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["fs__list", "fs__read"]);
    assert!(
        requests[0].body["tools"][1]["function"]["parameters"]["properties"]["path"].is_object()
    );
    // The third turn saw both reads, in the order asked.
    let results = tool_messages(&stub, 2);
    assert_eq!(results.len(), 3);
    assert!(results[1].contains("Canteen menu"), "{results:?}");
    assert!(results[2].contains("Harbour Street"), "{results:?}");
    // The tool calls are steps of their own in the log, named by turn.
    let steps: Vec<String> = sb
        .events(".oracle", &id)
        .iter()
        .filter(|e| e.kind == EventKind::ToolCalled)
        .map(|e| {
            format!(
                "{} {}",
                e.payload["step"].as_str().unwrap(),
                e.payload["tool"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        steps[..6],
        [
            "research llm.chat",
            "research@1.1 fs.list",
            "research llm.chat",
            "research@2.1 fs.read",
            "research@2.2 fs.read",
            "research llm.chat",
        ]
    );
    // A person reads the agent's model calls as turns (the recorded field stays `attempt`);
    // the tool calls keep their names.
    let (code, out, err) = sb.oracle(&["log", &id, "--kind", "step_scheduled"]);
    assert_eq!(code, 0, "{err}");
    for turn in 1..=3 {
        assert!(
            out.contains(&format!("step research -> llm.chat (turn {turn})")),
            "{out}"
        );
    }
    assert!(!out.contains("research -> llm.chat (attempt"), "{out}");
    let scheduled = sb
        .events(".oracle", &id)
        .into_iter()
        .find(|e| e.kind == EventKind::StepScheduled)
        .unwrap();
    assert_eq!(scheduled.payload["attempt"], 1, "the format is unchanged");
    // The conversation as it stood at the end, and after the first turn's reply (event 4).
    let (code, out, err) = sb.oracle(&["inspect", &id, "--conversation", "research"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(3 model calls)"), "{out}");
    assert!(
        out.contains("assistant  calls fs.list {\"path\":\"fixtures/docs\"} [c1]"),
        "{out}"
    );
    assert!(out.contains("tool       [c3] {\"bytes\":106"), "{out}");
    assert!(
        out.lines().last().unwrap().contains("14 Harbour Street"),
        "{out}"
    );
    let (code, v) = sb.json(&[
        "inspect",
        &id,
        "--conversation",
        "research",
        "--at",
        "4",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["model_calls"], 1);
    assert_eq!(v["messages"].as_array().unwrap().len(), 2);
    assert_eq!(v["reply"]["tool_calls"][0]["name"], "fs.list");
    let (code, _, err) = sb.oracle(&["inspect", &id, "--conversation", "report"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("step `report` made no model call"), "{err}");
    drop(stub);
    let (code, r) = sb.json(&["replay", &id, "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["result"], "reproduced");
}

#[test]
fn a_denied_call_a_bad_argument_and_an_unoffered_tool_go_back_to_the_model() {
    let sb = Sandbox::new();
    let stub = Stub::start(vec![
        // Outside the grants: denied, recorded, and the model is told.
        call("c1", "fs.read", json!({"path": "fixtures/data/notes.txt"})),
        // Not a valid argument for fs.read: refused by its input schema.
        call(
            "c2",
            "fs.read",
            json!({"path": "fixtures/docs/menu.txt", "lines": 3}),
        ),
        // Not one of the agent's tools: never called.
        call("c3", "fs.write", json!({"path": "out/x", "content": "x"})),
        call(
            "c4",
            "fs.read",
            json!({"path": "fixtures/docs/memo-2026-11.txt"}),
        ),
        answer("memo-2026-11.txt"),
    ])
    .unwrap();
    let (code, v) = run(&sb, &stub, &[]);
    assert_eq!(code, 0, "{v}");
    let id = v["run"].as_str().unwrap();
    let told = |i| tool_messages(&stub, i).last().cloned().unwrap();
    assert!(
        told(1).starts_with("error: capability `fs:read:fixtures/data/notes.txt` denied"),
        "{}",
        told(1)
    );
    assert!(
        told(2).starts_with("error: input does not match the tool's input schema"),
        "{}",
        told(2)
    );
    assert!(
        told(3).starts_with("error: `fs.write` is not one of this agent's tools"),
        "{}",
        told(3)
    );
    assert!(!sb.path().join("out/x").exists());
    let events = sb.events(".oracle", id);
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind == EventKind::CapabilityDenied)
            .count(),
        1
    );
    assert!(!events.iter().any(|e| e.kind == EventKind::ToolCalled
        && e.payload["step"].as_str().unwrap().starts_with("research@")
        && e.payload["tool"] == "fs.write"));
}

#[test]
fn running_out_of_turns_yields_to_a_person_and_the_answer_completes_the_run() {
    let sb = Sandbox::new();
    let list = call("c", "fs.list", json!({"path": "fixtures/docs"}));
    // Six turns of listing, twice (the step has two attempts of the loop's last turn... and
    // `attempts 2` applies to each turn's model call, not to the loop).
    let stub = Stub::start(vec![list.clone(); 6]).unwrap();
    let (code, v) = run(&sb, &stub, &[]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(
        v["waiting"]["reason"], "max_turns = 6 reached without an answer",
        "{v}"
    );
    let id = v["run"].as_str().unwrap().to_owned();
    drop(stub);
    let (code, v) = sb.json(&[
        "resume",
        &id,
        "--step",
        "research",
        "--value",
        r#"{"answer": "1 December", "source": "a person"}"#,
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        fs::read_to_string(sb.path().join("out/research.txt")).unwrap(),
        "a person: 1 December"
    );
    let (code, r) = sb.json(&["replay", &id, "--json"]);
    assert_eq!(code, 0, "{r}");
}

#[test]
fn a_run_killed_mid_loop_resumes_to_the_same_bytes_as_one_that_was_not() {
    let replies = script("research.jsonl");
    // Uninterrupted.
    let whole = Sandbox::new();
    let stub = Stub::start(replies.clone()).unwrap();
    let (code, v) = run(&whole, &stub, &[]);
    assert_eq!(code, 0, "{v}");
    let expected = fs::read(whole.log(".oracle", v["run"].as_str().unwrap())).unwrap();

    // Killed while the second turn waits for the model.
    let sb = Sandbox::new();
    let mut slow = replies[1].clone();
    slow["delay_ms"] = json!(30_000);
    let stub = Stub::start(vec![
        replies[0].clone(),
        slow,
        replies[1].clone(),
        replies[2].clone(),
    ])
    .unwrap();
    let model = format!("fast={}", stub.url());
    let mut child = sb
        .command(&["run", "fixtures/plans/research.plan", "--model", &model])
        .spawn()
        .unwrap();
    let mut waited = 0;
    while stub.requests().len() < 2 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        waited += 1;
        assert!(waited < 1500, "the second turn never reached the stub");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let (code, v) = sb.json(&["resume", "research-1", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(fs::read(sb.log(".oracle", "research-1")).unwrap(), expected);
}

#[test]
fn changed_instructions_diverge_at_the_first_turn() {
    let sb = Sandbox::new();
    let stub = Stub::start(script("research.jsonl")).unwrap();
    let (code, v) = run(&sb, &stub, &[]);
    assert_eq!(code, 0, "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    drop(stub);
    let plan = fs::read_to_string(sb.path().join("fixtures/plans/research.plan")).unwrap();
    sb.write(
        "plans/edited.plan",
        &plan.replacen("List the folder,", "Always list the folder first,", 1),
    );
    let (code, out, err) = sb.oracle(&["replay", &id, "--plan", "plans/edited.plan"]);
    assert_eq!(code, 4, "{out}{err}");
    let text = format!("{out}{err}");
    assert!(text.contains("event 3"), "{text}");
    assert!(
        text.contains("(step `research`, tool `llm.chat`, attempt 1)"),
        "{text}"
    );
    assert!(text.contains("Always list the folder first"), "{text}");
}

#[test]
fn an_answer_the_steps_expect_rejects_fails_the_step() {
    let sb = Sandbox::new();
    let plan = fs::read_to_string(sb.path().join("fixtures/plans/research.plan")).unwrap();
    sb.write(
        "plans/strict.plan",
        &plan.replacen(
            "  attempts 2\n",
            "  attempts 2\n  expect research.parsed.source == \"memo-2026-10.txt\"\n",
            1,
        ),
    );
    let stub = Stub::start(script("research.jsonl")).unwrap();
    let model = format!("fast={}", stub.url());
    let (code, v) = sb.json(&["run", "plans/strict.plan", "--model", &model, "--json"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(
        v["waiting"]["reason"],
        "output rejected: expect `research.parsed.source == \"memo-2026-10.txt\"` is false",
        "{v}"
    );
}

#[test]
fn a_fallback_agent_takes_over_when_the_first_runs_out_of_turns() {
    let sb = Sandbox::new();
    let plan = fs::read_to_string(sb.path().join("fixtures/plans/research.plan")).unwrap();
    // The fast model gets one turn; then a strong one starts afresh with four.
    let plan = plan.replacen("  max_turns: 6,\n", "  max_turns: 1,\n", 1).replacen(
        "  attempts 2\n",
        "  attempts 2\n  fallback agent {\n    model: \"strong\",\n    instructions: \"Read the November memo and answer with JSON only.\",\n    task: \"When does the office move, and to where?\",\n    tools: [\"fs.read\"],\n    max_turns: 4,\n    output: { type: \"object\", required: [\"answer\", \"source\"] },\n  }\n",
        1,
    );
    let plan = plan.replacen(
        "grant llm:chat:fast\n",
        "grant llm:chat:fast\ngrant llm:chat:strong\n",
        1,
    );
    sb.write("plans/tiers.plan", &plan);
    let mut list = call("c1", "fs.list", json!({"path": "fixtures/docs"}));
    list["model"] = json!("fast");
    let mut read = call(
        "c2",
        "fs.read",
        json!({"path": "fixtures/docs/memo-2026-11.txt"}),
    );
    read["model"] = json!("strong");
    let mut done = answer("memo-2026-11.txt");
    done["model"] = json!("strong");
    let stub = Stub::start(vec![list, read, done]).unwrap();
    let fast = format!("fast={}", stub.url());
    let strong = format!("strong={}", stub.url());
    let (code, v) = sb.json(&[
        "run",
        "plans/tiers.plan",
        "--model",
        &fast,
        "--model",
        &strong,
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    let requests = stub.requests();
    let models: Vec<&str> = requests
        .iter()
        .map(|r| r.body["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["fast", "strong", "strong"]);
    // The second tier starts afresh: its own instructions, no trace of the first conversation.
    assert_eq!(requests[1].body["messages"].as_array().unwrap().len(), 2);
    assert_eq!(
        fs::read_to_string(sb.path().join("out/research.txt")).unwrap(),
        "memo-2026-11.txt: 14 Harbour Street, on 1 December 2026"
    );
    let id = v["run"].as_str().unwrap().to_owned();
    let (_, state) = sb.json(&["inspect", &id, "--json"]);
    assert_eq!(state["entries"]["step/research"]["attempts"], 3);
    drop(stub);
    let (code, r) = sb.json(&["replay", &id, "--json"]);
    assert_eq!(code, 0, "{r}");
}

/// An agent step inside a loop's body (calls `think[0]`, `think[1]`) and one inside a sub-plan
/// (`nested/ask`): their model calls read as turns in `oracle log` and on the run page, as a
/// top-level agent step's do (the recorded field stays `attempt`).
#[test]
fn agent_steps_in_loops_and_sub_plans_are_shown_with_turns() {
    let sb = Sandbox::new();
    let reply = json!({"json": {"answer": "on 1 December"}});
    let stub = Stub::start(vec![reply.clone(), reply.clone(), reply]).unwrap();
    let model = format!("fast={}", stub.url());
    let (code, v) = sb.json(&[
        "run",
        "fixtures/plans/agent-loop.plan",
        "--model",
        &model,
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    let (code, out, err) = sb.oracle(&["log", &id, "--kind", "step_scheduled"]);
    assert_eq!(code, 0, "{err}");
    for step in ["think[0]", "think[1]", "nested/ask"] {
        assert!(
            out.contains(&format!("step {step} -> llm.chat (turn 1)")),
            "{step}:\n{out}"
        );
    }
    assert!(!out.contains("-> llm.chat (attempt"), "{out}");
    // The run page's timeline says the same.
    let (code, out, err) = sb.oracle(&["report", &id, "--html", "page.html"]);
    assert_eq!(code, 0, "{out}{err}");
    let page = fs::read_to_string(sb.path().join("page.html")).unwrap();
    for step in ["think[0]", "think[1]", "nested/ask"] {
        assert!(
            page.contains(&format!("step {step} -&gt; llm.chat (turn 1)")),
            "{step}"
        );
    }
    assert!(!page.contains("-&gt; llm.chat (attempt"));
}

/// Every file under `dir`, by path relative to it.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    out.sort();
    out
}

/// Issue 54: `oracle replay HOME/runs/ID/` of a model-calling run, from a directory with no
/// home, was refused ("binding `model fast` in run.json changed since the run started": it
/// was checked against a key it made in the current directory) and left `.oracle/seal.key`
/// there. A replay binds no model (every reply is recorded) and reads the run's own home's key
/// for its tools only; it and the other read commands create nothing, here or in the home.
#[test]
fn a_model_run_given_by_path_is_read_and_replayed_from_anywhere_and_nothing_is_created() {
    let sb = Sandbox::new();
    let stub = Stub::start(script("research.jsonl")).unwrap();
    let (code, v) = run(&sb, &stub, &[]);
    assert_eq!(code, 0, "{v}");
    drop(stub);
    let id = v["run"].as_str().unwrap().to_owned();
    let dir = sb.path().join(".oracle/runs").join(&id);
    let given = format!("{}/", dir.display());
    let elsewhere = tempfile::tempdir().unwrap();
    let home_before = files_under(&sb.path().join(".oracle"));
    for args in [
        vec!["replay", given.as_str()],
        vec!["verify", given.as_str()],
        vec!["log", given.as_str()],
        vec!["inspect", given.as_str()],
    ] {
        let (code, out, err) = common::oracle_in(elsewhere.path(), &args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
    assert_eq!(files_under(elsewhere.path()), Vec::<String>::new());
    assert_eq!(files_under(&sb.path().join(".oracle")), home_before);
}

/// A plan whose last (and only) step is an agent step: one turn lists the folder, the next
/// answers.
const AGENT_LAST: &str = r#"plan agent_last version 1

grant llm:chat:fast
grant fs:list:fixtures/docs

research = agent {
  model: "fast",
  instructions: "Reply with JSON only.",
  task: "What is in fixtures/docs?",
  tools: ["fs.list"],
  max_turns: 3,
  output: { type: "object", required: ["answer"] },
}
"#;

/// Issue 53: a run that ends on an agent step names the step's last turn among the parents of
/// its `run_finished` (as the last outcome of any other final step is), and a log recorded
/// before that (its `run_finished` with no parents) still verifies and replays.
#[test]
fn a_run_ending_on_an_agent_step_links_its_end_to_the_last_turn() {
    let sb = Sandbox::new();
    sb.write("plans/agent-last.plan", AGENT_LAST);
    let stub = Stub::start(vec![
        call("c1", "fs.list", json!({"path": "fixtures/docs"})),
        json!({"json": {"answer": "a memo and a menu"}}),
    ])
    .unwrap();
    let model = format!("fast={}", stub.url());
    let (code, v) = sb.json(&["run", "plans/agent-last.plan", "--model", &model, "--json"]);
    assert_eq!(code, 0, "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    let events = sb.events(".oracle", &id);
    let last_turn = events
        .iter()
        .rposition(|e| e.kind == EventKind::ToolReturned && e.payload["step"] == "research")
        .expect("the answering turn returned") as u64;
    let end = events.last().unwrap();
    assert_eq!(end.kind, EventKind::RunFinished);
    assert_eq!(end.parents, vec![last_turn], "{:?}", end.parents);
    let (code, _, err) = sb.oracle(&["verify", &id]);
    assert_eq!(code, 0, "{err}");
    let (code, r) = sb.json(&["replay", &id, "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["result"], "reproduced", "{r}");

    // The same run as oracle recorded it before: `run_finished` without parents, the chain
    // linked over it. It verifies and replays as it did.
    let log = sb.log(".oracle", &id);
    let text = fs::read_to_string(&log).unwrap();
    let mut old: Vec<oracle_core::Event> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    old.last_mut().unwrap().parents.clear();
    oracle_core::event::relink(&mut old).unwrap();
    let bytes: Vec<u8> = old.iter().flat_map(oracle_core::record::encode).collect();
    fs::write(&log, bytes).unwrap();
    let (code, _, err) = sb.oracle(&["verify", &id]);
    assert_eq!(code, 0, "{err}");
    let (code, r) = sb.json(&["replay", &id, "--json"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["result"], "reproduced", "{r}");
    // Any other parents are still a divergence.
    let mut forged = old.clone();
    forged.last_mut().unwrap().parents = vec![1];
    oracle_core::event::relink(&mut forged).unwrap();
    let bytes: Vec<u8> = forged
        .iter()
        .flat_map(oracle_core::record::encode)
        .collect();
    fs::write(&log, bytes).unwrap();
    let (code, r) = sb.json(&["replay", &id, "--json"]);
    assert_eq!(code, 4, "{r}");
}

/// A plan whose agent step may ask a person (`human.ask` among its tools).
const ASKING: &str = r#"plan asking version 1

grant llm:chat:fast

pick = agent {
  model: "fast",
  instructions: "Pick a city for the offsite. Ask a person if you must.",
  task: "Where should the offsite be?",
  tools: ["human.ask"],
  output: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
  },
}
"#;

#[test]
fn an_agents_model_asks_a_person_inside_its_loop_and_the_answer_is_the_tools_result() {
    let sb = Sandbox::new();
    sb.write("plans/asking.plan", ASKING);
    let ask = call(
        "q1",
        "human.ask",
        json!({"question": "Which city?", "schema": {"type": "string"}}),
    );
    let done = json!({"json": {"city": "Oslo"}});
    let stub = Stub::start(vec![ask, done]).unwrap();
    let model = format!("fast={}", stub.url());
    let (code, v) = sb.json(&["run", "plans/asking.plan", "--model", &model, "--json"]);
    assert_eq!(code, 3, "{v}");
    // The run waits on the model's call, with the model's question; the inbox lists it so.
    assert_eq!(v["waiting"]["step"], "pick@1.1", "{v}");
    assert_eq!(v["waiting"]["reason"], "Which city?", "{v}");
    let id = v["run"].as_str().unwrap().to_owned();
    let (code, runs) = sb.json(&["runs", "--json"]);
    assert_eq!(code, 0, "{runs}");
    assert!(runs.to_string().contains("Which city?"), "{runs}");
    // A value the question's schema refuses is refused, and nothing is recorded.
    let before = fs::read(sb.log(".oracle", &id)).unwrap();
    let (code, _) = sb.json(&[
        "resume", &id, "--step", "pick@1.1", "--value", "7", "--json",
    ]);
    assert_eq!(code, 2);
    assert_eq!(fs::read(sb.log(".oracle", &id)).unwrap(), before);
    let (code, v) = sb.json(&[
        "resume",
        &id,
        "--step",
        "pick@1.1",
        "--value",
        r#""Oslo""#,
        "--model",
        &model,
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    // The answer went back to the model as the tool's result, `{answer}`.
    assert_eq!(tool_messages(&stub, 1), [r#"{"answer":"Oslo"}"#]);
    let events = sb.events(".oracle", &id);
    assert!(events.iter().any(|e| e.kind == EventKind::Resumed));
    drop(stub);
    let (code, r) = sb.json(&["replay", &id, "--json"]);
    assert_eq!(code, 0, "{r}");
    let (code, out, err) = sb.oracle(&["verify", &id]);
    assert_eq!(code, 0, "{out}{err}");
}
