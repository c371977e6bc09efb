//! `junit.xml`: each check (and each operation of an audit) as a JUnit test case, so CI systems
//! show checks as tests.
//!
//! GitHub, GitLab and Jenkins all read the same small subset of JUnit: `<testsuites>`, `<testsuite>`,
//! `<testcase name classname>`, `<failure message>` with a text body, and `<system-out>`. Only that
//! subset is used. A weak or inconclusive verdict does not fail the run, so it is a passing test case
//! that says its verdict in `system-out`; marking it skipped would hide that the check did run.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, TestCase, TestCaseStatus, TestSuite};

use crate::error::ReportError;
use crate::format;
use crate::model::{
    AuditedOperation, CheckResult, ConformCase, ConformRule, OperationVerdict, Outcome, Report,
    RuleVerdict, Verdict,
};

/// The `classname` of every check's test case: CI tools group test cases by it.
pub const CLASSNAME: &str = "harness.checks";
/// The `classname` of every audited operation's test case (`harness audit`).
pub const OPERATION_CLASSNAME: &str = "harness.operations";
/// The `classname` of every rule's test case (`harness conform`): CI gates on one per rule.
pub const RULE_CLASSNAME: &str = "harness.rules";
/// The `classname` of a conformance case whose adapter did not run as it should.
pub const CASE_CLASSNAME: &str = "harness.cases";
/// The `classname` of the test case an interrupted or undecided run adds.
pub const RUN_CLASSNAME: &str = "harness.run";

/// Evidence items written per check: enough to find the problem, not a copy of the journal.
const EVIDENCE_MAX: usize = 50;
/// Journal seqs written per evidence item.
const SEQS_MAX: usize = 50;

/// The report as a JUnit XML document: one test suite named after the scenario, one case per check.
pub fn to_junit_xml(r: &Report) -> Result<String, ReportError> {
    // XML 1.0 cannot hold most control characters at all, even escaped: text from a request (a
    // key in evidence) is made printable as on a terminal.
    let r = &format::printable_report(r);
    let mut suite = TestSuite::new(r.scenario.as_str());
    suite.set_time(Duration::from_millis(r.duration_ms));
    if let Some(seed) = r.seed {
        suite.add_property(Property::new("seed", seed.to_string()));
    }
    if let Some(target) = &r.target {
        suite.add_property(Property::new("target", target.as_str()));
    }
    suite.add_property(Property::new("time_scale", r.time_scale.to_string()));
    suite.add_property(Property::new("requests_sent", r.requests.sent.to_string()));
    suite.add_property(Property::new(
        "latency_p99_ms",
        format::ms(r.latency_ms.p99),
    ));
    let outcome = r.outcome();
    suite.add_property(Property::new(
        "outcome",
        serde_json::to_value(outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
    ));
    if r.interrupted {
        suite.add_property(Property::new("interrupted", "true"));
    }
    suite.add_test_cases(r.checks.iter().map(test_case));
    suite.add_test_cases(r.operations.iter().map(operation_case));
    if let Some(c) = &r.conformance {
        suite.add_test_cases(c.rules.iter().map(rule_case));
        suite.add_test_cases(c.cases.iter().filter_map(broken_case));
    }
    // A run that did not finish, or decided nothing, must not read as green in a CI test view.
    if matches!(outcome, Outcome::Interrupted | Outcome::NoVerdict) {
        let name = match outcome {
            Outcome::Interrupted => "interrupted",
            _ => "no_verdict",
        };
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
        s.set_message(outcome.explanation())
            .set_type(outcome.word());
        let mut case = TestCase::new(name, s);
        case.set_classname(RUN_CLASSNAME);
        suite.add_test_case(case);
    }

    let mut doc = quick_junit::Report::new("harness");
    doc.set_time(Duration::from_millis(r.duration_ms));
    doc.add_test_suite(suite);
    Ok(doc.to_string()?)
}

fn test_case(c: &CheckResult) -> TestCase {
    let status = match c.verdict {
        Verdict::Fail => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(c.summary.as_str())
                .set_type("check failed")
                .set_description(failure_text(c));
            s
        }
        Verdict::Pass | Verdict::Weak | Verdict::Inconclusive => TestCaseStatus::success(),
    };
    let mut case = TestCase::new(c.name.as_str(), status);
    case.set_classname(CLASSNAME);
    if c.verdict != Verdict::Fail {
        case.set_system_out(pass_text(c));
    }
    case
}

/// An audited operation as a test case named `POST /orders (createOrder)`: failed when its
/// verdict is fail, passing otherwise with its verdict in `system-out` (as a check's).
fn operation_case(o: &AuditedOperation) -> TestCase {
    let mut lines = vec![format!("verdict: {} — {}", o.verdict.word(), o.summary)];
    lines.push(format!("probe: {}", o.probe.describe()));
    for (name, v) in [
        ("key", format::key_cell(o)),
        ("creations per key", o.creations.clone()),
        ("replay", o.replay.clone()),
        ("mismatch", o.mismatch.clone()),
        ("missing key", o.missing_key.clone()),
    ] {
        if !v.is_empty() {
            lines.push(format!("{name}: {v}"));
        }
    }
    if !o.evidence.is_empty() {
        lines.push("evidence:".to_string());
        lines.extend(
            o.evidence
                .iter()
                .take(EVIDENCE_MAX)
                .map(|e| format!("  - {}", format::evidence_line(e, SEQS_MAX))),
        );
    }
    for c in &o.checks {
        lines.push(format!(
            "check {}: {} — {}",
            c.name,
            format::verdict_word(c.verdict),
            c.summary
        ));
    }
    let text = lines.join("\n");
    let status = match o.verdict {
        OperationVerdict::Fail => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(o.summary.as_str())
                .set_type("operation failed")
                .set_description(text.clone());
            s
        }
        OperationVerdict::Pass | OperationVerdict::Inconclusive => TestCaseStatus::success(),
    };
    let mut case = TestCase::new(format!("{} ({})", o.label(), o.operation_id), status);
    case.set_classname(OPERATION_CLASSNAME);
    if o.verdict != OperationVerdict::Fail {
        case.set_system_out(text);
    }
    case
}

fn rule_case(rule: &ConformRule) -> TestCase {
    let mut lines = vec![
        format!("verdict: {} — {}", rule.verdict.word(), rule.figure),
        format!("rule: {} ({})", rule.title, rule.source),
        format!("case: {}; judged by the check {}", rule.case, rule.check),
    ];
    if !rule.evidence.is_empty() {
        lines.push("evidence:".to_string());
        lines.extend(
            rule.evidence
                .iter()
                .take(EVIDENCE_MAX)
                .map(|e| format!("  - {}", format::evidence_line(e, SEQS_MAX))),
        );
    }
    let text = lines.join("\n");
    let status = match rule.verdict {
        RuleVerdict::Fail => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(rule.figure.as_str())
                .set_type("rule broken")
                .set_description(text.clone());
            s
        }
        RuleVerdict::Pass
        | RuleVerdict::Weak
        | RuleVerdict::NotPresent
        | RuleVerdict::Inconclusive => TestCaseStatus::success(),
    };
    let mut case = TestCase::new(format!("{}: {}", rule.id, rule.title), status);
    case.set_classname(RULE_CLASSNAME);
    if rule.verdict != RuleVerdict::Fail {
        case.set_system_out(text);
    }
    case
}

/// A failing test case for a conformance case that could not run as it should (its rules are
/// inconclusive, and the scorecard cannot pass).
fn broken_case(c: &ConformCase) -> Option<TestCase> {
    let problem = c.problem.as_ref()?;
    let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
    s.set_message(problem.as_str())
        .set_type("case did not run")
        .set_description(format::case_line(c));
    let mut case = TestCase::new(format!("case {}", c.name), s);
    case.set_classname(CASE_CLASSNAME);
    Some(case)
}

fn evidence_lines(c: &CheckResult) -> Vec<String> {
    let mut lines: Vec<String> = c
        .evidence
        .iter()
        .take(EVIDENCE_MAX)
        .map(|e| format!("  - {}", format::evidence_line(e, SEQS_MAX)))
        .collect();
    lines.extend(
        format::more_findings(
            lines.len(),
            c.evidence.len(),
            c.findings_total(),
            format::REST,
        )
        .map(|l| format!("  {l}")),
    );
    lines
}

fn metrics_lines(c: &CheckResult) -> Vec<String> {
    c.metrics
        .iter()
        .map(|(k, v)| format!("  {k} = {}", format::metric_value(v)))
        .collect()
}

/// The failure body: what a CI reader needs to find the problem in the journal.
fn failure_text(c: &CheckResult) -> String {
    let mut lines = vec![c.summary.clone()];
    if !c.evidence.is_empty() {
        lines.push(String::new());
        lines.push("evidence:".to_string());
        lines.extend(evidence_lines(c));
    }
    if !c.metrics.is_empty() {
        lines.push(String::new());
        lines.push("metrics:".to_string());
        lines.extend(metrics_lines(c));
    }
    lines.join("\n")
}

fn pass_text(c: &CheckResult) -> String {
    let mut lines = vec![format!(
        "verdict: {} — {}",
        format::verdict_word(c.verdict),
        c.summary
    )];
    if c.verdict != Verdict::Pass {
        lines.push(
            "(a weak or inconclusive verdict does not fail the run, but deserves a look)"
                .to_string(),
        );
    }
    if !c.evidence.is_empty() {
        lines.push("evidence:".to_string());
        lines.extend(evidence_lines(c));
    }
    if !c.metrics.is_empty() {
        lines.push("metrics:".to_string());
        lines.extend(metrics_lines(c));
    }
    lines.join("\n")
}
