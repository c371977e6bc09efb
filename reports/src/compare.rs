//! Comparing a run with a baseline: did it get worse by more than noise explains?
//!
//! Two runs of the same scenario never give the same numbers, so a comparison that flags every
//! change is ignored after a week. Each figure therefore has a tolerance ([`Tolerances`]), and only a
//! change beyond it in the bad direction is a regression. Latency also has a floor in milliseconds,
//! because +30 % of a 0.4 ms loopback p50 is scheduler noise, not a slower service. `max` is shown but
//! never gated: it is one sample, and gating on one sample makes a flaky gate. A check that went
//! from passing to failing is always a regression, whatever the numbers say.

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
    /// Largest allowed rise of the error rate (errors + 5xx per request sent), in percentage points.
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
    /// Dotted name, e.g. `latency_ms.p99`, `error_rate_pct`, `throughput_rps`.
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
    /// Only the baseline has this check.
    Missing,
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
}

/// One reason a comparison is a regression.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Regression<'a> {
    /// A figure got worse beyond its tolerance.
    Metric(&'a MetricChange),
    /// A check went from passing to failing.
    Check(&'a CheckChange),
}

impl fmt::Display for Regression<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Regression::Metric(m) => write!(
                f,
                "{} went from {} to {} ({})",
                m.metric,
                format::ms(m.base),
                format::ms(m.new),
                change_text(m)
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

    let (be, ne) = (
        format::error_rate_pct(&base.requests),
        format::error_rate_pct(&new.requests),
    );
    let gated = base.requests.sent > 0 && new.requests.sent > 0;
    let delta = ne - be;
    metrics.push(MetricChange {
        metric: "error_rate_pct".to_string(),
        base: be,
        new: ne,
        change: Some(delta),
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
        CheckChangeKind::Missing => "missing in new run",
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
            .filter(|c| c.change == CheckChangeKind::Regression)
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
                right(format::ms(m.base)),
                right(format::ms(m.new)),
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
                    CheckChangeKind::Improvement => Some(Color::Green),
                    CheckChangeKind::VerdictChanged
                    | CheckChangeKind::Added
                    | CheckChangeKind::Missing => Some(Color::Yellow),
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
            "\ntolerances: latency +{}% (and > {} ms), error rate +{} pp, throughput -{}%\n",
            tol.latency_increase_pct,
            tol.latency_floor_ms,
            tol.error_rate_increase_pp,
            tol.throughput_decrease_pct
        ));
        out
    }
}
