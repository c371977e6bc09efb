//! `thresholds`: service-level expectations on latency, errors and throughput.
//!
//! Why: resilience is not only "no duplicates"; a service that survives a fault by answering in
//! 30 s has failed its users too. Rules (see [`super::threshold_rules`]) such as `p99 < 200ms`,
//! `error_rate < 1%` or `throughput > 500/s` turn that into a gate.
//!
//! Two sources of figures, one evaluation ([`evaluate`]):
//! - the journal (this check): latency = `t_done_us` − `t_recv_us` of every entry, recorded in an
//!   HDR histogram (µs, 3 significant digits) so memory stays constant; a request failure = no
//!   response or a 5xx; an operation = the requests that share an Idempotency-Key (a request
//!   without one is an operation of its own), failed when its last request failed; throughput =
//!   entries / (last `t_done_us` − first `t_recv_us`);
//! - the load driver's figures when the harness drove the load ([`history::ClientFigures`] in the
//!   history's facts): latency per request, operations failed after their retries, attempts
//!   failed, throughput — what the users saw; or any other figures: build a [`Measured`] and call
//!   [`evaluate`].
//!
//! A rule whose figure is unavailable (e.g. `p95` against a summary that only has p50/p90/p99/p999)
//! makes the result Inconclusive unless another rule fails.
//!
//! Metrics: `rules` (one object per rule: rule, value, passed), `requests`, `error_rate`
//! (operation failures), `request_failure_rate`, `transport_error_rate`, `throughput_rps`,
//! `latency_p50_ms`, `latency_p99_ms` (when known).

use std::collections::HashMap;

use hdrhistogram::Histogram;
use history::Facts;
use serde::{Deserialize, Serialize};
use serde_json::json;
use verdict::Latency;
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::failure;
use super::spec::{About, CheckSpec};
use super::threshold_rules::{Metric, Rule};
use super::{Attempt, Check, Context};

/// Configuration of the `thresholds` check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ThresholdsConfig {
    /// The rules, e.g. `["p99 < 200ms", "error_rate < 1%"]`.
    pub rules: Vec<Rule>,
    /// Stop the run as soon as a rule fails on the load's figures so far (evaluated once a
    /// second, as the driver's figures are at the end); the run then fails.
    pub abort_on_fail: bool,
    /// How long into the run the rules are not yet allowed to stop it (ms): the first seconds'
    /// figures rest on few requests.
    pub abort_after_ms: u64,
}

/// Latency figures to evaluate rules on.
#[derive(Debug, Clone)]
pub enum LatencyFigures {
    /// Every sample, in microseconds.
    Histogram(Histogram<u64>),
    /// Only the summary percentiles of a report (p50, p90, p99, p99.9, max, mean), in ms.
    Summary(Latency),
}

impl LatencyFigures {
    /// The value of a latency metric in ms, when these figures have it.
    pub fn value_ms(&self, metric: Metric) -> Option<f64> {
        match self {
            LatencyFigures::Histogram(h) => {
                if h.is_empty() {
                    return None;
                }
                let us = match metric {
                    Metric::Percentile(p) => h.value_at_quantile(p / 100.0) as f64,
                    Metric::Median => h.value_at_quantile(0.5) as f64,
                    Metric::Mean => h.mean(),
                    Metric::Min => h.min() as f64,
                    Metric::Max => h.max() as f64,
                    Metric::ErrorRate
                    | Metric::RequestFailureRate
                    | Metric::TransportErrorRate
                    | Metric::Throughput => return None,
                };
                Some(us / 1000.0)
            }
            LatencyFigures::Summary(l) => {
                if l.count == 0 && l.max == 0.0 {
                    return None;
                }
                let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
                match metric {
                    Metric::Percentile(p) if near(p, 50.0) => Some(l.p50),
                    Metric::Median => Some(l.p50),
                    Metric::Percentile(p) if near(p, 90.0) => Some(l.p90),
                    Metric::Percentile(p) if near(p, 99.0) => Some(l.p99),
                    Metric::Percentile(p) if near(p, 99.9) => Some(l.p999),
                    Metric::Percentile(p) if near(p, 100.0) => Some(l.max),
                    Metric::Max => Some(l.max),
                    Metric::Mean => Some(l.mean),
                    _ => None,
                }
            }
        }
    }
}

/// Measured figures: from the journal, or provided by the load driver.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Latency distribution.
    pub latency: Option<LatencyFigures>,
    /// Operation failures: operations failed after their retries, over operations, as a
    /// fraction.
    pub error_rate: Option<f64>,
    /// Request failures: attempts answered 5xx or not at all, over attempts, as a fraction.
    pub request_failure_rate: Option<f64>,
    /// Transport errors: attempts not answered at all, over attempts, as a fraction.
    pub transport_error_rate: Option<f64>,
    /// Requests per second.
    pub throughput_rps: Option<f64>,
    /// Requests behind the figures.
    pub requests: u64,
}

impl Measured {
    /// Figures from a report's latency summary and throughput; its rates are set apart.
    pub fn from_summary(latency: Latency, throughput: Option<f64>) -> Self {
        Measured {
            requests: latency.count,
            latency: Some(LatencyFigures::Summary(latency)),
            throughput_rps: throughput,
            ..Measured::default()
        }
    }

    /// The figure a metric asks for, in the rule's canonical unit.
    pub fn value(&self, metric: Metric) -> Option<f64> {
        match metric {
            Metric::ErrorRate => self.error_rate,
            Metric::RequestFailureRate => self.request_failure_rate,
            Metric::TransportErrorRate => self.transport_error_rate,
            Metric::Throughput => self.throughput_rps,
            m => self.latency.as_ref().and_then(|l| l.value_ms(m)),
        }
    }
}

/// Journal seqs that illustrate a failed rule.
#[derive(Debug, Clone, Default)]
struct Hints {
    slowest: Vec<u64>,
    errors: Vec<u64>,
}

/// Evaluates `rules` on `measured`: the `thresholds` check's result.
pub fn evaluate(rules: &[Rule], measured: &Measured) -> CheckResult {
    evaluate_with(rules, measured, &Hints::default(), usize::MAX)
}

fn evaluate_with(
    rules: &[Rule],
    measured: &Measured,
    hints: &Hints,
    max_evidence: usize,
) -> CheckResult {
    let mut findings = Findings::new(max_evidence);
    let mut unknown = Vec::new();
    let mut held = Vec::new();
    let mut table = Vec::new();
    for rule in rules {
        let value = measured.value(rule.metric);
        let passed = value.map(|v| rule.holds(v));
        table.push(json!({ "rule": rule.text, "value": value, "passed": passed }));
        match (value, passed) {
            (Some(v), Some(false)) => {
                let seqs = match rule.metric {
                    m if m.is_rate() => hints.errors.clone(),
                    Metric::Throughput => Vec::new(),
                    _ => hints.slowest.clone(),
                };
                findings.push(
                    format!(
                        "{} is {}, not {} {}",
                        rule.text,
                        rule.show(v),
                        rule.op_str(),
                        rule.show(rule.limit)
                    ),
                    None,
                    seqs,
                );
            }
            (Some(v), _) => held.push(format!("{} ({})", rule.text, rule.show(v))),
            (None, _) => unknown.push(rule.text.as_str()),
        }
    }
    let (verdict, summary) = if let Some(first) = findings.first_detail() {
        (
            Verdict::Fail,
            format!(
                "{} of {} thresholds failed: {first}",
                findings.total(),
                rules.len()
            ),
        )
    } else if rules.is_empty() {
        (
            Verdict::Inconclusive,
            "no threshold rules configured".to_string(),
        )
    } else if !unknown.is_empty() {
        (
            Verdict::Inconclusive,
            format!("not enough data: no figure for {}", unknown.join(", ")),
        )
    } else if measured.requests == 0 {
        (
            Verdict::Inconclusive,
            "not enough data: no request was measured".to_string(),
        )
    } else {
        (
            Verdict::Pass,
            format!("all thresholds hold: {}", held.join(", ")),
        )
    };
    let mut result = CheckResult::new("thresholds", verdict, summary)
        .metric("rules", table)
        .metric("requests", measured.requests);
    for (name, rate) in [
        ("error_rate", measured.error_rate),
        ("request_failure_rate", measured.request_failure_rate),
        ("transport_error_rate", measured.transport_error_rate),
    ] {
        if let Some(r) = rate {
            result = result.metric(name, r);
        }
    }
    if let Some(t) = measured.throughput_rps {
        result = result.metric("throughput_rps", t);
    }
    if let Some(p) = measured.value(Metric::Percentile(50.0)) {
        result = result.metric("latency_p50_ms", p);
    }
    if let Some(p) = measured.value(Metric::Percentile(99.0)) {
        result = result.metric("latency_p99_ms", p);
    }
    attach(result, findings)
}

/// How many seqs a failed rule's evidence lists.
const HINTS: usize = 5;

/// Idempotency keys whose operation outcome the journal's figures follow.
const MAX_KEYED: usize = 1 << 20;

/// The `thresholds` check, on figures computed from the journal.
pub(crate) struct ThresholdsCheck {
    rules: Vec<Rule>,
    max_evidence: usize,
    latency_us: Option<Histogram<u64>>,
    requests: u64,
    errors: u64,
    transport_errors: u64,
    /// Whether the last request seen of each Idempotency-Key failed: an operation's outcome.
    /// Grows with the keys, as every check that reads keys does; capped at [`MAX_KEYED`].
    keyed: HashMap<String, (u64, bool)>,
    /// Keyed operations past [`MAX_KEYED`], with the outcome of their first request seen.
    keyed_overflow: (u64, u64),
    /// Requests without an Idempotency-Key (each an operation) and how many failed.
    unkeyed: (u64, u64),
    first_recv_us: Option<u64>,
    last_done_us: u64,
    /// (latency µs, seq) of the slowest requests, slowest first.
    slowest: Vec<(u64, u64)>,
    error_seqs: Vec<u64>,
}

impl ThresholdsCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &ThresholdsConfig, ctx: Context) -> Self {
        ThresholdsCheck {
            rules: cfg.rules.clone(),
            max_evidence: ctx.max_evidence,
            // One hour at 3 significant digits; longer latencies saturate at the top.
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3).ok(),
            requests: 0,
            errors: 0,
            transport_errors: 0,
            keyed: HashMap::new(),
            keyed_overflow: (0, 0),
            unkeyed: (0, 0),
            first_recv_us: None,
            last_done_us: 0,
            slowest: Vec::new(),
            error_seqs: Vec::new(),
        }
    }
}

impl Check for ThresholdsCheck {
    fn name(&self) -> &'static str {
        "thresholds"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        self.requests += 1;
        let latency = e.t_done_us.saturating_sub(e.t_recv_us);
        if let Some(h) = &mut self.latency_us {
            h.saturating_record(latency);
        }
        let failed = failure::is_error(e);
        if failed {
            self.errors += 1;
            if self.error_seqs.len() < HINTS {
                self.error_seqs.push(e.seq);
            }
        }
        if failure::no_response(e) {
            self.transport_errors += 1;
        }
        match e.idempotency_key.as_deref() {
            None => {
                self.unkeyed.0 += 1;
                self.unkeyed.1 += u64::from(failed);
            }
            Some(k) => {
                if let Some(last) = self.keyed.get_mut(k) {
                    if e.seq >= last.0 {
                        *last = (e.seq, failed);
                    }
                } else if self.keyed.len() < MAX_KEYED {
                    self.keyed.insert(k.to_string(), (e.seq, failed));
                } else {
                    // Past the cap a key's later requests cannot be told from new operations:
                    // each counts as one, which overstates operations, never hides a failure.
                    self.keyed_overflow.0 += 1;
                    self.keyed_overflow.1 += u64::from(failed);
                }
            }
        }
        self.first_recv_us = Some(
            self.first_recv_us
                .map_or(e.t_recv_us, |f| f.min(e.t_recv_us)),
        );
        self.last_done_us = self.last_done_us.max(e.t_done_us);
        let pos = self.slowest.partition_point(|(l, _)| *l >= latency);
        if pos < HINTS {
            self.slowest.insert(pos, (latency, e.seq));
            self.slowest.truncate(HINTS);
        }
    }

    fn finish(self: Box<Self>, facts: &Facts) -> CheckResult {
        // When the harness drove the load, the rules speak for the users: the client's latency
        // per request, the share of operations that failed after their retries, the client's
        // throughput.
        if let Some(c) = &facts.client {
            let per_attempt = |n: u64| (c.sent > 0).then(|| n as f64 / c.sent as f64);
            let measured = Measured {
                latency: Some(LatencyFigures::Histogram(c.latency.clone())),
                error_rate: (c.operations > 0)
                    .then(|| c.failed_operations as f64 / c.operations as f64),
                request_failure_rate: per_attempt(c.failed_attempts),
                transport_error_rate: per_attempt(c.transport_errors),
                throughput_rps: Some(c.completed as f64 / c.duration.as_secs_f64().max(1e-9)),
                requests: c.sent,
            };
            let mut result = evaluate(&self.rules, &measured);
            result.summary = format!(
                "{} (client-side: latency per request, error_rate per operation after retries)",
                result.summary
            );
            return result;
        }
        let span_us = self
            .first_recv_us
            .map_or(0, |f| self.last_done_us.saturating_sub(f));
        let operations = self.keyed.len() as u64 + self.keyed_overflow.0 + self.unkeyed.0;
        let failed_operations = self.keyed.values().filter(|(_, f)| *f).count() as u64
            + self.keyed_overflow.1
            + self.unkeyed.1;
        let per_request = |n: u64| (self.requests > 0).then(|| n as f64 / self.requests as f64);
        let measured = Measured {
            latency: self
                .latency_us
                .filter(|h| !h.is_empty())
                .map(LatencyFigures::Histogram),
            error_rate: (operations > 0).then(|| failed_operations as f64 / operations as f64),
            request_failure_rate: per_request(self.errors),
            transport_error_rate: per_request(self.transport_errors),
            throughput_rps: (span_us > 0).then(|| self.requests as f64 / (span_us as f64 / 1e6)),
            requests: self.requests,
        };
        let hints = Hints {
            slowest: self.slowest.iter().map(|(_, s)| *s).collect(),
            errors: self.error_seqs,
        };
        evaluate_with(&self.rules, &measured, &hints, self.max_evidence)
    }
}

impl CheckSpec for ThresholdsConfig {
    const NAME: &'static str = "thresholds";
    const ABOUT: About = About {
        catches: "a service that survives by being slow",
        how: "k6-style rules: `p99 < 200ms` (a latency without a unit is in ms, as in k6), `p(99.9) <= 1s`, `avg < 50ms`, `error_rate < 1%` (**operation failures**: operations that failed after their retries), `request_failure_rate < 5%` (**request failures**: attempts answered 5xx or not at all), `transport_error_rate < 1%` (**transport errors**: attempts not answered), `throughput > 500/s`; with `harness run` on the client's figures, with `analyze`/`exec` on the journal's (an operation there: the requests that share an Idempotency-Key)",
        evidence: "rules are configured and at least one request was measured",
        limits: "a percentile the figures do not have makes it inconclusive",
    };

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(ThresholdsCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::{Entry, Outcome};
    use verdict::Latency;
    use verdict::Verdict;

    use super::{evaluate, Measured};
    use crate::testutil::{entry, run_one};
    use crate::ChecksConfig;

    const NAME: &str = "thresholds";

    /// 100 requests over ~1 s: latencies 1..=100 ms, the last `errors` of them 503.
    fn journal(errors: u64) -> Vec<Entry> {
        (1..=100u64)
            .map(|i| {
                let e = entry(i, (i * 10) as u32).took(i as u32);
                if i > 100 - errors {
                    e.status(503).build()
                } else {
                    e.build()
                }
            })
            .collect()
    }

    /// An empty journal holds every latency and error-rate rule vacuously: not a pass.
    #[test]
    fn no_request_measured_is_no_evidence() {
        let r = evaluate(
            &[crate::threshold_rules::Rule::parse("error_rate < 1%").expect("rule")],
            &Measured {
                error_rate: Some(0.0),
                ..Measured::default()
            },
        );
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
        assert!(
            r.summary.contains("no request was measured"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn passes_rules_that_hold_on_the_journal() {
        let cfg =
            r#"{ rules: ["p99 < 200ms", "p50 <= 51ms", "error_rate < 1%", "throughput > 50/s"] }"#;
        let r = run_one(NAME, cfg, &journal(0));
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        let p50 = r.metrics["latency_p50_ms"].as_f64().unwrap_or(f64::NAN);
        assert!((49.9..=50.1).contains(&p50), "{p50}");
        let tput = r.metrics["throughput_rps"].as_f64().unwrap_or(f64::NAN);
        assert!((90.0..=110.0).contains(&tput), "{tput}");
    }

    #[test]
    fn fails_latency_and_error_rules_with_seqs() {
        let cfg = r#"{ rules: ["p99 < 50ms", "error_rate < 1%"] }"#;
        let r = run_one(NAME, cfg, &journal(3));
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.evidence.len(), 2);
        assert_eq!(r.evidence[0].seqs, vec![100, 99, 98, 97, 96]);
        assert!(
            r.evidence[1].detail.contains("is 3%"),
            "{}",
            r.evidence[1].detail
        );
        assert_eq!(r.evidence[1].seqs, vec![98, 99, 100]);
    }

    #[test]
    fn no_response_counts_as_an_error() {
        let mut j = journal(0);
        j[0] = entry(1, 10).no_response(Outcome::Reset).build();
        let r = run_one(NAME, r#"{ rules: ["error_rate <= 1%"] }"#, &j);
        assert_eq!(r.verdict, Verdict::Pass);
        let r = run_one(NAME, r#"{ rules: ["error_rate < 1%"] }"#, &j);
        assert_eq!(
            r.verdict,
            Verdict::Fail,
            "borderline: exactly 1% is not < 1%"
        );
    }

    #[test]
    fn external_figures_from_the_driver() {
        let latency = Latency {
            p50: 12.0,
            p90: 40.0,
            p99: 250.0,
            p999: 400.0,
            max: 500.0,
            mean: 20.0,
            count: 1000,
        };
        let m = Measured {
            error_rate: Some(0.001),
            ..Measured::from_summary(latency, Some(800.0))
        };
        let rules = |v: &[&str]| -> Vec<super::Rule> {
            v.iter()
                .map(|s| s.parse().unwrap_or_else(|e| panic!("{e}")))
                .collect()
        };
        let r = evaluate(&rules(&["p99 < 200ms", "throughput > 500/s"]), &m);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(r.summary.contains("is 250 ms"), "{}", r.summary);
        let r = evaluate(&rules(&["p50 < 20ms", "error_rate < 1%"]), &m);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        // A summary has no p95: inconclusive rather than a guess.
        let r = evaluate(&rules(&["p95 < 200ms"]), &m);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.summary);
    }

    #[test]
    fn bad_rules_fail_the_config_with_line_and_column() {
        let err =
            ChecksConfig::from_yaml("thresholds:\n  rules: [\"p99 < 200ms\", \"p99 < 2xs\"]\n")
                .expect_err("bad unit");
        let msg = err.to_string();
        assert!(msg.contains("column 8: expected a duration unit"), "{msg}");
        assert!(msg.contains("thresholds.rules[1]"), "{msg}");
        assert!(msg.starts_with("checks:2:"), "{msg}");
        assert_eq!(
            run_one(NAME, "{}", &journal(0)).verdict,
            Verdict::Inconclusive
        );
    }

    #[test]
    fn the_clients_figures_speak_for_the_users_when_the_harness_drove_the_load() {
        use history::{ClientFigures, Facts};
        // The server answered every request in at most 100 ms …
        let j = journal(0);
        assert_eq!(
            run_one(NAME, "{ rules: [\"p99 < 200ms\"] }", &j).verdict,
            Verdict::Pass
        );
        // … but the client measured 500 ms per request, and half its operations failed.
        let mut latency =
            hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram");
        for _ in 0..100 {
            latency.record(500_000).expect("in range");
        }
        let facts = Facts {
            client: Some(ClientFigures {
                operations: 100,
                failed_operations: 50,
                sent: 100,
                completed: 100,
                failed_attempts: 0,
                transport_errors: 0,
                latency,
                duration: std::time::Duration::from_secs(10),
            }),
            ..Facts::default()
        };
        let r = crate::testutil::judge_one(NAME, "{ rules: [\"p99 < 200ms\"] }", &j, &facts);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("client-side"), "{}", r.summary);
        let r = crate::testutil::judge_one(
            NAME,
            "{ rules: [\"error_rate < 10%\", \"throughput > 5/s\"] }",
            &j,
            &facts,
        );
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        let r = crate::testutil::judge_one(NAME, "{ rules: [\"throughput > 5/s\"] }", &j, &facts);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }
}
