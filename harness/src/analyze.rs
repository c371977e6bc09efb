//! `harness analyze JOURNAL`: the checks on a journal file, read as a stream.
//!
//! The file is read line by line and each entry is handed to the checks and forgotten, so memory
//! follows the number of open operations, not the size of the file.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use fault_server::Entry;
use reports::model::{Report, Series, Timeline};

use crate::checks::{ChecksConfig, ChecksRunner};
use crate::metrics::{latency_ms, Recorder};

/// A journal that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: not a journal entry: {message}")]
    Entry {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
}

/// Reads `path` and runs the checks of `cfg` on it.
pub fn analyze_file(path: &Path, cfg: &ChecksConfig) -> Result<Report, AnalyzeError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| AnalyzeError::Read {
        path: shown.clone(),
        source,
    })?;
    let reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut runner = ChecksRunner::new(cfg);
    let mut rec = Recorder::new(false);
    let mut first_us = None;
    let mut last_us = 0u64;
    // Requests per 100 ms bin and label; re-binned to about 60 windows at the end.
    let mut bins: BTreeMap<(u64, String), u64> = BTreeMap::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| AnalyzeError::Read {
            path: shown.clone(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let e: Entry = serde_json::from_str(&line).map_err(|err| AnalyzeError::Entry {
            path: shown.clone(),
            line: i + 1,
            column: err.column(),
            message: err
                .to_string()
                .split(" at line ")
                .next()
                .unwrap_or_default()
                .to_string(),
        })?;
        let t0 = *first_us.get_or_insert(e.t_recv_us);
        last_us = last_us.max(e.t_done_us);
        let label = match (e.outcome, e.status) {
            (fault_server::Outcome::Responded, Some(s)) => s.to_string(),
            (fault_server::Outcome::Responded, None) => "malformed".to_string(),
            (o, _) => o.as_str().to_string(),
        };
        *bins
            .entry((e.t_recv_us.saturating_sub(t0) / 100_000, label))
            .or_default() += 1;
        let responded = e.outcome == fault_server::Outcome::Responded && e.status.is_some();
        rec.result(e.status.filter(|_| responded), None);
        if !responded {
            rec.errors[crate::http::ErrorKind::Other.index()] += 1;
        }
        if e.key_attempt.is_some_and(|a| a > 1) {
            rec.retries += 1;
        }
        rec.latency(std::time::Duration::from_micros(
            e.t_done_us.saturating_sub(e.t_recv_us),
        ));
        runner.observe(e);
    }
    let checks = runner.finish();
    let span_us = last_us.saturating_sub(first_us.unwrap_or(0));
    let mut requests = rec.requests();
    requests.errors = requests.sent - requests.completed;
    Ok(Report {
        schema_version: reports::model::SCHEMA_VERSION,
        scenario: format!("analyze {shown}"),
        passed: checks.iter().all(|c| c.passed),
        started_unix_ms: 0,
        duration_ms: span_us / 1000,
        target: None,
        seed: None,
        time_scale: 1.0,
        requests,
        latency_ms: latency_ms(&rec.latency),
        throughput_rps: if span_us > 0 {
            rec.completed() as f64 / (span_us as f64 / 1e6)
        } else {
            0.0
        },
        errors_by_kind: BTreeMap::new(),
        phases: Vec::new(),
        checks,
        timeline: Some(rebin(&bins, span_us)),
        retry_delays: Vec::new(),
        exec: None,
    })
}

fn rebin(bins: &BTreeMap<(u64, String), u64>, span_us: u64) -> Timeline {
    let per = (span_us / 100_000 / 60).max(1);
    let len = (span_us / 100_000 / per + 1) as usize;
    let mut series: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for ((bin, label), n) in bins {
        let v = series.entry(label.as_str()).or_insert_with(|| vec![0; len]);
        let i = ((bin / per) as usize).min(len - 1);
        v[i] += n;
    }
    Timeline {
        window_ms: per as f64 * 100.0,
        series: series
            .into_iter()
            .map(|(l, counts)| Series {
                label: l.to_string(),
                counts,
            })
            .collect(),
    }
}
