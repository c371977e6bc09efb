//! Connection handling: accept, serve HTTP/1.1 with hyper over a socket shared with the
//! connection task ([`crate::socket`]), and carry out the socket-level faults (drop, reset, hang,
//! malformed) that a request's handler hands over.
//!
//! Why not a plain axum server: a dropped response, a TCP reset or a half-written response cannot
//! be expressed as a `Response`. Each connection is served by hyper over a shared handle to the
//! socket; when a request's fault needs the socket itself, the handler parks its request and hands
//! the socket action to the connection task, which stops hyper and acts on the raw stream.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use history::{Entry, HttpVersion, Outcome};
use http_body_util::Either;
use hyper::body::Incoming;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::body::ReqBody;
use crate::dispatch;
use crate::http2::{self, H2End};
use crate::journal::Pending;
use crate::lanes::Lanes;
use crate::socket::{
    linger_close, peer_closed, ConnCtl, ConnIo, ServedConn, SharedStream, SharedTls, SocketAction,
    Streams,
};
use crate::state::{Routes, State, CONTROL_RESERVE};

/// Accepts connections until `shutdown`, serving each in a task of its own: on one of the
/// `lanes` when there are, else on this runtime.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    routes: Arc<Routes>,
    mut shutdown: watch::Receiver<bool>,
    lanes: Option<Arc<Lanes>>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        match accepted {
            Ok((stream, _peer)) => {
                let _ = stream.set_nodelay(true);
                let conn_id = state.conn_ids.fetch_add(1, Ordering::Relaxed) + 1;
                let (state, routes, shutdown) = (state.clone(), routes.clone(), shutdown.clone());
                match &lanes {
                    Some(lanes) => lanes.serve(stream, move |stream| {
                        serve_connection(state, routes, stream, conn_id, shutdown)
                    }),
                    None => {
                        tokio::spawn(serve_connection(state, routes, stream, conn_id, shutdown));
                    }
                }
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Longest a client may take to finish the TLS handshake (or, over plain TCP, to send the first
/// bytes that tell HTTP/2 from HTTP/1.1); the header timeout when that is shorter.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Counts a connection as served while it lives.
struct Active<'a> {
    state: &'a State,
    /// Connections served, this one included, when it arrived.
    count: usize,
}

impl<'a> Active<'a> {
    fn enter(state: &'a State) -> Active<'a> {
        let count = state.active.fetch_add(1, Ordering::AcqRel) + 1;
        Active { state, count }
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.state.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a connection beyond the limit gets: the control API is still served (so health answers
/// while a flood lasts) — within the reserve, and over plain TCP, where the request line can be
/// seen before the TLS handshake would cost anything; anything else is answered `503` and
/// journaled as `rejected`, and a connection that says nothing within a moment is closed.
async fn over_limit_admits(state: &State, stream: &TcpStream, conn_id: u64) -> bool {
    if state.tls.is_some()
        || state.active.load(Ordering::Relaxed) > state.limits.max_connections + CONTROL_RESERVE
    {
        return false;
    }
    let mut buf = [0u8; 64];
    let seen = tokio::time::timeout(OVER_LIMIT_WAIT, async {
        loop {
            match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return 0,
                Ok(n) if n >= 16 || buf[..n].contains(&b'\n') => return n,
                Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    })
    .await
    .unwrap_or(0);
    if seen == 0 {
        return false;
    }
    let line = &buf[..seen];
    let path_at = line
        .iter()
        .position(|b| *b == b' ')
        .map_or(line.len(), |i| i + 1);
    if line[path_at..].starts_with(crate::control::PREFIX.as_bytes()) {
        return true;
    }
    let _ = crate::socket::write_all(
        stream,
        b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 25\r\n\r\nconnection limit reached\n",
    )
    .await;
    let (epoch, seq) = state.seq.next();
    let mut entry = Entry::blank(seq);
    entry.t_recv_us = state.clock.now_us();
    state.stamp(&mut entry);
    entry.conn_id = conn_id;
    entry.http_version = Some(HttpVersion::Http11);
    entry.status = Some(503);
    entry.rejected = Some("connection-limit".to_string());
    crate::journal::Pending::new(&state.journal, state.clock.clone(), epoch, entry)
        .finish(Outcome::Rejected);
    false
}

/// How long a connection beyond the limit may take to show its request line.
const OVER_LIMIT_WAIT: Duration = Duration::from_millis(250);

/// A request refused while its head was read: hyper has answered a malformed or too large head
/// (`400`, `431`); a head that did not arrive in time gets `408` here. Journaled as `rejected`
/// with what is known — when, on which connection, why. An idle kept-alive connection that
/// simply timed out is not a request and is closed quietly. True when a request was refused.
async fn reject_head(conn: &ServedConn, e: &hyper::Error) -> bool {
    let started_another =
        conn.bytes_read.load(Ordering::Relaxed) > conn.quiet_mark.load(Ordering::Relaxed);
    let (status, reason) = if e.is_timeout() {
        if !started_another {
            return false;
        }
        let _ = conn
            .io
            .write_all(
                b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            )
            .await;
        (408, "header-timeout")
    } else if e.is_parse_too_large() {
        (431, "head-too-large")
    } else if e.is_parse() {
        (400, "bad-request")
    } else {
        return false;
    };
    let state = &conn.state;
    let (epoch, seq) = state.seq.next();
    let mut entry = Entry::blank(seq);
    entry.t_recv_us = state.clock.now_us();
    state.stamp(&mut entry);
    entry.conn_id = conn.id;
    entry.tls = conn.io.is_tls();
    entry.http_version = Some(HttpVersion::Http11);
    entry.status = Some(status);
    entry.rejected = Some(reason.to_string());
    Pending::with_emitter(conn.emitter.clone(), epoch, Box::new(entry)).finish(Outcome::Rejected);
    true
}

/// The HTTP/2 connection preface a client with prior knowledge (h2c) starts with.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a plain connection starts with the HTTP/2 preface (h2c with prior knowledge), looking
/// without consuming.
async fn speaks_h2c(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 24];
    loop {
        match stream.peek(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) if buf[..n] != H2_PREFACE[..n] => return false,
            Ok(n) if n == H2_PREFACE.len() => return true,
            // A prefix of the preface so far: wait for the rest.
            Ok(_) => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
}

async fn serve_connection(
    state: Arc<State>,
    routes: Arc<Routes>,
    stream: TcpStream,
    conn_id: u64,
    mut shutdown: watch::Receiver<bool>,
) {
    let stream = Arc::new(stream);
    let _active = Active::enter(&state);
    let over_limit = _active.count > state.limits.max_connections;
    if over_limit && !over_limit_admits(&state, &stream, conn_id).await {
        return;
    }
    let shared = SharedStream::new(stream.clone());
    let bytes_read = shared.read.clone();
    let wire = shared.wire.clone();
    let handshake = state.limits.header_timeout.min(HANDSHAKE_TIMEOUT);
    let (io, http2) = match &state.tls {
        None => {
            // A peek per connection, not per request.
            let h2 = tokio::time::timeout(handshake, speaks_h2c(&stream))
                .await
                .unwrap_or(false);
            (ConnIo::plain(shared), h2)
        }
        Some(tls) => {
            let accepted = tokio::time::timeout(handshake, tls.acceptor.accept(shared)).await;
            match accepted {
                Ok(Ok(t)) => {
                    let h2 = t.get_ref().1.alpn_protocol() == Some(b"h2");
                    (ConnIo::tls(SharedTls(Arc::new(Mutex::new(t)))), h2)
                }
                Ok(Err(e)) => {
                    tracing::debug!("TLS handshake failed: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!("TLS handshake timed out");
                    return;
                }
            }
        }
    };
    let gen = state.schedule_gen.load(Ordering::Acquire);
    let conn = Arc::new(ServedConn {
        emitter: state.journal.emitter(state.clock.clone()),
        schedule: Mutex::new((gen, state.schedule())),
        state: state.clone(),
        ctl: ConnCtl::default(),
        stream: stream.clone(),
        io: io.clone(),
        http2,
        id: conn_id,
        routes,
        bytes_read,
        wire,
        quiet_mark: AtomicU64::new(0),
        over_limit,
        streams: Streams::new(&state.clock),
        drain_after: AtomicBool::new(false),
    });
    let ctl = &conn.ctl;
    let limits = state.limits;
    let handed_over = if http2 {
        http2::serve(&conn, handshake, &mut shutdown).await == H2End::HandedOver
    } else {
        let svc = {
            let conn = conn.clone();
            hyper::service::service_fn(move |req: http::Request<Incoming>| {
                let conn = conn.clone();
                // What the connection had written when this request came: its answer starts
                // there (or where the one before it ended).
                let start = conn.io.watch.written();
                let head = req.method() == http::Method::HEAD;
                async move {
                    let watch = conn.io.watch.clone();
                    let res = dispatch::handle(conn, req.map(ReqBody::H1)).await;
                    res.map(|mut res| {
                        let status = res.status();
                        // hyper writes no body for these and never polls it: what it would have
                        // been is not owed.
                        let bodiless = head
                            || status.is_informational()
                            || status == http::StatusCode::NO_CONTENT
                            || status == http::StatusCode::NOT_MODIFIED;
                        if let Either::Left(b) = res.body_mut() {
                            if bodiless {
                                b.discard();
                            }
                            b.on_connection(watch, start);
                        }
                        res
                    })
                }
            })
        };
        // The header timer bounds a slow head (slowloris) and an idle kept-alive connection
        // alike: hyper starts it whenever it waits for a head.
        let http = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(limits.max_head)
            .serve_connection(io.clone(), svc);
        let watch = &conn.io.watch;
        let ended = tokio::select! {
            biased;
            r = http => Some(r),
            _ = ctl.notify.notified() => None,
            () = watch.stalled_for(limits.send_timeout) => {
                // The client stopped reading: what was being written is given up.
                watch.time_out();
                watch.abandon();
                return;
            }
            _ = shutdown.changed() => {
                watch.abandon();
                return;
            }
        };
        watch.abandon();
        match ended {
            Some(Ok(())) => {
                if conn.drain_after.load(Ordering::Relaxed) {
                    linger_close(&stream, &limits).await;
                }
                return;
            }
            Some(Err(e)) => {
                if reject_head(&conn, &e).await || conn.drain_after.load(Ordering::Relaxed) {
                    linger_close(&stream, &limits).await;
                }
                return;
            }
            None => true,
        }
    };
    // `http` is dropped here: hyper lets go of the socket; only our handles remain.
    if !handed_over {
        return;
    }
    let Some((action, mut pending)) = ctl.action.lock().unwrap_or_else(|p| p.into_inner()).take()
    else {
        return;
    };
    let outcome = match action {
        SocketAction::Drop => Outcome::Dropped,
        SocketAction::Abandon => Outcome::ClientClosed,
        SocketAction::GoAway => Outcome::Reset,
        SocketAction::Reset => {
            if let Err(e) = stream.set_zero_linger() {
                tracing::warn!("cannot arm TCP reset: {e}");
            }
            Outcome::Reset
        }
        SocketAction::Malformed(bytes) => {
            if io.write_all(bytes).await.is_err() {
                Outcome::ClientClosed
            } else {
                Outcome::Responded
            }
        }
        SocketAction::Hang(cap) => {
            tokio::select! {
                _ = tokio::time::sleep(cap) => Outcome::Hung,
                _ = peer_closed(&stream) => Outcome::ClientClosed,
                _ = shutdown.changed() => Outcome::Hung,
            }
        }
    };
    drop(io);
    drop(stream);
    pending.entry();
    pending.finish(outcome);
}
