//! Who is asking: bearer tokens for programs, cookie sessions for browsers, and CSRF for the
//! forms browsers post.
//!
//! - **Programs** send `Authorization: Bearer SECRET`. The token's name is the [`Principal`];
//!   writes made with it record that name as `by`. No CSRF check: a browser never attaches
//!   that header by itself, so another site cannot make one send it.
//! - **Browsers** `POST /login` with a token once and get a session cookie (`HttpOnly`,
//!   `SameSite=Strict`, holding only a random session id). A write from a session needs the
//!   session's CSRF token, [`csrf_token`]: a keyed BLAKE3 hash of the session id under a key
//!   drawn when the server started, sent as the form field `csrf` (HTML forms: see
//!   [`check_form_csrf`]) or the header `X-CSRF-Token`. `SameSite=Strict` already keeps the
//!   cookie off cross-site requests; the token is the second lock, for browsers that ignore it.
//!   A session lives only as long as its token's line in the token file ([`session_of`]).
//! - **Signing in** is a form too, and refuses cross-site posts (login CSRF: a page elsewhere
//!   signing the operator's browser in with the attacker's token): `POST /login` is refused
//!   when the browser says the post comes from elsewhere ([`same_origin`]: `Sec-Fetch-Site`,
//!   `Origin`), and a form post must carry the sign-in token `/signin` put in its form beside
//!   a cookie it set ([`Sessions::signin_token`]): the field is a keyed hash of the cookie, so
//!   a page elsewhere, which can read neither, cannot make a pair.
//! - **Open reads** (`--read-open`, loopback only): reads need nothing, but every request,
//!   whatever its route, must name a loopback address in its `Host` header (checked for the
//!   whole router by `api::host_guard`, and again here for reads), so a web page that rebinds
//!   its DNS name to 127.0.0.1 cannot read through the victim's browser.
//!
//! Session ids and the CSRF key come from the OS's randomness; they are never hashed into a
//! log or printed.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;

use crate::config::{SESSION_TTL_S, SESSIONS_MAX, SIGNIN_TTL_S};
use crate::error::ApiError;
use crate::state::AppState;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "oracle_session";
/// The header a session's JSON writes carry their CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The form field HTML forms carry it in.
pub const CSRF_FIELD: &str = "csrf";
/// The cookie `/signin` sets for its form (`Path=/login`): a deadline and a random nonce.
pub const SIGNIN_COOKIE: &str = "oracle_signin";
/// The sign-in form's field: the keyed hash of that cookie.
pub const SIGNIN_FIELD: &str = "signin";

/// How a request was authenticated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    Token,
    Session,
}

/// Who a request comes from: a token's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub via: Via,
}

/// A browser session: made by `POST /login`, named by its cookie.
#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    /// The token that logged in.
    pub name: String,
    /// The BLAKE3 hash of its secret (the token file's line): the session is refused once the
    /// file no longer holds that line.
    token: blake3::Hash,
    csrf: String,
    created: Instant,
}

/// The CSRF token of a session: what every form the UI renders for it must carry as the hidden
/// field `csrf` (and a session's JSON writes as the header `X-CSRF-Token`).
pub fn csrf_token(session: &Session) -> String {
    session.csrf.clone()
}

/// Checks a form's `csrf` field against its session's token (constant time).
pub fn check_form_csrf(session: &Session, field: &str) -> Result<(), ApiError> {
    let a = blake3::hash(field.as_bytes());
    let b = blake3::hash(session.csrf.as_bytes());
    if a == b { Ok(()) } else { Err(ApiError::Csrf) }
}

/// The browser sessions of a server, in memory (a restart logs everyone out).
#[derive(Debug)]
pub struct Sessions {
    key: [u8; 32],
    map: Mutex<BTreeMap<String, Session>>,
    /// When the server started: sign-in tokens' deadlines count from it.
    started: Instant,
}

/// What keys a sign-in token apart from a session's CSRF token under the one key.
const SIGNIN_CONTEXT: &[u8] = b"oracle signin form\0";

fn random_hex(n: usize) -> Result<String, ApiError> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApiError::Internal(format!("no randomness from the operating system: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Sessions {
    pub fn new() -> Result<Sessions, ApiError> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| {
            ApiError::Internal(format!("no randomness from the operating system: {e}"))
        })?;
        Ok(Sessions {
            key,
            map: Mutex::new(BTreeMap::new()),
            started: Instant::now(),
        })
    }

    /// A sign-in form's pair: the cookie's value (a deadline in seconds since the server
    /// started, and a random nonce) and the form field's (their keyed hash).
    pub fn signin_token(&self) -> Result<(String, String), ApiError> {
        let deadline = self.started.elapsed().as_secs() + SIGNIN_TTL_S;
        let cookie = format!("{deadline}.{}", random_hex(16)?);
        let field = self.signin_field(&cookie);
        Ok((cookie, field))
    }

    fn signin_field(&self, cookie: &str) -> String {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(SIGNIN_CONTEXT);
        h.update(cookie.as_bytes());
        h.finalize().to_hex().to_string()
    }

    /// Checks a sign-in form's field against its cookie (constant time) and the cookie's
    /// deadline: `csrf` ([`ApiError::SigninCsrf`]) when either is missing, they do not match,
    /// or the form is too old.
    pub fn check_signin(&self, cookie: Option<&str>, field: Option<&str>) -> Result<(), ApiError> {
        let (Some(cookie), Some(field)) = (cookie, field) else {
            return Err(ApiError::SigninCsrf);
        };
        // Hashes compared, so the time taken says nothing about how much of the field matched.
        let given = blake3::hash(field.as_bytes());
        let want = blake3::hash(self.signin_field(cookie).as_bytes());
        let deadline = cookie
            .split_once('.')
            .and_then(|(d, _)| d.parse::<u64>().ok());
        let live = deadline.is_some_and(|d| self.started.elapsed().as_secs() <= d);
        if given == want && live {
            Ok(())
        } else {
            Err(ApiError::SigninCsrf)
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Session>> {
        match self.map.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A new session for the token `name` whose secret hashes to `token`. Past
    /// [`SESSIONS_MAX`] the oldest is dropped.
    pub fn create(&self, name: &str, token: blake3::Hash) -> Result<Session, ApiError> {
        let id = random_hex(32)?;
        let csrf = blake3::keyed_hash(&self.key, id.as_bytes())
            .to_hex()
            .to_string();
        let session = Session {
            id: id.clone(),
            name: name.to_owned(),
            token,
            csrf,
            created: Instant::now(),
        };
        let mut map = self.lock();
        let ttl = Duration::from_secs(SESSION_TTL_S);
        map.retain(|_, s| s.created.elapsed() < ttl);
        while map.len() >= SESSIONS_MAX {
            let oldest = map
                .iter()
                .min_by_key(|(_, s)| s.created)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => map.remove(&k),
                None => break,
            };
        }
        map.insert(id, session.clone());
        Ok(session)
    }

    /// The live session named `id`.
    pub fn get(&self, id: &str) -> Option<Session> {
        let map = self.lock();
        map.get(id)
            .filter(|s| s.created.elapsed() < Duration::from_secs(SESSION_TTL_S))
            .cloned()
    }

    pub fn remove(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// The `Set-Cookie` value of a new session.
pub fn session_cookie(session: &Session) -> String {
    format!(
        "{SESSION_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={SESSION_TTL_S}",
        session.id
    )
}

/// The `Set-Cookie` value of a sign-in form's cookie (sent back to `POST /login` only).
pub fn signin_cookie(value: &str) -> String {
    format!(
        "{SIGNIN_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/login; Max-Age={SIGNIN_TTL_S}"
    )
}

/// The `Set-Cookie` value that drops the sign-in cookie once it has served.
pub fn cleared_signin_cookie() -> String {
    format!("{SIGNIN_COOKIE}=; HttpOnly; SameSite=Strict; Path=/login; Max-Age=0")
}

/// Refuses a request its browser says comes from another site (`csrf`): a `Sec-Fetch-Site`
/// other than `same-origin` or `none` (a bookmark, the address bar), `same-site` included (a
/// page on another port of this host), or an `Origin` that does not name this server's `Host`
/// (`null` included). A request with neither header (a program, an old browser) is not
/// refused here; a form's token is then the lock.
pub fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or(""));
    if let Some(site) = text("sec-fetch-site")
        && !site.eq_ignore_ascii_case("same-origin")
        && !site.eq_ignore_ascii_case("none")
    {
        return Err(ApiError::SigninCsrf);
    }
    if let Some(origin) = text("origin") {
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        let host = text("host");
        let same = matches!((authority, host), (Some(a), Some(h)) if !a.is_empty() && a.eq_ignore_ascii_case(h));
        if !same {
            return Err(ApiError::SigninCsrf);
        }
    }
    Ok(())
}

/// The `Set-Cookie` value that ends a session in the browser.
pub fn cleared_cookie() -> String {
    format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

/// The bearer token's name, if the request has an `Authorization` header: a wrong or
/// malformed one is refused, never ignored.
fn bearer(state: &AppState, headers: &HeaderMap) -> Result<Option<Principal>, ApiError> {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let secret = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or(ApiError::BadToken)?;
    match state.tokens.check(secret) {
        Some(name) => Ok(Some(Principal {
            name,
            via: Via::Token,
        })),
        None => Err(ApiError::BadToken),
    }
}

/// The browser session named by the request's cookie, if any and live: not expired, and made
/// with a token the token file still holds (read again when it changed). A session whose token
/// was removed or replaced is dropped here, at its next request, so nothing more is read or
/// recorded with it.
pub fn session_of(state: &AppState, headers: &HeaderMap) -> Option<Session> {
    let s = cookie(headers, SESSION_COOKIE).and_then(|id| state.sessions.get(&id))?;
    if state.tokens.holds(&s.name, &s.token) {
        Some(s)
    } else {
        state.sessions.remove(&s.id);
        None
    }
}

/// Whether the `Host` header names a loopback address (or names none: HTTP/1.0).
pub(crate) fn loopback_host(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(host) = headers.get(axum::http::header::HOST) else {
        return Ok(());
    };
    let host = host.to_str().unwrap_or("");
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    let ok = name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if ok {
        Ok(())
    } else {
        Err(ApiError::ForeignHost {
            host: host.to_owned(),
        })
    }
}

/// A request allowed to read: by token, by session, or open (`--read-open`; `None`).
#[derive(Clone, Debug)]
pub struct Reader(pub Option<Principal>);

impl FromRequestParts<AppState> for Reader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(p) = bearer(state, &parts.headers)? {
            return Ok(Reader(Some(p)));
        }
        if let Some(s) = session_of(state, &parts.headers) {
            return Ok(Reader(Some(Principal {
                name: s.name,
                via: Via::Session,
            })));
        }
        if state.config.read_open {
            loopback_host(&parts.headers)?;
            return Ok(Reader(None));
        }
        Err(ApiError::NoToken)
    }
}

/// A request allowed to write: by token, or by a session with its CSRF token in the
/// `X-CSRF-Token` header. (HTML form routes check the `csrf` field with [`check_form_csrf`].)
#[derive(Clone, Debug)]
pub struct Writer(pub Principal);

impl FromRequestParts<AppState> for Writer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(p) = bearer(state, &parts.headers)? {
            return Ok(Writer(p));
        }
        if let Some(s) = session_of(state, &parts.headers) {
            let given = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .ok_or(ApiError::Csrf)?;
            check_form_csrf(&s, given)?;
            return Ok(Writer(Principal {
                name: s.name,
                via: Via::Session,
            }));
        }
        Err(ApiError::NoToken)
    }
}

/// A request from a logged-in browser (for the UI's pages and form routes): its session.
#[derive(Clone, Debug)]
pub struct BrowserSession(pub Session);

impl FromRequestParts<AppState> for BrowserSession {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        session_of(state, &parts.headers)
            .map(BrowserSession)
            .ok_or(ApiError::NoToken)
    }
}
