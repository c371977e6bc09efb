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
//! (fail). With `require_probe`, the outage must also show a half-open probe: an attempt after a
//! pause of `min_pause_ms` that is followed by another such pause, or by the end of the outage
//! (a probe that succeeded). Requests without `x-client-id` are not attributed and are skipped.
//!
//! Metrics: `outages`, `worst_rate_ratio`, `outages_without_probe`.

use history::Facts;
use reports::{CheckResult, Verdict};
use serde::{Deserialize, Serialize};

use super::evidence::{attach, Findings};
use super::failure;
use super::idle::IdleMap;
use super::spec::{non_negative, scale_ms, About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// Configuration of the `circuit_breaker` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CircuitBreakerConfig {
    /// Shortest run of consecutive failures that counts as an outage (ms).
    pub min_outage_ms: u64,
    /// Fewest attempts in an outage for its rates to mean anything.
    pub min_attempts: usize,
    /// Highest allowed ratio of the second half's attempt rate to the first half's.
    pub max_rate_ratio: f64,
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
            require_probe: false,
            min_pause_ms: 1_000,
            per_target: false,
        }
    }
}

/// The `circuit_breaker` check.
pub(crate) struct CircuitBreakerCheck {
    cfg: CircuitBreakerConfig,
    /// Consecutive failures per client: (arrival µs, seq).
    streaks: IdleMap<String, Vec<(u64, u64)>>,
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

    fn judge(&mut self, who: &str, times: &[(u64, u64)], end: Option<(u64, u64)>) {
        let (Some(&(first, first_seq)), Some(&(last, last_seq))) = (times.first(), times.last())
        else {
            return;
        };
        let span = last - first;
        if span < self.cfg.min_outage_ms.saturating_mul(1000) || times.len() < self.cfg.min_attempts
        {
            return;
        }
        self.outages += 1;
        let mid = first + span / 2;
        let n1 = times.iter().take_while(|(t, _)| *t < mid).count().max(1);
        let n2 = times.len() - n1;
        let ratio = n2 as f64 / n1 as f64;
        self.worst_ratio = Some(self.worst_ratio.map_or(ratio, |w| w.max(ratio)));
        let half_s = span as f64 / 2e6;
        let mid_seq = times.get(n1).map_or(last_seq, |(_, s)| *s);
        if ratio > self.cfg.max_rate_ratio {
            self.findings.push(
                format!(
                    "client {who} kept calling through a {:.1} s outage: {:.1}/s in the first \
                     half, {:.1}/s in the second (ratio {ratio:.2} > {})",
                    span as f64 / 1e6,
                    n1 as f64 / half_s,
                    n2 as f64 / half_s,
                    self.cfg.max_rate_ratio
                ),
                Some(who.to_string()),
                vec![first_seq, mid_seq, last_seq],
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
                vec![first_seq, last_seq],
            );
        }
    }

    fn has_probe(&self, times: &[(u64, u64)], end: Option<(u64, u64)>) -> bool {
        let pause = self.cfg.min_pause_ms.saturating_mul(1000);
        let all: Vec<u64> = times.iter().chain(end.iter()).map(|(t, _)| *t).collect();
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
            self.streaks
                .touch(who, e.t_recv_us, Vec::new)
                .push((e.t_recv_us, e.seq));
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
        how: "per client, a run of consecutive failures of at least `min_outage_ms` and `min_attempts`: the attempt rate in its second half against its first (`max_rate_ratio`); with `require_probe`, a half-open probe (a pause, then one attempt) must be seen",
        limits: "needs `x-client-id`; few attempts per client make it inconclusive",
    };

    fn scale(&mut self, f: f64) {
        scale_ms(&mut self.min_outage_ms, f);
        scale_ms(&mut self.min_pause_ms, f);
    }

    fn validate(&self) -> Result<(), Invalid> {
        non_negative("max_rate_ratio", self.max_rate_ratio)
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(CircuitBreakerCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::Entry;
    use reports::Verdict;

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
