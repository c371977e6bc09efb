//! HTTP/2, framed by the project's own client ([`super::h2conn`]), over TLS with ALPN `h2` or
//! over plain TCP with prior knowledge (h2c).
//!
//! Many workers share one connection: `--streams N` puts N workers (N concurrent streams) on each
//! connection, as `h2load -m N` does. A connection is a [`Slot`]; a worker's [`H2Conn`] is a handle
//! on its slot, which (re)connects when the connection is missing, broken or going away.
//!
//! Why the workers of one connection run in one task ([`drive`]): the connection's driver reads
//! frames and completes the streams they answer, and each worker's next request is queued on the
//! connection. Polled in the same task as its workers, one pass reads a batch of answers, runs the
//! workers they free — which queue their next requests — and writes all of those in one write, as
//! h2load's event loop does.
//!
//! Why not the `h2` crate, which this was first written on: its per-stream state machine,
//! flow-control accounting and task hand-offs cost about 19,000 instructions per request under
//! this load, twice what h2load spends on everything (BENCHMARKS.md).
//!
//! Why a burst has connections of its own ([`Burst`]): a synchronized round opens every one of
//! its streams before any completes, so a round larger than the server's limit of concurrent
//! streams would wait for a slot only a completion can free. A burst learns the limit from the
//! first connection's SETTINGS and spreads its round over as many connections as the limit needs
//! (one when the server sets none: RFC 9113's unlimited, bounded by this side's own cap); their
//! drivers run in one task, so that the round's final frames, queued on every connection at
//! once, leave in back-to-back writes from one thread.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use history::ErrorKind;

use super::h2conn::{self, Handle, Limits, Origin};
use super::stream::Stream;
use super::timer::Timer;
use super::{AttemptError, Outgoing, Reply, Target};

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
    ///
    /// A slot keeps a copy of the target without the pool: the target owns the pool and the pool
    /// its slots, so a slot that held the target itself would keep all three — and every open
    /// connection — alive after the last worker and the last handle on the target are gone.
    fn assign(&self, target: &Arc<Target>) -> Arc<Slot> {
        let n = self.assigned.fetch_add(1, Ordering::Relaxed) / self.streams;
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() <= n {
            let detached = Arc::new(Target {
                http2: None,
                ..Target::clone(target)
            });
            while slots.len() <= n {
                slots.push(Arc::new(Slot::new(detached.clone())));
            }
        }
        slots[n].clone()
    }
}

/// One HTTP/2 connection, connected on first use and again after it breaks or goes away.
pub struct Slot {
    target: Arc<Target>,
    origin: Origin,
    conn: tokio::sync::Mutex<Option<Handle>>,
    /// The task that drives this connection, when it is a burst's (see [`Burst`]).
    group: Option<tokio::sync::mpsc::UnboundedSender<Driver>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("target", &self.target.url)
            .finish()
    }
}

/// A request that timed out.
fn timed_out(timeout: Duration) -> AttemptError {
    AttemptError {
        kind: ErrorKind::Timeout,
        message: format!("no response within {timeout:?}"),
    }
}

impl Slot {
    /// A slot for a connection of its own (a burst's).
    pub fn new(target: Arc<Target>) -> Slot {
        Slot {
            origin: Origin::new(target.tls.is_some(), &target.authority),
            target,
            conn: tokio::sync::Mutex::new(None),
            group: None,
        }
    }

    /// A handle on a connection that takes new streams, connecting first when needed.
    async fn handle(&self) -> Result<Handle, AttemptError> {
        let mut guard = self.conn.lock().await;
        if let Some(h) = guard.as_ref().filter(|h| h.usable()) {
            return Ok(h.clone());
        }
        *guard = None;
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
        let limits = Limits {
            max_body: self.target.max_body,
            max_header_list: self.target.max_header_list,
            keepalive: self.target.keepalive,
            idle_timeout: self.target.idle_timeout,
        };
        let (handle, driver) = h2conn::start(stream, limits);
        let driver: Driver = Box::pin(driver);
        let driver = match &self.group {
            Some(group) => match group.send(driver) {
                Ok(()) => None,
                Err(e) => Some(e.0),
            },
            None => Some(driver),
        };
        if let Some(driver) = driver {
            Self::drive_somewhere(driver);
        }
        *guard = Some(handle.clone());
        Ok(handle)
    }

    /// Has `driver` polled: in a task that drives its own connections (see `drive`), by it;
    /// else by a task of its own.
    fn drive_somewhere(driver: Driver) {
        if DRIVERS.try_with(|_| ()).is_ok() {
            if let Err(e) = DRIVERS.with(|d| d.send(driver)) {
                tokio::spawn(e.0);
            }
        } else {
            tokio::spawn(driver);
        }
    }

    /// Connects now, when not connected.
    pub async fn open(&self) -> Result<(), AttemptError> {
        self.handle().await.map(drop)
    }

    /// Sends `req` and reads its whole response within `timeout`.
    pub async fn send(&self, req: Outgoing, timeout: Duration) -> Result<Reply, AttemptError> {
        let exchange = async {
            let h = self.handle().await?;
            let id = h.open_stream(&req, &self.origin, true).await?;
            h.answer(id).await
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(timed_out(timeout)),
        }
    }
}

/// A connection's driver: the future that reads and writes its frames.
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
/// slot's connection (so a request takes no lock on the slot; it is asked again only when the
/// connection stops taking streams).
pub struct H2Conn {
    slot: Arc<Slot>,
    handle: Option<Handle>,
    /// One timer for the worker's requests (see [`crate::timer`]).
    timer: Timer,
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
            timer: Timer::default(),
        }
    }

    /// Another handle on this one's connection, for a request sent while this one's is still
    /// out (a hedged gRPC attempt): a stream more on the same connection.
    pub fn sibling(&self) -> H2Conn {
        H2Conn::on(self.slot.clone())
    }

    /// Connects now, when the slot is not connected.
    pub async fn open(&mut self) -> Result<(), AttemptError> {
        if !self.handle.as_ref().is_some_and(Handle::usable) {
            // Boxed, as in `H1Conn::open`: a rare path whose future (a lock, maybe a connect)
            // would otherwise be copied with every request's.
            self.handle = Some(Box::pin(self.slot.handle()).await?);
        }
        Ok(())
    }

    /// Sends `req` on a new stream and reads its whole response, within `timeout`.
    pub async fn send(&mut self, req: Outgoing, timeout: Duration) -> Result<Reply, AttemptError> {
        self.send_ref(&req, timeout).await
    }

    /// [`H2Conn::send`] on a borrowed request (see [`super::http1::H1Conn`]'s).
    pub async fn send_ref(
        &mut self,
        req: &Outgoing,
        timeout: Duration,
    ) -> Result<Reply, AttemptError> {
        self.open().await?;
        let H2Conn {
            slot,
            handle,
            timer,
        } = self;
        let Some(h) = handle.as_ref() else {
            return Err(super::closed("no HTTP/2 connection"));
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let origin = &slot.origin;
        let exchange = async {
            let id = h.open_stream(req, origin, true).await?;
            h.answer(id).await
        };
        let result = tokio::select! {
            biased;
            r = exchange => r,
            () = timer.until(deadline) => Err(timed_out(timeout)),
        };
        result
    }
}

impl H2Conn {
    /// Sends `req` whole on a new stream, then resets the stream without reading its answer:
    /// the server got the whole request, and whatever it answers is lost — a client that gave up
    /// just after sending. Returns once the request was written, within `timeout`.
    pub async fn send_unanswered(
        &mut self,
        req: &Outgoing,
        timeout: Duration,
    ) -> Result<(), AttemptError> {
        self.open().await?;
        let H2Conn { slot, handle, .. } = self;
        let Some(h) = handle.as_ref() else {
            return Err(super::closed("no HTTP/2 connection"));
        };
        let sent = async {
            let id = h.open_stream(req, &slot.origin, true).await?;
            let r = h.sent(id).await;
            h.cancel(id);
            r
        };
        match tokio::time::timeout(timeout, sent).await {
            Ok(r) => r,
            Err(_) => Err(timed_out(timeout)),
        }
    }
}

/// Concurrent streams one connection opens when the server sets no limit (RFC 9113: unlimited).
pub const OWN_STREAM_CAP: usize = h2conn::OWN_STREAM_CAP;

/// The most connections one burst opens: a round that would need more at the server's stream
/// limit is refused before anything is sent.
pub const MAX_BURST_CONNECTIONS: usize = 1000;

/// A burst's HTTP/2 connections (see the module doc): as many as its rounds need at the server's
/// limit of concurrent streams, driven together in one task of their own.
pub struct Burst {
    target: Arc<Target>,
    group: tokio::sync::mpsc::UnboundedSender<Driver>,
    slots: Mutex<Vec<Arc<Slot>>>,
    /// Requests per connection, as the last [`Burst::open`] found.
    per_conn: AtomicUsize,
}

impl std::fmt::Debug for Burst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Burst")
            .field("target", &self.target.url)
            .finish()
    }
}

impl Burst {
    /// A burst's connections to `target`, none open yet.
    pub fn new(target: Arc<Target>) -> Burst {
        Burst {
            target,
            group: group(),
            slots: Mutex::new(Vec::new()),
            per_conn: AtomicUsize::new(1),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connection `i`, made (not connected) when it is new.
    fn slot_at(&self, i: usize) -> Arc<Slot> {
        let mut slots = self.slots();
        while slots.len() <= i {
            slots.push(Arc::new(Slot {
                origin: Origin::new(self.target.tls.is_some(), &self.target.authority),
                target: self.target.clone(),
                conn: tokio::sync::Mutex::new(None),
                group: Some(self.group.clone()),
            }));
        }
        slots[i].clone()
    }

    /// Opens the connections a round of `members` requests needs, at most `most` of them on one
    /// connection (`--streams`) and never more than the server allows: the first connection's
    /// SETTINGS say its limit, then the others open. Fails at once when the server allows no
    /// stream, and before anything is sent when the round would need more than
    /// [`MAX_BURST_CONNECTIONS`]; `timeout` bounds each connection's opening.
    pub async fn open(
        &self,
        members: usize,
        most: usize,
        timeout: Duration,
    ) -> Result<(), AttemptError> {
        let members = members.max(1);
        let mut per = most.clamp(1, h2conn::OWN_STREAM_CAP);
        // Should the opening fail, members still share connections as `most` says.
        self.per_conn.store(per, Ordering::Relaxed);
        let mut opened = 0;
        loop {
            let need = members.div_ceil(per);
            if need > MAX_BURST_CONNECTIONS {
                return Err(AttemptError {
                    kind: ErrorKind::Other,
                    message: format!(
                        "a burst round of {members} requests needs {need} HTTP/2 connections at \
                         {per} concurrent streams each (the server's SETTINGS_MAX_CONCURRENT_STREAMS \
                         or --streams), more than the {MAX_BURST_CONNECTIONS} a burst opens: make \
                         the round at most {} requests",
                        MAX_BURST_CONNECTIONS * per
                    ),
                });
            }
            if opened >= need {
                self.per_conn.store(per, Ordering::Relaxed);
                return Ok(());
            }
            let limits = (opened..need).map(|i| {
                let slot = self.slot_at(i);
                async move {
                    let settled = async {
                        let h = slot.handle().await?;
                        h.concurrency().await
                    };
                    match tokio::time::timeout(timeout, settled).await {
                        Ok(r) => r,
                        Err(_) => Err(AttemptError {
                            kind: ErrorKind::Timeout,
                            message: format!(
                                "no HTTP/2 connection with its SETTINGS within {timeout:?}"
                            ),
                        }),
                    }
                }
            });
            for limit in futures_util::future::join_all(limits).await {
                let limit = limit?;
                if limit == 0 {
                    return Err(AttemptError {
                        kind: ErrorKind::Refused,
                        message: "the server allows 0 concurrent streams \
                                  (SETTINGS_MAX_CONCURRENT_STREAMS = 0): it takes no request"
                            .into(),
                    });
                }
                per = per.min(limit);
            }
            opened = need;
        }
    }

    /// The connection of member `i` of a round, `per` members to a connection as the last
    /// [`Burst::open`] found.
    pub fn slot(&self, i: usize) -> Arc<Slot> {
        self.slot_at(i / self.per_conn.load(Ordering::Relaxed).max(1))
    }

    /// A round in single-packet mode: spread over the connections it needs, a stream per
    /// request with all of each but its body's last byte (or its END_STREAM, with no body) sent;
    /// once every connection has written that, the final frames of all queued at once, in one
    /// write per connection, back to back. Returns the replies in order and when the final
    /// frames were queued.
    pub async fn single_packet(
        &self,
        reqs: Vec<Outgoing>,
        timeout: Duration,
    ) -> (Vec<Result<Reply, AttemptError>>, Instant) {
        let keep = vec![false; reqs.len()];
        let (replies, at) = self.single_packet_dropping(reqs, &keep, timeout).await;
        let replies = replies
            .into_iter()
            .map(|r| r.and_then(|r| r.ok_or_else(|| super::closed("answer dropped"))))
            .collect();
        (replies, at)
    }

    /// [`Burst::single_packet`], but the answers of the requests marked in `drop` are not read:
    /// once the round's final frames are written, their streams are reset (RST_STREAM CANCEL),
    /// and their result is `Ok(None)` — the server had the whole request, the client gave up on
    /// its answer (a webhook sender's lost acknowledgement).
    pub async fn single_packet_dropping(
        &self,
        reqs: Vec<Outgoing>,
        drop: &[bool],
        timeout: Duration,
    ) -> (Vec<Result<Option<Reply>, AttemptError>>, Instant) {
        let all = |e: AttemptError| -> (Vec<Result<Option<Reply>, AttemptError>>, Instant) {
            (
                reqs.iter().map(|_| Err(e.clone())).collect(),
                Instant::now(),
            )
        };
        if let Err(e) = self.open(reqs.len(), h2conn::OWN_STREAM_CAP, timeout).await {
            return all(e);
        }
        let per = self.per_conn.load(Ordering::Relaxed).max(1);
        let mut handles = Vec::new();
        for i in 0..reqs.len().div_ceil(per) {
            match self.slot_at(i).handle().await {
                Ok(h) => handles.push(h),
                Err(e) => return all(e),
            }
        }
        // Every connection of a burst has the same origin.
        let origin = self.slot_at(0).origin.clone();
        let mut opened = Vec::with_capacity(reqs.len());
        for (i, req) in reqs.iter().enumerate() {
            opened.push(handles[i / per].open_stream(req, &origin, false).await);
        }
        // Every stream is open and all but its last frame queued: written first, on their own.
        futures_util::future::join_all(handles.iter().map(Handle::flushed)).await;
        let mut ends: Vec<Vec<(u32, Bytes)>> = vec![Vec::new(); handles.len()];
        for (i, (id, req)) in opened.iter().zip(&reqs).enumerate() {
            let last = if req.body.is_empty() {
                Bytes::new()
            } else {
                req.body.slice(req.body.len() - 1..)
            };
            if let Ok(id) = id {
                ends[i / per].push((*id, last));
            }
        }
        // Queued on every connection before any driver runs: the drivers share one task, which
        // writes them one after the other when it next runs.
        for (h, ends) in handles.iter().zip(ends) {
            h.finish(ends);
        }
        let released = Instant::now();
        let answers = opened.into_iter().enumerate().map(|(i, id)| {
            let h = &handles[i / per];
            let dropped = drop.get(i).copied().unwrap_or(false);
            async move {
                let id = id?;
                if dropped {
                    let sent = tokio::time::timeout(timeout, h.sent(id)).await;
                    h.cancel(id);
                    return match sent {
                        Ok(r) => r.map(|()| None),
                        Err(_) => Err(timed_out(timeout)),
                    };
                }
                match tokio::time::timeout(timeout, h.answer(id)).await {
                    Ok(r) => r.map(Some),
                    Err(_) => Err(timed_out(timeout)),
                }
            }
        });
        (futures_util::future::join_all(answers).await, released)
    }
}

/// A task that drives the connections sent to it, until the sender is gone and they have ended.
fn group() -> tokio::sync::mpsc::UnboundedSender<Driver> {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Driver>();
    tokio::spawn(async move {
        let mut conns: FuturesUnordered<Driver> = FuturesUnordered::new();
        let mut open = true;
        std::future::poll_fn(|cx| {
            while open {
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(d)) => conns.push(d),
                    Poll::Ready(None) => open = false,
                    Poll::Pending => break,
                }
            }
            while let Poll::Ready(Some(())) = conns.poll_next_unpin(cx) {}
            if !open && conns.is_empty() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    });
    tx
}

/// Where a submitted request's reply goes.
type ReplyTo = tokio::sync::oneshot::Sender<Result<Reply, AttemptError>>;

/// One burst round in single-packet mode: each member submits its first attempt; when the last
/// one has, the round goes out on its connection as one write, and each member gets its reply.
pub struct SinglePacketRound {
    burst: Arc<Burst>,
    size: usize,
    waiting: Mutex<Vec<(Outgoing, ReplyTo)>>,
    /// When the round's last frames left, once they have.
    released_at: Mutex<Option<Instant>>,
}

impl SinglePacketRound {
    /// A round of `size` requests on `burst`'s connections.
    pub fn new(burst: Arc<Burst>, size: usize) -> SinglePacketRound {
        SinglePacketRound {
            burst,
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
            let (replies, at) = self.burst.single_packet(reqs, timeout).await;
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
