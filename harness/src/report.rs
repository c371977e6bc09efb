//! The one way the harness builds a [`Report`]: every command (`run`, `exec`, `load`,
//! `idempotency`, `analyze`) fills in what it measured, and [`ReportBuilder::build`] decides
//! whether the run passed — from the checks' verdicts and the command's exit, and nothing else.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reports::model::{
    AttemptDelays, AuditedOperation, Exec, Latency, Mergeable, OperationVerdict, Phase, Requests,
    RuleVerdict, ShardInfo, Timeline, SCHEMA_VERSION,
};
use reports::{CheckResult, Outcome, Report, Verdict};

use crate::metrics::{latency_ms, Recorder};

/// A report being filled in.
#[derive(Debug, Clone)]
pub struct ReportBuilder {
    report: Report,
    /// Whether a run in which no check reached pass or fail is [`Outcome::NoVerdict`].
    verdict_required: bool,
    /// Whether the run was meant to send load: one that sent nothing is then
    /// [`Outcome::NoVerdict`], whatever its checks say.
    load_expected: bool,
}

impl ReportBuilder {
    /// Marks a report on journals alone (`analyze`): its duration is their span.
    pub fn from_journal(mut self, yes: bool) -> Self {
        self.report.from_journal = yes;
        self
    }

    /// A report named `scenario` (a scenario's name, or the command), started now.
    pub fn new(scenario: impl Into<String>) -> ReportBuilder {
        ReportBuilder {
            report: Report {
                schema_version: SCHEMA_VERSION,
                scenario: scenario.into(),
                outcome: None,
                interrupted: false,
                started_unix_ms: now_unix_ms(),
                duration_ms: 0,
                from_journal: false,
                target: None,
                seed: None,
                time_scale: 1.0,
                requests: Requests::default(),
                latency_ms: Latency::default(),
                throughput_rps: 0.0,
                errors_by_kind: BTreeMap::new(),
                phases: Vec::new(),
                checks: Vec::new(),
                timeline: None,
                retry_delays: Vec::new(),
                exec: None,
                shard: None,
                mergeable: None,
                notes: Vec::new(),
                operations: Vec::new(),
                connections: Vec::new(),
                statements: Vec::new(),
                conformance: None,
            },
            verdict_required: true,
            load_expected: false,
        }
    }

    /// A report built before, to add to (`harness merge` adds the verdicts to the merged
    /// figures); its outcome is decided again by [`ReportBuilder::build`].
    pub fn from_report(report: Report) -> ReportBuilder {
        ReportBuilder {
            report,
            verdict_required: true,
            load_expected: false,
        }
    }

    /// The wall-clock start given so far, ms since the Unix epoch.
    pub fn start_unix_ms(&self) -> u64 {
        self.report.started_unix_ms
    }

    /// Whether the run must reach a verdict to pass (`harness load` without checks need not).
    pub fn verdict_required(mut self, required: bool) -> Self {
        self.verdict_required = required;
        self
    }

    /// The run drove load itself (phases, `harness load`): if it sent no request, nothing was
    /// tested and it does not pass.
    pub fn load_expected(mut self, expected: bool) -> Self {
        self.load_expected = expected;
        self
    }

    /// Ctrl-C or SIGTERM stopped the run before its end.
    pub fn interrupted(mut self, interrupted: bool) -> Self {
        self.report.interrupted = interrupted;
        self
    }

    /// The wall-clock start, ms since the Unix epoch (0 when unknown).
    pub fn started_unix_ms(mut self, ms: u64) -> Self {
        self.report.started_unix_ms = ms;
        self
    }

    /// How long the run took.
    pub fn duration(mut self, d: Duration) -> Self {
        self.report.duration_ms = millis(d);
        self
    }

    /// The URL the load went to.
    pub fn target(mut self, url: Option<String>) -> Self {
        self.report.target = url;
        self
    }

    /// The seed and time scale of a scenario run.
    pub fn scenario_settings(mut self, seed: u64, time_scale: f64) -> Self {
        self.report.seed = Some(seed);
        self.report.time_scale = time_scale;
        self
    }

    /// What the load driver measured over `over`: request counts, latency, throughput, errors.
    pub fn measured(mut self, rec: &Recorder, over: Duration) -> Self {
        self.report.requests = rec.requests();
        self.report.latency_ms = latency_ms(&rec.latency);
        self.report.throughput_rps = rec.completed() as f64 / over.as_secs_f64().max(1e-9);
        self.report.errors_by_kind = rec.errors_by_kind();
        self
    }

    /// Request counts from elsewhere than the driver (the server's journal).
    pub fn requests(mut self, r: Requests) -> Self {
        self.report.requests = r;
        self
    }

    /// Latency and throughput from elsewhere than the driver.
    pub fn latency(mut self, l: Latency, throughput_rps: f64) -> Self {
        self.report.latency_ms = l;
        self.report.throughput_rps = throughput_rps;
        self
    }

    /// Failed requests by kind, from elsewhere than the driver.
    pub fn errors_by_kind(mut self, e: BTreeMap<String, u64>) -> Self {
        self.report.errors_by_kind = e;
        self
    }

    /// Per-phase figures.
    pub fn phases(mut self, p: Vec<Phase>) -> Self {
        self.report.phases = p;
        self
    }

    /// The checks' verdicts, as they returned them.
    pub fn checks(mut self, c: Vec<CheckResult>) -> Self {
        self.report.checks = c;
        self
    }

    /// Requests per time window.
    pub fn timeline(mut self, t: Option<Timeline>) -> Self {
        self.report.timeline = t;
        self
    }

    /// Retry delays by attempt index.
    pub fn retry_delays(mut self, d: Vec<AttemptDelays>) -> Self {
        self.report.retry_delays = d;
        self
    }

    /// What `harness exec` ran.
    pub fn exec(mut self, e: Option<Exec>) -> Self {
        self.report.exec = e;
        self
    }

    /// The shard of a split run this report covers.
    pub fn shard(mut self, s: Option<ShardInfo>) -> Self {
        self.report.shard = s;
        self
    }

    /// The histograms and counts a merge needs.
    pub fn mergeable(mut self, m: Option<Mergeable>) -> Self {
        self.report.mergeable = m;
        self
    }

    /// `harness audit`'s rows: one per unsafe operation.
    pub fn operations(mut self, ops: Vec<AuditedOperation>) -> Self {
        self.report.operations = ops;
        self
    }

    /// `harness conform`'s scorecard.
    pub fn conformance(mut self, c: reports::model::Conformance) -> Self {
        self.report.conformance = Some(c);
        self
    }

    /// Connections through the fault server's TCP proxies, per proxy (the journal's).
    pub fn connections(mut self, c: Vec<reports::model::ProxyConnections>) -> Self {
        self.report.connections = c;
        self
    }

    /// Statements and commands the fault server's protocol proxies read, per proxy (the
    /// journal's).
    pub fn statements(mut self, s: Vec<reports::model::ProxyStatements>) -> Self {
        self.report.statements = s;
        self
    }

    /// A note the reader must see.
    pub fn note(mut self, n: impl Into<String>) -> Self {
        self.report.notes.push(n.into());
        self
    }

    /// The report, with its outcome: interrupted when it was; failed when a check, an audited
    /// operation or a conformance rule failed, the command `exec` ran (if any) exited non-zero,
    /// or a conformance case could not run as it should; no verdict when the
    /// run was to send load and sent nothing, or when a verdict was required and no check (and
    /// no operation) reached pass, weak or fail; passed otherwise.
    pub fn build(mut self) -> Report {
        let r = &self.report;
        let exec_failed = r.exec.as_ref().is_some_and(|e| e.exit_code != Some(0));
        let (rules, cases) = match &r.conformance {
            Some(c) => (c.rules.as_slice(), c.cases.as_slice()),
            None => (&[][..], &[][..]),
        };
        let failed = r.checks.iter().any(|c| !c.passed())
            || r.operations
                .iter()
                .any(|o| o.verdict == OperationVerdict::Fail)
            || rules.iter().any(|rule| rule.verdict == RuleVerdict::Fail)
            || cases.iter().any(|case| case.problem.is_some())
            || exec_failed;
        let decided = r.checks.iter().any(|c| c.verdict != Verdict::Inconclusive)
            || r.operations
                .iter()
                .any(|o| o.verdict != OperationVerdict::Inconclusive)
            || rules.iter().any(|rule| {
                matches!(
                    rule.verdict,
                    RuleVerdict::Pass | RuleVerdict::Weak | RuleVerdict::Fail
                )
            });
        let sent_nothing = self.load_expected && r.requests.sent == 0;
        let outcome = if r.interrupted {
            Outcome::Interrupted
        } else if failed {
            Outcome::Failed
        } else if sent_nothing {
            self.report
                .notes
                .push("no request was sent: nothing was tested".to_string());
            Outcome::NoVerdict
        } else if self.verdict_required && !decided {
            Outcome::NoVerdict
        } else {
            Outcome::Passed
        };
        self.report.outcome = Some(outcome);
        self.report
    }
}

/// One phase's figures from its recorder: counts, latency (and, for an open-model phase, the
/// latency from the intended start), throughput.
pub fn phase(
    name: &str,
    kind: &str,
    rec: &Recorder,
    duration: Duration,
    intended: bool,
    metrics: BTreeMap<String, serde_json::Value>,
) -> Phase {
    Phase {
        name: name.to_string(),
        kind: kind.to_string(),
        duration_ms: millis(duration),
        requests: rec.requests(),
        latency_ms: latency_ms(&rec.latency),
        latency_intended_ms: intended.then(|| latency_ms(&rec.intended)),
        throughput_rps: rec.completed() as f64 / duration.as_secs_f64().max(1e-9),
        metrics,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Now, in ms since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// The report of `harness idempotency`.
pub fn probe_report(o: &crate::probe::ProbeOutcome) -> Report {
    let mut rec = Recorder::new(false);
    for ms in &o.latency_ms {
        rec.latency(Duration::from_secs_f64(ms / 1000.0));
    }
    let completed: u64 = o.by_status.values().sum();
    let requests = reports::model::Requests {
        sent: o.requests_sent,
        completed,
        errors: o.requests_sent.saturating_sub(completed),
        retries: 0,
        by_status: o.by_status.clone(),
        ..reports::model::Requests::default()
    };
    let mut metrics = BTreeMap::new();
    metrics.insert(
        "release_skew_us_max".to_string(),
        serde_json::json!(o.release_skew_us_max),
    );
    metrics.insert("rounds".to_string(), serde_json::json!(o.rounds.len()));
    let duration = Duration::from_millis(o.duration_ms);
    let mut phase = crate::report::phase("bursts", "burst", &rec, duration, false, metrics);
    phase.requests = requests.clone();
    phase.throughput_rps = completed as f64 / duration.as_secs_f64().max(1e-9);
    ReportBuilder::new(format!("idempotency {}", o.target))
        .duration(duration)
        .target(Some(o.target.clone()))
        .requests(requests)
        .latency(latency_ms(&rec.latency), phase.throughput_rps)
        .errors_by_kind(o.errors_by_kind.clone())
        .phases(vec![phase])
        .checks(o.checks.clone())
        .interrupted(o.interrupted)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reports::Verdict;

    #[test]
    fn passes_only_when_every_check_passes_and_the_command_exited_zero() {
        let pass = CheckResult::new("jitter", Verdict::Pass, "ok");
        let weak = CheckResult::new("retry_after", Verdict::Weak, "weakly");
        let fail = CheckResult::new("duplicates", Verdict::Fail, "two orders");
        let built = |checks: Vec<CheckResult>, exit: Option<Option<i32>>| {
            ReportBuilder::new("t")
                .checks(checks)
                .exec(exit.map(|exit_code| Exec {
                    command: vec!["true".into()],
                    exit_code,
                }))
                .build()
                .passed()
        };
        assert!(built(vec![pass.clone(), weak.clone()], None));
        assert!(!built(vec![pass.clone(), fail], None));
        assert!(built(vec![pass.clone()], Some(Some(0))));
        assert!(!built(vec![pass.clone()], Some(Some(1))));
        assert!(!built(vec![pass], Some(None)), "killed by a signal");
    }

    #[test]
    fn a_run_that_decided_nothing_or_was_interrupted_does_not_pass() {
        let pass = CheckResult::new("jitter", Verdict::Pass, "ok");
        let weak = CheckResult::new("retry_after", Verdict::Weak, "weakly");
        let unsure = CheckResult::new("amplification", Verdict::Inconclusive, "no retries");
        let fail = CheckResult::new("duplicates", Verdict::Fail, "two orders");
        let outcome = |checks: Vec<CheckResult>, required: bool, interrupted: bool| {
            let r = ReportBuilder::new("t")
                .checks(checks)
                .verdict_required(required)
                .interrupted(interrupted)
                .build();
            r.outcome()
        };
        assert_eq!(outcome(vec![], true, false), Outcome::NoVerdict);
        assert_eq!(
            outcome(vec![unsure.clone(), unsure.clone()], true, false),
            Outcome::NoVerdict
        );
        assert_eq!(
            outcome(vec![unsure.clone(), weak], true, false),
            Outcome::Passed
        );
        assert_eq!(
            outcome(vec![unsure.clone(), pass.clone()], true, false),
            Outcome::Passed
        );
        assert_eq!(
            outcome(vec![unsure, fail.clone()], true, false),
            Outcome::Failed
        );
        assert_eq!(
            outcome(vec![], false, false),
            Outcome::Passed,
            "load without checks"
        );
        assert_eq!(outcome(vec![pass], true, true), Outcome::Interrupted);
        assert_eq!(outcome(vec![fail], true, true), Outcome::Interrupted);
        let nothing_sent = |checks: Vec<CheckResult>| {
            ReportBuilder::new("t")
                .checks(checks)
                .load_expected(true)
                .build()
        };
        let r = nothing_sent(vec![CheckResult::new("jitter", Verdict::Pass, "ok")]);
        assert_eq!(r.outcome(), Outcome::NoVerdict, "a pass on no load");
        assert!(r.notes.iter().any(|n| n.contains("no request was sent")));
        assert_eq!(nothing_sent(vec![]).outcome(), Outcome::NoVerdict);
    }

    #[test]
    fn an_audit_fails_on_one_failed_operation_and_decides_nothing_on_inconclusive_ones() {
        let op = |verdict| AuditedOperation {
            method: "POST".into(),
            path: "/orders".into(),
            operation_id: "createOrder".into(),
            key_header: None,
            key_support: "none".into(),
            probe: reports::model::ProbeKind::None,
            verdict,
            summary: String::new(),
            creations: String::new(),
            replay: String::new(),
            mismatch: String::new(),
            missing_key: String::new(),
            evidence: Vec::new(),
            checks: Vec::new(),
            request: None,
            requests_sent: 0,
        };
        let outcome = |ops: Vec<AuditedOperation>| {
            ReportBuilder::new("audit")
                .operations(ops)
                .build()
                .outcome()
        };
        use OperationVerdict::{Fail, Inconclusive, Pass};
        assert_eq!(outcome(vec![op(Pass), op(Fail)]), Outcome::Failed);
        assert_eq!(outcome(vec![op(Pass), op(Inconclusive)]), Outcome::Passed);
        assert_eq!(
            outcome(vec![op(Inconclusive), op(Inconclusive)]),
            Outcome::NoVerdict
        );
        assert_eq!(outcome(vec![]), Outcome::NoVerdict);
    }
}
