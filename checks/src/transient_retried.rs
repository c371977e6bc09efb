//! `transient_retried`: a client that gives up on the first transient failure.
//!
//! Why: a 503, a dropped connection or a gRPC UNAVAILABLE says "not now", not "never"; the one
//! thing a retry policy must do is try again. A client built without retries (or with retries
//! switched off by a wrong predicate — only connection errors, only GETs) turns every blip of its
//! dependency into a failure its own users see. The other retry checks judge how a client retries;
//! this one judges whether it does.
//!
//! An operation's first attempt that failed transiently (no answer, 5xx, 408, 429; for gRPC
//! UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL, UNKNOWN, DATA_LOSS: see
//! [`crate::failure::is_transient`]) must be followed by a second attempt of the same operation.
//! Every such operation retried passes; none retried fails; some retried and some not is weak (a
//! retry budget or a breaker refusing retries does that on purpose).
//!
//! Metrics: `operations_failed_first`, `retried`, `not_retried`.

use std::collections::HashMap;

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::failure::is_transient;
use super::spec::{About, CheckSpec};
use super::{Attempt, Check, ClosedOperation, Context};

/// Configuration of the `transient_retried` check (nothing to set: what is transient is
/// [`crate::failure::is_transient`]'s, shared with `circuit_breaker`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TransientRetriedConfig {}

/// A first attempt that failed transiently, waiting to learn whether a second one follows.
struct Pending {
    key: String,
    seq: u64,
    what: String,
}

/// The `transient_retried` check.
pub(crate) struct TransientRetriedCheck {
    /// Operations whose first attempt failed transiently and that have no second attempt yet;
    /// dropped when the second comes or the operation closes, so it holds open operations only.
    pending: HashMap<u64, Pending>,
    failed_first: u64,
    retried: u64,
    not_retried: Findings,
}

impl TransientRetriedCheck {
    /// A check keeping `ctx.max_evidence` pieces of evidence.
    pub(crate) fn new(ctx: Context) -> Self {
        TransientRetriedCheck {
            pending: HashMap::new(),
            failed_first: 0,
            retried: 0,
            not_retried: Findings::new(ctx.max_evidence),
        }
    }
}

/// What the client saw, in words: `503`, `UNAVAILABLE`, `no answer (dropped)`.
fn seen(a: &Attempt<'_>) -> String {
    let e = a.entry;
    if let Some(code) = e.grpc_status {
        return code.to_string();
    }
    match e.status.filter(|_| e.answered()) {
        Some(s) => s.to_string(),
        None => format!("no answer ({})", e.outcome.as_str()),
    }
}

impl Check for TransientRetriedCheck {
    fn name(&self) -> &'static str {
        TransientRetriedConfig::NAME
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        if a.index() == 1 {
            if is_transient(a.entry) {
                self.failed_first += 1;
                self.pending.insert(
                    a.step.op,
                    Pending {
                        key: a.step.key.to_string(),
                        seq: a.entry.seq,
                        what: seen(a),
                    },
                );
            }
        } else if self.pending.remove(&a.step.op).is_some() {
            self.retried += 1;
        }
    }

    fn close(&mut self, op: &ClosedOperation) {
        if let Some(p) = self.pending.remove(&op.op) {
            self.not_retried.push(
                format!("{} was not retried after {} (seq {})", p.key, p.what, p.seq),
                Some(p.key),
                vec![p.seq],
            );
        }
    }

    fn finish(mut self: Box<Self>, _facts: &Facts) -> CheckResult {
        // Operations still open at the end had their chance: the journal ended after them.
        let open: Vec<u64> = self.pending.keys().copied().collect();
        for op in open {
            if let Some(p) = self.pending.remove(&op) {
                self.not_retried.push(
                    format!("{} was not retried after {} (seq {})", p.key, p.what, p.seq),
                    Some(p.key),
                    vec![p.seq],
                );
            }
        }
        let missed = self.not_retried.total();
        let (verdict, summary) = if self.failed_first == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no operation's first attempt failed transiently (no answer, \
                 5xx, 408, 429, or a transient gRPC status)"
                    .to_string(),
            )
        } else if self.retried == 0 {
            (
                Verdict::Fail,
                format!(
                    "no retry: none of the {} operations whose first attempt failed transiently \
                     was tried again; first: {}",
                    self.failed_first,
                    self.not_retried.first_detail().unwrap_or_default()
                ),
            )
        } else if missed > 0 {
            (
                Verdict::Weak,
                format!(
                    "{} of {} operations whose first attempt failed transiently were retried, \
                     {missed} were not (a retry budget or a breaker refuses some on purpose); \
                     first: {}",
                    self.retried,
                    self.failed_first,
                    self.not_retried.first_detail().unwrap_or_default()
                ),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "all {} operations whose first attempt failed transiently were retried",
                    self.failed_first
                ),
            )
        };
        let result = CheckResult::new(TransientRetriedConfig::NAME, verdict, summary)
            .metric("operations_failed_first", self.failed_first)
            .metric("retried", self.retried)
            .metric("not_retried", missed);
        attach(result, self.not_retried)
    }
}

impl CheckSpec for TransientRetriedConfig {
    const NAME: &'static str = "transient_retried";
    const ABOUT: About = About {
        catches: "a client that gives up on the first transient failure",
        how: "an operation whose first attempt failed transiently (no answer, 5xx, 408, 429; gRPC UNAVAILABLE and the like) must have a second attempt: all retried passes, none fails, some is weak (a budget or a breaker)",
        evidence: "an operation's first attempt failed transiently",
        limits: "needs attempts grouped (a key, an operation header, or `x-client-id` + same body); a client that retries under a new key and body looks like one that gave up",
    };

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(TransientRetriedCheck::new(ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::{GrpcCode, Outcome};
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "transient_retried";

    #[test]
    fn passes_when_every_transient_failure_is_retried() {
        let j = [
            entry(1, 0).key("a").status(503).build(),
            entry(2, 0).key("b").no_response(Outcome::Dropped).build(),
            entry(3, 1000).key("a").created("o1").build(),
            entry(4, 1200).key("b").created("o2").build(),
            entry(5, 1300).key("c").created("o3").build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["operations_failed_first"], 2);
        assert_eq!(r.metrics["retried"], 2);
    }

    #[test]
    fn fails_a_client_that_never_retries() {
        let j = [
            entry(1, 0).key("a").status(503).build(),
            entry(2, 0).key("b").status(503).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["not_retried"], 2);
        assert_eq!(r.evidence.len(), 2);
        assert_eq!(r.evidence[0].seqs, vec![1]);
        assert!(r.summary.contains("503"), "{}", r.summary);
    }

    #[test]
    fn some_retried_and_some_not_is_weak() {
        let j = [
            entry(1, 0).key("a").status(503).build(),
            entry(2, 0).key("b").status(503).build(),
            entry(3, 1000).key("a").created("o1").build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        assert!(r.passed());
    }

    #[test]
    fn a_grpc_unavailable_counts_and_a_4xx_does_not() {
        let call = |seq, t, code| {
            entry(seq, t)
                .key("g")
                .grpc("orders.v1.Orders/CreateOrder")
                .grpc_status(code)
                .build()
        };
        let r = run_one(NAME, "{}", &[call(1, 0, GrpcCode::Unavailable)]);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("UNAVAILABLE"), "{}", r.summary);
        let r = run_one(NAME, "{}", &[entry(1, 0).key("a").status(400).build()]);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
    }
}
