//! `retry_on_4xx`: a retry after a client error that will not go away.
//!
//! Why: retry only transient failures. A 400, 401, 403, 404 or 422 says the request itself is wrong;
//! sending it again gets the same answer, adds load, and — with a validation error on a payment —
//! can hide the real bug behind a retry loop. 408 (timeout), 429 (throttled) and 409 (in-flight
//! conflict of an idempotent request) are the 4xx worth retrying, after the advertised delay.
//!
//! A retry is a later attempt of the same operation (see [`super::operations`]). A retry after a
//! status in `never_retry` fails; after one in `may_retry` is fine; after any other 4xx it is
//! flagged as weak, since the right policy depends on the API.
//!
//! Metrics: `responses_4xx`, `retried_forbidden`, `retried_allowed`, `retried_other`.

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{About, CheckSpec};
use super::{Attempt, Check, Context};

/// Configuration of the `retry_on_4xx` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RetryOn4xxConfig {
    /// Statuses that must never be retried.
    pub never_retry: Vec<u16>,
    /// 4xx statuses that may be retried.
    pub may_retry: Vec<u16>,
}

impl Default for RetryOn4xxConfig {
    fn default() -> Self {
        RetryOn4xxConfig {
            never_retry: vec![400, 401, 403, 404, 422],
            may_retry: vec![408, 409, 429],
        }
    }
}

/// The `retry_on_4xx` check.
pub(crate) struct RetryOn4xxCheck {
    cfg: RetryOn4xxConfig,
    forbidden: Findings,
    other: Findings,
    responses_4xx: u64,
    retried_allowed: u64,
}

impl RetryOn4xxCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &RetryOn4xxConfig, ctx: Context) -> Self {
        RetryOn4xxCheck {
            cfg: cfg.clone(),
            forbidden: Findings::new(ctx.max_evidence),
            other: Findings::new(ctx.max_evidence),
            responses_4xx: 0,
            retried_allowed: 0,
        }
    }
}

impl Check for RetryOn4xxCheck {
    fn name(&self) -> &'static str {
        "retry_on_4xx"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        if a.entry.status.is_some_and(|s| (400..500).contains(&s)) {
            self.responses_4xx += 1;
        }
        let Some(prev) = a.previous() else { return };
        let Some(status) = prev.status.filter(|s| (400..500).contains(s)) else {
            return;
        };
        let detail = format!(
            "{} retried after {status}: attempt {} (seq {}) followed seq {}",
            a.step.key,
            a.index(),
            a.entry.seq,
            prev.seq
        );
        let key = Some(a.step.key.to_string());
        let seqs = vec![prev.seq, a.entry.seq];
        if self.cfg.never_retry.contains(&status) {
            self.forbidden.push(detail, key, seqs);
        } else if self.cfg.may_retry.contains(&status) {
            self.retried_allowed += 1;
        } else {
            self.other.push(detail, key, seqs);
        }
    }

    fn finish(self: Box<Self>, _facts: &Facts) -> CheckResult {
        let (verdict, summary) = if let Some(first) = self.forbidden.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} retries after a non-retryable 4xx; first: {first}",
                    self.forbidden.total()
                ),
            )
        } else if let Some(first) = self.other.first_detail() {
            (
                Verdict::Weak,
                format!(
                    "{} retries after a 4xx in neither list (never_retry, may_retry); first: {first}",
                    self.other.total()
                ),
            )
        } else if self.responses_4xx == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no 4xx response was seen".to_string(),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "no retry after a non-retryable 4xx ({} 4xx responses, {} allowed retries)",
                    self.responses_4xx, self.retried_allowed
                ),
            )
        };
        let result = CheckResult::new("retry_on_4xx", verdict, summary)
            .metric("responses_4xx", self.responses_4xx)
            .metric("retried_forbidden", self.forbidden.total())
            .metric("retried_allowed", self.retried_allowed)
            .metric("retried_other", self.other.total());
        let result = attach(result, self.forbidden);
        attach(result, self.other)
    }
}

impl CheckSpec for RetryOn4xxConfig {
    const NAME: &'static str = "retry_on_4xx";
    const ABOUT: About = About {
        catches: "retrying a request that cannot succeed",
        how: "a later attempt of an operation after 400, 401, 403, 404 or 422 (`never_retry`) fails; after 408, 429, 409 (`may_retry`) is fine; after another 4xx is weak",
        evidence: "a 4xx response was seen",
        limits: "needs attempts grouped (a key, an operation header, or `x-client-id` + same body)",
    };

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(RetryOn4xxCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "retry_on_4xx";

    #[test]
    fn fails_a_retry_of_a_400_under_a_new_key() {
        // A client that regenerates its key on every attempt still retried the same request.
        let j = [
            entry(1, 0)
                .client("c")
                .body("b")
                .key("k1")
                .status(400)
                .build(),
            entry(2, 50)
                .client("c")
                .body("b")
                .key("k2")
                .status(400)
                .build(),
            entry(3, 100)
                .client("c")
                .body("b")
                .key("k3")
                .status(400)
                .build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["retried_forbidden"], 2);
    }

    #[test]
    fn fails_a_retry_after_404() {
        let j = [
            entry(1, 0).key("k").status(404).build(),
            entry(2, 1000).key("k").status(404).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
        assert_eq!(r.evidence[0].key.as_deref(), Some("k"));
    }

    #[test]
    fn fails_a_retry_after_422_found_by_fingerprint() {
        // No key: the retry is tied by client + body after the failure.
        let j = [
            entry(1, 0).client("c").body("b").status(422).build(),
            entry(2, 100).client("c").body("b").status(422).build(),
        ];
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Fail);
    }

    #[test]
    fn passes_retries_after_429_408_409_and_an_unretried_400() {
        let j = [
            entry(1, 0).key("a").status(429).build(),
            entry(2, 1000).key("a").status(408).build(),
            entry(3, 2000).key("a").status(409).build(),
            entry(4, 3000).key("a").created("o1").build(),
            entry(5, 3000).key("b").status(400).build(),
            entry(6, 3000).key("c").status(201).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["retried_allowed"], 3);
    }

    #[test]
    fn borderline_other_4xx_is_weak_and_lists_are_configurable() {
        let j = [
            entry(1, 0).key("k").status(410).build(),
            entry(2, 1000).key("k").status(410).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak);
        assert!(r.passed());
        let r = run_one(NAME, "{ never_retry: [410] }", &j);
        assert_eq!(r.verdict, Verdict::Fail);
        let nothing = [entry(1, 0).status(200).build()];
        assert_eq!(run_one(NAME, "{}", &nothing).verdict, Verdict::Inconclusive);
    }
}
