//! End to end: `oracle report RUN --html FILE` on real runs (a run waiting on a person, a run
//! with a memory conflict, a run whose values are hostile markup), and the inbox built by
//! `oracle_html` from the same home, whose forms' answers `oracle resume` takes.

use crate::common;

use std::fs;
use std::path::Path;

use common::Sandbox;

/// What a self-contained page must not hold: scripts, anything fetched, links out.
fn assert_self_contained(html: &str) {
    let lower = html.to_ascii_lowercase();
    for banned in [
        "http://", "https://", "<script", " src=", "<link", "<iframe", "<form", "@import",
    ] {
        assert!(!lower.contains(banned), "`{banned}` in the report");
    }
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("Content-Security-Policy"));
    for (i, _) in html.match_indices("href=\"") {
        assert!(html[i + 6..].starts_with('#'), "a link out: {}", &html[i..]);
    }
}

fn report(sb: &Sandbox, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    sb.oracle(&all)
}

fn read(sb: &Sandbox, rel: &str) -> String {
    fs::read_to_string(sb.path().join(rel)).unwrap()
}

#[test]
fn a_run_waiting_on_a_person_reports_its_timeline_dag_state_and_waiting_step() {
    let sb = Sandbox::new();
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/escalation.plan"]);
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = sb.oracle(&[
        "resume",
        "escalation-1",
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":1250}}"#,
    ]);
    assert_eq!(code, 3, "{err}");

    let (code, out, err) = report(&sb, &["escalation-1", "--html", "e.html"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("escalation-1 written to e.html"), "{out}");
    let html = read(&sb, "e.html");
    assert_self_contained(&html);
    // The timeline, every event of it.
    let events = sb.events(".oracle", "escalation-1");
    assert!(html.contains("<table id=\"events\">"));
    for e in &events {
        assert!(
            html.contains(&format!("<tr id=\"event-{}\">", e.seq)),
            "{}",
            e.seq
        );
    }
    assert!(html.contains("<code>run_started</code>"));
    // The latency view: each step that ran, in the order it started.
    assert!(html.contains("<h2 id=\"latency-h\">Latency</h2>"));
    let (read_row, total_row) = (
        html.find("<tr><th scope=\"row\"><code>read</code>"),
        html.find("<tr><th scope=\"row\"><code>total</code>"),
    );
    assert!(
        read_row.is_some() && read_row < total_row,
        "read, then total"
    );
    // The DAG: read and total done (total answered by hand), confirm suspended on its question.
    assert!(html.contains("<svg "));
    assert!(html.contains("<g class=\"node done\" id=\"dag-step-read\">"));
    assert!(html.contains("<g class=\"node done\" id=\"dag-step-total\">"));
    assert!(html.contains("<g class=\"node suspended\" id=\"dag-step-confirm\">"));
    // The state after the last event, and what the run waits on.
    assert!(html.contains(&format!("State after event {} ", events.len() - 1)));
    assert!(html.contains("<code>step/confirm</code>"));
    assert!(html.contains("step <code>confirm</code>"));
    assert!(html.contains("The invoice total is 1250. Approve payment?"));
    assert!(html.contains("No claims recorded."));

    // An existing file is kept: exit 2, the same bytes.
    let (code, _, err) = report(&sb, &["escalation-1", "--html", "e.html", "--at", "3"]);
    assert_eq!(code, 2);
    assert!(err.contains("e.html exists: give --force"), "{err}");
    assert_eq!(read(&sb, "e.html"), html);
    // --force replaces it; --at shows the run as it was then.
    let (code, _, err) = report(
        &sb,
        &["escalation-1", "--html", "e.html", "--at", "3", "--force"],
    );
    assert_eq!(code, 0, "{err}");
    let at3 = read(&sb, "e.html");
    assert!(at3.contains("State after event 3 "), "{at3}");
    assert!(at3.contains("<g class=\"node not-started\" id=\"dag-step-confirm\">"));
    assert_self_contained(&at3);
    // The same run and event give the same bytes.
    let (code, _, _) = report(&sb, &["escalation-1", "--html", "again.html", "--at", "3"]);
    assert_eq!(code, 0);
    assert_eq!(read(&sb, "again.html"), at3);

    // Refusals: an event past the log, an unknown run; nothing written.
    let (code, _, err) = report(&sb, &["escalation-1", "--html", "x.html", "--at", "9999"]);
    assert_eq!(code, 2);
    assert!(err.contains("there is no event 9999"), "{err}");
    let (code, _, err) = report(&sb, &["escalation-9", "--html", "x.html"]);
    assert_eq!(code, 2);
    assert!(err.contains("did you mean `escalation-1`"), "{err}");
    assert!(!sb.path().join("x.html").exists());
    // --json: one object.
    let (code, v) = sb.json(&["report", "escalation-1", "--html", "j.html", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(v["ok"], true);
    assert_eq!(v["run"], "escalation-1");
    assert_eq!(v["events"], events.len());
}

#[test]
fn a_memory_conflict_is_reported_with_both_claims_and_their_provenance() {
    let sb = Sandbox::new();
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/adjudication.plan"]);
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = report(&sb, &["adjudication-1", "--html", "a.html"]);
    assert_eq!(code, 0, "{err}");
    let html = read(&sb, "a.html");
    assert_self_contained(&html);
    assert!(html.contains("patient-17 / allergy"));
    assert!(html.contains("(pending adjudication: adj-15)"), "{html}");
    for provenance in ["external_first_hand", "recall_reentry", "model_derived"] {
        assert!(
            html.contains(&format!("<td>{provenance}</td>")),
            "{provenance}"
        );
    }
    assert!(html.contains("queued for adjudication"));
    assert!(html.contains("<tr id=\"request-adj-15\">"));
    assert!(html.contains("&quot;penicillin&quot;") && html.contains("&quot;none&quot;"));
    // The step waiting on the belief is suspended; the ones after it have not started.
    assert!(html.contains("<g class=\"node suspended\" id=\"dag-step-allergy\">"));
    assert!(html.contains("<g class=\"node not-started\" id=\"dag-step-history\">"));

    // After the verdict the line is resolved and the run completed.
    let (code, _, err) = sb.oracle(&[
        "adjudicate",
        "adjudication-1",
        "adj-15",
        "--verdict",
        "affirm",
        "--evidence",
        "external_first_hand",
        "--note",
        "referral <confirmed> & \"checked\"",
        "--resume",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = report(&sb, &["adjudication-1", "--html", "a.html", "--force"]);
    assert_eq!(code, 0, "{err}");
    let html = read(&sb, "a.html");
    assert_self_contained(&html);
    assert!(html.contains("<span class=\"badge status-resolved\">resolved</span>"));
    assert!(html.contains("affirm (event "));
    assert!(html.contains("referral &lt;confirmed&gt; &amp; &quot;checked&quot;"));
    assert!(html.contains("<g class=\"node done\" id=\"dag-step-history\">"));
    assert!(html.contains("<g class=\"node skipped\" id=\"dag-step-azithromycin\">"));
}

/// A plan controls its inputs, values, questions and claims: all of it is shown, none of it
/// is markup.
#[test]
fn hostile_values_in_a_run_render_inert() {
    let sb = Sandbox::new();
    sb.write(
        "hostile.plan",
        r#"plan hostile version 1
input note: string = "<script>alert(\"x\")</script> & 'q' </pre><b onclick=\"x()\">"
split = text.split { text: note, separator: "&" }
said = memory.assert { subject: note, predicate: "said", value: note, provenance: "user_asserted" }
ask = human.ask { question: note }
  after split
"#,
    );
    let (code, _, err) = sb.oracle(&["run", "hostile.plan"]);
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = report(&sb, &["hostile-1", "--html", "h.html"]);
    assert_eq!(code, 0, "{err}");
    let html = read(&sb, "h.html");
    assert_self_contained(&html);
    assert!(!html.contains("<b onclick"), "markup from the log");
    assert!(!html.contains("</pre><b"), "a closing tag from the log");
    assert!(
        html.contains("&lt;script&gt;alert(\\&quot;x\\&quot;)&lt;/script&gt;"),
        "a JSON value"
    );
    assert!(
        html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;"),
        "text"
    );
}

/// The inbox of a real home: a form per question (its control from the step's schema), verdict
/// buttons per pending conflict; what the integer form sends, decoded, is an answer `resume`
/// takes.
#[test]
fn the_inbox_offers_a_form_per_question_and_verdicts_per_conflict() {
    use oracle_html::{Forms, Links, inbox_page, view};
    let sb = Sandbox::new();
    sb.write(
        "count.plan",
        "plan count version 1\nn = human.ask { question: \"How many boxes?\", schema: { type: \"integer\", minimum: 0 } }\n",
    );
    let (code, _, err) = sb.oracle(&["run", "count.plan"]);
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/adjudication.plan"]);
    assert_eq!(code, 3, "{err}");

    let home = sb.path().join(".oracle");
    let inbox = view::inbox(&home).unwrap();
    // The belief wait is not a question: it is answered by the verdict.
    assert_eq!(inbox.asks.len(), 1, "{inbox:?}");
    assert_eq!(inbox.asks[0].question.as_deref(), Some("How many boxes?"));
    assert_eq!(inbox.adjudications.len(), 1);
    assert_eq!(inbox.adjudications[0].handle, "adj-15");
    assert_eq!(
        inbox.adjudications[0]
            .challenger
            .as_ref()
            .unwrap()
            .provenance,
        "external_first_hand"
    );
    let page = inbox_page(&inbox, &Links::new(""), &Forms::under("", "tok"));
    assert!(page.contains(
        "<form id=\"answer-count-1-n\" method=\"post\" action=\"/runs/count-1/answer\">"
    ));
    assert!(page.contains("<input type=\"number\" id=\"answer-count-1-n-value\" name=\"value\" step=\"1\" inputmode=\"numeric\" required min=\"0\""));
    assert!(page.contains("name=\"value_type\" value=\"integer\""));
    assert!(page.contains("<form id=\"verdict-adjudication-1-adj-15\" method=\"post\" action=\"/runs/adjudication-1/verdict\">"));
    assert!(page.contains("name=\"verdict\" value=\"affirm\""));

    let value = oracle_html::form::answer_value("integer", " 12 ").unwrap();
    let (code, _, err) = sb.oracle(&[
        "resume",
        "count-1",
        "--step",
        "n",
        "--value",
        &value.to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    let inbox = view::inbox(&home).unwrap();
    assert!(inbox.asks.is_empty(), "{inbox:?}");
    assert!(Path::new(&home).join("runs/count-1").is_dir());
}
