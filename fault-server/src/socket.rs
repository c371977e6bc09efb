//! One connection's socket, shared by hyper and the connection task, and what a request's
//! handler may ask the connection task to do with it (drop, reset, hang, write broken bytes, end
//! an HTTP/2 connection with GOAWAY).
//!
//! The TCP socket is shared through an `Arc` (tokio reads and writes a `&TcpStream` through
//! readiness), so the connection task can still peek at it, reset it or write to it once hyper
//! has let go. Over TLS the rustls stream sits on that shared socket and is itself shared behind a
//! mutex that is only ever held for one poll.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_rustls::server::TlsStream;

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
    /// HTTP/2: end the connection with GOAWAY, then close.
    GoAway,
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
    /// What hyper reads and writes: the socket, or TLS over it.
    pub(crate) io: ConnIo,
    /// The connection speaks HTTP/2 (its requests are streams).
    pub(crate) http2: bool,
    pub(crate) id: u64,
    /// The schedule as of generation `.0`; refreshed when `State::schedule_gen` moves.
    pub(crate) schedule: Mutex<(u64, Arc<Schedule>)>,
    /// The routers built when the server started.
    pub(crate) routes: Arc<Routes>,
    /// Bytes read from the socket (shared with the socket's reader).
    pub(crate) bytes_read: Arc<AtomicU64>,
    /// `bytes_read` when the last request's body had been read: more since then is the start of
    /// another request.
    pub(crate) quiet_mark: AtomicU64,
    /// Accepted beyond the connection limit: only the control API is served.
    pub(crate) over_limit: bool,
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
#[derive(Clone)]
pub(crate) struct SharedStream {
    pub(crate) sock: Arc<TcpStream>,
    /// Bytes read from the socket so far, for telling a slow request from an idle connection.
    pub(crate) read: Arc<AtomicU64>,
}

impl SharedStream {
    pub(crate) fn new(sock: Arc<TcpStream>) -> SharedStream {
        SharedStream {
            sock,
            read: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl hyper::rt::Read for SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.sock.poll_read_ready(cx))?;
            // SAFETY: `try_read` only writes into the slice and reports how many bytes it wrote;
            // those (and only those) are marked filled by `advance`. This is the cast tokio's own
            // `TcpStream::poll_read` makes; it spares zeroing hyper's read buffer on every read.
            let n = unsafe {
                let dst = buf.as_mut();
                let dst = &mut *(dst as *mut [std::mem::MaybeUninit<u8>] as *mut [u8]);
                self.sock.try_read(dst)
            };
            match n {
                Ok(n) => {
                    self.read.fetch_add(n as u64, Ordering::Relaxed);
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
            ready!(self.sock.poll_write_ready(cx))?;
            match self.sock.try_write(buf) {
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
            ready!(self.sock.poll_write_ready(cx))?;
            match self.sock.try_write_vectored(bufs) {
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

impl AsyncRead for SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.sock.poll_read_ready(cx))?;
            match self.sock.try_read_buf(buf) {
                Ok(n) => {
                    self.read.fetch_add(n as u64, Ordering::Relaxed);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for SharedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        hyper::rt::Write::poll_write(self, cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A TLS stream over the shared socket, itself shared: hyper polls it, and once hyper has let
/// go the connection task writes a broken response through it.
#[derive(Clone)]
pub(crate) struct SharedTls(pub(crate) Arc<Mutex<TlsStream<SharedStream>>>);

impl SharedTls {
    fn with<R>(&self, f: impl FnOnce(Pin<&mut TlsStream<SharedStream>>) -> R) -> R {
        let mut guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(Pin::new(&mut *guard))
    }
}

impl AsyncRead for SharedTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_read(cx, buf))
    }
}

impl AsyncWrite for SharedTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.with(|s| s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.with(|s| s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }
}

/// What hyper serves a connection over.
#[derive(Clone)]
pub(crate) enum ConnIo {
    /// The socket itself (the hot path: no adapter in between).
    Plain(SharedStream),
    /// TLS over the socket.
    Tls(SharedTls),
}

impl ConnIo {
    /// Writes `bytes` and flushes, once hyper no longer uses the connection.
    pub(crate) async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        match self {
            ConnIo::Plain(s) => write_all(&s.sock, bytes).await,
            ConnIo::Tls(t) => {
                let mut t = t.clone();
                t.write_all(bytes).await?;
                t.flush().await
            }
        }
    }

    /// Whether it is TLS.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, ConnIo::Tls(_))
    }
}

impl hyper::rt::Read for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Plain(s) => hyper::rt::Read::poll_read(Pin::new(s), cx, buf),
            ConnIo::Tls(t) => {
                hyper::rt::Read::poll_read(Pin::new(&mut hyper_util::rt::TokioIo::new(t)), cx, buf)
            }
        }
    }
}

impl hyper::rt::Write for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnIo::Plain(s) => hyper::rt::Write::poll_write(Pin::new(s), cx, buf),
            ConnIo::Tls(t) => AsyncWrite::poll_write(Pin::new(t), cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnIo::Plain(s) => hyper::rt::Write::poll_write_vectored(Pin::new(s), cx, bufs),
            ConnIo::Tls(t) => AsyncWrite::poll_write_vectored(Pin::new(t), cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Plain(_) => Poll::Ready(Ok(())),
            ConnIo::Tls(t) => AsyncWrite::poll_flush(Pin::new(t), cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The socket closes when the last handle drops; the connection task decides when.
        Poll::Ready(Ok(()))
    }
}
