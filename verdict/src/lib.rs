//! The verdict model: what a check decides and the report shows.
//!
//! The checks decide a [`CheckResult`] once, from a run's history; the reports render it. Both
//! depend on this crate and neither on the other, so the checks carry no renderer (no terminal
//! tables, no XML writer) and the renderers know no check. [`text`] holds the few text rules both
//! sides need to show a result the same way: a verdict's word, evidence lines, and escaping of
//! text that came from requests.

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub mod text;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Slowest sample.
    pub max: f64,
    /// Arithmetic mean.
    #[serde(default)]
    pub mean: f64,
    /// Samples behind the percentiles.
    #[serde(default)]
    pub count: u64,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The property holds on the evidence.
    Pass,
    /// The property is violated; `evidence` says where.
    Fail,
    /// Holds, but weakly (e.g. jitter too small to matter); does not fail the run.
    Weak,
    /// Not enough data to decide; does not fail the run.
    Inconclusive,
}

impl Verdict {
    /// The verdict as a lower-case word, as it appears in `report.json`.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Weak => "weak",
            Verdict::Inconclusive => "inconclusive",
        }
    }

    /// Whether a check with this verdict lets the run pass: every verdict but `fail`.
    pub fn passes(self) -> bool {
        self != Verdict::Fail
    }
}

/// One check's verdict with its figures and the journal entries that prove it.
///
/// Whether it passed is derived from the verdict ([`CheckResult::passed`]), so the two cannot
/// disagree; `report.json` still carries `passed` beside `verdict` for its readers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(into = "CheckResultJson", from = "CheckResultJson")]
pub struct CheckResult {
    /// Stable identifier: `duplicates`, `retry_on_4xx`, `jitter`, ...
    pub name: String,
    /// The verdict.
    pub verdict: Verdict,
    /// One line a human reads first.
    pub summary: String,
    /// Figures behind the verdict (names are per check and documented with it).
    pub metrics: BTreeMap<String, serde_json::Value>,
    /// The places that prove the verdict, most telling first.
    pub evidence: Vec<Evidence>,
    /// How many findings the check made in all, when it kept fewer of them as `evidence` (the
    /// scenario's `checks.max_evidence` bounds what is kept); `None` when every one is kept.
    pub findings: Option<u64>,
}

/// [`CheckResult`] as `report.json` spells it, with the derived `passed`.
#[derive(Serialize, Deserialize)]
struct CheckResultJson {
    name: String,
    #[serde(default)]
    passed: bool,
    verdict: Verdict,
    summary: String,
    #[serde(default)]
    metrics: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    evidence: Vec<Evidence>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    findings: Option<u64>,
}

impl From<CheckResult> for CheckResultJson {
    fn from(c: CheckResult) -> Self {
        CheckResultJson {
            passed: c.passed(),
            name: c.name,
            verdict: c.verdict,
            summary: c.summary,
            metrics: c.metrics,
            evidence: c.evidence,
            findings: c.findings,
        }
    }
}

impl From<CheckResultJson> for CheckResult {
    fn from(c: CheckResultJson) -> Self {
        CheckResult {
            name: c.name,
            verdict: c.verdict,
            summary: c.summary,
            metrics: c.metrics,
            evidence: c.evidence,
            findings: c.findings,
        }
    }
}

impl CheckResult {
    /// A result with no metrics or evidence yet.
    pub fn new(name: impl Into<String>, verdict: Verdict, summary: impl Into<String>) -> Self {
        CheckResult {
            name: name.into(),
            verdict,
            summary: summary.into(),
            metrics: BTreeMap::new(),
            evidence: Vec::new(),
            findings: None,
        }
    }

    /// Records that the check made `total` findings in all, of which its `evidence` keeps the
    /// first; nothing is recorded when it keeps them all.
    pub fn findings(mut self, total: u64) -> Self {
        self.findings = (total > self.evidence.len() as u64).then_some(total);
        self
    }

    /// How many findings the check made in all: its `findings`, or its evidence when it kept
    /// every one.
    pub fn findings_total(&self) -> u64 {
        self.findings.unwrap_or(0).max(self.evidence.len() as u64)
    }

    /// False only when the verdict is `fail`.
    pub fn passed(&self) -> bool {
        self.verdict.passes()
    }

    /// Adds a metric.
    pub fn metric(mut self, name: &str, value: impl Into<serde_json::Value>) -> Self {
        self.metrics.insert(name.to_string(), value.into());
        self
    }

    /// Adds a piece of evidence.
    pub fn evidence(mut self, e: Evidence) -> Self {
        self.evidence.push(e);
        self
    }

    /// Panics unless the check passed (any verdict but `fail`), with the result as the message:
    /// its summary and evidence, as the terminal report shows them. Returns the result, for
    /// further assertions on its metrics.
    #[track_caller]
    pub fn assert_passes(&self) -> &Self {
        if !self.passed() {
            panic!("check `{}` was expected to pass:\n{self}", self.name);
        }
        self
    }

    /// Panics unless the verdict is exactly `pass` (not `weak` nor `inconclusive`), with the
    /// result as the message.
    #[track_caller]
    pub fn assert_pass_verdict(&self) -> &Self {
        if self.verdict != Verdict::Pass {
            panic!(
                "check `{}` was expected to reach `pass`:\n{self}",
                self.name
            );
        }
        self
    }

    /// Panics unless the check failed, with the result as the message.
    #[track_caller]
    pub fn assert_fails(&self) -> &Self {
        if self.verdict != Verdict::Fail {
            panic!("check `{}` was expected to fail:\n{self}", self.name);
        }
        self
    }
}

impl fmt::Display for CheckResult {
    /// The check as the terminal report shows it, one line, then its first pieces of evidence:
    ///
    /// ```text
    /// duplicates: FAIL: 3 of 3 keys created more than one order
    ///   • key k-1 created 4 orders [key k-1; seq 1, 2, 3, 4]
    /// ```
    ///
    /// Text that came from requests (keys, paths) is escaped as the terminal report escapes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            text::printable(&self.name),
            self.verdict.word().to_ascii_uppercase(),
            text::printable(&self.summary)
        )?;
        for line in text::evidence_lines(&self.evidence, self.findings_total(), "in `evidence`") {
            write!(f, "\n  {}", text::printable(&line))?;
        }
        Ok(())
    }
}

/// A piece of evidence: what was seen, and where in the journal.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Evidence {
    /// What this shows, in one sentence.
    pub detail: String,
    /// The Idempotency-Key or operation the evidence is about, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Journal sequence numbers of the requests involved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seqs: Vec<u64>,
}
