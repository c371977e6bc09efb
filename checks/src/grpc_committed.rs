//! `grpc_committed`: a gRPC call retried after it was committed.
//!
//! Why: gRFC A6 commits a call once its client has received the server's Response-Headers — "the
//! RPC is committed... no more retry attempts will be made" — because from then on the server
//! has begun to answer: it processed the call, and only the end of its answer was lost. A
//! client that retries a committed call sends a request that was, as far as it can know, already
//! acted on: with a create, a second order.
//!
//! What the server saw: an answer whose headers went out before a failing status (`committed` in
//! the journal: a `grpc_after_headers` fault, an upstream that failed mid-answer, a stream cut
//! after its headers), then a later attempt of the same operation.
//!
//! Metrics: `committed_failures`, `retried`.

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{About, CheckSpec};
use super::{Attempt, Check, Context};

/// Configuration of the `grpc_committed` check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcCommittedConfig {
    /// Leave out later attempts that carry no `grpc-previous-rpc-attempts`: new calls an
    /// application made on purpose, not its gRPC library's retries.
    pub ignore_new_calls: bool,
}

/// The `grpc_committed` check.
pub(crate) struct GrpcCommittedCheck {
    cfg: GrpcCommittedConfig,
    findings: Findings,
    committed_failures: u64,
}

impl Check for GrpcCommittedCheck {
    fn name(&self) -> &'static str {
        GrpcCommittedConfig::NAME
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        if e.is_grpc() && e.committed == Some(true) && super::failure::failed(e) {
            self.committed_failures += 1;
        }
        let Some(prev) = a.previous() else { return };
        if !(prev.grpc && prev.committed && prev.failed) || e.t_recv_us < prev.t_done_us {
            return;
        }
        if self.cfg.ignore_new_calls && e.grpc_previous_attempts.unwrap_or(0) == 0 {
            return;
        }
        let how = prev.grpc_status.map_or_else(
            || format!("{:?}", prev.outcome).to_lowercase(),
            |c| c.to_string(),
        );
        self.findings.push(
            format!(
                "{} retried after a committed call (headers, then {how}): attempt {} (seq {}) followed seq {}",
                a.step.key,
                a.index(),
                e.seq,
                prev.seq
            ),
            Some(a.step.key.to_string()),
            vec![prev.seq, e.seq],
        );
    }

    fn finish(self: Box<Self>, _facts: &Facts) -> CheckResult {
        let (verdict, summary) = if let Some(first) = self.findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} retries of a committed call; first: {first}",
                    self.findings.total()
                ),
            )
        } else if self.committed_failures == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no gRPC call failed after its answer's headers were sent"
                    .to_string(),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "no committed call was retried ({} failed after their headers)",
                    self.committed_failures
                ),
            )
        };
        let result = CheckResult::new(GrpcCommittedConfig::NAME, verdict, summary)
            .metric("committed_failures", self.committed_failures)
            .metric("retried", self.findings.total());
        attach(result, self.findings)
    }
}

impl CheckSpec for GrpcCommittedConfig {
    const NAME: &'static str = "grpc_committed";
    const ABOUT: About = About {
        catches: "a gRPC call retried after the server began to answer it",
        how: "a later attempt of an operation after an answer whose headers came before a failing status (`committed`) fails",
        evidence: "a gRPC call failed after its answer's headers were sent",
        limits: "needs attempts grouped (metadata `idempotency-key`, an operation header, or `x-client-id` + same message); a new call the application makes on purpose counts unless `ignore_new_calls`",
    };

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(GrpcCommittedCheck {
            cfg: self.clone(),
            findings: Findings::new(ctx.max_evidence),
            committed_failures: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use history::GrpcCode;
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "grpc_committed";
    const M: &str = "orders.v1.Orders/CreateOrder";

    fn committed_failure(seq: u64, key: &str) -> history::Entry {
        entry(seq, 0)
            .grpc(M)
            .key(key)
            .grpc_status(GrpcCode::Unavailable)
            .committed()
            .build()
    }

    #[test]
    fn fails_a_retry_after_a_committed_failure() {
        let j = [
            committed_failure(1, "k"),
            entry(2, 100).grpc(M).key("k").previous_attempts(1).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
        assert!(
            r.summary.contains("headers, then UNAVAILABLE"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn passes_retries_of_uncommitted_failures_and_an_unretried_committed_one() {
        let j = [
            entry(1, 0)
                .grpc(M)
                .key("a")
                .grpc_status(GrpcCode::Unavailable)
                .build(),
            entry(2, 100).grpc(M).key("a").previous_attempts(1).build(),
            committed_failure(3, "b"),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["committed_failures"], 1);
    }

    #[test]
    fn new_calls_can_be_left_out_and_nothing_to_judge_is_inconclusive() {
        let j = [
            committed_failure(1, "k"),
            entry(2, 100).grpc(M).key("k").build(),
        ];
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Fail);
        let r = run_one(NAME, "{ ignore_new_calls: true }", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        // A committed OK is a success, not a failure to judge.
        let ok = [entry(1, 0).grpc(M).key("k").build()];
        assert_eq!(run_one(NAME, "{}", &ok).verdict, Verdict::Inconclusive);
    }
}
