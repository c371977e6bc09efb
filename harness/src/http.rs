//! The client transport: one HTTP/1.1 connection per worker, straight on hyper.
//!
//! Why not a pooled client on the hot path: a load generator wants exactly `C` connections for
//! `--concurrency C`, each owned by one worker with no shared pool lock, no per-request URL parsing
//! and no hidden retry. That is how wrk reaches its numbers; a plain reqwest loop spends its time in
//! the pool and reaches about half. Failures are classified into the kinds the report counts.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Sleep;

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

/// hyper's state machine for one connection: it reads and writes the socket.
type Driver = http1::Connection<TokioIo<TcpStream>, Full<Bytes>>;

/// One HTTP/1.1 connection that reconnects when it breaks.
///
/// Why the connection is driven by the worker's own task rather than a spawned one: with a spawned
/// driver every request crosses tasks four times (request in, head out, body wanted, body out),
/// each a wake-up and a trip through the scheduler. Polling the driver in the same future that
/// waits for the response does the same work with none of those hand-offs.
pub struct Conn {
    target: std::sync::Arc<Target>,
    host: HeaderValue,
    sender: Option<SendRequest<Full<Bytes>>>,
    driver: Option<Pin<Box<Driver>>>,
    /// One timer for the connection's life, moved forward for each request: re-arming a later
    /// deadline is an atomic store, where a fresh `tokio::time::timeout` per request inserts into
    /// and removes from the runtime's shared timer wheel under its lock.
    timer: Option<Pin<Box<Sleep>>>,
    /// The last request URI, parsed: a load sends the same path again and again.
    last_uri: Option<(String, Uri)>,
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
            driver: None,
            timer: None,
            last_uri: None,
        }
    }

    /// Opens the TCP connection now (bursts open theirs before the release).
    pub async fn open(&mut self) -> Result<(), AttemptError> {
        self.poll_idle();
        if self.sender.as_ref().is_some_and(|s| !s.is_closed()) && self.driver.is_some() {
            return Ok(());
        }
        self.close();
        let stream = TcpStream::connect(self.target.addr)
            .await
            .map_err(|e| AttemptError {
                kind: ErrorKind::Connect,
                message: format!("{}: {e}", self.target.addr),
            })?;
        let _ = stream.set_nodelay(true);
        let (sender, driver) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(classify)?;
        self.sender = Some(sender);
        self.driver = Some(Box::pin(driver));
        Ok(())
    }

    /// Lets the driver see what happened while the connection was idle (the server may have
    /// closed it), without waiting; a finished driver means the connection is gone.
    fn poll_idle(&mut self) {
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        if d.as_mut().poll(&mut cx).is_ready() {
            self.close();
        }
    }

    fn close(&mut self) {
        self.sender = None;
        self.driver = None;
    }

    /// Sends one request and reads the whole response, within `timeout`.
    pub async fn send(&mut self, req: Outgoing, timeout: Duration) -> Result<Reply, AttemptError> {
        self.send_released(req, timeout, None).await
    }

    /// Like [`Conn::send`], but once the connection is ready and the request built, waits at
    /// `release` so that every member of a burst sends at the same instant.
    pub async fn send_released(
        &mut self,
        req: Outgoing,
        timeout: Duration,
        release: Option<&tokio::sync::Barrier>,
    ) -> Result<Reply, AttemptError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut timer = match self.timer.take() {
            Some(mut t) => {
                t.as_mut().reset(deadline);
                t
            }
            None => Box::pin(tokio::time::sleep_until(deadline)),
        };
        let result = tokio::select! {
            biased;
            r = self.send_inner(req, release) => Some(r),
            _ = timer.as_mut() => None,
        };
        self.timer = Some(timer);
        match result {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => {
                self.close();
                Err(e)
            }
            None => {
                // The connection may still deliver the late response; never reuse it.
                self.close();
                Err(AttemptError {
                    kind: ErrorKind::Timeout,
                    message: format!("no response within {timeout:?}"),
                })
            }
        }
    }

    async fn send_inner(
        &mut self,
        req: Outgoing,
        release: Option<&tokio::sync::Barrier>,
    ) -> Result<Reply, AttemptError> {
        self.open().await?;
        let uri = match &self.last_uri {
            Some((s, u)) if *s == req.uri => u.clone(),
            _ => {
                let u = Uri::try_from(req.uri.as_str()).map_err(|e| AttemptError {
                    kind: ErrorKind::Other,
                    message: e.to_string(),
                })?;
                self.last_uri = Some((req.uri, u.clone()));
                u
            }
        };
        let mut request = Request::new(Full::new(req.body));
        *request.method_mut() = req.method;
        *request.uri_mut() = uri;
        *request.headers_mut() = req.headers;
        request
            .headers_mut()
            .insert(http::header::HOST, self.host.clone());
        let Some(sender) = self.sender.as_mut() else {
            return Err(AttemptError {
                kind: ErrorKind::Other,
                message: "connection unavailable".into(),
            });
        };
        let exchange = async move {
            sender.ready().await.map_err(classify)?;
            if let Some(b) = release {
                b.wait().await;
            }
            let res = sender.send_request(request).await.map_err(classify)?;
            let (parts, body) = res.into_parts();
            let body = body.collect().await.map_err(classify)?.to_bytes();
            Ok::<_, AttemptError>((parts, body))
        };
        let (parts, body) = drive(exchange, &mut self.driver).await?;
        if self.driver.is_none()
            || parts
                .headers
                .get(http::header::CONNECTION)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"))
        {
            self.close();
        }
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// Runs `work` to completion while polling the connection's driver in the same task. A driver
/// that finishes first (the connection closed) is dropped, which fails whatever `work` still waits
/// for.
async fn drive<F: Future>(work: F, driver: &mut Option<Pin<Box<Driver>>>) -> F::Output {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        // A response takes a few hand-offs between the two (request queued, head parsed, body
        // wanted, body delivered); alternating a few times here saves a reschedule for each.
        for _ in 0..4 {
            if let Poll::Ready(out) = work.as_mut().poll(cx) {
                return Poll::Ready(out);
            }
            let Some(d) = driver.as_mut() else {
                return Poll::Pending;
            };
            if d.as_mut().poll(cx).is_ready() {
                *driver = None;
            }
        }
        Poll::Pending
    })
    .await
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
