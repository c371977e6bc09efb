//! The byte stream under a connection: plain TCP, or TLS over TCP.
//!
//! An enum rather than a boxed trait object: the plain path — the hot one — stays a direct call on
//! a `TcpStream`, and a connection learns which it is without an allocation.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use history::ErrorKind;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::{AttemptError, Target};

/// A connected stream.
pub enum Stream {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// Connects to `target`: TCP, then the TLS handshake when the target is `https://`. Returns
    /// the stream and whether the server agreed to HTTP/2 in ALPN.
    pub async fn connect(target: &Target) -> Result<(Stream, bool), AttemptError> {
        let tcp = target.connect_tcp().await.map_err(|e| AttemptError {
            kind: ErrorKind::Connect,
            message: format!("{}: {e}", target.addr),
        })?;
        let _ = tcp.set_nodelay(true);
        match &target.tls {
            None => Ok((Stream::Plain(tcp), false)),
            Some(tls) => {
                let (s, h2) = tls.handshake(&target.host, tcp).await?;
                Ok((Stream::Tls(Box::new(s)), h2))
            }
        }
    }

    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        }
    }

    /// The TCP socket underneath, for writing bytes that are already on the wire's terms.
    pub(crate) fn tcp_mut(&mut self) -> &mut TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_mut().0,
        }
    }

    /// `bytes` as they go on the wire, without sending them: the same bytes over plain TCP; over
    /// TLS, the records the session seals them into (numbered in the session's sequence, so they
    /// must be written to the socket before anything else is sent on this stream).
    pub(crate) fn seal(&mut self, bytes: &[u8]) -> io::Result<Vec<u8>> {
        match self {
            Stream::Plain(_) => Ok(bytes.to_vec()),
            Stream::Tls(s) => {
                use std::io::Write;
                let session = s.get_mut().1;
                session.writer().write_all(bytes)?;
                let mut out = Vec::with_capacity(bytes.len() + 64);
                while session.wants_write() {
                    session.write_tls(&mut out)?;
                }
                Ok(out)
            }
        }
    }

    /// Whether the idle stream is still usable, looking without waiting at what arrived while it
    /// was idle: end of stream (the server closed it), an error (reset) or unrequested bytes
    /// all mean it is not. `scratch` is reused for the look.
    pub fn still_open(&mut self, scratch: &mut bytes::BytesMut) -> bool {
        match self {
            Stream::Plain(s) => match s.try_read_buf(scratch) {
                Err(e) => e.kind() == io::ErrorKind::WouldBlock,
                Ok(_) => false,
            },
            Stream::Tls(s) => {
                // Through the TLS layer: one poll with a waker that is never woken.
                let mut cx = Context::from_waker(std::task::Waker::noop());
                let mut one = [0u8; 1];
                let mut rb = ReadBuf::new(&mut one);
                matches!(
                    Pin::new(s.as_mut()).poll_read(&mut cx, &mut rb),
                    Poll::Pending
                )
            }
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}
