//! The routes of `/api/v1` (docs/API.md), `POST /login` and `POST /logout`, and the extractors
//! that turn every malformed request into the one error shape.
//!
//! Handlers are thin: they check who asks ([`Reader`], [`Writer`]), validate the run id, and
//! run the blocking function of [`crate::data`] or [`crate::signals`] on the blocking pool
//! (whole-log work holding one of `heavy_jobs_max` permits). Server-Sent Event streams poll the
//! log's size every `poll_interval_ms` and end when the server shuts down.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{
    DefaultBodyLimit, Form, FromRequest, FromRequestParts, Path, Query, Request, State,
};
use axum::handler::Handler;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use oracle_core::Event;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::auth::{self, CSRF_HEADER, Reader, Writer};
use crate::config::{BODY_BYTES_MAX, EVENTS_PAGE_LIMIT_MAX, STREAM_BUFFER_BYTES_MAX};
use crate::data;
use crate::error::ApiError;
use crate::runid::ValidRun;
use crate::signals;
use crate::state::AppState;

/// A JSON answer with `status`.
pub fn json_response(status: StatusCode, v: &Value) -> Response {
    let mut r = (status, v.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn ok(v: Value) -> Response {
    json_response(StatusCode::OK, &v)
}

/// A write's answer: `202 Accepted` when it was checked and queued for a store's workers (its
/// `queued` names the signal), `200` when it was recorded here.
fn written(v: Value) -> Response {
    let status = if v.get("queued").is_some() {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    json_response(status, &v)
}

/// Query parameters; a malformed query is a 400 in the error shape.
pub struct Q<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Q<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(t)| Q(t))
            .map_err(|e| ApiError::BadRequest(format!("the query string: {}", e.body_text())))
    }
}

/// Path parameters (percent-decoded); a malformed one is a 400 in the error shape.
pub struct P<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for P<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| P(t))
            .map_err(|e| ApiError::BadRequest(format!("the path: {}", e.body_text())))
    }
}

/// A JSON request body: `Content-Type: application/json`, at most `body_bytes_max` bytes.
pub struct JsonBody<T>(pub T);

fn is_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = given.split(';').next().unwrap_or("").trim();
    if mime.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(ApiError::MediaType {
            given: given.chars().take(80).collect(),
        })
    }
}

async fn body_bytes(req: Request, state: &AppState) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge {
                limit: BODY_BYTES_MAX as u64,
            }
        } else {
            ApiError::BadRequest(format!("the body: {}", e.body_text()))
        }
    })
}

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        is_json(req.headers())?;
        let bytes = body_bytes(req, state).await?;
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| {
            ApiError::BadRequest(format!("the body is not the JSON this endpoint takes: {e}"))
        })
    }
}

/// Runs blocking work on the blocking pool; `heavy` work first takes one of the
/// `heavy_jobs_max` permits. A panic in it is a 500, never a crash.
async fn blocking<T: Send + 'static>(
    state: &AppState,
    heavy: bool,
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let _permit = if heavy {
        Some(
            state
                .heavy
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| ApiError::Unavailable("the server is shutting down".into()))?,
        )
    } else {
        None
    };
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("the request's worker failed: {e}")))?
}

/// Routes, and the list of what they route: every method and path a server answers can be
/// listed ([`route_list`]), so a check meant for every route (the `Host` check of
/// `--read-open`) is tested on each of them, and a route added later is tested too.
pub struct Routes {
    router: Router<AppState>,
    list: Vec<(Method, &'static str)>,
}

impl Default for Routes {
    fn default() -> Routes {
        Routes {
            router: Router::new(),
            list: Vec::new(),
        }
    }
}

impl Routes {
    pub fn new() -> Routes {
        Routes::default()
    }

    pub fn get<H, T>(self, path: &'static str, handler: H) -> Routes
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add(Method::GET, path, get(handler))
    }

    pub fn post<H, T>(self, path: &'static str, handler: H) -> Routes
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add(Method::POST, path, post(handler))
    }

    pub fn delete<H, T>(self, path: &'static str, handler: H) -> Routes
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add(Method::DELETE, path, axum::routing::delete(handler))
    }

    fn add(mut self, method: Method, path: &'static str, r: MethodRouter<AppState>) -> Routes {
        self.router = self.router.route(path, r);
        self.list.push((method, path));
        self
    }

    /// Every method and path routed, in the order they were added.
    pub fn list(&self) -> &[(Method, &'static str)] {
        &self.list
    }

    pub fn into_router(self) -> Router<AppState> {
        self.router
    }
}

/// The routes of the API, `POST /login` and `POST /logout`.
pub fn api_routes() -> Routes {
    Routes::new()
        .get("/api/v1/whoami", whoami)
        .get("/api/v1/runs", runs)
        .post("/api/v1/runs", start_run)
        .get("/api/v1/runs/{id}", run_summary)
        .get("/api/v1/runs/{id}/events", events)
        .get("/api/v1/runs/{id}/events/stream", events_stream)
        .get("/api/v1/runs/{id}/events/{seq}", event)
        // The segment is the event's name here (one parameter name per position of a path).
        .post("/api/v1/runs/{id}/events/{seq}", send_event)
        .get("/api/v1/runs/{id}/state", state_at)
        .get("/api/v1/runs/{id}/verify", verify)
        .get("/api/v1/runs/{id}/timeline", timeline)
        .get("/api/v1/runs/{id}/beliefs", beliefs)
        .get("/api/v1/runs/{id}/adjudications", adjudications)
        .post("/api/v1/runs/{id}/adjudications/{handle}", adjudicate)
        .post("/api/v1/runs/{id}/answer", answer)
        .post("/api/v1/runs/{id}/claims", claim)
        .post("/api/v1/runs/{id}/resume", resume)
        .post("/api/v1/runs/{id}/cancel", cancel)
        .post("/api/v1/runs/{id}/fork", fork)
        .get("/api/v1/memory/{name}/adjudications", store_adjudications)
        .post(
            "/api/v1/memory/{name}/adjudications/{handle}",
            store_adjudicate,
        )
        .get("/api/v1/proposals", proposals)
        .get("/api/v1/proposals/{id}", proposal)
        .post("/api/v1/proposals/{id}/check", proposal_check)
        .post("/api/v1/proposals/{id}/reject", proposal_reject)
        .post("/api/v1/proposals/{id}/approval", proposal_approval)
        .get("/api/v1/schedules", schedules_list)
        .post("/api/v1/schedules", schedules_add)
        .delete("/api/v1/schedules/{name}", schedules_delete)
        .post("/api/v1/schedules/{name}/pause", schedules_pause)
        .post("/api/v1/schedules/{name}/resume", schedules_resume)
        .post("/api/v1/schedules/{name}/trigger", schedules_trigger)
        .get("/api/v1/diff", diff)
        .get("/api/v1/inbox", inbox)
        .get("/api/v1/inbox/stream", inbox_stream)
        .get("/api/v1/openapi.json", openapi)
        .get("/metrics", metrics)
        .post("/login", login)
        .post("/logout", logout)
}

/// Every method and path `oracle serve` routes: the API's and the web UI's
/// ([`crate::ui::table`]). Anything else reaches the fallback (404 `no_route`).
pub fn route_list() -> Vec<(Method, &'static str)> {
    let mut all = api_routes().list;
    all.extend(crate::ui::table().list);
    all
}

/// The routes of the API, then the UI's (if any), on `state`. Anything else is a 404 in the
/// error shape. See the crate docs for mounting a UI.
///
/// Every request, whatever its route (the fallback included), first passes [`host_guard`].
pub fn router(state: AppState, ui: Option<Router<AppState>>) -> Router {
    let api = api_routes().into_router();
    let all = match ui {
        Some(ui) => api.merge(ui),
        None => api,
    };
    all.fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            host_guard,
        ))
        .layer(axum::middleware::map_response(harden))
        .with_state(state)
}

/// Under `--read-open`, a request whose `Host` header does not name a loopback address is
/// refused (403 `host`) before any route sees it: API, pages, sign-in, login and logout, the
/// fallback, with or without credentials. A web page whose DNS name is rebound to 127.0.0.1
/// sends its own name as `Host`, so it reads nothing through a visitor's browser, even where
/// reads need no token.
///
/// Without `--read-open` the `Host` is not checked: every read needs a token or a session
/// cookie, which a rebinding page does not have (the browser keeps the cookie for the name it
/// was set under), and a TLS proxy on the same machine may forward its own `Host`.
async fn host_guard(
    State(state): State<AppState>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    if state.config.read_open
        && let Err(e) = auth::loopback_host(req.headers())
    {
        return e.into_response();
    }
    next.run(req).await
}

/// Headers on every answer: nothing is cached (answers name live runs and may carry secrets
/// of the tokens' owners' work), and nothing is sniffed as another type.
async fn harden(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NoRoute {
        method: method.to_string(),
        path: uri.path().chars().take(200).collect(),
    }
}

async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::Method {
        method: method.to_string(),
    }
}

/// The OpenAPI 3.1 description of `/api/v1`, kept in `docs/openapi.json` and compiled in, so
/// the binary always describes the routes it has (`openapi_describes_every_route` checks that
/// the two agree).
pub const OPENAPI_JSON: &str = include_str!("../../docs/openapi.json");

/// `GET /api/v1/openapi.json`: a read like any other (a token, or `--read-open`).
async fn openapi(_: Reader) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        OPENAPI_JSON,
    )
        .into_response()
}

async fn whoami(Reader(who): Reader) -> Response {
    ok(json!({"ok": true, "name": who.map(|p| p.name)}))
}

async fn runs(
    State(state): State<AppState>,
    _: Reader,
    Q(q): Q<data::RunsQuery>,
) -> Result<Response, ApiError> {
    let home = state.home.clone();
    blocking(&state, false, move || {
        data::runs(&home, &q).map_err(ApiError::from)
    })
    .await
    .map(ok)
}

/// Prometheus metrics of the home's runs (docs/OBSERVABILITY.md): a read like any other, so
/// it needs a token unless the server is `--read-open`. Whole-log work (a run's log is read
/// again only when it grew): it holds a heavy permit.
async fn metrics(State(state): State<AppState>, _: Reader) -> Result<Response, ApiError> {
    let s = state.clone();
    let text = blocking(&state, true, move || {
        let runs = data::run_infos(&s.home).map_err(ApiError::Session)?;
        Ok(s.metrics.scrape(&s.home, &runs)?)
    })
    .await?;
    let mut r = (StatusCode::OK, text).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(oracle_host::metrics::CONTENT_TYPE),
    );
    Ok(r)
}

async fn run_summary(
    State(state): State<AppState>,
    _: Reader,
    P(id): P<String>,
) -> Result<Response, ApiError> {
    let run = crate::runid::validate_submitted(&state.home, &id)?;
    blocking(&state, false, move || {
        data::run_summary(&run).map_err(ApiError::from)
    })
    .await
    .map(ok)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    from: Option<u64>,
    limit: Option<u64>,
}

async fn events(
    State(state): State<AppState>,
    _: Reader,
    P(id): P<String>,
    Q(q): Q<EventsQuery>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    blocking(&state, false, move || {
        data::events_page(&run, q.from.unwrap_or(0), q.limit).map_err(ApiError::from)
    })
    .await
    .map(ok)
}

async fn event(
    State(state): State<AppState>,
    _: Reader,
    P((id, seq)): P<(String, u64)>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    blocking(&state, false, move || {
        data::event(&run, seq).map_err(ApiError::from)
    })
    .await
    .map(ok)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StateQuery {
    seq: Option<u64>,
    prefix: Option<String>,
}

async fn state_at(
    State(state): State<AppState>,
    _: Reader,
    P(id): P<String>,
    Q(q): Q<StateQuery>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    blocking(&state, true, move || {
        data::state_at(&run, q.seq, q.prefix.as_deref()).map_err(ApiError::from)
    })
    .await
    .map(ok)
}

async fn verify(
    State(state): State<AppState>,
    _: Reader,
    P(id): P<String>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    blocking(&state, true, move || {
        data::verify(&run).map_err(ApiError::from)
    })
    .await
    .map(ok)
}

async fn beliefs(
    State(state): State<AppState>,
    _: Reader,
    P(id): P<String>,
    Q(q): Q<data::BeliefsQuery>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    blocking(&state, true, move || {
        data::beliefs(&run, &q).map_err(ApiError::from)
    })
    .await
    .map(ok)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AdjudicationsQuery {
    status: Option<String>,
}

async fn adjudications(
    State(state): State<AppState>,
    _: Reader,
    P(id): P<String>,
    Q(q): Q<AdjudicationsQuery>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    blocking(&state, true, move || {
        data::adjudications(&run, q.status.as_deref()).map_err(ApiError::from)
    })
    .await
    .map(ok)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffQuery {
    a: String,
    b: String,
    verify: Option<bool>,
}

async fn diff(
    State(state): State<AppState>,
    _: Reader,
    Q(q): Q<DiffQuery>,
) -> Result<Response, ApiError> {
    let (a, b) = (state.run(&q.a)?, state.run(&q.b)?);
    let verify = q.verify.unwrap_or(true);
    blocking(&state, true, move || {
        data::diff(&a, &b, verify).map_err(ApiError::from)
    })
    .await
    .map(ok)
}

async fn timeline(
    State(state): State<AppState>,
    _: Reader,
    P(id): P<String>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    let prices = state.config.prices.clone();
    blocking(&state, true, move || {
        Ok(oracle_host::timeline::Timeline::of_log(&run.log(), None)?.to_json(&prices))
    })
    .await
    .map(ok)
}

async fn inbox(State(state): State<AppState>, _: Reader) -> Response {
    ok(state.watch.inbox())
}

async fn answer(
    State(state): State<AppState>,
    Writer(who): Writer,
    P(id): P<String>,
    JsonBody(body): JsonBody<signals::AnswerBody>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    let st = state.clone();
    let v = blocking(&state, true, move || {
        signals::answer(&st, &run, &who.name, body)
    })
    .await?;
    state.watch.refresh_soon();
    Ok(written(v))
}

async fn send_event(
    State(state): State<AppState>,
    Writer(who): Writer,
    P((id, name)): P<(String, String)>,
    JsonBody(body): JsonBody<signals::EventBody>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    let st = state.clone();
    let v = blocking(&state, true, move || {
        signals::send_event(&st, &run, &name, &who.name, body)
    })
    .await?;
    state.watch.refresh_soon();
    Ok(written(v))
}

async fn start_run(
    State(state): State<AppState>,
    Writer(who): Writer,
    JsonBody(body): JsonBody<signals::StartBody>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    let (status, v) = blocking(&state, true, move || signals::start(&st, &who.name, body)).await?;
    state.watch.refresh_soon();
    Ok(json_response(status, &v))
}

async fn schedules_list(State(state): State<AppState>, _: Reader) -> Result<Response, ApiError> {
    let st = state.clone();
    blocking(&state, false, move || crate::schedules::list(&st))
        .await
        .map(ok)
}

async fn schedules_add(
    State(state): State<AppState>,
    _: Writer,
    JsonBody(body): JsonBody<crate::schedules::AddBody>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    let v = blocking(&state, false, move || crate::schedules::add(&st, body)).await?;
    Ok(json_response(StatusCode::CREATED, &v))
}

async fn schedules_delete(
    State(state): State<AppState>,
    _: Writer,
    P(name): P<String>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    blocking(&state, false, move || crate::schedules::remove(&st, &name))
        .await
        .map(ok)
}

async fn schedules_pause(
    State(state): State<AppState>,
    _: Writer,
    P(name): P<String>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    blocking(&state, false, move || {
        crate::schedules::pause(&st, &name, true)
    })
    .await
    .map(ok)
}

async fn schedules_resume(
    State(state): State<AppState>,
    _: Writer,
    P(name): P<String>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    blocking(&state, false, move || {
        crate::schedules::pause(&st, &name, false)
    })
    .await
    .map(ok)
}

async fn schedules_trigger(
    State(state): State<AppState>,
    _: Writer,
    P(name): P<String>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    let v = blocking(&state, true, move || crate::schedules::trigger(&st, &name)).await?;
    state.watch.refresh_soon();
    Ok(json_response(StatusCode::CREATED, &v))
}

async fn cancel(
    State(state): State<AppState>,
    Writer(who): Writer,
    P(id): P<String>,
    JsonBody(body): JsonBody<signals::CancelBody>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    let st = state.clone();
    let v = blocking(&state, true, move || {
        signals::cancel(&st, &run, &who.name, body)
    })
    .await?;
    state.watch.refresh_soon();
    Ok(written(v))
}

async fn fork(
    State(state): State<AppState>,
    Writer(who): Writer,
    P(id): P<String>,
    JsonBody(body): JsonBody<signals::ForkBody>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    let st = state.clone();
    let (status, v) = blocking(&state, true, move || {
        signals::fork(&st, &run, &who.name, body)
    })
    .await?;
    state.watch.refresh_soon();
    Ok(json_response(status, &v))
}

async fn proposals(State(state): State<AppState>, _: Reader) -> Result<Response, ApiError> {
    let st = state.clone();
    blocking(&state, true, move || crate::evolve::list(&st))
        .await
        .map(ok)
}

async fn proposal(
    State(state): State<AppState>,
    _: Reader,
    P(id): P<String>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    blocking(&state, true, move || crate::evolve::show(&st, &id))
        .await
        .map(ok)
}

async fn proposal_check(
    State(state): State<AppState>,
    _: Writer,
    P(id): P<String>,
    JsonBody(body): JsonBody<crate::evolve::CheckBody>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    blocking(&state, true, move || crate::evolve::check(&st, &id, body))
        .await
        .map(ok)
}

async fn proposal_reject(
    State(state): State<AppState>,
    Writer(who): Writer,
    P(id): P<String>,
    JsonBody(body): JsonBody<crate::evolve::RejectBody>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    blocking(&state, true, move || {
        crate::evolve::reject(&st, &id, &who.name, body)
    })
    .await
    .map(ok)
}

async fn proposal_approval(
    State(state): State<AppState>,
    Writer(who): Writer,
    P(id): P<String>,
    JsonBody(body): JsonBody<oracle_host::evolve::SignedApproval>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    blocking(&state, true, move || {
        crate::evolve::approve(&st, &id, &who.name, body)
    })
    .await
    .map(ok)
}

async fn adjudicate(
    State(state): State<AppState>,
    Writer(who): Writer,
    P((id, handle)): P<(String, String)>,
    JsonBody(body): JsonBody<signals::VerdictBody>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    let st = state.clone();
    let v = blocking(&state, true, move || {
        signals::adjudicate(&st, &run, &handle, &who.name, body)
    })
    .await?;
    state.watch.refresh_soon();
    Ok(written(v))
}

async fn store_adjudications(
    State(state): State<AppState>,
    _: Reader,
    P(name): P<String>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    blocking(&state, true, move || signals::store_requests(&st, &name))
        .await
        .map(ok)
}

async fn store_adjudicate(
    State(state): State<AppState>,
    Writer(who): Writer,
    P((name, handle)): P<(String, String)>,
    JsonBody(body): JsonBody<signals::VerdictBody>,
) -> Result<Response, ApiError> {
    let st = state.clone();
    let v = blocking(&state, true, move || {
        signals::store_adjudicate(&st, &name, &handle, &who.name, body)
    })
    .await?;
    state.watch.refresh_soon();
    Ok(written(v))
}

async fn claim(
    State(state): State<AppState>,
    Writer(who): Writer,
    P(id): P<String>,
    JsonBody(body): JsonBody<signals::ClaimBody>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    let st = state.clone();
    let v = blocking(&state, true, move || {
        signals::claim(&st, &run, &who.name, body)
    })
    .await?;
    state.watch.refresh_soon();
    Ok(written(v))
}

async fn resume(
    State(state): State<AppState>,
    Writer(who): Writer,
    P(id): P<String>,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    let st = state.clone();
    let v = blocking(&state, false, move || {
        signals::resume_in_background(&st, &run, &who.name)
    })
    .await?;
    let queued = v.get("queued").cloned();
    let mut out = json!({"ok": true, "run": id, "resume": v});
    if let Some(q) = queued {
        out["queued"] = q;
    }
    Ok(written(out))
}

/// Holds one of the `streams_max` places of an open SSE stream; gives it back when the stream
/// ends (the client went away or the server shuts down).
struct StreamGuard(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl StreamGuard {
    fn take(state: &AppState) -> Result<StreamGuard, ApiError> {
        let n = state.streams.fetch_add(1, Ordering::SeqCst);
        let guard = StreamGuard(state.streams.clone());
        let max = state.config.streams_max;
        if n >= max {
            return Err(ApiError::Busy {
                what: "event streams",
                limit: max as u64,
            });
        }
        Ok(guard)
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamQuery {
    from: Option<u64>,
}

/// What one run's tail stream holds between polls: at most one batch of events read ahead of
/// its client, and a batch holds at most `stream_buffer_bytes_max` bytes of records (or one
/// record). The next batch is read only once the client has taken every event of this one, so
/// a client that reads slowly, or never, holds that much and no more.
pub(crate) struct Tail {
    run: ValidRun,
    next: u64,
    /// Log bytes when last read (`u64::MAX`: read again now).
    len: u64,
    /// Events read and not yet sent, with the bytes of their records.
    buf: VecDeque<(Event, u64)>,
    /// The bytes of the records in `buf`.
    buffered: u64,
    bytes_max: u64,
    shutdown: tokio::sync::watch::Receiver<bool>,
    interval: Duration,
    ended: bool,
    /// The pieces of a streamed model reply of this run, when this process drives it
    /// (`oracle_host::data::deltas`); `None` past the hub's watcher bound.
    deltas: Option<oracle_host::Subscription>,
}

impl Tail {
    pub(crate) fn new(
        run: ValidRun,
        from: u64,
        shutdown: tokio::sync::watch::Receiver<bool>,
        interval: Duration,
        bytes_max: u64,
    ) -> Tail {
        Tail {
            next: from,
            len: u64::MAX,
            buf: VecDeque::new(),
            buffered: 0,
            bytes_max,
            shutdown,
            interval,
            ended: false,
            deltas: oracle_host::data::deltas(&run.id),
            run,
        }
    }

    /// The bytes of the records read ahead of the client.
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> u64 {
        self.buffered
    }

    /// The next SSE event for the client: a buffered event, or (once the buffer is empty) the
    /// first of a new batch read when the log grew; `None` when the stream ends.
    pub(crate) async fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            if let Some((e, n)) = self.buf.pop_front() {
                self.buffered -= n;
                return Some(record_event(&e));
            }
            if self.ended || *self.shutdown.borrow() {
                return None;
            }
            let len = std::fs::metadata(self.run.log()).map_or(0, |m| m.len());
            if len != self.len {
                let (log, from, max) = (self.run.log(), self.next, self.bytes_max);
                let read = tokio::task::spawn_blocking(move || {
                    data::events_from(&log, from, EVENTS_PAGE_LIMIT_MAX, max)
                })
                .await;
                match read {
                    Ok(Ok(batch)) => {
                        // More behind the batch: read again as soon as it is taken.
                        self.len = if batch.more { u64::MAX } else { len };
                        self.next += batch.events.len() as u64;
                        self.buffered += batch.bytes;
                        self.buf.extend(batch.events.into_iter().zip(batch.sizes));
                        continue;
                    }
                    Ok(Err(e)) => {
                        self.ended = true;
                        return Some(
                            SseEvent::default()
                                .event("error")
                                .data(ApiError::from(e).body().to_string()),
                        );
                    }
                    Err(_) => return None,
                }
            }
            // After the log's events: a delta never arrives ahead of the call it belongs to.
            if let Some(sub) = &self.deltas
                && let Ok(d) = sub.rx.try_recv()
            {
                return Some(delta_event(&d, sub.dropped()));
            }
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                _ = self.shutdown.changed() => return None,
            }
        }
    }
}

fn record_event(e: &Event) -> SseEvent {
    let line = oracle_core::record::encode(e);
    let text = String::from_utf8_lossy(line.strip_suffix(b"\n").unwrap_or(&line)).into_owned();
    SseEvent::default()
        .event("event")
        .id(e.seq.to_string())
        .data(text)
}

/// A piece of a streamed model reply (`event: delta`, no `id`: it is not a record and cannot
/// be resumed from); `dropped` counts the pieces this stream lost so far to a full queue.
fn delta_event(d: &oracle_host::Delta, dropped: u64) -> SseEvent {
    let mut v = d.to_json();
    v["dropped"] = json!(dropped);
    SseEvent::default().event("delta").data(v.to_string())
}

/// `GET /api/v1/runs/{id}/events/stream?from=SEQ`: every event from `from` (or after the
/// `Last-Event-ID` a reconnecting client sends), then each new one as it is appended; one
/// SSE event per record (`event: event`, `id: SEQ`, `data:` the record). While this process
/// drives the run, each piece of a streamed model reply comes too (`event: delta`, `data:
/// {"run", "step", "attempt", "text", "dropped"}`): never recorded, never sent again to a
/// reconnecting client.
async fn events_stream(
    State(state): State<AppState>,
    _: Reader,
    P(id): P<String>,
    Q(q): Q<StreamQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let run = state.run(&id)?;
    let resumed_after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|s| s.saturating_add(1));
    let guard = StreamGuard::take(&state)?;
    let tail = Tail::new(
        run,
        resumed_after.or(q.from).unwrap_or(0),
        state.shutdown.clone(),
        Duration::from_millis(state.config.poll_interval_ms.max(1)),
        STREAM_BUFFER_BYTES_MAX,
    );
    let stream = futures_util::stream::unfold((tail, guard), |(mut t, guard)| async move {
        let ev = t.next_event().await?;
        Some((Ok::<_, Infallible>(ev), (t, guard)))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// `GET /api/v1/inbox/stream`: every announcement from now on (`event: announcement`, `id:`
/// the announcement's id, `data:` the announcement).
async fn inbox_stream(State(state): State<AppState>, _: Reader) -> Result<Response, ApiError> {
    let guard = StreamGuard::take(&state)?;
    let rx = state.watch.announce.subscribe();
    let shutdown = state.shutdown.clone();
    let stream = futures_util::stream::unfold(
        (rx, shutdown, guard),
        |(mut rx, mut shutdown, guard)| async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                if *shutdown.borrow() {
                    return None;
                }
                tokio::select! {
                    got = rx.recv() => match got {
                        Ok(v) => {
                            let ev = SseEvent::default()
                                .event("announcement")
                                .id(v["id"].as_str().unwrap_or_default())
                                .data(v.to_string());
                            return Some((Ok::<_, Infallible>(ev), (rx, shutdown, guard)));
                        }
                        // A client that fell behind misses the oldest; GET /api/v1/inbox has
                        // the current items.
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => return None,
                    },
                    _ = shutdown.changed() => return None,
                }
            }
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginBody {
    token: String,
    /// Where a form login goes next (a path on this server).
    next: Option<String>,
    /// A form's sign-in token (`auth::SIGNIN_FIELD`), matched against its cookie.
    signin: Option<String>,
}

/// A path on this server to go to after a form login (`/` for anything else, so a login link
/// cannot send the browser elsewhere).
///
/// Browsers forgive a `Location` a lot: they drop tabs and newlines anywhere in it (`/\t/evil`
/// is `//evil`, another host), read `\` as `/`, and a server or proxy behind may decode
/// `%2F`. So the value must be visible ASCII only, start with exactly one `/`, hold no `\`,
/// and the same must hold of every form that percent-decoding it gives (decoded until nothing
/// changes, at most [`LOCAL_PATH_DECODES_MAX`] times), where no whitespace or control character
/// may appear either.
pub fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(p) if is_local_path(p) => p,
        _ => "/",
    }
}

/// Percent-decodings of a `next` path checked before it is given up on as too deeply encoded
/// (each one shrinks the text, so a path that still changes after this many is refused).
pub const LOCAL_PATH_DECODES_MAX: usize = 4;

fn is_local_path(p: &str) -> bool {
    let shape = |t: &str| t.starts_with('/') && !t.starts_with("//") && !t.contains('\\');
    if !p.bytes().all(|b| b.is_ascii_graphic()) || !shape(p) {
        return false;
    }
    let mut text = p.to_owned();
    for _ in 0..LOCAL_PATH_DECODES_MAX {
        let Some(decoded) = percent_decode(&text) else {
            return false;
        };
        if decoded.chars().any(|c| c.is_control() || c.is_whitespace()) || !shape(&decoded) {
            return false;
        }
        if decoded == text {
            return true;
        }
        text = decoded;
    }
    false
}

/// `%XX` decoded (anything else kept as it is); `None` when the bytes are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

/// `POST /login`: a token (form field or JSON `token`) for a session cookie. A form is
/// answered with a redirect to `next`; JSON with `{"ok": true, "name", "csrf"}`. Login CSRF is
/// refused (`csrf`, before the token is looked at): a post its browser says is cross-site, and
/// a form without the sign-in token `/signin` gave it (a JSON body needs a content type no
/// page elsewhere can send without the server's leave).
async fn login(State(state): State<AppState>, req: Request) -> Result<Response, ApiError> {
    auth::same_origin(req.headers())?;
    let form = is_form(req.headers());
    let signin_cookie = auth::cookie(req.headers(), auth::SIGNIN_COOKIE);
    let body: LoginBody = if form {
        Form::<LoginBody>::from_request(req, &state)
            .await
            .map(|Form(b)| b)
            .map_err(|e| ApiError::BadRequest(format!("the form: {}", e.body_text())))?
    } else {
        JsonBody::<LoginBody>::from_request(req, &state).await?.0
    };
    if form {
        state
            .sessions
            .check_signin(signin_cookie.as_deref(), body.signin.as_deref())?;
    }
    let name = state.tokens.check(&body.token).ok_or(ApiError::BadToken)?;
    let session = state
        .sessions
        .create(&name, blake3::hash(body.token.as_bytes()))?;
    let cookie = HeaderValue::from_str(&auth::session_cookie(&session))
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut r = if form {
        let to = local_path(body.next.as_deref());
        let mut r = StatusCode::SEE_OTHER.into_response();
        let location = HeaderValue::from_str(to).unwrap_or_else(|_| HeaderValue::from_static("/"));
        r.headers_mut().insert(header::LOCATION, location);
        // The sign-in cookie has served.
        if let Ok(v) = HeaderValue::from_str(&auth::cleared_signin_cookie()) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
        r
    } else {
        ok(json!({"ok": true, "name": name, "csrf": auth::csrf_token(&session)}))
    };
    r.headers_mut().append(header::SET_COOKIE, cookie);
    Ok(r)
}

#[derive(serde::Deserialize)]
struct LogoutForm {
    csrf: Option<String>,
}

/// `POST /logout`: ends the browser's session (needs its CSRF token, as header or form field).
async fn logout(State(state): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let session = auth::session_of(&state, req.headers()).ok_or(ApiError::NoToken)?;
    let header_token = req
        .headers()
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let given = match header_token {
        Some(t) => t,
        None if is_form(req.headers()) => Form::<LogoutForm>::from_request(req, &state)
            .await
            .ok()
            .and_then(|Form(f)| f.csrf)
            .ok_or(ApiError::Csrf)?,
        None => return Err(ApiError::Csrf),
    };
    auth::check_form_csrf(&session, &given)?;
    state.sessions.remove(&session.id);
    let mut r = ok(json!({"ok": true}));
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&auth::cleared_cookie())
            .unwrap_or_else(|_| HeaderValue::from_static("")),
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Where a form login may send the browser: the tricky spellings of another origin, each
    /// as the form parser hands it over (percent-decoded once), all become `/`.
    #[test]
    fn login_redirects_only_to_a_path_on_this_server() {
        for (next, want) in [
            ("/inbox", "/inbox"),
            (
                "/runs/escalation-1?from=10&limit=5",
                "/runs/escalation-1?from=10&limit=5",
            ),
            ("/runs/caf%C3%A9-1", "/runs/caf%C3%A9-1"),
            ("/", "/"),
            ("", "/"),
            ("//evil.example", "/"),
            ("//evil.example/x", "/"),
            ("///evil.example", "/"),
            ("/\\evil.example", "/"),
            ("\\\\evil.example", "/"),
            ("/\t/evil.example", "/"),
            ("/\n/evil.example", "/"),
            ("/\r\n/evil.example", "/"),
            ("/ /evil.example", "/"),
            ("/\u{a0}/evil.example", "/"),
            ("/\u{2028}/evil.example", "/"),
            ("/\u{0}/evil.example", "/"),
            ("/%09/evil.example", "/"),
            ("/%0a/evil.example", "/"),
            ("/%20/evil.example", "/"),
            ("/%2F%2Fevil.example", "/"),
            ("/%2f/evil.example", "/"),
            ("/%5Cevil.example", "/"),
            ("/%252F%252Fevil.example", "/"),
            ("/%25252F%25252Fevil.example", "/"),
            ("/%2525252525252F", "/"),
            ("/%C3%28", "/"),
            ("https://evil.example", "/"),
            ("http:evil.example", "/"),
            ("javascript:alert(1)", "/"),
            ("JaVaScRiPt:alert(1)", "/"),
            ("evil.example", "/"),
            ("inbox", "/"),
            (" /inbox", "/"),
            ("/inbox ", "/"),
        ] {
            assert_eq!(local_path(Some(next)), want, "next = {next:?}");
        }
        assert_eq!(local_path(None), "/");
    }

    proptest! {
        /// Whatever `next` is, the redirect is a valid header value naming a path on this
        /// server: one leading `/`, visible ASCII, no backslash, and no decoding of it says otherwise.
        #[test]
        fn any_next_redirects_to_a_local_path(next in any::<String>()) {
            let to = local_path(Some(&next));
            prop_assert!(HeaderValue::from_str(to).is_ok());
            prop_assert!(to == "/" || to == next);
            prop_assert!(to.starts_with('/') && !to.starts_with("//") && !to.contains('\\'));
            prop_assert!(to.bytes().all(|b| b.is_ascii_graphic()));
            let mut t = to.to_owned();
            for _ in 0..LOCAL_PATH_DECODES_MAX {
                let d = percent_decode(&t).unwrap_or_default();
                prop_assert!(!d.starts_with("//") && !d.contains('\\'));
                prop_assert!(!d.chars().any(|c| c.is_control() || c.is_whitespace()));
                t = d;
            }
        }

        /// The same for strings built from the characters that matter here.
        #[test]
        fn tricky_next_redirects_to_a_local_path(
            next in "[/\\\\%0-9a-fA-F\t\n :.e]{0,12}"
        ) {
            let to = local_path(Some(&next));
            prop_assert!(to == "/" || (to.starts_with('/') && !to.starts_with("//")));
            let once = percent_decode(to).unwrap_or_default();
            prop_assert!(!once.starts_with("//") && !once.contains('\\'));
            prop_assert!(!once.chars().any(char::is_whitespace));
        }
    }
}

#[cfg(test)]
mod tail_tests {
    use super::*;

    /// A tail stream reads ahead of its client at most `stream_buffer_bytes_max` bytes of
    /// records (or one record): taken one event at a time, as a slow client takes them, its
    /// buffer never holds more, and every event still arrives once, in order.
    #[test]
    fn a_tail_reads_ahead_of_its_client_at_most_its_byte_limit() {
        let home = tempfile::tempdir().unwrap();
        let record = 100usize << 10;
        let run = crate::data::testing::big_run(home.path(), 60, record);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        for bytes_max in [256u64 << 10, STREAM_BUFFER_BYTES_MAX] {
            let mut t = Tail::new(
                run.clone(),
                0,
                shutdown.clone(),
                Duration::from_millis(10),
                bytes_max,
            );
            let mut most = 0;
            rt.block_on(async {
                for _ in 0..60 {
                    let ev = t.next_event().await;
                    assert!(ev.is_some());
                    most = most.max(t.buffered());
                    assert!(t.buffered() <= bytes_max, "{} buffered", t.buffered());
                }
            });
            // It did read ahead (a batch at a time), by no more than the limit.
            assert!(most > 2 * record as u64, "{most}");
            assert_eq!(t.next, 60);
            assert_eq!(t.buffered(), 0);
        }
    }
}
