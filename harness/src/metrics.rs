//! Measurements: HDR histograms of latency, status and error counts, retries — one recorder per
//! worker (no shared lock on the hot path), merged at the end of a phase.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::http::ErrorKind;

/// One attempt as the driver saw it (kept for scenario runs; `load` does not keep them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AttemptRecord {
    pub phase: u16,
    pub op: u64,
    pub attempt: u32,
    pub client: u32,
    /// µs since the run started.
    pub t_start_us: u64,
    pub t_end_us: u64,
    pub status: Option<u16>,
    pub error: Option<ErrorKind>,
}

/// A worker's measurements.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Per-attempt latency from the actual send, µs.
    pub latency: Histogram<u64>,
    /// Per-operation latency from the intended start (rate phases), µs.
    pub intended: Histogram<u64>,
    pub by_status: BTreeMap<u16, u64>,
    pub errors: [u64; 6],
    pub sent: u64,
    pub retries: u64,
    pub operations: u64,
    pub late_starts: u64,
    /// Operations answered by a breaker's fallback without a call.
    pub fallbacks: u64,
    /// Retries refused by the budget.
    pub budget_refusals: u64,
    /// Operations that gave up because the total timeout would be exceeded.
    pub deadline_exceeded: u64,
    /// Operations that did not end in a response below 500 (no response, 5xx, or a fallback).
    pub failed_operations: u64,
    pub attempts: Option<Vec<AttemptRecord>>,
}

fn histogram() -> Histogram<u64> {
    // 1 µs .. 1 hour at 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant histogram bounds are valid")
}

impl Recorder {
    /// An empty recorder; `keep_attempts` keeps one record per attempt.
    pub fn new(keep_attempts: bool) -> Recorder {
        Recorder {
            latency: histogram(),
            intended: histogram(),
            by_status: BTreeMap::new(),
            errors: [0; 6],
            sent: 0,
            retries: 0,
            operations: 0,
            late_starts: 0,
            fallbacks: 0,
            budget_refusals: 0,
            deadline_exceeded: 0,
            failed_operations: 0,
            attempts: keep_attempts.then(Vec::new),
        }
    }

    /// Records a latency sample.
    pub fn latency(&mut self, d: Duration) {
        self.latency
            .saturating_record((d.as_micros() as u64).max(1));
    }

    /// Records a CO-corrected operation latency.
    pub fn intended(&mut self, d: Duration) {
        self.intended
            .saturating_record((d.as_micros() as u64).max(1));
    }

    /// Records an attempt's result.
    pub fn result(&mut self, status: Option<u16>, error: Option<ErrorKind>) {
        self.sent += 1;
        if let Some(s) = status {
            *self.by_status.entry(s).or_default() += 1;
        }
        if let Some(e) = error {
            self.errors[e.index()] += 1;
        }
    }

    /// Adds another recorder's figures.
    pub fn merge(&mut self, o: &Recorder) {
        let _ = self.latency.add(&o.latency);
        let _ = self.intended.add(&o.intended);
        for (s, n) in &o.by_status {
            *self.by_status.entry(*s).or_default() += n;
        }
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
        self.sent += o.sent;
        self.retries += o.retries;
        self.operations += o.operations;
        self.late_starts += o.late_starts;
        self.fallbacks += o.fallbacks;
        self.budget_refusals += o.budget_refusals;
        self.deadline_exceeded += o.deadline_exceeded;
        self.failed_operations += o.failed_operations;
        if let (Some(a), Some(b)) = (&mut self.attempts, &o.attempts) {
            a.extend_from_slice(b);
        }
    }

    /// Responses received.
    pub fn completed(&self) -> u64 {
        self.by_status.values().sum()
    }

    /// Attempts that got no response.
    pub fn error_count(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// The report's request counts.
    pub fn requests(&self) -> reports::model::Requests {
        reports::model::Requests {
            sent: self.sent,
            completed: self.completed(),
            errors: self.error_count(),
            retries: self.retries,
            by_status: self
                .by_status
                .iter()
                .map(|(s, n)| (s.to_string(), *n))
                .collect(),
            late_starts: self.late_starts,
        }
    }

    /// Errors by kind, non-zero only.
    pub fn errors_by_kind(&self) -> BTreeMap<String, u64> {
        ErrorKind::ALL
            .iter()
            .filter(|k| self.errors[k.index()] > 0)
            .map(|k| (k.as_str().to_string(), self.errors[k.index()]))
            .collect()
    }
}

/// Percentiles of a µs histogram, in ms.
pub fn latency_ms(h: &Histogram<u64>) -> reports::model::Latency {
    if h.is_empty() {
        return reports::model::Latency::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    reports::model::Latency {
        p50: ms(h.value_at_quantile(0.50)),
        p90: ms(h.value_at_quantile(0.90)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        max: ms(h.max()),
        mean: h.mean() / 1000.0,
        count: h.len(),
    }
}
