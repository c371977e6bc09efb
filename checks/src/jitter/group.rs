//! One attempt group judged: did the retries of operations that failed together spread because
//! the client drew a random wait, or only at the pace at which it handled its failures?
//!
//! Why not the spread of the delays alone: a delay measured at the server is the wait the client
//! chose plus the time it took to get to it. A fleet on one event loop handles 50 failures one
//! after another, so its retries come back over tens of milliseconds with no jitter at all — on
//! a 50 ms delay that is as wide as full jitter. And a spread in absolute milliseconds cannot
//! tell either: gRPC's own ±20 % jitter on a 100 ms backoff spreads over 40 ms, less than a busy
//! event loop's handling. What separates the two is the order. Handling keeps it: the first to
//! fail is the first handled and the first retried, so the delays, read in the order of the
//! failures, drift smoothly. A random wait shuffles it: consecutive failures get unrelated waits.
//!
//! So the group is read in the order of its failures, and the jitter is measured from the
//! differences between consecutive delays ([`Measure::local_width_ms`]): a smooth drift (the
//! queue of a busy client) cancels out, a random draw does not. It is judged relative to the
//! delay the client chose ([`Measure::chosen_ms`], the median delay of the first failures, which
//! waited least behind the others), as ± a fraction ([`Measure::jitter`]): ±20 % on 110 ms is
//! proportional jitter, weaker than equal jitter (±33 %), whatever the milliseconds.
//!
//! Three more readings keep the verdict honest where the magnitudes cannot decide:
//! - the rank correlation between failure order and arrival order: random waits shuffle the
//!   retries of failures that were spread out, even when something crushed their magnitudes;
//! - the slope of the arrivals against the failures (Theil–Sen): a client that waited the same
//!   after each failure sends its retries as far apart as its failures were (slope 1). A client
//!   held up — starved of CPU — and then sending everything that fell due meanwhile sends them at
//!   one instant whatever their failure times (slope near 0): the spread it drew is lost, so the
//!   group is undecided rather than called a herd. A client that falls behind its own failures
//!   (slope 2 and more) paces its retries itself, and a narrow jitter can hide in that pace;
//! - a width under the machine's timing noise (`noise_floor_ms`) is no evidence either way.
//!
//! The thresholds, and the rates at which they err on each kind of client, are in the checks
//! reference (docs/src/reference/checks.md, "jitter"), measured by the simulation in
//! `checks/tests/jitter_rates.rs`.

use super::JitterConfig;
use crate::stats::quantile;

/// One retry of an attempt group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// When the attempt before it ended at the server (µs): the failure it retries.
    pub failed_us: u64,
    /// The `seq` of that attempt: the server's order among failures that ended at the same
    /// microsecond (answers written in one write, as HTTP/2 streams' often are).
    pub failed_seq: u64,
    /// When it arrived at the server (µs).
    pub arrived_us: u64,
    /// Its journal `seq`.
    pub seq: u64,
}

impl Retry {
    /// The retry delay: arrival minus the failure's end (µs).
    pub fn delay_us(&self) -> u64 {
        self.arrived_us.saturating_sub(self.failed_us)
    }
}

/// What a group's delays show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Finding {
    /// Jitter at least `pass_jitter` wide.
    Jittered,
    /// Jitter, but narrower than `pass_jitter` (weak).
    Small(SmallWhy),
    /// The data cannot decide (left out of the verdict unless nothing else is judged).
    Undecided(UndecidedWhy),
    /// No jitter.
    NoJitter(NoJitterWhy),
    /// Short delays that do not grow from one attempt to the next: the pace of handling
    /// responses, not a backoff (decided across the groups of a cluster).
    NoBackoff,
    /// The client waited (almost) nothing.
    Immediate,
}

/// Why a jittered group is weak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SmallWhy {
    /// Random, but narrower than `pass_jitter`: proportional jitter such as gRPC's ±20 %.
    Narrow,
    /// The retries came back in an order the failures did not give them, so the waits were
    /// random, but their spread is under `min_jitter` of the delay.
    Shuffled,
}

/// Why a group cannot be decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum UndecidedWhy {
    /// Wide for the delay (at least `min_jitter`) but under the noise floor: a short delay's
    /// jitter and the machine's timing look the same.
    Noise,
    /// The retries arrived together whatever their failure times (slope < 0.5): the client was
    /// held up and sent what fell due meanwhile at once.
    Held,
    /// The client fell behind its failures (slope ≥ 2): its own pace spreads the retries, and a
    /// narrow jitter can hide in it.
    Paced,
    /// The delay is so short that the narrowest jitter the check must not fail (±2.5 ×
    /// `min_jitter`) would be narrower than the noise floor, and not much less was measured.
    Short,
}

/// Why a group has no jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NoJitterWhy {
    /// The delays are spread, but in the order of the failures: the pace of handling.
    Ordered,
    /// The delays are all about the same.
    Narrow,
}

/// The readings a group's finding rests on (times in ms).
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    /// Retries in the group.
    pub n: usize,
    /// Median delay.
    pub median_ms: f64,
    /// The delay the client chose: the median delay of the first failures (the earliest tenth,
    /// at least ten), which waited least behind the others; at most the median.
    pub chosen_ms: f64,
    /// The shortest delay.
    pub min_ms: f64,
    /// 10th percentile of the delays.
    pub p10_ms: f64,
    /// 90th percentile of the delays.
    pub p90_ms: f64,
    /// The delays' spread as the width of a uniform draw: (p90 − p10) / 0.8.
    pub global_width_ms: f64,
    /// The same width read from consecutive delays in failure order, which cancels a drift
    /// (a queue): (p90 − p10 of the differences) / 1.106, the width of the uniform draw whose
    /// differences spread as much.
    pub local_width_ms: f64,
    /// The jitter's width: the smaller of the two.
    pub width_ms: f64,
    /// The jitter as ± a fraction of the chosen delay: width / (2 × chosen).
    pub jitter: f64,
    /// The failures' spread (p90 − p10 of their times).
    pub failure_spread_ms: f64,
    /// The arrivals' spread (p90 − p10).
    pub arrival_spread_ms: f64,
    /// Spearman's rank correlation between failure order and arrival order.
    pub order_corr: f64,
    /// Theil–Sen slope of arrival against failure time; `None` when the failures are too close
    /// together to say.
    pub slope: Option<f64>,
}

/// What decided a group, with its readings.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The finding.
    pub finding: Finding,
    /// The readings.
    pub measure: Measure,
}

/// The first failures whose median delay is the chosen delay: a tenth, at least this many.
const FIRST: usize = 10;
/// Below this rank correlation, failure order did not give the arrival order.
pub(crate) const SHUFFLED: f64 = 0.5;
/// Below this slope, the arrivals did not follow the failures.
pub(crate) const HELD: f64 = 0.5;
/// From this slope, the client fell behind its failures.
pub(crate) const PACED: f64 = 2.0;
/// Pairs of failures closer than this (µs) say nothing about the slope.
const SLOPE_MIN_DX_US: u64 = 200;
/// The slope is read on at most this many retries (evenly spaced in failure order).
const SLOPE_POINTS: usize = 200;

/// Judges one attempt group (at least one retry; the caller enforces `min_samples`).
pub fn judge(retries: &[Retry], cfg: &JitterConfig) -> Option<Judgement> {
    let measure = measure(retries)?;
    let finding = decide(&measure, cfg);
    Some(Judgement { finding, measure })
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn spread(sorted: &[f64]) -> Option<f64> {
    Some(quantile(sorted, 0.9)? - quantile(sorted, 0.1)?)
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// The readings of a group.
pub fn measure(retries: &[Retry]) -> Option<Measure> {
    let n = retries.len();
    if n == 0 {
        return None;
    }
    let mut by_failure = retries.to_vec();
    by_failure.sort_by_key(|r| (r.failed_us, r.failed_seq));
    let delays: Vec<f64> = by_failure.iter().map(|r| ms(r.delay_us())).collect();
    let all = sorted(delays.clone());
    let median_ms = quantile(&all, 0.5)?;
    let first = sorted(delays.iter().take(FIRST.max(n / 10)).copied().collect());
    let chosen_ms = quantile(&first, 0.5)?.min(median_ms);
    let min_ms = quantile(&all, 0.0)?;
    let p10_ms = quantile(&all, 0.1)?;
    let p90_ms = quantile(&all, 0.9)?;
    let global_width_ms = (p90_ms - p10_ms) / 0.8;
    let diffs = sorted(delays.windows(2).map(|w| w[1] - w[0]).collect());
    let local_width_ms = spread(&diffs).map_or(0.0, |s| s / 1.106);
    // A drift with the failure order (a queue) is in the whole spread and not in the
    // differences; a client held up part of the way makes a step that the differences miss and
    // the whole spread does not: the narrower reading is the one nothing but jitter explains.
    let width_ms = global_width_ms.min(local_width_ms);
    let jitter = if chosen_ms > 0.0 {
        width_ms / (2.0 * chosen_ms)
    } else if width_ms > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let failures = sorted(by_failure.iter().map(|r| ms(r.failed_us)).collect());
    let arrivals = sorted(by_failure.iter().map(|r| ms(r.arrived_us)).collect());
    Some(Measure {
        n,
        median_ms,
        chosen_ms,
        min_ms,
        p10_ms,
        p90_ms,
        global_width_ms,
        local_width_ms,
        width_ms,
        jitter,
        failure_spread_ms: spread(&failures)?,
        arrival_spread_ms: spread(&arrivals)?,
        order_corr: order_correlation(&by_failure),
        slope: slope(&by_failure),
    })
}

/// The finding the readings support (before the cross-group backoff rule).
pub fn decide(m: &Measure, cfg: &JitterConfig) -> Finding {
    let floor = cfg.noise_floor_ms;
    if m.width_ms >= floor && m.jitter >= cfg.min_jitter {
        return if m.jitter >= cfg.pass_jitter {
            Finding::Jittered
        } else {
            Finding::Small(SmallWhy::Narrow)
        };
    }
    // Failures spread wider than the noise, retried in an order of their own: random waits,
    // whatever crushed their magnitudes.
    if m.failure_spread_ms >= floor && m.order_corr < SHUFFLED {
        return Finding::Small(SmallWhy::Shuffled);
    }
    // Wide for the delay but within the noise: a short delay's jitter and the machine's timing
    // look the same.
    if m.jitter >= cfg.min_jitter {
        return if reference_ms(m) < cfg.immediate_ms && m.width_ms < floor / 2.0 {
            Finding::Immediate
        } else {
            Finding::Undecided(UndecidedWhy::Noise)
        };
    }
    match m.slope {
        Some(s) if s < HELD && m.failure_spread_ms >= floor / 5.0 => {
            return Finding::Undecided(UndecidedWhy::Held)
        }
        // A client behind its failures: the delay it chose is buried under its queue, so the
        // width is read against the shortest delay, the least queued; any width above half the
        // noise may be a jitter it drew.
        Some(s)
            if s >= PACED
                && m.width_ms >= floor / 2.0
                && m.width_ms >= cfg.min_jitter * m.min_ms =>
        {
            return Finding::Undecided(UndecidedWhy::Paced)
        }
        _ => {}
    }
    if reference_ms(m) < cfg.immediate_ms {
        return Finding::Immediate;
    }
    // The narrowest jitter that must not be failed, 2.5 times `min_jitter` (±20 %), would be
    // narrower than the noise on a delay this short: unless far less was measured, nothing here
    // excludes it.
    let protected = protected_width_ms(reference_ms(m), cfg);
    if protected < floor && m.width_ms >= protected / 3.0 {
        return Finding::Undecided(UndecidedWhy::Short);
    }
    if m.global_width_ms / (2.0 * m.chosen_ms) >= cfg.min_jitter && m.global_width_ms >= floor {
        Finding::NoJitter(NoJitterWhy::Ordered)
    } else {
        Finding::NoJitter(NoJitterWhy::Narrow)
    }
}

/// The delay the protected jitter is read around: the chosen delay, or the shortest delay when
/// the client fell behind its failures (it queued even its first retries).
pub fn reference_ms(m: &Measure) -> f64 {
    match m.slope {
        Some(s) if s >= PACED => m.chosen_ms.min(m.min_ms),
        _ => m.chosen_ms,
    }
}

/// The width of the narrowest jitter the check must not fail (±2.5 × `min_jitter`, ±20 % by
/// default) around a chosen delay.
pub fn protected_width_ms(chosen_ms: f64, cfg: &JitterConfig) -> f64 {
    5.0 * cfg.min_jitter * chosen_ms
}

/// Spearman's rank correlation between the order of the failures (`by_failure`'s) and the
/// order of the arrivals; 1 when there are fewer than three.
fn order_correlation(by_failure: &[Retry]) -> f64 {
    let n = by_failure.len();
    if n < 3 {
        return 1.0;
    }
    let mut by_arrival: Vec<usize> = (0..n).collect();
    by_arrival.sort_by_key(|&i| (by_failure[i].arrived_us, by_failure[i].seq));
    // Both rankings are permutations of 0..n: rho = 1 − 6 Σd² / (n (n² − 1)).
    let d2: f64 = by_arrival
        .iter()
        .enumerate()
        .map(|(rank, &i)| {
            let d = rank as f64 - i as f64;
            d * d
        })
        .sum();
    let n = n as f64;
    1.0 - 6.0 * d2 / (n * (n * n - 1.0))
}

/// Theil–Sen slope of arrival against failure time, over pairs of failures at least
/// `SLOPE_MIN_DX_US` apart; `None` when fewer than ten pairs are.
fn slope(by_failure: &[Retry]) -> Option<f64> {
    let n = by_failure.len();
    let points: Vec<&Retry> = if n <= SLOPE_POINTS {
        by_failure.iter().collect()
    } else {
        (0..SLOPE_POINTS)
            .filter_map(|k| by_failure.get(k * (n - 1) / (SLOPE_POINTS - 1)))
            .collect()
    };
    let mut slopes = Vec::new();
    for (i, a) in points.iter().enumerate() {
        for b in points.iter().skip(i + 1) {
            let dx = b.failed_us.saturating_sub(a.failed_us);
            if dx >= SLOPE_MIN_DX_US {
                slopes.push((b.arrived_us as f64 - a.arrived_us as f64) / dx as f64);
            }
        }
    }
    if slopes.len() < 10 {
        return None;
    }
    quantile(&sorted(slopes), 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(pairs: &[(f64, f64)]) -> Vec<Retry> {
        pairs
            .iter()
            .enumerate()
            .map(|(i, &(failed, delay))| Retry {
                failed_us: (failed * 1000.0) as u64,
                failed_seq: i as u64,
                arrived_us: ((failed + delay) * 1000.0) as u64,
                seq: i as u64,
            })
            .collect()
    }

    #[test]
    fn a_drift_in_failure_order_is_not_jitter() {
        // 40 failures 0.1 ms apart, handled one per ms, each retried 100 ms after it was handled.
        let g = group(
            &(0..40)
                .map(|i| (i as f64 * 0.1, 100.0 + i as f64 * 0.9))
                .collect::<Vec<_>>(),
        );
        let m = measure(&g).expect("readings");
        assert!(m.global_width_ms > 30.0, "{m:?}");
        assert!(m.local_width_ms < 0.1, "{m:?}");
        assert!(m.order_corr > 0.99, "{m:?}");
        let f = decide(&m, &JitterConfig::default());
        assert_eq!(f, Finding::NoJitter(NoJitterWhy::Ordered), "{m:?}");
    }

    #[test]
    fn order_correlation_reads_reversal_and_identity() {
        let same = group(&(0..10).map(|i| (i as f64, 5.0)).collect::<Vec<_>>());
        assert!((order_correlation(&same) - 1.0).abs() < 1e-9);
        let reversed = group(
            &(0..10)
                .map(|i| (i as f64, 50.0 - 2.0 * i as f64))
                .collect::<Vec<_>>(),
        );
        assert!((order_correlation(&reversed) + 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_slope_tells_a_wait_from_a_release_at_one_instant() {
        let waited = group(&(0..30).map(|i| (i as f64, 100.0)).collect::<Vec<_>>());
        assert!((slope(&waited).expect("slope") - 1.0).abs() < 0.01);
        // Released together at t = 200 ms whatever the failure time.
        let held = group(
            &(0..30)
                .map(|i| (i as f64, 200.0 - i as f64))
                .collect::<Vec<_>>(),
        );
        assert!(slope(&held).expect("slope").abs() < 0.01);
        // Failures within 0.2 ms of each other say nothing about it.
        let close = group(
            &(0..30)
                .map(|i| (i as f64 * 0.005, 100.0))
                .collect::<Vec<_>>(),
        );
        assert_eq!(slope(&close), None);
    }
}
