//! What an HTTP/2 connection put on the wire, frame by frame, and what it let in.
//!
//! Why read our own output: the journal says `responded` only when a response's last byte was
//! written to the socket, and h2 — like any HTTP/2 implementation — takes a stream's data into
//! its send buffer whatever the peer's flow-control window, then writes it when it can. Nothing
//! in its API says when a stream's last frame left. The bytes it writes do: every frame starts
//! with its length, type, flags and stream, so the [`Ledger`] reads the headers of the frames as
//! they are accepted by the socket (over TLS, once the session has written them on) and keeps,
//! for each stream the server answers, how many of its bytes went out and whether the frame that
//! ends it did. The stream's task waits on that, not on h2.
//!
//! The same reading tells what the h2 layer refused on its own, before any request reached the
//! server's handlers — a malformed or oversize header block, a stream over the concurrency
//! limit, a connection error — from the RST_STREAM, HEADERS and GOAWAY frames it sends for
//! streams no handler saw; those are counted ([`Http2Counts`]), not journaled.
//!
//! What comes in is read too, for the few frame-size rules where h2's error code is not the
//! RFC's: a SETTINGS, PING, WINDOW_UPDATE or RST_STREAM frame of the wrong length is a connection
//! error of type FRAME_SIZE_ERROR (RFC 9113 §6.4, §6.5, §6.7, §6.9), which h2 reports as
//! PROTOCOL_ERROR; so is a PRIORITY frame of the wrong length on a stream (§6.3 makes it a
//! stream error, which §5.4 lets an endpoint treat as the connection's). Such a frame is not
//! passed on; the connection ends with our own GOAWAY.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::journal::Clock;
use crate::socket::ConnIo;
use crate::state::Http2Counts;

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const PRIORITY: u8 = 2;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// FRAME_SIZE_ERROR.
pub(crate) const FRAME_SIZE_ERROR: u32 = 6;

/// How far a stream's answer got onto the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Bytes of its HEADERS, CONTINUATION and DATA frames written, frame headers included.
    pub(crate) bytes: u64,
    /// The frame that ends the stream (END_STREAM, its header block complete) was written.
    pub(crate) ended: bool,
    /// A RST_STREAM for it was written, or the connection ended before the frame that ends it.
    pub(crate) reset: bool,
}

#[derive(Debug, Default)]
struct Tracked {
    sent: Sent,
    /// END_STREAM came on a HEADERS frame whose block goes on in CONTINUATION frames.
    end_after_block: bool,
    /// Its task has its answer (or gave up): the entry goes once the last frame is seen.
    done: bool,
    /// When the frame that ends it was written (the server's clock, µs).
    ended_us: u64,
    waker: Option<Waker>,
}

/// A frame being read from one direction of the byte stream.
#[derive(Debug, Default)]
struct Framing {
    head: [u8; 9],
    head_len: usize,
    /// Payload bytes of the current frame still to come.
    left: u32,
    /// The first bytes of the payload (error codes live there).
    prefix: [u8; 8],
    prefix_len: usize,
}

impl Framing {
    fn kind(&self) -> u8 {
        self.head[3]
    }
    fn flags(&self) -> u8 {
        self.head[4]
    }
    fn len(&self) -> u32 {
        (u32::from(self.head[0]) << 16) | (u32::from(self.head[1]) << 8) | u32::from(self.head[2])
    }
    fn stream(&self) -> u32 {
        u32::from_be_bytes([self.head[5], self.head[6], self.head[7], self.head[8]]) & 0x7fff_ffff
    }
    fn code(&self, at: usize) -> u32 {
        u32::from_be_bytes([
            self.prefix[at],
            self.prefix[at + 1],
            self.prefix[at + 2],
            self.prefix[at + 3],
        ])
    }
}

/// What one write did to the streams, applied when its bytes are known to be on the socket.
#[derive(Debug, Clone, Copy)]
enum Event {
    Bytes(u32, u64),
    Ended(u32),
    Reset(u32, u32),
    /// HEADERS on a stream no handler saw: h2 answering `431` to an oversize header block.
    Unseen431(u32),
    GoAway(u32),
}

#[derive(Default)]
struct Inner {
    out: Framing,
    streams: HashMap<u32, Tracked, BuildHasherDefault<transport::StreamIdHasher>>,
    /// Streams whose task is done but whose last frame was not seen yet, oldest first: bounded,
    /// so a connection whose streams end without a last frame does not grow.
    done: VecDeque<u32>,
    /// Over TLS, what was accepted by the session but may not be on the socket yet: the events,
    /// each with the count of bytes accepted when it happened.
    unsent: VecDeque<(u64, Event)>,
    accepted: u64,
    /// A stream h2 answered `431` before refusing it: its RST is counted as that.
    answered_431: Option<u32>,
    /// Streams no handler had taken when h2 reset them, with the reset's code, oldest first: a
    /// refusal before dispatch, unless h2 hands the stream over after all (a body that broke
    /// its content-length in the same read as its head is reset before the request is taken,
    /// and the handler journals it). Counted by [`Ledger::settle_refusals`]; bounded.
    unclaimed: VecDeque<(u32, u32)>,
    /// The highest stream a client opened (from what came in), for our own GOAWAY.
    last_opened: u32,
    /// A frame that came in broke a size rule: the connection ends with this error code.
    violation: Option<u32>,
}

/// Done streams kept waiting for their last frame before the oldest is let go.
const MAX_DONE: usize = 4096;
/// Resets of streams no handler took yet, kept before the oldest is counted as refused.
const MAX_UNCLAIMED: usize = 1024;

/// One HTTP/2 connection's record of what it wrote, per stream; see the module's doc.
pub(crate) struct Ledger {
    inner: Mutex<Inner>,
    counts: Arc<Http2Counts>,
    clock: Arc<Clock>,
    /// Whether `unclaimed` may hold a reset, so that settling takes the lock only then (the
    /// accept loop settles each time it has nothing to accept).
    unclaimed_any: AtomicBool,
}

impl Ledger {
    /// A ledger counting refusals into `counts`, stamping the ends of answers with `clock`.
    pub(crate) fn new(counts: Arc<Http2Counts>, clock: Arc<Clock>) -> Ledger {
        Ledger {
            inner: Mutex::new(Inner::default()),
            counts,
            clock,
            unclaimed_any: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts following a stream the server took (from now on its frames are its answer's).
    pub(crate) fn follow(&self, stream: u32) {
        let mut inner = self.lock();
        inner.streams.insert(stream, Tracked::default());
        // Reset by h2 before it was handed over: the handler has it, and journals it.
        inner.unclaimed.retain(|&(s, _)| s != stream);
    }

    /// Counts as refused before dispatch the streams h2 reset that no handler took. Called when
    /// h2 has no stream left to hand over (and when the connection ends): a stream it reset and
    /// did not hand over by then never will be.
    pub(crate) fn settle_refusals(&self) {
        if !self.unclaimed_any.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut inner = self.lock();
        for (_, code) in inner.unclaimed.drain(..) {
            self.counts.refused(code);
        }
    }

    /// The stream's task no longer needs it; it is forgotten once its last frame is seen (or
    /// at once, when that was seen already).
    pub(crate) fn release(&self, stream: u32) {
        let mut inner = self.lock();
        let finished = match inner.streams.get_mut(&stream) {
            None => return,
            Some(t) => {
                t.done = true;
                t.waker = None;
                t.sent.ended || t.sent.reset
            }
        };
        if finished {
            inner.streams.remove(&stream);
            return;
        }
        inner.done.push_back(stream);
        while inner.done.len() > MAX_DONE {
            if let Some(old) = inner.done.pop_front() {
                inner.streams.remove(&old);
            }
        }
    }

    /// How far the stream's answer got; when it did not move past `seen`, wakes the task when
    /// it does.
    pub(crate) fn poll_sent(&self, stream: u32, seen: Sent, cx: &mut Context<'_>) -> Poll<Sent> {
        let mut inner = self.lock();
        match inner.streams.get_mut(&stream) {
            None => Poll::Ready(Sent {
                reset: true,
                ..seen
            }),
            Some(t) if t.sent != seen => Poll::Ready(t.sent),
            Some(t) => {
                t.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// How far the stream's answer got.
    pub(crate) fn sent(&self, stream: u32) -> Sent {
        self.lock()
            .streams
            .get(&stream)
            .map(|t| t.sent)
            .unwrap_or_default()
    }

    /// The connection has ended: nothing more of any answer will be written. A stream whose
    /// last frame did not get out reads as reset, and its task is woken to journal it so now,
    /// rather than waiting for progress that cannot come (until the send timeout, with every
    /// journal entry behind it held back).
    pub(crate) fn close(&self) {
        self.settle_refusals();
        let mut inner = self.lock();
        inner.unsent.clear();
        for t in inner.streams.values_mut() {
            if !t.sent.ended {
                t.sent.reset = true;
            }
            if let Some(w) = t.waker.take() {
                w.wake();
            }
        }
    }

    /// When the frame that ends the stream's answer was written, if it was: the moment its
    /// client could have the whole answer, whenever the stream's task gets to journal it.
    pub(crate) fn ended_at(&self, stream: u32) -> Option<u64> {
        self.lock()
            .streams
            .get(&stream)
            .filter(|t| t.sent.ended)
            .map(|t| t.ended_us)
    }

    /// The highest stream the client opened.
    pub(crate) fn last_opened(&self) -> u32 {
        self.lock().last_opened
    }

    /// The error code the connection must end with because of a frame the client sent.
    pub(crate) fn violation(&self) -> Option<u32> {
        self.lock().violation
    }

    fn violated(&self, code: u32) {
        self.lock().violation = Some(code);
    }

    /// Counts a connection this server ends with a GOAWAY of its own writing.
    pub(crate) fn count_goaway(&self, code: u32) {
        self.counts.goaway(code);
    }

    fn opened(&self, stream: u32) {
        let mut inner = self.lock();
        inner.last_opened = inner.last_opened.max(stream);
    }

    /// Reads the frames in `bytes`, just accepted for writing; `on_socket` when they are on the
    /// socket already (plain TCP), else they wait for [`Ledger::drained`].
    fn wrote(&self, bytes: &[u8], on_socket: bool) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.accepted += bytes.len() as u64;
        let mut events: Vec<Event> = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let f = &mut inner.out;
            if f.head_len < 9 {
                let take = (9 - f.head_len).min(rest.len());
                f.head[f.head_len..f.head_len + take].copy_from_slice(&rest[..take]);
                f.head_len += take;
                rest = &rest[take..];
                if f.head_len < 9 {
                    break;
                }
                f.left = f.len();
                f.prefix_len = 0;
                if matches!(f.kind(), HEADERS | CONTINUATION | DATA) {
                    events.push(Event::Bytes(f.stream(), 9));
                }
            } else {
                let take = (f.left as usize).min(rest.len());
                if f.prefix_len < 8 {
                    let p = (8 - f.prefix_len).min(take);
                    f.prefix[f.prefix_len..f.prefix_len + p].copy_from_slice(&rest[..p]);
                    f.prefix_len += p;
                }
                if take > 0 && matches!(f.kind(), HEADERS | CONTINUATION | DATA) {
                    events.push(Event::Bytes(f.stream(), take as u64));
                }
                f.left -= take as u32;
                rest = &rest[take..];
            }
            let f = &mut inner.out;
            if f.head_len == 9 && f.left == 0 {
                // The whole frame is out.
                let (kind, flags, stream) = (f.kind(), f.flags(), f.stream());
                match kind {
                    DATA if flags & END_STREAM != 0 => events.push(Event::Ended(stream)),
                    HEADERS => {
                        if !inner.streams.contains_key(&stream) {
                            events.push(Event::Unseen431(stream));
                        }
                        let end = flags & END_STREAM != 0;
                        if end && flags & END_HEADERS != 0 {
                            events.push(Event::Ended(stream));
                        } else if end {
                            if let Some(t) = inner.streams.get_mut(&stream) {
                                t.end_after_block = true;
                            }
                        }
                    }
                    CONTINUATION
                        if flags & END_HEADERS != 0
                            && inner
                                .streams
                                .get(&stream)
                                .is_some_and(|t| t.end_after_block) =>
                    {
                        events.push(Event::Ended(stream));
                    }
                    RST_STREAM if f.prefix_len >= 4 => {
                        events.push(Event::Reset(stream, f.code(0)));
                    }
                    GOAWAY if f.prefix_len >= 8 => events.push(Event::GoAway(f.code(4))),
                    _ => {}
                }
                inner.out.head_len = 0;
            }
        }
        if on_socket && inner.unsent.is_empty() {
            for e in events {
                self.apply(inner, e);
            }
        } else {
            let at = inner.accepted;
            inner.unsent.extend(events.into_iter().map(|e| (at, e)));
        }
    }

    /// Everything accepted so far is on the socket (TLS: the session wrote all it held).
    fn drained(&self) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        while let Some((_, e)) = inner.unsent.pop_front() {
            self.apply(inner, e);
        }
    }

    fn apply(&self, inner: &mut Inner, e: Event) {
        let stream = match e {
            Event::Bytes(s, _) | Event::Ended(s) | Event::Reset(s, _) | Event::Unseen431(s) => s,
            Event::GoAway(code) => {
                if code != 0 {
                    self.counts.goaway(code);
                }
                return;
            }
        };
        let Some(t) = inner.streams.get_mut(&stream) else {
            match e {
                Event::Unseen431(s) => {
                    inner.answered_431 = Some(s);
                    self.counts
                        .header_list_too_large
                        .fetch_add(1, Ordering::Relaxed);
                }
                Event::Reset(s, code) if inner.answered_431 == Some(s) => {
                    inner.answered_431 = None;
                    let _ = code;
                }
                // A stream no handler saw, reset by h2 with an error: refused before dispatch,
                // once it is sure h2 does not hand it over (see `unclaimed`). (NO_ERROR and
                // CANCEL end streams that were answered or abandoned.)
                Event::Reset(s, code) if code != 0 && code != 8 => {
                    inner.unclaimed.push_back((s, code));
                    self.unclaimed_any.store(true, Ordering::Release);
                    while inner.unclaimed.len() > MAX_UNCLAIMED {
                        if let Some((_, old)) = inner.unclaimed.pop_front() {
                            self.counts.refused(old);
                        }
                    }
                }
                _ => {}
            }
            return;
        };
        match e {
            Event::Bytes(_, n) => t.sent.bytes += n,
            Event::Ended(_) => {
                t.sent.ended = true;
                t.ended_us = self.clock.now_us();
            }
            Event::Reset(_, _) => t.sent.reset = true,
            _ => return,
        }
        if let Some(w) = t.waker.take() {
            w.wake();
        }
        if t.done && (t.sent.ended || t.sent.reset) {
            inner.streams.remove(&stream);
        }
    }
}

/// The byte stream a client sends, read for its frame boundaries.
struct Inbound {
    /// Bytes of the client preface still to come.
    preface_left: usize,
    framing: Framing,
    /// A frame broke a size rule: the connection ends with this error code.
    violation: Option<u32>,
}

impl Inbound {
    /// Reads `bytes`; returns how many of them may be handed on (all, unless a frame in them
    /// broke a size rule: then the bytes before that frame).
    fn read(&mut self, bytes: &[u8], ledger: &Ledger) -> usize {
        let mut at = 0;
        while at < bytes.len() {
            if self.preface_left > 0 {
                let take = self.preface_left.min(bytes.len() - at);
                self.preface_left -= take;
                at += take;
                continue;
            }
            let f = &mut self.framing;
            if f.head_len < 9 {
                // Where the frame starts in `bytes` (0 when its header began in an earlier read).
                let frame_start = at;
                let take = (9 - f.head_len).min(bytes.len() - at);
                f.head[f.head_len..f.head_len + take].copy_from_slice(&bytes[at..at + take]);
                f.head_len += take;
                at += take;
                if f.head_len < 9 {
                    break;
                }
                f.left = f.len();
                let (kind, flags, len) = (f.kind(), f.flags(), f.len());
                let wrong = match kind {
                    SETTINGS => len % 6 != 0 || (flags & ACK != 0 && len != 0),
                    PING => len != 8,
                    WINDOW_UPDATE | RST_STREAM => len != 4,
                    // On a stream: a stream error, here the connection's (RFC 9113 §5.4 allows
                    // it); on stream 0 h2's PROTOCOL_ERROR is the RFC's.
                    PRIORITY => len != 5 && f.stream() != 0,
                    _ => false,
                };
                if wrong {
                    self.violation = Some(FRAME_SIZE_ERROR);
                    ledger.violated(FRAME_SIZE_ERROR);
                    return frame_start;
                }
                if kind == HEADERS {
                    ledger.opened(f.stream());
                }
            } else {
                let take = (f.left as usize).min(bytes.len() - at);
                f.left -= take as u32;
                at += take;
            }
            let f = &mut self.framing;
            if f.head_len == 9 && f.left == 0 {
                f.head_len = 0;
            }
        }
        bytes.len()
    }
}

/// The connection as h2 sees it: the socket (or TLS), with what goes out read into the
/// [`Ledger`] and what comes in checked for the frame-size rules.
pub(crate) struct H2Io {
    io: ConnIo,
    ledger: Arc<Ledger>,
    inbound: Inbound,
}

impl H2Io {
    /// `io`, its frames recorded in `ledger`.
    pub(crate) fn new(io: ConnIo, ledger: Arc<Ledger>) -> H2Io {
        H2Io {
            io,
            ledger,
            inbound: Inbound {
                preface_left: 24,
                framing: Framing::default(),
                violation: None,
            },
        }
    }

    fn wrote(&self, bufs: &[io::IoSlice<'_>], mut n: usize) {
        let on_socket = !self.io.is_tls() || self.io.drained();
        for b in bufs {
            if n == 0 {
                break;
            }
            let take = n.min(b.len());
            self.ledger.wrote(&b[..take], on_socket);
            n -= take;
        }
        if on_socket && self.io.is_tls() {
            self.ledger.drained();
        }
    }
}

impl AsyncRead for H2Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.inbound.violation.is_some() {
            return Poll::Ready(Err(io::ErrorKind::InvalidData.into()));
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut me.io).poll_read(cx, buf))?;
        let keep = me.inbound.read(&buf.filled()[before..], &me.ledger);
        let got = buf.filled().len() - before;
        if keep < got {
            buf.set_filled(before + keep);
            if keep == 0 {
                return Poll::Ready(Err(io::ErrorKind::InvalidData.into()));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for H2Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let n = std::task::ready!(Pin::new(&mut me.io).poll_write(cx, buf))?;
        me.wrote(&[io::IoSlice::new(buf)], n);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let n = std::task::ready!(Pin::new(&mut me.io).poll_write_vectored(cx, bufs))?;
        me.wrote(bufs, n);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        std::task::ready!(Pin::new(&mut me.io).poll_flush(cx))?;
        if me.io.is_tls() {
            me.ledger.drained();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A GOAWAY frame: the last stream processed and the error code.
pub(crate) fn goaway_frame(last_stream: u32, code: u32) -> [u8; 17] {
    let mut f = [0u8; 17];
    f[2] = 8;
    f[3] = GOAWAY;
    f[9..13].copy_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    f[13..17].copy_from_slice(&code.to_be_bytes());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let n = payload.len();
        let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_stream_ends_when_its_last_frame_is_out_however_the_writes_split_it() {
        let ledger = Ledger::new(Arc::new(Http2Counts::default()), Arc::new(Clock::new()));
        ledger.follow(1);
        ledger.follow(3);
        let mut out = frame(HEADERS, END_HEADERS, 1, &[0x88]);
        out.extend(frame(DATA, 0, 1, &[b'a'; 100]));
        out.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &[0x88]));
        out.extend(frame(DATA, END_STREAM, 1, &[b'b'; 50]));
        // One byte at a time: the frame headers arrive in pieces too.
        for (i, b) in out.iter().enumerate() {
            if i + 1 == out.len() {
                assert!(!ledger.sent(1).ended, "not before its last byte");
            }
            ledger.wrote(std::slice::from_ref(b), true);
        }
        assert_eq!(
            ledger.sent(1),
            Sent {
                bytes: 10 + 109 + 59,
                ended: true,
                reset: false
            }
        );
        assert!(ledger.sent(3).ended);
        assert_eq!(ledger.sent(3).bytes, 10);
    }

    #[test]
    fn over_tls_a_frame_counts_once_the_session_wrote_it() {
        let ledger = Ledger::new(Arc::new(Http2Counts::default()), Arc::new(Clock::new()));
        ledger.follow(1);
        ledger.wrote(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]), false);
        assert_eq!(ledger.sent(1), Sent::default());
        ledger.drained();
        assert!(ledger.sent(1).ended);
    }

    #[test]
    fn the_end_of_an_answer_is_timed_when_its_frame_reaches_the_socket() {
        let clock = Arc::new(Clock::new());
        let ledger = Ledger::new(Arc::new(Http2Counts::default()), clock.clone());
        ledger.follow(1);
        ledger.follow(3);
        let before = clock.now_us();
        ledger.wrote(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]), true);
        let ended = ledger.ended_at(1).expect("ended");
        assert!(ended >= before);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(ledger.ended_at(1), Some(ended), "read later, the same time");
        // Over TLS: when the session wrote it, not when it was accepted.
        ledger.wrote(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &[0x88]), false);
        assert_eq!(ledger.ended_at(3), None);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let drained = clock.now_us();
        ledger.drained();
        assert!(ledger.ended_at(3).expect("ended") >= drained);
    }

    #[test]
    fn a_closed_connection_ends_the_streams_still_waiting_and_wakes_them() {
        let ledger = Ledger::new(Arc::new(Http2Counts::default()), Arc::new(Clock::new()));
        ledger.follow(1);
        ledger.follow(3);
        ledger.follow(5);
        ledger.wrote(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]), true);
        // Over TLS, accepted by the session but never on the socket.
        ledger.wrote(&frame(HEADERS, END_HEADERS | END_STREAM, 5, &[0x88]), false);
        let woken = Arc::new(Flag::default());
        let waker = std::task::Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(ledger.poll_sent(3, Sent::default(), &mut cx).is_pending());
        ledger.close();
        assert!(woken.0.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(
            ledger.poll_sent(3, Sent::default(), &mut cx),
            Poll::Ready(Sent {
                bytes: 0,
                ended: false,
                reset: true
            })
        );
        assert!(ledger.sent(1).ended && !ledger.sent(1).reset, "it got out");
        assert!(ledger.sent(5).reset && !ledger.sent(5).ended, "it did not");
    }

    #[derive(Default)]
    struct Flag(std::sync::atomic::AtomicBool);

    impl std::task::Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn what_h2_refused_on_its_own_is_counted_by_reason() {
        let counts = Arc::new(Http2Counts::default());
        let ledger = Ledger::new(counts.clone(), Arc::new(Clock::new()));
        ledger.follow(1);
        let mut out = frame(RST_STREAM, 0, 1, &8u32.to_be_bytes());
        out.extend(frame(RST_STREAM, 0, 3, &1u32.to_be_bytes()));
        out.extend(frame(RST_STREAM, 0, 5, &7u32.to_be_bytes()));
        out.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            7,
            &[0x48, 3, b'4', b'3', b'1'],
        ));
        out.extend(frame(RST_STREAM, 0, 7, &7u32.to_be_bytes()));
        let mut goaway = 0u32.to_be_bytes().to_vec();
        goaway.extend(11u32.to_be_bytes());
        out.extend(frame(GOAWAY, 0, 0, &goaway));
        ledger.wrote(&out, true);
        assert!(ledger.sent(1).reset, "a followed stream's reset is its own");
        // Not yet counted: h2 may still hand stream 3 or 5 over.
        assert_eq!(counts.refused_streams(), [("header_list_too_large", 1)]);
        // Reset before it was handed over, then handed over: the handler's, not a refusal.
        ledger.follow(3);
        ledger.settle_refusals();
        assert_eq!(
            counts.refused_streams(),
            [("refused_stream", 1), ("header_list_too_large", 1)]
        );
        assert_eq!(counts.connection_errors(), [("enhance_your_calm", 1)]);
        // What the connection ends with unsettled is counted then.
        ledger.wrote(&frame(RST_STREAM, 0, 9, &1u32.to_be_bytes()), true);
        ledger.close();
        assert_eq!(
            counts.refused_streams(),
            [
                ("protocol_error", 1),
                ("refused_stream", 1),
                ("header_list_too_large", 1)
            ]
        );
    }

    #[test]
    fn a_settings_frame_of_the_wrong_length_stops_what_is_passed_on() {
        let ledger = Ledger::new(Arc::new(Http2Counts::default()), Arc::new(Clock::new()));
        let mut inbound = Inbound {
            preface_left: 24,
            framing: Framing::default(),
            violation: None,
        };
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(frame(SETTINGS, 0, 0, &[0; 6]));
        let good = bytes.len();
        bytes.extend(frame(SETTINGS, 0, 0, &[0; 5]));
        assert_eq!(inbound.read(&bytes, &ledger), good);
        assert_eq!(inbound.violation, Some(FRAME_SIZE_ERROR));
    }
}
