//! Rendering tests on hand-made views: escaping of hostile log content, forms per schema type,
//! verdict forms, links and the report's self-containment.

use serde_json::{Value, json};

use super::*;
use crate::view::*;

/// A string a hostile plan could put anywhere: a script, both quotes, an ampersand, an
/// attribute break and a closing tag.
const HOSTILE: &str = "<script>alert(\"x\")</script>' onmouseover=\"steal()\" & </textarea></pre>";

fn claim(value: Value) -> ClaimRow {
    ClaimRow {
        id: "ab".repeat(32),
        value,
        provenance: "external_first_hand".into(),
        criticality: "critical".into(),
        disposition: Some("committed".into()),
        reason: HOSTILE.into(),
        seq: 3,
        time: 1,
        step: HOSTILE.into(),
        tool: "memory.assert".into(),
        valid: None,
    }
}

fn request(run: &str, status: &str) -> RequestView {
    RequestView {
        run: run.into(),
        handle: "adj-15".into(),
        status: status.into(),
        subject: HOSTILE.into(),
        predicate: "allergy".into(),
        criticality: "critical".into(),
        reason: HOSTILE.into(),
        expires_at: Some(14),
        seq: 15,
        step: "referral".into(),
        incumbent: Some(claim(json!("penicillin"))),
        challenger: Some(claim(json!(HOSTILE))),
        outcome: None,
    }
}

/// A family whose every name is hostile: forked from, forks, spawned by, children.
fn hostile_family() -> oracle_host::Family {
    oracle_host::Family {
        parent: Some((HOSTILE.into(), 3)),
        forks: vec![(HOSTILE.into(), 4)],
        truncated: true,
        spawned_by: Some(oracle_core::payload::ParentRun {
            run: HOSTILE.into(),
            step: HOSTILE.into(),
        }),
        children: vec![(HOSTILE.into(), HOSTILE.into())],
    }
}

fn hostile_view() -> RunView {
    let step = HOSTILE.to_owned();
    let graph = oracle_plan::graph::Graph {
        plan: HOSTILE.into(),
        version: 1,
        hash: oracle_core::Hash::ZERO,
        steps: vec![oracle_plan::graph::Node {
            name: step.clone(),
            tool: "human.ask".into(),
            what: HOSTILE.into(),
            deps: vec![],
            level: 0,
            body: None,
        }],
        order: vec![0],
        levels: vec![vec![0]],
    };
    RunView {
        summary: Summary {
            id: "evil-1".into(),
            plan: HOSTILE.into(),
            program_hash: "00".repeat(32),
            status: "suspended".into(),
            live: None,
            events: 7,
            tick: 3,
            head: "11".repeat(32),
            seed: 0,
            grants: vec![HOSTILE.into()],
            inputs: json!({"x": HOSTILE}),
            waiting: Some(WaitingOn {
                step: step.clone(),
                reason: HOSTILE.into(),
                attempts: 2,
            }),
            reason: Some(HOSTILE.into()),
            at: 6,
            at_asked: false,
        },
        timeline: Timeline {
            page: Page::default(),
            total: 7,
            events: vec![EventRow {
                seq: 5,
                time: 3,
                kind: "suspended".into(),
                step: Some(step.clone()),
                summary: HOSTILE.into(),
                parents: vec![4],
                hash: "22".repeat(32),
            }],
        },
        dag: Some(Dag {
            graph,
            status: vec![(StepStatus::Suspended, Some(HOSTILE.into()))],
        }),
        dag_problem: None,
        state: StateView {
            seq: 6,
            time: 3,
            kind: "suspended".into(),
            hash: "33".repeat(32),
            entries: vec![(format!("step/{HOSTILE}"), json!({"reason": HOSTILE}))],
            from_snapshot: None,
        },
        memory: MemoryView {
            as_of: None,
            lines: vec![LineView {
                subject: HOSTILE.into(),
                predicate: HOSTILE.into(),
                belief: "contested".into(),
                values: vec![json!(HOSTILE)],
                pending: vec![HOSTILE.into()],
                claims: vec![claim(json!({"k": HOSTILE}))],
            }],
            requests: vec![request("evil-1", "pending")],
        },
        divergence: Some(DivergenceView {
            a: HOSTILE.into(),
            b: "b".into(),
            plans: Some((HOSTILE.into(), HOSTILE.into())),
            outcome: DiffOutcome::Diverged {
                seq: 2,
                class: "payload".into(),
                kind_a: "tool_returned".into(),
                kind_b: "tool_returned".into(),
                step: Some(HOSTILE.into()),
                fields: vec![(HOSTILE.into(), Some(json!(HOSTILE)), None)],
                fields_omitted: 0,
            },
        }),
        family: hostile_family(),
        timers: vec![
            TimerRow {
                step: HOSTILE.into(),
                set_seq: 2,
                due: "2026-11-27T06:00:00Z".into(),
                fired: Some((4, "2026-11-27T06:00:00.250Z".into())),
            },
            TimerRow {
                step: HOSTILE.into(),
                set_seq: 5,
                due: HOSTILE.into(),
                fired: None,
            },
        ],
        latency: Some(LatencyView {
            wall_ms: Some(2_000),
            tokens: 36,
            cost: Some(HOSTILE.into()),
            steps: vec![
                LatencyRow {
                    step: HOSTILE.into(),
                    attempts: 2,
                    offset_ms: Some(500),
                    wall_ms: Some(1_000),
                    tokens: 36,
                    cost: Some(HOSTILE.into()),
                },
                LatencyRow {
                    step: "untimed".into(),
                    ..LatencyRow::default()
                },
            ],
        }),
        streaming: Some(oracle_host::Partial {
            step: HOSTILE.into(),
            attempt: 1,
            text: HOSTILE.into(),
            cut: true,
        }),
    }
}

fn hostile_inbox() -> Inbox {
    Inbox {
        asks: vec![Ask {
            run: "evil-1".into(),
            plan: HOSTILE.into(),
            step: HOSTILE.into(),
            question: Some(HOSTILE.into()),
            reason: HOSTILE.into(),
            attempts: 1,
            tool: Some("human.ask".into()),
            schema: Some(json!({"enum": [HOSTILE, 1]})),
        }],
        adjudications: vec![request("evil-1", "pending")],
        problems: vec![(HOSTILE.into(), HOSTILE.into())],
        stores: vec![StoreRequest {
            store: HOSTILE.into(),
            handle: HOSTILE.into(),
            subject: HOSTILE.into(),
            predicate: HOSTILE.into(),
            criticality: HOSTILE.into(),
            reason: HOSTILE.into(),
            challenger: (HOSTILE.into(), HOSTILE.into()),
            incumbent: (HOSTILE.into(), String::new()),
        }],
        proposals: vec![crate::view::ProposalView {
            id: "3f2a9c01d4e5".into(),
            program: HOSTILE.into(),
            reason: HOSTILE.into(),
            recorded: vec![HOSTILE.into()],
            diff: Some(HOSTILE.into()),
            report: Some(crate::view::ReportView {
                file: HOSTILE.into(),
                hash: "ab".repeat(32),
                unchanged: 2,
                diverges: 1,
                cannot_check: 0,
            }),
        }],
    }
}

/// No markup from the log survives: no script element, no attribute break, no closing tag
/// that would end a `pre` or `textarea` early; the text is there, escaped.
fn assert_inert(page: &str) {
    let lower = page.to_ascii_lowercase();
    assert!(!lower.contains("<script"), "a script element: {page}");
    assert!(
        !page.contains("onmouseover=\""),
        "an attribute break: {page}"
    );
    assert!(!page.contains("\"steal()\""), "an unescaped quote: {page}");
    assert!(
        !page.contains("</textarea></pre>"),
        "a closing tag from the log"
    );
    assert!(
        page.contains("&lt;script&gt;alert("),
        "the text is shown escaped"
    );
    assert!(page.contains(" &amp; "), "the ampersand is escaped");
}

/// Every element opened is closed, in the few containers the pages nest.
fn assert_balanced(page: &str) {
    for tag in [
        "section", "table", "form", "article", "div", "fieldset", "select", "pre", "ul",
        "textarea", "svg",
    ] {
        let open =
            page.matches(&format!("<{tag}>")).count() + page.matches(&format!("<{tag} ")).count();
        let close = page.matches(&format!("</{tag}>")).count();
        assert_eq!(open, close, "<{tag}> opened {open} times, closed {close}");
    }
}

#[test]
fn hostile_log_content_renders_inert_on_every_page() {
    let links = Links::new("/ui");
    let forms = Forms::under("/ui", "tok\"en<");
    let view = hostile_view();
    let pages = [
        run_page(&view, &links, Some(&forms)),
        report_page(&view),
        inbox_page(&hostile_inbox(), &links, &forms),
        runs_page(
            &[RunRow {
                id: "evil-1".into(),
                plan: HOSTILE.into(),
                status: "suspended".into(),
                live: None,
                events: 7,
                tick: 3,
                waiting: Some(WaitingOn {
                    step: HOSTILE.into(),
                    reason: HOSTILE.into(),
                    attempts: 1,
                }),
                reason: None,
            }],
            &links,
        ),
    ];
    for p in &pages {
        assert_inert(p);
        assert_balanced(p);
        assert!(p.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"));
        assert!(p.contains("<a class=\"skip\" href=\"#main\">"));
    }
    // The latency waterfall: a bar a quarter in and half as wide as the run, for the timed
    // step only.
    assert!(pages[0].contains("style=\"margin-left:25.0%;width:50.0%\""));
    assert_eq!(pages[0].matches("class=\"lat-bar\"").count(), 1);
    // The token is an attribute value like any other.
    assert!(pages[2].contains("name=\"csrf\" value=\"tok&quot;en&lt;\""));
    assert!(pages[0].contains("name=\"csrf\" value=\"tok&quot;en&lt;\""));
    // The fork form is on the server's page for a signed-in user, never in a report.
    assert!(
        pages[0]
            .contains("<form id=\"fork-form\" method=\"post\" action=\"/ui/runs/evil-1/fork\">")
    );
    assert!(!pages[1].contains("fork-form"));
    assert!(!run_page(&view, &links, None).contains("fork-form"));
    // The family: the parent and the forks are named (escaped) and, on the server, linked.
    assert!(pages[0].contains("<dt>Forked from</dt>"), "{}", pages[0]);
    assert!(pages[0].contains("<dt>Forks</dt>"));
    // So are the run that spawned it and its children.
    assert!(pages[0].contains("<dt>Spawned by</dt>"), "{}", pages[0]);
    assert!(pages[0].contains("<dt>Children</dt>"));
    assert!(pages[1].contains("<dt>Children</dt>"));
    assert!(pages[1].contains("<dt>Forked from</dt>"));
    // A streamed reply in flight is on the server's page (escaped), never in a report.
    assert!(
        pages[0].contains("<section id=\"streaming\""),
        "{}",
        pages[0]
    );
    assert!(!pages[1].contains("id=\"streaming\""));
}

#[test]
fn pages_are_the_same_bytes_for_the_same_view() {
    let links = Links::new("");
    assert_eq!(
        run_page(&hostile_view(), &links, None),
        run_page(&hostile_view(), &links, None)
    );
    assert_eq!(report_page(&hostile_view()), report_page(&hostile_view()));
}

fn ask(step: &str, schema: Option<Value>) -> Ask {
    Ask {
        run: "form-1".into(),
        plan: "form".into(),
        step: step.into(),
        question: Some(format!("question of {step}?")),
        reason: String::new(),
        attempts: 1,
        tool: Some("human.ask".into()),
        schema,
    }
}

/// The part of `page` from the element with id `id` to the end of its form.
fn form_of<'p>(page: &'p str, id: &str) -> &'p str {
    let at = page
        .find(&format!("<form id=\"{id}\""))
        .unwrap_or_else(|| panic!("form {id} in {page}"));
    let rest = &page[at..];
    &rest[..rest.find("</form>").unwrap()]
}

#[test]
fn answer_forms_follow_each_steps_schema() {
    let inbox = Inbox {
        asks: vec![
            ask("name", Some(json!({"type": "string", "maxLength": 40}))),
            ask(
                "count",
                Some(json!({"type": "integer", "minimum": 0, "maximum": 9})),
            ),
            ask("ok", Some(json!({"type": "boolean"}))),
            ask("size", Some(json!({"enum": ["small", "large", 3]}))),
            ask(
                "total",
                Some(json!({"type": "object", "properties": {"total": {"type": "integer"}}})),
            ),
            ask("free", None),
        ],
        adjudications: vec![],
        problems: vec![],
        stores: vec![],
        proposals: vec![],
    };
    let page = inbox_page(&inbox, &Links::new(""), &Forms::under("", "T"));
    assert_balanced(&page);

    let f = form_of(&page, "answer-form-1-name");
    assert!(
        f.contains("action=\"/runs/form-1/answer\" method")
            || f.contains("method=\"post\" action=\"/runs/form-1/answer\""),
        "{f}"
    );
    assert!(
        f.contains("<input type=\"hidden\" name=\"csrf\" value=\"T\">"),
        "{f}"
    );
    assert!(
        f.contains("<input type=\"hidden\" name=\"step\" value=\"name\">"),
        "{f}"
    );
    assert!(f.contains("name=\"value_type\" value=\"string\""), "{f}");
    assert!(
        f.contains("<label for=\"answer-form-1-name-value\">"),
        "{f}"
    );
    assert!(f.contains("<input type=\"text\" id=\"answer-form-1-name-value\" name=\"value\" required maxlength=\"40\""), "{f}");

    let f = form_of(&page, "answer-form-1-count");
    assert!(f.contains("value_type\" value=\"integer\""), "{f}");
    assert!(f.contains("<input type=\"number\" id=\"answer-form-1-count-value\" name=\"value\" step=\"1\" inputmode=\"numeric\" required min=\"0\" max=\"9\""), "{f}");

    let f = form_of(&page, "answer-form-1-ok");
    assert!(f.contains("value_type\" value=\"boolean\""), "{f}");
    assert!(f.contains("<legend>Answer</legend>"), "{f}");
    assert!(f.contains("<input type=\"radio\" id=\"answer-form-1-ok-value-true\" name=\"value\" value=\"true\" required><label for=\"answer-form-1-ok-value-true\">"), "{f}");
    assert!(
        f.contains("id=\"answer-form-1-ok-value-false\" name=\"value\" value=\"false\""),
        "{f}"
    );

    let f = form_of(&page, "answer-form-1-size");
    assert!(f.contains("value_type\" value=\"json\""), "{f}");
    assert!(
        f.contains("<select id=\"answer-form-1-size-value\" name=\"value\" required"),
        "{f}"
    );
    // Options carry their JSON text, so `3` and `"3"` stay apart; the first option is empty.
    assert!(f.contains("<option value=\"\">"), "{f}");
    assert!(
        f.contains("<option value=\"&quot;small&quot;\">small</option>"),
        "{f}"
    );
    assert!(f.contains("<option value=\"3\">3</option>"), "{f}");

    for id in ["answer-form-1-total", "answer-form-1-free"] {
        let f = form_of(&page, id);
        assert!(f.contains("value_type\" value=\"json\""), "{f}");
        assert!(
            f.contains(&format!(
                "<textarea id=\"{id}-value\" name=\"value\" rows=\"6\" required"
            )),
            "{f}"
        );
    }
    // Every control has a label, and the question is shown.
    for step in ["name", "count", "size", "total", "free"] {
        assert!(
            page.contains(&format!("<label for=\"answer-form-1-{step}-value\"")),
            "{step}"
        );
        assert!(page.contains(&format!("question of {step}?")), "{step}");
    }
    assert!(page.contains("id=\"answer-form-1-total-submit\""));
    // The decoder takes what each form sends.
    assert_eq!(
        crate::form::answer_value("json", "\"small\"").unwrap(),
        json!("small")
    );
}

#[test]
fn verdict_forms_offer_each_verdict_and_require_evidence() {
    let inbox = Inbox {
        asks: vec![],
        adjudications: vec![request("adjudication-1", "pending")],
        problems: vec![],
        stores: vec![],
        proposals: vec![],
    };
    let page = inbox_page(&inbox, &Links::new("/x/"), &Forms::under("/x/", "T"));
    assert!(page.contains("id=\"inbox\""));
    assert!(page.contains("id=\"adj-adjudication-1-adj-15\""));
    let f = form_of(&page, "verdict-adjudication-1-adj-15");
    assert!(
        f.contains("action=\"/x/runs/adjudication-1/verdict\""),
        "{f}"
    );
    assert!(f.contains("name=\"csrf\" value=\"T\""), "{f}");
    assert!(f.contains("name=\"handle\" value=\"adj-15\""), "{f}");
    for v in ["affirm", "deny", "unknown"] {
        assert!(
            f.contains(&format!("<button type=\"submit\" id=\"verdict-adjudication-1-adj-15-{v}\" name=\"verdict\" value=\"{v}\">")),
            "{v}: {f}"
        );
    }
    assert!(
        f.contains("<label for=\"verdict-adjudication-1-adj-15-evidence\">"),
        "{f}"
    );
    assert!(
        f.contains(
            "<select id=\"verdict-adjudication-1-adj-15-evidence\" name=\"evidence\" required"
        ),
        "{f}"
    );
    assert!(
        f.contains(
            "<option value=\"\">Choose the evidence…</option><option value=\"external_first_hand\">"
        ),
        "{f}"
    );
    // Only what a verdict accepts is offered.
    assert!(!f.contains("value=\"model_derived\""), "{f}");
    assert!(
        f.contains("<textarea id=\"verdict-adjudication-1-adj-15-note\" name=\"note\""),
        "{f}"
    );
    assert!(
        f.contains("<label for=\"verdict-adjudication-1-adj-15-note\">"),
        "{f}"
    );
    // Both claims, with their provenance.
    let at = page
        .find("id=\"verdict-adjudication-1-adj-15-claims\"")
        .unwrap();
    let table = &page[at..];
    assert!(table.contains("Incumbent") && table.contains("Challenger"));
    assert!(table.contains("&quot;penicillin&quot;") && table.contains("external_first_hand"));
    // Navigation under the prefix.
    assert!(page.contains("<a href=\"/x/inbox\" aria-current=\"page\">Inbox</a>"));
    assert!(page.contains("<a href=\"/x/runs\">Runs</a>"));
}

#[test]
fn the_report_needs_nothing_else() {
    let page = report_page(&hostile_view());
    let lower = page.to_ascii_lowercase();
    for banned in [
        "<script", " src=", "<link", "<form", "http://", "https://", "<iframe", "@import",
        "url(http",
    ] {
        assert!(!lower.contains(banned), "{banned} in the report");
    }
    assert!(page.contains("Content-Security-Policy"));
    assert!(page.contains("<style>"));
    assert!(page.contains("<svg "));
    // No link into a server: only in-page anchors.
    for (i, _) in page.match_indices("href=\"") {
        assert!(page[i + 6..].starts_with('#'), "{}", &page[i..i + 40]);
    }
}

#[test]
fn run_page_links_use_the_prefix_and_keep_the_page() {
    let mut view = hostile_view();
    view.summary.id = "a b/c".into();
    view.timeline.total = 250;
    view.timeline.page = Page {
        from: 100,
        limit: 100,
    };
    let page = run_page(&view, &Links::new("/ui"), None);
    // The run id is one encoded segment; the seq links keep the timeline page.
    assert!(
        page.contains("href=\"/ui/runs/a%20b%2Fc?from=100&amp;limit=100&amp;at=5\""),
        "{page}"
    );
    assert!(page.contains("<form id=\"at-form\" method=\"get\" action=\"/ui/runs/a%20b%2Fc\">"));
    for (text, from) in [("First", 0), ("Previous", 0), ("Next", 200), ("Last", 200)] {
        assert!(
            page.contains(&format!(
                "href=\"/ui/runs/a%20b%2Fc?from={from}&amp;limit=100\">{text}</a>"
            )),
            "{text}"
        );
    }
    assert!(page.contains("id=\"run-a_b_c\""));
}

#[test]
fn run_page_shows_each_timer_due_and_fired_or_pending() {
    let view = hostile_view();
    let page = run_page(&view, &Links::new("/ui"), None);
    let timers = &page[page
        .find("<section id=\"timers\"")
        .expect("a timers section")..];
    let timers = &timers[..timers.find("</section>").expect("closed")];
    assert!(
        timers.contains(
            "<td><time datetime=\"2026-11-27T06:00:00Z\">2026-11-27T06:00:00Z</time></td>"
        )
    );
    assert!(timers.contains(
        "fired</span> <time datetime=\"2026-11-27T06:00:00.250Z\">2026-11-27T06:00:00.250Z</time> (event 4)"
    ));
    assert_eq!(timers.matches(">pending</span>").count(), 1, "{timers}");
    assert_eq!(timers.matches("<tr>").count(), 3, "a header and two timers");
    // The report shows them too; a run that never slept has no section.
    assert!(report_page(&view).contains("<h2 id=\"timers-h\">Timers</h2>"));
    let mut none = view;
    none.timers.clear();
    assert!(!run_page(&none, &Links::new("/ui"), None).contains("id=\"timers\""));
}

#[test]
fn the_site_navigation_links_the_schedules_page() {
    let links = Links::new("/ui");
    let nav = "<li><a href=\"/ui/schedules\"";
    assert!(run_page(&hostile_view(), &links, None).contains(nav));
    assert!(runs_page(&[], &links).contains(nav));
    let schedules = schedules_page(&[], &links);
    assert!(
        schedules
            .contains("<li><a href=\"/ui/schedules\" aria-current=\"page\">Schedules</a></li>")
    );
    assert!(schedules.contains("<li><a href=\"/ui/runs\">Runs</a></li>"));
}
