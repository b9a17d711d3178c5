//! Every way a request fails, and how it is answered: an HTTP status and the command line's one
//! error object (`{"ok": false, "error": {"code", "exit", "message", ...}}`, built by
//! `oracle_host::error_json`, so the API and `oracle ... --json` name a failure alike).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use oracle_host::{SessionError, StoreError};
use oracle_memory::AdjudicateError;
use serde_json::{Value, json};

/// Why a request was refused or failed. Nothing is written to any log on any of these.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(
        "this needs a token: send `Authorization: Bearer SECRET` (`oracle serve token add NAME` makes one)"
    )]
    NoToken,
    #[error("the token is not one of the server's (see its token file)")]
    BadToken,
    #[error(
        "a write from a browser session needs its CSRF token (form field `csrf`, or header `X-CSRF-Token`)"
    )]
    Csrf,
    /// A sign-in refused as login CSRF: the same code, `csrf`, with what signing in needs.
    #[error(
        "a sign-in posted from another site, or a sign-in form without the token `/signin` gave it, is refused: sign in from this server's /signin page"
    )]
    SigninCsrf,
    #[error(
        "the Host header `{host}` is not this server's loopback address; open reads are refused"
    )]
    ForeignHost { host: String },
    #[error("{0}")]
    BadRequest(String),
    #[error("the request body must be JSON (`Content-Type: application/json`), not `{given}`")]
    MediaType { given: String },
    #[error("the request body is larger than body_bytes_max = {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("{what}")]
    NotFound { what: String },
    #[error("no such endpoint: {method} {path} (docs/API.md lists them)")]
    NoRoute { method: String, path: String },
    #[error("{method} is not allowed here (docs/API.md lists what each endpoint takes)")]
    Method { method: String },
    #[error("{what}: at most {limit} at once; try again later")]
    Busy { what: &'static str, limit: u64 },
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Host(oracle_host::HostError),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status, the exit code the command line would have given, the error's `code`
    /// name, and details beside `code`, `exit` and `message`.
    fn parts(&self) -> (StatusCode, u8, String, Value) {
        use StatusCode as S;
        let simple =
            |status: StatusCode, exit: u8, code: &str| (status, exit, code.to_owned(), json!({}));
        match self {
            ApiError::NoToken => simple(S::UNAUTHORIZED, oracle_host::EXIT_INPUT, "unauthorized"),
            ApiError::BadToken => simple(S::UNAUTHORIZED, oracle_host::EXIT_INPUT, "bad_token"),
            ApiError::Csrf | ApiError::SigninCsrf => {
                simple(S::FORBIDDEN, oracle_host::EXIT_INPUT, "csrf")
            }
            ApiError::ForeignHost { .. } => simple(S::FORBIDDEN, oracle_host::EXIT_INPUT, "host"),
            ApiError::BadRequest(_) => simple(S::BAD_REQUEST, oracle_host::EXIT_INPUT, "usage"),
            ApiError::MediaType { .. } => simple(
                S::UNSUPPORTED_MEDIA_TYPE,
                oracle_host::EXIT_INPUT,
                "media_type",
            ),
            ApiError::TooLarge { limit } => (
                S::PAYLOAD_TOO_LARGE,
                oracle_host::EXIT_INPUT,
                "too_large".into(),
                json!({"limit": limit}),
            ),
            ApiError::NotFound { .. } => simple(S::NOT_FOUND, oracle_host::EXIT_INPUT, "not_found"),
            ApiError::NoRoute { .. } => simple(S::NOT_FOUND, oracle_host::EXIT_INPUT, "no_route"),
            ApiError::Method { .. } => {
                simple(S::METHOD_NOT_ALLOWED, oracle_host::EXIT_INPUT, "method")
            }
            ApiError::Busy { limit, .. } => (
                S::SERVICE_UNAVAILABLE,
                oracle_host::EXIT_INPUT,
                "busy".into(),
                json!({"limit": limit}),
            ),
            ApiError::Unavailable(_) => simple(
                S::SERVICE_UNAVAILABLE,
                oracle_host::EXIT_INPUT,
                "unavailable",
            ),
            ApiError::Store(e) => class_parts(oracle_host::error::store_class(e)),
            ApiError::Session(e) => class_parts(oracle_host::error::session_class(e)),
            ApiError::Host(e) => class_parts(e.class()),
            ApiError::Internal(_) => simple(
                S::INTERNAL_SERVER_ERROR,
                oracle_host::EXIT_INPUT,
                "internal",
            ),
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    /// The error object (`code`, `exit`, `message` and details), as `--json` prints it.
    pub fn error_value(&self) -> Value {
        let (_, exit, code, details) = self.parts();
        let mut details = match details {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        details.insert("kind".into(), Value::from(code));
        let mut v = oracle_host::error_json(Some(Value::Object(details)), exit, &self.to_string());
        // `kind` only named the code for error_json.
        if let Value::Object(m) = &mut v {
            m.remove("kind");
        }
        v
    }

    /// The whole answer body: `{"ok": false, "error": {...}}`, plus `original` for a verdict on
    /// a handle already resolved (as `oracle adjudicate --json` reports it).
    pub fn body(&self) -> Value {
        let mut v = json!({"ok": false, "error": self.error_value()});
        if let ApiError::Session(SessionError::Adjudicate {
            source: AdjudicateError::AlreadyResolved { original, .. },
            ..
        }) = self
        {
            v["original"] = original.clone();
        }
        v
    }
}

impl From<oracle_host::HostError> for ApiError {
    fn from(e: oracle_host::HostError) -> ApiError {
        // A session's or store's failure stays one, so `body` finds what it reports beside it.
        match e {
            oracle_host::HostError::Session(s) => ApiError::Session(s),
            oracle_host::HostError::Store(s) => ApiError::Store(s),
            e => ApiError::Host(e),
        }
    }
}

impl From<oracle_host::data::DataError> for ApiError {
    fn from(e: oracle_host::data::DataError) -> ApiError {
        use oracle_host::data::DataError as D;
        // Each read failure is answered as the API's error of the same name.
        match e {
            D::BadRequest(m) => ApiError::BadRequest(m),
            D::NotFound { what } => ApiError::NotFound { what },
            D::Session(s) => ApiError::Session(s),
            D::Store(s) => ApiError::Store(s),
            D::Host(h) => ApiError::from(h),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        crate::api::json_response(self.status(), &self.body())
    }
}

/// A failure of the host's as the host names it: the one taxonomy (`oracle_host::error`), so the
/// API and the command line give the same `code` for the same failure.
fn class_parts(c: oracle_host::Class) -> (StatusCode, u8, String, Value) {
    (
        StatusCode::from_u16(c.http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        c.exit,
        c.code.to_owned(),
        c.details,
    )
}
