//! `grpc_pushback`: a gRPC retry that ignored the server's `grpc-retry-pushback-ms`.
//!
//! Why: gRFC A6 gives the server the last word on when a call may be retried. "If the server
//! pushback is a positive value, the client will retry after exactly that delay" (in place of
//! its own backoff), and a negative value — or one that does not parse — means "do not retry"
//! at all. A client that retries sooner, or at all after a refusal, takes away the one lever an
//! overloaded service has over its callers.
//!
//! The delay is measured at the server: the retry's arrival minus the end of the answer that
//! carried the pushback. That over-states the client's wait by the answer's way back and the
//! client's handling of it, so a retry measured sooner than the pushback (by more than
//! `tolerance_ms`) certainly came early. It also means a short pushback tells nothing when it is
//! met: a client that ignores it and retries at once (or after its own short backoff) comes back
//! after that handling anyway. A retry that met a pushback of at most `immediate_ms` +
//! `tolerance_ms` is no evidence of honouring it; with no other, the verdict is inconclusive and
//! says why. A call that was not retried after a negative pushback proves nothing either: the
//! server cannot see whether its client would have retried.
//!
//! Metrics: `pushbacks`, `retries_checked`, `too_early`, `retried_after_stop`,
//! `smallest_margin_ms` (delay minus pushback).

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{non_negative, About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// Configuration of the `grpc_pushback` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcPushbackConfig {
    /// How much sooner than the pushback a retry may arrive (ms).
    pub tolerance_ms: u64,
    /// How long (ms) a client that ignores the pushback may take to come back anyway: a
    /// pushback of at most this plus `tolerance_ms` is met by such a client too. Real time, not
    /// scaled.
    pub immediate_ms: f64,
}

impl Default for GrpcPushbackConfig {
    fn default() -> Self {
        GrpcPushbackConfig {
            tolerance_ms: 5,
            // As retry_after's: a retry at once comes back within tens of milliseconds.
            immediate_ms: 50.0,
        }
    }
}

/// The `grpc_pushback` check.
pub(crate) struct GrpcPushbackCheck {
    cfg: GrpcPushbackConfig,
    early: Findings,
    after_stop: Findings,
    pushbacks: u64,
    checked: u64,
    short_met: u64,
    short_max_ms: i64,
    smallest_margin_ms: Option<f64>,
}

impl Check for GrpcPushbackCheck {
    fn name(&self) -> &'static str {
        GrpcPushbackConfig::NAME
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        if a.entry.pushback_ms.is_some() {
            self.pushbacks += 1;
        }
        let (Some(prev), Some(delay_us)) = (a.previous(), a.delay_us()) else {
            return;
        };
        let Some(pushback) = prev.pushback_ms else {
            return;
        };
        // Sent before the answer that carried the pushback was written: not a retry after it.
        if a.entry.t_recv_us < prev.t_done_us {
            return;
        }
        let key = Some(a.step.key.to_string());
        let seqs = vec![prev.seq, a.entry.seq];
        let delay_ms = delay_us as f64 / 1000.0;
        let what = prev
            .grpc_status
            .map_or("answer".to_string(), |c| c.to_string());
        if pushback < 0 {
            self.after_stop.push(
                format!(
                    "{} retried {delay_ms:.0} ms after a {what} whose grpc-retry-pushback-ms {pushback} said not to retry",
                    a.step.key
                ),
                key,
                seqs,
            );
            return;
        }
        let margin = delay_ms - pushback as f64;
        let early = margin < -(self.cfg.tolerance_ms as f64);
        let telling = pushback as f64 > self.cfg.immediate_ms + self.cfg.tolerance_ms as f64;
        if !early && !telling {
            self.short_met += 1;
            self.short_max_ms = self.short_max_ms.max(pushback);
            return;
        }
        self.checked += 1;
        self.smallest_margin_ms = Some(self.smallest_margin_ms.map_or(margin, |m| m.min(margin)));
        if early {
            self.early.push(
                format!(
                    "{} retried {delay_ms:.0} ms after a {what} that said grpc-retry-pushback-ms {pushback}",
                    a.step.key
                ),
                key,
                seqs,
            );
        }
    }

    fn finish(self: Box<Self>, _facts: &Facts) -> CheckResult {
        let failures = self.early.total() + self.after_stop.total();
        let (verdict, summary) = if failures > 0 {
            let first = self
                .after_stop
                .first_detail()
                .or(self.early.first_detail())
                .unwrap_or_default();
            (
                Verdict::Fail,
                format!(
                    "{} retries ignored the server's pushback ({} too early, {} after a refusal); first: {first}",
                    failures,
                    self.early.total(),
                    self.after_stop.total()
                ),
            )
        } else if self.checked == 0 && self.short_met > 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "cannot tell: the {} retries followed a pushback of at most {} ms, which a \
                     client that ignores it also meets (immediate_ms {} + tolerance_ms {})",
                    self.short_met, self.short_max_ms, self.cfg.immediate_ms, self.cfg.tolerance_ms
                ),
            )
        } else if self.checked == 0 {
            (
                Verdict::Inconclusive,
                if self.pushbacks == 0 {
                    "not enough data: no gRPC answer carried grpc-retry-pushback-ms".to_string()
                } else {
                    format!(
                        "not enough data: {} answers carried a pushback, and no retry followed a \
                         positive one (a call not retried after a negative one proves nothing: \
                         its client may not have meant to retry)",
                        self.pushbacks
                    )
                },
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "every retry waited its pushback ({} retries checked, smallest margin {:.0} ms)",
                    self.checked,
                    self.smallest_margin_ms.unwrap_or(0.0)
                ),
            )
        };
        let mut result = CheckResult::new(GrpcPushbackConfig::NAME, verdict, summary)
            .metric("pushbacks", self.pushbacks)
            .metric("retries_checked", self.checked)
            .metric("too_early", self.early.total())
            .metric("retried_after_stop", self.after_stop.total());
        if let Some(m) = self.smallest_margin_ms {
            result = result.metric("smallest_margin_ms", m);
        }
        let result = attach(result, self.after_stop);
        attach(result, self.early)
    }
}

impl CheckSpec for GrpcPushbackConfig {
    const NAME: &'static str = "grpc_pushback";
    const ABOUT: About = About {
        catches: "a gRPC client that ignores the server's grpc-retry-pushback-ms",
        how: "a retry sooner than the pushback the answer before it carried (beyond `tolerance_ms`), or any retry after a negative pushback, fails",
        evidence: "a retry followed a positive pushback longer than `immediate_ms` + `tolerance_ms`",
        limits: "the wait is measured at the server, so it includes the answer's way back; a short pushback met tells nothing (a client that ignores it meets it too)",
    };

    fn validate(&self) -> Result<(), Invalid> {
        non_negative("immediate_ms", self.immediate_ms)
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(GrpcPushbackCheck {
            cfg: self.clone(),
            early: Findings::new(ctx.max_evidence),
            after_stop: Findings::new(ctx.max_evidence),
            pushbacks: 0,
            checked: 0,
            short_met: 0,
            short_max_ms: 0,
            smallest_margin_ms: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use history::GrpcCode;
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "grpc_pushback";
    const M: &str = "orders.v1.Orders/GetOrder";

    fn pushed(seq: u64, t: f64, key: &str, ms: i64) -> history::Entry {
        entry(seq, t)
            .grpc(M)
            .key(key)
            .grpc_status(GrpcCode::Unavailable)
            .pushback(ms)
            .build()
    }

    #[test]
    fn fails_a_retry_sooner_than_the_pushback() {
        // The answer ends at 1 ms; the retry comes 300 ms later, the pushback said 1 s.
        let j = [
            pushed(1, 0.0, "k", 1000),
            entry(2, 301).grpc(M).key("k").previous_attempts(1).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["too_early"], 1);
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
    }

    #[test]
    fn fails_any_retry_after_a_negative_pushback() {
        let j = [
            pushed(1, 0.0, "k", -1),
            entry(2, 5001).grpc(M).key("k").previous_attempts(1).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("said not to retry"), "{}", r.summary);
        assert_eq!(r.metrics["retried_after_stop"], 1);
    }

    #[test]
    fn passes_retries_that_waited_and_is_inconclusive_when_nothing_tells() {
        let j = [
            pushed(1, 0.0, "a", 500),
            entry(2, 520).grpc(M).key("a").previous_attempts(1).build(),
            pushed(3, 600.0, "b", -1),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["retries_checked"], 1);
        // A 20 ms pushback met: a client that ignores it comes back as late.
        let short = [
            pushed(1, 0.0, "a", 20),
            entry(2, 40).grpc(M).key("a").previous_attempts(1).build(),
        ];
        let r = run_one(NAME, "{}", &short);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert!(r.summary.contains("cannot tell"), "{}", r.summary);
        // Only a refusal, not retried: nothing proves the client would have retried.
        let stop = [pushed(1, 0.0, "a", -1)];
        let r = run_one(NAME, "{}", &stop);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        let none = [entry(1, 0).grpc(M).build()];
        assert_eq!(run_one(NAME, "{}", &none).verdict, Verdict::Inconclusive);
    }
}
