//! Resilience checks: pure functions from the request journal to a verdict with evidence.
//!
//! Why pure functions of the journal: the journal is the one timeline of a run (Jepsen's history).
//! A check that only reads it gives the same verdict every time, can be proven on a hand-written
//! journal in a unit test, and points at the journal `seq`s and keys that prove its verdict.
//!
//! Why streaming: a big run journals a million requests and `harness analyze` must judge it in
//! seconds. Entries are read once, in `seq` order; each is placed in its logical operation by the
//! [`OperationTracker`](operations::OperationTracker) and handed to every enabled [`Check`] as an
//! [`Attempt`]. Per-operation and per-key state is dropped once it has been idle longer than
//! `grouping.horizon_ms`, so memory follows the number of open operations, not the file.
//!
//! Use [`run_checks`] for a whole journal, or [`ChecksRunner`] to feed entries as they are read.
//! Configuration: [`ChecksConfig`], from YAML with [`ChecksConfig::from_yaml`].

#![warn(missing_docs)]

pub mod amplification;
pub mod circuit_breaker;
pub mod config;
pub mod duplicates;
mod evidence;
pub mod failure;
pub mod idempotency_semantics;
mod idle;
pub mod jitter;
pub mod journal;
pub mod key_stability;
pub mod operations;
pub mod retry_after;
pub mod retry_on_4xx;
pub mod state_transition;
mod stats;
pub mod threshold_rules;
pub mod thresholds;
pub mod total_timeout;

#[cfg(test)]
pub(crate) mod testutil;

use reports::CheckResult;

pub use config::{ChecksConfig, ConfigError, CHECK_NAMES};
pub use journal::{JournalItem, JournalRecord};
pub use operations::{Attempt, ClosedOperation, GroupingConfig, OperationTracker};

/// One resilience check, fed the journal one attempt at a time.
pub trait Check {
    /// Stable identifier of the check (one of [`CHECK_NAMES`]).
    fn name(&self) -> &'static str;
    /// Sees the next journal entry (in `seq` order) with its place in its operation.
    fn observe(&mut self, attempt: &Attempt<'_>);
    /// Learns that an operation will get no more attempts.
    fn close(&mut self, _op: &ClosedOperation) {}
    /// The verdict, once the journal has ended.
    fn finish(self: Box<Self>) -> CheckResult;
}

/// What every check shares: the idle horizon and how much evidence to keep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context {
    /// Per-key state idle for longer than this (µs) is judged and dropped.
    pub(crate) horizon_us: u64,
    /// Most pieces of evidence one check reports.
    pub(crate) max_evidence: usize,
}

/// Runs the enabled checks over a journal fed entry by entry.
pub struct ChecksRunner {
    tracker: OperationTracker,
    checks: Vec<Box<dyn Check>>,
}

impl ChecksRunner {
    /// A runner for the checks `cfg` enables.
    pub fn new(cfg: &ChecksConfig) -> Self {
        ChecksRunner {
            tracker: OperationTracker::new(&cfg.grouping),
            checks: cfg.build(),
        }
    }

    /// Feeds the next journal entry; entries must come in `seq` order.
    pub fn observe(&mut self, item: impl JournalItem) {
        let entry = item.entry();
        let retry_after_s = item.retry_after_s();
        let step = self.tracker.observe(entry, retry_after_s);
        let attempt = Attempt {
            entry,
            retry_after_s,
            step: &step,
        };
        for check in &mut self.checks {
            check.observe(&attempt);
        }
        self.dispatch_closed();
    }

    /// The verdicts, in the order of [`CHECK_NAMES`].
    pub fn finish(mut self) -> Vec<CheckResult> {
        self.dispatch_closed();
        for op in self.tracker.finish() {
            for check in &mut self.checks {
                check.close(&op);
            }
        }
        self.checks.into_iter().map(|c| c.finish()).collect()
    }

    fn dispatch_closed(&mut self) {
        for op in self.tracker.take_closed() {
            for check in &mut self.checks {
                check.close(&op);
            }
        }
    }
}

/// Runs the checks `cfg` enables over a whole journal (entries in `seq` order).
pub fn run_checks<I>(cfg: &ChecksConfig, entries: I) -> Vec<CheckResult>
where
    I: IntoIterator,
    I::Item: JournalItem,
{
    let mut runner = ChecksRunner::new(cfg);
    for item in entries {
        runner.observe(item);
    }
    runner.finish()
}
