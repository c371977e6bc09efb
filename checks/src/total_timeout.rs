//! `total_timeout`: operations that outlive their budget, and requests that outlive their caller.
//!
//! Why: a per-attempt timeout is not enough. Three retries of 10 s plus backoff is 45 s, long after
//! the user (or the caller's own timeout) gave up; the work done after that is pure load. Two
//! things are checked:
//!
//! - With `budget_ms`, an operation (see [`super::operations`]) whose attempts span longer than the
//!   budget — first arrival to last response or give-up — fails. That includes a single attempt the
//!   client left hanging past the budget.
//! - A request that arrives after the deadline it carries fails: deadline propagation means a
//!   layer stops retrying (and answers 504) once its caller's deadline has passed. The deadline
//!   header (`deadline_header`, default `x-deadline`) holds an absolute deadline as an integer
//!   number of milliseconds since the Unix epoch (e.g. `x-deadline: 1700000012345`); it is compared
//!   with the journal's `unix_ms` (receipt), allowing `tolerance_ms` for clock granularity. Values
//!   in another format are counted and flagged as weak.
//!
//! Evidence: a budget matters only to an operation that failed at least once (a retry, a wait, a
//! hang); operations that all succeeded at once, with no deadline header either, leave the check
//! inconclusive.
//!
//! Metrics: `operations_checked`, `operations_that_failed`, `over_budget`, `deadlines_seen`, `after_deadline`,
//! `unparseable_deadlines`.

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{scale_ms, About, CheckSpec};
use super::{Attempt, Check, ClosedOperation, Context};

/// Configuration of the `total_timeout` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TotalTimeoutConfig {
    /// Longest an operation may take, all attempts and waits included (ms); none: not checked.
    pub budget_ms: Option<u64>,
    /// Header with the absolute deadline (integer ms since the Unix epoch).
    pub deadline_header: String,
    /// Slack allowed on both the budget and the deadline (ms).
    pub tolerance_ms: u64,
}

impl Default for TotalTimeoutConfig {
    fn default() -> Self {
        TotalTimeoutConfig {
            budget_ms: None,
            deadline_header: "x-deadline".to_string(),
            tolerance_ms: 5,
        }
    }
}

/// The `total_timeout` check.
pub(crate) struct TotalTimeoutCheck {
    cfg: TotalTimeoutConfig,
    over_budget: Findings,
    late: Findings,
    unparseable: Findings,
    ops_checked: u64,
    /// Operations held to the budget that failed at least once: the ones a budget is for.
    ops_exercised: u64,
    deadlines: u64,
}

impl TotalTimeoutCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &TotalTimeoutConfig, ctx: Context) -> Self {
        TotalTimeoutCheck {
            cfg: cfg.clone(),
            over_budget: Findings::new(ctx.max_evidence),
            late: Findings::new(ctx.max_evidence),
            unparseable: Findings::new(ctx.max_evidence),
            ops_checked: 0,
            ops_exercised: 0,
            deadlines: 0,
        }
    }
}

impl Check for TotalTimeoutCheck {
    fn name(&self) -> &'static str {
        "total_timeout"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        let Some(raw) = e.headers.get(&self.cfg.deadline_header) else {
            return;
        };
        self.deadlines += 1;
        let Ok(deadline) = raw.trim().parse::<u64>() else {
            self.unparseable.push(
                format!(
                    "{}: {raw:?} is not an integer of ms since the Unix epoch",
                    self.cfg.deadline_header
                ),
                Some(a.step.key.to_string()),
                vec![e.seq],
            );
            return;
        };
        if e.unix_ms > deadline.saturating_add(self.cfg.tolerance_ms) {
            self.late.push(
                format!(
                    "{} attempt {} received {} ms after its {} had passed",
                    a.step.key,
                    a.index(),
                    e.unix_ms - deadline,
                    self.cfg.deadline_header
                ),
                Some(a.step.key.to_string()),
                vec![e.seq],
            );
        }
    }

    fn close(&mut self, op: &ClosedOperation) {
        let Some(budget) = self.cfg.budget_ms else {
            return;
        };
        self.ops_checked += 1;
        if op.attempts > 1 || op.last_failed {
            self.ops_exercised += 1;
        }
        let span_us = op.last_done_us.saturating_sub(op.started_us);
        let limit_us = budget
            .saturating_add(self.cfg.tolerance_ms)
            .saturating_mul(1000);
        if span_us > limit_us {
            self.over_budget.push(
                format!(
                    "{}: {} attempts spanned {:.1} s, over its {:.1} s budget",
                    op.key,
                    op.attempts,
                    span_us as f64 / 1e6,
                    budget as f64 / 1000.0
                ),
                Some(op.key.to_string()),
                vec![op.first_seq, op.last_seq],
            );
        }
    }

    fn finish(self: Box<Self>, _facts: &Facts) -> CheckResult {
        let over = self.over_budget.total();
        let late = self.late.total();
        let (verdict, summary) = if over + late > 0 {
            let first = self
                .over_budget
                .first_detail()
                .or(self.late.first_detail())
                .unwrap_or_default();
            (
                Verdict::Fail,
                format!(
                    "{over} operations over budget, {late} requests after their deadline; \
                     first: {first}"
                ),
            )
        } else if let Some(first) = self.unparseable.first_detail() {
            (
                Verdict::Weak,
                format!(
                    "{} deadlines could not be read; first: {first}",
                    self.unparseable.total()
                ),
            )
        } else if self.cfg.budget_ms.is_none() && self.deadlines == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: no budget_ms configured and no request carried {}",
                    self.cfg.deadline_header
                ),
            )
        } else if self.ops_exercised == 0 && self.deadlines == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: none of the {} operations failed even once, so none \
                     needed its budget, and no request carried {}",
                    self.ops_checked, self.cfg.deadline_header
                ),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "{} operations within budget, {} requests before their deadline",
                    self.ops_checked, self.deadlines
                ),
            )
        };
        let result = CheckResult::new("total_timeout", verdict, summary)
            .metric("operations_checked", self.ops_checked)
            .metric("operations_that_failed", self.ops_exercised)
            .metric("over_budget", over)
            .metric("deadlines_seen", self.deadlines)
            .metric("after_deadline", late)
            .metric("unparseable_deadlines", self.unparseable.total());
        let result = attach(result, self.over_budget);
        let result = attach(result, self.late);
        attach(result, self.unparseable)
    }
}

impl CheckSpec for TotalTimeoutConfig {
    const NAME: &'static str = "total_timeout";
    const ABOUT: About = About {
        catches: "work after the caller gave up",
        how: "an operation whose attempts span longer than `budget_ms`; a request received after its `x-deadline` (absolute unix ms) passed",
        evidence: "an operation that failed at least once was held to `budget_ms`, or a request carried a deadline",
        limits: "other deadline formats are counted as weak",
    };

    fn scale(&mut self, f: f64) {
        if let Some(b) = &mut self.budget_ms {
            scale_ms(b, f);
        }
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(TotalTimeoutCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::{Entry, Outcome};
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};
    use history::sample::EPOCH_MS;

    const NAME: &str = "total_timeout";

    /// Three 10 s attempts with 1 and 2 s of backoff: 33 s in all.
    fn slow_retries() -> Vec<Entry> {
        vec![
            entry(1, 0)
                .key("k")
                .no_response(Outcome::ClientClosed)
                .took(10_000)
                .build(),
            entry(2, 11_000)
                .key("k")
                .no_response(Outcome::ClientClosed)
                .took(10_000)
                .build(),
            entry(3, 23_000).key("k").took(10_000).created("o1").build(),
        ]
    }

    #[test]
    fn fails_an_operation_over_its_budget() {
        let r = run_one(NAME, "{ budget_ms: 15000 }", &slow_retries());
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.evidence[0].seqs, vec![1, 3]);
        assert!(r.summary.contains("33.0 s"), "{}", r.summary);
    }

    #[test]
    fn passes_within_budget() {
        let r = run_one(NAME, "{ budget_ms: 40000 }", &slow_retries());
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["operations_checked"], 1);
    }

    #[test]
    fn deadlines_in_epoch_ms() {
        let deadline = (EPOCH_MS + 1000).to_string();
        let j = [
            entry(1, 500)
                .key("k")
                .header("x-deadline", &deadline)
                .status(503)
                .build(),
            entry(2, 1003)
                .key("k")
                .header("x-deadline", &deadline)
                .status(503)
                .build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(
            r.verdict,
            Verdict::Pass,
            "within the 5 ms tolerance: {}",
            r.summary
        );
        let mut late = j.to_vec();
        // The wall clock of receipt is what counts, not the monotonic server time.
        late.push(
            entry(3, 10)
                .unix_ms(EPOCH_MS + 1200)
                .key("k")
                .header("x-deadline", &deadline)
                .build(),
        );
        let r = run_one(NAME, "{}", &late);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.evidence[0].seqs, vec![3]);
        assert!(r.summary.contains("200 ms after"), "{}", r.summary);
    }

    /// Ten operations that each succeeded at their first attempt never needed their budget: a
    /// budget configured is not evidence that it was kept. One operation that failed once is.
    #[test]
    fn a_budget_no_operation_needed_is_no_evidence() {
        let quick: Vec<Entry> = (1..=10)
            .map(|i| {
                entry(i, i as u32 * 10)
                    .key(&format!("k{i}"))
                    .status(201)
                    .build()
            })
            .collect();
        let r = run_one(NAME, "{ budget_ms: 1000 }", &quick);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert_eq!(r.metrics["operations_checked"], 10);
        assert_eq!(r.metrics["operations_that_failed"], 0);
        let mut retried = quick;
        retried.push(entry(11, 200).key("k10").status(201).build());
        retried[9] = entry(10, 100).key("k10").status(503).build();
        let r = run_one(NAME, "{ budget_ms: 1000 }", &retried);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["operations_that_failed"], 1);
    }

    #[test]
    fn borderline_unreadable_deadline_is_weak_and_nothing_is_inconclusive() {
        let j = [entry(1, 0).header("x-deadline", "in 5 seconds").build()];
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Weak);
        let j = [entry(1, 0).build()];
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Inconclusive);
    }
}
