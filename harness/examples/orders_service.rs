//! An orders API that charges a payment dependency: the kind of service a CI gate puts under
//! `harness exec`, in a naive and a resilient configuration.
//!
//! Why it exists: the harness's checks judge what a service *did to its dependency*, from the fault
//! server's journal. This service shows both sides of that verdict with the same building blocks
//! the load driver uses ([`harness::policy`]: classification, backoff, jitter, Retry-After, total
//! timeout, breaker, key discipline) — only the [`Policy`] values differ:
//!
//! - `--mode naive` retries every non-2xx, 400s included (5 attempts, fixed 500 ms, no jitter),
//!   sends a new Idempotency-Key on every attempt and has no breaker: after a lost response a
//!   retry looks like a new payment, and a declined card is charged five times over.
//! - `--mode resilient` (the default) forwards the caller's Idempotency-Key (or makes one per
//!   incoming request) and reuses it on every attempt; retries only transient failures (503, 429,
//!   409 while the first attempt is in flight, timeouts, resets, closed connections) with
//!   exponential backoff and full jitter, at least the server's Retry-After, within a 5 s total
//!   timeout passed down as `X-Deadline`; and a circuit breaker (50 % failures over at least 20
//!   calls in 30 s opens it for 15 s) answers 503 without calling while open.
//!
//! `POST /orders` (JSON body, optional `Idempotency-Key`) calls `POST {payments-url}{payments-path}`
//! with the same body, forwarding `x-request-id` and `x-client-id`, and answers `201
//! {"id": <the payment's id>, ...}` (`200` when the dependency replayed a stored payment); `503`
//! when the dependency stayed unavailable (503/429 to the end) or the breaker is open; `502` when
//! it refused the payment (any other non-2xx) or gave no usable response. Any other path is `404`.
//!
//! Flags: `--bind ADDR` (default `127.0.0.1:0`; prints `listening on http://ADDR` when ready),
//! `--payments-url URL` (else env `PAYMENTS_URL`, else env `HARNESS_FAULT_URL`; a value written
//! `$NAME` is read from that variable), `--payments-path PATH` (default `/orders`: the fault
//! server's built-in resource acts as the payment API), `--mode naive|resilient`, `--seed N`
//! (jitter and generated keys).
//!
//! Run it on its own against a fault server:
//!
//! ```sh
//! cargo run -p fault-server -- --bind 127.0.0.1:8080 &
//! cargo run -p harness --example orders_service -- --payments-url http://127.0.0.1:8080
//! ```
//!
//! Under `harness exec` (a CI gate): the harness starts the scenario's fault server, runs the
//! service with `HARNESS_FAULT_URL` pointing at it, drives the phases at the scenario's `target`,
//! stops the service, and runs the checks on what the service sent to the fault server. The
//! service needs a fixed port for that:
//!
//! ```sh
//! cargo build -p harness --example orders_service
//! harness exec gate.yaml -- target/debug/examples/orders_service --mode naive --bind 127.0.0.1:8090
//! ```
//!
//! with a `gate.yaml` such as:
//!
//! ```yaml
//! # The payment API fails 20 % of first attempts; the service must retry them safely.
//! server:
//!   rules:
//!     - id: flaky-payments
//!       match: { method: POST, path: /orders, attempts: 1, probability: 0.2 }
//!       fault: { status: 503 }
//! target: http://127.0.0.1:8090
//! phases:
//!   - name: orders
//!     clients: { concurrency: 4, requests: 40 }
//!     request: { method: POST, path: /orders, headers: { Idempotency-Key: "{{key}}" }, json: { sku: "sku-{{seq}}" } }
//!     client: { max_attempts: 1 }
//! checks: { key_stability: {}, retry_on_4xx: {}, jitter: {}, duplicates: {} }
//! ```
//!
//! The naive mode fails `key_stability` (exit code 1); the resilient mode passes (exit code 0).
//! `scenarios/ci-gate-example.yaml` is the full gate: with an outage, declined cards and lost
//! responses, the naive mode also fails `duplicates`, `retry_on_4xx` and `jitter`.

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::net::TcpListener;

use harness::http::{AttemptError, Conn, Outgoing, Reply, Target};
use harness::operation::{execute, AttemptSpec, OpResult, Transport};
use history::ErrorKind;
use retry_policy::{Backoff, BackoffKind, BreakerSpec, Jitter, KeyMode, Limits, OpEnd, Policy};

/// Request headers passed on to the payment API, so its journal can tie attempts to callers.
const FORWARDED: [&str; 2] = ["x-request-id", "x-client-id"];

#[derive(Debug, Parser)]
#[command(about = "An orders API calling a payment dependency, naive or resilient")]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    bind: SocketAddr,
    /// Base URL of the payment API (else $PAYMENTS_URL, else $HARNESS_FAULT_URL).
    #[arg(long, value_name = "URL")]
    payments_url: Option<String>,
    /// Path of the payment call under the base URL.
    #[arg(long, default_value = "/orders", value_name = "PATH")]
    payments_path: String,
    /// How the payment API is called.
    #[arg(long, value_enum, default_value_t = Mode::Resilient)]
    mode: Mode,
    /// Seed of the jitter and of generated Idempotency-Keys.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// The two client configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Retries everything, new key per attempt, no jitter, no breaker.
    Naive,
    /// Transient-only retries with jitter, one key per order, total timeout, breaker.
    Resilient,
}

impl Mode {
    /// The payment call's policy: the whole difference between the two modes.
    fn policy(self) -> Policy {
        match self {
            Mode::Naive => Policy {
                max_attempts: 5,
                timeout: Duration::from_secs(2),
                total_timeout: None,
                backoff: Backoff {
                    kind: BackoffKind::Fixed,
                    base: Duration::from_millis(500),
                    cap: Duration::from_millis(500),
                    factor: 1.0,
                },
                jitter: Jitter::None,
                retry_statuses: (100..=599).filter(|s| !(200..300).contains(s)).collect(),
                retry_errors: ErrorKind::ALL.to_vec(),
                honor_retry_after: false,
                key: KeyMode::PerAttempt,
                budget: None,
                breaker: None,
                ..Policy::default()
            },
            Mode::Resilient => Policy {
                max_attempts: 4,
                timeout: Duration::from_secs(2),
                total_timeout: Some(Duration::from_secs(5)),
                backoff: Backoff {
                    kind: BackoffKind::Exponential,
                    base: Duration::from_millis(100),
                    cap: Duration::from_secs(2),
                    factor: 2.0,
                },
                jitter: Jitter::Full,
                // 409: the same key is still in flight at the payment API; it says when to retry.
                retry_statuses: vec![409, 429, 503],
                retry_errors: vec![
                    ErrorKind::Connect,
                    ErrorKind::Timeout,
                    ErrorKind::Reset,
                    ErrorKind::Closed,
                ],
                honor_retry_after: true,
                key: KeyMode::PerOperation,
                budget: None,
                breaker: Some(BreakerSpec {
                    failure_ratio: 0.5,
                    min_requests: 20,
                    window: Duration::from_secs(30),
                    open_for: Duration::from_secs(15),
                    half_open_probes: 1,
                }),
                fallback_status: 503,
                deadline_header: true,
                ..Policy::default()
            },
        }
    }
}

/// What every request shares.
struct App {
    mode: Mode,
    policy: Policy,
    /// The breaker (and budget, if any): one per dependency, across all requests.
    limits: Limits,
    target: Arc<Target>,
    /// The payment call's path under the base URL.
    path: String,
    /// Idle payment connections; one per concurrent request.
    pool: Mutex<Vec<PaymentConn>>,
    workers: AtomicU64,
    orders: AtomicU64,
    seed: u64,
}

/// A payment connection with the RNG that goes with it.
struct PaymentConn {
    conn: Conn,
    rng: StdRng,
}

impl App {
    fn checkout(&self) -> PaymentConn {
        let idle = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
        idle.unwrap_or_else(|| {
            let id = self.workers.fetch_add(1, Ordering::Relaxed);
            PaymentConn {
                conn: Conn::new(self.target.clone()),
                rng: StdRng::seed_from_u64(self.seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            }
        })
    }

    fn checkin(&self, w: PaymentConn) {
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).push(w);
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let url = match payments_url(args.payments_url.as_deref()) {
        Ok(u) => u,
        Err(msg) => {
            eprintln!("orders_service: {msg}");
            return ExitCode::from(2);
        }
    };
    let target = match Target::parse(&url) {
        Ok(t) => Arc::new(t),
        Err(e) => {
            eprintln!("orders_service: --payments-url: {e}");
            return ExitCode::from(2);
        }
    };
    if !args.payments_path.starts_with('/') {
        eprintln!("orders_service: --payments-path must be a path starting with '/'");
        return ExitCode::from(2);
    }
    let path = target.path(&args.payments_path);
    let listener = match TcpListener::bind(args.bind).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("orders_service: cannot listen on {}: {e}", args.bind);
            return ExitCode::from(3);
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("orders_service: {e}");
            return ExitCode::from(3);
        }
    };
    let policy = args.mode.policy();
    let app = Arc::new(App {
        mode: args.mode,
        limits: Limits::new(&policy, Instant::now()),
        policy,
        target,
        path,
        pool: Mutex::new(Vec::new()),
        workers: AtomicU64::new(0),
        orders: AtomicU64::new(0),
        seed: args.seed,
    });
    let mut out = std::io::stdout().lock();
    if writeln!(out, "listening on http://{addr}")
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::from(3);
    }
    drop(out);
    eprintln!(
        "orders_service: mode {:?}, payments at {url}{}",
        app.mode, args.payments_path
    );
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
        };
        match accepted {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                let app = app.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(app.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
            Err(e) => {
                eprintln!("orders_service: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// `--payments-url`, else `$PAYMENTS_URL`, else `$HARNESS_FAULT_URL`; `$NAME` reads a variable
/// (so `--payments-url '$HARNESS_FAULT_URL'` works even where no shell expands it).
fn payments_url(flag: Option<&str>) -> Result<String, String> {
    let given = match flag {
        Some(v) => v.to_string(),
        None => std::env::var("PAYMENTS_URL")
            .or_else(|_| std::env::var("HARNESS_FAULT_URL"))
            .map_err(|_| {
                "no payment API: give --payments-url URL (or set PAYMENTS_URL)".to_string()
            })?,
    };
    match given.strip_prefix('$') {
        Some(name) => std::env::var(name)
            .map_err(|_| format!("--payments-url {given}: the variable {name} is not set")),
        None => Ok(given),
    }
}

async fn handle(
    app: Arc<App>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(match (req.method(), req.uri().path()) {
        (&Method::POST, "/orders") => create_order(&app, req).await,
        (_, "/orders") => problem(StatusCode::METHOD_NOT_ALLOWED, "use POST /orders"),
        _ => problem(StatusCode::NOT_FOUND, "the only resource is POST /orders"),
    })
}

fn json(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(body.to_string())));
    *res.status_mut() = status;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

fn problem(status: StatusCode, detail: &str) -> Response<Full<Bytes>> {
    json(
        status,
        serde_json::json!({
            "title": status.canonical_reason().unwrap_or("Error"),
            "status": status.as_u16(),
            "detail": detail,
        }),
    )
}

async fn create_order(app: &App, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|c| c.to_bytes()) else {
        return problem(StatusCode::BAD_REQUEST, "incomplete request body");
    };
    if serde_json::from_slice::<serde_json::Value>(&body).is_err() {
        return problem(StatusCode::BAD_REQUEST, "the body must be a JSON document");
    }
    let caller_key = parts
        .headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for name in FORWARDED {
        if let Some(v) = parts.headers.get(name) {
            headers.insert(HeaderName::from_static(name), v.clone());
        }
    }

    let order = app.orders.fetch_add(1, Ordering::Relaxed) + 1;
    // A worker dropped with a cancelled request may have a call in flight: it is not pooled again.
    let mut w = app.checkout();
    // The key of the payment: made once per order and reused on every attempt (resilient), or
    // made afresh — the policy's `KeyMode::PerAttempt` then changes it on every retry (naive).
    let key = match (app.mode, caller_key) {
        (Mode::Resilient, Some(k)) => k,
        _ => format!("{:032x}", w.rng.random::<u128>()),
    };
    let mut call = PaymentCall {
        conn: &mut w.conn,
        request: Outgoing {
            method: Method::POST,
            uri: app.path.clone(),
            headers,
            body,
        },
        key: &key,
    };
    let result = execute(&mut call, &mut (), &app.policy, &app.limits, &mut w.rng).await;
    app.checkin(w);
    let res = answer(app, &result, &key);
    eprintln!(
        "POST /orders #{order} key={key} attempts={} end={:?} dependency={} -> {}",
        result.attempts,
        result.end,
        result
            .status
            .map_or_else(|| format!("{:?}", result.error), |s| s.to_string()),
        res.status().as_u16()
    );
    res
}

/// The payment call: the order's JSON, with the operation's Idempotency-Key — or, under
/// `KeyMode::PerAttempt`, a new one on every retry — and the deadline the policy propagates.
struct PaymentCall<'a> {
    conn: &'a mut Conn,
    request: Outgoing,
    key: &'a str,
}

impl Transport for PaymentCall<'_> {
    async fn send(&mut self, spec: AttemptSpec<'_>) -> Result<Reply, AttemptError> {
        let mut req = self.request.clone();
        let key = spec.fresh_key.unwrap_or(self.key);
        if let Ok(v) = HeaderValue::from_str(key) {
            req.headers
                .insert(HeaderName::from_static("idempotency-key"), v);
        }
        if let Some(ms) = spec.deadline_unix_ms {
            req.headers
                .insert(HeaderName::from_static("x-deadline"), HeaderValue::from(ms));
        }
        self.conn.send(req, spec.call.timeout).await
    }
}

/// The caller's answer, from how the payment call ended.
fn answer(app: &App, r: &OpResult, key: &str) -> Response<Full<Bytes>> {
    if r.end == OpEnd::Fallback {
        let mut res = problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "payments are failing; the circuit is open and the payment API was not called",
        );
        let secs = app
            .policy
            .breaker
            .map_or(1, |b| b.open_for.as_secs().max(1));
        res.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
        return res;
    }
    let Some(reply) = &r.reply else {
        let error = r.error.map_or("none", |e| e.as_str());
        return problem(
            StatusCode::BAD_GATEWAY,
            &format!(
                "the payment API gave no response ({error}) after {} attempt(s)",
                r.attempts
            ),
        );
    };
    let status = reply.status.as_u16();
    if reply.status.is_success() {
        let id = serde_json::from_slice::<serde_json::Value>(&reply.body)
            .ok()
            .and_then(|v| v.get("id").and_then(|id| id.as_str()).map(str::to_string));
        return match id {
            Some(id) => json(
                if status == 201 {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                },
                serde_json::json!({
                    "id": id,
                    "idempotency_key": key,
                    "attempts": r.attempts,
                }),
            ),
            None => problem(
                StatusCode::BAD_GATEWAY,
                "the payment API answered without a payment id",
            ),
        };
    }
    let detail = format!(
        "the payment API answered {status} after {} attempt(s)",
        r.attempts
    );
    if matches!(status, 429 | 503) {
        problem(StatusCode::SERVICE_UNAVAILABLE, &detail)
    } else {
        problem(StatusCode::BAD_GATEWAY, &detail)
    }
}
