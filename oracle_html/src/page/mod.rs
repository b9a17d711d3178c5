//! The render layer: pure functions from view structs to complete HTML documents.
//!
//! No IO, no clock, no randomness: the same view gives the same bytes. Every page carries its
//! style sheet inline and needs no script; every value from a log goes through
//! [`crate::escape`]. Where links point and where forms post is the caller's ([`Links`],
//! [`Forms`]), so a server can mount the pages under any prefix; the report has neither.

pub mod css;
pub mod dag;

use std::fmt::Write as _;

use oracle_memory::adjudicate::EVIDENCE_ACCEPTED;
use oracle_memory::{Provenance, Verdict};
use serde_json::Value;

use crate::escape::{escape, id_part, json_text, prose, shorten, url_part};
use crate::form::{self, Field};
use crate::view::{
    Ask, ClaimRow, DiffOutcome, DivergenceView, Inbox, LatencyView, MemoryView, Page, ProposalView,
    RequestView, RunRow, RunView, StepStatus, StoreRequest, Timeline, TimerRow,
};

/// Characters of one value shown in a table cell (the rest is counted, not shown).
pub const VALUE_CHARS_MAX: usize = 2000;

/// Where a served page's links point: `{prefix}/runs`, `{prefix}/runs/{id}` (with `at`,
/// `from` and `limit` as query parameters) and `{prefix}/inbox`. Run ids are percent-encoded
/// as one path segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Links {
    /// Prefix of every link, without a trailing `/` (empty: the site's root).
    pub prefix: String,
}

impl Links {
    /// Links under `prefix` (a trailing `/` is dropped).
    pub fn new(prefix: &str) -> Links {
        Links {
            prefix: prefix.trim_end_matches('/').to_owned(),
        }
    }

    pub fn runs(&self) -> String {
        format!("{}/runs", self.prefix)
    }

    pub fn run(&self, id: &str) -> String {
        format!("{}/runs/{}", self.prefix, url_part(id))
    }

    /// The run page showing the run after event `at`, with the timeline page `page`.
    pub fn run_with(&self, id: &str, at: Option<u64>, page: Page) -> String {
        let mut url = format!("{}?from={}&limit={}", self.run(id), page.from, page.limit);
        if let Some(a) = at {
            let _ = write!(url, "&at={a}");
        }
        url
    }

    pub fn inbox(&self) -> String {
        format!("{}/inbox", self.prefix)
    }

    pub fn schedules(&self) -> String {
        format!("{}/schedules", self.prefix)
    }
}

/// Where the inbox's forms post, and the CSRF token each carries in a hidden field named
/// `csrf`. `answer` and `verdict` are templates in which `{run}` is replaced by the run id
/// (percent-encoded as one path segment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forms {
    pub answer: String,
    pub verdict: String,
    pub fork: String,
    /// The rejection of a proposal: `{id}` is replaced by the proposal's id.
    pub reject: String,
    pub csrf: String,
}

impl Forms {
    /// `{prefix}/runs/{run}/answer`, `{prefix}/runs/{run}/verdict` and
    /// `{prefix}/runs/{run}/fork`.
    pub fn under(prefix: &str, csrf: &str) -> Forms {
        let p = prefix.trim_end_matches('/');
        Forms {
            answer: format!("{p}/runs/{{run}}/answer"),
            verdict: format!("{p}/runs/{{run}}/verdict"),
            fork: format!("{p}/runs/{{run}}/fork"),
            reject: format!("{p}/proposals/{{id}}/reject"),
            csrf: csrf.to_owned(),
        }
    }

    pub fn answer_action(&self, run: &str) -> String {
        self.answer.replace("{run}", &url_part(run))
    }

    pub fn verdict_action(&self, run: &str) -> String {
        self.verdict.replace("{run}", &url_part(run))
    }

    pub fn fork_action(&self, run: &str) -> String {
        self.fork.replace("{run}", &url_part(run))
    }

    /// `{prefix}/memory/{name}/verdict`: a verdict on a request of a named store.
    pub fn store_verdict_action(&self, name: &str) -> String {
        let prefix = self
            .verdict
            .strip_suffix("/runs/{run}/verdict")
            .unwrap_or("");
        format!("{prefix}/memory/{}/verdict", url_part(name))
    }

    pub fn reject_action(&self, id: &str) -> String {
        self.reject.replace("{id}", &url_part(id))
    }
}

/// Which page of the site a document is, for the navigation's `aria-current`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Current {
    Runs,
    Inbox,
    Run,
    Schedules,
}

/// A complete document: head with the inline style sheet, a skip link, the site navigation
/// (served pages only) and `main`.
fn document(title: &str, nav: Option<(&Links, Current)>, main: &str, report: bool) -> String {
    let mut out = String::with_capacity(main.len() + css::CSS.len() + 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    if report {
        // The report is one file that must make no request: say so to the browser too, which
        // then refuses any script, frame, image or style from elsewhere.
        out.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'\">\n");
    }
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = writeln!(out, "<style>{}</style>", css::CSS);
    out.push_str("</head>\n<body>\n<a class=\"skip\" href=\"#main\">Skip to the content</a>\n");
    if let Some((links, current)) = nav {
        let item = |href: String, text: &str, here: bool| {
            format!(
                "<li><a href=\"{}\"{}>{text}</a></li>",
                escape(&href),
                if here { " aria-current=\"page\"" } else { "" }
            )
        };
        let _ = writeln!(
            out,
            "<header class=\"site\"><nav aria-label=\"Site\"><ul>{}{}{}</ul></nav></header>",
            item(links.runs(), "Runs", current == Current::Runs),
            item(links.inbox(), "Inbox", current == Current::Inbox),
            item(
                links.schedules(),
                "Schedules",
                current == Current::Schedules
            ),
        );
    }
    let _ = write!(out, "<main id=\"main\" tabindex=\"-1\">\n{main}</main>\n");
    out.push_str("</body>\n</html>\n");
    out
}

fn badge(word: &str) -> String {
    format!(
        "<span class=\"badge status-{}\">{}</span>",
        id_part(word),
        escape(&word.replace(['_', '-'], " "))
    )
}

/// A value in a cell: JSON text (strings quoted, so types show), shortened, escaped.
fn value_html(v: &Value) -> String {
    format!("<pre>{}</pre>", escape(&json_text(v, VALUE_CHARS_MAX)))
}

fn status_word(status: &str, live: Option<bool>) -> &str {
    match (status, live) {
        ("running", Some(true)) => "live",
        ("running", Some(false)) => "interrupted",
        (s, _) => s,
    }
}

/// The list of runs.
pub fn runs_page(rows: &[RunRow], links: &Links) -> String {
    let mut m = String::new();
    m.push_str("<h1>Runs</h1>\n");
    let waiting = rows.iter().filter(|r| r.status == "suspended").count();
    if waiting > 0 {
        let _ = writeln!(
            m,
            "<p>{waiting} suspended run{} waiting: see <a href=\"{}\">the inbox</a>.</p>",
            if waiting == 1 { "" } else { "s" },
            escape(&links.inbox())
        );
    }
    if rows.is_empty() {
        m.push_str("<p>No runs yet.</p>\n");
        return document("Runs", Some((links, Current::Runs)), &m, false);
    }
    m.push_str("<div class=\"scroll\"><table id=\"runs\">\n<caption>Every run of this home, by id</caption>\n");
    m.push_str("<thead><tr><th scope=\"col\">Run</th><th scope=\"col\">Plan</th><th scope=\"col\">Status</th><th scope=\"col\" class=\"num\">Events</th><th scope=\"col\" class=\"num\">Tick</th><th scope=\"col\">Waiting on, or why it failed</th></tr></thead>\n<tbody>\n");
    for r in rows {
        let note = match (&r.waiting, &r.reason) {
            (Some(w), _) if w.attempts > 1 => format!(
                "step <code>{}</code> after {} attempts: {}",
                escape(&w.step),
                w.attempts,
                prose(&w.reason)
            ),
            (Some(w), _) => format!(
                "step <code>{}</code>: {}",
                escape(&w.step),
                prose(&w.reason)
            ),
            (None, Some(why)) => prose(why),
            _ => String::new(),
        };
        let _ = writeln!(
            m,
            "<tr id=\"run-{}\"><th scope=\"row\"><a href=\"{}\">{}</a></th><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{note}</td></tr>",
            id_part(&r.id),
            escape(&links.run(&r.id)),
            escape(&r.id),
            escape(&r.plan),
            badge(status_word(&r.status, r.live)),
            r.events,
            r.tick,
        );
    }
    m.push_str("</tbody></table></div>\n");
    document("Runs", Some((links, Current::Runs)), &m, false)
}

/// A schedule as its page lists it (`oracle schedule list`): every text is escaped here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleRow {
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub plan: String,
    pub paused: bool,
    /// The next fire time (RFC 3339), none when paused.
    pub next: Option<String>,
    /// The last run a tick started.
    pub last_run: Option<String>,
}

/// The list of schedules with their next fire times.
pub fn schedules_page(rows: &[ScheduleRow], links: &Links) -> String {
    let mut m = String::from(
        "<h1>Schedules</h1>
",
    );
    if rows.is_empty() {
        m.push_str("<p>No schedules (<code>oracle schedule add NAME PLAN --cron PATTERN</code> adds one).</p>\n");
        return document("Schedules", Some((links, Current::Schedules)), &m, false);
    }
    m.push_str("<div class=\"scroll\"><table id=\"schedules\">\n<caption>Every schedule, by name; each tick starts one run</caption>\n");
    m.push_str("<thead><tr><th scope=\"col\">Schedule</th><th scope=\"col\">Cron</th><th scope=\"col\">Time zone</th><th scope=\"col\">Next fire time</th><th scope=\"col\">Last run</th><th scope=\"col\">Plan</th></tr></thead>\n<tbody>\n");
    for r in rows {
        let next = match (&r.next, r.paused) {
            (_, true) => badge("paused"),
            (Some(t), false) => format!("<time datetime=\"{0}\">{0}</time>", escape(t)),
            (None, false) => "never".to_owned(),
        };
        let last = match &r.last_run {
            Some(id) => format!("<a href=\"{}\">{}</a>", escape(&links.run(id)), escape(id)),
            None => String::new(),
        };
        let _ = writeln!(
            m,
            "<tr id=\"schedule-{}\"><th scope=\"row\">{}</th><td><code>{}</code></td><td>{}</td><td>{next}</td><td>{last}</td><td>{}</td></tr>",
            id_part(&r.name),
            escape(&r.name),
            escape(&r.cron),
            escape(&r.timezone),
            escape(&r.plan),
        );
    }
    m.push_str("</tbody></table></div>\n");
    document("Schedules", Some((links, Current::Schedules)), &m, false)
}

/// The page of one run: summary, step graph, state, beliefs, a page of its events, and a
/// divergence when the view has one. Links go through `links`; with `forms` (a signed-in
/// user), the form that forks the run.
pub fn run_page(view: &RunView, links: &Links, forms: Option<&Forms>) -> String {
    let mut main = run_main(view, Some(links));
    if let Some(f) = forms {
        // Inside the run's article, after its timeline: where a reader has found the point.
        let end = main.rfind("</article>").unwrap_or(main.len());
        main.insert_str(end, &fork_form_html(view, f));
    }
    document(
        &format!("Run {}", view.summary.id),
        Some((links, Current::Run)),
        &main,
        false,
    )
}

/// The run page as one self-contained file: no navigation, no links to a server, no forms, no
/// script; the style sheet and the step graph are inline, and the document tells the browser
/// to make no request at all.
pub fn report_page(view: &RunView) -> String {
    let mut main = run_main(view, None);
    let s = &view.summary;
    let _ = writeln!(
        main,
        "<footer>Written by <code>oracle report</code> from run <code>{}</code>: {} events, head <code>{}</code>. One self-contained file: no scripts, no requests. <code>oracle verify {} --head {}</code> checks that the run still has this head.</footer>",
        escape(&s.id),
        s.events,
        escape(&s.head),
        escape(&s.id),
        escape(&s.head),
    );
    document(&format!("Run {} (report)", s.id), None, &main, true)
}

fn run_main(view: &RunView, links: Option<&Links>) -> String {
    let s = &view.summary;
    let mut m = String::new();
    let _ = writeln!(
        m,
        "<article id=\"run-{}\">\n<h1>Run <code>{}</code></h1>",
        id_part(&s.id),
        escape(&s.id)
    );
    m.push_str(&summary_html(view, links));
    // A report is a record: a reply in flight is not part of it.
    if links.is_some()
        && let Some(p) = &view.streaming
    {
        m.push_str(&streaming_html(p));
    }
    // Right under the summary: a page opened to compare two runs is read for the difference
    // first, not after every event of one of them.
    if let Some(d) = &view.divergence {
        m.push_str(&divergence_html(d));
    }
    m.push_str(&dag_html(view));
    m.push_str(&state_html(view, links));
    m.push_str(&memory_html(&view.memory, &s.id, links));
    m.push_str(&timers_html(&view.timers));
    if let Some(l) = &view.latency {
        m.push_str(&latency_html(l));
    }
    m.push_str(&timeline_html(&view.timeline, view, links));
    m.push_str("</article>\n");
    m
}

/// A duration for a person (`850 ms`, `12.3 s`, `4 min 5 s`, `3 h 2 min`), `-` when unknown.
fn duration(ms: Option<u64>) -> String {
    match ms {
        None => "-".into(),
        Some(ms @ 0..1_000) => format!("{ms} ms"),
        Some(ms @ 1_000..60_000) => format!("{}.{} s", ms / 1_000, ms % 1_000 / 100),
        Some(ms @ 60_000..3_600_000) => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1_000),
        Some(ms) => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// Where the run's time and tokens went: a row per step, each with a bar placed on the run's
/// wall time (a waterfall), so the slow step is seen before it is read. Bars are drawn only
/// where both ends were timed; widths are whole per-mille, no float.
fn latency_html(l: &LatencyView) -> String {
    let cost_head = if l.cost.is_some() {
        "<th scope=\"col\" class=\"num\">Cost</th>"
    } else {
        ""
    };
    let mut m = format!(
        "<section id=\"latency\" aria-labelledby=\"latency-h\">\n<h2 id=\"latency-h\">Latency</h2>\n<p>Wall time {}, {} tokens{}. Times come from the file beside the log, not from the record.</p>\n<div class=\"scroll\"><table>\n<caption>Each step in the order it started</caption>\n<thead><tr><th scope=\"col\">Step</th><th scope=\"col\" class=\"num\">Attempts</th><th scope=\"col\" class=\"num\">Started</th><th scope=\"col\" class=\"num\">Wall</th><th scope=\"col\" class=\"num\">Tokens</th>{cost_head}<th scope=\"col\">Timeline</th></tr></thead>\n<tbody>\n",
        duration(l.wall_ms),
        l.tokens,
        l.cost
            .as_ref()
            .map_or(String::new(), |c| format!(", cost {}", escape(c))),
    );
    let whole = l.wall_ms.filter(|w| *w > 0);
    for r in &l.steps {
        let bar = match (whole, r.offset_ms, r.wall_ms) {
            (Some(w), Some(o), Some(d)) => {
                let left = (o.min(w) * 1000 / w).min(1000);
                let width = (d * 1000 / w).clamp(5, 1000 - left.min(995));
                format!(
                    "<span class=\"lat\"><span class=\"lat-bar\" style=\"margin-left:{}.{}%;width:{}.{}%\"></span></span>",
                    left / 10,
                    left % 10,
                    width / 10,
                    width % 10
                )
            }
            _ => String::new(),
        };
        let cost = match (&l.cost, &r.cost) {
            (Some(_), Some(c)) => format!("<td class=\"num\">{}</td>", escape(c)),
            (Some(_), None) => "<td class=\"num\">-</td>".into(),
            _ => String::new(),
        };
        let _ = writeln!(
            m,
            "<tr><th scope=\"row\"><code>{}</code></th><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>{cost}<td>{bar}</td></tr>",
            escape(&r.step),
            r.attempts,
            r.offset_ms
                .map_or("-".into(), |o| format!("+{}", duration(Some(o)))),
            duration(r.wall_ms),
            r.tokens,
        );
    }
    m.push_str("</tbody></table></div>\n</section>\n");
    m
}

/// The partial reply of the model call streaming now (reload for more; the log records it
/// whole once the call ends).
fn streaming_html(p: &oracle_host::Partial) -> String {
    format!(
        "<section id=\"streaming\" aria-labelledby=\"streaming-h\">\n<h2 id=\"streaming-h\">Streaming now</h2>\n<p>Step <code>{}</code>, attempt {}: the model's reply so far{}. Not recorded: the log has the reply whole once the call ends.</p>\n<pre id=\"streaming-text\">{}</pre>\n</section>\n",
        escape(&p.step),
        p.attempt,
        if p.cut {
            " (cut to its first 64 KiB)"
        } else {
            ""
        },
        escape(&p.text),
    )
}

/// The run's timers (its `sleep` steps): when each is due and whether it fired, and when.
/// Nothing for a run that never slept.
fn timers_html(timers: &[TimerRow]) -> String {
    if timers.is_empty() {
        return String::new();
    }
    let mut m = String::from(
        "<section id=\"timers\" aria-labelledby=\"timers-h\">\n<h2 id=\"timers-h\">Timers</h2>\n<div class=\"scroll\"><table>\n<caption>Every timer the run set, in order</caption>\n<thead><tr><th scope=\"col\">Step</th><th scope=\"col\" class=\"num\">Set in event</th><th scope=\"col\">Due</th><th scope=\"col\">Fired</th></tr></thead>\n<tbody>\n",
    );
    let instant = |t: &str| format!("<time datetime=\"{0}\">{0}</time>", escape(t));
    for t in timers {
        let fired = match &t.fired {
            Some((seq, at)) => format!("{} {} (event {seq})", badge("fired"), instant(at)),
            None => badge("pending"),
        };
        let _ = writeln!(
            m,
            "<tr><th scope=\"row\"><code>{}</code></th><td class=\"num\">{}</td><td>{}</td><td>{fired}</td></tr>",
            escape(&t.step),
            t.set_seq,
            instant(&t.due),
        );
    }
    m.push_str("</tbody></table></div>\n</section>\n");
    m
}

fn summary_html(view: &RunView, links: Option<&Links>) -> String {
    let s = &view.summary;
    let mut m = String::new();
    m.push_str("<section id=\"summary\" aria-labelledby=\"summary-h\">\n<h2 id=\"summary-h\">Summary</h2>\n<dl class=\"summary\">\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(m, "<dt>{k}</dt><dd>{v}</dd>");
    };
    row("Plan", format!("<code>{}</code>", escape(&s.plan)));
    row("Status", badge(status_word(&s.status, s.live)));
    if let Some(w) = &s.waiting {
        let inbox = match links {
            Some(l) => format!(
                " (<a href=\"{}#ask-{}-{}\">answer in the inbox</a>)",
                escape(&l.inbox()),
                id_part(&s.id),
                id_part(&w.step)
            ),
            None => String::new(),
        };
        row(
            "Waiting on",
            format!(
                "step <code>{}</code>{}: {}{inbox}",
                escape(&w.step),
                if w.attempts > 1 {
                    format!(" after {} attempts", w.attempts)
                } else {
                    String::new()
                },
                prose(&w.reason)
            ),
        );
    }
    if let Some(r) = &s.reason {
        row("Why it failed", prose(r));
    }
    row("Events", s.events.to_string());
    row("Last tick", s.tick.to_string());
    row("Head hash", format!("<code>{}</code>", escape(&s.head)));
    row(
        "Program hash",
        format!("<code>{}</code>", escape(&s.program_hash)),
    );
    row("Seed", s.seed.to_string());
    row(
        "Grants",
        if s.grants.is_empty() {
            "none".to_owned()
        } else {
            s.grants
                .iter()
                .map(|g| format!("<code>{}</code>", escape(g)))
                .collect::<Vec<_>>()
                .join(", ")
        },
    );
    row("Inputs", value_html(&s.inputs));
    let run_ref = |id: &str| match links {
        Some(l) => format!(
            "<a href=\"{}\"><code>{}</code></a>",
            escape(&l.run(id)),
            escape(id)
        ),
        None => format!("<code>{}</code>", escape(id)),
    };
    family_rows(&view.family, &run_ref, &mut row);
    if s.at_asked {
        row(
            "Shown after",
            format!(
                "event {} (state, step colours and beliefs as they were then)",
                s.at
            ),
        );
    }
    m.push_str("</dl>\n</section>\n");
    m
}

fn dag_html(view: &RunView) -> String {
    let mut m = String::new();
    m.push_str("<section id=\"dag\" aria-labelledby=\"dag-h\">\n<h2 id=\"dag-h\">Plan</h2>\n");
    let Some(dag) = &view.dag else {
        let _ = writeln!(
            m,
            "<p>The step graph cannot be shown: {}</p>\n</section>",
            prose(view.dag_problem.as_deref().unwrap_or("no plan"))
        );
        return m;
    };
    let _ = writeln!(
        m,
        "<p>Plan <code>{}</code> version {}, {} steps, after event {}.</p>",
        escape(&dag.graph.plan),
        dag.graph.version,
        dag.graph.steps.len(),
        view.summary.at
    );
    m.push_str("<ul class=\"legend\" aria-label=\"Colours\">");
    for st in StepStatus::ALL {
        let (fill, stroke) = dag::colours(st);
        let _ = write!(
            m,
            "<li><span class=\"swatch\" style=\"background:{fill};border-color:{stroke}\"></span>{}</li>",
            st.label()
        );
    }
    m.push_str("</ul>\n");
    let _ = writeln!(
        m,
        "<figure class=\"dag\"><div class=\"scroll\">{}</div></figure>",
        dag::svg(dag)
    );
    m.push_str("<div class=\"scroll\"><table id=\"dag-steps\">\n<caption>Steps by level</caption>\n<thead><tr><th scope=\"col\">Step</th><th scope=\"col\" class=\"num\">Level</th><th scope=\"col\">Runs</th><th scope=\"col\">Waits for</th><th scope=\"col\">Status</th><th scope=\"col\">Detail</th></tr></thead>\n<tbody>\n");
    for level in &dag.graph.levels {
        for &i in level {
            let Some(step) = dag.graph.steps.get(i) else {
                continue;
            };
            let (status, detail) = dag
                .status
                .get(i)
                .cloned()
                .unwrap_or((StepStatus::NotStarted, None));
            let mut runs = escape(&step.what);
            if let Some(b) = &step.body {
                let inner: Vec<String> = b
                    .graph
                    .steps
                    .iter()
                    .map(|t| format!("<code>{}</code>", escape(&b.shown(&step.name, &t.name))))
                    .collect();
                let _ = write!(runs, "; body: {}", inner.join(", "));
            }
            let _ = writeln!(
                m,
                "<tr id=\"step-{}\"><th scope=\"row\"><code>{}</code></th><td class=\"num\">{}</td><td>{runs}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                id_part(&step.name),
                escape(&step.name),
                step.level,
                step.deps
                    .iter()
                    .map(|d| format!("<code>{}</code>", escape(d)))
                    .collect::<Vec<_>>()
                    .join(", "),
                badge(status.as_str()),
                prose(&detail.unwrap_or_default()),
            );
        }
    }
    m.push_str("</tbody></table></div>\n</section>\n");
    m
}

fn state_html(view: &RunView, links: Option<&Links>) -> String {
    let st = &view.state;
    let s = &view.summary;
    let mut m = String::new();
    let _ = writeln!(
        m,
        "<section id=\"state\" aria-labelledby=\"state-h\">\n<h2 id=\"state-h\">State after event {} (tick {}, {})</h2>",
        st.seq,
        st.time,
        escape(&st.kind)
    );
    if let Some(l) = links {
        // A plain GET form: choosing another event works without a script.
        let _ = writeln!(
            m,
            "<form id=\"at-form\" method=\"get\" action=\"{}\"><div class=\"row\"><label for=\"at\">Show the run as it was after event</label><input type=\"number\" id=\"at\" name=\"at\" min=\"0\" max=\"{}\" step=\"1\" value=\"{}\" inputmode=\"numeric\"></div><input type=\"hidden\" name=\"from\" value=\"{}\"><input type=\"hidden\" name=\"limit\" value=\"{}\"><button type=\"submit\">Show</button> <a href=\"{}\">latest</a></form>",
            escape(&l.run(&s.id)),
            s.events.saturating_sub(1),
            st.seq,
            view.timeline.page.from,
            view.timeline.page.limit,
            escape(&l.run(&s.id)),
        );
    }
    let _ = writeln!(
        m,
        "<p>State hash <code>{}</code>{}; {} keys.</p>",
        escape(&st.hash),
        st.from_snapshot.map_or(String::new(), |s| format!(
            ", rebuilt from the snapshot at event {s}"
        )),
        st.entries.len()
    );
    if st.entries.is_empty() {
        m.push_str("<p>The state is empty.</p>\n</section>\n");
        return m;
    }
    m.push_str("<div class=\"scroll\"><table id=\"state-entries\">\n<caption>Keys and values</caption>\n<thead><tr><th scope=\"col\">Key</th><th scope=\"col\">Value</th></tr></thead>\n<tbody>\n");
    for (k, v) in &st.entries {
        let _ = writeln!(
            m,
            "<tr><th scope=\"row\"><code>{}</code></th><td>{}</td></tr>",
            escape(k),
            value_html(v)
        );
    }
    m.push_str("</tbody></table></div>\n</section>\n");
    m
}

fn claim_cells(c: &ClaimRow) -> String {
    let by = if c.tool == oracle_memory::external::ORIGIN_TOOL {
        "from outside (<code>oracle claim</code>)".to_owned()
    } else {
        format!(
            "step <code>{}</code> (<code>{}</code>)",
            escape(&c.step),
            escape(&c.tool)
        )
    };
    format!(
        "<td><code title=\"{}\">{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{} / {}</td><td>{by}</td><td>{}</td><td>{}</td>",
        escape(&c.id),
        escape(&shorten_id(&c.id)),
        value_html(&c.value),
        escape(&c.provenance),
        c.disposition.as_deref().map_or_else(String::new, badge),
        escape(&c.criticality),
        c.seq,
        c.time,
        escape(c.valid.as_deref().unwrap_or("always")),
        escape(&c.reason),
    )
}

fn shorten_id(id: &str) -> String {
    id.chars().take(12).collect()
}

const CLAIM_HEADERS: &str = "<th scope=\"col\">Claim</th><th scope=\"col\">Value</th><th scope=\"col\">Provenance</th><th scope=\"col\">Disposition</th><th scope=\"col\">Criticality</th><th scope=\"col\" class=\"num\">Event / tick</th><th scope=\"col\">Recorded by</th><th scope=\"col\">Valid</th><th scope=\"col\">Gate's reason</th>";

fn memory_html(mv: &MemoryView, run: &str, links: Option<&Links>) -> String {
    let mut m = String::new();
    let _ = writeln!(
        m,
        "<section id=\"beliefs\" aria-labelledby=\"beliefs-h\">\n<h2 id=\"beliefs-h\">Beliefs{}</h2>",
        mv.as_of
            .map_or(String::new(), |t| format!(" as of tick {t}"))
    );
    if mv.lines.is_empty() && mv.requests.is_empty() {
        m.push_str("<p>No claims recorded.</p>\n</section>\n");
        return m;
    }
    for (n, line) in mv.lines.iter().enumerate() {
        let values = line
            .values
            .iter()
            .map(|v| format!("<code>{}</code>", escape(&json_text(v, 200))))
            .collect::<Vec<_>>()
            .join(" | ");
        let _ = writeln!(
            m,
            "<h3 id=\"line-{n}\">{} / {} {}</h3>\n<p>{}{}</p>",
            escape(&line.subject),
            escape(&line.predicate),
            badge(&line.belief),
            if values.is_empty() {
                "No value is believed.".to_owned()
            } else {
                format!("Believed: {values}")
            },
            if line.pending.is_empty() {
                String::new()
            } else {
                format!(
                    " (pending adjudication: {})",
                    escape(&line.pending.join(", "))
                )
            }
        );
        let _ = writeln!(
            m,
            "<div class=\"scroll\"><table class=\"claims\">\n<caption>Claims of {} / {}, in retrieval order</caption>\n<thead><tr>{CLAIM_HEADERS}</tr></thead>\n<tbody>",
            escape(&line.subject),
            escape(&line.predicate)
        );
        for c in &line.claims {
            let _ = writeln!(m, "<tr>{}</tr>", claim_cells(c));
        }
        m.push_str("</tbody></table></div>\n");
    }
    if !mv.requests.is_empty() {
        m.push_str("<h3 id=\"requests-h\">Adjudications</h3>\n<div class=\"scroll\"><table id=\"requests\">\n<caption>Conflicts sent to the oracle, in the order opened</caption>\n<thead><tr><th scope=\"col\">Handle</th><th scope=\"col\">Status</th><th scope=\"col\">Line</th><th scope=\"col\">Incumbent</th><th scope=\"col\">Challenger</th><th scope=\"col\">Criticality</th><th scope=\"col\">Expires</th><th scope=\"col\">Outcome</th></tr></thead>\n<tbody>\n");
        for r in &mv.requests {
            let side = |c: &Option<ClaimRow>| {
                c.as_ref().map_or("?".to_owned(), |c| {
                    format!(
                        "<code>{}</code> ({}, step <code>{}</code>)",
                        escape(&json_text(&c.value, 200)),
                        escape(&c.provenance),
                        escape(&c.step)
                    )
                })
            };
            let outcome = match (&r.outcome, links, r.status.as_str()) {
                (Some(o), _, _) => escape(o),
                (None, Some(l), "pending") => format!(
                    "<a href=\"{}#verdict-{}-{}\">give a verdict in the inbox</a>",
                    escape(&l.inbox()),
                    id_part(run),
                    id_part(&r.handle)
                ),
                _ => String::new(),
            };
            let _ = writeln!(
                m,
                "<tr id=\"request-{}\"><th scope=\"row\"><code>{}</code></th><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{outcome}</td></tr>",
                id_part(&r.handle),
                escape(&r.handle),
                badge(&r.status),
                escape(&r.subject),
                escape(&r.predicate),
                side(&r.incumbent),
                side(&r.challenger),
                escape(&r.criticality),
                r.expires_at
                    .map_or("never".to_owned(), |t| format!("tick {t}")),
            );
        }
        m.push_str("</tbody></table></div>\n");
    }
    m.push_str("</section>\n");
    m
}

fn timeline_html(t: &Timeline, view: &RunView, links: Option<&Links>) -> String {
    let s = &view.summary;
    let mut m = String::new();
    m.push_str("<section id=\"timeline\" aria-labelledby=\"timeline-h\">\n<h2 id=\"timeline-h\">Events</h2>\n");
    let shown = match (t.events.first(), t.events.last()) {
        (Some(a), Some(b)) => format!("Events {} to {} of {}", a.seq, b.seq, t.total),
        _ => format!("No events on this page ({} in the log)", t.total),
    };
    let pager = links.map(|l| pager_html(l, s.id.as_str(), t, s.at_asked.then_some(s.at)));
    if let Some(p) = &pager {
        m.push_str(p);
    }
    let _ = writeln!(
        m,
        "<div class=\"scroll\"><table id=\"events\">\n<caption>{shown}</caption>\n<thead><tr><th scope=\"col\" class=\"num\">Seq</th><th scope=\"col\" class=\"num\">Tick</th><th scope=\"col\">Kind</th><th scope=\"col\">Step</th><th scope=\"col\">Summary</th><th scope=\"col\">Parents</th><th scope=\"col\">Hash</th></tr></thead>\n<tbody>"
    );
    for e in &t.events {
        let seq = match links {
            Some(l) => format!(
                "<a href=\"{}\" title=\"Show the run after event {}\">{}</a>",
                escape(&l.run_with(&s.id, Some(e.seq), t.page)),
                e.seq,
                e.seq
            ),
            None => e.seq.to_string(),
        };
        let _ = writeln!(
            m,
            "<tr id=\"event-{}\"><th scope=\"row\" class=\"num\">{seq}</th><td class=\"num\">{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td><code title=\"{}\">{}</code></td></tr>",
            e.seq,
            e.time,
            escape(&e.kind),
            e.step
                .as_deref()
                .map_or(String::new(), |st| format!("<code>{}</code>", escape(st))),
            prose(&e.summary),
            e.parents
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            escape(&e.hash),
            escape(&shorten_id(&e.hash)),
        );
    }
    m.push_str("</tbody></table></div>\n");
    if let Some(p) = &pager {
        m.push_str(p);
    }
    let end = t.page.from.saturating_add(t.events.len() as u64);
    if links.is_none() && (t.page.from > 0 || end < t.total) {
        let _ = writeln!(
            m,
            "<p>This report shows events {} to {} only: <code>oracle log {}</code> lists them all.</p>",
            t.page.from,
            end.saturating_sub(1),
            escape(&s.id)
        );
    }
    m.push_str("</section>\n");
    m
}

fn pager_html(l: &Links, id: &str, t: &Timeline, at: Option<u64>) -> String {
    let limit = t.page.limit.max(1);
    let last_from = t.total.saturating_sub(1) / limit * limit;
    let mut items = Vec::new();
    let link = |from: u64, text: &str| {
        format!(
            "<li><a href=\"{}\">{text}</a></li>",
            escape(&l.run_with(id, at, Page { from, limit }))
        )
    };
    if t.page.from > 0 {
        items.push(link(0, "First"));
        items.push(link(t.page.from.saturating_sub(limit), "Previous"));
    }
    if t.page.from.saturating_add(limit) < t.total {
        items.push(link(t.page.from.saturating_add(limit), "Next"));
        items.push(link(last_from, "Last"));
    }
    if items.is_empty() {
        return String::new();
    }
    format!(
        "<nav class=\"pager\" aria-label=\"Event pages\"><ul>{}</ul></nav>\n",
        items.join("")
    )
}

/// The first 12 hex digits of a hash, as `oracle` prints hashes in prose.
fn short_hash(hex: &str) -> &str {
    hex.get(..12).unwrap_or(hex)
}

fn divergence_html(d: &DivergenceView) -> String {
    let mut m = String::new();
    let _ = writeln!(
        m,
        "<section id=\"divergence\" aria-labelledby=\"divergence-h\">\n<h2 id=\"divergence-h\">Divergence of <code>{}</code> (A) and <code>{}</code> (B)</h2>",
        escape(&d.a),
        escape(&d.b)
    );
    if let Some((pa, pb)) = &d.plans {
        let _ = writeln!(
            m,
            "<p>The plans differ (program <code>{}</code> and <code>{}</code>): the events are compared by content (kind, step, tool, input, output, state) from event 1, not by chain hash.</p>",
            escape(short_hash(pa)),
            escape(short_hash(pb))
        );
    }
    match &d.outcome {
        DiffOutcome::Identical { events } if d.plans.is_some() => {
            let _ = writeln!(
                m,
                "<p>The same content: {events} events; only the plans differ.</p>"
            );
        }
        DiffOutcome::Identical { events } => {
            let _ = writeln!(m, "<p>Identical: the same {events} events.</p>");
        }
        DiffOutcome::Prefix {
            shorter,
            common,
            extra,
        } => {
            let _ = writeln!(
                m,
                "<p>Log {} is a prefix of the other: {common} events in common, then {extra} more.</p>",
                escape(shorter)
            );
        }
        DiffOutcome::Diverged {
            seq,
            class,
            kind_a,
            kind_b,
            step,
            fields,
            fields_omitted,
        } => {
            let _ = writeln!(
                m,
                "<p>First difference at event {seq}: <strong>{}</strong> (A: <code>{}</code>, B: <code>{}</code>){}.</p>",
                escape(class),
                escape(kind_a),
                escape(kind_b),
                step.as_deref().map_or(String::new(), |s| format!(
                    ", step <code>{}</code>",
                    escape(s)
                ))
            );
            m.push_str("<div class=\"scroll\"><table id=\"divergence-fields\">\n<caption>Fields that differ</caption>\n<thead><tr><th scope=\"col\">Field</th><th scope=\"col\">A</th><th scope=\"col\">B</th></tr></thead>\n<tbody>\n");
            let cell = |v: &Option<Value>| v.as_ref().map_or("(absent)".to_owned(), value_html);
            for (path, a, b) in fields {
                let _ = writeln!(
                    m,
                    "<tr><th scope=\"row\"><code>{}</code></th><td>{}</td><td>{}</td></tr>",
                    escape(path),
                    cell(a),
                    cell(b)
                );
            }
            m.push_str("</tbody></table></div>\n");
            if *fields_omitted > 0 {
                let _ = writeln!(m, "<p>{fields_omitted} more fields differ.</p>");
            }
        }
    }
    m.push_str("</section>\n");
    m
}

/// Everything waiting on a person: a form per suspended step (its control chosen by the
/// step's answer schema) and verdict buttons per pending adjudication. Forms post to `forms`
/// with its CSRF token; they work without a script.
pub fn inbox_page(inbox: &Inbox, links: &Links, forms: &Forms) -> String {
    let mut m = String::new();
    m.push_str("<h1>Inbox</h1>\n<section id=\"inbox\" aria-label=\"Waiting on a person\">\n");
    let _ = writeln!(
        m,
        "<p>{} question{} and {} adjudication{} waiting.</p>",
        inbox.asks.len(),
        if inbox.asks.len() == 1 { "" } else { "s" },
        inbox.adjudications.len(),
        if inbox.adjudications.len() == 1 {
            ""
        } else {
            "s"
        },
    );
    m.push_str("<section id=\"questions\" aria-labelledby=\"questions-h\">\n<h2 id=\"questions-h\">Questions</h2>\n");
    if inbox.asks.is_empty() {
        m.push_str("<p>No step is waiting for an answer.</p>\n");
    }
    for a in &inbox.asks {
        m.push_str(&ask_html(a, links, forms));
    }
    m.push_str("</section>\n<section id=\"adjudications\" aria-labelledby=\"adjudications-h\">\n<h2 id=\"adjudications-h\">Adjudications</h2>\n");
    if inbox.adjudications.is_empty() {
        m.push_str("<p>No conflict is waiting for a verdict.</p>\n");
    }
    for r in &inbox.adjudications {
        m.push_str(&verdict_html(r, links, forms));
    }
    m.push_str("</section>\n<section id=\"proposals\" aria-labelledby=\"proposals-h\">\n<h2 id=\"proposals-h\">Proposals</h2>\n");
    if inbox.proposals.is_empty() {
        m.push_str("<p>No plan change is waiting for a decision.</p>\n");
    }
    for p in &inbox.proposals {
        m.push_str(&proposal_html(p, forms));
    }
    m.push_str("</section>\n");
    if !inbox.stores.is_empty() {
        m.push_str("<section id=\"store-adjudications\" aria-labelledby=\"store-adjudications-h\">\n<h2 id=\"store-adjudications-h\">Shared stores</h2>\n<p class=\"help\">Conflicts between runs sharing a named store. A verdict resumes the runs waiting on the line.</p>\n");
        for r in &inbox.stores {
            m.push_str(&store_verdict_html(r, links, forms));
        }
        m.push_str("</section>\n");
    }
    if !inbox.problems.is_empty() {
        m.push_str("<section id=\"problems\" aria-labelledby=\"problems-h\">\n<h2 id=\"problems-h\">Runs that could not be read</h2>\n<ul>\n");
        for (run, why) in &inbox.problems {
            let _ = writeln!(
                m,
                "<li><a href=\"{}\">{}</a>: {}</li>",
                escape(&links.run(run)),
                escape(run),
                prose(why)
            );
        }
        m.push_str("</ul>\n</section>\n");
    }
    m.push_str("</section>\n");
    document("Inbox", Some((links, Current::Inbox)), &m, false)
}

/// The run's family: the run it was forked from and its forks, the run and step that spawned
/// it and the runs its `spawn` steps started (docs/PLAN.md, "Child runs"), each linked on the
/// server.
fn family_rows(
    f: &oracle_host::Family,
    run_ref: &dyn Fn(&str) -> String,
    row: &mut dyn FnMut(&str, String),
) {
    if let Some((parent, shared)) = &f.parent {
        row(
            "Forked from",
            format!("{} (shares its first {shared} events)", run_ref(parent)),
        );
    }
    if !f.forks.is_empty() {
        let forks: Vec<String> = f
            .forks
            .iter()
            .map(|(id, shared)| {
                format!("{} (after event {})", run_ref(id), shared.saturating_sub(1))
            })
            .collect();
        let more = if f.truncated {
            "; only the home's first runs were compared"
        } else {
            ""
        };
        row("Forks", format!("{}{more}", forks.join(", ")));
    }
    if let Some(p) = &f.spawned_by {
        let step = format!("<code>{}</code>", escape(&p.step));
        row("Spawned by", format!("{} (step {step})", run_ref(&p.run)));
    }
    if !f.children.is_empty() {
        let children: Vec<String> = f
            .children
            .iter()
            .map(|(id, step)| format!("{} (step <code>{}</code>)", run_ref(id), escape(step)))
            .collect();
        row("Children", children.join(", "));
    }
}

/// The form that forks the run (`POST` to [`Forms::fork`]): before a step (chosen from the
/// plan's steps) or after an event, with an optional output for that step and an optional new
/// plan. Everything is checked by the host before anything is created.
fn fork_form_html(view: &RunView, forms: &Forms) -> String {
    let s = &view.summary;
    let mut steps = String::from("<option value=\"\">(by event number instead)</option>");
    for n in view.dag.iter().flat_map(|d| &d.graph.steps) {
        let _ = write!(
            steps,
            "<option value=\"{}\">{}</option>",
            escape(&n.name),
            escape(&n.name)
        );
    }
    format!(
        "<section id=\"fork\" aria-labelledby=\"fork-h\">\n<h2 id=\"fork-h\">Fork this run</h2>\n\
<p>A new run that shares this run's events up to the point chosen, byte for byte, then goes on: the step runs again, or takes the output given; with a plan, under that plan once it re-derives the shared events.</p>\n\
<form id=\"fork-form\" method=\"post\" action=\"{}\">\n{}\n\
<div class=\"row\"><label for=\"fork-step\">Before step</label><select id=\"fork-step\" name=\"step\">{steps}</select></div>\n\
<div class=\"row\"><label for=\"fork-at\">or after event</label><input type=\"number\" id=\"fork-at\" name=\"at\" min=\"1\" max=\"{}\" step=\"1\" inputmode=\"numeric\"></div>\n\
<div class=\"row\"><label for=\"fork-value\">The step's output (JSON, optional)</label><textarea id=\"fork-value\" name=\"value\" rows=\"3\"></textarea></div>\n\
<div class=\"row\"><label for=\"fork-plan\">A new plan to follow (its text, optional)</label><textarea id=\"fork-plan\" name=\"plan\" rows=\"8\"></textarea></div>\n\
<button type=\"submit\" id=\"fork-submit\">Fork</button>\n</form>\n</section>\n",
        escape(&forms.fork_action(&s.id)),
        hidden(form::CSRF_FIELD, &forms.csrf),
        s.events,
    )
}

fn hidden(name: &str, value: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
        escape(value)
    )
}

fn ask_html(a: &Ask, links: &Links, forms: &Forms) -> String {
    let base = format!("answer-{}-{}", id_part(&a.run), id_part(&a.step));
    let field = Field::for_schema(a.schema.as_ref());
    let mut m = String::new();
    let _ = writeln!(
        m,
        "<article class=\"item\" id=\"ask-{}-{}\">\n<h3>Run <a href=\"{}\">{}</a> (plan <code>{}</code>), step <code>{}</code></h3>",
        id_part(&a.run),
        id_part(&a.step),
        escape(&links.run(&a.run)),
        escape(&a.run),
        escape(&a.plan),
        escape(&a.step),
    );
    let _ = writeln!(
        m,
        "<p class=\"question\" id=\"{base}-question\">{}</p>",
        escape(a.question.as_deref().unwrap_or(&a.reason))
    );
    let mut context = Vec::new();
    if a.question.is_none() {
        context.push(
            "The step gave up and waits for its output from a person; the answer stands in for what its tool would have returned."
                .to_owned(),
        );
    }
    if a.attempts > 1 {
        context.push(format!("It made {} attempts.", a.attempts));
    }
    if let Some(t) = &a.tool {
        context.push(format!("It called <code>{}</code>.", escape(t)));
    }
    if !context.is_empty() {
        let _ = writeln!(m, "<p class=\"help\">{}</p>", context.join(" "));
    }
    let _ = writeln!(
        m,
        "<form id=\"{base}\" method=\"post\" action=\"{}\">\n{}{}{}",
        escape(&forms.answer_action(&a.run)),
        hidden(form::CSRF_FIELD, &forms.csrf),
        hidden(form::STEP_FIELD, &a.step),
        hidden(form::VALUE_TYPE_FIELD, field.value_type()),
    );
    m.push_str(&control_html(&field, &base));
    if let Some(schema) = &a.schema {
        // For a step that gave up, the schema is its tool's output schema: say whose.
        let whose = match a.tool.as_deref() {
            Some(t) if t != oracle_plan::agent::ASK_TOOL && t != oracle_plan::agent::CHAT_TOOL => {
                format!(
                    "JSON Schema of what <code>{}</code> returns, which the answer stands in for",
                    escape(t)
                )
            }
            _ => "The answer's JSON Schema".to_owned(),
        };
        let _ = writeln!(
            m,
            "<details><summary>{whose}</summary>{}</details>",
            value_html(schema)
        );
    }
    let _ = writeln!(
        m,
        "<button type=\"submit\" id=\"{base}-submit\">Send the answer</button>\n</form>\n</article>"
    );
    m
}

/// The control for an answer, labelled, described by the question and a help line.
fn control_html(field: &Field, base: &str) -> String {
    let id = format!("{base}-value");
    let described = format!("{base}-question {base}-help");
    let name = form::VALUE_FIELD;
    let mut m = String::from("<div class=\"row\">");
    let help = match field {
        Field::Text {
            min_length,
            max_length,
        } => {
            let mut attrs = String::new();
            if let Some(n) = min_length {
                let _ = write!(attrs, " minlength=\"{n}\"");
            }
            if let Some(n) = max_length {
                let _ = write!(attrs, " maxlength=\"{n}\"");
            }
            let _ = write!(
                m,
                "<label for=\"{id}\">Answer</label><input type=\"text\" id=\"{id}\" name=\"{name}\" required{attrs} aria-describedby=\"{described}\">"
            );
            "Text, sent as a JSON string."
        }
        Field::Integer { minimum, maximum } => {
            let mut attrs = String::new();
            if let Some(n) = minimum {
                let _ = write!(attrs, " min=\"{n}\"");
            }
            if let Some(n) = maximum {
                let _ = write!(attrs, " max=\"{n}\"");
            }
            let _ = write!(
                m,
                "<label for=\"{id}\">Answer</label><input type=\"number\" id=\"{id}\" name=\"{name}\" step=\"1\" inputmode=\"numeric\" required{attrs} aria-describedby=\"{described}\">"
            );
            "A whole number."
        }
        Field::Boolean => {
            let _ = write!(
                m,
                "<fieldset aria-describedby=\"{described}\"><legend>Answer</legend><input type=\"radio\" id=\"{id}-true\" name=\"{name}\" value=\"true\" required><label for=\"{id}-true\">Yes (true)</label> <input type=\"radio\" id=\"{id}-false\" name=\"{name}\" value=\"false\"><label for=\"{id}-false\">No (false)</label></fieldset>"
            );
            "Yes or no."
        }
        Field::Choice(members) => {
            let _ = write!(
                m,
                "<label for=\"{id}\">Answer</label><select id=\"{id}\" name=\"{name}\" required aria-describedby=\"{described}\"><option value=\"\">Choose one…</option>"
            );
            for v in members {
                let shown = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let _ = write!(
                    m,
                    "<option value=\"{}\">{}</option>",
                    escape(&v.to_string()),
                    escape(&shorten(&shown, 200))
                );
            }
            m.push_str("</select>");
            "One of the values the step allows."
        }
        Field::Json => {
            let _ = write!(
                m,
                "<label for=\"{id}\">Answer (JSON)</label><textarea id=\"{id}\" name=\"{name}\" rows=\"6\" required spellcheck=\"false\" aria-describedby=\"{described}\"></textarea>"
            );
            "JSON: text in double quotes (\"approved\"), a number, true or false, a list [...] or an object {...}."
        }
    };
    let _ = writeln!(
        m,
        "<p class=\"help\" id=\"{base}-help\">{}</p></div>",
        escape(help)
    );
    m
}

fn verdict_text(v: Verdict) -> &'static str {
    match v {
        Verdict::Affirm => "Affirm: the challenger is right",
        Verdict::Deny => "Deny: the incumbent stands",
        Verdict::Unknown => "Unknown: cannot tell (both become contested)",
    }
}

fn evidence_text(p: Provenance) -> &'static str {
    match p {
        Provenance::ExternalFirstHand => "First-hand evidence from outside the run",
        Provenance::UserAsserted => "Asserted by a user",
        Provenance::ModelDerived => "Derived by a model",
        Provenance::RecallReentry => "Recalled from memory",
    }
}

fn verdict_html(r: &RequestView, links: &Links, forms: &Forms) -> String {
    let base = format!("verdict-{}-{}", id_part(&r.run), id_part(&r.handle));
    let mut m = String::new();
    let _ = writeln!(
        m,
        "<article class=\"item\" id=\"adj-{}-{}\">\n<h3>Run <a href=\"{}\">{}</a>: <code>{}</code> on {} / {} {}</h3>",
        id_part(&r.run),
        id_part(&r.handle),
        escape(&links.run(&r.run)),
        escape(&r.run),
        escape(&r.handle),
        escape(&r.subject),
        escape(&r.predicate),
        badge(&r.criticality),
    );
    let _ = writeln!(
        m,
        "<p id=\"{base}-reason\">{}</p><p class=\"help\">Opened by event {} (step <code>{}</code>); {}.</p>",
        escape(&r.reason),
        r.seq,
        escape(&r.step),
        r.expires_at
            .map_or("it never expires".to_owned(), |t| format!(
                "it expires at tick {t}"
            ))
    );
    let _ = writeln!(
        m,
        "<div class=\"scroll\"><table class=\"claims\" id=\"{base}-claims\">\n<caption>The two claims</caption>\n<thead><tr><th scope=\"col\">Side</th>{CLAIM_HEADERS}</tr></thead>\n<tbody>"
    );
    for (side, c) in [("Incumbent", &r.incumbent), ("Challenger", &r.challenger)] {
        match c {
            Some(c) => {
                let _ = writeln!(
                    m,
                    "<tr><th scope=\"row\">{side}</th>{}</tr>",
                    claim_cells(c)
                );
            }
            None => {
                let _ = writeln!(
                    m,
                    "<tr><th scope=\"row\">{side}</th><td colspan=\"9\">not found in the run's memory</td></tr>"
                );
            }
        }
    }
    m.push_str("</tbody></table></div>\n");
    let _ = write!(
        m,
        "<form id=\"{base}\" method=\"post\" action=\"{}\">\n{}{}\n<div class=\"row\"><label for=\"{base}-evidence\">Evidence behind the verdict</label><select id=\"{base}-evidence\" name=\"{}\" required aria-describedby=\"{base}-evidence-help\"><option value=\"\">Choose the evidence…</option>",
        escape(&forms.verdict_action(&r.run)),
        hidden(form::CSRF_FIELD, &forms.csrf),
        hidden(form::HANDLE_FIELD, &r.handle),
        form::EVIDENCE_FIELD,
    );
    for p in EVIDENCE_ACCEPTED {
        let _ = write!(
            m,
            "<option value=\"{}\">{} ({})</option>",
            p.as_str(),
            evidence_text(p),
            p.as_str()
        );
    }
    let _ = writeln!(
        m,
        "</select><p class=\"help\" id=\"{base}-evidence-help\">Only first-hand evidence from outside the run can overturn or uphold a belief from an external source.</p></div>"
    );
    let _ = writeln!(
        m,
        "<div class=\"row\"><label for=\"{base}-note\">Note (optional, recorded with the verdict)</label><textarea id=\"{base}-note\" name=\"{}\" rows=\"3\" maxlength=\"{}\"></textarea></div>",
        form::NOTE_FIELD,
        oracle_host::NOTE_BYTES_MAX
    );
    let _ = writeln!(
        m,
        "<div class=\"row\"><input type=\"checkbox\" id=\"{base}-resume\" name=\"{}\" value=\"1\" checked> <label for=\"{base}-resume\" style=\"display:inline;font-weight:normal\">Then resume the run</label></div>",
        form::RESUME_FIELD
    );
    m.push_str("<fieldset class=\"verdicts\"><legend>Verdict</legend>");
    for v in Verdict::ALL {
        let _ = write!(
            m,
            "<button type=\"submit\" id=\"{base}-{}\" name=\"{}\" value=\"{}\">{}</button>",
            v.as_str(),
            form::VERDICT_FIELD,
            v.as_str(),
            verdict_text(v)
        );
    }
    m.push_str("</fieldset>\n</form>\n</article>\n");
    m
}

/// One side of a store's request: the claim, and the run that published it (if any).
fn store_side(side: &str, (claim, run): &(String, String), links: &Links) -> String {
    let by = match run.as_str() {
        "" => "from outside any run".to_owned(),
        r => format!(
            "run <a href=\"{}\">{}</a>",
            escape(&links.run(r)),
            escape(r)
        ),
    };
    format!(
        "<tr><th scope=\"row\">{side}</th><td><code>{}</code></td><td>{by}</td></tr>\n",
        escape(claim.get(..12).unwrap_or(claim))
    )
}

fn store_verdict_html(r: &StoreRequest, links: &Links, forms: &Forms) -> String {
    let base = format!("store-verdict-{}-{}", id_part(&r.store), id_part(&r.handle));
    let mut m = String::new();
    let _ = writeln!(
        m,
        "<article class=\"item\" id=\"{base}-item\">\n<h3>Store <code>{}</code>: <code>{}</code> on {} / {} {}</h3>\n<p id=\"{base}-reason\">{}</p>",
        escape(&r.store),
        escape(&r.handle),
        escape(&r.subject),
        escape(&r.predicate),
        badge(&r.criticality),
        escape(&r.reason),
    );
    let _ = write!(
        m,
        "<div class=\"scroll\"><table class=\"claims\" id=\"{base}-claims\">\n<caption>The two claims</caption>\n<thead><tr><th scope=\"col\">Side</th><th scope=\"col\">Claim</th><th scope=\"col\">Published by</th></tr></thead>\n<tbody>\n{}{}</tbody></table></div>\n",
        store_side("Incumbent", &r.incumbent, links),
        store_side("Challenger", &r.challenger, links),
    );
    let _ = write!(
        m,
        "<form id=\"{base}\" method=\"post\" action=\"{}\">\n{}{}\n<div class=\"row\"><label for=\"{base}-evidence\">Evidence behind the verdict</label><select id=\"{base}-evidence\" name=\"{}\" required><option value=\"\">Choose the evidence…</option>",
        escape(&forms.store_verdict_action(&r.store)),
        hidden(form::CSRF_FIELD, &forms.csrf),
        hidden(form::HANDLE_FIELD, &r.handle),
        form::EVIDENCE_FIELD,
    );
    for p in EVIDENCE_ACCEPTED {
        let _ = write!(
            m,
            "<option value=\"{}\">{} ({})</option>",
            p.as_str(),
            evidence_text(p),
            p.as_str()
        );
    }
    let _ = writeln!(
        m,
        "</select></div>\n<div class=\"row\"><label for=\"{base}-note\">Note (optional, recorded with the verdict)</label><textarea id=\"{base}-note\" name=\"{}\" rows=\"3\" maxlength=\"{}\"></textarea></div>",
        form::NOTE_FIELD,
        oracle_host::NOTE_BYTES_MAX
    );
    m.push_str("<fieldset class=\"verdicts\"><legend>Verdict</legend>");
    for v in Verdict::ALL {
        let _ = write!(
            m,
            "<button type=\"submit\" id=\"{base}-{}\" name=\"{}\" value=\"{}\">{}</button>",
            v.as_str(),
            form::VERDICT_FIELD,
            v.as_str(),
            verdict_text(v)
        );
    }
    m.push_str("</fieldset>\n</form>\n</article>\n");
    m
}

/// An undecided proposal: its reason, its diff against the base plan, its last check, a
/// rejection form, and the commands that approve it (an approval is signed where the key is
/// and uploaded: docs/EVOLUTION.md, "Over HTTP").
fn proposal_html(p: &ProposalView, forms: &Forms) -> String {
    let base = format!("proposal-{}", id_part(&p.id));
    let mut m = String::new();
    let _ = writeln!(
        m,
        "<article class=\"item\" id=\"{base}\">\n<h3>Proposal <code>{}</code> to plan <code>{}</code></h3>\n<p id=\"{base}-reason\">{}</p>\n<p class=\"help\">Recorded at {}.</p>",
        escape(&p.id),
        escape(&p.program),
        prose(&p.reason),
        escape(&p.recorded.join(", ")),
    );
    match &p.diff {
        Some(d) => {
            let _ = writeln!(
                m,
                "<pre class=\"scroll\" id=\"{base}-diff\">{}</pre>",
                escape(d)
            );
        }
        None => m.push_str("<p>No copy of the base plan is kept: no diff.</p>\n"),
    }
    let report = match &p.report {
        Some(r) => format!(
            "<p id=\"{base}-report\">Last check: {} unchanged, {} diverge, {} cannot be checked (report <code>{}</code>, BLAKE3 <code>{}</code>).</p>",
            r.unchanged,
            r.diverges,
            r.cannot_check,
            escape(&r.file),
            escape(&r.hash)
        ),
        None => format!(
            "<p id=\"{base}-report\">Not checked yet: <code>oracle evolve check {} --corpus-all</code>.</p>",
            escape(&p.id)
        ),
    };
    m.push_str(&report);
    let _ = writeln!(
        m,
        "\n<p class=\"help\" id=\"{base}-approve\">To approve, sign where your key is, then upload the file: <code>oracle evolve approve {id} --key KEY --report REPORT --out approval.json</code>, then <code>POST /api/v1/proposals/{id}/approval</code> with it. This page does not approve.</p>",
        id = escape(&p.id)
    );
    let _ = writeln!(
        m,
        "<form id=\"{base}-reject\" method=\"post\" action=\"{}\">\n{}\n<div class=\"row\"><label for=\"{base}-reason-field\">Why reject it (recorded in the ledger)</label><textarea id=\"{base}-reason-field\" name=\"reason\" rows=\"2\" required></textarea></div>\n<button type=\"submit\" id=\"{base}-reject-button\">Reject</button>\n</form>\n</article>",
        escape(&forms.reject_action(&p.id)),
        hidden(form::CSRF_FIELD, &forms.csrf),
    );
    m
}

#[cfg(test)]
mod tests;

/// The sign-in page of a served site: one field for a token (`id="token"`), posted with `next`
/// (where to go after) and `signin` (the form's sign-in token, which the server matches with
/// a cookie it set beside the page, against login CSRF) to `login` (the server's `POST
/// /login`). `error` is shown above the form when the last attempt failed.
pub fn signin_page(
    links: &Links,
    login: &str,
    next: &str,
    signin: &str,
    error: Option<&str>,
) -> String {
    let mut m = String::from("<h1>Sign in</h1>\n");
    if let Some(e) = error {
        let _ = writeln!(m, "<p class=\"error\" role=\"alert\">{}</p>", escape(e));
    }
    let _ = write!(
        m,
        "<form id=\"signin\" method=\"post\" action=\"{}\">\n\
         <p>Writes are recorded with the name of the token that made them.</p>\n\
         <label for=\"token\">Token</label>\n\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required>\n\
         <input type=\"hidden\" name=\"next\" value=\"{}\">\n\
         <input type=\"hidden\" name=\"signin\" value=\"{}\">\n\
         <button id=\"signin-submit\" type=\"submit\">Sign in</button>\n</form>\n",
        escape(login),
        escape(next),
        escape(signin)
    );
    document("Sign in", Some((links, Current::Runs)), &m, false)
}

/// A short page saying what happened (a form that was refused, say), with a link back. `role`
/// is `alert` for an error, `status` otherwise.
pub fn message_page(links: &Links, title: &str, text: &str, error: bool, back: &str) -> String {
    let m = format!(
        "<h1>{}</h1>\n<p id=\"message\" class=\"{}\" role=\"{}\">{}</p>\n<p><a id=\"back\" href=\"{}\">Back</a></p>\n",
        escape(title),
        if error { "error" } else { "ok" },
        if error { "alert" } else { "status" },
        escape(text),
        escape(back)
    );
    document(title, Some((links, Current::Inbox)), &m, false)
}
