//! One HTTP/2 client connection, framed here (RFC 9113), answers' headers decoded by
//! [`super::hpack`].
//!
//! A load driver asks little of HTTP/2 but asks it hundreds of thousands of times a second: open a
//! stream, send a request, read its answer whole. A general client keeps a state machine, a
//! flow-control account and a task handshake per stream; here a stream is a slot in a table under
//! the connection's lock, a request is its HEADERS (and DATA) appended to the connection's output
//! buffer, and the connection's driver — a future polled in the workers' own task — reads every
//! frame that arrived, completes the streams they answer, and writes whatever the workers queued
//! since, in one write.
//!
//! What the peer can do is handled: SETTINGS (concurrency, window and frame sizes) acknowledged,
//! PING answered, WINDOW_UPDATE for request bodies, the receive windows given back as answers are
//! read, RST_STREAM failing its stream (REFUSED_STREAM as `refused`), GOAWAY failing the streams it
//! did not take as `refused` and refusing new ones (the slot then opens a new connection),
//! CONTINUATION, padding, trailers (kept on the reply) and informational answers (skipped).
//!
//! Why strict: the client is the instrument a verdict is read from, and it faces whatever a server
//! sends. Every MUST of RFC 9113 and RFC 7541 that an answer can break is checked where its bytes
//! arrive, and each limit is counted before anything is kept: the decoded header list against
//! SETTINGS_MAX_HEADER_LIST_SIZE (RFC 7541 §4.1 sizes, field by field, before a `HeaderMap`
//! holds it), a body against its content-length, the receive windows against what was given. A
//! breach that concerns one stream fails that stream (RST_STREAM) as `protocol`; one that leaves
//! the connection's state unknown — a header block that cannot be decoded, a frame of the wrong
//! size, a flow-control window overrun — ends the connection (GOAWAY) and fails every stream on
//! it as `protocol`. A keep-alive PING finds a peer that went silent under open streams; an idle
//! connection is closed.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use history::ErrorKind;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::stream::Stream;
use super::{closed, io_failure, malformed, over_limit, AttemptError, Outgoing, Reply};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types.
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

// Flags.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

// Error codes.
const NO_ERROR: u32 = 0x0;
const PROTOCOL_ERROR: u32 = 0x1;
const CANCEL: u32 = 0x8;

const FLOW_CONTROL_ERROR: u32 = 0x3;
const FRAME_SIZE_ERROR: u32 = 0x6;
const REFUSED_STREAM: u32 = 0x7;
const COMPRESSION_ERROR: u32 = 0x9;

/// The receive window each stream is given (SETTINGS_INITIAL_WINDOW_SIZE), and the connection's.
const STREAM_WINDOW: u32 = 1 << 20;
const CONN_WINDOW: u32 = 1 << 24;
/// The largest frame this side accepts (the protocol's default; never raised).
const MAX_FRAME: usize = 16_384;
/// The fewest header-block bytes one answer may carry (HEADERS and its CONTINUATIONs) whatever
/// the header list's limit: a block's representations are never much larger than the list they
/// decode to, so twice the list's limit, or this, bounds a block still waiting for its end.
const MIN_HEADER_BLOCK: usize = 256 << 10;
/// Concurrent streams assumed until the server's first SETTINGS say (RFC 9113 §6.5.2 recommends
/// a server allow at least 100).
const ASSUMED_CONCURRENCY: usize = 100;
/// Concurrent streams opened when the server sets no limit (RFC 9113: unlimited): this side's
/// own bound.
pub(crate) const OWN_STREAM_CAP: usize = 10_000;
/// The largest stream id, and the largest flow-control window.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;
const MAX_WINDOW: i64 = (1 << 31) - 1;

/// Hashes a stream id with one multiplication: stream ids are odd and increasing (RFC 9113
/// §5.1.1, a peer cannot pick them at will), and a table of streams is looked up a few times per
/// request, where the default hasher's cost showed. The fault server's stream ledger uses it too.
#[derive(Default)]
pub struct StreamIdHasher(u64);

impl Hasher for StreamIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, id: u32) {
        self.0 = u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// What one connection allows an answer, and how it watches an idle or silent peer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Max body per answer.
    pub(crate) max_body: u64,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: the most an answer's header list (or its trailers) may
    /// decode to, in RFC 7541 §4.1 sizes.
    pub(crate) max_header_list: usize,
    /// How often the connection is looked at: a PING goes out when nothing arrived for this long
    /// under open streams, and the connection fails when the next look finds it unanswered.
    pub(crate) keepalive: std::time::Duration,
    /// A connection with no stream for this long is closed (GOAWAY).
    pub(crate) idle_timeout: std::time::Duration,
}

/// A request's stream: what its answer has brought so far.
struct Slot {
    status: Option<StatusCode>,
    headers: HeaderMap,
    trailers: Option<HeaderMap>,
    body: Body,
    /// The length the answer's content-length announced, when its DATA must add up to it (not
    /// for HEAD, 204 or 304, RFC 9113 §8.1.1).
    expect_len: Option<u64>,
    /// The request is HEAD: its answer's content-length describes no DATA.
    head_request: bool,
    /// The answer has no content (HEAD's, 204, 304): DATA with bytes is a breach.
    no_content: bool,
    /// Set once the answer is whole, or failed.
    done: Option<Result<(), AttemptError>>,
    waker: Option<Waker>,
    /// What the server lets this stream send, and what is left of the body to send.
    send_window: i64,
    pending: Bytes,
    /// Received since this stream's window was last given back.
    unacked: u32,
    /// Whether the answer's head is in (a second HEADERS is trailers).
    head_done: bool,
    /// END_STREAM goes out with the last pending byte (the request is whole), and whether it has.
    end_when_sent: bool,
    ended: bool,
}

/// An answer's body as it arrives: one in a single DATA frame is copied once, to its size (one
/// allocation, where a growing buffer took two); one in several frames is gathered.
#[derive(Default)]
enum Body {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Body {
    fn len(&self) -> usize {
        match self {
            Body::Empty => 0,
            Body::One(b) => b.len(),
            Body::Many(m) => m.len(),
        }
    }

    fn push(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        *self = match std::mem::take(self) {
            Body::Empty => Body::One(Bytes::copy_from_slice(data)),
            Body::One(b) => {
                let mut m = BytesMut::with_capacity(b.len() + data.len());
                m.extend_from_slice(&b);
                m.extend_from_slice(data);
                Body::Many(m)
            }
            Body::Many(mut m) => {
                m.extend_from_slice(data);
                Body::Many(m)
            }
        };
    }

    fn freeze(self) -> Bytes {
        match self {
            Body::Empty => Bytes::new(),
            Body::One(b) => b,
            Body::Many(m) => m.freeze(),
        }
    }
}

/// What the connection's lock guards.
struct Inner {
    /// Frames waiting for the driver to write them.
    out: BytesMut,
    /// The driver's waker: woken when frames are queued or a handle goes.
    driver: Option<Waker>,
    /// Each slot boxed: a stream's slot moves into the table when it opens and out when it is
    /// answered, and the table's buckets (hundreds of streams' worth, spread by id) were written
    /// and read cold each time, where a box moves as one word.
    streams: HashMap<u32, Box<Slot>, BuildHasherDefault<StreamIdHasher>>,
    next_id: u32,
    /// The server's limits.
    max_concurrent: usize,
    initial_window: i64,
    max_frame: usize,
    /// What the server lets the connection send.
    send_window: i64,
    /// Received on the connection since its window was last given back.
    unacked: u32,
    /// Requests waiting for a stream under the server's concurrency limit, or for its SETTINGS.
    waiting: Vec<Waker>,
    /// The server's first SETTINGS came (its limits are known).
    settings_seen: bool,
    /// The connection failed; every stream has been failed with it.
    broken: Option<AttemptError>,
    /// GOAWAY came (or ids ran out): no new stream may start.
    draining: bool,
    decoder: super::hpack::Decoder,
    /// What this side has put in the server's HPACK table.
    encoder: Encoder,
    /// A header block still waiting for its CONTINUATION frames: stream, flags, bytes.
    partial: Option<(u32, u8, BytesMut)>,
    /// Streams that waited on the written output (single-packet rounds).
    flushed: Vec<Waker>,
    /// The driver holds bytes it has not written yet.
    writing: bool,
    /// Handles alive (the driver ends, saying GOAWAY, once none is left).
    handles: usize,
    limits: Limits,
    /// The largest header block waited for (see [`MIN_HEADER_BLOCK`]).
    block_cap: usize,
    /// A keep-alive PING is out and unanswered.
    ping_out: bool,
    /// How long the connection has had no stream, in keep-alive looks.
    idle_looks: u32,
}

/// One HTTP/2 connection, shared by the workers on it and its driver.
pub(crate) struct Conn {
    inner: Mutex<Inner>,
}

/// A worker's hold on a connection: while any is alive, the connection stays open.
pub(crate) struct Handle(Arc<Conn>);

impl Clone for Handle {
    fn clone(&self) -> Handle {
        self.0.lock().handles += 1;
        Handle(self.0.clone())
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let mut inner = self.0.lock();
        inner.handles -= 1;
        if inner.handles == 0 {
            if let Some(w) = inner.driver.take() {
                w.wake();
            }
        }
    }
}

impl Conn {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Opens HTTP/2 on `stream`: the returned handle sends requests, the driver must be polled for
/// anything to move.
pub(crate) fn start(stream: Stream, limits: Limits) -> (Handle, Driver) {
    let mut out = BytesMut::with_capacity(16 << 10);
    out.extend_from_slice(PREFACE);
    // SETTINGS: no push, our stream window, the header list we accept; then the connection's
    // window raised.
    frame_head(&mut out, 18, SETTINGS, 0, 0);
    out.put_u16(0x2);
    out.put_u32(0);
    out.put_u16(0x4);
    out.put_u32(STREAM_WINDOW);
    out.put_u16(0x6);
    out.put_u32(u32::try_from(limits.max_header_list).unwrap_or(u32::MAX));
    frame_head(&mut out, 4, WINDOW_UPDATE, 0, 0);
    out.put_u32(CONN_WINDOW - 65_535);
    let conn = Arc::new(Conn {
        inner: Mutex::new(Inner::new(out, limits)),
    });
    let driver = Driver {
        conn: conn.clone(),
        stream,
        rbuf: BytesMut::with_capacity(64 << 10),
        wbuf: BytesMut::new(),
        written: 0,
        closing: false,
        heard: false,
        look: None,
        every: limits.keepalive,
    };
    (Handle(conn), driver)
}

impl Handle {
    /// Whether a new stream may start here (not failed, no GOAWAY, ids left).
    pub(crate) fn usable(&self) -> bool {
        let inner = self.0.lock();
        inner.broken.is_none() && !inner.draining
    }

    /// Sends `req` on a new stream; with `finish`, the whole of it, else all but its body's last
    /// byte (the stream left open, for [`Handle::finish`]).
    pub(crate) async fn open_stream(
        &self,
        req: &Outgoing,
        origin: &Origin,
        finish: bool,
    ) -> Result<u32, AttemptError> {
        std::future::poll_fn(|cx| self.poll_open(cx, req, origin, finish)).await
    }

    fn poll_open(
        &self,
        cx: &mut Context<'_>,
        req: &Outgoing,
        origin: &Origin,
        finish: bool,
    ) -> Poll<Result<u32, AttemptError>> {
        let mut inner = self.0.lock();
        if let Some(e) = &inner.broken {
            return Poll::Ready(Err(e.clone()));
        }
        if inner.draining {
            return Poll::Ready(Err(refused(
                "the connection was ending (GOAWAY) before this request was sent",
            )));
        }
        if inner.settings_seen && inner.max_concurrent == 0 {
            return Poll::Ready(Err(refused(
                "the server allows 0 concurrent streams (SETTINGS_MAX_CONCURRENT_STREAMS = 0): \
                 it takes no request on this connection",
            )));
        }
        if inner.streams.len() >= inner.max_concurrent {
            if !inner.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                inner.waiting.push(cx.waker().clone());
            }
            return Poll::Pending;
        }
        let id = inner.next_id;
        if id > MAX_STREAM_ID - 2 {
            inner.draining = true;
        }
        inner.next_id += 2;
        let body = if finish || req.body.is_empty() {
            req.body.clone()
        } else {
            req.body.slice(..req.body.len() - 1)
        };
        let end = finish && req.body.is_empty();
        let max_frame = inner.max_frame;
        let inner = &mut *inner;
        queue_request(
            &mut inner.out,
            &mut inner.encoder,
            id,
            req,
            origin,
            end,
            max_frame,
        );
        let mut slot = Box::new(Slot {
            status: None,
            headers: HeaderMap::new(),
            trailers: None,
            body: Body::Empty,
            expect_len: None,
            head_request: req.method == Method::HEAD,
            no_content: false,
            done: None,
            waker: None,
            send_window: inner.initial_window,
            pending: body,
            unacked: 0,
            head_done: false,
            end_when_sent: finish,
            ended: end,
        });
        inner.send_body(id, &mut slot);
        inner.streams.insert(id, slot);
        inner.wake_driver();
        Poll::Ready(Ok(id))
    }

    /// Sends the held-back ends of streams opened without `finish`: each stream's `last` (its
    /// body's last byte, or nothing) with END_STREAM, all queued at once so they leave in one
    /// write.
    pub(crate) fn finish(&self, ends: Vec<(u32, Bytes)>) {
        let mut inner = self.0.lock();
        for (id, last) in ends {
            let Some(mut slot) = inner.streams.remove(&id) else {
                continue;
            };
            if slot.done.is_none() && !slot.ended {
                if slot.pending.is_empty() {
                    slot.pending = last;
                } else {
                    let mut rest = BytesMut::from(&slot.pending[..]);
                    rest.extend_from_slice(&last);
                    slot.pending = rest.freeze();
                }
                slot.end_when_sent = true;
                inner.send_body(id, &mut slot);
            }
            inner.streams.insert(id, slot);
        }
        inner.wake_driver();
    }

    /// The server's limit of concurrent streams, once its first SETTINGS came (this side's own
    /// bound when it sets none); the connection's error if it failed first.
    pub(crate) async fn concurrency(&self) -> Result<usize, AttemptError> {
        std::future::poll_fn(|cx| {
            let mut inner = self.0.lock();
            if let Some(e) = &inner.broken {
                return Poll::Ready(Err(e.clone()));
            }
            if inner.settings_seen {
                return Poll::Ready(Ok(inner.max_concurrent));
            }
            if !inner.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                inner.waiting.push(cx.waker().clone());
            }
            inner.wake_driver();
            Poll::Pending
        })
        .await
    }

    /// Resolves once everything queued so far has been written to the socket (or the connection
    /// failed).
    pub(crate) async fn flushed(&self) {
        std::future::poll_fn(|cx| {
            let mut inner = self.0.lock();
            if inner.broken.is_some() || (inner.out.is_empty() && !inner.writing) {
                return Poll::Ready(());
            }
            inner.flushed.push(cx.waker().clone());
            inner.wake_driver();
            Poll::Pending
        })
        .await;
    }

    /// Waits for stream `id`'s whole answer.
    pub(crate) async fn answer(&self, id: u32) -> Result<Reply, AttemptError> {
        let mut guard = Cancel {
            conn: &self.0,
            id,
            armed: true,
        };
        let r = std::future::poll_fn(|cx| {
            let mut inner = self.0.lock();
            let Some(slot) = inner.streams.get_mut(&id) else {
                return Poll::Ready(Err(closed("stream lost")));
            };
            match slot.done.take() {
                None => {
                    slot.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
                Some(result) => {
                    let slot = inner.streams.remove(&id).expect("present");
                    inner.stream_freed();
                    Poll::Ready(result.and_then(|()| match slot.status {
                        Some(status) => Ok(Reply {
                            status,
                            headers: slot.headers,
                            body: slot.body.freeze(),
                            trailers: slot.trailers,
                        }),
                        None => Err(malformed("HTTP/2 answer without :status".into())),
                    }))
                }
            }
        })
        .await;
        guard.armed = false;
        r
    }
}

impl Handle {
    /// Resolves once stream `id`'s request is whole on the wire — END_STREAM queued and
    /// everything queued before it written to the socket — or fails with the stream's or the
    /// connection's error.
    pub(crate) async fn sent(&self, id: u32) -> Result<(), AttemptError> {
        std::future::poll_fn(|cx| {
            let mut inner = self.0.lock();
            if let Some(e) = &inner.broken {
                return Poll::Ready(Err(e.clone()));
            }
            let ended = match inner.streams.get(&id) {
                Some(slot) => match &slot.done {
                    Some(Err(e)) => return Poll::Ready(Err(e.clone())),
                    // Answered already: the request was whole long before.
                    Some(Ok(())) => true,
                    None => slot.ended,
                },
                None => return Poll::Ready(Err(closed("stream lost"))),
            };
            if ended && inner.out.is_empty() && !inner.writing {
                return Poll::Ready(Ok(()));
            }
            // Woken at the next write: of this request's frames, or of the rest of its body once
            // the server's window lets it go.
            inner.flushed.push(cx.waker().clone());
            inner.wake_driver();
            Poll::Pending
        })
        .await
    }

    /// Gives up stream `id`'s answer: the stream is reset (RST_STREAM CANCEL) unless it already
    /// ended, and whatever the server sends for it is discarded.
    pub(crate) fn cancel(&self, id: u32) {
        drop(Cancel {
            conn: &self.0,
            id,
            armed: true,
        });
    }
}

/// Resets a stream whose answer is no longer awaited (its request timed out or was dropped).
struct Cancel<'a> {
    conn: &'a Arc<Conn>,
    id: u32,
    armed: bool,
}

impl Drop for Cancel<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut inner = self.conn.lock();
        if let Some(slot) = inner.streams.remove(&self.id) {
            if slot.done.is_none() && inner.broken.is_none() {
                frame_head(&mut inner.out, 4, RST_STREAM, 0, self.id);
                inner.out.put_u32(CANCEL);
                inner.wake_driver();
            }
            inner.stream_freed();
        }
    }
}

impl Inner {
    fn new(out: BytesMut, limits: Limits) -> Inner {
        Inner {
            out,
            driver: None,
            streams: HashMap::default(),
            next_id: 1,
            max_concurrent: ASSUMED_CONCURRENCY,
            initial_window: 65_535,
            max_frame: MAX_FRAME,
            send_window: 65_535,
            unacked: 0,
            waiting: Vec::new(),
            settings_seen: false,
            broken: None,
            draining: false,
            decoder: super::hpack::Decoder::new(),
            encoder: Encoder::default(),
            partial: None,
            flushed: Vec::new(),
            writing: false,
            handles: 1,
            limits,
            block_cap: (limits.max_header_list.saturating_mul(2)).max(MIN_HEADER_BLOCK),
            ping_out: false,
            idle_looks: 0,
        }
    }

    fn wake_driver(&mut self) {
        if let Some(w) = self.driver.take() {
            w.wake();
        }
    }

    /// A stream's slot was freed: one waiting request may start.
    fn stream_freed(&mut self) {
        if let Some(w) = self.waiting.pop() {
            w.wake();
        }
    }

    /// Queues as much of `slot`'s pending body as the windows allow, END_STREAM with its last
    /// byte once the request is whole.
    fn send_body(&mut self, id: u32, slot: &mut Slot) {
        while !slot.pending.is_empty() {
            let room = self
                .send_window
                .min(slot.send_window)
                .min(self.max_frame as i64);
            if room <= 0 {
                return;
            }
            let n = (room as usize).min(slot.pending.len());
            let chunk = slot.pending.split_to(n);
            let last = slot.end_when_sent && slot.pending.is_empty();
            frame_head(
                &mut self.out,
                n,
                DATA,
                if last { END_STREAM } else { 0 },
                id,
            );
            self.out.extend_from_slice(&chunk);
            self.send_window -= n as i64;
            slot.send_window -= n as i64;
            slot.ended |= last;
        }
        if slot.end_when_sent && !slot.ended {
            frame_head(&mut self.out, 0, DATA, END_STREAM, id);
            slot.ended = true;
        }
    }

    /// Fails every stream and refuses new ones.
    fn fail(&mut self, e: AttemptError) {
        for slot in self.streams.values_mut() {
            if slot.done.is_none() {
                slot.done = Some(Err(e.clone()));
                if let Some(w) = slot.waker.take() {
                    w.wake();
                }
            }
        }
        self.broken.get_or_insert(e);
        for w in self.waiting.drain(..) {
            w.wake();
        }
        for w in self.flushed.drain(..) {
            w.wake();
        }
    }

    fn complete(&mut self, id: u32, result: Result<(), AttemptError>) {
        if let Some(slot) = self.streams.get_mut(&id) {
            if slot.done.is_none() {
                slot.done = Some(result);
                if let Some(w) = slot.waker.take() {
                    w.wake();
                }
            }
        }
    }

    /// Fails stream `id` for a breach of the protocol that concerns it alone: RST_STREAM with
    /// `code`, the request failed as `protocol`.
    fn stream_error(&mut self, id: u32, code: u32, what: &str) {
        frame_head(&mut self.out, 4, RST_STREAM, 0, id);
        self.out.put_u32(code);
        self.complete(id, Err(protocol(what)));
    }

    /// Handles one frame; an error is the connection's.
    fn on_frame(&mut self, kind: u8, flags: u8, id: u32, mut p: Bytes) -> Result<(), ConnError> {
        if let Some((pid, _, _)) = &self.partial {
            if kind != CONTINUATION || id != *pid {
                return Err(ConnError::protocol(
                    "a header block was interrupted by another frame",
                ));
            }
        }
        if !self.settings_seen && (kind != SETTINGS || flags & ACK != 0) {
            return Err(ConnError::protocol(
                "the server's first frame is not SETTINGS (RFC 9113 §3.4)",
            ));
        }
        // The server opens no stream (push is off): a frame on one this side never opened is a
        // broken connection (RFC 9113 §5.1), whatever it says.
        let on_stream = matches!(
            kind,
            DATA | HEADERS | RST_STREAM | WINDOW_UPDATE | CONTINUATION | PUSH_PROMISE
        );
        if on_stream && id != 0 && (id.is_multiple_of(2) || id >= self.next_id) {
            return Err(ConnError::protocol(&format!(
                "{} on stream {id}, which this side never opened",
                frame_name(kind)
            )));
        }
        match kind {
            DATA => {
                if id == 0 {
                    return Err(ConnError::protocol("DATA on stream 0"));
                }
                let whole = p.len() as u32;
                if self.unacked + whole > CONN_WINDOW {
                    return Err(ConnError::new(
                        FLOW_CONTROL_ERROR,
                        "DATA beyond the connection's receive window",
                    ));
                }
                let data = unpad(&mut p, flags)?;
                self.unacked += whole;
                if self.unacked >= CONN_WINDOW / 2 {
                    frame_head(&mut self.out, 4, WINDOW_UPDATE, 0, 0);
                    self.out.put_u32(self.unacked);
                    self.unacked = 0;
                }
                self.on_data(id, flags & END_STREAM != 0, whole, &data);
            }
            HEADERS => {
                if id == 0 {
                    return Err(ConnError::protocol("HEADERS on stream 0"));
                }
                let mut block = unpad(&mut p, flags)?;
                if flags & PRIORITY_FLAG != 0 {
                    if block.len() < 5 {
                        return Err(ConnError::new(
                            FRAME_SIZE_ERROR,
                            "HEADERS too short for its priority",
                        ));
                    }
                    block.advance(5);
                }
                if flags & END_HEADERS == 0 {
                    self.partial = Some((id, flags, BytesMut::from(&block[..])));
                } else {
                    self.on_header_block(id, flags, &block)?;
                }
            }
            CONTINUATION => {
                let Some((pid, pflags, mut block)) = self.partial.take() else {
                    return Err(ConnError::protocol("CONTINUATION without HEADERS"));
                };
                if block.len() + p.len() > self.block_cap {
                    return Err(ConnError::protocol(&format!(
                        "a header block over {} bytes",
                        self.block_cap
                    )));
                }
                block.extend_from_slice(&p);
                if flags & END_HEADERS == 0 {
                    self.partial = Some((pid, pflags, block));
                } else {
                    self.on_header_block(pid, pflags, &block)?;
                }
            }
            PRIORITY => {
                if id == 0 {
                    return Err(ConnError::protocol("PRIORITY on stream 0"));
                }
                if p.len() != 5 && self.streams.get(&id).is_some_and(|s| s.done.is_none()) {
                    self.stream_error(id, FRAME_SIZE_ERROR, "PRIORITY of the wrong size");
                }
            }
            RST_STREAM => {
                if id == 0 {
                    return Err(ConnError::protocol("RST_STREAM on stream 0"));
                }
                if p.len() != 4 {
                    return Err(ConnError::new(
                        FRAME_SIZE_ERROR,
                        "RST_STREAM of the wrong size",
                    ));
                }
                let code = p.get_u32();
                let error = if code == REFUSED_STREAM {
                    refused("the server refused the stream (REFUSED_STREAM) before processing it")
                } else {
                    AttemptError {
                        kind: ErrorKind::Reset,
                        message: format!("stream reset by the server: {}", error_name(code)),
                    }
                };
                self.complete(id, Err(error));
            }
            SETTINGS => {
                if id != 0 {
                    return Err(ConnError::protocol("SETTINGS on a stream"));
                }
                if flags & ACK != 0 {
                    if !p.is_empty() {
                        return Err(ConnError::new(
                            FRAME_SIZE_ERROR,
                            "a SETTINGS acknowledgement with a payload",
                        ));
                    }
                    return Ok(());
                }
                if !p.len().is_multiple_of(6) {
                    return Err(ConnError::new(
                        FRAME_SIZE_ERROR,
                        "SETTINGS of a length not a multiple of 6",
                    ));
                }
                let first = !self.settings_seen;
                self.settings_seen = true;
                let mut concurrency = None;
                while p.has_remaining() {
                    let key = p.get_u16();
                    let value = p.get_u32();
                    match key {
                        0x2 if value != 0 => {
                            return Err(ConnError::protocol(&format!(
                                "SETTINGS_ENABLE_PUSH {value} from a server"
                            )))
                        }
                        0x1 => self.encoder.set_limit(value as usize),
                        0x3 => concurrency = Some(value),
                        0x4 => {
                            if i64::from(value) > MAX_WINDOW {
                                return Err(ConnError::new(
                                    FLOW_CONTROL_ERROR,
                                    "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1",
                                ));
                            }
                            let delta = i64::from(value) - self.initial_window;
                            self.initial_window = i64::from(value);
                            for slot in self.streams.values_mut() {
                                slot.send_window += delta;
                                if slot.send_window > MAX_WINDOW {
                                    return Err(ConnError::new(
                                        FLOW_CONTROL_ERROR,
                                        "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream's window",
                                    ));
                                }
                            }
                        }
                        0x5 => {
                            if !(16_384..=16_777_215).contains(&value) {
                                return Err(ConnError::protocol(&format!(
                                    "SETTINGS_MAX_FRAME_SIZE {value} out of range"
                                )));
                            }
                            self.max_frame = value as usize;
                        }
                        0x8 if value > 1 => {
                            return Err(ConnError::protocol(&format!(
                                "SETTINGS_ENABLE_CONNECT_PROTOCOL {value}"
                            )))
                        }
                        _ => {}
                    }
                }
                match concurrency {
                    Some(n) => self.max_concurrent = (n as usize).min(OWN_STREAM_CAP),
                    None if first => self.max_concurrent = OWN_STREAM_CAP,
                    None => {}
                }
                frame_head(&mut self.out, 0, SETTINGS, ACK, 0);
                self.resume_bodies();
                for w in self.waiting.drain(..) {
                    w.wake();
                }
            }
            PUSH_PROMISE => return Err(ConnError::protocol("PUSH_PROMISE, with push disabled")),
            PING => {
                if id != 0 {
                    return Err(ConnError::protocol("PING on a stream"));
                }
                if p.len() != 8 {
                    return Err(ConnError::new(FRAME_SIZE_ERROR, "PING of the wrong size"));
                }
                if flags & ACK == 0 {
                    frame_head(&mut self.out, 8, PING, ACK, 0);
                    self.out.extend_from_slice(&p);
                } else {
                    self.ping_out = false;
                }
            }
            GOAWAY => {
                if id != 0 {
                    return Err(ConnError::protocol("GOAWAY on a stream"));
                }
                if p.len() < 8 {
                    return Err(ConnError::new(FRAME_SIZE_ERROR, "GOAWAY too short"));
                }
                let last = p.get_u32() & MAX_STREAM_ID;
                let code = p.get_u32();
                self.draining = true;
                let refused_ids: Vec<u32> =
                    self.streams.keys().copied().filter(|&s| s > last).collect();
                for s in refused_ids {
                    self.complete(
                        s,
                        Err(refused(&format!(
                            "the server's GOAWAY ({}, last stream {last}) says it did not \
                             process this stream",
                            error_name(code)
                        ))),
                    );
                }
                for w in self.waiting.drain(..) {
                    w.wake();
                }
            }
            WINDOW_UPDATE => {
                if p.len() != 4 {
                    return Err(ConnError::new(
                        FRAME_SIZE_ERROR,
                        "WINDOW_UPDATE of the wrong size",
                    ));
                }
                let inc = i64::from(p.get_u32() & MAX_STREAM_ID);
                if id == 0 {
                    if inc == 0 {
                        return Err(ConnError::protocol(
                            "a WINDOW_UPDATE of 0 on the connection",
                        ));
                    }
                    if self.send_window + inc > MAX_WINDOW {
                        return Err(ConnError::new(
                            FLOW_CONTROL_ERROR,
                            "WINDOW_UPDATE past 2^31-1 on the connection",
                        ));
                    }
                    self.send_window += inc;
                } else if let Some(slot) = self.streams.get_mut(&id) {
                    if slot.done.is_none() {
                        if inc == 0 {
                            self.stream_error(id, PROTOCOL_ERROR, "a WINDOW_UPDATE of 0");
                        } else if slot.send_window + inc > MAX_WINDOW {
                            self.stream_error(
                                id,
                                FLOW_CONTROL_ERROR,
                                "WINDOW_UPDATE past 2^31-1 on the stream",
                            );
                        } else {
                            slot.send_window += inc;
                        }
                    }
                }
                self.resume_bodies();
            }
            _ => {}
        }
        Ok(())
    }

    /// A DATA frame's `data` (`whole` bytes with padding) for stream `id`.
    fn on_data(&mut self, id: u32, end: bool, whole: u32, data: &[u8]) {
        let max_body = self.limits.max_body;
        let Some(slot) = self.streams.get_mut(&id) else {
            // A stream of ours already finished (answered, reset or given up).
            return;
        };
        if slot.done.is_some() {
            return;
        }
        let problem = if !slot.head_done {
            Some((PROTOCOL_ERROR, "DATA before the answer's head".to_string()))
        } else if slot.no_content && !data.is_empty() {
            Some((
                PROTOCOL_ERROR,
                "DATA in an answer that has no content (to HEAD, or 204 or 304)".to_string(),
            ))
        } else if slot.unacked + whole > STREAM_WINDOW {
            Some((
                FLOW_CONTROL_ERROR,
                "DATA beyond the stream's receive window".to_string(),
            ))
        } else {
            let len = (slot.body.len() + data.len()) as u64;
            match slot.expect_len {
                Some(n) if len > n => Some((
                    PROTOCOL_ERROR,
                    format!("DATA longer than the content-length of {n}"),
                )),
                Some(n) if end && len < n => Some((
                    PROTOCOL_ERROR,
                    format!("the answer ended after {len} of its content-length of {n} bytes"),
                )),
                _ => None,
            }
        };
        if let Some((code, what)) = problem {
            self.stream_error(id, code, &what);
            return;
        }
        if (slot.body.len() + data.len()) as u64 > max_body {
            frame_head(&mut self.out, 4, RST_STREAM, 0, id);
            self.out.put_u32(CANCEL);
            self.complete(id, Err(over_limit(max_body)));
            return;
        }
        slot.body.push(data);
        slot.unacked += whole;
        if !end && slot.unacked >= STREAM_WINDOW / 2 {
            let n = slot.unacked;
            slot.unacked = 0;
            frame_head(&mut self.out, 4, WINDOW_UPDATE, 0, id);
            self.out.put_u32(n);
        }
        if end {
            self.complete(id, Ok(()));
        }
    }

    /// Sends what bodies the windows now allow.
    fn resume_bodies(&mut self) {
        let ids: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| !s.pending.is_empty())
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if let Some(mut slot) = self.streams.remove(&id) {
                self.send_body(id, &mut slot);
                self.streams.insert(id, slot);
            }
        }
    }

    /// A whole header block for stream `id`: decoded always (the decoder's table must follow the
    /// server's), its fields checked and counted as they come, kept when the stream is ours and
    /// waiting.
    fn on_header_block(&mut self, id: u32, flags: u8, block: &[u8]) -> Result<(), ConnError> {
        let end = flags & END_STREAM != 0;
        let part = match self.streams.get(&id) {
            Some(s) if s.done.is_none() && s.head_done => Part::Trailers,
            Some(s) if s.done.is_none() => Part::Head,
            _ => Part::Ignored,
        };
        let mut list = FieldList::new(self.limits.max_header_list, part);
        self.decoder
            .decode(block, |f| list.push(f))
            .map_err(|e| ConnError::new(COMPRESSION_ERROR, &format!("HPACK: {}", e.0)))?;
        if part == Part::Ignored {
            return Ok(());
        }
        if let Some(what) = list.error {
            self.stream_error(id, PROTOCOL_ERROR, &what);
            return Ok(());
        }
        let Some(slot) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if part == Part::Trailers {
            if !end {
                self.stream_error(id, PROTOCOL_ERROR, "trailers without END_STREAM");
                return Ok(());
            }
            let len = slot.body.len() as u64;
            if let Some(n) = slot.expect_len.filter(|&n| n != len) {
                let what =
                    format!("the answer ended after {len} of its content-length of {n} bytes");
                self.stream_error(id, PROTOCOL_ERROR, &what);
                return Ok(());
            }
            slot.trailers = Some(list.headers);
            self.complete(id, Ok(()));
            return Ok(());
        }
        let Some(status) = list.status else {
            self.stream_error(id, PROTOCOL_ERROR, "an answer without :status");
            return Ok(());
        };
        if status.is_informational() {
            // An interim answer (100, 103…): the final one follows, on the same stream.
            let what = if status == StatusCode::SWITCHING_PROTOCOLS {
                Some("101 Switching Protocols, which HTTP/2 does not have")
            } else if end {
                Some("an informational answer with END_STREAM")
            } else {
                None
            };
            if let Some(what) = what {
                self.stream_error(id, PROTOCOL_ERROR, &format!("{what} ({status})"));
            }
            return Ok(());
        }
        let bodiless = slot.head_request
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let expect_len = list.content_length.filter(|_| !bodiless);
        slot.status = Some(status);
        slot.headers = list.headers;
        slot.head_done = true;
        slot.expect_len = expect_len;
        slot.no_content = bodiless;
        if end {
            if let Some(n) = expect_len.filter(|&n| n != 0) {
                let what = format!("the answer ended after 0 of its content-length of {n} bytes");
                self.stream_error(id, PROTOCOL_ERROR, &what);
                return Ok(());
            }
            self.complete(id, Ok(()));
        }
        Ok(())
    }
}

/// Which header block of a stream is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The answer's head (or an interim one).
    Head,
    /// The trailers, after the head and the body.
    Trailers,
    /// For no stream awaited: decoded for the table's sake only.
    Ignored,
}

/// An answer's header list as its fields are decoded: checked field by field against RFC 9113
/// §8.2–8.3 and counted against the list's limit before anything is kept, so that a breach
/// costs no more than the limit, and a `HeaderMap` is never asked to hold more than it can.
struct FieldList {
    part: Part,
    limit: usize,
    /// The list's size so far (RFC 7541 §4.1: name, value and 32 per field).
    size: usize,
    status: Option<StatusCode>,
    /// A regular field came (a pseudo-header may no longer).
    regular: bool,
    content_length: Option<u64>,
    headers: HeaderMap,
    /// The first breach: the stream fails with it; the rest of the block is only decoded.
    error: Option<String>,
}

impl FieldList {
    fn new(limit: usize, part: Part) -> FieldList {
        FieldList {
            part,
            limit,
            size: 0,
            status: None,
            regular: false,
            content_length: None,
            headers: HeaderMap::new(),
            error: None,
        }
    }

    fn push(&mut self, f: crate::hpack::Field<'_>) {
        if self.error.is_some() || self.part == Part::Ignored {
            return;
        }
        self.size += f.name.len() + f.value.len() + 32;
        if self.size > self.limit {
            self.headers = HeaderMap::new();
            self.error = Some(format!(
                "the answer's header list is over the limit of {} bytes \
                 (SETTINGS_MAX_HEADER_LIST_SIZE)",
                self.limit
            ));
            return;
        }
        if f.name.first() == Some(&b':') {
            self.error = self.pseudo(f.name, f.value).err();
            return;
        }
        self.regular = true;
        let Some((name, value)) = f.typed else {
            self.error = Some(field_problem(f.name, f.value));
            return;
        };
        if name == http::header::CONTENT_LENGTH {
            let n = std::str::from_utf8(f.value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok());
            match (n, self.content_length) {
                (None, _) => {
                    self.error = Some(format!(
                        "invalid content-length {:?}",
                        String::from_utf8_lossy(f.value)
                    ));
                    return;
                }
                (Some(n), Some(m)) if n != m => {
                    self.error = Some(format!("conflicting content-lengths {m} and {n}"));
                    return;
                }
                (n, _) => self.content_length = n,
            }
        }
        if self.headers.try_append(name, value).is_err() {
            self.headers = HeaderMap::new();
            self.error = Some("more header fields than a header map can hold".into());
        }
    }

    /// A pseudo-header: only `:status`, once, first, and not in trailers (RFC 9113 §8.3).
    fn pseudo(&mut self, name: &[u8], value: &[u8]) -> Result<(), String> {
        if name == b":status" && self.part != Part::Trailers && !self.regular {
            if self.status.is_some() {
                return Err("a second :status".into());
            }
            let status = (value.len() == 3 && value.iter().all(u8::is_ascii_digit))
                .then(|| std::str::from_utf8(value).ok()?.parse::<u16>().ok())
                .flatten()
                .and_then(|s| StatusCode::from_u16(s).ok())
                .ok_or_else(|| format!(":status {:?}", String::from_utf8_lossy(value)))?;
            self.status = Some(status);
            return Ok(());
        }
        // Named only when it is refused: every answer has a `:status`.
        let shown = String::from_utf8_lossy(name);
        if self.part == Part::Trailers {
            return Err(format!("pseudo-header {shown} in trailers"));
        }
        if self.regular {
            return Err(format!("pseudo-header {shown} after a regular field"));
        }
        Err(format!("pseudo-header {shown} in an answer"))
    }
}

/// Why a regular field has no typed form: what RFC 9113 §8.2 it breaks.
fn field_problem(name: &[u8], value: &[u8]) -> String {
    let shown = String::from_utf8_lossy(name);
    if name.iter().any(u8::is_ascii_uppercase) {
        format!("field name {shown:?} has uppercase letters (RFC 9113 §8.2.1)")
    } else if http::HeaderName::from_bytes(name).is_err() {
        format!("invalid field name {shown:?}")
    } else if crate::hpack::field_name(name).is_none() {
        format!("connection-specific field {shown} (RFC 9113 §8.2.2)")
    } else {
        let _ = value;
        format!("invalid value of {shown} (a control character, or whitespace at an end)")
    }
}

/// A breach that ends the connection: the GOAWAY code it is answered with, and every stream's
/// error.
#[derive(Debug)]
struct ConnError {
    code: u32,
    error: AttemptError,
}

impl ConnError {
    fn new(code: u32, what: &str) -> ConnError {
        ConnError {
            code,
            error: protocol(&format!("{what} ({})", error_name(code))),
        }
    }

    fn protocol(what: &str) -> ConnError {
        ConnError::new(PROTOCOL_ERROR, what)
    }
}

/// Strips a PADDED frame's padding.
fn unpad(p: &mut Bytes, flags: u8) -> Result<Bytes, ConnError> {
    if flags & PADDED == 0 {
        return Ok(p.clone());
    }
    if p.is_empty() {
        return Err(ConnError::new(
            FRAME_SIZE_ERROR,
            "padded frame without its pad length",
        ));
    }
    let pad = usize::from(p.get_u8());
    if pad > p.len() {
        return Err(ConnError::protocol("padding longer than the frame"));
    }
    Ok(p.slice(..p.len() - pad))
}

fn protocol(what: &str) -> AttemptError {
    AttemptError {
        kind: ErrorKind::Protocol,
        message: format!("HTTP/2 protocol error: {what}"),
    }
}

fn refused(what: &str) -> AttemptError {
    AttemptError {
        kind: ErrorKind::Refused,
        message: what.to_string(),
    }
}

fn frame_name(kind: u8) -> &'static str {
    match kind {
        DATA => "DATA",
        HEADERS => "HEADERS",
        PRIORITY => "PRIORITY",
        RST_STREAM => "RST_STREAM",
        SETTINGS => "SETTINGS",
        PUSH_PROMISE => "PUSH_PROMISE",
        PING => "PING",
        GOAWAY => "GOAWAY",
        WINDOW_UPDATE => "WINDOW_UPDATE",
        CONTINUATION => "CONTINUATION",
        _ => "a frame",
    }
}

fn error_name(code: u32) -> String {
    let name = match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => return format!("error code {code:#x}"),
    };
    name.to_string()
}

fn frame_head(out: &mut BytesMut, len: usize, kind: u8, flags: u8, id: u32) {
    let len = len as u32;
    out.put_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.put_u32(id & MAX_STREAM_ID);
}

/// A header block as HEADERS and, past the frame size, CONTINUATION frames.
fn write_headers(out: &mut BytesMut, id: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1)).peekable();
    let first = chunks.next().unwrap_or(&[]);
    let only = chunks.peek().is_none();
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if only {
        flags |= END_HEADERS;
    }
    frame_head(out, first.len(), HEADERS, flags, id);
    out.extend_from_slice(first);
    while let Some(c) = chunks.next() {
        let last = chunks.peek().is_none();
        frame_head(
            out,
            c.len(),
            CONTINUATION,
            if last { END_HEADERS } else { 0 },
            id,
        );
        out.extend_from_slice(c);
    }
}

/// A request's `:scheme` and `:authority`, fixed per connection.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    https: bool,
    /// `:authority` as a header field, encoded once (it is the same in every request).
    authority: Bytes,
}

impl Origin {
    pub(crate) fn new(https: bool, authority: &str) -> Origin {
        let mut b = BytesMut::with_capacity(authority.len() + 4);
        int(&mut b, 0x00, 4, 1);
        string(&mut b, authority.as_bytes());
        Origin {
            https,
            authority: b.freeze(),
        }
    }
}

/// Connection-specific headers, which HTTP/2 forbids (RFC 9113 §8.2.2); `host` goes as
/// `:authority`.
const NOT_IN_H2: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// The request's header block: the pseudo-headers from the static table where it has them, every
/// field a literal that is not added to the server's table (RFC 7541 §6.2.2), no Huffman.
/// Queues `req`'s HEADERS on stream `id` in `out`: its header block encoded in place, after a
/// frame head written first and filled in once the block's length is known; a block over
/// `max_frame` is moved into HEADERS and CONTINUATIONs.
fn queue_request(
    out: &mut BytesMut,
    encoder: &mut Encoder,
    id: u32,
    req: &Outgoing,
    origin: &Origin,
    end_stream: bool,
    max_frame: usize,
) {
    let start = out.len();
    frame_head(out, 0, HEADERS, 0, id);
    encode_request_into(out, encoder, req, origin);
    let len = out.len() - start - 9;
    if len <= max_frame {
        let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
        let h = &mut out[start..start + 9];
        h[0] = (len >> 16) as u8;
        h[1] = (len >> 8) as u8;
        h[2] = len as u8;
        h[4] = flags;
        return;
    }
    let block = out.split_off(start + 9);
    out.truncate(start);
    write_headers(out, id, &block, end_stream, max_frame);
}

#[cfg(test)]
fn encode_request(req: &Outgoing, origin: &Origin) -> BytesMut {
    let mut b = BytesMut::new();
    encode_request_into(&mut b, &mut Encoder::default(), req, origin);
    b
}

/// Appends `req`'s HPACK header block to `b`, through the connection's `encoder`.
fn encode_request_into(b: &mut BytesMut, encoder: &mut Encoder, req: &Outgoing, origin: &Origin) {
    b.reserve(64 + req.uri.len() + 32 * req.headers.len());
    encoder.start_block(b);
    match req.method {
        Method::GET => b.put_u8(0x82),
        Method::POST => b.put_u8(0x83),
        ref m => {
            int(b, 0x00, 4, 2);
            string(b, m.as_str().as_bytes());
        }
    }
    b.put_u8(if origin.https { 0x87 } else { 0x86 });
    if req.uri == "/" {
        b.put_u8(0x84);
    } else {
        encoder.path(b, req.uri.as_bytes());
    }
    b.extend_from_slice(&origin.authority);
    for (name, value) in &req.headers {
        let n = name.as_str();
        if NOT_IN_H2.contains(&n) || n == "content-length" {
            continue;
        }
        if n == "te" && !value.as_bytes().eq_ignore_ascii_case(b"trailers") {
            continue;
        }
        encoder.field(b, name, value);
    }
    if !req.body.is_empty() {
        // content-length, static index 28.
        int(b, 0x00, 4, 28);
        string(b, itoa::Buffer::new().format(req.body.len()).as_bytes());
    }
}

/// The largest dynamic table this side fills in the server's decoder: the protocol's default,
/// or less when the server's SETTINGS_HEADER_TABLE_SIZE says so.
const ENCODER_TABLE: usize = 4096;
/// Fields sent without indexing that are remembered, so that the second time one is sent it is
/// added to the table: a field that repeats (a content type, a method's path) is then one byte
/// per request, and one that does not (an idempotency key) never takes room in the table.
const ENCODER_SEEN: usize = 16;

/// This side's HPACK encoding context (RFC 7541 §2.3.2, §4): the entries it added to the server's
/// dynamic table, newest first, sized as the server counts them. Every header block of the
/// connection is encoded through it in the order the blocks are written, under the connection's
/// lock, so that the server's table and this copy agree.
#[derive(Default)]
struct Encoder {
    /// `(name, value)`, newest first: index 62 is the front.
    table: VecDeque<(Bytes, Bytes)>,
    size: usize,
    /// The table's size in use: `None` for the protocol's default ([`ENCODER_TABLE`]), until
    /// the server asks for less.
    max: Option<usize>,
    /// A smaller size to announce at the start of the next block.
    update: Option<usize>,
    /// The last fields sent without indexing.
    seen: VecDeque<(HeaderName, HeaderValue)>,
    /// The last `:path` sent without indexing.
    seen_path: Vec<u8>,
    /// Where the last look-up found its field. The table holds each field once, so the order a
    /// look-up tries places in changes nothing but its cost; a load's requests send the same
    /// fields in the same order, and entries are added newest first in the order they were
    /// sent, so the next field is most often one place nearer the front (after the front, the
    /// back).
    hint: usize,
}

impl Encoder {
    fn max(&self) -> usize {
        self.max.unwrap_or(ENCODER_TABLE)
    }

    /// The server's SETTINGS_HEADER_TABLE_SIZE: a table smaller than the one in use is
    /// announced at the start of the next block, and what no longer fits is evicted now.
    fn set_limit(&mut self, limit: usize) {
        let new = limit.min(ENCODER_TABLE);
        if new < self.max() {
            self.max = Some(new);
            self.update = Some(self.update.map_or(new, |u| u.min(new)));
            self.evict(0);
        }
    }

    /// Begins a block: the table size update owed, if any (RFC 7541 §4.2: first in the block).
    fn start_block(&mut self, b: &mut BytesMut) {
        if let Some(u) = self.update.take() {
            int(b, 0x20, 5, u);
            if u != self.max() {
                int(b, 0x20, 5, self.max());
            }
        }
    }

    /// `:path` (static name 4).
    fn path(&mut self, b: &mut BytesMut, value: &[u8]) {
        if let Some(i) = self.find(b":path", value) {
            int(b, 0x80, 7, i);
        } else if self.seen_path == value && self.fits(5, value.len()) {
            int(b, 0x40, 6, 4);
            string(b, value);
            self.add(Bytes::from_static(b":path"), Bytes::copy_from_slice(value));
        } else {
            int(b, 0x00, 4, 4);
            string(b, value);
            self.seen_path.clear();
            self.seen_path.extend_from_slice(value);
        }
    }

    /// A regular field. Credentials are never indexed (RFC 7541 §7.1.3).
    fn field(&mut self, b: &mut BytesMut, name: &HeaderName, value: &HeaderValue) {
        let (n, v) = (name.as_str().as_bytes(), value.as_bytes());
        if matches!(
            name.as_str(),
            "authorization" | "proxy-authorization" | "cookie"
        ) || value.is_sensitive()
        {
            b.put_u8(0x10);
            string(b, n);
            string(b, v);
            return;
        }
        if let Some(i) = self.find(n, v) {
            int(b, 0x80, 7, i);
            return;
        }
        let seen = self
            .seen
            .iter()
            .position(|(sn, sv)| sv.as_bytes() == v && sn == name);
        if let (Some(at), true) = (seen, self.fits(n.len(), v.len())) {
            self.seen.remove(at);
            b.put_u8(0x40);
            string(b, n);
            string(b, v);
            self.add(Bytes::copy_from_slice(n), Bytes::copy_from_slice(v));
            return;
        }
        b.put_u8(0x00);
        string(b, n);
        string(b, v);
        if seen.is_none() {
            if self.seen.len() == ENCODER_SEEN {
                self.seen.pop_back();
            }
            self.seen.push_front((name.clone(), value.clone()));
        }
    }

    /// The index of `name: value` in the dynamic table.
    fn find(&mut self, name: &[u8], value: &[u8]) -> Option<usize> {
        let same = |(n, v): &(Bytes, Bytes)| {
            v.len() == value.len() && n.len() == name.len() && v[..] == *value && n[..] == *name
        };
        let guess = match self.hint {
            0 => self.table.len().checked_sub(1)?,
            h => h - 1,
        };
        let at = if self.table.get(guess).is_some_and(same) {
            guess
        } else {
            self.table.iter().position(same)?
        };
        self.hint = at;
        Some(62 + at)
    }

    /// Whether an entry this size is worth a place: at most a quarter of the table, so that a
    /// few long values cannot push out the many short ones.
    fn fits(&self, name: usize, value: usize) -> bool {
        name + value + 32 <= self.max() / 4
    }

    fn add(&mut self, name: Bytes, value: Bytes) {
        let size = name.len() + value.len() + 32;
        self.evict(size);
        self.table.push_front((name, value));
        self.size += size;
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max() {
            let Some((n, v)) = self.table.pop_back() else {
                break;
            };
            self.size -= n.len() + v.len() + 32;
        }
    }
}

/// An HPACK integer with an `n`-bit prefix under `first`'s high bits (RFC 7541 §5.1).
fn int(b: &mut BytesMut, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        b.put_u8(first | v as u8);
        return;
    }
    b.put_u8(first | max as u8);
    v -= max;
    while v >= 128 {
        b.put_u8((v % 128) as u8 | 0x80);
        v /= 128;
    }
    b.put_u8(v as u8);
}

/// An HPACK string literal, not Huffman-coded.
fn string(b: &mut BytesMut, s: &[u8]) {
    int(b, 0x00, 7, s.len());
    b.extend_from_slice(s);
}

/// The future that reads and writes one connection's frames; it ends when the connection does.
pub(crate) struct Driver {
    conn: Arc<Conn>,
    stream: Stream,
    rbuf: BytesMut,
    /// What is being written, and how much of it has been.
    wbuf: BytesMut,
    written: usize,
    /// Every handle is gone, or the connection stayed idle: GOAWAY written, then the driver ends.
    closing: bool,
    /// Something arrived since the last keep-alive look.
    heard: bool,
    /// The next keep-alive look, and the time between two.
    look: Option<Pin<Box<tokio::time::Sleep>>>,
    every: std::time::Duration,
}

impl Future for Driver {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            // Read what has arrived and handle its frames.
            let mut progressed = false;
            loop {
                if this.rbuf.capacity() - this.rbuf.len() < 16 << 10 {
                    this.rbuf.reserve(64 << 10);
                }
                let dst = this.rbuf.spare_capacity_mut();
                let mut rb = ReadBuf::uninit(dst);
                match Pin::new(&mut this.stream).poll_read(cx, &mut rb) {
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        if n == 0 {
                            this.conn
                                .lock()
                                .fail(closed("connection closed by the server"));
                            return Poll::Ready(());
                        }
                        // SAFETY: `n` bytes of the spare capacity were just written by the read.
                        unsafe { this.rbuf.set_len(this.rbuf.len() + n) };
                        progressed = true;
                        this.heard = true;
                        if let Err(e) = this.handle_frames() {
                            let mut inner = this.conn.lock();
                            frame_head(&mut inner.out, 8, GOAWAY, 0, 0);
                            inner.out.put_u32(0);
                            inner.out.put_u32(e.code);
                            inner.fail(e.error);
                            let out = inner.out.split();
                            drop(inner);
                            // A last word to the server, not waited for.
                            this.wbuf = out;
                            this.written = 0;
                            let _ = this.poll_write_out(cx);
                            return Poll::Ready(());
                        }
                    }
                    Poll::Ready(Err(e)) => {
                        this.conn.lock().fail(io_failure("HTTP/2", e));
                        return Poll::Ready(());
                    }
                    Poll::Pending => break,
                }
            }
            if this.poll_look(cx) {
                return Poll::Ready(());
            }
            // Write what the workers and the frames queued.
            {
                let mut inner = this.conn.lock();
                if inner.handles == 0 && !this.closing {
                    this.closing = true;
                    frame_head(&mut inner.out, 8, GOAWAY, 0, 0);
                    inner.out.put_u32(MAX_STREAM_ID);
                    inner.out.put_u32(NO_ERROR);
                }
                if this.written == this.wbuf.len() && !inner.out.is_empty() {
                    this.wbuf = inner.out.split();
                    this.written = 0;
                    inner.writing = true;
                }
                inner.driver = Some(cx.waker().clone());
            }
            match this.poll_write_out(cx) {
                Poll::Ready(Ok(())) => {
                    let mut inner = this.conn.lock();
                    inner.writing = false;
                    if inner.out.is_empty() {
                        for w in inner.flushed.drain(..) {
                            w.wake();
                        }
                        if this.closing {
                            return Poll::Ready(());
                        }
                    } else {
                        progressed = true;
                    }
                }
                Poll::Ready(Err(e)) => {
                    this.conn.lock().fail(io_failure("HTTP/2", e));
                    return Poll::Ready(());
                }
                Poll::Pending => {}
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    }
}

impl Driver {
    /// Looks at the connection when the keep-alive timer fires: a PING left unanswered since the
    /// last look fails it (true: the driver ends); under open streams, a PING goes out if nothing
    /// arrived since; a connection idle for its idle timeout says GOAWAY and closes.
    fn poll_look(&mut self, cx: &mut Context<'_>) -> bool {
        let every = self.every;
        let look = self
            .look
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
        if look.as_mut().poll(cx).is_pending() {
            return false;
        }
        look.as_mut().reset(tokio::time::Instant::now() + every);
        let _ = look.as_mut().poll(cx);
        let heard = std::mem::take(&mut self.heard);
        let mut inner = self.conn.lock();
        if inner.ping_out {
            inner.fail(closed(&format!(
                "the server answered no PING within {every:?}: the connection is taken for dead"
            )));
            return true;
        }
        if inner.streams.is_empty() {
            inner.idle_looks += 1;
            let idle = every.saturating_mul(inner.idle_looks);
            if idle >= inner.limits.idle_timeout && !self.closing {
                // Closed as when the last handle goes; the next request opens a new one.
                inner.draining = true;
                self.closing = true;
                frame_head(&mut inner.out, 8, GOAWAY, 0, 0);
                inner.out.put_u32(0);
                inner.out.put_u32(NO_ERROR);
                inner.wake_driver();
            }
        } else {
            inner.idle_looks = 0;
            if !heard {
                frame_head(&mut inner.out, 8, PING, 0, 0);
                inner.out.put_u64(0x6861_726e_6573_7321);
                inner.ping_out = true;
            }
        }
        false
    }

    /// Writes `wbuf` until it is out or the socket is full.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.written < self.wbuf.len() {
            match Pin::new(&mut self.stream).poll_write(cx, &self.wbuf[self.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        match Pin::new(&mut self.stream).poll_flush(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Handles every whole frame in the read buffer.
    fn handle_frames(&mut self) -> Result<(), ConnError> {
        read_frames(&mut self.rbuf, &mut self.conn.lock())
    }
}

/// Handles every whole frame in `rbuf`, leaving a partial one there.
fn read_frames(rbuf: &mut BytesMut, inner: &mut Inner) -> Result<(), ConnError> {
    loop {
        if rbuf.len() < 9 {
            return Ok(());
        }
        let h = &rbuf[..9];
        let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
        if len > MAX_FRAME {
            return Err(ConnError::new(
                FRAME_SIZE_ERROR,
                &format!("a frame of {len} bytes, over the {MAX_FRAME} allowed"),
            ));
        }
        if rbuf.len() < 9 + len {
            return Ok(());
        }
        let (kind, flags) = (h[3], h[4]);
        let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_STREAM_ID;
        rbuf.advance(9);
        let payload = rbuf.split_to(len).freeze();
        inner.on_frame(kind, flags, id, payload)?;
    }
}

/// What [`replay`] saw: each request's outcome, and every byte the client would have written.
pub(crate) struct Replayed {
    pub(crate) answers: Vec<Result<Reply, AttemptError>>,
    pub(crate) written: Bytes,
}

/// The frame reader without a socket, for the fuzz target: `requests` opened on a connection
/// with `limits`, then `server`'s bytes read `piece` bytes at a time as if they had arrived.
pub(crate) fn replay(
    server: &[u8],
    piece: usize,
    requests: &[Outgoing],
    limits: Limits,
) -> Replayed {
    let conn = Arc::new(Conn {
        inner: Mutex::new(Inner::new(BytesMut::new(), limits)),
    });
    let handle = Handle(conn.clone());
    let origin = Origin::new(false, "127.0.0.1");
    let mut cx = Context::from_waker(Waker::noop());
    let ids: Vec<Result<u32, AttemptError>> = requests
        .iter()
        .map(|r| match handle.poll_open(&mut cx, r, &origin, true) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(closed("no stream free")),
        })
        .collect();
    let mut rbuf = BytesMut::new();
    for bytes in server.chunks(piece.max(1)) {
        rbuf.extend_from_slice(bytes);
        let mut inner = conn.lock();
        if let Err(e) = read_frames(&mut rbuf, &mut inner) {
            inner.fail(e.error);
            break;
        }
    }
    let answers = ids
        .into_iter()
        .map(|id| {
            let id = id?;
            let mut answer = std::pin::pin!(handle.answer(id));
            match answer.as_mut().poll(&mut cx) {
                Poll::Ready(r) => r,
                Poll::Pending => Err(closed("no answer in what the server sent")),
            }
        })
        .collect();
    let written = conn.lock().out.split().freeze();
    Replayed { answers, written }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn origin() -> Origin {
        Origin::new(false, "127.0.0.1:8080")
    }

    #[test]
    fn a_request_block_decodes_to_the_request() {
        let mut headers = HeaderMap::new();
        headers.insert("idempotency-key", HeaderValue::from_static("k-1"));
        headers.insert("connection", HeaderValue::from_static("keep-alive"));
        headers.insert("host", HeaderValue::from_static("elsewhere"));
        let long = format!("/orders?{}", "x".repeat(300));
        let req = Outgoing {
            method: Method::PUT,
            uri: long.clone(),
            headers,
            body: Bytes::from_static(b"{}"),
        };
        let block = encode_request(&req, &origin());
        let mut d = crate::hpack::Decoder::new();
        let mut fields: Vec<(String, String)> = Vec::new();
        d.decode(&block, |f| {
            fields.push((
                String::from_utf8(f.name.to_vec()).unwrap(),
                String::from_utf8(f.value.to_vec()).unwrap(),
            ))
        })
        .unwrap();
        let want: Vec<(String, String)> = [
            (":method", "PUT"),
            (":scheme", "http"),
            (":path", long.as_str()),
            (":authority", "127.0.0.1:8080"),
            ("idempotency-key", "k-1"),
            ("content-length", "2"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(fields, want);
        let get = Outgoing {
            method: Method::GET,
            uri: "/".into(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        let block = encode_request(&get, &Origin::new(true, "a"));
        assert_eq!(&block[..], &[0x82, 0x87, 0x84, 0x01, 0x01, b'a']);
    }

    /// Through one connection's encoder, a field sent a second time goes into the server's
    /// table and is one byte after that; a field that never repeats, and a credential, never
    /// goes in; when the server shrinks its table the next block says so first. Every block
    /// decodes, with the decoder's own table, to exactly the fields sent.
    #[test]
    fn repeated_fields_are_indexed_and_every_block_decodes_as_sent() {
        let mut encoder = Encoder::default();
        let mut decoder = crate::hpack::Decoder::new();
        let mut sizes = Vec::new();
        for i in 0..60 {
            match i {
                30 => encoder.set_limit(300),
                45 => encoder.set_limit(0),
                _ => {}
            }
            let path = if i % 7 == 6 { "/other.S/N" } else { "/pkg.S/M" };
            let key = format!("key-{i:03}");
            // In an order that turns every few blocks, so that a look-up does not always find
            // its field where the one before it suggests.
            let mut regular = vec![
                ("content-type", "application/grpc".to_string()),
                ("te", "trailers".to_string()),
                ("idempotency-key", key.clone()),
            ];
            regular.rotate_left(i / 4 % 3);
            let mut headers = HeaderMap::new();
            for (name, value) in &regular {
                headers.insert(*name, HeaderValue::from_str(value).unwrap());
            }
            headers.insert("authorization", HeaderValue::from_static("Bearer s3cret"));
            let req = Outgoing {
                method: Method::POST,
                uri: path.into(),
                headers,
                body: Bytes::from_static(b"xyz"),
            };
            let mut block = BytesMut::new();
            encode_request_into(&mut block, &mut encoder, &req, &origin());
            sizes.push(block.len());
            let mut fields: Vec<(String, String)> = Vec::new();
            decoder
                .decode(&block, |f| {
                    fields.push((
                        String::from_utf8(f.name.to_vec()).unwrap(),
                        String::from_utf8(f.value.to_vec()).unwrap(),
                    ))
                })
                .unwrap_or_else(|e| panic!("block {i}: {e:?}"));
            let want: Vec<(String, String)> = [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "127.0.0.1:8080"),
            ]
            .into_iter()
            .chain(regular.iter().map(|(n, v)| (*n, v.as_str())))
            .chain([("authorization", "Bearer s3cret"), ("content-length", "3")])
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
            assert_eq!(fields, want, "block {i}");
        }
        // The first block is all literals; from the third, the path, content-type and te are
        // indexed (one byte each); the key and the credential stay literals.
        assert!(sizes[2] + 40 < sizes[0], "{sizes:?}");
        assert_eq!(sizes[3], sizes[2], "{sizes:?}");
        // In another order, they are found as well.
        assert_eq!((sizes[4], sizes[8]), (sizes[2], sizes[2]), "{sizes:?}");
        // With no table left, blocks are literals again (the first of them says so first).
        assert_eq!(sizes[50], sizes[0], "{sizes:?}");
        assert!(encoder.table.is_empty() && encoder.size == 0);
    }

    #[test]
    fn integers_past_their_prefix_continue_in_seven_bit_groups() {
        // RFC 7541 C.1.2: 1337 with a 5-bit prefix.
        let mut b = BytesMut::new();
        int(&mut b, 0x00, 5, 1337);
        assert_eq!(&b[..], &[31, 154, 10]);
        let mut b = BytesMut::new();
        int(&mut b, 0x00, 5, 10);
        assert_eq!(&b[..], &[10]);
    }

    /// A request queued in place frames the same bytes as its block encoded apart and then
    /// framed, within one frame and past it, after what was queued before.
    #[test]
    fn a_request_queued_in_place_is_framed_as_its_block() {
        for (uri, max_frame, end) in [("/", 16_384, true), ("/a?b=c", 16_384, false)]
            .into_iter()
            .chain([("/long-enough-for-three-frames", 16, true)])
        {
            let req = Outgoing {
                method: Method::GET,
                uri: uri.into(),
                headers: HeaderMap::new(),
                body: Bytes::new(),
            };
            let mut apart = BytesMut::from(&b"before"[..]);
            write_headers(
                &mut apart,
                5,
                &encode_request(&req, &origin()),
                end,
                max_frame,
            );
            let mut in_place = BytesMut::from(&b"before"[..]);
            queue_request(
                &mut in_place,
                &mut Encoder::default(),
                5,
                &req,
                &origin(),
                end,
                max_frame,
            );
            assert_eq!(in_place, apart, "{uri} at {max_frame}");
        }
    }

    #[test]
    fn a_block_over_the_frame_size_goes_on_in_continuations() {
        let block = vec![7u8; 40_000];
        let mut out = BytesMut::new();
        write_headers(&mut out, 3, &block, true, 16_384);
        let mut kinds = Vec::new();
        let mut p = out.freeze();
        let mut total = 0;
        while p.len() >= 9 {
            let len = (usize::from(p[0]) << 16) | (usize::from(p[1]) << 8) | usize::from(p[2]);
            kinds.push((p[3], p[4]));
            p.advance(9 + len);
            total += len;
        }
        assert_eq!(total, 40_000);
        assert_eq!(
            kinds,
            [
                (HEADERS, END_STREAM),
                (CONTINUATION, 0),
                (CONTINUATION, END_HEADERS)
            ]
        );
    }
}
