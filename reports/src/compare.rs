//! Comparing a run with a baseline: did it get worse by more than noise explains?
//!
//! Two runs of the same scenario never give the same numbers, so a comparison that flags every
//! change is ignored after a week. Each figure therefore has a tolerance ([`Tolerances`]), and only a
//! change beyond it in the bad direction is a regression. Latency also has a floor in milliseconds,
//! because +30 % of a 0.4 ms loopback p50 is scheduler noise, not a slower service. `max` is shown but
//! never gated: it is one sample, and gating on one sample makes a flaky gate. A check that went
//! from passing to failing is always a regression, whatever the numbers say; so is a check the
//! baseline judged that the new run did not (missing, or inconclusive where the baseline decided):
//! a run that judged less must not pass a gate that trusted the baseline's judgement
//! (`allow_missing` accepts it). Two reports of different scenarios are no baseline and its run
//! ([`Comparison::mismatch`]).

use std::collections::BTreeMap;
use std::fmt;

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, CellAlignment, Color, Table};
use serde::{Deserialize, Serialize};

use crate::format;
use crate::model::{Latency, Report, Verdict};

/// How much worse a figure may get before it counts as a regression.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tolerances {
    /// Largest allowed rise of a latency percentile, in percent of the baseline.
    pub latency_increase_pct: f64,
    /// Latency changes smaller than this, in milliseconds, are noise whatever their percentage.
    pub latency_floor_ms: f64,
    /// Largest allowed rise of a failure rate (operation failures, request failures), in
    /// percentage points.
    pub error_rate_increase_pp: f64,
    /// Largest allowed drop of throughput, in percent of the baseline.
    pub throughput_decrease_pct: f64,
}

impl Default for Tolerances {
    fn default() -> Self {
        Tolerances {
            latency_increase_pct: 10.0,
            latency_floor_ms: 1.0,
            error_rate_increase_pp: 1.0,
            throughput_decrease_pct: 10.0,
        }
    }
}

/// The unit a [`MetricChange::change`] is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeUnit {
    /// Relative change, in percent of the baseline.
    Percent,
    /// Absolute change of a percentage, in percentage points.
    PercentagePoints,
}

/// What a change amounts to, given the tolerances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricChangeKind {
    /// Worse by more than the tolerance.
    Regression,
    /// Better by more than the tolerance.
    Improvement,
    /// Changed by no more than the tolerance.
    WithinTolerance,
    /// Shown for information only (e.g. `max`, or a figure the baseline lacks).
    NotGated,
}

/// One figure in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricChange {
    /// Dotted name, e.g. `latency_ms.p99`, `error_rate_pct` (operation failures),
    /// `request_failure_rate_pct`, `throughput_rps`.
    pub metric: String,
    /// Value in the baseline run.
    pub base: f64,
    /// Value in the new run.
    pub new: f64,
    /// The change in `unit`; `None` when a relative change has no baseline to be relative to.
    pub change: Option<f64>,
    /// Unit of `change`.
    pub unit: ChangeUnit,
    /// What the change amounts to.
    pub outcome: MetricChangeKind,
}

/// How one check's verdict moved between the runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckChangeKind {
    /// Same verdict in both runs.
    Unchanged,
    /// Passed (or was weak or inconclusive) in the baseline, fails now.
    Regression,
    /// Failed in the baseline, passes now.
    Improvement,
    /// Moved between non-failing verdicts, e.g. pass to weak.
    VerdictChanged,
    /// Only the new run has this check.
    Added,
    /// Only the baseline has this check: a regression where the baseline decided it, unless
    /// missing checks are allowed.
    Missing,
    /// The baseline decided it (pass, weak or fail); the new run could not (inconclusive): a
    /// regression unless missing checks are allowed.
    NewlyInconclusive,
}

/// One check in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckChange {
    /// The check's stable name.
    pub name: String,
    /// Verdict in the baseline, if it ran there.
    pub base: Option<Verdict>,
    /// Verdict in the new run, if it ran there.
    pub new: Option<Verdict>,
    /// How the verdict moved.
    pub change: CheckChangeKind,
}

/// The comparison of a new run with a baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Scenario of the baseline run.
    pub base_scenario: String,
    /// Scenario of the new run.
    pub new_scenario: String,
    /// The tolerances the outcomes were judged by.
    pub tolerances: Tolerances,
    /// Latency percentiles, error rate and throughput, in that order.
    pub metrics: Vec<MetricChange>,
    /// Every check of either run, in the baseline's order, then the new ones.
    pub checks: Vec<CheckChange>,
    /// Whether a check missing or newly inconclusive in the new run is accepted.
    pub allow_missing: bool,
    /// Why the two reports are not runs of one scenario, when they are not (names or checks'
    /// configuration differ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
}

/// One reason a comparison is a regression.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Regression<'a> {
    /// A figure got worse beyond its tolerance.
    Metric(&'a MetricChange),
    /// A check went from passing to failing, or the new run did not judge it.
    Check(&'a CheckChange),
}

impl fmt::Display for Regression<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Regression::Metric(m) => write!(
                f,
                "{} went from {} to {} ({})",
                m.metric,
                format::sig3(m.base),
                format::sig3(m.new),
                change_text(m)
            ),
            Regression::Check(c) if c.change == CheckChangeKind::Missing => write!(
                f,
                "check {} ({} in the baseline) is missing in the new run (--allow-missing \
                 accepts a run that judged less)",
                c.name,
                verdict_text(c.base)
            ),
            Regression::Check(c) if c.change == CheckChangeKind::NewlyInconclusive => write!(
                f,
                "check {} went from {} to inconclusive: the new run could not decide it \
                 (--allow-missing accepts a run that judged less)",
                c.name,
                verdict_text(c.base)
            ),
            Regression::Check(c) => write!(
                f,
                "check {} went from {} to {}",
                c.name,
                verdict_text(c.base),
                verdict_text(c.new)
            ),
        }
    }
}

/// Compares `new` with the baseline `base` under `tol`.
pub fn compare(base: &Report, new: &Report, tol: &Tolerances) -> Comparison {
    let mut metrics = latency_changes(&base.latency_ms, &new.latency_ms, tol);

    let pct = |r: Option<f64>| r.map(|f| f * 100.0);
    for (metric, b, n) in [
        (
            "error_rate_pct",
            pct(base.requests.operation_failure_rate()),
            pct(new.requests.operation_failure_rate()),
        ),
        (
            "request_failure_rate_pct",
            pct(base.requests.request_failure_rate()),
            pct(new.requests.request_failure_rate()),
        ),
    ] {
        // A rate one run does not have is shown as 0 and not gated.
        let gated = b.is_some() && n.is_some();
        let (be, ne) = (b.unwrap_or(0.0), n.unwrap_or(0.0));
        if metric == "error_rate_pct" && b.is_none() && n.is_none() {
            continue;
        }
        let delta = ne - be;
        metrics.push(MetricChange {
            metric: metric.to_string(),
            base: be,
            new: ne,
            change: gated.then_some(delta),
            unit: ChangeUnit::PercentagePoints,
            outcome: if !gated {
                MetricChangeKind::NotGated
            } else if delta > tol.error_rate_increase_pp {
                MetricChangeKind::Regression
            } else if -delta > tol.error_rate_increase_pp {
                MetricChangeKind::Improvement
            } else {
                MetricChangeKind::WithinTolerance
            },
        });
    }

    let (bt, nt) = (base.throughput_rps, new.throughput_rps);
    let rel = relative_pct(bt, nt);
    metrics.push(MetricChange {
        metric: "throughput_rps".to_string(),
        base: bt,
        new: nt,
        change: rel,
        unit: ChangeUnit::Percent,
        outcome: match rel {
            None => MetricChangeKind::NotGated,
            Some(r) if -r > tol.throughput_decrease_pct => MetricChangeKind::Regression,
            Some(r) if r > tol.throughput_decrease_pct => MetricChangeKind::Improvement,
            Some(_) => MetricChangeKind::WithinTolerance,
        },
    });

    Comparison {
        base_scenario: base.scenario.clone(),
        new_scenario: new.scenario.clone(),
        tolerances: tol.clone(),
        metrics,
        checks: check_changes(base, new),
        allow_missing: false,
        mismatch: mismatch(base, new),
    }
}

/// Why `base` and `new` are not two runs of one scenario: their names differ, or both carry
/// their checks' configuration and it differs.
fn mismatch(base: &Report, new: &Report) -> Option<String> {
    if base.scenario != new.scenario {
        return Some(format!(
            "the reports are of different scenarios: the baseline ran {:?}, the new run {:?}",
            base.scenario, new.scenario
        ));
    }
    let config = |r: &Report| r.mergeable.as_ref().map(|m| m.checks.clone());
    match (config(base), config(new)) {
        (Some(b), Some(n)) if b != n => Some(format!(
            "the reports of {:?} configure their checks differently: not a baseline and its run",
            base.scenario
        )),
        _ => None,
    }
}

fn relative_pct(base: f64, new: f64) -> Option<f64> {
    (base > 0.0 && base.is_finite() && new.is_finite()).then(|| (new - base) * 100.0 / base)
}

fn latency_changes(base: &Latency, new: &Latency, tol: &Tolerances) -> Vec<MetricChange> {
    // A run with no completed request has no latency, and zero is not a fast service.
    let gated = !format::latency_is_empty(base) && !format::latency_is_empty(new);
    format::percentiles(base)
        .into_iter()
        .zip(format::percentiles(new))
        .map(|((name, b), (_, n))| {
            let change = relative_pct(b, n);
            let delta = n - b;
            let outcome = match change {
                _ if !gated || name == "max" => MetricChangeKind::NotGated,
                None => MetricChangeKind::NotGated,
                Some(r) if r > tol.latency_increase_pct && delta > tol.latency_floor_ms => {
                    MetricChangeKind::Regression
                }
                Some(r) if -r > tol.latency_increase_pct && -delta > tol.latency_floor_ms => {
                    MetricChangeKind::Improvement
                }
                Some(_) => MetricChangeKind::WithinTolerance,
            };
            MetricChange {
                metric: format!("latency_ms.{}", name.replace('.', "")),
                base: b,
                new: n,
                change,
                unit: ChangeUnit::Percent,
                outcome,
            }
        })
        .collect()
}

fn check_changes(base: &Report, new: &Report) -> Vec<CheckChange> {
    let new_by_name: BTreeMap<&str, Verdict> = new
        .checks
        .iter()
        .map(|c| (c.name.as_str(), c.verdict))
        .collect();
    let base_names: BTreeMap<&str, Verdict> = base
        .checks
        .iter()
        .map(|c| (c.name.as_str(), c.verdict))
        .collect();
    let mut out: Vec<CheckChange> = base
        .checks
        .iter()
        .map(|c| {
            let now = new_by_name.get(c.name.as_str()).copied();
            let change = match now {
                None => CheckChangeKind::Missing,
                Some(v) if v == c.verdict => CheckChangeKind::Unchanged,
                Some(Verdict::Inconclusive) => CheckChangeKind::NewlyInconclusive,
                Some(Verdict::Fail) => CheckChangeKind::Regression,
                Some(_) if c.verdict == Verdict::Fail => CheckChangeKind::Improvement,
                Some(_) => CheckChangeKind::VerdictChanged,
            };
            CheckChange {
                name: c.name.clone(),
                base: Some(c.verdict),
                new: now,
                change,
            }
        })
        .collect();
    out.extend(
        new.checks
            .iter()
            .filter(|c| !base_names.contains_key(c.name.as_str()))
            .map(|c| CheckChange {
                name: c.name.clone(),
                base: None,
                new: Some(c.verdict),
                change: CheckChangeKind::Added,
            }),
    );
    out
}

fn change_text(m: &MetricChange) -> String {
    match (m.change, m.unit) {
        (None, _) => "n/a".to_string(),
        (Some(c), ChangeUnit::Percent) => format!("{c:+.1}%"),
        (Some(c), ChangeUnit::PercentagePoints) => format!("{c:+.2} pp"),
    }
}

fn verdict_text(v: Option<Verdict>) -> &'static str {
    v.map_or("absent", format::verdict_word)
}

fn outcome_text(o: MetricChangeKind) -> &'static str {
    match o {
        MetricChangeKind::Regression => "REGRESSION",
        MetricChangeKind::Improvement => "improvement",
        MetricChangeKind::WithinTolerance => "ok",
        MetricChangeKind::NotGated => "not gated",
    }
}

fn check_change_text(k: CheckChangeKind) -> &'static str {
    match k {
        CheckChangeKind::Unchanged => "unchanged",
        CheckChangeKind::Regression => "REGRESSION",
        CheckChangeKind::Improvement => "improvement",
        CheckChangeKind::VerdictChanged => "verdict changed",
        CheckChangeKind::Added => "new check",
        CheckChangeKind::Missing => "MISSING in new run",
        CheckChangeKind::NewlyInconclusive => "NEWLY INCONCLUSIVE",
    }
}

/// The JSON document of a comparison: its verdict first, then the full comparison.
#[derive(Serialize)]
struct JsonView<'a> {
    regression: bool,
    regressions: Vec<String>,
    #[serde(flatten)]
    comparison: &'a Comparison,
}

impl Comparison {
    /// This comparison with checks missing or newly inconclusive in the new run accepted (or
    /// not): `harness report --compare --allow-missing`.
    pub fn allowing_missing(mut self, allow: bool) -> Self {
        self.allow_missing = allow;
        self
    }

    /// Every reason this comparison is a regression; empty when there is none.
    pub fn regressions(&self) -> Vec<Regression<'_>> {
        let metrics = self
            .metrics
            .iter()
            .filter(|m| m.outcome == MetricChangeKind::Regression)
            .map(Regression::Metric);
        let checks = self
            .checks
            .iter()
            .filter(|c| match c.change {
                CheckChangeKind::Regression => true,
                // Missing is a loss only where the baseline had decided the check.
                CheckChangeKind::Missing => {
                    !self.allow_missing && c.base.is_some_and(|v| v != Verdict::Inconclusive)
                }
                CheckChangeKind::NewlyInconclusive => !self.allow_missing,
                _ => false,
            })
            .map(Regression::Check);
        metrics.chain(checks).collect()
    }

    /// True when anything got worse beyond its tolerance or a check started failing.
    pub fn is_regression(&self) -> bool {
        !self.regressions().is_empty()
    }

    /// The comparison as JSON, with `regression` and a readable `regressions` list on top.
    pub fn to_json_pretty(&self) -> String {
        let view = JsonView {
            regression: self.is_regression(),
            regressions: self.regressions().iter().map(ToString::to_string).collect(),
            comparison: self,
        };
        // Only derived impls, string keys and an in-memory writer: serde_json cannot fail here.
        serde_json::to_string_pretty(&view).expect("a comparison always serializes to JSON")
    }

    /// The comparison as tables for a terminal, with ANSI colour only when `color` is true.
    pub fn render_terminal(&self, color: bool) -> String {
        let new_table = || {
            let mut t = Table::new();
            t.load_style(UTF8_FULL_CONDENSED).force_no_tty();
            if color {
                t.enforce_styling();
            }
            t
        };
        let paint = |text: &str, c: Option<Color>| match (color, c) {
            (true, Some(c)) => Cell::new(text).fg(c),
            _ => Cell::new(text),
        };

        let mut out = String::new();
        let regressions = self.regressions();
        let head = if regressions.is_empty() {
            "no regression".to_string()
        } else {
            format!("{} regression(s)", regressions.len())
        };
        let head = match (color, regressions.is_empty()) {
            (true, true) => format!("\x1b[1;32m{head}\x1b[0m"),
            (true, false) => format!("\x1b[1;31m{head}\x1b[0m"),
            (false, _) => head,
        };
        out.push_str(&format!(
            "{head}: {} compared with baseline {}\n",
            crate::format::printable(&self.new_scenario),
            crate::format::printable(&self.base_scenario)
        ));
        if let Some(why) = &self.mismatch {
            out.push_str(&format!("warning: {}\n", crate::format::printable(why)));
        }
        for r in &regressions {
            out.push_str(&format!(
                "  - {}\n",
                crate::format::printable(&r.to_string())
            ));
        }

        let mut t = new_table();
        t.set_header(vec!["metric", "baseline", "new", "change", "outcome"]);
        for m in &self.metrics {
            let c = match m.outcome {
                MetricChangeKind::Regression => Some(Color::Red),
                MetricChangeKind::Improvement => Some(Color::Green),
                MetricChangeKind::WithinTolerance | MetricChangeKind::NotGated => None,
            };
            let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
            t.add_row(vec![
                Cell::new(format::printable(&m.metric)),
                right(format::sig3(m.base)),
                right(format::sig3(m.new)),
                right(change_text(m)),
                paint(outcome_text(m.outcome), c),
            ]);
        }
        out.push('\n');
        out.push_str(&t.to_string());
        out.push('\n');

        if !self.checks.is_empty() {
            let mut t = new_table();
            t.set_header(vec!["check", "baseline", "new", "change"]);
            for c in &self.checks {
                let col = match c.change {
                    CheckChangeKind::Regression => Some(Color::Red),
                    CheckChangeKind::Missing
                        if !self.allow_missing
                            && c.base.is_some_and(|v| v != Verdict::Inconclusive) =>
                    {
                        Some(Color::Red)
                    }
                    CheckChangeKind::NewlyInconclusive if !self.allow_missing => Some(Color::Red),
                    CheckChangeKind::Improvement => Some(Color::Green),
                    CheckChangeKind::VerdictChanged
                    | CheckChangeKind::Added
                    | CheckChangeKind::Missing
                    | CheckChangeKind::NewlyInconclusive => Some(Color::Yellow),
                    CheckChangeKind::Unchanged => None,
                };
                t.add_row(vec![
                    Cell::new(format::printable(&c.name)),
                    Cell::new(verdict_text(c.base)),
                    Cell::new(verdict_text(c.new)),
                    paint(check_change_text(c.change), col),
                ]);
            }
            out.push('\n');
            out.push_str(&t.to_string());
            out.push('\n');
        }
        let tol = &self.tolerances;
        out.push_str(&format!(
            "\ntolerances: latency +{}% (and > {} ms), failure rates +{} pp, throughput -{}%\n",
            tol.latency_increase_pct,
            tol.latency_floor_ms,
            tol.error_rate_increase_pp,
            tol.throughput_decrease_pct
        ));
        out
    }
}
