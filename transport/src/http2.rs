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

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use history::ErrorKind;

use super::h2conn::{self, Handle, Origin};
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
    fn assign(&self, target: &Arc<Target>) -> Arc<Slot> {
        let n = self.assigned.fetch_add(1, Ordering::Relaxed) / self.streams;
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        while slots.len() <= n {
            slots.push(Arc::new(Slot::new(target.clone())));
        }
        slots[n].clone()
    }
}

/// One HTTP/2 connection, connected on first use and again after it breaks or goes away.
pub struct Slot {
    target: Arc<Target>,
    origin: Origin,
    conn: tokio::sync::Mutex<Option<Handle>>,
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
        let (handle, driver) = h2conn::start(stream, self.target.max_body);
        let driver: Driver = Box::pin(driver);
        // In a task that drives its own connections (see `drive`), it polls this one too.
        if DRIVERS.try_with(|_| ()).is_ok() {
            if let Err(e) = DRIVERS.with(|d| d.send(driver)) {
                tokio::spawn(e.0);
            }
        } else {
            tokio::spawn(driver);
        }
        *guard = Some(handle.clone());
        Ok(handle)
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

    /// A burst in single-packet mode: opens a stream per request and sends all of each but its
    /// last body byte (or holds back its END_STREAM when it has no body); once that is written,
    /// the last frames all at once, in one write. Returns the replies in order and when the last
    /// frames were queued.
    pub async fn single_packet(
        &self,
        reqs: Vec<Outgoing>,
        timeout: Duration,
    ) -> (Vec<Result<Reply, AttemptError>>, Instant) {
        let h = match self.handle().await {
            Ok(h) => h,
            Err(e) => {
                return (
                    reqs.iter().map(|_| Err(e.clone())).collect(),
                    Instant::now(),
                )
            }
        };
        let mut opened = Vec::with_capacity(reqs.len());
        for req in &reqs {
            opened.push(h.open_stream(req, &self.origin, false).await);
        }
        // Every stream is open and all but its last frame queued: written first, on their own.
        h.flushed().await;
        let ends = opened
            .iter()
            .zip(&reqs)
            .filter_map(|(id, req)| {
                let last = if req.body.is_empty() {
                    Bytes::new()
                } else {
                    req.body.slice(req.body.len() - 1..)
                };
                id.as_ref().ok().map(|&id| (id, last))
            })
            .collect();
        h.finish(ends);
        let released = Instant::now();
        let answers = opened.into_iter().map(|id| {
            let h = &h;
            async move {
                let id = id?;
                match tokio::time::timeout(timeout, h.answer(id)).await {
                    Ok(r) => r,
                    Err(_) => Err(timed_out(timeout)),
                }
            }
        });
        (futures_util::future::join_all(answers).await, released)
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
    pub(crate) async fn send_ref(
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
