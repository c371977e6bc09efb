//! `fleet`: N clients that start together, each running operations under its retry policy —
//! the thundering herd.

use std::sync::Arc;

use tokio::sync::Barrier;

use super::client::{run_op, PhaseClient};
use super::phase::PhaseRun;
use super::workers::{collect, spawn_clients};
use crate::metrics::Recorder;

/// A fleet phase: `clients` clients that start together, each running `operations`
/// operations under its retry policy.
pub(super) async fn fleet(run: PhaseRun<'_>, clients: u32, operations: u64) -> Recorder {
    let PhaseRun {
        plan,
        ctx,
        shared,
        sink,
    } = run;
    let shard = ctx.shard;
    let mine = shard.share(u64::from(clients));
    let barrier = Arc::new(Barrier::new(mine as usize));
    let clients = (0..mine).map(|l| shard.global(l) as u32);
    let tasks = spawn_clients(ctx, clients, |client, conn| {
        let (plan, ctx, shared, barrier, sink) = (
            plan.clone(),
            ctx.clone(),
            shared.clone(),
            barrier.clone(),
            sink.clone(),
        );
        async move {
            let mut w = PhaseClient::on(&plan, &ctx, &sink, client, conn);
            if let Err(e) = w.conn.open().await {
                tracing::warn!("fleet client {client} could not connect: {e}");
            }
            tokio::select! {
                () = ctx.stop.cancelled() => return w.rec,
                _ = barrier.wait() => {}
            }
            for k in 0..operations {
                if ctx.stop.is_cancelled() {
                    break;
                }
                let op = u64::from(client) * operations + k + 1;
                run_op!(w, &plan, &ctx, &shared, op, None);
            }
            w.rec
        }
    });
    collect(tasks, ctx.keep_attempts).await
}
