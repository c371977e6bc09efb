//! `grpc_non_retryable`: a gRPC call retried after a status that says retrying cannot help.
//!
//! Why: gRFC A6 retries only the codes a service config lists in `retryableStatusCodes`, and
//! the codes that describe the request itself — INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//! PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED — give the
//! same answer however often they are asked (`google/rpc/code.proto` says of each when a client
//! may retry). A policy that lists one of them (a copy-pasted config, `retryableStatusCodes` set
//! to every code) sends a doomed request again, adds load, and can hide the real bug; hedging
//! with such a code in `nonFatalStatusCodes` does the same.
//!
//! A retry is a later attempt of the same operation (see [`super::operations`]) that arrived
//! after the non-retryable answer was written (a hedge sent before it is not a retry *after* it).
//!
//! Metrics: `non_retryable_answers`, `retried`.

use history::{Facts, GrpcCode};
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// Configuration of the `grpc_non_retryable` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcNonRetryableConfig {
    /// Status codes after which a call must not be retried, by name (or number).
    pub codes: Vec<GrpcCode>,
}

impl Default for GrpcNonRetryableConfig {
    fn default() -> Self {
        GrpcNonRetryableConfig {
            codes: vec![
                GrpcCode::InvalidArgument,
                GrpcCode::NotFound,
                GrpcCode::AlreadyExists,
                GrpcCode::PermissionDenied,
                GrpcCode::Unauthenticated,
                GrpcCode::FailedPrecondition,
                GrpcCode::OutOfRange,
                GrpcCode::Unimplemented,
            ],
        }
    }
}

/// The `grpc_non_retryable` check.
pub(crate) struct GrpcNonRetryableCheck {
    cfg: GrpcNonRetryableConfig,
    findings: Findings,
    answers: u64,
}

impl Check for GrpcNonRetryableCheck {
    fn name(&self) -> &'static str {
        GrpcNonRetryableConfig::NAME
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        if a.entry
            .grpc_status
            .is_some_and(|c| self.cfg.codes.contains(&c))
        {
            self.answers += 1;
        }
        let Some(prev) = a.previous() else { return };
        let Some(code) = prev.grpc_status.filter(|c| self.cfg.codes.contains(c)) else {
            return;
        };
        if a.entry.t_recv_us < prev.t_done_us {
            return;
        }
        self.findings.push(
            format!(
                "{} retried after {code}: attempt {} (seq {}{}) followed seq {}",
                a.step.key,
                a.index(),
                a.entry.seq,
                a.entry
                    .grpc_previous_attempts
                    .map_or(String::new(), |n| format!(
                        ", grpc-previous-rpc-attempts {n}"
                    )),
                prev.seq
            ),
            Some(a.step.key.to_string()),
            vec![prev.seq, a.entry.seq],
        );
    }

    fn finish(self: Box<Self>, _facts: &Facts) -> CheckResult {
        let (verdict, summary) = if let Some(first) = self.findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} retries after a non-retryable gRPC status; first: {first}",
                    self.findings.total()
                ),
            )
        } else if self.answers == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: no gRPC call was answered with a non-retryable code ({})",
                    names(&self.cfg.codes)
                ),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "no retry after a non-retryable gRPC status ({} such answers)",
                    self.answers
                ),
            )
        };
        let result = CheckResult::new(GrpcNonRetryableConfig::NAME, verdict, summary)
            .metric("non_retryable_answers", self.answers)
            .metric("retried", self.findings.total());
        attach(result, self.findings)
    }
}

fn names(codes: &[GrpcCode]) -> String {
    codes
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl CheckSpec for GrpcNonRetryableConfig {
    const NAME: &'static str = "grpc_non_retryable";
    const ABOUT: About = About {
        catches: "a gRPC call retried after a status retrying cannot fix",
        how: "a later attempt of an operation, arriving after an answer of INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE or UNIMPLEMENTED (`codes`), fails",
        evidence: "a gRPC call was answered with one of `codes`",
        limits: "needs attempts grouped (metadata `idempotency-key`, an operation header, or `x-client-id` + same message); an application that re-issues the call on purpose is flagged too",
    };

    fn validate(&self) -> Result<(), Invalid> {
        if self.codes.contains(&GrpcCode::Ok) {
            return Err(Invalid::new(
                "codes",
                "OK is not a failure: list the codes after which a call must not be retried",
            ));
        }
        Ok(())
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(GrpcNonRetryableCheck {
            cfg: self.clone(),
            findings: Findings::new(ctx.max_evidence),
            answers: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use history::GrpcCode;
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "grpc_non_retryable";
    const M: &str = "orders.v1.Orders/CreateOrder";

    #[test]
    fn fails_a_retry_after_invalid_argument() {
        let j = [
            entry(1, 0)
                .grpc(M)
                .key("k")
                .grpc_status(GrpcCode::InvalidArgument)
                .build(),
            entry(2, 100)
                .grpc(M)
                .key("k")
                .previous_attempts(1)
                .grpc_status(GrpcCode::InvalidArgument)
                .build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
        assert!(r.summary.contains("INVALID_ARGUMENT"), "{}", r.summary);
        assert_eq!(r.metrics["retried"], 1);
    }

    #[test]
    fn passes_retries_of_unavailable_and_an_unretried_not_found() {
        let j = [
            entry(1, 0)
                .grpc(M)
                .key("a")
                .grpc_status(GrpcCode::Unavailable)
                .build(),
            entry(2, 100).grpc(M).key("a").previous_attempts(1).build(),
            entry(3, 200)
                .grpc(M)
                .key("b")
                .grpc_status(GrpcCode::NotFound)
                .build(),
            entry(4, 300).grpc(M).key("c").build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["non_retryable_answers"], 1);
    }

    #[test]
    fn a_hedge_sent_before_the_answer_is_no_retry_after_it() {
        // The second attempt went out while the first was still running.
        let j = [
            entry(1, 0)
                .grpc(M)
                .key("h")
                .took(500)
                .grpc_status(GrpcCode::NotFound)
                .build(),
            entry(2, 100).grpc(M).key("h").previous_attempts(1).build(),
        ];
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Pass);
    }

    #[test]
    fn codes_are_configurable_and_nothing_to_judge_is_inconclusive() {
        let j = [
            entry(1, 0)
                .grpc(M)
                .key("k")
                .grpc_status(GrpcCode::Aborted)
                .build(),
            entry(2, 100).grpc(M).key("k").build(),
        ];
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Inconclusive);
        let r = run_one(NAME, "{ codes: [ABORTED] }", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        // HTTP requests are no gRPC calls: a 400 retried is retry_on_4xx's, not this check's.
        let http = [
            entry(1, 0).key("k").status(400).build(),
            entry(2, 100).key("k").status(400).build(),
        ];
        assert_eq!(run_one(NAME, "{}", &http).verdict, Verdict::Inconclusive);
        let e = crate::ChecksConfig::from_yaml("grpc_non_retryable: { codes: [OK] }").unwrap_err();
        assert!(e.to_string().contains("grpc_non_retryable.codes"), "{e}");
    }
}
