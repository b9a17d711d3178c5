//! Capabilities: `domain:action:scope`, parsed once into a type, and the matching rules by which
//! a grant covers a needed capability.
//!
//! In a grant, `*` as a whole domain or action matches any value. In a scope, `*` matches any
//! run of characters within one path component (no `/`) and `**` matches across components.
//! Path scopes (domains `fs` and `proc`) are normalised lexically (`.` and `..` resolved) before matching; a path whose
//! `..` climbs above its start can never be covered. A `proc` program named by a path that
//! normalises to a bare name stays a path (`./sh`), as at run time. Network scopes (domain
//! `net`) are URL origins, `scheme://host:port` ([`url_origin`]), on both sides.
//!
//! Parsing ([`FromStr`]) is how grants enter (a plan's `grant` line, `--grant`, a recorded
//! `run_started.grants`), so it refuses a grant whose path pattern has a `..` component
//! ([`CapabilityError::DotDot`]). A needed capability is built from a call's arguments
//! ([`Capability`]'s fields), never parsed, and may hold `..`: normalising it decides.

use std::fmt;
use std::str::FromStr;

/// A parsed capability or grant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Capability {
    pub domain: String,
    pub action: String,
    pub scope: String,
}

/// Why a string is not a capability.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    #[error("`{0}` is not a capability: expected `domain:action:scope`, e.g. `fs:read:data/**`")]
    Shape(String),
    #[error(
        "`{text}`: the {part} `{value}` may only use lowercase letters, digits, `_`, `-`, `.`, or be `*`"
    )]
    Part {
        text: String,
        part: &'static str,
        value: String,
    },
    /// A grant that could reach a path domain (`fs`, `proc` or `*`) whose scope has a `..`
    /// component (`../**`, `./../x`, `a/../../b`, `a/../b`). Needed scopes are matched after
    /// `.` and `..` are resolved, so such a pattern never matches anything; accepting it would
    /// only let a grant read as wider (or as escaping the working directory) than it is.
    #[error(
        "`{0}`: a grant's path may not contain a `..` component (paths are matched after `..` is resolved, so it would cover nothing); name the directory itself, e.g. an absolute path"
    )]
    DotDot(String),
}

impl CapabilityError {
    /// The stable code of this error (one per kind of failure).
    pub fn code(&self) -> &'static str {
        match self {
            CapabilityError::Shape(_) => "capability_shape",
            CapabilityError::Part { .. } => "capability_part",
            CapabilityError::DotDot(_) => "capability_dot_dot",
        }
    }
}

/// Whether a grant with this domain is matched against path scopes: a path domain, or `*`
/// (which covers them).
fn grants_paths(domain: &str) -> bool {
    domain == "*" || PATH_DOMAINS.contains(&domain)
}

/// Whether `scope`, read as a `/`-separated path pattern, has a component that is exactly `..`.
pub fn has_dot_dot(scope: &str) -> bool {
    scope.split('/').any(|c| c == "..")
}

fn valid_word(w: &str) -> bool {
    w == "*"
        || (!w.is_empty()
            && w.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '.')
            }))
}

impl FromStr for Capability {
    type Err = CapabilityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.splitn(3, ':');
        let (Some(domain), Some(action), Some(scope)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(CapabilityError::Shape(s.to_owned()));
        };
        if scope.is_empty() || scope.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(CapabilityError::Shape(s.to_owned()));
        }
        for (part, value) in [("domain", domain), ("action", action)] {
            if !valid_word(value) {
                return Err(CapabilityError::Part {
                    text: s.to_owned(),
                    part,
                    value: value.to_owned(),
                });
            }
        }
        if grants_paths(domain) && has_dot_dot(scope) {
            return Err(CapabilityError::DotDot(s.to_owned()));
        }
        Ok(Capability {
            domain: domain.to_owned(),
            action: action.to_owned(),
            scope: scope.to_owned(),
        })
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.domain, self.action, self.scope)
    }
}

impl Capability {
    /// Whether this grant covers `needed`. The needed scope is normalised first; one that climbs
    /// out of its start with `..` is never covered.
    pub fn covers(&self, needed: &Capability) -> bool {
        let word = |g: &str, n: &str| g == "*" || g == n;
        if !word(&self.domain, &needed.domain) || !word(&self.action, &needed.action) {
            return false;
        }
        match needed.subject() {
            Some(scope) => glob_match(&self.grant_pattern(), &scope),
            None => false,
        }
    }

    /// This grant's scope as a pattern: a `net` grant naming an origin is normalised like the
    /// origins it is matched against (`https://API.example.com` is
    /// `https://api.example.com:443`); every other scope is matched as written.
    pub fn grant_pattern(&self) -> String {
        if self.domain == "net"
            && let Ok(origin) = url_origin(&self.scope)
        {
            return origin;
        }
        self.scope.clone()
    }

    /// The scope a grant must match for this needed capability: for the path domains, the
    /// normalised path (`None` if it climbs out of its start), where a `proc` program given as a
    /// path that normalises to a bare name stays `./NAME`: a bare name is looked up in `PATH`,
    /// so a grant for `sh` must not cover a file `sh` in the working directory. The runtime's
    /// check (`oracle_runtime::access`) applies the same rule.
    pub fn subject(&self) -> Option<String> {
        if self.domain == "net" {
            return url_origin(&self.scope).ok();
        }
        if !PATH_DOMAINS.contains(&self.domain.as_str()) {
            return Some(self.scope.clone());
        }
        let normal = normalize_path(&self.scope)?;
        if self.domain == "proc" && self.scope.contains('/') && !normal.contains('/') {
            return Some(format!("./{normal}"));
        }
        Some(normal)
    }
}

/// The origin a `net` capability names for `url`: `scheme://host:port`, the scheme (`http` or
/// `https`) and host in lower case and the port always written (80 and 443 by default), so a
/// grant matches exactly what is contacted. `Err` says why `url` has no origin: another scheme,
/// user information (`user@host`, a classic way to disguise the host), an empty or malformed
/// host, or a port that is not a number from 1 to 65535. `*` is accepted in a host, so a grant's
/// pattern normalises the same way (`https://*.example.com`).
pub fn url_origin(url: &str) -> Result<String, UrlError> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| UrlError::NotHttp {
        url: url.to_owned(),
    })?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => {
            return Err(UrlError::Scheme {
                url: url.to_owned(),
            });
        }
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(UrlError::UserInfo {
            url: url.to_owned(),
        });
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| UrlError::UnclosedBracket {
                url: url.to_owned(),
            })?;
        if host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err(UrlError::NotIpv6 {
                url: url.to_owned(),
                host: host.to_owned(),
            });
        }
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| UrlError::JunkAfterHost {
                url: url.to_owned(),
            })?),
        };
        (format!("[{}]", host.to_ascii_lowercase()), port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let valid = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '*' | '_'));
        if !valid {
            return Err(UrlError::NotHost {
                url: url.to_owned(),
                host: host.to_owned(),
            });
        }
        (host.to_ascii_lowercase(), port)
    };
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u32>() {
            Ok(n) if (1..=65535).contains(&n) && !p.starts_with('+') => n,
            _ => {
                return Err(UrlError::Port {
                    url: url.to_owned(),
                    port: p.to_owned(),
                });
            }
        },
    };
    Ok(format!("{scheme}://{host}:{port}"))
}

/// Why a URL names no origin ([`url_origin`]). The text is a capability verdict's reason, which
/// a denied call records, so each variant words it as the function always has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("`{url}` is not an http or https URL")]
    NotHttp { url: String },
    #[error("`{url}`: only http and https URLs are allowed")]
    Scheme { url: String },
    #[error("`{url}` has user information before its host, which is not allowed")]
    UserInfo { url: String },
    #[error("`{url}`: unclosed `[` in the host")]
    UnclosedBracket { url: String },
    #[error("`{url}`: `[{host}]` is not an IPv6 address")]
    NotIpv6 { url: String, host: String },
    #[error("`{url}`: junk after the host")]
    JunkAfterHost { url: String },
    #[error("`{url}`: `{host}` is not a host name")]
    NotHost { url: String, host: String },
    #[error("`{url}`: `{port}` is not a port from 1 to 65535")]
    Port { url: String, port: String },
}

/// Domains whose scopes are file paths, normalised before matching.
pub const PATH_DOMAINS: [&str; 2] = ["fs", "proc"];

/// Resolves `.` and `..` and repeated `/` lexically. `None` if `..` climbs above the start (for
/// a relative path) or above the root (for an absolute one).
pub fn normalize_path(path: &str) -> Option<String> {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    Some(if absolute {
        format!("/{joined}")
    } else {
        joined
    })
}

/// Glob match: `*` within one `/`-separated component, `**` across components.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    #[derive(Clone, Copy)]
    enum Tok {
        Char(char),
        Star,
        DoubleStar,
    }
    let mut toks = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '*' {
            if chars.peek() == Some(&'*') {
                chars.next();
                toks.push(Tok::DoubleStar);
            } else {
                toks.push(Tok::Star);
            }
        } else {
            toks.push(Tok::Char(c));
        }
    }
    let text: Vec<char> = text.chars().collect();
    // reach[j]: the first i tokens can match text[..j].
    let mut reach = vec![false; text.len() + 1];
    reach[0] = true;
    for tok in toks {
        let mut next = vec![false; text.len() + 1];
        match tok {
            Tok::Char(c) => {
                for j in 0..text.len() {
                    if reach[j] && text[j] == c {
                        next[j + 1] = true;
                    }
                }
            }
            Tok::Star | Tok::DoubleStar => {
                let crosses = matches!(tok, Tok::DoubleStar);
                for j in 0..=text.len() {
                    if reach[j] || (j > 0 && next[j - 1] && (crosses || text[j - 1] != '/')) {
                        next[j] = true;
                    }
                }
            }
        }
        reach = next;
    }
    reach[text.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(s: &str) -> Capability {
        s.parse().unwrap()
    }

    /// A needed capability, built as a call builds one (never parsed: it may hold `..`).
    fn needed(s: &str) -> Capability {
        let mut parts = s.splitn(3, ':');
        let mut next = || parts.next().unwrap().to_owned();
        Capability {
            domain: next(),
            action: next(),
            scope: next(),
        }
    }

    #[test]
    fn grants_cover_what_they_say() {
        let g = cap("fs:read:fixtures/data/**");
        assert!(g.covers(&cap("fs:read:fixtures/data/notes.txt")));
        assert!(g.covers(&cap("fs:read:fixtures/data/a/b/c.txt")));
        assert!(!g.covers(&cap("fs:write:fixtures/data/notes.txt")));
        assert!(!g.covers(&cap("fs:read:fixtures/other.txt")));
        let one = cap("fs:read:data/*.txt");
        assert!(one.covers(&cap("fs:read:data/x.txt")));
        assert!(
            !one.covers(&cap("fs:read:data/sub/x.txt")),
            "`*` stays within one component"
        );
        assert!(cap("*:*:**").covers(&cap("proc:exec:/usr/bin/wc")));
    }

    #[test]
    fn a_program_named_by_a_path_is_not_a_bare_name() {
        // As at run time: `./sh` is the file in the working directory, `sh` the one in `PATH`.
        assert!(cap("proc:exec:./sh").covers(&cap("proc:exec:./sh")));
        assert!(cap("proc:exec:./sh").covers(&needed("proc:exec:bin/../sh")));
        assert!(!cap("proc:exec:sh").covers(&cap("proc:exec:./sh")));
        assert!(!cap("proc:exec:./sh").covers(&cap("proc:exec:sh")));
        assert!(cap("proc:exec:sh").covers(&cap("proc:exec:sh")));
        assert!(cap("proc:exec:bin/sh").covers(&cap("proc:exec:./bin/sh")));
        assert_eq!(cap("fs:read:./a").subject().as_deref(), Some("a"));
    }

    #[test]
    fn dot_dot_cannot_escape_a_grant() {
        let g = cap("fs:read:fixtures/data/**");
        assert!(!g.covers(&needed("fs:read:fixtures/data/../../etc/passwd")));
        assert!(g.covers(&needed("fs:read:fixtures/data/x/../notes.txt")));
        assert!(!g.covers(&needed("fs:read:../fixtures/data/notes.txt")));
        assert_eq!(normalize_path("/../etc"), None);
    }

    #[test]
    fn a_grant_with_a_dot_dot_component_is_refused_naming_it() {
        for bad in [
            "fs:read:../**",
            "fs:read:./../x",
            "fs:write:a/../../b",
            "fs:read:a/../b",
            "fs:read:/a/..",
            "proc:exec:../bin/sh",
            "*:*:../**",
            "*:read:..",
        ] {
            let e = bad.parse::<Capability>().unwrap_err();
            assert_eq!(e, CapabilityError::DotDot(bad.to_owned()), "{bad}");
            assert_eq!(e.code(), "capability_dot_dot");
            assert!(e.to_string().contains(bad), "{e}");
        }
        // `..` inside a component is a name, and other domains' scopes are not paths.
        for ok in [
            "fs:read:..data/**",
            "fs:read:a../b",
            "fs:read:a/...",
            "net:http:https://x.org/../a",
            "tool:exec:..",
        ] {
            assert!(ok.parse::<Capability>().is_ok(), "{ok}");
        }
    }

    #[test]
    fn malformed_capabilities_are_refused() {
        assert!("fs:read".parse::<Capability>().is_err());
        assert!("FS:read:x".parse::<Capability>().is_err());
        assert!("fs:read:".parse::<Capability>().is_err());
        assert!("fs:read:a b".parse::<Capability>().is_err());
        assert_eq!(cap("net:get:https://x.org/a").scope, "https://x.org/a");
    }

    #[test]
    fn url_origins_name_scheme_host_and_port_exactly() {
        assert_eq!(
            url_origin("https://API.Example.com/v1?x=1").unwrap(),
            "https://api.example.com:443"
        );
        assert_eq!(
            url_origin("http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(url_origin("http://[::1]:9/x").unwrap(), "http://[::1]:9");
        assert_eq!(url_origin("HTTP://h").unwrap(), "http://h:80");
        for bad in [
            "ftp://h/x",
            "h/x",
            "http://user@h/",
            "http://h:pass@evil/",
            "http://:80/",
            "http://h:0/",
            "http://h:65536/",
            "http://h:+80/",
            "http://[zz]/",
            "http://h h/",
        ] {
            assert!(url_origin(bad).is_err(), "{bad}");
        }
        let grant: Capability = "net:http:https://*.example.com".parse().unwrap();
        let needed = |u: &str| Capability {
            domain: "net".into(),
            action: "http".into(),
            scope: u.into(),
        };
        assert!(grant.covers(&needed("https://api.example.com/v1/x")));
        assert!(!grant.covers(&needed("https://api.example.com:8443/v1/x")));
        assert!(!grant.covers(&needed("http://api.example.com/v1/x")));
        assert!(!grant.covers(&needed("https://api.example.com.evil.io/")));
        assert!(!grant.covers(&needed("https://api.example.com@evil.io/")));
    }
}
