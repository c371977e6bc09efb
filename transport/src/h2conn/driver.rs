//! The future that moves one connection's bytes: it reads what arrived and has its frames
//! handled, writes whatever the workers and the handlers queued since in one write, and looks at
//! the connection on a keep-alive timer. It is polled in the workers' own task (see `http2.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frame::{frame_head, ConnError, GOAWAY, MAX_STREAM_ID, NO_ERROR, PING};
use super::receive::read_frames;
use super::state::Conn;
use crate::stream::Stream;
use crate::{closed, io_failure};

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
                            let mut state = this.conn.lock();
                            frame_head(&mut state.out, 8, GOAWAY, 0, 0);
                            state.out.put_u32(0);
                            state.out.put_u32(e.code);
                            state.fail(e.error);
                            let out = state.out.split();
                            drop(state);
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
                let mut state = this.conn.lock();
                if state.handles == 0 && !this.closing {
                    this.closing = true;
                    frame_head(&mut state.out, 8, GOAWAY, 0, 0);
                    state.out.put_u32(MAX_STREAM_ID);
                    state.out.put_u32(NO_ERROR);
                }
                if this.written == this.wbuf.len() && !state.out.is_empty() {
                    this.wbuf = state.out.split();
                    this.written = 0;
                    state.writing = true;
                }
                state.driver = Some(cx.waker().clone());
            }
            match this.poll_write_out(cx) {
                Poll::Ready(Ok(())) => {
                    let mut state = this.conn.lock();
                    state.writing = false;
                    if state.out.is_empty() {
                        for w in state.flushed.drain(..) {
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
    pub(super) fn new(conn: Arc<Conn>, stream: Stream, every: std::time::Duration) -> Driver {
        Driver {
            conn,
            stream,
            rbuf: BytesMut::with_capacity(64 << 10),
            wbuf: BytesMut::new(),
            written: 0,
            closing: false,
            heard: false,
            look: None,
            every,
        }
    }

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
        let mut state = self.conn.lock();
        if state.ping_out {
            state.fail(closed(&format!(
                "the server answered no PING within {every:?}: the connection is taken for dead"
            )));
            return true;
        }
        if state.streams.is_empty() {
            state.idle_looks += 1;
            let idle = every.saturating_mul(state.idle_looks);
            if idle >= state.limits.idle_timeout && !self.closing {
                // Closed as when the last handle goes; the next request opens a new one.
                state.draining = true;
                self.closing = true;
                frame_head(&mut state.out, 8, GOAWAY, 0, 0);
                state.out.put_u32(0);
                state.out.put_u32(NO_ERROR);
                state.wake_driver();
            }
        } else {
            state.idle_looks = 0;
            if !heard {
                frame_head(&mut state.out, 8, PING, 0, 0);
                state.out.put_u64(0x6861_726e_6573_7321);
                state.ping_out = true;
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
