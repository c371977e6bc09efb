//! HTTP/2 served on the h2 crate directly: the connection driven here, each stream in a task of
//! its own, and each answer written by the stream's task until its last frame is on the wire.
//!
//! Why not hyper's HTTP/2 server: it hands an answer's body to h2 and considers the stream done,
//! whatever the client's flow-control window; it exposes no stream ids and no way to tell when a
//! stream's last frame was written. Here a stream's task knows its id, reads what reached the
//! socket from the connection's [`Ledger`], and so
//! - finishes the journal entry `responded` only once the frame that ends the stream was written
//!   (`client_closed` when the client reset the stream first, with the bytes that got out);
//! - counts the stream as in progress until then, so the connection's idle timeout never cuts a
//!   client that is still reading an answer, however slowly;
//! - gives up on an answer that makes no progress for `limits.send_timeout` — the window stays
//!   closed, or the socket full — with RST_STREAM (CANCEL), journaled `send_timeout` with the
//!   rest of a DATA frame begun before the reset counted (once the reset is written, or after
//!   another send timeout).
//!
//! The settings are hyper's defaults (1 MiB windows, 16 KiB frames, 400 KiB of send buffer per
//! connection), with the server's own stream limit and header list size; h2's protections
//! against rapid reset, CONTINUATION floods and HPACK bombs stay in force.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, SendStream};
use http::{HeaderMap, HeaderValue, Method, Response};
use http_body_util::Either;
use hyper::body::Body;
use tokio::sync::watch;

use crate::body::{H2Body, ReqBody};
use crate::dispatch;
use crate::reply::ResBody;
use crate::socket::ServedConn;
use crate::wire::{goaway_frame, H2Io, Ledger, Sent};

/// Concurrent streams one HTTP/2 connection may open.
pub(crate) const MAX_STREAMS: u32 = 256;

/// How an HTTP/2 connection's serving ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum H2End {
    /// The connection closed (or the server is shutting down).
    Closed,
    /// A request's fault took the socket.
    HandedOver,
}

/// Serves `conn` as HTTP/2 until it closes, goes idle, the server shuts down or a request's
/// fault takes the socket.
pub(crate) async fn serve(
    conn: &Arc<ServedConn>,
    handshake: Duration,
    shutdown: &mut watch::Receiver<bool>,
) -> H2End {
    let state = &conn.state;
    let limits = state.limits;
    let ledger = Arc::new(Ledger::new(state.http2.clone(), state.clock.clone()));
    // Whatever ends the serving, after the connection (declared before it, dropped after).
    let _closed = Closed(&ledger);
    let io = H2Io::new(conn.io.clone(), ledger.clone());
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 20)
        .max_frame_size(16 << 10)
        .max_send_buffer_size(400 << 10)
        .max_header_list_size(u32::try_from(limits.max_head).unwrap_or(u32::MAX))
        .max_concurrent_streams(MAX_STREAMS)
        .max_pending_accept_reset_streams(20)
        .max_local_error_reset_streams(Some(1024));
    let mut h2 = match tokio::time::timeout(handshake, builder.handshake::<_, Bytes>(io)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!("HTTP/2 handshake failed: {e}");
            end_for_violation(conn, &ledger).await;
            return H2End::Closed;
        }
        Err(_) => return H2End::Closed,
    };
    loop {
        tokio::select! {
            biased;
            accepted = std::future::poll_fn(|cx| {
                let r = h2.poll_accept(cx);
                if r.is_pending() {
                    // Every stream h2 took has been handed over: those it reset and kept were
                    // refused before dispatch.
                    ledger.settle_refusals();
                }
                r
            }) => match accepted {
                Some(Ok((req, respond))) => {
                    let id = u32::from(respond.stream_id());
                    // Followed before the task runs: its answer's first frame may be written
                    // before the task is polled.
                    ledger.follow(id);
                    // Boxed: the task then holds a pointer, not the stream's future, which
                    // tokio would otherwise copy whole when it spawns, finishes and drops it.
                    tokio::spawn(dispatch::built_in_box(|| {
                        stream(conn.clone(), ledger.clone(), id, req, respond)
                    }));
                }
                Some(Err(e)) => {
                    tracing::debug!("HTTP/2 connection error: {e}");
                    end_for_violation(conn, &ledger).await;
                    return H2End::Closed;
                }
                None => return H2End::Closed,
            },
            _ = conn.ctl.notify.notified() => {
                let goaway = matches!(
                    conn.ctl.action.lock().unwrap_or_else(|p| p.into_inner()).as_ref(),
                    Some((crate::socket::SocketAction::GoAway, _))
                );
                if goaway {
                    // GOAWAY, then a moment for it to leave before the connection closes.
                    h2.graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_millis(100), drain(&mut h2)).await;
                }
                return H2End::HandedOver;
            }
            () = idle_h2(conn, limits.header_timeout) => {
                // No stream for a whole header timeout: GOAWAY, as HTTP/1.1's idle connections
                // end.
                h2.graceful_shutdown();
                let _ = tokio::time::timeout(Duration::from_millis(100), drain(&mut h2)).await;
                return H2End::Closed;
            }
            _ = shutdown.changed() => return H2End::Closed,
        }
    }
}

/// Closes a connection's ledger when dropped (see [`Ledger::close`]).
struct Closed<'a>(&'a Ledger);

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Resolves once an HTTP/2 connection has had no stream in progress for `idle`: without this a
/// client could hold a connection (and a place under `max_connections`) for ever by opening no
/// stream, or by never finishing a HEADERS frame. A stream is in progress from its HEADERS until
/// its answer's last frame is written (or the stream is reset), so a client still reading an
/// answer, however slowly, keeps its connection.
async fn idle_h2(conn: &ServedConn, idle: Duration) {
    loop {
        let quiet = conn.streams.quiet_for(&conn.state.clock);
        match quiet {
            Some(q) if q >= idle => return,
            Some(q) => tokio::time::sleep(idle - q).await,
            None => tokio::time::sleep(idle).await,
        }
    }
}

/// Drives the connection until it has no stream left (after a GOAWAY).
async fn drain(h2: &mut h2::server::Connection<H2Io, Bytes>) {
    while let Some(r) = h2.accept().await {
        if r.is_err() {
            return;
        }
    }
}

/// A client that broke a frame-size rule h2 does not know gets the RFC's GOAWAY, written here.
async fn end_for_violation(conn: &ServedConn, ledger: &Ledger) {
    let Some(code) = ledger.violation() else {
        return;
    };
    ledger.count_goaway(code);
    let _ = conn
        .io
        .write_all(&goaway_frame(ledger.last_opened(), code))
        .await;
    crate::socket::linger_close(&conn.stream, &conn.state.limits).await;
}

/// One stream: the request handled, its answer written to the end or given up.
///
/// This and the steps below are `async` blocks rather than `async fn`s: an `async fn` keeps
/// each argument twice in its state (as given, and as its own local), and the stream's state is
/// memory each request writes for the first time, so every copy of the request or its answer
/// is cache lines written for nothing.
#[allow(clippy::manual_async_fn)] // on purpose: an `async fn` keeps its arguments twice
fn stream(
    conn: Arc<ServedConn>,
    ledger: Arc<Ledger>,
    id: u32,
    req: http::Request<h2::RecvStream>,
    mut respond: SendResponse<Bytes>,
) -> impl Future<Output = ()> + Send {
    async move {
        let _busy = conn.streams.enter(&conn.state.clock);
        let head_only = req.method() == Method::HEAD;
        // Awaited on its own, so that the answer's state takes the room the handler's had,
        // lines already in the cache, rather than room of its own beside it.
        let handled = handled(&conn, req, &mut respond).await;
        match handled {
            None => {}
            Some(Err(dispatch::StreamReset(reason))) => respond.send_reset(reason),
            Some(Ok(res)) => answer(&conn, &ledger, id, respond, res, head_only).await,
        }
        ledger.release(id);
    }
}

/// The request handled, or `None` when the client reset the stream first.
#[allow(clippy::manual_async_fn)] // on purpose: an `async fn` keeps its arguments twice
fn handled<'a>(
    conn: &'a Arc<ServedConn>,
    req: http::Request<h2::RecvStream>,
    respond: &'a mut SendResponse<Bytes>,
) -> impl Future<Output = Option<Result<Response<ResBody>, dispatch::StreamReset>>> + Send + 'a {
    async move {
        let req = req.map(|b| ReqBody::H2(H2Body::new(b)));
        let mut handler = std::pin::pin!(dispatch::handle(conn.clone(), req));
        tokio::select! {
            // The handler first: a stream the h2 layer reset while the handler read its body
            // is the handler's to journal (`rejected`), not a client that left.
            biased;
            r = &mut handler => Some(r),
            // The client reset the stream: the handler's future is dropped, and its entry says
            // `client_closed`.
            _ = poll_fn(|cx| respond.poll_reset(cx)) => None,
        }
    }
}

/// Why an answer was not delivered.
enum Cut {
    /// The client reset the stream or the connection closed.
    Gone,
    /// No progress for `limits.send_timeout`.
    Stalled,
}

/// Writes `res` on the stream and finishes its entry with what happened to it.
#[allow(clippy::manual_async_fn)] // on purpose: an `async fn` keeps its arguments twice
fn answer<'a>(
    conn: &'a ServedConn,
    ledger: &'a Ledger,
    id: u32,
    mut respond: SendResponse<Bytes>,
    res: Response<ResBody>,
    head_only: bool,
) -> impl Future<Output = ()> + Send + 'a {
    async move {
        let (mut parts, mut body) = res.into_parts();
        let status = parts.status;
        // No content for these (RFC 9110 §6.4.1): what the body would have been is not owed.
        let bodiless = head_only
            || status.is_informational()
            || status == http::StatusCode::NO_CONTENT
            || status == http::StatusCode::NOT_MODIFIED;
        let settle = match &mut body {
            Either::Left(b) => {
                if bodiless {
                    b.discard();
                }
                b.take_settle()
            }
            Either::Right(_) => None,
        };
        prepare_headers(&mut parts.headers, &body);
        let end_now = bodiless || body.is_end_stream();
        let limit = conn.state.limits.send_timeout;
        let result = match respond.send_response(Response::from_parts(parts, ()), end_now) {
            Err(_) => Err(Cut::Gone),
            Ok(mut tx) => {
                let piped = if end_now {
                    Ok(())
                } else {
                    pipe(&mut body, &mut tx, ledger, id, limit).await
                };
                let delivered = match piped {
                    Ok(()) => wait_end(&mut tx, ledger, id, limit).await,
                    Err(cut) => Err(cut),
                };
                if let Err(Cut::Stalled) = delivered {
                    tx.send_reset(Reason::CANCEL);
                }
                delivered
            }
        };
        drop(body);
        if let Some(s) = settle {
            let bytes = ledger.sent(id).bytes;
            match result {
                // Done when its last frame was written, not when this task got to see that: a
                // retry measured from a later time would look sooner than the client made it.
                Ok(()) => s.finish(bytes, None, ledger.ended_at(id)),
                Err(Cut::Gone) => s.finish(bytes, Some(history::Outcome::ClientClosed), None),
                Err(Cut::Stalled) => {
                    let sent = settled(ledger, id, limit).await;
                    // The frame that ends the stream got out after all: the client has it whole.
                    let (cut, done_us) = if sent.ended {
                        (None, ledger.ended_at(id))
                    } else {
                        (Some(history::Outcome::SendTimeout), None)
                    };
                    s.finish(sent.bytes, cut, done_us);
                }
            }
        }
    }
}

/// How far a stream given up on got: the rest of a DATA frame begun before its reset still goes
/// out ahead of the reset, as the framing requires, so what it wrote is known once the reset (or
/// the frame that ends it) is written, or the connection ends. Waited for no longer than `limit`
/// (another send timeout): a client that still reads nothing, or whose own reset made h2 drop
/// ours, leaves the count at what got out by then. Only the ledger and the clock are watched,
/// not the stream (unlike [`wait`]): the stream is reset already.
async fn settled(ledger: &Ledger, id: u32, limit: Duration) -> Sent {
    let mut seen = ledger.sent(id);
    let sleep = tokio::time::sleep(limit);
    tokio::pin!(sleep);
    while !seen.ended && !seen.reset {
        let next = poll_fn(|cx| {
            if let Poll::Ready(s) = ledger.poll_sent(id, seen, cx) {
                return Poll::Ready(Some(s));
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await;
        match next {
            Some(s) => seen = s,
            None => break,
        }
    }
    seen
}

/// Headers that belong to an HTTP/1.1 connection and are forbidden in HTTP/2 (RFC 9113 §8.2.2),
/// removed; `date` and, for a body of known size, `content-length` added when missing.
fn prepare_headers(h: &mut HeaderMap, body: &ResBody) {
    // One pass over the few fields an answer has finds whether any must go (HTTP/2 forbids
    // them, RFC 9113 §8.2.2), where five removals would hash five names every time.
    let forbidden = h.keys().any(|k| {
        matches!(
            k.as_str(),
            "connection"
                | "transfer-encoding"
                | "upgrade"
                | "keep-alive"
                | "proxy-connection"
                | "te"
        )
    });
    if forbidden {
        strip_connection_fields(h);
    }
    if !h.contains_key(http::header::DATE) {
        h.insert(http::header::DATE, date_now());
    }
    // A gRPC answer carries none, as gRPC servers send it (its length is in its messages).
    let grpc = h
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if let (Some(n), false) = (body.size_hint().exact(), grpc) {
        if !h.contains_key(http::header::CONTENT_LENGTH) {
            h.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
}

/// Removes the connection-specific fields HTTP/2 forbids, and `te` unless it is `trailers`.
fn strip_connection_fields(h: &mut HeaderMap) {
    for name in [
        http::header::CONNECTION,
        http::header::TRANSFER_ENCODING,
        http::header::UPGRADE,
        http::header::HeaderName::from_static("keep-alive"),
        http::header::HeaderName::from_static("proxy-connection"),
    ] {
        h.remove(name);
    }
    if h.get(http::header::TE).is_some_and(|v| v != "trailers") {
        h.remove(http::header::TE);
    }
}

/// Today's `Date` value, formatted once a second per thread.
fn date_now() -> HeaderValue {
    thread_local! {
        static CACHE: std::cell::RefCell<(u64, HeaderValue)> =
            const { std::cell::RefCell::new((u64::MAX, HeaderValue::from_static(""))) };
    }
    let now = std::time::SystemTime::now();
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != secs {
            let v = HeaderValue::from_str(&httpdate::fmt_http_date(now))
                .unwrap_or(HeaderValue::from_static(""));
            *c = (secs, v);
        }
        c.1.clone()
    })
}

/// What a stream's task is woken by while it writes.
enum Wake {
    Capacity(usize),
    Sent(Sent),
    Gone,
    Stalled,
}

/// Waits for send capacity (with `want_capacity`), the answer to move on the wire past `seen`,
/// the client's reset, or `deadline` (the end of the time without progress it may take).
async fn wait(
    tx: &mut SendStream<Bytes>,
    ledger: &Ledger,
    id: u32,
    seen: Sent,
    want_capacity: bool,
    deadline: tokio::time::Instant,
) -> Wake {
    let sleep = tokio::time::sleep_until(deadline);
    tokio::pin!(sleep);
    poll_fn(|cx| {
        if let Poll::Ready(r) = tx.poll_reset(cx) {
            // An error here is the connection gone; a reason is the client's reset.
            let _ = r;
            return Poll::Ready(Wake::Gone);
        }
        if want_capacity {
            loop {
                match tx.poll_capacity(cx) {
                    Poll::Ready(Some(Ok(0))) => continue,
                    Poll::Ready(Some(Ok(n))) => return Poll::Ready(Wake::Capacity(n)),
                    Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(Wake::Gone),
                    Poll::Pending => break,
                }
            }
        }
        if let Poll::Ready(s) = ledger.poll_sent(id, seen, cx) {
            return Poll::Ready(Wake::Sent(s));
        }
        if sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Wake::Stalled);
        }
        Poll::Pending
    })
    .await
}

/// Hands the body to h2 as the client's window opens, never more than it lets through.
async fn pipe(
    body: &mut ResBody,
    tx: &mut SendStream<Bytes>,
    ledger: &Ledger,
    id: u32,
    limit: Duration,
) -> Result<(), Cut> {
    let mut seen = ledger.sent(id);
    let mut deadline = tokio::time::Instant::now() + limit;
    loop {
        let frame = poll_fn(|cx| {
            if tx.poll_reset(cx).is_ready() {
                return Poll::Ready(None);
            }
            Pin::new(&mut *body).poll_frame(cx).map(Some)
        })
        .await;
        let frame = match frame {
            None => return Err(Cut::Gone),
            Some(None) => {
                return tx.send_data(Bytes::new(), true).map_err(|_| Cut::Gone);
            }
            Some(Some(Err(e))) => {
                tracing::debug!("response body failed: {e}");
                tx.send_reset(Reason::INTERNAL_ERROR);
                return Err(Cut::Gone);
            }
            Some(Some(Ok(f))) => f,
        };
        let frame = match frame.into_data() {
            Ok(mut data) => {
                let eos = body.is_end_stream();
                if data.is_empty() {
                    if eos {
                        return tx.send_data(data, true).map_err(|_| Cut::Gone);
                    }
                    continue;
                }
                while !data.is_empty() {
                    tx.reserve_capacity(data.len());
                    let mut room = tx.capacity();
                    while room == 0 {
                        match wait(tx, ledger, id, seen, true, deadline).await {
                            Wake::Capacity(n) => room = n,
                            Wake::Sent(s) if s.reset => return Err(Cut::Gone),
                            Wake::Sent(s) => {
                                seen = s;
                                deadline = tokio::time::Instant::now() + limit;
                            }
                            Wake::Gone => return Err(Cut::Gone),
                            Wake::Stalled => return Err(Cut::Stalled),
                        }
                    }
                    deadline = tokio::time::Instant::now() + limit;
                    let chunk = data.split_to(room.min(data.len()));
                    tx.send_data(chunk, eos && data.is_empty())
                        .map_err(|_| Cut::Gone)?;
                }
                if eos {
                    return Ok(());
                }
                continue;
            }
            Err(frame) => frame,
        };
        if let Ok(trailers) = frame.into_trailers() {
            tx.reserve_capacity(0);
            return tx.send_trailers(trailers).map_err(|_| Cut::Gone);
        }
    }
}

/// Waits until the frame that ends the stream is on the wire.
async fn wait_end(
    tx: &mut SendStream<Bytes>,
    ledger: &Ledger,
    id: u32,
    limit: Duration,
) -> Result<(), Cut> {
    let mut seen = ledger.sent(id);
    loop {
        if seen.ended {
            return Ok(());
        }
        if seen.reset {
            return Err(Cut::Gone);
        }
        let deadline = tokio::time::Instant::now() + limit;
        match wait(tx, ledger, id, seen, false, deadline).await {
            Wake::Sent(s) => seen = s,
            Wake::Capacity(_) => {}
            Wake::Gone => return Err(Cut::Gone),
            Wake::Stalled => return Err(Cut::Stalled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in fields {
            h.append(*k, HeaderValue::from_static(v));
        }
        prepare_headers(&mut h, &Either::Right(axum::body::Body::from("four")));
        h
    }

    /// The fields HTTP/2 forbids go (a `te` other than `trailers` too), whatever else the
    /// answer has; the rest stay, with a date and, outside gRPC, a length.
    #[test]
    fn an_answer_loses_the_fields_http2_forbids_and_keeps_the_rest() {
        let h = prepared(&[
            ("connection", "close"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("te", "gzip"),
            ("x-kept", "1"),
        ]);
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-kept", "date", "content-length"], "{h:?}");
        assert_eq!(h["content-length"], "4");

        let h = prepared(&[("te", "trailers"), ("content-type", "application/grpc")]);
        assert_eq!(h["te"], "trailers");
        assert!(!h.contains_key("content-length"), "{h:?}");
        assert!(h.contains_key("date"));
    }
}
