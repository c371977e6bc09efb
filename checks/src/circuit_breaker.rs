//! `circuit_breaker`: does a client ease off a dependency that keeps failing?
//!
//! Why: retries with backoff slow down one operation, but a client that keeps starting new
//! operations keeps its full request rate against a service that is down — exactly when that
//! service needs the load to drop so it can recover. A circuit breaker notices the failure rate,
//! stops calling (failing fast or falling back), and after a pause lets single probe requests
//! through (half-open) to learn whether the dependency is back.
//!
//! Detection: per client (`x-client-id`; per client and first path segment with `per_target`), a
//! run of consecutive failures (no response, 5xx, 408 or 429) spanning at least `min_outage_ms`
//! with at least `min_attempts` attempts is an outage. Its attempt rate in the second half is
//! compared with the first half: a ratio above `max_rate_ratio` means the client did not back off
//! (fail).
//!
//! The rate is the client's pace, and a client that retries at once goes at the pace at which it
//! handles responses: 8 ms a retry at one moment, 20 or 60 ms at another on a busy machine. Such a
//! slowdown is not easing off, and a backoff whose first waits (10, 20, 40 ms) are flattened by it
//! is not hammering. So every wait — from the end of a failed attempt to the next attempt — under
//! `immediate_ms` counts as `immediate_ms` when the halves are measured: retrying after 8 ms and
//! after 20 ms are both retrying at once. Attempts sent before the previous one was answered
//! (concurrent requests of one client) are not waits and count as they arrived. With `require_probe`, the outage must also show a half-open probe: an attempt after a
//! pause of `min_pause_ms` that is followed by another such pause, or by the end of the outage
//! (a probe that succeeded). Requests without `x-client-id` are not attributed and are skipped.
//!
//! Metrics: `outages`, `worst_rate_ratio`, `outages_without_probe`.

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::failure;
use super::idle::IdleMap;
use super::spec::{non_negative, scale_ms, About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// Configuration of the `circuit_breaker` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CircuitBreakerConfig {
    /// Shortest run of consecutive failures that counts as an outage (ms).
    pub min_outage_ms: u64,
    /// Fewest attempts in an outage for its rates to mean anything.
    pub min_attempts: usize,
    /// Highest allowed ratio of the second half's attempt rate to the first half's.
    pub max_rate_ratio: f64,
    /// A wait (ms) between a failed attempt's end and the client's next attempt shorter than
    /// this is the pace of handling responses, not a backoff: it counts as this long.
    pub immediate_ms: f64,
    /// Also require a half-open probe pattern (a pause, then a single attempt).
    pub require_probe: bool,
    /// Shortest pause (ms) before and after a probe.
    pub min_pause_ms: u64,
    /// Track each client per target (first path segment) instead of per client.
    pub per_target: bool,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        CircuitBreakerConfig {
            min_outage_ms: 5_000,
            min_attempts: 10,
            max_rate_ratio: 0.5,
            // A client that retries at once, 10 of them on one asyncio loop: 6–22 ms between a
            // failure and the next attempt on a busy machine, 62 ms beside `stress-ng --cpu 2`,
            // the two halves of an outage 2–3 times apart either way (calibration/RESULTS.md).
            immediate_ms: 50.0,
            require_probe: false,
            min_pause_ms: 1_000,
            per_target: false,
        }
    }
}

/// One failed attempt of a client's run of failures.
#[derive(Debug, Clone, Copy)]
struct Failed {
    t_recv_us: u64,
    t_done_us: u64,
    seq: u64,
}

/// The `circuit_breaker` check.
pub(crate) struct CircuitBreakerCheck {
    cfg: CircuitBreakerConfig,
    /// Consecutive failures per client.
    streaks: IdleMap<String, Vec<Failed>>,
    now_us: u64,
    findings: Findings,
    outages: u64,
    worst_ratio: Option<f64>,
    without_probe: u64,
}

impl CircuitBreakerCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &CircuitBreakerConfig, ctx: Context) -> Self {
        CircuitBreakerCheck {
            cfg: cfg.clone(),
            streaks: IdleMap::new(ctx.horizon_us),
            now_us: 0,
            findings: Findings::new(ctx.max_evidence),
            outages: 0,
            worst_ratio: None,
            without_probe: 0,
        }
    }

    /// Where each attempt of a run of failures falls on the client's own clock: arrival times
    /// from the first, with every wait under `immediate_ms` counted as `immediate_ms`; and how
    /// many waits were.
    fn paced(&self, times: &[Failed]) -> (Vec<u64>, usize) {
        let floor = (self.cfg.immediate_ms * 1000.0) as u64;
        let mut at = Vec::with_capacity(times.len());
        let mut t = 0u64;
        let mut floored = 0;
        at.push(t);
        for w in times.windows(2) {
            let (a, b) = (w[0], w[1]);
            let gap = if b.t_recv_us >= a.t_done_us {
                let wait = b.t_recv_us - a.t_done_us;
                floored += usize::from(wait < floor);
                (a.t_done_us - a.t_recv_us) + wait.max(floor)
            } else {
                // Sent before the previous answer: a concurrent request, not a wait.
                b.t_recv_us.saturating_sub(a.t_recv_us)
            };
            t = t.saturating_add(gap);
            at.push(t);
        }
        (at, floored)
    }

    fn judge(&mut self, who: &str, times: &[Failed], end: Option<(u64, u64)>) {
        let (Some(first), Some(last)) = (times.first(), times.last()) else {
            return;
        };
        let span = last.t_recv_us - first.t_recv_us;
        if span < self.cfg.min_outage_ms.saturating_mul(1000) || times.len() < self.cfg.min_attempts
        {
            return;
        }
        self.outages += 1;
        let (at, floored) = self.paced(times);
        let paced_span = at.last().copied().unwrap_or(0);
        let mid = paced_span / 2;
        let n1 = at.iter().take_while(|t| **t < mid).count().max(1);
        let n2 = times.len() - n1;
        let ratio = n2 as f64 / n1 as f64;
        self.worst_ratio = Some(self.worst_ratio.map_or(ratio, |w| w.max(ratio)));
        let half_s = paced_span.max(1) as f64 / 2e6;
        let mid_seq = times.get(n1).map_or(last.seq, |f| f.seq);
        if ratio > self.cfg.max_rate_ratio {
            let pace = if floored > 0 {
                format!(
                    "; {floored} of its {} waits were under immediate_ms {} and count as that \
                     long: retrying at the pace of handling responses is not slowing down",
                    times.len() - 1,
                    self.cfg.immediate_ms
                )
            } else {
                String::new()
            };
            self.findings.push(
                format!(
                    "client {who} kept calling through a {:.1} s outage: {:.1}/s in the first \
                     half, {:.1}/s in the second (ratio {ratio:.2} > {}){pace}",
                    span as f64 / 1e6,
                    n1 as f64 / half_s,
                    n2 as f64 / half_s,
                    self.cfg.max_rate_ratio
                ),
                Some(who.to_string()),
                vec![first.seq, mid_seq, last.seq],
            );
        }
        if self.cfg.require_probe && !self.has_probe(times, end) {
            self.without_probe += 1;
            self.findings.push(
                format!(
                    "client {who}: no half-open probe (a single attempt after a pause of {} ms) \
                     during a {:.1} s outage",
                    self.cfg.min_pause_ms,
                    span as f64 / 1e6
                ),
                Some(who.to_string()),
                vec![first.seq, last.seq],
            );
        }
    }

    fn has_probe(&self, times: &[Failed], end: Option<(u64, u64)>) -> bool {
        let pause = self.cfg.min_pause_ms.saturating_mul(1000);
        let all: Vec<u64> = times
            .iter()
            .map(|f| f.t_recv_us)
            .chain(end.map(|(t, _)| t))
            .collect();
        all.iter().enumerate().skip(1).any(|(i, &t)| {
            let before = all.get(i - 1).map_or(0, |p| t.saturating_sub(*p));
            let after = all.get(i + 1).map(|n| n.saturating_sub(t));
            before >= pause && after.is_none_or(|a| a >= pause)
        })
    }
}

impl Check for CircuitBreakerCheck {
    fn name(&self) -> &'static str {
        "circuit_breaker"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        self.now_us = self.now_us.max(e.t_recv_us);
        let mut expired = Vec::new();
        self.streaks
            .expire(self.now_us, |k, v| expired.push((k, v)));
        for (who, times) in expired {
            self.judge(&who, &times, None);
        }
        let Some(client) = &e.client_id else { return };
        let per_target;
        let who = if self.cfg.per_target {
            let target = e.path.split('/').find(|s| !s.is_empty()).unwrap_or("");
            per_target = format!("{client} /{target}");
            &per_target
        } else {
            client
        };
        if failure::is_transient(e) {
            self.streaks.touch(who, e.t_recv_us, Vec::new).push(Failed {
                t_recv_us: e.t_recv_us,
                t_done_us: e.t_done_us.max(e.t_recv_us),
                seq: e.seq,
            });
        } else if let Some(times) = self.streaks.remove(who) {
            self.judge(who, &times, Some((e.t_recv_us, e.seq)));
        }
    }

    fn finish(mut self: Box<Self>, _facts: &Facts) -> CheckResult {
        let streaks = std::mem::replace(&mut self.streaks, IdleMap::new(0));
        for (who, times) in streaks.drain() {
            self.judge(&who, &times, None);
        }
        let (verdict, summary) = if let Some(first) = self.findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} circuit-breaker findings in {} outages; first: {first}",
                    self.findings.total(),
                    self.outages
                ),
            )
        } else if self.outages == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: no client saw {} s of consecutive failures ({} attempts \
                     or more)",
                    self.cfg.min_outage_ms as f64 / 1000.0,
                    self.cfg.min_attempts
                ),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "clients backed off in all {} outages (worst rate ratio {:.2})",
                    self.outages,
                    self.worst_ratio.unwrap_or_default()
                ),
            )
        };
        let mut result = CheckResult::new("circuit_breaker", verdict, summary)
            .metric("outages", self.outages)
            .metric("outages_without_probe", self.without_probe);
        if let Some(w) = self.worst_ratio {
            result = result.metric("worst_rate_ratio", w);
        }
        attach(result, self.findings)
    }
}

impl CheckSpec for CircuitBreakerConfig {
    const NAME: &'static str = "circuit_breaker";
    const ABOUT: About = About {
        catches: "hammering a dependency that is down",
        how: "per client, a run of consecutive failures of at least `min_outage_ms` and `min_attempts`: the attempt rate in its second half against its first (`max_rate_ratio`), every wait under `immediate_ms` counted as that long (retrying at the pace of handling responses is retrying at once, whether that pace is 8 or 40 ms); with `require_probe`, a half-open probe (a pause, then one attempt) must be seen",
        evidence: "a client saw a sustained outage (`min_outage_ms` and `min_attempts` of consecutive failures)",
        limits: "needs `x-client-id`; few attempts per client make it inconclusive",
    };

    fn scale(&mut self, f: f64) {
        scale_ms(&mut self.min_outage_ms, f);
        scale_ms(&mut self.min_pause_ms, f);
    }

    fn validate(&self) -> Result<(), Invalid> {
        non_negative("max_rate_ratio", self.max_rate_ratio)?;
        non_negative("immediate_ms", self.immediate_ms)
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(CircuitBreakerCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::Entry;
    use verdict::Verdict;

    use crate::testutil::{entry, in_arrival_order, run_one};

    const NAME: &str = "circuit_breaker";

    /// Failed requests of client `c` at each time (ms), then one success at `recover_ms`.
    fn outage(times_ms: impl IntoIterator<Item = u32>, recover_ms: u32) -> Vec<Entry> {
        let mut j: Vec<Entry> = times_ms
            .into_iter()
            .map(|t| entry(0, t).client("c").status(503).build())
            .collect();
        j.push(entry(0, recover_ms).client("c").created("o1").build());
        in_arrival_order(j)
    }

    /// 20 failures in the first second, then what the breaker lets through.
    fn opened_then(later_ms: impl IntoIterator<Item = u32>, recover_ms: u32) -> Vec<Entry> {
        outage((0..20).map(|i| i * 50).chain(later_ms), recover_ms)
    }

    #[test]
    fn fails_a_client_that_keeps_its_rate() {
        let j = outage((0..200).map(|i| i * 50), 10_000);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("kept calling"), "{}", r.summary);
        assert_eq!(r.evidence[0].seqs.len(), 3);
    }

    #[test]
    fn passes_an_open_breaker_with_probes() {
        let j = opened_then([3000, 5000, 7000, 9000, 11_000], 13_000);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        let r = run_one(NAME, "{ require_probe: true }", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    #[test]
    fn fails_a_missing_probe_when_required() {
        // The rate falls, but every return after a pause is a burst of three: no half-open state.
        let bursts = [3000, 5000, 7000, 9000, 11_000]
            .into_iter()
            .flat_map(|t| [t, t + 10, t + 20]);
        let j = opened_then(bursts, 11_030);
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Pass);
        let r = run_one(NAME, "{ require_probe: true }", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("no half-open probe"), "{}", r.summary);
    }

    /// Failures of client `c`, each answered in `took_ms`, the next attempt arriving
    /// `next_ms(i)` after attempt i did; then a success.
    fn paced(n: usize, took_ms: f64, mut next_ms: impl FnMut(usize) -> f64) -> Vec<Entry> {
        let mut j = Vec::new();
        let mut t = 0.0;
        for i in 0..n {
            j.push(entry(0, t).client("c").status(503).took(took_ms).build());
            t += next_ms(i);
        }
        j.push(entry(0, t).client("c").created("o1").build());
        in_arrival_order(j)
    }

    /// A client that retries at once goes at the pace of handling its responses; when that
    /// pace slows (8 ms a retry, then 20 ms: a busy machine), its rate halves without its
    /// waiting at all.
    #[test]
    fn a_client_retrying_at_once_whose_handling_slows_did_not_back_off() {
        let j = paced(400, 1.0, |i| if i < 280 { 9.0 } else { 21.0 });
        let r = run_one(NAME, "{ immediate_ms: 0 }", &j);
        assert_eq!(
            r.verdict,
            Verdict::Pass,
            "counted as they came: {}",
            r.summary
        );
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("under immediate_ms 50"), "{}", r.summary);
        assert!(r.metrics["worst_rate_ratio"].as_f64() > Some(0.9));
    }

    /// Exponential backoff from 10 ms, its first waits flattened by 30 ms of handling: still
    /// a falling rate. And a client whose requests overlap (concurrent, not waits) is counted
    /// as its requests came: 200/s, then 50/s, is easing off.
    #[test]
    fn a_backoff_from_short_waits_and_a_concurrent_client_that_slows_pass() {
        for handling in [0.0, 30.0] {
            let j = paced(10, 1.0, |i| {
                1.0 + handling + 10.0 * f64::powi(2.0, i as i32)
            });
            let r = run_one(NAME, "{}", &j);
            assert_eq!(r.verdict, Verdict::Pass, "{handling}: {}", r.summary);
        }
        let j = paced(630, 30.0, |i| if i < 500 { 5.0 } else { 20.0 });
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert!(r.metrics["worst_rate_ratio"].as_f64() < Some(0.3));
    }

    #[test]
    fn borderline_short_outages_and_anonymous_clients() {
        // 2 s of failures is not a sustained outage at the default 5 s.
        let j = outage((0..40).map(|i| i * 50), 2000);
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Inconclusive);
        assert_eq!(
            run_one(NAME, "{ min_outage_ms: 1000 }", &j).verdict,
            Verdict::Fail
        );
        // Without x-client-id nothing can be attributed.
        let anonymous: Vec<Entry> = (0..200)
            .map(|i| entry(i + 1, i as u32 * 50).status(503).build())
            .collect();
        assert_eq!(
            run_one(NAME, "{}", &anonymous).verdict,
            Verdict::Inconclusive
        );
    }
}
