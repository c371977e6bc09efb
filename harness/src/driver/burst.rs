//! `burst`: N operations released together on connections opened beforehand, R rounds, one
//! shared Idempotency-Key per round — real concurrency on one key. The round's requests leave
//! at one release point (`release`, `last-byte`) or in one HTTP/2 write (`single-packet`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::client::{run_op, PhaseClient, Release};
use super::phase::{PhaseRun, LATE_THRESHOLD};
use crate::http::http2::{Burst, H2Conn, SinglePacketRound};
use crate::http::release::Release as ReleasePoint;
use crate::http::Conn;
use crate::metrics::Recorder;
use crate::plan::SyncMode;

/// When a burst's rounds go.
#[derive(Debug, Clone, Copy)]
pub(super) enum Rounds {
    /// Each round when the last has ended and this pause has passed.
    Pause(Duration),
    /// Round `k` (from 1) at `first + (k - 1) × every`, on every shard alike; a round whose time
    /// has passed (the last one ran long) goes at once and is counted late.
    Every { first: Instant, every: Duration },
}

/// A burst phase: `rounds` rounds of `size` operations released together, timed by `timing`,
/// released as `sync` says; returns the measurements and each round's shared key.
pub(super) async fn burst(
    run: PhaseRun<'_>,
    size: u32,
    rounds: u32,
    timing: Rounds,
    sync: SyncMode,
) -> (Recorder, Vec<String>) {
    let PhaseRun {
        plan,
        ctx,
        shared,
        sink,
    } = run;
    let mut total = Recorder::new(ctx.keep_attempts);
    let mut keys = Vec::new();
    // This shard's members of every round; member `i` is the round's member `shard.global(i)`.
    let members = ctx.shard.share(u64::from(size)) as u32;
    if members == 0 {
        return (total, keys);
    }
    // Over HTTP/2 a burst has connections of its own, as many as a round needs at the server's
    // stream limit (and `streams` per connection at most, but for single-packet rounds).
    let h2 = ctx.target.http2.as_ref().map(|pool| {
        let most = if sync == SyncMode::SinglePacket {
            crate::http::http2::OWN_STREAM_CAP
        } else {
            pool.streams()
        };
        (Arc::new(Burst::new(ctx.target.clone())), most)
    });
    let member_conn = |i: usize| match &h2 {
        Some((b, _)) => Conn::H2(H2Conn::on(b.slot(i))),
        None => Conn::new(ctx.target.clone()),
    };
    let mut conns: Vec<Conn> = Vec::new();
    let joint_slot = h2
        .as_ref()
        .filter(|_| sync == SyncMode::SinglePacket)
        .map(|(b, _)| b.clone());
    for round in 1..=u64::from(rounds) {
        if ctx.stop.is_cancelled() {
            break;
        }
        let key = ctx.keys.key(ctx.index, round);
        keys.push(key.clone());
        // Connections first, so the release is not spread by TCP handshakes.
        if let Some((b, most)) = &h2 {
            if let Err(e) = b.open(members as usize, *most, plan.policy.timeout).await {
                tracing::error!("burst connections: {e}");
            }
        }
        if conns.is_empty() {
            conns = (0..members as usize).map(member_conn).collect();
        }
        match &joint_slot {
            Some(_) => {}
            None => {
                for c in &mut conns {
                    if let Err(e) = c.open().await {
                        tracing::warn!("burst connection failed: {e}");
                    }
                }
            }
        }
        // A timed round waits for its instant on a thread sleeping on the OS's fine timer
        // (tokio's ticks are 1 ms), and its members start only then: the wait is no part of any
        // request's latency or timeout.
        let at = match timing {
            Rounds::Every { first, every } => {
                Some(first + every.saturating_mul(u32::try_from(round - 1).unwrap_or(u32::MAX)))
            }
            Rounds::Pause(_) => None,
        };
        if at.is_some_and(|at| Instant::now() > at + LATE_THRESHOLD) {
            total.late_starts += 1;
        }
        if let Some(at) = at.filter(|&at| at > Instant::now()) {
            let stop = ctx.stop.clone();
            let _ = tokio::task::spawn_blocking(move || sleep_until_precisely(at, &stop)).await;
            if ctx.stop.is_cancelled() {
                break;
            }
        }
        let barrier = Arc::new(ReleasePoint::new(members as usize));
        // Single-packet: the round is one write, made when its last member submits.
        let joint = joint_slot
            .as_ref()
            .map(|slot| Arc::new(SinglePacketRound::new(slot.clone(), members as usize)));
        let mut tasks = Vec::new();
        for (i, conn) in conns.drain(..).enumerate() {
            let (plan, ctx, shared, barrier, key, sink, joint) = (
                plan.clone(),
                ctx.clone(),
                shared.clone(),
                barrier.clone(),
                key.clone(),
                sink.clone(),
                joint.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let member = ctx.shard.global(i as u64);
                let client = member as u32;
                let rng = ctx.keys.rng(ctx.index, client ^ ((round as u32) << 16));
                let mut w = PhaseClient::new(&plan, &ctx, &sink, client, conn, rng);
                let op = (round - 1) * u64::from(size) + member + 1;
                let release = match &joint {
                    Some(j) => Release::SinglePacket(j),
                    None => Release::Barrier {
                        barrier: &barrier,
                        last_byte: sync == SyncMode::LastByte,
                    },
                };
                run_op!(w, &plan, &ctx, &shared, op, Some((round, &key, release)));
                (w.conn, w.rec)
            }));
        }
        for t in tasks {
            match t.await {
                Ok((conn, rec)) => {
                    total.merge(&rec);
                    conns.push(conn);
                }
                Err(e) => total.worker_died("a burst worker", e),
            }
        }
        while conns.len() < members as usize {
            conns.push(member_conn(conns.len()));
        }
        if let Rounds::Pause(pause) = timing {
            if round < u64::from(rounds) && !pause.is_zero() {
                tokio::select! {
                    () = ctx.stop.cancelled() => {}
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
    (total, keys)
}

/// Sleeps on this thread until `at` (the OS timer: within tens of microseconds), or until `stop`.
fn sleep_until_precisely(at: Instant, stop: &CancellationToken) {
    const LOOK: Duration = Duration::from_millis(10);
    loop {
        let now = Instant::now();
        if now >= at || stop.is_cancelled() {
            return;
        }
        std::thread::sleep((at - now).min(LOOK));
    }
}
