//! Resilience checks: pure functions from a run's history to a verdict with evidence.
//!
//! A check reads the journal a fault server kept (one [`history::Entry`] per request it saw) and
//! says whether the clients behaved: no duplicate creations, no retry of a 400, jitter on
//! retries, Retry-After honored, one key per operation, … In a test, judge the journal with one
//! check's configuration and assert the verdict; a failing assertion prints the check's summary
//! and evidence, as the `harness` CLI would:
//!
//! ```
//! use checks::{CheckSpec, DuplicatesConfig, RetryOn4xxConfig};
//! use history::sample::entry;
//!
//! // What a fault server journaled: two POSTs of key k-1, both of which created an order.
//! let journal = vec![
//!     entry(1, 0.0).at("POST", "/orders").key("k-1").created("ord_1").build(),
//!     entry(2, 1.0).at("POST", "/orders").key("k-1").created("ord_2").build(),
//! ];
//! let result = DuplicatesConfig::default().judge(&journal);
//! result.assert_fails();
//! assert!(result.to_string().starts_with("duplicates: FAIL"), "{result}");
//! // No 4xx was retried: that check passes on the same journal.
//! RetryOn4xxConfig::default().judge(&journal).assert_passes();
//! ```
//!
//! With a live server, the journal comes from `fault_server::TestServer::journal`, and the load
//! from your own client or from `harness::workload` — the `harness` crate's documentation has a
//! complete test. Each check's configuration (re-exported here: [`DuplicatesConfig`],
//! [`JitterConfig`], …) documents its thresholds; [`CheckSpec::judge`] runs one check,
//! [`judge`] runs those a [`ChecksConfig`] enables, and [`CHECK_NAMES`] lists them all.
//!
//! Why pure functions of the history: the journal is the one timeline of a run (Jepsen's history),
//! and the few facts gathered beside it — the load driver's totals, a system of record's counts
//! ([`history::Facts`]) — are gathered before any check runs. A check that only reads them gives
//! the same verdict every time, decides it once (nothing after it rewrites a result), can be
//! proven on a hand-written history in a unit test, and points at the journal `seq`s and keys
//! that prove its verdict.
//!
//! Why streaming: a big run journals a million requests and `harness analyze` must judge it in
//! seconds. Entries are read once, in `seq` order; each is placed in its logical operation by the
//! [`OperationTracker`] and handed to every enabled [`Check`] as an
//! [`Attempt`]. Per-operation and per-key state is dropped once it has been idle longer than
//! `grouping.horizon_ms`, so memory follows the number of open operations, not the file.
//!
//! Use [`run_checks`] for a whole journal, or [`ChecksRunner`] to feed entries as they are read.
//! Configuration: [`ChecksConfig`], from YAML with [`ChecksConfig::parse`]. Each check describes
//! itself in one place, its module's [`CheckSpec`].
//!
//! Two judges read a probe's exchanges instead of a run's journal: `harness audit` sends its
//! requests itself, records each exchange as a journal entry from the client's side, and hands
//! them, grouped by the part each played ([`exchange`]), to [`repeated_request`] (a PUT or
//! DELETE repeated and sent concurrently) and [`lost_response`] (a retry after a lost
//! response). They are not configured in a scenario: a scenario's retries are judged by the
//! checks above.
//!
//! This crate depends on the history and report models only: no runtime, socket, server or
//! database (`harness/tests/architecture.rs` holds it to that).

#![warn(missing_docs)]

pub mod ack_latency;
pub mod amplification;
pub mod attempts_bound;
pub mod backoff_growth;
pub mod cache_fallback;
pub mod circuit_breaker;
pub mod config;
pub mod db_retry;
pub mod duplicate_ack;
pub mod duplicates;
pub mod effects_once;
mod evidence;
pub mod exchange;
pub mod failure;
pub mod forged_rejected;
pub mod grpc_attempts;
pub mod grpc_committed;
pub mod grpc_non_retryable;
pub mod grpc_pushback;
pub mod idempotency_semantics;
mod idle;
pub mod jitter;
pub mod journal;
pub mod key_stability;
pub mod lost_response;
pub mod operations;
pub mod ordering;
pub mod repeated_request;
pub mod retry_after;
pub mod retry_on_4xx;
pub mod spec;
pub mod state_transition;
mod stats;
pub mod threshold_rules;
pub mod thresholds;
pub mod total_timeout;
pub mod transient_retried;

#[cfg(test)]
pub(crate) mod testutil;

use history::Facts;

pub use ack_latency::AckLatencyConfig;
pub use amplification::AmplificationConfig;
pub use attempts_bound::AttemptsBoundConfig;
pub use backoff_growth::BackoffGrowthConfig;
pub use cache_fallback::{CacheFallbackConfig, Fallback};
pub use circuit_breaker::CircuitBreakerConfig;
pub use config::{ChecksConfig, CHECK_NAMES};
pub use db_retry::DbRetryConfig;
pub use duplicate_ack::DuplicateAckConfig;
pub use duplicates::DuplicatesConfig;
pub use effects_once::EffectsOnceConfig;
pub use forged_rejected::ForgedRejectedConfig;
pub use grpc_attempts::GrpcAttemptsConfig;
pub use grpc_committed::GrpcCommittedConfig;
pub use grpc_non_retryable::GrpcNonRetryableConfig;
pub use grpc_pushback::GrpcPushbackConfig;
pub use idempotency_semantics::IdempotencySemanticsConfig;
pub use jitter::JitterConfig;
pub use journal::{JournalItem, JournalRecord};
pub use key_stability::KeyStabilityConfig;
pub use operations::{Attempt, ClosedOperation, GroupingConfig, OperationTracker};
pub use ordering::{OrderingConfig, StateConfig};
pub use retry_after::RetryAfterConfig;
pub use retry_on_4xx::RetryOn4xxConfig;
pub use spec::{About, CheckSpec};
pub use state_transition::StateTransitionConfig;
pub use thresholds::ThresholdsConfig;
pub use total_timeout::TotalTimeoutConfig;
pub use transient_retried::TransientRetriedConfig;
pub use verdict::{CheckResult, Evidence, Verdict};

/// One resilience check, fed the journal one attempt at a time.
pub trait Check: Send {
    /// Stable identifier of the check (one of [`CHECK_NAMES`]).
    fn name(&self) -> &'static str;
    /// Sees the next journal entry (in `seq` order) with its place in its operation.
    fn observe(&mut self, attempt: &Attempt<'_>);
    /// Learns that an operation will get no more attempts.
    fn close(&mut self, _op: &ClosedOperation) {}
    /// Whether it reads the statements and commands protocol-aware proxies journal; the other
    /// checks judge requests and never see them.
    fn reads_protocol(&self) -> bool {
        false
    }
    /// The verdict, once the journal has ended, with the facts gathered beside it.
    fn finish(self: Box<Self>, facts: &Facts) -> CheckResult;
}

/// What every check shares: the idle horizon and how much evidence to keep.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    /// Per-key state idle for longer than this (µs) is judged and dropped.
    pub(crate) horizon_us: u64,
    /// Most pieces of evidence one check reports.
    pub(crate) max_evidence: usize,
}

/// Most pieces of evidence one check reports when the configuration does not say.
pub(crate) const DEFAULT_MAX_EVIDENCE: usize = 20;

impl Context {
    /// The context of checks that group requests as `grouping` says and keep `max_evidence`
    /// pieces of evidence each.
    pub(crate) fn new(grouping: &GroupingConfig, max_evidence: usize) -> Context {
        Context {
            horizon_us: grouping.horizon_ms.saturating_mul(1000),
            max_evidence,
        }
    }
}

/// Runs the enabled checks over a journal fed entry by entry.
pub struct ChecksRunner {
    tracker: OperationTracker,
    checks: CheckSet,
    closed: Vec<ClosedOperation>,
}

impl ChecksRunner {
    /// A runner for the checks `cfg` enables.
    pub fn new(cfg: &ChecksConfig) -> Self {
        let (tracker, checks) = ChecksRunner::split(cfg);
        ChecksRunner {
            tracker,
            checks,
            closed: Vec::new(),
        }
    }

    /// A runner for these checks, grouping requests as `grouping` says.
    pub(crate) fn with(grouping: &GroupingConfig, checks: Vec<Box<dyn Check>>) -> Self {
        ChecksRunner {
            tracker: OperationTracker::new(grouping),
            checks: CheckSet { checks },
            closed: Vec::new(),
        }
    }

    /// The runner's two halves, for a pipeline that groups entries into operations on one thread
    /// and judges them on another: feed each entry that is no TCP connection
    /// ([`history::Entry::is_connection`]) to the tracker, then hand the entry, its
    /// [`Step`](operations::Step) and the operations the tracker closed meanwhile
    /// ([`OperationTracker::take_closed`]) to the [`CheckSet`], in that order.
    pub fn split(cfg: &ChecksConfig) -> (OperationTracker, CheckSet) {
        (
            OperationTracker::new(&cfg.grouping),
            CheckSet {
                checks: cfg.build(),
            },
        )
    }

    /// Feeds the next journal entry; entries must come in `seq` order. A proxied TCP
    /// connection's entry is no HTTP request: no check judges it, and it is in no operation.
    pub fn observe(&mut self, item: impl JournalItem) {
        let entry = item.entry();
        if entry.is_connection() {
            return;
        }
        let retry_after_s = item.retry_after_s();
        let step = self.tracker.observe(entry, retry_after_s);
        self.checks.observe(&Attempt {
            entry,
            retry_after_s,
            step: &step,
        });
        self.tracker.swap_closed(&mut self.closed);
        self.checks.close(&self.closed);
    }

    /// The verdicts, in the order of [`CHECK_NAMES`], given the facts gathered beside the
    /// journal.
    pub fn finish(self, facts: &Facts) -> Vec<CheckResult> {
        self.checks.finish(self.tracker.finish(), facts)
    }
}

/// The enabled checks, fed attempts already placed in their operations.
pub struct CheckSet {
    checks: Vec<Box<dyn Check>>,
}

impl CheckSet {
    /// Sees the next journal entry, with its place in its operation.
    pub fn observe(&mut self, attempt: &Attempt<'_>) {
        let protocol = attempt.entry.is_protocol();
        for check in &mut self.checks {
            if !protocol || check.reads_protocol() {
                check.observe(attempt);
            }
        }
    }

    /// Learns that these operations will get no more attempts.
    pub fn close(&mut self, ops: &[ClosedOperation]) {
        for op in ops {
            for check in &mut self.checks {
                check.close(op);
            }
        }
    }

    /// The verdicts, in the order of [`CHECK_NAMES`], once the journal has ended and the
    /// operations still open (from [`OperationTracker::finish`]) are closed.
    pub fn finish(mut self, still_open: Vec<ClosedOperation>, facts: &Facts) -> Vec<CheckResult> {
        self.close(&still_open);
        self.checks.into_iter().map(|c| c.finish(facts)).collect()
    }
}

/// Runs the checks `cfg` enables over a whole journal (entries in `seq` order), with no facts
/// beside it.
pub fn run_checks<I>(cfg: &ChecksConfig, entries: I) -> Vec<CheckResult>
where
    I: IntoIterator,
    I::Item: JournalItem,
{
    judge(cfg, entries, &Facts::default())
}

/// Runs the checks `cfg` enables over a history: its journal (entries in `seq` order) and the
/// facts gathered beside it.
pub fn judge<I>(cfg: &ChecksConfig, entries: I, facts: &Facts) -> Vec<CheckResult>
where
    I: IntoIterator,
    I::Item: JournalItem,
{
    let mut runner = ChecksRunner::new(cfg);
    for item in entries {
        runner.observe(item);
    }
    runner.finish(facts)
}

#[cfg(test)]
mod tests {
    use history::{Entry, Outcome};
    use verdict::Verdict;

    use super::testutil::entry;
    use super::*;

    /// A long run: `n` requests at 1000/s from 50 clients, every 20th failing once and retried
    /// with its key after 200 ms (keys never reused, so nothing is held beyond the horizon).
    fn long_run(n: u64) -> impl Iterator<Item = Entry> {
        let mut seq = 0;
        (0..n).flat_map(move |i| {
            let t_ms = i as f64;
            let key = format!("key-{i}");
            let client = format!("client-{}", i % 50);
            let body = format!("body-{i}");
            let first = entry(0, t_ms)
                .key(&key)
                .client(&client)
                .body(&body)
                .header("x-request-id", &key);
            let mut out = Vec::new();
            if i % 20 == 0 {
                out.push(first.clone().status(503).build());
            } else {
                out.push(first.created(&format!("o{i}")).build());
            }
            // The retry lands in arrival order only approximately; renumber below.
            if i % 20 == 0 {
                out.push(
                    entry(0, t_ms + 200.0)
                        .key(&key)
                        .client(&client)
                        .body(&body)
                        .header("x-request-id", &key)
                        .created(&format!("o{i}"))
                        .build(),
                );
            }
            out.into_iter().map(move |mut e| {
                seq += 1;
                e.seq = seq;
                e
            })
        })
    }

    #[test]
    fn memory_follows_open_operations_not_the_journal() {
        let cfg = ChecksConfig {
            grouping: GroupingConfig {
                horizon_ms: 1_000,
                ..GroupingConfig::default()
            },
            ..ChecksConfig::default()
        };
        let mut tracker = OperationTracker::new(&cfg.grouping);
        let mut most_open = 0;
        for e in long_run(20_000) {
            tracker.observe(&e, None);
            tracker.take_closed();
            most_open = most_open.max(tracker.open_operations());
        }
        // ~1000 requests per second, each kept for the 1 s horizon after its last activity.
        assert!(most_open < 2_500, "{most_open} operations open at once");
    }

    #[test]
    fn a_tcp_connection_is_no_request_to_the_checks() {
        let cfg = ChecksConfig {
            thresholds: Some(
                serde_json::from_value(serde_json::json!({ "rules": ["error_rate < 10%"] }))
                    .expect("a thresholds config"),
            ),
            ..ChecksConfig::default()
        };
        let requests: Vec<Entry> = long_run(200).collect();
        let verdicts = |j: &[Entry]| -> Vec<(String, bool, String)> {
            run_checks(&cfg, j)
                .into_iter()
                .map(|r| (r.name.clone(), r.passed(), r.summary.clone()))
                .collect()
        };
        // Between every two requests, a connection through a TCP proxy that was reset: no
        // answer, so to an HTTP check it would be a failed request.
        let mut mixed = Vec::new();
        for e in &requests {
            mixed.push(e.clone());
            let mut c = history::sample::connection(0, e.t_recv_us as f64 / 1000.0, "redis");
            c.outcome = Outcome::Reset;
            mixed.push(c);
        }
        for (i, e) in mixed.iter_mut().enumerate() {
            e.seq = i as u64 + 1;
        }
        let alone = verdicts(&requests);
        assert!(alone.iter().all(|(_, passed, _)| *passed), "{alone:?}");
        let with = verdicts(&mixed);
        let strip_seqs = |v: Vec<(String, bool, String)>| -> Vec<(String, bool)> {
            v.into_iter().map(|(n, p, _)| (n, p)).collect()
        };
        assert_eq!(strip_seqs(with), strip_seqs(alone));
    }

    #[test]
    fn every_check_runs_on_a_long_clean_run() {
        let results = run_checks(&ChecksConfig::default(), long_run(5_000));
        let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, CHECK_NAMES.to_vec());
        for r in &results {
            assert!(r.passed(), "{}: {}", r.name, r.summary);
        }
        let verdict = |n: &str| results.iter().find(|r| r.name == n).map(|r| r.verdict);
        assert_eq!(verdict("duplicates"), Some(Verdict::Pass));
        assert_eq!(verdict("idempotency_semantics"), Some(Verdict::Pass));
        assert_eq!(verdict("key_stability"), Some(Verdict::Pass));
        assert_eq!(verdict("amplification"), Some(Verdict::Pass));
    }

    #[test]
    fn a_runner_and_its_halves_can_move_to_another_thread() {
        fn send<T: Send>(_: &T) {}
        send(&ChecksRunner::new(&ChecksConfig::default()));
        let (tracker, checks) = ChecksRunner::split(&ChecksConfig::default());
        send(&tracker);
        send(&checks);
    }

    #[test]
    fn statements_and_commands_are_not_requests_to_the_request_checks() {
        // One answered request, and the statements and commands it made below HTTP (no status:
        // taken for requests, they would be errors).
        let mut j = vec![entry(1, 0).took(50).status(201).build()];
        for i in 0..5u32 {
            let seq = u64::from(i);
            j.push(entry(2 + seq, 1 + i).statement(1, 1, "SELECT 1").build());
            j.push(entry(7 + seq, 1 + i).redis(2, "GET", Some("k")).build());
        }
        let cfg =
            ChecksConfig::from_yaml("thresholds: { rules: [\"error_rate < 1%\"] }\ndb_retry: {}")
                .expect("valid");
        let results = run_checks(&cfg, &j);
        assert_eq!(results[0].name, "thresholds");
        assert_eq!(results[0].verdict, Verdict::Pass, "{}", results[0]);
        assert!(results[0].summary.contains("(0%)"), "{}", results[0]);
        // The check that reads them still does.
        assert!(
            results[1]
                .summary
                .contains("no journaled transaction failed"),
            "{}",
            results[1]
        );
    }

    #[test]
    fn accepts_entries_by_value_and_by_reference() {
        let j = vec![entry(1, 0).no_response(Outcome::Reset).build()];
        let cfg =
            ChecksConfig::from_yaml("thresholds: { rules: [\"error_rate < 1%\"] }").expect("valid");
        let by_ref = run_checks(&cfg, &j);
        let by_value = run_checks(&cfg, j);
        assert_eq!(by_ref, by_value);
        assert_eq!(by_ref[0].verdict, Verdict::Fail);
    }

    /// `cargo test -p harness --lib -- --ignored --nocapture a_million` (use an optimised build
    /// for a figure that means anything).
    #[test]
    #[ignore = "timing of a full-size journal"]
    fn a_million_entries() {
        let entries: Vec<Entry> = long_run(950_000).collect();
        let start = std::time::Instant::now();
        let results = run_checks(&ChecksConfig::default(), &entries);
        eprintln!(
            "{} entries, {} checks in {:?}",
            entries.len(),
            results.len(),
            start.elapsed()
        );
    }
}
