//! Reading a request's body within the server's limits: its size (`limits.max_body`), the time
//! it may take after the head (`limits.body_timeout`), and the memory all bodies being read may
//! hold together (`limits.body_memory`).
//!
//! Why a budget across requests: one body is bounded by `max_body`, but a thousand clients each
//! sending a body of that size would hold a thousand of them at once. Each body reserves its
//! bytes from one budget as they arrive (all of them at once when a `Content-Length` announces
//! them) and gives them back when its request is done; a body the budget cannot take is refused
//! with `503` and `Retry-After`, before more of it is read.
//!
//! Why a deadline: a request's entry is numbered when its head arrives, and the journal is written
//! in that order; a body that never finishes would hold every later entry back. The deadline ends
//! it with `408`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A request's body as it arrives: from hyper (HTTP/1.1) or from an h2 stream.
pub(crate) enum ReqBody {
    /// HTTP/1.1, read by hyper.
    H1(Incoming),
    /// HTTP/2, one stream of h2.
    H2(H2Body),
}

/// Why a request's body could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// From hyper.
    #[error(transparent)]
    H1(hyper::Error),
    /// From h2.
    #[error(transparent)]
    H2(h2::Error),
}

/// An h2 stream's request body, its flow-control window given back as each chunk is taken.
pub(crate) struct H2Body {
    recv: h2::RecvStream,
    data_done: bool,
}

impl H2Body {
    /// The body of the stream `recv` belongs to.
    pub(crate) fn new(recv: h2::RecvStream) -> H2Body {
        H2Body {
            recv,
            data_done: false,
        }
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            ReqBody::H1(b) => Pin::new(b).poll_frame(cx).map_err(BodyError::H1),
            ReqBody::H2(b) => {
                if !b.data_done {
                    match std::task::ready!(b.recv.poll_data(cx)) {
                        Some(Ok(d)) => {
                            // What is taken leaves the window: the client may send more.
                            let _ = b.recv.flow_control().release_capacity(d.len());
                            return Poll::Ready(Some(Ok(Frame::data(d))));
                        }
                        Some(Err(e)) => return Poll::Ready(Some(Err(BodyError::H2(e)))),
                        None => b.data_done = true,
                    }
                }
                match std::task::ready!(b.recv.poll_trailers(cx)) {
                    Ok(Some(t)) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
                    Ok(None) => Poll::Ready(None),
                    Err(e) => Poll::Ready(Some(Err(BodyError::H2(e)))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::H1(b) => b.is_end_stream(),
            ReqBody::H2(b) => b.recv.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::H1(b) => b.size_hint(),
            ReqBody::H2(_) => SizeHint::default(),
        }
    }
}

/// Why a body was not read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyRefused {
    /// Over `limits.max_body` (announced or as it arrived): `413`.
    TooLarge,
    /// Not complete within `limits.body_timeout` of the head: `408`.
    Timeout,
    /// The budget of `limits.body_memory` is taken by other requests: `503`.
    Memory,
    /// The client went away mid-body: nothing to answer.
    ClientGone,
    /// The body's framing is invalid (a bad chunk): `400`.
    Bad,
    /// HTTP/2: the h2 layer reset the stream for a body that broke the protocol (its DATA
    /// disagree with its `content-length`): nothing can be answered.
    StreamReset,
}

/// A body read whole, and its share of the memory budget, held as long as the body is.
pub(crate) struct ReadBody {
    pub(crate) bytes: Bytes,
    pub(crate) _reserved: Option<OwnedSemaphorePermit>,
}

/// Reads `body` whole: at most `max` bytes (`announced`, the `Content-Length`, is checked first),
/// within `timeout`, each byte reserved from `budget` before it is kept.
pub(crate) async fn read(
    mut body: ReqBody,
    announced: Option<u64>,
    max: u64,
    timeout: Duration,
    budget: &Arc<Semaphore>,
) -> Result<ReadBody, BodyRefused> {
    if announced.is_some_and(|n| n > max) {
        return Err(BodyRefused::TooLarge);
    }
    if body.is_end_stream() {
        return Ok(ReadBody {
            bytes: Bytes::new(),
            _reserved: None,
        });
    }
    let reserve = |n: u64| {
        let n = u32::try_from(n).map_err(|_| BodyRefused::TooLarge)?;
        budget
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| BodyRefused::Memory)
    };
    let mut reserved = match announced {
        Some(n) if n > 0 => Some((reserve(n)?, n)),
        _ => None,
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    let mut total: u64 = 0;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(BodyRefused::Timeout),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(classify(&e)),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if data.is_empty() {
            continue;
        }
        total += data.len() as u64;
        if total > max {
            return Err(BodyRefused::TooLarge);
        }
        let held = reserved.as_ref().map_or(0, |(_, n)| *n);
        if total > held {
            let more = reserve(total - held)?;
            match &mut reserved {
                Some((permit, n)) => {
                    permit.merge(more);
                    *n = total;
                }
                None => reserved = Some((more, total)),
            }
        }
        match &first {
            None => first = Some(data),
            Some(f) => {
                if rest.is_empty() {
                    rest.reserve(usize::try_from(announced.unwrap_or(0)).unwrap_or(0));
                    rest.extend_from_slice(f);
                }
                rest.extend_from_slice(&data);
            }
        }
    }
    let bytes = if rest.is_empty() {
        first.unwrap_or_default()
    } else {
        rest.freeze()
    };
    Ok(ReadBody {
        bytes,
        _reserved: reserved.map(|(p, _)| p),
    })
}

/// A body error: the client leaving (the connection closed or reset mid-body, or over HTTP/2 the
/// stream reset by the client) or a framing error of its own (over HTTP/2, a stream the h2 layer
/// reset for breaking the protocol).
fn classify(e: &BodyError) -> BodyRefused {
    let e = match e {
        BodyError::H1(e) => e,
        BodyError::H2(e) => {
            return if e.is_reset() && e.is_library() {
                BodyRefused::StreamReset
            } else {
                BodyRefused::ClientGone
            };
        }
    };
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        return BodyRefused::ClientGone;
    }
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            if matches!(
                io.kind(),
                K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe
            ) {
                return BodyRefused::ClientGone;
            }
        }
        cause = c.source();
    }
    BodyRefused::Bad
}
