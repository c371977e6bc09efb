//! Comparing a run with a baseline: tolerances on both sides, and check flips.

mod common;

use reports::compare::{CheckChangeKind, MetricChangeKind, Regression};
use reports::{compare, CheckResult, Report, Tolerances, Verdict};

fn outcome(c: &reports::Comparison, metric: &str) -> MetricChangeKind {
    c.metrics
        .iter()
        .find(|m| m.metric == metric)
        .unwrap_or_else(|| panic!("no {metric}"))
        .outcome
}

fn base() -> Report {
    common::passing_sample()
}

#[test]
fn identical_runs_are_not_a_regression() {
    let c = compare(&base(), &base(), &Tolerances::default());
    assert!(!c.is_regression(), "{c:?}");
    assert!(c.regressions().is_empty());
    assert!(c
        .checks
        .iter()
        .all(|ch| ch.change == CheckChangeKind::Unchanged));
}

#[test]
fn latency_within_tolerance_passes_and_beyond_fails() {
    let tol = Tolerances::default();
    let mut new = base();
    new.latency_ms.p99 *= 1.05;
    let c = compare(&base(), &new, &tol);
    assert_eq!(
        outcome(&c, "latency_ms.p99"),
        MetricChangeKind::WithinTolerance
    );
    assert!(!c.is_regression());

    new.latency_ms.p99 = base().latency_ms.p99 * 1.25;
    let c = compare(&base(), &new, &tol);
    assert_eq!(outcome(&c, "latency_ms.p99"), MetricChangeKind::Regression);
    assert!(c.is_regression());
    let regressions = c.regressions();
    assert_eq!(regressions.len(), 1);
    assert!(matches!(regressions[0], Regression::Metric(m) if m.metric == "latency_ms.p99"));
    assert!(
        regressions[0].to_string().contains("+25.0%"),
        "{}",
        regressions[0]
    );

    new.latency_ms.p99 = base().latency_ms.p99 * 0.5;
    let c = compare(&base(), &new, &tol);
    assert_eq!(outcome(&c, "latency_ms.p99"), MetricChangeKind::Improvement);
    assert!(!c.is_regression());
}

#[test]
fn small_absolute_latency_changes_are_noise() {
    // p50 2.1 ms -> 2.9 ms is +38%, but 0.8 ms is below the 1 ms floor.
    let mut new = base();
    new.latency_ms.p50 = 2.9;
    let c = compare(&base(), &new, &Tolerances::default());
    assert_eq!(
        outcome(&c, "latency_ms.p50"),
        MetricChangeKind::WithinTolerance
    );
    assert!(!c.is_regression());

    let strict = Tolerances {
        latency_floor_ms: 0.0,
        ..Tolerances::default()
    };
    assert!(compare(&base(), &new, &strict).is_regression());
}

#[test]
fn max_is_shown_but_never_gated() {
    let mut new = base();
    new.latency_ms.max *= 10.0;
    let c = compare(&base(), &new, &Tolerances::default());
    assert_eq!(outcome(&c, "latency_ms.max"), MetricChangeKind::NotGated);
    assert!(!c.is_regression());
}

#[test]
fn failure_rates_are_judged_in_percentage_points() {
    let tol = Tolerances::default();
    let b = base();
    // The baseline has 50 errors and 2200 503s of 2500 sent: 90% request failures.
    let mut new = base();
    new.requests.errors += 12; // +0.48 pp
    let c = compare(&b, &new, &tol);
    assert_eq!(
        outcome(&c, "request_failure_rate_pct"),
        MetricChangeKind::WithinTolerance
    );
    assert!(!c.is_regression());

    new.requests.errors = b.requests.errors + 50; // +2 pp
    let c = compare(&b, &new, &tol);
    assert_eq!(
        outcome(&c, "request_failure_rate_pct"),
        MetricChangeKind::Regression
    );
    let m = c
        .metrics
        .iter()
        .find(|m| m.metric == "request_failure_rate_pct")
        .unwrap();
    assert!((m.change.unwrap() - 2.0).abs() < 1e-9, "{m:?}");
    assert!(c.is_regression());

    // Operation failures (`error_rate`) are compared only where both runs know operations.
    assert!(c.metrics.iter().all(|m| m.metric != "error_rate_pct"));
    let (mut b, mut new) = (base(), base());
    b.requests.operations = Some(500);
    b.requests.failed_operations = Some(5); // 1%
    new.requests.operations = Some(500);
    new.requests.failed_operations = Some(20); // 4%
    let c = compare(&b, &new, &tol);
    assert_eq!(outcome(&c, "error_rate_pct"), MetricChangeKind::Regression);
    new.requests.operations = None;
    let c = compare(&b, &new, &tol);
    assert_eq!(outcome(&c, "error_rate_pct"), MetricChangeKind::NotGated);
}

#[test]
fn throughput_may_drop_only_so_far() {
    let tol = Tolerances::default();
    let mut new = base();
    new.throughput_rps = base().throughput_rps * 0.95;
    let c = compare(&base(), &new, &tol);
    assert_eq!(
        outcome(&c, "throughput_rps"),
        MetricChangeKind::WithinTolerance
    );
    assert!(!c.is_regression());

    new.throughput_rps = base().throughput_rps * 0.8;
    let c = compare(&base(), &new, &tol);
    assert_eq!(outcome(&c, "throughput_rps"), MetricChangeKind::Regression);
    assert!(c.is_regression());

    new.throughput_rps = base().throughput_rps * 1.5;
    let c = compare(&base(), &new, &tol);
    assert_eq!(outcome(&c, "throughput_rps"), MetricChangeKind::Improvement);
}

#[test]
fn a_check_that_starts_failing_is_a_regression() {
    let mut new = base();
    new.checks[0] = CheckResult::new("duplicates", Verdict::Fail, "7 orders for one key");
    let c = compare(&base(), &new, &Tolerances::default());
    assert!(c.is_regression());
    let regressions = c.regressions();
    assert_eq!(regressions.len(), 1);
    match regressions[0] {
        Regression::Check(ch) => {
            assert_eq!(ch.name, "duplicates");
            assert_eq!(ch.base, Some(Verdict::Pass));
            assert_eq!(ch.new, Some(Verdict::Fail));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        regressions[0].to_string(),
        "check duplicates went from pass to fail"
    );

    // The other way round is an improvement, not a regression.
    let back = compare(&new, &base(), &Tolerances::default());
    assert!(!back.is_regression());
    assert_eq!(back.checks[0].change, CheckChangeKind::Improvement);
}

#[test]
fn added_and_softened_checks_are_noted_missing_and_undecided_ones_gated() {
    let mut new = base();
    new.checks.retain(|c| c.name != "retry_after");
    new.checks.push(CheckResult::new(
        "circuit_breaker",
        Verdict::Pass,
        "opened after 20 failures",
    ));
    new.checks[0].verdict = Verdict::Weak;
    let c = compare(&base(), &new, &Tolerances::default());
    let kind = |name: &str| c.checks.iter().find(|ch| ch.name == name).unwrap().change;
    assert_eq!(kind("retry_after"), CheckChangeKind::Missing);
    assert_eq!(kind("circuit_breaker"), CheckChangeKind::Added);
    assert_eq!(kind("duplicates"), CheckChangeKind::VerdictChanged);
    // retry_after was inconclusive in the baseline: nothing judged is lost.
    assert!(!c.is_regression(), "{:?}", c.regressions());
    // A check the baseline decided, gone: the run judged less, unless that is accepted.
    let mut new = base();
    let gone = new.checks.remove(0).name;
    let c = compare(&base(), &new, &Tolerances::default());
    let regressions: Vec<String> = c.regressions().iter().map(ToString::to_string).collect();
    assert_eq!(regressions.len(), 1, "{regressions:?}");
    assert!(
        regressions[0].starts_with(&format!("check {gone} (pass in the baseline) is missing")),
        "{regressions:?}"
    );
    let c = c.allowing_missing(true);
    assert!(!c.is_regression());

    // Decided in the baseline, inconclusive now: the new run could not judge it.
    let mut new = base();
    new.checks[0].verdict = Verdict::Inconclusive;
    let c = compare(&base(), &new, &Tolerances::default());
    assert_eq!(c.checks[0].change, CheckChangeKind::NewlyInconclusive);
    assert!(c.is_regression());
    assert!(!c.allowing_missing(true).is_regression());
}

#[test]
fn reports_of_different_scenarios_are_no_baseline() {
    let mut other = base();
    assert_eq!(
        compare(&base(), &other, &Tolerances::default()).mismatch,
        None
    );
    other.scenario = "another".into();
    let c = compare(&base(), &other, &Tolerances::default());
    let why = c.mismatch.as_deref().expect("a mismatch");
    assert!(why.contains("different scenarios"), "{why}");
    assert!(c
        .render_terminal(false)
        .contains("warning: the reports are of different scenarios"));
}

#[test]
fn tolerances_read_from_partial_config() {
    let t: Tolerances = serde_json::from_str(r#"{"latency_increase_pct": 25}"#).unwrap();
    assert_eq!(t.latency_increase_pct, 25.0);
    assert_eq!(
        t.error_rate_increase_pp,
        Tolerances::default().error_rate_increase_pp
    );
    assert_eq!(t.throughput_decrease_pct, 10.0);
    let err = serde_json::from_str::<Tolerances>(r#"{"latency_pct": 25}"#).unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
}

#[test]
fn renders_as_table_and_json() {
    let mut new = base();
    new.latency_ms.p99 *= 2.0;
    let c = compare(&base(), &new, &Tolerances::default());

    let text = c.render_terminal(false);
    assert!(!text.contains('\u{1b}'), "{text}");
    assert!(text.starts_with("1 regression(s)"), "{text}");
    assert!(text.contains("latency_ms.p99"), "{text}");
    assert!(text.contains("REGRESSION"), "{text}");
    assert!(text.contains("+100.0%"), "{text}");
    assert!(c.render_terminal(true).contains('\u{1b}'));

    let v: serde_json::Value = serde_json::from_str(&c.to_json_pretty()).unwrap();
    assert_eq!(v["regression"], true);
    assert_eq!(v["regressions"].as_array().unwrap().len(), 1);
    assert_eq!(v["tolerances"]["latency_increase_pct"], 10.0);
    let p99 = v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "latency_ms.p99")
        .unwrap();
    assert_eq!(p99["outcome"], "regression");
    assert_eq!(p99["unit"], "percent");
}

#[test]
fn empty_runs_are_not_gated() {
    let c = compare(&common::empty(), &base(), &Tolerances::default());
    assert!(
        c.metrics
            .iter()
            .all(|m| m.outcome == MetricChangeKind::NotGated),
        "{:?}",
        c.metrics
    );
}
