//! The runtime's one HTTP client (blocking `ureq` with rustls): bounded in time and size, and
//! failing in words that are the same on every machine, because a failure becomes the error of
//! a recorded `tool_failed` event. Hosts, ports, measured durations and OS error numbers never
//! appear in those words.

use std::io;
use std::time::Duration;

/// Longest a connection may take to open, whatever the call's own timeout (10 s).
pub const CONNECT_TIMEOUT_MS_MAX: u64 = 10_000;
/// Longest wait a server's `Retry-After` is honoured for before the next attempt (30 s).
pub const RETRY_AFTER_MS_MAX: u64 = 30_000;
/// First backoff after a retryable status without `Retry-After` (250 ms), doubled per attempt…
pub const BACKOFF_MS_BASE: u64 = 250;
/// …up to this (8 s).
pub const BACKOFF_MS_MAX: u64 = 8_000;
/// Most bytes of an error reply's body quoted in a recorded failure.
pub const ERROR_BODY_CHARS_MAX: usize = 300;

/// A reply, whatever its status.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// The `Content-Type` header, lower case, without parameters (`application/json`).
    pub content_type: String,
    /// `Retry-After` in milliseconds, when given in seconds.
    pub retry_after_ms: Option<u64>,
    /// `Location`, for a redirect.
    pub location: Option<String>,
    /// Every header, names in lower case, sorted.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Why an exchange produced no reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("timed out after {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("the connection was refused")]
    Refused,
    #[error("the host was not found")]
    HostNotFound,
    #[error("the reply is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("the reply was cut short (the connection closed before the body was complete)")]
    CutShort,
    #[error("TLS failed: {0}")]
    Tls(String),
    #[error("the server broke the HTTP protocol: {0}")]
    Protocol(String),
    #[error("the URL is not valid: {0}")]
    BadUrl(String),
    #[error("the exchange failed: {0}")]
    Other(String),
}

/// Sends `body` (JSON) to `url` with `POST` and reads the whole reply: [`exchange`].
pub fn post_json(
    url: &str,
    headers: &[(&str, String)],
    body: &[u8],
    timeout_ms: u64,
    body_bytes_max: u64,
) -> Result<Reply, HttpError> {
    let all = json_headers("application/json", headers);
    exchange("POST", url, &all, Some(body), timeout_ms, body_bytes_max)
}

/// A JSON request's headers: its content type, `accept`, then `headers`.
fn json_headers<'a>(accept: &str, headers: &[(&'a str, String)]) -> Vec<(&'a str, String)> {
    let mut all: Vec<(&str, String)> = vec![
        ("Content-Type", "application/json".to_owned()),
        ("Accept", accept.to_owned()),
    ];
    all.extend(headers.iter().cloned());
    all
}

/// One request and its whole reply: at most `body_bytes_max` bytes of body, within
/// `timeout_ms` for the whole exchange (connecting at most [`CONNECT_TIMEOUT_MS_MAX`]).
/// Redirects are never followed here: a caller that follows them checks each target first.
pub fn exchange(
    method: &str,
    url: &str,
    headers: &[(&str, String)],
    body: Option<&[u8]>,
    timeout_ms: u64,
    body_bytes_max: u64,
) -> Result<Reply, HttpError> {
    let (mut reply, mut response) = open(method, url, headers, body, timeout_ms, body_bytes_max)?;
    if method != "HEAD" {
        reply.body = response
            .body_mut()
            .with_config()
            .limit(body_bytes_max)
            .read_to_vec()
            .map_err(|e| classify(e, timeout_ms, body_bytes_max))?;
    }
    Ok(reply)
}

/// [`post_json`], asking for server-sent events: a 2xx reply of type `text/event-stream` is
/// read as it arrives, each event's `data` handed to `on_data` (the reply's `body` stays
/// empty); any other reply is read whole, as [`exchange`] does. The same bounds: at most
/// `body_bytes_max` bytes in all, within `timeout_ms`. A stream the server closes before its
/// `[DONE]` is the caller's to judge (`on_data` never saw it).
pub fn post_json_stream(
    url: &str,
    headers: &[(&str, String)],
    body: &[u8],
    timeout_ms: u64,
    body_bytes_max: u64,
    on_data: &mut dyn FnMut(&str),
) -> Result<Reply, HttpError> {
    let all = json_headers("text/event-stream, application/json", headers);
    let (mut reply, mut response) =
        open("POST", url, &all, Some(body), timeout_ms, body_bytes_max)?;
    let failed = |e| classify(e, timeout_ms, body_bytes_max);
    let limited = response.body_mut().with_config().limit(body_bytes_max);
    if !(200..300).contains(&reply.status) || reply.content_type != "text/event-stream" {
        reply.body = limited.read_to_vec().map_err(failed)?;
        return Ok(reply);
    }
    let reader = io::BufReader::new(limited.reader());
    read_events(reader, on_data).map_err(|e| match e.downcast::<ureq::Error>() {
        Ok(inner) => failed(inner),
        Err(io) => io_error(&io, timeout_ms),
    })?;
    Ok(reply)
}

/// Reads server-sent events from `reader` to its end: each event's `data` lines joined with
/// `\n`, handed to `on_data` at the blank line that ends the event (comments and other fields
/// skipped).
fn read_events(reader: impl io::BufRead, on_data: &mut dyn FnMut(&str)) -> io::Result<()> {
    let mut data: Option<String> = None;
    for line in reader.lines() {
        let line = line?;
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.is_empty() {
            if let Some(d) = data.take() {
                on_data(&d);
            }
        } else if let Some(rest) = line.strip_prefix("data:") {
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(rest);
                }
                None => data = Some(rest.to_owned()),
            }
        }
    }
    if let Some(d) = data.take() {
        on_data(&d);
    }
    Ok(())
}

/// Sends one request and reads the reply's head: the reply without its body, and the response
/// to read the body from.
fn open(
    method: &str,
    url: &str,
    headers: &[(&str, String)],
    body: Option<&[u8]>,
    timeout_ms: u64,
    body_bytes_max: u64,
) -> Result<(Reply, ureq::http::Response<ureq::Body>), HttpError> {
    let loopback = is_loopback(url);
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_millis(timeout_ms)))
        .timeout_connect(Some(Duration::from_millis(
            timeout_ms.min(CONNECT_TIMEOUT_MS_MAX),
        )));
    if loopback {
        // A proxy from the environment never sees a request meant for this machine.
        config = config.proxy(None);
    }
    let agent: ureq::Agent = config.build().into();
    let mut builder = ureq::http::Request::builder().method(method).uri(url);
    for (name, value) in headers {
        builder = builder.header(*name, value.as_str());
    }
    let bad = |e: ureq::http::Error| HttpError::BadUrl(e.to_string());
    let sent = match body {
        Some(bytes) => agent.run(builder.body(bytes).map_err(bad)?),
        None => agent.run(builder.body(()).map_err(bad)?),
    };
    let response = sent.map_err(|e| classify(e, timeout_ms, body_bytes_max))?;
    let status = response.status().as_u16();
    let mut header_list: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_ascii_lowercase(), v.to_str().ok()?.to_owned())))
        .collect();
    header_list.sort();
    let header = |name: &str| {
        header_list
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let content_type = header("content-type")
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let retry_after_ms = header("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| s.saturating_mul(1000));
    let location = header("location");
    let reply = Reply {
        status,
        content_type,
        retry_after_ms,
        location,
        headers: header_list,
        body: Vec::new(),
    };
    Ok((reply, response))
}

/// Whether a status is worth another attempt after a wait: rate limits and server trouble.
pub fn retryable(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

/// How long to wait before attempt `attempt + 1` after a retryable reply: the server's
/// `Retry-After` (at most [`RETRY_AFTER_MS_MAX`]), else exponential from [`BACKOFF_MS_BASE`] up
/// to [`BACKOFF_MS_MAX`]. Never recorded.
pub fn backoff_ms(attempt: u64, retry_after_ms: Option<u64>) -> u64 {
    match retry_after_ms {
        Some(ms) => ms.min(RETRY_AFTER_MS_MAX),
        None => {
            let shift = attempt.saturating_sub(1).min(16) as u32;
            BACKOFF_MS_BASE
                .saturating_mul(1 << shift)
                .min(BACKOFF_MS_MAX)
        }
    }
}

/// The start of an error reply's body, for a recorded failure: at most
/// [`ERROR_BODY_CHARS_MAX`] characters, on one line.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = one_line.chars().take(ERROR_BODY_CHARS_MAX).collect();
    if one_line.chars().count() > ERROR_BODY_CHARS_MAX {
        out.push('…');
    }
    out
}

fn is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().unwrap_or("");
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = if let Some(h) = host.strip_prefix('[') {
        h.split(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn classify(e: ureq::Error, timeout_ms: u64, limit: u64) -> HttpError {
    use ureq::Error as E;
    match e {
        E::Timeout(_) => HttpError::Timeout { timeout_ms },
        E::HostNotFound => HttpError::HostNotFound,
        E::ConnectionFailed => HttpError::Refused,
        E::BodyExceedsLimit(_) => HttpError::TooLarge { limit },
        E::BadUri(u) => HttpError::BadUrl(u),
        E::Http(e) => HttpError::BadUrl(e.to_string()),
        E::Tls(why) => HttpError::Tls(why.to_owned()),
        E::Rustls(e) => HttpError::Tls(e.to_string()),
        E::Pem(_) => HttpError::Tls("a certificate could not be read".into()),
        E::Protocol(e) => HttpError::Protocol(e.to_string()),
        E::Io(e) => io_error(&e, timeout_ms),
        E::TooManyRedirects | E::RedirectFailed => {
            HttpError::Other("the server answered with a redirect, which is not followed".into())
        }
        other => HttpError::Other(variant_name(&other)),
    }
}

fn io_error(e: &io::Error, timeout_ms: u64) -> HttpError {
    use io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => HttpError::Refused,
        K::TimedOut | K::WouldBlock => HttpError::Timeout { timeout_ms },
        K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => {
            HttpError::CutShort
        }
        K::HostUnreachable | K::NetworkUnreachable => {
            HttpError::Other("the host is unreachable".into())
        }
        other => HttpError::Other(other.to_string()),
    }
}

/// The kind of a ureq error without its text (which may name hosts or OS error numbers).
fn variant_name(e: &ureq::Error) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("unknown")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_honours_retry_after_to_its_cap() {
        assert_eq!(backoff_ms(1, None), BACKOFF_MS_BASE);
        assert_eq!(backoff_ms(2, None), 2 * BACKOFF_MS_BASE);
        assert_eq!(backoff_ms(60, None), BACKOFF_MS_MAX);
        assert_eq!(backoff_ms(1, Some(2_000)), 2_000);
        assert_eq!(backoff_ms(1, Some(u64::MAX)), RETRY_AFTER_MS_MAX);
    }

    #[test]
    fn loopback_urls_are_recognised() {
        assert!(is_loopback("http://127.0.0.1:8080/v1"));
        assert!(is_loopback("http://localhost/v1"));
        assert!(is_loopback("http://[::1]:9/v1"));
        assert!(is_loopback("http://user@127.0.0.1:1/"));
        assert!(!is_loopback("https://api.example.com/v1"));
        assert!(!is_loopback("http://127.0.0.1.example.com/"));
    }

    #[test]
    fn events_are_their_data_lines_joined_at_each_blank_line() {
        let text =
            ": a comment\ndata: {\"a\":1}\r\n\nevent: x\ndata:one\ndata: two\n\ndata: [DONE]";
        let mut seen = Vec::new();
        read_events(text.as_bytes(), &mut |d| seen.push(d.to_owned())).unwrap();
        assert_eq!(seen, ["{\"a\":1}", "one\ntwo", "[DONE]"]);
    }

    #[test]
    fn excerpts_are_one_bounded_line() {
        assert_eq!(excerpt(b"a\n  b"), "a b");
        let long = vec![b'x'; 1000];
        assert_eq!(excerpt(&long).chars().count(), ERROR_BODY_CHARS_MAX + 1);
    }
}
