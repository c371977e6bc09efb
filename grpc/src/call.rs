//! One unary call on the wire: the request a call sends (`:method POST`, `:path
//! /pkg.Service/Method`, `content-type: application/grpc`, `te: trailers`, `grpc-timeout`,
//! metadata, the framed message) and the reading of what came back — Response-Headers, messages
//! and Trailers, or Trailers-Only — into a status, the messages and what the retry policy needs
//! (whether the call was committed, the server's pushback).
//!
//! Why a boundary ([`Exchange`]) and not calls into `transport` directly: a gRPC status travels in
//! HTTP/2 trailers, and whether headers came before it decides whether a call is committed (A6).
//! The exchange of one request for one whole answer — status, headers, body, trailers — is all
//! this module asks of a transport; building the request and judging the answer are plain
//! functions, tested without a socket.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use history::ErrorKind;
use http::header::{CONTENT_TYPE, TE, USER_AGENT};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use retry_policy::grpc::{GrpcOutcome, Pushback};
use transport::{AttemptError, Conn, Outgoing, Reply};

use crate::frame::{self, Encoding, FrameError};
use crate::metadata::{self, Metadata};
use crate::status::{Code, Status};

/// The content type of a gRPC request.
pub const CONTENT_TYPE_GRPC: &str = "application/grpc";

/// A unary request, ready to be sent as often as the policy says.
#[derive(Debug, Clone)]
pub struct CallRequest {
    /// `/pkg.Service/Method`.
    pub path: String,
    /// The request message, protobuf-encoded (unframed).
    pub message: Bytes,
    /// Custom metadata.
    pub metadata: Metadata,
    /// Compress the message so (`grpc-encoding`); `None` sends it uncompressed.
    pub encoding: Option<Encoding>,
    /// `user-agent`.
    pub user_agent: Option<String>,
}

/// What differs from one attempt of a call to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttemptHeaders {
    /// `grpc-timeout`: what is left of the call's deadline.
    pub timeout: Option<Duration>,
    /// `grpc-previous-rpc-attempts`.
    pub previous_attempts: Option<u32>,
}

impl CallRequest {
    /// The HTTP/2 request of one attempt. The transport adds `:scheme` and `:authority`.
    pub fn outgoing(&self, attempt: AttemptHeaders) -> Outgoing {
        let encoding = self.encoding.unwrap_or(Encoding::Identity);
        self.outgoing_with(attempt, frame::encode(&self.message, encoding))
    }

    /// [`CallRequest::outgoing`] with `framed` as the body: the message already framed, without
    /// compression, by a caller that sends the same message many times and frames it once. A
    /// call that compresses (`encoding`) frames its own message instead.
    pub fn outgoing_framed(&self, attempt: AttemptHeaders, framed: Bytes) -> Outgoing {
        match self.encoding {
            None | Some(Encoding::Identity) => self.outgoing_with(attempt, framed),
            Some(_) => self.outgoing(attempt),
        }
    }

    fn outgoing_with(&self, attempt: AttemptHeaders, body: Bytes) -> Outgoing {
        // Room for the fields below, so that the map is allocated once.
        let mut headers = HeaderMap::with_capacity(8);
        // "implementations should send Timeout immediately after the reserved headers and they
        // should send the Call-Definition headers before sending Custom-Metadata."
        if let Some(t) = attempt.timeout {
            insert_owned(
                &mut headers,
                metadata::GRPC_TIMEOUT,
                metadata::encode_timeout(t),
            );
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_GRPC));
        headers.insert(TE, HeaderValue::from_static("trailers"));
        let encoding = self.encoding.unwrap_or(Encoding::Identity);
        if self.encoding.is_some() {
            insert(&mut headers, "grpc-encoding", encoding.as_str());
        }
        headers.insert(
            HeaderName::from_static("grpc-accept-encoding"),
            HeaderValue::from_static("identity,gzip"),
        );
        if let Some(ua) = &self.user_agent {
            if let Ok(v) = HeaderValue::from_str(ua) {
                headers.insert(USER_AGENT, v);
            }
        }
        if let Some(n) = attempt.previous_attempts {
            insert_owned(
                &mut headers,
                metadata::GRPC_PREVIOUS_RPC_ATTEMPTS,
                n.to_string(),
            );
        }
        self.metadata.write_to(&mut headers);
        Outgoing {
            method: Method::POST,
            uri: self.path.clone(),
            headers,
            body,
        }
    }
}

/// `grpc-encoding`, looked up in every answer without parsing the name each time.
const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

/// [`insert`] of a value made for it: its bytes become the value's, not copied again.
fn insert_owned(headers: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(value)) {
        headers.insert(name, v);
    }
}

/// A whole HTTP/2 answer as the transport read it.
#[derive(Debug, Clone)]
pub struct HttpAnswer {
    /// `:status`.
    pub status: StatusCode,
    /// The first header block (Response-Headers, or all of a Trailers-Only response).
    pub headers: HeaderMap,
    /// The DATA frames' bytes.
    pub body: Bytes,
    /// The trailing header block, when the stream ended with one; `None` when the first header
    /// block ended the stream (or, over HTTP/1.1, there was none).
    pub trailers: Option<HeaderMap>,
}

/// How a call's answer was read.
#[derive(Debug, Clone)]
pub struct CallResponse {
    /// The call's status: the server's, or the one made of the HTTP status or of a broken
    /// message stream.
    pub status: Status,
    /// The status came in the only header block: the call was never committed.
    pub trailers_only: bool,
    /// Response-Headers (initial metadata); empty for Trailers-Only.
    pub headers: HeaderMap,
    /// The response messages, decoded from their framing.
    pub messages: Vec<Bytes>,
    /// The trailers (for Trailers-Only, the one header block).
    pub trailers: HeaderMap,
    /// `grpc-retry-pushback-ms`.
    pub pushback: Option<Pushback>,
}

impl CallResponse {
    /// Reads `answer`, with received messages limited to `max_message` bytes.
    pub fn read(answer: HttpAnswer, max_message: usize) -> CallResponse {
        let HttpAnswer {
            status: http_status,
            headers,
            body,
            trailers,
        } = answer;
        let ended_with_headers = trailers.is_none() && body.is_empty();
        let is_grpc = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(CONTENT_TYPE_GRPC));
        // Trailers-Only: one header block with the status in it.
        if ended_with_headers && headers.contains_key(crate::status::GRPC_STATUS) {
            let status = Status::from_fields(&headers).unwrap_or_else(|| Status::from_http(200));
            return CallResponse {
                status,
                trailers_only: true,
                headers: HeaderMap::new(),
                messages: Vec::new(),
                pushback: metadata::pushback(&headers),
                trailers: headers,
            };
        }
        let trailers = trailers.unwrap_or_default();
        let pushback = metadata::pushback(&trailers);
        let done =
            |status: Status, messages: Vec<Bytes>, headers: HeaderMap, trailers: HeaderMap| {
                CallResponse {
                    status,
                    trailers_only: ended_with_headers,
                    headers,
                    messages,
                    trailers,
                    pushback,
                }
            };
        if http_status != StatusCode::OK || !is_grpc {
            // "Implementations must synthesize a Status & Status-Message to propagate to the
            // application layer when this occurs" — from grpc-status if it came, else the table.
            let mut status = Status::from_fields(&trailers)
                .unwrap_or_else(|| Status::from_http(http_status.as_u16()));
            if !is_grpc && http_status == StatusCode::OK {
                let ct = headers
                    .get(CONTENT_TYPE)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                status.message =
                    format!("not a gRPC answer: content-type {ct:?}; {}", status.message);
            }
            return done(status, Vec::new(), headers, trailers);
        }
        let encoding =
            match metadata::first(&headers, &GRPC_ENCODING).map(|v| v.to_str().unwrap_or("?")) {
                None => None,
                Some(v) => match Encoding::parse(v) {
                    Ok(e) => Some(e),
                    Err(e) => {
                        return done(
                            Status::new(Code::Internal, e.to_string()),
                            Vec::new(),
                            headers,
                            trailers,
                        )
                    }
                },
            };
        let messages = match frame::decode_all_bytes(&body, max_message, encoding) {
            Ok(m) => m,
            // The server ended the call with a failing status of its own: that is the call's
            // status, whatever it sent of a message before it (a failure after headers).
            Err(_) if Status::from_fields(&trailers).is_some_and(|s| s.code != Code::Ok) => {
                let status = Status::from_fields(&trailers)
                    .unwrap_or_else(|| Status::new(Code::Unknown, "no status"));
                return done(status, Vec::new(), headers, trailers);
            }
            Err(e) => {
                let code = match e {
                    FrameError::TooLarge { .. } => Code::ResourceExhausted,
                    _ => Code::Internal,
                };
                return done(
                    Status::new(code, e.to_string()),
                    Vec::new(),
                    headers,
                    trailers,
                );
            }
        };
        let status = Status::from_fields(&trailers).unwrap_or_else(|| Status::from_http(200));
        done(status, messages, headers, trailers)
    }

    /// An attempt that got no answer, or could not be sent, ended in `status`: nothing came
    /// from the server, so nothing was committed.
    pub fn failed(status: Status) -> CallResponse {
        CallResponse {
            status,
            trailers_only: true,
            headers: HeaderMap::new(),
            messages: Vec::new(),
            trailers: HeaderMap::new(),
            pushback: None,
        }
    }

    /// What the retry policy needs to know of this attempt.
    pub fn outcome(&self) -> GrpcOutcome {
        GrpcOutcome {
            code: self.status.code,
            committed: !self.trailers_only,
            pushback: self.pushback,
        }
    }
}

/// The status a client makes of an attempt that got no answer. The transport's kinds map as
/// gRPC's clients map them: a refused stream (REFUSED_STREAM, past a GOAWAY) and a connection
/// that failed or broke are UNAVAILABLE, an attempt past its deadline DEADLINE_EXCEEDED, a peer
/// that broke HTTP/2 INTERNAL.
pub fn status_of_failure(e: &AttemptError) -> Status {
    let code = match e.kind {
        ErrorKind::Timeout => Code::DeadlineExceeded,
        ErrorKind::Connect
        | ErrorKind::Refused
        | ErrorKind::Reset
        | ErrorKind::Closed
        | ErrorKind::Tls => Code::Unavailable,
        ErrorKind::Protocol | ErrorKind::Malformed => Code::Internal,
        ErrorKind::Other => Code::Unknown,
    };
    Status::new(code, e.to_string())
}

/// What this crate asks of a transport: send one request and read its whole answer, trailers
/// included, within `timeout`.
pub trait Exchange {
    /// Sends `request`; the answer, or why none came.
    fn exchange(
        &mut self,
        request: Outgoing,
        timeout: Duration,
    ) -> impl Future<Output = Result<HttpAnswer, AttemptError>> + Send;
}

impl From<Reply> for HttpAnswer {
    fn from(r: Reply) -> HttpAnswer {
        HttpAnswer {
            status: r.status,
            headers: r.headers,
            body: r.body,
            trailers: r.trailers,
        }
    }
}

/// The project's own connection: over HTTP/2 (what a `grpc://` or `grpcs://` target is made
/// with, see [`crate::target`]) a stream per exchange, its trailers handed over whole.
impl Exchange for Conn {
    async fn exchange(
        &mut self,
        request: Outgoing,
        timeout: Duration,
    ) -> Result<HttpAnswer, AttemptError> {
        self.send(request, timeout).await.map(HttpAnswer::from)
    }
}

/// One attempt of a unary call through `transport`: the answer read, or the failure as a
/// status (an attempt always ends in a status).
pub async fn attempt<E: Exchange>(
    transport: &mut E,
    request: &CallRequest,
    headers: AttemptHeaders,
    timeout: Duration,
    max_message: usize,
) -> CallResponse {
    match transport.exchange(request.outgoing(headers), timeout).await {
        Ok(answer) => CallResponse::read(answer, max_message),
        Err(e) => CallResponse::failed(status_of_failure(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::DEFAULT_MAX_MESSAGE;

    fn request() -> CallRequest {
        let mut metadata = Metadata::new();
        metadata.insert("idempotency-key", "k-1").unwrap();
        metadata
            .insert_binary("trace-bin", Bytes::from_static(b"\x01\x02"))
            .unwrap();
        CallRequest {
            path: "/orders.v1.Orders/CreateOrder".into(),
            message: Bytes::from_static(b"\x0a\x01x"),
            metadata,
            encoding: None,
            user_agent: Some("grpc-harness/0.1".into()),
        }
    }

    fn fields(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn grpc_headers() -> HeaderMap {
        fields(&[("content-type", "application/grpc")])
    }

    /// A message framed once and handed over is the request `outgoing` makes; a call that
    /// compresses frames its own message whatever it is handed.
    #[test]
    fn a_message_framed_once_makes_the_same_request() {
        let attempt = AttemptHeaders {
            timeout: Some(Duration::from_secs(1)),
            previous_attempts: None,
        };
        let call = request();
        let framed = frame::encode(&call.message, Encoding::Identity);
        let a = call.outgoing(attempt);
        let b = call.outgoing_framed(attempt, framed.clone());
        assert_eq!((a.uri, a.headers, a.body), (b.uri, b.headers, b.body));
        let gzip = CallRequest {
            encoding: Some(Encoding::Gzip),
            ..request()
        };
        assert_eq!(
            gzip.outgoing_framed(attempt, framed).body,
            gzip.outgoing(attempt).body
        );
    }

    #[test]
    fn the_request_carries_the_call_definition_and_metadata() {
        let out = request().outgoing(AttemptHeaders {
            timeout: Some(Duration::from_millis(1500)),
            previous_attempts: Some(2),
        });
        assert_eq!(out.method, Method::POST);
        assert_eq!(out.uri, "/orders.v1.Orders/CreateOrder");
        let h = &out.headers;
        assert_eq!(h["content-type"], "application/grpc");
        assert_eq!(h["te"], "trailers");
        assert_eq!(h["grpc-timeout"], "1500000u");
        assert_eq!(h["grpc-previous-rpc-attempts"], "2");
        assert_eq!(h["idempotency-key"], "k-1");
        assert_eq!(h["trace-bin"], "AQI");
        assert_eq!(h["user-agent"], "grpc-harness/0.1");
        assert!(!h.contains_key("grpc-encoding"));
        assert_eq!(h.keys().next().map(|k| k.as_str()), Some("grpc-timeout"));
        assert_eq!(&out.body[..], b"\x00\x00\x00\x00\x03\x0a\x01x");
        let first = request().outgoing(AttemptHeaders::default());
        assert!(!first.headers.contains_key("grpc-timeout"));
        assert!(!first.headers.contains_key("grpc-previous-rpc-attempts"));
        let mut gz = request();
        gz.encoding = Some(Encoding::Gzip);
        let out = gz.outgoing(AttemptHeaders::default());
        assert_eq!(out.headers["grpc-encoding"], "gzip");
        assert_eq!(out.body[0], 1);
    }

    #[test]
    fn headers_messages_and_trailers() {
        let r = CallResponse::read(
            HttpAnswer {
                status: StatusCode::OK,
                headers: fields(&[("content-type", "application/grpc+proto"), ("x-id", "7")]),
                body: frame::encode(b"reply", Encoding::Identity),
                trailers: Some(fields(&[("grpc-status", "0"), ("x-t", "1")])),
            },
            DEFAULT_MAX_MESSAGE,
        );
        assert_eq!(r.status.code, Code::Ok);
        assert!(!r.trailers_only);
        assert_eq!(r.headers["x-id"], "7");
        assert_eq!(r.trailers["x-t"], "1");
        assert_eq!(r.messages, [Bytes::from_static(b"reply")]);
        assert!(r.outcome().committed);
    }

    #[test]
    fn trailers_only_is_not_committed_and_carries_pushback() {
        let r = CallResponse::read(
            HttpAnswer {
                status: StatusCode::OK,
                headers: fields(&[
                    ("content-type", "application/grpc"),
                    ("grpc-status", "14"),
                    ("grpc-message", "try%20later"),
                    ("grpc-retry-pushback-ms", "250"),
                ]),
                body: Bytes::new(),
                trailers: None,
            },
            DEFAULT_MAX_MESSAGE,
        );
        assert!(r.trailers_only);
        assert_eq!(r.status.message, "try later");
        assert_eq!(
            r.outcome(),
            GrpcOutcome {
                code: Code::Unavailable,
                committed: false,
                pushback: Some(Pushback::After(Duration::from_millis(250))),
            }
        );
    }

    #[test]
    fn a_failure_after_headers_is_committed() {
        let r = CallResponse::read(
            HttpAnswer {
                status: StatusCode::OK,
                headers: grpc_headers(),
                body: Bytes::new(),
                trailers: Some(fields(&[
                    ("grpc-status", "14"),
                    ("grpc-retry-pushback-ms", "-1"),
                ])),
            },
            DEFAULT_MAX_MESSAGE,
        );
        assert!(!r.trailers_only);
        assert_eq!(
            r.outcome(),
            GrpcOutcome {
                code: Code::Unavailable,
                committed: true,
                pushback: Some(Pushback::Stop),
            }
        );
    }

    #[test]
    fn a_failing_status_after_part_of_a_message_is_the_calls_status() {
        let r = CallResponse::read(
            HttpAnswer {
                status: StatusCode::OK,
                headers: grpc_headers(),
                body: Bytes::from_static(b"\x00\x00\x00\x00\x09abc"),
                trailers: Some(fields(&[("grpc-status", "14"), ("grpc-message", "gone")])),
            },
            DEFAULT_MAX_MESSAGE,
        );
        assert_eq!(r.status.code, Code::Unavailable);
        assert_eq!(r.status.message, "gone");
        assert!(r.messages.is_empty());
        assert!(r.outcome().committed);
    }

    #[test]
    fn without_grpc_status_the_http_status_decides() {
        let cases = [
            (503, "text/html", None, Code::Unavailable),
            (404, "application/grpc", None, Code::Unimplemented),
            (
                200,
                "application/grpc",
                Some(fields(&[("x", "y")])),
                Code::Unknown,
            ),
            (200, "text/plain", None, Code::Unknown),
            (429, "application/grpc", None, Code::Unavailable),
        ];
        for (http, ct, trailers, code) in cases {
            let r = CallResponse::read(
                HttpAnswer {
                    status: StatusCode::from_u16(http).unwrap(),
                    headers: fields(&[("content-type", ct)]),
                    body: if ct == "application/grpc" {
                        Bytes::new()
                    } else {
                        Bytes::from_static(b"<html>oops</html>")
                    },
                    trailers,
                },
                DEFAULT_MAX_MESSAGE,
            );
            assert_eq!(r.status.code, code, "{http} {ct}");
            assert!(r.messages.is_empty());
        }
        // A grpc-status that came is used even with another HTTP status.
        let r = CallResponse::read(
            HttpAnswer {
                status: StatusCode::SERVICE_UNAVAILABLE,
                headers: fields(&[("content-type", "application/grpc"), ("grpc-status", "8")]),
                body: Bytes::new(),
                trailers: None,
            },
            DEFAULT_MAX_MESSAGE,
        );
        assert_eq!(r.status.code, Code::ResourceExhausted);
    }

    #[test]
    fn a_broken_message_stream_is_a_status() {
        let read = |headers: HeaderMap, body: &'static [u8], max: usize| {
            CallResponse::read(
                HttpAnswer {
                    status: StatusCode::OK,
                    headers,
                    body: Bytes::from_static(body),
                    trailers: Some(fields(&[("grpc-status", "0")])),
                },
                max,
            )
            .status
        };
        let s = read(grpc_headers(), b"\x00\x00\x00\x00\x09abc", 100);
        assert_eq!(s.code, Code::Internal);
        assert!(
            s.message.contains("ended inside a message"),
            "{}",
            s.message
        );
        let s = read(grpc_headers(), b"\x00\x00\x00\x00\x09abcdefghi", 4);
        assert_eq!(s.code, Code::ResourceExhausted);
        let s = read(grpc_headers(), b"\x01\x00\x00\x00\x01a", 100);
        assert_eq!(s.code, Code::Internal);
        assert!(s.message.contains("no grpc-encoding"), "{}", s.message);
        let mut snappy = grpc_headers();
        snappy.insert("grpc-encoding", HeaderValue::from_static("snappy"));
        let s = read(snappy, b"\x01\x00\x00\x00\x01a", 100);
        assert!(s.message.contains("snappy"), "{}", s.message);
        let mut gz = grpc_headers();
        gz.insert("grpc-encoding", HeaderValue::from_static("gzip"));
        let body = frame::encode(b"zipped", Encoding::Gzip);
        let r = CallResponse::read(
            HttpAnswer {
                status: StatusCode::OK,
                headers: gz,
                body,
                trailers: Some(fields(&[("grpc-status", "0")])),
            },
            100,
        );
        assert_eq!(r.messages, [Bytes::from_static(b"zipped")]);
    }

    #[test]
    fn transport_failures_become_statuses() {
        let f = |kind| {
            status_of_failure(&AttemptError {
                kind,
                message: "m".into(),
            })
            .code
        };
        assert_eq!(f(ErrorKind::Refused), Code::Unavailable);
        assert_eq!(f(ErrorKind::Connect), Code::Unavailable);
        assert_eq!(f(ErrorKind::Reset), Code::Unavailable);
        assert_eq!(f(ErrorKind::Timeout), Code::DeadlineExceeded);
        assert_eq!(f(ErrorKind::Protocol), Code::Internal);
        assert_eq!(f(ErrorKind::Other), Code::Unknown);
    }

    /// A transport that answers from a script: what `attempt` does with each answer.
    struct Scripted(Vec<Result<HttpAnswer, AttemptError>>, Vec<Outgoing>);

    impl Exchange for Scripted {
        fn exchange(
            &mut self,
            request: Outgoing,
            _timeout: Duration,
        ) -> impl Future<Output = Result<HttpAnswer, AttemptError>> + Send {
            self.1.push(request);
            let next = self.0.remove(0);
            async move { next }
        }
    }

    #[test]
    fn an_attempt_sends_through_the_exchange_and_always_ends_in_a_status() {
        let ok = HttpAnswer {
            status: StatusCode::OK,
            headers: grpc_headers(),
            body: frame::encode(b"r", Encoding::Identity),
            trailers: Some(fields(&[("grpc-status", "0")])),
        };
        let refused = AttemptError {
            kind: ErrorKind::Refused,
            message: "REFUSED_STREAM".into(),
        };
        let mut t = Scripted(vec![Err(refused), Ok(ok)], Vec::new());
        let req = request();
        let first = block_on(attempt(
            &mut t,
            &req,
            AttemptHeaders::default(),
            Duration::from_secs(1),
            100,
        ));
        assert_eq!(first.status.code, Code::Unavailable);
        assert!(!first.outcome().committed, "no answer: nothing committed");
        let headers = AttemptHeaders {
            timeout: None,
            previous_attempts: Some(1),
        };
        let second = block_on(attempt(&mut t, &req, headers, Duration::from_secs(1), 100));
        assert_eq!(second.status.code, Code::Ok);
        assert_eq!(t.1[1].headers["grpc-previous-rpc-attempts"], "1");
    }

    /// Polls a future that never waits (the scripted exchange answers at once).
    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the scripted exchange never waits"),
        }
    }
}
