//! Connection handling: accept, serve HTTP/1.1 with hyper over a socket shared with the
//! connection task ([`crate::socket`]), and carry out the socket-level faults (drop, reset, hang,
//! malformed) that a request's handler hands over.
//!
//! Why not a plain axum server: a dropped response, a TCP reset or a half-written response cannot
//! be expressed as a `Response`. Each connection is served by hyper over a shared handle to the
//! socket; when a request's fault needs the socket itself, the handler parks its request and hands
//! the socket action to the connection task, which stops hyper and acts on the raw stream.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use history::Outcome;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::dispatch;
use crate::socket::{
    peer_closed, ConnCtl, ConnIo, ServedConn, SharedStream, SharedTls, SocketAction,
};
use crate::state::{Routes, State};

/// Accepts connections until `shutdown`, serving each in a task of its own.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    routes: Arc<Routes>,
    mut shutdown: watch::Receiver<bool>,
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
                tokio::spawn(serve_connection(
                    state.clone(),
                    routes.clone(),
                    stream,
                    conn_id,
                    shutdown.clone(),
                ));
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// How long a client may take to finish the TLS handshake (or, over plain TCP, to send the
/// first bytes that tell HTTP/2 from HTTP/1.1).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
    let (io, http2) = match &state.tls {
        None => {
            // Peeking costs a syscall per connection, not per request; skip it when the first
            // byte cannot start the preface.
            let h2 = tokio::time::timeout(HANDSHAKE_TIMEOUT, speaks_h2c(&stream))
                .await
                .unwrap_or(false);
            (ConnIo::Plain(SharedStream(stream.clone())), h2)
        }
        Some(tls) => {
            let accepted = tokio::time::timeout(
                HANDSHAKE_TIMEOUT,
                tls.acceptor.accept(SharedStream(stream.clone())),
            )
            .await;
            match accepted {
                Ok(Ok(t)) => {
                    let h2 = t.get_ref().1.alpn_protocol() == Some(b"h2");
                    (ConnIo::Tls(SharedTls(Arc::new(Mutex::new(t)))), h2)
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
    });
    let svc = {
        let conn = conn.clone();
        hyper::service::service_fn(move |req| dispatch::handle(conn.clone(), req))
    };
    let ctl = &conn.ctl;
    let handed_over = if http2 {
        let http = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(io.clone(), svc);
        tokio::pin!(http);
        let handed = tokio::select! {
            biased;
            _ = http.as_mut() => false,
            _ = ctl.notify.notified() => true,
            _ = shutdown.changed() => false,
        };
        let goaway = handed
            && matches!(
                ctl.action
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_ref(),
                Some((SocketAction::GoAway, _))
            );
        if goaway {
            // GOAWAY, then a moment for it to leave before the connection closes.
            http.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_millis(100), http.as_mut()).await;
        }
        handed
    } else {
        // No header-read timer: it would arm a timer per request, and a test server on loopback
        // does not need slowloris protection.
        let http = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .serve_connection(io.clone(), svc);
        tokio::select! {
            biased;
            _ = http => false,
            _ = ctl.notify.notified() => true,
            _ = shutdown.changed() => false,
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
