//! A worker's side of a connection: a [`Handle`] opens streams, sends requests, waits for their
//! answers and gives them up; [`start`] opens the connection (its preface and settings queued)
//! and returns the [`Driver`] that moves its bytes. [`replay`] is the same without a socket, for
//! the fuzz target.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, Method};

use super::driver::Driver;
use super::frame::{
    frame_head, refused, CANCEL, MAX_STREAM_ID, PREFACE, RST_STREAM, SETTINGS,
    SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE,
    WINDOW_UPDATE,
};
use super::receive::read_frames;
use super::request::{queue_request, Origin};
use super::state::{Body, Conn, ConnState, Limits, Slot, CONN_WINDOW, STREAM_WINDOW};
use crate::stream::Stream;
use crate::{closed, malformed, AttemptError, Outgoing, Reply};

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
        let mut state = self.0.lock();
        state.handles -= 1;
        if state.handles == 0 {
            if let Some(w) = state.driver.take() {
                w.wake();
            }
        }
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
    out.put_u16(SETTINGS_ENABLE_PUSH);
    out.put_u32(0);
    out.put_u16(SETTINGS_INITIAL_WINDOW_SIZE);
    out.put_u32(STREAM_WINDOW);
    out.put_u16(SETTINGS_MAX_HEADER_LIST_SIZE);
    out.put_u32(u32::try_from(limits.max_header_list).unwrap_or(u32::MAX));
    frame_head(&mut out, 4, WINDOW_UPDATE, 0, 0);
    out.put_u32(CONN_WINDOW - 65_535);
    let conn = Arc::new(Conn {
        state: Mutex::new(ConnState::new(out, limits)),
    });
    let driver = Driver::new(conn.clone(), stream, limits.keepalive);
    (Handle(conn), driver)
}

impl Handle {
    /// Whether a new stream may start here (not failed, no GOAWAY, ids left).
    pub(crate) fn usable(&self) -> bool {
        let state = self.0.lock();
        state.broken.is_none() && !state.draining
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
        let mut state = self.0.lock();
        if let Some(e) = &state.broken {
            return Poll::Ready(Err(e.clone()));
        }
        if state.draining {
            return Poll::Ready(Err(refused(
                "the connection was ending (GOAWAY) before this request was sent",
            )));
        }
        if state.settings_seen && state.max_concurrent == 0 {
            return Poll::Ready(Err(refused(
                "the server allows 0 concurrent streams (SETTINGS_MAX_CONCURRENT_STREAMS = 0): \
                 it takes no request on this connection",
            )));
        }
        if state.streams.len() >= state.max_concurrent {
            if !state.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                state.waiting.push(cx.waker().clone());
            }
            return Poll::Pending;
        }
        let id = state.next_id;
        if id > MAX_STREAM_ID - 2 {
            state.draining = true;
        }
        state.next_id += 2;
        let body = if finish || req.body.is_empty() {
            req.body.clone()
        } else {
            req.body.slice(..req.body.len() - 1)
        };
        let end = finish && req.body.is_empty();
        let max_frame = state.max_frame;
        let state = &mut *state;
        queue_request(
            &mut state.out,
            &mut state.encoder,
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
            send_window: state.initial_window,
            pending: body,
            unacked: 0,
            head_done: false,
            end_when_sent: finish,
            ended: end,
        });
        state.send_body(id, &mut slot);
        state.streams.insert(id, slot);
        state.wake_driver();
        Poll::Ready(Ok(id))
    }

    /// Sends the held-back ends of streams opened without `finish`: each stream's `last` (its
    /// body's last byte, or nothing) with END_STREAM, all queued at once so they leave in one
    /// write.
    pub(crate) fn finish(&self, ends: Vec<(u32, Bytes)>) {
        let mut state = self.0.lock();
        for (id, last) in ends {
            let Some(mut slot) = state.streams.remove(&id) else {
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
                state.send_body(id, &mut slot);
            }
            state.streams.insert(id, slot);
        }
        state.wake_driver();
    }

    /// The server's limit of concurrent streams, once its first SETTINGS came (this side's own
    /// bound when it sets none); the connection's error if it failed first.
    pub(crate) async fn concurrency(&self) -> Result<usize, AttemptError> {
        std::future::poll_fn(|cx| {
            let mut state = self.0.lock();
            if let Some(e) = &state.broken {
                return Poll::Ready(Err(e.clone()));
            }
            if state.settings_seen {
                return Poll::Ready(Ok(state.max_concurrent));
            }
            if !state.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                state.waiting.push(cx.waker().clone());
            }
            state.wake_driver();
            Poll::Pending
        })
        .await
    }

    /// Resolves once everything queued so far has been written to the socket (or the connection
    /// failed).
    pub(crate) async fn flushed(&self) {
        std::future::poll_fn(|cx| {
            let mut state = self.0.lock();
            if state.broken.is_some() || (state.out.is_empty() && !state.writing) {
                return Poll::Ready(());
            }
            state.flushed.push(cx.waker().clone());
            state.wake_driver();
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
            let mut state = self.0.lock();
            let Some(slot) = state.streams.get_mut(&id) else {
                return Poll::Ready(Err(closed("stream lost")));
            };
            match slot.done.take() {
                None => {
                    slot.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
                Some(result) => {
                    let slot = state.streams.remove(&id).expect("present");
                    state.stream_freed();
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
            let mut state = self.0.lock();
            if let Some(e) = &state.broken {
                return Poll::Ready(Err(e.clone()));
            }
            let ended = match state.streams.get(&id) {
                Some(slot) => match &slot.done {
                    Some(Err(e)) => return Poll::Ready(Err(e.clone())),
                    // Answered already: the request was whole long before.
                    Some(Ok(())) => true,
                    None => slot.ended,
                },
                None => return Poll::Ready(Err(closed("stream lost"))),
            };
            if ended && state.out.is_empty() && !state.writing {
                return Poll::Ready(Ok(()));
            }
            // Woken at the next write: of this request's frames, or of the rest of its body once
            // the server's window lets it go.
            state.flushed.push(cx.waker().clone());
            state.wake_driver();
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
        let mut state = self.conn.lock();
        if let Some(slot) = state.streams.remove(&self.id) {
            if slot.done.is_none() && state.broken.is_none() {
                frame_head(&mut state.out, 4, RST_STREAM, 0, self.id);
                state.out.put_u32(CANCEL);
                state.wake_driver();
            }
            state.stream_freed();
        }
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
        state: Mutex::new(ConnState::new(BytesMut::new(), limits)),
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
        let mut state = conn.lock();
        if let Err(e) = read_frames(&mut rbuf, &mut state) {
            state.fail(e.error);
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
