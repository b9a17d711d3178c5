//! Governed evolution end to end, on the real binary: an agent whose scripted model (the
//! in-repository stub) proposes a better prompt after a validation failure; `evolve check`
//! against three recorded runs reports which would diverge; `approve` signs; the policy refuses
//! the proposed plan until then; a new run under the approved version completes; `evolve
//! verify` passes, and tampering with the ledger is found at the exact entry
//! (docs/EVOLUTION.md).

use crate::common;

use std::fs;

use common::Sandbox;
use oracle_core::EventKind;
use oracle_llm_stub::Stub;
use serde_json::Value;

const PLAN: &str = "fixtures/plans/support.plan";

fn script(name: &str) -> Vec<Value> {
    let text = fs::read_to_string(common::root().join("fixtures/llm").join(name)).unwrap();
    oracle_llm_stub::parse_script(&text).unwrap()
}

/// Runs `plan` with model `fast` bound to `stub` (if any) and `extra` flags: exit and JSON.
fn run(sb: &Sandbox, plan: &str, stub: Option<&Stub>, extra: &[&str]) -> (i32, Value) {
    let model = stub.map(|s| format!("fast={}", s.url()));
    let mut args = vec!["run", plan, "--json"];
    if let Some(m) = &model {
        args.extend(["--model", m.as_str()]);
    }
    args.extend(extra);
    sb.json(&args)
}

/// The proposing run and two runs that never reach the agent (not urgent).
fn corpus(sb: &Sandbox) {
    let stub = Stub::start(script("support.jsonl")).unwrap();
    let (code, v) = run(sb, PLAN, Some(&stub), &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["run"], "support-1");
    assert_eq!(stub.requests().len(), 3, "prose, the proposal, the answer");
    // The same binding: the agent never runs, so the model is never called.
    for ticket in ["Where is my parcel?", "Please close my account."] {
        let input = format!("ticket={ticket}");
        let extra = ["--input", "urgent=false", "--input", &input];
        let (code, v) = run(sb, PLAN, Some(&stub), &extra);
        assert_eq!(code, 0, "{v}");
    }
}

#[test]
fn a_proposal_is_recorded_where_the_model_made_it_and_changes_nothing() {
    let sb = Sandbox::new();
    corpus(&sb);
    let events = sb.events(".oracle", "support-1");
    let at = events
        .iter()
        .position(|e| e.kind == EventKind::PatchProposed)
        .expect("a patch_proposed event");
    let p = &events[at].payload;
    // Right after the call's outcome, its parent.
    assert_eq!(events[at - 1].kind, EventKind::ToolReturned);
    assert_eq!(events[at - 1].payload["tool"], "evolve.propose");
    assert_eq!(events[at].parents, [at as u64 - 1]);
    assert_eq!(p["step"], "triage@1.1");
    assert_eq!(p["program"], "support");
    assert_eq!(p["base"], events[0].payload["program_hash"]);
    assert!(p["plan"].as_str().unwrap().contains("Reply with JSON only"));
    assert!(
        p["reason"]
            .as_str()
            .unwrap()
            .contains("failed the output schema")
    );
    // The model reply it came from: the turn that asked for the call.
    let model = p["model_call"].as_u64().unwrap() as usize;
    assert_eq!(events[model].kind, EventKind::ToolReturned);
    assert_eq!(events[model].payload["tool"], "llm.chat");
    assert!(events[model].payload["output"]["tool_calls"].is_array());
    // Nothing changed: no upgrade, the run finished under its plan, and it replays offline.
    assert!(!events.iter().any(|e| e.kind == EventKind::PlanUpgraded));
    let (code, out, err) = sb.oracle(&["replay", "support-1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = sb.oracle(&["verify", "support-1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = sb.oracle(&["log", "support-1", "--kind", "patch_proposed"]);
    assert_eq!(code, 0);
    assert!(out.contains("proposed plan support"), "{out}");
}

#[test]
fn a_proposal_that_does_not_compile_is_the_steps_recorded_failure() {
    let sb = Sandbox::new();
    sb.write(
        "bad.plan",
        "plan bad version 1\ngrant evolve:propose:self\n\
         p = evolve.propose { source: \"plan broken version 1\\nx = nope {}\", reason: \"try\" }\n  attempts 1\n  on failure continue\n",
    );
    let (code, v) = run(&sb, "bad.plan", None, &[]);
    assert_eq!(code, 0, "{v}");
    let events = sb.events(".oracle", "bad-1");
    let failed = events
        .iter()
        .find(|e| e.kind == EventKind::ToolFailed)
        .expect("the call failed");
    let error = failed.payload["error"].as_str().unwrap();
    assert!(error.contains("does not compile"), "{error}");
    assert!(error.contains("nope"), "{error}");
    assert!(!events.iter().any(|e| e.kind == EventKind::PatchProposed));
    // Without the grant the plan does not compile.
    sb.write(
        "ungranted.plan",
        "plan ungranted version 1\np = evolve.propose { source: \"x\", reason: \"y\" }\n",
    );
    let (code, out, err) = sb.oracle(&["plan", "check", "ungranted.plan"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("evolve:propose:self"),
        "{out}{err}"
    );
}

#[test]
fn check_approve_run_verify_and_tampering_found_at_the_entry() {
    let sb = Sandbox::new();
    corpus(&sb);
    // A binding for runs that never call the model.
    let stub0 = Stub::start(Vec::new()).unwrap();
    let (code, v) = sb.json(&["evolve", "list", "--json"]);
    assert_eq!(code, 0, "{v}");
    let proposals = v["proposals"].as_array().unwrap();
    assert_eq!(proposals.len(), 1, "{v}");
    assert_eq!(proposals[0]["status"], "pending");
    let id = proposals[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 12);

    // The diff against the base plan.
    let (code, out, err) = sb.oracle(&["evolve", "show", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("-plan support version 1"), "{out}");
    assert!(out.contains("+plan support version 2"), "{out}");
    assert!(
        out.contains("-  instructions: \"Route the support ticket to a team.\","),
        "{out}"
    );
    assert!(
        out.contains("+  instructions: \"Route the support ticket to a team. Reply"),
        "{out}"
    );

    // Three runs checked: the one that reached the agent diverges at its first model call.
    let (code, v) = sb.json(&["evolve", "check", &id, "--corpus-all", "--json"]);
    assert_eq!(code, 0, "{v}");
    let runs = v["report"]["runs"].as_array().unwrap();
    let result = |r: &str| runs.iter().find(|x| x["run"] == r).unwrap().clone();
    assert_eq!(runs.len(), 3, "{v}");
    let first = result("support-1");
    assert_eq!(first["result"], "diverges", "{first}");
    assert_eq!(first["kind"], "tool_called");
    assert_eq!(first["step"], "triage");
    assert!(first["fields"].to_string().contains("input"), "{first}");
    assert_eq!(result("support-2")["result"], "unchanged");
    assert_eq!(result("support-3")["result"], "unchanged");
    assert_eq!(v["report"]["diverges"], 1);
    // The report on disk hashes to what was printed, and a second check writes the same bytes.
    let path = v["path"].as_str().unwrap().to_owned();
    let bytes = fs::read(sb.path().join(&path)).unwrap();
    assert_eq!(
        v["hash"].as_str().unwrap(),
        blake3::hash(&bytes).to_hex().as_str()
    );
    let (_, again) = sb.json(&["evolve", "check", &id, "--corpus-all", "--json"]);
    assert_eq!(again["hash"], v["hash"], "a check is deterministic");
    // Naming runs works too; a run that does not exist is refused.
    let (code, v2) = sb.json(&[
        "evolve",
        "check",
        &id,
        "--corpus",
        "support-2",
        "--out",
        "r2.json",
        "--json",
    ]);
    assert_eq!(code, 0, "{v2}");
    assert_eq!(v2["report"]["unchanged"], 1);
    let (code, _, _) = sb.oracle(&["evolve", "check", &id, "--corpus", "nope-9"]);
    assert_eq!(code, 2);

    // With the policy on, the proposed plan is refused until approved; plain plans run.
    let (code, out, err) = sb.oracle(&["evolve", "show", &id, "--plan"]);
    assert_eq!(code, 0, "{err}");
    sb.write("support-v2.plan", &out);
    let (code, out, err) = sb.oracle(&["keygen", "--out", "approver.key"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, v) = sb.json(&[
        "evolve",
        "policy",
        "--require-approval",
        "on",
        "--approver",
        "approver.key.pub",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["require_approval"], true);
    assert_eq!(v["approvers"].as_array().unwrap().len(), 1, "{v}");
    let (code, v) = run(
        &sb,
        "support-v2.plan",
        Some(&stub0),
        &["--input", "urgent=false"],
    );
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "not_approved");
    assert_eq!(v["error"]["proposal"], id.as_str());
    let (code, v) = run(&sb, PLAN, Some(&stub0), &["--input", "urgent=false"]);
    assert_eq!(code, 0, "{v}");

    // A report of this proposal is required; then the approval is signed.
    sb.write("other.json", "{\"proposal\": \"00\"}");
    let (code, v) = sb.json(&[
        "evolve",
        "approve",
        &id,
        "--key",
        "approver.key",
        "--report",
        "other.json",
        "--json",
    ]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "bad_report");
    let (code, v) = sb.json(&[
        "evolve",
        "approve",
        &id,
        "--key",
        "approver.key",
        "--report",
        &path,
        "--by",
        "ana",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    let entry = &v["entry"];
    assert_eq!(
        entry["entry"], 4,
        "after the two reports checks wrote (the same report twice is recorded once) and the policy"
    );
    assert_eq!(entry["decision"], "approved");
    assert_eq!(entry["report"], blake3::hash(&bytes).to_hex().as_str());
    let (code, v) = sb.json(&["evolve", "reject", &id, "--reason", "late", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "already_decided");

    // The approved version runs (the stub answers at once) and its lineage names the base.
    let kept = entry["plan_hash"].as_str().unwrap();
    let approved = format!(".oracle/evolution/plans/{kept}.plan");
    let stub = Stub::start(script("support-v2.jsonl")).unwrap();
    let (code, v) = run(&sb, &approved, Some(&stub), &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    let (code, v) = sb.json(&["evolve", "lineage", &approved, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["lineage"][0]["base"], proposals[0]["base"]);
    assert_eq!(v["lineage"][0]["by"], "ana");
    let (code, v) = sb.json(&["evolve", "list", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(v["proposals"][0]["status"], "approved");

    // The ledger verifies; an edit is found at its entry, a recomputed hash at the next.
    let (code, v) = sb.json(&["evolve", "verify", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["entries"], 4);
    let ledger = sb.path().join(".oracle/evolution/ledger");
    let good = fs::read_to_string(&ledger).unwrap();
    fs::write(&ledger, good.replace("\"by\":\"ana\"", "\"by\":\"eve\"")).unwrap();
    let (code, v) = sb.json(&["evolve", "verify", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["code"], "ledger_tampered");
    assert_eq!(v["error"]["entry"], 4);
    fs::write(
        &ledger,
        good.replace("\"require_approval\":true", "\"require_approval\":false"),
    )
    .unwrap();
    let (code, v) = sb.json(&["evolve", "verify", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["entry"], 3);
    // A tampered ledger is never extended, and with the policy on it refuses runs.
    let (code, v) = run(&sb, PLAN, Some(&stub0), &["--input", "urgent=false"]);
    assert_eq!(code, 4, "{v}");
    let lines: Vec<&str> = good.lines().collect();
    fs::write(&ledger, format!("{}\n", lines[1])).unwrap();
    let (code, v) = sb.json(&["evolve", "verify", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(
        v["error"]["entry"], 1,
        "a removed first entry breaks the numbering"
    );
    fs::write(&ledger, &good).unwrap();
    let (code, _, _) = sb.oracle(&["evolve", "verify"]);
    assert_eq!(code, 0);
}

/// The proposal of the corpus, checked against every run: its id and the report's path.
fn checked(sb: &Sandbox) -> (String, String) {
    corpus(sb);
    let (_, v) = sb.json(&["evolve", "list", "--json"]);
    let id = v["proposals"][0]["id"].as_str().unwrap().to_owned();
    let (code, v) = sb.json(&["evolve", "check", &id, "--corpus-all", "--json"]);
    assert_eq!(code, 0, "{v}");
    let (code, out, err) = sb.oracle(&["evolve", "show", &id, "--plan"]);
    assert_eq!(code, 0, "{err}");
    sb.write("v2.plan", &out);
    for key in ["ana.key", "eve.key"] {
        let (code, out, err) = sb.oracle(&["keygen", "--out", key]);
        assert_eq!(code, 0, "{out}{err}");
    }
    (id, v["path"].as_str().unwrap().to_owned())
}

/// `oracle evolve approve ID --key KEY --report REPORT`, signed "the-cto" whoever signs.
fn approve(sb: &Sandbox, id: &str, key: &str, report: &str) -> (i32, Value) {
    let args = ["evolve", "approve", id, "--key", key, "--report", report];
    sb.json(&[&args[..], &["--by", "the-cto", "--json"]].concat())
}

fn ledger_of(sb: &Sandbox) -> std::path::PathBuf {
    sb.path().join(".oracle/evolution/ledger")
}

/// The ledger's last entry, an approval, given Eve's signature over the same message with the
/// entry hash recomputed, as a forger who can write the file would; its number.
fn forge_last_signature(sb: &Sandbox) -> u64 {
    let good = fs::read_to_string(ledger_of(sb)).unwrap();
    let last = good.lines().last().unwrap();
    let mut e: oracle_host::ledger::Entry = serde_json::from_str(last).unwrap();
    let eve = oracle_runtime::checkpoint::SecretKey::from_seed(&[9; 32]);
    let message = oracle_host::ledger::approval_message(
        &e.proposal.unwrap(),
        &e.base.unwrap(),
        &e.report.unwrap(),
    );
    e.signature = Some(eve.sign(&message).to_hex());
    e.hash = oracle_host::ledger::entry_hash(&e).unwrap();
    let line = oracle_host::ledger::json_bytes(&serde_json::to_value(&e).unwrap()).unwrap();
    let forged = good.replacen(last, std::str::from_utf8(&line).unwrap(), 1);
    fs::write(ledger_of(sb), forged).unwrap();
    e.entry
}

/// Issue 53, item 4: with approval required, only the keys the policy names approve (a key
/// made a second earlier, whatever its `by`, is refused with `not_an_approver`, and nothing is
/// written); with none named, no approval is taken. And the Ed25519 check on every read of
/// the ledger (item 11): an approval whose signature is forged and whose entry hash is
/// recomputed fails `evolve verify` at its entry, and the plan it approved is refused.
#[test]
fn only_named_approvers_approve_and_a_forged_signature_is_found_on_read() {
    let sb = Sandbox::new();
    let (id, report) = checked(&sb);
    let stub0 = Stub::start(Vec::new()).unwrap();
    let v2 = |sb: &Sandbox| run(sb, "v2.plan", Some(&stub0), &["--input", "urgent=false"]);
    let (code, v) = sb.json(&["evolve", "policy", "--require-approval", "on", "--json"]);
    assert_eq!((code, &v["approvers"]), (0, &serde_json::json!([])), "{v}");
    let before = fs::read(ledger_of(&sb)).unwrap();
    let (code, v) = approve(&sb, &id, "eve.key", &report);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "not_an_approver");
    assert_eq!(v["error"]["approvers"], 0);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--approver"),
        "{v}"
    );
    // Ana is named (the policy stays on): Eve's key is still refused, Ana's is taken.
    let args = ["evolve", "policy", "--approver", "ana.key.pub", "--json"];
    let (code, v) = sb.json(&args);
    assert_eq!(
        (code, &v["require_approval"]),
        (0, &Value::Bool(true)),
        "{v}"
    );
    let ana = fs::read_to_string(sb.path().join("ana.key.pub")).unwrap();
    assert!(
        ana.contains(v["approvers"][0].as_str().unwrap()),
        "{v} {ana}"
    );
    let before_eve = fs::read(ledger_of(&sb)).unwrap();
    assert!(before_eve.len() > before.len(), "the policy entry");
    let (code, v) = approve(&sb, &id, "eve.key", &report);
    assert_eq!(
        (code, &v["error"]["code"]),
        (2, &Value::from("not_an_approver"))
    );
    assert_eq!(v["error"]["approvers"], 1);
    assert_eq!(
        fs::read(ledger_of(&sb)).unwrap(),
        before_eve,
        "nothing written"
    );
    let (code, v) = v2(&sb);
    assert_eq!(
        (code, &v["error"]["code"]),
        (2, &Value::from("not_approved"))
    );
    let (code, v) = approve(&sb, &id, "ana.key", &report);
    assert_eq!(code, 0, "{v}");
    let (code, v) = v2(&sb);
    assert_eq!(code, 0, "{v}");
    let entry = forge_last_signature(&sb);
    let (code, v) = sb.json(&["evolve", "verify", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["code"], "ledger_tampered");
    assert_eq!(v["error"]["entry"], entry);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("signature"),
        "{v}"
    );
    let (code, v) = v2(&sb);
    assert_eq!(code, 4, "the forged approval lets nothing run: {v}");
}

/// Issue 53, item 4: `evolve approve` signs only a report a check of this home recorded in
/// the ledger: a copy edited by hand, or the kept report changed in place, is refused
/// (`report_not_recorded`), with or without `--out`, and nothing is written. An approval by a
/// key that was not named (made while the policy named none) decides nothing once approvers
/// are named: the plan is refused until a named approver approves it.
#[test]
fn an_edited_report_is_never_signed_and_an_unnamed_keys_approval_does_not_count() {
    let sb = Sandbox::new();
    let (id, report) = checked(&sb);
    let kept = sb.path().join(&report);
    let text = fs::read_to_string(&kept).unwrap();
    let edited = text.replace("\"diverges\":1", "\"diverges\":0");
    assert_ne!(edited, text, "{text}");
    sb.write("edited.json", &edited);
    let before = fs::read(ledger_of(&sb)).unwrap();
    let (code, v) = approve(&sb, &id, "ana.key", "edited.json");
    assert_eq!(
        (code, &v["error"]["code"]),
        (2, &Value::from("report_not_recorded")),
        "{v}"
    );
    let args = [
        "evolve",
        "approve",
        &id,
        "--key",
        "ana.key",
        "--report",
        "edited.json",
    ];
    let (code, v) = sb.json(&[&args[..], &["--out", "a.json", "--json"]].concat());
    assert_eq!(
        (code, &v["error"]["code"]),
        (2, &Value::from("report_not_recorded")),
        "{v}"
    );
    assert!(!sb.path().join("a.json").exists(), "nothing signed");
    fs::write(&kept, &edited).unwrap();
    let (code, v) = approve(&sb, &id, "ana.key", &report);
    assert_eq!(
        (code, &v["error"]["code"]),
        (2, &Value::from("report_not_recorded")),
        "{v}"
    );
    assert_eq!(fs::read(ledger_of(&sb)).unwrap(), before, "nothing written");
    fs::write(&kept, &text).unwrap();
    // No policy yet: Eve's approval is a record. Once Ana is named it counts for nothing.
    let (code, v) = approve(&sb, &id, "eve.key", &report);
    assert_eq!(code, 0, "{v}");
    let args = [
        "evolve",
        "policy",
        "--require-approval",
        "on",
        "--approver",
        "ana.key.pub",
    ];
    let (code, out, err) = sb.oracle(&args);
    assert_eq!(code, 0, "{out}{err}");
    let stub0 = Stub::start(Vec::new()).unwrap();
    let (code, v) = run(&sb, "v2.plan", Some(&stub0), &["--input", "urgent=false"]);
    assert_eq!(
        (code, &v["error"]["code"]),
        (2, &Value::from("not_approved")),
        "{v}"
    );
    let (_, v) = sb.json(&["evolve", "list", "--json"]);
    assert_eq!(v["proposals"][0]["status"], "pending", "{v}");
    let (code, v) = approve(&sb, &id, "ana.key", &report);
    assert_eq!(code, 0, "{v}");
    let (code, v) = run(&sb, "v2.plan", Some(&stub0), &["--input", "urgent=false"]);
    assert_eq!(code, 0, "{v}");
}
