//! `attempts_bound`: a client that never stops retrying.
//!
//! Why: every retry policy needs an end — a number of attempts or a time — or an outage turns
//! each caller into a loop that lasts as long as the outage, and the callers' own deadlines pass
//! while they wait. gRFC A6 caps a call at 5 attempts; the common libraries stop at 3 to 10, or
//! after a total time.
//!
//! An operation whose attempts exceed `max_attempts` fails, with its key and the seqs of its
//! attempts. Evidence is an operation that failed at least `min_failures` times in a row: one
//! that had room to show its bound.
//!
//! Metrics: `operations_failing_repeatedly`, `max_attempts_seen`, `over_the_bound`.

use std::collections::HashMap;

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{About, CheckSpec, Invalid};
use super::{Attempt, Check, ClosedOperation, Context};

/// Configuration of the `attempts_bound` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AttemptsBoundConfig {
    /// Most attempts one operation may make (the first included).
    pub max_attempts: u32,
    /// Failed attempts in a row that make an operation evidence.
    pub min_failures: u32,
}

impl Default for AttemptsBoundConfig {
    fn default() -> Self {
        AttemptsBoundConfig {
            max_attempts: 10,
            min_failures: 3,
        }
    }
}

/// The `attempts_bound` check.
pub(crate) struct AttemptsBoundCheck {
    cfg: AttemptsBoundConfig,
    /// Per open operation: its key, its failures in a row, the seqs of its attempts (the first
    /// `max_attempts + 1`).
    open: HashMap<u64, (String, u32, Vec<u64>)>,
    evidence_ops: u64,
    max_seen: u32,
    over: Findings,
}

impl AttemptsBoundCheck {
    pub(crate) fn new(cfg: &AttemptsBoundConfig, ctx: Context) -> Self {
        AttemptsBoundCheck {
            cfg: cfg.clone(),
            open: HashMap::new(),
            evidence_ops: 0,
            max_seen: 0,
            over: Findings::new(ctx.max_evidence),
        }
    }

    fn settle(&mut self, op: u64, attempts: u32) {
        let Some((key, _, seqs)) = self.open.remove(&op) else {
            return;
        };
        self.max_seen = self.max_seen.max(attempts);
        if attempts > self.cfg.max_attempts {
            self.over.push(
                format!(
                    "{key} made {attempts} attempts > max_attempts {}",
                    self.cfg.max_attempts
                ),
                Some(key),
                seqs,
            );
        }
    }
}

impl Check for AttemptsBoundCheck {
    fn name(&self) -> &'static str {
        AttemptsBoundConfig::NAME
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let failed = super::failure::failed(a.entry);
        let limit = self.cfg.max_attempts as usize + 1;
        let state = self
            .open
            .entry(a.step.op)
            .or_insert_with(|| (a.step.key.to_string(), 0, Vec::new()));
        if state.2.len() < limit {
            state.2.push(a.entry.seq);
        }
        if failed {
            state.1 += 1;
            if state.1 == self.cfg.min_failures {
                self.evidence_ops += 1;
            }
        } else {
            state.1 = 0;
        }
    }

    fn close(&mut self, op: &ClosedOperation) {
        self.settle(op.op, op.attempts);
    }

    fn finish(mut self: Box<Self>, _facts: &Facts) -> CheckResult {
        // Operations still open were closed by the runner before finish; any left are settled
        // by what was seen of them.
        let left: Vec<(u64, u32)> = self
            .open
            .iter()
            .map(|(op, (_, _, seqs))| (*op, seqs.len() as u32))
            .collect();
        for (op, n) in left {
            self.settle(op, n);
        }
        let over = self.over.total();
        let (verdict, summary) = if over > 0 {
            (
                Verdict::Fail,
                format!(
                    "{over} operations went on past max_attempts {}; first: {}",
                    self.cfg.max_attempts,
                    self.over.first_detail().unwrap_or_default()
                ),
            )
        } else if self.evidence_ops == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: no operation failed {} times in a row",
                    self.cfg.min_failures
                ),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "every operation stopped within max_attempts {} ({} failed {} times in a \
                     row or more; at most {} attempts)",
                    self.cfg.max_attempts, self.evidence_ops, self.cfg.min_failures, self.max_seen
                ),
            )
        };
        let result = CheckResult::new(AttemptsBoundConfig::NAME, verdict, summary)
            .metric("operations_failing_repeatedly", self.evidence_ops)
            .metric("max_attempts_seen", u64::from(self.max_seen))
            .metric("over_the_bound", over);
        attach(result, self.over)
    }
}

impl CheckSpec for AttemptsBoundConfig {
    const NAME: &'static str = "attempts_bound";
    const ABOUT: About = About {
        catches: "a client that never stops retrying",
        how: "an operation with more than `max_attempts` (10) attempts fails",
        evidence: "an operation failed `min_failures` (3) times in a row: it had room to show its bound",
        limits: "needs attempts grouped (a key, an operation header, or `x-client-id` + same body); a bound by time rather than by count passes while the outage is shorter than it",
    };

    fn validate(&self) -> Result<(), Invalid> {
        if self.max_attempts == 0 || self.min_failures == 0 {
            return Err(Invalid::new(
                if self.max_attempts == 0 {
                    "max_attempts"
                } else {
                    "min_failures"
                },
                "must be at least 1",
            ));
        }
        Ok(())
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(AttemptsBoundCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "attempts_bound";

    /// Operation `key`, failing `failures` times from seq `first`, then answered if `ends`.
    fn op(key: &str, first: u64, failures: u64, ends: bool) -> Vec<history::Entry> {
        let mut j: Vec<_> = (0..failures)
            .map(|i| {
                entry(first + i, (first + i) as f64 * 10.0)
                    .key(key)
                    .status(503)
                    .build()
            })
            .collect();
        if ends {
            let seq = first + failures;
            j.push(entry(seq, seq as f64 * 10.0).key(key).created("o").build());
        }
        j
    }

    #[test]
    fn a_bounded_client_passes_and_an_unbounded_one_fails() {
        let r = run_one(NAME, "{}", &op("k", 1, 5, false));
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        let r = run_one(NAME, "{}", &op("k", 1, 30, true));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("31 attempts"), "{}", r.summary);
        assert_eq!(r.evidence[0].seqs.len(), 11);
        let r = run_one(NAME, "{ max_attempts: 40 }", &op("k", 1, 30, true));
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    #[test]
    fn no_repeated_failure_is_inconclusive() {
        let r = run_one(NAME, "{}", &op("k", 1, 2, true));
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert!(crate::ChecksConfig::from_yaml("attempts_bound: { max_attempts: 0 }").is_err());
    }
}
