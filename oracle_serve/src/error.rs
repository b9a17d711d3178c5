//! Every way a request fails, and how it is answered: an HTTP status and the command line's one
//! error object (`{"ok": false, "error": {"code", "exit", "message", ...}}`, built by
//! `oracle_runtime::exit::error_json`, so the API and `oracle ... --json` name a failure alike).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use oracle_memory::AdjudicateError;
use oracle_runtime::StoreError;
use oracle_runtime::engine::EngineError;
use oracle_runtime::exit;
use oracle_runtime::session::SessionError;
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
            ApiError::NoToken => simple(S::UNAUTHORIZED, exit::INPUT, "unauthorized"),
            ApiError::BadToken => simple(S::UNAUTHORIZED, exit::INPUT, "bad_token"),
            ApiError::Csrf => simple(S::FORBIDDEN, exit::INPUT, "csrf"),
            ApiError::ForeignHost { .. } => simple(S::FORBIDDEN, exit::INPUT, "host"),
            ApiError::BadRequest(_) => simple(S::BAD_REQUEST, exit::INPUT, "usage"),
            ApiError::MediaType { .. } => {
                simple(S::UNSUPPORTED_MEDIA_TYPE, exit::INPUT, "media_type")
            }
            ApiError::TooLarge { limit } => (
                S::PAYLOAD_TOO_LARGE,
                exit::INPUT,
                "too_large".into(),
                json!({"limit": limit}),
            ),
            ApiError::NotFound { .. } => simple(S::NOT_FOUND, exit::INPUT, "not_found"),
            ApiError::NoRoute { .. } => simple(S::NOT_FOUND, exit::INPUT, "no_route"),
            ApiError::Method { .. } => simple(S::METHOD_NOT_ALLOWED, exit::INPUT, "method"),
            ApiError::Busy { limit, .. } => (
                S::SERVICE_UNAVAILABLE,
                exit::INPUT,
                "busy".into(),
                json!({"limit": limit}),
            ),
            ApiError::Unavailable(_) => simple(S::SERVICE_UNAVAILABLE, exit::INPUT, "unavailable"),
            ApiError::Store(e) => store_parts(e),
            ApiError::Session(e) => session_parts(e),
            ApiError::Internal(_) => simple(S::INTERNAL_SERVER_ERROR, exit::INPUT, "internal"),
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
        let mut v = exit::error_json(Some(Value::Object(details)), exit, &self.to_string());
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        crate::api::json_response(self.status(), &self.body())
    }
}

fn store_parts(e: &StoreError) -> (StatusCode, u8, String, Value) {
    use StatusCode as S;
    match e {
        StoreError::Locked { .. } => (S::CONFLICT, exit::INPUT, "locked".into(), json!({})),
        StoreError::SeqOutOfRange { seq, events, .. } => (
            S::NOT_FOUND,
            exit::INPUT,
            "seq_out_of_range".into(),
            json!({"seq": seq, "events": events}),
        ),
        StoreError::Log { error, .. } => {
            use oracle_core::verify::LogBytesError;
            let code = match error {
                LogBytesError::Integrity { .. } => "integrity",
                LogBytesError::TornTail { .. } => "torn_tail",
                LogBytesError::HeadNotFound { .. } => "head_not_found",
            };
            (
                S::INTERNAL_SERVER_ERROR,
                exit::INTEGRITY,
                code.into(),
                json!({"seq": error.seq()}),
            )
        }
        e if e.is_integrity() => (
            S::INTERNAL_SERVER_ERROR,
            exit::INTEGRITY,
            "integrity".into(),
            json!({}),
        ),
        _ => (
            S::INTERNAL_SERVER_ERROR,
            exit::INPUT,
            "input".into(),
            json!({}),
        ),
    }
}

fn session_parts(e: &SessionError) -> (StatusCode, u8, String, Value) {
    use StatusCode as S;
    let conflict = |code: &str| (S::CONFLICT, exit::INPUT, code.to_owned(), json!({}));
    let refused = |code: &str| {
        (
            S::UNPROCESSABLE_ENTITY,
            exit::INPUT,
            code.to_owned(),
            json!({}),
        )
    };
    match e {
        SessionError::Store(s) => store_parts(s),
        SessionError::Engine(EngineError::Store(s)) => store_parts(s),
        SessionError::NotFound { .. } => (S::NOT_FOUND, exit::INPUT, "not_found".into(), json!({})),
        SessionError::Adjudicate { source, .. } => match source {
            AdjudicateError::UnknownHandle { handle } => (
                S::NOT_FOUND,
                exit::UNKNOWN_HANDLE,
                "unknown_handle".into(),
                json!({"handle": handle}),
            ),
            AdjudicateError::AlreadyResolved { handle, seq, .. } => (
                S::CONFLICT,
                exit::ALREADY_RESOLVED,
                "already_resolved".into(),
                json!({"handle": handle, "seq": seq}),
            ),
            AdjudicateError::Expired {
                handle,
                expires_at,
                swept_at,
            } => (
                S::CONFLICT,
                exit::EXPIRED,
                "expired".into(),
                json!({"handle": handle, "expires_at": expires_at, "swept_at": swept_at}),
            ),
            AdjudicateError::UnknownClaim { .. } => (
                S::NOT_FOUND,
                exit::UNKNOWN_HANDLE,
                "unknown_claim".into(),
                json!({}),
            ),
            _ => refused("refused"),
        },
        SessionError::BadAnswer { step, .. }
        | SessionError::Engine(EngineError::BadAnswer { step, .. }) => (
            S::UNPROCESSABLE_ENTITY,
            exit::INPUT,
            "bad_answer".into(),
            json!({"step": step}),
        ),
        SessionError::WrongStep { given, waiting, .. }
        | SessionError::Engine(EngineError::WrongStep { given, waiting }) => (
            S::CONFLICT,
            exit::INPUT,
            "wrong_step".into(),
            json!({"step": given, "waiting": waiting}),
        ),
        SessionError::BeliefWait { step, .. }
        | SessionError::Engine(EngineError::BeliefWait { step }) => (
            S::CONFLICT,
            exit::INPUT,
            "belief_wait".into(),
            json!({"step": step}),
        ),
        SessionError::AlreadyAnswered { step, by, .. } => (
            S::CONFLICT,
            exit::INPUT,
            "already_answered".into(),
            json!({"step": step, "by": by}),
        ),
        SessionError::Finished { status, .. } => (
            S::CONFLICT,
            exit::INPUT,
            "finished".into(),
            json!({"status": status}),
        ),
        SessionError::NeedsAnswer { step, .. } => (
            S::CONFLICT,
            exit::INPUT,
            "needs_answer".into(),
            json!({"step": step}),
        ),
        SessionError::NotSuspended { .. } => conflict("not_suspended"),
        SessionError::Interrupted { .. } => conflict("interrupted"),
        SessionError::NothingRecorded { .. } => conflict("nothing_recorded"),
        SessionError::ClaimRefused { .. } => refused("refused"),
        SessionError::BadNote { .. } => refused("bad_note"),
        SessionError::TooEarly { .. } | SessionError::OutsideTime { .. } => refused("time"),
        SessionError::BadInputs(_) => refused("input"),
        e if e.is_integrity() => (
            S::INTERNAL_SERVER_ERROR,
            exit::INTEGRITY,
            "integrity".into(),
            json!({}),
        ),
        _ => (
            S::INTERNAL_SERVER_ERROR,
            exit::INPUT,
            "input".into(),
            json!({}),
        ),
    }
}
