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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_rustls::server::TlsStream;

use crate::journal::{self, Clock, Pending};
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
    /// The kernel's receive time of the last bytes read (shared with the socket's reader).
    pub(crate) wire: Arc<WireTime>,
    /// `bytes_read` when the last request's body had been read: more since then is the start of
    /// another request.
    pub(crate) quiet_mark: AtomicU64,
    /// Accepted beyond the connection limit: only the control API is served.
    pub(crate) over_limit: bool,
    /// HTTP/2: the streams in progress, for the idle timeout.
    pub(crate) streams: Streams,
}

/// How many of an HTTP/2 connection's streams are in progress, and when one last started or
/// ended (or the connection opened).
pub(crate) struct Streams {
    in_flight: AtomicUsize,
    /// Clock microseconds of the last start or end of a stream.
    last_us: AtomicU64,
}

impl Streams {
    /// None in progress yet, the connection opening now.
    pub(crate) fn new(clock: &Clock) -> Streams {
        Streams {
            in_flight: AtomicUsize::new(0),
            last_us: AtomicU64::new(clock.now_us()),
        }
    }

    /// Counts a stream in progress until the guard drops.
    pub(crate) fn enter<'a>(&'a self, clock: &'a Clock) -> StreamGuard<'a> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.last_us.store(clock.now_us(), Ordering::Release);
        StreamGuard {
            streams: self,
            clock,
        }
    }

    /// How long no stream has been in progress; `None` while one is.
    pub(crate) fn quiet_for(&self, clock: &Clock) -> Option<Duration> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = clock
            .now_us()
            .saturating_sub(self.last_us.load(Ordering::Acquire));
        Some(Duration::from_micros(since))
    }
}

/// A stream in progress; see [`Streams::enter`].
pub(crate) struct StreamGuard<'a> {
    streams: &'a Streams,
    clock: &'a Clock,
}

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        self.streams
            .last_us
            .store(self.clock.now_us(), Ordering::Release);
        self.streams.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
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
    /// When the kernel received the bytes of the last read.
    pub(crate) wire: Arc<WireTime>,
}

impl SharedStream {
    pub(crate) fn new(sock: Arc<TcpStream>) -> SharedStream {
        let wire = Arc::new(WireTime::default());
        SharedStream {
            sock,
            read: Arc::new(AtomicU64::new(0)),
            wire,
        }
    }

    /// One read into `dst`, noting the kernel's receive time of what it read.
    ///
    /// A read that comes back short of its buffer has emptied the socket, so the next one would
    /// only say so (`EAGAIN`), one system call per request for nothing: such a read also clears
    /// the socket's readiness, as tokio's own `TcpStream` does. The readiness cleared is the one
    /// taken just before this read (tokio clears only if no event came since), so bytes that
    /// arrive after the read raise it again. Clearing it later, at the next read, would also
    /// clear an event for bytes that arrived in between, and the connection would wait for ever
    /// for bytes it already has.
    fn read_into(&self, dst: &mut [u8]) -> io::Result<usize> {
        let len = dst.len();
        let mut short = None;
        let r = self.sock.try_io(tokio::io::Interest::READABLE, || {
            let n = self.wire.read(&self.sock, dst)?;
            if n > 0 && n < len {
                // Returned as "would block" so that tokio clears the readiness; the bytes are
                // handed back below.
                short = Some(n);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let n = match (r, short) {
            (_, Some(n)) => n,
            (r, None) => r?,
        };
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The kernel's receive timestamp of the last bytes read from a socket (`SO_TIMESTAMPNS`, Linux):
/// when they reached this host's network stack, before this process was scheduled to read them.
///
/// Why: a burst's release skew is the spread of the moments its requests *arrived*. Stamped in
/// the handler, it would also hold how long this server took to wake ten connection tasks on a
/// busy machine — the server's scheduling, not the client's synchronization. The kernel stamps
/// each packet as it is received, so the journal can say both (`t_wire_us` beside `t_body_us`).
#[derive(Default)]
pub(crate) struct WireTime {
    /// Nanoseconds since the Unix epoch (CLOCK_REALTIME, the kernel's clock for these stamps);
    /// 0 when the kernel gave none.
    unix_ns: AtomicU64,
}

impl WireTime {
    /// The receive time of the last bytes read, in nanoseconds since the Unix epoch.
    pub(crate) fn unix_ns(&self) -> Option<u64> {
        match self.unix_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(ns),
        }
    }

    /// Asks the kernel to stamp what `listener`'s connections receive: set on the listening
    /// socket, the option is inherited by every connection it accepts, before its first packet.
    #[cfg(target_os = "linux")]
    pub(crate) fn enable(listener: &impl std::os::fd::AsRawFd) {
        let on: libc::c_int = 1;
        // SAFETY: setsockopt reads `on` (a c_int, its size given) and nothing else.
        let r = unsafe {
            libc::setsockopt(
                listener.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            tracing::debug!(
                "no kernel receive timestamps: {}",
                io::Error::last_os_error()
            );
        }
    }

    /// Elsewhere the kernel gives no such stamp.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn enable<T>(_listener: &T) {}

    /// `recvmsg` into `dst`, keeping the timestamp the kernel attaches (called within the
    /// socket's `try_io`).
    #[cfg(target_os = "linux")]
    fn read(&self, sock: &TcpStream, dst: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        {
            let mut iov = libc::iovec {
                iov_base: dst.as_mut_ptr().cast(),
                iov_len: dst.len(),
            };
            // Room for one SCM_TIMESTAMPNS (a cmsghdr and a timespec), aligned for cmsghdr.
            let mut control = [0u64; 8];
            // SAFETY: msghdr is plain data; all-zero is its empty value.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&control);
            // SAFETY: the iovec points at `dst` (its length given) and the control buffer at
            // `control`; both outlive the call, and recvmsg writes only within them.
            let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if n > 0 {
                // SAFETY: the CMSG_* macros walk the control buffer recvmsg filled, within
                // `msg_controllen`; the timespec is read unaligned from its cmsg's data.
                unsafe {
                    let mut c = libc::CMSG_FIRSTHDR(&msg);
                    while !c.is_null() {
                        if (*c).cmsg_level == libc::SOL_SOCKET
                            && (*c).cmsg_type == libc::SCM_TIMESTAMPNS
                        {
                            let t: libc::timespec =
                                std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                            let ns = (t.tv_sec as u64)
                                .saturating_mul(1_000_000_000)
                                .saturating_add(t.tv_nsec as u64);
                            self.unix_ns.store(ns, Ordering::Relaxed);
                        }
                        c = libc::CMSG_NXTHDR(&msg, c);
                    }
                }
            }
            Ok(n as usize)
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn read(&self, sock: &TcpStream, dst: &mut [u8]) -> io::Result<usize> {
        sock.try_read(dst)
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
            // SAFETY: the read only writes into the slice and reports how many bytes it wrote;
            // those (and only those) are marked filled by `advance`. This is the cast tokio's own
            // `TcpStream::poll_read` makes; it spares zeroing hyper's read buffer on every read.
            let n = unsafe {
                let dst = buf.as_mut();
                let dst = &mut *(dst as *mut [std::mem::MaybeUninit<u8>] as *mut [u8]);
                self.read_into(dst)
            };
            match n {
                Ok(n) => {
                    // SAFETY: `n` bytes were just written by the read.
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
            // SAFETY: as in hyper's `poll_read` above: only the bytes read are marked filled.
            let n = unsafe {
                let dst = buf.unfilled_mut();
                let dst = &mut *(dst as *mut [std::mem::MaybeUninit<u8>] as *mut [u8]);
                self.read_into(dst)
            };
            match n {
                Ok(n) => {
                    // SAFETY: `n` bytes of the unfilled part were just written by the read.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Bytes that arrive after a short read, once the runtime has seen them, are read: the
    /// readiness a short read clears is the one it was made under, not a newer one.
    #[tokio::test(flavor = "current_thread")]
    async fn bytes_after_a_short_read_are_not_lost() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        let mut shared = SharedStream::new(Arc::new(server));
        let mut buf = [0u8; 64];
        for round in 0..3u8 {
            client.write_all(&[round; 10]).await.expect("write");
            let n = tokio::time::timeout(Duration::from_secs(10), shared.read(&mut buf))
                .await
                .expect("the first bytes")
                .expect("read");
            assert_eq!(&buf[..n], &[round; 10], "a short read");
            client.write_all(&[round + 100; 10]).await.expect("write");
            // The runtime's I/O driver runs while this task sleeps and records the new bytes'
            // readiness before the next read.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let n = tokio::time::timeout(Duration::from_secs(10), shared.read(&mut buf))
                .await
                .expect("the bytes that came after the short read")
                .expect("read");
            assert_eq!(&buf[..n], &[round + 100; 10]);
        }
    }
}
