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
    /// HTTP/1.1: a request's body was refused while it may still be arriving; the connection is
    /// drained before it closes.
    pub(crate) drain_after: std::sync::atomic::AtomicBool,
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

/// Closes a connection whose client may still be sending (the rest of a head too large, a body
/// refused, a request after a refused one) so that it reads the answer: the sending side is shut
/// first, and what still arrives is read and discarded — up to `limits.drain_bytes`, for at most
/// `limits.drain_time` — since closing with unread bytes would make the kernel reset the
/// connection, and the client could lose the answer before reading it.
pub(crate) async fn linger_close(stream: &TcpStream, limits: &crate::state::Limits) {
    use std::os::fd::AsRawFd;
    // SAFETY: `shutdown` on a socket this task owns a handle to; it touches no memory.
    unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_WR) };
    let mut buf = [0u8; 16 * 1024];
    let mut seen = 0u64;
    let most = limits.drain_bytes;
    let _ = tokio::time::timeout(limits.drain_time, async {
        while seen < most {
            if stream.readable().await.is_err() {
                return;
            }
            match stream.try_read(&mut buf) {
                Ok(0) => return,
                Ok(n) => seen += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    })
    .await;
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

    // rustls hands over what it has queued as one vectored write: without it only the first
    // record went out per write, and a handshake that failed (an ALPN offer with no protocol in
    // common) lost its alert — queued after the ServerHello — when the connection closed.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        hyper::rt::Write::poll_write_vectored(self, cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
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

/// What hyper and h2 serve a connection over: the socket or TLS over it, and what has been
/// written through it ([`WriteWatch`]).
#[derive(Clone)]
pub(crate) struct ConnIo {
    kind: IoKind,
    /// What was written, flushed and stalled on this connection.
    pub(crate) watch: Arc<WriteWatch>,
}

#[derive(Clone)]
enum IoKind {
    /// The socket itself (the hot path: no adapter in between).
    Plain(SharedStream),
    /// TLS over the socket.
    Tls(SharedTls),
}

impl ConnIo {
    /// The plain socket.
    pub(crate) fn plain(s: SharedStream) -> ConnIo {
        ConnIo {
            kind: IoKind::Plain(s),
            watch: Arc::new(WriteWatch::new()),
        }
    }

    /// TLS over the socket.
    pub(crate) fn tls(t: SharedTls) -> ConnIo {
        ConnIo {
            kind: IoKind::Tls(t),
            watch: Arc::new(WriteWatch::new()),
        }
    }

    /// Writes `bytes` and flushes, once hyper no longer uses the connection.
    pub(crate) async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        match &self.kind {
            IoKind::Plain(s) => write_all(&s.sock, bytes).await,
            IoKind::Tls(t) => {
                let mut t = t.clone();
                t.write_all(bytes).await?;
                t.flush().await
            }
        }
    }

    /// Whether it is TLS.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self.kind, IoKind::Tls(_))
    }

    fn write_result(&self, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        self.watch.on_write(&r);
        r
    }

    fn flush_result(&self, r: Poll<io::Result<()>>) -> Poll<io::Result<()>> {
        if let Poll::Ready(Ok(())) = r {
            self.watch.on_flushed();
        }
        r
    }
}

/// What has been written to one connection: the bytes the kernel (or, over TLS, the TLS
/// session) accepted, the flushes that emptied every buffer in front of the socket, and since
/// when writing has been blocked.
///
/// Why: a response is delivered when its last byte is on the socket, not when its body was
/// handed to hyper, which buffers it (HTTP/1.1). hyper flushes the connection only once its own
/// buffer is empty, so the first flush after a response's body was handed over is the moment its
/// last byte left — then its entry is finished ([`Delivery`]). And a client that stops reading
/// leaves writes blocked: past `limits.send_timeout` without progress the connection task ends
/// the connection ([`WriteWatch::stalled_for`]).
pub(crate) struct WriteWatch {
    base: std::time::Instant,
    written: AtomicU64,
    flushes: AtomicU64,
    /// µs since `base` + 1 when a write first found the socket full; 0 while writes go through.
    stalled_since: AtomicU64,
    stall: Notify,
    /// HTTP/1.1 responses whose bodies were handed over, waiting for the flush that writes them.
    waiting: Mutex<std::collections::VecDeque<Delivery>>,
    waiting_n: AtomicUsize,
    /// `written` when the last response was delivered: where the next one starts.
    last_end: AtomicU64,
    /// The connection was ended for `limits.send_timeout`.
    timed_out: std::sync::atomic::AtomicBool,
}

impl WriteWatch {
    fn new() -> WriteWatch {
        WriteWatch {
            base: std::time::Instant::now(),
            written: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            stalled_since: AtomicU64::new(0),
            stall: Notify::new(),
            waiting: Mutex::new(std::collections::VecDeque::new()),
            waiting_n: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            timed_out: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn on_write(&self, r: &Poll<io::Result<usize>>) {
        match r {
            Poll::Ready(Ok(n)) => {
                self.written.fetch_add(*n as u64, Ordering::Relaxed);
                if *n > 0 && self.stalled_since.load(Ordering::Relaxed) != 0 {
                    self.stalled_since.store(0, Ordering::Relaxed);
                }
            }
            Poll::Pending => {
                if self.stalled_since.load(Ordering::Relaxed) == 0 {
                    self.stalled_since
                        .store(self.now_us() + 1, Ordering::Relaxed);
                    self.stall.notify_one();
                }
            }
            Poll::Ready(Err(_)) => {}
        }
    }

    fn on_flushed(&self) {
        let flushes = self.flushes.fetch_add(1, Ordering::AcqRel) + 1;
        if self.waiting_n.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        while waiting.front().is_some_and(|d| d.after < flushes) {
            if let Some(d) = waiting.pop_front() {
                self.waiting_n.fetch_sub(1, Ordering::AcqRel);
                self.settle(d, None);
            }
        }
    }

    /// Bytes accepted so far.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Bytes written since a response that began at `start` (when it was asked for) began:
    /// responses on one HTTP/1.1 connection go out one after the other, so it began where the
    /// one before it ended, if that was later.
    pub(crate) fn bytes_since(&self, start: u64) -> u64 {
        let from = start.max(self.last_end.load(Ordering::Relaxed));
        self.written().saturating_sub(from)
    }

    /// Whether the connection was ended because writing stalled.
    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// Notes that the connection is being ended because writing stalled.
    pub(crate) fn time_out(&self) {
        self.timed_out.store(true, Ordering::Relaxed);
    }

    /// Resolves once writing has been blocked, without a byte getting through, for `limit`.
    pub(crate) async fn stalled_for(&self, limit: Duration) {
        loop {
            let notified = self.stall.notified();
            let since = self.stalled_since.load(Ordering::Relaxed);
            if since == 0 {
                notified.await;
                continue;
            }
            let due = since - 1 + u64::try_from(limit.as_micros()).unwrap_or(u64::MAX);
            let now = self.now_us();
            if now >= due {
                return;
            }
            tokio::time::sleep(Duration::from_micros(due - now)).await;
        }
    }

    /// A response whose body hyper has taken whole: finished when the next flush has written it.
    pub(crate) fn deliver(&self, mut d: Delivery) {
        d.after = self.flushes.load(Ordering::Acquire);
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.push_back(d);
        self.waiting_n.fetch_add(1, Ordering::AcqRel);
    }

    /// The connection is over: what still waits for a flush never got out whole.
    pub(crate) fn abandon(&self) {
        let left: Vec<Delivery> = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            self.waiting_n.store(0, Ordering::Release);
            waiting.drain(..).collect()
        };
        let outcome = if self.timed_out() {
            history::Outcome::SendTimeout
        } else {
            history::Outcome::ClientClosed
        };
        for d in left {
            self.settle(d, Some(outcome));
        }
    }

    /// Finishes a delivery: as it was meant (`None`), or as `cut`.
    fn settle(&self, mut d: Delivery, cut: Option<history::Outcome>) {
        let bytes = self.bytes_since(d.start);
        if cut.is_none() {
            self.last_end.store(self.written(), Ordering::Relaxed);
        }
        if let Some(mut p) = d.pending.take() {
            p.entry().response_bytes = Some(bytes);
            p.finish(cut.unwrap_or(d.outcome));
        }
    }
}

/// An HTTP/1.1 response handed to hyper whole, waiting for the flush that puts its last byte on
/// the socket; its entry and the memory it holds go with it.
pub(crate) struct Delivery {
    after: u64,
    /// [`WriteWatch::written`] when the request was handed to the handler.
    pub(crate) start: u64,
    pub(crate) pending: Option<Pending>,
    pub(crate) outcome: history::Outcome,
    pub(crate) _held: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Delivery {
    /// A response that began at `start`, to be finished as `outcome`.
    pub(crate) fn new(
        start: u64,
        pending: Pending,
        outcome: history::Outcome,
        held: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Delivery {
        Delivery {
            after: 0,
            start,
            pending: Some(pending),
            outcome,
            _held: held,
        }
    }
}

impl hyper::rt::Read for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            IoKind::Plain(s) => hyper::rt::Read::poll_read(Pin::new(s), cx, buf),
            IoKind::Tls(t) => {
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
        let me = self.get_mut();
        let r = match &mut me.kind {
            IoKind::Plain(s) => hyper::rt::Write::poll_write(Pin::new(s), cx, buf),
            IoKind::Tls(t) => AsyncWrite::poll_write(Pin::new(t), cx, buf),
        };
        me.write_result(r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = match &mut me.kind {
            IoKind::Plain(s) => hyper::rt::Write::poll_write_vectored(Pin::new(s), cx, bufs),
            IoKind::Tls(t) => AsyncWrite::poll_write_vectored(Pin::new(t), cx, bufs),
        };
        me.write_result(r)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let r = match &mut me.kind {
            IoKind::Plain(_) => Poll::Ready(Ok(())),
            IoKind::Tls(t) => AsyncWrite::poll_flush(Pin::new(t), cx),
        };
        me.flush_result(r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The socket closes when the last handle drops; the connection task decides when.
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            IoKind::Plain(s) => AsyncRead::poll_read(Pin::new(s), cx, buf),
            IoKind::Tls(t) => AsyncRead::poll_read(Pin::new(t), cx, buf),
        }
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        hyper::rt::Write::poll_write(self, cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        hyper::rt::Write::poll_write_vectored(self, cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        hyper::rt::Write::poll_flush(self, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        hyper::rt::Write::poll_shutdown(self, cx)
    }
}

impl ConnIo {
    /// Whether everything accepted so far has left for the socket: over TLS, the session holds
    /// no record it has not written.
    pub(crate) fn drained(&self) -> bool {
        match &self.kind {
            IoKind::Plain(_) => true,
            IoKind::Tls(t) => {
                let guard = t.0.lock().unwrap_or_else(|p| p.into_inner());
                !guard.get_ref().1.wants_write()
            }
        }
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
