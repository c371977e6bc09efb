//! `grpc_attempts`: a gRPC call's attempts against gRFC A6's rules for them.
//!
//! Why: A6 bounds a call's attempts and tells the server about each one. "maxAttempts... values
//! greater than 5 are treated as 5"; every retry or hedge carries `grpc-previous-rpc-attempts`
//! ("the number of preceding attempts"), so a server can tell a retry from a new call; and the
//! call has one deadline, "the deadline applies to the overall RPC, not to individual attempts" —
//! so no attempt starts after it, and none is given more time than the call had left. A client
//! that resets its deadline per attempt keeps a failing dependency busy for attempts × timeout
//! instead of the timeout its caller budgeted.
//!
//! How the server sees a call: the attempts of one operation (see [`super::operations`]) whose
//! `grpc-previous-rpc-attempts` counts up from none (the first attempt sends none). An attempt
//! with the header continues the call before it; one without it, after a failed attempt, is a
//! retry that did not say so — or a new call the application made on purpose, which A6 does not
//! govern; it is flagged (`require_header`) and starts a new call for the other rules. The
//! call's deadline is its first attempt's arrival plus its `grpc-timeout`; a later attempt
//! arriving after it, or asking for more time than was left (`grpc-timeout` reaching past it),
//! fails — within `tolerance_ms`, since the server stamps arrivals, not the client's sends, and
//! within `timeout_rounding` of the timeout, which a client may encode rounded up (grpcio sends an
//! earlier, slightly longer value again). So a client that gives each attempt the whole timeout again is
//! caught once its attempts are further apart than those slacks.
//!
//! Metrics: `calls_retried`, `retries`, `over_max_attempts`, `missing_header`,
//! `not_counting_up`, `after_deadline`, `deadline_extended`.

use std::collections::HashMap;

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{non_negative, About, CheckSpec, Invalid};
use super::{Attempt, Check, ClosedOperation, Context};

/// Configuration of the `grpc_attempts` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcAttemptsConfig {
    /// Most attempts one call may make (A6 caps `maxAttempts` and hedging's at 5).
    pub max_attempts: u32,
    /// A retry must carry `grpc-previous-rpc-attempts`.
    pub require_header: bool,
    /// How far past the call's deadline an attempt may arrive, or reach (ms): the server stamps
    /// arrivals, and a retry may take longer to arrive than the first attempt did.
    pub tolerance_ms: u64,
    /// How much a client's `grpc-timeout` may be rounded up, as a fraction of it: C-core rounds
    /// the timeout it encodes up ("encoding may round up arbitrarily"), and grpcio 1.85 was seen
    /// sending a retry the first attempt's 10 s again with 9.75 s left (its header encoder reuses
    /// an earlier value that is a little longer), so a correct retry may seem to reach this much
    /// past the deadline.
    pub timeout_rounding: f64,
}

impl Default for GrpcAttemptsConfig {
    fn default() -> Self {
        GrpcAttemptsConfig {
            max_attempts: 5,
            require_header: true,
            tolerance_ms: 100,
            timeout_rounding: 0.05,
        }
    }
}

/// Where an operation's current call is.
#[derive(Debug, Clone, Copy)]
struct Call {
    /// `grpc-previous-rpc-attempts` of its last attempt (0 for the first).
    last: u32,
    /// The call's deadline, µs on the journal's clock, when its first attempt had one.
    deadline_us: Option<u64>,
    /// It was retried (counted once).
    retried: bool,
}

/// The `grpc_attempts` check.
pub(crate) struct GrpcAttemptsCheck {
    cfg: GrpcAttemptsConfig,
    calls: HashMap<u64, Call>,
    too_many: Findings,
    missing: Findings,
    not_counting: Findings,
    late: Findings,
    extended: Findings,
    calls_retried: u64,
    retries: u64,
}

impl GrpcAttemptsCheck {
    fn new_call(&mut self, op: u64, previous: u32, t_recv_us: u64, timeout_ms: Option<u64>) {
        self.calls.insert(
            op,
            Call {
                last: previous,
                deadline_us: timeout_ms.map(|ms| t_recv_us.saturating_add(ms.saturating_mul(1000))),
                retried: false,
            },
        );
    }
}

impl Check for GrpcAttemptsCheck {
    fn name(&self) -> &'static str {
        GrpcAttemptsConfig::NAME
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        if !e.is_grpc() {
            return;
        }
        let op = a.step.op;
        let key = Some(a.step.key.to_string());
        let header = e.grpc_previous_attempts.filter(|n| *n > 0);
        let prev = a.previous().filter(|p| p.grpc);
        let Some(n) = header else {
            // No header: a first attempt, or a retry that did not say so.
            let unsaid_retry = prev.is_some_and(|p| p.failed && e.t_recv_us >= p.t_done_us);
            if unsaid_retry && self.cfg.require_header {
                let p = prev.map_or(0, |p| p.seq);
                self.missing.push(
                    format!(
                        "{} attempt {} (seq {}) came after a failed attempt (seq {p}) without grpc-previous-rpc-attempts",
                        a.step.key,
                        a.index(),
                        e.seq
                    ),
                    key,
                    vec![p, e.seq],
                );
            }
            if unsaid_retry {
                self.retries += 1;
            }
            self.new_call(op, 0, e.t_recv_us, e.grpc_timeout_ms);
            return;
        };
        self.retries += 1;
        let Some(mut call) = self.calls.get(&op).copied() else {
            // The attempts before it were not journaled (refused before the server, say):
            // judge the call from here.
            self.new_call(op, n, e.t_recv_us, e.grpc_timeout_ms);
            self.calls_retried += 1;
            if let Some(c) = self.calls.get_mut(&op) {
                c.retried = true;
            }
            return;
        };
        if !call.retried {
            call.retried = true;
            self.calls_retried += 1;
        }
        let prev_seq = prev.map_or(e.seq, |p| p.seq);
        if n != call.last + 1 {
            self.not_counting.push(
                format!(
                    "{} sent grpc-previous-rpc-attempts {n} (seq {}) after {} (seq {prev_seq}): not counting up",
                    a.step.key, e.seq, call.last
                ),
                key.clone(),
                vec![prev_seq, e.seq],
            );
        }
        if n + 1 > self.cfg.max_attempts {
            self.too_many.push(
                format!(
                    "{} made attempt {} (seq {}, grpc-previous-rpc-attempts {n}); at most {} are allowed",
                    a.step.key,
                    n + 1,
                    e.seq,
                    self.cfg.max_attempts
                ),
                key.clone(),
                vec![e.seq],
            );
        }
        if let Some(deadline) = call.deadline_us {
            let slack = self.cfg.tolerance_ms.saturating_mul(1000);
            if e.t_recv_us > deadline.saturating_add(slack) {
                self.late.push(
                    format!(
                        "{} attempt {} (seq {}) arrived {:.0} ms after the call's deadline",
                        a.step.key,
                        n + 1,
                        e.seq,
                        (e.t_recv_us - deadline) as f64 / 1000.0
                    ),
                    key.clone(),
                    vec![e.seq],
                );
            } else if let Some(ms) = e.grpc_timeout_ms {
                let reach = e.t_recv_us.saturating_add(ms.saturating_mul(1000));
                let rounding = (ms as f64 * 1000.0 * self.cfg.timeout_rounding) as u64;
                if reach > deadline.saturating_add(slack).saturating_add(rounding) {
                    self.extended.push(
                        format!(
                            "{} attempt {} (seq {}) asked for grpc-timeout {ms} ms, {:.0} ms past the call's deadline: the deadline was reset for the attempt",
                            a.step.key,
                            n + 1,
                            e.seq,
                            (reach - deadline) as f64 / 1000.0
                        ),
                        key,
                        vec![e.seq],
                    );
                }
            }
        }
        call.last = n;
        self.calls.insert(op, call);
    }

    fn close(&mut self, op: &ClosedOperation) {
        self.calls.remove(&op.op);
    }

    fn finish(self: Box<Self>, _facts: &Facts) -> CheckResult {
        let lists = [
            (&self.too_many, "more attempts than allowed"),
            (
                &self.not_counting,
                "grpc-previous-rpc-attempts not counting up",
            ),
            (&self.missing, "a retry without grpc-previous-rpc-attempts"),
            (&self.late, "an attempt after the call's deadline"),
            (
                &self.extended,
                "an attempt given more time than the call had left",
            ),
        ];
        let failing: Vec<String> = lists
            .iter()
            .filter(|(f, _)| !f.is_empty())
            .map(|(f, what)| format!("{} × {what}", f.total()))
            .collect();
        let (verdict, summary) = if !failing.is_empty() {
            let first = lists
                .iter()
                .find_map(|(f, _)| f.first_detail())
                .unwrap_or_default();
            (
                Verdict::Fail,
                format!("{}; first: {first}", failing.join(", ")),
            )
        } else if self.retries == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no gRPC call was retried".to_string(),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "{} retried calls kept A6's rules for attempts ({} retries: counted up, at most {} attempts, within the deadline)",
                    self.calls_retried, self.retries, self.cfg.max_attempts
                ),
            )
        };
        let result = CheckResult::new(GrpcAttemptsConfig::NAME, verdict, summary)
            .metric("calls_retried", self.calls_retried)
            .metric("retries", self.retries)
            .metric("over_max_attempts", self.too_many.total())
            .metric("missing_header", self.missing.total())
            .metric("not_counting_up", self.not_counting.total())
            .metric("after_deadline", self.late.total())
            .metric("deadline_extended", self.extended.total());
        let mut result = result;
        for f in [
            self.too_many,
            self.not_counting,
            self.missing,
            self.late,
            self.extended,
        ] {
            result = attach(result, f);
        }
        result
    }
}

impl CheckSpec for GrpcAttemptsConfig {
    const NAME: &'static str = "grpc_attempts";
    const ABOUT: About = About {
        catches: "a gRPC client that breaks A6's rules for a call's attempts",
        how: "more than `max_attempts` (5) attempts in a call, `grpc-previous-rpc-attempts` missing on a retry or not counting up, an attempt arriving after the call's deadline (its first attempt's arrival + `grpc-timeout`) or given a `grpc-timeout` reaching past it, fails",
        evidence: "a gRPC call was retried (an attempt with `grpc-previous-rpc-attempts`, or a later attempt after a failed one)",
        limits: "needs attempts grouped (metadata `idempotency-key`, an operation header, or `x-client-id` + same message); an application's own retry loop is a new call to A6 and is flagged as a retry without the header unless `require_header: false`; deadlines are compared at the server, within `tolerance_ms` and `timeout_rounding` of the timeout",
    };

    fn validate(&self) -> Result<(), Invalid> {
        if self.max_attempts == 0 {
            return Err(Invalid::new("max_attempts", "expected at least 1 attempt"));
        }
        non_negative("timeout_rounding", self.timeout_rounding)
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(GrpcAttemptsCheck {
            cfg: self.clone(),
            calls: HashMap::new(),
            too_many: Findings::new(ctx.max_evidence),
            missing: Findings::new(ctx.max_evidence),
            not_counting: Findings::new(ctx.max_evidence),
            late: Findings::new(ctx.max_evidence),
            extended: Findings::new(ctx.max_evidence),
            calls_retried: 0,
            retries: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use history::GrpcCode;
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "grpc_attempts";
    const M: &str = "orders.v1.Orders/CreateOrder";

    /// Attempt `n` (0-based previous attempts) of call `key` at `t` ms, failing UNAVAILABLE.
    fn attempt(seq: u64, t: f64, key: &str, n: u32) -> history::sample::EntryBuilder {
        let b = entry(seq, t)
            .grpc(M)
            .key(key)
            .grpc_status(GrpcCode::Unavailable);
        if n == 0 {
            b
        } else {
            b.previous_attempts(n)
        }
    }

    #[test]
    fn passes_a_call_that_counts_up_within_five_attempts_and_its_deadline() {
        let j = [
            attempt(1, 0.0, "k", 0).grpc_timeout(2000).build(),
            attempt(2, 100.0, "k", 1).grpc_timeout(1890).build(),
            attempt(3, 300.0, "k", 2).grpc_timeout(1690).build(),
            attempt(4, 700.0, "k", 3).grpc_timeout(1290).build(),
            entry(5, 1500)
                .grpc(M)
                .key("k")
                .previous_attempts(4)
                .grpc_timeout(490)
                .build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["retries"], 4);
        assert_eq!(r.metrics["calls_retried"], 1);
    }

    #[test]
    fn fails_a_sixth_attempt() {
        let mut j: Vec<_> = (0..6)
            .map(|n| attempt(n as u64 + 1, n as f64 * 100.0, "k", n).build())
            .collect();
        j[5].grpc_status = Some(GrpcCode::Ok);
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["over_max_attempts"], 1);
        assert!(r.summary.contains("attempt 6"), "{}", r.summary);
    }

    #[test]
    fn fails_a_missing_or_stuck_header() {
        let missing = [
            attempt(1, 0.0, "k", 0).build(),
            attempt(2, 100.0, "k", 0).build(),
        ];
        let r = run_one(NAME, "{}", &missing);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["missing_header"], 1);
        // An application's own retry loop can be let through.
        assert_eq!(
            run_one(NAME, "{ require_header: false }", &missing).verdict,
            Verdict::Pass
        );
        let stuck = [
            attempt(1, 0.0, "k", 0).build(),
            attempt(2, 100.0, "k", 1).build(),
            attempt(3, 200.0, "k", 1).build(),
        ];
        let r = run_one(NAME, "{}", &stuck);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["not_counting_up"], 1);
        assert_eq!(r.evidence[0].seqs, vec![2, 3]);
    }

    #[test]
    fn fails_an_attempt_after_the_deadline_or_with_a_deadline_of_its_own() {
        let late = [
            attempt(1, 0.0, "k", 0).grpc_timeout(500).build(),
            attempt(2, 800.0, "k", 1).grpc_timeout(500).build(),
        ];
        let r = run_one(NAME, "{}", &late);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["after_deadline"], 1);
        // Each attempt given the whole timeout again: 300 ms in, another full second.
        let reset = [
            attempt(1, 0.0, "k", 0).grpc_timeout(1000).build(),
            attempt(2, 300.0, "k", 1).grpc_timeout(1000).build(),
        ];
        let r = run_one(NAME, "{}", &reset);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["deadline_extended"], 1);
        assert!(r.summary.contains("reset"), "{}", r.summary);
    }

    #[test]
    fn new_calls_start_afresh_and_nothing_retried_is_inconclusive() {
        // Two calls of one key, each retried within its own deadline and count.
        let j = [
            attempt(1, 0.0, "k", 0).grpc_timeout(500).build(),
            entry(2, 100).grpc(M).key("k").previous_attempts(1).build(),
            attempt(3, 5000.0, "k", 0).grpc_timeout(500).build(),
            entry(4, 5100).grpc(M).key("k").previous_attempts(1).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["calls_retried"], 2);
        let once = [entry(1, 0).grpc(M).key("k").build()];
        assert_eq!(run_one(NAME, "{}", &once).verdict, Verdict::Inconclusive);
        let http = [
            entry(1, 0).key("k").status(503).build(),
            entry(2, 100).key("k").build(),
        ];
        assert_eq!(run_one(NAME, "{}", &http).verdict, Verdict::Inconclusive);
    }
}
