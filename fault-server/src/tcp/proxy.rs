//! A proxy at work: its listener, the connections it accepts, and the upstream each is opened
//! to.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use history::{EndedBy, TcpEnd};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::pipe::{close, Pipe, Setup};
use super::record::Record;
use super::{ProxyShared, Sink};

/// Accepts connections until `stop` fires; each is served in a task of its own.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<ProxyShared>,
    sink: Arc<Sink>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let (client, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of files, say: wait a little rather than spin on the error.
                tracing::warn!("proxy {}: accept failed: {e}", shared.name);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let number = shared.numbers.fetch_add(1, Ordering::Relaxed) + 1;
        let upstream = shared.upstream();
        let record = Record::open(sink.clone(), &shared.name, &upstream, peer, number);
        if shared.open.load(Ordering::Relaxed) >= shared.max_connections {
            drop(client);
            record.finish(EndedBy::Proxy, TcpEnd::Rejected, None);
            continue;
        }
        let open = Open::count(shared.clone());
        let stop = stop.child_token();
        let seed = sink.seed;
        let task = move |client: TcpStream| async move {
            serve(client, peer, number, &upstream, &open.0, stop, seed, record).await;
            drop(open);
        };
        match sink.lanes.as_ref().and_then(std::sync::Weak::upgrade) {
            Some(lanes) => lanes.serve(client, task),
            None => {
                tokio::spawn(task(client));
            }
        }
    }
}

/// Counts a connection as open while it lives: dropped with its task, whether it ran or was
/// never started (a lane that was stopping).
struct Open(Arc<ProxyShared>);

impl Open {
    fn count(shared: Arc<ProxyShared>) -> Open {
        shared.open.fetch_add(1, Ordering::Relaxed);
        Open(shared)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection: the upstream opened, the pipe run, the sockets closed, the entry written.
#[allow(clippy::too_many_arguments)]
async fn serve(
    client: TcpStream,
    peer: SocketAddr,
    number: u64,
    upstream: &str,
    shared: &ProxyShared,
    stop: CancellationToken,
    seed: u64,
    mut record: Record,
) {
    let started = record.now_us();
    let connected = tokio::select! {
        () = stop.cancelled() => {
            record.finish(EndedBy::Proxy, TcpEnd::Shutdown, None);
            return;
        }
        c = tokio::time::timeout(shared.connect_timeout, TcpStream::connect(upstream)) => c,
    };
    let connect_us = record.now_us().saturating_sub(started);
    record.tcp().connect_us = Some(connect_us);
    let upstream_conn = match connected {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            record.tcp().connect_error = Some(e.to_string());
            drop(client);
            record.finish(EndedBy::Upstream, TcpEnd::Refused, None);
            return;
        }
        Err(_) => {
            record.tcp().connect_error =
                Some(format!("timed out after {:?}", shared.connect_timeout));
            drop(client);
            record.finish(EndedBy::Upstream, TcpEnd::Refused, None);
            return;
        }
    };
    record.tcp().connected = true;
    // Every write goes out as it is made: a toxic's timing is the wire's, not Nagle's.
    let _ = client.set_nodelay(true);
    let _ = upstream_conn.set_nodelay(true);
    // A protocol proxy reads from the first byte: the session exists before the client speaks.
    let wire = shared
        .wire()
        .map(|w| w.connection(record.sink().clone(), record.conn_id()));
    let setup = Setup {
        toxics: shared.toxics.subscribe(),
        stop,
        buffer: shared.buffer,
        seed,
        number,
        client_ip: peer.ip(),
        wire,
    };
    let mut pipe = Pipe::new(client, upstream_conn, setup);
    let end = pipe.run(&mut record).await;
    pipe.end_wire(&end);
    let (up, down, dropped_up, dropped_down) = pipe.bytes();
    let (client, upstream_conn) = pipe.into_streams();
    close(client, upstream_conn, &end);
    let tcp = record.tcp();
    tcp.bytes_up = up;
    tcp.bytes_down = down;
    tcp.dropped_up = dropped_up;
    tcp.dropped_down = dropped_down;
    let (by, how, toxic) = end.journal();
    record.finish(by, how, toxic);
}
