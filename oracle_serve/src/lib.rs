//! `oracle serve`: the HTTP JSON API over a home's runs (docs/API.md): list runs and read
//! their events (paged through the index, or tailed as Server-Sent Events), state, beliefs and
//! adjudications; verify and diff; the inbox of suspended steps and pending adjudications
//! across runs; and the signals a person sends back (an answer, a verdict, an outside claim),
//! each recorded under the run's writer lock with the name of the token that sent it (`by`).
//! A watcher polls the runs' logs and announces every new suspension, adjudication request
//! and failed run to an SSE stream and to the beacon program (`--notify-cmd`).
//!
//! Only this crate (and the MCP example) uses tokio and axum; the engine stays synchronous.
//! Every handler runs the blocking functions of [`data`] (the host's reads) and [`signals`],
//! which drive runs through `oracle_host` as the command line does.
//!
//! # The seam for HTML pages
//!
//! The HTML UI lives in its own crate and is mounted beside the API, sharing its state:
//!
//! - [`AppState`]: the home ([`AppState::home`]), the tokens, the browser [`auth::Sessions`],
//!   the [`Config`], and the inbox the watcher keeps ([`AppState::watch`]`.inbox()`).
//! - [`router`]`(state, Some(ui))` merges a `Router<AppState>` of pages (`/`, `/runs/{id}`,
//!   `/inbox`, form POSTs) with the API routes; [`serve::run`] takes a function that builds
//!   that router from the state (`oracle serve` passes `None` until the UI crate exists).
//! - The data a page shows, as the API returns it: [`data::runs`], [`data::run_summary`],
//!   [`data::waiting`], [`data::events_page`], [`data::state_at`], [`data::beliefs`],
//!   [`data::adjudications`], [`data::verify`], [`data::diff`], and the inbox
//!   ([`watch::Watch::inbox`]). Validate a run id from a URL with [`AppState::run`].
//! - Signals from forms: [`signals::answer`], [`signals::adjudicate`], [`signals::claim`],
//!   [`signals::resume_in_background`], given the session's token name as `by`.
//! - Browsers: pages take [`auth::BrowserSession`] (the cookie `POST /login` sets; a page
//!   without one should offer the login form, which posts `token` and `next`). Every form a
//!   page renders carries the hidden field `csrf` = [`auth::csrf_token`]`(&session)`, and every
//!   form route checks it with [`auth::check_form_csrf`] before calling a signal. Errors
//!   ([`ApiError`]) carry their HTTP status ([`ApiError::status`]) and message.

// Errors carry the host's store and session errors whole (seq, offset, both hashes), which
// are large on purpose (see oracle_runtime/src/lib.rs).
#![allow(clippy::result_large_err)]

pub mod api;
pub mod auth;
pub mod config;
pub mod conn;
pub mod error;
pub mod evolve;
pub mod schedules;
pub mod serve;
pub mod signals;
pub mod state;
pub mod tokens;
pub mod ui;
pub mod watch;

// What the API reads from a run, and how a request's run id is checked, are the host's (the
// one door to a home's runs); named here as before so handlers and pages say `data::runs`.
pub use oracle_host::data;
pub use oracle_host::runid;

pub use api::router;
pub use config::Config;
pub use error::ApiError;
pub use state::AppState;
