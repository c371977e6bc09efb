//! A connection's state, which the workers on the connection and its driver share under one
//! lock: the table of open streams (a stream is a slot in it), the output the driver writes, the
//! flow-control windows both ways and the server's settings. Here are also the steps every frame
//! handler and every request takes on it: a request's body sent as the windows allow, a stream
//! completed or failed, the connection failed.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;
use std::task::Waker;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, StatusCode};

use super::frame::{frame_head, protocol, DATA, END_STREAM, MAX_FRAME, RST_STREAM};
use crate::hpack::{Decoder, Encoder};
use crate::AttemptError;

/// The receive window each stream is given (SETTINGS_INITIAL_WINDOW_SIZE), and the connection's.
pub(super) const STREAM_WINDOW: u32 = 1 << 20;
pub(super) const CONN_WINDOW: u32 = 1 << 24;
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
/// The largest flow-control window (RFC 9113 §6.9.1).
pub(super) const MAX_WINDOW: i64 = (1 << 31) - 1;

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
pub(super) struct Slot {
    pub(super) status: Option<StatusCode>,
    pub(super) headers: HeaderMap,
    pub(super) trailers: Option<HeaderMap>,
    pub(super) body: Body,
    /// The length the answer's content-length announced, when its DATA must add up to it (not
    /// for HEAD, 204 or 304, RFC 9113 §8.1.1).
    pub(super) expect_len: Option<u64>,
    /// The request is HEAD: its answer's content-length describes no DATA.
    pub(super) head_request: bool,
    /// The answer has no content (HEAD's, 204, 304): DATA with bytes is a breach.
    pub(super) no_content: bool,
    /// Set once the answer is whole, or failed.
    pub(super) done: Option<Result<(), AttemptError>>,
    pub(super) waker: Option<Waker>,
    /// What the server lets this stream send, and what is left of the body to send.
    pub(super) send_window: i64,
    pub(super) pending: Bytes,
    /// Received since this stream's window was last given back.
    pub(super) unacked: u32,
    /// Whether the answer's head is in (a second HEADERS is trailers).
    pub(super) head_done: bool,
    /// END_STREAM goes out with the last pending byte (the request is whole), and whether it has.
    pub(super) end_when_sent: bool,
    pub(super) ended: bool,
}

/// An answer's body as it arrives: one in a single DATA frame is copied once, to its size (one
/// allocation, where a growing buffer took two); one in several frames is gathered.
#[derive(Default)]
pub(super) enum Body {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Body {
    pub(super) fn len(&self) -> usize {
        match self {
            Body::Empty => 0,
            Body::One(b) => b.len(),
            Body::Many(m) => m.len(),
        }
    }

    pub(super) fn push(&mut self, data: &[u8]) {
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

    pub(super) fn freeze(self) -> Bytes {
        match self {
            Body::Empty => Bytes::new(),
            Body::One(b) => b,
            Body::Many(m) => m.freeze(),
        }
    }
}

/// A connection's state, which its lock guards: the streams open on it and what each answer
/// brought so far, the frames queued for the driver to write, both sides' windows and settings,
/// both HPACK contexts, and who waits for what.
pub(super) struct ConnState {
    /// Frames waiting for the driver to write them.
    pub(super) out: BytesMut,
    /// The driver's waker: woken when frames are queued or a handle goes.
    pub(super) driver: Option<Waker>,
    /// Each slot boxed: a stream's slot moves into the table when it opens and out when it is
    /// answered, and the table's buckets (hundreds of streams' worth, spread by id) were written
    /// and read cold each time, where a box moves as one word.
    pub(super) streams: HashMap<u32, Box<Slot>, BuildHasherDefault<StreamIdHasher>>,
    pub(super) next_id: u32,
    /// The server's limits.
    pub(super) max_concurrent: usize,
    pub(super) initial_window: i64,
    pub(super) max_frame: usize,
    /// What the server lets the connection send.
    pub(super) send_window: i64,
    /// Received on the connection since its window was last given back.
    pub(super) unacked: u32,
    /// Requests waiting for a stream under the server's concurrency limit, or for its SETTINGS.
    pub(super) waiting: Vec<Waker>,
    /// The server's first SETTINGS came (its limits are known).
    pub(super) settings_seen: bool,
    /// The connection failed; every stream has been failed with it.
    pub(super) broken: Option<AttemptError>,
    /// GOAWAY came (or ids ran out): no new stream may start.
    pub(super) draining: bool,
    pub(super) decoder: Decoder,
    /// What this side has put in the server's HPACK table.
    pub(super) encoder: Encoder,
    /// A header block still waiting for its CONTINUATION frames: stream, flags, bytes.
    pub(super) partial: Option<(u32, u8, BytesMut)>,
    /// Streams that waited on the written output (single-packet rounds).
    pub(super) flushed: Vec<Waker>,
    /// The driver holds bytes it has not written yet.
    pub(super) writing: bool,
    /// Handles alive (the driver ends, saying GOAWAY, once none is left).
    pub(super) handles: usize,
    pub(super) limits: Limits,
    /// The largest header block waited for (see [`MIN_HEADER_BLOCK`]).
    pub(super) block_cap: usize,
    /// A keep-alive PING is out and unanswered.
    pub(super) ping_out: bool,
    /// How long the connection has had no stream, in keep-alive looks.
    pub(super) idle_looks: u32,
}

/// One HTTP/2 connection, shared by the workers on it and its driver.
pub(crate) struct Conn {
    pub(super) state: Mutex<ConnState>,
}

impl Conn {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ConnState {
    pub(super) fn new(out: BytesMut, limits: Limits) -> ConnState {
        ConnState {
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
            decoder: Decoder::new(),
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

    pub(super) fn wake_driver(&mut self) {
        if let Some(w) = self.driver.take() {
            w.wake();
        }
    }

    /// A stream's slot was freed: one waiting request may start.
    pub(super) fn stream_freed(&mut self) {
        if let Some(w) = self.waiting.pop() {
            w.wake();
        }
    }

    /// Queues as much of `slot`'s pending body as the windows allow, END_STREAM with its last
    /// byte once the request is whole.
    pub(super) fn send_body(&mut self, id: u32, slot: &mut Slot) {
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
    pub(super) fn fail(&mut self, e: AttemptError) {
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

    pub(super) fn complete(&mut self, id: u32, result: Result<(), AttemptError>) {
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
    pub(super) fn stream_error(&mut self, id: u32, code: u32, what: &str) {
        frame_head(&mut self.out, 4, RST_STREAM, 0, id);
        self.out.put_u32(code);
        self.complete(id, Err(protocol(what)));
    }

    /// Sends what bodies the windows now allow.
    pub(super) fn resume_bodies(&mut self) {
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
}
