//! Proxy mode: the real dependency behind the fault server.
//!
//! A request that no rule answers (or that a rule `forward`s, or a `drop`, `delay` or processing
//! fault lets through) is sent to the upstream as it came — method, path and query under the
//! upstream's prefix, headers without the hop-by-hop ones, the body — over a pool of kept-alive
//! HTTP/1.1 connections (TLS for `https://`). Its answer is read whole, within the server's body
//! limit, so that the journal can say what the upstream did (`upstream_status`, `upstream_us`,
//! `created`) whatever the fault then does to the client's side: relay it, lose it (`drop`), or
//! hold it (`delay` after).
//!
//! The connections are the project's own client transport (`transport::http1`), the harness's:
//! a request is one write and its answer is parsed in place, on the request's own task. A general
//! client (hyper's, with a task per connection, a request channel into it and a oneshot back)
//! costs two cross-task wake-ups per request, which in a proxy that does little else was a large
//! part of its time. The pool is a list of idle connections under a lock held for a push or a pop.
//!
//! An upstream that cannot be reached, breaks the exchange or answers too much is answered `502`;
//! one that takes longer than `upstream.timeout`, `504`; both are journaled as `upstream_error`,
//! so the checks can tell the dependency's failure from an injected one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::Mutex;

use bytes::Bytes;
use history::ErrorKind;
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, Method, Uri};
use transport::http1::H1Conn;
use transport::tls::TlsOptions;
use transport::{AttemptError, Connect, Outgoing, Target};

use crate::config::{CreatedFrom, UpstreamConfig, UpstreamUrl};

/// The upstream could not be prepared: its address does not resolve, or its `ca` file or TLS
/// settings are unusable.
#[derive(Debug, thiserror::Error)]
#[error("upstream: {0}")]
pub struct UpstreamError(#[from] transport::TargetError);

/// How long an idle pooled connection is kept.
const IDLE_FOR: Duration = Duration::from_secs(60);

/// The pooled client to the upstream, built once when the server starts.
pub(crate) struct Upstream {
    target: Arc<Target>,
    url: UpstreamUrl,
    timeout: Duration,
    connect_timeout: Duration,
    created_from: CreatedFrom,
    /// Idle kept-alive connections, the most recently used last, with when each was put back.
    idle: Mutex<Vec<(H1Conn, Instant)>>,
    max_idle: usize,
    /// Largest answer read (the server's `limits.max_body`).
    max_body: u64,
}

/// The upstream's whole answer.
#[derive(Debug)]
pub(crate) struct UpstreamReply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// The resource it created, read as `created_from` says.
    pub(crate) created: Option<String>,
}

/// Why the upstream gave no answer.
#[derive(Debug)]
pub(crate) enum UpstreamFailure {
    /// No connection could be made (refused, unreachable, TLS refused, connect timeout).
    Connect(String),
    /// The upstream took longer than `upstream.timeout`.
    Timeout(Duration),
    /// The exchange broke: the connection closed or reset mid-answer, or the answer was not HTTP.
    Broken(String),
    /// The answer's body was over the server's limit.
    TooLarge(usize),
}

impl UpstreamFailure {
    /// The status the client gets: `504` for a timeout, else `502`.
    pub(crate) fn status(&self) -> u16 {
        match self {
            UpstreamFailure::Timeout(_) => 504,
            _ => 502,
        }
    }

    /// A sentence for the client and the log.
    pub(crate) fn detail(&self) -> String {
        match self {
            UpstreamFailure::Connect(e) => format!("the upstream could not be reached: {e}"),
            UpstreamFailure::Timeout(d) => {
                format!("the upstream did not answer within {d:?}")
            }
            UpstreamFailure::Broken(e) => format!("the upstream's answer broke off: {e}"),
            UpstreamFailure::TooLarge(n) => {
                format!("the upstream's answer is over the server's {n}-byte body limit")
            }
        }
    }
}

const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Headers that belong to one connection, not to the message (RFC 9110 §7.6.1), plus the
/// framing the forwarded body gets anew.
static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    HeaderName::from_static("proxy-connection"),
];

impl Upstream {
    /// A pool to `cfg.url`; `max_body` bounds every answer read.
    pub(crate) fn new(cfg: &UpstreamConfig, max_body: u64) -> Result<Upstream, UpstreamError> {
        let scheme = if cfg.url.tls { "https" } else { "http" };
        let how = Connect {
            tls: TlsOptions {
                ca: cfg.ca.clone(),
                ..TlsOptions::default()
            },
            max_body: Some(max_body),
            ..Connect::default()
        };
        let target = Target::with(&format!("{scheme}://{}", cfg.url.authority), &how)?;
        Ok(Upstream {
            target: Arc::new(target),
            url: cfg.url.clone(),
            timeout: cfg.timeout.0,
            connect_timeout: cfg.connect_timeout.0,
            created_from: cfg.created_from.clone(),
            idle: Mutex::new(Vec::new()),
            max_idle: cfg.max_idle as usize,
            max_body,
        })
    }

    /// An idle connection of the pool (the most recently used: the likeliest still open), or a
    /// new one, not yet open.
    fn checkout(&self) -> H1Conn {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < IDLE_FOR {
                return conn;
            }
        }
        drop(idle);
        H1Conn::new(self.target.clone())
    }

    /// Puts a connection that just carried a whole exchange back in the pool.
    fn checkin(&self, conn: H1Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.max_idle {
            idle.push((conn, Instant::now()));
        }
    }

    /// Where a request for `path_and_query` goes on the upstream: under its prefix.
    fn path(&self, path_and_query: &str) -> String {
        let mut path = String::with_capacity(self.url.prefix.len() + path_and_query.len());
        path.push_str(&self.url.prefix);
        path.push_str(path_and_query);
        path
    }

    /// Sends the request and reads the whole answer, within `upstream.timeout`.
    pub(crate) async fn forward(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: Bytes,
        tls: bool,
    ) -> Result<UpstreamReply, UpstreamFailure> {
        let pq = uri.path_and_query().map_or("/", |p| p.as_str());
        // Headers the client's `Connection` names are hop-by-hop too (RFC 9110 §7.6.1).
        let named: Vec<String> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect();
        let mut h = HeaderMap::with_capacity(headers.len() + 2);
        for (name, value) in headers {
            let skip = HOP_BY_HOP.contains(name)
                || name == header::HOST
                || name == header::CONTENT_LENGTH
                || named.iter().any(|n| n == name.as_str());
            if !skip {
                h.append(name.clone(), value.clone());
            }
        }
        // What the client asked for, for an upstream that builds absolute URLs.
        let asked = headers.get(header::HOST).cloned().or_else(|| {
            uri.authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        if let Some(host) = asked {
            h.insert(X_FORWARDED_HOST, host);
        }
        h.insert(
            X_FORWARDED_PROTO,
            HeaderValue::from_static(if tls { "https" } else { "http" }),
        );
        let out = Outgoing {
            method: method.clone(),
            uri: self.path(pq),
            headers: h,
            body,
        };
        let mut conn = self.checkout();
        let started = Instant::now();
        match tokio::time::timeout(self.connect_timeout, conn.open()).await {
            Err(_) => {
                return Err(UpstreamFailure::Connect(format!(
                    "no connection within {:?}",
                    self.connect_timeout
                )))
            }
            Ok(Err(e)) => return Err(self.failure(e)),
            Ok(Ok(())) => {}
        }
        let left = self.timeout.saturating_sub(started.elapsed());
        let reply = conn.send(out, left).await.map_err(|e| self.failure(e))?;
        self.checkin(conn);
        let mut headers = reply.headers;
        // Looked for before removed: a removal hashes the name, and an answer has few of them.
        let mut present = [false; HOP_BY_HOP.len()];
        for name in headers.keys() {
            if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
                present[i] = true;
            }
        }
        for (name, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, p)| *p) {
            headers.remove(name);
        }
        if method != Method::HEAD {
            // The relayed body is framed anew.
            headers.remove(header::CONTENT_LENGTH);
        }
        let status = reply.status.as_u16();
        let created = self.created(status, &headers, &reply.body);
        Ok(UpstreamReply {
            status,
            headers,
            body: reply.body,
            created,
        })
    }

    /// What a failed exchange was, as the journal tells it.
    fn failure(&self, e: AttemptError) -> UpstreamFailure {
        if e.is_over_limit() {
            return UpstreamFailure::TooLarge(usize::try_from(self.max_body).unwrap_or(usize::MAX));
        }
        match e.kind {
            ErrorKind::Connect | ErrorKind::Tls => UpstreamFailure::Connect(e.message),
            ErrorKind::Timeout => UpstreamFailure::Timeout(self.timeout),
            _ => UpstreamFailure::Broken(e.message),
        }
    }

    /// The id of what the answer created, as `created_from` says.
    fn created(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Option<String> {
        let c = &self.created_from;
        if !c.status.iter().any(|s| s.0 == status) {
            return None;
        }
        let from_json = c.json.as_deref().and_then(|pointer| {
            let v: serde_json::Value = serde_json::from_slice(body).ok()?;
            match v.pointer(pointer)? {
                serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        });
        from_json.or_else(|| {
            c.location
                .then(|| {
                    headers
                        .get(header::LOCATION)?
                        .to_str()
                        .ok()
                        .map(str::to_string)
                })
                .flatten()
        })
    }
}

/// Microseconds since `start`.
pub(crate) fn elapsed_us(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StatusCode;

    fn upstream(created_from: CreatedFrom) -> Upstream {
        let mut cfg = UpstreamConfig::new(UpstreamUrl::parse("http://127.0.0.1:9/api/").unwrap());
        cfg.created_from = created_from;
        Upstream::new(&cfg, 1 << 20).unwrap()
    }

    #[tokio::test]
    async fn forwarded_paths_go_under_the_prefix() {
        let u = upstream(CreatedFrom::default());
        assert_eq!(u.path("/orders?x=1"), "/api/orders?x=1");
    }

    #[tokio::test]
    async fn the_created_id_comes_from_the_body_then_the_location() {
        let u = upstream(CreatedFrom::default());
        let mut h = HeaderMap::new();
        assert_eq!(
            u.created(201, &h, br#"{"id":"ord_1"}"#),
            Some("ord_1".into())
        );
        assert_eq!(u.created(201, &h, br#"{"id":42}"#), Some("42".into()));
        assert_eq!(
            u.created(200, &h, br#"{"id":"ord_1"}"#),
            None,
            "not a creation"
        );
        h.insert(header::LOCATION, HeaderValue::from_static("/orders/ord_2"));
        assert_eq!(u.created(201, &h, b"created"), Some("/orders/ord_2".into()));
        let u = upstream(CreatedFrom {
            status: vec![StatusCode(200), StatusCode(201)],
            json: Some("/data/payment_id".into()),
            location: false,
        });
        assert_eq!(
            u.created(200, &h, br#"{"data":{"payment_id":"p9"}}"#),
            Some("p9".into())
        );
        assert_eq!(u.created(201, &h, b"{}"), None, "no Location fallback");
    }
}
