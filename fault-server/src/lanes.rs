//! Connection lanes: threads that each serve their own share of the connections, start to end.
//!
//! Each lane is a thread with a single-threaded runtime. An accepted connection is handed to the
//! lane serving the fewest, and it stays there, with every task it spawns (an HTTP/2 stream's
//! handler, a proxied request's forward): its socket is polled, its tasks woken and run by that
//! one thread.
//!
//! Why not one multi-threaded runtime: there, a task woken by the thread that polled its socket
//! runs wherever it was queued, and a parked thread is woken to steal it. For a server doing
//! little per request that is a large part of the work: on two cores shared with the load, unary
//! gRPC calls took 9–15 µs of server CPU each on a multi-threaded runtime and 7.7–9.9 µs in lanes
//! (BENCHMARKS.md). The price: a single connection never uses more than one core, as in nginx's
//! workers; a load of one connection with many HTTP/2 streams is served by one thread.
//!
//! A lane stops once the [`Lanes`] is dropped (the accept loop ends with it) and its connections
//! have ended: they end on the server's shutdown signal, or when the server is dropped.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// What a lane runs for a connection: the task serving it.
type Serve = Box<dyn FnOnce(TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

struct Lane {
    jobs: mpsc::UnboundedSender<(std::net::TcpStream, Serve)>,
    /// Connections it serves now.
    load: Arc<AtomicUsize>,
}

/// The lanes of one server.
pub(crate) struct Lanes {
    lanes: Vec<Lane>,
    /// Each lane's end, for the tests to wait on.
    #[cfg_attr(not(test), allow(dead_code))]
    stopped: Vec<oneshot::Receiver<()>>,
}

thread_local! {
    /// Which lane this thread is, for state kept per lane (the upstream's idle connections).
    static LANE: Cell<usize> = const { Cell::new(0) };
}

/// The lane the calling thread is (0 outside any lane).
pub(crate) fn current() -> usize {
    LANE.with(Cell::get)
}

/// Counts a connection on its lane while it is served.
struct Serving(Arc<AtomicUsize>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Lanes {
    /// Starts `n` lanes (at least one).
    pub(crate) fn start(n: usize) -> std::io::Result<Lanes> {
        let mut lanes = Vec::new();
        let mut stopped = Vec::new();
        for index in 0..n.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (jobs, mut rx) = mpsc::unbounded_channel::<(std::net::TcpStream, Serve)>();
            let (done, done_rx) = oneshot::channel();
            let load = Arc::new(AtomicUsize::new(0));
            let counted = load.clone();
            std::thread::Builder::new()
                .name(format!("lane-{index}"))
                .spawn(move || {
                    LANE.with(|l| l.set(index));
                    runtime.block_on(async move {
                        let mut serving = tokio::task::JoinSet::new();
                        loop {
                            tokio::select! {
                                job = rx.recv() => match job {
                                    Some((stream, serve)) => {
                                        let guard = Serving(counted.clone());
                                        match TcpStream::from_std(stream) {
                                            Ok(stream) => {
                                                let task = serve(stream);
                                                serving.spawn(async move {
                                                    task.await;
                                                    drop(guard);
                                                });
                                            }
                                            Err(e) => tracing::warn!("a connection could not join its lane: {e}"),
                                        }
                                    }
                                    None => break,
                                },
                                Some(_) = serving.join_next(), if !serving.is_empty() => {}
                            }
                        }
                        while serving.join_next().await.is_some() {}
                    });
                    let _ = done.send(());
                })?;
            lanes.push(Lane { jobs, load });
            stopped.push(done_rx);
        }
        Ok(Lanes { lanes, stopped })
    }

    /// Hands `stream` to the lane serving the fewest connections, to be served by `serve` there.
    /// A stream no lane can take any more (they are stopping) is closed.
    pub(crate) fn serve<F, Fut>(&self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some(lane) = self
            .lanes
            .iter()
            .min_by_key(|l| l.load.load(Ordering::Acquire))
        else {
            return;
        };
        // Deregistered from this runtime's poller, to be registered with the lane's.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("an accepted connection could not be handed to a lane: {e}");
                return;
            }
        };
        lane.load.fetch_add(1, Ordering::AcqRel);
        let serve: Serve = Box::new(move |s| Box::pin(serve(s)));
        if lane.jobs.send((stream, serve)).is_err() {
            lane.load.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Closes the lanes to new connections and waits until each has finished serving its own.
    #[cfg(test)]
    async fn stopped(self) {
        let Lanes { lanes, stopped } = self;
        drop(lanes);
        for s in stopped {
            let _ = s.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Mutex;

    /// Connections go to the lane serving the fewest, each is served on its lane's thread, and
    /// a lane's count goes back down when its connection ends.
    #[tokio::test]
    async fn connections_spread_over_the_lanes_and_stay_on_theirs() {
        let lanes = Lanes::start(2).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (release, hold) = tokio::sync::watch::channel(false);
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(tokio::net::TcpStream::connect(addr).await.unwrap());
            let (stream, _) = listener.accept().await.unwrap();
            let (seen, mut hold) = (seen.clone(), hold.clone());
            lanes.serve(stream, move |_stream| async move {
                let on = (current(), std::thread::current().id());
                let _ = hold.wait_for(|r| *r).await;
                // Still on the same thread after waiting.
                assert_eq!(on, (current(), std::thread::current().id()));
                seen.lock().unwrap().push(on);
            });
        }
        let loads: Vec<usize> = lanes
            .lanes
            .iter()
            .map(|l| l.load.load(Ordering::Acquire))
            .collect();
        assert_eq!(loads, vec![2, 2]);
        release.send(true).unwrap();
        for _ in 0..500 {
            if seen.lock().unwrap().len() == 4 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 4, "every connection was served");
        let lanes_used: HashSet<usize> = seen.iter().map(|s| s.0).collect();
        let threads: HashSet<_> = seen.iter().map(|s| s.1).collect();
        assert_eq!(lanes_used, HashSet::from([0, 1]));
        assert_eq!(threads.len(), 2);
        assert!(!threads.contains(&std::thread::current().id()));
        for _ in 0..500 {
            if lanes
                .lanes
                .iter()
                .all(|l| l.load.load(Ordering::Acquire) == 0)
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(lanes
            .lanes
            .iter()
            .all(|l| l.load.load(Ordering::Acquire) == 0));
        drop(clients);
        lanes.stopped().await;
    }

    /// Stopping waits for the connections still being served, then every lane's thread ends.
    #[tokio::test]
    async fn stopping_waits_for_the_connections_being_served() {
        let lanes = Lanes::start(2).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        let finished = Arc::new(AtomicUsize::new(0));
        let f = finished.clone();
        lanes.serve(stream, move |_s| async move {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            f.fetch_add(1, Ordering::AcqRel);
        });
        lanes.stopped().await;
        assert_eq!(finished.load(Ordering::Acquire), 1);
    }
}
