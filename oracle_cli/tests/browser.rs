//! `oracle serve` in a real browser: Chromium driven over WebDriver (fantoccini and the
//! distribution's `chromedriver`), on 127.0.0.1 only. A person signs in with a token, answers a
//! `human.ask` through the inbox's form and adjudicates a memory conflict with the verdict
//! buttons (evidence required); both runs resume in the background, complete, verify and replay,
//! and the token's name is recorded as `by`. Screenshots of every page are written under
//! `target/tmp/screenshots/` for review (README's images come from them).
//!
//! Where Chromium or its driver is not installed the test says so loudly and passes, unless
//! `ORACLE_REQUIRE_BROWSER` is set, as `.ci/run` sets it (and installs both).

use crate::common;
use crate::web;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::Sandbox;
use fantoccini::Locator;
use oracle_core::EventKind;
use serde_json::{Value, json};
use web::{browser, chromium_session, sign_in, wait_until};

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A run's status as `oracle runs --json` (one object per line) gives it.
fn status(sb: &Sandbox, run: &str) -> String {
    let (_, out, _) = sb.oracle(&["runs", "--json"]);
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["run"] == run)
        .and_then(|r| r["status"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The page the browser shows is no wider than its window, and no table in it scrolls
/// sideways in its own box either: hashes, JSON and long names wrap. The step graph alone may
/// scroll in its box (a drawing cannot wrap).
async fn assert_fits(c: &fantoccini::Client, what: &str) {
    let v = c
        .execute(
            "const e = document.documentElement; \
             const wide = [...document.querySelectorAll('.scroll')] \
               .filter(b => !b.closest('figure.dag') && b.scrollWidth > b.clientWidth + 1) \
               .map(b => (b.firstElementChild || b).id + ' ' + b.scrollWidth + '>' + b.clientWidth); \
             return [e.scrollWidth, e.clientWidth, wide];",
            vec![],
        )
        .await
        .unwrap();
    let (scroll, client) = (v[0].as_u64().unwrap(), v[1].as_u64().unwrap());
    assert!(
        client <= 1280 && scroll <= client,
        "{what} scrolls sideways: {scroll} px wide in a {client} px window"
    );
    assert_eq!(v[2], json!([]), "{what}: tables that scroll sideways");
}

#[cfg_attr(
    not(oracle_browser),
    ignore = "needs chromium and chromedriver; .ci/run installs them"
)]
#[test]
fn a_person_answers_and_adjudicates_in_the_browser_and_the_runs_resume_and_replay() {
    let Some((chromium, driver)) = browser("SKIPPED: the browser tests need them") else {
        return;
    };
    let sb = Sandbox::new();
    sb.write(
        "ask.plan",
        // The release's digest: a long unbroken token, which must wrap rather than widen the
        // page or a table (assert_fits).
        "plan ask version 1\nq = human.ask { question: \"Ship release 2.4 today? sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a089f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\", schema: { type: \"string\" } }\n",
    );
    let (code, _, err) = sb.oracle(&["run", "ask.plan"]);
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = sb.oracle(&["run", "fixtures/plans/adjudication.plan"]);
    assert_eq!(code, 3, "{err}");
    let (code, out, err) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    let secret = out.lines().next().unwrap().trim().to_owned();

    let mut serve = sb.command(&["serve", "--listen", "127.0.0.1:0"]);
    serve.stderr(Stdio::null());
    let (_server, base) = web::listening(serve);
    let (_driver, webdriver) = web::start_driver(&driver);

    let shots = screenshots();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = chromium_session(&webdriver, &chromium).await;
        let shot = |name: &'static str| {
            let c = c.clone();
            let path = shots.join(name);
            async move {
                let png = c.screenshot().await.unwrap();
                std::fs::write(&path, png).unwrap();
            }
        };

        // Not signed in: the inbox sends the browser to the sign-in page.
        c.goto(&format!("{base}/inbox")).await.unwrap();
        assert!(c.current_url().await.unwrap().path().starts_with("/signin"));
        shot("signin.png").await;
        // Keyboard first: the first Tab reaches the skip link.
        c.find(Locator::Css("body"))
            .await
            .unwrap()
            .send_keys("\u{E004}")
            .await
            .unwrap();
        let active = c.active_element().await.unwrap();
        assert_eq!(active.attr("class").await.unwrap().as_deref(), Some("skip"));
        sign_in(&c, &secret, "inbox").await;
        assert_eq!(c.current_url().await.unwrap().path(), "/inbox");
        shot("inbox.png").await;

        // The question, answered through its form.
        c.find(Locator::Id("answer-ask-1-q-value"))
            .await
            .unwrap()
            .send_keys("ship")
            .await
            .unwrap();
        c.find(Locator::Id("answer-ask-1-q-submit"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let message = c
            .wait()
            .for_element(Locator::Id("message"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(message.contains("recorded as event"), "{message}");
        assert!(message.contains("by alice"), "{message}");

        // The conflict: a verdict needs its evidence; resume afterwards.
        c.goto(&format!("{base}/inbox")).await.unwrap();
        c.wait().for_element(Locator::Id("inbox")).await.unwrap();
        let form = "verdict-adjudication-1-adj-15";
        c.find(Locator::Id(&format!("{form}-evidence")))
            .await
            .unwrap()
            .select_by_value("external_first_hand")
            .await
            .unwrap();
        let resume = c
            .find(Locator::Id(&format!("{form}-resume")))
            .await
            .unwrap();
        if resume.prop("checked").await.unwrap().as_deref() != Some("true") {
            resume.click().await.unwrap();
        }
        c.find(Locator::Id(&format!("{form}-affirm")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let message = c
            .wait()
            .for_element(Locator::Id("message"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(message.contains("Verdict `affirm` on adj-15"), "{message}");
        shot("verdict.png").await;
    });

    // Both runs resume in the background and complete.
    wait_until("ask-1 to complete", || status(&sb, "ask-1") == "completed");
    wait_until("adjudication-1 to complete", || {
        status(&sb, "adjudication-1") == "completed"
    });

    rt.block_on(async {
        let c = chromium_session(&webdriver, &chromium).await;
        // A new browser: sign in again, then the run pages.
        c.goto(&format!("{base}/signin?next=/runs")).await.unwrap();
        sign_in(&c, &secret, "runs").await;
        assert_eq!(c.current_url().await.unwrap().path(), "/runs");
        let png = c.screenshot().await.unwrap();
        std::fs::write(shots.join("runs.png"), png).unwrap();
        c.goto(&format!("{base}/runs/adjudication-1"))
            .await
            .unwrap();
        let dag = c.find(Locator::Id("dag")).await.unwrap();
        assert!(dag.html(false).await.unwrap().contains("node done"));
        c.find(Locator::Id("beliefs")).await.unwrap();
        c.find(Locator::Id("timeline")).await.unwrap();
        let png = c.screenshot().await.unwrap();
        std::fs::write(shots.join("run.png"), png).unwrap();
        // At 1280 px nothing scrolls sideways: hashes, JSON and tables fit or wrap.
        c.set_window_size(1280, 800).await.unwrap();
        assert_fits(&c, "the run page").await;
        c.goto(&format!("{base}/runs/ask-1")).await.unwrap();
        c.find(Locator::Id("timeline")).await.unwrap();
        assert_fits(&c, "the page of the run with a long token").await;
        // The divergence view: two runs compared, as `oracle diff` reports it.
        c.goto(&format!("{base}/runs/ask-1?diff=adjudication-1"))
            .await
            .unwrap();
        let d = c
            .wait()
            .for_element(Locator::Id("divergence"))
            .await
            .unwrap();
        assert!(d.text().await.unwrap().contains("ask-1"));
        assert_fits(&c, "the divergence page").await;
        // The divergence is read first: it comes before the step graph and the events.
        let before: bool = c
            .execute(
                "const d = document.getElementById('divergence'); \
                 return !!(d.compareDocumentPosition(document.getElementById('timeline')) \
                 & Node.DOCUMENT_POSITION_FOLLOWING);",
                vec![],
            )
            .await
            .unwrap()
            .as_bool()
            .unwrap();
        assert!(before, "the divergence section comes before the events");
        // A path instead of a run id is refused, never read.
        c.goto(&format!("{base}/runs/ask-1?diff=..%2F..%2Fetc"))
            .await
            .unwrap();
        assert!(c.find(Locator::Id("divergence")).await.is_err());
        c.close().await.unwrap();
    });

    for run in ["ask-1", "adjudication-1"] {
        let (code, out, err) = sb.oracle(&["verify", run]);
        assert_eq!(code, 0, "{run}: {out}{err}");
        let (code, v) = sb.json(&["replay", run, "--json"]);
        assert_eq!(code, 0, "{run}: {v}");
    }
    let by = |run: &str, kind: EventKind| -> Value {
        sb.events(".oracle", run)
            .into_iter()
            .find(|e| e.kind == kind)
            .map(|e| e.payload["by"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(by("ask-1", EventKind::Resumed), "alice");
    assert_eq!(by("adjudication-1", EventKind::Adjudicated), "alice");
}

/// The run page's fork form: a signed-in person forks a suspended run before its question with
/// the answer given (the fork completes) and again with a new plan's text uploaded (the fork
/// asks the new question); the pages name each fork's parent and each parent's forks, and the
/// divergence of two plan versions is aligned by content.
#[cfg_attr(
    not(oracle_browser),
    ignore = "needs chromium and chromedriver; .ci/run installs them"
)]
#[test]
fn a_run_is_forked_from_its_page_and_its_family_is_shown() {
    let Some((chromium, driver)) = browser("SKIPPED: the browser tests need them") else {
        return;
    };
    let sb = Sandbox::new();
    let v1 = "plan ask version 1\nq = human.ask { question: \"Ship it?\" }\nlast = json.get { value: q, path: \"answer\" }\n";
    let v2 = v1
        .replace("version 1", "version 2")
        .replace("Ship it?", "Ship it today?");
    sb.write("ask.plan", v1);
    sb.write("ask2.plan", &v2);
    for plan in ["ask.plan", "ask2.plan"] {
        let (code, _, err) = sb.oracle(&["run", plan]);
        assert_eq!(code, 3, "{err}");
    }
    let (code, out, err) = sb.oracle(&["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    let secret = out.lines().next().unwrap().trim().to_owned();
    // Forks that bring a plan are admitted like a new run: the server starts runs in its root.
    let root = sb.path().to_str().unwrap().to_owned();
    let mut serve = sb.command(&["serve", "--listen", "127.0.0.1:0", "--root", &root]);
    serve.stderr(Stdio::null());
    let (_server, base) = web::listening(serve);
    let (_driver, webdriver) = web::start_driver(&driver);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = chromium_session(&webdriver, &chromium).await;
        c.goto(&format!("{base}/signin?next=/runs/ask-1"))
            .await
            .unwrap();
        sign_in(&c, &secret, "fork-form").await;
        let fork = |value: Option<&'static str>, plan: Option<String>| {
            let c = c.clone();
            let base = base.clone();
            async move {
                c.goto(&format!("{base}/runs/ask-1")).await.unwrap();
                c.wait()
                    .for_element(Locator::Id("fork-form"))
                    .await
                    .unwrap();
                c.find(Locator::Id("fork-step"))
                    .await
                    .unwrap()
                    .select_by_value("q")
                    .await
                    .unwrap();
                if let Some(v) = value {
                    let field = c.find(Locator::Id("fork-value")).await.unwrap();
                    field.send_keys(v).await.unwrap();
                }
                if let Some(p) = plan {
                    let field = c.find(Locator::Id("fork-plan")).await.unwrap();
                    field.send_keys(&p).await.unwrap();
                }
                c.find(Locator::Id("fork-submit"))
                    .await
                    .unwrap()
                    .click()
                    .await
                    .unwrap();
                c.wait()
                    .for_element(Locator::Id("message"))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap()
            }
        };
        let message = fork(Some(r#"{"answer": "yes"}"#), None).await;
        assert!(
            message.contains("Run ask-3 was forked from ask-1 by alice"),
            "{message}"
        );
        assert!(message.contains("is completed"), "{message}");
        let message = fork(None, Some(v2.clone())).await;
        assert!(
            message.contains("Run ask-4 was forked from ask-1"),
            "{message}"
        );
        assert!(message.contains("waits on a person"), "{message}");
        // A value that is not JSON is refused before anything is made.
        let message = fork(Some("{not json"), None).await;
        assert!(message.contains("not JSON"), "{message}");

        // The family, both ways.
        c.goto(&format!("{base}/runs/ask-4")).await.unwrap();
        let summary = c.wait().for_element(Locator::Id("summary")).await.unwrap();
        let text = summary.text().await.unwrap();
        assert!(text.contains("Forked from"), "{text}");
        assert!(text.contains("ask-1"), "{text}");
        c.goto(&format!("{base}/runs/ask-1")).await.unwrap();
        let summary = c.wait().for_element(Locator::Id("summary")).await.unwrap();
        let text = summary.text().await.unwrap();
        assert!(
            text.contains("Forks") && text.contains("ask-3") && text.contains("ask-4"),
            "{text}"
        );
        // Two plan versions' runs: aligned by content, the plans' difference said apart.
        c.goto(&format!("{base}/runs/ask-1?diff=ask-2"))
            .await
            .unwrap();
        let d = c
            .wait()
            .for_element(Locator::Id("divergence"))
            .await
            .unwrap();
        let text = d.text().await.unwrap();
        assert!(text.contains("The plans differ"), "{text}");
        assert!(!text.contains("at event 0"), "not event 0: {text}");
        c.close().await.unwrap();
    });
    assert!(
        !sb.path().join(".oracle/runs/ask-5").exists(),
        "a refused fork made nothing"
    );
    for run in ["ask-3", "ask-4"] {
        let (code, out, err) = sb.oracle(&["verify", run, "--parent", "ask-1"]);
        assert_eq!(code, 0, "{run}: {out}{err}");
    }
    let forked = sb
        .events(".oracle", "ask-3")
        .into_iter()
        .find(|e| e.kind == EventKind::Forked)
        .expect("a forked event");
    assert_eq!(forked.payload["by"], "alice");
    let upgraded = sb.events(".oracle", "ask-4");
    assert!(upgraded.iter().any(|e| e.kind == EventKind::PlanUpgraded));
}
