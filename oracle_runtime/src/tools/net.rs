//! `http.request`: one HTTP exchange with an API, recorded like a model call (never made again
//! on replay or resume). Needs `net:http:<origin>`, the URL's `scheme://host:port`, matched
//! exactly; every redirect is checked against the grants again before it is followed.
//!
//! Deliberately absent: cookies, following a redirect the grants do not cover, any body but
//! UTF-8 text or JSON, and a header value with a secret in the record (headers name secrets
//! as `secret("NAME")`; the value is put in only when the request is sent).

use std::sync::Arc;

use oracle_core::capability::Capability;
use serde_json::{Map, Value, json};

use super::{any, decl, object, string};
use crate::access::Verdict;
use crate::http::{self, HttpError};
use crate::secrets::Secrets;
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// Most redirects followed in one call.
pub const REDIRECTS_MAX: u64 = 5;
/// Most request headers.
pub const HEADERS_MAX: u64 = 64;
/// The methods a call may use.
pub const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// `http.request`.
pub struct Request {
    pub secrets: Arc<Secrets>,
}

impl Tool for Request {
    fn decl(&self) -> ToolDecl {
        let header_value = json!({"anyOf": [
            {"type": "string"},
            {
                "type": "object",
                "properties": {"$secret": {"type": "string"}},
                "required": ["$secret"],
                "additionalProperties": false,
            },
        ]});
        decl(
            "http.request",
            "One HTTP request: {status, headers, json} when the reply is JSON, else {status, headers, body}. Needs net:http:<scheme://host:port>; redirects are followed only where granted. Header values may be secret(\"NAME\"). Recorded: never sent again on replay or resume.",
            Effect::Impure,
            object(
                &[
                    ("method", json!({"enum": METHODS})),
                    ("url", string()),
                    (
                        "headers",
                        json!({"type": "object", "maxProperties": HEADERS_MAX, "additionalProperties": header_value}),
                    ),
                    ("body", string()),
                    ("json", any()),
                ],
                &["method", "url"],
            ),
            object(
                &[
                    (
                        "status",
                        json!({"type": "integer", "minimum": 100, "maximum": 999}),
                    ),
                    (
                        "headers",
                        json!({"type": "object", "additionalProperties": {"type": "string"}}),
                    ),
                    ("body", string()),
                    ("json", any()),
                ],
                &["status", "headers"],
            ),
            Some(oracle_plan::catalogue::CapabilityRule {
                domain: "net".to_owned(),
                action: "http".to_owned(),
                scope: oracle_plan::catalogue::ScopeFrom::Arg("url".to_owned()),
            }),
        )
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let failed = |m: String| ToolError::Failed(m);
        let mut method = super::arg_str(input, "method")?.to_owned();
        let mut url = super::arg_str(input, "url")?.to_owned();
        let mut headers: Vec<(String, String)> = Vec::new();
        if let Some(h) = input.get("headers").and_then(Value::as_object) {
            for (name, value) in h {
                let v = self
                    .secrets
                    .resolve(value, &format!("header `{name}`"))
                    .map_err(ToolError::failed)?;
                headers.push((name.clone(), v));
            }
        }
        let mut body: Option<Vec<u8>> = match (input.get("body"), input.get("json")) {
            (Some(_), Some(_)) => {
                return Err(failed("give `body` or `json`, not both".into()));
            }
            (Some(b), None) => Some(b.as_str().unwrap_or_default().as_bytes().to_vec()),
            (None, Some(j)) => {
                if !headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
                {
                    headers.push(("Content-Type".into(), "application/json".into()));
                }
                Some(j.to_string().into_bytes())
            }
            (None, None) => None,
        };
        let mut redirects = 0;
        loop {
            let refs: Vec<(&str, String)> = headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.clone()))
                .collect();
            let reply = http::exchange(
                &method,
                &url,
                &refs,
                body.as_deref(),
                cx.timeout_ms,
                cx.output_bytes_max,
            )
            .map_err(|e| match e {
                HttpError::Timeout { timeout_ms } => ToolError::Timeout { timeout_ms },
                HttpError::TooLarge { limit } => ToolError::OutputTooLarge { limit },
                other => failed(format!("{method} {}: {other}", shown(&url))),
            })?;
            if (300..400).contains(&reply.status)
                && let Some(location) = reply.location.clone()
            {
                redirects += 1;
                if redirects > REDIRECTS_MAX {
                    return Err(failed(format!(
                        "more than {REDIRECTS_MAX} redirects (REDIRECTS_MAX) from {}",
                        shown(input["url"].as_str().unwrap_or(""))
                    )));
                }
                let next = resolve(&url, &location)
                    .ok_or_else(|| failed(format!("the redirect to `{location}` is not a URL")))?;
                check_redirect(cx, &next)?;
                if reply.status == 303 || (matches!(reply.status, 301 | 302) && method == "POST") {
                    method = "GET".into();
                    body = None;
                }
                url = next;
                continue;
            }
            if http::retryable(reply.status) {
                let ms = http::backoff_ms(cx.attempt, reply.retry_after_ms).min(cx.timeout_ms);
                std::thread::sleep(std::time::Duration::from_millis(ms));
                return Err(failed(format!(
                    "{method} {} answered HTTP {} (retryable): {}",
                    shown(&url),
                    reply.status,
                    http::excerpt(&reply.body)
                )));
            }
            return output(reply).map(ToolOutput::of);
        }
    }
}

/// The recorded output: status, headers (joined per name with `, `), and the body as JSON
/// when it says it is and parses without floats, else as text.
fn output(reply: http::Reply) -> Result<Value, ToolError> {
    let mut headers = Map::new();
    for (name, value) in reply.headers {
        match headers.get_mut(&name) {
            Some(Value::String(v)) => {
                v.push_str(", ");
                v.push_str(&value);
            }
            _ => {
                headers.insert(name, Value::String(value));
            }
        }
    }
    let mut out = json!({"status": reply.status, "headers": headers});
    let parsed = reply
        .content_type
        .contains("json")
        .then(|| serde_json::from_slice::<Value>(&reply.body).ok())
        .flatten()
        .filter(|v| oracle_core::canon::check(v).is_ok());
    match parsed {
        Some(v) => out["json"] = v,
        None => {
            let text = String::from_utf8(reply.body).map_err(|_| {
                ToolError::Failed("the reply's body is not UTF-8 text or JSON".into())
            })?;
            out["body"] = Value::String(text);
        }
    }
    Ok(out)
}

/// A URL as a failure names it: without its query, which often carries tokens.
fn shown(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

/// The URL a `Location` names, from the URL that answered with it.
fn resolve(base: &str, location: &str) -> Option<String> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return Some(location.to_owned());
    }
    let (scheme, rest) = base.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    if let Some(abs) = location.strip_prefix("//") {
        return Some(format!("{scheme}://{abs}"));
    }
    if location.starts_with('/') {
        return Some(format!("{scheme}://{authority}{location}"));
    }
    let path = rest[authority.len()..]
        .split(['?', '#'])
        .next()
        .unwrap_or("");
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    Some(format!("{scheme}://{authority}{dir}/{location}"))
}

/// A redirect is followed only where the run's grants cover it, checked now like the call.
fn check_redirect(cx: &ToolContext<'_>, next: &str) -> Result<(), ToolError> {
    let Some(access) = cx.access else {
        return Err(ToolError::Failed(
            "a redirect is not followed without a capability check".into(),
        ));
    };
    let needed = Capability {
        domain: "net".into(),
        action: "http".into(),
        scope: next.to_owned(),
    };
    match access.guard.check(&needed) {
        Verdict::Allowed { .. } => Ok(()),
        Verdict::Denied { reason } => Err(ToolError::Failed(format!(
            "the redirect to {} is not followed: {reason}",
            shown(next)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_targets_resolve_against_the_answering_url() {
        let base = "http://127.0.0.1:9/a/b?q=1";
        assert_eq!(resolve(base, "/c").unwrap(), "http://127.0.0.1:9/c");
        assert_eq!(resolve(base, "c").unwrap(), "http://127.0.0.1:9/a/c");
        assert_eq!(resolve(base, "//h:1/x").unwrap(), "http://h:1/x");
        assert_eq!(resolve(base, "https://x/y").unwrap(), "https://x/y");
    }

    #[test]
    fn failures_name_urls_without_their_query() {
        assert_eq!(shown("http://h/p?token=abc"), "http://h/p");
    }
}
