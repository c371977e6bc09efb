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
use crate::socket::{peer_closed, write_all, ConnCtl, ServedConn, SharedStream, SocketAction};
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

async fn serve_connection(
    state: Arc<State>,
    routes: Arc<Routes>,
    stream: TcpStream,
    conn_id: u64,
    mut shutdown: watch::Receiver<bool>,
) {
    let stream = Arc::new(stream);
    let gen = state.schedule_gen.load(Ordering::Acquire);
    let conn = Arc::new(ServedConn {
        emitter: state.journal.emitter(state.clock.clone()),
        schedule: Mutex::new((gen, state.schedule())),
        state: state.clone(),
        ctl: ConnCtl::default(),
        stream: stream.clone(),
        id: conn_id,
        routes,
    });
    let svc = {
        let conn = conn.clone();
        hyper::service::service_fn(move |req| dispatch::handle(conn.clone(), req))
    };
    let ctl = &conn.ctl;
    // No header-read timer: it would arm a timer per request, and a test server on loopback does
    // not need slowloris protection.
    let http = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(SharedStream(stream.clone()), svc);
    let handed_over = tokio::select! {
        biased;
        _ = http => false,
        _ = ctl.notify.notified() => true,
        _ = shutdown.changed() => false,
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
        SocketAction::Reset => {
            if let Err(e) = stream.set_zero_linger() {
                tracing::warn!("cannot arm TCP reset: {e}");
            }
            Outcome::Reset
        }
        SocketAction::Malformed(bytes) => {
            if write_all(&stream, bytes).await.is_err() {
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
    drop(stream);
    pending.entry();
    pending.finish(outcome);
}
