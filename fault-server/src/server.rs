//! The HTTP server: accepts connections, journals every request, applies the schedule's faults at
//! the socket level, and serves the orders resource and the control API.
//!
//! Why not a plain axum server: a dropped response, a TCP reset or a half-written response cannot
//! be expressed as a `Response`. Each connection is served by hyper over a shared handle to the
//! socket; when a request's fault needs the socket itself, the handler parks its request and hands
//! the socket action to the connection task, which stops hyper and acts on the raw stream.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

use crate::config::{Config, DelaySpec, FaultConfig, MalformedKind, RuleConfig, StatusFault};
use crate::control;
use crate::draw;
use crate::journal::{self, Clock, Journal, Pending, Sequencer};
use crate::orders::{Orders, Reply, StoreError};
use crate::schedule::{RequestFacts, Schedule};
use history::{Entry, Outcome};

/// Headers always copied into the journal.
pub const DEFAULT_CAPTURED_HEADERS: &[&str] = &[
    "idempotency-key",
    "x-client-id",
    "x-request-id",
    "x-deadline",
    "user-agent",
    "amz-sdk-request",
    "amz-sdk-invocation-id",
    "x-attempt",
    "x-retry-attempt",
    "traceparent",
];

/// Default cap on a `hang`.
pub const DEFAULT_HANG_CAP: Duration = Duration::from_secs(30);

/// Where and how to run.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Address to listen on; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Overrides the config's seed.
    pub seed: Option<u64>,
    /// Stream the journal to this file (JSON lines).
    pub journal_file: Option<PathBuf>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            seed: None,
            journal_file: None,
        }
    }
}

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address is in use or not available.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The orders database could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The journal file could not be opened.
    #[error(transparent)]
    Journal(#[from] journal::JournalFileError),
}

/// Shared by every connection.
pub(crate) struct State {
    pub(crate) clock: Arc<Clock>,
    pub(crate) seq: Sequencer,
    conn_ids: AtomicU64,
    schedule: RwLock<(Arc<Schedule>, Arc<Vec<RuleConfig>>)>,
    /// Bumped after every schedule replacement; connections cache the schedule until it moves.
    schedule_gen: AtomicU64,
    attempts: Mutex<HashMap<String, u32>>,
    pub(crate) journal: Journal,
    pub(crate) orders: Orders,
    seed: u64,
    hang_cap: Duration,
    capture: Vec<HeaderName>,
    empty_body_sha256: String,
}

impl State {
    pub(crate) fn schedule(&self) -> Arc<Schedule> {
        self.schedule
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// Installs new rules; their windows and hit counters start now.
    pub(crate) fn replace_schedule(&self, rules: Vec<RuleConfig>) {
        let s = Arc::new(Schedule::new(&rules, self.seed, Instant::now()));
        *self.schedule.write().unwrap_or_else(|p| p.into_inner()) = (s, Arc::new(rules));
        self.schedule_gen.fetch_add(1, Ordering::Release);
    }

    /// Clears the journal, counters and the store; reinstalls the schedule.
    pub(crate) async fn reset(self: &Arc<Self>) -> Result<(), StoreError> {
        let epoch = self.seq.reset();
        let me = self.clone();
        let _ = tokio::task::spawn_blocking(move || me.journal.reset(epoch)).await;
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        let rules = self
            .schedule
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone();
        self.replace_schedule(rules.as_ref().clone());
        self.orders.clear().await
    }

    fn bump_attempt(&self, key: &str) -> u32 {
        let mut m = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(key) {
            *n += 1;
            *n
        } else {
            m.insert(key.to_string(), 1);
            1
        }
    }

    /// Requests received in the current epoch.
    pub(crate) fn received(&self) -> u64 {
        self.seq.current().1
    }
}

/// A running fault server.
pub struct FaultServer {
    state: Arc<State>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultServer {
    /// Binds, opens the store and the journal, and starts serving.
    pub async fn start(config: Config, opts: ServerOptions) -> Result<FaultServer, StartError> {
        let listener = TcpListener::bind(opts.bind)
            .await
            .map_err(|source| StartError::Bind {
                addr: opts.bind,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: opts.bind,
            source,
        })?;
        let orders = Orders::open(&config.orders)?;
        let journal = Journal::start(opts.journal_file.as_deref())?;
        let seed = opts.seed.or(config.seed).unwrap_or(0);
        let mut capture: Vec<HeaderName> = DEFAULT_CAPTURED_HEADERS
            .iter()
            .map(|h| HeaderName::from_static(h))
            .collect();
        for h in &config.capture_headers {
            if let Ok(name) = HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()) {
                if !capture.contains(&name) {
                    capture.push(name);
                }
            }
        }
        let schedule = Arc::new(Schedule::new(&config.rules, seed, Instant::now()));
        let state = Arc::new(State {
            clock: Arc::new(Clock::new()),
            seq: Sequencer::default(),
            conn_ids: AtomicU64::new(0),
            schedule: RwLock::new((schedule, Arc::new(config.rules.clone()))),
            schedule_gen: AtomicU64::new(0),
            attempts: Mutex::new(HashMap::new()),
            journal,
            orders,
            seed,
            hang_cap: config.hang_cap.map_or(DEFAULT_HANG_CAP, |d| d.0),
            capture,
            empty_body_sha256: hex::encode(Sha256::digest(b"")),
        });
        let (shutdown, rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, state.clone(), rx));
        Ok(FaultServer {
            state,
            addr,
            shutdown,
            task,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The journal's clock: µs since the server started, as `t_recv_us` counts them.
    pub fn now_us(&self) -> u64 {
        self.state.clock.now_us()
    }

    /// The journal.
    pub fn journal(&self) -> &Journal {
        &self.state.journal
    }

    /// The orders store (for verification).
    pub fn orders(&self) -> &Orders {
        &self.state.orders
    }

    /// The seed in force.
    pub fn seed(&self) -> u64 {
        self.state.seed
    }

    /// Replaces the schedule (already validated rules).
    pub fn replace_schedule(&self, rules: Vec<RuleConfig>) {
        self.state.replace_schedule(rules);
    }

    /// Clears the journal, counters and store.
    pub async fn reset(&self) -> Result<(), StoreError> {
        self.state.reset().await
    }

    /// Waits until every request received so far is in the journal, or `timeout` passes.
    /// Returns whether it settled.
    pub async fn settle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.state.journal.written() >= self.state.received() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Stops accepting, closes every connection and flushes the journal.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        let state = self.state.clone();
        let _ = tokio::task::spawn_blocking(move || state.journal.flush()).await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        match accepted {
            Ok((stream, _peer)) => {
                let _ = stream.set_nodelay(true);
                let conn_id = state.conn_ids.fetch_add(1, Ordering::Relaxed) + 1;
                tokio::spawn(serve_connection(
                    state.clone(),
                    stream,
                    conn_id,
                    shutdown.clone(),
                ));
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// What a handler asks the connection task to do with the socket.
enum SocketAction {
    /// Close with no response (FIN).
    Drop,
    /// Abort with RST.
    Reset,
    /// Hold the connection, send nothing.
    Hang(Duration),
    /// Write these bytes, then close.
    Malformed(&'static [u8]),
    /// The client already left; just close.
    Abandon,
}

/// Per-connection hand-over point between the request handler and the connection task.
#[derive(Default)]
struct ConnCtl {
    action: Mutex<Option<(SocketAction, Pending)>>,
    notify: Notify,
}

/// What the requests of one connection share. A request clones this one handle — owned by its
/// connection, so its counter stays on one core — instead of the server-wide `State`, the journal
/// channel and the clock, whose counters both cores would fight over on every request.
struct Conn {
    // Declared (so dropped) before `state`: the journal's writer ends only when every emitter is
    // gone, and dropping the last `State` waits for the writer.
    emitter: Arc<journal::Emitter>,
    state: Arc<State>,
    ctl: ConnCtl,
    stream: Arc<TcpStream>,
    id: u64,
    /// The schedule as of generation `.0`; refreshed when `State::schedule_gen` moves.
    schedule: Mutex<(u64, Arc<Schedule>)>,
}

impl Conn {
    /// Runs `f` on the schedule in force, without touching any counter other connections share.
    fn with_schedule<R>(&self, f: impl FnOnce(&Schedule) -> R) -> R {
        let gen = self.state.schedule_gen.load(Ordering::Acquire);
        let mut cached = self.schedule.lock().unwrap_or_else(|p| p.into_inner());
        if cached.0 != gen {
            *cached = (gen, self.state.schedule());
        }
        f(&cached.1)
    }
}

impl ConnCtl {
    /// Hands the socket to the connection task and never returns.
    async fn hand_over(&self, action: SocketAction, pending: Pending) -> ! {
        *self.action.lock().unwrap_or_else(|p| p.into_inner()) = Some((action, pending));
        self.notify.notify_one();
        std::future::pending().await
    }
}

async fn serve_connection(
    state: Arc<State>,
    stream: TcpStream,
    conn_id: u64,
    mut shutdown: watch::Receiver<bool>,
) {
    let stream = Arc::new(stream);
    let gen = state.schedule_gen.load(Ordering::Acquire);
    let conn = Arc::new(Conn {
        emitter: state.journal.emitter(state.clock.clone()),
        schedule: Mutex::new((gen, state.schedule())),
        state: state.clone(),
        ctl: ConnCtl::default(),
        stream: stream.clone(),
        id: conn_id,
    });
    let svc = {
        let conn = conn.clone();
        hyper::service::service_fn(move |req| handle(conn.clone(), req))
    };
    let ctl = &conn.ctl;
    // No header-read timer: it would arm a timer per request, and a test server on loopback does
    // not need slowloris protection.
    let http = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(SharedStream(stream.clone()), svc);
    let handed_over = tokio::select! {
        biased;
        _ = http => false,
        _ = ctl.notify.notified() => true,
        _ = shutdown.changed() => false,
    };
    // `http` is dropped here: hyper lets go of the socket; only our handles remain.
    if !handed_over {
        return;
    }
    let Some((action, mut pending)) = ctl.action.lock().unwrap_or_else(|p| p.into_inner()).take()
    else {
        return;
    };
    let outcome = match action {
        SocketAction::Drop => Outcome::Dropped,
        SocketAction::Abandon => Outcome::ClientClosed,
        SocketAction::Reset => {
            if let Err(e) = stream.set_zero_linger() {
                tracing::warn!("cannot arm TCP reset: {e}");
            }
            Outcome::Reset
        }
        SocketAction::Malformed(bytes) => {
            if write_all(&stream, bytes).await.is_err() {
                Outcome::ClientClosed
            } else {
                Outcome::Responded
            }
        }
        SocketAction::Hang(cap) => {
            tokio::select! {
                _ = tokio::time::sleep(cap) => Outcome::Hung,
                _ = peer_closed(&stream) => Outcome::ClientClosed,
                _ = shutdown.changed() => Outcome::Hung,
            }
        }
    };
    drop(stream);
    pending.entry();
    pending.finish(outcome);
}

async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Resolves when the peer closes its side (or the socket fails). Pipelined bytes from the peer
/// make closing undetectable without consuming them, so then it never resolves.
async fn peer_closed(stream: &TcpStream) {
    let mut b = [0u8; 1];
    match stream.peek(&mut b).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending::<()>().await,
    }
}

type ResBody = Either<JournaledBody, axum::body::Body>;

async fn handle(conn: Arc<Conn>, req: Request<Incoming>) -> Result<Response<ResBody>, Infallible> {
    if req.uri().path().starts_with(control::PREFIX) {
        let res = control::handle(conn.state.clone(), req).await;
        return Ok(res.map(Either::Right));
    }
    let (state, ctl, stream) = (&conn.state, &conn.ctl, &conn.stream);

    let (epoch, seq) = state.seq.next();
    let now = Instant::now();
    let t_recv_us = state.clock.us_at(now);
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let (parts, body) = req.into_parts();
    let key = header_str(&parts.headers, "idempotency-key").map(str::to_string);
    let key_attempt = key.as_deref().map(|k| state.bump_attempt(k));
    let mut entry = Entry::blank(seq);
    entry.t_recv_us = t_recv_us;
    entry.unix_ms = unix_ms;
    entry.method = parts.method.as_str().to_string();
    entry.path = parts.uri.path().to_string();
    entry.query = parts.uri.query().map(str::to_string);
    for name in &state.capture {
        if let Some(v) = parts.headers.get(name) {
            entry.headers.insert(
                name.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            );
        }
    }
    entry.idempotency_key = key.clone();
    entry.client_id = header_str(&parts.headers, "x-client-id").map(str::to_string);
    entry.conn_id = conn.id;
    entry.key_attempt = key_attempt;
    let mut pending = Pending::with_emitter(conn.emitter.clone(), epoch, entry);

    // A body that cannot be read means the client went away: `pending` records client_closed.
    let Ok(collected) = body.collect().await else {
        return Ok(plain(StatusCode::BAD_REQUEST, "incomplete request body\n"));
    };
    let body = collected.to_bytes();
    let body_sha256 = if body.is_empty() {
        state.empty_body_sha256.clone()
    } else {
        hex::encode(Sha256::digest(&body))
    };
    {
        let e = pending.entry();
        e.body_len = body.len() as u64;
        e.body_sha256 = Some(body_sha256.clone());
    }

    let facts = RequestFacts {
        method: &parts.method,
        path: parts.uri.path(),
        headers: &parts.headers,
        seq,
        idempotency_key: key.as_deref(),
        key_attempt,
        now,
    };
    let decision = conn.with_schedule(|schedule| {
        schedule
            .decide(&facts)
            .map(|d| (d.rule.to_string(), d.fault.clone(), d.draw))
    });
    let Some((rule, fault, draw)) = decision else {
        if !is_resource_path(parts.uri.path()) {
            return Ok(respond(ok_reply(), pending));
        }
        let request = ResourceRequest {
            method: parts.method,
            path: parts.uri.path().to_string(),
            query: parts.uri.query().map(str::to_string),
            key,
            body,
            body_sha256,
        };
        let reply = serve_resource(state, request).await;
        return Ok(respond(reply, pending));
    };
    let subject = key.clone().unwrap_or_else(|| seq.to_string());
    let request = ResourceRequest {
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        key: key.clone(),
        body,
        body_sha256,
    };
    {
        let e = pending.entry();
        e.rule = Some(rule.clone());
        e.fault = Some(fault.kind().to_string());
        e.draw = draw;
    }
    let attempt = u64::from(key_attempt.unwrap_or(0));

    match fault {
        FaultConfig::Status(s) => Ok(status_response(&s, pending)),
        FaultConfig::Delay(spec) => {
            let d = sample_delay(spec, state.seed, &rule, &subject, attempt);
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = peer_closed(stream) => ctl.hand_over(SocketAction::Abandon, pending).await,
            }
            let reply = serve_resource(state, request).await;
            Ok(respond(reply, pending))
        }
        FaultConfig::Drop => {
            let reply = serve_resource(state, request).await;
            record_reply(&mut pending, &reply);
            ctl.hand_over(SocketAction::Drop, pending).await
        }
        FaultConfig::Reset(r) => {
            if r.process {
                let reply = serve_resource(state, request).await;
                record_reply(&mut pending, &reply);
            }
            ctl.hand_over(SocketAction::Reset, pending).await
        }
        FaultConfig::Hang(h) => {
            if h.process {
                let reply = serve_resource(state, request).await;
                record_reply(&mut pending, &reply);
            }
            let cap = h.cap.map_or(state.hang_cap, |d| d.0);
            ctl.hand_over(SocketAction::Hang(cap), pending).await
        }
        FaultConfig::Malformed(m) => {
            if m.process {
                let reply = serve_resource(state, request).await;
                record_reply(&mut pending, &reply);
            }
            let (bytes, status) = MalformedKind::bytes(m.kind);
            pending.entry().status = status;
            ctl.hand_over(SocketAction::Malformed(bytes), pending).await
        }
    }
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn sample_delay(spec: DelaySpec, seed: u64, rule: &str, subject: &str, attempt: u64) -> Duration {
    match spec {
        DelaySpec::Fixed(d) => d,
        DelaySpec::Uniform(a, b) => {
            let u = draw::uniform(seed, rule, subject, attempt, 7);
            a + (b - a).mul_f64(u)
        }
        DelaySpec::Lognormal { median, sigma } => {
            let z = draw::normal(seed, rule, subject, attempt);
            // Cap the tail so one draw cannot stall a run for hours.
            median.mul_f64((sigma * z).exp().min(1000.0))
        }
    }
}

/// The parts of a request the resource needs.
struct ResourceRequest {
    method: Method,
    path: String,
    query: Option<String>,
    key: Option<String>,
    body: Bytes,
    body_sha256: String,
}

/// The built-in resource, or `200 ok` for any other path. Runs in its own task so a request is
/// processed to the end even when its client leaves (a claimed key must not stay in flight).
async fn serve_resource(state: &Arc<State>, req: ResourceRequest) -> Reply {
    if !is_resource_path(&req.path) {
        return ok_reply();
    }
    // Let the other connections whose requests are already readable take their arrival stamps
    // first: the database work below wakes blocking threads, which preempt the runtime's workers
    // on a small machine, and a burst's later members would otherwise be stamped only after the
    // earlier members' queries ran — a release skew that the client never caused.
    tokio::task::yield_now().await;
    let orders = state.orders.clone();
    let task = tokio::spawn(async move { route(orders, req).await });
    task.await.unwrap_or_else(|e| {
        Reply::problem(500, "internal", "Request handling failed", e.to_string())
    })
}

async fn route(orders: Orders, req: ResourceRequest) -> Reply {
    let path = req.path.trim_end_matches('/');
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    match (segments.as_slice(), &req.method) {
        (["orders"], &Method::POST) => orders.create(req.key, req.body, req.body_sha256).await,
        (["orders"], &Method::GET) => {
            let key = req.query.as_deref().and_then(|q| {
                q.split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .find(|(k, _)| *k == "idempotency_key")
                    .map(|(_, v)| v.to_string())
            });
            match key {
                Some(k) => orders.list_by_key(k).await,
                None => Reply::problem(
                    400,
                    "missing-parameter",
                    "Query parameter required",
                    "GET /orders needs ?idempotency_key=KEY".into(),
                ),
            }
        }
        (["orders"], _) => method_not_allowed("GET, POST"),
        (["orders", id], &Method::GET) => orders.get(id.to_string()).await,
        (["orders", _], _) => method_not_allowed("GET"),
        (["orders", id, "pay"], &Method::POST) => orders.pay(id.to_string()).await,
        (["orders", _, "pay"], _) => method_not_allowed("POST"),
        _ => ok_reply(),
    }
}

fn is_resource_path(path: &str) -> bool {
    path == "/orders" || path.starts_with("/orders/")
}

/// The answer to any path that is not the built-in resource.
fn ok_reply() -> Reply {
    Reply {
        status: 200,
        content_type: "text/plain; charset=utf-8",
        headers: Vec::new(),
        body: Bytes::from_static(b"ok\n"),
        created: None,
        replayed: false,
        transition: None,
        resource: None,
    }
}

fn method_not_allowed(allow: &str) -> Reply {
    let mut r = Reply::problem(
        405,
        "method-not-allowed",
        "Method not allowed",
        format!("allowed: {allow}"),
    );
    r.headers.push(("allow", allow.to_string()));
    r
}

fn record_reply(pending: &mut Pending, reply: &Reply) {
    let e = pending.entry();
    e.status = Some(reply.status);
    e.created = reply.created.clone();
    e.replayed = reply.replayed;
    e.transition = reply.transition.clone();
    e.resource = reply.resource.clone();
}

fn respond(reply: Reply, mut pending: Pending) -> Response<ResBody> {
    record_reply(&mut pending, &reply);
    let mut res = Response::new(Either::Left(JournaledBody::new(reply.body, pending)));
    *res.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = res.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(reply.content_type),
    );
    for (name, value) in reply.headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
    res
}

fn status_response(s: &StatusFault, mut pending: Pending) -> Response<ResBody> {
    let code = StatusCode::from_u16(s.code.0).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    pending.entry().status = Some(code.as_u16());
    let (body, content_type) = match &s.body {
        Some(b) => (Bytes::from(b.clone()), "text/plain; charset=utf-8"),
        None => (
            Bytes::from(
                serde_json::json!({
                    "type": "urn:fault-server:problem:injected-fault",
                    "title": code.canonical_reason().unwrap_or("Injected fault"),
                    "status": code.as_u16(),
                    "detail": "this response was injected by the fault schedule",
                })
                .to_string(),
            ),
            "application/problem+json",
        ),
    };
    let mut res = Response::new(Either::Left(JournaledBody::new(body, pending)));
    *res.status_mut() = code;
    let h = res.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    if let Some(secs) = s.retry_after {
        h.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if let Some(after) = s.retry_after_date {
        let when = httpdate::fmt_http_date(SystemTime::now() + after.0);
        if let Ok(v) = HeaderValue::from_str(&when) {
            h.insert(http::header::RETRY_AFTER, v);
        }
    }
    // Validated at load time; a header that still fails to convert is skipped.
    for (name, value) in &s.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            h.insert(n, v);
        }
    }
    res
}

/// A text response outside the journal's accounting (the request's entry is settled elsewhere).
fn plain(code: StatusCode, text: &'static str) -> Response<ResBody> {
    let body = JournaledBody {
        data: Some(Bytes::from_static(text.as_bytes())),
        pending: None,
    };
    let mut res = Response::new(Either::Left(body));
    *res.status_mut() = code;
    res
}

/// A response body that completes its request's journal entry when hyper is done with it: when
/// fully handed over, `responded`; when dropped unsent (the connection failed), `client_closed`.
pub(crate) struct JournaledBody {
    data: Option<Bytes>,
    pending: Option<Pending>,
}

impl JournaledBody {
    fn new(data: Bytes, pending: Pending) -> Self {
        JournaledBody {
            data: (!data.is_empty()).then_some(data),
            pending: Some(pending),
        }
    }
}

impl Body for JournaledBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.data.take() {
            Some(d) => Poll::Ready(Some(Ok(Frame::data(d)))),
            None => {
                if let Some(p) = self.pending.take() {
                    p.finish(Outcome::Responded);
                }
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

impl Drop for JournaledBody {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            if self.data.is_none() {
                p.finish(Outcome::Responded);
            }
            // Otherwise `p` drops here and records client_closed.
        }
    }
}

/// The socket, shared between hyper and the connection task. Reads and writes go through
/// readiness + `try_*` on `&TcpStream`, which tokio supports from several handles.
struct SharedStream(Arc<TcpStream>);

impl hyper::rt::Read for SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            // SAFETY: `try_read` only writes into the slice and reports how many bytes it wrote;
            // those (and only those) are marked filled by `advance`. This is the cast tokio's own
            // `TcpStream::poll_read` makes; it spares zeroing hyper's read buffer on every read.
            let n = unsafe {
                let dst = buf.as_mut();
                let dst = &mut *(dst as *mut [std::mem::MaybeUninit<u8>] as *mut [u8]);
                self.0.try_read(dst)
            };
            match n {
                Ok(n) => {
                    // SAFETY: `n` bytes were just written by `try_read`.
                    unsafe { buf.advance(n) };
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl hyper::rt::Write for SharedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write_vectored(bufs) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The socket closes when the last handle drops; the connection task decides when.
        Poll::Ready(Ok(()))
    }
}
