//! The web UI: the pages of `oracle_html` (runs, a run, the inbox) served beside the API, and
//! the inbox's forms, which call the same signal functions as the API with the signed-in
//! token's name as `by`.
//!
//! Reading needs a browser session (`/signin` posts a token to `POST /login`, which sets the
//! session cookie) unless the server runs `--read-open`. Every form carries the session's CSRF
//! token and is checked with [`auth::check_form_csrf`] before anything is written. The pages
//! need no JavaScript; a form's result is a short page saying what was recorded, with a link
//! back (so reloading it does not post again silently: browsers ask first).

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use oracle_html::page::{self, Forms, Links};
use oracle_html::view::{self, Page, ViewError};
use serde::Deserialize;

use crate::api::Routes;
use crate::auth::{self, Session};
use crate::data;
use crate::error::ApiError;
use crate::signals::{self, AnswerBody, VerdictBody};
use crate::state::AppState;

/// The routes of the pages and forms, for [`crate::router`]`(state, Some(ui))`.
pub fn routes(_state: &AppState) -> Router<AppState> {
    table().into_router()
}

/// The pages and forms, listed ([`crate::api::route_list`] names them to the tests).
pub fn table() -> Routes {
    Routes::new()
        .get("/", || async { Redirect::to("/runs") })
        .get("/runs", runs)
        .get("/runs/{id}", run)
        .get("/inbox", inbox)
        .get("/schedules", schedules)
        .get("/signin", signin)
        .post("/runs/{id}/answer", answer)
        .post("/runs/{id}/verdict", verdict)
        .post("/runs/{id}/fork", fork)
        .post("/memory/{name}/verdict", store_verdict)
        .post("/proposals/{id}/reject", reject_proposal)
}

fn links() -> Links {
    Links::new("")
}

/// Whether a page may be read: with a session, or by anyone under `--read-open`. `Err` is the
/// redirect to the sign-in page, coming back to `here`.
fn may_read(
    state: &AppState,
    headers: &HeaderMap,
    here: &str,
) -> Result<Option<Session>, Response> {
    match auth::session_of(state, headers) {
        Some(s) => Ok(Some(s)),
        None if state.config.read_open => Ok(None),
        None => Err(Redirect::to(&format!(
            "/signin?next={}",
            oracle_html::escape::url_part(here)
        ))
        .into_response()),
    }
}

/// A page saying what went wrong, with the error's HTTP status.
fn refused(status: StatusCode, text: &str, back: &str) -> Response {
    (
        status,
        Html(page::message_page(&links(), "Not done", text, true, back)),
    )
        .into_response()
}

fn view_error(e: ViewError) -> Response {
    let status = if e.is_not_found() {
        StatusCode::NOT_FOUND
    } else if e.is_integrity() {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::BAD_REQUEST
    };
    refused(status, &e.to_string(), "/runs")
}

fn api_error(e: &ApiError, back: &str) -> Response {
    refused(e.status(), &e.to_string(), back)
}

/// Runs blocking work off the async workers; `heavy` work (a run's page and the inbox read
/// whole logs, and the signals re-derive runs) first takes one of the `heavy_jobs_max` permits
/// the API's whole-log requests share, so pages cannot pile up whole logs in memory at once.
async fn blocking<T: Send + 'static>(
    state: &AppState,
    heavy: bool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response> {
    let _permit = if heavy {
        Some(state.heavy.clone().acquire_owned().await.map_err(|_| {
            refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down",
                "/runs",
            )
        })?)
    } else {
        None
    };
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| refused(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), "/runs"))
}

/// The schedules with their next fire times (the API's `GET /api/v1/schedules`, as a page).
async fn schedules(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = may_read(&state, &headers, "/schedules") {
        return r;
    }
    let st = state.clone();
    match blocking(&state, false, move || crate::schedules::list(&st)).await {
        Ok(Ok(v)) => {
            let rows: Vec<page::ScheduleRow> = v["schedules"]
                .as_array()
                .map(|a| a.iter().map(schedule_row).collect())
                .unwrap_or_default();
            Html(page::schedules_page(&rows, &links())).into_response()
        }
        Ok(Err(e)) => api_error(&e, "/runs"),
        Err(r) => r,
    }
}

fn schedule_row(v: &serde_json::Value) -> page::ScheduleRow {
    let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    page::ScheduleRow {
        name: text("name"),
        cron: text("cron"),
        timezone: text("timezone"),
        plan: text("plan"),
        paused: v["paused"].as_bool().unwrap_or(false),
        next: v["next"].as_str().map(str::to_owned),
        last_run: v["last_run"].as_str().map(str::to_owned),
    }
}

async fn runs(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = may_read(&state, &headers, "/runs") {
        return r;
    }
    let home = state.home.clone();
    match blocking(&state, false, move || run_rows(&home)).await {
        Ok(Ok(rows)) => Html(page::runs_page(&rows, &links())).into_response(),
        Ok(Err(e)) => view_error(e),
        Err(r) => r,
    }
}

/// The rows of the run list, from [`data::run_infos`] (as `view::runs` builds them from
/// `session::list`, which would follow a symlink out of `<home>/runs`).
fn run_rows(home: &std::path::Path) -> Result<Vec<view::RunRow>, ViewError> {
    Ok(data::run_infos(home)?
        .into_iter()
        .map(view::RunRow::from)
        .collect())
}

#[derive(Deserialize)]
struct RunQuery {
    from: Option<u64>,
    limit: Option<u64>,
    at: Option<u64>,
    /// Another run to compare with: the page then shows where the two diverge first (as
    /// `oracle diff` does).
    diff: Option<String>,
}

async fn run(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<RunQuery>,
) -> Response {
    let session = match may_read(&state, &headers, &links().run(&id)) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if let Err(e) = state.run(&id) {
        return api_error(&e, "/runs");
    }
    // The fork form for a signed-in user, on a file home (a store's runs are forked by
    // `oracle fork` against the store's own home, never written into the mirror).
    let forms = session
        .filter(|_| {
            state
                .backend
                .file_home_only(oracle_host::backend::FileHomeOnly::Fork)
                .is_ok()
        })
        .map(|s| Forms::under("", &auth::csrf_token(&s)));
    // The other run is validated like any run id from a URL: a name under `<home>/runs`,
    // never a path.
    if let Some(Err(e)) = q.diff.as_deref().map(|o| state.run(o)) {
        return api_error(&e, "/runs");
    }
    let home = state.home.clone();
    let mut page_of = Page::default();
    if let Some(f) = q.from {
        page_of.from = f;
    }
    if let Some(l) = q.limit {
        page_of.limit = l;
    }
    let other = q.diff.clone();
    let prices = state.config.prices.clone();
    let load = move || {
        let mut v = view::run(&home, &id, q.at, page_of)?;
        let log = home.join("runs").join(&id).join(oracle_host::LOG_FILE);
        v.latency = crate::data::latency_view(&log, q.at, &prices);
        if let Some(o) = &other {
            v.divergence = Some(view::divergence(&home, &id, o)?);
        }
        Ok::<_, ViewError>(v)
    };
    match blocking(&state, true, load).await {
        Ok(Ok(v)) => Html(page::run_page(&v, &links(), forms.as_ref())).into_response(),
        Ok(Err(e)) => view_error(e),
        Err(r) => r,
    }
}

async fn inbox(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let session = match may_read(&state, &headers, "/inbox") {
        Ok(s) => s,
        Err(r) => return r,
    };
    // Without a session (`--read-open`) the forms carry no CSRF token: posting them leads to
    // the sign-in page.
    let csrf = session.as_ref().map(auth::csrf_token).unwrap_or_default();
    let home = state.home.clone();
    let st = state.clone();
    let load = move || {
        view::inbox(&home).map(|mut i| {
            // Only runs a request could name: the listing behind `view::inbox` follows
            // symlinks under `<home>/runs`.
            i.asks.retain(|a| data::is_listed(&home, &a.run));
            i.adjudications.retain(|r| data::is_listed(&home, &r.run));
            i.problems.retain(|(run, _)| data::is_listed(&home, run));
            i.proposals = crate::evolve::pending_views(&st);
            i
        })
    };
    match blocking(&state, true, load).await {
        Ok(Ok(i)) => Html(page::inbox_page(&i, &links(), &Forms::under("", &csrf))).into_response(),
        Ok(Err(e)) => view_error(e),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
struct SigninQuery {
    next: Option<String>,
}

/// The sign-in form, with a fresh sign-in token in it and its cookie set beside it: `POST
/// /login` takes a form only with the pair (login CSRF, `auth::Sessions::signin_token`).
async fn signin(State(state): State<AppState>, Query(q): Query<SigninQuery>) -> Response {
    let next = q.next.unwrap_or_else(|| "/inbox".to_owned());
    let (cookie, field) = match state.sessions.signin_token() {
        Ok(pair) => pair,
        Err(e) => return api_error(&e, "/"),
    };
    let page = page::signin_page(&links(), "/login", &next, &field, None);
    let mut r = Html(page).into_response();
    if let Ok(v) = axum::http::HeaderValue::from_str(&auth::signin_cookie(&cookie)) {
        r.headers_mut().insert(axum::http::header::SET_COOKIE, v);
    }
    // The token is for this one form: no cache keeps the page for another.
    r.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    r
}

/// The session a form post comes from, its CSRF field checked; `Err`: the page to answer with.
fn form_session(
    state: &AppState,
    headers: &HeaderMap,
    csrf: &str,
    back: &str,
) -> Result<Session, Response> {
    let Some(s) = auth::session_of(state, headers) else {
        return Err(Redirect::to(&format!(
            "/signin?next={}",
            oracle_html::escape::url_part(back)
        ))
        .into_response());
    };
    auth::check_form_csrf(&s, csrf).map_err(|e| api_error(&e, back))?;
    Ok(s)
}

#[derive(Deserialize)]
struct AnswerForm {
    #[serde(default)]
    csrf: String,
    step: String,
    #[serde(default)]
    value: String,
    value_type: String,
}

async fn answer(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<AnswerForm>,
) -> Response {
    let session = match form_session(&state, &headers, &f.csrf, "/inbox") {
        Ok(s) => s,
        Err(r) => return r,
    };
    let value = match oracle_html::form::answer_value(&f.value_type, &f.value) {
        Ok(v) => v,
        Err(e) => return refused(StatusCode::UNPROCESSABLE_ENTITY, &e.to_string(), "/inbox"),
    };
    let run = match state.run(&id) {
        Ok(r) => r,
        Err(e) => return api_error(&e, "/inbox"),
    };
    let body = AnswerBody {
        step: f.step.clone(),
        value,
        resume: true,
    };
    let st = state.clone();
    let by = session.name.clone();
    match blocking(&state, true, move || signals::answer(&st, &run, &by, body)).await {
        Ok(Ok(v)) => {
            let text = match v.get("queued") {
                Some(q) => format!(
                    "The answer to `{}` of run {id} by {} was checked and queued (signal {}); a worker records it and resumes the run.",
                    f.step, session.name, q["signal"]
                ),
                None => format!(
                    "The answer to `{}` of run {id} was recorded as event {} by {}; the run resumes in the background.",
                    f.step, v["seq"], session.name
                ),
            };
            Html(page::message_page(
                &links(),
                "Answer recorded",
                &text,
                false,
                &links().run(&id),
            ))
            .into_response()
        }
        Ok(Err(e)) => api_error(&e, "/inbox"),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
struct ForkForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    step: String,
    #[serde(default)]
    at: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    plan: String,
}

/// The run page's fork form: forks as `POST /api/v1/runs/ID/fork` does, by the signed-in
/// user, and links to the new run.
async fn fork(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<ForkForm>,
) -> Response {
    let back = links().run(&id);
    let session = match form_session(&state, &headers, &f.csrf, &back) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let asked = match oracle_html::form::fork_request(&f.step, &f.at, &f.value, &f.plan) {
        Ok(r) => r,
        Err(e) => return refused(StatusCode::UNPROCESSABLE_ENTITY, &e.to_string(), &back),
    };
    let run = match state.run(&id) {
        Ok(r) => r,
        Err(e) => return api_error(&e, &back),
    };
    let body = signals::ForkBody {
        at: asked.at,
        step: asked.step,
        value: asked.value,
        plan: asked.plan,
        key: None,
    };
    let (st, by) = (state.clone(), session.name.clone());
    match blocking(&state, true, move || signals::fork(&st, &run, &by, body)).await {
        Ok(Ok((_, v))) => {
            state.watch.refresh_soon();
            let new = v["run"].as_str().unwrap_or_default().to_owned();
            let text = format!(
                "Run {new} was forked from {id} by {}: it shares the first {} events, and {}.",
                session.name,
                v["shared"],
                match v["status"].as_str() {
                    Some("suspended") => "waits on a person (see the inbox)".to_owned(),
                    Some(s) => format!("is {s}"),
                    None => "goes on".to_owned(),
                }
            );
            Html(page::message_page(
                &links(),
                "Run forked",
                &text,
                false,
                &links().run(&new),
            ))
            .into_response()
        }
        Ok(Err(e)) => api_error(&e, &back),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
struct VerdictForm {
    #[serde(default)]
    csrf: String,
    handle: String,
    verdict: String,
    #[serde(default)]
    evidence: String,
    #[serde(default)]
    note: String,
    resume: Option<String>,
}

/// The inbox's verdict on a named store's request: as `POST
/// /api/v1/memory/{name}/adjudications/{handle}`, which also resumes the runs waiting on it.
async fn store_verdict(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(f): Form<VerdictForm>,
) -> Response {
    let session = match form_session(&state, &headers, &f.csrf, "/inbox") {
        Ok(s) => s,
        Err(r) => return r,
    };
    if let Err(e) = oracle_html::form::verdict(&f.verdict, &f.evidence, &f.note) {
        return refused(StatusCode::UNPROCESSABLE_ENTITY, &e.to_string(), "/inbox");
    }
    let body = VerdictBody {
        verdict: f.verdict.clone(),
        evidence: f.evidence.clone(),
        note: f.note.clone(),
        now: None,
        resume: false,
    };
    let (st, by, handle, store) = (state.clone(), session.name.clone(), f.handle.clone(), name);
    let done = blocking(&state, true, move || {
        signals::store_adjudicate(&st, &store, &handle, &by, body)
    })
    .await;
    state.watch.refresh_soon();
    match done {
        Ok(Ok(v)) => {
            let text = format!(
                "Verdict `{}` on {} of store {} was recorded as record {} by {}; runs resumed: {}.",
                f.verdict,
                f.handle,
                v["store"]["name"].as_str().unwrap_or(""),
                v["store"]["records"]
                    .as_u64()
                    .unwrap_or(1)
                    .saturating_sub(1),
                session.name,
                v["resumed"].as_array().map_or(0, Vec::len)
            );
            Html(page::message_page(
                &links(),
                "Verdict recorded",
                &text,
                false,
                "/inbox",
            ))
            .into_response()
        }
        Ok(Err(e)) => api_error(&e, "/inbox"),
        Err(r) => r,
    }
}

async fn verdict(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<VerdictForm>,
) -> Response {
    let session = match form_session(&state, &headers, &f.csrf, "/inbox") {
        Ok(s) => s,
        Err(r) => return r,
    };
    if let Err(e) = oracle_html::form::verdict(&f.verdict, &f.evidence, &f.note) {
        return refused(StatusCode::UNPROCESSABLE_ENTITY, &e.to_string(), "/inbox");
    }
    let run = match state.run(&id) {
        Ok(r) => r,
        Err(e) => return api_error(&e, "/inbox"),
    };
    let body = VerdictBody {
        verdict: f.verdict.clone(),
        evidence: f.evidence.clone(),
        note: f.note.clone(),
        now: None,
        resume: f.resume.is_some(),
    };
    let st = state.clone();
    let by = session.name.clone();
    let handle = f.handle.clone();
    match blocking(&state, true, move || {
        signals::adjudicate(&st, &run, &handle, &by, body)
    })
    .await
    {
        Ok(Ok(v)) => {
            let text = if let Some(q) = v.get("queued") {
                format!(
                    "Verdict `{}` on {} of run {id} by {} was checked and queued (signal {}); a worker records it and resumes the run.",
                    f.verdict, f.handle, session.name, q["signal"]
                )
            } else {
                format!(
                    "Verdict `{}` on {} of run {id} was recorded as event {} by {}{}.",
                    f.verdict,
                    f.handle,
                    v["seq"],
                    session.name,
                    if f.resume.is_some() {
                        "; the run resumes in the background"
                    } else {
                        ""
                    }
                )
            };
            Html(page::message_page(
                &links(),
                "Verdict recorded",
                &text,
                false,
                &links().run(&id),
            ))
            .into_response()
        }
        Ok(Err(e)) => api_error(&e, "/inbox"),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
struct RejectForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

/// The inbox's rejection of a proposal: a ledger entry with the session's name as `by`.
async fn reject_proposal(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<RejectForm>,
) -> Response {
    let session = match form_session(&state, &headers, &f.csrf, "/inbox") {
        Ok(s) => s,
        Err(r) => return r,
    };
    let st = state.clone();
    let by = session.name.clone();
    let body = crate::evolve::RejectBody { reason: f.reason };
    let pid = id.clone();
    match blocking(&state, true, move || {
        crate::evolve::reject(&st, &pid, &by, body)
    })
    .await
    {
        Ok(Ok(v)) => {
            let text = format!(
                "Proposal {id} was rejected by {} (ledger entry {}).",
                session.name, v["entry"]["entry"]
            );
            Html(page::message_page(
                &links(),
                "Proposal rejected",
                &text,
                false,
                "/inbox",
            ))
            .into_response()
        }
        Ok(Err(e)) => api_error(&e, "/inbox"),
        Err(r) => r,
    }
}
