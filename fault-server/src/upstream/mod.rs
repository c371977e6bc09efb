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
//! part of its time. The pool is a list of idle connections under a lock held for a push or a pop,
//! one list per connection lane ([`crate::lanes`]): a forward takes a connection its own thread
//! polls, and takes one of another lane only when no new one may be opened.
//!
//! Everything a forward holds is bounded. Connections: at most `upstream.max_connections` are
//! open at once, idle ones included, each holding a permit of one semaphore; a request that finds
//! none free waits its turn (in arrival order) for a permit or an idle connection, within
//! `upstream.timeout`, else `504` — so clients that open thousands of streams at an upstream that
//! never answers cost that many connections, not a descriptor each, and the server's own
//! descriptors (the control API's among them) stay free. Memory: an answer's body is granted, as
//! it is read, from one budget of `limits.response_memory` bytes for all answers held, and given
//! back once the client has it (or is gone); an answer that would go over is dropped unread and
//! the client answered `503` with `Retry-After`. A forward whose client goes away is cancelled
//! with its request's future: its connection is closed, its permit and memory returned.
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
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use transport::http1::H1Conn;
use transport::tls::TlsOptions;
use transport::{AttemptError, Connect, Outgoing, Target};

use crate::config::{CreatedFrom, UpstreamConfig, UpstreamUrl};

mod h2;

/// The upstream could not be prepared: its address does not resolve, or its `ca` file or TLS
/// settings are unusable.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Its address or TLS settings.
    #[error("upstream: {0}")]
    Target(#[from] transport::TargetError),
    /// Its TLS settings, for HTTP/2.
    #[error("upstream: {0}")]
    Tls(#[from] transport::tls::TlsSetupError),
}

/// How long an idle pooled connection is kept.
const IDLE_FOR: Duration = Duration::from_secs(60);

/// The pooled client to the upstream, built once when the server starts.
pub(crate) struct Upstream {
    target: Arc<Target>,
    url: UpstreamUrl,
    timeout: Duration,
    connect_timeout: Duration,
    created_from: CreatedFrom,
    /// Idle kept-alive connections, the most recently used last, with when each was put back:
    /// a list per connection lane ([`crate::lanes`]), so that a forward reuses a connection its
    /// own thread polls.
    idle: Vec<Mutex<Vec<(Lease, Instant)>>>,
    /// The most each lane keeps idle (`upstream.max_idle`, shared out between the lanes).
    max_idle: usize,
    /// A permit per open connection, idle ones included (`upstream.max_connections`).
    open: Arc<Semaphore>,
    max_connections: usize,
    /// Signalled when a connection goes back to the pool, for requests waiting for one.
    returned: Notify,
    /// Largest answer read (the server's `limits.max_body`).
    max_body: u64,
    /// Bytes of answers that may be held at once (`limits.response_memory`).
    memory: Arc<Semaphore>,
    /// `grpc://` and `grpcs://`: the HTTP/2 connections every forward takes instead.
    h2: Option<h2::H2Pool>,
}

/// A connection to the upstream and its place among the `max_connections`.
struct Lease {
    conn: H1Conn,
    _permit: OwnedSemaphorePermit,
}

/// The upstream's whole answer.
#[derive(Debug)]
pub(crate) struct UpstreamReply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// Its trailers (HTTP/2: a gRPC call's status).
    pub(crate) trailers: Option<HeaderMap>,
    /// The resource it created, read as `created_from` says.
    pub(crate) created: Option<String>,
    /// The body's share of `limits.response_memory`, held until the client has it.
    pub(crate) held: Option<OwnedSemaphorePermit>,
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
    /// No connection to the upstream came free within `upstream.timeout` (`max_connections` in
    /// use).
    Busy(Duration, usize),
    /// The answer did not fit what is left of `limits.response_memory`.
    Memory(u64),
}

impl UpstreamFailure {
    /// The status the client gets: `504` for a timeout (of the answer, or of the wait for a
    /// connection), `503` for an answer over the memory budget, else `502`.
    pub(crate) fn status(&self) -> u16 {
        match self {
            UpstreamFailure::Timeout(_) | UpstreamFailure::Busy(..) => 504,
            UpstreamFailure::Memory(_) => 503,
            _ => 502,
        }
    }

    /// The status a gRPC call is answered with, as a gRPC proxy answers it, with a pushback for
    /// an answer that did not fit in memory (as the HTTP answer's `Retry-After: 1`).
    pub(crate) fn grpc_status(&self) -> (history::GrpcCode, Option<i64>) {
        use history::GrpcCode;
        match self {
            UpstreamFailure::Timeout(_) => (GrpcCode::DeadlineExceeded, None),
            UpstreamFailure::Memory(_) => (GrpcCode::Unavailable, Some(1000)),
            UpstreamFailure::TooLarge(_) => (GrpcCode::ResourceExhausted, None),
            UpstreamFailure::Connect(_)
            | UpstreamFailure::Broken(_)
            | UpstreamFailure::Busy(..) => (GrpcCode::Unavailable, None),
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
            UpstreamFailure::Busy(d, n) => format!(
                "no connection to the upstream came free within {d:?} (all {n} in use)"
            ),
            UpstreamFailure::Memory(n) => format!(
                "the upstream's answer ({n} bytes so far) does not fit in the memory the server keeps for answers in flight; try again"
            ),
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
    /// A pool of at most `max_connections` to `cfg.url`, used from `lanes` connection lanes;
    /// `max_body` bounds every answer read, and all answers held together take their memory
    /// from `memory`.
    pub(crate) fn new(
        cfg: &UpstreamConfig,
        max_body: u64,
        max_connections: usize,
        memory: Arc<Semaphore>,
        lanes: usize,
    ) -> Result<Upstream, UpstreamError> {
        let lanes = lanes.max(1);
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
        let h2 = match cfg.url.http2 {
            true => Some(h2::H2Pool::new(
                cfg,
                max_connections,
                max_body,
                memory.clone(),
            )?),
            false => None,
        };
        Ok(Upstream {
            h2,
            target: Arc::new(target),
            url: cfg.url.clone(),
            timeout: cfg.timeout.0,
            connect_timeout: cfg.connect_timeout.0,
            created_from: cfg.created_from.clone(),
            idle: (0..lanes).map(|_| Mutex::new(Vec::new())).collect(),
            max_idle: (cfg.max_idle as usize).div_ceil(lanes),
            open: Arc::new(Semaphore::new(max_connections.max(1))),
            max_connections: max_connections.max(1),
            returned: Notify::new(),
            max_body,
            memory,
        })
    }

    /// This lane's idle connections.
    fn idle_here(&self) -> &Mutex<Vec<(Lease, Instant)>> {
        &self.idle[crate::lanes::current() % self.idle.len()]
    }

    /// The most recently used connection of `idle` not idle for too long (the likeliest still
    /// open); those idle for too long are closed.
    fn pop_fresh(idle: &Mutex<Vec<(Lease, Instant)>>) -> Option<Lease> {
        let mut idle = idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((lease, since)) = idle.pop() {
            if since.elapsed() < IDLE_FOR {
                return Some(lease);
            }
        }
        None
    }

    /// An idle connection of this lane, or a new one, not yet open, when fewer than
    /// `max_connections` are, or an idle one of another lane; else waits, until `deadline`, for
    /// any of them.
    async fn checkout(&self, deadline: tokio::time::Instant) -> Result<Lease, UpstreamFailure> {
        loop {
            // Registered before looking, so a connection returned in between is not missed.
            let returned = self.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            if let Some(lease) = Self::pop_fresh(self.idle_here()) {
                return Ok(lease);
            }
            if let Ok(permit) = self.open.clone().try_acquire_owned() {
                return Ok(Lease {
                    conn: H1Conn::new(self.target.clone()),
                    _permit: permit,
                });
            }
            if let Some(lease) = self.idle.iter().find_map(Self::pop_fresh) {
                return Ok(lease);
            }
            tokio::select! {
                biased;
                permit = self.open.clone().acquire_owned() => {
                    let Ok(permit) = permit else {
                        return Err(UpstreamFailure::Connect("the pool is closed".into()));
                    };
                    return Ok(Lease {
                        conn: H1Conn::new(self.target.clone()),
                        _permit: permit,
                    });
                }
                () = returned => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(UpstreamFailure::Busy(self.timeout, self.max_connections));
                }
            }
        }
    }

    /// Puts a connection that just carried a whole exchange back in this lane's pool (or closes
    /// it, and frees its place, when the lane holds its share of `max_idle` already).
    fn checkin(&self, lease: Lease) {
        let mut idle = self.idle_here().lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.max_idle {
            idle.push((lease, Instant::now()));
            drop(idle);
            self.returned.notify_one();
        }
    }

    /// Where a request for `path_and_query` goes on the upstream: under its prefix.
    fn path(&self, path_and_query: &str) -> String {
        let mut path = String::with_capacity(self.url.prefix.len() + path_and_query.len());
        path.push_str(&self.url.prefix);
        path.push_str(path_and_query);
        path
    }

    /// Whether requests go over HTTP/2 (`grpc://`, `grpcs://`).
    pub(crate) fn http2(&self) -> bool {
        self.h2.is_some()
    }

    /// The upstream's URL.
    pub(crate) fn url(&self) -> &UpstreamUrl {
        &self.url
    }

    /// Sends the request and reads the whole answer: a connection within `upstream.timeout`,
    /// then the answer within `upstream.timeout` (over HTTP/2, both within the one).
    pub(crate) async fn forward(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: Bytes,
        tls: bool,
    ) -> Result<UpstreamReply, UpstreamFailure> {
        if let Some(pool) = &self.h2 {
            let deadline = tokio::time::Instant::now() + self.timeout;
            let a = pool.forward(method, uri, headers, body, deadline).await?;
            let mut headers = a.headers;
            headers.remove(header::CONTENT_LENGTH);
            let created = self.created(a.status, &headers, &a.body);
            return Ok(UpstreamReply {
                status: a.status,
                headers,
                body: a.body,
                trailers: a.trailers,
                created,
                held: a.held,
            });
        }
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
        // The wait for a connection and the exchange each get `upstream.timeout`: a request that
        // waited its turn is sent with the whole of it, never with what its wait left — a
        // request sent with a few milliseconds to go reaches the upstream, and has its effect
        // there, while its client is told `504`.
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut lease = self.checkout(deadline).await?;
        let started = Instant::now();
        let conn = &mut lease.conn;
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
        let mut held: Option<OwnedSemaphorePermit> = None;
        let mut refused = None;
        let sent = {
            let memory = &self.memory;
            let mut meter = |n: u64| {
                let have = held.as_ref().map_or(0, |p| p.num_permits() as u64);
                if n <= have {
                    return true;
                }
                let more = u32::try_from(n - have)
                    .ok()
                    .and_then(|m| memory.clone().try_acquire_many_owned(m).ok());
                match (more, &mut held) {
                    (Some(p), Some(h)) => h.merge(p),
                    (Some(p), None) => held = Some(p),
                    (None, _) => {
                        refused = Some(n);
                        return false;
                    }
                }
                true
            };
            conn.send_metered(&out, left, &mut meter).await
        };
        let reply = match (sent, refused) {
            (Ok(r), _) => r,
            (Err(_), Some(n)) => return Err(UpstreamFailure::Memory(n)),
            (Err(e), None) => return Err(self.failure(e)),
        };
        self.checkin(lease);
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
            trailers: None,
            created,
            held,
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
        Upstream::new(&cfg, 1 << 20, 4, Arc::new(Semaphore::new(1 << 20)), 1).unwrap()
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
