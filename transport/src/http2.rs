//! HTTP/2 on the `h2` crate (hyper's HTTP/2 underneath), over TLS with ALPN `h2` or over plain TCP
//! with prior knowledge (h2c).
//!
//! Many workers share one connection: `--streams N` puts N workers (N concurrent streams) on each
//! connection, as `h2load -m N` does. A connection is a [`Slot`]; a worker's [`H2Conn`] is a handle
//! on its slot, which (re)connects when the connection is missing or broken.
//!
//! Why `h2` and not hyper's client wrapper: a burst in *single-packet* mode sends every request
//! of the round except its last DATA frame, then all the last frames together, so the server
//! receives the whole round in one read — that needs control of the frames, which `h2` gives.
//!
//! Why the workers of one connection run in one task ([`drive`]): `h2` drives a connection from a
//! future that reads frames, wakes the streams they answer and writes what the streams queued.
//! Spawned on its own, it wakes a task per response (on either core, contending for the
//! connection's lock), and each worker's next request wakes it again, so it writes a frame or two
//! per system call. Polled in the same task as its workers, one pass reads a batch of responses,
//! runs the workers they free — which queue their next requests — and writes all of those in one
//! `writev`, as h2load's event loop does.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use history::ErrorKind;
use http::{HeaderMap, HeaderValue, Request};

use super::stream::Stream;
use super::{closed, io_failure, AttemptError, Outgoing, Reply, Target};

/// The connections of one target, filled as workers ask for them.
#[derive(Debug)]
pub struct Pool {
    /// Workers (concurrent streams) per connection.
    streams: usize,
    slots: Mutex<Vec<Arc<Slot>>>,
    assigned: AtomicUsize,
}

impl Pool {
    /// Workers (concurrent streams) per connection.
    pub fn streams(&self) -> usize {
        self.streams
    }

    /// A pool that puts `streams` workers on each connection.
    pub fn new(streams: u32) -> Pool {
        Pool {
            streams: streams.max(1) as usize,
            slots: Mutex::new(Vec::new()),
            assigned: AtomicUsize::new(0),
        }
    }

    /// The slot of the next worker: the first `streams` workers share the first connection, and
    /// so on.
    fn assign(&self, target: &Arc<Target>) -> Arc<Slot> {
        let n = self.assigned.fetch_add(1, Ordering::Relaxed) / self.streams;
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        while slots.len() <= n {
            slots.push(Arc::new(Slot::new(target.clone())));
        }
        slots[n].clone()
    }
}

/// One HTTP/2 connection, connected on first use and again after it breaks.
#[derive(Debug)]
pub struct Slot {
    target: Arc<Target>,
    origin: Origin,
    send: tokio::sync::Mutex<Option<SendRequest<Bytes>>>,
}

/// A request's `:scheme` and `:authority`, parsed once per connection.
#[derive(Debug, Clone)]
struct Origin {
    scheme: http::uri::Scheme,
    authority: Option<http::uri::Authority>,
}

impl Origin {
    fn of(target: &Target) -> Origin {
        Origin {
            scheme: if target.tls.is_some() {
                http::uri::Scheme::HTTPS
            } else {
                http::uri::Scheme::HTTP
            },
            authority: target.authority.parse().ok(),
        }
    }

    /// The request's URI: this origin and the request's path and query, so that HTTP/2's
    /// `:scheme`, `:authority` and `:path` all go out (the `Host` header does not exist in
    /// HTTP/2; `:authority` is where a server's virtual hosting looks).
    fn uri(&self, path_and_query: String) -> Result<http::Uri, AttemptError> {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority.clone_from(&self.authority);
        parts.path_and_query = Some(path_and_query.try_into().map_err(
            |e: http::uri::InvalidUri| AttemptError {
                kind: ErrorKind::Other,
                message: format!("invalid request target: {e}"),
            },
        )?);
        http::Uri::from_parts(parts).map_err(|e| AttemptError {
            kind: ErrorKind::Other,
            message: format!("invalid request target: {e}"),
        })
    }
}

impl Slot {
    /// A slot for a connection of its own (a burst's).
    pub fn new(target: Arc<Target>) -> Slot {
        Slot {
            origin: Origin::of(&target),
            target,
            send: tokio::sync::Mutex::new(None),
        }
    }

    /// A handle ready for a new stream, connecting first when needed.
    async fn handle(&self) -> Result<SendRequest<Bytes>, AttemptError> {
        let mut guard = self.send.lock().await;
        if let Some(s) = guard.as_ref() {
            return Ok(s.clone());
        }
        let (stream, alpn_h2) = Stream::connect(&self.target).await?;
        if self.target.tls.is_some() && !alpn_h2 {
            return Err(AttemptError {
                kind: ErrorKind::Tls,
                message: format!(
                    "{} did not agree to HTTP/2 in ALPN (it offers only HTTP/1.1; drop --http2)",
                    self.target.url
                ),
            });
        }
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(1 << 24)
            .handshake::<_, Bytes>(stream)
            .await
            .map_err(h2_failure)?;
        let driver: Driver = Box::pin(async move {
            if let Err(e) = connection.await {
                tracing::debug!("HTTP/2 connection ended: {e}");
            }
        });
        // In a task that drives its own connections (see `drive`), it polls this one too.
        if DRIVERS.try_with(|_| ()).is_ok() {
            if let Err(e) = DRIVERS.with(|d| d.send(driver)) {
                tokio::spawn(e.0);
            }
        } else {
            tokio::spawn(driver);
        }
        *guard = Some(send.clone());
        Ok(send)
    }

    /// Forgets a broken connection so the next request makes a new one.
    async fn forget(&self) {
        *self.send.lock().await = None;
    }

    /// Connects now, when not connected.
    pub async fn open(&self) -> Result<(), AttemptError> {
        self.handle().await.map(drop)
    }

    /// Sends `req` and reads its whole response within `timeout`.
    pub async fn send(&self, req: Outgoing, timeout: Duration) -> Result<Reply, AttemptError> {
        let result = tokio::time::timeout(timeout, self.exchange(req)).await;
        match result {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                if e.kind != ErrorKind::Reset {
                    // A stream reset leaves the connection usable; anything else may not.
                    self.forget().await;
                }
                Err(e)
            }
            Err(_) => Err(AttemptError {
                kind: ErrorKind::Timeout,
                message: format!("no response within {timeout:?}"),
            }),
        }
    }

    async fn exchange(&self, req: Outgoing) -> Result<Reply, AttemptError> {
        let send = self.handle().await?;
        let (response, _) = start(send, &self.origin, req, true).await?;
        read_reply(response, self.target.max_body).await
    }

    /// A burst in single-packet mode: opens a stream per request and sends all of each but its
    /// last body byte (or holds back its END_STREAM when it has no body), then — once every
    /// stream is open — the last frames all at once, so they leave in one write. Returns the
    /// replies in order and when the last frames left.
    pub async fn single_packet(
        &self,
        reqs: Vec<Outgoing>,
        timeout: Duration,
    ) -> (Vec<Result<Reply, AttemptError>>, Instant) {
        let mut pending = Vec::with_capacity(reqs.len());
        let mut out: Vec<Option<Result<Reply, AttemptError>>> = Vec::new();
        for req in reqs {
            out.push(None);
            let send = match self.handle().await {
                Ok(s) => s,
                Err(e) => {
                    *out.last_mut().expect("pushed") = Some(Err(e));
                    continue;
                }
            };
            let last = if req.body.is_empty() {
                Bytes::new()
            } else {
                req.body.slice(req.body.len() - 1..)
            };
            match start(send, &self.origin, req, false).await {
                Ok((response, body)) => pending.push((out.len() - 1, response, body, last)),
                Err(e) => *out.last_mut().expect("pushed") = Some(Err(e)),
            }
        }
        // Every stream is open and all but its last frame is queued: now the last frames, with
        // no await in between, so the connection task writes them together.
        let mut responses = Vec::with_capacity(pending.len());
        for (i, response, stream, last) in pending {
            if let Some(mut s) = stream {
                if let Err(e) = s.send_data(last, true) {
                    out[i] = Some(Err(h2_failure(e)));
                    continue;
                }
            }
            responses.push((i, response));
        }
        let released = Instant::now();
        let max = self.target.max_body;
        let reads: Vec<_> = responses
            .into_iter()
            .map(|(i, r)| {
                tokio::spawn(async move {
                    let reply = match tokio::time::timeout(timeout, read_reply(r, max)).await {
                        Ok(r) => r,
                        Err(_) => Err(AttemptError {
                            kind: ErrorKind::Timeout,
                            message: format!("no response within {timeout:?}"),
                        }),
                    };
                    (i, reply)
                })
            })
            .collect();
        for read in reads {
            if let Ok((i, reply)) = read.await {
                out[i] = Some(reply);
            }
        }
        let replies = out
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(AttemptError {
                        kind: ErrorKind::Other,
                        message: "request not sent".into(),
                    })
                })
            })
            .collect();
        (replies, released)
    }
}

/// Opens a stream for `req` and sends its body; with `finish`, ends the stream too, else holds
/// back the body's last byte (or, with no body, the end of the stream) for the caller to send.
async fn start(
    send: SendRequest<Bytes>,
    origin: &Origin,
    req: Outgoing,
    finish: bool,
) -> Result<(h2::client::ResponseFuture, Option<h2::SendStream<Bytes>>), AttemptError> {
    let mut send = send.ready().await.map_err(h2_failure)?;
    let mut request = Request::new(());
    *request.method_mut() = req.method;
    *request.uri_mut() = origin.uri(req.uri)?;
    let h = request.headers_mut();
    *h = req.headers;
    // HTTP/2 has no connection-specific headers; the authority goes in :authority. Looked for
    // before removed: a removal hashes its name, and a request rarely has any of them.
    if h.keys().any(|name| {
        matches!(
            name.as_str(),
            "connection"
                | "transfer-encoding"
                | "host"
                | "upgrade"
                | "keep-alive"
                | "proxy-connection"
        )
    }) {
        for name in [
            "connection",
            "transfer-encoding",
            "host",
            "upgrade",
            "keep-alive",
            "proxy-connection",
        ] {
            h.remove(name);
        }
    }
    if !req.body.is_empty() {
        h.insert(
            http::header::CONTENT_LENGTH,
            HeaderValue::from(req.body.len()),
        );
    }
    let no_body = req.body.is_empty();
    let (response, mut stream) = send
        .send_request(request, finish && no_body)
        .map_err(h2_failure)?;
    let body = if finish || no_body {
        req.body
    } else {
        req.body.slice(..req.body.len() - 1)
    };
    if !body.is_empty() {
        stream.send_data(body, finish).map_err(h2_failure)?;
    }
    Ok((response, (!finish).then_some(stream)))
}

/// Reads a response and its whole body.
async fn read_reply(response: h2::client::ResponseFuture, max: u64) -> Result<Reply, AttemptError> {
    let response = response.await.map_err(h2_failure)?;
    let (parts, mut body) = response.into_parts();
    let mut data = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(h2_failure)?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if (data.len() + chunk.len()) as u64 > max {
            return Err(crate::over_limit(max));
        }
        if data.is_empty() && body.is_end_stream() {
            // One frame: no copy.
            return Ok(Reply {
                status: parts.status,
                headers: parts.headers,
                body: chunk,
            });
        }
        data.extend_from_slice(&chunk);
    }
    let _trailers: Option<HeaderMap> = body.trailers().await.map_err(h2_failure)?;
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body: data.freeze(),
    })
}

/// An `h2` error as the report counts it: a stream the server reset is `reset`; the connection
/// ending (GOAWAY, a close) is `closed`; I/O errors by their kind.
fn h2_failure(e: h2::Error) -> AttemptError {
    if e.is_reset() {
        return AttemptError {
            kind: ErrorKind::Reset,
            message: format!("stream reset: {e}"),
        };
    }
    if e.is_go_away() {
        return closed(&format!("connection ended by GOAWAY: {e}"));
    }
    match e.into_io() {
        Some(io) => io_failure("HTTP/2", io),
        None => AttemptError {
            kind: ErrorKind::Malformed,
            message: "HTTP/2 protocol error".into(),
        },
    }
}

/// A connection's driver: the `h2` future that reads and writes its frames.
type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

tokio::task_local! {
    /// Where a connection opened by a task running [`drive`] sends its driver.
    static DRIVERS: tokio::sync::mpsc::UnboundedSender<Driver>;
}

/// Runs `workers` to completion in this task, together with the drivers of every HTTP/2
/// connection they open; returns their outputs in the order they finished.
///
/// Each pass polls the connections (reading what arrived and waking the streams it answers),
/// then the workers that woke (which queue their next requests), then the connections again, so
/// that what the workers queued leaves in one write. Connections outlive a worker that ends
/// early and close when the last worker has ended.
pub async fn drive<F>(workers: Vec<F>) -> Vec<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Driver>();
    DRIVERS
        .scope(tx, async move {
            let mut workers: FuturesUnordered<F> = workers.into_iter().collect();
            let mut conns: FuturesUnordered<Driver> = FuturesUnordered::new();
            let mut out = Vec::with_capacity(workers.len());
            std::future::poll_fn(|cx| {
                while let Poll::Ready(Some(d)) = rx.poll_recv(cx) {
                    conns.push(d);
                }
                while let Poll::Ready(Some(())) = conns.poll_next_unpin(cx) {}
                while let Poll::Ready(Some(r)) = workers.poll_next_unpin(cx) {
                    out.push(r);
                }
                if workers.is_empty() {
                    return Poll::Ready(());
                }
                // A worker may have opened a connection, and has queued its next request.
                while let Poll::Ready(Some(d)) = rx.poll_recv(cx) {
                    conns.push(d);
                }
                while let Poll::Ready(Some(())) = conns.poll_next_unpin(cx) {}
                Poll::Pending
            })
            .await;
            out
        })
        .await
}

/// A worker's HTTP/2 connection: its slot of the target's pool, and its own handle on the
/// slot's connection (so a request takes no lock; the slot is asked again only after an error).
pub struct H2Conn {
    slot: Arc<Slot>,
    handle: Option<SendRequest<Bytes>>,
    /// One timer moved forward for each request (see [`super::http1::H1Conn`]'s).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl H2Conn {
    /// The next worker's handle on `target`'s pool.
    pub fn new(target: &Arc<Target>, pool: &Pool) -> H2Conn {
        H2Conn::on(pool.assign(target))
    }

    /// A worker's handle on `slot`'s connection.
    pub fn on(slot: Arc<Slot>) -> H2Conn {
        H2Conn {
            slot,
            handle: None,
            timer: None,
        }
    }

    /// Connects now, when the slot is not connected.
    pub async fn open(&mut self) -> Result<(), AttemptError> {
        if self.handle.is_none() {
            self.handle = Some(self.slot.handle().await?);
        }
        Ok(())
    }

    /// Sends `req` on a new stream and reads its whole response, within `timeout`.
    pub async fn send(&mut self, req: Outgoing, timeout: Duration) -> Result<Reply, AttemptError> {
        let send = match &self.handle {
            Some(h) => h.clone(),
            None => {
                let h = self.slot.handle().await?;
                self.handle = Some(h.clone());
                h
            }
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let mut timer = match self.timer.take() {
            Some(mut t) => {
                t.as_mut().reset(deadline);
                t
            }
            None => Box::pin(tokio::time::sleep_until(deadline)),
        };
        let origin = &self.slot.origin;
        let max = self.slot.target.max_body;
        let exchange = async {
            let (response, _) = start(send, origin, req, true).await?;
            read_reply(response, max).await
        };
        let result = tokio::select! {
            biased;
            r = exchange => Some(r),
            () = timer.as_mut() => None,
        };
        self.timer = Some(timer);
        match result {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => {
                if e.kind != ErrorKind::Reset {
                    // A stream reset leaves the connection usable; anything else may not.
                    self.handle = None;
                    self.slot.forget().await;
                }
                Err(e)
            }
            None => Err(AttemptError {
                kind: ErrorKind::Timeout,
                message: format!("no response within {timeout:?}"),
            }),
        }
    }
}

/// Where a submitted request's reply goes.
type ReplyTo = tokio::sync::oneshot::Sender<Result<Reply, AttemptError>>;

/// One burst round in single-packet mode: each member submits its first attempt; when the last
/// one has, the round goes out on its connection as one write, and each member gets its reply.
pub struct SinglePacketRound {
    slot: Arc<Slot>,
    size: usize,
    waiting: Mutex<Vec<(Outgoing, ReplyTo)>>,
    /// When the round's last frames left, once they have.
    released_at: Mutex<Option<Instant>>,
}

impl SinglePacketRound {
    /// A round of `size` requests on `slot`'s connection.
    pub fn new(slot: Arc<Slot>, size: usize) -> SinglePacketRound {
        SinglePacketRound {
            slot,
            size: size.max(1),
            waiting: Mutex::new(Vec::with_capacity(size)),
            released_at: Mutex::new(None),
        }
    }

    /// Submits one member's request and waits for its reply (within `timeout` of the round's
    /// release).
    pub async fn submit(&self, req: Outgoing, timeout: Duration) -> Result<Reply, AttemptError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let full = {
            let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            w.push((req, tx));
            (w.len() == self.size).then(|| std::mem::take(&mut *w))
        };
        if let Some(all) = full {
            let (reqs, txs): (Vec<_>, Vec<_>) = all.into_iter().unzip();
            let (replies, at) = self.slot.single_packet(reqs, timeout).await;
            *self.released_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
            for (tx, reply) in txs.into_iter().zip(replies) {
                let _ = tx.send(reply);
            }
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(AttemptError {
                kind: ErrorKind::Other,
                message: "the burst round ended before this request was sent".into(),
            }),
        }
    }

    /// When the round's last frames left.
    pub fn released_at(&self) -> Option<Instant> {
        *self.released_at.lock().unwrap_or_else(|p| p.into_inner())
    }
}
