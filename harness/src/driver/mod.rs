//! The load driver: the five executors a phase can use, one file each, over what they share.
//!
//! - `burst.rs`: N operations released together on connections opened beforehand, R rounds, one
//!   shared Idempotency-Key per round — real concurrency on one key.
//! - `rate.rs`: the open model. Operation i is *intended* to start at a fixed time whatever
//!   happened before; latency is measured from the intended time too (coordinated omission
//!   corrected) as well as from the actual send.
//! - `closed.rs`: the closed model — C workers, each sending its next request when the last one
//!   ends.
//! - `fleet.rs`: N clients that start together, each running operations under its retry policy:
//!   the thundering herd.
//! - `deliver.rs`: the harness as a webhook provider, delivering signed events to a consumer.
//!
//! Below them: `phase.rs` what a phase runs with and produces (keys, [`PhaseCtx`], the
//! executor's [`PhaseRun`](phase), [`PhaseOutcome`]), `client.rs` one client sending one
//! operation under the phase's retry policy, `workers.rs` where the workers run and how their
//! measurements are merged. No executor names another; this file picks one per phase.
//!
//! Every worker owns its connection, its RNG and its [`Recorder`]; they are merged at the end.

mod burst;
mod client;
mod closed;
mod deliver;
mod fleet;
mod phase;
mod rate;
mod workers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use retry_policy::Limits;

use crate::metrics::Sink;
use crate::plan::{PhaseKind, PhasePlan};
use crate::shard::Shard;

pub use phase::{
    uuid_from_hex, Delivered, Keys, PhaseCtx, PhaseOnce, PhaseOutcome, LATE_THRESHOLD, VERIFY_MAX,
};
pub use rate::{intended_offset, scheduled_by};
pub use workers::set_threads;

use phase::PhaseRun;

/// Total operations a phase will run, when known in advance (for the progress bar).
pub fn expected_operations(p: &PhasePlan) -> Option<u64> {
    expected_operations_of(p, Shard::WHOLE)
}

/// Operations a shard of a phase will run, when known in advance.
pub fn expected_operations_of(p: &PhasePlan, shard: Shard) -> Option<u64> {
    match &p.kind {
        PhaseKind::Burst { size, rounds, .. } => {
            Some(shard.share(u64::from(*size)) * u64::from(*rounds))
        }
        PhaseKind::Rate { stages, .. } => Some(
            shard.share(
                stages
                    .iter()
                    .map(|(a, b, d)| ((a + b) / 2.0 * d.as_secs_f64()) as u64)
                    .sum(),
            ),
        ),
        PhaseKind::Clients { requests, .. } => requests.map(|r| shard.share(r)),
        PhaseKind::Fleet {
            clients,
            operations,
        } => Some(shard.share(u64::from(*clients)) * operations),
        PhaseKind::Deliver(d) => Some(shard.share(d.spec.events.count)),
    }
}

/// Runs one phase to its end (duration, request count, or rounds), or until `stop` is cancelled.
pub async fn run_phase(plan: Arc<PhasePlan>, ctx: PhaseCtx) -> PhaseOutcome {
    let started = Instant::now();
    let mut limits = Limits::new(&plan.policy, Instant::now());
    limits.grpc_throttle = plan
        .grpc
        .as_ref()
        .and_then(|g| g.throttle)
        .map(retry_policy::grpc::Throttle::new);
    let shared = Arc::new(limits);
    let captures = Arc::new(std::sync::Mutex::new(HashMap::new()));
    let stop = ctx.stop.child_token();
    let timer = match (ctx.hard_stop, plan.kind.length()) {
        (true, Some(d)) => {
            let stop = stop.clone();
            Some(tokio::spawn(async move {
                tokio::time::sleep(d).await;
                stop.cancel();
            }))
        }
        _ => None,
    };
    let once = Some(Arc::new(PhaseOnce::build(&plan, &ctx.target)));
    let ctx = PhaseCtx {
        capture_sink: Some(captures.clone()),
        stop,
        once,
        ..ctx
    };
    let sink = Sink::new();
    if let Some(board) = &ctx.live {
        board.phase_started(
            &plan.name,
            plan.kind.name(),
            &sink,
            &ctx.done,
            ctx.run_start,
        );
    }
    // The workers' stop signal follows the phase's token.
    let watcher = {
        let (stop, signal) = (ctx.stop.clone(), sink.stop.clone());
        tokio::spawn(async move {
            stop.cancelled().await;
            signal.fire();
        })
    };
    let mut delivered = None;
    let run = PhaseRun {
        plan: &plan,
        ctx: &ctx,
        shared: &shared,
        sink: &sink,
    };
    let (recorder, round_keys) = match plan.kind.clone() {
        PhaseKind::Burst {
            size,
            rounds,
            pause,
            every,
            sync,
        } => {
            let timing = match every {
                Some(every) => burst::Rounds::Every {
                    first: ctx.scheduled.unwrap_or(started),
                    every,
                },
                None => burst::Rounds::Pause(pause),
            };
            burst::burst(run, size, rounds, timing, sync).await
        }
        PhaseKind::Rate {
            stages,
            connections,
        } => (rate::rate(run, stages, connections).await, Vec::new()),
        PhaseKind::Clients {
            concurrency,
            duration,
            requests,
            think,
        } => (
            closed::closed(run, concurrency, duration, requests, think).await,
            Vec::new(),
        ),
        PhaseKind::Fleet {
            clients,
            operations,
        } => (fleet::fleet(run, clients, operations).await, Vec::new()),
        PhaseKind::Deliver(d) => {
            let (rec, out) = deliver::deliver(run, &d).await;
            delivered = Some(out);
            (rec, Vec::new())
        }
    };
    if let Some(t) = timer {
        t.abort();
    }
    watcher.abort();
    if let Some(board) = &ctx.live {
        board.phase_ended(&recorder);
    }
    let captured = std::mem::take(&mut *captures.lock().unwrap_or_else(|e| e.into_inner()));
    PhaseOutcome {
        recorder,
        started,
        duration: started.elapsed(),
        round_keys,
        captured,
        delivered,
    }
}
