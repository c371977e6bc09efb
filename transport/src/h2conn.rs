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
//! read, RST_STREAM failing its stream, GOAWAY failing the streams it did not take and refusing new
//! ones (the slot then opens a new connection), CONTINUATION, padding, trailers and informational
//! answers. Anything else malformed ends the connection as a protocol error.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use history::ErrorKind;
use http::{HeaderMap, Method, StatusCode};
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

/// The receive window each stream is given (SETTINGS_INITIAL_WINDOW_SIZE), and the connection's.
const STREAM_WINDOW: u32 = 1 << 20;
const CONN_WINDOW: u32 = 1 << 24;
/// The largest frame this side accepts (the protocol's default; never raised).
const MAX_FRAME: usize = 16_384;
/// The most header-block bytes one answer may carry (HEADERS and its CONTINUATIONs).
const MAX_HEADER_BLOCK: usize = 256 << 10;
/// Concurrent streams assumed until the server's SETTINGS say (RFC 9113 recommends at least 100).
const ASSUMED_CONCURRENCY: usize = 100;
/// The largest stream id.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// Hashes a stream id with one multiplication: the ids are this side's own, odd and increasing,
/// and the table is looked up a few times per request, where the default hasher's cost showed.
#[derive(Default)]
struct StreamIdHasher(u64);

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

/// A request's stream: what its answer has brought so far.
struct Slot {
    status: Option<StatusCode>,
    headers: HeaderMap,
    body: Body,
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
    streams: HashMap<u32, Slot, BuildHasherDefault<StreamIdHasher>>,
    next_id: u32,
    /// The server's limits.
    max_concurrent: usize,
    initial_window: i64,
    max_frame: usize,
    /// What the server lets the connection send.
    send_window: i64,
    /// Received on the connection since its window was last given back.
    unacked: u32,
    /// Requests waiting for a stream under the server's concurrency limit.
    waiting: Vec<Waker>,
    /// The connection failed; every stream has been failed with it.
    broken: Option<AttemptError>,
    /// GOAWAY came (or ids ran out): no new stream may start.
    draining: bool,
    decoder: super::hpack::Decoder,
    /// A header block still waiting for its CONTINUATION frames: stream, flags, bytes.
    partial: Option<(u32, u8, BytesMut)>,
    /// Streams that waited on the written output (single-packet rounds).
    flushed: Vec<Waker>,
    /// The driver holds bytes it has not written yet.
    writing: bool,
    /// Handles alive (the driver ends, saying GOAWAY, once none is left).
    handles: usize,
    /// Max body per answer.
    max_body: u64,
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
pub(crate) fn start(stream: Stream, max_body: u64) -> (Handle, Driver) {
    let mut out = BytesMut::with_capacity(16 << 10);
    out.extend_from_slice(PREFACE);
    // SETTINGS: no push, our stream window, then the connection's window raised.
    frame_head(&mut out, 12, SETTINGS, 0, 0);
    out.put_u16(0x2);
    out.put_u32(0);
    out.put_u16(0x4);
    out.put_u32(STREAM_WINDOW);
    frame_head(&mut out, 4, WINDOW_UPDATE, 0, 0);
    out.put_u32(CONN_WINDOW - 65_535);
    let decoder = super::hpack::Decoder::new();
    let conn = Arc::new(Conn {
        inner: Mutex::new(Inner {
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
            broken: None,
            draining: false,
            decoder,
            partial: None,
            flushed: Vec::new(),
            writing: false,
            handles: 1,
            max_body,
        }),
    });
    let driver = Driver {
        conn: conn.clone(),
        stream,
        rbuf: BytesMut::with_capacity(64 << 10),
        wbuf: BytesMut::new(),
        written: 0,
        closing: false,
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
            return Poll::Ready(Err(closed("connection ended by GOAWAY")));
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
        queue_request(&mut inner.out, id, req, origin, end, max_frame);
        let mut slot = Slot {
            status: None,
            headers: HeaderMap::new(),
            body: Body::Empty,
            done: None,
            waker: None,
            send_window: inner.initial_window,
            pending: body,
            unacked: 0,
            head_done: false,
            end_when_sent: finish,
            ended: end,
        };
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

    /// Handles one frame; an error is the connection's.
    fn on_frame(&mut self, kind: u8, flags: u8, id: u32, mut p: Bytes) -> Result<(), AttemptError> {
        if let Some((pid, _, _)) = &self.partial {
            if kind != CONTINUATION || id != *pid {
                return Err(protocol("a header block was interrupted"));
            }
        }
        match kind {
            DATA => {
                if id == 0 {
                    return Err(protocol("DATA on stream 0"));
                }
                let whole = p.len() as u32;
                let data = unpad(&mut p, flags)?;
                self.unacked += whole;
                if self.unacked >= CONN_WINDOW / 2 {
                    frame_head(&mut self.out, 4, WINDOW_UPDATE, 0, 0);
                    self.out.put_u32(self.unacked);
                    self.unacked = 0;
                }
                let max_body = self.max_body;
                let mut too_large = false;
                let mut give_back = None;
                if let Some(slot) = self.streams.get_mut(&id) {
                    if slot.done.is_none() {
                        if (slot.body.len() + data.len()) as u64 > max_body {
                            too_large = true;
                        } else {
                            slot.body.push(&data);
                            slot.unacked += whole;
                            if flags & END_STREAM == 0 && slot.unacked >= STREAM_WINDOW / 2 {
                                give_back = Some(slot.unacked);
                                slot.unacked = 0;
                            }
                        }
                    }
                }
                if too_large {
                    frame_head(&mut self.out, 4, RST_STREAM, 0, id);
                    self.out.put_u32(CANCEL);
                    self.complete(id, Err(over_limit(max_body)));
                } else if let Some(n) = give_back {
                    frame_head(&mut self.out, 4, WINDOW_UPDATE, 0, id);
                    self.out.put_u32(n);
                }
                if flags & END_STREAM != 0 {
                    self.complete(id, Ok(()));
                }
            }
            HEADERS => {
                if id == 0 {
                    return Err(protocol("HEADERS on stream 0"));
                }
                let mut block = unpad(&mut p, flags)?;
                if flags & PRIORITY_FLAG != 0 {
                    if block.len() < 5 {
                        return Err(protocol("HEADERS too short for its priority"));
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
                    return Err(protocol("CONTINUATION without HEADERS"));
                };
                block.extend_from_slice(&p);
                if block.len() > MAX_HEADER_BLOCK {
                    return Err(protocol("header block over 256 KiB"));
                }
                if flags & END_HEADERS == 0 {
                    self.partial = Some((pid, pflags, block));
                } else {
                    self.on_header_block(pid, pflags, &block)?;
                }
            }
            PRIORITY => {}
            RST_STREAM => {
                if p.len() != 4 {
                    return Err(protocol("RST_STREAM of the wrong size"));
                }
                let code = p.get_u32();
                self.complete(
                    id,
                    Err(AttemptError {
                        kind: ErrorKind::Reset,
                        message: format!("stream reset: {}", error_name(code)),
                    }),
                );
            }
            SETTINGS => {
                if flags & ACK != 0 {
                    return Ok(());
                }
                if !p.len().is_multiple_of(6) || id != 0 {
                    return Err(protocol("malformed SETTINGS"));
                }
                while p.has_remaining() {
                    let key = p.get_u16();
                    let value = p.get_u32();
                    match key {
                        0x3 => self.max_concurrent = value as usize,
                        0x4 => {
                            if value > MAX_STREAM_ID {
                                return Err(protocol("initial window over 2^31-1"));
                            }
                            let delta = i64::from(value) - self.initial_window;
                            self.initial_window = i64::from(value);
                            for slot in self.streams.values_mut() {
                                slot.send_window += delta;
                            }
                        }
                        0x5 => {
                            if !(16_384..=16_777_215).contains(&value) {
                                return Err(protocol("max frame size out of range"));
                            }
                            self.max_frame = value as usize;
                        }
                        _ => {}
                    }
                }
                frame_head(&mut self.out, 0, SETTINGS, ACK, 0);
                self.resume_bodies();
                for w in self.waiting.drain(..) {
                    w.wake();
                }
            }
            PUSH_PROMISE => return Err(protocol("PUSH_PROMISE, with push disabled")),
            PING => {
                if p.len() != 8 {
                    return Err(protocol("PING of the wrong size"));
                }
                if flags & ACK == 0 {
                    frame_head(&mut self.out, 8, PING, ACK, 0);
                    self.out.extend_from_slice(&p);
                }
            }
            GOAWAY => {
                if p.len() < 8 {
                    return Err(protocol("GOAWAY too short"));
                }
                let last = p.get_u32() & MAX_STREAM_ID;
                let code = p.get_u32();
                self.draining = true;
                let refused: Vec<u32> =
                    self.streams.keys().copied().filter(|&s| s > last).collect();
                for s in refused {
                    self.complete(
                        s,
                        Err(closed(&format!(
                            "connection ended by GOAWAY ({}) before this stream",
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
                    return Err(protocol("WINDOW_UPDATE of the wrong size"));
                }
                let inc = i64::from(p.get_u32() & MAX_STREAM_ID);
                if id == 0 {
                    self.send_window += inc;
                } else if let Some(slot) = self.streams.get_mut(&id) {
                    slot.send_window += inc;
                }
                self.resume_bodies();
            }
            _ => {}
        }
        Ok(())
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
    /// server's), kept when the stream is ours and waiting.
    fn on_header_block(&mut self, id: u32, flags: u8, block: &[u8]) -> Result<(), AttemptError> {
        let mut status: Option<u16> = None;
        let mut headers = HeaderMap::new();
        let mut bad = None;
        self.decoder
            .decode(block, |f| {
                if f.name.first() == Some(&b':') {
                    if f.name == b":status" {
                        status = std::str::from_utf8(f.value)
                            .ok()
                            .and_then(|s| s.parse().ok());
                    }
                    return;
                }
                match f.typed {
                    Some((n, v)) => {
                        headers.append(n, v);
                    }
                    None => bad = Some(String::from_utf8_lossy(f.name).into_owned()),
                }
            })
            .map_err(|e| protocol(&format!("HPACK: {}", e.0)))?;
        let end = flags & END_STREAM != 0;
        let Some(slot) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if slot.done.is_some() {
            return Ok(());
        }
        if !slot.head_done {
            if let Some(name) = bad {
                self.complete(id, Err(malformed(format!("invalid header {name:?}"))));
                return Ok(());
            }
            match status.and_then(|s| StatusCode::from_u16(s).ok()) {
                // An informational answer: the real one follows.
                Some(s) if s.is_informational() => return Ok(()),
                Some(s) => {
                    slot.status = Some(s);
                    slot.headers = headers;
                    slot.head_done = true;
                }
                None => {
                    self.complete(id, Err(malformed("HTTP/2 answer without :status".into())));
                    return Ok(());
                }
            }
        }
        // A second block is the trailers: read, not kept.
        if end {
            self.complete(id, Ok(()));
        }
        Ok(())
    }
}

/// Strips a PADDED frame's padding.
fn unpad(p: &mut Bytes, flags: u8) -> Result<Bytes, AttemptError> {
    if flags & PADDED == 0 {
        return Ok(p.clone());
    }
    if p.is_empty() {
        return Err(protocol("padded frame without its pad length"));
    }
    let pad = usize::from(p.get_u8());
    if pad > p.len() {
        return Err(protocol("padding longer than the frame"));
    }
    Ok(p.slice(..p.len() - pad))
}

fn protocol(what: &str) -> AttemptError {
    AttemptError {
        kind: ErrorKind::Malformed,
        message: format!("HTTP/2 protocol error: {what}"),
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
    id: u32,
    req: &Outgoing,
    origin: &Origin,
    end_stream: bool,
    max_frame: usize,
) {
    let start = out.len();
    frame_head(out, 0, HEADERS, 0, id);
    encode_request_into(out, req, origin);
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
    encode_request_into(&mut b, req, origin);
    b
}

/// Appends `req`'s HPACK header block to `b`.
fn encode_request_into(b: &mut BytesMut, req: &Outgoing, origin: &Origin) {
    b.reserve(64 + req.uri.len() + 32 * req.headers.len());
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
        int(b, 0x00, 4, 4);
        string(b, req.uri.as_bytes());
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
        b.put_u8(0x00);
        string(b, n.as_bytes());
        string(b, value.as_bytes());
    }
    if !req.body.is_empty() {
        // content-length, static index 28.
        int(b, 0x00, 4, 28);
        string(b, itoa::Buffer::new().format(req.body.len()).as_bytes());
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
    /// Every handle is gone: GOAWAY written, then the driver ends.
    closing: bool,
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
                        if let Err(e) = this.handle_frames() {
                            let mut inner = this.conn.lock();
                            frame_head(&mut inner.out, 8, GOAWAY, 0, 0);
                            inner.out.put_u32(0);
                            inner.out.put_u32(PROTOCOL_ERROR);
                            inner.fail(e);
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
    fn handle_frames(&mut self) -> Result<(), AttemptError> {
        let mut inner = self.conn.lock();
        loop {
            if self.rbuf.len() < 9 {
                return Ok(());
            }
            let h = &self.rbuf[..9];
            let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
            if len > MAX_FRAME {
                return Err(AttemptError {
                    kind: ErrorKind::Malformed,
                    message: format!("HTTP/2 frame of {len} bytes, over the {MAX_FRAME} allowed"),
                });
            }
            if self.rbuf.len() < 9 + len {
                return Ok(());
            }
            let (kind, flags) = (h[3], h[4]);
            let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_STREAM_ID;
            self.rbuf.advance(9);
            let payload = self.rbuf.split_to(len).freeze();
            inner.on_frame(kind, flags, id, payload)?;
        }
    }
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
            queue_request(&mut in_place, 5, &req, &origin(), end, max_frame);
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
