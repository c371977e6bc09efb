//! `ack_latency`: every webhook delivery the consumer acknowledged, it acknowledged within the
//! provider's timeout.
//!
//! Why: a provider waits a few seconds for the 2xx (GitHub 10 s, Stripe about as long, Svix
//! 15 s) and counts a slower answer as a failure: it redelivers, and the consumer, still busy with
//! the first delivery, gets the same event again — a slow acknowledgement is itself the cause of
//! duplicates. The fix is well known (acknowledge at once, do the work from a queue); this check
//! says whether it is needed. Every genuine delivery that got an answer is timed from the request
//! leaving to the answer's end; a 2xx later than `timeout_ms`, and a delivery that got no answer
//! within the sender's own timeout, are findings. Non-2xx answers are other checks' business, and
//! answers the sender dropped on purpose (`lost_ack`) are not judged.
//!
//! `timeout_ms` is the scenario's own time (scaled by `--time-scale`); `harness deliver` sets it
//! to its `--timeout`, and a scenario whose `ack_latency` names none gets its deliver phase's.
//!
//! Metrics: `acknowledged`, `slow`, `timed_out`, `timeout_ms`, `p50_ms`, `p99_ms`, `max_ms`.

use history::{Facts, Outcome};
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{scale_ms, About, CheckSpec};
use super::{Attempt, Check, Context};

/// The provider's timeout when none is given: GitHub's documented 10 s (and Stripe's practice).
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// Configuration of the `ack_latency` check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AckLatencyConfig {
    /// The provider's timeout, ms (default: the deliver phase's `timeout`, else 10 000).
    pub timeout_ms: Option<u64>,
}

impl AckLatencyConfig {
    /// The timeout the check holds acknowledgements to, ms.
    pub fn timeout(&self) -> u64 {
        self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)
    }
}

/// Most latency samples kept for the percentiles (an even thinning beyond).
const SAMPLES_KEPT: usize = 100_000;

/// The `ack_latency` check.
pub(crate) struct AckLatencyCheck {
    timeout_us: u64,
    samples_us: Vec<u64>,
    seen: u64,
    stride: u64,
    max_us: u64,
    acknowledged: u64,
    slow: u64,
    timed_out: u64,
    findings: Findings,
}

impl AckLatencyCheck {
    pub(crate) fn new(cfg: &AckLatencyConfig, ctx: Context) -> Self {
        AckLatencyCheck {
            timeout_us: cfg.timeout().saturating_mul(1000),
            samples_us: Vec::new(),
            seen: 0,
            stride: 1,
            max_us: 0,
            acknowledged: 0,
            slow: 0,
            timed_out: 0,
            findings: Findings::new(ctx.max_evidence),
        }
    }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl Check for AckLatencyCheck {
    fn name(&self) -> &'static str {
        "ack_latency"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        if !e.is_genuine_delivery() || e.answer_dropped {
            return;
        }
        let took = e.t_done_us.saturating_sub(e.t_recv_us);
        let id = e.idempotency_key.clone();
        if e.outcome == Outcome::Hung {
            self.timed_out += 1;
            self.findings.push(
                format!(
                    "delivery of {} got no answer within {:.0} ms: the provider redelivers",
                    id.as_deref().unwrap_or("an event"),
                    ms(took)
                ),
                id,
                vec![e.seq],
            );
            return;
        }
        if !(e.answered() && e.status.is_some_and(|s| (200..300).contains(&s))) {
            return;
        }
        self.acknowledged += 1;
        self.max_us = self.max_us.max(took);
        // Every `stride`-th sample: when the kept ones reach their bound, every other one is
        // dropped and the stride doubles, so they stay an even thinning of the whole run.
        self.seen += 1;
        if self.seen.is_multiple_of(self.stride) {
            self.samples_us.push(took);
            if self.samples_us.len() >= SAMPLES_KEPT {
                let mut i = 0u64;
                self.samples_us.retain(|_| {
                    i += 1;
                    i.is_multiple_of(2)
                });
                self.stride *= 2;
            }
        }
        if took > self.timeout_us {
            self.slow += 1;
            self.findings.push(
                format!(
                    "delivery of {} was acknowledged after {:.1} ms, beyond the provider's {:.0} \
                     ms: counted as failed, and redelivered",
                    id.as_deref().unwrap_or("an event"),
                    ms(took),
                    ms(self.timeout_us)
                ),
                id,
                vec![e.seq],
            );
        }
    }

    fn finish(mut self: Box<Self>, _facts: &Facts) -> CheckResult {
        self.samples_us.sort_unstable();
        let pct = |p: f64| -> f64 {
            if self.samples_us.is_empty() {
                return 0.0;
            }
            let i = ((self.samples_us.len() as f64 - 1.0) * p).round() as usize;
            ms(self.samples_us[i.min(self.samples_us.len() - 1)])
        };
        let (p50, p99) = (pct(0.5), pct(0.99));
        let (verdict, summary) = if let Some(first) = self.findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} deliveries not acknowledged within {:.0} ms ({} slow, {} with no answer); \
                     first: {first}",
                    self.findings.total(),
                    ms(self.timeout_us),
                    self.slow,
                    self.timed_out
                ),
            )
        } else if self.acknowledged == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no delivery was acknowledged (2xx)".to_string(),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "all {} acknowledgements within {:.0} ms (p50 {p50:.1} ms, p99 {p99:.1} ms, max \
                     {:.1} ms)",
                    self.acknowledged,
                    ms(self.timeout_us),
                    ms(self.max_us)
                ),
            )
        };
        let result = CheckResult::new("ack_latency", verdict, summary)
            .metric("acknowledged", self.acknowledged)
            .metric("slow", self.slow)
            .metric("timed_out", self.timed_out)
            .metric("timeout_ms", self.timeout_us / 1000)
            .metric("p50_ms", p50)
            .metric("p99_ms", p99)
            .metric("max_ms", ms(self.max_us));
        attach(result, self.findings)
    }
}

impl CheckSpec for AckLatencyConfig {
    const NAME: &'static str = "ack_latency";
    const ABOUT: About = About {
        catches: "a webhook acknowledged too slowly, which makes the provider redeliver",
        how: "each genuine delivery's 2xx must end within `timeout_ms` of its sending (default \
              the deliver phase's timeout, else 10 s); no answer at all is a miss too",
        evidence: "at least one delivery was acknowledged and none was \
                   acknowledged late or left unanswered",
        limits: "judges the consumer's answer, not the work it queued; answers dropped by the \
                 sender on purpose are not timed",
    };

    fn scale(&mut self, f: f64) {
        if let Some(t) = &mut self.timeout_ms {
            scale_ms(t, f);
        }
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(AckLatencyCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::Outcome;
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "ack_latency";

    fn d(seq: u64, t: f64, id: &str) -> history::sample::EntryBuilder {
        entry(seq, t).delivery(id, "in_1", "invoice.paid", 2)
    }

    #[test]
    fn fails_an_acknowledgement_slower_than_the_timeout() {
        let j = [
            d(1, 0.0, "e1").took(20.0).build(),
            d(2, 1.0, "e2").took(1500.0).build(),
        ];
        let r = run_one(NAME, "{ timeout_ms: 1000 }", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert!(
            r.summary
                .contains("acknowledged after 1500.0 ms, beyond the provider's 1000 ms"),
            "{r}"
        );
        assert_eq!(r.evidence[0].seqs, vec![2]);
        // Within GitHub's 10 s default, it passes.
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{r}");
        assert_eq!(r.metrics["timeout_ms"], 10_000);
        assert_eq!(r.metrics["max_ms"], 1500.0);
    }

    #[test]
    fn fails_a_delivery_with_no_answer() {
        let j = [
            d(1, 0.0, "e1").build(),
            d(2, 1.0, "e2")
                .no_response(Outcome::Hung)
                .took(10_000.0)
                .build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert_eq!(r.metrics["timed_out"], 1);
    }

    #[test]
    fn dropped_answers_refusals_and_forgeries_are_not_timed() {
        let j = [
            d(1, 0.0, "e1").took(5.0).build(),
            d(2, 1.0, "e2").answer_dropped().took(50_000.0).build(),
            d(3, 2.0, "e3").status(500).took(50_000.0).build(),
            d(4, 3.0, "f1")
                .forged("signature")
                .status(200)
                .took(50_000.0)
                .build(),
        ];
        let r = run_one(NAME, "{ timeout_ms: 1000 }", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{r}");
        assert_eq!(r.metrics["acknowledged"], 1);
        let refused = [d(1, 0.0, "e1").status(400).build()];
        assert_eq!(run_one(NAME, "{}", &refused).verdict, Verdict::Inconclusive);
    }

    #[test]
    fn the_timeout_scales_with_the_scenario() {
        let mut cfg = super::AckLatencyConfig {
            timeout_ms: Some(10_000),
        };
        crate::CheckSpec::scale(&mut cfg, 0.05);
        assert_eq!(cfg.timeout(), 500);
        let mut unset = super::AckLatencyConfig::default();
        crate::CheckSpec::scale(&mut unset, 0.05);
        assert_eq!(unset.timeout(), 10_000);
    }
}
