//! Where a phase's workers run: a task each over HTTP/1.1; over HTTP/2, the workers sharing a
//! connection in one task that drives it, on as many threads of their own as the load needs;
//! and their measurements merged at the end.

use std::sync::Arc;

use super::phase::PhaseCtx;
use crate::http::http2::{H2Conn, Slot};
use crate::http::Conn;
use crate::metrics::Recorder;

/// Starts one worker per client, each `run(client, conn)` on a connection of its own: over
/// HTTP/1.1 a task each; over HTTP/2, the workers that share a connection (`--streams` of them)
/// in one task that also drives that connection (see [`crate::http::http2::drive`]).
pub(super) fn spawn_clients<F, Fut>(
    ctx: &PhaseCtx,
    clients: impl Iterator<Item = u32>,
    run: F,
) -> Vec<tokio::task::JoinHandle<Vec<Recorder>>>
where
    F: Fn(u32, Conn) -> Fut,
    Fut: std::future::Future<Output = Recorder> + Send + 'static,
{
    let Some(pool) = ctx.target.http2.as_ref() else {
        return clients
            .map(|c| {
                let worker = run(c, Conn::new(ctx.target.clone()));
                tokio::spawn(async move { vec![worker.await] })
            })
            .collect();
    };
    let clients: Vec<u32> = clients.collect();
    // As many driving tasks as there are driving threads (`driving_threads`), each with its
    // share of the connections and a thread of its own: a task per connection made the threads
    // hand connections to each other, park and wake between reads, and write after nearly every
    // read; driving tasks on the shared runtime still moved between its threads.
    let connections = clients.len().div_ceil(pool.streams()).max(1);
    let threads = driving_threads(
        tokio::runtime::Handle::current().metrics().num_workers(),
        ctx.target.addr.ip().is_loopback(),
    );
    let per_task = connections.div_ceil(threads.min(connections)) * pool.streams();
    clients
        .chunks(per_task)
        .map(|share| {
            let workers: Vec<Fut> = share
                .chunks(pool.streams())
                .flat_map(|group| {
                    let slot = Arc::new(Slot::new(ctx.target.clone()));
                    group
                        .iter()
                        .map(|&c| run(c, Conn::H2(H2Conn::on(slot.clone()))))
                        .collect::<Vec<_>>()
                })
                .collect();
            on_a_thread_of_its_own(crate::http::http2::drive(workers))
        })
        .collect()
}

/// The threads set with `--threads`, when they were (see [`set_threads`]).
static THREADS_SET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Notes that the process's threads were set (`--threads N`): HTTP/2 loads then drive their
/// connections on that many threads, wherever the target is.
pub fn set_threads(n: usize) {
    let _ = THREADS_SET.set(n.max(1));
}

/// How many threads an HTTP/2 load's connections are driven on: as many as were set with
/// `--threads`; otherwise as many as the runtime has (one per core), but only half of them
/// (rounded up) against a server on this machine (a loopback address), which needs the other
/// cores. A driving thread keeps its connections and sleeps when none has work, so a thread more
/// than the load needs only splits the same work into smaller batches and sleeps and wakes more
/// often; on two cores shared with the server, one thread drove gRPC calls with 0.6–0.8 µs less
/// CPU per call than two, for the same throughput or more (BENCHMARKS.md).
fn driving_threads(runtime: usize, local_target: bool) -> usize {
    match THREADS_SET.get() {
        Some(&n) => n,
        None if local_target => runtime.div_ceil(2),
        None => runtime,
    }
    .max(1)
}

/// Runs `task` on a thread of its own, in a single-threaded runtime: a driving task and its
/// connections then never move between threads (a multi-threaded runtime hands a woken task to
/// whichever thread polled the socket, and wakes a parked thread to steal it).
pub(super) fn on_a_thread_of_its_own<T: Send + 'static>(
    task: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => tokio::task::spawn_blocking(move || rt.block_on(task)),
        Err(_) => tokio::spawn(task),
    }
}

/// The phase's measurements: every worker's, merged; a worker that died is counted as such.
pub(super) async fn collect(
    tasks: Vec<tokio::task::JoinHandle<Vec<Recorder>>>,
    keep: bool,
) -> Recorder {
    let mut total = Recorder::new(keep);
    for t in tasks {
        match t.await {
            Ok(rs) => rs.iter().for_each(|r| total.merge(r)),
            Err(e) => total.worker_died("a worker", e),
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker that panics loses what it measured: the phase's recorder says so with the
    /// panic's message, and the run turns that into an error (exit 3), never a pass.
    #[tokio::test]
    async fn a_worker_that_panics_is_an_error_of_the_run() {
        let ok = tokio::spawn(async {
            let mut r = Recorder::new(false);
            r.sent = 3;
            vec![r]
        });
        let dead: tokio::task::JoinHandle<Vec<Recorder>> =
            tokio::spawn(async { panic!("header map full") });
        let rec = collect(vec![ok, dead], false).await;
        assert_eq!(rec.sent, 3);
        assert_eq!(rec.worker_failures_total, 1);
        assert!(
            rec.worker_failures[0].contains("header map full"),
            "{:?}",
            rec.worker_failures
        );
        let e = crate::reach::RunError::worker_died("p", &rec).expect("an error of the run");
        assert!(e.to_string().contains("header map full"), "{e}");
        assert!(crate::reach::RunError::worker_died("p", &Recorder::new(false)).is_none());
    }

    #[test]
    fn a_local_target_leaves_half_the_cores_to_its_server() {
        // Nothing in the library sets the threads (the command line does, for `--threads`).
        assert!(THREADS_SET.get().is_none());
        assert_eq!(driving_threads(2, true), 1);
        assert_eq!(driving_threads(3, true), 2);
        assert_eq!(driving_threads(8, true), 4);
        assert_eq!(driving_threads(1, true), 1);
        assert_eq!(driving_threads(2, false), 2);
        assert_eq!(driving_threads(8, false), 8);
    }
}
