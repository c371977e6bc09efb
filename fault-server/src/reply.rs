//! The answers the server writes: the orders resource's replies, injected statuses, and the
//! response body that completes its request's journal entry when hyper is done with it.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use http_body_util::Either;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;

use crate::config::StatusFault;
use crate::grpc::GrpcReply;
use crate::journal::Pending;
use crate::orders::ResourceReply;
use crate::socket::{Delivery, WriteWatch};
use crate::upstream::{UpstreamFailure, UpstreamReply};
use history::GrpcCode;
use history::Outcome;
use http::HeaderMap;

/// What the server answers with: a journaled body, or the control API's.
pub(crate) type ResBody = Either<JournaledBody, axum::body::Body>;

pub(crate) fn record_reply(pending: &mut Pending, reply: &ResourceReply) {
    let e = pending.entry();
    e.status = Some(reply.status);
    e.created = reply.created.clone();
    e.replayed = reply.replayed;
    e.transition = reply.transition.clone();
    e.resource = reply.resource.clone();
    if let Some(why) = reply.refused {
        e.rejected = Some(why.to_string());
    }
}

/// Records what the upstream answered a forwarded request (before any fault decides whether
/// the client sees it).
pub(crate) fn record_upstream(pending: &mut Pending, reply: &UpstreamReply) {
    let e = pending.entry();
    e.status = Some(reply.status);
    e.upstream_status = Some(reply.status);
    e.created = reply.created.clone();
}

/// The upstream's answer, relayed to the client as it came (hop-by-hop headers aside).
pub(crate) fn relay(
    reply: UpstreamReply,
    mut pending: Pending,
    capture: &[HeaderName],
) -> Response<ResBody> {
    record_upstream(&mut pending, &reply);
    record_headers(&mut pending, &reply.headers, capture);
    if pending.entry().grpc_method.is_some() {
        record_grpc_answer(&mut pending, &reply.headers, reply.trailers.as_ref());
    }
    let mut body = JournaledBody::new(reply.body, pending).with_trailers(reply.trailers);
    body.hold(reply.held);
    let mut res = Response::new(Either::Left(body));
    *res.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::BAD_GATEWAY);
    *res.headers_mut() = reply.headers;
    res
}

/// The answer for an upstream that gave none: `502` or `504` with a problem body, journaled as
/// `upstream_error`.
pub(crate) fn upstream_failed(
    failure: &UpstreamFailure,
    pending: Pending,
    capture: &[HeaderName],
) -> Response<ResBody> {
    let status = failure.status();
    let detail = failure.detail();
    tracing::debug!("upstream: {detail}");
    let mut reply = match failure {
        UpstreamFailure::Memory(_) => ResourceReply::problem(
            status,
            "response-memory",
            "The server holds as many upstream answers as it may",
            detail,
        ),
        _ => ResourceReply::problem(
            status,
            "upstream-error",
            if status == 504 {
                "Upstream timed out"
            } else {
                "Upstream failed"
            },
            detail,
        ),
    };
    if status == 503 {
        reply.headers.push(("retry-after", "1".to_string()));
    }
    respond_as(reply, pending, capture, Outcome::UpstreamError)
}

/// The header block that ends a gRPC call: its status, message and pushback.
fn grpc_status_fields(code: GrpcCode, message: &str, pushback_ms: Option<i64>) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(3);
    h.insert(GRPC_STATUS, HeaderValue::from(u16::from(code.number())));
    if !message.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&grpc::status::percent_encode(message)) {
            h.insert(GRPC_MESSAGE, v);
        }
    }
    if let Some(ms) = pushback_ms {
        h.insert(GRPC_PUSHBACK, HeaderValue::from(ms));
    }
    h
}

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// Records the status a gRPC answer carries.
pub(crate) fn record_grpc(
    pending: &mut Pending,
    code: GrpcCode,
    message: &str,
    pushback_ms: Option<i64>,
    committed: bool,
) {
    let e = pending.entry();
    e.status = Some(200);
    e.grpc_status = Some(code);
    e.grpc_message = (!message.is_empty()).then(|| message.to_string());
    e.pushback_ms = pushback_ms;
    e.committed = Some(committed);
}

fn grpc_head() -> http::HeaderMap {
    let mut h = HeaderMap::with_capacity(4);
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(grpc::call::CONTENT_TYPE_GRPC),
    );
    h
}

/// A gRPC call answered with `code` alone, Trailers-Only: one header block that ends the
/// stream. Not committed. Finished as `outcome` once delivered.
pub(crate) fn grpc_trailers_only(
    code: GrpcCode,
    message: &str,
    pushback_ms: Option<i64>,
    mut pending: Pending,
    capture: &[HeaderName],
    outcome: Outcome,
) -> Response<ResBody> {
    record_grpc(&mut pending, code, message, pushback_ms, false);
    let mut h = grpc_head();
    h.extend(grpc_status_fields(code, message, pushback_ms));
    record_headers(&mut pending, &h, capture);
    let body = JournaledBody::finishing(Bytes::new(), pending, outcome);
    let mut res = Response::new(Either::Left(body));
    *res.headers_mut() = h;
    res
}

/// Records what processing a gRPC call did (before any fault decides what the client sees).
pub(crate) fn record_grpc_reply(pending: &mut Pending, reply: &GrpcReply) {
    let e = pending.entry();
    e.created.clone_from(&reply.created);
    e.replayed = reply.replayed;
    e.resource.clone_from(&reply.resource);
    if let Some(why) = reply.refused {
        e.rejected = Some(why.to_string());
    }
}

/// A processed gRPC call's answer: Response-Headers, the message and the status in trailers when
/// it succeeded; Trailers-Only when it failed.
pub(crate) fn grpc_respond(
    reply: GrpcReply,
    mut pending: Pending,
    capture: &[HeaderName],
) -> Response<ResBody> {
    record_grpc_reply(&mut pending, &reply);
    let outcome = if reply.refused.is_some() {
        Outcome::Rejected
    } else {
        Outcome::Responded
    };
    let Some(message) = reply.response.filter(|_| reply.code == GrpcCode::Ok) else {
        return grpc_trailers_only(
            reply.code,
            &reply.message,
            reply.pushback_ms,
            pending,
            capture,
            outcome,
        );
    };
    record_grpc(
        &mut pending,
        reply.code,
        &reply.message,
        reply.pushback_ms,
        true,
    );
    let h = grpc_head();
    record_headers(&mut pending, &h, capture);
    let trailers = grpc_status_fields(reply.code, &reply.message, reply.pushback_ms);
    let framed = grpc::frame::encode(&message, grpc::frame::Encoding::Identity);
    let body = JournaledBody::finishing(framed, pending, outcome).with_trailers(Some(trailers));
    let mut res = Response::new(Either::Left(body));
    *res.headers_mut() = h;
    res
}

/// A committed call's failure: Response-Headers, the first half of `framed` (a response
/// message with its prefix), then `code` in trailers.
pub(crate) fn grpc_after_headers(
    code: GrpcCode,
    message: &str,
    pushback_ms: Option<i64>,
    framed: Bytes,
    mut pending: Pending,
    capture: &[HeaderName],
) -> Response<ResBody> {
    record_grpc(&mut pending, code, message, pushback_ms, true);
    let h = grpc_head();
    record_headers(&mut pending, &h, capture);
    let part = framed.slice(..framed.len().div_ceil(2));
    let trailers = grpc_status_fields(code, message, pushback_ms);
    let body = JournaledBody::new(part, pending).with_trailers(Some(trailers));
    let mut res = Response::new(Either::Left(body));
    *res.headers_mut() = h;
    res
}

/// Records a relayed gRPC answer's status: from its trailers, or from its only header block.
pub(crate) fn record_grpc_answer(
    pending: &mut Pending,
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
) {
    let (fields, committed) = match trailers {
        Some(t) => (t, true),
        None => (headers, false),
    };
    let Some(status) = grpc::Status::from_fields(fields) else {
        return;
    };
    // As gRFC A6 reads it: a signed 32-bit number; anything else asks for no retry, -1.
    let pushback = fields.get(GRPC_PUSHBACK).map(|v| {
        std::str::from_utf8(v.as_bytes())
            .ok()
            .filter(|t| !t.starts_with('+'))
            .and_then(|t| t.parse::<i32>().ok())
            .map_or(-1, i64::from)
    });
    let e = pending.entry();
    e.grpc_status = Some(status.code);
    e.grpc_message = (!status.message.is_empty()).then_some(status.message);
    e.pushback_ms = pushback;
    e.committed = Some(committed);
}

/// Response headers every journal entry records when the response has them.
pub(crate) const RECORDED_RESPONSE_HEADERS: [&str; 3] =
    ["retry-after", "location", "idempotent-replayed"];

/// Copies the response headers named in `capture` into the entry's `response_headers`.
fn record_headers(pending: &mut Pending, h: &http::HeaderMap, capture: &[HeaderName]) {
    let mut kept = std::collections::BTreeMap::new();
    // One pass over the answer's few headers rather than a hashed lookup per name; a repeated
    // name's first value counts, as with `HeaderMap::get`.
    let mut last = None;
    for (name, value) in h {
        if last == Some(name) {
            continue;
        }
        last = Some(name);
        if capture.contains(name) {
            if let Ok(v) = value.to_str() {
                kept.insert(name.as_str().to_string(), v.to_string());
            }
        }
    }
    if !kept.is_empty() {
        pending.entry().response_headers = Some(kept);
    }
}

pub(crate) fn respond(
    reply: ResourceReply,
    pending: Pending,
    capture: &[HeaderName],
) -> Response<ResBody> {
    let outcome = if reply.refused.is_some() {
        Outcome::Rejected
    } else {
        Outcome::Responded
    };
    respond_as(reply, pending, capture, outcome)
}

/// `reply`, its entry finished as `outcome` once the body is handed over.
fn respond_as(
    reply: ResourceReply,
    mut pending: Pending,
    capture: &[HeaderName],
    outcome: Outcome,
) -> Response<ResBody> {
    record_reply(&mut pending, &reply);
    let mut h = http::HeaderMap::new();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(reply.content_type),
    );
    for (name, value) in reply.headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
    record_headers(&mut pending, &h, capture);
    let body = JournaledBody::finishing(reply.body, pending, outcome);
    let mut res = Response::new(Either::Left(body));
    *res.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    *res.headers_mut() = h;
    res
}

/// A `status` fault's answer; `body` is its body made when the schedule was installed (shared by
/// every response, not copied).
pub(crate) fn status_response(
    s: &StatusFault,
    body: Option<(Bytes, &'static str)>,
    mut pending: Pending,
    capture: &[HeaderName],
) -> Response<ResBody> {
    let code = StatusCode::from_u16(s.code.0).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    pending.entry().status = Some(code.as_u16());
    let (body, content_type) = body.unwrap_or((Bytes::new(), "text/plain; charset=utf-8"));
    let mut headers = http::HeaderMap::new();
    let h = &mut headers;
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
    record_headers(&mut pending, &headers, capture);
    let mut res = Response::new(Either::Left(JournaledBody::new(body, pending)));
    *res.status_mut() = code;
    *res.headers_mut() = headers;
    res
}

/// A text response outside the journal's accounting (the request's entry is settled elsewhere).
pub(crate) fn plain(code: StatusCode, text: &'static str) -> Response<ResBody> {
    let body = JournaledBody {
        data: Some(Bytes::from_static(text.as_bytes())),
        trailers: None,
        settle: None,
        h1: None,
    };
    let mut res = Response::new(Either::Left(body));
    *res.status_mut() = code;
    res
}

/// A response's journal entry, waiting for the answer to be delivered, with what it holds (its
/// share of `limits.response_memory`) until then.
pub(crate) struct Settle {
    pub(crate) pending: Pending,
    /// The outcome once the answer is delivered whole: `responded`, or `rejected` /
    /// `upstream_error` for an answer the server made in the client's place.
    pub(crate) outcome: Outcome,
    pub(crate) held: Option<OwnedSemaphorePermit>,
}

impl Settle {
    /// Finishes the entry: with `bytes` of the answer written, as meant (`cut` `None`) or as
    /// `cut`; done at `done_us` (the server's clock) when given, else now.
    pub(crate) fn finish(self, bytes: u64, cut: Option<history::Outcome>, done_us: Option<u64>) {
        let Settle {
            mut pending,
            outcome,
            held,
        } = self;
        let e = pending.entry();
        e.response_bytes = Some(bytes);
        if cut.is_some() && bytes == 0 && e.committed == Some(true) {
            // Nothing of the answer got out: its client saw no headers, the call was not
            // committed.
            e.committed = Some(false);
        }
        match done_us {
            Some(t) => pending.finish_at(cut.unwrap_or(outcome), t),
            None => pending.finish(cut.unwrap_or(outcome)),
        }
        drop(held);
    }
}

/// A response body that completes its request's journal entry once the answer is delivered.
///
/// Delivered means its last byte was written to the socket. Over HTTP/2 the stream's task takes
/// the entry out ([`JournaledBody::take_settle`]) and finishes it when the stream's last frame is
/// on the wire. Over HTTP/1.1 the connection's [`WriteWatch`] does, at the first flush after
/// hyper took the whole body ([`JournaledBody::on_connection`]). A body dropped before it was
/// handed over whole was not delivered: `client_closed` (or `send_timeout`).
pub(crate) struct JournaledBody {
    data: Option<Bytes>,
    /// Trailers after the data (a gRPC call's status).
    trailers: Option<HeaderMap>,
    settle: Option<Settle>,
    /// HTTP/1.1: the connection's write watch, and what it had written when the request came.
    h1: Option<(Arc<WriteWatch>, u64)>,
}

impl JournaledBody {
    pub(crate) fn new(data: Bytes, pending: Pending) -> Self {
        JournaledBody::finishing(data, pending, Outcome::Responded)
    }

    /// A body whose entry is finished as `outcome` once delivered.
    pub(crate) fn finishing(data: Bytes, pending: Pending, outcome: Outcome) -> Self {
        JournaledBody {
            data: (!data.is_empty()).then_some(data),
            trailers: None,
            settle: Some(Settle {
                pending,
                outcome,
                held: None,
            }),
            h1: None,
        }
    }

    /// Keeps `permit` (the answer's share of a memory budget) until the answer is delivered.
    pub(crate) fn hold(&mut self, permit: Option<OwnedSemaphorePermit>) {
        if let Some(s) = &mut self.settle {
            s.held = permit;
        }
    }

    /// Sends `trailers` after the data.
    pub(crate) fn with_trailers(mut self, trailers: Option<HeaderMap>) -> Self {
        self.trailers = trailers;
        self
    }

    /// The entry, for a writer that tells delivery itself (an HTTP/2 stream's task).
    pub(crate) fn take_settle(&mut self) -> Option<Settle> {
        self.settle.take()
    }

    /// The HTTP/1.1 connection it is written on, which had written `start` bytes when the
    /// request came.
    pub(crate) fn on_connection(&mut self, watch: Arc<WriteWatch>, start: u64) {
        self.h1 = Some((watch, start));
    }

    /// Drops the bytes it would write: the answer carries no body (a `HEAD`, a `204`, a `304`).
    pub(crate) fn discard(&mut self) {
        self.data = None;
    }

    /// The bytes it will write.
    #[cfg(test)]
    pub(crate) fn data(&self) -> Option<&Bytes> {
        self.data.as_ref()
    }
}

/// A request the server refuses before handling it (`413`, `400`, `503`): answered with `status`
/// and `text`, the connection closed after, journaled as `rejected` for `reason`.
pub(crate) fn reject(
    status: StatusCode,
    reason: &'static str,
    text: &'static str,
    mut pending: Pending,
) -> Response<ResBody> {
    {
        let e = pending.entry();
        e.status = Some(status.as_u16());
        e.rejected = Some(reason.to_string());
        if status == StatusCode::SERVICE_UNAVAILABLE {
            e.response_headers = Some([("retry-after".to_string(), "1".to_string())].into());
        }
    }
    let body = JournaledBody::finishing(
        Bytes::from_static(text.as_bytes()),
        pending,
        Outcome::Rejected,
    );
    let mut res = Response::new(Either::Left(body));
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        h.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    res
}

impl Body for JournaledBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(d) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let len = self.data.as_ref().map_or(0, |d| d.len() as u64);
        if self.trailers.is_some() {
            // Trailers follow: the length is the data's, but no `content-length` is owed.
            let mut h = SizeHint::new();
            h.set_lower(len);
            return h;
        }
        SizeHint::with_exact(len)
    }
}

impl Drop for JournaledBody {
    fn drop(&mut self) {
        let Some(s) = self.settle.take() else {
            return;
        };
        match (&self.h1, self.data.is_none() && self.trailers.is_none()) {
            // Taken whole by hyper: delivered at the flush that writes it.
            (Some((watch, start)), true) => {
                watch.deliver(Delivery::new(*start, s.pending, s.outcome, s.held));
            }
            (Some((watch, start)), false) => {
                let cut = if watch.timed_out() {
                    Outcome::SendTimeout
                } else {
                    Outcome::ClientClosed
                };
                s.finish(watch.bytes_since(*start), Some(cut), None);
            }
            // Not written through a watched connection: the hand-over is all there is to see.
            (None, true) => {
                let Settle {
                    pending, outcome, ..
                } = s;
                pending.finish(outcome);
            }
            (None, false) => {
                let Settle { pending, .. } = s;
                pending.finish(Outcome::ClientClosed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;
    use crate::config::{FaultConfig, RuleConfig, StatusFault};
    use crate::journal::{Clock, Journal};
    use crate::schedule::{RequestFacts, Schedule};

    #[test]
    fn a_status_fault_body_is_shared_by_every_response_not_copied() {
        let body = "x".repeat(1 << 16);
        let rules = vec![RuleConfig::new(StatusFault::new(503).body(body.clone()))];
        let schedule = Schedule::new(&rules, 0, Instant::now());
        let journal = Journal::start(None).expect("a journal");
        let clock = Arc::new(Clock::new());
        let (method, headers) = (http::Method::GET, http::HeaderMap::new());
        let answer = |seq: u64| {
            let facts = RequestFacts {
                method: &method,
                path: "/",
                headers: &headers,
                seq,
                idempotency_key: None,
                key_attempt: None,
                now: Instant::now(),
                grpc: None,
            };
            let d = schedule.decide(&facts).expect("the rule fires");
            let FaultConfig::Status(s) = d.fault else {
                panic!("a status fault");
            };
            let pending = Pending::new(&journal, clock.clone(), 0, history::Entry::blank(seq));
            status_response(s, d.prepared.status_body.clone(), pending, &[])
        };
        let (a, b) = (answer(1), answer(2));
        let data = |r: &Response<ResBody>| match r.body() {
            Either::Left(b) => b.data().expect("a body").clone(),
            Either::Right(_) => panic!("a journaled body"),
        };
        assert_eq!(data(&a), body.as_bytes());
        assert_eq!(
            data(&a).as_ptr(),
            data(&b).as_ptr(),
            "one buffer for both answers"
        );
    }
}
