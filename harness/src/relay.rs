//! Relay tiers: a chain of in-process HTTP services, each calling the next one under its own retry
//! policy — the seed's retry-amplification experiment (exercise 2) on real sockets.
//!
//! Why: retries multiply across layers. Three layers that each try 4 times send 4 × 4 × 4 = 64
//! calls to the bottom for one user request, and an arithmetic argument convinces nobody who has
//! not watched it happen. Each tier here is a real HTTP/1.1 server on `127.0.0.1:0` that calls the
//! tier below through [`crate::operation::execute`] — the same policy and executor the load
//! driver uses — so the
//! multiplication, and each fix the seed names, can be measured in the bottom's journal:
//!
//! - retry at one layer only: give the outer tiers `max_attempts: 1`;
//! - a retry budget per tier ([`Policy::budget`], shared by every request the tier serves);
//! - a circuit breaker per tier ([`Policy::breaker`]): while open the tier answers its fallback
//!   (`fallback_status`, 503 by default) without calling down;
//! - deadline propagation: `X-Deadline` (absolute unix ms) is read from the caller, or set from the
//!   tier's `total_timeout` when its policy has `deadline_header`; the tier answers 504 at once
//!   when nothing is left, passes the absolute deadline down less a small margin for its own
//!   answer ([`DEADLINE_MARGIN`]), and caps its own attempts and retries to what is left, so a
//!   request whose caller is gone is not retried and the caller gets its 504 in time.
//!
//! A tier answers with the downstream's final response (status, body, `Content-Type`,
//! `Retry-After`), 502 when the downstream gave no response, 504 when the deadline passed before
//! one came. It forwards method, path and query, body, the headers in [`FORWARDED_HEADERS`] and
//! `X-Deadline`, and adds [`RELAY_TIER_HEADER`] with its name (add `x-relay-tier` to the fault
//! server's `capture_headers` to see it in the journal). The request is forwarded as it came, bytes
//! and all: a body need not be text.

use std::borrow::Cow;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use primitives::draw::splitmix64;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use retry_policy::{Limits, OpEnd, Policy};

use crate::http::{AttemptError, Conn, Outgoing, Reply, Target, TargetError};
use crate::operation::{execute, AttemptSpec, OpResult, Transport};
use crate::plan::TierSpec;
use crate::plan::RELAY_TIER_HEADER;

/// Most a tier takes off its caller's deadline to leave time for its answer to travel back.
pub const DEADLINE_MARGIN: Duration = Duration::from_millis(10);

/// The deadline header: an absolute deadline in milliseconds since the Unix epoch.
pub const DEADLINE_HEADER: &str = "x-deadline";

/// Request headers a tier copies from its caller to its downstream request.
pub const FORWARDED_HEADERS: &[&str] = &[
    "idempotency-key",
    "x-request-id",
    "x-client-id",
    "content-type",
];

/// A chain could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// `start_chain` was given no tiers.
    #[error("a relay chain needs at least one tier")]
    NoTiers,
    /// A tier name that cannot be sent as a header value.
    #[error("tier name {0:?} cannot be used as an {RELAY_TIER_HEADER} header value")]
    Name(String),
    /// The bottom URL (or a tier's own URL) is not usable.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// A tier could not listen.
    #[error("tier {tier}: cannot listen on 127.0.0.1:0: {source}")]
    Bind {
        /// The tier's name.
        tier: String,
        /// The OS error.
        source: io::Error,
    },
}

/// What one tier did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TierStats {
    /// The tier's name.
    pub name: String,
    /// Requests received from its caller.
    pub received: u64,
    /// Attempts made to the tier below (first attempts included), by requests that completed.
    pub attempts: u64,
    /// Attempts after the first, summed over requests.
    pub retries: u64,
    /// 504s the tier answered itself (the deadline had passed).
    pub answered_504: u64,
    /// 502s the tier answered itself (the tier below gave no response).
    pub answered_502: u64,
    /// Requests its open breaker answered with the fallback.
    pub breaker_rejections: u64,
    /// Retries its budget refused.
    pub budget_refusals: u64,
    /// Requests whose caller left before the answer: their calls down were abandoned.
    pub cancelled: u64,
}

#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    answered_504: AtomicU64,
    answered_502: AtomicU64,
    breaker_rejections: AtomicU64,
    budget_refusals: AtomicU64,
    cancelled: AtomicU64,
}

impl Counters {
    fn snapshot(&self, name: &str) -> TierStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TierStats {
            name: name.to_string(),
            received: get(&self.received),
            attempts: get(&self.attempts),
            retries: get(&self.retries),
            answered_504: get(&self.answered_504),
            answered_502: get(&self.answered_502),
            breaker_rejections: get(&self.breaker_rejections),
            budget_refusals: get(&self.budget_refusals),
            cancelled: get(&self.cancelled),
        }
    }
}

/// A running chain of tiers; tier 0 is the top.
pub struct Chain {
    tiers: Vec<Tier>,
}

impl Chain {
    /// The top tier's URL: where the load goes.
    pub fn url(&self) -> String {
        self.tiers.first().map_or_else(String::new, Tier::url)
    }

    /// Every tier's URL, top first.
    pub fn urls(&self) -> Vec<String> {
        self.tiers.iter().map(Tier::url).collect()
    }

    /// Per-tier counts, top first.
    pub fn stats(&self) -> Vec<TierStats> {
        self.tiers
            .iter()
            .map(|t| t.state.counters.snapshot(&t.state.name))
            .collect()
    }

    /// Stops every tier: no new connections, open ones are closed.
    pub async fn shutdown(self) {
        for t in self.tiers {
            t.shutdown().await;
        }
    }
}

/// Starts `tiers` (top first); the last one calls `bottom_url`. `seed` seeds the tiers' jitter.
pub async fn start_chain(
    tiers: Vec<TierSpec>,
    bottom_url: &str,
    bottom: &crate::http::Connect,
    seed: u64,
) -> Result<Chain, RelayError> {
    if tiers.is_empty() {
        return Err(RelayError::NoTiers);
    }
    // Started bottom-up: each tier needs the URL of the one below it.
    let mut started: Vec<Tier> = Vec::with_capacity(tiers.len());
    let mut downstream = bottom_url.to_string();
    // The bottom is reached as the run says (TLS, HTTP/2); the tiers above it serve HTTP/1.1.
    let mut how = bottom.clone();
    for (index, spec) in tiers.into_iter().enumerate().rev() {
        match Tier::start(spec, &downstream, &how, seed, index as u64).await {
            Ok(t) => {
                downstream = t.url();
                how = crate::http::Connect::default();
                started.push(t);
            }
            Err(e) => {
                for t in started {
                    t.shutdown().await;
                }
                return Err(e);
            }
        }
    }
    started.reverse();
    Ok(Chain { tiers: started })
}

/// One running tier.
struct Tier {
    addr: SocketAddr,
    state: Arc<TierState>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Tier {
    async fn start(
        spec: TierSpec,
        downstream: &str,
        how: &crate::http::Connect,
        seed: u64,
        index: u64,
    ) -> Result<Tier, RelayError> {
        let tier_header =
            HeaderValue::from_str(&spec.name).map_err(|_| RelayError::Name(spec.name.clone()))?;
        let target = Arc::new(Target::with(downstream, how)?);
        let bind = SocketAddr::from(([127, 0, 0, 1], 0));
        let bind_err = |source| RelayError::Bind {
            tier: spec.name.clone(),
            source,
        };
        let listener = TcpListener::bind(bind).await.map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let state = Arc::new(TierState {
            limits: Limits::new(&spec.policy, Instant::now()),
            name: spec.name,
            tier_header,
            policy: spec.policy,
            target,
            pool: Mutex::new(Vec::new()),
            workers: AtomicU64::new(0),
            operations: AtomicU64::new(0),
            seed: splitmix64(seed ^ splitmix64(index)),
            counters: Counters::default(),
        });
        let (shutdown, rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, state.clone(), rx));
        Ok(Tier {
            addr,
            state,
            shutdown,
            task,
        })
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }
}

/// What a tier shares across the requests it serves.
struct TierState {
    name: String,
    tier_header: HeaderValue,
    policy: Policy,
    /// Budget and breaker: one per tier, across all its requests.
    limits: Limits,
    target: Arc<Target>,
    /// Idle downstream connections; a request checks one out and returns it when done.
    pool: Mutex<Vec<Downstream>>,
    workers: AtomicU64,
    operations: AtomicU64,
    seed: u64,
    counters: Counters,
}

/// A downstream connection with the RNG that goes with it.
struct Downstream {
    conn: Conn,
    rng: StdRng,
}

impl TierState {
    fn checkout(&self) -> Downstream {
        let idle = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
        idle.unwrap_or_else(|| {
            let id = self.workers.fetch_add(1, Ordering::Relaxed);
            Downstream {
                conn: Conn::new(self.target.clone()),
                rng: StdRng::seed_from_u64(splitmix64(self.seed ^ splitmix64(id))),
            }
        })
    }

    fn checkin(&self, w: Downstream) {
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).push(w);
    }
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<TierState>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        match accepted {
            Ok((stream, _)) => {
                tokio::spawn(serve_connection(state.clone(), stream, shutdown.clone()));
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(tier = %state.name, "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn serve_connection(
    state: Arc<TierState>,
    stream: TcpStream,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let svc = hyper::service::service_fn(move |req| handle(state.clone(), req));
    // When the caller closes its connection mid-request, hyper drops the handler's future: the
    // tier's attempts and retries stop with it (cancellation passes down).
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        _ = conn => {}
        _ = shutdown.changed() => {}
    }
}

fn now_unix() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

/// The absolute deadline (unix ms) of a request: the caller's `X-Deadline`, or the tier's own
/// `total_timeout` when its policy sends deadlines, whichever is earlier.
fn deadline_ms(headers: &HeaderMap, policy: &Policy, now: Duration) -> Result<Option<u64>, ()> {
    let incoming = match headers.get(DEADLINE_HEADER) {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or(())?,
        ),
        None => None,
    };
    let own = policy
        .total_timeout
        .filter(|_| policy.deadline_header)
        .map(|t| (now + t).as_millis() as u64);
    Ok(match (incoming, own) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

async fn handle(
    state: Arc<TierState>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let c = &state.counters;
    c.received.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = req.into_parts();
    let now = now_unix();
    let Ok(deadline) = deadline_ms(&parts.headers, &state.policy, now) else {
        return Ok(text(
            StatusCode::BAD_REQUEST,
            format!("{DEADLINE_HEADER} must be a deadline in milliseconds since the Unix epoch\n"),
        ));
    };
    // What is left of the deadline, and the same moment on the monotonic clock.
    let remaining = deadline.map(|d| Duration::from_millis(d).saturating_sub(now));
    if remaining.is_some_and(|r| r.is_zero()) {
        c.answered_504.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(tier = %state.name, "deadline already passed: 504 without calling down");
        return Ok(text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("tier {}: deadline passed before the call\n", state.name),
        ));
    }
    // Leave room for the answer to travel back up: this tier, and everything below it, works to a
    // deadline a little earlier than its caller's (10 % of what is left, at most 10 ms), so the
    // 504 reaches the caller before the caller's own timeout fires.
    let margin = remaining.map_or(Duration::ZERO, |r| (r / 10).min(DEADLINE_MARGIN));
    let remaining = remaining.map(|r| r.saturating_sub(margin));
    let deadline = deadline.map(|d| d.saturating_sub(margin.as_millis() as u64));
    let deadline_at = remaining.map(|r| Instant::now() + r);
    let Ok(collected) = body.collect().await else {
        return Ok(text(
            StatusCode::BAD_REQUEST,
            "incomplete request body\n".to_string(),
        ));
    };
    let body = collected.to_bytes();
    let uri = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    let mut headers = HeaderMap::with_capacity(FORWARDED_HEADERS.len() + 2);
    for name in FORWARDED_HEADERS {
        if let Some(v) = parts.headers.get(*name) {
            headers.insert(HeaderName::from_static(name), v.clone());
        }
    }
    headers.insert(
        HeaderName::from_static(RELAY_TIER_HEADER),
        state.tier_header.clone(),
    );
    // Under a deadline: pass the absolute deadline down (not one recomputed from a duration,
    // which would drift by a millisecond per tier) and cap this tier's total time.
    let policy: Cow<'_, Policy> = match (deadline, remaining) {
        (Some(d), Some(r)) => {
            headers.insert(
                HeaderName::from_static(DEADLINE_HEADER),
                HeaderValue::from(d),
            );
            let mut p = state.policy.clone();
            p.total_timeout = Some(p.total_timeout.map_or(r, |t| t.min(r)));
            p.deadline_header = false;
            Cow::Owned(p)
        }
        _ => Cow::Borrowed(&state.policy),
    };

    state.operations.fetch_add(1, Ordering::Relaxed);
    // If the caller leaves, this future is dropped with the connection in it: it may have a
    // request in flight, so it is not returned to the pool.
    let mut in_flight = InFlight {
        counters: &state.counters,
        done: false,
    };
    let mut w = state.checkout();
    let mut forward = Forward {
        conn: &mut w.conn,
        request: Outgoing {
            method: parts.method.clone(),
            uri,
            headers,
            body,
        },
    };
    let result = execute(&mut forward, &mut (), &policy, &state.limits, &mut w.rng).await;
    state.checkin(w);
    in_flight.done = true;
    Ok(answer(&state, &policy, result, deadline_at))
}

/// A tier's transport: the caller's request, forwarded as it came (bytes, not text).
struct Forward<'a> {
    conn: &'a mut Conn,
    request: Outgoing,
}

impl Transport for Forward<'_> {
    async fn send(&mut self, spec: AttemptSpec<'_>) -> Result<Reply, AttemptError> {
        self.conn
            .send(self.request.clone(), spec.call.timeout)
            .await
    }
}

/// Counts a request as cancelled when its handler is dropped before the call down ended.
struct InFlight<'a> {
    counters: &'a Counters,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The tier's answer to its caller, from how the downstream call ended.
fn answer(
    state: &TierState,
    policy: &Policy,
    r: OpResult,
    deadline_at: Option<Instant>,
) -> Response<Full<Bytes>> {
    let c = &state.counters;
    c.attempts
        .fetch_add(u64::from(r.attempts), Ordering::Relaxed);
    c.retries
        .fetch_add(u64::from(r.attempts.saturating_sub(1)), Ordering::Relaxed);
    match r.end {
        OpEnd::BudgetRefused => {
            c.budget_refusals.fetch_add(1, Ordering::Relaxed);
        }
        OpEnd::Fallback => {
            c.breaker_rejections.fetch_add(1, Ordering::Relaxed);
            let status = StatusCode::from_u16(policy.fallback_status)
                .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            let body = serde_json::json!({
                "type": "urn:harness:relay:circuit-open",
                "title": "Circuit open",
                "status": status.as_u16(),
                "detail": format!("tier {}: the breaker is open; the dependency was not called", state.name),
            });
            let mut res = Response::new(Full::new(Bytes::from(body.to_string())));
            *res.status_mut() = status;
            res.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            );
            return res;
        }
        OpEnd::Done | OpEnd::Exhausted | OpEnd::DeadlineExceeded | OpEnd::WaitTooLong => {}
    }
    if let Some(reply) = r.reply {
        let mut res = Response::new(Full::new(reply.body));
        *res.status_mut() = reply.status;
        for name in [http::header::CONTENT_TYPE, http::header::RETRY_AFTER] {
            if let Some(v) = reply.headers.get(&name) {
                res.headers_mut().insert(name, v.clone());
            }
        }
        return res;
    }
    let error = r.error.map_or("none", |e| e.as_str());
    let out_of_time =
        r.end == OpEnd::DeadlineExceeded || deadline_at.is_some_and(|d| Instant::now() >= d);
    if out_of_time {
        c.answered_504.fetch_add(1, Ordering::Relaxed);
        text(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "tier {}: deadline passed after {} attempt(s), last error: {error}\n",
                state.name, r.attempts
            ),
        )
    } else {
        c.answered_502.fetch_add(1, Ordering::Relaxed);
        text(
            StatusCode::BAD_GATEWAY,
            format!(
                "tier {}: no response from downstream after {} attempt(s), last error: {error}\n",
                state.name, r.attempts
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(deadline: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(d) = deadline {
            h.insert(DEADLINE_HEADER, HeaderValue::from_str(d).unwrap());
        }
        h
    }

    #[test]
    fn the_earlier_of_the_callers_deadline_and_the_tiers_own() {
        let now = Duration::from_millis(1_000_000);
        let plain = Policy::default();
        let own = Policy {
            total_timeout: Some(Duration::from_millis(300)),
            deadline_header: true,
            ..Policy::default()
        };
        let quiet = Policy {
            deadline_header: false,
            ..own.clone()
        };
        assert_eq!(deadline_ms(&headers(None), &plain, now), Ok(None));
        assert_eq!(
            deadline_ms(&headers(Some("1000500")), &plain, now),
            Ok(Some(1_000_500))
        );
        assert_eq!(deadline_ms(&headers(None), &own, now), Ok(Some(1_000_300)));
        assert_eq!(
            deadline_ms(&headers(Some("1000500")), &own, now),
            Ok(Some(1_000_300))
        );
        assert_eq!(
            deadline_ms(&headers(Some("1000100")), &own, now),
            Ok(Some(1_000_100))
        );
        assert_eq!(
            deadline_ms(&headers(None), &quiet, now),
            Ok(None),
            "a total timeout alone is the tier's business, not a deadline it passes on"
        );
        assert_eq!(deadline_ms(&headers(Some("soon")), &plain, now), Err(()));
    }
}
