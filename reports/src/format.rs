//! Numbers and evidence as people read them, shared by every renderer.
//!
//! The terminal, Markdown and HTML views must agree on how "1.25 s" or "p99.9" is written, or a
//! reader comparing a CI summary with a local run sees two different reports of the same figures.

use std::collections::BTreeMap;

use crate::model::{Latency, Report, Verdict};

pub(crate) use verdict::text::{
    evidence_line, evidence_lines, hidden, more_findings, percent, printable, push_visible, seqs,
    sig3,
};

/// The verdict as a lower-case word, as it appears in `report.json`.
pub(crate) fn verdict_word(v: Verdict) -> &'static str {
    v.word()
}

/// The five latency figures every renderer shows, labelled, in display order.
pub(crate) fn percentiles(l: &Latency) -> [(&'static str, f64); 5] {
    [
        ("p50", l.p50),
        ("p90", l.p90),
        ("p99", l.p99),
        ("p99.9", l.p999),
        ("max", l.max),
    ]
}

/// True when a latency block carries no figures (no samples were taken).
pub(crate) fn latency_is_empty(l: &Latency) -> bool {
    l.count == 0
        && percentiles(l)
            .iter()
            .all(|(_, v)| *v == 0.0 || !v.is_finite())
}

/// Milliseconds with precision that suits the magnitude: `0.42`, `3.1`, `250`.
pub(crate) fn ms(v: f64) -> String {
    if !v.is_finite() {
        return "–".to_string();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if a < 10.0 {
        format!("{v:.2}")
    } else if a < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A duration given in milliseconds, in the unit a person would pick: `850 ms`, `31.2 s`, `2 min 5 s`.
pub(crate) fn duration_ms(total_ms: u64) -> String {
    if total_ms < 1_000 {
        format!("{total_ms} ms")
    } else if total_ms < 60_000 {
        format!("{:.1} s", total_ms as f64 / 1_000.0)
    } else {
        let s = total_ms / 1_000;
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// A rate with one decimal, or none once it is large enough that the decimal is noise.
pub(crate) fn rate(v: f64) -> String {
    if !v.is_finite() {
        "–".to_string()
    } else if v.abs() < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// Seconds for a chart axis or a window position: `1`, `1.25`, `0.5`.
pub(crate) fn seconds(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Where a report's evidence beyond what a rendering shows is: `report.json`, which
/// `--report-dir` writes.
pub(crate) const REST: &str = "in report.json (--report-dir writes it)";

/// A metric value without the quotes JSON would put around a string, a fraction rounded to
/// three significant digits (`report.json` keeps the full value).
pub(crate) fn metric_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) if n.is_f64() => {
            n.as_f64().map_or_else(|| n.to_string(), sig3)
        }
        serde_json::Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(metric_value)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// One figure about failures, as every renderer shows it: its name, its value and what it
/// counts.
pub(crate) struct FailureFigure {
    /// `operation failures`, `request failures` or `transport errors`.
    pub name: &'static str,
    /// The rule metric that reads it in `thresholds`.
    pub metric: &'static str,
    /// The share, as a fraction.
    pub rate: f64,
    /// What it counts, with the counts: `18 of 191 requests answered 5xx or not at all`.
    pub counts: String,
}

/// The failure figures of a run, in the order a reader needs them: operations after their
/// retries (what users saw) when the load driver knows them, then requests (attempts) answered
/// 5xx or not at all, then requests not answered, by kind.
pub(crate) fn failure_figures(r: &crate::model::Report) -> Vec<FailureFigure> {
    let q = &r.requests;
    let mut out = Vec::new();
    if let (Some(rate), Some(n), Some(f)) = (
        q.operation_failure_rate(),
        q.operations,
        q.failed_operations,
    ) {
        out.push(FailureFigure {
            name: "operation failures",
            metric: "error_rate",
            rate,
            counts: format!("{f} of {n} operations failed after their retries"),
        });
    }
    if let Some(rate) = q.request_failure_rate() {
        out.push(FailureFigure {
            name: "request failures",
            metric: "request_failure_rate",
            rate,
            counts: format!(
                "{} of {} requests answered 5xx or not at all",
                q.request_failures(),
                q.sent
            ),
        });
    }
    if let Some(rate) = q.transport_error_rate() {
        let kinds = if r.errors_by_kind.is_empty() {
            String::new()
        } else {
            format!(": {}", counts_text(&r.errors_by_kind))
        };
        out.push(FailureFigure {
            name: "transport errors",
            metric: "transport_error_rate",
            rate,
            counts: format!("{} of {} requests not answered{kinds}", q.errors, q.sent),
        });
    }
    out
}

/// Milliseconds since the Unix epoch as a UTC date and time, `2025-11-30 08:59:00 UTC`.
pub(crate) fn utc_timestamp(unix_ms: u64) -> String {
    let secs = unix_ms / 1_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `civil_from_days`), so the
/// crate needs no date library for one line of the report.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// `r` with every string in it [`printable`]: names, summaries, evidence, metrics, the command.
pub(crate) fn printable_report(r: &Report) -> Report {
    fn text(s: &mut String) {
        if let std::borrow::Cow::Owned(o) = printable(s) {
            *s = o;
        }
    }
    fn value(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => text(s),
            serde_json::Value::Array(a) => a.iter_mut().for_each(value),
            serde_json::Value::Object(m) => {
                let old = std::mem::take(m);
                for (mut k, mut v) in old {
                    text(&mut k);
                    value(&mut v);
                    m.insert(k, v);
                }
            }
            _ => {}
        }
    }
    fn keys<V>(m: &mut BTreeMap<String, V>) {
        let old = std::mem::take(m);
        for (mut k, v) in old {
            text(&mut k);
            m.insert(k, v);
        }
    }
    fn metrics(m: &mut BTreeMap<String, serde_json::Value>) {
        keys(m);
        m.values_mut().for_each(value);
    }
    let mut r = r.clone();
    text(&mut r.scenario);
    if let Some(t) = &mut r.target {
        text(t);
    }
    keys(&mut r.errors_by_kind);
    keys(&mut r.requests.by_status);
    keys(&mut r.requests.by_grpc_status);
    for p in &mut r.phases {
        text(&mut p.name);
        text(&mut p.kind);
        keys(&mut p.requests.by_status);
        keys(&mut p.requests.by_grpc_status);
        metrics(&mut p.metrics);
    }
    for c in &mut r.checks {
        text(&mut c.name);
        text(&mut c.summary);
        metrics(&mut c.metrics);
        for e in &mut c.evidence {
            text(&mut e.detail);
            if let Some(k) = &mut e.key {
                text(k);
            }
        }
    }
    if let Some(t) = &mut r.timeline {
        t.series.iter_mut().for_each(|s| text(&mut s.label));
    }
    if let Some(e) = &mut r.exec {
        e.command.iter_mut().for_each(text);
    }
    r.notes.iter_mut().for_each(text);
    // A journal's names and error codes come from a database's or a cache's own words.
    for c in &mut r.connections {
        text(&mut c.proxy);
        keys(&mut c.by_toxic);
    }
    for st in &mut r.statements {
        text(&mut st.proxy);
        text(&mut st.protocol);
        keys(&mut st.by_fault);
        keys(&mut st.by_outcome);
        keys(&mut st.by_error);
    }
    for o in &mut r.operations {
        for s in [
            &mut o.method,
            &mut o.path,
            &mut o.operation_id,
            &mut o.key_support,
            &mut o.summary,
            &mut o.creations,
            &mut o.replay,
            &mut o.mismatch,
            &mut o.missing_key,
        ] {
            text(s);
        }
        if let Some(k) = &mut o.key_header {
            text(k);
        }
        for e in &mut o.evidence {
            text(&mut e.detail);
            if let Some(k) = &mut e.key {
                text(k);
            }
        }
        for c in &mut o.checks {
            text(&mut c.summary);
            for e in &mut c.evidence {
                text(&mut e.detail);
            }
        }
    }
    if let Some(c) = &mut r.conformance {
        for s in c.command.iter_mut() {
            text(s);
        }
        for rule in &mut c.rules {
            text(&mut rule.figure);
            for e in &mut rule.evidence {
                text(&mut e.detail);
                if let Some(k) = &mut e.key {
                    text(k);
                }
            }
        }
        for case in &mut c.cases {
            if let Some(p) = &mut case.problem {
                text(p);
            }
        }
    }
    r
}

/// How a scorecard came out: "7 rules: 5 pass, 1 fail, 1 not present".
pub(crate) fn rules_line(rules: &[crate::model::ConformRule]) -> String {
    use crate::model::RuleVerdict::*;
    let count = |v| rules.iter().filter(|r| r.verdict == v).count();
    let parts: Vec<String> = [
        (Pass, "pass"),
        (Weak, "weak"),
        (Fail, "fail"),
        (NotPresent, "not present"),
        (Inconclusive, "inconclusive"),
    ]
    .into_iter()
    .filter_map(|(v, word)| match count(v) {
        0 => None,
        n => Some(format!("{n} {word}")),
    })
    .collect();
    format!(
        "{} rule{}: {}",
        rules.len(),
        if rules.len() == 1 { "" } else { "s" },
        if parts.is_empty() {
            "none judged".to_string()
        } else {
            parts.join(", ")
        }
    )
}

/// A conformance case's line: "first-two-503: 10 calls, 30 requests, 2.1 s" and its problem.
pub(crate) fn case_line(c: &crate::model::ConformCase) -> String {
    let mut s = format!(
        "{}: {} calls, {} requests, {} s",
        c.name,
        c.calls,
        c.requests,
        sig3(c.duration_ms as f64 / 1000.0)
    );
    if let Some(p) = &c.problem {
        s.push_str(&format!(" — {p}"));
    }
    s
}

/// How many audited operations passed, failed and were not judged: "2 of 5 operations failed,
/// 1 inconclusive".
pub(crate) fn operations_line(ops: &[crate::model::AuditedOperation]) -> String {
    use crate::model::OperationVerdict;
    let count = |v| ops.iter().filter(|o| o.verdict == v).count();
    let mut s = format!(
        "{} of {} operations failed",
        count(OperationVerdict::Fail),
        ops.len()
    );
    let unsure = count(OperationVerdict::Inconclusive);
    if unsure > 0 {
        s.push_str(&format!(", {unsure} inconclusive"));
    }
    s
}

/// An operation's key column: the header and where it comes from, or `none`.
pub(crate) fn key_cell(o: &crate::model::AuditedOperation) -> String {
    match &o.key_header {
        Some(h) => format!("{h} ({})", o.key_support),
        None => o.key_support.clone(),
    }
}

/// A cell's text, or `—` when the column does not apply to the row.
pub(crate) fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "—"
    } else {
        s
    }
}

/// One line on the shards a report covers: "shard 1 of 3, started 12 ms late" or "merged from
/// 3 shards (0, 1, 2)".
pub(crate) fn shard_line(r: &crate::model::Report) -> Option<String> {
    let s = r.shard.as_ref()?;
    if !s.merged.is_empty() {
        let list: Vec<String> = s.merged.iter().map(u32::to_string).collect();
        return Some(format!(
            "merged from {} of {} shards ({})",
            s.merged.len(),
            s.count,
            list.join(", ")
        ));
    }
    let late = if s.late_ms >= 1.0 {
        format!(", started {:.0} ms after the common start", s.late_ms)
    } else {
        String::new()
    };
    Some(format!(
        "shard {} of {} (index from 0){late}",
        s.index, s.count
    ))
}

/// What a rate phase's second latency row means, under every table that shows one.
pub(crate) const FROM_SCHEDULED: &str = "  \"from its scheduled time\": latency from when the rate \
     phase meant to send each request, not from when it could\n  (coordinated omission corrected: a \
     request sent late waited in the driver, and that wait counts)";

/// The counts a request line adds when they are not zero: late starts, requests never sent,
/// operations cancelled in flight (", 3 late starts, 2 cancelled in flight").
pub(crate) fn extra_counts(q: &crate::model::Requests) -> String {
    let mut s = String::new();
    for (n, what) in [
        (q.late_starts, "sent late (after their scheduled time)"),
        (q.not_started, "due but never sent"),
        (q.cancelled, "cancelled in flight"),
        (q.abandoned, "abandoned by their call (hedges)"),
    ] {
        if n > 0 {
            s.push_str(&format!(", {n} {what}"));
        }
    }
    s
}

/// `name n, name n` for a map of counts (`closed 3, reset 1`); `-` when empty.
pub(crate) fn counts_text(m: &std::collections::BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "-".to_string();
    }
    m.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn human_numbers_keep_three_significant_digits() {
        assert_eq!(sig3(0.18299999999999272), "0.183");
        assert_eq!(sig3(129.493538037605), "129");
        assert_eq!(sig3(12.5), "12.5");
        assert_eq!(sig3(1234.5), "1230");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(sig3(-0.0421), "-0.0421");
        assert_eq!(percent(0.0942), "9.42%");
        assert_eq!(percent(1.0), "100%");
        assert_eq!(percent(0.0), "0%");
        assert_eq!(
            metric_value(&serde_json::json!(0.18299999999999272)),
            "0.183"
        );
        assert_eq!(metric_value(&serde_json::json!(17)), "17");
        assert_eq!(metric_value(&serde_json::json!("x")), "x");
    }

    #[test]
    fn timestamps_are_utc_dates() {
        assert_eq!(utc_timestamp(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_timestamp(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_timestamp(1_764_493_140_000), "2025-11-30 08:59:00 UTC");
    }

    #[test]
    fn milliseconds_keep_meaningful_digits() {
        assert_eq!(ms(0.0), "0");
        assert_eq!(ms(0.4213), "0.42");
        assert_eq!(ms(31.25), "31.2");
        assert_eq!(ms(1234.6), "1235");
        assert_eq!(ms(f64::NAN), "–");
    }

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(duration_ms(850), "850 ms");
        assert_eq!(duration_ms(31_200), "31.2 s");
        assert_eq!(duration_ms(125_000), "2 min 5 s");
    }

    #[test]
    fn seconds_drop_trailing_zeros() {
        assert_eq!(seconds(1.0), "1");
        assert_eq!(seconds(1.25), "1.25");
        assert_eq!(seconds(0.0), "0");
    }
}
