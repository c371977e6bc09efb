//! Proxy mode over HTTP/2 (`upstream: grpc://…` or `grpcs://…`): what gRPC needs of a proxy —
//! one multiplexed connection carrying many calls, trailers relayed, `te: trailers` kept.
//!
//! Why the h2 crate's client and not the project's `transport`: the fault server already serves
//! HTTP/2 on h2, and a forward here must read a whole answer, trailers included, with the same
//! bounds as the HTTP/1.1 pool — which h2's `RecvStream` gives, chunk by chunk, with its
//! flow-control window released as each chunk is granted memory.
//!
//! Bounds, as for HTTP/1.1: at most `upstream.max_connections` connections (here each carries
//! as many concurrent streams as the upstream allows; a new connection is opened only when every
//! open one is full), a forward waits for room within `upstream.timeout`, an answer's body is
//! read within `limits.max_body` and granted from `limits.response_memory` as it arrives. A
//! forward whose client goes away is dropped with its request's future: h2 resets its stream.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use http::header::{self, HeaderName};
use http::{HeaderMap, Method, Request, Uri};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use transport::tls::{ClientTls, TlsOptions};

use super::UpstreamFailure;
use crate::config::UpstreamConfig;

/// One connection to the upstream.
struct Conn {
    send: SendRequest<Bytes>,
    /// Streams of ours open on it.
    in_flight: AtomicUsize,
    /// Its driver ended (the upstream closed it, or it broke).
    closed: Arc<AtomicBool>,
    _permit: OwnedSemaphorePermit,
}

/// A stream counted on its connection until dropped.
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The HTTP/2 connections to the upstream.
pub(crate) struct H2Pool {
    /// `http` or `https`, for the `:scheme` the upstream is sent.
    scheme: &'static str,
    authority: String,
    host: String,
    prefix: String,
    tls: Option<ClientTls>,
    connect_timeout: Duration,
    timeout: Duration,
    conns: Mutex<Vec<Arc<Conn>>>,
    /// A permit per open connection (`upstream.max_connections`).
    open: Arc<Semaphore>,
    /// Signalled when a connection opened or failed to, for forwards waiting for one.
    changed: Notify,
    max_connections: usize,
    /// Largest answer body read (`limits.max_body`).
    max_body: u64,
    /// The answers' memory budget (`limits.response_memory`), shared with the HTTP/1.1 forwards.
    memory: Arc<Semaphore>,
}

/// The upstream's whole answer, as read.
pub(crate) struct H2Answer {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) trailers: Option<HeaderMap>,
    pub(crate) held: Option<OwnedSemaphorePermit>,
}

/// Headers HTTP/2 forbids (RFC 9113 §8.2.2), and the ones the forward sets anew.
static CONNECTION_SPECIFIC: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HOST,
];

impl H2Pool {
    /// A pool of at most `max_connections` connections to `cfg.url`, reading answers of at most
    /// `max_body` bytes within the `memory` budget.
    pub(crate) fn new(
        cfg: &UpstreamConfig,
        max_connections: usize,
        max_body: u64,
        memory: Arc<Semaphore>,
    ) -> Result<H2Pool, transport::tls::TlsSetupError> {
        let tls = if cfg.url.tls {
            let opts = TlsOptions {
                ca: cfg.ca.clone(),
                ..TlsOptions::default()
            };
            Some(ClientTls::new(&opts, true)?)
        } else {
            None
        };
        Ok(H2Pool {
            scheme: if cfg.url.tls { "https" } else { "http" },
            authority: cfg.url.authority.clone(),
            host: cfg.url.host.clone(),
            prefix: cfg.url.prefix.clone(),
            tls,
            connect_timeout: cfg.connect_timeout.0,
            timeout: cfg.timeout.0,
            conns: Mutex::new(Vec::new()),
            open: Arc::new(Semaphore::new(max_connections.max(1))),
            changed: Notify::new(),
            max_connections: max_connections.max(1),
            max_body,
            memory,
        })
    }

    /// A connection with room for one more stream: the least busy open one, a new one when every
    /// open one is full and fewer than `max_connections` are open, else the least busy, whose
    /// readiness the caller waits for; while the only connections are still being opened, the
    /// first of them to open (within `deadline`).
    async fn checkout(&self, deadline: tokio::time::Instant) -> Result<InFlight, UpstreamFailure> {
        loop {
            // Registered before looking, so a connection opened in between is not missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (least, roomy) = {
                let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
                conns.retain(|c| !c.closed.load(Ordering::Acquire));
                let least = conns
                    .iter()
                    .min_by_key(|c| c.in_flight.load(Ordering::Acquire))
                    .cloned();
                let roomy = least.as_ref().is_some_and(|c| {
                    c.in_flight.load(Ordering::Acquire) < c.send.current_max_send_streams().max(1)
                });
                (least, roomy)
            };
            let conn = match (least, roomy) {
                (Some(c), true) => Some(c),
                (least, _) => match self.open.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let opened = self.connect(permit).await;
                        // Whether it opened or not, those waiting may look again.
                        self.changed.notify_waiters();
                        Some(opened?)
                    }
                    Err(_) => least,
                },
            };
            if let Some(conn) = conn {
                conn.in_flight.fetch_add(1, Ordering::AcqRel);
                return Ok(InFlight(conn));
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(UpstreamFailure::Busy(self.timeout, self.max_connections));
                }
            }
        }
    }

    /// Opens a connection (TCP, TLS with ALPN `h2` for `grpcs://`, the HTTP/2 handshake) and
    /// adds it to the pool.
    async fn connect(&self, permit: OwnedSemaphorePermit) -> Result<Arc<Conn>, UpstreamFailure> {
        let opened = tokio::time::timeout(self.connect_timeout, async {
            let tcp = TcpStream::connect(&self.authority)
                .await
                .map_err(|e| UpstreamFailure::Connect(format!("{}: {e}", self.authority)))?;
            let _ = tcp.set_nodelay(true);
            let closed = Arc::new(AtomicBool::new(false));
            let send = match &self.tls {
                None => self.handshake(tcp, closed.clone()).await?,
                Some(tls) => {
                    let (stream, h2) = tls
                        .handshake(&self.host, tcp)
                        .await
                        .map_err(|e| UpstreamFailure::Connect(e.message))?;
                    if !h2 {
                        return Err(UpstreamFailure::Connect(format!(
                            "{} did not agree to HTTP/2 (ALPN h2), which gRPC needs",
                            self.authority
                        )));
                    }
                    self.handshake(stream, closed.clone()).await?
                }
            };
            Ok::<_, UpstreamFailure>((send, closed))
        })
        .await
        .map_err(|_| {
            UpstreamFailure::Connect(format!("no connection within {:?}", self.connect_timeout))
        })?;
        let (send, closed) = opened?;
        let conn = Arc::new(Conn {
            send,
            in_flight: AtomicUsize::new(0),
            closed,
            _permit: permit,
        });
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(conn.clone());
        Ok(conn)
    }

    /// The HTTP/2 handshake over `io`; the connection is driven by a task of its own, which
    /// marks it `closed` when it ends.
    async fn handshake<T>(
        &self,
        io: T,
        closed: Arc<AtomicBool>,
    ) -> Result<SendRequest<Bytes>, UpstreamFailure>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(1 << 20)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|e| UpstreamFailure::Connect(format!("HTTP/2 handshake: {e}")))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("upstream HTTP/2 connection ended: {e}");
            }
            closed.store(true, Ordering::Release);
        });
        Ok(send)
    }

    /// Sends the request on a stream and reads the whole answer, trailers included, by
    /// `deadline`; the body within the pool's `max_body`, its memory granted from its budget.
    pub(crate) async fn forward(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: Bytes,
        deadline: tokio::time::Instant,
    ) -> Result<H2Answer, UpstreamFailure> {
        let (max_body, memory) = (self.max_body, &self.memory);
        let pq = uri.path_and_query().map_or("/", |p| p.as_str());
        let target = format!("{}://{}{}{pq}", self.scheme, self.authority, self.prefix);
        let mut req = Request::builder()
            .method(method.clone())
            .uri(target)
            .body(())
            .map_err(|e| {
                UpstreamFailure::Broken(format!("the request cannot be forwarded: {e}"))
            })?;
        let h = req.headers_mut();
        for (name, value) in headers {
            let skip =
                CONNECTION_SPECIFIC.contains(name) || (name == header::TE && value != "trailers");
            if !skip {
                h.append(name.clone(), value.clone());
            }
        }
        let work =
            async {
                let lease = self.checkout(deadline).await?;
                let mut send =
                    lease.0.send.clone().ready().await.map_err(|e| {
                        UpstreamFailure::Connect(format!("the connection failed: {e}"))
                    })?;
                let end = body.is_empty();
                let (answer, mut tx) = send
                    .send_request(req, end)
                    .map_err(|e| UpstreamFailure::Broken(format!("the stream was refused: {e}")))?;
                if !end {
                    tx.send_data(body, true)
                        .map_err(|e| UpstreamFailure::Broken(format!("sending the body: {e}")))?;
                }
                let answer = answer
                    .await
                    .map_err(|e| UpstreamFailure::Broken(e.to_string()))?;
                let (parts, mut rx) = answer.into_parts();
                let mut held: Option<OwnedSemaphorePermit> = None;
                let mut buf = BytesMut::new();
                while let Some(chunk) = rx.data().await {
                    let chunk = chunk.map_err(|e| UpstreamFailure::Broken(e.to_string()))?;
                    let _ = rx.flow_control().release_capacity(chunk.len());
                    let want = (buf.len() + chunk.len()) as u64;
                    if want > max_body {
                        return Err(UpstreamFailure::TooLarge(
                            usize::try_from(max_body).unwrap_or(usize::MAX),
                        ));
                    }
                    let more = u32::try_from(chunk.len())
                        .ok()
                        .and_then(|n| memory.clone().try_acquire_many_owned(n).ok());
                    match (more, &mut held) {
                        (Some(p), Some(h)) => h.merge(p),
                        (Some(p), None) => held = Some(p),
                        (None, _) => return Err(UpstreamFailure::Memory(want)),
                    }
                    buf.extend_from_slice(&chunk);
                }
                let trailers = rx
                    .trailers()
                    .await
                    .map_err(|e| UpstreamFailure::Broken(e.to_string()))?;
                drop(lease);
                Ok(H2Answer {
                    status: parts.status.as_u16(),
                    headers: parts.headers,
                    body: buf.freeze(),
                    trailers,
                    held,
                })
            };
        match tokio::time::timeout_at(deadline, work).await {
            Ok(r) => r,
            Err(_) => Err(UpstreamFailure::Timeout(self.timeout)),
        }
    }
}
