//! The probe's HTTP/1.1 client: one request per connection, the connection opened ahead of the send.
//!
//! Why not a pooled client such as reqwest: a pool decides for itself when to connect, so ten
//! "concurrent" sends queue behind ten TCP handshakes and reach the server spread over milliseconds,
//! which is enough for a racy SELECT-then-INSERT to look correct. Here every connection is opened
//! and handshaken first and the request is only handed to it when the burst is released, so the
//! sends leave within microseconds of each other.

use std::io;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

/// Response bodies are read up to this size: the probe only needs an `id`, and an endpoint that
/// streams without end must not exhaust memory.
const MAX_BODY: usize = 1 << 20;

/// Where requests go: an `http://` URL taken apart once.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// The URL as given.
    pub(crate) url: String,
    /// Host to connect to (an IPv6 literal without its brackets).
    pub(crate) host: String,
    /// Port to connect to (80 when the URL names none).
    pub(crate) port: u16,
    /// Value of the `Host` header.
    pub(crate) host_header: String,
    /// Path and query: the request target.
    pub(crate) path: String,
}

impl Endpoint {
    /// Parses an absolute `http://` URL; the error says what is wrong and what would work.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("not a URL ({e}); expected e.g. http://127.0.0.1:8080/orders"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(
                    "https is not supported: the probe speaks plain HTTP/1.1 so it can \
                            release requests at the socket; point it at an http:// address (the \
                            service behind its TLS terminator, or a port-forward)"
                        .to_string(),
                )
            }
            Some(other) => return Err(format!("unsupported scheme {other}://; use http://")),
            None => {
                return Err(
                    "not an absolute URL; expected e.g. http://127.0.0.1:8080/orders".to_string(),
                )
            }
        }
        let authority = uri
            .authority()
            .ok_or_else(|| "the URL has no host".to_string())?;
        if authority.as_str().contains('@') {
            return Err(
                "credentials in the URL are not supported; pass an Authorization header \
                        instead"
                    .to_string(),
            );
        }
        let bracketed = authority.host();
        if bracketed.is_empty() {
            return Err("the URL has no host".to_string());
        }
        let host = bracketed
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(bracketed)
            .to_string();
        let host_header = match authority.port_u16() {
            Some(p) => format!("{bracketed}:{p}"),
            None => bracketed.to_string(),
        };
        Ok(Endpoint {
            url: url.to_string(),
            host,
            port: authority.port_u16().unwrap_or(80),
            host_header,
            path: uri
                .path_and_query()
                .map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
        })
    }

    /// `http://host[:port]`, to resolve URLs given as a path.
    pub(crate) fn origin(&self) -> String {
        format!("http://{}", self.host_header)
    }
}

/// An open, handshaken connection that carries exactly one request.
pub(crate) struct Conn {
    sender: SendRequest<Full<Bytes>>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The driver task owns the socket; ending it closes the connection even when the server
        // keeps it alive or never answered.
        self.driver.abort();
    }
}

/// Opens a TCP connection to `ep` and readies it for one request. Errors are the OS's (or a
/// timeout), so the caller can report an unreachable target as it is.
pub(crate) async fn connect(ep: &Endpoint, timeout: Duration) -> io::Result<Conn> {
    let stream = match tokio::time::timeout(
        timeout,
        TcpStream::connect((ep.host.as_str(), ep.port)),
    )
    .await
    {
        Ok(r) => r?,
        Err(_) => {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connect timed out after {timeout:?}"),
            ))
        }
    };
    // A request is one small write; Nagle's algorithm would hold part of it back and blur the
    // release.
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(io::Error::other)?;
    let driver = tokio::spawn(async move {
        // Its error, if any, surfaces through the response future.
        let _ = connection.await;
    });
    let mut conn = Conn { sender, driver };
    // Waiting for readiness here keeps that work out of the timed section after the release.
    conn.sender.ready().await.map_err(io::Error::other)?;
    Ok(conn)
}

/// Why a request got no usable response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportError {
    /// `timeout`, `reset`, `closed`, `malformed` or `other` (the report's `errors_by_kind`).
    pub kind: String,
    /// The client library's message.
    pub message: String,
}

/// One request and what came back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// HTTP status, or `None` when no response came.
    pub status: Option<u16>,
    /// The response body's JSON `id` field (a string, or a number written out).
    pub id: Option<String>,
    /// The `Location` header.
    pub location: Option<String>,
    /// Whether `Idempotent-Replayed: true` was present.
    pub replayed: bool,
    /// The `Retry-After` header, verbatim.
    pub retry_after: Option<String>,
    /// From the send to the last body byte (or to the failure), in milliseconds.
    pub latency_ms: f64,
    /// When the request was sent, in µs after the burst's connections were ready.
    pub sent_at_us: u64,
    /// Why no response came, when none did.
    pub error: Option<TransportError>,
}

impl Exchange {
    /// The created resource's identity: its `id`, else its `Location`.
    pub fn resource(&self) -> Option<&str> {
        self.id.as_deref().or(self.location.as_deref())
    }

    /// A 2xx response.
    pub fn is_success(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }

    /// A 5xx response.
    pub fn is_server_error(&self) -> bool {
        self.status.is_some_and(|s| (500..600).contains(&s))
    }

    /// The status as the report spells it (`"201"`), or `no response (kind)`.
    pub fn describe(&self) -> String {
        match (self.status, &self.error) {
            (Some(s), _) => s.to_string(),
            (None, Some(e)) => format!("no response ({})", e.kind),
            (None, None) => "no response".to_string(),
        }
    }
}

enum Failure {
    Http(hyper::Error),
    Body(Box<dyn std::error::Error + Send + Sync>),
}

impl Conn {
    /// Sends `req` and reads the whole response within `timeout`. `origin` anchors `sent_at_us`.
    pub(crate) async fn send(
        mut self,
        req: Request<Full<Bytes>>,
        timeout: Duration,
        origin: Instant,
    ) -> Exchange {
        let sent = Instant::now();
        let result = self.round_trip(req, timeout).await;
        let mut ex = Exchange {
            latency_ms: sent.elapsed().as_secs_f64() * 1000.0,
            sent_at_us: u64::try_from(sent.saturating_duration_since(origin).as_micros())
                .unwrap_or(u64::MAX),
            ..Exchange::default()
        };
        match result {
            Ok(Ok((parts, body))) => {
                let header = |name: &str| {
                    parts
                        .headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(|v| v.trim().to_string())
                };
                ex.status = Some(parts.status.as_u16());
                ex.location = header("location");
                ex.retry_after = header("retry-after");
                ex.replayed =
                    header("idempotent-replayed").is_some_and(|v| v.eq_ignore_ascii_case("true"));
                ex.id = resource_id(&body);
            }
            Ok(Err(Failure::Http(e))) => ex.error = Some(classify(&e)),
            Ok(Err(Failure::Body(e))) => {
                ex.error = Some(TransportError {
                    kind: body_error_kind(e.as_ref()).to_string(),
                    message: chain(e.as_ref()),
                })
            }
            Err(_) => {
                ex.error = Some(TransportError {
                    kind: "timeout".to_string(),
                    message: format!("no complete response within {timeout:?}"),
                })
            }
        }
        ex
    }

    /// Sends `req` and returns the status and body, or why there was none, in words.
    pub(crate) async fn fetch(
        mut self,
        req: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<(u16, Bytes), String> {
        match self.round_trip(req, timeout).await {
            Ok(Ok((parts, body))) => Ok((parts.status.as_u16(), body)),
            Ok(Err(Failure::Http(e))) => Err(chain(&e)),
            Ok(Err(Failure::Body(e))) => Err(chain(e.as_ref())),
            Err(_) => Err(format!("no complete response within {timeout:?}")),
        }
    }

    async fn round_trip(
        &mut self,
        req: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<Result<(http::response::Parts, Bytes), Failure>, tokio::time::error::Elapsed> {
        tokio::time::timeout(timeout, async {
            let resp = self.sender.send_request(req).await.map_err(Failure::Http)?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, MAX_BODY)
                .collect()
                .await
                .map_err(Failure::Body)?
                .to_bytes();
            Ok((parts, body))
        })
        .await
    }
}

/// The JSON body's top-level `id`, if the body is JSON and has one.
fn resource_id(body: &Bytes) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    match v.get("id")? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn classify(e: &hyper::Error) -> TransportError {
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_parse() || e.is_parse_status() {
        "malformed"
    } else if io_kind(e) == Some(io::ErrorKind::ConnectionReset) {
        "reset"
    } else if e.is_incomplete_message() || e.is_closed() || e.is_canceled() {
        "closed"
    } else {
        "other"
    };
    TransportError {
        kind: kind.to_string(),
        message: chain(e),
    }
}

fn body_error_kind(e: &(dyn std::error::Error + 'static)) -> &'static str {
    if let Some(h) = e.downcast_ref::<hyper::Error>() {
        // A body cut short is how a truncated response shows; a reset mid-body is still a reset.
        if io_kind(h) == Some(io::ErrorKind::ConnectionReset) {
            return "reset";
        }
        return "malformed";
    }
    // `Limited` refused a body over MAX_BODY.
    "other"
}

fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        cur = err.source();
    }
    None
}

/// Every message in an error's source chain, so the OS's words reach the user.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let msg = c.to_string();
        if !s.contains(&msg) {
            s.push_str(": ");
            s.push_str(&msg);
        }
        cur = c.source();
    }
    s
}
