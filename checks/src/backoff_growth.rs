//! `backoff_growth`: a client whose waits between retries do not grow.
//!
//! Why: a retry after a fixed wait keeps the same pressure on a dependency that is failing, for
//! as long as the attempts last; exponential backoff halves it at every retry, and lets an
//! overloaded service drain. The seed's checklist, gRFC A6 (`backoffMultiplier`) and every common
//! retry library make the wait grow; a constant delay is a configuration that says otherwise.
//!
//! The wait before an attempt is its arrival minus the end of the attempt before it (a retry
//! that followed a Retry-After or a gRPC pushback is left out: the server chose that wait). Per
//! attempt index the typical wait is the mean of the middle 80 % of the waits (full jitter
//! spreads them from zero to the backoff: their mean moves less from run to run than their
//! median, and the trim keeps a retry a busy machine held up from moving it); the first two
//! indexes with `min_samples` waits each are compared. Grown by `pass_growth` (×1.3) or more,
//! with the growth less twice its standard error still `min_growth` (×1.1), passes. Less fails when the waits' spread rules out that growth (the growth plus twice its
//! standard error, from the two groups' variances, stays under `pass_growth`); waits under
//! `immediate_ms` at both attempts (the pace of handling answers) fail unless the growth less
//! twice its standard error still reaches `pass_growth`; otherwise the data cannot tell a slow backoff from a constant
//! wait with wide jitter, and the verdict is weak, with both figures. The growth of later indexes
//! is reported but not judged: a cap flattens it by design.
//!
//! Metrics: `waits_judged`, `typical_wait_ms_<k>` for each index judged, `growth`.

use std::collections::BTreeMap;

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::spec::{non_negative, About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// Configuration of the `backoff_growth` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BackoffGrowthConfig {
    /// Waits needed at each of the two attempt indexes compared.
    pub min_samples: usize,
    /// Growth of the typical wait, from one retry to the next, that passes (a backoff multiplier
    /// of 2 gives ×2; gRPC's common 1.6, ×1.6). Below ×2 by the spread full jitter leaves in 30
    /// operations' waits.
    pub pass_growth: f64,
    /// Growth the waits' spread must vouch for (the growth less two standard errors) to pass:
    /// a growth of ×1.5 read from waits so spread that ×1.05 cannot be ruled out is weak.
    pub min_growth: f64,
    /// Waits under this (ms) at both attempts are the pace at which the client handles answers
    /// (6–22 ms for ten clients on one event loop, 12–20 ms for thirty threads, 62 ms beside
    /// `stress-ng --cpu 2`), not a backoff: they pass only with a growth their spread vouches
    /// for (the growth less two standard errors still `pass_growth`).
    pub immediate_ms: f64,
}

impl Default for BackoffGrowthConfig {
    fn default() -> Self {
        BackoffGrowthConfig {
            min_samples: 5,
            pass_growth: 1.3,
            min_growth: 1.1,
            immediate_ms: 50.0,
        }
    }
}

/// Most waits kept per attempt index: the first ones are the ones judged.
const KEPT: usize = 100_000;
/// Attempt indexes whose waits are kept (the wait before attempt 2 up to the one before 8).
const MAX_INDEX: u32 = 8;

/// The `backoff_growth` check.
pub(crate) struct BackoffGrowthCheck {
    cfg: BackoffGrowthConfig,
    /// Waits (µs) before each attempt index.
    waits: BTreeMap<u32, Vec<u64>>,
    told: u64,
}

impl BackoffGrowthCheck {
    pub(crate) fn new(cfg: &BackoffGrowthConfig, _ctx: Context) -> Self {
        BackoffGrowthCheck {
            cfg: cfg.clone(),
            waits: BTreeMap::new(),
            told: 0,
        }
    }
}

/// The mean of the middle 80 % of `v` (all of it under 10 values), and that mean's variance.
fn typical(v: &mut [u64]) -> (f64, f64) {
    v.sort_unstable();
    let n = v.len();
    let cut = n / 10;
    let middle = &v[cut..n - cut];
    let kept = middle.len().max(1) as f64;
    let mean = middle.iter().map(|&w| w as f64).sum::<f64>() / kept;
    // The variance of a trimmed mean is the winsorized variance (the trimmed values replaced by
    // the nearest kept ones) over n, divided by the kept fraction squared (Tukey and McLaughlin).
    let (lo, hi) = (middle[0] as f64, middle[middle.len() - 1] as f64);
    let wins: Vec<f64> = v.iter().map(|&w| (w as f64).clamp(lo, hi)).collect();
    let wmean = wins.iter().sum::<f64>() / n as f64;
    let wvar = wins.iter().map(|w| (w - wmean).powi(2)).sum::<f64>() / (n as f64 - 1.0).max(1.0);
    let fraction = kept / n as f64;
    (mean, wvar / (n as f64 * fraction * fraction))
}

impl Check for BackoffGrowthCheck {
    fn name(&self) -> &'static str {
        BackoffGrowthConfig::NAME
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let k = a.index();
        if !(2..=MAX_INDEX).contains(&k) || !a.is_retry() {
            return;
        }
        let Some(prev) = a.previous() else { return };
        // The server chose this wait: it tells nothing of the client's backoff.
        if prev.retry_after_s.is_some() || prev.pushback_ms.is_some() {
            self.told += 1;
            return;
        }
        let Some(wait) = a.delay_us() else { return };
        let v = self.waits.entry(k).or_default();
        if v.len() < KEPT {
            v.push(wait);
        }
    }

    fn finish(mut self: Box<Self>, _facts: &Facts) -> CheckResult {
        let cfg = &self.cfg;
        // Per index: the typical wait (ms), the variance of that mean (ms²), the waits.
        let mut typicals: Vec<(u32, f64, f64, usize)> = Vec::new();
        for (k, v) in self.waits.iter_mut() {
            if v.len() >= cfg.min_samples.max(2) {
                let (mean, var) = typical(v);
                typicals.push((*k, mean / 1000.0, var / 1e6, v.len()));
            }
        }
        // The first two consecutive indexes with enough waits.
        let pair = typicals
            .windows(2)
            .find(|w| w[1].0 == w[0].0 + 1)
            .map(|w| (w[0], w[1]));
        let judged: usize = self.waits.values().map(Vec::len).sum();
        let mut result = match pair {
            None => {
                CheckResult::new(
                    BackoffGrowthConfig::NAME,
                    Verdict::Inconclusive,
                    format!(
                    "not enough data: no two consecutive retries with {} waits each (waits per \
                     attempt: {}{})",
                    cfg.min_samples,
                    if self.waits.is_empty() {
                        "none".to_string()
                    } else {
                        self.waits
                            .iter()
                            .map(|(k, v)| format!("{} before attempt {k}", v.len()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                    if self.told > 0 {
                        format!("; {} retries after a Retry-After or pushback left out", self.told)
                    } else {
                        String::new()
                    }
                ),
                )
            }
            Some(((k1, m1, v1, n1), (k2, m2, v2, n2))) => {
                let growth = if m1 > 0.0 { m2 / m1 } else { f64::INFINITY };
                // The standard error of ln(growth), by the delta method.
                let se = if m1 > 0.0 && m2 > 0.0 {
                    (v1 / (m1 * m1) + v2 / (m2 * m2)).sqrt()
                } else {
                    f64::INFINITY
                };
                let highest = growth * (2.0 * se).exp();
                let shown = |g: f64| {
                    if g.is_finite() {
                        format!("×{g:.2}")
                    } else {
                        "from zero".to_string()
                    }
                };
                let waits = format!(
                    "typical wait {} before attempt {k1} ({n1} retries), {} before attempt \
                         {k2} ({n2})",
                    ms(m1),
                    ms(m2)
                );
                let lowest = growth * (-2.0 * se).exp();
                let (verdict, summary) =
                    if m1 < cfg.immediate_ms && m2 < cfg.immediate_ms && lowest < cfg.pass_growth {
                        (
                            Verdict::Fail,
                            format!(
                                "no backoff: retries at the pace of handling ({waits}, both under \
                             immediate_ms {}; {} is no growth the waits' spread can vouch for)",
                                cfg.immediate_ms,
                                shown(growth)
                            ),
                        )
                    } else if growth < cfg.pass_growth && highest < cfg.pass_growth {
                        (
                            Verdict::Fail,
                            format!(
                            "the wait does not grow: {waits}, {} (at most ×{highest:.2} by the \
                             waits' spread) < pass_growth ×{}",
                            shown(growth),
                            cfg.pass_growth
                        ),
                        )
                    } else if growth >= cfg.pass_growth && lowest >= cfg.min_growth {
                        (
                            Verdict::Pass,
                            format!(
                                "the wait grows {}: {waits} (at least ×{lowest:.2} by the waits' \
                             spread)",
                                shown(growth)
                            ),
                        )
                    } else {
                        (
                            Verdict::Weak,
                            format!(
                            "the wait grows slowly, or the waits are too spread to tell: {waits}, \
                             {} (between ×{lowest:.2} and ×{highest:.2} by the waits' spread; \
                             passing needs ×{} and at least ×{} for sure)",
                            shown(growth),
                            cfg.pass_growth,
                            cfg.min_growth
                        ),
                        )
                    };
                CheckResult::new(BackoffGrowthConfig::NAME, verdict, summary)
                    .metric("growth", if growth.is_finite() { growth } else { 0.0 })
            }
        };
        for (k, m, _, _) in &typicals {
            result = result.metric(&format!("typical_wait_ms_{k}"), *m);
        }
        result
            .metric("waits_judged", judged as u64)
            .metric("waits_told_by_server", self.told)
    }
}

/// Milliseconds to three significant digits.
fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

impl CheckSpec for BackoffGrowthConfig {
    const NAME: &'static str = "backoff_growth";
    const ABOUT: About = About {
        catches: "retries at a fixed wait: the same pressure on a failing dependency at every retry",
        how: "the typical wait (mean of the middle 80 %) before attempt k+1 against the one before attempt k, for the first two consecutive attempts with `min_samples` retries (waits the server set by Retry-After or pushback left out): grown by `pass_growth` (×1.3), and by `min_growth` (×1.1) even less two standard errors, passes; less, with the waits' spread ruling ×1.3 out (growth plus two standard errors), fails; waits under `immediate_ms` (50 ms, the pace of handling answers) at both fail unless the growth less two standard errors reaches ×1.3; less but too spread to tell is weak",
        evidence: "`min_samples` retries before each of two consecutive attempts, with no Retry-After or pushback before them",
        limits: "the wait is measured at the server (it includes the answer's way back and the client's handling); a backoff already at its cap at the first retry reads as constant",
    };

    fn validate(&self) -> Result<(), Invalid> {
        non_negative("pass_growth", self.pass_growth)?;
        non_negative("immediate_ms", self.immediate_ms)?;
        non_negative("min_growth", self.min_growth)?;
        if self.min_samples < 2 {
            return Err(Invalid::new(
                "min_samples",
                format!(
                    "must be at least 2 (a spread needs two waits), got {}",
                    self.min_samples
                ),
            ));
        }
        Ok(())
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(BackoffGrowthCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "backoff_growth";

    /// `n` operations, each failing twice and retried after `w2` then `w3` ms (plus `i` ms of
    /// spread per operation).
    fn journal(n: u64, w2: u64, w3: u64) -> Vec<history::Entry> {
        told(n, w2, w3, None)
    }

    /// [`journal`], each 503 with this Retry-After.
    fn told(n: u64, w2: u64, w3: u64, retry_after: Option<&str>) -> Vec<history::Entry> {
        let failed = |seq, t, key: &str| {
            let e = entry(seq, t as f64).key(key).status(503);
            match retry_after {
                Some(v) => e.response_header("retry-after", v).build(),
                None => e.build(),
            }
        };
        let mut j = Vec::new();
        for i in 0..n {
            let key = format!("k{i}");
            let t1 = i;
            let t2 = t1 + w2 + i % 3;
            let t3 = t2 + w3 + i % 3;
            j.push(failed(3 * i + 1, t1, &key));
            j.push(failed(3 * i + 2, t2, &key));
            j.push(
                entry(3 * i + 3, t3 as f64)
                    .key(&key)
                    .created(&format!("o{i}"))
                    .build(),
            );
        }
        j.sort_by_key(|e| e.t_recv_us);
        for (s, e) in j.iter_mut().enumerate() {
            e.seq = s as u64 + 1;
        }
        j
    }

    /// `n` operations, all failing at 0 ms; operation i waits `w(i)` ms before attempts 2 and 3.
    fn waits(n: u64, w: impl Fn(u64) -> (u64, u64)) -> Vec<history::Entry> {
        let mut j = Vec::new();
        for i in 0..n {
            let key = format!("k{i}");
            let (w2, w3) = w(i);
            j.push(entry(3 * i + 1, 0.0).key(&key).status(503).build());
            j.push(
                entry(3 * i + 2, (1 + w2) as f64)
                    .key(&key)
                    .status(503)
                    .build(),
            );
            j.push(
                entry(3 * i + 3, (2 + w2 + w3) as f64)
                    .key(&key)
                    .created("o")
                    .build(),
            );
        }
        j.sort_by_key(|e| e.t_recv_us);
        for (s, e) in j.iter_mut().enumerate() {
            e.seq = s as u64 + 1;
        }
        j
    }

    #[test]
    fn an_exponential_backoff_passes() {
        let r = run_one(NAME, "{}", &journal(10, 100, 200));
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        // Short waits that clearly double pass too.
        let r = run_one(NAME, "{}", &journal(10, 10, 20));
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert!(r.summary.contains("×2"), "{}", r.summary);
    }

    #[test]
    fn a_constant_wait_fails_and_retrying_at_once_fails() {
        let r = run_one(NAME, "{}", &journal(10, 300, 300));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("does not grow"), "{}", r.summary);
        let r = run_one(NAME, "{}", &journal(10, 0, 0));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("no backoff"), "{}", r.summary);
        // Handling's pace, spread and not growing much: no backoff either.
        let j = waits(10, |i| (8 + 2 * i, 9 + 3 * (i % 5)));
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("no backoff"), "{}", r.summary);
    }

    #[test]
    fn spread_waits_that_may_grow_are_weak_and_few_retries_are_inconclusive() {
        // Waits spread from 10 to 190 ms, then from 12 to 228 ms: ×1.2, and as spread as that.
        let j = waits(10, |i| (10 + 20 * i, 12 + 24 * i));
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        // The same growth, the waits close together: ruled out, a fail.
        let r = run_one(NAME, "{}", &journal(10, 100, 120));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        let r = run_one(NAME, "{}", &journal(3, 100, 200));
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        let r = run_one(NAME, "{ min_samples: 3 }", &journal(3, 100, 200));
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        let r = run_one(NAME, "{ min_samples: 2 }", &journal(3, 100, 200));
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    #[test]
    fn a_wait_the_server_set_is_left_out() {
        let r = run_one(NAME, "{}", &told(10, 2000, 2000, Some("2")));
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert!(r.summary.contains("Retry-After"), "{}", r.summary);
    }
}
