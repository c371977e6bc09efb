//! `jitter`: do clients that failed together retry together?
//!
//! Why missing jitter is dangerous: exponential backoff spaces one client's retries (1, 2, 4, 8,
//! 16 s) but keeps every client on the same clock. When an incident fails 500 clients at once,
//! all 500 retry at t = 1, 3, 7, 15 and 31 s: every retry wave is as tall as the first failure and
//! hits a service that is trying to recover (seed exercise 1: 500 requests in one 250 ms window
//! without jitter, 193 with full jitter). The regular sawtooth after an incident is its signature.
//!
//! How it is detected:
//! 1. Operations whose first failures arrive within `together_ms` of the cluster's first failure
//!    form a cluster: they failed together, so without jitter they retry together. A steady
//!    trickle of failures makes only small clusters, which `min_samples` leaves unjudged: fixed
//!    delays after failures that were spread out anyway do not make a herd.
//! 2. Per cluster and attempt number, the retry delays (arrival of attempt k+1 minus end of attempt
//!    k, measured at the server) are summarised robustly: median, MAD, interquartile range.
//!    The dispersion is MAD / median: ≈ 0.5 for full jitter U(0, d), ≈ 0.17 for equal jitter
//!    d/2 + U(0, d/2), ≈ 0.25 for decorrelated jitter, and below 0.01 with no jitter — loopback
//!    scheduling noise is only 0.1–2 ms on a 1 s delay. A group also counts as jittered when its
//!    IQR / median reaches twice the threshold: capped decorrelated jitter puts most delays exactly
//!    at the cap (MAD 0) while a good quarter stay spread below it.
//! 3. Per group: a median delay under `immediate_ms` is its own finding (immediate retries with no
//!    backoff: fail). What jitter is for is spreading, in absolute time, retries that a failure
//!    synchronized; so retries that came back within a window of their failures (median under
//!    `window_ms`) over a spread (10th to 90th percentile of the delays) narrower than
//!    `min_spread_ms` are no jitter whatever their dispersion: that is the pace at which a client
//!    handles responses — a fleet on one event loop handles 50 failures one after another over
//!    tens of milliseconds, which makes a large dispersion of a small median. A longer wait
//!    that still brings `max_wave_fraction` of them back within one window of their failures is
//!    one wave: weak if dispersed, no jitter if not. Beyond that,
//!    dispersion ≥ `min_dispersion` passes; a spread under the threshold but above the noise floor
//!    (`noise_floor_ms` of MAD, e.g. 0–100 ms added to a 1 s backoff) is weak; less is no jitter
//!    (fail). The worst group decides, and every finding names the criterion that decided it.
//! 4. The effect is reported too: the fraction of a wave's retries in its densest `window_ms`
//!    window, and the peak-to-mean ratio of the cluster's retries binned by `window_ms`.
//!
//! A group needs `min_samples` retries, else the answer is Inconclusive ("not enough data"), never
//! a guess. Under a strong `--time-scale`, lower `noise_floor_ms`, `min_spread_ms` and `immediate_ms`
//! with it: they are real time, the client's handling, not the scenario's.
//!
//! Memory: the retries of a cluster are kept until no member operation has been active for the
//! horizon; then the cluster is judged and only its verdicts remain.
//!
//! Metrics: `groups` (the worst `max_evidence` of the judged cluster/attempt groups, worst
//! first), `groups_analyzed`, `groups_cut_off`, `retries_analyzed`, `lowest_dispersion`,
//! `highest_densest_window_fraction`, `highest_peak_to_mean`.

use history::Facts;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::json;
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{non_negative, scale_ms, About, CheckSpec, Invalid};
use super::stats::{densest_window, mad, median, peak_to_mean, quantile};
use super::{Attempt, Check, Context};

/// Configuration of the `jitter` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct JitterConfig {
    /// Lowest MAD / median of retry delays that counts as jitter.
    pub min_dispersion: f64,
    /// MAD (ms) below which a spread is scheduling noise, not jitter.
    pub noise_floor_ms: f64,
    /// A median retry delay below this (ms) is an immediate retry: no backoff at all.
    pub immediate_ms: f64,
    /// Narrowest spread of a group's delays (ms, 10th to 90th percentile) that can be jitter when
    /// the retries came back within `window_ms` of their failures (median): a narrower one is
    /// the pace at which the client handles responses, whatever its dispersion.
    pub min_spread_ms: f64,
    /// Retries one attempt group needs before it is judged.
    pub min_samples: usize,
    /// First failures within this time (ms) of a cluster's first one count as failing together.
    pub together_ms: u64,
    /// Window (ms) for the arrival-clustering figures.
    pub window_ms: u64,
    /// A group that brings at least this fraction of its retries back within one `window_ms`
    /// of their failures (its delays within one window) came back as one wave: after a wait of
    /// at least a window, its delays' spread did not spread the retries, so it is at best jitter
    /// too small to matter.
    pub max_wave_fraction: f64,
}

impl Default for JitterConfig {
    fn default() -> Self {
        JitterConfig {
            min_dispersion: 0.1,
            // An event loop handling a fleet's responses one after another spreads retries that
            // have no jitter at all by 15–20 ms (MAD) on a busy machine: ky, p-retry and
            // exponential-backoff without jitter, measured (calibration/RESULTS.md).
            noise_floor_ms: 25.0,
            immediate_ms: 10.0,
            // Between the widest spread of retries that did not wait at all (a fleet of 50 on one
            // event loop: 10–55 ms after their failures, 36 ms from the 10th to the 90th
            // percentile; p-retry with `minTimeout: 0`, 29 ms) and the narrowest jitter that must
            // pass (full jitter on a 100 ms base: 80 ms; 63–75 ms measured), a factor of 1.25
            // from the one and 1.4 from the other: a group of 20 full-jittered retries falls
            // under it 1 time in 300 (calibration/RESULTS.md). A well-behaved client failed is a
            // gate switched off, so the doubt goes to the wider side.
            min_spread_ms: 45.0,
            min_samples: 20,
            together_ms: 250,
            window_ms: 250,
            max_wave_fraction: 0.9,
        }
    }
}

/// The retries before one attempt number, within one cluster.
#[derive(Debug, Default)]
struct Group {
    delays_us: Vec<u64>,
    /// (arrival, seq) of each retry.
    arrivals: Vec<(u64, u64)>,
}

/// Operations whose first failures came together.
#[derive(Debug)]
struct Cluster {
    start_us: u64,
    end_us: u64,
    /// Latest activity of any member operation: once idle past the horizon, the cluster can get
    /// no more retries and is judged.
    last_us: u64,
    members: usize,
    groups: BTreeMap<u32, Group>,
    /// Member operations whose latest attempt failed, with when it ended: each will be
    /// retried, has given up, or was cut off by the end of the run.
    failing: HashMap<u64, u64>,
}

/// What one group's delays show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Jittered,
    Small,
    NoJitter,
    /// Short delays that do not grow from one attempt to the next: the pace at which the client
    /// handles responses, not a backoff.
    NoBackoff,
    Immediate,
}

/// The criterion that decided a group short of jittered (no jitter, or too little).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Back within a window of their failures, over less than `min_spread_ms` (10th to 90th
    /// percentile).
    Narrow,
    /// `max_wave_fraction` of the retries came back in one window, after a median wait of at
    /// least a window.
    Wave,
    /// The dispersion is under `min_dispersion` (MAD / median, and IQR / median under twice it).
    Undispersed,
}

/// Attempt groups whose slow retries (90th percentile of the delays) wait less than this factor
/// longer at the last attempt than at the first do not back off (an exponential backoff doubles;
/// handling delays stay put or shrink).
const GROWTH: f64 = 1.5;

#[derive(Debug)]
struct Analysis {
    cluster_start_us: u64,
    attempt: u32,
    n: usize,
    median_ms: f64,
    /// 90th percentile of the delays: how long the group's slow retries waited.
    p90_ms: f64,
    /// 10th to 90th percentile of the delays.
    spread_ms: f64,
    mad_ms: f64,
    dispersion: f64,
    iqr_over_median: f64,
    densest_fraction: f64,
    /// Largest fraction of the delays within one `window_ms`: the retries that came back
    /// together, counted from their own failures.
    wave_fraction: f64,
    densest_seqs: Vec<u64>,
    peak_to_mean: Option<f64>,
    kind: Kind,
    /// What decided `kind` when it is `Small` or `NoJitter`.
    why: Option<Why>,
}

/// The `jitter` check.
pub(crate) struct JitterCheck {
    cfg: JitterConfig,
    max_evidence: usize,
    horizon_us: u64,
    now_us: u64,
    last_sweep_us: u64,
    clusters: BTreeMap<u64, Cluster>,
    /// Start of the cluster new first failures may still join.
    open: Option<u64>,
    /// Size of the largest group seen, judged or not.
    largest: usize,
    /// Groups judged so far (their samples are gone).
    analyses: Vec<Analysis>,
    /// Groups left out because the end of the run may have cut their slower retries off (see
    /// [`JitterCheck::no_backoff`]).
    censored: usize,
}

impl JitterCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &JitterConfig, ctx: Context) -> Self {
        JitterCheck {
            cfg: cfg.clone(),
            max_evidence: ctx.max_evidence,
            horizon_us: ctx.horizon_us,
            now_us: 0,
            last_sweep_us: 0,
            clusters: BTreeMap::new(),
            open: None,
            largest: 0,
            analyses: Vec::new(),
            censored: 0,
        }
    }

    /// Judges a cluster that can get no more retries, keeping only the verdicts.
    fn settle(&mut self, start: u64) {
        let Some(c) = self.clusters.remove(&start) else {
            return;
        };
        let mut judged = Vec::new();
        for (&attempt, g) in &c.groups {
            self.largest = self.largest.max(g.delays_us.len());
            if let Some(a) = self.analyse(&c, attempt, g) {
                judged.push(a);
            }
        }
        let last_failing = c.failing.values().max().copied();
        self.no_backoff(&mut judged, last_failing);
        self.analyses.extend(judged);
    }

    /// What jitter is for is spreading, in absolute time, retries that a failure synchronized.
    /// Delays shorter than one window that stay the same from attempt to attempt are the time
    /// the client takes to handle a response — a fleet on one event loop handles 50 failures one
    /// after another, which looks like a spread of tens of milliseconds — not a backoff, and
    /// whatever their dispersion they bring every retry back within a window of its failure.
    ///
    /// The comparison needs the last group whole. When the run ended while a member operation
    /// had failed and not been retried, and a retry backing off from the first group's (its slow
    /// retries' wait, `GROWTH` times) would have come after the end, the slower retries of the
    /// last group may be the ones cut off: its delays look shorter than the client's. Then the
    /// groups this criterion would decide are left out, counted in `censored`, rather than
    /// judged on what the end of the run kept.
    fn no_backoff(&mut self, groups: &mut Vec<Analysis>, last_failing_us: Option<u64>) {
        let window = self.cfg.window_ms as f64;
        if groups.len() < 2 || groups.iter().any(|a| a.median_ms >= window) {
            return;
        }
        // Backing off means waiting longer at later attempts: the last group's slow retries
        // (90th percentile, steadier than the median over a few dozen jittered delays) against
        // the first's; handling delays stay put, or shrink as the crowd thins.
        let by_attempt = |a: &&Analysis| a.attempt;
        let (Some(first), Some(last)) = (
            groups.iter().min_by_key(by_attempt),
            groups.iter().max_by_key(by_attempt),
        ) else {
            return;
        };
        if last.p90_ms >= first.p90_ms * GROWTH {
            return;
        }
        let backing_off_us = (first.p90_ms * GROWTH * 1000.0) as u64;
        if last_failing_us.is_some_and(|t| t.saturating_add(backing_off_us) > self.now_us) {
            let before = groups.len();
            groups.retain(|a| !matches!(a.kind, Kind::Jittered | Kind::Small));
            self.censored += before - groups.len();
            return;
        }
        for a in groups.iter_mut() {
            if matches!(a.kind, Kind::Jittered | Kind::Small | Kind::NoJitter) {
                a.kind = Kind::NoBackoff;
            }
        }
    }

    /// Settles every cluster idle for longer than the horizon (at most once a second).
    fn sweep(&mut self) {
        if self.now_us < self.last_sweep_us.saturating_add(1_000_000) {
            return;
        }
        self.last_sweep_us = self.now_us;
        let idle: Vec<u64> = self
            .clusters
            .values()
            .filter(|c| {
                Some(c.start_us) != self.open
                    && c.last_us.saturating_add(self.horizon_us) < self.now_us
            })
            .map(|c| c.start_us)
            .collect();
        for start in idle {
            self.settle(start);
        }
    }

    /// A cluster no first failure can join any more: dropped when too small to ever be judged.
    fn seal(&mut self, start: u64) {
        let members = self.clusters.get(&start).map_or(0, |c| c.members);
        if members < self.cfg.min_samples {
            self.largest = self.largest.max(members);
            self.clusters.remove(&start);
        }
    }

    fn join(&mut self, t_us: u64) {
        let together = self.cfg.together_ms.saturating_mul(1000);
        if let Some(c) = self.open.and_then(|s| self.clusters.get_mut(&s)) {
            if t_us <= c.start_us.saturating_add(together) {
                c.end_us = c.end_us.max(t_us);
                c.last_us = c.last_us.max(t_us);
                c.members += 1;
                return;
            }
        }
        if let Some(s) = self.open {
            self.seal(s);
        }
        let start = match self.clusters.range(..=t_us).next_back() {
            // Same start as a cluster kept before: extend it rather than replace it.
            Some((&s, _)) if s == t_us => s,
            _ => t_us,
        };
        let c = self.clusters.entry(start).or_insert(Cluster {
            start_us: t_us,
            end_us: t_us,
            last_us: t_us,
            members: 0,
            groups: BTreeMap::new(),
            failing: HashMap::new(),
        });
        c.members += 1;
        self.open = Some(start);
    }

    fn analyse(&self, c: &Cluster, attempt: u32, g: &Group) -> Option<Analysis> {
        let n = g.delays_us.len();
        if n < self.cfg.min_samples.max(1) {
            return None;
        }
        let mut ms: Vec<f64> = g.delays_us.iter().map(|&d| d as f64 / 1000.0).collect();
        ms.sort_by(f64::total_cmp);
        let med = median(&ms)?;
        let mad_ms = mad(&ms, med)?;
        let iqr = quantile(&ms, 0.75)? - quantile(&ms, 0.25)?;
        let (dispersion, iqr_over_median) = if med > 0.0 {
            (mad_ms / med, iqr / med)
        } else {
            (0.0, 0.0)
        };
        let mut arrivals = g.arrivals.clone();
        arrivals.sort_unstable();
        let times: Vec<u64> = arrivals.iter().map(|(t, _)| *t).collect();
        let window_us = self.cfg.window_ms.max(1).saturating_mul(1000);
        let (dense, from) = densest_window(&times, window_us);
        let densest_seqs = arrivals
            .iter()
            .skip(from)
            .take(dense.min(10))
            .map(|(_, s)| *s)
            .collect();
        let all: Vec<u64> = c
            .groups
            .values()
            .flat_map(|g| g.arrivals.iter().map(|(t, _)| *t))
            .collect();
        // One wave relative to the failures that synchronized them: the delays, not the
        // arrivals, since failures spread by the client's own pace (a fleet's first requests
        // reach the server over up to 180 ms on a busy machine) spread retries that all waited
        // the same.
        let mut delays = g.delays_us.clone();
        delays.sort_unstable();
        let wave_fraction = densest_window(&delays, window_us).0 as f64 / n as f64;
        let wave = wave_fraction >= self.cfg.max_wave_fraction && med >= self.cfg.window_ms as f64;
        let p90 = quantile(&ms, 0.9)?;
        let spread_ms = p90 - quantile(&ms, 0.1)?;
        // Jitter spreads retries in absolute time. A fleet on one event loop handles its failures
        // one after another and retries each at once: tens of milliseconds from the first to the
        // last, a large dispersion of a small median. Retries that came back within a window of
        // their failures (the median under `window_ms`) over a spread narrower than that pace
        // are not jittered, whatever the spread is relative to the median. A longer wait that
        // brings them back together is the wave rule's. Beyond that, a spread of a few
        // milliseconds of MAD (or twice that of IQR) is noise whatever its dispersion.
        let narrow = med < self.cfg.window_ms as f64 && spread_ms < self.cfg.min_spread_ms;
        let above_noise = mad_ms >= self.cfg.immediate_ms || iqr >= 2.0 * self.cfg.immediate_ms;
        let dispersed = !narrow
            && above_noise
            && (dispersion >= self.cfg.min_dispersion
                || iqr_over_median >= 2.0 * self.cfg.min_dispersion);
        // A wave is judged by what it did: a real spread that still came back in one window is
        // too small to matter (weak); a narrow one is no jitter, whatever noise widened it.
        let (kind, why) = if med < self.cfg.immediate_ms {
            (Kind::Immediate, None)
        } else if narrow {
            (Kind::NoJitter, Some(Why::Narrow))
        } else if wave {
            let kind = if dispersed {
                Kind::Small
            } else {
                Kind::NoJitter
            };
            (kind, Some(Why::Wave))
        } else if dispersed {
            (Kind::Jittered, None)
        } else if mad_ms >= self.cfg.noise_floor_ms {
            (Kind::Small, Some(Why::Undispersed))
        } else {
            (Kind::NoJitter, Some(Why::Undispersed))
        };
        Some(Analysis {
            cluster_start_us: c.start_us,
            attempt,
            n,
            median_ms: med,
            p90_ms: p90,
            spread_ms,
            mad_ms,
            dispersion,
            iqr_over_median,
            densest_fraction: dense as f64 / n as f64,
            wave_fraction,
            densest_seqs,
            peak_to_mean: peak_to_mean(&all, c.start_us, window_us),
            kind,
            why,
        })
    }

    /// One line on an attempt group, naming the criterion that decided it; times are seconds
    /// since the run started (`facts`).
    fn describe(&self, a: &Analysis, facts: &Facts) -> String {
        let at = facts.run_ms(a.cluster_start_us) / 1000.0;
        let cfg = &self.cfg;
        let wave = format!(
            "{:.0}% of those retries arrived within one {} ms window",
            a.densest_fraction * 100.0,
            cfg.window_ms
        );
        let who = format!("{} operations that failed together at {at:.3} s", a.n);
        match (a.kind, a.why) {
            (Kind::Immediate, _) => format!(
                "immediate retries with no backoff: median delay {:.1} ms < immediate_ms {} \
                 before attempt {} ({who})",
                a.median_ms, cfg.immediate_ms, a.attempt
            ),
            (Kind::NoJitter, Some(Why::Narrow)) => format!(
                "no jitter: {who} came back {:.1} ms (median) after their failures before \
                 attempt {}, spread over {:.1} ms (10th to 90th percentile) < min_spread_ms {}: \
                 the pace of handling responses, whatever the dispersion ({:.2}); {wave}",
                a.median_ms, a.attempt, a.spread_ms, cfg.min_spread_ms, a.dispersion
            ),
            (Kind::NoJitter, Some(Why::Wave)) => format!(
                "no jitter: {who} all waited {:.1} ms (MAD {:.2} ms, dispersion {:.4} < {}) \
                 before attempt {} and came back as one wave: {:.0}% of them within one {} ms \
                 window of their failures; {wave}",
                a.median_ms,
                a.mad_ms,
                a.dispersion,
                cfg.min_dispersion,
                a.attempt,
                a.wave_fraction * 100.0,
                cfg.window_ms
            ),
            (Kind::NoJitter, _) => format!(
                "no jitter: {who} all waited {:.1} ms (MAD {:.2} ms < noise_floor_ms {}, \
                 dispersion {:.4} < {}) before attempt {}; {wave}",
                a.median_ms,
                a.mad_ms,
                cfg.noise_floor_ms,
                a.dispersion,
                cfg.min_dispersion,
                a.attempt
            ),
            (Kind::Small, Some(Why::Wave)) => format!(
                "jitter too small to desynchronize: ±{:.1} ms (MAD) on a {:.1} ms delay before \
                 attempt {} (dispersion {:.3}), but {:.0}% of the retries of {who} came back \
                 within one {} ms window of their failures",
                a.mad_ms,
                a.median_ms,
                a.attempt,
                a.dispersion,
                a.wave_fraction * 100.0,
                cfg.window_ms
            ),
            (Kind::Small, _) => format!(
                "jitter too small to desynchronize: ±{:.1} ms (MAD, above noise_floor_ms {}) on \
                 a {:.1} ms delay before attempt {} (dispersion {:.3} < {}; {:.0}% of the \
                 retries of {who} arrived within one {} ms window)",
                a.mad_ms,
                cfg.noise_floor_ms,
                a.median_ms,
                a.attempt,
                a.dispersion,
                cfg.min_dispersion,
                a.densest_fraction * 100.0,
                cfg.window_ms
            ),
            (Kind::NoBackoff, _) => format!(
                "no backoff: {who} came back {:.1} ms (median) after each failure before \
                 attempt {}, no later than before earlier attempts: the pace of handling \
                 responses, not a backoff; {wave}",
                a.median_ms, a.attempt
            ),
            (Kind::Jittered, _) => format!(
                "jittered: dispersion {:.2}, spread {:.1} ms, on a {:.1} ms median delay before \
                 attempt {} ({} operations)",
                a.dispersion, a.spread_ms, a.median_ms, a.attempt, a.n
            ),
        }
    }
}

impl Check for JitterCheck {
    fn name(&self) -> &'static str {
        "jitter"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        self.now_us = self.now_us.max(e.t_recv_us);
        if a.step.is_first_failure {
            self.join(e.t_recv_us);
        }
        self.sweep();
        let Some(ff) = a.step.first_failure_us else {
            return;
        };
        let Some((_, c)) = self.clusters.range_mut(..=ff).next_back() else {
            return;
        };
        if ff > c.end_us {
            return;
        }
        c.last_us = c.last_us.max(e.t_recv_us.max(e.t_done_us));
        if a.step.failed {
            c.failing.insert(a.step.op, e.t_done_us);
        } else {
            c.failing.remove(&a.step.op);
        }
        let (true, Some(delay)) = (a.is_retry(), a.delay_us()) else {
            return;
        };
        let g = c.groups.entry(a.index()).or_default();
        g.delays_us.push(delay);
        g.arrivals.push((a.entry.t_recv_us, a.entry.seq));
    }

    fn finish(mut self: Box<Self>, facts: &Facts) -> CheckResult {
        if let Some(s) = self.open.take() {
            self.seal(s);
        }
        let starts: Vec<u64> = self.clusters.keys().copied().collect();
        for start in starts {
            self.settle(start);
        }
        let analyses = std::mem::take(&mut self.analyses);
        let largest = self.largest;
        let mut findings = Findings::new(self.max_evidence);
        let mut ranked: Vec<&Analysis> = analyses.iter().collect();
        // Worst first; within a kind, the biggest crowd first.
        ranked.sort_by(|a, b| b.kind.cmp(&a.kind).then(b.n.cmp(&a.n)));
        for a in ranked.iter().filter(|a| a.kind != Kind::Jittered) {
            findings.push(self.describe(a, facts), None, a.densest_seqs.clone());
        }
        let retries: usize = analyses.iter().map(|a| a.n).sum();
        let (verdict, summary) = match ranked.first() {
            None if self.censored > 0 => (
                Verdict::Inconclusive,
                format!(
                    "not enough data: the run ended while operations that failed together were \
                     still retrying, so their later retries may be cut off and cannot tell a \
                     backoff from the pace of handling responses ({} attempt groups left out)",
                    self.censored
                ),
            ),
            None => (
                Verdict::Inconclusive,
                format!(
                    "not enough data: jitter needs {} retries of one attempt among operations \
                     that failed together; the largest group had {largest}",
                    self.cfg.min_samples
                ),
            ),
            Some(worst) if worst.kind >= Kind::NoJitter => {
                (Verdict::Fail, self.describe(worst, facts))
            }
            Some(worst) if worst.kind == Kind::Small => {
                (Verdict::Weak, self.describe(worst, facts))
            }
            Some(_) => {
                let lo = analyses
                    .iter()
                    .map(|a| a.dispersion)
                    .fold(f64::MAX, f64::min);
                let hi = analyses.iter().map(|a| a.dispersion).fold(0.0, f64::max);
                (
                    Verdict::Pass,
                    format!(
                        "retries are jittered: dispersion {lo:.2} to {hi:.2} over {} attempt \
                         groups ({retries} retries)",
                        analyses.len()
                    ),
                )
            }
        };
        let groups: Vec<serde_json::Value> = ranked
            .iter()
            .take(self.max_evidence)
            .map(|a| {
                json!({
                    "cluster_start_s": facts.run_ms(a.cluster_start_us) / 1000.0,
                    "attempt": a.attempt,
                    "retries": a.n,
                    "median_delay_ms": a.median_ms,
                    "mad_ms": a.mad_ms,
                    "spread_ms": a.spread_ms,
                    "dispersion": a.dispersion,
                    "iqr_over_median": a.iqr_over_median,
                    "densest_window_fraction": a.densest_fraction,
                    "delays_in_one_window": a.wave_fraction,
                    "cluster_peak_to_mean": a.peak_to_mean,
                    "finding": match a.kind {
                        Kind::Jittered => "jittered",
                        Kind::Small => "small_jitter",
                        Kind::NoJitter => "no_jitter",
                        Kind::NoBackoff => "no_backoff",
                        Kind::Immediate => "immediate",
                    },
                })
            })
            .collect();
        let mut result = CheckResult::new("jitter", verdict, summary)
            .metric("groups", groups)
            .metric("groups_analyzed", analyses.len() as u64)
            .metric("groups_cut_off", self.censored as u64)
            .metric("retries_analyzed", retries as u64);
        if !analyses.is_empty() {
            let lowest = analyses
                .iter()
                .map(|a| a.dispersion)
                .fold(f64::MAX, f64::min);
            let densest = analyses
                .iter()
                .map(|a| a.densest_fraction)
                .fold(0.0, f64::max);
            let ptm = analyses
                .iter()
                .filter_map(|a| a.peak_to_mean)
                .fold(0.0, f64::max);
            result = result
                .metric("lowest_dispersion", lowest)
                .metric("highest_densest_window_fraction", densest)
                .metric("highest_peak_to_mean", ptm);
        }
        attach(result, findings)
    }
}

impl CheckSpec for JitterConfig {
    const NAME: &'static str = "jitter";
    const ABOUT: About = About {
        catches: "the thundering herd",
        how: "operations whose first failures cluster in time; per attempt index the retry delays' dispersion (MAD / median, IQR / median) and the arrivals' clustering (densest-window fraction, peak-to-mean). No jitter fails; full, equal, decorrelated pass; a spread above the noise floor but under `min_dispersion` (e.g. 0–400 ms on 1 s), or a dispersed one that still brings `max_wave_fraction` of the retries back in one window, is weak, and a narrow one that does is no jitter; retries back within a window of their failures over a spread under `min_spread_ms` (10th to 90th percentile: the pace at which a client handles responses, e.g. a fleet of 50 on one event loop retrying at once) are no jitter whatever their dispersion; a median delay under `immediate_ms`, or short delays that do not grow from attempt to attempt (a fleet on an event loop handling its failures one after another), fail as no backoff at all",
        evidence: "`min_samples` retries of one attempt index among operations that failed together",
        limits: "needs `min_samples` retries per group, else inconclusive; under a strong time scale lower `noise_floor_ms` and `min_spread_ms`; a fleet whose handling is itself spread over more than `min_spread_ms` (a connection pool queueing its retries, or an event loop starved of CPU) spreads them at the server as jitter would; when the run ends while operations that failed together are still retrying, the later retries a backoff would make are cut off, so that cluster is not judged for backoff (its groups are left out, `groups_cut_off`)",
    };

    fn scale(&mut self, f: f64) {
        scale_ms(&mut self.together_ms, f);
        scale_ms(&mut self.window_ms, f);
    }

    fn validate(&self) -> Result<(), Invalid> {
        non_negative("min_dispersion", self.min_dispersion)?;
        non_negative("noise_floor_ms", self.noise_floor_ms)?;
        non_negative("immediate_ms", self.immediate_ms)?;
        non_negative("min_spread_ms", self.min_spread_ms)?;
        if !(self.max_wave_fraction > 0.0 && self.max_wave_fraction <= 1.0) {
            return Err(Invalid::new(
                "max_wave_fraction",
                format!(
                    "{}; give a fraction above 0, at most 1",
                    self.max_wave_fraction
                ),
            ));
        }
        Ok(())
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(JitterCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::Entry;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    use verdict::{CheckResult, Verdict};

    use crate::testutil::{entry, in_arrival_order, run_one};

    /// `clients` operations failing together at t≈0 (one 503 each, 1 ms apart at most), each
    /// retrying `retries` times with `delay(rng, k, prev)` ms before retry k (1-based); every
    /// attempt fails but the last, which creates the order. Server-side noise of 0.1–2 ms is added.
    fn herd(
        clients: u32,
        retries: u32,
        seed: u64,
        mut delay: impl FnMut(&mut StdRng, u32, f64) -> f64,
    ) -> Vec<Entry> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut j = Vec::new();
        for c in 0..clients {
            let key = format!("k{c}");
            let mut t = c as f64 * 0.002 + rng.random::<f64>();
            let mut prev = 0.0;
            for k in 0..=retries {
                let e = entry(0, t).key(&key).took(1);
                let e = if k == retries {
                    e.created(&format!("o{c}"))
                } else {
                    e.status(503)
                };
                j.push(e.build());
                let d = delay(&mut rng, k + 1, prev);
                prev = d;
                let noise = 0.1 + rng.random::<f64>() * 1.9;
                t += 1.0 + d + noise;
            }
        }
        in_arrival_order(j)
    }

    fn backoff(k: u32) -> f64 {
        1000.0 * f64::powi(2.0, k as i32 - 1)
    }

    fn dispersion(r: &CheckResult) -> f64 {
        r.metrics["lowest_dispersion"].as_f64().unwrap_or(f64::NAN)
    }

    #[test]
    fn fails_plain_exponential_backoff() {
        let j = herd(100, 4, 1, |_, k, _| backoff(k));
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.starts_with("no jitter"), "{}", r.summary);
        assert!(dispersion(&r) < 0.01, "{}", dispersion(&r));
        assert!(r.metrics["highest_densest_window_fraction"].as_f64() >= Some(0.99));
        assert_eq!(r.evidence[0].seqs.len(), 10);
    }

    #[test]
    fn fails_immediate_retries_with_its_own_message() {
        let j = herd(50, 3, 2, |_, _, _| 0.0);
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(r.summary.starts_with("immediate retries"), "{}", r.summary);
    }

    #[test]
    fn passes_full_equal_and_decorrelated_jitter() {
        let full = herd(200, 4, 3, |rng, k, _| rng.random::<f64>() * backoff(k));
        let r = run_one("jitter", "{}", &full);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert!(dispersion(&r) > 0.35, "full {}", dispersion(&r));

        let equal = herd(200, 4, 4, |rng, k, _| {
            backoff(k) / 2.0 + rng.random::<f64>() * backoff(k) / 2.0
        });
        let r = run_one("jitter", "{}", &equal);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert!(dispersion(&r) >= 0.12, "equal {}", dispersion(&r));

        // min(cap, U(base, prev * 3)), with a cap most late delays hit.
        let decorrelated = herd(200, 5, 5, |rng, _, prev| {
            let prev = prev.max(1000.0);
            (1000.0 + rng.random::<f64>() * (prev * 3.0 - 1000.0)).min(4000.0)
        });
        let r = run_one("jitter", "{}", &decorrelated);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    #[test]
    fn small_additive_jitter_is_weak() {
        // 0–400 ms added to a 1 s doubling backoff: more than a window, too little for the delay.
        let j = herd(100, 3, 6, |rng, k, _| {
            backoff(k) + rng.random::<f64>() * 400.0
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        assert!(r.passed());
        assert!(r.summary.contains("too small"), "{}", r.summary);
        // The thresholds are configurable: a noise floor above the spread calls it no jitter, a
        // dispersion threshold below it (0.024 on the 4 s delay) with windows narrower than the
        // spread lets it pass.
        let r = run_one("jitter", "{ noise_floor_ms: 150 }", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        let r = run_one("jitter", "{ min_dispersion: 0.005, window_ms: 100 }", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    /// A fleet on one event loop that retries at once: each failure is handled, and retried,
    /// after the responses before it, so the retries come 10–50 ms after their failures — a
    /// spread whose MAD / median looks like jitter — and no later at the next attempt.
    #[test]
    fn a_fleet_retrying_at_the_pace_of_its_event_loop_has_no_backoff() {
        let j = herd(50, 3, 10, |rng, _, _| 10.0 + rng.random::<f64>() * 40.0);
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.starts_with("no backoff"), "{}", r.summary);
        assert!(dispersion(&r) > 0.14, "looks jittered: {}", dispersion(&r));
        assert_eq!(r.metrics["groups"][0]["finding"], "no_backoff");
        // Handling delays that shrink as the crowd thins are no backoff either.
        let j = herd(50, 3, 14, |rng, k, _| {
            (150.0 - 45.0 * k as f64) * (0.5 + rng.random::<f64>())
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.starts_with("no backoff"), "{}", r.summary);
        // Jitter that grows with the attempts, from as short a base, is a backoff: it passes.
        let j = herd(50, 3, 11, |rng, k, _| {
            rng.random::<f64>() * 100.0 * f64::powi(2.0, k as i32 - 1)
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    /// The end of the run cuts a backing-off client's last retries short: those still to come
    /// are the slow ones, and the ones kept look like the pace of handling. That is no evidence
    /// either way: the groups are left out, not failed as no backoff — and a fleet that does
    /// not back off, cut the same way, is not passed either.
    #[test]
    fn retries_cut_off_by_the_end_of_the_run_are_not_judged_for_backoff() {
        // The journal ends at `ms`, part way through the last retries.
        let cut = |j: Vec<Entry>, ms: u64| -> Vec<Entry> {
            j.into_iter().filter(|e| e.t_recv_us < ms * 1000).collect()
        };
        let backing_off = herd(50, 3, 11, |rng, k, _| {
            rng.random::<f64>() * 100.0 * f64::powi(2.0, k as i32 - 1)
        });
        let r = run_one("jitter", "{}", &backing_off);
        assert_eq!(r.verdict, Verdict::Pass, "whole: {}", r.summary);
        // Retries 1 to 3 wait up to 100, 200 and 400 ms.
        let r = run_one("jitter", "{}", &cut(backing_off, 150));
        assert_ne!(r.verdict, Verdict::Fail, "cut: {}", r.summary);
        assert!(
            r.metrics["groups_cut_off"].as_u64() > Some(0),
            "{:?}",
            r.metrics
        );

        let fleet = herd(50, 3, 10, |rng, _, _| 10.0 + rng.random::<f64>() * 40.0);
        // Each retry 10 to 50 ms after its failure.
        let r = run_one("jitter", "{}", &cut(fleet, 95));
        assert_ne!(r.verdict, Verdict::Pass, "cut: {}", r.summary);
    }

    /// The same fleet with a single retry: no later attempt to compare with, and a spread of
    /// 10–55 ms whose dispersion (0.2–0.4) looks like full jitter — but every retry came back
    /// within one window of the failure, over a spread narrower than a fleet's handling pace.
    #[test]
    fn a_single_retry_at_the_pace_of_handling_is_no_jitter_whatever_its_dispersion() {
        for seed in 0..20 {
            let j = herd(50, 1, 100 + seed, |rng, _, _| {
                10.0 + rng.random::<f64>() * 45.0
            });
            let r = run_one("jitter", "{}", &j);
            assert_eq!(r.verdict, Verdict::Fail, "seed {seed}: {}", r.summary);
            assert!(r.summary.starts_with("no jitter"), "{}", r.summary);
            assert!(r.summary.contains("< min_spread_ms 45"), "{}", r.summary);
            assert!(dispersion(&r) > 0.2, "looks jittered: {}", dispersion(&r));
            assert_eq!(r.metrics["highest_densest_window_fraction"], 1.0);
        }
    }

    /// Full jitter on a small base spreads the retries over 0–100 ms: all within one window, but
    /// over a spread well above the pace of handling (80 ms from the 10th to the 90th
    /// percentile, against 45), also with 2–12 ms of handling added to every delay.
    #[test]
    fn full_jitter_on_a_small_base_passes() {
        for seed in 0..20 {
            let j = herd(50, 1, 200 + seed, |rng, _, _| {
                rng.random::<f64>() * 100.0 + 2.0 + rng.random::<f64>() * 10.0
            });
            let r = run_one("jitter", "{}", &j);
            assert_eq!(r.verdict, Verdict::Pass, "seed {seed}: {}", r.summary);
            assert_eq!(r.metrics["highest_densest_window_fraction"], 1.0);
        }
    }

    /// Each finding names the criterion that decided it, not a figure that did not.
    #[test]
    fn findings_name_the_criterion_that_decided() {
        // Dispersed (0.2 of a 60 ms median) but narrow: the spread decides.
        let j = herd(50, 1, 16, |rng, _, _| 50.0 + rng.random::<f64>() * 24.0);
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("min_spread_ms"), "{}", r.summary);
        assert!(!r.summary.contains(" < 0.1"), "{}", r.summary);
        // Wide enough but undispersed, not one wave (a fifth of the fleet waited 400 ms more):
        // dispersion and the noise floor decide.
        let j = herd(50, 1, 17, |rng, _, _| {
            let late = if rng.random::<f64>() < 0.2 {
                400.0
            } else {
                0.0
            };
            1000.0 + late + rng.random::<f64>() * 10.0
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("< noise_floor_ms 25"), "{}", r.summary);
        assert!(r.summary.contains("dispersion 0.0"), "{}", r.summary);
        // An immediate retry names immediate_ms.
        let r = run_one("jitter", "{}", &herd(50, 1, 18, |_, _, _| 0.0));
        assert!(r.summary.contains("< immediate_ms 10"), "{}", r.summary);
    }

    /// Zero-delay retries on a busy event loop whose handling slowed at the next attempt: the
    /// delays grow (the no-backoff rule cannot see them) and their spread is a large fraction
    /// of a small median, but in absolute terms it is the pace of handling: no jitter.
    #[test]
    fn an_even_spread_at_the_pace_of_handling_is_no_jitter_even_when_it_grows() {
        let j = herd(50, 3, 15, |rng, k, _| {
            let (base, width) = if k == 1 { (30.0, 20.0) } else { (50.0, 30.0) };
            base + rng.random::<f64>() * width
        });
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.starts_with("no jitter"), "{}", r.summary);
        assert!(dispersion(&r) > 0.1, "looks jittered: {}", dispersion(&r));
    }

    /// Retries without jitter from clients on an event loop: the loop's own noise (MAD about
    /// 15–20 ms, more on a busy machine) on a 1 s backoff is not jitter: the wave comes back
    /// whole.
    #[test]
    fn event_loop_noise_on_a_fixed_backoff_is_no_jitter() {
        for spread in [60.0, 120.0] {
            let j = herd(50, 3, 12, |rng, k, _| {
                backoff(k) + rng.random::<f64>() * spread
            });
            let r = run_one("jitter", "{}", &j);
            assert_eq!(r.verdict, Verdict::Fail, "{spread}: {}", r.summary);
            assert!(r.summary.starts_with("no jitter"), "{}", r.summary);
        }
    }

    /// A fleet whose first requests reached the server over 400 ms (its own pace of sending)
    /// and that retries after a fixed 1 s, with the loop's noise (0–120 ms, MAD 30 ms, above the
    /// noise floor): the arrivals are spread over more than a window, but every retry came back
    /// within one window of its own failure — no jitter, not jitter too small.
    #[test]
    fn a_wave_is_counted_from_the_failures_not_from_the_first_request() {
        let mut j = herd(50, 1, 19, |rng, _, _| 1000.0 + rng.random::<f64>() * 120.0);
        for e in &mut j {
            let c: u64 = e.idempotency_key.as_deref().unwrap_or("k0")[1..]
                .parse()
                .unwrap_or(0);
            e.t_recv_us += c * 8000;
            e.t_done_us += c * 8000;
        }
        let r = run_one("jitter", "{ together_ms: 400 }", &in_arrival_order(j));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("came back as one wave"), "{}", r.summary);
        let g = &r.metrics["groups"][0];
        assert!(g["densest_window_fraction"].as_f64() < Some(0.9), "{g}");
        assert_eq!(g["delays_in_one_window"], 1.0);
    }

    /// Jitter whose spread is narrower than a window brings a wave back whatever its
    /// dispersion: weak, not jittered.
    #[test]
    fn retries_that_still_arrive_as_one_wave_are_weak() {
        // Equal jitter on 400 ms: 200–400 ms, dispersion about 0.17, all in one 250 ms window.
        let j = herd(60, 1, 13, |rng, _, _| 200.0 + rng.random::<f64>() * 200.0);
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        assert!(
            r.summary.contains("within one 250 ms window"),
            "{}",
            r.summary
        );
        // Judged in 100 ms windows, the same spread is a spread.
        let r = run_one("jitter", "{ window_ms: 100 }", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    #[test]
    fn too_few_retries_is_inconclusive() {
        let j = herd(10, 3, 7, |_, k, _| backoff(k));
        let r = run_one("jitter", "{}", &j);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert!(r.summary.contains("not enough data"), "{}", r.summary);
        assert!(r.summary.contains("had 10"), "{}", r.summary);
        // Enough with a lower bar.
        assert_eq!(
            run_one("jitter", "{ min_samples: 5 }", &j).verdict,
            Verdict::Fail
        );
    }

    #[test]
    fn incidents_far_apart_are_judged_as_the_journal_streams() {
        // Two incidents 100 s apart; with a 20 s horizon the first is judged (and its samples
        // dropped) long before the second. The worst decides: the jittered one does not hide
        // the unjittered one.
        let first = herd(50, 4, 8, |_, k, _| backoff(k));
        let mut second = herd(50, 4, 9, |rng, k, _| rng.random::<f64>() * backoff(k));
        for e in &mut second {
            e.t_recv_us += 100_000_000;
            e.t_done_us += 100_000_000;
        }
        let j = in_arrival_order(first.into_iter().chain(second).collect());
        let cfg = crate::ChecksConfig::from_yaml("grouping: { horizon_ms: 20000 }\njitter: {}")
            .expect("valid");
        let r = crate::run_checks(&cfg, &j).remove(0);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["groups_analyzed"], 8);
        assert_eq!(r.metrics["groups"][0]["finding"], "no_jitter");
    }

    #[test]
    fn borderline_a_trickle_of_failures_is_not_a_herd() {
        // Fixed 1 s retries after failures 20 ms apart: at most 13 first failures share any
        // 250 ms, under the 20 a group needs, so no cluster is judged. 2 ms apart, they are a herd.
        let trickle = |gap_ms: f64| {
            let mut j = Vec::new();
            for c in 0..100u32 {
                let t = c as f64 * gap_ms;
                j.push(entry(0, t).key(&format!("k{c}")).status(503).build());
                j.push(entry(0, t + 1001.0).key(&format!("k{c}")).build());
            }
            in_arrival_order(j)
        };
        let r = run_one("jitter", "{}", &trickle(20.0));
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        let r = run_one("jitter", "{}", &trickle(2.0));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
    }
}
