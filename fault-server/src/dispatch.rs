//! One request, from its head to its journal entry: the entry is started with what the request
//! says, the schedule decides its fault, and the fault is carried out — answered here, or handed
//! to the connection task when it needs the socket itself.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::Either;

use crate::body::{self, BodyRefused, ReadBody, ReqBody};
use crate::config::{DelaySpec, DelayWhen, FaultConfig, MalformedKind};
use crate::control;
use crate::draw;
use crate::grpc::{CallHead, Decoded, GrpcReply};
use crate::journal::Pending;
use crate::orders::routes::{is_resource_path, ok_reply, serve_resource, ResourceRequest};
use crate::orders::{ResourceReply, StoreError};
use crate::reply::{
    grpc_after_headers, grpc_respond, grpc_trailers_only, plain, record_grpc_reply, record_reply,
    record_upstream, reject, relay, respond, status_response, upstream_failed, ResBody,
};
use crate::schedule::{GrpcFacts, RequestFacts};
use crate::socket::{peer_closed, ServedConn, SocketAction};
use crate::state::State;
use crate::upstream::{elapsed_us, UpstreamFailure, UpstreamReply};
use history::{Entry, HttpVersion, Outcome};

/// An HTTP/2 stream ended with RST_STREAM and this error code: what a handler returns for
/// `reset` (and `malformed`, which has no half-written form in HTTP/2) and for a `hang` whose
/// cap (or, for a gRPC call, whose deadline) passed.
#[derive(Debug)]
pub(crate) struct StreamReset(pub(crate) h2::Reason);

impl StreamReset {
    /// INTERNAL_ERROR: the stream could not be answered.
    const INTERNAL: StreamReset = StreamReset(h2::Reason::INTERNAL_ERROR);
}

impl std::fmt::Display for StreamReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream reset ({}) by the fault schedule", self.0)
    }
}

impl std::error::Error for StreamReset {}

/// Handles one request of `conn`.
///
/// The request's parts are held in one place while it is handled: moved into its [`Work`] as
/// soon as the request is split, and lent to [`process`]. A request's future is memory written
/// for the first time (each stream's task is allocated for it), and every move of the parts
/// into a binding of their own, or of the work into an `async fn`'s argument and from there into
/// its local (an `async fn` keeps both), wrote the same bytes into more of it. For the same
/// reason the body is an `async` block, not an `async fn`: the request stays where it was put.
#[allow(clippy::manual_async_fn)] // on purpose: an `async fn` keeps its arguments twice
pub(crate) fn handle(
    conn: Arc<ServedConn>,
    req: Request<ReqBody>,
) -> impl std::future::Future<Output = Result<Response<ResBody>, StreamReset>> + Send {
    async move {
        if req.uri().path().starts_with(control::PREFIX) {
            if let Some(refused) = control::refuse(&conn.state, conn.io.is_tls(), &req) {
                return Ok(refused.map(Either::Right));
            }
            // Boxed, as every path a plain request does not take: see `faulted`.
            let res = built_in_box(|| control::handle(&conn.routes.control, req)).await;
            return Ok(res.map(Either::Right));
        }
        let state = &conn.state;

        let (epoch, seq) = state.seq.next();
        let now = Instant::now();
        let t_recv_us = state.clock.us_at(now);
        let (parts, body) = req.into_parts();
        let mut work = Work {
            parts,
            key: None,
            body: Bytes::new(),
            body_sha256: String::new(),
            grpc: None,
            _reserved: None,
        };
        let read = ReadHeaders::of(&work.parts.headers, &state.capture);
        if conn.http2 && crate::grpc::is_grpc(&work.parts.headers) {
            let head = CallHead::read(work.parts.uri.path(), &work.parts.headers);
            work.grpc = Some(GrpcWork {
                head,
                decoded: None,
            });
        }
        work.key = read.key.map(str::to_string);
        // With shared counters the attempt is counted in the database, below.
        let mut key_attempt = match state.shared {
            None => work.key.as_deref().map(|k| state.bump_attempt(k)),
            Some(_) => None,
        };
        // Filled in on the heap, where it stays until the writer has it: built on the stack, its
        // 712 bytes were written twice, once into this future's state and once into the box.
        let mut entry = Box::write(Box::new_uninit(), Entry::blank(seq));
        entry.t_recv_us = t_recv_us;
        state.stamp(&mut entry);
        entry.method = work.parts.method.as_str().to_string();
        entry.path = work.parts.uri.path().to_string();
        entry.query = work.parts.uri.query().map(str::to_string);
        entry.headers = read.captured;
        entry.idempotency_key = work.key.clone();
        entry.client_id = read.client_id.map(str::to_string);
        entry.conn_id = conn.id;
        entry.http_version = Some(journal_version(work.parts.version));
        entry.tls = conn.io.is_tls();
        entry.key_attempt = key_attempt;
        if let Some(g) = &work.grpc {
            entry.grpc_method = Some(g.head.method.clone());
            entry.grpc_previous_attempts = g.head.previous_attempts;
            entry.grpc_timeout_ms = g.head.timeout_ms();
        }
        let mut pending = Pending::with_emitter(conn.emitter.clone(), epoch, entry);

        if conn.over_limit {
            return Ok(reject(
                StatusCode::SERVICE_UNAVAILABLE,
                "connection-limit",
                "the server is at its connection limit; try again\n",
                pending,
            ));
        }
        let announced = read
            .content_length
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let limits = &state.limits;
        let read = body::read(
            body,
            announced,
            limits.max_body,
            limits.body_timeout,
            &state.body_budget,
        )
        .await;
        match read {
            Ok(ReadBody {
                bytes,
                _reserved: reserved,
            }) => {
                work.body = bytes;
                work._reserved = reserved;
            }
            Err(refused) => {
                if !conn.http2 && refused != BodyRefused::ClientGone {
                    // The rest of the body may still be on its way: read it before closing, so
                    // the client reads the answer rather than a reset.
                    conn.drain_after.store(true, Ordering::Relaxed);
                }
                return refuse_body(refused, pending);
            }
        }
        // Stamped first thing: a burst's release skew is measured on it.
        let body_done_us = state.clock.now_us();
        let wire_us = conn
            .wire
            .unix_ns()
            .map(|ns| state.clock.us_at_unix_ns(ns).min(body_done_us));
        conn.quiet_mark
            .store(conn.bytes_read.load(Ordering::Relaxed), Ordering::Relaxed);
        work.body_sha256 = if work.body.is_empty() {
            state.empty_body_sha256.clone()
        } else {
            crate::journal::sha256_hex(&work.body)
        };
        {
            let e = pending.entry();
            e.body_len = work.body.len() as u64;
            e.body_sha256 = Some(work.body_sha256.clone());
            if !work.body.is_empty() {
                e.t_body_us = Some(body_done_us);
            }
            e.t_wire_us = wire_us;
        }
        // A call the server answers itself is decoded now: a create's key may be its
        // `request_id`.
        if let (Some(g), None) = (&mut work.grpc, &state.upstream) {
            g.decoded = Some(state.grpc.decode(&g.head, &work.body));
        }
        if work.key.is_none() {
            let id = match work.grpc.as_ref().and_then(|g| g.decoded.as_ref()) {
                Some(Ok(d)) => d.request_id(),
                _ => None,
            };
            if let Some(id) = id {
                if state.shared.is_none() {
                    key_attempt = Some(state.bump_attempt(&id));
                }
                let e = pending.entry();
                e.idempotency_key = Some(id.clone());
                e.key_attempt = key_attempt;
                work.key = Some(id);
            }
        }

        // With `state: shared`, the request's number and its key's attempt among every
        // replica's.
        let (number, key_attempt) = match &state.shared {
            None => (seq, key_attempt),
            Some(shared) => match Box::pin(shared.bump_request(work.key.as_deref())).await {
                Ok((n, attempt)) => {
                    pending.entry().key_attempt = attempt;
                    (n, attempt)
                }
                Err(e) => {
                    return Ok(respond(
                        shared_state_unavailable(&e),
                        pending,
                        &state.response_capture,
                    ))
                }
            },
        };
        let facts = RequestFacts {
            method: &work.parts.method,
            path: work.parts.uri.path(),
            headers: &work.parts.headers,
            seq: number,
            idempotency_key: work.key.as_deref(),
            key_attempt,
            now,
            grpc: work.grpc.as_ref().map(|g| GrpcFacts {
                method: &g.head.method,
                attempt: g.head.attempt(),
            }),
        };
        let decision = match &state.shared {
            None => conn.with_schedule(|schedule| {
                schedule
                    .decide(&facts)
                    .map(|d| (d.rule.to_string(), d.prepared.clone(), d.draw))
            }),
            Some(shared) => {
                let schedule = state.schedule();
                let bump = |rule: &str| {
                    let rule = rule.to_string();
                    async move { shared.bump_hit(&rule).await }
                };
                match Box::pin(schedule.decide_counted(&facts, bump)).await {
                    Ok(d) => d.map(|d| (d.rule.to_string(), d.prepared.clone(), d.draw)),
                    Err(e) => {
                        return Ok(respond(
                            shared_state_unavailable(&e),
                            pending,
                            &state.response_capture,
                        ))
                    }
                }
            }
        };
        let deadline = work
            .grpc
            .as_ref()
            .and_then(|g| g.head.timeout)
            .map(|t| now + t);
        let is_grpc = work.grpc.is_some();
        let Some((rule, prepared, draw)) = decision else {
            let (pending, done) = process(&conn, &mut work, pending, Route::Default)
                .await
                .ok_or(StreamReset::INTERNAL)?;
            return Ok(answer(state, done, pending, is_grpc));
        };
        let subject = work.key.clone().unwrap_or_else(|| seq.to_string());
        {
            let e = pending.entry();
            e.rule = Some(rule.clone());
            e.fault = Some(prepared.fault.kind().to_string());
            e.draw = draw;
        }
        let attempt = u64::from(key_attempt.unwrap_or(0));
        // Boxed: the faults' futures (delays, hand-overs, forwards) are large, and a request no
        // rule matched should not carry their room through every move of its own future.
        built_in_box(|| {
            faulted(
                &conn,
                Faulted {
                    work,
                    pending,
                    prepared,
                    rule,
                    subject,
                    attempt,
                    now,
                    deadline,
                    is_grpc,
                },
            )
        })
        .await
    }
}

/// `make()`'s future on the heap, built there. `Box::pin(make())` builds it on the stack and
/// copies the whole of it, its room for every state included, into memory it writes for the
/// first time: for a stream's future, about a hundred cache lines per request.
#[inline(always)]
pub(crate) fn built_in_box<F>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// A request a rule matched, with what its fault needs.
struct Faulted {
    work: Work,
    pending: Pending,
    prepared: Arc<crate::schedule::PreparedFault>,
    rule: String,
    /// What the fault's draws are made for: the key, else the request's number.
    subject: String,
    attempt: u64,
    now: Instant,
    /// The gRPC call's deadline, when it has one.
    deadline: Option<Instant>,
    is_grpc: bool,
}

/// Applies a matched rule's fault to its request.
async fn faulted(conn: &ServedConn, f: Faulted) -> Result<Response<ResBody>, StreamReset> {
    let (state, ctl, stream) = (&conn.state, &conn.ctl, &conn.stream);
    let Faulted {
        mut work,
        pending,
        prepared,
        rule,
        subject,
        attempt,
        now,
        deadline,
        is_grpc,
    } = f;
    match &prepared.fault {
        FaultConfig::Status(s) => Ok(status_response(
            s,
            prepared.status_body.clone(),
            pending,
            &state.response_capture,
        )),
        FaultConfig::Forward => {
            let (pending, done) = process(conn, &mut work, pending, Route::Upstream)
                .await
                .ok_or(StreamReset::INTERNAL)?;
            Ok(answer(state, done, pending, is_grpc))
        }
        FaultConfig::Delay(d) => {
            let wait = sample_delay(d.spec, state.seed, &rule, &subject, attempt);
            if d.when == DelayWhen::Before {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = peer_closed(stream) => ctl.hand_over(SocketAction::Abandon, pending).await,
                }
            }
            let (pending, done) = process(conn, &mut work, pending, Route::Default)
                .await
                .ok_or(StreamReset::INTERNAL)?;
            if d.when == DelayWhen::After {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    // Processed, and the client left before hearing so.
                    _ = peer_closed(stream) => ctl.hand_over(SocketAction::Abandon, pending).await,
                }
            }
            Ok(answer(state, done, pending, is_grpc))
        }
        FaultConfig::Drop => {
            let (pending, _) = process(conn, &mut work, pending, Route::Default)
                .await
                .ok_or(StreamReset::INTERNAL)?;
            ctl.hand_over(SocketAction::Drop, pending).await
        }
        FaultConfig::Grpc(g) => Ok(grpc_trailers_only(
            g.code,
            g.message.as_deref().unwrap_or(INJECTED),
            g.pushback_ms,
            pending,
            &state.response_capture,
            Outcome::Responded,
        )),
        FaultConfig::GrpcAfterHeaders(g) => {
            let (pending, framed) = if g.process {
                let (pending, done) = process(conn, &mut work, pending, Route::Default)
                    .await
                    .ok_or(StreamReset::INTERNAL)?;
                (pending, framed_answer(&done))
            } else {
                (pending, empty_message())
            };
            Ok(grpc_after_headers(
                g.code,
                g.message.as_deref().unwrap_or(INJECTED),
                g.pushback_ms,
                framed,
                pending,
                &state.response_capture,
            ))
        }
        FaultConfig::Reset(r) => {
            let pending = if r.process {
                process(conn, &mut work, pending, Route::Default)
                    .await
                    .ok_or(StreamReset::INTERNAL)?
                    .0
            } else {
                pending
            };
            if conn.http2 {
                // RST_STREAM for this stream alone; the connection's other streams go on.
                pending.finish(Outcome::Reset);
                let code = r
                    .code
                    .map_or(h2::Reason::INTERNAL_ERROR, |c| c.number().into());
                return Err(StreamReset(code));
            }
            ctl.hand_over(SocketAction::Reset, pending).await
        }
        FaultConfig::Hang(h) => {
            let pending = if h.process {
                process(conn, &mut work, pending, Route::Default)
                    .await
                    .ok_or(StreamReset::INTERNAL)?
                    .0
            } else {
                pending
            };
            let cap = h.cap.map_or(state.hang_cap, |d| d.0);
            if conn.http2 {
                // The stream waits; a client that cancels it drops this future (client_closed).
                // A gRPC call is over at its deadline: there its stream is cancelled, as a
                // server cancels a call whose deadline passed.
                let until = tokio::time::Instant::from_std(now + cap);
                let (until, reason) = match deadline.map(tokio::time::Instant::from_std) {
                    Some(d) if d < until => (d, h2::Reason::CANCEL),
                    _ => (until, h2::Reason::INTERNAL_ERROR),
                };
                tokio::time::sleep_until(until).await;
                pending.finish(Outcome::Hung);
                return Err(StreamReset(reason));
            }
            ctl.hand_over(SocketAction::Hang(cap), pending).await
        }
        FaultConfig::Malformed(m) => {
            let mut pending = if m.process {
                process(conn, &mut work, pending, Route::Default)
                    .await
                    .ok_or(StreamReset::INTERNAL)?
                    .0
            } else {
                pending
            };
            if conn.http2 {
                pending.finish(Outcome::Reset);
                return Err(StreamReset::INTERNAL);
            }
            let (bytes, status) = MalformedKind::bytes(m.kind);
            pending.entry().status = status;
            ctl.hand_over(SocketAction::Malformed(bytes), pending).await
        }
        FaultConfig::GoAway => ctl.hand_over(SocketAction::GoAway, pending).await,
    }
}

/// The `grpc-message` of an injected gRPC status that names none.
const INJECTED: &str = "injected by the fault schedule";

/// A gRPC call: its head, and, when this server answers it itself, its decoding.
struct GrpcWork {
    head: CallHead,
    /// `None` in proxy mode: the upstream decodes what it is sent.
    decoded: Option<Result<Decoded, grpc::Status>>,
}

/// A request read whole, ready to be processed.
struct Work {
    parts: http::request::Parts,
    key: Option<String>,
    body: Bytes,
    body_sha256: String,
    /// The request is a gRPC call.
    grpc: Option<GrpcWork>,
    /// The body's share of `limits.body_memory`, given back when the request is done with it.
    _reserved: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The answer to a body that was not read whole; a client that left gets none (its entry
/// records `client_closed`), nor does a stream the h2 layer reset (its entry: `rejected`,
/// `bad-body`, no status).
fn refuse_body(
    refused: BodyRefused,
    mut pending: Pending,
) -> Result<Response<ResBody>, StreamReset> {
    let (status, reason, text) = match refused {
        BodyRefused::TooLarge => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "request body over the server's limit\n",
        ),
        BodyRefused::Timeout => (
            StatusCode::REQUEST_TIMEOUT,
            "body-timeout",
            "the request body did not arrive in time\n",
        ),
        BodyRefused::Memory => (
            StatusCode::SERVICE_UNAVAILABLE,
            "body-memory",
            "the server holds as many request bodies as it may; try again\n",
        ),
        BodyRefused::Bad => (
            StatusCode::BAD_REQUEST,
            "bad-body",
            "the request body's framing is invalid\n",
        ),
        BodyRefused::ClientGone => {
            drop(pending);
            return Ok(plain(StatusCode::BAD_REQUEST, "incomplete request body\n"));
        }
        BodyRefused::StreamReset => {
            let e = pending.entry();
            e.rejected = Some("bad-body".to_string());
            e.status = None;
            pending.finish(Outcome::Rejected);
            return Err(StreamReset::INTERNAL);
        }
    };
    Ok(reject(status, reason, text, pending))
}

/// Who processes a request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    /// The upstream when the server has one (proxy mode), else the built-in resource.
    Default,
    /// The upstream (a `forward` rule).
    Upstream,
}

/// What processing a request gave.
enum Done {
    /// The built-in resource's reply.
    Resource(ResourceReply),
    /// The upstream's answer.
    Upstream(UpstreamReply),
    /// The upstream gave none.
    UpstreamFailed(UpstreamFailure),
    /// A gRPC call's answer, from the built-in services.
    Grpc(GrpcReply),
}

/// The framed response message a processed call had (for a committed failure to send part of),
/// or an empty one.
fn framed_answer(done: &Done) -> Bytes {
    match done {
        Done::Grpc(GrpcReply {
            response: Some(m), ..
        }) => grpc::frame::encode(m, grpc::frame::Encoding::Identity),
        Done::Upstream(u) if !u.body.is_empty() => u.body.clone(),
        _ => empty_message(),
    }
}

/// The default message, framed: five bytes, a length of zero.
fn empty_message() -> Bytes {
    Bytes::from_static(&[0, 0, 0, 0, 0])
}

/// Processes `work` — forwards it, or serves it from the built-in resource — and records in
/// its entry what that did, before any fault decides what the client sees of it.
///
/// A forward runs in the request's own future: if the client goes away and that future is
/// dropped, the forward is cancelled with it (its upstream connection closed, not pooled), and
/// the entry, already marked `forwarded`, ends as `client_closed`. Nothing keeps working for a
/// client that is gone.
///
/// `None` only when the forward could not finish.
async fn process(
    conn: &ServedConn,
    work: &mut Work,
    mut pending: Pending,
    route: Route,
) -> Option<(Pending, Done)> {
    let state = &conn.state;
    let upstream = match (&state.upstream, route) {
        (Some(u), _) => Some(u.clone()),
        (None, Route::Default) => None,
        (None, Route::Upstream) => {
            let failed = UpstreamFailure::Connect("no upstream is configured".into());
            pending.entry().forwarded = true;
            return Some((pending, Done::UpstreamFailed(failed)));
        }
    };
    if let (Some(u), Some(_)) = (&upstream, &work.grpc) {
        if !u.http2() {
            pending.entry().forwarded = true;
            let failed = UpstreamFailure::Connect(format!(
                "a gRPC call cannot be forwarded over HTTP/1.1: the upstream {} needs the scheme grpc:// (or grpcs://)",
                u.url()
            ));
            return Some((pending, Done::UpstreamFailed(failed)));
        }
    }
    let Some(upstream) = upstream else {
        if let Some(g) = &mut work.grpc {
            let reply = match g.decoded.take() {
                Some(Ok(decoded)) => {
                    crate::orders::grpc::serve(&state.orders, decoded, work.key.take()).await
                }
                Some(Err(status)) => GrpcReply::status(status),
                None => GrpcReply::status(grpc::Status::new(
                    history::GrpcCode::Internal,
                    "the call was not decoded",
                )),
            };
            record_grpc_reply(&mut pending, &reply);
            return Some((pending, Done::Grpc(reply)));
        }
        if !is_resource_path(work.parts.uri.path()) {
            let reply = ok_reply();
            record_reply(&mut pending, &reply);
            return Some((pending, Done::Resource(reply)));
        }
        let request = ResourceRequest {
            method: work.parts.method.clone(),
            path: work.parts.uri.path().to_string(),
            query: work.parts.uri.query().map(str::to_string),
            key: work.key.take(),
            body: std::mem::take(&mut work.body),
            body_sha256: std::mem::take(&mut work.body_sha256),
        };
        let reply = serve_resource(&conn.routes.resource, request).await;
        record_reply(&mut pending, &reply);
        return Some((pending, Done::Resource(reply)));
    };
    let tls = conn.io.is_tls();
    let start = Instant::now();
    pending.entry().forwarded = true;
    let p = &work.parts;
    let body = std::mem::take(&mut work.body);
    // Boxed: a forward's future (a client exchange) is the largest a request awaits, and only
    // proxy mode needs its room.
    let result = built_in_box(|| upstream.forward(&p.method, &p.uri, &p.headers, body, tls)).await;
    pending.entry().upstream_us = Some(elapsed_us(start));
    match result {
        Ok(reply) => {
            record_upstream(&mut pending, &reply);
            Some((pending, Done::Upstream(reply)))
        }
        Err(failure) => Some((pending, Done::UpstreamFailed(failure))),
    }
}

/// The response for what processing gave; a gRPC call whose upstream failed is answered with a
/// gRPC status, as a gRPC proxy answers it.
fn answer(state: &State, done: Done, pending: Pending, is_grpc: bool) -> Response<ResBody> {
    let capture = &state.response_capture;
    match done {
        Done::Resource(reply) => respond(reply, pending, capture),
        Done::Upstream(reply) => relay(reply, pending, capture),
        Done::UpstreamFailed(failure) if is_grpc => {
            let (code, pushback) = failure.grpc_status();
            grpc_trailers_only(
                code,
                &failure.detail(),
                pushback,
                pending,
                capture,
                Outcome::UpstreamError,
            )
        }
        Done::UpstreamFailed(failure) => upstream_failed(&failure, pending, capture),
        Done::Grpc(reply) => grpc_respond(reply, pending, capture),
    }
}

/// The answer when the schedule's shared counters cannot be read: no fault can be decided.
fn shared_state_unavailable(e: &StoreError) -> ResourceReply {
    tracing::error!("shared schedule counters: {e}");
    ResourceReply::problem(
        503,
        "shared-state-unavailable",
        "The schedule's shared counters could not be read",
        e.to_string(),
    )
}

/// The journal's HTTP version.
fn journal_version(v: http::Version) -> HttpVersion {
    match v {
        http::Version::HTTP_2 => HttpVersion::Http2,
        http::Version::HTTP_10 => HttpVersion::Http10,
        _ => HttpVersion::Http11,
    }
}

/// What a request's handling reads of its headers, found in one pass over them (a lookup by
/// name hashes it, and a request is looked up for a dozen names, most of them absent). Where a
/// name repeats, its first value counts, as with `HeaderMap::get`.
struct ReadHeaders<'a> {
    key: Option<&'a str>,
    client_id: Option<&'a str>,
    content_length: Option<&'a HeaderValue>,
    /// The headers named in `capture`, for the journal.
    captured: BTreeMap<String, String>,
}

impl<'a> ReadHeaders<'a> {
    fn of(headers: &'a HeaderMap, capture: &[HeaderName]) -> ReadHeaders<'a> {
        let mut read = ReadHeaders {
            key: None,
            client_id: None,
            content_length: None,
            captured: BTreeMap::new(),
        };
        let mut last: Option<&HeaderName> = None;
        for (name, value) in headers {
            // A repeated name's values come one after the other, the first first.
            if last == Some(name) {
                continue;
            }
            last = Some(name);
            if name == http::header::CONTENT_LENGTH {
                read.content_length = Some(value);
            } else if name.as_str() == "idempotency-key" {
                read.key = value.to_str().ok();
            } else if name.as_str() == "x-client-id" {
                read.client_id = value.to_str().ok();
            }
            if capture.contains(name) {
                read.captured.insert(
                    name.as_str().to_string(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                );
            }
        }
        read
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_in_one_pass_with_the_first_value_of_a_repeated_name() {
        let mut h = HeaderMap::new();
        h.append("x-request-id", HeaderValue::from_static("r-1"));
        h.append("idempotency-key", HeaderValue::from_static("k-first"));
        h.append("host", HeaderValue::from_static("127.0.0.1"));
        h.append("idempotency-key", HeaderValue::from_static("k-second"));
        h.append("content-length", HeaderValue::from_static("12"));
        h.append("x-request-id", HeaderValue::from_static("r-2"));
        let capture = [
            HeaderName::from_static("idempotency-key"),
            HeaderName::from_static("x-request-id"),
            HeaderName::from_static("x-client-id"),
        ];
        let read = ReadHeaders::of(&h, &capture);
        assert_eq!(
            read.key,
            h.get("idempotency-key").and_then(|v| v.to_str().ok())
        );
        assert_eq!(read.key, Some("k-first"));
        assert_eq!(read.client_id, None);
        assert_eq!(
            read.content_length.map(HeaderValue::as_bytes),
            Some(&b"12"[..])
        );
        let captured: Vec<(&str, &str)> = read
            .captured
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            captured,
            [("idempotency-key", "k-first"), ("x-request-id", "r-1")]
        );
        // A value that is not visible ASCII is no key, but is still captured, lossily.
        let mut h = HeaderMap::new();
        h.append(
            "idempotency-key",
            HeaderValue::from_bytes(b"k\xff").unwrap(),
        );
        h.append("x-client-id", HeaderValue::from_static("c-7"));
        let read = ReadHeaders::of(&h, &capture);
        assert_eq!(read.key, None);
        assert_eq!(read.client_id, Some("c-7"));
        assert_eq!(read.captured["idempotency-key"], "k\u{fffd}");
    }
}
