//! The client transport: one connection per worker, spoken directly over TCP or TLS — the one
//! HTTP client of the project: the harness's load driver, probe and verify step send through it,
//! and so does the fault server in proxy mode, to the real dependency behind it.
//!
//! Why not a pooled client on the hot path: a load generator wants exactly `C` connections for
//! `--concurrency C`, each owned by one worker with no shared pool lock, no per-request URL parsing
//! and no hidden retry. That is how wrk reaches its numbers; a plain reqwest loop spends its time in
//! the pool and reaches about half.
//!
//! Why not hyper's connection-level client either: with one request in flight per connection, no
//! upgrades, no pipelining and no streamed bodies, what remains of a general client is its
//! machinery — the request channel into the connection's dispatcher, the oneshot the response comes
//! back on, the wake-ups between the two halves. On hyper the client spent more than twice wrk's
//! CPU per request, and in profiles that machinery, not HTTP, was where its user-space time went.
//! Here a request is serialized into a reused buffer and written with one write; the response is
//! read into a reused buffer, its head parsed in place by `httparse`, and its head and (sized) body
//! split off as shared `Bytes` without copying. Failures are classified into the kinds the report
//! counts.

//!
//! - [`http1`]: HTTP/1.1, the hot path: one request in flight per connection.
//! - [`http2`]: HTTP/2, framed here (`h2conn/`) with header blocks encoded and decoded here
//!   (`hpack/`, the Huffman code's decoding `loona-hpack`'s), `--streams` workers per connection; a burst's streams
//!   spread over as many connections as the server's stream limit needs ([`http2::Burst`]).
//! - [`release`]: the instant a burst's members send together.
//! - [`stream`]: the byte stream under it — plain TCP, or TLS through rustls ([`tls`]).
//!
//! Why the client is strict: it is the instrument a verdict is read from. An answer that breaks
//! a MUST of HTTP/1.1, HTTP/2 or HPACK, or one of the client's limits (the header list size,
//! SETTINGS_MAX_HEADER_LIST_SIZE, 64 KiB by default; a body against its content-length; the
//! flow-control windows), fails its attempt as `protocol`, never a panic and never more memory
//! than the limit; a stream the server provably did not process (REFUSED_STREAM, above a
//! GOAWAY's last stream) fails as `refused`, which is safe to retry whatever the method.
//!
//! *Invariant:* knows nothing of scenarios, policies, checks or servers; `history` only for the
//! error kinds a report counts.

#![warn(missing_docs)]

#[doc(hidden)]
pub mod fuzz;
pub use h2conn::StreamIdHasher;
mod h2conn;
mod hpack;
pub mod http1;
pub mod http2;
pub mod release;
pub mod stream;
mod timer;
pub mod tls;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use history::ErrorKind;
use http::{HeaderMap, Method, StatusCode};

use crate::tls::{ClientTls, TlsOptions, TlsSetupError};

/// Where requests go: `http://` or `https://host:port` plus a base path, resolved once.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URL as given.
    pub url: String,
    /// Resolved socket address.
    pub addr: SocketAddr,
    /// The host as named in the URL (without brackets or port): TLS's server name.
    pub host: String,
    /// `Host` header value.
    pub authority: String,
    /// Path prefix joined to each request path (no trailing slash).
    pub base_path: String,
    /// TLS, for `https://`.
    pub tls: Option<ClientTls>,
    /// The local address connections are made from, when set.
    pub source: Option<std::net::IpAddr>,
    /// Speak HTTP/2: ALPN `h2` over TLS, prior knowledge (h2c) over plain TCP. The pool puts
    /// `streams` workers on each connection.
    pub http2: Option<Arc<http2::Pool>>,
    /// Largest response body read; a longer one fails its attempt as `malformed`.
    pub max_body: u64,
    /// Largest header list an answer's head (or trailers) may decode to, in RFC 7541 §4.1
    /// sizes; advertised as HTTP/2's SETTINGS_MAX_HEADER_LIST_SIZE. A larger one fails its
    /// attempt as `protocol`.
    pub max_header_list: usize,
    /// HTTP/2: how often a connection is looked at (a PING when it went silent under open
    /// streams; failed when the PING is still unanswered at the next look).
    pub keepalive: Duration,
    /// HTTP/2: a connection with no open stream for this long is closed.
    pub idle_timeout: Duration,
}

/// How to reach a target besides its URL: TLS settings and the protocol.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connect {
    /// TLS settings (for `https://`).
    pub tls: TlsOptions,
    /// Speak HTTP/2.
    pub http2: bool,
    /// Concurrent streams (workers) per HTTP/2 connection (0 = 1).
    pub streams: u32,
    /// The local address connections are made from (`--source-addr`): a shard of a run on one
    /// machine can have an address of its own, as it would have a pod's.
    pub source: Option<std::net::IpAddr>,
    /// Largest response body read ([`DEFAULT_MAX_BODY`] when `None`): a server that answers
    /// without end must not take the client's memory with it.
    pub max_body: Option<u64>,
    /// Largest header list an answer may have ([`DEFAULT_MAX_HEADER_LIST`] when `None`; at most
    /// [`MAX_HEADER_LIST`]): HTTP/2's SETTINGS_MAX_HEADER_LIST_SIZE, and the same bound on an
    /// HTTP/1.1 head.
    pub max_header_list: Option<usize>,
    /// HTTP/2 keep-alive look interval ([`DEFAULT_KEEPALIVE`] when `None`).
    pub keepalive: Option<Duration>,
    /// HTTP/2 idle timeout ([`DEFAULT_IDLE_TIMEOUT`] when `None`).
    pub idle_timeout: Option<Duration>,
}

/// A target URL that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Not an `http(s)://HOST[:PORT]` URL.
    #[error("invalid URL {url:?}: {reason}")]
    Invalid {
        /// The URL as given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The host does not resolve.
    #[error("cannot resolve {url}: {source}")]
    Resolve {
        /// The URL as given.
        url: String,
        /// The resolver's error.
        source: io::Error,
    },
    /// The TLS settings cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    /// A limit of [`Connect`] out of its bounds.
    #[error("{0}")]
    Limit(String),
}

impl Target {
    /// Parses and resolves `http(s)://host[:port][/base]` with the default settings (HTTP/1.1;
    /// for `https://`, the public roots).
    pub fn parse(url: &str) -> Result<Target, TargetError> {
        Target::with(url, &Connect::default())
    }

    /// Parses and resolves `url`, reached as `how` says.
    pub fn with(url: &str, how: &Connect) -> Result<Target, TargetError> {
        let invalid = |reason: &str| TargetError::Invalid {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| invalid(&e.to_string()))?;
        let (tls, default_port) = match uri.scheme_str() {
            Some("http") => (None, 80),
            Some("https") => (Some(ClientTls::new(&how.tls, how.http2)?), 443),
            Some(other) => {
                return Err(invalid(&format!(
                    "the scheme {other}:// is not one this takes: http://HOST:PORT or \
                     https://HOST:PORT"
                )))
            }
            None => return Err(invalid("expected http://HOST:PORT or https://HOST:PORT")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| invalid("missing host"))?
            .clone();
        if authority.as_str().contains('@') {
            return Err(invalid(
                "credentials in the URL are not supported; send an Authorization header instead",
            ));
        }
        // The text after the host's last `:` (not inside an IPv6 literal's brackets): a port
        // the URI type cannot hold (over 65535) is no port at all to it, not a reason to refuse.
        let written_port = authority
            .as_str()
            .rsplit_once(':')
            .map(|(_, p)| p)
            .filter(|p| !p.contains(']'));
        let port = match (authority.port_u16(), written_port) {
            (Some(0), _) => return Err(invalid("port 0: expected a port from 1 to 65535")),
            (Some(p), _) => p,
            (None, Some(p)) if !p.is_empty() => {
                return Err(invalid(&format!(
                    "port {p}: expected a port from 1 to 65535"
                )))
            }
            (None, _) => default_port,
        };
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if host.is_empty() {
            return Err(invalid("missing host"));
        }
        let max_header_list = how.max_header_list.unwrap_or(DEFAULT_MAX_HEADER_LIST);
        if !(1024..=MAX_HEADER_LIST).contains(&max_header_list) {
            return Err(TargetError::Limit(format!(
                "a header list limit of {max_header_list} bytes: give 1 KiB to {} MiB",
                MAX_HEADER_LIST >> 20
            )));
        }
        let keepalive = how.keepalive.unwrap_or(DEFAULT_KEEPALIVE);
        let idle_timeout = how.idle_timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT);
        if keepalive.is_zero() || idle_timeout.is_zero() {
            return Err(TargetError::Limit(
                "the HTTP/2 keep-alive interval and idle timeout must be longer than 0".into(),
            ));
        }
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
            host,
            authority: authority.as_str().to_string(),
            base_path: uri.path().trim_end_matches('/').to_string(),
            tls,
            source: how.source,
            http2: how.http2.then(|| Arc::new(http2::Pool::new(how.streams))),
            max_body: how.max_body.unwrap_or(DEFAULT_MAX_BODY),
            max_header_list,
            keepalive,
            idle_timeout,
        })
    }

    /// A TCP connection to the target, from the source address when one is set.
    pub async fn connect_tcp(&self) -> io::Result<tokio::net::TcpStream> {
        let Some(ip) = self.source else {
            return tokio::net::TcpStream::connect(self.addr).await;
        };
        let socket = match (ip, self.addr) {
            (std::net::IpAddr::V4(_), SocketAddr::V4(_)) => tokio::net::TcpSocket::new_v4()?,
            (std::net::IpAddr::V6(_), SocketAddr::V6(_)) => tokio::net::TcpSocket::new_v6()?,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "source address {ip} and target {} are of different IP versions",
                        self.addr
                    ),
                ))
            }
        };
        socket.bind(SocketAddr::new(ip, 0)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot bind the source address {ip}: {e}"),
            )
        })?;
        socket.connect(self.addr).await
    }

    /// The request URI for `path` (which starts with `/`).
    pub fn path(&self, path: &str) -> String {
        // Per request: two copies, not the formatting machinery.
        let mut full = String::with_capacity(self.base_path.len() + path.len());
        full.push_str(&self.base_path);
        full.push_str(path);
        full
    }

    /// `https://` or `http://`, and the authority: where relative URLs resolve.
    pub fn origin(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.authority)
    }
}

/// A worker's connection to a target: HTTP/1.1 of its own, or a stream on a shared HTTP/2
/// connection. It reconnects when the connection breaks.
pub enum Conn {
    /// HTTP/1.1, one request in flight.
    H1(http1::H1Conn),
    /// HTTP/2, a stream of a pooled connection per request.
    H2(http2::H2Conn),
}

impl Conn {
    /// A connection to `target`, not yet open.
    pub fn new(target: Arc<Target>) -> Conn {
        match target.http2.clone() {
            Some(pool) => Conn::H2(http2::H2Conn::new(&target, &pool)),
            None => Conn::H1(http1::H1Conn::new(target)),
        }
    }

    /// Another connection to the same target, for a request sent while this one's is still
    /// out: over HTTP/2 another stream on the same connection, over HTTP/1.1 a connection of
    /// its own.
    pub fn sibling(&self) -> Conn {
        match self {
            Conn::H1(c) => Conn::H1(c.sibling()),
            Conn::H2(c) => Conn::H2(c.sibling()),
        }
    }

    /// Opens the connection now (bursts open theirs before the release).
    pub async fn open(&mut self) -> Result<(), AttemptError> {
        match self {
            Conn::H1(c) => c.open().await,
            Conn::H2(c) => c.open().await,
        }
    }

    /// Sends one request and reads the whole response, within `timeout`.
    pub async fn send(&mut self, req: Outgoing, timeout: Duration) -> Result<Reply, AttemptError> {
        // The request stays here; the futures below borrow it.
        self.send_ref(&req, timeout).await
    }

    /// [`Conn::send`] of a request the caller keeps (to record what it sent, say).
    pub async fn send_ref(
        &mut self,
        req: &Outgoing,
        timeout: Duration,
    ) -> Result<Reply, AttemptError> {
        match self {
            Conn::H1(c) => c.send_ref(req, timeout, None, false).await,
            Conn::H2(c) => c.send_ref(req, timeout).await,
        }
    }

    /// Like [`Conn::send`], but waits at `release` once everything is ready, so that every
    /// member of a burst sends at the same instant. With `last_byte` (HTTP/1.1), everything but
    /// the request's last byte is written before the wait, and only that byte after it.
    pub async fn send_released(
        &mut self,
        req: Outgoing,
        timeout: Duration,
        release: Option<&release::Release>,
        last_byte: bool,
    ) -> Result<Reply, AttemptError> {
        match self {
            Conn::H1(c) => c.send_ref(&req, timeout, release, last_byte).await,
            Conn::H2(c) => {
                if let Some(b) = release {
                    if let Err(e) = c.open().await {
                        b.wait().await;
                        return Err(e);
                    }
                    b.wait().await;
                }
                c.send_ref(&req, timeout).await
            }
        }
    }

    /// Sends `req` whole — at `release` when given, with only its last byte waiting there when
    /// `last_byte` (HTTP/1.1) — then gives up its answer unread: over HTTP/1.1 the connection is
    /// closed, over HTTP/2 the stream is reset. The server had the whole request and processes
    /// it; its answer is lost on the way back, as when a client times out just after sending.
    pub async fn send_unanswered(
        &mut self,
        req: &Outgoing,
        timeout: Duration,
        release: Option<&release::Release>,
        last_byte: bool,
    ) -> Result<(), AttemptError> {
        match self {
            Conn::H1(c) => c.send_unanswered(req, timeout, release, last_byte).await,
            Conn::H2(c) => {
                if let Some(b) = release {
                    if let Err(e) = c.open().await {
                        b.wait().await;
                        return Err(e);
                    }
                    b.wait().await;
                }
                c.send_unanswered(req, timeout).await
            }
        }
    }

    /// When the last request sent with a release point finished leaving (HTTP/1.1).
    pub fn released_at(&self) -> Option<std::time::Instant> {
        match self {
            Conn::H1(c) => c.released_at(),
            Conn::H2(_) => None,
        }
    }
}

/// A failed attempt: its kind and the underlying message.
#[derive(Debug, Clone)]
pub struct AttemptError {
    /// What kind of failure, as the report counts it.
    pub kind: ErrorKind,
    /// The underlying message.
    pub message: String,
}

impl AttemptError {
    /// The response's body was longer than the target's [`Target::max_body`].
    pub fn is_over_limit(&self) -> bool {
        self.kind == ErrorKind::Malformed && self.message.starts_with(OVER_LIMIT)
    }
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// A complete response.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
    /// The trailer fields after the body, when the answer had any (HTTP/2 trailers, or a
    /// chunked HTTP/1.1 body's trailer section): gRPC's status is there.
    pub trailers: Option<HeaderMap>,
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
    /// The method.
    pub method: Method,
    /// Path and query, already joined to the target's base path.
    pub uri: String,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// Whether any of the comma-separated values of `name` is `token` (case-insensitively).
pub(crate) fn has_token(headers: &HeaderMap, name: http::header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// Whether the last of the comma-separated values of `name` is `token` (case-insensitively).
pub(crate) fn last_token_is(
    headers: &HeaderMap,
    name: http::header::HeaderName,
    token: &str,
) -> bool {
    headers
        .get_all(name)
        .iter()
        .next_back()
        .and_then(|v| v.as_bytes().rsplit(|&b| b == b',').next())
        .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Largest response body read when [`Connect::max_body`] does not say.
pub const DEFAULT_MAX_BODY: u64 = 64 << 20;

/// Largest header list an answer may have when [`Connect::max_header_list`] does not say.
pub const DEFAULT_MAX_HEADER_LIST: usize = 64 << 10;

/// The largest header list limit [`Connect::max_header_list`] may set.
pub const MAX_HEADER_LIST: usize = 16 << 20;

/// HTTP/2 keep-alive look interval when [`Connect::keepalive`] does not say.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(20);

/// HTTP/2 idle timeout when [`Connect::idle_timeout`] does not say.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How an over-long body's error message starts (see [`AttemptError::is_over_limit`]).
const OVER_LIMIT: &str = "response body over the limit of";

pub(crate) fn over_limit(max: u64) -> AttemptError {
    malformed(format!("{OVER_LIMIT} {max} bytes"))
}

pub(crate) fn malformed(message: String) -> AttemptError {
    AttemptError {
        kind: ErrorKind::Malformed,
        message,
    }
}

pub(crate) fn protocol(message: String) -> AttemptError {
    AttemptError {
        kind: ErrorKind::Protocol,
        message,
    }
}

pub(crate) fn closed(message: &str) -> AttemptError {
    AttemptError {
        kind: ErrorKind::Closed,
        message: message.to_string(),
    }
}

/// Maps a socket error to the kind the report counts: a reset (RST) shows as
/// `ConnectionReset` on a read, and as any of the three on a write.
pub(crate) fn io_failure(doing: &str, e: io::Error) -> AttemptError {
    let kind = match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => ErrorKind::Reset,
        io::ErrorKind::UnexpectedEof | io::ErrorKind::WriteZero => ErrorKind::Closed,
        _ => ErrorKind::Other,
    };
    AttemptError {
        kind,
        message: format!("{doing}: {e}"),
    }
}
