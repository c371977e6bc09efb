//! `rate`: the open model. Operation i is *intended* to start at a fixed time whatever happened
//! before; a worker that picks it up late counts a late start, and latency is measured from the
//! intended time too (coordinated omission corrected) as well as from the actual send.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::client::{run_op, PhaseClient};
use super::phase::{PhaseRun, LATE_THRESHOLD};
use super::workers::{collect, spawn_clients};
use crate::metrics::Recorder;
use crate::shard::Shard;

/// How many requests the stages schedule at or before `t` from the phase's start.
pub fn scheduled_by(stages: &[(f64, f64, Duration)], t: Duration) -> u64 {
    // `intended_offset` grows with `i`: the first `i` past `t` (or past the end) is the count.
    let (mut lo, mut hi) = (0u64, 1u64);
    while intended_offset(stages, hi - 1).is_some_and(|o| o <= t) {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    // Every i < lo is scheduled by t; the answer lies in [lo, hi).
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if intended_offset(stages, mid).is_some_and(|o| o <= t) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The intended start of operation `i` (0-based) from the stages, or `None` past the end.
pub fn intended_offset(stages: &[(f64, f64, Duration)], i: u64) -> Option<Duration> {
    let mut before = 0.0; // operations scheduled in earlier stages
    let mut t0 = 0.0;
    let n = i as f64;
    for (a, b, d) in stages {
        let d = d.as_secs_f64();
        let in_stage = (a + b) / 2.0 * d;
        if n < before + in_stage {
            let k = n - before;
            // Rate grows linearly from a to b: N(t) = a·t + (b−a)·t²/(2d). Solve N(t) = k.
            let slope = (b - a) / d;
            let t = if slope.abs() < 1e-12 {
                k / a
            } else {
                let disc = (a * a + 2.0 * slope * k).max(0.0);
                (-a + disc.sqrt()) / slope
            };
            return Some(Duration::from_secs_f64(t0 + t.clamp(0.0, d)));
        }
        before += in_stage;
        t0 += d;
    }
    None
}

/// A rate phase: the stages' operations started at their intended times on `connections`
/// connections.
pub(super) async fn rate(
    run: PhaseRun<'_>,
    stages: Vec<(f64, f64, Duration)>,
    connections: u32,
) -> Recorder {
    let PhaseRun {
        plan,
        ctx,
        shared,
        sink,
    } = run;
    let stages = Arc::new(stages);
    let next = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(0));
    let end = start + stages.iter().map(|s| s.2).sum::<Duration>();
    let shard = ctx.shard;
    let connections = shard.share(u64::from(connections)) as u32;
    let pacer = {
        let (stages, permits, stop) = (stages.clone(), permits.clone(), ctx.stop.clone());
        let start = start.into_std();
        tokio::task::spawn_blocking(move || {
            pace(&stages, shard, start, &permits, &stop, connections)
        })
    };
    let clients = (0..connections).map(|l| shard.global(u64::from(l)) as u32);
    let tasks = spawn_clients(ctx, clients, |client, conn| {
        let (plan, ctx, shared, stages, next, sink, permits) = (
            plan.clone(),
            ctx.clone(),
            shared.clone(),
            stages.clone(),
            next.clone(),
            sink.clone(),
            permits.clone(),
        );
        async move {
            let mut w = PhaseClient::on(&plan, &ctx, &sink, client, conn);
            loop {
                if ctx.stop.is_cancelled() {
                    break;
                }
                // A permit is a request whose time has come (see `pace`).
                match permits.acquire().await {
                    Ok(p) => p.forget(),
                    Err(_) => break,
                }
                if ctx.stop.is_cancelled() {
                    break;
                }
                // This shard's requests are every `count`th of the phase's schedule.
                let i = ctx.shard.global(next.fetch_add(1, Ordering::Relaxed));
                let Some(offset) = intended_offset(&stages, i) else {
                    break;
                };
                // Past the phase's end nothing starts: a request still due then was never sent
                // (the backlog the target could not take at this rate).
                if tokio::time::Instant::now() >= end || ctx.stop.is_cancelled() {
                    w.rec.not_started += 1;
                    break;
                }
                let intended = start + offset;
                // Late means no connection was free when the request was due — not the pacer's
                // own lateness of some microseconds, which every request has.
                if tokio::time::Instant::now().saturating_duration_since(intended) > LATE_THRESHOLD
                {
                    w.rec.late_starts += 1;
                }
                run_op!(w, &plan, &ctx, &shared, i + 1, None);
                w.rec.intended(intended.elapsed());
            }
            w.rec
        }
    });
    let mut rec = collect(tasks, ctx.keep_attempts).await;
    if let Err(e) = pacer.await {
        rec.worker_died("the rate pacer", e);
    }
    // Requests whose time had come and that no worker took.
    let due = shard.mine_below(scheduled_by(&stages, start.elapsed()));
    rec.not_started += due.saturating_sub(next.load(Ordering::Relaxed).min(due));
    rec
}

/// Releases a rate phase's requests at their intended times: one permit per request, added to
/// `permits` when its time comes; at the end (or on `stop`) one more per worker, which then finds
/// no request left and ends.
///
/// Why a thread of its own rather than a `tokio::time::sleep_until` in each worker: tokio's timer
/// has a resolution of 1 ms and rounds a deadline up to the next tick, so requests started on
/// average about 1 ms after their intended time — a lag of the generator's own that the
/// CO-corrected latency then reported. A thread sleeping on the OS's high-resolution timer
/// releases each request within tens of microseconds of its time (late ones in a batch when it
/// wakes late).
fn pace(
    stages: &[(f64, f64, Duration)],
    shard: Shard,
    start: std::time::Instant,
    permits: &Arc<tokio::sync::Semaphore>,
    stop: &CancellationToken,
    workers: u32,
) {
    // At most this long between looks at `stop` and at whether the workers are still there.
    const LOOK: Duration = Duration::from_millis(10);
    let mut released = 0u64;
    // The workers hold the other references; when they are all gone there is nobody to pace.
    while !stop.is_cancelled() && Arc::strong_count(permits) > 1 {
        let now = std::time::Instant::now();
        let mut due = 0usize;
        let next_at = loop {
            match intended_offset(stages, shard.global(released)) {
                Some(offset) if start + offset <= now => {
                    released += 1;
                    due += 1;
                }
                other => break other.map(|offset| start + offset),
            }
        };
        if due > 0 {
            permits.add_permits(due);
        }
        let Some(at) = next_at else { break };
        std::thread::sleep(at.saturating_duration_since(now).min(LOOK));
    }
    permits.add_permits(workers as usize);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_and_ramped_schedules() {
        let flat = [(100.0, 100.0, Duration::from_secs(2))];
        assert_eq!(intended_offset(&flat, 0), Some(Duration::ZERO));
        assert_eq!(intended_offset(&flat, 50), Some(Duration::from_millis(500)));
        assert_eq!(intended_offset(&flat, 200), None);
        // Ramp 0 → 100 rps over 2 s: 100 operations, the first half in the last 1.41 s.
        let ramp = [(0.0, 100.0, Duration::from_secs(2))];
        let t50 = intended_offset(&ramp, 50).unwrap().as_secs_f64();
        assert!((t50 - 2f64.sqrt()).abs() < 1e-6, "{t50}");
        assert_eq!(intended_offset(&ramp, 100), None);
        let two = [
            (10.0, 10.0, Duration::from_secs(1)),
            (10.0, 10.0, Duration::from_secs(1)),
        ];
        assert_eq!(intended_offset(&two, 15), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn scheduled_by_counts_the_requests_due_by_a_time() {
        let flat = [(100.0, 100.0, Duration::from_secs(2))];
        assert_eq!(scheduled_by(&flat, Duration::ZERO), 1);
        assert_eq!(scheduled_by(&flat, Duration::from_millis(995)), 100);
        assert_eq!(scheduled_by(&flat, Duration::from_secs(1)), 101);
        assert_eq!(scheduled_by(&flat, Duration::from_secs(60)), 200);
        let ramp = [(0.0, 100.0, Duration::from_secs(2))];
        assert_eq!(scheduled_by(&ramp, Duration::from_secs(60)), 100);
        let million = [(1e6, 1e6, Duration::from_secs(1))];
        assert_eq!(scheduled_by(&million, Duration::from_secs(2)), 1_000_000);
        for t in [0u64, 1, 17, 500, 999] {
            let n = scheduled_by(&million, Duration::from_millis(t));
            assert!(intended_offset(&million, n - 1).unwrap() <= Duration::from_millis(t));
            assert!(intended_offset(&million, n).unwrap() > Duration::from_millis(t));
        }
    }

    /// Runs `pace` on a thread of its own; the returned `Arc` stands for the workers.
    fn pacer(
        stages: Vec<(f64, f64, Duration)>,
        stop: CancellationToken,
    ) -> (Arc<tokio::sync::Semaphore>, std::thread::JoinHandle<()>) {
        let permits = Arc::new(tokio::sync::Semaphore::new(0));
        let (p, start) = (permits.clone(), std::time::Instant::now());
        let h = std::thread::spawn(move || pace(&stages, Shard::WHOLE, start, &p, &stop, 3));
        (permits, h)
    }

    #[test]
    fn the_pacer_releases_every_request_at_its_time_then_one_per_worker() {
        let start = std::time::Instant::now();
        let (permits, h) = pacer(
            vec![(500.0, 500.0, Duration::from_millis(100))],
            CancellationToken::new(),
        );
        h.join().expect("pacer thread");
        // 50 requests, the last due at 98 ms: none is released before its time.
        assert!(start.elapsed() >= Duration::from_millis(98));
        assert_eq!(permits.available_permits(), 50 + 3);
    }

    #[test]
    fn the_pacer_ends_on_stop_and_when_the_workers_are_gone() {
        let stop = CancellationToken::new();
        let hour = vec![(10.0, 10.0, Duration::from_secs(3600))];
        let started = std::time::Instant::now();
        let (permits, h) = pacer(hour.clone(), stop.clone());
        // Until the requests at 0 and 100 ms are out, however late the pacer thread runs.
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while permits.available_permits() < 2 {
            assert!(
                std::time::Instant::now() < give_up,
                "the pacer released nothing"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.cancel();
        h.join().expect("pacer thread");
        // The requests due by then (more if this thread overslept), then one permit per worker
        // to let them end.
        let due = started.elapsed().as_millis() as usize / 100 + 1;
        let released = permits.available_permits() - 3;
        assert!((2..=due).contains(&released), "{released} of {due}");

        let (permits, h) = pacer(hour, CancellationToken::new());
        drop(permits);
        h.join()
            .expect("the pacer notices that nobody waits for it");
    }
}
