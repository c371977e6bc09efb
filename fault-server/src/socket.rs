//! One connection's socket, shared by hyper and the connection task, and what a request's
//! handler may ask the connection task to do with it (drop, reset, hang, write broken bytes).

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::journal::{self, Pending};
use crate::schedule::Schedule;
use crate::state::{Routes, State};

/// What a handler asks the connection task to do with the socket.
pub(crate) enum SocketAction {
    /// Close with no response (FIN).
    Drop,
    /// Abort with RST.
    Reset,
    /// Hold the connection, send nothing.
    Hang(Duration),
    /// Write these bytes, then close.
    Malformed(&'static [u8]),
    /// The client already left; just close.
    Abandon,
}

/// Per-connection hand-over point between the request handler and the connection task.
#[derive(Default)]
pub(crate) struct ConnCtl {
    pub(crate) action: Mutex<Option<(SocketAction, Pending)>>,
    pub(crate) notify: Notify,
}

/// What the requests of one connection share. A request clones this one handle — owned by its
/// connection, so its counter stays on one core — instead of the server-wide `State`, the journal
/// channel and the clock, whose counters both cores would fight over on every request.
pub(crate) struct ServedConn {
    // Declared (so dropped) before `state`: the journal's writer ends only when every emitter is
    // gone, and dropping the last `State` waits for the writer.
    pub(crate) emitter: Arc<journal::Emitter>,
    pub(crate) state: Arc<State>,
    pub(crate) ctl: ConnCtl,
    pub(crate) stream: Arc<TcpStream>,
    pub(crate) id: u64,
    /// The schedule as of generation `.0`; refreshed when `State::schedule_gen` moves.
    pub(crate) schedule: Mutex<(u64, Arc<Schedule>)>,
    /// The routers built when the server started.
    pub(crate) routes: Arc<Routes>,
}

impl ServedConn {
    /// Runs `f` on the schedule in force, without touching any counter other connections share.
    pub(crate) fn with_schedule<R>(&self, f: impl FnOnce(&Schedule) -> R) -> R {
        let gen = self.state.schedule_gen.load(Ordering::Acquire);
        let mut cached = self.schedule.lock().unwrap_or_else(|p| p.into_inner());
        if cached.0 != gen {
            *cached = (gen, self.state.schedule());
        }
        f(&cached.1)
    }
}

impl ConnCtl {
    /// Hands the socket to the connection task and never returns.
    pub(crate) async fn hand_over(&self, action: SocketAction, pending: Pending) -> ! {
        *self.action.lock().unwrap_or_else(|p| p.into_inner()) = Some((action, pending));
        self.notify.notify_one();
        std::future::pending().await
    }
}

pub(crate) async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Resolves when the peer closes its side (or the socket fails). Pipelined bytes from the peer
/// make closing undetectable without consuming them, so then it never resolves.
pub(crate) async fn peer_closed(stream: &TcpStream) {
    let mut b = [0u8; 1];
    match stream.peek(&mut b).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending::<()>().await,
    }
}

/// The socket, shared between hyper and the connection task. Reads and writes go through
/// readiness + `try_*` on `&TcpStream`, which tokio supports from several handles.
pub(crate) struct SharedStream(pub(crate) Arc<TcpStream>);

impl hyper::rt::Read for SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            // SAFETY: `try_read` only writes into the slice and reports how many bytes it wrote;
            // those (and only those) are marked filled by `advance`. This is the cast tokio's own
            // `TcpStream::poll_read` makes; it spares zeroing hyper's read buffer on every read.
            let n = unsafe {
                let dst = buf.as_mut();
                let dst = &mut *(dst as *mut [std::mem::MaybeUninit<u8>] as *mut [u8]);
                self.0.try_read(dst)
            };
            match n {
                Ok(n) => {
                    // SAFETY: `n` bytes were just written by `try_read`.
                    unsafe { buf.advance(n) };
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl hyper::rt::Write for SharedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write_vectored(bufs) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The socket closes when the last handle drops; the connection task decides when.
        Poll::Ready(Ok(()))
    }
}
