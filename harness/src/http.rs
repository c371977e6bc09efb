//! The client transport: one HTTP/1.1 connection per worker, straight on hyper.
//!
//! Why not a pooled client on the hot path: a load generator wants exactly `C` connections for
//! `--concurrency C`, each owned by one worker with no shared pool lock, no per-request URL parsing
//! and no hidden retry. That is how wrk reaches its numbers; a plain reqwest loop spends its time in
//! the pool and reaches about half. Failures are classified into the kinds the report counts.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Where requests go: `http://host:port` plus a base path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The URL as given.
    pub url: String,
    /// Resolved socket address.
    pub addr: SocketAddr,
    /// `Host` header value.
    pub authority: String,
    /// Path prefix joined to each request path (no trailing slash).
    pub base_path: String,
}

/// A target URL that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("invalid URL {url:?}: {reason}")]
    Invalid { url: String, reason: String },
    #[error("cannot resolve {url}: {source}")]
    Resolve { url: String, source: io::Error },
}

impl Target {
    /// Parses and resolves `http://host:port[/base]`.
    pub fn parse(url: &str) -> Result<Target, TargetError> {
        let invalid = |reason: &str| TargetError::Invalid {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| invalid(&e.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(invalid(
                    "https is not supported; point the harness at plain http",
                ))
            }
            _ => return Err(invalid("expected http://HOST:PORT")),
        }
        let authority = uri
            .authority()
            .ok_or_else(|| invalid("missing host"))?
            .clone();
        let port = authority.port_u16().unwrap_or(80);
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
            .map_err(|source| TargetError::Resolve {
                url: url.to_string(),
                source,
            })?
            .next()
            .ok_or_else(|| invalid("host resolves to no address"))?;
        Ok(Target {
            url: url.to_string(),
            addr,
            authority: authority.as_str().to_string(),
            base_path: uri.path().trim_end_matches('/').to_string(),
        })
    }

    /// The request URI for `path` (which starts with `/`).
    pub fn path(&self, path: &str) -> String {
        format!("{}{}", self.base_path, path)
    }
}

/// Why an attempt got no usable response.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The TCP connection could not be made.
    Connect,
    /// No response within the attempt's timeout.
    Timeout,
    /// The connection was reset (RST).
    Reset,
    /// The connection closed before a complete response.
    Closed,
    /// The response could not be parsed.
    Malformed,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// Every kind, in report order.
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Reset,
        ErrorKind::Closed,
        ErrorKind::Malformed,
        ErrorKind::Other,
    ];

    /// The name used in reports and scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::Closed => "closed",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Other => "other",
        }
    }

    /// Index into per-kind counters.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed attempt: its kind and the underlying message.
#[derive(Debug, Clone)]
pub struct AttemptError {
    pub kind: ErrorKind,
    pub message: String,
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// A complete response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// `Retry-After` as a duration from now (seconds or HTTP-date).
    pub fn retry_after(&self) -> Option<Duration> {
        let v = self
            .headers
            .get(http::header::RETRY_AFTER)?
            .to_str()
            .ok()?
            .trim();
        if let Ok(secs) = v.parse::<u64>() {
            return Some(Duration::from_secs(secs));
        }
        let when = httpdate::parse_http_date(v).ok()?;
        Some(
            when.duration_since(std::time::SystemTime::now())
                .unwrap_or(Duration::ZERO),
        )
    }
}

/// A request ready to send.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub method: Method,
    /// Path and query, already joined to the target's base path.
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// One HTTP/1.1 connection that reconnects when it breaks.
pub struct Conn {
    target: std::sync::Arc<Target>,
    host: HeaderValue,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    /// A connection to `target`, not yet open.
    pub fn new(target: std::sync::Arc<Target>) -> Conn {
        let host = HeaderValue::from_str(&target.authority)
            .unwrap_or(HeaderValue::from_static("localhost"));
        Conn {
            target,
            host,
            sender: None,
        }
    }

    /// Opens the TCP connection now (bursts open theirs before the release).
    pub async fn open(&mut self) -> Result<(), AttemptError> {
        if self.sender.as_ref().is_some_and(|s| !s.is_closed()) {
            return Ok(());
        }
        let stream = TcpStream::connect(self.target.addr)
            .await
            .map_err(|e| AttemptError {
                kind: ErrorKind::Connect,
                message: format!("{}: {e}", self.target.addr),
            })?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(classify)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        self.sender = Some(sender);
        Ok(())
    }

    /// Sends one request and reads the whole response, within `timeout`.
    pub async fn send(&mut self, req: &Outgoing, timeout: Duration) -> Result<Reply, AttemptError> {
        self.send_released(req, timeout, None).await
    }

    /// Like [`Conn::send`], but once the connection is ready and the request built, waits at
    /// `release` so that every member of a burst sends at the same instant.
    pub async fn send_released(
        &mut self,
        req: &Outgoing,
        timeout: Duration,
        release: Option<&tokio::sync::Barrier>,
    ) -> Result<Reply, AttemptError> {
        match tokio::time::timeout(timeout, self.send_inner(req, release)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                self.sender = None;
                Err(e)
            }
            Err(_) => {
                // The connection may still deliver the late response; never reuse it.
                self.sender = None;
                Err(AttemptError {
                    kind: ErrorKind::Timeout,
                    message: format!("no response within {timeout:?}"),
                })
            }
        }
    }

    async fn send_inner(
        &mut self,
        req: &Outgoing,
        release: Option<&tokio::sync::Barrier>,
    ) -> Result<Reply, AttemptError> {
        self.open().await?;
        let Some(sender) = self.sender.as_mut() else {
            return Err(AttemptError {
                kind: ErrorKind::Other,
                message: "connection unavailable".into(),
            });
        };
        sender.ready().await.map_err(classify)?;
        let mut builder = Request::builder()
            .method(req.method.clone())
            .uri(req.uri.as_str());
        if let Some(h) = builder.headers_mut() {
            h.clone_from(&req.headers);
            h.insert(http::header::HOST, self.host.clone());
        }
        let request = builder
            .body(Full::new(req.body.clone()))
            .map_err(|e| AttemptError {
                kind: ErrorKind::Other,
                message: e.to_string(),
            })?;
        if let Some(b) = release {
            b.wait().await;
        }
        let res = sender.send_request(request).await.map_err(classify)?;
        let (parts, body) = res.into_parts();
        let body = body.collect().await.map_err(classify)?.to_bytes();
        if parts
            .headers
            .get(http::header::CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"))
        {
            self.sender = None;
        }
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// Maps a hyper error to the kind the report counts.
pub fn classify(e: hyper::Error) -> AttemptError {
    let kind = if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
        ErrorKind::Malformed
    } else if has_io_kind(&e, io::ErrorKind::ConnectionReset) {
        ErrorKind::Reset
    } else if e.is_incomplete_message() || e.is_closed() || e.is_canceled() {
        ErrorKind::Closed
    } else if e.is_timeout() {
        ErrorKind::Timeout
    } else if has_io_kind(&e, io::ErrorKind::UnexpectedEof) || e.is_body_write_aborted() {
        ErrorKind::Closed
    } else {
        ErrorKind::Other
    };
    AttemptError {
        kind,
        message: chain(&e),
    }
}

fn has_io_kind(e: &(dyn std::error::Error + 'static), kind: io::ErrorKind) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == kind)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
