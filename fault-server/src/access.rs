//! Who may use an API that changes what the server does (the control API, Toxiproxy's API): the
//! rules both share.
//!
//! Such an API resets the journal, replaces faults, or takes a dependency down, so it must not
//! be reachable by a web page the user happens to open. Without a token (the API listens on
//! loopback only) a request must name a loopback host — a DNS-rebinding page names its own — and
//! must not come from a page of another origin (`Origin`, `Sec-Fetch-Site`). With a token
//! (required when listening beyond loopback) the request must carry it, as `Authorization:
//! Bearer TOKEN` or `x-harness-token: TOKEN`.

use http::HeaderMap;

/// Why a request was refused: 401 (no or wrong token) or 403 (a page's request), and the words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// 401 or 403.
    pub(crate) status: u16,
    /// Why.
    pub(crate) message: String,
}

/// Whether a request with `headers` (and `authority`, from its URI) may be served, given the
/// token in force.
pub(crate) fn refuse(
    token: Option<&str>,
    headers: &HeaderMap,
    authority: Option<&str>,
) -> Option<Refusal> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(token) = token {
        let given = header("x-harness-token")
            .or_else(|| header("authorization").and_then(|a| a.strip_prefix("Bearer ")));
        if !given.is_some_and(|g| same_secret(g.trim().as_bytes(), token.as_bytes())) {
            return Some(Refusal {
                status: 401,
                message: "give the control token as `Authorization: Bearer TOKEN`".into(),
            });
        }
        return None;
    }
    let forbidden = |message: String| {
        Some(Refusal {
            status: 403,
            message,
        })
    };
    if let Some(host) = header("host").or(authority) {
        if !is_loopback_authority(host) {
            return forbidden(format!(
                "Host {host:?} is not a loopback name; the API answers only 127.0.0.1, ::1 and localhost"
            ));
        }
    }
    if let Some(origin) = header("origin") {
        let host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        if !host.is_some_and(is_loopback_authority) {
            return forbidden(format!(
                "a request from the page of origin {origin:?} is refused"
            ));
        }
    }
    if header("sec-fetch-site") == Some("cross-site") {
        return forbidden("a cross-site request is refused".to_string());
    }
    None
}

/// Whether two secrets are equal, in a time that does not depend on where they differ.
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `localhost`, `127.x.x.x` or `[::1]`, with or without a port.
pub(crate) fn is_loopback_authority(authority: &str) -> bool {
    let host = match authority.rsplit_once(':') {
        Some((h, port))
            if !h.is_empty() && port.chars().all(|c| c.is_ascii_digit()) && !h.ends_with(':') =>
        {
            h
        }
        _ => authority,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
