//! Nothing outside the hash chain steers an effect (issue 32, items 1 to 3), end to end with the
//! real binary: a run's bindings in `run.json` (model URL and key variable, secret variables,
//! tool directories, working directory) and its resume points are sealed with the home's key,
//! so an edit by someone who can write the run directory but holds no key is refused, naming
//! what changed, and nothing reaches the address or directory the edit named.

use crate::common;

use std::fs;

use common::Sandbox;
use oracle_llm_stub::Stub;
use serde_json::{Value, json};

/// A plan that asks a person first, then calls model `m`: the run suspends before any call, so
/// the resume is the first thing that could reach a model.
fn ask_then_call(sb: &Sandbox) -> String {
    sb.write(
        "plans/ask.plan",
        "plan ask version 1\ngrant llm:chat:m\n\
         go = human.ask { question: \"call the model?\" }\n\
         call = llm.chat { model: \"m\", messages: [{ role: \"user\", content: \"hi\" }] }\n  after go\n",
    );
    "plans/ask.plan".into()
}

fn run_json(sb: &Sandbox, run: &str) -> (std::path::PathBuf, Value) {
    let path = sb.path().join(".oracle/runs").join(run).join("run.json");
    let v = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    (path, v)
}

/// Item 1: editing only `run.json` (a model's URL and `key_env`) once made the next resume send
/// any environment variable of whoever resumed as `Authorization: Bearer` to any URL. Now the
/// resume is refused, naming the binding, before anything is called or recorded; given again
/// on the command line, the binding is the operator's and the resume goes on.
#[test]
fn an_edited_model_binding_is_refused_and_nothing_is_sent() {
    let sb = Sandbox::new();
    let honest = Stub::start(vec![json!({"content": "hello"})]).unwrap();
    let attacker = Stub::start(vec![json!({"content": "stolen"})]).unwrap();
    let plan = ask_then_call(&sb);
    let (code, v) = sb.json(&[
        "run",
        &plan,
        "--model",
        &format!("m={}", honest.url()),
        "--json",
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let (path, mut meta) = run_json(&sb, &run);
    assert!(meta["seal"]["model m"].is_string(), "{meta}");
    meta["models"]["m"]["url"] = json!(attacker.url());
    meta["models"]["m"]["key_env"] = json!("ORACLE_VICTIM_SECRET");
    fs::write(&path, meta.to_string()).unwrap();
    let log = sb.log(".oracle", &run);
    let before = fs::read(&log).unwrap();

    let out = sb
        .command(&[
            "resume", &run, "--step", "go", "--value", "\"yes\"", "--json",
        ])
        .env("ORACLE_VICTIM_SECRET", "s3cr3t-the-victim-holds-0123456789")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(2), "{v}");
    assert_eq!(v["error"]["code"], "binding_unsealed", "{v}");
    assert_eq!(v["error"]["binding"], "model m", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("binding `model m`"), "{message}");
    assert!(message.contains("--model m=URL"), "{message}");
    assert!(
        attacker.requests().is_empty(),
        "nothing reached the edited URL"
    );
    assert!(honest.requests().is_empty());
    assert_eq!(fs::read(&log).unwrap(), before, "nothing recorded");

    // Given again, the binding is the operator's own: the resume calls the honest model.
    let (code, v) = sb.json(&[
        "resume",
        &run,
        "--step",
        "go",
        "--value",
        "\"yes\"",
        "--model",
        &format!("m={}", honest.url()),
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(honest.requests().len(), 1);
    assert!(attacker.requests().is_empty());
}

/// Item 1, the other bindings: a secret's variable and the tool directories, edited, are each
/// refused by name. An untouched run resumes as before (the seal holds).
#[test]
fn an_edited_secret_or_tools_binding_is_refused_by_name() {
    let sb = Sandbox::new();
    let (code, v) = sb.json(&["run", "fixtures/plans/escalation.plan", "--json"]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let (path, original) = run_json(&sb, &run);
    for (edit, binding) in [
        (json!({"secrets": {"TOKEN": "HOME"}}), "secret TOKEN"),
        (json!({"tools": ["/tmp"]}), "tools"),
    ] {
        let mut meta = original.clone();
        for (k, val) in edit.as_object().unwrap() {
            meta[k] = val.clone();
        }
        fs::write(&path, meta.to_string()).unwrap();
        let (code, v) = sb.json(&[
            "resume",
            &run,
            "--step",
            "total",
            "--value",
            r#"{"value":{"total":1250}}"#,
            "--json",
        ]);
        assert_eq!(code, 2, "{v}");
        assert_eq!(v["error"]["code"], "binding_unsealed", "{v}");
        assert_eq!(v["error"]["binding"], binding, "{v}");
    }
    fs::write(&path, original.to_string()).unwrap();
    let (code, v) = sb.json(&[
        "resume",
        &run,
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":1250}}"#,
        "--json",
    ]);
    assert_eq!(code, 3, "the sealed bindings hold: {v}");
}

/// Item 3: a resume point whose saved step output was changed and whose hash was computed
/// again (anyone who can write the run directory can do that) once made `resume` act on the
/// forged value. A point is now sealed with the home's key: the forged one is refused with a
/// warning and the resume re-derives the run from the log, writing the recorded value.
#[test]
fn a_forged_resume_point_is_ignored_with_a_warning() {
    let sb = Sandbox::new();
    // Steps between the value and the question, so that a resume point is due after the value
    // is in the state (points are spaced by log bytes: 8 per byte of the last point).
    let mut plan = String::from(
        "plan point version 1\ngrant fs:write:out/**\n\
         value = json.parse { text: \"{\\\"amount\\\": 10}\" }\n",
    );
    let mut last = "value".to_owned();
    for i in 0..24 {
        plan.push_str(&format!(
            "p{i} = json.parse {{ text: \"[{i}]\" }}\n  after {last}\n"
        ));
        last = format!("p{i}");
    }
    plan.push_str(&format!(
        "go = human.ask {{ question: \"write it?\" }}\n  after {last}\n\
         save = fs.write {{ path: \"out/amount.txt\", content: \"amount \" + value.value.amount }}\n  after go\n"
    ));
    sb.write("plans/point.plan", &plan);
    let (code, v) = sb.json(&["run", "plans/point.plan", "--snapshot-every", "1", "--json"]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_owned();
    let points = sb.path().join(".oracle/runs").join(&run).join("snapshots");
    let newest = fs::read_dir(&points)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".resume.json"))
        .max()
        .expect("a resume point was written");
    let text = fs::read_to_string(&newest).unwrap();
    let (header, body) = text.split_once('\n').unwrap();
    assert!(
        body.contains("\"amount\":10"),
        "the newest point holds the value: {body}"
    );
    let forged_body = body.replace("\"amount\":10", "\"amount\":99999");
    // The forger's best: a header with a fresh MAC under a key of their own.
    let forger = oracle_runtime::seal::SealKey::from_bytes([5; 32]);
    let mac = forger.mac("oracle v1 resume point", forged_body.as_bytes());
    let mut h: Value = serde_json::from_str(header).unwrap();
    h["mac"] = json!(mac);
    fs::write(&newest, format!("{h}\n{forged_body}")).unwrap();

    let (code, out, err) = sb.oracle(&["resume", &run, "--step", "go", "--value", "true"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("resume point after event"), "{err}");
    assert!(err.contains("MAC does not hold"), "{err}");
    assert_eq!(
        fs::read_to_string(sb.path().join("out/amount.txt")).unwrap(),
        "amount 10"
    );
    let (code, _, err) = sb.oracle(&["replay", &run]);
    assert_eq!(code, 0, "{err}");
}
