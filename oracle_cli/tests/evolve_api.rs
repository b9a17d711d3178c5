//! Governed evolution through `oracle serve` (docs/API.md, "Proposals"; docs/EVOLUTION.md),
//! end to end on the real binary: list and read proposals, check one against recorded runs,
//! reject by the token's name, and approve by uploading an approval signed with `oracle evolve
//! approve --out` (the key stays with the approver); a tampered approval is refused and
//! nothing is appended.

use crate::common;
use crate::web;

use std::path::Path;

use common::Sandbox;
use oracle_llm_stub::Stub;
use serde_json::{Value, json};
use web::Killed;

/// A running `oracle serve` over the sandbox's home; killed when dropped.
struct Server {
    _child: Killed,
    base: String,
}

impl Server {
    fn start(dir: &Path, args: &[&str]) -> Server {
        let (child, base) = web::serve(dir, args);
        Server {
            _child: child,
            base,
        }
    }

    /// One request with `token`: the status and the body as JSON.
    fn call(&self, method: &str, path: &str, token: &str, body: Option<&Value>) -> (u16, Value) {
        web::call(&self.base, method, path, token, body)
    }
}

/// The proposing run of `fixtures/plans/support.plan` and two that never reach the agent.
fn corpus(sb: &Sandbox) {
    let text = std::fs::read_to_string(common::root().join("fixtures/llm/support.jsonl")).unwrap();
    let stub = Stub::start(oracle_llm_stub::parse_script(&text).unwrap()).unwrap();
    let model = format!("fast={}", stub.url());
    let plan = "fixtures/plans/support.plan";
    let (code, v) = sb.json(&["run", plan, "--json", "--model", &model]);
    assert_eq!(code, 0, "{v}");
    for ticket in ["Where is my parcel?", "Please close my account."] {
        let input = format!("ticket={ticket}");
        let args = [
            "run",
            plan,
            "--json",
            "--model",
            &model,
            "--input",
            "urgent=false",
            "--input",
            &input,
        ];
        let (code, v) = sb.json(&args);
        assert_eq!(code, 0, "{v}");
    }
}

fn token(sb: &Sandbox, name: &str) -> String {
    let (code, out, err) = sb.oracle(&["serve", "token", "add", name]);
    assert_eq!(code, 0, "{err}");
    out.trim().to_owned()
}

fn ledger_bytes(sb: &Sandbox) -> Vec<u8> {
    std::fs::read(sb.path().join(".oracle/evolution/ledger")).unwrap_or_default()
}

fn assert_error(status: u16, v: &Value, want: u16, code: &str) {
    assert_eq!(status, want, "{v}");
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
}

#[test]
fn proposals_are_listed_checked_and_approved_by_a_signed_upload() {
    let sb = Sandbox::new();
    corpus(&sb);
    let alice = token(&sb, "alice");
    let s = Server::start(sb.path(), &[]);

    // The list is the command line's.
    let (status, v) = s.call("GET", "/api/v1/proposals", &alice, None);
    assert_eq!(status, 200, "{v}");
    let (_, cli) = sb.json(&["evolve", "list", "--json"]);
    assert_eq!(v, cli);
    let id = v["proposals"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(v["proposals"][0]["status"], "pending");

    // One proposal, with its diff; no report yet.
    let (status, v) = s.call("GET", &format!("/api/v1/proposals/{id}"), &alice, None);
    assert_eq!(status, 200, "{v}");
    let p = &v["proposal"];
    assert!(
        p["diff"]
            .as_str()
            .unwrap()
            .contains("+plan support version 2"),
        "{p}"
    );
    assert_eq!(p["decision"], Value::Null);
    assert_eq!(p["reports"], json!([]));
    let (status, v) = s.call("GET", "/api/v1/proposals/0000ffff", &alice, None);
    assert_error(status, &v, 404, "unknown_proposal");

    // A check of all runs under the base: the report and its hash.
    let check = format!("/api/v1/proposals/{id}/check");
    let (status, v) = s.call("POST", &check, &alice, Some(&json!({"corpus": "all"})));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["report"]["diverges"], 1, "{v}");
    assert_eq!(v["report"]["unchanged"], 2, "{v}");
    let hash = v["hash"].as_str().unwrap().to_owned();
    let file = sb
        .path()
        .join(".oracle/evolution/reports")
        .join(v["file"].as_str().unwrap());
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(blake3::hash(&bytes).to_hex().as_str(), hash);
    let (status, v) = s.call(
        "POST",
        &check,
        &alice,
        Some(&json!({"corpus": ["support-2"]})),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["report"]["unchanged"], 1, "{v}");
    let (status, v) = s.call("POST", &check, &alice, Some(&json!({"corpus": ["nope-9"]})));
    assert_error(status, &v, 404, "not_found");
    let (status, v) = s.call("POST", &check, &alice, Some(&json!({"corpus": "some"})));
    assert_error(status, &v, 400, "usage");
    let (_, v) = s.call("GET", &format!("/api/v1/proposals/{id}"), &alice, None);
    assert_eq!(v["proposal"]["reports"].as_array().unwrap().len(), 2, "{v}");

    // The approver signs on their own machine: nothing is appended there.
    let (code, _, err) = sb.oracle(&["keygen", "--out", "approver.key"]);
    assert_eq!(code, 0, "{err}");
    let report = file.to_str().unwrap();
    let args = [
        "evolve",
        "approve",
        &id,
        "--key",
        "approver.key",
        "--report",
        report,
    ];
    // The ledger holds the two reports the checks wrote, and nothing else.
    let checks = ledger_bytes(&sb);
    assert_eq!(checks.iter().filter(|b| **b == b'\n').count(), 2);
    let (code, out, err) =
        sb.oracle(&[&args[..], &["--by", "carol", "--out", "approval.json"]].concat());
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(ledger_bytes(&sb), checks, "signing appends nothing");
    let signed: Value =
        serde_json::from_slice(&std::fs::read(sb.path().join("approval.json")).unwrap()).unwrap();
    assert_eq!(signed["report"], hash.as_str());

    // A tampered approval is refused and nothing is appended: another report hash (the
    // signature no longer covers it), another signature, a report not kept here, another
    // proposal's hash.
    let approval = format!("/api/v1/proposals/{id}/approval");
    let mut other_report = signed.clone();
    other_report["report"] = json!(blake3::hash(b"x").to_hex().as_str());
    let mut bad_sig = signed.clone();
    let sig = signed["signature"].as_str().unwrap();
    let flipped = if sig.starts_with('0') { "1" } else { "0" };
    bad_sig["signature"] = json!(format!("{flipped}{}", &sig[1..]));
    let mut other_proposal = signed.clone();
    other_proposal["proposal"] = json!("00".repeat(32));
    let mut extra = signed.clone();
    extra["approved"] = json!(true);
    for bad in [&other_report, &bad_sig, &other_proposal] {
        let (status, v) = s.call("POST", &approval, &alice, Some(bad));
        assert_error(status, &v, 422, "bad_approval");
    }
    let (status, v) = s.call("POST", &approval, &alice, Some(&extra));
    assert_error(status, &v, 400, "usage");
    assert_eq!(
        ledger_bytes(&sb),
        checks,
        "a refused approval appends nothing"
    );

    // The signed file as written is accepted and appended; it verifies; a second is refused.
    let (status, v) = s.call("POST", &approval, &alice, Some(&signed));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["entry"]["decision"], "approved");
    assert_eq!(v["entry"]["by"], "carol");
    assert_eq!(v["entry"]["signature"], signed["signature"]);
    assert_eq!(v["uploaded_by"], "alice");
    let (code, out, err) = sb.oracle(&["evolve", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
    let (status, v) = s.call("POST", &approval, &alice, Some(&signed));
    assert_error(status, &v, 409, "already_decided");
    let (_, v) = s.call("GET", &format!("/api/v1/proposals/{id}"), &alice, None);
    assert_eq!(v["proposal"]["status"], "approved", "{v}");
    assert_eq!(v["proposal"]["decision"]["entry"], 3, "{v}");
    assert!(sb.path().join(".oracle/evolution/plans").is_dir());
}

#[test]
fn a_rejection_through_the_api_records_the_token_as_who() {
    let sb = Sandbox::new();
    corpus(&sb);
    let bob = token(&sb, "bob");
    let s = Server::start(sb.path(), &[]);
    let (_, v) = s.call("GET", "/api/v1/proposals", &bob, None);
    let id = v["proposals"][0]["id"].as_str().unwrap().to_owned();
    let reject = format!("/api/v1/proposals/{id}/reject");
    let (status, v) = s.call("POST", &reject, &bob, Some(&json!({"reason": ""})));
    assert_error(status, &v, 400, "usage");
    let (status, v) = s.call("POST", &reject, &bob, Some(&json!({"reason": "too broad"})));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["entry"]["decision"], "rejected");
    assert_eq!(v["entry"]["by"], "bob");
    assert_eq!(v["entry"]["reason"], "too broad");
    let (status, v) = s.call("POST", &reject, &bob, Some(&json!({"reason": "again"})));
    assert_error(status, &v, 409, "already_decided");
    // Writes need a token.
    let (status, v) = s.call("POST", &reject, "wrong", Some(&json!({"reason": "x"})));
    assert_eq!(status, 401, "{v}");
    let (code, out, err) = sb.oracle(&["evolve", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// The web inbox lists an undecided proposal with its diff (escaped), its last check and the
/// commands that approve it; a decided one leaves the inbox.
#[test]
fn the_inbox_page_shows_undecided_proposals_with_their_diff_and_check() {
    let sb = Sandbox::new();
    corpus(&sb);
    let (_, v) = sb.json(&["evolve", "list", "--json"]);
    let id = v["proposals"][0]["id"].as_str().unwrap().to_owned();
    let s = Server::start(sb.path(), &["--read-open"]);
    let page = || {
        let mut r = ureq::get(&format!("{}/inbox", s.base)).call().unwrap();
        r.body_mut().read_to_string().unwrap()
    };
    let html = page();
    assert!(html.contains("id=\"proposals-h\">Proposals</h2>"), "{html}");
    assert!(html.contains(&format!("id=\"proposal-{id}\"")), "{html}");
    assert!(html.contains("+plan support version 2"), "{html}");
    assert!(
        html.contains("instructions: &quot;Route the support ticket"),
        "{html}"
    );
    assert!(html.contains("Not checked yet"), "{html}");
    assert!(
        html.contains(&format!("oracle evolve approve {id} --key KEY")),
        "{html}"
    );
    assert!(
        html.contains(&format!("action=\"/proposals/{id}/reject\"")),
        "{html}"
    );
    let (code, v) = sb.json(&["evolve", "check", &id, "--corpus-all", "--json"]);
    assert_eq!(code, 0, "{v}");
    let html = page();
    assert!(
        html.contains("Last check: 2 unchanged, 1 diverge, 0 cannot be checked"),
        "{html}"
    );
    assert!(html.contains(v["hash"].as_str().unwrap()), "{html}");
    let (code, _, err) = sb.oracle(&["evolve", "reject", &id, "--reason", "no"]);
    assert_eq!(code, 0, "{err}");
    let html = page();
    assert!(
        html.contains("No plan change is waiting for a decision."),
        "{html}"
    );
}

/// An approval of `signed`'s proposal and report, signed by `key` as `by`: what anyone can
/// make without the server, as an attacker holding a token would.
fn signed_by(signed: &Value, key: &oracle_runtime::checkpoint::SecretKey, report: &str) -> Value {
    let hash = |k: &str| oracle_core::Hash::from_hex(signed[k].as_str().unwrap()).unwrap();
    let report = oracle_core::Hash::from_hex(report).unwrap();
    let message = oracle_host::ledger::approval_message(&hash("proposal"), &hash("base"), &report);
    let mut v = signed.clone();
    v["report"] = json!(report.to_hex());
    v["public_key"] = json!(key.public_key().to_hex());
    v["signature"] = json!(key.sign(&message).to_hex());
    v["by"] = json!("the-cto");
    v
}

/// Issue 53, item 4, through the API: with the policy naming Ana's key, a token holder's
/// upload signed by a key made a second earlier (`by: "the-cto"`) is refused (403
/// `not_an_approver`), as is Ana's signature over a report no check here recorded (an edited
/// one: 422 `report_not_recorded`); nothing is appended and the proposed plan stays refused.
/// Ana's signed file is taken.
#[test]
fn an_upload_signed_by_a_key_the_policy_does_not_name_is_refused() {
    let sb = Sandbox::new();
    corpus(&sb);
    let alice = token(&sb, "alice");
    let (code, _, err) = sb.oracle(&["keygen", "--out", "ana.key"]);
    assert_eq!(code, 0, "{err}");
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
    let s = Server::start(sb.path(), &[]);
    let (_, v) = s.call("GET", "/api/v1/proposals", &alice, None);
    let id = v["proposals"][0]["id"].as_str().unwrap().to_owned();
    let check = format!("/api/v1/proposals/{id}/check");
    let (status, v) = s.call("POST", &check, &alice, Some(&json!({"corpus": "all"})));
    assert_eq!(status, 200, "{v}");
    let report = sb
        .path()
        .join(".oracle/evolution/reports")
        .join(v["file"].as_str().unwrap());
    let args = ["evolve", "approve", &id, "--key", "ana.key", "--report"];
    let (code, out, err) =
        sb.oracle(&[&args[..], &[report.to_str().unwrap(), "--out", "a.json"]].concat());
    assert_eq!(code, 0, "{out}{err}");
    let signed: Value =
        serde_json::from_slice(&std::fs::read(sb.path().join("a.json")).unwrap()).unwrap();
    let before = ledger_bytes(&sb);
    let approval = format!("/api/v1/proposals/{id}/approval");
    let eve = oracle_runtime::checkpoint::SecretKey::generate().unwrap();
    let forged = signed_by(&signed, &eve, signed["report"].as_str().unwrap());
    let (status, v) = s.call("POST", &approval, &alice, Some(&forged));
    assert_error(status, &v, 403, "not_an_approver");
    let edited = std::fs::read_to_string(&report)
        .unwrap()
        .replace("\"diverges\":1", "\"diverges\":0");
    let edited_hash = blake3::hash(edited.as_bytes()).to_hex();
    let ana_text = std::fs::read_to_string(sb.path().join("ana.key")).unwrap();
    let ana = oracle_runtime::checkpoint::SecretKey::parse(&ana_text).unwrap();
    let unrecorded = signed_by(&signed, &ana, edited_hash.as_str());
    let (status, v) = s.call("POST", &approval, &alice, Some(&unrecorded));
    assert_error(status, &v, 422, "report_not_recorded");
    assert_eq!(
        ledger_bytes(&sb),
        before,
        "a refused approval appends nothing"
    );
    let (status, v) = s.call("GET", &format!("/api/v1/proposals/{id}"), &alice, None);
    assert_eq!(
        (status, &v["proposal"]["status"]),
        (200, &json!("pending")),
        "{v}"
    );
    let (status, v) = s.call("POST", &approval, &alice, Some(&signed));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["entry"]["public_key"], signed["public_key"]);
}
