//! The answers the server writes: the orders resource's replies, injected statuses, and the
//! response body that completes its request's journal entry when hyper is done with it.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use http_body_util::Either;
use hyper::body::{Body, Frame, SizeHint};

use crate::config::StatusFault;
use crate::journal::Pending;
use crate::orders::ResourceReply;
use crate::upstream::{UpstreamFailure, UpstreamReply};
use history::Outcome;

/// What the server answers with: a journaled body, or the control API's.
pub(crate) type ResBody = Either<JournaledBody, axum::body::Body>;

pub(crate) fn record_reply(pending: &mut Pending, reply: &ResourceReply) {
    let e = pending.entry();
    e.status = Some(reply.status);
    e.created = reply.created.clone();
    e.replayed = reply.replayed;
    e.transition = reply.transition.clone();
    e.resource = reply.resource.clone();
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
    let mut res = Response::new(Either::Left(JournaledBody::new(reply.body, pending)));
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
    let reply = ResourceReply::problem(
        status,
        "upstream-error",
        if status == 504 {
            "Upstream timed out"
        } else {
            "Upstream failed"
        },
        detail,
    );
    respond_as(reply, pending, capture, Outcome::UpstreamError)
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
    respond_as(reply, pending, capture, Outcome::Responded)
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
    let mut body = JournaledBody::new(reply.body, pending);
    body.outcome = outcome;
    let mut res = Response::new(Either::Left(body));
    *res.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    *res.headers_mut() = h;
    res
}

pub(crate) fn status_response(
    s: &StatusFault,
    mut pending: Pending,
    capture: &[HeaderName],
) -> Response<ResBody> {
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
        pending: None,
        outcome: Outcome::Responded,
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
    /// The outcome recorded once the body is handed over: `responded`, or `rejected` for a
    /// request the server refused.
    outcome: Outcome,
}

impl JournaledBody {
    pub(crate) fn new(data: Bytes, pending: Pending) -> Self {
        JournaledBody {
            data: (!data.is_empty()).then_some(data),
            pending: Some(pending),
            outcome: Outcome::Responded,
        }
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
    let body = JournaledBody {
        data: Some(Bytes::from_static(text.as_bytes())),
        pending: Some(pending),
        outcome: Outcome::Rejected,
    };
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
        match self.data.take() {
            Some(d) => Poll::Ready(Some(Ok(Frame::data(d)))),
            None => {
                if let Some(p) = self.pending.take() {
                    p.finish(self.outcome);
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
                p.finish(self.outcome);
            }
            // Otherwise `p` drops here and records client_closed.
        }
    }
}
