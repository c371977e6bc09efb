//! `clients`: the closed model — C workers, each sending its next request when the last one
//! ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{run_op, PhaseClient};
use super::phase::PhaseRun;
use super::workers::{collect, spawn_clients};
use crate::metrics::Recorder;

/// A clients phase: `concurrency` workers, each sending its next operation when the last
/// ended (and `think` has passed), until `duration` or `requests`.
pub(super) async fn closed(
    run: PhaseRun<'_>,
    concurrency: u32,
    duration: Option<Duration>,
    requests: Option<u64>,
    think: Duration,
) -> Recorder {
    let PhaseRun {
        plan,
        ctx,
        shared,
        sink,
    } = run;
    let end = duration.map(|d| Instant::now() + d);
    let next = Arc::new(AtomicU64::new(0));
    let shard = ctx.shard;
    let requests = requests.map(|r| shard.share(r));
    let clients = (0..shard.share(u64::from(concurrency))).map(|l| shard.global(l) as u32);
    let tasks = spawn_clients(ctx, clients, |client, conn| {
        let (plan, ctx, shared, next, sink) = (
            plan.clone(),
            ctx.clone(),
            shared.clone(),
            next.clone(),
            sink.clone(),
        );
        async move {
            let mut w = PhaseClient::on(&plan, &ctx, &sink, client, conn);
            loop {
                if sink.stop.is_fired() || end.is_some_and(|e| Instant::now() >= e) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if requests.is_some_and(|r| i >= r) {
                    break;
                }
                run_op!(w, &plan, &ctx, &shared, ctx.shard.global(i) + 1, None);
                if !think.is_zero() {
                    tokio::select! {
                        () = ctx.stop.cancelled() => {}
                        () = tokio::time::sleep(think) => {}
                    }
                }
            }
            w.rec
        }
    });
    collect(tasks, ctx.keep_attempts).await
}
